/*
 * hermite.c -- a 4th-order Hermite N-body integrator with block time steps, on sapporo's
 * GRAPE-6 interface (the same calls a GRAPE-6 board or sapporo_light would take).
 *
 * Build and run (the flags point at the library `sapporo capi` builds for this Python
 * environment; the first call builds it, which takes a few seconds):
 *
 *     cc -O2 -o hermite hermite.c $(sapporo capi flags) -lm
 *     ./hermite [N [T_END [ETA [EPS2]]]]        defaults: 1024 1 0.02 1e-4
 *
 * or `make` with the Makefile next to this file.  SAPPORO_PRECISION=double,
 * SAPPORO_BACKEND=cuda, SAPPORO_DEVICES=0,1 ... choose how it runs (README, "C and Fortran").
 *
 * It makes a Plummer sphere in Henon units (G = M = 1, E = -1/4) with its own random numbers,
 * integrates it to T_END (rounded up to a multiple of 1/16, when all particles are in step)
 * and prints the energy at both ends and the relative error.  Exit status 0, or 1 after a
 * library error (the library prints the reason; so does this program).
 *
 * The GRAPE-6 conventions, in short (grape6.h has them all):
 *   - j-particles are stored by address (a slot, 0 .. N-1 here) with an index (the
 *     particle's id, here the same number); an i-particle never feels a j-particle with its
 *     own index, so the i-particles can be stored as j-particles too, and eps2 = 0 works;
 *   - g6_set_j_particle takes snap/18, jerk/6 and acceleration/2, and the time tj of those
 *     values; the library predicts every j-particle to the time given to g6_set_ti;
 *   - forces are computed on at most g6_npipes() i-particles per call, started by
 *     g6calc_firsthalf and collected by g6calc_lasthalf.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sapporo.h" /* grape6.h, plus sapporo_last_error() */

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif
#define DT_MAX (1.0 / 16.0)
#define DT_MIN (1.0 / 1073741824.0)

static int n, npipes;
static double eps2, eta;
static double *m, *t, *dt, *pot;
static double (*x)[3], (*v)[3], (*a)[3], (*jk)[3];

static void check(int rc, const char *what)
{
    if (rc < 0) {
        fprintf(stderr, "hermite: %s failed: %s\n", what, sapporo_last_error());
        exit(1);
    }
}

/* ---------------------------------------------------------------- initial conditions */

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static double uniform(void) /* xorshift64*: uniform in [0, 1) */
{
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (double)((rng * 2685821657736338717ull) >> 11) * 0x1.0p-53;
}

static void isotropic(double r, double out[3])
{
    double z = (1.0 - 2.0 * uniform()) * r, phi = 2.0 * M_PI * uniform();
    double rho = sqrt(r * r - z * z);
    out[0] = rho * cos(phi), out[1] = rho * sin(phi), out[2] = z;
}

/* Plummer sphere (Aarseth, Henon & Wielen 1974), centred, in Henon units. */
static void plummer(void)
{
    const double scale = 3.0 * M_PI / 16.0;
    double cm[6] = {0};
    for (int i = 0; i < n; i++) {
        double r, q, g;
        do
            r = 1.0 / sqrt(pow(uniform(), -2.0 / 3.0) - 1.0);
        while (r > 10.0);
        do {
            q = uniform();
            g = 0.1 * uniform();
        } while (g > q * q * pow(1.0 - q * q, 3.5));
        m[i] = 1.0 / n;
        isotropic(r * scale, x[i]);
        isotropic(q * sqrt(2.0) * pow(1.0 + r * r, -0.25) / sqrt(scale), v[i]);
        for (int k = 0; k < 3; k++)
            cm[k] += m[i] * x[i][k], cm[3 + k] += m[i] * v[i][k];
    }
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++)
            x[i][k] -= cm[k], v[i][k] -= cm[3 + k];
}

/* ---------------------------------------------------------------- the library */

