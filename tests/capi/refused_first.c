/*
 * refused_first.c -- a force call refused because nothing is stored yet must not spoil the
 * force calls of the same shape that follow once the j-particles are there
 * (tests/capi/test_refused_first.py).
 *
 * Twice (the second time after g6_close and a new g6_open): g6_open; g6_set_ti; a force
 * call with nj = 64 while no j-particle is stored (refused: rc < 0, a message naming nj);
 * store 64 j-particles at addresses 0..63; g6_set_ti; the same force call for 8 of them,
 * twice, whose acc and pot must match a float64 direct sum (self-excluded, softened) to
 * 1e-5 of sum_j |term_j| (double-single, the default precision).
 *
 * Prints "ok" and exits 0 when everything holds; otherwise a line saying what failed and
 * exits 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grape6.h"
#include "sapporo.h"

#define NJ 64
#define NI 8
#define TOL 1e-5

static double xj[NJ][3], vj[NJ][3], mj[NJ];
static int failures;

static void fail(const char *what)
{
    printf("FAIL %s\n", what);
    failures++;
}

/* A deterministic small cluster: points spread over [-1, 1)^3, small velocities. */
static void make_cluster(void)
{
    unsigned long long s = 88172645463325252ull;
    for (int k = 0; k < NJ; k++) {
        for (int c = 0; c < 3; c++) {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            xj[k][c] = (double)(s >> 11) / 4503599627370496.0 - 1.0;
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            vj[k][c] = 0.1 * ((double)(s >> 11) / 4503599627370496.0 - 1.0);
        }
        mj[k] = (1.0 + 0.5 * (k % 3)) / NJ;
    }
}

