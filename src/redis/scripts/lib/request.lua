-- The start of every acquire (README.md, RESENDS).
--
-- read_request(k, of, qf, seq, ...): read lock k: f = its fields n, of
-- (this owner's holds), qf (this requester's last request), t, then the
-- extra fields named in ...; mine and t as numbers. The fourth value is
-- the reply to give at once, or nil: a resend of request seq answers as
-- the first run did (or lost, if its hold is gone since), a stale or a
-- cancelled request is refused.
local function read_request(k, of, qf, seq, ...)
  local f = redis.call('hmget', k, 'n', of, qf, 't', ...)
  local mine, record, t = tonumber(f[2] or '0'), f[3], tonumber(f[4] or '0')
  local last = tonumber((record or '0'):match('^%d+'))
  if record == seq then
    if mine == 0 then return f, mine, t, {-1} end
    return f, mine, t, {1, mine, t}
  end
  if last >= tonumber(seq) then return f, mine, t, {-2} end
  return f, mine, t, nil
end
