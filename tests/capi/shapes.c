/* Force calls of every shape, and no Python once the memory is there.
 *
 *   shapes g5 CALLS      GRAPE-5: CALLS interaction lists on one context, as a tree walk
 *                        makes them: per call nj in 1 .. 4096 j-particles (a window of a
 *                        4096-particle cloud) with g5_set_xmj and g5_set_n, then the forces
 *                        on ni in 1 .. 512 of them (at most nj: a group within its list)
 *                        with g5_calculate_force_on_x
 *   shapes g6 CALLS      GRAPE-6: 4096 j-particles stored, then CALLS block steps
 *                        (g6_set_ti, g6calc_firsthalf, g6calc_lasthalf) with nj in
 *                        1 .. 4096 and ni in 1 .. 64, both new every step
 *
 * The shapes come from a fixed generator.  Every call's forces are checked against a float64
 * direct sum over the same j-particles (relative error of each acceleration and potential
 * within 1e-5 of the sum of the terms' magnitudes, double-single).  Prints
 *
 *   python <entries after the first call> <entries after the last> worst <error>
 *
 * (sapporo_python_calls) and exits 0 when every call returned 0 and every force was within
 * the tolerance, else 1.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grape5.h"
#include "grape6.h"
#include "sapporo.h"

#define N 4096
#define EPS2 1e-4

static unsigned long long state = 88172645463325252ULL;

static double uniform(void)
{
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return (double)(state >> 11) / 9007199254740992.0;
}

static int between(int lo, int hi)
{
    return lo + (int)(uniform() * (hi - lo + 1));
}

/* The worst relative error of ni forces (acc, pot; GRAPE-5's pot positive when g5) on
 * x[first ..] from j-particles xj, mj [0, nj), self-pairs (same index) excluded. */
static double check(int ni, int first, int nj, int jfirst, double (*x)[3], const double *m,
                    double (*acc)[3], const double *pot, int g5)
{
    double worst = 0.0;
    for (int i = 0; i < ni; i++) {
        double a[3] = {0, 0, 0}, p = 0.0, scale = 0.0, pscale = 0.0, err = 0.0;
        for (int j = 0; j < nj; j++) {
            const int k = jfirst + j;
            double d[3], r2 = EPS2;
            if (!g5 && k == first + i)
                continue;
            for (int c = 0; c < 3; c++) {
                d[c] = x[k][c] - x[first + i][c];
                r2 += d[c] * d[c];
            }
            const double rinv = 1.0 / sqrt(r2), mr3 = m[k] * rinv * rinv * rinv;
            for (int c = 0; c < 3; c++)
                a[c] += mr3 * d[c];
            scale += mr3 * sqrt(r2 - EPS2);
            p -= m[k] * rinv;
            pscale += m[k] * rinv;
        }
        for (int c = 0; c < 3; c++)
            err = fmax(err, fabs(acc[i][c] - a[c]) / fmax(scale, 1e-300));
        err = fmax(err, fabs((g5 ? -pot[i] : pot[i]) - p) / pscale);
        worst = fmax(worst, err);
    }
    return worst;
}

int main(int argc, char **argv)
{
    static double x[N][3], v[N][3], m[N], xj[N][3], mj[N], acc[N][3], jerk[N][3], pot[N];
    static double zero[N][3], h2[N];
    static int index[N];
    long after_first = -1;
    double worst = 0.0;
    int calls, bad = 0, g5;
    if (argc != 3 || (strcmp(argv[1], "g5") != 0 && strcmp(argv[1], "g6") != 0)) {
        fprintf(stderr, "usage: shapes g5|g6 CALLS\n");
        return 2;
    }
    g5 = strcmp(argv[1], "g5") == 0;
    calls = atoi(argv[2]);
    for (int i = 0; i < N; i++) {
        double r2;
        do {
            for (int c = 0; c < 3; c++)
                x[i][c] = 2.0 * uniform() - 1.0;
            r2 = x[i][0] * x[i][0] + x[i][1] * x[i][1] + x[i][2] * x[i][2];
        } while (r2 > 1.0);
        m[i] = (0.5 + uniform()) / N;
        index[i] = i;
    }
    if (g5) {
        bad |= g5_open() != 0;
        bad |= g5_set_eps_to_all(sqrt(EPS2)) != 0;
    }
    else {
        bad |= g6_open(0) != 0;
        for (int i = 0; i < N; i++)
            bad |= g6_set_j_particle(0, i, i, 0.0, 1.0, m[i], zero[i], zero[i], zero[i],
                                     v[i], x[i]) != 0;
    }
    for (int c = 0; c < calls && !bad; c++) {
        const int nj = between(1, N), draw = between(1, g5 ? 512 : 64);
        /* GRAPE-5: a group within its own list */
        const int ni = g5 && draw > nj ? nj : draw, jfirst = g5 ? between(0, N - nj) : 0;
        const int first = g5 ? jfirst + between(0, nj - ni) : between(0, N - ni);
        double e;
        if (g5) {  /* the list, indexed by address (as a tree code copies it) */
            for (int j = 0; j < nj; j++) {
                memcpy(xj[j], x[jfirst + j], sizeof xj[j]);
                mj[j] = m[jfirst + j];
            }
            bad |= g5_set_xmj(0, nj, xj, mj) != 0;
            bad |= g5_set_n(nj) != 0;
            bad |= g5_calculate_force_on_x(x + first, acc, pot, ni) != 0;
            e = check(ni, first, nj, jfirst, x, m, acc, pot, 1);
        }
        else {
            bad |= g6_set_ti(0, 0.0) != 0;
            g6calc_firsthalf(0, nj, ni, index + first, x + first, v + first, zero, zero, pot,
                             EPS2, h2);
            bad |= g6calc_lasthalf(0, nj, ni, index + first, x + first, v + first, EPS2, h2,
                                   acc, jerk, pot) != 0;
            e = check(ni, first, nj, 0, x, m, acc, pot, 0);
        }
        if (e > 1e-5) {
            fprintf(stderr, "call %d (ni %d, nj %d): relative error %g\n", c, ni, nj, e);
            bad = 1;
        }
        worst = fmax(worst, e);
        if (c == 0)
            after_first = sapporo_python_calls();
    }
    if (bad)
        fprintf(stderr, "failed: %s\n", sapporo_last_error());
    printf("python %ld %ld worst %.3g\n", after_first, sapporo_python_calls(), worst);
    if (g5)
        g5_close();
    else
        g6_close(0);
    return bad;
}
