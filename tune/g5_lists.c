/*
 * g5_lists.c -- interaction lists through the GRAPE-5 calls, as a tree code makes them.
 *
 * usage: g5_lists NI NJ CALLS [THREADS]
 *
 * NI and NJ are a number, or a range LO-HI: then each call draws its own, uniformly in
 * LO .. HI (the same sequence on every run), as a tree walk's groups and lists come (for
 * example 8-63 and 200-1999).  A pool of 4 NJ particles (the largest NJ; a deterministic
 * cloud in a unit sphere, equal masses).  Each call sends a fresh list: nj j-particles (a
 * slice of the pool that moves from call to call) with g5_set_xmj(0, nj, ...) and
 * g5_set_n(nj), then the forces on ni i-particles with g5_calculate_force_on_x.  With
 * THREADS > 1, every OpenMP thread t makes CALLS calls of its own on context t
 * (g5_set_xmjMC, g5_set_nMC, g5_calculate_force_on_xMC) at the same time.  After 10
 * untimed calls per thread, prints
 *
 *   ni <NI> nj <NJ> calls <CALLS> threads <T> call_us <median per call> \
 *   set_us <median of the list's copy, g5_set_xmj and g5_set_n> \
 *   force_us <median of g5_calculate_force_on_x> \
 *   interactions_per_s <all threads' ni * nj over the wall time> check <sum>
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

/* "N" or "LO-HI" into lo, hi: 1, or 0 when it is neither */
static int range(const char *s, int *lo, int *hi)
{
    int k = sscanf(s, "%d-%d", lo, hi);
    if (k == 1)
        *hi = *lo;
    return k >= 1 && *lo >= 1 && *hi >= *lo;
}

int main(int argc, char **argv)
{
    int ni_lo, ni_hi, nj_lo, nj_hi;
    if (argc < 4 || !range(argv[1], &ni_lo, &ni_hi) || !range(argv[2], &nj_lo, &nj_hi)) {
        fprintf(stderr, "usage: %s NI NJ CALLS [THREADS] (NI, NJ: N or LO-HI)\n", argv[0]);
        return 2;
    }
    int calls = atoi(argv[3]), threads = argc > 4 ? atoi(argv[4]) : 1, pool = 4 * nj_hi;
    double pairs = 0.0;
    if (calls < 1 || threads < 1 || ni_hi > pool) {
        fprintf(stderr, "need CALLS, THREADS >= 1 and NI <= 4 NJ\n");
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
#pragma omp parallel num_threads(threads) reduction(+ : check, pairs)
    {
        int t = omp_get_thread_num();
        unsigned long long draw = 777 + (unsigned long long)t;
        double (*xj)[3] = malloc(sizeof(double[3]) * nj_hi), *mj = malloc(sizeof(double) * nj_hi);
        double (*a)[3] = malloc(sizeof(double[3]) * ni_hi), *p = malloc(sizeof(double) * ni_hi);
        for (int c = -10; c < calls; c++) {
            const int ni = ni_lo + (int)(uniform(&draw) * (ni_hi - ni_lo + 1));
            const int nj = nj_lo + (int)(uniform(&draw) * (nj_hi - nj_lo + 1));
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
                pairs += (double)ni * nj;
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
    printf("ni %s nj %s calls %d threads %d call_us %.2f set_us %.2f force_us %.2f "
           "interactions_per_s %.4g check %.6g\n", argv[1], argv[2], calls, threads,
           1e6 * times[total / 2], 1e6 * set_times[total / 2], 1e6 * force_times[total / 2],
           pairs / (t1 - t0), check);
    g5_close();
    return 0;
}
