/*
 * store_at_set_ti.c -- a j-particle the library cannot store (a mass below float's normal
 * range in double-single, which only the engine's rule refuses) is reported by the
 * g6_set_ti that hands the buffer over, with SAPPORO_ERR_INPUT and a message naming the
 * mass, not by the next force call; the library then computes with what it holds
 * (tests/capi/test_capi.py).
 *
 * Prints "ok" and exits 0 when everything holds; otherwise "FAIL ..." lines and exits 1.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "grape6.h"
#include "sapporo.h"

int main(void)
{
    double x[3] = {1.0, 0.0, 0.0}, z[3] = {0.0, 0.0, 0.0}, acc[1][3], jerk[1][3], pot[1];
    double xi[1][3] = {{0.0, 0.0, 0.0}}, vi[1][3] = {{0.0, 0.0, 0.0}}, ai[1][3] = {{0}};
    int idx[1] = {7}, failures = 0, rc;
    if (g6_open(0) != 0 || g6_set_j_particle(0, 0, 1, 0.0, 0.0, 0.5, z, z, z, z, x) != 0) {
        printf("FAIL open or first store\n");
        return 1;
    }
    rc = g6_set_ti(0, 0.0);
    if (rc != 0)
        printf("FAIL first g6_set_ti %d: %s\n", rc, sapporo_last_error()), failures++;
    /* 1e-40: finite and in range for the C API's own checks, refused by the engine */
    g6_set_j_particle(0, 1, 2, 0.0, 0.0, 1e-40, z, z, z, z, x);
    rc = g6_set_ti(0, 0.0);
    if (rc != SAPPORO_ERR_INPUT || strstr(sapporo_last_error(), "mass") == NULL
        || strstr(sapporo_last_error(), "g6_set_ti") == NULL)
        printf("FAIL g6_set_ti %d: %s\n", rc, sapporo_last_error()), failures++;
    /* the library computes with the one particle it holds: acc = 0.5 / 1 along +x */
    g6calc_firsthalf(0, 1, 1, idx, xi, vi, ai, ai, pot, 0.0, NULL);
    rc = g6calc_lasthalf(0, 1, 1, idx, xi, vi, 0.0, NULL, acc, jerk, pot);
    if (rc != 0 || fabs(acc[0][0] - 0.5) > 1e-6 || fabs(pot[0] + 0.5) > 1e-6)
        printf("FAIL force after the refused store: rc %d acc %g pot %g\n", rc, acc[0][0],
               pot[0]), failures++;
    g6_close(0);
    if (failures == 0)
        printf("ok\n");
    return failures != 0;
}
