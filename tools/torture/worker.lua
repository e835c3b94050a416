-- One torture worker process: random operations on the round's locks from
-- a seed, each call and its result logged with dlock.now() to the worker's
-- own history file (see check.lua for what is checked over them).
--   lua worker.lua ROUND_CONFIG INDEX SEED
-- The config (written by run.lua) names the topology, the locks, the lease
-- and the monotonic time at which to stop.
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local dlock = require "dlock"
local helper = require "helper"
local common = require "common"
local store_mod = require "store"

local cfg = dofile(arg[1])
local idx, seed = tonumber(arg[2]), tonumber(arg[3])
local rng = common.rng(seed)
local me = ("w%d.%d"):format(idx, seed)
local log = common.writer(("%s/%s.log"):format(cfg.dir, me))
local now = dlock.now

-- Every call's bound: its wait plus a few command timeouts (an acquire may
-- resend a pending request first, Redlock waits for its slowest master) and
-- generous slack for a loaded 2-core machine.
local function bound(wait)
  return (wait or 0) + 6 * cfg.cto + cfg.slack
end

local function on_lost(lock, reason)
  log{ ev = "lost", w = me, t = now(), name = lock.name, reason = tostring(reason) }
end

local function connect(extra)
  local o = { lease = cfg.lease, command_timeout = cfg.cto, connect_timeout = cfg.cto,
              on_lost = on_lost, label = me }
  for k, v in pairs(cfg.conn) do o[k] = v end
  for k, v in pairs(extra or {}) do o[k] = v end
  -- A client in four runs its scripts with EVALSHA, as against a server
  -- without functions, beside the others' FCALLs on the same keys.
  if o.functions == nil then o.functions = not rng:chance(0.25) end
  -- Faults may be on at start: retry within the round.
  while now() < cfg.stop_at do
    local c, err = dlock.connect(o)
    if c then
      log{ ev = "note", w = me, t = now(), what = "client " .. c.id .. " runs its scripts with " ..
           (o.functions and "FCALL" or "EVALSHA") }
      return c
    end
    log{ ev = "note", w = me, t = now(), what = "connect failed", err = tostring(err) }
    dlock.sleep(0.2)
  end
  os.exit(0)
end

-- A scheduler that may raise inside a wait (as the dlock command's own
-- does on a signal): multi_lock must not keep names when it does.
local raise_p = 0
local raising = { wait = function(_, timeout)
  if raise_p > 0 and rng:chance(raise_p) then error("torture: the scheduler raised", 0) end
  dlock.sleep(math.min(timeout or 0.05, 0.05))
end }
-- A scheduler that yields, so the worker can close the client mid-wait.
local yielding = { wait = function(_, timeout) coroutine.yield(timeout) end }

local c1 = connect()
local c2 = connect()                 -- a second client: the other half of shared owners
local c3 = connect{ scheduler = raising }
-- A client with max_hold: no hold of it outlives max_hold after its
-- acquire, whatever extend or a fixed lease ask (check.lua).
local c5 = connect{ max_hold = cfg.max_hold }
-- A client whose waits yield to cqueues or luv, its coroutines contending
-- for a lock of this worker's own (ops.sched); its lease is long, so a
-- waiter that misses a release sleeps long enough to be seen.
local sched_kind = cfg.sched and rng:pick({ "cqueues", "luv" })
if sched_kind and not pcall(require, sched_kind) then sched_kind = nil end
local c4 = sched_kind and connect{ scheduler = sched_kind, lease = 8 }
-- A Redlock client refuses explicit owners (doc/scaling-out.md): checked
-- once, and a worker whose client takes one fails.
if cfg.conn.servers and pcall(c1.lock, c1, cfg.locks[1], { owner = "job" }) then
  error("torture: a Redlock client took an explicit owner", 0)
end
local st = assert(store_mod.connect(cfg.store_port))
log{ ev = "start", w = me, t = now(), clients = { c1.id, c2.id, c3.id, c5.id, c4 and c4.id } }

local hid_n, op_n, co_n = 0, 0, 0
local c3_fail_t = -math.huge         -- last release of c3's that did not succeed,
                                     -- or acquire that met a connection error
local c3_rel_t = -math.huge          -- last release of c3's: an acknowledged write
                                     -- that a failover can still lose (the
                                     -- released hold then lingers for a lease)
local deferred = {}                  -- { at, fn }: checks run after a lease

