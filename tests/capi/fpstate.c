/* The caller's floating-point state across calls of both interfaces: the flags it raised
 * stay raised, none of the library's own is left behind, and its rounding mode and x87
 * control word come back.
 *
 *   fpstate
 *
 * Prints "<check> <0|1>" lines and "rc <worst code>".
 */
#include <fenv.h>
#include <stdio.h>

#include "grape5.h"
#include "grape6.h"

static int worst;

static void check(int rc)
{
    if (rc < worst)
        worst = rc;
}

static double x[64][3], m[64], a[64][3], p[64], z[3], acc[64][3], jerk[64][3], pot[64];
static int idx[64];

/* a GRAPE-5 list and force call, and a GRAPE-6 step, on 64 particles (set up before: the
 * caller's own arithmetic raises flags too) */
static void calls(void)
{
    check(g5_set_xmj(0, 64, x, m));
    check(g5_set_n(64));
    check(g5_calculate_force_on_x(x, a, p, 64));
    for (int i = 0; i < 64; i++)
        check(g6_set_j_particle(0, i, i, 0.0, 1.0, m[i], z, z, z, z, x[i]));
    check(g6_set_ti(0, 0.0));
    g6calc_firsthalf(0, 64, 64, idx, x, a, acc, jerk, pot, 0.01, NULL);
    check(g6calc_lasthalf(0, 64, 64, idx, x, a, 0.01, NULL, acc, jerk, pot));
}

int main(void)
{
    volatile long double third;
    for (int i = 0; i < 64; i++) {
        x[i][0] = i * 0.1;
        x[i][1] = (i % 7) * 0.3;
        x[i][2] = (i % 5) * 1e-30;  /* tiny coordinates: denormal products */
        m[i] = 1.0 / 3.0;
        idx[i] = i;
    }
    check(g5_open());
    check(g5_set_eps_to_all(0.01));
    check(g6_open(0));
    calls();  /* (first calls: the embedded Python starts) */

    feclearexcept(FE_ALL_EXCEPT);
    calls();
    printf("no_flags_left %d\n", fetestexcept(FE_ALL_EXCEPT) == 0);

    fesetround(FE_UPWARD);
    third = 1.0L;
    third /= 3.0L;  /* the x87's inexact flag, raised by the caller */
    calls();
    printf("round_kept %d\n", fegetround() == FE_UPWARD);
    printf("own_flag_kept %d\n", fetestexcept(FE_ALL_EXCEPT) == FE_INEXACT);
    fesetround(FE_TONEAREST);
    feclearexcept(FE_ALL_EXCEPT);

    check(g6_close(0));
    check(g5_close());
    printf("rc %d\n", worst);
    return (int)(third < 0);
}
