-- The semaphore's scripts driven step by step (as spec/scripts_spec.lua
-- does for acquire and release): sem_acquire, sem_release and sem_free,
-- in the states a client only meets when a reply is lost: a resend, a
-- stale copy, a cancel racing it, a permit whose lease ran out, a key
-- evicted under a hold. A permit is one owner ("<client id>:p<n>"), taken
-- once; a cancel is sem_void.lua's (src/redis/op.c).
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key

local function setup_scripts() sha = helper.load_scripts(srv) end
local function fresh_sem()
  key = "sem{" .. helper.unique_name("sem") .. "}"
  d = drive.new(srv, sha, key)
end


describe("sem_acquire.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_sem)

  it("gives a permit's owner that comes back its new, shorter lease", function()
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 1, 2, 30000))
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))          -- e<owner> stays behind
    assert.is_true(tonumber(d.field("eA:p1")) > d.now_ms() + 20000)
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 3, 2, 1000))
    local e = tonumber(d.field("eA:p1"))
    assert.is_true(e <= d.now_ms() + 1000, "e " .. e - d.now_ms() .. " ms ahead")
  end)

  it("gives permits up to the size, then queues the requester", function()
    local now = d.now_ms()
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 1, 2, 10000))
    local h = d.hash()
    assert.equals("1", h.n)
    assert.equals("1", h["oA:p1"])
    assert.equals("0", h.t)                             -- permits have no token
    assert.equals("2", h.l)
    assert.is_true(tonumber(h["eA:p1"]) >= now + 10000)
    assert.is_true(d.pttl() <= 10000 and d.pttl() > 0)
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p2", 1, 2, 20000))
    assert.equals("2", d.field("n"))
    assert.is_true(d.pttl() > 10000)                    -- the longest permit's
    local busy = d.sem_acquire("B:p1", 1, 2)
    assert.same({ 0, 1000 }, busy)                      -- at most 1 s
    assert.same({ "B:p1" }, d.zrange())
    local score = d.zscore("B:p1")
    assert.is_true(score > now + 2000 and score <= d.now_ms() + 3000)
    assert.is_true(d.pttl(d.queue) <= 6000 and d.pttl(d.queue) > 0)
    assert.equals("", d.field("oB:p1"))
  end)

  it("queues a busy requester only if it waits, and takes out one that gives up", function()
    d.sem_acquire("A:p1", 1, 1)
    assert.equals(0, d.sem_acquire("B:p1", 1, 1, nil, nil, "0")[1])   -- a try
    assert.same({}, d.zrange())
    assert.equals(0, d.sem_acquire("B:p1", 2, 1)[1])                 -- a wait
    assert.equals(0, d.sem_acquire("C:p1", 1, 1)[1])
    assert.same({ "B:p1", "C:p1" }, d.zrange())
    assert.equals(0, d.sem_acquire("B:p1", 3, 1, nil, nil, "0")[1])  -- its last try
    assert.same({ "C:p1" }, d.zrange())
    local msgs = d.listen(d.key .. ":ch:C")                    -- a release wakes C,
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))                  -- not the one gone
    assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
    assert.same({}, d.zrange())
  end)

  it("tells a queued waiter the time to the first permit's end", function()
    d.sem_acquire("A:p1", 1, 2, 800)
    d.sem_acquire("A:p2", 1, 2, 10000)
    local busy = d.sem_acquire("B:p1", 1, 2)
    assert.equals(0, busy[1])
    assert.is_true(busy[2] >= 1 and busy[2] <= 800, tostring(busy[2]))
  end)

  it("answers a resend as the first run did, without a second permit", function()
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 1))
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 1))
    assert.equals("1", d.field("n"))
    d.sem_acquire("A:p2", 1)
    assert.equals(0, d.sem_acquire("B:p1", 1)[1])
    assert.equals(0, d.sem_acquire("B:p1", 1)[1])             -- a busy one: queued once
    assert.same({ "B:p1" }, d.zrange())
  end)

  it("refuses a stale copy: a waiter's earlier attempt arriving after its permit", function()
    d.sem_acquire("A:p1", 1, 1)
    assert.equals(0, d.sem_acquire("B:p1", 1, 1)[1])          -- waits...
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ 1, 1, 0 }, d.sem_acquire("B:p1", 2, 1))     -- ...and takes it on its next look
    assert.same({}, d.zrange())                         -- out of the queue
    assert.same({ -2 }, d.sem_acquire("B:p1", 1, 1))          -- the first look's late copy
    assert.equals("1", d.field("n"))
    assert.same({}, d.zrange())                         -- not queued again
  end)

  -- An attempt of a wait that queued is recorded ("<seq>w"), and so is the
  -- wait's last try ("<seq>!"): a late copy of any of them (a duplicate a
  -- remap resent, or one a paused server runs late) is stale and changes
  -- nothing: it never queues for 3 s, nor takes a permit nobody waits for.
  it("refuses a late copy of a wait's attempt: never queued again, never a permit", function()
    d.sem_acquire("A:p1", 1, 1)
    assert.equals(0, d.sem_acquire("B:p1", 1, 1)[1])          -- waits...
    assert.equals(0, d.sem_acquire("B:p1", 2, 1)[1])          -- ...looks again...
    assert.equals(0, d.sem_acquire("B:p1", 3, 1, nil, nil, "0")[1])   -- ...gives up
    assert.same({}, d.zrange())
    assert.same({ -2 }, d.sem_acquire("B:p1", 2, 1))          -- a late copy of its second look
    assert.same({ -2 }, d.sem_acquire("B:p1", 3, 1, nil, nil, "0"))   -- and of its last try
    assert.same({}, d.zrange())                         -- not queued for 3 s
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ -2 }, d.sem_acquire("B:p1", 1, 1))          -- free: still no permit for it
    assert.equals("0", d.field("n"))
    -- within a wait: a copy of an earlier look, once a later one queued
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p2", 1, 1))
    assert.equals(0, d.sem_acquire("C:p1", 1, 1)[1])
    assert.equals(0, d.sem_acquire("C:p1", 2, 1)[1])
    assert.same({ 1, 0 }, d.sem_release("A:p2", 2))           -- wakes C: out of the queue
    assert.same({ -2 }, d.sem_acquire("C:p1", 1, 1))          -- the first look's copy: no permit
    assert.equals("0", d.field("n"))
    assert.same({}, d.zrange())
    assert.same({ 1, 1, 0 }, d.sem_acquire("C:p1", 3, 1))     -- C's own next look takes it
  end)

  it("refuses an acquire cancelled before it arrived; gives back one that ran", function()
    assert.same({ 1 }, d.sem_void("A:p1", 1))
    assert.same({ -2 }, d.sem_acquire("A:p1", 1))
    assert.equals("", d.field("oA:p1"))
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p2", 1, 1))     -- ran, its reply lost
    assert.same({ 1 }, d.sem_void("A:p2", 1))
    assert.equals("0", d.field("n"))
    assert.equals(1, d.sem_free(1))
    assert.same({ -2 }, d.sem_acquire("A:p2", 1, 1))          -- a resend: refused
    assert.same({ 1, 1, 0 }, d.sem_acquire("B:p1", 1, 1))     -- the permit is free for others
  end)

  it("refuses a size other than the one Redis keeps while held, not once free", function()
    d.sem_acquire("A:p1", 1, 2)
    local out = d.raw("sem_acquire", { owner = "B:p1", req = "B:p1", seq = 1, lease_ms = 10000,
                                       expect = 0, token = 0, permits = 3, waits = "1" })
    assert.matches("Redis keeps 2 permits", out, 1, true)
    assert.equals("", d.field("oB:p1"))
    assert.equals("1", d.field("n"))
    assert.same({}, d.zrange())
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ 1, 1, 0 }, d.sem_acquire("B:p1", 2, 3))     -- free: this client's size
    assert.equals("3", d.field("l"))
  end)

  it("takes out a permit whose own lease ran out, for the next acquire", function()
    d.sem_acquire("A:p1", 1, 2, 10000)
    d.sem_acquire("A:p2", 1, 2, 500)                          -- its holder dies
    local e2 = tonumber(d.field("eA:p2"))
    assert.equals(0, d.sem_acquire("B:p1", 1, 2)[1])
    assert.is_true(d.wait_until(e2 + 5), "the server's clock never passed the lease")
    assert.same({ 1, 1, 0 }, d.sem_acquire("B:p1", 2, 2))
    local h = d.hash()
    assert.is_nil(h["oA:p2"])
    assert.is_nil(h["eA:p2"])
    assert.equals("2", h.n)
    assert.same({}, d.zrange())
  end)

  it("tells a reentry whose permit ran out or went that it is lost, and takes no permit", function()
    d.sem_acquire("B:p1", 1, 2, 10000)                        -- keeps the key alive
    d.sem_acquire("A:p1", 1, 2, 200)
    local e = tonumber(d.field("eA:p1"))
    assert.is_true(d.wait_until(e + 5), "the server's clock never passed the lease")
    assert.same({ -1 }, d.sem_acquire("A:p1", 2, 2, 10000, 1))   -- not a new permit
    assert.same({ -1 }, d.sem_acquire("A:p1", 2, 2, 10000, 1))   -- its resend alike
    local h = d.hash()
    assert.is_nil(h["oA:p1"])
    assert.equals("1", h.n)
    d.expire_now()                                      -- evicted, or expired
    assert.same({ -1 }, d.sem_acquire("B:p1", 2, 2, 10000, 1))
    assert.same({}, d.hash())                           -- nothing written
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 3, 2, 10000))  -- a fresh one is taken
  end)

  it("starts over once the key expired or was evicted, and queues again if its queue was", function()
    d.sem_acquire("A:p1", 1, 1, 50)
    d.expire_now()
    assert.same({ 1, 1, 0 }, d.sem_acquire("B:p1", 1, 1))
    assert.equals("1", d.field("n"))
    assert.equals(0, d.sem_acquire("C:p1", 1, 1)[1])
    srv.cli("del", d.queue)
    assert.equals(0, d.sem_acquire("C:p1", 2, 1)[1])          -- its next look: queued again
    assert.same({ "C:p1" }, d.zrange())
    srv.cli("del", key)
    assert.same({ 1, 1, 0 }, d.sem_acquire("C:p1", 3, 1))
    assert.equals("1", d.field("n"))
    assert.same({}, d.zrange())
  end)

  it("drops a permit of its owner that its client does not know of (a failover's copy)", function()
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 1, 2))
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 2, 2))     -- a fresh acquire: not 2 permits
    assert.equals("1", d.field("n"))
    assert.equals("1", d.field("oA:p1"))
  end)
