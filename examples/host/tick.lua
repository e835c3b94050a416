-- Jobs for examples/host/host.c: the host resumes each job once per tick
-- and sets TICK. With a table scheduler whose wait yields, a job waiting
-- for a lock hands the tick back to the host instead of blocking it.
local dlock = require "dlock"

local client = assert(dlock.connect{
  url = arg[1] or os.getenv("REDIS_URL") or "redis://127.0.0.1:6379/0",
  scheduler = { wait = function(fd, timeout) coroutine.yield() end },
})
local name = ("host-demo:%d"):format(os.time())
local got_at, heartbeat = nil, 0

local function ticks(n) for _ = 1, n do coroutine.yield() end end

return {
  function()                              -- holds the lock for 200 ticks
    local lock = client:lock(name)
    assert(lock:acquire())
    print(("tick %d: holder has the lock"):format(TICK))
    ticks(200)
    lock:release()
    print(("tick %d: holder released it"):format(TICK))
  end,
  function()                              -- waits for it, yielding each tick
    ticks(10)
    local lock = client:lock(name)
    print(("tick %d: waiter asks for the lock"):format(TICK))
    assert(lock:acquire{ wait = 30 })
    got_at = TICK
    print(("tick %d: waiter has the lock"):format(TICK))
    lock:release()
  end,
  function()                              -- other work goes on meanwhile
    while not got_at do
      heartbeat = heartbeat + 1
      coroutine.yield()
    end
    print(("heartbeat ran %d times while the waiter waited"):format(heartbeat))
    assert(heartbeat > 150, "the loop stalled")
    client:close()
  end,
}
