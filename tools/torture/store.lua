-- The fenced store: a key per lock name on a redis-server of its own (never
-- faulted), written by a script that accepts a write only when its token is
-- at least the highest it has accepted, as storage guarded by fencing tokens
-- would. Every answer carries a global sequence number, so the checker
-- knows the order in which the store saw the writes.
-- Spoken in plain RESP over a cqueues socket: dlock has no raw command call.
local socket = require "cqueues.socket"

local store = {}
store.__index = store

local SCRIPT = [[
local seq = redis.call('INCR', 'torture:seq')
local hi = redis.call('HGET', KEYS[1], 'hi')
if hi and tonumber(ARGV[1]) < tonumber(hi) then
  return { 0, seq, hi }
end
redis.call('HSET', KEYS[1], 'hi', ARGV[1], 'by', ARGV[2])
return { 1, seq, hi or '' }
]]

local function resp(args)
  local out = { "*" .. #args .. "\r\n" }
  for _, a in ipairs(args) do
    a = tostring(a)
    out[#out + 1] = "$" .. #a .. "\r\n" .. a .. "\r\n"
  end
  return table.concat(out)
end

function store.connect(port)
  local s = socket.connect({ host = "127.0.0.1", port = port })
  s:settimeout(3)
  s:setmode("b", "b")
  local ok, err = s:connect(3)
  if not ok then return nil, tostring(err) end
  return setmetatable({ s = s }, store)
end

local function reply(s)
  local line, err = s:read("*l")
  if not line then return nil, "store: " .. tostring(err) end
  line = line:gsub("\r$", "")
  local c, rest = line:sub(1, 1), line:sub(2)
  if c == ":" then return tonumber(rest)
  elseif c == "+" then return rest
  elseif c == "-" then return nil, "store: " .. rest
  elseif c == "$" then
    local n = tonumber(rest)
    if n < 0 then return false end
    local data = s:read(n + 2)
    return data and data:sub(1, n)
  elseif c == "*" then
    local t = {}
    for i = 1, tonumber(rest) do
      local v, e = reply(s)
      if v == nil then return nil, e end
      t[i] = v
    end
    return t
  end
  return nil, "store: bad reply " .. line
end

--- Write under `token` (a string or an integer) to the store of lock
--- `name`: accepted (boolean), the store's sequence number, the highest
--- token it had before; or nil, err.
function store:write(name, token, by)
  local ok, err = self.s:write(resp({ "EVAL", SCRIPT, 1, "fs:" .. name, tostring(token), by }))
  if not ok then return nil, "store: " .. tostring(err) end
  self.s:flush()
  local r, e = reply(self.s)
  if type(r) ~= "table" then return nil, e or "store: bad reply" end
  return r[1] == 1, r[2], r[3]
end

function store:close() self.s:close() end

return store
