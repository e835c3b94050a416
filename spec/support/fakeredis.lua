-- fakeredis.lua: a fake RESP2 server that answers as a test tells it to,
-- for the hostile-server spec (spec/hostile_spec.lua), and the helpers
-- that build its replies.
--
-- Two uses of this one file:
--   * `require "fakeredis"` in a spec: reply builders (R.bulk, R.arr, ...)
--     and start(rules), which runs a server as a separate process;
--   * `lua5.4 spec/support/fakeredis.lua serve RULES BASE SCRIPTS PARENT_PID`: the
--     server itself, on cqueues. It listens on 127.0.0.1, port 0, and
--     writes the port it got to BASE.port.
-- The server always runs under `lua5.4` (or $FAKEREDIS_LUA), whatever Lua
-- runs the specs: Debian's lua-cqueues exists for every Lua, but the
-- sanitizer and valgrind runs must not reach into it, and CI always has
-- lua5.4. So it is started without LD_PRELOAD, like redis-server. The file
-- itself is plain Lua 5.1 (the specs require it on 5.1 and LuaJIT too).
--
-- RULES is a Lua file returning a table (start() writes it; set() rewrites
-- it, and the server reloads it before the next command it reads):
--   scripts = { [name] = RULE, ["*"] = RULE }  EVALSHA of the script of
--             that name (dlock.core.scripts(): "acquire", "release", ...)
--   commands = { ["CLUSTER SLOTS"] = RULE, PING = RULE, ... }  any other
--             command, by its first word or its first two words
--   on_accept = REPLY   sent to each connection as soon as it is accepted
--   master = port       SENTINEL get-master-addr-by-name answers
--                       127.0.0.1:port (default: a nil array)
--   slots = { {lo, hi, port}, ... }  CLUSTER SLOTS (and CLUSTER NODES) give
--                       this map (default: an error, as a server without
--                       cluster support)
--   token = n           the fencing token of a granted acquire (default 7)
--   client_list = s     the CLIENT LIST text (default "")
-- A RULE is a REPLY (given to every call), or a table of one of the forms
--   { reply = REPLY, match = s, times = n }  REPLY to the calls that have
--       an argument containing s (any call without match), the first n of
--       them (all without times); the others get the default
--   { seq = { REPLY, ... }, match = s }   the k-th matching call gets the
--       k-th REPLY, the calls past the list the default
--   { cycle = { REPLY, ... }, match = s } the k-th matching call gets the
--       ((k-1) % #cycle + 1)-th REPLY
-- or an array of such tables: the first whose match fits decides.
-- A REPLY is raw bytes (a string, built with the builders below), or
--   { raw = s, close = true }   send s, then close the connection
--   { raw = s, hang = true }    send s (may be ""), then never answer again
--   { raw = s, drip = c, every = t, total = t2 }  send s, then one byte c
--       every t s for t2 s, then hang
--   { default = true }          what a well-behaved server would answer
-- Unless a rule says otherwise each command gets the default answer: a
-- master with nothing locked that grants every acquire (token 7),
-- confirms every release, renewal and extend, and SHAs that are the
-- script's name in hex.
--
-- The server logs to BASE.log, one line per event: "accept <conn>",
-- "cmd <conn> <COMMAND> [<SUBCOMMAND>]" ("cmd <conn> EVALSHA <script name>
-- <first key>" for a script), "close <conn>".
-- It exits by itself when PARENT_PID is gone, or after 600 s.

local M = {}

-- ---- reply builders (RESP2) -----------------------------------------

local function intstr(n)
  if type(n) == "string" then return n end
  return string.format("%d", n)
end

function M.bulk(s) return "$" .. #s .. "\r\n" .. s .. "\r\n" end
function M.int(n) return ":" .. intstr(n) .. "\r\n" end
function M.status(s) return "+" .. s .. "\r\n" end
function M.err(s) return "-" .. s .. "\r\n" end
--- An array of already encoded elements.
function M.arr(elems)
  return "*" .. #elems .. "\r\n" .. table.concat(elems)
end
M.nil_bulk = "$-1\r\n"
M.nil_array = "*-1\r\n"
M.empty_array = "*0\r\n"
--- `inner` wrapped in `depth` one-element arrays.
function M.nest(depth, inner)
  return string.rep("*1\r\n", depth) .. (inner or M.int(1))
end
--- An array of integers.
function M.ints(...)
  local t = {}
  for i, v in ipairs({ ... }) do t[i] = M.int(v) end
  return M.arr(t)
end
M.DEFAULT = { default = true }

--- Lua source for a value made of tables, strings, numbers and booleans.
local function serialize(v, out)
  local ty = type(v)
  if ty == "string" then
    out[#out + 1] = string.format("%q", v)
  elseif ty == "number" then
    out[#out + 1] = v % 1 == 0 and string.format("%d", v) or string.format("%.17g", v)
  elseif ty == "boolean" or ty == "nil" then
    out[#out + 1] = tostring(v)
  elseif ty == "table" then
    out[#out + 1] = "{"
    local n = #v
    for i = 1, n do serialize(v[i], out); out[#out + 1] = "," end
    for k, x in pairs(v) do
      if not (type(k) == "number" and k >= 1 and k <= n and k % 1 == 0) then
        out[#out + 1] = "["
        serialize(k, out)
        out[#out + 1] = "]="
        serialize(x, out)
        out[#out + 1] = ","
      end
    end
    out[#out + 1] = "}"
  else
    error("fakeredis: cannot write a " .. ty .. " into rules")
  end
  return out
end
function M.serialize(v) return table.concat(serialize(v, {})) end

--- The SHA the fake server gives a script: its name in hex (40 digits),
--- the same in every fake server of a run.
function M.sha_of_name(name)
  local hex = name:gsub(".", function(c) return string.format("%02x", c:byte()) end)
  return (hex .. string.rep("0", 40)):sub(1, 40)
end

-- ---- the server (run as a script) -------------------------------------

local function read_file(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

local function serve(rules_path, base, scripts_path, parent)
  local cqueues = require "cqueues"
  local socket = require "cqueues.socket"
  local ok_sig, signal = pcall(require, "cqueues.signal")
  if ok_sig then signal.ignore(signal.SIGPIPE) end

  local logf = assert(io.open(base .. ".log", "ab"))
  logf:setvbuf("no")
  local function log(...) logf:write(table.concat({ ... }, " "), "\n") end

  -- script source -> name, sha -> name
  local by_source, by_sha = {}, {}
  local chunk = assert(loadfile(scripts_path))
  for name, src in pairs(chunk()) do
    by_source[src] = name
    by_sha[M.sha_of_name(name)] = name
  end
  local function sha_of_source(src)
    local name = by_source[src]
    if name then return M.sha_of_name(name) end
    local h = #src                      -- not one of dlock's: any 40 hex digits
    for i = 1, #src, 7 do h = (h * 31 + src:byte(i)) % 4294967291 end
    local hex = string.format("%08x", h)
    return (string.rep(hex, 5)):sub(1, 40)
  end

  local rules, rules_text, counters = {}, nil, {}
  local function reload()
    local text = read_file(rules_path)
    if not text or text == rules_text then return end
    local env = setmetatable({ R = M }, { __index = _G })
    local f, err
    if setfenv then                     -- Lua 5.1, LuaJIT
      f, err = loadstring(text, "=rules")
      if f then setfenv(f, env) end
    else
      f, err = load(text, "=rules", "t", env)
    end
    local okr, t = pcall(f or error, err)
    if okr and type(t) == "table" then
      rules, rules_text, counters = t, text, {}
    else
      log("rules-error", tostring(t))
    end
  end
  reload()

  local srv = assert(socket.listen{ host = "127.0.0.1", port = 0, reuseaddr = true,
                                    sin_nodelay = true })
  assert(srv:listen())
  local _, _, port = srv:localname()
  local pf = assert(io.open(base .. ".port.tmp", "wb"))
  pf:write(tostring(port), "\n")
  pf:close()
  assert(os.rename(base .. ".port.tmp", base .. ".port"))

  local function upper(s) return (s or ""):upper() end

  -- What a well-behaved server answers.
  local function default_reply(argv, ctx)
    local cmd, sub = upper(argv[1]), upper(argv[2])
    if cmd == "PING" then
      return ctx.subscribed and M.arr{ M.bulk("pong"), M.bulk(argv[2] or "") } or M.status("PONG")
    elseif cmd == "AUTH" or cmd == "SELECT" or cmd == "ASKING" or cmd == "READONLY" then
      return M.status("OK")
    elseif cmd == "CLIENT" then
      if sub == "LIST" then return M.bulk(rules.client_list or "") end
      return M.status("OK")
    elseif cmd == "SCRIPT" then
      if sub == "LOAD" then return M.bulk(sha_of_source(argv[3] or "")) end
      return M.status("OK")
    elseif cmd == "CONFIG" then
      return M.arr{ M.bulk(argv[3] or ""), M.bulk("noeviction") }
    elseif cmd == "ROLE" then
      return M.arr{ M.bulk("master"), M.int(0), M.empty_array }
    elseif cmd == "WAIT" or cmd == "PUBLISH" or cmd == "SPUBLISH" then
      return M.int(0)
    elseif cmd == "SUBSCRIBE" or cmd == "SSUBSCRIBE" or cmd == "UNSUBSCRIBE" or
           cmd == "SUNSUBSCRIBE" then
      local out = {}
      for i = 2, #argv do
        if cmd:find("UN", 1, true) then ctx.nsubs = math.max((ctx.nsubs or 0) - 1, 0)
        else ctx.nsubs = (ctx.nsubs or 0) + 1 end
        out[#out + 1] = M.arr{ M.bulk(cmd:lower()), M.bulk(argv[i]), M.int(ctx.nsubs) }
      end
      ctx.subscribed = true
      return table.concat(out)
    elseif cmd == "CLUSTER" and (sub == "SLOTS" or sub == "NODES" or sub == "SHARDS") then
      if not rules.slots then
        return M.err("ERR This instance has cluster support disabled")
      end
      if sub == "NODES" then
        local lines = {}
        for i, s in ipairs(rules.slots) do
          lines[#lines + 1] = string.format("%040d 127.0.0.1:%d@%d master - 0 0 %d connected %d-%d",
            i, s[3], s[3] + 10000, i, s[1], s[2])
        end
        return M.bulk(table.concat(lines, "\n") .. "\n")
      end
      local out = {}
      for i, s in ipairs(rules.slots) do
        out[i] = M.arr{ M.int(s[1]), M.int(s[2]),
                        M.arr{ M.bulk("127.0.0.1"), M.int(s[3]), M.bulk(string.format("%040d", i)) } }
      end
      return M.arr(out)
    elseif cmd == "SENTINEL" then
      if sub == "GET-MASTER-ADDR-BY-NAME" and rules.master then
        return M.arr{ M.bulk("127.0.0.1"), M.bulk(tostring(rules.master)) }
      end
      return M.nil_array
    elseif cmd == "EVALSHA" then
      local name = by_sha[argv[2] or ""]
      if not name then return M.err("NOSCRIPT No matching script. Please use EVAL.") end
      local tok = rules.token or 7
      if name == "acquire" or name == "acquire1" or name == "rw_acquire" or
         name == "fair_acquire" or name == "fair_acquire1" then
        return M.ints(1, 1, tok)
      elseif name == "sem_acquire" or name == "sem_acquire1" then
        return M.ints(1, 1, 0)
      elseif name == "release" or name == "sem_release" or name == "fair_release" or
             name == "sem_release1" or name == "fair_release1" then
        return M.ints(1, 0)
      elseif name == "renew" or name == "rw_renew" then
        local t = {}
        for i = 1, tonumber(argv[3]) or 0 do t[i] = M.int(1) end
        return M.arr(t)
      elseif name == "ttl" then
        return M.int(rules.ttl or -2)
      elseif name == "sem_free" then
        return M.int(tonumber(argv[#argv]) or 0)
      elseif name == "inspect" then
        return M.ints(0)
      end
      return M.int(1)                   -- void, drop, fence, extend, force
    elseif cmd == "QUIT" then
      return { raw = M.status("OK"), close = true }
    end
    return M.err("ERR unknown command '" .. tostring(argv[1]) .. "'")
  end

  local function matches(rule, argv)
    if type(rule) ~= "table" or rule.match == nil then return true end
    for i = 2, #argv do
      if argv[i]:find(rule.match, 1, true) then return true end
    end
    return false
  end

  local function is_rule(t)
    return type(t) == "table" and (t.reply ~= nil or t.seq ~= nil or t.cycle ~= nil)
  end

  -- The reply (spec) for argv under RULE r, or nil for the default.
  local function pick(r, argv, ctx)
    if r == nil then return nil end
    if type(r) == "function" then return r(argv, ctx) end
    if type(r) == "table" and not is_rule(r) and r[1] ~= nil and is_rule(r[1]) then
      for _, x in ipairs(r) do
        if matches(x, argv) then return pick(x, argv, ctx) end
      end
      return nil
    end
    if not is_rule(r) then return r end
    if not matches(r, argv) then return nil end
    local k = (counters[r] or 0) + 1
    counters[r] = k
    if r.times and k > r.times then return nil end
    if r.seq then return r.seq[k] end
    if r.cycle then return r.cycle[(k - 1) % #r.cycle + 1] end
    return r.reply
  end

  local function rule_for(argv)
    local cmd, sub = upper(argv[1]), upper(argv[2])
    if cmd == "EVALSHA" then
      local s = rules.scripts or {}
      local name = by_sha[argv[2] or ""]
      local r = name and s[name]
      if r == nil then r = s["*"] end
      return r, name or "?"
    end
    local c = rules.commands or {}
    local r = c[cmd .. " " .. sub]
    if r == nil then r = c[cmd] end
    local what = (cmd == "CLIENT" or cmd == "SCRIPT" or cmd == "CLUSTER" or
                  cmd == "SENTINEL" or cmd == "CONFIG") and sub or ""
    return r, what
  end

  local conns = 0

  -- Replies go out together: queued while more commands of the same read
  -- wait in the buffer, flushed before reading (or waiting) again.
  local outs = setmetatable({}, { __mode = "k" })
  local function flush(con)
    local out = outs[con]
    if not out or #out == 0 then return true end
    outs[con] = {}
    return con:xwrite(table.concat(out), "bn")
  end
  local function send(con, s)
    if s == "" then return true end
    outs[con] = outs[con] or {}
    table.insert(outs[con], s)
    return true
  end

  -- Read and drop whatever comes until the peer closes.
  local function hang(con)
    flush(con)
    while con:xread(-65536, "b") do end
  end

  -- Do reply spec `rep` on con: "ok" to go on, "stop" when the connection
  -- is done with.
  local function act(con, ctx, argv, rep)
    if type(rep) == "function" then rep = rep(argv, ctx) end
    if rep == nil or (type(rep) == "table" and rep.default) then
      rep = default_reply(argv, ctx)
    end
    if type(rep) == "string" then
      return send(con, rep) and "ok" or "stop"
    end
    if rep.delay then flush(con); cqueues.sleep(rep.delay) end
    send(con, rep.raw or "")
    if rep.drip then
      local deadline = cqueues.monotime() + (rep.total or 3)
      while cqueues.monotime() < deadline do
        if not flush(con) then return "stop" end
        cqueues.sleep(rep.every or 0.05)
        send(con, rep.drip)
      end
      hang(con)
      return "stop"
    end
    if rep.hang then
      hang(con)
      return "stop"
    end
    if rep.close then flush(con); return "stop" end
    return "ok"
  end

  -- One command from buf at pos: argv and the next position; nil when
  -- incomplete; false when it is not RESP.
  local function parse(buf, pos)
    local c = buf:sub(pos, pos)
    if c == "" then return nil end
    local eol = buf:find("\r\n", pos, true)
    if not eol then return nil end
    if c ~= "*" then                    -- an inline command
      local argv = {}
      for w in buf:sub(pos, eol - 1):gmatch("%S+") do argv[#argv + 1] = w end
      return argv, eol + 2
    end
    local n = tonumber(buf:sub(pos + 1, eol - 1))
    if not n then return false end
    local p, argv = eol + 2, {}
    for i = 1, n do
      if p > #buf then return nil end
      if buf:sub(p, p) ~= "$" then return false end
      local e = buf:find("\r\n", p, true)
      if not e then return nil end
      local len = tonumber(buf:sub(p + 1, e - 1))
      if not len then return false end
      if #buf < e + 1 + len + 2 then return nil end
      argv[i] = buf:sub(e + 2, e + 1 + len)
      p = e + 2 + len + 2
    end
    return argv, p
  end

  local function handle(con)
    conns = conns + 1
    local id = conns
    local ctx = { id = id }
    log("accept", id)
    con:setmode("b", "bn")
    local buf, pos = "", 1
    local state = "ok"
    reload()
    if rules.on_accept then state = act(con, ctx, {}, rules.on_accept) end
    while state == "ok" do
      local argv, np = parse(buf, pos)
      if argv == false then break end
      if argv then
        pos = np
        if pos > 65536 then buf, pos = buf:sub(pos), 1 end
        if #argv > 0 then
          reload()
          local r, what = rule_for(argv)
          if upper(argv[1]) == "EVALSHA" then   -- and its first key
            what = what .. " " .. (argv[4] or "")
          end
          log("cmd", id, upper(argv[1]), what)
          state = act(con, ctx, argv, pick(r, argv, ctx))
        end
      else
        if not flush(con) then break end
        local s = con:xread(-65536, "b")
        if not s then break end
        buf = buf:sub(pos) .. s
        pos = 1
      end
    end
    flush(con)
    con:close()
    log("close", id)
  end

  local cq = cqueues.new()
  cq:wrap(function()
    for con in srv:clients() do
      cq:wrap(function()
        local ok, err = pcall(handle, con)
        if not ok then log("error", tostring(err)); pcall(con.close, con) end
      end)
    end
  end)
  cq:wrap(function()                    -- never outlive the spec
    local t0 = cqueues.monotime()
    while true do
      cqueues.sleep(0.25)
      local f = parent and io.open("/proc/" .. parent .. "/stat")
      if f then f:close() end
      if (parent and not f) or cqueues.monotime() - t0 > 600 then
        os.exit(0)
      end
    end
  end)
  while true do
    local ok, err = cq:loop()
    if not ok then log("loop-error", tostring(err)) end
  end
end

if select(1, ...) == "serve" then
  local _, rules_path, base, scripts_path, parent = ...
  serve(rules_path, base, scripts_path, tonumber(parent))
  return
end

-- ---- the spec's side ---------------------------------------------------

local servers = {}
local seq = 0
local scripts_file

local function tmpdir()
  local helper = require "helper"
  return helper.tmp
end

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

local function self_pid()
  local s = read_file("/proc/self/stat") or ""
  return s:match("^(%d+)")
end

local function write_atomic(path, text)
  local f = assert(io.open(path .. ".tmp", "wb"))
  f:write(text)
  f:close()
  assert(os.rename(path .. ".tmp", path))
end

local function rules_text(rules)
  if type(rules) == "string" then return rules end
  return "return " .. M.serialize(rules or {}) .. "\n"
end

--- Start a fake server with `rules` (a table, or Lua source returning one,
--- where R is this module). Returns a handle: port, url (redis://...),
--- addr ("127.0.0.1:port"), set(rules), log(), count(text) (log lines
--- that contain it), accepts() (connections so far), stop().
function M.start(rules)
  local dir = tmpdir()
  if not scripts_file then
    scripts_file = dir .. "/fakeredis-scripts.lua"
    write_atomic(scripts_file, "return " .. M.serialize(require("dlock.core").scripts()) .. "\n")
  end
  seq = seq + 1
  local base = string.format("%s/fakeredis-%d-%d", dir, seq, math.random(1, 1e9))
  write_atomic(base .. ".rules", rules_text(rules))
  local lua = os.getenv("FAKEREDIS_LUA") or "lua5.4"
  local cmd = string.format(
    "env -u LD_PRELOAD -u LUA_PATH -u LUA_CPATH %s spec/support/fakeredis.lua serve '%s.rules' '%s' '%s' %s " ..
    ">'%s.out' 2>&1 & echo $!", lua, base, base, scripts_file, self_pid() or "", base)
  local p = assert(io.popen(cmd))
  local pid = tonumber((p:read("*a") or ""):match("%d+"))
  p:close()
  assert(pid, "fakeredis: could not start " .. cmd)
  write_atomic(base .. ".pid", pid .. "\n")   -- tools/with-tmp.sh kills it at the end
  local srv = { pid = pid, base = base }
  servers[#servers + 1] = srv
  local deadline = os.time() + 10
  repeat
    local s = read_file(base .. ".port")
    srv.port = s and tonumber(s:match("%d+"))
    if not srv.port then require("dlock").sleep(0.01) end
  until srv.port or os.time() > deadline
  if not srv.port then
    error("fakeredis: the server did not start: " .. (read_file(base .. ".out") or ""))
  end
  srv.addr = "127.0.0.1:" .. srv.port
  srv.url = "redis://" .. srv.addr
  function srv.set(r) write_atomic(base .. ".rules", rules_text(r)) end
  function srv.log() return read_file(base .. ".log") or "" end
  --- Log lines that contain `text` (plain text, not a pattern).
  function srv.count(text)
    local n = 0
    for line in srv.log():gmatch("[^\n]+") do
      if line:find(text, 1, true) then n = n + 1 end
    end
    return n
  end
  function srv.accepts()
    local n = 0
    for _ in ("\n" .. srv.log()):gmatch("\naccept ") do n = n + 1 end
    return n
  end
  -- Running: not gone, and not a zombie (nobody may reap it soon: its
  -- parent was the shell that started it in the background).
  local function running(pid)
    local st = read_file("/proc/" .. pid .. "/stat")
    return st ~= nil and not st:match("^%d+ %b() [ZX]")
  end
  function srv.alive() return srv.pid ~= nil and running(srv.pid) end
  function srv.stop()
    if not srv.pid then return end
    sh("kill -9 " .. srv.pid .. " 2>/dev/null")
    for _ = 1, 300 do
      if not running(srv.pid) then break end
      require("dlock").sleep(0.01)
    end
    os.remove(base .. ".pid")
    srv.pid = nil
  end
  return srv
end

--- Stop every server this process started.
function M.stop_all()
  for _, s in ipairs(servers) do s.stop() end
  servers = {}
end

return M
