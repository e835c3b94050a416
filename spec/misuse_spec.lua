-- Misuse raises an error that names the bad argument; nothing crashes.
local dlock = require "dlock"
local helper = require "helper"

describe("bad input #binding", function()
  local client, lock

  lazy_setup(function()
    client = assert(helper.client())
    lock = client:lock(helper.unique_name())
  end)
  lazy_teardown(function() client:close() end)

  local nan, inf = 0 / 0, math.huge

  local rows = {
    { "connect(true)",              function() dlock.connect(true) end, "bad argument #1 to 'dlock.connect'" },
    { "connect(42)",                function() dlock.connect(42) end, "bad argument #1 to 'dlock.connect'" },
    { "connect bad scheme",         function() dlock.connect("http://x") end, "bad URL" },
    { "connect bad port",           function() dlock.connect("redis://127.0.0.1:99999") end, "bad URL" },
    { "connect port not a number",  function() dlock.connect("redis://127.0.0.1:ab") end, "bad URL" },
    { "connect bad db",             function() dlock.connect("redis://127.0.0.1:6379/x") end, "bad URL" },
    { "connect bad escape",         function() dlock.connect("redis://:%zz@127.0.0.1") end, "bad URL" },
    { "connect NUL in URL",         function() dlock.connect("redis://127.0.0.1\0:1") end, "bad URL" },
    { "connect unknown option",     function() dlock.connect{ url = helper.url(), leese = 1 } end, "unknown option" },
    { "connect two topologies",     function() dlock.connect{ url = "redis://a", servers = {} } end, "only one of" },
    { "connect lease NaN",          function() dlock.connect{ lease = nan } end, "'lease'.*NaN" },
    { "connect lease negative",     function() dlock.connect{ lease = -1 } end, "'lease'.*negative" },
    { "connect lease zero",         function() dlock.connect{ lease = 0 } end, "'lease'.*positive" },
    { "connect lease infinite",     function() dlock.connect{ lease = inf } end, "'lease'.*too large" },
    { "connect lease string",       function() dlock.connect{ lease = "5" } end, "'lease'.*number" },
    { "connect timeout negative",   function() dlock.connect{ connect_timeout = -1 } end, "'connect_timeout'" },
    { "connect timeout huge",       function() dlock.connect{ command_timeout = 1e300 } end, "'command_timeout'" },
    { "connect db negative",        function() dlock.connect{ db = -1 } end, "'db'" },
    { "connect db fraction",        function() dlock.connect{ db = 1.5 } end, "'db'" },
    { "connect on_lost not fn",     function() dlock.connect{ on_lost = 1 } end, "'on_lost'" },
    { "connect prefix not string",  function() dlock.connect{ prefix = {} } end, "'prefix'" },
    { "connect master w/o sentinels", function() dlock.connect{ master = "m" } end, "'master'" },
    { "lock(nil)",                  function() client:lock() end, "bad argument #1 to 'lock'" },
    { "lock(42)",                   function() client:lock(42) end, "bad argument #1 to 'lock'" },
    { "lock('')",                   function() client:lock("") end, "must not be empty" },
    { "lock unknown option",        function() client:lock("x", { wiat = 1 }) end, "'wiat'.*unknown option" },
    { "lock opts not table",        function() client:lock("x", 5) end, "options table" },
    { "lock owner empty",           function() client:lock("x", { owner = "" }) end, "'owner'" },
    { "lock owner number",          function() client:lock("x", { owner = 5 }) end, "'owner'" },
    { "lock owner with a NUL byte", function() client:lock("x", { owner = "job\0r" }) end,
      "'owner'.*NUL" },
    { "rwlock owner with a NUL byte", function() client:rwlock("x", { owner = "a\0" }) end,
      "'owner'.*NUL" },
    { "lock owner in a coroutine owner's form", function()
        client:lock("x", { owner = ("ab"):rep(16) .. ":7" }) end, "'owner'.*coroutine" },
    { "fair_lock owner in a coroutine owner's form", function()
        client:fair_lock("x", { owner = ("0f"):rep(16) .. ":12" }) end, "'owner'.*coroutine" },
    { "process.spawn with a number in argv", function()      -- (a converted number
        require("dlock.process").spawn({ "echo", 1 }, {}) end, "array of strings" },  -- is collectable)
    { "process.spawn with a number in env", function()
        require("dlock.process").spawn({ "echo" }, { 1 }) end, "array of strings" },
    { "lock called on a non-client", function() client.lock({}, "x") end, "dlock.Client expected" },
    { "acquire unknown option",     function() lock:acquire{ wiat = 1 } end, "'wiat'.*unknown option" },
    { "acquire wait NaN",           function() lock:acquire{ wait = nan } end, "'wait'.*NaN" },
    { "acquire wait negative",      function() lock:acquire{ wait = -1 } end, "'wait'.*negative" },
    { "acquire lease negative",     function() lock:acquire{ lease = -1 } end, "'lease'.*negative" },
    { "acquire lease NaN",          function() lock:acquire{ lease = nan } end, "'lease'.*NaN" },
    { "acquire lease infinite",     function() lock:acquire{ lease = inf } end, "'lease'.*too large" },
    { "acquire lease huge",         function() lock:acquire{ lease = 1e300 } end, "'lease'.*too large" },
    { "acquire lease zero",         function() lock:acquire{ lease = 0 } end, "'lease'.*positive" },
    { "acquire opts not table",     function() lock:acquire(5) end, "options table" },
    { "acquire on a non-lock",      function() lock.acquire({}) end, "dlock.Lock expected" },
    { "try_acquire with wait",      function() lock:try_acquire{ wait = 1 } end, "'wait'" },
    { "extend without seconds",     function() lock:extend() end, "bad argument #1 to 'extend'" },
    { "extend NaN",                 function() lock:extend(nan) end, "NaN" },
    { "extend negative",            function() lock:extend(-5) end, "negative" },
    { "with without fn",            function() lock:with(42) end, "bad argument #1 to 'with'" },
    { "release on a non-lock",      function() lock.release("x") end, "dlock.Lock expected" },
  }

  for _, row in ipairs(rows) do
    it("raises for " .. row[1], function()
      assert.error_matches(row[2], row[3])
    end)
  end

  it("leaves a held lock intact after misuse", function()
    assert(lock:acquire())
    for _, row in ipairs(rows) do pcall(row[2]) end
    assert.is_true(lock:held())
    assert.equals(1, lock:count())
    assert.same({ true, 0 }, { lock:release() })
  end)

  it("raises 'closed' from every method once the client is closed", function()
    local c = assert(helper.client())
    local l = c:lock("x")
    c:close()
    local calls = {
      function() c:lock("y") end, function() c:with("y", print) end,
      function() c:ping() end, function() c:poll() end, function() c:stats() end,
      function() l:acquire() end, function() l:try_acquire() end,
      function() l:release() end, function() l:with(print) end,
      function() l:held() end, function() l:count() end, function() l:ttl() end,
      function() l:token() end, function() l:extend(1) end,
      function() l:force_release() end,
    }
    for i, f in ipairs(calls) do
      assert.error_matches(f, "closed", nil, "call " .. i)
    end
    c:close()                                     -- still idempotent
    assert.matches("not held", tostring(l))
  end)

  it("closes safely while a suspended coroutine holds a lock", function()
    local c = assert(helper.client())
    local name = helper.unique_name()
    local l = c:lock(name)
    local co = coroutine.wrap(function()
      assert(l:acquire())
      coroutine.yield()
      return pcall(l.release, l)
    end)
    co()
    c:close()
    local ok, err = co()
    assert.is_false(ok)
    assert.matches("closed", err)
    local probe = assert(helper.client())
    assert.is_nil(probe:lock(name):ttl())         -- close released it
    probe:close()
  end)

  it("survives 3,000 random option tables (property test)", function()
    math.randomseed(4242)
    local values = { 0, -1, 1, 0.001, 1e300, -1e300, 0 / 0, math.huge, -math.huge,
      2^53, 2^63, math.mininteger or -2^63, "", "x", "1", {}, { "redis://127.0.0.1:1" },
      { 1, 2 }, true, false, print, coroutine.create(function() end) }
    local keys = { "url", "servers", "sentinels", "master", "cluster", "prefix",
      "lease", "connect_timeout", "command_timeout", "username", "password", "db",
      "on_lost", "max_hold", "sync_replicas", "sync_timeout", "wait", "owner", 1, "" }
    local function random_table(n)
      local t = {}
      for _ = 1, n do t[keys[math.random(#keys)]] = values[math.random(#values)] end
      return t
    end
    for _ = 1, 1000 do
      -- connect: whatever the options, it raises or fails; it never reaches
      -- anything but a refused loopback port
      local o = random_table(math.random(0, 4))
      if o.url ~= nil or (o.servers == nil and o.sentinels == nil and o.cluster == nil) then
        o.url = "redis://127.0.0.1:1"
      end
      for _, k in ipairs{ "servers", "sentinels", "cluster" } do
        if type(o[k]) == "table" then o[k] = { "redis://127.0.0.1:1" } end
      end
      o.connect_timeout = 0.05
      local ok, c, err = pcall(dlock.connect, o)
      if ok then
        assert.is_nil(c)
        assert.matches("^%a", err)
      end
      -- lock and acquire options on a live client
      local lo = random_table(math.random(0, 3))
      local okl, l = pcall(client.lock, client, "p", lo)
      if okl then
        local oka, got = pcall(l.try_acquire, l, random_table(math.random(0, 2)))
        if oka and got then l:release() end         -- a tiny lease may be lost
      end
    end
    assert.is_true(client:ping())
    assert.equals(0, lock:count())
  end)

  it("accepts wait = math.huge as forever", function()
    assert(lock:acquire{ wait = math.huge })
    assert(lock:release())
  end)

  it("accepts owners near a coroutine owner's form, and holds with them", function()
    local hex = ("ab"):rep(16)
    for _, o in ipairs({ hex .. ":", hex .. ":7x", hex:sub(2) .. ":1", hex .. "a:1",
                         ("ag"):rep(16) .. ":1", hex .. "|1", "x" .. hex .. ":1" }) do
      local l = client:lock(helper.unique_name("near"), { owner = o })
      assert(l:acquire())
      assert.same({ true, 0 }, { l:release() })
    end
  end)

  -- An __index may answer every read anew, and let the string it gave
  -- before be collected: each option is read once, and
  -- what it answered is kept while the call runs.
  it("reads each option of a table with an __index once, and keeps what it gave", function()
    local reads, url = {}, helper.url()
    local function answer(tab)
      return setmetatable({}, { __index = function(_, k)
        reads[k] = (reads[k] or 0) + 1
        collectgarbage()
        local v = tab[k]
        if type(v) == "string" then v = (v .. "!"):sub(1, -2) end  -- a fresh string
        if type(v) == "table" and reads[k] > 1 then v = "not a list any more" end
        return v
      end })
    end
    local c = assert(dlock.connect(answer{ url = url, prefix = "idx:", label = "by-index" }))
    assert.equals(1, reads.url)
    assert.equals(1, reads.prefix)
    local l = c:lock(helper.unique_name("idx"), answer{ owner = "job-7", wait = 1 })
    assert.equals(1, reads.owner)
    assert(l:acquire())
    assert.equals("job-7", c:inspect(l.name).owners[1].owner)
    assert(l:release())
    c:close()
    -- with a scheduler, whose table dlock.lua copies: defaults kept
    local defaults = { url = url, label = "from-defaults" }
    c = assert(dlock.connect(setmetatable({ scheduler = { wait = function() end } }, { __index = defaults })))
    assert(c:ping())
    c:close()
    reads = {}                             -- a list that would turn into a string
    local ok, err = pcall(dlock.connect, answer{ servers = { url } })
    assert.equals(1, reads.servers)
    if ok then err:close() else assert.matches("servers", err) end
  end)

  it("accepts a 1 MB binary name", function()
    local big = client:lock(string.rep("\0\255x", 350000))
    assert(big:acquire())
    assert.equals(1, big:count())
    assert(big:release())
  end)

  it("accepts a long name and owner on each kind (their keys are built per call)", function()
    local name, owner = helper.unique_name() .. ("n"):rep(3000), ("o"):rep(2000)
    local l = client:lock(name, { owner = owner })
    assert(l:acquire())
    assert(l:acquire())
    assert.equals(2, l:count())
    assert.truthy(tostring(l):find("held x2", 1, true))
    assert.equals(2, client:lock(name, { owner = owner }):count())   -- the same hold
    assert.equals(0, client:lock(name, { owner = owner .. "!" }):count())
    assert(l:release())
    assert(l:release())
    assert.is_nil(l:ttl())
    local rw = client:rwlock(name, { owner = owner })
    assert(rw.write:acquire())
    assert(rw.read:acquire())                       -- its own writer's: a downgrade
    assert.equals(1, rw.read:count())
    assert(rw.read:release())
    assert(rw.write:release())
    local f = client:fair_lock(name .. ":fair")
    assert(f:acquire())
    assert.is_true(f:held())
    assert(f:release())
  end)
end)

describe("error messages #binding", function()
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

  it("name the function the user called, whatever it calls inside", function()
    local multi = client:multi_lock{ helper.unique_name("m1"), helper.unique_name("m2") }
    local sem = client:semaphore(helper.unique_name("sem"), 1)
    local rows = {
      { function() client:fair_lock("x", { wiat = 1 }) end, "bad option 'wiat' to 'fair_lock' (unknown option)" },
      { function() client:fair_lock("x", 5) end, "bad argument #2 to 'fair_lock' (options table expected" },
      { function() client:fair_lock("x", { wait = -1 }) end, "bad option 'wait' to 'fair_lock' (negative duration)" },
      { function() client:rwlock("x", { expire = 0 }) end, "bad option 'expire' to 'rwlock'" },
      { function() client:rwlock(42) end, "bad argument #1 to 'rwlock' (lock name" },
      { function() client:with(42, print) end, "bad argument #1 to 'with' (lock name" },
      { function() client:with("x", { wait = -1 }, print) end, "bad option 'wait' to 'with' (negative duration)" },
      { function() client:with("x", { wiat = 1 }, print) end, "bad option 'wiat' to 'with' (unknown option)" },
      { function() lock:with({ wait = -1 }, print) end, "bad option 'wait' to 'with' (negative duration)" },
      { function() lock:with({ expire = 1, watchdog_lease = 1 }, print) end, "bad option 'watchdog_lease' to 'with'" },
      { function() client:multi_lock({ "a" }, { wiat = 1 }) end, "bad option 'wiat' to 'multi_lock' (unknown option)" },
      { function() client:multi_lock({ "a" }, 5) end, "bad argument #2 to 'multi_lock' (options table expected" },
      { function() multi:acquire{ wait = -1 } end, "bad option 'wait' to 'acquire' (negative duration)" },
      { function() multi:try_acquire(5) end, "bad argument #1 to 'try_acquire' (options table expected, got number)" },
      { function() multi:try_acquire{ wiat = 1 } end, "bad option 'wiat' to 'try_acquire' (unknown option)" },
      { function() multi:with({ wait = -1 }, print) end, "bad option 'wait' to 'with' (negative duration)" },
      { function() sem:acquire(5) end, "bad argument #1 to 'acquire' (options table expected, got number)" },
      { function() sem:acquire{ expire = "z" } end, "bad option 'expire' to 'acquire' (number of seconds expected" },
    }
    for i, row in ipairs(rows) do
      local err = message(row[1])
      assert.matches("^spec/misuse_spec%.lua:%d+: ", err, nil, false, "row " .. i)
      assert.matches(row[2], err, 1, true, "row " .. i)
    end
    -- a write half whose owner holds the read half, by try_acquire
    local rw = client:rwlock(helper.unique_name("up"))
    assert(rw.read:acquire())
    assert.matches("calling 'try_acquire' on a write lock whose owner holds its read lock",
                   message(rw.write.try_acquire, rw.write), 1, true)
    assert(rw.read:release())
    -- and on a closed client
    local c = assert(helper.client())
    local l, s = c:lock("y"), c:semaphore(helper.unique_name("sem"), 1)
    c:close()
    assert.matches("calling 'with' on bad self (client is closed)", message(c.with, c, "y", print), 1, true)
    assert.matches("calling 'with' on bad self (client is closed)", message(l.with, l, print), 1, true)
    assert.matches("calling 'multi_lock' on bad self (client is closed)",
                   message(c.multi_lock, c, { "y" }), 1, true)
    assert.matches("calling 'acquire' on bad self (client is closed)", message(s.acquire, s), 1, true)
  end)

  it("point at the caller's line, never into dlock.lua", function()
    local cases = {
      function() dlock.connect{ lease = -1 } end,
      function() dlock.connect{ lease = -1, scheduler = { wait = print } } end,
      function() lock:acquire{ wait = -1 } end,
      function() lock:with({ wait = -1 }, print) end,
      function() client:with("x", 5) end,
      -- raised in the core under the Lua half's other files
      function() client:semaphore("s", 1):acquire{ wait = -1 } end,
      function() client:multi_lock{ "a", "b" }:acquire{ wait = -1 } end,
      function() client:multi_lock{ "a", "b" }:with({ lease = "z" }, print) end,
    }
    for i, f in ipairs(cases) do
      local err = message(f)
      assert.matches("^spec/misuse_spec%.lua:%d+: bad ", err, nil, false, "case " .. i)
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

describe("the step of a waiting acquire (lock:_step, the scheduler's path) #binding", function()
  -- _step dropped its step object from the stack before
  -- the calls that may run a GC (on_lost callbacks, allocations), so a
  -- step passed as a temporary could be collected while in use. Here an
  -- on_lost callback collects garbage as _step starts; under ASan (make
  -- asan) a use after free stops the run.
  it("keeps the step alive while it runs, when a callback collects garbage", function()
    local holder = assert(helper.client())
    local calls = 0
    local waiter = assert(helper.client{ lease = 0.6, on_lost = function()
      calls = calls + 1
      collectgarbage(); collectgarbage()
    end })
    local name, other = helper.unique_name("step"), helper.unique_name("forced")
    assert(holder:lock(name):acquire())
    local l = waiter:lock(name)
    for round = 1, 2 do
      assert(waiter:lock(other):acquire())     -- gone: on_lost pends
      helper.redis().cli("del", "dlock:{" .. other .. "}")
      -- A renewal (every 0.2 s) finds it lost; only _step runs the
      -- callback (no other call of waiter's is made meanwhile).
      local deadline = dlock.now() + 15
      while calls < round and dlock.now() < deadline do
        local done, a = l:_step(l:_acquire_step{ wait = 0.05 })  -- a temporary
        assert.is_false(done)
        assert.is_true(a == nil or type(a) == "number")
        dlock.sleep(0.05)
      end
      assert.equals(round, calls)
    end
    holder:close(); waiter:close()
  end)
end)
