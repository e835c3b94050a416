-- A client remembers which form each lock was in at its last acquire
-- (src/core/state.h, dl_state_form_hint) and its scripts look for that
-- form first: a probe of the other form fails, and a failed call costs
-- Redis about as much as three that succeed. These specs count the
-- server's failed calls (INFO commandstats) while a real client works.
local helper = require "helper"

describe("the client's hint of a lock's form #binding", function()
  local srv = helper.redis()

  local function failed()
    local n = 0
    for calls in srv.cli("info", "commandstats"):gmatch("failed_calls=(%d+)") do
      n = n + tonumber(calls)
    end
    return n
  end

  -- one hold of name by a new coroutine (a new owner: the lock's hash
  -- once another owner's record is there)
  local function cycle(c, name)
    coroutine.wrap(function()
      local l = c:lock(name)
      assert(l:acquire())
      assert(l:release())
    end)()
  end

  it("makes no failed call on a lock that owners take in turn, kept as its hash", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local name = helper.unique_name("turns")
    for _ = 1, 3 do cycle(c, name) end
    assert.equals("hash", srv.cli("type", helper.lock_key(name)))
    local before = failed()
    for _ = 1, 20 do cycle(c, name) end
    assert.equals(before, failed())
    assert.equals("hash", srv.cli("type", helper.lock_key(name)))
  end)

  it("makes no failed call on a lock one owner takes again and again, kept short", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local name = helper.unique_name("again")
    local l = c:lock(name)
    assert(l:acquire())
    assert(l:release())
    local before = failed()
    for _ = 1, 20 do
      assert(l:acquire())
      assert(l:release())
    end
    assert.equals(before, failed())
    assert.equals("string", srv.cli("type", helper.lock_key(name)))
  end)

  it("goes back to the short form once the hash is gone", function()
    local c = assert(helper.client())
    finally(function() c:close() end)
    local name = helper.unique_name("back")
    local key = helper.lock_key(name)
    for _ = 1, 3 do cycle(c, name) end
    assert.equals("hash", srv.cli("type", key))    -- (the hint: its hash)
    srv.cli("del", key)
    local before = failed()
    local l = c:lock(name)
    assert(l:acquire())
    assert.equals("string", srv.cli("type", key))  -- made anew, short
    assert(l:release())
    for _ = 1, 5 do
      assert(l:acquire())
      assert(l:release())
    end
    assert.equals(before, failed())
    assert.equals("string", srv.cli("type", key))
  end)
end)
