/* SPDX-License-Identifier: MIT
 * lua_acquire.h: taking and giving back a hold (lua_acquire.c), as the
 * Lock class registers it.
 */
#ifndef DLOCK_LUA_ACQUIRE_H
#define DLOCK_LUA_ACQUIRE_H

#include "binding/compat.h"

#pragma GCC visibility push(hidden)

/* Register the acquire step's class, and put the Lock's methods that
 * take and give back holds in the Lock metatable at mt (__close) and in
 * its methods table (mt.methods). */
void dlua_acquire_open(lua_State *L, int mt);

#pragma GCC visibility pop
#endif
