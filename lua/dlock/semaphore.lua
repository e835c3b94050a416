-- dlock.semaphore: client:semaphore, at most N holders at once. Part of
-- dlock's Lua half (dlock.lua), which loads it; not a public module. (Its
-- permits are locks of the core: client:_permit.)
-- The require that loads this file: the global one, or, in a sandbox whose
-- global require is a stub, the one running this chunk (see dlock.lua).
local require = pcall(require, "package") and require or debug.getinfo(2, "f").func
local core = require "dlock.core"
local Client = core.Client
local error, type = error, type

-- "integer" for a number with an exact integer value (math.type on 5.3+).
local mtype = math.type or function(x)
  if type(x) ~= "number" then return nil end
  return x % 1 == 0 and x > -2^53 and x < 2^53 and "integer" or "float"
end

-- client:semaphore(name, permits): at most `permits` holders at once. Each
-- permit is a hold of its own (an explicit owner, the permit id), so it is
-- renewed by the watchdog while held without `expire`, ends with its lease
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
                        probe = self:_permit(name, "probe", permits, "semaphore") }, Semaphore)
end

-- (lease: the old name of expire, as on a lock; the lock's acquire tells so)
local ACQUIRE_OPTS = { wait = true, expire = true, lease = true }

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
  local id = ("%s:p%d"):format(self.client.id or "closed", permits_taken)
  local permit = self.client:_permit(self.name, id, self.permits, "acquire")
  local ok, err, ttl = permit:acquire(opts and { wait = opts.wait, expire = opts.expire,
                                                 lease = opts.lease })
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

return Semaphore
