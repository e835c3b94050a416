-- The lease scripts driven step by step (as spec/scripts_spec.lua does
-- for acquire and release): acquire1 (a reentry without the counter),
-- extend, fence, renew and ttl, each in the states a client only meets
-- when a reply is lost: a resend, a stale copy, a cancel racing it, a
-- hold that expired, a key evicted under a hold.
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key, fence

local function setup_scripts() sha = helper.load_scripts(srv) end
local function fresh_lock()
  key = "l{" .. helper.unique_name("lease") .. "}"
  fence = key .. ":fence"                   -- same slot; one per test here
  d = drive.new(srv, sha, key)
end

describe("acquire1.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("joins its own hold (a reentry) and mints nothing", function()
    local t = d.acquire("a", "a", 1, 10000)[3]
    assert.equals(t, d.get(fence))
    assert.same({ 1, 2, t }, d.acquire1("a", "a", 2, 500, 1, t))
    assert.equals(t, d.get(fence))                   -- the counter untouched
    local h = d.hash()
    assert.equals("2", h.n)
    assert.equals("2", h.oa)
    assert.equals("2", h.qa)
    assert.equals(tostring(t), h.t)
    assert.is_true(d.pttl() > 5000, d.pttl())        -- a reentry never lowers the TTL
    assert.same({ 1, 3, t }, d.acquire1("a", "a", 3, 60000, 2, t))
    assert.is_true(d.pttl() > 30000, d.pttl())       -- only raises it
  end)

  it("answers a resend as the first run did, without a second hold", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 2, t }, d.acquire1("a", "a", 2, nil, 1, t))
    assert.same({ 1, 2, t }, d.acquire1("a", "a", 2, nil, 1, t))
    assert.equals(2, d.count("a"))
    assert.equals("2", d.field("n"))
  end)

  it("refuses a stale copy overtaken by a newer request", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 2, t }, d.acquire1("a", "a", 2, nil, 1, t))
    assert.same({ 1, 3, t }, d.acquire1("a", "a", 3, nil, 2, t))
    assert.same({ -2 }, d.acquire1("a", "a", 2, nil, 1, t))     -- the late copy
    assert.equals(3, d.count("a"))
    assert.equals("3", d.field("qa"))
  end)

  it("refuses a reentry cancelled before it arrived, and one cancelled after it ran", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1 }, d.void("a", "a", 2))            -- cancelled first...
    assert.same({ -2 }, d.acquire1("a", "a", 2, nil, 1, t))     -- ...arrives late
    assert.equals(1, d.count("a"))
    assert.equals("2!", d.field("qa"))
    assert.same({ 1, 2, t }, d.acquire1("a", "a", 3, nil, 1, t))   -- ran...
    assert.same({ 1 }, d.void("a", "a", 3))            -- ...its reply lost: undone
    assert.equals(1, d.count("a"))
    assert.same({ -2 }, d.acquire1("a", "a", 3, nil, 1, t))     -- a resend of it: refused
    assert.equals(1, d.count("a"))
    assert.equals("1", d.field("n"))
  end)

  it("tells a new tenancy busy for 10 ms: it needs the counter", function()
    assert.same({ 0, 10 }, d.acquire1("b", "b", 1))    -- never held
    assert.equals("", d.field("ob"))
    assert.equals("", d.field("n"))
    assert.is_false(d.exists(fence))                 -- nothing minted
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t))
    assert.same({ 0, 10 }, d.acquire1("b", "b", 2))    -- a freed record
    assert.equals("0", d.field("n"))
    assert.equals("", d.field("ob"))
    assert.equals(t, d.get(fence))
    local t2 = d.acquire("c", "c", 1)[3]               -- another owner holds it
    local busy = d.acquire1("b", "b", 3)
    assert.equals(0, busy[1])
    assert.is_true(busy[2] > 0 and busy[2] <= 10000, tostring(busy[2]))
    assert.equals(1, d.count("c"))
    assert.equals(t2, tonumber(d.field("t")))
  end)

  it("reports lost a reentry whose hold expired, and creates nothing", function()
    local t = d.acquire("a", "a", 1, 50)[3]
    d.expire_now()
    assert.same({ -1 }, d.acquire1("a", "a", 2, nil, 1, t))
    assert.is_false(d.exists())
  end)

  it("reports lost a reentry whose key was evicted, or taken by another tenancy", function()
    local t = d.acquire("a", "a", 1)[3]
    srv.cli("del", key)
    assert.same({ -1 }, d.acquire1("a", "a", 2, nil, 1, t))
    assert.is_false(d.exists())
    local t2 = d.acquire("a", "B|a", 1)[3]             -- the same owner, a new tenancy
    assert.is_true(t2 > t)
    assert.same({ -1 }, d.acquire1("a", "a", 3, nil, 1, t))     -- joins t: gone
    assert.equals(1, d.count("a"))
    assert.equals(tostring(t2), d.field("t"))
  end)

  it("joins a hold while the counter is gone (evicted, or on another node)", function()
    local t = d.acquire("a", "a", 1)[3]
    srv.cli("del", fence)
    assert.same({ 1, 2, t }, d.acquire1("a", "a", 2, nil, 1, t))
    assert.is_false(d.exists(fence))                 -- read nothing, wrote nothing
  end)
