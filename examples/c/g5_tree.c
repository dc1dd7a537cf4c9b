/*
 * g5_tree.c -- a small Barnes-Hut tree code on sapporo's GRAPE-5 calls (grape5.h).
 *
 * usage: g5_tree [N [THETA]]        (defaults: 4096 particles, opening angle 0.6)
 *
 * Builds an octree over a Plummer sphere (G = 1, total mass 1), cuts it into groups of at
 * most NCRIT particles and, for every group, walks the tree once to make its interaction
 * list: distant cells as pseudo-particles at their centre of mass, near leaves as their
 * particles.  The walk runs twice:
 *   - one list per call, as a tree code on GRAPE-5 makes them: each list goes to the
 *     library with g5_set_xmj and g5_set_n, the group's forces come back from
 *     g5_calculate_force_on_x;
 *   - BATCH groups per call (sapporo's groups): their lists stored one after the other with
 *     one g5_set_xmj, the forces of all of them from one g5_calculate_force_on_groups.
 * Built with OpenMP, each thread walks its own groups and uses its own context (the MC calls
 * with the thread number as id).  Then the same forces by direct summation (every particle
 * in one list) for comparison.
 *
 * Build: cc -O2 -fopenmp g5_tree.c $(sapporo capi flags) -lm -o g5_tree   (or `make`)
 * Prints N, the groups and their mean list length, the times, the largest difference
 * between the two walks' accelerations, the RMS relative error of the tree's accelerations
 * and both potential energies.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "grape5.h"

#define NLEAF 8    /* particles per leaf cell, at most */
#define NCRIT 64   /* particles per group (one force call), at most */
#define EPS 0.01   /* softening length */
#define BATCH 64   /* groups per g5_calculate_force_on_groups call */

struct cell {
    double centre[3], half;  /* the cube */
    double com[3], mass;     /* centre of mass, mass */
    int first, count;        /* its particles: order[first .. first + count - 1] */
    int child[8];            /* -1: none */
};

static int n;
static double (*x)[3], *m;
static int *order;
static struct cell *cells;
static int ncells, max_cells;

static double uniform(unsigned long long *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return ((double)(*s >> 11) + 0.5) / 9007199254740992.0;
}

/* A Plummer sphere (positions only: forces are what this example computes). */
static void plummer(void)
{
    unsigned long long seed = 42;
    for (int i = 0; i < n; i++) {
        double r, u, z, phi;
        do
            r = 1.0 / sqrt(pow(uniform(&seed), -2.0 / 3.0) - 1.0);
        while (r > 10.0);
        r *= 3.0 * M_PI / 16.0;  /* Henon units */
        z = 2.0 * uniform(&seed) - 1.0;
        phi = 2.0 * M_PI * uniform(&seed);
        u = sqrt(1.0 - z * z);
        x[i][0] = r * u * cos(phi);
        x[i][1] = r * u * sin(phi);
        x[i][2] = r * z;
        m[i] = 1.0 / n;
    }
}

/* Cell c over order[first .. first + count - 1]: mass, centre of mass, children. */
static int build(const double centre[3], double half, int first, int count)
{
    int c = ncells++, start[9];
    struct cell *p = &cells[c];
    if (c == max_cells) {
        fprintf(stderr, "g5_tree: more than %d cells (coincident particles?)\n", max_cells);
        exit(1);
    }
    memcpy(p->centre, centre, sizeof p->centre);
    p->half = half;
    p->first = first;
    p->count = count;
    p->mass = 0.0;
    p->com[0] = p->com[1] = p->com[2] = 0.0;
    for (int k = 0; k < count; k++) {
        int i = order[first + k];
        p->mass += m[i];
        for (int d = 0; d < 3; d++)
            p->com[d] += m[i] * x[i][d];
    }
    for (int d = 0; d < 3; d++)
        p->com[d] /= p->mass;
    for (int o = 0; o < 8; o++)
        p->child[o] = -1;
    if (count <= NLEAF)
        return c;
    /* sort the particles by octant (a counting sort), then one child per octant */
    {
        int *tmp = malloc(sizeof(int) * count), fill[8] = {0};
        int counts[8] = {0};
        for (int k = 0; k < count; k++) {
            int i = order[first + k], o = 0;
            for (int d = 0; d < 3; d++)
                o |= (x[i][d] > centre[d]) << d;
            counts[o]++;
        }
        start[0] = 0;
        for (int o = 0; o < 8; o++)
            start[o + 1] = start[o] + counts[o];
        for (int k = 0; k < count; k++) {
            int i = order[first + k], o = 0;
            for (int d = 0; d < 3; d++)
                o |= (x[i][d] > centre[d]) << d;
            tmp[start[o] + fill[o]++] = i;
        }
        memcpy(order + first, tmp, sizeof(int) * count);
        free(tmp);
    }
    for (int o = 0; o < 8; o++) {
        double sub[3];
        int child;
        if (start[o + 1] == start[o])
            continue;
        for (int d = 0; d < 3; d++)
            sub[d] = centre[d] + ((o >> d) & 1 ? 0.5 : -0.5) * half;
        child = build(sub, 0.5 * half, first + start[o], start[o + 1] - start[o]);
        cells[c].child[o] = child;
    }
    return c;
}

