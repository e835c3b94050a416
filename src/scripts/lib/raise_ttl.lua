-- raise_ttl(k, ms): a hold joining a tenancy (a reentry, a shared owner)
-- raises the TTL to its lease, never lowers it: other holds of the
-- tenancy rely on it.
local function raise_ttl(k, ms)
  if redis.call('pttl', k) < ms then
    redis.call('pexpire', k, ms)
  end
end
