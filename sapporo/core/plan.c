/*
 * plan.c -- plans: a plan's words (plan.h, made once per launch-table entry by
 * sapporo.core.library) unpacked, and each force call's launches derived from them by
 * arithmetic alone (any ni, any nj: no Python on a call's path).
 */
#include <string.h>

#include "engine.h"

static void unpack_launch(struct dlaunch *l, const int64_t *w)
{
    l->queue = (void *)(intptr_t)w[DL_QUEUE];
    l->kernel = (void *)(intptr_t)w[DL_KERNEL];
    l->call_arg = (int)w[DL_CALL_ARG];
    l->ni_arg = (int)w[DL_NI_ARG];
    l->dims = (int)w[DL_DIMS];
    l->global[0] = (size_t)w[DL_G0];
    l->global[1] = (size_t)w[DL_G1];
    l->local[0] = (size_t)w[DL_L0];
    l->local[1] = (size_t)w[DL_L1];
    l->nargs = (int)w[DL_NARGS];
    for (int k = 0; k < l->nargs && k < DP_MAX_ARGS; k++) {
        l->arg_size[k] = (size_t)w[DL_ARGS + 2 * k];
        l->arg_value[k] = (uint64_t)w[DL_ARGS + 2 * k + 1];
    }
}

int plan_unpack(struct dplan *p, const int64_t *w, int lists)
{
    memset(p, 0, sizeof *p);
    p->lists = lists;
    p->status = (int)w[DP_STATUS];
    p->dev = (int)w[DP_DEV];
    p->small = (int)w[DP_SMALL];
    p->ni_lo = (int)w[DP_NI_LO];
    p->ni_hi = (int)w[DP_NI_HI];
    p->ipg = (int)w[DP_I_PER_GROUP];
    p->ipi = (int)w[DP_I_PER_ITEM];
    p->lj = (int)w[DP_LJ];
    p->j_align = (int)w[DP_J_ALIGN];
    p->min_jchunk = (int)w[DP_MIN_JCHUNK];
    p->target = (int)w[DP_TARGET_GROUPS];
    p->small_pairs = (long)w[DP_SMALL_PAIRS];
    p->host_reduce_max = (int)w[DP_HOST_REDUCE_MAX];
    p->out_arg = (int)w[DP_OUT_ARG];
    p->partial_buf = (uint64_t)w[DP_PARTIAL_BUF];
    p->ni_pad_max = (int)w[DP_NI_PAD_MAX];
    p->order = (int)w[DP_ORDER];
    p->nci = (int)w[DP_NCI];
    p->nco = (int)w[DP_NCO];
    p->raw_n = (int)w[DP_RAW_N];
    p->pred_terms = (int)w[DP_PRED_TERMS];
    p->n_stored_at = (int64_t *)(intptr_t)w[DP_N_STORED_AT];
    p->mirror_cap = (int)w[DP_MIRROR_CAP];
    p->j_cap = (int)w[DP_J_CAP];
    p->ds = (int)w[DP_DS];
    p->check_rows = (int)w[DP_CHECK_ROWS];
    p->spin_ns = (long)w[DP_SPIN_NS];
    p->max_id = (long)w[DP_MAX_ID];
    p->idata = (double *)(intptr_t)w[DP_IDATA];
    p->out = (double *)(intptr_t)w[DP_OUT];
    p->mirror_raw = (double *)(intptr_t)w[DP_MIRROR_RAW];
    p->mirror_ids = (int64_t *)(intptr_t)w[DP_MIRROR_IDS];
    p->dev_raw = (double *)(intptr_t)w[DP_DEV_RAW];
    p->dev_ids = (int32_t *)(intptr_t)w[DP_DEV_IDS];
    p->pred_pos = (void *)(intptr_t)w[DP_PRED_POS];
    p->pred_lo = (void *)(intptr_t)w[DP_PRED_LO];
    p->nb_counts = (int32_t *)(intptr_t)w[DP_NB_COUNTS];
    p->nb_lists = (int32_t *)(intptr_t)w[DP_NB_LISTS];
    p->nb_cap = (int)w[DP_NB_CAP];
    p->set_arg = (dcl_set_arg_fn)(intptr_t)w[DP_FN_SET_ARG];
    p->enqueue = (dcl_enqueue_fn)(intptr_t)w[DP_FN_ENQUEUE];
    p->flush = (dcl_queue_fn)(intptr_t)w[DP_FN_FLUSH];
    p->finish = (dcl_queue_fn)(intptr_t)w[DP_FN_FINISH];
    p->event_info = (dcl_event_info_fn)(intptr_t)w[DP_FN_EVENT_INFO];
    p->release = (dcl_event_fn)(intptr_t)w[DP_FN_RELEASE];
    p->write = (dcl_copy_fn)(intptr_t)w[DP_FN_WRITE];
    p->read = (dcl_copy_fn)(intptr_t)w[DP_FN_READ];
    p->cu_context = (void *)(intptr_t)w[DP_CONTEXT];
    p->cu_launch = (dcu_launch_fn)(intptr_t)w[DP_FN_CU_LAUNCH];
    p->cu_htod = (dcu_htod_fn)(intptr_t)w[DP_FN_CU_HTOD];
    p->cu_dtoh = (dcu_dtoh_fn)(intptr_t)w[DP_FN_CU_DTOH];
    p->cu_sync = (dcu_stream_fn)(intptr_t)w[DP_FN_CU_SYNC];
    p->cu_query = (dcu_stream_fn)(intptr_t)w[DP_FN_CU_QUERY];
    p->cu_push = (dcu_push_fn)(intptr_t)w[DP_FN_CU_PUSH];
    p->cu_pop = (dcu_pop_fn)(intptr_t)w[DP_FN_CU_POP];
    p->seconds_at = (double *)(intptr_t)w[DP_SECONDS_AT];
    p->profiling_info = (dcl_event_info_fn)(intptr_t)w[DP_FN_PROFILING_INFO];
    p->cu_event_create = (dcu_event_create_fn)(intptr_t)w[DP_FN_CU_EVENT_CREATE];
    p->cu_event_record = (dcu_event_record_fn)(intptr_t)w[DP_FN_CU_EVENT_RECORD];
    p->cu_event_elapsed = (dcu_event_elapsed_fn)(intptr_t)w[DP_FN_CU_EVENT_ELAPSED];
    p->cu_event_destroy = (dcu_stream_fn)(intptr_t)w[DP_FN_CU_EVENT_DESTROY];
    p->memory = (int)w[DP_MEMORY];
    p->queue = (void *)(intptr_t)w[DP_QUEUE];
    p->idata_buf = (void *)(intptr_t)w[DP_IDATA_BUF];
    p->out_buf = (void *)(intptr_t)w[DP_OUT_BUF];
    p->out_cap = (size_t)w[DP_OUT_BYTES];
    p->nb_counts_buf = (void *)(intptr_t)w[DP_NB_COUNTS_BUF];
    p->nb_lists_buf = (void *)(intptr_t)w[DP_NB_LISTS_BUF];
    p->scatter_max = (int)w[DP_SCATTER_MAX];
    p->scatter_batch = (double *)(intptr_t)w[DP_SCATTER_BATCH];
    p->scatter_batch_buf = (void *)(intptr_t)w[DP_SCATTER_BATCH_BUF];
    p->gen = w[DP_GEN];
    p->gen_at = (const int64_t *)(intptr_t)w[DP_GEN_AT];
    p->lgen = w[DP_LGEN];
    p->lgen_at = (const int64_t *)(intptr_t)w[DP_LGEN_AT];
    p->upload = (const int32_t *)(intptr_t)w[DP_UPLOAD];
    p->nupload = (int)w[DP_NUPLOAD];
    p->twin_out = (double *)(intptr_t)w[DP_TWIN_OUT];
    p->twin_pairs = (long)w[DP_TWIN_PAIRS];
    p->twin_ni = (int)w[DP_TWIN_NI];
    for (int k = 0; k < 6; k++)
        if (w[DL_NARGS + DP_LAUNCHES + k * DP_LAUNCH_WORDS] > DP_MAX_ARGS)
            return -1;
    unpack_launch(&p->predict, w + DP_LAUNCHES);
    unpack_launch(&p->force, w + DP_LAUNCHES + DP_LAUNCH_WORDS);
    unpack_launch(&p->scatter, w + DP_LAUNCHES + 2 * DP_LAUNCH_WORDS);
    unpack_launch(&p->reduce, w + DP_LAUNCHES + 3 * DP_LAUNCH_WORDS);
    unpack_launch(&p->twin, w + DP_LAUNCHES + 4 * DP_LAUNCH_WORDS);
    unpack_launch(&p->twin_predict, w + DP_LAUNCHES + 5 * DP_LAUNCH_WORDS);
    const int cuda = p->cu_launch != NULL;
    if (cuda ? (p->cu_context == NULL || p->cu_htod == NULL || p->cu_dtoh == NULL
                || p->cu_sync == NULL || p->cu_query == NULL || p->cu_push == NULL
                || p->cu_pop == NULL || !p->memory || p->predict.local[0] == 0
                || p->force.local[0] == 0 || p->scatter.local[0] == 0
                || (p->reduce.kernel != NULL && p->reduce.local[0] == 0))
             : (p->set_arg == NULL || p->enqueue == NULL || p->flush == NULL
                || p->finish == NULL || p->event_info == NULL || p->release == NULL
                || (p->memory && (p->write == NULL || p->read == NULL))))
        return -1;
    if (p->seconds_at != NULL
        && (cuda ? (p->cu_event_create == NULL || p->cu_event_record == NULL
                    || p->cu_event_elapsed == NULL || p->cu_event_destroy == NULL)
                 : p->profiling_info == NULL))
        return -1;
    if (p->status != 1 || p->predict.nargs < 0 || p->force.nargs <= FA_JCHUNK
        || p->nco > NCO_ORDER8 || p->nci > NCI_ORDER8
        || p->raw_n < 2 || p->raw_n > RAW_N_ORDER8
        || p->ni_lo < 1 || p->ni_lo > p->ni_hi || p->ni_hi > ENG_NI_MAX
        || p->ipg < 1 || p->ipi < 1 || p->ipg % p->ipi != 0 || p->lj < 1 || p->j_align < 1
        || p->target < 1 || p->small < 0 || p->small > 1 || p->host_reduce_max < 0
        || p->ni_pad_max < (p->ni_hi + p->ipg - 1) / p->ipg * p->ipg
        || p->out_arg < 0 || p->out_arg >= p->force.nargs
        || p->out_cap < sizeof(double) * (size_t)p->nco * (size_t)p->ni_pad_max
        || (p->reduce.kernel != NULL && (p->partial_buf == 0 || p->reduce.nargs <= RA_NPARTS
                                         || p->reduce.ni_arg != RA_NI))
        || p->force.ni_arg != FA_NI
        || p->gen_at == NULL || p->lgen_at == NULL || p->n_stored_at == NULL
        || p->mirror_cap < *p->n_stored_at || p->j_cap < 0 || p->predict.nargs <= PA_N
        || p->predict.local[0] < 1 || p->memory < 0 || p->memory > 1
        || p->nupload < 0 || (p->nupload > 0 && p->upload == NULL)
        || (p->memory && (p->queue == NULL || p->idata_buf == NULL || p->out_buf == NULL
                          || (lists && (p->nb_counts_buf == NULL || p->nb_lists_buf == NULL))
                          || p->scatter_max < 1 || p->scatter.kernel == NULL
                          || p->scatter.ni_arg < 0 || p->scatter_batch == NULL
                          || p->scatter_batch_buf == NULL))
        || (lists && (p->nb_counts == NULL || p->nb_lists == NULL || p->nb_cap < 1))
        || (p->twin.kernel != NULL
            && (cuda || !p->small || p->memory || lists || p->twin_out == NULL
                || p->twin_pairs < 1 || p->twin_ni < 1 || p->twin.nargs != p->force.nargs
                || p->twin.ni_arg != FA_NI || p->twin.call_arg != p->force.call_arg
                || p->out_cap < 2 * sizeof(double) * (size_t)p->nco * (size_t)p->ni_pad_max))
        || (p->twin_predict.kernel != NULL
            && (p->twin.kernel == NULL || p->predict.queue != p->force.queue
                || p->twin_predict.nargs != p->predict.nargs
                || p->twin_predict.call_arg != p->predict.call_arg
                || p->twin_predict.local[0] != p->predict.local[0])))
        return -1;
    return 0;
}


