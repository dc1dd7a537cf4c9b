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
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "engine.h"
#include "engine_api.h"

#define ENG_NJ_KEEP 256   /* put_j's buffers from Python are kept up to this many records */
#define ENG_MAX_DEV 16    /* devices of one library (more: refused) */
/* the engines' calls into Python (their libraries' planners), over the process */
static long python_calls;
/* timed launches (profiling) between two waits: at most a scatter, or a prediction, a force
 * and a reduce per device (every store of a batch and every force call waits for the
 * previous one) */
#define ENG_TIMED_MAX (4 * ENG_MAX_DEV)

/* ---------------------------------------------- the runtime: OpenCL or CUDA's driver API */

static int is_cuda(const struct dplan *p)
{
    return p->cu_launch != NULL;
}

/* CUDA: the plan's context current on this thread around one call of the driver (the
 * caller's own current context, PyCUDA's or none, is back afterwards). */
#define CU_CALL(p, rc, call)                                                                  \
    do {                                                                                     \
        void *prev_;                                                                         \
        (rc) = (p)->cu_push((p)->cu_context);                                                \
        if ((rc) == 0) {                                                                     \
            (rc) = (call);                                                                   \
            (p)->cu_pop(&prev_);                                                             \
        }                                                                                    \
    } while (0)

/* Argument k of a launch as its 64-bit word: call_value at the call argument, ni at the ni
 * argument, else the prepared value (the argument is the word's first arg_size bytes). */
static uint64_t arg_word(const struct dlaunch *l, int k, uint64_t call_value, int ni)
{
    uint64_t v = k == l->call_arg ? call_value : l->arg_value[k];
    if (k == l->ni_arg) {
        int32_t n32 = ni;
        v = 0;
        memcpy(&v, &n32, sizeof n32);
    }
    return v;
}

/* Queue a launch with its arguments (call_value at its call argument, ni at its ni
 * argument); the runtime's error code (0: queued). OpenCL: event (may be NULL) receives
 * the launch's event; CUDA has none (*event stays NULL: the stream is waited for). */
static dcl_int plan_launch(const struct dplan *p, const struct dlaunch *l, uint64_t call_value,
                           int ni, void **event)
{
    dcl_int rc = 0;
    if (is_cuda(p)) {
        uint64_t words[DP_MAX_ARGS];
        void *params[DP_MAX_ARGS];
        const size_t b0 = l->local[0], b1 = l->dims > 1 && l->local[1] > 0 ? l->local[1] : 1;
        const size_t g1 = l->dims > 1 ? l->global[1] : 1;
        for (int k = 0; k < l->nargs; k++) {
            words[k] = arg_word(l, k, call_value, ni);
            params[k] = &words[k];
        }
        CU_CALL(p, rc, p->cu_launch(l->kernel, (unsigned)(l->global[0] / b0),
                                    (unsigned)(g1 / b1), 1, (unsigned)b0, (unsigned)b1, 1, 0,
                                    l->queue, params, NULL));
        return rc;
    }
    for (int k = 0; k < l->nargs && rc == 0; k++) {
        uint64_t v = arg_word(l, k, call_value, ni);
        rc = p->set_arg(l->kernel, (uint32_t)k, l->arg_size[k], &v);
    }
    if (rc == 0)
        rc = p->enqueue(l->queue, l->kernel, (uint32_t)l->dims, NULL, l->global,
                        l->local[0] > 0 ? l->local : NULL, 0, NULL, event);
    return rc;
}

/* Queue a copy of size bytes from host memory src to device memory mem + offset (the copy
 * reads src later: keep it until the queue has finished). */
static dcl_int drv_write(const struct dplan *p, void *queue, void *mem, size_t offset,
                         size_t size, const void *src)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->write(queue, mem, 0, offset, size, (void *)src, 0, NULL, NULL);
    CU_CALL(p, rc, p->cu_htod((uint64_t)(uintptr_t)mem + offset, src, size, queue));
    return rc;
}

/* Copy size bytes from host memory src to device memory mem + offset now: after everything
 * queued before it, and src no longer needed when it returns. */
static dcl_int drv_write_now(const struct dplan *p, void *queue, void *mem, size_t offset,
                             size_t size, const void *src)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->write(queue, mem, 1, offset, size, (void *)src, 0, NULL, NULL);
    CU_CALL(p, rc, p->cu_htod((uint64_t)(uintptr_t)mem + offset, src, size, queue));
    if (rc == 0)
        CU_CALL(p, rc, p->cu_sync(queue));
    return rc;
}

/* Queue a copy of size bytes from device memory mem to host memory dst (filled once the
 * queue has finished). */
static dcl_int drv_read(const struct dplan *p, void *queue, void *mem, size_t size, void *dst)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->read(queue, mem, 0, 0, size, dst, 0, NULL, NULL);
    CU_CALL(p, rc, p->cu_dtoh(dst, (uint64_t)(uintptr_t)mem, size, queue));
    return rc;
}

/* Wait until everything queued on queue has run. */
static dcl_int drv_finish(const struct dplan *p, void *queue)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->finish(queue);
    CU_CALL(p, rc, p->cu_sync(queue));
    return rc;
}

/* Whether queue (CUDA) or event ev (OpenCL) is still running: 1, or 0 (done or failed). */
static int drv_busy(const struct dplan *p, void *queue, void *ev, dcl_int *status)
{
    dcl_int rc;
    if (is_cuda(p)) {
        CU_CALL(p, rc, p->cu_query(queue));
        return rc == DCU_ERROR_NOT_READY;
    }
    return ev != NULL
        && p->event_info(ev, DCL_EVENT_COMMAND_EXECUTION_STATUS, sizeof *status, status,
                         NULL) == 0
        && *status > 0;
}

/* Wait for a launch queued on queue (its event ev, or NULL), polling for p->spin_ns before
 * sleeping (a sleeping wait costs a thread wake-up, tens of us); ev is not released. 0 when
 * it completed; else the OpenCL error, and *status its execution status. */
static dcl_int plan_wait(const struct dplan *p, void *queue, void *ev, dcl_int *status)
{
    dcl_int rc;
    *status = 1;
    if (!is_cuda(p))
        p->flush(queue);
    if (p->spin_ns > 0 && (ev != NULL || is_cuda(p))) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (drv_busy(p, queue, ev, status)) {
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > p->spin_ns)
                break;
            sched_yield();
        }
    }
    if (is_cuda(p))
        *status = 0;
    rc = drv_finish(p, queue);
    return rc != 0 ? rc : (*status < 0 ? *status : 0);
}

/* i-particle i's id: index holds int64 (wide) or int values. */
static long id_at(const void *index, int wide, int i)
{
    return wide ? (long)((const int64_t *)index)[i] : (long)((const int *)index)[i];
}

/* The i-particles into the plan's rows (layout.h); the padding repeats the last one. A
 * radius that asks for no list (wants_list) among ones that do gives an empty list (as
 * through Python). */
static void i_pack(const struct dplan *p, int ni, const void *index, int wide, const double *xi,
                   const double *vi, const double *ai, const double *ji, const double *h2,
                   int lists)
{
    const size_t st = (size_t)p->ni_pad;
    for (int i = 0; i < p->ni_pad; i++) {
        int s = i < ni ? i : ni - 1;
        double *d = p->idata + i;
        d[IC_X * st] = xi[3 * s];
        d[IC_Y * st] = xi[3 * s + 1];
        d[IC_Z * st] = xi[3 * s + 2];
        d[IC_H2 * st] = lists && wants_list(h2[s]) ? h2[s] : 0.0;
        d[IC_VX * st] = p->order >= 4 ? vi[3 * s] : 0.0;  /* order 2 reads no velocity */
        d[IC_VY * st] = p->order >= 4 ? vi[3 * s + 1] : 0.0;
        d[IC_VZ * st] = p->order >= 4 ? vi[3 * s + 2] : 0.0;
        d[IC_ID * st] = (double)id_at(index, wide, s);
        if (p->order >= 6) {
            d[IC_AX * st] = ai[3 * s];
            d[IC_AY * st] = ai[3 * s + 1];
            d[IC_AZ * st] = ai[3 * s + 2];
        }
        if (p->order >= 8) {
            d[IC_JX * st] = ji[3 * s];
            d[IC_JY * st] = ji[3 * s + 1];
            d[IC_JZ * st] = ji[3 * s + 2];
        }
    }
}

