-- The read-write lock's scripts driven step by step (as
-- spec/scripts_spec.lua does for acquire and release): rw_acquire and
-- rw_renew, in the states a client only meets when a reply is lost: a
-- resend, a stale copy, a cancel racing it, a reader's own lease that ran
-- out, a key evicted under a hold. Read-write holds are released by
-- release.lua and cancelled by void.lua (src/redis/op.c).
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key, fence

local function setup_scripts() sha = helper.load_scripts(srv) end
local function fresh_lock()
  key = "rw{" .. helper.unique_name("rw") .. "}"
  fence = key .. ":fence"
  d = drive.new(srv, sha, key)
end

local function num(f) return tonumber(d.field(f)) end

describe("rw_acquire.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  -- A read hold's release leaves its owner's lease field; a write hold
  -- the same owner takes next must not end when that old lease passes.
  it("clears the owner's old read lease when it takes the write hold", function()
    local t = d.rw_acquire("r", "a", 1, 10000)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t))
    assert.matches("^%d+$", d.field("ea"))                -- left behind
    srv.cli("hset", key, "ea", d.now_ms() - 1)            -- and passed
    local w = d.rw_acquire("w", "a", 3, 10000)
    assert.same({ 1, 1, t + 1 }, w)
    assert.equals("", d.field("ea"))
    assert.equals(0, d.rw_acquire("r", "b", 1, 10000)[1])   -- the writer holds
    assert.equals(0, d.rw_acquire("w", "c", 1, 10000)[1])
    assert.equals("1", d.field("oa"))
    assert.same({ 1, 0 }, d.release("a", "a", 4, t + 1))
    -- a writer that holds a read hold too (an upgrade) keeps its lease
    t = d.rw_acquire("r", "a", 5, 10000)[3]
    assert.same({ 1, 2, t }, d.rw_acquire("w", "a", 6, 10000, 1, t))
    assert.matches("^%d+$", d.field("ea"))
  end)

  -- A shared owner's requesters each count their own holds (h<req>,
  -- lib/holder.lua): when the owner's lease runs out, its holds go, and
  -- their counts with them, whichever script finds it out.
  it("takes out a shared reader's requesters' counts with its expired lease", function()
    local function rq(owner, req, seq, lease_ms)          -- a reader, requester req
      return d.rw_acquire("r", owner, seq, lease_ms, 0, 1, "", req)
    end
    -- (the lease runs out when the spec says so: ejob set in the past,
    -- not a short lease that a slow run could see end too early)
    local function expire() srv.cli("hset", key, "ejob", d.now_ms() - 1) end
    local t = rq("r0", "r0", 1, 10000)[3]                 -- keeps the tenancy going
    assert.same({ 1, 1, t }, rq("job", "A|job", 1, 10000))
    assert.same({ 1, 2, t }, rq("job", "B|job", 1, 10000))
    assert.equals("1", d.field("hA|job"))
    assert.equals("1", d.field("hB|job"))
    expire()
    assert.same({ 1, 1, t }, d.rw_acquire("r", "r1", 1))          -- prunes the expired owner
    local h = d.hash()
    assert.is_nil(h.ojob)
    assert.is_nil(h["hA|job"])
    assert.is_nil(h["hB|job"])
    assert.equals("2", h.n)
    -- The same through rw_renew, which meets an expired lease first.
    assert.same({ 1, 1, t }, rq("job", "A|job", 2, 10000))
    expire()
    assert.same({ 0 }, d.rw_renew("A|job", 10000, tostring(t)))
    h = d.hash()
    assert.is_nil(h.ojob)
    assert.is_nil(h["hA|job"])
    assert.equals("2", h.n)
  end)

  it("renews only the requester's own hold: a shared owner's other clients' never count", function()
    local function rq(req, seq) return d.rw_acquire("r", "job", seq, 3000, 0, 1, "", req) end
    local t = rq("A|job", 1)[3]                         -- B's acquire never came here
    local e = num("ejob")
    assert.same({ 0 }, d.rw_renew("B|job", 30000, tostring(t)))
    assert.equals(e, num("ejob"))                       -- nothing renewed
    assert.is_true(d.pttl() <= 3000, d.pttl())
    assert.same({ 1, 2, t }, rq("B|job", 1))
    assert.same({ 1, 1 }, d.release("job", "B|job", 2, t))
    assert.same({ 0 }, d.rw_renew("B|job", 30000, tostring(t)))
    assert.is_true(d.pttl() <= 3000, d.pttl())
    assert.same({ 1 }, d.rw_renew("A|job", 30000, tostring(t)))
    assert.is_true(d.pttl() > 20000, d.pttl())
  end)

  it("lets readers share one tenancy and token, each with a lease of its own", function()
    local before = d.now_ms()
    local r1 = d.rw_acquire("r", "r1", 1, 10000)
    local t = r1[3]
    assert.same({ 1, 1, t }, r1)
    assert.equals(t, d.get(fence))
    assert.same({ 1, 1, t }, d.rw_acquire("r", "r2", 1, 20000))   -- the same token
    local h = d.hash()
    assert.equals("2", h.n)
    assert.is_nil(h.w)
    assert.is_true(tonumber(h.er1) >= before + 10000 and tonumber(h.er1) <= d.now_ms() + 10000)
    assert.is_true(tonumber(h.er2) >= before + 20000)
    assert.is_true(d.pttl() > 10000, d.pttl())         -- raised to the longest hold
    assert.equals(t, d.get(fence))                      -- one token minted
  end)

  it("keeps readers and other writers out of a write hold", function()
    local t = d.rw_acquire("w", "w1", 1, 10000)[3]
    assert.equals("w1", d.field("w"))
    assert.is_nil(d.hash().ew1)                         -- a writer has no lease of its own
    local r = d.rw_acquire("r", "r1", 1)
    assert.equals(0, r[1])
    assert.is_true(r[2] > 0 and r[2] <= 10000, tostring(r[2]))
    local w = d.rw_acquire("w", "w2", 1)
    assert.equals(0, w[1])
    assert.is_true(w[2] > 0 and w[2] <= 10000, tostring(w[2]))
    assert.same({ 1, 2, t }, d.rw_acquire("w", "w1", 2, 10000, 1, t))   -- its own reentry joins
    assert.equals("2", d.field("n"))
    assert.is_nil(d.hash().or1)
  end)

  it("tells a busy writer the time to the first reader's end, not the key's TTL", function()
    d.rw_acquire("r", "r1", 1, 3000)
    d.rw_acquire("r", "r2", 1, 20000)
    local w = d.rw_acquire("w", "w1", 1)
    assert.equals(0, w[1])
    assert.is_true(w[2] > 0 and w[2] <= 3000, tostring(w[2]))
    assert.is_true(d.pttl() > 10000)
    assert.is_nil(d.hash().x)                           -- 'w' does not wait: keeps nobody out
    assert.same({ 1, 1 }, { d.rw_acquire("r", "r3", 1)[1], d.rw_acquire("r", "r3", 1)[2] })
  end)

  it("keeps new readers out while a writer waits ('W'), but not a reader's reentry", function()
    local t = d.rw_acquire("r", "r1", 1, 10000)[3]
    local now = d.now_ms()
    assert.equals(0, d.rw_acquire("W", "w1", 1)[1])
    local x = num("x")
    assert.is_true(x > now + 2000 and x <= d.now_ms() + 12000, tostring(x - now))
    local r = d.rw_acquire("r", "r2", 1)
    assert.equals(0, r[1])                              -- kept out
    assert.same({ 1, 2, t }, d.rw_acquire("r", "r1", 2, 10000, 1, t))  -- a reentry is no new reader
    assert.same({ 1, 1 }, d.release("r1", "r1", 3, t))
    assert.same({ 1, 0 }, d.release("r1", "r1", 4, t))          -- free now, x still ahead
    r = d.rw_acquire("r", "r2", 2)
    assert.equals(0, r[1])
    assert.is_true(r[2] > 0 and r[2] <= x - now, tostring(r[2]))
    local w = d.rw_acquire("w", "w1", 2)                          -- the writer comes back
    assert.equals(1, w[1])
    assert.is_true(w[3] > t, "a new tenancy's token")
    assert.is_nil(d.hash().x)                           -- readers may come again
    assert.equals("w1", d.field("w"))
  end)

  it("lets the write holder's own reader in (a downgrade), and no other reader", function()
    local t = d.rw_acquire("W", "w1", 1)[3]
    assert.same({ 1, 1, t }, d.rw_acquire("r", "w1:r", 1, 10000, 0, 1, "w1"))
    assert.equals("2", d.field("n"))
    assert.is_true(num("ew1:r") > d.now_ms())
    assert.equals(0, d.rw_acquire("r", "r9", 1, 10000, 0, 1, "w2")[1])    -- another writer's name
    assert.equals(0, d.rw_acquire("r", "r9", 2)[1])
    assert.same({ 1, 0 }, d.release("w1", "w1", 2, t))          -- the writer goes: the reader stays
    assert.equals("1", d.field("n"))
    assert.same({ 1, 1, t }, d.rw_acquire("r", "r9", 3))          -- readers share its tenancy now
  end)

  it("answers a resend as the first run did, without a second hold", function()
    local t = d.rw_acquire("r", "r1", 1)[3]
    assert.same({ 1, 1, t }, d.rw_acquire("r", "r1", 1))
    local tw
    d.key = key .. ":w"
    tw = d.rw_acquire("w", "w1", 1)[3]
    assert.same({ 1, 1, tw }, d.rw_acquire("w", "w1", 1))
    assert.equals("1", d.field("n"))
    d.key = key
    assert.equals("1", d.field("n"))
    assert.equals("1", d.field("or1"))
  end)

  it("refuses a stale copy overtaken by a newer request", function()
    local t = d.rw_acquire("r", "r1", 1)[3]
    assert.same({ 1, 2, t }, d.rw_acquire("r", "r1", 2, 10000, 1, t))
    assert.same({ -2 }, d.rw_acquire("r", "r1", 1))               -- the first one's late copy
    assert.equals("2", d.field("or1"))
    assert.equals("2", d.field("n"))
  end)

  it("refuses an acquire cancelled before it arrived; undoes one that ran", function()
    assert.same({ 1 }, d.void("r1", "r1", 1))
    assert.same({ -2 }, d.rw_acquire("r", "r1", 1))
    assert.equals("", d.field("n"))
    assert.equals("1!", d.field("qr1"))
    local t = d.rw_acquire("r", "r2", 1)[3]                       -- ran, reply lost
    assert.same({ 1 }, d.void("r2", "r2", 1))
    assert.equals("0", d.field("n"))
    assert.equals("", d.field("or2"))
    assert.same({ -2 }, d.rw_acquire("r", "r2", 1))               -- its resend
    local w = d.rw_acquire("w", "w1", 1)                          -- nothing keeps a writer out
    assert.equals(1, w[1])
    assert.is_true(w[3] > t)
  end)

  it("takes a reader whose own lease ran out out: it blocks a writer for that lease only", function()
    local t = d.rw_acquire("r", "r1", 1, 10000)[3]
    d.rw_acquire("r", "r2", 1, 500)                               -- dies without releasing
    local e2 = num("er2")
    local w = d.rw_acquire("w", "w1", 1)
    assert.equals(0, w[1])
    assert.is_true(w[2] >= 1 and w[2] <= 500, tostring(w[2]))
    assert.is_true(d.wait_until(e2 + 5), "the server's clock never passed the lease")
    assert.same({ 1, 0 }, d.release("r1", "r1", 2, t))
    assert.equals("1", d.field("n"))                    -- r2 is still counted...
    w = d.rw_acquire("w", "w1", 2, 500)
    assert.equals(1, w[1])                              -- ...until the next acquire
    assert.is_true(w[3] > t)
    local h = d.hash()
    assert.is_nil(h.or2)
    assert.is_nil(h.er2)
    assert.equals("1", h.n)
    assert.is_true(d.pttl() <= 500, d.pttl())           -- a new tenancy's own TTL
  end)

  it("reports lost a reentry whose key expired, and creates nothing", function()
    local t = d.rw_acquire("r", "r1", 1, 50)[3]
    d.expire_now()
    assert.same({ -1 }, d.rw_acquire("r", "r1", 2, 10000, 1, t))
    assert.is_false(d.exists())
    assert.same({ -1 }, d.rw_acquire("w", "w1", 2, 10000, 1, t))
    assert.is_false(d.exists())
  end)

  it("keeps tokens rising when the lock's key or its counter is evicted", function()
    local t = d.rw_acquire("r", "r1", 1)[3]
    srv.cli("del", key)
    assert.same({ -1 }, d.rw_acquire("r", "r1", 2, 10000, 1, t))  -- the reentry: lost
    local t2 = d.rw_acquire("r", "r2", 1)[3]
    assert.is_true(t2 > t)
    assert.same({ 1, 0 }, d.release("r2", "r2", 2, t2))
    srv.cli("del", fence)                               -- the record keeps t2
    local t3 = d.rw_acquire("w", "w1", 1)[3]
    assert.is_true(t3 > t2, t3 .. " after " .. t2)
    assert.equals(t3, d.get(fence))
  end)

  -- release.lua and void.lua take out o<owner> but leave a reader's
  -- e<owner>, and prune_leases (lib/leases.lua) runs only while n > 0: the
  -- same owner's next read hold must not start from the old e.
  it("gives a reader that comes back in a new tenancy its new, shorter lease", function()
    local t = d.rw_acquire("r", "r1", 1, 30000)[3]
    assert.same({ 1, 0 }, d.release("r1", "r1", 2, t))        -- e<r1> stays behind
    assert.is_true(num("er1") > d.now_ms() + 20000)
    local t2 = d.rw_acquire("r", "r1", 3, 1000)[3]
    assert.is_true(t2 > t)
    local e = num("er1")
    assert.is_true(e <= d.now_ms() + 1000, "e " .. e - d.now_ms() .. " ms ahead")
    assert.same({ 1, 2, t2 }, d.rw_acquire("r", "r1", 4, 300, 1, t2))  -- a second hold of r1
    assert.equals(e, num("er1"))                        -- never lowers it
  end)
