-- The Redis-side scripts driven step by step, to reach the states a
-- client only meets when a reply is lost: a request resent (or arriving
-- late) after other requests, a last release resent after other owners
-- took the lock, a hold that expired or was force-released meanwhile, an
-- owner shared by two clients, keys deleted or evicted under a hold.
-- One describe per script; the others are in scripts_{lease,rw,sem,fair,
-- inspect}_spec.lua (scriptfiles_spec checks that each script has one).
local helper = require "helper"
local drive = require "scriptdrive"

describe("the scripts, one by one #nocore", function()
  local srv, sha = helper.redis(), {}

  setup(function() sha = helper.load_scripts(srv) end)

  local key, fence, d
  before_each(function()
    key = "s{" .. helper.unique_name("scripts") .. "}"
    fence = key .. ":fence"                 -- same slot; one per test here
    d = drive.new(srv, sha, key)
  end)

  local S1, S2, S3 = "0123456789abcdef", "fedcba9876543210", "00000000deadbeef"

  -- acquire.lua: a fresh acquire, a reentry, and their resends
  describe("acquire.lua", function()
    it("recognises a resent acquire exactly, and a new one as new", function()
      assert.same({ 1, 1, 1 }, d.acquire("a", "a", 1))
      assert.same({ 1, 1, 1 }, d.acquire("a", "a", 1))            -- resend
      assert.same({ 1, 2, 1 }, d.acquire("a", "a", 2, nil, 1))    -- reentry
      assert.same({ 1, 2, 1 }, d.acquire("a", "a", 2, nil, 1))
      assert.equals(2, d.count("a"))
    end)

    it("refuses an acquire that arrives after it was cancelled", function()
      assert.same({ 1 }, d.void("a", "a", 7))        -- sent, then cancelled...
      assert.same({ -2 }, d.acquire("a", "a", 7))    -- ...arrives late: refused
      assert.is_true(helper.is_free(srv, key))
      assert.same({ 1, 1, 1 }, d.acquire("b", "b", 1))
    end)

    it("adds up the holds of one owner shared by two clients", function()
      assert.same({ 1, 1, 1 }, d.acquire("job-7", "A|job-7", 1))
      assert.same({ 1, 2, 1 }, d.acquire("job-7", "B|job-7", 1))  -- not a resend
      assert.same({ 0 }, { d.acquire("x", "x", 1)[1] })
      assert.same({ 1, 1 }, d.release("job-7", "A|job-7", 2, 1))
      assert.is_false(helper.is_free(srv, key))    -- B still holds it
      assert.same({ 0 }, { d.acquire("x", "x", 2)[1] })
      assert.same({ 1, 0 }, d.release("job-7", "B|job-7", 2, 1))
      assert.is_true(helper.is_free(srv, key))
      assert.same({ 1, 1, 2 }, d.acquire("x", "x", 3))
    end)

    -- A shared owner's requesters (clients) each take out their own holds
    -- alone: after a failover a client may hold where its co-owner's
    -- request never landed, and the co-owner's release, cancel or drop
    -- must not take that hold instead.
    -- A's client gave its hold up as lost (Redis had lost it already) and
    -- acquired again, joining B's tenancy: the DROP it queued at the loss
    -- comes after, and must leave that new hold.
    it("drops nothing where a later request of the requester ran", function()
      local function h(req) return helper.lock_field(srv, key, "h" .. req) end
      assert.same({ 1, 1, 1 }, d.acquire("job", "A|job", 1))
      assert.same({ 1, 2, 1 }, d.acquire("job", "B|job", 1))
      assert.same({ 1, 3, 1 }, d.acquire("job", "A|job", 5))  -- sent after the loss
      assert.equals(0, d.drop("job", 1, 1, "A|job", 4))           -- the loss: after 4
      assert.equals("2", h("A|job"))
      assert.equals(1, d.drop("job", 1, 1, "A|job", 5))           -- no later one: taken
      assert.equals("1", h("A|job"))
    end)

    it("takes out only a requester's own holds of a shared owner: release, drop, void", function()
      local function h(req) return helper.lock_field(srv, key, "h" .. req) end
      assert.same({ 1, 1, 1 }, d.acquire("job", "A|job", 1))
      assert.same({ 1, 2, 1 }, d.acquire("job", "B|job", 1))
      assert.equals("1", h("A|job"))
      assert.equals("1", h("B|job"))
      assert.same({ -1 }, d.release("job", "C|job", 1, 1))   -- C never held here
      assert.equals(2, d.count("job"))
      assert.same({ 1, 1 }, d.release("job", "B|job", 2, 1))
      assert.same({ 1, 1 }, d.release("job", "B|job", 2, 1)) -- its resend: the same
      assert.equals("", h("B|job"))
      assert.equals(0, d.drop("job", 1, 1, "B|job"))          -- B holds nothing now
      assert.equals(0, d.drop("job", 1, 0, "B|job"))          -- in any tenancy
      assert.equals(1, d.count("job"))
      assert.equals("1", h("A|job"))
      assert.same({ 0 }, { d.acquire("x", "x", 1)[1] })       -- A still holds it
      -- B's acquire ran, its reply was lost; the lock was force-released,
      -- and D, of the same owner, took it: B's cancel leaves D's hold.
      assert.same({ 1, 2, 1 }, d.acquire("job", "B|job", 3))
      assert.equals(1, d.force("F", 1))
      assert.equals("", h("A|job"))                         -- force: every count
      assert.same({ 1, 1, 2 }, d.acquire("job", "D|job", 1))
      assert.same({ 1 }, d.void("job", "B|job", 3))
      assert.equals(1, d.count("job"))
      assert.equals("1", h("D|job"))
      assert.same({ 1, 0 }, d.release("job", "D|job", 2, 2))
      assert.is_true(helper.is_free(srv, key))
      assert.equals("", h("D|job"))
    end)

    it("tells another owner busy in the hold's last millisecond (PTTL 0), never joins it", function()
      -- (torture seed 51852850: a fresh acquire that met PTTL 0 joined the
      -- expiring tenancy and got its token.) Each round sends a 2 ms hold
      -- and, in the same write, tries by fresh owners: the server runs
      -- them back to back, dozens to a millisecond however slow this
      -- process is, so some meet the hold's last millisecond.
      local y = helper.script_layouts().acquire
      local function try(owner, lease_ms)
        local v = { lock = key, counter = fence, owner = owner, req = owner, seq = 1,
                    lease_ms = lease_ms, expect = 0, token = 1, waited = -1 }
        local argv = helper.script_head(sha, "acquire", #y.keys)
        for _, k in ipairs(y.keys) do argv[#argv + 1] = v[k] end
        for _, a in ipairs(y.args) do argv[#argv + 1] = v[a] end
        return argv
      end
      local last = 0
      for round = 1, 10 do
        local a, cmds = "a" .. round, {}
        cmds[1] = try(a, 2)
        for i = 1, 1000 do cmds[#cmds + 1] = try(("b%d.%d"):format(round, i), 10000) end
        local r = helper.pipeline(srv, cmds)
        for i, x in ipairs(r) do      -- a hold of count 1 is its token alone
          if type(x) == "number" then r[i] = { 1, 1, x } end
        end
        assert.equals(1, r[1][1])
        local t, winner = r[1][3], nil
        for i = 2, #r do
          assert(type(r[i]) == "table" and not r[i].err, "reply " .. i)
          if r[i][1] == 1 then
            assert.is_nil(winner, "two owners granted")
            winner = i
            assert.is_true(r[i][3] > t, ("round %d: token %s after %d: joined")
              :format(round, tostring(r[i][3]), t))
          else
            assert.equals(0, r[i][1])
            if not winner and r[i][2] <= 1 then last = last + 1 end
          end
        end
        assert.is_number(winner, "the 2 ms hold outlived 1,000 tries")
        local b = ("b%d.%d"):format(round, winner - 1)
        assert.equals(1, d.count(b))
        assert.equals(0, d.count(a))
        assert.same({ 1, 0 }, d.release(b, b, 2, r[winner][3]))
      end
      assert.is_true(last > 0, "no try met the last millisecond")
    end)

    it("refuses a reentry into another tenancy of a shared owner", function()
      d.acquire("X", "A|X", 1)                         -- A holds X's lock, token 1
      assert.equals(1, d.force("F", 1))
      assert.same({ 1, 1, 2 }, d.acquire("X", "B|X", 1))  -- B: a new tenancy
      assert.same({ -1 }, d.acquire("X", "A|X", 2, nil, 1, 1))  -- A's hold is gone
      assert.equals(1, d.count("X"))
    end)

    it("refuses a reentry into a shared owner's tenancy where its own hold is gone", function()
      local t = d.acquire("X", "B|X", 1)[3]            -- B holds; A's acquire never came
      assert.same({ -1 }, d.acquire("X", "A|X", 2, nil, 1, t))  -- (a failover lost it)
      assert.equals(1, d.count("X"))
      assert.equals("", helper.lock_field(srv, key, "hA|X"))  -- nothing joined for A
      assert.same({ 1, 2, t }, d.acquire("X", "A|X", 3))       -- a fresh one joins
      assert.same({ 1, 3, t }, d.acquire("X", "A|X", 4, nil, 1, t))
    end)

    it("keeps tokens increasing when the fence counter is evicted", function()
      local t = d.acquire("a", "a", 1)[3]
      d.release("a", "a", 2, t)
      srv.cli("del", fence)
      local t2 = d.acquire("b", "b", 1)[3]
      assert.is_true(t2 > t, t2 .. " after " .. t)
      assert.equals(t2, tonumber(srv.cli("get", fence)))
    end)

    it("answers lost, not a bad reply, when the lock's key is evicted under a hold", function()
      d.acquire("a", "a", 1)
      d.acquire("a", "a", 2, nil, 1)
      srv.cli("del", key)
      assert.same({ -1 }, d.acquire("a", "a", 3, nil, 2))   -- lost, not a bad reply
      assert.same({ -1 }, d.release("a", "a", 4, 1))
      assert.same({ 1 }, d.void("a", "a", 5))
      srv.cli("del", fence)
      assert.same({ 1, 1, 1 }, d.acquire("b", "b", 1))       -- both gone: starts over
    end)
  end)

  -- void.lua: the cancel of an acquire whose reply was lost
  describe("void.lua", function()
    it("undoes a reentrant acquire that ran but whose reply was lost", function()
      d.acquire("a", "a", 1)
      d.acquire("a", "a", 2, nil, 1)                 -- ran; the client saw a timeout
      assert.same({ 1 }, d.void("a", "a", 2))        -- the client cancels it
      assert.same({ 1 }, d.void("a", "a", 2))        -- a resent cancel changes nothing
      assert.equals(1, d.count("a"))
      assert.same({ 1, 0 }, d.release("a", "a", 3, 1))
      assert.is_true(helper.is_free(srv, key))     -- the one release frees it
    end)
  end)

  -- acquire.lua and release.lua: a waiter that starves has the lock
  -- reserved for it (lib/waiter.lua)
  describe("acquire.lua, release.lua: the starvation bound", function()
    local function server_ms()
      local sec, us = srv.cli("time"):match("^(%d+)%s+(%d+)")
      return tonumber(sec) * 1000 + math.floor(tonumber(us) / 1000)
    end
    -- The release reserved the lock for `who` 250 ms from when it ran
    -- (after `before`); the reservation is then made to last a minute, so
    -- that the steps that follow need no fast machine to meet it.
    local function reserved_for(who, before)
      local ms = helper.lock_field(srv, key, "r"):match("^(%d+):" .. who .. "$")
      assert.is_string(ms, "no reservation for " .. who)
      assert.is_true(tonumber(ms) >= before + 250 and tonumber(ms) <= server_ms() + 250, ms)
      srv.cli("hset", key, "r", (server_ms() + 60000) .. ":" .. who)
    end

    it("reserves a freed lock for the longest waiter past the bound, for it alone", function()
      local t = d.acquire("a", "a", 1)[3]
      assert.equals(0, d.acquire("b", "b", 1, nil, nil, nil, 20000)[1]) -- waited 20 s
      assert.equals(0, d.acquire("c", "c", 1, nil, nil, nil, 5)[1])     -- less: b stays
      assert.matches(":b$", helper.lock_field(srv, key, "v"))
      local before = server_ms()
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))
      reserved_for("b", before)                                      -- b's alone
      assert.equals("", helper.lock_field(srv, key, "v"))                   -- spent
      local busy = d.acquire("a", "a", 3, nil, nil, nil, 0)             -- the releaser
      assert.equals(0, busy[1])
      assert.is_true(busy[2] > 250 and busy[2] <= 60000, tostring(busy[2]))
      assert.equals(0, d.acquire("c", "c", 2, nil, nil, nil, 20000)[1]) -- c names itself
      t = d.acquire("b", "b", 2, nil, nil, nil, 30)[3]                   -- b takes it
      assert.equals(t, 2)
      assert.equals("", helper.lock_field(srv, key, "r"))
      assert.matches(":c$", helper.lock_field(srv, key, "v"))               -- c is next
      before = server_ms()
      assert.same({ 1, 0 }, d.release("b", "b", 3, t))
      reserved_for("c", before)
      assert.equals(0, d.acquire("a", "a", 4, nil, nil, nil, 0)[1])
      assert.same({ 1, 1, 3 }, d.acquire("c", "c", 3, nil, nil, nil, 101))
    end)

    it("reserves nothing for a try, or for a waiter within the bound", function()
      local t = d.acquire("a", "a", 1)[3]
      assert.equals(0, d.acquire("b", "b", 1)[1])                 -- a try: waited -1
      assert.equals("", helper.lock_field(srv, key, "v"))
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))
      t = d.acquire("a", "a", 3)[3]                               -- barges: free for all
      srv.cli("hset", key, "v", (server_ms() + 60000) .. ":b")   -- waited less than the bound
      assert.same({ 1, 0 }, d.release("a", "a", 4, t))
      assert.equals("", helper.lock_field(srv, key, "r"))
      t = d.acquire("a", "a", 5)[3]
      assert.equals(0, d.acquire("b", "b", 2, nil, nil, nil, 500)[1])  -- starves...
      assert.equals(0, d.acquire("b", "b", 3)[1])                 -- ...times out
      assert.equals("", helper.lock_field(srv, key, "v"))              -- withdrawn
      assert.same({ 1, 0 }, d.release("a", "a", 6, t))
      assert.equals("", helper.lock_field(srv, key, "r"))
    end)

    -- A wait that ends in an error cancels its last attempt (void.lua),
    -- and the cancel gives the waiter's claim up, as a timed-out wait's
    -- last try does: whether it is still the longest waiter (v) or the
    -- lock was reserved for it already (r).
    it("gives a cancelled waiter's claim up: the longest waiter, a reservation", function()
      local t = d.acquire("a", "a", 1)[3]
      assert.equals(0, d.acquire("b", "b", 1, nil, nil, nil, 500)[1])  -- starves...
      assert.same({ 1 }, d.void("b", "b", 2))                          -- ...its wait errs
      assert.equals("", helper.lock_field(srv, key, "v"))                   -- withdrawn
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))
      assert.equals("", helper.lock_field(srv, key, "r"))                   -- free for all
      t = d.acquire("a", "a", 3)[3]
      assert.equals(0, d.acquire("b", "b", 3, nil, nil, nil, 20000)[1])
      assert.equals(0, d.acquire("c", "c", 1, nil, nil, nil, 100)[1])
      assert.same({ 1, 0 }, d.release("a", "a", 4, t))
      reserved_for("b", 0)                                           -- b's now
      assert.same({ 1 }, d.void("b", "b", 4))                          -- and b's wait errs
      assert.equals("", helper.lock_field(srv, key, "r"))
      assert.same({ 1, 1, 3 }, d.acquire("a", "a", 5))                 -- nobody kept out
      assert.equals(0, d.acquire("c", "c", 2, nil, nil, nil, 200)[1])  -- c looks again
      assert.matches(":c$", helper.lock_field(srv, key, "v"))
      assert.same({ 1 }, d.void("c", "c", 3))                          -- c's wait errs too
      assert.equals("", helper.lock_field(srv, key, "v"))
      assert.equals(0, d.acquire("c", "c", 4, nil, nil, nil, 0)[1])    -- a new wait
      assert.matches(":c$", helper.lock_field(srv, key, "v"))
      assert.same({ 1 }, d.void("c", "c", 3))                          -- the cancel's late copy:
      assert.matches(":c$", helper.lock_field(srv, key, "v"))               -- it changes nothing
    end)

    it("lets anyone take a reservation that ran out", function()
      local t = d.acquire("a", "a", 1)[3]
      assert.equals(0, d.acquire("b", "b", 1, nil, nil, nil, 50)[1])
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))
      assert.equals(0, d.acquire("a", "a", 3)[1])
      srv.cli("hset", key, "r", (server_ms() - 1) .. ":b")      -- b never came
      assert.equals(1, d.acquire("a", "a", 4)[1])
      assert.equals("", helper.lock_field(srv, key, "r"))
    end)
  end)

  -- release.lua: a release, its resends, and the request records they read
  describe("release.lua", function()
    it("answers a resent last release while the lock is free", function()
      d.acquire("a", "a", 1)
      assert.same({ 1, 0 }, d.release("a", "a", 2, 1))
      assert.same({ 1, 0 }, d.release("a", "a", 2, 1))
    end)

    it("answers a resent last release after 40 other owners took the lock", function()
      d.acquire("a", "a", 1)
      assert.same({ 1, 0 }, d.release("a", "a", 2, 1))
      for i = 1, 40 do
        local b = d.acquire("b" .. i, "b" .. i, 1)
        assert.same({ 1, 1, i + 1 }, b)
        assert.same({ 1, 0 }, d.release("b" .. i, "b" .. i, 2, i + 1))
      end
      assert.same({ 1, 0 }, d.release("a", "a", 2, 1))
    end)

    it("announces a freed lock only while a busy acquire's wait may last", function()
      local msgs, stop = d.listen(key .. ":ch")
      finally(stop)
      local t = d.acquire("a", "a", 1, 10000)[3]
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))        -- nobody waited: silent
      t = d.acquire("a", "a", 3, 10000)[3]
      local busy = d.acquire("b", "b", 1)                       -- b waits, told pttl
      assert.equals(0, busy[1])
      local until_ms = tonumber(helper.lock_field(srv, key, "b"))
      local now = tonumber(srv.cli("time"):match("^(%d+)")) * 1000
      assert.is_true(until_ms > now + 9000 and until_ms <= now + 11000, until_ms - now)
      assert.same({ 1, 0 }, d.release("a", "a", 4, t))        -- announced
      local t2 = t
      t = d.acquire("a", "a", 5, 10000)[3]
      assert.same({ 1, 0 }, d.release("a", "a", 6, t))        -- b may still wait
      local t3 = t
      srv.cli("hset", key, "b", now - 1)                     -- its wait is over
      t = d.acquire("a", "a", 7, 10000)[3]
      assert.same({ 1, 0 }, d.release("a", "a", 8, t))        -- silent
      t = d.acquire("a", "a", 9, 3000)[3]
      assert.equals(0, d.acquire("b", "b", 2)[1])             -- marks it again
      assert.same({ 1, 0 }, d.release("a", "a", 10, t))
      assert.truthy(helper.wait_for(function() return #msgs() >= 3 end, 10))
      assert.same({ tostring(t2), tostring(t3), tostring(t) }, msgs())
    end)

    -- The record lives in the lock's key, whose TTL a later tenancy sets
    -- to its own lease: a resend that comes after a shorter one ended finds
    -- nothing, and is answered lost though it ran (a known limit, on the
    -- safe side: doc/reference.md, Lost replies).
    -- (b's lease is shorter than a's, yet long enough to outlast the
    -- resend's redis-cli calls on a loaded machine: 50 ms did not.)
    it("answers lost a resent release whose record a later, shorter tenancy took away #timing", function()
      local t = d.acquire("a", "a", 1, 10000)[3]
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))       -- ran; its reply lost
      local t2 = d.acquire("b", "b", 1, 3000)[3]               -- b's lease: 3 s
      assert.same({ 1, 0 }, d.release("b", "b", 2, t2))
      assert.same({ 1, 0 }, d.release("a", "a", 2, t))       -- the resend, in time
      d.expire_now()                                          -- b's lease ran out
      assert.same({ -1 }, d.release("a", "a", 2, t))         -- a later resend: lost
    end)

    it("keeps a freed lock's record for the rest of the lease, not keep_ms #timing", function()
      local t = d.acquire("a", "a", 1, 10000)[3]
      assert.same({ 1, 0 }, d.release("a", "a", 2, t, 100))
      local left = tonumber(srv.cli("pttl", key))
      assert.is_true(left > 5000, left)       -- the releaser resends up to then
    end)

    it("reports lost a hold that expired, also after others took the lock", function()
      d.acquire("a", "a", 1, 30)
      d.expire_now()
      assert.same({ -1 }, d.release("a", "a", 2, 1))  -- nobody took it since
      d.acquire("b", "b", 1)
      assert.same({ -1 }, d.release("a", "a", 2, 1))  -- b took it since
    end)

    it("reports lost a hold that expired when its owner took the lock again elsewhere", function()
      d.acquire("job", "A|job", 1, 30)
      d.expire_now()
      d.acquire("job", "B|job", 1)                     -- same owner, new tenancy
      assert.same({ -1 }, d.release("job", "A|job", 2, 1))
      assert.equals(1, d.count("job"))                 -- B's hold untouched
    end)

    it("reports lost a force-released hold", function()
      d.acquire("a", "a", 1)
      assert.equals(1, d.force("F", 1))
      assert.same({ -1 }, d.release("a", "a", 2, 1))
    end)

    it("ignores stale copies of requests overtaken by newer ones", function()
      d.acquire("a", "a", 1)
      d.acquire("a", "a", 2, nil, 1)                  -- count 2
      assert.same({ 1, 1 }, d.release("a", "a", 3, 1)) -- the client resent it...
      assert.same({ 1, 2, 1 }, d.acquire("a", "a", 4, nil, 1))  -- ...and went on
      assert.same({ 1, 2 }, d.release("a", "a", 3, 1)) -- the watchdog's late copy
      assert.same({ 1 }, d.void("a", "a", 3))          -- a late cancel of it
      assert.same({ -2 }, d.acquire("a", "a", 2, nil, 1))   -- a late acquire
      assert.equals(2, d.count("a"))
      assert.same({ 1, 1 }, d.release("a", "a", 5, 1))
      assert.same({ 1, 0 }, d.release("a", "a", 6, 1))
      assert.is_true(helper.is_free(srv, key))
    end)

    it("prunes old request records instead of growing without bound", function()
      -- Leases of 10 s keep the hash; each release keeps its record 2 x 20 ms.
      local tokens = {}
      local function cycle(i)
        tokens[i] = d.acquire("o" .. i, "o" .. i, 1, 10000)[3]
        assert.same({ 1, 0 }, d.release("o" .. i, "o" .. i, 2, tokens[i], 20))
      end
      for i = 1, 40 do cycle(i) end
      -- n, t, and q<req>, k<req> per requester: o33's acquire found 66
      -- fields and pruned. A release writes its k without the clock
      -- ("20e99"); that prune stamped them (now + 40 ms) and dropped none.
      assert.matches("^%d+$", helper.lock_field(srv, key, "ko1"))
      assert.equals("20e99", helper.lock_field(srv, key, "ko40"))
      -- (an older client's prune compares k with the clock: far ahead)
      assert.is_true(tonumber(helper.lock_field(srv, key, "ko40")) > 1e15)
      for i = 1, 40 do                               -- each resend: as it ran
        assert.same({ 1, 0 }, d.release("o" .. i, "o" .. i, 2, tokens[i], 20))
      end
      -- Still over the limit: no prune for a second (m). After it, the
      -- next new tenancy drops the stamped records that have passed and
      -- stamps the others.
      require("dlock").sleep(1.1)
      cycle(41)
      assert.equals("", helper.lock_field(srv, key, "qo1"))
      assert.equals("", helper.lock_field(srv, key, "ko1"))
      assert.matches("^%d+$", helper.lock_field(srv, key, "ko40"))
      assert.equals("20e99", helper.lock_field(srv, key, "ko41"))
      assert.is_true(tonumber(srv.cli("hlen", key)) <= 64, srv.cli("hlen", key))
    end)

    it("keeps the records a resend may still come for, past the limit if need be", function()
      local tokens = {}
      for i = 1, 60 do                               -- live: keep_ms 10 s
        tokens[i] = d.acquire("o" .. i, "o" .. i, 1)[3]
        assert.same({ 1, 0 }, d.release("o" .. i, "o" .. i, 2, tokens[i]))
      end
      assert.is_true(tonumber(srv.cli("hlen", key)) > 64)
      for i = 1, 60 do                               -- each resend: as it ran
        assert.same({ 1, 0 }, d.release("o" .. i, "o" .. i, 2, tokens[i]))
      end
    end)
  end)

  -- force.lua: a forced release and its resend
  describe("force.lua", function()
    it("never lets a resent force_release delete a later owner's hold", function()
      d.acquire("a", "a", 1)
      assert.equals(1, d.force("F", 1))
      assert.same({ 1, 1, 2 }, d.acquire("b", "b", 1))
      assert.equals(1, d.force("F", 1))                -- the resend: same answer...
      assert.equals(1, d.count("b"))                   -- ...and b keeps the lock
      srv.cli("del", key)
      assert.equals(0, d.force("F", 2))                -- free: nothing to delete
      d.acquire("c", "c", 1)
      assert.equals(0, d.force("F", 2))
      assert.equals(1, d.count("c"))
    end)
  end)

  -- drop.lua: the holds of a client that gave them up
  describe("drop.lua", function()
    it("never drops more holds than the owner has: the count stays >= 0", function()
      d.acquire("a", "a", 1)
      assert.equals(1, d.drop("a", 2))                 -- asked for one too many
      assert.equals("0", helper.lock_field(srv, key, "n"))
      assert.same({ 1, 1, 2 }, d.acquire("y", "y", 1))
      assert.same({ 0 }, { d.acquire("z", "z", 1)[1] })  -- y holds it: z waits
    end)
  end)

  -- fair_acquire.lua: a fair waiter's registration
  describe("fair_acquire.lua", function()
    -- A fair lock's grant is published with the seq and the secret of
    -- the registration it goes to; the waiter takes nothing
    -- else as its grant (fairlock_spec), so the secret must follow every
    -- change of the registration.
    it("keeps a fair waiter's secret with its registration: resent, retried, cancelled", function()
      local q = key .. ":q"
      assert.same({ 1, 1, 1 }, d.fair_acquire("h", "h", 1))          -- h holds it
      assert.equals(0, d.fair_acquire("w", "w", 1, S1)[1])            -- w queues
      assert.matches("^%d+:1:10000$", helper.lock_field(srv, q, "rw"))
      assert.equals(S1, helper.lock_field(srv, q, "sw"))
      assert.equals(0, d.fair_acquire("w", "w", 1, S1)[1])            -- a resend: the same
      assert.matches("^%d+:1:10000$", helper.lock_field(srv, q, "rw"))
      assert.equals(S1, helper.lock_field(srv, q, "sw"))
      assert.equals(0, d.fair_acquire("w", "w", 2, S2)[1])            -- a retry: its own
      assert.matches("^%d+:2:10000$", helper.lock_field(srv, q, "rw"))
      assert.equals(S2, helper.lock_field(srv, q, "sw"))
      assert.equals("1", helper.lock_field(srv, q, "c"))                  -- one place still
      assert.same({ 1 }, d.fair_void("w", "w", 2))                     -- cancelled
      assert.equals("", helper.lock_field(srv, q, "rw"))
      assert.equals("", helper.lock_field(srv, q, "sw"))
      assert.equals("0", helper.lock_field(srv, q, "c"))
      assert.same({ -2 }, d.fair_acquire("w", "w", 2, S2))            -- arrives late: refused
      assert.equals("", helper.lock_field(srv, q, "sw"))                   -- registers nothing
      assert.same({ 1, 0 }, d.fair_release("h", "h", 2, 1))
      assert.is_true(helper.is_free(srv, key))                       -- nobody to pass on to
    end)

    -- 40 records of past requesters (each `record`), their k long past:
    -- over the limit, and all a prune may take.
    local function old_records(record)
      local old = {}
      for j = 1, 40 do
        old[#old + 1] = "qold" .. j; old[#old + 1] = record
        old[#old + 1] = "kold" .. j; old[#old + 1] = "1000"
      end
      helper.lock_unshort(srv, key)
      srv.cli("hset", key, table.unpack(old))
    end

    -- As the exclusive lock's: a take of a free lock writes no k (its
    -- record is kept while its owner holds) and only a new requester,
    -- who adds fields, prunes.
    it("prunes on a new requester's take only, and writes no k for a take", function()
      local t = d.fair_acquire("a", "a", 1)[3]
      assert.same({ 1, 0 }, d.fair_release("a", "a", 2, t))
      old_records("3")
      local n = tonumber(srv.cli("hlen", key))
      assert.is_true(n > 64)
      assert.same({ 1, 1, t + 1 }, d.fair_acquire("a", "a", 3))   -- a's record: no prune
      assert.equals(n + 2, tonumber(srv.cli("hlen", key)))        -- its hold: oa and g
      assert.equals("a", helper.lock_field(srv, key, "g"))
      assert.equals("10000e99", helper.lock_field(srv, key, "ka"))       -- the release's, as it was
      assert.same({ 1, 0 }, d.fair_release("a", "a", 4, t + 1))
      assert.same({ 1, 1, t + 2 }, d.fair_acquire("b", "b", 1))   -- a new requester prunes
      assert.equals("", helper.lock_field(srv, key, "qold1"))
      assert.is_true(tonumber(srv.cli("hlen", key)) <= 64, srv.cli("hlen", key))
      assert.equals("4", helper.lock_field(srv, key, "qa"))                 -- a resend may come
      assert.same({ 1, 0 }, d.fair_release("b", "b", 2, t + 2))
    end)

    -- A holder that keeps taking its lock back prunes nothing; waiters
    -- that give up each add a cancel's record: those prune instead.
    it("prunes on a cancel by a requester without a record", function()
      local t = d.fair_acquire("a", "a", 1)[3]
      old_records("3!")
      assert.equals(0, d.fair_acquire("z", "z", 1, S1)[1])      -- busy: queued
      assert.same({ 1 }, d.fair_void("z", "z", 1))                  -- gives up
      assert.equals("", helper.lock_field(srv, key, "qold1"))
      assert.equals("1!", helper.lock_field(srv, key, "qz"))
      assert.is_true(tonumber(srv.cli("hlen", key)) <= 64, srv.cli("hlen", key))
      assert.same({ 1, 0 }, d.fair_release("a", "a", 2, t))
    end)
  end)

  -- fair_release.lua: a fair release and the grant it publishes
  describe("fair_release.lua", function()
    it("publishes a fair grant with its registration's seq and secret, and nothing else", function()
      local msgs, stop = d.listen(key .. ":ch:W1")
      finally(stop)
      assert.same({ 1, 1, 1 }, d.fair_acquire("h", "h", 1))
      assert.equals(0, d.fair_acquire("W1:1", "W1:1", 1, S1)[1])
      assert.equals(0, d.fair_acquire("W1:1", "W1:1", 2, S2)[1])      -- the waiter looked again
      assert.same({ 1, 0 }, d.fair_release("h", "h", 2, 1))           -- granted to W1:1
      assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
      assert.same({ "2:" .. S2 .. ":2" }, msgs())                    -- seq 2's secret, not seq 1's
      assert.equals("W1:1", helper.lock_field(srv, key, "g"))
      assert.equals("2", helper.lock_field(srv, key, "qW1:1"))
      assert.equals("", helper.lock_field(srv, key .. ":q", "sW1:1"))       -- unqueued, secret and all
      -- a waiter that did not take the message claims it with a new attempt
      assert.same({ 1, 1, 2 }, d.fair_acquire("W1:1", "W1:1", 3, S3))
      assert.same({ -2 }, d.fair_acquire("W1:1", "W1:1", 1, S1))      -- a stale copy: refused
      assert.equals("", helper.lock_field(srv, key .. ":q", "sW1:1"))
      assert.same({ 1, 0 }, d.fair_release("W1:1", "W1:1", 4, 2))
      assert.same({ "2:" .. S2 .. ":2" }, msgs())                    -- no other grant
    end)

    it("passes over a lapsed fair registration, and drops its secret", function()
      local q = key .. ":q"
      assert.same({ 1, 1, 1 }, d.fair_acquire("h", "h", 1))
      assert.equals(0, d.fair_acquire("w", "w", 1, S1)[1])
      srv.cli("hset", q, "rw", "1:1:10000")                          -- ran out long ago
      assert.same({ 1, 0 }, d.fair_release("h", "h", 2, 1))
      assert.is_true(helper.is_free(srv, key))                       -- granted to nobody
      assert.equals("", helper.lock_field(srv, q, "rw"))
      assert.equals("", helper.lock_field(srv, q, "sw"))
    end)

    it("grants a fair registration without a secret (an older client's) as before", function()
      local msgs, stop = d.listen(key .. ":ch:W2")
      finally(stop)
      assert.same({ 1, 1, 1 }, d.fair_acquire("h", "h", 1))
      assert.equals(0, d.fair_acquire("W2:1", "W2:1", 1, S1)[1])
      srv.cli("hdel", key .. ":q", "sW2:1")                          -- as an older client queues
      assert.same({ 1, 0 }, d.fair_release("h", "h", 2, 1))
      assert.truthy(helper.wait_for(function() return #msgs() >= 1 end, 10))
      assert.same({ "1:2" }, msgs())
    end)
  end)

  -- fair_void.lua: a fair waiter that gives up
  describe("fair_void.lua", function()
    it("passes a cancelled fair grant on with the next waiter's own secret", function()
      local a, stop_a = d.listen(key .. ":ch:A")
      finally(stop_a)
      local b, stop_b = d.listen(key .. ":ch:B")
      finally(stop_b)
      assert.same({ 1, 1, 1 }, d.fair_acquire("h", "h", 1))
      assert.equals(0, d.fair_acquire("A:1", "A:1", 1, S1)[1])
      assert.equals(0, d.fair_acquire("B:1", "B:1", 1, S2)[1])
      assert.same({ 1, 0 }, d.fair_release("h", "h", 2, 1))           -- to A
      assert.truthy(helper.wait_for(function() return #a() >= 1 end, 10))
      assert.same({ "1:" .. S1 .. ":2" }, a())
      assert.same({ 1 }, d.fair_void("A:1", "A:1", 1))                 -- A gave up: on to B
      assert.truthy(helper.wait_for(function() return #b() >= 1 end, 10))
      assert.same({ "1:" .. S2 .. ":3" }, b())
      assert.same({ "1:" .. S1 .. ":2" }, a())
      assert.equals(1, d.count("B:1"))
      assert.equals(0, d.count("A:1"))
    end)
  end)
end)
