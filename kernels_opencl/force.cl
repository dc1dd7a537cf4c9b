/* Forces on a block of i-particles from the predicted j-particles.
 *
 * Work split. The global range is (ni_pad / W, nparts * LJ) with work-groups of (LI, LJ).
 * A work-item holds W consecutive i-particles in vector registers. Group (gi, part) takes
 * i-particles [gi*LI*W, (gi+1)*LI*W) and the j-range [part*jchunk, (part+1)*jchunk); inside
 * the group, lane lj takes every LJ-th j-particle of each tile of JT. Lanes are combined in
 * local memory in lane order, parts by the `reduce` kernel (lanes over parts, then a tree): a
 * fixed summation order, so the same inputs on the same configuration give bitwise identical results.
 *
 * TWIN = 1: the launch's parts are the second half of a call's: part get_group_id(1) +
 * get_num_groups(1).  A small call on PoCL's CPU companion runs its first half on the
 * companion and this half on a second single-threaded device, from another thread of the
 * engine (sapporo/core/twin.c), each with a launch of nparts / 2 parts.
 *
 * JV = 1 (CPUs, few active particles): one i-particle per work-item and W consecutive
 * j-particles per step in the vector lanes instead, so that a single active particle still
 * uses every lane; the lanes are combined in lane order at the end. j-records are read as
 * aligned vectors of 4 records, so part and tile boundaries are multiples of W, and the host
 * keeps W zeroed records with id -1 past the end of the j-buffers for the last step.
 *
 * Double-single: j - i position differences from hi/lo float pairs, the rest in float; each
 * lane sums one tile in float and adds that tile sum to double accumulators, so float
 * rounding grows over at most JT/LJ terms, never over the whole j-range.
 */
#include "common.h"

/* Reciprocal square root. PoCL calls its vector math functions out of line, and every call
 * makes all vector registers caller-saved: the whole loop state then goes through the stack
 * on each j-particle. On PoCL's x86 CPU devices (the host passes SAPPORO_X86_BUILTINS) we
 * therefore use the instructions directly: double-single takes the hardware estimate plus
 * one Newton-Raphson step (relative error ~1.2e-7, below float's own rounding of r^2),
 * double the correctly rounded vsqrtpd and a division, so the double path stays IEEE-exact.
 * Everywhere else the OpenCL built-ins. */
#if defined(SAPPORO_X86_BUILTINS) && defined(__has_builtin)
/* clang knows the builtins whatever the target; the instructions need the CPU feature */
#if defined(__AVX__) && __has_builtin(__builtin_ia32_rsqrtps256) \
    && __has_builtin(__builtin_ia32_sqrtpd256)
#define SAP_AVX 1
#endif
#if defined(__SSE2__) && __has_builtin(__builtin_ia32_rsqrtps) && __has_builtin(__builtin_ia32_sqrtpd)
#define SAP_SSE 1
#endif
#if defined(__AVX512F__) && __has_builtin(__builtin_ia32_rsqrt14ps512_mask) \
    && __has_builtin(__builtin_ia32_sqrtpd512)
#define SAP_AVX512 1
#endif
#endif

#if PRECISION == 1
/* rsqrt_nr: the Newton step multiplies x by the estimate, so an infinite x (r^2 beyond
 * float's range) gives inf * 0 = NaN and a denormal one (which rsqrtps reads as 0, as the
 * GPU's rsqrt.approx.ftz does) -inf or NaN: RSQRT_NAN_AT_INF says so (see RSQRT_FINITE). */
