#!/bin/sh
# Install the Debian packages dlock needs (as root), or, for anyone else,
# say which are missing and the one command that installs them.
# Usage: tools/deps.sh [lua-pc-name [demo]]: with demo, only what the
# build and the demo need (not the test tools and the hosts of the specs).
LUA_PC=${1:-lua5.4}
FOR=${2:-all}
# Servers such as haproxy and lighttpd live in sbin, which a normal user's
# PATH lacks; the specs that run them look there too (spec/support).
PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin
export PATH
missing=""
case "$LUA_PC" in
    luajit) LUA=luajit; LUA_DEV=libluajit-5.1-dev ;;
    lua5.1) LUA=lua5.1; LUA_DEV=liblua5.1-0-dev ;;
    *)      LUA=$LUA_PC; LUA_DEV=lib$LUA_PC-dev ;;
esac
pkg-config --exists "$LUA_PC" 2>/dev/null || missing="$missing $LUA_DEV"
command -v "$LUA" >/dev/null 2>&1 || missing="$missing $LUA"
pkg-config --exists hiredis 2>/dev/null || missing="$missing libhiredis-dev"
# TLS (rediss://)
pkg-config --exists openssl 2>/dev/null || missing="$missing libssl-dev"
command -v pkg-config >/dev/null 2>&1 || missing="$missing pkg-config"
command -v redis-server >/dev/null 2>&1 || missing="$missing redis-server"
command -v redis-cli >/dev/null 2>&1 || missing="$missing redis-tools"
if [ "$FOR" != demo ]; then
    # spec/tls_spec.lua makes its certificates with openssl
    command -v openssl >/dev/null 2>&1 || missing="$missing openssl"
    command -v busted >/dev/null 2>&1 || missing="$missing lua-busted"
    # spec/install_spec.lua: the README's install, make dist, the .src.rock
    command -v luarocks >/dev/null 2>&1 || missing="$missing luarocks"
    command -v git >/dev/null 2>&1 || missing="$missing git"
    command -v zip >/dev/null 2>&1 || missing="$missing zip"
    command -v unzip >/dev/null 2>&1 || missing="$missing unzip"
    # spec/scheduler_spec.lua: the event loops dlock yields to
    "$LUA" -e 'require "cqueues"' >/dev/null 2>&1 || missing="$missing lua-cqueues"
    "$LUA" -e 'require "luv"' >/dev/null 2>&1 || missing="$missing lua-luv"
    # spec/haproxy_spec.lua: a real host (it embeds Lua 5.3)
    command -v haproxy >/dev/null 2>&1 || missing="$missing haproxy"
    command -v curl >/dev/null 2>&1 || missing="$missing curl"
    pkg-config --exists lua5.3 2>/dev/null || missing="$missing liblua5.3-dev"
    # spec/lighttpd_spec.lua: a host that cannot yield (mod_magnet, Lua 5.4)
    command -v lighttpd >/dev/null 2>&1 || missing="$missing lighttpd"
    [ -f /usr/lib/lighttpd/mod_magnet.so ] || missing="$missing lighttpd-modules-lua"
    pkg-config --exists lua5.4 2>/dev/null || missing="$missing liblua5.4-dev"
    # spec/luanti_spec.lua: two game servers (Luanti/Minetest, LuaJIT inside)
    [ -x /usr/lib/minetest/minetestserver ] || missing="$missing minetest-server"
    [ -d /usr/share/games/minetest/games/devtest ] || missing="$missing minetest-data"
    pkg-config --exists luajit 2>/dev/null || missing="$missing libluajit-5.1-dev"
fi
[ -z "$missing" ] && exit 0
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "dlock: installing$missing" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $missing >/dev/null || exit 1
    # Debian starts a game server open to the network (UDP 30000) when it
    # installs minetest-server; the spec runs its own, on loopback.
    case " $missing " in *" minetest-server "*)
        if [ -d /run/systemd/system ]; then
            systemctl disable --now minetest-server.service >/dev/null 2>&1 || true
        fi ;;
    esac
else
    # Only root installs packages; say how, with sudo only where there is one.
    if [ "$(id -u)" = 0 ]; then how="apt-get install -y"
    elif command -v sudo >/dev/null 2>&1; then how="sudo apt-get install -y"
    else how="as root: apt-get install -y"; fi
    echo "dlock: missing packages; install them, then run make again as yourself:" >&2
    echo "  $how$missing" >&2
    exit 1
fi
