-- The fast paths of acquire.lua, release.lua, fair_acquire.lua,
-- fair_release.lua and rw_acquire.lua (their code before their includes,
-- which runs before any helper is made) answer and write exactly what the
-- rest of the script does. Each state below is set up twice, on two keys:
-- one gets the whole script as dlock runs it (its function in the
-- library, or the script: helper.scripts), the other the script without
-- its fast path; their replies, the hashes they leave (and a fair lock's
-- queue), the counters and the TTLs must be the same. The states are drawn near the
-- ones the fast path takes: from a state it takes, one or two fields
-- changed to a value that sends the script past it (or not).
local helper = require "helper"

local ROOT = (debug.getinfo(1, "S").source:match("^@(.*)/[^/]*$") or ".") .. "/.."
local gen = dofile(ROOT .. "/tools/gen-scripts.lua")
local DIR = ROOT .. "/src/redis/scripts"

-- name's text without its fast path (the code before its first include).
local function slow_text(name)
  local _, _, pieces = gen.script(DIR, name, {})
  assert(not pieces[1].lib and pieces[2].lib, name .. ".lua: no fast path")
  local lines = {}
  for i = 2, #pieces do
    for _, l in ipairs(pieces[i]) do lines[#lines + 1] = l end
  end
  return table.concat(lines, "\n") .. "\n"
end

-- A small deterministic generator (the same draws on every run).
local function rng(seed)
  local x = seed
  return function(n)
    x = (x * 1103515245 + 12345) % 2147483648
    return x % n + 1
  end
end
local function pick(r, t) return t[r(#t)] end

-- ms timestamps (13 digits) as "T", so that two runs a few ms apart
-- compare equal; other numbers as they are.
local function norm(v)
  if type(v) == "string" then return (v:gsub("%d%d%d%d%d%d%d%d%d%d%d%d%d", "T")) end
  return v
end

local function dump(v)
  if type(v) ~= "table" then return tostring(v) end
  local keys, out = {}, {}
  for k in pairs(v) do keys[#keys + 1] = tostring(k) end
  table.sort(keys)
  for _, k in ipairs(keys) do
    out[#out + 1] = k .. "=" .. dump(v[k] == nil and v[tonumber(k)] or v[k])
  end
  return "{" .. table.concat(out, " ") .. "}"
end

-- The hash a lock's short form v stands for, as HGETALL gives it
-- (src/redis/scripts/README.md, THE SHORT FORM: the spec's own reading).
local function short_hash(v)
  local n, t, q, kv, g, owner = v:match("^(%d+)|(%d+)|(%d+)|([%de]*)|(g?)|(.+)$")
  assert(n, "not a short form: " .. v)
  local h = { "n", n, "t", t, "q" .. owner, q }
  if n ~= "0" then h[#h + 1] = "o" .. owner; h[#h + 1] = n end
  if kv ~= "" then h[#h + 1] = "k" .. owner; h[#h + 1] = kv end
  if g == "g" then h[#h + 1] = "g"; h[#h + 1] = owner end
  return h
end

local function snapshot(hgetall, counter, pttl, queue, str)
  local h, q = {}, {}
  if hgetall.err then hgetall = short_hash(str) end
  for i = 1, #hgetall, 2 do h[hgetall[i]] = norm(hgetall[i + 1]) end
  for i = 1, #queue, 2 do q[queue[i]] = norm(queue[i + 1]) end
  return { hash = h, counter = counter, queue = q,
           ttl = type(pttl) == "number" and pttl > 0 and math.floor((pttl + 500) / 1000) or pttl }
end

-- The reply, its numbers within 50 ms (a wait computed from the clock).
local function same_reply(a, b)
  if type(a) ~= "table" or type(b) ~= "table" then return a == b end
  if a.err or b.err then return a.err == b.err end
  if #a ~= #b then return false end
  for i = 1, #a do
    if type(a[i]) == "number" and type(b[i]) == "number" then
      if math.abs(a[i] - b[i]) > 50 then return false end
    elseif a[i] ~= b[i] then return false end
  end
  return true
end

describe("the fast paths of the scripts #nocore", function()
  local srv = helper.redis()
  local fast, slow = {}, {}
  setup(function()
    local all = helper.load_scripts(srv)
    for _, name in ipairs({ "acquire", "release", "fair_acquire", "fair_release", "rw_acquire" }) do
      fast[name] = all[name]
      slow[name] = helper.load_script(srv, name .. "-slow", slow_text(name))
    end
  end)

  local function now_ms()
    local r = helper.pipeline(srv, { { "TIME" } })[1]
    return tonumber(r[1]) * 1000 + math.floor(tonumber(r[2]) / 1000)
  end

  -- Run script `name` on each case ({ fields = {f, v, ...}, counter =
  -- value or false, argv = {...}, records = n, queue = {f, v, ...} or
  -- nil: the fair lock's queue hash }) both ways; every difference is
  -- reported.
  local KEYS = { acquire = { "k", "counter" }, release = { "k" },
                 fair_acquire = { "k", "counter", "q" }, fair_release = { "k", "counter", "q" },
                 rw_acquire = { "k", "counter" } }
  local function compare(name, cases)
    local cmds, at = {}, {}
    for i, c in ipairs(cases) do
      at[i] = {}
      for _, way in ipairs({ "fast", "slow" }) do
        local k = ("fast:%s:%d:%s{x}"):format(name, i, way)
        local counter, q = k .. ":fence", k .. ":q"
        cmds[#cmds + 1] = { "DEL", k, counter, q }
        if #c.fields > 0 then cmds[#cmds + 1] = { "HSET", k, table.unpack(c.fields) } end
        if c.queue and #c.queue > 0 then cmds[#cmds + 1] = { "HSET", q, table.unpack(c.queue) } end
        for j = 1, c.records or 0 do       -- past requesters' records: a prune's work
          cmds[#cmds + 1] = { "HSET", k, "qold" .. j, "3", "kold" .. j, "1000" }
        end
        if c.counter then cmds[#cmds + 1] = { "SET", counter, c.counter } end
        local sha = way == "fast" and fast[name] or slow[name]
        local keys = {}
        for j, key in ipairs(KEYS[name]) do keys[j] = ({ k = k, counter = counter, q = q })[key] end
        local ev = helper.script_head({ [name] = sha }, name, #keys)
        for _, x in ipairs(keys) do ev[#ev + 1] = x end
        for _, a in ipairs(c.argv) do ev[#ev + 1] = a end
        cmds[#cmds + 1] = ev
        at[i][way] = #cmds
        cmds[#cmds + 1] = { "HGETALL", k }
        cmds[#cmds + 1] = { "GET", counter }
        cmds[#cmds + 1] = { "PTTL", k }
        cmds[#cmds + 1] = { "HGETALL", q }
        cmds[#cmds + 1] = { "GET", k }
      end
    end
    local r = helper.pipeline(srv, cmds)
    local bad = {}
    for i, c in ipairs(cases) do
      local f, s = at[i].fast, at[i].slow
      local sf = snapshot(r[f + 1], r[f + 2], r[f + 3], r[f + 4], r[f + 5])
      local ss = snapshot(r[s + 1], r[s + 2], r[s + 3], r[s + 4], r[s + 5])
      if not same_reply(r[f], r[s]) or dump(sf) ~= dump(ss) then
        bad[#bad + 1] = ("case %d: fields {%s} queue {%s} counter %s argv {%s}: fast %s %s, slow %s %s"):format(
          i, table.concat(c.fields, " "), table.concat(c.queue or {}, " "), tostring(c.counter),
          table.concat(c.argv, " "),
          dump(r[f]), dump(sf), dump(r[s]), dump(ss))
      end
    end
    assert.equals(0, #bad, table.concat(bad, "\n", 1, math.min(#bad, 5)))
  end

  -- field lists: name -> value (false: absent), as HSET arguments
  local function fields(t)
    local out, names = {}, {}
    for n in pairs(t) do names[#names + 1] = n end
    table.sort(names)
    for _, n in ipairs(names) do
      if t[n] then out[#out + 1] = n; out[#out + 1] = t[n] end
    end
    return out
  end

  -- 600 cases, each case(r, T, seq, s): the draws r, the server's clock T,
  -- a request id seq drawn from seqs (s: as a number).
  local OWNER, OTHER = "w", "c1|w"
  local function draw(seed, seqs, case)
    local T, r, cases = now_ms(), rng(seed), {}
    for i = 1, 600 do
      local seq = pick(r, seqs)
      cases[i] = case(r, T, seq, tonumber(seq))
    end
    return cases
  end

  it("acquire: the same as without it, near a free lock and a fresh hold", function()
    local owner, other = OWNER, OTHER
    compare("acquire", draw(20261202, { "7", "10", "100" }, function(r, T, seq, s)
      local st = { n = pick(r, { false, "0" }), t = pick(r, { false, "5", "100" }),
                   ["q" .. owner] = pick(r, { false, tostring(s - 1), "3" }),
                   ["k" .. owner] = pick(r, { false, "3000e99" }) }
      local argv = { owner, owner, seq, "5000", "0", "0", pick(r, { "-1", "0", "50" }) }
      local counter = pick(r, { false, "3", "5", "99", "100", "200" })
      local records = r(8) == 1 and 70 or 0
      for _ = 1, r(3) - 1 do                -- one or two fields changed
        local which = r(11)
        if which == 1 then st.n = pick(r, { "1", "2", "-1" })
        elseif which == 2 then                -- a hold its client does not know of
          st["o" .. owner] = pick(r, { "1", "2" })
          st["e" .. owner] = pick(r, { false, tostring(T + 5000) })
        elseif which == 3 then
          st["q" .. owner] = pick(r, { seq, tostring(s + 1), tostring(s - 1) .. "!", seq .. "!",
                                       tostring(s * 10), "9", "99", "0" })
        elseif which == 4 then st.v = pick(r, { "", (T - 100) .. ":x", (T - 100) .. ":" .. owner })
        elseif which == 5 then
          st.r = pick(r, { (T + 60000) .. ":x", (T - 1000) .. ":x", (T + 60000) .. ":" .. owner })
        elseif which == 6 then st.D = pick(r, { tostring(T + 5000), tostring(T - 1000) })
        elseif which == 7 then st.b = pick(r, { tostring(T + 5000), tostring(T - 1000) })
        elseif which == 8 then argv[5] = pick(r, { "1", "2" }); argv[6] = pick(r, { "5", "100" })
        elseif which == 9 then argv[2] = other; st["h" .. other] = pick(r, { false, "1" })
        elseif which == 10 then st.ox = "1"; st.n = "1"; st.t = st.t or "5"
        else counter = pick(r, { "-2", "0", "100", "101" }) end
      end
      return { fields = fields(st), counter = counter, argv = argv, records = records }
    end))
  end)

  -- Change `which` (1 to 7; any other: no token) of a release's state st
  -- and its argv (tok: the hold's token), near a last hold nobody waits
  -- for (release, fair_release).
  local function release_change(r, T, seq, s, st, argv, tok, which)
    local owner, other = OWNER, OTHER
    if which == 1 then st.n = pick(r, { "2", "0", false })
    elseif which == 2 then st["o" .. owner] = pick(r, { "2", false })
    elseif which == 3 then
      st["q" .. owner] = pick(r, { seq, tostring(s + 1), tostring(s - 1) .. "!", seq .. "!",
                                   tostring(s * 10), "9", "99" })
    elseif which == 4 then st.v = pick(r, { "", (T - 100) .. ":x", (T - 100) .. ":" .. owner })
    elseif which == 5 then st.b = pick(r, { tostring(T + 5000), tostring(T - 1000) })
    elseif which == 6 then argv[4] = tok == "5" and "100" or "5"
    elseif which == 7 then
      argv[2] = other; st["h" .. other] = pick(r, { false, "1" })
      st.D = pick(r, { false, tostring(T + 5000), tostring(T - 1000) })
      if st.D then st["d" .. other] = st.D end
    else st.t = false end
  end

  it("release: the same as without it, near a last hold nobody waits for", function()
    local owner = OWNER
    compare("release", draw(20261203, { "8", "10", "101" }, function(r, T, seq, s)
      local tok = pick(r, { "5", "100" })
      local st = { n = "1", t = tok, ["o" .. owner] = "1",
                   ["q" .. owner] = pick(r, { false, tostring(s - 1), "3" }) }
      local argv = { owner, owner, seq, tok, "5000", "fast:ch", "PUBLISH" }
      for _ = 1, r(3) - 1 do release_change(r, T, seq, s, st, argv, tok, r(8)) end
      return { fields = fields(st), counter = false, argv = argv }
    end))
  end)
  -- A fair lock's queue ({ f, v, ... }): none, empty, a live waiter x, a
  -- dead one, or the caller itself first.
  local function queue(r, T, owner)
    local function one(who, live)
      return { "H", who, "T", who, "c", "1", "n" .. who, "", "p" .. who, "",
               "r" .. who, ("%d:5:5000"):format(live and T + 60000 or T - 1000), "s" .. who, "00000000000000aa" }
    end
    return pick(r, { false, false, false, { "H", "" }, one("x", true), one("x", false),
                     one(owner, true) })
  end

  it("fair_acquire: the same as without it, near a free lock with nobody queued", function()
    local owner, other = OWNER, OTHER
    compare("fair_acquire", draw(20261204, { "7", "10", "100" }, function(r, T, seq, s)
      local st = { n = pick(r, { false, "0" }), t = pick(r, { false, "5", "100" }),
                   ["q" .. owner] = pick(r, { false, tostring(s - 1), "3" }),
                   ["k" .. owner] = pick(r, { false, "3000e99" }), g = pick(r, { false, false, owner }) }
      local argv = { owner, owner, seq, "5000", "0", "0", pick(r, { "0", "1" }), "PUBLISH",
                     "00000000000000bb" }
      local counter = pick(r, { false, "3", "5", "99", "100", "200" })
      local records = r(8) == 1 and 70 or 0
      local q = false
      for _ = 1, r(3) - 1 do                -- one or two fields changed
        local which = r(11)
        if which == 1 then st.n = pick(r, { "1", "2", "-1" })
        elseif which == 2 then                -- a hold its client does not know of
          st["o" .. owner] = pick(r, { "1", "2" })
          st["e" .. owner] = pick(r, { false, tostring(T + 5000) })
        elseif which == 3 then
          st["q" .. owner] = pick(r, { seq, tostring(s + 1), tostring(s - 1) .. "!", seq .. "!",
                                       tostring(s * 10), "9", "99", "0" })
        elseif which == 4 then st.g = pick(r, { other, "x", owner })
        elseif which == 5 then q = queue(r, T, owner)
        elseif which == 6 then st.D = pick(r, { tostring(T + 5000), tostring(T - 1000) })
        elseif which == 7 then st["o" .. owner] = "1"; st.n = "1"; st.g = owner; st.t = st.t or "5"
        elseif which == 8 then argv[5] = pick(r, { "1", "2" }); argv[6] = pick(r, { "5", "100" })
        elseif which == 9 then argv[2] = other; st["h" .. other] = pick(r, { false, "1" })
        elseif which == 10 then st.ox = "1"; st.n = "1"; st.t = st.t or "5"
        else counter = pick(r, { "-2", "0", "100", "101" }) end
      end
      return { fields = fields(st), counter = counter, argv = argv, records = records,
               queue = q or nil }
    end))
  end)

  it("fair_release: the same as without it, near a last hold with nobody queued", function()
    local owner = OWNER
    compare("fair_release", draw(20261205, { "8", "10", "101" }, function(r, T, seq, s)
      local tok = pick(r, { "5", "100" })
      local st = { n = "1", t = tok, ["o" .. owner] = "1", g = pick(r, { false, owner }),
                   ["q" .. owner] = pick(r, { false, tostring(s - 1), "3" }) }
      local argv = { owner, owner, seq, tok, "5000", "PUBLISH" }
      local counter = pick(r, { false, "5", "100" })
      local q = false
      for _ = 1, r(3) - 1 do
        local which = r(9)
        if which == 8 then q = queue(r, T, owner)
        else release_change(r, T, seq, s, st, argv, tok, which) end
      end
      return { fields = fields(st), counter = counter, argv = argv, queue = q or nil }
    end))
  end)
  it("rw_acquire: the same as without it, near a free lock, a reader's and a writer's", function()
    local owner, other = OWNER, OTHER
    compare("rw_acquire", draw(20261206, { "7", "10", "100" }, function(r, T, seq, s)
      local st = { n = pick(r, { false, "0" }), t = pick(r, { false, "5", "100" }),
                   ["q" .. owner] = pick(r, { false, tostring(s - 1), "3" }),
                   ["k" .. owner] = pick(r, { false, "3000e99" }) }
      local argv = { owner, owner, seq, "5000", "0", "0", pick(r, { "r", "w", "W" }),
                     pick(r, { "", "", owner }) }
      local counter = pick(r, { false, "3", "5", "99", "100", "200" })
      local records = r(8) == 1 and 70 or 0
      for _ = 1, r(3) - 1 do                -- one or two fields changed
        local which = r(11)
        if which == 1 then st.n = pick(r, { "1", "2", "-1" })
        elseif which == 2 then                -- a hold its client does not know of,
          st["o" .. owner] = pick(r, { "1", "2", false })   -- or an ended read hold's lease
          st["e" .. owner] = pick(r, { false, tostring(T + 5000), tostring(T - 1000) })
        elseif which == 3 then
          st["q" .. owner] = pick(r, { seq, tostring(s + 1), tostring(s - 1) .. "!", seq .. "!",
                                       tostring(s * 10), "9", "99", "0" })
        elseif which == 4 then st.w = pick(r, { owner, "x" }); st.ox = pick(r, { false, "1" })
        elseif which == 5 then st.x = pick(r, { tostring(T + 5000), tostring(T - 1000) })
        elseif which == 6 then st.D = pick(r, { tostring(T + 5000), tostring(T - 1000) })
        elseif which == 7 then st.b = pick(r, { tostring(T + 5000), tostring(T - 1000) })
        elseif which == 8 then argv[5] = pick(r, { "1", "2" }); argv[6] = pick(r, { "5", "100" })
        elseif which == 9 then argv[2] = other; st["h" .. other] = pick(r, { false, "1" })
        elseif which == 10 then                 -- another reader holds
          st.ox = "1"; st.ex = tostring(T + pick(r, { 5000, -1000 })); st.n = "1"; st.t = st.t or "5"
        else counter = pick(r, { "-2", "0", "100", "101" }) end
      end
      return { fields = fields(st), counter = counter, argv = argv, records = records }
    end))
  end)
end)
