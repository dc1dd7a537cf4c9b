/*
 * hermite.c -- a block-time-step 4th-order Hermite integrator on the GRAPE-6 C names.
 *
 * usage: hermite IC_FILE OUT_PREFIX EPS2 T_END ETA H2
 *   IC_FILE: first line N, then N lines "m x y z vx vy vz".
 *   Writes OUT_PREFIX.forces (first force call: "index ax ay az jx jy jz pot nnb" per
 *   particle, through g6calc_lasthalf2) and OUT_PREFIX.nb (first call's neighbour lists for
 *   radius^2 H2: "index count id...", through g6_read/get_neighbour_list); prints
 *   "E0 <e> E1 <e> steps <n> blocks <n>" after integrating to T_END.
 * Exit status: 0, or 1 with a message on any library error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grape6.h"

#define DT_MAX (1.0 / 16.0)
#define DT_MIN (1.0 / 1073741824.0)
#define MAXNB 512

static int n, npipes;
static double eps2, eta;
static double *m, (*x)[3], (*v)[3], (*a)[3], (*j)[3], (*a2)[3], *pot, *t, *dt;

static void die(const char *what, int rc)
{
    fprintf(stderr, "hermite: %s failed with %d\n", what, rc);
    exit(1);
}

static double norm(const double *p)
{
    return sqrt(p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
}

static void send_j(int i)
{
    double k18[3], j6[3], ah[3];
    for (int k = 0; k < 3; k++) {
        k18[k] = a2[i][k] / 18.0;
        j6[k] = j[i][k] / 6.0;
        ah[k] = a[i][k] / 2.0;
    }
    int rc = g6_set_j_particle(0, i, i, t[i], dt[i], m[i], k18, j6, ah, v[i], x[i]);
    if (rc != 0)
        die("g6_set_j_particle", rc);
}

/* Forces on the ni particles list[] at positions xp, vp (chunks of npipes). */
static void forces(int ni, const int *list, double (*xp)[3], double (*vp)[3],
                   double (*acc)[3], double (*jrk)[3], double *phi, int *nnb, double h2,
                   FILE *nbfile)
{
    int idx[npipes];
    double xi[npipes][3], vi[npipes][3], h2i[npipes];
    for (int c0 = 0; c0 < ni; c0 += npipes) {
        int nc = ni - c0 < npipes ? ni - c0 : npipes;
        for (int q = 0; q < nc; q++) {
            int i = list[c0 + q];
            idx[q] = i;
            h2i[q] = h2;
            memcpy(xi[q], xp[i], sizeof xi[q]);
            memcpy(vi[q], vp[i], sizeof vi[q]);
        }
        g6calc_firsthalf(0, n, nc, idx, xi, vi, acc + c0, jrk + c0, phi + c0, eps2, h2i);
        int rc = nnb ? g6calc_lasthalf2(0, n, nc, idx, xi, vi, eps2, h2i, acc + c0, jrk + c0,
                                        phi + c0, nnb + c0)
                     : g6calc_lasthalf(0, n, nc, idx, xi, vi, eps2, h2i, acc + c0, jrk + c0,
                                       phi + c0);
        if (rc != 0)
            die("g6calc_lasthalf", rc);
        if (nbfile) {
            int nbl[MAXNB], len;
            if ((rc = g6_read_neighbour_list(0)) != 0)
                die("g6_read_neighbour_list", rc);
            for (int q = 0; q < nc; q++) {
                if ((rc = g6_get_neighbour_list(0, q, MAXNB, &len, nbl)) != 0)
                    die("g6_get_neighbour_list", rc);
                fprintf(nbfile, "%d %d", idx[q], len);
                for (int k = 0; k < len; k++)
                    fprintf(nbfile, " %d", nbl[k]);
                fprintf(nbfile, "\n");
            }
        }
    }
}

static double energy(void)
{
    int *all = malloc(sizeof(int) * n);
    double (*acc)[3] = malloc(sizeof(double[3]) * n), (*jrk)[3] = malloc(sizeof(double[3]) * n);
    double e = 0.0;
    for (int i = 0; i < n; i++)
        all[i] = i;
    int rc = g6_set_ti(0, t[0]);
    if (rc != 0)
        die("g6_set_ti", rc);
    forces(n, all, x, v, acc, jrk, pot, NULL, 0.0, NULL);
    for (int i = 0; i < n; i++)
        e += 0.5 * m[i] * (v[i][0] * v[i][0] + v[i][1] * v[i][1] + v[i][2] * v[i][2])
             + 0.5 * m[i] * pot[i];
    free(all), free(acc), free(jrk);
    return e;
}

/* Largest power of two <= limit, at most twice dt_old, that divides time. */
static double block_step(double limit, double dt_old, double time)
{
    double d = dt_old;
    while (d > limit && d > DT_MIN)
        d *= 0.5;
    if (d == dt_old && 2.0 * d <= limit && 2.0 * d <= DT_MAX && fmod(time, 2.0 * d) == 0.0)
        d *= 2.0;
    return d;
}

