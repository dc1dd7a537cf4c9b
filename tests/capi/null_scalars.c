/* Fortran names given a NULL scalar pointer (a C caller's mistake): each call is refused with
 * SAPPORO_ERR_INPUT and a message naming the argument, never a crash and never a value the
 * caller did not pass; the library works on afterwards.  Prints one line per refused call,
 * "<call> <code> | <message>", then "ok" when a valid step still computes. */
#include <stdio.h>
#include <string.h>

#include "grape5.h"
#include "grape6.h"
#include "sapporo.h"

static int bad;

static void refused(const char *call, int rc, const char *name)
{
    const char *msg = sapporo_last_error();
    char want[64];
    snprintf(want, sizeof want, "%s is a NULL pointer", name);
    printf("%s %d | %s\n", call, rc, msg);
    if (rc != SAPPORO_ERR_INPUT || strstr(msg, want) == NULL) {
        fprintf(stderr, "%s: expected code %d and \"%s\"\n", call, SAPPORO_ERR_INPUT, want);
        bad = 1;
    }
}

int main(void)
{
    int zero = 0, one = 1, n = 2, idx[2] = {0, 1};
    double t = 0.0, m = 0.5, eps2 = 1e-4, z3[3] = {0, 0, 0}, x[2][3] = {{0, 0, 0}, {1, 0, 0}};
    double v[2][3] = {{0}}, acc[2][3], jerk[2][3], pot[2], h2[2] = {0, 0};
    if (g6_open(0) != 0)
        return 2;
    refused("g6_set_ti_", g6_set_ti_(&zero, NULL), "ti");
    refused("g6_set_j_particle_", g6_set_j_particle_(&zero, &zero, NULL, &t, &t, &m, z3, z3, z3,
                                                     z3, x[0]), "index");
    g6calc_firsthalf_(&zero, &n, NULL, idx, x, v, v, v, pot, &eps2, h2);
    refused("g6calc_firsthalf_ (reported by lasthalf)",
            g6calc_lasthalf_(&zero, &n, &n, idx, x, v, &eps2, h2, acc, jerk, pot), "ni");
    refused("g6calc_lasthalf_", g6calc_lasthalf_(&zero, &n, NULL, idx, x, v, &eps2, h2, acc,
                                                 jerk, pot), "ni");
    refused("sapporo_set_j_particle_", sapporo_set_j_particle_(&one, &one, &t, NULL, x[1], z3,
                                                               z3, z3, z3, z3), "mass");
    refused("g5_set_eps_to_all_", g5_set_eps_to_all_(NULL), "eps");
    refused("g5_set_n_", g5_set_n_(NULL), "n");
    refused("g5_set_xmj_", g5_set_xmj_(&zero, NULL, x, pot), "nj");
    refused("g5_set_nMC_", g5_set_nMC_(NULL, &n), "devid");
    /* the library works on */
    for (int i = 0; i < 2; i++)
        if (g6_set_j_particle(0, i, i, 0.0, 0.0, 0.5, z3, z3, z3, v[i], x[i]) != 0)
            bad = 1;
    g6_set_ti(0, 0.0);
    g6calc_firsthalf(0, 2, 2, idx, x, v, v, v, pot, eps2, h2);
    if (g6calc_lasthalf(0, 2, 2, idx, x, v, eps2, h2, acc, jerk, pot) != 0 || acc[0][0] <= 0.0
        || acc[1][0] >= 0.0) {
        fprintf(stderr, "the valid step failed: %s\n", sapporo_last_error());
        bad = 1;
    }
    g6_close(0);
    if (!bad)
        printf("ok\n");
    return bad;
}
