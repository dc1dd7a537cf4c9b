/*
 * calls.c -- the engine's force calls: the i-particles' rules and packing, each device's
 * launches, the parts and devices combined in the reduce kernel's order, the rows checked,
 * the neighbour lists.  See engine.h.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"

/* i-particle i's id: index holds int64 (wide) or int values. */
static long id_at(const void *index, int wide, int i)
{
    return wide ? (long)((const int64_t *)index)[i] : (long)((const int *)index)[i];
}

/* The i-particles into the plan's rows (layout.h); the padding repeats the last one. A
 * radius that asks for no list (wants_list) among ones that do gives an empty list (as
 * through Python).  Order 2: each i-particle's range of global j-addresses (jr, pairs; NULL:
 * all) as local ones of p's device, of nd, in the velocity's rows. */
static void i_pack(const struct dplan *p, int nd, int ni, const void *index, int wide,
                   const double *xi, const double *vi, const double *ai, const double *ji,
                   const double *h2, const int *jr, int lists)
{
    const size_t st = (size_t)p->ni_pad;
    for (int i = 0; i < p->ni_pad; i++) {
        int s = i < ni ? i : ni - 1;
        double *d = p->idata + i;
        d[IC_X * st] = xi[3 * s];
        d[IC_Y * st] = xi[3 * s + 1];
        d[IC_Z * st] = xi[3 * s + 2];
        d[IC_H2 * st] = lists && wants_list(h2[s]) ? h2[s] : 0.0;
        if (p->order == 2) {
            d[IC_J0 * st] = jr == NULL ? 0.0 : n_local(jr[2 * s], p->dev, nd);
            d[IC_J1 * st] = jr == NULL ? INT32_MAX : n_local(jr[2 * s + 1], p->dev, nd);
        }
        else {
            d[IC_VX * st] = vi[3 * s];
            d[IC_VY * st] = vi[3 * s + 1];
            d[IC_VZ * st] = vi[3 * s + 2];
        }
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

double lanes_sum(const double *x, size_t stride, int n)
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

void nearest(const double *id, const double *r2, size_t stride, int n, double *v)
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

int result_row(const struct dplan *p, int nd, int i, double *v)
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

/* Queue device d's force call (plan p): the i-particles packed (and, on device memory,
 * copied), the force launch, the reduce where a kernel combines the parts, the results'
 * copies back.  0, or -1 (error set). */
static int eng_start_dev(Engine *e, int d, struct dplan *p, int ni, const void *index,
                         int wide, const double *x, const double *v, const double *a,
                         const double *jerk, double eps2, const double *h2, const int *jr,
                         int lists)
{
    struct edev *ed = &e->dev[d];
    void *ev = NULL;
    uint64_t bits;
    if (eng_on(e, d, p->force.queue) < 0)
        return -1;
    i_pack(p, e->ndev, ni, index, wide, x, v, a, jerk, h2, jr, lists);
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
    if (p->split) {  /* the second part to the twin, now, while this thread runs the first */
        uint64_t t_bits;
        if (twin_post(e, p, bits, ni) < 0) {
            e->pred_valid = 0;  /* (the prediction did not run) */
            return -1;
        }
        ed->twin_posted = 1;
        ed->inflight = p;  /* (collected by the wait, whatever happens next) */
        memcpy(&t_bits, &e->time, sizeof t_bits);
        if (p->twin_predicts  /* this thread's half of the prediction, at once */
            && eng_launch(e, p, &p->predict, t_bits, ni, NULL, "queueing the prediction") < 0)
            return -1;
    }
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
        const double *x = xi + 3 * i, *d[3] = {vi ? vi + 3 * i : NULL, ai ? ai + 3 * i : NULL,
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

int eng_start_ids(Engine *e, int nj, int ni, const void *index, int wide,
                         const double *x, const double *v, const double *a, const double *jerk,
                         double eps2, const double *h2, const int *jr)
{
    struct dplan *p;
    const int nd = e->ndev;
    int lists = 0, stored;
    uint64_t bits;
    e->code = ENG_ERR_BACKEND;
    if (e->off)
        return eng_err(e, ENG_ERR_BACKEND, "the device failed earlier (see the first error); "
                       "open a new library");
    e->uncollected = e->grouped = 0;  /* a new call: the previous one's results are gone */
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
        const double t = e->time;
        if (!e->pred_valid && eng_still(e)) {  /* (nothing in flight) */
            eng_predict_still(e);
            e->pred_valid = 1;
            e->pred_time = t;
        }
        if (!e->pred_valid || (e->pred_time != t && !eng_still(e))) {
            memcpy(&bits, &t, sizeof bits);
            e->pred_valid = 0;
            for (int d = 0; d < nd; d++) {
                /* a split call's prediction is split too: the twin predicts its half, and
                 * this thread its own once the twin has its job (eng_start_dev) */
                if (plan_predict_split(&p[d], n_local(*p[d].n_stored_at, d, nd)) > 0)
                    continue;
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
            if (eng_start_dev(e, d, &p[d], ni, index, wide, x, v, a, jerk, eps2, h2, jr,
                              lists) < 0)
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

int eng_start(void *engine, int nj, int ni, const int *index, const double *x,
                     const double *v, const double *a, const double *jerk, double eps2,
                     const double *h2)
{
    return eng_code(engine, eng_start_ids(engine, nj, ni, index, 0, x, v, a, jerk, eps2,
                                          h2, NULL));
}

static int gcd(int a, int b)
{
    return b == 0 ? a : gcd(b, a % b);
}

int eng_start_groups_rc(Engine *e, int ng, const int *ioff, const int *joff, const int *index,
                        const double *x, double eps2)
{
    int g, unit = 1, npad = 0, s = 0;
    e->code = ENG_ERR_BACKEND;
    if (e->off)
        return eng_err(e, ENG_ERR_BACKEND, "the device failed earlier (see the first error); "
                       "open a new library");
    e->uncollected = 0;
    if (ng < 1 || ioff == NULL || joff == NULL)
        return eng_err(e, ENG_ERR_INPUT, "groups: ng = %d must be >= 1, with offsets", ng);
    if (ioff[0] < 0 || joff[0] < 0)
        return eng_err(e, ENG_ERR_INPUT, "groups: offsets start at 0 or more (i %d, j %d)",
                       ioff[0], joff[0]);
    for (g = 0; g < ng; g++)
        if (ioff[g + 1] < ioff[g] || joff[g + 1] < joff[g])
            return eng_err(e, ENG_ERR_INPUT, "groups: group %d's offsets decrease (i %d to %d, "
                           "j %d to %d)", g, ioff[g], ioff[g + 1], joff[g], joff[g + 1]);
    if (eng_in_flight(e) && eng_wait(e) < 0)  /* (its i-particles' arrays are reused) */
        return -1;
    if ((!e->have_j || e->ntpl[0] == 0) && eng_ask(e, 0, 0, 0) < 0)
        return -1;
    if (e->dev[0].jside.order != 2)
        return eng_err(e, ENG_ERR_INPUT, "groups: order 2 only (this library's is %d)",
                       e->dev[0].jside.order);
    if (i_rules(e, &e->dev[0].jside, ioff[ng] - ioff[0], index + ioff[0], 0, x + 3 * ioff[0],
                NULL, NULL, NULL, eps2) < 0)
        return -1;
    /* each group padded to a whole number of work-groups of every plan */
    for (int k = 0; k < e->ntpl[0]; k++)
        unit = unit / gcd(unit, e->tpl[0][k].ipg) * e->tpl[0][k].ipg;
    for (g = 0; g < ng; g++) {
        const int m = ioff[g + 1] - ioff[g], pad = (m + unit - 1) / unit * unit;
        if (npad + pad > ENG_NI_MAX)
            break;
        npad += pad;
    }
    if (g == 0)
        return eng_err(e, ENG_ERR_INPUT, "groups: group 0 has %d i-particles, at most %d per "
                       "group", ioff[1] - ioff[0], ENG_NI_MAX / unit * unit);
    if (e->g_map == NULL) {  /* (once: a launch holds at most ENG_NI_MAX, padded or not) */
        e->g_x = PyMem_RawMalloc(3 * sizeof(double) * ENG_NI_MAX);
        e->g_jr = PyMem_RawMalloc(2 * sizeof(int) * ENG_NI_MAX);
        e->g_id = PyMem_RawMalloc(sizeof(int) * ENG_NI_MAX);
        e->g_map = PyMem_RawMalloc(sizeof(int) * ENG_NI_MAX);
        if (e->g_x == NULL || e->g_jr == NULL || e->g_id == NULL || e->g_map == NULL) {
            PyMem_RawFree(e->g_x);
            PyMem_RawFree(e->g_jr);
            PyMem_RawFree(e->g_id);
            PyMem_RawFree(e->g_map);
            e->g_x = NULL;
            e->g_jr = e->g_id = e->g_map = NULL;
            return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %d i-particles",
                           ENG_NI_MAX);
        }
    }
    for (int h = 0; h < g; h++) {
        const int m = ioff[h + 1] - ioff[h], pad = (m + unit - 1) / unit * unit;
        for (int k = 0; k < pad; k++, s++) {
            const int from = ioff[h] + (k < m ? k : m - 1);  /* padding repeats the last */
            memcpy(e->g_x + 3 * s, x + 3 * from, 3 * sizeof(double));
            e->g_id[s] = index[from];
            e->g_jr[2 * s] = joff[h];
            e->g_jr[2 * s + 1] = joff[h + 1];
            if (k < m)
                e->g_map[from - ioff[0]] = s;
        }
    }
    e->grouped_ni = ioff[g] - ioff[0];
    if (npad == 0) {  /* no i-particle: nothing to compute */
        e->empty = e->uncollected = e->grouped = 1;
        e->lists_valid = 0;
        return g;
    }
    if (eng_start_ids(e, joff[g], npad, e->g_id, 0, e->g_x, NULL, NULL, NULL, eps2, NULL,
                      e->g_jr) < 0)
        return -1;
    e->grouped = 1;
    return g;
}

int eng_start_groups(void *engine, int ng, const int *ioff, const int *joff, const int *index,
                     const double *x, double eps2)
{
    Engine *e = engine;
    const int rc = eng_start_groups_rc(e, ng, ioff, joff, index, x, eps2);
    return rc < 0 ? eng_code(e, rc) : rc;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

int eng_collect_lists(Engine *e, const struct dplan *p, int ni)
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

int eng_finish_rc(Engine *e, int ni, double *rows)
{
    struct dplan *p = e->last;
    const int *map = e->grouped ? e->g_map : NULL;  /* a call on groups: the rows it padded */
    int bad = 0, first = -1;
    e->code = ENG_ERR_BACKEND;
    if (!e->uncollected || (p == NULL && !e->empty)
        || ni != (map != NULL ? e->grouped_ni : e->last_ni)) {
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
        if (!result_row(p, e->ndev, map != NULL ? map[i] : i, v) && bad++ == 0)
            first = i;
        for (int r = 0; r < p->nco; r++)
            rows[(size_t)r * (size_t)ni + (size_t)i] = v[r];
    }
    if (bad)
        return eng_err(e, ENG_ERR_NONFINITE, "non-finite force on i-particle %d (id %d) and %d "
                       "other(s): %s", first,
                       (int)p->idata[(size_t)IC_ID * (size_t)p->ni_pad
                                     + (size_t)(map != NULL ? map[first] : first)], bad - 1,
                       p->ds ? "coincident particles with eps2 = 0, or pair terms beyond "
                       "single precision's range (~3e38: double-single computes them in "
                       "float; use N-body units or precision='double', see docs/accuracy.md)"
                       : "coincident particles with eps2 = 0, or overflow?");
    if (p->lists && eng_collect_lists(e, p, ni) < 0)
        return -1;
    return ni;
}

int eng_finish(void *engine, int ni, double *rows)
{
    return eng_code(engine, eng_finish_rc(engine, ni, rows));
}

int eng_lists(void *engine, int *ni, const int **offsets, const int **counts,
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
