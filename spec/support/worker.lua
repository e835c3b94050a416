-- A separate process for the multi-process specs: `worker.lua MODE ARGS...`.
-- Prints what it saw, one fact per line, and flushes after each.
require "compat"
local dlock = require "dlock"
local mode = arg[1]

local function say(...)
  local t = table.pack(...)
  for i = 1, t.n do t[i] = tostring(t[i]) end
  io.write(table.concat(t, " "), "\n")
  io.flush()
end

local function bump(path)
  local f = io.open(path, "rb")
  local v = f and tonumber(f:read("*a")) or 0
  if f then f:close() end
  f = assert(io.open(path, "wb"))
  f:write(tostring(v + 1))
  f:close()
end

if mode == "counter" or mode == "fair_counter" then
  -- counter URL NAME ITERATIONS COUNTER_FILE TOKEN_FILE IDX (fair_counter:
  -- with a fair lock)
  local url, name, iters, cfile, tfile, idx = arg[2], arg[3], tonumber(arg[4]), arg[5], arg[6], arg[7]
  if url:sub(1, 1) == "{" then url = assert(load("return " .. url))() end
  local client = assert(dlock.connect(url))
  local lock = mode == "counter" and client:lock(name) or client:fair_lock(name)
  for _ = 1, iters do
    assert(lock:acquire{ wait = 60 })
    bump(cfile)                                  -- read-modify-write, not atomic
    local f = assert(io.open(tfile, "ab"))
    f:write(lock:token(), " ", idx, "\n")
    f:close()
    assert(lock:release())
  end
  client:close()
  say("done", idx)