/* The sum of n values x[0], x[stride], ... in the reduce kernel's order: lane l adds values
 * l, l + L, l + 2L, ... in order, then lane l + s is added into lane l for s = L/2, ..., 1
 * (where that lane holds values).  The parts of one device's force call are combined so,
 * then the devices' rows, and the MPI layer's ranks (combine). */
static double lanes_sum(const double *x, size_t stride, int n)
{
    double lane[REDUCE_LANES];
    int lanes = n < REDUCE_LANES ? n : REDUCE_LANES;
    if (n == 1)
        return x[0];
    for (int l = 0; l < lanes; l++) {
        double y = x[stride * (size_t)l];
        for (int k = l + REDUCE_LANES; k < n; k += REDUCE_LANES)
            y += x[stride * (size_t)k];
        lane[l] = y;
    }
    for (int s = REDUCE_LANES / 2; s >= 1; s /= 2)
        for (int l = 0; l < s && l + s < lanes; l++)
            lane[l] += lane[l + s];
    return lane[0];
}

/* The nearest neighbour among n candidates (ids id[0], id[stride], ..., r^2 likewise): the
 * smallest r^2 among those that found one (id >= 0), ties to the lower id; none found: id
 * -1, r^2 inf.  Order-independent, so parts and devices alike. */
static void nearest(const double *id, const double *r2, size_t stride, int n, double *v)
{
    double best = INFINITY, bid = INFINITY;
    for (int k = 0; k < n; k++) {
        double pid = id[stride * (size_t)k], q = r2[stride * (size_t)k];
        if (pid >= 0.0 && (q < best || (q == best && pid < bid))) {
            best = q;
            bid = pid;
        }
    }
    v[OC_NNID] = bid < INFINITY ? bid : -1.0;
    v[OC_NNR2] = bid < INFINITY ? best : INFINITY;
}

/* i-particle i's result rows v[0 .. nco - 1] on one device, combined over its parts. */
static void device_row(const struct dplan *p, int i, double *v)
{
    const size_t part = (size_t)p->nco * (size_t)p->ni_pad;
    const double *o = p->out + (size_t)i;
    for (int r = 0; r < p->nco; r++)
        v[r] = lanes_sum(o + (size_t)r * (size_t)p->ni_pad, part, p->nparts);
    nearest(o + (size_t)OC_NNID * p->ni_pad, o + (size_t)OC_NNR2 * p->ni_pad, part, p->nparts,
            v);
}

/* i-particle i's result rows v[0 .. nco - 1] of a force call on nd devices (plans p[0 ..
 * nd - 1]): each device's parts, then the devices' rows as if they were parts.  0 when a
 * checked row (check_rows) is not finite, else 1 (the rows are written either way). */
static int result_row(const struct dplan *p, int nd, int i, double *v)
{
    double by_dev[ENG_MAX_DEV][NCO_ORDER8];
    int finite = 1;
    if (nd == 1)
        device_row(p, i, v);
    else {
        for (int d = 0; d < nd; d++)
            device_row(&p[d], i, by_dev[d]);
        for (int r = 0; r < p->nco; r++)
            v[r] = lanes_sum(&by_dev[0][r], NCO_ORDER8, nd);
        nearest(&by_dev[0][OC_NNID], &by_dev[0][OC_NNR2], NCO_ORDER8, nd, v);
    }
    for (int r = 0; r < p->nco; r++)
        if ((p->check_rows >> r) & 1 && !isfinite(v[r]))
            finite = 0;
    return finite;
}

/* ---------------------------------------------------------------------------- the engine */

/* A launch timed for a library that profiles: OpenCL, the launch's event (end); CUDA, two
 * events recorded before (start) and after (end) it on its stream.  Its device time goes to
 * *cell once it has run; p: its plan (the runtime, and CUDA's context). */
struct eng_timed {
    void *start, *end;
    double *cell;
    const struct dplan *p;
    int dev;
};

/* One device's share of the engine.  A library with several devices spreads its addresses
 * round-robin (address a on device a % ndev, at its local address a / ndev); each device has
 * its own plan in every plan block (sapporo.core.engine: one block of DP_WORDS per device),
 * its own j-records, queues and force launch, and the engine combines the devices' rows on
 * the host. */
struct edev {
    /* the j-side of the device's current plans, as the last plan installed has it (they
     * all share it): the memory put_j writes, its generations, the order, the device's
     * memory and the scatter that places j-records there */
    struct dplan jside;
    int staged;              /* a scatter may still read the staging arrays */
    int32_t ids_now[2];      /* the ids of one or two records copied in place (staged) */
    void *busy_queue;        /* a queue with copies or kernels of the engine not yet finished */
    void *force_queue;       /* the queue of the last force launch (NULL: none yet) */
    struct dplan *inflight;  /* the device's plan of the force call in flight (or NULL) */
    void *inflight_event;    /* ... and its launch's event (OpenCL; may be NULL) */
};

typedef struct {
    PyObject_HEAD
    int ready;               /* __init__ ran */
    int off;                 /* 1: no call from now on (disable(), or a runtime error) */
    PyObject *planner;       /* planner(lists, top, terms) -> the plans' words, or why not */
    int ndev;                /* the library's devices */
    /* the plans without and with lists (every device's, for every entry of its launch
     * table; ntpl[lists] of them, none until asked for), and the block of ndev plans
     * shaped for the call in flight or last made */
    struct dplan *tpl[2];
    int ntpl[2];
    struct dplan call[ENG_MAX_DEV];
    int have_j;              /* the devices' j-sides are those of the current plans */
    struct edev dev[ENG_MAX_DEV];
    /* the devices' predicted records: valid for pred_time */
    int pred_valid;
    double pred_time;
    int ran;                 /* launched since this was last cleared (tests read it) */
    long planner_calls;      /* the library asked for plans, over the engine's life */
    long launches;           /* kernels queued, over the engine's life */
    /* the last force call started (its block of plans) */
    struct dplan *last;
    int uncollected;         /* the last started call's results are still to be collected */
    int last_ni;
    int empty;               /* ... on no j-particle: no force, no launch */
    /* profiling: the launches queued since the last wait, timed (eng_timed_collect) */
    struct eng_timed timed[ENG_TIMED_MAX];
    int ntimed;
    /* the neighbour lists of the last finished call, as CSR */
    int lists_ni, lists_valid;
    int *nb_offsets, *nb_counts, *nb_ids;
    size_t nb_rows_cap, nb_ids_cap;
    char error[320];
    int code;                /* the last error's code (ENG_ERR_*) */
    /* the Python methods' buffers */
    Py_buffer out;
    int have_out;
    double *rec;
    int *address, *index;
    size_t put_cap;          /* records rec, address and index hold */
    /* device memory: a run of addresses staged (their ids; with several devices, their
     * records too, gathered from the mirror) */
    int32_t *run_ids;
    double *run_raw;
    size_t run_cap;
} Engine;

/* An error: its code (ENG_ERR_*; a device's or the engine's own failure turns the engine
 * off) and message.  -1, for the caller to return. */
static int eng_err(Engine *e, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->error, sizeof e->error, fmt, ap);
    va_end(ap);
    e->code = code;
    if (code == ENG_ERR_BACKEND || code == ENG_ERR_INTERNAL)
        e->off = 1;
    return -1;
}

static int eng_fail(Engine *e, const char *what, dcl_int rc, dcl_int status)
{
    return eng_err(e, ENG_ERR_BACKEND, "%s error %d %s (status %d); block steps take no "
                   "force call from now on", is_cuda(&e->dev[0].jside) ? "CUDA" : "OpenCL",
                   (int)rc, what, (int)status);
}

/* The code a public function returns for rc (-1: the error set). */
static int eng_code(const Engine *e, int rc)
{
    return rc < 0 ? e->code : rc;
}

