/*
 * warm.c -- g6_open without Python, from what an earlier run left (included by shim.c).
 *
 * Starting the embedded interpreter, NumPy and PyOpenCL takes 0.2-0.3 s, which is most of a
 * short GRAPE-6 job's run.  When a run's force calls went the direct path (direct.c), its
 * g6_close has Python write a recipe: the OpenCL objects behind the plans (platform and
 * devices by name, queues, kernel binaries, buffers and the host memory they compute on)
 * and the plans themselves with their handles and addresses as references to those
 * objects.  The next g6_open with the same settings -- the same open arguments, SAPPORO_*,
 * PoCL and OpenCL environment variables, CPU, library files, sapporo files and tuning
 * profiles (the recipe's fingerprint and file list, checked here) -- builds those objects
 * itself and serves j-particles, g6_set_ti and force calls in C.  What the recipe does not
 * cover (another block shape, an address beyond the recorded ones, an error to diagnose,
 * any other call that needs the library) hands over to Python: started then, the library
 * opened with the same arguments, the j-particles stored so far replayed, the call served
 * Python's way.  The results are those of a run that started Python: the same kernels,
 * launches and combination of parts.
 *
 * SAPPORO_CAPI_WARM=0 turns this off (nothing read, nothing written).  Recipes live in
 * SAPPORO_KERNEL_CACHE/warm, else $XDG_CACHE_HOME (or ~/.cache)/sapporo/capi-warm, one per
 * fingerprint and number of j-addresses: warm-<hash>-<n>.rec, and their kernel binaries.
 * An open makes the objects of the most recent recipe of its fingerprint; the first force
 * call changes to the recipe of its number of j-addresses when that is another.
 */
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

extern char **environ;

#define WARM_FORMAT 1
#define WARM_MAX_DEVICES 2
#define WARM_FN_NAMES 6
#define NI_LIMIT_WARM 65536   /* the largest block a recipe may name */

typedef void *(*wcl_create_context_fn)(const intptr_t *props, uint32_t n, void *const *devices,
                                       void *notify, void *user, dcl_int *err);
typedef void *(*wcl_create_queue_fn)(void *ctx, void *device, uint64_t props, dcl_int *err);
typedef void *(*wcl_create_buffer_fn)(void *ctx, uint64_t flags, size_t size, void *host,
                                      dcl_int *err);
typedef void *(*wcl_program_binary_fn)(void *ctx, uint32_t n, void *const *devices,
                                       const size_t *lengths, const unsigned char **binaries,
                                       dcl_int *status, dcl_int *err);
typedef dcl_int (*wcl_build_fn)(void *program, uint32_t n, void *const *devices,
                                const char *options, void *notify, void *user);
typedef void *(*wcl_create_kernel_fn)(void *program, const char *name, dcl_int *err);
typedef dcl_int (*wcl_platforms_fn)(uint32_t n, void **platforms, uint32_t *n_ret);
typedef dcl_int (*wcl_info_fn)(void *object, uint32_t param, size_t size, void *value,
                               size_t *size_ret);
typedef dcl_int (*wcl_devices_fn)(void *platform, uint64_t type, uint32_t n, void **devices,
                                  uint32_t *n_ret);
typedef dcl_int (*wcl_release_fn)(void *object);

#define WCL_PLATFORM_VERSION 0x0901
#define WCL_PLATFORM_NAME 0x0902
#define WCL_DEVICE_NAME 0x102B
#define WCL_DEVICE_TYPE_ALL 0xFFFFFFFFull
#define WCL_MEM_COPY_HOST_PTR 32u

/* the entry points a plan names (f0 ... f5 in a recipe), in the order of the DP_FN_* words */
static const char *const warm_fn_names[WARM_FN_NAMES] = {
    "clSetKernelArg", "clEnqueueNDRangeKernel", "clFlush", "clFinish", "clGetEventInfo",
    "clReleaseEvent"};
static const int warm_fn_words[WARM_FN_NAMES] = {
    DP_FN_SET_ARG, DP_FN_ENQUEUE, DP_FN_FLUSH, DP_FN_FINISH, DP_FN_EVENT_INFO, DP_FN_RELEASE};

struct wmem {
    void *p;
    size_t bytes;
};

/* a plan of the recipe, for the block sizes lo ... hi */
struct wplan {
    struct dplan p;
    int lo, hi;
};

static struct {
    int active;             /* this open runs without Python */
    int record;             /* this open started Python: write a recipe at g6_close */
    long calls0;            /* direct.calls when the library opened */
    long starts;            /* opens served here, over the process */
    char *fingerprint;      /* what a recipe must have been made under (NULL: no recipes) */
    char path[4096];        /* this fingerprint's recipes: <path>-<n>.rec for n j-addresses */
    /* the open's arguments, for a hand-over */
    int order, ndev, devices[64];
    char precision[64], backend[64];
    int has_precision, has_backend;
    /* OpenCL objects made here */
    void *dl, *ctx, *dev[WARM_MAX_DEVICES], *queue[WARM_MAX_DEVICES];
    int ndevice, nqueue, nmem, nbuf, nprog, nkern;
    struct wmem *mem;
    void **buf, **prog, **kern;
    struct wplan *plans;
    int nplans;
    wcl_release_fn release_kernel, release_program, release_mem, release_queue,
        release_context;
    dcl_queue_fn finish;
    /* the library's state, as Python would keep it */
    int limit;              /* addresses [0, limit) may be stored here */
    int n_stored, pred_terms, raw_n, ds, npipes, max_address, device_count;
    double *mirror_raw;
    int64_t *mirror_ids;
    double *dev_raw;
    int32_t *dev_ids;
    char version[64];
} warm;

/* SAPPORO_CAPI_WARM_TRACE=1: why an open started Python, on stderr */
static void warm_trace(const char *fmt, ...)
{
    va_list ap;
    const char *v = getenv("SAPPORO_CAPI_WARM_TRACE");
    if (v == NULL || *v == '\0' || !strcmp(v, "0"))
        return;
    fprintf(stderr, "sapporo: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n");
}

