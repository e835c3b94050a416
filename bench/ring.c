/* SPDX-License-Identifier: MIT
 * ring.c: the machine's own floor for M6's wait target. N processes pass
 * one byte around a ring of pipes: a perfect FIFO handover with no Redis,
 * no Lua and no lock, so every wait is the queue ahead plus whatever the
 * scheduler adds. Each process measures how long it waited for the byte,
 * from passing it on to having it back, in the middle 90% of the window
 * (as M6 counts its waits).
 *
 * Usage: ring N SECONDS
 * Prints one line per process: "waits median_ms p999_ms max_ms".
 * Built by `make bench` into build/bench/ring.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_N 64
#define MAX_WAITS 4000000

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* One member of the ring: read from `in`, write to `out`, until the
 * window ends (then close `out`, which ends the ring one by one). */
static int member(int first, int in, int out, double secs)
{
    double *w = malloc(MAX_WAITS * sizeof *w);
    if (!w)
        return 1;
    size_t k = 0;
    char c = 'x';
    double t0 = now(), end = t0 + secs, sent = t0;
    if (first && write(out, &c, 1) != 1)
        return 1;
    while (read(in, &c, 1) == 1) {
        double t = now();
        if (k < MAX_WAITS && t > t0 + 0.05 * secs && t < end - 0.05 * secs)
            w[k++] = (t - sent) * 1e3;
        if (t > end || write(out, &c, 1) != 1)
            break;
        sent = now();
    }
    close(out);
    qsort(w, k, sizeof *w, by_value);
    if (k)
        printf("%zu %.4f %.4f %.4f\n", k, w[k / 2], w[(size_t)(k * 0.999)], w[k - 1]);
    fflush(stdout);
    free(w);
    return 0;
}

int main(int argc, char **argv)
{
    int n = argc > 2 ? atoi(argv[1]) : 0;
    double secs = argc > 2 ? atof(argv[2]) : 0;
    if (n < 2 || n > MAX_N || secs <= 0) {
        fprintf(stderr, "usage: ring N(2..%d) SECONDS\n", MAX_N);
        return 2;
    }
    int p[MAX_N][2];
    for (int i = 0; i < n; i++)
        if (pipe(p[i]) != 0)
            return 1;
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0)
            return 1;
        if (pid == 0) {
            int in = p[i][0], out = p[(i + 1) % n][1];
            for (int j = 0; j < n; j++) {    /* keep only this member's ends */
                if (p[j][0] != in)
                    close(p[j][0]);
                if (p[j][1] != out)
                    close(p[j][1]);
            }
            return member(i == 0, in, out, secs);
        }
    }
    for (int j = 0; j < n; j++) {
        close(p[j][0]);
        close(p[j][1]);
    }
    int status, rc = 0;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            rc = 1;
    return rc;
}
