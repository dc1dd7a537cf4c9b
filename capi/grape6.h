/*
 * grape6.h -- the GRAPE-6 library interface, as provided by sapporo (libsapporo.so, libg6.so).
 *
 * Two names per function.  The C name (g6_open) takes its arguments by value.  The Fortran
 * name is the same name with one trailing underscore (g6_open_) and takes every argument by
 * pointer: it is the symbol gfortran (and most Fortran compilers) call for `CALL G6_OPEN(ID)`
 * or `RC = G6_OPEN(ID)` in Fortran source, which never spells the underscore.  A C or C++
 * client may call either name; some define their own C names over the Fortran ones, which
 * works (the library never calls its own exported names).  Arrays declared double x[][3]
 * are laid out like Fortran x(3, n).
 *
 * Units: G = 1, plain double precision, no fixed point.  The potential is negative;
 * acceleration and jerk come back unscaled.  j-particles arrive scaled, as on the hardware:
 * k18 = snap/18, j6 = jerk/6, a2 = acceleration/2.
 *
 * j-particles live in memory slots ("addresses") 0 .. g6_get_nj_max() - 1: the j-capacity,
 * set by the device memory (millions of particles on a GPU).  Each carries an index, the
 * particle's id.  Self-exclusion is by index: an i-particle never interacts with a
 * j-particle of the same index (no force, no potential, not a neighbour), so eps2 = 0 works
 * when the i-particles are stored as j-particles too.  A negative i-index marks a field
 * point, which excludes nothing.
 *
 * Functions returning int return 0 (or a documented positive value) on success and a
 * negative SAPPORO_ERR_* code (sapporo.h) on error; the message goes to stderr (each kind
 * of error printed the 1st, 10th, 100th, ... time) and is kept for sapporo_last_error().
 * SAPPORO_ON_ERROR=abort makes any error print its message and exit(1) instead.
 * g6_npipes() never returns an error code.  The cluster_id arguments are accepted and
 * ignored (any value, even an uninitialised one): there is one library per process.  Calls
 * from several threads are serialised.
 */
#ifndef SAPPORO_GRAPE6_H
#define SAPPORO_GRAPE6_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- C names -------------------------------------------------------------------------- */

/* Open the library (order, precision, backend and devices from SAPPORO_* variables and
 * sapporo2.config).  Opening an open library does nothing. */
int g6_open(int cluster_id);
/* Open with an explicit list of ndev device indices (ndev < 0: any -ndev devices, as in
 * sapporo2; ndev == 0: as g6_open). */
int g6_open_special(int ndev, int *devices);
/* Release everything; j-particles not yet sent are dropped. */
int g6_close(int cluster_id);
/* Most i-particles one force call may take (SAPPORO_NPIPES, default 128, at most 65536).
 * Always >= 1, even when Python, the environment or the open failed (then 128). */
int g6_npipes(void);
/* Hardware unit settings: the argument (int or double) is never read; return 0. */
int g6_set_tunit(double unit);
int g6_set_xunit(double unit);
/* Time to which every j-particle is predicted before the next force call. */
int g6_set_ti(int cluster_id, double ti);
/* Store j-particle `index` in slot `address` (0 .. g6_get_nj_max() - 1); buffered, sent
 * in batches.  tj is the time of the values given; they are predicted from tj to the time
 * of g6_set_ti.  dtj (the particle's own time step) is informational and not read. */
int g6_set_j_particle(int cluster_id, int address, int index, double tj, double dtj, double mass,
                      double k18[3], double j6[3], double a2[3], double v[3], double x[3]);
/* Start the force on ni i-particles from j-slots [0, nj).  aold, j6old and phiold are ignored
 * (aold is used as the i-particles' acceleration when the library runs at order 6).  h2[i]
 * is the neighbour radius squared of i-particle i (may be NULL).  Errors are returned by the
 * following lasthalf. */
void g6calc_firsthalf(int cluster_id, int nj, int ni, int index[], double xi[][3],
                      double vi[][3], double aold[][3], double j6old[][3], double phiold[],
                      double eps2, double h2[]);
/* Wait for the force started by firsthalf; any output pointer may be NULL. */
int g6calc_lasthalf(int cluster_id, int nj, int ni, int index[], double xi[][3],
                    double vi[][3], double eps2, double h2[], double acc[][3],
                    double jerk[][3], double pot[]);
