#!/bin/sh
# Run every example against $REDIS_URL, or against a throwaway redis-server
# on a free loopback port that is stopped when the demo ends.
set -e
cd "$(dirname "$0")/.."
if [ -z "$REDIS_URL" ] && [ "$1" != --inner ]; then
    exec sh tools/with-tmp.sh sh tools/demo.sh --inner
fi
if [ -z "$REDIS_URL" ]; then
    REDIS_URL=$(sh tools/redis-start.sh "$DLOCK_TMP")
    export REDIS_URL
    echo "demo: throwaway redis-server at $REDIS_URL"
fi
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