end)

describe("extend.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("sets a held lock's TTL to the new lease, lower or higher", function()
    local t = d.acquire("a", "a", 1, 10000)[3]
    assert.equals(1, d.extend("a", 30000, t))
    assert.is_true(d.pttl() > 20000, d.pttl())
    assert.equals(1, d.extend("a", 2000, t))           -- an owner of its own may lower it
    assert.is_true(d.pttl() <= 2000 and d.pttl() > 0, d.pttl())
    assert.equals("1", d.field("n"))                 -- holds untouched
  end)

  it("only raises the TTL of a shared owner's tenancy", function()
    local t = d.acquire("job", "A|job", 1, 30000)[3]
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, 30000))
    assert.equals(1, d.extend("A|job", 2000, t))       -- B relies on 30 s
    assert.is_true(d.pttl() > 20000, d.pttl())
    assert.equals(1, d.extend("A|job", 60000, t))
    assert.is_true(d.pttl() > 40000, d.pttl())
  end)

  it("extends only the requester's own hold: a shared owner's other clients' never count", function()
    local t = d.acquire("job", "A|job", 1, 3000)[3]    -- B's acquire never came here
    assert.equals(0, d.extend("B|job", 60000, t))      -- (a failover)
    assert.is_true(d.pttl() <= 3000, d.pttl())
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, 3000))
    assert.same({ 1, 1 }, d.release("job", "B|job", 2, t))
    assert.equals(0, d.extend("B|job", 60000, t))      -- B's own hold released
    assert.is_true(d.pttl() <= 3000, d.pttl())
    assert.equals(1, d.extend("A|job", 60000, t))
  end)

  it("answers a resend the same, with the same effect", function()
    local t = d.acquire("a", "a", 1, 10000)[3]
    assert.equals(1, d.extend("a", 3000, t))
    assert.equals(1, d.extend("a", 3000, t))
    assert.is_true(d.pttl() <= 3000 and d.pttl() > 0, d.pttl())
  end)

  it("leaves a later tenancy alone: a stale copy of an earlier one's extend", function()
    local t1 = d.acquire("a", "a", 1, 10000)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t1))
    local t2 = d.acquire("a", "a", 3, 20000)[3]        -- the same owner again
    assert.is_true(t2 > t1)
    assert.equals(0, d.extend("a", 100, t1))           -- the late copy
    assert.is_true(d.pttl() > 10000, d.pttl())
    assert.equals(0, d.extend("b", 100, t2))           -- not b's hold either
    assert.is_true(d.pttl() > 10000, d.pttl())
  end)

  it("answers gone after a release or a cancel, and keeps the record's TTL", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t, 5000))
    local kept = d.pttl()                            -- the lease's rest
    assert.equals(0, d.extend("a", 60000, t))
    assert.is_true(d.pttl() <= kept, d.pttl())       -- the record's, not raised
    local t2 = d.acquire("b", "b", 1)[3]
    assert.same({ 1 }, d.void("b", "b", 1))            -- the acquire undone
    assert.equals(0, d.extend("b", 60000, t2))
    assert.is_true(d.pttl() <= 10000, d.pttl())
    assert.equals("0", d.field("n"))
  end)

  it("answers gone once the hold expired or its key was evicted, and creates nothing", function()
    local t = d.acquire("a", "a", 1, 50)[3]
    d.expire_now()
    assert.equals(0, d.extend("a", 10000, t))
    assert.is_false(d.exists())
    t = d.acquire("a", "a", 2)[3]
    srv.cli("del", key)
    assert.equals(0, d.extend("a", 10000, t))
    assert.is_false(d.exists())
  end)