local function call(rec, fn, ...)
  op_n = op_n + 1
  rec.w, rec.op_id = me, op_n
  rec.t0 = now()
  local r = table.pack(pcall(fn, ...))
  rec.t1 = now()
  if not r[1] then
    rec.raised = tostring(r[2])
    log(rec)
    return nil, rec.raised
  end
  rec.ok = r[2] and true or false
  if not r[2] then rec.err = tostring(r[3]) end
  if r[2] and type(r[3]) == "number" then rec.rem = r[3] end   -- release: true, remaining
  log(rec)
  return table.unpack(r, 2, r.n)
end

-- held(): logged with the time taken *before* the call, so a true answer
-- proves belief at the logged time (a hold never becomes held again).
local function check_held(hid, obj)
  local t = now()
  local v = obj:held()
  log{ ev = "held", w = me, hid = hid, t = t, v = v }
  return v
end

-- Each client's renewals and holds, logged once a second: a flood of
-- notices must not make the watchdog renew at the round-trip rate
-- (check.lua, renewals).
-- (held: the most holds each had at any look since the last record)
local stats_t, most = -math.huge, {}
local function log_stats()
  local clients, s = { c1, c2, c3, c5, c4 }, {}
  for i, c in ipairs(clients) do
    local x = c:stats()
    most[i] = math.max(most[i] or 0, x.held)
    s[i] = { id = c.id, renewed = x.renewed, held = most[i] }
  end
  if now() - stats_t < 1 then return end
  stats_t, most = now(), {}
  log{ ev = "stats", w = me, t = stats_t, s = s }
end

local function pause(s)
  local stop = now() + s
  while now() < stop do
    c1:poll(); c2:poll(); c3:poll(); c5:poll()
    log_stats()
    dlock.sleep(math.min(0.05, math.max(0, stop - now())))
  end
end

local function store_write(hid, name, tok)
  local t0 = now()
  local acc, seq, hi = st:write(name, tok, hid)
  if acc == nil then
    log{ ev = "note", w = me, t = t0, what = "store failed", err = tostring(seq) }
    return
  end
  log{ ev = "store", w = me, hid = hid, name = name, tok = tostring(tok), acc = acc,
       seq = seq, hi = hi, t0 = t0, t1 = now() }
end

-- A write under lock:guard (not on Redlock, which has no one server to
-- write to): Redis runs it only while the hold is the lock's current
-- tenancy, so it must never succeed once a newer tenancy was granted
-- (check.lua). The value is read back with client:call.
local function guard_write(h, obj)
  local name = h.names[1]
  local tok = h.tokens(name)
  if not tok then return end
  local key = "g{" .. helper.lock_tag(name) .. "}"   -- the lock's hash tag
  local t0 = now()
  local fine, ok, err = pcall(obj.guard, obj, "SET", key, h.hid .. " " .. tostring(tok))
  local t1 = now()
  if not fine then                     -- its client was closed under it
    log{ ev = "note", w = me, t = t0, what = "guard raised", err = tostring(ok) }
    return
  end
  log{ ev = "guard", w = me, hid = h.hid, name = name, tok = tostring(tok), ok = ok ~= nil,
       err = err and tostring(err), t0 = t0, t1 = t1 }
  if ok then pcall(c1.call, c1, "GET", key) end
end

-- The critical section of a hold: held() checks, fenced writes, maybe a
-- reentry and an extend, for `dur` seconds. `names` are the lock names
-- the hold covers (one but for a multi-lock), `tokens(name)` its tokens.
local new_hold, acquired           -- below; a reentry that took the lock afresh calls them
local function body1(h, obj, dur)
  local stop = now() + dur
  repeat
    if not check_held(h.hid, obj) then return false end
    if h.fenced then
      for _, n in ipairs(h.names) do
        local tok = h.tokens(n)
        if tok and check_held(h.hid, obj) then store_write(h.hid, n, tok) end
      end
    end
    if h.guard and rng:chance(0.3) then guard_write(h, obj) end
    if h.reenter and rng:chance(0.2) then
      local before, tokb = obj:count(), h.tokens(h.names[1])
      local rrec = { ev = "reenter", hid = h.hid, bnd = bound(0) }
      local ok = call(rrec, obj.acquire, obj, { wait = 0 })
      if ok then
        local after, toka = obj:count(), h.tokens(h.names[1])
        log{ ev = "count", w = me, hid = h.hid, t = now(), before = before, after = after,
             tokb = tostring(tokb), toka = tostring(toka) }
        if after == before + 1 and toka == tokb then
          h.depth = h.depth + 1
        else
          -- The hold was lost and this acquire took the lock afresh: a new
          -- tenancy, so a new hold from here (the old one's belief ended
          -- with its last held()).
          local nh = new_hold(h.kind, h.names, h.owner, { shared = h.shared, client = h.client })
          for k, v in pairs(nh) do if k ~= "tokens" then h[k] = v end end
          h.depth = after
          acquired(h, rrec, obj, h.tokens)
        end
      end
    end
    if h.extend and rng:chance(0.1) then
      call({ ev = "extend", hid = h.hid, bnd = bound(0) }, obj.extend, obj,
        rng:pick({ 1, 2, 4 }))
    end
    pause(math.min(rng:pick({ 0.05, 0.2, 0.5 }), math.max(0, stop - now())))
  until now() >= stop
  return check_held(h.hid, obj)
