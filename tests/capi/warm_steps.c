/*
 * warm_steps.c -- block steps whose every result is printed bit for bit (%a), run twice
 * with the same settings: the first open starts Python and its g6_close leaves a recipe,
 * the second opens without Python (capi/warm.c).  The outputs must be equal.  On stderr:
 * "python P warm W direct D" (Python started or not, opens served without it, force calls
 * on the direct path).
 *
 * usage: warm_steps ORDER PRECISION [extra [N]]
 *   extra = 1: after the steps, one j-particle at a new address and one more step (the
 *   recipe has no plan for it: Python starts, takes the j-particles stored so far and
 *   serves the step).  N: the j-particles (default and at most 600).
 */
#include <stdio.h>
#include <stdlib.h>

#include "grape6.h"
#include "sapporo.h"
#include "ab_common.h"

#define NJ_MAX 600
#define NMAX 64

static int N = NJ_MAX;

static double x[NJ_MAX + 1][3], v[NJ_MAX + 1][3], a[NJ_MAX + 1][3], jk[NJ_MAX + 1][3],
    sn[NJ_MAX + 1][3];
static int order;

static void store(int k, double t)
{
    int rc = order == 8 ? sapporo_set_j_particle8(k, k, t, 1.0 / N, x[k], v[k], a[k], jk[k],
                                                  sn[k], NULL, NULL, NULL)
                        : sapporo_set_j_particle(k, k, t, 1.0 / N, x[k], v[k], a[k], jk[k],
                                                 order >= 6 ? sn[k] : NULL, NULL);
    if (rc != 0)
        printf("set_j %d rc %d %s\n", k, rc, sapporo_last_error());
}

static int step(int s, int n, double t)
{
    static double xi[NMAX][3], vi[NMAX][3], ai[NMAX][3], ji[NMAX][3], acc[NMAX][3],
        jerk[NMAX][3], snap[NMAX][3], crackle[NMAX][3], pot[NMAX], h2[NMAX], nn_r2[NMAX];
    static int idx[NMAX], nnb[NMAX];
    static const int sizes[] = {1, 2, 5, 16, 33, 64};
    int ni = sizes[s % 6], rc, lists = s % 7 == 3;
    pick_block(s, ni, n, x, v, a, jk, idx, xi, vi, ai, ji);
    for (int m = 0; m < ni; m++)
        h2[m] = lists ? 0.09 : 0.0;
    g6_set_ti(0, t);
    if (order == 8) {
        sapporo_calc_firsthalf8(n, ni, idx, xi, vi, ai, ji, 1e-4, lists ? h2 : NULL);
        rc = sapporo_calc_lasthalf8(ni, acc, jerk, snap, crackle, pot, nnb, nn_r2);
    }
    else {
        sapporo_calc_firsthalf(n, ni, idx, xi, vi, ai, 1e-4, lists ? h2 : NULL);
        rc = sapporo_calc_lasthalf(ni, acc, jerk, snap, pot, nnb, nn_r2);
    }
    printf("step %d ni %d rc %d\n", s, ni, rc);
    if (rc < 0)
        return printf("error %s\n", sapporo_last_error()), rc;
    for (int i = 0; i < ni; i++) {
        printf("%d %a %a %a %a %a %a %a %d %a", i, acc[i][0], acc[i][1], acc[i][2], jerk[i][0],
               jerk[i][1], jerk[i][2], pot[i], nnb[i], nn_r2[i]);
        if (order >= 6)
            printf(" %a %a %a", snap[i][0], snap[i][1], snap[i][2]);
        if (order == 8)
            printf(" %a %a %a", crackle[i][0], crackle[i][1], crackle[i][2]);
        printf("\n");
    }
    if (lists)
        print_lists(ni);
    /* the block moves on and is stored again */
    for (int m = 0; m < ni; m++) {
        for (int c = 0; c < 3; c++)
            x[idx[m]][c] += 1e-3 * v[idx[m]][c];
        store(idx[m], t);
    }
    return 0;
}

int main(int argc, char **argv)
{
    double t = 0.0;
    int extra = argc > 3 ? atoi(argv[3]) : 0;
    if (argc > 4)
        N = atoi(argv[4]);
    if (N < 100 || N > NJ_MAX) {
        printf("N = %d: expected 100 to %d\n", N, NJ_MAX);
        return 1;
    }
    order = argc > 1 ? atoi(argv[1]) : 4;
    /* clients size their arrays first: no reason to start Python */
    printf("npipes before open %d\n", g6_npipes());
    if (sapporo_open(order, argc > 2 ? argv[2] : "double-single", NULL, 0, NULL) != 0) {
        printf("open failed: %s\n", sapporo_last_error());
        return 1;
    }
    printf("npipes %d nj_max %d version %s\n", g6_npipes(), g6_get_nj_max(),
           sapporo_version());
    for (int k = 0; k <= N; k++)
        for (int c = 0; c < 3; c++) {
            x[k][c] = rnd();
            v[k][c] = 0.3 * rnd();
            a[k][c] = 0.1 * rnd();
            jk[k][c] = 0.01 * rnd();
            sn[k][c] = 0.001 * rnd();
        }
    for (int k = 0; k < N; k++)
        store(k, 0.0);
    for (int s = 0; s < 30; s++) {
        t += 1.0 / 1024;
        step(s, N, t);
    }
    if (extra) {  /* an address the first run never stored */
        store(N, t);
        t += 1.0 / 1024;
        step(30, N + 1, t);
    }
    fprintf(stderr, "python %d warm %ld direct %ld\n", sapporo_python_started(),
            sapporo_warm_starts(), sapporo_direct_calls());
    printf("close %d\n", g6_close(0));
    return 0;
}
