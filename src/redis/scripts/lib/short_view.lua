-- short_fields(v): the hash that string v, a lock in its short form,
-- stands for (README.md, THE SHORT FORM), as { field, value, ... } in a
-- fixed order; nil if v is no short form.
local function short_fields(v)
  local n, t, q, kv, g, owner = v:match('^(%d+)|(%d+)|(%d+)|([%de]*)|(g?)|(.+)$')
  if not n then return nil end
  local h = { 'n', n, 't', t, 'q' .. owner, q }
  if n ~= '0' then
    h[7] = 'o' .. owner
    h[8] = n
  end
  if kv ~= '' then
    h[#h + 1] = 'k' .. owner
    h[#h + 1] = kv
  end
  if g == 'g' then
    h[#h + 1] = 'g'
    h[#h + 1] = owner
  end
  return h
end

-- short_view(k): the fields of lock k while it is in its short form (as
-- short_fields), nil while it is a hash or no key; raises WRONGTYPE on a
-- key that is neither. For a script that only reads: it writes nothing.
local function short_view(k)
  if type(redis.pcall('hlen', k)) == 'number' then return nil end
  return short_fields(redis.call('get', k)) or redis.call('hlen', k)
end
