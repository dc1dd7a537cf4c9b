/*
 * engine.h -- the native engine's own declarations, shared by its rooms (all compiled into
 * the extension module sapporo.core._engine by setup.py):
 *
 *   plan.c     plans: a plan's words unpacked, and each call's launches shaped from them
 *   runtime.c  the runtime: launches, copies and waits through OpenCL's entry points or
 *              CUDA's driver API, as the plan names them
 *   twin.c     the twin: the thread that runs the second half of a small call on PoCL's
 *              second single-threaded device
 *   engine.c   the engine: its errors, the call in flight and its waits, timed launches,
 *              the plans it installs and asks the library's planner for, the C table
 *   jstore.c   j-memory: the argument rules of j-particles, the host mirror and the
 *              devices' records, their copies, uploads and reset
 *   calls.c    force calls: the i-particles' rules and packing, the launches of a call,
 *              its parts and devices combined, the rows checked, the neighbour lists
 *   _engine.c  the Python type Engine and the module
 *
 * Not a public header: C clients use sapporo/engine_api.h.
 */
#ifndef SAPPORO_ENGINE_H
#define SAPPORO_ENGINE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "engine_api.h"
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

/* The plan table: DP_* words and, for each of the six launches (prediction, force, scatter,
 * reduce, twin's force, twin's prediction), DL_*:
 * queue, kernel, the argument set per call and its position, dims, global[2], local[2],
 * nargs, then nargs pairs (size, value bits). The enums are in plan.h, which Python reads
 * too. */
_Static_assert(DP_LAUNCH_WORDS == DL_ARGS + 2 * DP_MAX_ARGS, "plan.h: DP_LAUNCH_WORDS");
_Static_assert(DP_WORDS == DP_LAUNCHES + 6 * DP_LAUNCH_WORDS, "plan.h: DP_WORDS");

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
    long max_id;
    double *idata, *out, *mirror_raw, *dev_raw;
    int64_t *mirror_ids;
    const int32_t *upload;      /* addresses the library stored itself, to copy at install */
    int nupload;
    int32_t *dev_ids;
    /* host memory: the predicted positions (and double-single's low parts), which the
     * engine writes itself for j-records that do not move (eng_put_j); NULL otherwise */
    void *pred_pos, *pred_lo;
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
    /* the twin (small plans on PoCL's companion; twin.kernel NULL otherwise): calls of at
     * least twin_ni padded i-particles and twin_pairs padded pairs run their second half
     * of the j-range there (split), writing parts to twin_out */
    double *twin_out;
    long twin_pairs;
    int twin_ni, split;
    int twin_predicts;          /* this call's prediction is split (the twin's half to run) */
    /* the launches: the prediction, the force, the scatter (device memory), the reduce
     * (where a kernel combines the force's j-parts; kernel NULL otherwise), the twin's
     * force and the twin's prediction (kernel NULL where there is none) */
    struct dlaunch predict, force, scatter, reduce, twin, twin_predict;
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

/* A split call's prediction of its device's first n_local addresses, cut where its force is
 * (plan_shape first): the caller's launch predicts [0, jchunk), the twin's from jchunk.
 * That address, or 0 where the prediction is not split (p unchanged). */
size_t plan_predict_split(struct dplan *p, int n_local);

/* ------------------------------------------------------------------- the engine's state */

#define ENG_MAX_DEV 16    /* devices of one library (more: refused) */
/* timed launches (profiling) between two waits: at most a scatter, or a prediction, a force
 * and a reduce per device (every store of a batch and every force call waits for the
 * previous one) */
#define ENG_TIMED_MAX (4 * ENG_MAX_DEV)

/* A launch timed for a library that profiles: OpenCL, the launch's event (end); CUDA, two
 * events recorded before (start) and after (end) it on its stream.  Its device time goes to
 * *cell once it has run; p: its plan (the runtime, and CUDA's context). */
struct eng_timed {
    void *start, *end;
    double *cell;
    const struct dplan *p;
    int dev;
};

/* One device's share of the engine.  A library with several devices spreads its addresses
 * round-robin (address a on device a % ndev, at its local address a / ndev); each device has
 * its own plan in every plan block (sapporo.core.engine: one block of DP_WORDS per device),
 * its own j-records, queues and force launch, and the engine combines the devices' rows on
 * the host. */
struct edev {
    /* the j-side of the device's current plans, as the last plan installed has it (they
     * all share it): the memory put_j writes, its generations, the order, the device's
     * memory and the scatter that places j-records there */
    struct dplan jside;
    int staged;              /* a scatter may still read the staging arrays */
    int32_t ids_now[2];      /* the ids of one or two records copied in place (staged) */
    void *busy_queue;        /* a queue with copies or kernels of the engine not yet finished */
    void *force_queue;       /* the queue of the last force launch (NULL: none yet) */
    struct dplan *inflight;  /* the device's plan of the force call in flight (or NULL) */
    int twin_posted;         /* ... whose second half was handed to the twin (twin.c) */
    void *inflight_event;    /* ... and its launch's event (OpenCL; may be NULL) */
};

