#!/bin/sh
# make deb: the Debian package lua-dlock, from debian/, into dist/.
#
# dpkg-buildpackage writes its results next to the source tree, and leaves
# its work in debian/: so it runs in a copy of the source, build/deb/SRC
# (the files git lists, with the working tree's edits, as `make dist`
# ships them; outside a git checkout, every file but build/ and dist/).
# The .deb (and its -dbgsym .ddeb), .buildinfo and .changes are moved to
# dist/. Nothing is downloaded: a missing build dependency is named, with
# the command that installs it. debian/changelog's version must be
# DLOCK_VERSION, with a Debian revision. DEB_BUILD_OPTIONS passes through
# (nocheck skips the smoke test of debian/rules).
set -eu
fail() { echo "deb: $*" >&2; exit 1; }

have() { command -v "$1" >/dev/null 2>&1; }
# how this user installs packages: as root, with sudo, or by asking root
if [ "$(id -u)" = 0 ]; then apt="apt-get install -y"
elif have sudo; then apt="sudo apt-get install -y"
else apt="(as root) apt-get install -y"; fi
have dpkg-buildpackage && have dpkg-checkbuilddeps && have dpkg-parsechangelog ||
    fail "needs dpkg-dev; run: $apt dpkg-dev debhelper"
if ! unmet=$(dpkg-checkbuilddeps 2>&1); then
    # "a (>= 1) b | c" -> "a b": the package names, first of alternatives
    pkgs=$(printf '%s\n' "$unmet" | sed -n 's/.*Unmet build dependencies: //p' |
        sed -e 's/debhelper-compat *([^)]*)/debhelper/g' -e 's/ *([^)]*)//g' \
            -e 's/ *| *[^ ]*//g')
    [ -n "$pkgs" ] || fail "dpkg-checkbuilddeps failed: $unmet"
    fail "missing build dependencies; run: $apt $pkgs"
fi

v=$(sed -n 's/^#define DLOCK_VERSION "dlock \([^"]*\)".*/\1/p' src/binding/lua_dlock.c)
[ -n "$v" ] || fail "no DLOCK_VERSION \"dlock X.Y.Z\" in src/binding/lua_dlock.c"
src=$(dpkg-parsechangelog -S Source)
dv=$(dpkg-parsechangelog -S Version)
case $dv in
    "$v"-[0-9]*) ;;
    *) fail "debian/changelog: version $dv is not $v-N (DLOCK_VERSION is $v)" ;;
esac

work=build/deb
rm -rf "$work"
mkdir -p "$work/$src-$v" dist
if have git && git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    { git ls-files --cached --others --exclude-standard; git ls-files --deleted; } |
        sort | uniq -u >"$work/files"
else
    find . -path ./build -prune -o -path ./dist -prune -o -path ./.git -prune \
        -o -type f ! -name '*.o' ! -name '*.so' -print >"$work/files"
fi
tar -cf - -T "$work/files" | tar -xf - -C "$work/$src-$v"
(cd "$work/$src-$v" && dpkg-buildpackage -us -uc -b)

arch=$(dpkg-architecture -qDEB_HOST_ARCH)
rm -f dist/"${src}"_* dist/"${src}"-dbgsym_*
moved=
for f in "$work"/*_"$dv"_*.deb "$work"/*_"$dv"_*.ddeb "$work/${src}_${dv}_$arch.buildinfo" \
         "$work/${src}_${dv}_$arch.changes"; do
    [ -e "$f" ] || continue
    mv "$f" dist/
    moved="$moved dist/${f##*/}"
done
[ -e "dist/${src}_${dv}_$arch.deb" ] || fail "dpkg-buildpackage made no ${src}_${dv}_$arch.deb"
rm -rf "$work"
echo "deb:$moved"
echo "deb: check it with: lintian dist/${src}_${dv}_$arch.changes"
