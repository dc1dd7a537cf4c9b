/*
 * engine.h -- a block step run from C on a plan the library's Python side made: the part of
 * the direct path shared by the C API (capi/direct.c, included by shim.c) and the Python
 * API's compiled step (sapporo/core/_step.c).
 *
 * A plan (struct dplan) is a force call of a given shape, as sapporo.core.device prepared it: the
 * buffers, the kernels with their arguments, the queues.  Python hands it over as int64 words
 * at the offsets DP_* and DL_* of sapporo/plan.h (Library._direct_plan,
 * sapporo.core.engine.plan_words).  From it, C checks j- and i-particles the way the
 * library does, writes j-records into the host mirror and the device's records (the device
 * computes on host memory), queues the prediction and the force kernels through the OpenCL
 * entry points PyOpenCL uses, waits, and combines the parts in the order of
 * sapporo.core.device.combine_parts (the same bits as the Python way).
 *
 * Static functions only; no global state (the includers keep theirs).
 */
#ifndef SAPPORO_ENGINE_H
#define SAPPORO_ENGINE_H

#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "layout.h"
#include "plan.h"

/* j-particles as the library's raw records (sapporo/layout.h: RAW_XM x|mass, RAW_VT v|t, then
 * a, jerk, snap, crackle, pop, d5 with a zero .w): JB_RECORDS double4 per particle. */
#define JB_RECORDS 8
#define JB_DOUBLES (4 * JB_RECORDS)
/* positions at or beyond this magnitude are refused: squared distances would overflow
 * double (sapporo.core.validate.COORD_LIMIT) */
#define COORD_LIMIT 1e150
/* the smallest normal float: double-single loses smaller non-zero masses (library.FLT_MIN) */
#define ENGINE_FLT_MIN 1.1754943508222875e-38

/* The OpenCL 1.2 entry points used here (no OpenCL headers needed: handles are pointers). */
typedef int32_t dcl_int;
typedef dcl_int (*dcl_set_arg_fn)(void *kernel, uint32_t index, size_t size, const void *value);
typedef dcl_int (*dcl_enqueue_fn)(void *queue, void *kernel, uint32_t dims, const size_t *offset,
                                 const size_t *global, const size_t *local, uint32_t nwait,
                                 const void *wait, void **event);
typedef dcl_int (*dcl_queue_fn)(void *queue);
typedef dcl_int (*dcl_event_info_fn)(void *event, uint32_t param, size_t size, void *value,
                                    size_t *size_ret);
typedef dcl_int (*dcl_event_fn)(void *event);
#define DCL_EVENT_COMMAND_EXECUTION_STATUS 0x11D3

/* The plan table: DP_* words and, for each of the two launches (prediction, force), DL_*:
 * queue, kernel, the argument set per call and its position, dims, global[2], local[2],
 * nargs, then nargs pairs (size, value bits). The enums are in plan.h, which Python reads
 * too. */
_Static_assert(DP_LAUNCH_WORDS == DL_ARGS + 2 * DP_MAX_ARGS, "plan.h: DP_LAUNCH_WORDS");
_Static_assert(DP_WORDS == DP_LAUNCHES + 2 * DP_LAUNCH_WORDS, "plan.h: DP_WORDS");

struct dlaunch {
    void *queue, *kernel;
    int call_arg, ni_arg, dims, nargs;
    size_t global[2], local[2];
    size_t arg_size[DP_MAX_ARGS];
    uint64_t arg_value[DP_MAX_ARGS];
};

struct dplan {
    long epoch;       /* the includer's validity mark (direct.c: equal to direct.epoch) */
    int status, nj, ni, lists;
    int32_t *nb_counts, *nb_lists;  /* with lists: (ni_pad) counts, (ni_pad, nb_cap) ids */
    int nb_cap;
    int order, nci, nco, ni_pad, nparts, raw_n, pred_terms, n_stored, ds, check_rows;
    long spin_ns;
    double time0;     /* the library's time when the plan was made */
    long max_id;
    double *idata, *out, *mirror_raw, *dev_raw;
    int64_t *mirror_ids;
    int32_t *dev_ids;
    dcl_set_arg_fn set_arg;
    dcl_enqueue_fn enqueue;
    dcl_queue_fn flush, finish;
    dcl_event_info_fn event_info;
    dcl_event_fn release;
    struct dlaunch predict, force;
};

