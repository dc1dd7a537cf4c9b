/*
 * direct.c -- the C API's block steps without a crossing into Python (included by shim.c).
 *
 * A block step of a GRAPE-6 client (a few j-particles stored, g6_set_ti, firsthalf and
 * lasthalf on a few i-particles) costs 50-100 us of Python around 10-50 us of kernels on a
 * CPU.  Here the library's Python side (capi/bridge.py: Bridge.direct_plan) prepares a
 * force call once per shape -- the launch plan of sapporo.core.device, with its buffers, kernel
 * arguments and queues -- and hands it over as a table of numbers; C then runs such steps
 * itself: j-particles written into the host mirror and the device's records, the prediction
 * and force kernels queued through the OpenCL entry points that PyOpenCL uses, the parts
 * combined in the order of sapporo.core.device.combine_parts (same bits), the results written
 * to the client's arrays.
 *
 * Only what Python planned runs here: one OpenCL device that computes on host memory (a
 * CPU), any order, parts combined on the host; neighbour lists too.  Everything else
 * -- new addresses, a derivative the predictor does not read yet, a value the library would
 * refuse, a non-finite force -- goes the Python way, which gives the usual errors; every
 * crossing into Python makes the plans stale (epoch), and Python forgets what it assumed
 * about the device (Bridge.after_direct).  SAPPORO_NATIVE=0 turns this path off.
 */
#include "engine.h"

static struct {
    int off;              /* -1: never (SAPPORO_NATIVE=0, or not this library) */
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

/* Wait for the force launch in flight, if any (before anything touches its memory). */
static int direct_wait(void)
{
    struct dplan *p = direct.inflight_plan;
    dcl_int rc, status;
    if (p == NULL)
        return 0;
    direct.inflight_plan = NULL;
    rc = plan_wait(p, direct.inflight_queue, direct.inflight_event, &status);
    direct.inflight_event = NULL;
    if (rc != 0) {
        direct.off = -1;
        return fail(SAPPORO_ERR_BACKEND, "OpenCL error %d waiting for the force kernel "
                    "(status %d); the C API's direct path is off from now on", rc, status);
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

/* A plan's words (bridge.h) into *p, valid for the current epoch; 0, or -1 for a table
 * this code does not understand. */
static int direct_unpack(struct dplan *p, const int64_t *w, int nj, int ni, int lists)
{
    int rc = plan_unpack(p, w, nj, ni, lists);
    p->epoch = direct.epoch;
    return rc;
}

/* The plan for ni i-particles and nj j-addresses: from the cache, else asked of Python
 */
static struct dplan *direct_plan(int nj, int ni, int lists)
{
    struct dplan *p;
    int64_t w[DP_WORDS];
    if (direct.off || direct_room(lists, ni + 1) < 0)
        return NULL;
    p = &direct.plans[lists][ni];
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
    if (direct_unpack(p, w, nj, ni, lists) < 0) {
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
    dcl_int rc = plan_launch(p, l, call_value, ni, event);
    if (rc != 0) {
        direct.off = -1;
        return fail(SAPPORO_ERR_BACKEND, "OpenCL error %d queueing a kernel; the C API's "
                    "direct path is off from now on", rc);
    }
    return 0;
}

/* Whether the buffered j-particles can be stored on the C side (engine.h: records_ok). */
static int j_records_ok(int limit, int raw_n, int read_terms, int ds)
{
    return records_ok(jb.n, jb.address, jb.rec, limit, raw_n, read_terms, ds);
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
    records_write(jb.n, jb.address, jb.index, jb.rec, mirror_raw, mirror_ids, dev_raw, dev_ids,
                  raw_n);
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
        lists = wants_list(h2[i]);
    /* nothing in flight from here on (the plans may move in memory) */
    if ((rc = direct_wait()) < 0)
        return rc;
    if ((p = direct_plan(nj, ni, lists)) == NULL)
        return 0;
    if (nj > p->n_stored || !direct_j_ok(p)
        || !i_ok(p, ni, index, 0, xi, vi, ai, ji, eps2, h2))
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
    i_pack(p, ni, index, 0, xi, vi, ai, ji, h2, lists);
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
    if ((rc = direct_wait()) < 0)
        return rc;
    for (int i = 0; i < ni; i++) {
        double v[NCO_ORDER8];
        if (!result_row(p, i, v))
            return 0;
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
        rc = shim_py_start(direct.redo_nj, ni, index, x, v, p->order >= 6 ? a : NULL,
                           p->order >= 8 ? j : NULL, direct.redo_eps2, NULL, have_time,
                           cur_time);
    free(index);
    free(x);
    return rc;
}
