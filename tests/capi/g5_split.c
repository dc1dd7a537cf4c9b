/* The GRAPE-5 calls PG5 lacks: g5_set_xj / g5_set_mj (positions and masses apart),
 * g5_set_jp, g5_set_eps2_to_all, g5_set_range, g5_open_special.  Each case prints
 * "<case> <rc>" and the program goes on; "<case> 1" where two ways of giving the same
 * j-particles or softening must give the same forces, bit for bit. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "grape5.h"
#include "sapporo.h"

#define N 64
#define NI 8
#define EXTRA 8
#define SHOW(name, call) printf("%s %d\n", name, (call))

static double x[N + EXTRA][3], x2[N][3], m[N + EXTRA], m2[N], a[NI][3], p[NI];

/* Forces on the first NI particles from [0, n), into out (NI * 4 values); the code. */
static int forces(double *out)
{
    int rc = g5_set_xi(NI, x);
    if (rc == 0)
        rc = g5_run();
    if (rc == 0)
        rc = g5_get_force(NI, a, p);
    for (int i = 0; i < NI; i++) {
        memcpy(out + 4 * i, a[i], sizeof a[i]);
        out[4 * i + 3] = p[i];
    }
    return rc;
}

static int same(const double *u, const double *v)
{
    return memcmp(u, v, sizeof(double) * 4 * NI) == 0;
}

int main(void)
{
    static double ref[4 * NI], got[4 * NI], moved[4 * NI], heavier[4 * NI];
    int js, dev[1] = {0}, bad[1] = {99};
    for (int i = 0; i < N + EXTRA; i++) {
        x[i][0] = cos(i * 0.7);
        x[i][1] = sin(i * 1.3);
        x[i][2] = 0.01 * i;
        m[i] = 1.0 / N;
    }
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < 3; k++)
            x2[i][k] = 1.25 * x[i][k] + 0.1;
        m2[i] = m[i] * (1 + i % 3);
    }
    SHOW("xj_before_open", g5_set_xj(0, N, x));
    SHOW("range_before_open", g5_set_range(-2.0, 2.0, 1e-3));
    SHOW("open_special_none", g5_open_special(0, NULL));
    js = g5_get_jmemsize();

    /* softening given squared */
    SHOW("eps2_negative", g5_set_eps2_to_all(-1.0));
    SHOW("eps2_nan", g5_set_eps2_to_all(NAN));
    SHOW("eps2", g5_set_eps2_to_all(0.25));
    /* the range: accepted, whatever it is; a warning when it is none */
    SHOW("range", g5_set_range(-2.0, 2.0, 1e-3));
    SHOW("range_nan", g5_set_range(NAN, 2.0, 1e-3));
    SHOW("range_reversed", g5_set_range(2.0, -2.0, 1e-3));
    /* bad halves */
    SHOW("xj_null", g5_set_xj(0, N, NULL));
    SHOW("mj_null", g5_set_mj(0, N, NULL));
    SHOW("xj_negative_adr", g5_set_xj(-1, 4, x));
    SHOW("mj_past_jmemsize", g5_set_mj(js - 2, 4, m));
    x[5][0] = NAN;
    SHOW("xj_nan", g5_set_xj(0, N, x));
    x[5][0] = cos(5 * 0.7);
    x[1][2] = 1e300;
    SHOW("xj_huge", g5_set_xj(0, N, x));
    x[1][2] = 0.01;
    m[7] = INFINITY;
    SHOW("mj_inf", g5_set_mj(0, N, m));
    m[7] = 1.0 / N;
    SHOW("xj_none", g5_set_xj(0, 0, NULL));

    /* positions, masses for half, masses past n */
    SHOW("xj", g5_set_xj(0, N, x));
    SHOW("n", g5_set_n(N));
    SHOW("run_no_mass", forces(got));
    SHOW("mj_half", g5_set_mj(0, N / 2, m));
    SHOW("run_half_mass", forces(got));
    SHOW("n_half", g5_set_n(N / 2));
    SHOW("run_n_half", forces(got));
    SHOW("mj_past_n", g5_set_mj(N, EXTRA, m));
    SHOW("n_past", g5_set_n(N + EXTRA));
    SHOW("mj_rest", g5_set_mj(N / 2, N / 2, m));
    SHOW("run_no_position", forces(got));
    SHOW("n_all", g5_set_n(N));
    SHOW("run_split", forces(got));

    /* the same particles by g5_set_xmj, by g5_set_jp (masses first), and in halves */
    SHOW("xmj", g5_set_xmj(0, N, x, m));
    SHOW("run_xmj", forces(ref));
    printf("split_same %d\n", same(got, ref));
    SHOW("xmj_other", g5_set_xmj(0, N, x2, m2));
    SHOW("jp", g5_set_jp(0, N, m, x));
    SHOW("run_jp", forces(got));
    printf("jp_same %d\n", same(got, ref));
    /* eps 0.5 and eps^2 0.25: the same softening */
    SHOW("eps", g5_set_eps_to_all(0.5));
    SHOW("run_eps", forces(got));
    printf("eps2_same %d\n", same(got, ref));

    /* the last of each: new positions alone, then new masses alone, after g5_set_xmj */
    SHOW("xmj_moved", g5_set_xmj(0, N, x2, m));
    SHOW("run_moved", forces(moved));
    SHOW("xmj_heavier", g5_set_xmj(0, N, x2, m2));
    SHOW("run_heavier", forces(heavier));
    SHOW("xmj_back", g5_set_xmj(0, N, x, m));
    SHOW("xj_after_xmj", g5_set_xj(0, N, x2));
    SHOW("run_xj_after_xmj", forces(got));
    printf("xj_after_xmj_same %d\n", same(got, moved));
    SHOW("mj_after_xj", g5_set_mj(0, N, m2));
    SHOW("run_mj_after_xj", forces(got));
    printf("mj_after_xj_same %d\n", same(got, heavier));
    /* g5_set_xmj after halves not yet sent: g5_set_xmj's values are the last */
    SHOW("xj_pending", g5_set_xj(0, N, x2));
    SHOW("mj_pending", g5_set_mj(0, N, m2));
    SHOW("xmj_after_pending", g5_set_xmj(0, N, x, m));
    SHOW("run_xmj_after_pending", forces(got));
    printf("xmj_after_pending_same %d\n", same(got, ref));

    /* closing forgets every address: a mass alone is not enough after opening again */
    SHOW("close", g5_close());
    SHOW("open_special_device", g5_open_special(1, dev));
    SHOW("eps_again", g5_set_eps_to_all(0.5));
    SHOW("mj_reopened", g5_set_mj(0, N, m));
    SHOW("n_reopened", g5_set_n(N));
    SHOW("run_reopened", forces(got));
    SHOW("xj_reopened", g5_set_xj(0, N, x));
    SHOW("run_reopened_both", forces(got));
    printf("reopened_same %d\n", same(got, ref));
    SHOW("close_again", g5_close());
    /* a device the backend does not have: the open's error */
    SHOW("open_special_bad", g5_open_special(1, bad));
    SHOW("open_special_none_list", g5_open_special(2, NULL));
    SHOW("close_bad", g5_close());
    return 0;
}
