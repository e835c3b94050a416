/* SPDX-License-Identifier: MIT
 * pending.c: requests whose outcome is not known, and how they end.
 *
 * DESIGN. Every acquire and release attempt carries a request id; Redis
 * records, per requester (client + owner), the last one that took effect
 * (script.c). When a reply is lost (a timeout, a dropped connection), the
 * client cannot know whether the request ran, or whether it will still
 * run (a paused server runs it later). It keeps the request on the hold
 * as "pending" and ends it by sending, with the same id:
 *   - a release again: it runs at most once, and answers whether it ran
 *     on a hold still there (released) or found it gone (lost);
 *   - for an acquire, VOID: it undoes the acquire if it ran, else records
 *     the id as cancelled so that a late arrival is refused.
 * Either is safe to send any number of times, from either thread. The
 * Lua thread ends a hold's pending request before it sends a new one for
 * that hold, so a requester has one unsettled request at most and one
 * record per requester suffices; the watchdog ends the others in the
 * background (every lease/10, at most 1 s) until the hold's lease would
 * have run out. The states a lost reply can leave, and what ends them:
 *   acquire ran / not yet / never  -> VOID undoes / refuses / records
 *   release ran / not yet / never  -> resend answers / runs it / runs it
 *   the hold expired meanwhile     -> the resend answers lost
 */
#define _GNU_SOURCE
#include "pending.h"
#include "redlock.h"

#include <stdio.h>
#include <string.h>


void dl_client_pending_copy(const dl_hold *h, dl_pending *p)
{
    memset(p, 0, sizeof *p);
    p->kind = h->pend;
    p->seq = h->pend_seq;
    p->token = h->pend_token;
    p->ms = h->pend_ms;
    p->l.key = h->key;     p->l.keylen = h->keylen;
    p->l.fence = h->fence; p->l.fencelen = h->fencelen;
    p->l.chan = h->chan;   p->l.chanlen = h->chanlen;
    p->l.owner = h->owner; p->l.ownerlen = h->ownerlen;
    p->l.req = h->req;     p->l.reqlen = h->reqlen;
    p->l.owner_num = h->owner_num;
}

static void arg(const char **argv, size_t *lens, int i, const char *s,
                size_t n)
{
    argv[i] = s;
    lens[i] = n;
}

dl_status dl_client_pending_io(dl_client *c, int wd, const dl_pending *p,
                               int *done, int64_t *code, int64_t *left,
                               char *err, size_t errlen)
{
    char seq_s[24], tok_s[24], ms_s[24];
    const char *argv[DL_SCRIPT_HEAD + 8];
    size_t lens[DL_SCRIPT_HEAD + 8];
    int release = p->kind == DL_PEND_RELEASE, argc;
    *done = 0;
    *code = 0;
    *left = 0;
    snprintf(seq_s, sizeof seq_s, "%llu", (unsigned long long)p->seq);
    snprintf(tok_s, sizeof tok_s, "%lld", (long long)p->token);
    snprintf(ms_s, sizeof ms_s, "%lld", (long long)p->ms);
    arg(argv, lens, 3, p->l.key, p->l.keylen);
    arg(argv, lens, 4, p->l.owner, p->l.ownerlen);
    arg(argv, lens, 5, p->l.req, p->l.reqlen);
    arg(argv, lens, 6, seq_s, strlen(seq_s));
    if (release) {              /* owner req seq token keep chan pub */
        arg(argv, lens, 7, tok_s, strlen(tok_s));
        arg(argv, lens, 8, ms_s, strlen(ms_s));
        arg(argv, lens, 9, p->l.chan, p->l.chanlen);
        arg(argv, lens, 10, c->pubverb, strlen(c->pubverb));
        argc = 11;
    } else {                    /* owner req seq keep chan pub */
        arg(argv, lens, 7, ms_s, strlen(ms_s));
        arg(argv, lens, 8, p->l.chan, p->l.chanlen);
        arg(argv, lens, 9, c->pubverb, strlen(c->pubverb));
        argc = 10;
    }
    dl_script_id id = release ? DL_S_RELEASE : DL_S_VOID;
    if (c->topo.kind == DL_TOPO_REDLOCK) {
        dl_status st = dl_redlock_settle(c, wd, id, argc, argv, lens, code,
                                         err, errlen);
        *done = st == DL_OK;
        return st;
    }
    redisReply *r;
    dl_status st = dl_topology_eval(&c->topo, &c->scripts, wd, p->l.key,
                                    p->l.keylen, id, 1, argc, argv, lens,
                                    &r, err, errlen);
    if (st != DL_OK)
        return st;
    if (!release) {
        *code = 1;
    } else if (dl_reply_int(r, 0, code) ||
               (*code == 1 && dl_reply_int(r, 1, left))) {
        st = dl_fail(err, errlen, DL_EREDIS, "unexpected release reply");
    }
    freeReplyObject(r);
    *done = st == DL_OK;
    return st;
}

void dl_client_pending_done(dl_client *c, dl_hold *h, uint64_t seq,
                            int64_t code)
{
    if (h->pend == DL_PEND_NONE || h->pend_seq != seq)
        return;                 /* the other thread recorded it first */
    int kind = h->pend;
    h->pend = DL_PEND_NONE;
    if (kind == DL_PEND_RELEASE && code == 1)
        c->stats.released++;
    else if (kind == DL_PEND_RELEASE)
        dl_client_lose(c, h, LOST_GONE);
    h->finished = h->count <= 0;
}

void dl_client_pending_end(dl_client *c, int wd, const dl_hold *h)
{
    char err[DL_ERRLEN];
    dl_pending p;
    int done;
    int64_t code, left;
    if (h->pend == DL_PEND_NONE)
        return;
    dl_client_pending_copy(h, &p);
    (void)dl_client_pending_io(c, wd, &p, &done, &code, &left, err,
                               sizeof err);
}
