/* SPDX-License-Identifier: MIT
 * script.c: dlock's Redis scripts in the core: loading them on each
 * connection (as a function library where the server takes one), and
 * FCALL or EVALSHA. The scripts themselves are files, one per
 * script, in src/redis/scripts/ (their README.md has the data model they
 * share); tools/gen-scripts.lua puts them, and the layout of each one's
 * KEYS and ARGV, into the generated scripts.h.
 */
/* scripts.h's data (the texts, the layouts), defined once: here. */
#define DL_SCRIPT_DATA
#include "redis/script.h"

#include <stdio.h>
#include <string.h>

const char *dl_script_source(dl_script_id id, const char **name)
{
    *name = dl_script_layouts[id].name;
    return dl_script_texts[id];
}

const dl_script_layout *dl_script_layout_of(dl_script_id id)
{
    return &dl_script_layouts[id];
}

const char *dl_script_library_text(void)
{
    return dl_script_library;
}

const char *dl_script_function(dl_script_id id)
{
    return dl_script_functions[id];
}

/* FUNCTION LOAD's reply r says the library is there: loaded now, or by
 * an earlier client of the same scripts (the name is a hash of them). */
static int library_there(const redisReply *r)
{
    return r->type == REDIS_REPLY_STRING ||
           (r->type == REDIS_REPLY_ERROR &&
            strncmp(r->str, "ERR Library '", 13) == 0 &&
            strstr(r->str, "' already exists") != NULL);
}

static dl_status append_script_loads(dl_conn *c, char *err, size_t errlen)
{
    dl_status io = DL_OK;
    for (int i = 0; i < DL_S_COUNT && io == DL_OK; i++) {
        const char *argv[3] = { "SCRIPT", "LOAD", dl_script_texts[i] };
        io = dl_conn_append(c, 3, argv, NULL, err, errlen);
    }
    return io;
}

/* The replies of append_script_loads. With fill, record the SHAs there;
 * else check them against known. */
static dl_status read_script_loads(dl_conn *c, dl_scripts *fill,
                                   const dl_scripts *known, char *err,
                                   size_t errlen)
{
    dl_status io, st = DL_OK;
    for (int i = 0; i < DL_S_COUNT; i++) {
        redisReply *r;
        if ((io = dl_conn_read(c, &r, err, errlen)) != DL_OK)
            return io;
        if (st == DL_OK && r->type == REDIS_REPLY_ERROR)
            st = dl_reply_error(r, err, errlen);
        else if (st == DL_OK && (r->type != REDIS_REPLY_STRING || r->len != 40
                                 || (known && memcmp(known->sha[i], r->str,
                                                     40) != 0)))
            st = dl_fail(err, errlen, DL_EREDIS, "SCRIPT LOAD: bad reply");
        else if (st == DL_OK && fill)
            memcpy(fill->sha[i], r->str, 41);
        freeReplyObject(r);
    }
    return st;
}

/* Load the scripts on c with one pipelined round trip: the library, if
 * s->functions, and (with fill, or where the server took no library)
 * every script with SCRIPT LOAD. A server that refuses the library (no
 * FUNCTION before Redis 7, an ACL, a replica, out of memory) gets EVALSHA
 * on this connection: any refusal but a lost connection. */
static dl_status load_on(dl_conn *c, const dl_scripts *s, dl_scripts *fill,
                         char *err, size_t errlen)
{
    dl_status io;
    int fcall = 0;
    if (s->functions) {
        const char *argv[3] = { "FUNCTION", "LOAD", dl_script_library };
        if ((io = dl_conn_append(c, 3, argv, NULL, err, errlen)) != DL_OK)
            return io;
    }
    if (fill && (io = append_script_loads(c, err, errlen)) != DL_OK)
        return io;
    if (s->functions) {
        redisReply *r;
        if ((io = dl_conn_read(c, &r, err, errlen)) != DL_OK)
            return io;
        fcall = library_there(r);
        if (!fcall)
            dl_log_say(c->log, DL_LOG_INFO, "%s connection: the server "
                       "refused dlock's function library (%s): EVALSHA on it",
                       c->role ? c->role : "a",
                       r->type == REDIS_REPLY_ERROR ? r->str : "a bad reply");
        freeReplyObject(r);
    }
    dl_status st = DL_OK;
    if (fill)
        st = read_script_loads(c, fill, NULL, err, errlen);
    else if (!fcall && (st = append_script_loads(c, err, errlen)) == DL_OK)
        st = read_script_loads(c, NULL, s, err, errlen);
    if (st == DL_OK)
        dl_conn_note_scripts(c, fcall);
    return st;
}

