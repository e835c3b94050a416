-- The set-up a newcomer runs (make deps, make demo) works for the user who
-- runs it: installed packages are found with a PATH that lacks sbin, what
-- is missing is named with a command that user can run, and the demo
-- touches no server it did not start.
local helper = require "helper"

local root, q = helper.root, helper.q
local function run(cmd)            -- its exit status, its output
  local _, out, code = helper.run_sh(cmd)
  return code, out
end

local is_root = select(2, run("id -u")):match("^0") ~= nil

describe("tools/deps.sh", function()
  it("finds every installed package with a normal user's PATH (no sbin)", function()
    -- (the suite's own `make deps` ran first: nothing is missing)
    local code, out = run(("cd %s && env -i HOME=/nonexistent PATH=/usr/local/bin:/usr/bin:/bin sh tools/deps.sh")
      :format(q(root)))
    assert.equals(0, code, out)
    assert.equals("", out)
  end)

  it("names what is missing, and the command to install it as root", function()
    -- a Lua nobody has: its packages are missing. Never as root (root
    -- would install); as root, run it as an unprivileged user.
    local as = ""
    if is_root then
      if run("command -v runuser") ~= 0 then pending("needs runuser to drop root") return end
      as = "runuser -u nobody -- "
    end
    -- (the script on stdin, from /: the user may not read the checkout)
    local code, out = run(("cd / && %senv -i HOME=/nonexistent PATH=/usr/local/bin:/usr/bin:/bin sh -s lua9.9 <%s")
      :format(as, q(root .. "/tools/deps.sh")))
    assert.equals(1, code, out)
    assert.truthy(out:find("dlock: missing packages", 1, true), out)
    assert.truthy(out:find("apt-get install -y liblua9.9-dev lua9.9", 1, true), out)
    local sudo = run("command -v sudo") == 0
    assert.equals(sudo, out:find("sudo apt-get", 1, true) ~= nil, out)
    if not sudo then assert.truthy(out:find("as root: apt-get", 1, true), out) end
    assert.is_nil(out:find("haproxy", 1, true), out)   -- found in sbin
  end)
end)

describe("make demo", function()
  it("runs on a throwaway server of its own, even with REDIS_URL set #slow", function()
    local theirs = helper.start_redis()
    theirs.cli("set", "mine", "untouched")
    local code, out = run(("cd %s && REDIS_URL=%s DLOCK_BUILD=%s sh tools/demo.sh")
      :format(q(root), q(theirs.url), q(os.getenv("DLOCK_BUILD") or "build")))
    assert.equals(0, code, out)
    local at = out:match("demo: throwaway redis%-server at (redis://127%.0%.0%.1:%d+/0)")
    assert.truthy(at, out)
    assert.are_not.equals(theirs.url, at)
    assert.equals("1", theirs.cli("dbsize"))         -- only its own key
    assert.equals("untouched", theirs.cli("get", "mine"))
  end)
end)
