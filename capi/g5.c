/*
 * g5.c -- the GRAPE-5 interface of libsapporo.so (Phantom-GRAPE's PG5 calls; grape5.h).
 *
 * Compiled beside shim.c into the library (build.py); it uses shim.c's machinery through
 * shim.h: the embedded Python (shim_python_up), the error record and its messages, the
 * engine table of sapporo/engine_api.h.  Every call has a C name and a Fortran name (trailing
 * underscore, arguments by pointer), both thin wrappers over one static function.
 *
 * Each context id (the first argument of the MC calls; 0 for the others) has its own
 * library of order 2 with its own engine, j-memory, n, i-particles and results, and its own
 * mutex, so calls with different ids run at once from several threads (on PoCL those of
 * different instances: g5_engine_enter).  The engine runs without the GIL; a call into Python (opening or
 * closing a context) takes shim.c's process-wide lock, which also guards the error record.
 * The exception is the engine's own call of its library's planner (for memory, or plans):
 * that takes the GIL and runs under the context's mutex only (the planner works on its own
 * library).  Lock order: a context's mutex, then shim_lock; never the other way round.
 *
 * The potential comes back as PG5 returns it: positive, sum m_j / sqrt(r^2 + eps^2) (the
 * library's is negative), the i-particle's own term m/eps included.
 *
 * GRAPE-5 is order 2 on j-particles that are not predicted: a j-particle is stored with
 * zero velocity at time 0 (so the library's prediction leaves it where it is) and index 0;
 * the i-particles have index 1, so no pair is excluded.  A particle that is both i and j
 * with zero softening then has a force that is not finite, reported as the GRAPE-6 calls
 * report it (SAPPORO_ERR_NONFINITE).
 *
 * The cutoff force of PG5/table (TreePM and P3M codes): with a split length set (by
 * g5_set_cutoff_scale before g5_open, else SAPPORO_G5_CUTOFF; PG5's compile-time SFT_FOR_PM)
 * every context's library computes the short-range part of the S2 split (Library's cutoff),
 * the potential too.  g5_set_eta and g5_set_cutoff_table are accepted and change nothing,
 * as in PG5/table.
 *
 * Positions and masses may also come apart (g5_set_xj, g5_set_mj, the original GRAPE-5's
 * calls).  Each context knows which of the two every address has had, and keeps a copy of
 * those that g5_set_xj and g5_set_mj gave; what g5_set_xmj gave is stored in the library at
 * once, and read back from it when one half of such an address comes later.  The addresses
 * that g5_set_xj and g5_set_mj touched are sent to the library at the next force call, each
 * with the last of both.  A force call that would use an address given one of the two only
 * is refused, naming it.
 */
#include <limits.h>
#include <math.h>

#include "grape5.h"
#include "shim.h"

#define G5_CONTEXTS 64        /* context ids 0 .. G5_CONTEXTS - 1 (PG5 has 24) */
#define G5_NI_CHUNK LIMIT_NI_CHUNK /* i-particles per force call of g5_calculate_force_on_x* (the
                               * engine's ENG_NI_MAX) */

struct g5_context {
    pthread_mutex_t lock;
    int open;                 /* its library is open */
    int max_address;          /* the largest j-address its library holds */
    int stored;               /* addresses [0, stored) may be used by g5_set_n */
    const struct sapporo_engine_api *api;
    void *eng;                /* its library's engine; NULL: everything through Python */
    int lock_slot;            /* -1: its engine runs beside any other; k >= 0 (PoCL:
                               * Context.one_kernel_at_a_time): beside no other of its
                               * library's instance k (g5_engine_enter) */
    int n;                    /* g5_set_n: j-particles [0, n) in the next force call */
    int ni;                   /* i-particles set (0: none) */
    int icap;                 /* room for this many in the i-arrays */
    double *xi, *eps2i;       /* i-particles: positions, softening squared */
    int *ones;                /* icap ones: the i-indices */
    double *gx, *gacc, *gpot; /* one softening's i-particles, when they differ */
    int *gmap;
    double *rows;             /* the engine's result rows */
    double *acc, *pot;        /* the forces of the last g5_run */
    int have_force;           /* for this many i-particles (0: none) */
    double *epsj2;            /* per-j softening squared by address (g5_set_xmje), or NULL */
    int epsj_cap;
    int scap;                 /* room in the copy below: addresses [0, scap) */
    double *sx, *sm;          /* the last position and mass given for each address ... */
    unsigned char *given;     /* ... which of them it has had (G5_GIVEN_X | G5_GIVEN_M), and
                               * G5_STORED where the library has both and the copy not */
    int partial;              /* addresses that have had one of the two only */
    int pend_lo, pend_hi;     /* addresses [pend_lo, pend_hi) may hold what g5_set_xj and
                               * g5_set_mj gave since the last force call (none: lo >= hi) */
    int groups_ni;            /* g5_start_groups: its i-particles (0: none to collect), whose
                               * forces go to acc, pot; those from groups_first on ... */
    int groups_first, groups_left; /* ... (groups_left of them) are still in flight */
};

#define G5_GIVEN_X 1          /* an address has had a position ... */
#define G5_GIVEN_M 2          /* ... a mass */
#define G5_GIVEN (G5_GIVEN_X | G5_GIVEN_M)
#define G5_STORED 4           /* both, stored by g5_set_xmj: the copy is the library's */
#define G5_PARTIAL(g) ((g) == G5_GIVEN_X || (g) == G5_GIVEN_M)

static struct g5_context g5c[G5_CONTEXTS] = {
    [0 ... G5_CONTEXTS - 1] = { .lock = PTHREAD_MUTEX_INITIALIZER },
};
/* the engines of instance k > 0 take turns under instance_lock[k] (instance 0 under
 * shim_lock: the GRAPE-6 library's and every other library's instance) */
static pthread_mutex_t instance_lock[G5_CONTEXTS] = {
    [0 ... G5_CONTEXTS - 1] = PTHREAD_MUTEX_INITIALIZER,
};
static int g5_is_open;        /* g5_open was called (guarded by shim_lock) */
static double g5_eps2;        /* g5_set_eps_to_all's eps squared (or g5_set_eps2_to_all's
                               * eps2), for every context (atomic) */
static char g5_open_error[512]; /* why the last g5_open failed ("" if it did not) */
/* the cutoff (guarded by shim_lock): g5_set_cutoff_scale's split length (0: none; < 0: not
 * called, SAPPORO_G5_CUTOFF's), and the length the open contexts were opened with */
static double g5_cutoff = -1.0;
static double g5_open_cutoff;
/* the devices of g5_open_special (every context's library opens on them), none: as g6_open
 * chooses (guarded by shim_lock) */
#define G5_MAX_DEVICES 16
static int g5_ndev, g5_devices[G5_MAX_DEVICES];

/* An error of a GRAPE-5 call (fn), recorded under the C API's lock: g5_fail(fn, code, fmt,
 * ...) returns code. */
#define g5_fail(fn, ...) (shim_enter(fn), shim_leave(shim_fail(__VA_ARGS__)))

static int g5_put(struct g5_context *c, int rc)
{
    pthread_mutex_unlock(&c->lock);
    return rc;
}

/* Around a call of the context's engine: on a runtime whose compiled kernels must not run
 * at once from two contexts (PoCL's CPU drivers abort in pocl_release_dlhandle_cache when
 * two threads first run one kernel at once), the contexts of one instance take turns:
 * instance 0 under shim_lock (beside no call into Python nor the GRAPE-6 library, whose
 * kernels it shares), instance k under instance_lock[k].  Contexts of different instances
 * (bridge.py: the context id modulo the cores) have kernels of their own and run at once,
 * as elsewhere every context does, and as PG5's do.  The error, if any, is recorded after
 * leaving. */
static void g5_engine_enter(const char *fn, const struct g5_context *c)
{
    if (c->lock_slot == 0)
        shim_enter(fn);
    else if (c->lock_slot > 0)
        pthread_mutex_lock(&instance_lock[c->lock_slot]);
}

