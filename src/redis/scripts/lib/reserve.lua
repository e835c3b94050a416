-- The starvation bound of the default lock (lib/waiter.lua): the release
-- side.
local STARVE_MS = 10
local RESERVE_MS = 250

-- reservation(v, req, now): the fields a release by req that frees the
-- lock sets (v: field v, as read): r for the longest waiter, if it has
-- waited STARVE_MS, and v spent; else none.
local function reservation(v, req, now)
  local since, who = (v or ''):match('^(%d+):(.*)$')
  if not since or who == req or now - tonumber(since) < STARVE_MS then
    return                              -- (no values: not even a nil)
  end
  return 'r', (now + RESERVE_MS) .. ':' .. who, 'v', ''
end
