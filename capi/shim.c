/*
 * shim.c -- the C half of libsapporo.so (compiled by build.py through cffi's embedding).
 *
 * Every GRAPE-6 function has a C name and a Fortran name (trailing underscore, arguments by
 * pointer); both are thin exported wrappers over one static function here, so the library
 * never calls its own exported symbols.  j-particles are buffered in growable arrays and
 * handed to the library's native engine (sapporo/engine_api.h) in one batch before the next
 * g6_set_ti, force call, flush or close; force calls run on the engine.  Python (the
 * library's Python half, bridge.py) opens and closes the library, and is asked by the
 * engine for memory and plans.  One process-wide mutex serialises every call.
 *
 * build.py defines shim_python (the installing interpreter) and shim_site_code (Python that
 * adds the recorded site directories) before including this file into cffi's C source.
 */
#include <math.h>
#include <stdarg.h>

#include "shim.h"

static pthread_mutex_t shim_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *current_fn = "sapporo";   /* API function being served, for messages */
_Thread_local char shim_last_error[1024];  /* per thread, as dlerror(): read unlocked */
static char open_error[512];                 /* why the last open failed ("" if it did not) */
static char version[64];
static int python_ready;                     /* set by the embedded init code when done */
static int own_python;                       /* started here; its gc is off until sapporo is in */
static int is_open;
static int max_address;                      /* the largest j-address the library can hold */
static int npipes;                           /* 0: not asked yet */
static int pending;                          /* firsthalf ran; lasthalf not yet */
static int pending_rc;                       /* firsthalf's error code, returned by lasthalf */
static int have_result;                      /* the last force call returned its forces */
static int pending_lists;                    /* firsthalf asked for neighbour lists */
static int started_ni;                       /* firsthalf started this many i-particles */
long shim_direct_calls;                      /* force calls the engine ran, in this process */
long shim_python_calls;                      /* calls of the C API's Python half */
/* The open library's native engine and its functions (sapporo/engine_api.h; NULL: not
 * open): every j-particle and force call goes there. */
static const struct sapporo_engine_api *eng_api;
const struct sapporo_engine_api *shim_any_api;
static void *eng;
/* the engine's result rows of one call (at most LIMIT_NI_CHUNK i-particles, its ENG_NI_MAX) */
static double rows_buf[NCO_ORDER8 * LIMIT_NI_CHUNK];
/* the i-indices of a call (at most g6_npipes()), with the negative ones replaced */
static int iindex_buf[SAPPORO_MAX_NPIPES];
static int max_j_index = -1;                 /* the largest j-particle index stored */
static int abort_code;                       /* SAPPORO_ON_ERROR=abort: the error to stop on */

/* Errors already met, by kind: the code and the message with its numbers left out
 * ("address = -1" and "address = -7" are one kind, whichever function met it).  A kind is
 * printed the 1st, 10th, 100th, ... time, so a client that ignores codes and repeats a
 * failing call gets a few lines, not one per call, and never silence. */
#define MAX_KINDS 256
static struct {
    unsigned long hash;
    unsigned long count;
} kinds[MAX_KINDS];
static int nkinds;

/* j-particles waiting to be sent, as the library's raw records (engine_api.h: JB_RECORDS
 * double4 per particle), derivatives unscaled. The engine takes them as they are. */
static struct {
    int n, cap;
    int *address, *index;
    double *rec;  /* JB_DOUBLES per particle */
    int *slot;      /* slot[address] = 1 + position in the buffer, 0 when not buffered */
    size_t slot_cap;
} jb;

/* Neighbour lists of the last force call, owned by the engine (valid until the next call);
 * NULL arrays: the call asked for none, every list is empty. */
static struct {
    int valid, ni;
    const int *offsets, *counts, *ids;
} nb;

/* SAPPORO_ON_ERROR: 0 = "return" (the default: the call returns its code), 1 = "abort"
 * (the message, then the program exits with status 1).  Read on the first error. */
static int on_error_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *v = getenv("SAPPORO_ON_ERROR");
        mode = 0;
        if (v != NULL && strcmp(v, "abort") == 0)
            mode = 1;
        else if (v != NULL && v[0] != '\0' && strcmp(v, "return") != 0)
            fprintf(stderr, "sapporo: SAPPORO_ON_ERROR: expected 'return' or 'abort', got "
                    "'%s' (using 'return')\n", v);
    }
    return mode;
}

/* How many times an error of this kind has now been met (1 the first time). */
static unsigned long count_kind(int code, const char *message)
{
    unsigned long h = 5381u * 33u + (unsigned long)(code + 64);
    for (const char *p = message; *p; p++)
        if (*p < '0' || *p > '9')
            h = h * 33u + (unsigned char)*p;
    for (int k = 0; k < nkinds; k++)
        if (kinds[k].hash == h)
            return ++kinds[k].count;
    if (nkinds < MAX_KINDS) {
        kinds[nkinds].hash = h;
        kinds[nkinds++].count = 1;
    }
    return 1;
}

/* Print "sapporo: text" the 1st, 10th, 100th, ... time of its kind (count), or, with
 * every_time, each time; the count after the first. */
static void print_counted(const char *text, unsigned long count, int every_time)
{
    unsigned long p = 1;
    while (p < count && p <= ~0ul / 10)
        p *= 10;
    if (count == 1)
        fprintf(stderr, "sapporo: %s\n", text);
    else if (p == count || every_time)
        fprintf(stderr, "sapporo: %s [%lu times so far]\n", text, count);
    fflush(stderr);
}

void shim_report(int code, const char *message, int every_time)
{
    snprintf(shim_last_error, sizeof shim_last_error, "%s: %s (code %d)", current_fn, message,
             code);
    print_counted(shim_last_error, count_kind(code, message), every_time);
    if (on_error_mode() == 1 && abort_code == 0)
        abort_code = code;
}

/* A warning: printed like an error (after "warning: "), but no error code, no
 * sapporo_last_error() and no stop. */
