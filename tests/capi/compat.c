/*
 * compat.c -- the symbols other GRAPE-6 libraries export, and calls that used to go wrong.
 *
 * usage: compat MODE    (each mode prints "KEY value..." lines, then "END")
 *   devices  get_device_count() before any open: "devices <n>", "last <message>"
 *   open     g6_npipes() then g6_open(): "npipes <n>", "open <rc> | <message>",
 *            g6_get_nj_max() before and after: "njmax <before> <after>"
 *   nanh2    a force call whose h2 is all NaN (no lists; a warning, not an error):
 *            "nanh2 <rc> <ax of particle 0> | <message>"; then one with h2 = 10:
 *            "goodh2 <rc> <ax of particle 0>"
 *   field    i-particles with index -1 (field points: they exclude no j-particle) and one
 *            real particle: "field <i> <ax> <ay> <az> <pot> <nn>"
 *   pg6      Phantom-GRAPE's g6calc_lasthalfn / g6calc_lasthalf2n against lasthalf2:
 *            "pg6 <name> <rc> <i> <ax> <pot> <nn> <nblen> <ids...>"; then h2 given only to
 *            lasthalfn: "pg6_h2_late <rc> | <message>"; then an infinite h2 (no lists) given
 *            to both: "pg6_inf_both <rc>"
 * Four unit masses at (0,0,0), (1,0,0), (0,1,0), (0,0,1), indices 0..3.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sapporo.h"

#define N 4

int get_device_count(void);  /* sapporo_light's; declared by no header */

static double xj[N][3] = {{0, 0, 0}, {1, 0, 0}, {0, 1, 0}, {0, 0, 1}};
static double zero[3] = {0, 0, 0};
static int idx[N] = {0, 1, 2, 3};
static double vi[N][3], acc[N][3], jerk[N][3], pot[N];
static int nnb[N];

static void store(void)
{
    for (int i = 0; i < N; i++)
        g6_set_j_particle(0, i, i, 0.0, 0.0, 1.0, zero, zero, zero, zero, xj[i]);
    g6_set_ti(0, 0.0);
}

static void report(const char *name, int rc, int ni, int lists)
{
    for (int i = 0; i < ni; i++) {
        int nbl[N], len = -1;
        printf("pg6 %s %d %d %.9f %.9f %d", name, rc, i, acc[i][0], pot[i], nnb[i]);
        if (lists) {
            if (i == 0)
                g6_read_neighbour_list(0);
            g6_get_neighbour_list(0, i, N, &len, nbl);
            printf(" %d", len);
            for (int q = 0; q < len && q < N; q++)
                printf(" %d", nbl[q]);
        }
        printf("\n");
    }
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "devices") == 0) {
        printf("devices %d\n", get_device_count());
        printf("last %s\n", sapporo_last_error());
    }
    else if (strcmp(mode, "open") == 0) {
        printf("npipes %d\n", g6_npipes());
        int before = g6_get_nj_max();
        int rc = g6_open(0);
        printf("open %d | %s\n", rc, rc < 0 ? sapporo_last_error() : "");
        printf("njmax %d %d\n", before, g6_get_nj_max());
        g6_close(0);
    }
    else if (strcmp(mode, "nanh2") == 0) {
        double h2[N] = {NAN, NAN, NAN, NAN}, good[N] = {10, 10, 10, 10};
        g6_open(0);
        store();
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, h2);
        int rc = g6calc_lasthalf(0, N, N, idx, xj, vi, 0.0, h2, acc, jerk, pot);
        printf("nanh2 %d %.12f | %s\n", rc, acc[0][0], rc < 0 ? sapporo_last_error() : "");
        acc[0][0] = 0.0;
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, good);
        rc = g6calc_lasthalf(0, N, N, idx, xj, vi, 0.0, good, acc, jerk, pot);
        printf("goodh2 %d %.12f\n", rc, acc[0][0]);
        g6_close(0);
    }
    else if (strcmp(mode, "field") == 0) {
        /* points: the origin (on top of j-particle 0: excluded by nothing, so eps2 > 0),
         * (2,0,0) and j-particle 1 itself with its real index */
        int fidx[3] = {-1, -1, 1};
        double fx[3][3] = {{0, 0, 0}, {2, 0, 0}, {1, 0, 0}};
        g6_open(0);
        store();
        g6calc_firsthalf(0, N, 3, fidx, fx, vi, acc, jerk, pot, 0.01, NULL);
        int rc = g6calc_lasthalf2(0, N, 3, fidx, fx, vi, 0.01, NULL, acc, jerk, pot, nnb);
        printf("fieldrc %d | %s\n", rc, rc < 0 ? sapporo_last_error() : "");
        for (int i = 0; i < 3; i++)
            printf("field %d %.12f %.12f %.12f %.12f %d\n", i, acc[i][0], acc[i][1], acc[i][2],
                   pot[i], nnb[i]);
        g6_close(0);
    }
    else if (strcmp(mode, "pg6") == 0) {
        double h2[N] = {1.5, 1.5, 1.5, 1.5}, none[N] = {0, 0, 0, 0};
        int rc;
        g6_open(0);
        store();
        g6_setup_njdata(0, N);
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, h2);
        rc = g6calc_lasthalf2(0, N, N, idx, xj, vi, 0.0, h2, acc, jerk, pot, nnb);
        report("lasthalf2", rc, N, 1);
        memset(nnb, 0, sizeof nnb);
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, h2);
        rc = g6calc_lasthalfn(0, N, N, idx, xj, vi, 0.0, h2, acc, jerk, pot);
        report("lasthalfn", rc, N, 1);
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, h2);
        rc = g6calc_lasthalf2n(0, N, N, idx, xj, vi, 0.0, h2, acc, jerk, pot, nnb);
        report("lasthalf2n", rc, N, 1);
        int ni = N, nj = N, cid = 0;
        double e0 = 0.0;
        g6calc_firsthalf_(&cid, &nj, &ni, idx, xj, vi, acc, jerk, pot, &e0, h2);
        rc = g6calc_lasthalf2n_(&cid, &nj, &ni, idx, xj, vi, &e0, h2, acc, jerk, pot, nnb);
        report("lasthalf2n_", rc, N, 1);
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, none);
        rc = g6calc_lasthalfn(0, N, N, idx, xj, vi, 0.0, h2, acc, jerk, pot);
        printf("pg6_h2_late %d | %s\n", rc, rc < 0 ? sapporo_last_error() : "");
        double inf[N] = {INFINITY, INFINITY, INFINITY, INFINITY};
        g6calc_firsthalf(0, N, N, idx, xj, vi, acc, jerk, pot, 0.0, inf);
        rc = g6calc_lasthalfn(0, N, N, idx, xj, vi, 0.0, inf, acc, jerk, pot);
        printf("pg6_inf_both %d\n", rc);
        g6_close(0);
    }
    else {
        fprintf(stderr, "compat: unknown mode '%s'\n", mode);
        return 2;
    }
    printf("END\n");
    return 0;
}
