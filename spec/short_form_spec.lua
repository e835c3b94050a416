-- A lock in its short form (one string: a hold of one coroutine owner, or
-- that owner's last record once freed; src/redis/scripts/README.md, THE
-- SHORT FORM) is, to every script, the hash it stands for. Each state is
-- set up twice, as the hash on one key and as its short form on another,
-- with the same TTL; every script runs on both with the same arguments.
-- Their replies, what the keys hold afterwards (a short form read as its
-- hash), the TTLs, the counters and the queues must be the same.
local helper = require "helper"

local ROOT = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/.."
local gen = dofile(ROOT .. "/tools/gen-scripts.lua")
local LAYOUTS = gen.layouts(ROOT .. "/src/redis/scripts")

-- A small deterministic generator (the same draws on every run).
local function rng(seed)
  local x = seed
  return function(n)
    x = (x * 1103515245 + 12345) % 2147483648
    return math.floor(x / 65536) % n + 1      -- (the high bits: the low ones cycle short)
  end
end
local function pick(r, t) return t[r(#t)] end

-- The hash a short form stands for, field -> value (the specs' own
-- reading of the format, not the scripts').
local function decode(v)
  return assert(helper.short_fields(v), "not a short form: " .. v)
end

local function norm(v)
  if type(v) == "string" then return (v:gsub("%d%d%d%d%d%d%d%d%d%d%d%d%d", "T")) end
  return v
end

local function dump(v)
  if type(v) ~= "table" then return tostring(norm(v)) end
  local keys, out = {}, {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    out[#out + 1] = k .. "=" .. dump(v[k] == nil and v[tonumber(k)] or v[k])
  end
  return "{" .. table.concat(out, " ") .. "}"
end

-- (a grant in the short form answers with its token alone, in the hash
-- {1, 1, token}: the client learns from it which form to look for)
local function same_reply(a, b)
  if type(a) == "number" and type(b) == "table" then a, b = b, a end
  if type(a) == "table" and type(b) == "number" and #a == 3 and a[1] == 1 and a[2] == 1 then
    return math.abs(a[3] - b) <= 50
  end
  if type(a) ~= type(b) then return false end
  if type(a) == "number" then return math.abs(a - b) <= 50 end
  if type(a) ~= "table" then return norm(a) == norm(b) end
  if a.err or b.err then return a.err == b.err end
  if #a ~= #b then return false end
  for i = 1, #a do
    if type(a[i]) == "number" and type(b[i]) == "number" then
      if math.abs(a[i] - b[i]) > 50 then return false end
    elseif type(a[i]) ~= type(b[i]) or dump(a[i]) ~= dump(b[i]) then return false end
  end
  return true
end

describe("the short form of a lock #nocore", function()
  local srv = helper.redis()
  local fns
  setup(function() fns = helper.load_scripts(srv) end)

  local OWNER = "c7f:12"
  -- A state the short form can stand for: a hold of OWNER (n > 0) or its
  -- last record (n = 0).
  local function draw_state(r)
    local n = pick(r, { "0", "1", "1", "2", "3" })
    return { n = n, t = pick(r, { "5", "41" }), q = pick(r, { "3", "10", "100" }),
             k = pick(r, { false, false, "8000e99", "1764000000000" }),
             g = n ~= "0" and r(3) == 1, ttl = pick(r, { 5000, 5000, 120000, false }) }
  end
  local function short_of(st)
    return table.concat({ st.n, st.t, st.q, st.k or "", st.g and "g" or "", OWNER }, "|")
  end
  local function hash_of(st)
    local h = { "n", st.n, "t", st.t, "q" .. OWNER, st.q }
    if st.n ~= "0" then h[#h + 1] = "o" .. OWNER; h[#h + 1] = st.n end
    if st.k then h[#h + 1] = "k" .. OWNER; h[#h + 1] = st.k end
    if st.g then h[#h + 1] = "g"; h[#h + 1] = OWNER end
    return h
  end

  -- Arguments by the names the headers give them, near the state's.
  -- (owner: the case's, one draw for all its arguments)
  local zero_count = { release = true, fair_release = true }   -- (0: a hint)
  local function value(r, name, st, k, owner, script)
    local q = tonumber(st.q)
    local pools = {
      owner = { owner }, req = { owner, owner, "c9|" .. owner },
      seq = { tostring(q - 1), st.q, tostring(q + 1), "100000" },
      lease_ms = { "5000", "60000" }, keep_ms = { "8000" },
      expect = { "0", "0", st.n }, token = { st.t, st.t, "999" },
      waited = { "-1", "0" }, waits = { "0", "1" }, pub = { "PUBLISH" },
      chan = { k .. ":ch" }, notice = { "notices" }, secret = { "0123456789abcdef" },
      count = { st.n, "1", zero_count[script] and "0" or st.n }, after = { "0", "1" }, fresh = { "0", "1" },
      kind = { "r", "w" }, writer = { "", OWNER }, permits = { "3" },
      cmd = { "ECHO" }, verb = { "NUMSUB" }, form = { "s", "h" },
    }
    return pick(r, assert(pools[name], "no values for " .. name))
  end

  local function run(name, seed, cases)
    local layout, r = LAYOUTS[name], rng(seed)
    local cmds, at, drawn = {}, {}, {}
    local t = helper.ints(srv.cli("time"))
    local until_ms = string.format("%d", t[1] * 1000 + math.floor(t[2] / 1000) + 60000)
    for i = 1, cases do
      local st = draw_state(r)
      -- a fair lock's queue: sometimes a waiter registered, live for 60 s
      st.waiter = name:match("^fair") and r(2) == 1
      local argv = {}
      local groups = layout.repeats and r(2) or 1
      for _ = 1, groups do
        for _, a in ipairs(layout.args) do argv[#argv + 1] = a end
      end
      drawn[i] = { st = st, argv = {} }
      at[i] = {}
      local base = ("short:%s:%d"):format(name, i)
      local who = pick(r, { OWNER, OWNER, OWNER, "other" })
      for j, a in ipairs(argv) do drawn[i].argv[j] = value(r, a, st, base .. ":x{t}", who, name) end
      if name == "guard" then drawn[i].argv[#argv + 1] = "hi" end
      for _, way in ipairs({ "hash", "short" }) do
        local k = ("%s:%s{t}"):format(base, way)
        local counter, q = k .. ":fence", k .. ":q"
        cmds[#cmds + 1] = { "DEL", k, counter, q }
        if way == "hash" then cmds[#cmds + 1] = { "HSET", k, table.unpack(hash_of(st)) }
        else cmds[#cmds + 1] = { "SET", k, short_of(st) } end
        if st.ttl then cmds[#cmds + 1] = { "PEXPIRE", k, st.ttl } end
        cmds[#cmds + 1] = { "SET", counter, "40" }
        if st.waiter then
          cmds[#cmds + 1] = { "HSET", q, "H", "w", "T", "w", "c", "1", "nw", "", "pw", "",
                              "rw", until_ms .. ":5:10000", "sw", "0123456789abcdef" }
        end
        local keys = {}
        for j, key in ipairs(layout.keys) do
          keys[j] = ({ lock = k, counter = counter, queue = q, data = k })[key]
        end
        if layout.repeats then
          keys = {}
          for g = 1, groups do keys[g] = k end
        end
        local ev = helper.script_head(fns, name, #keys)
        for _, x in ipairs(keys) do ev[#ev + 1] = x end
        for _, a in ipairs(drawn[i].argv) do ev[#ev + 1] = (a:gsub(":x{t}$", ":" .. way .. "{t}")) end
        cmds[#cmds + 1] = ev
        at[i][way] = #cmds
        cmds[#cmds + 1] = { "TYPE", k }
        cmds[#cmds + 1] = { "HGETALL", k }
        cmds[#cmds + 1] = { "GET", k }
        cmds[#cmds + 1] = { "PTTL", k }
        cmds[#cmds + 1] = { "GET", counter }
        cmds[#cmds + 1] = { "HGETALL", q }
      end
    end
    local res = helper.pipeline(srv, cmds)
    local function after(j)
      local h = {}
      if res[j + 1] == "string" then h = decode(res[j + 3])
      else for x = 1, #res[j + 2], 2 do h[res[j + 2][x]] = res[j + 2][x + 1] end end
      local ttl = res[j + 4]
      local q, qh = res[j + 6], {}
      if type(q) == "table" and not q.err then
        for x = 1, #q, 2 do qh[q[x]] = q[x + 1] end
      else qh = q end
      return { hash = h, ttl = ttl > 0 and math.floor((ttl + 500) / 1000) or ttl,
               counter = res[j + 5], queue = qh }
    end
    local bad, shorts = {}, 0
    for i = 1, cases do
      local a, b = at[i].hash, at[i].short
      if res[b + 1] == "string" then shorts = shorts + 1 end
      local reply_a, reply_b = res[a], res[b]
      if type(reply_a) == "table" and reply_a.err then reply_a = { err = (reply_a.err:gsub(":%a+{t}", "")) } end
      if type(reply_b) == "table" and reply_b.err then reply_b = { err = (reply_b.err:gsub(":%a+{t}", "")) } end
      if not same_reply(reply_a, reply_b) or dump(after(a)) ~= dump(after(b)) then
        bad[#bad + 1] = ("case %d: state %s argv {%s}: hash %s %s, short %s %s"):format(
          i, dump(drawn[i].st), table.concat(drawn[i].argv, " "),
          dump(res[a]), dump(after(a)), dump(res[b]), dump(after(b)))
      end
    end
    assert.equals(0, #bad, table.concat(bad, "\n", 1, math.min(#bad, 4)))
    return shorts
  end

  local names = {}
  for name in pairs(LAYOUTS) do names[#names + 1] = name end
  table.sort(names)
  for n, name in ipairs(names) do
    it(name .. ".lua answers and leaves what it does on the hash", function()
      local left_short = run(name, 20261203 + n, 150)
      local reader = ({ guard = true, inspect = true, sem_free = true, ttl = true })[name]
      local keeps = ({ acquire = true, acquire1 = true, release = true, renew = true,
                       fair_acquire = true, fair_release = true, fair_release1 = true,
                       drop = true, fair_drop1 = true, fair_acquire1 = true })[name]
      if reader then
        assert.equals(150, left_short)     -- a script that only reads changes nothing
      elseif keeps then
        assert.is_true(left_short > 0)   -- where it can, short it stays
      else
        assert.equals(0, left_short)       -- a writer meets the hash it stands for
      end
    end)
  end

  it("keeps a TTL through the conversion, in a lock's last milliseconds and at its longest", function()
    local cmds = {}
    for i = 1, 200 do
      local k = ("short:last:%d{t}"):format(i)
      cmds[#cmds + 1] = { "DEL", k }
      cmds[#cmds + 1] = { "SET", k, "1|5|3||g|" .. OWNER, "PX", tostring(i % 3 + 1) }
      local ev = helper.script_head(fns, "extend", 1)
      for _, a in ipairs({ k, OWNER, "5000", "999" }) do ev[#ev + 1] = a end
      cmds[#cmds + 1] = ev
      cmds[#cmds + 1] = { "PTTL", k }
    end
    local huge = "9223000000000000000"                -- near the most Redis takes
    cmds[#cmds + 1] = { "SET", "short:huge{t}", "2|5|3|8000e99||" .. OWNER, "PX", huge }
    local ev = helper.script_head(fns, "acquire", 2)
    for _, a in ipairs({ "short:huge{t}", "short:huge{t}:fence", "other", "other", "9", "5000", "0", "0", "-1" }) do
      ev[#ev + 1] = a
    end
    cmds[#cmds + 1] = ev
    cmds[#cmds + 1] = { "TYPE", "short:huge{t}" }
    cmds[#cmds + 1] = { "PTTL", "short:huge{t}" }
    local r = helper.pipeline(srv, cmds)
    for i = 1, 200 do
      local ttl = r[4 * i]
      assert.is_true(ttl == -2 or ttl >= 0, ("case %d: a converted lock without a TTL (%s)"):format(i, tostring(ttl)))
    end
    assert.equals(0, r[#r - 2][1])                   -- busy: OWNER holds it
    assert.equals("hash", r[#r - 1])
    assert.is_true(r[#r] >= 2 ^ 52, tostring(r[#r]))   -- 142,000 years at least
  end)

  it("is no hold to a script that does not know it: WRONGTYPE, never a second holder", function()
    local k = "short:old{t}"
    assert.equals("OK", srv.cli("set", k, "1|5|3|||" .. OWNER, "px", "5000"))
    -- every call on a lock of every script before the short form: a hash
    -- command, which Redis refuses on a string before it does anything
    local cmds = {}
    for _, c in ipairs({ { "hmget", "n", "oother" }, { "hget", "n" }, { "hgetall" }, { "hexists", "n" },
                         { "hkeys" }, { "hlen" }, { "hincrby", "n", "1" }, { "hset", "n", "1" },
                         { "hdel", "n" } }) do
      cmds[#cmds + 1] = { c[1]:upper(), k, table.unpack(c, 2) }
    end
    for i, r in ipairs(helper.pipeline(srv, cmds)) do
      assert.truthy(type(r) == "table" and r.err and r.err:find("^WRONGTYPE"), cmds[i][1])
    end
    assert.equals("string", srv.cli("type", k))
  end)
end)
