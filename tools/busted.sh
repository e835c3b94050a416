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
# (--filter=x, not --filter x). With --tags=a,b only the files that name
# one of those tags (#a, #b) run: the others hold no such spec (and need
# not even load on this Lua). BUSTED_CMD runs busted some other way
# (under valgrind, say).
#
# A spec tagged #timing asserts a time bound or waits a fixed time for
# another process to act: when one fails, the report says so and prints
# the machine's load average and core count, so that a reader suspects
# load first (CONTRIBUTING.md, "The tests").
set -u
lua=$1; shift
here=$(cd "$(dirname "$0")" && pwd)

# The load average (1, 5 and 15 min) and the core count, as one phrase.
load() {
    printf 'load average %s on %s cores' \
        "$(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" \
        "$(getconf _NPROCESSORS_ONLN 2>/dev/null || echo '?')"
}

# One file, as a job of the parallel run: busted, then its output whole.
if [ "${DLOCK_SHARD_OUT:-}" ]; then
    f=$1
    log="$DLOCK_SHARD_OUT/$(echo "$f" | tr '/' '_').log"
    t0=$(date +%s)
    # shellcheck disable=SC2086
    sh "$here/with-tmp.sh" ${BUSTED_CMD:-busted --lua=$lua} $BUSTED_OPTS "$f" >"$log" 2>&1
    t1=$(date +%s)
    load >"$log.load"                   # as the file ended, for the report
    flock "$DLOCK_SHARD_OUT/.print" sh -c 'printf "\n== %s (%s s)\n" "$1" "$2"; cat "$3"' \
        - "$f" $((t1 - t0)) "$log"
    exit 0
fi

opts=; paths=; tags=
for a; do
    case $a in
        --tags=*) opts="$opts $a"; tags=$(echo "${a#--tags=}" | tr ',' ' ') ;;
        -*) opts="$opts $a" ;;
        *) paths="$paths $a" ;;
    esac
done

# Whether file $1 names one of the --tags (all do when none is given).
tagged() {
    [ -z "$tags" ] && return 0
    for t in $tags; do
        grep -q "#$t\b" "$1" && return 0
    done
    return 1
}

# The names of the failed specs tagged #timing in busted's output $1: each
# failure is "Failure -> FILE @ LINE" (or "Error -> ..."), then the full
# name, describe blocks' names first, on the next line.
timing_failures() {
    awk '/^(Failure|Error) -> / { getline name; if (name ~ /#timing/) print name }' "$1"
}

# After a failed run: whether any failed spec was timing-bound, and the
# load, once more at the end.
timing_note() {
    [ "$1" -gt 0 ] || return 0
    echo "note: $1 failed spec(s) are timing-bound (#timing: a time bound, or a" \
         "wait for another process); the run ended at $(load): on a loaded" \
         "machine suspect load first, and run them again on a quiet one (CONTRIBUTING.md)"
}

# The summary line busted prints: "N successes / N failures / N errors / N pending".
counts() {
    sed -n 's/^\([0-9]*\) success.* \([0-9]*\) failure.* \([0-9]*\) error.* \([0-9]*\) pending.*/\1 \2 \3 \4/p' "$1" | tail -n 1
}

if [ "${SERIAL:-}" = 1 ]; then
    out=$(mktemp)
    # shellcheck disable=SC2086
    ${BUSTED_CMD:-busted --lua=$lua} $opts $paths 2>&1 | tee "$out"
    ntiming=$(timing_failures "$out" | wc -l)
    set -- $(counts "$out")
    rm -f "$out"
    timing_note "$ntiming"
    if [ $# -eq 4 ]; then
        echo "busted: $1 passed, $(($2 + $3)) failed, $4 skipped"
        [ $(($2 + $3)) -eq 0 ] && [ "$1" -gt 0 ] && exit 0
        exit 1
    fi
    echo "busted: no summary (it crashed?)"
    exit 1
fi

# The files, the slowest first (as `make test` timed them) so that the
# last to start are short ones.
slow="hostile combined_faults failover watchdog ha install rare_states command names
      luanti faults docs tls fairlock log harness scripts scripts_lease
      cluster_master_failover scheduler haproxy soak sentinel semaphore notices lock
      lighttpd cluster_migration layout cluster_migrating_releases rwlock resources
      release redirect cluster_scheduler call"
all=
for p in $paths; do
    if [ -d "$p" ]; then all="$all $(echo "$p"/*_spec.lua)"; else all="$all $p"; fi
done
kept=
for f in $all; do tagged "$f" && kept="$kept $f"; done
all=$kept
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
load0=$(load)
t0=$(date +%s)
# shellcheck disable=SC2086
printf '%s\n' $files | DLOCK_SHARD_OUT=$dir BUSTED_OPTS=$opts \
    xargs -P "${JOBS:-6}" -n 1 sh "$0" "$lua"
t1=$(date +%s)

passed=0; failed=0; skipped=0; bad=; ntiming=0
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
    # A timing-bound spec that failed: say so, with the load now.
    timing_failures "$log" >"$dir/.timing"
    if [ -s "$dir/.timing" ]; then
        n=$(wc -l <"$dir/.timing"); ntiming=$((ntiming + n))
        echo "-- $n of these failed specs are timing-bound (#timing):"
        sed 's/^/--   /' "$dir/.timing"
        echo "-- the file ended at $(cat "$log.load" 2>/dev/null || load):" \
             "on a loaded machine, suspect load first"
    fi
done
echo
[ -z "$bad" ] || echo "failed in:$bad"
[ -z "$bad" ] || timing_note "$ntiming"
echo "busted: $passed passed, $failed failed, $skipped skipped" \
     "($(echo $files | wc -w) files, ${JOBS:-6} at a time, $((t1 - t0)) s;" \
     "$load0 at the start, $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null) at the end)"
[ "$failed" -eq 0 ] && [ "$passed" -gt 0 ]