end)

describe("fence.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("raises the counter and the hold's token (Redlock's highest)", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.equals(1, d.fence_to(t + 5, "a"))
    assert.equals(t + 5, d.get(fence))
    assert.equals(tostring(t + 5), d.field("t"))
    assert.equals(1, d.count("a"))                     -- holds untouched
    assert.same({ -1 }, d.release("a", "a", 2, t))     -- the old token is no longer the tenancy's
    assert.same({ 1, 0 }, d.release("a", "a", 3, t + 5))
    assert.is_true(d.acquire("b", "b", 1)[3] > t + 5)  -- the next tenancy above it
  end)

  it("answers a resend the same, with the same effect", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.equals(1, d.fence_to(t + 3, "a"))
    assert.equals(1, d.fence_to(t + 3, "a"))
    assert.equals(t + 3, d.get(fence))
    assert.equals(tostring(t + 3), d.field("t"))
  end)

  it("never lowers the counter", function()
    srv.cli("set", fence, 40)
    local t = d.acquire("a", "a", 1)[3]
    assert.equals(41, t)
    assert.equals(1, d.fence_to(41, "a"))              -- this master's own: no change
    assert.equals(41, d.get(fence))
    assert.equals(1, d.fence_to(7, "b"))               -- a low one, for no hold here
    assert.equals(41, d.get(fence))
    assert.equals("41", d.field("t"))
  end)

  it("leaves the token of a lock its owner does not hold", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.equals(1, d.fence_to(t + 9, "b"))           -- b holds nothing here
    assert.equals(tostring(t), d.field("t"))
    assert.equals(t + 9, d.get(fence))
    assert.same({ 1, 0 }, d.release("a", "a", 2, t))
    assert.equals(1, d.fence_to(t + 20, "a"))          -- a late copy after the release
    assert.equals(tostring(t), d.field("t"))         -- the record keeps its token
    assert.equals(t + 20, d.get(fence))
  end)

  it("leaves a shared owner's token where the requester itself holds nothing", function()
    local t = d.acquire("job", "A|job", 1)[3]          -- B's acquire never came here
    assert.equals(1, d.fence_to(t + 4, "B|job"))
    assert.equals(tostring(t), d.field("t"))         -- A's tenancy keeps its token
    assert.equals(t + 4, d.get(fence))
    assert.same({ 1, 0 }, d.release("job", "A|job", 2, t))
  end)

  -- A Redlock grant takes the highest token of its quorum (exec.c): a
  -- master whose reply did not count may have minted a higher one, which
  -- nobody was granted. Where the same request began that tenancy, it
  -- takes the grant's token, lower or not.
  it("gives the token to a tenancy the same request began, even a lower one", function()
    srv.cli("set", fence, 40)
    assert.same({ 1, 1, 41 }, d.acquire("a", "a", 5))  -- begun here by request 5
    assert.equals(1, d.fence_to(12, "a", 5))
    assert.equals("12", d.field("t"))
    assert.equals(41, d.get(fence))                  -- the counter never goes down
    assert.same({ 1, 0 }, d.release("a", "a", 6, 12))  -- released with the grant's token
  end)

  it("lowers no token for another request, nor in a tenancy with other holds", function()
    srv.cli("set", fence, 40)
    assert.same({ 1, 1, 41 }, d.acquire("job", "A|job", 5))
    assert.equals(1, d.fence_to(12, "A|job", 4))       -- not the request that began it
    assert.equals("41", d.field("t"))
    assert.same({ 1, 2, 41 }, d.acquire("job", "B|job", 1))   -- B joined it
    assert.equals(1, d.fence_to(12, "A|job", 5))
    assert.equals("41", d.field("t"))
    assert.same({ 1, 1 }, d.release("job", "B|job", 2, 41))
    assert.same({ 1, 0 }, d.release("job", "A|job", 6, 41))
    assert.same({ 1, 1, 42 }, d.acquire("job", "A|job", 7))   -- a later tenancy:
    assert.equals(1, d.fence_to(12, "A|job", 5))       -- a late copy of the first fence
    assert.equals("42", d.field("t"))
  end)

  it("lowers no other owner's token, whatever stale fields of the requester it finds", function()
    srv.cli("set", fence, 40)
    assert.same({ 1, 1, 41 }, d.acquire("C", "C", 1))          -- C's tenancy, alone
    srv.cli("hset", key, "hA|job", "1", "qA|job", "5")       -- a count left by an older client
    assert.equals(1, d.fence_to(12, "A|job", 5))
    assert.equals("41", d.field("t"))
    assert.same({ 1, 0 }, d.release("C", "C", 2, 41))
  end)

  it("sets an evicted counter again, and creates no lock", function()
    local t = d.acquire("a", "a", 1)[3]
    srv.cli("del", fence)
    assert.equals(1, d.fence_to(t, "a"))
    assert.equals(t, d.get(fence))                   -- back: no token below it again
    srv.cli("del", key)
    assert.equals(1, d.fence_to(t + 1, "a"))
    assert.equals(t + 1, d.get(fence))
    assert.is_false(d.exists())
  end)

  it("never lowers a later tenancy's token (a late copy of an earlier fence)", function()
    local t1 = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t1))
    local t2 = d.acquire("a", "a", 3)[3]                -- a's next tenancy
    assert.is_true(t2 > t1)
    assert.equals(1, d.fence_to(t1, "a"))              -- the earlier fence, late
    assert.equals(tostring(t2), d.field("t"))
    assert.same({ 1, 0 }, d.release("a", "a", 4, t2))  -- so its release is no loss
  end)
