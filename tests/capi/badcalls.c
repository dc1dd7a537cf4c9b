/*
 * badcalls.c -- wrong calls get a message and an error code, and the program goes on.
 *
 * Prints "npipes <n>", then one line per check: "CHECK <label> <rc> | <sapporo_last_error()>"
 * (the message only when rc < 0), and "nblist <nblen> <ids>" for an overflowing neighbour
 * list (run with SAPPORO_NB_CAPACITY=2).  Exit status 0 when it ran to the end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "sapporo.h"

#define N 4

static int npipes;
static int idx[N + 1] = {0, 1, 2, 3, 99};
static double xj[N][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
static double zero[3] = {0, 0, 0};
static double xi[600][3], vi[600][3], acc[600][3], jerk[600][3], pot[600];

static void check(const char *label, int rc)
{
    printf("CHECK %s %d | %s\n", label, rc, rc < 0 ? sapporo_last_error() : "");
    fflush(stdout);
}

static void store(void)
{
    for (int i = 0; i < N; i++)
        if (g6_set_j_particle(0, i, i, 0.0, 0.0, 1.0, zero, zero, zero, zero, xj[i]) != 0)
            exit(3);
}

static int force(int nj, int ni, double eps2)
{
    g6calc_firsthalf(0, nj, ni, idx, xi, vi, acc, jerk, pot, eps2, NULL);
    return g6calc_lasthalf(0, nj, ni, idx, xi, vi, eps2, NULL, acc, jerk, pot);
}

int main(void)
{
    double nanv[3] = {0, NAN, 0};
    int nbl[8], len;

    check("settime_before_open", g6_set_ti(0, 0.0));
    check("open", g6_open(0));
    npipes = g6_npipes();
    printf("npipes %d\n", npipes);
    if (npipes + 1 > 600)
        return 4;
    store();
    check("settime", g6_set_ti(0, 0.0));
    for (int q = 0; q < N; q++)
        xi[q][0] = xj[q][0], xi[q][1] = xj[q][1], xi[q][2] = xj[q][2];

    check("address_negative",
          g6_set_j_particle(0, -1, 0, 0.0, 0.0, 1.0, zero, zero, zero, zero, xj[0]));
    check("nan_j", g6_set_j_particle(0, 2, 2, 0.0, 0.0, 1.0, zero, zero, zero, zero, nanv));
    double huge[3] = {0, 1e200, 0};
    check("huge_j", g6_set_j_particle(0, 2, 2, 0.0, 0.0, 1.0, zero, zero, zero, zero, huge));
    check("ni_above_npipes", force(N, npipes + 1, 0.0));
    check("good_after_errors", force(N, N, 0.0));
    printf("acc0 %.12f %.12f %.12f\n", acc[0][0], acc[0][1], acc[0][2]);
    check("ni_zero", force(N, 0, 0.0));
    xi[1][1] = NAN;
    check("nan_i", force(N, N, 0.0));
    xi[1][1] = 0.0;
    check("lasthalf_without_firsthalf",
          g6calc_lasthalf(0, N, N, idx, xi, vi, 0.0, NULL, acc, jerk, pot));
    check("nj_beyond_stored", force(100, N, 0.0));
    xi[0][0] = 1.0;  /* i-particle 0 (index 0) on top of j-particle 1 (index 1), eps2 = 0 */
    check("coincident", force(N, 1, 0.0));
    xi[0][0] = 0.0;
    check("good_again", force(N, N, 0.0));
    check("read_neighbours", g6_read_neighbour_list(0));
    check("ipipe_out_of_range", g6_get_neighbour_list(0, 50, 8, &len, nbl));
    /* Particle 0 has 3 neighbours inside h2 = 10; the capacity is 2. */
    double h2[N] = {10, 10, 10, 10};
    g6calc_firsthalf(0, N, N, idx, xi, vi, acc, jerk, pot, 0.0, h2);
    check("nb_force", g6calc_lasthalf(0, N, N, idx, xi, vi, 0.0, h2, acc, jerk, pot));
    check("nb_read_overflow", g6_read_neighbour_list(0));
    len = -1;
    check("nb_get_overflow", g6_get_neighbour_list(0, 0, 8, &len, nbl));
    printf("nblist %d %d %d\n", len, nbl[0], nbl[1]);
    /* A failed force call leaves no neighbour lists behind, not the previous call's. */
    check("nb_force_failed", force(N, npipes + 1, 0.0));
    check("nb_read_after_failed", g6_read_neighbour_list(0));
    check("nb_get_after_failed", g6_get_neighbour_list(0, 0, 8, &len, nbl));
    /* An address beyond what the device holds is refused at once; the particles buffered
     * with it are kept: j-particle 1 moves to (0, 0, 100), so i-particle 0 at the origin
     * feels (0, 1, 1 + 1e-4). */
    double far[3] = {0, 0, 100};
    check("move_1", g6_set_j_particle(0, 1, 1, 0.0, 0.0, 1.0, zero, zero, zero, zero, far));
    check("address_too_large",
          g6_set_j_particle(0, 2147483647, 7, 0.0, 0.0, 1.0, zero, zero, zero, zero, xj[0]));
    check("settime_after_bad_address", g6_set_ti(0, 0.0));
    check("force_after_bad_address", force(N, 1, 0.0));
    printf("moved %.12f %.12f %.12f\n", acc[0][0], acc[0][1], acc[0][2]);
    check("close", g6_close(0));
    check("set_j_closed", g6_set_j_particle(0, 0, 0, 0.0, 0.0, 1.0, zero, zero, zero, zero, xj[0]));
    check("settime_closed", g6_set_ti(0, 0.0));
    check("force_closed", force(N, N, 0.0));
    check("close_again", g6_close(0));
    check("reopen_null", g6_open_(NULL));
    store();
    check("settime_reopened", g6_set_ti(0, 0.0));
    check("good_reopened", force(N, N, 0.0));
    printf("acc0 %.12f %.12f %.12f\n", acc[0][0], acc[0][1], acc[0][2]);
    check("close_end", g6_close(0));
    int dev0 = 0;
    check("open_special", g6_open_special(1, &dev0));
    check("close_special", g6_close(0));
    check("open_special_zero", g6_open_special(0, NULL));  /* as g6_open */
    check("close_special_zero", g6_close(0));
    check("open_special_any", g6_open_special(-1, NULL));  /* any one device (sapporo2) */
    check("close_special_any", g6_close(0));
    printf("END\n");
    return 0;
}
