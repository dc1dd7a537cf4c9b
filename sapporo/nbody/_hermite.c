/*
 * _hermite.c -- the block step of sapporo.nbody.hermite.HermiteIntegrator in C: module
 * sapporo.nbody._hermite, compiled when the package is installed (setup.py).
 *
 * A Core works on the integrator's own NumPy arrays (x, v, a, jerk, snap, crackle, pop, d5,
 * pot, t, dt, m, ids, n_active_counts: it holds buffer views of them, so they must not be
 * replaced while it lives) and runs block steps until a time, a wall-clock budget or a stop
 * request:
 *
 *   1. the active block: the particles with the smallest t + dt, in index order, from a
 *      queue of the times due, each with its particles (block steps make few distinct
 *      times: a few per power-of-two step), so that choosing a block costs
 *      O(block log times), never a pass over N;
 *   2. the block predicted by the Taylor series the device uses (sapporo.nbody.hermite's
 *      predict_taylor / predict_taylor8, the same Horner form and operation order);
 *   3. the force call: through the library's native engine (sapporo/engine_api.h, the
 *      capsule sapporo.core._engine.C_API), or, for a library without one (MPI's), through
 *      the integrator's Python method _py_force (the library's way), which reads the
 *      block from _w_act and _w and writes the forces into _r and _r_pot;
 *   4. the corrector, the interpolated derivatives, the step criterion with its force-noise
 *      guard and floor, the new power-of-two step (the formulas of docs/integrator.md);
 *   5. the new j-particles: engine put_j, or the integrator's _py_send.
 *
 * Counters (steps, block steps, fallback steps, force calls, interactions, library
 * seconds, run seconds) count what the core did since the integrator last took them.
 *
 * Compiled without FMA contraction (setup.py: -ffp-contract=off), so that each formula rounds
 * as its NumPy statement does.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_api.h"
#include "layout.h"

/* the step criteria */
enum { CRIT_AARSETH = 0, CRIT_GENERALISED = 1, CRIT_AVERAGE = 2 };

/* Steps never go below FLOOR_FRACTION of the fallback; a derivative counts as resolved
 * above RESOLVED_FACTOR times its force-noise bound. */
#define FLOOR_FRACTION 0.125
#define RESOLVED_FACTOR 2.0

/* (Aarseth, generalised) scale factors of the fallback criterion at orders 4, 6 and 8 */
static const double FALLBACK_SCALE[3][2] = {{0.27, 0.27}, {0.74, 0.32}, {0.73, 0.17}};

/* The degree-7 Hermite interpolant of the 8th-order scheme about the step's midpoint: even
 * and odd coefficients from the half sums and differences (inverses of constant 4x4
 * systems: interp8), and d^k a/dT^k = sum_n n! / (n - k)! D_n / tau^k (deriv8). */
static const double EVEN8[4][4] = {
    {1.0, -11.0 / 16.0, 3.0 / 16.0, -1.0 / 48.0},
    {0.0, 15.0 / 16.0, -7.0 / 16.0, 1.0 / 16.0},
    {0.0, -5.0 / 16.0, 5.0 / 16.0, -1.0 / 16.0},
    {0.0, 1.0 / 16.0, -1.0 / 16.0, 1.0 / 48.0},
};
static const double ODD8[4][4] = {
    {35.0 / 16.0, -19.0 / 16.0, 1.0 / 4.0, -1.0 / 48.0},
    {-35.0 / 16.0, 35.0 / 16.0, -5.0 / 8.0, 1.0 / 16.0},
    {21.0 / 16.0, -21.0 / 16.0, 1.0 / 2.0, -1.0 / 16.0},
    {-5.0 / 16.0, 5.0 / 16.0, -1.0 / 8.0, 1.0 / 48.0},
};

/* n! / (n - k)! for n, k < 8 */
static double perm(int n, int k)
{
    double p = 1.0;
    if (k > n)
        return 0.0;
    for (int q = 0; q < k; q++)
        p *= (double)(n - q);
    return p;
}

/* The interpolant's coefficients D[8]: D[2r] from the even inputs, D[2r + 1] from the odd
 * ones (with absolute: by the matrices' absolute values, for error bounds). */
static void interp8(const double *even, const double *odd, int absolute, double *D)
{
    for (int r = 0; r < 4; r++) {
        double e = 0.0, o = 0.0;
        for (int c = 0; c < 4; c++) {
            e += (absolute ? fabs(EVEN8[r][c]) : EVEN8[r][c]) * even[c];
            o += (absolute ? fabs(ODD8[r][c]) : ODD8[r][c]) * odd[c];
        }
        D[2 * r] = e;
        D[2 * r + 1] = o;
    }
}

/* d^k a/dT^k at the end of the step from the interpolant's coefficients D, tau the half step */
static double deriv8(const double *D, int k, double tau)
{
    double s = 0.0;
    for (int n = 0; n < 8; n++)
        s += perm(n, k) * D[n];
    return s / pow(tau, k);
}

/* NumPy's maximum: NaN when either is NaN */
static double nmax(double a, double b)
{
    return (isnan(a) || a > b) ? a : b;
}