/* 64-bit FNV-1a of n bytes: a fingerprint's file name, a recipe's checksum (capi/warm.py's
 * checksum computes the same). */
static uint64_t fnv1a(const char *s, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    for (size_t k = 0; k < n; k++)
        h = (h ^ (unsigned char)s[k]) * 1099511628211ull;
    return h;
}

/* ------------------------------------------------------------------- the fingerprint */

static int warm_env_name(const char *entry)
{
    static const char *const prefixes[] = {"SAPPORO_", "POCL_", "OCL_", "PYOPENCL_", "CUDA_"};
    static const char *const names[] = {
        "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "XDG_DATA_HOME", "PYTHONPATH",
        "PYTHONHOME", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE",
        "MV2_COMM_WORLD_SIZE", "MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK",
        "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
    size_t len = strcspn(entry, "=");
    if (strncmp(entry, "SAPPORO_CAPI_WARM", 17) == 0)
        return 0;  /* read here only; not what a recipe depends on */
    for (size_t k = 0; k < sizeof prefixes / sizeof *prefixes; k++)
        if (strncmp(entry, prefixes[k], strlen(prefixes[k])) == 0)
            return 1;
    for (size_t k = 0; k < sizeof names / sizeof *names; k++)
        if (strlen(names[k]) == len && strncmp(entry, names[k], len) == 0)
            return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

struct wtext {
    char *s;
    size_t n, cap;
};

static int wt_add(struct wtext *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        size_t cap = t->cap ? 2 * t->cap : 4096;
        char *q;
        while (cap < t->n + n + 1)
            cap *= 2;
        if ((q = realloc(t->s, cap)) == NULL)
            return -1;
        t->s = q;
        t->cap = cap;
    }
    memcpy(t->s + t->n, s, n);
    t->n += n;
    t->s[t->n] = '\0';
    return 0;
}

static int wt_printf(struct wtext *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof buf)
        return -1;
    return wt_add(t, buf, (size_t)n);
}

/* This processor, as sapporo's kernel cache keys name it (the first processor's vendor,
 * family, model, name and flags in /proc/cpuinfo). */
static int warm_cpu(struct wtext *t)
{
    static const char *const keys[] = {"vendor_id", "cpu family", "model", "model name",
                                       "flags"};
    char line[8192];
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return wt_printf(t, "cpu ?\n");
    while (fgets(line, sizeof line, f) != NULL) {
        size_t key = strcspn(line, ":");
        size_t klen = key;
        if (line[0] == '\n')
            break;
        while (klen > 0 && (line[klen - 1] == ' ' || line[klen - 1] == '\t'))
            klen--;
        for (size_t k = 0; k < sizeof keys / sizeof *keys; k++)
            if (strlen(keys[k]) == klen && strncmp(line, keys[k], klen) == 0
                && (wt_printf(t, "cpu ") < 0 || wt_add(t, line, strlen(line)) < 0)) {
                fclose(f);
                return -1;
            }
    }
    fclose(f);
    return 0;
}

/* The cores this process may run on, and how many the machine has: sapporo pins PoCL's
 * workers only when they are all of them. */
static int warm_affinity(struct wtext *t)
{
    cpu_set_t set;
    if (wt_printf(t, "cores %ld affinity", sysconf(_SC_NPROCESSORS_ONLN)) < 0)
        return -1;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        for (int c = 0; c < CPU_SETSIZE; c++)
            if (CPU_ISSET(c, &set) && wt_printf(t, " %d", c) < 0)
                return -1;
    }
    return wt_add(t, "\n", 1);
}

/* Where recipes live; 0, or -1 when none are kept. */
static int warm_dir(char *out, size_t size)
{
    const char *v = getenv("SAPPORO_KERNEL_CACHE"), *base;
    int n;
    if (v != NULL && *v != '\0') {
        if (!strcasecmp(v, "0") || !strcasecmp(v, "off") || !strcasecmp(v, "no")
            || !strcasecmp(v, "false"))
            return -1;
        n = snprintf(out, size, "%s/warm", v);
    }
    else if ((base = getenv("XDG_CACHE_HOME")) != NULL && base[0] == '/')
        n = snprintf(out, size, "%s/sapporo/capi-warm", base);
    else if ((base = getenv("HOME")) != NULL && *base != '\0')
        n = snprintf(out, size, "%s/.cache/sapporo/capi-warm", base);
    else
        return -1;
    return n > 0 && (size_t)n < size ? 0 : -1;
}

/* The fingerprint of this open and its recipe's path (warm.fingerprint, warm.path); 0, or -1
 * when warm starts are off (SAPPORO_CAPI_WARM=0, no cache folder, an odd environment). */
