#!/bin/sh
# make dist: the release in dist/, from the checkout's working tree.
#
# One version: DLOCK_VERSION in src/binding/lua_dlock.c ("dlock 2.0.0" -> 2.0.0).
# The rockspec's file name, its version, source.url and source.dir, and
# the built module's _VERSION must all agree with it, or nothing is written.
#
# The tarball holds every file git tracks or would track (so uncommitted
# edits are in it: release from a clean tagged checkout), never what
# .gitignore ignores. The .src.rock is what `luarocks pack` makes (the
# rockspec and the tarball, zipped); luarocks pack itself cannot fetch a
# tarball named by a relative path. Needs git, tar, gzip and zip.
set -eu
LUA=${LUA:-lua5.4}
LUA_VER=${LUA_VER:-5.4}
fail() { echo "dist: $*" >&2; exit 1; }

v=$(sed -n 's/^#define DLOCK_VERSION "dlock \([^"]*\)".*/\1/p' src/binding/lua_dlock.c)
[ -n "$v" ] || fail "no DLOCK_VERSION \"dlock X.Y.Z\" in src/binding/lua_dlock.c"
set -- dlock-*.rockspec
rs=$1
n=${rs#dlock-"$v"-}
n=${n%.rockspec}
case "$# $n" in
    "1 "|"1 "*[!0-9]*|[!1]*|1[0-9]*) fail "want one rockspec, named dlock-$v-N.rockspec (DLOCK_VERSION is $v), found: $*";;
esac

ROCKSPEC="$rs" V="$v" LUA_CPATH="${DLOCK_BUILD:-build}/?.so;;" LUA_PATH="lua/?.lua;;" "$LUA" -e '
  local rs, v = os.getenv("ROCKSPEC"), os.getenv("V")
  local t = {}
  assert(loadfile(rs, "t", t))()
  local src = t.source or {}
  for _, c in ipairs({
    { "package", t.package, "dlock" },
    { "version", t.version, rs:match("^dlock%-(.*)%.rockspec") },
    { "source.url", (src.url or ""):gsub("^.*/", ""), "dlock-" .. v .. ".tar.gz" },
    { "source.dir", src.dir, "dlock-" .. v },
    { "_VERSION of the built module", require("dlock")._VERSION, "dlock " .. v } }) do
    if c[2] ~= c[3] then
      io.stderr:write(("dist: %s: %s is %s, want %s (DLOCK_VERSION is %s)\n"):format(
        rs, c[1], tostring(c[2]), c[3], v))
      os.exit(1)
    end
  end'

command -v git >/dev/null && git rev-parse --is-inside-work-tree >/dev/null 2>&1 ||
    fail "needs git and a git checkout (it ships the files git lists)"
command -v zip >/dev/null || fail "needs zip (Debian: apt-get install zip)"
[ -z "$(git status --porcelain)" ] ||
    echo "dist: note: uncommitted or untracked files are in the tarball (git status)" >&2

name=dlock-$v
rm -rf "dist/$name" "dist/$name.tar.gz" "dist/$name"-*
mkdir -p "dist/$name"
{ git ls-files --cached --others --exclude-standard; git ls-files --deleted; } |
    sort | uniq -u >"dist/$name.files"
tar -cf - -T "dist/$name.files" | tar -xf - -C "dist/$name"
tar -C dist -czf "dist/$name.tar.gz" "$name"
rm -rf "dist/$name" "dist/$name.files"
cp "$rs" dist/
(cd dist && zip -q "${rs%.rockspec}.src.rock" "$rs" "$name.tar.gz")
echo "dist: dist/$name.tar.gz dist/$rs dist/${rs%.rockspec}.src.rock"
echo "dist: install offline with: luarocks --lua-version=$LUA_VER install ${rs%.rockspec}.src.rock --tree TREE"
