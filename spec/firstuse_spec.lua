-- A user's first ten minutes (issue 10): answers that say what happened,
-- leases named for what they do, locks released when a program exits.
-- Installing from the README is in install_spec.lua.
local dlock = require "dlock"
local helper = require "helper"

describe("try_acquire on a busy lock", function()
  it("returns nil, 'timeout' and the holder's remaining TTL", function()
    local holder, other = assert(helper.client()), assert(helper.client())
    local name = helper.unique_name("busy")
    assert(holder:lock(name):acquire{ lease = 20 })
    local ok, err, ttl = other:lock(name):try_acquire()
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_number(ttl)
    assert.is_true(ttl > 15 and ttl <= 20, "ttl " .. tostring(ttl))
    -- The same from a wait that ran out, as of its last attempt.
    ok, err, ttl = other:lock(name):acquire{ wait = 0.1 }
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_true(ttl > 15 and ttl <= 20, "ttl " .. tostring(ttl))
    holder:close()
    other:close()
  end)

  it("returns two values when it gets the lock or fails otherwise", function()
    local c = assert(helper.client())
    local lock = c:lock(helper.unique_name("free"))
    assert.equals(1, select("#", lock:try_acquire()))
    lock:release()
    c:close()
  end)
end)

describe("credentials", function()
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

  -- Issue 27, item 3: userinfo ends at the last '@' (a password may hold
  -- '/', '?', ':' or '@'), and no error quotes any part of it.
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

describe("error messages", function()
  local client, lock
  lazy_setup(function()
    client = assert(helper.client())
    lock = client:lock(helper.unique_name())
  end)
  lazy_teardown(function() client:close() end)

  local function message(f, ...)
    local ok, err = pcall(f, ...)
    assert.is_false(ok)
    return err
  end

  it("name dlock.connect and the part of the URL that is wrong", function()
    local rows = {
      { "redis://127.0.0.1:ab", "port 'ab' is not a whole number from 1 to 65535" },
      { "redis://127.0.0.1:99999", "port '99999'" },
      { "redis://127.0.0.1:6379/x", "db 'x' is not a whole number" },
      { "redis://127.0.0.1:6379?timeout=1", "unknown query parameter 'timeout'" },
      { "redis://127.0.0.1:6379?db=z", "db 'z'" },
      { "unix:///tmp/r.sock?dbb=1", "unknown query parameter 'dbb'" },
      { "http://127.0.0.1", "scheme 'http' is not known" },
      { "127.0.0.1:6379", "scheme '127.0.0.1' is not known" },
      { "localhost", "no scheme" },
      { "redis://[::1:6379", "closing ']'" },
      { "redis://:%zz@127.0.0.1", "password has a bad %-escape" },
      { "unix://relative.sock", "absolute socket path" },
    }
    for _, row in ipairs(rows) do
      local ok, err = pcall(dlock.connect, { url = row[1], connect_timeout = 0.2 })
      if row[2] then
        assert.is_false(ok, row[1])
        assert.matches("bad option 'url' to 'dlock.connect' (bad URL: ", err, 1, true)
        assert.matches(row[2], err, 1, true)
        -- and as the string argument
        err = message(dlock.connect, row[1])
        assert.matches("bad argument #1 to 'dlock.connect' (bad URL: ", err, 1, true)
        assert.matches(row[2], err, 1, true)
      else
        assert.is_true(ok, row[1])
      end
    end
    local err = message(dlock.connect, { servers = { "redis://127.0.0.1:1", "redis://127.0.0.1:0" } })
    assert.matches("bad option 'servers' to 'dlock.connect' (bad URL in the list: port '0'", err, 1, true)
  end)

  it("report positional arguments as arguments, numbered as written", function()
    assert.matches("bad argument #1 to 'extend' (number of seconds expected, got string)",
                   message(lock.extend, lock, "x"), 1, true)
    assert.matches("bad argument #1 to 'extend' (negative duration)",
                   message(lock.extend, lock, -1), 1, true)
    assert.matches("bad argument #1 to 'acquire' (options table expected, got number)",
                   message(lock.acquire, lock, 5), 1, true)
    assert.matches("bad argument #2 to 'lock' (options table expected",
                   message(client.lock, client, "x", 5), 1, true)
    assert.matches("bad argument #1 to 'lock' (lock name (a string) expected, got number)",
                   message(client.lock, client, 5), 1, true)
    assert.matches("bad argument #2 to 'with' (function expected, got number)",
                   message(client.with, client, "x", 5), 1, true)
    assert.matches("bad argument #3 to 'with' (function expected, got nil)",
                   message(client.with, client, "x", {}), 1, true)
    assert.matches("bad argument #2 to 'with' (function expected, got nil)",
                   message(lock.with, lock, {}), 1, true)
    assert.matches("bad argument #1 to 'dlock.sleep'", message(dlock.sleep, -1), 1, true)
    assert.matches("calling 'acquire' on bad self (dlock.Lock expected, got number)",
                   message(lock.acquire, 5), 1, true)
    assert.matches("calling 'ping' on bad self (dlock.Client expected, got table)",
                   message(client.ping, {}), 1, true)
  end)

  it("point at the caller's line, never into dlock.lua", function()
    local cases = {
      function() dlock.connect{ lease = -1 } end,
      function() dlock.connect{ lease = -1, scheduler = { wait = print } } end,
      function() lock:acquire{ wait = -1 } end,
      function() lock:with({ wait = -1 }, print) end,
      function() client:with("x", 5) end,
    }
    for i, f in ipairs(cases) do
      local err = message(f)
      assert.matches("^spec/firstuse_spec%.lua:%d+: bad ", err, nil, false, "case " .. i)
    end
  end)

  it("never name an internal module, nor '?' for the function", function()
    local calls = {
      function() dlock.connect(true) end,
      function() dlock.connect("redis://x:y") end,
      function() dlock.connect{ url = "redis://x:y" } end,
      function() dlock.connect{ lease = -1 } end,
      function() dlock.connect{ url = "redis://a", servers = {} } end,
      function() dlock.sleep("x") end,
      function() client:lock() end,
      function() client:lock("") end,
      function() client:lock("x", 5) end,
      function() client:lock("x", { wiat = 1 }) end,
      function() lock:acquire(5) end,
      function() lock:acquire{ wait = -1 } end,
      function() lock:extend() end,
      function() lock:extend("x") end,
      function() lock:with(5) end,
      function() client:with("x", 5) end,
    }
    local direct = { dlock.connect, client.lock, lock.acquire, lock.extend,
                     lock.release, client.ping }
    for i, f in ipairs(calls) do
      local err = message(f)
      assert.is_nil(err:find("dlock.core", 1, true), err)
      assert.is_nil(err:find("'?'", 1, true), err)
      assert.matches("bad [aso]", err, nil, false, "call " .. i)
    end
    for _, f in ipairs(direct) do                 -- called through pcall: no call site
      local err = message(f, 42)
      assert.is_nil(err:find("dlock.core", 1, true), err)
      assert.is_nil(err:find("'?'", 1, true), err)
    end
  end)
end)

describe("with", function()
  it("takes options on the lock as on the client", function()
    local c = assert(helper.client())
    local name = helper.unique_name("with")
    local holder = assert(helper.client())
    assert(holder:lock(name):acquire())
    local lock = c:lock(name)
    local ran = false
    local ok, err = lock:with({ wait = 0.1 }, function() ran = true end)
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_false(ran)
    ok, err = c:with(name, { wait = 0.1 }, function() ran = true end)
    assert.is_nil(ok)
    assert.equals("timeout", err)
    assert.is_false(ran)
    holder:close()
    assert.same({ true, "a", 3 }, { lock:with({ wait = 1, expire = 5 }, function(x, y)
      assert.is_true(lock:ttl() <= 5)
      return x, y
    end, "a", 3) })
    -- a callable table is fn, not options
    local callable = setmetatable({}, { __call = function(_, x) return x * 2 end })
    assert.same({ true, 8 }, { lock:with(callable, 4) })
    c:close()
  end)
end)

describe("leases", function()
  it("'expire' is a fixed lifetime, never renewed; 'lease' is its old name", function()
    local c = assert(helper.client())
    for _, key in ipairs({ "expire", "lease" }) do
      local lock = c:lock(helper.unique_name("fixed"), { [key] = 0.3 })
      assert(lock:acquire())
      assert.is_true(lock:ttl() <= 0.3)
      dlock.sleep(0.6)
      assert.is_nil(lock:ttl())
      local ok, err = lock:release()
      assert.is_nil(ok)
      assert.matches("^lost", err)
    end
    assert.error_matches(function() c:lock("x", { expire = 1, lease = 1 }) end,
                         "'lease' is the old name of 'expire'")
    assert.error_matches(function() c:lock("x"):acquire{ expire = 1, watchdog_lease = 1 } end,
                         "not both")
    assert.error_matches(function() c:lock("x", { watchdog_lease = 0 }) end,
                         "'watchdog_lease'.*positive")
    c:close()
  end)

  it("'watchdog_lease' renews one lock on its own lease, beside the client's", function()
    local c = assert(helper.client{ lease = 30 })
    local short = c:lock(helper.unique_name("short"), { watchdog_lease = 0.6 })
    local long = c:lock(helper.unique_name("long"))
    assert(short:acquire())
    assert(long:acquire())
    local before = c:stats().renewed
    dlock.sleep(1.5)                              -- 2.5 leases of the short one
    assert.is_true(short:held())
    local ttl = short:ttl()
    assert.is_true(ttl > 0 and ttl <= 0.6, "ttl " .. tostring(ttl))
    assert.is_true(long:ttl() > 25)
    assert.is_true(c:stats().renewed - before >= 2)
    -- A reentry keeps the hold's own lease; a per-call one works too.
    assert(short:acquire())
    assert.is_true(short:ttl() <= 0.6)
    assert.same({ true, 1 }, { short:release() })
    assert.same({ true, 0 }, { short:release() })
    local l3 = c:lock(helper.unique_name("call"))
    assert(l3:acquire{ watchdog_lease = 0.6 })
    dlock.sleep(1)
    assert.is_true(l3:held())
    assert.is_true(l3:ttl() <= 0.6)
    l3:release()
    c:close()
  end)
end)

describe("process exit", function()
  local script = [[
    local dlock = require "dlock"
    local c = assert(dlock.connect(arg[1]))
    assert(c:lock(arg[2]):acquire())
    assert(c:lock(arg[3], { lease = 60 }):acquire())
    local explicit = c:lock(arg[4], { owner = "job" })
    assert(explicit:acquire()); assert(explicit:acquire())
    print("held")
    os.exit(0)                  -- no close, no __gc
  ]]

  it("releases what a client still holds when the program calls os.exit", function()
    local srv = helper.redis()
    local a, b, e = helper.unique_name("exit-a"), helper.unique_name("exit-b"),
                    helper.unique_name("exit-e")
    local ok, out = helper.run_lua(script, srv.url, a, b, e)
    assert.is_true(ok, out)
    assert.matches("held", out)
    for _, name in ipairs({ a, b, e }) do
      assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"), name)
    end
  end)

  it("leaves a parent's holds alone when a forked child exits #fork", function()
    local ok, forktest = pcall(require, "forktest")
    if not ok then pending("forktest.so not built") return end
    local srv = helper.redis()
    local c = assert(helper.client())
    local name = helper.unique_name("fork-exit")
    local lock = c:lock(name)
    assert(lock:acquire())
    io.stdout:flush(); io.stderr:flush()         -- nothing for the child to write twice
    local pid = forktest.fork()
    if pid == 0 then os.exit(0) end              -- the child ends through exit(), state open
    forktest.wait(pid)
    assert.is_false(helper.is_free(srv, "dlock:{" .. name .. "}"))
    assert.is_true(lock:held())
    assert.same({ true, 0 }, { lock:release() })
    c:close()
  end)
end)

describe("the reference", function()
  -- Every public function, with what it returns, is in doc/reference.md.
  local doc = assert(helper.read_file("doc/reference.md"))

  it("documents every module function, client method and lock method", function()
    local c = assert(helper.client())
    local lock = c:lock("x")
    local names = {}
    for k, v in pairs(dlock) do
      if type(v) == "function" then names[#names + 1] = "dlock." .. k end
    end
    names[#names + 1] = "dlock._VERSION"
    local core = require "dlock.core"
    -- (names starting with _ are the module's own, between its halves)
    for k in pairs(core.Client) do
      if not k:match("^_") then names[#names + 1] = "client:" .. k end
    end
    for k in pairs(core.Lock) do
      if not k:match("^_") then names[#names + 1] = "lock:" .. k end
    end
    assert.is_true(#names >= 20)
    for _, n in ipairs(names) do
      local pat = n:gsub("%p", "%%%0")
      assert.matches("`" .. pat .. "[%(`]", doc, nil, false, n .. " is not documented")
    end
    assert.matches("re%-raises the error", doc)
    c:close()
  end)
end)
