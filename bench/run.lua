-- run.lua: `make bench` - dlock's benchmarks, against a throwaway loopback
-- redis-server started here, in one run (issue 5). Prints a markdown table.
--
--   Ceiling  redis-benchmark -c 1 round trips for PING and for EVALSHA of
--            dlock's own acquire script (as dlock.core.scripts() gives it, so
--            it cannot drift; checked against what dlock loads), and
--            build/bench/floor (bench/floor.c): the cheapest hiredis lock
--            cycle, SET NX PX + compare-and-delete, 2 round trips.
--   M1       uncontended: one process, acquire+release cycles/s, per-cycle
--            p50/p99, ratio to the floor, Redis CPU per cycle.
--   M2       contended: N = 2, 4, 8 processes on one lock, each doing a
--            read-modify-write of a file counter under it: critical
--            sections/s, Redis commands per critical section, lost updates,
--            handoff latency (from the releaser calling release() to a
--            different, already waiting process returning from acquire()),
--            how often the releaser re-takes it, Jain's fairness index.
--            Series "loop": holders retry at once; "step": they sleep 1 ms
--            after each release.
--   M3       watchdog scale: one client holds 10,000 locks (lease 3 s) for
--            15 s: none lost, renewal commands/s seen by the server, CPU.
--   M4       schedulers: N = 4 coroutines of one Lua state on one lock under
--            cqueues and under luv (bench/sched.lua), each holding it for
--            1 ms of work that yields to the loop, then stepping back 1 ms:
--            critical sections/s, handoff p50/p99, Jain's index.
--   M5       the other primitives beside the default lock, N = 4 processes,
--            1 ms step-back, as M2 measures it: a multi-lock over 2 names,
--            the write half of a read-write lock, a semaphore of 1 permit.
--   M6       the fair lock, as M2 (same N, same two series), against its
--            targets: Jain >= 0.95, the longest wait <= 3 x the median (of
--            acquires that found the lock held, in the middle 90% of the
--            window: not while the processes start, or exit), handoff p50 <= the p50 of
--            the round trips of the releases handed over (release() called
--            to release() returned, in the releasing process: the next
--            holder has the lock before its releaser hears back), <= 3
--            lock commands per critical section, and at N = 8 looping at
--            least the default lock's throughput. Beside each looping N,
--            build/bench/ring (bench/ring.c): N processes passing a byte
--            around a ring of pipes, a perfect FIFO with no Redis and no
--            lock, whose waits show what the machine's scheduler alone adds
--            to a queue of N (the target's floor on this machine).
-- M1 and M2 run beside bench/plainlock.lua (a hand-written SET NX lock over
-- LuaSocket) when LuaSocket is installed. Every figure is the median of REPS
-- runs. `--quick` (make bench BENCH_ARGS=--quick) finishes in under a minute.
local dlock = require "dlock"
local now, sleep = dlock.now, dlock.sleep

local QUICK, M3_LOCKS = false, nil
for i, a in ipairs(arg) do                -- --quick, --m3-locks N
  if a == "--quick" then QUICK = true end
  if a == "--m3-locks" then M3_LOCKS = assert(math.tointeger(tonumber(arg[i + 1])), "--m3-locks N") end
end
local CFG = QUICK
  and { reps = 3, secs = 0.5, m2_secs = 0.3, rb_n = 10000, m3_locks = 2000, m3_hold = 5, m7_secs = 1 }
  or  { reps = 3, secs = 2,   m2_secs = 2,   rb_n = 50000, m3_locks = 10000, m3_hold = 15, m7_secs = 3 }
CFG.m3_locks = M3_LOCKS or CFG.m3_locks
local M3_LEASE, NS, STEPBACK = 3, { 2, 4, 8 }, 0.001
local LUA = arg[-1] or "lua5.4"
local TMP = assert(os.getenv("DLOCK_TMP"), "run me with tools/with-tmp.sh")
local DIR = arg[0]:match("^(.*)/[^/]*$") or "."
local ROOT = DIR .. "/.."
local FLOOR = ROOT .. "/build/bench/floor"
local RING = ROOT .. "/build/bench/ring"
package.path = DIR .. "/?.lua;" .. package.path
local T0 = now()
local function loadavg() return (io.open("/proc/loadavg") or io.stdin):read("*l"):match("^(%S+)") or "?" end
local LOAD0 = loadavg()                   -- other work on the host skews everything

-- ---- small helpers ---------------------------------------------------------

local util = require "util"
local q, sh, readf = util.q, util.sh, util.readf

local function writef(path, s)            -- atomic: readers never see half
  local f = assert(io.open(path .. ".tmp", "wb"))
  f:write(s)
  f:close()
  assert(os.rename(path .. ".tmp", path))
end

local function wait_file(path, limit)
  local deadline = now() + limit
  while not readf(path) and now() < deadline do sleep(0.005) end
  return readf(path) ~= nil
end

local function median(t)
  local s = {}
  for i, v in ipairs(t) do s[i] = v end
  table.sort(s)
  if #s == 0 then return nil end
  return #s % 2 == 1 and s[(#s + 1) // 2] or (s[#s // 2] + s[#s // 2 + 1]) / 2
end

local function pct(sorted, p)
  if #sorted == 0 then return 0 / 0 end
  return sorted[math.min(#sorted, math.floor(#sorted * p) + 1)]
end

local function log(fmt, ...) io.stderr:write(("[%5.1fs] " .. fmt .. "\n"):format(now() - T0, ...)) end

-- ---- the server and an admin connection ------------------------------------

local URL = sh("sh " .. q(ROOT .. "/tools/redis-start.sh") .. " " .. q(TMP)):match("%S+")
assert(URL and URL:match("^redis://127%.0%.0%.1:"), "could not start a loopback redis-server")
local PORT = assert(tonumber(URL:match(":(%d+)/")))
local SERVER_PID = assert(tonumber(readf(("%s/redis-%d.pid"):format(TMP, PORT))))

-- The ceiling and M1 run with the server and the client pinned to one CPU:
-- on a small VM a cross-CPU wakeup can cost more than the whole loopback
-- round trip, and where the scheduler happens to put the two processes
-- would decide the result (5x swings between runs). On one CPU the figures
-- are stable and every microsecond of client or server work shows. M2 and
-- M3 run unpinned.
local CPU = (tonumber(sh("nproc 2>/dev/null"):match("%d+")) or 1) - 1
local PIN = os.execute("taskset -c 0 true >/dev/null 2>&1") and ("taskset -c %d "):format(CPU) or ""
local function pin_server(on)
  if PIN == "" then return end
  local cpus = on and tostring(CPU) or ("0-%d"):format(CPU)
  sh(("taskset -apc %s %d >/dev/null 2>&1"):format(cpus, SERVER_PID))
end

local have_socket, plain = pcall(require, "plainlock")
local admin
if have_socket then
  local conn = plain.resp("127.0.0.1", PORT)
  admin = function(...) return assert(conn:call(...)) end
else
  plain = nil
  admin = function(...)                  -- redis-cli prints raw replies to a pipe
    local args = {}
    for i, a in ipairs({ ... }) do args[i] = q(a) end
    local out = sh(("redis-cli -p %d %s"):format(PORT, table.concat(args, " ")))
    return math.tointeger(tonumber(out:match("^%s*(.-)%s*$"))) or out
  end
end

-- INFO commandstats -> { [cmd] = { calls = n, usec = n } }
local function cmdstats()
  local t = {}
  for cmd, calls, usec in admin("INFO", "commandstats"):gmatch("cmdstat_([%w_|]+):calls=(%d+),usec=(%d+)") do
    t[cmd] = { calls = tonumber(calls), usec = tonumber(usec) }
  end
  return t
end

-- The lock commands (FCALL, EVALSHA, EVAL, and SET for impl "plain" and
-- "floor", which send it themselves) between two cmdstats(): calls, usec.
-- (commandstats counts a script's own calls too, its SETs among them,
-- whose time is its script's already: dlock's are not counted again.)
local function lock_cmds(before, after, impl)
  local calls, usec = 0, 0
  local verbs = (impl == "plain" or impl == "floor") and { "set", "fcall", "evalsha", "eval" }
                or { "fcall", "evalsha", "eval" }
  for _, c in ipairs(verbs) do
    local x, y = before[c] or { calls = 0, usec = 0 }, after[c] or { calls = 0, usec = 0 }
    calls, usec = calls + y.calls - x.calls, usec + y.usec - x.usec
  end
  return calls, usec
end

-- ---- the acquire script, as dlock.core loads it ---------------------------

local ACQUIRE = require("dlock.core").scripts().acquire
writef(TMP .. "/acquire.lua", ACQUIRE)
local SHA = sh(("redis-cli -p %d -x SCRIPT LOAD < %s"):format(PORT, q(TMP .. "/acquire.lua"))):match("%x+")
do  -- with the cache flushed, a dlock client loads its scripts: ours must be one
  admin("SCRIPT", "FLUSH")
  local c = assert(dlock.connect(URL))
  local same = admin("SCRIPT", "EXISTS", SHA)
  c:close()
  assert(type(same) == "table" and same[1] == 1 or same == 1,
         "dlock.core.scripts().acquire is not what dlock loads")
end

-- ---- Ceiling and M1 --------------------------------------------------------

local function redis_benchmark(...)
  local out = sh((PIN .. "redis-benchmark -h 127.0.0.1 -p %d -c 1 -n %d --csv %s 2>/dev/null")
                 :format(PORT, CFG.rb_n, table.concat({ ... }, " ")))
  local rps, p50 = out:match('\n"[^"]*","([%d.]+)","[%d.]+","[%d.]+","([%d.]+)"')
  return assert(tonumber(rps), "redis-benchmark: " .. out), tonumber(p50) * 1000
end

-- One cycle-loop slice: adds cycles, seconds, latencies and the Redis
-- time it caused (INFO commandstats deltas) to acc.
local function cycles(cmd, acc, impl)
  local before = cmdstats()
  local n, el, p50, p99 = sh(cmd):match("(%d+) (%S+) (%S+) (%S+)")
  assert(n, "no result from: " .. cmd)
  local after = cmdstats()
  acc.n, acc.el = acc.n + tonumber(n), acc.el + tonumber(el)
  acc.p50[#acc.p50 + 1], acc.p99[#acc.p99 + 1] = tonumber(p50), tonumber(p99)
  local calls, usec = lock_cmds(before, after, impl)
  acc.calls, acc.usec = acc.calls + calls, acc.usec + usec
end

-- Each M1 run interleaves floor, dlock and plain in SLICES short slices
-- (order rotated), so that load from elsewhere on the host hits all alike.
local SLICES = QUICK and 2 or 4
local IMPLS = { "floor", "dlock", "labelled", "reentrant", plain and "plain" }
pin_server(true)
local R = { ping = {}, ping50 = {}, eval = {}, eval50 = {}, floor = {}, dlock = {}, labelled = {},
            reentrant = {}, plain = {} }
for rep = 1, CFG.reps do
  log("ceiling and M1, run %d/%d", rep, CFG.reps)
  local rps, p50 = redis_benchmark("PING")
  R.ping[rep], R.ping50[rep] = rps, p50
  rps, p50 = redis_benchmark("-r 100000000 EVALSHA", SHA, "2 'bench:{__rand_int__}'",
                             "'bench:{__rand_int__}:fence' owner owner 1 30000 0 0")
  R.eval[rep], R.eval50[rep] = rps, p50
  local acc = {}
  for _, impl in ipairs(IMPLS) do acc[impl] = { n = 0, el = 0, p50 = {}, p99 = {}, calls = 0, usec = 0 } end
  for s = 1, SLICES do
    for k = 0, #IMPLS - 1 do
      local impl = IMPLS[(s + k - 1) % #IMPLS + 1]
      local secs = CFG.secs / SLICES
      cycles(PIN .. (impl == "floor" and ("%s 127.0.0.1 %d %g"):format(q(FLOOR), PORT, secs)
             or ("%s %s m1 %s %s %g"):format(q(LUA), q(DIR .. "/worker.lua"), impl, URL, secs)),
             acc[impl], impl)
    end
  end
  for _, impl in ipairs(IMPLS) do
    local a = acc[impl]
    R[impl][rep] = { cps = a.n / a.el, p50 = median(a.p50), p99 = median(a.p99),
                     srv = a.calls > 0 and 2 * a.usec / a.calls or 0 / 0,   -- 2 commands a cycle
                     ratio = a.n / a.el / (acc.floor.n / acc.floor.el) }
  end
  log("  cycles/s: floor %.0f, dlock %.0f, plain %s", R.floor[rep].cps, R.dlock[rep].cps,
      plain and ("%.0f"):format(R.plain[rep].cps) or "-")
end
pin_server(false)
admin("FLUSHALL")

local function med(runs, field)
  local t = {}
  for i, r in ipairs(runs) do t[i] = r[field] end
  return median(t)
end

-- ---- M2 --------------------------------------------------------------------

local function jain(xs)
  local s, s2 = 0, 0
  for _, x in ipairs(xs) do s, s2 = s + x, s2 + x * x end
  return s2 > 0 and s * s / (#xs * s2) or 0
end

-- One contended run; returns its figures.
local function m2_run(impl, n, stepback, id, name)
  local base = ("%s/m2-%s"):format(TMP, id)
  local counter, go = base .. ".counter", base .. ".go"
  writef(counter, ("%012d"):format(0))
  local cmds = {}
  for i = 1, n do
    cmds[i] = ("%s %s m2 %s %s %s %s %s %s %s %g"):format(q(LUA), q(DIR .. "/worker.lua"),
      impl, URL, q(name or ("m2:" .. id)), q(counter), q(base .. "." .. i .. ".log"),
      q(base .. "." .. i .. ".ready"), q(go), stepback)
  end
  local before = cmdstats()
  local h = assert(io.popen(table.concat(cmds, " & ") .. " & wait"))
  for i = 1, n do wait_file(base .. "." .. i .. ".ready", 20) end
  local start = now() + 0.05                 -- the start barrier
  local stop = start + CFG.m2_secs
  writef(go, ("%.6f %.6f"):format(start, stop))
  h:read("*a")
  h:close()
  local cmds_used = lock_cmds(before, cmdstats(), impl)

  local holds, counts = {}, {}
  for i = 1, n do
    local s = assert(readf(base .. "." .. i .. ".log"), "M2 worker " .. i .. " wrote no log")
    counts[i] = assert(tonumber(s:match("count (%d+)")), "M2 worker " .. i .. " did not finish")
    for w, a, r, e in s:gmatch("(%S+) (%S+) (%S+) (%S+)\n") do
      holds[#holds + 1] = { p = i, w = tonumber(w), a = tonumber(a), r = tonumber(r), e = tonumber(e) }
    end
  end
  table.sort(holds, function(x, y) return x.a < y.a end)
  local handoffs, retakes, overlaps, waits, rtts = {}, 0, 0, {}, {}
  for k = 2, #holds do
    local prev, cur = holds[k - 1], holds[k]
    if cur.a < prev.r then overlaps = overlaps + 1 end     -- two holders at once
    -- found it held: waited (steady state only: not the first or last 5%
    -- of the window, while processes subscribe, queue up, or exit)
    local steady = cur.w > start + 0.05 * CFG.m2_secs and cur.w < stop - 0.05 * CFG.m2_secs
    if cur.w < prev.r and steady then
      waits[#waits + 1] = (cur.a - cur.w) * 1000
    end
    if cur.p == prev.p then
      retakes = retakes + 1
    elseif cur.w < prev.r then                             -- was waiting already
      handoffs[#handoffs + 1] = (cur.a - prev.r) * 1000
      rtts[#rtts + 1] = (prev.e - prev.r) * 1000           -- that release's round trip
    end
  end
  table.sort(handoffs)
  table.sort(rtts)
  table.sort(waits)
  local total = 0
  for _, c in ipairs(counts) do total = total + c end
  log("  %s: %d holds, per process %s", id, total, table.concat(counts, " "))
  return { cps = total / CFG.m2_secs, cmds = cmds_used / math.max(total, 1), lost = total - tonumber(readf(counter)),
           overlaps = overlaps, h50 = pct(handoffs, 0.5), h99 = pct(handoffs, 0.99),
           retake = #holds > 1 and retakes / (#holds - 1) or 0, jain = jain(counts),
           rtt50 = pct(rtts, 0.5), wmed = pct(waits, 0.5), w999 = pct(waits, 0.999),
           wmax = waits[#waits] or 0 / 0, handoffs = handoffs }
end

-- The token ring (bench/ring.c) for N processes: the median of the
-- members' median and p99.9 waits, and the longest wait of any member.
local function ring_run(n)
  local bin = assert(io.open(RING), RING .. " is missing: run me with `make bench`")
  bin:close()
  local r = { wmed = {}, w999 = {}, wmax = 0 }
  for k, med_, p999, max in sh(("%s %d %g"):format(q(RING), n, CFG.m2_secs)):gmatch("(%d+) (%S+) (%S+) (%S+)") do
    assert(tonumber(k) > 0)
    r.wmed[#r.wmed + 1], r.w999[#r.w999 + 1] = tonumber(med_), tonumber(p999)
    r.wmax = math.max(r.wmax, tonumber(max))
  end
  assert(#r.wmed == n, "bench/ring: not every member reported")
  return { wmed = median(r.wmed), w999 = median(r.w999), wmax = r.wmax }
end

local SERIES = { { "loop", 0 }, { "step", STEPBACK } }
local RINGS = {}                              -- RINGS[n] = { runs }
for _, n in ipairs(NS) do RINGS[n] = {} end
local M2 = {}                                 -- M2[impl][series][n] = { runs }
for rep = 1, CFG.reps do                      -- (impl "fair": the fair lock, M6)
  log("M2 and M6, run %d/%d", rep, CFG.reps)
  for _, impl in ipairs({ "dlock", "fair", plain and "plain" }) do
    M2[impl] = M2[impl] or {}
    for _, s in ipairs(SERIES) do
      M2[impl][s[1]] = M2[impl][s[1]] or {}
      for _, n in ipairs(NS) do
        local runs = M2[impl][s[1]][n] or {}
        M2[impl][s[1]][n] = runs
        runs[rep] = m2_run(impl, n, s[2], ("%s-%s-%d-%d"):format(impl, s[1], n, rep))
      end
    end
  end
  for _, n in ipairs(NS) do RINGS[n][rep] = ring_run(n) end
end

-- ---- M5: the other primitives, beside the default lock ---------------------

local M5 = { multi = {}, write = {}, sem = {} } -- M5[kind] = { runs }
for rep = 1, CFG.reps do
  log("M5 multi-lock and rwlock, run %d/%d", rep, CFG.reps)
  local id = ("multi-%d"):format(rep)
  M5.multi[rep] = m2_run("dlock", 4, STEPBACK, id, ("m5:%s:b,m5:%s:a"):format(id, id))
  id = ("write-%d"):format(rep)
  M5.write[rep] = m2_run("dlock", 4, STEPBACK, id, ("rww:m5:%s"):format(id))
  id = ("sem-%d"):format(rep)
  M5.sem[rep] = m2_run("dlock", 4, STEPBACK, id, ("sem:m5:%s"):format(id))
end

-- ---- M3 --------------------------------------------------------------------

-- Renewal rate from (t, calls) samples. Renewal passes show up as jumps.
-- "steady": the calls of passes 3..m over the time from pass 2 to pass m
-- (skips the one-off catch-up of locks acquired over more than lease/6,
-- and any edge effect of where the window falls); "window": all calls
-- over the whole window.
local function renew_rate(samples)
  local passes, inpass = {}, false
  for i = 2, #samples do
    local d = samples[i].c - samples[i - 1].c
    if d > 0 and inpass then
      passes[#passes].calls = passes[#passes].calls + d
    elseif d > 0 then
      passes[#passes + 1] = { t = samples[i].t, calls = d }
    end
    inpass = d > 0
  end
  local a, b = samples[1], samples[#samples]
  local window = (b.c - a.c) / (b.t - a.t)
  if #passes < 4 then return window, window, #passes end
  local calls = 0
  for i = 3, #passes do calls = calls + passes[i].calls end
  return calls / (passes[#passes].t - passes[2].t), window, #passes
end

local M3 = {}
for rep = 1, CFG.reps do
  log("M3, run %d/%d: %d locks for %g s", rep, CFG.reps, CFG.m3_locks, CFG.m3_hold)
  local base, prefix = ("%s/m3-%d"):format(TMP, rep), ("m3r%d:"):format(rep)
  local h = assert(io.popen(("%s %s m3 %s %d %g %s %s %s %s"):format(q(LUA),
    q(DIR .. "/worker.lua"), URL, CFG.m3_locks, M3_LEASE, prefix,
    q(base .. ".ready"), q(base .. ".stop"), q(base .. ".result"))))
  assert(wait_file(base .. ".ready", 120), "M3 worker did not get its locks")
  local function scripts()                      -- FCALL and EVALSHA: calls, usec
    local t, calls, usec = cmdstats(), 0, 0
    for _, c in ipairs({ "fcall", "evalsha" }) do
      calls, usec = calls + (t[c] or { calls = 0 }).calls, usec + (t[c] or { usec = 0 }).usec
    end
    return calls, usec
  end
  local function calls() return (scripts()) end
  local _, usec0 = scripts()
  local samples, t0 = { { t = now(), c = calls() } }, now()
  while now() < t0 + CFG.m3_hold do
    sleep(0.02)
    samples[#samples + 1] = { t = now(), c = calls() }
  end
  local usec = select(2, scripts()) - usec0
  local renewed = CFG.m3_locks * (now() - t0) / (M3_LEASE / 3)   -- holds renewed
  local live = admin("EVAL", "return #redis.call('keys', ARGV[1])", 0, prefix .. "{*}")
  writef(base .. ".stop", "1")
  h:read("*a")
  h:close()
  local held, lost, cpu, wall, rss = assert(readf(base .. ".result")):match("(%d+) (%d+) (%S+) (%S+) (%d+)")
  local rate, window, passes = renew_rate(samples)
  log("  renewals/s %.1f steady, %.1f over the window, %d passes; held %s, lost %s, CPU %.2f s",
      rate, window, passes, held, lost, tonumber(cpu))
  M3[rep] = { rate = rate, window = window, passes = passes, cpu = tonumber(cpu) / tonumber(wall),
              held = tonumber(held), lost = tonumber(lost), live = tonumber(live),
              rss = tonumber(rss) / 1024, srv = usec / renewed }
end

-- ---- M7: capacity ----------------------------------------------------------
-- M7_PROCS processes, each cycling over M7_LOCKS locks of its own as fast as
-- it can, against the one redis-server (unpinned): lock cycles/s at
-- saturation, and Redis CPU per cycle, both from INFO commandstats and from
-- the server process's own CPU time (/proc: what a Redis core really
-- spends, connections and replies included). The server's share of one
-- core over the run says whether Redis was the limit (near 1.0) or the
-- clients were (they share the machine's other core).
local M7_PROCS, M7_LOCKS = 8, 1000
local HZ = tonumber(sh("getconf CLK_TCK"):match("%d+")) or 100
local function server_cpu()                   -- utime + stime, s
  local rest = assert(readf(("/proc/%d/stat"):format(SERVER_PID))):match("%) (.*)$")
  local f = {}
  for x in rest:gmatch("%S+") do f[#f + 1] = x end
  return (tonumber(f[12]) + tonumber(f[13])) / HZ
end
local function m7_run(impl, rep)
  local before, c0, t0 = cmdstats(), server_cpu(), now()
  local hs = {}
  for i = 1, M7_PROCS do
    local tag = ("m7r%d%s%d"):format(rep, impl, i)
    hs[i] = assert(io.popen(impl == "floor"
      and ("%s 127.0.0.1 %d %g %d %s"):format(q(FLOOR), PORT, CFG.m7_secs, M7_LOCKS, tag)
      or ("%s %s m7 %s %d %s %g"):format(q(LUA), q(DIR .. "/worker.lua"), URL, M7_LOCKS,
                                        q(tag .. ":"), CFG.m7_secs)))
  end
  local n, cps = 0, 0
  for i = 1, M7_PROCS do
    local out = hs[i]:read("*a")
    hs[i]:close()
    local c, e = out:match("^(%d+) (%S+)")
    assert(c, "M7 " .. impl .. " process " .. i .. " printed no result")
    n, cps = n + tonumber(c), cps + tonumber(c) / tonumber(e)
  end
  local cpu, wall = server_cpu() - c0, now() - t0
  local calls, usec = lock_cmds(before, cmdstats(), impl)
  admin("FLUSHALL")
  return { cps = cps, srv = calls > 0 and 2 * usec / calls or 0 / 0,
           cpu = cpu * 1e6 / n, busy = cpu / wall }
end
local M7 = { dlock = {}, floor = {} }
for rep = 1, CFG.reps do
  log("M7 capacity, run %d/%d: %d processes x %d locks", rep, CFG.reps, M7_PROCS, M7_LOCKS)
  for _, impl in ipairs({ "floor", "dlock" }) do
    M7[impl][rep] = m7_run(impl, rep)
    log("  %s: %.0f cycles/s, Redis %.2f us (commandstats) / %.2f us (CPU) per cycle, busy %.2f",
        impl, M7[impl][rep].cps, M7[impl][rep].srv, M7[impl][rep].cpu, M7[impl][rep].busy)
  end
end

-- ---- M4 --------------------------------------------------------------------

local M4 = {}                                 -- M4[kind] = { runs }
for _, kind in ipairs({ "cqueues", "luv" }) do
  local ok = os.execute(("%s -e 'require %q' 2>/dev/null"):format(q(LUA), kind))
  if ok then
    M4[kind] = {}
    for rep = 1, CFG.reps do
      log("M4 %s, run %d/%d", kind, rep, CFG.reps)
      local out = sh(("%s %s %s %s 4 %g"):format(q(LUA), q(DIR .. "/sched.lua"), URL, kind, CFG.m2_secs))
      local count, j, h50, h99 = out:match("count (%d+) jain (%S+) h50 (%S+) h99 (%S+)")
      assert(count, "bench/sched.lua: " .. out)
      M4[kind][rep] = { cps = tonumber(count) / CFG.m2_secs, jain = tonumber(j),
                        h50 = tonumber(h50), h99 = tonumber(h99) }
    end
  end
end

-- ---- the table -------------------------------------------------------------

local rows = {}
local function row(measure, v, p, target) rows[#rows + 1] = { measure, v, p or "", target or "" } end
local function verdict(ok) return ok and "reached" or "not reached" end
local function f0(x) return x ~= x and "-" or ("%.0f"):format(x) end
local function f2(x) return x ~= x and "-" or ("%.2f"):format(x) end
local PL = plain and "plain" or nil
local function pv(fmt) return PL and fmt(PL) or "skipped (no lua-socket)" end

row("Ceiling: PING, redis-benchmark -c 1: round trips/s (p50 µs)",
    ("%s (%s)"):format(f0(median(R.ping)), f0(median(R.ping50))))
row("Ceiling: EVALSHA dlock acquire script, redis-benchmark -c 1: calls/s (p50 µs)",
    ("%s (%s)"):format(f0(median(R.eval)), f0(median(R.eval50))))
row("Floor: hiredis SET NX PX + compare-and-delete, 2 round trips: cycles/s (p50 / p99 µs)",
    ("%s (%s / %s)"):format(f0(med(R.floor, "cps")), f0(med(R.floor, "p50")), f0(med(R.floor, "p99"))))
row("Floor: Redis CPU per cycle (µs, INFO commandstats)", f2(med(R.floor, "srv")))

local d_cps, d_ratio = med(R.dlock, "cps"), med(R.dlock, "ratio")
local p_cps = PL and med(R.plain, "cps")
row("M1 uncontended: acquire+release cycles/s", f0(d_cps), pv(function(i) return f0(med(R[i], "cps")) end),
    ("≥ 0.9 × floor and ≥ plain: %s"):format(verdict(d_ratio >= 0.9 and (not p_cps or d_cps >= p_cps))))
row("M1 ratio to the floor (paired per run)", f2(d_ratio), pv(function(i) return f2(med(R[i], "ratio")) end),
    ("≥ 0.90: %s"):format(verdict(d_ratio >= 0.9)))
row("M1 cycle latency p50 / p99 (µs)", ("%s / %s"):format(f0(med(R.dlock, "p50")), f0(med(R.dlock, "p99"))),
    pv(function(i) return ("%s / %s"):format(f0(med(R[i], "p50")), f0(med(R[i], "p99"))) end))
row("M1 Redis CPU per cycle (µs, INFO commandstats)", f2(med(R.dlock, "srv")),
    pv(function(i) return f2(med(R[i], "srv")) end))
local l_ratio = med(R.labelled, "cps") / d_cps
row("M1 with connect{ label = ... }: cycles/s (ratio to M1; the label is set once per connection)",
    ("%s (%s)"):format(f0(med(R.labelled, "cps")), f2(l_ratio)), "",
    ("≥ 0.95 (no cost on the lock path): %s"):format(verdict(l_ratio >= 0.95)))

local r_ratio = med(R.reentrant, "cps") / d_cps
row("M1-reentrant (acquire, 3 reentries, 4 releases): cycles/s (ratio to M1)",
    ("%s (%s)"):format(f0(med(R.reentrant, "cps")), f2(r_ratio)), "",
    ("reentries without a round trip, ≥ 0.8: %s"):format(verdict(r_ratio >= 0.8)))
row("M1-reentrant Redis CPU per cycle (µs, INFO commandstats)", f2(med(R.reentrant, "srv")))

row(("M7 capacity, %d processes × %d locks each: lock cycles/s (floor)"):format(M7_PROCS, M7_LOCKS),
    ("%s (%s)"):format(f0(med(M7.dlock, "cps")), f0(med(M7.floor, "cps"))))
row("M7 Redis CPU per cycle, µs: INFO commandstats / server process (floor)",
    ("%s / %s (%s / %s)"):format(f2(med(M7.dlock, "srv")), f2(med(M7.dlock, "cpu")),
                                 f2(med(M7.floor, "srv")), f2(med(M7.floor, "cpu"))))
row("M7 redis-server busy, share of one core over the run (floor)",
    ("%s (%s)"):format(f2(med(M7.dlock, "busy")), f2(med(M7.floor, "busy"))), "",
    "near 1.00: Redis is the limit, not the clients")

local lost_d, lost_p, over_d, over_p = 0, 0, 0, 0
for _, s in ipairs(SERIES) do
  for _, n in ipairs(NS) do
    local label = ("M2 N=%d %s"):format(n, s[1] == "loop" and "loop at once" or "1 ms step-back")
    local d, p = M2.dlock[s[1]][n], PL and M2.plain[s[1]][n]
    local function pm(fmt) return pv(function() return fmt(p) end) end
    for _, r in ipairs(d) do lost_d, over_d = lost_d + r.lost, over_d + r.overlaps end
    for _, r in ipairs(p or {}) do lost_p, over_p = lost_p + r.lost, over_p + r.overlaps end
    local function ms(runs) return ("%.3f / %.3f"):format(med(runs, "h50"), med(runs, "h99")) end
    row(label .. ": critical sections/s", f0(med(d, "cps")), pm(function(r) return f0(med(r, "cps")) end))
    row(label .. ": Redis lock commands per critical section", f2(med(d, "cmds")),
        pm(function(r) return f2(med(r, "cmds")) end))
    local t = ""
    if n == 4 and s[1] == "step" then t = ("p99 < 2 ms: %s"):format(verdict(med(d, "h99") < 2)) end
    local function rt(r) return ("%.0f %%"):format(100 * med(r, "retake")) end
    row(label .. ": handoff p50 / p99 (ms)", ms(d), pm(ms), t)
    row(label .. ": releaser re-takes its lock", rt(d), pm(rt))
    row(label .. ": Jain fairness", f2(med(d, "jain")), pm(function(r) return f2(med(r, "jain")) end),
        ("≥ 0.9: %s"):format(verdict(med(d, "jain") >= 0.9)))
    row(label .. ": longest wait of an acquire that found it held (ms)", ("%.1f"):format(med(d, "wmax")),
        pm(function(r) return ("%.1f"):format(med(r, "wmax")) end),
        ("≤ 50 ms (the default lock's starvation bound): %s"):format(verdict(med(d, "wmax") <= 50)))
  end
end
row("M2 lost updates (overlapping holds), all runs", ("%d (%d)"):format(lost_d, over_d),
    pv(function() return ("%d (%d)"):format(lost_p, over_p) end), ("0: %s"):format(verdict(lost_d == 0)))

for _, kind in ipairs({ "cqueues", "luv" }) do
  local label = ("M4 N=4 coroutines of one state, %s, 1 ms held and 1 ms step-back"):format(kind)
  local runs = M4[kind]
  if runs then
    row(label .. ": critical sections/s", f0(med(runs, "cps")))
    row(label .. ": handoff p50 / p99 (ms)", ("%.3f / %.3f"):format(med(runs, "h50"), med(runs, "h99")))
    row(label .. ": Jain fairness", f2(med(runs, "jain")))
  else
    row(label, ("skipped (no %s)"):format(kind))
  end
end

local M5_LABEL = { multi = "M5 multi-lock, 2 names, N=4, 1 ms step-back",
                  write = "M5 rwlock write half, N=4, 1 ms step-back",
                  sem = "M5 semaphore of 1 permit, N=4, 1 ms step-back" }
for _, kind in ipairs({ "multi", "write", "sem" }) do
  local runs = M5[kind]
  local label = M5_LABEL[kind]
  local lost, over = 0, 0
  for _, r in ipairs(runs) do lost, over = lost + r.lost, over + r.overlaps end
  row(label .. ": critical sections/s", f0(med(runs, "cps")))
  row(label .. ": Redis lock commands per critical section", f2(med(runs, "cmds")))
  row(label .. ": handoff p50 / p99 (ms)", ("%.3f / %.3f"):format(med(runs, "h50"), med(runs, "h99")))
  row(label .. ": Jain fairness", f2(med(runs, "jain")))
  row(label .. ": lost updates (overlapping holds), all runs", ("%d (%d)"):format(lost, over), nil,
      ("0: %s"):format(verdict(lost == 0 and over == 0)))
end

local lost6, over6 = 0, 0
for _, s in ipairs(SERIES) do
  for _, n in ipairs(NS) do
    local label = ("M6 fair lock, N=%d %s"):format(n, s[1] == "loop" and "loop at once" or "1 ms step-back")
    local runs = M2.fair[s[1]][n]
    for _, r in ipairs(runs) do lost6, over6 = lost6 + r.lost, over6 + r.overlaps end
    local cps, cmds, jn = med(runs, "cps"), med(runs, "cmds"), med(runs, "jain")
    local h50, rtt, wmax, wmed = med(runs, "h50"), med(runs, "rtt50"), med(runs, "wmax"), med(runs, "wmed")
    local ok = { cmds <= 3, jn >= 0.95, wmax <= 3 * wmed, h50 <= rtt }
    row(label .. ": critical sections/s", f0(cps))
    row(label .. ": Redis lock commands per critical section", f2(cmds), nil, ("≤ 3: %s"):format(verdict(ok[1])))
    row(label .. ": Jain fairness", f2(jn), nil, ("≥ 0.95: %s"):format(verdict(ok[2])))
    row(label .. ": wait of acquires that found it held, median / p99.9 / max (ms)",
        ("%.3f / %.3f / %.3f"):format(wmed, med(runs, "w999"), wmax), nil,
        ("max ≤ 3 × median: %s (max = %.1f × median)"):format(verdict(ok[3]), wmax / wmed))
    if s[1] == "loop" then
      local ring = RINGS[n]
      local rmed, rmax = med(ring, "wmed"), med(ring, "wmax")
      row(("M6 machine floor, N=%d: a FIFO ring of pipes, no Redis, no lock: wait median / p99.9 / max (ms)"):format(n),
          ("%.3f / %.3f / %.3f"):format(rmed, med(ring, "w999"), rmax), nil,
          ("max = %.1f × median: the scheduler's own stalls"):format(rmax / rmed))
    end
    row(label .. ": handoff p50 / round trip p50 of those releases (ms)", ("%.3f / %.3f"):format(h50, rtt), nil,
        ("handoff ≤ 1 round trip: %s"):format(verdict(ok[4])))
    if n == 8 and s[1] == "loop" then
      local base = med(M2.dlock.loop[8], "cps")
      row(label .. ": throughput against the default lock's (M2)", ("%s / %s"):format(f0(cps), f0(base)), nil,
          ("≥ default: %s"):format(verdict(cps >= base)))
    end
  end
end
row("M6 fair lock lost updates (overlapping holds), all runs", ("%d (%d)"):format(lost6, over6), nil,
    ("0: %s"):format(verdict(lost6 == 0 and over6 == 0)))

local n3 = CFG.m3_locks
local want = (n3 / 100) / (M3_LEASE / 3)
local rate, cpu = med(M3, "rate"), med(M3, "cpu")
local ok3 = true
for _, r in ipairs(M3) do ok3 = ok3 and r.held == n3 and r.live == n3 and r.lost == 0 end
row(("M3 %d locks, lease %g s, %g s: held at the end (client / server), lost"):format(n3, M3_LEASE, CFG.m3_hold),
    ("%d / %d, %d"):format(med(M3, "held"), med(M3, "live"), med(M3, "lost")), nil,
    ("all held, 0 lost in every run: %s"):format(verdict(ok3)))
row("M3 renewal commands/s seen by the server (FCALL): steady (whole window; passes)",
    ("%.1f (%.1f; %d)"):format(rate, med(M3, "window"), med(M3, "passes")), nil,
    ("≤ %g/s (2%% sampling tolerance): %s"):format(want, verdict(rate <= want * 1.02)))
row("M3 CPU of the holding process (share of one core)", ("%.1f %%"):format(100 * cpu), nil,
    ("≤ 10 %%: %s"):format(verdict(cpu <= 0.10)))
row("M3 RSS of the holding process at the end (MB; per hold, bytes)",
    ("%.1f (%.0f)"):format(med(M3, "rss"), med(M3, "rss") * 1048576 / n3))
row("M3 Redis CPU per renewed hold (µs, INFO commandstats)", f2(med(M3, "srv")))

local ver = sh("redis-server --version"):match("v=(%S+)") or "?"
local cores = sh("nproc 2>/dev/null"):match("%d+") or "?"
local out = {
  ("dlock bench%s: redis-server %s on 127.0.0.1, %s cores, %s; median of %d runs; " ..
   "M1 %g s, M2 %g s per run; ceiling and M1 %s; plain Lua = bench/plainlock.lua. " ..
   "Took %.0f s; load average %s before, %s after."):format(
    QUICK and " --quick" or "", ver, cores, os.date("%Y-%m-%d %H:%M"), CFG.reps,
    CFG.secs, CFG.m2_secs, PIN ~= "" and ("with server and client pinned to CPU " .. CPU) or "unpinned (no taskset)",
    now() - T0, LOAD0, loadavg()),
  "",
  "| measure | dlock (or ceiling) | plain Lua | design goal |",
  "|---|---|---|---|",
}
for _, r in ipairs(rows) do out[#out + 1] = "| " .. table.concat(r, " | ") .. " |" end
local text = table.concat(out, "\n") .. "\n"
io.write(text)
os.execute("mkdir -p " .. q(ROOT .. "/build/bench"))
local f = io.open(ROOT .. "/build/bench/results" .. (QUICK and "-quick" or "") .. ".md", "wb")
if f then f:write(text) f:close() end

-- ---- plots (bench/plots.gp, with gnuplot when it is installed) --------------
-- handoff-IMPL.dat: every handoff latency (ms) of the M2 step series at
-- N = 4, over all runs, sorted, with its cumulative fraction; fairness.dat:
-- N, then Jain's index of the default lock and the fair lock, looping and
-- stepping back (medians of the runs), then their longest waits (ms).
local ABS = sh("cd " .. q(ROOT) .. " && pwd"):gsub("%s+$", "")   -- gnuplot cds
local PLOTS = ABS .. "/build/bench" .. (QUICK and "/quick" or "")
os.execute("mkdir -p " .. q(PLOTS))
for _, impl in ipairs({ "dlock", "fair", plain and "plain" }) do
  local all = {}
  for _, r in ipairs(M2[impl].step[4]) do
    for _, h in ipairs(r.handoffs) do all[#all + 1] = h end
  end
  table.sort(all)
  local lines = {}
  for i, h in ipairs(all) do lines[i] = ("%.4f %.5f"):format(h, i / #all) end
  writef(PLOTS .. "/handoff-" .. impl .. ".dat", table.concat(lines, "\n") .. "\n")
end
local fl = {}
for _, n in ipairs(NS) do
  local m = function(impl, s, field) return med(M2[impl][s][n], field) end
  fl[#fl + 1] = ("%d %.3f %.3f %.3f %.3f %.1f %.1f"):format(n, m("dlock", "loop", "jain"),
    m("fair", "loop", "jain"), m("dlock", "step", "jain"), m("fair", "step", "jain"),
    m("dlock", "loop", "wmax"), m("fair", "loop", "wmax"))
end
writef(PLOTS .. "/fairness.dat", table.concat(fl, "\n") .. "\n")
if sh("command -v gnuplot") ~= "" then
  os.remove(PLOTS .. "/handoff.svg")
  sh(("gnuplot -e %s %s 2>&1"):format(q(("plain=%d; cd '%s'"):format(plain and 1 or 0, PLOTS)),
     q(ABS .. "/bench/plots.gp")))
  log(readf(PLOTS .. "/handoff.svg") and "plots: %s/handoff.svg, fairness.svg"
      or "plots: gnuplot failed; data in %s/*.dat", PLOTS)
else
  log("plots: no gnuplot (Debian: gnuplot-nox); data in %s/*.dat", PLOTS)
end
