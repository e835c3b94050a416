--#include lib/hash.lua
--#include lib/requester.lua
-- prune_leases(k, of, n, mine, now): for holders with a lease of their
-- own (e<owner> = its end, ms: readers, permits), take out of lock k
-- those whose lease ran out, and those with no holds left (with their
-- requesters' counts, lib/holder.lua). n: the holds
-- in all (field n); of, mine: the caller's owner field and its holds.
-- Returns n and mine as they are now, and first = the earliest lease end
-- among the holders that remain (or nil).
local function prune_leases(k, of, n, mine, now)
  local first = nil
  if n > 0 then
    local h, gone = read_hash(k), {}
    for name, v in pairs(h) do
      if name:sub(1, 1) == 'e' then
        local o = 'o' .. name:sub(2)
        local c = tonumber(h[o] or '0')
        if c == 0 or tonumber(v) <= now then
          redis.call('hdel', k, name, o)
          gone[name:sub(2)] = true
          n = n - c
          if o == of then mine = 0 end
        elseif not first or tonumber(v) < first then first = tonumber(v) end
      end
    end
    for name in pairs(h) do             -- and its requesters' counts
      if name:sub(1, 1) == 'h' and gone[owner_of(name:sub(2))] then
        redis.call('hdel', k, name, 'd' .. name:sub(2))  -- (lib/shares.lua)
      end
    end
    if n < 0 then n = 0 end
    redis.call('hset', k, 'n', n)
  end
  return n, mine, first
end

-- own_lease(k, owner, mine, until_ms): the end of owner's own lease in
-- lock k once it holds mine holds, one of them just taken until until_ms.
-- Another hold of owner (a reentry, a shared owner's) never has its lease
-- lowered; an owner's first hold has its own, whatever an old e<owner>
-- (left by a release, which takes out o<owner> only) says.
local function own_lease(k, owner, mine, until_ms)
  if mine <= 1 then return until_ms end
  return math.max(tonumber(redis.call('hget', k, 'e' .. owner) or '0'), until_ms)
end
