-- The test harness: the HA topologies of spec/support/topology.lua start and behave, checked with
-- redis-cli only (through the handles' cli), not with the dlock client.
local helper = require "helper"
local topology = require "topology"

-- stop() must leave no process behind.
local function assert_stops(t, handles)
  local pids = {}
  for _, h in ipairs(handles) do pids[#pids + 1] = assert(h.pid) end
  t.stop()
  for i, h in ipairs(handles) do
    assert.is_nil(h.pid)
    assert.is_false(helper.running(pids[i]))
    assert.is_false(helper.listening(h.port))   -- nothing answers there
  end
end

describe("topology.masters(5)", function()
  local t
  lazy_setup(function() t = topology.masters(5) end)
  lazy_teardown(function() if t then t.stop() end end)

  it("starts 5 independent masters that answer PING", function()
    assert.equals(5, #t.servers)
    assert.equals(5, #t.urls)
    local ports = {}
    for i, s in ipairs(t.servers) do
      assert.equals("PONG", s.cli("ping"))
      assert.equals(s.url, t.urls[i])
      assert.equals(("redis://127.0.0.1:%d/0"):format(s.port), s.url)
      assert.is_nil(ports[s.port])
      ports[s.port] = true
      assert.matches("role:master", s.cli("info", "replication"))
      assert.equals("OK", s.cli("set", "who", tostring(i)))
    end
    for i, s in ipairs(t.servers) do            -- nothing is shared
      assert.equals(tostring(i), s.cli("get", "who"))
    end
  end)

  it("keeps the majority answering while a minority is stopped", function()
    t.servers[1].stop()
    t.servers[2].stop()
    for i, s in ipairs(t.servers) do
      if i <= 2 then
        assert.matches("Connection refused", s.cli("ping"))
      else
        assert.equals("PONG", s.cli("ping"))
      end
    end
    t.servers[1].restart()                      -- and a stopped one comes back empty
    assert.equals("PONG", t.servers[1].cli("ping"))
    assert.equals("", t.servers[1].cli("get", "who"))
  end)

  it("stop() stops them all", function()
    t.servers[2].restart()
    assert_stops(t, t.servers)
  end)
end)

describe("topology.sentinel()", function()
  local t
  lazy_setup(function() t = topology.sentinel() end)
  lazy_teardown(function() if t then t.stop() end end)

  local function master_addr(s)
    return s.cli("sentinel", "get-master-addr-by-name", "mymaster"):gsub("\n", ":")
  end

  it("starts a master, its replica and 3 sentinels that agree on them", function()
    assert.equals("mymaster", t.name)
    assert.matches("role:master", t.master.cli("info", "replication"))
    local repl = t.replica.cli("info", "replication")
    assert.matches("role:slave", repl)
    assert.matches("master_port:" .. t.master.port, repl)
    assert.matches("master_link_status:up", repl)
    assert.equals(3, #t.sentinels)
    for i, s in ipairs(t.sentinels) do
      assert.equals(("redis://127.0.0.1:%d"):format(s.port), s.url)
      assert.equals(s.url, t.sentinel_urls[i])
      assert.equals("PONG", s.cli("ping"))
      assert.matches("redis_mode:sentinel", s.cli("info", "server"))
      assert.equals("127.0.0.1:" .. t.master.port, master_addr(s))
      assert.matches("\nnum%-other%-sentinels\n2\n", s.cli("sentinel", "master", "mymaster"))
      assert.matches("\nport\n" .. t.replica.port .. "\n",
        s.cli("sentinel", "replicas", "mymaster"))
    end
  end)

  it("replicates a key SET on the master", function()
    assert.equals("OK", t.master.cli("set", "k1", "v1"))
    assert.truthy(helper.wait_for(function() return t.replica.cli("get", "k1") == "v1" end, 5))
    assert.matches("READONLY", t.replica.cli("set", "k1", "no"))
  end)

  it("fails over: the old replica becomes master and takes writes", function()
    local old_master, old_replica = t.master, t.replica
    local new = t.failover(20)
    assert.equals(old_replica, new)
    assert.equals(new, t.master)
    assert.equals(old_master, t.replica)
    assert.matches("role:master", new.cli("info", "replication"))
    for _, s in ipairs(t.sentinels) do
      assert.equals("127.0.0.1:" .. new.port, master_addr(s))
    end
    assert.equals("v1", new.cli("get", "k1"))   -- the data came along
    assert.equals("OK", new.cli("set", "k2", "v2"))
    -- the old master now replicates from the new one
    assert.matches("master_port:" .. new.port, old_master.cli("info", "replication"))
    assert.truthy(helper.wait_for(function() return old_master.cli("get", "k2") == "v2" end, 5))
    assert.matches("READONLY", old_master.cli("set", "k2", "no"))
  end)

  it("fails back", function()
    local first = t.replica
    assert.equals(first, t.failover(20))
    assert.equals("OK", t.master.cli("set", "k3", "v3"))
    assert.truthy(helper.wait_for(function() return t.replica.cli("get", "k3") == "v3" end, 5))
  end)

  it("fails over when the master was killed", function()
    local dead, survivor = t.master, t.replica
    dead.stop()
    assert.equals(survivor, t.failover(20))
    assert.equals(dead, t.replica)
    assert.matches("role:master", survivor.cli("info", "replication"))
    assert.equals("v3", survivor.cli("get", "k3"))
    assert.equals("OK", survivor.cli("set", "k4", "v4"))
    dead.restart()                              -- a handle keeps working
    assert.equals("PONG", dead.cli("ping"))
  end)

  it("stop() stops every server and sentinel", function()
    local all = { t.master, t.replica }
    for _, s in ipairs(t.sentinels) do all[#all + 1] = s end
    assert_stops(t, all)
  end)
end)

describe("topology.cluster(3)", function()
  local c
  lazy_setup(function() c = topology.cluster(3) end)
  lazy_teardown(function() if c then c.stop() end end)

  -- One key per node, found with CLUSTER KEYSLOT and the owners in CLUSTER NODES.
  local function key_per_node()
    local keys, found = {}, 0
    for i = 1, 1000 do
      local k = "key:" .. i
      local owner = c.owner(topology.keyslot(c, k))
      if not keys[owner] then keys[owner] = k; found = found + 1 end
      if found == #c.nodes then return keys end
    end
    error("no key for some node")
  end

  it("reaches cluster_state:ok with all 16384 slots assigned", function()
    assert.equals(3, #c.nodes)
    assert.equals(3, #c.urls)
    for i, h in ipairs(c.nodes) do
      assert.equals(h.url, c.urls[i])
      local info = h.cli("cluster", "info")
      assert.matches("cluster_state:ok", info)
      assert.matches("cluster_slots_assigned:16384", info)
      assert.matches("cluster_known_nodes:3", info)
      assert.matches("cluster_size:3", info)
      assert.equals(c.ids[i], h.cli("cluster", "myid"))
    end
  end)

  it("keyslot computes the slot CLUSTER KEYSLOT gives, hash tags included", function()
    local keys = { "", "a", "key:1", "123456789", "dlock:{x}", "{user1000}.following",
      "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{", "}{", "a{b", "\0\255\128{\1}",
      ("x"):rep(300), "dlock:{odd name \226\130\172}:q" }
    for i = 1, 50 do keys[#keys + 1] = helper.unique_name("slot" .. i) end
    for _, k in ipairs(keys) do
      local tmp = os.tmpname()
      local w = assert(io.open(tmp, "wb")); w:write(k); w:close()
      local p = assert(io.popen(("redis-cli -p %d -x cluster keyslot < %s"):format(c.nodes[1].port, tmp)))
      local want = p:read("*a"):gsub("%s+$", "")
      p:close()
      os.remove(tmp)
      assert.equals(want, tostring(topology.keyslot(c, k)), ("key %q"):format(k))
    end
  end)

  it("serves keys in different slots from different nodes", function()
    local keys = key_per_node()
    for i, k in ipairs(keys) do
      local owner = c.nodes[i]
      local slot = topology.keyslot(c, k)
      assert.equals(tostring(slot), owner.cli("cluster", "keyslot", k))
      assert.equals("OK", owner.cli("set", k, "on" .. i))
      assert.equals("on" .. i, owner.cli("get", k))
      assert.equals("1", owner.cli("cluster", "countkeysinslot", slot))
      for j, other in ipairs(c.nodes) do
        if j ~= i then                          -- redirected, and -c follows
          assert.equals(("MOVED %d 127.0.0.1:%d"):format(slot, owner.port), other.cli("get", k))
          assert.equals("on" .. i, other.cli("-c", "get", k))
        end
      end
    end
  end)

  it("move_slot moves a slot with its keys to another node", function()
    local k = key_per_node()[1]
    local slot = topology.keyslot(c, k)
    assert.equals(1, c.owner(slot))
    -- 250 more keys in that slot (hash tag {k}): MIGRATE goes in batches
    local args = { "mset" }
    for i = 1, 250 do args[#args + 1] = ("{%s}:%d"):format(k, i); args[#args + 1] = tostring(i) end
    assert.equals("OK", c.nodes[1].cli(table.unpack(args)))
    assert.equals("OK", c.nodes[1].cli("set", k, "moving"))
    assert.equals("251", c.nodes[1].cli("cluster", "countkeysinslot", slot))

    assert.equals(251, c.move_slot(slot, 2))

    assert.equals(2, c.owner(slot))
    local new, old = c.nodes[2], c.nodes[1]
    assert.equals("moving", new.cli("get", k))
    assert.equals("250", new.cli("get", ("{%s}:250"):format(k)))
    assert.equals("251", new.cli("cluster", "countkeysinslot", slot))
    assert.equals("0", old.cli("cluster", "countkeysinslot", slot))
    for _, h in ipairs({ old, c.nodes[3] }) do
      assert.equals(("MOVED %d 127.0.0.1:%d"):format(slot, new.port), h.cli("get", k))
      assert.equals("moving", h.cli("-c", "get", k))
    end
    assert.equals("OK", new.cli("set", k, "moved"))
    for _, h in ipairs(c.nodes) do assert.matches("cluster_state:ok", h.cli("cluster", "info")) end

    local empty = (slot + 1) % 16384           -- a slot without keys
    c.move_slot(empty, 3)
    assert.equals(3, c.owner(empty))
    assert.equals(0, c.move_slot(slot, 2))     -- already there: a no-op
  end)

  it("stop() stops every node", function()
    assert_stops(c, c.nodes)
  end)
end)
