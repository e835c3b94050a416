/* SPDX-License-Identifier: MIT
 * notice.c: the watchdog's subscriptions to the notice channel, and the
 * early pass a forced release asks for (notice.h).
 */
#define _GNU_SOURCE
#include "core/notice.h"
#include "core/lease.h"
#include "redis/exec.h"

#include <stdlib.h>
#include <string.h>

int dl_notice_heard_forced(dl_client *c, dl_notices *ear, const dl_hold *h)
{
    for (size_t i = 0; i < ear->nplaces; i++) {
        dl_listener *l = ear->listen[i];
        dl_waiter *wp = l && l->init ? &l->sub : NULL;
        if (!wp)
            continue;
        size_t live;
        uint64_t n = dl_waiter_count(&wp, 1, c->notice, c->noticelen, &live);
        if (n != l->count) {                /* as wait_until would have */
            l->count = n;
            ear->forced_wanted = 1;
        }
        if (dl_waiter_heard(&wp, 1, c->notice, c->noticelen,
                                  h->ident.key, h->ident.keylen,
                                  h->acquired_us))
            return 1;
    }
    return 0;
}

static int same_place(const dl_endpoint *a, const dl_endpoint *b)
{
    return a->port == b->port &&
           !strcmp(a->host ? a->host : "", b->host ? b->host : "") &&
           !strcmp(a->path ? a->path : "", b->path ? b->path : "");
}

void dl_notice_free(dl_listener *l)
{
    if (l && l->init)
        dl_waiter_free(&l->sub);
    free(l);
}

/* Whether l (NULL: not made yet) has a live connection. */
static int connected(const dl_listener *l)
{
    return l && l->init && l->sub.conn.ctx;
}

int dl_notice_due(const dl_notices *ear, int64_t now)
{
    if (ear->nplaces == 0)
        return 1;
    for (size_t i = 0; i < ear->nplaces; i++) {
        const dl_listener *l = ear->listen[i];
        if (!connected(l) && (!l || now >= l->retry_us))
            return 1;
    }
    return 0;
}

int64_t dl_notice_retry_at(const dl_notices *ear)
{
    int64_t at = INT64_MAX;
    for (size_t i = 0; i < ear->nplaces; i++) {
        const dl_listener *l = ear->listen[i];
        if (l && !connected(l) && l->retry_us < at)
            at = l->retry_us;
    }
    return at;
}

int dl_notice_fd(dl_client *c, dl_notices *ear, size_t i, int *fresh,
                 int *tried)
{
    const dl_endpoint *ep = &ear->places[i];
    char err[DL_ERRLEN];
    size_t live;
    if (!ear->listen[i] &&
        !(ear->listen[i] = calloc(1, sizeof *ear->listen[i])))
        return -1;
    dl_listener *l = ear->listen[i];
    if (l->init && !same_place(&l->sub.conn.ep, ep)) {
        dl_waiter_free(&l->sub);            /* the place moved */
        l->init = 0;
    }
    if (l->init && dl_waiter_subscribed(&l->sub, c->notice, c->noticelen))
        return l->sub.conn.ctx ? l->sub.conn.ctx->fd : -1;
    if (dl_now_us() < l->retry_us || *tried)
        return -1;
    if (!ep->host && !ep->path) {           /* no address yet */
        l->missed = 1;
        l->retry_us = dl_now_us() + 1000000;
        return -1;
    }
    if (!l->init)
        l->init = dl_waiter_init(&l->sub, ep, c->topo.wd_timeout_us, 0) == 0;
    if (!l->init ||
        dl_waiter_subscribe(&l->sub, c->notice, c->noticelen, err,
                            sizeof err) != DL_OK) {
        l->backoff_us = l->backoff_us
            ? (l->backoff_us < 30000000 ? 2 * l->backoff_us : 60000000)
            : 1000000;
        l->retry_us = dl_now_us() + l->backoff_us;
        l->missed = 1;
        *tried = 1;
        return -1;
    }
    l->backoff_us = 0;
    dl_waiter *wp = &l->sub;
    l->count = dl_waiter_count(&wp, 1, c->notice, c->noticelen, &live);
    if (l->was_up || l->missed)         /* down a while: one was missed? */
        *fresh = 1;
    l->was_up = 1;
    l->missed = 0;
    return l->sub.conn.ctx ? l->sub.conn.ctx->fd : -1;
}

void dl_notice_find_places(dl_client *c, dl_notices *ear)
{
    pthread_mutex_unlock(&c->mu);
    dl_sentinel_wd_resolve(&c->topo.sentinel);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < ear->nplaces; i++)
        dl_endpoint_free(&ear->places[i]);
    ear->nplaces = dl_topology_wd_listen_at(&c->topo, ear->places,
                                          DL_MAX_NODES);
    for (size_t i = ear->nplaces; i < DL_MAX_NODES; i++) {
        dl_notice_free(ear->listen[i]);        /* a place no longer */
        ear->listen[i] = NULL;
    }
}

void dl_notice_forced_pass(dl_client *c, dl_notices *ear)
{
    int64_t now = dl_now_us();
    if (!ear->forced_wanted || now < ear->forced_us + DL_FORCED_GAP_US)
        return;
    ear->forced_wanted = 0;
    ear->forced_us = now;
    dl_hold *h;
    for (DL_REGISTRY_EACH(&c->reg, i, h)) {
        if (h->lost || h->count <= 0)
            continue;
        if (!h->watchdog || h->final)
            h->check = 1;
        else if (h->renew_at_us > now)
            dl_lease_renew_now(h, now);
    }
}