#if W == 16 && defined(SAP_AVX512)
static inline float16 rsqrt_nr(const float16 x)
{
    /* the 14-bit estimate: after the Newton step below float's own rounding */
    const float16 y = __builtin_ia32_rsqrt14ps512_mask(x, (float16)0.0f, (ushort)0xffff);
    return y * (1.5f - 0.5f * x * y * y);
}
#define RSQRT(x) rsqrt_nr(x)
#define RSQRT_NAN_AT_INF 1
#elif W == 8 && defined(SAP_AVX)
static inline float8 rsqrt_nr(const float8 x)
{
    const float8 y = __builtin_ia32_rsqrtps256(x);
    return y * (1.5f - 0.5f * x * y * y);
}
#define RSQRT(x) rsqrt_nr(x)
#define RSQRT_NAN_AT_INF 1
#elif W == 4 && defined(SAP_SSE)
static inline float4 rsqrt_nr(const float4 x)
{
    const float4 y = __builtin_ia32_rsqrtps(x);
    return y * (1.5f - 0.5f * x * y * y);
}
#define RSQRT(x) rsqrt_nr(x)
#define RSQRT_NAN_AT_INF 1
#elif W == 1 && defined(SAPPORO_X86_BUILTINS) && defined(__has_builtin)
#if __has_builtin(__builtin_sqrtf)
#define RSQRT(x) (1.0f / __builtin_sqrtf(x)) /* sqrtss and divss, inline */
#else
#define RSQRT(x) rsqrt(x)
#endif
#else
#define RSQRT(x) rsqrt(x)
#endif
#else
#if W == 4 && defined(SAP_AVX)
#define RSQRT(x) (1.0 / __builtin_ia32_sqrtpd256(x))
#elif W == 8 && defined(SAP_AVX512)
#define RSQRT(x) (1.0 / __builtin_ia32_sqrtpd512(x, 4)) /* 4: the current rounding */
#elif W == 8 && defined(SAP_AVX)
static inline double8 sqrt_pd8(const double8 x)
{
    return (double8)(__builtin_ia32_sqrtpd256(x.lo), __builtin_ia32_sqrtpd256(x.hi));
}
#define RSQRT(x) (1.0 / sqrt_pd8(x))
#elif W == 2 && defined(SAP_SSE)
#define RSQRT(x) (1.0 / __builtin_ia32_sqrtpd(x))
#elif W == 1 && defined(SAPPORO_X86_BUILTINS) && defined(__has_builtin)
#if __has_builtin(__builtin_sqrt)
#define RSQRT(x) (1.0 / __builtin_sqrt(x)) /* sqrtsd and divsd, inline */
#else
#define RSQRT(x) (1.0 / sqrt(x))
#endif
#else
#define RSQRT(x) (1.0 / sqrt(x))
#endif
#endif

/* 1/sqrt of the softened r^2 (never negative), NaN where it overflowed to inf. A correctly
 * rounded rsqrt, and every hardware one, gives 0 there, which would drop the pair silently
 * (its forces and its potential, as with r^2 beyond 3.4e38 in float, |d| above about
 * 1.8e19). x * 0 + y is y for finite x and NaN for x = inf: one multiply-add per pair, so
 * that such a pair makes the result non-finite and the library refuses the call (its
 * non-finite check names the particle) instead of returning wrong forces; the CUDA kernels
 * do the same. Not needed where the Newton step already gives NaN, nor in double (whose
 * r^2 cannot overflow below the library's coordinate limit). */
#if PRECISION == 1 && !defined(RSQRT_NAN_AT_INF)
#define RSQRT_FINITE(x) ((x) * 0.0f + RSQRT(x))
#else
#define RSQRT_FINITE(x) RSQRT(x)
#endif

#if CUTOFF
/* The cutoff's short-range factors (sapporo/variants.h) of the softened distance R: G
 * multiplies the pair's acceleration, H its potential. CMP_R: a comparison of `real` values
 * as an all-ones mask of vrint (vector comparisons give one already, scalar ones 1). */
#if W == 1
#define CMP_R(c) (-(RINT)(c))
#else
#define CMP_R(c) (c)
#endif
#if CUTOFF == 1
#define CUTOFF_FACTORS(R, G, H)                                                             \
    do {                                                                                    \
        const vreal x_ = (R) * (real)(2.0 / CUTOFF_R);                                      \
        const vrint in_ = CMP_R(x_ < 1);                                                    \
        const vreal t_ = KEEP_R(2 - x_, CMP_R(x_ < 2));                                     \
        G = BLEND_R(S2_G_OUT(t_), S2_G_IN(x_), in_) * (real)(1.0 / 140);                    \
        H = BLEND_R(S2_H_OUT(t_), S2_H_IN(x_), in_) * (real)(1.0 / 140);                    \
    } while (0)
