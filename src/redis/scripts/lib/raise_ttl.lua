-- raise_ttl(k, ms): lengthen the TTL of k to ms, never shorten it: a hold
-- joining a tenancy (a reentry, a shared owner) or renewed; the tenancy's
-- other holds may rely on a longer one. PEXPIRE GT (Redis 7, which leaves
-- a key without a TTL as it is); before Redis 7 the server refuses GT,
-- and from that refusal on the script uses PTTL and PEXPIRE. ms: a
-- number, or the string of one as it came (ARGV), which Redis gets as it
-- is (a Lua number is formatted first).
local gt = true                         -- until the server refuses GT
local function raise_ttl(k, ms)
  if gt then
    local r = redis.pcall('pexpire', k, ms, 'gt')
    if type(r) ~= 'table' then return end
    -- (in the function library gt lasts: only the refusal of GT ends it)
    if tostring(r.err):find('wrong number of arguments', 1, true) then gt = false end
  end
  if redis.call('pttl', k) < tonumber(ms) then
    redis.call('pexpire', k, ms)
  end
end
