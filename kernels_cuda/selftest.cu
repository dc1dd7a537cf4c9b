/* A tiny kernel for checking a device and the backend layer (used by the tests).
 * CUDA twin of kernels_opencl/selftest.cl.
 *   SCALE   factor applied by `axpb` (default 2)
 *   BROKEN  1 inserts a syntax error, to exercise the build-error path
 */
#ifndef SCALE
#define SCALE 2
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#if BROKEN
this line is not CUDA C++;
#endif

/* y[i] = SCALE * x[i] + b, 1-D */
extern "C" __global__ void axpb(const int n, const double b, const double *__restrict__ x,
                                double *__restrict__ y)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = SCALE * x[i] + b;
}

/* out[r * ncols + c] = r * 1000 + c + group shape check, 2-D */
extern "C" __global__ void grid2d(const int nrows, const int ncols, int *__restrict__ out)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    const int r = blockIdx.y * blockDim.y + threadIdx.y;
    if (r < nrows && c < ncols)
        out[r * ncols + c] = r * 1000 + c + 1000000 * (int)(blockDim.x * blockDim.y);
}
