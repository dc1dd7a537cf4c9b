/*
 * fake_libcuda.c -- the CUDA driver API entry points the native engine calls, over the CPU
 * emulation of tests/cudaemu (built by cudaemu.driver_library() as a library whose soname is
 * libcuda.so.1, so that the CUDA backend finds it as it finds the real driver).
 *
 * "Device memory" is host memory (the stand-in PyCUDA allocates it), a module is the
 * emulation's compiled kernel library, its image the text "cuemu:<path>", a function the
 * emulator's launcher of one kernel.  Work runs when it is queued, so streams are always
 * done, and an event records the host's clock when it is recorded (the time between two
 * events around a launch is the time the emulated kernel took).  What a GPU would refuse is
 * refused here too: every call but the context stack's needs a current context
 * (CUDA_ERROR_INVALID_CONTEXT otherwise), pops need pushes, an elapsed time needs two
 * recorded events made with timing.  For the tests of the callers' error paths, cuemu_fail
 * makes one entry point fail once (see there).
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_INVALID_HANDLE 400
#define CUDA_ERROR_NOT_READY 600
#define CU_EVENT_DISABLE_TIMING 0x2
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_LAUNCH_FAILED 719

#define EXPORT __attribute__((visibility("default")))

typedef int (*launcher_fn)(const unsigned *grid, const unsigned *block, void **args);

static __thread void *stack[64];
static __thread int depth;
/* calls by kind, over the process (every thread's; atomic): launches, copies to and from the
 * device, waits; events made, and events not yet destroyed */
static long n_launch, n_htod, n_dtoh, n_sync, n_event, n_event_live;
/* the failure to inject (cuemu_fail): the entry point's name ("" none), the calls of it
 * still to succeed first, the error code to return */
static char fail_entry[64];
static long fail_after;
static int fail_code;

/* an event: the clock when it was last recorded */
struct event {
    int timing, recorded;
    double seconds;
};

/* Failure injection, for the tests: the entry point named entry (its exported name, as
 * "cuLaunchKernel" or "cuMemcpyHtoDAsync_v2") succeeds for its next after calls, then
 * returns code once, having done nothing (a push pushes nothing, a copy copies nothing), and
 * from then on behaves as usual.  cuemu_fail(NULL, 0, 0) clears it.  One entry point at a
 * time; calls counted over the process (every thread's, PyCUDA's pushes and pops too).
 * Returns how many calls the failure it replaces still let succeed (-1: it has happened, or
 * there was none), which counts an entry point's calls: cuemu_fail(entry, N, 0), the calls,
 * then N - cuemu_fail(NULL, 0, 0). */
EXPORT long cuemu_fail(const char *entry, int after, int code)
{
    const long left = fail_entry[0] != '\0' ? fail_after : -1;
    snprintf(fail_entry, sizeof fail_entry, "%s", entry != NULL ? entry : "");
    fail_after = after;
    fail_code = code;
    return left;
}

/* Whether the entry point named entry is to fail now (it then returns fail_code). */
static int failing(const char *entry)
{
    if (fail_entry[0] == '\0' || strcmp(entry, fail_entry) != 0 || fail_after-- > 0)
        return 0;
    fail_entry[0] = '\0';
    return 1;
}

