/* SPDX-License-Identifier: MIT
 * state.c: the few operations on a client's shared state that both
 * threads use: which process owns it, losing, dropping and freeing holds.
 */
#define _GNU_SOURCE
#include "core/state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int dl_client_same_process(const dl_client *c)
{
    return c->pid == getpid();
}

void dl_client_lose(dl_client *c, dl_hold *h, const char *reason)
{
    if (h->lost)
        return;
    /* An explicit owner may be shared with other clients, which keep its
     * tenancy alive: this client's holds would stay counted in it (and
     * the lock held after every holder released). The watchdog DROPs
     * them, this client's count alone, in this tenancy alone (the token),
     * whatever the client does next. Its pending request is not among
     * them: it ends on its own (a release resent, an acquire cancelled).
     * Where Redis said the hold is gone, the DROP finds nothing, unless
     * this client joined the tenancy again meanwhile: so it takes nothing
     * out where a request sent after the loss ran (lib/drop.lua). A
     * coroutine's owner is this client's alone: its holds expire. On a
     * fair lock g = this requester marks a grant its client may not have
     * seen yet, which a fresh acquire adopts: the client's next fresh
     * acquire names the lost hold's token, so that it joins that tenancy
     * rather than adopt it (the DROP would take out what it adopted), and
     * the DROP clears g (fair_acquire.lua, fair_drop.lua). Sent once: a
     * DROP has no request id (should the connection resend it after a
     * reset, Redis takes out only this client's holds, lib/holder.lua,
     * and finds none the second time). */
    if (h->owner_num == 0 && h->count > 0 &&
        dl_registry_orphan_share(&c->reg, h, __atomic_load_n(&c->next_seq,
                                                   __ATOMIC_RELAXED)) != 0)
        dl_log_say(&c->log, DL_LOG_WARN, "%.*s: out of memory: this "
                   "client's lost holds stay until the lease runs out",
                   (int)h->ident.keylen, h->ident.key);
    dl_registry_mark_lost(&c->reg, h, reason);
    c->stats.lost++;
    dl_log_say(&c->log, DL_LOG_WARN, "%.*s: %s", (int)h->ident.keylen,
               h->ident.key,
               reason);
    __atomic_store_n(&c->pending, 1, __ATOMIC_RELEASE);
}

void dl_client_opts_free(dl_client_opts *o)
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

int dl_client_held_here(dl_client *c, const dl_lockref *l, int64_t until_us,
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

dl_status dl_client_not_held(dl_client *c, const dl_lockref *l, char *err,
                             size_t errlen)
{
    char whose[128];
    if (!dl_client_held_here(c, l, 0, whose, sizeof whose))
        return dl_fail(err, errlen, DL_ENOTHELD, "not held");
    return dl_fail(err, errlen, DL_ENOTHELD, "not held: %s (%s)", whose,
                   l->owner_num ? "owners are per coroutine; pass opts.owner "
                                  "to share" : "this lock object's owner "
                                               "holds nothing");
}

void dl_hold_lockref(const dl_hold *h, dl_lockref *l)
{
    memset(l, 0, sizeof *l);
    l->ident = h->ident;
    l->owner_num = h->owner_num;
    l->kind = h->kind;
}

int dl_client_drop_op(const dl_client *c, const dl_hold *h, dl_lockref *l,
                      dl_op *op)
{
    int64_t d = h->count > 0 && !h->lost ? dl_hold_counted(h) : 0;
    if (d <= 0)
        return 0;               /* a pending request is settled, not dropped */
    dl_hold_lockref(h, l);
    /* A coroutine's holds are this client's alone: any tenancy. */
    dl_op_drop(op, l, d, h->owner_num ? 0 : h->token, h->drop_after,
               c->opts.lease_ms, c->pubverb);
    return 1;
}

void dl_client_tidy(dl_client *c, dl_hold *h, int *unref)
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
