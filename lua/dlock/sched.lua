-- dlock.sched: where a wait may yield, and the waits that yield to an
-- event loop (connect's scheduler option). Part of dlock's Lua half
-- (dlock.lua); not a public module.
-- The require that loads this file: the global one, or, in a sandbox whose
-- global require is a stub, the one running this chunk (see dlock.lua).
local require = pcall(require, "package") and require or debug.getinfo(2, "f").func
local pcall, type, error = pcall, type, error
local pack = table.pack or function(...) return { n = select("#", ...), ... } end
local running = coroutine.running

local function callable(f)
  return type(f) == "function" or
         (type(getmetatable(f)) == "table" and getmetatable(f).__call ~= nil)
end

-- Whether a wait may yield to a scheduler here. Plain Lua 5.1 (not
-- LuaJIT) has no isyieldable and cannot yield across pcall: there the
-- main thread, the fn of a `with` and an on_lost callback (guard below
-- counts them) block instead.
local plain51 = _VERSION == "Lua 5.1" and not rawget(_G, "jit")
local guarded = setmetatable({}, { __mode = "k" })          -- coroutine -> depth
local isyieldable = not plain51 and coroutine.isyieldable or function()
  local co = running()
  return co ~= nil and not guarded[co]
end

-- pcall(fn, ...) as a table of results (n = their number); on plain 5.1,
-- waits inside fn know they cannot yield.
local function guard(fn, ...)
  local co = plain51 and running()
  if co then guarded[co] = (guarded[co] or 0) + 1 end
  local res = pack(pcall(fn, ...))
  if co then guarded[co] = guarded[co] > 1 and guarded[co] - 1 or nil end
  return res
end

-- Waits that yield to an event loop.
--
-- With connect{ scheduler = S }, an acquire that must wait, called from a
-- coroutine that can yield, runs the core's acquire steps here and hands
-- each wait to S: wait(fd, seconds) returns when the subscriber socket fd
-- may be readable or the time has passed (early is fine; fd is nil when
-- there is no socket to watch). The built-in waits get a third argument,
-- the socket's serial (above). Elsewhere (the main coroutine, across a C
-- call) the acquire blocks in C as without a scheduler.
--
-- The coroutines of one client share its subscriber sockets, and whoever
-- steps reads what has arrived: a step that read release messages while
-- others wait on that socket leaves it quiet for them. So the built-in
-- waits come with a nudge(fd), kept in nudges[wait], which wakes every
-- coroutine waiting on fd to look again (from the loop, not from inside
-- the caller); the acquire calls it after such a step. A scheduler of the
-- caller's own has none: its waits come back with their time.
local nudges = setmetatable({}, { __mode = "k" })

local resume, yield = coroutine.resume, coroutine.yield

-- A wait's socket is fd and serial (the socket's number in the process):
-- the core replaces a broken socket with a new one, often under the same
-- fd number, and cqueues and libuv must let go of a descriptor before it
-- is closed, or they keep watching what epoll has dropped (and cqueues
-- raises from its loop). So the loop watches a copy of the socket of its
-- own (core._socket_copy) per serial, which it closes once the last wait
-- on it is over, after telling the loop: the copy's number is never
-- reused while it is watched. A wait that makes a new copy wakes the
-- waits on an old copy of the same number (the socket it replaced); one
-- that the core closed itself is shut down first (wait.c), so that the
-- copies of it turn readable too.
local core = require "dlock.core"

-- cqueues: poll the socket from the running cqueue's coroutine. Several
-- coroutines may wait on one socket, and the first to run after it turns
-- readable reads it dry: so one polls the socket and, when it returns,
-- wakes the others, which wait on a condition meanwhile.
local function cqueues_wait()
  local ok, cqueues = pcall(require, "cqueues")
  if not ok then return nil, "cqueues is not installed" end
  local condition = require "cqueues.condition"
  local watch = {}                      -- serial -> { copy, fd, cond, polling, n }
  local function wait(fd, timeout, serial)
    local w = fd and watch[serial]
    if fd and not w then
      local copy = core._socket_copy(fd)
      if not copy then return cqueues.sleep(math.min(timeout, 0.1)) end
      -- A new socket under a number watched before: the old one is gone,
      -- and its waits would sleep through what now arrives here. They
      -- look again. (Only those: waking the waits of other sockets would
      -- have them make copies again, and wake these, without end.)
      for _, other in pairs(watch) do
        if other.fd == fd then other.cond:signal() end
      end
      w = { copy = copy, fd = fd, cond = condition.new(), n = 0 }
      watch[serial] = w
    end
    if not w then return cqueues.sleep(timeout) end
    w.n = w.n + 1
    if w.polling then
      cqueues.poll(w.cond, timeout)
    else
      w.polling = true
      cqueues.poll({ pollfd = w.copy:fd(), events = "r" }, w.cond, timeout)
      w.polling = false
      w.cond:signal()                   -- every other waiter looks again
    end
    w.n = w.n - 1
    if w.n == 0 then                    -- the last wait on it: let go
      watch[serial] = nil
      cqueues.cancel(w.copy:fd())
      w.copy:close()
    end
  end
  nudges[wait] = function(fd)
    for _, w in pairs(watch) do
      if w.fd == fd then w.cond:signal() end  -- the poller too: it polls cond
    end
  end
  return wait