static int warm_slot(int order, const char *precision, const char *backend, int ndev,
                     const int *devices)
{
    const char *off = getenv("SAPPORO_CAPI_WARM");
    char dir[3072];
    struct wtext t = {0};
    Dl_info self;
    struct stat st;
    const char **env = NULL;
    size_t nenv = 0, cap = 0;
    uint64_t h;
    free(warm.fingerprint);
    warm.fingerprint = NULL;
    warm.path[0] = '\0';
    if (off != NULL && (!strcasecmp(off, "0") || !strcasecmp(off, "off")
                        || !strcasecmp(off, "no") || !strcasecmp(off, "false")))
        return -1;
    if (warm_dir(dir, sizeof dir) < 0 || ndev < -64 || ndev > 64
        || dladdr((void *)&warm_slot, &self) == 0 || self.dli_fname == NULL
        || stat(self.dli_fname, &st) != 0)
        return -1;
    if (wt_printf(&t, "format %d\nlib %s %lld %lld\nopen %d %s %s %d", WARM_FORMAT,
                  self.dli_fname, (long long)st.st_size,
                  (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec, order,
                  precision ? precision : "-", backend ? backend : "-", ndev) < 0)
        goto fail;
    for (int k = 0; k < ndev; k++)
        if (wt_printf(&t, " %d", devices[k]) < 0)
            goto fail;
    if (wt_add(&t, "\n", 1) < 0 || warm_cpu(&t) < 0 || warm_affinity(&t) < 0)
        goto fail;
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (!warm_env_name(*e))
            continue;
        if (strchr(*e, '\n') != NULL)
            goto fail;  /* a value the recipe's lines cannot hold */
        if (nenv == cap && grow_array((void **)&env, sizeof *env,
                                      (int)(cap = cap ? 2 * cap : 64)) < 0)
            goto fail;
        env[nenv++] = *e;
    }
    if (nenv > 0)
        qsort(env, nenv, sizeof *env, cmp_str);
    for (size_t k = 0; k < nenv; k++)
        if (wt_printf(&t, "env ") < 0 || wt_add(&t, env[k], strlen(env[k])) < 0
            || wt_add(&t, "\n", 1) < 0)
            goto fail;
    free(env);
    h = fnv1a(t.s, t.n);
    /* one recipe per number of j-addresses: <stem>-<n>.rec */
    if (snprintf(warm.path, sizeof warm.path, "%s/warm-%016llx", dir,
                 (unsigned long long)h) >= (int)sizeof warm.path - 16) {
        warm.path[0] = '\0';
        free(t.s);
        return -1;
    }
    warm.fingerprint = t.s;
    return 0;
fail:
    free(env);
    free(t.s);
    return -1;
}

/* ------------------------------------------------------------------- reading a recipe */

static int hexval(int c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* A hex-encoded token decoded into a new string ("-": empty; NULL when it is not hex). */
static char *unhex(const char *s)
{
    size_t n = strlen(s);
    char *out;
    if (!strcmp(s, "-"))
        return strdup("");
    if (n % 2 != 0 || (out = malloc(n / 2 + 1)) == NULL)
        return NULL;
    for (size_t k = 0; k < n / 2; k++) {
        int hi = hexval(s[2 * k]), lo = hexval(s[2 * k + 1]);
        if (hi < 0 || lo < 0) {
            free(out);
            return NULL;
        }
        out[k] = (char)(hi * 16 + lo);
    }
    out[n / 2] = '\0';
    return out;
}

/* Split a line into its space-separated tokens, in place: how many (max + 1 when more). */
static int split(char *line, char **tok, int max)
{
    char *save = NULL, *t;
    int n = 0;
    for (t = strtok_r(line, " ", &save); t != NULL; t = strtok_r(NULL, " ", &save)) {
        if (n == max)
            return max + 1;
        tok[n++] = t;
    }
    return n;
}

/* A whole token as a decimal integer; 0, or -1. */
static int num(const char *t, long long *out)
{
    char *end;
    errno = 0;
    *out = strtoll(t, &end, 10);
    return end != t && *end == '\0' && errno == 0 ? 0 : -1;
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    long n;
    if (f == NULL)
        return NULL;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0
        && (buf = malloc((size_t)n + 1)) != NULL) {
        if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
            free(buf);
            buf = NULL;
        }
        else {
            buf[n] = '\0';
            if (len != NULL)
                *len = (size_t)n;
        }
    }
    fclose(f);
    return buf;
}

/* A file of the recipe's list as it was: the same size and modification time, or still
 * absent (size -1).  Relative paths are the working folder's (sapporo2.config). */
