/* SPDX-License-Identifier: MIT
 * lua_lock.h: the Lock class (lua_lock.c), as the module's entry point
 * opens it.
 */
#ifndef DLOCK_LUA_LOCK_H
#define DLOCK_LUA_LOCK_H

#include "binding/compat.h"

#pragma GCC visibility push(hidden)

/* Register the Lock class, and the Client's constructors of locks
 * (client:lock, :rwlock, :fair_lock and the Lua half's) in the Client
 * methods table at client_methods; leaves the Lock methods table on the
 * stack. */
void dlua_lock_open(lua_State *L, int client_methods);

#pragma GCC visibility pop
#endif
