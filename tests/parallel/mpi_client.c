/*
 * mpi_client.c -- an MPI-parallel GRAPE-6 client, as phiGRAPE or ph4 run in parallel: each
 * rank opens the library, stores its own slice of j-particles (particle i on rank i % size,
 * at local address i / size), computes partial forces on every particle and reduces them
 * with MPI itself: acc, jerk and pot summed, the nearest neighbour by MPI_MINLOC on r^2.
 *
 * usage: mpiexec -n P mpi_client IC_FILE OUT_FILE EPS2
 *   IC_FILE: first line N, then N lines "m x y z vx vy vz".
 *   Rank 0 writes OUT_FILE: "i ax ay az jx jy jz pot nn" per particle.
 * Exit status: 0, or 1 with a message (every rank aborts) on any library error.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

#include "grape6.h"

static int rank, size;

static void fail(const char *what, int rc)
{
    fprintf(stderr, "mpi_client: rank %d: %s failed with %d\n", rank, what, rc);
    MPI_Abort(MPI_COMM_WORLD, 1);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 4) {
        if (rank == 0)
            fprintf(stderr, "usage: mpi_client IC_FILE OUT_FILE EPS2\n");
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    double eps2 = atof(argv[3]);
    FILE *f = fopen(argv[1], "r");
    int n;
    if (!f || fscanf(f, "%d", &n) != 1 || n < 1)
        fail("reading the initial conditions", -1);
    double *m = malloc(n * sizeof *m);
    double (*x)[3] = malloc(n * sizeof *x), (*v)[3] = malloc(n * sizeof *v);
    for (int i = 0; i < n; i++)
        if (fscanf(f, "%lf %lf %lf %lf %lf %lf %lf", &m[i], &x[i][0], &x[i][1], &x[i][2],
                   &v[i][0], &v[i][1], &v[i][2]) != 7)
            fail("reading the initial conditions", -1);
    fclose(f);

    int rc = g6_open(0);
    if (rc != 0)
        fail("g6_open", rc);
    int npipes = g6_npipes();
    double zero[3] = {0.0, 0.0, 0.0};
    int nloc = 0;
    for (int i = rank; i < n; i += size, nloc++)  /* my slice of the j-particles */
        if ((rc = g6_set_j_particle(0, i / size, i, 0.0, 1.0, m[i], zero, zero, zero, v[i],
                                    x[i])) != 0)
            fail("g6_set_j_particle", rc);
    if ((rc = g6_set_ti(0, 0.0)) != 0)
        fail("g6_set_ti", rc);

    double (*acc)[3] = calloc(n, sizeof *acc), (*jrk)[3] = calloc(n, sizeof *jrk);
    double *pot = calloc(n, sizeof *pot);
    struct { double r2; int id; } *near = malloc(n * sizeof *near), *best = malloc(n * sizeof *best);
    int *idx = malloc(npipes * sizeof *idx), *nn = malloc(npipes * sizeof *nn);
    for (int c0 = 0; c0 < n; c0 += npipes) {
        int nc = n - c0 < npipes ? n - c0 : npipes;
        for (int q = 0; q < nc; q++)
            idx[q] = c0 + q;
        g6calc_firsthalf(0, nloc, nc, idx, x + c0, v + c0, acc + c0, jrk + c0, pot + c0, eps2,
                         NULL);
        if ((rc = g6calc_lasthalf2(0, nloc, nc, idx, x + c0, v + c0, eps2, NULL, acc + c0,
                                   jrk + c0, pot + c0, nn)) != 0)
            fail("g6calc_lasthalf2", rc);
        for (int q = 0; q < nc; q++) {  /* r^2 of my nearest neighbour, for MINLOC */
            int i = c0 + q, j = nn[q];
            double r2 = 1e300;
            if (j >= 0) {
                double dx = x[j][0] - x[i][0], dy = x[j][1] - x[i][1], dz = x[j][2] - x[i][2];
                r2 = dx * dx + dy * dy + dz * dz;
            }
            near[i].r2 = r2;
            near[i].id = j >= 0 ? j : n;
        }
    }
    MPI_Allreduce(MPI_IN_PLACE, acc, 3 * n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, jrk, 3 * n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, pot, n, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    /* smallest r^2; MINLOC takes the lower id on ties */
    MPI_Allreduce(near, best, n, MPI_DOUBLE_INT, MPI_MINLOC, MPI_COMM_WORLD);

    if (rank == 0) {
        FILE *out = fopen(argv[2], "w");
        if (!out)
            fail("opening the output", -1);
        for (int i = 0; i < n; i++)
            fprintf(out, "%d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d\n", i, acc[i][0],
                    acc[i][1], acc[i][2], jrk[i][0], jrk[i][1], jrk[i][2], pot[i],
                    best[i].id < n ? best[i].id : -1);
        fclose(out);
    }
    printf("rank %d of %d: %d j-particles\n", rank, size, nloc);
    g6_close(0);
    MPI_Finalize();
    return 0;
}
