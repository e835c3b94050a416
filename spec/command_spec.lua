-- The `dlock` command (bin/dlock), run as a user runs it: a real process
-- around real commands, against a redis-server of its own (CLIENT PAUSE
-- here must not stall the other specs).
local dlock = require "dlock"
local helper = require "helper"

local root, q = helper.root, helper.q       -- (root: the checkout, absolute)

local srv
-- SIGHUP back to its default for dlock, where env(1) can (coreutils 8.31):
-- under `nohup make test` every process here inherits it ignored, and
-- dlock keeps an ignored signal ignored, so the specs that end a command
-- with SIGHUP waited 20 s for nothing.
local UNHUP = os.execute("env --default-signal=HUP true >/dev/null 2>&1")
UNHUP = (UNHUP == true or UNHUP == 0) and "--default-signal=HUP " or ""   -- (5.1: 0)
-- Started under setsid (no controlling terminal), unless on_tty: a dlock
-- run by `make test` at a terminal must not hand that terminal over. env
-- (a shell fragment, optional) sets variables for it, after REDIS_URL.
-- keep_ignored: leave the signals ignored as they are (a nohup spec).
local function dlock_cmd(args, on_tty, env, keep_ignored)
  return ("REDIS_URL=%s %s%s%s %s/bin/dlock %s"):format(q(srv.url), env and env .. " " or "",
    on_tty and "" or "setsid -w env " .. (keep_ignored and "" or UNHUP), helper.lua_cmd(),
    q(root), args)
end

--- Run dlock with args (a shell fragment) to its end: its exit status and
--- its output (stdout and stderr).
local function run(args, env)
  local f = assert(io.popen(dlock_cmd(args, nil, env) .. " 2>&1; echo \"exit=$?\""))
  local out = f:read("*a")
  f:close()
  return tonumber(out:match("exit=(%d+)%s*$")), (out:gsub("exit=%d+%s*$", ""))
end

