-- lock:release() when the server's reply never comes: the hold ends at
-- once for the caller, and the release completes in the background.
local dlock = require "dlock"
local helper = require "helper"

describe("a release whose reply never came #binding", function()
  local srv
  before_each(function() srv = helper.start_redis() end)
  after_each(function() srv.stop() end)

  local function setup_lock()
    local c = assert(dlock.connect{ url = srv.url, lease = 1, command_timeout = 0.2 })
    local probe = assert(dlock.connect(srv.url))
    local name = helper.unique_name("rel")
    return c, probe, name, c:lock(name)
  end

  -- The lock must come free soon after the pause, and the releasing
  -- client must never have renewed it again.
  local function freed(c, probe, name, r0)
    assert(helper.wait_for(function()
      return probe:lock(name):try_acquire()
    end, 4, 0.05), "the lock stayed held")
    assert.equals(r0, c:stats().renewed)
    assert(probe:lock(name):release())
  end

  it("ends the hold at once and completes the release in the background", function()
    local c, probe, name, l = setup_lock()
    assert(l:acquire())
    srv.cli("client", "pause", "700")
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert.is_false(l:held())
    local r0 = c:stats().renewed
    freed(c, probe, name, r0)
    assert(helper.wait_for(function() return c:stats().released == 1 end, 2))
    assert.equals(0, c:stats().lost)
    c:close(); probe:close()
  end)

  -- The second release cannot end the first one's request (the server is
  -- still paused), so it cannot be sent: it is counted out all the same,
  -- or c would keep a count no release can end (in watchdog mode, one
  -- renewed for as long as c lives). Reentries that Redis counts, here by
  -- raising a fixed lease: a plain one is counted by the client alone.
  it("gives up a hold whose last request cannot be ended", function()
    local c, probe, name, l = setup_lock()
    assert(l:acquire{ lease = 1 })
    assert(l:acquire{ lease = 3 })              -- sent: Redis counts 2
    srv.cli("client", "pause", "1500")
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("background", err)
    assert.is_true(l:held())
    ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("^connection.*lease runs out", err)
    assert.is_false(l:held())
    assert(helper.wait_for(function()
      return probe:lock(name):try_acquire()
    end, 6, 0.05), "the lock stayed held")
    assert(probe:lock(name):release())
    c:close(); probe:close()
  end)

  it("does the same for with()", function()
    local c, probe, name, l = setup_lock()
    local ok, err, v = l:with(function()
      srv.cli("client", "pause", "700")
      return 42
    end)
    assert.is_nil(ok)
    assert.matches("^connection", err)
    assert.equals(42, v)
    freed(c, probe, name, c:stats().renewed)
    c:close(); probe:close()
  end)

  it("does the same for <close>", function()
    if _VERSION ~= "Lua 5.4" then return pending("Lua 5.4 only") end
    local c, probe, name, l = setup_lock()
    local run = assert(load([[
      local l, srv = ...
      local held <close> = assert(l:acquire())
      srv.cli("client", "pause", "700")
    ]]))
    run(l, srv)
    assert.is_false(l:held())
    freed(c, probe, name, c:stats().renewed)
    c:close(); probe:close()
  end)
end)
