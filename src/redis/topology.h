/* SPDX-License-Identifier: MIT
 * topology.h: the Redis servers a client talks to and how a lock finds
 * its way to them. One server (url), N independent masters (Redlock), a
 * master found through Sentinel, or a Cluster routed by hash slot.
 */
#ifndef DLOCK_TOPOLOGY_H
#define DLOCK_TOPOLOGY_H

#include "redis/script.h"
#include "redis/slot.h"
#include "redis/wait.h"

#include <pthread.h>

#pragma GCC visibility push(hidden)

#define DL_MAX_NODES 64
#define DL_NO_NODE 0xffff

typedef enum {
    DL_TOPO_SINGLE,
    DL_TOPO_REDLOCK,
    DL_TOPO_SENTINEL,
    DL_TOPO_CLUSTER
} dl_topo_kind;

/* One server and the three connections dlock keeps to it. */
typedef struct dl_node {
    dl_endpoint ep;             /* configured or discovered address; a
                                   Cluster node's changes under mu */
    struct dl_topology *topo;   /* Cluster: its resolver's */
    dl_resolver resolver;       /* Cluster: ep, read under mu */
    uint64_t moved;             /* atomic: ep changed this many times */
    int named, was_named;       /* Cluster: in the last map learnt (or
                                   a seed); under mu */
    dl_conn cmd;                /* Lua thread only */
    dl_waiter sub;              /* Lua thread only */
    dl_conn wd;                 /* watchdog thread only */
} dl_node;

typedef struct dl_topology {
    dl_topo_kind kind;
    pthread_mutex_t *mu;        /* the client's: guards nodes, nnodes, slots,
                                   asked */
    dl_node *nodes[DL_MAX_NODES]; /* appended under mu, never removed
                                     before close: an index read under mu
                                     (or below a node count read under
                                     mu) may be dereferenced without it */
    size_t nnodes;
    size_t nseeds;              /* Cluster: nodes[0..nseeds) were given */
    int quorum;                 /* Redlock: N/2+1; otherwise 1 */
    uint16_t *slots;            /* Cluster: slot -> node index */
    struct {                    /* Cluster: slots an ASK was followed for
                                   lately (under mu): mid-migration */
        unsigned slot;
        int64_t at_us;
    } asked[4];
    dl_endpoint tmpl;           /* credentials and db for discovered nodes */
    dl_endpoint *sentinels;     /* Sentinel: where to ask */
    size_t nsentinels;
    char *master;               /* Sentinel: the master's name */
    dl_resolver resolver;       /* Sentinel: resolves node 0 */
    dl_waiter news;             /* Sentinel: +switch-master, Lua thread */
    size_t news_from;           /* which sentinel it listens to */
    int news_init, news_dead;
    int64_t news_ping_us;       /* when to check that sentinel is alive */
    uint64_t news_seen;         /* +switch-master messages handled */
    size_t sentinel_ok;         /* the sentinel that answered last */
    int wd_retarget;            /* atomic: the watchdog must re-resolve */
    int lua_retarget;           /* atomic: the Lua thread must re-resolve
                                   (the watchdog found a new master) */
    dl_conn probe;              /* Sentinel: the watchdog's own link to a
                                   sentinel (watchdog thread only) */
    int probe_init;
    size_t probe_from;          /* which sentinel it goes to */
    int64_t connect_timeout_us, command_timeout_us, wd_timeout_us;
    dl_log *log;                /* the client's (log.h), or NULL */
    int64_t remap_us[2];        /* Cluster: the last dl_topology_remap of
                                   the Lua thread [0] and the watchdog [1]
                                   (each its own thread's) */
} dl_topology;

/* Set up t for kind over eps (url | servers | sentinels | cluster seeds);
 * takes ownership of eps, master and tmpl in every case. No I/O. */
dl_status dl_topology_init(dl_topology *t, dl_topo_kind kind,
                           pthread_mutex_t *mu, dl_endpoint *eps,
                           size_t neps, char *master, dl_endpoint *tmpl,
                           int64_t connect_timeout_us,
                           int64_t command_timeout_us,
                           int64_t wd_timeout_us, dl_log *log, char *err,
                           size_t errlen);
void dl_topology_free(dl_topology *t);

/* Sentinel, Lua thread: look (without blocking) for a failover
 * announcement; on one, send node 0's connections and the watchdog's to
 * the sentinels again. The same when the watchdog found a new master, or
 * when a new subscription (the old one broke: a notice may have been
 * missed) finds the master elsewhere than the command connection is. */
void dl_topology_sentinel_news(dl_topology *t);

