/* A tiny kernel for checking a device and the backend layer (used by the tests).
 *   SCALE   factor applied by `axpb` (default 2)
 *   BROKEN  1 inserts a syntax error, to exercise the build-error path
 */
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
#ifndef SCALE
#define SCALE 2
#endif
#ifndef BROKEN
#define BROKEN 0
#endif

#if BROKEN
this line is not OpenCL C;
#endif

/* y[i] = SCALE * x[i] + b, 1-D */
__kernel void axpb(const int n, const double b, __global const double *x, __global double *y)
{
    const int i = get_global_id(0);
    if (i < n) y[i] = SCALE * x[i] + b;
}

/* out[r * ncols + c] = r * 1000 + c + group shape check, 2-D */
__kernel void grid2d(const int nrows, const int ncols, __global int *out)
{
    const int c = get_global_id(0), r = get_global_id(1);
    if (r < nrows && c < ncols)
        out[r * ncols + c] = r * 1000 + c + 1000000 * (int)(get_local_size(0) * get_local_size(1));
}
