-- lighttpd mod_magnet and dlock: the recipe for a host that cannot yield.
-- A magnet script runs to completion on lighttpd's one event thread, so a
-- wait would stall every connection of the server: take the lock without
-- waiting, and when it is busy answer 503 with a Retry-After of the
-- holder's TTL.
local dlock = require "dlock"

-- Connect lazily, once per process; keep the client in package.loaded,
-- which outlives the globals lighttpd gives each request.
local client = package.loaded["dlock.lighttpd.client"]
if not client then
  client = assert(dlock.connect(os.getenv("REDIS_URL") or "redis://127.0.0.1:6379/0"))
  package.loaded["dlock.lighttpd.client"] = client
end

local lock = client:lock(os.getenv("DLOCK_DEMO_LOCK") or "lighttpd-demo")
local ok, err, ttl = lock:try_acquire()
if not ok then
  lighty.r.resp_header["Retry-After"] = tostring(math.max(1, math.ceil(ttl or 1)))
  lighty.r.resp_body:set({ "busy: " .. tostring(err) .. "\n" })
  return 503
end
local done, why = pcall(function()
  -- the work, under the lock (keep it short: it blocks the server too)
  lighty.r.resp_body:set({ ("done with token %d\n"):format(lock:token()) })
end)
lock:release()
if not done then error(why, 0) end
return 200
