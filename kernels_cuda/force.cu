/* Forces on a block of i-particles from the predicted j-particles.
 * CUDA twin of kernels_opencl/force.cl: same names, arguments, work split and arithmetic.
 *
 * Work split. The host launches grid (ni_pad / (LI * W), nparts) of blocks (LI, LJ). Block
 * (gi, part) takes i-particles [gi*LI*W, (gi+1)*LI*W) and the j-range
 * [part*jchunk, (part+1)*jchunk) (at order 2 cut to the block's own, idata's IC_J0 and
 * IC_J1 rows of its first i-particle: the engine's groups); inside the block, lane lj of an i-particle takes every
 * LJ-th j-particle of each tile of JT. Threads are numbered so that the LJ lanes of one
 * i-particle are consecutive (flat = li * LJ + lj): they then share a warp whenever LJ is a
 * power of two up to 32, and are combined with warp shuffles (a butterfly, lane pairs at
 * distance 1, 2, 4, ...); larger LJ combines warps in shared memory in warp order, and an LJ
 * that is not a power of two combines all lanes in shared memory in lane order. Parts are
 * combined by the `reduce` kernel (lanes over parts, then a tree). Every order is fixed, so the same inputs
 * on the same configuration give bitwise identical results.
 *
 * W > 1 (with LJ == 1): a thread holds W consecutive i-particles and applies each
 * j-particle it reads to all of them, so loads and loop overhead are shared by W
 * interactions.
 *
 * Double-single: j - i position differences from hi/lo float pairs, the rest in float
 * (reciprocal square root by the hardware's approximate rsqrt); each lane sums one tile in
 * float and adds that tile sum to double accumulators, so float rounding grows over at most
 * JT/LJ terms.
 */
#include "common.cuh"

/* Double-single, order >= 4, tiles in shared memory: the j-particle's id rides in the
 * unused .w of its shared velocity record (one shared load less per interaction). */
#define ID_IN_VEL (USE_LOCAL && PRECISION == 1 && ORDER >= 4)

#if PRECISION == 1
/* The hardware's approximate reciprocal square root, flushing denormal inputs to zero:
 * rsqrtf adds a range test and two rescaling multiplies per call for inputs below
 * 1.2e-38 (r^2 + eps2 that small is a collision; the flushed input gives inf, and the
 * call is refused as non-finite). On the host emulation of the tests (no __CUDA_ARCH__)
 * it is rsqrtf of the input flushed the same way, so that the emulation refuses what the
 * GPU refuses. */
__device__ __forceinline__ float rsqrt_ftz(float x)
{
#ifdef __CUDA_ARCH__
    float y;
    asm("rsqrt.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return rsqrtf(x < 1.17549435e-38f ? 0.0f : x); /* NaN stays NaN */
#endif
}
/* 1/sqrt(x) of the softened r^2 (never negative), or NaN where x overflowed to inf.
 * rsqrt(inf) is 0, which would drop the pair silently (its forces and its potential);
 * x * 0 + y is y for finite x and NaN for x = inf, one FFMA per pair, so that a pair
 * beyond float's range (|d| above about 1.8e19) makes the result non-finite and the call is
 * refused (the library's non-finite check) instead of returning wrong forces. */
#define RSQRT(x) ((x) * 0.0f + rsqrt_ftz(x))
#else
#define RSQRT(x) (1.0 / sqrt(x))
#endif

#if CUTOFF
/* The cutoff's short-range factors (sapporo/variants.h) of the softened distance R: *g
 * multiplies the pair's acceleration, *h its potential (force.cl's CUTOFF_FACTORS). */
__device__ __forceinline__ void cutoff_factors(const real R, real *g, real *h)
{
#if CUTOFF == 1
    const real x = R * (real)(2.0 / CUTOFF_R);
    const real t = x < 2 ? 2 - x : (real)0;
    *g = (x < 1 ? S2_G_IN(x) : S2_G_OUT(t)) * (real)(1.0 / 140);
    *h = (x < 1 ? S2_H_IN(x) : S2_H_OUT(t)) * (real)(1.0 / 140);
#else
    const real x = R * (real)(0.5 / CUTOFF_R);
#if PRECISION == 1
    *h = erfcf(x);
    *g = *h + 1.1283791670955126f * x * expf(-x * x); /* 2 / sqrt(pi) */
#else
    *h = erfc(x);
    *g = *h + 1.1283791670955126 * x * exp(-x * x);
#endif
#endif
}
#endif

/* Lanes combined by warp shuffles (SHFL_LANES, a power of two <= 32) and then through
 * shared memory (SMEM_LANES groups, in group order). */
#if (LJ & (LJ - 1)) == 0
#define SHFL_LANES (LJ < 32 ? LJ : 32)
#else
#define SHFL_LANES 1
#endif
#define SMEM_LANES (LJ / SHFL_LANES)

/* Result rows this order computes (the others are stored as zeros and need no shuffles). */
#define LIVE(c) ((ORDER >= 4 || (c) < OC_JX || (c) > OC_JZ) \
                 && (ORDER >= 6 || (c) < OC_SX || (c) > OC_SZ))

