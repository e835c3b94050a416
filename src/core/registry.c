/* SPDX-License-Identifier: MIT
 * registry.c: a chained hash of holds keyed by (lock key, owner), a list
 * of all holds for the watchdog to walk, and two hand-off queues.
 *
 * DESIGN. Holds are freed on the Lua thread, except one that was removed
 * while a renewal of it was in flight: the watchdog owns a pointer to it
 * until the reply is in, so removal only marks it dead and the watchdog
 * frees it when it records the result. Orphans (holds of a collected
 * coroutine) are unlinked on the Lua thread and handed whole to the
 * watchdog, which releases them in Redis and frees them; so are copies
 * of a lost hold of an explicit owner (lost.c: dl_lost_mark), made by
 * either thread under the mutex, whose holds another client of that
 * owner could otherwise keep alive in Redis. Notices for the
 * Lua thread carry a Lua reference as a plain int; nothing here knows Lua.
 */
#include "core/registry.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash(const char *key, size_t keylen,
                     const char *owner, size_t ownerlen)
{
    uint64_t h = UINT64_C(1469598103934665603);
    for (size_t i = 0; i < keylen; i++)
        h = (h ^ (unsigned char)key[i]) * UINT64_C(1099511628211);
    h = (h ^ 0xff) * UINT64_C(1099511628211);
    for (size_t i = 0; i < ownerlen; i++)
        h = (h ^ (unsigned char)owner[i]) * UINT64_C(1099511628211);
    return h;
}

int dl_registry_init(dl_registry *reg)
{
    memset(reg, 0, sizeof *reg);
    reg->nbuckets = 64;
    reg->buckets = calloc(reg->nbuckets, sizeof *reg->buckets);
    reg->next_id = 1;
    return reg->buckets ? 0 : -1;
}

void dl_registry_free(dl_registry *reg)
{
    dl_hold *h, *next;
    for (size_t i = 0; i < reg->count; i++)
        free(reg->all[i]);
    for (h = reg->orphans; h; h = next) {
        next = h->onext;
        free(h);
    }
    free(reg->buckets);
    free(reg->all);
    free(reg->events);
    memset(reg, 0, sizeof *reg);
}

static dl_hold **bucket(dl_registry *reg, const char *key, size_t keylen,
                        const char *owner, size_t ownerlen)
{
    return &reg->buckets[hash(key, keylen, owner, ownerlen) &
                         (reg->nbuckets - 1)];
}

dl_hold *dl_registry_find(dl_registry *reg, const dl_lockid *d)
{
    dl_hold *h = *bucket(reg, d->key, d->keylen, d->owner, d->ownerlen);
    for (; h; h = h->hnext)
        if (h->ident.keylen == d->keylen && h->ident.ownerlen == d->ownerlen &&
            memcmp(h->ident.key, d->key, d->keylen) == 0 &&
            memcmp(h->ident.owner, d->owner, d->ownerlen) == 0)
            return h;
    return NULL;
}

/* An owner without a read half's "\0r". */
static size_t owner_len(const char *owner, size_t n)
{
    return n >= 2 && owner[n - 2] == '\0' && owner[n - 1] == 'r' ? n - 2 : n;
}

dl_hold *dl_registry_other_owner(dl_registry *reg, const dl_lockid *d,
                                 int64_t now, int64_t until)
{
    size_t on = owner_len(d->owner, d->ownerlen);
    dl_hold *h;
    for (DL_REGISTRY_EACH(reg, i, h)) {
        size_t hn = owner_len(h->ident.owner, h->ident.ownerlen);
        int lasts = (h->watchdog && !h->final) || h->deadline_us >= until;
        if (h->kind != DL_KIND_SEM && h->count > 0 && !h->lost &&
            now < h->deadline_us && lasts && h->ident.keylen == d->keylen &&
            memcmp(h->ident.key, d->key, d->keylen) == 0 &&
            (hn != on || memcmp(h->ident.owner, d->owner, on) != 0))
            return h;
    }
    return NULL;
}

static void grow(dl_registry *reg)
{
    size_t n = reg->nbuckets * 2;
    dl_hold **b = calloc(n, sizeof *b);
    if (!b)
        return;                 /* keep the longer chains; still correct */
    for (size_t i = 0; i < reg->count; i++) {
        dl_hold *h = reg->all[i];
        dl_hold **slot = &b[hash(h->ident.key, h->ident.keylen,
                                 h->ident.owner, h->ident.ownerlen) &
                            (n - 1)];
        h->hnext = *slot;
        *slot = h;
    }
    free(reg->buckets);
    reg->buckets = b;
    reg->nbuckets = n;
}

