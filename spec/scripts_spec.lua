-- The Redis-side scripts driven step by step, to reach states a client
-- only meets when a reply is lost: a last release resent after other
-- owners have taken and released the lock, a hold that expired or was
-- force-released meanwhile, Redis that lost its data.
local dlock = require "dlock"
local helper = require "helper"

local scripts = require("dlock.core").scripts()

describe("scripts", function()
  local srv, sha = helper.redis(), {}

  setup(function()
    for name, src in pairs(scripts) do
      local path = ("%s/script-%s.lua"):format(helper.tmp, name)
      local f = assert(io.open(path, "wb"))
      f:write(src)
      f:close()
      local p = assert(io.popen(("redis-cli -p %d -x SCRIPT LOAD < '%s'"):format(srv.port, path)))
      sha[name] = p:read("a"):match("%x+")
      p:close()
      assert.equals(40, #sha[name])
    end
  end)

  -- Run script `name` with the keys of lock `key`; returns the reply's
  -- integers.
  local function run(name, key, ...)
    local out = srv.cli("EVALSHA", sha[name], 2, key, key .. ":fence", ...)
    local r = {}
    for v in out:gmatch("%-?%d+") do r[#r + 1] = tonumber(v) end
    return r
  end
  local function acquire(key, owner, lease_ms)
    return run("acquire", key, owner, lease_ms or 10000, 0)
  end
  local function release(key, owner, token)
    return run("release", key, owner, 1, token, key .. ":ch", "PUBLISH")
  end

  local key
  before_each(function() key = "s{" .. helper.unique_name("scripts") .. "}" end)

  it("a resent last release succeeds while the lock is still free", function()
    local a = acquire(key, "a")
    assert.same({ 1, 1, 1 }, a)
    assert.same({ 1, 0 }, release(key, "a", 1))
    assert.same({ 1, 0 }, release(key, "a", 1))       -- the resend
  end)

  it("a resent last release succeeds after other owners took the lock", function()
    acquire(key, "a")
    assert.same({ 1, 0 }, release(key, "a", 1))
    for i = 1, 40 do                                   -- more than 16 handoffs
      local b = acquire(key, "b" .. i)
      assert.same({ 1, 1, i + 1 }, b)
      assert.same({ 1, 0 }, release(key, "b" .. i, i + 1))
    end
    assert.same({ 1, 0 }, release(key, "a", 1))
  end)

  it("a hold that expired is lost, also after others took the lock", function()
    acquire(key, "a", 30)
    helper.wait_for(function() return srv.cli("EXISTS", key) == "0" end, 2, 0.01)
    assert.same({ -1 }, release(key, "a", 1))          -- nobody took it since
    acquire(key, "b")
    assert.same({ -1 }, release(key, "a", 1))          -- b took it since
    release(key, "b", 2)
    acquire(key, "c")
    assert.same({ -1 }, release(key, "a", 1))
  end)

  it("a force-released hold is lost", function()
    acquire(key, "a")
    assert.equals("1", srv.cli("EVALSHA", sha.force, 1, key, key .. ":ch", "PUBLISH"))
    assert.same({ -1 }, release(key, "a", 1))
    acquire(key, "b")
    release(key, "b", 2)
    assert.same({ -1 }, release(key, "a", 1))
  end)

  it("after more than 16 lost holds an old release is unknown, so lost", function()
    acquire(key, "a")
    assert.same({ 1, 0 }, release(key, "a", 1))
    for i = 1, 18 do                                   -- 17 holds expire
      acquire(key, "x" .. i, 1)
      helper.wait_for(function() return srv.cli("EXISTS", key) == "0" end, 2, 0.005)
    end
    assert.same({ -1 }, release(key, "a", 1))
    -- a release after the last lost one is still recognised
    local t = acquire(key, "y")[3]
    assert.same({ 1, 0 }, release(key, "y", t))
    acquire(key, "z")
    assert.same({ 1, 0 }, release(key, "y", t))
  end)

  it("a counter below the token means Redis lost data: lost", function()
    acquire(key, "a")
    srv.cli("DEL", key, key .. ":fence")
    assert.same({ -1 }, release(key, "a", 1))
  end)
end)
