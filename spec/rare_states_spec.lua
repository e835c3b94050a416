-- Four states only a rare fault reaches, each a describe asserting what
-- the lock does there: request records pruned past 64 fields, a fair
-- grant to an earlier attempt, a shared owner lost on one client and alive
-- on another, and the lock kinds without a one-key acquire during a slot
-- migration.
local dlock = require "dlock"
local helper = require "helper"
local drive = require "scriptdrive"
local unpack = table.unpack or unpack

local load_scripts = helper.load_scripts

-- Pruning request records past RECORDS_MAX (64 fields) on a new
-- tenancy: the record of a release whose reply was lost, or of a
-- cancelled acquire (VOID, "seq!"), must still answer its resend / refuse
-- its late copy.
describe("request records pruned past 64 fields", function()
  local srv, sha, key, d = helper.redis(), nil, nil, nil
  setup(function() sha = load_scripts(srv) end)
  before_each(function()
    key = "s{" .. helper.unique_name("prune") .. "}"
    d = drive.new(srv, sha, key)
  end)
  -- Other requesters took and released the lock until their records
  -- fill the hash to 64 fields: one more record, and the next new
  -- tenancy prunes them. Their records' times (k<requester>: until when a
  -- resend may come) are then set in the past by hand, as if their leases
  -- had run out: no resend can come for them any more (a's, below, may).
  -- By hand, not by short leases: a slow build (ASan, valgrind) would
  -- let a 20 ms lease end between a crowd member's acquire and release.
  local function crowd()
    local i = 0
    while (tonumber(srv.cli("hlen", key)) or 0) < 64 do   -- (a short form: none yet)
      i = i + 1
      local t = d.acquire("c" .. i, "c" .. i, 1)[3]
      assert.same({ 1, 0 }, d.release("c" .. i, "c" .. i, 2, t))
    end
    srv.cli("EVAL", 'for _, f in ipairs(redis.call("hkeys", KEYS[1])) do ' ..
            'if f:sub(1, 1) == "k" then redis.call("hset", KEYS[1], f, "0") end end', 1, key)
  end

  it("answers a resent release as it ran, after a new tenancy pruned the records", function()
    crowd()
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t))     -- ran; its reply was lost
    local b = d.acquire("b", "b", 1)                     -- a new tenancy: prunes
    assert.equals(1, b[1])
    assert.equals("", helper.lock_field(srv, key, "qc1"))     -- the tenancy pruned the records
    -- a's client resends its release: it ran, so { 1, 0 } (not lost)
    assert.same({ 1, 0 }, d.release("a", "a", 2, t))
  end)

  it("refuses a late acquire copy whose cancel (VOID) was pruned", function()
    crowd()
    -- a's acquire seq 7 is on its way (a paused server, a slow proxy);
    -- its client gave up and cancelled it: VOID runs first
    assert.same({ 1 }, d.void("a", "a", 7))
    assert.equals("7!", helper.lock_field(srv, key, "qa"))
    local b = d.acquire("b", "b", 1)                     -- a new tenancy: prunes
    assert.equals("", helper.lock_field(srv, key, "qc1"))
    assert.same({ 1, 0 }, d.release("b", "b", 2, b[3]))
    -- the late copy of a's acquire arrives: refused, no hold for a
    assert.same({ -2 }, d.acquire("a", "a", 7))
    assert.equals("", helper.lock_field(srv, key, "oa"), "a hold nobody owns")
  end)
end)

