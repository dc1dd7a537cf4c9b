/*
 * jstore.c -- the engine's j-memory: the rules of j-particles, the one writer of the host
 * mirror and the devices' records (copies, uploads, a reset), growth asked of the library.
 * See engine.h.
 */
#include <math.h>
#include <string.h>

#include "engine.h"

/* Device memory: the n j-records staged in device d's plan arrays (n <= scatter_max) into
 * its buffers: copied to the device and placed by one scatter launch (one or two records:
 * copied in place), all queued. 0, or -1 (error set). */
static int eng_send_staged(Engine *e, int d, int n)
{
    struct edev *ed = &e->dev[d];
    struct dplan *p = &ed->jside;
    const size_t len = 4 * (size_t)p->raw_n;
    /* one or two records are plain copies, which any queue of the context can make: the
     * one the next force call most likely uses, the last one's (on PoCL, the companion
     * device's for small blocks, which runs them in this thread) */
    void *queue = n <= 2 && ed->force_queue != NULL ? ed->force_queue : p->queue;
    dcl_int rc = 0;
    if (eng_on(e, d, queue) < 0)
        return -1;
    ed->staged = 1;
    if (n <= 2) {  /* as few commands as the scatter's two: each record and id in place */
        for (int k = 0; k < n && rc == 0; k++) {
            const double *r = p->scatter_batch + (len + 4) * (size_t)k;
            const size_t a = (size_t)r[len];
            ed->ids_now[k] = (int32_t)r[len + 1];
            rc = drv_write(p, queue, p->dev_raw, sizeof(double) * len * a,
                           sizeof(double) * len, r);
            if (rc == 0)
                rc = drv_write(p, queue, p->dev_ids, sizeof(int32_t) * a, sizeof(int32_t),
                               &ed->ids_now[k]);
        }
        return rc == 0 ? 0 : eng_fail(e, "queueing a j-record's copy", rc, 0);
    }
    rc = drv_write(p, p->queue, p->scatter_batch_buf, 0,
                   sizeof(double) * (len + 4) * (size_t)n, p->scatter_batch);
    if (rc != 0)
        return eng_fail(e, "queueing the j-records' copy", rc, 0);
    return eng_launch(e, p, &p->scatter, 0, n, NULL, "queueing the scatter of j-records");
}

/* Device memory: device d's records among the consecutive global addresses a0 .. a0 + m - 1,
 * already in the host mirror, copied from it in one copy (several devices: gathered first,
 * the device's every ndev-th address), and their ids in another (made now, so that neither
 * the mirror nor the staged arrays are read later). 0, or -1 (error set). */
static int eng_copy_j_run(Engine *e, int d, int a0, int m)
{
    struct dplan *p = &e->dev[d].jside;
    const size_t len = 4 * (size_t)p->raw_n, nd = (size_t)e->ndev;
    const int g0 = a0 + (d - a0 % (int)nd + (int)nd) % (int)nd;  /* its first address */
    const int n = g0 > a0 + m - 1 ? 0 : (a0 + m - 1 - g0) / (int)nd + 1, l0 = g0 / (int)nd;
    const double *raw = p->mirror_raw + len * (size_t)l0;  /* one device: the mirror's run */
    dcl_int rc;
    if (n == 0)
        return 0;
    if ((size_t)n > e->run_cap) {
        int32_t *q = PyMem_RawRealloc(e->run_ids, sizeof(int32_t) * (size_t)n);
        double *r = q == NULL ? NULL
                              : PyMem_RawRealloc(e->run_raw, sizeof(double) * len * (size_t)n);
        if (q != NULL)
            e->run_ids = q;
        if (r == NULL) {
            return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %d j-particles", n);
        }
        e->run_raw = r;
        e->run_cap = (size_t)n;
    }
    for (int k = 0; k < n; k++) {
        const size_t a = ((size_t)l0 + (size_t)k) * nd + (size_t)d;  /* the global address */
        e->run_ids[k] = (int32_t)p->mirror_ids[a];
        if (nd > 1)
            memcpy(e->run_raw + len * (size_t)k, p->mirror_raw + len * a, sizeof(double) * len);
    }
    if (nd > 1)
        raw = e->run_raw;
    if (eng_on(e, d, p->queue) < 0)
        return -1;
    rc = drv_write_now(p, p->queue, p->dev_raw, sizeof(double) * len * (size_t)l0,
                       sizeof(double) * len * (size_t)n, raw);
    if (rc == 0)
        rc = drv_write_now(p, p->queue, p->dev_ids, sizeof(int32_t) * (size_t)l0,
                           sizeof(int32_t) * (size_t)n, e->run_ids);
    return rc == 0 ? 0 : eng_fail(e, "copying a run of j-records", rc, 0);
}

