/* SPDX-License-Identifier: MIT
 * tls.c: TLS sessions over OpenSSL: conn.c opens and closes them, wire.c
 * moves the bytes through them.
 *
 * DESIGN. The session never touches the socket itself: OpenSSL reads and
 * writes two memory buffers, and this file moves their bytes with recv()
 * and send(MSG_NOSIGNAL). So a peer that closed the link gives EPIPE,
 * never SIGPIPE (OpenSSL's socket layer would write()), a read can take
 * only what is there (MSG_DONTWAIT) after a poll(), and the socket's own
 * SO_RCVTIMEO/SO_SNDTIMEO (redisSetTimeout) bound every blocking step as
 * they do for plain connections.
 */
#define _GNU_SOURCE
#include "redis/tls.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef DL_WITH_TLS

int dl_tls_built(void) { return 0; }

static dl_status not_built(char *err, size_t errlen)
{
    return dl_fail(err, errlen, DL_ECONN, "TLS (rediss://) is not built "
                   "into this dlock: it was built without OpenSSL; install "
                   "libssl-dev and build again");
}

dl_tls_config *dl_tls_config_new(const dl_tls_opts *o, char *err,
                                 size_t errlen)
{
    (void)o;
    not_built(err, errlen);
    return NULL;
}

dl_tls_config *dl_tls_config_ref(dl_tls_config *cfg) { return cfg; }
void dl_tls_config_unref(dl_tls_config *cfg) { (void)cfg; }
int dl_tls_config_unverified(const dl_tls_config *cfg) { (void)cfg; return 0; }

dl_tls *dl_tls_open(dl_tls_config *cfg, int fd, const char *host,
                    char *err, size_t errlen)
{
    (void)cfg, (void)fd, (void)host;
    not_built(err, errlen);
    return NULL;
}

void dl_tls_close(dl_tls *t) { (void)t; }

int dl_tls_write(dl_tls *t, int fd, const char *buf, size_t n, char *err,
                 size_t errlen)
{
    (void)t, (void)fd, (void)buf, (void)n;
    not_built(err, errlen);
    return DL_TLS_ERR;
}

ssize_t dl_tls_read(dl_tls *t, int fd, char *buf, size_t cap, int wait,
                    char *err, size_t errlen)
{
    (void)t, (void)fd, (void)buf, (void)cap, (void)wait;
    not_built(err, errlen);
    return DL_TLS_ERR;
}

#else

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <sys/socket.h>

struct dl_tls_config {
    SSL_CTX *ctx;
    char *server_name;          /* NULL: verify the host connected to */
    int verify;
    int refs;                   /* __atomic */
};

struct dl_tls {
    SSL *ssl;
    BIO *in;                    /* bytes from the socket, for OpenSSL */
    BIO *out;                   /* bytes from OpenSSL, for the socket */
};

int dl_tls_built(void) { return 1; }

/* OpenSSL's reason for the last failure (and clear its error queue). */
static const char *ssl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_last_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    snprintf(buf, n, "%s", r ? r : "unknown TLS error");
    ERR_clear_error();
    return buf;
}

static dl_tls_config *load_failed(dl_tls_config *cfg, char *err,
                                  size_t errlen, const char *opt,
                                  const char *path)
{
    char why[128];
    FILE *f = fopen(path, "r");         /* the likely reason, told plainly */
    if (!f)
        snprintf(why, sizeof why, "%s", strerror(errno));
    else
        ssl_reason(why, sizeof why);
    if (f)
        fclose(f);
    ERR_clear_error();
    dl_fail(err, errlen, DL_ECONN, "tls.%s: cannot use '%s': %s", opt, path,
            why);
    dl_tls_config_unref(cfg);
    return NULL;
}

