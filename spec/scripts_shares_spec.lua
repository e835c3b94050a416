-- A shared owner's shares (src/redis/scripts/lib/shares.lua) driven step by
-- step: each client's holds of an owner it shares with other clients end
-- with that client's own lease, whatever its co-owners' renewals and
-- joins do to the lock's TTL. A share's end is moved into the past with
-- HSET (d<requester>, D) where a spec needs it over, never raced.
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key

-- End requester req's share now (as if its client died a lease ago).
local function over(req)
  srv.cli("hset", key, "d" .. req, "1", "D", "1")
end

describe("a shared owner's shares #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function()
    key = "h{" .. helper.unique_name("shares") .. "}"
    d = drive.new(srv, sha, key)
  end)

  -- A's share (2 s) must outlast the seven redis-cli calls that follow
  -- it on a loaded machine (300 ms did not always), and no more.
  it("end each with its client's own lease: a co-owner's joins and renewals never extend it #timing", function()
    local before = d.now_ms()
    local t = d.acquire("job", "A|job", 1, 2000, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, 60000, nil, nil, 0))
    local h = d.hash()
    local da, db = tonumber(h["dA|job"]), tonumber(h["dB|job"])
    assert.is_true(da >= before + 2000 and da < db, h["dA|job"] .. " " .. h["dB|job"])
    assert.equals(da, tonumber(h.D))                 -- the first to end
    assert.same({ 1 }, d.renew("B|job", 60000, t))
    assert.equals(h["dA|job"], d.field("dA|job"))    -- B's renewal is B's alone
    assert.is_true(d.pttl() > 30000)                 -- the key lives on for B
    -- another owner is told to come back when A's share ends, not at the TTL
    local busy = d.acquire("x", "x", 1, nil, nil, nil, 0)
    assert.equals(0, busy[1])
    assert.is_true(busy[2] <= 2000, busy[2])
    assert(d.wait_until(da))                         -- A's lease is over
    assert.equals(0, d.acquire("x", "x", 2, nil, nil, nil, 0)[1])        -- B still holds...
    h = d.hash()
    assert.equals("1", h.n)                          -- ...alone: A's share ended
    assert.equals("1", h["ojob"])
    assert.is_nil(h["hA|job"])
    assert.is_nil(h["dA|job"])
    assert.equals(h["dB|job"], h.D)
    assert.same({ 1, 0 }, d.release("job", "B|job", 2, t))
    assert.is_true(helper.is_free(srv, key))
    assert.is_nil(d.hash().D)                        -- no share left
    assert.same({ 1, 1, t + 1 }, d.acquire("x", "x", 3, nil, nil, nil, 0))
  end)

  it("frees the lock at a co-owner's release once a dead client's share is over", function()
    local t = d.acquire("job", "A|job", 1, nil, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, nil, nil, nil, 0))
    over("A|job")
    local msgs, stop = d.listen(key .. ":ch")
    assert.equals(0, d.acquire("x", "x", 1, nil, nil, nil, 0)[1])        -- x waits (b is set)
    assert.same({ 1, 0 }, d.release("job", "B|job", 2, t))
    assert.is_true(helper.is_free(srv, key))
    assert(helper.wait_for(function() return #msgs() > 0 end, 2), "no wake-up published")
    stop()
    assert.same({ 1, 1, t + 1 }, d.acquire("x", "x", 2, nil, nil, nil, 0))
  end)

  it("frees the lock when the last share ends, for the next acquire", function()
    local t = d.acquire("job", "A|job", 1, nil, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, nil, nil, nil, 0))
    over("A|job")
    srv.cli("hset", key, "dB|job", "2")
    assert.same({ 1, 1, t + 1 }, d.acquire("x", "x", 1, nil, nil, nil, 0))  -- both over: free
    local h = d.hash()
    assert.is_nil(h["hA|job"])
    assert.is_nil(h["hB|job"])
    assert.is_nil(h["ojob"])
    assert.is_nil(h.D)
  end)

  it("answers lost to the client whose share is over: renew, extend, reentry, release, drop", function()
    local t = d.acquire("job", "A|job", 1, nil, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, nil, nil, nil, 0))
    over("A|job")
    assert.same({ 0 }, d.renew("A|job", 10000, t))
    assert.equals("1", d.field("ojob"))              -- the renewal ended it, no more
    assert.equals("", d.field("hA|job"))
    assert.equals(0, d.extend("A|job", 10000, t))
    assert.same({ -1 }, d.acquire("job", "A|job", 2, nil, 1, t, 0))
    assert.same({ -1 }, d.release("job", "A|job", 3, t))
    assert.equals(0, d.drop("job", 1, t, "A|job"))
    assert.same({ 1 }, d.renew("B|job", 10000, t))     -- B's hold is untouched
    assert.equals("1", d.field("n"))
    -- and A may join again, with a share of its own
    assert.same({ 1, 2, t }, d.acquire("job", "A|job", 4, nil, nil, nil, 0))
    assert.is_true(tonumber(d.field("dA|job")) > d.now_ms())
  end)

  it("lengthens only the extending client's share, never shortens it", function()
    local t = d.acquire("job", "A|job", 1, 10000, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, 10000, nil, nil, 0))
    local da = tonumber(d.field("dA|job"))
    assert.equals(1, d.extend("B|job", 60000, t))
    assert.equals(da, tonumber(d.field("dA|job")))
    assert.is_true(tonumber(d.field("dB|job")) >= da + 40000)
    assert.equals(1, d.extend("A|job", 10, t))         -- shorter: kept as it was
    assert.equals(da, tonumber(d.field("dA|job")))
  end)

  it("takes a client's share out with its last hold", function()
    local t = d.acquire("job", "A|job", 1, nil, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, nil, nil, nil, 0))
    assert.same({ 1, 1 }, d.release("job", "A|job", 2, t))
    local h = d.hash()
    assert.is_nil(h["dA|job"])
    assert.is_not_nil(h["dB|job"])
    assert.equals(1, d.drop("job", 1, t, "B|job"))
    h = d.hash()
    assert.is_nil(h["dB|job"])
    assert.is_nil(h.D)
    assert.equals("0", h.n)
  end)

  it("ends a fair lock's dead share and passes the lock on to the first waiter", function()
    local t = d.fair_acquire("job", "A|job", 1, "0123456789abcdef", 0, 0)[3]
    assert.same({ 1, 2, t }, d.fair_acquire("job", "B|job", 1, "0123456789abcdef", 0, 0))
    local busy = d.fair_acquire("x", "x", 1, "0123456789abcdef", 0, 0)           -- x queues
    assert.equals(0, busy[1])
    over("A|job")
    assert.same({ 1, 0 }, d.fair_release("job", "B|job", 2, t))
    assert.equals("x", d.field("g"))                 -- granted to x
    assert.equals("1", d.field("ox"))
    assert.equals("", d.field("ojob"))
  end)

  it("bounds a fair waiter's wait by the first share's end, and gives a shared grant a share #timing", function()
    local t = d.fair_acquire("job", "A|job", 1, "0123456789abcdef", 0, 0, 2000)[3]       -- outlasts the calls up to its release
    assert.same({ 1, 2, t }, d.fair_acquire("job", "B|job", 1, "0123456789abcdef", 0, 0, 60000))
    local busy = d.fair_acquire("x", "x", 1, "0123456789abcdef", 0, 0)
    assert.is_true(busy[2] <= 2000, busy[2])
    assert.same({ 1, 1 }, d.fair_release("job", "A|job", 2, t))
    assert.equals(0, d.fair_acquire("job2", "C|job2", 1, "0123456789abcdef", 0, 0)[1])   -- C (shared) queues
    srv.cli("hdel", key .. ":q", "H")                        -- (x: gone from the queue)
    srv.cli("hset", key .. ":q", "H", "C|job2")
    assert.same({ 1, 0 }, d.fair_release("job", "B|job", 2, t))
    assert.equals("C|job2", d.field("g"))
    local dc = tonumber(d.field("dC|job2"))
    assert.is_true(dc and dc <= d.now_ms() + 3000, tostring(dc))  -- the grant's lease
  end)

  it("end a shared reader's share with its own lease, whatever its co-owner renews #timing", function()
    local t = d.rw_acquire("r", "job", 1, 2000, 0, 0, nil, "A|job")[3]   -- outlasts the calls up to over()
    assert.same({ 1, 2, t }, d.rw_acquire("r", "job", 1, 60000, 0, 0, nil, "B|job"))
    assert.same({ 1 }, d.rw_renew("B|job", 60000, t))
    local busy = d.rw_acquire("W", "w", 1, nil, 0, 0, nil, "w")           -- a writer waits...
    assert.equals(0, busy[1])
    assert.is_true(busy[2] <= 2000, busy[2])            -- ...until A's share ends
    over("A|job")
    assert.same({ 1, 0 }, d.release("job", "B|job", 2, t))
    assert.equals(1, d.rw_acquire("W", "w", 2, nil, 0, 0, nil, "w")[1])   -- the writer gets it
  end)

  it("end a shared permit's share with its own lease", function()
    assert.same({ 1, 1, 0 }, d.sem_acquire("job", 1, nil, nil, nil, nil, "A|job"))
    assert.same({ 1, 2, 0 }, d.sem_acquire("job", 1, nil, nil, nil, nil, "B|job"))
    assert.equals(0, d.sem_acquire("x", 1, nil, nil, nil, nil, "x")[1])       -- two permits, both taken
    assert.same({ 1 }, d.rw_renew("B|job", 60000, 0))
    over("A|job")
    assert.same({ 1, 1, 0 }, d.sem_acquire("x", 2, nil, nil, nil, nil, "x"))  -- A's permit is free
    assert.same({ 1, 0 }, d.sem_release("job", 2, nil, "B|job"))
  end)
end)
