/* ab_common.h -- what the programs whose outputs are compared bit for bit between two runs
 * share (tests/capi/direct_ab.c, warm_steps.c): their random numbers, the i-particles of a
 * step, and the neighbour lists of the last force call printed. */
#ifndef AB_COMMON_H
#define AB_COMMON_H

#include <stdio.h>

#include "grape6.h"

static unsigned long long seed = 88172645463325252ull;

static double rnd(void)  /* in [-1, 1) */
{
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return (double)(seed >> 11) / 4503599627370496.0 - 1.0;
}

/* The ni i-particles of step s, k = (37 s + 13 m) mod n for m < ni: their indices and
 * their x, v, a and jerk copied from the j-particles' arrays. */
static void pick_block(int s, int ni, int n, double (*x)[3], double (*v)[3], double (*a)[3],
                       double (*jk)[3], int *idx, double (*xi)[3], double (*vi)[3],
                       double (*ai)[3], double (*ji)[3])
{
    for (int m = 0; m < ni; m++) {
        int k = (s * 37 + m * 13) % n;
        idx[m] = k;
        for (int c = 0; c < 3; c++) {
            xi[m][c] = x[k][c];
            vi[m][c] = v[k][c];
            ai[m][c] = a[k][c];
            ji[m][c] = jk[k][c];
        }
    }
}

/* Entries a list does not fill (beyond what an overflowing list stored) print as -1. */
static void print_lists(int ni)
{
    int list[64], nblen = -1;
    printf("read_neighbour_list %d\n", g6_read_neighbour_list(0));
    for (int i = 0; i < ni; i++) {
        for (int q = 0; q < 64; q++)
            list[q] = -1;
        int rc = g6_get_neighbour_list(0, i, 64, &nblen, list);
        printf("list %d rc %d len %d", i, rc, nblen);
        for (int q = 0; q < nblen && q < 64; q++)
            printf(" %d", list[q]);
        printf("\n");
    }
}

#endif
