/* SPDX-License-Identifier: MIT
 * script.h: the Lua scripts dlock runs inside Redis, their SHA1s, and
 * running them on connections whose server is known to have them: FCALL
 * where the server takes dlock's function library (Redis 7 and later:
 * its helpers made once, at load), else EVALSHA.
 *
 * The scripts are files in src/redis/scripts/, one per script: each one's
 * header comment says its KEYS, ARGV and reply, and src/redis/scripts/README.md
 * has the data model they share. Keys of one lock:
 *   P{name}        hash  n, t, "o"..owner -> holds, "q"..requester -> the
 *                        last request that took effect; TTL always
 *   P{tag}:fence   string the fencing counter of the slot P{name} is in
 *                        (tag: dl_slot_tag), shared by the slot's locks
 *   P{name}:ch     channel a release publishes on
 *   P{name}:q      a semaphore's waiters (sorted set), a fair lock's
 *                        (hash: its queue, and each queued attempt's
 *                        secret)
 *   P{name}:ch:<client id>  channel of one client's wake-ups and grants
 *                        (a grant: "seq:secret:token")
 * (a name that starts with "}" or "\1" is "\1" + name there: lockid.h).
 */
#ifndef DLOCK_SCRIPT_H
#define DLOCK_SCRIPT_H

#include "redis/conn.h"
/* Generated from src/redis/scripts/ (tools/gen-scripts.lua): dl_script_id
 * (DL_S_<FILE NAME>), the names of keys and arguments (DL_KEY_*,
 * DL_ARG_*), dl_script_layout, and DL_FAIR_GRANT_MS, how long a fair
 * lock's grant lasts before its new holder's client renews it. */
#include "redis/scripts.h"

#pragma GCC visibility push(hidden)

/* The secret a fair lock's queued attempt registers, and a grant to it
 * carries ("seq:secret:token"): 64 random bits as 16 hex digits. */
#define DL_FAIR_SECRET_FMT "%016llx"

/* The three slots every script call's argv reserves at its front for
 * FCALL and the function's name, or EVALSHA and the SHA, and numkeys
 * (filled in here). */
#define DL_SCRIPT_HEAD 3

typedef struct dl_scripts {
    char sha[DL_S_COUNT][41];
    int loaded;
    int functions;              /* load the library and FCALL where the
                                   server takes it (connect's functions) */
} dl_scripts;

/* One call as it goes on the wire: a script (or a plain command) with its
 * keys and arguments, the node it goes to and how. The executor builds
 * it from an operation (exec.h); everything below passes it down. */
typedef struct dl_call {
    int id;                     /* script id, or < 0: the plain command
                                   argv[0..argc) */
    int nkeys, argc;            /* a script's argc counts the
                                   DL_SCRIPT_HEAD slots */
    const char **argv;          /* a script's head is written into them */
    size_t *lens;
    const char *lead;           /* or NULL: a one-word command written just
                                   before the script, its reply dropped
                                   (dl_conn_call_led); not after ASKING,
                                   nor on a pipeline */
    const char *key;            /* routes it (Cluster: by its slot) */
    size_t keylen;
    int wd;                     /* on the watchdog's connections, else the
                                   Lua thread's */
} dl_call;

/* Load every script on c with one pipelined round trip: the function
 * library (if s->functions) and each script, whose SHA it writes in
 * s->sha for any server that takes no library. Used once, at open. */
dl_status dl_script_load(dl_conn *c, dl_scripts *s, char *err, size_t errlen);

/* Connect c if needed and make sure its server has the scripts: loaded
 * once per connection (a new connection may be a restarted server or a
 * node never used before), or again when `again` (after NOSCRIPT or a
 * missing function): the library where the server takes it, else each
 * script. Only call it when no reply is pending on c. */
dl_status dl_script_ready(dl_conn *c, const dl_scripts *s, int again,
                          char *err, size_t errlen);

/* Run script call->id on c (FCALL or EVALSHA), preceded by ASKING when
 * `asking` (a Cluster ASK redirect), else by call->lead if any. On
 * NOSCRIPT or a missing function the scripts are loaded again and the
 * call resent once. A Redis error reply becomes an error status with its
 * text in err. */
dl_status dl_script_eval(dl_conn *c, const dl_scripts *s, const dl_call *call,
                         int asking, redisReply **out, char *err,
                         size_t errlen);

/* Queue script call->id on c's pipeline (without its lead), after
 * dl_script_ready. A NOSCRIPT reply (dl_script_noscript: a missing
 * function too) is the caller's to handle once every queued reply is
 * read. */
dl_status dl_script_append(dl_conn *c, const dl_scripts *s,
                           const dl_call *call, char *err, size_t errlen);
int dl_script_noscript(const redisReply *r);

/* The source of script id and its name ("acquire", ...), for tests. */
const char *dl_script_source(dl_script_id id, const char **name);
/* The function library's text, and script id's function in it. */
const char *dl_script_library_text(void);
const char *dl_script_function(dl_script_id id);

/* Where script id takes each key and argument, by the names its header
 * gives them (op.c builds each call with it). */
const dl_script_layout *dl_script_layout_of(dl_script_id id);

#pragma GCC visibility pop
#endif
