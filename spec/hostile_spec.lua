-- Hostile servers: a fake RESP server (spec/support/fakeredis.lua)
-- answers each script, each set-up command, Sentinel and Cluster with
-- malformed replies of every shape, so that dlock's decoders run on them
-- in this process (under `make asan` too). What must hold for each:
--   * the process does not crash (nor does ASan or UBSan report);
--   * the call returns nil, err (err starting with an error code), or a
--     value that the reply really means; never a lock reported held from
--     a malformed reply;
--   * the client still works for the next call.
-- Every call is bounded by a short command_timeout; each fake server is
-- stopped in teardown (and dies with this process in any case). The fake
-- servers run under lua5.4 with cqueues whatever Lua runs this spec (see
-- spec/support/fakeredis.lua); the calls under test run here, in this process.
require "compat"
local dlock = require "dlock"
local helper = require "helper"
local fake = require "fakeredis"
local R = fake

-- Under valgrind (and ThreadSanitizer) this process is far slower: longer
-- bounds, and under valgrind a sample of the shapes only (thin).
local VALGRIND = os.getenv("DLOCK_VALGRIND") ~= nil
local TSAN = (os.getenv("DLOCK_BUILD") or ""):find("tsan", 1, true) ~= nil
local T = VALGRIND and 1.5 or TSAN and 0.5 or 0.2   -- connect and command timeout
local BOUND = 10 * T + 1                      -- "it did not hang": a generous bound
local function thin(list)
  if not VALGRIND then return list end
  local out = {}
  for i = 1, #list, 5 do out[#out + 1] = list[i] end
  return out
end

local INT64_MAX, INT64_MIN = "9223372036854775807", "-9223372036854775808"
local CODES = { "timeout", "not held", "lost", "connection", "quorum", "redis" }

local function show(r)
  local t = {}
  for i = 1, r.n do t[i] = tostring(r[i]) end
  return "(" .. table.concat(t, ", ") .. ")"
end

