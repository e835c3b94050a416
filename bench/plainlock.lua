-- plainlock.lua: the baseline dlock is measured against - a Redis lock the
-- way users hand-write it today in plain Lua: LuaSocket, a minimal RESP
-- client, acquire = SET key token NX PX lease in a sleep loop (backoff as in
-- lua-resty-lock: 1 ms, doubling, at most 0.5 s), release = compare-and-
-- delete script via EVALSHA. Not reentrant, no watchdog, no pub/sub.
--
-- Same shape as dlock for the parts the bench uses:
--   local c = plainlock.connect(url); local l = c:lock(name)
--   l:acquire{ wait = s } -> l | nil, "timeout";  l:release() -> true | nil, "lost"
-- and plainlock.resp(host, port) -> conn with conn:call(...) for admin use.
local socket = require "socket"

local M = {}
local STEP, RATIO, MAX_STEP = 0.001, 2, 0.5
local CAD = "if redis.call('get', KEYS[1]) == ARGV[1] then\n" ..
            "  return redis.call('del', KEYS[1])\n" ..
            "end\n" ..
            "return 0\n"

-- ---- RESP ----------------------------------------------------------------

local Conn = {}
Conn.__index = Conn

function M.resp(host, port)
  local s = socket.tcp()
  s:settimeout(5)
  assert(s:connect(host, port))
  s:setoption("tcp-nodelay", true)
  return setmetatable({ s = s }, Conn)
end

local function encode(args)
  local out = { "*" .. #args .. "\r\n" }
  for i = 1, #args do
    local a = tostring(args[i])
    out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  return table.concat(out)
end

-- One reply: a string, an integer, nil, an array (table) or {err = msg}.
local function read(s)
  local line = assert(s:receive("*l"))
  local ty, rest = line:sub(1, 1), line:sub(2)
  if ty == "+" then return rest end
  if ty == "-" then return { err = rest } end
  if ty == ":" then return math.tointeger(tonumber(rest)) end
  local n = tonumber(rest)
  if ty == "$" then
    if n < 0 then return nil end
    return assert(s:receive(n + 2)):sub(1, n)
  end
  assert(ty == "*", "RESP: unexpected reply type " .. ty)
  if n < 0 then return nil end
  local t = {}
  for i = 1, n do t[i] = read(s) end
  return t
end

--- conn:call(cmd, ...) -> reply, or nil, "redis: msg" on an error reply.
function Conn:call(...)
  assert(self.s:send(encode({ ... })))
  local r = read(self.s)
  if type(r) == "table" and r.err then return nil, "redis: " .. r.err end
  return r
end

function Conn:close() self.s:close() end

-- ---- the lock --------------------------------------------------------------

local Client, Lock = {}, {}
Client.__index, Lock.__index = Client, Lock

function M.connect(url)
  local host, port = url:match("^redis://([^:/]+):(%d+)")
  local conn = M.resp(host, tonumber(port))
  local sha = assert(conn:call("SCRIPT", "LOAD", CAD))
  math.randomseed(os.time(), math.floor(socket.gettime() * 1e6) % 1e9)
  return setmetatable({ conn = conn, sha = sha, lease_ms = 30000,
                        id = ("%08x%08x"):format(math.random(0, 0xffffffff),
                                                 math.random(0, 0xffffffff)),
                        n = 0 }, Client)
end

function Client:lock(name)
  return setmetatable({ c = self, key = "plain:" .. name }, Lock)
end

function Client:close() self.conn:close() end

function Lock:acquire(opts)
  local c = self.c
  local deadline = socket.gettime() + (opts and opts.wait or math.huge)
  c.n = c.n + 1
  local token = c.id .. ":" .. c.n          -- unique per acquisition
  local step = STEP
  while true do
    if c.conn:call("SET", self.key, token, "NX", "PX", c.lease_ms) == "OK" then
      self.token = token
      return self
    end
    local left = deadline - socket.gettime()
    if left <= 0 then return nil, "timeout" end
    socket.sleep(math.min(step, left))
    step = math.min(step * RATIO, MAX_STEP)
  end
end

function Lock:release()
  local c = self.c
  local r, err = c.conn:call("EVALSHA", c.sha, 1, self.key, self.token)
  if err and err:find("NOSCRIPT") then
    r, err = c.conn:call("EVAL", CAD, 1, self.key, self.token)
  end
  self.token = nil
  if r == 1 then return true end
  return nil, err or "lost"
end

return M
