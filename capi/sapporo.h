/*
 * sapporo.h -- sapporo's extensions to the GRAPE-6 interface (includes grape6.h).
 *
 * Naming: every exported symbol is g6* (the GRAPE-6 names) or sapporo_<verb>; 0 means
 * success, a negative SAPPORO_ERR_* code an error, whose one-line message is printed on
 * stderr and kept for sapporo_last_error().  Units: G = 1, float64, potential negative, all
 * derivatives unscaled in these functions (unlike g6_set_j_particle).
 */
#ifndef SAPPORO_SAPPORO_H
#define SAPPORO_SAPPORO_H

#include <stddef.h>

#include "grape6.h"

#ifdef __cplusplus
extern "C" {
#endif

#define SAPPORO_OK             0
#define SAPPORO_ERR_INPUT     -1 /* bad argument: range, NaN/inf, ni above g6_npipes() */
#define SAPPORO_ERR_STATE     -2 /* library not open, or no force call pending */
#define SAPPORO_ERR_CONFIG    -3 /* malformed SAPPORO_* variable or sapporo2.config */
#define SAPPORO_ERR_BACKEND   -4 /* no usable device, or a device operation failed */
#define SAPPORO_ERR_NONFINITE -5 /* a force is not finite (coincident particles, eps2 = 0) */
#define SAPPORO_ERR_INTERNAL  -6 /* embedded Python not available, out of memory, a bug */

/* g6_npipes(): SAPPORO_NPIPES, else the default; a value outside 1 .. the maximum is
 * clamped, with a message (the same values as sapporo.config's DEFAULT_NPIPES, MAX_NPIPES). */
#define SAPPORO_DEFAULT_NPIPES 128
#define SAPPORO_MAX_NPIPES     65536

/* Open the library.  order: 2, 4, 6 or 8 (0: SAPPORO_ORDER, else 4); precision: "double" or
 * "double-single" (NULL: SAPPORO_PRECISION, else double-single); backend: "opencl", "cuda"
 * or "auto" (NULL: SAPPORO_BACKEND); devices: ndev > 0 indices, ndev < 0 any -ndev devices
 * (the first ones; fewer where there are fewer), ndev == 0 SAPPORO_DEVICES, else the
 * sapporo2.config file, else the first device. */
int sapporo_open(int order, const char *precision, const char *backend, int ndev,
                 const int *devices);

/* Store a j-particle with unscaled derivatives; NULL vectors mean zero.  Buffered like
 * g6_set_j_particle.  Order 6 predicts with snap and crackle. */
int sapporo_set_j_particle(int address, int index, double tj, double mass, const double x[3],
                           const double v[3], const double a[3], const double jerk[3],
                           const double snap[3], const double crackle[3]);

/* Start a force call (like g6calc_firsthalf); ai, the i-particles' predicted accelerations,
 * is required at order 6 and ignored otherwise; h2 may be NULL (no neighbour lists). */
void sapporo_calc_firsthalf(int nj, int ni, int index[], double xi[][3], double vi[][3],
                            double ai[][3], double eps2, double h2[]);

/* Finish it: any output may be NULL.  snap is filled at order 6 (zeros below), jerk at
 * order >= 4; nnbindex[i] is the nearest neighbour's index (-1 when none) and nn_r2[i] its
 * unsoftened distance squared (HUGE_VAL when none). */
int sapporo_calc_lasthalf(int ni, double acc[][3], double jerk[][3], double snap[][3],
                          double pot[], int nnbindex[], double nn_r2[]);

/* ---- Order 8 (sapporo_open(8, ...)): the 8th-order Hermite scheme of Nitadori & Makino
 * (2008).  j-particles carry, besides snap and crackle, the 4th and 5th derivatives of the
 * acceleration (pop, d5; NULL means zero), which the device predictor adds; a force call
 * needs the i-particles' predicted accelerations ai and jerks ji, and returns crackle
 * too (any output may be NULL).  At order 8 the calls without ji (g6calc_firsthalf,
 * sapporo_calc_firsthalf) fail with SAPPORO_ERR_INPUT; sapporo_set_j_particle8 with a
 * non-zero pop or d5 below order 8 too. */
int sapporo_set_j_particle8(int address, int index, double tj, double mass,
                            const double x[3], const double v[3], const double a[3],
                            const double jerk[3], const double snap[3], const double crackle[3],
                            const double pop[3], const double d5[3]);
void sapporo_calc_firsthalf8(int nj, int ni, int index[], double xi[][3], double vi[][3],
                             double ai[][3], double ji[][3], double eps2, double h2[]);
int sapporo_calc_lasthalf8(int ni, double acc[][3], double jerk[][3], double snap[][3],
                           double crackle[][3], double pot[], int nnbindex[], double nn_r2[]);

/* Send buffered j-particles now (done anyway by g6_set_ti and every force call). */
int sapporo_flush(void);

/* The message of the calling thread's most recent error ("" when none yet); valid until its
 * next error. */
const char *sapporo_last_error(void);

/* The version of the sapporo Python package behind the library ("" if Python failed). */
const char *sapporo_version(void);

/* How many force calls of this process returned their forces (GRAPE-5's too): every one
 * runs in C on the native engine, from plans made once (any shape since).  A diagnostic. */
long sapporo_direct_calls(void);

/* How many times this process's calls entered Python: the C API's own (opening, closing, the
 * version) and the engine's (for memory and its plans, made once per launch-table entry,
 * and again only when new addresses need memory or the library's memory moved).  Force
 * calls of any shape on memory already held enter none.  A diagnostic. */
long sapporo_python_calls(void);

/* Whether the embedded Python has started in this process (1) or not (0): g6_open starts
 * it; g6_npipes and the error queries do not. A diagnostic. */
int sapporo_python_started(void);

/* sapporo_light's device query (the symbol AMUSE's configure looks for): how many devices
 * the backend g6_open would use has (SAPPORO_BACKEND, else the automatic choice).  Needs no
 * open; 0 when there is none (the reason is printed).  No Fortran name. */
int get_device_count(void);

/* ---- Fortran names: every number by reference, arrays x(3, n), CHARACTER arguments with
 * their hidden lengths last.  sapporo_open: an all-blank precision or backend means "not
 * given"; devices must be an array even when ndev is 0.  sapporo_calc_firsthalf: h2(1) < 0
 * means "no neighbour lists".  sapporo_last_error and sapporo_version are subroutines that
 * fill a CHARACTER variable (blank-padded, truncated to its length). */
int sapporo_open_(int *order, const char *precision, const char *backend, int *ndev,
                  const int *devices, size_t precision_len, size_t backend_len);
int sapporo_set_j_particle_(int *address, int *index, double *tj, double *mass,
                            const double x[3], const double v[3], const double a[3],
                            const double jerk[3], const double snap[3], const double crackle[3]);
void sapporo_calc_firsthalf_(int *nj, int *ni, int index[], double xi[][3], double vi[][3],
                             double ai[][3], double *eps2, double h2[]);
int sapporo_calc_lasthalf_(int *ni, double acc[][3], double jerk[][3], double snap[][3],
                           double pot[], int nnbindex[], double nn_r2[]);
int sapporo_set_j_particle8_(int *address, int *index, double *tj, double *mass,
                             const double x[3], const double v[3], const double a[3],
                             const double jerk[3], const double snap[3],
                             const double crackle[3], const double pop[3], const double d5[3]);
void sapporo_calc_firsthalf8_(int *nj, int *ni, int index[], double xi[][3], double vi[][3],
                              double ai[][3], double ji[][3], double *eps2, double h2[]);
int sapporo_calc_lasthalf8_(int *ni, double acc[][3], double jerk[][3], double snap[][3],
                            double crackle[][3], double pot[], int nnbindex[],
                            double nn_r2[]);
int sapporo_flush_(void);
void sapporo_last_error_(char *message, size_t message_len);
void sapporo_version_(char *text, size_t text_len);
long sapporo_direct_calls_(void);
long sapporo_python_calls_(void);
int sapporo_python_started_(void);

#ifdef __cplusplus
}
#endif

#endif /* SAPPORO_SAPPORO_H */
