/*
 * _engine.c -- the native block-step engine: module sapporo.core._engine, compiled when the
 * package is installed (setup.py), loaded by sapporo/core/engine.py, used by sapporo.Library.
 *
 * A block step of a Python integrator (a few j-particles stored, a new time, the forces on a
 * few i-particles) spends 50-100 us in Python's checks, bookkeeping and launches around
 * 5-25 us of kernels on a CPU.  Here the same step runs on plans the library made (one per
 * number of i-particles; sapporo/engine.h), the way the C API's direct path runs GRAPE-6 calls:
 *
 *   Engine.put_j(address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5)
 *       j-particles into the host mirror and the device's records: True when stored here;
 *       False when the library must store them its own way (nothing changed);
 *   Engine.compute(x, v, index, eps2, a, jerk, t, predict)
 *       the forces on ni i-particles into the result buffer (nco rows of ni values): ni when
 *       done; 0 when the library must compute them its own way (nothing queued); -1 when
 *       the result is not finite (prediction done, to be diagnosed the library's way); -2
 *       when there is no plan yet for this ni (Engine.set_plan).
 *
 * Only what the library would accept as it is runs here: float64 and int32/int64 arrays of
 * the expected shapes (or Python numbers where the library takes numbers), finite values in
 * range, addresses already stored, derivatives the predictor already reads, masses
 * double-single can hold.  Anything else gets False or 0, and the library's own code gives
 * its usual answer or error.  OpenCL errors raise RuntimeError.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

#include "engine.h"

#define STEP_NI_MAX 256  /* i-particles per compute here */
#define STEP_NJ_MAX 256  /* j-particles per put_j here */
#define STEP_MAX_ID 2147483647LL       /* sapporo.core.library.MAX_ID */
#define STEP_MAX_ADDRESS 2147483646LL  /* sapporo.core.library.MAX_ADDRESS */

typedef struct {
    PyObject_HEAD
    struct dplan *plans;  /* by ni (0 .. STEP_NI_MAX): status 1 usable, -1 the library's way,
                             0 not asked yet */
    int have_j;           /* the j-side below comes from a plan */
    int64_t gen;          /* the device's buffer generation of the plans */
    double *mirror_raw, *dev_raw;
    int64_t *mirror_ids;
    int32_t *dev_ids;
    int raw_n, pred_terms, n_stored, ds, order, nco;
    Py_buffer out;        /* the result rows */
    int have_out;
    double *rec;          /* put_j's records: STEP_NJ_MAX * JB_DOUBLES */
    int address[STEP_NJ_MAX], index[STEP_NJ_MAX];
} Engine;

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

/* 1 when __init__ has run (an Engine made by __new__ alone has no memory to work on). */
static int ready(Engine *self)
{
    if (self->plans != NULL && self->rec != NULL && self->have_out)
        return 1;
    PyErr_SetString(PyExc_RuntimeError, "Engine() was not initialised");
    return 0;
}

/* obj as n integers in [0, hi] into out (n: as given when n < 0, at most STEP_NJ_MAX): a
 * Python int for one, or a 1-D int32/int64 array (its buffer held in s). The count, or 0
 * when obj is not such a value. */
