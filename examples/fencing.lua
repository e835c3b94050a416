-- Fencing tokens: a holder that paused past its lease must not overwrite the
-- work of the next holder. The storage remembers the highest token it has
-- seen and rejects writes carrying a lower one.
local dlock = require "dlock"

local storage = { value = nil, max_token = 0 }
function storage.write(token, value)
  if token < storage.max_token then
    return nil, ("rejected stale token %d (seen %d)"):format(token, storage.max_token)
  end
  storage.max_token, storage.value = token, value
  return true
end

local url = os.getenv("REDIS_URL")
local a = assert(dlock.connect(url))
local b = assert(dlock.connect(url))
local name = "invoice:1001"

local la = a:lock(name)
assert(la:acquire{ expire = 0.3 })              -- fixed lease, no watchdog
local token_a = la:token()
print("A holds token", token_a, "and pauses (GC, SIGSTOP, slow disk...)")
dlock.sleep(0.5)                                 -- A's lease runs out

local lb = b:lock(name)
assert(lb:acquire{ wait = 5 })
print("B holds token", lb:token(), "write:", storage.write(lb:token(), "from B"))
assert(lb:release())

print("A wakes, held() says", la:held(), "- and writes anyway with its old token:")
print("  write:", storage.write(token_a, "from A"))
print("A's release:", la:release())
print("storage holds:", storage.value)
a:close()
b:close()
