-- Redis Cluster: waits under a scheduler (cqueues, luv) for locks held on
-- two masters.
local dlock = require "dlock"
local helper = require "helper"

-- Two coroutines of one state, waiting under a scheduler for locks held
-- on two masters: each waits on another node's subscriber. (A new socket
-- copy woke the waits on every other one, which made copies again: the
-- two spun at full CPU, stepping without end.)
describe("scheduler waits on two Cluster masters", function()
  local topology = require "topology"
  local cl
  setup(function() cl = topology.cluster(3) end)
  teardown(function() if cl then cl.stop() end end)
  for _, kind in ipairs({ "cqueues", "luv" }) do
    it("sleep until a release under " .. kind .. " #timing", function()
      if not pcall(require, kind) then pending(kind .. " is not installed") return end
      local holder = assert(dlock.connect{ cluster = cl.urls })
      local c = assert(dlock.connect{ cluster = cl.urls, scheduler = kind })
      finally(function() c:close(); holder:close() end)
      local names, owners = {}, {}
      for i = 1, 500 do                      -- two names on two masters
        local n = helper.unique_name("two" .. i)
        local m = cl.owner(cl.keyslot(helper.lock_key(n)))
        if not owners[m] then owners[m] = true; names[#names + 1] = n end
        if #names == 2 then break end
      end
      assert.equals(2, #names)
      local held = {}
      for i, n in ipairs(names) do
        held[i] = holder:lock(n, { owner = "h" })
        assert(held[i]:acquire())
      end
      local got, cpu0 = 0, os.clock()
      local function waiter(n) return function()
        assert(c:lock(n):acquire{ wait = 10 })
        got = got + 1
      end end
      local function release_later(s) return function()
        local t = dlock.now() + s
        while dlock.now() < t do
          if kind == "cqueues" then require("cqueues").sleep(0.05)
          else local uv, co = require "luv", coroutine.running()
            local tm = uv.new_timer()
            tm:start(50, 0, function() tm:close(); coroutine.resume(co) end)
            coroutine.yield() end
        end
        for _, l in ipairs(held) do assert(l:release()) end
      end end
      local fns = { waiter(names[1]), waiter(names[2]), release_later(1.5) }
      if kind == "cqueues" then
        local cq = require("cqueues").new()
        for _, f in ipairs(fns) do cq:wrap(f) end
        assert(cq:loop())
      else
        local uv = require "luv"
        for _, f in ipairs(fns) do
          local co = coroutine.create(f)
          local tm = uv.new_timer()
          tm:start(0, 0, function() tm:close(); assert(coroutine.resume(co)) end)
        end
        uv.run()
      end
      local cpu = os.clock() - cpu0
      assert.equals(2, got)
      assert.is_true(cpu < 0.6, ("%.2f s of CPU for 1.5 s of waiting"):format(cpu))
    end)
  end
end)