void shim_warn(const char *fmt, ...)
{
    char message[768], line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    snprintf(line, sizeof line, "%s: warning: %s", current_fn, message);
    print_counted(line, count_kind(0, message), 0);
}

int shim_fail(int code, const char *fmt, ...)
{
    char message[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    shim_report(code, message, 0);
    return code;
}

int shim_null_scalars(const char *names, int n, const void *const *p)
{
    for (int k = 0; k < n; k++, names = strchr(names, ',') + 1) {
        if (p[k] != NULL)
            continue;
        while (*names == ' ')
            names++;
        return shim_fail(SAPPORO_ERR_INPUT, "%.*s is a NULL pointer (Fortran passes every "
                         "scalar by reference)", (int)strcspn(names, ","), names);
    }
    return SAPPORO_OK;
}

/* The embedded init code is done (bridge.py; declared in the cdef by build.py). */
static void shim_mark_ready(void)
{
    python_ready = 1;
}

/* Start Python as the interpreter that built the library (shim_python, written by build.py,
 * e.g. a virtual environment's bin/python: its prefix, standard library and site-packages),
 * unless the process already runs Python.  Then put the site directories recorded at build
 * time first on sys.path (shim_site_code) -- before cffi sets the module up, which already
 * imports _cffi_backend. */
static int start_python(void)
{
    PyGILState_STATE gil = PyGILState_UNLOCKED;
    int fresh = !Py_IsInitialized();
    own_python = fresh;
    if (fresh) {
        PyConfig config;
        PyStatus status;
        PyConfig_InitPythonConfig(&config);
        config.install_signal_handlers = 0;  /* leave the program's signal handlers alone */
        status = PyConfig_SetBytesString(&config, &config.program_name, shim_python);
        if (!PyStatus_Exception(status))
            status = Py_InitializeFromConfig(&config);
        PyConfig_Clear(&config);
        if (PyStatus_Exception(status)) {
            fprintf(stderr, "sapporo: cannot start Python as %s: %s\n", shim_python,
                    status.err_msg ? status.err_msg : "unknown error");
            return -1;
        }
        /* an interpreter of our own collects no garbage until sapporo is imported
         * (python_up): the imports make tens of thousands of objects and no cycles to free */
        PyRun_SimpleString("import gc\ngc.disable()\n");
    }
    else {
        gil = PyGILState_Ensure();
    }
    if (PyRun_SimpleString(shim_site_code) != 0)
        fprintf(stderr, "sapporo: could not add the recorded site directories\n");
    if (fresh)
        PyEval_SaveThread();  /* release the GIL, as cffi expects */
    else
        PyGILState_Release(gil);
    return 0;
}

/* Start the embedded interpreter on first use; fail clearly if it could not import sapporo. */
int shim_python_up(void)
{
    static int started;  /* 1: started, -1: could not start */
    int rc;
    if (python_ready)
        return 0;
    if (started == 0)
        started = start_python() == 0 ? 1 : -1;
    rc = started > 0 ? cffi_start_python() : -1;  /* imports sapporo (once) */
    if (started > 0 && own_python) {
        PyGILState_STATE gil = PyGILState_Ensure();
        PyRun_SimpleString("import gc\ngc.enable()\n");
        PyGILState_Release(gil);
        own_python = 0;
    }
    if (rc != 0 || !python_ready)
        return shim_fail(SAPPORO_ERR_INTERNAL,
                    "the embedded Python could not load sapporo (see the messages above; "
                    "SAPPORO_SITE may name the site directories to use)");
    return 0;
}

/* The caller's floating-point state, saved by shim_enter() and put back by shim_leave()
 * (shim_fp_save, shim_fp_restore). */
static shim_fp caller_fp;

void shim_enter(const char *fn)
{
    pthread_mutex_lock(&shim_lock);
    shim_fp_save(&caller_fp);
    current_fn = fn;
}

int shim_leave(int rc)
{
    int stop = abort_code;
    abort_code = 0;
    current_fn = "sapporo";
    shim_fp_restore(&caller_fp);
    pthread_mutex_unlock(&shim_lock);
    if (stop != 0) {
        fprintf(stderr, "sapporo: stopping the program (SAPPORO_ON_ERROR=abort)\n");
        fflush(stderr);
        exit(1);
    }
    return rc;
}

int shim_need_open(int open, const char *open_error, const char *what, const char *opener,
                   int forces)
{
    char message[768];
    if (open)
        return SAPPORO_OK;
    if (open_error[0] == '\0')
        return shim_fail(SAPPORO_ERR_STATE, "%s is not open (call %s first)", what, opener);
    if (!forces)
        return shim_fail(SAPPORO_ERR_STATE, "%s is not open: %s", what, open_error);
    /* so that a client that never checks codes does not run on without forces after a few
     * lines */
    snprintf(message, sizeof message, "no forces computed, %s could not be opened: %s", what,
             open_error);
    shim_report(SAPPORO_ERR_STATE, message, 1);
    return SAPPORO_ERR_STATE;
}

/* The library open (forces: for a force call), or the error. */
static int need_open(int forces)
{
    return shim_need_open(is_open, open_error, "the library", "g6_open", forces);
}

/* SAPPORO_NPIPES when it is blank or plain digits in range: the answer of capi/bridge.py's
 * read_npipes, without starting Python (clients ask g6_npipes() before g6_open to size
 * their arrays); 0 for anything else, which Python reads: it clamps a value out of range
 * (sapporo.config.int_setting, with its warning) and reports a malformed one. */
static int npipes_from_environment(void)
{
    const char *v = getenv("SAPPORO_NPIPES");
    long n = 0;
    size_t k = 0, digits = 0;
    if (v == NULL)
        return SAPPORO_DEFAULT_NPIPES;
    while (v[k] == ' ' || v[k] == '\t')
        k++;
    for (; v[k] >= '0' && v[k] <= '9' && digits < 9; k++, digits++)
        n = 10 * n + (v[k] - '0');
    while (v[k] == ' ' || v[k] == '\t')
        k++;
    if (v[k] != '\0')
        return 0;
    if (digits == 0)
        return SAPPORO_DEFAULT_NPIPES;
    return n >= 1 && n <= SAPPORO_MAX_NPIPES ? (int)n : 0;
}

static int get_npipes(void)
{
    int rc;
    if (npipes > 0)
        return npipes;
    if ((rc = npipes_from_environment()) > 0)
        return npipes = rc;
    if ((rc = shim_python_up()) < 0)
        return rc;
    rc = PY(shim_py_npipes());
    if (rc > 0)
        npipes = rc;
    return rc;
}

/* g6_npipes(): never below 1, even when Python or SAPPORO_NPIPES failed (the error is
 * printed): clients size arrays from it without looking at error codes. */
int shim_npipes_for_client(void)
{
    int rc = get_npipes();
    return rc > 0 ? rc : SAPPORO_DEFAULT_NPIPES;
}

/* -------------------------------------------------------------------- j-particle buffer */

int shim_grow(void **p, size_t elem, int cap)
{
    void *q = realloc(*p, elem * (size_t)cap);
    if (q == NULL)
        return -1;
    *p = q;
    return 0;
}

static int jb_reserve(int address)
{
    if (jb.n == jb.cap) {
        int cap = jb.cap ? 2 * jb.cap : 1024;
        if (shim_grow((void **)&jb.address, sizeof(int), cap)
            || shim_grow((void **)&jb.index, sizeof(int), cap)
            || shim_grow((void **)&jb.rec, JB_DOUBLES * sizeof(double), cap))
            return shim_fail(SAPPORO_ERR_INTERNAL, "out of memory buffering %d j-particles", cap);
        jb.cap = cap;
    }
    if ((size_t)address >= jb.slot_cap) {
        /* calloc'ed: pages of addresses never used are never touched */
        size_t cap = jb.slot_cap ? 2 * jb.slot_cap : 1024;
        int *slot;
        if (cap <= (size_t)address)
            cap = (size_t)address + 1;
        if ((slot = calloc(cap, sizeof(int))) == NULL)
            return shim_fail(SAPPORO_ERR_INTERNAL, "out of memory for j-address %d", address);
        if (jb.slot_cap)
            memcpy(slot, jb.slot, sizeof(int) * jb.slot_cap);
        free(jb.slot);
        jb.slot = slot;
        jb.slot_cap = cap;
    }
    return 0;
}

static void jb_clear(void)
{
    for (int k = 0; k < jb.n; k++)
        jb.slot[jb.address[k]] = 0;
    jb.n = 0;
}

/* Buffer one j-particle; a, jerk and snap are multiplied by the given factors (2, 6 and 18
 * for the GRAPE-scaled a/2, jerk/6, snap/18).  A re-sent address replaces its entry.
 * crackle, pop and d5 (orders 6 and 8) may be NULL (zero).  The engine sees the particle only
 * at the next flush, so it is checked here, for the error to come from this call. */
static int jb_put(int address, int index, double t, double mass, const double *x,
                  const double *v, const double *a, double fa, const double *jerk, double fj,
                  const double *snap, double fs, const double *crackle, const double *pop,
                  const double *d5)
{
    int rc, k;
    if ((rc = need_open(0)) < 0)
        return rc;
    if (address < 0)
        return shim_fail(SAPPORO_ERR_INPUT, "address = %d must be >= 0", address);
    if (address > max_address)
        return shim_fail(SAPPORO_ERR_INPUT, "address = %d above %d, the largest j-address the "
                         "device memory holds", address, max_address);
    if (index < 0)
        return shim_fail(SAPPORO_ERR_INPUT, "index = %d must be >= 0 (address %d)", index,
                         address);
    if (x == NULL || v == NULL)
        return shim_fail(SAPPORO_ERR_INPUT, "x and v must not be NULL (address %d)", address);
    if (!isfinite(t) || !isfinite(mass) || !finite3(x) || !finite3(v) || !finite3(a)
        || !finite3(jerk) || !finite3(snap) || !finite3(crackle) || !finite3(pop)
        || !finite3(d5))
        return shim_fail(SAPPORO_ERR_INPUT,
                         "j-particle at address %d (index %d) has a NaN or infinite value",
                         address, index);
    if (!position_ok(x))
        return shim_fail(SAPPORO_ERR_INPUT,
                         "j-particle at address %d (index %d): position (%g, %g, %g) too large, "
                         "squared distances would overflow double; magnitudes must stay below "
                         "%g", address, index, x[0], x[1], x[2], COORD_LIMIT);
    if ((rc = jb_reserve(address)) < 0)
        return rc;
    k = jb.slot[address] - 1;
    if (k < 0) {
        k = jb.n++;
        jb.slot[address] = k + 1;
    }
    jb.address[k] = address;
    jb.index[k] = index;
    if (index > max_j_index)
        max_j_index = index;
    put_record(jb.rec + (size_t)JB_DOUBLES * k, JB_RECORDS, x, mass, v, t,
               (const double *const[6]){a, jerk, snap, crackle, pop, d5},
               (const double[6]){fa, fj, fs, 1.0, 1.0, 1.0});
    return SAPPORO_OK;
}

/* The buffered j-particles to the engine (which checks and stores them all, or none). */
static int jb_flush(void)
{
    int rc;
    if (jb.n == 0)
        return SAPPORO_OK;
    rc = eng_api->put_j(eng, jb.n, jb.address, jb.index, jb.rec, JB_RECORDS);
    jb_clear();
    return rc < 0 ? shim_fail(rc, "%s", eng_api->error(eng)) : SAPPORO_OK;
}

/* -------------------------------------------------------------- the shared implementations */

int shim_engine_check(const struct sapporo_engine_api *api)
{
    if (api->version == SAPPORO_ENGINE_API_VERSION)
        return SAPPORO_OK;
    return shim_fail(SAPPORO_ERR_INTERNAL, "the native engine has interface version %d, this "
                     "library %d: reinstall sapporo-nbody", api->version,
                     SAPPORO_ENGINE_API_VERSION);
}

static int try_open(int order, const char *precision, const char *backend, int ndev,
                    const int *devices)
{
    void *api = NULL, *engine = NULL;
    int rc;
    if (is_open)
        return SAPPORO_OK;
    if (ndev > 0 && devices == NULL)
        return shim_fail(SAPPORO_ERR_INPUT, "ndev = %d but devices is NULL", ndev);
    if ((rc = shim_python_up()) < 0)
        return rc;
    rc = PY(shim_py_open(order, precision, backend, ndev, devices, &max_address, &api,
                         &engine));
    if (rc == SAPPORO_OK && (rc = shim_engine_check(api)) < 0)
        PY(shim_py_close());
    if (rc != SAPPORO_OK)
        return rc;
    eng_api = shim_any_api = api;
    eng = engine;
    is_open = 1;
    return SAPPORO_OK;
}

static int do_open(int order, const char *precision, const char *backend, int ndev,
                   const int *devices)
{
    int rc = try_open(order, precision, backend, ndev, devices);
    if (rc < 0)
        snprintf(open_error, sizeof open_error, "%s", shim_last_error);
    else
        open_error[0] = '\0';
    return rc;
}

static int do_close(void)
{
    int rc = SAPPORO_OK;
    if (eng != NULL)
        eng_api->wait(eng);
    eng = NULL;  /* the library's, gone with it */
    eng_api = NULL;
    jb_clear();
    max_j_index = -1;
    open_error[0] = '\0';
    pending = pending_lists = have_result = nb.valid = 0;
    if (is_open) {
        is_open = 0;
        rc = PY(shim_py_close());
    }
    return rc;
}

static int do_set_ti(double ti)
{
    int rc;
    if ((rc = need_open(0)) < 0)
        return rc;
    if (!isfinite(ti))
        return shim_fail(SAPPORO_ERR_INPUT, "ti = %g is not finite", ti);
    eng_api->set_time(eng, ti);
    return jb_flush();  /* the step's j-particles stored now: an error is this call's */
}

static int do_flush(void)
{
    return is_open ? jb_flush() : SAPPORO_OK;
}

/* A negative i-index marks a field point, not a particle (one client asks for the force at
 * points with index -1): it is replaced by an index that no stored j-particle has, so it
 * excludes nothing.  *index is left alone when it has no negative entry. */
static int field_point_indices(int ni, const int **index)
{
    int i, any = 0;
    for (i = 0; i < ni && !any; i++)
        any = (*index)[i] < 0;
    if (!any)
        return SAPPORO_OK;
    if (max_j_index == LIMIT_MAX_ID)
        return shim_fail(SAPPORO_ERR_INPUT, "a negative i-index (a field point) needs a free "
                         "index, but a j-particle has index %d", LIMIT_MAX_ID);
    for (i = 0; i < ni; i++)
        iindex_buf[i] = (*index)[i] < 0 ? max_j_index + 1 : (*index)[i];
    *index = iindex_buf;
    return SAPPORO_OK;
}

/* h2 only shapes neighbour lists: a non-finite h2[i] (an uninitialised array, as Sapporo2's
 * example integrator passes) means no list for i-particle i, its forces are computed and the
 * call succeeds; a warning names the first such particle. */
static void warn_h2(int ni, const int *index, const double *h2)
{
    int bad = 0, first = -1;
    for (int i = 0; i < ni; i++)
        if (!isfinite(h2[i])) {
            bad++;
            if (first < 0)
                first = i;
        }
    if (bad > 0)
        shim_warn("h2 (neighbour radius squared) is not finite for %d of %d i-particles, the "
                  "first h2[%d] = %g (index %d): no neighbour list for them; their forces are "
                  "computed", bad, ni, first, h2[first], index[first]);
}

/* The state a firsthalf leaves for the next lasthalf: pending, with code rc (< 0: refused
 * before it started, which lasthalf returns), no result and no lists.  Returns rc. */
static int firsthalf_pending(int rc)
{
    pending = 1;
    pending_lists = have_result = nb.valid = 0;
    return pending_rc = rc;
}

/* The checks of a firsthalf, then the buffered j-particles and the call to the engine. */
static int start_forces(int nj, int ni, const int *index, const double *xi, const double *vi,
                        const double *ai, const double *ji, double eps2, const double *h2)
{
    int rc, np;
    if ((rc = need_open(1)) < 0)
        return rc;
    if ((np = get_npipes()) < 0)
        return np;
    if (ni < 1 || ni > np)
        return shim_fail(SAPPORO_ERR_INPUT, "ni = %d must be between 1 and g6_npipes() = %d "
                         "(SAPPORO_NPIPES sets it)", ni, np);
    if (index == NULL || xi == NULL || vi == NULL)
        return shim_fail(SAPPORO_ERR_INPUT, "index, xi and vi must not be NULL");
    if (h2 != NULL)
        warn_h2(ni, index, h2);
    if ((rc = field_point_indices(ni, &index)) < 0 || (rc = jb_flush()) < 0)
        return rc;
    if ((rc = eng_api->start(eng, nj, ni, index, xi, vi, ai, ji, eps2, h2)) < 0)
        return shim_fail(rc, "%s", eng_api->error(eng));
    started_ni = ni;
    return SAPPORO_OK;
}

/* ai, ji: the i-particles' predicted acceleration and jerk (orders 6 and 8; NULL from the
 * other entry points).  The code (< 0: refused) is the next lasthalf's. */
static int do_firsthalf(int nj, int ni, const int *index, const double *xi, const double *vi,
                        const double *ai, const double *ji, double eps2, const double *h2)
{
    int rc = firsthalf_pending(start_forces(nj, ni, index, xi, vi, ai, ji, eps2, h2));
    for (int i = 0; rc == SAPPORO_OK && h2 != NULL && i < ni && !pending_lists; i++)
        pending_lists = wants_list(h2[i]);
    return rc;
}

/* snap (orders 6, 8) and crackle (order 8): zeros below the library's order; like every
 * output, NULL where not asked for.  A force that is not finite: SAPPORO_ERR_NONFINITE,
 * naming the particle. */
static int do_lasthalf(int ni, double *acc, double *jerk, double *snap, double *crackle,
                       double *pot, int *nnb, double *nn_r2)
{
    int rc;
    if (!pending)
        return shim_fail(SAPPORO_ERR_STATE, "no force call pending (call g6calc_firsthalf "
                         "first)");
    pending = 0;
    if (pending_rc < 0)
        return pending_rc;
    if (ni != started_ni) {
        eng_api->wait(eng);
        return shim_fail(SAPPORO_ERR_INPUT, "ni = %d differs from the firsthalf call's ni = %d",
                         ni, started_ni);
    }
    if ((rc = eng_api->finish(eng, ni, rows_buf)) < 0)
        return shim_fail(rc, "%s", eng_api->error(eng));
    rows_out(rows_buf, ni, eng_api->order(eng), acc, jerk, snap, crackle, pot, nnb, nn_r2);
    __atomic_add_fetch(&shim_direct_calls, 1, __ATOMIC_RELAXED);  /* GRAPE-5's count too */
    have_result = 1;
    return SAPPORO_OK;
}

/* The lists of the last force call (empty ones where it asked for none): 1 when a list
 * overflowed the capacity, else 0. */
static int do_read_neighbours(void)
{
    int rc, overflow = 0;
    if ((rc = need_open(0)) < 0)
        return rc;
    nb.valid = 0;
    if (!have_result)
        return shim_fail(SAPPORO_ERR_STATE, "no neighbour lists: %s",
                         pending ? "the force call has not finished (call g6calc_lasthalf "
                                   "first)" : "the last force call failed, or there was none");
    if (!eng_api->lists(eng, &nb.ni, &nb.offsets, &nb.counts, &nb.ids)) {
        nb.ni = started_ni;
        nb.offsets = nb.counts = nb.ids = NULL;
    }
    nb.valid = 1;
    for (int i = 0; nb.counts != NULL && i < nb.ni; i++)
        overflow |= nb.counts[i] > nb.offsets[i + 1] - nb.offsets[i];
    return overflow;
}

static int do_get_neighbours(int ipipe, int maxlength, int *nblen, int *nbl)
{
    int rc, count, stored, ncopy;
    if (!nb.valid && (rc = do_read_neighbours()) < 0)
        return rc;
    if (ipipe < 0 || ipipe >= nb.ni)
        return shim_fail(SAPPORO_ERR_INPUT, "ipipe = %d outside the last force call's [0, %d)",
                         ipipe, nb.ni);
    if (maxlength < 0 || (maxlength > 0 && nbl == NULL))
        return shim_fail(SAPPORO_ERR_INPUT, "maxlength = %d with nbl %s", maxlength,
                         nbl == NULL ? "NULL" : "given");
    count = nb.counts != NULL ? nb.counts[ipipe] : 0;
    stored = nb.offsets != NULL ? nb.offsets[ipipe + 1] - nb.offsets[ipipe] : 0;
    ncopy = stored < maxlength ? stored : maxlength;
    if (ncopy > 0)
        memcpy(nbl, nb.ids + nb.offsets[ipipe], sizeof(int) * (size_t)ncopy);
    if (nblen != NULL)
        *nblen = count;
    return count > maxlength || count > stored;
}

/* Phantom-GRAPE's g6calc_lasthalfn / g6calc_lasthalf2n: there the neighbour lists are made
 * by lasthalf, from its h2; here firsthalf's h2 already made them.  Clients pass the same
 * array to both; a positive h2 that reaches only lasthalf is an error (no lists exist). */
static int do_lasthalf_n(int ni, const double *h2, double *acc, double *jerk, double *pot,
                         int *nnb)
{
    int lists = pending_lists;
    int rc = do_lasthalf(ni, acc, jerk, NULL, NULL, pot, nnb, NULL);
    if (rc < 0 || lists || h2 == NULL)
        return rc;
    for (int i = 0; i < ni; i++)
        if (wants_list(h2[i]))
            return shim_fail(SAPPORO_ERR_INPUT, "h2[%d] = %g reaches lasthalf but "
                             "g6calc_firsthalf had no positive h2: neighbour lists are set up "
                             "by firsthalf's h2 (pass the same array to both)", i, h2[i]);
    return rc;
}

static int do_nj_max(void)
{
    if (!is_open)
        return shim_fail(SAPPORO_ERR_STATE, "the library is not open (call g6_open first)"), 0;
    return max_address + 1;
}

static int do_device_count(void)
{
    int rc;
    if ((rc = shim_python_up()) < 0)
        return 0;
    rc = PY(shim_py_device_count());
    return rc > 0 ? rc : 0;
}

/* ------------------------------------------------------------------------ exported names
 * Each exported function serves its call through the static functions above (SERVE,
 * SERVE_REFS of shim.h), under the C API's lock and with the caller's floating-point
 * environment kept, its messages naming it (__func__).  The Fortran names take every scalar
 * by reference: a NULL one is refused naming it, before anything reads it.  cluster_id
 * (there is one cluster) and the hardware's hints (dtj, aold, j6old, phiold, the buffer and
 * mode settings) are accepted and never read. */

/* Fortran has no NULL: a negative first radius means "no neighbour lists". */
static const double *fortran_h2(int ni, const double *h2)
{
    return h2 != NULL && ni > 0 && h2[0] < 0 ? NULL : h2;
}

/* -------------------------------------------------------------------------- GRAPE-6: C */

EXPORT int g6_open(int cluster_id) { return SERVE(do_open(0, NULL, NULL, 0, NULL)); }

EXPORT int g6_open_special(int ndev, int *devices)
{
    return SERVE(do_open(0, NULL, NULL, ndev, devices));
}

EXPORT int g6_close(int cluster_id) { return SERVE(do_close()); }

EXPORT int g6_npipes(void) { return SERVE(shim_npipes_for_client()); }

EXPORT int g6_set_ti(int cluster_id, double ti) { return SERVE(do_set_ti(ti)); }

EXPORT int g6_set_j_particle(int cluster_id, int address, int index, double tj, double dtj,
                             double mass, double k18[3], double j6[3], double a2[3],
                             double v[3], double x[3])
{
    return SERVE(jb_put(address, index, tj, mass, x, v, a2, 2.0, j6, 6.0, k18, 18.0, NULL,
                        NULL, NULL));
}

EXPORT void g6calc_firsthalf(int cluster_id, int nj, int ni, int index[], double xi[][3],
                             double vi[][3], double aold[][3], double j6old[][3],
                             double phiold[], double eps2, double h2[])
{
    SERVE(do_firsthalf(nj, ni, index, (double *)xi, (double *)vi, (double *)aold, NULL, eps2,
                       h2));
}

EXPORT int g6calc_lasthalf(int cluster_id, int nj, int ni, int index[], double xi[][3],
                           double vi[][3], double eps2, double h2[], double acc[][3],
                           double jerk[][3], double pot[])
{
    return SERVE(do_lasthalf(ni, (double *)acc, (double *)jerk, NULL, NULL, pot, NULL, NULL));
}

EXPORT int g6calc_lasthalf2(int cluster_id, int nj, int ni, int index[], double xi[][3],
                            double vi[][3], double eps2, double h2[], double acc[][3],
                            double jerk[][3], double pot[], int nnbindex[])
{
    return SERVE(do_lasthalf(ni, (double *)acc, (double *)jerk, NULL, NULL, pot, nnbindex,
                             NULL));
}

EXPORT int g6_read_neighbour_list(int cluster_id) { return SERVE(do_read_neighbours()); }

EXPORT int g6_get_neighbour_list(int cluster_id, int ipipe, int maxlength, int *nblen,
                                 int nbl[])
{
    return SERVE(do_get_neighbours(ipipe, maxlength, nblen, nbl));
}

EXPORT int g6_flush_jp_buffer(int cluster_id) { return SERVE(do_flush()); }

/* Phantom-GRAPE's names: as lasthalf / lasthalf2 (the lists come from firsthalf's h2). */
EXPORT int g6calc_lasthalfn(int cluster_id, int nj, int ni, int index[], double xi[][3],
                            double vi[][3], double eps2, double h2[], double acc[][3],
                            double jerk[][3], double pot[])
{
    return SERVE(do_lasthalf_n(ni, h2, (double *)acc, (double *)jerk, pot, NULL));
}

EXPORT int g6calc_lasthalf2n(int cluster_id, int nj, int ni, int index[], double xi[][3],
                             double vi[][3], double eps2, double h2[], double acc[][3],
                             double jerk[][3], double pot[], int nnbindex[])
{
    return SERVE(do_lasthalf_n(ni, h2, (double *)acc, (double *)jerk, pot, nnbindex));
}

/* Sapporo2: the j-capacity (addresses 0 .. g6_get_nj_max() - 1); 0 when not open. */
EXPORT int g6_get_nj_max(void) { return SERVE(do_nj_max()); }

/* sapporo_light: how many devices the selected backend has (SAPPORO_BACKEND, else the
 * automatic choice); 0 when none (the reason is printed).  Needs no g6_open. */
EXPORT int get_device_count(void) { return SERVE(do_device_count()); }

/* The hardware's settings and buffers, with nothing to do here: accepted.  g6_set_tunit and
 * g6_set_xunit are passed an int or a double: never read. */
EXPORT int g6_set_tunit(double unit) { return SAPPORO_OK; }
EXPORT int g6_set_xunit(double unit) { return SAPPORO_OK; }
EXPORT int g6_initialize_jp_buffer(int cluster_id, int size) { return SAPPORO_OK; }
EXPORT int g6_reset(int cluster_id) { return SAPPORO_OK; }
EXPORT int g6_reset_fofpga(int cluster_id) { return SAPPORO_OK; }
EXPORT void g6_set_neighbour_list_sort_mode(int mode) {}
EXPORT int g6_set_overflow_flag_test_mode(int a, int b, int c) { return SAPPORO_OK; }
EXPORT void g6_setup_njdata(int cluster_id, int nj) {}  /* Phantom-GRAPE: a j-count hint */

/* -------------------------------------------------------------------- GRAPE-6: Fortran */

EXPORT int g6_open_(int *cluster_id)  /* one client passes NULL */
{
    return SERVE(do_open(0, NULL, NULL, 0, NULL));
}

EXPORT int g6_open_special_(int *ndev, int *devices)
{
    return SERVE_REFS((ndev), do_open(0, NULL, NULL, *ndev, devices));
}

EXPORT int g6_close_(int *cluster_id) { return SERVE(do_close()); }

EXPORT int g6_npipes_(void) { return SERVE(shim_npipes_for_client()); }

EXPORT int g6_set_ti_(int *cluster_id, double *ti) { return SERVE_REFS((ti), do_set_ti(*ti)); }

EXPORT int g6_set_j_particle_(int *cluster_id, int *address, int *index, double *tj,
                              double *dtj, double *mass, double k18[3], double j6[3],
                              double a2[3], double v[3], double x[3])
{
    return SERVE_REFS((address, index, tj, mass),
                      jb_put(*address, *index, *tj, *mass, x, v, a2, 2.0, j6, 6.0, k18, 18.0,
                             NULL, NULL, NULL));
}

/* firsthalf's Fortran names: a NULL scalar refuses the call as any firsthalf's error does
 * (the next lasthalf returns it). */
EXPORT void g6calc_firsthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                              double vi[][3], double aold[][3], double j6old[][3],
                              double phiold[], double *eps2, double h2[])
{
    SERVE(NULL_SCALARS(nj, ni, eps2) < 0 ? firsthalf_pending(SAPPORO_ERR_INPUT)
          : do_firsthalf(*nj, *ni, index, (double *)xi, (double *)vi, (double *)aold, NULL,
                         *eps2, h2));
}

