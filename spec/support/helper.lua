-- Test helper: real redis-server processes on free loopback ports, stopped
-- at exit (tools/with-tmp.sh also kills whatever is left in $DLOCK_TMP).
-- Specs ask for URLs here and never hard-code a port.
require "compat"
local dlock = require "dlock"

local helper = {}
local tmp = os.getenv("DLOCK_TMP")
if not tmp then
  tmp = os.tmpname()
  os.remove(tmp)
  assert(os.execute("mkdir -p " .. tmp))
end
helper.tmp = tmp
helper.lua = os.getenv("DLOCK_LUA") or "lua5.4"

--- How the specs run dlock's scripts: "fcall", as dlock does on Redis 7
--- (its function library), or, with DLOCK_SPEC_SCRIPTS=evalsha, "evalsha",
--- as on a server without functions: then every client a spec connects
--- gets functions = false unless it says otherwise, and the scripts a
--- spec drives by hand (helper.load_scripts) run with EVALSHA. CI runs
--- the suite both ways.
helper.scripts = os.getenv("DLOCK_SPEC_SCRIPTS") == "evalsha" and "evalsha" or "fcall"
--- dlock.connect as the library has it, whatever helper.scripts says
--- (kept where a second load of this file finds it: busted runs it as
--- its helper, and the specs require it again).
package.loaded["helper.connect_as_is"] = package.loaded["helper.connect_as_is"] or dlock.connect
helper.connect_as_is = package.loaded["helper.connect_as_is"]
if helper.scripts == "evalsha" then
  -- (misuse goes through as it came, to raise what it raises)
  local connect, parse_url = helper.connect_as_is, require("dlock.core").parse_url
  dlock.connect = function(opts, ...)
    local ok, url = pcall(parse_url, opts)
    if opts == nil or (type(opts) == "string" and ok and url) then opts = { url = opts } end
    if type(opts) == "table" and not getmetatable(opts) and opts.functions == nil then
      local o = { functions = false }
      for k, v in pairs(opts) do o[k] = v end
      opts = o
    end
    return connect(opts, ...)
  end
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function read(cmd)
  local f = assert(io.popen(cmd))
  local out = f:read("*a")
  f:close()
  return out
end

-- The checkout's absolute path (a host started by a spec may change
-- directory).
do
  local here = debug.getinfo(1, "S").source:match("^@(.*)$") or ""
  local root = here:match("^(.*)/spec/support/[^/]*$") or "."
  helper.root = read("cd '" .. root .. "' && pwd"):match("[^\n]*")
end

