-- Redlock (servers = {...}) beyond the common lock API of ha_spec.lua:
-- retry jitter, and a waiter's subscriber connections to a hung master.
local dlock = require "dlock"
local helper = require "helper"

describe("Redlock retry jitter", function()
  it("gives different Redlock jitter in different processes (no shared random())", function()
    local outs = {}
    for i = 1, 2 do
      local ok, out = helper.run_lua([[
        local core = require "dlock.core"
        local t = {}
        for i = 1, 8 do t[i] = core.jitter() end
        print(table.concat(t, " "))
      ]])
      assert.is_true(ok, out)
      outs[i] = out
    end
    assert.are_not.equal(outs[1], outs[2])
  end)
end)

describe("a subscriber connection to a server that hangs", function()
  it("is bounded in its set-up (SELECT) by connect_timeout", function()
    local srvs, urls = {}, {}
    for i = 1, 3 do
      srvs[i] = helper.start_redis()
      urls[i] = ("redis://127.0.0.1:%d/1"):format(srvs[i].port)  -- db 1: SELECT
    end
    local holder = assert(dlock.connect{ servers = urls })
    local name = helper.unique_name("hang")
    assert(holder:lock(name):acquire())
    srvs[3].signal("STOP")               -- accepts connections, answers nothing
    local script = helper.tmp .. "/hang-" .. name:gsub(":", "_") .. ".lua"
    local f = assert(io.open(script, "wb"))
    f:write([[
      local dlock = require "dlock"
      local c = assert(dlock.connect{ servers = { arg[1], arg[2], arg[3] },
                                      connect_timeout = 0.3, command_timeout = 0.3 })
      local t0 = dlock.now()
      local ok, err = c:lock(arg[4]):acquire{ wait = 1 }
      print("waited", dlock.now() - t0, ok, err)
    ]])
    f:close()
    local p = assert(io.popen(("timeout 10 env %s %s '%s' '%s' '%s' '%s' 2>&1"):format(
      helper.lua_cmd(), script, urls[1], urls[2], urls[3], name)))
    local out = p:read("*a")
    p:close()
    srvs[3].signal("CONT")
    local waited = tonumber(out:match("waited%s+([%d%.]+)"))
    assert.is_number(waited, out)
    assert.is_true(waited < 4, out)      -- wait 1 s, plus bounded set-ups
    assert.matches("timeout", out)
    holder:close()
    for i = 1, 3 do srvs[i].stop() end
  end)
end)

