-- make soak: a long run (not in CI). NPROC worker processes run TOTAL
-- critical sections on NLOCKS locks of one loopback redis-server (AOF,
-- appendfsync always). Each critical section reads and writes a counter in
-- a "storage" that honours fencing tokens (fencestore.c). On the way the
-- server is restarted, paused (CLIENT PAUSE) past the lease, the scripts
-- are flushed, and a holder is SIGSTOPped past its lease. At the end:
-- lost updates (must be 0), writes the storage fenced off, holds reported
-- lost, releases completed in the background, throughput.
--   lua5.4 tools/soak/soak.lua [TOTAL [NPROC [NLOCKS [LEASE]]]]
local dlock = require "dlock"
local fs = require "fencestore"

local function say(...)
  local t = table.pack(...)
  for i = 1, t.n do t[i] = tostring(t[i]) end
  io.write(table.concat(t, " "), "\n")
  io.flush()
end

local function store(dir, k) return ("%s/store-%d"):format(dir, k) end

-- Retry through connection errors (the server restarts, pauses).
local function retry(f, deadline)
  while true do
    local ok, err = f()
    if ok then return ok end
    if not err:find("^connection") or dlock.now() > deadline then
      error("FAILED: " .. err)
    end
    dlock.sleep(0.005)
  end
end

-- One critical section: fenced read, fenced write. Returns true when the
-- storage took the write.
local function critical(l, path)
  local tok = l:token()
  if not tok then return false end              -- lost meanwhile
  local v = fs.read(path, tok)
  return v ~= nil and fs.write(path, tok, v + 1) == true
end

if arg[1] == "worker" then
  local url, idx, n, nlocks, dir, lease = arg[2], tonumber(arg[3]), tonumber(arg[4]),
    tonumber(arg[5]), arg[6], tonumber(arg[7])
  local lost, accepted, fenced, background = 0, 0, 0, 0
  local c = assert(dlock.connect{ url = url, lease = lease, connect_timeout = 0.2,
    command_timeout = 0.5, on_lost = function() lost = lost + 1 end })
  local locks = {}
  for k = 1, nlocks do locks[k] = c:lock("soak:" .. k) end
  local deadline = dlock.now() + 3600
  for i = 1, n do
    local k = (i + idx) % nlocks + 1
    local l = locks[k]
    retry(function() return l:acquire{ wait = 60 } end, deadline)
    if critical(l, store(dir, k)) then accepted = accepted + 1 else fenced = fenced + 1 end
    local ok, err = l:release()
    if not ok and err:find("^connection") then background = background + 1
    elseif not ok and not err:find("^lost") then error("FAILED release: " .. err) end
  end
  local unconfirmed = c:stats().unconfirmed
  c:close()                                     -- runs the last on_lost callbacks
  say("done", idx, "accepted", accepted, "fenced", fenced, "lost", lost,
      "background", background, "unconfirmed", unconfirmed)
  os.exit(0)

elseif arg[1] == "sleeper" then
  -- Holds lock 1, gets SIGSTOPped past its lease, then tries its write.
  local url, dir, lease = arg[2], arg[3], tonumber(arg[4])
  local lost = 0
  local c = assert(dlock.connect{ url = url, lease = lease,
    on_lost = function() lost = lost + 1 end })
  local l = c:lock("soak:1")
  retry(function() return l:acquire{ wait = 60 } end, dlock.now() + 600)
  say("held", l:token())
  local tok = l:token()
  dlock.sleep(0.5)                              -- stopped in here
  local v = fs.read(store(dir, 1), tok)
  local wrote = v ~= nil and fs.write(store(dir, 1), tok, v + 1) == true
  local ok, err = l:release()
  c:poll()
  say("sleeper", wrote and "accepted" or "fenced", "release", tostring(ok), tostring(err),
      "lost", lost)
  c:close()
  os.exit(0)
end

-- The driver.
local helper = require "helper"
local total = tonumber(arg[1]) or 1000000
local nproc = tonumber(arg[2]) or 8
local nlocks = tonumber(arg[3]) or 4
local lease = tonumber(arg[4]) or 3
local per = math.ceil(total / nproc)
local dir = helper.tmp .. "/soak-store"
assert(os.execute("mkdir -p " .. dir))
for k = 1, nlocks do fs.init(store(dir, k)) end
local srv = helper.start_redis("--appendonly yes --appendfsync always --appenddirname soak-aof")
local me = arg[0]

