-- names_spec.lua: lock names made of braces and odd bytes, on Redis
-- Cluster and on one server. A lock's keys share the hash tag between the
-- first "{" and the first "}" after it; a name that starts with "}" would
-- leave that tag empty (P{}x}: the whole key is hashed, and the lock, its
-- queue and its channel land on three slots), so such a name, and one
-- that starts with the escape byte "\1", is written "\1" .. name inside
-- the braces. Every primitive must work with every name, and an ordinary
-- name's keys stay what they always were.
local dlock = require "dlock"
local helper = require "helper"
local topology = require "topology"

local LONG = "}" .. ("n"):rep(298) .. "{"             -- 300 bytes, escaped too
local NAMES = { "}x", "}", "}}", "{", "{}", "a}b", "{a}", "\1}x", "\1", "a\0b", LONG }

local function show(name) return (("%q"):format(name):gsub("\\\n", "\\n")) end

-- The waiters' locks have an explicit owner: a coroutine's holds would be
-- its own, out of reach of the main one that checks and releases them.
local W = { owner = "w" }

-- A client whose waits yield (to the resume loop of `waits` below).
local function yielding(opts)
  local o = { scheduler = { wait = function() coroutine.yield() end } }
  for k, v in pairs(opts) do o[k] = v end
  return assert(dlock.connect(o))
end

-- Run take() in a coroutine of the yielding client `w`: it must wait until
-- give() (run once it waits) frees what it waits for, then get it,
-- woken by the release's message. Returns give's results, then take's.
local function waits(w, take, give, what)
  local got
  local wakeups = w:stats().wakeups
  local co = coroutine.create(function() got = table.pack(take()) end)
  for _ = 1, 5 do                                       -- it looks, then waits
    local ok, err = coroutine.resume(co)
    assert(ok, err)
    assert.equals("suspended", coroutine.status(co), what .. ": the waiter did not wait")
    dlock.sleep(0.02)
  end
  local gave = table.pack(give())
  local deadline = dlock.now() + 5
  while coroutine.status(co) ~= "dead" and dlock.now() < deadline do
    local ok, err = coroutine.resume(co)
    assert(ok, err)
    dlock.sleep(0.005)
  end
  assert.equals("dead", coroutine.status(co), what .. ": the waiter never got it")
  assert.truthy(got[1], what .. ": " .. tostring(got[2]))
  assert.is_true(w:stats().wakeups > wakeups, what .. ": the waiter was not woken")
  return gave, got
end

