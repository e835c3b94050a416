-- announce(k, keep_ms, chan, pub, msg): lock k is free: keep its record
-- keep_ms (a resend may still come), and tell the waiters (pub: PUBLISH
-- or SPUBLISH on chan).
local function announce(k, keep_ms, chan, pub, msg)
  redis.call('pexpire', k, keep_ms)
  redis.call(pub, chan, msg)
end
