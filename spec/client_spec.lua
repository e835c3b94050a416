local dlock = require "dlock"
local helper = require "helper"

describe("dlock #binding", function()
  it("has a _VERSION", function()
    assert.equals("dlock 2.0.0", dlock._VERSION)
  end)

  -- Luanti (Minetest) mod security, as spec/luanti_spec.lua meets it in a
  -- real server: the chunks that require loads see a sandbox whose require
  -- raises and whose package is a copy without `loaded`; a trusted mod
  -- has the real require, from its insecure environment.
  it("loads in a sandbox whose require is a stub, through the real require", function()
    local ok, out = helper.run_lua([[
      local real_require, url = require, ...
      local sandbox = { require = function() error("require() is disabled when mod security is on.") end,
        package = { path = package.path, cpath = package.cpath },
        debug = { getinfo = debug.getinfo, traceback = debug.traceback } }
      for _, k in ipairs({ "assert", "error", "getmetatable", "ipairs", "next", "pairs", "pcall",
                           "print", "rawequal", "rawget", "rawset", "select", "setmetatable",
                           "tonumber", "tostring", "type", "unpack", "_VERSION", "xpcall",
                           "coroutine", "string", "table", "math", "jit" }) do
        sandbox[k] = _G[k]
      end
      sandbox._G = sandbox
      -- from now on, the chunks that require loads get the sandbox as their globals
      if setfenv then setfenv(0, sandbox) else debug.getregistry()[2] = sandbox end
      print(pcall(sandbox.require, "dlock"))
      local dlock = real_require("dlock")
      print(package.loaded.dlock == dlock, package.loaded["dlock.core"] ~= nil)
      local c = assert(dlock.connect(url))
      print(c:lock("sandboxed"):with(function() return "held" end))
      c:close()
    ]], helper.url())
    assert.is_true(ok, out)
    assert.matches("^false\t[^\n]*require%(%) is disabled", out)
    assert.matches("\ntrue\ttrue\ntrue\theld\n", out)
  end)

  it("leaves no mark in package.loaded when its core cannot be loaded", function()
    -- (Lua 5.1 and LuaJIT would otherwise answer the next require
    -- "dlock" with "loop or previous error loading module")
    local ok, out = helper.run_lua([[
      local cpath = package.cpath
      package.cpath = "/nonexistent/?.so"
      local ok, err = pcall(require, "dlock")
      print(ok, (tostring(err):match("^[^\n]*")), package.loaded.dlock)
      package.cpath = cpath
      print(require("dlock")._VERSION)
    ]])
    assert.is_true(ok, out)
    assert.matches("^false\tmodule 'dlock.core' not found:\tnil\ndlock 2%.0%.0\n", out)
  end)
end)

describe("dlock.connect() #binding", function()
  it("accepts a URL string", function()
    local c = assert(dlock.connect(helper.url()))
    assert.is_true(c:ping())
    c:close()
  end)

  it("accepts an options table", function()
    local c = assert(dlock.connect{ url = helper.url(), prefix = "app:",
      lease = 5, connect_timeout = 0.5, command_timeout = 0.5, db = 2 })
    local l = c:lock("k")
    assert(l:acquire())
    local db2 = { cli = function(...) return helper.redis().cli("-n", "2", ...) end }
    assert.equals("1", helper.lock_field(db2, "app:{k}", "o" .. c.id .. ":1"))
    assert(l:release())
    c:close()
  end)

  it("gives nil, 'connection ...' when no server listens", function()
    local srv = helper.start_redis()
    local url = srv.url
    srv.stop()
    local c, err = dlock.connect{ url = url, connect_timeout = 0.5 }
    assert.is_nil(c)
    assert.matches("^connection", err)
  end)

  it("gives nil, 'connection ...' when the password is refused", function()
    local srv = helper.start_redis("--requirepass s3cret")
    local c, err = dlock.connect(srv.url:gsub("//", "//:wrong@"))
    assert.is_nil(c)
    assert.matches("^connection", err)
    c = assert(dlock.connect{ url = srv.url, password = "s3cret" })
    assert.is_true(c:ping())
    c:close()
    c = assert(dlock.connect((srv.url:gsub("//", "//:s3cret@"))))
    assert.is_true(c:ping())
    c:close()
    srv.stop()
  end)

  it("connects over a unix socket", function()
    local sock = helper.tmp .. "/r.sock"
    local srv = helper.start_redis("--unixsocket " .. sock)
    local c = assert(dlock.connect("unix://" .. sock))
    local l = c:lock("u")
    assert(l:acquire())
    assert.equals(1, l:count())
    c:close()
    srv.stop()
  end)
end)

