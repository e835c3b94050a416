-- Redlock (servers = {...}) beyond the common lock API of ha_spec.lua:
-- retry jitter, and a waiter's subscriber connections to a hung master.
local dlock = require "dlock"
local helper = require "helper"

describe("Redlock retry jitter", function()
  it("gives different Redlock jitter in different processes (no shared random())", function()
    local outs = {}
    for i = 1, 2 do
      local ok, out = helper.run_lua([[
        local core = require "dlock.core"
        local t = {}
        for i = 1, 8 do t[i] = core.jitter() end
        print(table.concat(t, " "))
      ]])
      assert.is_true(ok, out)
      outs[i] = out
    end
    assert.are_not.equal(outs[1], outs[2])
  end)
end)

describe("a subscriber connection to a server that hangs", function()
  it("is bounded in its set-up (SELECT) by connect_timeout", function()
    local srvs, urls = {}, {}
    for i = 1, 3 do
      srvs[i] = helper.start_redis()
      urls[i] = ("redis://127.0.0.1:%d/1"):format(srvs[i].port)  -- db 1: SELECT
    end
    local holder = assert(dlock.connect{ servers = urls })
    local name = helper.unique_name("hang")
    assert(holder:lock(name):acquire())
    srvs[3].signal("STOP")               -- accepts connections, answers nothing
    local script = helper.tmp .. "/hang-" .. name:gsub(":", "_") .. ".lua"
    local f = assert(io.open(script, "wb"))
    f:write([[
      local dlock = require "dlock"
      local c = assert(dlock.connect{ servers = { arg[1], arg[2], arg[3] },
                                      connect_timeout = 0.3, command_timeout = 0.3 })
      local t0 = dlock.now()
      local ok, err = c:lock(arg[4]):acquire{ wait = 1 }
      print("waited", dlock.now() - t0, ok, err)
    ]])
    f:close()
    local p = assert(io.popen(("timeout 10 env %s %s '%s' '%s' '%s' '%s' 2>&1"):format(
      helper.lua_cmd(), script, urls[1], urls[2], urls[3], name)))
    local out = p:read("*a")
    p:close()
    srvs[3].signal("CONT")
    local waited = tonumber(out:match("waited%s+([%d%.]+)"))
    assert.is_number(waited, out)
    assert.is_true(waited < 4, out)      -- wait 1 s, plus bounded set-ups
    assert.matches("timeout", out)
    holder:close()
    for i = 1, 3 do srvs[i].stop() end
  end)
end)
