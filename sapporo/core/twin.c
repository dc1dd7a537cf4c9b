/*
 * twin.c -- the twin: a thread of the engine that runs the second half of a small force
 * call on PoCL's second single-threaded device, while the calling thread runs the first
 * half on the companion (see plan.h).  PoCL's single-threaded devices run a kernel inside
 * the enqueue call, so each half costs its thread the kernel's time and no hand-off; the
 * two halves are the force kernel's two j-parts, combined on the host as any parts.
 *
 * Where the prediction runs on the companion, a split call's prediction is split too: the
 * twin predicts the addresses its half reads before its force, so that they are written in
 * its own core's caches (the caller's launch predicts the others).
 *
 * One job at a time: the caller posts it (twin_post) and collects it (twin_join).  The
 * thread polls for jobs (yielding the core to any other runnable thread) for the plan's
 * spin time after its last one, then sleeps until the next post wakes it.  A job the
 * thread has not taken by the time the caller collects it is run by the caller, so a
 * sleeping or descheduled twin never makes a call slower than running both halves in turn.
 */
#include <pthread.h>
#include <sched.h>
#include <string.h>
#include <time.h>

#include "engine.h"

enum { TWIN_IDLE, TWIN_POSTED, TWIN_TAKEN, TWIN_DONE };

struct twin {
    pthread_t thread;
    int started;                 /* the thread runs (0: it could not start) */
    pthread_mutex_t lock;        /* with wake: the thread's sleep */
    pthread_cond_t wake;
    int sleeping, stop;          /* (atomics) */
    int state;                   /* TWIN_* (atomic) */
    /* the job: a copy of the twin's launch, the runtime's entry points, the call's values */
    struct dplan p;
    uint64_t call_value, t_bits;
    int ni, predict;             /* predict: the prediction from address offset first */
    size_t offset;
    dcl_int rc;
    void *event[2];              /* the launches' events, where the library profiles */
    long spin_ns;
};

/* a pause in a spin-wait */
static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    sched_yield();
#endif
}

static void twin_run(struct twin *t)
{
    const int timed = t->p.seconds_at != NULL;
    t->rc = 0;
    if (t->predict)
        t->rc = plan_launch_at(&t->p, &t->p.twin_predict, t->t_bits, t->ni, t->offset,
                               timed ? &t->event[1] : NULL);
    if (t->rc == 0)
        t->rc = plan_launch(&t->p, &t->p.twin, t->call_value, t->ni,
                            timed ? &t->event[0] : NULL);
}

static void *twin_main(void *arg)
{
    struct twin *t = arg;
    struct timespec last;
    clock_gettime(CLOCK_MONOTONIC, &last);
    for (;;) {
        int expect = TWIN_POSTED;
        if (__atomic_compare_exchange_n(&t->state, &expect, TWIN_TAKEN, 0, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
            twin_run(t);
            __atomic_store_n(&t->state, TWIN_DONE, __ATOMIC_RELEASE);
            clock_gettime(CLOCK_MONOTONIC, &last);
            continue;
        }
        if (__atomic_load_n(&t->stop, __ATOMIC_ACQUIRE))
            return NULL;
        if (ns_since(&last) < __atomic_load_n(&t->spin_ns, __ATOMIC_RELAXED)) {
            sched_yield();
            continue;
        }
        pthread_mutex_lock(&t->lock);
        __atomic_store_n(&t->sleeping, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(&t->state, __ATOMIC_SEQ_CST) != TWIN_POSTED
               && !__atomic_load_n(&t->stop, __ATOMIC_SEQ_CST))
            pthread_cond_wait(&t->wake, &t->lock);
        __atomic_store_n(&t->sleeping, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&t->lock);
        clock_gettime(CLOCK_MONOTONIC, &last);
    }
}

int twin_post(Engine *e, const struct dplan *p, uint64_t call_value, int ni)
{
    int32_t jchunk;
    struct twin *t = e->twin;
    if (t == NULL) {
        if ((t = PyMem_RawCalloc(1, sizeof *t)) == NULL)
            return eng_err(e, ENG_ERR_INTERNAL, "out of memory for the twin's thread");
        pthread_mutex_init(&t->lock, NULL);
        pthread_cond_init(&t->wake, NULL);
        e->twin = t;
        t->started = pthread_create(&t->thread, NULL, twin_main, t) == 0;
    }
    t->p = *p;
    t->call_value = call_value;
    t->ni = ni;
    t->predict = p->twin_predicts;  /* (plan_predict_split: from the force's cut) */
    memcpy(&t->t_bits, &e->time, sizeof t->t_bits);
    memcpy(&jchunk, &p->force.arg_value[FA_JCHUNK], sizeof jchunk);
    t->offset = (size_t)jchunk;
    __atomic_store_n(&t->spin_ns, p->spin_ns, __ATOMIC_RELAXED);
    t->rc = 0;
    t->event[0] = t->event[1] = NULL;
    __atomic_store_n(&t->state, TWIN_POSTED, __ATOMIC_SEQ_CST);
    if (t->started && __atomic_load_n(&t->sleeping, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&t->lock);
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
    }
    return 0;
}

dcl_int twin_join(Engine *e, const struct dplan *p)
{
    struct twin *t = e->twin;
    int expect = TWIN_POSTED;
    if (__atomic_compare_exchange_n(&t->state, &expect, TWIN_TAKEN, 0, __ATOMIC_ACQ_REL,
                                    __ATOMIC_ACQUIRE))
        twin_run(t);  /* not taken yet: run here */
    else
        while (__atomic_load_n(&t->state, __ATOMIC_ACQUIRE) != TWIN_DONE)
            relax();
    __atomic_store_n(&t->state, TWIN_IDLE, __ATOMIC_RELEASE);
    for (int k = 0; k < 2; k++)  /* timed: read with the caller's launches at the wait */
        if (t->event[k] != NULL) {
            eng_timed_event(e, p, t->event[k]);
            t->event[k] = NULL;
        }
    return t->rc;
}

void twin_free(Engine *e)
{
    struct twin *t = e->twin;
    if (t == NULL)
        return;
    if (t->started) {
        pthread_mutex_lock(&t->lock);
        __atomic_store_n(&t->stop, 1, __ATOMIC_SEQ_CST);
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
        pthread_join(t->thread, NULL);
    }
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    PyMem_RawFree(t);
    e->twin = NULL;
}
