#!/bin/sh
# Run a command with DLOCK_TMP set to a fresh directory; on exit, stop
# every redis-server whose pidfile is in it and remove it. Test helpers
# and benchmarks start their servers there, so nothing outlives the run.
DLOCK_TMP=$(mktemp -d "${TMPDIR:-/tmp}/dlock.XXXXXX") || exit 1
export DLOCK_TMP
cleanup() {
    for f in "$DLOCK_TMP"/*.pid; do
        [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null
    done
    rm -rf "$DLOCK_TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
"$@"
