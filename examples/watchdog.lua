-- A job that runs three times longer than the lease: the watchdog thread
-- renews the lease every lease/3, so nobody else can take the lock meanwhile.
local dlock = require "dlock"

local url = os.getenv("REDIS_URL")
local client = assert(dlock.connect{ url = url, lease = 1,
  on_lost = function(lock, why) print("LOST", lock.name, why) end })
local rival = assert(dlock.connect(url))

local lock = client:lock("nightly-report")
assert(lock:acquire())
local t0 = dlock.now()
for step = 1, 6 do
  dlock.sleep(0.5)                               -- "work"
  print(("t=%.1fs  ttl=%.2fs  rival gets it: %s"):format(dlock.now() - t0,
    lock:ttl(), tostring(rival:lock("nightly-report"):try_acquire() ~= nil)))
end
print("renewals:", client:stats().renewed, "release:", lock:release())
rival:close()
client:close()
