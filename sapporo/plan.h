/*
 * plan.h -- the one definition of a plan's words: the launches of one entry of a device's
 * launch table, for every force call it serves, as the library's Python side prepared them
 * (sapporo.core.engine.plan_words writes them, reading the enums below from this text;
 * sapporo/core/plan.c reads them into struct dplan and shapes each call from them).
 *
 * The planner hands the engine blocks of DP_WORDS words, one per plan: for every device
 * (DP_DEV; addresses spread round-robin: global address a on device a % ndev at local
 * address a / ndev) and every entry of its launch table (the block sizes DP_NI_LO ..
 * DP_NI_HI), on the device and, DP_SMALL, on its companion of small launches.  Every block
 * holds the library's words (the order, DP_N_STORED_AT, the host mirror DP_MIRROR_* and its
 * capacity, DP_LGEN) and its device's own (its records and their capacity DP_J_CAP,
 * buffers, queues, launches on its local addresses, DP_GEN).
 *
 * A block: DP_* words, then six launches of DL_* words each: the prediction, the force,
 * (device memory only; zeros otherwise) the scatter of j-records, (where a call of the
 * entry may need a kernel to combine the force's j-parts; zeros otherwise) the reduce, and
 * (small plans on a companion with a twin; zeros otherwise) the twin's force and (where
 * the prediction runs on the companion too) the twin's prediction.  The
 * engine sets per call the arguments FA_*, RA_* and PA_* name, the force's out argument
 * (DP_OUT_ARG: the host array's buffer, or DP_PARTIAL_BUF for the reduce) and the grids,
 * from DP_I_PER_GROUP, DP_I_PER_ITEM, DP_LJ, DP_J_ALIGN, DP_MIN_JCHUNK, DP_TARGET_GROUPS,
 * DP_SMALL_PAIRS and DP_HOST_REDUCE_MAX (plan.c); the buffers (DP_NI_PAD_MAX, DP_OUT_BYTES)
 * hold the entry's largest call.  With neighbour lists, DP_NB_* locate the counts and lists
 * the kernel writes.  DP_GEN and DP_LGEN are the generations of the device's and the
 * library's memory when the plan was made, DP_GEN_AT and DP_LGEN_AT the addresses of their
 * current values: a plan whose generations moved on points at memory that may be gone, and
 * is never used.
 *
 * DP_MEMORY 0: the device computes on host memory, and DP_DEV_RAW, DP_DEV_IDS, DP_IDATA,
 * DP_OUT and DP_NB_* are the host arrays its kernels read and write.  DP_MEMORY 1: the
 * device has memory of its own; DP_DEV_RAW and DP_DEV_IDS are then the j-records' device
 * buffers, DP_*_BUF the device buffers behind the host arrays DP_IDATA, DP_OUT and DP_NB_*,
 * and the engine queues their copies with DP_FN_WRITE and DP_FN_READ on the force
 * launch's queue; j-records go, up to DP_SCATTER_MAX at a time, through the host array
 * DP_SCATTER_BATCH (per record its DP_RAW_N double4, then one with its address and id as
 * doubles), copied in one copy to its device buffer DP_SCATTER_BATCH_BUF on DP_QUEUE and
 * placed by the scatter launch (its argument n at DL_NI_ARG).
 *
 * The runtime: OpenCL through DP_FN_SET_ARG .. DP_FN_READ (clSetKernelArg,
 * clEnqueueNDRangeKernel, clFlush, clFinish, clGetEventInfo, clReleaseEvent,
 * clEnqueueWriteBuffer, clEnqueueReadBuffer), or CUDA's driver API when DP_FN_CU_LAUNCH is
 * set: DP_FN_CU_* are cuLaunchKernel, cuMemcpyHtoDAsync_v2, cuMemcpyDtoHAsync_v2,
 * cuStreamSynchronize, cuStreamQuery, cuCtxPushCurrent_v2 and cuCtxPopCurrent_v2, DP_CONTEXT
 * the CUcontext made current around every call, queues are streams, kernels CUfunctions and
 * buffers CUdeviceptrs (always device memory).
 *
 * Kernel timing (a library opened with profiling): DP_SECONDS_AT is the address of the
 * float64 to which the engine adds the device time of its launches (0: no timing, and no
 * events made for it); OpenCL reads it with DP_FN_PROFILING_INFO (clGetEventProfilingInfo)
 * from the launches' events, CUDA with DP_FN_CU_EVENT_* (cuEventCreate, cuEventRecord,
 * cuEventElapsedTime, cuEventDestroy_v2) from events recorded around each launch.
 *
 * The twin (PoCL's CPU companion only): a second single-threaded device on the same memory,
 * which runs the second half of the j-range of a small call of at least DP_TWIN_NI padded
 * i-particles and DP_TWIN_PAIRS padded i x j pairs from a thread of the engine
 * (sapporo/core/twin.c), while the calling thread runs the first half on the companion.  Its force launch is the force's with the
 * kernel built with TWIN = 1, on the twin's queue, writing its parts to the host array
 * DP_TWIN_OUT (as large as DP_OUT).  Where the prediction runs on the companion, a split
 * call's prediction is split at the same address: the twin predicts the records its half
 * reads (a launch with a global offset), so that they are written in its own core's
 * caches.
 *
 * DP_UPLOAD and DP_NUPLOAD: the global addresses (ascending, int32) whose records the
 * library stored itself since its last plan (new addresses, new derivative terms; all of
 * them after a device's memory was reallocated), which the engine copies from the host
 * mirror into the devices' records when it installs the plan.  Plain C enums only: Python
 * parses them.
 */