typedef struct {
    PyObject_HEAD
    int ready;               /* __init__ ran */
    int off;                 /* 1: no call from now on (disable(), or a runtime error) */
    PyObject *planner;       /* planner(lists, top, terms) -> the plans' words, or why not */
    int ndev;                /* the library's devices */
    /* the plans without and with lists (every device's, for every entry of its launch
     * table; ntpl[lists] of them, none until asked for), and the block of ndev plans
     * shaped for the call in flight or last made */
    struct dplan *tpl[2];
    int ntpl[2];
    struct dplan call[ENG_MAX_DEV];
    int have_j;              /* the devices' j-sides are those of the current plans */
    struct edev dev[ENG_MAX_DEV];
    /* the time of the next force call (set_time; 0 until set), and the time the devices'
     * records are predicted to (valid: pred_valid) */
    double time;
    int pred_valid;
    double pred_time;
    /* a j-record with a velocity was stored since the last reset: the records move, and
     * only the prediction places them (still: eng_still) */
    int moving;
    int ran;                 /* launched since this was last cleared (tests read it) */
    long planner_calls;      /* the library asked for plans, over the engine's life */
    long launches;           /* kernels queued, over the engine's life */
    /* the last force call started (its block of plans) */
    struct dplan *last;
    int uncollected;         /* the last started call's results are still to be collected */
    int last_ni;
    int empty;               /* ... on no j-particle: no force, no launch */
    /* ... on groups (eng_start_groups): the grouped_ni i-particles' rows in the padded
     * block (g_map), and the padded block's positions, ids and j-ranges */
    int grouped, grouped_ni;
    int *g_map, *g_id, *g_jr;
    double *g_x;
    /* profiling: the launches queued since the last wait, timed (eng_timed_collect) */
    struct eng_timed timed[ENG_TIMED_MAX];
    int ntimed;
    /* the neighbour lists of the last finished call, as CSR */
    int lists_ni, lists_valid;
    int *nb_offsets, *nb_counts, *nb_ids;
    size_t nb_rows_cap, nb_ids_cap;
    char error[320];
    int code;                /* the last error's code (ENG_ERR_*) */
    /* the Python methods' buffers */
    Py_buffer out;
    int have_out;
    double *rec;
    int *address, *index;
    size_t put_cap;          /* records rec, address and index hold */
    /* the twin's thread and its job (twin.c; NULL until a call is split) */
    struct twin *twin;
    /* device memory: a run of addresses staged (their ids; with several devices, their
     * records too, gathered from the mirror) */
    int32_t *run_ids;
    double *run_raw;
    size_t run_cap;
} Engine;

static inline int is_cuda(const struct dplan *p)
{
    return p->cu_launch != NULL;
}

/* CUDA: the plan's context current on this thread around one call of the driver (the
 * caller's own current context, PyCUDA's or none, is back afterwards). */
#define CU_CALL(p, rc, call)                                                                  \
    do {                                                                                     \
        void *prev_;                                                                         \
        (rc) = (p)->cu_push((p)->cu_context);                                                \
        if ((rc) == 0) {                                                                     \
            (rc) = (call);                                                                   \
            (p)->cu_pop(&prev_);                                                             \
        }                                                                                    \
    } while (0)

/* -------------------------------- runtime.c: the runtime (OpenCL, or CUDA's driver API) */

/* Queue a launch with its arguments (call_value at its call argument, ni at its ni
 * argument); the runtime's error code (0: queued). OpenCL: event (may be NULL) receives
 * the launch's event; CUDA has none (*event stays NULL: the stream is waited for). */
dcl_int plan_launch(const struct dplan *p, const struct dlaunch *l, uint64_t call_value,
                           int ni, void **event);

/* plan_launch from global index offset (OpenCL only: the twin's prediction). */
dcl_int plan_launch_at(const struct dplan *p, const struct dlaunch *l, uint64_t call_value,
                       int ni, size_t offset, void **event);

/* Queue a copy of size bytes from host memory src to device memory mem + offset (the copy
 * reads src later: keep it until the queue has finished). */
dcl_int drv_write(const struct dplan *p, void *queue, void *mem, size_t offset,
                         size_t size, const void *src);

/* Copy size bytes from host memory src to device memory mem + offset now: after everything
 * queued before it, and src no longer needed when it returns. */
dcl_int drv_write_now(const struct dplan *p, void *queue, void *mem, size_t offset,
                             size_t size, const void *src);

/* Queue a copy of size bytes from device memory mem to host memory dst (filled once the
 * queue has finished). */