elseif mode == "multi" then
  -- multi URL NAMES ITERATIONS COUNTER_PREFIX IDX: a multi-lock over the
  -- comma-separated NAMES, given in reverse order by every other process;
  -- under it, bump one counter file per name.
  local url, iters, prefix, idx = arg[2], tonumber(arg[4]), arg[5], tonumber(arg[6])
  if url:sub(1, 1) == "{" then url = assert(load("return " .. url))() end
  local names = {}
  for n in arg[3]:gmatch("[^,]+") do table.insert(names, idx % 2 == 0 and 1 or #names + 1, n) end
  local client = assert(dlock.connect(url))
  local lock = client:multi_lock(names)
  for _ = 1, iters do
    assert(lock:acquire{ wait = 60 })
    for _, n in ipairs(names) do bump(prefix .. n:gsub("%W", "_")) end
    assert(lock:release())
  end
  client:close()
  say("done", idx)

elseif mode == "rw_read_hold" then
  -- rw_read_hold URL NAME LEASE: hold the read lock, renewed by the
  -- watchdog with LEASE, until killed
  local client = assert(dlock.connect{ url = arg[2], lease = tonumber(arg[4]) })
  local rw = client:rwlock(arg[3])
  assert(rw.read:acquire())
  say("held", rw.read:token())
  while true do dlock.sleep(1) end

elseif mode == "rw_mix" then
  -- rw_mix URL NAME ITERATIONS FILE IDX: every third round write (bump FILE
  -- under the write lock), else read it twice 1 ms apart under the read
  -- lock: a writer inside would show as a change. Prints the writes and
  -- the changes seen.
  local url, name, iters, file, idx = arg[2], arg[3], tonumber(arg[4]), arg[5], tonumber(arg[6])
  local client = assert(dlock.connect(url))
  local rw = client:rwlock(name)
  local writes, changes = 0, 0
  local function value()
    local f = io.open(file, "rb")
    local v = f and tonumber(f:read("*a")) or 0
    if f then f:close() end
    return v
  end
  for i = 1, iters do
    if (i + idx) % 3 == 0 then
      assert(rw.write:acquire{ wait = 60 })
      bump(file)
      writes = writes + 1
      assert(rw.write:release())
    else
      assert(rw.read:acquire{ wait = 60 })
      local v = value()
      dlock.sleep(0.001)
      if value() ~= v then changes = changes + 1 end
      assert(rw.read:release())
    end
  end
  client:close()
  say("done", idx, writes, changes)

elseif mode == "rw_write" then
  -- rw_write URL NAME WAIT: wait for the write lock, hold it 0.2 s
  local client = assert(dlock.connect(arg[2]))
  local rw = client:rwlock(arg[3])
  say("waiting")
  local t0 = dlock.now()
  local ok, err = rw.write:acquire{ wait = tonumber(arg[4]) }
  say(ok and "got" or err, dlock.now() - t0)
  if ok then dlock.sleep(0.2); say("release", rw.write:release()) end
  client:close()

elseif mode == "sem_hold" then
  -- sem_hold URL NAME PERMITS LEASE: hold a permit (watchdog lease LEASE)
  -- until killed
  local client = assert(dlock.connect{ url = arg[2], lease = tonumber(arg[5]) })
  local sem = client:semaphore(arg[3], tonumber(arg[4]))
  say("held", assert(sem:acquire()))
  while true do dlock.sleep(1) end

elseif mode == "sem_wait" then
  -- sem_wait URL|OPTS NAME PERMITS: wait for a permit, hold it 0.3 s
  local target = arg[2]
  if target:sub(1, 1) == "{" then target = assert(load("return " .. target))() end
  local client = assert(dlock.connect(target))
  local sem = client:semaphore(arg[3], tonumber(arg[4]))
  say("waiting")
  local id = assert(sem:acquire{ wait = 20 })
  say("got", client:stats().wakeups)
  dlock.sleep(0.3)
  say("released", sem:release(id))
  client:close()

elseif mode == "fair_wait" then
  -- fair_wait URL|OPTS NAME HOLD: wait for the fair lock NAME, hold it
  -- HOLD s, release it
  local target = arg[2]
  if target:sub(1, 1) == "{" then target = assert(load("return " .. target))() end
  local client = assert(dlock.connect(target))
  local lock = client:fair_lock(arg[3])
  say("waiting")
  assert(lock:acquire{ wait = 30 })
  say("got", lock:token(), client:stats().wakeups, dlock.now())
  dlock.sleep(tonumber(arg[4]))
  say("released", lock:release())
  client:close()

elseif mode == "fair_hold" then
  -- fair_hold URL NAME LEASE: hold the fair lock NAME (watchdog lease
  -- LEASE) until killed
  local client = assert(dlock.connect{ url = arg[2], lease = tonumber(arg[4]) })
  local lock = client:fair_lock(arg[3])
  assert(lock:acquire())
  say("held", lock:token())
  while true do dlock.sleep(1) end

elseif mode == "sem_count" then
  -- sem_count URL NAME PERMITS ITERATIONS DIR IDX: under a permit, count
  -- the holders (one file each in DIR); print the most seen
  local client = assert(dlock.connect(arg[2]))
  local sem = client:semaphore(arg[3], tonumber(arg[4]))
  local dir, most = arg[6], 0
  for i = 1, tonumber(arg[5]) do
    local id = assert(sem:acquire{ wait = 30 })
    local mine = dir .. "/" .. arg[7] .. "." .. i
    assert(io.open(mine, "w")):close()
    local p = io.popen("ls " .. dir .. " | wc -l")
    most = math.max(most, tonumber(p:read("*a")))
    p:close()
    dlock.sleep(0.003)
    os.remove(mine)
    assert(sem:release(id))
  end
  client:close()
  say("done", arg[7], most)

elseif mode == "hold" then
  -- hold URL|OPTS NAME SECONDS [GOFILE]: hold for SECONDS then release
  -- (with GOFILE, as soon as that file exists, SECONDS at the most)
  local target = arg[2]
  if target:sub(1, 1) == "{" then target = assert(load("return " .. target))() end
  local client = assert(dlock.connect(target))
  local lock = client:lock(arg[3])
  assert(lock:acquire())
  say("held", lock:token())
  local deadline = dlock.now() + tonumber(arg[4])
  repeat
    local f = arg[5] and io.open(arg[5], "rb")
    if f then f:close() break end
    dlock.sleep(arg[5] and 0.02 or math.max(0, deadline - dlock.now()))
  until dlock.now() >= deadline
  say("release", dlock.now(), lock:release())
  client:close()

elseif mode == "hold_forever" then
  -- hold_forever URL NAME LEASE [OWNER]: hold with a watchdog lease until killed
  local client = assert(dlock.connect{ url = arg[2], lease = tonumber(arg[4]) })
  local lock = client:lock(arg[3], { owner = arg[5] })
  assert(lock:acquire())
  say("held")
  dlock.sleep(120)

elseif mode == "stopped" then
  -- stopped URL NAME LEASE GOFILE: hold; after SIGSTOP/SIGCONT report the loss
  local fired = 0
  local client = assert(dlock.connect{ url = arg[2], lease = tonumber(arg[4]),
    on_lost = function(l, why) fired = fired + 1; say("on_lost", l.name, why) end })
  local lock = client:lock(arg[3])
  assert(lock:acquire())
  say("held")
  local deadline = dlock.now() + 30
  while dlock.now() < deadline do
    local f = io.open(arg[5] or "/nonexistent", "rb")  -- the parent's go-ahead
    if f then f:close() break end
    dlock.sleep(0.02)
  end
  say("held_after", lock:held())
  local until_ = dlock.now() + 5                 -- the watchdog may still be waking
  while fired == 0 and dlock.now() < until_ do client:poll(); dlock.sleep(0.01) end
  say("release", lock:release())
  client:poll()
  say("on_lost_count", fired)
  client:close()

elseif mode == "guarded" then
  -- guarded URL NAME LEASE GOFILE KEY: hold (a fixed lease); at the go-ahead
  -- write KEY under lock:guard, and say what came of it
  local client = assert(dlock.connect{ url = arg[2] })
  local lock = client:lock(arg[3])
  assert(lock:acquire{ expire = tonumber(arg[4]) })
  say("held", lock:token())
  local deadline = dlock.now() + 30
  while dlock.now() < deadline do
    local f = io.open(arg[5], "rb")
    if f then f:close() break end
    dlock.sleep(0.02)
  end
  local ok, err = lock:guard("SET", arg[6], "stale write")
  say("guard", tostring(ok), tostring(err))
  client:close()

elseif mode == "soak" then
  -- soak URL NAME NLOCKS ITERATIONS DIR IDX: critical sections on NLOCKS
  -- locks, each guarding a counter file and a token log in DIR; retries
  -- through connection errors (the server restarts once meanwhile).
  local url, name, nlocks, iters, dir, idx = arg[2], arg[3], tonumber(arg[4]),
    tonumber(arg[5]), arg[6], arg[7]
  -- The lease outlasts the restart (stop, reap, AOF reload: a few seconds);
  -- keys expire on absolute times, so a shorter one may run out meanwhile.
  local lost, background = 0, 0
  local client = assert(dlock.connect{ url = url, lease = 15,
    connect_timeout = 0.2, command_timeout = 1,
    on_lost = function() lost = lost + 1 end })
  local locks = {}
  for k = 1, nlocks do locks[k] = client:lock(name .. ":" .. k) end
  local deadline, retries = dlock.now() + 240, 0
  local function retry(what, f)
    while true do
      local ok, err = f()
      if ok then return ok end
      if not err:find("^connection") or dlock.now() > deadline then
        say("FAILED", what, err)
        os.exit(1)
      end
      retries = retries + 1
      dlock.sleep(0.01)
    end
  end
  for i = 1, iters do
    local k = (i + tonumber(idx)) % nlocks + 1
    local l = locks[k]
    retry("acquire", function() return l:acquire{ wait = 60 } end)
    bump(("%s/count-%d"):format(dir, k))
    local f = assert(io.open(("%s/tokens-%d"):format(dir, k), "ab"))
    f:write(l:token(), " ", idx, "\n")
    f:close()
    -- A release whose reply is lost has still ended the hold: dlock
    -- completes it in the background (a lost one would reach on_lost).
    local ok, err = l:release()
    if not ok and not err:find("^connection") then
      say("FAILED", "release", err)
      os.exit(1)
    end
    if not ok then background = background + 1 end
  end
  client:close()
  if lost > 0 then say("FAILED", "lost", lost) os.exit(1) end
  say("done", idx, "retries", retries, "background", background)

elseif mode == "sh" then
  -- sh COMMAND: run a shell command (in the background, for the specs)
  os.execute(arg[2])

else
  error("unknown mode " .. tostring(mode))
end
