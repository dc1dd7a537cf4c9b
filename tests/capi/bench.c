/*
 * bench.c -- host cost of the C API: g6_set_j_particle, the batch flush, and a force call.
 *
 * usage: bench N NI REPS
 * Stores N j-particles (a fixed pseudo-random cloud), then times: N g6_set_j_particle calls
 * (buffered), one g6_flush_jp_buffer (the batch to Python), and REPS force calls
 * (g6calc_firsthalf + g6calc_lasthalf on NI i-particles, no j-particle changes in between).
 * Prints "set_j_us <per call> flush_us <per batch> force_us <median per call>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grape6.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

static double coord(int i, int k)
{
    /* deterministic, well spread points in [-1, 1) */
    unsigned u = (unsigned)(i * 3 + k) * 2654435761u;
    return (u >> 8) / 8388608.0 - 1.0;
}

int main(int argc, char **argv)
{
    if (argc != 4)
        return fprintf(stderr, "usage: bench N NI REPS\n"), 2;
    int n = atoi(argv[1]), ni = atoi(argv[2]), reps = atoi(argv[3]), rc;
    if ((rc = g6_open(0)) != 0 || ni > g6_npipes())
        return fprintf(stderr, "bench: open failed (%d) or ni above npipes\n", rc), 1;
    double (*x)[3] = malloc(sizeof(double[3]) * n), zero[3] = {0, 0, 0};
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++)
            x[i][k] = coord(i, k);

    double t0 = now();
    for (int i = 0; i < n; i++)
        g6_set_j_particle(0, i, i, 0.0, 0.0, 1.0 / n, zero, zero, zero, zero, x[i]);
    double t1 = now();
    if ((rc = g6_flush_jp_buffer(0)) != 0)
        return fprintf(stderr, "bench: flush failed (%d)\n", rc), 1;
    double t2 = now();
    g6_set_ti(0, 0.0);

    int *idx = malloc(sizeof(int) * ni);
    double (*xi)[3] = malloc(sizeof(double[3]) * ni), (*vi)[3] = calloc((size_t)ni, 24);
    double (*acc)[3] = malloc(sizeof(double[3]) * ni), (*jerk)[3] = malloc(sizeof(double[3]) * ni);
    double *pot = malloc(sizeof(double) * ni), *h2 = calloc((size_t)ni, 8);
    double *times = malloc(sizeof(double) * reps);
    for (int q = 0; q < ni; q++) {
        idx[q] = q;
        memcpy(xi[q], x[q], sizeof xi[q]);
    }
    for (int r = -3; r < reps; r++) {  /* 3 warm-up calls */
        double s = now();
        g6calc_firsthalf(0, n, ni, idx, xi, vi, acc, jerk, pot, 1e-4, h2);
        if ((rc = g6calc_lasthalf(0, n, ni, idx, xi, vi, 1e-4, h2, acc, jerk, pot)) != 0)
            return fprintf(stderr, "bench: force call failed (%d)\n", rc), 1;
        if (r >= 0)
            times[r] = now() - s;
    }
    qsort(times, (size_t)reps, sizeof(double), cmp);
    printf("set_j_us %.4f flush_us %.1f force_us %.1f\n", 1e6 * (t1 - t0) / n, 1e6 * (t2 - t1),
           1e6 * times[reps / 2]);
    g6_close(0);
    return 0;
}
