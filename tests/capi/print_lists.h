/* print_lists.h -- the neighbour lists of the last force call, printed for a bit-for-bit
 * comparison of two runs (tests/capi/direct_ab.c, warm_steps.c). */
#ifndef PRINT_LISTS_H
#define PRINT_LISTS_H

#include <stdio.h>

#include "grape6.h"

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
