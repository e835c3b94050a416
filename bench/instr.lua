-- instr.lua: Redis's own work per lock cycle, counted, not timed.
--
-- `make bench` times Redis (INFO commandstats), and on a small VM those
-- figures swing by a third between runs: what a command costs there
-- depends on what the caches kept while the server slept. This counts the
-- instructions redis-server runs inside processCommand (each command's
-- parsing, lookup and run, scripts and their redis.call()s included;
-- not the socket reads and writes around it) under valgrind's callgrind.
-- The count does not move between runs, so a change to a script shows as
-- the instructions it saves, even when it saves 2%.
--   make bench-instr          (sh tools/with-tmp.sh lua5.4 bench/instr.lua [N])
-- Rows, per uncontended acquire + release cycle (bench/worker.lua count):
--   floor      SET NX PX + compare-and-delete script (bench/floor.c's)
--   plain      bench/plainlock.lua (if lua-socket is there)
--   redispy    redis-py's Lock: SET NX PX + its release script (bench/anchors.lua)
--   redisson   Redisson's RLock: its lock and unlock scripts, the unlock
--              latch deleted after (bench/anchors.lua)
--   redisson-fair  Redisson's RFairLock: its fair lock and unlock scripts
--              (queue list, deadline zset, client time), the unlock latch
--              deleted after (bench/anchors.lua)
--   dlock      client:lock
--   reentrant  client:lock: acquire, 3 reentries, 4 releases
--   fair       client:fair_lock
--   write      client:rwlock(name).write
--   read       client:rwlock(name).read
--   sem        client:semaphore(name, 1): acquire, release
-- and per renewed hold: one client holding 1,000 locks (lease 3 s) while
-- its watchdog renews them (bench/worker.lua m3).
-- Each row gets a server of its own; the worker's connect and its first
-- 20 cycles (loading scripts, and the first run of each) are not counted:
-- only the N cycles after them, on the same connection.
local dlock = require "dlock"
local now, sleep = dlock.now, dlock.sleep

local N = tonumber(arg[1]) or 2000
local LUA = arg[-1] or "lua5.4"
local TMP = assert(os.getenv("DLOCK_TMP"), "run me with tools/with-tmp.sh")
local DIR = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = DIR .. "/?.lua;" .. package.path

local util = require "util"
local q, sh, readf, writef = util.q, util.sh, util.readf, util.writef

if not sh("command -v callgrind_control"):match("callgrind_control") then
  io.stderr:write("bench-instr: needs valgrind (sudo apt-get install -y valgrind)\n")
  os.exit(1)
end

-- A redis-server under callgrind on a free loopback port, counting only
-- inside processCommand. Returns its port, pid and output file.
local seq = 0
local function start()
  seq = seq + 1
  for _ = 1, 20 do
    local port = 10000 + math.random(0, 22767)
    local out = ("%s/callgrind-%d.out"):format(TMP, seq)
    local pid = tonumber(sh(("valgrind --tool=callgrind --toggle-collect=processCommand " ..
      "--callgrind-out-file=%s redis-server --port %d --bind 127.0.0.1 --save '' " ..
      "--appendonly no --dir %s >%s/callgrind-%d.log 2>&1 & echo $!"):format(
        q(out), port, q(TMP), q(TMP), seq)):match("%d+"))
    local pf = assert(io.open(("%s/instr-%d.pid"):format(TMP, pid), "w"))   -- with-tmp.sh stops it
    pf:write(pid, "\n")
    pf:close()
    local deadline = now() + 30
    while now() < deadline do
      if sh(("redis-cli -p %d ping 2>/dev/null"):format(port)):match("PONG") then
        return port, pid, out
      end
      sleep(0.1)
    end
    os.execute(("kill -9 %d 2>/dev/null"):format(pid))
  end
  error("could not start redis-server under callgrind")
end

-- Stop the server and read the instructions it counted since the zeroing.
local function stop(port, pid, out)
  sh(("redis-cli -p %d shutdown nosave >/dev/null 2>&1"):format(port))
  local deadline = now() + 60
  while os.execute(("kill -0 %d 2>/dev/null"):format(pid)) and now() < deadline do sleep(0.1) end
  local s = readf(out) or ""
  return tonumber(s:match("\ntotals: (%d+)") or s:match("\nsummary: (%d+)"))
end

-- How many times a callgrind dump saw function fn called (the "calls="
-- line under each "cfn=" naming it; a name is given once, with its
-- number, at its first "fn=" or "cfn=", and by number after that).
local function calls_to(path, fn)
  local s, id, n, hit = readf(path) or "", nil, 0, false
  for line in s:gmatch("[^\n]+") do
    local c, cid, name = line:match("^(c?)fn=%((%d+)%)%s*(.*)$")
    if cid then
      if name == fn then id = cid end
      hit = c == "c" and cid == id
    elseif hit then
      local k = line:match("^calls=(%d+)")
      if k then n, hit = n + tonumber(k), false end
    end
  end
  return n
end

local have_plain = pcall(require, "plainlock")
local rows = {}

for _, impl in ipairs({ "floor", "plain", "redispy", "redisson", "redisson-fair", "dlock", "reentrant",
                         "fair", "write", "read", "sem" }) do
  if impl ~= "plain" or have_plain then
    local port, pid, out = start()
    local url = ("redis://127.0.0.1:%d/0"):format(port)
    -- the worker connects and warms up (scripts loaded, each run once),
    -- then runs the N counted cycles on the same connection
    local ready, go = ("%s/count-%d.ready"):format(TMP, pid), ("%s/count-%d.go"):format(TMP, pid)
    local w = io.popen(("%s %s/worker.lua count %s %s %d %s %s 2>&1"):format(
      q(LUA), q(DIR), q(impl), q(url), N, q(ready), q(go)))
    local deadline = now() + 120
    while not readf(ready) and now() < deadline do sleep(0.05) end
    assert(readf(ready), impl .. ": the count worker did not warm up")
    sh(("callgrind_control -z %d >/dev/null 2>&1"):format(pid))
    writef(go, "1")
    local wout = w:read("a")
    assert(w:close(), impl .. ": the count worker failed: " .. wout)
    local total = stop(port, pid, out)
    rows[#rows + 1] = { impl, total / N }
    io.stderr:write(("%s: %d cycles, %d instructions\n"):format(impl, N, total))
  end
end

-- Renewals: holds renewed = FCALL and EVALSHA calls in the window x 100 (the
-- watchdog renews up to 100 holds per call; 1,000 locks on one server).
do
  local port, pid, out = start()
  local url = ("redis://127.0.0.1:%d/0"):format(port)
  local ready, stopf, result = TMP .. "/m3.ready", TMP .. "/m3.stop", TMP .. "/m3.result"
  local w = io.popen(("%s %s/worker.lua m3 %s 1000 3 instr %s %s %s 2>&1"):format(
    q(LUA), q(DIR), q(url), q(ready), q(stopf), q(result)))
  local deadline = now() + 300
  while not readf(ready) and now() < deadline do sleep(0.1) end
  assert(readf(ready), "the m3 worker did not get its locks")
  sleep(1.5)                                     -- past the first pass
  sh(("callgrind_control -z %d >/dev/null 2>&1"):format(pid))
  sleep(6)
  sh(("callgrind_control -d %d >/dev/null 2>&1"):format(pid))  -- dumps to out.1
  writef(stopf, "1")
  w:read("*a")
  w:close()
  stop(port, pid, out)
  local dump = readf(out .. ".1") or ""
  local total = assert(tonumber(dump:match("\ntotals: (%d+)") or dump:match("\nsummary: (%d+)")),
                       "no callgrind dump")
  local holds = (calls_to(out .. ".1", "fcallCommand") + calls_to(out .. ".1", "evalShaCommand")) * 100
  rows[#rows + 1] = { "renewal", total / holds }
  io.stderr:write(("renewal: %d holds renewed, %d instructions; held/lost: %s\n"):format(
    holds, total, readf(result) or "?"))
end

print(("dlock bench-instr: redis-server %s, %d cycles per row; instructions inside processCommand (callgrind)"):format(
  sh("redis-server --version"):match("v=(%S+)") or "?", N))
print("| per | instructions | against the floor |")
print("|---|---|---|")
local floor = rows[1][2]
for _, r in ipairs(rows) do
  print(("| %s | %.0f | %s |"):format(r[1] == "renewal" and "renewed hold" or r[1] .. " cycle", r[2],
    r[1] == "renewal" and "" or ("%.2f"):format(r[2] / floor)))
end
