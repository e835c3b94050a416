-- Take one hold of a read-write lock: a read hold or the write hold.
-- The lock's hash as acquire's, plus w = the owner of the write hold
-- (while o<w> > 0), x = until when a waiting writer keeps new readers out
-- (ms, server time), and e<owner> = until when a reader's own lease runs
-- (ms). A busy acquire sets b, as acquire's (lib/waiter.lua). Readers share a tenancy and its token; a reader whose lease ran
-- out is taken out by the next acquire (so a dead reader blocks writers
-- for its own lease only), and a busy writer is told the time to the
-- first reader's end. The key lives as long as its longest hold: a new
-- tenancy sets its TTL (whatever a freed lock's record had), later holds
-- only raise it.
-- KEYS[1] lock: the lock's hash, P{name}
-- KEYS[2] counter: the fencing counter of its slot
-- ARGV[1] owner: as acquire's
-- ARGV[2] req: as acquire's
-- ARGV[3] seq: as acquire's
-- ARGV[4] lease_ms: as acquire's
-- ARGV[5] expect: as acquire's
-- ARGV[6] token: as acquire's
-- ARGV[7] kind: 'r' a reader, 'w' a writer, 'W' a writer that will wait
-- ARGV[8] writer: a reader's owner's write-hold owner ('' if none): a
--   downgrade, which writers never keep out
-- returns: as acquire's, but a hold of count 1 is its token alone (a
--   read-write lock has no short form)
-- resend: as acquire's
-- The fast path: a fresh hold of a free lock, with no waiting writer's
-- claim and no writer's field (a reader) or no lease left by the owner's
-- ended read hold (a writer), by an owner of one client (a coroutine's),
-- before any helper is made: what the take of a free lock below does
-- there (a reader's lease reads the clock). It takes every other case: a
-- resend, a reentry, a busy lock, shares, a new requester on a lock with
-- a past tenancy (which prunes). As acquire.lua's fast path compares
-- request ids.
do
  local k, owner, seq = KEYS[1], ARGV[1], ARGV[3]
  if ARGV[5] == '0' and ARGV[2] == owner and seq:byte(1) ~= 48 then
    local qf, reader = 'q' .. owner, ARGV[7] == 'r'
    local f = redis.pcall('hmget', k, 'n', 'o' .. owner, qf, 't', 'x', 'D', 'w', 'e' .. owner)
    local n, record, t = f[1], f[3], f[4]
    local last = record and record:byte(-1)
    if not f.err and (not n or n == '0') and not f[2] and not f[5] and not f[6] and
       not f[reader and 7 or 8] and           -- a reader: no writer; a writer: no old lease
       (record and last >= 48 and last <= 57 and
        (#record < #seq or (#record == #seq and record < seq)) or (not record and not t)) then
      local c = redis.call('incr', KEYS[2])
      local ct = string.format('%d', c)
      if c <= 0 or (t and (#ct < #t or (#ct == #t and ct <= t))) then
        c = (t and tonumber(t) or 0) + 1      -- the counter was behind (lib/mint.lua)
        ct = string.format('%d', c)
        redis.call('set', KEYS[2], ct)
      end
      if reader then
        local tm = redis.call('time')
        local now = tonumber(tm[1]) * 1000 + math.floor(tonumber(tm[2]) / 1000)
        redis.call('hset', k, 'n', '1', 'o' .. owner, '1', qf, seq, 't', ct,
                   'e' .. owner, string.format('%d', now + tonumber(ARGV[4])))
      else
        redis.call('hset', k, 'n', '1', 'o' .. owner, '1', qf, seq, 't', ct, 'w', owner)
      end
      redis.call('pexpire', k, ARGV[4])
      return c
    end
  end
end
--#include lib/now.lua
--#include lib/prune.lua
--#include lib/mint.lua
--#include lib/request.lua
--#include lib/reentry_lost.lua
--#include lib/drop_unknown.lua
--#include lib/leases.lua
--#include lib/waiter.lua
--#include lib/holder.lua
--#include lib/shares.lua
--#include lib/shares_due.lua
--#include lib/granted.lua
--#include lib/short.lua
unshort(KEYS[1])                 -- (lib/short.lua)
local owner, req, seq = ARGV[1], ARGV[2], ARGV[3]
local lease, expect, token = tonumber(ARGV[4]), tonumber(ARGV[5]), ARGV[6]
local kind, my_writer = ARGV[7], ARGV[8]
local k, of, qf = KEYS[1], 'o' .. owner, 'q' .. req
local hf = holder_field(owner, req)    -- (lib/holder.lua)
local f, mine, t, answer = read_request(k, of, qf, seq, 'w', 'x', 'b', 'D')
local shares_end = f[8]
if shares_due(k, shares_end) then          -- (lib/shares_due.lua)
  f, mine, t, answer = read_request(k, of, qf, seq, 'w', 'x', 'b', 'D')
  shares_end = f[8]
end
if answer then return answer[1] == 1 and granted(answer[2], answer[3]) or answer end
local n, w, x, busy = tonumber(f[1] or '0'), f[5], tonumber(f[6] or '0'), f[7]
local now = now_ms()
-- a shared owner's share may end first (lib/shares.lua)
local function by_share(p)
  return shares_end and math.max(math.min(p, tonumber(shares_end) - now), 1) or p
end
local first
n, mine, first = prune_leases(k, of, n, mine, now)
if reentry_lost(k, hf, expect, token, mine, t) then return {-1} end
n, mine = drop_unknown(k, owner, req, expect, mine, n)
local writer = w and tonumber(redis.call('hget', k, 'o' .. w) or '0') > 0
local wr = kind ~= 'r'
if mine == 0 and wr and n > 0 then
  local p = redis.call('pttl', k)
  if kind == 'W' then
    redis.call('hset', k, 'x', now + math.max(p, 0) + 2000)
  end
  if not writer and first then p = math.max(first - now, 1) end
  p = by_share(p)
  note_busy(k, busy, nil, req, now, p, -1)
  return {0, p}
end
if mine == 0 and kind == 'r' and not (writer and w == my_writer) and
   (writer or x > now) then
  local p = (writer or n > 0) and by_share(redis.call('pttl', k)) or x - now
  note_busy(k, busy, nil, req, now, p, -1)
  return {0, p}
end
if f[4] and not f[3] then prune(k, now, qf) end  -- only a new requester adds fields
if n <= 0 then
  t = mint(KEYS[2], t)
  redis.call('hset', k, 't', string.format('%d', t))
  redis.call('hdel', k, 'w')
end
mine = redis.call('hincrby', k, of, 1)
if hf then
  redis.call('hincrby', k, hf, 1)
  share_until(k, hf, now + lease)
end
if n <= 0 then                          -- a new tenancy's first hold: no k
  redis.call('hset', k, 'n', n + 1, qf, seq)
else
  redis.call('hset', k, 'n', n + 1, qf, seq, 'k' .. req, now + 2 * lease)
end
if wr then
  redis.call('hset', k, 'w', owner)
  -- a first hold of this owner's: a lease its ended read hold left would
  -- take the write hold out when it passes (lib/leases.lua)
  if mine == 1 then redis.call('hdel', k, 'x', 'e' .. owner)
  else redis.call('hdel', k, 'x') end
else
  redis.call('hset', k, 'e' .. owner, own_lease(k, owner, mine, now + lease))
end
if n <= 0 or redis.call('pttl', k) < lease then
  redis.call('pexpire', k, lease)   -- a new tenancy: its own
end
return granted(mine, t)