-- The checks every primitive gets, for every name. Each kind has a prefix
-- of its own (one kind per name): `env(prefix)` gives { a = a client,
-- b = a yielding client, prefix = prefix }, closed after the test.
local function primitives(connect)
  local open = {}
  local function env(prefix)
    local e = { prefix = prefix, a = assert(dlock.connect(connect{ prefix = prefix })),
                b = yielding(connect{ prefix = prefix }) }
    open[#open + 1] = e
    return e
  end
  after_each(function()
    for _, e in ipairs(open) do e.a:close(); e.b:close() end
    open = {}
  end)
  -- fn(e, name, what) for every name, under the prefix of `kind`.
  local function each(kind, fn)
    local e = env(kind .. ":")
    for _, name in ipairs(NAMES) do fn(e, name, kind .. " " .. show(name)) end
  end

  it("lock: acquire, inspect, a waiter woken by the release, tostring", function()
    each("lock", function(e, name, what)
      local la, lb = e.a:lock(name), e.b:lock(name, W)
      assert(la:acquire(), what)
      assert.equals(1, e.a:call("EXISTS", helper.lock_key(name, e.prefix)), what)
      assert.equals('dlock.Lock: "' .. name .. '" (held x1)', tostring(la))
      local info = assert(e.a:inspect(name), what)
      assert.equals(1, #info.owners, what)
      assert.equals(e.a.id, info.owners[1].client, what)
      assert.equals(1, info.owners[1].count, what)
      local gave = waits(e.b, function() return lb:acquire{ wait = 10 } end,
                         function() return la:release() end, what)
      assert.same({ true, 0, n = 2 }, gave, what)
      assert.same({ true, 0 }, { lb:release() }, what)
      assert.is_nil(e.a:inspect(name), what)
    end)
  end)

  it("fair_lock: the release hands the lock to the queued waiter", function()
    each("fair", function(e, name, what)
      local fa, fb = e.a:fair_lock(name), e.b:fair_lock(name, W)
      assert(fa:acquire(), what)
      local t = fa:token()
      local gave = waits(e.b, function() return fb:acquire{ wait = 10 } end, function()
        local info = assert(e.a:inspect(name), what)
        assert.equals(1, info.waiters, what)
        return fa:release()
      end, what)
      assert.same({ true, 0, n = 2 }, gave, what)
      assert.is_true(fb:token() > t, what)
      assert.same({ true, 0 }, { fb:release() }, what)
    end)
  end)

  it("rwlock: a writer waits for the reader, a reader for the writer", function()
    each("rw", function(e, name, what)
      local ra, rb, rc = e.a:rwlock(name), e.b:rwlock(name, W), e.b:rwlock(name, { owner = "w2" })
      assert(ra.read:acquire(), what)
      assert.equals("read", assert(e.a:inspect(name)).owners[1].mode, what)
      local gave = waits(e.b, function() return rb.write:acquire{ wait = 10 } end,
                         function() return ra.read:release() end, what .. " (write)")
      assert.same({ true, 0, n = 2 }, gave, what)
      assert.equals("write", assert(e.a:inspect(name)).owners[1].mode, what)
      gave = waits(e.b, function() return rc.read:acquire{ wait = 10 } end, function()
        return rb.write:release()
      end, what .. " (read)")
      assert.same({ true, 0, n = 2 }, gave, what)
      assert.same({ true, 0 }, { rc.read:release() }, what)
    end)
  end)

  it("semaphore: a released permit wakes the waiter", function()
    each("sem", function(e, name, what)
      local sa, sb = e.a:semaphore(name, 1), e.b:semaphore(name, 1)
      local id = assert(sa:acquire(), what)
      assert.equals(0, sa:available(), what)
      assert.equals(id, assert(e.a:inspect(name)).owners[1].owner, what)
      local gave, got = waits(e.b, function() return sb:acquire{ wait = 10 } end,
                              function() return sa:release(id) end, what)
      assert.is_true(gave[1], what)
      assert.is_true(sb:release(got[1]), what)
      assert.equals(1, sa:available(), what)
    end)
  end)

  it("multi_lock over every name, and one woken when a name is released", function()
    local e = env("multi:")
    local ma, mb = e.a:multi_lock(NAMES), e.b:multi_lock(NAMES, W)
    assert(ma:acquire())
    for _, name in ipairs(NAMES) do
      assert.equals(ma:tokens()[name], e.a:lock(name):token(), show(name))
    end
    assert.same({ true, 0 }, { ma:release() })
    for _, name in ipairs(NAMES) do                  -- it waits for that one name
      local what = "multi_lock, " .. show(name) .. " held"
      local la = e.a:lock(name)
      assert(la:acquire(), what)
      local gave = waits(e.b, function() return mb:acquire{ wait = 10 } end,
                         function() return la:release() end, what)
      assert.same({ true, 0, n = 2 }, gave, what)
      assert.same({ true, 0 }, { mb:release() }, what)
    end
  end)

  it("guard: a command on a key of the lock's hash tag", function()
    each("guard", function(e, name, what)
      local l = e.a:lock(name)
      assert(l:acquire(), what)
      local data = "data{" .. helper.lock_tag(name) .. "}"
      assert.equals("OK", l:guard("SET", data, name), what)
      assert.equals(name, e.a:call("GET", data), what)
      assert.same({ true, 0 }, { l:release() }, what)
      local ok, err = l:guard("SET", data, "late")
      assert.is_nil(ok, what)
      assert.equals("not held", err, what)
    end)
  end)

  it("force_release frees the lock and wakes its waiter", function()
    each("force", function(e, name, what)
      local la, lb = e.a:lock(name), e.b:lock(name, W)
      assert(la:acquire{ expire = 30 }, what)
      local gave = waits(e.b, function() return lb:acquire{ wait = 10 } end,
                         function() return e.a:lock(name):force_release() end, what)
      assert.same({ true, n = 1 }, gave, what)
      assert.is_true(lb:force_release(), what)
      assert.is_false(lb:force_release(), what)
      assert.is_nil(e.a:inspect(name), what)
      assert.is_nil((la:release()))                     -- lost, or not held
    end)
  end)
end

-- What a prefix's keys are: literal, so that the rule is checked here and
-- not only restated.
local KEYS = {
  ["job"] = "dlock:{job}", ["}x"] = "dlock:{\1}x}", ["}"] = "dlock:{\1}}",
  ["}}"] = "dlock:{\1}}}", ["{"] = "dlock:{{}", ["{}"] = "dlock:{{}}",
  ["a}b"] = "dlock:{a}b}", ["{a}"] = "dlock:{{a}}", ["\1}x"] = "dlock:{\1\1}x}",
  ["\1"] = "dlock:{\1\1}", ["a\0b"] = "dlock:{a\0b}", ["x\1"] = "dlock:{x\1}",
}

-- A describe's servers, from start() (their handle, with stop(), and the
-- options that reach them), and two clients of them: s.a, and s.b whose
-- waits yield.
local function servers(start)
  local s = {}
  function s.connect(o)
    for k, v in pairs(s.opts) do o[k] = v end
    o.lease = 10
    return o
  end
  lazy_setup(function()
    s.h, s.opts = start()
    s.a = assert(dlock.connect(s.connect{}))
    s.b = yielding(s.connect{})
  end)
  lazy_teardown(function()
    if s.a then s.a:close() end
    if s.b then s.b:close() end
    if s.h then s.h.stop() end
  end)
  return s
end

describe("odd lock names on Redis Cluster #binding", function()
  local s = servers(function()
    local cl = topology.cluster(3)
    return cl, { cluster = cl.urls, command_timeout = 1 }
  end)

  it("has a rule that puts a lock's hash, queue, channels and counter on one slot", function()
    for _, name in ipairs(NAMES) do
      local k = helper.lock_key(name)
      local slot = s.a:call("CLUSTER", "KEYSLOT", k)
      local others = { k .. ":q", k .. ":ch", k .. ":ch:" .. s.a.id, helper.fence_key(name) }
      for _, x in ipairs(others) do
        assert.equals(slot, s.a:call("CLUSTER", "KEYSLOT", x), show(name) .. ": " .. show(x))
      end
    end
  end)

  primitives(s.connect)

  it("guard names the hash tag a key of the lock's slot needs", function()
    local l = s.a:lock("}x")
    assert(l:acquire())
    local ok, err = pcall(l.guard, l, "SET", "data{}x}", "v")      -- an empty tag
    assert.is_false(ok)
    assert.truthy(err:find("as in 'data{}x}{\1}x}'", 1, true), err)
    assert.equals("OK", l:guard("SET", "data{\1}x}", "v"))
    assert(l:release())
  end)

  it("dlock status names the lock as given", function()
    local name = "}x"
    local l = s.a:lock(name)
    assert(l:acquire())
    local f = assert(io.popen(("%s %s/bin/dlock --cluster %s status '%s' 2>&1; echo \"exit=$?\"")
      :format(helper.lua_cmd(), helper.root, s.h.urls[1], name)))
    local out = f:read("*a")
    f:close()
    assert.matches("^}x: held, ttl [%d.]+ s, token %d+, waiters 0 %(approximate%)\n", out)
    assert.matches("exit=0\n$", out)
    assert(l:release())
  end)
end)

describe("odd lock names on one server #binding", function()
  local s = servers(function()
    local srv = helper.start_redis()
    return srv, { url = srv.url }
  end)

  it("keeps an ordinary name's keys, and escapes only a name that starts with } or \\1", function()
    for name, key in pairs(KEYS) do
      assert.equals(key, helper.lock_key(name), show(name))
      local l = s.a:lock(name)
      assert(l:acquire(), show(name))
      assert.equals(1, s.a:call("EXISTS", key), show(name))
      assert(l:release())
    end
    local f = s.b:fair_lock("job", W)                      -- a queue and a channel
    local h = s.a:fair_lock("job")
    assert(h:acquire())
    waits(s.b, function() return f:acquire{ wait = 10 } end, function()
      assert.equals("hash", s.a:call("TYPE", "dlock:{job}:q"))
      return h:release()
    end, "job")
    assert(f:release())
    assert.equals(1, s.a:call("EXISTS", "dlock:{job}"))
    local counter = "dlock:{" .. require("dlock.core").slot_tag(
      require("dlock.core").key_slot("dlock:{job}")) .. "}:fence"
    assert.equals(counter, helper.fence_key("job"))
    assert.equals(1, s.a:call("EXISTS", counter))
  end)

  primitives(s.connect)

  it("names a long hold as given in held_long and in the warning", function()
    local said = {}
    local c = assert(dlock.connect{ url = s.h.url, warn_hold = 0.05,
                                    log = function(_, msg) said[#said + 1] = msg end })
    local l = c:lock("}x")
    assert(l:acquire())
    assert(helper.wait_for(function()
      c:poll()
      return #c:stats().held_long > 0 and #said > 0
    end, 5))
    assert.same({ "}x" }, c:stats().held_long)
    assert.matches("^lock '}x' has been held", said[1])
    assert(l:release())
    c:close()
  end)
end)