local function spawn(...)
  local args = { ... }
  for i, a in ipairs(args) do args[i] = ("'%s'"):format(tostring(a)) end
  local out = ("%s/%s-%d.out"):format(helper.tmp, args[1]:gsub("'", ""), math.random(1, 1e9))
  local p = io.popen(("%s %s %s >%s 2>&1 & echo $!"):format(helper.lua_cmd(), me,
    table.concat(args, " "), out))
  local pid = tonumber(p:read("*a"):match("%d+"))
  p:close()
  return { pid = pid, out = out,
           output = function() return helper.read_file(out) or "" end,
           alive = function() return os.execute(("kill -0 %d 2>/dev/null"):format(pid)) end,
           signal = function(s) os.execute(("kill -%s %d"):format(s, pid)) end }
end

local function progress()
  local n = 0
  for k = 1, nlocks do n = n + select(2, fs.peek(store(dir, k))) end
  return n
end

say(("soak: %d critical sections, %d processes, %d locks, lease %g s, redis-server %s")
  :format(per * nproc, nproc, nlocks, lease, srv.cli("info", "server"):match("redis_version:(%S+)")))
local t0 = dlock.now()
local workers = {}
for i = 1, nproc do workers[i] = spawn("worker", srv.url, i, per, nlocks, dir, lease) end

local function at(fraction, what, f)
  helper.wait_for(function() return progress() >= fraction * per * nproc end, 3600, 0.05)
  say(("  %5.1f s  %3d%%  %s"):format(dlock.now() - t0, math.floor(fraction * 100), what))
  f()
end

at(0.2, "server restart (SHUTDOWN, AOF)", function()
  local clean = srv.shutdown()
  assert(clean, "SHUTDOWN did not stop the server")
  srv.restart()
end)
at(0.4, ("CLIENT PAUSE %g s (past the lease)"):format(lease + 1), function()
  srv.cli("client", "pause", tostring(math.floor((lease + 1) * 1000)))
end)
local sleeper
at(0.6, ("a holder SIGSTOPped for %g s (past the lease)"):format(lease + 1.5), function()
  sleeper = spawn("sleeper", srv.url, dir, lease)
  helper.wait_for(function() return sleeper.output():find("held") end, 120, 0.001)
  sleeper.signal("STOP")
  dlock.sleep(lease + 1.5)
  sleeper.signal("CONT")
end)
at(0.8, "SCRIPT FLUSH", function() srv.cli("script", "flush") end)

helper.wait_for(function()
  for _, w in ipairs(workers) do if w.alive() then return false end end
  return not sleeper.alive()
end, 7200, 0.1)
local elapsed = dlock.now() - t0

local sum = { accepted = 0, fenced = 0, lost = 0, background = 0, unconfirmed = 0 }
local failed = false
for i, w in ipairs(workers) do
  local out = w.output()
  if not out:find("done " .. i) then
    failed = true
    say("worker " .. i .. " failed: " .. out)
  end
  for k in pairs(sum) do sum[k] = sum[k] + tonumber(out:match(k .. " (%d+)") or 0) end
end
local sl = sleeper.output()
say("  " .. (sl:match("sleeper[^\n]*") or ("sleeper failed: " .. sl)))
if sl:find("sleeper accepted") then sum.accepted = sum.accepted + 1 end
local stored = progress()
local lost_updates = sum.accepted - stored
say(("soak: %d critical sections in %.1f s (%.0f/s)"):format(per * nproc, elapsed,
  per * nproc / elapsed))
say(("  storage counters %d, writes accepted %d: lost updates %d"):format(stored, sum.accepted,
  lost_updates))
say(("  writes fenced off %d, holds reported lost %d, releases completed in the " ..
  "background %d (never confirmed %d)"):format(sum.fenced, sum.lost, sum.background,
  sum.unconfirmed))
srv.stop()
if failed or lost_updates ~= 0 or not sl:find("sleeper") then
  say("soak: FAILED")
  os.exit(1)
end
say("soak: passed")
