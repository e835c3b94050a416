-- The guides in doc/ (all of doc/*.md but the reference) and
-- CONTRIBUTING.md, as a user meets them: every ```lua and ```sh block runs
-- as written against servers this spec starts on loopback (see
-- spec/support/docs.lua for how), links lead to files and headings that
-- exist, and what a guide shows as output, or says the code does, is
-- checked here against what the code does.
local helper = require "helper"
local docs = require("docs").use { describe = describe, it = it, setup = setup,
  teardown = teardown, before_each = before_each, pending = pending, assert = assert }

local pages = docs.guides()
pages[#pages + 1] = "CONTRIBUTING.md"

local function shape(s)               -- a status line, ids and numbers blurred
  return (s:gsub("%x%x%x%x%x%x%x%x+", "ID"):gsub("%d+%.?%d*", "N"):gsub("%s+$", ""))
end

local function has(out, text)
  assert.truthy(out:find(text, 1, true), "expected in the output: " .. text .. "\n--- output:\n" .. out)
end

-- What a page's ```sh blocks print (outputs[i]: the i-th block run).
local sh_checks = {}

sh_checks["doc/cron.md"] = function(outputs)
  local md = docs.read("doc/cron.md")
  local out = table.concat(outputs, "\n")
  assert.truthy(out:match("reporting, fencing token %d+\n"), out)
  for _, s in ipairs({ "tonight's run: exit 1\n", "deploying\n", "backup: free\nexit 1\n",
                       "backup was free\n", "backup: released\n", "the hung backup: exit 124\n",
                       "exit 3\n", "exit 125\n", "exit 127\n" }) do
    has(out, s)
  end
  -- The ```text blocks that show output: the status sample has the shape
  -- of what status printed; the messages are what dlock printed, word for word.
  local blocks = docs.of(docs.fences(md, "doc/cron.md"), "text")
  local sample
  for _, b in ipairs(blocks) do
    if b.src:match("^backup: held") then
      sample = b.src
    elseif b.src:match("^dlock: backup:") or b.src:match("^dlock: report:") then
      for line in b.src:gmatch("[^\n]+") do has(out, line .. "\n") end
    end
  end
  assert(sample, "no sample of dlock status")
  local got = assert(out:match("(backup: held.-)\n[^ ]"), out)
  assert.equals(shape(sample), shape(got))
  -- status --json: the sample is what the block printed, numbers and ids blurred
  local json
  for _, b in ipairs(blocks) do
    if b.src:match('^{"name":"backup"') then json = b.src end
  end
  assert(json, "no sample of dlock status --json")
  local printed = assert(out:match('({"name":"backup","held":true.-\nexit 1)\n'), out)
  assert.equals(shape(json), shape(printed))
end

describe("the guides #binding", function()
  it("are there, each linked from the README", function()
    local readme = docs.read("README.md")
    assert.is_true(#pages >= 8)
    for _, g in ipairs(pages) do
      if g ~= "doc/torture.md" then
        assert.truthy(readme:find("(" .. g .. ")", 1, true), "README.md does not link to " .. g)
      end
    end
  end)
end)

describe("doc/cron.md #binding", function()
  local md = docs.read("doc/cron.md")
  local bin = docs.read("bin/dlock")

  --- The first argument of the call whose "(" is at position i of src
  --- that is a string literal (nil when none is).
  local function first_string(src, i)
    local depth, j, start = 0, i, false     -- start: an argument starts here
    while j <= #src do
      local c = src:sub(j, j)
      if c == '"' or c == "'" then
        local k = j + 1
        while src:sub(k, k) ~= c do
          if src:sub(k, k) == "\\" then k = k + 1 end
          k = k + 1
        end
        if depth == 1 and start then return src:sub(j + 1, k - 1) end
        j = k
      elseif c == "(" or c == "{" then
        depth = depth + 1
      elseif c == ")" or c == "}" then
        depth = depth - 1
        if depth == 0 then return nil end
      end
      if c:match("%S") then start = depth == 1 and (c == "(" or c == ",") end
      j = j + 1
    end
  end

  it("lists every message the dlock command prints", function()
    local n, pos = 0, 1
    while true do
      local s, e, fn = bin:find("([%a_]+)%(", pos)
      if not s then break end
      pos = e + 1
      local before = bin:sub(math.max(1, s - 9), s - 1)
      if (fn == "say" or fn == "fail" or fn == "usage_error") and not before:match("function%s*$") then
        local fmt = first_string(bin, e)
        if fmt and fmt:gsub("%%[sd]", ""):match("%a") then
          n = n + 1
          local pat = fmt:gsub("%%[sd]", "\1"):gsub("%p", "%%%0"):gsub("\1", ".-")
          assert.truthy(md:find(pat), "doc/cron.md does not show the message: " .. fmt)
        end
      end
    end
    assert.is_true(n >= 25, "found " .. n .. " messages in bin/dlock")
    assert.truthy(bin:find('"dlock: internal error: "', 1, true))
    assert.truthy(md:find("internal error: ", 1, true))
  end)

  it("shows what a missing password prints, word for word", function()
    local srv = helper.start_redis("--requirepass s3cret")
    local p = assert(io.popen(("env -u REDIS_PASSWORD %s '%s/bin/dlock' --url redis://127.0.0.1:%d status backup 2>&1; echo \"exit=$?\"")
      :format(helper.lua_cmd(), docs.root, srv.port)))
    local out = p:read("*a")
    p:close()
    srv.stop()
    assert.truthy(out:match("exit=125%s*$"), out)
    local shown = assert(md:match("\n(dlock: cannot connect: connection: NOAUTH[^\n]*)\n"), "no NOAUTH sample")
    assert.equals(shown:gsub(":6379%)", ":" .. srv.port .. ")"), (out:gsub("\nexit=125%s*$", "")))
  end)

  it("has the options of dlock --help, and its exit codes", function()
    local p = assert(io.popen(("%s '%s/bin/dlock' --help"):format(helper.lua_cmd(), docs.root)))
    local help = p:read("*a")
    p:close()
    for _, opt in ipairs({ "--nonblock", "--wait", "--conflict-exit-code", "--lease", "--label",
                           "--password-file", "--url", "--cluster", "--sentinel", "--servers" }) do
      assert.truthy(help:find(opt, 1, true), opt)
      assert.truthy(md:find(opt, 1, true), "doc/cron.md does not name " .. opt)
    end
    for _, code in ipairs({ "124", "125", "126", "127", "128+N" }) do
      assert.truthy(help:find(code, 1, true))
      assert.truthy(md:find("| " .. code, 1, true) or md:find(code .. " |", 1, true), code)
    end
  end)
end)

describe("doc/scaling-out.md #binding", function()
  it("says what Cluster needs", function()
    local md = docs.read("doc/scaling-out.md")
    assert.truthy(md:find("Redis 7", 1, true))
  end)
end)

for _, page in ipairs(pages) do
  docs.describe_page(page)
end

for _, page in ipairs(pages) do
  docs.describe_lua(page)
  docs.describe_sh(page, nil, sh_checks[page])
end