/* Whether a neighbour radius squared asks for a list: finite and positive.  Anything else
 * (zero, negative, NaN, infinite: clients pass uninitialised arrays) gives that i-particle no
 * list, and never costs its forces. */
static int wants_list(double h2)
{
    return isfinite(h2) && h2 > 0.0;
}

static int finite3(const double *p)
{
    return p == NULL || (isfinite(p[0]) && isfinite(p[1]) && isfinite(p[2]));
}

static double bits_to_double(int64_t w)
{
    double d;
    memcpy(&d, &w, sizeof d);
    return d;
}

static void unpack_launch(struct dlaunch *l, const int64_t *w)
{
    l->queue = (void *)(intptr_t)w[DL_QUEUE];
    l->kernel = (void *)(intptr_t)w[DL_KERNEL];
    l->call_arg = (int)w[DL_CALL_ARG];
    l->ni_arg = (int)w[DL_NI_ARG];
    l->dims = (int)w[DL_DIMS];
    l->global[0] = (size_t)w[DL_G0];
    l->global[1] = (size_t)w[DL_G1];
    l->local[0] = (size_t)w[DL_L0];
    l->local[1] = (size_t)w[DL_L1];
    l->nargs = (int)w[DL_NARGS];
    for (int k = 0; k < l->nargs && k < DP_MAX_ARGS; k++) {
        l->arg_size[k] = (size_t)w[DL_ARGS + 2 * k];
        l->arg_value[k] = (uint64_t)w[DL_ARGS + 2 * k + 1];
    }
}

/* A plan's words into *p (epoch 0), for ni i-particles on nj j-addresses; 0, or -1 for a
 * table this code does not understand. */
static int plan_unpack(struct dplan *p, const int64_t *w, int nj, int ni, int lists)
{
    memset(p, 0, sizeof *p);
    p->nj = nj;
    p->ni = ni;
    p->lists = lists;
    p->status = (int)w[DP_STATUS];
    p->order = (int)w[DP_ORDER];
    p->nci = (int)w[DP_NCI];
    p->nco = (int)w[DP_NCO];
    p->ni_pad = (int)w[DP_NI_PAD];
    p->nparts = (int)w[DP_NPARTS];
    p->raw_n = (int)w[DP_RAW_N];
    p->pred_terms = (int)w[DP_PRED_TERMS];
    p->n_stored = (int)w[DP_N_STORED];
    p->ds = (int)w[DP_DS];
    p->check_rows = (int)w[DP_CHECK_ROWS];
    p->spin_ns = (long)w[DP_SPIN_NS];
    p->time0 = bits_to_double(w[DP_TIME_BITS]);
    p->max_id = (long)w[DP_MAX_ID];
    p->idata = (double *)(intptr_t)w[DP_IDATA];
    p->out = (double *)(intptr_t)w[DP_OUT];
    p->mirror_raw = (double *)(intptr_t)w[DP_MIRROR_RAW];
    p->mirror_ids = (int64_t *)(intptr_t)w[DP_MIRROR_IDS];
    p->dev_raw = (double *)(intptr_t)w[DP_DEV_RAW];
    p->dev_ids = (int32_t *)(intptr_t)w[DP_DEV_IDS];
    p->nb_counts = (int32_t *)(intptr_t)w[DP_NB_COUNTS];
    p->nb_lists = (int32_t *)(intptr_t)w[DP_NB_LISTS];
    p->nb_cap = (int)w[DP_NB_CAP];
    p->set_arg = (dcl_set_arg_fn)(intptr_t)w[DP_FN_SET_ARG];
    p->enqueue = (dcl_enqueue_fn)(intptr_t)w[DP_FN_ENQUEUE];
    p->flush = (dcl_queue_fn)(intptr_t)w[DP_FN_FLUSH];
    p->finish = (dcl_queue_fn)(intptr_t)w[DP_FN_FINISH];
    p->event_info = (dcl_event_info_fn)(intptr_t)w[DP_FN_EVENT_INFO];
    p->release = (dcl_event_fn)(intptr_t)w[DP_FN_RELEASE];
    if (w[DL_NARGS + DP_LAUNCHES] > DP_MAX_ARGS
        || w[DL_NARGS + DP_LAUNCHES + DP_LAUNCH_WORDS] > DP_MAX_ARGS)
        return -1;
    unpack_launch(&p->predict, w + DP_LAUNCHES);
    unpack_launch(&p->force, w + DP_LAUNCHES + DP_LAUNCH_WORDS);
    if (p->predict.nargs < 0 || p->force.nargs < 0 || p->nparts < 1
        || p->ni_pad < ni || p->nco > NCO_ORDER8 || p->nci > NCI_ORDER8
        || p->raw_n < 2 || p->raw_n > JB_RECORDS
        || !(w[DP_NI_LO] <= ni && ni <= w[DP_NI_HI] && w[DP_NI_HI] <= p->ni_pad)
        || (lists && (p->nb_counts == NULL || p->nb_lists == NULL || p->nb_cap < 1)))
        return -1;
    return 0;
}