static int g5_engine_leave(const struct g5_context *c, int rc)
{
    if (c->lock_slot == 0)
        return shim_leave(rc);
    if (c->lock_slot > 0)
        pthread_mutex_unlock(&instance_lock[c->lock_slot]);
    return rc;
}

/* Open the context's library unless it is (the context is locked).  forces: a force call,
 * which says on every call that g5_open failed (as the GRAPE-6 force calls do). */
static int g5_ready_for(const char *fn, struct g5_context *c, int forces)
{
    int rc;
    void *api = NULL, *engine = NULL;
    double cutoff;
    if (c->open)
        return SAPPORO_OK;
    shim_enter(fn);
    if ((rc = shim_need_open(g5_is_open, g5_open_error, "GRAPE-5", "g5_open", forces)) < 0)
        return shim_leave(rc);
    cutoff = g5_cutoff;
    rc = PY(shim_py_g5_open((int)(c - g5c), g5_ndev, g5_devices, &cutoff, &c->max_address,
                            &api, &engine, &c->lock_slot));
    if (rc == SAPPORO_OK && (rc = shim_engine_check(api)) < 0)
        PY(shim_py_g5_close((int)(c - g5c)));
    if (rc == SAPPORO_OK) {  /* the rest as g5_close left it (or as it started): empty */
        c->open = 1;
        c->api = shim_any_api = api;
        c->eng = engine;
        g5_open_cutoff = cutoff;
    }
    return shim_leave(rc);
}

/* The context of an id, locked, its library open (forces: for a force call, see
 * g5_ready_for); NULL, with *rc the error, when the id is out of range or the library could
 * not be opened. */
static struct g5_context *g5_get(const char *fn, int id, int forces, int *rc)
{
    if (id < 0 || id >= G5_CONTEXTS) {
        *rc = g5_fail(fn, SAPPORO_ERR_INPUT, "context id = %d must be between 0 and %d", id,
                      G5_CONTEXTS - 1);
        return NULL;
    }
    pthread_mutex_lock(&g5c[id].lock);
    if ((*rc = g5_ready_for(fn, &g5c[id], forces)) == SAPPORO_OK)
        return &g5c[id];
    pthread_mutex_unlock(&g5c[id].lock);
    return NULL;
}

/* ------------------------------------------------------------------------------ buffers */

/* A capacity of at least need: cap doubled (first when it is 0) as often as needed. */
static int g5_capacity(int cap, int need, int first)
{
    while (cap < need)
        cap = cap ? 2 * cap : first;
    return cap;
}

/* Room for ni i-particles (their indices ones). */
static int g5_i_room(const char *fn, struct g5_context *c, int ni)
{
    int cap;
    if (ni <= c->icap)
        return SAPPORO_OK;
    cap = g5_capacity(c->icap, ni, 256);
    if (shim_grow((void **)&c->xi, 3 * sizeof(double), cap)
        || shim_grow((void **)&c->eps2i, sizeof(double), cap)
        || shim_grow((void **)&c->ones, sizeof(int), cap)
        || shim_grow((void **)&c->gx, 3 * sizeof(double), cap)
        || shim_grow((void **)&c->gacc, 3 * sizeof(double), cap)
        || shim_grow((void **)&c->gpot, sizeof(double), cap)
        || shim_grow((void **)&c->gmap, sizeof(int), cap)
        || shim_grow((void **)&c->rows, NCO_ORDER8 * sizeof(double), cap)
        || shim_grow((void **)&c->acc, 3 * sizeof(double), cap)
        || shim_grow((void **)&c->pot, sizeof(double), cap))
        return g5_fail(fn, SAPPORO_ERR_INTERNAL, "out of memory for %d i-particles", ni);
    for (int i = 0; i < cap; i++)
        c->ones[i] = 1;
    c->icap = cap;
    return SAPPORO_OK;
}

/* ------------------------------------------------------------------------ the calls */

/* g5_open, and Sapporo2's g5_open_special(ndev, list): ndev > 0 opens every context on the
 * devices list[0 .. ndev - 1] (as g6_open_special; a device the backend does not have is the
 * error of the open).  ndev <= 0 (Sapporo2: the driver chooses) is g5_open: the devices of
 * the SAPPORO_* settings (SAPPORO_DEVICES, sapporo2.config, the launcher's rank, else the
 * first). */
static int do_g5_open(const char *fn, int ndev, const int *list)
{
    int rc;
    struct g5_context *c = &g5c[0];
    pthread_mutex_lock(&c->lock);
    shim_enter(fn);
    if (ndev > G5_MAX_DEVICES || (ndev > 0 && list == NULL)) {
        rc = shim_fail(SAPPORO_ERR_INPUT, "ndev = %d device ids%s: give 1 to %d ids in list, or "
                       "ndev <= 0 to open as g5_open does", ndev, list == NULL ? " but list is "
                       "NULL" : "", G5_MAX_DEVICES);
        return g5_put(c, shim_leave(rc));
    }
    g5_ndev = ndev > 0 ? ndev : 0;
    for (int k = 0; k < g5_ndev; k++)
        g5_devices[k] = list[k];
    rc = shim_python_up();
    if (rc == SAPPORO_OK)
        g5_is_open = 1;
    shim_leave(rc);
    if (rc == SAPPORO_OK)
        rc = g5_ready_for(fn, c, 0);
    shim_enter(fn);
    g5_open_error[0] = '\0';
    if (rc < 0) {
        g5_is_open = 0;
        snprintf(g5_open_error, sizeof g5_open_error, "%s", shim_last_error);
    }
    return g5_put(c, shim_leave(rc));
}

static int do_g5_close(void)
{
    int rc = SAPPORO_OK;
    for (int id = 0; id < G5_CONTEXTS; id++) {
        struct g5_context *c = &g5c[id];
        pthread_mutex_lock(&c->lock);
        if (c->open) {
            int r;
            c->api->wait(c->eng);
            c->eng = NULL;
            c->api = NULL;
            c->open = 0;
            shim_enter("g5_close");
            r = PY(shim_py_g5_close(id));
            shim_leave(r);
            if (r < 0)
                rc = r;
        }
        c->stored = c->n = c->ni = c->have_force = c->groups_ni = c->groups_left = 0;
        c->epsj_cap = c->scap = c->partial = c->pend_lo = c->pend_hi = 0;
        free(c->epsj2);
        free(c->sx);
        free(c->sm);
        free(c->given);
        c->epsj2 = c->sx = c->sm = NULL;
        c->given = NULL;
        pthread_mutex_unlock(&c->lock);
    }
    shim_enter("g5_close");
    g5_is_open = 0;
    return shim_leave(rc);
}

/* Context 0's j-capacity; 0 (and a message) before g5_open. */
static int do_g5_jmemsize(void)
{
    struct g5_context *c = &g5c[0];
    pthread_mutex_lock(&c->lock);
    if (!c->open) {
        g5_fail("g5_get_jmemsize", SAPPORO_ERR_STATE, "GRAPE-5 is not open (call g5_open "
                "first): the j-memory is that of the open library");
        return g5_put(c, 0);
    }
    return g5_put(c, c->max_address + 1);
}

static int do_g5_pipelines(void)
{
    shim_enter("g5_get_number_of_pipelines");
    return shim_leave(shim_npipes_for_client());
}

static int do_g5_set_eps_to_all(const char *fn, double eps)
{
    double eps2 = eps * eps;
    if (!isfinite(eps))
        return g5_fail(fn, SAPPORO_ERR_INPUT, "eps = %g is not finite", eps);
    __atomic_store(&g5_eps2, &eps2, __ATOMIC_RELAXED);
    return SAPPORO_OK;
}

/* Sapporo2's g5_set_eps2_to_all: the same, given squared. */
static int do_g5_set_eps2_to_all(const char *fn, double eps2)
{
    if (!(isfinite(eps2) && eps2 >= 0.0))
        return g5_fail(fn, SAPPORO_ERR_INPUT, "eps2 = %g must be finite and >= 0", eps2);
    __atomic_store(&g5_eps2, &eps2, __ATOMIC_RELAXED);
    return SAPPORO_OK;
}