EXPORT int g6calc_lasthalf_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                            double vi[][3], double *eps2, double h2[], double acc[][3],
                            double jerk[][3], double pot[])
{
    return SERVE_REFS((ni), do_lasthalf(*ni, (double *)acc, (double *)jerk, NULL, NULL, pot,
                                        NULL, NULL));
}

EXPORT int g6calc_lasthalf2_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                             double vi[][3], double *eps2, double h2[], double acc[][3],
                             double jerk[][3], double pot[], int nnbindex[])
{
    return SERVE_REFS((ni), do_lasthalf(*ni, (double *)acc, (double *)jerk, NULL, NULL, pot,
                                        nnbindex, NULL));
}

EXPORT int g6_read_neighbour_list_(int *cluster_id) { return SERVE(do_read_neighbours()); }

EXPORT int g6_get_neighbour_list_(int *cluster_id, int *ipipe, int *maxlength, int *nblen,
                                  int nbl[])
{
    return SERVE_REFS((ipipe, maxlength), do_get_neighbours(*ipipe, *maxlength, nblen, nbl));
}

EXPORT int g6_flush_jp_buffer_(int *cluster_id) { return SERVE(do_flush()); }

EXPORT int g6calc_lasthalfn_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                             double vi[][3], double *eps2, double h2[], double acc[][3],
                             double jerk[][3], double pot[])
{
    return SERVE_REFS((ni), do_lasthalf_n(*ni, h2, (double *)acc, (double *)jerk, pot, NULL));
}