end

-- A worker bug must not leave a hold behind: it is noted, and the
-- release still runs.
local function body(h, obj, dur)
  local ok, r = pcall(body1, h, obj, dur)
  if not ok then log{ ev = "note", w = me, t = now(), what = "body raised", err = tostring(r) } end
  return ok and r
end

local function release_all(h, obj)
  for _ = 1, h.depth do
    check_held(h.hid, obj)
    local cnt = obj:count()
    local rec = { ev = "rel", hid = h.hid, cnt = cnt, shared = h.shared, bnd = bound(0) }
    local ok, err = call(rec, obj.release, obj)
    if h.client == c3 then c3_rel_t = now() end
    if not ok then
      if h.client == c3 then c3_fail_t = now() end
      -- The other holds are still this owner's (a lost one answers
      -- "lost" once per hold): a caller releases them all, or its
      -- coroutine keeps them until it is collected.
      if tostring(err):find("^not held") then break end
    end
  end
end

local function hold_dur()
  if cfg.focus and rng:chance(0.3) then return 6 end
  return rng:pick({ 0.05, 0.1, 0.3, 0.8, 1.5, 3, cfg.lease * 1.5 })
end

local function lock_opts(shared)
  local o = {}
  local x = rng:float()
  if x < 0.25 then o.expire = rng:pick({ 1, 2, 4 })
  elseif x < 0.45 then o.watchdog_lease = rng:pick({ 1.5, 3 })
  end
  if shared and rng:chance(0.5) and not o.expire then o.expire, o.watchdog_lease = 1, nil end
  if cfg.focus == "notices" and rng:chance(0.5) then     -- (run.lua: TORTURE_FOCUS)
    o.expire, o.watchdog_lease = cfg.focus_lease, nil
  end
  return o
end

function new_hold(kind, names, owner, extra)
  hid_n = hid_n + 1
  local h = { hid = me .. "#" .. hid_n, kind = kind, names = names, owner = owner,
              depth = 1, reenter = true, extend = true,
              fenced = kind ~= "read" and kind ~= "sem",
              guard = not cfg.conn.servers and (kind == "lock" or kind == "fair"
                                                 or kind == "write") }
  for k, v in pairs(extra or {}) do h[k] = v end
  -- (TORTURE_FOCUS=notices) a quiet hold, as most are: nothing in its
  -- body asks Redis, so only a notice tells it of a force
  if cfg.focus == "notices" and rng:chance(0.5) then
    h.reenter, h.extend, h.guard = false, false, false
  end
  return h
end

function acquired(h, rec, obj, tokens)
  h.tokens = tokens
  local toks = {}
  for _, n in ipairs(h.names) do toks[n] = tokens(n) and tostring(tokens(n)) end
  log{ ev = "hold", w = me, hid = h.hid, kind = h.kind, names = h.names, owner = h.owner,
       t0 = rec.t0, t1 = rec.t1, tokens = toks, count = obj:count(), shared = h.shared, permits = h.permits,
       expire = rec.expire, wlease = rec.wlease, maxhold = rec.maxhold }
end

-- ---- the operations --------------------------------------------------------

local ops = {}

