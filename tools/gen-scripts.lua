-- gen-scripts.lua: src/redis/scripts/*.lua -> src/redis/scripts.h, the C header that
-- puts dlock's Redis scripts into the core.
--
--   lua tools/gen-scripts.lua SCRIPTS-DIR OUT.h       write the header
--   lua tools/gen-scripts.lua SCRIPTS-DIR --expand DIR write each script as
--                                                     Redis gets it, and the
--                                                     function library
--                                                     (library.lua; luacheck)
--   dofile("tools/gen-scripts.lua")                   the functions below
--                                                     (the specs read the
--                                                     layouts with them)
--
-- A script is one file, <name>.lua: its id is DL_S_<NAME>, in the order
-- of the names. It opens with a header comment that is its interface:
--
--   -- one line: what it does
--   -- KEYS[1] lock: ...            each key, by position and name
--   -- ARGV[1] owner: ...           each argument, by position and name
--   -- returns: ...
--   -- resend: ...                  a script that writes: what a resent
--                                   copy finds and does
--
-- (a script that takes one group per hold says KEYS[i], ARGV[3i-2], ...).
-- Those names are the layout: the header this writes gives C the position
-- of each (dl_script_layout), so the C core builds a call by name, and the
-- specs read them with layouts(). A line "--#include lib/x.lua" puts that
-- file's text there (once per script). Refused: a script or helper that
-- calls a helper function of a lib/ file it does not include itself; a
-- helper that reads KEYS or ARGV (it takes named values); a script that
-- reads other KEYS and ARGV than its header names, or reads one into a
-- local it never uses; a script that writes (a writing command, or one
-- named at run time: PUBLISH or SPUBLISH, a guarded command) whose header
-- has no "-- resend: ..." line saying what a resent copy of the request
-- finds and does. "local X = 3000 --#export DL_NAME" also gives C that
-- number as a #define. A line "--#flags allow-oom" in a script's header
-- lets its function run while Redis is out of memory (one that frees or
-- renews holds); a script that only reads is "no-writes". Redis gets each
-- script without its comment lines, as a script (EVALSHA) or as one
-- function of a library of them all (FCALL; M.library).
--
-- Runs on Lua 5.1 to 5.4 and LuaJIT; the output is the same on each.
local M = {}

local function read(path)
  local f, err = io.open(path, "rb")
  if not f then error(err, 0) end
  local s = f:read("*a")
  f:close()
  return s
end

local function lines(s)
  local t = {}
  for l in (s:gsub("\r\n", "\n") .. "\n"):gmatch("([^\n]*)\n") do t[#t + 1] = l end
  if t[#t] == "" then t[#t] = nil end
  return t
end

local function fail(where, msg)
  error(where .. ": " .. msg, 0)
end

-- The script names in dir, sorted: the ids' order.
function M.names(dir)
  local names = {}
  local p = assert(io.popen("ls '" .. dir .. "'"))
  for f in p:lines() do
    local n = f:match("^([%l%d_]+)%.lua$")
    if n then names[#names + 1] = n end
  end
  p:close()
  table.sort(names)
  return names
end

-- "3", "i", "3i-2", "3*i - 2" -> a normal form ("3", "i", "3i-2"), and
-- the position in the first group (3i-2 -> 1), and whether it repeats.
local function index(s, where)
  local x = s:gsub("[%s%*]", "")
  if x:match("^%d+$") then return x, tonumber(x), false end
  local k, d = x:match("^(%d*)i%-?(%d*)$")
  if not k then fail(where, "bad index [" .. s .. "]") end
  k = tonumber(k ~= "" and k or "1")
  d = tonumber(d ~= "" and d or "0")
  if d >= k then fail(where, "bad index [" .. s .. "]") end
  return x, k - d, true
end

-- A script's header: { summary, keys = { name... }, args = { name... },
-- repeats, refs = { ["KEYS[1]"] = true, ... } as the header writes them }.
function M.header(path)
  local h = { keys = {}, args = {}, refs = {}, repeats = false }
  local seen, n, returns = {}, 0, false
  for i, l in ipairs(lines(read(path))) do
    if not l:match("^%-%-") then break end
    n = i
    local where = path .. ":" .. i
    local text = l:gsub("^%-%-%s?", "")
    if i == 1 then h.summary = text end
    local what, idx, name = text:match("^(%u+)%[([^%]]+)%]%s+([%w_]+):")
    if what == "KEYS" or what == "ARGV" then
      local norm, pos, rep = index(idx, where)
      if not name:match("^%l[%l%d_]*$") or name == "names" then fail(where, "bad name " .. name) end
      local list = what == "KEYS" and h.keys or h.args
      if list[pos] then fail(where, what .. "[" .. idx .. "] named twice") end
      if seen[name] then fail(where, name .. " names two values") end
      seen[name] = true
      list[pos] = name
      h.refs[what .. "[" .. norm .. "]"] = true
      if rep then h.repeats = true end
    elseif text:match("^returns:") then
      returns = true
    elseif text:match("^resend:") then
      h.resend = true
    end
  end
  if n == 0 or not h.summary then fail(path, "no header comment") end
  if not returns then fail(path, "the header says nothing of what it returns (-- returns: ...)") end
  for _, list in ipairs({ h.keys, h.args }) do
    local top = 0
    for i in pairs(list) do top = math.max(top, i) end
    for i = 1, top do
      if not list[i] then fail(path, "the header skips position " .. i) end
    end
  end
  return h
end

-- The layout of every script in dir: name -> header (above).
function M.layouts(dir)
  local t = {}
  for _, name in ipairs(M.names(dir)) do t[name] = M.header(dir .. "/" .. name .. ".lua") end
  return t
end

-- The KEYS[...] and ARGV[...] that text reads, in normal form.
local function refs(text)
  local r = {}
  for what, idx in text:gmatch("(%u+)%[([^%]]+)%]") do
    if what == "KEYS" or what == "ARGV" then
      local x = idx:gsub("[%s%*]", "")
      r[what .. "[" .. x .. "]"] = true
    end
  end
  return r
end

-- Line l of code without its string literals and its comment.
local function bare(l)
  l = l:gsub("\\.", ""):gsub("'[^']*'", "''"):gsub('"[^"]*"', '""')
  return (l:gsub("%-%-.*$", ""))
end

-- The helper functions of dir's lib/ files: name -> "lib/x.lua".
local helpers_cache = {}
local function helpers(dir)
  if helpers_cache[dir] then return helpers_cache[dir] end
  local t = {}
  local p = assert(io.popen("ls '" .. dir .. "/lib' 2>/dev/null"))
  for f in p:lines() do
    if f:match("^[%w_]+%.lua$") then
      for _, l in ipairs(lines(read(dir .. "/lib/" .. f))) do
        local name = l:match("^local%s+function%s+([%a_][%w_]*)")
        if name then t[name] = "lib/" .. f end
      end
    end
  end
  p:close()
  helpers_cache[dir] = t
  return t
end

-- File path (text: its lines) calls only the helper functions that it
-- defines or that a lib/ file it includes itself defines, and none before
-- its first include (a script's fast path: no helper is made yet).
local function check_calls(dir, path, text)
  local defs, own, incs = helpers(dir), {}, {}
  for _, l in ipairs(text) do
    local inc = l:match("^%-%-#include%s+(%S+)%s*$")
    if inc then incs[inc] = true end
    local name = l:match("^%s*local%s+function%s+([%a_][%w_]*)")
    if name then own[name] = true end
  end
  local before = next(incs) ~= nil       -- before the first include
  for i, l in ipairs(text) do
    if l:match("^%-%-#include%s") then before = false end
    local code = bare(l)
    for at, name in code:gmatch("()([%a_][%w_]*)%s*%(") do
      local lib = defs[name]
      if lib and lib ~= path and not code:sub(at - 1, at - 1):match("[%.:]") then
        if before then
          fail(dir .. "/" .. path .. ":" .. i, name .. "() is called before the includes, " ..
               "where no helper is made yet")
        elseif not own[name] and not incs[lib] then
          fail(dir .. "/" .. path .. ":" .. i, name .. "() is " .. lib .. "'s: include it here")
        end
      end
    end
  end
end

-- s split at its top-level commas.
local function split(s)
  local parts, depth, cur = {}, 0, {}
  for c in s:gmatch(".") do
    if c == "(" or c == "{" or c == "[" then depth = depth + 1
    elseif c == ")" or c == "}" or c == "]" then depth = depth - 1 end
    if c == "," and depth == 0 then
      parts[#parts + 1] = table.concat(cur)
      cur = {}
    else cur[#cur + 1] = c end
  end
  parts[#parts + 1] = table.concat(cur)
  return parts
end

-- A script's own code lines (own) read no KEYS or ARGV into a local that
-- the rest of the script never uses.
local function check_locals(where, own)
  local code = {}
  for i, l in ipairs(own) do code[i] = bare(l) end
  for i, l in ipairs(code) do
    local names, exprs = l:match("^%s*local%s+([%w_%s,]-)%s*=%s*(.-)%s*$")
    if names then
      local es = split(exprs)
      local rest = table.concat(code, "\n", i + 1)
      local j = 0
      for name in names:gmatch("[%w_]+") do
        j = j + 1
        local ref = (es[j] or ""):match("(%u+%[[^%]]+%])")
        if ref and (ref:match("^KEYS") or ref:match("^ARGV")) and
           (name == "_" or not rest:find("%f[%w_]" .. name .. "%f[^%w_]")) then
          fail(where, ref .. " is read into " .. name .. ", which is never used: " ..
               "drop it from the header")
        end
      end
    end
  end
end

-- The commands that write, as the scripts name them (lower case).
local WRITES = {}
for c in ("set hset hsetnx hmset hincrby hdel del unlink expire pexpire pexpireat persist " ..
          "incr incrby decr zadd zrem zremrangebyscore rpush lpush lrem publish spublish")
          :gmatch("%S+") do WRITES[c] = true end

-- The first writing command that text calls ("HSET", or "a command named
-- at run time (pub)"), or nil.
local function writes(text)
  for q, cmd in text:gmatch("redis%.p?call%(%s*(['\"]?)([%w_]+)") do
    if q == "" then return "a command named at run time (" .. cmd .. ")" end
    if WRITES[cmd:lower()] then return cmd:upper() end
  end
  return nil
end

-- The code of file path with its includes resolved (each file once: done
-- holds the files already in), without comment lines and blank lines.
-- exports collects the --#export numbers; own, if given, the file's own
-- code lines (not its includes'). pieces gets the code in order as
-- { lib = "lib/x.lua" or nil, lines }: a file's includes come before its
-- code, so each lib's code is one run of lines. A script may open with a
-- fast path, code before its includes that runs before any helper is
-- made (and so calls none): a piece of its own.
local function expand(dir, path, done, exports, out, lib, own, pieces)
  done[path] = true
  local text = lines(read(dir .. "/" .. path))
  check_calls(dir, path, text)
  local mine, included = { lib = lib and path or nil }, false
  for i, l in ipairs(text) do
    local where = dir .. "/" .. path .. ":" .. i
    local inc = l:match("^%-%-#include%s+(%S+)%s*$")
    if inc then
      if not inc:match("^lib/[%w_]+%.lua$") then fail(where, "includes only lib/<name>.lua") end
      if #mine > 0 and (lib or included) then fail(where, "an include comes before the file's code") end
      if #mine > 0 then pieces[#pieces + 1], mine = mine, {} end   -- the fast path
      included = true
      if not done[inc] then expand(dir, inc, done, exports, out, true, nil, pieces) end
    elseif l:match("^%-%-#flags%s") then
      if lib then fail(where, "only a script has flags") end
      for flag in l:gsub("^%-%-#flags", ""):gmatch("[^%s,]+") do
        if flag ~= "allow-oom" then fail(where, "unknown flag " .. flag) end
        pieces.flags = pieces.flags or {}
        pieces.flags[#pieces.flags + 1] = flag
      end
    elseif l:match("^%s*%-%-") then
      if l:match("^%s*%-%-#") then fail(where, "unknown directive: " .. l) end
    elseif l:match("%S") then
      local var, num, def = l:match("^local%s+([%w_]+)%s*=%s*(%d+)%s*%-%-#export%s+(DL_[%u%d_]+)%s*$")
      if def then
        if exports[def] and exports[def] ~= num then fail(where, def .. " exported twice") end
        exports[def] = num
        l = "local " .. var .. " = " .. num
      elseif l:match("%-%-#") then
        fail(where, "a directive takes a line of its own: " .. l)
      end
      if lib and next(refs(l)) then fail(where, "a helper reads KEYS or ARGV: take them as arguments") end
      out[#out + 1] = l
      mine[#mine + 1] = l
      if own then own[#own + 1] = l end
    end
  end
  if #mine > 0 then pieces[#pieces + 1] = mine end
end

-- name -> the text Redis gets, checked against its header.
function M.script(dir, name, exports)
  local h = M.header(dir .. "/" .. name .. ".lua")
  local out, own, code, pieces = {}, {}, {}, {}
  local where = dir .. "/" .. name .. ".lua"
  expand(dir, name .. ".lua", {}, exports or {}, out, false, code, pieces)
  -- the script's own reads (the helpers read none, above)
  local used = refs(table.concat(out, "\n"))
  for ref in pairs(used) do
    if not h.refs[ref] then fail(where, ref .. " is not in its header") end
    own[ref] = true
  end
  for ref in pairs(h.refs) do
    if not own[ref] then fail(where, ref .. " is in its header but never read") end
  end
  check_locals(where, code)
  local w = not h.resend and writes(table.concat(out, "\n"))
  if w then
    fail(where, "it writes (" .. w .. ") but its header says nothing of a resend " ..
         "(-- resend: what a resent copy of the request finds and does)")
  end
  pieces.writes = writes(table.concat(out, "\n")) ~= nil
  if pieces.flags and not pieces.writes then fail(where, "a script that only reads has no flags") end
  return table.concat(out, "\n") .. "\n", h, pieces
end

-- A hash of s, 14 hex digits, the same on every Lua: two sums mod 2^28.
local function hash(s)
  local a, b = 0, 0
  for i = 1, #s do
    local c = s:byte(i)
    a = (a * 131 + c) % 268435399
    b = (b * 257 + c) % 268435367
  end
  return ("%07x%07x"):format(a, b)
end

-- The scripts as one Redis function library (FUNCTION LOAD, Redis 7):
-- every helper once, at load (each after the helpers it calls: a script's
-- pieces put a lib's includes before it), then each script a function of
-- KEYS and ARGV, its fast path first. Its name is "dlock_" and a hash of
-- its text, so a library of other scripts never has this one's name; each
-- function is that name, "_" and the script's. Returns the library's name
-- and its pieces: { lib = "lib/x.lua" } or a string of code.
function M.library(names, pieces)
  local out, seen, defs = {}, {}, {}
  for _, name in ipairs(names) do
    for _, piece in ipairs(pieces[name]) do
      if piece.lib and not seen[piece.lib] then
        seen[piece.lib] = true
        out[#out + 1] = piece
        -- one scope for every helper here: no name defined twice
        for _, l in ipairs(piece) do
          local list = l:match("^local%s+function%s+([%w_]+)") or l:match("^local%s+([%w_%s,]-)%s*=")
          for def in (list or ""):gmatch("[%w_]+") do
            if defs[def] then fail(piece.lib, def .. " is " .. defs[def] .. "'s too") end
            defs[def] = piece.lib
          end
        end
      end
    end
  end
  local text = {}
  for _, name in ipairs(names) do
    local own = {}
    for _, piece in ipairs(pieces[name]) do
      if not piece.lib then own[#own + 1] = table.concat(piece, "\n") end
    end
    local flags = {}
    for i, f in ipairs(pieces[name].flags or (not pieces[name].writes and { "no-writes" }) or {}) do
      flags[i] = "'" .. f .. "'"
    end
    local fn = "redis.register_function{function_name = '@_" .. name .. "',\n" ..
      "  flags = {" .. table.concat(flags, ", ") .. "}, callback = function(KEYS, ARGV)\n" ..
      table.concat(own, "\n") .. "\nend}\n"
    out[#out + 1] = fn
    text[#text + 1] = fn
  end
  for _, piece in ipairs(out) do
    if piece.lib then text[#text + 1] = table.concat(piece, "\n") end
  end
  local lib = "dlock_" .. hash(table.concat(text, "\n"))
  for i, piece in ipairs(out) do
    if not piece.lib then out[i] = (piece:gsub("'@_", "'" .. lib .. "_", 1)) end
  end
  return lib, out
end

-- s as a C string literal, one per line of s.
local function c_string(s, indent)
  local parts = {}
  for l in s:gmatch("([^\n]*)\n") do
    local e = l:gsub("\\", "\\\\"):gsub('"', '\\"'):gsub("%?%?", "?\\?")
    if e:find("[%c\128-\255]") then error("a script line with a control or non-ASCII byte: " .. l, 0) end
    parts[#parts + 1] = indent .. '"' .. e .. '\\n"'
  end
  return table.concat(parts, "\n")
end

local function upper(name) return (name:upper()) end

local function sorted_set(t)
  local r = {}
  for k in pairs(t) do r[#r + 1] = k end
  table.sort(r)
  return r
end

-- The whole header for the scripts in dir.
function M.header_text(dir)
  local names = M.names(dir)
  if #names == 0 then error(dir .. ": no scripts", 0) end
  local pieces, heads, exports, libs = {}, {}, {}, {}
  local keynames, argnames, widest = {}, {}, 0
  for _, name in ipairs(names) do
    local _
    _, heads[name], pieces[name] = M.script(dir, name, exports)
    for _, piece in ipairs(pieces[name]) do
      if piece.lib then libs[piece.lib] = piece end
    end
    for _, k in ipairs(heads[name].keys) do keynames[k] = true end
    for _, a in ipairs(heads[name].args) do argnames[a] = true end
    widest = math.max(widest, #heads[name].keys + #heads[name].args)
  end
  keynames, argnames = sorted_set(keynames), sorted_set(argnames)
  local o = {}
  local function w(s) o[#o + 1] = s end
  w("// Generated by tools/gen-scripts.lua from src/redis/scripts/*.lua; do not edit.")
  w("/* `make` writes it again when a script is newer (and a Lua is there);")
  w(" * it is committed, so that a build without Lua (luarocks) has it.")
  w(" *")
  w(" * The scripts dlock runs in Redis (one per file in src/redis/scripts/, whose")
  w(" * header comment says its KEYS, ARGV and reply), and the layout of each:")
  w(" * where it takes each key and argument, by the name its header gives")
  w(" * it. script.c includes it with DL_SCRIPT_DATA defined, for the data. */")
  w("#ifndef DLOCK_SCRIPTS_H")
  w("#define DLOCK_SCRIPTS_H")
  w("")
  w("typedef enum {")
  for _, name in ipairs(names) do
    w(("    DL_S_%s,%s/* %s */"):format(upper(name), (" "):rep(math.max(1, 14 - #name)),
      (heads[name].summary:gsub("%*/", "* /"))))
  end
  w("    DL_S_COUNT")
  w("} dl_script_id;")
  w("")
  w("/* The names the headers give keys and arguments. */")
  w("enum {")
  for _, k in ipairs(keynames) do w("    DL_KEY_" .. upper(k) .. ",") end
  w("    DL_KEY_NAMES")
  w("};")
  w("enum {")
  for _, a in ipairs(argnames) do w("    DL_ARG_" .. upper(a) .. ",") end
  w("    DL_ARG_NAMES")
  w("};")
  w("")
  w("/* KEYS and ARGV of one call at most (of one hold, for a script that")
  w(" * takes one group per hold). */")
  w("#define DL_SCRIPT_ARGC_MAX " .. widest)
  w("")
  for _, def in ipairs(sorted_set(exports)) do w(("#define %s %s"):format(def, exports[def])) end
  w("")
  w("/* Where one script takes each named key and argument: KEYS[key[k]],")
  w(" * ARGV[arg[a]] (from 1; 0: it takes none). A script that repeats a group")
  w(" * per hold (renew: KEYS[i], ARGV[3i-2]...) describes its first group. */")
  w("typedef struct dl_script_layout {")
  w("    const char *name;             /* \"acquire\": src/redis/scripts/acquire.lua */")
  w("    unsigned char nkeys, nargs;   /* KEYS, ARGV (of one group) */")
  w("    unsigned char repeats;        /* 1: one group per hold */")
  w("    unsigned char key[DL_KEY_NAMES];")
  w("    unsigned char arg[DL_ARG_NAMES];")
  w("} dl_script_layout;")
  w("")
  w("#ifdef DL_SCRIPT_DATA")
  w("static const dl_script_layout dl_script_layouts[DL_S_COUNT] = {")
  for _, name in ipairs(names) do
    local h = heads[name]
    local ks, as = {}, {}
    for i, k in ipairs(h.keys) do ks[#ks + 1] = ("[DL_KEY_%s] = %d"):format(upper(k), i) end
    for i, a in ipairs(h.args) do as[#as + 1] = ("[DL_ARG_%s] = %d"):format(upper(a), i) end
    w(("    [DL_S_%s] = { \"%s\", %d, %d, %d,"):format(upper(name), name, #h.keys, #h.args,
      h.repeats and 1 or 0))
    w("        { " .. (#ks > 0 and table.concat(ks, ", ") or "0") .. " },")
    local line, parts = "        { ", {}
    for i, a in ipairs(as) do
      local piece = a .. (i < #as and "," or "")
      if #line + #piece + 1 > 78 then parts[#parts + 1] = line; line = "          " end
      line = line .. piece .. (i < #as and " " or "")
    end
    if #as == 0 then line = line .. "0" end
    parts[#parts + 1] = line .. " } },"
    for _, p in ipairs(parts) do w((p:gsub("%s+$", ""))) end
  end
  w("};")
  w("")
  w("/* The helpers of src/redis/scripts/lib/, each written once; a script's")
  w(" * text is the helpers it includes, then its own code. */")
  local function macro(lib) return "DL_LIB_" .. upper(lib:match("^lib/([%w_]+)%.lua$")) end
  for _, lib in ipairs(sorted_set(libs)) do
    w(("#define %s \\"):format(macro(lib)))
    w((c_string(table.concat(libs[lib], "\n") .. "\n", "    "):gsub("\n", " \\\n")))
    w("")
  end
  w("static const char *const dl_script_texts[DL_S_COUNT] = {")
  for _, name in ipairs(names) do
    w(("    /* src/redis/scripts/%s.lua */"):format(name))
    w(("    [DL_S_%s] ="):format(upper(name)))
    local line = ""
    local function flush()
      if line ~= "" then w("       " .. line); line = "" end
    end
    for _, piece in ipairs(pieces[name]) do
      if piece.lib then
        local m = " " .. macro(piece.lib)
        if #line + #m > 71 then flush() end
        line = line .. m
      else
        flush()
        w(c_string(table.concat(piece, "\n") .. "\n", "        "))
      end
    end
    flush()
    o[#o] = o[#o] .. ","
  end
  w("};")
  w("")
  local lib, lpieces = M.library(names, pieces)
  w("/* The same scripts as one function library: each helper made once, at")
  w(" * FUNCTION LOAD; each script the function dl_script_functions[id]. */")
  w("static const char dl_script_library[] =")
  w(c_string("#!lua name=" .. lib .. "\n", "    "))
  local line = ""
  for _, piece in ipairs(lpieces) do
    if piece.lib then
      local m = " " .. macro(piece.lib)
      if #line + #m > 71 then w("   " .. line); line = "" end
      line = line .. m
    else
      if line ~= "" then w("   " .. line); line = "" end
      w(c_string(piece, "    "))
    end
  end
  if line ~= "" then w("   " .. line) end
  o[#o] = o[#o] .. ";"
  w("static const char *const dl_script_functions[DL_S_COUNT] = {")
  for _, name in ipairs(names) do
    w(("    [DL_S_%s] = \"%s_%s\","):format(upper(name), lib, name))
  end
  w("};")
  w("#endif /* DL_SCRIPT_DATA */")
  w("")
  w("#endif")
  return table.concat(o, "\n") .. "\n"
end

local function write(path, s)
  local tmp = path .. ".tmp"
  local f = assert(io.open(tmp, "wb"))
  f:write(s)
  f:close()
  assert(os.rename(tmp, path))
end

-- The library as FUNCTION LOAD gets it.
function M.library_text(dir)
  local names, pieces, exports = M.names(dir), {}, {}
  for _, name in ipairs(names) do
    local _
    _, _, pieces[name] = M.script(dir, name, exports)
  end
  local lib, lpieces = M.library(names, pieces)
  local t = { "#!lua name=" .. lib }
  for _, piece in ipairs(lpieces) do
    t[#t + 1] = piece.lib and table.concat(piece, "\n") or piece:gsub("\n$", "")
  end
  return table.concat(t, "\n") .. "\n", lib
end

local function main(dir, out, expand_dir)
  local ok, err = pcall(function()
    if out == "--expand" then
      local exports = {}
      for _, name in ipairs(M.names(dir)) do
        write(expand_dir .. "/" .. name .. ".lua", (M.script(dir, name, exports)))
      end
      write(expand_dir .. "/library.lua", (M.library_text(dir)))
    else
      write(out, M.header_text(dir))
    end
  end)
  if not ok then
    io.stderr:write("gen-scripts: ", tostring(err), "\n")
    return 1
  end
  return 0
end

if select("#", ...) > 0 then
  local dir, out, x = ...
  if not out then
    io.stderr:write("usage: gen-scripts.lua SCRIPTS-DIR OUT.h | SCRIPTS-DIR --expand DIR\n")
    os.exit(2)
  end
  os.exit(main(dir, out, x))
end
return M