/* g5_set_range: the original GRAPE-5's fixed-point scaling of positions and masses; sapporo
 * computes in floating point and needs none, so the values are not used.  What cannot be a
 * range is said once (a warning, throttled like the errors), and accepted all the same, as
 * PG5 and Sapporo2 accept anything. */
static int do_g5_set_range(double xmin, double xmax, double mmin)
{
    if (!(isfinite(xmin) && isfinite(xmax) && isfinite(mmin) && xmin < xmax))
        shim_warn("xmin = %g, xmax = %g, mmin = %g is not a range (finite values, xmin < xmax); "
                  "ignored all the same: sapporo computes in floating point and needs no range",
                  xmin, xmax, mmin);
    return SAPPORO_OK;
}

/* g5_set_cutoff_scale (sapporo's): the S2 split length of PG5/table's SFT_FOR_PM, which PG5
 * fixes at compile time (3.0 / SIZE_OF_MESH); 0: Newtonian forces.  It replaces
 * SAPPORO_G5_CUTOFF and takes effect at g5_open: once GRAPE-5 is open a different length is
 * refused (g5_close first), the same one accepted. */
static int do_g5_set_cutoff_scale(double scale)
{
    if (!(isfinite(scale) && scale >= 0.0))
        return shim_fail(SAPPORO_ERR_INPUT, "scale = %g must be finite and >= 0 (0: no cutoff)",
                         scale);
    if (g5_is_open && scale != g5_open_cutoff)
        return shim_fail(SAPPORO_ERR_STATE, "GRAPE-5 is open with cutoff scale %g; the scale "
                         "is fixed by g5_open: call g5_set_cutoff_scale(%g) before it (or "
                         "g5_close first)", g5_open_cutoff, scale);
    g5_cutoff = scale;
    return SAPPORO_OK;
}

/* g5_set_cutoff_table: a placeholder in PG5/table (the functions are never called, its table
 * is the S2 split's); so here, accepted and not used.  A program that calls it expects a
 * cutoff force: when none is set (nor SAPPORO_G5_CUTOFF), a warning says the forces are
 * Newtonian. */
static int do_g5_set_cutoff_table(void)
{
    int none = g5_is_open ? g5_open_cutoff == 0.0
        : g5_cutoff == 0.0 || (g5_cutoff < 0.0 && getenv("SAPPORO_G5_CUTOFF") == NULL);
    if (none)
        shim_warn("accepted and not used, as in PG5/table: the cutoff force is the S2 split of "
                  "g5_set_cutoff_scale or SAPPORO_G5_CUTOFF (PG5's SFT_FOR_PM), and neither "
                  "is set: the forces are Newtonian");
    return SAPPORO_OK;
}

static int do_g5_set_n(const char *fn, int id, int n)
{
    int rc;
    struct g5_context *c = g5_get(fn, id, 0, &rc);
    if (c == NULL)
        return rc;
    if (n < 0 || n > c->max_address + 1)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "n = %d must be between 0 and "
                                 "g5_get_jmemsize() = %d", n, c->max_address + 1));
    c->n = n;
    return g5_put(c, SAPPORO_OK);
}

/* The context of an id, locked, for a call that stores j-particles at addresses adr .. adr +
 * nj - 1: NULL, with *rc the error, when the id, the library or the addresses are wrong, and
 * with *rc = SAPPORO_OK when nj is 0 (nothing to store). */
static struct g5_context *g5_get_j(const char *fn, int id, int adr, int nj, int *rc)
{
    struct g5_context *c = g5_get(fn, id, 0, rc);
    if (c == NULL)
        return NULL;
    if (adr < 0 || nj < 0 || (long)adr + nj > (long)c->max_address + 1)
        *rc = g5_fail(fn, SAPPORO_ERR_INPUT, "adr = %d, nj = %d: the addresses must lie in "
                      "0 .. g5_get_jmemsize() - 1 = %d", adr, nj, c->max_address);
    if (*rc < 0 || nj == 0) {
        pthread_mutex_unlock(&c->lock);
        return NULL;
    }
    return c;
}

/* The positions of g5_set_xj or the masses of g5_set_mj (the other NULL) at addresses adr ..
 * adr + nj - 1: the engine's rules (finite, positions below COORD_LIMIT) checked here, as the
 * engine sees them at the next force call only and the error is this call's. */
static int g5_check_half(const char *fn, int adr, int nj, const double *xj, const double *mj)
{
    for (int a = adr; a < adr + nj; a++) {
        const double *x = xj != NULL ? xj + 3 * (size_t)a : NULL;
        if (mj != NULL && !isfinite(mj[a]))
            return g5_fail(fn, SAPPORO_ERR_INPUT, "j-particle at address %d: mass %g is not "
                           "finite", a, mj[a]);
        if (!finite3(x))
            return g5_fail(fn, SAPPORO_ERR_INPUT, "j-particle at address %d has a NaN or "
                           "infinite value", a);
        if (x != NULL && !position_ok(x))
            return g5_fail(fn, SAPPORO_ERR_INPUT, "j-particle at address %d: position (%g, "
                           "%g, %g) too large; magnitudes must stay below %g", a, x[0], x[1],
                           x[2], COORD_LIMIT);
    }
    return SAPPORO_OK;
}

/* Keep what g5_set_xj (positions xj) or g5_set_mj (masses mj; the other NULL) gave for
 * addresses adr .. adr + nj - 1 (indexed by address) as the last given, or (both given:
 * g5_set_xmj, stored in the library already) mark those addresses as the library's.  An
 * address the library holds gets its copy back from it before one half replaces its own. */
static int g5_keep(const char *fn, struct g5_context *c, int adr, int nj, const double *xj,
                   const double *mj)
{
    int end = adr + nj;
    if (end > c->scap) {
        int old = c->scap;
        int cap = old > end / 2 ? (old > INT_MAX / 2 ? INT_MAX : 2 * old) : end;
        if (shim_grow((void **)&c->sx, 3 * sizeof(double), cap)
            || shim_grow((void **)&c->sm, sizeof(double), cap)
            || shim_grow((void **)&c->given, 1, cap))
            return g5_fail(fn, SAPPORO_ERR_INTERNAL, "out of memory for the positions and "
                           "masses of %d j-particles", cap);
        memset(c->given + old, 0, (size_t)(cap - old));
        c->scap = cap;
    }
    if (xj != NULL && mj != NULL) {
        for (int a = adr; a < end && c->partial > 0; a++)
            c->partial -= G5_PARTIAL(c->given[a]);
        memset(c->given + adr, G5_GIVEN | G5_STORED, (size_t)nj);
        return SAPPORO_OK;
    }
    for (int a = adr, b; a < end; a = b) {  /* each run of the library's addresses: back */
        for (b = a; b < end && (c->given[b] & G5_STORED); b++)
            ;
        if (b > a) {
            int rc;
            g5_engine_enter(fn, c);
            rc = g5_engine_leave(c, c->api->get_xm(c->eng, a, b - a, c->sx + 3 * (size_t)a,
                                                   c->sm + a));
            if (rc < 0)
                return g5_fail(fn, rc, "%s", c->api->error(c->eng));
            memset(c->given + a, G5_GIVEN, (size_t)(b - a));
        }
        b += b == a;
    }
    for (int a = adr; a < end; a++) {
        unsigned char was = c->given[a], now = was;
        if (xj != NULL) {
            memcpy(c->sx + 3 * (size_t)a, xj + 3 * (size_t)a, 3 * sizeof(double));
            now |= G5_GIVEN_X;
        }
        if (mj != NULL) {
            c->sm[a] = mj[a];
            now |= G5_GIVEN_M;
        }
        c->partial += G5_PARTIAL(now) - G5_PARTIAL(was);
        c->given[a] = now;
    }
    return SAPPORO_OK;
}

/* The n j-particles at addresses adr .. adr + n - 1 to the context's engine: positions x
 * and masses m of the first at x, m (the engine's put_xm: no velocity, id 0). */
