/*
 * _engine.c -- the native engine, the one executor of force calls: module
 * sapporo.core._engine, compiled when the package is installed (setup.py), loaded by
 * sapporo/core/engine.py.
 *
 * A force call (a few j-particles stored, a new time, the forces on a block of
 * i-particles) runs here in C on plans the library made (one per entry of each device's
 * launch table, made by sapporo.core.library.Library._plans when the engine asks its
 * planner, and shaped for each call by sapporo/core/plan.c): j-particles
 * written into the library's mirror and the device's records, the prediction, force and
 * reduce kernels queued through the runtime's entry points (OpenCL's, or CUDA's driver
 * API), the parts combined in one fixed order (the reduce kernel's), the results into the
 * caller's rows.
 *
 * A library with several devices gets one plan per device for each shape (a block of plans,
 * plan.h): each device's records (address a on device a % ndev at local address a / ndev),
 * prediction, force and reduce are its own, every device's launches are queued before any
 * is waited for, and the devices' rows are combined on the host (each device's parts, then
 * the devices' rows in the same order; struct edev).
 *
 * One engine per library holds all of this native state: the plans, the generations of
 * the memory they point at, the prediction, the call in flight, the last neighbour lists.
 * The Python API uses it through the Engine type below; the C API and the integrator's
 * core through the function table of sapporo/engine_api.h (the capsule C_API).  Every
 * call is computed here or refused with an error code and a message (engine_api.h); the
 * library's Python is asked only for memory and plans (eng_ask).  The Engine type takes
 * float64 and int arrays as they are; other types, and values out of range, it leaves to
 * the library, which converts them or names the error in its words, and calls again.
 */
#include "engine.h"

#include <structmember.h>
#include <stdio.h>
#include <string.h>

#define ENG_NJ_KEEP 256   /* put_j's buffers from Python are kept up to this many records */

/* ------------------------------------------------ arguments from Python, as the library takes them */

/* Whether a buffer format is one float64 (native, little-endian here) or one integer. */
static const char *fmt_core(const char *f)
{
    if (f == NULL)
        return "B";
    if (*f == '@' || *f == '=' || (*f == '<' && PY_LITTLE_ENDIAN))
        f++;
    return f;
}

/* The buffers a call holds, released together (at most 12: put_j's arguments). */
struct views {
    Py_buffer v[12];
    int n;
};

/* obj's C-contiguous buffer, in the next slot of s but not yet kept (view_keep), or NULL:
 * not such a buffer (numbers, text and None never are; no exception set). */
