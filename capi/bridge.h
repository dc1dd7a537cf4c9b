/* The functions implemented in Python (capi/bridge.py, sapporo.capi.bridge), called by
 * shim.c only.  build.py passes this text to ffi.embedding_api() as well, so it holds plain C
 * declarations only (no preprocessor lines).  The symbols are made local by the link's
 * version script; they never appear in the exported ABI. */
int shim_py_npipes(void);
int shim_py_version(char *buffer, int size);
int shim_py_open(int order, const char *precision, const char *backend, int ndev,
                 const int *devices, int *max_address);
int shim_py_close(void);
int shim_py_set_j(int n, const int *address, const int *index, const double *records,
                  int given);
int shim_py_set_time(double t);
int shim_py_start(int nj, int ni, const int *index, const double *x, const double *v,
                  const double *a, const double *jerk, double eps2, const double *h2,
                  int set_time, double ti);
int shim_py_finish(int ni, double *acc, double *jerk, double *snap, double *crackle,
                   double *pot, int *nnb, double *nn_r2);
int shim_py_read_neighbours(int *ni, const int **offsets, const int **counts,
                            const int **ids);
int shim_py_device_count(void);
/* warm.c: write the recipe of an open without Python for the next run with this
 * fingerprint (n shapes: nj, ni, lists each), to path. */
int shim_py_warm_record(const char *path, const char *fingerprint, int n, const int *shapes);
/* The direct path (capi/direct.c): a force call's plan as int64 words at the offsets below
 * (DP_*, then two launches of DL_* words each: the prediction, then the force); it serves
 * every ni from DP_NI_LO to DP_NI_HI (the same launch but for its argument ni); with
 * lists, DP_NB_* locate the neighbour counts and lists the kernel writes. */
int shim_py_direct_plan(int nj, int ni, int lists, int64_t *words, int nwords);
enum {
    DP_STATUS, DP_ORDER, DP_NCI, DP_NCO, DP_NI_PAD, DP_NPARTS, DP_RAW_N, DP_PRED_TERMS,
    DP_N_STORED, DP_DS, DP_CHECK_ROWS, DP_SPIN_NS, DP_TIME_BITS, DP_MAX_ID, DP_IDATA, DP_OUT,
    DP_MIRROR_RAW, DP_MIRROR_IDS, DP_DEV_RAW, DP_DEV_IDS, DP_FN_SET_ARG, DP_FN_ENQUEUE,
    DP_FN_FLUSH, DP_FN_FINISH, DP_FN_EVENT_INFO, DP_FN_RELEASE, DP_GEN, DP_NI_LO, DP_NI_HI,
    DP_NB_COUNTS, DP_NB_LISTS, DP_NB_CAP, DP_LAUNCHES
};
enum { DL_QUEUE, DL_KERNEL, DL_CALL_ARG, DL_NI_ARG, DL_DIMS, DL_G0, DL_G1, DL_L0, DL_L1,
       DL_NARGS, DL_ARGS };
enum { DP_MAX_ARGS = 32, DP_LAUNCH_WORDS = 74, DP_WORDS = 180 };
