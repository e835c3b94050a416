-- worker.lua: the measuring processes that bench/run.lua starts, one mode each.
--
--   m1 IMPL URL SECONDS
--       M1 uncontended: acquire+release cycles on one lock for SECONDS (after
--       0.1 s of warm-up). Prints "cycles elapsed_s p50_us p99_us".
--   count IMPL URL N [READY GO]
--       exactly N uncontended cycles, nothing printed; with READY and GO,
--       20 cycles first (connected, scripts loaded, each run once), then
--       READY is created and the N wait for the GO file
--       (bench/instr.lua). IMPL may also be "floor" (bench/floor.c's SET NX
--       PX and compare-and-delete script, sent through a dlock client),
--       "read" or "write" (a half of client:rwlock), "sem" (a semaphore
--       of 1 permit: acquire, release), or "redispy", "redisson" or
--       "redisson-fair" (those libraries' commands for a cycle,
--       bench/anchors.lua).
--   m2 IMPL URL NAME COUNTER LOG READY GO STEPBACK
--       M2 contended: creates READY, waits for the GO file ("start stop" on
--       dlock.now()), then until stop: acquire NAME, read-modify-write the
--       12-digit number in file COUNTER (not atomic: only the lock protects it),
--       release, sleep STEPBACK s. Writes to LOG one line per hold
--       "waited_since acquired release_started release_returned", then
--       "count N".
--   m7 URL NLOCKS PREFIX SECONDS
--       M7 capacity: acquire+release cycles over NLOCKS distinct locks in
--       turn, as fast as it can, for SECONDS. Prints "cycles elapsed_s".
--   m3 URL NLOCKS LEASE PREFIX READY STOP RESULT
--       M3 watchdog scale: acquires NLOCKS locks (watchdog mode, lease LEASE s),
--       writes READY, holds them until the STOP file exists, then writes to
--       RESULT "held lost cpu_s wall_s rss_kB" (held = locks it still holds, lost =
--       client:stats().lost, cpu = process CPU time incl. the watchdog thread).
--
-- IMPL is "dlock", "labelled" (dlock with connect{ label = ... }),
-- "reentrant" (m1: dlock, each cycle 4 deep: acquire, 3 reentries, 4
-- releases), "fair"
-- (dlock's fair lock) or "plain"
-- (bench/plainlock.lua, same lock interface).
-- All times come from dlock.now() (CLOCK_MONOTONIC, shared by all processes).
local dlock = require "dlock"
local now, sleep = dlock.now, dlock.sleep

local dir = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = dir .. "/?.lua;" .. package.path

local function impl(name)
  if name == "reentrant" then return dlock end
  if name == "labelled" then              -- dlock, its connections named
    return { connect = function(url) return dlock.connect{ url = url, label = "bench m1" } end }
  end
  return (name == "dlock" or name == "fair") and dlock or require "plainlock"
end

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

local function read(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

-- Poll for a file for at most `limit` seconds; its content or nil.
local function wait_file(path, limit, step)
  local deadline = now() + limit
  repeat
    local s = read(path)
    if s and s ~= "" then return s end
    sleep(step)
  until now() > deadline
  return nil
end

local mode = arg[1]
local FLOOR_CAD = "if redis.call('get', KEYS[1]) == ARGV[1] then\n" ..   -- as bench/floor.c
                  "  return redis.call('del', KEYS[1])\n" ..
                  "end\n" ..
                  "return 0\n"

if mode == "m1" then
  local url, secs = arg[3], tonumber(arg[4])
  local client = assert(impl(arg[2]).connect(url))
  local lock = client:lock("m1")
  local depth = arg[2] == "reentrant" and 4 or 1  -- acquire, reenter 3 times
  local function cycle()
    for _ = 1, depth do assert(lock:acquire()) end
    for _ = 1, depth do assert(lock:release()) end
  end
  local lat, n = {}, 0
  local warm = now() + 0.1
  while now() < warm do cycle() end
  local start = now()
  local stop = start + secs
  local t = start
  while t < stop do
    cycle()
    local t1 = now()
    n = n + 1
    lat[n] = t1 - t
    t = t1
  end
  local elapsed = now() - start
  table.sort(lat)
  print(("%d %.6f %.1f %.1f"):format(n, elapsed, lat[n // 2 + 1] * 1e6,
                                     lat[math.floor(n * 0.99) + 1] * 1e6))
  client:close()

elseif mode == "count" then                     -- bench/instr.lua: exactly N cycles
  local url, n, ready, go = arg[3], tonumber(arg[4]), arg[5], arg[6]
  local client = assert((arg[2] == "plain" and impl("plain") or dlock).connect(url))
  local cycle
  if arg[2] == "redispy" or arg[2] == "redisson" or arg[2] == "redisson-fair" then
    -- another library's commands
    cycle = require("anchors").new(arg[2], function(...) return client:call(...) end)
  elseif arg[2] == "floor" then                  -- the floor's two commands
    local sha = assert(client:call("SCRIPT", "LOAD", FLOOR_CAD))
    cycle = function(i)
      assert(client:call("SET", "floor", i, "NX", "PX", 30000) == "OK")
      assert(client:call("EVALSHA", sha, 1, "floor", i) == 1)
    end
  elseif arg[2] == "sem" then
    local sem = client:semaphore("m1", 1)
    cycle = function() assert(sem:release(assert(sem:acquire()))) end
  else
    local kind = arg[2]
    local lock = kind == "fair" and client:fair_lock("m1")
      or (kind == "read" or kind == "write") and client:rwlock("m1")[kind]
      or client:lock("m1")
    local depth = kind == "reentrant" and 4 or 1
    cycle = function()
      for _ = 1, depth do assert(lock:acquire()) end
      for _ = 1, depth do assert(lock:release()) end
    end
  end
  local first = 1
  if ready then                                 -- warm, then N once told to go
    for i = 1, 20 do cycle(i) end
    first = 21
    write(ready, "1")
    assert(wait_file(go, 120, 0.01), "no go file")
  end
  for i = first, first + n - 1 do cycle(i) end
  client:close()

elseif mode == "m2" then
  local url, name, counter, log = arg[3], arg[4], arg[5], arg[6]
  local ready, go, stepback = arg[7], arg[8], tonumber(arg[9])
  local client = assert(impl(arg[2]).connect(url))
  local names = {}                               -- "a,b": a multi-lock (M5)
  for n in name:gmatch("[^,]+") do names[#names + 1] = n end
  local half, rwname = name:match("^rw([rw]):(.*)$")  -- "rwr:x": x's read half
  local semname = name:match("^sem:(.*)$")              -- a 1-permit semaphore
  local lock = #names > 1 and client:multi_lock(names)
    or half and client:rwlock(rwname)[half == "r" and "read" or "write"]
    or arg[2] == "fair" and client:fair_lock(name)
    or not semname and client:lock(name)
  if semname then
    local sem, id = client:semaphore(semname, 1), nil
    lock = {
      acquire = function(_, o) local e; id, e = sem:acquire(o); return id, e end,
      release = function() return sem:release(id) end,
    }
  end
  write(ready, "1")
  local s = assert(wait_file(go, 20, 0.002), "no go file")
  local start, stop = s:match("(%S+) (%S+)")
  start, stop = tonumber(start), tonumber(stop)
  if start > now() then sleep(start - now()) end
  local lines, count = {}, 0
  while true do
    local w = now()
    if w >= stop then break end
    local ok, err = lock:acquire{ wait = stop - w }
    if not ok then
      assert(err:find("^timeout"), err)
      break
    end
    local a = now()
    local f = assert(io.open(counter, "r+b"))  -- the critical section: read,
    local v = tonumber(f:read("*a"))            -- add one, write back in place
    f:seek("set")                              -- (no truncation, so no ext4
    f:write(("%012d"):format(v + 1))           -- flush-on-close: ~5 us, not
    f:close()                                  -- ~300 us)
    local r = now()
    assert(lock:release())
    count = count + 1
    lines[count] = ("%.6f %.6f %.6f %.6f"):format(w, a, r, now())
    if stepback > 0 then sleep(stepback) end
  end
  lines[count + 1] = "count " .. count .. "\n"
  write(log, table.concat(lines, "\n"))
  client:close()

elseif mode == "m3" then
  local url, n, lease, prefix = arg[2], tonumber(arg[3]), tonumber(arg[4]), arg[5]
  local ready, stop, result = arg[6], arg[7], arg[8]
  local client = assert(dlock.connect{ url = url, lease = lease, prefix = prefix })
  local locks = {}
  for i = 1, n do
    locks[i] = client:lock("l" .. i)
    assert(locks[i]:acquire())
  end
  local cpu0, t0 = os.clock(), now()
  write(ready, "1")
  wait_file(stop, 120, 0.05)
  local cpu, wall = os.clock() - cpu0, now() - t0
  local held = 0
  for i = 1, n do
    if locks[i]:held() then held = held + 1 end
  end
  local rss = 0                                  -- kB
  for l in io.lines("/proc/self/status") do rss = tonumber(l:match("^VmRSS:%s*(%d+)")) or rss end
  write(result, ("%d %d %.6f %.6f %d"):format(held, client:stats().lost, cpu, wall, rss))
  client:close()

elseif mode == "m7" then
  local url, nlocks, prefix, secs = arg[2], tonumber(arg[3]), arg[4], tonumber(arg[5])
  local client = assert(dlock.connect{ url = url, prefix = prefix })
  local locks = {}
  for i = 1, nlocks do locks[i] = client:lock("l" .. i) end
  local n, i = 0, 0
  local start = now()
  local stop = start + secs
  while now() < stop do
    for _ = 1, 100 do
      i = i % nlocks + 1
      assert(locks[i]:acquire())
      assert(locks[i]:release())
    end
    n = n + 100
  end
  print(("%d %.6f"):format(n, now() - start))
  client:close()

else
  error("usage: worker.lua m1|m2|m3|m7 ...")
end
