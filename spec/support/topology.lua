-- High-availability topologies on loopback for specs: N independent masters
-- (Redlock), master + replica + 3 sentinels, and a Redis Cluster. Every
-- server is a helper.start_redis handle (cli, signal, stop, restart) with its
-- pidfile in $DLOCK_TMP, so tools/with-tmp.sh kills whatever a spec leaves.
-- Every wait is bounded and raises "topology: ..." with what it last saw.
--
--   topology.masters(n [, extra [, tls]]) -> { servers = {h...}, urls = {...}, stop() }
--   topology.sentinel([opts])      -> { master = h, replica = h, sentinels = {h, h, h},
--       sentinel_urls = {...}, name = "mymaster", stop(), failover([timeout [, fopts]]) }
--   topology.cluster([n [, opts]]) -> { nodes = {h...}, urls = {...}, ids = {node ids},
--       stop(), move_slot(slot, to_index [, timeout]), owner(slot), node_for(key),
--       keyslot(key) }
--   topology.keyslot(cluster, key) -> the slot of key, as CLUSTER KEYSLOT gives it
--
-- A handle h is helper.start_redis's: port, url, pid, cli(...), signal(sig),
-- stop(), restart(). Sentinel handles' url has no "/db" (Sentinel has no
-- SELECT); the others' is helper's "redis://127.0.0.1:PORT/0". Given
-- opts.tls (helper.tls_certs()), every server listens with TLS only, URLs
-- are rediss:// and rcli speaks TLS.
local dlock = require "dlock"
local helper = require "helper"

local topology = {}

local function q(s)                       -- one shell word
  return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

--- redis-cli against a port, bounded in time (a stopped or paused server
--- cannot hang a wait); output without trailing blanks.
local function rcli(port, ...)
  local args = {}
  for i, a in ipairs({ ... }) do args[i] = q(a) end
  local f = assert(io.popen(("timeout 5 redis-cli -p %d %s %s 2>&1"):format(
    port, helper.cli_flags[port] or "", table.concat(args, " "))))
  local out = f:read("*a")
  f:close()
  return (out:gsub("%s+$", ""))
end
topology.rcli = rcli

