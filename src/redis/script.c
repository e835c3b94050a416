/* SPDX-License-Identifier: MIT
 * script.c: dlock's Redis scripts in the core: loading them on each
 * connection, and EVALSHA. The scripts themselves are files, one per
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

/* SCRIPT LOAD every script on c with one pipelined round trip. With
 * fill, record the SHAs there; else check them against known. */
static dl_status load_on(dl_conn *c, dl_scripts *fill, const dl_scripts *known,
                         char *err, size_t errlen)
{
    dl_status io;
    for (int i = 0; i < DL_S_COUNT; i++) {
        const char *argv[3] = { "SCRIPT", "LOAD", dl_script_texts[i] };
        if ((io = dl_conn_append(c, 3, argv, NULL, err, errlen)) != DL_OK)
            return io;
    }
    dl_status st = DL_OK;
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
    if (st == DL_OK)
        dl_conn_note_scripts(c);
    return st;
}

dl_status dl_script_load(dl_conn *c, dl_scripts *s, char *err, size_t errlen)
{
    dl_status st = load_on(c, s, NULL, err, errlen);
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
    return load_on(c, NULL, s, err, errlen);
}

/* The head of call's argv: EVALSHA, the SHA, numkeys (written in nk). */
static void fill_head(const dl_scripts *s, const dl_call *call, char *nk,
                      size_t nksz)
{
    snprintf(nk, nksz, "%d", call->nkeys);
    call->argv[0] = "EVALSHA";
    call->lens[0] = 7;
    call->argv[1] = s->sha[call->id];
    call->lens[1] = 40;
    call->argv[2] = nk;
    call->lens[2] = strlen(nk);
}

int dl_script_noscript(const redisReply *r)
{
    return r->type == REDIS_REPLY_ERROR && strncmp(r->str, "NOSCRIPT", 8) == 0;
}

dl_status dl_script_append(dl_conn *c, const dl_scripts *s,
                           const dl_call *call, char *err, size_t errlen)
{
    char nk[16];
    dl_status st;
    if ((st = dl_script_ready(c, s, 0, err, errlen)) != DL_OK)
        return st;
    fill_head(s, call, nk, sizeof nk);
    return dl_conn_append(c, call->argc, call->argv, call->lens, err, errlen);
}

/* ASKING (if asked) or the call's lead, and one EVALSHA; the reply as it
 * came. ASKING must come right before the script: no lead then. */
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
    fill_head(s, call, nk, sizeof nk);
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
        /* The server lost them (SCRIPT FLUSH, a restart we did not see):
         * load them again and resend, ASKING included. */
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
