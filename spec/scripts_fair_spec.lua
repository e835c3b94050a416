-- The fair lock's fair_drop driven step by step (spec/scripts_spec.lua
-- drives fair_acquire, fair_release and fair_void): an owner's holds
-- taken out whichever client took them, and a freed lock passed on to
-- the first live waiter, in the states a client only meets when a reply
-- is lost: a resend, a stale copy, a waiter's cancel racing it, a lapsed
-- registration, keys evicted.
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key, fence, q

local S1, S2 = "0123456789abcdef", "fedcba9876543210"

local function setup_scripts() sha = helper.load_scripts(srv) end
local function fresh_lock()
  key = "f{" .. helper.unique_name("fair") .. "}"
  fence, q = key .. ":fence", key .. ":q"
  d = drive.new(srv, sha, key)
end

describe("fair_drop.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  -- A shared owner's client lost its hold (g = A marks A's fresh take)
  -- and DROPs it; its next fresh acquire names the lost token. Run before
  -- the DROP, that acquire must join, not adopt the lost hold (which the
  -- DROP then takes out under A's feet); run after, the DROP cleared g.
  it("leaves a fresh acquire that names the lost tenancy its own hold, whichever runs first", function()
    local function h(req) return d.field("h" .. req) end
    local t = d.fair_acquire("job", "A|job", 1, S1, 0, 0)[3]     -- A: g = A|job
    assert.same({ 1, 2, t }, d.fair_acquire("job", "B|job", 1, S1, 0, 0))
    assert.equals("A|job", d.field("g"))                   -- (B's join keeps it)
    -- acquire first: it joins (count 3, A's own 2), and the DROP takes 1
    assert.same({ 1, 3, t }, d.fair_acquire("job", "A|job", 2, S2, 0, t))
    assert.equals("2", h("A|job"))
    assert.equals(1, d.fair_drop("job", 1, tostring(t), nil, "A|job"))
    assert.equals("1", h("A|job"))
    assert.equals(2, d.count("job"))
    assert.equals("", d.field("g"))
    -- DROP first: A's hold goes with g, and A's next acquire joins B's
    assert.equals(1, d.fair_drop("job", 1, tostring(t), nil, "A|job"))
    assert.equals("", h("A|job"))
    assert.same({ 1, 2, t }, d.fair_acquire("job", "A|job", 3, S1, 0, t))
    assert.equals("1", h("A|job"))
  end)

  it("takes some holds out, and passes the freed lock on to the first waiter", function()
    local msgs, stop = d.listen(key .. ":ch:W1")
    finally(stop)
    local t = d.fair_acquire("h", "h", 1)[3]
    assert.same({ 1, 2, t }, d.fair_acquire("h", "h", 2, "", 1, t))
    assert.same({ 1, 3, t }, d.fair_acquire("h", "h", 3, "", 2, t))
    assert.equals(0, d.fair_acquire("W1:1", "W1:1", 1, S1)[1])
    assert.equals(1, d.fair_drop("h", 2, tostring(t)))
    assert.equals(1, d.count("h"))
    assert.equals("1", d.field("n"))
    assert.equals("1", d.field("c", q))                 -- nobody passed to yet
    assert.equals(1, d.fair_drop("h", 1, tostring(t)))    -- the last: on to W1:1
    local h = d.hash()
    assert.is_nil(h.oh)
    assert.equals("1", h.n)
    assert.equals("1", h["oW1:1"])
    assert.equals("W1:1", h.g)
    assert.equals("1", h["qW1:1"])
    assert.equals(tostring(t + 1), h.t)
    assert.is_true(d.pttl() > 0 and d.pttl() <= 3000, d.pttl())   -- GRANT_MS
    assert.equals("0", d.field("c", q))
    assert.equals("", d.field("rW1:1", q))
    assert.equals("", d.field("sW1:1", q))
    assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
    assert.same({ "1:" .. S1 .. ":" .. (t + 1) }, msgs())
  end)

  it("keeps a freed lock's record keep_ms when nobody waits, and clears its grant", function()
    local t = d.fair_acquire("h", "h", 1)[3]
    assert.equals("h", d.field("g"))                    -- a fresh acquire's own
    assert.equals(1, d.fair_drop("h", 5, tostring(t), 4000))   -- more than it holds: all
    local h = d.hash()
    assert.equals("0", h.n)
    assert.is_nil(h.oh)
    assert.is_nil(h.g)
    assert.is_true(d.pttl() > 0 and d.pttl() <= 4000, d.pttl())
    assert.same({ 1, 1, t + 1 }, d.fair_acquire("x", "x", 1))
  end)

  it("answers a resend 0 once the lock was passed on, and leaves the new holder", function()
    local t = d.fair_acquire("h", "h", 1)[3]
    d.fair_acquire("W1:1", "W1:1", 1, S1)
    assert.equals(1, d.fair_drop("h", 1, tostring(t)))
    assert.equals(0, d.fair_drop("h", 1, tostring(t)))    -- the resend
    assert.equals(0, d.fair_drop("h", 1, "0"))            -- with any token too
    assert.equals(1, d.count("W1:1"))
    assert.equals("1", d.field("n"))
    assert.equals("W1:1", d.field("g"))
  end)

  it("leaves a later tenancy of the owner alone: a stale copy names the old token", function()
    local t1 = d.fair_acquire("h", "h", 1)[3]
    assert.same({ 1, 0 }, d.fair_release("h", "h", 2, t1))
    local t2 = d.fair_acquire("h", "h", 3)[3]
    assert.is_true(t2 > t1)
    assert.equals(0, d.fair_drop("h", 1, tostring(t1)))
    assert.equals(1, d.count("h"))
    assert.equals(tostring(t2), d.field("t"))
  end)

  it("passes over a waiter that cancelled, to the next one", function()
    local w2, stop = d.listen(key .. ":ch:W2")
    finally(stop)
    local t = d.fair_acquire("h", "h", 1)[3]
    d.fair_acquire("W1:1", "W1:1", 1, S1)
    d.fair_acquire("W2:1", "W2:1", 1, S2)
    assert.same({ 1 }, d.fair_void("W1:1", "W1:1", 1))    -- gave up first
    assert.equals(1, d.fair_drop("h", 1, tostring(t)))
    assert.equals(0, d.count("W1:1"))
    assert.equals(1, d.count("W2:1"))
    assert.equals("W2:1", d.field("g"))
    assert.equals("0", d.field("c", q))
    assert.truthy(helper.wait_for(function() return #w2() >= 1 end, 10))
    assert.same({ "1:" .. S2 .. ":" .. (t + 1) }, w2())
    assert.same({ -2 }, d.fair_acquire("W1:1", "W1:1", 1, S1))  -- its late copy
  end)

  it("passes over a lapsed registration, and keeps the record with nobody left", function()
    local t = d.fair_acquire("h", "h", 1)[3]
    d.fair_acquire("W1:1", "W1:1", 1, S1)
    srv.cli("hset", q, "rW1:1", "1:1:10000")             -- ran out long ago
    assert.equals(1, d.fair_drop("h", 1, tostring(t)))
    assert.equals("0", d.field("n"))
    assert.equals(0, d.count("W1:1"))
    assert.equals("", d.field("rW1:1", q))
    assert.equals("", d.field("sW1:1", q))
    assert.is_true(d.pttl() > 3000 and d.pttl() <= 10000, d.pttl())   -- keep_ms, no grant
  end)

  it("answers 0 once the holds expired, and passes nothing on", function()
    local t = d.fair_acquire("h", "h", 1)[3]
    d.fair_acquire("W1:1", "W1:1", 1, S1)
    d.expire_now()
    assert.equals(0, d.fair_drop("h", 1, tostring(t)))
    assert.is_false(d.exists())
    assert.equals("1", d.field("c", q))                 -- W1 waits for its next look
  end)

  it("mints above the lock's last token when the counter is evicted, and frees with no queue", function()
    local t = d.fair_acquire("h", "h", 1)[3]
    d.fair_acquire("W1:1", "W1:1", 1, S1)
    srv.cli("del", fence)
    assert.equals(1, d.fair_drop("h", 1, tostring(t)))
    assert.equals(tostring(t + 1), d.field("t"))        -- above the lock's t
    assert.equals(t + 1, d.get(fence))
    assert.equals(1, d.count("W1:1"))
    local t2 = t + 1
    d.fair_acquire("W2:1", "W2:1", 1, S2)
    srv.cli("del", q)                                    -- the queue lost
    assert.equals(1, d.fair_drop("W1:1", 1, tostring(t2)))
    assert.equals("0", d.field("n"))                    -- nobody to pass on to
    assert.equals(0, d.count("W2:1"))
    assert.is_true(d.pttl() > 3000)
    srv.cli("del", key)
    assert.equals(0, d.fair_drop("W1:1", 1, "0"))         -- the lock itself lost
    assert.is_false(d.exists())
  end)
end)
