/* SPDX-License-Identifier: MIT
 * command.c: the user's own commands, through the client's connections and
 * routing (Cluster slot, Sentinel master, TLS, reconnects, the command
 * timeout): client:call, and lock:guard, which runs one only while a hold
 * is still its lock's current tenancy (src/redis/scripts/guard.lua).
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "core/lost.h"
#include "redis/exec.h"

#include <stdlib.h>
#include <string.h>

#define LOST_GUARD "lost: the lock is no longer this hold's (it expired, " \
                   "or was freed or taken): the command did not run"

dl_status dl_command_call(dl_client *c, int argc, const char **argv,
                          size_t *lens, redisReply **out, char *err,
                          size_t errlen)
{
    dl_client_enter(c);
    dl_op op;
    dl_result res;
    *out = NULL;
    if (dl_client_fans_out(c))          /* one reply is kept: one server */
        return dl_fail(err, errlen, DL_EREDIS, "call: not on Redlock");
    dl_op_command(&op, argc > 1 ? argv[1] : "", argc > 1 ? lens[1] : 0,
                  argc, argv, lens, out);
    dl_status st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    if (st != DL_OK && *out) {
        freeReplyObject(*out);
        *out = NULL;
    }
    return st;
}

int dl_command_same_slot(dl_client *c, const dl_lockref *l, const char *key,
                         size_t keylen)
{
    return dl_exec_same_node(&c->topo, l->ident.key, l->ident.keylen, key,
                             keylen);
}

dl_status dl_command_guard(dl_client *c, const dl_lockref *l, int argc,
                           const char **argv, const size_t *lens,
                           redisReply **out, char *err, size_t errlen)
{
    dl_client_enter(c);
    *out = NULL;
    if (dl_client_fans_out(c))          /* one reply is kept: one server */
        return dl_fail(err, errlen, DL_EREDIS, "guard: not on Redlock");
    int64_t token, since;
    dl_status held = dl_state_holding(c, l, &token, &since, err, errlen);
    if (held != DL_OK)
        return held;

    const char **x = malloc(sizeof *x * (size_t)(DL_OP_GUARD_HEAD + argc));
    size_t *xl = malloc(sizeof *xl * (size_t)(DL_OP_GUARD_HEAD + argc));
    dl_status st;
    if (!x || !xl) {
        st = dl_oom(err, errlen);
    } else {
        dl_op op;
        dl_result res;
        /* On Cluster the command's key (the binding checked that it is
         * in the lock's slot) is the script's too: Redis then refuses it
         * while a migration has the two keys apart (guard.lua). */
        int by_key = argc > 1 && dl_exec_by_slot(&c->topo);
        dl_guarded g = { token, argc, argv, lens,
                         by_key ? argv[1] : l->ident.key,
                         by_key ? lens[1] : l->ident.keylen, x, xl, out };
        dl_op_guard(&op, l, &g);
        st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    }
    free(x);
    free(xl);
    if (st == DL_OK)
        return DL_OK;
    if (*out) {
        freeReplyObject(*out);
        *out = NULL;
    }
    if (DL_SHOWN_AS(st) != DL_EREDIS || strncmp(err, "DLOCKLOST", 9) != 0)
        return st;
    /* the hold is gone in Redis: so it is here, if nothing changed since */
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    if (h && h->count > 0 && !h->lost && h->token == token)
        dl_lost_mark(c, h, LOST_GONE);
    pthread_mutex_unlock(&c->mu);
    return dl_fail(err, errlen, DL_ELOST, LOST_GUARD);
}