-- A fair lock: waiter W queued with attempt 1 (its registration); its
-- attempt 2 never reached Redis; the holder's release grants the lock to
-- W's registration, under seq 1.
describe("a fair grant under an earlier attempt", function()
  local srv, sha, key, d = helper.redis(), nil, nil, nil
  setup(function() sha = load_scripts(srv) end)
  before_each(function()
    key = "s{" .. helper.unique_name("fairgrant") .. "}"
    d = drive.new(srv, sha, key)
  end)
  local S1, S2 = "0123456789abcdef", "fedcba9876543210"
  local function granted_to_w()
    assert.same({ 1, 1, 1 }, d.fair_acquire("h", "h", 1))          -- h holds it
    assert.equals(0, d.fair_acquire("W:1", "W:1", 1, S1)[1])        -- W queues, seq 1
    -- W's attempt 2 (secret S2) is lost on the way
    assert.equals(0, d.fair_acquire("X:1", "X:1", 1, S2)[1])        -- X queues behind W
    assert.same({ 1, 0 }, d.fair_release("h", "h", 2, 1))           -- granted to W, seq 1
    assert.equals(1, d.count("W:1"))
    assert.equals("1", helper.lock_field(srv, key, "qW:1"))
  end

  it("is the waiter's hold when it keeps waiting: its next attempt adopts it", function()
    granted_to_w()
    assert.same({ 1, 1, 2 }, d.fair_acquire("W:1", "W:1", 3, S2))   -- adopted, token 2
    assert.equals(1, d.count("W:1"))
    assert.same({ 1, 0 }, d.fair_release("W:1", "W:1", 4, 2))       -- and passed on to X
    assert.equals(1, d.count("X:1"))
    assert.equals(0, d.count("W:1"))
  end)

  it("is taken back and passed on when the waiter cancels its later attempt", function()
    granted_to_w()
    -- W's client saw attempt 2 fail (no reply): it cancels seq 2 and
    -- gives up the wait. The grant to its seq 1 is no hold of W's now.
    assert.same({ 1 }, d.fair_void("W:1", "W:1", 2, "1"))
    assert.equals(0, d.count("W:1"), "W's grant outlives its wait (until the grant's lease)")
    assert.equals(1, d.count("X:1"), "X was not handed the lock")
  end)

  -- The same calls reach Redis when W's client took its grant from the
  -- message (acquire.c, take_grant: no script runs), and its first
  -- reentry, seq 2, never reached Redis: it cancels seq 2. Here W's client
  -- holds the lock, so the cancel must leave the grant alone: the cancel
  -- says the attempt was a reentry, not a fresh acquire.
  it("stays with the waiter that took it from its message and cancels a later reentry", function()
    granted_to_w()
    assert.same({ 1 }, d.fair_void("W:1", "W:1", 2, "0"))
    assert.equals(1, d.count("W:1"), "a hold W's client knows of was taken out")
    assert.equals(0, d.count("X:1"), "passed on while W's client holds it: two holders")
  end)

  it("is not joined by the waiter's next fresh acquire after that cancel", function()
    granted_to_w()
    assert.same({ 1 }, d.fair_void("W:1", "W:1", 2, "1"))
    local r = d.fair_acquire("W:1", "W:1", 3, S1)        -- W, later, takes the lock anew
    if r[1] == 1 then
      assert.equals(1, r[2], "a fresh acquire joined the forgotten grant")
      assert.same({ 1, 0 }, d.fair_release("W:1", "W:1", 4, r[3]))
    end
  end)
end)