static int g5_store(const char *fn, struct g5_context *c, int adr, int n, const double *x,
                    const double *m)
{
    int rc;
    g5_engine_enter(fn, c);
    rc = g5_engine_leave(c, c->api->put_xm(c->eng, adr, n, x, m, 0));
    if (rc < 0)
        return g5_fail(fn, rc, "%s", c->api->error(c->eng));
    if (adr + n > c->stored)
        c->stored = adr + n;
    return SAPPORO_OK;
}

/* j-particles at addresses adr .. adr + nj - 1, read from xj[adr ..], mj[adr ..] (PG5
 * indexes the arrays by address); with_eps: epsj2 (per-j softening squared, also by
 * address) is given.  The engine checks the positions and masses (and stores all or none):
 * its refusal is this call's error. */
static int do_g5_set_xmj(const char *fn, int id, int adr, int nj, const double *xj,
                         const double *mj, const double *epsj2, int with_eps)
{
    int rc;
    struct g5_context *c = g5_get_j(fn, id, adr, nj, &rc);
    if (c == NULL)
        return rc;
    if (xj == NULL || mj == NULL || (with_eps && epsj2 == NULL))
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "xj, mj%s must not be NULL",
                                 with_eps ? " and epsj2" : ""));
    for (int a = adr; epsj2 != NULL && a < adr + nj; a++)
        if (!(epsj2[a] >= 0.0 && isfinite(epsj2[a])))
            return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "j-particle at address %d has a "
                                     "NaN or infinite value (or a negative softening)", a));
    if ((rc = g5_store(fn, c, adr, nj, xj + 3 * (size_t)adr, mj + adr)) < 0
        || (rc = g5_keep(fn, c, adr, nj, xj, mj)) < 0)
        return g5_put(c, rc);
    if (epsj2 != NULL || c->epsj2 != NULL) {
        if (c->epsj_cap < adr + nj) {  /* addresses not covered have no per-j softening */
            int old = c->epsj_cap, cap = 2 * old > adr + nj ? 2 * old : adr + nj;
            if (shim_grow((void **)&c->epsj2, sizeof(double), cap))
                return g5_put(c, g5_fail(fn, SAPPORO_ERR_INTERNAL, "out of memory for %d "
                                         "softening lengths", cap));
            for (int a = old; a < cap; a++)
                c->epsj2[a] = 0.0;
            c->epsj_cap = cap;
        }
        for (int a = adr; a < adr + nj; a++)
            c->epsj2[a] = epsj2 != NULL ? epsj2[a] : 0.0;
    }
    return g5_put(c, SAPPORO_OK);
}

/* g5_set_xj (positions: xj) and g5_set_mj (masses: mj): of addresses adr .. adr + nj - 1,
 * read from xj[adr ..] or mj[adr ..] as g5_set_xmj reads them.  Kept with the other half
 * last given for each address, and sent to the library by the next force call. */
static int do_g5_set_half(const char *fn, int id, int adr, int nj, int positions,
                          const double *xj, const double *mj)
{
    int rc, empty;
    struct g5_context *c = g5_get_j(fn, id, adr, nj, &rc);
    if (c == NULL)
        return rc;
    if (positions ? xj == NULL : mj == NULL)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "%s must not be NULL",
                                 positions ? "xj" : "mj"));
    if ((rc = g5_check_half(fn, adr, nj, xj, mj)) < 0
        || (rc = g5_keep(fn, c, adr, nj, xj, mj)) < 0)
        return g5_put(c, rc);
    empty = c->pend_lo >= c->pend_hi;
    if (empty || adr < c->pend_lo)
        c->pend_lo = adr;
    if (empty || adr + nj > c->pend_hi)
        c->pend_hi = adr + nj;
    return g5_put(c, SAPPORO_OK);
}

/* Before a force call: send the addresses g5_set_xj and g5_set_mj gave since the last one
 * that have had both a position and a mass (the others wait for their other half). */
static int g5_flush(const char *fn, struct g5_context *c)
{
    int rc;
    for (int a = c->pend_lo, end; a < c->pend_hi; a = end) {  /* each run of such addresses */
        for (end = a; end < c->pend_hi && c->given[end] == G5_GIVEN; end++)
            ;
        if (end > a && (rc = g5_store(fn, c, a, end - a, c->sx + 3 * (size_t)a, c->sm + a)) < 0)
            return rc;
        end += end == a;
    }
    c->pend_lo = c->pend_hi = 0;
    return SAPPORO_OK;
}

/* i-particles: positions, and softening squared per particle (eps2 NULL: g5_set_eps_to_all's
 * eps squared, or g5_set_eps2_to_all's eps2). */
static int g5_set_i(const char *fn, struct g5_context *c, int ni, const double *xi,
                    const double *eps2)
{
    int rc;
    double e2;
    c->ni = c->have_force = 0;
    if (xi == NULL)
        return g5_fail(fn, SAPPORO_ERR_INPUT, "xi must not be NULL");
    for (int i = 0; i < ni; i++) {
        const double *x = xi + 3 * (size_t)i;
        if (!position_ok(x))
            return g5_fail(fn, SAPPORO_ERR_INPUT, "i-particle %d: position (%g, %g, %g) is "
                           "not finite or too large (magnitudes must stay below %g)", i, x[0],
                           x[1], x[2], COORD_LIMIT);
        if (eps2 != NULL && !(isfinite(eps2[i]) && eps2[i] >= 0.0))
            return g5_fail(fn, SAPPORO_ERR_INPUT, "eps2[%d] = %g must be finite and >= 0", i,
                           eps2[i]);
    }
    if ((rc = g5_i_room(fn, c, ni)) < 0)
        return rc;
    __atomic_load(&g5_eps2, &e2, __ATOMIC_RELAXED);
    memcpy(c->xi, xi, sizeof(double) * 3 * (size_t)ni);
    for (int i = 0; i < ni; i++)
        c->eps2i[i] = eps2 != NULL ? eps2[i] : e2;
    c->ni = ni;
    return SAPPORO_OK;
}

static int do_g5_set_xi(const char *fn, int id, int ni, const double *xi, const double *eps2,
                        int with_eps)
{
    int rc, np;
    struct g5_context *c = g5_get(fn, id, 0, &rc);
    if (c == NULL)
        return rc;
    c->ni = c->have_force = 0;  /* none, unless g5_set_i sets them */
    np = do_g5_pipelines();
    if (ni < 1 || ni > np)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "ni = %d must be between 1 and "
                                 "g5_get_number_of_pipelines() = %d (SAPPORO_NPIPES sets it)",
                                 ni, np));
    if (with_eps && eps2 == NULL)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "eps2 must not be NULL"));
    return g5_put(c, g5_set_i(fn, c, ni, xi, eps2));
}

/* g5_set_eps: the softening (eps, squared here) of i-particles 0 .. ni - 1 already set. */
static int do_g5_set_eps(const char *fn, int id, int ni, const double *eps)
{
    int rc;
    struct g5_context *c = g5_get(fn, id, 0, &rc);
    if (c == NULL)
        return rc;
    if (ni < 0 || ni > c->ni)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "ni = %d must be between 0 and the "
                                 "%d i-particles set (g5_set_eps follows g5_set_xi, which "
                                 "sets every softening to g5_set_eps_to_all's)", ni, c->ni));
    if (ni > 0 && eps == NULL)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "eps must not be NULL"));
    for (int i = 0; i < ni; i++)
        if (!isfinite(eps[i]))
            return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "eps[%d] = %g is not finite", i,
                                     eps[i]));
    for (int i = 0; i < ni; i++)
        c->eps2i[i] = eps[i] * eps[i];
    c->have_force = 0;
    return g5_put(c, SAPPORO_OK);
}

/* The rows of a finished force call of ni i-particles (rc: its code) into acc and pot. */
static int g5_rows(const char *fn, struct g5_context *c, int rc, int ni, double *acc,
                   double *pot)
{
    if (rc < 0)
        return g5_fail(fn, rc, "%s%s", c->api->error(c->eng), rc != SAPPORO_ERR_NONFINITE ? ""
                       : "; GRAPE-5 excludes no pair, so an i-particle at a j-particle's "
                       "position needs eps > 0");
    __atomic_add_fetch(&shim_direct_calls, 1, __ATOMIC_RELAXED);
    rows_out(c->rows, ni, 2, acc, NULL, NULL, NULL, pot, NULL, NULL);
    for (int i = 0; i < ni; i++)
        pot[i] = -pot[i];  /* PG5's sign: positive */
    return SAPPORO_OK;
}

