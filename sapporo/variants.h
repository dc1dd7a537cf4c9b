/* The compile-time variants of the force and prediction kernels: their defaults and the
 * checks both kernel trees make, written once. kernels_opencl/common.h and
 * kernels_cuda/common.cuh include it (each documents the variants and adds its own: the
 * range of W, OpenCL's JV, CUDA's threads per block). */
#ifndef SAPPORO_VARIANTS_H
#define SAPPORO_VARIANTS_H

#ifndef ORDER
#define ORDER 4
#endif
#ifndef PRECISION
#define PRECISION 1
#endif
#ifndef NGB
#define NGB 0
#endif
#ifndef LI
#define LI 16
#endif
#ifndef LJ
#define LJ 1
#endif
#ifndef W
#define W 1
#endif
#ifndef USE_LOCAL
#define USE_LOCAL 1
#endif
#ifndef JT
#define JT (LI * LJ)
#endif
#ifndef NB_CAP
#define NB_CAP 256
#endif
/* Derivative records the predictor reads: acceleration, jerk, snap, crackle (0-4), and at
 * order 8 also pop and the 5th derivative (0-6). The host passes how many of them hold data;
 * those past it are zero in every stored record. */
#ifndef PRED_TERMS
#if ORDER >= 8
#define PRED_TERMS 6
#else
#define PRED_TERMS 4
#endif
#endif
#if PRED_TERMS < 0 || PRED_TERMS > 6 || (PRED_TERMS > 4 && ORDER < 8)
#error "PRED_TERMS must be 0 to 4 (0 to 6 at order 8)"
#endif

#if ORDER != 2 && ORDER != 4 && ORDER != 6 && ORDER != 8
#error "ORDER must be 2, 4, 6 or 8"
#endif
#if PRECISION != 1 && PRECISION != 2
#error "PRECISION must be 1 (double-single) or 2 (double)"
#endif
#if NGB != 0 && NGB != 1
#error "NGB must be 0 or 1"
#endif
#if LI < 1 || LJ < 1
#error "LI and LJ must be positive"
#endif
#if USE_LOCAL != 0 && USE_LOCAL != 1
#error "USE_LOCAL must be 0 or 1"
#endif
#if USE_LOCAL && (JT % (LI * LJ) != 0)
#error "JT must be a multiple of LI * LJ"
#endif
#if JT < 1
#error "JT must be positive"
#endif
#if NB_CAP < 1
#error "NB_CAP must be positive"
#endif

#endif
