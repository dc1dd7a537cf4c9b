/* A program written for Phantom-GRAPE's PG5 against its header, <gp5util.h>, as PG5's
 * programs are: every call a statement (PG5's calls are void), JMEMSIZE for the arrays,
 * nothing of sapporo's.  It compiles unchanged with `sapporo capi flags` and -lg5; with
 * -DSYMMETRIC too (PG5's SYMMETRIC build, whose g5_set_xmj takes eps_j^2 per j-particle).
 *
 *   g5_gp5util IC EPS [EPSJ2]
 *
 * IC: lines "x y z m", every particle a j-particle and an i-particle; EPS: the softening of
 * the i-particles (not squared); EPSJ2: every j-particle's eps_j^2 (SYMMETRIC only).
 * Prints "f i ax ay az pot" from g5_set_xi / g5_run / g5_get_force per
 * g5_get_number_of_pipelines() i-particles, the j-particles given as g5_set_range,
 * g5_set_xj and g5_set_mj (or, with SYMMETRIC, g5_set_xmj) would give them to a GRAPE-5;
 * "c ..." from g5_calculate_force_on_x after new masses alone, m[i] * (1 + i % 3)
 * (g5_set_mj); "d ..." after new positions alone, 1.5 x (g5_set_xj), the new masses kept.
 */
#include <stdio.h>
#include <stdlib.h>

#include <gp5util.h>

static double x[JMEMSIZE][3], m[JMEMSIZE], a[JMEMSIZE][3], p[JMEMSIZE];
#ifdef SYMMETRIC
static double epsj2[JMEMSIZE];
#endif

static void show(const char *key, int n)
{
    for (int i = 0; i < n; i++)
        printf("%s %d %.17g %.17g %.17g %.17g\n", key, i, a[i][0], a[i][1], a[i][2], p[i]);
}

int main(int argc, char **argv)
{
    int n = 0;
    double size = 0.0, mmin = 1e300;
    FILE *f;
    if (argc < 3 || (f = fopen(argv[1], "r")) == NULL)
        return 2;
    while (n < JMEMSIZE
           && fscanf(f, "%lf %lf %lf %lf", &x[n][0], &x[n][1], &x[n][2], &m[n]) == 4)
        n++;
    fclose(f);
    for (int i = 0; i < n; i++) {
        for (int k = 0; k < 3; k++)
            size = x[i][k] > size ? x[i][k] : -x[i][k] > size ? -x[i][k] : size;
        mmin = m[i] < mmin ? m[i] : mmin;
    }

    g5_open();
    if (g5_get_jmemsize() < n)
        return 3;
    g5_set_range(-2.0 * size, 2.0 * size, mmin);
    g5_set_eps_to_all(atof(argv[2]));
#ifdef SYMMETRIC
    for (int i = 0; i < n; i++)
        epsj2[i] = argc > 3 ? atof(argv[3]) : 0.0;
    g5_set_xmj(0, n, x, m, epsj2);
#else
    int half = n / 2;
    g5_set_xj(0, half, x);
    g5_set_mj(0, n, m);
    g5_set_xj(half, n - half, x);
#endif
    g5_set_n(n);
    for (int off = 0, np = g5_get_number_of_pipelines(); off < n; off += np) {
        int ni = n - off < np ? n - off : np;
        g5_set_xi(ni, x + off);
        g5_run();
        g5_get_force(ni, a + off, p + off);
    }
    show("f", n);

    for (int i = 0; i < n; i++)
        m[i] *= 1 + i % 3;
    g5_set_mj(0, n, m);
    g5_calculate_force_on_x(x, a, p, n);
    show("c", n);

    for (int i = 0; i < n; i++)
        for (int k = 0; k < 3; k++)
            x[i][k] *= 1.5;
    g5_set_xj(0, n, x);
    g5_calculate_force_on_x(x, a, p, n);
    show("d", n);
    g5_close();
    return 0;
}