static Py_buffer *view_try(PyObject *obj, struct views *s)
{
    Py_buffer *v = &s->v[s->n];
    if (obj == Py_None || PyFloat_Check(obj) || PyLong_Check(obj) || PyUnicode_Check(obj))
        return NULL;
    if (PyObject_GetBuffer(obj, v, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyErr_Clear();
        return NULL;
    }
    return v;
}

/* v kept in s when ok (returned), else released (NULL). */
static const Py_buffer *view_keep(struct views *s, Py_buffer *v, int ok)
{
    if (!ok) {
        PyBuffer_Release(v);
        return NULL;
    }
    s->n++;
    return v;
}

/* obj as a C-contiguous float64 buffer of rows x cols (cols 0: 1-D; rows < 0: any number),
 * kept in s; NULL when it is not one. */
static const Py_buffer *f64_view(PyObject *obj, Py_ssize_t rows, int cols, struct views *s)
{
    Py_buffer *v = view_try(obj, s);
    if (v == NULL)
        return NULL;
    return view_keep(s, v, v->itemsize == 8 && strcmp(fmt_core(v->format), "d") == 0
                               && v->ndim == (cols ? 2 : 1)
                               && (rows < 0 || v->shape[0] == rows)
                               && (!cols || v->shape[1] == cols));
}

/* obj as a 1-D C-contiguous buffer of n signed integers (int32 or int64; n < 0: any
 * number), kept in s with *wide set; NULL when it is not one. */
static const Py_buffer *int_view(PyObject *obj, Py_ssize_t n, struct views *s, int *wide)
{
    const char *f;
    Py_buffer *v = view_try(obj, s);
    if (v == NULL)
        return NULL;
    f = fmt_core(v->format);
    *wide = v->itemsize == 8 && (strcmp(f, "l") == 0 || strcmp(f, "q") == 0);
    return view_keep(s, v, (*wide || (v->itemsize == 4 && (strcmp(f, "i") == 0
                                                          || strcmp(f, "l") == 0)))
                               && v->ndim == 1 && (n < 0 || v->shape[0] == n));
}

/* A Python int (not a bool) in [lo, hi]: 1 with *out set, 0 otherwise. */
static int small_int(PyObject *obj, long long lo, long long hi, long long *out)
{
    int overflow = 0;
    long long x;
    if (!PyLong_CheckExact(obj))
        return 0;
    x = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (x == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    if (x < lo || x > hi)
        return 0;
    *out = x;
    return 1;
}

/* A Python float (numpy's float64 too) or int (not a bool, within int64) as a double: 1
 * with *out set, 0 otherwise (the library takes both as numbers). */
static int number(PyObject *obj, double *out)
{
    if (PyFloat_Check(obj)) {
        *out = PyFloat_AS_DOUBLE(obj);
        return 1;
    }
    if (PyLong_CheckExact(obj)) {  /* in int64's range, as numpy converts it */
        int overflow = 0;
        long long x = PyLong_AsLongLongAndOverflow(obj, &overflow);
        if (overflow || (x == -1 && PyErr_Occurred())) {
            PyErr_Clear();
            return 0;
        }
        *out = (double)x;
        return 1;
    }
    return 0;
}

static void views_release(struct views *s)
{
    for (int k = 0; k < s->n; k++)
        PyBuffer_Release(&s->v[k]);
    s->n = 0;
}

/* obj as one number for all n values (*all set, *each NULL), or n float64 values (*each,
 * kept in s): 1, or 0 when it is neither. */
static int numbers(PyObject *obj, Py_ssize_t n, struct views *s, double *all,
                   const double **each)
{
    const Py_buffer *b;
    *each = NULL;
    if (number(obj, all))
        return 1;
    if ((b = f64_view(obj, n, 0, s)) == NULL)
        return 0;
    *each = b->buf;
    return 1;
}

/* Room for n records in put_j's buffers (eng_put_room): 0, or -1 with MemoryError. */
static int put_room(Engine *e, Py_ssize_t n)
{
    if (eng_put_room(e, (size_t)n) < 0) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

/* put_j's buffers back to nothing after a batch larger than ENG_NJ_KEEP (an initial upload
 * of every particle needs them once). */
static void put_shrink(Engine *e)
{
    if (e->put_cap <= ENG_NJ_KEEP)
        return;
    PyMem_RawFree(e->rec);
    PyMem_RawFree(e->address);
    PyMem_RawFree(e->index);
    e->rec = NULL;
    e->address = e->index = NULL;
    e->put_cap = 0;
}

/* obj as n integers in [0, hi] (n: as given when n < 0) into the engine's buffer *out, made
 * room for: a Python int for one, or a 1-D int32/int64 array (its buffer held in s). The
 * count; 0 when obj is not such a value; -1 with MemoryError. */
static Py_ssize_t int_values(PyObject *obj, Py_ssize_t n, long long hi, Engine *e, int **out,
                             struct views *s)
{
    long long one;
    int wide;
    const Py_buffer *b;
    if ((n < 0 || n == 1) && small_int(obj, 0, hi, &one)) {
        if (put_room(e, 1) < 0)
            return -1;
        (*out)[0] = (int)one;
        return 1;
    }
    if ((b = int_view(obj, n, s, &wide)) == NULL)
        return 0;
    n = b->shape[0];
    if (n < 1 || n > INT_MAX / JB_DOUBLES)
        return 0;
    if (put_room(e, n) < 0)
        return -1;
    for (Py_ssize_t k = 0; k < n; k++) {
        long long a = wide ? ((const int64_t *)b->buf)[k] : ((const int32_t *)b->buf)[k];
        if (a < 0 || a > hi)
            return 0;
        (*out)[k] = (int)a;
    }
    return n;
}

/* obj as None (*out NULL) or n finite rows of 3 float64 (its buffer held in s): 1, or 0 when
 * it is neither. */
static int finite_rows(PyObject *obj, Py_ssize_t n, struct views *s, const double **out)
{
    *out = NULL;
    if (obj == Py_None)
        return 1;
    const Py_buffer *b = f64_view(obj, n, 3, s);
    if (b == NULL)
        return 0;
    *out = b->buf;
    for (Py_ssize_t i = 0; i < n; i++)
        if (!finite3(*out + 3 * i))
            return 0;
    return 1;
}

/* ------------------------------------------------------------------- the Python methods */

/* 1 when __init__ has run (an Engine made by __new__ alone has no memory to work on). */
static int ready(Engine *self)
{
    if (self->ready)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "Engine() was not initialised");
    return 0;
}

static int Engine_init(Engine *self, PyObject *args, PyObject *kwds)
{
    PyObject *out, *planner;
    int ndev = 1;
    static char *names[] = {"out", "planner", "ndev", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO|i", names, &out, &planner, &ndev))
        return -1;
    if (self->ready) {  /* its plans and rows are in use */
        PyErr_SetString(PyExc_RuntimeError, "Engine is initialised once");
        return -1;
    }
    if (!PyCallable_Check(planner)) {
        PyErr_SetString(PyExc_TypeError, "planner: a callable planner(lists)");
        return -1;
    }
    if (ndev < 1 || ndev > ENG_MAX_DEV) {
        PyErr_Format(PyExc_ValueError, "ndev: %d devices (1 to %d)", ndev, ENG_MAX_DEV);
        return -1;
    }
    if (put_room(self, ENG_NJ_KEEP) < 0)
        return -1;
    if (PyObject_GetBuffer(out, &self->out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        < 0)
        return -1;
    self->have_out = 1;
    if (self->out.itemsize != 8 || strcmp(fmt_core(self->out.format), "d") != 0
        || self->out.len < (Py_ssize_t)sizeof(double) * NCO_ORDER8 * ENG_NI_MAX) {
        PyBuffer_Release(&self->out);
        self->have_out = 0;
        PyErr_Format(PyExc_ValueError, "out: a writable float64 buffer of at least %d values",
                     NCO_ORDER8 * ENG_NI_MAX);
        return -1;
    }
    Py_INCREF(planner);
    Py_XSETREF(self->planner, planner);
    self->ndev = ndev;  /* plan blocks of ndev plans (none yet: the object starts zeroed) */
    self->ready = 1;
    return 0;
}

static void Engine_dealloc(Engine *self)
{
    if (self->ready)
        eng_wait(self);
    twin_free(self);
    if (self->have_out)
        PyBuffer_Release(&self->out);
    Py_CLEAR(self->planner);
    PyMem_RawFree(self->tpl[0]);
    PyMem_RawFree(self->tpl[1]);
    PyMem_RawFree(self->nb_offsets);
    PyMem_RawFree(self->nb_counts);
    PyMem_RawFree(self->nb_ids);
    PyMem_RawFree(self->rec);
    PyMem_RawFree(self->address);
    PyMem_RawFree(self->index);
    PyMem_RawFree(self->run_ids);
    PyMem_RawFree(self->run_raw);
    PyMem_RawFree(self->g_map);
    PyMem_RawFree(self->g_id);
    PyMem_RawFree(self->g_jr);
    PyMem_RawFree(self->g_x);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The engine's errors in Python: Error(message, code), code as engine_api.h's ENG_ERR_* */
static PyObject *EngineError;

static PyObject *raise_error(Engine *self)
{
    PyObject *v = Py_BuildValue("(si)", self->error, self->code);
    if (v != NULL) {
        PyErr_SetObject(EngineError, v);
        Py_DECREF(v);
    }
    return NULL;
}

static PyObject *Engine_set_time(Engine *self, PyObject *arg)
{
    double t = PyFloat_AsDouble(arg);
    if ((t == -1.0 && PyErr_Occurred()) || !ready(self))
        return NULL;
    self->time = t;
    Py_RETURN_NONE;
}

static PyObject *Engine_reset(Engine *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    self->code = ENG_ERR_BACKEND;
    if (eng_reset(self) < 0)
        return raise_error(self);
    Py_RETURN_NONE;
}

static PyObject *Engine_wait(Engine *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    self->code = ENG_ERR_BACKEND;
    if (eng_wait(self) < 0)
        return raise_error(self);
    Py_RETURN_NONE;
}

static PyObject *Engine_disable(Engine *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    eng_wait(self);
    self->off = 1;
    eng_clear_plans(self);
    Py_RETURN_NONE;
}

/* A Python method's result for rc (eng_*_rc's): the value, False (0) for an argument the
 * library names in its words (ENG_ERR_INPUT, or types the engine does not take: rc 0), or
 * NULL with Error raised. */
static int py_rc(Engine *self, int rc)
{
    if (rc < 0 && self->code != ENG_ERR_INPUT) {
        raise_error(self);
        return -1;
    }
    return rc < 0 ? 0 : rc;
}

/* put_j(address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5) -> bool: stored, or
 * False (nothing stored): types the engine does not take (lists, other dtypes), or an
 * argument the library names (the message in error) */
static PyObject *Engine_put_j(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct views s = {.n = 0};
    double *rec;
    const double *tv, *mv, *xv, *vv, *dv[6];
    const Py_buffer *b;
    double t0 = 0.0, m0 = 0.0;
    Py_ssize_t n;
    int ok = 0;
    if (nargs != 12) {
        PyErr_SetString(PyExc_TypeError, "put_j takes 12 arguments");
        return NULL;
    }
    if (!ready(self))
        return NULL;
    snprintf(self->error, sizeof self->error, "arguments of types the engine does not take");
    /* address: an int, or n of them; index: the same number of ids */
    if ((n = int_values(args[0], -1, (long long)LIMIT_MAX_ADDRESS, self, &self->address, &s))
        < 1 || int_values(args[1], n, (long long)LIMIT_MAX_ID, self, &self->index, &s) != n) {
        ok = PyErr_Occurred() ? -2 : 0;
        goto done;
    }
    rec = self->rec;
    /* t and mass: a number for all, or n of them */
    if (!numbers(args[2], n, &s, &t0, &tv) || !numbers(args[3], n, &s, &m0, &mv))
        goto done;
    if ((b = f64_view(args[4], n, 3, &s)) == NULL)
        goto done;
    xv = b->buf;
    if ((b = f64_view(args[5], n, 3, &s)) == NULL)
        goto done;
    vv = b->buf;
    self->code = ENG_ERR_BACKEND;
    if ((args[10] != Py_None || args[11] != Py_None) && !self->have_j
        && eng_ask(self, 0, 0, 0) < 0) {  /* pop, d5: the library's order tells */
        ok = py_rc(self, -1);
        goto done;
    }
    for (int q = 0; q < 6; q++) {
        dv[q] = NULL;
        if (args[6 + q] == Py_None)
            continue;
        if ((q >= 4 && q + 2 >= self->dev[0].jside.raw_n)  /* pop, d5 below order 8 */
            || (b = f64_view(args[6 + q], n, 3, &s)) == NULL)
            goto done;
        dv[q] = b->buf;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        const double *d[6];
        for (int q = 0; q < 6; q++)
            d[q] = dv[q] == NULL ? NULL : dv[q] + 3 * k;
        put_record(rec + (size_t)JB_DOUBLES * k, JB_RECORDS, xv + 3 * k,
                   mv != NULL ? mv[k] : m0, vv + 3 * k, tv != NULL ? tv[k] : t0, d, NULL);
    }
    ok = py_rc(self, eng_put_j_rc(self, (int)n, self->address, self->index, rec, JB_RECORDS));
done:
    views_release(&s);
    put_shrink(self);
    if (ok < 0)
        return NULL;
    return PyBool_FromLong(ok);
}

/* The arguments of start and compute, (x, v, index, eps2, a, jerk, nj, h2), started:
 * 1 (*ni set), 0 when the library is to convert or name them (nothing queued; the message
 * in error), -1 with an exception set.  h2: None, or (ni,) float64 radii (wants_list); all
 * 0: no lists computed, and lists() says None (the caller's lists are all empty). */
static int start_args(Engine *self, PyObject *const *args, Py_ssize_t nargs, const char *name,
                      Py_ssize_t *ni_out)
{
    struct views s = {.n = 0};
    const Py_buffer *b;
    const double *xv, *vv, *av = NULL, *jv = NULL, *h2 = NULL;
    const void *ids;
    int64_t id1;
    long long one;
    double eps2;
    long nj;
    Py_ssize_t ni;
    int wide = 1, rc = 0;
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "%s takes 8 arguments", name);
        return -1;
    }
    if (!ready(self))
        return -1;
    nj = PyLong_AsLong(args[6]);
    if (nj == -1 && PyErr_Occurred())
        return -1;
    snprintf(self->error, sizeof self->error, "arguments of types the engine does not take");
    if (nj < 0 || nj > (long long)LIMIT_MAX_ADDRESS || !number(args[3], &eps2))
        goto done;
    if ((b = f64_view(args[0], -1, 3, &s)) == NULL)
        goto done;
    ni = b->shape[0];
    xv = b->buf;
    if (ni < 1 || ni > ENG_NI_MAX || (b = f64_view(args[1], ni, 3, &s)) == NULL)
        goto done;
    vv = b->buf;
    if (ni == 1 && small_int(args[2], 0, (long long)LIMIT_MAX_ID, &one)) {
        id1 = one;
        ids = &id1;
    }
    else if ((b = int_view(args[2], ni, &s, &wide)) != NULL)
        ids = b->buf;
    else
        goto done;
    /* a and jerk: checked when given, as the library does, used by orders 6 and 8 */
    if (!finite_rows(args[4], ni, &s, &av) || !finite_rows(args[5], ni, &s, &jv))
        goto done;
    if (args[7] != Py_None) {
        int any = 0;
        if ((b = f64_view(args[7], ni, 0, &s)) == NULL)
            goto done;
        h2 = b->buf;
        for (Py_ssize_t i = 0; i < ni; i++) {
            if (!(isfinite(h2[i]) && h2[i] >= 0.0))
                goto done;
            any |= h2[i] > 0.0;
        }
        if (!any)  /* lists asked for, none wanted: every list empty (the caller's) */
            h2 = NULL;
    }
    rc = py_rc(self, eng_start_ids(self, (int)nj, (int)ni, ids, wide, xv, vv, av, jv, eps2,
                                   h2, NULL));
    *ni_out = ni;
done:
    views_release(&s);
    return rc;
}

/* The started call's rows into out: ni; NULL with Error raised (a force that is not finite:
 * ENG_ERR_NONFINITE, the rows written). */
static PyObject *finish_rows(Engine *self, Py_ssize_t ni)
{
    if (eng_finish_rc(self, (int)ni, self->out.buf) < 0)
        return raise_error(self);
    return PyLong_FromSsize_t(ni);
}

/* start(x, v, index, eps2, a, jerk, nj, h2) -> ni when started, 0 when the library is to
 * convert or name the arguments (nothing queued) */
static PyObject *Engine_start(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t ni = 0;
    int rc = start_args(self, args, nargs, "start", &ni);
    if (rc < 0)
        return NULL;
    return PyLong_FromSsize_t(rc > 0 ? ni : 0);
}

/* finish(ni) -> ni when done (rows in out) */
static PyObject *Engine_finish(Engine *self, PyObject *arg)
{
    long ni = PyLong_AsLong(arg);
    if (ni == -1 && PyErr_Occurred())
        return NULL;
    if (!ready(self))
        return NULL;
    return finish_rows(self, ni);
}

/* compute(x, v, index, eps2, a, jerk, nj, h2) -> start and finish: ni when done (rows in
 * out), 0 when the library is to convert or name the arguments (nothing queued) */
static PyObject *Engine_compute(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t ni = 0;
    int rc = start_args(self, args, nargs, "compute", &ni);
    if (rc < 0)
        return NULL;
    if (rc == 0)
        return PyLong_FromLong(0);
    return finish_rows(self, ni);
}

/* lists() -> (offsets, counts, ids) of the last finished call's neighbour lists as bytes of
 * C ints (CSR, ids ascending, at most the capacity per particle, counts whole), or None */
/* lists(counts, table) -> bool: the last finished call's neighbour lists into counts
 * ((ni,) int64: each full count) and table ((ni, width) int32: the ids, ascending, at most
 * width of them, then -1); without lists (none asked for, or every h2 zero) counts 0 and
 * every entry -1, and False */
static PyObject *Engine_lists(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer c, t;
    int ni = 0, have;
    const int *offsets = NULL, *counts = NULL, *ids = NULL;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "lists takes 2 arguments (counts, table)");
        return NULL;
    }
    if (!ready(self))
        return NULL;
    if (PyObject_GetBuffer(args[0], &c, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &t, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        < 0) {
        PyBuffer_Release(&c);
        return NULL;
    }
    have = eng_lists(self, &ni, &offsets, &counts, &ids);
    if (c.ndim != 1 || c.itemsize != 8
        || (strcmp(fmt_core(c.format), "l") != 0 && strcmp(fmt_core(c.format), "q") != 0)
        || t.ndim != 2 || t.itemsize != 4 || strcmp(fmt_core(t.format), "i") != 0
        || t.shape[0] != c.shape[0] || t.shape[1] < 1 || (have && c.shape[0] != ni)) {
        PyBuffer_Release(&c);
        PyBuffer_Release(&t);
        PyErr_Format(PyExc_ValueError, "lists: counts (ni,) int64 and table (ni, width) int32 "
                     "for the %d i-particles of the last call", have ? ni : -1);
        return NULL;
    }
    {
        int64_t *co = c.buf;
        int32_t *ta = t.buf;
        const Py_ssize_t n = c.shape[0], w = t.shape[1];
        for (Py_ssize_t i = 0; i < n; i++) {
            const Py_ssize_t k = have ? offsets[i + 1] - offsets[i] : 0;
            const Py_ssize_t m = k < w ? k : w;
            co[i] = have ? counts[i] : 0;
            for (Py_ssize_t q = 0; q < m; q++)
                ta[i * w + q] = ids[offsets[i] + q];
            for (Py_ssize_t q = m; q < w; q++)
                ta[i * w + q] = -1;
        }
    }
    PyBuffer_Release(&c);
    PyBuffer_Release(&t);
    return PyBool_FromLong(have);
}

/* The engine as C code takes it: a capsule of its address (the C API and the integrator's
 * core get it so, never from id()); it does not keep the engine alive. */
static PyObject *Engine_handle(Engine *self, void *closure)
{
    (void)closure;
    if (!ready(self))
        return NULL;
    return PyCapsule_New(self, "sapporo.core._engine.Engine", NULL);
}

static PyObject *Engine_get_ran(Engine *self, void *closure)
{
    (void)closure;
    return PyBool_FromLong(self->ran);
}

static int Engine_set_ran(Engine *self, PyObject *value, void *closure)
{
    (void)closure;
    int v = value == NULL ? 0 : PyObject_IsTrue(value);
    if (v < 0)
        return -1;
    self->ran = v;
    return 0;
}

static PyMemberDef Engine_members[] = {
    {"launches", T_LONG, offsetof(Engine, launches), READONLY,
     "kernels the engine queued, over its life"},
    {"off", T_INT, offsetof(Engine, off), READONLY,
     "1 when the engine takes no call any more"},
    {"planner_calls", T_LONG, offsetof(Engine, planner_calls), READONLY,
     "times the engine asked the library for plans, over its life"},
    {NULL, 0, 0, 0, NULL},
};

static PyObject *Engine_get_error(Engine *self, void *closure)
{
    (void)closure;
    return PyUnicode_FromString(self->error);
}

static PyGetSetDef Engine_getset[] = {
    {"error", (getter)Engine_get_error, NULL,
     "the message of the last error, or why the last call returned False or 0", NULL},
    {"handle", (getter)Engine_handle, NULL,
     "the engine for C code (the functions of the capsule C_API): a capsule named "
     "sapporo.core._engine.Engine, valid while this object lives", NULL},
    {"ran", (getter)Engine_get_ran, (setter)Engine_set_ran,
     "whether the engine queued kernels since this was last cleared", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

/* combine(parts, out): partial results (nparts, nrows, n) float64, rows as layout.h's (and
 * any more after them, summed) combined into out (nrows, n) as the engine combines the
 * parts of a force call and its devices (lanes_sum, nearest): the MPI layer's ranks. */
static PyObject *engine_combine(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_buffer in, out;
    Py_ssize_t nparts = 0, nrows = 0, n = 0;
    int ok;
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "combine takes 2 arguments");
        return NULL;
    }
    if (PyObject_GetBuffer(args[0], &in, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return NULL;
    if (PyObject_GetBuffer(args[1], &out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    if (in.ndim == 3) {
        nparts = in.shape[0];
        nrows = in.shape[1];
        n = in.shape[2];
    }
    ok = in.ndim == 3 && nparts >= 1 && nrows > OC_NNID && nrows <= 64 && out.ndim == 2
         && out.shape[0] == nrows && out.shape[1] == n && in.itemsize == 8
         && out.itemsize == 8 && strcmp(fmt_core(in.format), "d") == 0
         && strcmp(fmt_core(out.format), "d") == 0 && nparts <= INT_MAX;
    if (!ok)
        PyErr_SetString(PyExc_TypeError, "combine: parts must be (nparts >= 1, nrows, n) and "
                        "out (nrows, n), float64, with the rows of layout.h (at most 64)");
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        const double *x = (const double *)in.buf + i;
        const size_t stride = (size_t)nrows * (size_t)n;
        double v[64];
        for (Py_ssize_t r = 0; r < nrows; r++)
            v[r] = lanes_sum(x + (size_t)r * (size_t)n, stride, (int)nparts);
        nearest(x + (size_t)OC_NNID * (size_t)n, x + (size_t)OC_NNR2 * (size_t)n, stride,
                (int)nparts, v);
        for (Py_ssize_t r = 0; r < nrows; r++)
            ((double *)out.buf)[(size_t)r * (size_t)n + (size_t)i] = v[r];
    }
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    if (!ok)
        return NULL;
    Py_RETURN_NONE;
}

/* split(i_per_group, j_align, min_jchunk, target, ni_pad, nj) -> (nparts, jchunk): the
 * j-range of a force launch cut into parts, as the engine cuts it (plan_split) */
static PyObject *engine_split(PyObject *module, PyObject *args)
{
    int ipg, align, min_jchunk, target, ni_pad, nj, nparts, jchunk;
    (void)module;
    if (!PyArg_ParseTuple(args, "iiiiii", &ipg, &align, &min_jchunk, &target, &ni_pad, &nj))
        return NULL;
    if (ipg < 1 || align < 1 || target < 1 || ni_pad < 1 || nj < 0) {
        PyErr_SetString(PyExc_ValueError, "split: sizes must be positive (nj >= 0)");
        return NULL;
    }
    plan_split(ipg, align, min_jchunk, target, ni_pad, nj, &nparts, &jchunk);
    return Py_BuildValue("ii", nparts, jchunk);
}

static PyMethodDef module_methods[] = {
    {"split", engine_split, METH_VARARGS,
     "split(i_per_group, j_align, min_jchunk, target, ni_pad, nj) -> (nparts, jchunk)"},
    {"combine", (PyCFunction)(void (*)(void))engine_combine, METH_FASTCALL,
     "combine(parts, out): (nparts, nrows, n) partial results combined into out (nrows, n)"},
    {NULL, NULL, 0, NULL},
};

/* shape(nj, ni, lists) -> per device (small, twin, twin_predicts, ni_pad, parts, jchunk,
 * reduce) of the launches a force call of this shape would make (its plans made if need
 * be; twin: its second part on the companion's twin, twin_predicts: which predicts the
 * records of that part, where a prediction runs), or None when the engine would not take
 * it */
static PyObject *Engine_shape(Engine *self, PyObject *args)
{
    int nj, ni, lists;
    struct dplan *call;
    PyObject *out = NULL;
    if (!PyArg_ParseTuple(args, "iip", &nj, &ni, &lists) || !ready(self))
        return NULL;
    if (nj < 1 || ni < 1 || self->off)
        Py_RETURN_NONE;
    if ((call = PyMem_RawMalloc(sizeof *call * (size_t)self->ndev)) == NULL)
        return PyErr_NoMemory();
    if ((!self->have_j && eng_ask(self, lists, 0, 0) < 0) || nj > *self->dev[0].jside.n_stored_at
        || eng_plan(self, nj, ni, lists, call) < 0) {
        PyMem_RawFree(call);
        if (self->off)
            return raise_error(self);
        Py_RETURN_NONE;
    }
    if ((out = PyList_New(self->ndev)) != NULL)
        for (int d = 0; d < self->ndev; d++) {
            const struct dplan *p = &call[d];
            int32_t jchunk;
            memcpy(&jchunk, &p->force.arg_value[FA_JCHUNK], sizeof jchunk);
            PyList_SET_ITEM(out, d, Py_BuildValue(
                "{s:O,s:O,s:O,s:i,s:i,s:i,s:O}", "small", p->small ? Py_True : Py_False,
                "twin", p->split ? Py_True : Py_False,
                "twin_predicts", p->split && p->twin_predict.kernel != NULL ? Py_True : Py_False,
                "ni_pad", p->ni_pad,
                "parts", (int)(p->force.global[1] / (size_t)p->lj) + p->split,
                "jchunk", (int)jchunk, "reduce", p->reduce.kernel != NULL ? Py_True : Py_False));
        }
    PyMem_RawFree(call);
    return out;
}

static PyMethodDef Engine_methods[] = {
    {"shape", (PyCFunction)Engine_shape, METH_VARARGS,
     "shape(nj, ni, lists) -> [{small, twin, twin_predicts, ni_pad, parts, jchunk, reduce} "
     "per device] or None"},
    {"put_j", (PyCFunction)(void (*)(void))Engine_put_j, METH_FASTCALL,
     "put_j(address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5) -> bool"},
    {"compute", (PyCFunction)(void (*)(void))Engine_compute, METH_FASTCALL,
     "compute(x, v, index, eps2, a, jerk, nj, h2) -> ni or 0"},
    {"start", (PyCFunction)(void (*)(void))Engine_start, METH_FASTCALL,
     "start(x, v, index, eps2, a, jerk, nj, h2) -> ni or 0"},
    {"finish", (PyCFunction)Engine_finish, METH_O, "finish(ni) -> ni"},
    {"lists", (PyCFunction)(void (*)(void))Engine_lists, METH_FASTCALL,
     "lists(counts, table) -> bool: the last call's neighbour lists into the arrays"},
    {"wait", (PyCFunction)Engine_wait, METH_NOARGS, "wait for the force call in flight"},
    {"set_time", (PyCFunction)Engine_set_time, METH_O,
     "set_time(t): the time the j-particles are predicted to at the next force calls"},
    {"reset", (PyCFunction)Engine_reset, METH_NOARGS,
     "forget every j-particle (the records in use zero, no address in use)"},
    {"disable", (PyCFunction)Engine_disable, METH_NOARGS,
     "take no call from now on"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sapporo.core._engine.Engine",
    .tp_doc = "Engine(out, planner, ndev=1): block steps of one library on ndev devices, run "
              "in C on the plans its planner(lists, top, terms) makes.",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
    .tp_members = Engine_members,
    .tp_getset = Engine_getset,
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "sapporo.core._engine",
    "The native block-step engine (see sapporo/core/engine.py).", -1, module_methods, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    PyObject *m, *api;
    if (PyType_Ready(&EngineType) < 0)
        return NULL;
    if (EngineError == NULL
        && (EngineError = PyErr_NewExceptionWithDoc(
                "sapporo.core._engine.Error", "An engine's error: Error(message, code), code "
                "as engine_api.h's ENG_ERR_*.", PyExc_RuntimeError, NULL)) == NULL)
        return NULL;
    if ((m = PyModule_Create(&engine_module)) == NULL)
        return NULL;
    api = PyCapsule_New((void *)&engine_api, "sapporo.core._engine.C_API", NULL);
    Py_INCREF(&EngineType);
    if (api == NULL || PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0
        || PyModule_AddObject(m, "C_API", api) < 0
        || PyModule_AddObjectRef(m, "Error", EngineError) < 0
        || PyModule_AddIntConstant(m, "NI_MAX", ENG_NI_MAX) < 0
        || PyModule_AddIntConstant(m, "MAX_DEV", ENG_MAX_DEV) < 0
        || PyModule_AddIntConstant(m, "ERR_INPUT", ENG_ERR_INPUT) < 0
        || PyModule_AddIntConstant(m, "ERR_BACKEND", ENG_ERR_BACKEND) < 0
        || PyModule_AddIntConstant(m, "ERR_NONFINITE", ENG_ERR_NONFINITE) < 0

        || PyModule_AddIntConstant(m, "NCO_MAX", NCO_ORDER8) < 0) {
        Py_XDECREF(api);
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