/* Device memory: device d's share of n j-records (global addresses; already in the mirror)
 * into its buffers: a batch larger than one scatter on consecutive addresses (a tree
 * code's list, a first upload) in two copies, others scatter_max addresses at a time, in
 * order (an address repeated within a batch keeps its slot, with its last record). 0, or
 * -1 (error set). */
static int eng_copy_j(Engine *e, int d, int n, const int *address, const int *index,
                      const double *rec, int nrec)
{
    struct edev *ed = &e->dev[d];
    struct dplan *p = &ed->jside;
    const int nd = e->ndev, m = p->scatter_max;
    const size_t len = 4 * (size_t)p->raw_n;
    const size_t given = (size_t)(nrec < p->raw_n ? nrec : p->raw_n);
    int run = n > m, s = 0, bits = 1;
    for (int k = 1; k < n && run; k++)
        run = address[k] == address[0] + k;
    if (run)
        return eng_copy_j_run(e, d, address[0], n);
    /* the threads of one scatter write in no fixed order, so a batch names each address
     * once: an address staged already takes the later record in its slot, found through
     * a hash table of the batch's slots (slot + 1; 0: free) */
    while ((1 << bits) < 2 * m)
        bits++;
    int slot_of[1 << bits];
    memset(slot_of, 0, sizeof slot_of);
    for (int k = 0; k < n; k++) {
        if (address[k] % nd != d)
            continue;
        if (s == 0 && ed->staged && eng_wait_dev(e, d) < 0)  /* the arrays may still be read */
            return -1;
        const int local = address[k] / nd;
        unsigned h = ((unsigned)local * 2654435761u) >> (32 - bits);
        while (slot_of[h] != 0
               && p->scatter_batch[(len + 4) * (size_t)(slot_of[h] - 1) + len] != local)
            h = (h + 1) & ((1u << bits) - 1);
        const int fresh = slot_of[h] == 0;
        if (fresh)
            slot_of[h] = s + 1;
        double *r = p->scatter_batch + (len + 4) * (size_t)(slot_of[h] - 1);
        memcpy(r, rec + 4 * (size_t)nrec * (size_t)k, sizeof(double) * 4 * given);
        memset(r + 4 * given, 0, sizeof(double) * (len - 4 * given));
        r[len] = (double)local;
        r[len + 1] = (double)index[k];
        r[len + 2] = r[len + 3] = 0.0;
        if (fresh && ++s == m) {
            if (eng_send_staged(e, d, s) < 0)
                return -1;
            s = 0;
            memset(slot_of, 0, sizeof slot_of);
        }
    }
    return s > 0 ? eng_send_staged(e, d, s) : 0;
}

/* Whether the stored j-records stand still where the devices compute on host memory: order
 * 2 (the force reads positions and masses only), no velocity stored since the reset (so the
 * prediction, x + dt (v + ...), is x at any time), and the predicted positions in host
 * arrays.  The engine then writes each record's predicted position as it stores it, as the
 * prediction kernel would (predict.cl), and launches no prediction: a GRAPE-5 call is one
 * command.  Nothing reads the devices' raw records then, and they are not written: the
 * host mirror has them (eng_put_j_rc copies them over when the records start moving, and
 * eng_predict_still writes the predicted positions from the mirror). */