end)

describe("renew.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("renews a hold and never lowers its TTL", function()
    local t = d.acquire("a", "a", 1, 3000)[3]
    assert.same({ 1 }, d.renew("a", 30000, t))
    assert.is_true(d.pttl() > 20000, d.pttl())
    assert.same({ 1 }, d.renew("a", 500, t))           -- a shorter lease: kept
    assert.is_true(d.pttl() > 20000, d.pttl())
    assert.equals(1, d.count("a"))
    srv.cli("persist", key)                          -- no TTL (by hand): none
    assert.same({ 1 }, d.renew("a", 500, t))           -- is lower than forever
    if tonumber(srv.cli("info", "server"):match("redis_version:(%d+)")) >= 7 then
      assert.equals(-1, d.pttl())
    else                                             -- (before 7: PTTL, PEXPIRE)
      assert.is_true(d.pttl() > 0 and d.pttl() <= 500, d.pttl())
    end
  end)

  it("renews as well where PEXPIRE has no GT (before Redis 7)", function()
    -- The same script, with an option this server refuses as 6.2 refuses GT.
    local src = require("dlock.core").scripts().renew:gsub("'gt'", "'gt-unknown'")
    sha.renew_old = helper.load_script(srv, "renew_old", src)
    local function renew_old(lease_ms, token)
      return d.groups("renew_old", { { key, "a", lease_ms, token } })
    end
    local t = d.acquire("a", "a", 1, 3000)[3]
    assert.same({ 1 }, renew_old(30000, t))
    assert.is_true(d.pttl() > 20000, d.pttl())
    assert.same({ 1 }, renew_old(500, t))            -- a shorter lease: kept
    assert.is_true(d.pttl() > 20000, d.pttl())
    srv.cli("persist", key)                          -- there, a key without a
    assert.same({ 1 }, renew_old(500, t))            -- TTL gets the lease
    assert.is_true(d.pttl() > 0 and d.pttl() <= 500, d.pttl())
  end)

  it("answers per hold: renewed, gone, another owner's tenancy", function()
    local ka, kb, kc = key, key .. ":b", key .. ":c"
    local ta = d.acquire("a", "a", 1, 3000)[3]
    d.key = kb
    local tb = d.acquire("a", "a", 1, 1000)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, tb))  -- a's hold of kb: gone
    d.key = kc
    local tc = d.acquire("x", "x", 1, 3000)[3]         -- x holds kc
    d.key = ka
    assert.same({ 1, 0, -1, 0 }, d.groups("renew", {
      { ka, "a", 30000, ta }, { kb, "a", 30000, tb }, { kc, "a", 30000, tc },
      { key .. ":never", "a", 30000, 1 } }))
    assert.is_true(d.pttl(ka) > 20000)
    assert.is_true(d.pttl(kb) <= 10000)              -- the record's own TTL
    assert.is_true(d.pttl(kc) <= 3000)               -- x's, untouched
    assert.is_false(d.exists(key .. ":never"))
  end)

  it("renews only the requester's own hold: a shared owner's other clients' never count", function()
    local t = d.acquire("job", "A|job", 1, 3000)[3]    -- B's acquire never came here
    assert.same({ 0 }, d.renew("B|job", 30000, t))     -- (a failover)
    assert.is_true(d.pttl() <= 3000, d.pttl())
    assert.same({ 1, 2, t }, d.acquire("job", "B|job", 1, 3000))
    assert.same({ 1 }, d.renew("B|job", 30000, t))
    assert.same({ 1, 1 }, d.release("job", "B|job", 2, t))
    assert.same({ 0, 1 }, d.groups("renew", {        -- B's own hold released
      { key, "B|job", 60000, t }, { key, "A|job", 40000, t } }))
    assert.is_true(d.pttl() > 30000 and d.pttl() <= 40000, d.pttl())
    d.key = key .. ":bar"                            -- an owner with a '|' of its own
    local tb = d.acquire("x|y", "C|x|y", 1, 3000)[3]
    assert.same({ 1, -1 }, d.groups("renew", {      -- (C|x: owner x, not x|y)
      { d.key, "C|x|y", 30000, tb }, { d.key, "C|x", 30000, tb } }))
    assert.is_true(d.pttl() > 20000, d.pttl())
    d.key = key
  end)

  it("answers a resend the same, with the same effect", function()
    local t = d.acquire("a", "a", 1, 3000)[3]
    assert.same({ 1 }, d.renew("a", 20000, t))
    assert.same({ 1 }, d.renew("a", 20000, t))
    assert.is_true(d.pttl() > 10000 and d.pttl() <= 20000, d.pttl())
  end)

  it("tells a stale token: another tenancy (-1) while held, gone (0) once free", function()
    local t1 = d.acquire("a", "a", 1, 10000)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t1))
    local t2 = d.acquire("a", "a", 3, 3000)[3]         -- the same owner, a new tenancy
    assert.same({ -1 }, d.renew("a", 60000, t1))       -- the watchdog's late copy
    assert.is_true(d.pttl() <= 3000, d.pttl())       -- t2's lease untouched
    assert.same({ 1, 0 }, d.release("a", "a", 4, t2))
    assert.same({ 0 }, d.renew("a", 60000, t1))
    assert.same({ 0 }, d.renew("a", 60000, t2))
  end)

  it("answers gone after a cancel undid the acquire", function()
    local t = d.acquire("a", "a", 1, 10000)[3]
    assert.same({ 1 }, d.void("a", "a", 1))
    assert.same({ 0 }, d.renew("a", 60000, t))
    assert.is_true(d.pttl() <= 10000, d.pttl())
    assert.equals("0", d.field("n"))
  end)

  it("answers gone once the hold expired or its key was evicted, and creates nothing", function()
    local t = d.acquire("a", "a", 1, 50)[3]
    d.expire_now()
    assert.same({ 0 }, d.renew("a", 10000, t))
    assert.is_false(d.exists())
    t = d.acquire("a", "a", 2)[3]
    srv.cli("del", key)
    assert.same({ 0 }, d.renew("a", 10000, t))
    assert.is_false(d.exists())
  end)
