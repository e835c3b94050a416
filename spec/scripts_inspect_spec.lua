-- inspect.lua driven step by step (spec/inspect_spec.lua drives it
-- through client:inspect): who holds a lock, read from the hash the
-- other scripts leave, in the states a client only meets when a reply is
-- lost (a cancelled acquire, a released lock's record, a reader whose
-- lease ran out, keys expired or evicted); it changes nothing.
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key, q

local function setup_scripts() sha = helper.load_scripts(srv) end
local function fresh_lock()
  key = "i{" .. helper.unique_name("inspect") .. "}"
  q = key .. ":q"
  d = drive.new(srv, sha, key)
end

-- The reply decoded: {0} | {1, token, pttl, {owner, count, ...},
-- {requester, ...}, queued, subscribers, writer}.
local function inspect()
  return (drive.eval_json(srv, sha, "inspect", { lock = key, queue = q },
                          { chan = key .. ":ch", verb = "numsub" }))
end
-- The owners list as owner -> count.
local function owners(r)
  local o = {}
  for i = 1, #r[4], 2 do o[r[4][i]] = tonumber(r[4][i + 1]) end
  return o
end

describe("inspect.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("names the owners with their holds, token, TTL, and the writer; changes nothing", function()
    local t = d.acquire("a", "a", 1, 20000)[3]
    d.acquire("a", "a", 2, 20000, 1, t)
    local before, pttl = d.hash(), d.pttl()
    local r = inspect()
    assert.equals(1, r[1])
    assert.equals(tostring(t), r[2])
    assert.is_true(r[3] > 0 and r[3] <= pttl, tostring(r[3]))
    assert.same({ a = 2 }, owners(r))
    assert.same({}, r[5])                               -- a coroutine owner's requester: no client id
    assert.equals(0, r[6])
    assert.equals(0, r[7])
    assert.equals("", r[8])
    assert.same(before, d.hash())
    assert.is_true(d.pttl() <= pttl)                    -- not renewed
  end)

  it("lists the clients acting for an explicit owner, and the subscribers", function()
    local _, stop = d.listen(key .. ":ch")
    finally(stop)
    local t = d.acquire("job", "A|job", 1)[3]
    d.acquire("job", "B|job", 1)
    local r = inspect()
    assert.same({ job = 2 }, owners(r))
    table.sort(r[5])
    assert.same({ "A|job", "B|job" }, r[5])
    assert.equals(1, r[7])
    assert.same({ 1, 1 }, d.release("job", "A|job", 2, t))
    r = inspect()
    assert.same({ job = 1 }, owners(r))
    table.sort(r[5])
    assert.same({ "A|job", "B|job" }, r[5])             -- A's record stays (a resend may come)
  end)

  it("leaves out a shared owner's holds whose client's share ended, and that client", function()
    d.acquire("job", "A|job", 1)
    d.acquire("job", "B|job", 1)
    srv.cli("hset", key, "dA|job", "1", "D", "1")       -- A's lease is over
    local r = inspect()
    assert.same({ job = 1 }, owners(r))
    assert.same({ "B|job" }, r[5])
    assert.equals("2", d.field("n"))                    -- inspect changes nothing
    srv.cli("hset", key, "dB|job", "1")
    assert.same({ 0 }, inspect())                       -- no share left
  end)

  it("is {0} for a lock never held, released, or whose acquire was cancelled", function()
    assert.same({ 0 }, inspect())
    local t = d.acquire("a", "a", 1)[3]
    d.release("a", "a", 2, t)
    assert.is_true(d.exists())                          -- the record
    assert.same({ 0 }, inspect())
    d.acquire("b", "b", 1)
    assert.same({ 1 }, d.void("b", "b", 1))
    assert.same({ 0 }, inspect())
  end)

  it("is {0} once the hold expired or its key was evicted", function()
    d.acquire("a", "a", 1, 50)
    d.expire_now()
    assert.same({ 0 }, inspect())
    d.acquire("a", "a", 2)
    srv.cli("del", key)
    assert.same({ 0 }, inspect())
  end)

  it("leaves out readers whose own lease ran out, and is {0} when none is left", function()
    local t = d.rw_acquire("r", "r1", 1, 10000)[3]
    d.rw_acquire("r", "r2", 1, 1500)
    assert.same({ r1 = 1, r2 = 1 }, owners(inspect()))
    assert.is_true(d.wait_until(tonumber(d.field("er2")) + 5))
    assert.same({ r1 = 1 }, owners(inspect()))
    assert.equals("2", d.field("n"))                    -- not taken out: inspect changes nothing
    assert.same({ 1, 0 }, d.release("r1", "r1", 2, t))
    assert.equals("1", d.field("n"))                    -- r2 still counted...
    assert.same({ 0 }, inspect())                       -- ...but no live owner
  end)

  it("names the writer of a read-write lock", function()
    local t = d.rw_acquire("w", "w1", 1, 10000)[3]
    local r = inspect()
    assert.equals(tostring(t), r[2])
    assert.equals("w1", r[8])
    assert.same({ w1 = 1 }, owners(r))
  end)

  it("counts a fair lock's queue and a semaphore's live waiters", function()
    d.fair_acquire("h", "h", 1)
    for i = 1, 2 do d.fair_acquire("w" .. i, "w" .. i, 1, "0123456789abcdef") end
    assert.equals(2, inspect()[6])
    fresh_lock()
    d.sem_acquire("A:p1", 1, 1)                         -- one permit
    d.sem_acquire("B:p1", 1, 1)
    d.sem_acquire("C:p1", 1, 1)
    local r = inspect()
    assert.equals(2, r[6])
    assert.equals("0", r[2])                            -- permits have no token
    srv.cli("zadd", q, 1, "old:p1")                     -- a registration long lapsed
    assert.equals(2, inspect()[6])
    srv.cli("del", q)
    assert.equals(0, inspect()[6])
  end)
end)
