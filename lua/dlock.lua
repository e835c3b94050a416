-- dlock: reentrant distributed locks on Redis for plain Lua.
-- The C core (dlock.core) owns connections, scripts, the hold registry and
-- the watchdog thread; this file adds what reads best in Lua: scoped use.
local core = require "dlock.core"

local Lock, Client = core.Lock, core.Client
local pcall, select, error, type = pcall, select, error, type
local unpack = table.unpack or unpack                     -- Lua 5.1, LuaJIT
local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local running = coroutine.running

-- "integer" for a number with an exact integer value (math.type on 5.3+).
local mtype = math.type or function(x)
  if type(x) ~= "number" then return nil end
  return x % 1 == 0 and x > -2^53 and x < 2^53 and "integer" or "float"
end

-- Whether a wait may yield to a scheduler here. Plain Lua 5.1 (not
-- LuaJIT) has no isyieldable and cannot yield across pcall: there the
-- main thread, the fn of a `with` and an on_lost callback (guard below
-- counts them) block instead.
local plain51 = _VERSION == "Lua 5.1" and not rawget(_G, "jit")
local guarded = setmetatable({}, { __mode = "k" })          -- coroutine -> depth
local isyieldable = not plain51 and coroutine.isyieldable or function()
  local co = running()
  return co ~= nil and not guarded[co]
end

-- pcall(fn, ...) as a table of results (n = their number); on plain 5.1,
-- waits inside fn know they cannot yield.
local function guard(fn, ...)
  local co = plain51 and running()
  if co then guarded[co] = (guarded[co] or 0) + 1 end
  local res = pack(pcall(fn, ...))
  if co then guarded[co] = guarded[co] > 1 and guarded[co] - 1 or nil end
  return res
end

-- Release after fn returned normally: true, results... or nil, err, results...
local function finish(lock, res)
  local ok, err = lock:release()
  if ok or err:find("^not held") then   -- fn may have released it itself
    return true, unpack(res, 2, res.n)
  end
  return nil, err, unpack(res, 2, res.n)  -- "lost ...": the work was unprotected
end

local function callable(f)
  return type(f) == "function" or
         (type(getmetatable(f)) == "table" and getmetatable(f).__call ~= nil)
end

local function check_fn(fn, arg)
  if not callable(fn) then
    error(("bad argument #%d to 'with' (function expected, got %s)")
          :format(arg, type(fn)), 3)
  end
end

local function run(lock, opts, fn, ...)
  local ok, err, ttl = lock:acquire(opts)
  if not ok then return nil, err, ttl end
  local res = guard(fn, ...)
  if not res[1] then
    lock:release()
    error(res[2], 0)
  end
  return finish(lock, res)
end

