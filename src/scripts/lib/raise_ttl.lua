-- raise_ttl(k, ms): a hold joining a tenancy (a reentry, a shared owner)
-- raises the TTL to its lease, never lowers it: other holds of the
-- tenancy rely on it. ms: a number, or the string of one as it came
-- (ARGV), which Redis gets as it is (a Lua number is formatted first).
local function raise_ttl(k, ms)
  if redis.call('pttl', k) < tonumber(ms) then
    redis.call('pexpire', k, ms)
  end
end