local n = 0
local started = {}                            -- every spawn, for after_each
--- Start dlock with args in the background, under a shell that records its
--- exit status (and that ignores signal `ignore`, if given, as nohup does;
--- env as for dlock_cmd). Returns a handle.
local function spawn(args, ignore, env)
  n = n + 1
  local base = ("%s/cmd-%d-%d"):format(helper.tmp, n, math.random(1, 1e9))
  local script = ("%s%s >%s.out 2>&1 & echo $! >%s.pid; wait $!; echo $? >%s.code")
    :format(ignore and ("trap '' %s; "):format(ignore) or "", dlock_cmd(args, nil, env, ignore),
            base, base, base)
  assert(os.execute(("sh -c %s >/dev/null 2>&1 &"):format(q(script))))
  local pid = helper.wait_for(function()
    local s = helper.read_file(base .. ".pid")
    return s and tonumber(s:match("%d+"))
  end, 10)
  assert(pid, "dlock did not start")
  local h = { pid = pid, file = base }
  function h.code()
    local s = helper.read_file(base .. ".code")
    return s and tonumber(s:match("%d+"))
  end
  function h.output() return helper.read_file(base .. ".out") or "" end
  function h.signal(sig) return os.execute(("kill -%s %d"):format(sig, pid)) end
  function h.finish(timeout)
    return helper.wait_for(h.code, timeout or 20, 0.05)
  end
  started[#started + 1] = h
  return h
end

local function key(name) return "dlock:{" .. name .. "}" end

local function file_has(path, text)
  return function() return (helper.read_file(path) or ""):find(text, 1, true) end
end

--- Start `dlock OPTS NAME -- sh -c SCRIPT` (LOG in SCRIPT is a log file of
--- its own; SCRIPT writes "started $$" to it) and wait until the command
--- has started. Returns the handle, the log's path and the command's
--- process group.
local function start_logged(name, opts, script, ignore)
  local log = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".log"
  local h = spawn(("%s %s -- sh -c %s"):format(opts, q(name), q((script:gsub("LOG", q(log))))), ignore)
  assert(helper.wait_for(file_has(log, "started"), 10), h.output())
  h.group = tonumber(helper.read_file(log):match("started (%d+)"))
  return h, log, h.group
end

--- The state letter and process group of process pid (from /proc: ps
--- may not be installed), or nil when there is no such process.
local function proc_stat(pid)
  local st = helper.read_file("/proc/" .. pid .. "/stat")
  if not st then return nil end
  local state, pgrp = st:match("^.*%) (%S) %-?%d+ (%d+)")
  return state, tonumber(pgrp)
end

--- The processes { pid, state } in process group g, but zombies (which
--- an init that does not reap may keep a while).
local function group_members(g)
  local p = assert(io.popen("ls /proc"))
  local t = {}
  for pid in p:read("*a"):gmatch("%d+") do
    local state, pgrp = proc_stat(pid)
    if pgrp == g and state ~= "Z" then t[#t + 1] = { tonumber(pid), state } end
  end
  p:close()
  return t
end

--- The argv (NULs as spaces) of every process whose argv has `text`.
local function cmdlines(text)
  local p = assert(io.popen("ls /proc"))
  local t = {}
  for pid in p:read("*a"):gmatch("%d+") do
    local argv = helper.read_file("/proc/" .. pid .. "/cmdline")
    if argv and argv:find(text, 1, true) then t[#t + 1] = (argv:gsub("%z", " ")) end
  end
  p:close()
  return t
end

-- A password with bytes a URL must %-encode, and the same %-encoded.
local PASSWORD, ENCODED = "s3cr:t@/%x y", "s3cr%3At%40%2F%25x%20y"
local authed                                 -- passworded()'s servers, once started
--- Three redis-servers that want PASSWORD (or user alice's), from a
--- config file: not on their command lines, which a spec here reads.
local function passworded()
  if authed then return authed end
  local conf = helper.tmp .. "/requirepass.conf"
  local f = assert(io.open(conf, "w"))
  f:write(('requirepass "%s"\nuser alice on ">alice-%s" ~* &* +@all\n'):format(PASSWORD, PASSWORD))
  f:close()
  authed = {}
  for i = 1, 3 do authed[i] = helper.start_redis(nil, { conf = conf }) end
  return authed
end

-- A strict JSON decoder (RFC 8259) for `status --json`: one value and
-- nothing after it but whitespace; no trailing commas, no leading zeros, no
-- duplicate keys, no raw control characters in strings, strings valid
-- UTF-8. null decodes as NULL. Raises on anything else.
local NULL = setmetatable({}, { __tostring = function() return "null" end })
local function json_decode(s)
  local i = 1
  local function fail(what) error(("JSON: %s at byte %d of %q"):format(what, i, s), 0) end
  local function ws() i = s:find("[^ \t\n\r]", i) or #s + 1 end
  local function utf8_char(cp)
    if cp < 0x80 then return string.char(cp)
    elseif cp < 0x800 then return string.char(0xc0 + math.floor(cp / 64), 0x80 + cp % 64)
    elseif cp < 0x10000 then
      return string.char(0xe0 + math.floor(cp / 4096), 0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
    end
    return string.char(0xf0 + math.floor(cp / 262144), 0x80 + math.floor(cp / 4096) % 64,
      0x80 + math.floor(cp / 64) % 64, 0x80 + cp % 64)
  end
  local value
  local function str()
    i = i + 1
    local out = {}
    while true do
      local c = s:sub(i, i)
      if c == "" then fail("unterminated string") end
      if c == '"' then i = i + 1; break end
      if c:byte() < 0x20 then fail("a raw control character in a string") end
      if c == "\\" then
        local e = s:sub(i + 1, i + 1)
        local simple = ({ ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f",
                          n = "\n", r = "\r", t = "\t" })[e]
        if simple then out[#out + 1] = simple; i = i + 2
        elseif e == "u" then
          local h = s:match("^%x%x%x%x", i + 2) or fail("a bad \\u escape")
          local cp = tonumber(h, 16)
          i = i + 6
          if cp >= 0xd800 and cp <= 0xdbff then
            local l = s:match("^\\u(%x%x%x%x)", i) or fail("a lone surrogate")
            local lo = tonumber(l, 16)
            if lo < 0xdc00 or lo > 0xdfff then fail("a lone surrogate") end
            cp = 0x10000 + (cp - 0xd800) * 0x400 + (lo - 0xdc00)
            i = i + 6
          elseif cp >= 0xdc00 and cp <= 0xdfff then fail("a lone surrogate") end
          out[#out + 1] = utf8_char(cp)
        else fail("a bad escape") end
      else
        local j = s:find('["\\%z\1-\31]', i) or #s + 1
        local run = s:sub(i, j - 1)
        -- valid UTF-8 only
        local k = 1
        while k <= #run do
          local b = run:byte(k)
          local n = b < 0x80 and 0 or (b >= 0xc2 and b <= 0xdf) and 1 or (b >= 0xe0 and b <= 0xef) and 2
            or (b >= 0xf0 and b <= 0xf4) and 3 or fail("a byte that is not UTF-8")
          for m = k + 1, k + n do
            local cb = run:byte(m)
            if not cb or cb < 0x80 or cb > 0xbf then fail("a byte that is not UTF-8") end
          end
          k = k + n + 1
        end
        out[#out + 1] = run
        i = j
      end
    end
    return table.concat(out)
  end
  function value()
    ws()
    local c = s:sub(i, i)
    if c == "{" then
      local t, keys = {}, {}
      i = i + 1; ws()
      if s:sub(i, i) == "}" then i = i + 1; return t, keys end
      while true do
        ws()
        if s:sub(i, i) ~= '"' then fail("an object key that is not a string") end
        local k = str()
        if t[k] ~= nil then fail("a duplicate key " .. k) end
        ws()
        if s:sub(i, i) ~= ":" then fail("no ':'") end
        i = i + 1
        t[k] = value()
        keys[#keys + 1] = k
        ws()
        c = s:sub(i, i); i = i + 1
        if c == "}" then return t, keys end
        if c ~= "," then fail("no ',' or '}'") end
      end
    elseif c == "[" then
      local t = {}
      i = i + 1; ws()
      if s:sub(i, i) == "]" then i = i + 1; return t end
      while true do
        t[#t + 1] = value()
        ws()
        c = s:sub(i, i); i = i + 1
        if c == "]" then return t end
        if c ~= "," then fail("no ',' or ']'") end
      end
    elseif c == '"' then return str()
    elseif s:sub(i, i + 3) == "true" then i = i + 4; return true
    elseif s:sub(i, i + 4) == "false" then i = i + 5; return false
    elseif s:sub(i, i + 3) == "null" then i = i + 4; return NULL
    end
    local num = s:match("^%-?%d+%.?%d*[eE]?[-+]?%d*", i)
    if not num or not (num:match("^%-?0$") or num:match("^%-?0[.eE]") or num:match("^%-?[1-9]"))
      or not (num:match("^%-?%d+$") or num:match("^%-?%d+%.%d+$") or num:match("^%-?%d+%.%d+[eE][-+]?%d+$")
              or num:match("^%-?%d+[eE][-+]?%d+$")) then
      fail("not a JSON value")
    end
    i = i + #num
    return tonumber(num)
  end
  local v, keys = value()
  ws()
  if i <= #s then fail("something after the value") end
  return v, keys
end

describe("the dlock command #binding", function()
  setup(function() srv = helper.start_redis() end)
  teardown(function()
    if srv then srv.stop() end
    for _, s in ipairs(authed or {}) do s.stop() end
  end)
  -- a failed spec leaves no dlock (nor its command) running
  after_each(function()
    for _, h in ipairs(started) do
      if not h.code() then
        h.signal("CONT")
        h.signal("TERM")
        if not h.finish(5) then h.signal("KILL") end
      end
      if h.group then os.execute("kill -KILL -" .. h.group .. " 2>/dev/null") end
    end
    started = {}
    srv.cli("client", "unpause")
  end)

  it("runs the command holding the lock, passes DLOCK_NAME and DLOCK_TOKEN, and its exit status", function()
    local name = helper.unique_name("cmd")
    local code, out = run(("%s -- sh -c %s"):format(q(name),
      q([[echo "name=$DLOCK_NAME token=$DLOCK_TOKEN"; redis-cli -p $1 hget "dlock:{$DLOCK_NAME}" n; ]] ..
        [[redis-cli -p $1 get "dlock:{$DLOCK_NAME}"; exit 7]])
      .. " sh " .. srv.port))
    assert.equals(7, code, out)
    local tok = assert(tonumber(out:match("token=(%d+)")), out)
    assert.truthy(out:find("name=" .. name, 1, true), out)
    -- inside, the lock was held (one hold), and its token was the command's
    local short                                   -- (or in its short form)
    for line in out:gmatch("[^\n]+") do short = short or helper.short_fields(line) end
    assert.truthy(out:match("\n1\n") or (short and short.n == "1"), out)
    assert.equals(tok, tonumber(helper.lock_field(srv, key(name), "t")))
    -- and released once the command ended
    assert.is_true(helper.is_free(srv, key(name)))
    assert.equals(0, (run(("%s -- true"):format(q(name)))))
    assert.equals(3, (run(("%s -- sh -c 'exit 3'"):format(q(name)))))
  end)

  it("serialises a shell counter across processes: no lost update, tokens increase", function()
    local name = helper.unique_name("counter")
    local dir = helper.tmp .. "/" .. name:gsub("%W", "_")
    assert(os.execute("mkdir -p " .. q(dir) .. " && echo 0 >" .. q(dir .. "/count")))
    -- read, pause, write: without the lock, concurrent runs lose updates
    local body = [[n=$(cat "$1/count"); sleep 0.01; echo $((n + 1)) >"$1/count"; echo "$DLOCK_TOKEN" >>"$1/tokens"]]
    local nproc, iters = 3, 15
    local loops = {}
    for i = 1, nproc do
      loops[i] = ("(i=0; while [ $i -lt %d ]; do %s %s -- sh -c %s sh %s || echo FAIL; i=$((i + 1)); done) >%s/out%d 2>&1 &")
        :format(iters, dlock_cmd(""), q(name), q(body), q(dir), q(dir), i)
    end
    assert(os.execute("sh -c " .. q(table.concat(loops, " ") .. " wait")))
    for i = 1, nproc do
      local o = helper.read_file(dir .. "/out" .. i) or ""
      assert.falsy(o:find("FAIL"), o)
    end
    assert.equals(tostring(nproc * iters), (helper.read_file(dir .. "/count"):gsub("%s+", "")))
    local last, count = 0, 0
    for tok in helper.read_file(dir .. "/tokens"):gmatch("%d+") do
      tok = tonumber(tok)
      assert.is_true(tok > last, ("token %d after %d"):format(tok, last))
      last, count = tok, count + 1
    end
    assert.equals(nproc * iters, count)
  end)

  it("-n gives up at once with the conflict code, and --wait after its time", function()
    local name = helper.unique_name("cron")
    local marker = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".ran"
    local holder = spawn(("%s -- sh -c 'echo held; exec sleep 60'"):format(q(name)))
    assert(helper.wait_for(function() return holder.output():find("held") end, 10), holder.output())
    local code, out = run(("-n %s -- touch %s"):format(q(name), q(marker)))
    assert.equals(1, code, out)
    assert.equals("", out)                      -- quiet, as flock -n
    assert.equals(75, (run(("--nonblock --conflict-exit-code 75 %s -- touch %s"):format(q(name), q(marker)))))
    assert.equals(9, (run(("-E 9 --wait 0.3 %s -- touch %s"):format(q(name), q(marker)))))
    assert.is_nil(helper.read_file(marker))     -- the command never ran
    assert.is_nil(holder.code())                -- and the holder still holds
    holder.signal("TERM")
    assert.equals(128 + 15, holder.finish())
    assert.is_true(helper.is_free(srv, key(name)))
    assert.equals(0, (run(("-n %s -- touch %s"):format(q(name), q(marker)))))
    assert.truthy(helper.read_file(marker))
  end)

  it("a waiting dlock takes the lock when the holder's command ends", function()
    local name = helper.unique_name("queue")
    local holder = spawn(("%s -- sh -c 'echo held; exec sleep 60'"):format(q(name)))
    assert(helper.wait_for(function() return holder.output():find("held") end, 10))
    local waiter = spawn(("%s -- sh -c 'echo second'"):format(q(name)))
    assert(helper.wait_for(function()          -- it waits, on the lock's channel
      return srv.cli("pubsub", "numsub", key(name) .. ":ch"):match("\n1$")
    end, 10))
    assert.is_nil(waiter.code())
    -- passed on: the command dies of it (not INT or QUIT: the shell that
    -- started this dlock in the background made it ignore those)
    holder.signal("HUP")
    assert.equals(128 + 1, holder.finish())
    assert.equals(0, waiter.finish())
    assert.truthy(waiter.output():find("second"))
  end)

  -- (it ran on unlocked: the next copy got the lock while it still ran)
  it("leaves no command running when dlock itself is killed (SIGKILL)", function()
    local name = helper.unique_name("orphan")
    local h, log, group = start_logged(name, "--lease 30",
      [[echo "started $$" >>LOG; exec sleep 60]])
    assert.equals(1, #group_members(group))
    h.signal("KILL")
    assert(helper.wait_for(function() return #group_members(group) == 0 end, 5),
      "the command outlived dlock")
    assert.is_false(helper.is_free(srv, key(name)))   -- held until its lease ends
    assert.truthy(helper.read_file(log))
  end)

  it("kills the command when the lock is deleted under it, and exits 124", function()
    local name = helper.unique_name("lost")
    local h, log = start_logged(name, "--lease 3",
      [[trap 'echo TERM >>LOG; exit 3' TERM; echo "started $$" >>LOG; sleep 60 & wait]])
    assert.equals("1", srv.cli("del", key(name)))
    assert.equals(124, h.finish(10), h.output())
    assert.truthy((helper.read_file(log)):find("TERM"))
    assert.truthy(h.output():find("the lock was lost (lost: ", 1, true), h.output())
  end)

  it("SIGKILLs a command that ignores SIGTERM, --kill-after the loss (CLIENT PAUSE past the lease)", function()
    local name = helper.unique_name("paused")
    local h, _, group = start_logged(name, "--lease 1 --kill-after 0.5",
      [[trap '' TERM; echo "started $$" >>LOG; while :; do sleep 0.05; done]])
    assert.equals("OK", srv.cli("client", "pause", "3000", "write"))
    assert.equals(124, h.finish(20), h.output())
    srv.cli("client", "unpause")
    local out = h.output()
    assert.truthy(out:find("sent SIGTERM", 1, true), out)
    assert.truthy(out:find("sent SIGKILL", 1, true), out)
    -- the command's whole process group is gone (its shell led it)
    assert.same({}, helper.wait_for(function()
      return #group_members(group) == 0 and {} end, 10) or group_members(group))
  end)

  it("passes signals on to the command, and releases however it ends", function()
    local name = helper.unique_name("sig")
    local log = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".log"
    local h = spawn(("%s -- sh -c %s"):format(q(name), q(([[
      trap 'echo USR1 >>LOG' USR1
      trap 'echo HUP >>LOG; exit 5' HUP
      echo started >>LOG
      while :; do sleep 0.05; done]]):gsub("LOG", q(log)))))
    assert(helper.wait_for(file_has(log, "started"), 10), h.output())
    h.signal("USR1")
    assert(helper.wait_for(file_has(log, "USR1"), 10))
    assert.is_nil(h.code())
    assert.is_false(helper.is_free(srv, key(name)))
    h.signal("HUP")
    assert.equals(5, h.finish())
    assert.is_true(helper.is_free(srv, key(name)))
    -- killed by a signal: 128 + N, and the lock is free at once
    local k = spawn(("%s -- sh -c %s"):format(q(name), q(("echo started >>%s; sleep 60 & wait"):format(q(log)))))
    assert(helper.wait_for(function()
      local _, c = helper.read_file(log):gsub("started", "")
      return c == 2
    end, 10))
    k.signal("TERM")
    assert.equals(128 + 15, k.finish())
    assert.is_true(helper.is_free(srv, key(name)))
  end)

  it("a signal while waiting ends dlock at once, holding nothing", function()
    local name = helper.unique_name("waitsig")
    local holder = spawn(("%s -- sh -c 'echo held; exec sleep 60'"):format(q(name)))
    assert(helper.wait_for(function() return holder.output():find("held") end, 10))
    local marker = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".ran"
    local waiter = spawn(("%s -- touch %s"):format(q(name), q(marker)))
    -- it waits: subscribed to the lock's channel (so its handlers are in)
    assert(helper.wait_for(function()
      return srv.cli("pubsub", "numsub", key(name) .. ":ch"):match("\n1$")
    end, 10))
    assert.is_nil(waiter.code())
    waiter.signal("TERM")
    assert.equals(128 + 15, waiter.finish())
    assert.is_nil(helper.read_file(marker))
    assert.is_nil(holder.code())
    holder.signal("TERM")
    assert.equals(128 + 15, holder.finish())
  end)

  it("SIGKILLs the rest of the command's group --kill-after a loss, after its leader has ended", function()
    local name = helper.unique_name("orphans")
    local h, _, group = start_logged(name, "--kill-after 1",
      [[echo "started $$" >>LOG; (trap '' TERM; sleep 60) & wait]])
    assert.equals(0, (run("release --force " .. q(name))))
    assert.equals(124, h.finish(20), h.output())
    assert.truthy(h.output():find("sent SIGKILL", 1, true), h.output())
    assert.same({}, helper.wait_for(function()
      return #group_members(group) == 0 and {} end, 10) or group_members(group))
  end)

  -- The holder's watchdog hears of a forced release at once (force.lua's
  -- notice), not at its next renewal, a third of the lease later.
  it("starts stopping its command within a second of a forced release, whatever the lease #timing", function()
    local name = helper.unique_name("forced")
    local h = start_logged(name, "--lease 60", [[echo "started $$" >>LOG; sleep 60]])
    local t0 = dlock.now()
    assert.equals(0, (run("release --force " .. q(name))))
    assert(helper.wait_for(function()
      return h.output():find("the lock was lost", 1, true)
    end, 15, 0.02), h.output())
    local took = dlock.now() - t0
    assert.is_true(took < 3, ("took %.2f s (a renewal comes every 20 s)"):format(took))
    assert.is_number(h.finish(20))
  end)

  it("leaves a signal ignored at its start ignored, in itself and the command (nohup)", function()
    local name = helper.unique_name("nohup")
    local h, log = start_logged(name, "",
      [[echo "started $$" >>LOG; sleep 0.5; kill -HUP $$; echo survived >>LOG]], "HUP")
    h.signal("HUP")
    assert.equals(0, h.finish(), h.output())
    assert.truthy(helper.read_file(log):find("survived", 1, true))
  end)

  it("stops with the command on SIGTSTP (Ctrl-Z), and both go on after SIGCONT", function()
    local name = helper.unique_name("tstp")
    local log = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".ticks"
    local h = spawn(("%s -- sh -c %s"):format(q(name), q(
      ("i=0; while :; do i=$((i + 1)); echo \"$$ $i\" >%s; sleep 0.02; done"):format(q(log)))))
    assert(helper.wait_for(function() return (helper.read_file(log) or ""):match("^%d+ ") end, 10), h.output())
    local group = assert(tonumber(helper.read_file(log):match("^(%d+)")))
    -- (a member may be in D instead: dash waiting in vfork for a child the
    -- TSTP stopped before it ran sleep; it cannot run either)
    local function stopped()
      if proc_stat(h.pid) ~= "T" then return false end
      for _, m in ipairs(group_members(group)) do
        if not m[2]:match("^[TD]") then return false end
      end
      return true
    end
    h.signal("TSTP")
    assert(helper.wait_for(stopped, 10), "dlock and its command did not stop")
    local ticks = helper.read_file(log)
    dlock.sleep(0.2)
    assert.equals(ticks, helper.read_file(log))  -- stopped processes write nothing
    h.signal("CONT")
    assert(helper.wait_for(function() return helper.read_file(log) ~= ticks end, 10))
    assert.is_false(helper.is_free(srv, key(name)))
    h.signal("TERM")
    assert.equals(128 + 15, h.finish())
    assert.is_true(helper.is_free(srv, key(name)))
  end)

  it("on a terminal, gives it to the command's group: it reads the terminal, Ctrl-C reaches it once", function()
    if not os.execute("command -v script >/dev/null 2>&1") then
      return pending("needs script(1) (util-linux) for a pseudo-terminal")
    end
    local name = helper.unique_name("tty")
    local base = ("%s/tty-%d"):format(helper.tmp, math.random(1, 1e9))
    -- script(1) runs dlock on a pseudo-terminal and passes on what the fifo
    -- gets as typed keys: a line once the command is ready, then ^C once it
    -- waits in its loop (which ends once the trap has run)
    local cmd = dlock_cmd(("%s -- sh -c %s"):format(q(name), q(
      [[n=0; trap 'n=$((n + 1))' INT; echo ready; read line; echo "got:$line"; ]] ..
      [[while [ $n -eq 0 ]; do echo looping; sleep 0.05 & wait; done; sleep 0.5; echo "INT x$n"]])), true)
    local function typed(what, after)
      return ("i=0; until grep -q %s %s.out 2>/dev/null || [ $i -gt 400 ]; do sleep 0.05; i=$((i + 1)); done; printf %s >&3")
        :format(q(after), q(base), q(what))
    end
    -- script runs in the foreground of this shell (a background job would
    -- have SIGINT ignored, and so would the command); the typing, behind it
    local sh = table.concat({
      ("mkfifo %s.in"):format(q(base)),
      ("(exec 3>%s.in; %s; %s; exec sleep 30) >/dev/null 2>&1 &"):format(q(base), typed("hello\\n", "ready"), typed("\\003", "looping")),
      ("typist=$!; timeout -k 5 60 script -qec %s /dev/null <%s.in >%s.out 2>&1; echo \"exit=$?\" >>%s.out; kill $typist"):format(
        q(cmd), q(base), q(base), q(base)),
    }, "\n")
    assert(os.execute(("sh -c %s"):format(q(sh))))
    local out = helper.read_file(base .. ".out") or ""
    assert.truthy(out:find("got:hello", 1, true), out)
    -- the terminal's SIGINT reached the command once, not dlock (which
    -- would pass it on again), and the command then ended normally
    assert.truthy(out:find("INT x1", 1, true), out)
    assert.truthy(out:match("exit=0%s*$"), out)
    assert.is_true(helper.is_free(srv, key(name)))
  end)

  it("keeps renewing while something else stops the command (SIGSTOP); a lease lost while stopped is SIGTERM before SIGCONT #timing", function()
    local name = helper.unique_name("stopped")
    local h, _, group = start_logged(name, "--lease 1",
      [[echo "started $$" >>LOG; while :; do sleep 0.05; done]])
    assert(os.execute("kill -STOP " .. group))
    dlock.sleep(2.5)                              -- 2.5 leases
    assert.is_not.equals("T", (proc_stat(h.pid)))  -- dlock runs on, and renews
    assert.is_false(helper.is_free(srv, key(name)))
    assert(os.execute("kill -CONT " .. group))
    h.signal("TERM")
    assert.equals(128 + 15, h.finish())

    -- stopped with dlock (TSTP) past the lease: on SIGCONT the command is
    -- sent SIGTERM before it is continued, and never runs unlocked
    name = helper.unique_name("stopped")
    local log
    h, log = start_logged(name, "--lease 1", [[trap 'echo CONT >>LOG' CONT; ]] ..
      [[trap 'echo TERM >>LOG; exit 9' TERM; echo "started $$" >>LOG; while :; do sleep 0.05; done]])
    h.signal("TSTP")
    assert(helper.wait_for(function() return proc_stat(h.pid) == "T" end, 10),
           ("dlock is %s: %s"):format(tostring(proc_stat(h.pid)), h.output()))
    local stopped_at = dlock.now()
    assert(helper.wait_for(function() return srv.cli("exists", key(name)) == "0" end, 15))
    -- and gone by dlock's own clock too: its last renewal was sent before
    -- it stopped, so its lease ran out a lease after that at the latest
    -- (the server's clock, which expired the key, may have jumped ahead)
    dlock.sleep(math.max(0, stopped_at + 1.1 - dlock.now()))
    h.signal("CONT")
    assert.equals(124, h.finish(), h.output())
    local text = helper.read_file(log)
    assert.truthy(text:find("TERM", 1, true), text)
    assert.is_nil(text:find("CONT\n.*TERM"), text)  -- no CONT trap ran before the TERM one
    assert.truthy(h.output():find("while stopped; sent SIGTERM", 1, true), h.output())
  end)

  it("says when the release is not confirmed, and still exits with the command's status", function()
    local name = helper.unique_name("unconfirmed")
    local code, out = run(("%s -- sh -c %s"):format(q(name),
      q(("redis-cli -p %d client pause 2500 all >/dev/null; exit 3"):format(srv.port))))
    assert.equals(3, code, out)
    assert.truthy(out:find(name .. ": the release was not confirmed (connection: ", 1, true), out)
  end)

  it("status says who holds a lock and how many wait; release --force frees it", function()
    local name = helper.unique_name("status")
    local code, out = run("status " .. q(name))
    assert.equals(1, code, out)
    assert.equals(name .. ": free\n", out)
    local h = spawn(("--label nightly-report --lease 5 %s -- sh -c 'echo held; exec sleep 60'"):format(q(name)))
    assert(helper.wait_for(function() return h.output():find("held") end, 10))
    code, out = run("status " .. q(name))
    assert.equals(0, code, out)
    local tok = tonumber(helper.lock_field(srv, key(name), "t"))
    assert.truthy(out:find(("%s: held, ttl %%d+%%.%%d s, token %d, waiters 0"):format(
      name:gsub("%p", "%%%0"), tok)), out)
    assert.truthy(out:match("\n  nightly%-report  x1  client %x+\n"), out)
    -- --force is required
    code, out = run("release " .. q(name))
    assert.equals(125, code)
    assert.truthy(out:find("--force", 1, true), out)
    code, out = run("release --force " .. q(name))
    assert.equals(0, code, out)
    assert.equals(name .. ": released\n", out)
    -- the holder learns it lost the lock: its command is stopped
    assert.equals(124, h.finish(15), h.output())
    code, out = run("release --force " .. q(name))
    assert.equals(1, code, out)
    assert.equals(name .. ": was free\n", out)
    -- a key without a TTL (persisted by hand) has "no expiry"
    local c = assert(helper.client{ url = srv.url, label = "by-hand" })
    local l = c:lock(name)
    assert(l:acquire{ expire = 100 })
    assert.equals("1", srv.cli("persist", key(name)))
    code, out = run("status " .. q(name))
    assert.equals(0, code, out)
    assert.truthy(out:find(name .. ": held, ttl no expiry, token ", 1, true), out)
    assert.truthy(out:find("\n  by-hand  x1  client " .. c.id, 1, true), out)
    assert(l:release())
    c:close()
  end)

  it("the strict JSON decoder of these specs refuses what is not JSON", function()
    assert.same({ a = { 1, 2.5, "x\27y\195\169" }, b = true }, (json_decode(' {"a":[1,2.5,"x\\u001by\\u00e9"] ,"b":true}\n')))
    assert.equals("\240\159\152\128", json_decode('"\\ud83d\\ude00"'))
    for _, bad in ipairs({ "", "{", '{"a":1,}', "[1,]", "01", "1.", ".5", "nul", '{"a":1,"a":2}', "{a:1}",
                           '"\1"', '"\\x41"', '"\\ud83d"', '"\255"', "1 2", "'a'", "[1]]" }) do
      assert.is_false(pcall(json_decode, bad), "decoded: " .. bad)
    end
  end)

  it("status --json: the facts of status as one JSON object on one line, and its exit status", function()
    local name = helper.unique_name("json")
    -- stdout alone: what a monitoring script reads
    local function status_json(args, env)
      local f = assert(io.popen(dlock_cmd(args, nil, env) .. " 2>/dev/null; echo \"exit=$?\""))
      local out = f:read("*a")
      f:close()
      return tonumber(out:match("exit=(%d+)%s*$")), (out:gsub("exit=%d+%s*$", ""))
    end
    local code, out = status_json("status --json " .. q(name))
    assert.equals(1, code, out)
    assert.truthy(out:match("^[^\n]+\n$"), "not one line: " .. out)
    local t, keys = json_decode(out)
    assert.same({ "name", "held", "ttl", "token", "waiters", "holders" }, keys)
    assert.equals(name, t.name)
    assert.is_false(t.held)
    assert.equals(NULL, t.ttl)
    assert.equals(NULL, t.token)
    assert.equals(NULL, t.waiters)
    assert.same({}, t.holders)
    -- the option may come first, as every option may
    assert.equals(out, select(2, status_json("--json status " .. q(name))))
    -- held by a dlock whose label has a quote, a backslash, ESC, a C1
    -- control (CSI), UTF-8 and a byte that is not UTF-8
    local label = 'night "ly"\\ \27[2J \194\155 \195\169 \255'
    local h = spawn(("--label %s --lease 5 %s -- sh -c 'echo held; exec sleep 60'"):format(q(label), q(name)))
    assert(helper.wait_for(function() return h.output():find("held") end, 10))
    local waiter = spawn(("%s -- true"):format(q(name)))
    assert(helper.wait_for(function()
      local _, o = status_json("status --json " .. q(name))
      return o:find('"waiters":1', 1, true)
    end, 10))
    code, out = status_json("status --json " .. q(name))
    assert.equals(0, code, out)
    assert.truthy(out:match("^[^\n]+\n$"), "not one line: " .. out)
    assert.falsy(out:sub(1, -2):find("[%z\1-\31\127]"), "a control byte in: " .. out)
    assert.falsy(out:find("\194[\128-\159]"), "a C1 control in: " .. out)
    t, keys = json_decode(out)
    assert.same({ "name", "held", "ttl", "token", "waiters", "holders" }, keys)
    assert.is_true(t.held)
    assert.equals(tonumber(helper.lock_field(srv, key(name), "t")), t.token)
    assert.equals(1, t.waiters)
    assert.is_true(t.ttl > 0 and t.ttl <= 5, tostring(t.ttl))
    assert.equals(1, #t.holders)
    local w = t.holders[1]
    assert.equals('night "ly"\\ \27[2J \194\155 \195\169 \239\191\189', w.label)
    assert.equals(1, w.count)
    assert.truthy(w.client:match("^%x+$") and #w.client >= 16, w.client)
    assert.equals(NULL, w.owner)
    assert.equals(NULL, w.mode)
    -- the same facts as the text
    local _, text = run("status " .. q(name))
    assert.truthy(text:find(("token %d, waiters 1"):format(t.token), 1, true), text)
    assert.truthy(text:find("  x1  client " .. w.client .. "\n", 1, true), text)
    assert.equals(0, (run("release --force " .. q(name))))
    assert.equals(124, h.finish(15), h.output())
    assert.equals(0, waiter.finish(15), waiter.output())
    -- an explicit owner, a write mode, and a key without a TTL
    local c = assert(helper.client{ url = srv.url, label = "by-hand" })
    local rw = c:rwlock(name .. "-rw", { owner = "job-8" })
    assert(rw.write:acquire{ expire = 100 })
    assert.equals("1", srv.cli("persist", key(name .. "-rw")))
    code, out = status_json("status --json " .. q(name .. "-rw"))
    assert.equals(0, code, out)
    t = json_decode(out)
    assert.equals(NULL, t.ttl)
    assert.same({ label = "by-hand", count = 1, client = c.id, owner = "job-8", mode = "write" },
      t.holders[1])
    assert(rw.write:release())
    c:close()
    -- what a JSON reader of the system says, where there is one
    local py = os.execute("python3 -c 'import json' >/dev/null 2>&1")
    if py == true or py == 0 then
      local _, held = status_json("status --json " .. q(name))
      local f = assert(io.popen("unset LD_PRELOAD; python3 -c 'import json,sys; d = json.loads(sys.stdin.read()); print(d[\"held\"])' <<'EOF'\n"
        .. held .. "EOF\n"))
      assert.equals("False\n", f:read("*a"))
      f:close()
    end
    -- a failure prints nothing on stdout, and exits 125
    code, out = status_json(("--url redis://127.0.0.1:%d/0 status --json %s"):format(helper.free_port(), q(name)))
    assert.equals(125, code, out)
    assert.equals("", out)
    -- --json is for status only
    for _, args in ipairs({ "--json " .. q(name) .. " -- true", "release --force --json " .. q(name) }) do
      code, out = run(args)
      assert.equals(125, code, out)
      assert.truthy(out:find("dlock: --json goes with status\n", 1, true), out)
    end
  end)

  it("reports bad use with 125, and a command it cannot run with 127 or 126", function()
    local name = helper.unique_name("bad")
    for _, c in ipairs {
      { "", "no lock NAME" },
      { q(name), "put -- between NAME and the command" },
      { q(name) .. " true", "put -- between NAME and the command" },
      { q(name) .. " --", "no COMMAND" },
      { "--bogus " .. q(name) .. " -- true", "unknown option '--bogus'" },
      { "--wait soon " .. q(name) .. " -- true", "--wait wants a number of seconds" },
      { "--wait -1 " .. q(name) .. " -- true", "--wait wants a number of seconds" },
      { "-E 256 " .. q(name) .. " -- true", "--conflict-exit-code wants a whole number" },
      { "-n --wait 1 " .. q(name) .. " -- true", "not both" },
      { "--lease 0 " .. q(name) .. " -- true", "--lease wants a number of seconds above 0" },
      { "--master m " .. q(name) .. " -- true", "--master goes with --sentinel" },
      { "--sentinel redis://127.0.0.1:1 " .. q(name) .. " -- true", "--sentinel needs --master" },
      { "--url redis://127.0.0.1:1 --cluster redis://127.0.0.1:2 " .. q(name) .. " -- true", "give one of" },
      { "--url ftp://x " .. q(name) .. " -- true", "scheme" },
      { "--force " .. q(name) .. " -- true", "--force goes with release" },
      { "status", "usage: dlock [options] status [--json] [--] NAME" },
      { "status a -- b", "usage: dlock [options] status [--json] [--] NAME" },
      { "status ''", "the lock NAME is empty" },
      { "--label -- " .. q(name) .. " -- true", "--label needs a value" },
    } do
      local code, out = run(c[1])
      assert.equals(125, code, c[1] .. ": " .. out)
      assert.truthy(out:find(c[2], 1, true), c[1] .. ": " .. out)
    end
    local code, out = run("--url redis://127.0.0.1:1 " .. q(name) .. " -- true")
    assert.equals(125, code, out)
    assert.truthy(out:find("cannot connect: connection", 1, true), out)
    code, out = run(q(name) .. " -- /nonexistent/dlock-no-such-command")
    assert.equals(127, code, out)
    code, out = run(q(name) .. " -- " .. q(root .. "/README.md"))
    assert.equals(126, code, out)
    assert.is_true(helper.is_free(srv, key(name)))
    -- a lock named like a subcommand, and one that starts with -: after --
    code, out = run("-- status -- sh -c 'echo \"$DLOCK_NAME\"'")
    assert.equals(0, code, out)
    assert.equals("status\n", out)
    code, out = run("status -- -dash")
    assert.equals(1, code, out)
    assert.equals("-dash: free\n", out)
    code, out = run("-n -- -dash -- sh -c 'echo \"$DLOCK_NAME\"'")
    assert.equals(0, code, out)
    assert.equals("-dash\n", out)
  end)

  it("takes the password from REDIS_PASSWORD or --password-file, never from its command line", function()
    local s = passworded()
    local name = helper.unique_name("auth")
    local servers = ("--servers %s,%s,%s"):format(q(s[1].url), q(s[2].url), q(s[3].url))
    local file = helper.tmp .. "/password"
    local f = assert(io.open(file, "w"))
    f:write(PASSWORD, "\n")
    f:close()
    -- REDIS_PASSWORD read from the file by the shell: the password is on
    -- no command line, not even the shell's
    local env = ("REDIS_PASSWORD=\"$(cat %s)\""):format(q(file))
    local go = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".go"
    local h = spawn(("%s %s -- sh -c %s"):format(servers, q(name),
      q(("echo held; while [ ! -e %s ]; do sleep 0.05; done"):format(q(go)))), nil, env)
    assert(helper.wait_for(function() return h.output():find("held") end, 10), h.output())
    local argvs, seen = cmdlines(name), false
    for _, a in ipairs(argvs) do
      assert.falsy(a:find("s3cr", 1, true), a)
      seen = seen or a:match("^%S+ %S+/bin/dlock %-%-servers ") ~= nil
    end
    assert.is_true(seen, table.concat(argvs, "\n"))  -- dlock's own was among them
    -- --password-file: its first line, with --url and with --servers
    local code, out = run(("--password-file %s --url %s status %s"):format(q(file), q(s[1].url), q(name)))
    assert.equals(0, code, out)
    assert.truthy(out:find(name .. ": held", 1, true), out)
    code, out = run(("--password-file=%s %s status %s"):format(q(file), servers, q(name)))
    assert.equals(0, code, out)
    assert.is_nil(h.code())
    assert(io.open(go, "w")):close()
    assert.equals(0, h.finish(), h.output())
    -- with REDIS_URL, and REDIS_PASSWORD with --url
    code, out = run(("--password-file %s %s -- true"):format(q(file), q(name)), "REDIS_URL=" .. q(s[2].url))
    assert.equals(0, code, out)
    code, out = run(("--url %s status %s"):format(q(s[1].url), q(name)), env)
    assert.equals(1, code, out)
    -- REDIS_USERNAME; a URL's own credentials are its own
    f = assert(io.open(file .. ".alice", "w"))
    f:write("alice-", PASSWORD)
    f:close()
    code, out = run(("--password-file %s --url %s status %s"):format(q(file .. ".alice"), q(s[1].url), q(name)),
      "REDIS_USERNAME=alice")
    assert.equals(1, code, out)
    code, out = run(("--url %s status %s"):format(q(("redis://:%s@127.0.0.1:%d/0"):format(ENCODED, s[1].port)), q(name)),
      "REDIS_PASSWORD=wrong")
    assert.equals(1, code, out)
    -- a wrong password; a file that cannot be read, or is empty: 125, and
    -- no password shown
    code, out = run(("%s status %s"):format(servers, q(name)), "REDIS_PASSWORD=" .. q("wrong" .. PASSWORD))
    assert.equals(125, code, out)
    assert.falsy(out:find("s3cr", 1, true), out)
    code, out = run("--password-file /nonexistent/dlock-password status " .. q(name))
    assert.equals(125, code, out)
    assert.truthy(out:find("--password-file", 1, true), out)
    assert.truthy(out:find("/nonexistent/dlock-password", 1, true), out)
    code, out = run("--password-file /dev/null status " .. q(name))
    assert.equals(125, code, out)
    assert.truthy(out:find("/dev/null", 1, true), out)
  end)

  it("with --sentinel, REDIS_PASSWORD or --password-file is the master's, REDIS_SENTINEL_PASSWORD the sentinels'", function()
    local master = passworded()[1]
    local conf = helper.tmp .. "/sentinel-auth.conf"
    local f = assert(io.open(conf, "w"))
    f:write(table.concat({ "bind 127.0.0.1", "daemonize yes", "dir " .. helper.tmp,
      "sentinel resolve-hostnames no",
      ("sentinel monitor authed 127.0.0.1 %d 1"):format(master.port),
      ('sentinel auth-pass authed "%s"'):format(PASSWORD),
      'requirepass "sentinel-pw"', "" }, "\n"))
    f:close()
    local sentinel = helper.start_redis(nil, { conf = conf, sentinel = true })
    local file = helper.tmp .. "/password.sentinel"
    f = assert(io.open(file, "w"))
    f:write(PASSWORD, "\n")
    f:close()
    local name = helper.unique_name("sentinel-auth")
    local args = ("--sentinel redis://127.0.0.1:%d --master authed"):format(sentinel.port)
    local code, out = run(("%s --password-file %s %s -- true"):format(args, q(file), q(name)),
      "REDIS_SENTINEL_PASSWORD=sentinel-pw")
    local code2, out2 = run(("%s status %s"):format(args, q(name)), "REDIS_PASSWORD=\"$(cat " .. q(file) .. ")\"")
    local code3, out3 = run(("%s status %s"):format(args, q(name)), "REDIS_SENTINEL_PASSWORD=sentinel-pw")
    sentinel.stop()
    assert.equals(0, code, out)
    -- without the sentinels' password, or without the master's
    assert.equals(125, code2, out2)
    assert.truthy(out2:find(("NOAUTH .*%%(127%%.0%%.0%%.1:%d%%).*REDIS_SENTINEL_PASSWORD"):format(sentinel.port)), out2)
    assert.equals(125, code3, out3)
    assert.truthy(out3:find(("NOAUTH .*%%(127%%.0%%.0%%.1:%d%%).*REDIS_PASSWORD"):format(master.port)), out3)
  end)

  it("says where the password goes when the server wants one (NOAUTH): no Lua advice", function()
    local s = passworded()
    local name = helper.unique_name("noauth")
    for _, args in ipairs { ("--url %s status %s"):format(q(s[1].url), q(name)),
                            ("--url %s %s -- true"):format(q(s[1].url), q(name)) } do
      local code, out = run(args)
      assert.equals(125, code, out)
      assert.truthy(out:find("NOAUTH", 1, true), out)
      assert.truthy(out:find("REDIS_PASSWORD", 1, true), out)
      assert.truthy(out:find("--password-file", 1, true), out)
      assert.falsy(out:find("connect{", 1, true), out)
    end
  end)

  it("escapes control bytes from Redis (labels, owners) and from its arguments in all it prints", function()
    local name = helper.unique_name("evil")
    local c = assert(helper.client{ url = srv.url, label = "evil\27]0;pwned\7\27[2J" })
    local l = c:lock(name)
    assert(l:acquire{ expire = 100 })
    local owned = c:lock(name .. "-owned", { owner = "job\27[2J\r\n  forged" })
    assert(owned:acquire{ expire = 100 })
    local code, out = run("status " .. q(name))
    assert.equals(0, code, out)
    assert.falsy(out:find("[\27\7]"), out)
    assert.truthy(out:find("\n  evil\\x1b]0;pwned\\x07\\x1b[2J  x1  client " .. c.id, 1, true), out)
    code, out = run("status " .. q(name .. "-owned"))
    assert.equals(0, code, out)
    assert.falsy(out:find("[\27\r]"), out)
    assert.truthy(out:find("  owner job\\x1b[2J\\x0d\\x0a  forged\n", 1, true), out)
    assert(l:release())
    assert(owned:release())
    c:close()
    -- a NAME, and an option's value quoted in an error
    code, out = run("status " .. q("n\27[2J\7"))
    assert.equals(1, code, out)
    assert.equals("n\\x1b[2J\\x07: free\n", out)
    code, out = run("--wait " .. q("\27]0;x\7") .. " " .. q(name) .. " -- true")
    assert.equals(125, code, out)
    assert.falsy(out:find("[\27\7]"), out)
    assert.truthy(out:find("not '\\x1b]0;x\\x07'", 1, true), out)
  end)

  it("--insecure warns on stderr, once, that the certificate is not verified", function()
    if not require("dlock.core").tls_built then
      return pending("needs a dlock built with TLS")
    end
    local certs = helper.tls_certs()
    local tls = helper.start_redis(nil, { tls = certs })
    local name = helper.unique_name("insecure")
    local function stderr(args)              -- stderr alone, and the exit status
      local f = assert(io.popen(dlock_cmd(args) .. " 2>&1 >/dev/null; echo \"exit=$?\""))
      local out = f:read("*a")
      f:close()
      return tonumber(out:match("exit=(%d+)%s*$")), (out:gsub("exit=%d+%s*$", ""))
    end
    local code, err = stderr(("--url %s --insecure status %s"):format(q(tls.url), q(name)))
    local code2, err2 = stderr(("--url %s --cacert %s status %s"):format(q(tls.url), q(certs.ca), q(name)))
    tls.stop()
    assert.equals(1, code, err)
    assert.equals("dlock: warning: --insecure: the server's TLS certificate is not verified\n", err)
    assert.equals(1, code2, err2)
    assert.equals("", err2)
  end)

  --- The text of troff source: no comments, font escapes or requests'
  --- dots; \- is -, the named characters used in doc/dlock.1 are plain.
  local function troff_text(src)
    src = src:gsub("\\%-", "-"):gsub("\\f[BIRP]", ""):gsub("\\%(dq", '"')
      :gsub("\\%(lq", '"'):gsub("\\%(rq", '"'):gsub("\\e", "\\")
    local out = {}
    for line in (src .. "\n"):gmatch("([^\n]*)\n") do
      if not line:match("^%.\\\"") then out[#out + 1] = line end
    end
    return table.concat(out, "\n")
  end

  --- The options (-x and --xyz) named in the text of s.
  local function options_in(s, into)
    for o in s:gmatch("%-%-?%a[%w-]*") do
      if not o:match("^%-%-?$") then into[o] = true end
    end
    return into
  end

  --- The exit statuses (numbers, and 128+N) named in s.
  local function statuses_in(s)
    local t = {}
    for n in (" " .. s):gmatch("[^%w+%-](%d+%+?N?)") do t[n] = true end
    return t
  end

  local function set_list(t)
    local l = {}
    for k in pairs(t) do l[#l + 1] = k end
    table.sort(l)
    return table.concat(l, " ")
  end

  it("--help and the man page doc/dlock.1 name the same options and exit statuses", function()
    local code, help = run("--help")
    assert.equals(0, code, help)
    local man = "\n" .. troff_text(assert(helper.read_file(root .. "/doc/dlock.1")))
    local function section(title)
      return assert(man:match("\n%.SH " .. title .. "\n(.-\n)%.SH "), "no .SH " .. title .. " in doc/dlock.1")
    end
    -- --help's options: the tags of its option lines (an indented line
    -- that starts with -, up to two spaces), from "Lock options:" to
    -- "Exit status:"; the man page's: the tags (.TP lines) of OPTIONS.
    local opts_help = {}
    local listing = assert(help:match("\nLock options:\n(.-)\nExit status:\n"), help)
    for line in listing:gmatch("[^\n]+") do
      if line:match("^%s+%-") then
        options_in(line:match("^%s*(%-.-)%s%s+%S") or line, opts_help)
      end
    end
    local opts_man = {}
    for tag in section("OPTIONS"):gmatch("\n%.TP\n([^\n]+)") do options_in(tag, opts_man) end
    assert.is_true(opts_help["--json"] and opts_help["-w"] and opts_help["--cacertdir"] and opts_help["-V"]
      and true or false, set_list(opts_help))
    assert.equals(set_list(opts_help), set_list(opts_man))
    -- the exit statuses, and what status and release exit with
    local exit_help = assert(help:match("\nExit status:\n(.*)$"), help)
    local exit_man = section("EXIT STATUS")
    assert.equals("0 1 124 125 126 127 128+N", set_list(statuses_in(exit_help)))
    assert.equals(set_list(statuses_in(exit_help)), set_list(statuses_in(exit_man)))
    for _, sub in ipairs({ "status", "release" }) do
      local says = assert(exit_help:match("\n%s*" .. sub .. ":%s+([^\n]+)"), sub)
      assert.truthy(exit_man:find("\n.B " .. sub .. "\n" .. says:gsub("%p", "%%%0") .. "%.?\n"),
        "doc/dlock.1's EXIT STATUS does not say, for " .. sub .. ": " .. says)
    end
    -- the usage lines, and the version
    for _, form in ipairs({ "status [--json] NAME", "release --force NAME" }) do
      assert.truthy(help:find("dlock [options] " .. form, 1, true), form)
    end
    -- the SYNOPSIS as man sets it: .B and .I join their arguments with
    -- spaces, .BR and the like without; .br breaks the line
    local words = {}
    for line in section("SYNOPSIS"):gmatch("[^\n]+") do
      local macro, rest = line:match("^%.(%a+)%s*(.*)$")
      if macro == "br" then words[#words + 1] = "\n"
      else
        local args = {}
        local r = rest or line
        while r ~= "" do
          local quoted, after = r:match('^"([^"]*)"%s*(.*)$')
          if quoted then args[#args + 1], r = quoted, after
          else
            local word, after2 = r:match("^(%S+)%s*(.*)$")
            args[#args + 1], r = word, after2
          end
        end
        words[#words + 1] = table.concat(args, (macro == nil or #macro == 1) and " " or "")
      end
    end
    local synopsis = table.concat(words, " "):gsub(" ?\n ?", "\n")
    assert.truthy(synopsis:find("dlock [options] status [--json] name", 1, true), synopsis)
    assert.truthy(synopsis:find("dlock [options] release --force name", 1, true), synopsis)
    assert.truthy(man:find('\n%.TH DLOCK 1 %d%d%d%d%-%d%d%-%d%d "' .. dlock._VERSION:gsub("%p", "%%%0") .. '"'),
      "doc/dlock.1's .TH names another version than " .. dlock._VERSION)
    for _, s in ipairs({ "NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "ENVIRONMENT",
                         "EXAMPLES", "SEE ALSO" }) do
      assert.truthy(man:find("\n.SH " .. s .. "\n", 1, true), "no .SH " .. s)
    end
    for _, v in ipairs({ "REDIS_URL", "REDIS_PASSWORD", "REDIS_USERNAME", "REDIS_SENTINEL_PASSWORD",
                         "REDIS_SENTINEL_USERNAME", "DLOCK_NAME", "DLOCK_TOKEN" }) do
      assert.truthy(section("ENVIRONMENT"):find(v, 1, true), "ENVIRONMENT does not name " .. v)
      assert.truthy(help:find(v, 1, true), "--help does not name " .. v)
    end
  end)

  it("the man page renders without a warning (groff, man -l)", function()
    local page = root .. "/doc/dlock.1"
    local function sh(cmd)            -- (never under make asan's LD_PRELOAD)
      local _, out, code = helper.run_sh(cmd)
      return code, out
    end
    if sh("command -v groff >/dev/null") ~= 0 then
      return pending("needs groff (Debian: groff-base) to check doc/dlock.1")
    end
    local code, out = sh("groff -man -Tutf8 -ww -z " .. q(page))
    assert.equals(0, code, out)
    assert.equals("", out, "groff warns about doc/dlock.1")
    if sh("command -v man >/dev/null") ~= 0 then return end
    code, out = sh("LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l " .. q(page) .. " | col -bx")
    assert.equals(0, code, out)
    assert.truthy(out:find("dlock - hold a distributed lock on Redis while a command runs", 1, true), out)
    assert.truthy(out:find("\n       -n, --nonblock\n", 1, true), out)
    assert.truthy(out:find("\nEXIT STATUS\n", 1, true), out)
    assert.falsy(out:find("warning:", 1, true), out)
  end)

  it("--help documents every option and exit status; --version", function()
    local code, out = run("--help")
    assert.equals(0, code)
    for _, opt in ipairs { "--wait", "--nonblock", "--conflict-exit-code", "--lease",
        "--kill-after", "--label", "--url", "--cluster", "--sentinel", "--master",
        "--servers", "--prefix", "--cacert", "--cert", "--key", "--insecure",
        "status [--json] NAME", "--json", "release --force NAME", "DLOCK_NAME", "DLOCK_TOKEN", "REDIS_URL",
        "REDIS_PASSWORD", "REDIS_USERNAME", "--password-file",
        "124", "125", "126", "127", "128+N" } do
      assert.truthy(out:find(opt, 1, true), opt)
    end
    code, out = run("--version")
    assert.equals(0, code)
    assert.equals(dlock._VERSION .. "\n", out)
  end)
end)
