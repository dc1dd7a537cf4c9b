/* j-particle memory: scatter of changed addresses, and prediction to the current time.
 * CUDA twin of kernels_opencl/predict.cl (same names, arguments and arithmetic). */
#include "common.cuh"

/* Copy n packed records to their addresses: each RAW_N double4, then one more that holds
 * its address and id (.x, .y, as doubles: exact for ints), so that a batch is one copy. A
 * batch names each address once (the threads write in no fixed order). */
extern "C" __global__ void scatter_j(const int n,
                                     const dbl4 *__restrict__ packed,
                                     dbl4 *__restrict__ raw,
                                     int *__restrict__ jid)
{
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n) return;
    const dbl4 *p = packed + (size_t)k * (RAW_N + 1);
    const int a = (int)p[RAW_N].x;
#pragma unroll
    for (int q = 0; q < RAW_N; q++) raw[(size_t)a * RAW_N + q] = p[q];
    jid[a] = (int)p[RAW_N].y;
}

/* The Taylor polynomials of the prediction, one helper per quantity, evaluated per component
 * in the same Horner order as the OpenCL kernel. */
__device__ __forceinline__ double taylor_x(double x, double v, double a, double j, double s,
                                           double c, double dt)
{
    return x + dt * (v + dt * (a * 0.5 + dt * (j * (1.0 / 6.0)
               + dt * (s * (1.0 / 24.0) + dt * (c * (1.0 / 120.0))))));
}

__device__ __forceinline__ double taylor_v(double v, double a, double j, double s, double c,
                                           double dt)
{
    return v + dt * (a + dt * (j * 0.5 + dt * (s * (1.0 / 6.0) + dt * (c * (1.0 / 24.0)))));
}

__device__ __forceinline__ double taylor_a(double a, double j, double s, double c, double dt)
{
    return a + dt * (j + dt * (s * 0.5 + dt * (c * (1.0 / 6.0))));
}

/* order 8: two terms further (pop p, 5th derivative q) */
__device__ __forceinline__ double taylor8_x(double x, double v, double a, double j, double s,
                                            double c, double p, double q, double dt)
{
    return x + dt * (v + dt * (a * 0.5 + dt * (j * (1.0 / 6.0)
               + dt * (s * (1.0 / 24.0) + dt * (c * (1.0 / 120.0)
               + dt * (p * (1.0 / 720.0) + dt * (q * (1.0 / 5040.0))))))));
}

__device__ __forceinline__ double taylor8_v(double v, double a, double j, double s, double c,
                                            double p, double q, double dt)
{
    return v + dt * (a + dt * (j * 0.5 + dt * (s * (1.0 / 6.0) + dt * (c * (1.0 / 24.0)
               + dt * (p * (1.0 / 120.0) + dt * (q * (1.0 / 720.0)))))));
}

__device__ __forceinline__ double taylor8_a(double a, double j, double s, double c, double p,
                                            double q, double dt)
{
    return a + dt * (j + dt * (s * 0.5 + dt * (c * (1.0 / 6.0)
               + dt * (p * (1.0 / 24.0) + dt * (q * (1.0 / 120.0))))));
}

__device__ __forceinline__ double taylor8_j(double j, double s, double c, double p, double q,
                                            double dt)
{
    return j + dt * (s + dt * (c * 0.5 + dt * (p * (1.0 / 6.0) + dt * (q * (1.0 / 24.0)))));
}

/* Taylor prediction of every stored address to time t, one polynomial for all orders
 * (terms the caller did not give are zero). Positions of double-single are split into
 * hi/lo float pairs; the mass rides in .w. */
