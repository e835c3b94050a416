-- Reentrancy: nested functions on one call chain take the same lock again;
-- another coroutine is another owner and has to wait.
local dlock = require "dlock"

local client = assert(dlock.connect(os.getenv("REDIS_URL")))
local account = client:lock("account:7")

local function debit(n)
  return account:with(function()                 -- second hold, same owner
    print(("  debit %d (hold count %d)"):format(n, account:count()))
  end)
end

local function transfer(n)
  return account:with(function()                 -- first hold
    print(("transfer %d (hold count %d)"):format(n, account:count()))
    debit(n)
    local other = coroutine.wrap(function() return account:try_acquire() end)
    print("  another coroutine tries it:", other())
  end)
end

assert(transfer(10))
print("afterwards held:", account:held())
client:close()
