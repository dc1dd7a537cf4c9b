/* The GRAPE-5 calls of grape5.h on one set of particles, the way a tree code uses them.
 *
 *   g5_forces IC EPS MODE [NI]
 *
 * IC: lines "x y z m".  Every particle is a j-particle; the i-particles are the first NI
 * (default: all).  MODE:
 *   set    g5_set_eps_to_all, g5_set_xmj, g5_set_n, then per chunk of
 *          g5_get_number_of_pipelines(): g5_set_xi, g5_run, g5_get_force
 *   eps    as set, then g5_set_eps gives i-particle i the softening eps * (1 + i % 3)
 *   calc   g5_calculate_force_on_x
 *   calce  g5_calculate_force_on_xe with eps2[i] = (eps * (1 + i % 3))^2
 *   split  g5_set_xmj in two parts (the second at adr = n/2, arrays indexed by address)
 * Prints "f i ax ay az pot" (%.17g) per i-particle, then "rc <worst code>".
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grape5.h"
#include "ic.h"
#include "sapporo.h"

static int worst;

static void check(int rc)
{
    if (rc < worst)
        worst = rc;
}

int main(int argc, char **argv)
{
    int n, ni, np;
    double (*x)[3], *m, (*a)[3], *p, eps;
    const char *mode;
    if (argc < 4) {
        fprintf(stderr, "usage: g5_forces IC EPS MODE [NI]\n");
        return 2;
    }
    eps = atof(argv[2]);
    mode = argv[3];
    if ((n = read_ic(argv[1], &x, &m)) < 0)
        return 2;
    ni = argc > 4 ? atoi(argv[4]) : n;
    a = calloc(n, sizeof *a);
    p = calloc(n, sizeof *p);

    check(g5_open());
    np = g5_get_number_of_pipelines();
    printf("pipelines %d jmemsize %d\n", np, g5_get_jmemsize());
    check(g5_set_eps_to_all(eps));
    if (strcmp(mode, "split") == 0) {
        check(g5_set_xmj(0, n / 2, x, m));
        check(g5_set_xmj(n / 2, n - n / 2, x, m));
    }
    else {
        check(g5_set_xmj(0, n, x, m));
    }
    check(g5_set_n(n));
    if (strcmp(mode, "calc") == 0) {
        check(g5_calculate_force_on_x(x, a, p, ni));
    }
    else if (strcmp(mode, "calce") == 0) {
        double *eps2 = malloc(sizeof *eps2 * ni);
        for (int i = 0; i < ni; i++)
            eps2[i] = (eps * (1 + i % 3)) * (eps * (1 + i % 3));
        check(g5_calculate_force_on_xe(x, eps2, a, p, ni));
        free(eps2);
    }
    else {
        for (int off = 0; off < ni; off += np) {
            int k = ni - off < np ? ni - off : np;
            check(g5_set_xi(k, x + off));
            if (strcmp(mode, "eps") == 0) {
                double e[k];
                for (int i = 0; i < k; i++)
                    e[i] = eps * (1 + (off + i) % 3);
                check(g5_set_eps(k, e));
            }
            check(g5_run());
            check(g5_get_force(k, a + off, p + off));
        }
    }
    for (int i = 0; i < ni; i++)
        printf("f %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);
    printf("rc %d\n", worst);
    fprintf(stderr, "direct_calls %ld\n", sapporo_direct_calls());
    check(g5_close());
    return 0;
}
