-- scriptdrive.lua: the one driver of the Redis-side scripts by hand, for
-- every spec that runs them with FCALL or EVALSHA (helper.scripts): each script called by the names
-- its header gives (and the usual ones positionally, with their defaults),
-- and the state it leaves read back from the real server (HGETALL, PTTL,
-- ZRANGE, server TIME).
local helper = require "helper"

local drive = {}

--- A driver for lock `key` (its counter key .. ":fence" and queue key
--- .. ":q": the same slot) on server handle srv, scripts `sha`
--- (helper.load_scripts).
function drive.new(srv, sha, key)
  local d = { srv = srv, key = key, fence = key .. ":fence", queue = key .. ":q" }
  local ints = helper.ints

  --- Script `name`'s raw reply (redis-cli's text), keys by name
  --- (default: this lock's), arguments by name.
  function d.raw(name, args, keys)
    return helper.evalsha(srv, sha, name, keys or
      { lock = d.key, counter = d.fence, queue = d.queue }, args)
  end
  --- The reply's integers; an acquire's or a release's integer reply as
  --- the array it stands for ({1, 1, token}, {1, holds left}).
  local whole = { acquire = { 1, 1 }, acquire1 = { 1, 1 }, rw_acquire = { 1, 1 },
                  fair_acquire = { 1, 1 }, fair_acquire1 = { 1, 1 }, release = { 1 },
                  fair_release = { 1 }, fair_release1 = { 1 }, sem_release = { 1 },
                  sem_release1 = { 1 } }
  function d.call(name, args, keys)
    local out = d.raw(name, args, keys)
    local r, pre = ints(out), whole[name]
    if pre and #r == 1 and r[1] >= 0 then   -- (no array of theirs is one such)
      return { pre[1], pre[2] or r[1], pre[2] and r[1] or nil }
    end
    return r
  end

  --- A script that takes one group (KEYS[i], ARGV[3i-2..3i], or as its
  --- header says) per hold (renew, rw_renew): groups = { { lock, owner,
  --- lease_ms, token }, ... }; rw_renew's chan and pub are the group's
  --- lock's channel and PUBLISH.
  function d.groups(name, groups)
    local y = helper.script_layouts()[name]
    local args = y and y.args or { "req", "lease_ms", "token" }
    local argv = helper.script_head(sha, name, #groups)
    for _, g in ipairs(groups) do argv[#argv + 1] = g[1] end
    for _, g in ipairs(groups) do
      local more = { chan = g[1] .. ":ch", pub = "PUBLISH" }
      for j, a in ipairs(args) do
        argv[#argv + 1] = assert(g[j + 1] or more[a], name .. " takes " .. a)
      end
    end
    return ints(srv.cli((table.unpack or unpack)(argv)))
  end

  --- The whole hash `k` (default: the lock's) as field -> value.
  function d.hash(k)
    local out, h, lines = helper.lock_hgetall(srv, k or d.key), {}, {}
    for l in (out .. "\n"):gmatch("([^\n]*)\n") do lines[#lines + 1] = l end
    if out == "" then return h end
    for i = 1, #lines - 1, 2 do h[lines[i]] = lines[i + 1] end
    return h
  end
  function d.field(f, k) return helper.lock_field(srv, k or d.key, f) end
  function d.pttl(k) return tonumber(srv.cli("pttl", k or d.key)) end
  function d.exists(k) return srv.cli("exists", k or d.key) == "1" end
  function d.get(k) return tonumber(srv.cli("get", k)) end
  --- The members of sorted set k (default: the queue), lowest score first.
  function d.zrange(k)
    local r = {}
    for l in srv.cli("zrange", k or d.queue, 0, -1):gmatch("[^\n]+") do r[#r + 1] = l end
    return r
  end
  function d.zscore(m, k) return tonumber(srv.cli("zscore", k or d.queue, m)) end

  --- The server's clock (ms): what the scripts' now_ms() reads.
  function d.now_ms()
    local s, us = srv.cli("time"):match("(%d+)%s+(%d+)")
    return tonumber(s) * 1000 + math.floor(tonumber(us) / 1000)
  end
  --- Wait (bounded, with slack) until the server's clock passes ms.
  function d.wait_until(ms)
    return helper.wait_for(function() return d.now_ms() > ms end, 5, 0.01)
  end
  --- Let key k (default: the lock's) run out now, and wait until it has.
  function d.expire_now(k)
    srv.cli("pexpire", k or d.key, 1)
    assert(helper.wait_for(function() return not d.exists(k) end, 2, 0.005),
           "the key never expired")
  end

  --- A redis-cli subscribed to chan: a function that returns the
  --- messages it got so far, and one that stops it.
  function d.listen(chan) return helper.listen(srv, chan) end

  --- The scripts as the specs call them, positional, with the usual
  --- defaults (a lease of 10 s, a fresh acquire that will not wait, a
  --- record kept 10 s, PUBLISH on this lock's channel, P{name}:ch): the
  --- reply's integers, or its first where the script answers one number.
  local function freeing(t)
    t.keep_ms, t.chan, t.pub = t.keep_ms or 10000, d.key .. ":ch", "PUBLISH"
    return t
  end
  function d.acquire(owner, req, seq, lease_ms, expect, token, waited)
    return d.call("acquire", { owner = owner, req = req, seq = seq, lease_ms = lease_ms or 10000,
                               expect = expect or 0, token = token or 1, waited = waited or -1 })
  end
  function d.acquire1(owner, req, seq, lease_ms, expect, token)
    return d.call("acquire1", { owner = owner, req = req, seq = seq, lease_ms = lease_ms or 10000,
                                expect = expect or 0, token = token or 1 })
  end
  --- release(...): count, the client's guess of the owner's holds, is
  --- what Redis has (or 1)
  function d.release(owner, req, seq, token, keep_ms)
    local count = tonumber(d.field("o" .. owner)) or 1
    return d.call("release", freeing({ owner = owner, req = req, seq = seq, token = token,
                                       keep_ms = keep_ms, count = count }))
  end
  function d.void(owner, req, seq)
    return d.call("void", freeing({ owner = owner, req = req, seq = seq }))
  end
  --- drop(owner, count [, token [, req [, after]]]): token and after 0: any
  function d.drop(owner, count, token, req, after)
    return d.call("drop", freeing({ owner = owner, count = count, token = token or 0,
                                    req = req or owner, after = after or 0 }))[1]
  end
  function d.force(req, seq)
    local t = freeing({ req = req, seq = seq })
    t.notice = "s:forced"
    return d.call("force", t)[1]
  end
  --- (extend, fence and renew name the requester; a coroutine's is its owner)
  function d.extend(req, lease_ms, token)
    return d.call("extend", { req = req, lease_ms = lease_ms, token = token })[1]
  end
  --- fence(token, req [, seq]): seq: the acquire's ("0": none)
  function d.fence_to(token, req, seq)
    return d.call("fence", { token = token, req = req, seq = seq or "0" })[1]
  end
  function d.renew(req, lease_ms, token)
    return d.call("renew", { req = req, lease_ms = lease_ms, token = token })
  end
  function d.ttl() return d.call("ttl", {})[1] end
  --- The fair lock's: a grant is published on the waiter's own channel,
  --- with its registration's secret.
  function d.fair_acquire(owner, req, seq, secret, expect, token, lease_ms)
    return d.call("fair_acquire", { owner = owner, req = req, seq = seq,
                                    lease_ms = lease_ms or 10000, expect = expect or 0,
                                    token = token or 1, waits = "1", pub = "PUBLISH",
                                    secret = secret or "" })
  end
  function d.fair_release(owner, req, seq, token)
    return d.call("fair_release", { owner = owner, req = req, seq = seq, token = token,
                                    keep_ms = 10000, pub = "PUBLISH" })
  end
  --- fresh: "1" the cancelled attempt expected no hold (pending.c)
  function d.fair_void(owner, req, seq, fresh)
    return d.call("fair_void", { owner = owner, req = req, seq = seq, keep_ms = 10000,
                                 pub = "PUBLISH", fresh = fresh or "0" })
  end
  --- fair_drop(owner, count [, token [, keep_ms [, req]]]): token "0": any
  function d.fair_drop(owner, count, token, keep_ms, req)
    return d.call("fair_drop", { owner = owner, count = count, token = token or "0",
                                 keep_ms = keep_ms or 10000, pub = "PUBLISH",
                                 req = req or owner, after = "0" })[1]
  end
  --- The one-key forms a slot mid-migration falls back to: the lock's
  --- key alone (no queue, no counter), nothing published.
  function d.fair_acquire1(owner, req, seq, expect, token)
    return d.call("fair_acquire1", { owner = owner, req = req, seq = seq, lease_ms = 10000,
                                     expect = expect or 0, token = token or 1 })
  end
  function d.fair_release1(owner, req, seq, token)
    return d.call("fair_release1", { owner = owner, req = req, seq = seq, token = token,
                                     keep_ms = 10000 })
  end
  --- fair_drop1(owner, count [, token [, req]]): token "0": any
  function d.fair_drop1(owner, count, token, req)
    return d.call("fair_drop1", { owner = owner, count = count, token = token or "0",
                                  keep_ms = 10000, req = req or owner, after = "0" })[1]
  end
  function d.fair_void1(owner, req, seq, fresh)
    return d.call("fair_void1", { owner = owner, req = req, seq = seq, keep_ms = 10000,
                                  fresh = fresh or "0" })[1]
  end

  --- The read-write lock's: rw_acquire(kind, owner, seq [, lease_ms [,
  --- expect, token [, writer [, req]]]]): kind 'r' a reader, 'w' a
  --- writer, 'W' a writer that waits; the requester req (default: the
  --- owner, a coroutine owner). Its holds end by release and void.
  function d.rw_acquire(kind, owner, seq, lease_ms, expect, token, writer, req)
    return d.call("rw_acquire", { owner = owner, req = req or owner, seq = seq,
                                  lease_ms = lease_ms or 10000, expect = expect or 0,
                                  token = token or 1, kind = kind, writer = writer or "" })
  end
  function d.rw_renew(req, lease_ms, token)
    return d.call("rw_renew", { req = req, lease_ms = lease_ms, token = token,
                                chan = d.key .. ":ch", pub = "PUBLISH" })
  end

  --- The semaphore's: a permit is one owner ("<client id>:p<n>"), its
  --- requester the owner unless req says. sem_acquire(owner, seq [,
  --- permits (2) [, lease_ms [, expect [, waits ("1") [, req]]]]]), and
  --- sem_acquire1 the same in the one-key form; sem_release(owner, seq [,
  --- keep_ms [, req]]) and sem_release1.
  local function sem_acquire(name)
    return function(owner, seq, permits, lease_ms, expect, waits, req)
      return d.call(name, { owner = owner, req = req or owner, seq = seq,
                            lease_ms = lease_ms or 10000, expect = expect or 0, token = 0,
                            permits = permits or 2, waits = waits or "1" })
    end
  end
  local function sem_release(name)
    return function(owner, seq, keep_ms, req)
      return d.call(name, freeing({ owner = owner, req = req or owner, seq = seq, token = 0,
                                    keep_ms = keep_ms }))
    end
  end
  d.sem_acquire, d.sem_acquire1 = sem_acquire("sem_acquire"), sem_acquire("sem_acquire1")
  d.sem_release, d.sem_release1 = sem_release("sem_release"), sem_release("sem_release1")
  function d.sem_void(owner, seq)
    return d.call("sem_void", freeing({ owner = owner, req = owner, seq = seq }))
  end
  function d.sem_free(permits) return d.call("sem_free", { permits = permits })[1] end

  --- The holds of owner (field o<owner>), 0 if none.
  function d.count(owner) return tonumber(d.field("o" .. owner)) or 0 end

  return d
end

--- A reply of nested arrays, integers and strings, as `redis-cli --json`
--- prints it, decoded into Lua tables (integers as numbers, strings as
--- strings): enough for the scripts' replies (no objects, no floats).
function drive.json(s)
  local pos = 1
  local value
  local function skip() pos = s:find("[^%s,:]", pos) or #s + 1 end
  function value()
    skip()
    local c = s:sub(pos, pos)
    if c == "[" then
      pos = pos + 1
      local t = {}
      skip()
      while s:sub(pos, pos) ~= "]" do
        t[#t + 1] = value()
        skip()
        assert(pos <= #s, "unterminated array in " .. s)
      end
      pos = pos + 1
      return t
    elseif c == '"' then
      local out, i = {}, pos + 1
      while true do
        local ch = s:sub(i, i)
        assert(ch ~= "", "unterminated string in " .. s)
        if ch == '"' then break end
        if ch == "\\" then
          local e = s:sub(i + 1, i + 1)
          out[#out + 1] = ({ n = "\n", t = "\t", r = "\r" })[e] or e
          i = i + 2
        else
          out[#out + 1] = ch
          i = i + 1
        end
      end
      pos = i + 1
      return table.concat(out)
    elseif s:sub(pos, pos + 3) == "null" then
      pos = pos + 4
      return nil
    else
      local num = s:match("^%-?%d+", pos)
      assert(num, "unexpected reply text at " .. pos .. ": " .. s)
      pos = pos + #num
      return tonumber(num)
    end
  end
  return value()
end

--- Script `name` on srv, its reply decoded (redis-cli --json): keys and
--- args as helper.evalsha takes them.
function drive.eval_json(srv, sha, name, keys, args)
  local y = assert(helper.script_layouts()[name], "no script " .. name)
  local argv = helper.script_head(sha, name, #y.keys)
  for _, k in ipairs(y.keys) do argv[#argv + 1] = assert(keys[k], k) end
  for _, a in ipairs(y.args) do argv[#argv + 1] = assert(args[a], a) end
  for i, a in ipairs(argv) do argv[i] = ("'%s'"):format(a) end
  local p = assert(io.popen(("redis-cli -p %d %s --json %s 2>&1"):format(srv.port,
    helper.cli_flags[srv.port] or "", table.concat(argv, " "))))
  local out = p:read("*a")
  p:close()
  return drive.json(out), out
end

return drive
