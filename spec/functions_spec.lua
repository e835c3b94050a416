-- How dlock runs its scripts: as one function library (FCALL) where the
-- server takes it, else with EVALSHA; what a server that loses or refuses
-- the library does to held locks; and both ways out of memory.
local dlock = require "dlock"
local core = require "dlock.core"
local helper = require "helper"

local function calls(srv, cmd)
  local s = srv.cli("info", "commandstats")
  return tonumber(s:match("cmdstat_" .. cmd .. ":calls=(%d+)")) or 0
end

-- The names of the libraries srv has (FUNCTION LIST), and how many
-- functions each has.
local function libraries(srv)
  local t, lib = {}, nil
  for l in srv.cli("function", "list"):gmatch("[^\n]+") do
    if lib == "" then lib = l; t[lib] = 0
    elseif l == "library_name" then lib = ""
    elseif lib and l:match("^dlock_%x+_[%w_]+$") then t[lib] = t[lib] + 1 end
  end
  return t
end

-- One cycle of each kind of lock on c: acquire, reenter, release.
local function cycles(c, name)
  local l = c:lock(name)
  assert(l:acquire()); assert(l:acquire()); assert(l:release()); assert(l:release())
  local f = c:fair_lock(name .. ".f")
  assert(f:acquire()); assert(f:release())
  local rw = c:rwlock(name .. ".rw")
  assert(rw.read:acquire()); assert(rw.read:release())
  assert(rw.write:acquire()); assert(rw.write:release())
  local s = c:semaphore(name .. ".s", 2)
  local permit = assert(s:acquire()); assert(s:release(permit))
end

describe("dlock's scripts on the server #binding", function()
  local srv
  before_each(function() srv = helper.start_redis() end)
  after_each(function() srv.stop() end)

  -- Lock cycles on client c (then closed) run with EVALSHA alone, and
  -- leave no library on the server.
  local function evalsha_only(c)
    cycles(c, helper.unique_name("fn"))
    assert.same({}, libraries(srv))
    assert.equals(0, calls(srv, "fcall"))
    assert.is_true(calls(srv, "evalsha") >= 9)
    c:close()
  end

  local text, functions = core.library()
  local libname = text:match("^#!lua name=(dlock_%x+)\n")

  it("are one library, named by a hash of its text, a function per script", function()
    assert.is_string(libname)
    local n = 0
    for name, fn in pairs(functions) do
      n = n + 1
      assert.equals(libname .. "_" .. name, fn)
      assert.truthy(text:find("function_name = '" .. fn .. "'", 1, true), fn)
    end
    local scripts = 0
    for _ in pairs(core.scripts()) do scripts = scripts + 1 end
    assert.equals(scripts, n)
  end)

  it("run as functions by default on Redis 7: loaded once, then only FCALL", function()
    local c = assert(helper.connect_as_is{ url = srv.url })
    local name = helper.unique_name("fn")
    cycles(c, name)
    local n = 0
    for _ in pairs(functions) do n = n + 1 end
    assert.same({ [libname] = n }, libraries(srv))
    local before = calls(srv, "fcall")
    cycles(c, name)
    assert.is_true(calls(srv, "fcall") - before >= 9)
    assert.equals(0, calls(srv, "evalsha"))
    -- a second client finds the library there and loads nothing new
    local c2 = assert(helper.connect_as_is(srv.url))
    cycles(c2, name .. "2")
    assert.equals(0, calls(srv, "evalsha"))
    c2:close(); c:close()
  end)

  it("run with EVALSHA, loading no library, with functions = false", function()
    local c = assert(dlock.connect{ url = srv.url, functions = false })
    evalsha_only(c)
  end)

  it("run with EVALSHA where the server refuses the library (an ACL)", function()
    assert.equals("OK", srv.cli("acl", "setuser", "nofn", "on", ">pw", "~*", "&*", "+@all",
                                "-function"))
    local told = {}
    local c = assert(dlock.connect{ url = srv.url, username = "nofn", password = "pw",
                                    functions = true,
                                    log = function(_, msg) told[#told + 1] = msg end })
    evalsha_only(c)
    assert.matches("refused dlock's function library %(NOPERM", table.concat(told, "\n"))
  end)

  it("are loaded again when the server loses them under a hold", function()
    for _, fn in ipairs({ true, false }) do
      local c = assert(dlock.connect{ url = srv.url, lease = 0.3, functions = fn })
      local name = helper.unique_name("flush")
      local l = c:lock(name)
      assert(l:acquire())
      assert.equals("OK", srv.cli("function", "flush"))
      assert.equals("OK", srv.cli("script", "flush"))
      dlock.sleep(0.5)                   -- the watchdog's renewals meet it first
      assert.is_true(l:held())
      assert.is_true(tonumber(srv.cli("pttl", "dlock:{" .. name .. "}")) > 0)
      assert.equals(0, c:stats().renew_errors)   -- each renewal went through
      assert.equals("OK", srv.cli("function", "flush"))
      assert.equals("OK", srv.cli("script", "flush"))
      assert.same({ true, 0 }, { l:release() })   -- and here the Lua thread's
      assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"))
      cycles(c, name)
      assert.equals(0, c:stats().lost)
      c:close()
    end
  end)

  it("renew and release out of memory, and refuse a new hold with the error", function()
    for _, fn in ipairs({ true, false }) do
      local c = assert(dlock.connect{ url = srv.url, lease = 0.3, functions = fn })
      local name = helper.unique_name("oom")
      local l, f = c:lock(name), c:fair_lock(name .. ".fair")
      assert(l:acquire())
      assert(f:acquire())                -- (both in their short form)
      local d = assert(dlock.connect{ url = srv.url, lease = 5, functions = fn })
      assert(d:lock(name .. ".dropped"):acquire())
      local used = tonumber(srv.cli("info", "memory"):match("used_memory:(%d+)"))
      srv.cli("config", "set", "maxmemory-policy", "noeviction")
      srv.cli("config", "set", "maxmemory", ("%d"):format(math.floor(used / 2)))
      assert.matches("^OOM", srv.cli("set", "x", "y"))
      local ok, err = c:lock(name .. ".other"):acquire()
      assert.is_nil(ok)
      assert.matches("OOM command not allowed", err)
      dlock.sleep(0.6)                   -- renewed twice at least
      assert.is_true(l:held())
      assert.is_true(tonumber(srv.cli("pttl", "dlock:{" .. name .. "}")) > 0)
      assert.same({ true, 0 }, { l:release() })
      assert.is_true(helper.is_free(srv, "dlock:{" .. name .. "}"))
      assert.same({ true, 0 }, { f:release() })
      assert.is_true(helper.is_free(srv, "dlock:{" .. name .. ".fair}"))
      d:close()                          -- its hold dropped
      assert.is_true(helper.is_free(srv, "dlock:{" .. name .. ".dropped}"))
      srv.cli("config", "set", "maxmemory", "0")
      assert.equals(0, c:stats().lost)
      c:close()
    end
  end)

  it("refuse a functions option that is not a boolean", function()
    local ok, err = pcall(dlock.connect, { url = srv.url, functions = "yes" })
    assert.is_false(ok)
    assert.matches("functions", err)
    assert.matches("boolean expected", err)
  end)
end)