end)

describe("rw_renew.lua #nocore", function()
  setup(setup_scripts)
  before_each(fresh_lock)

  it("renews a reader's own lease and the key's TTL, never lowering either", function()
    local t = d.rw_acquire("r", "r1", 1, 3000)[3]
    local now = d.now_ms()
    assert.same({ 1 }, d.rw_renew("r1", 30000, t))
    local e = num("er1")
    assert.is_true(e >= now + 30000 and e <= d.now_ms() + 30000)
    assert.is_true(d.pttl() > 20000)
    assert.same({ 1 }, d.rw_renew("r1", 500, t))          -- shorter: nothing lowered
    assert.equals(e, num("er1"))
    assert.is_true(d.pttl() > 20000)
  end)

  it("answers per hold: renewed (a writer too), gone, another owner's tenancy", function()
    local kw, kr, kg = key, key .. ":r", key .. ":g"
    local tw = d.rw_acquire("w", "w1", 1, 3000)[3]
    d.key = kr
    local tr = d.rw_acquire("r", "r1", 1, 3000)[3]
    d.key = kg
    local tg = d.rw_acquire("r", "r1", 1, 1000)[3]
    assert.same({ 1, 0 }, d.release("r1", "r1", 2, tg))
    d.key = kw
    assert.same({ 1, -1, 1, 0 }, d.groups("rw_renew", {
      { kw, "w1", 30000, tw }, { kw, "r1", 30000, tw }, { kr, "r1", 30000, tr },
      { kg, "r1", 30000, tg } }))
    assert.is_true(d.pttl(kw) > 20000)
    assert.is_nil(d.hash(kw).ew1)                       -- a writer gets no lease of its own
    assert.is_true(d.pttl(kr) > 20000)
    assert.is_true(d.pttl(kg) <= 10000)                 -- the record's TTL
  end)

  it("answers a resend the same, with the same effect", function()
    local t = d.rw_acquire("r", "r1", 1, 3000)[3]
    assert.same({ 1 }, d.rw_renew("r1", 20000, t))
    local e = num("er1")
    assert.same({ 1 }, d.rw_renew("r1", 20000, t))
    assert.is_true(num("er1") >= e)
    assert.is_true(d.pttl() <= 20000 and d.pttl() > 10000)
  end)

  it("tells a stale token: another tenancy while held, gone once free", function()
    local t1 = d.rw_acquire("r", "r1", 1, 10000)[3]
    assert.same({ 1, 0 }, d.release("r1", "r1", 2, t1))
    local t2 = d.rw_acquire("r", "r1", 3, 3000)[3]
    assert.is_true(t2 > t1)
    local e = num("er1")
    assert.same({ -1 }, d.rw_renew("r1", 60000, t1))      -- the watchdog's late copy
    assert.equals(e, num("er1"))                        -- t2's lease untouched
    assert.is_true(d.pttl() <= 3000)
    assert.same({ 1, 0 }, d.release("r1", "r1", 4, t2))
    assert.same({ 0 }, d.rw_renew("r1", 60000, t2))
  end)

  it("takes out a reader whose own lease ran out, answering 0", function()
    local t = d.rw_acquire("r", "r1", 1, 10000)[3]
    d.rw_acquire("r", "r2", 1, 500)
    local e2 = num("er2")
    assert.is_true(d.wait_until(e2 + 5), "the server's clock never passed the lease")
    assert.same({ 0 }, d.rw_renew("r2", 10000, t))        -- too late: gone
    local h = d.hash()
    assert.is_nil(h.or2)
    assert.is_nil(h.er2)
    assert.equals("1", h.n)
    assert.is_true(d.pttl() <= 10000)
    -- its resend: r2 holds nothing in a lock r1 holds
    assert.same({ -1 }, d.rw_renew("r2", 10000, t))
    assert.same({ 1 }, d.rw_renew("r1", 10000, t))
  end)

  -- A reader whose lease ran out may be the last hold: taking it out
  -- frees the lock, and a waiter told to wait for a release hears of it
  -- as from a release (b: lib/waiter.lua), not at its next look.
  it("announces a lock it frees (a reader's lease ran out) while a waiter may listen", function()
    local msgs, stop = d.listen(key .. ":ch")
    finally(stop)
    local function expire(owner) srv.cli("hset", key, "e" .. owner, d.now_ms() - 1) end
    local t = d.rw_acquire("r", "r1", 1, 10000)[3]
    expire("r1")
    assert.same({ 0 }, d.rw_renew("r1", 10000, t))        -- nobody waits: silent
    assert.equals("0", d.field("n"))
    t = d.rw_acquire("r", "r1", 2, 10000)[3]
    d.rw_acquire("r", "r2", 1, 10000)
    assert.equals(0, d.rw_acquire("W", "w1", 1)[1])               -- a writer waits
    expire("r1")
    assert.same({ 0 }, d.rw_renew("r1", 10000, t))        -- r2 holds on: silent
    expire("r2")
    assert.same({ 0 }, d.rw_renew("r2", 10000, t))        -- frees it: announced
    assert.equals("0", d.field("n"))
    assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 5))
    srv.cli("publish", key .. ":ch", "end")             -- (nothing came before it)
    assert.truthy(helper.wait_for(function() return #msgs() >= 2 end, 5))
    assert.same({ tostring(t), "end" }, msgs())
    assert.same({ 1, 1, t + 1 }, d.rw_acquire("w", "w1", 2))
  end)

  it("answers gone after a cancel undid the acquire", function()
    local t = d.rw_acquire("r", "r1", 1, 10000)[3]
    assert.same({ 1 }, d.void("r1", "r1", 1))
    assert.same({ 0 }, d.rw_renew("r1", 60000, t))
    assert.equals("0", d.field("n"))
    assert.is_true(d.pttl() <= 10000)
  end)

  it("answers gone once the key expired or was evicted, and creates nothing", function()
    local t = d.rw_acquire("r", "r1", 1, 50)[3]
    d.expire_now()
    assert.same({ 0 }, d.rw_renew("r1", 10000, t))
    assert.is_false(d.exists())
    t = d.rw_acquire("r", "r1", 2)[3]
    srv.cli("del", key)
    assert.same({ 0 }, d.rw_renew("r1", 10000, t))
    assert.is_false(d.exists())
  end)
end)