/* Interaction list of group g from cell c: pseudo-particles and particles. */
static void walk(const struct cell *g, int c, double theta, double (*lx)[3], double *lm,
                 int *nl)
{
    const struct cell *p = &cells[c];
    double d2 = 0.0, reach;
    for (int d = 0; d < 3; d++) {
        double dd = fabs(p->com[d] - g->centre[d]) - g->half;  /* from the group's cube */
        if (dd > 0.0)
            d2 += dd * dd;
    }
    reach = 2.0 * p->half / theta;
    if (d2 > reach * reach) {  /* far enough: the cell as one pseudo-particle */
        memcpy(lx[*nl], p->com, sizeof p->com);
        lm[(*nl)++] = p->mass;
        return;
    }
    if (p->count <= NLEAF) {  /* a near leaf: its particles */
        for (int k = 0; k < p->count; k++) {
            int i = order[p->first + k];
            memcpy(lx[*nl], x[i], sizeof x[i]);
            lm[(*nl)++] = m[i];
        }
        return;
    }
    for (int o = 0; o < 8; o++)
        if (p->child[o] >= 0)
            walk(g, p->child[o], theta, lx, lm, nl);
}

/* The groups: the largest cells with at most NCRIT particles. */
static void groups(int c, int *list, int *ng)
{
    if (cells[c].count <= NCRIT) {
        list[(*ng)++] = c;
        return;
    }
    for (int o = 0; o < 8; o++)
        if (cells[c].child[o] >= 0)
            groups(cells[c].child[o], list, ng);
}

/* Room for *cap list entries at *lx, *lm: at least need. */
static void room(double (**lx)[3], double **lm, long *cap, long need)
{
    if (need <= *cap)
        return;
    *cap = need > 2 * *cap ? need : 2 * *cap;
    *lx = realloc(*lx, sizeof **lx * *cap);
    *lm = realloc(*lm, sizeof **lm * *cap);
    if (*lx == NULL || *lm == NULL) {
        fprintf(stderr, "g5_tree: out of memory\n");
        exit(1);
    }
}

/* The forces on every group's particles: one list per call (batch 1), or batch groups per
 * g5_calculate_force_on_groupsMC; the mean list length. */
