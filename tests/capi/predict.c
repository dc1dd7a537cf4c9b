/*
 * predict.c -- GRAPE-scaled j-particles (a/2, jerk/6, snap/18) at their own times, predicted
 * by the library to ti; an address re-sent before the flush; short neighbour-list copies.
 *
 * Prints the data it sent, as unscaled values, so that the test can recompute everything:
 *   "J <address> <index> <tj> <m> <x3> <v3> <a3> <jerk3> <snap3>"  (the values that count)
 *   "I <index> <x3> <v3>"
 *   "F <k> <acc3> <jerk3> <pot> <nnbindex>"
 *   "NB <k> <rc> <nblen> <ids...>"  (g6_get_neighbour_list with maxlength 1)
 * Arguments: ti eps2 h2.  Exit status 0 when every call succeeded.
 */
#include <stdio.h>
#include <stdlib.h>

#include "grape6.h"

#define NJ 40
#define NI 6

static unsigned long long state = 12345;

static double uniform(void) /* in [-1, 1) */
{
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(state >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

static void die(const char *what, int rc)
{
    fprintf(stderr, "predict: %s returned %d\n", what, rc);
    exit(1);
}

int main(int argc, char **argv)
{
    double ti, eps2, h2v, x[3], v[3], a[3], j[3], s[3], a2[3], j6[3], k18[3], tj, m;
    double xi[NI][3], vi[NI][3], acc[NI][3], jerk[NI][3], pot[NI], h2[NI];
    int idx[NI], nnb[NI], rc, nbl[4], nblen;

    if (argc != 4)
        return 2;
    ti = atof(argv[1]);
    eps2 = atof(argv[2]);
    h2v = atof(argv[3]);
    if ((rc = g6_open(0)) != 0)
        die("g6_open", rc);
    for (int n = 0; n < NJ + 1; n++) {
        /* the last one re-sends address 3 with new values before any flush */
        int address = n < NJ ? n : 3, index = 1000 + address;
        tj = n % 3 == 0 ? ti : ti - 0.0625 * (1 + n % 4); /* some at ti, others before */
        m = 1.0 / NJ * (1.0 + 0.5 * uniform());
        for (int d = 0; d < 3; d++) {
            x[d] = uniform();
            v[d] = 0.5 * uniform();
            a[d] = uniform();
            j[d] = 2.0 * uniform();
            s[d] = 4.0 * uniform();
            a2[d] = a[d] / 2.0;
            j6[d] = j[d] / 6.0;
            k18[d] = s[d] / 18.0;
        }
        if ((rc = g6_set_j_particle(0, address, index, tj, 0.0, m, k18, j6, a2, v, x)) != 0)
            die("g6_set_j_particle", rc);
        if (n == 3)
            continue; /* superseded by the last one */
        printf("J %d %d %.17g %.17g", address, index, tj, m);
        for (int d = 0; d < 3; d++) printf(" %.17g", x[d]);
        for (int d = 0; d < 3; d++) printf(" %.17g", v[d]);
        for (int d = 0; d < 3; d++) printf(" %.17g", a[d]);
        for (int d = 0; d < 3; d++) printf(" %.17g", j[d]);
        for (int d = 0; d < 3; d++) printf(" %.17g", s[d]);
        printf("\n");
    }
    if ((rc = g6_set_ti(0, ti)) != 0)
        die("g6_set_ti", rc);
    for (int k = 0; k < NI; k++) {
        idx[k] = k < 3 ? 1000 + 7 * k : 5000 + k; /* three are j-particles themselves */
        for (int d = 0; d < 3; d++) {
            xi[k][d] = uniform();
            vi[k][d] = 0.5 * uniform();
        }
        h2[k] = h2v;
        printf("I %d %.17g %.17g %.17g %.17g %.17g %.17g\n", idx[k], xi[k][0], xi[k][1],
               xi[k][2], vi[k][0], vi[k][1], vi[k][2]);
    }
    g6calc_firsthalf(0, NJ, NI, idx, xi, vi, acc, jerk, pot, eps2, h2);
    if ((rc = g6calc_lasthalf2(0, NJ, NI, idx, xi, vi, eps2, h2, acc, jerk, pot, nnb)) != 0)
        die("g6calc_lasthalf2", rc);
    for (int k = 0; k < NI; k++)
        printf("F %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d\n", k, acc[k][0], acc[k][1],
               acc[k][2], jerk[k][0], jerk[k][1], jerk[k][2], pot[k], nnb[k]);
    if ((rc = g6_read_neighbour_list(0)) < 0)
        die("g6_read_neighbour_list", rc);
    for (int k = 0; k < NI; k++) {
        nbl[0] = nbl[1] = -7;
        rc = g6_get_neighbour_list(0, k, 1, &nblen, nbl);
        printf("NB %d %d %d %d %d\n", k, rc, nblen, nbl[0], nbl[1]);
    }
    g6_close(0);
    return 0;
}
