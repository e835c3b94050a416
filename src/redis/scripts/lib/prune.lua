--#include lib/hash.lua
--#include lib/requester.lua
-- prune(k, now, keep): past RECORDS_MAX fields, drop the request records
-- of lock k that no request can still come for: k<requester> passed (or
-- none: an older client's record), and that requester's owner holds
-- nothing (a requester is "<client id>|<owner>" or the owner); never
-- field keep (the caller's record), and no k-field whose record is gone
-- stays. A record that a resend or a late copy may still meet stays,
-- over the limit if need be. Each prune reads the whole hash: while it
-- stays over the limit, m = the time (ms) before which no prune runs
-- again, a second later. What adds a record prunes first: a new
-- requester's take of a free lock, a grant, a cancel by a requester
-- without a record, a semaphore's permit. A k of "<ms>e99" (a
-- release's, written without the clock; to an older client's prune a
-- time that never comes) is stamped now + 2 ms: the record lives at
-- least as long as if the release had read the clock, and goes at a
-- later prune. So the hash holds at most one record per requester active
-- within the last two leases and two prunes. A requester's count of
-- holds (h<requester>) goes too once its owner holds nothing.
local RECORDS_MAX = 64
local function prune(k, now, keep)
  if redis.call('hlen', k) <= RECORDS_MAX then return end
  if tonumber(redis.call('hget', k, 'm') or '0') > now then return end
  local h = read_hash(k)
  for y in pairs(h) do
    local c, r = y:sub(1, 1), y:sub(2)
    local kr = h['k' .. r] or '0'
    local ms = kr:match('^(%d+)e99$')
    if c == 'q' and ms then
      redis.call('hset', k, 'k' .. r, now + 2 * tonumber(ms))
    elseif c == 'q' and y ~= keep and tonumber(kr) <= now and
       not h['o' .. owner_of(r)] then
      redis.call('hdel', k, y, 'k' .. r)
    elseif c == 'k' and not h['q' .. r] then
      redis.call('hdel', k, y)
    elseif c == 'h' and not h['o' .. owner_of(r)] then
      redis.call('hdel', k, y, 'd' .. r)  -- the owner holds nothing
    elseif c == 'd' and not h['h' .. r] then
      redis.call('hdel', k, y)          -- a share without holds (lib/shares.lua)
    end
  end
  if redis.call('hlen', k) > RECORDS_MAX then redis.call('hset', k, 'm', now + 1000)
  else redis.call('hdel', k, 'm') end
end