int eng_still(const Engine *e)
{
    const struct dplan *j = &e->dev[0].jside;
    return j->order == 2 && !e->moving && j->pred_terms == 0 && !j->memory
        && j->pred_pos != NULL;
}

/* v as double-single's pair: hi = (float)v and lo = (float)(v - hi).  hi is hidden from the
 * optimiser: GCC 12's vectoriser (at -O3, or -O2 on unrolled code) narrows v - (double)hi
 * to float arithmetic, which gives lo = 0. */
static inline void ds_split(double v, float *hi, float *lo)
{
    float h = (float)v;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
    __asm__("" : "+x"(h));
#endif
    *hi = h;
    *lo = (float)(v - (double)h);
}

/* Device q's predicted positions of still records (as predict.cl writes them: x + dt * 0,
 * double-single as hi/lo float pairs, and the mass) at local addresses l0 .. l0 + nq - 1,
 * from every stride-th position of x and mass of m (one record: x its x|m, m x + 3). */
static inline __attribute__((always_inline)) void xm_predicted(
    const struct dplan *q, size_t l0, int nq, const double *restrict x,
    const double *restrict m, int stride)
{
    if (q->ds) {
        float *restrict hi = (float *)q->pred_pos + 4 * l0;
        float *restrict lo = (float *)q->pred_lo + 4 * l0;
        for (int k = 0; k < nq; k++) {
            const double *p = x + 3 * (size_t)k * stride;
            for (int c = 0; c < 3; c++)
                ds_split(p[c] + 0.0, hi + 4 * k + c, lo + 4 * k + c);
            hi[4 * k + 3] = (float)m[(size_t)k * stride];
            lo[4 * k + 3] = 0.0f;
        }
    }
    else {
        double *restrict pos = (double *)q->pred_pos + 4 * l0;
        for (int k = 0; k < nq; k++) {
            const double *p = x + 3 * (size_t)k * stride;
            pos[4 * k] = p[0] + 0.0;
            pos[4 * k + 1] = p[1] + 0.0;
            pos[4 * k + 2] = p[2] + 0.0;
            pos[4 * k + 3] = m[(size_t)k * stride];
        }
    }
}

/* n j-records into the host mirror (global addresses) and, on devices that compute on host
 * memory, into their records (address a: device a % ndev, local address a / ndev), in
 * order: a repeated address keeps its last record, as in the library. Only the records the
 * predictor reads (x|m, v|t and pred_terms derivatives) are written: the others are zero
 * in every stored record (records_ok, and the library raises pred_terms when it stores a
 * non-zero one), and stay so.  still: their predicted positions too (eng_still). */
static void records_write(Engine *e, int n, const int *address, const int *index,
                          const double *rec, int nrec, int still)
{
    const struct dplan *j = &e->dev[0].jside;
    const int nd = e->ndev, raw_n = j->raw_n;
    const size_t len = 4 * (size_t)raw_n;
    const int used = j->pred_terms + 2 < raw_n ? j->pred_terms + 2 : raw_n;
    const size_t given = sizeof(double) * 4 * (size_t)(nrec < used ? nrec : used);
    const size_t zeros = sizeof(double) * 4 * (size_t)(used - (nrec < used ? nrec : used));
    for (int k = 0; k < n; k++) {
        const size_t a = (size_t)address[k];
        const double *r = rec + 4 * (size_t)nrec * k;
        if (given == 2 * sizeof(double[4]))  /* (x|m and v|t: a copy the compiler inlines) */
            memcpy(j->mirror_raw + a * len, r, 2 * sizeof(double[4]));
        else
            memcpy(j->mirror_raw + a * len, r, given);
        if (zeros)
            memset((char *)(j->mirror_raw + a * len) + given, 0, zeros);
        j->mirror_ids[a] = index[k];
        if (!j->memory) {  /* (one device: no division per record) */
            const struct dplan *q = nd == 1 ? j : &e->dev[a % (size_t)nd].jside;
            const size_t l = nd == 1 ? a : a / (size_t)nd;
            if (q->dev_ids[l] != index[k])  /* (a line the kernels read is written only when
                                             * it changes: GRAPE-5's ids are all 0) */
                q->dev_ids[l] = index[k];
            if (still)
                xm_predicted(q, l, 1, r, r + 3, 1);
            else {
                memcpy(q->dev_raw + l * len, r, given);
                if (zeros)
                    memset((char *)(q->dev_raw + l * len) + given, 0, zeros);
            }
        }
    }
}

