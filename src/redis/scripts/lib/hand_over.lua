--#include lib/pass_on.lua
-- hand_over(k, counter, q, keep_ms, pub, keep): what a fair lock does once
-- free (take_out left none): passed on, or, with nobody waiting, it keeps
-- its record keep_ms.
local function hand_over(k, counter, q, keep_ms, pub, keep)
  redis.call('hdel', k, 'g')
  if not pass_on(k, counter, q, nil, pub, keep) then
    redis.call('pexpire', k, keep_ms)
  end
end