static int round_up(int n, int m)
{
    return (n + m - 1) / m * m;
}

static int ceil_div(long n, long m)
{
    return (int)((n + m - 1) / m);
}

void plan_split(int ipg, int j_align, int min_jchunk, int target, int ni_pad, int nj,
                int *nparts, int *jchunk)
{
    const long groups_i = ni_pad / ipg > 1 ? ni_pad / ipg : 1;
    long want = ceil_div(target, groups_i), by_j = nj / (min_jchunk > 1 ? min_jchunk : 1);
    long parts = want < by_j ? want : by_j;
    if (parts > LIMIT_MAX_PARTS)
        parts = LIMIT_MAX_PARTS;
    if (parts < 1)
        parts = 1;
    *jchunk = round_up(ceil_div(nj, parts) > 1 ? ceil_div(nj, parts) : 1, j_align);
    *nparts = ceil_div(nj, *jchunk) > 1 ? ceil_div(nj, *jchunk) : 1;
}

int plan_small(const struct dplan *p, int ni, int nj_local)
{
    return p->small_pairs > 0
        && (long)round_up(ni, p->ipg) * (nj_local > 1 ? nj_local : 1) <= p->small_pairs;
}

/* Argument k of launch l: the int32 n (as its word holds it). */
static void set_i32(struct dlaunch *l, int k, int n)
{
    int32_t n32 = n;
    l->arg_value[k] = 0;
    memcpy(&l->arg_value[k], &n32, sizeof n32);
}