void eng_predict_still(Engine *e)
{
    const struct dplan *j = &e->dev[0].jside;
    const int nd = e->ndev, n = (int)*j->n_stored_at;
    for (int a = 0; a < n; a++) {
        const double *r = j->mirror_raw + (size_t)a * 4 * (size_t)j->raw_n;
        xm_predicted(&e->dev[a % nd].jside, (size_t)(a / nd), 1, r, r + 3, 1);
    }
}

int eng_upload_run(Engine *e, int a0, int m)
{
    const struct dplan *j = &e->dev[0].jside;
    const int nd = e->ndev;
    const size_t len = 4 * (size_t)j->raw_n;
    for (int d = 0; d < nd && j->memory; d++)
        if (eng_copy_j_run(e, d, a0, m) < 0)
            return -1;
    for (int a = a0; a < a0 + m && !j->memory; a++) {
        const struct dplan *q = &e->dev[a % nd].jside;
        memcpy(q->dev_raw + (size_t)(a / nd) * len, j->mirror_raw + (size_t)a * len,
               sizeof(double) * len);
        q->dev_ids[a / nd] = (int32_t)j->mirror_ids[a];
    }
    e->pred_valid = 0;
    return 0;
}

int eng_upload(Engine *e, int n, const int32_t *address)
{
    for (int k = 0, m; k < n; k += m) {
        for (m = 1; k + m < n && address[k + m] == address[k] + m; m++)
            ;
        if (eng_upload_run(e, address[k], m) < 0)
            return -1;
    }
    return 0;
}

int eng_reset(Engine *e)
{
    const struct dplan *j = &e->dev[0].jside;
    int n;
    if (!e->have_j || eng_wait(e) < 0)
        return e->have_j ? -1 : 0;
    n = (int)*j->n_stored_at;
    memset(j->mirror_raw, 0, sizeof(double) * 4 * (size_t)j->raw_n * (size_t)n);
    for (int a = 0; a < n; a++)
        j->mirror_ids[a] = -1;
    if (n > 0 && eng_upload_run(e, 0, n) < 0)
        return -1;
    *j->n_stored_at = 0;
    e->moving = 0;
    return 0;
}

/* The j-particles' rules: n records (nrec double4 each, at rec) at addresses, with ids.
 * 0, with the addresses in use they need (*top: the highest plus one) and the derivative
 * records the predictor must read (*terms: the highest non-zero one, a = 1, jerk = 2, ...)
 * and whether one has a velocity (*moves), or -1 with the error (ENG_ERR_INPUT) naming the
 * first j-particle that breaks one. */
static int j_rules(Engine *e, int n, const int *address, const int *index, const double *rec,
                   int nrec, int *top, int *terms, int *moves)
{
    *top = 0;
    *terms = 0;
    *moves = 0;
    for (int k = 0; k < n; k++) {
        const double *r = rec + 4 * (size_t)nrec * k;
        const int a = address[k];
        if (a < 0 || a > LIMIT_MAX_ADDRESS)
            return eng_err(e, ENG_ERR_INPUT, "address: value %d outside [0, %d]", a,
                           LIMIT_MAX_ADDRESS);
        if (index[k] < 0 || index[k] > LIMIT_MAX_ID)
            return eng_err(e, ENG_ERR_INPUT, "index: value %d outside [0, %d] (address %d)",
                           index[k], LIMIT_MAX_ID, a);
        for (int q = 0; q < nrec; q++)
            if (!finite3(r + 4 * q) || !isfinite(r[4 * q + 3]))
                return eng_err(e, ENG_ERR_INPUT, "j-particle at address %d (index %d) has a "
                               "NaN or infinite value", a, index[k]);
        if (!position_ok(r))
            return eng_err(e, ENG_ERR_INPUT, "x: j-particle at address %d: position (%g, %g, "
                           "%g) too large: squared distances would overflow double; "
                           "magnitudes must stay below %g", a, r[0], r[1], r[2], COORD_LIMIT);
        *moves |= r[4] != 0.0 || r[5] != 0.0 || r[6] != 0.0;
        for (int q = nrec - 1; q >= 2 && q - 1 > *terms; q--)
            if (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0)
                *terms = q - 1;
        if (a >= *top)
            *top = a + 1;
    }
    return 0;
}

