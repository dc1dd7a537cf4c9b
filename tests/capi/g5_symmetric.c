/* PG5's SYMMETRIC variant: built with -DSYMMETRIC, grape5.h makes g5_set_xmj the call with
 * a softening per j-particle (g5_set_xmje).  A pair is softened by eps_i^2 + epsj2[j].
 *
 *   g5_symmetric IC EPS_I EPSJ2
 *
 * Every particle of IC ("x y z m" lines) is a j-particle with softening EPSJ2 (squared)
 * and an i-particle with softening EPS_I (not squared).  Prints "f i ax ay az pot" and
 * "rc <worst code>". */
#include <stdio.h>
#include <stdlib.h>

#include "grape5.h"

int main(int argc, char **argv)
{
    int n = 0, cap = 4096, rc = 0;
    double (*x)[3] = malloc(sizeof *x * cap), *m = malloc(sizeof *m * cap), *e2;
    double (*a)[3], *p;
    FILE *f;
    if (argc < 4 || (f = fopen(argv[1], "r")) == NULL)
        return 2;
    while (n < cap && fscanf(f, "%lf %lf %lf %lf", &x[n][0], &x[n][1], &x[n][2], &m[n]) == 4)
        n++;
    fclose(f);
    e2 = malloc(sizeof *e2 * n);
    a = malloc(sizeof *a * n);
    p = malloc(sizeof *p * n);
    for (int i = 0; i < n; i++)
        e2[i] = atof(argv[3]);
    rc |= g5_open();
    rc |= g5_set_eps_to_all(atof(argv[2]));
    rc |= g5_set_xmj(0, n, x, m, e2);
    rc |= g5_set_n(n);
    rc |= g5_calculate_force_on_x(x, a, p, n);
    for (int i = 0; i < n; i++)
        printf("f %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);
    printf("rc %d\n", rc);
    g5_close();
    return 0;
}