--- r (a table.pack of a call's results) is nil, err with a known code.
local function assert_fails(r, what)
  local err = r[2]
  local ok = r[1] == nil and type(err) == "string"
  if ok then
    ok = false
    for _, c in ipairs(CODES) do
      if err:sub(1, #c) == c then ok = true end
    end
  end
  assert(ok, (what or "call") .. " should return nil, err; got " .. show(r))
  return err
end

local function elapsed(f)
  local t0 = dlock.now()
  local r = table.pack(f())
  return dlock.now() - t0, r
end

local function connect(url, extra)
  local o = { url = url, connect_timeout = T, command_timeout = T, lease = 1 }
  for k, v in pairs(extra or {}) do o[k] = v end
  if o.sentinels or o.cluster or o.servers then o.url = nil end
  return dlock.connect(o)
end

--- The client still works: a ping and a lock of a name no rule touches.
local function assert_works(c, tag)
  local r = table.pack(c:ping())
  assert(r[1] == true, "ping after the hostile reply: " .. show(r))
  local l = c:lock("ok:" .. tag)
  r = table.pack(l:acquire{ wait = 0 })
  assert(r[1] == l, "acquire after the hostile reply: " .. show(r))
  r = table.pack(l:release())
  assert(r[1] == true, "release after the hostile reply: " .. show(r))
end

-- ---- the shapes -------------------------------------------------------

-- Replies that are malformed whatever script or command they answer.
-- `redirect` shapes get the port of a recorder server that must never be
-- connected to; `slow` ones cost a command timeout; `wire` ones fail in
-- the reply parser (hiredis) or the link, before any decoder of dlock's:
-- the same for every call, so only a few calls get them.
local function shapes(other)
  local list = {
    { "a nil bulk string", R.nil_bulk },
    { "a nil array", R.nil_array },
    { "an empty array", R.empty_array },
    { "a status reply", R.status("OK") },
    { "a bulk string", R.bulk("1") },
    { "an empty bulk string", R.bulk("") },
    { "an array nested 1000 deep", R.nest(1000, R.int(1)) },
    { "an array nested 3 deep", R.nest(3, R.ints(1, 1, 7)) },
    { "arrays where integers belong", R.arr{ R.ints(1), R.ints(1), R.ints(7) } },
    { "strings where integers belong", R.arr{ R.bulk("1"), R.bulk("1"), R.bulk("7") } },
    { "status replies where integers belong", R.arr{ R.status("1"), R.status("1"), R.status("7") } },
    { "nils where integers belong", R.arr{ R.nil_bulk, R.nil_bulk, R.nil_bulk } },
    { "errors inside an array", R.arr{ R.err("ERR a"), R.err("ERR b"), R.err("ERR c") } },
    { "huge integers (INT64_MAX)", R.ints(INT64_MAX, INT64_MAX, INT64_MAX) },
    { "huge negative integers (INT64_MIN)", R.ints(INT64_MIN, INT64_MIN, INT64_MIN) },
    { "integers past INT64_MAX", R.ints("99999999999999999999", "1", "-99999999999999999999") },
    { "the integer 2 in an array", R.ints(2, 2, 2, 2) },
    { "an error (-ERR x)", R.err("ERR x") },
    { "an empty error", "-\r\n" },
    { "an error with printf directives", R.err("ERR %s%s%n%p%x %999999999d") },
    { "a 5000-byte error", R.err("ERR " .. string.rep("e", 5000)) },
    { "-NOSCRIPT", R.err("NOSCRIPT No matching script. Please use EVAL.") },
    { "-READONLY", R.err("READONLY You can't write against a read only replica.") },
    { "-TRYAGAIN", R.err("TRYAGAIN Multiple keys request during rehashing of slot") },
    { "-NOAUTH", R.err("NOAUTH Authentication required.") },
    { "-WRONGPASS", R.err("WRONGPASS invalid username-password pair or user is disabled.") },
    { "-LOADING", R.err("LOADING Redis is loading the dataset in memory") },
    { "-BUSY", R.err("BUSY Redis is busy running a script.") },
    { "-MASTERDOWN", R.err("MASTERDOWN Link with MASTER is down") },
    { "-MOVED to another address", R.err("MOVED 1234 127.0.0.1:" .. other.port), redirect = "MOVED" },
    { "-ASK to another address", R.err("ASK 1234 127.0.0.1:" .. other.port), redirect = "ASK" },
    { "-MOVED without an address", R.err("MOVED 1234"), redirect = "MOVED" },
    { "-ASK with slot 99999", R.err("ASK 99999 127.0.0.1:" .. other.port), redirect = "ASK" },
    { "garbage that is not RESP", "hello, I am not Redis\r\n" },
    { "binary garbage", "\0\1\2\255\254\r\n\r\n", wire = true },
    { "a bare CRLF", "\r\n", wire = true },
    { "a negative bulk length", "$-5\r\n", wire = true },
    { "a negative array length", "*-5\r\n", wire = true },
    { "a bulk length that is not a number", "$abc\r\nxyz\r\n", wire = true },
    { "an integer that is not a number", ":12abc\r\n" },
    { "a reply cut short, then close", { raw = "*3\r\n:1\r\n:1", close = true } },
    { "a bulk string cut short, then close", { raw = "$10\r\nabc", close = true }, wire = true },
    { "no reply, then close", { raw = "", close = true }, wire = true },
    { "a 100 MB bulk string that never arrives", { raw = "$104857600\r\n", hang = true }, slow = true },
    { "an array of 1000000 that never arrives", { raw = "*1000000\r\n:1\r\n", hang = true }, slow = true },
    { "half a reply, then nothing", { raw = "*3\r\n:1\r\n", hang = true }, slow = true },
    { "no reply at all", { raw = "", hang = true }, slow = true },
  }
  for _, shape in ipairs(list) do       -- replies of the wrong value, well parsed
    if shape[1] == "an error (-ERR x)" then break end
    shape.value = true
  end
  return list
end

-- ---- scripts and the calls that run them --------------------------------

-- Each kind: the script that gets the hostile reply (and `also`: the
-- one-key form a TRYAGAIN falls back to), a call that runs it after
-- `pre` (which runs while every reply is well-formed) and returns the lock
-- object, if any, then the call's results; `after` tidies up.
local KINDS = {
  { name = "lock:acquire", script = "acquire", also = "acquire1",
    call = function(c, n) local l = c:lock(n); return l, l:acquire{ wait = 0.1 } end },
  { name = "lock:try_acquire", script = "acquire", also = "acquire1",
    call = function(c, n) local l = c:lock(n); return l, l:try_acquire() end },
  { name = "fair_lock:acquire", script = "fair_acquire", also = "fair_acquire1",
    call = function(c, n) local l = c:fair_lock(n); return l, l:acquire{ wait = 0.1 } end },
  { name = "rwlock.read:acquire", script = "rw_acquire",
    call = function(c, n) local l = c:rwlock(n).read; return l, l:acquire{ wait = 0.1 } end },
  { name = "rwlock.write:acquire", script = "rw_acquire",
    call = function(c, n) local l = c:rwlock(n).write; return l, l:acquire{ wait = 0.1 } end },
  { name = "semaphore:acquire", script = "sem_acquire", also = "sem_acquire1",
    call = function(c, n) return nil, c:semaphore(n, 3):acquire{ wait = 0.1 } end },
  { name = "lock:release", script = "release",
    pre = function(c, n) local l = c:lock(n); assert(l:acquire()); return l end,
    call = function(_, _, l) return l, l:release() end },
  { name = "fair_lock:release", script = "fair_release", also = "fair_release1",
    pre = function(c, n) local l = c:fair_lock(n); assert(l:acquire()); return l end,
    call = function(_, _, l) return l, l:release() end },
  { name = "semaphore:release", script = "sem_release", also = "sem_release1",
    pre = function(c, n) local s = c:semaphore(n, 3); return { s = s, id = assert(s:acquire()) } end,
    call = function(_, _, p) return nil, p.s:release(p.id) end },
  { name = "lock:extend", script = "extend",
    pre = function(c, n) local l = c:lock(n); assert(l:acquire()); return l end,
    call = function(_, _, l) return nil, l:extend(5) end,
    after = function(l) l:release() end },
  { name = "rwlock.read:extend", script = "rw_renew",
    pre = function(c, n) local l = c:rwlock(n).read; assert(l:acquire()); return l end,
    call = function(_, _, l) return nil, l:extend(5) end,
    after = function(l) l:release() end },
  { name = "lock:ttl", script = "ttl",
    call = function(c, n) return nil, c:lock(n):ttl() end },
  { name = "lock:force_release", script = "force",
    call = function(c, n) return nil, c:lock(n):force_release() end },
  { name = "semaphore:available", script = "sem_free",
    call = function(c, n) return nil, c:semaphore(n, 3):available() end },
  { name = "client:inspect", script = "inspect",
    call = function(c, n) return nil, c:inspect(n) end },
}

describe("a server that answers a script with #timing #binding", function()
  local srv, client
  lazy_setup(function() srv = fake.start{} end)
  lazy_teardown(function()
    if client then client:close() end
    fake.stop_all()
  end)
  local function cl()
    if not client then client = assert(connect(srv.url)) end
    return client
  end

  for k, kind in ipairs(KINDS) do
    -- the slow and wire shapes only for the calls that matter most
    local every = kind.name == "lock:acquire" or kind.script == "release" or
                  kind.script == "inspect"
    for i, shape in ipairs(shapes({ port = 1 })) do
      if (every or not (shape.slow or shape.wire)) and (not VALGRIND or i % 5 == k % 5) then
        it(("%s: %s"):format(kind.name, shape[1]), function()
          local c = cl()
          local name = ("hostile:%d:%d:"):format(k, i)
          -- a redirect's address: a server of its own, that records connections
          local other = shape.redirect and fake.start{} or { port = 1 }
          if shape.redirect then finally(other.stop) end
          local reply = shapes(other)[i][2]
          local pre = kind.pre and kind.pre(c, name)
          local rule = { match = name, reply = reply }
          local scripts = { [kind.script] = rule }
          if kind.also then scripts[kind.also] = rule end
          srv.set{ scripts = scripts }
          local t, r = elapsed(function() return kind.call(c, name, pre) end)
          local lock = r[1]
          r = table.pack(table.unpack(r, 2, r.n))
          local err = assert_fails(r, kind.name)
          if lock then
            assert.is_false(lock:held(), "held after a malformed reply")
            assert.equals(0, lock:count())
          end
          assert.is_true(t < BOUND, ("took %.1f s"):format(t))
          srv.set{}
          if kind.after then kind.after(pre) end
          assert_works(c, name)
          if shape.redirect then
            assert.matches(shape.redirect, err, 1, true)
            assert.equals(0, other.accepts(), "connected to the redirect's address")
          end
        end)
      end
    end
  end

  it("fair_lock:release: the PING before it answered with garbage", function()
    local c = cl()
    local l = c:fair_lock("hostile:ping-lead")
    assert(l:acquire())
    srv.set{ commands = { PING = { reply = "garbage\r\n", times = 1 } } }
    local r = table.pack(l:release())
    -- the release itself may have run: true, or an error; never held
    assert(r[1] == true or assert_fails(r), show(r))
    assert.is_false(l:held())
    srv.set{}
    assert_works(c, "ping-lead")
  end)
end)

describe("a well-formed reply with odd values #binding", function()
  local srv, client
  lazy_setup(function()
    srv = fake.start{}
    client = assert(connect(srv.url))
  end)
  lazy_teardown(function() client:close(); fake.stop_all() end)

  local function with(script, name, reply)
    srv.set{ scripts = { [script] = { match = name, reply = reply } } }
  end

  it("acquire: a token of INT64_MAX is the token, or an error", function()
    with("acquire", "odd:max:", R.ints(1, 1, INT64_MAX))
    local l = client:lock("odd:max:")
    local r = table.pack(l:acquire())
    if r[1] then
      assert.is_true(l:held())
      assert.is_true(l:token() > 2 ^ 62)
      assert(l:release())
    else
      assert_fails(r)
    end
    srv.set{}
    assert_works(client, "odd-max")
  end)

  it("acquire: a negative token: a hold with that token, or an error", function()
    with("acquire", "odd:neg:", R.ints(1, 1, -5))
    local l = client:lock("odd:neg:")
    local r = table.pack(l:acquire())
    if r[1] then
      assert.is_true(l:token() == -5)
      assert(l:release())
    else
      assert_fails(r)
    end
    srv.set{}
    assert_works(client, "odd-neg")
  end)

  it("acquire: busy with a TTL of INT64_MAX ms waits no longer than wait #timing", function()
    with("acquire", "odd:busy:", R.ints(0, INT64_MAX))
    local l = client:lock("odd:busy:")
    local t, r = elapsed(function() return l:acquire{ wait = 0.2 } end)
    assert.equals("timeout", assert_fails(r))
    assert.is_true(t < BOUND, ("took %.1f s"):format(t))
    local r0 = table.pack(l:try_acquire())
    assert.equals("timeout", assert_fails(r0))
    assert.is_true(r0[3] == nil or r0[3] >= 0)
    assert.is_false(l:held())
    srv.set{}
    assert_works(client, "odd-busy")
  end)

  it("acquire: busy with a negative TTL", function()
    with("acquire", "odd:busyneg:", R.ints(0, -5))
    local l = client:lock("odd:busyneg:")
    local r = table.pack(l:acquire{ wait = 0.2 })
    assert.equals("timeout", assert_fails(r))
    assert.is_true(r[3] == nil or r[3] >= 0, tostring(r[3]))
    srv.set{}
    assert_works(client, "odd-busyneg")
  end)

  it("acquire: 'stale' ({-2}) every time ends at wait #timing", function()
    with("acquire", "odd:stale:", R.ints(-2))
    local l = client:lock("odd:stale:")
    local t, r = elapsed(function() return l:acquire{ wait = 0.2 } end)
    assert.equals("timeout", assert_fails(r))
    assert.is_true(t < BOUND)
    srv.set{}
    assert_works(client, "odd-stale")
  end)

  it("acquire: an array longer than the script's is not a hold", function()
    with("acquire", "odd:long:", R.ints(1, 1, 7, 9, 9))
    local l = client:lock("odd:long:")
    local r = table.pack(l:acquire{ wait = 0 })
    assert_fails(r)
    assert.is_false(l:held())
    srv.set{}
    assert_works(client, "odd-long")
  end)

  it("release: an array longer than the script's is an error", function()
    local l = client:lock("odd:rlong:")
    assert(l:acquire())
    with("release", "odd:rlong:", R.ints(1, 0, 9))
    local r = table.pack(l:release())
    assert_fails(r)
    srv.set{}
    assert_works(client, "odd-rlong")
  end)

  it("semaphore:available: a negative count is an error", function()
    with("sem_free", "odd:avail:", R.int(-5))
    local r = table.pack(client:semaphore("odd:avail:", 3):available())
    assert(r[1] == nil or (r[1] >= 0 and r[1] <= 3), show(r))
    srv.set{}
  end)

  it("semaphore:available: more free permits than there are is an error", function()
    with("sem_free", "odd:avail2:", R.int(INT64_MAX))
    local r = table.pack(client:semaphore("odd:avail2:", 3):available())
    assert(r[1] == nil or (r[1] >= 0 and r[1] <= 3), show(r))
    srv.set{}
  end)

  it("lock:ttl: a huge TTL is a number", function()
    with("ttl", "odd:ttl:", R.int(INT64_MAX))
    local r = table.pack(client:lock("odd:ttl:"):ttl())
    assert(type(r[1]) == "number" or assert_fails(r), show(r))
    srv.set{}
  end)
end)

-- ---- client:inspect ------------------------------------------------------

describe("client:inspect of a malformed reply #binding", function()
  local srv, client
  lazy_setup(function()
    srv = fake.start{}
    client = assert(connect(srv.url))
  end)
  lazy_teardown(function() client:close(); fake.stop_all() end)

  -- The client's id (a placeholder while the tests are being named).
  local function me() return client and client.id or ("0"):rep(32) end

  -- {1, token, pttl, owners, requesters, queued, subscribers, writer}
  local function reply(t)
    local d = { R.int(1), R.bulk("5"), R.int(10000), R.arr{ R.bulk(me() .. ":1"), R.int(1) },
                R.empty_array, R.int(0), R.int(0), R.bulk("") }
    for k, v in pairs(t) do d[k] = v end
    local out = {}
    for i = 1, (t.n or 8) do out[i] = d[i] end
    return R.arr(out)
  end

  local function inspect(name, rep, list)
    srv.set{ scripts = { inspect = { match = name, reply = rep } },
             commands = list and { ["CLIENT LIST"] = list } or nil }
    local r = table.pack(client:inspect(name))
    srv.set{}
    return r
  end

  it("reads the well-formed reply (the fake's baseline)", function()
    local r = inspect("i:ok:", reply{}, R.bulk("id=3 name=dlock:" .. me() .. ":worker%207 x\n"))
    local info = assert(r[1], show(r))
    assert.equals(1, #info.owners)
    assert.equals(me(), info.owners[1].client)
    assert.equals("worker 7", info.owners[1].label)
    assert.equals(5, info.token)
  end)

  -- Each list is made again in each test: the replies name the client.
  local function owner_cases() return {
    { "an integer owner", reply{ [4] = R.arr{ R.int(42), R.int(1) } } },
    { "a nil owner", reply{ [4] = R.arr{ R.nil_bulk, R.int(1) } } },
    { "an array as owner", reply{ [4] = R.arr{ R.arr{ R.bulk("x") }, R.int(1) } } },
    { "integer owners, two of them", reply{ [4] = R.arr{ R.int(1), R.int(1), R.int(2), R.int(1) } } },
    { "a nil owner after a good one",
      reply{ [4] = R.arr{ R.bulk(me() .. ":1"), R.int(1), R.nil_bulk, R.int(1) } } },
    { "an integer owner, and a requester naming this client",
      reply{ [4] = R.arr{ R.int(7), R.int(1) }, [5] = R.arr{ R.bulk(me() .. "|") } } },
    { "a nil owner, and the writer empty too",
      reply{ [4] = R.arr{ R.nil_bulk, R.int(1) }, [8] = R.bulk("") } },
  } end
  for i, case in ipairs(thin(owner_cases())) do
    it(("gives nil, 'redis: unexpected inspect reply' for %s"):format(case[1]), function()
      local r = inspect("i:owner:" .. i, thin(owner_cases())[i][2])
      assert.is_nil(r[1], show(r))
      assert.equals("redis: unexpected inspect reply", r[2])
      assert_works(client, "i-owner")
    end)
  end

  local function bad_cases() return {
    { "7 elements (no writer)", reply{ n = 7 } },
    { "9 elements", reply{ n = 9, [9] = R.int(0) } },
    { "only {1}", R.ints(1) },
    { "{1, token}", R.arr{ R.int(1), R.bulk("5") } },
    { "code 2", reply{ [1] = R.int(2) } },
    { "code as a string", reply{ [1] = R.bulk("1") } },
    { "the token as an integer", reply{ [2] = R.int(5) } },
    { "the token as nil", reply{ [2] = R.nil_bulk } },
    { "the TTL as a string", reply{ [3] = R.bulk("10000") } },
    { "owners as an integer", reply{ [4] = R.int(1) } },
    { "owners as nil", reply{ [4] = R.nil_array } },
    { "owners nested 1000 deep", reply{ [4] = R.nest(1000) } },
    { "requesters as an integer", reply{ [5] = R.int(1) } },
    { "requesters as a nil array", reply{ [5] = R.nil_array } },
    { "the writer as an integer", reply{ [8] = R.int(0) } },
    { "the writer as nil", reply{ [8] = R.nil_bulk } },
    { "the writer as an array", reply{ [8] = R.ints(1) } },
  } end
  for i, case in ipairs(thin(bad_cases())) do
    it(("gives nil, err for %s"):format(case[1]), function()
      local r = inspect("i:bad:" .. i, thin(bad_cases())[i][2])
      assert_fails(r, "inspect")
      assert_works(client, "i-bad")
    end)
  end

  -- Odd values in the right places: an answer or an error, no crash.
  local function odd_cases() return {
    { "an odd number of owner entries", reply{ [4] = R.arr{ R.bulk("a"), R.int(1), R.bulk("b") } } },
    { "an empty owner", reply{ [4] = R.arr{ R.bulk(""), R.int(1) } } },
    { "a one-byte owner", reply{ [4] = R.arr{ R.bulk("r"), R.int(1) } } },
    { "an owner that is only NUL r", reply{ [4] = R.arr{ R.bulk("\0r"), R.int(1) } } },
    { "a 100000-byte owner", reply{ [4] = R.arr{ R.bulk(("o"):rep(100000)), R.int(1) } } },
    { "a count that is a string", reply{ [4] = R.arr{ R.bulk(me() .. ":1"), R.bulk("x") } } },
    { "a count of INT64_MIN", reply{ [4] = R.arr{ R.bulk(me() .. ":1"), R.int(INT64_MIN) } } },
    { "a count that is an array", reply{ [4] = R.arr{ R.bulk(me() .. ":1"), R.ints(1) } } },
    { "a writer longer than the owner", reply{ [8] = R.bulk(("w"):rep(1000)) } },
    { "requesters of every type", reply{ [5] = R.arr{ R.int(1), R.nil_bulk, R.ints(1),
        R.bulk(me() .. "|"), R.bulk(me()), R.bulk(me() .. "|" .. me() .. ":1x") } } },
    { "a token past INT64_MAX", reply{ [2] = R.bulk(INT64_MAX .. "999") } },
    { "a TTL of INT64_MIN", reply{ [3] = R.int(INT64_MIN) } },
    { "queued and subscribers of other types", reply{ [6] = R.bulk("x"), [7] = R.ints(1) } },
  } end
  for i, case in ipairs(thin(odd_cases())) do
    it(("gives a table or nil, err for %s"):format(case[1]), function()
      local r = inspect("i:odd:" .. i, thin(odd_cases())[i][2])
      if r[1] ~= nil then
        assert.equals("table", type(r[1]))
        for _, o in ipairs(r[1].owners) do
          assert(o.client == nil or type(o.client) == "string", tostring(o.client))
          assert.equals("number", type(o.count))
        end
      else
        assert_fails(r, "inspect")
      end
      assert_works(client, "i-odd")
    end)
  end

  local function list_cases() return {
    { "nil", R.nil_bulk }, { "an integer", R.int(5) }, { "an array", R.ints(1) },
    { "an error", R.err("ERR no") }, { "a status", R.status("OK") },
    { "a label that ends in %", R.bulk("id=1 name=dlock:" .. me() .. ":abc%") },
    { "a label that ends in %4", R.bulk("id=1 name=dlock:" .. me() .. ":abc%4") },
    { "a name cut after the id", R.bulk(" name=dlock:" .. me() .. ":") },
    { "a 1 MB list", R.bulk(("x"):rep(1000000) .. " name=dlock:" .. me() .. ":big") },
    { "garbage", "nonsense\r\n" },
    { "a reply cut short, then close", { raw = "$100\r\nid=1", close = true } },
  } end
  for i, case in ipairs(thin(list_cases())) do
    it(("reads owners without labels when CLIENT LIST gives %s"):format(case[1]), function()
      local r = inspect("i:list:" .. i, reply{}, thin(list_cases())[i][2])
      if r[1] ~= nil then
        assert.equals(1, #r[1].owners)
        local label = r[1].owners[1].label
        assert(label == nil or type(label) == "string")
      else
        assert_fails(r, "inspect")
      end
      assert_works(client, "i-list")
    end)
  end
end)

-- ---- connecting ----------------------------------------------------------

describe("connect to a server that answers #timing #binding", function()
  local srv
  lazy_setup(function() srv = fake.start{} end)
  lazy_teardown(function() fake.stop_all() end)

  local function try(rules, url)
    srv.set(rules)
    local t, r = elapsed(function() return connect(url or srv.url) end)
    srv.set{}
    if r[1] then r[1]:close() end
    assert.is_true(t < BOUND, ("connect took %.1f s"):format(t))
    return r
  end

  for i, shape in ipairs(shapes({ port = 1 })) do   -- (nothing follows a redirect here)
    if not VALGRIND or i % 5 == 0 then
      it(("SCRIPT LOAD with %s: nil, err"):format(shape[1]), function()
        assert_fails(try{ commands = { ["SCRIPT LOAD"] = shape[2] } }, "connect")
      end)
      if shape.value then
        it(("CONFIG GET with %s: connects all the same"):format(shape[1]), function()
          local r = try{ commands = { ["CONFIG GET"] = shape[2] } }
          assert(r[1], show(r))
        end)
      end
    end
  end

  local sha_cases = {
    { "39 hex digits", R.bulk(("a"):rep(39)) }, { "41 hex digits", R.bulk(("a"):rep(41)) },
    { "an integer", R.int(1) },
  }
  for _, case in ipairs(sha_cases) do
    it(("SCRIPT LOAD with %s: nil, err"):format(case[1]), function()
      assert_fails(try{ commands = { ["SCRIPT LOAD"] = case[2] } }, "connect")
    end)
  end

  it("SCRIPT LOAD with 40 bytes that are not hex (one a NUL): no crash, calls fail cleanly", function()
    srv.set{ commands = { ["SCRIPT LOAD"] = R.bulk(("z"):rep(20) .. "\0" .. ("z"):rep(19)) } }
    local r = table.pack(connect(srv.url))
    if r[1] then
      local l = r[1]:lock("sha:nul")
      local a = table.pack(l:acquire{ wait = 0 })
      if a[1] then assert(l:release()) else assert_fails(a, "acquire") end
      r[1]:close()
    else
      assert_fails(r, "connect")
    end
    srv.set{}
  end)

  it("SCRIPT LOAD with other SHAs after a reconnect: nil, err, then works again", function()
    local c = assert(connect(srv.url))
    srv.set{ commands = { PING = { raw = "", close = true },
                          ["SCRIPT LOAD"] = R.bulk(("b"):rep(40)) } }
    assert_fails(table.pack(c:ping()))
    local l = c:lock("sha:changed")
    assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.is_false(l:held())
    srv.set{}
    assert_works(c, "sha-changed")
    c:close()
  end)

  for _, case in ipairs{
    { "garbage as soon as it accepts", { on_accept = "garbage garbage\r\n" } },
    { "an error as soon as it accepts", { on_accept = R.err("ERR max number of clients reached") } },
    { "a close as soon as it accepts", { on_accept = { raw = "", close = true } } },
    { "a 100 MB bulk string as soon as it accepts", { on_accept = { raw = "$104857600\r\n", hang = true } } },
    { "CLIENT SETNAME with garbage", { commands = { ["CLIENT SETNAME"] = "garbage\r\n" } } },
    { "CLIENT SETNAME with an array nested 1000 deep", { commands = { ["CLIENT SETNAME"] = R.nest(1000) } } },
    { "CLIENT SETNAME with -NOAUTH", { commands = { ["CLIENT SETNAME"] = R.err("NOAUTH Authentication required.") } } },
    { "CLIENT SETNAME with nothing", { commands = { ["CLIENT SETNAME"] = { raw = "", hang = true } } } },
  } do
    it(("with %s: nil, err"):format(case[1]), function()
      assert_fails(try(case[2]), "connect")
    end)
  end

  for _, case in ipairs{
    { "an error", R.err("ERR unknown command 'CLIENT'") }, { "an integer", R.int(0) },
    { "nil", R.nil_bulk }, { "an array", R.ints(1, 2) },
  } do
    it(("CLIENT SETNAME with %s: connects all the same"):format(case[1]), function()
      local r = try{ commands = { ["CLIENT SETNAME"] = case[2] } }
      assert(r[1], show(r))
    end)
  end

  for _, case in ipairs{
    { "an error", R.err("ERR invalid password"), false },
    { "-WRONGPASS", R.err("WRONGPASS invalid username-password pair"), false },
    { "garbage", "garbage\r\n", false },
    { "an array nested 1000 deep", R.nest(1000), false },
    { "nothing, then close", { raw = "", close = true }, false },
    { "an integer", R.int(1), true }, { "nil", R.nil_bulk, true },
  } do
    it(("AUTH with %s"):format(case[1]), function()
      local url = "redis://:secret@127.0.0.1:" .. srv.port
      local r = try({ commands = { AUTH = case[2] } }, url)
      if case[3] then assert(r[1], show(r)) else assert_fails(r, "connect") end
      assert.is_true(srv.count("AUTH") > 0)
    end)
  end

  for _, case in ipairs{
    { "an error", R.err("ERR DB index is out of range"), false },
    { "garbage", "garbage\r\n", false },
    { "an array", R.ints(1), true },
  } do
    it(("SELECT with %s"):format(case[1]), function()
      local r = try({ commands = { SELECT = case[2] } }, srv.url .. "/3")
      if case[3] then assert(r[1], show(r)) else assert_fails(r, "connect") end
    end)
  end
end)

-- ---- transport: replies that never end ----------------------------------

describe("a reply that never ends #timing #binding", function()
  local srv, client
  lazy_setup(function()
    srv = fake.start{}
    client = assert(connect(srv.url))
  end)
  lazy_teardown(function() client:close(); fake.stop_all() end)

  it("times out via command_timeout when a 100 MB bulk string trickles in", function()
    -- one byte every 20 ms: every read gets something, and the whole never
    -- comes; the server gives up after `total` s (the test's bound when it fails)
    local bound = 8 * T + 0.5
    srv.set{ commands = { PING = { reply = { raw = "$104857600\r\n", drip = "x", every = 0.02,
                                             total = bound + 1 }, times = 1 } } }
    local t, r = elapsed(function() return client:ping() end)
    srv.set{}
    assert.matches("^connection", assert_fails(r, "ping"))
    assert.is_true(t < bound, ("took %.1f s (command_timeout %.2f s)"):format(t, T))
    assert_works(client, "drip")
  end)

  it("times out via command_timeout when the reply stops half-way", function()
    srv.set{ scripts = { acquire = { match = "never:", reply = { raw = "*3\r\n:1\r\n:1\r\n", hang = true } } } }
    local l = client:lock("never:")
    local t, r = elapsed(function() return l:acquire() end)
    srv.set{}
    assert.matches("^connection", assert_fails(r, "acquire"))
    assert.is_false(l:held())
    assert.is_true(t < BOUND, ("took %.1f s"):format(t))
    assert_works(client, "never")
  end)
end)

-- ---- waiting: the subscriber connection ---------------------------------

-- An acquire that finds the lock busy subscribes to the lock's channel
-- and waits; its SUBSCRIBE gets the shape, and the next attempt the grant.
describe("a waiter whose SUBSCRIBE gets #timing #binding", function()
  local srv, client
  lazy_setup(function()
    srv = fake.start{}
    client = assert(connect(srv.url))
  end)
  lazy_teardown(function() client:close(); fake.stop_all() end)

  local function cases(chan) return thin{
    { "garbage", "garbage\r\n", all = true },
    { "an array nested 1000 deep", R.nest(1000) },
    { "an error", R.err("ERR no pubsub for you") },
    { "nil", R.nil_bulk },
    { "the confirmation of another channel", R.arr{ R.bulk("subscribe"), R.bulk("other"), R.int(1) } },
    { "odd messages after its confirmation",
      R.arr{ R.bulk("subscribe"), R.bulk(chan), R.int(1) } ..
      R.arr{ R.bulk("message") } .. R.arr{ R.bulk("message"), R.int(5), R.bulk("x") } ..
      R.arr{ R.bulk("message"), R.bulk(chan), R.nest(5) } ..
      R.arr{ R.bulk("message"), R.bulk(chan), R.bulk(("m"):rep(100000)) } ..
      R.arr{ R.bulk("message"), R.bulk(chan), R.bulk("1:99999999999999999999999") } ..
      R.arr{ R.bulk("smessage"), R.bulk(chan), R.nil_bulk } ..
      R.arr{ R.bulk("message"), R.bulk(chan) } .. R.int(7) .. R.nil_bulk .. R.status("OK"),
      all = true },
    { "a confirmation cut short, then close", { raw = "*3\r\n$9\r\nsubsc", close = true }, all = true },
    { "nothing", { raw = "", hang = true } },
  } end
  local kinds = {
    { "lock", "acquire", function(c, n) return c:lock(n) end },
    { "fair_lock", "fair_acquire", function(c, n) return c:fair_lock(n) end, true },
    { "semaphore", "sem_acquire", function(c, n) return c:semaphore(n, 1) end, true },
  }
  local function test(kind, i)
    return function()
      local name = ("sub:%s:%d:"):format(kind[1], i)
      local chan = "dlock:{" .. name .. "}:ch" .. (kind[4] and ":" .. client.id or "")
      srv.set{ scripts = { [kind[2]] = { match = name, seq = { R.ints(0, 50) } } },
               commands = { SUBSCRIBE = cases(chan)[i][2] } }
      local l = kind[3](client, name)
      local before = srv.count(" SUBSCRIBE")
      local t, r = elapsed(function() return l:acquire{ wait = 2 } end)
      srv.set{}
      assert.is_true(srv.count(" SUBSCRIBE") > before, "it never subscribed")
      assert.is_true(t < BOUND + 2, ("took %.1f s"):format(t))
      if r[1] then                        -- the retry's grant (well-formed)
        if kind[1] == "semaphore" then
          assert(l:release(r[1]))
        else
          assert.is_true(l:held())
          assert(l:release())
        end
      else
        assert_fails(r, "acquire")
      end
      assert_works(client, name)
    end
  end
  -- Most shapes cost a connect_timeout (no confirmation): those for the
  -- lock only.
  for k, kind in ipairs(kinds) do
    for i, case in ipairs(cases("")) do
      if k == 1 or case.all then
        it(("%s: %s"):format(kind[1], case[1]), test(kind, i))
      end
    end
  end
end)

-- ---- redirects on a url= client -----------------------------------------

describe("a url= client whose server redirects #binding", function()
  local srv, other
  before_each(function()
    other = fake.start{}
    srv = fake.start{}
  end)
  after_each(function() fake.stop_all() end)

  it("with -MOVED gets nil, err naming MOVED (not a crash)", function()
    local c = assert(connect(srv.url))
    srv.set{ scripts = { acquire = R.err("MOVED 1234 127.0.0.1:" .. other.port) } }
    local l = c:lock("moved")
    local err = assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.matches("MOVED", err, 1, true)
    assert.matches("^redis", err)
    assert.is_false(l:held())
    assert.equals(0, other.accepts())
    srv.set{}
    assert_works(c, "moved")
    c:close()
  end)

  it("with -MOVED says the server is a Cluster node, to use connect{ cluster = ... }", function()
    local c = assert(connect(srv.url))
    srv.set{ scripts = { acquire = R.err("MOVED 1234 127.0.0.1:" .. other.port) } }
    local err = assert_fails(table.pack(c:lock("moved2"):acquire{ wait = 0 }))
    assert.matches("Cluster", err, 1, true)
    assert.matches("cluster =", err, 1, true)
    c:close()
  end)

  it("with -ASK never connects to the other address (nor sends it AUTH)", function()
    local c = assert(connect("redis://:secret@127.0.0.1:" .. srv.port))
    srv.set{ scripts = { ["*"] = R.err("ASK 1234 127.0.0.1:" .. other.port) } }
    local l = c:lock("ask")
    local err = assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.matches("ASK", err, 1, true)
    assert.is_false(l:held())
    assert_fails(table.pack(c:inspect("ask")))
    dlock.sleep(0.3)                      -- the watchdog's cancel, too
    assert.equals(0, other.accepts())
    assert.equals(0, other.count("AUTH"))
    srv.set{}
    assert_works(c, "ask")
    c:close()
  end)

  it("with -MOVED on a plain command (PING) gets nil, err", function()
    local c = assert(connect(srv.url))
    srv.set{ commands = { PING = R.err("MOVED 1234 127.0.0.1:" .. other.port) } }
    local err = assert_fails(table.pack(c:ping()))
    assert.matches("MOVED", err, 1, true)
    assert.equals(0, other.accepts())
    srv.set{}
    assert.is_true(c:ping())
    c:close()
  end)

  it("with -MOVED and a CLUSTER SLOTS map to a watchdog renewal: no crash, no connection", function()
    local c = assert(connect(srv.url, { lease = 0.45 }))
    local l = c:lock("moved:renew")
    assert(l:acquire())
    srv.set{ scripts = { renew = R.err("MOVED 1234 127.0.0.1:" .. other.port) },
             slots = { { 0, 16383, other.port } } }
    assert(helper.wait_for(function() return not l:held() end, BOUND))
    assert.is_true(srv.count("EVALSHA renew") > 0)
    assert.equals(0, other.accepts())
    srv.set{}
    assert_works(c, "moved-renew")
    c:close()
  end)

  it("with -ASK to a watchdog renewal: no connection to the other address", function()
    local c = assert(connect("redis://:secret@127.0.0.1:" .. srv.port, { lease = 0.45 }))
    local l = c:lock("ask:renew")
    assert(l:acquire())
    srv.set{ scripts = { renew = R.err("ASK 1234 127.0.0.1:" .. other.port) } }
    assert(helper.wait_for(function() return not l:held() end, BOUND))
    assert.is_true(srv.count("EVALSHA renew") > 0)
    assert.equals(0, other.accepts())
    srv.set{}
    assert_works(c, "ask-renew")
    c:close()
  end)

  it("with -MOVED to a release: nil, err, and the hold is gone", function()
    local c = assert(connect(srv.url))
    local l = c:lock("moved:release")
    assert(l:acquire())
    srv.set{ scripts = { release = { reply = R.err("MOVED 1234 127.0.0.1:" .. other.port), times = 1 } } }
    local err = assert_fails(table.pack(l:release()))
    assert.matches("MOVED", err, 1, true)
    assert.is_false(l:held())
    assert.equals(0, l:count())
    assert.equals(0, other.accepts())
    srv.set{}
    assert_works(c, "moved-release")
    c:close()
  end)
end)

-- ---- the watchdog --------------------------------------------------------

-- One client per shape (the watchdog renews a client's holds in one
-- call): each holds a lock (a read hold for rw_renew) whose renewals get
-- the shape; none may stay held past its lease.
describe("the watchdog, when renewals get #binding", function()
  local srv, runs, others = nil, {}, {}
  local LEASE = VALGRIND and 3 or TSAN and 1.5 or 0.45
  local function all(other_srv)
    local list = shapes(other_srv)
    for _, s in ipairs{
      { "an array of 2 for 1 key", R.ints(1, 1) },
      { "an integer, not an array", R.int(1) },
      { "{2}", R.ints(2) }, { "{-2}", R.ints(-2) }, { "{INT64_MAX}", R.ints(INT64_MAX) },
      { "{'1'}", R.arr{ R.bulk("1") } }, { "{nil}", R.arr{ R.nil_bulk } },
      { "{{1}}", R.arr{ R.ints(1) } }, { "{+1}", R.arr{ R.status("1") } },
    } do list[#list + 1] = s end
    return thin(list)
  end
  local list = all({ port = 1 })

  lazy_setup(function()
    srv = fake.start{}
    local rules = { scripts = { renew = {}, rw_renew = {} } }
    for i = 1, #list do
      if list[i].redirect then others[i] = fake.start{} end   -- records connections
      local rep = all(others[i] or { port = 1 })[i][2]
      table.insert(rules.scripts.renew, { match = ("wd:%d:"):format(i), reply = rep })
      table.insert(rules.scripts.rw_renew, { match = ("wdr:%d:"):format(i), reply = rep })
    end
    srv.set(rules)
    for i = 0, #list do                   -- 0: the control, renewed
      local run = {}
      -- (the control's lease is longer: one renewal within the sleep, and
      -- a slow machine may not lose it)
      run.c = assert(connect(srv.url, { lease = i == 0 and 3 * LEASE or LEASE }))
      run.lock = run.c:lock(("wd:%d:"):format(i))
      run.read = run.c:rwlock(("wdr:%d:"):format(i)).read
      assert(run.lock:acquire())
      assert(run.read:acquire())
      runs[i] = run
    end
    dlock.sleep(3 * LEASE)
  end)
  lazy_teardown(function()
    for i = 0, #list do if runs[i] then runs[i].c:close() end end
    fake.stop_all()
  end)

  it("well-formed replies: the holds stay held (the control)", function()
    local run = runs[0]
    assert.is_true(run.lock:held())
    assert.is_true(run.read:held())
    assert.is_true(run.c:stats().renewed > 0)
  end)

  for i, shape in ipairs(list) do
    it(shape[1] .. ": the holds are lost, and the client works", function()
      local run = runs[i]
      assert.is_true(srv.count(("EVALSHA renew dlock:{wd:%d:}"):format(i)) > 0, "never renewed")
      assert.is_false(run.lock:held(), "a lock held on malformed renewals")
      assert.is_false(run.read:held(), "a read hold held on malformed renewals")
      assert_fails(table.pack(run.lock:release()))
      assert_fails(table.pack(run.read:release()))
      if shape.redirect then
        assert.equals(0, others[i].accepts(), "connected to the redirect's address")
      end
      assert_works(run.c, "wd" .. i)
    end)
  end
end)

-- ---- Sentinel ------------------------------------------------------------

describe("Sentinel: a sentinel or master that answers #timing #binding", function()
  local sentinel, master, spare
  lazy_setup(function()
    master = fake.start{}
    sentinel = fake.start{ master = master.port }
    spare = fake.start{ master = master.port }
  end)
  lazy_teardown(function() fake.stop_all() end)

  local function sconnect(urls)
    return connect(nil, { sentinels = urls or { sentinel.url }, master = "mymaster" })
  end

  it("well-formed: connects (the fake's baseline)", function()
    local c = assert(sconnect())
    assert_works(c, "sentinel-ok")
    c:close()
  end)

  local addr_cases = {
    { "a nil array (unknown master)", R.nil_array },
    { "an empty array", R.empty_array },
    { "one element", R.arr{ R.bulk("127.0.0.1") } },
    { "three elements", R.arr{ R.bulk("127.0.0.1"), R.bulk("1"), R.bulk("x") } },
    { "integers", R.ints(127, 6379) },
    { "the port as an integer", R.arr{ R.bulk("127.0.0.1"), R.int(1) } },
    { "port 0", R.arr{ R.bulk("127.0.0.1"), R.bulk("0") } },
    { "port -1", R.arr{ R.bulk("127.0.0.1"), R.bulk("-1") } },
    { "port 'abc'", R.arr{ R.bulk("127.0.0.1"), R.bulk("abc") } },
    { "port 99999", R.arr{ R.bulk("127.0.0.1"), R.bulk("99999") } },
    { "port INT64_MAX", R.arr{ R.bulk("127.0.0.1"), R.bulk(INT64_MAX) } },
    { "an empty port", R.arr{ R.bulk("127.0.0.1"), R.bulk("") } },
    { "an empty host", R.arr{ R.bulk(""), R.bulk("1") } },
    { "a nil host", R.arr{ R.nil_bulk, R.bulk("1") } },
    { "a 10000-byte host", R.arr{ R.bulk(("h"):rep(10000)), R.bulk("1") } },
    { "a host with a NUL", R.arr{ R.bulk("127.0.0.1\0evil"), R.bulk("1") } },
    { "an array nested 1000 deep", R.nest(1000) },
    { "an error", R.err("ERR no such master") },
    { "-NOAUTH", R.err("NOAUTH Authentication required.") },
    { "-MOVED", R.err("MOVED 1 127.0.0.1:1") },
    { "garbage", "garbage\r\n" },
    { "a status", R.status("OK") },
    { "a reply cut short, then close", { raw = "*2\r\n$9\r\n127.0", close = true } },
    { "a 100 MB bulk string that never arrives", { raw = "*2\r\n$104857600\r\n", hang = true } },
  }
  for _, case in ipairs(thin(addr_cases)) do
    it(("SENTINEL get-master-addr-by-name with %s: nil, err"):format(case[1]), function()
      sentinel.set{ master = master.port,
                    commands = { ["SENTINEL GET-MASTER-ADDR-BY-NAME"] = case[2] } }
      local t, r = elapsed(function() return sconnect() end)
      sentinel.set{ master = master.port }
      if r[1] then r[1]:close() end
      assert.matches("^connection", assert_fails(r, "connect"))
      assert.is_true(t < BOUND, ("took %.1f s"):format(t))
    end)
  end

  it("a hostile sentinel first and a good one second: connects through the second", function()
    sentinel.set{ commands = { ["SENTINEL GET-MASTER-ADDR-BY-NAME"] = R.nest(1000) } }
    local c = assert(sconnect{ sentinel.url, spare.url })
    assert_works(c, "sentinel-second")
    c:close()
    sentinel.set{ master = master.port }
  end)

  local role_cases = {
    { "an empty array", R.empty_array }, { "an integer", R.int(1) },
    { "nil", R.nil_bulk }, { "'slave'", R.arr{ R.bulk("slave"), R.bulk("x") } },
    { "an integer role", R.ints(1, 2) }, { "a status 'master'", R.arr{ R.status("master") } },
    { "'master' in a nested array", R.arr{ R.arr{ R.bulk("master") } } },
    { "an array nested 1000 deep", R.nest(1000) }, { "garbage", "garbage\r\n" },
    { "a reply cut short, then close", { raw = "*3\r\n$6\r\nmas", close = true } },
  }
  for _, case in ipairs(thin(role_cases)) do
    it(("ROLE on the master with %s: nil, err"):format(case[1]), function()
      master.set{ commands = { ROLE = case[2] } }
      local r = table.pack(sconnect())
      master.set{}
      if r[1] then r[1]:close() end
      assert.matches("^connection", assert_fails(r, "connect"))
    end)
  end

  local sub_cases = {
    { "garbage", "garbage\r\n" },
    { "an array nested 1000 deep", R.nest(1000) },
    { "odd messages after the confirmation",
      R.arr{ R.bulk("subscribe"), R.bulk("+switch-master"), R.int(1) } ..
      R.arr{ R.bulk("message") } .. R.arr{ R.bulk("message"), R.int(5) } ..
      R.arr{ R.bulk("message"), R.bulk("+switch-master"), R.nest(5) } ..
      R.arr{ R.bulk("message"), R.bulk("+switch-master"), R.bulk(("m"):rep(100000)) } ..
      R.arr{ R.bulk("message"), R.bulk("+switch-master"), R.nil_bulk, R.ints(1) } ..
      R.int(7) .. R.nil_bulk },
    { "nothing", { raw = "", hang = true } },
    { "a close", { raw = "", close = true } },
  }
  for _, case in ipairs(thin(sub_cases)) do
    it(("SUBSCRIBE +switch-master with %s: the client works"):format(case[1]), function()
      sentinel.set{ master = master.port, commands = { SUBSCRIBE = case[2] } }
      local c = assert(sconnect())
      assert_works(c, "sub")
      c:close()
      sentinel.set{ master = master.port }
    end)
  end

  it("-MOVED from the master: nil, err naming MOVED, no connection elsewhere", function()
    local other = fake.start{}
    finally(other.stop)
    local c = assert(sconnect())
    master.set{ scripts = { acquire = R.err("MOVED 1234 127.0.0.1:" .. other.port) } }
    local l = c:lock("s:moved")
    local err = assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.matches("MOVED", err, 1, true)
    assert.is_false(l:held())
    assert.equals(0, other.accepts())
    master.set{}
    assert_works(c, "s-moved")
    c:close()
  end)

  it("-ASK from the master: no connection elsewhere", function()
    local other = fake.start{}
    finally(other.stop)
    local c = assert(sconnect())
    master.set{ scripts = { acquire = R.err("ASK 1234 127.0.0.1:" .. other.port) } }
    local l = c:lock("s:ask")
    assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.is_false(l:held())
    assert.equals(0, other.accepts())
    master.set{}
    assert_works(c, "s-ask")
    c:close()
  end)

  it("-READONLY from the master every time: nil, err, and then works", function()
    local c = assert(sconnect())
    master.set{ scripts = { acquire = { match = "s:ro", reply = R.err("READONLY You can't write") } } }
    local l = c:lock("s:ro")
    assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.is_false(l:held())
    master.set{}
    assert_works(c, "s-ro")
    c:close()
  end)
end)

-- ---- Cluster -------------------------------------------------------------

describe("Cluster: a node that answers #timing #binding", function()
  local node
  lazy_setup(function() node = fake.start{} end)
  lazy_teardown(function() fake.stop_all() end)

  local function self_map() return { { 0, 16383, node.port } } end
  local function cconnect() return connect(nil, { cluster = { node.url } }) end

  it("well-formed: connects (the fake's baseline)", function()
    node.set{ slots = self_map() }
    local c = assert(cconnect())
    assert_works(c, "cluster-ok")
    c:close()
  end)

  local function entry(lo, hi, host, port)
    return R.arr{ lo, hi, R.arr{ host, port } }
  end
  local function here(lo, hi) return entry(R.int(lo), R.int(hi), R.bulk("127.0.0.1"), R.int(node.port)) end

  -- CLUSTER SLOTS replies: nil, err from connect, or a client whose calls
  -- answer or fail (the slots it could not read are routed to the seed).
  local slots_cases = {
    { "an error", function() return R.err("ERR This instance has cluster support disabled") end, "fails" },
    { "an integer", function() return R.int(1) end, "fails" },
    { "nil", function() return R.nil_bulk end, "fails" },
    { "a status", function() return R.status("OK") end, "fails" },
    { "garbage", function() return "garbage\r\n" end, "fails" },
    { "an array nested 1000 deep", function() return R.nest(1000) end, "fails" },
    { "an empty array", function() return R.empty_array end },
    { "entries that are not arrays", function() return R.arr{ R.int(1), R.bulk("x"), R.nil_bulk } end },
    { "ranges as strings", function() return R.arr{ entry(R.bulk("0"), R.bulk("16383"), R.bulk("127.0.0.1"), R.int(node.port)) } end },
    { "slots -5 to 99999", function() return R.arr{ here(-5, 99999) } end },
    { "slots 0 to 99999", function() return R.arr{ here(0, 99999) } end },
    { "slots 99999 to 99999", function() return R.arr{ here(99999, 99999) } end },
    { "slots INT64_MIN to INT64_MAX", function() return R.arr{ here(INT64_MIN, INT64_MAX) } end },
    { "slots 16383 to 0", function() return R.arr{ here(16383, 0) } end },
    { "a missing host", function() return R.arr{ R.arr{ R.int(0), R.int(16383), R.arr{ R.int(node.port) } } } end },
    { "no node at all", function() return R.arr{ R.ints(0, 16383) } end },
    { "an empty node", function() return R.arr{ R.arr{ R.int(0), R.int(16383), R.empty_array } } end },
    { "the node as nil", function() return R.arr{ R.arr{ R.int(0), R.int(16383), R.nil_array } } end },
    { "the host as an integer", function() return R.arr{ entry(R.int(0), R.int(16383), R.int(127), R.int(node.port)) } end },
    { "the port as a string", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk("127.0.0.1"), R.bulk(tostring(node.port))) } end },
    { "port 0", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk("127.0.0.1"), R.int(0)) } end },
    { "port -1", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk("127.0.0.1"), R.int(-1)) } end },
    { "port 70000", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk("127.0.0.1"), R.int(70000)) } end },
    { "port INT64_MAX", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk("127.0.0.1"), R.int(INT64_MAX)) } end },
    { "an empty host (the seed's)", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk(""), R.int(node.port)) } end },
    { "host '?' (the seed's)", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk("?"), R.int(node.port)) } end },
    { "a 10000-byte host", function() return R.arr{ entry(R.int(0), R.int(16383), R.bulk(("h"):rep(10000)), R.int(node.port)) } end },
    { "a nil host", function() return R.arr{ entry(R.int(0), R.int(16383), R.nil_bulk, R.int(node.port)) } end },
    { "100 nodes (more than 64)", function()
        local t = {}
        for i = 1, 100 do t[i] = entry(R.int(i * 100), R.int(i * 100 + 99), R.bulk("127.0.0.1"), R.int(40000 + i)) end
        t[#t + 1] = here(0, 99)
        return R.arr(t) end },
    { "a malformed first entry, then 100 nodes", function()   -- (the map's
        local t = { entry(R.int(0), R.int(99), R.bulk("127.0.0.1"), R.int(0)) }  -- passes
        for i = 1, 100 do t[#t + 1] = entry(R.int(i * 100), R.int(i * 100 + 99), R.bulk("127.0.0.1"), R.int(40000 + i)) end
        t[#t + 1] = here(0, 99)                               -- part whatever entry 0 is)
        return R.arr(t) end },
    { "a reply cut short, then close", function() return { raw = "*1\r\n*3\r\n:0\r\n", close = true } end, "fails" },
    { "a 100 MB bulk string that never arrives", function() return { raw = "*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$104857600\r\n", hang = true } end, "fails" },
  }
  for _, case in ipairs(thin(slots_cases)) do
    it(("CLUSTER SLOTS with %s"):format(case[1]), function()
      node.set{ slots = self_map(), commands = { ["CLUSTER SLOTS"] = { reply = case[2](), times = 1 } } }
      local t, r = elapsed(function() return cconnect() end)
      assert.is_true(t < BOUND, ("connect took %.1f s"):format(t))
      if case[3] == "fails" then
        assert_fails(r, "connect")
        return
      end
      if not r[1] then assert_fails(r, "connect"); return end
      local c = r[1]
      for k = 1, 3 do
        local l = c:lock(("c:slots:%d"):format(k))
        local a = table.pack(l:acquire{ wait = 0 })
        if a[1] then assert(l:release()) else assert_fails(a, "acquire") end
      end
      local p = table.pack(c:ping())
      assert(p[1] == true or assert_fails(p, "ping"), show(p))
      c:close()
    end)
  end

  local moved_cases = {
    { "slot 99999", function(other) return R.err("MOVED 99999 127.0.0.1:" .. other.port) end },
    { "slot -5", function(other) return R.err("MOVED -5 127.0.0.1:" .. other.port) end },
    { "slot 'abc'", function(other) return R.err("MOVED abc 127.0.0.1:" .. other.port) end },
    { "no address", function(other) return R.err("MOVED 1") end },
    { "no port", function(other) return R.err("MOVED 1 127.0.0.1") end },
    { "port 0", function(other) return R.err("MOVED 1 127.0.0.1:0") end },
    { "port -1", function(other) return R.err("MOVED 1 127.0.0.1:-1") end },
    { "a 300-byte host", function(other) return R.err("MOVED 1 " .. ("h"):rep(300) .. ":1") end },
    { "an empty host", function(other) return R.err("MOVED 1 :" .. other.port) end },
    { "nothing after MOVED", function(other) return R.err("MOVED ") end },
    { "ASK with slot 99999", function(other) return R.err("ASK 99999 127.0.0.1:" .. other.port) end },
    { "ASK with no port", function(other) return R.err("ASK 1 127.0.0.1:") end },
  }
  for _, case in ipairs(thin(moved_cases)) do
    it(("a redirect with %s: nil, err"):format(case[1]), function()
      local other = fake.start{}            -- records connections
      finally(other.stop)
      node.set{ slots = self_map() }
      local c = assert(cconnect())
      node.set{ slots = self_map(), scripts = { acquire = case[2](other) } }
      local l = c:lock("c:moved")
      assert_fails(table.pack(l:acquire{ wait = 0 }))
      assert.is_false(l:held())
      assert.equals(0, other.accepts())
      node.set{ slots = self_map() }
      assert_works(c, "c-moved")
      c:close()
    end)
  end

  it("-MOVED to a node its map then names: follows it", function()
    local two = fake.start{}
    two.set{ slots = { { 0, 16383, two.port } } }
    node.set{ slots = self_map() }
    local c = assert(cconnect())
    node.set{ slots = { { 0, 16383, two.port } },
              scripts = { acquire = R.err("MOVED 1 127.0.0.1:" .. two.port) } }
    local l = c:lock("c:follow")
    assert(l:acquire{ wait = 0 })
    assert.is_true(two.count("EVALSHA acquire") > 0)
    assert(l:release())
    c:close()
    two.stop()
  end)

  it("-MOVED back and forth between two nodes: nil, err", function()
    local two = fake.start{}
    local map = { { 0, 16383, node.port }, { 0, 0, two.port } }
    node.set{ slots = map, scripts = { ["*"] = R.err("MOVED 1 127.0.0.1:" .. two.port) } }
    two.set{ slots = map, scripts = { ["*"] = R.err("MOVED 1 127.0.0.1:" .. node.port) } }
    local c = assert(cconnect())
    local l = c:lock("c:pingpong")
    assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.is_false(l:held())
    node.set{ slots = self_map() }
    two.set{}
    c:close()
    two.stop()
  end)

  it("-ASK to a node whose ASKING reply is garbage: nil, err", function()
    local two = fake.start{ commands = { ASKING = "garbage\r\n" } }
    local map = { { 0, 16383, node.port }, { 0, 0, two.port } }
    node.set{ slots = map, scripts = { acquire = R.err("ASK 1 127.0.0.1:" .. two.port) } }
    local c = assert(cconnect())
    local l = c:lock("c:asking")
    assert_fails(table.pack(l:acquire{ wait = 0 }))
    assert.is_false(l:held())
    node.set{ slots = self_map() }
    assert_works(c, "c-asking")
    c:close()
    two.stop()
  end)

  it("-TRYAGAIN every time: nil, err at the end of wait", function()
    node.set{ slots = self_map(), scripts = { ["*"] = { match = "c:again", reply = R.err("TRYAGAIN x") } } }
    local c = assert(cconnect())
    local l = c:lock("c:again")
    local t, r = elapsed(function() return l:acquire{ wait = 0.3 } end)
    assert_fails(r)
    assert.is_true(t < BOUND)
    assert.is_false(l:held())
    node.set{ slots = self_map() }
    assert_works(c, "c-again")
    c:close()
  end)
end)

-- ---- Redlock ---------------------------------------------------------------

describe("Redlock: masters that answer #binding", function()
  local a, b, c3
  lazy_setup(function() a = fake.start{}; b = fake.start{}; c3 = fake.start{} end)
  lazy_teardown(function() fake.stop_all() end)
  local function rconnect() return connect(nil, { servers = { a.url, b.url, c3.url } }) end

  for _, shape in ipairs(thin(shapes({ port = 1 }))) do
    if not shape.slow then
      it(("%s from every master: nil, err"):format(shape[1]), function()
        local c = assert(rconnect())
        for _, s in ipairs{ a, b, c3 } do
          s.set{ scripts = { acquire = { match = "rl:", reply = shape[2] } } }
        end
        local l = c:lock("rl:x")
        assert_fails(table.pack(l:acquire{ wait = 0 }))
        assert.is_false(l:held())
        for _, s in ipairs{ a, b, c3 } do s.set{} end
        assert_works(c, "rl")
        c:close()
      end)
    end
  end

  it("a malformed reply from one master of three: the quorum decides", function()
    local c = assert(rconnect())
    a.set{ scripts = { acquire = R.nest(1000) } }
    local l = c:lock("rl:one")
    assert(l:acquire{ wait = 0 })
    assert(l:release())
    a.set{}
    c:close()
  end)

  it("inspect: malformed replies from every master: nil, err", function()
    local c = assert(rconnect())
    local bad = R.arr{ R.int(1), R.bulk("5"), R.int(1000), R.arr{ R.int(1), R.int(1) },
                       R.empty_array, R.int(0), R.int(0), R.bulk("") }
    for _, s in ipairs{ a, b, c3 } do s.set{ scripts = { inspect = bad } } end
    assert_fails(table.pack(c:inspect("rl:inspect")))
    for _, s in ipairs{ a, b, c3 } do s.set{} end
    c:close()
  end)
end)