/* The rules of the library's kind (its records and precision, in j): pop and d5 (records
 * RAW_P on) are zero below order 8 (the other derivatives past the order's records are
 * not read), and double-single keeps every non-zero mass (pair terms are float).  0, or -1
 * with the error (ENG_ERR_INPUT). */
static int j_fits(Engine *e, const struct dplan *j, int n, const int *address,
                  const double *rec, int nrec)
{
    for (int k = 0; k < n; k++) {
        const double *r = rec + 4 * (size_t)nrec * k;
        if (j->ds && !ds_mass_ok(r[3]))
            return eng_err(e, ENG_ERR_INPUT, "mass: %g at address %d is below single "
                           "precision's normal range (%.3g); double-single would lose its "
                           "force. Use N-body units or precision='double' (see "
                           "docs/accuracy.md)", r[3], address[k], ENGINE_FLT_MIN);
        for (int q = j->raw_n > RAW_P ? j->raw_n : RAW_P; q < nrec; q++)
            if (r[4 * q] != 0.0 || r[4 * q + 1] != 0.0 || r[4 * q + 2] != 0.0)
                return eng_err(e, ENG_ERR_INPUT, "j-particle at address %d: derivative "
                               "record %d is not zero, but this library's order keeps %d "
                               "records (pop and d5 are taken at order 8 only)", address[k],
                               q, j->raw_n);
    }
    return 0;
}

/* Whether the memory holds addresses [0, top) (the host mirror, and each device's records:
 * address a on device a % ndev at local a / ndev). */
static int room_for(const Engine *e, int top)
{
    if (top > e->dev[0].jside.mirror_cap)
        return 0;
    for (int d = 0; d < e->ndev; d++)
        if (n_local(top, d, e->ndev) > e->dev[d].jside.j_cap)
            return 0;
    return 1;
}

int eng_put_j_rc(Engine *e, int n, const int *address, const int *index,
                        const double *rec, int nrec)
{
    const struct dplan *j = &e->dev[0].jside;
    int top, terms, moves, was_still = e->have_j && eng_still(e);
    e->code = ENG_ERR_BACKEND;
    if (e->off)
        return eng_err(e, ENG_ERR_BACKEND, "the device failed earlier (see the first error); "
                       "open a new library");
    if (nrec < 2 || nrec > JB_RECORDS)
        return eng_err(e, ENG_ERR_INPUT, "put_j: %d records per j-particle (2 to %d)", nrec,
                       JB_RECORDS);
    if (n < 1)
        return 1;
    if (j_rules(e, n, address, index, rec, nrec, &top, &terms, &moves) < 0)
        return -1;
    if (e->have_j && terms > j->raw_n - 2)  /* (records past the order's are not read) */
        terms = j->raw_n - 2;
    if ((!e->have_j || !eng_fresh(e) || !room_for(e, top) || terms > j->pred_terms)
        && eng_ask(e, 0, top, terms) < 0)  /* more memory, or terms (the library's) */
        return -1;
    if (terms > j->raw_n - 2)
        terms = j->raw_n - 2;
    if (j_fits(e, j, n, address, rec, nrec) < 0)
        return -1;
    if (!room_for(e, top) || terms > j->pred_terms)
        return eng_err(e, ENG_ERR_INTERNAL, "the library gave no room for address %d", top - 1);
    if (eng_in_flight(e) && eng_wait(e) < 0)  /* the force call reads the records */
        return -1;
    e->moving |= moves;
    if (was_still && !eng_still(e)  /* they start moving: the prediction reads them all */
        && eng_upload_run(e, 0, (int)*j->n_stored_at) < 0)
        return -1;
    records_write(e, n, address, index, rec, nrec, eng_still(e));
    if (top > *j->n_stored_at)  /* more addresses in use: the next prediction reads them */
        *j->n_stored_at = top;
    if (!eng_still(e))  /* (still: the predicted positions are written) */
        e->pred_valid = 0;
    for (int d = 0; d < e->ndev && j->memory; d++)
        if (eng_copy_j(e, d, n, address, index, rec, nrec) < 0)
            return -1;
    return 1;
}

