-- dlock: reentrant distributed locks on Redis for plain Lua.
-- The C core (dlock.core) owns connections, scripts, the hold registry and
-- the watchdog thread; this file adds what reads best in Lua: scoped use.
local core = require "dlock.core"

local Lock, Client = core.Lock, core.Client
local pcall, select, error, type = pcall, select, error, type
local pack, unpack = table.pack, table.unpack

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
  local res = pack(pcall(fn, ...))
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

return {
  _VERSION = core._VERSION,
  connect = core.connect,
  now = core.now,
  sleep = core.sleep,
}