end

-- luv: yield the coroutine; a poll handle on the socket, or a timer,
-- resumes it from the loop. One poll handle per socket, whatever the
-- number of coroutines waiting on it (libuv allows no more).
local function luv_wait()
  local ok, uv = pcall(require, "luv")
  if not ok then return nil, "luv is not installed" end
  local polls = {}                      -- serial -> { copy, fd, handle, waiting = {w = true} }
  -- End the wait w once, whoever ends it: a callback below, or another
  -- resume of the coroutine (then no callback may resume it later).
  local function finish(w)
    if w.done then return false end
    w.done = true
    w.timer:stop()
    w.timer:close()
    local p = w.p
    if p then
      p.waiting[w] = nil
      if next(p.waiting) == nil then    -- the last wait on it: let go
        polls[w.serial] = nil
        p.handle:stop()
        p.handle:close(function() p.copy:close() end)
      end
    end
    return true
  end
  local function wake(w)
    if not finish(w) then return end
    local ok, err = resume(w.co)
    if not ok then error(err, 0) end    -- the coroutine's own error
  end
  local function wake_all(p)
    local all = {}                      -- wake() changes p.waiting
    for x in pairs(p.waiting) do all[#all + 1] = x end
    for _, x in ipairs(all) do wake(x) end
  end
  local function nudge(p)               -- wake_all from the loop, once per turn
    if p.nudged then return end
    p.nudged = uv.new_timer()
    p.nudged:start(0, 0, function()
      p.nudged:close()
      p.nudged = nil
      wake_all(p)
    end)
  end
  local function wait(fd, timeout, serial)
    local w = { co = running(), serial = serial, timer = uv.new_timer() }
    local p = fd and polls[serial]
    if fd and not p then
      local copy = core._socket_copy(fd)
      if copy then
        for _, other in pairs(polls) do            -- (as for cqueues)
          if other.fd == fd then nudge(other) end
        end
        p = { copy = copy, fd = fd, handle = uv.new_socket_poll(copy:fd()), waiting = {} }
        polls[serial] = p
        p.handle:start("r", function() wake_all(p) end)
      else
        timeout = math.min(timeout, 0.1)
      end
    end
    uv.update_time()                    -- (the loop's clock is cached: it may be stale)
    w.timer:start(math.ceil(timeout * 1000), 0, function() wake(w) end)
    if p then
      p.waiting[w] = true
      w.p = p
    end
    yield()
    finish(w)
  end
  nudges[wait] = function(fd)
    for _, p in pairs(polls) do
      if p.fd == fd then nudge(p) end
    end
  end
  return wait
end

local builtin = { cqueues = cqueues_wait, luv = luv_wait }

-- The wait function for connect's scheduler option (raises on misuse).
local function scheduler(s)
  local what = "\"cqueues\", \"luv\" or a table with a wait function expected"
  if type(s) == "string" then
    local make = builtin[s]
    if not make then
      error(("bad option 'scheduler' to 'dlock.connect' (%s, got \"%s\")")
            :format(what, s), 3)
    end
    local wait, err = make()
    if not wait then
      error(("bad option 'scheduler' to 'dlock.connect' (%s)"):format(err), 3)
    end
    return wait
  end
  if type(s) == "table" and callable(s.wait) then
    local wait = s.wait
    return function(fd, timeout) return wait(fd, timeout) end
  end
  error(("bad option 'scheduler' to 'dlock.connect' (%s, got %s)")
        :format(what, type(s)), 3)
end

return {
  plain51 = plain51,          -- plain Lua 5.1: no yield across pcall
  isyieldable = isyieldable,  -- whether a wait may yield here
  guard = guard,              -- pcall(fn, ...) as a table of results
  callable = callable,
  scheduler = scheduler,      -- connect's scheduler option -> wait(fd, s)
  nudges = nudges,            -- wait -> its nudge(fd), for the built-in ones
}
