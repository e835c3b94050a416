-- util.lua: the small helpers the bench drivers (run.lua, instr.lua) share.
local M = {}

-- s quoted for sh.
function M.q(s) return "'" .. tostring(s):gsub("'", "'\\''") .. "'" end

-- The output of shell command cmd.
function M.sh(cmd)
  local f = assert(io.popen(cmd))
  local out = f:read("*a")
  f:close()
  return out
end

-- The contents of file path, or nil.
function M.readf(path)
  local f = io.open(path, "rb")
  if not f then return nil end
  local s = f:read("*a")
  f:close()
  return s
end

function M.writef(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

return M
