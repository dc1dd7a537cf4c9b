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
#ifndef SINGLE
#define SINGLE 0
#endif
/* IDS 0: the j-particles' ids are not read: every pair counts (no self-exclusion), no nearest
 * neighbour is kept, no neighbour lists (GRAPE-5's pairs, with fewer instructions) */
#ifndef IDS
#define IDS 1
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
#if !IDS && NGB
#error "neighbour lists (NGB) need the ids (IDS)"
#endif
#if SINGLE && (PRECISION != 1 || ORDER != 2)
#error "SINGLE (float differences of the high parts alone) is double-single's, at order 2"
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

/* The short-range ("cutoff") force of a TreePM / P^3M split, order 2 only (sapporo.Library's
 * cutoff, the GRAPE-5 calls of Phantom-GRAPE's PG5/table):
 *
 *   CUTOFF    0: Newtonian (the default; the kernels are then those without this block);
 *             1: S2 split (PG5/table; Hockney & Eastwood's S2 shape);
 *             2: Gaussian split (sapporo.pm's P^3M: erfc)
 *   CUTOFF_R  the split length, a double literal: for S2 the diameter a of the shape (PG5's
 *             SFT_FOR_PM), beyond which the short-range force is zero; Gaussian: r_s
 *
 * With the softened distance R (R^2 = r^2 + eps2) the pair's acceleration m d / R^3 is
 * multiplied by g(R) and its potential -m / R by h(R), the short-range parts of Newton's
 * force and potential (the long-range parts, 1 - g and 1 - h, are the mesh's). A pair with
 * R = 0 (coincident, eps2 = 0) contributes nothing, as in PG5/table and sapporo.pm.
 *
 * S2, x = 2R/a, t = 2 - x (docs/accuracy.md derives them):
 *   x < 1:      140 g = 140 - x^3 (224 - 224 x^2 + 70 x^3 + 48 x^4 - 21 x^5)
 *               140 h = 140 - 208 x + 112 x^3 - 56 x^5 + 14 x^6 + 8 x^7 - 3 x^8
 *   1 <= x < 2: 140 g = t^5 (168 - 182 t + 64 t^2 - 7 t^3)
 *               140 h = t^6 (14 - 8 t + t^2)
 *   x >= 2:     g = h = 0
 * (the powers of t keep the relative precision near the cutoff, where g is small).
 * Gaussian, x = R / (2 r_s): g = erfc(x) + 2 x exp(-x^2) / sqrt(pi), h = erfc(x).
 * The macros below are 140 g and 140 h, integer coefficients only (an OpenCL float vector
 * takes int scalars, not double ones). */
#ifndef CUTOFF
#define CUTOFF 0
#endif
#if CUTOFF != 0 && CUTOFF != 1 && CUTOFF != 2
#error "CUTOFF must be 0 (none), 1 (S2) or 2 (Gaussian)"
#endif
#if CUTOFF && ORDER != 2
#error "CUTOFF needs ORDER 2"
#endif
#if CUTOFF && !defined(CUTOFF_R)
#error "CUTOFF needs CUTOFF_R, the split length"
#endif
#include "s2.h"

#endif
