/*
 * direct.c -- the C API's block steps without a crossing into Python (included by shim.c).
 *
 * A block step of a GRAPE-6 client (a few j-particles stored, g6_set_ti, firsthalf and
 * lasthalf on a few i-particles) costs 50-100 us of Python around 10-50 us of kernels on a
 * CPU.  Here the library's Python side (capi/bridge.py: Bridge.direct_plan) prepares a
 * force call once per shape -- the launch plan of sapporo.device, with its buffers, kernel
 * arguments and queues -- and hands it over as a table of numbers; C then runs such steps
 * itself: j-particles written into the host mirror and the device's records, the prediction
 * and force kernels queued through the OpenCL entry points that PyOpenCL uses, the parts
 * combined in the order of sapporo.device.combine_parts (same bits), the results written
 * to the client's arrays.
 *
 * Only what Python planned runs here: one OpenCL device that computes on host memory (a
 * CPU), any order, parts combined on the host; neighbour lists too.  Everything else
 * -- new addresses, a derivative the predictor does not read yet, a value the library would
 * refuse, a non-finite force -- goes the Python way, which gives the usual errors; every
 * crossing into Python makes the plans stale (epoch), and Python forgets what it assumed
 * about the device (Bridge.after_direct).  SAPPORO_CAPI_DIRECT=0 turns this path off.
 */
#include <sched.h>
#include <stdint.h>
#include <time.h>

#include "layout.h"

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

/* The plan table written by Bridge.direct_plan: int64 words at the offsets DP_* and, for
 * each of the two launches (prediction, force), DL_*: queue, kernel, the argument set per
 * call and its position, dims, global[2], local[2], nargs, then nargs pairs (size, value
 * bits). The enums are in bridge.h, which Python reads too. */
_Static_assert(DP_LAUNCH_WORDS == DL_ARGS + 2 * DP_MAX_ARGS, "bridge.h: DP_LAUNCH_WORDS");
_Static_assert(DP_WORDS == DP_LAUNCHES + 2 * DP_LAUNCH_WORDS, "bridge.h: DP_WORDS");

struct dlaunch {
    void *queue, *kernel;
    int call_arg, ni_arg, dims, nargs;
    size_t global[2], local[2];
    size_t arg_size[DP_MAX_ARGS];
    uint64_t arg_value[DP_MAX_ARGS];
};