/* the largest power of two <= x (x positive and finite) */
static double floor_pow2(double x)
{
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 1);
}

static double norm3(const double *q)
{
    return sqrt(q[0] * q[0] + q[1] * q[1] + q[2] * q[2]);
}

/* ------------------------------------------------------------------ the step formulas */

struct params {
    int order, criterion;
    double eta, eta4, noise, dt_min, dt_max;
};

/* The criterion from the norms n[] of the derivatives at the end of the step (a, j, s, c
 * and, for 6th order, the 4th and 5th, for 8th order the 4th to 7th). */
static double criterion_value(const struct params *p, const double *n)
{
    double a1sq = n[0] * n[2] + n[1] * n[1];
    double a2sq = n[1] * n[3] + n[2] * n[2];
    double aar_eta = sqrt(p->eta * a1sq / a2sq), aar4 = sqrt(p->eta4 * a1sq / a2sq), gen;
    if (p->criterion == CRIT_AARSETH)
        return aar_eta;
    if (p->order == 4)
        gen = p->eta * sqrt(a1sq / a2sq);
    else if (p->order == 8) {
        double a6sq = n[5] * n[7] + n[6] * n[6];
        gen = p->eta * pow(a1sq / a6sq, 1.0 / 10.0);
    }
    else {
        double a4sq = n[3] * n[5] + n[4] * n[4];
        gen = p->eta * pow(a1sq / a4sq, 1.0 / 6.0);
    }
    if (p->criterion == CRIT_GENERALISED)
        return gen;
    return 0.5 * (aar4 + gen);
}

/* The fallback: the criterion's scale times T1 = |a| / |j| (4th order) or
 * |a| / sqrt(|j|^2 + |a||s|) (6th and 8th). */
static double fallback_value(const struct params *p, double na, double nj, double ns)
{
    const double ca = FALLBACK_SCALE[(p->order - 4) / 2][0];
    const double cg = FALLBACK_SCALE[(p->order - 4) / 2][1];
    double t1 = p->order == 4 ? 1.0 * na / nj : 1.0 * na / sqrt(nj * nj + na * ns);
    if (p->criterion == CRIT_AARSETH)
        return ca * sqrt(p->eta) * t1;
    if (p->criterion == CRIT_GENERALISED)
        return cg * p->eta * t1;
    return 0.5 * (ca * sqrt(p->eta4) + cg * p->eta) * t1;
}

/* Whether an interpolated derivative the criterion uses is within the force noise: n0 the
 * norms of a, j (, s, c) at the start of the step, n those at its end, tau the half step. */
static int unresolved(const struct params *p, double tau, const double *n0, const double *n)
{
    const double noise = p->noise;
    double da = noise * nmax(n0[0], n[0]), dj = noise * nmax(n0[1], n[1]);
    double bound[8] = {0};
    int lo, hi;
    if (p->order == 4) {
        double s3 = 3.0 * (dj + da / tau) / (tau * tau);
        bound[2] = dj / tau + tau * s3;
        bound[3] = s3;
        lo = 2;
        hi = 3;
    }
    else if (p->order == 8) {
        double ds = noise * nmax(n0[2], n[2]), dc = noise * nmax(n0[3], n[3]);
        double e_in[4] = {da, tau * dj, tau * tau * ds, tau * tau * tau * dc}, dd[8];
        interp8(e_in, e_in, 1, dd);
        for (int k = 5; k < 8; k++)
            bound[k] = deriv8(dd, k, tau);
        if (p->criterion == CRIT_AARSETH)
            return 0;  /* a, j, s, c: all computed by the library */
        lo = 5;
        hi = 7;
    }
    else {
        double ds = noise * nmax(n0[2], n[2]);
        double t2 = tau * tau;
        double s4 = 3.0 * (ds + dj / tau) / t2;
        double s5 = 15.0 * (ds * t2 + 3.0 * dj * tau + 3.0 * da) / pow(tau, 5);
        double s3 = ds / tau + s5 * t2 / 6.0;
        bound[3] = s3 + tau * s4 + 0.5 * t2 * s5;
        bound[4] = s4 + tau * s5;
        bound[5] = s5;
        lo = 3;
        hi = p->criterion == CRIT_AARSETH ? 3 : 5;
    }
    for (int k = lo; k <= hi; k++)
        if (!(n[k] > RESOLVED_FACTOR * bound[k]))
            return 1;
    return 0;
}

/* The guarded criterion of one particle: the criterion, the fallback where an interpolated
 * derivative is unresolved (*fell set), never below FLOOR_FRACTION of the fallback. */
static double guarded_step(const struct params *p, double tau, const double *n0,
                           const double *n, int *fell)
{
    double crit = criterion_value(p, n);
    double fb = fallback_value(p, n[0], n[1], p->order == 4 ? 0.0 : n[2]);
    *fell = 0;
    if (p->noise > 0.0 && unresolved(p, tau, n0, n)) {
        crit = fb;
        *fell = 1;
    }
    return fmax(crit, FLOOR_FRACTION * fb);
}

/* The new block step: the criterion rounded down to a power of two in [dt_min, dt_max]
 * (non-finite: dt_max); smaller taken as it is, larger at most doubled and only when t_new
 * is a multiple of 2 dt_old; with have_limit never beyond t_limit. */