int plan_shape(struct dplan *p, int nj, int nj_local, int ni)
{
    const int ni_pad = round_up(ni, p->ipg);
    int nparts, jchunk, host;
    /* the companion runs the groups one by one: one part, or with the twin, two (one each) */
    p->split = p->twin.kernel != NULL && ni_pad >= p->twin_ni
        && (long)ni_pad * nj_local >= p->twin_pairs && nj_local > p->j_align;
    if (p->small) {
        nparts = 1 + p->split;
        jchunk = round_up(ceil_div(nj_local > 1 ? nj_local : 1, nparts), p->j_align);
    }
    else
        plan_split(p->ipg, p->j_align, p->min_jchunk, p->target, ni_pad, nj_local, &nparts,
                   &jchunk);
    /* few results: the host combines the parts (one launch less) */
    host = nparts == 1 || p->split
        || (long)nparts * p->nco * ni_pad <= (long)p->host_reduce_max || p->reduce.kernel == NULL;
    if (ni < p->ni_lo || ni > p->ni_hi || ni_pad > p->ni_pad_max
        || (host && sizeof(double) * (size_t)nparts * (size_t)p->nco * (size_t)ni_pad
            > p->out_cap))
        return -1;
    p->nj = nj;
    p->ni = ni;
    p->ni_pad = ni_pad;
    set_i32(&p->force, FA_NJ, nj_local);
    set_i32(&p->force, FA_NI_PAD, ni_pad);
    set_i32(&p->force, FA_JCHUNK, jchunk);
    p->force.global[0] = (size_t)(ni_pad / p->ipi);
    p->force.global[1] = (size_t)(nparts - p->split) * (size_t)p->lj;
    if (p->split) {  /* the twin's launch: the same call on the second part */
        for (int k = FA_NJ; k <= FA_JCHUNK; k++)
            p->twin.arg_value[k] = p->force.arg_value[k];
        p->twin.global[0] = p->force.global[0];
        p->twin.global[1] = (size_t)p->lj;
    }
    if (host) {
        p->reduce.kernel = NULL;  /* (this call's copy of the plan) */
        p->nparts = nparts;
    }
    else {
        p->force.arg_value[p->out_arg] = p->partial_buf;
        set_i32(&p->reduce, RA_NI_PAD, ni_pad);
        set_i32(&p->reduce, RA_NPARTS, nparts);
        p->reduce.global[1] = (size_t)round_up(ni, REDUCE_ROWS);
        p->nparts = 1;
    }
    p->out_bytes = sizeof(double) * (size_t)p->nparts * (size_t)p->nco * (size_t)ni_pad;
    return 0;
}

int plan_predict(struct dplan *p, int n_local)
{
    const int n = n_local > 1 ? n_local : 1;  /* (none: one idle work-group) */
    if (n_local > p->j_cap)
        return -1;
    set_i32(&p->predict, PA_N, n_local);
    p->predict.global[0] = (size_t)round_up(n, (int)p->predict.local[0]);
    p->twin_predicts = 0;
    return 0;
}

size_t plan_predict_split(struct dplan *p, int n_local)
{
    int32_t jchunk;
    memcpy(&jchunk, &p->force.arg_value[FA_JCHUNK], sizeof jchunk);
    if (!p->split || p->twin_predict.kernel == NULL || jchunk >= n_local)
        return 0;
    set_i32(&p->twin_predict, PA_N, n_local);
    p->twin_predict.global[0] = (size_t)round_up(n_local - jchunk,
                                                 (int)p->twin_predict.local[0]);
    p->predict.global[0] = (size_t)round_up(jchunk, (int)p->predict.local[0]);
    set_i32(&p->predict, PA_N, jchunk);
    p->twin_predicts = 1;
    return (size_t)jchunk;
}
