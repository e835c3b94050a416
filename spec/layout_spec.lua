-- layout_spec.lua: the shape of the C core, checked on its sources: src/ is
-- one folder per layer, each using only the folders below it; the house
-- reads top-down with no cycles; every operation is written once (op.c
-- builds it, the executor alone sends it); files and functions stay small.
local DIR = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/.."

-- the layers, top down: a file may include and call its own folder's and
-- those below it
local LAYERS = { "binding", "core", "redis", "base" }
local RANK = {}
for i, l in ipairs(LAYERS) do RANK[l] = i end

local function read(path)
  local f = assert(io.open(path, "rb"))
  local s = f:read("*a")
  f:close()
  return s
end

-- every C file under src/, as "folder/name.c"
local function sources()
  local files = {}
  local p = assert(io.popen("cd " .. DIR .. "/src && ls */*.[ch]"))
  for name in p:lines() do files[#files + 1] = name end
  p:close()
  return files
end

local function src(name) return read(DIR .. "/src/" .. name) end
local function module(name) return (name:gsub("^.*/", ""):gsub("%.[ch]$", "")) end
local function folder(name) return name:match("^([^/]+)/") end

-- the folder of each module (file name without folder and .c/.h)
local function folders()
  local f = {}
  for _, name in ipairs(sources()) do f[module(name)] = folder(name) end
  return f
end

-- module -> set of modules it includes
local function graph()
  local g = {}
  for _, name in ipairs(sources()) do
    local m = module(name)
    g[m] = g[m] or {}
    for inc in src(name):gmatch('#include "[%w_]+/([%w_]+)%.h"') do
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

-- file (module of a .c) -> set of modules whose functions it calls (or
-- names, as in a luaL_Reg table): includes alone miss a cycle that one
-- header hides.
local function call_graph()
  local defined, texts = {}, {}
  for _, name in ipairs(sources()) do
    if name:match("%.c$") then
      local m = module(name)
      texts[m] = src(name)
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

-- The shape's limits, and what still exceeds them (to shrink to nothing).
local MAX_FILE, MAX_FN, MAX_PARAMS = 600, 80, 7
local STILL_OVER = {}

-- the executor and the topologies: the only files that send, or know a
-- topology's kind
local EXECUTOR = { exec = true, batch = true, topology = true, cluster = true,
                   sentinel = true, script = true }

-- each function defined in C text: name, first line, lines, parameters
-- (an error buffer and its length count as one)
local function functions(text)
  local lines, out = {}, {}
  for l in (text .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
  local i = 2
  while i <= #lines do
    if lines[i] == "{" then
      local j = i - 1
      while j > 1 and not lines[j]:match("^[%a_].*%(") do j = j - 1 end
      local sig = table.concat(lines, " ", j, i - 1)
      local params = sig:match("%((.*)%)") or ""
      local n = 0
      if not params:match("^%s*void%s*$") and params:match("%S") then
        n = 1
        local depth = 0
        for c in params:gmatch("[(),]") do
          if c == "(" then depth = depth + 1 elseif c == ")" then depth = depth - 1
          elseif depth == 0 then n = n + 1 end
        end
        if params:match("char%s*%*%s*[%w_]*err[%w_]*%s*,%s*size_t%s+[%w_]*len") then n = n - 1 end
      end
      local k = i + 1
      while k <= #lines and lines[k] ~= "}" do k = k + 1 end
      out[#out + 1] = { name = sig:match("([%a_][%w_]*)%s*%("), line = j,
                        lines = k - j + 1, params = n }
      i = k
    end
    i = i + 1
  end
  return out
end

describe("the C core's layout #nocore", function()
  local g = graph()
  local where = folders()

  it("is one folder per layer, each using only its own and those below", function()
    local seen = {}
    for _, name in ipairs(sources()) do
      local f = folder(name)
      assert.truthy(RANK[f], name .. " is in no layer's folder")
      seen[f] = true
      for inc in src(name):gmatch('#include "([^"]+)"') do
        local to = inc:match("^([%w_]+)/[%w_]+%.h$")
        assert.truthy(to, name .. ": #include \"" .. inc .. "\" names no folder")
        assert.truthy(RANK[to] >= RANK[f], name .. " includes " .. inc .. ", a layer above it")
      end
    end
    for _, l in ipairs(LAYERS) do assert.truthy(seen[l], "no folder " .. l) end
    -- and the calls agree with the includes
    for m, callees in pairs(call_graph()) do
      for callee in pairs(callees) do
        assert.truthy(RANK[where[callee]] >= RANK[where[m]], m .. " calls up into " .. callee)
      end
    end
  end)

  it("hides each header's names from the loader (luarocks builds without -fvisibility)", function()
    for _, name in ipairs(sources()) do
      if name:match("%.h$") and name ~= "binding/compat.h" and name ~= "redis/scripts.h" then
        assert.truthy(src(name):match("#pragma GCC visibility push%(hidden%)"), name)
      end
    end
  end)

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
    local below_client = { "watchdog", "notice", "pending", "lease", "lost", "exec",
                           "batch", "op", "state", "topology", "cluster", "sentinel",
                           "script", "wait", "conn", "wire", "reply", "registry" }
    for _, m in ipairs(below_client) do
      local r = reach(g, m)
      assert.is_nil(r.client, m .. " must not depend on the client")
      assert.is_nil(r.lua_dlock, m .. " must not depend on the binding")
    end
    for _, m in ipairs({ "exec", "batch", "op", "topology", "cluster", "sentinel",
                         "pending", "lease", "lost" }) do
      assert.is_nil(reach(g, m).watchdog, m .. " must not depend on the watchdog")
    end
    -- the topologies: Cluster over the common nodes, Sentinel beneath them
    -- (it knows no node: it moves the connections it was given)
    assert.is_nil(reach(g, "topology").cluster, "topology must not depend on cluster")
    assert.is_nil(reach(g, "sentinel").topology, "sentinel must not depend on topology")
    -- the bytes and the replies' meaning sit below the connection
    for _, m in ipairs({ "wire", "reply" }) do
      assert.is_nil(reach(g, m).conn, m .. " must not depend on a connection")
    end
    -- the lock's identity and the slots sit below the transport
    for _, m in ipairs({ "lockid", "slot" }) do
      local r = reach(g, m)
      assert.is_nil(r.topology, m .. " must not depend on the topology")
      assert.is_nil(r.conn, m .. " must not depend on a connection")
    end
    -- only the binding sees Lua
    for _, name in ipairs(sources()) do
      if folder(name) ~= "binding" then
        assert.is_nil(src(name):match('#include [<"]lua'), name .. " includes a Lua header")
      end
    end
  end)

  it("keeps files and functions small: 600 lines a file, 80 a function, 7 parameters", function()
    local over = {}
    for _, name in ipairs(sources()) do
      local text = src(name)
      local _, n = text:gsub("\n", "")
      if name:match("%.c$") and n > MAX_FILE then
        over[#over + 1] = name .. ": lines"
      end
      for _, fn in ipairs(functions(text)) do
        if fn.lines > MAX_FN then
          over[#over + 1] = ("%s %s: lines"):format(name, fn.name)
        end
        if fn.params > MAX_PARAMS then
          over[#over + 1] = ("%s %s: parameters"):format(name, fn.name)
        end
      end
    end
    table.sort(over)
    table.sort(STILL_OVER)
    assert.are.same(STILL_OVER, over)
    -- (and the count sees functions)
    local names = {}
    for _, fn in ipairs(functions(src("redis/slot.c"))) do names[#names + 1] = fn.name end
    assert.are.same({ "make_crc_table", "crc16", "dl_slot_of", "find_slot_tags", "dl_slot_tag" }, names)
  end)

  it("names each function of the redis and core layers by its file: dl_<file>_", function()
    local prefix = { wait = "waiter" }      -- (wait.c's subject is the waiter)
    for _, name in ipairs(sources()) do
      local f = folder(name)
      if (f == "redis" or f == "core") and name:match("%.c$") then
        local m = module(name)
        for line in src(name):gmatch("[^\n]+") do
          local fn = not line:match("^static") and not line:match(";%s*$")
            and line:match("^[%a_][%w_ %*]-%f[%w_]([%a_][%w_]*)%(")
          if fn then
            local p = "dl_" .. (prefix[m] or m) .. "_"
            assert.truthy(fn:sub(1, #p) == p or fn == "dl_" .. m, name .. " defines " .. fn)
          end
        end
      end
    end
  end)

  it("sends every operation through the executor, and builds each in one place", function()
    local senders = { "dl_script_eval%(", "dl_script_append%(", "dl_topology_run%(",
                      "dl_topology_run_at%(", "dl_topology_fan%(", "dl_cluster_run%(" }
    for _, name in ipairs(sources()) do
      if name:match("%.c$") and not EXECUTOR[module(name)] then
        local s = src(name)
        for _, fn in ipairs(senders) do
          assert.is_nil(s:match(fn), name .. " sends on its own: " .. fn)
        end
      end
    end
    -- each script id named by one builder, in op.c alone (the ids come
    -- from src/redis/scripts/, through the generated scripts.h)
    local ids = src("redis/scripts.h"):match("typedef enum {(.-)} dl_script_id")
    for id in ids:gmatch("(DL_S_[%u%d_]+)") do
      if id ~= "DL_S_COUNT" then
        for _, name in ipairs(sources()) do
          if name:match("%.c$") and name ~= "redis/op.c" then
            assert.is_nil(src(name):match(id .. "[^%w_]"), name .. " uses " .. id .. " directly")
          end
        end
        assert.truthy(src("redis/op.c"):match(id .. "[^%w_]"), id .. " has no builder")
      end
    end
  end)

  it("asks the executor what the topology means: the lock operations never test its kind", function()
    -- (connect's options may: they choose it)
    for _, name in ipairs(sources()) do
      if name:match("%.c$") and not EXECUTOR[module(name)] and name ~= "binding/lua_connect.c" then
        local s = src(name)
        assert.is_nil(s:match("DL_TOPO_%u+"), name .. " tests the topology's kind")
        assert.is_nil(s:match("wd_retarget"), name .. " reaches into the topology")
      end
    end
  end)

  it("lets conn.c alone write a connection's fields (the others use its setters)", function()
    local body = src("redis/conn.h"):match("typedef struct dl_conn {(.-)} dl_conn;")
    body = body:gsub("/%*.-%*/", " ")
    local fields = {}
    for decl in body:gmatch("([^;]+);") do
      for name in decl:gsub("%b()", ""):gmatch("([%a_][%w_]*)%s*,?%s*$") do
        fields[#fields + 1] = name
      end
      for name in decl:gmatch(",%s*%**%s*([%a_][%w_]*)") do
        fields[#fields + 1] = name
      end
    end
    -- the field names no other struct has: no assignment to them at all;
    -- the others: none through the members that hold a connection
    local elsewhere = {}
    for _, name in ipairs(sources()) do
      if name ~= "redis/conn.h" then
        local text = src(name):gsub("/%*.-%*/", " ")
        for b in text:gmatch("struct[%w_%s]*(%b{})") do
          for f in b:gmatch("([%a_][%w_]*)%s*[;%[,]") do elsewhere[f] = true end
        end
      end
    end
    local function writes(text, lhs)
      return text:match(lhs .. "[%w_%.]*%s*[-+*/|&]?=[^=]") or
             text:match(lhs .. "%s*%+%+") or text:match(lhs .. "%s*%-%-")
    end
    local seen = 0
    for _, name in ipairs(sources()) do
      if name:match("%.c$") then
        local text = src(name):gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
        for _, f in ipairs(fields) do
          local hits = {}
          if not elsewhere[f] then
            hits[#hits + 1] = writes(text, "[%.>]" .. f .. "%f[^%w_]")
          end
          for _, holder in ipairs({ "cmd", "wd", "probe", "conn" }) do
            for _, sep in ipairs({ "%.", "%->" }) do
              hits[#hits + 1] = writes(text, "%f[%w_]" .. holder .. "%s*" .. sep ..
                                       f .. "%f[^%w_]")
            end
          end
          if name == "redis/conn.c" then
            if #hits > 0 then seen = seen + 1 end
          else
            assert.are.same({}, hits, name .. " writes dl_conn." .. f)
          end
        end
      end
    end
    -- (and the check sees writes: conn.c's own)
    assert.truthy(#fields > 20 and seen > 0)
  end)

  it("lets lease.c alone write a hold's lease timing, and lost.c alone mark it lost", function()
    local owner = { lease_ms = "core/lease.c", deadline_us = "core/lease.c",
                    renew_at_us = "core/lease.c", retry_at_us = "core/lease.c",
                    final = "core/lease.c", lost = "core/lost.c" }
    -- a hold (registry.h's dl_hold) is h, o or hold wherever the client's
    -- layer and the executor write one; the binding has none of its own
    local hold = src("core/registry.h"):match("typedef struct dl_hold {(.-)} dl_hold;")
    local seen = {}
    for _, name in ipairs(sources()) do
      if name:match("%.c$") and folder(name) ~= "binding" then
        local text = src(name):gsub("/%*.-%*/", " "):gsub("//[^\n]*", " ")
        for f, home in pairs(owner) do
          assert.truthy(hold:match("[%s%*]" .. f .. "%s*;"), "dl_hold has no " .. f)
          for _, holder in ipairs({ "h", "o", "hold" }) do
            local lhs = "%f[%w_]" .. holder .. "%s*%->%s*" .. f .. "%f[^%w_]"
            local hit = text:match(lhs .. "%s*[-+*/|&]?=[^=]") or text:match(lhs .. "%s*%+%+")
                        or text:match(lhs .. "%s*%-%-")
            if name == home then
              seen[f] = seen[f] or hit ~= nil
            else
              assert.is_nil(hit, name .. " writes dl_hold." .. f)
            end
          end
        end
      end
    end
    -- (and the check sees writes: the owners' own)
    for f in pairs(owner) do assert.truthy(seen[f], f) end
  end)

  it("hears Sentinel news where the client's operations begin, not in the executor", function()
    for _, name in ipairs(sources()) do
      local s = src(name):gsub("/%*.-%*/", " ")
      if s:match("dl_sentinel_news%(") then
        assert.truthy(name == "core/client.h" or module(name) == "sentinel",
                      name .. " polls the Sentinel news")
      end
    end
    assert.truthy(src("core/client.h"):match("dl_sentinel_news%("))
    assert.is_nil(src("core/client.c"):match("void%s+dl_client_close[^{]*{[^}]-dl_client_enter"))
  end)

  it("lets no callee release a mutex its caller holds: pending.c never unlocks", function()
    local s = src("core/pending.c"):gsub("/%*.-%*/", " ")
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
    for inc in src("binding/lua_process.c"):gmatch('#include "([%w_./]+)"') do
      incs[#incs + 1] = inc
    end
    table.sort(incs)
    assert.are.same({ "base/dlock.h", "binding/compat.h" }, incs)
    assert.matches("PROC_SRC = src/binding/lua_process.c src/base/util.c", read(DIR .. "/Makefile"), 1, true)
  end)
end)
