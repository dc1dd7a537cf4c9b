// ph4style.cc -- a C++ client written the way AMUSE's ph4 drives a GRAPE-6 library.
//
// It declares only the Fortran names (trailing underscore) and defines its own C names as
// wrappers over them, sizes its i-arrays with new real[g6_npipes()], opens the library with
// whatever cluster id it holds, ignores every return code, and integrates nothing: it loads
// N particles, asks for the forces on all of them in chunks of g6_npipes() (lasthalf2 with
// nearest neighbours, and lasthalf), reads neighbour lists, closes.
//
// usage: ph4style IC_FILE          (IC_FILE: first line N, then "m x y z vx vy vz" per line)
// Prints "npipes <n>", then per particle "F <id> <ax> <ay> <az> <jx> <jy> <jz> <pot> <nn>",
// per particle "NB <id> <nblen> <ids...>", and "END"; exit status 0 when it got to the end.
#include <cstdio>
#include <cstdlib>

typedef double real;
typedef real (*real2)[3];

extern "C" {
int g6_open_(int *id);
int g6_close_(int *id);
int g6_npipes_();
int g6_set_tunit_(double *);
int g6_set_xunit_(double *);
int g6_set_ti_(int *id, double *ti);
int g6_set_j_particle_(int *cluster_id, int *address, int *index, double *tj, double *dtj,
                       double *mass, double k18[3], double j6[3], double a2[3], double v[3],
                       double x[3]);
void g6calc_firsthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                       double vi[][3], double aold[][3], double j6old[][3], double phiold[3],
                       double *eps2, double h2[]);
int g6calc_lasthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                     double vi[][3], double *eps2, double h2[], double acc[][3],
                     double jerk[][3], double pot[]);
int g6calc_lasthalf2_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                      double vi[][3], double *eps2, double h2[], double acc[][3],
                      double jerk[][3], double pot[], int inn[]);
int g6_initialize_jp_buffer_(int *cluster_id, int *buf_size);
int g6_flush_jp_buffer_(int *cluster_id);
int g6_reset_(int *cluster_id);
int g6_reset_fofpga_(int *cluster_id);
int g6_read_neighbour_list_(int *cluster_id);
int g6_get_neighbour_list_(int *cluster_id, int *ipipe, int *maxlength, int *n_neighbours,
                           int neighbour_list[]);