static int warm_file_same(const char *hexpath, long long size, long long mtime)
{
    struct stat st;
    char *path = unhex(hexpath);
    int rc;
    if (path == NULL)
        return 0;
    rc = stat(path, &st);
    free(path);
    if (size < 0)
        return rc != 0 && errno == ENOENT;
    return rc == 0 && (long long)st.st_size == size
           && (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec == mtime;
}

static void *warm_sym(const char *name)
{
    return warm.dl != NULL ? dlsym(warm.dl, name) : NULL;
}

/* Free what was made (queues finished first); the ICD loader stays loaded. */
static void warm_release(void)
{
    for (int q = 0; q < warm.nqueue; q++)
        if (warm.queue[q] != NULL && warm.finish != NULL)
            warm.finish(warm.queue[q]);
    for (int k = 0; k < warm.nkern; k++)
        if (warm.kern[k] != NULL)
            warm.release_kernel(warm.kern[k]);
    for (int k = 0; k < warm.nprog; k++)
        if (warm.prog[k] != NULL)
            warm.release_program(warm.prog[k]);
    for (int k = 0; k < warm.nbuf; k++)
        if (warm.buf[k] != NULL)
            warm.release_mem(warm.buf[k]);
    for (int q = 0; q < warm.nqueue; q++)
        if (warm.queue[q] != NULL)
            warm.release_queue(warm.queue[q]);
    if (warm.ctx != NULL)
        warm.release_context(warm.ctx);
    for (int m = 0; m < warm.nmem; m++)
        free(warm.mem[m].p);
    free(warm.mem);
    free(warm.buf);
    free(warm.prog);
    free(warm.kern);
    free(warm.plans);
    warm.plans = NULL;
    warm.nplans = 0;
    warm.mem = NULL;
    warm.buf = warm.prog = warm.kern = NULL;
    warm.ctx = NULL;
    warm.nqueue = warm.nmem = warm.nbuf = warm.nprog = warm.nkern = warm.ndevice = 0;
    warm.mirror_raw = warm.dev_raw = NULL;
    warm.mirror_ids = NULL;
    warm.dev_ids = NULL;
    warm.active = 0;
}

/* One word of a plan line: a number, or a reference to an object made here. */
static int warm_word(const char *tok, int64_t *out)
{
    char *end;
    long long k = 0, off = 0;
    if (tok[0] == '-' || (tok[0] >= '0' && tok[0] <= '9')) {
        *out = strtoll(tok, &end, 10);
        return *end == '\0' ? 0 : -1;
    }
    if (tok[0] == '\0' || tok[1] < '0' || tok[1] > '9')
        return -1;
    k = strtoll(tok + 1, &end, 10);
    if (tok[0] == 'm' && *end == '+')
        off = strtoll(end + 1, &end, 10);
    if (*end != '\0' || k < 0)
        return -1;
    switch (tok[0]) {
    case 'm':
        if (k >= warm.nmem || off < 0 || (size_t)off > warm.mem[k].bytes)
            return -1;
        *out = (int64_t)(intptr_t)((char *)warm.mem[k].p + off);
        return 0;
    case 'b':
        if (k >= warm.nbuf)
            return -1;
        *out = (int64_t)(intptr_t)warm.buf[k];
        return 0;
    case 'k':
        if (k >= warm.nkern)
            return -1;
        *out = (int64_t)(intptr_t)warm.kern[k];
        return 0;
    case 'q':
        if (k >= warm.nqueue)
            return -1;
        *out = (int64_t)(intptr_t)warm.queue[k];
        return 0;
    case 'f':
        if (k >= WARM_FN_NAMES || (*out = (int64_t)(intptr_t)warm_sym(warm_fn_names[k])) == 0)
            return -1;
        return 0;
    default:
        return -1;
    }
}

/* Whether a plan word's token is of the kind its place holds: host addresses are
 * memory references ('m'; the neighbour-list ones may be 0), entry points 'f' (the right
 * one), queues 'q', kernels 'k', a launch's argument value a number or a buffer 'b';
 * every other word a number.  0, or -1. */
static int warm_word_kind(int k, const char *tok)
{
    int num = tok[0] == '-' || (tok[0] >= '0' && tok[0] <= '9');
    if (k == DP_IDATA || k == DP_OUT || k == DP_MIRROR_RAW || k == DP_MIRROR_IDS
        || k == DP_DEV_RAW || k == DP_DEV_IDS)
        return tok[0] == 'm' ? 0 : -1;
    if (k == DP_NB_COUNTS || k == DP_NB_LISTS)
        return tok[0] == 'm' || !strcmp(tok, "0") ? 0 : -1;
    for (int f = 0; f < WARM_FN_NAMES; f++)
        if (k == warm_fn_words[f])
            return tok[0] == 'f' && atoi(tok + 1) == f ? 0 : -1;
    if (k >= DP_LAUNCHES) {
        int o = (k - DP_LAUNCHES) % DP_LAUNCH_WORDS;
        if (o == DL_QUEUE)
            return tok[0] == 'q' ? 0 : -1;
        if (o == DL_KERNEL)
            return tok[0] == 'k' ? 0 : -1;
        if (o >= DL_ARGS && (o - DL_ARGS) % 2 == 1)
            return num || tok[0] == 'b' ? 0 : -1;
    }
    return num ? 0 : -1;
}

/* Whether [p, p + bytes) lies in one memory block made here. */
static int warm_in_mem(const void *p, size_t bytes)
{
    for (int m = 0; m < warm.nmem; m++) {
        const char *b = warm.mem[m].p;
        if ((const char *)p >= b && (const char *)p + bytes <= b + warm.mem[m].bytes)
            return 1;
    }
    return 0;
}

static int warm_plan_line(char *rest)
{
    int64_t w[DP_WORDS];
    int nj, lo, hi, lists, n = 0;
    char *save = NULL, *tok;
    struct dplan *p;
    if (sscanf(rest, "%d %d %d %d", &nj, &lo, &hi, &lists) != 4 || lists < 0 || lists > 1
        || lo < 1 || hi < lo || hi > NI_LIMIT_WARM || nj < 1)
        return -1;
    for (tok = strtok_r(rest, " ", &save); tok != NULL; tok = strtok_r(NULL, " ", &save)) {
        if (n >= 4 + DP_WORDS
            || (n >= 4 && (warm_word_kind(n - 4, tok) < 0 || warm_word(tok, &w[n - 4]) < 0)))
            return -1;
        n++;
    }
    if (n != 4 + DP_WORDS || w[DP_STATUS] != 1
        || grow_array((void **)&warm.plans, sizeof *warm.plans, warm.nplans + 1) < 0)
        return -1;
    p = &warm.plans[warm.nplans].p;
    warm.plans[warm.nplans].lo = lo;
    warm.plans[warm.nplans].hi = hi;
    if (plan_unpack(p, w, nj, lo, lists) < 0 || w[DP_NI_LO] != lo || w[DP_NI_HI] != hi)
        return -1;
    warm.nplans++;
    /* every plan computes on the same records */
    if (warm.mirror_raw == NULL) {
        warm.mirror_raw = p->mirror_raw;
        warm.mirror_ids = p->mirror_ids;
        warm.dev_raw = p->dev_raw;
        warm.dev_ids = p->dev_ids;
        warm.raw_n = p->raw_n;
        warm.ds = p->ds;
    }
    if (p->mirror_raw != warm.mirror_raw || p->mirror_ids != warm.mirror_ids
        || p->dev_raw != warm.dev_raw || p->dev_ids != warm.dev_ids || p->raw_n != warm.raw_n
        || p->ds != warm.ds || p->n_stored > warm.limit)
        return -1;
    return 0;
}

/* Make an object of a recipe line (its tag and the rest of the line); 0, or -1. */
static int warm_line(const char *tag, char *rest)
{
    dcl_int err = 0;
    char a[4096], b[4096], *tok[6];
    long long x, y, z, v[5];
    int k, m;
    if (!strcmp(tag, "opencl")) {
        char *path;
        if (split(rest, tok, 1) != 1 || (path = unhex(tok[0])) == NULL)
            return -1;
        warm.dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        free(path);
        if (warm.dl == NULL)
            return -1;
        warm.release_kernel = (wcl_release_fn)warm_sym("clReleaseKernel");
        warm.release_program = (wcl_release_fn)warm_sym("clReleaseProgram");
        warm.release_mem = (wcl_release_fn)warm_sym("clReleaseMemObject");
        warm.release_queue = (wcl_release_fn)warm_sym("clReleaseCommandQueue");
        warm.release_context = (wcl_release_fn)warm_sym("clReleaseContext");
        warm.finish = (dcl_queue_fn)warm_sym("clFinish");
        return warm.release_kernel && warm.release_program && warm.release_mem
                       && warm.release_queue && warm.release_context && warm.finish
                   ? 0 : -1;
    }
    if (!strcmp(tag, "devices")) {  /* platform name, version, then the device names */
        wcl_platforms_fn platforms = (wcl_platforms_fn)warm_sym("clGetPlatformIDs");
        wcl_info_fn pinfo = (wcl_info_fn)warm_sym("clGetPlatformInfo");
        wcl_info_fn dinfo = (wcl_info_fn)warm_sym("clGetDeviceInfo");
        wcl_devices_fn devices = (wcl_devices_fn)warm_sym("clGetDeviceIDs");
        wcl_create_context_fn create = (wcl_create_context_fn)warm_sym("clCreateContext");
        void *plat[16], *devs[64], *found = NULL;
        char *want[2 + WARM_MAX_DEVICES] = {NULL};
        char *save = NULL, *tok;
        uint32_t np = 0, nd = 0;
        int nw = 0, rc = -1;
        if (!platforms || !pinfo || !dinfo || !devices || !create)
            return -1;
        for (tok = strtok_r(rest, " ", &save); tok != NULL && nw < 2 + WARM_MAX_DEVICES;
             tok = strtok_r(NULL, " ", &save))
            if ((want[nw++] = unhex(tok)) == NULL)
                goto devices_done;
        if (nw < 3 || tok != NULL || platforms(16, plat, &np) != 0)
            goto devices_done;
        for (uint32_t q = 0; q < np && q < 16 && found == NULL; q++)
            if (pinfo(plat[q], WCL_PLATFORM_NAME, sizeof a, a, NULL) == 0
                && pinfo(plat[q], WCL_PLATFORM_VERSION, sizeof b, b, NULL) == 0
                && !strcmp(a, want[0]) && !strcmp(b, want[1]))
                found = plat[q];
        if (found == NULL || devices(found, WCL_DEVICE_TYPE_ALL, 64, devs, &nd) != 0)
            goto devices_done;
        warm.ndevice = nw - 2;
        for (int d = 0; d < warm.ndevice; d++) {
            warm.dev[d] = NULL;
            for (uint32_t q = 0; q < nd && q < 64 && warm.dev[d] == NULL; q++) {
                int taken = 0;
                for (int e = 0; e < d; e++)
                    taken |= warm.dev[e] == devs[q];
                if (!taken && dinfo(devs[q], WCL_DEVICE_NAME, sizeof a, a, NULL) == 0
                    && !strcmp(a, want[2 + d]))
                    warm.dev[d] = devs[q];
            }
            if (warm.dev[d] == NULL)
                goto devices_done;
        }
        warm.ctx = create(NULL, (uint32_t)warm.ndevice, warm.dev, NULL, NULL, &err);
        rc = warm.ctx != NULL && err == 0 ? 0 : -1;
    devices_done:
        for (int q = 0; q < nw; q++)
            free(want[q]);
        return rc;
    }
    if (!strcmp(tag, "queue")) {
        wcl_create_queue_fn create = (wcl_create_queue_fn)warm_sym("clCreateCommandQueue");
        if (create == NULL || warm.ctx == NULL || sscanf(rest, "%d %d", &k, &m) != 2
            || k != warm.nqueue || k >= WARM_MAX_DEVICES || m < 0 || m >= warm.ndevice)
            return -1;
        warm.queue[k] = create(warm.ctx, warm.dev[m], 0, &err);
        warm.nqueue++;
        return warm.queue[k] != NULL && err == 0 ? 0 : -1;
    }
    if (!strcmp(tag, "mem")) {  /* index, bytes, fill (0 zeros, 4: int32 -1, 8: int64 -1) */
        void *p = NULL;
        if (sscanf(rest, "%d %lld %lld", &k, &x, &y) != 3 || k != warm.nmem || x < 0
            || grow_array((void **)&warm.mem, sizeof *warm.mem, k + 1) < 0)
            return -1;
        if (posix_memalign(&p, 4096, (size_t)(x > 0 ? x : 1)) != 0)
            return -1;
        memset(p, y == 0 ? 0 : 0xff, (size_t)x);  /* -1 in any integer width */
        warm.mem[k].p = p;
        warm.mem[k].bytes = (size_t)x;
        warm.nmem++;
        return y == 0 || y == 4 || y == 8 ? 0 : -1;
    }
    if (!strcmp(tag, "buffer")) {  /* index, memory block (-1: none) and offset, bytes, flags */
        wcl_create_buffer_fn create = (wcl_create_buffer_fn)warm_sym("clCreateBuffer");
        long long flags;
        void *host = NULL, *zeros = NULL;
        if (create == NULL || warm.ctx == NULL
            || sscanf(rest, "%d %d %lld %lld %lld", &k, &m, &x, &y, &flags) != 5
            || k != warm.nbuf || m >= warm.nmem || y < 0 || x < 0
            || grow_array((void **)&warm.buf, sizeof *warm.buf, k + 1) < 0)
            return -1;
        warm.buf[k] = NULL;
        warm.nbuf++;
        if (m >= 0) {
            if ((size_t)(x + y) > warm.mem[m].bytes)
                return -1;
            host = (char *)warm.mem[m].p + x;
        }
        else {  /* the device's own memory, zeroed as Python fills it */
            if ((zeros = calloc(1, (size_t)(y > 0 ? y : 1))) == NULL)
                return -1;
            host = zeros;
            flags |= WCL_MEM_COPY_HOST_PTR;
        }
        warm.buf[k] = create(warm.ctx, (uint64_t)flags, (size_t)(y > 0 ? y : 4), host, &err);
        free(zeros);
        return warm.buf[k] != NULL && err == 0 ? 0 : -1;
    }
    if (!strcmp(tag, "program")) {  /* index, device, binary file, build options */
        wcl_program_binary_fn create = (wcl_program_binary_fn)warm_sym(
            "clCreateProgramWithBinary");
        wcl_build_fn build = (wcl_build_fn)warm_sym("clBuildProgram");
        char *file = NULL, *options = NULL, *bin = NULL;
        size_t len = 0;
        dcl_int status = 0;
        int rc = -1;
        if (create == NULL || build == NULL || warm.ctx == NULL || split(rest, tok, 4) != 4
            || num(tok[0], &v[0]) < 0 || num(tok[1], &v[1]) < 0 || v[0] != warm.nprog
            || v[1] < 0 || v[1] >= warm.ndevice
            || grow_array((void **)&warm.prog, sizeof *warm.prog, warm.nprog + 1) < 0)
            return -1;
        k = (int)v[0];
        m = (int)v[1];
        warm.prog[k] = NULL;
        warm.nprog++;
        if ((file = unhex(tok[2])) != NULL && (options = unhex(tok[3])) != NULL
            && (bin = read_all(file, &len)) != NULL && len > 0) {
            const unsigned char *bp = (const unsigned char *)bin;
            warm.prog[k] = create(warm.ctx, 1, &warm.dev[m], &len, &bp, &status, &err);
            if (warm.prog[k] != NULL && err == 0 && status == 0
                && build(warm.prog[k], 1, &warm.dev[m], options, NULL, NULL) == 0)
                rc = 0;
        }
        free(file);
        free(options);
        free(bin);
        return rc;
    }
    if (!strcmp(tag, "kernel")) {  /* index, program, name */
        wcl_create_kernel_fn create = (wcl_create_kernel_fn)warm_sym("clCreateKernel");
        char *name;
        if (create == NULL || split(rest, tok, 3) != 3 || num(tok[0], &v[0]) < 0
            || num(tok[1], &v[1]) < 0 || v[0] != warm.nkern || v[1] < 0 || v[1] >= warm.nprog
            || grow_array((void **)&warm.kern, sizeof *warm.kern, warm.nkern + 1) < 0)
            return -1;
        k = (int)v[0];
        m = (int)v[1];
        warm.kern[k] = NULL;
        warm.nkern++;
        if ((name = unhex(tok[2])) == NULL)
            return -1;
        warm.kern[k] = create(warm.prog[m], name, &err);
        free(name);
        return warm.kern[k] != NULL && err == 0 ? 0 : -1;
    }
    if (!strcmp(tag, "library")) {  /* npipes, max_address, device count, limit, version */
        char *ver;
        if (split(rest, tok, 5) != 5 || num(tok[0], &x) < 0 || num(tok[1], &y) < 0
            || num(tok[2], &z) < 0 || num(tok[3], &v[3]) < 0
            || x < 1 || x > NI_LIMIT_WARM || y < 0 || y > 2147483646 || z < 1
            || v[3] < 1 || v[3] > 2147483647 || (ver = unhex(tok[4])) == NULL)
            return -1;
        warm.limit = (int)v[3];
        warm.npipes = (int)x;
        warm.max_address = (int)y;
        warm.device_count = (int)z;
        snprintf(warm.version, sizeof warm.version, "%s", ver);
        free(ver);
        return 0;
    }
    if (!strcmp(tag, "plan"))
        return warm_plan_line(rest);
    return -1;
}

/* Whether the recipe ends with the checksum of everything before its last line (64-bit
 * FNV-1a, as capi/warm.py's checksum): a damaged or half-written recipe is never used. */
static int warm_intact(const char *text, size_t len)
{
    const char *end;
    unsigned long long want;
    char *stop;
    if (len < 2 || text[len - 1] != '\n')
        return 0;
    for (end = text + len - 2; end > text && end[-1] != '\n'; end--)
        ;
    if (strncmp(end, "end ", 4) != 0)
        return 0;
    want = strtoull(end + 4, &stop, 16);
    if (*stop != '\n')
        return 0;
    return fnv1a(text, (size_t)(end - text)) == want;
}

/* The checks that need no OpenCL: format, fingerprint, files; then the variables Python
 * set (PoCL's), as it would set them.  0 when the recipe applies. */
static int warm_check(char *text, const char *file)
{
    char *save = NULL, *line, *fp = NULL;
    int format = 0, files = 0, rc = -1;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *tok[4];
        long long size, mtime;
        int n;
        if (sscanf(line, "format %d", &format) == 1)
            continue;
        if (!strncmp(line, "fingerprint ", 12)) {
            free(fp);
            fp = unhex(line + 12);
            continue;
        }
        if (strncmp(line, "file ", 5) != 0)
            continue;
        n = split(line + 5, tok, 3);
        if (n != 3 || num(tok[1], &size) < 0 || num(tok[2], &mtime) < 0)
            goto done;  /* a file line this code cannot read: not this recipe */
        {
            if (!warm_file_same(tok[0], size, mtime)) {
                char *path = unhex(tok[0]);
                warm_trace("opening with Python: %s changed since the recipe %s was written",
                           path ? path : "a file", file);
                free(path);
                goto done;
            }
            files++;
        }
    }
    if (format != WARM_FORMAT || fp == NULL || strcmp(fp, warm.fingerprint) != 0 || files == 0) {
        warm_trace("opening with Python: the recipe %s is of another format or settings",
                   file);
        goto done;
    }
    rc = 0;
done:
    free(fp);
    return rc;
}