/* Forces on ni i-particles x from addresses [0, c->n), one softening, by the engine (a
 * force that is not finite: SAPPORO_ERR_NONFINITE, the engine's message naming the particle
 * and its id, 1 as every GRAPE-5 i-particle's). */
static int g5_force(const char *fn, struct g5_context *c, int ni, const double *x, double eps2,
                    double *acc, double *pot)
{
    int rc;
    g5_engine_enter(fn, c);
    rc = c->api->start(c->eng, c->n, ni, c->ones, x, NULL, NULL, NULL, eps2, NULL);
    if (rc > 0)
        rc = c->api->finish(c->eng, ni, c->rows);
    return g5_rows(fn, c, g5_engine_leave(c, rc), ni, acc, pot);
}

/* Addresses [0, n) ready for a force call: those g5_set_xj and g5_set_mj gave sent, none
 * with one half only, and their per-j softening (g5_set_xmje) one value, *epsj2.  what: n's
 * name in messages. */
static int g5_j_ready(const char *fn, struct g5_context *c, int n, const char *what,
                      double *epsj2)
{
    int rc;
    *epsj2 = 0.0;
    for (int a = 0, end = n < c->scap ? n : c->scap; c->partial > 0 && a < end; a++)
        if (G5_PARTIAL(c->given[a]))
            return g5_fail(fn, SAPPORO_ERR_INPUT, "j-particle at address %d has a %s (%s) but "
                           "never had a %s: give it with %s, or both with g5_set_xmj, before "
                           "a force call uses it (%s %d)", a,
                           c->given[a] == G5_GIVEN_X ? "position" : "mass",
                           c->given[a] == G5_GIVEN_X ? "g5_set_xj" : "g5_set_mj",
                           c->given[a] == G5_GIVEN_X ? "mass" : "position",
                           c->given[a] == G5_GIVEN_X ? "g5_set_mj" : "g5_set_xj", what, n);
    if ((rc = g5_flush(fn, c)) < 0)
        return rc;
    if (n > c->stored)
        return g5_fail(fn, SAPPORO_ERR_INPUT, "%s %d j-particles, but addresses were set "
                       "up to %d only (g5_set_xmj, or g5_set_xj and g5_set_mj)", what, n,
                       c->stored - 1);
    if (c->epsj2 != NULL && n > 0) {
        *epsj2 = c->epsj2[0];
        for (int a = 1; a < n; a++) {
            double e = a < c->epsj_cap ? c->epsj2[a] : 0.0;
            if (e != *epsj2)
                return g5_fail(fn, SAPPORO_ERR_INPUT, "the per-j softening differs between "
                               "j-particles (epsj2[0] = %g, epsj2[%d] = %g): sapporo takes "
                               "one softening per i-particle and force call, so every "
                               "j-particle of g5_set_xmje must have the same", *epsj2, a, e);
        }
    }
    return SAPPORO_OK;
}

/* The forces on the i-particles set, into c->acc, c->pot: one force call per softening
 * (the library takes one per call), plus the per-j softening when uniform. */
static int g5_compute(const char *fn, struct g5_context *c)
{
    int rc, ni = c->ni, same = 1;
    double epsj2;
    c->have_force = c->groups_ni = 0;
    if (ni == 0)
        return g5_fail(fn, SAPPORO_ERR_STATE, "no i-particles (call g5_set_xi first)");
    if ((rc = g5_j_ready(fn, c, c->n, "n =", &epsj2)) < 0)
        return rc;
    for (int i = 1; i < ni && same; i++)
        same = c->eps2i[i] == c->eps2i[0];
    if (same) {
        rc = g5_force(fn, c, ni, c->xi, c->eps2i[0] + epsj2, c->acc, c->pot);
    }
    else {  /* each softening in turn, in the order of first appearance */
        char *done = calloc((size_t)ni, 1);
        rc = done == NULL ? g5_fail(fn, SAPPORO_ERR_INTERNAL, "out of memory") : SAPPORO_OK;
        for (int first = 0; first < ni && rc == SAPPORO_OK; first++) {
            int m = 0;
            double e = c->eps2i[first];
            if (done[first])
                continue;
            for (int i = first; i < ni; i++)
                if (!done[i] && c->eps2i[i] == e) {
                    done[i] = 1;
                    c->gmap[m] = i;
                    memcpy(c->gx + 3 * m++, c->xi + 3 * i, 3 * sizeof(double));
                }
            rc = g5_force(fn, c, m, c->gx, e + epsj2, c->gacc, c->gpot);
            for (int k = 0; k < m && rc == SAPPORO_OK; k++) {
                memcpy(c->acc + 3 * c->gmap[k], c->gacc + 3 * k, 3 * sizeof(double));
                c->pot[c->gmap[k]] = c->gpot[k];
            }
        }
        free(done);
    }
    if (rc == SAPPORO_OK)
        c->have_force = ni;
    return rc;
}

/* g5_start_groups: the forces on ng groups, group g's i-particles x[ioff[g] .. ioff[g + 1])
 * from addresses [joff[g], joff[g + 1]) only, g5_set_eps_to_all's softening.  The engine
 * takes as many groups per launch as fit (start_groups); all launches but the last are
 * waited for here, the last is left in flight for g5_get_groups_force. */
static int do_g5_start_groups(const char *fn, int id, int ng, const int *ioff, const int *joff,
                              const double *x)
{
    int rc, nj = 0;
    double e2, epsj2;
    struct g5_context *c = g5_get(fn, id, 1, &rc);
    if (c == NULL)
        return rc;
    c->groups_ni = c->have_force = 0;
    if (ng < 0 || (ng > 0 && (ioff == NULL || joff == NULL || x == NULL)))
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "ng = %d must be >= 0, and the "
                                 "offsets and x not NULL", ng));
    for (int g = 0; g <= ng; g++)
        nj = joff[g] > nj ? joff[g] : nj;
    if (ng > 0 && ioff[0] != 0)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "i_offsets[0] = %d must be 0",
                                 ioff[0]));
    if (ng == 0 || ioff[ng] == 0)
        return g5_put(c, SAPPORO_OK);  /* no i-particle */
    if (ioff[ng] < 0 || (rc = g5_i_room(fn, c, ioff[ng])) < 0
        || (rc = g5_j_ready(fn, c, nj, "j_offsets reach", &epsj2)) < 0)
        return g5_put(c, ioff[ng] < 0 ? g5_fail(fn, SAPPORO_ERR_INPUT, "i_offsets[%d] = %d "
                                                "must be >= 0", ng, ioff[ng]) : rc);
    __atomic_load(&g5_eps2, &e2, __ATOMIC_RELAXED);
    for (int g = 0, k; g < ng; g += k) {
        g5_engine_enter(fn, c);
        k = rc = c->api->start_groups(c->eng, ng - g, ioff + g, joff + g, c->ones, x,
                                      e2 + epsj2);
        c->groups_first = ioff[g];
        c->groups_left = k > 0 ? ioff[g + k] - ioff[g] : 0;
        if (k > 0 && g + k < ng)
            rc = c->api->finish(c->eng, c->groups_left, c->rows);
        rc = g5_engine_leave(c, rc);
        if (rc < 0 || g + k < ng) {
            if ((rc = g5_rows(fn, c, rc, c->groups_left, c->acc + 3 * (size_t)ioff[g],
                              c->pot + ioff[g])) < 0)
                return g5_put(c, rc);
            c->groups_left = 0;
        }
    }
    c->groups_ni = ioff[ng];
    return g5_put(c, SAPPORO_OK);
}

