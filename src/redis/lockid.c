/* SPDX-License-Identifier: MIT
 * lockid.c: a lock's identity (lockid.h): its keys, owner and requester,
 * built here and nowhere else.
 */
#include "redis/lockid.h"
#include "redis/slot.h"

#include <stdio.h>
#include <ctype.h>
#include <string.h>

/* A queued kind: its channel is its client's own, and it has a queue. */
static int queued(int kind)
{
    return kind == DL_KIND_SEM || kind == DL_KIND_FAIR;
}

static int has_queue(int kind)
{
    return queued(kind) || kind == DL_KIND_ANY;
}

/* Copy a, b and c to p, NUL-terminated; returns the byte after the NUL. */
static char *put(char *p, const char *a, size_t alen, const char *b,
                 size_t blen, const char *c, size_t clen)
{
    memcpy(p, a, alen);
    memcpy(p + alen, b, blen);
    memcpy(p + alen + blen, c, clen);
    p[alen + blen + clen] = '\0';
    return p + alen + blen + clen + 1;
}

#define TAG_MAX 24                      /* "{tag}:fence" */

/* Between the braces of a lock's key P{...} is its name, or ESC + name.
 * Redis Cluster hashes only what comes before the first "}" after the
 * "{" (the whole key when that is empty), so a name that starts with "}"
 * would give an empty hash tag, and its lock, queue and channels three
 * slots. Such a name, and one that starts with ESC, is written ESC +
 * name: P{\1}x} for the name "}x", whose hash tag is ESC alone (every
 * escaped name hashes to that one slot).
 * - The hash tag is never empty: an escaped name's starts with ESC; any
 *   other name has a first byte that is not "}".
 * - The map is injective, so no two names share keys: what an escaped
 *   name writes between the braces starts with ESC, an unescaped one's
 *   never does (a name that starts with ESC is escaped); two escaped ones
 *   are ESC + two names, equal only when the names are.
 * - Only the keys of names that start with "}" (broken on Cluster) or
 *   with ESC (a control byte) differ from plain P{name}: every other
 *   name keeps its keys, those that clients already running use.
 * dl_lockid_name reads the name back by dropping a leading ESC. */
#define ESC '\1'

static size_t escaped(const char *name, size_t namelen)
{
    return namelen == 0 || name[0] == '}' || name[0] == ESC;
}

size_t dl_lockid_size(size_t pl, size_t namelen, int kind,
                      const char *client_id, size_t ownerlen)
{
    size_t keylen = pl + 1 + namelen + 2, idlen = strlen(client_id);
    size_t rd = kind == DL_KIND_READ ? 2 : 0;
    return keylen + 1 +                                   /* key */
           pl + TAG_MAX + 1 +                             /* fence */
           keylen + 4 + (queued(kind) ? idlen : 0) + 1 +  /* chan */
           (has_queue(kind) ? keylen + 2 : 0) + 1 +       /* queue */
           (ownerlen ? ownerlen + rd + 1 +                /* owner */
                       idlen + 1 + ownerlen + rd + 1 : 0);/* req */
}

void dl_lockid_build(dl_lockid *d, char *buf, const dl_lockid_spec *s)
{
    const char *prefix = s->prefix, *name = s->name, *owner = s->owner;
    const char *client_id = s->client_id;
    size_t pl = s->pl, namelen = s->namelen, ownerlen = s->ownerlen;
    int kind = s->kind;
    char *p = buf;
    size_t esc = escaped(name, namelen);
    size_t keylen = pl + esc + namelen + 2, idlen = strlen(client_id);
    int q = queued(kind);
    d->key = p;                         /* P{name}, or P{\1name} */
    p = put(p, prefix, pl, "{\1", 1 + esc, name, namelen);
    p[-1] = '}';
    *p++ = '\0';
    d->keylen = keylen;
    char tag[TAG_MAX] = "{";            /* the counter of the lock's slot */
    size_t taglen = 1 + (size_t)dl_slot_tag(dl_slot_of(d->key, keylen),
                                            tag + 1, sizeof tag - 8);
    memcpy(tag + taglen, "}:fence", 7);
    taglen += 7;
    d->fence = p;                       /* P{tag}:fence */
    p = put(p, prefix, pl, tag, taglen, "", 0);
    d->fencelen = pl + taglen;
    d->chan = p;                        /* P{name}:ch, or P{name}:ch:<id> */
    p = put(p, d->key, keylen, ":ch:", q ? 4 : 3, q ? client_id : "",
            q ? idlen : 0);
    d->chanlen = keylen + 3 + (q ? 1 + idlen : 0);
    int hq = has_queue(kind);
    d->queue = p;                       /* P{name}:q, or "" */
    p = put(p, d->key, hq ? keylen : 0, ":q", hq ? 2 : 0, "", 0);
    d->queuelen = hq ? keylen + 2 : 0;
    d->owner = d->req = NULL;
    d->ownerlen = d->reqlen = 0;
    if (!owner || !ownerlen)            /* coroutine owners: per call */
        return;
    size_t rd = kind == DL_KIND_READ ? 2 : 0;   /* "\0r" */
    d->owner = p;
    p = put(p, owner, ownerlen, "\0r", rd, "", 0);
    d->ownerlen = ownerlen + rd;
    d->req = p;                         /* <client id>|<owner> */
    p = put(p, client_id, idlen, "|", 1, d->owner, d->ownerlen);
    d->reqlen = idlen + 1 + d->ownerlen;
}

size_t dl_lockid_caller(char *buf, const char *client_id, uint64_t n,
                        int kind, char *wbuf, size_t *wlen)
{
    int len = snprintf(buf, DL_OWNER_MAX, "%s:%llu", client_id,
                       (unsigned long long)n);
    if (kind != DL_KIND_READ)
        return (size_t)len;
    if (wbuf) {
        memcpy(wbuf, buf, (size_t)len + 1);
        *wlen = (size_t)len;
    }
    memcpy(buf + len, "\0r", 3);
    return (size_t)len + 2;
}

int dl_lockid_is_caller(const char *owner, size_t n)
{
    size_t i = 0;
    while (i < n && i < DL_ID_HEX && isxdigit((unsigned char)owner[i]))
        i++;
    if (i != DL_ID_HEX || n < DL_ID_HEX + 2 || owner[i] != ':')
        return 0;
    for (i++; i < n; i++)
        if (!isdigit((unsigned char)owner[i]))
            return 0;
    return 1;
}

const char *dl_lockid_tag(const dl_lockid *d, size_t pl, size_t *len)
{
    *len = d->keylen >= pl + 2 ? d->keylen - pl - 2 : 0;
    return d->keylen >= pl + 2 ? d->key + pl + 1 : d->key;
}

const char *dl_lockid_name(const dl_lockid *d, size_t pl, size_t *len)
{
    const char *tag = dl_lockid_tag(d, pl, len);
    size_t esc = *len > 0 && tag[0] == ESC;
    *len -= esc;
    return tag + esc;
}
