-- compat.lua: the Lua 5.2+ library calls the specs use, for Lua 5.1 and
-- LuaJIT (dlock itself needs none of this). Required first by helper.lua
-- and worker.lua (topology.lua gets it through helper); does nothing on
-- Lua 5.3 and 5.4.
if _VERSION ~= "Lua 5.1" then return true end

table.pack = table.pack or function(...) return { n = select("#", ...), ... } end
table.unpack = table.unpack or unpack

math.type = math.type or function(x)
  if type(x) ~= "number" then return nil end
  return x % 1 == 0 and x > -2^53 and x < 2^53 and "integer" or "float"
end

-- load(chunk [, name [, mode [, env]]]) with a string chunk and an env.
local load51, loadstring, setfenv = load, loadstring, setfenv
load = function(chunk, name, _, env)
  local f, err
  if type(chunk) == "string" then f, err = loadstring(chunk, name)
  else f, err = load51(chunk, name) end
  if f and env then setfenv(f, env) end
  return f, err
end

local loadfile51 = loadfile
loadfile = function(path, _, env)
  local f, err = loadfile51(path)
  if f and env then setfenv(f, env) end
  return f, err
end

-- os.execute(cmd) -> true|nil, "exit"|"signal", code (5.1 returns the
-- wait status as one number).
local execute = os.execute
os.execute = function(cmd)
  local st, how, code = execute(cmd)
  if type(st) ~= "number" then return st, how, code end   -- a LuaJIT with 5.2 semantics
  if cmd == nil then return st ~= 0 end
  if st == 0 then return true, "exit", 0 end
  if st % 256 == 0 then return nil, "exit", st / 256 end
  return nil, "signal", st % 128
end

return true