#else
#define CUTOFF_FACTORS(R, G, H)                                                             \
    do {                                                                                    \
        const vreal x_ = (R) * (real)(0.5 / CUTOFF_R);                                      \
        H = erfc(x_);                                                                       \
        G = H + (real)1.1283791670955126 * x_ * exp(-x_ * x_); /* 2 / sqrt(pi) */           \
    } while (0)
#endif
#endif

#if USE_LOCAL
#define JPOS(k) lpos[k]
#define JPOS_LO(k) lpos_lo[k]
#define JVEL(k) lvel[k]
#define JACC(k) lacc[k]
#define JJERK(k) ljerk[k]
#define JID(k) lid[k]
#else
#define JPOS(k) jpos[jt + (k)]
#define JPOS_LO(k) jpos_lo[jt + (k)]
#define JVEL(k) jvel[jt + (k)]
#define JACC(k) jacc[jt + (k)]
#define JJERK(k) jjerk[jt + (k)]
#define JID(k) jid[jt + (k)]
#endif

/* Take (r2, id) as the nearest neighbour of the results r[] when it is closer, ties to the
 * lower id; id < 0 means none. The one rule for j-lanes, local lanes and parts. */
static inline void nn_merge(double *r, const double r2, const double id)
{
    if (id >= 0 && (r[OC_NNID] < 0 || r2 < r[OC_NNR2]
                    || (r2 == r[OC_NNR2] && id < r[OC_NNID]))) {
        r[OC_NNR2] = r2;
        r[OC_NNID] = id;
    }
}