end)

describe("sem_release.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_sem)

  it("gives a permit back and wakes the first live waiter on its client's channel", function()
    local msgs, stop = d.listen(key .. ":ch:W")
    finally(stop)
    d.sem_acquire("A:p1", 1, 1)
    assert.equals(0, d.sem_acquire("W:p1", 1, 1)[1])
    assert.equals(0, d.sem_acquire("X:p1", 1, 1)[1])
    srv.cli("zadd", d.queue, 1, "old:p1")               -- a registration long lapsed
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.equals("0", d.field("n"))
    assert.equals("", d.field("oA:p1"))
    assert.same({ "X:p1" }, d.zrange())                 -- W woken, the lapsed one dropped
    assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
    assert.same({ "permit" }, msgs())
  end)

  it("announces the last permit freed, and keeps the record keep_ms", function()
    local msgs, stop = d.listen(key .. ":ch")
    finally(stop)
    d.sem_acquire("A:p1", 1, 2)
    d.sem_acquire("A:p2", 1, 2)
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ 1, 0 }, d.sem_release("A:p2", 2, 3000))
    assert.is_true(d.pttl() <= 3000 and d.pttl() > 0, d.pttl())
    assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
    assert.same({ "0" }, msgs())                        -- once: the token, 0
  end)

  it("answers a resend as the first run did, without waking a second waiter", function()
    d.sem_acquire("A:p1", 1, 1)
    d.sem_acquire("W:p1", 1, 1)
    d.sem_acquire("X:p1", 1, 1)
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ "X:p1" }, d.zrange())
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))           -- the resend
    assert.same({ "X:p1" }, d.zrange())                 -- X still waits
    assert.equals("0", d.field("n"))
  end)

  it("answers a stale copy without taking a later permit of the owner", function()
    d.sem_acquire("A:p1", 1, 2)
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 3, 2))
    assert.same({ 1, 1 }, d.sem_release("A:p1", 2))           -- the late copy: as it stands
    assert.equals("1", d.field("n"))
    assert.equals("1", d.field("oA:p1"))
  end)

  it("reports lost a permit cancelled meanwhile, and wakes nobody", function()
    d.sem_acquire("A:p1", 1, 1)
    d.sem_acquire("W:p1", 1, 1)
    d.sem_acquire("X:p1", 1, 1)
    assert.same({ 1 }, d.sem_void("A:p1", 1))                 -- (wakes W: sem_void.lua)
    assert.same({ "X:p1" }, d.zrange())
    assert.same({ -1 }, d.sem_release("A:p1", 2))
    assert.same({ "X:p1" }, d.zrange())
  end)

  it("gives back a permit whose own lease ran out while the key lives", function()
    d.sem_acquire("A:p1", 1, 2, 10000)
    d.sem_acquire("A:p2", 1, 2, 500)
    assert.equals(0, d.sem_acquire("W:p1", 1, 2)[1])
    assert.is_true(d.wait_until(tonumber(d.field("eA:p2")) + 5))
    assert.same({ 1, 0 }, d.sem_release("A:p2", 2))           -- still counted: taken out
    assert.equals("1", d.field("n"))
    assert.same({}, d.zrange())                         -- and W woken
  end)

  it("reports lost once the key expired or was evicted; a lost queue wakes nobody", function()
    d.sem_acquire("A:p1", 1, 1)
    assert.equals(0, d.sem_acquire("W:p1", 1, 1)[1])          -- queued
    d.expire_now()
    assert.same({ -1 }, d.sem_release("A:p1", 2))
    assert.is_false(d.exists())
    assert.same({ "W:p1" }, d.zrange())                 -- nobody woken
    d.sem_acquire("B:p1", 1, 1)
    srv.cli("del", key)
    assert.same({ -1 }, d.sem_release("B:p1", 2))
    d.sem_acquire("C:p1", 1, 1)
    srv.cli("del", d.queue)
    assert.same({ 1, 0 }, d.sem_release("C:p1", 2))
    assert.is_false(d.exists(d.queue))
  end)
