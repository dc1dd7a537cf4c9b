/*
 * wrappers.c -- a client that defines its own C names over the library's Fortran names.
 *
 * Some integrators declare only the underscore names and write g6_open() & co. themselves.
 * Linked with -rdynamic, these definitions interpose the library's exported C names; a
 * library whose underscore names called its exported C names would recurse forever.  Each
 * wrapper counts its depth and stops the program at once if it is re-entered.
 * Prints "OK acc <ax>" (two unit masses at distance 1: ax = 1) and exits 0.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>

int g6_open_(int *id);
int g6_close_(int *id);
int g6_npipes_(void);
int g6_set_ti_(int *id, double *ti);
int g6_set_j_particle_(int *id, int *address, int *index, double *tj, double *dtj,
                       double *mass, double k18[3], double j6[3], double a2[3], double v[3],
                       double x[3]);
void g6calc_firsthalf_(int *id, int *nj, int *ni, int index[], double xi[][3], double vi[][3],
                       double aold[][3], double j6old[][3], double phiold[], double *eps2,
                       double h2[]);
int g6calc_lasthalf_(int *id, int *nj, int *ni, int index[], double xi[][3], double vi[][3],
                     double *eps2, double h2[], double acc[][3], double jerk[][3],
                     double pot[]);

static int depth;
#define ENTER() \
    do { if (depth++ > 0) { printf("RECURSION in %s\n", __func__); exit(5); } } while (0)
#define LEAVE(v) do { depth--; return v; } while (0)

int g6_open(int id) { ENTER(); int rc = g6_open_(&id); LEAVE(rc); }
int g6_close(int id) { ENTER(); int rc = g6_close_(&id); LEAVE(rc); }
int g6_npipes(void) { ENTER(); int rc = g6_npipes_(); LEAVE(rc); }
int g6_set_ti(int id, double ti) { ENTER(); int rc = g6_set_ti_(&id, &ti); LEAVE(rc); }

int g6_set_j_particle(int id, int address, int index, double tj, double dtj, double mass,
                      double k18[3], double j6[3], double a2[3], double v[3], double x[3])
{
    ENTER();
    int rc = g6_set_j_particle_(&id, &address, &index, &tj, &dtj, &mass, k18, j6, a2, v, x);
    LEAVE(rc);
}

void g6calc_firsthalf(int id, int nj, int ni, int index[], double xi[][3], double vi[][3],
                      double aold[][3], double j6old[][3], double phiold[], double eps2,
                      double h2[])
{
    ENTER();
    g6calc_firsthalf_(&id, &nj, &ni, index, xi, vi, aold, j6old, phiold, &eps2, h2);
    LEAVE();
}

int g6calc_lasthalf(int id, int nj, int ni, int index[], double xi[][3], double vi[][3],
                    double eps2, double h2[], double acc[][3], double jerk[][3], double pot[])
{
    ENTER();
    int rc = g6calc_lasthalf_(&id, &nj, &ni, index, xi, vi, &eps2, h2, acc, jerk, pot);
    LEAVE(rc);
}

int main(void)
{
    double x[2][3] = {{0, 0, 0}, {1, 0, 0}}, v[2][3] = {{0}}, z[3] = {0, 0, 0};
    double acc[2][3], jerk[2][3], pot[2];
    int idx[2] = {0, 1};
    if (g6_open_(NULL) != 0 || g6_open(0) != 0 || g6_npipes() < 2)
        return printf("open failed\n"), 1;
    for (int i = 0; i < 2; i++)
        if (g6_set_j_particle(0, i, i, 0.0, 0.0, 1.0, z, z, z, v[i], x[i]) != 0)
            return printf("set_j failed\n"), 1;
    if (g6_set_ti(0, 0.0) != 0)
        return printf("set_ti failed\n"), 1;
    g6calc_firsthalf(0, 2, 2, idx, x, v, acc, jerk, pot, 0.0, NULL);
    if (g6calc_lasthalf(0, 2, 2, idx, x, v, 0.0, NULL, acc, jerk, pot) != 0)
        return printf("force failed\n"), 1;
    printf("OK acc %.9f\n", acc[0][0]);
    return g6_close(0);
}
