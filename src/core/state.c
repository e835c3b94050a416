/* SPDX-License-Identifier: MIT
 * state.c: the operations on a client's holds that more than one file
 * uses: which process owns the client, finding, counting out, dropping
 * and freeing holds, and who else of this client holds a lock (the
 * watchdog uses dl_state_drop_op and dl_state_lockref).
 */
#define _GNU_SOURCE
#include "core/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dl_state_same_process(const dl_client *c)
{
    return c->pid == getpid();
}

void dl_state_opts_free(dl_client_opts *o)
{
    for (size_t i = 0; o->eps && i < o->neps; i++)
        dl_endpoint_free(&o->eps[i]);
    free(o->eps);
    free(o->master);
    dl_endpoint_free(&o->tmpl);
    free(o->prefix);
    free(o->label);
    memset(o, 0, sizeof *o);
}

int dl_state_held_here(dl_client *c, const dl_lockref *l, int64_t until_us,
                       char *buf, size_t n)
{
    if (l->kind == DL_KIND_SEM)
        return 0;
    int64_t now = dl_now_us();
    dl_hold *h = dl_registry_other_owner(&c->reg, &l->ident, now,
                                         until_us > now ? until_us : now);
    if (!h)
        return 0;
    size_t on = h->ident.ownerlen;
    if (h->kind == DL_KIND_READ && on >= 2)
        on -= 2;                        /* its writer's: the owner's own */
    if (h->owner_num != 0)
        snprintf(buf, n, "held by another coroutine of this client");
    else
        snprintf(buf, n, "held by owner \"%.*s\" of this client",
                 on > 64 ? 64 : (int)on, h->ident.owner);
    return 1;
}

dl_status dl_state_not_held(dl_client *c, const dl_lockref *l, char *err,
                            size_t errlen)
{
    char whose[128];
    if (!dl_state_held_here(c, l, 0, whose, sizeof whose))
        return dl_fail(err, errlen, DL_ENOTHELD, "not held");
    return dl_fail(err, errlen, DL_ENOTHELD, "not held: %s (%s)", whose,
                   l->owner_num ? "owners are per coroutine; pass opts.owner "
                                  "to share" : "this lock object's owner "
                                               "holds nothing");
}

void dl_state_lockref(const dl_hold *h, dl_lockref *l)
{
    memset(l, 0, sizeof *l);
    l->ident = h->ident;
    l->owner_num = h->owner_num;
    l->kind = h->kind;
}

int dl_state_drop_op(const dl_client *c, const dl_hold *h, dl_lockref *l,
                     dl_op *op)
{
    int64_t d = h->count > 0 && !h->lost ? dl_hold_counted(h) : 0;
    if (d <= 0)
        return 0;               /* a pending request is settled, not dropped */
    dl_state_lockref(h, l);
    /* A coroutine's holds are this client's alone: any tenancy. */
    dl_op_drop(op, l, d, h->owner_num ? 0 : h->token, h->drop_after,
               c->opts.lease_ms, c->pubverb);
    return 1;
}

dl_status dl_state_holding(dl_client *c, const dl_lockref *l,
                           int64_t *token, int64_t *since_us, char *err,
                           size_t errlen)
{
    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    int held = h && h->count > 0;
    const char *lost = held ? h->lost : NULL;
    *token = held ? h->token : 0;
    *since_us = held ? h->acquired_us : 0;
    dl_status st = *token ? DL_OK : dl_state_not_held(c, l, err, errlen);
    pthread_mutex_unlock(&c->mu);
    if (st == DL_OK && lost)
        st = dl_fail(err, errlen, DL_ELOST, "%s", lost);
    return st;
}

void dl_state_count_out(dl_hold *h, int local)
{
    if (local)
        h->local--;
    h->count--;
    if (h->local > h->count)
        h->local = h->count;
}

void dl_state_tidy(dl_client *c, dl_hold *h, int *unref)
{
    if (h->count > 0 || h->pend != DL_PEND_NONE || h->pend_lua)
        return;
    if (*unref == DL_NOREF)
        *unref = h->ref;
    else if (h->ref != DL_NOREF)
        dl_registry_push_event(&c->reg, h->ref, NULL);
    h->ref = DL_NOREF;
    dl_registry_remove(&c->reg, h);
}

dl_hold *dl_state_hold(dl_client *c, const dl_lockref *l, int create,
                       dl_status *st, char *err, size_t errlen)
{
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    *st = DL_OK;
    if (h || !create)
        return h;
    h = dl_registry_add(&c->reg, &l->ident);
    if (!h)
        *st = dl_oom(err, errlen);
    else
        h->kind = l->kind;
    return h;
}

unsigned char *dl_state_form_hint(dl_client *c, const dl_lockref *l)
{
    uint32_t x = 2166136261u;           /* FNV-1a of the key */
    for (size_t i = 0; i < l->ident.keylen; i++)
        x = (x ^ (unsigned char)l->ident.key[i]) * 16777619u;
    return &c->hashed[x % DL_FORM_HINTS];
}
