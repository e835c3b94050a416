/* SPDX-License-Identifier: MIT
 * extend.c: a holder sets its hold's lease: lock:extend.
 */
#define _GNU_SOURCE
#include "core/client.h"
#include "core/lease.h"
#include "core/lost.h"
#include "redis/exec.h"
#include "core/watchdog.h"

dl_status dl_extend(dl_client *c, const dl_lockref *l,
                    int64_t lease_ms, char *err, size_t errlen)
{
    dl_client_enter(c);
    int64_t tok, since;
    dl_status held = dl_state_holding(c, l, &tok, &since, err, errlen);
    if (held != DL_OK)
        return held;
    int64_t cap_ms = dl_lease_left_ms(c, since);
    if (cap_ms == 0)                        /* (the watchdog says so next) */
        return dl_fail(err, errlen, DL_ELOST, "%s", LOST_MAXHOLD);
    int capped = lease_ms > cap_ms;         /* max_hold: a ceiling here too */
    if (capped)
        lease_ms = cap_ms;

    /* A coroutine owner's extend may set a TTL below the one the last
     * renewal left (dl_op_extend_lowers), and may run even when its reply
     * is lost: from its send, the hold is believed no longer than it asks
     * for. A renewal in flight meanwhile (sent before, perhaps run before
     * the extend) is not recorded: its deadline could outlast the TTL this
     * extend set (h->gen). Any other extend only raises the TTL (and
     * the client keeps the longer lease too). */
    dl_op op;
    dl_result res;
    dl_op_extend(&op, l, lease_ms, tok, c->pubverb);
    int64_t sent = dl_now_us();
    dl_status st = dl_exec(&c->topo, &c->scripts, &op, &res, err, errlen);
    int ok = st == DL_OK && res.kind == DL_V_YES;
    int64_t t0 = st == DL_OK ? res.t0 : sent;
    int64_t until = t0 + lease_ms * 1000 -
                    dl_exec_drift_us(&c->topo, lease_ms);

    pthread_mutex_lock(&c->mu);
    dl_hold *h = dl_registry_find(&c->reg, &l->ident);
    if (!h || h->count <= 0) {
        if (st == DL_OK)
            st = dl_state_not_held(c, l, err, errlen);
    } else if (st != DL_OK) {
        if (dl_op_extend_lowers(l)) {
            h->gen++;
            dl_lease_lowered(h, until);
            if (h->watchdog && !h->final) { /* renew now: a lease again */
                dl_lease_renew_now(h, dl_now_us());
                dl_watchdog_poke(c, h->renew_at_us);
            }
        }
    } else if (ok) {
        /* Where the server only raises (an explicit owner's extend, a
         * read-write hold's: op.c), a longer lease it had stays: the
         * hold is believed as long, and a fixed lease keeps its length. */
        h->gen++;
        dl_lease_extended(h, t0, lease_ms, until, dl_op_extend_lowers(l),
                          capped);
        dl_watchdog_poke(c, h->watchdog && !h->final ? h->renew_at_us
                                                      : h->deadline_us);
    } else {
        dl_lost_mark(c, h, LOST_GONE);
        st = dl_fail(err, errlen, DL_ELOST, "%s", h->lost);
    }
    pthread_mutex_unlock(&c->mu);
    return st;
}