/* Set a launch's arguments (call_value at its call argument, ni at its ni argument) and
 * queue it; the OpenCL error code (0: queued). */
static dcl_int plan_launch(const struct dplan *p, const struct dlaunch *l, uint64_t call_value,
                           int ni, void **event)
{
    dcl_int rc = 0;
    for (int k = 0; k < l->nargs && rc == 0; k++) {
        uint64_t v = k == l->call_arg ? call_value : l->arg_value[k];
        if (k == l->ni_arg) {
            int32_t n32 = ni;
            v = 0;
            memcpy(&v, &n32, sizeof n32);
        }
        rc = p->set_arg(l->kernel, (uint32_t)k, l->arg_size[k], &v);
    }
    if (rc == 0)
        rc = p->enqueue(l->queue, l->kernel, (uint32_t)l->dims, NULL, l->global,
                        l->local[0] > 0 ? l->local : NULL, 0, NULL, event);
    return rc;
}

/* Wait for a launch queued on queue (its event ev, or NULL), polling for p->spin_ns before
 * sleeping (a sleeping wait costs a thread wake-up, tens of us); releases ev. 0 when it
 * completed; else the OpenCL error, and *status its execution status. */
static dcl_int plan_wait(const struct dplan *p, void *queue, void *ev, dcl_int *status)
{
    dcl_int rc;
    *status = 1;
    p->flush(queue);
    if (p->spin_ns > 0 && ev != NULL) {
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            if (p->event_info(ev, DCL_EVENT_COMMAND_EXECUTION_STATUS, sizeof *status, status,
                              NULL) != 0 || *status <= 0)
                break;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > p->spin_ns)
                break;
            sched_yield();
        }
    }
    rc = p->finish(queue);
    if (ev != NULL)
        p->release(ev);
    return rc != 0 ? rc : (*status < 0 ? *status : 0);
}

/* Whether n j-records (JB_DOUBLES each, at rec) can be stored as they are: addresses below
 * limit, no derivative record beyond read_terms + 1 (record q, a = 2, jerk = 3, ..., is read
 * when q - 1 <= read_terms) nor beyond the library's raw_n records, masses double-single
 * (ds) can hold. */
static int records_ok(int n, const int *address, const double *rec, int limit, int raw_n,
                      int read_terms, int ds)
{
    for (int k = 0; k < n; k++) {
        const double *r = rec + (size_t)JB_DOUBLES * k;
        if (address[k] >= limit)
            return 0;
        for (int q = JB_RECORDS - 1; q > read_terms + 1 || q >= raw_n; q--)
            if (q >= 2 && (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0))
                return 0;
        if (ds && r[3] != 0.0 && fabs(r[3]) < ENGINE_FLT_MIN)
            return 0;
    }
    return 1;
}

/* n j-records into the host mirror and the device's records (in order: a repeated address
 * keeps its last record, as in the library). */
static void records_write(int n, const int *address, const int *index, const double *rec,
                          double *mirror_raw, int64_t *mirror_ids, double *dev_raw,
                          int32_t *dev_ids, int raw_n)
{
    const size_t len = 4 * (size_t)raw_n;
    for (int k = 0; k < n; k++) {
        size_t a = (size_t)address[k];
        const double *r = rec + (size_t)JB_DOUBLES * k;
        memcpy(mirror_raw + a * len, r, sizeof(double) * len);
        memcpy(dev_raw + a * len, r, sizeof(double) * len);
        mirror_ids[a] = index[k];
        dev_ids[a] = index[k];
    }
}

