/*
 * direct_ab.c -- a block-step sequence whose every result is printed bit for bit (%a): two
 * runs must print the same, and a run with other j-parts the same forces to rounding
 * (tests/capi/test_capi_direct.py).  The sequence also walks through what makes new plans:
 * a new address, neighbour lists, a field point, part of the j-range, a derivative the
 * predictor did not read yet; and through refused input and a non-finite force.
 *
 * usage: direct_ab ORDER PRECISION
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grape6.h"
#include "sapporo.h"
#include "ab_common.h"

#define N 700
#define NMAX 128

static double x[N + 1][3], v[N + 1][3], a[N + 1][3], jk[N + 1][3], sn[N + 1][3],
    pp[N + 1][3];
static int order8;

/* with_snap: snap (and at order 8 pop) given, which the predictor did not read so far */
static void store(int k, double t, int with_snap)
{
    const double zero[3] = {0.0, 0.0, 0.0};
    int rc = order8 ? sapporo_set_j_particle8(k, k, t, 1.0 / N, x[k], v[k], a[k], jk[k],
                                              with_snap ? sn[k] : zero, NULL,
                                              with_snap ? pp[k] : NULL, NULL)
                    : sapporo_set_j_particle(k, k, t, 1.0 / N, x[k], v[k], a[k], jk[k],
                                             with_snap ? sn[k] : zero, NULL);
    if (rc != 0)
        printf("set_j %d rc %d\n", k, rc);
}

static void print3(const char *name, double (*p)[3], int n)
{
    for (int i = 0; i < n; i++)
        printf("%s %d %a %a %a\n", name, i, p[i][0], p[i][1], p[i][2]);
}

int main(int argc, char **argv)
{
    static const int sizes[] = {1, 2, 3, 7, 16, 33, 64, 100, 128};
    static double xi[NMAX][3], vi[NMAX][3], ai[NMAX][3], ji[NMAX][3], acc[NMAX][3],
        jerk[NMAX][3], snap[NMAX][3], crackle[NMAX][3], pot[NMAX], h2[NMAX], nn_r2[NMAX];
    static int idx[NMAX], nnb[NMAX];
    int order = argc > 1 ? atoi(argv[1]) : 4, n = N;
    order8 = order == 8;
    double t = 0.0;
    if (sapporo_open(order, argc > 2 ? argv[2] : "double-single", NULL, 0, NULL) != 0) {
        printf("open failed: %s\n", sapporo_last_error());
        return 1;
    }
    for (int k = 0; k <= N; k++)
        for (int c = 0; c < 3; c++) {
            x[k][c] = rnd();
            v[k][c] = 0.3 * rnd();
            a[k][c] = 0.1 * rnd();
            jk[k][c] = 0.01 * rnd();
            sn[k][c] = 0.001 * rnd();
            pp[k][c] = 0.0001 * rnd();
        }
    for (int k = 0; k < N; k++)
        store(k, 0.0, 0);
    for (int step = 0; step < 80; step++) {
        /* neighbour lists at steps 20, 27, 28 (one negative radius), 29 (no positive one:
         * none) and 44 (part of the j-range) */
        int ni = sizes[step % 9], nj = n, rc,
            lists = step == 20 || step == 27 || step == 28 || step == 29 || step == 44;
        double eps2 = step >= 30 && step != 75 ? 0.0 : 1e-4;
        pick_block(step, ni, n, x, v, a, jk, idx, xi, vi, ai, ji);
        for (int m = 0; m < ni; m++)
            h2[m] = !lists ? 0.0 : step == 29 ? -1.0 : step == 28 && m == 1 ? -1.0 : 0.09;
        if (step == 10) {  /* a new address: the library grows, Python's way */
            store(N, t, 0);
            n = N + 1;
        }
        if (step == 40)
            idx[0] = -1;   /* a field point */
        if (step == 50 || step == 44)
            nj = n / 2;
        if (step == 60)
            store(5, t, 1);  /* snap appears: the predictor reads one record more */
        if (step == 70)
            xi[0][1] = NAN;  /* refused */
        if (step == 75) {  /* on top of j-particle 3, another index, no softening */
            for (int c = 0; c < 3; c++)
                xi[0][c] = x[3][c];
            idx[0] = 100000;
            eps2 = 0.0;
        }
        t += 1.0 / 1024;
        g6_set_ti(0, t);
        if (order8) {
            sapporo_calc_firsthalf8(nj, ni, idx, xi, vi, ai, ji, eps2, lists ? h2 : NULL);
            rc = sapporo_calc_lasthalf8(ni, acc, jerk, snap, crackle, pot, nnb, nn_r2);
        }
        else {
            sapporo_calc_firsthalf(nj, ni, idx, xi, vi, ai, eps2, lists ? h2 : NULL);
            rc = sapporo_calc_lasthalf(ni, acc, jerk, snap, pot, nnb, nn_r2);
        }
        printf("step %d ni %d nj %d rc %d\n", step, ni, nj, rc);
        if (rc < 0) {
            printf("error %s\n", sapporo_last_error());
            continue;
        }
        print3("acc", acc, ni);
        print3("jerk", jerk, ni);
        print3("snap", snap, ni);
        if (order8)
            print3("crackle", crackle, ni);
        for (int i = 0; i < ni; i++)
            printf("pot %d %a nn %d %a\n", i, pot[i], nnb[i], nn_r2[i]);
        if (step == 23) {  /* a crossing into Python between the step and its lists */
            store(7, t, 0);
            printf("flush %d\n", g6_flush_jp_buffer(0));
        }
        if (lists || step == 21 || step == 23)  /* lists, then none without them */
            print_lists(ni);
        /* the block's particles move on and are stored again */
        for (int m = 0; m < ni; m++) {
            int k = idx[m] < 0 || idx[m] >= n ? 0 : idx[m];
            for (int c = 0; c < 3; c++)
                x[k][c] += 1e-3 * v[k][c];
            store(k, t, step >= 60 && k == 5);
        }
        if (step == 74) {  /* j-particle 3 stops: predicted, it stays where it is */
            for (int c = 0; c < 3; c++)
                v[3][c] = a[3][c] = jk[3][c] = sn[3][c] = pp[3][c] = 0.0;
            store(3, t, 0);
        }
    }
    fprintf(stderr, "direct_calls %ld\n", sapporo_direct_calls());
    printf("close %d\n", g6_close(0));
    return 0;
}
