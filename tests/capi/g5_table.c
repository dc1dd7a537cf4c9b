/* A program written for Phantom-GRAPE's PG5/table (the cutoff force of TreePM and P3M codes):
 * it includes PG5's header name, gp5util.h, and calls g5_set_eta and g5_set_cutoff_table as
 * such codes do before computing forces.
 *
 *   g5_table IC EPS MODE [SCALE]
 *
 * IC: lines "x y z m"; every particle is a j-particle and an i-particle.  MODE "env": the
 * split length is SAPPORO_G5_CUTOFF's (a PG5/table program unchanged: PG5 fixes it at
 * compile time); "call": g5_set_cutoff_scale(SCALE) before g5_open, then a different length
 * after it, which must be refused ("refused RC").  Prints "f i ax ay az pot" from
 * g5_set_xi / g5_run / g5_get_force per chunk of g5_get_number_of_pipelines(), "c ..." from
 * g5_calculate_force_on_x, and "rc N": the first negative return code (0: none).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp5util.h"

/* A TreePM code's cutoff functions, handed to g5_set_cutoff_table (PG5/table never calls
 * them: its table is the S2 split's). */
static double force_cut(double x) { return x < 2.0 ? 1.0 - x / 2.0 : 0.0; }
static double pot_cut(double x) { return x < 2.0 ? 1.0 - x / 2.0 : 0.0; }

static int first_error;

static void check(int rc)
{
    if (rc < 0 && first_error == 0)
        first_error = rc;
}

int main(int argc, char **argv)
{
    int n = 0, cap = JMEMSIZE;
    double (*x)[3] = malloc(sizeof *x * cap), *m = malloc(sizeof *m * cap);
    double (*a)[3], *p;
    FILE *f;
    if (argc < 4 || (f = fopen(argv[1], "r")) == NULL)
        return 2;
    while (n < cap && fscanf(f, "%lf %lf %lf %lf", &x[n][0], &x[n][1], &x[n][2], &m[n]) == 4)
        n++;
    fclose(f);
    a = malloc(sizeof *a * n);
    p = malloc(sizeof *p * n);
    if (strcmp(argv[3], "call") == 0)
        check(g5_set_cutoff_scale(argc > 4 ? atof(argv[4]) : 0.0));
    check(g5_open());
    if (strcmp(argv[3], "call") == 0) {
        int rc = g5_set_cutoff_scale(2.0 * (argc > 4 ? atof(argv[4]) : 1.0));
        printf("refused %d\n", rc);
        check(g5_set_cutoff_scale(argc > 4 ? atof(argv[4]) : 0.0)); /* the same: accepted */
    }
    check(g5_set_eta(0.5));
    check(g5_set_cutoff_table(force_cut, 2.0, 0.0, pot_cut, 2.0, 0.0));
    check(g5_set_eps_to_all(atof(argv[2])));
    check(g5_set_xmj(0, n, x, m));
    check(g5_set_n(n));
    for (int off = 0, np = g5_get_number_of_pipelines(); off < n; off += np) {
        int ni = n - off < np ? n - off : np;
        check(g5_set_xi(ni, x + off));
        check(g5_run());
        check(g5_get_force(ni, a + off, p + off));
    }
    for (int i = 0; i < n; i++)
        printf("f %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);
    check(g5_calculate_force_on_x(x, a, p, n));
    for (int i = 0; i < n; i++)
        printf("c %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);
    check(g5_close());
    printf("rc %d\n", first_error);
    return 0;
}
