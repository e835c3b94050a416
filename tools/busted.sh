#!/bin/sh
# Run busted and end with one plain summary line ("busted: N passed, N
# failed, N skipped"); keeps busted's exit status.
# Usage: tools/busted.sh LUA [busted args...]
set -u
lua=$1; shift
out=$(mktemp)
# BUSTED_CMD runs busted some other way (under valgrind, say).
${BUSTED_CMD:-busted --lua=$lua} "$@" 2>&1 | tee "$out"
rc=$(sed -n 's/^\([0-9]*\) success.* \([0-9]*\) failure.* \([0-9]*\) error.* \([0-9]*\) pending.*/\1 \2 \3 \4/p' "$out" | tail -n 1)
set -- $rc
rm -f "$out"
if [ $# -eq 4 ]; then
    echo "busted: $1 passed, $(($2 + $3)) failed, $4 skipped"
    [ $(($2 + $3)) -eq 0 ] && [ "$1" -gt 0 ] && exit 0
    exit 1
fi
echo "busted: no summary (it crashed?)"
exit 1
