/*
 * engine_api.h -- the native block-step engine as C code sees it (sapporo/core/engine.h).
 *
 * One engine per library.  The Python API calls it through its Python methods; the C API
 * (capi/shim.c) through this table of functions, which the module publishes as the
 * capsule sapporo.core._engine.C_API.  The C API gets the table and the engine of the
 * library it opened from its Python half once, at g6_open, and calls these functions
 * without the GIL; the engine takes the GIL itself when it must ask the library for a plan.
 *
 * Every function computes or stores, or returns an error code (< 0, as sapporo.h's
 * SAPPORO_ERR_*, with a message from error()): nothing is declined for another road to
 * retry.  The engine keeps the library's state: it writes the host mirror and the devices'
 * records, raises the addresses in use, and asks the library (its planner, with the GIL)
 * only for memory and plans: when an address lies beyond the memory held, a record holds a
 * derivative the predictor does not read yet, or the memory moved.  The engine never
 * computes from memory that may have moved: each plan carries the generations of the
 * library's and the device's memory, and is checked against them before every use.
 */
#ifndef SAPPORO_ENGINE_API_H
#define SAPPORO_ENGINE_API_H

#include <math.h>

#include "layout.h"

/* j-particles as the library's raw records (layout.h: RAW_XM x|mass, RAW_VT v|t, then a,
 * jerk, snap, crackle, pop, d5 with a zero .w): as many double4 per particle as order 8
 * uses. */
#define JB_RECORDS RAW_N_ORDER8
#define JB_DOUBLES (4 * JB_RECORDS)
/* positions at or beyond this magnitude are refused */
#define COORD_LIMIT LIMIT_COORD

#define SAPPORO_ENGINE_API_VERSION 8

/* the error codes the engine returns: sapporo.h's SAPPORO_ERR_* of the same meaning */
#define ENG_ERR_INPUT -1      /* an argument out of range (the engine keeps working) */
#define ENG_ERR_BACKEND -4    /* a device failed: the engine takes no call from now on */
#define ENG_ERR_NONFINITE -5  /* a force is not finite (the rows are written) */
#define ENG_ERR_INTERNAL -6   /* out of memory, or a plan the engine does not understand */

struct sapporo_engine_api {
    int version;
    /* n records into the library's j-memory, nrec double4 each (2 <= nrec <= JB_RECORDS:
     * x|m, v|t, then as many derivatives as the caller has; those it does not give are
     * zero): 1 stored, or < 0 (nothing stored) */
    int (*put_j)(void *engine, int n, const int *address, const int *index, const double *rec,
                 int nrec);
    /* start a force call on j-addresses [0, nj) (nj = 0: no force): 1 started, or < 0.
     * index: int ids; a (orders 6, 8) and jerk (order 8) may be NULL below those orders; h2
     * may be NULL (no lists); the j-particles are predicted to the time set_time gave. */
    int (*start)(void *engine, int nj, int ni, const int *index, const double *x,
                 const double *v, const double *a, const double *jerk, double eps2,
                 const double *h2);
    /* the time of the next force calls (the j-particles are predicted to it); 0 until set */
    void (*set_time)(void *engine, double t);
    /* wait for the started call; its result rows (nco of ni values) into rows: ni when done,
     * or < 0 (ENG_ERR_NONFINITE names the first i-particle whose force is not finite; the
     * rows are written) */
    int (*finish)(void *engine, int ni, double *rows);
    /* the neighbour lists of the last finished call (ids ascending, at most the capacity,
     * counts whole), as CSR: 1 when it had lists, else 0 */
    int (*lists)(void *engine, int *ni, const int **offsets, const int **counts,
                 const int **ids);
    /* wait for anything in flight: 0, or < 0 (error) */
    int (*wait)(void *engine);
    /* the library's order, and the message of the last error */
    int (*order)(void *engine);
    const char *(*error)(void *engine);
    /* the engines' calls into Python (the library's planner), over the process */
    long (*python_calls)(void);
    /* start a force call on ng groups (order 2): group g's i-particles x[ioff[g] ..
     * ioff[g + 1]) (index: their ids, indexed alike) take the force of j-addresses
     * [joff[g], joff[g + 1]) only, all groups in one launch.  Each group is padded to whole
     * work-groups; as many groups as fit in one launch (LIMIT_NI_CHUNK padded i-particles)
     * are started: their number k >= 1, or < 0.  finish(engine, ioff[k] - ioff[0], rows)
     * then gives the rows of i-particles ioff[0] .. ioff[k] - 1. */
    int (*start_groups)(void *engine, int ng, const int *ioff, const int *joff,
                        const int *index, const double *x, double eps2);
    /* put_j of n j-particles at addresses adr .. adr + n - 1: positions x (3 each), masses
     * m, all with id index, no velocity, at time 0 (the GRAPE-5 calls); where the records
     * stand still (order 2 on host memory), written in one pass with no staging */
    int (*put_xm)(void *engine, int adr, int n, const double *x, const double *m, int index);
    /* the positions (3 each) and masses of addresses adr .. adr + n - 1 as last stored (the
     * host mirror's; zeros where nothing was): 1, or < 0 (addresses out of range) */
    int (*get_xm)(void *engine, int adr, int n, double *x, double *m);
};

