-- TLS: rediss:// and connect{ tls = {...} } against real
-- redis-servers listening with TLS only, on certificates made here with
-- `openssl` (helper.tls_certs): a good certificate, a wrong CA, a wrong host
-- name, a client certificate the server requires, a link dying mid-hold,
-- Redlock, Sentinel and Cluster over TLS, and a build without OpenSSL.
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"

local built = require("dlock.core").tls_built

describe("TLS", function()
  local certs, srv
  setup(function()
    if not built then return end
    certs = helper.tls_certs()
    srv = helper.start_redis(nil, { tls = certs })
  end)
  teardown(function() if srv then srv.stop() end end)

  local function connect(opts)
    local o = { url = srv.url, tls = { ca_file = certs.ca } }
    for k, v in pairs(opts or {}) do o[k] = v end
    return dlock.connect(o)
  end

  it("is built in (make finds libssl-dev; TLS=0 builds without)", function()
    assert.is_true(built)
  end)

  it("locks over rediss:// with the server's certificate verified", function()
    local c = assert(connect())
    assert.is_true(c:ping())
    local name = helper.unique_name("tls")
    local lock = c:lock(name)
    assert(lock:acquire())
    assert.is_true(lock:held())
    local token = lock:token()
    assert.is_false(helper.is_free(srv, "dlock:{" .. name .. "}"))
    assert(lock:acquire())                          -- reentrant, as over TCP
    assert.equals(2, lock:count())
    assert(lock:release())
    assert(lock:release())
    assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"))
    assert.is_number(token)
    c:close()
  end)

  it("verifies by host name too (localhost, sent as SNI)", function()
    local c = assert(connect{ url = srv.url:gsub("127%.0%.0%.1", "localhost") })
    assert.is_true(c:ping())
    c:close()
  end)

  it("refuses a server whose certificate another CA signed", function()
    local c, err = connect{ tls = { ca_file = certs.other_ca } }
    assert.is_nil(c)
    assert.matches("^connection: TLS handshake: certificate verify failed", err)
    assert.matches("127.0.0.1:" .. srv.port, err, 1, true)
    -- without a CA the system's store is used, which does not know ours
    c, err = connect{ tls = {} }
    assert.is_nil(c)
    assert.matches("certificate verify failed", err)
    c, err = dlock.connect(srv.url)
    assert.is_nil(c)
    assert.matches("certificate verify failed", err)
  end)

  it("refuses a certificate for another host name", function()
    local c, err = connect{ tls = { ca_file = certs.ca, server_name = "wrong.example" } }
    assert.is_nil(c)
    assert.matches("^connection: TLS handshake: certificate verify failed: hostname mismatch", err)
    -- the name it does carry is accepted when given as server_name
    c = assert(connect{ tls = { ca_file = certs.ca, server_name = "localhost" } })
    assert.is_true(c:ping())
    c:close()
  end)

  it("connects to an unverified server only when told verify = false", function()
    local c = assert(connect{ tls = { ca_file = certs.other_ca, verify = false } })
    assert.is_true(c:ping())
    c:close()
  end)

  it("warns once per client, through its log, that verify = false checks nothing", function()
    local said = {}
    local c = assert(connect{ tls = { ca_file = certs.other_ca, verify = false },
      log = function(level, msg) said[#said + 1] = level .. " " .. msg end })
    for _ = 1, 3 do assert.is_true(c:ping()) end
    local lock = c:lock(helper.unique_name("insecure"))
    assert(lock:acquire()); assert(lock:release())
    local n = 0
    for _, m in ipairs(said) do
      if m:find("tls.verify = false", 1, true) then
        n = n + 1
        assert.matches("^warn ", m)
      end
    end
    assert.equals(1, n)
    c:close()
    said = {}                                   -- a verified client: no warning
    c = assert(connect{ tls = { ca_file = certs.ca },
      log = function(level, msg) said[#said + 1] = level .. " " .. msg end })
    assert.is_true(c:ping())
    for _, m in ipairs(said) do assert.is_nil(m:find("verify", 1, true)) end
    c:close()
  end)

  it("sends a client certificate when the server requires one", function()
    local strict = helper.start_redis(nil, { tls = certs, tls_auth_clients = true })
    local c, err = dlock.connect{ url = strict.url, tls = { ca_file = certs.ca } }
    assert.is_nil(c)
    -- the server's alert says "certificate required"; when its reset wins
    -- the race with the alert, dlock still says what it likely means
    assert.matches("^connection: TLS.* client certificate", err)
    assert.matches("tls.cert_file and tls.key_file", err, 1, true)
    c = assert(dlock.connect{ url = strict.url, tls = { ca_file = certs.ca,
      cert_file = certs.client_crt, key_file = certs.key_file or certs.client_key } })
    local lock = c:lock(helper.unique_name("mtls"))
    assert(lock:acquire())
    assert(lock:release())
    c:close()
    strict.stop()
  end)

  it("keeps a hold whose TLS links die mid-hold, renewing over new ones #timing", function()
    -- (a lease long enough for a TLS handshake under valgrind on a
    -- loaded machine: 0.6 s was not)
    local c = assert(connect{ lease = 1.5 })
    local name = helper.unique_name("tlsdie")
    local lock = c:lock(name)
    assert(lock:acquire())
    local renewed = c:stats().renewed
    for _ = 1, 3 do
      -- every client link of the server, the watchdog's too
      srv.cli("client", "kill", "type", "normal")
      srv.cli("client", "kill", "type", "pubsub")
      dlock.sleep(0.6)
    end
    helper.wait_for(function() return c:stats().renewed >= renewed + 2 end, 3)
    assert.is_true(c:stats().renewed >= renewed + 2)
    assert.is_true(lock:held())
    local ttl = tonumber(srv.cli("pttl", "dlock:{" .. name .. "}"))
    assert.is_true(ttl > 0, "pttl " .. tostring(ttl))
    assert.equals(0, c:poll())                      -- nothing was lost
    assert(lock:release())
    c:close()
  end)

  it("tells of a hold lost while the TLS server is gone", function()
    local other = helper.start_redis(nil, { tls = certs })
    local lost = {}
    local c = assert(dlock.connect{ url = other.url, tls = { ca_file = certs.ca }, lease = 0.5,
      connect_timeout = 0.2, command_timeout = 0.2,
      on_lost = function(l, why) lost[#lost + 1] = why end })
    local lock = c:lock(helper.unique_name("tlsgone"))
    assert(lock:acquire())
    other.restart()                                 -- its data is gone
    helper.wait_for(function() c:poll(); return #lost > 0 end, 5)
    assert.equals(1, #lost)
    assert.is_false(lock:held())
    local ok, err = lock:release()
    assert.is_nil(ok)
    assert.matches("^lost", err)
    c:close()
    other.stop()
  end)

  it("wakes a waiter on release through the TLS subscriber #timing", function()
    local a = assert(connect())
    local name = helper.unique_name("tlswait")
    local la = a:lock(name)
    assert(la:acquire())
    -- the waiter is another process: the release must reach it by pub/sub
    local script, out = helper.tmp .. "/" .. name .. ".lua", helper.tmp .. "/" .. name .. ".out"
    local f = assert(io.open(script, "w"))
    f:write(([[
      local dlock = require "dlock"
      local c = assert(dlock.connect{ url = %q, tls = { ca_file = %q } })
      local lock = c:lock(%q)
      io.stdout:write("waiting\n"); io.stdout:flush()
      local ok, err = lock:acquire{ wait = 20 }
      io.stdout:write(ok and "got it\n" or tostring(err) .. "\n")
      io.stdout:write("wakeups ", c:stats().wakeups, "\n")
      if ok then lock:release() end
    ]]):format(srv.url, certs.ca, name))
    f:close()
    os.execute(("%s %s >%s 2>&1 &"):format(helper.lua_cmd(), script, out))
    assert(helper.wait_for(function()
      return (helper.read_file(out) or ""):find("waiting", 1, true)
    end, 10), helper.read_file(out))
    -- its TLS subscriber is on the lock's channel before the release
    assert(helper.wait_for(function()
      return srv.cli("pubsub", "channels", "*" .. name .. "*") ~= ""
    end, 10), "the waiter never subscribed")
    assert(la:release())
    -- it waits for up to 20 s: only a wake-up by the release ends it sooner
    local t0 = dlock.now()
    assert(helper.wait_for(function()
      return (helper.read_file(out) or ""):find("\n.", 1) end, 15), helper.read_file(out))
    assert(helper.wait_for(function()
      return (helper.read_file(out) or ""):find("wakeups", 1, true) end, 5))
    assert.matches("waiting\ngot it\nwakeups [1-9]", helper.read_file(out))
    assert.is_true(dlock.now() - t0 < 15)
    a:close()
  end)

  it("yields to cqueues while waiting on a TLS connection #timing", function()
    local ok, cqueues = pcall(require, "cqueues")
    if not ok then pending("lua-cqueues is not installed"); return end
    local c = assert(connect{ scheduler = "cqueues" })
    local cq = cqueues.new()
    local name = helper.unique_name("tlscq")
    local inside, max_inside, turns, ticks = 0, 0, 0, 0
    for _ = 1, 2 do
      cq:wrap(function()
        for _ = 1, 3 do
          local lock = c:lock(name)
          assert(lock:acquire{ wait = 10 })
          inside = inside + 1
          max_inside = math.max(max_inside, inside)
          turns = turns + 1
          cqueues.sleep(0.03)
          inside = inside - 1
          assert(lock:release())
          cqueues.sleep(0.01)
        end
      end)
    end
    cq:wrap(function()
      while cq:count() > 1 do ticks = ticks + 1; cqueues.sleep(0.001) end
    end)
    local deadline = dlock.now() + 20
    while not cq:empty() and dlock.now() < deadline do assert(cq:step(0.05)) end
    assert.is_true(cq:empty(), "the loop did not end in time")
    assert.equals(6, turns)
    assert.equals(1, max_inside)
    assert.is_true(c:stats().wakeups >= 1, "no waiter was woken by a release message")
    assert.is_true(ticks > 20, "the loop ticked " .. ticks .. " times")
    c:close()
  end)

  it("takes a Redlock quorum of TLS masters", function()
    local m = topology.masters(3, nil, certs)
    local c = assert(dlock.connect{ servers = m.urls, tls = { ca_file = certs.ca } })
    local name = helper.unique_name("tlsredlock")
    local lock = c:lock(name)
    assert(lock:acquire())
    local n = 0
    for _, s in ipairs(m.servers) do
      n = n + tonumber(s.cli("exists", "dlock:{" .. name .. "}"))
    end
    assert.equals(3, n)
    assert(lock:release())
    c:close()
    m.stop()
  end)

  it("finds the master through TLS sentinels and follows a failover", function()
    local t = topology.sentinel{ tls = certs }
    local c = assert(dlock.connect{ sentinels = t.sentinel_urls, master = t.name,
      tls = { ca_file = certs.ca } })
    local n1, n2 = helper.unique_name("tlssentinel"), helper.unique_name("tlssentinel2")
    local lock = c:lock(n1)
    assert(lock:acquire())
    assert.equals("1", t.master.cli("exists", "dlock:{" .. n1 .. "}"))
    assert(lock:release())
    t.failover()
    local l2 = c:lock(n2)
    assert(helper.wait_for(function() return (l2:acquire()) end, 10, 0.1))
    assert.equals("1", t.master.cli("exists", "dlock:{" .. n2 .. "}"))
    assert(l2:release())
    c:close()
    t.stop()
  end)

  it("routes by slot across a TLS Cluster", function()
    local cl = topology.cluster(3, { tls = certs })
    local c = assert(dlock.connect{ cluster = { cl.urls[1] }, tls = { ca_file = certs.ca } })
    local seen = {}
    for i = 1, 12 do
      local lock = c:lock("tlscluster" .. i)
      assert(lock:acquire())
      local h = cl.node_for("dlock:{tlscluster" .. i .. "}")
      assert.equals("1", h.cli("exists", "dlock:{tlscluster" .. i .. "}"))
      seen[h.port] = true
      assert(lock:release())
    end
    local nodes = 0
    for _ in pairs(seen) do nodes = nodes + 1 end
    assert.is_true(nodes >= 2, "locks landed on " .. nodes .. " node(s)")
    c:close()
    cl.stop()
  end)

  it("rejects bad tls options, naming them", function()
    local bad = {
      { { url = srv.url, tls = "yes" }, "table expected" },
      { { url = srv.url, tls = { bogus = 1 } }, "unknown field 'bogus'" },
      { { url = srv.url, tls = { ca_file = 1 } }, "field 'ca_file'" },
      { { url = srv.url, tls = { verify = "no" } }, "field 'verify'" },
      { { url = srv.url, tls = { key_file = certs.client_key } }, "'key_file' without 'cert_file'" },
      { { url = srv.url, tls = { ca_file = "/nonexistent/ca.crt" } },
        "tls.ca_file: cannot use '/nonexistent/ca.crt': No such file" },
      { { url = srv.url, tls = { ca_file = certs.ca, cert_file = certs.client_crt,
          key_file = certs.server_key } }, "tls.key_file: cannot use" },
      { { url = "redis://127.0.0.1:1", tls = {} }, "no URL is rediss://" },
      { { servers = { "redis://127.0.0.1:1" }, tls = {} }, "no URL is rediss://" },
      { { cluster = { srv.url, "redis://127.0.0.1:1" } }, "every URL in 'cluster'" },
    }
    for _, case in ipairs(bad) do
      local ok, err = pcall(dlock.connect, case[1])
      assert.is_false(ok)
      assert.matches("bad option 'tls' to 'dlock.connect'", err, 1, true)
      assert.matches(case[2], err, 1, true)
    end
  end)
end)

describe("TLS in a build without OpenSSL", function()
  it("gives a connection error for rediss:// that says why", function()
    local dir = helper.tmp .. "/notls"
    local make = os.getenv("MAKE") or "make"
    -- the headers of the Lua running this spec (helper.lua may be a path)
    local pc = rawget(_G, "jit") and "luajit" or "lua" .. _VERSION:match("%d+%.%d+")
    assert(os.execute(("%s -s -C %q BUILD=%q TLS=0 CFLAGS=-O0 LUA_PC=%s %q >/dev/null"):format(
      make, os.getenv("PWD") or ".", dir, pc, dir .. "/dlock/core.so")))
    local ok, out = helper.run_lua(([[
      package.cpath = %q .. "/?.so;" .. package.cpath
      local dlock = require "dlock"
      assert(require("dlock.core").tls_built == false, "built with TLS")
      local c, err = dlock.connect("rediss://127.0.0.1:6380")
      io.write(tostring(c), "|", err)
    ]]):format(dir))
    assert(ok, out)
    assert.matches("^nil|connection: TLS %(rediss://%) is not built into this dlock", out)
    assert.matches("libssl-dev", out, 1, true)
  end)
end)
