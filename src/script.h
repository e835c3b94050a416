/* SPDX-License-Identifier: MIT
 * script.h: the Lua scripts dlock runs inside Redis, their SHA1s, and
 * EVALSHA on connections whose server is known to have them.
 *
 * Keys of one lock (script.c has the whole data model):
 *   P{name}        hash  n, t, "o"..owner -> holds, "q"..requester -> the
 *                        last request that took effect; TTL always
 *   P{tag}:fence   string the fencing counter of the slot P{name} is in
 *                        (tag: dl_slot_tag), shared by the slot's locks
 *   P{name}:ch     channel a release publishes on
 *   P{name}:q      a semaphore's waiters (sorted set), a fair lock's
 *                        (hash: its queue, and each queued attempt's
 *                        secret, script.c)
 *   P{name}:ch:<client id>  channel of one client's wake-ups and grants
 *                        (a grant: "seq:secret:token")
 */
#ifndef DLOCK_SCRIPT_H
#define DLOCK_SCRIPT_H

#include "conn.h"

#pragma GCC visibility push(hidden)

typedef enum {
    DL_S_ACQUIRE,   /* KEYS lock counter; ARGV owner req seq lease_ms
                       expected token (of the hold a reentry joins) */
    DL_S_ACQUIRE1,  /* KEYS lock; ARGV as ACQUIRE: a slot mid-migration */
    DL_S_RELEASE,   /* KEYS lock; ARGV owner req seq token keep_ms chan pub */
    DL_S_VOID,      /* KEYS lock; ARGV owner req seq keep_ms chan pub: cancel
                       acquire seq (undo it if it ran, refuse it if late) */
    DL_S_RENEW,     /* KEYS lock...; ARGV (owner lease_ms token)...        */
    DL_S_EXTEND,    /* KEYS lock; ARGV owner lease_ms token shared        */
    DL_S_FORCE,     /* KEYS lock; ARGV req seq keep_ms chan pub           */
    DL_S_DROP,      /* KEYS lock; ARGV owner count token keep_ms chan pub */
    DL_S_FENCE,     /* KEYS counter lock; ARGV token owner: raise to token */
    DL_S_TTL,       /* KEYS lock: PTTL while held, else -2                */
    DL_S_RW_ACQUIRE,/* KEYS lock counter; ARGV as ACQUIRE, then kind ("r",
                       "w", "W": a writer that waits) and the owner's
                       writer (a reader's downgrade) */
    DL_S_RW_RENEW,  /* as RENEW, for holds with leases of their own (the
                       readers of a read-write lock, permits)             */
    DL_S_SEM_ACQUIRE,/* KEYS lock queue; ARGV as ACQUIRE, then permits     */
    DL_S_SEM_RELEASE,/* KEYS lock queue; ARGV as RELEASE: and wake one     */
    DL_S_SEM_FREE,  /* KEYS lock; ARGV permits: how many are free         */
    DL_S_FAIR_ACQUIRE,/* KEYS lock counter queue; ARGV as ACQUIRE, then
                       waits ("1": queue if busy), pub and the secret
                       a grant to this attempt will carry              */
    DL_S_FAIR_RELEASE,/* KEYS lock counter queue; ARGV as RELEASE: a freed
                       lock goes to the first live waiter             */
    DL_S_FAIR_VOID, /* KEYS lock counter queue; ARGV as VOID: and leave
                       the queue                                       */
    DL_S_FAIR_DROP, /* KEYS lock counter queue; ARGV as DROP              */
    DL_S_INSPECT,   /* KEYS lock queue; ARGV chan numsub-verb: read only  */
    DL_S_COUNT
} dl_script_id;

/* How long a fair lock's grant lasts before its new holder's client
 * renews it (script.c). */
#define DL_FAIR_GRANT_MS 3000

/* The secret a fair lock's queued attempt registers, and a grant to it
 * carries ("seq:secret:token"): 64 random bits as 16 hex digits. */
#define DL_FAIR_SECRET_FMT "%016llx"

/* The three slots every argv passed to dl_script_eval/append reserves at
 * its front for EVALSHA, the SHA and numkeys. */
#define DL_SCRIPT_HEAD 3

typedef struct dl_scripts {
    char sha[DL_S_COUNT][41];
    int loaded;
} dl_scripts;

/* Load every script on c with one pipelined round trip; fills s->sha.
 * Used once, at open. */
dl_status dl_scripts_load(dl_conn *c, dl_scripts *s, char *err, size_t errlen);

/* Connect c if needed and make sure its server has the scripts: loaded
 * once per connection (a new connection may be a restarted server or a
 * node never used before), or again when `again` (after NOSCRIPT). Only
 * call it when no reply is pending on c. */
dl_status dl_scripts_ready(dl_conn *c, const dl_scripts *s, int again,
                           char *err, size_t errlen);

/* Run script id with EVALSHA, preceded by ASKING when `asking` (a Cluster
 * ASK redirect). argv[0..DL_SCRIPT_HEAD) and lens[...] are filled in
 * here; the caller's arguments (keys then args) follow. On NOSCRIPT the
 * scripts are loaded again and the call resent once. A Redis error reply
 * becomes an error status with its text in err. */
dl_status dl_script_eval(dl_conn *c, const dl_scripts *s, int asking,
                         dl_script_id id, int nkeys, int argc,
                         const char **argv, size_t *lens,
                         redisReply **out, char *err, size_t errlen);

/* Queue script id on a pipeline, after dl_scripts_ready. A NOSCRIPT
 * reply is the caller's to handle once every queued reply is read. */
dl_status dl_script_append(dl_conn *c, const dl_scripts *s, dl_script_id id,
                           int nkeys, int argc, const char **argv,
                           size_t *lens, char *err, size_t errlen);
int dl_script_noscript(const redisReply *r);

/* The source of script id and its name ("acquire", ...), for tests. */
const char *dl_script_source(dl_script_id id, const char **name);

#pragma GCC visibility pop
#endif
