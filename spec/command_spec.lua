-- The `dlock` command (bin/dlock), run as a user runs it: a real process
-- around real commands, against a redis-server of its own (CLIENT PAUSE
-- here must not stall the other specs).
local dlock = require "dlock"
local helper = require "helper"

local here = debug.getinfo(1, "S").source:match("^@(.*)$") or "spec/command_spec.lua"
local root = here:match("^(.*)/spec/[^/]*$") or "."
do                                            -- as an absolute path
  local p = assert(io.popen("cd '" .. root .. "' && pwd"))
  root = p:read("*l")
  p:close()
end

local function q(s) return "'" .. tostring(s):gsub("'", [['\'']]) .. "'" end

local srv
local function dlock_cmd(args)
  return ("REDIS_URL=%s %s %s/bin/dlock %s"):format(q(srv.url), helper.lua_cmd(), q(root), args)
end

--- Run dlock with args (a shell fragment) to its end: its exit status and
--- its output (stdout and stderr).
local function run(args)
  local f = assert(io.popen(dlock_cmd(args) .. " 2>&1; echo \"exit=$?\""))
  local out = f:read("*a")
  f:close()
  return tonumber(out:match("exit=(%d+)%s*$")), (out:gsub("exit=%d+%s*$", ""))
end

local n = 0
--- Start dlock with args in the background, under a shell that records its
--- exit status. Returns a handle.
local function spawn(args)
  n = n + 1
  local base = ("%s/cmd-%d-%d"):format(helper.tmp, n, math.random(1, 1e9))
  local script = ("%s >%s.out 2>&1 & echo $! >%s.pid; wait $!; echo $? >%s.code")
    :format(dlock_cmd(args), base, base, base)
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
  return h
end

local function key(name) return "dlock:{" .. name .. "}" end

local function file_has(path, text)
  return function() return (helper.read_file(path) or ""):find(text, 1, true) end
end

describe("the dlock command", function()
  setup(function() srv = helper.start_redis() end)
  teardown(function() if srv then srv.stop() end end)

  it("runs the command holding the lock, passes DLOCK_NAME and DLOCK_TOKEN, and its exit status", function()
    local name = helper.unique_name("cmd")
    local code, out = run(("%s -- sh -c %s"):format(q(name),
      q([[echo "name=$DLOCK_NAME token=$DLOCK_TOKEN"; redis-cli -p $1 hget "dlock:{$DLOCK_NAME}" n; exit 7]])
      .. " sh " .. srv.port))
    assert.equals(7, code, out)
    local tok = assert(tonumber(out:match("token=(%d+)")), out)
    assert.truthy(out:find("name=" .. name, 1, true), out)
    -- inside, the lock was held (one hold), and its token was the command's
    assert.truthy(out:match("\n1\n") or out:match("^1\n"), out)
    assert.equals(tok, tonumber(srv.cli("hget", key(name), "t")))
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
    assert.is_nil(waiter.finish(0.3))
    holder.signal("INT")                        -- passed on: sh dies of it
    assert.equals(128 + 2, holder.finish())
    assert.equals(0, waiter.finish())
    assert.truthy(waiter.output():find("second"))
  end)

  it("kills the command when the lock is deleted under it, and exits 124", function()
    local name = helper.unique_name("lost")
    local log = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".log"
    local h = spawn(("--lease 1 %s -- sh -c %s"):format(q(name), q(
      ("trap 'echo TERM >>%s; exit 3' TERM; echo started >>%s; sleep 60 & wait"):format(q(log), q(log)))))
    assert(helper.wait_for(file_has(log, "started"), 10), h.output())
    assert.equals("1", srv.cli("del", key(name)))
    assert.equals(124, h.finish(10), h.output())
    assert.truthy((helper.read_file(log)):find("TERM"))
    assert.truthy(h.output():find("the lock was lost (lost: ", 1, true), h.output())
  end)

  it("SIGKILLs a command that ignores SIGTERM, --kill-after the loss (CLIENT PAUSE past the lease)", function()
    local name = helper.unique_name("paused")
    local log = helper.tmp .. "/" .. name:gsub("%W", "_") .. ".log"
    local h = spawn(("--lease 1 --kill-after 0.5 %s -- sh -c %s"):format(q(name), q(
      ("trap '' TERM; echo \"started $$\" >>%s; while :; do sleep 0.05; done"):format(q(log)))))
    assert(helper.wait_for(file_has(log, "started"), 10), h.output())
    local group = assert(tonumber(helper.read_file(log):match("started (%d+)")))
    assert.equals("OK", srv.cli("client", "pause", "3000", "write"))
    assert.equals(124, h.finish(20), h.output())
    srv.cli("client", "unpause")
    local out = h.output()
    assert.truthy(out:find("sending SIGTERM", 1, true), out)
    assert.truthy(out:find("sending SIGKILL", 1, true), out)
    -- the command's whole process group is gone (its shell led it)
    -- (its processes may stay zombies a moment, until init reaps them)
    local function left()
      local p = assert(io.popen("pgrep -g " .. group .. " 2>/dev/null"))
      local pids = p:read("*a")
      p:close()
      return pids
    end
    assert.equals("", helper.wait_for(function() return left() == "" and "" end, 10) or left())
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

  it("status says who holds a lock and how many wait; release --force frees it", function()
    local name = helper.unique_name("status")
    local code, out = run("status " .. q(name))
    assert.equals(1, code, out)
    assert.equals(name .. ": free\n", out)
    local h = spawn(("--label nightly-report --lease 5 %s -- sh -c 'echo held; exec sleep 60'"):format(q(name)))
    assert(helper.wait_for(function() return h.output():find("held") end, 10))
    code, out = run("status " .. q(name))
    assert.equals(0, code, out)
    local tok = tonumber(srv.cli("hget", key(name), "t"))
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
      { "status", "usage: dlock [options] status NAME" },
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
    -- a lock named like a subcommand, with --
    assert.equals(0, (run("status -- true")))
  end)

  it("--help documents every option and exit status; --version", function()
    local code, out = run("--help")
    assert.equals(0, code)
    for _, opt in ipairs { "--wait", "--nonblock", "--conflict-exit-code", "--lease",
        "--kill-after", "--label", "--url", "--cluster", "--sentinel", "--master",
        "--servers", "--prefix", "--cacert", "--cert", "--key", "--insecure",
        "status NAME", "release --force NAME", "DLOCK_NAME", "DLOCK_TOKEN", "REDIS_URL",
        "124", "125", "126", "127", "128+N" } do
      assert.truthy(out:find(opt, 1, true), opt)
    end
    code, out = run("--version")
    assert.equals(0, code)
    assert.equals(dlock._VERSION .. "\n", out)
  end)
end)
