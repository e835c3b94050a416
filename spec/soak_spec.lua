-- A bounded soak: 8 processes, tens of thousands of critical sections on a
-- few locks, each guarding a non-atomic counter; the server is restarted
-- once in the middle. It keeps its data (AOF, flushed at SHUTDOWN), so
-- holds, fencing counters and every update must survive.
local dlock = require "dlock"
local helper = require "helper"

describe("soak", function()
  it("8 processes, a restart in the middle: no lost update, tokens increase #slow #soak", function()
    local dir = helper.tmp .. "/soak-" .. math.random(1, 1e9)
    assert(os.execute("mkdir -p " .. dir))
    local srv = helper.start_redis(("--appendonly yes --appendfsync everysec --appenddirname aof-%d")
      :format(math.random(1, 1e9)))
    local nproc, nlocks, iters = 8, 4, 3000
    local name = helper.unique_name("soak")
    local workers = {}
    for i = 1, nproc do
      workers[i] = helper.spawn("soak", srv.url, name, nlocks, iters, dir, i)
    end
    local function total()
      local n = 0
      for k = 1, nlocks do
        n = n + (tonumber(helper.read_file(("%s/count-%d"):format(dir, k)) or "") or 0)
      end
      return n
    end
    -- restart once the run is about half-way
    assert(helper.wait_for(function() return total() >= nproc * iters / 2 end, 200, 0.05))
    local clean, out = srv.shutdown()
    assert.is_true(clean, "SHUTDOWN did not stop the server: " .. tostring(out))
    srv.restart()
    local all_done = helper.wait_for(function()
      for i = 1, nproc do if workers[i].alive() then return false end end
      return true
    end, 240, 0.1)
    assert.is_true(all_done, "workers did not finish")
    local retries = 0
    for i = 1, nproc do
      local out = workers[i].output()
      assert.matches("done " .. i, out)
      retries = retries + tonumber(out:match("retries (%d+)") or 0)
    end
    assert.equals(nproc * iters, total())          -- zero lost updates
    for k = 1, nlocks do                          -- tokens strictly increase per lock
      local last, n = 0, 0
      for tok in helper.read_file(("%s/tokens-%d"):format(dir, k)):gmatch("(%d+) %d+\n") do
        tok = tonumber(tok)
        assert.is_true(tok > last, ("lock %d: token %d after %d"):format(k, tok, last))
        last, n = tok, n + 1
      end
      assert.is_true(n > 0)
    end
    print(("\n    soak: %d critical sections, %d connection retries across the restart")
      :format(total(), retries))
    srv.stop()
  end)
end)
