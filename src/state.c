/* SPDX-License-Identifier: MIT
 * state.c: the few operations on a client's shared state that both
 * threads use: which process owns it, losing a hold, dropping holds.
 */
#define _GNU_SOURCE
#include "state.h"

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
    dl_registry_mark_lost(&c->reg, h, reason);
    c->stats.lost++;
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
    memset(o, 0, sizeof *o);
}

int dl_client_drop_args(const dl_client *c, const dl_hold *h,
                        const char **argv, size_t *lens, char bufs[3][24])
{
    char *count_s = bufs[0], *tok_s = bufs[1], *keep_s = bufs[2];
    int64_t d = h->count > 0 && !h->lost ? h->count : 0;
    if (d <= 0)
        return 0;               /* a pending request is settled, not dropped */
    snprintf(count_s, 24, "%lld", (long long)d);
    snprintf(tok_s, 24, "%lld", h->owner_num ? 0LL : (long long)h->token);
    snprintf(keep_s, 24, "%lld", (long long)c->opts.lease_ms);
    argv[3] = h->key;   lens[3] = h->keylen;
    argv[4] = h->owner; lens[4] = h->ownerlen;
    argv[5] = count_s;  lens[5] = strlen(count_s);
    argv[6] = tok_s;    lens[6] = strlen(tok_s);
    argv[7] = keep_s;   lens[7] = strlen(keep_s);
    argv[8] = h->chan;  lens[8] = h->chanlen;
    argv[9] = c->pubverb; lens[9] = strlen(c->pubverb);
    return 1;
}
