/* SPDX-License-Identifier: MIT
 * conn.h: one blocking connection to a Redis server (endpoint.h), with
 * connect/command timeouts, lazy reconnect and TLS (tls.h).
 * A dl_conn belongs to one thread at a time (hiredis: "A redisContext is
 * not thread-safe").
 */
#ifndef DLOCK_CONN_H
#define DLOCK_CONN_H

#include "redis/endpoint.h"
#include "redis/reply.h"
#include "base/log.h"
#include <hiredis/hiredis.h>

#pragma GCC visibility push(hidden)

#define DL_HIREDIS_AT_LEAST(maj, min) \
    (HIREDIS_MAJOR > (maj) || (HIREDIS_MAJOR == (maj) && HIREDIS_MINOR >= (min)))

/* Where a connection should go now, asked again after a failure: used
 * for Sentinel, whose master moves, and for a Cluster node's entry given
 * to another address. Called on the thread that owns the connection;
 * fills *ep (zeroed first). Returns 0, or -1 with err. */
typedef struct dl_resolver {
    int (*resolve)(void *ud, dl_endpoint *ep, char *err, size_t errlen);
    void *ud;
    int master_only;            /* Sentinel: the address must answer ROLE
                                   as a master; READONLY asks again */
} dl_resolver;

/* Only conn.c writes these fields (others read them): the setters below
 * change what a caller may. */
typedef struct dl_conn {
    redisContext *ctx;          /* NULL while disconnected; hiredis formats
                                   into ctx->obuf and parses with
                                   ctx->reader, conn.c moves the bytes */
    dl_tls *tls;                /* the TLS session on ctx->fd, or NULL */
    int eno;                    /* errno of the last I/O failure */
    int replied;                /* a reply came since connecting */
    dl_log *log;                /* where its ups and downs are told, or
                                   NULL; role names it there */
    const char *role;
    int up;                     /* connected, set up, not yet failed */
    int down_told;              /* a failure was told since it was up */
    dl_endpoint ep;             /* owned: where it connects */
    const dl_resolver *resolver;/* NULL: ep never changes */
    int resolve_next;           /* ask the resolver before reconnecting */
    const uint64_t *moved;      /* or NULL: when the count (an atomic)
                                   changes, the connection is dropped and
                                   the resolver asked (a Cluster node's
                                   table entry given to another address) */
    uint64_t moved_seen;
    int64_t connect_timeout_us;
    int64_t command_timeout_us; /* 0: block without a bound */
    int64_t read_us;            /* the socket's timeout now (0: none) */
    int64_t retry_at_us;        /* no connect attempt before this */
    int64_t backoff_us;         /* doubles per slow failed connect, capped */
    int64_t attempt_us;         /* when the last connect attempt began */
    int stale;                  /* the last error was a dead link (EOF,
                                   reset), not a timeout */
    uint64_t epoch;             /* connections made so far */
    uint64_t serial;            /* this connection's number in the
                                   process (each connect takes the next):
                                   its socket, whatever fd number the
                                   kernel reused for it */
    uint64_t scripts_epoch;     /* the epoch whose server has our scripts
                                   (dl_conn_note_scripts) */
    int fcall;                  /* and has them as functions: FCALL */
    char why[96];               /* the last connect failure */
    dl_status why_st;           /* its status (DL_EDOWN or DL_ECONN) */
} dl_conn;

#define DL_BACKOFF_MIN_US 25000
#define DL_BACKOFF_MAX_US 1000000

/* Copy ep into c. Returns 0, or -1 when out of memory (c owns nothing). */
int dl_conn_init(dl_conn *c, const dl_endpoint *ep,
                 int64_t connect_timeout_us, int64_t command_timeout_us);
/* Drop the connection and free the endpoint. */
void dl_conn_free(dl_conn *c);

/* Where c tells its ups and downs (log, or NULL) and as what (role, a
 * string that outlives c: "command", "subscriber", ...). */
void dl_conn_tell(dl_conn *c, dl_log *log, const char *role);

/* Let c follow an address that changes: r (or NULL) is asked where to go
 * before each reconnect after a failure, and before the first connect
 * when first; when moved (or NULL) changes, c goes there too, between
 * calls (dl_conn_moved). r and moved outlive c. */
