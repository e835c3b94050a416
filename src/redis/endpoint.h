/* SPDX-License-Identifier: MIT
 * endpoint.h: where a Redis server is, parsed from a URL.
 */
#ifndef DLOCK_ENDPOINT_H
#define DLOCK_ENDPOINT_H

#include "base/dlock.h"
#include "redis/tls.h"

#pragma GCC visibility push(hidden)

/* A server address with credentials. Strings are owned (malloc). */
typedef struct dl_endpoint {
    char *host;         /* NULL for unix sockets */
    int port;
    char *path;         /* unix socket path, or NULL */
    char *username;     /* NULL: no ACL user */
    char *password;     /* NULL: no AUTH */
    int db;
    int tls;            /* rediss:// */
    char *name;         /* CLIENT SETNAME on connecting, or NULL */
    dl_tls_config *tlscfg; /* counted reference, or NULL (no TLS, or not
                              set up yet: connecting then fails) */
} dl_endpoint;

/* Parse "redis://[[user][:pass]@][host][:port][/db]" (rediss:// for TLS)
 * or "unix://[[user][:pass]@]/path[?db=N]" into ep (zeroed first).
 * Returns 0; -1 with a message in err (a bad URL); or DL_URL_OOM (err:
 * "out of memory"). On failure ep owns nothing. */
#define DL_URL_OOM (-2)
int dl_endpoint_parse(dl_endpoint *ep, const char *url, size_t len,
                      char *err, size_t errlen);
void dl_endpoint_free(dl_endpoint *ep);
/* Deep copy; returns 0 or -1 on allocation failure. */
int dl_endpoint_copy(dl_endpoint *dst, const dl_endpoint *src);

#pragma GCC visibility pop
#endif
