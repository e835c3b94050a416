-- Cluster redirects from servers that lie, with
-- fake servers (spec/support/fakeredis.lua): a redirect is followed only to a node
-- the cluster itself names, and nodes the cluster no longer names give
-- their places to new ones, so that a burst of moves cannot fill the node
-- table for good. (A url= client of a real Cluster node: ha_spec.)
local dlock = require "dlock"
local helper = require "helper"
local R = require "fakeredis"

local function slots_reply(map)          -- { {lo, hi, port}, ... }
  local out = {}
  for i, s in ipairs(map) do
    out[i] = R.arr{ R.int(s[1]), R.int(s[2]), R.arr{ R.bulk("127.0.0.1"), R.int(s[3]) } }
  end
  return R.arr(out)
end

-- A loopback port nothing listens on (nothing is ever sent there: no slot
-- that the spec's names hash to goes to it).
local function dead_port(taken)
  return helper.free_port(taken)
end

local slow = os.getenv("DLOCK_VALGRIND") or (os.getenv("DLOCK_BUILD") or ""):find("tsan", 1, true)
local opts = { connect_timeout = slow and 2 or 0.5, command_timeout = slow and 2 or 0.5 }
local said = {}
local function connect(seed)
  local o = { cluster = { seed.url }, log = function(_, m) said[#said + 1] = m end }
  for k, v in pairs(opts) do o[k] = v end
  return assert(dlock.connect(o))
end

describe("a Cluster client redirected by a server", function()
  after_each(function() R.stop_all() end)

  it("follows MOVED only to a node the cluster names", function()
    local other = R.start({})                   -- records who connects
    local seed = R.start({})
    seed.set({ slots = { { 0, 16383, seed.port } },
               scripts = { acquire = R.err("MOVED 5 " .. other.addr) } })
    local c = connect(seed)
    local ok, err = c:lock("x"):acquire{ wait = 0 }
    assert.is_nil(ok)
    assert.matches("^redis: MOVED 5 127%.0%.0%.1:%d+: not followed, the cluster does not name", err)
    assert.equals(0, other.accepts())
    -- once the cluster's own map names it, the same redirect is followed
    seed.set({ slots = { { 0, 16383, other.port } },
               scripts = { acquire = R.err("MOVED 5 " .. other.addr) } })
    other.set({ slots = { { 0, 16383, other.port } } })
    assert(c:lock("x"):acquire{ wait = 0 })
    assert.is_true(other.accepts() > 0)
    c:close()
  end)

  it("follows ASK only to a member the cluster names", function()
    local other = R.start({})
    local seed = R.start({})
    seed.set({ slots = { { 0, 16383, seed.port } },
               scripts = { acquire = R.err("ASK 5 " .. other.addr) } })
    local c = connect(seed)
    local ok, err = c:lock("y"):acquire{ wait = 0 }
    assert.is_nil(ok)
    assert.matches("not followed", err)
    assert.equals(0, other.accepts())
    c:close()
  end)

  it("gives the places of nodes the cluster no longer names to new ones", function()
    local seed = R.start({})
    local taken, replies = { [seed.port] = true }, {}
    -- each CLUSTER SLOTS names another node for slot 0: 100 in all
    for i = 1, 100 do
      replies[i] = slots_reply({ { 0, 0, dead_port(taken) }, { 1, 16383, seed.port } })
    end
    seed.set({ slots = { { 0, 16383, seed.port } },   -- for connect
               commands = { ["CLUSTER SLOTS"] = { cycle = replies } },
               scripts = { acquire = R.err("MOVED 1 " .. seed.addr) } })
    local c = connect(seed)
    for _ = 1, 100 do                           -- each maps anew up to 5 times
      assert.is_nil((c:lock("z"):acquire{ wait = 0 }))
      if seed.count("CLUSTER SLOTS") > 70 then break end
    end
    assert.is_true(seed.count("CLUSTER SLOTS") > 70, seed.count("CLUSTER SLOTS"))
    -- now the cluster moves everything to a new node
    local new = R.start({})
    new.set({ slots = { { 0, 16383, new.port } } })
    seed.set({ slots = { { 0, 16383, new.port } },
               scripts = { acquire = R.err("MOVED 1 " .. new.addr) } })
    local l = c:lock("z")
    said = {}
    assert(l:acquire{ wait = 0 })
    assert.is_true(new.accepts() > 0)
    c:poll()
    local told = false                          -- the log names the new place
    for _, m in ipairs(said) do
      told = told or m:find("cluster: node entry %d+ now 127%.0%.0%.1:" .. new.port) ~= nil
    end
    assert.is_true(told, table.concat(said, "\n"))
    assert(l:release())
    c:close()
  end)
  -- Two nodes that each say the other owns the slot, as they do for a
  -- moment while a migration's SETSLOT NODE reaches one before the other:
  -- a one-attempt acquire gives up ("too many cluster redirects"), a
  -- waiting one naps and tries again until the map settles.
  it("lets a waiting acquire wait out redirects that go back and forth", function()
    local a, b = R.start({}), R.start({})
    local map = { { 0, 8191, a.port }, { 8192, 16383, b.port } }
    a.set({ slots = map, scripts = { acquire = R.err("MOVED 5 " .. b.addr) } })
    b.set({ slots = map, scripts = { acquire = R.err("MOVED 5 " .. a.addr) } })
    local c = connect(a)
    local ok, err = c:lock("w"):acquire{ wait = 0 }
    assert.is_nil(ok)
    assert.matches("^connection: too many cluster redirects", err)
    -- from the next call on, b owns the slot and grants
    b.set({ slots = map, scripts = { acquire = { reply = R.err("MOVED 5 " .. a.addr),
                                                 times = 3 } } })
    local l = c:lock("w")
    assert(l:acquire{ wait = 5 })
    assert.is_true(b.count("EVALSHA acquire") > 3)
    assert(l:release())
    c:close()
  end)
end)
