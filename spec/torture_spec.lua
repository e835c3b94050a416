-- The torture checker's own tests (tools/torture/check.lua): small
-- hand-written histories, one clean and one per kind of violation, so that
-- the invariants `make torture` relies on are known to be able to fail.
package.path = "tools/torture/?.lua;" .. package.path
local check = require "check"
local common = require "common"

-- A hold of `owner` on `names` (a string or a list) from t1 (the acquire's
-- reply) with held() true at each of `checks`; token per name.
local function hold(hid, owner, names, t1, checks, tok, extra)
  if type(names) == "string" then names = { names } end
  local toks = {}
  for _, n in ipairs(names) do toks[n] = tok and tostring(tok) end
  local recs = { { ev = "hold", w = owner, hid = hid, kind = "lock", names = names,
                   owner = owner, t0 = t1 - 0.01, t1 = t1, tokens = toks, count = 1 } }
  for k, v in pairs(extra or {}) do recs[1][k] = v end
  for _, t in ipairs(checks) do
    recs[#recs + 1] = { ev = "held", w = owner, hid = hid, t = t, v = true }
  end
  return recs
end

local function history(...)
  local out = {}
  for _, part in ipairs({ ... }) do
    for _, r in ipairs(part) do out[#out + 1] = r end
  end
  return out
end

local function kinds(v)
  local t = {}
  for _, x in ipairs(v) do t[#t + 1] = x.kind end
  return table.concat(t, ",")
end

local function kindset(v)
  local t = {}
  for _, x in ipairs(v) do t[x.kind] = true end
  return t
end

local META = { t_start = 0, lease_max = 4, quorum = 1, dead_slack = 5 }

describe("torture checker", function()
  it("passes a clean history", function()
    local h = history(
      hold("a#1", "A", "L", 1.0, { 1.0, 1.5, 2.0 }, 1),
      { { ev = "rel", w = "A", hid = "a#1", cnt = 1, rem = 0, ok = true, t0 = 2.01, t1 = 2.02, bnd = 5 } },
      hold("b#1", "B", "L", 2.1, { 2.1, 3.0 }, 2),
      { { ev = "store", hid = "a#1", name = "L", tok = "1", acc = true, seq = 1, t0 = 1.6 },
        { ev = "store", hid = "b#1", name = "L", tok = "2", acc = true, seq = 2, t0 = 2.5 },
        -- a late write of the old holder: rejected, as it must be
        { ev = "store", hid = "a#1", name = "L", tok = "1", acc = false, seq = 3, t0 = 2.6 },
        { ev = "count", hid = "b#1", before = 1, after = 2, t = 2.2 },
        { ev = "start", w = "C", clients = { "cid" } },
        { ev = "kill", w = "C", t = 1.0 },
        { ev = "inspect", name = "L", t0 = 5.0, clients = { "cid" } } },  -- within the lease
      -- a held() false does not extend belief; a reader and a reader share
      { { ev = "held", hid = "b#1", t = 9, v = false } },
      hold("r#1", "R1", "RW", 1, { 3 }, 5, { kind = "read" }),
      hold("r#2", "R2", "RW", 2, { 4 }, 5, { kind = "read" }))
    assert.same({}, check.run(h, META))
  end)

  it("finds two holders at once", function()
    local h = history(hold("a#1", "A", "L", 1.0, { 1.0, 3.0 }, 1),
                      hold("b#1", "B", "L", 2.0, { 2.0, 2.5 }, 2))
    local v = check.run(h, META)
    assert.equal("exclusion", kinds(v))
    assert.matches("two holders at once", v[1].msg)
  end)

  it("finds a writer beside a reader", function()
    local h = history(hold("r#1", "R", "RW", 1.0, { 1.0, 3.0 }, 1, { kind = "read" }),
                      hold("w#1", "W", "RW", 2.0, { 2.0, 2.5 }, 2, { kind = "write" }))
    assert.equal("exclusion", kinds(check.run(h, META)))
  end)

  it("excuses an overlap inside a documented window, not outside it", function()
    local a = hold("a#1", "A", "L", 10.0, { 10.0, 14.0 }, 1)
    local b = hold("b#1", "B", "L", 12.0, { 12.0, 12.5 }, 2)
    -- acquired 0.5 s before a failover: async replication may lose it
    local fo = { { ev = "fault", kind = "failover", t0 = 10.5, t1 = 11.0 } }
    assert.same({}, check.run(history(a, b, fo), META))
    -- acquired long before the failover: no excuse
    local late = { { ev = "fault", kind = "failover", t0 = 11.5, t1 = 11.8 } }
    assert.equal("exclusion", kinds(check.run(history(a, b, late), META)))
    -- ... unless a reentry or extend raised its lease inside the window:
    -- the old master confirmed that write, the new one never had it
    for _, ev in ipairs({ "reenter", "extend" }) do
      local raise = { { ev = ev, hid = "a#1", ok = true, t0 = 11.2, t1 = 11.2 } }
      assert.same({}, check.run(history(a, b, late, raise), META))
      local early = { { ev = ev, hid = "a#1", ok = true, t0 = 10.2, t1 = 10.2 } }
      assert.equal("exclusion", kinds(check.run(history(a, b, late, early), META)))
    end
    -- the key evicted under the holder
    local ev = { { ev = "fault", kind = "evict", name = "L", servers = { 1 }, t0 = 11, t1 = 11 } }
    assert.same({}, check.run(history(a, b, ev), META))
    -- on Redlock one master's eviction does not free it
    assert.equal("exclusion", kinds(check.run(history(a, b, ev), { quorum = 2 })))
    -- ... unless another master could not have granted the hold (paused
    -- while it was acquired): then the hold was on too few masters
    local paused = { { ev = "fault", kind = "evict", name = "L", servers = { 1 }, t0 = 11, t1 = 11 },
                     { ev = "fault", kind = "pause", server = 2, dur = 3, t0 = 8, t1 = 8 } }
    assert.same({}, check.run(history(a, b, paused), { quorum = 2 }))
    local later = { { ev = "fault", kind = "evict", name = "L", servers = { 1 }, t0 = 11, t1 = 11 },
                    { ev = "fault", kind = "pause", server = 2, dur = 0.5, t0 = 10.8, t1 = 10.8 } }
    assert.equal("exclusion", kinds(check.run(history(a, b, later), { quorum = 2 })))
    -- ... or one that no renewal reached for 2/3 of the lease after it
    -- was acquired (torture seed 51852850, round 8): its copy ran out
    local lapsed = { { ev = "fault", kind = "evict", name = "L", servers = { 1 }, t0 = 11, t1 = 11 },
                     { ev = "fault", kind = "pause", server = 2, dur = 1.5, t0 = 10.2, t1 = 10.2 } }
    assert.same({}, check.run(history(a, b, lapsed), { quorum = 2, lease = 2 }))
    assert.equal("exclusion", kinds(check.run(history(a, b, lapsed), { quorum = 2, lease = 3 })))
    assert.equal("exclusion", kinds(check.run(history(a, b, later), { quorum = 2, lease = 2 })))
    -- force_release: the holder learns within 2 s (the notice, then a
    -- check) or, cut off from Redis, when its lease runs out (lease_max
    -- 4 s): not later
    local fr = { { ev = "force", name = "L", ok = true, t0 = 11.9, t1 = 11.95 } }
    local soon = hold("a#1", "A", "L", 10.0, { 10.0, 13.5 }, 1)
    assert.same({}, check.run(history(soon, b, fr), META))
    assert.same({ exclusion = true, forced = true }, kindset(check.run(history(a, b, fr), META)))   -- 2.05 s: deaf
    local cut = { { ev = "fault", kind = "pause", server = 1, dur = 1, t0 = 11.5, t1 = 11.5 } }
    assert.same({}, check.run(history(a, b, fr, cut), META))
    local long = hold("a#1", "A", "L", 10.0, { 10.0, 17.0 }, 1)
    assert.same({ exclusion = true, forced = true }, kindset(check.run(history(long, b, fr, cut), META)))
    -- on Redlock, one master of three cut off spares the quorum
    local R = { quorum = 2, masters = 3 }
    assert.same({ exclusion = true, forced = true }, kindset(check.run(history(a, b, fr, cut), R)))
    local two = { cut[1], { ev = "fault", kind = "sleep", server = 2, dur = 1, t0 = 11.6, t1 = 11.6 } }
    assert.same({}, check.run(history(a, b, fr, two), R))
    -- a restart cuts a client off only until its listener is back: a
    -- force 0.5 s after it may go unheard (a lease), 3 s after it not
    local restart = function(t) return { { ev = "fault", kind = "restart", server = 1, t0 = t, t1 = t + 0.05 } } end
    assert.same({}, check.run(history(a, b, fr, restart(11.4)), META))
    assert.same({ exclusion = true, forced = true }, kindset(check.run(history(a, b, fr, restart(8.9)), META)))
    -- a forced holder that never hears is found with nobody beside it
    assert.equal("forced", kinds(check.run(history(a, fr), META)))
    assert.same({}, check.run(history(soon, fr), META))
    assert.same({}, check.run(history(a, fr, restart(11.4)), META))
    -- the one forced may begin to believe last: its acquire's reply came
    -- after a force that freed it on its masters, and after the next
    -- holder's (torture seed 1002, round 12); not for 2 s more
    local race = { { ev = "force", name = "L", ok = true, t0 = 0.79, t1 = 0.9 } }
    local first = hold("b#1", "B", "L", 0.89, { 0.89, 3.5 }, 3)
    local forced_late = hold("a#1", "A", "L", 0.891, { 0.891, 1.3 }, 2)
    assert.same({}, check.run(history(first, forced_late, race), R))
    local deaf = hold("a#1", "A", "L", 0.891, { 0.891, 3.2 }, 2)
    assert.equal("exclusion", kinds(check.run(history(first, deaf, race), R)))
  end)

  it("lets one explicit owner hold from two clients", function()
    local h = history(hold("a#1", "x:job", "L", 1.0, { 3.0 }, 1),
                      hold("b#1", "x:job", "L", 2.0, { 2.5 }, 1))
    assert.same({}, check.run(h, META))
  end)

  it("finds a guarded write that ran after a newer tenancy was granted", function()
    local a = hold("a#1", "A", "L", 1.0, { 1.0, 1.5 }, 1)
    local b = hold("b#1", "B", "L", 2.0, { 2.0, 2.5 }, 2)
    local early = { { ev = "guard", hid = "a#1", name = "L", tok = "1", ok = true, t0 = 1.2, t1 = 1.21 } }
    assert.same({}, check.run(history(a, b, early), META))
    local refused = { { ev = "guard", hid = "a#1", name = "L", tok = "1", ok = false, t0 = 2.2, t1 = 2.21 } }
    assert.same({}, check.run(history(a, b, refused), META))
    local late = { { ev = "guard", hid = "a#1", name = "L", tok = "1", ok = true, t0 = 2.2, t1 = 2.21 } }
    local v = check.run(history(a, b, late), META)
    assert.equal("guard", kinds(v))
    assert.matches("a write guarded by a#1 %(token 1%) ran at", v[1].msg)
    -- inside a failover's window a new master may not have the newer tenancy
    local fo = { { ev = "fault", kind = "failover", t0 = 2.0, t1 = 2.1 } }
    assert.same({}, check.run(history(a, b, late, fo), META))
  end)

  it("finds more semaphore holders than permits", function()
    local function permit(hid, t1, e, permits)
      return hold(hid, hid, "S", t1, { e }, nil, { kind = "sem", permits = permits })
    end
    local ok = history(permit("p1", 1, 3, 2), permit("p2", 1.5, 3, 2))
    assert.same({}, check.run(ok, META))
    -- semaphore(name, 1) and semaphore(name, 3) from two clients: 3 holders
    local bad = history(permit("p1", 1, 3, 1), permit("p2", 1.5, 3, 3), permit("p3", 2, 3, 3))
    assert.equal("semaphore", kinds(check.run(bad, META)))
  end)

  it("finds a token that goes backwards or repeats for a new owner", function()
    -- 1, 2, a clock-based token during a slot migration, then 3
    local h = history(hold("a", "A", "L", 1, { 1.5 }, 1), hold("b", "B", "L", 2, { 2.5 }, 2),
                      hold("c", "C", "L", 3, { 3.5 }, 1795692295774523),
                      hold("d", "D", "L", 4, { 4.5 }, 3))
    local v = check.run(h, META)
    assert.equal("token", kinds(v))
    assert.matches("backwards", v[1].msg)
    local same = history(hold("a", "A", "L", 1, { 1.5 }, 7), hold("b", "B", "L", 2, { 2.5 }, 7))
    assert.equal("token", kinds(check.run(same, META)))
  end)

  it("finds a fenced store that took a stale holder's write", function()
    local h = history(hold("a", "A", "L", 1, {}, 9), hold("b", "B", "L", 2, {}, 10),
      { { ev = "store", hid = "b", name = "L", tok = "10", acc = true, seq = 1, t0 = 2.1 },
        { ev = "store", hid = "a", name = "L", tok = "9", acc = true, seq = 2, t0 = 2.2 } })
    local v = check.run(h, META)
    assert.equal("store", kinds(v))
    assert.matches("accepted token 9 after token 10", v[1].msg)
  end)

  it("finds counts that drift", function()
    -- a fresh acquire that joined a stale hold: release answers 1, not 0
    local h = history(hold("a", "A", "L", 1, { 1.5 }, 1),
      { { ev = "rel", w = "A", hid = "a", cnt = 1, rem = 1, ok = true, t0 = 2, t1 = 2.1, bnd = 5 } })
    local v = check.run(h, META)
    assert.equal("count", kinds(v))
    assert.matches("release answered true, 1 with 1 hold", v[1].msg)
    local re = { { ev = "count", hid = "a", before = 1, after = 3, t = 1.2 } }
    assert.equal("count", kinds(check.run(history(hold("a", "A", "L", 1, {}, 1), re), META)))
  end)

  it("excuses a count a failover lost, under whichever acquire of that owner and name", function()
    -- A's multi-lock hold m reentered inside the failover's window (the
    -- old master confirmed it, the new one never had it); A's later plain
    -- acquire p joins the same count in Redis, whose release then answers
    -- one less than the client counts
    local fo = { { ev = "fault", kind = "failover", t0 = 5, t1 = 5.5 } }
    local m = hold("m", "A", { "L", "K" }, 1, { 1.5 }, 2, { kind = "multi" })
    local re = { { ev = "reenter", w = "A", hid = "m", ok = true, t0 = 5.2, t1 = 5.2 } }
    local p = hold("p", "A", "L", 9, { 9.5 }, 2)
    local rel = { { ev = "rel", w = "A", hid = "p", cnt = 3, rem = 1, ok = true, t0 = 10, t1 = 10, bnd = 5 } }
    assert.same({}, check.run(history(fo, m, re, p, rel), META))
    -- the same, with the reentry long before the failover: a drift
    local early = { { ev = "reenter", w = "A", hid = "m", ok = true, t0 = 2, t1 = 2 } }
    assert.equal("count", kinds(check.run(history(fo, m, early, p, rel), META)))
    -- ... and another owner's reentry in the window excuses nothing
    local b = hold("b", "B", "L", 0.5, {}, 1)
    local bre = { { ev = "reenter", w = "B", hid = "b", ok = true, t0 = 5.2, t1 = 5.2 } }
    assert.equal("count", kinds(check.run(history(fo, m, early, b, bre, p, rel), META)))
  end)

  it("finds a call past its bound, unless its process was stopped", function()
    local call = { ev = "acq", w = "A", name = "L", t0 = 1, t1 = 9, bnd = 4.5 }
    assert.equal("bound", kinds(check.run({ call }, META)))
    local stopped = { call, { ev = "stop", w = "A", t = 2 }, { ev = "cont", w = "A", t = 7 } }
    assert.same({}, check.run(stopped, META))
  end)

  it("finds a lock still held long after its holder was killed or closed", function()
    local h = { { ev = "start", w = "C", clients = { "c1", "c2" } },
                { ev = "kill", w = "C", t = 1.0 },
                { ev = "inspect", name = "L", t0 = 11.0, clients = { "c2" } } }
    assert.equal("leftover", kinds(check.run(h, META)))
    local closed = { { ev = "gone", client = "c9", t = 1.0 },
                     { ev = "inspect", name = "L", t0 = 11.0, clients = { "c9" } } }
    assert.equal("leftover", kinds(check.run(closed, META)))
    -- a CLIENT PAUSE meanwhile: Redis expired nothing during it
    local paused = { closed[1], closed[2],
                     { ev = "fault", kind = "pause", t0 = 2, t1 = 2, dur = 3 } }
    assert.same({}, check.run(paused, META))
    -- multi_lock: a name still held after an acquire that raised
    local orphan = { { ev = "orphan", name = "L", client = "c3", held = true, since = 1, t = 8 } }
    assert.equal("leftover", kinds(check.run(orphan, META)))
  end)

  it("finds a call that failed because a lock's keys are on two Cluster slots", function()
    local fair = { ev = "acq", w = "A", kind = "fair", name = "}F1", ok = false, t0 = 1, t1 = 1.1,
                   err = "redis: CROSSSLOT Keys in request don't hash to the same slot" }
    assert.equal("slots", kinds(check.run({ fair }, META)))
    local guard = { ev = "note", w = "A", t = 2, what = "guard raised", err = "bad argument " ..
                    "#2 to 'guard' (key 'g{}x}' is in another Cluster slot than the lock: ...)" }
    assert.equal("slots", kinds(check.run({ guard }, META)))
    local moving = { ev = "acq", w = "A", kind = "lock", name = "L", ok = false, t0 = 1, t1 = 1.1,
                     err = "redis: slot 5 is being migrated (TRYAGAIN)" }
    assert.same({}, check.run({ moving }, META))
  end)

  it("finds a release that did not run while its slot migrated", function()
    local rel = { ev = "rel", w = "A", hid = "a#1", ok = false, t0 = 1, t1 = 1.6,
                  err = "connection: slot 5 is being migrated (TRYAGAIN); the release is " ..
                        "being completed in the background" }
    assert.equal("migration", kinds(check.run({ rel }, META)))
    local acq = { ev = "acq", w = "A", kind = "fair", name = "F1", ok = false, t0 = 1, t1 = 1.6,
                  err = rel.err }
    assert.same({}, check.run({ acq }, META))          -- a new tenancy waits: not this
  end)

  it("finds a hold believed past its client's max_hold", function()
    local ok = hold("m#1", "M", "L", 1.0, { 1.0, 2.4 }, 1, { maxhold = 1.5 })
    assert.same({}, check.run(ok, META))
    local past = hold("m#1", "M", "L", 1.0, { 1.0, 2.8 }, 1, { maxhold = 1.5 })
    assert.equal("maxhold", kinds(check.run(past, META)))
  end)

  it("finds a watchdog renewing at the rate of a notice flood", function()
    local function stats(t, renewed, held)
      return { ev = "stats", w = "A", t = t, s = { { id = "c", renewed = renewed, held = held } } }
    end
    assert.same({}, check.run({ stats(1, 0, 2), stats(2, 40, 2) }, META))      -- 20/s each
    assert.equal("renewals", kinds(check.run({ stats(1, 0, 1), stats(2, 60, 1) }, META)))
  end)

  it("finds a scheduler waiter that slept through a release, or a loop that raised", function()
    local slow = { { ev = "handoff", w = "A", hid = "a#2", t = 5, after = 4 } }
    assert.equal("wake", kinds(check.run(slow, META)))
    local paused = { { ev = "fault", kind = "pause", server = 1, dur = 2, t0 = 6, t1 = 6 } }
    assert.same({}, check.run(history(slow, paused), META))
    local quick = { { ev = "handoff", w = "A", hid = "a#2", t = 5, after = 0.05 } }
    assert.same({}, check.run(quick, META))
    local raised = { { ev = "schedfail", w = "A", t = 5, sched = "cqueues", err = "unable to update" } }
    assert.equal("scheduler", kinds(check.run(raised, META)))
  end)

  it("finds a call that fails for want of a server long after every fault ended", function()
    local function acq(t0, err)
      return { ev = "acq", w = "A", name = "L", t0 = t0, t1 = t0 + 0.5, bnd = 5, ok = false, err = err }
    end
    local kill = { ev = "fault", kind = "kill_master", t0 = 10, t1 = 15 }
    assert.same({}, check.run({ kill, acq(16, "connection: Connection refused") }, META))
    assert.equal("stuck", kinds(check.run({ kill, acq(25, "connection: Connection refused") }, META)))
    assert.same({}, check.run({ kill, acq(25, "timeout") }, META))
    -- while the killed master is down, nothing goes to it once its
    -- replica took over, other faults or not
    local dead = { ev = "fault", kind = "kill_master", port = 7001, down = 20, t0 = 10, t1 = 15 }
    local busy = { ev = "fault", kind = "pause", server = 2, dur = 10, t0 = 14, t1 = 14 }
    assert.same({}, check.run({ dead, busy, acq(16, "connection: refused (127.0.0.1:7001)") }, META))
    assert.equal("stuck", kinds(check.run({ dead, busy, acq(20, "connection: refused (127.0.0.1:7001)") }, META)))
    assert.same({}, check.run({ dead, busy, acq(20, "connection: refused (127.0.0.1:7002)") }, META))
  end)

  it("reads back what the history writer wrote, torn lines skipped", function()
    local path = os.tmpname()
    local log, f = common.writer(path)
    log{ ev = "held", hid = "a#1", t = 1.25, v = true, s = "two\nlines" }
    f:write('{ev="held",hid=')                 -- a process killed mid-line
    f:close()
    local recs = common.read(path)
    os.remove(path)
    assert.equal(1, #recs)
    assert.same({ ev = "held", hid = "a#1", t = 1.25, v = true, s = "two\nlines" }, recs[1])
  end)

  it("draws the same numbers from the same seed", function()
    local a, b = common.rng(42), common.rng(42)
    for _ = 1, 100 do assert.equal(a:int(1, 1000), b:int(1, 1000)) end
    assert.are_not.equal(common.rng(1):next(), common.rng(2):next())
  end)
end)
