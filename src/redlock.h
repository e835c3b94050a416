/* SPDX-License-Identifier: MIT
 * redlock.h: lock operations over N independent masters (Redlock): each
 * runs on every master at once and counts the answers against a quorum of
 * N/2+1. Lua thread only, except dl_redlock_settle with wd.
 */
#ifndef DLOCK_REDLOCK_H
#define DLOCK_REDLOCK_H

#include "state.h"

#pragma GCC visibility push(hidden)

/* What one acquire attempt found. */
typedef struct dl_attempt {
    int outcome;                /* 1 acquired, 0 busy, -1 lost (reentry) */
    int64_t count, token;       /* when acquired */
    int64_t pttl_ms;            /* when busy: the holder's remaining TTL */
    int split;                  /* Redlock: granted by some, not a quorum */
    int maybe;                  /* not acquired, but it ran (or may run)
                                   somewhere: to be cancelled */
} dl_attempt;

/* The clock-drift allowance of a lease of ms (0 off Redlock): 1% plus
 * 2 ms, as the Redis documentation suggests. */
int64_t dl_redlock_drift_us(const dl_client *c, int64_t ms);

/* Acquire on every master (argv as for DL_S_ACQUIRE), sent at t0. Success
 * needs a quorum and a positive validity (lease - elapsed - drift); the
 * token is the quorum's highest, written back to them when they differ.
 * A failed fresh attempt is undone on every master. */
dl_status dl_redlock_attempt(dl_client *c, const dl_lockref *l,
                             const char **argv, size_t *lens, int64_t t0,
                             int64_t ms, int64_t expect, dl_attempt *a,
                             char *err, size_t errlen);

/* End a pending request on every master (wd: the watchdog's
 * connections): a release (id DL_S_RELEASE: *code 1 released by a
 * quorum, -1 lost) or the cancel of an acquire (DL_S_VOID: *code 1 once
 * a quorum has it). Not DL_OK while that is not known yet. */
dl_status dl_redlock_settle(dl_client *c, int wd, dl_script_id id,
                            int argc, const char **argv, size_t *lens,
                            int64_t *code, char *err, size_t errlen);
dl_status dl_redlock_extend(dl_client *c, const char **argv, size_t *lens,
                            int *ok, char *err, size_t errlen);
/* The TTL a quorum still has: the quorum-th largest; -2 when absent. */
dl_status dl_redlock_ttl(dl_client *c, const char **argv, size_t *lens,
                         int64_t *ttl_ms, char *err, size_t errlen);
dl_status dl_redlock_force(dl_client *c, const char **argv, size_t *lens,
                           int *existed, char *err, size_t errlen);
dl_status dl_redlock_ping(dl_client *c, const char **argv,
                          char *err, size_t errlen);

#pragma GCC visibility pop
#endif
