/* Compile-time variants shared by the sapporo CUDA kernels.
 *
 * The CUDA tree mirrors kernels_opencl/ (common.h, predict.cl, force.cl): the same kernel
 * names, argument lists and row constants, and the same macros with the same defaults:
 *
 *   ORDER      2 (acceleration, potential), 4 (+ jerk), 6 (+ snap) or 8 (+ crackle)
 *   PRECISION  1 = double-single (j - i differences in hi/lo float pairs, the rest in float,
 *                  partial sums combined in double), 2 = double (everything in double)
 *   NGB        0 or 1: neighbour lists off or on
 *   IDS        1: ids exclude self-pairs and give the nearest neighbour; 0: every pair
 *              counts, no nearest neighbour, no lists (GRAPE-5)
 *   LI, LJ     thread-block shape: LI threads over i x LJ j-lanes (tuning parameters)
 *   W          i-particles per thread (1, 2 or 4; W > 1 needs LJ == 1): each j-particle
 *              read from shared memory serves W interactions (OpenCL: W lanes of a vector)
 *   JT         j-particles per tile (a multiple of LI*LJ when tiles go through shared memory)
 *   USE_LOCAL  1: tiles are staged in shared memory; 0: read straight from global memory
 *   NB_CAP     neighbour-list capacity per i-particle
 *   CUTOFF, CUTOFF_R  the short-range force of a TreePM / P^3M split (order 2; defined and
 *              checked in sapporo/variants.h)
 *
 * Every macro has a default, so each file also compiles on its own with nvcc. The backend
 * compiles without -fmad=false (nvcc contracts multiply-adds into FMAs); in double, r^2 is
 * written with round-to-nearest intrinsics, which are never fused, so that it rounds exactly
 * as the host reference whatever the flags.
 */
#ifndef SAPPORO_COMMON_CUH
#define SAPPORO_COMMON_CUH

#include "variants.h"

#if LI * LJ > 1024
#error "LI * LJ must be at most 1024 (CUDA threads per block)"
#endif
#if W != 1 && W != 2 && W != 4
#error "W must be 1, 2 or 4 on CUDA (i-particles per thread)"
#endif
#if W > 1 && LJ > 1
#error "W > 1 needs LJ == 1 (as in the OpenCL kernels)"
#endif

/* OpenCL's double4. CUDA 13 deprecates the plain double4 in favour of types that state
 * their alignment; the 32-byte one is the natural layout (4 doubles, as the host packs
 * them) and lets newer GPUs load a record with one instruction. */
#if defined(__CUDACC_VER_MAJOR__) && __CUDACC_VER_MAJOR__ >= 13
typedef double4_32a dbl4;
#else
typedef double4 dbl4;
#endif

/* Predicted j-particle records as the force kernel reads them. */
#if PRECISION == 1
typedef float real;
typedef float4 real4;
#define REAL_INF __int_as_float(0x7f800000)
/* In float, r^2 may be contracted into fused multiply-adds (one rounding fewer, two
 * instructions fewer per interaction); it is not compared bitwise with anything. */
#define MUL_RN(a, b) ((a) * (b))
#define ADD_RN(a, b) ((a) + (b))
#else
/* In double, round-to-nearest products and sums, never contracted: r^2 rounds exactly as
 * in the host reference, so nearest-neighbour distances compare bitwise. */
typedef double real;
typedef dbl4 real4;
#define REAL_INF __longlong_as_double(0x7ff0000000000000LL)
#define MUL_RN(a, b) __dmul_rn((a), (b))
#define ADD_RN(a, b) __dadd_rn((a), (b))
#endif

/* Record rows, result rows and reduce lanes: sapporo/layout.h, shared with the host. */
#include "layout.h"

/* Merge nearest-neighbour candidate (r2, id) into (*best_r2, *best_id): smallest r^2, ties
 * to the lower id, id < 0 meaning "none". Shared by the lane and the part reductions. */
__device__ __forceinline__ void nn_merge(double *best_r2, double *best_id, double r2, double id)
{
    if (id >= 0 && (*best_id < 0 || r2 < *best_r2 || (r2 == *best_r2 && id < *best_id))) {
        *best_r2 = r2;
        *best_id = id;
    }
}

#endif
