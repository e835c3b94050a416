-- anchors.lua: the Redis work of the locks users pick instead of dlock, as
-- bench/instr.lua counts it beside dlock's: the same commands and scripts
-- those libraries send for one uncontended cycle (acquire, release),
-- written here from their public descriptions (a study of
-- Redisson's wire format; redis-py's Lock documentation), not their code.
-- M.new(name, call) gives an anchor's cycle(i): the i-th acquire and
-- release, sent through call(cmd, ...) (a dlock client's client:call).
local M = {}

-- redis-py's Lock: SET name token NX PX, and a release script that
-- deletes the key only while it still holds the caller's token.
local PY_RELEASE = "local token = redis.call('get', KEYS[1])\n" ..
                   "if not token or token ~= ARGV[1] then return 0 end\n" ..
                   "redis.call('del', KEYS[1])\n" ..
                   "return 1\n"

-- Redisson's RLock: a hash of owner field -> hold count with a PEXPIRE
-- lease. Acquire: a free key, or one the field holds, gets one more hold
-- and the lease, answer nil; else the key's PTTL. Release: a request's
-- latch key answers a retry as the first run did; a field that holds
-- nothing answers nil; else one hold less: some left, the lease again and
-- latch 0; none left, the hash deleted, 0 published on the lock's
-- channel, latch 1. The client deletes the latch once it has the answer.
local RS_LOCK = "if redis.call('exists', KEYS[1]) == 0 or\n" ..
                "   redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n" ..
                "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n" ..
                "  redis.call('pexpire', KEYS[1], ARGV[1])\n" ..
                "  return nil\n" ..
                "end\n" ..
                "return redis.call('pttl', KEYS[1])\n"
local RS_UNLOCK = "local latched = redis.call('get', KEYS[3])\n" ..
                  "if latched then return tonumber(latched) end\n" ..
                  "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end\n" ..
                  "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then\n" ..
                  "  redis.call('pexpire', KEYS[1], ARGV[2])\n" ..
                  "  redis.call('set', KEYS[3], 0, 'px', ARGV[5])\n" ..
                  "  return 0\n" ..
                  "end\n" ..
                  "redis.call('del', KEYS[1])\n" ..
                  "redis.call(ARGV[4], KEYS[2], ARGV[1])\n" ..
                  "redis.call('set', KEYS[3], 1, 'px', ARGV[5])\n" ..
                  "return 1\n"

-- The anchor `name` over call: its cycle function (scripts loaded).
function M.new(name, call)
  if name == "redispy" then
    local release = assert(call("SCRIPT", "LOAD", PY_RELEASE))
    return function(i)
      local token = ("%032x"):format(i)
      assert(call("SET", "py", token, "NX", "PX", 30000) == "OK")
      assert(call("EVALSHA", release, 1, "py", token) == 1)
    end
  elseif name == "redisson" then
    local lock, unlock = assert(call("SCRIPT", "LOAD", RS_LOCK)), assert(call("SCRIPT", "LOAD", RS_UNLOCK))
    local field = "6c1f3a52-9d4e-4b7a-8f21-0a5b3c7d9e11:57"   -- <client uuid>:<thread id>
    return function(i)
      local r, err = call("EVALSHA", lock, 1, "rs", 30000, field)
      assert(r == nil and err == nil, err)
      local latch = ("redisson_unlock_latch:{rs}:%032x"):format(i)
      assert(call("EVALSHA", unlock, 3, "rs", "redisson_lock__channel:{rs}", latch,
                  0, 30000, field, "PUBLISH", 16000) == 1)
      assert(call("DEL", latch) == 1)
    end
  end
  error("no anchor " .. tostring(name))
end

return M
