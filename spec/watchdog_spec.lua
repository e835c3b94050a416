local dlock = require "dlock"
local helper = require "helper"

describe("the watchdog", function()
  it("keeps a lock held three times longer than its lease", function()
    local c = assert(helper.client{ lease = 0.6 })
    local probe = assert(helper.client())
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire())
    dlock.sleep(1.9)                                -- > 3 leases
    assert.is_true(l:held())
    assert.is_true(c:stats().renewed >= 3)
    assert.is_number(l:ttl())
    assert.is_nil((probe:lock(name):try_acquire()))
    assert.same({ true, 0 }, { l:release() })
    c:close(); probe:close()
  end)

  it("does not renew a fixed lease, which then expires", function()
    local c = assert(helper.client{ lease = 0.3 })
    local probe = assert(helper.client())
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire{ lease = 0.3 })
    assert(helper.wait_for(function() return not l:ttl() end, 3))
    assert.is_false(l:held())
    assert(probe:lock(name):try_acquire())
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("^lost", err)
    c:close(); probe:close()
  end)

  it("marks a hold lost when renewal finds it gone; on_lost runs at poll()", function()
    local seen = {}
    local c = assert(helper.client{ lease = 0.3,
      on_lost = function(lock, reason) seen[#seen + 1] = { lock, reason } end })
    local probe = assert(helper.client())
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire())
    assert.is_true(probe:lock(name):force_release())
    dlock.sleep(0.6)                                -- two renewal rounds
    assert.equals(0, #seen)                         -- never from the watchdog...
    assert(helper.wait_for(function() return c:poll() > 0 end, 3))
    assert.equals(1, #seen)                         -- ...at the next call
    assert.equals(l, seen[1][1])
    assert.matches("^lost", seen[1][2])
    assert.equals(1, c:stats().lost)
    local ok, err = l:release()
    assert.is_nil(ok)
    assert.matches("^lost", err)
    c:close(); probe:close()
  end)

  it("reports a lock taken by another owner as lost", function()
    local seen
    local c = assert(helper.client{ lease = 0.3,
      on_lost = function(_, reason) seen = reason end })
    local probe = assert(helper.client())
    local name = helper.unique_name()
    assert(c:lock(name):acquire())
    probe:lock(name):force_release()
    assert(probe:lock(name):acquire())
    assert(helper.wait_for(function() c:poll(); return seen end, 3))
    assert.matches("^lost", seen)
    c:close(); probe:close()
  end)

  it("runs on_lost at the next call into the library", function()
    local seen
    local c = assert(helper.client{ lease = 0.3,
      on_lost = function(_, reason) seen = reason end })
    local name = helper.unique_name()
    assert(c:lock(name):acquire())
    helper.redis().cli("del", "dlock:{" .. name .. "}")
    assert(helper.wait_for(function()
      c:lock("other"):held()                        -- any call dispatches
      return seen
    end, 3))
    c:close()
  end)

  it("survives an on_lost that raises", function()
    local c = assert(helper.client{ lease = 0.3,
      on_lost = function() error("callback failed") end })
    local name = helper.unique_name()
    assert(c:lock(name):acquire())
    helper.redis().cli("del", "dlock:{" .. name .. "}")
    assert(helper.wait_for(function() return c:poll() > 0 end, 3))
    assert.is_true(c:ping())
    c:close()
  end)

  it("stops renewing at max_hold and reports the hold lost", function()
    local c = assert(helper.client{ lease = 0.3, max_hold = 0.6 })
    local l = c:lock(helper.unique_name())
    assert(l:acquire())
    assert(helper.wait_for(function() return not l:held() end, 5))
    assert(helper.wait_for(function() return not l:ttl() end, 3))
    local ok, err = l:release()
    assert.matches("^lost", err)
    c:close()
  end)

  it("batches renewals: one script call renews many holds", function()
    local c = assert(helper.client{ lease = 0.6 })
    local locks = {}
    for i = 1, 250 do
      locks[i] = c:lock(helper.unique_name("batch"))
      assert(locks[i]:acquire())
    end
    local s0 = c:stats()
    dlock.sleep(1.3)                                -- ~3 renewal rounds
    local s1 = c:stats()
    local renewed = s1.renewed - s0.renewed
    local calls = s1.renew_batches - s0.renew_batches
    assert.is_true(renewed >= 500, "renewed " .. renewed)
    assert.is_true(calls <= renewed / 50, ("%d calls for %d renewals"):format(calls, renewed))
    assert.equals(0, s1.lost)
    for _, l in ipairs(locks) do assert(l:release()) end
    c:close()
  end)

  it("drops the holds of a collected coroutine instead of renewing them", function()
    local c = assert(helper.client{ lease = 0.5 })
    local name = helper.unique_name()
    local function in_coroutine()           -- no stack slot keeps co alive
      local co = coroutine.create(function() assert(c:lock(name):acquire()) end)
      assert(coroutine.resume(co))
    end
    in_coroutine()
    assert.is_number(c:lock(name):ttl())
    collectgarbage(); collectgarbage()
    assert(helper.wait_for(function() return not c:lock(name):ttl() end, 3))
    assert.equals(0, c:stats().held)
    -- a new coroutine never inherits the dead one's hold
    local co = coroutine.wrap(function() return c:lock(name):held() end)
    assert.is_false(co())
    c:close()
  end)
end)