void dl_conn_follow(dl_conn *c, const dl_resolver *r, const uint64_t *moved,
                    int first);

/* Drop the connection; the next connect goes to host:port (c's
 * credentials, db and TLS kept) without asking the resolver, and without
 * waiting out a backoff. Out of memory: as dl_conn_retarget. */
void dl_conn_move_to(dl_conn *c, const char *host, int port);

/* Write everything queued by dl_conn_append without waiting for replies,
 * so that several connections work at once. */
dl_status dl_conn_flush(dl_conn *c, char *err, size_t errlen);

/* Bound the next reads by us (0: the connection's command timeout). */
void dl_conn_read_timeout(dl_conn *c, int64_t us);

/* Whether c's address changed (a Cluster node's entry given to another
 * node) since it last connected; the next dl_conn_ensure between calls
 * goes there. */
int dl_conn_moved(const dl_conn *c);

/* Forget the connection and ask the resolver (if any) before the next
 * connect: the server is no longer what we wanted (READONLY). */
void dl_conn_retarget(dl_conn *c);

/* Connect (if not connected), set TCP_NODELAY and timeouts, AUTH, SELECT,
 * CLIENT SETNAME, and with a master_only resolver check ROLE. Returns
 * DL_OK, or an error status (DL_EDOWN: out of reach for now) with a
 * message in err. */
dl_status dl_conn_ensure(dl_conn *c, char *err, size_t errlen);

/* Drop the connection (after an I/O error, or to close). */
void dl_conn_drop(dl_conn *c);

/* script.c's note that c's server has dlock's scripts (as functions, to
 * FCALL, or in its script cache, to EVALSHA), and whether it still does
 * as far as c knows: until c connects again. */
void dl_conn_note_scripts(dl_conn *c, int fcall);
int dl_conn_has_scripts(const dl_conn *c);
int dl_conn_fcall(const dl_conn *c);

/* Send one command and read its reply. A Redis error reply is returned
 * as DL_OK with *out of type REDIS_REPLY_ERROR: callers decide. I/O errors
 * drop the connection and give DL_ECONN or DL_EDOWN. On DL_OK the caller
 * frees *out. A connection found dead on reuse (the server restarted or
 * closed it while idle) is replaced and the command sent once more;
 * dlock's scripts are safe to resend (each request is recorded), a
 * user's command (client:call, lock:guard) may then run twice if the
 * server ran it just before the link died. So is a READONLY answer on a
 * connection with a master_only resolver (a demoted Sentinel master): it
 * is retargeted first. A timeout is never resent, so the bound holds. */
dl_status dl_conn_call(dl_conn *c, int argc, const char **argv,
                       const size_t *lens, redisReply **out,
                       char *err, size_t errlen);

/* The same, the command preceded in the same write by lead (a command of
 * one word, whose reply is dropped). Redis writes its pending replies
 * newest client first: a caller that already has a reply pending when its
 * command runs gets its answer after the messages that command published
 * (a fair lock's grant reaches the new holder before the releaser). */
dl_status dl_conn_call_led(dl_conn *c, const char *lead, int argc,
                           const char **argv, const size_t *lens,
                           redisReply **out, char *err, size_t errlen);

/* After poll() said the socket is readable: take in what is there without
 * blocking, for redisGetReplyFromReader. Returns 0, or -1 when the link
 * failed (the caller drops it). Afterwards nothing that arrived is left
 * below the reader (in TLS buffers): poll() tells whether more came. */
int dl_conn_pump(dl_conn *c);

/* Pipelining: queue commands, then read their replies in order. Out of
 * memory, an append drops the connection (and what it had queued). */
dl_status dl_conn_append(dl_conn *c, int argc, const char **argv,
                         const size_t *lens, char *err, size_t errlen);
dl_status dl_conn_read(dl_conn *c, redisReply **out, char *err, size_t errlen);

/* Describe a hiredis context error as "connection: ..." text in err, and
 * drop the connection. */
dl_status dl_conn_error(dl_conn *c, char *err, size_t errlen);

#pragma GCC visibility pop
#endif