static void eng_clear_plans(Engine *e)
{
    e->ntpl[0] = e->ntpl[1] = 0;
    e->have_j = 0;
    for (int d = 0; d < e->ndev; d++)
        e->dev[d].force_queue = NULL;
}

/* Whether the memory the current plans point at is still where they were made. */
static int eng_fresh(const Engine *e)
{
    for (int d = 0; d < e->ndev; d++) {
        const struct dplan *j = &e->dev[d].jside;
        if (*j->gen_at != j->gen || *j->lgen_at != j->lgen)
            return 0;
    }
    return 1;
}

/* A timed launch's events released (the handles that were made). */
static void eng_timed_free(const struct dplan *p, const struct eng_timed *t)
{
    dcl_int rc = 0;
    if (!is_cuda(p)) {
        if (t->end != NULL)
            p->release(t->end);
        return;
    }
    if (t->start != NULL)
        CU_CALL(p, rc, p->cu_event_destroy(t->start));
    if (t->end != NULL)
        CU_CALL(p, rc, p->cu_event_destroy(t->end));
    (void)rc;
}

/* Device d's timed launches, all of which have run when read is 1: their device time added
 * to their cells (read 0, after an error: not read), their events released, the others
 * kept. 0, or the runtime's error reading a time (every event is released either way). */
static dcl_int eng_timed_collect(Engine *e, int d, int read)
{
    dcl_int rc = 0;
    int kept = 0;
    for (int k = 0; k < e->ntimed; k++) {
        struct eng_timed *t = &e->timed[k];
        const struct dplan *p = t->p;
        void *prev;
        if (t->dev != d) {
            e->timed[kept++] = *t;
            continue;
        }
        if (is_cuda(p)) {
            float ms = 0.0f;
            if (p->cu_push(p->cu_context) != 0) {  /* (the events went with the context) */
                rc = rc != 0 ? rc : -1;
                continue;
            }
            if (read && rc == 0 && (rc = p->cu_event_elapsed(&ms, t->start, t->end)) == 0)
                *t->cell += 1e-3 * (double)ms;
            p->cu_event_destroy(t->start);
            p->cu_event_destroy(t->end);
            p->cu_pop(&prev);
        }
        else {
            uint64_t t0 = 0, t1 = 0;
            if (read && rc == 0
                && (rc = p->profiling_info(t->end, DCL_PROFILING_COMMAND_START, sizeof t0,
                                           &t0, NULL)) == 0
                && (rc = p->profiling_info(t->end, DCL_PROFILING_COMMAND_END, sizeof t1, &t1,
                                           NULL)) == 0)
                *t->cell += t1 > t0 ? 1e-9 * (double)(t1 - t0) : 0.0;
            p->release(t->end);
        }
    }
    e->ntimed = kept;
    return rc;
}

/* Wait for device d's part of the force call in flight, if any, and for every other
 * command the engine queued on it: 0, or -1 (error set). */
static int eng_wait_dev(Engine *e, int d)
{
    struct edev *ed = &e->dev[d];
    struct dplan *p = ed->inflight;
    dcl_int rc = 0, status = 0;
    if (p != NULL) {
        ed->inflight = NULL;
        rc = plan_wait(p, p->force.queue, ed->inflight_event, &status);
        if (ed->inflight_event != NULL && p->seconds_at == NULL)
            p->release(ed->inflight_event);  /* (timed, the timing releases it) */
        ed->inflight_event = NULL;
        if (ed->busy_queue == p->force.queue)
            ed->busy_queue = NULL;
    }
    if (rc == 0 && ed->busy_queue != NULL)
        rc = drv_finish(&ed->jside, ed->busy_queue);
    ed->busy_queue = NULL;
    ed->staged = 0;  /* the copies that read the staging arrays are done */
    if (rc != 0) {
        eng_timed_collect(e, d, 0);
        return eng_fail(e, "waiting for the device", rc, status);
    }
    if ((rc = eng_timed_collect(e, d, 1)) != 0)
        return eng_fail(e, "reading a kernel's device time", rc, 0);
    return 0;
}

/* Wait for the force call in flight, if any, and for every other command the engine
 * queued, on every device: 0, or -1 (error set). */
static int eng_wait(void *engine)
{
    Engine *e = engine;
    int rc = 0;
    for (int d = 0; d < e->ndev; d++)
        if (eng_wait_dev(e, d) < 0)
            rc = -1;
    return rc;
}

/* Whether a force call is in flight on any device. */
static int eng_in_flight(const Engine *e)
{
    for (int d = 0; d < e->ndev; d++)
        if (e->dev[d].inflight != NULL)
            return 1;
    return 0;
}

/* Before queueing on queue of device d: the engine's commands on another queue of the
 * device finished first (two queues of one context, such as PoCL's companion device's,
 * share the buffers). */
static int eng_on(Engine *e, int d, void *queue)
{
    struct edev *ed = &e->dev[d];
    dcl_int rc;
    if (ed->busy_queue != NULL && ed->busy_queue != queue) {
        if ((rc = drv_finish(&ed->jside, ed->busy_queue)) != 0)
            return eng_fail(e, "waiting for the other queue", rc, 0);
    }
    ed->busy_queue = queue;
    return 0;
}

/* Queue a launch (see plan_launch; event, when not NULL, receives its OpenCL event); timed
 * when the library profiles (p->seconds_at), read at the next wait. 0, or -1 (error set). */
static int eng_launch(Engine *e, struct dplan *p, struct dlaunch *l, uint64_t call_value,
                      int ni, void **event, const char *what)
{
    struct eng_timed *t = NULL;
    void *ev = NULL;
    dcl_int rc = 0;
    if (p->seconds_at != NULL) {
        if (e->ntimed == ENG_TIMED_MAX) {
            return eng_err(e, ENG_ERR_INTERNAL, "more than %d timed launches between two "
                           "waits; no force call from now on", ENG_TIMED_MAX);
        }
        t = &e->timed[e->ntimed];
        t->start = t->end = NULL;
        t->cell = p->seconds_at;
        t->p = p;
        t->dev = p->dev;
        if (is_cuda(p)) {
            CU_CALL(p, rc, p->cu_event_create(&t->start, 0));
            if (rc == 0)
                CU_CALL(p, rc, p->cu_event_create(&t->end, 0));
            if (rc == 0)
                CU_CALL(p, rc, p->cu_event_record(t->start, l->queue));
        }
    }
    if (rc == 0)
        rc = plan_launch(p, l, call_value, ni, event != NULL || t != NULL ? &ev : NULL);
    if (t != NULL && is_cuda(p) && rc == 0)
        CU_CALL(p, rc, p->cu_event_record(t->end, l->queue));
    if (t != NULL && !is_cuda(p))
        t->end = ev;  /* OpenCL: the launch's event, released by the timing */
    if (t != NULL && rc == 0)
        e->ntimed++;
    else if (t != NULL)
        eng_timed_free(p, t);
    if (event != NULL)
        *event = ev;
    e->ran = 1;
    if (rc != 0)
        return eng_fail(e, what, rc, 0);
    e->launches++;
    return 0;
}

/* Device memory: the n j-records staged in device d's plan arrays (n <= scatter_max) into
 * its buffers: copied to the device and placed by one scatter launch (one or two records:
 * copied in place), all queued. 0, or -1 (error set). */
