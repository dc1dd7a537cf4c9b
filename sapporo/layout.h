/* The host/kernel data layout of sapporo, written once.
 *
 * Both kernel trees include this file (kernels_opencl/common.h, kernels_cuda/common.cuh) and
 * the host reads it (sapporo/core/layout.py parses the #define lines below), so the record rows,
 * the result rows and the reduce lanes cannot drift apart. Plain preprocessor macros only:
 * the file must stay valid OpenCL C and CUDA C++. Each value is an integer literal, and the
 * three conditionals (RAW_N, NCI, NCO) depend on ORDER alone: orders 2 to 6 keep their
 * rows, only order 8 pays for its extra ones.
 */
#ifndef SAPPORO_LAYOUT_H
#define SAPPORO_LAYOUT_H

/* Limits the host, the native engine and the C API check, written once: the largest
 * j-address and id (ids ride as int32 on the device), and the magnitude a position must
 * stay below (squared distances would overflow double beyond it). */
#define LIMIT_MAX_ADDRESS 2147483646
#define LIMIT_MAX_ID 2147483647
#define LIMIT_COORD 1e150
/* i-particles per force launch (larger blocks go in chunks of this many), and the most
 * parts a force launch cuts its j-range into */
#define LIMIT_NI_CHUNK 8192
#define LIMIT_MAX_PARTS 4096

/* Raw j-particle record: RAW_N double4 per address, as the host packs them. The 4th and
 * 5th derivatives of the acceleration exist at order 8 only (its predictor needs them). */
#define RAW_XM 0 /* x, y, z, mass     */
#define RAW_VT 1 /* vx, vy, vz, t_j   */
#define RAW_A 2  /* acceleration, 0   */
#define RAW_J 3  /* jerk, 0           */
#define RAW_S 4  /* snap, 0           */
#define RAW_C 5  /* crackle, 0        */
#define RAW_P 6  /* pop (d^4 a/dt^4), 0; order 8 only */
#define RAW_D5 7 /* d^5 a/dt^5, 0; order 8 only */
#define RAW_N_LOW 6    /* records for orders 2 to 6 */
#define RAW_N_ORDER8 8 /* records for order 8 */
#if ORDER >= 8
#define RAW_N RAW_N_ORDER8
#else
#define RAW_N RAW_N_LOW
#endif

/* i-particles: NCI component rows of ni_pad doubles each (structure of arrays, so that W
 * consecutive i-particles load as one vector). The id rides as an exact double. */
#define IC_X 0
#define IC_Y 1
#define IC_Z 2
#define IC_H2 3 /* neighbour radius squared */
#define IC_VX 4
#define IC_VY 5
/* order 2 reads no velocity: its rows IC_VX, IC_VY hold the i-particle's j-range [J0, J1)
 * (local addresses; the engine's groups, or [0, nj) for everyone), the same for all the
 * i-particles of a work-group */
#define IC_J0 4
#define IC_J1 5
#define IC_VZ 6
#define IC_ID 7
#define IC_AX 8 /* predicted acceleration, orders 6 and 8 */
#define IC_AY 9
#define IC_AZ 10
#define IC_JX 11 /* predicted jerk, order 8 only */
#define IC_JY 12
#define IC_JZ 13
#define NCI_LOW 8    /* rows for orders 2 and 4 */
#define NCI_HIGH 11  /* rows for order 6 */
#define NCI_ORDER8 14 /* rows for order 8 */
#if ORDER >= 8
#define NCI NCI_ORDER8
#elif ORDER >= 6
#define NCI NCI_HIGH
#else
#define NCI NCI_LOW
#endif

/* Results: NCO rows of ni_pad doubles (per part before the reduction); the crackle rows
 * exist at order 8 only. */
#define OC_AX 0
#define OC_AY 1
#define OC_AZ 2
#define OC_POT 3
#define OC_JX 4
#define OC_JY 5
#define OC_JZ 6
#define OC_NNR2 7 /* unsoftened r^2 of the nearest neighbour (inf: none) */
#define OC_SX 8
#define OC_SY 9
#define OC_SZ 10
#define OC_NNID 11 /* its id as a double (-1: none) */
#define OC_CX 12   /* crackle, order 8 only */
#define OC_CY 13
#define OC_CZ 14
#define NCO_LOW 12    /* rows for orders 2 to 6 */
#define NCO_ORDER8 15 /* rows for order 8 */
#if ORDER >= 8
#define NCO NCO_ORDER8
#else
#define NCO NCO_LOW
#endif

/* The reduce kernel: REDUCE_LANES lanes per i-particle (lane l sums parts l, l + 32, ...
 * in order, then a halving tree combines the lanes; the host's combination of parts follows
 * the same order), REDUCE_ROWS i-particles per group. */
#define REDUCE_LANES 32
#define REDUCE_ROWS 4

#endif