static Py_ssize_t int_values(PyObject *obj, Py_ssize_t n, long long hi, int *out,
                             struct views *s)
{
    long long one;
    int wide;
    const Py_buffer *b;
    if ((n < 0 || n == 1) && small_int(obj, 0, hi, &one)) {
        out[0] = (int)one;
        return 1;
    }
    if ((b = int_view(obj, n, s, &wide)) == NULL)
        return 0;
    n = b->shape[0];
    if (n < 1 || n > STEP_NJ_MAX)
        return 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        long long a = wide ? ((const int64_t *)b->buf)[k] : ((const int32_t *)b->buf)[k];
        if (a < 0 || a > hi)
            return 0;
        out[k] = (int)a;
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

static void Engine_clear_plans(Engine *self)
{
    for (int k = 0; k <= STEP_NI_MAX; k++)
        self->plans[k].status = 0;
    self->have_j = 0;
}

static int Engine_init(Engine *self, PyObject *args, PyObject *kwds)
{
    PyObject *out;
    static char *names[] = {"out", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O", names, &out))
        return -1;
    if ((self->plans == NULL
         && (self->plans = PyMem_Calloc(STEP_NI_MAX + 1, sizeof *self->plans)) == NULL)
        || (self->rec == NULL
            && (self->rec = PyMem_Calloc(STEP_NJ_MAX * JB_DOUBLES, sizeof(double))) == NULL)) {
        PyErr_NoMemory();
        return -1;
    }
    if (self->have_out) {
        PyBuffer_Release(&self->out);
        self->have_out = 0;
    }
    if (PyObject_GetBuffer(out, &self->out, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | PyBUF_WRITABLE)
        < 0)
        return -1;
    self->have_out = 1;
    if (self->out.itemsize != 8 || strcmp(fmt_core(self->out.format), "d") != 0
        || self->out.len < (Py_ssize_t)sizeof(double) * NCO_ORDER8 * STEP_NI_MAX) {
        PyBuffer_Release(&self->out);
        self->have_out = 0;
        PyErr_Format(PyExc_ValueError, "out: a writable float64 buffer of at least %d values",
                     NCO_ORDER8 * STEP_NI_MAX);
        return -1;
    }
    Engine_clear_plans(self);
    return 0;
}

static void Engine_dealloc(Engine *self)
{
    if (self->have_out)
        PyBuffer_Release(&self->out);
    PyMem_Free(self->plans);
    PyMem_Free(self->rec);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* set_plan(ni, words): the plan for ni i-particles (words: plan.h's table, for the
 * block sizes DP_NI_LO .. DP_NI_HI), or None: ni goes the library's way. Returns the
 * highest block size the plan serves here. */
static PyObject *Engine_set_plan(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    long ni;
    Py_buffer w;
    struct dplan p;
    int lo, hi, rc;
    int64_t gen;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "set_plan(ni, words)");
        return NULL;
    }
    if (!ready(self))
        return NULL;
    ni = PyLong_AsLong(args[0]);
    if (ni == -1 && PyErr_Occurred())
        return NULL;
    if (ni < 1 || ni > STEP_NI_MAX) {
        PyErr_Format(PyExc_ValueError, "ni = %ld outside [1, %d]", ni, STEP_NI_MAX);
        return NULL;
    }
    if (args[1] == Py_None) {
        self->plans[ni].status = -1;
        return PyLong_FromLong(ni);
    }
    if (PyObject_GetBuffer(args[1], &w, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (w.len != (Py_ssize_t)sizeof(int64_t) * DP_WORDS) {
        PyBuffer_Release(&w);
        PyErr_Format(PyExc_ValueError, "words: expected %d int64 values", DP_WORDS);
        return NULL;
    }
    {
        const int64_t *words = w.buf;
        gen = words[DP_GEN];
        lo = (int)words[DP_NI_LO];
        hi = (int)words[DP_NI_HI];
        rc = words[DP_STATUS] == 1 && lo <= ni && ni <= hi
             ? plan_unpack(&p, words, (int)words[DP_N_STORED], (int)ni, 0) : -1;
    }
    PyBuffer_Release(&w);
    if (rc < 0 || p.nco > NCO_ORDER8) {
        PyErr_SetString(PyExc_ValueError, "words: not a plan this module understands");
        return NULL;
    }
    if (self->have_j && (gen != self->gen || p.mirror_raw != self->mirror_raw
                         || p.dev_raw != self->dev_raw || p.mirror_ids != self->mirror_ids
                         || p.dev_ids != self->dev_ids
                         || p.n_stored != self->n_stored || p.pred_terms != self->pred_terms
                         || p.raw_n != self->raw_n))
        Engine_clear_plans(self);  /* another state of the library: the old plans are gone */
    self->have_j = 1;
    self->gen = gen;
    self->mirror_raw = p.mirror_raw;
    self->dev_raw = p.dev_raw;
    self->mirror_ids = p.mirror_ids;
    self->dev_ids = p.dev_ids;
    self->raw_n = p.raw_n;
    self->pred_terms = p.pred_terms;
    self->n_stored = p.n_stored;
    self->ds = p.ds;
    self->order = p.order;
    self->nco = p.nco;
    if (hi > STEP_NI_MAX)
        hi = STEP_NI_MAX;
    for (int k = lo < 1 ? 1 : lo; k <= hi; k++) {
        self->plans[k] = p;
        self->plans[k].ni = k;
    }
    return PyLong_FromLong(hi);
}

static PyObject *Engine_clear(Engine *self, PyObject *unused)
{
    (void)unused;
    if (!ready(self))
        return NULL;
    Engine_clear_plans(self);
    Py_RETURN_NONE;
}

/* put_j(address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5) -> bool */
static PyObject *Engine_put_j(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct views s = {.n = 0};
    double *rec = self->rec;
    int *address = self->address, *index = self->index;
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
    if (!self->have_j)
        Py_RETURN_FALSE;
    /* address: an int, or n of them; index: the same number of ids */
    if ((n = int_values(args[0], -1, STEP_MAX_ADDRESS, address, &s)) < 1
        || int_values(args[1], n, STEP_MAX_ID, index, &s) != n)
        goto done;
    /* t and mass: a number for all, or n of them */
    if (!numbers(args[2], n, &s, &t0, &tv) || !numbers(args[3], n, &s, &m0, &mv))
        goto done;
    if ((b = f64_view(args[4], n, 3, &s)) == NULL)
        goto done;
    xv = b->buf;
    if ((b = f64_view(args[5], n, 3, &s)) == NULL)
        goto done;
    vv = b->buf;
    for (int q = 0; q < 6; q++) {
        /* a record the library does not have (pop, d5 below order 8): its error */
        if (args[6 + q] != Py_None && q + 2 >= self->raw_n)
            goto done;
        if (!finite_rows(args[6 + q], n, &s, &dv[q]))
            goto done;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        double *r = rec + (size_t)JB_DOUBLES * k;
        const double *x = xv + 3 * k, *v = vv + 3 * k;
        double t = tv != NULL ? tv[k] : t0, m = mv != NULL ? mv[k] : m0;
        if (!(isfinite(t) && isfinite(m) && finite3(v) && fabs(x[0]) < COORD_LIMIT
              && fabs(x[1]) < COORD_LIMIT && fabs(x[2]) < COORD_LIMIT))
            goto done;
        memset(r, 0, sizeof(double) * JB_DOUBLES);
        memcpy(r, x, sizeof(double) * 3);
        r[3] = m;
        memcpy(r + 4, v, sizeof(double) * 3);
        r[7] = t;
        for (int q = 0; q < 6; q++)
            if (dv[q] != NULL)
                memcpy(r + 4 * (q + 2), dv[q] + 3 * k, sizeof(double) * 3);
    }
    if (!records_ok((int)n, address, rec, self->n_stored, self->raw_n, self->pred_terms,
                    self->ds))
        goto done;
    records_write((int)n, address, index, rec, self->mirror_raw, self->mirror_ids,
                  self->dev_raw, self->dev_ids, self->raw_n);
    ok = 1;
done:
    views_release(&s);
    return PyBool_FromLong(ok);
}

/* compute(x, v, index, eps2, a, jerk, t, predict) -> ni, 0, -1 or -2 (see the top) */
static PyObject *Engine_compute(Engine *self, PyObject *const *args, Py_ssize_t nargs)
{
    struct views s = {.n = 0};
    const Py_buffer *b;
    const double *xv, *vv, *av = NULL, *jv = NULL;
    const void *ids;
    int64_t id1;
    long long one;
    double eps2, t, *out = self->out.buf;
    struct dplan *p;
    Py_ssize_t ni;
    int wide = 1, predict;
    long result = 0;
    dcl_int rc = 0, status = 0;
    void *ev = NULL;
    uint64_t bits;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError, "compute takes 8 arguments");
        return NULL;
    }
    if (!ready(self))
        return NULL;
    t = PyFloat_AsDouble(args[6]);
    predict = PyObject_IsTrue(args[7]);
    if ((t == -1.0 || predict < 0) && PyErr_Occurred())
        return NULL;
    if (!number(args[3], &eps2))
        goto done;
    if ((b = f64_view(args[0], -1, 3, &s)) == NULL)
        goto done;
    ni = b->shape[0];
    xv = b->buf;
    if (ni < 1 || ni > STEP_NI_MAX || (b = f64_view(args[1], ni, 3, &s)) == NULL)
        goto done;
    vv = b->buf;
    if (ni == 1 && small_int(args[2], 0, STEP_MAX_ID, &one)) {
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
    p = &self->plans[ni];
    if (p->status == 0) {
        result = -2;
        goto done;
    }
    if (p->status < 0)
        goto done;
    if (p->order < 6)
        av = NULL;
    if (p->order < 8)
        jv = NULL;
    if (!i_ok(p, (int)ni, ids, wide, xv, vv, av, jv, eps2, NULL))
        goto done;
    if (predict) {
        memcpy(&bits, &t, sizeof bits);
        if ((rc = plan_launch(p, &p->predict, bits, (int)ni, NULL)) != 0)
            goto fail;
        if (p->predict.queue != p->force.queue && (rc = p->finish(p->predict.queue)) != 0)
            goto fail;
    }
    i_pack(p, (int)ni, ids, wide, xv, vv, av, jv, NULL, 0);
    memcpy(&bits, &eps2, sizeof bits);
    if ((rc = plan_launch(p, &p->force, bits, (int)ni, &ev)) != 0)
        goto fail;
    if ((rc = plan_wait(p, p->force.queue, ev, &status)) != 0)
        goto fail;
    result = (long)ni;
    for (Py_ssize_t i = 0; i < ni; i++) {
        double v[NCO_ORDER8];
        if (!result_row(p, (int)i, v)) {
            result = -1;
            break;
        }
        for (int r = 0; r < p->nco; r++)
            out[(size_t)r * (size_t)ni + (size_t)i] = v[r];
    }
done:
    views_release(&s);
    return PyLong_FromLong(result);
fail:
    views_release(&s);
    PyErr_Format(PyExc_RuntimeError, "OpenCL error %d in a block step (status %d)", (int)rc,
                 (int)status);
    return NULL;
}

static PyMethodDef Engine_methods[] = {
    {"set_plan", (PyCFunction)(void (*)(void))Engine_set_plan, METH_FASTCALL,
     "set_plan(ni, words): a plan for ni i-particles (or None: the library's way)"},
    {"clear", (PyCFunction)Engine_clear, METH_NOARGS, "forget every plan"},
    {"put_j", (PyCFunction)(void (*)(void))Engine_put_j, METH_FASTCALL,
     "put_j(address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5) -> bool"},
    {"compute", (PyCFunction)(void (*)(void))Engine_compute, METH_FASTCALL,
     "compute(x, v, index, eps2, a, jerk, t, predict) -> ni, 0, -1 or -2"},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EngineType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "sapporo.core._engine.Engine",
    .tp_doc = "Block steps of one library, run in C on plans the library made.",
    .tp_basicsize = sizeof(Engine),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Engine_init,
    .tp_dealloc = (destructor)Engine_dealloc,
    .tp_methods = Engine_methods,
};

static struct PyModuleDef engine_module = {
    PyModuleDef_HEAD_INIT, "sapporo.core._engine",
    "The native block-step engine (see sapporo/core/engine.py).", -1, NULL, NULL, NULL, NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__engine(void)
{
    PyObject *m;
    if (PyType_Ready(&EngineType) < 0)
        return NULL;
    if ((m = PyModule_Create(&engine_module)) == NULL)
        return NULL;
    Py_INCREF(&EngineType);
    if (PyModule_AddObject(m, "Engine", (PyObject *)&EngineType) < 0
        || PyModule_AddIntConstant(m, "NI_MAX", STEP_NI_MAX) < 0
        || PyModule_AddIntConstant(m, "NJ_MAX", STEP_NJ_MAX) < 0
        || PyModule_AddIntConstant(m, "NCO_MAX", NCO_ORDER8) < 0) {
        Py_DECREF(&EngineType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
