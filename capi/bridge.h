/* The functions implemented in Python (capi/bridge.py, sapporo.capi.bridge), called by
 * shim.c only.  build.py passes this text to ffi.embedding_api() as well, so it holds plain C
 * declarations only (no preprocessor lines).  The symbols are made local by the link's
 * version script; they never appear in the exported ABI. */
int shim_py_npipes(void);
int shim_py_version(char *buffer, int size);
/* api, engine: the open library's native engine, its function table (sapporo/engine_api.h)
 * and the engine, which the C half calls for every j-particle and force call. */
int shim_py_open(int order, const char *precision, const char *backend, int ndev,
                 const int *devices, int *max_address, void **api, void **engine);
int shim_py_close(void);
int shim_py_device_count(void);
/* GRAPE-5 (capi/g5.c): one library of order 2 per context id, each with its own engine.
 * lock_slot: -1 when the context's engine may run beside any other; k >= 0 where kernels
 * must not run at once from two contexts (Context.one_kernel_at_a_time): its library's
 * instance k, whose contexts share compiled kernels and take turns (g5.c).  cutoff: in, the split length of g5_set_cutoff_scale (0:
 * none), or < 0 for SAPPORO_G5_CUTOFF's; out, the length the library was opened with (0:
 * Newtonian forces). */
int shim_py_g5_open(int context, int ndev, const int *devices, double *cutoff,
                    int *max_address, void **api, void **engine, int *lock_slot);
int shim_py_g5_close(int context);
