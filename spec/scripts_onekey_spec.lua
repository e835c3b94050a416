-- The one-key forms a Cluster slot mid-migration falls back to (src/redis/op.c,
-- dl_op_one_key: TRYAGAIN, the lock's keys not all on one node), driven
-- step by step on one server: fair_release1, fair_drop1, fair_void1,
-- fair_acquire1 (a reentry), sem_release1 and sem_acquire1. Each takes
-- the lock's key alone, passes nothing on (a grant needs the queue and
-- the counter), and touches the queue, P{name}:q, only where it is
-- (lib/here.lua: on one server, where it exists). A resend answers from
-- the lock's record whichever form runs it. (spec/cluster_migrating_releases_spec.lua runs
-- them on a migrating slot.)
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key, q

local S1, S2 = "0123456789abcdef", "fedcba9876543210"

local function fresh(what)
  key = what .. "{" .. helper.unique_name(what) .. "}"
  q = key .. ":q"
  d = drive.new(srv, sha, key)
end


describe("fair_release1.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function() fresh("f") end)

  it("frees the lock and passes nothing on; the first waiter takes it when it next looks", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.same({ 0, 1000 }, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0))     -- queued
    assert.same({ 1, 0 }, d.fair_release1("A", "A", 2, tostring(t)))
    local h = d.hash()
    assert.equals("0", h.n)
    assert.is_nil(h.g)                                   -- no grant
    assert.equals("2", h.qA)                             -- the record of the release
    assert.is_true(d.pttl() > 9000 and d.pttl() <= 10000)
    assert.equals("1", d.field("c", q))                  -- W1 still queued
    -- a resend, by either form, answers from the record and grants nothing
    assert.same({ 1, 0 }, d.fair_release1("A", "A", 2, tostring(t)))
    assert.same({ 1, 0 }, d.fair_release("A", "A", 2, tostring(t)))
    assert.equals("0", d.field("n"))
    assert.equals("1", d.field("c", q))
    -- a newcomer queues behind W1, whose next look (its attempt, resent) takes the lock
    assert.same({ 0, 1000 }, d.fair_acquire("W2:1", "W2:1", 1, S2, nil, 0))
    local got = d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0)
    assert.equals(1, got[1])
    assert.is_true(got[3] > t, "the token went back")
  end)

  it("takes one hold of several out, and clears the grant its client now knows of", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.equals("A", d.field("g"))
    assert.same({ 1, 2, t }, d.fair_acquire("A", "A", 2, "", 1, t))
    srv.cli("hset", key, "g", "A")                       -- as a grant not seen yet
    assert.same({ 1, 1 }, d.fair_release1("A", "A", 3, tostring(t)))
    assert.equals("1", d.field("n"))
    assert.equals("", d.field("g"))
  end)

  it("answers lost for another tenancy's token, and changes nothing", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.same({ -1 }, d.fair_release1("A", "A", 2, tostring(t + 1)))
    assert.equals("1", d.field("n"))
  end)
end)

describe("fair_drop1.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function() fresh("f") end)

  it("takes the holds out and keeps the freed record for the first waiter's next look", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.fair_acquire("A", "A", 2, "", 1, t))
    assert.same({ 0, 1000 }, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0))
    assert.equals(1, d.fair_drop1("A", 1, tostring(t)))
    assert.equals("1", d.field("n"))                     -- one hold left
    assert.equals(1, d.fair_drop1("A", 1, tostring(t)))
    local h = d.hash()
    assert.equals("0", h.n)
    assert.is_nil(h.g)
    assert.is_true(d.pttl() > 9000 and d.pttl() <= 10000)
    assert.equals(0, d.fair_drop1("A", 1, tostring(t)))    -- nothing left to drop
    assert.equals("1", d.field("c", q))
    assert.equals(1, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0)[1])
  end)
end)

