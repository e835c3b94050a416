-- dlock.multi: client:multi_lock, one lock over several names. Part of
-- dlock's Lua half (dlock.lua), which loads it; not a public module.
-- The require that loads this file: the global one, or, in a sandbox whose
-- global require is a stub, the one running this chunk (see dlock.lua).
local require = pcall(require, "package") and require or debug.getinfo(2, "f").func
local core = require "dlock.core"
local Client, Lock = core.Client, core.Lock
local pcall, error, type = pcall, error, type

-- client:multi_lock{ "a", "b", ... } is one lock over all the names: its
-- acquire takes the names' locks one by one in one global order (sorted
-- bytes), and never waits while it holds one it took (see acquire), so
-- two multi-locks over overlapping names, given in any order, never wait
-- for each other in a cycle; if one name cannot be had, the names already
-- taken are released (all or none). Each name is a lock of
-- its own (its own node on Cluster, its own token, its own watchdog
-- renewal and on_lost, which receives that name's lock), so this adds no
-- wait loop and no script: waits yield under a scheduler like any lock's.

local MultiLock = {}
MultiLock.__index = MultiLock

local now = core.now

function Client:multi_lock(names, opts)
  if type(names) ~= "table" then
    error(("bad argument #1 to 'multi_lock' (table of lock names expected, got %s)")
          :format(type(names)), 2)
  end
  local seen, sorted = {}, {}
  for i, n in ipairs(names) do
    if type(n) ~= "string" or n == "" then
      error(("bad argument #1 to 'multi_lock' (name #%d: a non-empty string expected, got %s)")
            :format(i, type(n) == "string" and "an empty string" or type(n)), 2)
    end
    if not seen[n] then seen[n] = true; sorted[#sorted + 1] = n end
  end
  if #sorted == 0 then
    error("bad argument #1 to 'multi_lock' (at least one lock name expected)", 2)
  end
  table.sort(sorted)
  local locks = {}
  for i, n in ipairs(sorted) do locks[i] = self:_lock(n, opts, "multi_lock") end
  return setmetatable({ names = sorted, name = table.concat(sorted, ","),
                        locks = locks, wait = opts and opts.wait }, MultiLock)
end

-- A copy of acquire's opts with wait set to `wait`.
local function with_wait(opts, wait)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.wait = wait
  return o
end

-- Release one hold of each lock of `taken`, in reverse order, whatever
-- one of them answers or raises.
local function give_back(taken)
  for j = #taken, 1, -1 do pcall(taken[j].release, taken[j]) end
end

-- One pass over the names in order, one attempt each (try_acquire: it
-- never waits, so never yields, and pcall may wrap it on every Lua
-- version), holding `got` (locks[1], taken by a wait) if given. Returns
-- true with every name held; or, with none held, false, the busy lock,
-- err [, ttl]. What an attempt raises is raised again with none held.
local function take_all(self, try, got)
  local taken = { got }
  for _, lock in ipairs(self.locks) do
    if lock ~= got then
      local ok, res, err, ttl = pcall(lock.try_acquire, lock, try)
      if not ok or not res then give_back(taken) end
      if not ok then error(res, 0) end
      if not res then return false, lock, err, ttl end
      taken[#taken + 1] = lock
    end
  end
  return true
end

-- multi:_acquire_as(opts, fname): multi:acquire, for the public function
-- fname, which misuse names. Every name, or none.
-- A multi-lock never waits while it holds a name it took: a pass tries
-- every name once, in order; when one is busy, the pass gives back what
-- it took and waits for that name alone, holding nothing. So whatever
-- ends the acquire while it waits (the scheduler's wait raising, the
-- coroutine closed, or dropped and never resumed), no name is held for
-- it; and no two multi-locks wait for each other in a cycle. A name won
-- by the wait is kept for the next pass when it is the first in order
-- (the passes then take names in the one global order, so two passes
-- cannot each hold what the other wants next), else given back at once.
function MultiLock:_acquire_as(opts, fname)
  self.locks[1]:_acquire_step(opts, fname)  -- raises on bad opts, as acquire; no I/O
  local wait = opts and opts.wait
  if wait == nil then wait = self.wait end
  local deadline = type(wait) == "number" and wait < math.huge and now() + wait
  local try, got = with_wait(opts, 0), nil
  while true do
    local ok, busy, err, ttl = take_all(self, try, got)
    if ok then return self end
    got = nil                           -- nothing is held here
    if not err:find("^timeout") then return nil, err, ttl end
    local left = deadline and deadline - now()
    if left and left <= 0 then return nil, err, ttl end
    local res, err2, ttl2 = busy:_acquire_as(with_wait(opts, left or math.huge), fname)
    if not res then return nil, err2, ttl2 end
    if busy == self.locks[1] then
      got = busy
    else
      give_back({ busy })               -- free now: the next pass takes it in order
    end
  end
end

--- multi:acquire([opts]) -> multi | nil, err [, ttl]: every name, or none.
function MultiLock:acquire(opts)
  return self:_acquire_as(opts, "acquire")
end

--- multi:try_acquire([opts]): acquire{ wait = 0 }, whatever opts.wait says.
function MultiLock:try_acquire(opts)
  self.locks[1]:_acquire_step(opts, "try_acquire")  -- a table, or raise
  return self:_acquire_as(with_wait(opts, 0), "try_acquire")
end

--- multi:release() -> true, remaining | nil, err: one hold of every name.
--- Every name is released even when one reports an error; the first
--- "lost" (else "not held") is returned.
function MultiLock:release()
  local first, remaining = nil, nil
  for i = #self.locks, 1, -1 do
    local ok, r = self.locks[i]:release()
    if ok then
      remaining = remaining and math.min(remaining, r) or r
    elseif not first or (r:find("^lost") and not first:find("^lost")) then
      first = r
    end
  end
  if first then return nil, first end
  return true, remaining
end

function MultiLock:held()
  for _, lock in ipairs(self.locks) do
    if not lock:held() then return false end
  end
  return true
end

function MultiLock:count()
  local n
  for _, lock in ipairs(self.locks) do
    local c = lock:count()
    n = n and math.min(n, c) or c
  end
  return n
end

--- multi:tokens() -> { name = token, ... } while held, else nil.
function MultiLock:tokens()
  if not self:held() then return nil end
  local t = {}
  for i, lock in ipairs(self.locks) do t[self.names[i]] = lock:token() end
  return t
end

--- multi:token(): one token would fence nothing here; tokens() has them.
function MultiLock:token()
  error("a multi-lock has one fencing token per name: use tokens()", 2)
end

--- multi:ttl() -> the shortest remaining lease among the names, or nil
--- when one of them is absent (or nil, err).
function MultiLock:ttl()
  local least
  for _, lock in ipairs(self.locks) do
    local t, err = lock:ttl()
    if not t then return nil, err end
    least = least and math.min(least, t) or t
  end
  return least
end

--- multi:extend(seconds) -> true | nil, err (every name is tried).
function MultiLock:extend(seconds)
  local first
  for _, lock in ipairs(self.locks) do
    local ok, err = lock:extend(seconds)
    if not ok and not first then first = err end
  end
  if first then return nil, first end
  return true
end

--- multi:force_release() -> whether any of the names was held.
function MultiLock:force_release()
  local any = false
  for _, lock in ipairs(self.locks) do
    local existed, err = lock:force_release()
    if existed == nil then return nil, err end
    any = any or existed
  end
  return any
end

MultiLock.with = Lock.with
MultiLock.__close = function(self) self:release() end
MultiLock.__tostring = function(self) return "dlock.MultiLock: " .. self.name end

return MultiLock