static void warm_setenv(char *text)
{
    char *save = NULL, *line;
    for (line = strtok_r(text, "\n", &save); line != NULL; line = strtok_r(NULL, "\n", &save)) {
        char *tok[3];
        if (!strncmp(line, "setenv ", 7) && split(line + 7, tok, 2) == 2) {
            char *name = unhex(tok[0]), *value = unhex(tok[1]);
            if (name != NULL && value != NULL && getenv(name) == NULL)
                setenv(name, value, 0);
            free(name);
            free(value);
        }
    }
}

/* g6_open served here: 1 when the library is open without Python, 0 to start it. */
static int warm_load(const char *file);

/* The most recently written recipe of this fingerprint (the last run's j-addresses) into
 * file; 0, or -1 when there is none. */
static int warm_latest(char *file, size_t size)
{
    const char *slash = strrchr(warm.path, '/');
    char dir[4096];
    DIR *d;
    struct dirent *e;
    struct stat st;
    long long best = -1;
    size_t stem;
    if (slash == NULL || (size_t)(slash - warm.path) >= sizeof dir)
        return -1;
    memcpy(dir, warm.path, (size_t)(slash - warm.path));
    dir[slash - warm.path] = '\0';
    stem = strlen(slash + 1);
    if ((d = opendir(dir)) == NULL)
        return -1;
    while ((e = readdir(d)) != NULL) {
        char path[4352];
        size_t n = strlen(e->d_name);
        long long t;
        if (n < stem + 6 || strncmp(e->d_name, slash + 1, stem) != 0 || e->d_name[stem] != '-'
            || strcmp(e->d_name + n - 4, ".rec") != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) != 0)
            continue;
        t = (long long)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec;
        if (t > best && strlen(path) < size) {
            best = t;
            memcpy(file, path, strlen(path) + 1);
        }
    }
    closedir(d);
    return best < 0 ? -1 : 0;
}

