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

-- Redisson's RFairLock: the same hash, plus a list of queued fields
-- (redisson_lock_queue:{name}, first come first) and a zset of each queued
-- field's deadline in the client's wall-clock ms
-- (redisson_lock_timeout:{name}). Both scripts first drop the heads of the
-- queue whose deadline the client's clock has passed.
-- Acquire (KEYS: hash, queue, deadlines; ARGV: lease ms, field, the wait
-- a queued field is given (fairLockWaitTimeout, 5 min), the client's now
-- in ms): a free hash with nobody queued, or with the caller first in the
-- queue, is taken (the caller leaves the queue, those behind it get their
-- deadlines moved one wait closer, the field gets 1 hold and the hash the
-- lease), answer nil; the caller's own field is a reentry; a caller already
-- queued is answered the hash's PTTL; anyone else is queued, its deadline
-- one wait past the last waiter's (or past the holder's lease when nobody
-- waits), and answered the time until then.
-- Release (KEYS: hash, queue, deadlines, channel, latch; ARGV: the message
-- 0, lease ms, field, the client's now in ms, PUBLISH or SPUBLISH, latch
-- ms): the latch first, as for RLock; then the same drop of expired heads;
-- a hash already gone only wakes the head; a field that holds nothing,
-- nil; one hold less, and at none the hash deleted, latch 1, and 0
-- published on the channel of the head waiter alone
-- (redisson_lock__channel:{name}:<its field>), which must then run acquire
-- itself: the lock is never handed over.
-- Where that description leaves the cycle open, this chooses as Redisson
-- 4.x does for lock() + unlock() on one server without replicas: lock()'s
-- acquire script (tryLock()'s differs only on the busy path), the unlock
-- latch in the fair unlock too (16 redis.calls a cycle, as the study in
-- issue 41 counted: 8 in acquire, 8 in release), the client's DEL of the
-- latch after the answer, and no WAIT (there is no replica to wait for).
-- The Lua converts numbers only where Redisson's does, so the uncontended
-- path runs no tonumber at all.
local RSF_DROP_STALE = "while true do\n" ..
                       "  local head = redis.call('lindex', KEYS[2], 0)\n" ..
                       "  if not head then break end\n" ..
                       "  if tonumber(redis.call('zscore', KEYS[3], head)) > tonumber(ARGV[4]) then break end\n" ..
                       "  redis.call('zrem', KEYS[3], head)\n" ..
                       "  redis.call('lpop', KEYS[2])\n" ..
                       "end\n"
local RSF_LOCK = RSF_DROP_STALE ..
                 "if redis.call('exists', KEYS[1]) == 0 and\n" ..
                 "   (redis.call('exists', KEYS[2]) == 0 or redis.call('lindex', KEYS[2], 0) == ARGV[2]) then\n" ..
                 "  redis.call('lpop', KEYS[2])\n" ..
                 "  redis.call('zrem', KEYS[3], ARGV[2])\n" ..
                 "  local behind = redis.call('zrange', KEYS[3], 0, -1)\n" ..
                 "  for j = 1, #behind do\n" ..
                 "    redis.call('zincrby', KEYS[3], -tonumber(ARGV[3]), behind[j])\n" ..
                 "  end\n" ..
                 "  redis.call('hset', KEYS[1], ARGV[2], 1)\n" ..
                 "  redis.call('pexpire', KEYS[1], ARGV[1])\n" ..
                 "  return nil\n" ..
                 "end\n" ..
                 "if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then\n" ..
                 "  redis.call('hincrby', KEYS[1], ARGV[2], 1)\n" ..
                 "  redis.call('pexpire', KEYS[1], ARGV[1])\n" ..
                 "  return nil\n" ..
                 "end\n" ..
                 "if redis.call('zscore', KEYS[3], ARGV[2]) then return redis.call('pttl', KEYS[1]) end\n" ..
                 "local last, ttl = redis.call('lindex', KEYS[2], -1), nil\n" ..
                 "if last and last ~= ARGV[2] then\n" ..
                 "  ttl = tonumber(redis.call('zscore', KEYS[3], last)) - tonumber(ARGV[4])\n" ..
                 "else\n" ..
                 "  ttl = redis.call('pttl', KEYS[1])\n" ..
                 "end\n" ..
                 "if redis.call('zadd', KEYS[3], ttl + tonumber(ARGV[3]) + tonumber(ARGV[4]), ARGV[2]) == 1 then\n" ..
                 "  redis.call('rpush', KEYS[2], ARGV[2])\n" ..
                 "end\n" ..
                 "return ttl\n"
local RSF_WAKE_HEAD = "local head = redis.call('lindex', KEYS[2], 0)\n" ..
                      "if head then redis.call(ARGV[5], KEYS[4] .. ':' .. head, ARGV[1]) end\n"
local RSF_UNLOCK = "local latched = redis.call('get', KEYS[5])\n" ..
                   "if latched then return tonumber(latched) end\n" ..
                   RSF_DROP_STALE ..
                   "if redis.call('exists', KEYS[1]) == 0 then\n" ..
                   RSF_WAKE_HEAD ..
                   "  return 1\n" ..
                   "end\n" ..
                   "if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return nil end\n" ..
                   "if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then\n" ..
                   "  redis.call('pexpire', KEYS[1], ARGV[2])\n" ..
                   "  redis.call('set', KEYS[5], 0, 'px', ARGV[6])\n" ..
                   "  return 0\n" ..
                   "end\n" ..
                   "redis.call('del', KEYS[1])\n" ..
                   "redis.call('set', KEYS[5], 1, 'px', ARGV[6])\n" ..
                   RSF_WAKE_HEAD ..
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
  elseif name == "redisson-fair" then
    local lock, unlock = assert(call("SCRIPT", "LOAD", RSF_LOCK)), assert(call("SCRIPT", "LOAD", RSF_UNLOCK))
    local field = "6c1f3a52-9d4e-4b7a-8f21-0a5b3c7d9e11:57"
    local queue, deadlines = "redisson_lock_queue:{rs}", "redisson_lock_timeout:{rs}"
    return function(i)
      local r, err = call("EVALSHA", lock, 3, "rs", queue, deadlines, 30000, field, 300000,
                          os.time() * 1000)
      assert(r == nil and err == nil, err)
      local latch = ("redisson_unlock_latch:{rs}:%032x"):format(i)
      assert(call("EVALSHA", unlock, 5, "rs", queue, deadlines, "redisson_lock__channel:{rs}", latch,
                  0, 30000, field, os.time() * 1000, "PUBLISH", 16000) == 1)
      assert(call("DEL", latch) == 1)
    end
  end
  error("no anchor " .. tostring(name))
end

return M