extern "C" __global__ void predict(const int n, const double t,
                                   const dbl4 *__restrict__ raw,
                                   real4 *__restrict__ pos,
#if PRECISION == 1
                                   float4 *__restrict__ pos_lo,
#endif
                                   real4 *__restrict__ vel
#if ORDER >= 6
                                   , real4 *__restrict__ acc
#endif
#if ORDER >= 8
                                   , real4 *__restrict__ jerk
#endif
                                   )
{
    const int a = blockIdx.x * blockDim.x + threadIdx.x;
    if (a >= n) return;
    const dbl4 *r = raw + (size_t)a * RAW_N;
    const dbl4 xm = r[RAW_XM], vt = r[RAW_VT];
    /* records past PRED_TERMS are zero: not read (a third of the memory traffic when only
     * the acceleration and the jerk are given) */
    dbl4 zero;
    zero.x = zero.y = zero.z = zero.w = 0.0;
    const dbl4 a0 = PRED_TERMS >= 1 ? r[RAW_A] : zero;
    const dbl4 j0 = PRED_TERMS >= 2 ? r[RAW_J] : zero;
    const dbl4 s0 = PRED_TERMS >= 3 ? r[RAW_S] : zero;
    const dbl4 c0 = PRED_TERMS >= 4 ? r[RAW_C] : zero;
    const double dt = t - vt.w;
#if ORDER >= 8
    const dbl4 p0 = PRED_TERMS >= 5 ? r[RAW_P] : zero;
    const dbl4 q0 = PRED_TERMS >= 6 ? r[RAW_D5] : zero;
    const double xp = taylor8_x(xm.x, vt.x, a0.x, j0.x, s0.x, c0.x, p0.x, q0.x, dt);
    const double yp = taylor8_x(xm.y, vt.y, a0.y, j0.y, s0.y, c0.y, p0.y, q0.y, dt);
    const double zp = taylor8_x(xm.z, vt.z, a0.z, j0.z, s0.z, c0.z, p0.z, q0.z, dt);
    const double vxp = taylor8_v(vt.x, a0.x, j0.x, s0.x, c0.x, p0.x, q0.x, dt);
    const double vyp = taylor8_v(vt.y, a0.y, j0.y, s0.y, c0.y, p0.y, q0.y, dt);
    const double vzp = taylor8_v(vt.z, a0.z, j0.z, s0.z, c0.z, p0.z, q0.z, dt);
#else
    const double xp = taylor_x(xm.x, vt.x, a0.x, j0.x, s0.x, c0.x, dt);
    const double yp = taylor_x(xm.y, vt.y, a0.y, j0.y, s0.y, c0.y, dt);
    const double zp = taylor_x(xm.z, vt.z, a0.z, j0.z, s0.z, c0.z, dt);
    const double vxp = taylor_v(vt.x, a0.x, j0.x, s0.x, c0.x, dt);
    const double vyp = taylor_v(vt.y, a0.y, j0.y, s0.y, c0.y, dt);
    const double vzp = taylor_v(vt.z, a0.z, j0.z, s0.z, c0.z, dt);
#endif
#if PRECISION == 1
    const float xh = (float)xp, yh = (float)yp, zh = (float)zp;
    pos[a] = make_float4(xh, yh, zh, (float)xm.w);
    pos_lo[a] = make_float4((float)(xp - (double)xh), (float)(yp - (double)yh),
                            (float)(zp - (double)zh), 0.0f);
    vel[a] = make_float4((float)vxp, (float)vyp, (float)vzp, 0.0f);
#else
    real4 p, v;
    p.x = xp; p.y = yp; p.z = zp; p.w = xm.w;
    v.x = vxp; v.y = vyp; v.z = vzp; v.w = 0.0;
    pos[a] = p;
    vel[a] = v;
#endif
#if ORDER >= 6
#if ORDER >= 8
    const double axp = taylor8_a(a0.x, j0.x, s0.x, c0.x, p0.x, q0.x, dt);
    const double ayp = taylor8_a(a0.y, j0.y, s0.y, c0.y, p0.y, q0.y, dt);
    const double azp = taylor8_a(a0.z, j0.z, s0.z, c0.z, p0.z, q0.z, dt);
#else
    const double axp = taylor_a(a0.x, j0.x, s0.x, c0.x, dt);
    const double ayp = taylor_a(a0.y, j0.y, s0.y, c0.y, dt);
    const double azp = taylor_a(a0.z, j0.z, s0.z, c0.z, dt);
#endif
#if PRECISION == 1
    acc[a] = make_float4((float)axp, (float)ayp, (float)azp, 0.0f);
#else
    real4 q;
    q.x = axp; q.y = ayp; q.z = azp; q.w = 0.0;
    acc[a] = q;
#endif
#endif
#if ORDER >= 8
    const double jxp = taylor8_j(j0.x, s0.x, c0.x, p0.x, q0.x, dt);
    const double jyp = taylor8_j(j0.y, s0.y, c0.y, p0.y, q0.y, dt);
    const double jzp = taylor8_j(j0.z, s0.z, c0.z, p0.z, q0.z, dt);
#if PRECISION == 1
    jerk[a] = make_float4((float)jxp, (float)jyp, (float)jzp, 0.0f);
#else
    real4 u;
    u.x = jxp; u.y = jyp; u.z = jzp; u.w = 0.0;
    jerk[a] = u;
#endif
#endif
}
