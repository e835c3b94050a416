/* SPDX-License-Identifier: MIT
 * sentinel.h: finding a master through Redis Sentinel. The master's
 * connections (the topology's node 0) ask the sentinels where it is
 * before they connect; the Lua thread listens for the sentinels'
 * failover announcements, and the watchdog asks at each renewal pass.
 * Either moves the master's connections to the new master.
 */
#ifndef DLOCK_SENTINEL_H
#define DLOCK_SENTINEL_H

#include "redis/wait.h"

#pragma GCC visibility push(hidden)

/* Where the sentinels are, and how to reach them and the master. */
typedef struct dl_sentinel_opts {
    dl_endpoint *at;            /* the sentinels (taken over) */
    size_t n;
    char *master;               /* the master's name (taken over) */
    const dl_endpoint *tmpl;    /* the master's credentials, db and TLS
                                   (the caller's, outliving it) */
    int64_t connect_timeout_us, command_timeout_us, wd_timeout_us;
    dl_log *log;
    dl_conn *cmd;               /* the master's connections (the caller's,
                                   outliving it): the Lua thread's command */
    dl_waiter *sub;             /* and subscriber connections, */
    dl_conn *wd;                /* the watchdog's */
} dl_sentinel_opts;

typedef struct dl_sentinel {
    dl_sentinel_opts o;         /* o.n == 0: no Sentinel (each function
                                   below does nothing) */
    dl_resolver resolver;       /* what the master's connections ask */
    size_t answered;            /* the sentinel that answered last (both
                                   threads: core/state.h, THE THREAD RULE) */
    dl_waiter news;             /* +switch-master (Lua thread) */
    size_t news_from;           /* which sentinel it listens to */
    int news_init, news_dead;
    int64_t news_ping_us;       /* when to check that sentinel is alive */
    uint64_t news_seen;         /* +switch-master messages handled */
    int wd_retarget;            /* the watchdog must re-resolve */
    int lua_retarget;           /* the Lua thread must re-resolve (the
                                   watchdog found a new master); both
                                   atomic (core/state.h, THE THREAD
                                   RULE) */
    dl_conn probe;              /* the watchdog's own link to a sentinel
                                   (watchdog thread only) */
    int probe_init;
    size_t probe_from;          /* which sentinel it goes to */
} dl_sentinel;

/* Set s up from o (taken over in every case; o->n == 0: no Sentinel):
 * the master's connections ask the sentinels before their first
 * connect. No I/O. */
void dl_sentinel_init(dl_sentinel *s, const dl_sentinel_opts *o);
void dl_sentinel_free(dl_sentinel *s);

/* Lua thread, as an operation begins: look (without blocking) for a
 * failover announcement; on one, send the master's connections and the
 * watchdog's to the sentinels again. The same when the watchdog found a
 * new master, or when a new subscription (the old one broke: a notice
 * may have been missed) finds the master elsewhere than the command
 * connection is. */
void dl_sentinel_news(dl_sentinel *s);

/* Watchdog thread: each renewal pass asks a sentinel which server is the
 * master, beside the renewals (one round trip for both).
 * dl_sentinel_probe_send writes SENTINEL GET-MASTER-ADDR-BY-NAME to a
 * sentinel without waiting (to the next sentinel when one cannot be
 * reached) and returns 1 if it was sent. dl_sentinel_probe_check reads
 * the answer (waiting until until_us at most) and compares it with the
 * address the watchdog's connection is on: DL_PROBE_SAME, the sentinel
 * names that server as the master (without Sentinel, always);
 * DL_PROBE_MOVED, it names another: the watchdog's connection goes there
 * before its next use and the Lua thread's before its next operation;
 * DL_PROBE_UNKNOWN, no answer (the next pass asks the next sentinel). A
 * renewal counts as confirmed only with DL_PROBE_SAME. */
enum { DL_PROBE_SAME, DL_PROBE_MOVED, DL_PROBE_UNKNOWN };
int dl_sentinel_probe_send(dl_sentinel *s);
int dl_sentinel_probe_check(dl_sentinel *s, int sent, int64_t until_us);

/* Watchdog thread, before each pass: when a probe or the Lua thread
 * learnt of a new master, the watchdog's connection goes to it before its
 * next use. */
void dl_sentinel_wd_follow(dl_sentinel *s);

/* Watchdog thread: ask the sentinels where the master is if the
 * watchdog's connection has not yet (it connects), so that a client with
 * no renewal to send still listens there. */
void dl_sentinel_wd_resolve(dl_sentinel *s);

#pragma GCC visibility pop
#endif