describe("a shared owner on Redlock", function()
  -- Where one client's acquire never landed, another client of the owner
  -- may begin a tenancy of its own, and its token may equal the first
  -- one's (each master counts for itself). Such a master must never count
  -- towards the other client's quorum beside masters where it joined: a
  -- quorum has joined one tenancy, or begun one. (Until each client took
  -- out only its own holds, the first client's release took that hold.
  -- A read hold too: a reader whose hold vanishes under it is no longer
  -- kept apart from writers.)
  -- Three masters, and a proxy in front of the third (nil: pending).
  local function three_masters()
    local srvs, urls = {}, {}
    for i = 1, 3 do
      srvs[i] = helper.start_redis()
      urls[i] = srvs[i].url
    end
    local px = helper.proxy(srvs[3])
    if not px then
      for i = 1, 3 do srvs[i].stop() end
      pending("needs cqueues for the proxy")
    end
    return srvs, urls, px
  end
  -- Master srv never saw the acquire of token's tenancy: no hash, and a
  -- counter one behind (a master that missed tenancies), so a fresh
  -- tenancy there mints that token again.
  local function never_saw(srv, name, token)
    local fence = srv.cli("keys", "*:fence"):match("%S+")
    srv.cli("del", "dlock:{" .. name .. "}")
    srv.cli("set", fence, tostring(token - 1))
  end
  -- The proxy loses requests from now on (once it has read that).
  local function lose(px)
    px.set("lose")
    assert(helper.wait_for(function()
      return not helper.host_sh(("timeout 0.3 redis-cli -p %d ping"):format(px.port))
    end, 10), "the proxy does not lose requests")
  end

  local kinds = {
    lock = function(cl, name, opts) return cl:lock(name, opts) end,
    fair_lock = function(cl, name, opts) return cl:fair_lock(name, opts) end,
    ["write half"] = function(cl, name, opts) return cl:rwlock(name, opts).write end,
    ["read half"] = function(cl, name, opts) return cl:rwlock(name, opts).read end,
  }
  for _, kind in ipairs({ "lock", "fair_lock", "write half", "read half" }) do
    local make = kinds[kind]
    it(("never grants a %s a quorum that mixes a joined tenancy and a fresh one"):format(kind),
       function()
      local srvs, urls, px = three_masters()
      if not px then return end
      local name = helper.unique_name("shared")
      local a = assert(dlock.connect{ servers = urls })
      local b = assert(dlock.connect{ servers = { urls[1], urls[2], px.url },
                                      command_timeout = 0.3 })
      local c = assert(dlock.connect{ servers = urls })
      local la = make(a, name, { owner = "job" })
      assert(la:acquire())
      local token = assert(la:token())
      never_saw(srvs[2], name, token)    -- A's acquire
      lose(px)                           -- B's requests to master 3
      local lb = make(b, name, { owner = "job" })
      local got = lb:try_acquire() ~= nil  -- 1: joins A's; 2: a fresh one
      px.set("pass")
      assert(la:release())               -- on master 2 it takes B's hold
      local lc = kind == "read half" and c:rwlock(name).write or make(c, name)
      local other = lc:try_acquire() ~= nil  -- 2 and 3 are free now
      assert.is_false(got and lb:held() and other, "B and C both hold " .. name)
      assert.is_false(got)               -- B was told busy, and undid it
      assert.is_true(other)
      assert(lc:release())
      a:close(); b:close(); c:close()
      px.stop()
      for i = 1, 3 do srvs[i].stop() end
    end)
  end

  -- Grants of one kind each, and yet: were a release to take out any hold
  -- of the owner, A's and F's releases would take E's holds on masters 2
  -- and 3, where A and F never held, and leave E one master. Each client
  -- takes out only its own holds (lib/holder.lua).
  it("takes out only each client's own holds: one keeps its quorum while others release",
     function()
    local srvs, urls, px = three_masters()
    if not px then return end
    local name = helper.unique_name("shared")
    local a = assert(dlock.connect{ servers = urls })
    local e = assert(dlock.connect{ servers = urls })
    local f = assert(dlock.connect{ servers = { urls[1], urls[2], px.url },
                                    command_timeout = 0.3 })
    local c = assert(dlock.connect{ servers = urls })
    assert(f:ping())
    local la = a:lock(name, { owner = "job" })
    assert(la:acquire())
    local token = assert(la:token())
    never_saw(srvs[2], name, token)      -- A's acquire
    local le = e:lock(name, { owner = "job" })
    assert(le:try_acquire())             -- joins on 1 and 3, begins on 2
    lose(px)                             -- F's requests to master 3
    local lf = f:lock(name, { owner = "job" })
    assert(lf:try_acquire())             -- joins on 1 and 2
    px.set("pass")
    local ra = { la:release() }          -- (each is lost on a master where it
    local rf = { lf:release() }          -- never held)
    assert.is_true(le:held())
    local lc = c:lock(name)
    local other = lc:try_acquire() ~= nil
    assert.is_false(other, ("E and C both hold %s (A's release: %s, F's: %s)"):format(
      name, tostring(ra[1] or ra[2]), tostring(rf[1] or rf[2])))
    assert(le:release())
    assert.is_true(lc:try_acquire() ~= nil)
    assert(lc:release())
    a:close(); e:close(); f:close(); c:close()
    px.stop()
    for i = 1, 3 do srvs[i].stop() end
  end)

  -- A quorum joined B's tenancy, a minority began one of its own with a
  -- higher token: A's grant is B's tenancy and token, on every master.
  -- (Fenced to the higher one, the joined masters took B's token away,
  -- and B was told lost at its next renewal, though the owner held
  -- throughout; left with its own token, A's minority hold made the next
  -- acquire that joined it do the same: found in review.)
  it("gives a grant joined on a quorum the joined tenancy's token, everywhere: the co-owner keeps its hold",
     function()
    local srvs, urls, px = three_masters()
    if not px then return end
    local name = helper.unique_name("shared")
    local key = "dlock:{" .. name .. "}"
    local lost = {}
    local a = assert(dlock.connect{ servers = urls })
    local b = assert(dlock.connect{ servers = { urls[1], urls[2], px.url },
                                    command_timeout = 0.3, lease = 3,
                                    on_lost = function(_, why) lost[#lost + 1] = why end })
    local c = assert(dlock.connect{ servers = urls })
    assert(b:ping())
    lose(px)                             -- B's requests to master 3
    local lb = b:lock(name, { owner = "job" })
    assert(lb:acquire())                 -- on masters 1 and 2
    local tb = assert(lb:token())
    px.set("pass")
    local fence = assert(srvs[1].cli("keys", "*:fence"):match("%S+"))
    srvs[3].cli("set", fence, tostring(tb + 10))   -- master 3 minted more
    local la = a:lock(name, { owner = "job" })
    for round = 1, 2 do                  -- the second: after A's release
      assert(la:acquire())               -- joins on 1 and 2, begins on 3
      assert.equals(tb, la:token())
      for i = 1, 3 do
        assert.equals(tostring(tb), srvs[i].cli("hget", key, "t"), "master " .. i .. ", round " .. round)
      end
      assert(la:release())
      assert.is_true(helper.is_free(srvs[3], key), "A's hold on master 3 stays")
    end
    -- Were the fence lost on master 3, A's hold there would keep its own
    -- token, and outlive A's release (told lost there); the next acquire
    -- joins it. It takes the token a quorum of joined masters agrees on,
    -- not the highest joined one.
    assert(la:acquire())
    srvs[3].cli("hset", key, "t", tostring(tb + 20))
    assert(la:release())
    assert.is_false(helper.is_free(srvs[3], key))
    assert(la:acquire())                 -- joins on all three
    assert.equals(tb, la:token())
    for i = 1, 2 do assert.equals(tostring(tb), srvs[i].cli("hget", key, "t")) end
    assert(la:release())
    dlock.sleep(2.5)                     -- B's watchdog renews (every 1 s)
    assert.is_true(lb:held(), "B lost: " .. tostring(lost[1]))
    assert.same({}, lost)
    local lc = c:lock(name)
    assert.is_nil((lc:try_acquire()))    -- B holds on 1 and 2
    assert.same({ true, 0 }, { lb:release() })
    assert(lc:try_acquire())
    assert(lc:release())
    a:close(); b:close(); c:close()
    px.stop()
    for i = 1, 3 do srvs[i].stop() end
  end)

  -- Found by review: holds of one owner that no quorum granted together
  -- (each left by a co-owner's attempt that reached one master and was
  -- never undone) agreed on a token by chance, and a grant joining them
  -- took it, below the token another owner was granted in between.
  -- Three masters of their own, and a lock's scripts driven on each by
  -- hand (a client's attempt that reached one master, its cancel, a
  -- fence), as the lost replies of a Redlock round leave them.
  local function by_hand(prefix)
    local srvs, sha = {}, {}
    for i = 1, 3 do srvs[i] = helper.start_redis(); sha[i] = helper.load_scripts(srvs[i]) end
    finally(function() for i = 1, 3 do srvs[i].stop() end end)
    local name = helper.unique_name(prefix)
    local keys = { lock = "dlock:{" .. name .. "}", counter = helper.fence_key(name) }
    local h = { srvs = srvs, name = name, keys = keys }
    function h.acq(i, owner, req, seq, lease)
      return helper.ints(helper.evalsha(srvs[i], sha[i], "acquire", keys, { owner = owner,
        req = req, seq = tostring(seq), lease_ms = tostring(lease), expect = "0", token = "0",
        waited = "-1" }))
    end
    function h.void(i, owner, req, seq)
      return helper.evalsha(srvs[i], sha[i], "void", { lock = keys.lock }, { owner = owner,
        req = req, seq = tostring(seq), keep_ms = "100", chan = keys.lock .. ":ch",
        pub = "publish" })
    end
    function h.fence(i, tok, req, seq)
      return helper.evalsha(srvs[i], sha[i], "fence", keys, { token = tostring(tok), req = req,
                                                             seq = tostring(seq) })
    end
    function h.gone(i) return srvs[i].cli("exists", keys.lock) == "0" end
    function h.bump(i, times)            -- attempts that reached master i, undone
      for q = 1, times do h.acq(i, "z", "z", q, 100); h.void(i, "z", "z", q) end
    end
    return h
  end

  local function leftovers(down3)
    local h = by_hand("leftover")
    local srvs, name, keys = h.srvs, h.name, h.keys
    local acq, fence, gone = h.acq, h.fence, h.gone
    -- the counters drift apart (attempts that reached one master, undone)
    h.bump(1, 2); h.bump(3, 20)
    assert(helper.wait_for(function() return gone(1) and gone(3) end, 5, 0.02))
    -- A (owner o) reaches master 1 alone, mints 3, and never undoes it
    assert.same({ 1, 1, 3 }, acq(1, "o", "aaaa|o", 1, 60000))
    -- p is granted 21 on masters 2 and 3, fenced on 1 and 3 (not 2)
    assert.same({ 1, 1, 1 }, acq(2, "p", "p", 1, 1000))
    assert.same({ 1, 1, 21 }, acq(3, "p", "p", 1, 1000))
    fence(1, 21, "p", 1); fence(3, 21, "p", 1)
    -- p's holds run out; C (owner o) reaches master 2 alone and mints 3
    assert(helper.wait_for(function() return gone(2) and gone(3) end, 5, 0.02))
    h.bump(2, 1)
    assert.same({ 1, 1, 3 }, acq(2, "o", "cccc|o", 1, 60000))
    if down3 then srvs[3].stop() end
    -- B (owner o) joins both on masters 1 and 2 (master 3 would mint 22)
    local b = assert(dlock.connect{ servers = { srvs[1].url, srvs[2].url, srvs[3].url },
                                    command_timeout = 0.3 })
    local lb = b:lock(name, { owner = "o" })
    assert(lb:acquire{ wait = 0 })
    assert.is_true(lb:token() > 21, "B's token " .. lb:token() .. " after p's 21")
    for i = 1, down3 and 2 or 3 do                  -- and every master says so
      assert.equals(tostring(lb:token()), srvs[i].cli("hget", keys.lock, "t"))
    end
    assert(lb:release())
    b:close()
  end

  it("gives no grant that joins leftover holds a token below one granted since", function()
    leftovers(false)
  end)

  it("... nor with only the joined masters voting", function()
    leftovers(true)
  end)

  -- Found in review: a late copy of one attempt, minted on a second
  -- master after another owner's grant, joined with its first copy: the
  -- second master's counter shows that grant.
  it("gives no grant that joins a late copy of one attempt a token below one granted since", function()
    local h = by_hand("late")
    local srvs, keys = h.srvs, h.keys
    srvs[1].cli("set", keys.counter, "10"); srvs[2].cli("set", keys.counter, "9")
    srvs[3].cli("set", keys.counter, "12")
    assert.same({ 1, 1, 11 }, h.acq(1, "o", "aaaa|o", 5, 60000))  -- X's attempt 5
    assert.same({ 1, 1, 10 }, h.acq(2, "p", "p", 1, 300))          -- p: 10 and 13,
    assert.same({ 1, 1, 13 }, h.acq(3, "p", "p", 1, 300))          -- granted 13
    h.fence(1, 13, "p", 1); h.fence(3, 13, "p", 1)
    assert(helper.wait_for(function() return h.gone(2) and h.gone(3) end, 5, 0.02))
    assert.same({ 1, 1, 11 }, h.acq(2, "o", "aaaa|o", 5, 60000))  -- its late copy
    local y = assert(dlock.connect{ servers = { srvs[1].url, srvs[2].url, srvs[3].url },
                                    command_timeout = 0.3 })
    finally(function() y:close() end)
    local ly = y:lock(h.name, { owner = "o" })
    assert(ly:acquire{ wait = 0 })
    assert.is_true(ly:token() > 13, "Y's token " .. ly:token() .. " after p's 13")
    assert(ly:release())
  end)

  -- The same with a fair lock's grant: a release passed the lock on to a
  -- queued registration of that attempt on a second master.
  it("gives no fair grant that joins a waiter's leftover grant a token below one granted since",
     function()
    local h = by_hand("fairlate")
    local srvs, keys, name = h.srvs, h.keys, h.name
    keys.queue = keys.lock .. ":q"
    local sha = {}
    for i = 1, 3 do sha[i] = helper.load_scripts(srvs[i]) end
    local function facq(i, owner, req, seq)
      return helper.ints(helper.evalsha(srvs[i], sha[i], "fair_acquire", keys, { owner = owner,
        req = req, seq = tostring(seq), lease_ms = "60000", expect = "0", token = "0",
        waits = "1", pub = "PUBLISH", secret = "0123456789abcdef" }))
    end
    local function frel(i, owner, req, seq, tok)
      return helper.evalsha(srvs[i], sha[i], "fair_release", keys, { owner = owner, req = req,
        seq = tostring(seq), token = tostring(tok), keep_ms = "100",
        chan = keys.lock .. ":ch:" .. req, pub = "PUBLISH" })
    end
    srvs[1].cli("set", keys.counter, "10"); srvs[2].cli("set", keys.counter, "9")
    srvs[3].cli("set", keys.counter, "12")
    assert.same({ 1, 1, 11 }, facq(1, "o", "aaaa|o", 5))      -- X's attempt 5
    assert.same({ 1, 1, 10 }, facq(2, "p", "p", 1))           -- p: 10 and 13
    assert.same({ 1, 1, 13 }, facq(3, "p", "p", 1))
    assert.equals(0, facq(2, "o", "aaaa|o", 5)[1])            -- X queued on 2
    h.fence(1, 13, "p", 1); h.fence(3, 13, "p", 1)             -- p granted 13
    frel(2, "p", "p", 2, 10); frel(3, "p", "p", 2, 13)         -- 2: on to X (11)
    local y = assert(dlock.connect{ servers = { srvs[1].url, srvs[2].url, srvs[3].url },
                                    command_timeout = 0.3 })
    finally(function() y:close() end)
    local ly = y:fair_lock(name, { owner = "o" })
    assert(ly:acquire{ wait = 0 })
    assert.is_true(ly:token() > 13, "Y's token " .. ly:token() .. " after p's 13")
    assert(ly:release())
  end)
end)
