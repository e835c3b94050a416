-- The ten-line tour: connect, take a lock, do the work, release on scope exit.
local dlock = require "dlock"

local client = assert(dlock.connect(os.getenv("REDIS_URL")))
local lock = client:lock("stock:42")

do
  local held <close> = assert(lock:acquire{ wait = 5 })  -- released at `end`
  print(("holding %s, fencing token %d, lease %.1f s left"):format(
    lock.name, lock:token(), lock:ttl()))
end
print("after the block, held:", lock:held())

-- Or as a closure: released whatever fn does, fn's results passed through.
print("with:", client:with("stock:42", function(a, b) return a + b end, 40, 2))
client:close()
