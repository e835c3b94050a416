-- layout_spec.lua: the shape of the C core, checked on its sources: the
-- house reads top-down with no cycles, and every operation is written
-- once (op.c builds it, the executor alone sends it).
local DIR = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/.."

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

local function sources()
  local files = {}
  local p = assert(io.popen("ls " .. DIR .. "/src"))
  for name in p:lines() do
    if name:match("%.[ch]$") then files[#files + 1] = name end
  end
  p:close()
  return files
end

-- module (file name without .c/.h) -> set of modules it includes
local function graph()
  local g = {}
  for _, name in ipairs(sources()) do
    local m = name:gsub("%.[ch]$", "")
    g[m] = g[m] or {}
    for inc in read(DIR .. "/src/" .. name):gmatch('#include "([%w_]+)%.h"') do
      if inc ~= m then g[m][inc] = true end
    end
  end
  return g
end

-- every module m reaches through its includes
local function reach(g, m)
  local seen, stack = {}, { m }
  while #stack > 0 do
    local x = table.remove(stack)
    for y in pairs(g[x] or {}) do
      if not seen[y] then seen[y] = true; stack[#stack + 1] = y end
    end
  end
  return seen
end

-- file (name without .c) -> set of files whose functions it calls (or
-- names, as in a luaL_Reg table): includes alone miss a cycle that one
-- header hides.
local function call_graph()
  local defined, texts = {}, {}
  for _, name in ipairs(sources()) do
    if name:match("%.c$") then
      local m = name:gsub("%.c$", "")
      texts[m] = read(DIR .. "/src/" .. name)
      for line in texts[m]:gmatch("[^\n]+") do
        local fn = not line:match("^static") and not line:match(";%s*$")
          and line:match("^[%a_][%w_ %*]-%f[%w_]([%a_][%w_]*)%(")
        if fn and (fn:match("^dl_") or fn:match("^dlua_")) then defined[fn] = m end
      end
    end
  end
  local g = {}
  for m, text in pairs(texts) do
    g[m] = {}
    text = text:gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")   -- words in comments are no calls
    for word in text:gmatch("%f[%w_]([%a_][%w_]*)%f[^%w_]") do
      local home = defined[word]
      if home and home ~= m then g[m][home] = true end
    end
  end
  return g
end

describe("the C core's layout", function()
  local g = graph()

  it("has no cycle of calls between files", function()
    local calls, cycles = call_graph(), {}
    for m in pairs(calls) do
      if reach(calls, m)[m] then cycles[#cycles + 1] = m end
    end
    table.sort(cycles)
    assert.are.same({}, cycles)
    -- (and the check sees calls: the entry point calls the classes)
    assert.truthy(calls.lua_dlock.lua_client and calls.lua_lock.lua_client
                  and calls.lua_client.lua_aux and calls.client.exec)
  end)

  it("has no dependency cycle between modules", function()
    local cycles = {}
    for m in pairs(g) do
      if reach(g, m)[m] then cycles[#cycles + 1] = m end
    end
    table.sort(cycles)
    assert.are.same({}, cycles)
  end)

  it("reads top-down: binding, client, watchdog beside it, executor, topology", function()
    local below_client = { "watchdog", "pending", "exec", "batch", "op", "state",
                           "topology", "script", "wait", "conn", "registry" }
    for _, m in ipairs(below_client) do
      local r = reach(g, m)
      assert.is_nil(r.client, m .. " must not depend on the client")
      assert.is_nil(r.lua_dlock, m .. " must not depend on the binding")
    end
    for _, m in ipairs({ "exec", "batch", "op", "topology", "pending" }) do
      assert.is_nil(reach(g, m).watchdog, m .. " must not depend on the watchdog")
    end
    for _, m in ipairs({ "exec", "batch", "op", "topology" }) do
      local r = reach(g, m)
      assert.is_nil(r.state, m .. " must not know what a client is")
      assert.is_nil(r.registry, m .. " must not know the holds")
    end
    -- only the binding sees Lua
    for _, name in ipairs(sources()) do
      if not name:match("^lua_") and name ~= "compat.h" then
        assert.is_nil(read(DIR .. "/src/" .. name):match('#include [<"]lua'),
                      name .. " includes a Lua header")
      end
    end
  end)

  it("sends every operation through the executor, and builds each in one place", function()
    local senders = { "dl_script_eval%(", "dl_script_append%(", "dl_topology_run%(",
                      "dl_topology_fan%(" }
    local allowed = { ["exec.c"] = true, ["batch.c"] = true, ["topology.c"] = true,
                      ["script.c"] = true }
    for _, name in ipairs(sources()) do
      if name:match("%.c$") and not allowed[name] then
        local s = read(DIR .. "/src/" .. name)
        for _, fn in ipairs(senders) do
          assert.is_nil(s:match(fn), name .. " sends on its own: " .. fn)
        end
      end
    end
    -- each script id named by one builder, in op.c alone (the ids come
    -- from src/scripts/, through the generated scripts.h)
    local ids = read(DIR .. "/src/scripts.h"):match("typedef enum {(.-)} dl_script_id")
    for id in ids:gmatch("(DL_S_[%u%d_]+)") do
      if id ~= "DL_S_COUNT" then
        for _, name in ipairs(sources()) do
          if name:match("%.c$") and name ~= "op.c" and name ~= "script.c" then
            assert.is_nil(read(DIR .. "/src/" .. name):match(id .. "[^%w_]"),
                          name .. " uses " .. id .. " directly")
          end
        end
        assert.truthy(read(DIR .. "/src/op.c"):match(id .. "[^%w_]"), id .. " has no builder")
      end
    end
  end)

  it("asks the executor what the topology means: the lock operations never test its kind", function()
    -- (connect's options may: they choose it)
    local allowed = { ["exec.c"] = true, ["batch.c"] = true, ["topology.c"] = true,
                      ["lua_connect.c"] = true }
    for _, name in ipairs(sources()) do
      if name:match("%.c$") and not allowed[name] then
        local s = read(DIR .. "/src/" .. name)
        assert.is_nil(s:match("DL_TOPO_%u+"), name .. " tests the topology's kind")
        assert.is_nil(s:match("wd_retarget"), name .. " reaches into the topology")
      end
    end
  end)

  it("lets no callee release a mutex its caller holds: pending.c never unlocks", function()
    local s = read(DIR .. "/src/pending.c"):gsub("/%*.-%*/", " ")
    assert.is_nil(s:match("pthread_mutex_unlock"))
    assert.is_nil(s:match("pthread_mutex_lock"))
  end)

  it("keeps the command's process plumbing out of dlock.core", function()
    local core = require "dlock.core"
    assert.is_nil(core.process)
    local process = require "dlock.process"
    assert.is_function(process.spawn)
    assert.is_number(process.signals().TERM)
    -- its own object, from lua_process.c and util.c alone
    local incs = {}
    for inc in read(DIR .. "/src/lua_process.c"):gmatch('#include "([%w_.]+)"') do
      incs[#incs + 1] = inc
    end
    table.sort(incs)
    assert.are.same({ "compat.h", "dlock.h" }, incs)
    assert.matches("PROC_SRC = src/lua_process.c src/util.c", read(DIR .. "/Makefile"), 1, true)
  end)
end)
