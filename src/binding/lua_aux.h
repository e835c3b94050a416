/* SPDX-License-Identifier: MIT
 * lua_aux.h: the helpers every file of the binding uses (lua_aux.c).
 * Only the binding (`src/binding/`) includes lua.h. */
#ifndef DLOCK_LUA_AUX_H
#define DLOCK_LUA_AUX_H

#include "binding/compat.h"
#include "base/dlock.h"

#pragma GCC visibility push(hidden)

/* Push nil and "code: detail" (detail alone if it already starts with
 * the code); returns 2. */
int dlua_fail(lua_State *L, dl_status st, const char *detail);

/* Durations in seconds from the value at idx, raising on misuse with
 * `what` named (an option, or "#n" an argument). dlua_wait_us: -1 means
 * forever; dlua_lease_ms: positive, at most DL_MAX_LEASE_MS;
 * dlua_seconds_us: positive, at most a year. */
int64_t dlua_wait_us(lua_State *L, int idx, const char *fname,
                     const char *what);
int64_t dlua_lease_ms(lua_State *L, int idx, const char *fname,
                      const char *what);
int64_t dlua_seconds_us(lua_State *L, int idx, const char *fname,
                        const char *what);

/* Raise "bad option 'k' to 'fname' (unknown option)" for a key of the
 * table at t (> 0) that is not one of the keys; then put in t's place a
 * plain table of keys as t answers them (once each, its __index
 * included), which anchors every string option while on the stack. The
 * keys: keys[0], then one every stride bytes up to a NULL (an array of
 * names: sizeof(char *); an array of structs that begin with the name:
 * the struct's size). */
void dlua_check_keys(lua_State *L, int t, const char *fname,
                     const char *const *keys, size_t stride);

/* Raise "bad option 'what' to 'fname' (msg)", or "bad argument #n to
 * 'fname' (msg)" when what is "#n": durations and URLs are checked alike
 * whether they come as options or as arguments. */
int dlua_opt_error(lua_State *L, const char *fname, const char *what,
                   const char *msg);

/* Raise "bad argument #arg to 'fname' (msg)". Arguments are numbered as
 * the caller wrote them (self not counted), and fname is the public name,
 * whatever the call site: never luaL_argerror's guess. */
int dlua_arg_error(lua_State *L, int arg, const char *fname, const char *msg);

/* The userdata of metatable mt at idx, or raise "calling 'fname' on bad
 * self (...)". */
void *dlua_self(lua_State *L, int idx, const char *mt, const char *fname);

void dlua_new_class(lua_State *L, const char *name, const luaL_Reg *meta,
                    const luaL_Reg *methods);

/* Raise msg (formatted) at the line of the user's call (dlock.lua's
 * frames skipped). */
int dlua_error(lua_State *L, const char *fmt, ...);

#pragma GCC visibility pop
#endif