// The client's own C names, over the Fortran ones.
int g6_open(int id) { return g6_open_(&id); }
int g6_close(int id) { return g6_close_(&id); }
int g6_npipes() { return g6_npipes_(); }
int g6_set_tunit(double t) { return g6_set_tunit_(&t); }
int g6_set_xunit(double x) { return g6_set_xunit_(&x); }
int g6_set_ti(int id, double ti) { return g6_set_ti_(&id, &ti); }
int g6_set_j_particle(int cluster_id, int address, int index, double tj, double dtj,
                      double mass, double k18[3], double j6[3], double a2[3], double v[3],
                      double x[3])
{
    return g6_set_j_particle_(&cluster_id, &address, &index, &tj, &dtj, &mass, k18, j6, a2, v,
                              x);
}
void g6calc_firsthalf(int cluster_id, int nj, int ni, int index[], double xi[][3],
                      double vi[][3], double aold[][3], double j6old[][3], double phiold[3],
                      double eps2, double h2[])
{
    g6calc_firsthalf_(&cluster_id, &nj, &ni, index, xi, vi, aold, j6old, phiold, &eps2, h2);
}
int g6calc_lasthalf(int cluster_id, int nj, int ni, int index[], double xi[][3],
                    double vi[][3], double eps2, double h2[], double acc[][3],
                    double jerk[][3], double pot[])
{
    return g6calc_lasthalf_(&cluster_id, &nj, &ni, index, xi, vi, &eps2, h2, acc, jerk, pot);
}
int g6calc_lasthalf2(int cluster_id, int nj, int ni, int index[], double xi[][3],
                     double vi[][3], double eps2, double h2[], double acc[][3],
                     double jerk[][3], double pot[], int inn[])
{
    return g6calc_lasthalf2_(&cluster_id, &nj, &ni, index, xi, vi, &eps2, h2, acc, jerk, pot,
                             inn);
}
int g6_initialize_jp_buffer(int cluster_id, int buf_size)
{
    return g6_initialize_jp_buffer_(&cluster_id, &buf_size);
}
int g6_flush_jp_buffer(int cluster_id) { return g6_flush_jp_buffer_(&cluster_id); }
int g6_reset(int cluster_id) { return g6_reset_(&cluster_id); }
int g6_reset_fofpga(int cluster_id) { return g6_reset_fofpga_(&cluster_id); }
int g6_read_neighbour_list(int cluster_id) { return g6_read_neighbour_list_(&cluster_id); }
int g6_get_neighbour_list(int cluster_id, int ipipe, int maxlength, int *n_neighbours,
                          int neighbour_list[])
{
    return g6_get_neighbour_list_(&cluster_id, &ipipe, &maxlength, n_neighbours,
                                  neighbour_list);
}
void g6_set_neighbour_list_sort_mode(int) {}
int g6_set_overflow_flag_test_mode(int, int, int) { return 0; }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        std::fprintf(stderr, "usage: ph4style IC_FILE\n");
        return 2;
    }
    std::FILE *f = std::fopen(argv[1], "r");
    int n = 0;
    if (f == NULL || std::fscanf(f, "%d", &n) != 1 || n < 1)
        return 2;
    real *mass = new real[n];
    real2 pos = new real[n][3], vel = new real[n][3];
    int *id = new int[n];
    for (int j = 0; j < n; j++) {
        if (std::fscanf(f, "%lf %lf %lf %lf %lf %lf %lf", &mass[j], &pos[j][0], &pos[j][1],
                        &pos[j][2], &vel[j][0], &vel[j][1], &vel[j][2]) != 7)
            return 2;
        id[j] = j;
    }
    std::fclose(f);

    int clusterid = 32650;  // ph4 has been seen to pass an uninitialised value
    const real eps2 = 1e-4;
    const real nb_h2 = 0.05;
    g6_open(clusterid);
    g6_initialize_jp_buffer(clusterid, 1024);
    g6_set_neighbour_list_sort_mode(0);
    g6_set_overflow_flag_test_mode(0, 0, 0);
    real k18[3] = {0, 0, 0}, j6[3] = {0, 0, 0}, a2[3] = {0, 0, 0};
    for (int j = 0; j < n; j++)
        g6_set_j_particle(clusterid, j, id[j], 0.0, 0.0, mass[j], k18, j6, a2, vel[j], pos[j]);
    g6_flush_jp_buffer(clusterid);

    int npipes = g6_npipes();  // never checked, as in ph4
    std::printf("npipes %d\n", npipes);
    real *h2 = new real[npipes], *ipot = new real[npipes];
    real2 ipos = new real[npipes][3], ivel = new real[npipes][3];
    real2 aold = new real[npipes][3], jold = new real[npipes][3];
    real2 iacc = new real[npipes][3], ijerk = new real[npipes][3];
    int *iid = new int[npipes], *inn = new int[npipes];
    int *nbl = new int[n];

    g6_set_ti(clusterid, 0.0);
    for (int i = 0; i < n; i += npipes) {
        int nni = n - i < npipes ? n - i : npipes;
        for (int ii = 0; ii < nni; ii++) {
            iid[ii] = id[i + ii];
            h2[ii] = nb_h2;
            ipot[ii] = 0;
            inn[ii] = -7;
            for (int k = 0; k < 3; k++) {
                ipos[ii][k] = pos[i + ii][k];
                ivel[ii][k] = vel[i + ii][k];
                aold[ii][k] = jold[ii][k] = iacc[ii][k] = ijerk[ii][k] = 0;
            }
        }
        g6calc_firsthalf(clusterid, n, nni, iid, ipos, ivel, aold, jold, ipot, eps2, h2);
        g6calc_lasthalf2(clusterid, n, nni, iid, ipos, ivel, eps2, h2, iacc, ijerk, ipot, inn);
        for (int ii = 0; ii < nni; ii++)
            std::printf("F %d %.17g %.17g %.17g %.17g %.17g %.17g %.17g %d\n", iid[ii],
                        iacc[ii][0], iacc[ii][1], iacc[ii][2], ijerk[ii][0], ijerk[ii][1],
                        ijerk[ii][2], ipot[ii], inn[ii]);
        g6_read_neighbour_list(clusterid);
        for (int ii = 0; ii < nni; ii++) {
            int len = 0;
            g6_get_neighbour_list(clusterid, ii, n, &len, nbl);
            std::printf("NB %d %d", iid[ii], len);
            for (int q = 0; q < len && q < n; q++)
                std::printf(" %d", nbl[q]);
            std::printf("\n");
        }
        // The same chunk through plain lasthalf (potentials only are compared).
        g6calc_firsthalf(clusterid, n, nni, iid, ipos, ivel, aold, jold, ipot, eps2, h2);
        g6calc_lasthalf(clusterid, n, nni, iid, ipos, ivel, eps2, h2, iacc, ijerk, ipot);
        for (int ii = 0; ii < nni; ii++)
            std::printf("P %d %.17g\n", iid[ii], ipot[ii]);
    }
    g6_reset(clusterid);
    g6_reset_fofpga(clusterid);
    g6_close(clusterid);
    std::printf("END\n");
    delete[] h2;
    delete[] ipot;
    delete[] ipos;
    delete[] ivel;
    delete[] aold;
    delete[] jold;
    delete[] iacc;
    delete[] ijerk;
    delete[] iid;
    delete[] inn;
    delete[] nbl;
    delete[] mass;
    delete[] pos;
    delete[] vel;
    delete[] id;
    return 0;
}