describe("fair_void1.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function() fresh("f") end)

  it("records the cancel and leaves the queue where the queue is", function()
    d.fair_acquire("A", "A", 1, nil, nil, 0)
    assert.same({ 0, 1000 }, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0))
    assert.same({ 0, 1000 }, d.fair_acquire("W2:1", "W2:1", 1, S2, nil, 0))
    assert.equals(1, d.fair_void1("W1:1", "W1:1", 1))
    assert.equals("1!", d.field("qW1:1"))
    assert.equals("1", d.field("c", q))
    assert.equals("W2:1", d.field("H", q))
    assert.equals(1, d.fair_void1("W1:1", "W1:1", 1))      -- a resend: nothing more
    assert.equals("1", d.field("c", q))
    assert.same({ -2 }, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0))   -- a late copy: refused
  end)

  it("leaves a stale registration where the queue is not, never granted", function()
    d.fair_acquire("A", "A", 1, nil, nil, 0)
    assert.same({ 0, 1000 }, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0))
    assert.equals("OK", srv.cli("rename", q, q .. "x"))  -- the queue away (on the other node)
    assert.equals(1, d.fair_void1("W1:1", "W1:1", 1))
    assert.is_false(d.exists(q))                         -- not made here
    assert.equals("1!", d.field("qW1:1"))
    -- the queue back with W1 in it: its registration is stale, passed over
    assert.equals("OK", srv.cli("rename", q .. "x", q))
    assert.same({ 0, 1000 }, d.fair_acquire("W2:1", "W2:1", 1, S2, nil, 0))
    local t = tonumber(d.field("t"))
    assert.same({ 1, 0 }, d.fair_release("A", "A", 2, tostring(t)))
    assert.equals("W2:1", d.field("g"))
  end)

  it("takes back a grant its client never saw, and keeps the lock free for the next look", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.same({ 0, 1000 }, d.fair_acquire("W1:1", "W1:1", 1, S1, nil, 0))
    assert.same({ 0, 1000 }, d.fair_acquire("W2:1", "W2:1", 1, S2, nil, 0))
    assert.same({ 1, 0 }, d.fair_release("A", "A", 2, tostring(t)))   -- granted to W1
    assert.equals("W1:1", d.field("g"))
    assert.equals(1, d.fair_void1("W1:1", "W1:1", 1, "1"))
    local h = d.hash()
    assert.equals("0", h.n)
    assert.is_nil(h.g)
    assert.equals("1", d.field("c", q))                  -- W2 waits on
    assert.equals(1, d.fair_acquire("W2:1", "W2:1", 1, S2, nil, 0)[1])
  end)
end)

describe("fair_acquire1.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function() fresh("f") end)

  it("adds a reentry's hold in its tenancy, and answers a resend as the first run", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.same({ 1, 2, t }, d.fair_acquire1("A", "A", 2, 1, t))
    assert.same({ 1, 2, t }, d.fair_acquire1("A", "A", 2, 1, t))  -- resend
    assert.same({ 1, 2, t }, d.fair_acquire("A", "A", 2, "", 1, t))
    assert.equals("2", d.field("n"))
    assert.equals("", d.field("g"))                      -- its client knows its hold
    assert.same({ -2 }, d.fair_acquire1("A", "A", 1, 1, t))      -- a stale copy
  end)

  it("answers lost for a hold that went, and busy for a fresh acquire", function()
    local t = d.fair_acquire("A", "A", 1, nil, nil, 0)[3]
    assert.same({ -1 }, d.fair_acquire1("A", "A", 2, 1, t + 1))
    assert.same({ 0, 10 }, d.fair_acquire1("B", "B", 1, 0, 0))
    assert.same({ 1, 0 }, d.fair_release1("A", "A", 3, tostring(t)))
    assert.same({ -1 }, d.fair_acquire1("A", "A", 4, 1, t))
    assert.equals("0", d.field("n"))
  end)
end)

describe("sem_release1.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function() fresh("sem") end)

  it("acts as sem_release where the queue is, with sem_acquire1", function()
    local msgs, stop = d.listen(key .. ":ch:W")
    finally(stop)
    assert.same({ 1, 1, 0 }, d.sem_acquire1("A:p1", 1, 1))
    assert.same({ 0, 1000 }, d.sem_acquire("W:p1", 1, 1))  -- queued
    assert.same({ "W:p1" }, d.zrange())
    assert.same({ 0, 1000 }, d.sem_acquire1("W:p1", 2, 1))
    assert.same({ "W:p1" }, d.zrange())
    assert.same({ 1, 0 }, d.sem_release1("A:p1", 2))
    assert.same({}, d.zrange())                          -- woken
    assert(helper.wait_for(function() return msgs()[1] == "permit" end, 2))
    assert.same({ 1, 0 }, d.sem_release1("A:p1", 2))   -- a resend
    assert.same({ 1, 0 }, d.sem_release("A:p1", 2))
    assert.same({ 1, 1, 0 }, d.sem_acquire1("W:p1", 3, 1))
  end)
end)

describe("sem_acquire1.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function() fresh("sem") end)

  it("takes a permit where the queue is not, never makes one, and frees it with sem_release1", function()
    assert.same({ 1, 1, 0 }, d.sem_acquire1("A:p1", 1, 1))
    assert.same({ 0, 1000 }, d.sem_acquire1("W:p1", 1, 1))  -- busy, not queued
    assert.same({ 0, 1000 }, d.sem_acquire1("V:p1", 1, 1, nil, nil, "0"))
    assert.is_false(d.exists(q))
    assert.same({ 1, 0 }, d.sem_release1("A:p1", 2))
    assert.is_false(d.exists(q))
    assert.equals("0", d.field("n"))
    assert.same({ 1, 1, 0 }, d.sem_acquire1("W:p1", 2, 1))
    assert.same({ 1, 1, 0 }, d.sem_acquire1("W:p1", 2, 1))  -- a resend
    assert.same({ 0, 1000 }, d.sem_acquire1("V:p1", 2, 1, nil, nil, "0"))
    assert.is_false(d.exists(q))
  end)
end)