dl_status dl_script_load(dl_conn *c, dl_scripts *s, char *err, size_t errlen)
{
    dl_status st = load_on(c, s, s, err, errlen);
    s->loaded = st == DL_OK;
    return st;
}

dl_status dl_script_ready(dl_conn *c, const dl_scripts *s, int again,
                          char *err, size_t errlen)
{
    dl_status st;
    if ((st = dl_conn_ensure(c, err, errlen)) != DL_OK)
        return st;
    if (!again && dl_conn_has_scripts(c))
        return DL_OK;
    return load_on(c, s, NULL, err, errlen);
}

/* The head of call's argv on c: FCALL and the function, or EVALSHA and
 * the SHA; numkeys (written in nk). */
static void fill_head(const dl_conn *c, const dl_scripts *s,
                      const dl_call *call, char *nk, size_t nksz)
{
    snprintf(nk, nksz, "%d", call->nkeys);
    if (dl_conn_fcall(c)) {
        call->argv[0] = "FCALL";
        call->argv[1] = dl_script_functions[call->id];
    } else {
        call->argv[0] = "EVALSHA";
        call->argv[1] = s->sha[call->id];
    }
    call->lens[0] = strlen(call->argv[0]);
    call->lens[1] = strlen(call->argv[1]);
    call->argv[2] = nk;
    call->lens[2] = strlen(nk);
}

int dl_script_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR &&
           (strncmp(r->str, "NOSCRIPT", 8) == 0 ||
            strcmp(r->str, "ERR Function not found") == 0);
}

dl_status dl_script_append(dl_conn *c, const dl_scripts *s,
                           const dl_call *call, char *err, size_t errlen)
{
    char nk[16];
    dl_status st;
    if ((st = dl_script_ready(c, s, 0, err, errlen)) != DL_OK)
        return st;
    fill_head(c, s, call, nk, sizeof nk);
    return dl_conn_append(c, call->argc, call->argv, call->lens, err, errlen);
}

/* ASKING (if asked) or the call's lead, and one FCALL or EVALSHA; the
 * reply as it came. ASKING must come right before the script: no lead then. */
static dl_status call_once(dl_conn *c, const dl_scripts *s,
                           const dl_call *call, int asking, redisReply **out,
                           char *err, size_t errlen)
{
    char nk[16];
    dl_status st;
    if (asking) {
        const char *a[1] = { "ASKING" };
        if ((st = dl_conn_call(c, 1, a, NULL, out, err, errlen)) != DL_OK)
            return st;
        freeReplyObject(*out);
    }
    fill_head(c, s, call, nk, sizeof nk);
    return dl_conn_call_led(c, asking ? NULL : call->lead, call->argc,
                            call->argv, call->lens, out, err, errlen);
}

dl_status dl_script_eval(dl_conn *c, const dl_scripts *s, const dl_call *call,
                         int asking, redisReply **out, char *err,
                         size_t errlen)
{
    *out = NULL;
    dl_status st;
    if ((st = dl_script_ready(c, s, 0, err, errlen)) != DL_OK)
        return st;
    st = call_once(c, s, call, asking, out, err, errlen);
    if (st == DL_OK && dl_script_noscript(*out)) {
        /* The server lost them (SCRIPT or FUNCTION FLUSH, a restart we
         * did not see): load them again and resend, ASKING included. */
        freeReplyObject(*out);
        *out = NULL;
        if ((st = dl_script_ready(c, s, 1, err, errlen)) != DL_OK)
            return st;
        st = call_once(c, s, call, asking, out, err, errlen);
    }
    if (st == DL_OK && (*out)->type == REDIS_REPLY_ERROR) {
        st = dl_reply_error(*out, err, errlen);
        freeReplyObject(*out);
        *out = NULL;
    }
    return st;
}
