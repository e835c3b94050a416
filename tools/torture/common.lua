-- What the torture driver, its workers and its checker share: a seeded
-- random generator (the same numbers on every Lua), and the history format
-- (one Lua table constructor per line, appended and flushed at once, so a
-- process SIGKILLed mid-run leaves every line but maybe a torn last one).
local common = {}

-- Park-Miller "minimal standard" generator: exact in doubles, so a seed
-- gives the same schedule on Lua 5.1 to 5.4 and LuaJIT.
local Rng = {}
Rng.__index = Rng

function common.rng(seed)
  local s = math.floor(tonumber(seed) or 1) % 2147483646 + 1
  local r = setmetatable({ s = s }, Rng)
  for _ = 1, 4 do r:next() end              -- mix small seeds
  return r
end

function Rng:next()
  self.s = (self.s * 16807) % 2147483647
  return self.s
end

--- A float in [0, 1).
function Rng:float() return (self:next() - 1) / 2147483646 end

--- An integer in [lo, hi].
function Rng:int(lo, hi) return lo + math.floor(self:float() * (hi - lo + 1)) end

--- A float in [lo, hi).
function Rng:range(lo, hi) return lo + self:float() * (hi - lo) end

function Rng:chance(p) return self:float() < p end

function Rng:pick(t) return t[self:int(1, #t)] end

--- A key from a table { key = weight, ... }, keys in sorted order so the
--- pick depends on the seed only.
function Rng:weighted(w)
  local keys, total = {}, 0
  for k, v in pairs(w) do keys[#keys + 1] = k; total = total + v end
  table.sort(keys)
  local x = self:float() * total
  for _, k in ipairs(keys) do
    x = x - w[k]
    if x < 0 then return k end
  end
  return keys[#keys]
end

--- A child seed: round k of seed s, worker i of a round...
function common.derive(seed, ...)
  local h = math.floor(tonumber(seed) or 0) % 2147483647
  for _, v in ipairs({ ... }) do
    h = (h * 31 + math.floor(v) + 7) % 2147483647
    h = (h * 16807) % 2147483647
  end
  return h
end

-- ---- history lines ---------------------------------------------------------

local function val(v)
  local t = type(v)
  if t == "string" then
    return (("%q"):format(v):gsub("\\\n", "\\n"):gsub("\r", "\\r"))
  elseif t == "number" then
    if v ~= v or v == math.huge or v == -math.huge then return "nil" end
    if math.type and math.type(v) == "integer" then return tostring(v) end
    return ("%.17g"):format(v)
  elseif t == "boolean" then
    return tostring(v)
  elseif t == "table" then
    local parts = {}
    local keys = {}
    for k in pairs(v) do keys[#keys + 1] = k end
    table.sort(keys, function(a, b) return tostring(a) < tostring(b) end)
    for _, k in ipairs(keys) do
      local kk = type(k) == "string" and k:match("^[%a_][%w_]*$") and k
        or ("[" .. val(k) .. "]")
      parts[#parts + 1] = kk .. "=" .. val(v[k])
    end
    return "{" .. table.concat(parts, ",") .. "}"
  end
  return "nil"
end
common.encode = val

--- A history writer: log(record) appends one line and flushes.
function common.writer(path)
  local f = assert(io.open(path, "a"))
  f:setvbuf("no")
  return function(rec) f:write(val(rec), "\n") end, f
end

--- Every record of one history file (torn or foreign lines are skipped).
function common.read(path)
  local out = {}
  local f = io.open(path, "r")
  if not f then return out end
  for line in f:lines() do
    local fn = (loadstring or load)("return " .. line, "history", "t", {})
    if fn then
      if setfenv then setfenv(fn, {}) end
      local ok, rec = pcall(fn)
      if ok and type(rec) == "table" then out[#out + 1] = rec end
    end
  end
  f:close()
  return out
end

return common
