/* SPDX-License-Identifier: MIT
 * lockid.h: a lock's identity, built in one place (lockid.c): the Redis
 * names derived from its name, and the owner and requester strings.
 *
 * Keys of one lock (src/redis/scripts/README.md has the data model), under
 * the client's prefix P:
 *   P{name}                 the lock's hash
 *   P{tag}:fence            the fencing counter of the slot P{name} is in
 *                           (tag: dl_slot_tag), shared by the slot's locks
 *   P{name}:ch              the channel a release publishes on; a queued
 *                           kind's is P{name}:ch:<client id>, its client's
 *   P{name}:q               a queued kind's waiters ("" for the others)
 * where a name that starts with "}" or "\1" is written "\1" + name
 * between the braces (P{\1}x} for "}x": its Redis hash tag is "\1"), so
 * that the keys' hash tag is never empty and the keys of one lock share
 * one Cluster slot (lockid.c says why this is injective); every other
 * name is written as it is.
 * The owner is an explicit owner string, or "<client id>:<n>" where n
 * numbers a coroutine; a read half's owner has "\0r" after it (its write
 * half's owner is the owner's own). The requester names the client acting
 * for the owner: a coroutine owner itself (it embeds the client id), or
 * "<client id>|<owner>" for an explicit owner, which clients may share.
 */
#ifndef DLOCK_LOCKID_H
#define DLOCK_LOCKID_H

#include "base/dlock.h"

#pragma GCC visibility push(hidden)

/* What a hold is of: an exclusive lock, one half of a read-write lock, a
 * semaphore (one hold per permit), or a fair lock. The last two have a
 * queue of waiters (the key queue) and wake one client at a time (chan is
 * then this client's own channel of the lock). */
enum { DL_KIND_LOCK, DL_KIND_READ, DL_KIND_WRITE, DL_KIND_SEM, DL_KIND_FAIR };

/* For dl_lockid_build: the names every kind shares, as inspect reads
 * them: the key, the channel a release publishes on, and the queue. */
#define DL_KIND_ANY (-1)

typedef struct dl_lockid {
    const char *key, *fence, *chan, *queue, *owner, *req;
    uint32_t keylen, fencelen, chanlen, queuelen, ownerlen, reqlen;
} dl_lockid;

/* Bytes dl_lockid_build needs for the lock name of kind under prefix (of
 * length pl), for the client of id client_id, with the explicit owner of
 * ownerlen bytes (0: coroutine owners). */
size_t dl_lockid_size(size_t pl, size_t namelen, int kind,
                      const char *client_id, size_t ownerlen);

/* What a lock's identity is built from: its name (namelen bytes) of kind
 * under prefix (pl bytes), for the client of id client_id, with the
 * explicit owner of ownerlen bytes (0: coroutine owners). */
typedef struct dl_lockid_spec {
    const char *prefix;
    size_t pl;
    const char *name;
    size_t namelen;
    int kind;
    const char *client_id;
    const char *owner;
    size_t ownerlen;
} dl_lockid_spec;

/* Build the keys of the lock s names into buf (dl_lockid_size bytes;
 * every string is NUL-terminated), and with an explicit owner its owner
 * and requester; with coroutine owners, owner and req stay NULL (see
 * dl_lockid_caller). */
void dl_lockid_build(dl_lockid *d, char *buf, const dl_lockid_spec *s);

/* What d's key has between its braces (P{...}) under a prefix of pl
 * bytes: a key with that between braces is in the lock's Cluster slot
 * (Redis hashes the same part of it). *len gets its length. */
const char *dl_lockid_tag(const dl_lockid *d, size_t pl, size_t *len);

/* The lock's name, as given, inside d's key (its tag, unescaped) under a
 * prefix of pl bytes; *len gets its length. */
const char *dl_lockid_name(const dl_lockid *d, size_t pl, size_t *len);

/* The longest coroutine owner, with its read half's suffix and NUL. */
#define DL_OWNER_MAX (DL_ID_HEX + 27)

/* The coroutine owner n of client_id for a lock of kind, written to buf
 * (DL_OWNER_MAX bytes); its length. A read half's writer (its write
 * half's owner) goes to wbuf (DL_OWNER_MAX bytes) when wbuf is not NULL:
 * its length in *wlen. */
size_t dl_lockid_caller(char *buf, const char *client_id, uint64_t n,
                        int kind, char *wbuf, size_t *wlen);

/* Whether owner (n bytes) has a coroutine owner's form, "<client
 * id>:<n>": an explicit owner may not (it would join that coroutine's
 * holds, and its client's fresh acquire would drop them). */
int dl_lockid_is_caller(const char *owner, size_t n);

#pragma GCC visibility pop
#endif
