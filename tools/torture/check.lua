-- The checker: invariants over one round's merged history (every worker's
-- records and the driver's). check.run(records, meta) returns a list of
-- violations { kind, t, msg }, earliest first.
--
-- Belief is computed conservatively, so that only real breaks are called:
-- a hold is believed from its acquire's reply (the "hold" record, logged
-- after the call returned) to the last held() that answered true (logged
-- with the time taken *before* the call: a hold that is held at some
-- instant was held at every instant since its acquire). A hold never seen
-- held() is believed by nobody. A killed or stopped process's belief ends
-- with its last logged check.
--
-- Windows where doc/reference.md ("Under faults") allows two holders, and
-- so excused here:
--   failover: a hold acquired (or a token minted) from 1 s before a Sentinel
--     failover to 2 s after it may be lost with Redis's async replication;
--     so may the lease a reentry or an extend raised in that window (the
--     old master confirmed the write; the new one never had it);
--   evict: a lock key deleted under its holder (a maxmemory eviction) frees
--     it at once; the holder learns it at its next renewal (on Redlock only
--     when a quorum of masters lost it: those evicted, and those that could
--     not have granted the hold, being paused, asleep or restarting while
--     it was acquired, or that no renewal reached for long enough for
--     their copy to run out: out of reach for 2/3 of the lease, the least
--     a renewal leaves);
--   force: force_release frees a held lock; its holder learns it at its
--     next renewal, or, cut off from Redis, when its lease runs out: its
--     belief may last a lease (or an extend, lease_max) past the force.
local check = {}

check.FORCE_SLACK = 0.5      -- s past a lease that a forced holder may believe
check.FAILOVER_BEFORE = 1    -- s before a failover that its window covers
check.FAILOVER_AFTER = 2     -- s after it

local EXCL = { lock = true, fair = true, multi = true, write = true }

local function mode(kind)
  if kind == "read" then return "r" elseif kind == "sem" then return "s" end
  return "x"
end

local function num(s) return tonumber(s) end

local function fmt_t(meta, t)
  return ("%.3f"):format(t - (meta.t_start or 0))
end

-- ---- gathering -------------------------------------------------------------

