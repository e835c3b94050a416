-- sched.lua: one bench run of N coroutines of one Lua state contending for
-- one lock under a scheduler (run.lua's M4). Each holds the lock for 1 ms
-- of work that yields to the loop (so the others are waiting), releases,
-- steps back 1 ms, and asks again, until the time is up. Prints one line:
--   count <total> jain <index> h50 <ms> h99 <ms> per <c1,c2,...>
-- where a handoff is the time from one coroutine's release to another's
-- acquire returning, when that one was already waiting.
--   lua5.4 bench/sched.lua URL cqueues|luv N SECONDS
local dlock = require "dlock"
local url, kind, n, secs = arg[1], arg[2], tonumber(arg[3]), tonumber(arg[4])
local now = dlock.now
local client = assert(dlock.connect{ url = url, scheduler = kind })
local name = ("bench:sched:%s:%d"):format(kind, math.floor(now() * 1e6))

local counts, handoffs = {}, {}
local released_at, released_by = nil, nil
local stop

local function body(i, sleep)
  counts[i] = 0
  local lock = client:lock(name)
  while now() < stop do
    local asked = now()
    assert(lock:acquire())
    local got = now()
    if released_by and released_by ~= i and asked < released_at then
      handoffs[#handoffs + 1] = (got - released_at) * 1000
    end
    counts[i] = counts[i] + 1
    sleep(0.001)                          -- the work: other coroutines run
    released_by, released_at = i, now()
    assert(lock:release())
    sleep(0.001)
  end
end

if kind == "cqueues" then
  local cqueues = require "cqueues"
  local cq = cqueues.new()
  stop = now() + secs
  for i = 1, n do cq:wrap(function() body(i, cqueues.sleep) end) end
  assert(cq:loop())
else
  local uv = require "luv"
  local function sleep(s)
    local co, t = coroutine.running(), uv.new_timer()
    t:start(math.max(1, math.floor(s * 1000)), 0, function()
      t:close()
      assert(coroutine.resume(co))
    end)
    coroutine.yield()
  end
  stop = now() + secs
  for i = 1, n do coroutine.wrap(function() body(i, sleep) end)() end
  uv.run()
end
client:close()

table.sort(handoffs)
local function pct(p)
  if #handoffs == 0 then return 0 / 0 end
  return handoffs[math.max(1, math.ceil(#handoffs * p))]
end
local s, s2, total = 0, 0, 0
for _, c in ipairs(counts) do s, s2, total = s + c, s2 + c * c, total + c end
print(("count %d jain %.4f h50 %.4f h99 %.4f per %s"):format(total,
  s2 > 0 and s * s / (#counts * s2) or 0, pct(0.5), pct(0.99), table.concat(counts, ",")))