/* ---------------------------------------------------------------------- the argument rules
 * Written once, for every caller: the engine, the GRAPE-6 and GRAPE-5 adapters (capi/) and
 * the integrator's core.  Each caller names what breaks one in its own words. */

/* the smallest normal float: double-single loses smaller non-zero masses (library.FLT_MIN) */
#define ENGINE_FLT_MIN 1.1754943508222875e-38

/* Whether a position can be computed with: finite, each component's magnitude below
 * COORD_LIMIT (squared distances stay finite in double). */
static inline int position_ok(const double *x)
{
    return fabs(x[0]) < COORD_LIMIT && fabs(x[1]) < COORD_LIMIT && fabs(x[2]) < COORD_LIMIT;
}

/* Whether double-single keeps a mass: zero, or within float's normal range (its pair terms
 * are computed in float). */
static inline int ds_mass_ok(double m)
{
    return m == 0.0 || fabs(m) >= ENGINE_FLT_MIN;
}

/* Whether a neighbour radius squared asks for a list: finite and positive.  Anything else
 * (zero, negative, NaN, infinite: clients pass uninitialised arrays) gives that i-particle no
 * list, and never costs its forces. */
static inline int wants_list(double h2)
{
    return isfinite(h2) && h2 > 0.0;
}

/* Whether a 3-vector is finite (NULL counts as zeros). */
static inline int finite3(const double *p)
{
    return p == NULL || (isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]));
}

/* The one packer of j-records: a j-particle as nrec double4 at r (2 <= nrec <= JB_RECORDS):
 * x|mass, v|t (v NULL: zero), then d[q] (a, jerk, snap, crackle, pop, d5; d NULL or d[q]
 * NULL: zero) times scale[q] (scale NULL: 1), each with a zero .w.  The engine's put_j from
 * Python, the C API's GRAPE-6 and GRAPE-5 calls, and the integrator's core. */
static inline void put_record(double *r, int nrec, const double *x, double mass,
                              const double *v, double t, const double *const *d,
                              const double *scale)
{
    for (int q = 0; q < nrec; q++) {
        const double *p = q == 0 ? x : q == 1 ? v : d == NULL ? NULL : d[q - 2];
        const double f = q < 2 || scale == NULL ? 1.0 : scale[q - 2];
        double *o = r + 4 * q;
        o[0] = p == NULL ? 0.0 : f * p[0];
        o[1] = p == NULL ? 0.0 : f * p[1];
        o[2] = p == NULL ? 0.0 : f * p[2];
        o[3] = q == 0 ? mass : q == 1 ? t : 0.0;
    }
}

/* The one reader of result rows in C: the rows of ni i-particles (layout.h: OC_* rows of ni
 * values each, as the engine's finish writes them for a library of this order) into a
 * client's arrays of ni 3-vectors or values; any may be NULL; a derivative the order does
 * not compute (jerk below 4, snap below 6, crackle below 8) comes out as zeros. */
static inline void rows_out(const double *rows, int ni, int order, double *acc, double *jerk,
                            double *snap, double *crackle, double *pot, int *nnb,
                            double *nn_r2)
{
    double *const vec[4] = {acc, jerk, snap, crackle};
    const int row0[4] = {OC_AX, OC_JX, OC_SX, OC_CX}, from[4] = {2, 4, 6, 8};
    for (int k = 0; k < 4; k++)
        for (int i = 0; vec[k] != NULL && i < ni; i++)
            for (int c = 0; c < 3; c++)
                vec[k][3 * i + c] = order >= from[k]
                    ? rows[(size_t)(row0[k] + c) * (size_t)ni + (size_t)i] : 0.0;
    for (int i = 0; i < ni; i++) {
        if (pot != NULL)
            pot[i] = rows[(size_t)OC_POT * (size_t)ni + (size_t)i];
        if (nnb != NULL)
            nnb[i] = (int)rows[(size_t)OC_NNID * (size_t)ni + (size_t)i];
        if (nn_r2 != NULL)
            nn_r2[i] = rows[(size_t)OC_NNR2 * (size_t)ni + (size_t)i];
    }
}

#endif