static int eng_send_staged(Engine *e, int d, int n)
{
    struct edev *ed = &e->dev[d];
    struct dplan *p = &ed->jside;
    const size_t len = 4 * (size_t)p->raw_n;
    /* one or two records are plain copies, which any queue of the context can make: the
     * one the next force call most likely uses, the last one's (on PoCL, the companion
     * device's for small blocks, which runs them in this thread) */
    void *queue = n <= 2 && ed->force_queue != NULL ? ed->force_queue : p->queue;
    dcl_int rc = 0;
    if (eng_on(e, d, queue) < 0)
        return -1;
    ed->staged = 1;
    if (n <= 2) {  /* as few commands as the scatter's two: each record and id in place */
        for (int k = 0; k < n && rc == 0; k++) {
            const double *r = p->scatter_batch + (len + 4) * (size_t)k;
            const size_t a = (size_t)r[len];
            ed->ids_now[k] = (int32_t)r[len + 1];
            rc = drv_write(p, queue, p->dev_raw, sizeof(double) * len * a,
                           sizeof(double) * len, r);
            if (rc == 0)
                rc = drv_write(p, queue, p->dev_ids, sizeof(int32_t) * a, sizeof(int32_t),
                               &ed->ids_now[k]);
        }
        return rc == 0 ? 0 : eng_fail(e, "queueing a j-record's copy", rc, 0);
    }
    rc = drv_write(p, p->queue, p->scatter_batch_buf, 0,
                   sizeof(double) * (len + 4) * (size_t)n, p->scatter_batch);
    if (rc != 0)
        return eng_fail(e, "queueing the j-records' copy", rc, 0);
    return eng_launch(e, p, &p->scatter, 0, n, NULL, "queueing the scatter of j-records");
}

/* Device memory: device d's records among the consecutive global addresses a0 .. a0 + m - 1,
 * already in the host mirror, copied from it in one copy (several devices: gathered first,
 * the device's every ndev-th address), and their ids in another (made now, so that neither
 * the mirror nor the staged arrays are read later). 0, or -1 (error set). */
static int eng_copy_j_run(Engine *e, int d, int a0, int m)
{
    struct dplan *p = &e->dev[d].jside;
    const size_t len = 4 * (size_t)p->raw_n, nd = (size_t)e->ndev;
    const int g0 = a0 + (d - a0 % (int)nd + (int)nd) % (int)nd;  /* its first address */
    const int n = g0 > a0 + m - 1 ? 0 : (a0 + m - 1 - g0) / (int)nd + 1, l0 = g0 / (int)nd;
    const double *raw = p->mirror_raw + len * (size_t)l0;  /* one device: the mirror's run */
    dcl_int rc;
    if (n == 0)
        return 0;
    if ((size_t)n > e->run_cap) {
        int32_t *q = PyMem_RawRealloc(e->run_ids, sizeof(int32_t) * (size_t)n);
        double *r = q == NULL ? NULL
                              : PyMem_RawRealloc(e->run_raw, sizeof(double) * len * (size_t)n);
        if (q != NULL)
            e->run_ids = q;
        if (r == NULL) {
            return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %d j-particles", n);
        }
        e->run_raw = r;
        e->run_cap = (size_t)n;
    }
    for (int k = 0; k < n; k++) {
        const size_t a = ((size_t)l0 + (size_t)k) * nd + (size_t)d;  /* the global address */
        e->run_ids[k] = (int32_t)p->mirror_ids[a];
        if (nd > 1)
            memcpy(e->run_raw + len * (size_t)k, p->mirror_raw + len * a, sizeof(double) * len);
    }
    if (nd > 1)
        raw = e->run_raw;
    if (eng_on(e, d, p->queue) < 0)
        return -1;
    rc = drv_write_now(p, p->queue, p->dev_raw, sizeof(double) * len * (size_t)l0,
                       sizeof(double) * len * (size_t)n, raw);
    if (rc == 0)
        rc = drv_write_now(p, p->queue, p->dev_ids, sizeof(int32_t) * (size_t)l0,
                           sizeof(int32_t) * (size_t)n, e->run_ids);
    return rc == 0 ? 0 : eng_fail(e, "copying a run of j-records", rc, 0);
}

/* Device memory: device d's share of n j-records (global addresses; already in the mirror)
 * into its buffers: a batch larger than one scatter on consecutive addresses (a tree
 * code's list, a first upload) in two copies, others scatter_max addresses at a time, in
 * order (an address repeated within a batch keeps its slot, with its last record). 0, or
 * -1 (error set). */
static int eng_copy_j(Engine *e, int d, int n, const int *address, const int *index,
                      const double *rec, int nrec)
{
    struct edev *ed = &e->dev[d];
    struct dplan *p = &ed->jside;
    const int nd = e->ndev, m = p->scatter_max;
    const size_t len = 4 * (size_t)p->raw_n;
    const size_t given = (size_t)(nrec < p->raw_n ? nrec : p->raw_n);
    int run = n > m, s = 0, bits = 1;
    for (int k = 1; k < n && run; k++)
        run = address[k] == address[0] + k;
    if (run)
        return eng_copy_j_run(e, d, address[0], n);
    /* the threads of one scatter write in no fixed order, so a batch names each address
     * once: an address staged already takes the later record in its slot, found through
     * a hash table of the batch's slots (slot + 1; 0: free) */
    while ((1 << bits) < 2 * m)
        bits++;
    int slot_of[1 << bits];
    memset(slot_of, 0, sizeof slot_of);
    for (int k = 0; k < n; k++) {
        if (address[k] % nd != d)
            continue;
        if (s == 0 && ed->staged && eng_wait_dev(e, d) < 0)  /* the arrays may still be read */
            return -1;
        const int local = address[k] / nd;
        unsigned h = ((unsigned)local * 2654435761u) >> (32 - bits);
        while (slot_of[h] != 0
               && p->scatter_batch[(len + 4) * (size_t)(slot_of[h] - 1) + len] != local)
            h = (h + 1) & ((1u << bits) - 1);
        const int fresh = slot_of[h] == 0;
        if (fresh)
            slot_of[h] = s + 1;
        double *r = p->scatter_batch + (len + 4) * (size_t)(slot_of[h] - 1);
        memcpy(r, rec + 4 * (size_t)nrec * (size_t)k, sizeof(double) * 4 * given);
        memset(r + 4 * given, 0, sizeof(double) * (len - 4 * given));
        r[len] = (double)local;
        r[len + 1] = (double)index[k];
        r[len + 2] = r[len + 3] = 0.0;
        if (fresh && ++s == m) {
            if (eng_send_staged(e, d, s) < 0)
                return -1;
            s = 0;
            memset(slot_of, 0, sizeof slot_of);
        }
    }
    return s > 0 ? eng_send_staged(e, d, s) : 0;
}

/* n j-records into the host mirror (global addresses) and, on devices that compute on host
 * memory, into their records (address a: device a % ndev, local address a / ndev), in
 * order: a repeated address keeps its last record, as in the library. Only the records the
 * predictor reads (x|m, v|t and pred_terms derivatives) are written: the others are zero
 * in every stored record (records_ok, and the library raises pred_terms when it stores a
 * non-zero one), and stay so. */
static void records_write(Engine *e, int n, const int *address, const int *index,
                          const double *rec, int nrec)
{
    const struct dplan *j = &e->dev[0].jside;
    const int nd = e->ndev, raw_n = j->raw_n;
    const size_t len = 4 * (size_t)raw_n;
    const int used = j->pred_terms + 2 < raw_n ? j->pred_terms + 2 : raw_n;
    const size_t given = sizeof(double) * 4 * (size_t)(nrec < used ? nrec : used);
    const size_t zeros = sizeof(double) * 4 * (size_t)(used - (nrec < used ? nrec : used));
    for (int k = 0; k < n; k++) {
        const size_t a = (size_t)address[k];
        const double *r = rec + 4 * (size_t)nrec * k;
        memcpy(j->mirror_raw + a * len, r, given);
        memset((char *)(j->mirror_raw + a * len) + given, 0, zeros);
        j->mirror_ids[a] = index[k];
        if (!j->memory) {
            const struct dplan *q = &e->dev[a % (size_t)nd].jside;
            const size_t l = a / (size_t)nd;
            memcpy(q->dev_raw + l * len, r, given);
            memset((char *)(q->dev_raw + l * len) + given, 0, zeros);
            q->dev_ids[l] = index[k];
        }
    }
}

/* The records of addresses a0 .. a0 + m - 1 copied from the host mirror into the devices'
 * records; they are to be predicted again.  0, or -1 (error set). */
