-- The same lock code on every deployment: only connect changes.
-- With REDIS_URL (make demo) it runs on one server. To try the others, give
--   DLOCK_SERVERS="redis://h1:6379 redis://h2:6379 redis://h3:6379"   (Redlock)
--   DLOCK_SENTINELS="redis://s1:26379 redis://s2:26379" DLOCK_MASTER=mymaster
--   DLOCK_CLUSTER="redis://n1:7000 redis://n2:7001"
local dlock = require "dlock"

local function words(s)
  local t = {}
  for w in (s or ""):gmatch("%S+") do t[#t + 1] = w end
  return #t > 0 and t or nil
end

local deployments = {
  { "one server", os.getenv("REDIS_URL") and { url = os.getenv("REDIS_URL") } },
  { "Redlock", words(os.getenv("DLOCK_SERVERS")) and { servers = words(os.getenv("DLOCK_SERVERS")) } },
  { "Sentinel", words(os.getenv("DLOCK_SENTINELS")) and
      { sentinels = words(os.getenv("DLOCK_SENTINELS")), master = os.getenv("DLOCK_MASTER") or "mymaster" } },
  { "Cluster", words(os.getenv("DLOCK_CLUSTER")) and { cluster = words(os.getenv("DLOCK_CLUSTER")) } },
}

-- The user's code: identical for every deployment.
local function reserve_stock(client, item)
  return client:with("stock:" .. item, function()
    local lock = client:lock("stock:" .. item)
    return ("reserved %s under fencing token %d"):format(item, lock:token())
  end)
end

for _, d in ipairs(deployments) do
  local name, opts = d[1], d[2]
  if opts then
    local client, err = dlock.connect(opts)
    if client then
      print(name .. ":", reserve_stock(client, "42"))
      client:close()
    else
      print(name .. ": cannot connect: " .. err)
    end
  else
    print(name .. ": not configured")
  end
end