static int current(void)
{
    return depth > 0 && stack[depth - 1] != NULL;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx)
{
    if (failing(__func__))
        return fail_code;
    if (ctx == NULL || depth == 64)
        return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx)
{
    if (failing(__func__))
        return fail_code;
    if (depth == 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    depth--;
    if (ctx != NULL)
        *ctx = stack[depth];
    return CUDA_SUCCESS;
}

EXPORT int cuCtxGetCurrent(void **ctx)
{
    *ctx = depth > 0 ? stack[depth - 1] : NULL;
    return CUDA_SUCCESS;
}

EXPORT int cuModuleLoadData(void **module, const void *image)
{
    const char *text = image;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (strncmp(text, "cuemu:", 6) != 0 || (*module = dlopen(text + 6, RTLD_NOW | RTLD_LOCAL)) == NULL)
        return CUDA_ERROR_INVALID_IMAGE;
    return CUDA_SUCCESS;
}

EXPORT int cuModuleGetFunction(void **function, void *module, const char *name)
{
    char symbol[256];
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    snprintf(symbol, sizeof symbol, "cuemu_launch_%s", name);
    if ((*function = dlsym(module, symbol)) == NULL)
        return CUDA_ERROR_NOT_FOUND;
    return CUDA_SUCCESS;
}

EXPORT int cuModuleUnload(void *module)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    return dlclose(module) == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

EXPORT int cuLaunchKernel(void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                          unsigned by, unsigned bz, unsigned shared, void *stream, void **params,
                          void **extra)
{
    const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
    (void)shared;
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (function == NULL || stream == NULL || params == NULL || extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_add_fetch(&n_launch, 1, __ATOMIC_RELAXED);
    return ((launcher_fn)function)(grid, block, params) == 0 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_LAUNCH_FAILED;
}

EXPORT int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t size, void *stream)
{
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dst == 0 || src == NULL || stream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_add_fetch(&n_htod, 1, __ATOMIC_RELAXED);
    memcpy((void *)(uintptr_t)dst, src, size);
    return CUDA_SUCCESS;
}

EXPORT int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t size, void *stream)
{
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (src == 0 || dst == NULL || stream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    __atomic_add_fetch(&n_dtoh, 1, __ATOMIC_RELAXED);
    memcpy(dst, (const void *)(uintptr_t)src, size);
    return CUDA_SUCCESS;
}

EXPORT int cuStreamSynchronize(void *stream)
{
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    __atomic_add_fetch(&n_sync, 1, __ATOMIC_RELAXED);
    return stream == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT int cuStreamQuery(void *stream)
{
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    return stream == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT int cuEventCreate(void **event, unsigned flags)
{
    struct event *ev;
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (event == NULL || (ev = calloc(1, sizeof *ev)) == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    ev->timing = !(flags & CU_EVENT_DISABLE_TIMING);
    __atomic_add_fetch(&n_event, 1, __ATOMIC_RELAXED);
    __atomic_add_fetch(&n_event_live, 1, __ATOMIC_RELAXED);
    *event = ev;
    return CUDA_SUCCESS;
}

EXPORT int cuEventRecord(void *event, void *stream)
{
    struct event *ev = event;
    struct timespec now;
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (ev == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (stream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    clock_gettime(CLOCK_MONOTONIC, &now);
    ev->seconds = (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
    ev->recorded = 1;
    return CUDA_SUCCESS;
}

EXPORT int cuEventElapsedTime(float *ms, void *start, void *end)
{
    const struct event *a = start, *b = end;
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (a == NULL || b == NULL || ms == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!a->timing || !b->timing)
        return CUDA_ERROR_INVALID_HANDLE;
    if (!a->recorded || !b->recorded)
        return CUDA_ERROR_NOT_READY;
    *ms = (float)(1e3 * (b->seconds - a->seconds));
    return CUDA_SUCCESS;
}

EXPORT int cuEventDestroy_v2(void *event)
{
    if (failing(__func__))
        return fail_code;
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (event == NULL)
        return CUDA_ERROR_INVALID_HANDLE;
    free(event);
    __atomic_sub_fetch(&n_event_live, 1, __ATOMIC_RELAXED);
    return CUDA_SUCCESS;
}

/* The calls made so far: what = 0 launches, 1 copies to the device, 2 from it, 3 waits, 4
 * events made; 5 the events not yet destroyed. */
EXPORT long cuemu_driver_calls(int what)
{
    const long n[] = {__atomic_load_n(&n_launch, __ATOMIC_RELAXED),
                      __atomic_load_n(&n_htod, __ATOMIC_RELAXED),
                      __atomic_load_n(&n_dtoh, __ATOMIC_RELAXED),
                      __atomic_load_n(&n_sync, __ATOMIC_RELAXED),
                      __atomic_load_n(&n_event, __ATOMIC_RELAXED),
                      __atomic_load_n(&n_event_live, __ATOMIC_RELAXED)};
    return what >= 0 && what < 6 ? n[what] : -1;
}
