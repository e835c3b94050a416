/* SPDX-License-Identifier: MIT
 * lua_connect.h: dlock.connect (lua_connect.c).
 */
#ifndef DLOCK_LUA_CONNECT_H
#define DLOCK_LUA_CONNECT_H

#include "binding/compat.h"

#pragma GCC visibility push(hidden)

/* dlock.connect(url | opts): a Client, or nil and an error; raises on a
 * bad option, naming it. */
int dlua_connect(lua_State *L);

#pragma GCC visibility pop
#endif
