#!/bin/sh
# Run busted over spec files and end with one plain summary line
# ("busted: N passed, N failed, N skipped"); exits 0 only if all passed.
# Usage: tools/busted.sh LUA [--busted-option=value ...] FILE-OR-DIR...
#
# The spec files run JOBS at a time (default 6: the suite waits on
# servers and timers far more than it computes), each in a busted of its
# own under tools/with-tmp.sh: its own DLOCK_TMP, its own redis-servers on
# their own ports. A file's busted output is printed whole when it ends,
# under a "== FILE (N s)" line, slowest files first. SERIAL=1 runs one
# busted over everything, as before. Options must be one word each
# (--filter=x, not --filter x). BUSTED_CMD runs busted some other way
# (under valgrind, say).
set -u
lua=$1; shift
here=$(cd "$(dirname "$0")" && pwd)

# One file, as a job of the parallel run: busted, then its output whole.
if [ "${DLOCK_SHARD_OUT:-}" ]; then
    f=$1
    log="$DLOCK_SHARD_OUT/$(echo "$f" | tr '/' '_').log"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    sh "$here/with-tmp.sh" ${BUSTED_CMD:-busted --lua=$lua} $BUSTED_OPTS "$f" >"$log" 2>&1
    t1=$(date +%s)
    flock "$DLOCK_SHARD_OUT/.print" sh -c 'printf "\n== %s (%s s)\n" "$1" "$2"; cat "$3"' \
        - "$f" $((t1 - t0)) "$log"
    exit 0
fi

opts=; paths=
for a; do
    case $a in
        -*) opts="$opts $a" ;;
        *) paths="$paths $a" ;;
    esac
done

# The summary line busted prints: "N successes / N failures / N errors / N pending".
counts() {
    sed -n 's/^\([0-9]*\) success.* \([0-9]*\) failure.* \([0-9]*\) error.* \([0-9]*\) pending.*/\1 \2 \3 \4/p' "$1" | tail -n 1
}

if [ "${SERIAL:-}" = 1 ]; then
    out=$(mktemp)
    # shellcheck disable=SC2086
    ${BUSTED_CMD:-busted --lua=$lua} $opts $paths 2>&1 | tee "$out"
    set -- $(counts "$out")
    rm -f "$out"
    if [ $# -eq 4 ]; then
        echo "busted: $1 passed, $(($2 + $3)) failed, $4 skipped"
        [ $(($2 + $3)) -eq 0 ] && [ "$1" -gt 0 ] && exit 0
        exit 1
    fi
    echo "busted: no summary (it crashed?)"
    exit 1
fi

# The files, the slowest first so that the last to start are short ones.
slow="failover command ha faults watchdog luanti package log suspects combine tls harness fairlock
      hostile lock client soak install docs sentinel cluster names rwlock resources inspect"
all=
for p in $paths; do
    if [ -d "$p" ]; then all="$all $(echo "$p"/*_spec.lua)"; else all="$all $p"; fi
done
files=
for s in $slow; do
    for f in $all; do
        case $f in */${s}_spec.lua) files="$files $f" ;; esac
    done
done
for f in $all; do
    case " $files " in *" $f "*) ;; *) files="$files $f" ;; esac
done

dir=$(mktemp -d) || exit 1
trap 'rm -rf "$dir"' EXIT
trap 'exit 130' INT TERM
t0=$(date +%s)
# shellcheck disable=SC2086
printf '%s\n' $files | DLOCK_SHARD_OUT=$dir BUSTED_OPTS=$opts \
    xargs -P "${JOBS:-6}" -n 1 sh "$0" "$lua"
t1=$(date +%s)

passed=0; failed=0; skipped=0; bad=
for f in $files; do
    log="$dir/$(echo "$f" | tr '/' '_').log"
    set -- $(counts "$log")
    if [ $# -eq 4 ]; then
        passed=$((passed + $1)); failed=$((failed + $2 + $3)); skipped=$((skipped + $4))
        [ $(($2 + $3)) -eq 0 ] && continue
        bad="$bad $f"
    else
        failed=$((failed + 1)); bad="$bad $f(no summary: it crashed?)"
    fi
    # What failed, once more at the end: a log often shows only its tail.
    printf '\n== %s failed:\n' "$f"
    if grep -q '^\(Failure\|Error\) ->' "$log"; then
        sed -n '/^\(Failure\|Error\) ->/,$p' "$log" | head -n 100
    else
        tail -n 40 "$log"
    fi
done
echo
[ -z "$bad" ] || echo "failed in:$bad"
echo "busted: $passed passed, $failed failed, $skipped skipped" \
     "($(echo $files | wc -w) files, ${JOBS:-6} at a time, $((t1 - t0)) s)"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
