#!/bin/sh
# Start a throwaway redis-server on a free loopback port with its files in
# DIR (pidfile DIR/redis-PORT.pid; tools/with-tmp.sh stops it) and print
# its URL. Usage: tools/redis-start.sh DIR [extra redis-server args...]
dir=$1; shift
for _ in 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20; do
    port=$(( 10000 + $(od -An -N2 -tu2 /dev/urandom) % 22768 ))   # below the ephemeral range
    base="$dir/redis-$port"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
        --daemonize yes --pidfile "$base.pid" --logfile "$base.log" \
        --dir "$dir" "$@" >/dev/null 2>&1 || continue
    i=0
    while [ $i -lt 100 ]; do
        if redis-cli -p "$port" ping 2>/dev/null | grep -q PONG; then
            echo "redis://127.0.0.1:$port/0"
            exit 0
        fi
        sleep 0.02
        i=$((i + 1))
    done
done
echo "redis-start: no free loopback port found" >&2
exit 1