--- lock:with([opts,] fn, ...) -> true, fn(...) | nil, err | nil, "lost...", fn(...)
-- Acquires (with opts over the lock's defaults), runs fn, releases in
-- every case. An error raised by fn is re-raised unchanged once the lock
-- is released.
function Lock:with(opts, fn, ...)
  if type(opts) == "table" and not callable(opts) then
    check_fn(fn, 2)
    return run(self, opts, fn, ...)
  end
  check_fn(opts, 1)
  return run(self, nil, opts, fn, ...)
end

--- client:with(name, [opts,] fn, ...) == client:lock(name, opts):with(fn, ...)
function Client:with(name, opts, fn, ...)
  if type(opts) == "table" and not callable(opts) then
    check_fn(fn, 3)
    return run(self:lock(name, opts), nil, fn, ...)
  end
  check_fn(opts, 2)
  return run(self:lock(name), nil, opts, fn, ...)
end

-- ---- waits that yield to an event loop -------------------------------
--
-- With connect{ scheduler = S }, an acquire that must wait, called from a
-- coroutine that can yield, runs the core's acquire steps here and hands
-- each wait to S: wait(fd, seconds) returns when the subscriber socket fd
-- may be readable or the time has passed (early is fine; fd is nil when
-- there is no socket to watch). Elsewhere (the main coroutine, across a C
-- call) the acquire blocks in C as without a scheduler.

local resume, yield = coroutine.resume, coroutine.yield

-- cqueues: poll the socket from the running cqueue's coroutine. Several
-- coroutines may wait on one socket, and the first to run after it turns
-- readable reads it dry: so one polls the socket and, when it returns,
-- wakes the others, which wait on a condition meanwhile.
local function cqueues_wait()
  local ok, cqueues = pcall(require, "cqueues")
  if not ok then return nil, "cqueues is not installed" end
  local condition = require "cqueues.condition"
  local watch = {}                      -- fd -> { cond, polling }
  return function(fd, timeout)
    if not fd then return cqueues.sleep(timeout) end
    local w = watch[fd]
    if not w then
      w = { cond = condition.new() }
      watch[fd] = w
    end
    if w.polling then
      cqueues.poll(w.cond, timeout)
    else
      w.polling = true
      cqueues.poll({ pollfd = fd, events = "r" }, timeout)
      w.polling = false
      w.cond:signal()                   -- every other waiter looks again
    end
  end
end

-- luv: yield the coroutine; a poll handle on the socket, or a timer,
-- resumes it from the loop. One poll handle per socket, whatever the
-- number of coroutines waiting on it (libuv allows no more).
local function luv_wait()
  local ok, uv = pcall(require, "luv")
  if not ok then return nil, "luv is not installed" end
  local polls = {}                      -- fd -> { handle, waiting = {w = true} }
  -- End the wait w once, whoever ends it: a callback below, or another
  -- resume of the coroutine (then no callback may resume it later).
  local function finish(w)
    if w.done then return false end
    w.done = true
    w.timer:stop()
    w.timer:close()
    local p = w.fd and polls[w.fd]
    if p then
      p.waiting[w] = nil
      if next(p.waiting) == nil then
        p.handle:stop()
        p.handle:close()
        polls[w.fd] = nil
      end
    end
    return true
  end
  local function wake(w)
    if not finish(w) then return end
    local ok, err = resume(w.co)
    if not ok then error(err, 0) end    -- the coroutine's own error
  end
  return function(fd, timeout)
    local w = { co = running(), fd = fd, timer = uv.new_timer() }
    w.timer:start(math.ceil(timeout * 1000), 0, function() wake(w) end)
    if fd then
      local p = polls[fd]
      if not p then
        p = { handle = uv.new_socket_poll(fd), waiting = {} }
        polls[fd] = p
        p.handle:start("r", function()
          local all = {}                -- wake() changes p.waiting
          for x in pairs(p.waiting) do all[#all + 1] = x end
          for _, x in ipairs(all) do wake(x) end
        end)
      end
      p.waiting[w] = true
    end
    yield()
    finish(w)
  end
end

local builtin = { cqueues = cqueues_wait, luv = luv_wait }

-- The wait function for connect's scheduler option (raises on misuse).
local function scheduler(s)
  local what = "\"cqueues\", \"luv\" or a table with a wait function expected"
  if type(s) == "string" then
    local make = builtin[s]
    if not make then
      error(("bad option 'scheduler' to 'dlock.connect' (%s, got \"%s\")")
            :format(what, s), 3)
    end
    local wait, err = make()
    if not wait then
      error(("bad option 'scheduler' to 'dlock.connect' (%s)"):format(err), 3)
    end
    return wait
  end
  if type(s) == "table" and callable(s.wait) then
    local wait = s.wait
    return function(fd, timeout) return wait(fd, timeout) end
  end
  error(("bad option 'scheduler' to 'dlock.connect' (%s, got %s)")
        :format(what, type(s)), 3)
end

local function connect(opts)
  local on_lost = type(opts) == "table" and opts.on_lost
  local wrap = plain51 and type(on_lost) == "function"     -- the core pcalls it
  if type(opts) == "table" and (opts.scheduler ~= nil or wrap) then
    local copy = {}
    for k, v in pairs(opts) do copy[k] = v end
    if opts.scheduler ~= nil then copy.scheduler = scheduler(opts.scheduler) end
    if wrap then
      copy.on_lost = function(...)
        local res = guard(on_lost, ...)
        if not res[1] then error(res[2], 0) end
      end
    end
    opts = copy
  end
  return core.connect(opts)
end

local blocking_acquire = Lock.acquire

--- lock:acquire([opts]): with a scheduler and a coroutine that can yield,
--- each wait yields to the loop; otherwise the core blocks.
function Lock:acquire(opts)
  local wait = isyieldable() and self:_scheduler()
  if not wait then return blocking_acquire(self, opts) end
  local step = self:_acquire_step(opts)
  while true do
    local done, a, b, c = self:_step(step)
    if done then return a, b, c end
    wait(a, b)
  end
end

-- ---- multi-lock --------------------------------------------------------
--
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
  for i, n in ipairs(sorted) do locks[i] = self:lock(n, opts) end
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

--- multi:acquire([opts]) -> multi | nil, err [, ttl]: every name, or none.
-- A multi-lock never waits while it holds a name it took: a pass tries
-- every name once, in order; when one is busy, the pass gives back what
-- it took and waits for that name alone, holding nothing. So whatever
-- ends the acquire while it waits (the scheduler's wait raising, the
-- coroutine closed, or dropped and never resumed), no name is held for
-- it; and no two multi-locks wait for each other in a cycle. A name won
-- by the wait is kept for the next pass when it is the first in order
-- (the passes then take names in the one global order, so two passes
-- cannot each hold what the other wants next), else given back at once.
function MultiLock:acquire(opts)
  self.locks[1]:_acquire_step(opts)     -- raises on bad opts, as acquire; no I/O
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
    local res, err2, ttl2 = busy:acquire(with_wait(opts, left or math.huge))
    if not res then return nil, err2, ttl2 end
    if busy == self.locks[1] then
      got = busy
    else
      give_back({ busy })               -- free now: the next pass takes it in order
    end
  end
end

function MultiLock:try_acquire(opts)
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  o.wait = 0
  return self:acquire(o)
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

-- ---- semaphore -----------------------------------------------------------
--
-- client:semaphore(name, permits): at most `permits` holders at once. Each
-- permit is a hold of its own (an explicit owner, the permit id), so it is
-- renewed by the watchdog while held without `lease`, ends with its lease
-- when its holder dies, and waits (and yields under a scheduler) like a
-- lock's acquire. The limit and every expiry are kept in Redis, on its
-- clock; a released permit wakes one waiting client.

local Semaphore = {}
Semaphore.__index = Semaphore
local permits_taken = 0

function Client:semaphore(name, permits)
  if type(name) ~= "string" or name == "" then
    error(("bad argument #1 to 'semaphore' (non-empty semaphore name expected, got %s)")
          :format(type(name) == "string" and "an empty string" or type(name)), 2)
  end
  if mtype(permits) ~= "integer" or permits < 1 then
    error(("bad argument #2 to 'semaphore' (number of permits (a positive integer) expected, got %s)")
          :format(mtype(permits) or type(permits)), 2)
  end
  return setmetatable({ client = self, name = name, permits = permits, held = {},
                        probe = self:_permit(name, "probe", permits) }, Semaphore)
end

local ACQUIRE_OPTS = { wait = true, lease = true }

--- sem:acquire([opts]) -> permit id | nil, err [, ttl]
function Semaphore:acquire(opts)
  if opts ~= nil and type(opts) ~= "table" then
    error(("bad argument #1 to 'acquire' (options table expected, got %s)"):format(type(opts)), 2)
  end
  for k in pairs(opts or {}) do
    if not ACQUIRE_OPTS[k] then
      error(("bad option '%s' to 'acquire' (unknown option)"):format(tostring(k)), 2)
    end
  end
  permits_taken = permits_taken + 1
  local id = ("%s:p%d"):format(self.client.id, permits_taken)
  local permit = self.client:_permit(self.name, id, self.permits)
  local ok, err, ttl = permit:acquire{ wait = opts and opts.wait, expire = opts and opts.lease }
  if not ok then return nil, err, ttl end
  self.held[id] = permit
  return id
end

--- sem:release(id) -> true | nil, "not held" | nil, "lost..." | nil, err
function Semaphore:release(id)
  if type(id) ~= "string" then
    error(("bad argument #1 to 'release' (permit id expected, got %s)"):format(type(id)), 2)
  end
  local permit = self.held[id]
  if not permit then return nil, "not held" end
  self.held[id] = nil
  local ok, err = permit:release()
  if ok then return true end
  return nil, err
end

--- sem:available() -> how many permits are free now | nil, err
function Semaphore:available()
  return self.probe:_available()
end

Semaphore.__tostring = function(self)
  return ("dlock.Semaphore: \"%s\" (%d permits)"):format(self.name, self.permits)
end

return {
  _VERSION = core._VERSION,
  connect = connect,
  now = core.now,
  sleep = core.sleep,
}