--- Run cmd in sh for a host process (haproxy, lighttpd, a game server):
--- never with the sanitizer preloaded, and with sbin on the PATH (where
--- Debian puts servers; a normal user's PATH lacks it). Returns ok, its output.
function helper.host_sh(cmd)
  local out = read("unset LD_PRELOAD; PATH=$PATH:/usr/sbin:/sbin; " .. cmd .. " 2>&1; echo \"exit=$?\"")
  return tonumber(out:match("exit=(%d+)%s*$")) == 0, (out:gsub("exit=%d+%s*$", ""))
end

--- s quoted for sh, as one word.
function helper.q(s) return "'" .. tostring(s):gsub("'", [['\'']]) .. "'" end

--- Run a shell command (not under `make asan`'s LD_PRELOAD): whether it
--- exited 0, its output (stdout and stderr), its exit status.
function helper.run_sh(cmd)
  local out = read("unset LD_PRELOAD; { " .. cmd .. "\n} 2>&1; echo \"exit=$?\"")
  local code = tonumber(out:match("exit=(%d+)%s*$"))
  return code == 0, (out:gsub("exit=%d+%s*$", "")), code
end

--- helper.run_sh's output, raising when the command fails.
function helper.must_sh(cmd)
  local ok, out = helper.run_sh(cmd)
  assert(ok, "failed: " .. cmd .. "\n" .. out)
  return out
end

function helper.read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

--- Poll cond() until it returns truthy or `timeout` seconds pass.
function helper.wait_for(cond, timeout, step)
  local deadline = dlock.now() + (timeout or 5)
  repeat
    local v = cond()
    if v then return v end
    dlock.sleep(step or 0.02)
  until dlock.now() > deadline
  return cond()
end

--- True if a local TCP socket (listening or connected, IPv4 or IPv6)
--- already uses `port`, per /proc/net/tcp* (proto "udp": a UDP socket).
function helper.port_in_use(port, proto)
  local pat = (":%04X "):format(port)
  proto = proto or "tcp"
  for _, f in ipairs({ "/proc/net/" .. proto, "/proc/net/" .. proto .. "6" }) do
    for line in (helper.read_file(f) or ""):gmatch("[^\n]+") do
      local localaddr = line:match("^%s*%d+:%s+(%S+)")
      if localaddr and (localaddr .. " "):find(pat, 1, true) then return true end
    end
  end
  return false
end

-- Ports for the servers, proxies and peers the specs start: below the
-- kernel's ephemeral range (Linux: 32768-60999). A port in that range can be
-- a client socket's own port, and one in TIME_WAIT keeps a server from
-- binding it again for a minute: a restart on the same port then fails.
local PORT_LO, PORT_HI = 10000, 32767
do
  local lo = tonumber(((helper.read_file("/proc/sys/net/ipv4/ip_local_port_range") or "")
    :match("^%s*(%d+)")))
  if lo and lo - 1 < PORT_HI then PORT_HI = math.max(lo - 1, PORT_LO + 1000) end
end

--- A loopback port free for TCP (and for `proto` too, if given: "udp"),
--- not in the set `taken` (which it then adds it to), and outside the
--- ephemeral range (or in lo..hi, if given).
function helper.free_port(taken, proto, lo, hi)
  for _ = 1, 1000 do
    local p = math.random(lo or PORT_LO, hi or PORT_HI)
    if not (taken and taken[p]) and not helper.port_in_use(p)
        and not (proto and helper.port_in_use(p, proto)) then
      if taken then taken[p] = true end
      return p
    end
  end
  error("no free loopback port")
end

--- True if some process listens on loopback TCP `port` (IPv4 or IPv6).
function helper.listening(port)
  local pat = (":%04X "):format(port)
  for _, f in ipairs({ "/proc/net/tcp", "/proc/net/tcp6" }) do
    for line in (helper.read_file(f) or ""):gmatch("[^\n]+") do
      local localaddr, st = line:match("^%s*%d+:%s+(%S+)%s+%S+%s+(%x%x)")
      if localaddr and st == "0A" and (localaddr .. " "):find(pat, 1, true) then
        return true
      end
    end
  end
  return false
end

--- True while process `pid` runs: neither gone nor a zombie. The servers
--- and workers of the specs are started in the background, so init is
--- their parent, and some inits reap orphans only every few seconds; a
--- zombie has already closed its sockets.
function helper.running(pid)
  local st = helper.read_file("/proc/" .. tostring(pid) .. "/stat")
  return st ~= nil and not st:match("^%d+ %b() [ZX]")
end

local servers = {}
--- port -> the redis-cli flags a TLS server needs ("--tls --cacert ...").
helper.cli_flags = {}
math.randomseed(os.time() + math.floor(dlock.now() * 1e6) % 1000003)

--- Certificates for TLS specs, made once per run with `openssl` in
--- $DLOCK_TMP/tls: { dir, ca, ca_key, server_crt, server_key (for
--- 127.0.0.1 and localhost), client_crt, client_key (signed by ca),
--- other_ca (a CA that signed none of them) }.
local certs
function helper.tls_certs()
  if certs then return certs end
  local d = tmp .. "/tls"
  local c = { dir = d, ca = d .. "/ca.crt", ca_key = d .. "/ca.key",
    server_crt = d .. "/server.crt", server_key = d .. "/server.key",
    client_crt = d .. "/client.crt", client_key = d .. "/client.key",
    other_ca = d .. "/other-ca.crt" }
  local key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
  local steps = {
    "mkdir -p " .. d,
    ("openssl req -x509 %s -keyout %s -out %s -days 3 -subj '/CN=dlock test CA'"):format(
      key, c.ca_key, c.ca),
    ("openssl req -x509 %s -keyout %s/other-ca.key -out %s -days 3 -subj '/CN=another CA'"):format(
      key, d, c.other_ca) }
  for _, who in ipairs({ "server", "client" }) do
    steps[#steps + 1] = ("openssl req %s -keyout %s/%s.key -out %s/%s.csr -subj '/CN=%s'"):format(
      key, d, who, d, who, who == "server" and "localhost" or "dlock test client")
    steps[#steps + 1] = ("openssl x509 -req -in %s/%s.csr -CA %s -CAkey %s -CAcreateserial " ..
      "-out %s/%s.crt -days 3%s"):format(d, who, c.ca, c.ca_key, d, who,
      who == "server" and (" -extfile %s/san.ext"):format(d) or "")
  end
  for i, cmd in ipairs(steps) do
    assert(sh(cmd .. " >/dev/null 2>&1"), "tls_certs: failed: " .. cmd)
    if i == 1 then
      local f = assert(io.open(d .. "/san.ext", "w"))
      f:write("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
      f:close()
    end
  end
  certs = c
  return c
end

--- Start a redis-server on a free loopback port; returns a handle with
--- port, url, pid, cli(...), stop(), signal(sig).
--- opts (optional): conf = a config file loaded before the command-line
--- options (redis-sentinel needs one it can rewrite), sentinel = true to
--- run in sentinel mode, tls = helper.tls_certs() to listen with TLS only
--- (url is then rediss://; cli and the helpers speak TLS to it),
--- tls_auth_clients = true to require a client certificate.
function helper.start_redis(extra, opts)
  opts = opts or {}
  local c = opts.tls
  local tls_args = c and ((" --tls-cert-file %s --tls-key-file %s --tls-ca-cert-file %s " ..
    "--tls-auth-clients %s --tls-replication yes --tls-cluster yes"):format(c.server_crt,
    c.server_key, c.ca, opts.tls_auth_clients and "yes" or "no")) or ""
  for _ = 1, 20 do
    local port = helper.free_port()
    local base = string.format("%s/redis-%d", tmp, port)
    sh("mkdir -p " .. base .. ".d")        -- its own data: no dump.rdb shared
    local cmd = string.format(
      "env -u LD_PRELOAD redis-server %s%s --bind 127.0.0.1 --save '' --appendonly no " ..
      "--daemonize yes --pidfile %s.pid --logfile %s.log --dir %s %s%s%s",
      opts.conf and ("'" .. opts.conf .. "' ") or "",
      c and ("--port 0 --tls-port " .. port) or ("--port " .. port), base, base, base .. ".d",
      extra or "", tls_args, opts.sentinel and " --sentinel" or "")
    local rcli = ("redis-cli -p %d"):format(port)
    local flags
    if c then
      flags = ("--tls --cacert %s --cert %s --key %s"):format(c.ca, c.client_crt, c.client_key)
      rcli = rcli .. " " .. flags
    end
    helper.cli_flags[port] = flags
    local function pong()
      local r = read(rcli .. " ping 2>&1")
      return r:match("PONG") or r:match("NOAUTH")
    end
    if sh(cmd .. " >/dev/null 2>&1") then
      local up, pid = helper.wait_for(pong, 3, 0.02), nil
      if up then
        pid = helper.wait_for(function()
          local s = helper.read_file(base .. ".pid")
          return s and tonumber(s:match("%d+"))
        end, 2)
        -- No pidfile: ours could not bind, and what answered is another
        -- run's server (make test runs spec files side by side).
        up = pid ~= nil
      end
      if up then
        local srv = { port = port, pid = pid,
                      url = ("redis%s://127.0.0.1:%d/0"):format(c and "s" or "", port) }
        function srv.cli(...)
          local args = {}
          for i, a in ipairs({ ... }) do args[i] = ("'%s'"):format(a) end
          return (read(("%s %s 2>&1"):format(rcli, table.concat(args, " ")))
            :gsub("%s+$", ""))
        end
        function srv.signal(sig) return sh(("kill -%s %d 2>/dev/null"):format(sig, srv.pid)) end
        local function exited() return not helper.running(srv.pid) end
        function srv.stop()
          if srv.pid then
            srv.signal("KILL")
            -- A killed server dies at once unless the kernel holds it in a
            -- write (a loaded disk can take seconds); callers expect it gone.
            helper.wait_for(exited, 20)
            os.remove(base .. ".pid")
            srv.pid = nil
            helper.cli_flags[port] = nil
          end
        end
        --- SHUTDOWN (persisting whatever its options ask for) and wait
        --- until it has exited; true if it exited by itself.
        function srv.shutdown()
          local out = srv.cli("shutdown")
          local gone = helper.wait_for(exited, 15, 0.02)
          if not gone then srv.stop() end
          return gone, out
        end
        --- Kill it and start it again on the same port (data is lost
        --- unless `extra` asked for persistence).
        function srv.restart()
          srv.stop()
          for _ = 1, 50 do
            helper.cli_flags[port] = flags
            if sh(cmd .. " >/dev/null 2>&1") and helper.wait_for(pong, 1, 0.02) then
              srv.pid = helper.wait_for(function()
                local s = helper.read_file(base .. ".pid")
                return s and tonumber(s:match("%d+")) ~= nil and tonumber(s:match("%d+"))
              end, 2)
              return srv
            end
            dlock.sleep(0.05)                     -- the port may linger briefly
          end
          error("could not restart redis-server on port " .. port)
        end
        --- Kill it now, and start it again on the same port s seconds
        --- later in the background (a short outage); srv.wait_up() waits
        --- until it answers, and knows its pid again.
        function srv.restart_after(s)
          srv.stop()
          helper.cli_flags[port] = flags
          -- (started again until it answers, as restart() does: the port
          -- may linger briefly)
          sh(("(sleep %s; for i in 1 2 3 4 5 6 7 8 9 10; do " ..
              "%s ping 2>/dev/null | grep -q PONG && break; %s; sleep 1; done) >/dev/null 2>&1 &")
            :format(s, rcli, cmd))
        end
        function srv.wait_up(timeout)
          if not helper.wait_for(pong, timeout or 10, 0.02) then return nil end
          srv.pid = helper.wait_for(function()
            local s = helper.read_file(base .. ".pid")
            return s and tonumber(s:match("%d+"))
          end, 2)
          return srv.pid ~= nil
        end
        servers[#servers + 1] = srv
        return srv
      end
    end
  end
  error("could not start redis-server on a free loopback port")
end

local default
--- The shared server of this run (started on first use).
function helper.redis()
  if not default or not default.pid then default = helper.start_redis() end
  return default
end

function helper.url() return helper.redis().url end

--- A client of the shared server; opts are merged over { url = ... }.
function helper.client(opts)
  local o = { url = helper.url() }
  for k, v in pairs(opts or {}) do o[k] = v end
  return dlock.connect(o)
end

--- Whether lock `key` is free on server handle `srv` (a free lock's hash
--- may stay a while, with n = 0, as a record for resent requests).
function helper.is_free(srv, key)
  local n = helper.lock_field(srv, key, "n")
  return n == "" or n == "0"
end

--- The hash a lock's short form `v` stands for, field -> value
--- (src/redis/scripts/README.md, THE SHORT FORM: the specs' own reading
--- of the format), or nil when v is none.
function helper.short_fields(v)
  local n, t, q, kv, g, owner = v:match("^(%d+)|(%d+)|(%d+)|([%de]*)|(g?)|(.+)$")
  if not n then return nil end
  local h = { n = n, t = t, ["q" .. owner] = q }
  if n ~= "0" then h["o" .. owner] = n end
  if kv ~= "" then h["k" .. owner] = kv end
  if g == "g" then h.g = owner end
  return h
end

--- Field `field` of lock `key` on srv as redis-cli prints it ("" when
--- there is none), whether the lock is a hash or in its short form.
--- (Any hash's field: a queue's too.)
function helper.lock_field(srv, key, field)
  local h = helper.short_fields(srv.cli("get", key))
  if h then return h[field] or "" end
  return srv.cli("hget", key, field)
end

--- Lock `key` on srv, if in its short form, made the hash it stands for,
--- with its TTL (for a spec that then adds fields by hand).
function helper.lock_unshort(srv, key)
  local h = helper.short_fields(srv.cli("get", key))
  if not h then return end
  local ttl, args = tonumber(srv.cli("pttl", key)), {}
  for f, v in pairs(h) do args[#args + 1] = f; args[#args + 1] = v end
  srv.cli("del", key)
  srv.cli("hset", key, (table.unpack or unpack)(args))
  if ttl > 0 then srv.cli("pexpire", key, tostring(ttl)) end
end

--- Lock `key` on srv as HGETALL prints it, one line per field and value,
--- whether it is a hash or in its short form (fields sorted then).
function helper.lock_hgetall(srv, key)
  local h = helper.short_fields(srv.cli("get", key))
  if not h then return srv.cli("hgetall", key) end
  local names, out = {}, {}
  for f in pairs(h) do names[#names + 1] = f end
  table.sort(names)
  for _, f in ipairs(names) do out[#out + 1] = f; out[#out + 1] = h[f] end
  return table.concat(out, "\n")
end

--- The hash tag of lock `name`'s keys (src/redis/lockid.c): the name itself,
--- but "\1" .. name for a name that starts with "}" (whose tag would be
--- empty) or with "\1". A key of that tag is on the lock's Cluster slot.
function helper.lock_tag(name)
  return name:find("^[}\1]") and "\1" .. name or name
end

--- The key of lock `name`: <prefix>{<tag>}.
function helper.lock_key(name, prefix)
  return (prefix or "dlock:") .. "{" .. helper.lock_tag(name) .. "}"
end

--- The fencing counter key of lock `name` (one counter per Cluster slot).
function helper.fence_key(name, prefix)
  local core = require "dlock.core"
  prefix = prefix or "dlock:"
  local slot = core.key_slot(helper.lock_key(name, prefix))
  return ("%s{%s}:fence"):format(prefix, core.slot_tag(slot))
end

local n = 0
function helper.unique_name(tag)
  n = n + 1
  return ("%s:%d:%d"):format(tag or "t", math.random(1, 1e9), n)
end

--- The command prefix that runs a Lua script with this tree's modules.
function helper.lua_cmd()
  return ("LUA_PATH='%s' LUA_CPATH='%s' %s"):format(package.path,
    package.cpath, helper.lua)
end

--- A TCP proxy in front of srv that can delay, lose or cut replies
--- (tools/torture/proxy.lua, on cqueues under Lua 5.4): returns a handle
--- with url, set(mode) ("pass", "delay S", "drop", "cut"; the proxy reads
--- it within 50 ms) and stop(); nil when cqueues is missing.
function helper.proxy(srv)
  if not sh("lua5.4 -e 'require \"cqueues\"' 2>/dev/null") then return nil end
  local port = helper.free_port()
  local ctl = ("%s/proxy-%d.ctl"):format(tmp, port)
  local function set(mode)
    local f = assert(io.open(ctl, "w"))
    f:write(mode, "\n")
    f:close()
  end
  set("pass")
  local pid = read(("env -u LD_PRELOAD lua5.4 tools/torture/proxy.lua %d %d '%s' " ..
    ">%s/proxy-%d.out 2>&1 & echo $!"):format(port, srv.port, ctl, tmp, port)):match("%d+")
  local pf = assert(io.open(("%s/proxy-%d.pid"):format(tmp, port), "w"))
  pf:write(pid, "\n")
  pf:close()
  assert(helper.wait_for(function() return helper.listening(port) end, 5), "proxy did not start")
  return { port = port, url = ("redis://127.0.0.1:%d"):format(port), set = function(m)
             set(m)
             dlock.sleep(0.15)
           end,
           stop = function() sh("kill -9 " .. pid .. " 2>/dev/null") end }
end

--- SUBSCRIBE to chan on srv in a background redis-cli; returns, once it
--- is subscribed, a function giving the messages it got so far, and one
--- that stops it.
function helper.listen(srv, chan)
  local out = ("%s/%s.out"):format(tmp, helper.unique_name("sub"):gsub("%W", "_"))
  local p = assert(io.popen(("redis-cli -p %d %s subscribe '%s' >'%s' 2>&1 & echo $!")
    :format(srv.port, helper.cli_flags[srv.port] or "", chan, out)))
  local pid = p:read("*a"):match("%d+")
  p:close()
  assert(helper.wait_for(function()
    return srv.cli("pubsub", "numsub", chan):match("(%d+)$") == "1"
  end, 10), "no subscriber on " .. chan)
  local function messages()
    local lines, r = {}, {}
    for l in (helper.read_file(out) or ""):gmatch("[^\n]+") do lines[#lines + 1] = l end
    for i = 1, #lines - 2 do
      if lines[i] == "message" and lines[i + 1] == chan then r[#r + 1] = lines[i + 2] end
    end
    return r
  end
  return messages, function() sh("kill " .. pid .. " 2>/dev/null") end
end

--- DEBUG SLEEP `seconds` on srv (started with --enable-debug-command
--- local) in the background; returns the sleeper's handle once the server
--- is asleep: a ping with a short timeout goes unanswered. (A fixed nap
--- after the spawn is a race: under load the sleep may start late.)
function helper.put_to_sleep(srv, seconds)
  local probe = assert(dlock.connect{ url = srv.url, command_timeout = 0.05 })
  local sleeper = helper.spawn("sh", ("redis-cli -p %d debug sleep %s"):format(srv.port, seconds))
  local asleep = helper.wait_for(function() return not probe:ping() end, 5, 0.01)
  probe:close()
  assert(asleep, "the server never slept")
  return sleeper
end

--- Start `worker.lua mode args...` in the background; returns its pid
--- and the path of its output file.
function helper.spawn(mode, ...)
  n = n + 1
  local out = ("%s/worker-%d-%d.out"):format(tmp, n, math.random(1, 1e9))
  local args = { mode, ... }
  for i, a in ipairs(args) do args[i] = ("'%s'"):format(tostring(a)) end
  local pid = read(("%s spec/support/worker.lua %s >%s 2>&1 & echo $!"):format(
    helper.lua_cmd(), table.concat(args, " "), out)):match("%d+")
  return { pid = tonumber(pid), out = out,
           output = function() return helper.read_file(out) or "" end,
           signal = function(sig) return sh(("kill -%s %s"):format(sig, pid)) end,
           alive = function() return helper.running(pid) end }
end

--- Run `worker.lua mode args...` in n processes at once and wait for all.
--- Returns the outputs.
function helper.run_parallel(nproc, mode, ...)
  local args = { mode, ... }
  for i, a in ipairs(args) do args[i] = ("'%s'"):format(tostring(a)) end
  local outs, cmds = {}, {}
  for i = 1, nproc do
    outs[i] = ("%s/par-%d-%d.out"):format(tmp, i, math.random(1, 1e9))
    cmds[i] = ("%s spec/support/worker.lua %s %d >%s 2>&1 &"):format(
      helper.lua_cmd(), table.concat(args, " "), i, outs[i])
  end
  sh("sh -c \"" .. table.concat(cmds, " "):gsub('"', '\\"') .. " wait\"")
  for i = 1, nproc do outs[i] = helper.read_file(outs[i]) or "" end
  return outs
end

--- Run `worker.lua MODE TARGET NAME ITERS COUNTER TOKENS` (its counter
--- modes: a non-atomic counter bumped under a lock) in nproc processes.
--- Returns their outputs, the counter's final text, and the fencing tokens
--- in the order the critical sections ran.
function helper.count_under_lock(nproc, mode, target, name, iters)
  local cfile = ("%s/%s.count"):format(tmp, name:gsub("%W", "_"))
  local tfile = cfile .. ".tokens"
  local outs = helper.run_parallel(nproc, mode, target, name, iters, cfile, tfile)
  local toks = {}
  for tok in (helper.read_file(tfile) or ""):gmatch("(%d+) %d+\n") do
    toks[#toks + 1] = tonumber(tok)
  end
  return outs, helper.read_file(cfile), toks
end

--- Watchdog threads of this process (one per open client), by name.
function helper.threads()
  -- popen's shell is our child: $PPID is this Lua process
  return tonumber(read("cat /proc/$PPID/task/*/comm | grep -c '^dlock-watchdog$'"))
end

--- Open sockets of this process (popen's own pipe comes and goes, so
--- pipes are not counted).
function helper.fds()
  -- popen's shell is our child: $PPID is this Lua process
  return tonumber(read("ls -l /proc/$PPID/fd | grep -c 'socket:'"))
end

-- The checkout: spec/support/../.. (two above this file's directory).
local ROOT = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/../.."

--- The scripts' layouts, read from their headers in src/redis/scripts/ (the one
--- place they are written: tools/gen-scripts.lua reads them the same way
--- for the C core): name -> { keys = { "lock", ... }, args = { "owner", ... } }.
local layouts
function helper.script_layouts()
  layouts = layouts or dofile(ROOT .. "/tools/gen-scripts.lua").layouts(ROOT .. "/src/redis/scripts")
  return layouts
end

--- How many scripts server srv has run so far: its FCALL and EVALSHA
--- calls (INFO commandstats).
function helper.script_calls(srv)
  local s, calls = srv.cli("info", "commandstats"), 0
  for _, cmd in ipairs({ "fcall", "evalsha" }) do
    calls = calls + (tonumber(s:match("cmdstat_" .. cmd .. ":calls=(%d+)")) or 0)
  end
  return calls
end

--- EVALSHA of script `name` (sha: from helper.load_scripts) on srv, with
--- its keys and arguments by the names its header gives them, each where
--- it takes it: keys, a lock's keys ({ lock =, counter =, queue = }: those
--- the script takes); args, exactly the arguments it takes. srv.cli's reply.
-- Arguments a spec may leave out: the client's hint of the lock's form
-- (the short form looked for first).
local EVALSHA_DEFAULTS = { acquire = { form = "s" }, fair_acquire = { form = "s" },
                           fair_release = { count = "1" } }

function helper.evalsha(srv, sha, name, keys, args)
  local y = assert(helper.script_layouts()[name], "no script " .. name)
  local argv = helper.script_head(sha, name, #y.keys)
  for _, k in ipairs(y.keys) do
    argv[#argv + 1] = assert(keys[k], name .. " takes key " .. k)
  end
  local taken, hint = {}, EVALSHA_DEFAULTS[name] or {}
  for _, a in ipairs(y.args) do
    if args[a] == nil then args[a] = hint[a] end
    assert(args[a] ~= nil, name .. " takes argument " .. a)
    argv[#argv + 1] = args[a]
    taken[a] = true
  end
  for a in pairs(args) do assert(taken[a], name .. " takes no argument " .. a) end
  return srv.cli((table.unpack or unpack)(argv))
end

--- The head of a call of script `name` (sha: from helper.load_scripts)
--- with nkeys keys: { "FCALL", function, nkeys } or { "EVALSHA", sha, nkeys }.
function helper.script_head(sha, name, nkeys)
  local id = assert(sha[name], name)
  return { #id == 40 and id:match("^%x+$") and "EVALSHA" or "FCALL", id, nkeys }
end

--- The library's Redis scripts, loaded into server handle `srv` (for
--- specs that drive them by hand): name -> what helper.script_head calls,
--- the function of dlock's library (FUNCTION LOAD), or with
--- helper.scripts "evalsha" the script's SHA (SCRIPT LOAD).
function helper.load_scripts(srv)
  local sha, core = {}, require("dlock.core")
  for name, src in pairs(core.scripts()) do
    sha[name] = helper.load_script(srv, name, src)
  end
  if helper.scripts == "fcall" then
    local text, functions = core.library()
    local path = ("%s/library-%d.lua"):format(helper.tmp, srv.port)
    local f = assert(io.open(path, "wb"))
    f:write(text)
    f:close()
    assert(sh(("redis-cli -p %d -x FUNCTION LOAD REPLACE < '%s' >/dev/null"):format(srv.port, path)))
    for name, fn in pairs(functions) do sha[name] = fn end
  end
  return sha
end

--- SCRIPT LOAD Lua source `src` (called `name`) on server srv: its SHA1.
function helper.load_script(srv, name, src)
  local path = ("%s/script-%d-%s.lua"):format(helper.tmp, srv.port, name)
  local f = assert(io.open(path, "wb"))
  f:write(src)
  f:close()
  local p = assert(io.popen(("redis-cli -p %d -x SCRIPT LOAD < '%s'"):format(srv.port, path)))
  local sha = p:read("*a"):match("%x+")
  p:close()
  assert(sha and #sha == 40, "SCRIPT LOAD " .. name)
  return sha
end

--- Send commands (each a list of arguments) to plain server srv in one
--- write, so that the server runs them back to back at its own speed,
--- however slow this process is (a sanitizer, a loaded machine); returns
--- the replies in order: integers as numbers, strings, errors as
--- { err = text }, arrays as lists.
function helper.pipeline(srv, cmds)
  local req = {}
  for _, c in ipairs(cmds) do
    req[#req + 1] = "*" .. #c .. "\r\n"
    for _, a in ipairs(c) do
      a = tostring(a)
      req[#req + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
    end
  end
  req[#req + 1] = "*1\r\n$4\r\nQUIT\r\n"        -- its +OK, then EOF
  n = n + 1
  local base = ("%s/pipe-%d-%d"):format(tmp, n, math.random(1, 1e9))
  local f = assert(io.open(base .. ".in", "wb"))
  f:write(table.concat(req))
  f:close()
  assert(sh(("bash -c 'exec 3<>/dev/tcp/127.0.0.1/%d && cat %s.in >&3 && " ..
             "timeout 60 cat <&3 >%s.out'"):format(srv.port, base, base)))
  local s, pos = assert(helper.read_file(base .. ".out")), 1
  local function value()
    local t, line = s:sub(pos, pos), s:match("^[^\r]*", pos + 1)
    pos = pos + #line + 3
    if t == ":" then return tonumber(line) end
    if t == "+" then return line end
    if t == "-" then return { err = line } end
    if t == "$" then
      local len = tonumber(line)
      if len < 0 then return false end
      local v = s:sub(pos, pos + len - 1)
      pos = pos + len + 2
      return v
    end
    assert(t == "*", "unexpected reply byte " .. t)
    local r = {}
    for i = 1, tonumber(line) do r[i] = value() end
    return r
  end
  local r = {}
  for i = 1, #cmds do r[i] = value() end
  assert(value() == "OK", "no reply to QUIT")
  return r
end

--- The integers in redis-cli's output of a script's reply, in order.
function helper.ints(out)
  local r = {}
  for v in out:gmatch("%-?%d+") do r[#r + 1] = tonumber(v) end
  return r
end

--- Run Lua source `src` in a separate process with this tree's modules
--- (arguments in `...` become its arg table). Returns whether it exited 0,
--- its output (stdout and stderr), and its exit status (a signal that
--- killed it is 128 + the signal's number).
function helper.run_lua(src, ...)
  n = n + 1
  local file = ("%s/script-%d-%d.lua"):format(tmp, n, math.random(1, 1e9))
  local f = assert(io.open(file, "wb"))
  f:write(src)
  f:close()
  local args = {}
  for i, a in ipairs({ ... }) do args[i] = ("'%s'"):format(tostring(a)) end
  local out = read(("%s %s %s 2>&1; echo \"exit=$?\""):format(
    helper.lua_cmd(), file, table.concat(args, " ")))
  local code = tonumber(out:match("exit=(%d+)%s*$"))
  return code == 0, out:gsub("exit=%d+%s*$", ""), code
end

return helper
