/* SPDX-License-Identifier: MIT
 * wire.h: the bytes between a hiredis context and its socket. hiredis
 * formats commands into ctx->obuf and parses replies with ctx->reader;
 * these move the bytes in between, with send/recv on a plain socket or
 * through a TLS session (tls.h). conn.h builds a connection on them.
 */
#ifndef DLOCK_WIRE_H
#define DLOCK_WIRE_H

#include "redis/tls.h"
#include <hiredis/hiredis.h>

#pragma GCC visibility push(hidden)

/* The command argv (lens NULL: C strings) in RESP at the end of ctx's
 * output buffer, as redisAppendCommandArgv writes it. Returns 0, or -1
 * out of memory (the buffer as it was). */
int dl_wire_append(redisContext *ctx, int argc, const char **argv,
                   const size_t *lens);

/* Mark ctx failed as hiredis would: how is DL_TLS_EIO (a socket error,
 * in errno), DL_TLS_EOF (the end of the stream) or DL_TLS_ERR (a TLS
 * error told in msg). *eno gets that errno (0 for the others). Returns
 * REDIS_ERR. */
int dl_wire_failed(redisContext *ctx, ssize_t how, const char *msg,
                   int *eno);

/* Write ctx's whole output buffer, through tls if not NULL. Returns
 * REDIS_OK, or REDIS_ERR as dl_wire_failed. */
int dl_wire_send(redisContext *ctx, dl_tls *tls, int *eno);

/* Read into ctx's reader: wait (bounded by the socket's timeout) for
 * some bytes, or take only what is there. Afterwards nothing that came
 * is left below the reader (in TLS buffers). Returns REDIS_OK, or
 * REDIS_ERR with ctx->err set (*eno as dl_wire_failed). */
int dl_wire_fill(redisContext *ctx, dl_tls *tls, int wait, int *eno);

#pragma GCC visibility pop
#endif
