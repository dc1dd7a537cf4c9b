/* A program written for Phantom-GRAPE's PG5: its own declarations of the calls as PG5's
 * header has them (void, no error codes), no sapporo header.  It links against PG5's
 * libpg5.a or, unchanged, against sapporo (-lpg5 or -lg5).
 *
 *   g5_pg5style IC EPS
 *
 * IC: lines "x y z m"; every particle is a j-particle and an i-particle.  Prints "f i ax ay
 * az pot" from g5_set_xi / g5_run / g5_get_force per chunk of g5_get_number_of_pipelines(),
 * and "c ..." from g5_calculate_force_on_x.
 */
#include <stdio.h>
#include <stdlib.h>

void g5_open(void);
void g5_close(void);
int g5_get_number_of_pipelines(void);
int g5_get_jmemsize(void);
void g5_set_eps_to_all(double eps);
void g5_set_n(int n);
void g5_set_xmj(int adr, int nj, double (*xj)[3], double *mj);
void g5_set_xi(int ni, double (*xi)[3]);
void g5_run(void);
void g5_get_force(int ni, double (*a)[3], double *p);
void g5_calculate_force_on_x(double (*x)[3], double (*a)[3], double *p, int ni);

int main(int argc, char **argv)
{
    int n = 0, cap = 1 << 16;
    double (*x)[3] = malloc(sizeof *x * cap), *m = malloc(sizeof *m * cap);
    double (*a)[3], *p;
    FILE *f;
    if (argc < 3 || (f = fopen(argv[1], "r")) == NULL)
        return 2;
    while (n < cap && fscanf(f, "%lf %lf %lf %lf", &x[n][0], &x[n][1], &x[n][2], &m[n]) == 4)
        n++;
    fclose(f);
    a = malloc(sizeof *a * n);
    p = malloc(sizeof *p * n);
    g5_open();
    if (g5_get_jmemsize() < n)
        return 3;
    g5_set_eps_to_all(atof(argv[2]));
    g5_set_xmj(0, n, x, m);
    g5_set_n(n);
    for (int off = 0, np = g5_get_number_of_pipelines(); off < n; off += np) {
        int ni = n - off < np ? n - off : np;
        g5_set_xi(ni, x + off);
        g5_run();
        g5_get_force(ni, a + off, p + off);
    }
    for (int i = 0; i < n; i++)
        printf("f %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);
    g5_calculate_force_on_x(x, a, p, n);
    for (int i = 0; i < n; i++)
        printf("c %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);
    g5_close();
    return 0;
}
