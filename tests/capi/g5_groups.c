/* Groups (g5_calculate_force_on_groups, g5_start_groups, g5_get_groups_force): many
 * interaction lists in one call, as a tree walk makes them, against the same lists through
 * one-list calls.
 *
 *   g5_groups IC EPS NG SEED
 *
 * IC: lines "x y z m", the pool.  NG groups are drawn (SEED): group g has 0 .. 63
 * i-particles (consecutive pool particles from a random start) and a list of 0 .. 1999
 * j-particles (a random slice of the pool); the lists are stored one after the other, from
 * address 0, with g5_set_xmj.  Prints
 *   "j k pool"                  the pool particle at address k
 *   "i i pool jlo jhi"          i-particle i: its pool particle and its group's addresses
 *   "f i ax ay az pot"          g5_calculate_force_on_groups (context 0)
 *   "o i ax ay az pot"          each group through g5_set_xmjMC, g5_set_nMC and
 *                               g5_calculate_force_on_xMC on context 1
 *   "async_same <0|1>"          g5_start_groups, the one-list calls on context 1 between,
 *                               then g5_get_groups_force: bitwise the "f" forces
 *   "bad <name> <rc>"           calls that must fail
 *   "rc <worst code of the good calls>"
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

static unsigned long long state;

static int draw(int n)  /* 0 .. n - 1 */
{
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (int)((state >> 33) % (unsigned long long)n);
}

int main(int argc, char **argv)
{
    int n, ng, ni = 0, nj = 0, *ioff, *joff, *pi, *pj, same = 1;
    double (*x)[3], *m, (*xi)[3], (*xj)[3], *mj, (*a)[3], *p, (*a2)[3], *p2, eps;
    if (argc < 5) {
        fprintf(stderr, "usage: g5_groups IC EPS NG SEED\n");
        return 2;
    }
    eps = atof(argv[2]);
    ng = atoi(argv[3]);
    state = (unsigned long long)atoll(argv[4]);
    if ((n = read_ic(argv[1], &x, &m)) < 0)
        return 2;

    ioff = malloc(sizeof *ioff * (ng + 1));
    joff = malloc(sizeof *joff * (ng + 1));
    pi = malloc(sizeof *pi * 64 * ng);
    pj = malloc(sizeof *pj * 2000 * ng);
    ioff[0] = joff[0] = 0;
    for (int g = 0; g < ng; g++) {
        int gi = draw(64), gj = draw(2000), si = draw(n), sj = draw(n);
        if (g % 7 == 3)
            gi = 0;  /* a group without i-particles */
        if (g % 11 == 5)
            gj = 0;  /* a group without j-particles: no force */
        for (int k = 0; k < gi; k++)
            pi[ni++] = (si + k) % n;
        for (int k = 0; k < gj; k++)
            pj[nj++] = (sj + k) % n;
        ioff[g + 1] = ni;
        joff[g + 1] = nj;
    }
    xi = malloc(sizeof *xi * (ni + 1));
    xj = malloc(sizeof *xj * (nj + 1));
    mj = malloc(sizeof *mj * (nj + 1));
    a = calloc(ni + 1, sizeof *a);
    p = calloc(ni + 1, sizeof *p);
    a2 = calloc(ni + 1, sizeof *a2);
    p2 = calloc(ni + 1, sizeof *p2);
    for (int k = 0; k < nj; k++) {
        memcpy(xj[k], x[pj[k]], sizeof xj[k]);
        mj[k] = m[pj[k]];
        printf("j %d %d\n", k, pj[k]);
    }
    for (int g = 0; g < ng; g++)
        for (int i = ioff[g]; i < ioff[g + 1]; i++) {
            memcpy(xi[i], x[pi[i]], sizeof xi[i]);
            printf("i %d %d %d %d\n", i, pi[i], joff[g], joff[g + 1]);
        }

    check(g5_open());
    check(g5_set_eps_to_all(eps));
    check(g5_set_xmj(0, nj, xj, mj));
    check(g5_calculate_force_on_groups(ng, ioff, joff, xi, a, p));
    for (int i = 0; i < ni; i++)
        printf("f %d %.17g %.17g %.17g %.17g\n", i, a[i][0], a[i][1], a[i][2], p[i]);

    /* the asynchronous pair, with other work between (context 1's one-list calls) */
    check(g5_start_groups(ng, ioff, joff, xi));
    for (int g = 0; g < ng; g++) {
        int gi = ioff[g + 1] - ioff[g], gj = joff[g + 1] - joff[g];
        if (gi == 0)
            continue;
        if (gj > 0)
            check(g5_set_xmjMC(1, 0, gj, xj + joff[g], mj + joff[g]));
        check(g5_set_nMC(1, gj));
        check(g5_calculate_force_on_xMC(1, xi + ioff[g], a2 + ioff[g], p2 + ioff[g], gi));
    }
    for (int i = 0; i < ni; i++)
        printf("o %d %.17g %.17g %.17g %.17g\n", i, a2[i][0], a2[i][1], a2[i][2], p2[i]);
    check(g5_get_groups_force(a2, p2));
    for (int i = 0; i < ni; i++)
        same &= memcmp(a[i], a2[i], sizeof a[i]) == 0 && p[i] == p2[i];
    printf("async_same %d\n", same);

    /* refused: offsets that decrease, a list beyond the addresses stored, i_offsets[0] != 0,
     * forces read twice after one start (the first read collects them: still there) and
     * after another force call (gone) */
    {
        int di[3] = {0, 5, 3}, dj[3] = {0, 10, 20}, bj[2] = {0, nj + 1}, zi[2] = {0, 3};
        printf("bad decreasing %d\n", g5_calculate_force_on_groups(2, di, dj, xi, a2, p2));
        printf("bad beyond %d\n", g5_calculate_force_on_groups(1, zi, bj, xi, a2, p2));
        printf("good again %d\n", g5_calculate_force_on_groups(1, zi, dj, xi, a2, p2));
        printf("good twice %d\n", g5_get_groups_force(a2, p2));
        zi[0] = 1;
        printf("bad start %d\n", g5_calculate_force_on_groups(1, zi, dj, xi, a2, p2));
        check(g5_set_n(nj));
        check(g5_calculate_force_on_x(xi, a2, p2, 1));
        printf("bad after %d\n", g5_get_groups_force(a2, p2));
    }
    check(g5_close());
    printf("rc %d\n", worst);
    return 0;
}