#if USE_LOCAL
#define JPOS(k) lpos[k]
#define JPOS_LO(k) lpos_lo[k]
#define JVEL(k) lvel[k]
#define JACC(k) lacc[k]
#define JJERK(k) ljerk[k]
#if ID_IN_VEL
#define JID(k) __float_as_int(lvel[k].w)
#else
#define JID(k) lid[k]
#endif
#else
#define JPOS(k) jpos[jt + (k)]
#define JPOS_LO(k) jpos_lo[jt + (k)]
#define JVEL(k) jvel[jt + (k)]
#define JACC(k) jacc[jt + (k)]
#define JJERK(k) jjerk[jt + (k)]
#define JID(k) jid[jt + (k)]
#endif

extern "C" __global__ void __launch_bounds__(LI * LJ)
force(const int nj, const int ni, const int ni_pad, const int jchunk, const double eps2_d,
      const real4 *__restrict__ jpos,
#if PRECISION == 1
      const float4 *__restrict__ jpos_lo,
#endif
      const real4 *__restrict__ jvel,
#if ORDER >= 6
      const real4 *__restrict__ jacc,
#endif
#if ORDER >= 8
      const real4 *__restrict__ jjerk,
#endif
      const int *__restrict__ jid,
      const double *__restrict__ idata,
      double *__restrict__ out
#if NGB
      , int *__restrict__ nb_count, int *__restrict__ nb_list
#endif
      )
{
    const int flat = threadIdx.y * LI + threadIdx.x;
    const int li = flat / LJ;
    const int lj = flat % LJ;
    const int i0 = (blockIdx.x * LI + li) * W; /* this thread's i-particles: i0 .. i0+W-1 */
    const int part = blockIdx.y;
#if ORDER == 2 /* the block's j-range (layout.h: IC_J0, IC_J1), cut to the part's */
    const int first = blockIdx.x * LI * W;
    const int j0 = max(part * jchunk, (int)idata[IC_J0 * ni_pad + first]);
    const int j1 = min(min(part * jchunk + jchunk, nj), (int)idata[IC_J1 * ni_pad + first]);
#else
    const int j0 = part * jchunk;
    const int j1 = min(j0 + jchunk, nj);
#endif
    const real eps2 = (real)eps2_d;
    /* The lanes of this thread's warp (all 32 unless the block ends inside it). */
#if (LI * LJ) % 32 == 0
    const unsigned warp_mask = 0xffffffffu;
#else
    const int warp_threads = min(32, LI * LJ - (flat & ~31));
    const unsigned warp_mask = warp_threads >= 32 ? 0xffffffffu : (1u << warp_threads) - 1u;
#endif
    /* Warps whose i-particles are all padding (i0 >= ni in every lane) load their share of
     * each tile and meet the barriers, but skip the interactions: they then cost almost
     * nothing, so a launch of ni particles costs about round_up(ni, 32 / LJ * W) of them,
     * not round_up(ni, LI * W) (N_active = 129 with LI = 128: 160, not 256). Their results
     * are zeros and never read. A warp vote, not a per-thread test: the condition is then
     * warp-uniform, and nvcc keeps the loop's shared-memory addressing on the uniform
     * datapath (a per-thread test costs double precision 4-6 instructions per interaction
     * on sm_90). */
    const bool live = __any_sync(warp_mask, i0 < ni);

    /* Per i-particle state, indexed by w (unrolled loops only: the arrays stay in
     * registers). */
#if PRECISION == 1
    float xhi[W], yhi[W], zhi[W], xlo[W], ylo[W], zlo[W];
#else
    double xd[W], yd[W], zd[W];
#endif
    int idi[W];
#if NGB
    real h2[W];
#endif
#if ORDER >= 4
    real vxi[W], vyi[W], vzi[W];
#endif
#if ORDER >= 6
    real axi[W], ayi[W], azi[W];
#endif
#if ORDER >= 8
    real jxi[W], jyi[W], jzi[W];
#endif
    double sum_ax[W], sum_ay[W], sum_az[W], sum_pot[W];
#if ORDER >= 4
    double sum_jx[W], sum_jy[W], sum_jz[W];
#endif
#if ORDER >= 6
    double sum_sx[W], sum_sy[W], sum_sz[W];
#endif
#if ORDER >= 8
    double sum_cx[W], sum_cy[W], sum_cz[W];
#endif
#if PRECISION == 1
    /* nearest neighbour as one 64-bit key: the bits of r^2 (non-negative floats order as
     * their bit patterns) above the id, so that the smallest key is the smallest r^2 with
     * ties to the lower id: one 64-bit comparison per pair instead of three */
    unsigned long long nn_key[W];
#else
    real nn_r2[W];
    int nn_id[W];
#endif
#pragma unroll
    for (int w = 0; w < W; w++) {
#define ILOAD(c) idata[(size_t)(c) * ni_pad + i0 + w]
        const double x = ILOAD(IC_X), y = ILOAD(IC_Y), z = ILOAD(IC_Z);
#if PRECISION == 1
        xhi[w] = (float)x;
        yhi[w] = (float)y;
        zhi[w] = (float)z;
        xlo[w] = (float)(x - (double)xhi[w]);
        ylo[w] = (float)(y - (double)yhi[w]);
        zlo[w] = (float)(z - (double)zhi[w]);
#else
        xd[w] = x;
        yd[w] = y;
        zd[w] = z;
#endif
        idi[w] = (int)ILOAD(IC_ID);
#if NGB
        h2[w] = (real)ILOAD(IC_H2);
#endif
#if ORDER >= 4
        vxi[w] = (real)ILOAD(IC_VX);
        vyi[w] = (real)ILOAD(IC_VY);
        vzi[w] = (real)ILOAD(IC_VZ);
#endif
#if ORDER >= 6
        axi[w] = (real)ILOAD(IC_AX);
        ayi[w] = (real)ILOAD(IC_AY);
        azi[w] = (real)ILOAD(IC_AZ);
#endif
#if ORDER >= 8
        jxi[w] = (real)ILOAD(IC_JX);
        jyi[w] = (real)ILOAD(IC_JY);
        jzi[w] = (real)ILOAD(IC_JZ);
#endif
#undef ILOAD
        sum_ax[w] = sum_ay[w] = sum_az[w] = sum_pot[w] = 0;
#if ORDER >= 4
        sum_jx[w] = sum_jy[w] = sum_jz[w] = 0;
#endif
#if ORDER >= 6
        sum_sx[w] = sum_sy[w] = sum_sz[w] = 0;
#endif
#if ORDER >= 8
        sum_cx[w] = sum_cy[w] = sum_cz[w] = 0;
#endif
#if PRECISION == 1
        nn_key[w] = ((unsigned long long)__float_as_uint(REAL_INF) << 32) | 0xffffffffu;
#else
        nn_r2[w] = REAL_INF;
        nn_id[w] = -1;
#endif
    }

#if USE_LOCAL
    __shared__ real4 lpos[JT];
#if PRECISION == 1
    __shared__ float4 lpos_lo[JT];
#endif
#if ORDER >= 4
    __shared__ real4 lvel[JT];
#endif
#if ORDER >= 6
    __shared__ real4 lacc[JT];
#endif
#if ORDER >= 8
    __shared__ real4 ljerk[JT];
#endif
#if !ID_IN_VEL
    __shared__ int lid[JT];
#endif
#endif

    for (int jt = j0; jt < j1; jt += JT) {
        const int nt = min(JT, j1 - jt);
#if USE_LOCAL
        for (int l = flat; l < nt; l += LI * LJ) {
            lpos[l] = jpos[jt + l];
#if PRECISION == 1
            lpos_lo[l] = jpos_lo[jt + l];
#endif
#if ORDER >= 4
#if ID_IN_VEL
            float4 vid = jvel[jt + l];
            vid.w = __int_as_float(jid[jt + l]);
            lvel[l] = vid;
#else
            lvel[l] = jvel[jt + l];
#endif
#endif
#if ORDER >= 6
            lacc[l] = jacc[jt + l];
#endif
#if ORDER >= 8
            ljerk[l] = jjerk[jt + l];
#endif
#if !ID_IN_VEL
            lid[l] = jid[jt + l];
#endif
        }
        __syncthreads();
#endif
        real ax[W], ay[W], az[W], pot[W];
#if ORDER >= 4
        real jx[W], jy[W], jz[W];
#endif
#if ORDER >= 6
        real sx[W], sy[W], sz[W];
#endif
#if ORDER >= 8
        real cx[W], cy[W], cz[W];
#endif
#pragma unroll
        for (int w = 0; w < W; w++) {
            ax[w] = ay[w] = az[w] = pot[w] = 0;
#if ORDER >= 4
            jx[w] = jy[w] = jz[w] = 0;
#endif
#if ORDER >= 6
            sx[w] = sy[w] = sz[w] = 0;
#endif
#if ORDER >= 8
            cx[w] = cy[w] = cz[w] = 0;
#endif
        }
        /* warps of padding start past the tile (no interactions); the bound stays nt */
        for (int k = live ? lj : nt; k < nt; k += LJ) {
            const int idj = JID(k);
            const real4 pj = JPOS(k);
#if PRECISION == 1
            const float4 pl = JPOS_LO(k);
#endif
#if ORDER >= 4
            const real4 vj = JVEL(k);
#endif
#if ORDER >= 6
            const real4 aj = JACC(k);
#endif
#if ORDER >= 8
            const real4 jj = JJERK(k);
#endif
#pragma unroll
            for (int w = 0; w < W; w++) {
#if PRECISION == 1 && SINGLE
                const real dx = pj.x - xhi[w];
                const real dy = pj.y - yhi[w];
                const real dz = pj.z - zhi[w];
#elif PRECISION == 1
                const real dx = (pj.x - xhi[w]) + (pl.x - xlo[w]);
                const real dy = (pj.y - yhi[w]) + (pl.y - ylo[w]);
                const real dz = (pj.z - zhi[w]) + (pl.z - zlo[w]);
#else
                const real dx = pj.x - xd[w];
                const real dy = pj.y - yd[w];
                const real dz = pj.z - zd[w];
#endif
                const real r2u = ADD_RN(ADD_RN(MUL_RN(dx, dx), MUL_RN(dy, dy)), MUL_RN(dz, dz));
                /* self-exclusion by id; unused addresses carry id -1 (IDS 0: every pair) */
                const bool other = !IDS || ((idj != idi[w]) && (idj >= 0));
                /* computed for every pair and then selected: a branch around it made nvcc
                 * reload and convert eps2 inside the loop (inf or NaN of a self pair is
                 * discarded by the select) */
                const real s2 = r2u + eps2;
                const real rinv_all = RSQRT(s2);
#if CUTOFF
                /* coincident pairs (R = 0) are left out too */
                const real rinv = other && s2 > 0 ? rinv_all : (real)0;
                real cut_g, cut_h;
                cutoff_factors(s2 * rinv, &cut_g, &cut_h);
                const real mrinv = pj.w * rinv;
                pot[w] -= mrinv * cut_h;
#else
                const real rinv = other ? rinv_all : (real)0;
                const real mrinv = pj.w * rinv;
                pot[w] -= mrinv;
#endif
#if PRECISION == 1
                /* Every pair term is the factor m/R^2 times a vector of R's scale removed:
                 * e = d/R (|e| <= 1), and the velocity, acceleration and jerk differences
                 * divided by R (rates, 1/time^k):
                 *   acc = m/R^2 e, jerk = m/R^2 t, snap = m/R^2 u,
                 *   crackle = m/R^2 (dj/R - 9 alpha u - 9 beta t - 3 gamma e),
                 * t = dv/R - 3 alpha e, u = da/R - 6 alpha t - 3 beta e, with alpha, beta,
                 * gamma as in force.cl, formed from the scaled vectors. m/R^2 is the size of
                 * the acceleration term itself, so it stays in float's range as long as that
                 * term does; the factor m/R^3 that the terms of d, dv, ... had before left
                 * that range first (it underflowed for |d| above about 1e12 at m = 1/64, and
                 * overflows at small separations). Each term is one FFMA; the cost is three
                 * multiplies per scaled vector (e, and at order >= 4 dv, >= 6 da, 8 dj) less
                 * the multiplies by R^2 they replace: order 4, 50 -> 55 instructions per
                 * interaction on sm_90 with the FFMA of RSQRT (docs/accuracy.md). */
#if CUTOFF
                const real fr = mrinv * rinv * cut_g;
#else
                const real fr = mrinv * rinv;
#endif
                const real ex = dx * rinv, ey = dy * rinv, ez = dz * rinv;
                ax[w] += fr * ex;
                ay[w] += fr * ey;
                az[w] += fr * ez;
#if ORDER >= 4
                const real wx = (vj.x - vxi[w]) * rinv, wy = (vj.y - vyi[w]) * rinv;
                const real wz = (vj.z - vzi[w]) * rinv;
                const real alpha = ex * wx + ey * wy + ez * wz;
                const real a3 = 3 * alpha;
                const real tx = wx - a3 * ex, ty = wy - a3 * ey, tz = wz - a3 * ez;
                jx[w] += fr * tx;
                jy[w] += fr * ty;
                jz[w] += fr * tz;
#endif
#if ORDER >= 6
                const real qx = (aj.x - axi[w]) * rinv, qy = (aj.y - ayi[w]) * rinv;
                const real qz = (aj.z - azi[w]) * rinv;
                const real beta = wx * wx + wy * wy + wz * wz + ex * qx + ey * qy + ez * qz
                                  + alpha * alpha;
                const real a6 = 6 * alpha, b3 = 3 * beta;
                const real ux = qx - a6 * tx - b3 * ex;
                const real uy = qy - a6 * ty - b3 * ey;
                const real uz = qz - a6 * tz - b3 * ez;
                sx[w] += fr * ux;
                sy[w] += fr * uy;
                sz[w] += fr * uz;
#endif
#if ORDER >= 8
                const real px = (jj.x - jxi[w]) * rinv, py = (jj.y - jyi[w]) * rinv;
                const real pz = (jj.z - jzi[w]) * rinv;
                const real gamma = 3 * (wx * qx + wy * qy + wz * qz) + ex * px + ey * py
                                   + ez * pz + alpha * (b3 - 4 * alpha * alpha);
                const real a9 = 9 * alpha, b9 = 9 * beta, g3 = 3 * gamma;
                cx[w] += fr * (px - a9 * ux - b9 * tx - g3 * ex);
                cy[w] += fr * (py - a9 * uy - b9 * ty - g3 * ey);
                cz[w] += fr * (pz - a9 * uz - b9 * tz - g3 * ez);
#endif
#else
                /* acc = m/R^3 d, jerk = m/R^3 t, snap = m/R^3 u, crackle = m/R^3 (dj
                 * - 9 alpha u - 9 beta t - 3 gamma d) with t = dv - 3 alpha d,
                 * u = da - 6 alpha t - 3 beta d (the recurrence is derived in force.cl),
                 * formed as the OpenCL kernels' products f = m/R^3 d, g = m/R^3 t,
                 * h = m/R^3 u (the same arithmetic, the same bits on the CPU emulation). */
                const real rinv2 = rinv * rinv;
#if CUTOFF
                const real mrinv3 = mrinv * rinv2 * cut_g;
#else
                const real mrinv3 = mrinv * rinv2;
#endif
                const real fx = mrinv3 * dx, fy = mrinv3 * dy, fz = mrinv3 * dz;
                ax[w] += fx;
                ay[w] += fy;
                az[w] += fz;
#if ORDER >= 4
                const real dvx = vj.x - vxi[w], dvy = vj.y - vyi[w], dvz = vj.z - vzi[w];
                const real alpha = (dx * dvx + dy * dvy + dz * dvz) * rinv2;
                const real a3 = 3 * alpha;
                const real gx = mrinv3 * dvx - a3 * fx;
                const real gy = mrinv3 * dvy - a3 * fy;
                const real gz = mrinv3 * dvz - a3 * fz;
                jx[w] += gx;
                jy[w] += gy;
                jz[w] += gz;
#endif
#if ORDER >= 6
                const real dax = aj.x - axi[w], day = aj.y - ayi[w], daz = aj.z - azi[w];
                const real beta = (dvx * dvx + dvy * dvy + dvz * dvz
                                   + dx * dax + dy * day + dz * daz) * rinv2 + alpha * alpha;
                const real a6 = 6 * alpha, b3 = 3 * beta;
                const real hx = mrinv3 * dax - a6 * gx - b3 * fx;
                const real hy = mrinv3 * day - a6 * gy - b3 * fy;
                const real hz = mrinv3 * daz - a6 * gz - b3 * fz;
                sx[w] += hx;
                sy[w] += hy;
                sz[w] += hz;
#endif
#if ORDER >= 8
                const real djx = jj.x - jxi[w], djy = jj.y - jyi[w], djz = jj.z - jzi[w];
                const real gamma = (3 * (dvx * dax + dvy * day + dvz * daz)
                                    + dx * djx + dy * djy + dz * djz) * rinv2
                                   + alpha * (b3 - 4 * alpha * alpha);
                const real a9 = 9 * alpha, b9 = 9 * beta, g3 = 3 * gamma;
                cx[w] += mrinv3 * djx - a9 * hx - b9 * gx - g3 * fx;
                cy[w] += mrinv3 * djy - a9 * hy - b9 * gy - g3 * fy;
                cz[w] += mrinv3 * djz - a9 * hz - b9 * gz - g3 * fz;
#endif
#endif
#if IDS
                /* nearest neighbour: smallest unsoftened r^2, ties to the lower id */
#if PRECISION == 1
                const unsigned long long key =
                    ((unsigned long long)__float_as_uint(r2u) << 32) | (unsigned)idj;
                if (other && key < nn_key[w]) nn_key[w] = key;
#else
                if (other && (r2u < nn_r2[w] || (r2u == nn_r2[w] && idj < nn_id[w]))) {
                    nn_r2[w] = r2u;
                    nn_id[w] = idj;
                }
#endif
#endif
#if NGB
                const int i = i0 + w;
                if (other && r2u < h2[w] && i < ni) {
                    const int slot = atomicAdd(&nb_count[i], 1);
                    if (slot < NB_CAP) nb_list[(size_t)i * NB_CAP + slot] = idj;
                }
#endif
            }
        }
#pragma unroll
        for (int w = 0; w < W; w++) {
            sum_ax[w] += (double)ax[w];
            sum_ay[w] += (double)ay[w];
            sum_az[w] += (double)az[w];
            sum_pot[w] += (double)pot[w];
#if ORDER >= 4
            sum_jx[w] += (double)jx[w];
            sum_jy[w] += (double)jy[w];
            sum_jz[w] += (double)jz[w];
#endif
#if ORDER >= 6
            sum_sx[w] += (double)sx[w];
            sum_sy[w] += (double)sy[w];
            sum_sz[w] += (double)sz[w];
#endif
#if ORDER >= 8
            sum_cx[w] += (double)cx[w];
            sum_cy[w] += (double)cy[w];
            sum_cz[w] += (double)cz[w];
#endif
        }
#if USE_LOCAL
        __syncthreads();
#endif
    }

    /* Result rows of each of the thread's i-particles; with W > 1 (so LJ == 1) there are
     * no lanes to combine and the loop stores them, with W == 1 it runs once. */
#pragma unroll
    for (int w = 0; w < W; w++) {
        double r[NCO];
        r[OC_AX] = sum_ax[w];
        r[OC_AY] = sum_ay[w];
        r[OC_AZ] = sum_az[w];
        r[OC_POT] = sum_pot[w];
#if ORDER >= 4
        r[OC_JX] = sum_jx[w];
        r[OC_JY] = sum_jy[w];
        r[OC_JZ] = sum_jz[w];
#else
        r[OC_JX] = r[OC_JY] = r[OC_JZ] = 0;
#endif
#if ORDER >= 6
        r[OC_SX] = sum_sx[w];
        r[OC_SY] = sum_sy[w];
        r[OC_SZ] = sum_sz[w];
#else
        r[OC_SX] = r[OC_SY] = r[OC_SZ] = 0;
#endif
#if ORDER >= 8
        r[OC_CX] = sum_cx[w];
        r[OC_CY] = sum_cy[w];
        r[OC_CZ] = sum_cz[w];
#endif
#if PRECISION == 1
        r[OC_NNR2] = (double)__uint_as_float((unsigned)(nn_key[w] >> 32));
        r[OC_NNID] = (double)(int)(unsigned)nn_key[w]; /* 0xffffffff: -1, none */
#else
        r[OC_NNR2] = (double)nn_r2[w];
        r[OC_NNID] = (double)nn_id[w];
#endif
#if SHFL_LANES > 1
        {
            /* Butterfly over the lanes of each i-particle, inside one warp (warp_mask leaves
             * out threads past the end of a block that does not fill its last warp). */
#pragma unroll
            for (int off = 1; off < SHFL_LANES; off <<= 1) {
                double o[NCO];
#pragma unroll
                for (int c = 0; c < NCO; c++) o[c] = LIVE(c) ? __shfl_xor_sync(warp_mask, r[c], off) : 0;
#pragma unroll
                for (int c = 0; c < NCO; c++) {
                    if (c != OC_NNR2 && c != OC_NNID) r[c] += o[c];
                }
                nn_merge(&r[OC_NNR2], &r[OC_NNID], o[OC_NNR2], o[OC_NNID]);
            }
        }
#endif
#if SMEM_LANES > 1
        /* Combine the lane groups of each i-particle in group order. */
        __shared__ double red[NCO * SMEM_LANES * LI];
        const int g = lj / SHFL_LANES;
        if (lj % SHFL_LANES == 0) {
#pragma unroll
            for (int c = 0; c < NCO; c++) red[(c * SMEM_LANES + g) * LI + li] = r[c];
        }
        __syncthreads();
        if (lj != 0) return;
        for (int l = 1; l < SMEM_LANES; l++) {
#pragma unroll
            for (int c = 0; c < NCO; c++) {
                if (c != OC_NNR2 && c != OC_NNID) r[c] += red[(c * SMEM_LANES + l) * LI + li];
            }
            nn_merge(&r[OC_NNR2], &r[OC_NNID], red[(OC_NNR2 * SMEM_LANES + l) * LI + li],
                     red[(OC_NNID * SMEM_LANES + l) * LI + li]);
        }
#endif
        if (lj != 0) return;
        double *o = out + (size_t)part * NCO * ni_pad + i0 + w;
#pragma unroll
        for (int c = 0; c < NCO; c++) o[(size_t)c * ni_pad] = r[c];
    }
}

