-- Several real processes against one real server.
local dlock = require "dlock"
local helper = require "helper"

describe("across processes #binding", function()
  it("gives mutual exclusion: a non-atomic counter loses no update #slow", function()
    local name = helper.unique_name("counter")
    local cfile = helper.tmp .. "/" .. name:gsub(":", "_") .. ".count"
    local tfile = cfile .. ".tokens"
    local nproc, iters = 4, 150
    local outs = helper.run_parallel(nproc, "counter", helper.url(), name,
      iters, cfile, tfile)
    for i = 1, nproc do assert.matches("done " .. i, outs[i]) end
    assert.equals(tostring(nproc * iters), helper.read_file(cfile))
    -- fencing tokens, in the order the critical sections ran, strictly increase
    local last, n, owners = 0, 0, {}
    for tok, idx in helper.read_file(tfile):gmatch("(%d+) (%d+)\n") do
      tok = tonumber(tok)
      assert.is_true(tok > last, ("token %d after %d"):format(tok, last))
      last, n = tok, n + 1
      owners[idx] = true
    end
    assert.equals(nproc * iters, n)
    for i = 1, nproc do assert.is_true(owners[tostring(i)]) end
  end)

  it("wakes a waiter on release, long before the holder's lease ends", function()
    local name = helper.unique_name()
    -- The holder releases once the waiter has subscribed to the lock's
    -- channel (a fixed 2 s was too short under valgrind beside two busy
    -- loops: the release came first, and the waiter took the lock with
    -- no wakeup to count).
    local go = helper.tmp .. "/" .. name:gsub(":", "_") .. ".go"
    local holder = helper.spawn("hold", helper.url(), name, 30, go)
    assert(helper.wait_for(function() return holder.output():match("held") end, 10))
    helper.spawn("sh", ("until redis-cli -p %d pubsub numsub '%s' | tail -1 | grep -q '^1$'; " ..
      "do sleep 0.02; done; touch '%s'"):format(helper.redis().port, helper.lock_key(name) .. ":ch", go))
    local c = assert(helper.client())
    local l = c:lock(name)
    -- the holder's watchdog lease is 30 s: only the release message can
    -- wake us within this wait
    assert(l:acquire{ wait = 10 })
    assert.is_true(l:ttl() > 25)
    assert.is_true(c:stats().wakeups >= 1)
    assert(helper.wait_for(function() return holder.output():match("release") end, 5))
    assert(l:release())
    c:close()
  end)

  it("frees the lock of a holder killed with SIGKILL within the lease #timing", function()
    local name = helper.unique_name()
    local holder = helper.spawn("hold_forever", helper.url(), name, 1)
    assert(helper.wait_for(function() return holder.output():match("held") end, 10))
    local c = assert(helper.client())
    local l = c:lock(name)
    assert.is_nil((l:try_acquire()))
    assert.is_true(holder.signal("KILL"))
    assert(l:acquire{ wait = 3 })                   -- lease 1 s, plus slack
    assert(l:release())
    c:close()
  end)

  it("tells a holder stopped past its lease that it lost the lock #timing", function()
    local name = helper.unique_name()
    local go = helper.tmp .. "/" .. name:gsub(":", "_") .. ".go"
    local holder = helper.spawn("stopped", helper.url(), name, 0.5, go)
    assert(helper.wait_for(function() return holder.output():match("held") end, 10))
    assert.is_true(holder.signal("STOP"))
    local c = assert(helper.client())
    local l = c:lock(name)
    assert(l:acquire{ wait = 5 })                   -- taken after the lease ran out
    assert.is_true(holder.signal("CONT"))
    assert(io.open(go, "w")):close()
    assert(helper.wait_for(function() return holder.output():match("on_lost_count") end, 10))
    local out = holder.output()
    assert.matches("held_after false", out)
    assert.matches("on_lost " .. name:gsub("%p", "%%%0") .. " lost", out)
    assert.matches("on_lost_count 1", out)         -- exactly once
    assert.matches("release nil lost", out)
    assert.is_number(l:ttl())                       -- the new holder keeps it
    assert(l:release())
    c:close()
  end)
end)