/* g5_get_groups_force: the forces of the last g5_start_groups, its i-particles' in order. */
static int do_g5_get_groups_force(const char *fn, int id, double *a, double *pot)
{
    int rc;
    struct g5_context *c = g5_get(fn, id, 0, &rc);
    if (c == NULL)
        return rc;
    if (c->groups_ni == 0 || a == NULL || pot == NULL)
        return g5_put(c, g5_fail(fn, c->groups_ni ? SAPPORO_ERR_INPUT : SAPPORO_ERR_STATE,
                                 c->groups_ni ? "a and pot must not be NULL" : "no groups' "
                                 "forces to read (g5_start_groups started none, failed, or "
                                 "another force call came after it)"));
    if (c->groups_left > 0) {
        const int first = c->groups_first;
        g5_engine_enter(fn, c);
        rc = g5_engine_leave(c, c->api->finish(c->eng, c->groups_left, c->rows));
        rc = g5_rows(fn, c, rc, c->groups_left, c->acc + 3 * (size_t)first, c->pot + first);
        c->groups_left = 0;
        if (rc < 0) {
            c->groups_ni = 0;
            return g5_put(c, rc);
        }
    }
    memcpy(a, c->acc, sizeof(double) * 3 * (size_t)c->groups_ni);
    memcpy(pot, c->pot, sizeof(double) * (size_t)c->groups_ni);
    return g5_put(c, SAPPORO_OK);
}

/* g5_calculate_force_on_groups: g5_start_groups and g5_get_groups_force in one call. */
static int do_g5_groups(const char *fn, int id, int ng, const int *ioff, const int *joff,
                        const double *x, double *a, double *pot)
{
    int rc = do_g5_start_groups(fn, id, ng, ioff, joff, x);
    if (rc < 0 || ng <= 0 || ioff[ng] == 0)
        return rc;
    return do_g5_get_groups_force(fn, id, a, pot);
}

static int do_g5_run(const char *fn, int id)
{
    int rc;
    struct g5_context *c = g5_get(fn, id, 1, &rc);
    if (c == NULL)
        return rc;
    return g5_put(c, g5_compute(fn, c));
}

static int g5_copy_out(const char *fn, struct g5_context *c, int ni, double *a, double *pot)
{
    if (c->have_force == 0)
        return g5_fail(fn, SAPPORO_ERR_STATE, "no forces to read (the last g5_run failed, or "
                       "none ran since the i-particles were set)");
    if (ni < 0 || ni > c->have_force)
        return g5_fail(fn, SAPPORO_ERR_INPUT, "ni = %d must be between 0 and the %d "
                       "i-particles of the last g5_run", ni, c->have_force);
    if (ni > 0 && (a == NULL || pot == NULL))
        return g5_fail(fn, SAPPORO_ERR_INPUT, "a and pot must not be NULL");
    memcpy(a, c->acc, sizeof(double) * 3 * (size_t)ni);
    memcpy(pot, c->pot, sizeof(double) * (size_t)ni);
    return SAPPORO_OK;
}

static int do_g5_get_force(const char *fn, int id, int ni, double *a, double *pot)
{
    int rc;
    struct g5_context *c = g5_get(fn, id, 0, &rc);
    if (c == NULL)
        return rc;
    return g5_put(c, g5_copy_out(fn, c, ni, a, pot));
}

/* g5_calculate_force_on_x[e]: set, run and read in chunks of any ni; eps2 NULL: the
 * softening of g5_set_eps_to_all. */
static int do_g5_calculate(const char *fn, int id, const double *x, const double *eps2,
                           int with_eps, double *a, double *pot, int ni)
{
    int rc;
    struct g5_context *c = g5_get(fn, id, 1, &rc);
    if (c == NULL)
        return rc;
    if (ni < 0)
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "ni = %d must be >= 0", ni));
    if (ni > 0 && (x == NULL || a == NULL || pot == NULL || (with_eps && eps2 == NULL)))
        return g5_put(c, g5_fail(fn, SAPPORO_ERR_INPUT, "x, a, p%s must not be NULL",
                                 with_eps ? " and eps2" : ""));
    for (int off = 0; off < ni; off += G5_NI_CHUNK) {
        int m = ni - off < G5_NI_CHUNK ? ni - off : G5_NI_CHUNK;
        if ((rc = g5_set_i(fn, c, m, x + 3 * (size_t)off, eps2 ? eps2 + off : NULL)) < 0
            || (rc = g5_compute(fn, c)) < 0
            || (rc = g5_copy_out(fn, c, m, a + 3 * (size_t)off, pot + off)) < 0)
            return g5_put(c, rc);
    }
    return g5_put(c, SAPPORO_OK);
}

/* Every exported call serves its call through the static functions above, its messages
 * naming it (__func__), and restores the caller's floating-point environment: those that
 * touch no context with SERVE (shim.h), under shim_lock; the others with G5_CALL, which takes
 * no lock (their contexts' locks come first).  G5_CALL returns from the calling function. */
#define G5_CALL(expr)                         \
    do {                                      \
        shim_fp fp_;                          \
        int rc_;                              \
        shim_fp_save(&fp_);                   \
        rc_ = (expr);                         \
        shim_fp_restore(&fp_);                \
        return rc_;                           \
    } while (0)

typedef double g5vec[3];

/* --------------------------------------------------------------------- GRAPE-5: C names */

EXPORT int g5_open(void) { G5_CALL(do_g5_open(__func__, 0, NULL)); }
EXPORT int g5_close(void) { G5_CALL(do_g5_close()); }
EXPORT int g5_get_number_of_pipelines(void) { G5_CALL(do_g5_pipelines()); }
EXPORT int g5_get_jmemsize(void) { G5_CALL(do_g5_jmemsize()); }
EXPORT int g5_set_eps_to_all(double eps) { G5_CALL(do_g5_set_eps_to_all(__func__, eps)); }
EXPORT int g5_set_eps2_to_all(double eps2) { G5_CALL(do_g5_set_eps2_to_all(__func__, eps2)); }
/* PG5/table keeps eta and uses it nowhere (its split is the S2 shape of SFT_FOR_PM); so here:
 * any value accepted, not used. */
EXPORT int g5_set_eta(double eta) { return SAPPORO_OK; }
EXPORT int g5_set_n(int n) { G5_CALL(do_g5_set_n(__func__, 0, n)); }
EXPORT int g5_set_nMC(int devid, int n) { G5_CALL(do_g5_set_n(__func__, devid, n)); }
EXPORT int g5_run(void) { G5_CALL(do_g5_run(__func__, 0)); }
EXPORT int g5_runMC(int devid) { G5_CALL(do_g5_run(__func__, devid)); }

EXPORT int g5_set_range(double xmin, double xmax, double mmin)
{
    return SERVE(do_g5_set_range(xmin, xmax, mmin));
}

EXPORT int g5_open_special(int ndev, int *list)
{
    G5_CALL(do_g5_open(__func__, ndev, list));
}

EXPORT int g5_set_cutoff_scale(double scale) { return SERVE(do_g5_set_cutoff_scale(scale)); }

EXPORT int g5_set_cutoff_table(double (*ffunc)(double), double fcut, double fcor,
                               double (*pfunc)(double), double pcut, double pcor)
{
    return SERVE(do_g5_set_cutoff_table());
}

EXPORT int g5_set_eps(int ni, double *eps) { G5_CALL(do_g5_set_eps(__func__, 0, ni, eps)); }

EXPORT int g5_set_epsMC(int devid, int ni, double *eps)
{
    G5_CALL(do_g5_set_eps(__func__, devid, ni, eps));
}

EXPORT int g5_set_xmj(int adr, int nj, g5vec *xj, double *mj)
{
    G5_CALL(do_g5_set_xmj(__func__, 0, adr, nj, (const double *)xj, mj, NULL, 0));
}

EXPORT int g5_set_xmjMC(int devid, int adr, int nj, g5vec *xj, double *mj)
{
    G5_CALL(do_g5_set_xmj(__func__, devid, adr, nj, (const double *)xj, mj, NULL, 0));
}

EXPORT int g5_set_jp(int adr, int nj, double *mj, g5vec *xj)
{
    G5_CALL(do_g5_set_xmj(__func__, 0, adr, nj, (const double *)xj, mj, NULL, 0));
}

