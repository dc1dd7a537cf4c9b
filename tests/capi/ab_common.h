/* ab_common.h -- what the programs whose outputs are compared bit for bit between two runs
 * share (tests/capi/direct_ab.c, warm_steps.c): their random numbers, and the neighbour
 * lists of the last force call printed. */
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