#ifndef SAPPORO_PLAN_H
#define SAPPORO_PLAN_H

enum {
    DP_STATUS, DP_ORDER, DP_NCI, DP_NCO, DP_NI_PAD_MAX, DP_RAW_N, DP_PRED_TERMS,
    DP_N_STORED_AT, DP_DS, DP_CHECK_ROWS, DP_SPIN_NS, DP_MAX_ID, DP_IDATA, DP_OUT,
    DP_MIRROR_RAW, DP_MIRROR_IDS, DP_DEV_RAW, DP_DEV_IDS, DP_FN_SET_ARG, DP_FN_ENQUEUE,
    DP_FN_FLUSH, DP_FN_FINISH, DP_FN_EVENT_INFO, DP_FN_RELEASE, DP_FN_WRITE, DP_FN_READ,
    DP_GEN, DP_GEN_AT, DP_LGEN, DP_LGEN_AT, DP_NI_LO, DP_NI_HI, DP_NB_COUNTS, DP_NB_LISTS,
    DP_NB_CAP, DP_MEMORY, DP_QUEUE, DP_IDATA_BUF, DP_OUT_BUF, DP_OUT_BYTES, DP_NB_COUNTS_BUF,
    DP_NB_LISTS_BUF, DP_SCATTER_MAX, DP_SCATTER_BATCH, DP_SCATTER_BATCH_BUF, DP_CONTEXT,
    DP_FN_CU_LAUNCH, DP_FN_CU_HTOD, DP_FN_CU_DTOH, DP_FN_CU_SYNC, DP_FN_CU_QUERY,
    DP_FN_CU_PUSH, DP_FN_CU_POP,
    DP_SECONDS_AT, DP_FN_PROFILING_INFO, DP_FN_CU_EVENT_CREATE, DP_FN_CU_EVENT_RECORD,
    DP_FN_CU_EVENT_ELAPSED, DP_FN_CU_EVENT_DESTROY, DP_UPLOAD, DP_NUPLOAD,
    DP_DEV, DP_SMALL, DP_I_PER_GROUP, DP_I_PER_ITEM, DP_LJ, DP_J_ALIGN, DP_MIN_JCHUNK,
    DP_TARGET_GROUPS, DP_SMALL_PAIRS, DP_HOST_REDUCE_MAX, DP_OUT_ARG, DP_PARTIAL_BUF,
    DP_J_CAP, DP_MIRROR_CAP, DP_PRED_POS, DP_PRED_LO, DP_TWIN_OUT, DP_TWIN_PAIRS,
    DP_TWIN_NI, DP_LAUNCHES
};
enum { DL_QUEUE, DL_KERNEL, DL_CALL_ARG, DL_NI_ARG, DL_DIMS, DL_G0, DL_G1, DL_L0, DL_L1,
       DL_NARGS, DL_ARGS };
/* the arguments the engine sets per call, by position (sapporo.core.layout's tables agree):
 * the force's first four, the reduce's first three and the prediction's first */
enum { FA_NJ, FA_NI, FA_NI_PAD, FA_JCHUNK };
enum { PA_N };
enum { RA_NI, RA_NI_PAD, RA_NPARTS };
enum { DP_MAX_ARGS = 32, DP_LAUNCH_WORDS = 74, DP_WORDS = 524 };

#endif