__kernel __attribute__((reqd_work_group_size(LI, LJ, 1)))
void force(const int nj, const int ni, const int ni_pad, const int jchunk, const double eps2_d,
           __global const real4 *jpos,
#if PRECISION == 1
           __global const float4 *jpos_lo,
#endif
           __global const real4 *jvel,
#if ORDER >= 6
           __global const real4 *jacc,
#endif
#if ORDER >= 8
           __global const real4 *jjerk,
#endif
           __global const int *jid,
           __global const double *idata,
           __global double *out
#if NGB
           , __global int *nb_count, __global int *nb_list
#endif
           )
{
    const int li = get_local_id(0);
    const int lj = get_local_id(1);
    const int iv = get_group_id(0) * LI + li; /* vector index: i-particles iv*W .. iv*W+W-1 */
#if TWIN
    const int part = get_group_id(1) + get_num_groups(1);
#else
    const int part = get_group_id(1);
#endif
#if ORDER == 2  /* the work-group's j-range (layout.h: IC_J0, IC_J1), cut to the part's */
    const int first = get_group_id(0) * LI * (JV ? 1 : W);
    const int j0 = max(part * jchunk, (int)idata[IC_J0 * ni_pad + first]);
    const int j1 = min(min(part * jchunk + jchunk, nj), (int)idata[IC_J1 * ni_pad + first]);
#else
    const int j0 = part * jchunk;
    const int j1 = min(j0 + jchunk, nj);
#endif
    /* Work-items whose i-particles are all padding load their share of each tile and meet
     * the barriers, but skip the interactions (as in the CUDA kernel): on GPUs, warps or
     * wavefronts of padding then cost almost nothing. */
    const int live = iv * (JV ? 1 : W) < ni;

#if JV
    /* one i-particle (index iv), as scalars; the vector lanes run over j */
    const int i = iv;
#define ILOAD(c) (idata[(c) * ni_pad + i])
    const double xd = ILOAD(IC_X), yd = ILOAD(IC_Y), zd = ILOAD(IC_Z);
    const int idi = (int)ILOAD(IC_ID);
#if PRECISION == 1
    const float xhi = (float)xd, yhi = (float)yd, zhi = (float)zd;
    const float xlo = (float)(xd - (double)xhi);
    const float ylo = (float)(yd - (double)yhi);
    const float zlo = (float)(zd - (double)zhi);
#endif
#define I_REAL(x) ((real)(x))
    const vint lanes = LANE_IDS;
#else
#define ILOAD(c) VLOAD_D(iv, idata + (c) * ni_pad)
    const vdouble xd = ILOAD(IC_X), yd = ILOAD(IC_Y), zd = ILOAD(IC_Z);
    const vint idi = TO_VINT(ILOAD(IC_ID));
#if PRECISION == 1
    const vreal xhi = TO_VFLOAT(xd), yhi = TO_VFLOAT(yd), zhi = TO_VFLOAT(zd);
    const vreal xlo = TO_VFLOAT(xd - TO_VDOUBLE(xhi));
    const vreal ylo = TO_VFLOAT(yd - TO_VDOUBLE(yhi));
    const vreal zlo = TO_VFLOAT(zd - TO_VDOUBLE(zhi));
#endif
#define I_REAL(x) TO_VREAL(x)
#endif
    const real eps2 = (real)eps2_d;
#if NGB
    const IREAL h2 = I_REAL(ILOAD(IC_H2));
#endif
#if ORDER >= 4
    const IREAL vxi = I_REAL(ILOAD(IC_VX)), vyi = I_REAL(ILOAD(IC_VY));
    const IREAL vzi = I_REAL(ILOAD(IC_VZ));
#endif
#if ORDER >= 6
    const IREAL axi = I_REAL(ILOAD(IC_AX)), ayi = I_REAL(ILOAD(IC_AY));
    const IREAL azi = I_REAL(ILOAD(IC_AZ));
#endif
#if ORDER >= 8
    const IREAL jxi = I_REAL(ILOAD(IC_JX)), jyi = I_REAL(ILOAD(IC_JY));
    const IREAL jzi = I_REAL(ILOAD(IC_JZ));
#endif

    vdouble sum_ax = 0, sum_ay = 0, sum_az = 0, sum_pot = 0;
#if ORDER >= 4
    vdouble sum_jx = 0, sum_jy = 0, sum_jz = 0;
#endif
#if ORDER >= 6
    vdouble sum_sx = 0, sum_sy = 0, sum_sz = 0;
#endif
#if ORDER >= 8
    vdouble sum_cx = 0, sum_cy = 0, sum_cz = 0;
#endif
    vreal nn_r2 = (vreal)INFINITY;
    vint nn_id = (vint)(-1);

#if USE_LOCAL
    __local real4 lpos[JT];
#if PRECISION == 1
    __local float4 lpos_lo[JT];
#endif
#if ORDER >= 4
    __local real4 lvel[JT];
#endif
#if ORDER >= 6
    __local real4 lacc[JT];
#endif
#if ORDER >= 8
    __local real4 ljerk[JT];
#endif
    __local int lid[JT];
#endif
    const int flat = lj * LI + li;

    for (int jt = j0; jt < j1; jt += JT) {
        const int nt = min(JT, j1 - jt);
#if USE_LOCAL
        for (int l = flat; l < nt; l += LI * LJ) {
            lpos[l] = jpos[jt + l];
#if PRECISION == 1
            lpos_lo[l] = jpos_lo[jt + l];
#endif
#if ORDER >= 4
            lvel[l] = jvel[jt + l];
#endif
#if ORDER >= 6
            lacc[l] = jacc[jt + l];
#endif
#if ORDER >= 8
            ljerk[l] = jjerk[jt + l];
#endif
            lid[l] = jid[jt + l];
        }
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        vreal ax = 0, ay = 0, az = 0, pot = 0;
#if ORDER >= 4
        vreal jx = 0, jy = 0, jz = 0;
#endif
#if ORDER >= 6
        vreal sx = 0, sy = 0, sz = 0;
#endif
#if ORDER >= 8
        vreal cx = 0, cy = 0, cz = 0;
#endif
        const int kend = live ? nt : 0; /* padding: no interactions */
#if JV
        for (int k = 0; k < kend; k += W) {
            /* W consecutive j-particles in the lanes; lanes past the tile are masked */
            const vint idj = VLOAD_JID(jid + jt + k);
            vreal xj, yj, zj, mj;
            GATHER4(jpos + jt + k, xj, yj, zj, mj);
#if PRECISION == 1
            vreal xlj, ylj, zlj, unused_w;
            GATHER4(jpos_lo + jt + k, xlj, ylj, zlj, unused_w);
#endif
            const vint in_tile = lanes < (vint)(nt - k);
#else
        for (int k = lj; k < kend; k += LJ) {
            const int idj = JID(k);
            const real4 pj = JPOS(k);
            const real xj = pj.x, yj = pj.y, zj = pj.z, mj = pj.w;
#if PRECISION == 1
            const float4 pl = JPOS_LO(k);
            const float xlj = pl.x, ylj = pl.y, zlj = pl.z;
#endif
#endif
#if PRECISION == 1 && SINGLE
            const vreal dx = xj - xhi;
            const vreal dy = yj - yhi;
            const vreal dz = zj - zhi;
#elif PRECISION == 1
            const vreal dx = (xj - xhi) + (xlj - xlo);
            const vreal dy = (yj - yhi) + (ylj - ylo);
            const vreal dz = (zj - zhi) + (zlj - zlo);
#else
            const vreal dx = xj - xd;
            const vreal dy = yj - yd;
            const vreal dz = zj - zd;
#endif
            const vreal r2u = dx * dx + dy * dy + dz * dz;
            /* self-exclusion by id; unused addresses carry id -1 */
#if JV
            const vint other_i = (IDS ? (idj != (vint)idi) & (idj >= (vint)0) : (vint)(-1))
                                 & in_tile;
#elif IDS
            const vint other_i = VMASK((vint)idj != idi) & (vint)(~(idj >> 31));
#else
            const vint other_i = (vint)(-1);  /* (every pair: the masks fold away) */
#endif
#if CUTOFF
            /* coincident pairs (R = 0) are left out too; the factors of a pair left out
             * are those of R = 0, times zero */
            const vreal s2 = r2u + eps2;
            const vreal rinv = KEEP_R(RSQRT_FINITE(s2),
                                      MASK_R(other_i & VMASK(MASK_I(s2 > 0))));
            vreal cut_g, cut_h;
            CUTOFF_FACTORS(s2 * rinv, cut_g, cut_h);
            const vreal mrinv = mj * rinv;
            pot -= mrinv * cut_h;
#else
            const vreal rinv = KEEP_R(RSQRT_FINITE(r2u + eps2), MASK_R(other_i));
            const vreal mrinv = mj * rinv;
            pot -= mrinv;
#endif
            /* Pair terms by recurrence: with s = R^2, c = s^(-3/2), A0 = m c d and
             * alpha = (d.dv)/s, dc/dt = -3 alpha c, so A1 = m c dv - 3 alpha A0 (jerk).
             * d(alpha)/dt = beta - 3 alpha^2 with beta = (dv.dv + d.da)/s + alpha^2, so
             * A2 = m c da - 6 alpha A1 - 3 beta A0 (snap). d(beta)/dt = gamma - 3 alpha beta
             * with gamma = (3 dv.da + d.dj)/s + alpha (3 beta - 4 alpha^2), so
             * A3 = m c dj - 9 alpha A2 - 9 beta A1 - 3 gamma A0 (crackle).
             *
             * Double-single writes every term as m/R^2 times a vector with R's scale taken
             * out: e = d/R (|e| <= 1) and the differences of velocity, acceleration and jerk
             * divided by R (w, q, p: rates, 1/time^k), so that alpha = e.w,
             * beta = w.w + e.q + alpha^2, gamma = 3 w.q + e.p + alpha (3 beta - 4 alpha^2),
             *   acc = m/R^2 e, jerk = m/R^2 t, snap = m/R^2 u,
             *   crackle = m/R^2 (p - 9 alpha u - 9 beta t - 3 gamma e),
             * t = w - 3 alpha e, u = q - 6 alpha t - 3 beta e. The factor m/R^2 is the size
             * of the acceleration term itself, so it is inside float's range whenever that
             * term is; the factor m/R^3 of d that these terms had before left the range
             * first (below 1.2e-38 for |d| above about 1e12 at m = 1/64, so that the
             * acceleration lost digits and then vanished; above 3.4e38 at small
             * separations). Each term is one multiply-add where contracted; the price is
             * three multiplies per scaled vector (e; at order >= 4 w, >= 6 q, 8 p) less the
             * multiplies by R^2 that they replace (docs/accuracy.md, "The range of
             * double-single").
             *
             * Double forms the products f = m/R^3 d, g = m/R^3 t and h = m/R^3 u (the same
             * instruction count without contraction, and faster on PoCL's CPU devices). */
#if PRECISION == 1
#if CUTOFF
            const vreal fr = mrinv * rinv * cut_g;
#else
            const vreal fr = mrinv * rinv;
#endif
            const vreal ex = dx * rinv, ey = dy * rinv, ez = dz * rinv;
            ax += fr * ex;
            ay += fr * ey;
            az += fr * ez;
#else
            const vreal rinv2 = rinv * rinv;
#if CUTOFF
            const vreal mrinv3 = mrinv * rinv2 * cut_g;
#else
            const vreal mrinv3 = mrinv * rinv2;
#endif
            const vreal fx = mrinv3 * dx, fy = mrinv3 * dy, fz = mrinv3 * dz;
            ax += fx;
            ay += fy;
            az += fz;
#endif
#if ORDER >= 4
#if JV
            vreal vxj, vyj, vzj, unused_v;
            GATHER4(jvel + jt + k, vxj, vyj, vzj, unused_v);
#else
            const real4 vj = JVEL(k);
            const real vxj = vj.x, vyj = vj.y, vzj = vj.z;
#endif
#if PRECISION == 1
            const vreal wx = (vxj - vxi) * rinv, wy = (vyj - vyi) * rinv;
            const vreal wz = (vzj - vzi) * rinv;
            const vreal alpha = ex * wx + ey * wy + ez * wz;
            const vreal a3 = 3 * alpha;
            const vreal tx = wx - a3 * ex, ty = wy - a3 * ey, tz = wz - a3 * ez;
            jx += fr * tx;
            jy += fr * ty;
            jz += fr * tz;
#else
            const vreal dvx = vxj - vxi, dvy = vyj - vyi, dvz = vzj - vzi;
            const vreal alpha = (dx * dvx + dy * dvy + dz * dvz) * rinv2;
            const vreal a3 = 3 * alpha;
            const vreal gx = mrinv3 * dvx - a3 * fx;
            const vreal gy = mrinv3 * dvy - a3 * fy;
            const vreal gz = mrinv3 * dvz - a3 * fz;
            jx += gx;
            jy += gy;
            jz += gz;
#endif
#endif
#if ORDER >= 6
#if JV
            vreal axj, ayj, azj, unused_a;
            GATHER4(jacc + jt + k, axj, ayj, azj, unused_a);
#else
            const real4 aj = JACC(k);
            const real axj = aj.x, ayj = aj.y, azj = aj.z;
#endif
#if PRECISION == 1
            const vreal qx = (axj - axi) * rinv, qy = (ayj - ayi) * rinv;
            const vreal qz = (azj - azi) * rinv;
            const vreal beta = wx * wx + wy * wy + wz * wz + ex * qx + ey * qy + ez * qz
                               + alpha * alpha;
            const vreal a6 = 6 * alpha, b3 = 3 * beta;
            const vreal ux = qx - a6 * tx - b3 * ex;
            const vreal uy = qy - a6 * ty - b3 * ey;
            const vreal uz = qz - a6 * tz - b3 * ez;
            sx += fr * ux;
            sy += fr * uy;
            sz += fr * uz;
#else
            const vreal dax = axj - axi, day = ayj - ayi, daz = azj - azi;
            const vreal beta = (dvx * dvx + dvy * dvy + dvz * dvz + dx * dax + dy * day + dz * daz)
                               * rinv2 + alpha * alpha;
            const vreal a6 = 6 * alpha, b3 = 3 * beta;
            const vreal hx = mrinv3 * dax - a6 * gx - b3 * fx;
            const vreal hy = mrinv3 * day - a6 * gy - b3 * fy;
            const vreal hz = mrinv3 * daz - a6 * gz - b3 * fz;
            sx += hx;
            sy += hy;
            sz += hz;
#endif
#endif
#if ORDER >= 8
#if JV
            vreal jxj, jyj, jzj, unused_j;
            GATHER4(jjerk + jt + k, jxj, jyj, jzj, unused_j);
#else
            const real4 jj = JJERK(k);
            const real jxj = jj.x, jyj = jj.y, jzj = jj.z;
#endif
#if PRECISION == 1
            const vreal px = (jxj - jxi) * rinv, py = (jyj - jyi) * rinv;
            const vreal pz = (jzj - jzi) * rinv;
            const vreal gamma = 3 * (wx * qx + wy * qy + wz * qz) + ex * px + ey * py + ez * pz
                                + alpha * (b3 - 4 * alpha * alpha);
            const vreal a9 = 9 * alpha, b9 = 9 * beta, g3 = 3 * gamma;
            cx += fr * (px - a9 * ux - b9 * tx - g3 * ex);
            cy += fr * (py - a9 * uy - b9 * ty - g3 * ey);
            cz += fr * (pz - a9 * uz - b9 * tz - g3 * ez);
#else
            const vreal djx = jxj - jxi, djy = jyj - jyi, djz = jzj - jzi;
            const vreal gamma = (3 * (dvx * dax + dvy * day + dvz * daz)
                                 + dx * djx + dy * djy + dz * djz) * rinv2
                                + alpha * (b3 - 4 * alpha * alpha);
            const vreal a9 = 9 * alpha, b9 = 9 * beta, g3 = 3 * gamma;
            cx += mrinv3 * djx - a9 * hx - b9 * gx - g3 * fx;
            cy += mrinv3 * djy - a9 * hy - b9 * gy - g3 * fy;
            cz += mrinv3 * djz - a9 * hz - b9 * gz - g3 * fz;
#endif
#endif
#if IDS
            /* nearest neighbour: smallest unsoftened r^2, ties to the lower id */
            const vint closer = (VMASK(MASK_I(r2u < nn_r2))
                                 | (VMASK(MASK_I(r2u == nn_r2)) & VMASK((vint)idj < nn_id)))
                                & other_i;
            nn_r2 = BLEND_R(nn_r2, r2u, MASK_R(closer));
            nn_id = BLEND_I(nn_id, (vint)idj, closer);
#endif
#if NGB
            const vint in_list = VMASK(MASK_I(r2u < h2)) & other_i;
            if (ANY(in_list)) {
                int flag[W];
                VSTORE_I(in_list, 0, flag);
#if JV
                int jids[W];
                VSTORE_I(idj, 0, jids);
                for (int l = 0; l < W; l++) {
                    if (flag[l] && i < ni) {
                        const int slot = atomic_inc(&nb_count[i]);
                        if (slot < NB_CAP) nb_list[(size_t)i * NB_CAP + slot] = jids[l];
                    }
                }
#else
                for (int l = 0; l < W; l++) {
                    const int i = iv * W + l;
                    if (flag[l] && i < ni) {
                        const int slot = atomic_inc(&nb_count[i]);
                        if (slot < NB_CAP) nb_list[(size_t)i * NB_CAP + slot] = idj;
                    }
                }
#endif
            }
#endif
        }
        sum_ax += TO_VDOUBLE(ax);
        sum_ay += TO_VDOUBLE(ay);
        sum_az += TO_VDOUBLE(az);
        sum_pot += TO_VDOUBLE(pot);
#if ORDER >= 4
        sum_jx += TO_VDOUBLE(jx);
        sum_jy += TO_VDOUBLE(jy);
        sum_jz += TO_VDOUBLE(jz);
#endif
#if ORDER >= 6
        sum_sx += TO_VDOUBLE(sx);
        sum_sy += TO_VDOUBLE(sy);
        sum_sz += TO_VDOUBLE(sz);
#endif
#if ORDER >= 8
        sum_cx += TO_VDOUBLE(cx);
        sum_cy += TO_VDOUBLE(cy);
        sum_cz += TO_VDOUBLE(cz);
#endif
#if USE_LOCAL
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
    }

    vdouble r[NCO];
    r[OC_AX] = sum_ax;
    r[OC_AY] = sum_ay;
    r[OC_AZ] = sum_az;
    r[OC_POT] = sum_pot;
#if ORDER >= 4
    r[OC_JX] = sum_jx;
    r[OC_JY] = sum_jy;
    r[OC_JZ] = sum_jz;
#else
    r[OC_JX] = r[OC_JY] = r[OC_JZ] = 0;
#endif
#if ORDER >= 6
    r[OC_SX] = sum_sx;
    r[OC_SY] = sum_sy;
    r[OC_SZ] = sum_sz;
#else
    r[OC_SX] = r[OC_SY] = r[OC_SZ] = 0;
#endif
#if ORDER >= 8
    r[OC_CX] = sum_cx;
    r[OC_CY] = sum_cy;
    r[OC_CZ] = sum_cz;
#endif
    r[OC_NNR2] = TO_VDOUBLE(nn_r2);
    r[OC_NNID] = TO_VDOUBLE(nn_id);

#if LJ > 1
    /* Combine the lanes of each i-particle in lane order (LJ > 1 implies W == 1). */
    __local double red[NCO * LJ * LI];
    for (int c = 0; c < NCO; c++) red[(c * LJ + lj) * LI + li] = r[c];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (lj != 0) return;
    for (int l = 1; l < LJ; l++) {
        for (int c = 0; c < NCO; c++) {
            if (c != OC_NNR2 && c != OC_NNID) r[c] += red[(c * LJ + l) * LI + li];
        }
        nn_merge(r, red[(OC_NNR2 * LJ + l) * LI + li], red[(OC_NNID * LJ + l) * LI + li]);
    }
#endif
    __global double *o = out + (size_t)part * NCO * ni_pad;
#if JV
    /* combine the j-lanes in lane order: sums; nearest neighbour by minimum r^2, ties to
     * the lower id */
    double lane[NCO][W], s[NCO];
    for (int c = 0; c < NCO; c++) {
        VSTORE_D(r[c], 0, lane[c]);
        s[c] = lane[c][0];
        if (c != OC_NNR2 && c != OC_NNID)
            for (int l = 1; l < W; l++) s[c] += lane[c][l];
    }
    for (int l = 1; l < W; l++) nn_merge(s, lane[OC_NNR2][l], lane[OC_NNID][l]);
    for (int c = 0; c < NCO; c++) o[(size_t)c * ni_pad + i] = s[c];
#else
    for (int c = 0; c < NCO; c++) VSTORE_D(r[c], iv, o + (size_t)c * ni_pad);
#endif
}

/* Combine the parts of each i-particle: group REDUCE_LANES x REDUCE_ROWS, REDUCE_LANES lanes
 * per i-particle. Lane l sums parts l, l + REDUCE_LANES, ... in order; a halving tree then
 * adds lane l + s into lane l (s = 16, 8, 4, 2, 1) where that lane holds parts. Sums follow
 * this fixed order (the host's combination in sapporo.library follows it too: the same bits
 * either way); nearest neighbour by minimum unsoftened r^2, ties to the lower id. */
__kernel __attribute__((reqd_work_group_size(REDUCE_LANES, REDUCE_ROWS, 1)))
void reduce(const int ni, const int ni_pad, const int nparts, __global const double *partial,
            __global double *out)
{
    const int lane = get_local_id(0), row = get_local_id(1);
    const int i = get_global_id(1);
    const bool live = i < ni;
    __local double red[REDUCE_ROWS][NCO][REDUCE_LANES];
    double r[NCO];
    for (int c = 0; c < NCO; c++) r[c] = 0.0;
    if (live && lane < nparts) {
        __global const double *p = partial + (size_t)lane * NCO * ni_pad + i;
        for (int c = 0; c < NCO; c++) r[c] = p[(size_t)c * ni_pad];
        for (int q = lane + REDUCE_LANES; q < nparts; q += REDUCE_LANES) {
            p = partial + (size_t)q * NCO * ni_pad + i;
            for (int c = 0; c < NCO; c++) {
                if (c != OC_NNR2 && c != OC_NNID) r[c] += p[(size_t)c * ni_pad];
            }
            nn_merge(r, p[(size_t)OC_NNR2 * ni_pad], p[(size_t)OC_NNID * ni_pad]);
        }
    }
    for (int s = REDUCE_LANES / 2; s >= 1; s >>= 1) {
        if (lane >= s && lane < 2 * s)
            for (int c = 0; c < NCO; c++) red[row][c][lane] = r[c];
        barrier(CLK_LOCAL_MEM_FENCE);
        if (live && lane < s && lane + s < nparts) {
            for (int c = 0; c < NCO; c++) {
                if (c != OC_NNR2 && c != OC_NNID) r[c] += red[row][c][lane + s];
            }
            nn_merge(r, red[row][OC_NNR2][lane + s], red[row][OC_NNID][lane + s]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    if (live && lane == 0)
        for (int c = 0; c < NCO; c++) out[(size_t)c * ni_pad + i] = r[c];
}
