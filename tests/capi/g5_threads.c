/* GRAPE-5 contexts from OpenMP threads: the same calls serially, then from 2 threads at
 * once (thread t uses context id 2t + 1), must give bitwise the same forces.
 *
 *   g5_threads IC CALLS
 *
 * Each context runs CALLS interaction lists, as a tree code sends them: fresh j-particles
 * at addresses 0 .. nj - 1 (a different slice of IC each call, its size varying), then the
 * forces on ni i-particles with g5_calculate_force_on_xMC, or with g5_set_xiMC, g5_runMC,
 * g5_get_forceMC.  Prints "same <0|1>", then the last call of context 1 as "f" lines and
 * its j-slice as "j first count" (for a check against the reference).
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grape5.h"

static int n;
static double (*x)[3], *m;

/* One context's calls; forces of every call into out (ni_max rows per call). */
static int run_context(int id, int calls, int ni_max, double *out, int *last_first,
                       int *last_nj)
{
    int worst = 0;
    double (*a)[3] = malloc(sizeof *a * ni_max), *p = malloc(sizeof *p * ni_max);
    for (int c = 0; c < calls; c++) {
        int first = (37 * c + 11 * id) % (n / 2), nj = n / 4 + (c * 53 + id * 7) % (n / 4);
        int ni = 1 + (c * 29 + id) % ni_max, rc = 0;
        double (*xi)[3] = x + (c * 13) % (n - ni_max);
        /* the arrays are indexed by address: the slice starts at address 0 */
        rc |= g5_set_xmjMC(id, 0, nj, x + first, m + first);
        rc |= g5_set_nMC(id, nj);
        if (c % 2 == 0) {
            rc |= g5_calculate_force_on_xMC(id, xi, a, p, ni);
        }
        else {
            rc |= g5_set_xiMC(id, ni, xi);
            rc |= g5_runMC(id);
            rc |= g5_get_forceMC(id, ni, a, p);
        }
        if (rc != 0)
            worst = -1;
        memset(out + (size_t)c * ni_max * 4, 0, sizeof(double) * ni_max * 4);
        for (int i = 0; i < ni; i++) {
            memcpy(out + ((size_t)c * ni_max + i) * 4, a[i], sizeof a[i]);
            out[((size_t)c * ni_max + i) * 4 + 3] = p[i];
        }
        *last_first = first;
        *last_nj = nj;
    }
    free(a);
    free(p);
    return worst;
}

int main(int argc, char **argv)
{
    FILE *f;
    int cap = 1 << 14, calls, ni_max = 100, rc = 0, firsts[2], njs[2];
    double *serial[2], *parallel[2];
    if (argc < 3)
        return 2;
    calls = atoi(argv[2]);
    x = malloc(sizeof *x * cap);
    m = malloc(sizeof *m * cap);
    if ((f = fopen(argv[1], "r")) == NULL)
        return 2;
    while (n < cap && fscanf(f, "%lf %lf %lf %lf", &x[n][0], &x[n][1], &x[n][2], &m[n]) == 4)
        n++;
    fclose(f);
    g5_open();
    g5_set_eps_to_all(0.01);
    for (int t = 0; t < 2; t++) {
        serial[t] = malloc(sizeof(double) * 4 * ni_max * calls);
        parallel[t] = malloc(sizeof(double) * 4 * ni_max * calls);
        rc |= run_context(2 * t + 1, calls, ni_max, serial[t], &firsts[t], &njs[t]);
    }
#pragma omp parallel num_threads(2) reduction(| : rc)
    {
        int t = omp_get_thread_num(), first, nj;
        rc |= run_context(2 * t + 1, calls, ni_max, parallel[t], &first, &nj);
    }
    printf("threads %d\n", omp_get_max_threads() >= 2 ? 2 : omp_get_max_threads());
    printf("rc %d\n", rc);
    printf("same %d\n", memcmp(serial[0], parallel[0], sizeof(double) * 4 * ni_max * calls) == 0
           && memcmp(serial[1], parallel[1], sizeof(double) * 4 * ni_max * calls) == 0);
    {
        int c = calls - 1, ni = 1 + (c * 29 + 1) % ni_max;
        printf("j %d %d\n", firsts[0], njs[0]);
        printf("i %d %d\n", (c * 13) % (n - ni_max), ni);
        for (int i = 0; i < ni; i++) {
            const double *r = serial[0] + ((size_t)c * ni_max + i) * 4;
            printf("f %d %.17g %.17g %.17g %.17g\n", i, r[0], r[1], r[2], r[3]);
        }
    }
    g5_close();
    return 0;
}
