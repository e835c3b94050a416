/* SPDX-License-Identifier: MIT
 * tls.h: TLS beneath hiredis, over OpenSSL. hiredis (0.14) still formats
 * the commands and parses the replies; this file only moves their bytes
 * through a TLS session on the connection's socket. It is the only file
 * that sees OpenSSL. Built without OpenSSL (no DL_WITH_TLS), every
 * function here fails with a message that says so.
 */
#ifndef DLOCK_TLS_H
#define DLOCK_TLS_H

#include "base/dlock.h"

#include <sys/types.h>

#pragma GCC visibility push(hidden)

/* What connect{ tls = {...} } says. Strings are borrowed. */
typedef struct dl_tls_opts {
    const char *ca_file, *ca_dir, *cert_file, *key_file, *server_name;
    int verify;                 /* verify the server's certificate */
} dl_tls_opts;

/* A shared, read-only TLS set-up (an SSL_CTX and the name to verify),
 * counted: every endpoint that uses it holds a reference, from any thread. */
typedef struct dl_tls_config dl_tls_config;

/* Whether this build has TLS. */
int dl_tls_built(void);

/* Make a set-up from o. NULL with a message in err when a file cannot be
 * used, or when TLS is not built in. The caller holds one reference. */
dl_tls_config *dl_tls_config_new(const dl_tls_opts *o, char *err,
                                 size_t errlen);
dl_tls_config *dl_tls_config_ref(dl_tls_config *cfg);
void dl_tls_config_unref(dl_tls_config *cfg);
/* Whether cfg (NULL: no TLS) skips checking the server's certificate. */
int dl_tls_config_unverified(const dl_tls_config *cfg);

/* One TLS session on a connected socket. */
typedef struct dl_tls dl_tls;

/* Run the client handshake on fd (blocking: the socket's own timeouts
 * bound it), verifying the certificate against cfg's server_name, else
 * host (a name or an IP address). NULL with a message in err. */
dl_tls *dl_tls_open(dl_tls_config *cfg, int fd, const char *host,
                    char *err, size_t errlen);
void dl_tls_close(dl_tls *t);

/* What the I/O calls return on failure. */
#define DL_TLS_EIO (-1)         /* a socket error, in errno (EAGAIN: the
                                   socket's timeout ran out) */
#define DL_TLS_EOF (-2)         /* the server closed the connection */
#define DL_TLS_ERR (-3)         /* a TLS error, told in err */

/* Send all n bytes: 0 or a DL_TLS_ failure. Never raises SIGPIPE. */
int dl_tls_write(dl_tls *t, int fd, const char *buf, size_t n,
                 char *err, size_t errlen);

/* Read decrypted bytes into buf. wait: block (bounded by the socket's
 * receive timeout) until some arrive; else only take what is there.
 * Returns the count, 0 when !wait and nothing is there, or a DL_TLS_
 * failure. Once the caller has read with !wait until 0, the session holds
 * no whole record: poll() on fd then truly answers "is there more?". */
ssize_t dl_tls_read(dl_tls *t, int fd, char *buf, size_t cap, int wait,
                    char *err, size_t errlen);

#pragma GCC visibility pop
#endif
