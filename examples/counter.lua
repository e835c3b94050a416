-- Several processes increment one counter kept in a file - read, add one,
-- write back, not atomic at all - under one lock. No update is lost.
local dlock = require "dlock"

local url = os.getenv("REDIS_URL")
local nproc, iters = 4, 200

if arg[1] == "worker" then                       -- one of the processes
  local path = arg[2]
  local client = assert(dlock.connect(url))
  local lock = client:lock("counter:" .. path)
  for _ = 1, iters do
    assert(lock:with(function()
      local f = io.open(path, "rb")
      local v = f and tonumber(f:read("*a")) or 0
      if f then f:close() end
      f = assert(io.open(path, "wb"))
      f:write(tostring(v + 1))
      f:close()
    end))
  end
  client:close()
  os.exit(0)
end

local path = os.tmpname()
local lua = arg[-1] or "lua5.4"
local cmd = {}
for i = 1, nproc do
  cmd[i] = ("'%s' '%s' worker '%s' &"):format(lua, arg[0], path)
end
local t0 = dlock.now()
assert(os.execute(table.concat(cmd, " ") .. " wait"))
local f = assert(io.open(path, "rb"))
local got = tonumber(f:read("*a"))
f:close()
os.remove(path)
print(("%d processes x %d increments = %d; counter = %d; lost updates: %d (%.2f s)")
  :format(nproc, iters, nproc * iters, got, nproc * iters - got, dlock.now() - t0))
if got ~= nproc * iters then os.exit(1) end