static double quantise(const struct params *p, double crit, double dt_old, double t_new,
                       int have_limit, double t_limit)
{
    double c = isfinite(crit) ? crit : p->dt_max, q, out;
    c = c < p->dt_min ? p->dt_min : (c > p->dt_max ? p->dt_max : c);
    q = floor_pow2(c);
    if (q < dt_old)
        out = q;
    else if (q >= 2.0 * dt_old && fmod(t_new, 2.0 * dt_old) == 0.0)
        out = 2.0 * dt_old;
    else
        out = dt_old;
    if (have_limit) {
        double room = t_limit - t_new;
        if (room > 0.0) {
            double cap = floor_pow2(room);
            out = out < cap ? out : cap;
        }
    }
    return out;
}

/* ------------------------------------------------------------------ the core */

typedef struct {
    PyObject_HEAD
    struct params p;
    int n, nj;  /* particles; j-addresses of a force call (the library's stored ones) */
    double eps2;
    Py_buffer views[32];
    int nviews;
    /* the state (the integrator's arrays) */
    double *x, *v, *a, *jk, *s, *c, *pop, *d5, *pot, *t, *dt, *m;
    int64_t *ids, *counts;
    /* the block, in the integrator's work arrays (the Python way reads them): its
     * particles, their predicted x, v, a, jerk (w) and their acc, jerk, snap, crackle (r) */
    int64_t *w_act;
    double *w[4], *r[4], *r_pot, *crit;  /* (crit: the trial steps' criteria) */
    /* C work */
    int *act, *index32;
    double *rows, *rec;
    /* the queue: ntimes distinct times due, ascending (due[]), each with a list of its
     * particles (first[], then next[] by particle) */
    double *due;
    int *first, *next;
    int ntimes;
    PyObject *py_force, *py_send;
    PyObject *engine;  /* the library's engine object (kept alive while the core lives) ... */
    void *eng;         /* ... and the engine, from its handle (a capsule), or NULL */
    const struct sapporo_engine_api *api;
    /* exposed */
    double time, library_seconds, seconds;
    long long steps, block_steps, fallback_steps, force_calls, interactions;
    int stop;
} Core;

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* a writable C-contiguous view of attribute name: itemsize 8, elems values ('d' or an int) */
static void *view_attr(Core *self, PyObject *owner, const char *name, Py_ssize_t elems,
                       int want_float)
{
    PyObject *obj = PyObject_GetAttrString(owner, name);
    Py_buffer *b;
    char f;
    int rc;
    if (obj == NULL)
        return NULL;
    if (self->nviews >= (int)(sizeof self->views / sizeof self->views[0])) {
        Py_DECREF(obj);
        PyErr_SetString(PyExc_RuntimeError, "too many arrays");
        return NULL;
    }
    b = &self->views[self->nviews];
    rc = PyObject_GetBuffer(obj, b, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE);
    Py_DECREF(obj);
    if (rc < 0)
        return NULL;
    self->nviews++;
    f = b->format == NULL ? 'B' : b->format[strlen(b->format) - 1];
    if (b->itemsize != 8 || b->len != 8 * elems
        || (want_float ? f != 'd' : (f != 'l' && f != 'q'))) {
        PyErr_Format(PyExc_ValueError, "%s: expected %zd %s values", name, elems,
                     want_float ? "float64" : "int64");
        return NULL;
    }
    return b->buf;
}

