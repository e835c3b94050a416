-- Set a held lock's TTL to a new lease.
-- KEYS[1] lock: the lock's hash, P{name}
-- ARGV[1] owner: whose hold
-- ARGV[2] lease_ms: the new lease (ms)
-- ARGV[3] token: the hold's tenancy
-- ARGV[4] shared: '1': an explicit owner, whose other clients may rely on
--   a longer lease: raised only
-- returns: 1 | 0 the hold is gone
local owner, lease, token, shared = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4]
local k = KEYS[1]
local f = redis.call('hmget', k, 'o' .. owner, 't')
if f[1] and f[2] == token then
  if shared == '1' and redis.call('pttl', k) >= lease then
    return 1
  end
  return redis.call('pexpire', k, lease)
end
return 0
