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

--- lock:with(fn, ...) -> true, fn(...) | nil, err | nil, "lost...", fn(...)
-- Acquires with the lock's defaults, runs fn, releases in every case.
-- An error raised by fn is re-raised unchanged once the lock is released.
function Lock:with(fn, ...)
  if type(fn) ~= "function" and not (getmetatable(fn) or {}).__call then
    error("bad argument #1 to 'with' (function expected, got " .. type(fn) .. ")", 2)
  end
  local ok, err = self:acquire()
  if not ok then return nil, err end
  local res = pack(pcall(fn, ...))
  if not res[1] then
    self:release()
    error(res[2], 0)
  end
  return finish(self, res)
end

--- client:with(name, [opts,] fn, ...) == client:lock(name, opts):with(fn, ...)
function Client:with(name, opts, fn, ...)
  if type(opts) == "table" then
    return self:lock(name, opts):with(fn, ...)
  end
  return self:lock(name):with(opts, fn, ...)
end

return {
  _VERSION = core._VERSION,
  connect = core.connect,
  now = core.now,
  sleep = core.sleep,
}
