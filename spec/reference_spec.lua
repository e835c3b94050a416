-- doc/reference.md covers the whole public API.
local dlock = require "dlock"
local helper = require "helper"

describe("the reference #binding", function()
  -- Every public function, with what it returns, is in doc/reference.md.
  local doc = assert(helper.read_file("doc/reference.md"))

  it("documents every module function, client method and lock method", function()
    local c = assert(helper.client())
    local lock = c:lock("x")
    local names = {}
    for k, v in pairs(dlock) do
      if type(v) == "function" then names[#names + 1] = "dlock." .. k end
    end
    names[#names + 1] = "dlock._VERSION"
    local core = require "dlock.core"
    -- (names starting with _ are the module's own, between its halves)
    for k in pairs(core.Client) do
      if not k:match("^_") then names[#names + 1] = "client:" .. k end
    end
    for k in pairs(core.Lock) do
      if not k:match("^_") then names[#names + 1] = "lock:" .. k end
    end
    assert.is_true(#names >= 20)
    for _, n in ipairs(names) do
      local pat = n:gsub("%p", "%%%0")
      assert.matches("`" .. pat .. "[%(`]", doc, nil, false, n .. " is not documented")
    end
    assert.matches("re%-raises the error", doc)
    c:close()
  end)
end)
