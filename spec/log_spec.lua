-- connect{ log = function(level, message) }: reconnects,
-- failovers, slot moves, quorum losses and lost holds are told through it,
-- always on the Lua thread: inside a call into the library (client:poll(),
-- or the next call of any method), never from the watchdog thread.
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"

--- A client whose log calls are recorded; each records whether it came
--- while the spec was inside a library call (inside[1]).
local function logged(opts)
  local rec, inside = {}, { false }
  local o = {}
  for k, v in pairs(opts or {}) do o[k] = v end
  if not (o.url or o.servers or o.sentinels or o.cluster) then o.url = helper.url() end
  o.log = function(level, msg)
    rec[#rec + 1] = { level = level, msg = msg, inside = inside[1] }
  end
  local c = assert(dlock.connect(o))
  --- Run fn (a library call) with inside set.
  local function call(fn, ...)
    inside[1] = true
    local r = table.pack(fn(...))
    inside[1] = false
    return table.unpack(r, 1, r.n)
  end
  --- The first message matching pattern (after polling), or nil.
  local function find(pattern)
    call(c.poll, c)
    for _, m in ipairs(rec) do
      if m.msg:find(pattern) then return m end
    end
  end
  return c, rec, call, find
end

describe("connect{ log } #binding", function()
  it("tells of a lost connection and the reconnect, on the Lua thread", function()
    local srv = helper.start_redis()
    local c, rec, call, find = logged{ url = srv.url }
    assert.is_true(call(c.ping, c))
    srv.cli("client", "kill", "type", "normal")
    assert.is_true(call(c.ping, c))                 -- resent on a new link
    local lost = assert(helper.wait_for(function()
      return find("^command connection lost: server closed the connection %(127%.0%.0%.1:")
    end, 5), "no 'lost' message")
    assert.equals("warn", lost.level)
    local back = assert(find("^command connection to 127%.0%.0%.1:%d+ reconnected$"))
    assert.equals("info", back.level)
    for _, m in ipairs(rec) do assert.is_true(m.inside, m.msg) end
    call(c.close, c)
    srv.stop()
  end)

  it("tells of the watchdog's link and of a lost hold, never from its thread", function()
    local srv = helper.start_redis()
    local lost = {}
    local c, rec, call, find = logged{ url = srv.url, lease = 0.6,
      on_lost = function(l, why) lost[#lost + 1] = why end }
    local name = helper.unique_name("logged")
    local lock = c:lock(name)
    assert(call(lock.acquire, lock))
    assert(helper.wait_for(function() return call(c.stats, c).renewed >= 1 end, 10),
      "the watchdog never renewed")                 -- so it has its link
    srv.cli("client", "kill", "type", "normal")     -- its link too
    srv.cli("del", "dlock:{" .. name .. "}")        -- and the hold is gone
    -- the spec sleeps outside the library: nothing may be told meanwhile
    dlock.sleep(1.5)
    assert.equals(0, #rec)
    assert.equals(0, #lost)
    assert(helper.wait_for(function() return find("lost") and #lost > 0 end, 5))
    local m = assert(find("^dlock:{" .. name:gsub("%p", "%%%0") .. "}: lost"))
    assert.equals("warn", m.level)
    assert(find("^watchdog connection lost"), "no watchdog message")
    for _, x in ipairs(rec) do assert.is_true(x.inside, x.msg) end
    call(c.close, c)
    srv.stop()
  end)

  it("tells of a quorum loss on Redlock", function()
    local m = topology.masters(3)
    local c, _, call, find = logged{ servers = m.urls, connect_timeout = 0.2,
      command_timeout = 0.3 }
    m.servers[1].stop()
    m.servers[2].stop()
    local lock = c:lock(helper.unique_name("q"))
    local ok, err = call(lock.acquire, lock, { wait = 0 })
    assert.is_nil(ok)
    assert.matches("^quorum", err)
    local q = assert(find("^quorum: acquire: only %d of 3 servers answered"))
    assert.equals("warn", q.level)
    assert(find("^command connection %a+: .*%(127%.0%.0%.1:%d+%)"), "no connection message")
    call(c.close, c)
    m.stop()
  end)

  it("keeps working when the log function raises", function()
    local srv = helper.start_redis()
    local calls = 0
    local c = assert(dlock.connect{ url = srv.url,
      log = function() calls = calls + 1; error("log is broken") end })
    srv.cli("client", "kill", "type", "normal")
    assert.is_true(c:ping())
    assert.is_true(c:ping())
    assert.is_true(calls >= 1)
    local lock = c:lock(helper.unique_name("raise"))
    assert(lock:acquire())
    assert(lock:release())
    c:close()
    srv.stop()
  end)

  it("survives a log function that closes the client, or calls into it", function()
    local srv = helper.start_redis()
    local c
    local pinged = {}
    c = assert(dlock.connect{ url = srv.url, log = function()
      pinged[#pinged + 1] = pcall(c.ping, c)       -- re-entering is allowed
      c:close()                                     -- and so is closing
    end })
    srv.cli("client", "kill", "type", "normal")
    assert.is_true(c:ping())                        -- lost, reconnected: queued
    assert.has_error(function() c:ping() end, "calling 'ping' on bad self (client is closed)")
    -- the first message: the client was open; close then told the second
    assert.same({ true, false }, pinged)
    srv.stop()
  end)

  it("tells what is queued when closed, with close's extra arguments too", function()
    local srv = helper.start_redis()
    local msgs, lost = {}, {}
    local c = assert(dlock.connect{ url = srv.url, lease = 0.5,
      log = function(level, msg) msgs[#msgs + 1] = level .. " " .. msg end,
      on_lost = function(l, why) lost[#lost + 1] = why end })
    local name = helper.unique_name("closing")
    local lock = c:lock(name)
    assert(lock:acquire())
    srv.cli("del", "dlock:{" .. name .. "}")
    dlock.sleep(1.5)                                -- lost, and queued
    c:close("an error value, as <close> passes")
    assert.equals(1, #lost)
    assert.matches("^lost", lost[1])
    local told
    for _, m in ipairs(msgs) do
      if m:find("^warn dlock:{" .. name:gsub("%p", "%%%0") .. "}: lost") then told = true end
    end
    assert.is_true(told, table.concat(msgs, "\n"))
    srv.stop()
  end)

  it("rejects a log that is not a function", function()
    for _, bad in ipairs({ 5, "print", {} }) do
      local ok, err = pcall(dlock.connect, { url = helper.url(), log = bad })
      assert.is_false(ok)
      assert.matches("bad option 'log' to 'dlock.connect' (function(level, message) expected)",
        err, 1, true)
    end
  end)

  it("tells of a failover found through the sentinels #slow", function()
    local t = topology.sentinel()
    local c, _, call, find = logged{ sentinels = t.sentinel_urls, master = t.name }
    assert(call(c.ping, c))
    assert(find("^sentinel 127%.0%.0%.1:%d+: master 'mymaster' is at 127%.0%.0%.1:" ..
      t.master.port .. "$"))
    t.failover()
    assert(helper.wait_for(function()
      call(c.ping, c)
      return find("master 'mymaster' is at 127%.0%.0%.1:" .. t.master.port .. "$")
    end, 15), "no message naming the new master")
    call(c.close, c)
    t.stop()
  end)

  it("tells of a Cluster slot that moved #slow", function()
    local cl = topology.cluster(3)
    local c, _, call, find = logged{ cluster = cl.urls }
    local name = helper.unique_name("slot")
    local lock = c:lock(name)
    assert(call(lock.acquire, lock))
    assert(call(lock.release, lock))
    local slot = cl.keyslot("dlock:{" .. name .. "}")
    local to = cl.owner(slot) % 3 + 1
    cl.move_slot(slot, to)
    assert(call(lock.acquire, lock))
    local m = assert(find("^cluster: slot " .. slot .. " moved to 127%.0%.0%.1:" ..
      cl.nodes[to].port .. " %(MOVED%)$"))
    assert.equals("info", m.level)
    assert(call(lock.release, lock))
    call(c.close, c)
    cl.stop()
  end)
end)