static int warm_open(int order, const char *precision, const char *backend, int ndev,
                     const int *devices)
{
    char file[4352];
    warm.record = 0;
    warm.calls0 = direct.calls;
    warm.order = order;
    warm.ndev = ndev;
    warm.has_precision = precision != NULL;
    warm.has_backend = backend != NULL;
    snprintf(warm.precision, sizeof warm.precision, "%s", precision ? precision : "");
    snprintf(warm.backend, sizeof warm.backend, "%s", backend ? backend : "");
    if ((precision && strlen(precision) >= sizeof warm.precision)
        || (backend && strlen(backend) >= sizeof warm.backend) || ndev > 64
        || (ndev > 0 && devices == NULL)
        || warm_slot(order, precision, backend, ndev, devices) < 0)
        return 0;
    for (int k = 0; k < ndev; k++)
        warm.devices[k] = devices[k];
    warm.record = 1;  /* unless served here: Python writes the recipe at g6_close */
    if (warm_latest(file, sizeof file) < 0) {
        warm_trace("opening with Python: no recipe %s-*.rec (yet)", warm.path);
        return 0;
    }
    if (!warm_load(file))
        return 0;
    warm.n_stored = 0;
    warm.pred_terms = 0;
    warm.active = 1;
    warm.record = 0;
    warm.starts++;
    max_address = warm.max_address;
    npipes = warm.npipes;
    return 1;
}

