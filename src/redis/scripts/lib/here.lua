-- here(key): key, if it is on this node; else nil. For a one-key script
-- of a slot mid-migration (op.c), whose other keys (the queue, derived
-- from KEYS[1]) it did not declare: on the migrating node a key that is
-- not there is out of a script's reach (an error, caught here), and on
-- the importing node it reads as empty while it may still be on the
-- other, so a write would make a second copy that MIGRATE then refuses.
-- A key that is here is the only copy (MIGRATE deletes the source's once
-- the target has it): the script may read and write it.
local function here(key)
  local r = redis.pcall('exists', key)
  if r == 1 then return key end
  return nil
end
