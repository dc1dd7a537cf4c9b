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
int shim_py_start(int nj, int ni, const int *index, const double *x, const double *v,
                  const double *a, const double *jerk, double eps2, const double *h2,
                  int set_time, double ti);
/* the result rows (layout.h: nco(order) rows of ni) into rows, the library's order into
 * *order */
int shim_py_finish(int ni, double *rows, int *order);
/* the error of the engine's rows of ni i-particles (ids index) with a force that is not
 * finite, named by the library */
int shim_py_non_finite(int ni, const double *rows, const int *index);
int shim_py_read_neighbours(int *ni, const int **offsets, const int **counts,
                            const int **ids);
int shim_py_device_count(void);
/* The open library's native engine: its function table (sapporo/engine_api.h) and the
 * engine, both NULL when it has none. */
int shim_py_engine(void **api, void **engine);
/* GRAPE-5 (capi/g5.c): one library of order 2 per context id, each with its own engine
 * (NULL: none).  j-particles come as raw records of two double4 (x|m, v|t), every index 0;
 * force: the result rows (as shim_py_finish's, order 2) of the i-particles' forces from
 * addresses [0, nj) with one softening (i-index 1, so no j-particle is excluded).
 * one_at_a_time: 1 when the context's engine must not run beside another thread's (a
 * runtime whose kernels must not run at once from two contexts:
 * Context.one_kernel_at_a_time). */
int shim_py_g5_open(int context, int ndev, const int *devices, int *max_address, void **api,
                    void **engine, int *one_at_a_time);
int shim_py_g5_close(int context);
int shim_py_g5_set_j(int context, int n, const int *address, const int *index,
                     const double *records);
int shim_py_g5_force(int context, int nj, int ni, const double *x, double eps2,
                     double *rows);
