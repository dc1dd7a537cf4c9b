/*
 * openfail.c -- a client that checks nothing (as AMUSE's ph4 and phiGRAPE do) on a library
 * that could not be opened: g6_open's code is ignored, j-particles are stored and STEPS
 * block steps (g6_set_ti, g6calc_firsthalf, g6calc_lasthalf) are run anyway.
 *
 * Prints "open <rc>", "npipes <n>", one line "step <k> <rc of lasthalf> <pot[0]>" per step
 * and "END".  Exit status 0 when it ran to the end.
 */
#include <stdio.h>

#include "sapporo.h"

#define N 8
#define STEPS 25

static int idx[N];
static double xj[N][3], zero[3] = {0, 0, 0};
static double xi[N][3], vi[N][3], acc[N][3], jerk[N][3], pot[N];

int main(void)
{
    int rc = g6_open(0);
    printf("open %d\nnpipes %d\n", rc, g6_npipes());
    fflush(stdout);
    for (int i = 0; i < N; i++) {
        idx[i] = i;
        xj[i][0] = xi[i][0] = i;
    }
    for (int k = 0; k < STEPS; k++) {
        g6_set_ti(0, 0.01 * k);
        for (int i = 0; i < N; i++)
            g6_set_j_particle(0, i, i, 0.0, 0.0, 1.0, zero, zero, zero, zero, xj[i]);
        g6calc_firsthalf(0, N, N, idx, xi, vi, acc, jerk, pot, 0.0, NULL);
        rc = g6calc_lasthalf(0, N, N, idx, xi, vi, 0.0, NULL, acc, jerk, pot);
        printf("step %d %d %g\n", k, rc, pot[0]);
        fflush(stdout);
    }
    g6_close(0);
    printf("END\n");
    return 0;
}