dcl_int drv_read(const struct dplan *p, void *queue, void *mem, size_t size, void *dst);

/* Wait until everything queued on queue has run. */
dcl_int drv_finish(const struct dplan *p, void *queue);

/* Whether queue (CUDA) or event ev (OpenCL) is still running: 1, or 0 (done or failed). */
int drv_busy(const struct dplan *p, void *queue, void *ev, dcl_int *status);

/* Nanoseconds since t0 (CLOCK_MONOTONIC). */
long ns_since(const struct timespec *t0);

/* Wait for a launch queued on queue (its event ev, or NULL), polling for p->spin_ns before
 * sleeping (a sleeping wait costs a thread wake-up, tens of us); ev is not released. 0 when
 * it completed; else the OpenCL error, and *status its execution status. */
dcl_int plan_wait(const struct dplan *p, void *queue, void *ev, dcl_int *status);

/* ---------------------------------------------------------------------- twin.c: the twin */

struct twin;

/* Hand the twin's launch of split plan p (call_value at its call argument) to the twin's
 * thread, started at the first call (where it cannot start, the caller runs the launch in
 * twin_join); where p's prediction is split (plan_predict_split), the twin's half of it, to
 * the engine's time, first.  0, or -1 (error set). */
int twin_post(Engine *e, const struct dplan *p, uint64_t call_value, int ni);

/* The posted launches done: run here when the twin's thread has not taken them yet, else
 * waited for; timed (p profiles), their events join the engine's timed launches
 * (eng_timed_event).  The runtime's error code (0: they ran). */
dcl_int twin_join(Engine *e, const struct dplan *p);

/* The twin's thread stopped and its memory freed (the engine's end). */
void twin_free(Engine *e);

/* ----------------------------------------------------------------- engine.c: the engine */

/* An error: its code (ENG_ERR_*; a device's or the engine's own failure turns the engine
 * off) and message.  -1, for the caller to return. */
int eng_err(Engine *e, int code, const char *fmt, ...);

int eng_fail(Engine *e, const char *what, dcl_int rc, dcl_int status);

/* The code a public function returns for rc (-1: the error set). */
int eng_code(const Engine *e, int rc);

void eng_clear_plans(Engine *e);

/* Whether the memory the current plans point at is still where they were made. */
int eng_fresh(const Engine *e);

/* Wait for device d's part of the force call in flight, if any, and for every other
 * command the engine queued on it: 0, or -1 (error set). */
int eng_wait_dev(Engine *e, int d);

/* Wait for the force call in flight, if any, and for every other command the engine
 * queued, on every device: 0, or -1 (error set). */
int eng_wait(void *engine);

/* Whether a force call is in flight on any device. */
int eng_in_flight(const Engine *e);

/* Before queueing on queue of device d: the engine's commands on another queue of the
 * device finished first (two queues of one context, such as PoCL's companion device's,
 * share the buffers). */
int eng_on(Engine *e, int d, void *queue);

/* An OpenCL launch's event ev, queued by plan p outside eng_launch (the twin's), timed as
 * eng_launch's are: read and released at the next wait (released at once, with no time,
 * when the table is full). */
void eng_timed_event(Engine *e, const struct dplan *p, void *ev);

/* Queue a launch (see plan_launch; event, when not NULL, receives its OpenCL event); timed
 * when the library profiles (p->seconds_at), read at the next wait. 0, or -1 (error set). */
int eng_launch(Engine *e, struct dplan *p, struct dlaunch *l, uint64_t call_value,
                      int ni, void **event, const char *what);

/* Install the words of n plans (every device's, for every entry of its launch table; with
 * lists or not), made by the library for the memory as it is now; the old plans go when a
 * device's j-side moved.  0, or -1 (error set, the engine off). */
int eng_install(Engine *e, const int64_t *w, int n, int lists);

/* The plans with lists or not asked of the library (the planner, with the GIL), for a
 * memory that holds addresses [0, top) and records whose derivatives up to terms the
 * predictor reads; nothing in flight.  0, or -1 (error set: the library's reason, such as
 * an address beyond its capacity, with the engine still on; or, when the library has no
 * plan or gives one the engine cannot read, off). */
int eng_ask(Engine *e, int lists, int top, int terms);

/* Device d's local addresses among global addresses [0, n) of nd devices. */
int n_local(int64_t n, int d, int nd);

/* The block of ndev plans shaped for ni i-particles on addresses [0, nj) (nj no more than
 * are stored), into call[0 .. ndev - 1]: 0, or -1 (error set).  The library is asked for
 * plans only when it has none for these lists, or its memory moved. */
int eng_plan(Engine *e, int nj, int ni, int lists, struct dplan *call);

/* ------------------------------------------------------------------- jstore.c: j-memory */

