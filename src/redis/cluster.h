/* SPDX-License-Identifier: MIT
 * cluster.h: Redis Cluster: the slot map (kept in topology.h's
 * dl_topology), learnt from CLUSTER SLOTS and corrected by MOVED, and a
 * call's way to the node that owns its key: MOVED, ASK and TRYAGAIN
 * followed, and the map learnt again when a node dies.
 */
#ifndef DLOCK_CLUSTER_H
#define DLOCK_CLUSTER_H

#include "redis/topology.h"

#pragma GCC visibility push(hidden)

/* Internal: a Cluster slot is mid-migration (TRYAGAIN) past the command
 * timeout; the command did not run. Users see "connection". */
#define DL_EAGAIN DL_INTERNAL(2, DL_ECONN)

/* Internal: MOVED/ASK went back and forth past the redirect limit, as
 * they may while a slot migrates; the command did not run where it was
 * sent last. Users see "connection". */
#define DL_EBOUNCE DL_INTERNAL(4, DL_ECONN)

/* Cluster: run call on the node that owns call->key, following MOVED
 * (the map is corrected and learnt again) and ASK (with ASKING, for this
 * call only), and after a connection failure going to the slot's new
 * node if a map learnt again names one (a lock script only: its request
 * records make the resend exact). Errors as dl_topology_run_at; DL_EAGAIN
 * for a multi-key script whose slot is mid-migration (TRYAGAIN: it did
 * not run), and DL_EBOUNCE after too many redirects. */
dl_status dl_cluster_run(dl_topology *t, const dl_scripts *s,
                         const dl_call *call, redisReply **out, char *err,
                         size_t errlen);

/* Cluster: learn the slot map through node `via` (its watchdog
 * connection if wd). Returns DL_OK or an error; off Cluster, DL_EREDIS. */
dl_status dl_cluster_refresh(dl_topology *t, size_t via, int wd, char *err,
                             size_t errlen);

/* Cluster, after a connection failure to node `failed` (a master that
 * died: it answers nothing, so no MOVED comes): learn the slot map from
 * the other nodes, the first that answers, on the Lua thread's
 * connections or the watchdog's (wd). At most once per DL_REMAP_GAP_US
 * per thread, however many calls fail; elsewhere a no-op. Returns 1 if a
 * map was learnt. */
#define DL_REMAP_GAP_US 100000
int dl_cluster_remap(dl_topology *t, size_t failed, int wd);

/* With t->mu held: whether key's slot is mid-migration, as far as this
 * client knows: an ASK was followed for it in the last DL_ASKED_US. A
 * release there may run on the other node and announce itself there.
 * Off Cluster, 0. */
#define DL_ASKED_US 10000000
int dl_cluster_migrating(const dl_topology *t, const char *key,
                         size_t keylen, int64_t now_us);

#pragma GCC visibility pop
#endif
