-- Redis Cluster: a slot that migrates, key by key, under held and awaited
-- locks: acquire, wait, renew and release follow ASK, TRYAGAIN and the move.
-- (The common lock API on Cluster is in ha_spec.lua; fair-lock and
-- semaphore releases mid-migration in cluster_migrating_releases_spec.lua.)
local dlock = require "dlock"
local helper = require "helper"

describe("live slot migration", function()
  it("keeps acquire, wait, renew and release working while a slot moves key by key #timing", function()
    local topology = require "topology"
    local cl = topology.cluster(3)
    local opts = { cluster = cl.urls, lease = 1.5, command_timeout = 0.5 }
    local c, other, waiter = assert(dlock.connect(opts)), assert(dlock.connect(opts)),
                             assert(dlock.connect(opts))
    local tag = helper.unique_name("mig"):gsub("[{}]", "")
    local A, B = "x{" .. tag .. "}a", "x{" .. tag .. "}b"      -- one slot
    local keyA, keyB = "dlock:{" .. A .. "}", "dlock:{" .. B .. "}"
    local la, lb = c:lock(A), other:lock(B)
    assert(la:acquire{ watchdog_lease = 20 })       -- (the waiter below)
    assert(lb:acquire())
    local slot = cl.keyslot(keyA)
    assert.equals(slot, cl.keyslot(keyB))
    local fence = helper.fence_key(A)
    assert.equals(slot, cl.keyslot(fence))
    local from = cl.owner(slot)
    local to = from % 3 + 1
    local src, dst = cl.nodes[from], cl.nodes[to]
    assert.equals("OK", dst.cli("cluster", "setslot", slot, "importing", cl.ids[from]))
    assert.equals("OK", src.cli("cluster", "setslot", slot, "migrating", cl.ids[to]))
    local function migrate(key, may_be_gone)
      local r = src.cli("migrate", "127.0.0.1", dst.port, "", 0, 5000, "keys", key)
      assert.is_true(r == "OK" or (may_be_gone and r == "NOKEY"), "MIGRATE " .. key .. ": " .. r)
    end

    local function asking_pttl(key)               -- the importing node needs ASKING
      local p = assert(io.popen(("printf 'ASKING\\nPTTL %s\\n' | redis-cli -p %d"):format(key, dst.port)))
      local out = p:read("*a")
      p:close()
      return tonumber(out:match("\n(%-?%d+)")) or -3
    end

    migrate(keyA)                                   -- A moved, B and the counter not
    dlock.sleep(1.2)                                -- renewals follow ASK
    assert.is_true(la:held())
    local ttl = asking_pttl(keyA)
    assert.is_true(ttl > 700, "A not renewed on the target: pttl " .. ttl)
    assert.same({ true, 0 }, { lb:release() })      -- on the source
    -- the lock and its slot's counter are on two nodes now (TRYAGAIN for a
    -- two-key script): a reentry still works; a fresh acquire waits for
    -- the counter (a token minted without it could go backwards later)
    local lc = c:lock("x{" .. tag .. "}c")
    local ok, err = lc:try_acquire()
    assert.is_nil(ok)
    assert.matches("TRYAGAIN", err)
    assert(la:acquire())
    assert.same({ true, 1 }, { la:release() })

    migrate(fence)                                  -- A and the counter moved
    local waiting = helper.spawn("hold", ("{ cluster = { %q }, lease = 1.5 }"):format(cl.urls[1]),
                                 A, 1.5)
    dlock.sleep(0.5)                                -- it waits for A
    assert.is_falsy(waiting.output():find("held"))
    -- The release runs on the target (ASK) and announces itself there; the
    -- waiter subscribed on the source, which still owns the slot, so it
    -- does not hear it. It was told to wait for A's TTL (20 s), but a
    -- waiter whose slot is mid-migration looks again every 0.1 s (A's
    -- freed key lives on meanwhile: no TRYAGAIN).
    assert.same({ true, 0 }, { la:release() })      -- ASK to the target
    assert(helper.wait_for(function() return waiting.output():find("held") end, 8),
           "the waiter never got A: " .. waiting.output())
    local lw = waiter:lock(A)
    assert.is_nil((lw:try_acquire()))               -- the other process holds it
    assert(helper.wait_for(function() return waiting.output():find("release") end, 5))
    assert.matches("release %S+ true 0", waiting.output())
    assert(lw:acquire{ wait = 3 })
    migrate(keyB, true)                             -- the rest (B's record may
                                                    -- have expired), then the slot
    for i, h in ipairs(cl.nodes) do
      assert.equals("OK", h.cli("cluster", "setslot", slot, "node", cl.ids[to]), "node " .. i)
    end
    dlock.sleep(1.2)                                -- renewals on the new owner
    assert.is_true(lw:held())
    assert.same({ true, 0 }, { lw:release() })
    assert(lb:acquire())                            -- a fresh acquire after the move
    assert(lb:release())
    assert(lc:acquire())
    local tc = lc:token()
    assert(lc:release())
    assert(lc:acquire())                            -- tokens still increase
    assert.is_true(lc:token() > tc, lc:token() .. " after " .. tc)
    assert(lc:release())
    c:close(); other:close(); waiter:close()
    cl.stop()
  end)
end)