static void send_j(int i)
{
    double k18[3] = {0, 0, 0}, j6[3], a2[3];
    for (int k = 0; k < 3; k++)
        j6[k] = jk[i][k] / 6.0, a2[k] = a[i][k] / 2.0;
    check(g6_set_j_particle(0, i, i, t[i], dt[i], m[i], k18, j6, a2, v[i], x[i]),
          "g6_set_j_particle");
}

/* Forces at time ti on the ni particles list[] at positions xp, velocities vp (indexed by
 * particle), written to acc, jrk, phi (indexed like list), in chunks of g6_npipes(). */
static void forces(double ti, int ni, const int *list, double (*xp)[3], double (*vp)[3],
                   double (*acc)[3], double (*jrk)[3], double *phi)
{
    int *idx = malloc(sizeof(int) * npipes);
    double (*xi)[3] = malloc(sizeof(double[3]) * npipes);
    double (*vi)[3] = malloc(sizeof(double[3]) * npipes);
    check(g6_set_ti(0, ti), "g6_set_ti");
    for (int c = 0; c < ni; c += npipes) {
        int nc = ni - c < npipes ? ni - c : npipes;
        for (int q = 0; q < nc; q++) {
            idx[q] = list[c + q];
            memcpy(xi[q], xp[idx[q]], sizeof xi[q]);
            memcpy(vi[q], vp[idx[q]], sizeof vi[q]);
        }
        /* aold, j6old, phiold: hints for the hardware's number format; not needed here */
        g6calc_firsthalf(0, n, nc, idx, xi, vi, acc + c, jrk + c, phi + c, eps2, NULL);
        check(g6calc_lasthalf(0, n, nc, idx, xi, vi, eps2, NULL, acc + c, jrk + c, phi + c),
              "g6calc_lasthalf");
    }
    free(idx), free(xi), free(vi);
}

static double energy(double time, const int *all)
{
    double (*acc)[3] = malloc(sizeof(double[3]) * n), (*jrk)[3] = malloc(sizeof(double[3]) * n);
    double e = 0.0;
    forces(time, n, all, x, v, acc, jrk, pot);
    for (int i = 0; i < n; i++)
        e += m[i] * (0.5 * (v[i][0] * v[i][0] + v[i][1] * v[i][1] + v[i][2] * v[i][2])
                     + 0.5 * pot[i]);
    free(acc), free(jrk);
    return e;
}

/* ---------------------------------------------------------------- the integrator */

static double wall_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static double norm(const double *p)
{
    return sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
}

/* The largest power of two <= limit, halving dt_old, or doubling it where time allows. */
static double block_step(double limit, double dt_old, double time)
{
    double d = dt_old;
    while (d > limit && d > DT_MIN)
        d *= 0.5;
    if (d == dt_old && 2.0 * d <= limit && 2.0 * d <= DT_MAX && fmod(time, 2.0 * d) == 0.0)
        d *= 2.0;
    return d;
}

