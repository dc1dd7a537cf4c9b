/*
 * g5_lists.c -- interaction lists through the GRAPE-5 calls, as a tree code makes them.
 *
 * usage: g5_lists NI NJ CALLS [THREADS] [GROUPS]
 *
 * NI and NJ are a number, or a range LO-HI: then each call draws its own, uniformly in
 * LO .. HI (the same sequence on every run), as a tree walk's groups and lists come (for
 * example 8-63 and 200-1999).  A pool of 4 NJ particles (the largest NJ; a deterministic
 * cloud in a unit sphere, equal masses).  Each call sends a fresh list: nj j-particles (a
 * slice of the pool that moves from call to call) with g5_set_xmj(0, nj, ...) and
 * g5_set_n(nj), then the forces on ni i-particles with g5_calculate_force_on_x.  With
 * THREADS > 1, every OpenMP thread t makes CALLS calls of its own on context t
 * (g5_set_xmjMC, g5_set_nMC, g5_calculate_force_on_xMC) at the same time.  With GROUPS > 1
 * (sapporo only), the same lists go GROUPS at a time, as one batch: the lists one after the
 * other in one g5_set_xmjMC, their i-particles copied one group after the other, and one
 * g5_calculate_force_on_groupsMC; the times per call are then a batch's divided by GROUPS.
 * After 10 untimed calls (or batches) per thread, prints
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
#include <string.h>
#include <time.h>

void g5_open(void);
void g5_close(void);
void g5_set_eps_to_all(double eps);
void g5_set_xmjMC(int devid, int adr, int nj, double (*xj)[3], double *mj);
void g5_set_nMC(int devid, int n);
void g5_calculate_force_on_xMC(int devid, double (*x)[3], double (*a)[3], double *p, int ni);
/* sapporo's (grape5.h); weak, so that the file links against PG5 too */
int g5_calculate_force_on_groupsMC(int devid, int ng, int *i_offsets, int *j_offsets,
                                   double (*x)[3], double (*a)[3], double *p)
    __attribute__((weak));

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
    int groups = argc > 5 ? atoi(argv[5]) : 1;
    double pairs = 0.0;
    if (calls < 1 || threads < 1 || groups < 1 || ni_hi > pool || calls % groups) {
        fprintf(stderr, "need CALLS, THREADS, GROUPS >= 1, CALLS a multiple of GROUPS and "
                "NI <= 4 NJ\n");
        return 2;
    }
    if (groups > 1 && !g5_calculate_force_on_groupsMC) {
        fprintf(stderr, "GROUPS > 1: this library has no g5_calculate_force_on_groupsMC\n");
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
        double (*xj)[3] = malloc(sizeof(double[3]) * nj_hi * groups);
        double *mj = malloc(sizeof(double) * nj_hi * groups);
        double (*xi)[3] = malloc(sizeof(double[3]) * ni_hi * groups);
        double (*a)[3] = malloc(sizeof(double[3]) * ni_hi * groups);
        double *p = malloc(sizeof(double) * ni_hi * groups);
        int *ioff = malloc(sizeof(int) * (groups + 1)), *joff = malloc(sizeof(int) * (groups + 1));
        for (int c = -10 * groups; c < calls; c += groups) {
            int first[groups], ifirst[groups];
            ioff[0] = joff[0] = 0;
            if (c == 0)  /* the timed lists: the same for every GROUPS */
                draw = 777 + (unsigned long long)t;
            for (int g = 0; g < groups; g++) {
                const int ni = ni_lo + (int)(uniform(&draw) * (ni_hi - ni_lo + 1));
                const int nj = nj_lo + (int)(uniform(&draw) * (nj_hi - nj_lo + 1));
                const long long l = c + g + 1000003LL;  /* the list's number */
                first[g] = (int)((l * 7919 + 104729LL * t) % (pool - nj));
                ifirst[g] = (int)((l * 4099 + 1009LL * t) % (pool - ni + 1));
                ioff[g + 1] = ioff[g] + ni;
                joff[g + 1] = joff[g] + nj;
            }
            if (c == 0) {
#pragma omp barrier
#pragma omp single
                t0 = now();
            }
            double s = now();
            for (int g = 0; g < groups; g++)  /* the tree walk's lists, copied as a code does */
                for (int k = 0; k < joff[g + 1] - joff[g]; k++) {
                    double *d = xj[joff[g] + k], *q = x[first[g] + k];
                    d[0] = q[0];
                    d[1] = q[1];
                    d[2] = q[2];
                    mj[joff[g] + k] = m[first[g] + k];
                }
            for (int g = 0; g < groups && groups > 1; g++)
                memcpy(xi[ioff[g]], x[ifirst[g]], sizeof(double[3]) * (ioff[g + 1] - ioff[g]));
            g5_set_xmjMC(t, 0, joff[groups], xj, mj);
            g5_set_nMC(t, joff[groups]);
            double f = now();
            if (groups > 1)
                g5_calculate_force_on_groupsMC(t, groups, ioff, joff, xi, a, p);
            else
                g5_calculate_force_on_xMC(t, x + ifirst[0], a, p, ioff[1]);
            if (c >= 0) {
                double e = now();
                for (int g = 0; g < groups; g++) {
                    const int ni = ioff[g + 1] - ioff[g];
                    times[(size_t)t * calls + c + g] = (e - s) / groups;
                    set_times[(size_t)t * calls + c + g] = (f - s) / groups;
                    force_times[(size_t)t * calls + c + g] = (e - f) / groups;
                    check += a[ioff[g] + ni / 2][0] + p[ioff[g]];
                    pairs += (double)ni * (joff[g + 1] - joff[g]);
                }
            }
        }
        free(xj);
        free(mj);
        free(xi);
        free(a);
        free(p);
        free(ioff);
        free(joff);
    }
    t1 = now();
    size_t total = (size_t)calls * threads;
    qsort(times, total, sizeof *times, cmp);
    qsort(set_times, total, sizeof *times, cmp);
    qsort(force_times, total, sizeof *times, cmp);
    printf("ni %s nj %s calls %d threads %d groups %d call_us %.2f set_us %.2f force_us %.2f "
           "interactions_per_s %.4g check %.6g\n", argv[1], argv[2], calls, threads, groups,
           1e6 * times[total / 2], 1e6 * set_times[total / 2], 1e6 * force_times[total / 2],
           pairs / (t1 - t0), check);
    g5_close();
    return 0;
}