-- A lock, fair lock or one half of the rwlock: acquire / try_acquire /
-- with, maybe under an explicit owner that other workers share (not on
-- Redlock, which refuses explicit owners).
function ops.lock()
  local kind = rng:weighted({ lock = 5, fair = 2, read = 2, write = 2 })
  local name, shared, owner
  if kind == "fair" then name = cfg.fair
  elseif kind == "read" or kind == "write" then name = cfg.rw
  else name = rng:pick(cfg.locks) end
  local client = c1
  if rng:chance(0.15) then
    client = c5                                 -- max_hold
  elseif not cfg.conn.servers and rng:chance(cfg.focus == "shares" and 0.8 or 0.3) then
    shared = true
    -- a plain lock's shared owner on one name: workers then hold it
    -- together often, and a killed one's share meets co-owners that stay
    if kind == "lock" then name = cfg.locks[1] end
    -- the same owner in every worker (one per half of the rwlock: the
    -- checker takes one owner's holds as never in conflict)
    owner = "job:" .. name .. (name == cfg.rw and (":" .. kind) or "")
    if rng:chance(0.5) then client = c2 end
  elseif cfg.focus == "notices" and rng:chance(0.3) then
    -- fixed leases only (below), on a name of their own that half the
    -- forces go to
    client, kind, name = c2, "lock", cfg.quiet
  end
  local lopts = { owner = owner }
  local obj
  if kind == "lock" then obj = client:lock(name, lopts)
  elseif kind == "fair" then obj = client:fair_lock(name, lopts)
  else obj = client:rwlock(name, lopts)[kind] end
  local o = lock_opts(shared)
  if cfg.focus == "notices" and client == c2 then
    o.expire, o.watchdog_lease = cfg.focus_lease, nil
  end
  local how = rng:weighted({ acquire = 5, try = 2, with = 2 })
  local h = new_hold(kind, { name }, owner and ("x:" .. owner) or (me .. ":" .. client.id),
                     { shared = shared })
  -- (TORTURE_FOCUS=notices) the fixed-lease client's holds: quiet, 9 s (of 10)
  local probe = cfg.quiet and client == c2 and not shared
  if probe then h.reenter, h.extend, h.guard = false, false, false end
  local rec = { ev = "acq", kind = kind, name = name, owner = h.owner, how = how,
                expire = o.expire, wlease = o.watchdog_lease,
                maxhold = client == c5 and cfg.max_hold or nil }
  local toks = function() return obj:token() end
  if how == "with" then
    o.wait = rng:pick({ 0, 0.3, 1, 3 })
    local dur = probe and 9 or hold_dur()
    rec.wait, rec.bnd, rec.body = o.wait, bound(o.wait) + dur + 2, dur
    h.reenter = false                           -- with releases one hold only
    call(rec, obj.with, obj, o, function()
      local r = { t0 = rec.t0, t1 = now(), expire = o.expire, wlease = o.watchdog_lease,
                  maxhold = rec.maxhold }
      acquired(h, r, obj, toks)
      body(h, obj, dur)
      check_held(h.hid, obj)
      log{ ev = "relcall", w = me, hid = h.hid, t = now() }
    end)
    return
  end
  local ok
  if how == "try" then
    rec.wait, rec.bnd = 0, bound(0)
    ok = call(rec, obj.try_acquire, obj, o)
  else
    o.wait = rng:pick({ 0, 0.3, 1, 3 })
    rec.wait, rec.bnd = o.wait, bound(o.wait)
    ok = call(rec, obj.acquire, obj, o)
  end
  if not ok then return end
  acquired(h, rec, obj, toks)
  body(h, obj, probe and 9 or hold_dur())
  release_all(h, obj)
end

-- A multi-lock over two or three of the plain lock names (overlapping
-- other workers' multi-locks and plain locks), sometimes in a coroutine
-- of the client whose scheduler raises inside a wait.
function ops.multi()
  local names = {}
  for _, n in ipairs(cfg.locks) do if rng:chance(0.6) then names[#names + 1] = n end end
  if #names < 2 then names = { cfg.locks[1], cfg.locks[2] } end
  if rng:chance(0.5) then names[1], names[#names] = names[#names], names[1] end
  local raise = rng:chance(0.35)
  local client = raise and c3 or c1
  local obj = client:multi_lock(names)
  local wait = rng:pick({ 0, 0.5, 2 })
  co_n = co_n + 1
  local owner = me .. ":" .. client.id .. (raise and (":co" .. co_n) or "")
  local h = new_hold("multi", obj.names, owner, { client = client })
  local rec = { ev = "acq", kind = "multi", name = obj.name, owner = owner, wait = wait,
                bnd = bound(wait), raising = raise or nil }
  local function run()
    local ok, err = call(rec, obj.acquire, obj, { wait = wait })
    -- An attempt whose reply was lost may run late, and hold until its
    -- cancel lands (or for a lease): as a failed release's hold may.
    if not ok and client == c3 and (tostring(err):find("^connection") or tostring(err):find("^quorum")) then
      c3_fail_t = now()
    end
    if not ok then return end
    acquired(h, rec, obj, function(n) local t = obj:tokens(); return t and t[n] end)
    -- Nothing in the body may end this coroutine: only the acquire's
    -- raise is under test here.
    body(h, obj, hold_dur())
    release_all(h, obj)
  end
  if not raise then return run() end
  -- The scheduler only runs in a coroutine that can yield.
  raise_p = 0.5
  local co = coroutine.create(run)
  local ok, err = coroutine.resume(co)
  raise_p = 0
  if not rec.raised then return end
  -- It raised (the call's pcall caught it, or the coroutine died): nothing
  -- of it may stay held after a lease. Keep the coroutine alive (a caller
  -- may well hold on to it) and look again later.
  local t = now()
  log{ ev = "raised", w = me, t = t, names = obj.names, held = obj:held(), err = tostring(err) }
  local keep = co
  local function c3_holds(n)
    local info = c1:inspect(n)
    for _, o in ipairs(info and info.owners or {}) do
      if o.client == c3.id then return true end
    end
    return false
  end
  local tries = 0
  local give_up = cfg.stop_at + cfg.lease_max + cfg.slack   -- (then it is said)
  local function look()
    local _ = keep
    -- A later hold of c3's whose release failed, or whose acknowledged
    -- release a failover lost, may linger for a lease: look again once
    -- that has passed (a leak stays; such a hold does not).
    local excuse = math.max(c3_fail_t, c3_rel_t) + cfg.lease_max + cfg.slack
    local mine = {}
    for i, n in ipairs(obj.names) do mine[i] = c3_holds(n) end
    for i in ipairs(obj.names) do
      if mine[i] and now() < excuse and now() < give_up then
        tries = tries + 1
        deferred[#deferred + 1] = { at = excuse, fn = look }
        return
      end
    end
    local recent = now() < excuse
    for i, n in ipairs(obj.names) do
      log{ ev = "orphan", w = me, t = now(), since = t, name = n, client = c3.id,
           held = mine[i] and not recent, recent_fail = recent or nil, tries = tries }
    end
  end
  deferred[#deferred + 1] = { at = t + cfg.lease_max + cfg.slack, fn = look }
end

-- A semaphore permit; now and then with another permit count than the
-- round's (a client that names another limit).
function ops.sem()
  local s = rng:pick(cfg.sems)
  local permits = s.permits
  if rng:chance(0.2) then permits = s.permits + rng:int(1, 2) end
  local sem = c1:semaphore(s.name, permits)
  local o = { wait = rng:pick({ 0, 0.3, 1, 3 }) }
  if rng:chance(0.3) then o.lease = rng:pick({ 1, 2, 4 }) end
  local rec = { ev = "acq", kind = "sem", name = s.name, permits = permits, wait = o.wait,
                bnd = bound(o.wait), expire = o.lease }
  local id = call(rec, sem.acquire, sem, o)
  if not id then return end
  local h = new_hold("sem", { s.name }, me .. ":" .. tostring(id),
                     { permits = permits, reenter = false, extend = false })
  -- The permit's own lock object (internal: sem.held[id]) answers held();
  -- without it the belief is the acquire reply only.
  local p = type(sem.held) == "table" and sem.held[id]
  local obj = p and p.held and p or { held = function() return false end, count = function() return 1 end }
  acquired(h, rec, obj, function() return nil end)
  body(h, obj, hold_dur())
  check_held(h.hid, obj)
  local rec2 = { ev = "rel", hid = h.hid, bnd = bound(0) }
  call(rec2, sem.release, sem, id)
end

-- force_release of a plain or fair lock: its holder must learn it lost.
function ops.force()
  local name = rng:chance(0.7) and rng:pick(cfg.locks) or cfg.fair
  if cfg.quiet and rng:chance(0.5) then name = cfg.quiet end
  local obj = name == cfg.fair and c1:fair_lock(name) or c1:lock(name)
  local rec = { ev = "force", name = name, bnd = bound(0) }
  call(rec, obj.force_release, obj)
end

-- The cold lock: taken now and then, briefly, on a 1 s lease, so it is
-- free (its key gone) most of the time, as most real locks are: a slot
-- migration then meets it free.
function ops.cold()
  if not cfg.cold then return end
  local obj = c1:lock(cfg.cold)
  local h = new_hold("lock", { cfg.cold }, me .. ":" .. c1.id, { extend = false })
  local wait = rng:pick({ 0, 0.5 })
  local rec = { ev = "acq", kind = "lock", name = cfg.cold, owner = h.owner, how = "acquire",
                wait = wait, bnd = bound(wait), expire = 1 }
  if not call(rec, obj.acquire, obj, { wait = wait, expire = 1 }) then return end
  acquired(h, rec, obj, function() return obj:token() end)
  body(h, obj, rng:pick({ 0.05, 0.2 }))
  release_all(h, obj)
end

-- A fresh client that waits for a lock in a coroutine and is closed in
-- the middle of the wait (or abandoned, or lets the wait finish).
function ops.closewait()
  local c = connect{ scheduler = yielding }
  local name = rng:pick(cfg.locks)
  local obj = c:lock(name)
  local wait = rng:pick({ 0.5, 2 })
  local close_after = rng:range(0.02, 1)
  local h = new_hold("lock", { name }, me .. ":" .. c.id)
  local rec = { ev = "acq", kind = "lock", name = name, owner = h.owner, wait = wait,
                bnd = bound(wait), closewait = true }
  local co = coroutine.create(function() return call(rec, obj.acquire, obj, { wait = wait }) end)
  local start = now()
  local ok, got = coroutine.resume(co)
  while ok and coroutine.status(co) ~= "dead" and now() - start < close_after do
    dlock.sleep(math.min(tonumber(got) or 0.02, 0.02))
    ok, got = coroutine.resume(co)
  end
  if coroutine.status(co) == "dead" and not rec.raised then
    if rec.ok then
      acquired(h, rec, obj, function() return obj:token() end)
      check_held(h.hid, obj)
    end
  end
  local t = now()
  log{ ev = "gone", w = me, t = t, client = c.id, hid = rec.ok and h.hid or nil }
  c:close()
  if coroutine.status(co) ~= "dead" then
    pcall(coroutine.resume, co)              -- the wait finds the client closed
  end
end

-- Coroutines of one Lua state contending for this worker's own lock on
-- c4, whose waits yield to cqueues or luv (the driver's kill_subs fault
-- breaks their subscriber sockets now and then). A waiter must be woken
-- by each release it waits for (a "handoff" record: how long after the
-- release it got the lock; check.lua), and the loop must never raise.
local sched_name = cfg.locks[1] .. ":sched:" .. me
local function sched_loop(fns)
  if sched_kind == "cqueues" then
    local cqueues = require "cqueues"
    local cq = cqueues.new()
    for _, fn in ipairs(fns) do cq:wrap(fn) end
    local ok, err = cq:loop()
    return ok, err, cqueues.sleep
  end
  local uv = require "luv"
  for _, fn in ipairs(fns) do
    local co = coroutine.create(fn)
    local t = uv.new_timer()
    t:start(0, 0, function()
      t:close()
      local ok, err = coroutine.resume(co)
      if not ok then error(err, 0) end
    end)
  end
  return pcall(uv.run)
end
local function sched_sleep(s)
  if sched_kind == "cqueues" then return require("cqueues").sleep(s) end
  local uv, co = require "luv", coroutine.running()
  local t = uv.new_timer()
  t:start(math.ceil(s * 1000), 0, function() t:close(); coroutine.resume(co) end)
  coroutine.yield()
end

function ops.sched()
  if not c4 then return end
  local waiting, released = 0, nil
  local fns = {}
  for i = 1, rng:int(2, 3) do
    local rounds, durs = rng:int(1, 2), { hold_dur(), hold_dur() }
    fns[i] = function()
      for j = 1, rounds do
        local obj = c4:lock(sched_name)
        local h = new_hold("lock", { sched_name }, me .. ":" .. c4.id .. ":s" .. i,
                           { client = c4, reenter = false, extend = false })
        local rec = { ev = "acq", kind = "lock", name = sched_name, owner = h.owner, wait = 20,
                      bnd = bound(20), sched = sched_kind }
        waiting = waiting + 1
        local ok = call(rec, obj.acquire, obj, { wait = 20 })
        waiting = waiting - 1
        if not ok then return end
        if released then
          log{ ev = "handoff", w = me, hid = h.hid, t = released, after = now() - released }
          released = nil
        end
        acquired(h, rec, obj, function() return obj:token() end)
        local stop = now() + math.min(durs[j], 1.5)
        while now() < stop and check_held(h.hid, obj) do sched_sleep(0.05) end
        check_held(h.hid, obj)
        local rrec = { ev = "rel", hid = h.hid, bnd = bound(0) }
        call(rrec, obj.release, obj)
        if waiting > 0 then released = now() end   -- someone waits for this one
        sched_sleep(0.01)
      end
    end
  end
  local ok, err = sched_loop(fns)
  if not ok then log{ ev = "schedfail", w = me, t = now(), sched = sched_kind, err = tostring(err) } end
end

-- A wait for the worker's own Lua state: a coroutine of c1 holds a lock
-- (a plain one, the fair lock or a half of the rwlock) while the main
-- thread asks for it, or for the other half, with a blocking wait. The
-- wait ends at once with a timeout that says so (check.lua, selfwaits),
-- and leaves nothing behind: no hold, no place in the fair queue (which
-- would hold up every other worker's fair waiters).
function ops.selfwait()
  local kind = rng:weighted({ lock = 3, fair = 2, read = 1, write = 1 })
  local name = kind == "fair" and cfg.fair or kind == "lock" and rng:pick(cfg.locks) or cfg.rw
  local other = kind == "read" and "write" or kind == "write" and "read" or kind
  local function obj_of(k)
    if k == "lock" then return c1:lock(name) end
    if k == "fair" then return c1:fair_lock(name) end
    return c1:rwlock(name)[k]
  end
  local obj, mine = obj_of(kind), obj_of(other)
  local h = new_hold(kind, { name }, me .. ":" .. c1.id .. ":selfwait", { client = c1, reenter = false })
  local held_before, held_after
  local co = coroutine.create(function()
    local rec = { ev = "acq", kind = kind, name = name, owner = h.owner, how = "acquire",
                  wait = 1, bnd = bound(1) }
    if not call(rec, obj.acquire, obj, { wait = 1 }) then return end
    acquired(h, rec, obj, function() return obj:token() end)
    held_before = check_held(h.hid, obj)
    coroutine.yield(true)
    held_after = check_held(h.hid, obj)
    release_all(h, obj)
  end)
  local ok, holding = coroutine.resume(co)
  if not (ok and holding) then return end
  local mh = new_hold(other, { name }, me .. ":" .. c1.id, { client = c1, reenter = false })
  local rec = { ev = "acq", kind = other, name = name, owner = mh.owner, how = "acquire",
                wait = 3, bnd = bound(3), selfwait = true }
  local got, err = call(rec, mine.acquire, mine, { wait = 3 })
  coroutine.resume(co)
  log{ ev = "selfwait", w = me, name = name, t0 = rec.t0, t1 = rec.t1, got = got and true or false,
       err = err and tostring(err), before = held_before, after = held_after, hid = h.hid }
  if got then
    acquired(mh, rec, mine, function() return mine:token() end)
    release_all(mh, mine)
  end
end

local weights = { lock = 10, multi = 3, sem = 3, force = 0.5, closewait = 0.7, cold = 1,
                  selfwait = 0.7, sched = c4 and 1.5 or nil }
-- A Redlock client has no semaphore (each master would count on its own).
if cfg.conn.servers then weights.sem = nil end
if cfg.focus == "notices" then weights.force = 5 end
while now() < cfg.stop_at do
  for i = #deferred, 1, -1 do
    if now() >= deferred[i].at then
      local d = table.remove(deferred, i)
      pcall(d.fn)
    end
  end
  local op = rng:weighted(weights)
  local ok, err = pcall(ops[op])
  if not ok then log{ ev = "note", w = me, t = now(), what = "op " .. op .. " raised", err = tostring(err) } end
  pause(rng:pick({ 0, 0.01, 0.05, 0.2 }))
end
for _, d in ipairs(deferred) do
  local wait = d.at - now()
  if wait > 0 and wait < cfg.lease_max + cfg.slack + 1 then dlock.sleep(wait) end
  pcall(d.fn)
end
log{ ev = "end", w = me, t = now(), ops = op_n }
c1:close(); c2:close(); c3:close(); c5:close()
if c4 then c4:close() end
st:close()
os.exit(0)