static const char *put(char **p, const char *s, size_t n)
{
    char *at = *p;
    memcpy(at, s, n);
    at[n] = '\0';
    *p += n + 1;
    return at;
}

/* A new unlinked hold with count 0 and copies of the strings, shared
 * where they repeat (100,000 holds: doc/performance.md): the key is the
 * start of the channel's name (P{name}:ch...: there it is not
 * NUL-terminated, and nothing here needs it to be), and a coroutine owner
 * is its own requester. */
static dl_hold *alloc_hold(const dl_lockid *d)
{
    int one = d->req == d->owner;
    int inchan = d->chanlen > d->keylen &&
                 memcmp(d->chan, d->key, d->keylen) == 0;
    dl_hold *h = calloc(1, sizeof *h + (inchan ? 0 : d->keylen + 1) +
                               d->fencelen + d->chanlen + d->ownerlen +
                               (one ? 0 : d->reqlen + 1) + d->queuelen + 4);
    if (!h)
        return NULL;
    char *p = (char *)(h + 1);
    dl_lockid *c = &h->ident;
    *c = *d;                            /* the lengths; the strings: */
    c->fence = put(&p, d->fence, d->fencelen);
    c->chan = put(&p, d->chan, d->chanlen);
    c->key = inchan ? c->chan : put(&p, d->key, d->keylen);
    c->owner = put(&p, d->owner, d->ownerlen);
    c->req = one ? c->owner : put(&p, d->req, d->reqlen);
    c->queue = put(&p, d->queue ? d->queue : "", d->queuelen);
    h->ref = DL_NOREF;
    return h;
}

dl_hold *dl_registry_add(dl_registry *reg, const dl_lockid *ident)
{
    if (reg->count >= reg->nbuckets)
        grow(reg);
    if (reg->count == reg->capall) {
        size_t cap = reg->capall ? 2 * reg->capall : 64;
        dl_hold **all = realloc(reg->all, cap * sizeof *all);
        if (!all)
            return NULL;
        reg->all = all;
        reg->capall = cap;
    }
    dl_hold *h = alloc_hold(ident);
    if (!h)
        return NULL;
    h->id = reg->next_id++;
    dl_hold **slot = bucket(reg, ident->key, ident->keylen, ident->owner,
                            ident->ownerlen);
    h->hnext = *slot;
    *slot = h;
    h->at = reg->count;
    reg->all[reg->count++] = h;
    return h;
}

void dl_registry_unlink(dl_registry *reg, dl_hold *h)
{
    dl_hold **slot = bucket(reg, h->ident.key, h->ident.keylen,
                            h->ident.owner, h->ident.ownerlen);
    while (*slot != h)
        slot = &(*slot)->hnext;
    *slot = h->hnext;
    h->hnext = NULL;
    dl_hold *last = reg->all[--reg->count];  /* the last takes its place */
    reg->all[h->at] = last;
    last->at = h->at;
}

void dl_registry_remove(dl_registry *reg, dl_hold *h)
{
    dl_registry_unlink(reg, h);
    if (h->inflight)
        h->dead = 1;
    else
        free(h);
}

int dl_registry_push_event(dl_registry *reg, int ref, const char *reason)
{
    if (reg->nevents == reg->capevents) {
        size_t cap = reg->capevents ? reg->capevents * 2 : 16;
        dl_event *e = realloc(reg->events, cap * sizeof *e);
        if (!e)
            return -1;
        reg->events = e;
        reg->capevents = cap;
    }
    reg->events[reg->nevents].ref = ref;
    reg->events[reg->nevents].reason = reason;
    reg->nevents++;
    return 0;
}

size_t dl_registry_orphan(dl_registry *reg, uint64_t owner_num)
{
    size_t moved = 0;
    dl_hold *h;
    for (DL_REGISTRY_EACH(reg, i, h)) {
        if (h->owner_num != owner_num)
            continue;
        if (h->ref != DL_NOREF && dl_registry_push_event(reg, h->ref, NULL) == 0)
            h->ref = DL_NOREF;
        dl_registry_unlink(reg, h);
        if (h->inflight) {
            h->dead = 1;        /* the watchdog frees it; it expires */
            continue;
        }
        h->onext = reg->orphans;
        reg->orphans = h;
        moved++;
    }
    return moved;
}

int dl_registry_orphan_share(dl_registry *reg, const dl_hold *h,
                             uint64_t after)
{
    dl_hold *o = alloc_hold(&h->ident);
    if (!o)
        return -1;
    o->id = reg->next_id++;
    o->kind = h->kind;
    o->owner_num = h->owner_num;
    o->count = dl_hold_counted(h);
    o->token = h->token;
    o->drop_after = after;
    o->onext = reg->orphans;
    reg->orphans = o;
    return 0;
}