/* The objects of one recipe file made here (warm.c's state: objects, plans, limit); 1, or
 * 0 with nothing made. */
static int warm_load(const char *file)
{
    char *text, *copy, *save = NULL, *line;
    size_t len = 0;
    int ok = 1;
    if ((text = read_all(file, &len)) == NULL) {
        warm_trace("opening with Python: cannot read the recipe %s", file);
        return 0;
    }
    if (strlen(text) != len || !warm_intact(text, len)) {
        warm_trace("opening with Python: the recipe %s is damaged", file);
        free(text);
        return 0;
    }
    if ((copy = malloc(len + 1)) == NULL) {
        free(text);
        return 0;
    }
    memcpy(copy, text, len + 1);
    if (warm_check(copy, file) < 0) {
        free(copy);
        free(text);
        return 0;
    }
    memcpy(copy, text, len + 1);
    warm_setenv(copy);
    free(copy);
    direct_reset();
    warm.limit = 0;
    for (line = strtok_r(text, "\n", &save); line != NULL && ok;
         line = strtok_r(NULL, "\n", &save)) {
        char tag[32];
        int n = 0;
        if (sscanf(line, "%31s %n", tag, &n) < 1)
            continue;
        if (!strcmp(tag, "format") || !strcmp(tag, "fingerprint") || !strcmp(tag, "file")
            || !strcmp(tag, "setenv") || !strcmp(tag, "end"))
            continue;
        ok = warm_line(tag, line + n) == 0;
        if (!ok)
            warm_trace("opening with Python: the recipe's '%s' line cannot be made", tag);
    }
    free(text);
    if (!ok || warm.nkern == 0 || warm.mirror_raw == NULL || warm.limit < 1
        || !warm_in_mem(warm.mirror_raw, sizeof(double) * 4 * (size_t)warm.raw_n * (size_t)warm.limit)
        || !warm_in_mem(warm.dev_raw, sizeof(double) * 4 * (size_t)warm.raw_n * (size_t)warm.limit)
        || !warm_in_mem(warm.mirror_ids, sizeof(int64_t) * (size_t)warm.limit)
        || !warm_in_mem(warm.dev_ids, sizeof(int32_t) * (size_t)warm.limit)) {
        direct_reset();
        warm_release();
        return 0;
    }
    return 1;
}

/* Before anything is stored here: the recipe for the j-addresses the buffered particles
 * need, when the one made is for another number (a run with another N, an MPI rank with
 * another slice); 1 when that recipe's objects are made now, 0 to go on as before. */
static int warm_switch(void)
{
    char file[4352];
    int need = 0, active = warm.active, hv = have_time, ok;
    double ct = cur_time;  /* g6_set_ti's time, which direct_reset forgets */
    struct stat st;
    for (int k = 0; k < jb.n; k++)
        if (jb.address[k] + 1 > need)
            need = jb.address[k] + 1;
    if (!warm.active || warm.n_stored != 0 || need == warm.limit
        || snprintf(file, sizeof file, "%s-%d.rec", warm.path, need) >= (int)sizeof file
        || stat(file, &st) != 0 || direct_wait() < 0)
        return 0;
    direct_reset();
    warm_release();  /* (clears warm.active) */
    ok = warm_load(file);
    have_time = hv;
    cur_time = ct;
    warm.active = active;
    if (!ok)  /* nothing is made (nothing was stored either): Python takes over */
        warm.limit = 0;
    return ok;
}

/* ------------------------------------------------------------------ serving the run */

