/*
 * g5_cycles.c -- GRAPE-5 opened and closed again and again, every context computing each
 * time: the process's resident memory stays flat (tests/capi/test_g5.py).
 *
 * Usage: g5_cycles CONTEXTS CYCLES.  Prints "cycle C rss_mb R" after each cycle (R from
 * /proc/self/statm), then "ok", and exits 0; a call that fails prints "FAIL ..." and exits 1.
 */
#include <stdio.h>
#include <stdlib.h>

#include "grape5.h"

#define NJ 256
#define NI 8

static double rss_mb(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL || fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    if (f != NULL)
        fclose(f);
    return resident * 4096.0 / 1048576.0;
}

int main(int argc, char **argv)
{
    static double xj[NJ][3], mj[NJ], a[NI][3], p[NI];
    const int contexts = argc > 1 ? atoi(argv[1]) : 16, cycles = argc > 2 ? atoi(argv[2]) : 10;
    for (int k = 0; k < NJ; k++) {
        for (int c = 0; c < 3; c++)
            xj[k][c] = (double)((k * 7 + c * 13) % 97) / 97.0 - 0.5;
        mj[k] = 1.0 / NJ;
    }
    for (int cycle = 0; cycle < cycles; cycle++) {
        if (g5_open() != 0) {
            printf("FAIL g5_open in cycle %d\n", cycle);
            return 1;
        }
        g5_set_eps_to_all(0.01);
        for (int id = 0; id < contexts; id++)
            if (g5_set_xmjMC(id, 0, NJ, xj, mj) != 0 || g5_set_nMC(id, NJ) != 0
                || g5_calculate_force_on_xMC(id, xj, a, p, NI) != 0) {
                printf("FAIL context %d in cycle %d\n", id, cycle);
                return 1;
            }
        g5_close();
        printf("cycle %d rss_mb %.1f\n", cycle, rss_mb());
        fflush(stdout);
    }
    printf("ok\n");
    return 0;
}
