/*
 * shim.h -- what the C API's two compile units share: shim.c (GRAPE-6, the embedded Python,
 * the error record) and g5.c (GRAPE-5), both compiled into libsapporo.so by build.py.  The
 * functions and variables below are shim.c's; they are hidden in the library (built with
 * -fvisibility=hidden and a version script), never part of its ABI.
 */
#ifndef SAPPORO_SHIM_H
#define SAPPORO_SHIM_H

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
/* the engine table as the last open found it: its count of calls into Python */
extern const struct sapporo_engine_api *shim_any_api;

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

/* Fortran names take every scalar by reference: shim_null_name writes the name of the first
 * NULL among n pointers p (names: theirs, comma-separated) into out and returns 1, or 0 when
 * none is NULL. */
int shim_null_name(const char *names, int n, const void *const *p, char *out, size_t size);
#define NULL_MESSAGE "%s is a NULL pointer (Fortran passes every scalar by reference)"
#define SCALAR_LIST(...) (const void *[]){__VA_ARGS__}
#define SCALAR_COUNT(...) (int)(sizeof(SCALAR_LIST(__VA_ARGS__)) / sizeof(void *))

#endif
