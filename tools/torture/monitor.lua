-- The torture monitor: a process that asks every lock of the round who
-- holds it (client:inspect, read only) a few times a second and logs the
-- holders' client ids, so the checker can see a lock still held long
-- after its holder was killed or closed.
--   lua monitor.lua ROUND_CONFIG
local here = arg[0]:match("^(.*)/[^/]*$") or "."
package.path = here .. "/?.lua;" .. package.path
local dlock = require "dlock"
local common = require "common"

local cfg = dofile(arg[1])
local log = common.writer(cfg.dir .. "/monitor.log")
local o = { command_timeout = cfg.cto, connect_timeout = cfg.cto, label = "monitor" }
for k, v in pairs(cfg.direct or cfg.conn) do o[k] = v end
local c
while not c and dlock.now() < cfg.monitor_until do
  c = dlock.connect(o)
  if not c then dlock.sleep(0.2) end
end

-- Redlock: each master on its own too, so that a history shows what each
-- one held (ev "master": every owner, shared ones included), not only
-- what a quorum says.
-- (A short timeout: a master that sleeps must not slow the quorum view.)
local urls, masters = (cfg.direct or cfg.conn).servers or {}, {}

local function each_master(name)
  for i, url in ipairs(urls) do
    masters[i] = masters[i] or dlock.connect{ url = url, command_timeout = 0.1,
                                              connect_timeout = 0.1, label = "monitor" }
    local m = masters[i]
    local t0 = dlock.now()
    local info, err
    if m then info, err = m:inspect(name) else err = "not connected" end
    local owners = {}
    for _, x in ipairs(info and info.owners or {}) do
      owners[#owners + 1] = ("%s/%s x%s"):format(tostring(x.client), tostring(x.owner or "-"),
                                                 tostring(x.count))
    end
    log{ ev = "master", w = "monitor", name = name, m = i, t0 = t0, t1 = dlock.now(),
         token = info and info.token, ttl = info and info.ttl, owners = owners,
         err = err and tostring(err) }
  end
end

-- The clients whose holds of a shared owner ("job:...") lock `name`
-- still counts: h<requester> fields of its hash whose share has not ended
-- (d<requester> in the future by Redis's clock, or none kept: the check
-- then sees every such count). Not on Redlock (no shared owners there).
local function tag(n) return n:find("^[}\1]") and "\1" .. n or n end
local function shares(name)
  if (cfg.conn).servers then return nil end
  local all = c:call("HGETALL", "dlock:{" .. tag(name) .. "}")
  local tm = c:call("TIME")
  if type(all) ~= "table" or type(tm) ~= "table" then return nil end
  local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
  local h, ids = {}, {}
  for i = 1, #all - 1, 2 do h[all[i]] = all[i + 1] end
  for f in pairs(h) do
    local id, owner = f:match("^h(%x+)|(job:.*)$")
    local d = id and h["d" .. id .. "|" .. owner]
    if id and (not d or tonumber(d) > now) then ids[#ids + 1] = id end
  end
  return ids
end

while c and dlock.now() < cfg.monitor_until do
  for _, name in ipairs(cfg.all_names) do
    local t0 = dlock.now()
    local info, err = c:inspect(name)
    if err then                         -- (check.lua: a CROSSSLOT is a violation)
      log{ ev = "note", w = "monitor", name = name, t0 = t0, t1 = dlock.now(),
           what = "inspect failed", err = tostring(err) }
    elseif info then
      local ids = {}
      for _, x in ipairs(info.owners or {}) do
        -- An explicit owner shared by workers is named after any one of
        -- their clients, maybe a dead one while a live one holds it.
        if not (x.owner and x.owner:match("^job:")) then ids[#ids + 1] = x.client end
      end
      log{ ev = "inspect", w = "monitor", name = name, t0 = t0, t1 = dlock.now(), clients = ids,
           shares = info.owners and #info.owners > 0 and shares(name) or nil }
    end
    each_master(name)
  end
  dlock.sleep(0.3)
end