local function gather(records)
  local g = { holds = {}, hold_list = {}, held = {}, faults = {}, forces = {}, rels = {},
              counts = {}, stores = {}, guards = {}, calls = {}, stops = {}, dead = {}, clients = {},
              inspects = {}, orphans = {}, reentries = {}, raises = {}, stats = {},
              handoffs = {}, schedfails = {}, selfwaits = {} }
  for _, r in ipairs(records) do
    local ev = r.ev
    if ev == "hold" then
      g.holds[r.hid] = r
      g.hold_list[#g.hold_list + 1] = r
    elseif ev == "held" then
      local h = g.held[r.hid]
      if not h then h = {}; g.held[r.hid] = h end
      h[#h + 1] = r
    elseif ev == "fault" then
      g.faults[#g.faults + 1] = r
    elseif ev == "force" then
      if r.ok then g.forces[#g.forces + 1] = r end
    elseif ev == "rel" then
      g.rels[#g.rels + 1] = r
    elseif ev == "count" then
      g.counts[#g.counts + 1] = r
    elseif ev == "store" then
      g.stores[#g.stores + 1] = r
    elseif ev == "guard" then
      g.guards[#g.guards + 1] = r
    elseif ev == "start" then
      g.clients[r.w] = r.clients
    elseif ev == "kill" then
      g.dead[#g.dead + 1] = { w = r.w, t = r.t }
    elseif ev == "gone" then
      g.dead[#g.dead + 1] = { client = r.client, t = r.t }
    elseif ev == "stop" or ev == "cont" then
      local s = g.stops[r.w]
      if not s then s = {}; g.stops[r.w] = s end
      s[#s + 1] = r
    elseif ev == "inspect" then
      g.inspects[#g.inspects + 1] = r
    elseif ev == "orphan" then
      g.orphans[#g.orphans + 1] = r
    elseif ev == "stats" then
      local l = g.stats[r.w]
      if not l then l = {}; g.stats[r.w] = l end
      l[#l + 1] = r
    elseif ev == "handoff" then
      g.handoffs[#g.handoffs + 1] = r
    elseif ev == "schedfail" then
      g.schedfails[#g.schedfails + 1] = r
    elseif ev == "selfwait" then
      g.selfwaits[#g.selfwaits + 1] = r
    end
    if ev == "reenter" and r.ok then
      local t = g.reentries[r.hid] or {}
      t[#t + 1] = r.t1
      g.reentries[r.hid] = t
    end
    if (ev == "reenter" or ev == "extend") and r.ok then
      local t = g.raises[r.hid] or {}
      t[#t + 1] = r.t1
      g.raises[r.hid] = t
    end
    if r.t0 and r.t1 and r.bnd then g.calls[#g.calls + 1] = r end
  end
  return g
end

-- ---- excuses ---------------------------------------------------------------

local FAILOVERS = { failover = true, kill_master = true }  -- (Sentinel, Cluster)
local function in_failover(g, t)
  for _, f in ipairs(g.faults) do
    if FAILOVERS[f.kind] and t >= f.t0 - check.FAILOVER_BEFORE
        and t <= f.t1 + check.FAILOVER_AFTER then
      return f
    end
  end
end

-- Evictions of `name` at or after a.s (one still under way then counts:
-- a fault deletes the key master by master, and a paused master holds up
-- the rest) and before b's start: enough to let
-- b in (on Redlock, a quorum of masters must have lost the key: evicted,
-- or never granted it, being out of reach while the hold was acquired,
-- from acq0 to acq1, when those are known, or out of reach after that,
-- before b, for 2/3 of the lease: renewals come every lease/3, so its
-- copy may have run out).
local OUT_OF_REACH = { pause = true, sleep = true, restart = true, proxy = true }
local function evicted(g, meta, name, from, to, acq0, acq1, lease)
  local servers, n = {}, 0
  for _, f in ipairs(g.faults) do
    if f.kind == "evict" and f.name == name and (f.t1 or f.t0) >= from - 0.2 and f.t0 <= to then
      for _, s in ipairs(f.servers or { 1 }) do
        if not servers[s] then servers[s] = true; n = n + 1 end
      end
    end
  end
  if n > 0 and acq0 and (meta.quorum or 1) > 1 then
    for _, f in ipairs(g.faults) do
      local s = f.server
      local ends = f.dur and f.t0 + f.dur or f.t1
      local lapsed = lease and f.t0 >= acq0 and f.t0 <= to and
                     math.min(ends, to) - f.t0 >= lease * 2 / 3
      if OUT_OF_REACH[f.kind] and s and not servers[s] and
         ((f.t0 <= acq1 and ends >= acq0) or lapsed) then
        servers[s] = true
        n = n + 1
      end
    end
  end
  return n >= (meta.quorum or 1)
end

-- Faults that may cut a holder off from the notice of a force (or from
-- the check that follows it): then it learns at the end of its lease.
local CUTS = { restart = true, outage = true, pause = true, sleep = true, kill_conns = true, proxy = true,
               failover = true, migrate = true, kill_master = true }
-- With `since` (a force's start): a fault that only takes servers or links
-- away for a while cuts a client off from that force's notice only if it
-- lasts until then, or ended less than the listener's lag before (its
-- retries back off from 1 s, doubling while the fault lasts; once
-- subscribed again it checks every hold at once: watchdog.c). A failover,
-- a migration or a master's death moves where it must listen: those count
-- from `from` on.
local MOVES = { failover = true, migrate = true, kill_master = true }
check.LISTENER_LAG_S = 1.5
local function cut_off(g, meta, w, from, to, since)
  -- (on Redlock, only more masters than a quorum can spare: a client
  -- listens on every one and asks them all)
  local spare = meta.masters and meta.masters - (meta.quorum or 1) or 0
  local cut = {}
  for _, f in ipairs(g.faults) do
    local ends = math.max(f.t1 or f.t0, f.t0 + (f.dur or 0))
    local near
    if since and not MOVES[f.kind] then
      near = ends + check.LISTENER_LAG_S + (ends - f.t0) >= since
    else
      near = ends >= from
    end
    if CUTS[f.kind] and f.t0 <= to and near then
      if not (meta.masters and f.server) then return true end
      if not cut[f.server] then cut[f.server] = true; spare = spare - 1 end
      if spare < 0 then return true end
    end
  end
  for _, st in ipairs(g.stops[w] or {}) do
    if st.t >= from - 30 and st.t <= to then return true end
  end
end

-- A force_release of `name` that freed a's hold before b got in, with a's
-- belief ending within the grace: FORCE_BOUND after the force (every
-- client hears of a force within about a round trip, whatever its lease),
-- or, where a fault may have cut a's client off, its lease.
check.FORCE_BOUND = 2
local function forced(g, meta, name, a, b)
  local lease_grace = (meta.lease_max or 4) + check.FORCE_SLACK
  for _, f in ipairs(g.forces) do
    if f.name == name and f.t1 >= a.s - 0.2 and f.t0 <= b.s + 0.2 then
      local grace = cut_off(g, meta, a.h.w, f.t0 - lease_grace, f.t1 + check.FORCE_BOUND, f.t0)
                    and lease_grace or check.FORCE_BOUND
      if a.e <= f.t1 + grace then return true end
    end
  end
  for _, f in ipairs(g.faults) do      -- the driver's force (none today)
    if f.kind == "force" and f.name == name and f.t0 >= a.s - 0.2 and f.t0 <= b.s
        and a.e <= f.t1 + grace then
      return true
    end
  end
end

-- A force_release that freed a lock: every hold of that name whose
-- acquire had returned before the force began stops believing within
-- FORCE_BOUND of it (its watchdog hears the notice and checks), or, where
-- a fault may have cut its client off, within its lease; a second holder
-- is not needed to see a deaf one.
local function forced_holds(g, meta, by_name, out)
  local lease_grace = (meta.lease_max or 4) + check.FORCE_SLACK
  for _, f in ipairs(g.forces) do
    for _, a in ipairs(by_name[f.name] or {}) do
      if a.s < f.t0 and a.e > f.t1 + check.FORCE_BOUND then
        local grace = cut_off(g, meta, a.h.w, f.t0 - lease_grace, f.t1 + check.FORCE_BOUND, f.t0)
                      and lease_grace or check.FORCE_BOUND
        if a.e > f.t1 + grace then
          out[#out + 1] = { kind = "forced", t = f.t1 + grace, msg = ("%s: %s (%s) still believed " ..
            "it held at %s, %.2f s after a force_release that freed it (bound %.1f s)"):format(
            f.name, a.h.hid, a.h.owner, fmt_t(meta, a.e), a.e - f.t1, grace) }
          return
        end
      end
    end
  end
end

-- A reentry or extend of hold h confirmed inside a failover's window: the
-- lease it raised may be lost with the old master.
local function raised_in_failover(g, h)
  for _, t in ipairs(g.raises[h.hid] or {}) do
    if in_failover(g, t) then return true end
  end
end

local function excused(g, meta, name, a, b)
  if in_failover(g, a.s) or raised_in_failover(g, a.h) then return "failover" end
  local lease = num(a.h.expire) or num(a.h.wlease) or meta.lease   -- (a's own, or the client's)
  if evicted(g, meta, name, a.s, b.s, num(a.h.t0), num(a.h.t1), lease) then return "evict" end
  -- (either may be the one forced: an acquire whose reply comes after a
  -- force that ran on its masters meanwhile is forced, though it began
  -- to believe after the next holder did)
  if forced(g, meta, name, a, b) or forced(g, meta, name, b, a) then return "force" end
end

-- ---- belief intervals ----------------------------------------------------------

local function intervals(g)
  local by_name = {}
  for _, h in ipairs(g.hold_list) do
    local e
    for _, c in ipairs(g.held[h.hid] or {}) do
      if c.v and c.t >= h.t1 and (not e or c.t > e) then e = c.t end
    end
    if e and e > h.t1 then
      for _, n in ipairs(h.names) do
        local l = by_name[n]
        if not l then l = {}; by_name[n] = l end
        l[#l + 1] = { s = h.t1, e = e, h = h, mode = mode(h.kind), owner = h.owner }
      end
    end
  end
  for _, l in pairs(by_name) do table.sort(l, function(x, y) return x.s < y.s end) end
  return by_name
end

local function conflict(a, b)
  if a.owner == b.owner then return false end
  if a.mode == "s" or b.mode == "s" then return false end
  return a.mode == "x" or b.mode == "x"
end

-- ---- the invariants ----------------------------------------------------------

local function exclusion(g, meta, by_name, out)
  for name, l in pairs(by_name) do
    local reported = false
    for i = 1, #l do
      local a = l[i]
      for j = i + 1, #l do
        local b = l[j]
        if b.s >= a.e then break end          -- sorted by start: no later one overlaps a
        if not reported and conflict(a, b) and b.s < a.e then
          local why = excused(g, meta, name, a, b)
          if not why then
            reported = true
            out[#out + 1] = { kind = "exclusion", t = b.s, msg = (
              "%s: two holders at once: %s (%s, owner %s, token %s) believed it held from %s " ..
              "to %s, and %s (%s, owner %s, token %s) from %s to %s"):format(name,
              a.h.hid, a.h.kind, a.owner, tostring(a.h.tokens and a.h.tokens[name]),
              fmt_t(meta, a.s), fmt_t(meta, a.e), b.h.hid, b.h.kind, b.owner,
              tostring(b.h.tokens and b.h.tokens[name]), fmt_t(meta, b.s), fmt_t(meta, b.e)) }
          end
        end
      end
    end
  end
end

-- At every permit's start, the permits believed held at that instant are
-- at most the smallest limit any of their holders named.
local function semaphores(g, meta, by_name, out)
  for name, l in pairs(by_name) do
    local reported = false
    for i = 1, #l do
      local x = l[i]
      if x.mode == "s" and not reported then
        local active, limit = {}, math.huge
        for j = 1, #l do
          local y = l[j]
          if y.s > x.s then break end
          if y.mode == "s" and y.e > x.s then
            active[#active + 1] = y
            limit = math.min(limit, y.h.permits or math.huge)
          end
        end
        if #active > limit then
          local ok = in_failover(g, x.s)
          for _, y in ipairs(active) do
            if in_failover(g, y.s) or evicted(g, meta, name, y.s, x.s) then ok = true end
          end
          if not ok then
            reported = true
            local who = {}
            for _, y in ipairs(active) do
              who[#who + 1] = ("%s (permits %s, from %s)"):format(y.h.hid,
                tostring(y.h.permits), fmt_t(meta, y.s))
            end
            out[#out + 1] = { kind = "semaphore", t = x.s, msg = (
              "%s: %d holders at %s, limit %d: %s"):format(name, #active, fmt_t(meta, x.s),
              limit, table.concat(who, ", ")) }
          end
        end
      end
    end
  end
end

-- Tokens strictly increase per name from one tenancy to the next: for
-- exclusive holds a, b of different owners where a's acquire replied
-- before b's was sent, token(a) < token(b). Other pairs (a reader joining
-- a read tenancy, a shared owner) may repeat a token, never go back.
local function tokens(g, meta, out)
  local by_name = {}
  for _, h in ipairs(g.hold_list) do
    for _, n in ipairs(h.names) do
      local tok = h.tokens and num(h.tokens[n])
      if tok and h.kind ~= "sem" then
        local l = by_name[n] or {}
        by_name[n] = l
        l[#l + 1] = { h = h, tok = tok }
      end
    end
  end
  for name, l in pairs(by_name) do
    table.sort(l, function(x, y) return x.h.t1 < y.h.t1 end)
    local done = false
    for j = 1, #l do
      local b = l[j]
      for i = 1, j - 1 do
        local a = l[i]
        if done then break end
        if a.h.t1 < (b.h.t0 or b.h.t1) then
          local strict = EXCL[a.h.kind] and EXCL[b.h.kind] and a.h.owner ~= b.h.owner
          local bad = strict and b.tok <= a.tok or (not strict and b.tok < a.tok)
          if bad and not in_failover(g, a.h.t1) and not in_failover(g, b.h.t1) then
            done = true
            out[#out + 1] = { kind = "token", t = b.h.t1, msg = (
              "%s: token went %s: %s (%s) got %s at %s, after %s (%s) got %s at %s"):format(
              name, b.tok < a.tok and "backwards" or "unchanged to a new owner", b.h.hid,
              b.h.owner, tostring(b.tok), fmt_t(meta, b.h.t1), a.h.hid, a.h.owner,
              tostring(a.tok), fmt_t(meta, a.h.t1)) }
          end
        end
      end
    end
  end
end

-- Guarded writes (lock:guard): Redis runs one only while its hold is the
-- lock's current tenancy, and tokens never go back, so none succeeds
-- after a hold with a higher token of that name was granted (outside a
-- failover's window, where a new master may not have the newer tenancy).
local function guards(g, meta, out)
  local granted = {}                  -- name -> { { tok, t } } of holds
  for _, h in ipairs(g.hold_list) do
    for _, n in ipairs(h.names or {}) do
      local tok = h.tokens and num(h.tokens[n])
      if tok and EXCL[h.kind] then
        granted[n] = granted[n] or {}
        table.insert(granted[n], { tok = tok, t = num(h.t1), hid = h.hid })
      end
    end
  end
  for _, w in ipairs(g.guards) do
    if w.ok and not in_failover(g, num(w.t0)) then
      for _, x in ipairs(granted[w.name] or {}) do
        if x.tok > num(w.tok) and x.t < num(w.t0) and not in_failover(g, x.t) then
          out[#out + 1] = { kind = "guard", t = num(w.t0), msg = ("%s: a write guarded by %s " ..
            "(token %s) ran at %s, after %s was granted token %d at %s"):format(w.name, w.hid,
            w.tok, fmt_t(meta, num(w.t0)), x.hid, x.tok, fmt_t(meta, x.t)) }
          break
        end
      end
    end
  end
end

-- The fenced store: accepted tokens never go down in the store's own
-- order, and it never accepts an older tenancy's write after a newer
-- tenancy's write was accepted.
local function store(g, meta, out)
  local by_name = {}
  for _, s in ipairs(g.stores) do
    if s.acc then
      local l = by_name[s.name] or {}
      by_name[s.name] = l
      l[#l + 1] = s
    end
  end
  for name, l in pairs(by_name) do
    table.sort(l, function(x, y) return x.seq < y.seq end)
    local hi, newest, done = nil, nil, false
    for _, s in ipairs(l) do
      if done then break end
      local tok, h = num(s.tok), g.holds[s.hid]
      if hi and tok < hi.tok then
        done = true
        out[#out + 1] = { kind = "store", t = s.t0, msg = ("%s: the fenced store accepted " ..
          "token %s after token %s"):format(name, s.tok, tostring(hi.tok)) }
      elseif h and newest and newest.h.owner ~= h.owner and h.t1 < (newest.h.t0 or newest.h.t1)
          and EXCL[h.kind] and EXCL[newest.h.kind]
          and not in_failover(g, h.t1) and not in_failover(g, newest.h.t1) then
        done = true
        out[#out + 1] = { kind = "store", t = s.t0, msg = ("%s: the fenced store accepted " ..
          "a write of %s (token %s, acquired at %s) after one of the later tenancy %s " ..
          "(token %s, acquired at %s)"):format(name, s.hid, s.tok, fmt_t(meta, h.t1),
          newest.h.hid, newest.tok, fmt_t(meta, newest.h.t1)) }
      end
      if not hi or tok >= hi.tok then hi = { tok = tok } end
      if h and (not newest or h.t1 > newest.h.t1) then newest = { h = h, tok = s.tok } end
    end
  end
end

-- Counts never drift: a reentry adds one; a release answers the count
-- that is left (one less than this owner's holds before it).
local function counts(g, meta, out)
  -- The holds of one owner on one name are one count in Redis, whatever
  -- acquire (a multi-lock's, then a plain lock's) the worker logged them
  -- under: a reentry of any of them confirmed in a failover's window may
  -- be lost with the old master, and the count with it.
  local same = {}                             -- owner .. name -> { hid }
  for _, h in ipairs(g.hold_list) do
    for _, n in ipairs(h.names) do
      local k = tostring(h.owner) .. "\0" .. n
      same[k] = same[k] or {}
      table.insert(same[k], h.hid)
    end
  end
  local function one_in_failover(hid)
    local h = g.holds[hid]
    if h and in_failover(g, h.t1) then return true end
    for _, t in ipairs(g.reentries[hid] or {}) do
      if in_failover(g, t) then return true end
    end
  end
  local function spans_failover(hid)
    local h = g.holds[hid]
    if not h then return one_in_failover(hid) end
    for _, n in ipairs(h.names) do
      for _, other in ipairs(same[tostring(h.owner) .. "\0" .. n]) do
        if one_in_failover(other) then return true end
      end
    end
  end
  for _, c in ipairs(g.counts) do
    -- (a reentry into a hold already lost takes the lock afresh: a new
    -- token, and a count of 1; that is no drift. So does an explicit
    -- owner's in the same tenancy: its lost holds are dropped)
    local h = g.holds[c.hid]
    local fresh = c.after == 1 and h and h.shared
    if c.after ~= c.before + 1 and c.toka == c.tokb and not fresh then
      out[#out + 1] = { kind = "count", t = c.t, msg = ("%s: a reentry took the count " ..
        "from %s to %s"):format(c.hid, tostring(c.before), tostring(c.after)) }
      break
    end
  end
  for _, r in ipairs(g.rels) do
    -- (cnt 0: count() was read while held() was false, its deadline passed
    -- here, yet the release found the hold in Redis: the count is unknown)
    if r.ok and r.rem and r.cnt and r.cnt > 0 and not r.shared and r.rem ~= r.cnt - 1
        and not spans_failover(r.hid) then
      out[#out + 1] = { kind = "count", t = r.t1, msg = ("%s: release answered true, %s " ..
        "with %s hold(s) before it (%s is right)"):format(r.hid, tostring(r.rem),
        tostring(r.cnt), tostring(r.cnt - 1)) }
      break
    end
  end
end

-- Every call returns within its bound, unless its process was stopped.
local function bounds(g, meta, out)
  for _, c in ipairs(g.calls) do
    if c.t1 - c.t0 > c.bnd then
      local stopped = false
      local s = g.stops[c.w] or {}
      for _, x in ipairs(s) do
        if x.ev == "stop" and x.t <= c.t1 then
          local cont = math.huge
          for _, y in ipairs(s) do
            if y.ev == "cont" and y.t >= x.t then cont = math.min(cont, y.t) end
          end
          if cont >= c.t0 then stopped = true end
        end
      end
      if not stopped then
        out[#out + 1] = { kind = "bound", t = c.t1, msg = ("%s %s %s took %.2f s, bound %.2f s " ..
          "(from %s)"):format(c.w, c.ev, tostring(c.name or c.hid or ""), c.t1 - c.t0, c.bnd,
          fmt_t(meta, c.t0)) }
        break
      end
    end
  end
end

-- No lock stays held past its lease after its holder is gone (killed, or
-- its client closed), nor after an acquire that raised.
check.SHARE_SLACK = 1.5
local function leftovers(g, meta, out)
  local dead = {}
  for _, d in ipairs(g.dead) do
    local ids = d.client and { d.client } or g.clients[d.w] or {}
    for _, id in ipairs(ids) do
      if not dead[id] or d.t < dead[id] then dead[id] = d.t end
    end
  end
  -- Time Redis may not expire keys (paused, sleeping), added to the bound.
  local function frozen(from, to)
    local s = 0
    for _, f in ipairs(g.faults) do
      if (f.kind == "pause" or f.kind == "sleep") and f.t0 <= to and f.t0 + (f.dur or 0) >= from then
        s = s + (f.dur or 0)
      end
    end
    return s
  end
  local limit = (meta.lease_max or 30) + (meta.dead_slack or 8)
  local share_limit = (meta.lease_max or 30) + check.SHARE_SLACK
  for _, s in ipairs(g.inspects) do
    for _, id in ipairs(s.clients or {}) do
      local d = dead[id]
      if d and s.t0 > d + limit + frozen(d, s.t0) then
        out[#out + 1] = { kind = "leftover", t = s.t0, msg = ("%s: still held at %s by client " ..
          "%s, gone since %s (bound %.1f s)"):format(s.name, fmt_t(meta, s.t0), id,
          fmt_t(meta, d), limit) }
        return
      end
    end
    -- A shared owner's share: each client's ends with its own lease, by
    -- Redis's clock, which a pause does not stop (the monitor reports a
    -- share whose end has not come).
    for _, id in ipairs(s.shares or {}) do
      local d = dead[id]
      if d and s.t0 > d + share_limit then
        out[#out + 1] = { kind = "leftover", t = s.t0, msg = ("%s: a shared owner's holds of " ..
          "client %s still count at %s, gone since %s (bound %.1f s)"):format(s.name, id,
          fmt_t(meta, s.t0), fmt_t(meta, d), share_limit) }
        return
      end
    end
  end
  for _, o in ipairs(g.orphans) do
    if o.held then
      out[#out + 1] = { kind = "leftover", t = o.t, msg = ("%s: still held by client %s at %s, " ..
        "%.1f s after an acquire that raised (multi_lock); nobody believes it holds it"):format(
        o.name, tostring(o.client), fmt_t(meta, o.t), o.t - o.since) }
      return
    end
  end
end

-- A client with max_hold: no hold of it is believed past max_hold after
-- its acquire returned (the client's clock starts with the attempt that
-- took it, before that: a wait may come first).
check.MAXHOLD_SLACK = 0.2
local function maxhold(g, meta, out)
  for _, h in ipairs(g.hold_list) do
    local m = num(h.maxhold)
    if m then
      for _, c in ipairs(g.held[h.hid] or {}) do
        if c.v and c.t > h.t1 + m + check.MAXHOLD_SLACK then
          out[#out + 1] = { kind = "maxhold", t = c.t, msg = ("%s: %s held at %s, %.2f s " ..
            "after its acquire returned, past max_hold %g s"):format(h.names[1], h.hid,
            fmt_t(meta, c.t), c.t - h.t1, m) }
          break
        end
      end
    end
  end
end

-- A watchdog renews each hold every lease/3, and at most once per 50 ms
-- more on notices of forced releases, however many notices come (the
-- driver's flood fault): a client's renewals per second per hold, between
-- two of its worker's stats records, stay under the bound.
check.RENEWALS_PER_S = 25
local function renewals(g, meta, out)
  for w, l in pairs(g.stats) do
    for i = 2, #l do
      local a, b = l[i - 1], l[i]
      local dt = b.t - a.t
      for j, x in ipairs(b.s or {}) do
        local y = a.s and a.s[j]
        local holds = y and y.id == x.id and x.held or 0     -- (the most since y)
        if holds > 0 and dt > 0.5 then
          local rate = (x.renewed - y.renewed) / dt / holds
          if rate > check.RENEWALS_PER_S then
            out[#out + 1] = { kind = "renewals", t = b.t, msg = ("%s: client %s renewed each " ..
              "of its %d holds %.1f times a second from %s to %s (bound %d)"):format(w, x.id,
              holds, rate, fmt_t(meta, a.t), fmt_t(meta, b.t), check.RENEWALS_PER_S) }
            return
          end
        end
      end
    end
  end
end

-- A waiter of a scheduler client (ops.sched) gets the lock soon after the
-- release it waited for, unless a fault slowed the servers or stopped the
-- worker meanwhile; and the scheduler's loop never raises.
check.HANDOFF_S = 3
check.HANDOFF_AFTER_FAULT_S = 5
local function handoffs(g, meta, out)
  for _, f in ipairs(g.schedfails) do
    out[#out + 1] = { kind = "scheduler", t = f.t, msg = ("%s: the %s loop raised: %s"):format(
      f.w, tostring(f.sched), tostring(f.err)) }
  end
  for _, x in ipairs(g.handoffs) do
    if x.after > check.HANDOFF_S then
      local to = x.t + x.after
      -- (any fault that may cut a client off slows a wait: on Redlock,
      -- one master out of reach holds up a round by a command timeout;
      -- and one that ended shortly before the release: a Sentinel
      -- failover leaves a waiter subscribed at the demoted master, which
      -- misses the release while it resyncs, and wakes at the holder's
      -- TTL, as the reference bounds a wait)
      if not cut_off(g, {}, x.w, x.t - check.HANDOFF_AFTER_FAULT_S, to) then
        out[#out + 1] = { kind = "wake", t = to, msg = ("%s: a waiter of a scheduler client " ..
          "got the lock %.2f s after the release at %s (%s), no fault meanwhile"):format(
          x.w, x.after, fmt_t(meta, x.t), tostring(x.hid)) }
      end
    end
  end
end

-- Once the faults are over, the clients find the servers again: a call
-- that starts RECOVER_S after every fault that touched a server ended
-- does not fail with a connection or quorum error (a Cluster master that
-- died was replaced by its replica; a Sentinel failover ended).
check.RECOVER_S = 8
check.REMAP_S = 3            -- s after a replica took over (kill_master)
local TOUCHES = { restart = true, outage = true, pause = true, sleep = true, kill_conns = true, kill_subs = true,
                  proxy = true, failover = true, migrate = true, kill_master = true, flush = true,
                  evict = true, flood = true }
local function recovered(g, meta, out)
  -- A Cluster master killed and replaced: once its replica has taken
  -- over (t1), no call goes to the dead node while it stays down,
  -- whatever else the faults do meanwhile.
  for _, f in ipairs(g.faults) do
    if f.kind == "kill_master" and f.port then
      local down_until = f.t0 + (num(f.down) or 0)
      for _, c in ipairs(g.calls) do
        local err = c.err or c.raised or ""
        if c.t0 > f.t1 + check.REMAP_S and c.t1 < down_until and
            err:find(":" .. f.port .. ")", 1, true) then
          out[#out + 1] = { kind = "stuck", t = c.t0, msg = ("%s %s %s at %s still went to " ..
            "the killed master %d, %.1f s after its replica took over: %s"):format(c.w, c.ev,
            tostring(c.name or c.hid or ""), fmt_t(meta, c.t0), f.port, c.t0 - f.t1, err) }
          return
        end
      end
    end
  end
  local ends = {}
  for _, f in ipairs(g.faults) do
    if TOUCHES[f.kind] then
      -- (a Cluster master's kill is over once its replica took over, t1:
      -- the cluster serves every slot, though the dead node is still down)
      local e = f.kind == "kill_master" and f.t1 or math.max(f.t1 or f.t0, f.t0 + (f.dur or 0))
      ends[#ends + 1] = { t0 = f.t0, e = e }
    end
  end
  for _, c in ipairs(g.calls) do
    local err = c.err or ""
    if (err:find("^connection") or err:find("^quorum")) and c.t0 > (meta.t_start or 0) + check.RECOVER_S then
      local quiet = true
      for _, e in ipairs(ends) do
        if e.t0 <= c.t1 and e.e + check.RECOVER_S >= c.t0 then quiet = false end
      end
      for _, st in ipairs(g.stops[c.w] or {}) do
        if st.t >= c.t0 - check.RECOVER_S and st.t <= c.t1 then quiet = false end
      end
      if quiet then
        out[#out + 1] = { kind = "stuck", t = c.t0, msg = ("%s %s %s failed at %s, %g s after " ..
          "every fault had ended: %s"):format(c.w, c.ev, tostring(c.name or c.hid or ""),
          fmt_t(meta, c.t0), check.RECOVER_S, err) }
        return
      end
    end
  end
end

-- No call fails because a lock's keys are on two Cluster slots: dlock
-- builds every key of a lock with one hash tag, whatever its name, and no
-- fault moves a key out of its slot (CROSSSLOT, or a script that reached
-- a key or a channel of another slot).
local TWO_SLOTS = { "CROSSSLOT", "non local", "hash to the same slot", "another Cluster slot" }
local function slots(records, meta, out)
  for _, r in ipairs(records) do
    local e = r.err or r.raised
    for _, pat in ipairs(TWO_SLOTS) do
      if e and tostring(e):find(pat, 1, true) then
        out[#out + 1] = { kind = "slots", t = r.t1 or r.t or r.t0 or 0, msg = ("%s %s %s " ..
          "at %s: %s"):format(tostring(r.w), tostring(r.ev), tostring(r.name or r.hid or ""),
          fmt_t(meta, r.t0 or r.t or 0), tostring(e)) }
        return
      end
    end
  end
end

-- A held lock is released whatever its slot is doing: no release fails
-- because its slot migrates (TRYAGAIN, the script's keys not all on one
-- node: its one-key form runs instead, src/redis/op.c). A fair lock's or a
-- semaphore's release did, for the whole migration, while its queue was
-- empty.
local function migrations(records, meta, out)
  for _, r in ipairs(records) do
    local e = r.ev == "rel" and tostring(r.err or r.raised or "")
    if e and (e:find("TRYAGAIN", 1, true) or e:find("being migrated", 1, true)) then
      out[#out + 1] = { kind = "migration", t = r.t1 or r.t0 or 0, msg = ("%s release of %s " ..
        "at %s did not run while its slot migrated: %s"):format(tostring(r.w),
        tostring(r.hid or ""), fmt_t(meta, r.t0 or 0), e) }
      return
    end
  end
end

-- A blocking wait for a lock another coroutine of the same client held
-- throughout (its held() said so before and after the wait) ends with
-- the timeout that says so, or a failure to reach Redis; not with a plain
-- timeout (it waited for its own Lua state). Unless a fault or a force of
-- that name came near the wait: the hold may have been lost meanwhile
-- (held() finds out a little later) and the lock taken by another. (A
-- wait that got the lock beside its holder is the exclusion check's.)
check.SELFWAIT_NEAR_S = 1
local function selfwaits(g, meta, out)
  local near = check.SELFWAIT_NEAR_S
  for _, x in ipairs(g.selfwaits) do
    local err = tostring(x.err or "")
    local fine = x.got or err:find("^timeout: held by another coroutine of this client; ") or
                 err:find("^connection") or err:find("^quorum") or err:find("^redis")
    local quiet = true
    for _, f in ipairs(g.faults) do
      if f.t0 <= x.t1 + near and (f.t1 or f.t0) >= x.t0 - near then quiet = false end
    end
    for _, f in ipairs(g.forces) do
      if f.name == x.name and f.t0 <= x.t1 + near and f.t1 >= x.t0 - near then quiet = false end
    end
    if x.before and x.after and quiet and not fine then
      out[#out + 1] = { kind = "selfwait", t = x.t1, msg = ("%s: a wait for the lock its " ..
        "own coroutine held (%s) ended %s after %.2f s"):format(x.w, tostring(x.hid),
        x.got and "with the lock" or ("with " .. err), x.t1 - x.t0) }
    end
  end
end

function check.run(records, meta)
  meta = meta or {}
  local g = gather(records)
  local by_name = intervals(g)
  local out = {}
  exclusion(g, meta, by_name, out)
  forced_holds(g, meta, by_name, out)
  semaphores(g, meta, by_name, out)
  tokens(g, meta, out)
  store(g, meta, out)
  guards(g, meta, out)
  counts(g, meta, out)
  bounds(g, meta, out)
  leftovers(g, meta, out)
  maxhold(g, meta, out)
  renewals(g, meta, out)
  handoffs(g, meta, out)
  selfwaits(g, meta, out)
  recovered(g, meta, out)
  slots(records, meta, out)
  migrations(records, meta, out)
  table.sort(out, function(a, b) return a.t < b.t end)
  return out
end

return check
