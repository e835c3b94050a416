# dlock: build, test and run the examples. `make help` lists the targets.
LUA      ?= lua5.4
LUA_PC   ?= $(LUA)
BUSTED   ?= busted
BUSTED_ARGS ?=
CC       ?= cc
CFLAGS   ?= -O2 -g
PREFIX   ?= /usr/local
LUA_VER  ?= $(if $(filter luajit,$(LUA_PC)),5.1,$(patsubst lua%,%,$(LUA_PC)))
LUA_DEV  ?= $(if $(filter luajit,$(LUA_PC)),libluajit-5.1-dev,$(if $(filter 5.1,$(LUA_VER)),liblua5.1-0-dev,liblua$(LUA_VER)-dev))
LIBDIR   ?= $(PREFIX)/lib/lua/$(LUA_VER)
SHAREDIR ?= $(PREFIX)/share/lua/$(LUA_VER)
BINDIR   ?= $(PREFIX)/bin
MANDIR   ?= $(PREFIX)/share/man
# the installed command's #! line (the Debian package: /usr/bin/lua5.4)
LUA_SHEBANG ?= /usr/bin/env $(LUA)

WARN = -std=c99 -Wall -Wextra -Werror -Wshadow -Wmissing-prototypes \
       -Wstrict-prototypes -Wpointer-arith -Wformat=2
ALL_CFLAGS = $(CFLAGS) $(WARN) -fPIC -fvisibility=hidden
PKG_CFLAGS = -Isrc $(shell pkg-config --cflags $(LUA_PC) hiredis 2>/dev/null)
PKG_LIBS   = $(shell pkg-config --libs hiredis 2>/dev/null) -lpthread -ldl -lm
# TLS (rediss://) over OpenSSL when libssl-dev is there; TLS=0 builds
# without it (rediss:// then gives a "connection" error saying so).
TLS ?= $(shell pkg-config --exists openssl 2>/dev/null && echo 1 || echo 0)
ifeq ($(TLS),1)
PKG_CFLAGS += -DDL_WITH_TLS $(shell pkg-config --cflags openssl)
PKG_LIBS   += $(shell pkg-config --libs openssl)
endif

# src/ by layer, each folder using only those below it (spec/layout_spec.lua):
# binding/ (Lua) -> core/ (client, holds, watchdog) -> redis/ (executor,
# topologies, connections, scripts) -> base/ (status codes, clock, log).
SRC = $(wildcard src/base/*.c src/redis/*.c src/core/*.c) \
      $(filter-out src/binding/lua_process.c,$(wildcard src/binding/*.c))
# dlock.process: the `dlock` command's process plumbing, a module of its own
PROC_SRC = src/binding/lua_process.c src/base/util.c
HDR = $(wildcard src/*/*.h) src/redis/scripts.h
BUILD ?= build
SO  = $(BUILD)/dlock/core.so
PROC_SO = $(BUILD)/dlock/process.so

# Tests and examples load the module from the tree.
export LUA_PATH  := $(CURDIR)/lua/?.lua;$(CURDIR)/spec/support/?.lua;;
export LUA_CPATH := $(CURDIR)/$(BUILD)/?.so;;
export DLOCK_LUA := $(LUA)
export DLOCK_BUILD := $(BUILD)

.PHONY: all deps test demo bench bench-instr soak torture asan tsan valgrind lint install dist deb clean help

all: $(SO) $(PROC_SO) $(BUILD)/host

# A plain build needs only the build dependencies and installs nothing; the
# targets that run tests or examples run `deps` (tools/deps.sh) first.
$(SO): $(SRC) $(HDR)
	@pkg-config --exists $(LUA_PC) hiredis 2>/dev/null || { \
	    echo "dlock: cannot build: pkg-config finds no $(LUA_PC) and/or hiredis."; \
	    echo "  Install the build dependencies (Debian):"; \
	    echo "    sudo apt-get install -y build-essential pkg-config $(LUA_DEV) libhiredis-dev"; \
	    echo "  (and libssl-dev for TLS: without it, rediss:// is not built in)"; \
	    echo "  or run 'make deps' as root (it also installs the test tools)."; \
	    exit 1; } >&2
	@mkdir -p $(BUILD)/dlock
	$(CC) $(ALL_CFLAGS) $(CPPFLAGS) $(PKG_CFLAGS) -shared -o $@ $(SRC) $(PKG_LIBS) $(LDFLAGS)

