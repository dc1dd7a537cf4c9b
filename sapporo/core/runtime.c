/*
 * runtime.c -- the engine's runtime: each launch, copy and wait through the entry points a
 * plan names (OpenCL's, or CUDA's driver API, with the plan's context current around each
 * call).  See engine.h.
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "engine.h"

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

dcl_int plan_launch(const struct dplan *p, const struct dlaunch *l, uint64_t call_value,
                           int ni, void **event)
{
    return plan_launch_at(p, l, call_value, ni, 0, event);
}

dcl_int plan_launch_at(const struct dplan *p, const struct dlaunch *l, uint64_t call_value,
                       int ni, size_t offset, void **event)
{
    const size_t offsets[2] = {offset, 0};
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
        rc = p->enqueue(l->queue, l->kernel, (uint32_t)l->dims, offset > 0 ? offsets : NULL,
                        l->global,
                        l->local[0] > 0 ? l->local : NULL, 0, NULL, event);
    return rc;
}

dcl_int drv_write(const struct dplan *p, void *queue, void *mem, size_t offset,
                         size_t size, const void *src)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->write(queue, mem, 0, offset, size, (void *)src, 0, NULL, NULL);
    CU_CALL(p, rc, p->cu_htod((uint64_t)(uintptr_t)mem + offset, src, size, queue));
    return rc;
}

dcl_int drv_write_now(const struct dplan *p, void *queue, void *mem, size_t offset,
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

dcl_int drv_read(const struct dplan *p, void *queue, void *mem, size_t size, void *dst)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->read(queue, mem, 0, 0, size, dst, 0, NULL, NULL);
    CU_CALL(p, rc, p->cu_dtoh(dst, (uint64_t)(uintptr_t)mem, size, queue));
    return rc;
}

dcl_int drv_finish(const struct dplan *p, void *queue)
{
    dcl_int rc;
    if (!is_cuda(p))
        return p->finish(queue);
    CU_CALL(p, rc, p->cu_sync(queue));
    return rc;
}

int drv_busy(const struct dplan *p, void *queue, void *ev, dcl_int *status)
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

long ns_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (t.tv_sec - t0->tv_sec) * 1000000000L + (t.tv_nsec - t0->tv_nsec);
}

dcl_int plan_wait(const struct dplan *p, void *queue, void *ev, dcl_int *status)
{
    dcl_int rc;
    *status = 1;
    if (!is_cuda(p))
        p->flush(queue);
    if (p->spin_ns > 0 && (ev != NULL || is_cuda(p))) {
        struct timespec t0;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        while (drv_busy(p, queue, ev, status)) {
            if (ns_since(&t0) > p->spin_ns)
                break;
            sched_yield();
        }
    }
    if (is_cuda(p))
        *status = 0;
    rc = drv_finish(p, queue);
    return rc != 0 ? rc : (*status < 0 ? *status : 0);
}