int eng_put_room(Engine *e, size_t n)
{
    double *rec;
    int *address, *index;
    if (n <= e->put_cap)
        return 0;
    rec = PyMem_RawRealloc(e->rec, sizeof(double) * JB_DOUBLES * n);
    if (rec != NULL)
        e->rec = rec;
    address = rec == NULL ? NULL : PyMem_RawRealloc(e->address, sizeof(int) * n);
    if (address != NULL)
        e->address = address;
    index = address == NULL ? NULL : PyMem_RawRealloc(e->index, sizeof(int) * n);
    if (index == NULL)
        return eng_err(e, ENG_ERR_INTERNAL, "out of memory for %zu j-particles", n);
    e->index = index;
    e->put_cap = n;
    return 0;
}

/* n still records at addresses adr .. adr + n - 1 (positions x, masses m, id index) written
 * as records_write writes them (eng_still: the mirror's x|m, each device's id and predicted
 * position), in one pass per device over whole arrays.  The mirror's v|t is left as it is:
 * while the records stand still every velocity in it is zero (the reset and growth write
 * zeros, and a velocity ends standing still), so a time there predicts nothing. Ids are
 * written where they change (a tree code's batch of lists outgrows the caches, and lines
 * only read are not written back). */
static void xm_write(Engine *e, int adr, int n, const double *restrict x,
                     const double *restrict m, int index)
{
    const struct dplan *j = &e->dev[0].jside;
    const int nd = e->ndev;
    const size_t len = 4 * (size_t)j->raw_n;
    double *restrict raw = j->mirror_raw + (size_t)adr * len;
    int64_t *restrict ids = j->mirror_ids + adr;
    for (int k = 0; k < n; k++) {
        double *r = raw + (size_t)k * len;
        r[0] = x[3 * k];
        r[1] = x[3 * k + 1];
        r[2] = x[3 * k + 2];
        r[3] = m[k];
        if (ids[k] != index)
            ids[k] = index;
    }
    for (int d = 0; d < nd; d++) {  /* address a: device a % nd, local address a / nd */
        const struct dplan *q = &e->dev[d].jside;
        const int k0 = (d - adr % nd + nd) % nd;
        const size_t l0 = (size_t)(adr + k0) / (size_t)nd;
        const int nq = k0 < n ? (n - 1 - k0) / nd + 1 : 0;
        int32_t *restrict dev_ids = q->dev_ids + l0;
        for (int k = 0; k < nq; k++)  /* (written only where it changes: lines the kernels
                                       * read; GRAPE-5's ids are all 0) */
            if (dev_ids[k] != index)
                dev_ids[k] = index;
        if (nd == 1)  /* (the common case, with its stride known) */
            xm_predicted(q, l0, nq, x, m, 1);
        else
            xm_predicted(q, l0, nq, x + 3 * (size_t)k0, m + k0, nd);
    }
}

/* Whether positions x and masses m of n records all keep put_j's rules for still records
 * (finite, positions below COORD_LIMIT, double-single: no mass below float's normal range),
 * in one pass without a branch per value: the magnitudes' bits compare as the magnitudes
 * do, and NaN's and infinity's above every finite one's. */