static int eng_upload_run(Engine *e, int a0, int m)
{
    const struct dplan *j = &e->dev[0].jside;
    const int nd = e->ndev;
    const size_t len = 4 * (size_t)j->raw_n;
    for (int d = 0; d < nd && j->memory; d++)
        if (eng_copy_j_run(e, d, a0, m) < 0)
            return -1;
    for (int a = a0; a < a0 + m && !j->memory; a++) {
        const struct dplan *q = &e->dev[a % nd].jside;
        memcpy(q->dev_raw + (size_t)(a / nd) * len, j->mirror_raw + (size_t)a * len,
               sizeof(double) * len);
        q->dev_ids[a / nd] = (int32_t)j->mirror_ids[a];
    }
    e->pred_valid = 0;
    return 0;
}

/* The n addresses (ascending, global) whose device records the library lost (new buffers),
 * uploaded from the host mirror run by run (a plan's DP_UPLOAD, at its install: nothing is
 * in flight).  0, or -1 (error set). */
static int eng_upload(Engine *e, int n, const int32_t *address)
{
    for (int k = 0, m; k < n; k += m) {
        for (m = 1; k + m < n && address[k + m] == address[k] + m; m++)
            ;
        if (eng_upload_run(e, address[k], m) < 0)
            return -1;
    }
    return 0;
}

/* Forget every j-particle: the records in use zero (ids -1) in the mirror and on the
 * devices, no address in use.  0, or -1 (error set). */
static int eng_reset(Engine *e)
{
    const struct dplan *j = &e->dev[0].jside;
    int n;
    if (!e->have_j || eng_wait(e) < 0)
        return e->have_j ? -1 : 0;
    n = (int)*j->n_stored_at;
    memset(j->mirror_raw, 0, sizeof(double) * 4 * (size_t)j->raw_n * (size_t)n);
    for (int a = 0; a < n; a++)
        j->mirror_ids[a] = -1;
    if (n > 0 && eng_upload_run(e, 0, n) < 0)
        return -1;
    *j->n_stored_at = 0;
    return 0;
}

/* Install the words of n plans (every device's, for every entry of its launch table; with
 * lists or not), made by the library for the memory as it is now; the old plans go when a
 * device's j-side moved.  0, or -1 (error set, the engine off). */
static int eng_install(Engine *e, const int64_t *w, int n, int lists)
{
    const int nd = e->ndev;
    struct dplan *p = PyMem_RawRealloc(e->tpl[lists], sizeof *p * (size_t)(n > 0 ? n : 1));
    int moved = 0, bad = 0, first[ENG_MAX_DEV];
    if (p == NULL)
        return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %d plans", n);
    e->tpl[lists] = p;
    e->ntpl[lists] = 0;
    for (int d = 0; d < nd; d++)
        first[d] = -1;
    for (int k = 0; k < n; k++) {
        const int d = (int)w[(size_t)k * DP_WORDS + DP_DEV];
        if (plan_unpack(&p[k], w + (size_t)k * DP_WORDS, lists) < 0 || d < 0 || d >= nd
            || p[k].order != p[0].order || p[k].nco != p[0].nco || p[k].raw_n != p[0].raw_n
            || p[k].n_stored_at != p[0].n_stored_at || p[k].mirror_cap != p[0].mirror_cap
            || p[k].pred_terms != p[0].pred_terms
            || p[k].mirror_raw != p[0].mirror_raw || p[k].mirror_ids != p[0].mirror_ids
            || p[k].memory != p[0].memory || p[k].lgen_at != p[0].lgen_at
            || p[k].nupload != p[0].nupload || p[k].upload != p[0].upload
            || (first[d] >= 0 && (p[k].dev_raw != p[first[d]].dev_raw
                                  || p[k].gen_at != p[first[d]].gen_at)))
            bad = 1;
        else if (first[d] < 0)
            first[d] = k;
    }
    for (int d = 0; d < nd; d++)
        if (bad || first[d] < 0)
            return eng_err(e, ENG_ERR_INTERNAL, "a plan this engine does not understand");
    for (int d = 0; d < nd; d++) {
        const struct dplan *j = &e->dev[d].jside, *q = &p[first[d]];
        moved |= e->have_j && (q->gen != j->gen || q->lgen != j->lgen
                               || q->mirror_raw != j->mirror_raw || q->dev_raw != j->dev_raw
                               || q->mirror_ids != j->mirror_ids || q->dev_ids != j->dev_ids
                               || q->n_stored_at != j->n_stored_at
                               || q->mirror_cap != j->mirror_cap || q->j_cap != j->j_cap
                               || q->pred_terms != j->pred_terms || q->raw_n != j->raw_n);
    }
    if (moved)
        eng_clear_plans(e);
    e->have_j = 1;
    for (int d = 0; d < nd; d++)
        e->dev[d].jside = p[first[d]];
    e->ntpl[lists] = n;
    if (p[0].nupload > 0 && eng_upload(e, p[0].nupload, p[0].upload) < 0) {
        e->off = 1;  /* the devices' records are not what the library holds */
        return -1;
    }
    return 0;
}

/* The plans with lists or not asked of the library (the planner, with the GIL), for a
 * memory that holds addresses [0, top) and records whose derivatives up to terms the
 * predictor reads; nothing in flight.  0, or -1 (error set: the library's reason, such as
 * an address beyond its capacity, with the engine still on; or, when the library has no
 * plan or gives one the engine cannot read, off). */