/* Particle i into the queue at time t (a new entry where no particle is due then). */
static void queue_put(Core *self, int i, double t)
{
    int lo = 0, hi = self->ntimes;
    while (lo < hi) {  /* the first time due >= t */
        int mid = (lo + hi) / 2;
        if (self->due[mid] < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == self->ntimes || self->due[lo] != t) {
        memmove(self->due + lo + 1, self->due + lo, sizeof(double) * (size_t)(self->ntimes - lo));
        memmove(self->first + lo + 1, self->first + lo,
                sizeof(int) * (size_t)(self->ntimes - lo));
        self->ntimes++;
        self->due[lo] = t;
        self->first[lo] = -1;
    }
    self->next[i] = self->first[lo];
    self->first[lo] = i;
}

/* The particles due first into act (in index order), taken out of the queue: their count. */
static int queue_take(Core *self)
{
    int k = 0;
    for (int i = self->first[0]; i >= 0; i = self->next[i])
        self->act[k++] = i;
    self->ntimes--;
    memmove(self->due, self->due + 1, sizeof(double) * (size_t)self->ntimes);
    memmove(self->first, self->first + 1, sizeof(int) * (size_t)self->ntimes);
    return k;
}

/* every particle into the queue by t + dt (after the arrays changed) */
static void queue_build(Core *self)
{
    self->ntimes = 0;
    for (int i = 0; i < self->n; i++)
        queue_put(self, i, self->t[i] + self->dt[i]);
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* 1 / k!: the Taylor coefficients of the predictor */
static const double INV_FACT[8] = {1.0, 1.0, 0.5, 1.0 / 6.0, 1.0 / 24.0, 1.0 / 120.0,
                                   1.0 / 720.0, 1.0 / 5040.0};

/* Predict the k particles of act[] by h = tb - t[i] into w[] (x, v, a and jerk): the Taylor
 * series through the order's last derivative (4: jerk, 6: crackle, 8: d5) in the Horner
 * form of predict_taylor8, innermost term first. */
static void predict_block(Core *self, int k, double tb)
{
    const int nd = self->p.order;  /* x, v, a and its derivatives up to the order's last */
    const double *state[8] = {self->x, self->v, self->a, self->jk, self->s, self->c,
                              self->pop, self->d5};
    for (int q = 0; q < k; q++) {
        const int i = self->act[q];
        const double h = tb - self->t[i];
        self->w_act[q] = i;
        for (int d = 0; d < 3; d++)
            for (int out = 0; out < 4; out++) {
                double sum = state[nd - 1][3 * i + d] * INV_FACT[nd - 1 - out];
                for (int m = nd - 2; m >= out; m--)
                    sum = state[m][3 * i + d] * INV_FACT[m - out] + h * sum;
                self->w[out][3 * q + d] = sum;
            }
    }
}

/* The engine's error as RuntimeError(message, code) (the library maps the code). -1. */
static int engine_error(Core *self, int rc)
{
    PyObject *v = Py_BuildValue("(si)", self->api->error(self->eng), rc);
    if (v != NULL) {
        PyErr_SetObject(PyExc_RuntimeError, v);
        Py_DECREF(v);
    }
    return -1;
}

/* A Python call's result dropped: 0, or -1 when it raised. */
static int called(PyObject *result)
{
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* The forces on the block at tb into r[] and r_pot: the engine, or the Python way. 0 or -1. */
static int force_block(Core *self, int k, double tb)
{
    double t0 = now();
    if (self->engine == NULL) {
        if (called(PyObject_CallFunction(self->py_force, "id", k, tb)) < 0)
            return -1;
    }
    else {
        void *eng = self->eng;
        int rc;
        for (int q = 0; q < k; q++)
            self->index32[q] = (int)self->ids[self->act[q]];
        /* without the GIL, as the C API calls the engine (other threads run meanwhile; the
         * caller holds the library's lock) */
        Py_BEGIN_ALLOW_THREADS
        self->api->set_time(eng, tb);
        rc = self->api->start(eng, self->nj, k, self->index32, self->w[0], self->w[1],
                              self->p.order >= 6 ? self->w[2] : NULL,
                              self->p.order >= 8 ? self->w[3] : NULL, self->eps2, NULL);
        if (rc > 0)
            rc = self->api->finish(eng, k, self->rows);
        Py_END_ALLOW_THREADS
        if (rc < 0)
            return engine_error(self, rc);
        rows_out(self->rows, k, self->p.order, self->r[0], self->r[1],
                 self->p.order >= 6 ? self->r[2] : NULL, self->p.order >= 8 ? self->r[3] : NULL,
                 self->r_pot, NULL, NULL);
    }
    self->library_seconds += now() - t0;
    self->force_calls++;
    self->interactions += (long long)k * self->n;
    return 0;
}

/* The committed block as j-particles: engine put_j, or the Python way. 0 or -1. */
static int send_block(Core *self, int k, double tb)
{
    if (self->engine != NULL) {
        void *eng = self->eng;
        /* the records the order has: x|m, v|t, a, jerk (, snap, crackle (, pop, d5)) */
        const int nrec = self->p.order >= 8 ? RAW_D5 + 1 : self->p.order >= 6 ? RAW_C + 1
                                                                             : RAW_J + 1;
        int rc;
        for (int q = 0; q < k; q++) {
            const int i = self->act[q];
            const double *d[6] = {self->a + 3 * i, self->jk + 3 * i,
                                  self->p.order >= 6 ? self->s + 3 * i : NULL,
                                  self->p.order >= 6 ? self->c + 3 * i : NULL,
                                  self->p.order >= 8 ? self->pop + 3 * i : NULL,
                                  self->p.order >= 8 ? self->d5 + 3 * i : NULL};
            put_record(self->rec + 4 * (size_t)nrec * q, nrec, self->x + 3 * i, self->m[i],
                       self->v + 3 * i, tb, d, NULL);
            self->index32[q] = (int)self->ids[i];
        }
        Py_BEGIN_ALLOW_THREADS
        rc = self->api->put_j(eng, k, self->act, self->index32, self->rec, nrec);
        Py_END_ALLOW_THREADS
        return rc < 0 ? engine_error(self, rc) : 0;
    }
    return called(PyObject_CallFunction(self->py_send, "i", k));
}

/* Corrector, derivatives and step of block particle q (index i, step h): the new state into
 * the arrays when commit (then the new step, limited by t_limit), else only the guarded
 * criterion into *crit. */
static void correct_one(Core *self, int q, int i, double h, double tb, int commit,
                        double t_limit, double *crit, int *fell)
{
    const int order = self->p.order;
    const double tau = 0.5 * h;
    double nrm0[4], nrm[8] = {0};
    double x1[3], v1[3], s1[3], c1[3], d4[3] = {0}, d5[3] = {0}, d6[3] = {0}, d7[3] = {0};
    const double *a1 = self->r[0] + 3 * q, *j1 = self->r[1] + 3 * q;
    const double *a0 = self->a + 3 * i, *j0 = self->jk + 3 * i;
    const double *x0 = self->x + 3 * i, *v0 = self->v + 3 * i;
    const double *s0 = self->s + 3 * i, *c0 = self->c + 3 * i;
    for (int d = 0; d < 3; d++) {
        const double am = 0.5 * (a1[d] - a0[d]), jp = 0.5 * (j1[d] + j0[d]);
        const double jm = 0.5 * (j1[d] - j0[d]);
        if (order == 4) {
            v1[d] = v0[d] + h * (0.5 * (a1[d] + a0[d]) + h * ((1.0 / 12.0) * (j0[d] - j1[d])));
            x1[d] = x0[d] + h * (0.5 * (v1[d] + v0[d]) + h * ((1.0 / 12.0) * (a0[d] - a1[d])));
            {
                const double dd2 = jm / tau, dd3 = 3.0 * (jp - am / tau) / (tau * tau);
                s1[d] = dd2 + tau * dd3;
                c1[d] = dd3;
            }
        }
        else if (order == 6) {
            const double sn = self->r[2][3 * q + d], so = s0[d];
            v1[d] = v0[d] + h * (0.5 * (a1[d] + a0[d]) + h * (-0.1 * (j1[d] - j0[d])
                                 + h * ((1.0 / 120.0) * (sn + so))));
            x1[d] = x0[d] + h * (0.5 * (v1[d] + v0[d]) + h * (-0.1 * (a1[d] - a0[d])
                                 + h * ((1.0 / 120.0) * (j1[d] + j0[d]))));
            {
                const double sp = 0.5 * (sn + so), sm = 0.5 * (sn - so), t2 = tau * tau;
                const double q4 = 3.0 * (sp - jm / tau) / t2;
                const double q5 = 15.0 * (sm * t2 - 3.0 * jp * tau + 3.0 * am) / pow(tau, 5);
                const double q3 = sm / tau - q5 * t2 / 6.0;
                s1[d] = sn;
                c1[d] = q3 + tau * (q4 + 0.5 * tau * q5);
                d4[d] = q4 + tau * q5;
                d5[d] = q5;
            }
        }
        else {
            const double sn = self->r[2][3 * q + d], cn = self->r[3][3 * q + d];
            const double so = s0[d], co = c0[d];
            v1[d] = v0[d] + h * (0.5 * (a0[d] + a1[d]) + h * ((3.0 / 28.0) * (j0[d] - j1[d])
                + h * ((1.0 / 84.0) * (so + sn) + h * ((1.0 / 1680.0) * (co - cn)))));
            x1[d] = x0[d] + h * (0.5 * (v0[d] + v1[d]) + h * ((3.0 / 28.0) * (a0[d] - a1[d])
                + h * ((1.0 / 84.0) * (j0[d] + j1[d]) + h * ((1.0 / 1680.0) * (so - sn)))));
            {
                const double t2 = tau * tau, t3 = t2 * tau;
                const double even[4] = {0.5 * (a1[d] + a0[d]), tau * 0.5 * (j1[d] - j0[d]),
                                        t2 * 0.5 * (sn + so), t3 * 0.5 * (cn - co)};
                const double odd[4] = {0.5 * (a1[d] - a0[d]), tau * 0.5 * (j1[d] + j0[d]),
                                       t2 * 0.5 * (sn - so), t3 * 0.5 * (cn + co)};
                double D[8];
                interp8(even, odd, 0, D);
                s1[d] = sn;
                c1[d] = cn;
                d4[d] = deriv8(D, 4, tau);
                d5[d] = deriv8(D, 5, tau);
                d6[d] = deriv8(D, 6, tau);
                d7[d] = deriv8(D, 7, tau);
            }
        }
    }
    {
        /* the norms at the start of the step (a, j, and the snap and crackle the library
         * computed), and at its end (a to the order's last interpolated derivative) */
        const double *start[4] = {a0, j0, s0, c0}, *end[8] = {a1, j1, s1, c1, d4, d5, d6, d7};
        for (int k = 0; k < 4; k++)
            nrm0[k] = k < order / 2 ? norm3(start[k]) : 0.0;
        for (int k = 0; k < order; k++)
            nrm[k] = norm3(end[k]);
    }
    *crit = guarded_step(&self->p, tau, nrm0, nrm, fell);
    if (!commit)
        return;
    for (int d = 0; d < 3; d++) {
        const int o = 3 * i + d;
        self->x[o] = x1[d];
        self->v[o] = v1[d];
        self->a[o] = a1[d];
        self->jk[o] = j1[d];
        self->s[o] = s1[d];
        self->c[o] = c1[d];
        if (order == 8) {
            self->pop[o] = d4[d];
            self->d5[o] = d5[d];
        }
    }
    self->pot[i] = self->r_pot[q];
    self->t[i] = tb;
    self->dt[i] = quantise(&self->p, *crit, h, tb, 1, t_limit);
}

/* One block step of the particles with the smallest t + dt (never beyond t_limit). */
static int block_step(Core *self, double t_limit)
{
    int k = 0;
    double tb;
    if (self->ntimes == 0) {
        PyErr_SetString(PyExc_RuntimeError, "internal: no particle to step");
        return -1;
    }
    tb = self->due[0];
    if (!(tb <= t_limit)) {
        PyErr_Format(PyExc_RuntimeError, "internal: the next block time %.17g is beyond "
                     "%.17g", tb, t_limit);
        return -1;
    }
    k = queue_take(self);
    qsort(self->act, (size_t)k, sizeof(int), cmp_int);
    predict_block(self, k, tb);
    if (force_block(self, k, tb) < 0) {
        for (int q = 0; q < k; q++)  /* nothing changed: the block waits in the queue */
            queue_put(self, self->act[q], tb);
        return -1;
    }
    for (int q = 0; q < k; q++) {
        const int i = self->act[q];
        double crit;
        int fell;
        correct_one(self, q, i, self->dt[i], tb, 1, t_limit, &crit, &fell);
        self->fallback_steps += fell;
    }
    self->time = tb;
    self->steps += k;
    self->block_steps++;
    self->counts[k]++;
    for (int q = 0; q < k; q++) {
        const int i = self->act[q];
        queue_put(self, i, self->t[i] + self->dt[i]);
    }
    return send_block(self, k, tb);
}

static PyObject *Core_run(Core *self, PyObject *args)
{
    double t_limit, budget, t0 = now();
    long long max_steps, done = 0;
    int failed = 0;
    if (!PyArg_ParseTuple(args, "ddL", &t_limit, &budget, &max_steps))
        return NULL;
    if (self->act == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Core is not initialised");
        return NULL;
    }
    while (!failed && self->time < t_limit) {
        failed = block_step(self, t_limit) < 0 || PyErr_CheckSignals() < 0;
        if (self->stop || now() - t0 >= budget || ++done == max_steps)
            break;
    }
    self->seconds += now() - t0;
    return failed ? NULL : PyFloat_FromDouble(self->time);
}

/* trial(k, h): the guarded criterion of the k particles _w_act[:k] (all at the same time)
 * after a trial step of h, into _crit[:k]; nothing is committed or sent. */
static PyObject *Core_trial(Core *self, PyObject *args)
{
    double h, tb, t0 = now();
    int k, failed;
    if (!PyArg_ParseTuple(args, "id", &k, &h))
        return NULL;
    if (self->act == NULL || k < 1 || k > self->n || !(h > 0.0)) {
        PyErr_SetString(PyExc_ValueError, "trial: an initialised Core, 1 <= k <= n, h > 0");
        return NULL;
    }
    for (int q = 0; q < k; q++) {
        if (self->w_act[q] < 0 || self->w_act[q] >= self->n) {
            PyErr_SetString(PyExc_ValueError, "trial: index out of range");
            return NULL;
        }
        self->act[q] = (int)self->w_act[q];
    }
    tb = self->t[self->act[0]] + h;
    predict_block(self, k, tb);
    failed = force_block(self, k, tb) < 0;
    for (int q = 0; q < k && !failed; q++) {
        int fell;
        correct_one(self, q, self->act[q], h, tb, 0, 0.0, self->crit + q, &fell);
    }
    self->seconds += now() - t0;
    if (failed)
        return NULL;
    Py_RETURN_NONE;
}

static int parse_criterion(PyObject *obj)
{
    static const char *const names[] = {"aarseth", "generalised", "average"};  /* CRIT_* */
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8(obj) : NULL;
    for (int c = 0; s != NULL && c < 3; c++)
        if (strcmp(s, names[c]) == 0)
            return c;
    if (!PyErr_Occurred())
        PyErr_SetString(PyExc_ValueError, "criterion must be aarseth, generalised or average");
    return -1;
}

static int get_double(PyObject *owner, const char *name, double *out)
{
    PyObject *o = PyObject_GetAttrString(owner, name);
    if (o == NULL)
        return -1;
    *out = PyFloat_AsDouble(o);
    Py_DECREF(o);
    return (*out == -1.0 && PyErr_Occurred()) ? -1 : 0;
}

/* Core(integrator, api_capsule_or_None, engine_or_None) */
static int Core_init(Core *self, PyObject *args, PyObject *kwds)
{
    PyObject *integ, *capsule, *engine, *o;
    double order, count, nj, *w, *r;
    Py_ssize_t n;
    static char *kwlist[] = {"integrator", "api", "engine", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOO", kwlist, &integ, &capsule, &engine))
        return -1;
    if (self->nviews > 0 || self->act != NULL) {
        PyErr_SetString(PyExc_RuntimeError, "Core is initialised once");
        return -1;
    }
    if (get_double(integ, "order", &order) < 0 || get_double(integ, "n", &count) < 0
        || get_double(integ, "_nj", &nj) < 0 || get_double(integ, "eta", &self->p.eta) < 0
        || get_double(integ, "eta4", &self->p.eta4) < 0
        || get_double(integ, "force_noise", &self->p.noise) < 0
        || get_double(integ, "dt_min", &self->p.dt_min) < 0
        || get_double(integ, "dt_max", &self->p.dt_max) < 0
        || get_double(integ, "eps2", &self->eps2) < 0
        || get_double(integ, "time", &self->time) < 0)
        return -1;
    if ((order != 4 && order != 6 && order != 8) || !(count >= 1)
        || count > LIMIT_MAX_ADDRESS) {
        PyErr_SetString(PyExc_ValueError, "order must be 4, 6 or 8 and n >= 1");
        return -1;
    }
    self->p.order = (int)order;
    self->n = (int)count;
    self->nj = (int)nj;
    n = self->n;
    if ((o = PyObject_GetAttrString(integ, "criterion")) == NULL)
        return -1;
    self->p.criterion = parse_criterion(o);
    Py_DECREF(o);
    if (self->p.criterion < 0)
        return -1;
    {
        const Py_ssize_t v3 = 3 * n;
        if ((self->x = view_attr(self, integ, "x", v3, 1)) == NULL
            || (self->v = view_attr(self, integ, "v", v3, 1)) == NULL
            || (self->a = view_attr(self, integ, "a", v3, 1)) == NULL
            || (self->jk = view_attr(self, integ, "jerk", v3, 1)) == NULL
            || (self->s = view_attr(self, integ, "snap", v3, 1)) == NULL
            || (self->c = view_attr(self, integ, "crackle", v3, 1)) == NULL
            || (order == 8 && (self->pop = view_attr(self, integ, "pop", v3, 1)) == NULL)
            || (order == 8 && (self->d5 = view_attr(self, integ, "d5", v3, 1)) == NULL)
            || (self->pot = view_attr(self, integ, "pot", n, 1)) == NULL
            || (self->t = view_attr(self, integ, "t", n, 1)) == NULL
            || (self->dt = view_attr(self, integ, "dt", n, 1)) == NULL
            || (self->m = view_attr(self, integ, "m", n, 1)) == NULL
            || (self->ids = view_attr(self, integ, "ids", n, 0)) == NULL
            || (self->counts = view_attr(self, integ, "n_active_counts", n + 1, 0)) == NULL
            || (self->w_act = view_attr(self, integ, "_w_act", n, 0)) == NULL
            || (w = view_attr(self, integ, "_w", 4 * v3, 1)) == NULL
            || (r = view_attr(self, integ, "_r", 4 * v3, 1)) == NULL
            || (self->r_pot = view_attr(self, integ, "_r_pot", n, 1)) == NULL
            || (self->crit = view_attr(self, integ, "_crit", n, 1)) == NULL)
            return -1;
        for (int k = 0; k < 4; k++) {
            self->w[k] = w + k * v3;
            self->r[k] = r + k * v3;
        }
    }
    if ((self->py_force = PyObject_GetAttrString(integ, "_py_force")) == NULL
        || (self->py_send = PyObject_GetAttrString(integ, "_py_send")) == NULL)
        return -1;
    if (engine != Py_None) {
        const struct sapporo_engine_api *api =
            PyCapsule_GetPointer(capsule, "sapporo.core._engine.C_API");
        if (api == NULL)
            return -1;
        if (api->version != SAPPORO_ENGINE_API_VERSION) {
            PyErr_Format(PyExc_RuntimeError, "the native engine has interface version %d, "
                         "this core %d: reinstall sapporo-nbody", api->version,
                         SAPPORO_ENGINE_API_VERSION);
            return -1;
        }
        {
            PyObject *handle = PyObject_GetAttrString(engine, "handle");
            void *eng = handle == NULL ? NULL
                : PyCapsule_GetPointer(handle, "sapporo.core._engine.Engine");
            Py_XDECREF(handle);
            if (eng == NULL)
                return -1;
            self->api = api;
            self->engine = engine;
            self->eng = eng;
            Py_INCREF(engine);
        }
    }
    self->act = malloc(sizeof(int) * (size_t)n);
    self->index32 = malloc(sizeof(int) * (size_t)n);
    self->due = malloc(sizeof(double) * (size_t)n);
    self->first = malloc(sizeof(int) * (size_t)n);
    self->next = malloc(sizeof(int) * (size_t)n);
    self->rows = self->engine ? malloc(sizeof(double) * NCO_ORDER8 * (size_t)n) : NULL;
    self->rec = self->engine ? malloc(sizeof(double) * JB_DOUBLES * (size_t)n) : NULL;
    if (self->act == NULL || self->index32 == NULL || self->due == NULL || self->first == NULL
        || self->next == NULL
        || (self->engine != NULL && (self->rows == NULL || self->rec == NULL))) {
        PyErr_NoMemory();
        return -1;
    }
    queue_build(self);
    return 0;
}

static void Core_dealloc(Core *self)
{
    for (int k = 0; k < self->nviews; k++)
        PyBuffer_Release(&self->views[k]);
    free(self->act);
    free(self->index32);
    free(self->due);
    free(self->first);
    free(self->next);
    free(self->rows);
    free(self->rec);
    Py_CLEAR(self->py_force);
    Py_CLEAR(self->py_send);
    Py_CLEAR(self->engine);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMemberDef Core_members[] = {
    {"time", T_DOUBLE, offsetof(Core, time), READONLY, "the time of the last block step"},
    {"steps", T_LONGLONG, offsetof(Core, steps), 0, "particle steps"},
    {"block_steps", T_LONGLONG, offsetof(Core, block_steps), 0, "block steps"},
    {"fallback_steps", T_LONGLONG, offsetof(Core, fallback_steps), 0, "fallback steps"},
    {"force_calls", T_LONGLONG, offsetof(Core, force_calls), 0, "force calls"},
    {"interactions", T_LONGLONG, offsetof(Core, interactions), 0, "interactions"},
    {"library_seconds", T_DOUBLE, offsetof(Core, library_seconds), 0,
     "seconds in force calls"},
    {"seconds", T_DOUBLE, offsetof(Core, seconds), 0, "seconds inside run and trial"},
    {"stop", T_INT, offsetof(Core, stop), 0, "set to stop run after the current block"},
    {"native", T_OBJECT, offsetof(Core, engine), READONLY,
     "the library's engine the core calls (None: the Python way)"},
    {NULL, 0, 0, 0, NULL},
};

static PyMethodDef Core_methods[] = {
    {"run", (PyCFunction)Core_run, METH_VARARGS,
     "run(t_limit, seconds, max_steps): block steps until time t_limit, or after the block "
     "step that ends `seconds` of wall time, or after max_steps block steps (0: no limit), "
     "or after a stop request; returns the time"},
    {"trial", (PyCFunction)Core_trial, METH_VARARGS,
     "trial(k, h): the guarded criteria of the particles _w_act[:k] after a trial step of h, "
     "into _crit[:k] (nothing committed)"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject CoreType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sapporo.nbody._hermite.Core",
    .tp_basicsize = sizeof(Core),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The native block step of a HermiteIntegrator (on its arrays).",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Core_init,
    .tp_dealloc = (destructor)Core_dealloc,
    .tp_methods = Core_methods,
    .tp_members = Core_members,
};

/* ------------------------------------------------------------------ the formulas, for tests */

/* step(order, criterion, eta, eta4, noise, tau, n0, n): (guarded step, fell back) of one
 * particle from the norms n0 (a, j, s, c at the start) and n (at the end) */
static PyObject *mod_step(PyObject *mod, PyObject *args)
{
    struct params p = {0};
    PyObject *crit_obj, *n0_obj, *n_obj;
    double tau, n0[4] = {0}, n[8] = {0}, out;
    int fell;
    if (!PyArg_ParseTuple(args, "iOddddOO", &p.order, &crit_obj, &p.eta, &p.eta4, &p.noise,
                          &tau, &n0_obj, &n_obj))
        return NULL;
    if ((p.criterion = parse_criterion(crit_obj)) < 0)
        return NULL;
    {
        PyObject *seqs[2] = {n0_obj, n_obj};
        double *dst[2] = {n0, n};
        int cap[2] = {4, 8};
        for (int s = 0; s < 2; s++) {
            PyObject *f = PySequence_Fast(seqs[s], "norms must be a sequence");
            if (f == NULL)
                return NULL;
            for (Py_ssize_t k = 0; k < PySequence_Fast_GET_SIZE(f) && k < cap[s]; k++)
                dst[s][k] = PyFloat_AsDouble(PySequence_Fast_GET_ITEM(f, k));
            Py_DECREF(f);
            if (PyErr_Occurred())
                return NULL;
        }
    }
    out = guarded_step(&p, tau, n0, n, &fell);
    return Py_BuildValue("dO", out, fell ? Py_True : Py_False);
}

/* quantise(crit, dt_old, t_new, dt_min, dt_max, t_limit or None): the new block step */
static PyObject *mod_quantise(PyObject *mod, PyObject *args)
{
    struct params p = {0};
    double crit, dt_old, t_new, t_limit = 0.0;
    PyObject *lim;
    if (!PyArg_ParseTuple(args, "dddddO", &crit, &dt_old, &t_new, &p.dt_min, &p.dt_max, &lim))
        return NULL;
    if (lim != Py_None && (t_limit = PyFloat_AsDouble(lim)) == -1.0 && PyErr_Occurred())
        return NULL;
    return PyFloat_FromDouble(quantise(&p, crit, dt_old, t_new, lim != Py_None, t_limit));
}

static PyMethodDef module_methods[] = {
    {"step", mod_step, METH_VARARGS,
     "step(order, criterion, eta, eta4, noise, tau, n0, n) -> (step, fell_back): the "
     "guarded criterion of one particle from the norms of its derivatives"},
    {"quantise", mod_quantise, METH_VARARGS,
     "quantise(crit, dt_old, t_new, dt_min, dt_max, t_limit) -> the new block step"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef hermite_module = {
    PyModuleDef_HEAD_INIT, "_hermite",
    "The native block step of sapporo.nbody.hermite.HermiteIntegrator.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__hermite(void)
{
    PyObject *m;
    if (PyType_Ready(&CoreType) < 0 || (m = PyModule_Create(&hermite_module)) == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "Core", (PyObject *)&CoreType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
