--#include lib/now.lua
--#include lib/prune.lua
--#include lib/mint.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/drop_unknown.lua
--#include lib/raise_ttl.lua
--#include lib/waiter.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
-- reserved(r, req, now): how long (ms) the freed lock stays reserved for
-- another requester than req (field r, as read); 0 if it is not.
local function reserved(r, req, now)
  local u, who = (r or ''):match('^(%d+):(.*)$')
  if not u or who == req or tonumber(u) <= now then return 0 end
  return tonumber(u) - now
end

-- acquire_exclusive(k, counter, owner, req, seq, lease, expect, token,
-- waited): take one hold of exclusive lock k (acquire.lua has the
-- arguments and the reply). A new tenancy's token comes from counter;
-- with no counter (acquire1: a slot mid-migration) a new tenancy is busy
-- for 10 ms. A lock reserved for another waiter is busy (lib/waiter.lua).
-- lease stays the string it came as, and counts go as '1': Redis gets a
-- Lua number formatted as a float, which costs about as much as a short
-- command.
local function acquire_exclusive(k, counter, owner, req, seq, lease, expect, token, waited)
  local of, qf = 'o' .. owner, 'q' .. req
  local hf = holder_field(owner, req)   -- (lib/holder.lua)
  local f, mine, t, answer = read_request(k, of, qf, seq, 'b', 'v', 'r', 'D')
  local shares_end = f[8]
  local ended, now = shares_due(k, shares_end)  -- (lib/shares.lua)
  if ended then
    f, mine, t, answer = read_request(k, of, qf, seq, 'b', 'v', 'r', 'D')
    shares_end = f[8]
  end
  if answer then return answer end
  if reentry_lost(k, hf, expect, token, mine, t) then return {-1} end
  local n, record, last_t = tonumber(f[1] or '0'), f[3], f[4]
  local busy, longest, reserve = f[5], f[6], f[7]
  n, mine = drop_unknown(k, owner, req, expect, mine, n)
  if mine == 0 then
    -- held by another owner: busy, even in its last ms (PTTL 0: joining
    -- would hand this owner that tenancy and its token) or with no TTL
    now = now or ((n > 0 or reserve) and now_ms())
    local p = n > 0 and math.max(redis.call('pttl', k), 1)
              or reserved(reserve, req, now)
    if n > 0 and shares_end then        -- a shared owner's: its first share's end
      p = math.max(math.min(p, tonumber(shares_end) - now), 1)
    end
    if p ~= 0 then
      note_busy(k, busy, longest, req, now, p, waited)
      return {0, p}
    end
  end
  -- (no k<req> here: while its owner holds, a record is kept for it; a
  -- release, a cancel or a drop that ends the hold writes or needs none)
  if n <= 0 then
    if last_t and not record then       -- only a new requester adds fields
      prune(k, now_ms(), qf)
    end
    if not counter then return {0, 10} end
    t, mine = mint(counter, t), 1
    if hf then
      redis.call('hset', k, 'n', '1', of, '1', qf, seq, 't', string.format('%d', t), hf, '1')
      share_until(k, hf, (now or now_ms()) + tonumber(lease))
    else
      redis.call('hset', k, 'n', '1', of, '1', qf, seq, 't', string.format('%d', t))
    end
    local done = {}                     -- the reservation: taken, or over
    if reserve then done[1] = 'r' end
    if longest and (longest == '' or longest:match('^%d+:(.*)$') == req) then
      done[#done + 1] = 'v'             -- the longest waiter: served
    end
    if #done > 0 then redis.call('hdel', k, unpack(done)) end
    redis.call('pexpire', k, lease)
    return {1, mine, t}
  end
  mine = redis.call('hincrby', k, of, 1)
  if hf then
    redis.call('hincrby', k, hf, 1)
    share_until(k, hf, (now or now_ms()) + tonumber(lease))
  end
  redis.call('hset', k, 'n', n + 1, qf, seq)
  raise_ttl(k, lease)
  return {1, mine, t}
end