static int eng_ask(Engine *e, int lists, int top, int terms)
{
    PyGILState_STATE gil;
    PyObject *r;
    Py_buffer w;
    int rc = -1;
    if (eng_wait(e) < 0)  /* nothing queued while the library plans (it may reallocate) */
        return -1;
    e->planner_calls++;
    __atomic_add_fetch(&python_calls, 1, __ATOMIC_RELAXED);
    gil = PyGILState_Ensure();
    r = PyObject_CallFunction(e->planner, "iii", lists, top, terms);
    if (r == NULL) {
        PyErr_WriteUnraisable(e->planner);
        eng_err(e, ENG_ERR_INTERNAL, "the library could not make a plan");
    }
    else if (PyTuple_Check(r)) {  /* (code, message): why the library cannot */
        int code = ENG_ERR_INTERNAL;
        const char *why = NULL;
        if (!PyArg_ParseTuple(r, "is", &code, &why))
            PyErr_Clear();
        e->code = code < 0 ? code : ENG_ERR_INTERNAL;
        snprintf(e->error, sizeof e->error, "%s", why != NULL ? why : "no plan");
    }
    else if (PyLong_Check(r))
        eng_err(e, ENG_ERR_INTERNAL, "the library has no plan for its engine");
    else if (PyObject_GetBuffer(r, &w, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_Clear();
        eng_err(e, ENG_ERR_INTERNAL, "the library's plan is not a buffer");
    }
    else {
        const size_t one = sizeof(int64_t) * DP_WORDS;
        if (w.len > 0 && (size_t)w.len % one == 0)
            rc = eng_install(e, w.buf, (int)((size_t)w.len / one), lists);
        else
            eng_err(e, ENG_ERR_INTERNAL, "plans of %zd bytes", w.len);
        PyBuffer_Release(&w);
    }
    Py_XDECREF(r);
    PyGILState_Release(gil);
    return rc;
}

/* Device d's local addresses among global addresses [0, n) of nd devices. */
static int n_local(int64_t n, int d, int nd)
{
    return n > d ? (int)((n - d + nd - 1) / nd) : 0;
}

/* The block of ndev plans shaped for ni i-particles on addresses [0, nj) (nj no more than
 * are stored), into call[0 .. ndev - 1]: 0, or -1 (error set).  The library is asked for
 * plans only when it has none for these lists, or its memory moved. */
static int eng_plan(Engine *e, int nj, int ni, int lists, struct dplan *call)
{
    const int nd = e->ndev;
    if (e->have_j && !eng_fresh(e))
        eng_clear_plans(e);  /* the library's memory moved: no plan holds */
    if (e->ntpl[lists] == 0 && eng_ask(e, lists, 0, 0) < 0)
        return -1;
    for (int d = 0; d < nd; d++) {
        const struct dplan *t = e->tpl[lists], *big = NULL, *small = NULL;
        const int nj_local = n_local(nj, d, nd);
        for (int k = 0; k < e->ntpl[lists]; k++)
            if (t[k].dev == d && t[k].ni_lo <= ni && ni <= t[k].ni_hi) {
                if (t[k].small)
                    small = &t[k];
                else
                    big = &t[k];
            }
        if (big != NULL && small != NULL && plan_small(big, ni, nj_local))
            big = small;
        if (big == NULL || (call[d] = *big, plan_shape(&call[d], nj, nj_local, ni)) < 0
            || plan_predict(&call[d], n_local(*big->n_stored_at, d, nd)) < 0)
            return eng_err(e, ENG_ERR_INTERNAL, "no plan of device %d for %d i-particles", d,
                           ni);
    }
    return 0;
}

/* The j-particles' rules: n records (nrec double4 each, at rec) at addresses, with ids.
 * 0, with the addresses in use they need (*top: the highest plus one) and the derivative
 * records the predictor must read (*terms: the highest non-zero one, a = 1, jerk = 2, ...),
 * or -1 with the error (ENG_ERR_INPUT) naming the first j-particle that breaks one. */
static int j_rules(Engine *e, int n, const int *address, const int *index, const double *rec,
                   int nrec, int *top, int *terms)
{
    *top = 0;
    *terms = 0;
    for (int k = 0; k < n; k++) {
        const double *r = rec + 4 * (size_t)nrec * k;
        const int a = address[k];
        if (a < 0 || a > LIMIT_MAX_ADDRESS)
            return eng_err(e, ENG_ERR_INPUT, "address: value %d outside [0, %d]", a,
                           LIMIT_MAX_ADDRESS);
        if (index[k] < 0 || index[k] > LIMIT_MAX_ID)
            return eng_err(e, ENG_ERR_INPUT, "index: value %d outside [0, %d] (address %d)",
                           index[k], LIMIT_MAX_ID, a);
        for (int q = 0; q < nrec; q++)
            if (!finite3(r + 4 * q) || !isfinite(r[4 * q + 3]))
                return eng_err(e, ENG_ERR_INPUT, "j-particle at address %d (index %d) has a "
                               "NaN or infinite value", a, index[k]);
        if (!position_ok(r))
            return eng_err(e, ENG_ERR_INPUT, "x: j-particle at address %d: position (%g, %g, "
                           "%g) too large: squared distances would overflow double; "
                           "magnitudes must stay below %g", a, r[0], r[1], r[2], COORD_LIMIT);
        for (int q = nrec - 1; q >= 2 && q - 1 > *terms; q--)
            if (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0)
                *terms = q - 1;
        if (a >= *top)
            *top = a + 1;
    }
    return 0;
}

/* The rules of the library's kind (its records and precision, in j): pop and d5 (records
 * RAW_P on) are zero below order 8 (the other derivatives past the order's records are
 * not read), and double-single keeps every non-zero mass (pair terms are float).  0, or -1
 * with the error (ENG_ERR_INPUT). */
static int j_fits(Engine *e, const struct dplan *j, int n, const int *address,
                  const double *rec, int nrec)
{
    for (int k = 0; k < n; k++) {
        const double *r = rec + 4 * (size_t)nrec * k;
        if (j->ds && !ds_mass_ok(r[3]))
            return eng_err(e, ENG_ERR_INPUT, "mass: %g at address %d is below single "
                           "precision's normal range (%.3g); double-single would lose its "
                           "force. Use N-body units or precision='double' (see "
                           "docs/accuracy.md)", r[3], address[k], ENGINE_FLT_MIN);
        for (int q = j->raw_n > RAW_P ? j->raw_n : RAW_P; q < nrec; q++)
            if (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0)
                return eng_err(e, ENG_ERR_INPUT, "j-particle at address %d: derivative "
                               "record %d is not zero, but this library's order keeps %d "
                               "records (pop and d5 are taken at order 8 only)", address[k],
                               q, j->raw_n);
    }
    return 0;
}

/* Whether the memory holds addresses [0, top) (the host mirror, and each device's records:
 * address a on device a % ndev at local a / ndev). */
static int room_for(const Engine *e, int top)
{
    if (top > e->dev[0].jside.mirror_cap)
        return 0;
    for (int d = 0; d < e->ndev; d++)
        if (n_local(top, d, e->ndev) > e->dev[d].jside.j_cap)
            return 0;
    return 1;
}

static int eng_put_j_rc(Engine *e, int n, const int *address, const int *index,
                        const double *rec, int nrec)
{
    const struct dplan *j = &e->dev[0].jside;
    int top, terms;
    e->code = ENG_ERR_BACKEND;
    if (e->off)
        return eng_err(e, ENG_ERR_BACKEND, "the device failed earlier (see the first error); "
                       "open a new library");
    if (nrec < 2 || nrec > JB_RECORDS)
        return eng_err(e, ENG_ERR_INPUT, "put_j: %d records per j-particle (2 to %d)", nrec,
                       JB_RECORDS);
    if (n < 1)
        return 1;
    if (j_rules(e, n, address, index, rec, nrec, &top, &terms) < 0)
        return -1;
    if (e->have_j && terms > j->raw_n - 2)  /* (records past the order's are not read) */
        terms = j->raw_n - 2;
    if ((!e->have_j || !eng_fresh(e) || !room_for(e, top) || terms > j->pred_terms)
        && eng_ask(e, 0, top, terms) < 0)  /* more memory, or terms (the library's) */
        return -1;
    if (terms > j->raw_n - 2)
        terms = j->raw_n - 2;
    if (j_fits(e, j, n, address, rec, nrec) < 0)
        return -1;
    if (!room_for(e, top) || terms > j->pred_terms)
        return eng_err(e, ENG_ERR_INTERNAL, "the library gave no room for address %d", top - 1);
    if (eng_in_flight(e) && eng_wait(e) < 0)  /* the force call reads the records */
        return -1;
    records_write(e, n, address, index, rec, nrec);
    if (top > *j->n_stored_at)  /* more addresses in use: the next prediction reads them */
        *j->n_stored_at = top;
    e->pred_valid = 0;
    for (int d = 0; d < e->ndev && j->memory; d++)
        if (eng_copy_j(e, d, n, address, index, rec, nrec) < 0)
            return -1;
    return 1;
}

static int eng_put_j(void *engine, int n, const int *address, const int *index,
                     const double *rec, int nrec)
{
    return eng_code(engine, eng_put_j_rc(engine, n, address, index, rec, nrec));
}

/* Queue device d's force call (plan p): the i-particles packed (and, on device memory,
 * copied), the force launch, the reduce where a kernel combines the parts, the results'
 * copies back.  0, or -1 (error set). */
static int eng_start_dev(Engine *e, int d, struct dplan *p, int ni, const void *index,
                         int wide, const double *x, const double *v, const double *a,
                         const double *jerk, double eps2, const double *h2, int lists)
{
    struct edev *ed = &e->dev[d];
    void *ev = NULL;
    uint64_t bits;
    if (eng_on(e, d, p->force.queue) < 0)
        return -1;
    i_pack(p, ni, index, wide, x, v, a, jerk, h2, lists);
    if (lists)
        memset(p->nb_counts, 0, sizeof(int32_t) * (size_t)p->ni_pad);
    if (p->memory) {  /* the i-particles (and the lists' counts) to the device */
        dcl_int rc = drv_write(p, p->force.queue, p->idata_buf, 0,
                               sizeof(double) * (size_t)p->nci * (size_t)p->ni_pad, p->idata);
        if (rc == 0 && lists)
            rc = drv_write(p, p->force.queue, p->nb_counts_buf, 0,
                           sizeof(int32_t) * (size_t)p->ni_pad, p->nb_counts);
        if (rc != 0)
            return eng_fail(e, "queueing the i-particles' copy", rc, 0);
    }
    memcpy(&bits, &eps2, sizeof bits);
    if (eng_launch(e, p, &p->force, bits, ni, p->reduce.kernel != NULL ? NULL : &ev,
                   "queueing the force kernel") < 0)
        return -1;
    if (p->reduce.kernel != NULL  /* the parts combined by the kernel, on the same queue */
        && eng_launch(e, p, &p->reduce, 0, ni, &ev, "queueing the reduce kernel") < 0)
        return -1;
    if (p->memory) {  /* the results back, read once the queue has finished */
        dcl_int rc = drv_read(p, p->force.queue, p->out_buf, p->out_bytes, p->out);
        if (rc == 0 && lists)
            rc = drv_read(p, p->force.queue, p->nb_counts_buf,
                          sizeof(int32_t) * (size_t)p->ni_pad, p->nb_counts);
        if (rc == 0 && lists)
            rc = drv_read(p, p->force.queue, p->nb_lists_buf,
                          sizeof(int32_t) * (size_t)p->ni_pad * (size_t)p->nb_cap, p->nb_lists);
        if (rc != 0) {
            if (ev != NULL && p->seconds_at == NULL)  /* (timed, the timing releases it) */
                p->release(ev);
            return eng_fail(e, "queueing the results' copy", rc, 0);
        }
    }
    ed->inflight = p;
    ed->inflight_event = ev;
    ed->force_queue = p->force.queue;
    return 0;
}

/* The i-particles' rules (index: their ids, int64 when wide, else int), for a library of
 * p's order: only what the order reads is checked (velocities from order 4, accelerations
 * from 6, jerks at 8); h2 not at all: any value is taken (wants_list).  0, or -1 with the
 * error (ENG_ERR_INPUT) naming the first i-particle that breaks one. */
static int i_rules(Engine *e, const struct dplan *p, int ni, const void *index, int wide,
                   const double *xi, const double *vi, const double *ai, const double *ji,
                   double eps2)
{
    static const char *const name[3] = {"v", "a", "jerk"};
    if (!(isfinite(eps2) && eps2 >= 0.0))
        return eng_err(e, ENG_ERR_INPUT, "eps2: must be finite and >= 0, got %g", eps2);
    if (p->order >= 6 && ai == NULL)
        return eng_err(e, ENG_ERR_INPUT, "a: order %d needs the i-particles' predicted "
                       "accelerations", p->order);
    if (p->order >= 8 && ji == NULL)
        return eng_err(e, ENG_ERR_INPUT, "jerk: order 8 needs the i-particles' predicted "
                       "jerks");
    for (int i = 0; i < ni; i++) {
        const double *x = xi + 3 * i, *d[3] = {vi + 3 * i, ai ? ai + 3 * i : NULL,
                                               ji ? ji + 3 * i : NULL};
        const long id = id_at(index, wide, i);
        if (id < 0 || id > p->max_id)
            return eng_err(e, ENG_ERR_INPUT, "index: value %ld outside [0, %ld] (i-particle "
                           "%d)", id, (long)p->max_id, i);
        if (!finite3(x))
            return eng_err(e, ENG_ERR_INPUT, "x: non-finite value in row %d (id %ld): [%g, %g, "
                           "%g]", i, id, x[0], x[1], x[2]);
        if (!position_ok(x))
            return eng_err(e, ENG_ERR_INPUT, "x: value in row %d (id %ld) too large ([%g, %g, "
                           "%g]): squared distances would overflow double; magnitudes must "
                           "stay below %g", i, id, x[0], x[1], x[2], COORD_LIMIT);
        for (int k = 0; k < 3; k++)
            if (p->order >= 4 + 2 * k && !finite3(d[k]))
                return eng_err(e, ENG_ERR_INPUT, "%s: non-finite value in row %d (id %ld)",
                               name[k], i, id);
    }
    return 0;
}

/* start; index holds int64 ids when wide, else int.  Every device's prediction (where
 * needed) is queued first, then every device's force call; with several devices each
 * queue is flushed, so that they all work at once. */
static int eng_start_ids(Engine *e, int nj, int ni, const void *index, int wide,
                         const double *x, const double *v, const double *a, const double *jerk,
                         double eps2, const double *h2, int have_t, double t)
{
    struct dplan *p;
    const int nd = e->ndev;
    int lists = 0, stored;
    uint64_t bits;
    e->code = ENG_ERR_BACKEND;
    if (e->off)
        return eng_err(e, ENG_ERR_BACKEND, "the device failed earlier (see the first error); "
                       "open a new library");
    e->uncollected = 0;  /* a new call: the previous one's results are gone */
    if (ni < 1 || ni > ENG_NI_MAX)
        return eng_err(e, ENG_ERR_INPUT, "ni = %d: between 1 and %d i-particles per call", ni,
                       ENG_NI_MAX);
    for (int i = 0; h2 != NULL && i < ni && !lists; i++)
        lists = wants_list(h2[i]);
    /* the last call collected (its i-particles' and results' arrays are reused); the
     * j-records' copies may still run: the queues keep the order, and a new plan waits */
    if (eng_in_flight(e) && eng_wait(e) < 0)
        return -1;
    if (!e->have_j && eng_ask(e, lists, 0, 0) < 0)
        return -1;
    stored = (int)*e->dev[0].jside.n_stored_at;
    if (nj < 0 || nj > stored)
        return eng_err(e, ENG_ERR_INPUT, "nj: %d outside [0, %d] (addresses stored)", nj,
                       stored);
    if (i_rules(e, &e->dev[0].jside, ni, index, wide, x, v,
                e->dev[0].jside.order >= 6 ? a : NULL, e->dev[0].jside.order >= 8 ? jerk : NULL,
                eps2) < 0)
        return -1;
    e->empty = nj == 0;  /* no j-particle: no force, no neighbour, no launch */
    if (!e->empty) {
        if (eng_plan(e, nj, ni, lists, e->call) < 0)
            return -1;
        p = e->call;
        if (p->order < 6)
            a = NULL;
        if (p->order < 8)
            jerk = NULL;
        if (!have_t)
            t = p->time0;
        if (!e->pred_valid || e->pred_time != t) {
            memcpy(&bits, &t, sizeof bits);
            e->pred_valid = 0;
            for (int d = 0; d < nd; d++) {
                if (eng_on(e, d, p[d].predict.queue) < 0
                    || eng_launch(e, &p[d], &p[d].predict, bits, ni, NULL,
                                  "queueing the prediction") < 0)
                    return -1;
                if (nd > 1 && !is_cuda(&p[d]))  /* under way while another device waits */
                    p[d].flush(p[d].predict.queue);
            }
            e->pred_valid = 1;
            e->pred_time = t;
        }
        for (int d = 0; d < nd; d++)
            if (eng_start_dev(e, d, &p[d], ni, index, wide, x, v, a, jerk, eps2, h2, lists)
                < 0)
                return -1;
        for (int d = 0; d < nd && nd > 1; d++)  /* one device: flushed when waited for */
            if (!is_cuda(&p[d]))
                p[d].flush(p[d].force.queue);
        e->last = p;
    }
    e->uncollected = 1;
    e->last_ni = ni;
    e->lists_valid = 0;
    return 1;
}

static int eng_start(void *engine, int nj, int ni, const int *index, const double *x,
                     const double *v, const double *a, const double *jerk, double eps2,
                     const double *h2, int have_t, double t)
{
    return eng_code(engine, eng_start_ids(engine, nj, ni, index, 0, x, v, a, jerk, eps2, h2,
                                          have_t, t));
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The neighbour lists the kernels wrote on the nd devices (plans p[0 .. nd - 1]), as the
 * library gives them: per i-particle the ids every device stored (at most the capacity
 * each), ascending, the first capacity of them, and the full count (the devices' sum). */
static int eng_collect_lists(Engine *e, const struct dplan *p, int ni)
{
    const int nd = e->ndev, cap = p->nb_cap;
    size_t total = 0;
    for (int d = 0; d < nd; d++)
        for (int i = 0; i < ni; i++) {
            int c = p[d].nb_counts[i];
            total += (size_t)(c < cap ? (c > 0 ? c : 0) : cap);
        }
    if ((size_t)ni + 1 > e->nb_rows_cap) {
        int *o = PyMem_RawRealloc(e->nb_offsets, sizeof(int) * ((size_t)ni + 1));
        int *c = o == NULL ? NULL : PyMem_RawRealloc(e->nb_counts, sizeof(int) * ((size_t)ni + 1));
        if (o != NULL)
            e->nb_offsets = o;
        if (c == NULL)
            return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %d neighbour lists", ni);
        e->nb_counts = c;
        e->nb_rows_cap = (size_t)ni + 1;
    }
    if (total >= e->nb_ids_cap) {
        int *q = PyMem_RawRealloc(e->nb_ids, sizeof(int) * (total + 1));
        if (q == NULL)
            return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %zu neighbours", total);
        e->nb_ids = q;
        e->nb_ids_cap = total + 1;
    }
    e->nb_offsets[0] = 0;
    for (int i = 0; i < ni; i++) {
        int *dst = e->nb_ids + e->nb_offsets[i], found = 0, count = 0;
        for (int d = 0; d < nd; d++) {
            int c = p[d].nb_counts[i], stored = c < cap ? (c > 0 ? c : 0) : cap;
            memcpy(dst + found, p[d].nb_lists + (size_t)i * (size_t)cap,
                   sizeof(int) * (size_t)stored);
            found += stored;
            count += c;
        }
        qsort(dst, (size_t)found, sizeof(int), cmp_int);
        e->nb_counts[i] = count;
        e->nb_offsets[i + 1] = e->nb_offsets[i] + (found < cap ? found : cap);
    }
    e->lists_ni = ni;
    e->lists_valid = 1;
    return 0;
}

/* The started call's result rows into rows: ni, or -1 (error set; ENG_ERR_NONFINITE
 * names the first i-particle whose force is not finite, the rows written). */
static int eng_finish_rc(Engine *e, int ni, double *rows)
{
    struct dplan *p = e->last;
    int bad = 0, first = -1;
    e->code = ENG_ERR_BACKEND;
    if (!e->uncollected || (p == NULL && !e->empty) || ni != e->last_ni) {
        eng_wait(e);
        return eng_err(e, ENG_ERR_INPUT, "no force call of %d i-particles in flight", ni);
    }
    e->uncollected = 0;
    if (e->empty) {  /* no force, no neighbour (as the kernels say it: id -1, r^2 inf) */
        const int nco = e->dev[0].jside.nco;
        for (int r = 0; r < nco; r++)
            for (int i = 0; i < ni; i++)
                rows[(size_t)r * (size_t)ni + (size_t)i] = r == OC_NNID ? -1.0
                                                           : r == OC_NNR2 ? INFINITY : 0.0;
        return ni;
    }
    if (eng_wait(e) < 0)
        return -1;
    for (int i = 0; i < ni; i++) {
        double v[NCO_ORDER8];
        if (!result_row(p, e->ndev, i, v) && bad++ == 0)
            first = i;
        for (int r = 0; r < p->nco; r++)
            rows[(size_t)r * (size_t)ni + (size_t)i] = v[r];
    }
    if (bad)
        return eng_err(e, ENG_ERR_NONFINITE, "non-finite force on i-particle %d (id %d) and %d "
                       "other(s): %s", first,
                       (int)p->idata[(size_t)IC_ID * (size_t)p->ni_pad + (size_t)first], bad - 1,
                       p->ds ? "coincident particles with eps2 = 0, or pair terms beyond "
                       "single precision's range (~3e38: double-single computes them in "
                       "float; use N-body units or precision='double', see docs/accuracy.md)"
                       : "coincident particles with eps2 = 0, or overflow?");
    if (p->lists && eng_collect_lists(e, p, ni) < 0)
        return -1;
    return ni;
}

static int eng_finish(void *engine, int ni, double *rows)
{
    return eng_code(engine, eng_finish_rc(engine, ni, rows));
}

static int eng_lists(void *engine, int *ni, const int **offsets, const int **counts,
                     const int **ids)
{
    Engine *e = engine;
    if (!e->lists_valid)
        return 0;
    *ni = e->lists_ni;
    *offsets = e->nb_offsets;
    *counts = e->nb_counts;
    *ids = e->nb_ids;
    return 1;
}

static int eng_wait_api(void *engine)
{
    return eng_code(engine, eng_wait(engine));
}

static long eng_python_calls(void)
{
    return __atomic_load_n(&python_calls, __ATOMIC_RELAXED);
}

static int eng_order(void *engine)
{
    return ((Engine *)engine)->dev[0].jside.order;
}

static const char *eng_error(void *engine)
{
    return ((Engine *)engine)->error;
}

static const struct sapporo_engine_api engine_api = {
    SAPPORO_ENGINE_API_VERSION, eng_put_j, eng_start, eng_finish, eng_lists, eng_wait_api,
    eng_order, eng_error, eng_python_calls,
};

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

/* Room for n records in put_j's buffers (rec, address, index): 0, or -1 with MemoryError. */
static int put_room(Engine *e, Py_ssize_t n)
{
    double *rec;
    int *address, *index;
    if ((size_t)n <= e->put_cap)
        return 0;
    rec = PyMem_RawRealloc(e->rec, sizeof(double) * JB_DOUBLES * (size_t)n);
    if (rec != NULL)
        e->rec = rec;
    address = rec == NULL ? NULL : PyMem_RawRealloc(e->address, sizeof(int) * (size_t)n);
    if (address != NULL)
        e->address = address;
    index = address == NULL ? NULL : PyMem_RawRealloc(e->index, sizeof(int) * (size_t)n);
    if (index == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    e->index = index;
    e->put_cap = (size_t)n;
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

/* The arguments of start and compute, (x, v, index, eps2, a, jerk, t, nj, h2), started:
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
    double eps2, t;
    long nj;
    Py_ssize_t ni;
    int wide = 1, rc = 0;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "%s takes 9 arguments", name);
        return -1;
    }
    if (!ready(self))
        return -1;
    t = PyFloat_AsDouble(args[6]);
    nj = PyLong_AsLong(args[7]);
    if ((t == -1.0 || nj == -1) && PyErr_Occurred())
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
    if (args[8] != Py_None) {
        int any = 0;
        if ((b = f64_view(args[8], ni, 0, &s)) == NULL)
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
    rc = py_rc(self, eng_start_ids(self, (int)nj, (int)ni, ids, wide, xv, vv, av, jv, eps2, h2,
                                   1, t));
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

/* start(x, v, index, eps2, a, jerk, t, nj, h2) -> ni when started, 0 when the library is to
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

/* compute(x, v, index, eps2, a, jerk, t, nj, h2) -> start and finish: ni when done (rows in
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

/* shape(nj, ni, lists) -> per device (small, ni_pad, parts, jchunk, reduce) of the launches
 * a force call of this shape would make (its plans made if need be), or None when the
 * engine would not take it */
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
                "{s:O,s:i,s:i,s:i,s:O}", "small", p->small ? Py_True : Py_False,
                "ni_pad", p->ni_pad, "parts", (int)(p->force.global[1] / (size_t)p->lj),
                "jchunk", (int)jchunk, "reduce", p->reduce.kernel != NULL ? Py_True : Py_False));
        }
    PyMem_RawFree(call);
    return out;
}

static PyMethodDef Engine_methods[] = {
    {"shape", (PyCFunction)Engine_shape, METH_VARARGS,
     "shape(nj, ni, lists) -> [{small, ni_pad, parts, jchunk, reduce} per device] or None"},
    {"put_j", (PyCFunction)(void (*)(void))Engine_put_j, METH_FASTCALL,
     "put_j(address, index, t, mass, x, v, a, jerk, snap, crackle, pop, d5) -> bool"},
    {"compute", (PyCFunction)(void (*)(void))Engine_compute, METH_FASTCALL,
     "compute(x, v, index, eps2, a, jerk, t, nj, h2) -> ni or 0"},
    {"start", (PyCFunction)(void (*)(void))Engine_start, METH_FASTCALL,
     "start(x, v, index, eps2, a, jerk, t, nj, h2) -> ni or 0"},
    {"finish", (PyCFunction)Engine_finish, METH_O, "finish(ni) -> ni"},
    {"lists", (PyCFunction)(void (*)(void))Engine_lists, METH_FASTCALL,
     "lists(counts, table) -> bool: the last call's neighbour lists into the arrays"},
    {"wait", (PyCFunction)Engine_wait, METH_NOARGS, "wait for the force call in flight"},
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
