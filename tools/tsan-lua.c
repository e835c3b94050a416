/* A minimal Lua 5.4 interpreter for `make tsan`: built with
 * -fsanitize=thread so that the ThreadSanitizer runtime is in the
 * executable itself (preloading it into an uninstrumented lua5.4 would
 * also preload it into every shell the specs start, which crashes them).
 * Usage: tsan-lua SCRIPT [ARGS...], like `lua SCRIPT ARGS...`. */
#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>
#include <stdio.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s script [args...]\n", argv[0]);
        return 2;
    }
    lua_State *L = luaL_newstate();
    luaL_openlibs(L);
    lua_createtable(L, argc, 1);            /* arg, as lua.c builds it */
    for (int i = 0; i < argc; i++) {
        lua_pushstring(L, argv[i]);
        lua_rawseti(L, -2, i - 1);
    }
    lua_setglobal(L, "arg");
    int rc = luaL_loadfile(L, argv[1]);
    if (rc == LUA_OK) {
        for (int i = 2; i < argc; i++)
            lua_pushstring(L, argv[i]);
        rc = lua_pcall(L, argc - 2, 0, 0);
    }
    if (rc != LUA_OK)
        fprintf(stderr, "%s: %s\n", argv[0], lua_tostring(L, -1));
    lua_close(L);
    return rc == LUA_OK ? 0 : 1;
}
