/* Compile-time variants shared by the sapporo OpenCL kernels.
 *
 *   ORDER      2 (acceleration, potential), 4 (+ jerk), 6 (+ snap) or 8 (+ crackle)
 *   PRECISION  1 = double-single (j - i differences in hi/lo float pairs, the rest in float,
 *                  partial sums combined in double), 2 = double (everything in double)
 *   SINGLE     1: single (order 2, storage as double-single's): j - i differences of the
 *              high floats alone, no low parts
 *   NGB        0 or 1: neighbour lists off or on
 *   IDS        1: ids exclude self-pairs and give the nearest neighbour; 0: every pair
 *              counts, no nearest neighbour, no lists (GRAPE-5)
 *   LI, LJ     work-group shape: LI work-items over i x LJ j-lanes (tuning parameters)
 *   W          i-particles per work-item, held in OpenCL vector types (1 on GPUs; 4 to 16
 *              on CPUs, where it is what makes PoCL use SIMD instructions)
 *   JT         j-particles per tile (a multiple of LI*LJ when tiles go through local memory)
 *   USE_LOCAL  1: tiles are staged in local memory (GPUs); 0: read straight from global (CPUs)
 *   NB_CAP     neighbour-list capacity per i-particle
 *   JV         0 or 1: with 1 the W vector lanes run over j-particles instead of i-particles
 *              (one i-particle per work-item; CPUs with few active particles)
 *   CUTOFF, CUTOFF_R  the short-range force of a TreePM / P^3M split (order 2; defined and
 *              checked in sapporo/variants.h)
 *
 * Every macro has a default, so each file also compiles on its own.
 */
#ifndef SAPPORO_COMMON_H
#define SAPPORO_COMMON_H

#pragma OPENCL EXTENSION cl_khr_fp64 : enable
/* Double: no contraction into fused multiply-adds, so that r^2 rounds exactly as in the
 * host reference (neighbour lists must agree exactly). Double-single may fuse: its bound is
 * 1e-5, and the fused loop is shorter. */
#if !defined(PRECISION) || PRECISION == 1
#pragma OPENCL FP_CONTRACT ON
#else
#pragma OPENCL FP_CONTRACT OFF
#endif

#include "variants.h"
#ifndef JV
#define JV 0
#endif
#ifndef TWIN
#define TWIN 0
#endif
#if TWIN != 0 && TWIN != 1
#error "TWIN must be 0 or 1"
#endif

#if W != 1 && W != 2 && W != 4 && W != 8 && W != 16
#error "W must be 1, 2, 4, 8 or 16"
#endif
#if LJ > 1 && W != 1
#error "LJ > 1 (j-lanes) needs W == 1"
#endif
#if JV && (W != 4 && W != 8)
#error "JV needs W == 4 or 8"
#endif
#if JV && (LI != 1 || LJ != 1 || USE_LOCAL || JT % W != 0)
#error "JV needs LI == LJ == 1, no local memory and JT a multiple of W"
#endif

#define SAP_CAT_(a, b) a##b
#define SAP_CAT(a, b) SAP_CAT_(a, b)

/* Predicted j-particle records as the force kernel reads them. */
#if PRECISION == 1
#define REAL float
#else
#define REAL double
#endif
typedef REAL real;
typedef SAP_CAT(REAL, 4) real4;
#define convert_real4 SAP_CAT(convert_, SAP_CAT(REAL, 4))

/* W i-particles per work-item: vector types, loads, stores and mask conversions.
 * Comparisons of float vectors give int vectors, of double vectors long vectors; scalar
 * comparisons give int. MASK_R turns an int mask into the mask type of `real` vectors,
 * MASK_I the other way. select() works alike on scalars (non-zero) and vectors (sign bit). */
