-- No leak of memory, file descriptors or threads over many cycles, and a
-- watchdog that keeps 10,000 holds alive at once.
local dlock = require "dlock"
local helper = require "helper"

describe("resources #binding", function()
  it("1,000 connect/close cycles end with the same fds and threads #slow", function()
    local c0 = assert(helper.client())            -- warm: the server is up
    c0:close()
    collectgarbage()
    local fds, threads = helper.fds(), helper.threads()
    local mem = collectgarbage("count")
    for i = 1, 1000 do
      local c = assert(helper.client())
      if i % 2 == 0 then assert(c:lock("r"):acquire()) end
      c:close()
    end
    collectgarbage(); collectgarbage()
    assert.equals(fds, helper.fds())
    assert.equals(threads, helper.threads())
    assert.is_true(collectgarbage("count") < mem + 256, "Lua heap grew")
  end)

  it("10,000 acquire/release cycles end with the same fds and threads #slow", function()
    local c = assert(helper.client())
    local l = c:lock(helper.unique_name())
    -- warm: scripts, subscriber, and the watchdog's subscription to forced
    -- releases (made while the client holds something)
    assert(l:acquire()); dlock.sleep(0.3); assert(l:release())
    local fds, threads = helper.fds(), helper.threads()
    for _ = 1, 10000 do
      assert(l:acquire())
      assert(l:release())
    end
    collectgarbage(); collectgarbage()
    assert.equals(fds, helper.fds())
    assert.equals(threads, helper.threads())
    local s = c:stats()
    assert.equals(10001, s.acquired)
    assert.equals(10001, s.released)
    c:close()
  end)

  it("renews 10,000 locks held at once by one client, losing none #slow #timing", function()
    local c = assert(helper.client{ lease = 1.5 })
    local locks = {}
    local prefix = helper.unique_name("many")
    for i = 1, 10000 do
      locks[i] = c:lock(prefix .. ":" .. i)
      assert(locks[i]:acquire())
    end
    -- Holds acquired over a few seconds fall due in several groups; the
    -- watchdog takes everything due within lease/6 in one pass, so the
    -- groups merge within two rounds. Measure after that.
    dlock.sleep(1.0)
    local s0 = c:stats()
    dlock.sleep(2.5)                               -- > 2 leases since acquiring
    local s1 = c:stats()
    assert.equals(0, s1.lost)
    assert.equals(10000, s1.held)
    local renewed = s1.renewed - s0.renewed
    assert.is_true(renewed >= 10000, "renewed " .. renewed)
    -- batched: one script call per 100 holds, plus a few partial batches
    local calls = s1.renew_batches - s0.renew_batches
    assert.is_true(calls <= renewed / 100 + 15,
      ("%d calls for %d renewals"):format(calls, renewed))
    for i = 1, 10000, 997 do assert.is_true(locks[i]:held()) end
    c:close()                                      -- releases all 10,000
    local probe = assert(helper.client())
    for i = 1, 10000, 997 do assert.is_nil(probe:lock(prefix .. ":" .. i):ttl()) end
    probe:close()
  end)

  it("closes promptly when the server is gone, whatever it holds #timing", function()
    local srv = helper.start_redis()
    local c = assert(dlock.connect{ url = srv.url, connect_timeout = 0.2,
                                    command_timeout = 0.2 })
    for i = 1, 50 do assert(c:lock("k" .. i):acquire()) end
    local threads = helper.threads()
    srv.stop()
    local t0 = dlock.now()
    c:close()
    assert.is_true(dlock.now() - t0 < 2, "close took too long")
    assert.equals(threads - 1, helper.threads())
  end)
end)

describe("dlock.core.parse_url() #binding", function()
  local parse = require("dlock.core").parse_url

  it("parses every part of a URL", function()
    assert.same({ host = "127.0.0.1", port = 6380, db = 3, username = "u", password = "p@ss" },
      parse("redis://u:p%40ss@127.0.0.1:6380/3"))
    assert.same({ host = "::1", port = 6379, db = 0 }, parse("redis://[::1]"))
    assert.same({ host = "127.0.0.1", port = 6379, db = 0 }, parse("redis://"))
    assert.same({ path = "/run/r.sock", db = 2, password = "x" },
      parse("unix://:x@/run/r.sock?db=2"))
    assert.same({ host = "db.example", port = 6380, db = 1, password = "x", tls = true },
      parse("rediss://:x@db.example:6380/1"))
  end)

  it("rejects malformed URLs with nil, err", function()
    for _, bad in ipairs{ "", "redis:/x", "redis://h:0", "redis://h:65536",
        "redis://h:-1", "redis://h:1x", "redis://h/1x", "redis://h/-1",
        "redis://[::1", "redis://:%4@h", "redis://h?db=x", "unix://",
        "unix://relative", "http://h", "redis://h\0", "rediss://h:0", "rediss:/h" } do
      local ok, err = parse(bad)
      assert.is_nil(ok, bad)
      assert.is_string(err)
    end
  end)

  it("survives 20,000 random and mutated inputs (property test)", function()
    math.randomseed(12345)
    local seeds = { "redis://u:p@127.0.0.1:6379/0", "unix:///tmp/r.sock?db=1",
                    "redis://[::1]:7000/15", "redis://:pw@h" }
    local alphabet = "redis:/unix@[]%?=0123456789abcdef\0\255 "
    for i = 1, 20000 do
      local s
      if i % 2 == 0 then                          -- mutate a valid URL
        s = seeds[i % #seeds + 1]
        for _ = 1, math.random(1, 4) do
          local p = math.random(1, #s + 1)
          local ch = alphabet:sub(math.random(#alphabet), math.random(#alphabet))
          s = s:sub(1, p - 1) .. ch .. s:sub(p + math.random(0, 2))
        end
      else                                        -- random bytes
        local t = {}
        for j = 1, math.random(0, 40) do t[j] = string.char(math.random(0, 255)) end
        s = "redis://" .. table.concat(t)
      end
      local r, err = parse(s)
      if r then                                   -- whatever it accepts is sane
        assert.is_true(r.db >= 0)
        if r.host then assert.is_true(r.port >= 1 and r.port <= 65535) end
        assert.is_true((r.host ~= nil) ~= (r.path ~= nil))
      else
        assert.is_string(err)
      end
    end
  end)
end)
