/*
 * engine.c -- the engine itself: its errors, the call in flight and its waits, timed
 * launches, the plans it installs and asks the library's planner for, and the C table of
 * sapporo/engine_api.h.  See engine.h.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "engine.h"

/* the engines' calls into Python (their libraries' planners), over the process */
static long python_calls;

int eng_err(Engine *e, int code, const char *fmt, ...)
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

int eng_fail(Engine *e, const char *what, dcl_int rc, dcl_int status)
{
    return eng_err(e, ENG_ERR_BACKEND, "%s error %d %s (status %d); block steps take no "
                   "force call from now on", is_cuda(&e->dev[0].jside) ? "CUDA" : "OpenCL",
                   (int)rc, what, (int)status);
}

int eng_code(const Engine *e, int rc)
{
    return rc < 0 ? e->code : rc;
}

void eng_clear_plans(Engine *e)
{
    e->ntpl[0] = e->ntpl[1] = 0;
    e->have_j = 0;
    for (int d = 0; d < e->ndev; d++)
        e->dev[d].force_queue = NULL;
}

int eng_fresh(const Engine *e)
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

int eng_wait_dev(Engine *e, int d)
{
    struct edev *ed = &e->dev[d];
    struct dplan *p = ed->inflight;
    dcl_int rc = 0, status = 0;
    if (ed->twin_posted) {  /* the twin's part, into its place among the parts */
        const size_t part = (size_t)p->nco * (size_t)p->ni_pad;
        ed->twin_posted = 0;
        if ((rc = twin_join(e, p)) == 0)
            memcpy(p->out + part, p->twin_out + part, sizeof(double) * part);
    }
    if (p != NULL && rc == 0) {
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
    ed->inflight = NULL;
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

int eng_wait(void *engine)
{
    Engine *e = engine;
    int rc = 0;
    for (int d = 0; d < e->ndev; d++)
        if (eng_wait_dev(e, d) < 0)
            rc = -1;
    return rc;
}

int eng_in_flight(const Engine *e)
{
    for (int d = 0; d < e->ndev; d++)
        if (e->dev[d].inflight != NULL)
            return 1;
    return 0;
}

int eng_on(Engine *e, int d, void *queue)
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

void eng_timed_event(Engine *e, const struct dplan *p, void *ev)
{
    struct eng_timed *t;
    if (e->ntimed == ENG_TIMED_MAX) {
        p->release(ev);
        return;
    }
    t = &e->timed[e->ntimed++];
    t->start = NULL;
    t->end = ev;
    t->cell = p->seconds_at;
    t->p = p;
    t->dev = p->dev;
}

int eng_launch(Engine *e, struct dplan *p, struct dlaunch *l, uint64_t call_value,
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

int eng_install(Engine *e, const int64_t *w, int n, int lists)
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

int eng_ask(Engine *e, int lists, int top, int terms)
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

int n_local(int64_t n, int d, int nd)
{
    return n > d ? (int)((n - d + nd - 1) / nd) : 0;
}

int eng_plan(Engine *e, int nj, int ni, int lists, struct dplan *call)
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
        if (big != NULL) {
            call[d] = *big;
            if (nd > 1)  /* one twin per engine: not with several devices */
                call[d].twin.kernel = call[d].twin_predict.kernel = NULL;
        }
        if (big == NULL || plan_shape(&call[d], nj, nj_local, ni) < 0
            || plan_predict(&call[d], n_local(*big->n_stored_at, d, nd)) < 0)
            return eng_err(e, ENG_ERR_INTERNAL, "no plan of device %d for %d i-particles", d,
                           ni);
    }
    return 0;
}

static void eng_set_time(void *engine, double t)
{
    ((Engine *)engine)->time = t;
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

const struct sapporo_engine_api engine_api = {
    SAPPORO_ENGINE_API_VERSION, eng_put_j, eng_start, eng_set_time, eng_finish, eng_lists,
    eng_wait_api, eng_order, eng_error, eng_python_calls, eng_start_groups, eng_put_xm,
    eng_get_xm,
};
