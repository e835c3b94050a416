#!/bin/sh
# Run every example against a throwaway redis-server on a free loopback
# port, started here and stopped when the demo ends. It never uses
# $REDIS_URL: the demo writes keys, and a user's own Redis is not ours.
set -e
cd "$(dirname "$0")/.."
if [ "$1" != --inner ]; then
    exec sh tools/with-tmp.sh sh tools/demo.sh --inner
fi
REDIS_URL=$(sh tools/redis-start.sh "$DLOCK_TMP")
export REDIS_URL
echo "demo: throwaway redis-server at $REDIS_URL"
lua=${DLOCK_LUA:-lua5.4}
close=$($lua -e 'print(_VERSION == "Lua 5.4" and "yes" or "no")')
for ex in examples/*.lua; do
    echo
    echo "== $ex"
    if [ "$close" = no ] && grep -q '<close>' "$ex"; then
        echo "(skipped: it uses <close>, which $lua does not have)"
        continue
    fi
    $lua "$ex"
done
echo
echo "== examples/host (a C host ticking Lua jobs)"
"${DLOCK_BUILD:-build}/host" examples/host/tick.lua "$REDIS_URL"