/* As lasthalf, plus nnbindex[i]: the index of i's nearest neighbour (-1 when none). */
int g6calc_lasthalf2(int cluster_id, int nj, int ni, int index[], double xi[][3],
                     double vi[][3], double eps2, double h2[], double acc[][3],
                     double jerk[][3], double pot[], int nnbindex[]);
/* Phantom-GRAPE's names: as lasthalf / lasthalf2.  Phantom-GRAPE makes the neighbour lists
 * in these calls from their h2; here g6calc_firsthalf's h2 made them already (pass the same
 * array to both: a positive h2 that reaches only these calls is an error). */
int g6calc_lasthalfn(int cluster_id, int nj, int ni, int index[], double xi[][3],
                     double vi[][3], double eps2, double h2[], double acc[][3],
                     double jerk[][3], double pot[]);
int g6calc_lasthalf2n(int cluster_id, int nj, int ni, int index[], double xi[][3],
                      double vi[][3], double eps2, double h2[], double acc[][3],
                      double jerk[][3], double pot[], int nnbindex[]);
/* Bring the neighbour lists of the last force call to the host: 0, or 1 if any overflowed. */
int g6_read_neighbour_list(int cluster_id);
/* Copy the list of i-particle ipipe (ascending indices, at most maxlength of them) into nbl
 * and its full length into *nblen: 0, or 1 if the list did not fit. */
int g6_get_neighbour_list(int cluster_id, int ipipe, int maxlength, int *nblen, int nbl[]);
/* Hardware buffer management: accepted, return 0 (flush sends buffered j-particles). */
int g6_initialize_jp_buffer(int cluster_id, int size);
int g6_flush_jp_buffer(int cluster_id);
int g6_reset(int cluster_id);
int g6_reset_fofpga(int cluster_id);
/* Accepted and ignored: lists always come sorted (ascending indices) and overflow is
 * always reported by the neighbour-list calls. */
void g6_set_neighbour_list_sort_mode(int mode);
int g6_set_overflow_flag_test_mode(int a, int b, int c);
/* Phantom-GRAPE: a hint of the j-particle count; accepted and ignored. */
void g6_setup_njdata(int cluster_id, int nj);
/* Sapporo2: the j-capacity (the number of addresses); 0, with a message, when not open. */
int g6_get_nj_max(void);

/* ---- Fortran names: the same functions, every argument by pointer ----------------------- */

int g6_open_(int *cluster_id);
int g6_open_special_(int *ndev, int *devices);
int g6_close_(int *cluster_id);
int g6_npipes_(void);
int g6_set_tunit_(void *unit);
int g6_set_xunit_(void *unit);
int g6_set_ti_(int *cluster_id, double *ti);
int g6_set_j_particle_(int *cluster_id, int *address, int *index, double *tj, double *dtj,
                       double *mass, double k18[3], double j6[3], double a2[3], double v[3],
                       double x[3]);
void g6calc_firsthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                       double vi[][3], double aold[][3], double j6old[][3], double phiold[],
                       double *eps2, double h2[]);
int g6calc_lasthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                     double vi[][3], double *eps2, double h2[], double acc[][3],
                     double jerk[][3], double pot[]);
int g6calc_lasthalf2_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                      double vi[][3], double *eps2, double h2[], double acc[][3],
                      double jerk[][3], double pot[], int nnbindex[]);
int g6calc_lasthalfn_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                      double vi[][3], double *eps2, double h2[], double acc[][3],
                      double jerk[][3], double pot[]);
int g6calc_lasthalf2n_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                       double vi[][3], double *eps2, double h2[], double acc[][3],
                       double jerk[][3], double pot[], int nnbindex[]);
int g6_read_neighbour_list_(int *cluster_id);
int g6_get_neighbour_list_(int *cluster_id, int *ipipe, int *maxlength, int *nblen, int nbl[]);
int g6_initialize_jp_buffer_(int *cluster_id, int *size);
int g6_flush_jp_buffer_(int *cluster_id);
int g6_reset_(int *cluster_id);
int g6_reset_fofpga_(int *cluster_id);
void g6_set_neighbour_list_sort_mode_(int *mode);
int g6_set_overflow_flag_test_mode_(int *a, int *b, int *c);
void g6_setup_njdata_(int *cluster_id, int *nj);
int g6_get_nj_max_(void);

#ifdef __cplusplus
}
#endif

#endif /* SAPPORO_GRAPE6_H */