static double tree_forces(double theta, const int *glist, int ng, int batch, double (*a)[3],
                          double *pot)
{
    long list_total = 0;
#pragma omp parallel reduction(+ : list_total)
    {
        int id = 0, ioff[BATCH + 1], joff[BATCH + 1];
        long cap = 0;
        double (*lx)[3] = NULL, *lm = NULL;
        double (*gx)[3] = malloc(sizeof *gx * NCRIT * batch);
        double (*ga)[3] = malloc(sizeof *ga * NCRIT * batch), *gp = malloc(sizeof *gp * NCRIT * batch);
#ifdef _OPENMP
        id = omp_get_thread_num();
#endif
#pragma omp for schedule(dynamic)
        for (int k0 = 0; k0 < ng; k0 += batch) {
            const int nb = ng - k0 < batch ? ng - k0 : batch;
            ioff[0] = joff[0] = 0;
            for (int b = 0; b < nb; b++) {
                const struct cell *g = &cells[glist[k0 + b]];
                int nl = 0;
                room(&lx, &lm, &cap, joff[b] + (long)n);  /* a list holds n at most */
                walk(g, 0, theta, lx + joff[b], lm + joff[b], &nl);
                for (int j = 0; j < g->count; j++)
                    memcpy(gx[ioff[b] + j], x[order[g->first + j]], sizeof gx[j]);
                ioff[b + 1] = ioff[b] + g->count;
                joff[b + 1] = joff[b] + nl;
            }
            list_total += joff[nb];
            g5_set_xmjMC(id, 0, joff[nb], lx, lm);
            if (batch == 1) {
                g5_set_nMC(id, joff[1]);
                g5_calculate_force_on_xMC(id, gx, ga, gp, ioff[1]);
            }
            else
                g5_calculate_force_on_groupsMC(id, nb, ioff, joff, gx, ga, gp);
            for (int b = 0; b < nb; b++) {
                const struct cell *g = &cells[glist[k0 + b]];
                for (int j = 0; j < g->count; j++) {
                    int i = order[g->first + j];
                    memcpy(a[i], ga[ioff[b] + j], sizeof a[i]);
                    pot[i] = gp[ioff[b] + j];
                }
            }
        }
        free(lx);
        free(lm);
        free(gx);
        free(ga);
        free(gp);
    }
    return (double)list_total / ng;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv)
{
    double theta, (*a)[3], *pot, (*ab)[3], *potb, (*ad)[3], *potd, t0, t_tree, t_batch;
    double t_direct, err2 = 0.0, diff = 0.0, w_tree = 0.0, w_direct = 0.0, mean_list;
    double root_centre[3] = {0, 0, 0}, half = 0.0;
    int *glist, ng = 0;
    n = argc > 1 ? atoi(argv[1]) : 4096;
    theta = argc > 2 ? atof(argv[2]) : 0.6;
    if (n < 2 || theta <= 0.0) {
        fprintf(stderr, "usage: g5_tree [N >= 2 [THETA > 0]]\n");
        return 2;
    }
    x = malloc(sizeof *x * n);
    m = malloc(sizeof *m * n);
    order = malloc(sizeof(int) * n);
    max_cells = 4 * n + 64;
    cells = malloc(sizeof *cells * (size_t)max_cells);
    glist = malloc(sizeof(int) * n);
    a = calloc(n, sizeof *a);
    pot = calloc(n, sizeof *pot);
    ab = calloc(n, sizeof *ab);
    potb = calloc(n, sizeof *potb);
    ad = calloc(n, sizeof *ad);
    potd = calloc(n, sizeof *potd);
    plummer();
    if (g5_open() < 0)
        return 1;
    g5_set_eps_to_all(EPS);

    t0 = now();
    for (int i = 0; i < n; i++) {
        order[i] = i;
        for (int d = 0; d < 3; d++)
            half = fmax(half, fabs(x[i][d]));
    }
    build(root_centre, half * 1.0001, 0, n);
    groups(0, glist, &ng);
    mean_list = tree_forces(theta, glist, ng, 1, a, pot);
    t_tree = now() - t0;
    t0 = now();
    tree_forces(theta, glist, ng, BATCH, ab, potb);
    t_batch = now() - t0;

    t0 = now();  /* direct summation: every particle in one list */
    g5_set_xmj(0, n, x, m);
    g5_set_n(n);
    g5_calculate_force_on_x(x, ad, potd, n);
    t_direct = now() - t0;

    for (int i = 0; i < n; i++) {
        double e2 = 0.0, b2 = 0.0, a2 = 0.0;
        for (int d = 0; d < 3; d++) {
            e2 += (a[i][d] - ad[i][d]) * (a[i][d] - ad[i][d]);
            b2 += (a[i][d] - ab[i][d]) * (a[i][d] - ab[i][d]);
            a2 += a[i][d] * a[i][d];
        }
        err2 += e2 / a2;
        diff = fmax(diff, sqrt(b2 / a2));
        /* the potential comes back positive, with the particle's own m/eps in it */
        w_tree -= 0.5 * m[i] * (pot[i] - m[i] / EPS);
        w_direct -= 0.5 * m[i] * (potd[i] - m[i] / EPS);
    }
    printf("N = %d  theta = %.2f  groups = %d  mean list = %.0f  cells = %d\n", n, theta, ng,
           mean_list, ncells);
    printf("tree, one list per call: %.3f s   %d groups per call: %.3f s   direct: %.3f s\n",
           t_tree, BATCH, t_batch, t_direct);
    printf("largest relative difference between the two walks = %.1e\n", diff);
    printf("rms relative acceleration error = %.2e\n", sqrt(err2 / n));
    printf("W tree = %.8f  W direct = %.8f\n", w_tree, w_direct);
    g5_close();
    return 0;
}