/* The records of addresses a0 .. a0 + m - 1 copied from the host mirror into the devices'
 * records; they are to be predicted again.  0, or -1 (error set). */
int eng_upload_run(Engine *e, int a0, int m);

/* Whether the stored j-records stand still and their predicted positions are written as
 * they are stored: no prediction is launched (jstore.c). */
int eng_still(const Engine *e);

/* Still records: the predicted positions of every address in use written from the host
 * mirror (where a prediction would run: at the first force call, or after new buffers). */
void eng_predict_still(Engine *e);

/* The n addresses (ascending, global) whose device records the library lost (new buffers),
 * uploaded from the host mirror run by run (a plan's DP_UPLOAD, at its install: nothing is
 * in flight).  0, or -1 (error set). */
int eng_upload(Engine *e, int n, const int32_t *address);

/* Forget every j-particle: the records in use zero (ids -1) in the mirror and on the
 * devices, no address in use.  0, or -1 (error set). */
int eng_reset(Engine *e);

int eng_put_j_rc(Engine *e, int n, const int *address, const int *index,
                        const double *rec, int nrec);

int eng_put_j(void *engine, int n, const int *address, const int *index,
                     const double *rec, int nrec);

/* Room for n records (JB_RECORDS each) in put_j's staging buffers (rec, address, index),
 * which the Python method and put_xm's way through put_j fill: 0, or -1 (error set). */
int eng_put_room(Engine *e, size_t n);

/* put_xm of engine_api.h: still records (eng_still) in one pass, others through put_j. */
int eng_put_xm_rc(Engine *e, int adr, int n, const double *x, const double *m, int index);

int eng_put_xm(void *engine, int adr, int n, const double *x, const double *m, int index);
int eng_get_xm(void *engine, int adr, int n, double *x, double *m);

/* ----------------------------------------------------------------- calls.c: force calls */

/* The sum of n values x[0], x[stride], ... in the reduce kernel's order: lane l adds values
 * l, l + L, l + 2L, ... in order, then lane l + s is added into lane l for s = L/2, ..., 1
 * (where that lane holds values).  The parts of one device's force call are combined so,
 * then the devices' rows, and the MPI layer's ranks (combine). */
double lanes_sum(const double *x, size_t stride, int n);

/* The nearest neighbour among n candidates (ids id[0], id[stride], ..., r^2 likewise): the
 * smallest r^2 among those that found one (id >= 0), ties to the lower id; none found: id
 * -1, r^2 inf.  Order-independent, so parts and devices alike. */
void nearest(const double *id, const double *r2, size_t stride, int n, double *v);

/* i-particle i's result rows v[0 .. nco - 1] of a force call on nd devices (plans p[0 ..
 * nd - 1]): each device's parts, then the devices' rows as if they were parts.  0 when a
 * checked row (check_rows) is not finite, else 1 (the rows are written either way). */
int result_row(const struct dplan *p, int nd, int i, double *v);

/* start; index holds int64 ids when wide, else int; jr (order 2; NULL: all) each
 * i-particle's range of j-addresses, as pairs.  Every device's prediction (where
 * needed) is queued first, then every device's force call; with several devices each
 * queue is flushed, so that they all work at once. */
int eng_start_ids(Engine *e, int nj, int ni, const void *index, int wide,
                         const double *x, const double *v, const double *a, const double *jerk,
                         double eps2, const double *h2, const int *jr);

int eng_start(void *engine, int nj, int ni, const int *index, const double *x,
                     const double *v, const double *a, const double *jerk, double eps2,
                     const double *h2);

/* A force call on ng groups (order 2; engine_api.h's start_groups): the number of groups
 * started, or -1 (error set). */
int eng_start_groups_rc(Engine *e, int ng, const int *ioff, const int *joff, const int *index,
                        const double *x, double eps2);

int eng_start_groups(void *engine, int ng, const int *ioff, const int *joff, const int *index,
                     const double *x, double eps2);

/* The neighbour lists the kernels wrote on the nd devices (plans p[0 .. nd - 1]), as the
 * library gives them: per i-particle the ids every device stored (at most the capacity
 * each), ascending, the first capacity of them, and the full count (the devices' sum). */
int eng_collect_lists(Engine *e, const struct dplan *p, int ni);

/* The started call's result rows into rows: ni, or -1 (error set; ENG_ERR_NONFINITE
 * names the first i-particle whose force is not finite, the rows written). */
int eng_finish_rc(Engine *e, int ni, double *rows);

int eng_finish(void *engine, int ni, double *rows);

int eng_lists(void *engine, int *ni, const int **offsets, const int **counts,
                     const int **ids);

/* the C table of engine_api.h (engine.c), which the module publishes as its capsule C_API */
extern const struct sapporo_engine_api engine_api;

#endif