end)

describe("sem_void.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_sem)

  it("takes the cancelled attempt's place out of the queue, and refuses its late copy", function()
    d.sem_acquire("A:p1", 1, 1)
    assert.equals(0, d.sem_acquire("B:p1", 1, 1)[1])          -- queued; its reply lost
    assert.same({ "B:p1" }, d.zrange())
    assert.same({ 1 }, d.sem_void("B:p1", 1))
    assert.same({}, d.zrange())                         -- no place left for 3 s
    assert.same({ -2 }, d.sem_acquire("B:p1", 1, 1))          -- a late copy
    assert.same({}, d.zrange())
    assert.same({ 1 }, d.sem_void("B:p1", 1))                 -- a resent cancel: the same
    assert.same({ 1 }, d.sem_void("B:p1", 0))                 -- a stale one: nothing
    assert.equals("1!", d.field("qB:p1"))
  end)

  it("gives back the permit of an acquire that ran, and wakes the next waiter", function()
    local msgs, stop = d.listen(key .. ":ch:W")
    finally(stop)
    assert.same({ 1, 1, 0 }, d.sem_acquire("A:p1", 1, 1))     -- ran, its reply lost
    assert.equals(0, d.sem_acquire("W:p1", 1, 1)[1])
    assert.same({ 1 }, d.sem_void("A:p1", 1))
    assert.equals("0", d.field("n"))
    assert.same({}, d.zrange())
    assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
    assert.same({ "permit" }, msgs())
    assert.same({ 1, 1, 0 }, d.sem_acquire("W:p1", 2, 1))
  end)
end)