/* i-particle i's id: index holds int64 (wide) or int values. */
static long id_at(const void *index, int wide, int i)
{
    return wide ? (long)((const int64_t *)index)[i] : (long)((const int *)index)[i];
}

/* Whether the library would take these i-particles as they are (index: their ids, int64
 * when wide, else int).  Only what the order reads is checked (velocities from order 4,
 * accelerations from 6, jerks at 8); h2 not at all: any value is taken (wants_list). */
static int i_ok(const struct dplan *p, int ni, const void *index, int wide, const double *xi,
                const double *vi, const double *ai, const double *ji, double eps2,
                const double *h2)
{
    (void)h2;
    if (!(isfinite(eps2) && eps2 >= 0.0))
        return 0;
    if ((p->order >= 6 && ai == NULL) || (p->order >= 8 && ji == NULL))
        return 0;
    for (int i = 0; i < ni; i++) {
        const double *x = xi + 3 * i;
        if (!(fabs(x[0]) < COORD_LIMIT && fabs(x[1]) < COORD_LIMIT && fabs(x[2]) < COORD_LIMIT)
            || (p->order >= 4 && !finite3(vi + 3 * i)) || (p->order >= 6 && !finite3(ai + 3 * i))
            || (p->order >= 8 && !finite3(ji + 3 * i))
            || id_at(index, wide, i) < 0 || id_at(index, wide, i) > p->max_id)
            return 0;
    }
    return 1;
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

/* The parts of row r, i-particle i, combined as sapporo.core.device.combine_parts does: lane l
 * adds parts l, l + L, l + 2L, ... in order, then lane l + s is added into lane l for
 * s = L/2, ..., 1 (where that lane holds parts). */
static double combine_sum(const struct dplan *p, int r, int i)
{
    double lane[REDUCE_LANES];
    const size_t part = (size_t)p->nco * (size_t)p->ni_pad;
    const double *o = p->out + (size_t)r * (size_t)p->ni_pad + (size_t)i;
    int n = p->nparts, lanes = n < REDUCE_LANES ? n : REDUCE_LANES;
    if (n == 1)
        return o[0];
    for (int l = 0; l < lanes; l++) {
        double x = o[part * (size_t)l];
        for (int k = l + REDUCE_LANES; k < n; k += REDUCE_LANES)
            x += o[part * (size_t)k];
        lane[l] = x;
    }
    for (int s = REDUCE_LANES / 2; s >= 1; s /= 2)
        for (int l = 0; l < s && l + s < lanes; l++)
            lane[l] += lane[l + s];
    return lane[0];
}

/* i-particle i's result rows v[0 .. nco - 1], combined over the parts; the nearest neighbour
 * is the smallest r^2 among the parts that found one, ties to the lower id (none found:
 * id -1, r^2 inf). 0 when a checked row (p->check_rows) is not finite, else 1. */
static int result_row(const struct dplan *p, int i, double *v)
{
    const size_t part = (size_t)p->nco * (size_t)p->ni_pad;
    const double *o = p->out + (size_t)i;
    double best = INFINITY, id = INFINITY;
    for (int k = 0; k < p->nparts; k++) {
        double pid = o[part * k + (size_t)OC_NNID * p->ni_pad];
        double r2 = o[part * k + (size_t)OC_NNR2 * p->ni_pad];
        if (pid >= 0.0 && (r2 < best || (r2 == best && pid < id))) {
            best = r2;
            id = pid;
        }
    }
    for (int r = 0; r < p->nco; r++)
        v[r] = combine_sum(p, r, i);
    for (int r = 0; r < p->nco; r++)
        if ((p->check_rows >> r) & 1 && !isfinite(v[r]))
            return 0;
    if (id < INFINITY) {
        v[OC_NNID] = id;
        v[OC_NNR2] = best;
    }
    else {
        v[OC_NNID] = -1.0;
        v[OC_NNR2] = INFINITY;
    }
    return 1;
}

#endif
