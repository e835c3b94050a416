/* SPDX-License-Identifier: MIT
 * lost.c: a hold is lost: marked once, counted, logged, and its on_lost
 * notice queued for the Lua thread (lost.h).
 */
#define _GNU_SOURCE
#include "core/lost.h"

void dl_lost_mark(dl_client *c, dl_hold *h, const char *reason)
{
    if (h->lost)
        return;
    /* An explicit owner may be shared with other clients, which keep its
     * tenancy alive: this client's holds would stay counted in it (and
     * the lock held after every holder released). The watchdog DROPs
     * them, this client's count alone, in this tenancy alone (the token),
     * whatever the client does next. Its pending request is not among
     * them: it ends on its own (a release resent, an acquire cancelled).
     * Where Redis said the hold is gone, the DROP finds nothing, unless
     * this client joined the tenancy again meanwhile: so it takes nothing
     * out where a request sent after the loss ran (lib/drop.lua). A
     * coroutine's owner is this client's alone: its holds expire. On a
     * fair lock g = this requester marks a grant its client may not have
     * seen yet, which a fresh acquire adopts: the client's next fresh
     * acquire names the lost hold's token, so that it joins that tenancy
     * rather than adopt it (the DROP would take out what it adopted), and
     * the DROP clears g (fair_acquire.lua, fair_drop.lua). Sent once: a
     * DROP has no request id (should the connection resend it after a
     * reset, Redis takes out only this client's holds, lib/holder.lua,
     * and finds none the second time). */
    if (h->owner_num == 0 && h->count > 0 &&
        dl_registry_orphan_share(&c->reg, h, __atomic_load_n(&c->next_seq,
                                                   __ATOMIC_RELAXED)) != 0)
        dl_log_say(&c->log, DL_LOG_WARN, "%.*s: out of memory: this "
                   "client's lost holds stay until the lease runs out",
                   (int)h->ident.keylen, h->ident.key);
    h->lost = reason;
    if (dl_registry_push_event(&c->reg, h->ref, reason) == 0)
        h->ref = DL_NOREF;
    c->stats.lost++;
    dl_log_say(&c->log, DL_LOG_WARN, "%.*s: %s", (int)h->ident.keylen,
               h->ident.key, reason);
    __atomic_store_n(&c->pending, 1, __ATOMIC_RELEASE);
}

void dl_lost_clear(dl_hold *h)
{
    h->lost = NULL;
}
