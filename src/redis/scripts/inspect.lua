-- Who holds a lock, for diagnostics; changes nothing.
-- The owners whose holds have not run out (nor a shared owner's shares:
-- lib/shares.lua), the requesters
-- "<client id>|<owner>" recorded (which clients act for an explicit
-- owner), a fair lock's or a semaphore's live queue, and the clients
-- listening on the lock's channel (waiters, and clients that waited
-- lately: their subscriptions stay).
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] queue: its waiters, P{name}:q (a fair lock's or a semaphore's)
-- ARGV[1] chan: the lock's channel, P{name}:ch
-- ARGV[2] verb: 'numsub', or 'shardnumsub' on Cluster
-- returns: {0} free | {1, token, pttl, {owner, count, ...},
--   {requester, ...}, queued, subscribers, writer}
--#include lib/now.lua
--#include lib/hash.lua
local chan, verb = ARGV[1], ARGV[2]
local k, q = KEYS[1], KEYS[2]
local now = now_ms()
local h = read_hash(k)
if tonumber(h.n or '0') <= 0 then return {0} end
-- a shared owner's shares that ended count no more (lib/shares.lua)
local ended, over = {}, {}              -- owner -> holds ended; requesters
for name, v in pairs(h) do
  if name:sub(1, 1) == 'd' and tonumber(v) <= now then
    local r = name:sub(2)
    local o = r:match('|(.*)$') or r
    ended[o] = (ended[o] or 0) + tonumber(h['h' .. r] or '0')
    over[r] = true
  end
end
local owners, reqs = {}, {}
for name, v in pairs(h) do
  local c, rest = name:sub(1, 1), name:sub(2)
  local left = c == 'o' and tonumber(v) - (ended[rest] or 0)
  if left and left > 0 and tonumber(h['e' .. rest] or now + 1) > now then
    owners[#owners + 1] = rest
    owners[#owners + 1] = string.format('%d', left)
  elseif c == 'q' and rest:find('|', 1, true) and not over[rest] then
    reqs[#reqs + 1] = rest
  end
end
if #owners == 0 then return {0} end
local queued, kind = 0, redis.call('type', q).ok
if kind == 'hash' then queued = tonumber(redis.call('hget', q, 'c') or '0')
elseif kind == 'zset' then queued = redis.call('zcount', q, now, '+inf') end
local subs = redis.call('pubsub', verb, chan)[2]
return {1, h.t or '0', redis.call('pttl', k), owners, reqs, queued,
        subs, h.w or ''}