EXPORT int g6calc_lasthalf2n_(int *cluster_id, int *nj, int *ni, int index[], double xi[][3],
                              double vi[][3], double *eps2, double h2[], double acc[][3],
                              double jerk[][3], double pot[], int nnbindex[])
{
    return SERVE_REFS((ni), do_lasthalf_n(*ni, h2, (double *)acc, (double *)jerk, pot,
                                          nnbindex));
}

EXPORT int g6_get_nj_max_(void) { return SERVE(do_nj_max()); }

EXPORT int g6_set_tunit_(void *unit) { return SAPPORO_OK; }
EXPORT int g6_set_xunit_(void *unit) { return SAPPORO_OK; }
EXPORT int g6_initialize_jp_buffer_(int *cluster_id, int *size) { return SAPPORO_OK; }
EXPORT int g6_reset_(int *cluster_id) { return SAPPORO_OK; }
EXPORT int g6_reset_fofpga_(int *cluster_id) { return SAPPORO_OK; }
EXPORT void g6_set_neighbour_list_sort_mode_(int *mode) {}
EXPORT int g6_set_overflow_flag_test_mode_(int *a, int *b, int *c) { return SAPPORO_OK; }
EXPORT void g6_setup_njdata_(int *cluster_id, int *nj) {}

/* ---------------------------------------------------------------- sapporo's extensions */