describe("client.id #binding", function()
  it("is a random hex string of at least 128 bits, distinct per client", function()
    local a, b = assert(helper.client()), assert(helper.client())
    assert.matches("^%x+$", a.id)
    assert.is_true(#a.id >= 32)
    assert.not_equals(a.id, b.id)
    a:close(); b:close()
  end)
end)

describe("client:ping() #binding", function()
  it("answers true, and nil, 'connection ...' once the server is gone", function()
    local srv = helper.start_redis()
    local c = assert(dlock.connect{ url = srv.url, command_timeout = 0.5 })
    assert.is_true(c:ping())
    srv.stop()
    local ok, err = c:ping()
    assert.is_nil(ok)
    assert.matches("^connection", err)
    c:close()
  end)
end)

describe("client:stats() #binding", function()
  it("counts acquisitions, releases, waits and timeouts", function()
    local c = assert(helper.client())
    local other = assert(helper.client())
    local name = helper.unique_name()
    local l = c:lock(name)
    assert(l:acquire())
    local s = c:stats()
    for _, k in ipairs{ "acquired", "released", "renewed", "lost", "waits",
                        "timeouts", "held" } do
      assert.is_number(s[k], k)
    end
    assert.equals(1, s.acquired)
    assert.equals(1, s.held)
    assert.is_nil(other:lock(name):acquire{ wait = 0.05 })
    assert.equals(1, other:stats().waits)
    assert.equals(1, other:stats().timeouts)
    assert(l:release())
    s = c:stats()
    assert.equals(1, s.released)
    assert.equals(0, s.held)
    c:close(); other:close()
  end)
end)

describe("client:close() #binding", function()
  it("releases every hold, stops the watchdog thread and is idempotent", function()
    local before = helper.threads()
    local c = assert(helper.client())
    assert.equals(before + 1, helper.threads())
    local names = { helper.unique_name(), helper.unique_name() }
    assert(c:lock(names[1]):acquire())
    assert(c:lock(names[2]):acquire{ lease = 30 })
    assert(c:lock(names[2]):acquire())            -- reentrant: count 2
    local probe = assert(helper.client())
    assert.is_number(probe:lock(names[1]):ttl())
    c:close()
    c:close()
    assert.equals(before + 1, helper.threads())  -- only probe's watchdog
    assert.is_nil(probe:lock(names[1]):ttl())
    assert.is_nil(probe:lock(names[2]):ttl())
    probe:close()
    assert.equals(before, helper.threads())
  end)

  it("leaves no file descriptors behind", function()
    local before = helper.fds()
    for _ = 1, 20 do
      local c = assert(helper.client())
      local l = c:lock(helper.unique_name())
      assert(l:acquire())
      c:close()
    end
    assert.equals(before, helper.fds())
  end)

  it("makes every later call raise 'closed'", function()
    local c = assert(helper.client())
    local l = c:lock("x")
    c:close()
    assert.error_matches(function() c:ping() end, "closed")
    assert.error_matches(function() c:lock("y") end, "closed")
    assert.error_matches(function() l:acquire() end, "closed")
    assert.error_matches(function() l:held() end, "closed")
    assert.matches("closed", tostring(c))
  end)

  it("is run by __gc when the client is collected", function()
    local before = helper.threads()
    local name = helper.unique_name()
    local function use_and_drop()          -- no stack slot keeps c alive
      local c = assert(helper.client())
      assert(c:lock(name):acquire())
    end
    use_and_drop()
    collectgarbage(); collectgarbage()
    assert.equals(before, helper.threads())
    local probe = assert(helper.client())
    assert.is_nil(probe:lock(name):ttl())
    probe:close()
  end)

  it("is run on scope exit by <close> (Lua 5.4)", function()
    if _VERSION ~= "Lua 5.4" then return pending("Lua 5.4 only") end
    local before = helper.threads()
    local f = assert(load([[
      local dlock, url = ...
      local c <close> = assert(dlock.connect(url))
      assert(c:ping())
    ]]))
    f(dlock, helper.url())
    assert.equals(before, helper.threads())
  end)
end)

describe("client:stats().evictable #binding", function()
  it("flags a server whose eviction policy can remove lock keys", function()
    local srv = helper.start_redis("--maxmemory-policy allkeys-lru")
    local c = assert(dlock.connect(srv.url))
    assert.is_true(c:stats().evictable)
    c:close()
    srv.stop()
    local c2 = assert(helper.client())
    assert.is_false(c2:stats().evictable)
    c2:close()
  end)
end)

describe("credentials #binding", function()
  local srv
  lazy_setup(function() srv = helper.start_redis("--requirepass s3cret") end)
  lazy_teardown(function() srv.stop() end)

  local addr = function() return "127%.0%.0%.1:" .. srv.port end

  it("no password against a server that needs one is a connection error with the address", function()
    local c, err = dlock.connect(srv.url)
    assert.is_nil(c)
    assert.matches("^connection: NOAUTH", err)
    assert.matches(addr(), err)
    assert.matches("password", err)
  end)

  it("a wrong password is a connection error with the address", function()
    local c, err = dlock.connect(("redis://:wrong@127.0.0.1:%d"):format(srv.port))
    assert.is_nil(c)
    assert.matches("^connection: AUTH failed", err)
    assert.matches(addr(), err)
  end)

  it("the right one, in the URL or as an option, works", function()
    local c = assert(dlock.connect(("redis://:s3cret@127.0.0.1:%d"):format(srv.port)))
    assert.is_true(c:ping())
    c:close()
    c = assert(dlock.connect{ url = srv.url, password = "s3cret" })
    assert.is_true(c:with("x", function() return true end))
    c:close()
  end)

  it("a password written without its colon raises, naming the pitfall but not the secret", function()
    local ok, err = pcall(dlock.connect, ("redis://s3cret@127.0.0.1:%d"):format(srv.port))
    assert.is_false(ok)
    assert.matches("bad argument #1 to 'dlock.connect'", err, 1, true)
    assert.matches("a user name without a password", err, 1, true)
    assert.matches("redis://:password@host", err, 1, true)
    assert.is_nil(err:find("s3cret", 1, true))
  end)

  -- The userinfo ends at the last '@' (a password may hold '/', '?',
  -- ':' or '@'), and no error quotes any part of it.
  it("takes a password holding '/', '?', ':' or '@' up to the last '@'", function()
    for _, pw in ipairs({ "s3/cret", "s3?cr:et", "s3@cret" }) do
      local c, err = dlock.connect(("redis://:%s@127.0.0.1:%d"):format(pw, srv.port))
      assert.is_nil(c)                          -- parsed: the server refused it
      assert.matches("^connection: AUTH failed", err)
      assert.is_nil(err:find(pw, 1, true))
    end
  end)

  it("never quotes a part of the password in a URL error", function()
    for _, url in ipairs({ "redis://:Sup3r/Secr3t@127.0.0.1:1/0",
                           "redis://:Sup3r/Secr3t@127.0.0.1:x/0",
                           "redis://:Sup3r?Secr3t@127.0.0.1:1/db",
                           "Sup3r:Secr3t@127.0.0.1:6379",
                           "unix://:Sup3r/Secr3t@" }) do
      local ok, c, err = pcall(dlock.connect, url)
      if ok and c then c:close() end
      local msg = ok and err or c               -- nil, err; or raised
      assert.is_string(msg)
      assert.is_nil(msg:find("Sup3r", 1, true), msg)
      assert.is_nil(msg:find("Secr3t", 1, true), msg)
    end
  end)
end)
