-- Sentinel faults: a sentinel that hangs, sentinels that name a replica.
-- (The common lock API on Sentinel, and failovers, are in ha_spec.lua.)
local dlock = require "dlock"
local helper = require "helper"

describe("a Sentinel client", function()
  it("moves its failover subscription off a sentinel that hangs", function()
    local topology = require "topology"
    local topo = topology.sentinel()
    local c = assert(dlock.connect{ sentinels = topo.sentinel_urls, master = topo.name,
                                    connect_timeout = 0.3, command_timeout = 0.5 })
    assert.is_true(c:ping())                        -- subscribed to the first one
    local function subscribed_at(s)              -- our +switch-master listener
      return s.cli("client", "list"):find(" sub=1 ") ~= nil
    end
    assert(helper.wait_for(function() c:ping(); return subscribed_at(topo.sentinels[1]) end, 5))
    topo.sentinels[1].signal("STOP")                -- hangs, does not close
    local moved = helper.wait_for(function()
      c:ping()
      return subscribed_at(topo.sentinels[2]) or subscribed_at(topo.sentinels[3])
    end, 10, 0.1)
    topo.sentinels[1].signal("CONT")
    assert.is_truthy(moved, "still listening to the hung sentinel")
    local l = c:lock(helper.unique_name("sent"))
    assert(l:acquire())
    assert(l:release())
    c:close()
    topo.stop()
  end)
end)

describe("Sentinel naming a replica", function()
  it("is refused after a ROLE check, not written to", function()
    local topology = require "topology"
    local topo = topology.sentinel()
    for _, s in ipairs(topo.sentinels) do             -- every sentinel now names the replica
      assert.equals("OK", s.cli("sentinel", "remove", topo.name))
      assert.equals("OK", s.cli("sentinel", "monitor", topo.name, "127.0.0.1",
                                tostring(topo.replica.port), "2"))
    end
    local c, err = dlock.connect{ sentinels = topo.sentinel_urls, master = topo.name,
                                  connect_timeout = 0.3, command_timeout = 0.5 }
    if c then c:close() end
    assert.is_nil(c)
    assert.matches("^connection: .*not a master", err)
    topo.stop()
  end)
end)