static int warm_is_active(void)
{
    return warm.active;
}

/* The buffered j-particles stored here; 1 when done, 0 when Python must take them. */
static int warm_store(void)
{
    if (jb.n == 0)
        return 1;
    warm_switch();
    if ((jb.any_pop && warm.order != 8)
        || !j_records_ok(warm.limit, warm.raw_n, warm.raw_n - 2, warm.ds))
        return 0;
    if (direct_wait() < 0)
        return 0;
    for (int k = 0; k < jb.n; k++) {
        const double *r = jb.rec + (size_t)JB_DOUBLES * k;
        /* the derivatives the predictor reads grow as the library's do */
        for (int q = warm.raw_n - 1; q > warm.pred_terms + 1; q--)
            if (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0) {
                warm.pred_terms = q - 1;
                break;
            }
        if (jb.address[k] >= warm.n_stored)
            warm.n_stored = jb.address[k] + 1;
    }
    j_write(warm.mirror_raw, warm.mirror_ids, warm.dev_raw, warm.dev_ids, warm.raw_n);
    direct.pred_valid = 0;
    jb_clear();
    return 1;
}

/* Whether a plan fits the library's state here. */
static int warm_plan_fits(const struct dplan *p)
{
    return p->n_stored == warm.n_stored && p->pred_terms == warm.pred_terms;
}

/* direct_plan's answer for an open served here: the cached plan while it fits, else the
 * recipe's plan for this shape and state (put in the cache for its block sizes), else
 * NULL (Python must start). */
static struct dplan *warm_plan(int nj, int ni, int lists)
{
    struct dplan *p = &direct.plans[lists][ni];
    if (p->epoch == direct.epoch && p->status > 0 && p->nj == nj && p->ni == ni
        && warm_plan_fits(p))
        return p;
    for (int k = 0; k < warm.nplans; k++) {
        const struct wplan *q = &warm.plans[k];
        if (q->p.nj != nj || q->p.lists != lists || ni < q->lo || ni > q->hi
            || !warm_plan_fits(&q->p) || direct_room(lists, q->hi + 1) < 0)
            continue;
        for (int b = q->lo; b <= q->hi; b++) {
            direct.plans[lists][b] = q->p;
            direct.plans[lists][b].ni = b;
            direct.plans[lists][b].epoch = direct.epoch;
        }
        return &direct.plans[lists][ni];
    }
    return NULL;
}

/* The j-particles stored here, handed to the library Python opened. */
static int warm_replay(void)
{
    enum { BATCH = 1024 };
    int *address = malloc(sizeof(int) * BATCH), *index = malloc(sizeof(int) * BATCH), n = 0,
        rc = 0, given = warm.raw_n - 1 < 3 ? 3 : warm.raw_n - 1;
    double *rec = calloc((size_t)BATCH * JB_DOUBLES, sizeof(double));
    if (address == NULL || index == NULL || rec == NULL)
        rc = fail(SAPPORO_ERR_INTERNAL, "out of memory handing j-particles to Python");
    if (given > JB_RECORDS - 1)
        given = JB_RECORDS - 1;
    for (int a = 0; a < warm.n_stored && rc >= 0; a++) {
        if (warm.mirror_ids[a] < 0)
            continue;  /* never stored */
        address[n] = a;
        index[n] = (int)warm.mirror_ids[a];
        memset(rec + (size_t)JB_DOUBLES * n, 0, sizeof(double) * JB_DOUBLES);
        memcpy(rec + (size_t)JB_DOUBLES * n, warm.mirror_raw + (size_t)a * 4 * warm.raw_n,
               sizeof(double) * 4 * (size_t)warm.raw_n);
        if (++n == BATCH || a == warm.n_stored - 1) {
            rc = shim_py_set_j(n, address, index, rec, given);
            n = 0;
        }
    }
    if (n > 0 && rc >= 0)
        rc = shim_py_set_j(n, address, index, rec, given);
    free(address);
    free(index);
    free(rec);
    return rc;
}

/* Start Python and give it the library's state: from here on the run is an ordinary one. */
static int warm_handover(const char *why)
{
    int rc, hv = have_time;
    double ct = cur_time;
    if (!warm.active)
        return SAPPORO_OK;
    warm_trace("starting Python: %s", why);
    direct_wait();
    if ((rc = python_up()) >= 0)
        rc = shim_py_open(warm.order, warm.has_precision ? warm.precision : NULL,
                          warm.has_backend ? warm.backend : NULL, warm.ndev, warm.devices,
                          &max_address);
    if (rc >= 0)
        rc = warm_replay();
    warm_release();
    direct_reset();
    have_time = hv;
    cur_time = ct;
    if (rc < 0) {
        /* the library is not usable: as if the open had failed */
        is_open = 0;
        snprintf(open_error, sizeof open_error, "%s", last_error);
        return rc;
    }
    warm.calls0 = direct.calls;
    warm.record = 1;
    return SAPPORO_OK;
}

/* g6_close of an open that started Python and ran force calls on the direct path: Python
 * writes the recipe for the next run (never an error of the close). */
static void warm_record(void)
{
    int *shapes, n = 0, cap = 3 * (direct.nplans[0] + direct.nplans[1]) + 3;
    if (!warm.record || warm.fingerprint == NULL || direct.calls == warm.calls0
        || (shapes = malloc(sizeof(int) * (size_t)cap)) == NULL)
        return;
    for (int lists = 0; lists < 2; lists++)
        for (int ni = 1; ni < direct.nplans[lists]; ni++) {
            const struct dplan *p = &direct.plans[lists][ni];
            /* planned, or asked for before the j-particles reached the library (the
             * first call): Python plans them again now */
            if (p->status != 0 && p->ni == ni && p->nj > 0) {
                shapes[3 * n] = p->nj;
                shapes[3 * n + 1] = ni;
                shapes[3 * n + 2] = lists;
                n++;
            }
        }
    if (n > 0)
        shim_py_warm_record(warm.path, warm.fingerprint, n, shapes);
    free(shapes);
}
