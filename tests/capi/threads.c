/*
 * threads.c -- the first call arrives from several threads at once; then concurrent stores.
 *
 * Phase 1: NT threads wait at a barrier and then make their first library call together
 * (half g6_npipes, half sapporo_version), which starts the embedded interpreter once.
 * Phase 2: after g6_open, the threads store disjoint j-particles concurrently.  The main
 * thread then computes forces on a few particles and compares them with a direct sum here.
 * Prints "OK npipes <n> version <v> maxerr <relative error>" and exits 0.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "sapporo.h"

#define NT 8
#define PER 64
#define N (NT * PER)
#define NI 16

static pthread_barrier_t barrier;
static int npipes_seen[NT];
static const char *version_seen[NT];
static int store_rc[NT];
static double x[N][3], m[N];

static void *first_call(void *arg)
{
    int id = (int)(size_t)arg;
    pthread_barrier_wait(&barrier);
    if (id % 2)
        version_seen[id] = sapporo_version();
    else
        npipes_seen[id] = g6_npipes();
    return NULL;
}

static void *store(void *arg)
{
    int id = (int)(size_t)arg;
    double z[3] = {0, 0, 0};
    pthread_barrier_wait(&barrier);
    for (int i = id * PER; i < (id + 1) * PER; i++)
        store_rc[id] |= g6_set_j_particle(0, i, i, 0.0, 0.0, m[i], z, z, z, z, x[i]);
    return NULL;
}

static int run(void *(*fn)(void *))
{
    pthread_t th[NT];
    pthread_barrier_init(&barrier, NULL, NT);
    for (int t = 0; t < NT; t++)
        if (pthread_create(&th[t], NULL, fn, (void *)(size_t)t) != 0)
            return -1;
    for (int t = 0; t < NT; t++)
        pthread_join(th[t], NULL);
    pthread_barrier_destroy(&barrier);
    return 0;
}

int main(void)
{
    for (int i = 0; i < N; i++) {
        m[i] = 1.0 / N;
        for (int k = 0; k < 3; k++)
            x[i][k] = sin(1.3 * i + 2.1 * k + 0.7 * i * k);
    }
    if (run(first_call) != 0)
        return printf("pthread_create failed\n"), 1;
    const char *ver = sapporo_version();
    for (int t = 0; t < NT; t++) {
        if (t % 2 && (version_seen[t] == NULL || strcmp(version_seen[t], ver) != 0))
            return printf("thread %d saw version %s\n", t, version_seen[t]), 1;
        if (t % 2 == 0 && npipes_seen[t] != npipes_seen[0])
            return printf("thread %d saw npipes %d\n", t, npipes_seen[t]), 1;
    }
    if (npipes_seen[0] < NI || ver[0] == '\0')
        return printf("bad npipes %d or version '%s'\n", npipes_seen[0], ver), 1;
    if (g6_open(0) != 0 || run(store) != 0)
        return printf("open or store failed: %s\n", sapporo_last_error()), 1;
    for (int t = 0; t < NT; t++)
        if (store_rc[t] != 0)
            return printf("thread %d: g6_set_j_particle failed\n", t), 1;
    if (g6_set_ti(0, 0.0) != 0)
        return printf("g6_set_ti failed\n"), 1;

    int idx[NI];
    double xi[NI][3], vi[NI][3] = {{0}}, acc[NI][3], jerk[NI][3], pot[NI], eps2 = 1e-2;
    double maxerr = 0.0;
    for (int q = 0; q < NI; q++) {
        int i = q * (N / NI);
        idx[q] = i;
        memcpy(xi[q], x[i], sizeof xi[q]);
    }
    g6calc_firsthalf(0, N, NI, idx, xi, vi, acc, jerk, pot, eps2, NULL);
    if (g6calc_lasthalf(0, N, NI, idx, xi, vi, eps2, NULL, acc, jerk, pot) != 0)
        return printf("force failed: %s\n", sapporo_last_error()), 1;
    for (int q = 0; q < NI; q++) {
        double ref[3] = {0, 0, 0}, scale = 0.0;
        for (int i = 0; i < N; i++) {
            if (i == idx[q])
                continue;
            double r[3], r2 = eps2;
            for (int k = 0; k < 3; k++)
                r[k] = x[i][k] - xi[q][k], r2 += r[k] * r[k];
            double f = m[i] / (r2 * sqrt(r2));
            for (int k = 0; k < 3; k++)
                ref[k] += f * r[k];
            scale += f * sqrt(r2 - eps2);
        }
        double d = sqrt(pow(acc[q][0] - ref[0], 2) + pow(acc[q][1] - ref[1], 2)
                        + pow(acc[q][2] - ref[2], 2)) / scale;
        if (d > maxerr)
            maxerr = d;
    }
    printf("OK npipes %d version %s maxerr %.3g\n", npipes_seen[0], ver, maxerr);
    return g6_close(0);
}
