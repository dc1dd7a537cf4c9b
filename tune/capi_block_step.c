/*
 * capi_block_step.c -- what a block step costs through the GRAPE-6 C API.
 *
 * usage: capi_block_step N NACTIVE STEPS
 *
 * Stores N j-particles (a deterministic cloud in a unit sphere, equal masses), then runs
 * STEPS block steps as a GRAPE-6 Hermite client makes them: g6_set_j_particle for the
 * NACTIVE particles just corrected, g6_set_ti, g6calc_firsthalf and g6calc_lasthalf on the
 * next NACTIVE particles. Prints the median time per call of each kind and of the whole
 * step, in microseconds, and the interactions per second of the whole step:
 *
 *   open_ms <g6_open> set_j_us <per particle> set_ti_us <..> firsthalf_us <..>
 *   lasthalf_us <..> step_us <..> interactions_per_s <..>
 *
 * Build: cc -O2 capi_block_step.c $(sapporo capi flags) -o capi_block_step
 */
#include <stdio.h>
#include <stdlib.h>
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

static double median(double *v, int n)
{
    qsort(v, n, sizeof *v, cmp);
    return v[n / 2];
}

/* a reproducible pseudo-random number in [0, 1) */
static double uniform(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s N NACTIVE STEPS\n", argv[0]);
        return 2;
    }
    int n = atoi(argv[1]), na = atoi(argv[2]), steps = atoi(argv[3]);
    if (n < 2 || na < 1 || na > n || steps < 1) {
        fprintf(stderr, "need N >= 2, 1 <= NACTIVE <= N, STEPS >= 1\n");
        return 2;
    }
    double (*x)[3] = malloc(sizeof(double[3]) * n), (*v)[3] = calloc(n, sizeof(double[3]));
    double (*acc)[3] = calloc(na, sizeof(double[3])), (*jerk)[3] = calloc(na, sizeof(double[3]));
    double *pot = calloc(na, sizeof(double)), *h2 = calloc(na, sizeof(double));
    double *t_set_j = malloc(sizeof(double) * steps), *t_ti = malloc(sizeof(double) * steps);
    double *t_first = malloc(sizeof(double) * steps), *t_last = malloc(sizeof(double) * steps);
    double *t_step = malloc(sizeof(double) * steps);
    int *idx = malloc(sizeof(int) * na);
    double zero[3] = {0, 0, 0};
    unsigned long long seed = 12345;
    for (int i = 0; i < n; i++) {
        double r2;
        do {
            for (int k = 0; k < 3; k++)
                x[i][k] = 2 * uniform(&seed) - 1;
            r2 = x[i][0] * x[i][0] + x[i][1] * x[i][1] + x[i][2] * x[i][2];
        } while (r2 > 1.0 || r2 < 1e-6);
    }
    double t0 = now();
    if (g6_open(0) < 0)
        return 1;
    double open_s = now() - t0;
    int npipes = g6_npipes();
    if (na > npipes) {
        fprintf(stderr, "NACTIVE %d above g6_npipes() = %d (set SAPPORO_NPIPES)\n", na, npipes);
        return 2;
    }
    g6_set_tunit(51);
    g6_set_xunit(51);
    for (int i = 0; i < n; i++)
        g6_set_j_particle(0, i, i, 0.0, 1.0 / 1024, 1.0 / n, zero, zero, zero, v[i], x[i]);
    double dt = 1.0 / 1024;
    for (int s = -10; s < steps; s++) {
        int first = (int)(((long long)(s + 10) * 7919) % (n - na + 1));
        double ti = (s + 11) * dt;
        double a = now();
        for (int k = 0; k < na; k++)
            g6_set_j_particle(0, first + k, first + k, ti - dt, dt, 1.0 / n, zero, zero, zero,
                              v[first + k], x[first + k]);
        double b = now();
        g6_set_ti(0, ti);
        double c = now();
        for (int k = 0; k < na; k++)
            idx[k] = first + k;
        g6calc_firsthalf(0, n, na, idx, &x[first], &v[first], acc, jerk, pot, 1e-4, h2);
        double d = now();
        int rc = g6calc_lasthalf(0, n, na, idx, &x[first], &v[first], 1e-4, h2, acc, jerk, pot);
        double e = now();
        if (rc < 0) {
            fprintf(stderr, "g6calc_lasthalf returned %d\n", rc);
            return 1;
        }
        if (s >= 0) {
            t_set_j[s] = (b - a) / na;
            t_ti[s] = c - b;
            t_first[s] = d - c;
            t_last[s] = e - d;
            t_step[s] = e - a;
        }
    }
    double step = median(t_step, steps);
    printf("open_ms %.1f set_j_us %.2f set_ti_us %.1f firsthalf_us %.1f lasthalf_us %.1f "
           "step_us %.1f interactions_per_s %.4g\n",
           1e3 * open_s, 1e6 * median(t_set_j, steps), 1e6 * median(t_ti, steps),
           1e6 * median(t_first, steps), 1e6 * median(t_last, steps), 1e6 * step,
           (double)na * n / step);
    g6_close(0);
    return 0;
}
