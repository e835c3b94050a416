-- luacheck over the scripts as Redis gets them (`make lint` expands each
-- one's includes into $(BUILD)/scripts/ first, and writes the function
-- library of them all there): Redis's Lua 5.1, its globals, and none of
-- their own (Redis refuses a script that sets one).
std = "lua51"
read_globals = { "redis", "KEYS", "ARGV", "cjson", "cmsgpack", "struct", "bit" }
max_line_length = 100
-- library.lua (the function library) makes each script a function of
-- KEYS and ARGV, which some of them do not read
ignore = { "212/KEYS", "212/ARGV" }