/* Sentinel, watchdog thread: each renewal pass asks a sentinel which
 * server is the master, beside the renewals (one round trip for both).
 * dl_topology_probe_send writes SENTINEL GET-MASTER-ADDR-BY-NAME to a
 * sentinel without waiting (to the next sentinel when one cannot be
 * reached) and returns 1 if it was sent. dl_topology_probe_check reads
 * the answer (waiting until until_us at most) and compares it with the
 * address node 0's watchdog connection is on: DL_PROBE_SAME, the
 * sentinel names that server as the master (on other topologies, always);
 * DL_PROBE_MOVED, it names another: the watchdog's connection goes there
 * before its next use and the Lua thread's before its next operation;
 * DL_PROBE_UNKNOWN, no answer (the next pass asks the next sentinel). A
 * renewal counts as confirmed only with DL_PROBE_SAME. */
enum { DL_PROBE_SAME, DL_PROBE_MOVED, DL_PROBE_UNKNOWN };
int dl_topology_probe_send(dl_topology *t);
int dl_topology_probe_check(dl_topology *t, int sent, int64_t until_us);

/* Sentinel, watchdog thread, before each pass: when a probe or the Lua
 * thread learnt of a new master, the watchdog's connection to node 0
 * goes to it before its next use. Elsewhere a no-op. */
void dl_topology_wd_follow(dl_topology *t);

/* Watchdog thread, with t->mu held: every place a forced release can be
 * announced, copied into eps (room for max): the server; every Redlock
 * master; every Cluster node that owns slots; on Sentinel, the master the
 * watchdog's connection found (an empty address before it found one).
 * Returns how many (fewer when out of memory). */
size_t dl_topology_wd_listen_at(dl_topology *t, dl_endpoint *eps,
                                size_t max);

/* Watchdog thread, without t->mu: on Sentinel, ask the sentinels where
 * the master is if the watchdog's connection has not yet (it connects),
 * so that a client with no renewal to send still listens there. */
void dl_topology_wd_resolve(dl_topology *t);

/* The node a single-node topology sends key to (Cluster: by slot). Takes
 * t->mu. Returns its index. */
size_t dl_topology_route(dl_topology *t, const char *key, size_t len);

/* With t->mu held: whether key's slot is mid-migration, as far as this
 * client knows: an ASK was followed for it in the last DL_ASKED_US. A
 * release there may run on the other node and announce itself there. */
#define DL_ASKED_US 10000000
int dl_topology_migrating(const dl_topology *t, const char *key,
                          size_t keylen, int64_t now_us);

/* Internal: a Cluster slot is mid-migration (TRYAGAIN) past the command
 * timeout; the command did not run. Users see "connection". */
#define DL_EAGAIN DL_INTERNAL(2, DL_ECONN)

/* Internal: MOVED/ASK went back and forth past the redirect limit, as
 * they may while a slot migrates; the command did not run where it was
 * sent last. Users see "connection". */
#define DL_EBOUNCE DL_INTERNAL(4, DL_ECONN)

/* Run script id (or, with id < 0, the plain command argv) for key on
 * the node that owns it, following Cluster MOVED/ASK redirects and
 * Sentinel re-resolution (READONLY). wd selects the watchdog's
 * connections. Errors as dl_script_eval; DL_EAGAIN for a multi-key
 * script whose slot is mid-migration (TRYAGAIN: it did not run), and
 * DL_EBOUNCE after too many redirects. */
dl_status dl_topology_run(dl_topology *t, const dl_scripts *s, int wd,
                          const char *key, size_t keylen, int id, int nkeys,
                          int argc, const char **argv, size_t *lens,
                          redisReply **out, char *err, size_t errlen);

/* Redlock: run script id (or, with id < 0, the plain command argv) on
 * every node at once, on the watchdog's connections if wd, else the Lua
 * thread's. out[i] gets node i's reply or NULL; returns how many nodes
 * replied. The whole fan-out is bounded by the command timeout. */
size_t dl_topology_fan(dl_topology *t, const dl_scripts *s, int wd, int id,
                       int nkeys, int argc, const char **argv, size_t *lens,
                       redisReply **out);

/* Cluster: learn the slot map through conn (wd: a watchdog connection of
 * node `via`). Returns DL_OK or an error. */
dl_status dl_topology_refresh(dl_topology *t, size_t via, int wd,
                              char *err, size_t errlen);

/* Cluster, after a connection failure to node `failed` (a master that
 * died: it answers nothing, so no MOVED comes): learn the slot map from
 * the other nodes, the first that answers, on the Lua thread's
 * connections or the watchdog's (wd). At most once per DL_REMAP_GAP_US
 * per thread, however many calls fail; elsewhere a no-op. Returns 1 if a
 * map was learnt. */
#define DL_REMAP_GAP_US 100000
int dl_topology_remap(dl_topology *t, size_t failed, int wd);

/* Cluster: the node index for host:port, created (no I/O) if new: in a
 * free entry, else in that of a node the last map learnt did not name
 * (its connections move to host:port the next time each is used). Expects
 * t->mu held. DL_NO_NODE when full or out of memory. */
size_t dl_topology_node_at(dl_topology *t, const char *host, int port);

#pragma GCC visibility pop
#endif