int main(int argc, char **argv)
{
    if (argc != 7) {
        fprintf(stderr, "usage: hermite IC_FILE OUT_PREFIX EPS2 T_END ETA H2\n");
        return 2;
    }
    FILE *ic = fopen(argv[1], "r");
    if (!ic || fscanf(ic, "%d", &n) != 1 || n < 2)
        return fprintf(stderr, "hermite: bad %s\n", argv[1]), 2;
    eps2 = atof(argv[3]);
    double t_end = atof(argv[4]), h2 = atof(argv[6]);
    eta = atof(argv[5]);
    m = malloc(sizeof(double) * n), pot = malloc(sizeof(double) * n);
    t = malloc(sizeof(double) * n), dt = malloc(sizeof(double) * n);
    x = malloc(sizeof(double[3]) * n), v = malloc(sizeof(double[3]) * n);
    a = malloc(sizeof(double[3]) * n), j = malloc(sizeof(double[3]) * n);
    a2 = calloc((size_t)n, sizeof(double[3]));
    double (*xp)[3] = malloc(sizeof(double[3]) * n), (*vp)[3] = malloc(sizeof(double[3]) * n);
    double (*an)[3] = malloc(sizeof(double[3]) * n), (*jn)[3] = malloc(sizeof(double[3]) * n);
    int *active = malloc(sizeof(int) * n), *nnb = malloc(sizeof(int) * n);
    for (int i = 0; i < n; i++)
        if (fscanf(ic, "%lf %lf %lf %lf %lf %lf %lf", &m[i], &x[i][0], &x[i][1], &x[i][2],
                   &v[i][0], &v[i][1], &v[i][2]) != 7)
            return fprintf(stderr, "hermite: bad line %d of %s\n", i + 2, argv[1]), 2;
    fclose(ic);

    int rc = g6_open(0);
    if (rc != 0)
        die("g6_open", rc);
    npipes = g6_npipes();
    if (npipes < 1)
        die("g6_npipes", npipes);
    g6_set_tunit(51);
    g6_set_xunit(51);
    g6_initialize_jp_buffer(0, 1024);
    g6_set_neighbour_list_sort_mode(1);
    g6_set_overflow_flag_test_mode(0, 0, 0);
    if (g6_reset(0) != 0 || g6_reset_fofpga(0) != 0)
        die("g6_reset", -1);

    /* First forces: j-particles with zero derivatives at t = 0, all particles active. */
    for (int i = 0; i < n; i++) {
        t[i] = 0.0, dt[i] = 0.0, active[i] = i;
        memset(a[i], 0, sizeof a[i]), memset(j[i], 0, sizeof j[i]);
        send_j(i);
    }
    if ((rc = g6_set_ti(0, 0.0)) != 0)
        die("g6_set_ti", rc);
    char path[4096];
    snprintf(path, sizeof path, "%s.nb", argv[2]);
    FILE *nbf = fopen(path, "w");
    forces(n, active, x, v, a, j, pot, nnb, h2, nbf);
    fclose(nbf);
    snprintf(path, sizeof path, "%s.forces", argv[2]);
    FILE *ff = fopen(path, "w");
    for (int i = 0; i < n; i++)
        fprintf(ff, "%d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d\n", i, a[i][0], a[i][1],
                a[i][2], j[i][0], j[i][1], j[i][2], pot[i], nnb[i]);
    fclose(ff);

    for (int i = 0; i < n; i++) {
        dt[i] = block_step(0.01 * norm(a[i]) / norm(j[i]), DT_MAX, 0.0);
        send_j(i);
    }
    if ((rc = g6_flush_jp_buffer(0)) != 0)
        die("g6_flush_jp_buffer", rc);
    double e0 = energy();

    long steps = 0, blocks = 0;
    double time = 0.0;
    while (time < t_end) {
        double tnext = INFINITY;
        for (int i = 0; i < n; i++)
            if (t[i] + dt[i] < tnext)
                tnext = t[i] + dt[i];
        int na = 0;
        for (int i = 0; i < n; i++)
            if (t[i] + dt[i] == tnext)
                active[na++] = i;
        time = tnext;
        if ((rc = g6_set_ti(0, time)) != 0)
            die("g6_set_ti", rc);
        for (int q = 0; q < na; q++) {
            int i = active[q];
            double h = time - t[i];
            for (int k = 0; k < 3; k++) {
                xp[i][k] = x[i][k] + h * (v[i][k] + h * (a[i][k] / 2 + h * j[i][k] / 6));
                vp[i][k] = v[i][k] + h * (a[i][k] + h * j[i][k] / 2);
            }
        }
        forces(na, active, xp, vp, an, jn, pot, NULL, 0.0, NULL);
        for (int q = 0; q < na; q++) {
            int i = active[q];
            double h = time - t[i], s[3], c[3];
            for (int k = 0; k < 3; k++) {
                double da = a[i][k] - an[q][k];
                s[k] = (-6.0 * da - h * (4.0 * j[i][k] + 2.0 * jn[q][k])) / (h * h);
                c[k] = (12.0 * da + 6.0 * h * (j[i][k] + jn[q][k])) / (h * h * h);
                x[i][k] = xp[i][k] + h * h * h * h * (s[k] / 24 + h * c[k] / 120);
                v[i][k] = vp[i][k] + h * h * h * (s[k] / 6 + h * c[k] / 24);
                a[i][k] = an[q][k];
                j[i][k] = jn[q][k];
                a2[i][k] = s[k] + h * c[k];
            }
            double na_ = norm(a[i]), nj_ = norm(j[i]), ns = norm(a2[i]), nc = norm(c);
            double limit = sqrt(eta * (na_ * ns + nj_ * nj_) / (nj_ * nc + ns * ns));
            t[i] = time;
            dt[i] = block_step(limit, h, time);
            send_j(i);
        }
        steps += na;
        blocks++;
    }
    double e1 = energy();
    printf("E0 %.17g E1 %.17g steps %ld blocks %ld\n", e0, e1, steps, blocks);
    if ((rc = g6_close(0)) != 0)
        die("g6_close", rc);
    return 0;
}