EXPORT int g5_set_xj(int adr, int nj, g5vec *xj)
{
    G5_CALL(do_g5_set_half(__func__, 0, adr, nj, 1, (const double *)xj, NULL));
}

EXPORT int g5_set_mj(int adr, int nj, double *mj)
{
    G5_CALL(do_g5_set_half(__func__, 0, adr, nj, 0, NULL, mj));
}

EXPORT int g5_set_xmje(int adr, int nj, g5vec *xj, double *mj, double *epsj2)
{
    G5_CALL(do_g5_set_xmj(__func__, 0, adr, nj, (const double *)xj, mj, epsj2, 1));
}

EXPORT int g5_set_xmjeMC(int devid, int adr, int nj, g5vec *xj, double *mj, double *epsj2)
{
    G5_CALL(do_g5_set_xmj(__func__, devid, adr, nj, (const double *)xj, mj, epsj2, 1));
}

EXPORT int g5_set_xi(int ni, g5vec *xi)
{
    G5_CALL(do_g5_set_xi(__func__, 0, ni, (const double *)xi, NULL, 0));
}

EXPORT int g5_set_xiMC(int devid, int ni, g5vec *xi)
{
    G5_CALL(do_g5_set_xi(__func__, devid, ni, (const double *)xi, NULL, 0));
}

EXPORT int g5_set_xei(int ni, g5vec *xi, double *eps2)
{
    G5_CALL(do_g5_set_xi(__func__, 0, ni, (const double *)xi, eps2, 1));
}

EXPORT int g5_set_xeiMC(int devid, int ni, g5vec *xi, double *eps2)
{
    G5_CALL(do_g5_set_xi(__func__, devid, ni, (const double *)xi, eps2, 1));
}

EXPORT int g5_get_force(int ni, g5vec *a, double *pot)
{
    G5_CALL(do_g5_get_force(__func__, 0, ni, (double *)a, pot));
}

EXPORT int g5_get_forceMC(int devid, int ni, g5vec *a, double *pot)
{
    G5_CALL(do_g5_get_force(__func__, devid, ni, (double *)a, pot));
}

EXPORT int g5_calculate_force_on_x(g5vec *x, g5vec *a, double *p, int ni)
{
    G5_CALL(do_g5_calculate(__func__, 0, (const double *)x, NULL, 0, (double *)a, p, ni));
}

EXPORT int g5_calculate_force_on_xMC(int devid, g5vec *x, g5vec *a, double *p, int ni)
{
    G5_CALL(do_g5_calculate(__func__, devid, (const double *)x, NULL, 0, (double *)a, p, ni));
}

EXPORT int g5_calculate_force_on_xe(g5vec *x, double *eps2, g5vec *a, double *p, int ni)
{
    G5_CALL(do_g5_calculate(__func__, 0, (const double *)x, eps2, 1, (double *)a, p, ni));
}

EXPORT int g5_calculate_force_on_xeMC(int devid, g5vec *x, double *eps2, g5vec *a, double *p,
                                      int ni)
{
    G5_CALL(do_g5_calculate(__func__, devid, (const double *)x, eps2, 1, (double *)a, p, ni));
}

/* Groups: many interaction lists in one launch (sapporo's own calls; grape5.h) */
EXPORT int g5_start_groups(int ng, int *i_offsets, int *j_offsets, g5vec *x)
{
    G5_CALL(do_g5_start_groups(__func__, 0, ng, i_offsets, j_offsets, (const double *)x));
}

EXPORT int g5_start_groupsMC(int devid, int ng, int *i_offsets, int *j_offsets, g5vec *x)
{
    G5_CALL(do_g5_start_groups(__func__, devid, ng, i_offsets, j_offsets, (const double *)x));
}

EXPORT int g5_get_groups_force(g5vec *a, double *p)
{
    G5_CALL(do_g5_get_groups_force(__func__, 0, (double *)a, p));
}

EXPORT int g5_get_groups_forceMC(int devid, g5vec *a, double *p)
{
    G5_CALL(do_g5_get_groups_force(__func__, devid, (double *)a, p));
}

EXPORT int g5_calculate_force_on_groups(int ng, int *i_offsets, int *j_offsets, g5vec *x,
                                        g5vec *a, double *p)
{
    G5_CALL(do_g5_groups(__func__, 0, ng, i_offsets, j_offsets, (const double *)x,
                         (double *)a, p));
}

EXPORT int g5_calculate_force_on_groupsMC(int devid, int ng, int *i_offsets, int *j_offsets,
                                          g5vec *x, g5vec *a, double *p)
{
    G5_CALL(do_g5_groups(__func__, devid, ng, i_offsets, j_offsets, (const double *)x,
                         (double *)a, p));
}

/* --------------------------------------------------------------- GRAPE-5: Fortran names */

/* G5_CALL for a Fortran name: a NULL among its scalars (in parentheses; a C caller's
 * mistake, see NULL_SCALARS in shim.h) is refused naming it, before anything reads it. */
#define G5_CALL_REFS(scalars, expr) \
    G5_CALL(SERVE(NULL_SCALARS scalars) < 0 ? SAPPORO_ERR_INPUT : (expr))

EXPORT int g5_open_(void) { G5_CALL(do_g5_open(__func__, 0, NULL)); }
EXPORT int g5_close_(void) { G5_CALL(do_g5_close()); }
EXPORT int g5_get_number_of_pipelines_(void) { G5_CALL(do_g5_pipelines()); }
EXPORT int g5_get_jmemsize_(void) { G5_CALL(do_g5_jmemsize()); }
EXPORT int g5_run_(void) { G5_CALL(do_g5_run(__func__, 0)); }

EXPORT int g5_set_eps_to_all_(double *eps)
{
    G5_CALL_REFS((eps), do_g5_set_eps_to_all(__func__, *eps));
}

EXPORT int g5_set_eps2_to_all_(double *eps2)
{
    G5_CALL_REFS((eps2), do_g5_set_eps2_to_all(__func__, *eps2));
}

EXPORT int g5_set_range_(double *xmin, double *xmax, double *mmin)
{
    return SERVE_REFS((xmin, xmax, mmin), do_g5_set_range(*xmin, *xmax, *mmin));
}

EXPORT int g5_open_special_(int *ndev, int *list)
{
    G5_CALL_REFS((ndev), do_g5_open(__func__, *ndev, list));
}

EXPORT int g5_set_cutoff_scale_(double *scale)
{
    return SERVE_REFS((scale), do_g5_set_cutoff_scale(*scale));
}

EXPORT int g5_set_eta_(double *eta) { G5_CALL_REFS((eta), SAPPORO_OK); }

EXPORT int g5_set_cutoff_table_(double (*ffunc)(double *), double *fcut, double *fcor,
                                double (*pfunc)(double *), double *pcut, double *pcor)
{
    return SERVE_REFS((fcut, fcor, pcut, pcor), do_g5_set_cutoff_table());
}

EXPORT int g5_set_eps_(int *ni, double *eps)
{
    G5_CALL_REFS((ni), do_g5_set_eps(__func__, 0, *ni, eps));
}

EXPORT int g5_set_epsMC_(int *devid, int *ni, double *eps)
{
    G5_CALL_REFS((devid, ni), do_g5_set_eps(__func__, *devid, *ni, eps));
}

EXPORT int g5_set_n_(int *n) { G5_CALL_REFS((n), do_g5_set_n(__func__, 0, *n)); }

EXPORT int g5_set_nMC_(int *devid, int *n)
{
    G5_CALL_REFS((devid, n), do_g5_set_n(__func__, *devid, *n));
}

EXPORT int g5_set_xmj_(int *adr, int *nj, g5vec *xj, double *mj)
{
    G5_CALL_REFS((adr, nj),
                 do_g5_set_xmj(__func__, 0, *adr, *nj, (const double *)xj, mj, NULL, 0));
}

EXPORT int g5_set_xmjMC_(int *devid, int *adr, int *nj, g5vec *xj, double *mj)
{
    G5_CALL_REFS((devid, adr, nj),
                 do_g5_set_xmj(__func__, *devid, *adr, *nj, (const double *)xj, mj, NULL, 0));
}