describe("sem_free.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_sem)

  it("counts the permits not held", function()
    assert.equals(3, d.sem_free(3))                           -- no key
    d.sem_acquire("A:p1", 1, 3)
    assert.equals(2, d.sem_free(3))
    d.sem_acquire("A:p2", 1, 3)
    assert.equals(1, d.sem_free(3))
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.equals(2, d.sem_free(3))                           -- a released permit's lease is no hold
    assert.same({ 1 }, d.sem_void("A:p2", 1))
    assert.equals(3, d.sem_free(3))
  end)

  it("counts by Redis's size while held, by the client's once free", function()
    d.sem_acquire("A:p1", 1, 3)
    assert.equals(2, d.sem_free(5))
    assert.equals(2, d.sem_free(1))
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.equals(5, d.sem_free(5))                           -- a record: the client's
  end)

  it("does not count a permit whose own lease ran out, nor an evicted key's", function()
    d.sem_acquire("A:p1", 1, 3, 10000)
    d.sem_acquire("A:p2", 1, 3, 500)
    assert.equals(1, d.sem_free(3))
    assert.is_true(d.wait_until(tonumber(d.field("eA:p2")) + 5))
    assert.equals(2, d.sem_free(3))
    assert.equals("2", d.field("n"))                    -- changes nothing
    srv.cli("del", key)
    assert.equals(3, d.sem_free(3))
  end)

  it("is never below 0", function()
    d.sem_acquire("A:p1", 1, 2)
    d.sem_acquire("A:p2", 1, 2)
    srv.cli("hset", key, "oX:p9", 1, "eX:p9", d.now_ms() + 60000)   -- more than the size
    assert.equals(0, d.sem_free(2))
  end)
end)
