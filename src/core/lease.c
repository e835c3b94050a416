/* SPDX-License-Identifier: MIT
 * lease.c: a hold's lease timing (lease.h): the only writer of its
 * lease_ms, deadline_us, renew_at_us, retry_at_us and final.
 */
#define _GNU_SOURCE
#include "core/lease.h"
#include "redis/exec.h"

void dl_lease_start(const dl_client *c, dl_hold *h, const dl_lease_term *t)
{
    int64_t valid_us = t->valid_ms * 1000;
    h->lease_ms = t->ms;
    h->deadline_us = t->t0 + valid_us - t->drift_us;
    h->renew_at_us = t->t0 + valid_us / 3;
    h->retry_at_us = 0;
    h->final = t->watchdog && c->opts.max_hold_ms > 0 &&
               t->t0 + valid_us >= h->acquired_us +
                                   c->opts.max_hold_ms * 1000;
}

void dl_lease_renewed(const dl_client *c, dl_hold *h, int64_t sent,
                      int64_t ms)
{
    int64_t drift = dl_exec_drift_us(&c->topo, ms);
    int64_t until = sent + ms * 1000 - drift;
    if (ms < h->lease_ms) {             /* the last, at max_hold */
        h->final = 1;
        until = dl_lease_cap_end(c, h) - drift;
    }
    if (until > h->deadline_us)
        h->deadline_us = until;
    h->renew_at_us = sent + h->lease_ms * 1000 / 3;
    h->retry_at_us = 0;
}

void dl_lease_extended(dl_hold *h, int64_t t0, int64_t ms, int64_t until,
                       int lowers, int capped)
{
    if (lowers || until > h->deadline_us)
        h->deadline_us = until;
    if (!h->watchdog && (lowers || ms > h->lease_ms))
        h->lease_ms = ms;
    h->renew_at_us = t0 + ms * 1000 / 3;
    if (capped && h->watchdog)
        h->final = 1;
}

void dl_lease_lowered(dl_hold *h, int64_t until)
{
    if (until < h->deadline_us)
        h->deadline_us = until;
}

void dl_lease_back_off(dl_hold *h, int64_t delay_us)
{
    h->retry_at_us = dl_now_us() + delay_us;
}

void dl_lease_renew_now(dl_hold *h, int64_t t)
{
    h->renew_at_us = t;
    h->retry_at_us = 0;
}

void dl_lease_renew_by(dl_hold *h, int64_t t)
{
    if (h->renew_at_us > t)
        h->renew_at_us = t;
}

int64_t dl_lease_retry_gap_us(int64_t lease_ms)
{
    int64_t lease = lease_ms * 1000;
    return lease / 10 < 1000000 ? lease / 10 : 1000000;
}

int64_t dl_lease_left_ms(const dl_client *c, int64_t acquired_us)
{
    if (c->opts.max_hold_ms <= 0)
        return INT64_MAX;
    int64_t left = acquired_us + c->opts.max_hold_ms * 1000 - dl_now_us();
    return left <= 0 ? 0 : left < 1000 ? 1 : left / 1000;
}

int64_t dl_lease_cap_end(const dl_client *c, const dl_hold *h)
{
    int64_t cap = c->opts.max_hold_ms * 1000;
    return cap > 0 ? h->acquired_us + cap : INT64_MAX;
}

int64_t dl_lease_wake(const dl_client *c, const dl_hold *h)
{
    int64_t wake = h->watchdog ? h->renew_at_us : h->deadline_us;
    int64_t warn = h->acquired_us + c->opts.warn_hold_ms * 1000;
    if (c->opts.warn_hold_ms > 0 && !h->warned && warn < wake)
        wake = warn;                        /* connect{ warn_hold } */
    return wake;
}