EXPORT int g5_set_jp_(int *adr, int *nj, double *mj, g5vec *xj)
{
    G5_CALL_REFS((adr, nj),
                 do_g5_set_xmj(__func__, 0, *adr, *nj, (const double *)xj, mj, NULL, 0));
}

EXPORT int g5_set_xj_(int *adr, int *nj, g5vec *xj)
{
    G5_CALL_REFS((adr, nj), do_g5_set_half(__func__, 0, *adr, *nj, 1, (const double *)xj, NULL));
}

EXPORT int g5_set_mj_(int *adr, int *nj, double *mj)
{
    G5_CALL_REFS((adr, nj), do_g5_set_half(__func__, 0, *adr, *nj, 0, NULL, mj));
}

EXPORT int g5_set_xmje_(int *adr, int *nj, g5vec *xj, double *mj, double *epsj2)
{
    G5_CALL_REFS((adr, nj),
                 do_g5_set_xmj(__func__, 0, *adr, *nj, (const double *)xj, mj, epsj2, 1));
}

EXPORT int g5_set_xmjeMC_(int *devid, int *adr, int *nj, g5vec *xj, double *mj,
                          double *epsj2)
{
    G5_CALL_REFS((devid, adr, nj),
                 do_g5_set_xmj(__func__, *devid, *adr, *nj, (const double *)xj, mj, epsj2, 1));
}

EXPORT int g5_set_xi_(int *ni, g5vec *xi)
{
    G5_CALL_REFS((ni), do_g5_set_xi(__func__, 0, *ni, (const double *)xi, NULL, 0));
}

EXPORT int g5_set_xiMC_(int *devid, int *ni, g5vec *xi)
{
    G5_CALL_REFS((devid, ni), do_g5_set_xi(__func__, *devid, *ni, (const double *)xi, NULL, 0));
}

EXPORT int g5_set_xei_(int *ni, g5vec *xi, double *eps2)
{
    G5_CALL_REFS((ni), do_g5_set_xi(__func__, 0, *ni, (const double *)xi, eps2, 1));
}

EXPORT int g5_set_xeiMC_(int *devid, int *ni, g5vec *xi, double *eps2)
{
    G5_CALL_REFS((devid, ni), do_g5_set_xi(__func__, *devid, *ni, (const double *)xi, eps2, 1));
}

EXPORT int g5_runMC_(int *devid) { G5_CALL_REFS((devid), do_g5_run(__func__, *devid)); }

EXPORT int g5_get_force_(int *ni, g5vec *a, double *pot)
{
    G5_CALL_REFS((ni), do_g5_get_force(__func__, 0, *ni, (double *)a, pot));
}

EXPORT int g5_get_forceMC_(int *devid, int *ni, g5vec *a, double *pot)
{
    G5_CALL_REFS((devid, ni), do_g5_get_force(__func__, *devid, *ni, (double *)a, pot));
}

EXPORT int g5_calculate_force_on_x_(g5vec *x, g5vec *a, double *p, int *ni)
{
    G5_CALL_REFS((ni),
                 do_g5_calculate(__func__, 0, (const double *)x, NULL, 0, (double *)a, p, *ni));
}

EXPORT int g5_calculate_force_on_xMC_(int *devid, g5vec *x, g5vec *a, double *p, int *ni)
{
    G5_CALL_REFS((devid, ni), do_g5_calculate(__func__, *devid, (const double *)x, NULL, 0,
                                              (double *)a, p, *ni));
}

EXPORT int g5_calculate_force_on_xe_(g5vec *x, double *eps2, g5vec *a, double *p, int *ni)
{
    G5_CALL_REFS((ni),
                 do_g5_calculate(__func__, 0, (const double *)x, eps2, 1, (double *)a, p, *ni));
}

EXPORT int g5_calculate_force_on_xeMC_(int *devid, g5vec *x, double *eps2, g5vec *a,
                                       double *p, int *ni)
{
    G5_CALL_REFS((devid, ni), do_g5_calculate(__func__, *devid, (const double *)x, eps2, 1,
                                              (double *)a, p, *ni));
}

EXPORT int g5_start_groups_(int *ng, int *i_offsets, int *j_offsets, g5vec *x)
{
    G5_CALL_REFS((ng), do_g5_start_groups(__func__, 0, *ng, i_offsets, j_offsets,
                                          (const double *)x));
}

EXPORT int g5_start_groupsMC_(int *devid, int *ng, int *i_offsets, int *j_offsets, g5vec *x)
{
    G5_CALL_REFS((devid, ng), do_g5_start_groups(__func__, *devid, *ng, i_offsets, j_offsets,
                                                 (const double *)x));
}

EXPORT int g5_get_groups_force_(g5vec *a, double *p)
{
    G5_CALL(do_g5_get_groups_force(__func__, 0, (double *)a, p));
}

EXPORT int g5_get_groups_forceMC_(int *devid, g5vec *a, double *p)
{
    G5_CALL_REFS((devid), do_g5_get_groups_force(__func__, *devid, (double *)a, p));
}

EXPORT int g5_calculate_force_on_groups_(int *ng, int *i_offsets, int *j_offsets, g5vec *x,
                                         g5vec *a, double *p)
{
    G5_CALL_REFS((ng), do_g5_groups(__func__, 0, *ng, i_offsets, j_offsets, (const double *)x,
                                    (double *)a, p));
}

EXPORT int g5_calculate_force_on_groupsMC_(int *devid, int *ng, int *i_offsets, int *j_offsets,
                                           g5vec *x, g5vec *a, double *p)
{
    G5_CALL_REFS((devid, ng), do_g5_groups(__func__, *devid, *ng, i_offsets, j_offsets,
                                           (const double *)x, (double *)a, p));
}

/* gfortran folds names to lower case: `call g5_set_xmjMC(...)` calls g5_set_xmjmc_, which
 * PG5 does not define (its g5_set_xmjMC_ is reached from C, or through bind(C)).  Both
 * names are exported here. */
#define G5_LOWER(lower, upper, params) \
    EXPORT int lower params __attribute__((alias(#upper)))

G5_LOWER(g5_set_epsmc_, g5_set_epsMC_, (int *devid, int *ni, double *eps));
G5_LOWER(g5_set_nmc_, g5_set_nMC_, (int *devid, int *n));
G5_LOWER(g5_set_xmjmc_, g5_set_xmjMC_, (int *devid, int *adr, int *nj, g5vec *xj, double *mj));
G5_LOWER(g5_set_xmjemc_, g5_set_xmjeMC_,
         (int *devid, int *adr, int *nj, g5vec *xj, double *mj, double *epsj2));
G5_LOWER(g5_set_ximc_, g5_set_xiMC_, (int *devid, int *ni, g5vec *xi));
G5_LOWER(g5_set_xeimc_, g5_set_xeiMC_, (int *devid, int *ni, g5vec *xi, double *eps2));
G5_LOWER(g5_runmc_, g5_runMC_, (int *devid));
G5_LOWER(g5_get_forcemc_, g5_get_forceMC_, (int *devid, int *ni, g5vec *a, double *pot));
G5_LOWER(g5_calculate_force_on_xmc_, g5_calculate_force_on_xMC_,
         (int *devid, g5vec *x, g5vec *a, double *p, int *ni));
G5_LOWER(g5_calculate_force_on_xemc_, g5_calculate_force_on_xeMC_,
         (int *devid, g5vec *x, double *eps2, g5vec *a, double *p, int *ni));
G5_LOWER(g5_start_groupsmc_, g5_start_groupsMC_,
         (int *devid, int *ng, int *i_offsets, int *j_offsets, g5vec *x));
G5_LOWER(g5_get_groups_forcemc_, g5_get_groups_forceMC_, (int *devid, g5vec *a, double *p));
G5_LOWER(g5_calculate_force_on_groupsmc_, g5_calculate_force_on_groupsMC_,
         (int *devid, int *ng, int *i_offsets, int *j_offsets, g5vec *x, g5vec *a, double *p));
