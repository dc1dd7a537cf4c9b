/*
 * fake_libcuda.c -- the CUDA driver API entry points the native engine calls, over the CPU
 * emulation of tests/cudaemu (built by cudaemu.driver_library() as a library whose soname is
 * libcuda.so.1, so that the CUDA backend finds it as it finds the real driver).
 *
 * "Device memory" is host memory (the stand-in PyCUDA allocates it), a module is the
 * emulation's compiled kernel library, its image the text "cuemu:<path>", a function the
 * emulator's launcher of one kernel.  Work runs when it is queued, so streams are always
 * done.  What a GPU would refuse is refused here too: every call but the context stack's
 * needs a current context (CUDA_ERROR_INVALID_CONTEXT otherwise), pops need pushes.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define CUDA_SUCCESS 0
#define CUDA_ERROR_INVALID_VALUE 1
#define CUDA_ERROR_INVALID_IMAGE 200
#define CUDA_ERROR_INVALID_CONTEXT 201
#define CUDA_ERROR_NOT_FOUND 500
#define CUDA_ERROR_LAUNCH_FAILED 719

#define EXPORT __attribute__((visibility("default")))

typedef int (*launcher_fn)(const unsigned *grid, const unsigned *block, void **args);

static __thread void *stack[64];
static __thread int depth;
/* calls by kind, over the process: launches, copies to and from the device, waits */
static long n_launch, n_htod, n_dtoh, n_sync;

static int current(void)
{
    return depth > 0 && stack[depth - 1] != NULL;
}

EXPORT int cuCtxPushCurrent_v2(void *ctx)
{
    if (ctx == NULL || depth == 64)
        return CUDA_ERROR_INVALID_VALUE;
    stack[depth++] = ctx;
    return CUDA_SUCCESS;
}

EXPORT int cuCtxPopCurrent_v2(void **ctx)
{
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
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (function == NULL || stream == NULL || params == NULL || extra != NULL)
        return CUDA_ERROR_INVALID_VALUE;
    n_launch++;
    return ((launcher_fn)function)(grid, block, params) == 0 ? CUDA_SUCCESS
                                                            : CUDA_ERROR_LAUNCH_FAILED;
}

EXPORT int cuMemcpyHtoDAsync_v2(uint64_t dst, const void *src, size_t size, void *stream)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (dst == 0 || src == NULL || stream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    n_htod++;
    memcpy((void *)(uintptr_t)dst, src, size);
    return CUDA_SUCCESS;
}

EXPORT int cuMemcpyDtoHAsync_v2(void *dst, uint64_t src, size_t size, void *stream)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    if (src == 0 || dst == NULL || stream == NULL)
        return CUDA_ERROR_INVALID_VALUE;
    n_dtoh++;
    memcpy(dst, (const void *)(uintptr_t)src, size);
    return CUDA_SUCCESS;
}

EXPORT int cuStreamSynchronize(void *stream)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    n_sync++;
    return stream == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

EXPORT int cuStreamQuery(void *stream)
{
    if (!current())
        return CUDA_ERROR_INVALID_CONTEXT;
    return stream == NULL ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

/* The calls made so far: what = 0 launches, 1 copies to the device, 2 from it, 3 waits. */
EXPORT long cuemu_driver_calls(int what)
{
    return what == 0 ? n_launch : what == 1 ? n_htod : what == 2 ? n_dtoh : n_sync;
}
