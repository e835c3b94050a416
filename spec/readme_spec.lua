-- README.md as a newcomer meets it: a user's page, short, that opens with
-- the two commands of the project's set-up; every ```lua block compiles,
-- and runs as written against servers this spec starts on loopback (see
-- spec/support/docs.lua for how blocks run). The ```sh blocks of
-- "## Install" are spec/install_spec.lua's: they install, in a copy of
-- the checkout. The guides in doc/ are spec/docs_spec.lua's.
local docs = require("docs").use { describe = describe, it = it, setup = setup,
  teardown = teardown, before_each = before_each, pending = pending, assert = assert }

local README = "README.md"
local text = docs.read(README)
local blocks = docs.fences(text, README)

describe("README.md #binding", function()
  it("has Lua examples, every fence closed", function()
    local lua = docs.of(blocks, "lua")
    assert.is_true(#lua >= 4)
    local opened = select(2, text:gsub("\n```lua%s*\n", "\n"))
    assert.equals(opened, #lua)
  end)

  it("is a user's page: at most 250 lines", function()
    local _, lines = text:gsub("\n", "")
    assert.is_true(lines <= 250, "README.md has " .. lines .. " lines")
  end)

  it("opens with the two commands that do all the set-up, in a ```sh block", function()
    local top
    for _, b in ipairs(docs.of(blocks, "sh")) do
      if b.src:find("make demo", 1, true) then top = b; break end
    end
    assert(top, "no ```sh block with make demo")
    assert.truthy(top.src:match("^make demo%f[%s]"), top.src)
    assert.truthy(top.src:match("\nmake test%f[%s]"), top.src)
    assert.is_true(top.line <= 50, "the make demo / make test block starts at line " .. top.line)
    assert.is_true(docs.make_only(top.src))
    docs.check_make(README, top)
    assert.truthy(text:find("(CONTRIBUTING.md)", 1, true))
  end)

  it("uses only loopback addresses", function()
    docs.check_loopback(README, text)
  end)

  it("links only to files and headings in the repository that exist", function()
    assert.is_true(docs.check_links(README, text) >= 1)
    assert.is_truthy(text:find("(doc/reference.md)", 1, true))
    -- ... and a table of contents of every guide
    for _, g in ipairs(docs.guides()) do
      if g ~= "doc/torture.md" then            -- the maintainers', from CONTRIBUTING.md
        assert.is_truthy(text:find("(" .. g .. ")", 1, true), "README.md does not link to " .. g)
      end
    end
  end)

  it("links to a reference whose Lua blocks compile", function()
    local ref = docs.read("doc/reference.md")
    local rblocks = docs.of(docs.fences(ref, "doc/reference.md"), "lua")
    assert.is_true(#rblocks >= 1)
    for _, b in ipairs(rblocks) do
      assert(load(("\n"):rep(b.line - 1) .. b.src, "@doc/reference.md", "t", {}))
    end
    for _, code in ipairs({ "timeout", "not held", "lost", "connection", "quorum", "redis" }) do
      assert.is_truthy(ref:find("| `" .. code .. "` |", 1, true), "error code " .. code)
    end
    docs.check_links("doc/reference.md", ref)
  end)

  it("lists the six error codes, the quorum error among them", function()
    for _, code in ipairs({ "timeout", "not held", "lost", "connection", "quorum", "redis" }) do
      assert.is_truthy(text:find("\n| `" .. code .. "` |", 1, true), "error code " .. code)
    end
  end)

  it("names the Debian packages of Install, and they exist", function()
    local install = assert(text:match("\n## Install\n(.-)\n## "), "no Install section")
    local apt
    for _, b in ipairs(docs.fences(install, "Install")) do
      apt = apt or b.src:match("apt%-get install %-y ([^\n]+)")
    end
    assert(apt, "no apt-get install line in Install")
    local names = {}
    for pkg in apt:gmatch("%S+") do names[#names + 1] = pkg end
    for _, pkg in ipairs({ "build-essential", "pkg-config", "liblua5.4-dev", "libhiredis-dev",
                           "libssl-dev", "lua5.4", "redis-server" }) do
      assert.is_truthy(apt:find(pkg, 1, true), "Install does not name " .. pkg)
    end
    local ok = os.execute("command -v dpkg-query >/dev/null 2>&1")
    if not (ok == true or ok == 0) then return pending("no dpkg here") end
    local p = assert(io.popen("dpkg-query -W -f '${Package}\\n' " .. table.concat(names, " ") .. " 2>&1"))
    local out = p:read("*a")
    p:close()
    for _, pkg in ipairs(names) do
      assert.is_truthy(out:find("\n" .. pkg .. "\n", 1, true) or out:find("^" .. pkg:gsub("%p", "%%%0") .. "\n"),
        "dpkg does not know " .. pkg .. ": " .. out)
    end
  end)
end)

docs.describe_lua(README)
docs.describe_sh(README, function(b) return b.heading == "Install" end)