EXPORT int sapporo_open(int order, const char *precision, const char *backend, int ndev,
                        const int *devices)
{
    return SERVE(do_open(order, precision, backend, ndev, devices));
}

EXPORT int sapporo_set_j_particle(int address, int index, double tj, double mass,
                                  const double x[3], const double v[3], const double a[3],
                                  const double jerk[3], const double snap[3],
                                  const double crackle[3])
{
    return SERVE(jb_put(address, index, tj, mass, x, v, a, 1.0, jerk, 1.0, snap, 1.0, crackle,
                        NULL, NULL));
}

EXPORT void sapporo_calc_firsthalf(int nj, int ni, int index[], double xi[][3], double vi[][3],
                                   double ai[][3], double eps2, double h2[])
{
    SERVE(do_firsthalf(nj, ni, index, (double *)xi, (double *)vi, (double *)ai, NULL, eps2,
                       h2));
}

EXPORT int sapporo_calc_lasthalf(int ni, double acc[][3], double jerk[][3], double snap[][3],
                                 double pot[], int nnbindex[], double nn_r2[])
{
    return SERVE(do_lasthalf(ni, (double *)acc, (double *)jerk, (double *)snap, NULL, pot,
                             nnbindex, nn_r2));
}

EXPORT int sapporo_set_j_particle8(int address, int index, double tj, double mass,
                                   const double x[3], const double v[3], const double a[3],
                                   const double jerk[3], const double snap[3],
                                   const double crackle[3], const double pop[3],
                                   const double d5[3])
{
    return SERVE(jb_put(address, index, tj, mass, x, v, a, 1.0, jerk, 1.0, snap, 1.0, crackle,
                        pop, d5));
}

