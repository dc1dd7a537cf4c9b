/*
 * g5_lists.c -- interaction lists through the GRAPE-5 calls, as a tree code makes them.
 *
 * usage: g5_lists NI NJ CALLS [THREADS]
 *
 * A pool of 4 NJ particles (a deterministic cloud in a unit sphere, equal masses).  Each
 * call sends a fresh list: NJ j-particles (a slice of the pool that moves from call to
 * call) with g5_set_xmj(0, NJ, ...) and g5_set_n(NJ), then the forces on NI i-particles
 * with g5_calculate_force_on_x.  With THREADS > 1, every OpenMP thread t makes CALLS calls
 * of its own on context t (g5_set_xmjMC, g5_set_nMC, g5_calculate_force_on_xMC) at the
 * same time.  After 10 untimed calls per thread, prints
 *
 *   ni <NI> nj <NJ> calls <CALLS> threads <T> call_us <median per call> \
 *   set_us <median of the list's copy, g5_set_xmj and g5_set_n> \
 *   force_us <median of g5_calculate_force_on_x> \
 *   interactions_per_s <all threads' NI * NJ * CALLS over the wall time> check <sum>
 *
 * It declares the calls as Phantom-GRAPE's PG5 does (void), so the same file links against
 * sapporo and against PG5's libpg5.a (built by hand from PG5/newton/libpg5, outside this
 * repository):
 *
 *   cc -O2 -fopenmp tune/g5_lists.c $(sapporo capi flags) -lm -o g5_lists_sapporo
 *   cc -O2 -fopenmp tune/g5_lists.c /path/to/libpg5.a -lm -o g5_lists_pg5
 */
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

void g5_open(void);
void g5_close(void);
void g5_set_eps_to_all(double eps);
void g5_set_xmjMC(int devid, int adr, int nj, double (*xj)[3], double *mj);
void g5_set_nMC(int devid, int n);
void g5_calculate_force_on_xMC(int devid, double (*x)[3], double (*a)[3], double *p, int ni);

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int cmp(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return (a > b) - (a < b);
}

/* a reproducible pseudo-random number in [0, 1) */
static double uniform(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(*s >> 11) / 9007199254740992.0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: %s NI NJ CALLS [THREADS]\n", argv[0]);
        return 2;
    }
    int ni = atoi(argv[1]), nj = atoi(argv[2]), calls = atoi(argv[3]);
    int threads = argc > 4 ? atoi(argv[4]) : 1, pool = 4 * nj;
    if (ni < 1 || nj < 1 || calls < 1 || threads < 1 || ni > pool) {
        fprintf(stderr, "need NI, NJ, CALLS, THREADS >= 1 and NI <= 4 NJ\n");
        return 2;
    }
    double (*x)[3] = malloc(sizeof(double[3]) * pool), *m = malloc(sizeof(double) * pool);
    double *times = malloc(sizeof(double) * calls * threads), check = 0.0;
    double *set_times = malloc(sizeof(double) * calls * threads);
    double *force_times = malloc(sizeof(double) * calls * threads);
    unsigned long long seed = 12345;
    for (int i = 0; i < pool; i++) {
        double r2;
        do {
            for (int k = 0; k < 3; k++)
                x[i][k] = 2 * uniform(&seed) - 1;
            r2 = x[i][0] * x[i][0] + x[i][1] * x[i][1] + x[i][2] * x[i][2];
        } while (r2 > 1.0);
        m[i] = 1.0 / pool;
    }
    g5_open();
    g5_set_eps_to_all(1.0 / 64);
    double t0 = 0.0, t1;
#pragma omp parallel num_threads(threads) reduction(+ : check)
    {
        int t = omp_get_thread_num();
        double (*xj)[3] = malloc(sizeof(double[3]) * nj), *mj = malloc(sizeof(double) * nj);
        double (*a)[3] = malloc(sizeof(double[3]) * ni), *p = malloc(sizeof(double) * ni);
        for (int c = -10; c < calls; c++) {
            int first = (int)(((long long)(c + 10) * 7919 + 104729LL * t) % (pool - nj));
            int ifirst = (int)(((long long)(c + 10) * 4099 + 1009LL * t) % (pool - ni + 1));
            if (c == 0) {
#pragma omp barrier
#pragma omp single
                t0 = now();
            }
            double s = now();
            for (int k = 0; k < nj; k++) {  /* the tree walk's list, copied as a code does */
                xj[k][0] = x[first + k][0];
                xj[k][1] = x[first + k][1];
                xj[k][2] = x[first + k][2];
                mj[k] = m[first + k];
            }
            g5_set_xmjMC(t, 0, nj, xj, mj);
            g5_set_nMC(t, nj);
            double f = now();
            g5_calculate_force_on_xMC(t, x + ifirst, a, p, ni);
            if (c >= 0) {
                double e = now();
                times[(size_t)t * calls + c] = e - s;
                set_times[(size_t)t * calls + c] = f - s;
                force_times[(size_t)t * calls + c] = e - f;
                check += a[ni / 2][0] + p[0];
            }
        }
        free(xj);
        free(mj);
        free(a);
        free(p);
    }
    t1 = now();
    size_t total = (size_t)calls * threads;
    qsort(times, total, sizeof *times, cmp);
    qsort(set_times, total, sizeof *times, cmp);
    qsort(force_times, total, sizeof *times, cmp);
    printf("ni %d nj %d calls %d threads %d call_us %.2f set_us %.2f force_us %.2f "
           "interactions_per_s %.4g check %.6g\n", ni, nj, calls, threads,
           1e6 * times[total / 2], 1e6 * set_times[total / 2], 1e6 * force_times[total / 2],
           (double)ni * nj * calls * threads / (t1 - t0), check);
    g5_close();
    return 0;
}