dl_tls_config *dl_tls_config_new(const dl_tls_opts *o, char *err,
                                 size_t errlen)
{
    dl_tls_config *cfg = calloc(1, sizeof *cfg);
    if (!cfg || !(cfg->ctx = SSL_CTX_new(TLS_client_method())) ||
        (o->server_name && !(cfg->server_name = strdup(o->server_name)))) {
        free(cfg ? cfg->server_name : NULL);
        if (cfg && cfg->ctx)
            SSL_CTX_free(cfg->ctx);
        free(cfg);
        ERR_clear_error();
        dl_fail(err, errlen, DL_ECONN, "TLS: cannot set up a context (out "
                "of memory?)");
        return NULL;
    }
    cfg->refs = 1;
    cfg->verify = o->verify;
    SSL_CTX_set_min_proto_version(cfg->ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(cfg->ctx, o->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE,
                       NULL);
    if (o->ca_file || o->ca_dir) {
        if (SSL_CTX_load_verify_locations(cfg->ctx, o->ca_file,
                                          o->ca_dir) != 1)
            return load_failed(cfg, err, errlen, o->ca_file ? "ca_file" :
                               "ca_dir", o->ca_file ? o->ca_file : o->ca_dir);
    } else if (SSL_CTX_set_default_verify_paths(cfg->ctx) != 1) {
        ERR_clear_error();      /* no system store: verification says so */
    }
    if (o->cert_file &&
        SSL_CTX_use_certificate_chain_file(cfg->ctx, o->cert_file) != 1)
        return load_failed(cfg, err, errlen, "cert_file", o->cert_file);
    const char *key = o->key_file ? o->key_file : o->cert_file;
    if (key && (SSL_CTX_use_PrivateKey_file(cfg->ctx, key,
                                            SSL_FILETYPE_PEM) != 1 ||
                SSL_CTX_check_private_key(cfg->ctx) != 1))
        return load_failed(cfg, err, errlen, o->key_file ? "key_file" :
                           "cert_file", key);
    return cfg;
}

int dl_tls_config_unverified(const dl_tls_config *cfg)
{
    return cfg && !cfg->verify;
}

dl_tls_config *dl_tls_config_ref(dl_tls_config *cfg)
{
    if (cfg)
        __atomic_add_fetch(&cfg->refs, 1, __ATOMIC_RELAXED);
    return cfg;
}

void dl_tls_config_unref(dl_tls_config *cfg)
{
    if (!cfg || __atomic_sub_fetch(&cfg->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    SSL_CTX_free(cfg->ctx);
    free(cfg->server_name);
    free(cfg);
}

/* Send what OpenSSL has written. 0, or -1 with errno (EAGAIN: timed
 * out). */
static int flush_out(dl_tls *t, int fd)
{
    char buf[16384];
    int n;
    while ((n = BIO_read(t->out, buf, (int)sizeof buf)) > 0) {
        for (int at = 0; at < n;) {
            ssize_t k = send(fd, buf + at, (size_t)(n - at), MSG_NOSIGNAL);
            if (k < 0 && errno == EINTR)
                continue;
            if (k <= 0) {
                if (k == 0)
                    errno = EPIPE;
                return -1;
            }
            at += (int)k;
        }
    }
    return 0;
}

/* Give OpenSSL what the socket has. >0: bytes taken; 0: nothing there
 * (!wait only); DL_TLS_EOF or DL_TLS_EIO (errno). */
static ssize_t fill_in(dl_tls *t, int fd, int wait)
{
    char buf[16384];
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf, wait ? 0 : MSG_DONTWAIT);
        if (k > 0)
            return BIO_write(t->in, buf, (int)k) == (int)k ? k : DL_TLS_EIO;
        if (k == 0)
            return DL_TLS_EOF;
        if (errno == EINTR)
            continue;
        if (!wait && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return DL_TLS_EIO;
    }
}

/* Why the handshake or a read failed, told as a user can act on it. */
static void tls_failed(dl_tls *t, const char *during, char *err,
                       size_t errlen)
{
    char why[128];
    long v = SSL_get_verify_result(t->ssl);
    if (v != X509_V_OK)
        dl_fail(err, errlen, DL_ECONN, "TLS %s: certificate verify failed: "
                "%s", during, X509_verify_cert_error_string(v));
    else if (ssl_reason(why, sizeof why) && strstr(why, "certificate required"))
        dl_fail(err, errlen, DL_ECONN, "TLS %s: %s (the server wants a client "
                "certificate: tls.cert_file and tls.key_file)", during, why);
    else
        dl_fail(err, errlen, DL_ECONN, "TLS %s: %s", during, why);
    ERR_clear_error();
}

static int is_ip(const char *s)
{
    unsigned char a[16];
    return inet_pton(AF_INET, s, a) == 1 || inet_pton(AF_INET6, s, a) == 1;
}

dl_tls *dl_tls_open(dl_tls_config *cfg, int fd, const char *host,
                    char *err, size_t errlen)
{
    dl_tls *t = calloc(1, sizeof *t);
    if (!t || !(t->ssl = SSL_new(cfg->ctx)) ||
        !(t->in = BIO_new(BIO_s_mem())) || !(t->out = BIO_new(BIO_s_mem()))) {
        if (t) {
            BIO_free(t->in);
            SSL_free(t->ssl);
            free(t);
        }
        ERR_clear_error();
        dl_fail(err, errlen, DL_ECONN, "TLS: out of memory");
        return NULL;
    }
    SSL_set_bio(t->ssl, t->in, t->out);     /* the session owns both */
    SSL_set_connect_state(t->ssl);
    const char *name = cfg->server_name ? cfg->server_name : host;
    int named = 1;
    if (name && is_ip(name)) {
        if (cfg->verify)
            named = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(t->ssl),
                                                  name);
    } else if (name) {
        named = SSL_set_tlsext_host_name(t->ssl, name) == 1 &&
                (!cfg->verify || SSL_set1_host(t->ssl, name) == 1);
    }
    if (!named) {
        dl_fail(err, errlen, DL_ECONN, "TLS: cannot verify against the "
                "name '%s'", name);
        dl_tls_close(t);
        return NULL;
    }
    for (;;) {
        ERR_clear_error();      /* SSL_get_error reads the thread's queue */
        int r = SSL_do_handshake(t->ssl);
        if (flush_out(t, fd) != 0) {
            dl_fail(err, errlen, DL_ECONN, "TLS handshake: %s",
                    errno == EAGAIN ? "timed out" : strerror(errno));
            break;
        }
        if (r == 1)
            return t;
        if (SSL_get_error(t->ssl, r) != SSL_ERROR_WANT_READ) {
            tls_failed(t, "handshake", err, errlen);
            break;
        }
        ssize_t k = fill_in(t, fd, 1);
        if (k < 0) {
            dl_fail(err, errlen, DL_ECONN, "TLS handshake: %s",
                    k == DL_TLS_EOF ? "the server closed the connection (is "
                    "this a TLS port?)" : errno == EAGAIN ? "timed out"
                    : strerror(errno));
            break;
        }
    }
    dl_tls_close(t);
    return NULL;
}

void dl_tls_close(dl_tls *t)
{
    if (!t)
        return;
    SSL_free(t->ssl);           /* and its two buffers */
    free(t);
    ERR_clear_error();
}

/* A send failed: if the server closed the link after a TLS alert (TLS
 * 1.3 refuses a missing client certificate only after the handshake),
 * the alert may still be there to read, and says more than EPIPE. */
static int write_refused(dl_tls *t, int fd, char *err, size_t errlen)
{
    int eno = errno;
    char buf[256];
    if ((eno == EPIPE || eno == ECONNRESET) && fill_in(t, fd, 0) > 0) {
        ERR_clear_error();
        int r = SSL_read(t->ssl, buf, (int)sizeof buf);
        if (r <= 0 && SSL_get_error(t->ssl, r) == SSL_ERROR_SSL) {
            tls_failed(t, "read", err, errlen);
            return DL_TLS_ERR;
        }
    }
    ERR_clear_error();
    errno = eno;
    return DL_TLS_EIO;
}

int dl_tls_write(dl_tls *t, int fd, const char *buf, size_t n, char *err,
                 size_t errlen)
{
    while (n > 0) {
        int chunk = n > 65536 ? 65536 : (int)n;
        ERR_clear_error();
        int r = SSL_write(t->ssl, buf, chunk);   /* into memory: all of it */
        if (r <= 0) {
            tls_failed(t, "write", err, errlen);
            return DL_TLS_ERR;
        }
        buf += r;
        n -= (size_t)r;
        if (flush_out(t, fd) != 0)
            return write_refused(t, fd, err, errlen);
    }
    return 0;
}

ssize_t dl_tls_read(dl_tls *t, int fd, char *buf, size_t cap, int wait,
                    char *err, size_t errlen)
{
    int want = cap > 65536 ? 65536 : (int)cap;
    for (;;) {
        ERR_clear_error();
        int r = SSL_read(t->ssl, buf, want);
        /* Reading may have OpenSSL answer (a key update): send that. */
        if (flush_out(t, fd) != 0)
            return DL_TLS_EIO;
        if (r > 0)
            return r;
        int e = SSL_get_error(t->ssl, r);
        if (e == SSL_ERROR_ZERO_RETURN)         /* close_notify */
            return DL_TLS_EOF;
        if (e != SSL_ERROR_WANT_READ) {
            tls_failed(t, "read", err, errlen);
            return DL_TLS_ERR;
        }
        ssize_t k = fill_in(t, fd, wait);
        if (k <= 0)
            return k;
    }
}

#endif