struct dplan {
    long epoch;       /* valid while equal to direct.epoch */
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

static struct {
    int off;              /* -1: never (SAPPORO_CAPI_DIRECT=0, or not this library) */
    long calls;           /* force calls run here in this process */
    long epoch;           /* bumped by every crossing into Python that may change its state */
    struct dplan *plans[2];  /* by [lists][ni] (ni 1 .. npipes) */
    int nplans[2];
    long gen;             /* the device's buffer generation of the cached plans */
    int pred_valid;       /* the device's predicted records are those of pred_time */
    double pred_time;
    void *inflight_queue; /* a force launch not yet waited for */
    void *inflight_event;
    struct dplan *inflight_plan;
    struct dplan *inflight_plan_done;  /* the plan of the last direct force call */
    int inflight_ni;
    int last_ni;          /* the last result came from here, for ni i-particles (0: not) */
    int last_lists;       /* ... and had neighbour lists (in nb_*) */
    int *nb_offsets, *nb_counts, *nb_ids;  /* the lists of the last result, as CSR */
    size_t nb_offsets_cap, nb_ids_cap;
    int redo_nj;          /* the direct force call's nj and eps2, to redo it Python's way */
    double redo_eps2;
    int *zeros;           /* empty neighbour lists of a direct result */
    int zeros_n;
} direct;

/* warm.c: an open served without Python (defined there, after this file) */
static int warm_is_active(void);
static int warm_store(void);
static struct dplan *warm_plan(int nj, int ni, int lists);
static int warm_handover(const char *why);

/* the time of the steps: g6_set_ti's, kept also for the Python way */
static int have_time;
static double cur_time;

static void direct_reset(void)
{
    long calls = direct.calls;  /* counted over the whole process */
    free(direct.plans[0]);
    free(direct.plans[1]);
    free(direct.zeros);
    free(direct.nb_offsets);
    free(direct.nb_counts);
    free(direct.nb_ids);
    memset(&direct, 0, sizeof direct);
    direct.calls = calls;
    have_time = 0;
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

static double bits_to_double(int64_t w)
{
    double d;
    memcpy(&d, &w, sizeof d);
    return d;
}

/* Wait for the force launch in flight, if any (before anything touches its memory). */
static int direct_wait(void)
{
    struct dplan *p = direct.inflight_plan;
    void *ev = direct.inflight_event;
    dcl_int rc = 0, status = 1;
    if (p == NULL)
        return 0;
    direct.inflight_plan = NULL;
    direct.inflight_event = NULL;
    p->flush(direct.inflight_queue);
    if (p->spin_ns > 0 && ev != NULL) {
        /* poll before sleeping: a sleeping wait costs a thread wake-up (tens of us) */
        struct timespec t0, t;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (;;) {
            if (p->event_info(ev, DCL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                              NULL) != 0 || status <= 0)
                break;
            clock_gettime(CLOCK_MONOTONIC, &t);
            if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > p->spin_ns)
                break;
            sched_yield();
        }
    }
    rc = p->finish(direct.inflight_queue);
    if (ev != NULL)
        p->release(ev);
    if (rc != 0 || status < 0) {
        direct.off = -1;
        return fail(SAPPORO_ERR_BACKEND, "OpenCL error %d waiting for the force kernel "
                    "(status %d); the C API's direct path is off from now on",
                    rc != 0 ? rc : status, status);
    }
    return 0;
}

/* Before a crossing into Python: nothing in flight, and the plans stale afterwards. */
static int direct_before_python(void)
{
    int rc = direct_wait();
    direct.epoch++;
    direct.pred_valid = 0;
    return rc;
}

/* The plan for ni i-particles and nj j-addresses: from the cache, else asked of Python. */
/* Room for plans[lists][0 .. n - 1]; 0, or -1 when out of memory. */
static int direct_room(int lists, int n)
{
    struct dplan *q;
    if (n <= direct.nplans[lists])
        return 0;
    if ((q = realloc(direct.plans[lists], sizeof *q * (size_t)n)) == NULL)
        return -1;
    memset(q + direct.nplans[lists], 0, sizeof *q * (size_t)(n - direct.nplans[lists]));
    direct.plans[lists] = q;
    direct.nplans[lists] = n;
    return 0;
}

/* A plan's words (bridge.h) into *p, for ni i-particles on nj j-addresses; 0, or -1 for a
 * table this code does not understand. */
static int plan_unpack(struct dplan *p, const int64_t *w, int nj, int ni, int lists)
{
    memset(p, 0, sizeof *p);
    p->epoch = direct.epoch;
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

/* The plan for ni i-particles and nj j-addresses: from the cache, else asked of Python
 * (an open served by warm.c has only the plans of its recipe). */
static struct dplan *direct_plan(int nj, int ni, int lists)
{
    struct dplan *p;
    int64_t w[DP_WORDS];
    if (direct.off || direct_room(lists, ni + 1) < 0)
        return NULL;
    p = &direct.plans[lists][ni];
    if (warm_is_active())
        return warm_plan(nj, ni, lists);
    if (p->epoch == direct.epoch && p->nj == nj && p->ni == ni && p->status != 0)
        return p->status > 0 ? p : NULL;
    memset(w, 0, sizeof w);
    /* the plan is made on the library's state: anything in flight first */
    if (direct_wait() < 0 || shim_py_direct_plan(nj, ni, lists, w, DP_WORDS) < 0) {
        direct.off = -1;  /* Python printed why */
        return NULL;
    }
    /* making the plan synchronised the library (a crossing); earlier plans stay valid:
     * it stored nothing and predicted to the library's own time */
    direct.pred_valid = 0;
    if (w[DP_STATUS] > 0 && w[DP_GEN] != direct.gen) {
        /* Python reallocated buffers for this plan: the other plans point at freed ones */
        direct.epoch++;
        direct.gen = (long)w[DP_GEN];
    }
    if (w[DP_STATUS] < 0) {
        direct.off = -1;
        return NULL;
    }
    if (w[DP_STATUS] == 0) {
        memset(p, 0, sizeof *p);
        p->epoch = direct.epoch;
        p->nj = nj;
        p->ni = ni;
        p->lists = lists;
        p->status = -1;  /* not for this shape until the plans go stale */
        return NULL;
    }
    if (plan_unpack(p, w, nj, ni, lists) < 0) {
        p->status = 0;
        direct.off = -1;  /* a table this code does not understand: Python's way only */
        return NULL;
    }
    /* the same plan serves the other block sizes of its launch shape */
    if (direct_room(lists, (int)w[DP_NI_HI] + 1) < 0)
        return p;  /* only this one, then */
    p = &direct.plans[lists][ni];
    for (int k = (int)w[DP_NI_LO]; k <= (int)w[DP_NI_HI]; k++)
        if (k != ni) {
            direct.plans[lists][k] = *p;
            direct.plans[lists][k].ni = k;
        }
    return p;
}

static int launch(struct dplan *p, struct dlaunch *l, uint64_t call_value, int ni,
                  void **event)
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
    if (rc != 0) {
        direct.off = -1;
        return fail(SAPPORO_ERR_BACKEND, "OpenCL error %d queueing a kernel; the C API's "
                    "direct path is off from now on", rc);
    }
    return 0;
}

/* Whether the buffered j-particles can be stored on the C side: addresses below limit, no
 * derivative record beyond read_terms + 1 (derivative record q, a = 2, jerk = 3, ..., is
 * read when q - 1 <= read_terms) nor beyond the library's raw_n records, masses
 * double-single (ds) can hold. */
static int j_records_ok(int limit, int raw_n, int read_terms, int ds)
{
    for (int k = 0; k < jb.n; k++) {
        const double *r = jb.rec + (size_t)JB_DOUBLES * k;
        if (jb.address[k] >= limit)
            return 0;
        for (int q = JB_RECORDS - 1; q > read_terms + 1 || q >= raw_n; q--)
            if (q >= 2 && (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0))
                return 0;
        if (ds && r[3] != 0.0 && fabs(r[3]) < 1.17549435e-38)
            return 0;
    }
    return 1;
}

static int direct_j_ok(const struct dplan *p)
{
    return j_records_ok(p->n_stored, p->raw_n, p->pred_terms, p->ds);
}

/* The buffered j-particles into the host mirror and the device's records (the device
 * computes on host memory: nothing to copy). */
static void j_write(double *mirror_raw, int64_t *mirror_ids, double *dev_raw, int32_t *dev_ids,
                    int raw_n)
{
    const size_t rec = 4 * (size_t)raw_n;
    for (int k = 0; k < jb.n; k++) {
        size_t a = (size_t)jb.address[k];
        const double *r = jb.rec + (size_t)JB_DOUBLES * k;
        memcpy(mirror_raw + a * rec, r, sizeof(double) * rec);
        memcpy(dev_raw + a * rec, r, sizeof(double) * rec);
        mirror_ids[a] = jb.index[k];
        dev_ids[a] = jb.index[k];
    }
}

/* Whether the library would take these i-particles as they are. */
static int direct_i_ok(const struct dplan *p, int ni, const int *index, const double *xi,
                       const double *vi, const double *ai, const double *ji, double eps2,
                       const double *h2)
{
    if (!(isfinite(eps2) && eps2 >= 0.0))
        return 0;
    if ((p->order >= 6 && ai == NULL) || (p->order >= 8 && ji == NULL))
        return 0;
    for (int i = 0; i < ni; i++) {
        const double *x = xi + 3 * i;
        if (!(fabs(x[0]) < COORD_LIMIT && fabs(x[1]) < COORD_LIMIT && fabs(x[2]) < COORD_LIMIT)
            || !finite3(vi + 3 * i) || (p->order >= 6 && !finite3(ai + 3 * i))
            || (p->order >= 8 && !finite3(ji + 3 * i))
            || index[i] < 0 || index[i] > p->max_id)
            return 0;
        if (h2 != NULL && !isfinite(h2[i]))
            return 0;  /* Python refuses it */
    }
    return 1;
}

/* firsthalf on the direct path: 1 when started here, 0 to go Python's way, < 0 an error. */
static int direct_start(int nj, int ni, const int *index, const double *xi, const double *vi,
                        const double *ai, const double *ji, double eps2, const double *h2)
{
    struct dplan *p;
    double t;
    int rc, lists = 0;
    void *ev = NULL;
    if (direct.off || nj < 1)
        return 0;
    for (int i = 0; h2 != NULL && i < ni && !lists; i++)
        lists = h2[i] > 0.0;
    /* nothing in flight from here on (the plans may move in memory) */
    if ((rc = direct_wait()) < 0)
        return rc;
    if (warm_is_active() && !warm_store())
        return 0;
    if ((p = direct_plan(nj, ni, lists)) == NULL)
        return 0;
    if (nj > p->n_stored || !direct_j_ok(p)
        || !direct_i_ok(p, ni, index, xi, vi, ai, ji, eps2, h2))
        return 0;
    j_write(p->mirror_raw, p->mirror_ids, p->dev_raw, p->dev_ids, p->raw_n);
    t = have_time ? cur_time : p->time0;
    if (jb.n > 0 || !direct.pred_valid || direct.pred_time != t) {
        uint64_t tb;
        memcpy(&tb, &t, sizeof tb);
        direct.pred_valid = 0;
        if ((rc = launch(p, &p->predict, tb, ni, NULL)) < 0)
            return rc;
        if (p->predict.queue != p->force.queue && p->finish(p->predict.queue) != 0) {
            direct.off = -1;
            return fail(SAPPORO_ERR_BACKEND, "OpenCL error waiting for the prediction");
        }
        direct.pred_valid = 1;
        direct.pred_time = t;
    }
    jb_clear();
    /* the i-particles, in the rows of layout.h; the padding repeats the last one */
    for (int i = 0; i < p->ni_pad; i++) {
        int s = i < ni ? i : ni - 1;
        double *d = p->idata + i;
        size_t st = (size_t)p->ni_pad;
        d[IC_X * st] = xi[3 * s];
        d[IC_Y * st] = xi[3 * s + 1];
        d[IC_Z * st] = xi[3 * s + 2];
        /* a negative radius among positive ones: an empty list (as through Python) */
        d[IC_H2 * st] = lists && h2[s] > 0.0 ? h2[s] : 0.0;
        d[IC_VX * st] = vi[3 * s];
        d[IC_VY * st] = vi[3 * s + 1];
        d[IC_VZ * st] = vi[3 * s + 2];
        d[IC_ID * st] = (double)index[s];
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
    if (lists)
        memset(p->nb_counts, 0, sizeof(int32_t) * (size_t)p->ni_pad);
    {
        uint64_t eb;
        memcpy(&eb, &eps2, sizeof eb);
        if ((rc = launch(p, &p->force, eb, ni, &ev)) < 0)
            return rc;
    }
    direct.inflight_plan = direct.inflight_plan_done = p;
    direct.inflight_queue = p->force.queue;
    direct.inflight_event = ev;
    direct.inflight_ni = ni;
    return 1;
}

/* The parts of row r, i-particle i, combined as sapporo.device.combine_parts does: lane l
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

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* The neighbour lists the kernel wrote, as Python gives them (ForceResult.neighbours, the
 * bridge's CSR arrays): per i-particle the stored ids ascending, at most the capacity, and
 * the full count. */
static int direct_collect_lists(const struct dplan *p, int ni)
{
    size_t total = 0;
    for (int i = 0; i < ni; i++) {
        int c = p->nb_counts[i];
        total += (size_t)(c < p->nb_cap ? (c > 0 ? c : 0) : p->nb_cap);
    }
    if ((size_t)ni + 1 > direct.nb_offsets_cap) {
        int *o = realloc(direct.nb_offsets, sizeof(int) * ((size_t)ni + 1));
        int *c = realloc(direct.nb_counts, sizeof(int) * ((size_t)ni + 1));
        if (o != NULL)
            direct.nb_offsets = o;
        if (c != NULL)
            direct.nb_counts = c;
        if (o == NULL || c == NULL)
            return fail(SAPPORO_ERR_INTERNAL, "out of memory for %d neighbour lists", ni);
        direct.nb_offsets_cap = (size_t)ni + 1;
    }
    if (total > direct.nb_ids_cap || direct.nb_ids == NULL) {
        int *q = realloc(direct.nb_ids, sizeof(int) * (total > 0 ? total : 1));
        if (q == NULL)
            return fail(SAPPORO_ERR_INTERNAL, "out of memory for %zu neighbours", total);
        direct.nb_ids = q;
        direct.nb_ids_cap = total > 0 ? total : 1;
    }
    direct.nb_offsets[0] = 0;
    for (int i = 0; i < ni; i++) {
        int c = p->nb_counts[i], stored = c < p->nb_cap ? (c > 0 ? c : 0) : p->nb_cap;
        int *dst = direct.nb_ids + direct.nb_offsets[i];
        memcpy(dst, p->nb_lists + (size_t)i * (size_t)p->nb_cap, sizeof(int) * (size_t)stored);
        qsort(dst, (size_t)stored, sizeof(int), cmp_int);
        direct.nb_counts[i] = c;
        direct.nb_offsets[i + 1] = direct.nb_offsets[i] + stored;
    }
    return 0;
}

/* lasthalf on the direct path (a direct firsthalf ran): the results into the client's
 * arrays; 1 when done, 0 when Python must redo the call (a non-finite result: its message). */
static int direct_finish(int ni, double *acc, double *jerk, double *snap, double *crackle,
                         double *pot, int *nnb, double *nn_r2)
{
    struct dplan *p = direct.inflight_plan;
    int rc;
    const size_t part = (size_t)p->nco * (size_t)p->ni_pad;
    if ((rc = direct_wait()) < 0)
        return rc;
    for (int i = 0; i < ni; i++) {
        double v[NCO_ORDER8];
        /* nearest neighbour: the smallest r^2 among the parts that found one, ties to the
         * lower id; none found: part 0's r^2 and id -1 */
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
        if (acc != NULL) {
            acc[3 * i] = v[OC_AX];
            acc[3 * i + 1] = v[OC_AY];
            acc[3 * i + 2] = v[OC_AZ];
        }
        if (pot != NULL)
            pot[i] = v[OC_POT];
        if (jerk != NULL) {
            int on = p->order >= 4;
            jerk[3 * i] = on ? v[OC_JX] : 0.0;
            jerk[3 * i + 1] = on ? v[OC_JY] : 0.0;
            jerk[3 * i + 2] = on ? v[OC_JZ] : 0.0;
        }
        if (snap != NULL) {
            int on = p->order >= 6;
            snap[3 * i] = on ? v[OC_SX] : 0.0;
            snap[3 * i + 1] = on ? v[OC_SY] : 0.0;
            snap[3 * i + 2] = on ? v[OC_SZ] : 0.0;
        }
        if (crackle != NULL) {
            int on = p->order >= 8;
            crackle[3 * i] = on ? v[OC_CX] : 0.0;
            crackle[3 * i + 1] = on ? v[OC_CY] : 0.0;
            crackle[3 * i + 2] = on ? v[OC_CZ] : 0.0;
        }
        if (nnb != NULL)
            nnb[i] = (int)v[OC_NNID];
        if (nn_r2 != NULL)
            nn_r2[i] = v[OC_NNR2];
    }
    direct.last_ni = ni;
    direct.last_lists = p->lists;
    if (p->lists && (rc = direct_collect_lists(p, ni)) < 0)
        return rc;
    direct.calls++;
    return 1;
}

/* g6_read_neighbour_list after a direct step: its lists, or empty ones where none were
 * asked for; 1 when a list overflowed the capacity (as through Python). */
static int direct_read_lists(void)
{
    int n = direct.last_ni + 1, overflow = 0;
    if (direct.last_lists) {
        nb.ni = direct.last_ni;
        nb.offsets = direct.nb_offsets;
        nb.counts = direct.nb_counts;
        nb.ids = direct.nb_ids;
        nb.valid = 1;
        for (int i = 0; i < direct.last_ni; i++)
            overflow |= direct.nb_counts[i] > direct.nb_offsets[i + 1] - direct.nb_offsets[i];
        return overflow;
    }
    if (n > direct.zeros_n) {
        int *z = calloc((size_t)n, sizeof(int));
        if (z == NULL)
            return fail(SAPPORO_ERR_INTERNAL, "out of memory for %d neighbour lists", n);
        free(direct.zeros);
        direct.zeros = z;
        direct.zeros_n = n;
    }
    nb.ni = direct.last_ni;
    nb.offsets = nb.counts = direct.zeros;
    nb.ids = direct.zeros;
    nb.valid = 1;
    return 0;
}

/* A direct force call whose result is not finite, started again Python's way (from the
 * i-particles packed for the kernel), so that the library diagnoses it as usual. */
static int direct_redo_start(int ni)
{
    struct dplan *p = direct.inflight_plan_done;
    int rc, *index = malloc(sizeof(int) * (size_t)ni);
    double *x = malloc(sizeof(double) * 12 * (size_t)ni), *v = x + 3 * ni, *a = x + 6 * ni,
           *j = x + 9 * ni;
    if (index == NULL || x == NULL) {
        free(index);
        free(x);
        return fail(SAPPORO_ERR_INTERNAL, "out of memory for %d i-particles", ni);
    }
    for (int i = 0; i < ni; i++) {
        const double *d = p->idata + i;
        size_t st = (size_t)p->ni_pad;
        for (int c = 0; c < 3; c++) {
            x[3 * i + c] = d[(IC_X + c) * st];
            v[3 * i + c] = d[(IC_VX + c) * st];
            a[3 * i + c] = p->order >= 6 ? d[(IC_AX + c) * st] : 0.0;
            j[3 * i + c] = p->order >= 8 ? d[(IC_JX + c) * st] : 0.0;
        }
        index[i] = (int)d[IC_ID * st];
    }
    rc = direct_before_python();
    if (rc >= 0)
        rc = warm_handover("a non-finite force to diagnose");
    if (rc >= 0)
        rc = shim_py_start(direct.redo_nj, ni, index, x, v, p->order >= 6 ? a : NULL,
                           p->order >= 8 ? j : NULL, direct.redo_eps2, NULL, have_time,
                           cur_time);
    free(index);
    free(x);
    return rc;
}
