/*
 * shim.h -- what the C API's two compile units share: shim.c (GRAPE-6, the embedded Python,
 * the error record) and g5.c (GRAPE-5), both compiled into libsapporo.so by build.py.  The
 * functions and variables below are shim.c's; they are hidden in the library (built with
 * -fvisibility=hidden and a version script), never part of its ABI.
 */
#ifndef SAPPORO_SHIM_H
#define SAPPORO_SHIM_H

#include <fenv.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sapporo.h"
#include "bridge.h"
#include "engine_api.h"
#include "layout.h"

#define EXPORT __attribute__((visibility("default")))

/* A call into the C API's Python half (bridge.py), counted (sapporo_python_calls). */
extern long shim_python_calls;
#define PY(call) (__atomic_add_fetch(&shim_python_calls, 1, __ATOMIC_RELAXED), (call))

/* the last error of this thread ("function: message (code N)"), as sapporo_last_error() */
extern _Thread_local char shim_last_error[1024];
/* force calls the engines ran, in this process */
extern long shim_direct_calls;
/* the engine table as the last open found it (the module stays loaded): its count of calls
 * into Python */
extern const struct sapporo_engine_api *shim_any_api;

/* The caller's floating-point state, saved before a call is served and put back after it:
 * the library's own arithmetic (NumPy, the embedded interpreter) must not leave exception
 * flags behind in the client's thread, nor change its rounding or exception masks.
 * gfortran reports flags still raised at STOP, e.g. "Note: The following floating-point
 * exceptions are signalling: IEEE_DENORMAL" after a force call on particles with tiny
 * coordinates; with the flags restored it reports only the client's own.  On x86-64 with
 * glibc: MXCSR (SSE's flags, where the denormal flag lives, and controls) and the x87
 * control and status words are read as they are, and the x87 environment is rewritten only
 * where they changed (fegetenv and fesetenv, which store and load the whole x87 environment,
 * took 8 % of a 1k-body block step); elsewhere fegetenv and fesetenv. */
#if defined(__x86_64__) && defined(__GLIBC__)
typedef struct {
    unsigned int mxcsr;
    unsigned short cw, sw;
} shim_fp;
#define SHIM_X87_FLAGS 0x3f  /* the status word's exception flags, denormal included */
static inline void shim_fp_save(shim_fp *s)
{
    __asm__ volatile("stmxcsr %0" : "=m"(s->mxcsr));
    __asm__ volatile("fnstcw %0" : "=m"(s->cw));
    __asm__ volatile("fnstsw %0" : "=m"(s->sw));
}
static inline void shim_fp_restore(const shim_fp *s)
{
    unsigned short cw, sw;
    __asm__ volatile("fnstcw %0" : "=m"(cw));
    __asm__ volatile("fnstsw %0" : "=m"(sw));
    if (cw != s->cw || ((sw ^ s->sw) & SHIM_X87_FLAGS)) {
        fenv_t env;
        fegetenv(&env);
        env.__control_word = s->cw;
        env.__status_word = (unsigned short)((env.__status_word & ~SHIM_X87_FLAGS)
                                             | (s->sw & SHIM_X87_FLAGS));
        fesetenv(&env);
    }
    __asm__ volatile("ldmxcsr %0" : : "m"(s->mxcsr));
}
#else
typedef fenv_t shim_fp;
#define shim_fp_save(s) fegetenv(s)
#define shim_fp_restore(s) fesetenv(s)
#endif

/* shim_lock taken (the error record, the embedded Python, the library's calls) for API
 * function fn, the caller's floating-point environment saved; shim_leave(rc) undoes both
 * and returns rc (or stops the program under SAPPORO_ON_ERROR=abort) */
void shim_enter(const char *fn);
int shim_leave(int rc);
/* an error of the function being served: recorded, printed the 1st, 10th, 100th ... time
 * of its kind (every_time: each time); shim_fail returns code */
void shim_report(int code, const char *message, int every_time);
int shim_fail(int code, const char *fmt, ...);
/* a warning, printed as an error of its kind is, without a code */
void shim_warn(const char *fmt, ...);
/* the embedded interpreter started and sapporo imported: 0, or the error code */
int shim_python_up(void);
/* g6_npipes(): never below 1 */
int shim_npipes_for_client(void);
/* *p grown to cap elements of elem bytes: 0, or -1 (out of memory; *p as it was) */
int shim_grow(void **p, size_t elem, int cap);
/* an engine table that an open handed over: SAPPORO_OK, or the error (an engine built for
 * another interface version) */
int shim_engine_check(const struct sapporo_engine_api *api);

/* whether a library (what: "the library", "GRAPE-5"; opener: the call that opens it) is
 * open: SAPPORO_OK, or the error, which gives why its last open failed (open_error; "" when
 * none did) and, for a force call (forces), is printed on every call */
int shim_need_open(int open, const char *open_error, const char *what, const char *opener,
                   int forces);

/* Fortran names take every scalar by reference: a NULL one (a C caller's mistake) is refused
 * naming it, before anything reads it.  NULL_SCALARS(p, q, ...): 0, or the error (recorded,
 * under shim_enter) naming the first of them that is NULL. */
int shim_null_scalars(const char *names, int n, const void *const *p);
#define SCALAR_LIST(...) (const void *[]){__VA_ARGS__}
#define SCALAR_COUNT(...) (int)(sizeof(SCALAR_LIST(__VA_ARGS__)) / sizeof(void *))
#define NULL_SCALARS(...) \
    shim_null_scalars(#__VA_ARGS__, SCALAR_COUNT(__VA_ARGS__), SCALAR_LIST(__VA_ARGS__))

/* An exported call served: expr evaluated under shim_enter(__func__) (its messages name the
 * exported function) and shim_leave; SERVE_REFS first refuses a NULL among its scalars (in
 * parentheses: SERVE_REFS((ni, eps2), ...)). */
#define SERVE(expr) (shim_enter(__func__), shim_leave(expr))
#define SERVE_REFS(scalars, expr) SERVE(NULL_SCALARS scalars < 0 ? SAPPORO_ERR_INPUT : (expr))

#endif
