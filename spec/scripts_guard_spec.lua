-- guard.lua driven step by step (as spec/scripts_spec.lua does for
-- acquire and release): the command runs only while the hold is the
-- lock's current tenancy (its owner holds it, with its token), and
-- nothing runs in every state a delayed or lost client meets.
local helper = require "helper"
local drive = require "scriptdrive"

local srv, sha = helper.redis(), {}
local d, key, data

-- FCALL or EVALSHA, as sha.guard is called
local function verb() return helper.script_head(sha, "guard", 2)[1] end

-- guard(owner, token, cmd, args...): the raw reply (redis-cli's text)
local function guard(owner, token, ...)
  local first = select(2, ...) or key          -- KEYS[2]: the command's key
  return srv.cli(verb(), sha.guard, 2, key, first, owner, token, ...)
end
local LOST = "^DLOCKLOST the hold is no longer the lock's current tenancy"

describe("guard.lua #nocore", function()
  setup(function() sha = helper.load_scripts(srv) end)
  before_each(function()
    key = "g{" .. helper.unique_name("guard") .. "}"
    data = key .. ":data"
    d = drive.new(srv, sha, key)
  end)

  it("runs the command for the owner of the current tenancy, with its token", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.equals("OK", guard("a", t, "SET", data, "1"))
    assert.equals("2", guard("a", t, "INCR", data))
    assert.equals("2", srv.cli("get", data))
    assert.equals("1", d.field("n"))                      -- the lock untouched
  end)

  it("runs nothing for another owner, or for the holder's own old token", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.matches(LOST, guard("b", t, "SET", data, "b"))  -- not b's
    assert.matches(LOST, guard("a", t - 1, "SET", data, "old"))
    assert.equals("0", srv.cli("exists", data))
  end)

  it("runs nothing once the hold was released, expired, or taken by a new tenancy", function()
    local t = d.acquire("a", "a", 1)[3]
    assert.same({ 1, 0 }, d.release("a", "a", 2, t))
    assert.matches(LOST, guard("a", t, "SET", data, "after release"))  -- the record stays
    local t2 = d.acquire("a", "a", 3)[3]
    assert.is_true(t2 > t)
    srv.cli("pexpire", key, 1)
    assert(helper.wait_for(function() return not d.exists() end, 2, 0.005))
    assert.matches(LOST, guard("a", t2, "SET", data, "after expiry"))
    local t3 = d.acquire("a", "a", 4)[3]                       -- the same owner, anew
    assert.matches(LOST, guard("a", t2, "SET", data, "old tenancy"))
    assert.equals("OK", guard("a", t3, "SET", data, "now"))
    assert.equals("now", srv.cli("get", data))
  end)

  it("runs nothing when KEYS[2] is neither the lock's key nor the command's", function()
    local t = d.acquire("a", "a", 1)[3]
    local r = srv.cli(verb(), sha.guard, 2, key, key .. ":other", "a", t, "SET", data, "1")
    assert.matches("KEYS%[2%] is neither", r)
    assert.equals("0", srv.cli("exists", data))
    assert.equals("OK", srv.cli(verb(), sha.guard, 2, key, key, "a", t, "SET", data, "1"))
  end)

  it("gives the command's own error as an error, and leaves the lock as it was", function()
    local t = d.acquire("a", "a", 1)[3]
    srv.cli("set", data, "x")
    assert.matches("WRONGTYPE", guard("a", t, "LPUSH", data, "y"))
    assert.equals("1", d.field("oa"))
    assert.equals("OK", guard("a", t, "SET", data, "z"))     -- and goes on working
  end)
end)