static int xm_ok(int n, const double *restrict x, const double *restrict m, int ds)
{
    const double limit = COORD_LIMIT, inf = INFINITY, tiny = ENGINE_FLT_MIN;
    const uint64_t abs = ~(UINT64_C(1) << 63);
    uint64_t lim, fin, low, bad = 0;
    memcpy(&lim, &limit, sizeof lim);
    memcpy(&fin, &inf, sizeof fin);
    memcpy(&low, &tiny, sizeof low);
    for (int k = 0; k < n; k++) {
        uint64_t u[4];
        memcpy(u, x + 3 * (size_t)k, 3 * sizeof(double));
        memcpy(u + 3, m + k, sizeof(double));
        bad |= ((u[0] & abs) >= lim) | ((u[1] & abs) >= lim) | ((u[2] & abs) >= lim)
               | ((u[3] & abs) >= fin) | (ds & ((u[3] & abs) - 1 < low - 1));
    }
    return bad == 0;
}

int eng_put_xm_rc(Engine *e, int adr, int n, const double *x, const double *m, int index)
{
    const struct dplan *j = &e->dev[0].jside;
    e->code = ENG_ERR_BACKEND;
    if (e->off || n < 1 || adr < 0 || adr > LIMIT_MAX_ADDRESS - (n - 1)
        || !e->have_j || !eng_fresh(e) || !room_for(e, adr + n) || !eng_still(e)) {
        /* through put_j (its rules, errors and requests for memory), in its buffers */
        if (n > 0 && eng_put_room(e, (size_t)n) < 0)
            return -1;
        for (int k = 0; k < n; k++) {
            put_record(e->rec + 8 * (size_t)k, 2, x + 3 * (size_t)k, m[k], NULL, 0.0, NULL,
                       NULL);
            e->address[k] = adr + k;
            e->index[k] = index;
        }
        return eng_put_j_rc(e, n, e->address, e->index, e->rec, 2);
    }
    /* still records: checked at once (no branch per value; put_j's rules name the first
     * that breaks one), then written as put_j would (all or none) */
    if (!xm_ok(n, x, m, j->ds)) {
        double rec[8];
        int top, terms, moves;
        for (int k = 0; k < n; k++) {
            const int a = adr + k;
            put_record(rec, 2, x + 3 * (size_t)k, m[k], NULL, 0.0, NULL, NULL);
            if (j_rules(e, 1, &a, &index, rec, 2, &top, &terms, &moves) < 0
                || j_fits(e, j, 1, &a, rec, 2) < 0)
                return -1;
        }
        return eng_err(e, ENG_ERR_INTERNAL, "put_xm: a rule broken but not found");
    }
    if (eng_in_flight(e) && eng_wait(e) < 0)  /* (the force call in flight reads them) */
        return -1;
    xm_write(e, adr, n, x, m, index);
    if (adr + n > *j->n_stored_at)
        *j->n_stored_at = adr + n;
    return 1;
}

int eng_put_xm(void *engine, int adr, int n, const double *x, const double *m, int index)
{
    return eng_code(engine, eng_put_xm_rc(engine, adr, n, x, m, index));
}

int eng_get_xm(void *engine, int adr, int n, double *x, double *m)
{
    Engine *e = engine;
    const struct dplan *j = &e->dev[0].jside;
    const int stored = e->have_j ? (int)*j->n_stored_at : 0;
    const size_t len = 4 * (size_t)j->raw_n;
    e->code = ENG_ERR_INPUT;
    if (n < 0 || adr < 0 || adr > LIMIT_MAX_ADDRESS - n)
        return eng_code(e, eng_err(e, ENG_ERR_INPUT, "get_xm: addresses %d .. %d outside "
                                   "[0, %d]", adr, adr + n - 1, LIMIT_MAX_ADDRESS));
    for (int k = 0; k < n; k++) {
        const double *r = adr + k < stored ? j->mirror_raw + (size_t)(adr + k) * len : NULL;
        for (int c = 0; c < 3; c++)
            x[3 * k + c] = r != NULL ? r[c] : 0.0;
        m[k] = r != NULL ? r[3] : 0.0;
    }
    return 1;
}

int eng_put_j(void *engine, int n, const int *address, const int *index,
                     const double *rec, int nrec)
{
    return eng_code(engine, eng_put_j_rc(engine, n, address, index, rec, nrec));
}
