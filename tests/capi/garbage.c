/*
 * garbage.c -- a 4th-order client that passes what it does not mean: h2 it never set (NaN,
 * or huge), and NaN in aold, j6old and phiold, which 4th order does not read (Sapporo2's
 * example integrator, testCodes/src/test_integrator.cpp, does so).  The forces must not
 * suffer.
 *
 * usage: garbage IC [nanv]   (IC: "n" then n lines "m x y z vx vy vz", n <= 128; nanv: the
 *                              i-particles' velocities NaN, which order 2 does not read)
 * Prints "npipes <n>", "open <rc>", then per force call CALL (h2 all NaN, h2 mixed, h2 all
 * 1e300, each run twice so that the second can take the direct path):
 *   "F <CALL> <i> ax ay az jx jy jz pot nn"
 *   "NB <CALL> <i> <rc of g6_get_neighbour_list> <nblen>"
 *   "RC <CALL> <rc of lasthalf2> <rc of g6_read_neighbour_list> <sapporo_direct_calls()>"
 * and "END".  The mixed h2 cycles NaN, 0.05, -inf, inf, 1e300 over the i-particles.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sapporo.h"

#define NMAX 128

static int n, idx[NMAX], nnb[NMAX], nbl[NMAX];
static double m[NMAX], x[NMAX][3], v[NMAX][3], vi[NMAX][3];
static double acc[NMAX][3], jerk[NMAX][3], pot[NMAX], h2[NMAX];
static double aold[NMAX][3], j6old[NMAX][3], phiold[NMAX];

/* the h2 of call kind k for i-particle i */
static double h2_of(int k, int i)
{
    static const double mixed[5] = {NAN, 0.05, -INFINITY, INFINITY, 1e300};
    if (k == 0)
        return NAN;
    if (k == 1)
        return mixed[i % 5];
    return 1e300;
}

int main(int argc, char **argv)
{
    static const char *names[3] = {"nan", "mixed", "huge"};
    double zero[3] = {0, 0, 0};
    FILE *f = argc > 1 ? fopen(argv[1], "r") : NULL;
    int rc;
    if (f == NULL || fscanf(f, "%d", &n) != 1 || n < 2 || n > NMAX)
        return 2;
    for (int i = 0; i < n; i++) {
        if (fscanf(f, "%lf %lf %lf %lf %lf %lf %lf", &m[i], &x[i][0], &x[i][1], &x[i][2],
                   &v[i][0], &v[i][1], &v[i][2]) != 7)
            return 2;
        idx[i] = i;
        aold[i][0] = aold[i][1] = aold[i][2] = NAN;
        j6old[i][0] = j6old[i][1] = j6old[i][2] = NAN;
        phiold[i] = NAN;
        for (int c = 0; c < 3; c++)
            vi[i][c] = argc > 2 ? NAN : v[i][c];
    }
    fclose(f);
    printf("npipes %d\n", g6_npipes());
    rc = g6_open(0);
    printf("open %d\n", rc);
    if (rc != 0 || g6_npipes() < n)
        return 3;
    for (int i = 0; i < n; i++)
        g6_set_j_particle(0, i, i, 0.0, 0.0, m[i], zero, zero, zero, v[i], x[i]);
    g6_set_ti(0, 0.0);
    for (int call = 0; call < 6; call++) {
        int k = call / 2, rc_read;
        for (int i = 0; i < n; i++)
            h2[i] = h2_of(k, i);
        g6calc_firsthalf(0, n, n, idx, x, vi, aold, j6old, phiold, 0.0, h2);
        rc = g6calc_lasthalf2(0, n, n, idx, x, vi, 0.0, h2, acc, jerk, pot, nnb);
        rc_read = g6_read_neighbour_list(0);
        for (int i = 0; i < n; i++) {
            int len = -1, rc_get = g6_get_neighbour_list(0, i, NMAX, &len, nbl);
            printf("F %s %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d\n", names[k], i,
                   acc[i][0], acc[i][1], acc[i][2], jerk[i][0], jerk[i][1], jerk[i][2], pot[i],
                   nnb[i]);
            printf("NB %s %d %d %d\n", names[k], i, rc_get, len);
        }
        printf("RC %s %d %d %ld\n", names[k], rc, rc_read, sapporo_direct_calls());
    }
    g6_close(0);
    printf("END\n");
    return 0;
}
