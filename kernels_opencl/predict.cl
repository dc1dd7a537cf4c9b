/* j-particle memory: scatter of changed addresses, and prediction to the current time. */
#include "common.h"

/* Copy n packed records to their addresses: each RAW_N double4, then one more that holds
 * its address and id (.x, .y, as doubles: exact for ints), so that a batch is one copy. A
 * batch names each address once (the work-items write in no fixed order). Offsets are
 * size_t: addresses times RAW_N pass 2^31 on large devices. */
__kernel void scatter_j(const int n,
                        __global const double4 *packed,
                        __global double4 *raw,
                        __global int *jid)
{
    const int k = get_global_id(0);
    if (k >= n) return;
    __global const double4 *p = packed + (size_t)k * (RAW_N + 1);
    const int a = (int)p[RAW_N].x;
    for (int q = 0; q < RAW_N; q++) raw[(size_t)a * RAW_N + q] = p[q];
    jid[a] = (int)p[RAW_N].y;
}

/* Taylor prediction of every stored address to time t, one polynomial for all orders
 * (terms the caller did not give are zero). Positions of double-single are split into
 * hi/lo float pairs; the mass rides in .w. */
__kernel void predict(const int n, const double t,
                      __global const double4 *raw,
                      __global real4 *pos,
#if PRECISION == 1
                      __global float4 *pos_lo,
#endif
                      __global real4 *vel
#if ORDER >= 6
                      , __global real4 *acc
#endif
#if ORDER >= 8
                      , __global real4 *jerk
#endif
                      )
{
    const int a = get_global_id(0);
    if (a >= n) return;
    __global const double4 *r = raw + (size_t)a * RAW_N;
    /* whole double4 records (x|m, v|t, ...): one AVX2 register per term on CPUs, where
     * double3 arithmetic is scalarised; the .w lanes compute junk that is not stored */
    const double4 xm = r[RAW_XM], vt = r[RAW_VT];
    /* records past PRED_TERMS are zero: not read (a third of the memory traffic when only
     * the acceleration and the jerk are given) */
    const double4 zero = (double4)(0.0);
    const double4 a0 = PRED_TERMS >= 1 ? r[RAW_A] : zero;
    const double4 j0 = PRED_TERMS >= 2 ? r[RAW_J] : zero;
    const double4 s0 = PRED_TERMS >= 3 ? r[RAW_S] : zero;
    const double4 c0 = PRED_TERMS >= 4 ? r[RAW_C] : zero;
    const double dt = t - vt.w;
#if ORDER >= 8
    /* order 8: the predictor goes two terms further (pop and the 5th derivative), so that
     * predicted positions err by O(dt^8) as the 8th-order corrector needs */
    const double4 p0 = PRED_TERMS >= 5 ? r[RAW_P] : zero;
    const double4 q0 = PRED_TERMS >= 6 ? r[RAW_D5] : zero;
    const double4 xp = xm + dt * (vt + dt * (a0 * 0.5 + dt * (j0 * (1.0 / 6.0)
                       + dt * (s0 * (1.0 / 24.0) + dt * (c0 * (1.0 / 120.0)
                       + dt * (p0 * (1.0 / 720.0) + dt * (q0 * (1.0 / 5040.0))))))));
    const double4 vp = vt + dt * (a0 + dt * (j0 * 0.5 + dt * (s0 * (1.0 / 6.0)
                       + dt * (c0 * (1.0 / 24.0) + dt * (p0 * (1.0 / 120.0)
                       + dt * (q0 * (1.0 / 720.0)))))));
#else
    const double4 xp = xm + dt * (vt + dt * (a0 * 0.5 + dt * (j0 * (1.0 / 6.0)
                       + dt * (s0 * (1.0 / 24.0) + dt * (c0 * (1.0 / 120.0))))));
    const double4 vp = vt + dt * (a0 + dt * (j0 * 0.5 + dt * (s0 * (1.0 / 6.0)
                       + dt * (c0 * (1.0 / 24.0)))));
#endif
#if PRECISION == 1
    const float4 hi = convert_float4(xp);
    const float4 lo = convert_float4(xp - convert_double4(hi));
    pos[a] = (float4)(hi.xyz, (float)xm.w);
    pos_lo[a] = (float4)(lo.xyz, 0.0f);
#else
    pos[a] = (double4)(xp.xyz, xm.w);
#endif
    vel[a] = convert_real4((double4)(vp.xyz, 0.0));
#if ORDER >= 8
    const double4 ap = a0 + dt * (j0 + dt * (s0 * 0.5 + dt * (c0 * (1.0 / 6.0)
                       + dt * (p0 * (1.0 / 24.0) + dt * (q0 * (1.0 / 120.0))))));
    acc[a] = convert_real4((double4)(ap.xyz, 0.0));
    const double4 jp = j0 + dt * (s0 + dt * (c0 * 0.5 + dt * (p0 * (1.0 / 6.0)
                       + dt * (q0 * (1.0 / 24.0)))));
    jerk[a] = convert_real4((double4)(jp.xyz, 0.0));
#elif ORDER >= 6
    const double4 ap = a0 + dt * (j0 + dt * (s0 * 0.5 + dt * (c0 * (1.0 / 6.0))));
    acc[a] = convert_real4((double4)(ap.xyz, 0.0));
#endif
}
