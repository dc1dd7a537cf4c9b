/*
 * ext8.c -- sapporo's order-8 extension: j-particles with snap, crackle and the 4th and 5th
 * derivatives (pop, d5), force calls with the i-particles' predicted jerks, returning snap
 * and crackle.
 *
 * usage: ext8 IC_FILE OUT TI EPS2
 *   IC_FILE: first line N, then N lines "m x(3) v(3) a(3) jerk(3) snap(3) crackle(3) pop(3)
 *   d5(3)" (the j-particles at t = 0; the i-particles are the same particles, unpredicted,
 *   with ai = a and ji = jerk).  Opens with sapporo_open(8, "double", ...), predicts to TI
 *   and writes OUT: "index ax ay az jx jy jz sx sy sz cx cy cz pot nnb nn_r2" per particle.
 *   A force call without the i-jerks (sapporo_calc_firsthalf) is refused first: its code
 *   and message go to stdout as "nojerk CODE MESSAGE".
 */
#include <stdio.h>
#include <stdlib.h>

#include "sapporo.h"

#define NCOL 25

int main(int argc, char **argv)
{
    int n, rc;
    if (argc != 5)
        return fprintf(stderr, "usage: ext8 IC_FILE OUT TI EPS2\n"), 2;
    FILE *f = fopen(argv[1], "r");
    if (!f || fscanf(f, "%d", &n) != 1)
        return 2;
    double ti = atof(argv[3]), eps2 = atof(argv[4]);
    double (*d)[NCOL] = malloc(sizeof(double[NCOL]) * n);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < NCOL; k++)
            if (fscanf(f, "%lf", &d[i][k]) != 1)
                return 2;
    fclose(f);
    if ((rc = sapporo_open(8, "double", NULL, 0, NULL)) != 0)
        return fprintf(stderr, "sapporo_open: %d\n", rc), 1;
    for (int i = 0; i < n; i++)
        if ((rc = sapporo_set_j_particle8(i, i, 0.0, d[i][0], d[i] + 1, d[i] + 4, d[i] + 7,
                                          d[i] + 10, d[i] + 13, d[i] + 16, d[i] + 19,
                                          d[i] + 22)) != 0)
            return fprintf(stderr, "sapporo_set_j_particle8: %d\n", rc), 1;
    if ((rc = g6_set_ti(0, ti)) != 0)
        return 1;
    int np = g6_npipes(), *idx = malloc(sizeof(int) * np), *nnb = malloc(sizeof(int) * n);
    double (*xi)[3] = malloc(sizeof(double[3]) * np), (*vi)[3] = malloc(sizeof(double[3]) * np);
    double (*ai)[3] = malloc(sizeof(double[3]) * np), (*ji)[3] = malloc(sizeof(double[3]) * np);
    double (*acc)[3] = malloc(sizeof(double[3]) * n), (*jerk)[3] = malloc(sizeof(double[3]) * n);
    double (*snap)[3] = malloc(sizeof(double[3]) * n), *pot = malloc(sizeof(double) * n);
    double (*crackle)[3] = malloc(sizeof(double[3]) * n), *nn_r2 = malloc(sizeof(double) * n);

    /* order 8 without the i-particles' jerks: refused, and the library carries on */
    idx[0] = 0;
    for (int k = 0; k < 3; k++)
        xi[0][k] = d[0][1 + k], vi[0][k] = d[0][4 + k], ai[0][k] = d[0][7 + k];
    sapporo_calc_firsthalf(n, 1, idx, xi, vi, ai, eps2, NULL);
    rc = sapporo_calc_lasthalf(1, acc, jerk, snap, pot, nnb, nn_r2);
    printf("nojerk %d %s\n", rc, sapporo_last_error());

    for (int c0 = 0; c0 < n; c0 += np) {
        int nc = n - c0 < np ? n - c0 : np;
        for (int q = 0; q < nc; q++) {
            idx[q] = c0 + q;
            for (int k = 0; k < 3; k++)
                xi[q][k] = d[c0 + q][1 + k], vi[q][k] = d[c0 + q][4 + k],
                ai[q][k] = d[c0 + q][7 + k], ji[q][k] = d[c0 + q][10 + k];
        }
        sapporo_calc_firsthalf8(n, nc, idx, xi, vi, ai, ji, eps2, NULL);
        if ((rc = sapporo_calc_lasthalf8(nc, acc + c0, jerk + c0, snap + c0, crackle + c0,
                                         pot + c0, nnb + c0, nn_r2 + c0)) != 0)
            return fprintf(stderr, "sapporo_calc_lasthalf8: %d %s\n", rc,
                           sapporo_last_error()), 1;
    }
    f = fopen(argv[2], "w");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%d", i);
        for (int k = 0; k < 3; k++)
            fprintf(f, " %.17g", acc[i][k]);
        for (int k = 0; k < 3; k++)
            fprintf(f, " %.17g", jerk[i][k]);
        for (int k = 0; k < 3; k++)
            fprintf(f, " %.17g", snap[i][k]);
        for (int k = 0; k < 3; k++)
            fprintf(f, " %.17g", crackle[i][k]);
        fprintf(f, " %.17g %d %.17g\n", pot[i], nnb[i], nn_r2[i]);
    }
    fclose(f);
    return g6_close(0);
}