end)

describe("ttl.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("is the lock's PTTL while held, raised by a reentry", function()
    local t = d.acquire("a", "a", 1, 5000)[3]
    local p = d.ttl()
    assert.is_true(p > 0 and p <= 5000, p)
    d.acquire("a", "a", 2, 30000, 1, t)
    p = d.ttl()
    assert.is_true(p > 20000 and p <= 30000, p)
  end)

  it("is -2 for a free lock: never held, released, cancelled (its record stays)", function()
    assert.equals(-2, d.ttl())
    local t = d.acquire("a", "a", 1)[3]
    d.release("a", "a", 2, t)
    assert.is_true(d.exists())                       -- the record...
    assert.equals(-2, d.ttl())                         -- ...is no hold
    d.acquire("b", "b", 1)
    d.void("b", "b", 1)
    assert.equals(-2, d.ttl())
  end)

  it("is -2 once the hold expired or its key was evicted", function()
    d.acquire("a", "a", 1, 50)
    d.expire_now()
    assert.equals(-2, d.ttl())
    d.acquire("a", "a", 2)
    srv.cli("del", key)
    assert.equals(-2, d.ttl())
  end)

  it("is -1 for a hold whose key has no TTL (PERSIST by hand)", function()
    d.acquire("a", "a", 1)
    srv.cli("persist", key)
    assert.equals(-1, d.ttl())
  end)
end)