$(PROC_SO): $(PROC_SRC) src/base/dlock.h src/binding/compat.h | $(SO)
	$(CC) $(ALL_CFLAGS) $(CPPFLAGS) $(PKG_CFLAGS) -shared -o $@ $(PROC_SRC) -lpthread $(LDFLAGS)

# src/redis/scripts.h: the Redis scripts (src/redis/scripts/*.lua, one per script) as C,
# written by tools/gen-scripts.lua when a script is newer. It is committed:
# a build with no Lua to run the generator (luarocks, or a fresh clone whose
# file times say nothing) uses it as it is.
SCRIPTS = $(wildcard src/redis/scripts/*.lua src/redis/scripts/lib/*.lua)
GEN_LUA ?= $(firstword $(shell command -v $(LUA) lua5.4 lua5.3 lua5.1 luajit lua 2>/dev/null))
src/redis/scripts.h: $(SCRIPTS) tools/gen-scripts.lua
	@if [ -n "$(GEN_LUA)" ]; then \
	    echo "$(GEN_LUA) tools/gen-scripts.lua src/redis/scripts $@"; \
	    $(GEN_LUA) tools/gen-scripts.lua src/redis/scripts $@; \
	else echo "dlock: no Lua to run tools/gen-scripts.lua: src/redis/scripts.h as committed" >&2; fi

# examples/host: a C program embedding Lua, running jobs from a tick loop.
$(BUILD)/host: examples/host/host.c $(SO)
	$(CC) $(CFLAGS) $(WARN) $(shell pkg-config --cflags $(LUA_PC) 2>/dev/null) -o $@ $< \
	    $(shell pkg-config --libs $(LUA_PC) 2>/dev/null) $(LDFLAGS)

$(BUILD)/forktest.so: spec/support/forktest.c   # fork() for the fork specs only
	$(CC) $(ALL_CFLAGS) $(PKG_CFLAGS) -shared -o $@ $< $(LDFLAGS)

deps:                      ## install missing Debian packages (as root)
	@sh tools/deps.sh $(LUA_PC) $(DEPS_FOR)

# The demo needs the build's packages and a Redis only.
demo: DEPS_FOR = demo

# Under make -j too, deps finishes before the build when a goal needs it.
ifneq ($(filter test demo asan valgrind bench tsan soak torture,$(MAKECMDGOALS)),)
$(SO) $(PROC_SO) $(BUILD)/forktest.so: | deps
endif

SPECS ?= spec
test: deps all $(BUILD)/forktest.so  ## build, then the busted suite on real redis-servers (JOBS=6 files at a time; SERIAL=1)
	sh tools/with-tmp.sh sh tools/busted.sh $(LUA) $(BUSTED_ARGS) $(SPECS)

# The specs tagged #binding go through the binding and its compat header
# (src/binding/) in every way a Lua version can differ: values, errors,
# callbacks, coroutines and yields, the command. CI runs them on the other
# Luas (BUSTED_ARGS="--tags=binding --exclude-tags=slow"); the rest of the
# suite tests the C core, which is the same for all.

demo: deps all             ## build, then run examples/ ($REDIS_URL or a throwaway server)
	sh tools/demo.sh

bench: deps all               ## benchmarks against a throwaway redis-server
	@mkdir -p build/bench
	$(CC) -O2 -Wall -o build/bench/floor bench/floor.c $$(pkg-config --cflags --libs hiredis)
	$(CC) -O2 -Wall -o build/bench/ring bench/ring.c
	@$(LUA) -e 'require "socket"' 2>/dev/null || dpkg -s lua-socket >/dev/null 2>&1 || \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        apt-get install -y -qq lua-socket >/dev/null || \
	        (apt-get update -qq && apt-get install -y -qq lua-socket >/dev/null) || true; \
	    else echo "bench: no plain-Lua baseline; to get it: sudo apt-get install -y lua-socket"; fi
	@command -v gnuplot >/dev/null || \
	    if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	        apt-get install -y -qq gnuplot-nox >/dev/null || \
	        (apt-get update -qq && apt-get install -y -qq gnuplot-nox >/dev/null) || true; \
	    else echo "bench: no plots; to get them: sudo apt-get install -y gnuplot-nox"; fi
	sh tools/with-tmp.sh $(LUA) bench/run.lua $(BENCH_ARGS)

bench-instr: all         ## Redis instructions per lock cycle and per renewal (callgrind; needs valgrind)
	sh tools/with-tmp.sh $(LUA) bench/instr.lua $(BENCH_ARGS)

soak: deps all             ## 10^6 critical sections under faults (not in CI; SOAK_ARGS="N")
	$(CC) $(ALL_CFLAGS) $(PKG_CFLAGS) -shared -o $(BUILD)/fencestore.so tools/soak/fencestore.c
	sh tools/with-tmp.sh $(LUA) tools/soak/soak.lua $(SOAK_ARGS)

# The randomized fault checker (tools/torture/run.lua): rounds of random
# operations and faults on every topology, then invariants over the history.
# SEED=s replays a schedule; a failing round's history stays in build/torture.
TORTURE_SECONDS ?= 300
torture: deps all          ## randomized faults + history checker (TORTURE_SECONDS=300 SEED=s)
	TORTURE_SECONDS=$(TORTURE_SECONDS) SEED=$(SEED) \
	    sh tools/with-tmp.sh $(LUA) tools/torture/run.lua

asan: deps                 ## the suite under ASan+UBSan (built in build/asan)
	$(MAKE) all build/asan/forktest.so BUILD=build/asan CFLAGS="-O1 -g -fsanitize=address,undefined -fno-omit-frame-pointer" \
	    LDFLAGS="-fsanitize=address,undefined"
	LUA_CPATH="$(CURDIR)/build/asan/?.so;;" DLOCK_BUILD=build/asan \
	LD_PRELOAD="$$($(CC) -print-file-name=libasan.so) $$($(CC) -print-file-name=libubsan.so)" \
	ASAN_OPTIONS=detect_leaks=0 \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
	    sh tools/with-tmp.sh sh tools/busted.sh $(LUA) --exclude-tags=slow,nocore spec

# ThreadSanitizer: tools/tsan-lua.c is a Lua interpreter built with the
# runtime in it (preloading it into lua5.4 would reach every shell the specs
# start); ASLR is off (setarch -R) for the runtime's fixed memory layout.
# Specs that fork a multi-threaded process are left to the other checkers.
tsan: deps                 ## the suite under ThreadSanitizer (built in build/tsan)
	$(MAKE) all BUILD=build/tsan CFLAGS="-O1 -g -fsanitize=thread" LDFLAGS="-fsanitize=thread"
	$(CC) -O1 -g -fsanitize=thread $$(pkg-config --cflags $(LUA_PC)) -o build/tsan/lua \
	    tools/tsan-lua.c $$(pkg-config --libs $(LUA_PC))
	LUA_CPATH="$(CURDIR)/build/tsan/?.so;;" DLOCK_BUILD=build/tsan DLOCK_LUA=$(CURDIR)/build/tsan/lua \
	TSAN_OPTIONS="halt_on_error=1 exitcode=66 second_deadlock_stack=1" \
	BUSTED_CMD="setarch -R $(CURDIR)/build/tsan/lua $$(command -v $(BUSTED))" \
	    sh tools/with-tmp.sh sh tools/busted.sh $(LUA) --exclude-tags=slow,fork,nocore spec

valgrind: deps all $(BUILD)/forktest.so ## the suite under valgrind (leaks, bad reads; CPU-bound: 3 files at a time)
	DLOCK_VALGRIND=1 JOBS=$${JOBS:-3} BUSTED_CMD="valgrind -q --error-exitcode=9 --leak-check=full \
	    --errors-for-leak-kinds=definite $(LUA) $$(command -v $(BUSTED))" \
	    sh tools/with-tmp.sh sh tools/busted.sh $(LUA) --exclude-tags=slow,nocore spec

lint:                      ## cppcheck, the rule that only the binding sees lua.h, luacheck on the Redis scripts
	@! grep -l '#include.*\(lua\.h\|lauxlib\.h\|compat\.h\|lua_dlock\.h\)' \
	    $(wildcard src/base/* src/redis/*.[ch] src/core/*) \
	    || (echo "lint: only src/binding/ may see Lua" && false)
	cppcheck --quiet --error-exitcode=1 --enable=warning,portability \
	    --std=c99 --suppress=missingIncludeSystem --inline-suppr -Isrc src
	@# each script as Redis gets it (its includes in it), against Redis's globals
	@if command -v luacheck >/dev/null 2>&1 && [ -n "$(GEN_LUA)" ]; then \
	    rm -rf $(BUILD)/scripts && mkdir -p $(BUILD)/scripts && \
	    $(GEN_LUA) tools/gen-scripts.lua src/redis/scripts --expand $(BUILD)/scripts && \
	    echo "luacheck --config src/redis/scripts/.luacheckrc $(BUILD)/scripts" && \
	    luacheck -q --no-color --config src/redis/scripts/.luacheckrc $(BUILD)/scripts; \
	else echo "lint: no luacheck (Debian: lua-check): the Redis scripts are not linted" >&2; fi

# The `dlock` command goes to $(BINDIR), run by $(LUA) and told where the
# module is (its @PATHS@ line), so it works whatever LUA_PATH says; its man
# page, dlock(1), to $(MANDIR)/man1 (`man dlock` finds it there when
# $(BINDIR) is on PATH).
install: $(SO) $(PROC_SO)
	install -d $(DESTDIR)$(LIBDIR)/dlock $(DESTDIR)$(SHAREDIR) $(DESTDIR)$(BINDIR) \
	    $(DESTDIR)$(MANDIR)/man1
	install -m 0644 doc/dlock.1 $(DESTDIR)$(MANDIR)/man1/dlock.1
	install -m 0755 $(SO) $(DESTDIR)$(LIBDIR)/dlock/core.so
	install -m 0755 $(PROC_SO) $(DESTDIR)$(LIBDIR)/dlock/process.so
	install -d $(DESTDIR)$(SHAREDIR)/dlock
	install -m 0644 lua/dlock.lua $(DESTDIR)$(SHAREDIR)/dlock.lua
	install -m 0644 lua/dlock/sched.lua lua/dlock/multi.lua lua/dlock/semaphore.lua \
	    $(DESTDIR)$(SHAREDIR)/dlock/
	sed -e '1s|.*|#!$(LUA_SHEBANG)|' \
	    -e 's|^-- @PATHS@.*|package.path = "$(SHAREDIR)/?.lua;" .. package.path; package.cpath = "$(LIBDIR)/?.so;" .. package.cpath|' \
	    bin/dlock >$(DESTDIR)$(BINDIR)/dlock.tmp
	chmod 0755 $(DESTDIR)$(BINDIR)/dlock.tmp
	mv $(DESTDIR)$(BINDIR)/dlock.tmp $(DESTDIR)$(BINDIR)/dlock

# The release: tools/dist.sh checks that every version agrees, then
# writes the tarball, its rockspec and a .src.rock that installs offline.
dist: all                  ## dist/: the release tarball and a .src.rock that installs offline
	LUA=$(LUA) LUA_VER=$(LUA_VER) sh tools/dist.sh

# The Debian package (debian/): tools/deb.sh builds it with dpkg-buildpackage
# in a copy of the source under build/deb, and moves the .deb, .changes and
# .buildinfo to dist/. It says which build dependencies are missing.
deb:                       ## dist/: the Debian package lua-dlock (needs dpkg-dev, debhelper)
	sh tools/deb.sh

# build and dist, and what a dpkg-buildpackage run in the checkout leaves
clean:
	rm -rf build dist debian/.debhelper debian/lua-dlock debian/tmp debian/files \
	    debian/*.substvars debian/*.debhelper.log debian/debhelper-build-stamp

help:
	@grep -E '^[a-z]+:.*##' Makefile | sed 's/:.*##/\t/'
