/*
 * ext.c -- sapporo's extensions: 6th order, unscaled j-particles with snap and crackle,
 * force calls returning snap and the nearest-neighbour distance.
 *
 * usage: ext IC_FILE OUT TI EPS2
 *   IC_FILE: first line N, then N lines "m x(3) v(3) a(3) jerk(3) snap(3) crackle(3)"
 *   (the j-particles at t = 0; the i-particles are the same particles, unpredicted, with
 *   ai = a).  Opens with sapporo_open(6, "double", ...), predicts to TI and writes OUT:
 *   "index ax ay az jx jy jz sx sy sz pot nnb nn_r2" per particle.
 */
#include <stdio.h>
#include <stdlib.h>

#include "sapporo.h"

int main(int argc, char **argv)
{
    int n, rc;
    if (argc != 5)
        return fprintf(stderr, "usage: ext IC_FILE OUT TI EPS2\n"), 2;
    FILE *f = fopen(argv[1], "r");
    if (!f || fscanf(f, "%d", &n) != 1)
        return 2;
    double ti = atof(argv[3]), eps2 = atof(argv[4]);
    double (*d)[19] = malloc(sizeof(double[19]) * n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < 19; k++)
            if (fscanf(f, "%lf", &d[i][k]) != 1)
                return 2;
    fclose(f);
    if ((rc = sapporo_open(6, "double", NULL, 0, NULL)) != 0)
        return fprintf(stderr, "sapporo_open: %d\n", rc), 1;
    for (int i = 0; i < n; i++)
        if ((rc = sapporo_set_j_particle(i, i, 0.0, d[i][0], d[i] + 1, d[i] + 4, d[i] + 7,
                                         d[i] + 10, d[i] + 13, d[i] + 16)) != 0)
            return fprintf(stderr, "sapporo_set_j_particle: %d\n", rc), 1;
    if ((rc = g6_set_ti(0, ti)) != 0)
        return 1;
    int np = g6_npipes(), *idx = malloc(sizeof(int) * np), *nnb = malloc(sizeof(int) * n);
    double (*xi)[3] = malloc(sizeof(double[3]) * np), (*vi)[3] = malloc(sizeof(double[3]) * np);
    double (*ai)[3] = malloc(sizeof(double[3]) * np);
    double (*acc)[3] = malloc(sizeof(double[3]) * n), (*jerk)[3] = malloc(sizeof(double[3]) * n);
    double (*snap)[3] = malloc(sizeof(double[3]) * n), *pot = malloc(sizeof(double) * n);
    double *nn_r2 = malloc(sizeof(double) * n);
    for (int c0 = 0; c0 < n; c0 += np) {
        int nc = n - c0 < np ? n - c0 : np;
        for (int q = 0; q < nc; q++) {
            idx[q] = c0 + q;
            for (int k = 0; k < 3; k++)
                xi[q][k] = d[c0 + q][1 + k], vi[q][k] = d[c0 + q][4 + k],
                ai[q][k] = d[c0 + q][7 + k];
        }
        sapporo_calc_firsthalf(n, nc, idx, xi, vi, ai, eps2, NULL);
        if ((rc = sapporo_calc_lasthalf(nc, acc + c0, jerk + c0, snap + c0, pot + c0, nnb + c0,
                                        nn_r2 + c0)) != 0)
            return fprintf(stderr, "sapporo_calc_lasthalf: %d %s\n", rc, sapporo_last_error()), 1;
    }
    f = fopen(argv[2], "w");
    for (int i = 0; i < n; i++)
        fprintf(f, "%d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d %.17g\n",
                i, acc[i][0], acc[i][1], acc[i][2], jerk[i][0], jerk[i][1], jerk[i][2],
                snap[i][0], snap[i][1], snap[i][2], pot[i], nnb[i], nn_r2[i]);
    fclose(f);
    return g6_close(0);
}
