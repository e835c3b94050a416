-- The faults the torture driver injects, one function each. A fault gets
-- the round's environment `env` (topology handles, the worker table, the
-- proxy's control file) and its planned arguments, does its work (bounded:
-- every redis-cli runs under `timeout`), and returns details for the
-- driver's history record. Faults that last (a pause, a stopped worker, a
-- proxy mode) return an `undo` function and the driver calls it when due.
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"

local faults = {}
local rcli = topology.rcli

local function sh(cmd)
  local ok = os.execute(cmd)
  return ok == true or ok == 0
end

-- Every redis-server of the round's topology that takes data.
local function data_servers(env)
  local t = env.topo
  if t.kind == "single" then return { t.srv }
  elseif t.kind == "redlock" then return t.h.servers
  elseif t.kind == "sentinel" then return { t.h.master }
  else return t.h.nodes end
end

local function pick_server(env, a)
  local s = data_servers(env)
  return s[(a.server or 1) % #s + 1], (a.server or 1) % #s + 1
end

-- Whether the node on port says the cluster is ok.
local function cluster_ok(port)
  return rcli(port, "cluster", "info"):find("cluster_state:ok", 1, true) ~= nil
end

--- Restart a server (SIGKILL, then start again on its port: AOF with
--- appendfsync always keeps every write it acknowledged).
function faults.restart(env, a)
  local srv, i = pick_server(env, a)
  srv.restart()
  return { server = i }
end

--- An outage: kill a server, and start it again on its port `dur` s
--- later (AOF keeps what it acknowledged); clients' links and
--- subscriptions fail meanwhile, and must come back by themselves.
function faults.outage(env, a)
  local srv, i = pick_server(env, a)
  srv.restart_after(a.dur)
  return { server = i, dur = a.dur }, function() srv.wait_up(10) end
end

--- CLIENT PAUSE ALL for `dur` s (Redis ends it by itself).
function faults.pause(env, a)
  local srv, i = pick_server(env, a)
  rcli(srv.port, "client", "pause", math.floor(a.dur * 1000), "all")
  return { server = i, dur = a.dur }
end

--- DEBUG SLEEP `dur` s, in the background (the server answers nobody).
function faults.sleep(env, a)
  local srv, i = pick_server(env, a)
  sh(("timeout %d redis-cli -p %d debug sleep %.2f >/dev/null 2>&1 &"):format(
    math.ceil(a.dur) + 5, srv.port, a.dur))
  return { server = i, dur = a.dur }
end

--- SCRIPT FLUSH and FUNCTION FLUSH everywhere: every script and the
--- function library must be loaded again.
function faults.flush(env)
  for _, s in ipairs(data_servers(env)) do
    rcli(s.port, "script", "flush")
    rcli(s.port, "function", "flush")
  end
  return {}
end

--- CLIENT KILL TYPE `type` on one server, as a fault.
local function kill_clients(type)
  return function(env, a)
    local srv, i = pick_server(env, a)
    rcli(srv.port, "client", "kill", "type", type)
    return { server = i }
  end
end

--- CLIENT KILL TYPE normal: every client connection breaks.
faults.kill_conns = kill_clients("normal")

--- CLIENT KILL TYPE pubsub: every subscriber connection of one server
--- breaks (waiters' sockets, the watchdogs' notice listeners).
faults.kill_subs = kill_clients("pubsub")

--- A lock's key disappears as under maxmemory eviction: DEL of
--- <prefix>{name} on one server (Redlock: one master, or every one).
function faults.evict(env, a)
  local key = helper.lock_key(a.name)
  local t = env.topo
  local servers = {}
  if t.kind == "redlock" then
    if a.all then
      for i, s in ipairs(t.h.servers) do rcli(s.port, "del", key); servers[#servers + 1] = i end
    else
      local s, i = pick_server(env, a)
      rcli(s.port, "del", key)
      servers[1] = i
    end
  elseif t.kind == "cluster" then
    for i, s in ipairs(t.h.nodes) do        -- whichever node has it
      local r = rcli(s.port, "del", key)
      if r == "1" then servers[1] = i end
    end
    servers[1] = servers[1] or 1
  else
    rcli(data_servers(env)[1].port, "del", key)
    servers[1] = 1
  end
  return { name = a.name, servers = servers }
end

--- The proxy in front of a server (the single server, or one Redlock
--- master) loses, delays or cuts replies for `dur` s.
function faults.proxy(env, a)
  local i = (a.server or 1) % #env.proxy_ctls + 1
  local function set(m)
    local f = assert(io.open(env.proxy_ctls[i], "w"))
    f:write(m, "\n")
    f:close()
  end
  set(a.mode == "delay" and ("delay %.2f"):format(a.delay) or a.mode)
  return { server = i, mode = a.mode, delay = a.delay, dur = a.dur }, function() set("pass") end
end


--- A flood of PUBLISH on the notice channel of forced releases, from
--- another process, for `dur` s (anyone allowed to PUBLISH can send it).
function faults.flood(env, a)
  local srv, i = pick_server(env, a)
  sh(("timeout %.2f redis-benchmark -p %d -c 1 -n 100000000 -q PUBLISH dlock:forced flood " ..
      ">/dev/null 2>&1 &"):format(a.dur, srv.port))
  return { server = i, dur = a.dur }
end

-- A writer of the short form (src/redis/scripts/README.md, THE SHORT
-- FORM), as a client that keeps a lock short would be: lock KEYS[1], if
-- it is a hash the short form can stand for, becomes that string, with
-- the same TTL.
local SHORTEN = [==[
local k = KEYS[1]
if redis.call('type', k).ok ~= 'hash' then return 0 end
local all, h, owner = redis.call('hgetall', k), {}, nil
for i = 1, #all, 2 do h[all[i]] = all[i + 1] end
if not (h.n or ''):match('^%d+$') or not (h.t or ''):match('^%d+$') then return 0 end
for f in pairs(h) do
  if f ~= 'n' and f ~= 't' and f ~= 'g' then
    local c, x = f:sub(1, 1), f:sub(2)
    if (c ~= 'q' and c ~= 'o' and c ~= 'k') or x == '' or (owner and owner ~= x) then return 0 end
    owner = x
  end
end
if not owner then return 0 end
local q, o, kv = h['q' .. owner], h['o' .. owner], h['k' .. owner]
if not (q or ''):match('^%d+$') or (h.g and h.g ~= owner) then return 0 end
if (h.n == '0' and o) or (h.n ~= '0' and o ~= h.n) then return 0 end
if kv and not kv:match('^[%de]+$') then return 0 end
local ttl = redis.call('pttl', k)
redis.call('del', k)
redis.call('set', k, table.concat({ h.n, h.t, q, kv or '', h.g and 'g' or '', owner }, '|'))
if ttl >= 0 then redis.call('pexpire', k, string.format('%d', math.min(math.max(ttl, 1), 2 ^ 52))) end
return 1
]==]

--- For `dur` s, lock `name` is turned into its short form wherever and
--- whenever it is in a state the short form stands for (every 5 ms, on
--- every server that may have it): every script must take it as the
--- hash it stands for, so this fault excuses nothing.
function faults.shorten(env, a)
  local path = ("%s/shorten.lua"):format(helper.tmp)
  local f = assert(io.open(path, "w"))
  f:write(SHORTEN)
  f:close()
  local ports = {}
  for _, s in ipairs(data_servers(env)) do ports[#ports + 1] = tostring(s.port) end
  sh(("timeout %.2f sh -c 'while :; do for p in %s; do redis-cli -p $p --eval %s %s " ..
      ">/dev/null 2>&1; done; sleep 0.005; done' >/dev/null 2>&1 &"):format(
      a.dur, table.concat(ports, " "), path, helper.lock_key(a.name)))
  return { name = a.name, dur = a.dur }
end

--- Cluster: SIGKILL the master of lock `name`'s slot and wait until its
--- replica has taken over (the cluster says ok: the fault's end, t1).
--- The killed node stays down for `dur` s more, then comes back as a
--- replica of the new master: meanwhile nothing redirects a client that
--- still sends to it (it answers nothing).
function faults.kill_master(env, a)
  local c = env.topo.h
  local from = c.owner(c.keyslot(helper.lock_key(a.name)))
  if not from then return { skipped = true } end
  local port = c.nodes[from].port
  -- Only a master whose replica has its data (online, the link's offset
  -- caught up): killing one whose replica was still syncing (the node a
  -- kill before brought back) loses every key of its slots, as a restart
  -- without persistence does, a fault of another kind.
  local info = rcli(port, "info", "replication")
  local offset = tonumber(info:match("master_repl_offset:(%d+)"))
  local synced = false
  for off in info:gmatch("slave%d+:[^\n]*state=online,offset=(%d+)") do
    if offset and offset - tonumber(off) < 1000 then synced = true end
  end
  if not synced then return { skipped = true } end
  -- And only while every node is up and says the cluster is ok: with an
  -- earlier kill's master still down, a second one leaves a minority of
  -- masters, which promote nobody until it is back (a cluster down for
  -- the rest of the round is no fault of the clients').
  for _, h in ipairs(c.nodes) do
    if not h.pid or not cluster_ok(h.port) then return { skipped = true } end
  end
  c.kill_master(from, 40)
  return { name = a.name, from = from, port = port, down = a.dur },
         function() c.nodes[from].restart() end
end

--- SIGKILL a worker (while it very likely holds something); the driver
--- starts another in its place.
function faults.sigkill(env, a)
  local w = env.pick_worker(a.worker)
  if not w then return { skipped = true } end
  w.signal("CONT")
  w.signal("KILL")
  env.killed(w, a)
  return { w = w.name }
end

--- SIGSTOP a worker for `dur` s: its leases run out while it sleeps.
function faults.sigstop(env, a)
  local w = env.pick_worker(a.worker)
  if not w then return { skipped = true } end
  w.signal("STOP")
  env.log{ ev = "stop", w = w.name, t = dlock.now() }
  return { w = w.name, dur = a.dur }, function()
    w.signal("CONT")
    env.log{ ev = "cont", w = w.name, t = dlock.now() }
  end
end

--- SENTINEL FAILOVER, then the old master is made a replica of the new.
function faults.failover(env)
  local h = env.topo.h
  local old = h.master.port
  h.failover(25)
  return { from = old, to = h.master.port }
end

--- A live slot migration of the slot of lock `name`: IMPORTING and
--- MIGRATING are set, the keys move over a second or two (clients meet
--- ASK and TRYAGAIN meanwhile), then the slot is given to the target.
---
--- The slot is handed over only once the source holds none of its keys:
--- the target's SETSLOT NODE reaches the source by gossip, and a source
--- that loses a slot while it still holds keys there deletes them (a
--- fencing counter lost so starts again at 1). Keys move with REPLACE: a
--- key the source still holds was never reachable on the target (clients
--- are sent there only for keys the source lacks), so a copy there is a
--- stale one, left by a MIGRATE whose reply timed out (a target asleep)
--- after the target had stored it, which would refuse every later move
--- with BUSYKEY. Keys that will not move within the deadline (a target
--- that answers CLUSTERDOWN) fail the fault, with the last replies: the
--- migration is undone if none had moved yet, else left open (every key
--- stays reachable, by ASK). A migration starts only between two live
--- masters that say the cluster is ok (a node's map may still name a
--- master just killed).
function faults.migrate(env, a)
  local c = env.topo.h
  local key = helper.lock_key(a.name)
  local slot = c.keyslot(key)
  local from = c.owner(slot)
  if not from or not c.is_master(from) then return { skipped = true } end
  local to                              -- another master (not a replica)
  for k = 1, #c.nodes do
    local i = (from + (a.step or 0) + k - 1) % #c.nodes + 1
    if i ~= from and c.is_master(i) then to = i; break end
  end
  if not to then return { skipped = true } end
  local src, dst = c.nodes[from], c.nodes[to]
  if not cluster_ok(src.port) or not cluster_ok(dst.port) then return { skipped = true } end
  local function must(port, ...)
    local r = rcli(port, ...)
    if r ~= "OK" then error(("migrate: %s on %d: %s"):format(table.concat({ ... }, " "), port, r), 0) end
  end
  local function undo()
    rcli(src.port, "cluster", "setslot", slot, "stable")
    rcli(dst.port, "cluster", "setslot", slot, "stable")
  end
  must(dst.port, "cluster", "setslot", slot, "importing", c.ids[from])
  local ok, err = pcall(must, src.port, "cluster", "setslot", slot, "migrating", c.ids[to])
  if not ok then undo(); error(err, 0) end
  dlock.sleep(a.before or 0.5)
  local deadline, replies = dlock.now() + 30, {}
  while rcli(src.port, "cluster", "countkeysinslot", slot) ~= "0" do
    local keys = {}
    for k in rcli(src.port, "cluster", "getkeysinslot", slot, 3):gmatch("[^\n]+") do
      keys[#keys + 1] = k
    end
    if dlock.now() > deadline then
      local moved = rcli(dst.port, "cluster", "countkeysinslot", slot)
      if moved == "0" then undo() end
      error(("migrate: slot %d kept %s on %d (%s); replies: %s"):format(slot,
        table.concat(keys, " "), src.port, moved == "0" and "undone: none had moved" or
        "left open: " .. moved .. " moved", table.concat(replies, " | ", 1, math.min(#replies, 3))), 0)
    end
    if #keys > 0 then
      local r = rcli(src.port, "migrate", "127.0.0.1", dst.port, "", 0, 5000, "replace",
                     "keys", (table.unpack or unpack)(keys))
      if r ~= "OK" and r ~= "NOKEY" then replies[#replies + 1] = r end
    end
    dlock.sleep(a.between or 0.1)
  end
  dlock.sleep(a.after or 0.2)
  must(dst.port, "cluster", "setslot", slot, "node", c.ids[to])
  must(src.port, "cluster", "setslot", slot, "node", c.ids[to])
  for i, n in ipairs(c.nodes) do
    if i ~= from and i ~= to and n.pid and c.is_master(i) then
      rcli(n.port, "cluster", "setslot", slot, "node", c.ids[to])
    end
  end
  return { name = a.name, slot = slot, from = from, to = to,
           replies = #replies > 0 and table.concat(replies, " | ") or nil }
end

return faults