EXPORT void sapporo_calc_firsthalf8(int nj, int ni, int index[], double xi[][3],
                                    double vi[][3], double ai[][3], double ji[][3],
                                    double eps2, double h2[])
{
    SERVE(do_firsthalf(nj, ni, index, (double *)xi, (double *)vi, (double *)ai, (double *)ji,
                       eps2, h2));
}

EXPORT int sapporo_calc_lasthalf8(int ni, double acc[][3], double jerk[][3], double snap[][3],
                                  double crackle[][3], double pot[], int nnbindex[],
                                  double nn_r2[])
{
    return SERVE(do_lasthalf(ni, (double *)acc, (double *)jerk, (double *)snap,
                             (double *)crackle, pot, nnbindex, nn_r2));
}

EXPORT int sapporo_flush(void) { return SERVE(do_flush()); }

EXPORT const char *sapporo_last_error(void)
{
    return shim_last_error;
}

EXPORT const char *sapporo_version(void)
{
    shim_enter(__func__);
    if (version[0] == '\0' && shim_python_up() == 0)
        PY(shim_py_version(version, (int)sizeof version));
    shim_leave(0);
    return version;
}

EXPORT long sapporo_direct_calls(void)
{
    return __atomic_load_n(&shim_direct_calls, __ATOMIC_RELAXED);
}