local function lines(s)
  local t = {}
  for l in (s or ""):gmatch("[^\n]+") do t[#t + 1] = l end
  return t
end

local function info_field(port, section, field)
  return rcli(port, "info", section):match(field .. ":([^\r\n]*)")
end

--- Poll fn() (returning ok, detail) until ok or `timeout` seconds pass;
--- raises with `what` and the last detail on timeout.
local function await(what, timeout, fn, step)
  local deadline = dlock.now() + timeout
  local ok, detail
  repeat
    ok, detail = fn()
    if ok then return ok end
    dlock.sleep(step or 0.05)
  until dlock.now() > deadline
  ok, detail = fn()
  if ok then return ok end
  error(("topology: timed out after %gs waiting for %s (last: %s)"):format(
    timeout, what, tostring(detail)), 2)
end
topology.await = await

-- KILL them all first, then stop() each: stop() waits until the process is
-- gone, and where init reaps orphans slowly (about every 2 s in some
-- containers) one wait then covers every server instead of one wait each.
local function stop_all(handles)
  for _, h in pairs(handles) do
    if h and h.pid then h.signal("KILL") end
  end
  for _, h in pairs(handles) do
    if h and h.stop then h.stop() end
  end
end

-- "--dir <a fresh directory>": helper's servers share $DLOCK_TMP as their
-- dir, and a replica's full sync leaves dump.rdb there, which every server
-- started later would load (a cluster node even claims the slots of the
-- keys it loaded, and `--cluster create` then refuses it as "not empty").
local function own_dir(tag)
  local d = ("%s/%s-%d-%d"):format(helper.tmp, tag, math.random(1, 1e9), math.random(1, 1e9))
  assert(os.execute("mkdir -p '" .. d .. "'"))
  return "--dir " .. d
end

---------------------------------------------------------------------------
-- N independent masters
---------------------------------------------------------------------------

--- n independent redis-servers: { servers, urls, stop() }.
function topology.masters(n, extra, tls)
  local t = { servers = {}, urls = {} }
  function t.stop() stop_all(t.servers) end
  local ok, err = pcall(function()
    for i = 1, n do
      t.servers[i] = helper.start_redis(own_dir("master") .. " " .. (extra or ""), { tls = tls })
      t.urls[i] = t.servers[i].url
    end
  end)
  if not ok then t.stop(); error(err, 0) end
  return t
end

---------------------------------------------------------------------------
-- Sentinel: master + replica + 3 sentinels
---------------------------------------------------------------------------

-- Flat "name value name value ..." replies (redis-cli without a tty) to a
-- table; `SENTINEL replicas` concatenates one such list per replica, each
-- starting with "name".
local function pairs_list(out)
  local l, items, cur = {}, {}, nil
  for x in (out .. "\n"):gmatch("(.-)\r?\n") do l[#l + 1] = x end  -- values may be ""
  for i = 1, #l - 1, 2 do
    if l[i] == "name" or not cur then cur = {}; items[#items + 1] = cur end
    cur[l[i]] = l[i + 1]
  end
  return items
end

-- Replication: no 5 s diskless-sync delay before the first full sync.
local REPL = "--repl-diskless-sync-delay 0"

local function link_up(h)
  local s = info_field(h.port, "replication", "master_link_status")
  return s == "up", "master_link_status=" .. tostring(s)
end

--- One master, one replica and 3 sentinels monitoring it as `name`
--- ("mymaster"). opts: timeout (s, default 20), quorum (2),
--- down_after_ms (1000), failover_timeout_ms (5000), tls.
function topology.sentinel(opts)
  opts = opts or {}
  local timeout = opts.timeout or 20
  local name = opts.name or "mymaster"
  local t = { name = name, sentinels = {}, sentinel_urls = {} }
  function t.stop()
    local all = { t.master, t.replica }
    for _, s in ipairs(t.sentinels) do all[#all + 1] = s end
    stop_all(all)
  end

  -- Every live sentinel points at the master, sees the replica connected
  -- and at least `others` other sentinels (they never forget a dead one).
  local function check(expect_port, others)
    for _, s in ipairs(t.sentinels) do
      if s.pid then
        local addr = lines(rcli(s.port, "sentinel", "get-master-addr-by-name", name))
        if tonumber(addr[2]) ~= expect_port then
          return false, ("sentinel %d: master addr %s"):format(s.port, table.concat(addr, ":"))
        end
        local m = pairs_list(rcli(s.port, "sentinel", "master", name))[1] or {}
        if m.flags ~= "master" or (tonumber(m["num-other-sentinels"]) or -1) < others then
          return false, ("sentinel %d: master flags=%s num-other-sentinels=%s"):format(
            s.port, tostring(m.flags), tostring(m["num-other-sentinels"]))
        end
        local seen
        for _, r in ipairs(pairs_list(rcli(s.port, "sentinel", "replicas", name))) do
          if tonumber(r.port) == t.replica.port and r.flags == "slave" then seen = true end
        end
        if not seen then
          return false, ("sentinel %d: replica %d not seen connected"):format(
            s.port, t.replica.port)
        end
      end
    end
    return true
  end
  local function live_sentinels()
    local n = 0
    for _, s in ipairs(t.sentinels) do if s.pid then n = n + 1 end end
    return n
  end

  local ok, err = pcall(function()
    local repl = REPL .. " " .. (opts.extra or "")
    t.master = helper.start_redis(own_dir("master") .. " " .. repl, { tls = opts.tls })
    t.replica = helper.start_redis(("%s %s --replicaof 127.0.0.1 %d"):format(
      own_dir("replica"), repl, t.master.port), { tls = opts.tls })
    -- Sentinels learn replicas from the master's INFO, which they read on
    -- connecting and then only every 10 s: have the replica online first.
    await("the replica's link to the master", timeout, function() return link_up(t.replica) end)
    await("the master to list the replica online", timeout, function()
      local s = info_field(t.master.port, "replication", "slave0")
      return s and s:find("port=" .. t.replica.port .. ",state=online", 1, true), s
    end)
    for i = 1, 3 do
      local conf = helper.unique_name(helper.tmp .. "/sentinel"):gsub(":", "-") .. ".conf"
      local f = assert(io.open(conf, "w"))
      -- port, pidfile and logfile come from helper's command line; Sentinel
      -- rewrites this file with what it learns (so a restart resumes).
      f:write(table.concat({
        "bind 127.0.0.1",
        "daemonize yes",
        "dir " .. helper.tmp,
        "sentinel resolve-hostnames no",
        ("sentinel monitor %s 127.0.0.1 %d %d"):format(name, t.master.port, opts.quorum or 2),
        ("sentinel down-after-milliseconds %s %d"):format(name, opts.down_after_ms or 1000),
        ("sentinel failover-timeout %s %d"):format(name, opts.failover_timeout_ms or 5000),
        "" }, "\n"))
      f:close()
      local s = helper.start_redis(nil, { conf = conf, sentinel = true, tls = opts.tls })
      s.url = ("redis%s://127.0.0.1:%d"):format(opts.tls and "s" or "", s.port)  -- no db:
      -- Sentinel has no SELECT
      s.conf = conf
      t.sentinels[i] = s
      t.sentinel_urls[i] = s.url
    end
    -- Sentinels find each other through hello messages every 2 s.
    await("the sentinels to agree on master, replica and each other", timeout,
      function() return check(t.master.port, 2) end)
  end)
  if not ok then t.stop(); error(err, 0) end

  --- Force a failover (SENTINEL FAILOVER on the first live sentinel) and
  --- wait until every live sentinel names the old replica as master and it
  --- reports role:master; if Sentinel already promoted it (the master was
  --- killed, say), only that wait remains. Unless fopts.reattach == false,
  --- an old master that still answers is then made a replica of the new one
  --- (what Sentinel itself does some 10 s later) and the sentinels are
  --- waited for to see it connected. `timeout` (s, default 20) bounds the
  --- whole call. Swaps t.master and t.replica; returns the new master.
  function t.failover(ftimeout, fopts)
    local deadline = dlock.now() + (ftimeout or 20)
    local function left() return math.max(0, deadline - dlock.now()) end
    fopts = fopts or {}
    local old, new = t.master, t.replica
    local s
    for _, x in ipairs(t.sentinels) do if x.pid then s = x; break end end
    assert(s, "topology: no live sentinel")
    local function addr_of(x)
      return lines(rcli(x.port, "sentinel", "get-master-addr-by-name", name))
    end
    if tonumber(addr_of(s)[2]) ~= new.port then
      -- NOGOODSLAVE right after a previous change: retry until the deadline.
      -- INPROG means one is under way (maybe ours, if a first reply was
      -- lost): never start a second one, which would fail back.
      await("SENTINEL FAILOVER to be accepted", left(), function()
        local r = rcli(s.port, "sentinel", "failover", name)
        return r == "OK" or r:find("INPROG", 1, true), r
      end, 0.2)
    end
    await("the sentinels to name the old replica as master", left(), function()
      for _, x in ipairs(t.sentinels) do
        if x.pid then
          local addr = addr_of(x)
          if tonumber(addr[2]) ~= new.port then
            return false, ("sentinel %d says %s"):format(x.port, table.concat(addr, ":"))
          end
        end
      end
      local role = info_field(new.port, "replication", "role")
      return role == "master", "old replica role=" .. tostring(role)
    end)
    t.master, t.replica = new, old
    if fopts.reattach ~= false and old.pid and rcli(old.port, "ping") == "PONG" then
      local r = rcli(old.port, "replicaof", "127.0.0.1", new.port)
      -- "OK" or "OK Already connected to specified master" (Sentinel was first)
      assert(r:find("^OK"), "topology: REPLICAOF on the old master: " .. r)
      await("the old master to replicate from the new one", left(),
        function() return link_up(old) end)
      await("the sentinels to see the old master as a connected replica", left(),
        function() return check(new.port, live_sentinels() - 1) end)
    end
    return new
  end

  return t
end

---------------------------------------------------------------------------
-- Cluster
---------------------------------------------------------------------------

-- A free port for a cluster bus, above helper's data ports (from 10000 up
-- to the ephemeral range) and Linux's default ephemeral range
-- (32768-60999). Redis' default bus port (port + 10000) would not fit
-- above 55535, so it is set explicitly.
local function bus_port(taken)
  return helper.free_port(taken, nil, 61000, 65535)
end

-- CLUSTER NODES as { [id] = { id, port, flags, slots = { {lo, hi}... } } }
-- plus myself's id.
local function cluster_nodes(port)
  local nodes, me = {}, nil
  for _, l in ipairs(lines(rcli(port, "cluster", "nodes"))) do
    local f = {}
    for w in l:gmatch("%S+") do f[#f + 1] = w end
    local p = f[2] and tonumber(f[2]:match(":(%d+)@"))
    if p then
      local n = { id = f[1], port = p, flags = f[3], slots = {} }
      for i = 9, #f do
        local lo, hi = f[i]:match("^(%d+)%-(%d+)$")
        if lo then
          n.slots[#n.slots + 1] = { tonumber(lo), tonumber(hi) }
        elseif f[i]:match("^%d+$") then
          n.slots[#n.slots + 1] = { tonumber(f[i]), tonumber(f[i]) }
        end
      end
      nodes[n.id] = n
      if n.flags:find("myself", 1, true) then me = n.id end
    end
  end
  return nodes, me
end
topology.cluster_nodes = cluster_nodes

local function owner_port(nodes, slot)
  for _, n in pairs(nodes) do
    for _, r in ipairs(n.slots) do
      if slot >= r[1] and slot <= r[2] then return n.port, n.id end
    end
  end
end

-- CRC16-CCITT (XMODEM), Redis Cluster's key hash, in arithmetic only (the
-- specs run on Lua 5.1 too, which has no bit operators).
local function xor(a, b, bits)
  local r, bit = 0, 1
  for _ = 1, bits do
    if a % 2 ~= b % 2 then r = r + bit end
    a, b, bit = (a - a % 2) / 2, (b - b % 2) / 2, bit * 2
  end
  return r
end
local CRC = {}
for i = 0, 255 do
  local crc = i * 256
  for _ = 1, 8 do
    if crc >= 32768 then crc = xor((crc * 2) % 65536, 0x1021, 16)
    else crc = (crc * 2) % 65536 end
  end
  CRC[i] = crc
end

--- Slot of `key`, computed here as Redis does (CRC16 of the key, or of
--- its first non-empty {hash tag}, modulo 16384): CLUSTER KEYSLOT without
--- a redis-cli process per key (harness_spec checks the two agree).
function topology.keyslot(_, key)
  local open = key:find("{", 1, true)
  if open then
    local close = key:find("}", open + 1, true)
    if close and close > open + 1 then key = key:sub(open + 1, close - 1) end
  end
  local crc = 0
  for i = 1, #key do
    local hi = (crc - crc % 256) / 256
    crc = xor((crc * 256) % 65536, CRC[xor(hi, key:byte(i), 8)], 16)
  end
  return crc % 16384
end

--- n masters (default 3), each with opts.replicas replicas (default 0),
--- all 16384 slots assigned as `redis-cli --cluster create` assigns them
--- (c.nodes[1..n] are the masters). opts:
--- timeout (s, default 30), node_timeout_ms (2000), tls, replicas.
--- With replicas, c.kill_master(i) kills master c.nodes[i] and waits
--- until a replica has taken over its slots.
function topology.cluster(n, opts)
  opts = opts or {}
  local masters = n or 3
  local replicas = opts.replicas or 0
  n = masters * (1 + replicas)
  local timeout = opts.timeout or 30
  local c = { nodes = {}, urls = {}, ids = {} }
  local confs = {}
  function c.stop()
    stop_all(c.nodes)
    for _, f in ipairs(confs) do os.remove(f) end
  end

  --- Index (in c.nodes) of the node owning `slot`, per the first live node.
  function c.owner(slot)
    for _, h in ipairs(c.nodes) do
      if h.pid then
        local p = owner_port(cluster_nodes(h.port), slot)
        for i, x in ipairs(c.nodes) do if x.port == p then return i end end
        return nil
      end
    end
  end

  --- The handle owning `key`'s slot.
  function c.node_for(key) return c.nodes[c.owner(topology.keyslot(c, key))] end
  function c.keyslot(key) return topology.keyslot(c, key) end

  local ok, err = pcall(function()
    local taken = {}
    for i = 1, n do
      local conf = helper.unique_name(helper.tmp .. "/nodes"):gsub(":", "-") .. ".conf"
      confs[i] = conf
      local bus = bus_port(taken)
      c.nodes[i] = helper.start_redis(("%s --cluster-enabled yes --cluster-config-file %s " ..
        "--cluster-node-timeout %d --cluster-port %d %s %s"):format(own_dir("node"), conf,
        opts.node_timeout_ms or 2000, bus, REPL, opts.extra or ""), { tls = opts.tls })
      c.nodes[i].cluster_conf, c.nodes[i].bus_port = conf, bus
      c.urls[i] = c.nodes[i].url
    end
    -- What `redis-cli --cluster create` does, without its one-second
    -- sleeps between steps: each master adds its range of slots (16384
    -- split as redis-cli splits it) and takes its own config epoch, the
    -- first node meets the others (at their explicit bus ports), and each
    -- replica, once it knows its master, replicates it.
    for i, h in ipairs(c.nodes) do
      c.ids[i] = rcli(h.port, "cluster", "myid")
      local function must(...)
        local r = rcli(h.port, ...)
        if r ~= "OK" then
          error(("topology: %s on node %d: %s"):format(table.concat({ ... }, " "), h.port, r), 0)
        end
      end
      if i <= masters then
        local per = 16384 / masters
        local lo = math.floor((i - 1) * per + 0.5)
        local hi = i == masters and 16383 or math.floor(i * per + 0.5) - 1
        must("cluster", "addslotsrange", lo, hi)
      end
      must("cluster", "set-config-epoch", i)
    end
    for i = 2, n do
      local r = rcli(c.nodes[1].port, "cluster", "meet", "127.0.0.1", c.nodes[i].port,
        c.nodes[i].bus_port)
      if r ~= "OK" then error(("topology: CLUSTER MEET %d: %s"):format(c.nodes[i].port, r), 0) end
    end
    for i = masters + 1, n do
      local h, master = c.nodes[i], c.ids[(i - masters - 1) % masters + 1]
      await("node " .. h.port .. " to know its master and replicate it", timeout, function()
        local r = rcli(h.port, "cluster", "replicate", master)
        return r == "OK", r
      end, 0.02)
    end
    if replicas > 0 then
      await("every replica in sync", timeout, function()
        for _, h in ipairs(c.nodes) do
          if info_field(h.port, "replication", "role") == "slave" then
            local ok2, why = link_up(h)
            if not ok2 then return false, ("node %d: %s"):format(h.port, why) end
          end
        end
        return true
      end)
    end
    await("cluster_state:ok on every node", timeout, function()
      for _, h in ipairs(c.nodes) do
        local s = rcli(h.port, "cluster", "info")
        if not (s:find("cluster_state:ok", 1, true)
            and s:find("cluster_slots_assigned:16384", 1, true)
            and s:find("cluster_slots_ok:16384", 1, true)
            and s:find("cluster_known_nodes:" .. n .. "\r", 1, true)) then
          return false, ("node %d: %s"):format(h.port, s:gsub("\r?\n", " "):sub(1, 200))
        end
        local slaves = 0
        for _, x in pairs(cluster_nodes(h.port)) do
          if x.flags:find("slave", 1, true) then slaves = slaves + 1 end
        end
        if slaves ~= n - masters then
          return false, ("node %d sees %d replicas of %d"):format(h.port, slaves, n - masters)
        end
      end
      return true
    end)
  end)
  if not ok then c.stop(); error(err, 0) end

  -- Every live node sees `slot` at port `p` and no node still has it
  -- migrating or importing.
  local function agreed(slot, p)
    for _, h in ipairs(c.nodes) do
      if h.pid then
        local out = rcli(h.port, "cluster", "nodes")
        if out:find("[" .. slot .. "-", 1, true) then
          return false, ("node %d: slot %d still migrating/importing"):format(h.port, slot)
        end
        local o = owner_port(cluster_nodes(h.port), slot)
        if o ~= p then
          return false, ("node %d says slot %d is at %s"):format(h.port, slot, tostring(o))
        end
      end
    end
    return true
  end

  --- Whether c.nodes[i] is a master now.
  function c.is_master(i)
    return c.nodes[i].pid and info_field(c.nodes[i].port, "replication", "role") == "master"
  end

  --- Kill master c.nodes[i] (SIGKILL) and wait until one of its replicas
  --- has been promoted and the live nodes say the cluster is ok again.
  function c.kill_master(i, ktimeout)
    local port = c.nodes[i].port
    c.nodes[i].stop()
    await("a replica of " .. port .. " promoted, cluster_state:ok", ktimeout or timeout, function()
      for _, h in ipairs(c.nodes) do
        if h.pid then
          local s2 = rcli(h.port, "cluster", "info")
          if not s2:find("cluster_state:ok", 1, true) then
            return false, ("node %d: %s"):format(h.port, s2:gsub("\r?\n", " "):sub(1, 120))
          end
          local nodes = cluster_nodes(h.port)
          for _, x in pairs(nodes) do
            if x.port == port and not x.flags:find("fail", 1, true) then
              return false, ("node %d does not see %d failed yet"):format(h.port, port)
            end
          end
        end
      end
      return true
    end)
  end

  --- Move `slot` and its keys to c.nodes[to_index]: IMPORTING on the
  --- target, MIGRATING on the source, MIGRATE the keys in batches, then
  --- SETSLOT NODE on the target, the source and the rest; waits until every
  --- node agrees. Returns the number of keys moved.
  function c.move_slot(slot, to_index, mtimeout)
    mtimeout = mtimeout or 20
    local target = assert(c.nodes[to_index], "topology: no node " .. tostring(to_index))
    local tid = c.ids[to_index]
    local from = c.owner(slot)
    assert(from, "topology: slot " .. slot .. " has no owner")
    local moved = 0
    if from ~= to_index then
      local source, sid = c.nodes[from], c.ids[from]
      local function must(port, ...)
        local r = rcli(port, ...)
        if r ~= "OK" then
          error(("topology: %s on %d: %s"):format(table.concat({ ... }, " "), port, r), 3)
        end
      end
      must(target.port, "cluster", "setslot", slot, "importing", sid)
      must(source.port, "cluster", "setslot", slot, "migrating", tid)
      await("slot " .. slot .. " to be emptied by MIGRATE", mtimeout, function()
        local keys = lines(rcli(source.port, "cluster", "getkeysinslot", slot, 100))
        if #keys == 0 then return true end
        local r = rcli(source.port, "migrate", "127.0.0.1", target.port, "", 0, 5000,
          "keys", table.unpack(keys))
        if r ~= "OK" and r ~= "NOKEY" then return false, "MIGRATE: " .. r end
        moved = moved + #keys
        return false, #keys .. " keys migrated, more may follow"
      end, 0)
      must(target.port, "cluster", "setslot", slot, "node", tid)
      must(source.port, "cluster", "setslot", slot, "node", tid)
      for i, h in ipairs(c.nodes) do
        if i ~= from and i ~= to_index and h.pid then
          must(h.port, "cluster", "setslot", slot, "node", tid)
        end
      end
    end
    await(("every node to agree slot %d is at node %d"):format(slot, to_index), mtimeout,
      function() return agreed(slot, target.port) end)
    return moved
  end

  return c
end

return topology