#if W == 1
typedef real vreal;
typedef double vdouble;
typedef int vint;
#define VLOAD_D(i, p) ((p)[i])
#define VSTORE_D(v, i, p) ((p)[i] = (v))
#define VSTORE_I(v, i, p) ((p)[i] = (v))
#define TO_VREAL(x) ((real)(x))
#define TO_VDOUBLE(x) ((double)(x))
#define TO_VINT(x) ((int)(x))
#define TO_VFLOAT(x) ((float)(x))
#if PRECISION == 1
#define MASK_R(m) (m)
#else
#define MASK_R(m) ((long)(m))
#endif
#define MASK_I(m) ((int)(m))
#define ANY(m) ((m) != 0)
#else
typedef SAP_CAT(REAL, W) vreal;
typedef SAP_CAT(double, W) vdouble;
typedef SAP_CAT(int, W) vint;
#define VLOAD_D(i, p) SAP_CAT(vload, W)((i), (p))
#define VSTORE_D(v, i, p) SAP_CAT(vstore, W)((v), (i), (p))
#define VSTORE_I(v, i, p) SAP_CAT(vstore, W)((v), (i), (p))
#define TO_VREAL(x) SAP_CAT(SAP_CAT(convert_, REAL), W)(x)
#define TO_VDOUBLE(x) SAP_CAT(convert_double, W)(x)
#define TO_VINT(x) SAP_CAT(convert_int, W)(x)
#define TO_VFLOAT(x) SAP_CAT(convert_float, W)(x)
#if PRECISION == 1
#define MASK_R(m) (m)
#define MASK_I(m) (m)
#else
#define MASK_R(m) SAP_CAT(convert_long, W)(m)
#define MASK_I(m) SAP_CAT(convert_int, W)(m)
#endif
/* true when any component of an all-ones/all-zeros mask is set (PoCL's any() is a call) */
static inline int any_mask(const vint m)
{
#if W == 16
    const int8 m8 = m.lo | m.hi;
#elif W == 8
    const int8 m8 = m;
#endif
#if W >= 8
    const int4 m4 = m8.lo | m8.hi;
#elif W == 4
    const int4 m4 = m;
#endif
#if W >= 4
    const int2 m2 = m4.lo | m4.hi;
#else
    const int2 m2 = m;
#endif
    return (m2.x | m2.y) != 0;
}
#define ANY(m) any_mask(m)
#endif

/* Masks as all-ones / all-zeros integers of the width of `real` (vrint) or of int (vint):
 * vector comparisons give -1/0 already, scalar ones 1/0, which VMASK turns into -1/0.
 * Selecting with bitwise operations on such masks keeps the masks in vector registers;
 * the ?: operator on vectors made LLVM shuttle them through 16-bit packed forms. */
#if PRECISION == 1
#define RINT int
#else
#define RINT long
#endif
#if W == 1
typedef RINT vrint;
#define AS_VREAL(x) SAP_CAT(as_, REAL)(x)
#define AS_VRINT(x) SAP_CAT(as_, RINT)(x)
#define VMASK(c) (-(c))
#else
typedef SAP_CAT(RINT, W) vrint;
#define AS_VREAL(x) SAP_CAT(SAP_CAT(as_, REAL), W)(x)
#define AS_VRINT(x) SAP_CAT(SAP_CAT(as_, RINT), W)(x)
#define VMASK(c) (c)
#endif
/* x where the all-ones mask m (of vrint) is set, else +0 */
#define KEEP_R(x, m) AS_VREAL(AS_VRINT(x) & (m))
/* b where the all-ones mask m is set, else a (any integer or real vector type) */
#define BLEND_R(a, b, m) AS_VREAL((AS_VRINT(a) & ~(m)) | (AS_VRINT(b) & (m)))
#define BLEND_I(a, b, m) (((a) & ~(m)) | ((b) & (m)))

/* i-particle values: vectors over i, or scalars when the lanes run over j (JV). */
#if JV
typedef real IREAL;
#else
typedef vreal IREAL;
#endif

#if JV
/* W consecutive j-records (real4 x, y, z, w) split into lane vectors; reads 4 records per
 * 16-component load. `p` points to a record whose index is a multiple of W. */
/* Plain loads through under-aligned vector types: vloadn() is an out-of-line call on PoCL,
 * and a call in the loop sends every vector register through the stack. */
typedef SAP_CAT(REAL, 16) __attribute__((aligned(sizeof(REAL)))) jrec4_u;
typedef vint __attribute__((aligned(4))) vint_u;
#define JREC4(p, q) (((__global const jrec4_u *)(p))[q])
#if W == 4
#define LANE_IDS ((int4)(0, 1, 2, 3))
#define GATHER4(p, X, Y, Z, M)                                                         \
    do {                                                                               \
        const SAP_CAT(REAL, 16) g0_ = JREC4(p, 0);                                     \
        X = g0_.s048c; Y = g0_.s159d; Z = g0_.s26ae; M = g0_.s37bf;                    \
    } while (0)
#else
#define LANE_IDS ((int8)(0, 1, 2, 3, 4, 5, 6, 7))
#define GATHER4(p, X, Y, Z, M)                                                         \
    do {                                                                               \
        const SAP_CAT(REAL, 16) g0_ = JREC4(p, 0), g1_ = JREC4(p, 1);                  \
        X = (vreal)(g0_.s048c, g1_.s048c); Y = (vreal)(g0_.s159d, g1_.s159d);          \
        Z = (vreal)(g0_.s26ae, g1_.s26ae); M = (vreal)(g0_.s37bf, g1_.s37bf);          \
    } while (0)
#endif
#define VLOAD_JID(p) (*(__global const vint_u *)(p))
#endif

/* Record rows, result rows and reduce lanes: sapporo/layout.h, shared with the host. */
#include "layout.h"

#endif