/* Combine the parts of each i-particle: one warp per i-particle (block REDUCE_LANES x
 * REDUCE_ROWS). Lane l sums parts l, l + REDUCE_LANES, ... in order; a halving tree then adds
 * lane l + s into lane l (s = 16, 8, 4, 2, 1) where that lane holds parts. Sums follow this
 * fixed order (the host's combination in sapporo.library follows it too: the same bits
 * either way); nearest neighbour by minimum unsoftened r^2, ties to the lower id. The
 * latency is about nparts / 32 dependent loads, not nparts. */
extern "C" __global__ void __launch_bounds__(REDUCE_LANES * REDUCE_ROWS)
reduce(const int ni, const int ni_pad, const int nparts, const double *__restrict__ partial,
       double *__restrict__ out)
{
    const int lane = threadIdx.x;
    const int i = blockIdx.y * REDUCE_ROWS + threadIdx.y;
    if (i >= ni) return; /* whole warps: a warp is one i-particle */
    double r[NCO];
#pragma unroll
    for (int c = 0; c < NCO; c++) r[c] = 0.0;
    if (lane < nparts) {
        const double *p = partial + (size_t)lane * NCO * ni_pad + i;
#pragma unroll
        for (int c = 0; c < NCO; c++) r[c] = p[(size_t)c * ni_pad];
    }
    for (int q = lane + REDUCE_LANES; q < nparts; q += REDUCE_LANES) {
        const double *p = partial + (size_t)q * NCO * ni_pad + i;
        double v[NCO];
#pragma unroll
        for (int c = 0; c < NCO; c++) v[c] = p[(size_t)c * ni_pad];
#pragma unroll
        for (int c = 0; c < NCO; c++) {
            if (c != OC_NNR2 && c != OC_NNID) r[c] += v[c];
        }
        nn_merge(&r[OC_NNR2], &r[OC_NNID], v[OC_NNR2], v[OC_NNID]);
    }
#pragma unroll
    for (int s = REDUCE_LANES / 2; s >= 1; s >>= 1) {
        double o[NCO];
#pragma unroll
        for (int c = 0; c < NCO; c++) o[c] = __shfl_down_sync(0xffffffffu, r[c], s);
        if (lane < s && lane + s < nparts) {
#pragma unroll
            for (int c = 0; c < NCO; c++) {
                if (c != OC_NNR2 && c != OC_NNID) r[c] += o[c];
            }
            nn_merge(&r[OC_NNR2], &r[OC_NNID], o[OC_NNR2], o[OC_NNID]);
        }
    }
    if (lane == 0) {
#pragma unroll
        for (int c = 0; c < NCO; c++) out[(size_t)c * ni_pad + i] = r[c];
    }
}
