/* Bad GRAPE-5 calls: each prints "<case> <rc>" and the program goes on; at the end a good
 * call still computes ("good <rc> <finite>"). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "grape5.h"
#include "sapporo.h"

#define N 64
#define SHOW(name, call) printf("%s %d\n", name, (call))

int main(void)
{
    static double x[N][3], m[N], a[N][3], p[N], e[N], u[N];
    int js, np, finite = 1;
    for (int i = 0; i < N; i++) {
        x[i][0] = cos(i * 0.7);
        x[i][1] = sin(i * 1.3);
        x[i][2] = 0.01 * i;
        m[i] = 1.0 / N;
        e[i] = 1e-4 * (1 + i % 2);
        u[i] = 1e-4;
    }
    SHOW("xi_before_open", g5_set_xi(4, x));
    SHOW("jmemsize_before_open", g5_get_jmemsize());
    SHOW("open", g5_open());
    js = g5_get_jmemsize();
    np = g5_get_number_of_pipelines();
    printf("jmemsize_positive %d\n", js > N);
    SHOW("xmj_negative_adr", g5_set_xmj(-1, 10, x, m));
    SHOW("xmj_past_jmemsize", g5_set_xmj(js - 5, 10, x, m));
    m[3] = NAN;
    SHOW("xmj_nan_mass", g5_set_xmj(0, N, x, m));
    m[3] = 1.0 / N;
    SHOW("xmj_null", g5_set_xmj(0, N, NULL, m));
    SHOW("n_negative", g5_set_n(-3));
    SHOW("n_past_jmemsize", g5_set_n(js + 1));
    SHOW("xmj_half", g5_set_xmj(0, N / 2, x, m));
    SHOW("n_beyond_stored", g5_set_n(N));
    SHOW("xi", g5_set_xi(4, x));
    SHOW("run_beyond_stored", g5_run());
    SHOW("xmj", g5_set_xmj(0, N, x, m));
    SHOW("eps_nan", g5_set_eps_to_all(NAN));
    SHOW("eps", g5_set_eps_to_all(0.01));
    SHOW("xi_zero", g5_set_xi(0, x));
    SHOW("xi_too_many", g5_set_xi(np + 1, x));
    SHOW("run_without_xi", g5_run());
    SHOW("get_force_without_run", g5_get_force(4, a, p));
    x[2][1] = INFINITY;
    SHOW("xi_inf", g5_set_xi(4, x));
    x[2][1] = sin(2 * 1.3);
    e[1] = -1.0;
    SHOW("xei_negative", g5_set_xei(4, x, e));
    e[1] = 2e-4;
    SHOW("xi", g5_set_xi(4, x));
    SHOW("eps_more_than_set", g5_set_eps(5, e));
    SHOW("run", g5_run());
    SHOW("get_force_more_than_run", g5_get_force(5, a, p));
    SHOW("context_out_of_range", g5_set_nMC(64, 10));
    SHOW("context_negative", g5_runMC(-1));
    SHOW("calculate_null", g5_calculate_force_on_x(x, NULL, p, 4));
    SHOW("calculate_negative", g5_calculate_force_on_x(x, a, p, -1));
    /* a particle that is i and j, with eps = 0: no pair is excluded */
    SHOW("eps_zero", g5_set_eps_to_all(0.0));
    SHOW("self_no_softening", g5_calculate_force_on_x(x, a, p, 4));
    printf("last_error %s\n", sapporo_last_error());
    /* per-j softening that differs between j-particles: for part of them only, then
     * varying */
    SHOW("xmje_part", g5_set_xmje(0, 10, x, m, u));
    SHOW("run_part_epsj", g5_calculate_force_on_x(x, a, p, 4));
    SHOW("xmje_varying", g5_set_xmje(0, N, x, m, e));
    SHOW("run_varying_epsj", g5_calculate_force_on_x(x, a, p, 4));
    /* the library goes on */
    SHOW("xmj_again", g5_set_xmj(0, N, x, m));
    SHOW("eps_again", g5_set_eps_to_all(0.01));
    SHOW("good", g5_calculate_force_on_x(x, a, p, N));
    for (int i = 0; i < N; i++)
        finite &= isfinite(a[i][0]) && isfinite(a[i][1]) && isfinite(a[i][2]) && isfinite(p[i])
                  && p[i] > 0;
    printf("finite %d\n", finite);
    SHOW("close", g5_close());
    SHOW("run_after_close", g5_run());
    return 0;
}