int main(int argc, char **argv)
{
    n = argc > 1 ? atoi(argv[1]) : 1024;
    double t_end = argc > 2 ? atof(argv[2]) : 1.0;
    eta = argc > 3 ? atof(argv[3]) : 0.02;
    eps2 = argc > 4 ? atof(argv[4]) : 1e-4;
    if (n < 2 || !(t_end > 0) || !(eta > 0) || !(eps2 >= 0)) {
        fprintf(stderr, "usage: hermite [N >= 2 [T_END > 0 [ETA > 0 [EPS2 >= 0]]]]\n");
        return 2;
    }
    t_end = ceil(t_end / DT_MAX) * DT_MAX;
    m = malloc(sizeof(double) * n), t = calloc(n, sizeof(double));
    dt = calloc(n, sizeof(double)), pot = malloc(sizeof(double) * n);
    x = malloc(sizeof(double[3]) * n), v = malloc(sizeof(double[3]) * n);
    a = calloc(n, sizeof(double[3])), jk = calloc(n, sizeof(double[3]));
    double (*xp)[3] = malloc(sizeof(double[3]) * n), (*vp)[3] = malloc(sizeof(double[3]) * n);
    double (*an)[3] = malloc(sizeof(double[3]) * n), (*jn)[3] = malloc(sizeof(double[3]) * n);
    int *active = malloc(sizeof(int) * n), *all = malloc(sizeof(int) * n);
    plummer();

    check(g6_open(0), "g6_open");
    npipes = g6_npipes();
    if (n > g6_get_nj_max()) {
        fprintf(stderr, "hermite: N = %d is more than the device holds (%d)\n", n,
                g6_get_nj_max());
        return 1;
    }
    printf("sapporo %s, N = %d, t_end = %g, eta = %g, eps2 = %g, %d i-particles per call\n",
           sapporo_version(), n, t_end, eta, eps2, npipes);

    /* First forces: every particle stored with zero derivatives at t = 0. */
    for (int i = 0; i < n; i++) {
        all[i] = i;
        send_j(i);
    }
    forces(0.0, n, all, x, v, a, jk, pot);
    for (int i = 0; i < n; i++) {
        dt[i] = block_step(0.01 * norm(a[i]) / norm(jk[i]), DT_MAX, 0.0);
        send_j(i); /* again, now with acceleration and jerk */
    }
    double e0 = energy(0.0, all);
    double start = wall_seconds();
    long steps = 0, blocks = 0;
    double time = 0.0;
    while (time < t_end) {
        /* the block: every particle whose step ends first */
        double tnext = INFINITY;
        for (int i = 0; i < n; i++)
            tnext = fmin(tnext, t[i] + dt[i]);
        int na = 0;
        for (int i = 0; i < n; i++)
            if (t[i] + dt[i] == tnext)
                active[na++] = i;
        time = tnext;
        for (int q = 0; q < na; q++) { /* predict */
            int i = active[q];
            double h = time - t[i];
            for (int k = 0; k < 3; k++) {
                xp[i][k] = x[i][k] + h * (v[i][k] + h * (a[i][k] / 2 + h * jk[i][k] / 6));
                vp[i][k] = v[i][k] + h * (a[i][k] + h * jk[i][k] / 2);
            }
        }
        forces(time, na, active, xp, vp, an, jn, pot);
        for (int q = 0; q < na; q++) { /* correct, choose the next step, store */
            int i = active[q];
            double h = time - t[i], s[3], c[3];
            for (int k = 0; k < 3; k++) {
                double da = a[i][k] - an[q][k];
                s[k] = (-6.0 * da - h * (4.0 * jk[i][k] + 2.0 * jn[q][k])) / (h * h);
                c[k] = (12.0 * da + 6.0 * h * (jk[i][k] + jn[q][k])) / (h * h * h);
                x[i][k] = xp[i][k] + h * h * h * h * (s[k] / 24 + h * c[k] / 120);
                v[i][k] = vp[i][k] + h * h * h * (s[k] / 6 + h * c[k] / 24);
                a[i][k] = an[q][k];
                jk[i][k] = jn[q][k];
                s[k] += h * c[k]; /* snap at the end of the step */
            }
            double a1 = norm(a[i]), j1 = norm(jk[i]), s1 = norm(s), c1 = norm(c);
            t[i] = time;
            dt[i] = block_step(sqrt(eta * (a1 * s1 + j1 * j1) / (j1 * c1 + s1 * s1)), h, time);
            send_j(i);
        }
        steps += na;
        blocks++;
    }
    double seconds = wall_seconds() - start;
    double e1 = energy(time, all);
    printf("t = %g: E0 = %.12f  E1 = %.12f  dE/E = %.3e\n", time, e0, e1, (e1 - e0) / e0);
    printf("%ld steps in %ld blocks, %.2f s\n", steps, blocks, seconds);
    check(g6_close(0), "g6_close");
    return 0;
}
