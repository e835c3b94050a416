/* SPDX-License-Identifier: MIT
 * topology.h: the Redis servers a client talks to, as a list of nodes:
 * one server (url), N independent masters (Redlock), a master found
 * through Sentinel (sentinel.h), or a Cluster routed by hash slot
 * (cluster.h, which keeps the slot map here). Here: the nodes, running a
 * call on one of them, and sending one to every Redlock master at once.
 */
#ifndef DLOCK_TOPOLOGY_H
#define DLOCK_TOPOLOGY_H

#include "redis/script.h"
#include "redis/sentinel.h"
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
    dl_endpoint ep;             /* configured or discovered address (a
                                   Cluster node's may change) */
    struct dl_topology *topo;   /* Cluster: its resolver's */
    dl_resolver resolver;       /* Cluster: ep */
    uint64_t moved;             /* ep changed this many times (atomic) */
    int named, was_named;       /* Cluster: in the last map learnt (or
                                   a seed); under mu (core/state.h, THE
                                   THREAD RULE) */
    dl_conn cmd;                /* the Lua thread's */
    dl_waiter sub;              /* the Lua thread's */
    dl_conn wd;                 /* the watchdog thread's */
} dl_node;

typedef struct dl_topology {
    dl_topo_kind kind;
    pthread_mutex_t *mu;        /* the client's (which fields it guards,
                                   and the atomics: core/state.h, THE
                                   THREAD RULE) */
    dl_node *nodes[DL_MAX_NODES]; /* appended, never removed before
                                     close */
    size_t nnodes;
    int quorum;                 /* Redlock: N/2+1; otherwise 1 */
    dl_endpoint tmpl;           /* credentials and db for discovered nodes */
    int64_t connect_timeout_us, command_timeout_us, wd_timeout_us;
    dl_log *log;                /* the client's (log.h), or NULL */
    dl_sentinel sentinel;       /* Sentinel: where node 0 is */
    /* Cluster (cluster.c keeps these): */
    size_t nseeds;              /* nodes[0..nseeds) were given */
    uint16_t *slots;            /* slot -> node index */
    struct {                    /* slots an ASK was followed for lately:
                                   mid-migration; under mu (core/state.h,
                                   THE THREAD RULE) */
        unsigned slot;
        int64_t at_us;
    } asked[4];
    int64_t remap_us[2];        /* the last dl_cluster_remap of the Lua
                                   thread [0] and the watchdog [1] (each
                                   its own thread's) */
} dl_topology;

/* What a topology is made of. */
typedef struct dl_topology_opts {
    dl_topo_kind kind;
    pthread_mutex_t *mu;        /* the client's (dl_topology.mu) */
    dl_endpoint *eps;           /* url | servers | sentinels | cluster seeds */
    size_t neps;
    char *master;               /* Sentinel: the master's name */
    dl_endpoint *tmpl;          /* credentials and db for discovered nodes */
    int64_t connect_timeout_us, command_timeout_us, wd_timeout_us;
    dl_log *log;
} dl_topology_opts;

/* Set up t from o; takes ownership of o->eps, o->master and *o->tmpl (it
 * is zeroed) in every case. No I/O. */
dl_status dl_topology_init(dl_topology *t, const dl_topology_opts *o,
                           char *err, size_t errlen);
void dl_topology_free(dl_topology *t);

/* With t->mu held: a new node for ep (copied), its connections not yet
 * open, appended. Returns its index, or DL_NO_NODE when full or out of
 * memory. */
size_t dl_topology_add_node(dl_topology *t, const dl_endpoint *ep);

/* With t->mu held: the index of the node at host:port, or DL_NO_NODE. */
size_t dl_topology_find(const dl_topology *t, const char *host, int port);

/* Node idx's connection: the watchdog's if wd, else the Lua thread's. idx
 * came from under t->mu. */
dl_conn *dl_topology_conn(dl_topology *t, size_t idx, int wd);

/* The node a single-node topology sends key to (Cluster: by slot). Takes
 * t->mu. Returns its index. */
size_t dl_topology_route(dl_topology *t, const char *key, size_t len);

/* Run call on node idx (after ASKING when asking): the script (errors as
 * dl_script_eval), or the plain command, whose error reply becomes an
 * error status with its text in err (as dl_reply_error). */
dl_status dl_topology_run_at(dl_topology *t, const dl_scripts *s,
                             const dl_call *call, size_t idx, int asking,
                             redisReply **out, char *err, size_t errlen);

/* One server (url, Sentinel): run call on node 0, as dl_topology_run_at.
 * A redirect is an error: the server is a Cluster node. */
dl_status dl_topology_run(dl_topology *t, const dl_scripts *s,
                          const dl_call *call, redisReply **out, char *err,
                          size_t errlen);

/* Redlock: run call on every node at once. out[i] gets node i's reply or
 * NULL; returns how many nodes replied. The whole fan-out is bounded by
 * the command timeout (the watchdog's, for call->wd). */
size_t dl_topology_fan(dl_topology *t, const dl_scripts *s,
                       const dl_call *call, redisReply **out);

/* Watchdog thread, with t->mu held: every place a forced release can be
 * announced, copied into eps (room for max): the server; every Redlock
 * master; every Cluster node that owns slots; on Sentinel, the master the
 * watchdog's connection found (an empty address before it found one).
 * Returns how many (fewer when out of memory). */
size_t dl_topology_wd_listen_at(dl_topology *t, dl_endpoint *eps,
                                size_t max);

#pragma GCC visibility pop
#endif
