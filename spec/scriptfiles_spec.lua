-- scriptfiles_spec.lua: the Redis scripts are files (src/redis/scripts/), put
-- into the core by tools/gen-scripts.lua as the committed src/redis/scripts.h.
-- The header must be what the files make (else: run `make`), and the
-- generator must hold each script to its header.
local helper = require "helper"

local ROOT = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/.."
local gen = dofile(ROOT .. "/tools/gen-scripts.lua")

local function write(path, s)
  local f = assert(io.open(path, "wb"))
  f:write(s)
  f:close()
end

describe("the scripts' files", function()
  it("make the committed src/redis/scripts.h (stale: run make, and commit it)", function()
    local out = ("%s/scripts-%s.h"):format(helper.tmp, helper.unique_name("gen"):gsub("%W", "_"))
    local cmd = ("%s %s/tools/gen-scripts.lua %s/src/redis/scripts %s"):format(helper.lua, ROOT, ROOT, out)
    local r = os.execute(cmd)
    assert.is_true(r == true or r == 0, cmd)
    local made = assert(helper.read_file(out))
    os.remove(out)
    assert.is_true(made == helper.read_file(ROOT .. "/src/redis/scripts.h"),
                   "src/redis/scripts.h is stale: run make and commit it")
  end)

  it("are the scripts the built core runs, and its function library", function()
    local core = require("dlock.core").scripts()
    local names = gen.names(ROOT .. "/src/redis/scripts")
    assert.is_true(#names >= 20)
    for _, name in ipairs(names) do
      assert.equals((gen.script(ROOT .. "/src/redis/scripts", name)), core[name], name)
    end
    local n = 0
    for _ in pairs(core) do n = n + 1 end
    assert.equals(#names, n)
    local text, functions = require("dlock.core").library()
    local made, lib = gen.library_text(ROOT .. "/src/redis/scripts")
    assert.is_true(text == made, "the core's function library is not the generator's")
    for _, name in ipairs(names) do assert.equals(lib .. "_" .. name, functions[name]) end
  end)

  it("each have a step-by-step spec of their own (a describe named for the file)", function()
    local specs = {}
    local p = assert(io.popen("ls " .. ROOT .. "/spec"))
    for f in p:lines() do
      if f:match("^scripts.*_spec%.lua$") then
        local h = assert(io.open(ROOT .. "/spec/" .. f, "rb"))
        specs[#specs + 1] = h:read("*a")
        h:close()
      end
    end
    p:close()
    local all = table.concat(specs, "\n")
    for _, name in ipairs(gen.names(ROOT .. "/src/redis/scripts")) do
      assert.truthy(all:find('describe%("' .. name .. '%.lua[" ]'), name .. ".lua has no spec")
    end
  end)

  it("give every script a layout: its keys and arguments by name", function()
    local y = helper.script_layouts()
    assert.same({ "lock", "counter" }, y.acquire.keys)
    assert.same({ "owner", "req", "seq", "lease_ms", "expect", "token", "waited", "form" },
                y.acquire.args)
    assert.same({ "counter", "lock" }, y.fence.keys)
    assert.is_true(y.renew.repeats)                      -- KEYS[i], ARGV[3i-2]...
    assert.same({ "req", "lease_ms", "token" }, y.renew.args)
  end)

  describe("hold a script to its header", function()
    local dir
    before_each(function()
      dir = ("%s/%s"):format(helper.tmp, helper.unique_name("scripts"):gsub("%W", "_"))
      assert(os.execute("mkdir -p " .. dir .. "/lib"))
      write(dir .. "/lib/twice.lua", "-- twice(x)\nlocal function twice(x) return 2 * x end\n")
    end)
    local function try(text)
      write(dir .. "/a.lua", text)
      local ok, err = pcall(gen.header_text, dir)
      return ok, tostring(err)
    end
    local HEAD = "-- a script\n-- KEYS[1] lock: the lock\n-- ARGV[1] n: a number\n-- returns: a number\n"

    it("and resolve its includes, without comment lines", function()
      local ok, h = try(HEAD .. "--#include lib/twice.lua\n-- a comment\n" ..
                        "local n = tonumber(ARGV[1])\nreturn twice(n) + #KEYS[1]\n")
      assert.is_true(ok, h)
      assert.truthy(h:find('"local function twice(x) return 2 * x end\\n"', 1, true))
      assert.falsy(h:find("a comment", 1, true))
      assert.truthy(h:find("[DL_S_A] = { \"a\", 1, 1, 0,", 1, true))
    end)

    it("writing each helper once, which the scripts that include it name", function()
      write(dir .. "/b.lua", HEAD .. "--#include lib/twice.lua\nreturn twice(ARGV[1]) + #KEYS[1]\n")
      local ok, h = try(HEAD .. "--#include lib/twice.lua\nreturn twice(ARGV[1]) - #KEYS[1]\n")
      assert.is_true(ok, h)
      local _, n = h:gsub("local function twice", "")
      assert.equals(1, n)
      assert.truthy(h:find("[DL_S_A] =\n        DL_LIB_TWICE\n", 1, true))
      assert.truthy(h:find("[DL_S_B] =\n        DL_LIB_TWICE\n", 1, true))
    end)

    it("putting a script's fast path, its code before its includes, before every helper", function()
      local ok, h = try(HEAD .. "if ARGV[1] == '0' then return #KEYS[1] end\n" ..
                        "--#include lib/twice.lua\nreturn twice(ARGV[1]) + #KEYS[1]\n")
      assert.is_true(ok, h)
      assert.truthy(h:find("[DL_S_A] =\n        \"if ARGV[1] == '0' then return #KEYS[1] end\\n\"\n" ..
                           "        DL_LIB_TWICE\n", 1, true), h)
    end)

    it("refusing a call of a helper in the fast path, where none is made yet", function()
      local ok, err = try(HEAD .. "if ARGV[1] == '0' then return twice(1) end\n" ..
                          "--#include lib/twice.lua\nreturn twice(ARGV[1]) + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("twice%(%) is called before the includes", err)
    end)

    it("refusing an include after the code that follows the includes, and any in a helper after its code", function()
      write(dir .. "/lib/other.lua", "local function other(x) return x end\n")
      local ok, err = try(HEAD .. "--#include lib/twice.lua\nlocal n = tonumber(ARGV[1])\n" ..
                          "--#include lib/other.lua\nreturn other(twice(n)) + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("an include comes before the file's code", err)
      write(dir .. "/lib/twice.lua", "local function twice(x) return 2 * x end\n--#include lib/other.lua\n")
      ok, err = try(HEAD .. "--#include lib/twice.lua\nreturn twice(ARGV[1]) + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("lib/twice.lua:2: an include comes before the file's code", err)
    end)

    it("refusing an argument it does not name", function()
      local ok, err = try(HEAD .. "return ARGV[1] + ARGV[2] + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("ARGV%[2%] is not in its header", err)
    end)

    it("refusing a name it never reads", function()
      local ok, err = try(HEAD .. "return #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("ARGV%[1%] is in its header but never read", err)
    end)

    it("refusing a helper that reads ARGV", function()
      write(dir .. "/lib/twice.lua", "local function twice() return 2 * ARGV[1] end\n")
      local ok, err = try(HEAD .. "--#include lib/twice.lua\nreturn twice() + ARGV[1] + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("a helper reads KEYS or ARGV", err)
    end)

    it("refusing a header that says nothing of the reply", function()
      local ok, err = try("-- a script\n-- KEYS[1] lock: the lock\nreturn #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("returns", err)
    end)

    it("refusing a helper that calls another lib file's function it does not include", function()
      write(dir .. "/lib/quad.lua", "-- quad(x)\nlocal function quad(x) return twice(twice(x)) end\n")
      local ok, err = try(HEAD .. "--#include lib/twice.lua\n--#include lib/quad.lua\n" ..
                          "return quad(tonumber(ARGV[1])) + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("lib/quad.lua:2: twice%(%) is lib/twice.lua's: include it here", err)
      -- nor a script that has it only through another helper's include
      write(dir .. "/lib/quad.lua", "--#include lib/twice.lua\nlocal function quad(x) return twice(twice(x)) end\n")
      ok, err = try(HEAD .. "--#include lib/quad.lua\nreturn twice(quad(tonumber(ARGV[1]))) + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("a%.lua:6: twice%(%) is lib/twice.lua's: include it here", err)
      ok, err = try(HEAD .. "--#include lib/twice.lua\n--#include lib/quad.lua\n" ..
                    "return twice(quad(tonumber(ARGV[1]))) + #KEYS[1]\n")
      assert.is_true(ok, err)
    end)

    it("refusing a script that writes with no resend: line in its header", function()
      local body = "redis.call('hset', KEYS[1], 'n', ARGV[1])\nreturn 1\n"
      local ok, err = try(HEAD .. body)
      assert.is_false(ok)
      assert.matches("it writes %(HSET%) but its header says nothing of a resend", err)
      ok, err = try(HEAD .. "local pub = ARGV[1]\nredis.call(pub, KEYS[1], 'x')\nreturn 1\n")
      assert.is_false(ok)
      assert.matches("it writes %(a command named at run time %(pub%)%)", err)
      ok, err = try(HEAD .. "-- resend: sets n again: nothing more changes\n" .. body)
      assert.is_true(ok, err)
      ok, err = try(HEAD .. "return redis.call('hget', KEYS[1], ARGV[1])\n")   -- reads only
      assert.is_true(ok, err)
    end)

    it("writing them as one function library too: each helper once, then a function per script", function()
      write(dir .. "/lib/quad.lua", "--#include lib/twice.lua\nlocal function quad(x) return twice(twice(x)) end\n")
      write(dir .. "/b.lua", HEAD .. "--#include lib/quad.lua\nreturn quad(ARGV[1]) + #KEYS[1]\n")
      local ok, h = try(HEAD .. "if ARGV[1] == '0' then return 0 end\n" ..
                        "--#include lib/twice.lua\nreturn twice(ARGV[1]) + #KEYS[1]\n")
      assert.is_true(ok, h)
      local text, lib = gen.library_text(dir)
      assert.matches("^dlock_%x+$", lib)
      assert.equals("#!lua name=" .. lib .. "\n" ..
        "local function twice(x) return 2 * x end\n" ..
        "local function quad(x) return twice(twice(x)) end\n" ..
        "redis.register_function{function_name = '" .. lib .. "_a',\n" ..
        "  flags = {'no-writes'}, callback = function(KEYS, ARGV)\n" ..
        "if ARGV[1] == '0' then return 0 end\nreturn twice(ARGV[1]) + #KEYS[1]\nend}\n" ..
        "redis.register_function{function_name = '" .. lib .. "_b',\n" ..
        "  flags = {'no-writes'}, callback = function(KEYS, ARGV)\n" ..
        "return quad(ARGV[1]) + #KEYS[1]\nend}\n", text)
      assert.truthy(h:find('[DL_S_B] = "' .. lib .. '_b",', 1, true), h)
      -- another text, another name
      write(dir .. "/b.lua", HEAD .. "--#include lib/quad.lua\nreturn quad(ARGV[1]) - #KEYS[1]\n")
      local _, lib2 = gen.library_text(dir)
      assert.are_not.equal(lib, lib2)
    end)

    it("refusing two lib files that define one name: the library holds them in one scope", function()
      write(dir .. "/lib/thrice.lua", "local function twice(x) return 3 * x end\n")
      local ok, err = try(HEAD .. "--#include lib/twice.lua\n--#include lib/thrice.lua\n" ..
                          "return twice(ARGV[1]) + #KEYS[1]\n")
      assert.is_false(ok)
      assert.matches("twice is lib/twice.lua's too", err)
    end)

    it("taking flags: allow-oom on a script that writes, no other flag, none on a reader", function()
      local RS = "-- resend: sets n again: nothing more changes\n"
      local body = "redis.call('hset', KEYS[1], 'n', ARGV[1])\nreturn 1\n"
      local ok, h = try(HEAD .. RS .. "--#flags allow-oom\n" .. body)
      assert.is_true(ok, h)
      assert.truthy(gen.library_text(dir):find("flags = {'allow-oom'}", 1, true))
      ok, h = try(HEAD .. RS .. body)
      assert.is_true(ok, h)
      assert.truthy(gen.library_text(dir):find("flags = {}", 1, true))
      ok, h = try(HEAD .. RS .. "--#flags no-cluster\n" .. body)
      assert.is_false(ok)
      assert.matches("unknown flag no%-cluster", h)
      ok, h = try(HEAD .. "--#flags allow-oom\nreturn redis.call('hget', KEYS[1], ARGV[1])\n")
      assert.is_false(ok)
      assert.matches("a script that only reads has no flags", h)
    end)

    it("refusing an argument read into a local that is never used", function()
      local ok, err = try(HEAD .. "local n, _ = tonumber(ARGV[1]), KEYS[1]\nreturn n\n")
      assert.is_false(ok)
      assert.matches("KEYS%[1%] is read into _, which is never used", err)
      ok, err = try(HEAD .. "local k, n = KEYS[1], ARGV[1]\nreturn #k\n")
      assert.is_false(ok)
      assert.matches("ARGV%[1%] is read into n, which is never used", err)
      ok, err = try(HEAD .. "local k, n = KEYS[1], ARGV[1]\nreturn #k + n\n")
      assert.is_true(ok, err)
    end)
  end)
end)
