-- dlock: reentrant distributed locks on Redis for plain Lua.
-- The C core (dlock.core) owns connections, scripts, the hold registry and
-- the watchdog thread. This file, the module users require, adds what
-- reads best in Lua: scoped use (with), connect's scheduler, and the
-- acquire that yields to it. One home per primitive beside it:
-- dlock/sched.lua (waits that yield to an event loop), dlock/multi.lua
-- (multi_lock) and dlock/semaphore.lua (semaphore).

-- The require that loads dlock: the global one, except in a sandbox whose
-- global require is a stub that raises. A Luanti (Minetest) mod is such a
-- sandbox: a trusted mod loads dlock with the real require of its
-- insecure environment, ie.require("dlock"), while this chunk still sees
-- the sandbox's globals. That real require is the function running this
-- chunk, so the rest of dlock is loaded with it. (Plain Lua never comes
-- here: its require can always load "package", which is loaded.) The
-- other files of dlock take their require the same way, in one line.
local require = require
if not pcall(require, "package") and debug and debug.getinfo then
  local caller = debug.getinfo(2, "f")
  if caller then require = caller.func end
end

-- Lua 5.1 and LuaJIT mark a module as being loaded in package.loaded while
-- its chunk runs, and leave the mark if the chunk raises: a second
-- require "dlock" then says "loop or previous error loading module"
-- instead of what went wrong. So a part that fails to load removes it.
local modname = ...
local function need(name)
  local ok, mod = pcall(require, name)
  if ok then return mod end
  local has, pkg = pcall(require, "package")
  if has and type(modname) == "string" then pkg.loaded[modname] = nil end
  error(mod, 0)
end

local core = need "dlock.core"
local sched = need "dlock.sched"

local Lock, Client = core.Lock, core.Client
local error, type = error, type
local unpack = table.unpack or unpack                     -- Lua 5.1, LuaJIT
local plain51, isyieldable, guard = sched.plain51, sched.isyieldable, sched.guard
local callable, scheduler, nudges = sched.callable, sched.scheduler, sched.nudges

-- Release after fn returned normally: true, results... or nil, err, results...
local function finish(lock, res)
  local ok, err = lock:release()
  if ok or err:find("^not held") then   -- fn may have released it itself
    return true, unpack(res, 2, res.n)
  end
  return nil, err, unpack(res, 2, res.n)  -- "lost ...": the work was unprotected
end

local function check_fn(fn, arg)
  if not callable(fn) then
    error(("bad argument #%d to 'with' (function expected, got %s)")
          :format(arg, type(fn)), 3)
  end
end

local function run(lock, opts, fn, ...)
  local ok, err, ttl = lock:_acquire_as(opts, "with")
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
    return run(self:_lock(name, opts, "with"), nil, fn, ...)
  end
  check_fn(opts, 2)
  return run(self:_lock(name, nil, "with"), nil, opts, fn, ...)
end

local function connect(opts)
  local on_lost = type(opts) == "table" and opts.on_lost
  local wrap = plain51 and type(on_lost) == "function"     -- the core pcalls it
  if type(opts) == "table" and (opts.scheduler ~= nil or wrap) then
    local copy = setmetatable({}, getmetatable(opts))  -- (options from an __index)
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

-- A wait that ends between two steps gives up its claim as a waiter
-- (lock:_abandon: a lock's longest waiter, a place in a queue), as one
-- that times out does: when the scheduler's wait raises (caught by pcall,
-- which plain Lua 5.1 cannot yield across: there the claim is left, as a
-- dead waiter's), and on Lua 5.4 when the coroutine is closed meanwhile
-- (a to-be-closed value). Best effort: what the wait raised comes out.
local function abandon(self, step) pcall(self._abandon, self, step) end

local function steps(self, step, wait, nudge)
  while true do
    local done, a, b, c = self:_step(step)
    local fd = nudge and self:_drained(step)
    if fd then nudge(fd) end            -- others may wait on what it read
    if done then return a, b, c end
    if plain51 then
      wait(a, b, c)                     -- fd, seconds, the socket's serial
    else
      local ok, err = pcall(wait, a, b, c)
      if not ok then
        abandon(self, step)
        error(err, 0)
      end
    end
  end
end

local closing = _VERSION == "Lua 5.4" and type(load) == "function" and
  assert(load([[
    local steps, abandon, setmetatable = ...
    local mt = { __close = function(t) if t.step then abandon(t.self, t.step) end end }
    return function(self, step, wait, nudge)
      local w <close> = setmetatable({ self = self, step = step }, mt)
      local a, b, c = steps(self, step, wait, nudge)
      w.step = nil                      -- it ended: nothing to give up
      return a, b, c
    end]], "=(dlock.lua: closing)"))(steps, abandon, setmetatable)

-- lock:acquire(opts) for the public function fname, which misuse names:
-- with a scheduler and a coroutine that can yield, each wait yields to
-- the loop; otherwise the core blocks. The core checks self. (A
-- multi-lock has its own.)
local blocking, scheduler_of, step_new = Lock._acquire, Lock._scheduler, Lock._acquire_step
local function acquire_as(self, opts, fname)
  local wait = isyieldable() and scheduler_of(self)
  if not wait then return blocking(self, opts, fname) end
  return (closing or steps)(self, step_new(self, opts, fname), wait, nudges[wait])
end
Lock._acquire_as = acquire_as

--- lock:acquire([opts]) -> lock | nil, err [, ttl]
function Lock:acquire(opts)
  return acquire_as(self, opts, "acquire")
end

need "dlock.multi"                 -- client:multi_lock (uses Lock.with)
need "dlock.semaphore"             -- client:semaphore

return {
  _VERSION = core._VERSION,
  connect = connect,
  now = core.now,
  sleep = core.sleep,
}
