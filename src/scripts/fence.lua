-- Raise a slot's fencing counter (and a hold's token) to a token.
--
-- Redlock's masters agree on the highest token.
-- KEYS[1] counter: the fencing counter, P{tag}:fence
-- KEYS[2] lock: the lock's hash, P{name}
-- ARGV[1] token: the token to raise them to
-- ARGV[2] req: whose hold takes the token: the requester's own (where
--   it has none, a shared owner's other clients keep theirs)
-- returns: 1
--#include lib/requester.lua
--#include lib/holder.lua
local token, req = ARGV[1], ARGV[2]
local counter, k = KEYS[1], KEYS[2]
local owner = owner_of(req)
if tonumber(redis.call('get', counter) or '0') < tonumber(token) then
  redis.call('set', counter, token)
end
-- Only ever up: a late copy of an earlier tenancy's fence must not lower
-- a later tenancy's token (its release would then be told "lost").
if redis.call('hexists', k, holder_field(owner, req) or 'o' .. owner) == 1 and
    tonumber(redis.call('hget', k, 't') or '0') < tonumber(token) then
  redis.call('hset', k, 't', token)
end
return 1
