/*
 * engine.h -- the native engine's own declarations, shared by its rooms: plans
 * (sapporo/core/plan.c: a plan's words unpacked, and each call's launches derived from
 * them) and the engine (sapporo/core/_engine.c: j-memory, the runtime, calls, the Python
 * type).  Not a public header: C clients use sapporo/engine_api.h.
 */
#ifndef SAPPORO_ENGINE_H
#define SAPPORO_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "layout.h"
#include "plan.h"

#define ENG_NI_MAX LIMIT_NI_CHUNK  /* i-particles per call */

/* The OpenCL 1.2 entry points used here (no OpenCL headers needed: handles are pointers). */
typedef int32_t dcl_int;
typedef dcl_int (*dcl_set_arg_fn)(void *kernel, uint32_t index, size_t size, const void *value);
typedef dcl_int (*dcl_enqueue_fn)(void *queue, void *kernel, uint32_t dims, const size_t *offset,
                                 const size_t *global, const size_t *local, uint32_t nwait,
                                 const void *wait, void **event);
typedef dcl_int (*dcl_queue_fn)(void *queue);
typedef dcl_int (*dcl_event_info_fn)(void *event, uint32_t param, size_t size, void *value,
                                    size_t *size_ret);
typedef dcl_int (*dcl_event_fn)(void *event);
/* clEnqueueWriteBuffer and clEnqueueReadBuffer */
typedef dcl_int (*dcl_copy_fn)(void *queue, void *mem, uint32_t blocking, size_t offset,
                               size_t size, void *ptr, uint32_t nev, const void *events,
                               void **event);
#define DCL_EVENT_COMMAND_EXECUTION_STATUS 0x11D3
#define DCL_PROFILING_COMMAND_START 0x1282
#define DCL_PROFILING_COMMAND_END 0x1283

/* The CUDA driver API's entry points (no CUDA headers needed: CUresult is an int, handles
 * are pointers, device memory a 64-bit CUdeviceptr). */
typedef int (*dcu_launch_fn)(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shared, void *stream,
                             void **params, void **extra);
typedef int (*dcu_htod_fn)(uint64_t dst, const void *src, size_t size, void *stream);
typedef int (*dcu_dtoh_fn)(void *dst, uint64_t src, size_t size, void *stream);
typedef int (*dcu_stream_fn)(void *stream);
typedef int (*dcu_push_fn)(void *context);
typedef int (*dcu_pop_fn)(void **context);
/* cuEventCreate, cuEventRecord and cuEventElapsedTime (cuEventDestroy_v2: a dcu_stream_fn) */
typedef int (*dcu_event_create_fn)(void **event, unsigned flags);
typedef int (*dcu_event_record_fn)(void *event, void *stream);
typedef int (*dcu_event_elapsed_fn)(float *ms, void *start, void *end);
#define DCU_ERROR_NOT_READY 600

/* The plan table: DP_* words and, for each of the four launches (prediction, force, scatter,
 * reduce), DL_*:
 * queue, kernel, the argument set per call and its position, dims, global[2], local[2],
 * nargs, then nargs pairs (size, value bits). The enums are in plan.h, which Python reads
 * too. */
_Static_assert(DP_LAUNCH_WORDS == DL_ARGS + 2 * DP_MAX_ARGS, "plan.h: DP_LAUNCH_WORDS");
_Static_assert(DP_WORDS == DP_LAUNCHES + 4 * DP_LAUNCH_WORDS, "plan.h: DP_WORDS");

struct dlaunch {
    void *queue, *kernel;
    int call_arg, ni_arg, dims, nargs;
    size_t global[2], local[2];
    size_t arg_size[DP_MAX_ARGS];
    uint64_t arg_value[DP_MAX_ARGS];
};

/* One device's plan: as unpacked, the launches of one entry of its launch table (the
 * force calls of ni_lo .. ni_hi i-particles on any nj, on the device or, small, on its
 * companion); as shaped for a call (plan_shape), that call's launches. */