EXPORT long sapporo_python_calls(void)
{
    long n;
    shim_enter(__func__);
    n = __atomic_load_n(&shim_python_calls, __ATOMIC_RELAXED)
        + (shim_any_api != NULL ? shim_any_api->python_calls() : 0);
    shim_leave(0);
    return n;
}

EXPORT int sapporo_python_started(void) { return SERVE(python_ready); }

/* ---------------------------------------------------------------- their Fortran names */

/* A Fortran CHARACTER argument: blank-padded, its length passed after the other arguments
 * (size_t since gfortran 8, int before; only the low 32 bits are read, which is right for
 * both on little-endian machines).  All blanks means "not given" (NULL). */
static const char *fortran_string(const char *s, size_t len, char *buf, size_t cap)
{
    int n = s != NULL ? (int)(unsigned int)len : 0;
    while (n > 0 && s[n - 1] == ' ')
        n--;
    if (n <= 0)
        return NULL;
    if ((size_t)n >= cap)
        n = (int)cap - 1;
    memcpy(buf, s, (size_t)n);
    buf[n] = '\0';
    return buf;
}

/* Copy a C string into a Fortran CHARACTER variable, padding with blanks. */
static void to_fortran_string(const char *src, char *dst, size_t len)
{
    size_t n = (size_t)(unsigned int)len, k = 0;
    for (; src != NULL && src[k] != '\0' && k < n; k++)
        dst[k] = src[k];
    for (; k < n; k++)
        dst[k] = ' ';
}