/* One round: open, refused call, store, good calls, close. */
static void round_(int round, double t, double eps2)
{
    static double xi[NI][3], vi[NI][3], aold[NI][3], j6old[NI][3], phiold[NI], h2[NI],
        acc[NI][3], jerk[NI][3], pot[NI];
    static int idx[NI];
    static const double zero[3] = {0.0, 0.0, 0.0};
    char what[256];
    int rc;

    for (int m = 0; m < NI; m++) {  /* i-particles: stored particles 5, 12, 19, ... */
        int k = (5 + 7 * m) % NJ;
        idx[m] = k;
        for (int c = 0; c < 3; c++) {
            xi[m][c] = xj[k][c];
            vi[m][c] = vj[k][c];
            aold[m][c] = j6old[m][c] = 0.0;
        }
        phiold[m] = 0.0;
        h2[m] = 0.0;
    }

    rc = g6_open(0);
    if (rc != 0) {
        snprintf(what, sizeof what, "round %d: g6_open rc %d: %s", round, rc,
                 sapporo_last_error());
        fail(what);
        return;
    }
    rc = g6_set_ti(0, t);
    if (rc != 0) {
        snprintf(what, sizeof what, "round %d: first g6_set_ti rc %d: %s", round, rc,
                 sapporo_last_error());
        fail(what);
    }

    /* nothing stored yet: refused */
    g6calc_firsthalf(0, NJ, NI, idx, xi, vi, aold, j6old, phiold, eps2, h2);
    rc = g6calc_lasthalf(0, NJ, NI, idx, xi, vi, eps2, h2, acc, jerk, pot);
    printf("round %d refused rc %d | %s\n", round, rc, sapporo_last_error());
    if (rc >= 0) {
        snprintf(what, sizeof what, "round %d: force call with nothing stored returned %d",
                 round, rc);
        fail(what);
    } else if (strstr(sapporo_last_error(), "nj") == NULL) {
        snprintf(what, sizeof what, "round %d: refusal message does not name nj: %s", round,
                 sapporo_last_error());
        fail(what);
    }

    /* store the cluster (scaled derivatives all zero), at the time ti: no prediction */
    for (int k = 0; k < NJ; k++) {
        double x[3], v[3];
        memcpy(x, xj[k], sizeof x);
        memcpy(v, vj[k], sizeof v);
        rc = g6_set_j_particle(0, k, k, t, 0.0, mj[k], (double *)zero, (double *)zero,
                               (double *)zero, v, x);
        if (rc != 0) {
            snprintf(what, sizeof what, "round %d: g6_set_j_particle(%d) rc %d: %s", round,
                     k, rc, sapporo_last_error());
            fail(what);
        }
    }
    rc = g6_set_ti(0, t);
    if (rc != 0) {
        snprintf(what, sizeof what, "round %d: second g6_set_ti rc %d: %s", round, rc,
                 sapporo_last_error());
        fail(what);
    }

    /* the same shape of force call, now valid; twice (a later call too) */
    for (int call = 0; call < 2; call++) {
        for (int m = 0; m < NI; m++) {
            pot[m] = NAN;
            for (int c = 0; c < 3; c++)
                acc[m][c] = jerk[m][c] = NAN;
        }
        g6calc_firsthalf(0, NJ, NI, idx, xi, vi, aold, j6old, phiold, eps2, h2);
        rc = g6calc_lasthalf(0, NJ, NI, idx, xi, vi, eps2, h2, acc, jerk, pot);
        printf("round %d call %d rc %d | %s\n", round, call, rc,
               rc == 0 ? "" : sapporo_last_error());
        if (rc != 0) {
            snprintf(what, sizeof what, "round %d call %d: force call after storing %d "
                     "j-particles returned %d: %s", round, call, NJ, rc,
                     sapporo_last_error());
            fail(what);
            continue;
        }
        for (int m = 0; m < NI; m++) {
            double ref[3] = {0.0, 0.0, 0.0}, ref_pot = 0.0, acc_abs = 0.0, pot_abs = 0.0,
                   err = 0.0;
            for (int k = 0; k < NJ; k++) {
                if (k == idx[m])
                    continue;
                double d[3], r2 = eps2;
                for (int c = 0; c < 3; c++) {
                    d[c] = xj[k][c] - xi[m][c];
                    r2 += d[c] * d[c];
                }
                double rinv = 1.0 / sqrt(r2), mr3 = mj[k] * rinv * rinv * rinv;
                for (int c = 0; c < 3; c++)
                    ref[c] += mr3 * d[c];
                acc_abs += mj[k] * rinv * rinv;
                ref_pot -= mj[k] * rinv;
                pot_abs += mj[k] * rinv;
            }
            for (int c = 0; c < 3; c++)
                err += (acc[m][c] - ref[c]) * (acc[m][c] - ref[c]);
            err = sqrt(err) / acc_abs;
            if (!(err < TOL)) {
                snprintf(what, sizeof what, "round %d call %d: acc of i %d (id %d) "
                         "(%.9g %.9g %.9g), expected (%.9g %.9g %.9g): relative error %.3g",
                         round, call, m, idx[m], acc[m][0], acc[m][1], acc[m][2], ref[0],
                         ref[1], ref[2], err);
                fail(what);
            }
            err = fabs(pot[m] - ref_pot) / pot_abs;
            if (!(err < TOL)) {
                snprintf(what, sizeof what, "round %d call %d: pot of i %d (id %d) %.9g, "
                         "expected %.9g: relative error %.3g", round, call, m, idx[m],
                         pot[m], ref_pot, err);
                fail(what);
            }
        }
    }

    rc = g6_close(0);
    if (rc != 0) {
        snprintf(what, sizeof what, "round %d: g6_close rc %d: %s", round, rc,
                 sapporo_last_error());
        fail(what);
    }
}

int main(void)
{
    make_cluster();
    round_(0, 0.0, 1e-4);
    round_(1, 0.25, 1e-4);
    if (failures) {
        printf("%d failures\n", failures);
        return 1;
    }
    printf("ok\n");
    return 0;
}