-- Clients A and B share owner "job". A's hold ends on A's side (lost:
-- its fixed lease, or max_hold) while B's watchdog keeps the key alive.
describe("a shared owner lost on one client, alive on another", function()
  for _, how in ipairs({ "expire", "max_hold" }) do
    it(("frees the lock when B releases, A's share lost by %s #timing"):format(how), function()
      local name, owner = helper.unique_name("shared"), helper.unique_name("job")
      local lost = {}
      local a = assert(helper.client{
        lease = 3, max_hold = how == "max_hold" and 1 or nil,
        on_lost = function(_, why) lost[#lost + 1] = why end })
      local b = assert(helper.client{ lease = 3 })
      local other = assert(helper.client())
      finally(function() a:close(); b:close(); other:close() end)
      local la, lb = a:lock(name, { owner = owner }), b:lock(name, { owner = owner })
      assert(lb:acquire())
      assert(la:acquire(how == "expire" and { expire = 1 } or nil))
      assert.equals(la:token(), lb:token())
      dlock.sleep(1.6)
      a:poll()
      assert.is_false(la:held())
      assert.is_true(lb:held())                        -- B renewed it meanwhile
      assert.equals(1, #lost, "A heard of its loss")
      -- nobody else got in while B holds it
      assert.is_nil((other:lock(name):try_acquire()))
      local ok, err = la:release()                     -- A: its share is gone
      assert.is_nil(ok)
      assert.matches("^lost", err)
      assert.is_true(lb:held())
      -- B's release is the last of job's holds anyone has: the lock is free
      local rel, left = lb:release()
      assert.is_true(rel)
      assert.equals(0, left, "A's lost share is still counted on the server")
      assert.is_nil(other:inspect(name), "held after every holder released")
      local third = other:lock(name)
      assert.truthy(third:try_acquire(), "a third owner is kept out")
      assert(third:release())
    end)
  end

  -- The DROP takes out A's holds alone (two, a reentry), in that tenancy
  -- alone, whatever A does next: here A joins B's tenancy again.
  it("takes out only A's lost holds, also when A joins again #timing", function()
    local name, owner = helper.unique_name("shared"), helper.unique_name("job")
    local lost = {}
    local a = assert(helper.client{ lease = 3,
                                    on_lost = function(_, why) lost[#lost + 1] = why end })
    local b = assert(helper.client{ lease = 3 })
    local other = assert(helper.client())
    finally(function() a:close(); b:close(); other:close() end)
    local la, lb = a:lock(name, { owner = owner }), b:lock(name, { owner = owner })
    assert(lb:acquire())
    assert(la:acquire{ expire = 1 })
    assert(la:acquire{ expire = 1 })                 -- A's count: 2
    dlock.sleep(1.6)
    a:poll()
    assert.is_false(la:held())
    assert.is_true(lb:held())
    assert.equals(1, #lost)
    assert(la:acquire())                             -- joins B's tenancy again
    assert.equals(lb:token(), la:token())
    local ok, left = la:release()
    assert.is_true(ok)
    assert.equals(1, left, "B's hold alone is left")
    local ok2, left2 = lb:release()
    assert.is_true(ok2)
    assert.equals(0, left2)
    assert.is_nil(other:inspect(name), "held after every holder released")
  end)

  -- On a fair lock too A's lost share is dropped (state.c). A's next
  -- fresh acquire names the lost hold's token, so it joins the tenancy
  -- rather than adopt the hold it had (g = A), which the DROP would take
  -- out while A believes in it. No other owner gets in while A or B
  -- holds, and A's release frees the lock (before the DROP on fair
  -- locks, A's lost share kept it held for another lease).
  it("fair lock: A's lost share goes; no other owner gets in while A holds #timing", function()
    local name, owner = helper.unique_name("fshared"), helper.unique_name("job")
    local a = assert(helper.client{ lease = 3 })
    local b = assert(helper.client{ lease = 3 })
    local other = assert(helper.client())
    finally(function() a:close(); b:close(); other:close() end)
    local la, lb = a:fair_lock(name, { owner = owner }), b:fair_lock(name, { owner = owner })
    assert(la:acquire{ expire = 1 })                 -- A first: g = A
    assert(lb:acquire())
    dlock.sleep(1.6)
    a:poll()
    assert.is_false(la:held())
    assert(la:acquire())                             -- A again, fresh
    assert.equals(lb:token(), la:token())
    assert(lb:release())
    assert.is_true(la:held())
    assert.is_nil((other:fair_lock(name):try_acquire()), "two holders")
    assert(la:release())
    local lo = other:fair_lock(name)
    assert(lo:try_acquire())                         -- free once A released
    assert(lo:release())
  end)
end)

-- The kinds with no one-key acquire (a read-write lock, a fair lock,
-- a semaphore) during a Cluster slot migration: the lock's key moved to
-- the target, its counter (and queue) still on the source.
describe("rwlock, fair lock and semaphore during a slot migration", function()
  local topology = require "topology"
  local cl
  setup(function() cl = topology.cluster(3) end)
  teardown(function() if cl then cl.stop() end end)

  local kinds = {
    rwlock = function(c, name, owner)
      return c:rwlock(name, owner and { owner = owner } or nil).write
    end,
    fair = function(c, name, owner)
      return c:fair_lock(name, owner and { owner = owner } or nil)
    end,
    semaphore = function(c, name)
      local s = c:semaphore(name, 1)
      return { acquire = function(_, o) local id, e, t = s:acquire(o); if id then return s, id end
                                         return nil, e, t end,
               try_acquire = function(_) return s:acquire{ wait = 0 } end,
               sem = s }
    end,
  }

  for _, case in ipairs({ { "rwlock", true }, { "fair", true }, { "semaphore", true },
                          { "rwlock", false }, { "fair", false }, { "semaphore", false } }) do
    local kind, fresh = case[1], case[2]
    it(kind .. (fresh and ": a fresh acquire waits out the migration; one holder at a time"
                or ": an acquire after a one-attempt acquire met TRYAGAIN waits it out too") .. " #timing", function()
      local opts = { cluster = cl.urls, lease = 3, command_timeout = 0.5 }
      local c1, c2 = assert(dlock.connect(opts)), assert(dlock.connect(opts))
      finally(function() c1:close(); c2:close() end)
      local tag = helper.unique_name(kind):gsub("[{}]", "")
      local name = "m{" .. tag .. "}"
      local k = "dlock:{" .. name .. "}"
      local slot = cl.keyslot(k)
      local from = cl.owner(slot)
      local to = from % 3 + 1
      local src, dst = cl.nodes[from], cl.nodes[to]
      -- warm up: the kind's keys exist, a token was minted
      local l1 = kinds[kind](c1, name)
      local h1, id1 = l1:acquire{ wait = 2 }
      assert.truthy(h1)
      local function release1()
        if kind == "semaphore" then return l1.sem:release(id1) end
        return l1:release()
      end
      -- start the migration; move the lock's own key only
      assert.equals("OK", dst.cli("cluster", "setslot", slot, "importing", cl.ids[from]))
      assert.equals("OK", src.cli("cluster", "setslot", slot, "migrating", cl.ids[to]))
      assert.equals("OK", src.cli("migrate", "127.0.0.1", dst.port, "", 0, 5000, "keys", k))
      -- c2 while c1 holds it: never a second holder
      local l2 = kinds[kind](c2, name)
      local ok, err = l2:try_acquire()
      assert.is_nil(ok, "a second holder during the migration")
      print(("\n%s: try_acquire while held, mid-migration: %s"):format(kind, tostring(err)))
      -- c1 releases mid-migration
      local rok, rerr = release1()
      print(("%s: release mid-migration: %s %s"):format(kind, tostring(rok), tostring(rerr)))
      -- a fresh one-attempt acquire while the migration is half done
      local ok2, err2 = l2:try_acquire()
      print(("%s: try_acquire of a free lock mid-migration: %s %s"):format(
        kind, tostring(ok2), tostring(err2)))
      if ok2 then
        if kind == "semaphore" then assert(l2.sem:release(ok2)) else assert(l2:release()) end
      else
        assert.matches("TRYAGAIN", tostring(err2))
      end
      -- a waiting acquire gets in once the migration ends (0.6 s from now)
      local keys = {}
      for _, kk in ipairs({ helper.fence_key(name), k .. ":q" }) do
        if src.cli("exists", kk) == "1" then keys[#keys + 1] = kk end
      end
      local finisher = io.popen(("sleep 0.6; %s for p in %d %d %d; do redis-cli -p $p cluster setslot %d node %s >/dev/null; done"):format(
        #keys > 0 and ("redis-cli -p %d migrate 127.0.0.1 %d '' 0 5000 keys %s >/dev/null;"):format(
          src.port, dst.port, table.concat(keys, " ")) or "",
        cl.nodes[1].port, cl.nodes[2].port, cl.nodes[3].port, slot, cl.ids[to]))
      -- (from a client that tried nothing before: no cancel of an
      -- earlier attempt of its own is pending)
      local c3 = fresh and assert(dlock.connect(opts)) or c2
      finally(function() c3:close() end)
      local l4 = fresh and kinds[kind](c3, name) or l2
      local t0 = dlock.now()
      local got, gerr = l4:acquire{ wait = 8 }
      local took = dlock.now() - t0
      finisher:close()
      print(("%s: waiting acquire: %s %s after %.2f s"):format(kind,
        tostring(got), tostring(gerr), took))
      assert.truthy(got, gerr)
      -- one holder: c1 cannot get in while c2 holds it
      local l3 = kinds[kind](c1, name, "third")
      assert.is_nil((l3:try_acquire()), "two holders after the migration")
      assert.truthy(c3:inspect(name))
      local _ = unpack
    end)
  end
end)