EXPORT int sapporo_open_(int *order, const char *precision, const char *backend, int *ndev,
                         const int *devices, size_t precision_len, size_t backend_len)
{
    char p[64], b[64];
    return SERVE_REFS((order, ndev),
                      do_open(*order, fortran_string(precision, precision_len, p, sizeof p),
                              fortran_string(backend, backend_len, b, sizeof b), *ndev,
                              devices));
}

EXPORT int sapporo_set_j_particle_(int *address, int *index, double *tj, double *mass,
                                   const double x[3], const double v[3], const double a[3],
                                   const double jerk[3], const double snap[3],
                                   const double crackle[3])
{
    return SERVE_REFS((address, index, tj, mass),
                      jb_put(*address, *index, *tj, *mass, x, v, a, 1.0, jerk, 1.0, snap, 1.0,
                             crackle, NULL, NULL));
}

EXPORT void sapporo_calc_firsthalf_(int *nj, int *ni, int index[], double xi[][3],
                                    double vi[][3], double ai[][3], double *eps2, double h2[])
{
    SERVE(NULL_SCALARS(nj, ni, eps2) < 0 ? firsthalf_pending(SAPPORO_ERR_INPUT)
          : do_firsthalf(*nj, *ni, index, (double *)xi, (double *)vi, (double *)ai, NULL,
                         *eps2, fortran_h2(*ni, h2)));
}

EXPORT int sapporo_calc_lasthalf_(int *ni, double acc[][3], double jerk[][3], double snap[][3],
                                  double pot[], int nnbindex[], double nn_r2[])
{
    return SERVE_REFS((ni), do_lasthalf(*ni, (double *)acc, (double *)jerk, (double *)snap,
                                        NULL, pot, nnbindex, nn_r2));
}

EXPORT int sapporo_set_j_particle8_(int *address, int *index, double *tj, double *mass,
                                    const double x[3], const double v[3], const double a[3],
                                    const double jerk[3], const double snap[3],
                                    const double crackle[3], const double pop[3],
                                    const double d5[3])
{
    return SERVE_REFS((address, index, tj, mass),
                      jb_put(*address, *index, *tj, *mass, x, v, a, 1.0, jerk, 1.0, snap, 1.0,
                             crackle, pop, d5));
}

EXPORT void sapporo_calc_firsthalf8_(int *nj, int *ni, int index[], double xi[][3],
                                     double vi[][3], double ai[][3], double ji[][3],
                                     double *eps2, double h2[])
{
    SERVE(NULL_SCALARS(nj, ni, eps2) < 0 ? firsthalf_pending(SAPPORO_ERR_INPUT)
          : do_firsthalf(*nj, *ni, index, (double *)xi, (double *)vi, (double *)ai,
                         (double *)ji, *eps2, fortran_h2(*ni, h2)));
}

EXPORT int sapporo_calc_lasthalf8_(int *ni, double acc[][3], double jerk[][3],
                                   double snap[][3], double crackle[][3], double pot[],
                                   int nnbindex[], double nn_r2[])
{
    return SERVE_REFS((ni), do_lasthalf(*ni, (double *)acc, (double *)jerk, (double *)snap,
                                        (double *)crackle, pot, nnbindex, nn_r2));
}

EXPORT int sapporo_flush_(void) { return SERVE(do_flush()); }

EXPORT void sapporo_last_error_(char *message, size_t message_len)
{
    to_fortran_string(shim_last_error, message, message_len);
}

/* the same functions as the C names (which take no argument, and name themselves in no
 * message) */
EXPORT long sapporo_direct_calls_(void) __attribute__((alias("sapporo_direct_calls")));
EXPORT long sapporo_python_calls_(void) __attribute__((alias("sapporo_python_calls")));
EXPORT int sapporo_python_started_(void) __attribute__((alias("sapporo_python_started")));

EXPORT void sapporo_version_(char *text, size_t text_len)
{
    to_fortran_string(sapporo_version(), text, text_len);
}