struct dplan {
    int status, nj, ni, lists;  /* status 1: usable */
    int dev;                    /* the device of the library it is for (0 .. ndev - 1) */
    int small, ni_lo, ni_hi;    /* its companion's launches; the block sizes it serves */
    /* the arithmetic of a call's shape (sapporo.core.launch.LaunchConfig): i-particles per
     * work-group and per work-item, j-lanes, the alignment and least length of a j-part,
     * the work-groups wanted on the device, launches of at most small_pairs pairs go to
     * the companion (0: none), parts up to host_reduce_max doubles combined on the host */
    int ipg, ipi, lj, j_align, min_jchunk, target, host_reduce_max;
    long small_pairs;
    int ni_pad_max;             /* the largest padded block its buffers hold */
    size_t out_cap;             /* bytes of out (and out_buf) */
    int out_arg;                /* the force's out argument: out_buf's handle, or ... */
    uint64_t partial_buf;       /* ... the reduce's input (0: no reduce) */
    int64_t gen, lgen;          /* the generations of the device's and the library's memory */
    const int64_t *gen_at, *lgen_at;  /* ... and where their current values are */
    int32_t *nb_counts, *nb_lists;  /* with lists: (ni_pad) counts, (ni_pad, nb_cap) ids */
    int nb_cap;
    int order, nci, nco, ni_pad, nparts, raw_n, pred_terms, ds, check_rows;
    /* the library's addresses in use (its one cell, which the engine raises as it stores
     * beyond it), and the addresses the memory holds: the host mirror's (global) and this
     * device's records (local) */
    int64_t *n_stored_at;
    int mirror_cap, j_cap;
    long spin_ns;
    double time0;     /* the library's time when the plan was made */
    long max_id;
    double *idata, *out, *mirror_raw, *dev_raw;
    int64_t *mirror_ids;
    const int32_t *upload;      /* addresses the library stored itself, to copy at install */
    int nupload;
    int32_t *dev_ids;
    dcl_set_arg_fn set_arg;
    dcl_enqueue_fn enqueue;
    dcl_queue_fn flush, finish;
    dcl_event_info_fn event_info;
    dcl_event_fn release;
    dcl_copy_fn write, read;
    /* CUDA's driver API instead of OpenCL where cu_launch is set (see plan.h) */
    void *cu_context;
    dcu_launch_fn cu_launch;
    dcu_htod_fn cu_htod;
    dcu_dtoh_fn cu_dtoh;
    dcu_stream_fn cu_sync, cu_query;
    dcu_push_fn cu_push;
    dcu_pop_fn cu_pop;
    /* kernel timing (profiling): the device time of each launch is added to *seconds_at
     * (NULL: no timing), read with profiling_info (OpenCL) or the cu_event_* (CUDA) */
    double *seconds_at;
    dcl_event_info_fn profiling_info;
    dcu_event_create_fn cu_event_create;
    dcu_event_record_fn cu_event_record;
    dcu_event_elapsed_fn cu_event_elapsed;
    dcu_stream_fn cu_event_destroy;
    /* device memory (memory 1): the buffers behind idata, out and the lists, and the queue
     * of the j-records' copies; dev_raw and dev_ids are then device buffers too */
    int memory;
    void *queue, *idata_buf, *out_buf, *nb_counts_buf, *nb_lists_buf;
    size_t out_bytes;
    /* device memory: up to scatter_max j-records staged in these host arrays, copied to
     * their device buffers and placed by the scatter launch */
    int scatter_max;
    double *scatter_batch;   /* per record raw_n double4, then (address, id, 0, 0) */
    void *scatter_batch_buf;
    /* the launches: the prediction, the force, the scatter (device memory) and the reduce
     * (where a kernel combines the force's j-parts; kernel NULL otherwise) */
    struct dlaunch predict, force, scatter, reduce;
};

/* A plan's words into *p (status 1); 0, or -1 for words this code does not understand. */
int plan_unpack(struct dplan *p, const int64_t *w, int lists);

/* The j-range of nj j-addresses cut into parts for a padded block of ni_pad i-particles (see
 * struct dplan): *nparts parts of *jchunk (the last may be shorter). */
void plan_split(int ipg, int j_align, int min_jchunk, int target, int ni_pad, int nj,
                int *nparts, int *jchunk);

/* Whether a call of ni i-particles on nj_local addresses goes to the companion (plan p of
 * its table entry, not small). */
int plan_small(const struct dplan *p, int ni, int nj_local);

/* Plan p shaped for a call of ni i-particles on the library's addresses [0, nj), nj_local
 * of them on p's device: its force (and reduce) launches, padded block and parts to
 * combine.  0, or -1 when p's buffers are too small for it (a plan made wrong). */
int plan_shape(struct dplan *p, int nj, int nj_local, int ni);

/* Plan p's prediction shaped for the first n_local addresses of its device (the library's
 * addresses in use); 0, or -1 when its device holds fewer. */
int plan_predict(struct dplan *p, int n_local);

#endif
