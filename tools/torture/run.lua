-- make torture: a randomized fault checker over dlock (in the spirit of
-- Jepsen and FoundationDB's simulation). The run is split into rounds of
-- 12-30 s; each round picks a topology (one server, Redlock over 3 or 5
-- masters, Sentinel, Cluster; started once, reused by later rounds), 4-6
-- worker processes (worker.lua) running random operations, and a schedule
-- of faults (faults.lua), all from the seed. Every process logs its calls
-- to its own history file; after the round, check.lua runs the invariants
-- over the merged history.
--   TORTURE_SECONDS=300 SEED=s lua run.lua      (under tools/with-tmp.sh)
-- The same seed replays the same schedule of operations and faults (the
-- timing differs). A round with violations keeps its history directory and
-- a report.txt naming the first; the last line printed is the summary.
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"
local common = require "common"
local faults = require "faults"
local check = require "check"

local now = dlock.now
local total = tonumber(os.getenv("TORTURE_SECONDS") or "") or 300
local seed = tonumber(os.getenv("SEED") or "")
if not seed then seed = (os.time() * 7919 + math.floor(now() * 1000)) % 1000000000 end
seed = math.floor(seed)
local root = ("%s/%d"):format(os.getenv("TORTURE_DIR") or "build/torture", seed)
local run_start = now()

local function say(fmt, ...)
  io.write(fmt:format(...), "\n")
  io.flush()
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

sh("rm -rf " .. q(root) .. " && mkdir -p " .. q(root))
say("torture: seed %d, %d s, histories in %s (replay: make torture SEED=%d)", seed, total, root, seed)

-- ---- processes -----------------------------------------------------------------

-- A process is gone once /proc says so or shows a zombie (init may reap
-- orphans late).
local function alive(pid)
  local f = io.open("/proc/" .. pid .. "/stat")
  if not f then return false end
  local s = f:read("*l") or ""
  f:close()
  return not s:match("^%d+ %b() Z")
end

-- Start a Lua script of this directory in the background, its pid in
-- $DLOCK_TMP so that tools/with-tmp.sh kills it if we do not.
local function spawn(script, out, ...)
  local args = { ... }
  for i, a in ipairs(args) do args[i] = q(a) end
  local p = io.popen(("%s %s/%s %s >%s 2>&1 & echo $!"):format(helper.lua_cmd(), here, script,
    table.concat(args, " "), q(out)))
  local pid = tonumber(p:read("*a"):match("%d+"))
  p:close()
  local f = io.open(("%s/torture-%d.pid"):format(helper.tmp, pid), "w")
  if f then f:write(pid, "\n"); f:close() end
  return { pid = pid, out = out,
           signal = function(sig) return sh(("kill -%s %d 2>/dev/null"):format(sig, pid)) end,
           alive = function() return alive(pid) end }
end


-- ---- topologies (started once, reused) ----------------------------------------

local AOF = "--appendonly yes --appendfsync always"
local DEBUG = "--enable-debug-command local"       -- DEBUG SLEEP (faults.sleep)
local topos = {}
local store_srv

local function get_topo(p)
  local key = p.kind .. (p.masters or "")
  if topos[key] then return topos[key] end
  local t = { kind = p.kind, quorum = 1 }
  if p.kind == "single" then
    t.h = topology.masters(1, AOF .. " " .. DEBUG)
    t.srv = t.h.servers[1]
    t.direct = { url = t.srv.url }
  elseif p.kind == "redlock" then
    t.h = topology.masters(p.masters, AOF .. " " .. DEBUG)
    t.direct = { servers = t.h.urls }
    t.quorum = math.floor(p.masters / 2) + 1
  elseif p.kind == "sentinel" then
    -- down-after 5 s: the pauses and sleeps injected here stay shorter,
    -- so only the driver's failovers change the master.
    t.h = topology.sentinel{ down_after_ms = 5000, extra = DEBUG }
    t.direct = { sentinels = t.h.sentinel_urls, master = t.h.name }
  else
    -- each master with a replica: kill_master promotes it
    t.h = topology.cluster(3, { replicas = 1, node_timeout_ms = 3000, extra = DEBUG })
    t.direct = { cluster = t.h.urls }
  end
  topos[key] = t
  return t
end

-- ---- the plan of a round, from the seed alone ------------------------------------

local FAULTS = {
  single = { restart = 2, pause = 2, sleep = 1.5, flush = 1, evict = 1, kill_conns = 2,
             kill_subs = 1.5, flood = 1.5, proxy = 3, sigkill = 1.5, sigstop = 1.5, shorten = 2 },
  redlock = { restart = 2, pause = 2, sleep = 1.5, flush = 1, evict = 1.5, kill_conns = 2,
              kill_subs = 1.5, flood = 1.5, proxy = 2.5, sigkill = 1.5, sigstop = 1.5, shorten = 2 },
  sentinel = { failover = 3, pause = 1.5, sleep = 1, flush = 1, evict = 1, kill_conns = 1.5,
               kill_subs = 1.5, flood = 1.5, sigkill = 1.5, sigstop = 1.5, shorten = 2 },
  cluster = { migrate = 4, kill_master = 1.5, pause = 1.5, sleep = 1, flush = 1, evict = 1,
              kill_conns = 1.5, kill_subs = 1.5, flood = 1.5, sigkill = 1.5, sigstop = 1.5, shorten = 2 },
}

local order = { "single", "redlock", "sentinel", "cluster" }
do
  local r = common.rng(common.derive(seed, 0))
  for i = #order, 2, -1 do
    local j = r:int(1, i)
    order[i], order[j] = order[j], order[i]
  end
end
-- TORTURE_ONLY=single (or redlock, sentinel, cluster): every round on one
-- topology, to hunt a violation a round of that kind found.
if os.getenv("TORTURE_ONLY") then order = { os.getenv("TORTURE_ONLY") } end
-- TORTURE_FOCUS=notices: a schedule aimed at the notices of forced
-- releases, which the default mix meets too rarely to find a deaf
-- listener (a forced hold must have a fixed lease longer than the bound of
-- 2 s): forces ten times as often, half the holds on a fixed lease of 10 s,
-- floods, subscriber kills and restarts three times as often, outages,
-- and the other faults that cut clients off a quarter as often; one
-- client of each worker holds on fixed leases only, quietly, 9 s of 10,
-- on a name of its own (its watchdog has no renewal to wake it: only a
-- listener that retries on time hears a force). doc/torture.md.
-- TORTURE_FOCUS=shares: a schedule aimed at a shared owner's share from a
-- killed client: most lock holds under the shared owner, longer, and
-- SIGKILLs of workers four times as often.
local focus = os.getenv("TORTURE_FOCUS")
local FOCUS_LEASE = 10

local function plan(k, len)
  local rng = common.rng(common.derive(seed, k))
  local p = { k = k, len = len, kind = order[(k - 1) % #order + 1] }
  p.lease = rng:pick({ 2, 3, 4 })
  p.masters = p.kind == "redlock" and rng:pick({ 3, 3, 5 }) or nil
  p.proxied = (p.kind == "single" or p.kind == "redlock") and rng:chance(0.6)
  p.max_hold = rng:pick({ 1.5, 2.5, 4 })
  local heavy = p.kind == "sentinel" or p.kind == "cluster"
  p.nworkers = heavy and rng:int(4, 5) or rng:int(4, 6)
  p.seeds = {}
  for i = 1, p.nworkers do p.seeds[i] = rng:int(1, 2000000000) end
  p.sems = { rng:int(1, 2), rng:int(2, 3) }
  local names = { "L1", "L2", "L3", "F1", "RW1", "S1", "S2", "C1" }
  local weights = {}
  for kname, w in pairs(FAULTS[p.kind]) do weights[kname] = w end
  if not p.proxied then weights.proxy = nil end
  if focus == "notices" then
    for _, f in ipairs({ "flood", "kill_subs", "restart" }) do
      if weights[f] then weights[f] = weights[f] * 3 end
    end
    -- (faults that cut clients off excuse a deaf holder for a while: a
    -- dense schedule of them hides one that never hears, check.lua)
    for _, f in ipairs({ "pause", "sleep", "kill_conns", "proxy" }) do
      if weights[f] then weights[f] = weights[f] / 4 end
    end
    if weights.restart then weights.outage = 3 end   -- (one server, Redlock)
  elseif focus == "shares" then
    weights.sigkill = weights.sigkill * 4
  end
  p.faults = {}
  local nf = math.floor(len / 2.2)
  local failovers = 0
  for _ = 1, nf do
    local f = { t = rng:range(1, math.max(1.5, len - 3)), kind = rng:weighted(weights),
                server = rng:int(0, 100), worker = rng:int(0, 100), step = rng:int(0, 1),
                name = rng:pick(names), all = rng:chance(0.3), respawn = rng:int(1, 2000000000),
                mode = rng:pick({ "delay", "drop", "cut" }), delay = rng:range(0.2, 1.5),
                before = rng:range(0, 1.5), between = rng:range(0, 0.3), after = rng:range(0, 0.5) }
    -- A slot migration finds most real locks free: C1, the cold lock,
    -- is free most of the time (a fresh acquire then meets TRYAGAIN).
    -- Else, as often as not, the fair lock's or S1's, whose scripts take
    -- a queue too (a release meets TRYAGAIN while the two keys are apart).
    -- (f.server picks, so that the draws of the schedule stay as they were.)
    if f.kind == "migrate" and rng:chance(0.4) then f.name = "C1"
    elseif f.kind == "migrate" and f.server >= 50 then f.name = f.server >= 75 and "S1" or "F1" end
    if f.kind == "pause" then
      f.dur = rng:range(0.3, math.min(p.lease * 1.5, heavy and 3 or 6))
    elseif f.kind == "sleep" then
      f.dur = rng:range(0.2, heavy and 1.5 or 2.5)
    elseif f.kind == "proxy" then
      f.dur = rng:range(0.5, 3)
    elseif f.kind == "outage" then
      f.dur = rng:range(0.2, 1)
    elseif f.kind == "flood" then
      f.dur = rng:range(1, 3)
    elseif f.kind == "shorten" then
      f.dur = rng:range(2, 6)
    elseif f.kind == "kill_master" then
      f.dur = rng:range(8, 16)            -- the dead node stays down this long
    elseif f.kind == "sigstop" then
      f.dur = rng:range(0.5, p.lease * 2.5)
    end
    if f.kind == "failover" or f.kind == "kill_master" then failovers = failovers + 1 end
    if (f.kind ~= "failover" and f.kind ~= "kill_master") or failovers <= 2 then
      p.faults[#p.faults + 1] = f
    end
  end
  table.sort(p.faults, function(a, b) return a.t < b.t end)
  return p
end

-- ---- one round -----------------------------------------------------------------

-- The round's name of a lock of the plan ("L1", ...): its prefix, and for
-- some of them braces and odd bytes. A name that starts with "}" has an
-- empty hash tag as it is, so dlock escapes it ("\1" + name between the
-- braces, doc/reference.md#keys): a lock, its queue and its channels
-- must still share one Cluster slot, on every topology.
local DRESS = { L2 = "}t{%s", L3 = "\1%s}", F1 = "}%s", RW1 = "{%s}", S1 = "}%s" }
local function dressed(pre, short) return (DRESS[short] or "%s"):format(pre .. short) end

local function run_round(p)
  local dir = ("%s/round-%d-%s"):format(root, p.k, p.kind)
  sh("mkdir -p " .. q(dir))
  local topo = get_topo(p)
  local log = common.writer(dir .. "/driver.log")
  local t_start = now()
  local pre = ("r%d.%d:"):format(p.k, seed % 100000)
  local cfg = { dir = dir, cto = 0.5, slack = 3, lease = p.lease, lease_max = math.max(p.lease, 4, focus == "notices" and FOCUS_LEASE or 0),
                focus = focus, focus_lease = FOCUS_LEASE,
                stop_at = t_start + p.len, monitor_until = t_start + p.len + 30,
                store_port = store_srv.port, direct = topo.direct, conn = topo.direct,
                max_hold = p.max_hold, sched = true,
                locks = { dressed(pre, "L1"), dressed(pre, "L2"), dressed(pre, "L3") },
                fair = dressed(pre, "F1"), rw = dressed(pre, "RW1"), cold = dressed(pre, "C1"),
                sems = { { name = dressed(pre, "S1"), permits = p.sems[1] },
                         { name = dressed(pre, "S2"), permits = p.sems[2] } } }
  cfg.all_names = { cfg.locks[1], cfg.locks[2], cfg.locks[3], cfg.fair, cfg.rw,
                    cfg.sems[1].name, cfg.sems[2].name, cfg.cold }
  if focus == "notices" then           -- the fixed-lease clients' own name
    cfg.quiet = dressed(pre, "Q1")
    cfg.all_names[#cfg.all_names + 1] = cfg.quiet
  end
  local env = { topo = topo, log = log }
  -- A proxy in front of each data server (one server, every Redlock
  -- master), whose replies the proxy fault loses, delays or cuts.
  local proxies = {}
  if p.proxied then
    env.proxy_ctls = {}
    local urls = {}
    for i, srv in ipairs(topo.kind == "single" and { topo.srv } or topo.h.servers) do
      local port = helper.free_port()
      env.proxy_ctls[i] = ("%s/proxy%d.ctl"):format(dir, i)
      local f = assert(io.open(env.proxy_ctls[i], "w")); f:write("pass\n"); f:close()
      proxies[i] = spawn("proxy.lua", ("%s/proxy%d.out"):format(dir, i), port, srv.port,
                         env.proxy_ctls[i])
      helper.wait_for(function() return helper.listening(port) end, 5)
      urls[i] = ("redis://127.0.0.1:%d/0"):format(port)
    end
    cfg.conn = topo.kind == "single" and { url = urls[1] } or { servers = urls }
  end
  local cfg_file = dir .. "/config.lua"
  local f = assert(io.open(cfg_file, "w"))
  f:write("return ", common.encode(cfg), "\n")
  f:close()
  log{ ev = "round", w = "driver", t = t_start, k = p.k, kind = p.kind, lease = p.lease,
       masters = p.masters, proxied = p.proxied, seeds = p.seeds }

  local workers, all = {}, {}
  local function start_worker(i, s)
    local w = spawn("worker.lua", ("%s/w%d.%d.out"):format(dir, i, s), cfg_file, i, s)
    w.name = ("w%d.%d"):format(i, s)
    w.index = i
    workers[i] = w
    all[#all + 1] = w
    return w
  end
  for i, s in ipairs(p.seeds) do start_worker(i, s) end
  local monitor = spawn("monitor.lua", dir .. "/monitor.out", cfg_file)
  function env.pick_worker(n)
    local w = workers[n % #workers + 1]
    return w and w.alive() and w or nil
  end
  function env.killed(w, a)
    log{ ev = "kill", w = w.name, t = now() }
    if now() < cfg.stop_at - 3 then start_worker(w.index, a.respawn) end
  end

  local undos = {}
  local function run_undos(force)
    for i = #undos, 1, -1 do
      if force or now() >= undos[i].at then
        local u = table.remove(undos, i)
        pcall(u.fn)
      end
    end
  end
  local function sleep_until(t)
    while now() < t do
      run_undos(false)
      dlock.sleep(math.min(0.05, math.max(0, t - now())))
    end
  end
  local nfaults = 0
  for _, fa in ipairs(p.faults) do
    fa.name = dressed(pre, fa.name)       -- the round's lock names
    sleep_until(t_start + fa.t)
    if now() > cfg.stop_at - 1 then break end
    local t0 = now()
    local ok, rec, undo = pcall(faults[fa.kind], env, fa)
    local t1 = now()
    if not ok then
      log{ ev = "note", w = "driver", t = t0, what = "fault " .. fa.kind .. " failed",
           err = tostring(rec) }
    elseif not rec.skipped then
      nfaults = nfaults + 1
      rec.ev, rec.w, rec.kind, rec.t0, rec.t1 = "fault", "driver", fa.kind, t0, t1
      log(rec)
      if undo then undos[#undos + 1] = { at = t0 + (fa.dur or 0), fn = undo } end
    end
  end
  sleep_until(cfg.stop_at)
  sleep_until(math.max(now(), (function()
    local last = now()
    for _, u in ipairs(undos) do last = math.max(last, u.at) end
    return last
  end)()))
  run_undos(true)

  -- Workers finish their last operation and their deferred checks.
  local deadline = cfg.stop_at + cfg.lease_max + 25
  helper.wait_for(function()
    for _, w in ipairs(all) do if w.alive() then return false end end
    return true
  end, math.max(1, deadline - now()), 0.2)
  local hung = {}
  for _, w in ipairs(all) do
    if w.alive() then
      hung[#hung + 1] = w.name
      w.signal("CONT"); w.signal("KILL")
    end
  end
  monitor.signal("KILL")
  for _, x in ipairs(proxies) do x.signal("KILL") end
  for _, s in ipairs(topo.kind == "redlock" and topo.h.servers or topo.kind == "cluster"
      and topo.h.nodes or { topo.srv or topo.h.master }) do
    topology.rcli(s.port, "client", "unpause")
  end

  -- The merged history and its check.
  local records = {}
  local ls = io.popen("ls " .. q(dir))
  for file in ls:lines() do
    if file:match("%.log$") then
      for _, r in ipairs(common.read(dir .. "/" .. file)) do records[#records + 1] = r end
    end
  end
  ls:close()
  local nops = 0
  for _, r in ipairs(records) do if r.op_id then nops = nops + 1 end end
  local v = check.run(records, { t_start = t_start, lease = cfg.lease, lease_max = cfg.lease_max,
                                 quorum = topo.quorum, masters = p.masters,
                                 dead_slack = 8 + cfg.slack })
  for _, name in ipairs(hung) do
    v[#v + 1] = { kind = "hang", t = deadline, msg = name .. " did not finish its last call " ..
      "within the round's end + lease + 25 s (killed)" }
  end
  local crashed = {}
  for _, w in ipairs(all) do
    local out = helper.read_file(w.out) or ""
    if out:find("%S") then crashed[#crashed + 1] = w.name .. ": " .. out:sub(1, 300) end
  end
  return { dir = dir, t_start = t_start, nops = nops, nfaults = nfaults, violations = v, crashed = crashed,
           records = records }
end

-- ---- what a CI log needs to explain a violation ----------------------------------

-- The records around violation v: those of the holds it names, their
-- workers' other records (but held() answers of other holds), and the
-- driver's faults, from 3 s before the first to 1 s after the violation,
-- as short lines (the last 80) (the history itself stays on the
-- machine that ran it).
local function timeline(records, v, t_start)
  local hids, workers = {}, {}
  for hid in v.msg:gmatch("(w%d+%.%d+#%d+)") do
    hids[hid] = true
    workers[hid:match("^(w%d+%.%d+)")] = true
  end
  local function t_of(r) return r.t1 or r.t or r.t0 or 0 end
  local lo, hi = math.huge, -math.huge
  for _, r in ipairs(records) do
    if r.hid and hids[r.hid] then lo, hi = math.min(lo, t_of(r)), math.max(hi, t_of(r)) end
  end
  if lo == math.huge then              -- no hold named (a leftover, say): around v.t
    lo, hi = (v.t or 0) - 5, v.t or 0
    for _, r in ipairs(records) do if r.w then workers[r.w] = true end end
  end
  lo, hi = lo - 3, math.min(hi, v.t or hi) + 1
  local picked = {}
  for _, r in ipairs(records) do
    local t = t_of(r)
    local mine = r.hid and hids[r.hid]
    local near = t >= lo and t <= hi and (r.w == "driver" and r.ev == "fault" or
      workers[r.w] and not r.hid and r.ev ~= "held" and r.ev ~= "start")
    if mine or near then picked[#picked + 1] = r end
  end
  table.sort(picked, function(a, b) return t_of(a) < t_of(b) end)
  local lines, held_run = {}, nil
  for _, r in ipairs(picked) do
    local c = {}
    for k, x in pairs(r) do c[k] = x end
    for _, k in ipairs({ "t", "t0", "t1" }) do
      if type(c[k]) == "number" then c[k] = ("%.3f"):format(c[k] - t_start) end
    end
    local line = common.encode(c)
    -- runs of held() answers are one line each way
    if r.ev == "held" then
      local key = r.hid .. tostring(r.v)
      if held_run and held_run.key == key then
        held_run.n, held_run.last = held_run.n + 1, c.t
        lines[held_run.i] = ("held %s %s x%d from %s to %s"):format(r.hid, tostring(r.v),
          held_run.n, held_run.first, c.t)
        line = nil
      else
        held_run = { key = key, n = 1, first = c.t, last = c.t, i = #lines + 1 }
      end
    end
    if line then lines[#lines + 1] = line end
  end
  while #lines > 80 do table.remove(lines, 1) end      -- the last ones, nearest v
  return lines
end

-- ---- the run -------------------------------------------------------------------

store_srv = helper.start_redis()
local round_len = math.max(12, math.min(30, total / 4 - 10))
-- A replay (TORTURE_ROUND) of a round from a run of another length:
-- TORTURE_LEN = that run's round length (20 s for 120 s, 30 s from 160 s).
round_len = tonumber(os.getenv("TORTURE_LEN") or "") or round_len
local histories, operations, nfaults, nviolations = 0, 0, 0, 0
local failed = {}
local k = 0
while true do
  local left = total - (now() - run_start)
  local len = math.min(round_len, left - 10)
  if k > 0 and len < 10 then break end
  k = k + 1
  -- TORTURE_ROUND=k (with SEED and the run's TORTURE_SECONDS): replay
  -- round k of that run's plan again and again, to hunt its violation.
  local only = tonumber(os.getenv("TORTURE_ROUND") or "")
  local p = plan(only or k, math.max(len, 10))
  if only then p.k = k end
  local ok, r = pcall(run_round, p)
  if not ok then
    -- A topology that would not start is the machine's problem, not a
    -- violation: say so and go on with the next round.
    say("torture: round %d (%s): could not run: %s", k, p.kind, tostring(r))
  else
    histories = histories + 1
    operations = operations + r.nops
    nfaults = nfaults + r.nfaults
    nviolations = nviolations + #r.violations
    say("torture: round %d (%s, %d workers, lease %g%s): %d operations, %d faults, %d violations",
      k, p.kind, p.nworkers, p.lease, (p.masters and (", " .. p.masters .. " masters") or "") ..
      (p.proxied and ", proxied" or ""), r.nops, r.nfaults, #r.violations)
    for _, c in ipairs(r.crashed) do say("  worker output: %s", c) end
    if #r.violations > 0 then
      local lines = {}
      for i, x in ipairs(r.violations) do
        lines[i] = ("%s at %.3f s: %s"):format(x.kind, x.t - (r.t_start or 0), x.msg)
      end
      local rf = assert(io.open(r.dir .. "/report.txt", "w"))
      rf:write(("seed %d, round %d (%s)\n"):format(seed, k, p.kind), table.concat(lines, "\n"), "\n")
      rf:close()
      say("  first violation: %s: %s", r.violations[1].kind, r.violations[1].msg)
      say("  report: %s/report.txt", r.dir)
      say("  its timeline (s from the round's start):")
      for _, line in ipairs(timeline(r.records, r.violations[1], r.t_start)) do
        say("    %s", line)
      end
      failed[#failed + 1] = r.dir
    elseif not os.getenv("TORTURE_KEEP") then
      sh("rm -rf " .. q(r.dir))
    end
  end
end
for _, t in pairs(topos) do pcall(t.h.stop) end
store_srv.stop()
if #failed == 0 and not os.getenv("TORTURE_KEEP") then sh("rm -rf " .. q(root)) end
say("torture: %d histories, %d operations, %d faults, %d violations, seed %d",
  histories, operations, nfaults, nviolations, seed)
os.exit(nviolations > 0 and 1 or 0)
