/* plan.c -- the execution plan's driver: the graph, its buffers, one step, the entry points.
 *
 * What it provides: gc_plan_create / destroy, train_step / eval_step / predict, and the
 * helpers the layer kinds use (plan_internal.h). A plan owns every activation and
 * gradient buffer (allocated once, for max_batch rows, through the backend table),
 * borrows the weights and optimizer state from the caller, and runs one training step
 * -- forward, loss, metrics, backward, update -- in a single call that only touches
 * backend ops, so any backend plugs in without changes here.
 *
 * Why this shape: small models are launch-bound, so everything that can be decided once
 * is decided at creation. The graph (nodes in topological order, each naming its
 * producers) is analysed once: which gradients are needed at all (none upstream of the
 * first trainable node), which consumer writes a fanned-out gradient first and which
 * accumulate into it, which views alias their input, and when each gradient buffer is
 * live, so buffers are reused once their last reader has run (an interval allocator;
 * inference-only plans reuse activation buffers the same way). Every float32 weight
 * gradient lives in one arena. Creation also runs the whole step once in "check" mode,
 * where each op call is validated by core instead of executed; steps then call the
 * backend slots directly.
 *
 * Mixed precision (Keras' dtype policies): each node has a compute dtype. Its output and
 * the gradient of its output are stored in it; an input of another dtype is cast on the
 * way in (and its gradient on the way back); float32 master weights are cast to it at
 * every forward pass (kinds that compute in float32, such as BatchNormalization, read
 * them as they are); weight gradients come out in it and are converted to float32 for the
 * optimizer. A backend without native half storage (the CPU) computes each op in
 * float32 through core's widening (gc_op_run): storage precision as on the GPU, float32
 * arithmetic. Loss, metrics and the update are in loss.c and update.c; device-resident
 * training and CUDA graphs in resident.c. */
#include "plan_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ------------------------------------------------------------------ tensors */

int64_t gc_numel(const int64_t *shape, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

gc_tensor gc_btd(void *data, gc_dtype dt, int64_t rows, const int64_t *shape, int nd)
{
    gc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = nd + 1;
    t.shape[0] = rows;
    for (int i = 0; i < nd; i++) t.shape[i + 1] = shape[i];
    return t;
}

gc_tensor gc_t1(void *data, gc_dtype dt, int64_t n) { return gc_tensor_make(data, dt, 1, &n); }

gc_tensor gc_t2(void *data, gc_dtype dt, int64_t r, int64_t c)
{
    gc_tensor t = gc_t1(data, dt, r);
    t.ndim = 2;
    t.shape[1] = c;
    return t;
}

gc_tensor gc_none(void)
{
    gc_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

/* ------------------------------------------------------------------ running ops */

static double now_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double gc_plan_clock(gc_plan *p)
{
    p->be->sync(p->be);
    return now_seconds();
}

static gc_status run_call(gc_plan *p, const gc_op_call *c)
{
    if (p->checking && p->trace) p->trace(p->trace_ctx, c, p->cur_node, p->cur_phase, -1.0);
    if (p->profiling && !p->checking) {
        TRY(p->be->sync(p->be));
        double t0 = now_seconds();
        gc_status s = p->widen ? gc_op_run(p->be, c) : p->be->ops[c->op](p->be, c);
        gc_status e = p->be->sync(p->be);
        double t1 = now_seconds();
        if (s == GC_OK) s = e;
        if (s == GC_OK && p->trace) p->trace(p->trace_ctx, c, p->cur_node, p->cur_phase, t1 - t0);
        return s;
    }
    if (p->checking) {
        gc_status s = gc_op_validate(c);
        if (s) return s;
        if (!p->be->ops[c->op])
            return gc_fail(GC_ERR_UNSUPPORTED, "%s: not implemented on backend '%s'", gc_op_name(c->op),
                           p->be->name);
        return GC_OK;
    }
    if (p->widen) return gc_op_run(p->be, c); /* half storage, float32 compute */
    return p->be->ops[c->op](p->be, c);
}

gc_status gc_plan_run_n(gc_plan *p, gc_op op, const void *params, const gc_tensor *const *in, int n_in,
                        gc_tensor *const *out, int n_out)
{
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.params = params;
    for (int k = 0; k < n_in && k < GC_MAX_OP_IN; k++) c.in[k] = in[k];
    for (int k = 0; k < n_out && k < GC_MAX_OP_OUT; k++) c.out[k] = out[k];
    return run_call(p, &c);
}

gc_status gc_plan_run(gc_plan *p, gc_op op, const void *params, const gc_tensor *i0, const gc_tensor *i1,
                      const gc_tensor *i2, gc_tensor *o0, gc_tensor *o1, gc_tensor *o2)
{
    const gc_tensor *in[3] = {i0, i1, i2};
    gc_tensor *out[3] = {o0, o1, o2};
    return gc_plan_run_n(p, op, params, in, 3, out, 3);
}

gc_status gc_plan_cast(gc_plan *p, const void *x, gc_dtype xdt, void *y, gc_dtype ydt, int64_t n)
{
    gc_no_params none = {0};
    gc_tensor tx = gc_t1((void *)x, xdt, n), ty = gc_t1(y, ydt, n);
    return gc_plan_run(p, GC_OP_CAST, &none, &tx, NULL, NULL, &ty, NULL, NULL);
}

gc_status gc_plan_copy(gc_plan *p, void *dst, const void *src, size_t bytes)
{
    if (p->checking || dst == src || bytes == 0) return GC_OK;
    return p->be->copy(p->be, dst, src, bytes);
}

/* ------------------------------------------------------------------ memory */

static gc_status alloc_bytes(gc_plan *p, size_t bytes, void **out)
{
    if (p->n_blocks == p->cap_blocks) {
        int cap = p->cap_blocks ? 2 * p->cap_blocks : 64;
        plan_block *b = realloc(p->blocks, (size_t)cap * sizeof *b);
        if (!b) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        p->blocks = b;
        p->cap_blocks = cap;
    }
    if (bytes == 0) bytes = 4;
    TRY(p->be->alloc(p->be, bytes, out));
    p->blocks[p->n_blocks] = (plan_block){*out, bytes, p->mem_what ? p->mem_what : "other", p->mem_node};
    p->n_blocks++;
    p->bytes += (int64_t)bytes;
    return p->be->fill_zero(p->be, *out, bytes);
}

gc_status gc_plan_alloc(gc_plan *p, int64_t n, gc_dtype dt, void **out)
{
    return alloc_bytes(p, (size_t)(n > 0 ? n : 1) * gc_dtype_size(dt), out);
}

/* Buffers whose lives are known intervals [start, end] of one schedule: a request reuses
 * the smallest block already allocated that is free by its start and large enough, else
 * gets a new block. Requests must come in order of start. */
typedef struct {
    void *ptr;
    size_t bytes;
    int busy_until;
} pool_block;

typedef struct {
    pool_block *b;
    int n, cap;
} pool;

static gc_status pool_get(gc_plan *p, pool *pl, size_t bytes, int start, int end, void **out)
{
    int best = -1;
    for (int i = 0; i < pl->n; i++)
        if (pl->b[i].busy_until < start && pl->b[i].bytes >= bytes &&
            (best < 0 || pl->b[i].bytes < pl->b[best].bytes))
            best = i;
    if (best < 0) {
        if (pl->n == pl->cap) {
            int cap = pl->cap ? 2 * pl->cap : 32;
            pool_block *nb = realloc(pl->b, (size_t)cap * sizeof *nb);
            if (!nb) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
            pl->b = nb;
            pl->cap = cap;
        }
        void *ptr;
        TRY(alloc_bytes(p, bytes, &ptr));
        pl->b[pl->n] = (pool_block){ptr, bytes, -1};
        best = pl->n++;
    }
    pl->b[best].busy_until = end;
    *out = pl->b[best].ptr;
    return GC_OK;
}

/* Buffers of a training step laid out in one block, offline: each request (bytes, live
 * from `start` to `end` on the step's schedule, inclusive) gets an offset such that no two
 * requests whose lives overlap overlap in memory -- greedy by size (largest first, each
 * at the lowest offset that fits among those already placed that it meets in time), the
 * usual offline tensor-memory planner. Unlike reusing whole blocks, a large gradient late
 * in the backward pass can take the room of several smaller activations freed before it,
 * so the block is close to the largest set of buffers live at one time. */
typedef struct {
    size_t bytes, off;
    int start, end;
    int start2, end2; /* a second life, or -1: the buffer is refilled then (a recomputed output) */
    void **dst;
    const char *what;
    int node;
} arena_req;

typedef struct {
    arena_req *r;
    int n, cap;
} arena;

#define ARENA_ALIGN 256

static gc_status arena_add2(arena *a, size_t bytes, int start, int end, int start2, int end2, void **dst,
                            const char *what, int node)
{
    if (a->n == a->cap) {
        int cap = a->cap ? 2 * a->cap : 64;
        arena_req *nr = realloc(a->r, (size_t)cap * sizeof *nr);
        if (!nr) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        a->r = nr;
        a->cap = cap;
    }
    a->r[a->n++] = (arena_req){(bytes + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN, 0, start, end, start2, end2,
                               dst, what, node};
    return GC_OK;
}

static gc_status arena_add(arena *a, size_t bytes, int start, int end, void **dst, const char *what, int node)
{
    return arena_add2(a, bytes, start, end, -1, -1, dst, what, node);
}

static int lives_meet(int s0, int e0, int s1, int e1) { return s0 >= 0 && s1 >= 0 && s0 <= e1 && s1 <= e0; }

/* some life of a meets some life of b: they cannot share memory */
static int reqs_meet(const arena_req *a, const arena_req *b)
{
    return lives_meet(a->start, a->end, b->start, b->end) || lives_meet(a->start, a->end, b->start2, b->end2) ||
           lives_meet(a->start2, a->end2, b->start, b->end) || lives_meet(a->start2, a->end2, b->start2, b->end2);
}

static int arena_by_size(const void *x, const void *y)
{
    const arena_req *a = *(const arena_req *const *)x, *b = *(const arena_req *const *)y;
    if (a->bytes != b->bytes) return a->bytes < b->bytes ? 1 : -1;
    return a->start - b->start; /* fixed order: the layout is the same on every run */
}

static int off_cmp(const void *x, const void *y)
{
    const arena_req *a = *(const arena_req *const *)x, *b = *(const arena_req *const *)y;
    return a->off < b->off ? -1 : a->off > b->off;
}

static gc_status arena_commit(gc_plan *p, arena *a)
{
    if (a->n == 0) return GC_OK;
    arena_req **order = malloc((size_t)a->n * sizeof *order), **met = malloc((size_t)a->n * sizeof *met);
    if (!order || !met) {
        free(order), free(met);
        return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    }
    for (int i = 0; i < a->n; i++) order[i] = &a->r[i];
    qsort(order, (size_t)a->n, sizeof *order, arena_by_size);
    size_t total = 0;
    for (int i = 0; i < a->n; i++) {
        arena_req *q = order[i];
        if (p->no_reuse) { /* each buffer its own memory: the reference the tests compare with */
            q->off = total;
            total += q->bytes;
            continue;
        }
        int m = 0;
        for (int j = 0; j < i; j++) /* placed ones whose lives overlap q's */
            if (reqs_meet(order[j], q)) met[m++] = order[j];
        qsort(met, (size_t)m, sizeof *met, off_cmp);
        size_t off = 0;
        for (int j = 0; j < m; j++) { /* the first gap from the bottom that holds q */
            if (met[j]->off >= off + q->bytes) break;
            if (met[j]->off + met[j]->bytes > off) off = met[j]->off + met[j]->bytes;
        }
        q->off = off;
        if (off + q->bytes > total) total = off + q->bytes;
    }
    free(order), free(met);
    void *base;
    p->mem_what = "step_block";
    p->mem_node = -1;
    TRY(alloc_bytes(p, total, &base));
    for (int i = 0; i < a->n; i++) *a->r[i].dst = (char *)base + a->r[i].off;
    p->arena_map = malloc((size_t)(unsigned)a->n * sizeof *p->arena_map);
    if (!p->arena_map) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    for (int i = 0; i < a->n; i++)
        p->arena_map[i] = (gc_plan_mem_entry){a->r[i].what, a->r[i].node, (int64_t)a->r[i].bytes,
                                              (int64_t)a->r[i].off, a->r[i].start, a->r[i].end,
                                              a->r[i].start2, a->r[i].end2};
    p->n_arena_map = a->n;
    return GC_OK;
}

/* ------------------------------------------------------------------ what kinds use */

void *gc_node_input(const gc_plan *p, const plan_node *l, int k)
{
    return l->xc[k] ? l->xc[k] : p->L[l->in[k]].out;
}

void *gc_node_weight(const plan_node *l, int k) { return l->w[k].wc ? l->w[k].wc : l->w[k].w; }

static const plan_node *producer(const gc_plan *p, const plan_node *l, int k) { return &p->L[l->in[k]]; }

gc_tensor gc_node_in_tensor(const gc_plan *p, const plan_node *l, int k, int64_t rows)
{
    const plan_node *src = producer(p, l, k);
    return gc_btd(gc_node_input(p, l, k), l->dt, rows, src->d.out_shape, src->d.out_ndim);
}

gc_tensor gc_node_out_tensor(const plan_node *l, int64_t rows)
{
    return gc_btd(l->out, l->dt, rows, l->d.out_shape, l->d.out_ndim);
}

gc_tensor gc_node_gout_tensor(const plan_node *l, int64_t rows)
{
    return gc_btd(l->gout, l->dt, rows, l->d.out_shape, l->d.out_ndim);
}

/* the gradient w.r.t. input k goes straight into the producer's gout unless it must be
 * cast (another dtype) or added to a gradient already there (fan-out) */
static int direct(const gc_plan *p, const plan_node *l, int k)
{
    return !l->in_accum[k] && producer(p, l, k)->dt == l->dt;
}

gc_tensor gc_node_gin_tensor(gc_plan *p, const plan_node *l, int k, int64_t rows)
{
    const plan_node *src = producer(p, l, k);
    void *dst = direct(p, l, k) ? src->gout : p->gtmp;
    return gc_btd(dst, l->dt, rows, src->d.out_shape, src->d.out_ndim);
}

/* src (l->dt, input k's shape): the gradient w.r.t. input k, into the producer's gout */
static gc_status give(gc_plan *p, const plan_node *l, int k, void *src, int64_t rows)
{
    const plan_node *P = producer(p, l, k);
    int64_t n = rows * l->in_numel[k];
    void *g = src;
    if (P->dt != l->dt) { /* back to the producer's dtype */
        void *dst = l->in_accum[k] ? p->gtmp2 : P->gout;
        TRY(gc_plan_cast(p, src, l->dt, dst, P->dt, n));
        if (!l->in_accum[k]) return GC_OK;
        g = dst;
    }
    if (l->in_accum[k]) {
        gc_act_params ap = {GC_ACT_LINEAR};
        gc_tensor acc = gc_t1(P->gout, P->dt, n), add = gc_t1(g, P->dt, n);
        return gc_plan_run(p, GC_OP_ADD, &ap, &acc, &add, NULL, &acc, NULL, NULL);
    }
    return gc_plan_copy(p, P->gout, g, (size_t)n * gc_dtype_size(P->dt));
}

gc_status gc_node_deliver(gc_plan *p, const plan_node *l, int k, int64_t rows)
{
    if (direct(p, l, k)) return GC_OK;
    return give(p, l, k, p->gtmp, rows);
}

int gc_node_gin_direct(const gc_plan *p, const plan_node *l, int k) { return direct(p, l, k); }

int gc_node_gin_adds(const gc_plan *p, const plan_node *l, int k)
{
    return p->fusions && l->in_accum[k] && producer(p, l, k)->dt == l->dt;
}

gc_status gc_node_pass_grad(gc_plan *p, const plan_node *l, int k, void *src, int64_t rows)
{
    return give(p, l, k, src, rows);
}

gc_act gc_node_act(const gc_plan *p, const plan_node *l, run_mode mode)
{
    if (p->fused && l->idx == p->n - 1 && mode != MODE_PREDICT) return GC_ACT_LINEAR;
    return l->d.act;
}

gc_status gc_node_dz(gc_plan *p, const plan_node *l, int64_t rows, gc_tensor *dz)
{
    gc_act act = gc_node_act(p, l, MODE_TRAIN);
    *dz = gc_node_gout_tensor(l, rows);
    if (act == GC_ACT_LINEAR || l->gout_masked) return GC_OK;
    gc_act_params ap = {act};
    gc_tensor y = gc_node_out_tensor(l, rows), gy = *dz;
    *dz = gc_btd(p->scratch, l->dt, rows, l->d.out_shape, l->d.out_ndim);
    return gc_plan_run(p, GC_OP_ACT_BWD, &ap, &y, &gy, NULL, dz, NULL, NULL);
}

int gc_node_trains_weight(const plan_node *l, int k) { return l->w[k].trains; }

/* ------------------------------------------------------------------ forward / backward */

gc_status gc_plan_forward(gc_plan *p, int64_t rows, run_mode mode, uint64_t seed)
{
    p->cur_phase = "forward";
    const int fused = p->wcast_slots && gc_plan_casts_fused(p);
    if (fused) { /* every float32 master weight cast for this pass, one launch */
        p->cur_node = -1;
        double t0 = p->profiling ? gc_plan_clock(p) : 0.0;
        TRY(p->be->cast_multi(p->be, (const gc_cast_slot *)p->wcast_slots, p->n_wcast, p->max_wcast_n, 1.0f, NULL,
                              0, NULL));
        if (p->profiling && p->trace) /* not an op of the list: reported with call == NULL */
            p->trace(p->trace_ctx, NULL, GC_TRACE_CAST_MULTI, "forward", gc_plan_clock(p) - t0);
    }
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        p->cur_node = i;
        for (int k = 0; k < l->n_in; k++) /* Keras casts a layer's inputs to its compute dtype */
            if (l->xc[k]) {
                const plan_node *src = producer(p, l, k);
                TRY(gc_plan_cast(p, src->out, src->dt, l->xc[k], l->dt, rows * l->in_numel[k]));
            }
        for (int k = 0; k < l->n_w && !fused; k++) /* float32 master weights, cast for this pass */
            if (l->w[k].wc) TRY(gc_plan_cast(p, l->w[k].w, GC_F32, l->w[k].wc, l->dt, l->w[k].n));
        if (l->ops->forward && !l->absorbed) TRY(l->ops->forward(p, l, rows, mode, seed));
    }
    return GC_OK;
}

gc_status gc_plan_backward(gc_plan *p, int64_t rows, uint64_t seed)
{
    p->cur_phase = "backward";
    p->cur_rows = rows; /* the rows this step's gradients are a mean over (replicas.c) */
    for (int i = p->n - 1; i >= 0; i--) {
        plan_node *l = &p->L[i];
        p->cur_node = i;
        for (int j = l->refill_head; j >= 0; j = p->L[j].refill_next) { /* outputs not kept: refill */
            p->cur_node = j;
            TRY(p->L[j].ops->refill(p, &p->L[j], rows));
        }
        p->cur_node = i;
        int any = l->trains;
        for (int k = 0; k < l->n_in; k++) any |= l->in_grad[k];
        if (!any || !l->ops->backward || l->absorbed) continue;
        p->scratch = l->bscratch, p->gtmp = l->bgtmp, p->gtmp2 = l->bgtmp2; /* this node's temporaries */
        TRY(l->ops->backward(p, l, rows, seed));
    }
    return GC_OK;
}

/* ------------------------------------------------------------------ entry points */

int gc_plan_num_inputs(const gc_plan *p) { return p ? p->n_inputs : 0; }

int64_t gc_plan_input_numel(const gc_plan *p, int k)
{
    if (!p || k < 0 || k >= p->n_inputs) return 0;
    return p->L[p->input_node[k]].out_numel;
}

int64_t gc_plan_bytes(const gc_plan *p) { return p ? p->bytes : 0; }

int gc_plan_memory(const gc_plan *p, gc_plan_mem_entry *out, int cap)
{
    if (!p) return 0;
    int n = 0;
    for (int i = 0; i < p->n_blocks; i++, n++)
        if (n < cap)
            out[n] = (gc_plan_mem_entry){p->blocks[i].what, p->blocks[i].node, (int64_t)p->blocks[i].bytes, -1, -1, -1,
                                         -1, -1};
    for (int i = 0; i < p->n_arena_map; i++, n++)
        if (n < cap) out[n] = p->arena_map[i];
    return n;
}

gc_status gc_plan_profile(gc_plan *p, const float *const *x, const void *y, int64_t rows,
                          const gc_opt_hparams *hp, gc_plan_trace_fn fn, void *ctx)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    gc_step_stats st;
    p->profiling = 1;
    p->trace = fn;
    p->trace_ctx = ctx;
    gc_status s = gc_plan_train_step(p, x, y, rows, hp, 0, &st);
    p->profiling = 0;
    p->trace = NULL;
    return s;
}

gc_status gc_plan_trace(gc_plan *p, int64_t rows, int train, gc_plan_trace_fn fn, void *ctx)
{
    if (!p) return gc_fail(GC_ERR_INVALID_ARG, "plan: missing");
    if (train && !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    p->checking = 1;
    p->trace = fn;
    p->trace_ctx = ctx;
    gc_status s;
    if (train) {
        gc_step_stats st;
        gc_opt_hparams hp = {p->train.opt, 0.001f, 0.9f, 0.999f, 1e-7f, 0.0f, 0.9f, 0, 1, 1.0f, 0.0f};
        if (p->train.opt == GC_OPT_SGD && p->state_copy) hp.momentum = 0.9f;
        s = gc_plan_train_step(p, NULL, NULL, rows, &hp, 1, &st);
    } else {
        s = gc_plan_predict(p, NULL, rows, NULL);
    }
    p->checking = 0;
    p->trace = NULL;
    return s;
}

static gc_status check_rows(const gc_plan *p, int64_t rows)
{
    if (rows < 1 || rows > p->max_batch)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batch of %lld rows, expected 1..%lld",
                       (long long)rows, (long long)p->max_batch);
    return GC_OK;
}

gc_status gc_plan_upload_batch(gc_plan *p, const float *const *x, const void *y, int64_t rows)
{
    if (p->checking) return GC_OK;
    if (!x) return gc_fail(GC_ERR_INVALID_ARG, "plan: no input arrays");
    for (int k = 0; k < p->n_inputs; k++)
        if (!x[k]) return gc_fail(GC_ERR_INVALID_ARG, "plan: input %d is missing", k);
    TRY(gc_plan_stage_begin(p));
    for (int k = 0; k < p->n_inputs; k++) {
        const plan_node *in = &p->L[p->input_node[k]];
        char what[32];
        snprintf(what, sizeof what, "input %d", k);
        TRY(gc_plan_stage_put_floats(p, in->out, x[k], (size_t)(rows * in->out_numel), what));
    }
    if (y && p->sparse)
        TRY(gc_plan_stage_put(p, p->y, y, (size_t)rows * (size_t)p->rows_per_sample * sizeof(int32_t)));
    else if (y)
        TRY(gc_plan_stage_put_floats(p, p->y, (const float *)y, (size_t)rows * (size_t)p->out_numel, "the label array"));
    return GC_OK;
}

/* A replica with no rows of this step (a last batch smaller than the group): a zero
 * gradient weighted by zero rows, and the same update as the others. */
static gc_status idle_replica_step(gc_plan *p, const gc_opt_hparams *hp, gc_step_stats *st)
{
    memset(st, 0, sizeof *st);
    TRY(gc_plan_loss_scale_begin(p, hp));
    p->cur_rows = 0;
    TRY(gc_plan_update(p, hp));
    TRY(gc_plan_loss_scale_end(p, st));
    st->steps_applied = p->train.loss_scaling && st->loss_scale < hp->loss_scale ? 0 : 1;
    return GC_OK;
}

static gc_status train_step(gc_plan *p, const float *const *x, const void *y, int64_t rows,
                            const gc_opt_hparams *hp, uint64_t seed, gc_step_stats *st)
{
    if (rows == 0 && p->group) return idle_replica_step(p, hp, st);
    TRY(check_rows(p, rows));
    memset(st, 0, sizeof *st);
    if (gc_plan_batch_graph_eligible(p)) return gc_plan_batch_graph_step(p, x, y, rows, hp, seed, st);
    TRY(gc_plan_loss_scale_begin(p, hp));
    TRY(gc_plan_upload_batch(p, x, y, rows));
    TRY(gc_plan_forward(p, rows, MODE_TRAIN, seed));
    TRY(gc_plan_loss_and_metrics(p, rows, 1, st));
    TRY(gc_plan_backward(p, rows, seed));
    TRY(gc_plan_update(p, hp));
    TRY(gc_plan_loss_scale_end(p, st));
    /* one step: skipped exactly when the scale went down */
    st->steps_applied = p->train.loss_scaling && !p->checking && st->loss_scale < hp->loss_scale ? 0 : 1;
    return GC_OK;
}

gc_status gc_plan_train_step(gc_plan *p, const float *const *x, const void *y, int64_t rows,
                             const gc_opt_hparams *hp, uint64_t seed, gc_step_stats *st)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    gc_status s = train_step(p, x, y, rows, hp, seed, st);
    if (s && p->group) gc_replica_group_abort(p->group); /* the other replicas must not wait for this one */
    return s;
}

gc_status gc_plan_eval_step(gc_plan *p, const float *const *x, const void *y, int64_t rows,
                            gc_step_stats *st)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled with a loss");
    TRY(check_rows(p, rows));
    memset(st, 0, sizeof *st);
    TRY(gc_plan_upload_batch(p, x, y, rows));
    TRY(gc_plan_forward(p, rows, MODE_EVAL, 0));
    return gc_plan_loss_and_metrics(p, rows, 0, st);
}

/* the device work of a predict: the forward pass and the float32 copy of the output */
static gc_status predict_work(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    (void)hp;
    TRY(gc_plan_forward(p, rows, MODE_PREDICT, 0));
    const plan_node *last = &p->L[p->n - 1];
    if (p->logits32) /* predictions come back as float32 */
        TRY(gc_plan_cast(p, last->out, last->dt, p->logits32, GC_F32, rows * p->out_numel));
    return GC_OK;
}

/* A full-size predict replays a captured graph where the backend can (a GAN's generator
 * is called once per iteration: its launches are the call's cost): the first one runs
 * eagerly (workspaces, library handles), the second captures. Not with an embedding
 * (its id checks report through the eager path) or while checking / profiling. */
static int predict_graph_eligible(const gc_plan *p, int64_t rows)
{
    if (rows != p->max_batch || !gc_plan_batch_graph_eligible(p)) return 0;
    for (int i = 0; i < p->n; i++)
        if (p->L[i].d.kind == GC_LAYER_EMBEDDING) return 0;
    return 1;
}

void gc_plan_drop_predict_graph(gc_plan *p)
{
    if (p->predict_graph) p->be->graph_destroy(p->be, p->predict_graph);
    p->predict_graph = NULL;
    p->predict_warm_rows = 0;
}

gc_status gc_plan_predict(gc_plan *p, const float *const *x, int64_t rows, float *out)
{
    if (!p) return gc_fail(GC_ERR_INVALID_ARG, "plan: missing");
    TRY(check_rows(p, rows));
    TRY(gc_plan_upload_batch(p, x, NULL, rows));
    if (predict_graph_eligible(p, rows) && p->predict_warm_rows >= 0) {
        /* a capture that fails (a node with host work in its forward) leaves this plan's
         * predicts eager for good, and the call runs eagerly as before */
        if (!p->predict_graph && p->predict_warm_rows == rows &&
            gc_plan_capture(p, predict_work, rows, NULL, &p->predict_graph) != GC_OK) {
            gc_clear_error();
            p->predict_warm_rows = -1;
        }
        if (p->predict_graph) {
            p->replays++;
            TRY(p->be->graph_launch(p->be, p->predict_graph));
        } else {
            TRY(predict_work(p, rows, NULL));
            if (p->predict_warm_rows == 0) p->predict_warm_rows = rows;
        }
    } else {
        TRY(predict_work(p, rows, NULL));
    }
    if (p->checking) return GC_OK;
    const void *res = p->logits32 ? p->logits32 : p->L[p->n - 1].out;
    return gc_plan_download(p, out, res, (size_t)(rows * p->out_numel) * sizeof(float));
}

void gc_plan_destroy(gc_plan *p)
{
    if (!p) return;
    const gc_backend *be = p->be;
    gc_plan_release_resident(p);
    gc_plan_stage_free(p);
    if (p->graph && be->graph_destroy) be->graph_destroy(be, p->graph);
    if (p->batch_graph && be->graph_destroy) be->graph_destroy(be, p->batch_graph);
    if (p->predict_graph && be->graph_destroy) be->graph_destroy(be, p->predict_graph);
    for (int i = 0; i < p->n_blocks; i++) be->release(be, p->blocks[i].ptr);
    free(p->blocks);
    free(p->arena_map);
    free(p->L);
    free(p->host_rows);
    free(p->state_copy);
    free(p);
}

/* ------------------------------------------------------------------ creation: the graph */

static gc_status resolve_inputs(gc_plan *p, const gc_layer_desc *nodes, int n)
{
    int explicit_inputs = 0;
    for (int i = 0; i < n; i++) explicit_inputs |= nodes[i].kind == GC_LAYER_INPUT;
    /* a list without INPUT nodes: one implicit input node in front (shape: in_shape of
     * node 0), and the nodes form a chain where they name no producers */
    int shift = explicit_inputs ? 0 : 1;
    p->n = n + shift;
    p->L = calloc((size_t)p->n, sizeof *p->L);
    if (!p->L) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    if (shift) {
        plan_node *in = &p->L[0];
        in->d.kind = GC_LAYER_INPUT;
        in->d.out_ndim = nodes[0].in_ndim;
        memcpy(in->d.out_shape, nodes[0].in_shape, sizeof in->d.out_shape);
        in->d.in_ndim = in->d.out_ndim;
        memcpy(in->d.in_shape, in->d.out_shape, sizeof in->d.in_shape);
    }
    for (int j = 0; j < n; j++) {
        plan_node *l = &p->L[j + shift];
        const gc_layer_desc *d = &nodes[j];
        l->d = *d;
        int i = j + shift;
        if ((unsigned)d->kind >= GC_LAYER_COUNT)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d has unknown kind %d", j, (int)d->kind);
        if (d->kind == GC_LAYER_INPUT) {
            if (d->n_inputs)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: input node %d cannot take inputs", j);
            if (p->n_inputs == GC_NODE_MAX_INPUTS)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: more than %d model inputs", GC_NODE_MAX_INPUTS);
            l->d.in_ndim = d->out_ndim;
            memcpy(l->d.in_shape, d->out_shape, sizeof l->d.in_shape);
            continue;
        }
        if (d->n_inputs < 0 || d->n_inputs > GC_NODE_MAX_INPUTS)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d has %d inputs (at most %d)", j, d->n_inputs,
                           GC_NODE_MAX_INPUTS);
        if (d->n_inputs == 0) {
            if (i == 0)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: node 0 (%s) has no input", gc_layer_ops_of(d->kind)
                               ? gc_layer_ops_of(d->kind)->name : "?");
            l->n_in = 1;
            l->in[0] = i - 1;
        } else {
            l->n_in = d->n_inputs;
            for (int k = 0; k < d->n_inputs; k++) {
                int src = d->inputs[k] + shift;
                if (d->inputs[k] < 0 || src >= i)
                    return gc_fail(GC_ERR_INVALID_ARG,
                                   "plan: node %d input %d refers to node %d; inputs must be earlier nodes "
                                   "(a graph in topological order, no cycles)", j, k, d->inputs[k]);
                l->in[k] = src;
            }
        }
    }
    for (int i = 0; i < p->n; i++)
        if (p->L[i].d.kind == GC_LAYER_INPUT) p->input_node[p->n_inputs++] = i;
    return GC_OK;
}

static void count_consumers(gc_plan *p)
{
    for (int i = 0; i < p->n; i++) p->L[i].n_consumers = p->L[i].last_consumer = 0;
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        for (int k = 0; k < l->n_in; k++) {
            plan_node *src = &p->L[l->in[k]];
            src->n_consumers++;
            src->last_consumer = i;
        }
    }
}

static gc_status check_nodes(gc_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        gc_layer_desc *d = &l->d;
        l->idx = i;
        l->ops = gc_layer_ops_of(d->kind);
        if (!l->ops)
            return gc_fail(GC_ERR_UNSUPPORTED, "plan: node %d: layer kind %d is not supported by the plan yet", i,
                           (int)d->kind);
        if (d->dtype != GC_F32 && d->dtype != GC_F16 && d->dtype != GC_BF16)
            return gc_fail(GC_ERR_DTYPE, "plan: node %d (%s) has compute dtype %s; expected float32, float16 "
                           "or bfloat16", i, l->ops->name, gc_dtype_name(d->dtype));
        if (d->out_ndim < 1 || d->out_ndim > GC_MAX_DIMS - 1)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d (%s) has output rank %d, expected 1..%d", i,
                           l->ops->name, d->out_ndim, GC_MAX_DIMS - 1);
        for (int k = 0; k < d->out_ndim; k++)
            if (d->out_shape[k] < 1)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d (%s) output extent %d is %lld", i, l->ops->name,
                               k, (long long)d->out_shape[k]);
        l->out_numel = gc_numel(d->out_shape, d->out_ndim);
        l->alias_of = -1;
        if (d->kind == GC_LAYER_INPUT) {
            l->dt = GC_F32;
            continue;
        }
        if (l->n_in < l->ops->min_inputs || l->n_in > l->ops->max_inputs)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d (%s) takes %d..%d inputs, got %d", i, l->ops->name,
                           l->ops->min_inputs, l->ops->max_inputs, l->n_in);
        int64_t shapes[GC_NODE_MAX_INPUTS][GC_MAX_DIMS - 1];
        int nds[GC_NODE_MAX_INPUTS];
        for (int k = 0; k < l->n_in; k++) {
            const plan_node *src = &p->L[l->in[k]];
            nds[k] = src->d.out_ndim;
            memcpy(shapes[k], src->d.out_shape, sizeof shapes[k]);
            l->in_numel[k] = src->out_numel;
        }
        /* the descriptor's in_shape must be what its first input produces */
        int same = d->in_ndim == nds[0];
        for (int k = 0; same && k < nds[0]; k++) same = d->in_shape[k] == shapes[0][k];
        if (!same)
            return gc_fail(GC_ERR_INVALID_ARG,
                           "plan: node %d (%s) expects the output shape of node %d as its input", i, l->ops->name,
                           l->in[0]);
        if (l->ops->check) TRY(l->ops->check(d, i, l->n_in, (const int64_t(*)[GC_MAX_DIMS - 1])shapes, nds));
        /* a view keeps its input's dtype */
        l->is_view = l->ops->is_view;
        l->alias_of = l->is_view ? l->in[0] : -1;
        l->dt = l->is_view ? p->L[l->in[0]].dt : d->dtype;
        /* weights */
        int64_t wn[GC_LAYER_MAX_WEIGHTS] = {0};
        int wt[GC_LAYER_MAX_WEIGHTS] = {0};
        if (l->ops->weights) l->ops->weights(d, shapes[0], wn, wt);
        for (int k = 0; k < GC_LAYER_MAX_WEIGHTS; k++) {
            if (!wn[k]) {
                if (d->weights[k])
                    return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d (%s) has no weight slot %d", i, l->ops->name, k);
                continue;
            }
            l->w[k].w = d->weights[k];
            l->w[k].n = wn[k];
            l->w[k].trains = p->training && d->trainable && wt[k] && d->weights[k];
            l->trains |= l->w[k].trains;
            if (k + 1 > l->n_w) l->n_w = k + 1;
        }
    }
    /* every node but the output feeds some node */
    count_consumers(p);
    for (int i = 0; i < p->n - 1; i++)
        if (!p->L[i].n_consumers && !(p->training && p->train.has_loss_mask && i == p->train.loss_mask_node))
            return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d (%s) feeds no other node and is not the output "
                           "(the last node)", i, p->L[i].ops->name);
    if (p->L[p->n - 1].d.kind == GC_LAYER_INPUT && p->n > 1)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: the output node is a model input");
    return GC_OK;
}

/* which gradients are needed, and which consumer of a fanned-out node writes first */
static gc_status analyse_gradients(gc_plan *p)
{
    if (!p->training) return GC_OK;
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        if (l->absorbed) { /* its gradient is that of the node it was folded into */
            l->grad_needed = p->L[l->alias_of].grad_needed;
            continue;
        }
        int g = l->trains;
        for (int k = 0; k < l->n_in; k++) {
            l->in_grad[k] = !l->ops->raw_inputs && !p->L[l->in[k]].ops->raw_output && /* ids, masks: none */
                            p->L[l->in[k]].grad_needed;
            g |= l->in_grad[k];
        }
        l->grad_needed = g;
    }
    /* backward runs in reverse order: per producer, the first gradient to arrive is
     * written, later ones are added (within one node, the lower input slot first) */
    int *seen = calloc((size_t)p->n, sizeof *seen);
    if (!seen) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    for (int i = p->n - 1; i >= 0; i--) {
        plan_node *l = &p->L[i];
        for (int k = 0; k < l->n_in; k++) {
            if (!l->in_grad[k]) continue;
            int src = l->in[k];
            l->in_accum[k] = seen[src];
            seen[src] = 1;
        }
    }
    free(seen);
    return GC_OK;
}

/* Node fusions, decided once before any buffer exists (GPUCMP_PLAN_FUSE=0 turns them
 * off, for tests that compare both): a ReLU Activation after a BatchNormalization or an
 * Add becomes that node's epilogue, and a BatchNormalization whose only consumer is a
 * two-input Add takes the Add's other input as a residual (y = act(bn(x) + r)): the
 * absorbed nodes do no work, their output and gradient are the fused node's. Each
 * folded value must have no other reader and one dtype, and the residual must be
 * computed before the batch norm (Keras' ResNet builds the shortcut first). */
static int fusable(const gc_plan *p, const plan_node *src, const plan_node *l)
{
    return src->n_consumers == 1 && src->idx != p->n - 1 && src->dt == l->dt && !src->absorbed;
}

static void absorb(gc_plan *p, plan_node *l, plan_node *into)
{
    l->absorbed = 1;
    l->alias_of = into->idx;
    l->n_in = 0;
    (void)p;
}

static int alias_root(const gc_plan *p, int i);

/* the output of src is a ReLU's (>= 0, or NaN): a batch norm / add with the ReLU folded
 * in, a ReLU, or a dense / conv with a relu activation */
static int relu_output(const plan_node *src)
{
    switch (src->d.kind) {
    case GC_LAYER_BATCHNORM:
    case GC_LAYER_ADD:
    case GC_LAYER_ACTIVATION:
    case GC_LAYER_DENSE:
    case GC_LAYER_CONV2D: return src->d.act == GC_ACT_RELU;
    default: return 0;
    }
}

/* Node fusions (GPUCMP_PLAN_FUSE=0 turns them off): a ReLU into the batch norm / add
 * before it; a residual Add (+ ReLU) into the batch norm of one of its inputs; a
 * ZeroPadding2D whose only reader is a 'valid' max pool into that pool, as explicit pads
 * (padded cells never win) when what it pads is a ReLU's output: over x >= 0 a padded 0
 * never beats a real cell except a -0.0 (the value, not the gradient: relu'(0) = 0), so
 * the padded copy (ResNet-50's stem: 0.4 GiB at batch 256 in bf16), its backward crop and
 * its refill go. */
static void fuse_nodes(gc_plan *p)
{
    const char *env = getenv("GPUCMP_PLAN_FUSE");
    if (env && env[0] == '0') return;
    p->fusions = 1;
    for (int i = 0; i < p->n; i++) { /* bn / add + relu */
        plan_node *l = &p->L[i];
        if (l->d.kind != GC_LAYER_ACTIVATION || l->d.act != GC_ACT_RELU || l->n_in != 1) continue;
        plan_node *src = &p->L[l->in[0]];
        if ((src->d.kind == GC_LAYER_BATCHNORM || src->d.kind == GC_LAYER_ADD) && src->d.act == GC_ACT_LINEAR &&
            fusable(p, src, l)) {
            src->d.act = GC_ACT_RELU;
            absorb(p, l, src);
        }
    }
    for (int i = 0; i < p->n; i++) { /* bn + residual add (+ relu) */
        plan_node *add = &p->L[i];
        if (add->d.kind != GC_LAYER_ADD || add->absorbed || add->n_in != 2) continue;
        for (int k = 0; k < 2; k++) {
            plan_node *bn = &p->L[add->in[k]], *res = &p->L[add->in[1 - k]];
            if (bn->d.kind != GC_LAYER_BATCHNORM || bn->n_in != 1 || bn->d.act != GC_ACT_LINEAR ||
                !fusable(p, bn, add) || res->idx >= bn->idx || res->dt != bn->dt || add->in[0] == add->in[1])
                continue;
            bn->n_in = 2;
            bn->in[1] = res->idx;
            bn->in_numel[1] = res->out_numel;
            bn->d.act = add->d.act;
            absorb(p, add, bn);
            break;
        }
    }
    count_consumers(p);
    for (int i = 0; i < p->n; i++) { /* zero padding + max pool over a ReLU's output */
        plan_node *mp = &p->L[i];
        if (mp->d.kind != GC_LAYER_MAXPOOL2D || mp->n_in != 1 || mp->d.pool.padding != GC_PAD_VALID) continue;
        plan_node *pad = &p->L[mp->in[0]];
        if (pad->d.kind != GC_LAYER_PAD2D || pad->n_in != 1 || !fusable(p, pad, mp)) continue;
        plan_node *src = &p->L[alias_root(p, pad->in[0])];
        const int *q = pad->d.pad; /* top, bottom, left, right */
        if (!relu_output(src) || src->dt != mp->dt || q[0] >= mp->d.pool.pool_h || q[1] >= mp->d.pool.pool_h ||
            q[2] >= mp->d.pool.pool_w || q[3] >= mp->d.pool.pool_w)
            continue;
        mp->d.pool.pad_top = q[0], mp->d.pool.pad_bottom = q[1];
        mp->d.pool.pad_left = q[2], mp->d.pool.pad_right = q[3];
        mp->in[0] = pad->in[0];
        mp->in_numel[0] = pad->in_numel[0];
        absorb(p, pad, &p->L[pad->in[0]]);
    }
    count_consumers(p);
}

/* pairings that need the gradient analysis: views sharing their input's gradient, and a
 * ReLU folded into a following max pool's backward */
static void pair_nodes(gc_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        if (l->absorbed) {
            l->gout_alias = 1;
            continue;
        }
        if (!l->is_view) continue;
        /* a view's gradient is its input's gradient buffer when it is the only consumer */
        l->gout_alias = p->L[l->in[0]].n_consumers == 1 && !l->in_accum[0];
    }
    for (int i = 0; i < p->n && p->training; i++) {
        plan_node *l = &p->L[i];
        if (l->d.kind != GC_LAYER_MAXPOOL2D || l->n_in != 1) continue;
        plan_node *prev = &p->L[l->in[0]];
        if ((prev->d.kind == GC_LAYER_DENSE || prev->d.kind == GC_LAYER_CONV2D) && prev->d.act == GC_ACT_RELU &&
            prev->n_consumers == 1 && l->dt == prev->dt && l->in_grad[0] && !l->in_accum[0] &&
            prev->idx != p->n - 1) {
            l->fold_relu = 1;
            prev->gout_masked = 1;
        }
    }
}

/* ------------------------------------------------------------------ creation: buffers */

/* The step's schedule, one time per call: forward of node i at i, the loss at n, the
 * backward of node i at 2n - i (reverse order), the update after 2n. */
#define STEP_END(p) (3 * (p)->n + 2)

/* input k of l is read from a cast of its producer's output (l->xc[k]: another dtype) */
static int needs_cast(const gc_plan *p, const plan_node *l, int k)
{
    const plan_node *src = &p->L[l->in[k]];
    return src->dt != l->dt && !l->ops->is_view && !l->ops->raw_inputs && !src->ops->raw_output;
}

/* whether l's backward, as this plan runs it, reads its input k (k >= 0, from its
 * producer or its cast) or its own output (k = -1): nothing for a node whose backward is
 * skipped (gc_plan_backward's rule), the kind's answer otherwise, all when it has none */
static int bwd_reads(const gc_plan *p, const plan_node *l, int k)
{
    if (!p->training || l->absorbed || !l->ops->backward) return 0;
    int any = l->trains;
    for (int j = 0; j < l->n_in; j++) any |= l->in_grad[j];
    if (!any) return 0;
    return l->ops->bwd_reads ? l->ops->bwd_reads(p, l, k) : 1;
}

static int alias_root(const gc_plan *p, int i)
{
    while (p->L[i].alias_of >= 0) i = p->L[i].alias_of;
    return i;
}

/* Activations. Inference-only plans reuse a buffer once the last consumer of its node has
 * run. Training plans keep each activation until the last call that reads it: its
 * consumers' forward calls, and the backward calls that read it -- its own where its
 * backward reads its output (a mask, an output-based derivative), each consumer's that
 * reads that input (a weight gradient, batch norm's x; not a residual, a padding, an
 * add) -- so an output that only the forward reads (a shortcut's batch norm, added to a
 * residual) is free at once. The model's output lives to the end of the step (loss,
 * metrics, returned predictions); a node read by no other (a loss mask) to its own
 * backward. Views and absorbed nodes share their root's buffer, so their readers count
 * as the root's. Model inputs are live from the upload, before the first call.
 *
 * Refills: a node whose kind can refill its output (padding, batch norm's normalisation:
 * cheap memory-bound passes), whose inputs are still in place at the first backward call
 * that reads the output, keeps the output for the forward only and gets it back just
 * before that call -- a second life of the same buffer. Nodes are decided from the last
 * back, so a refill's own reads of its inputs count for them (a batch norm refilled for a
 * padding refilled for a max pool), and a slot's refills run in node order.
 *
 * Training buffers come from `shared`, the block the gradients then draw from
 * (alloc_gradients), so a gradient reuses the memory of activations the backward pass is
 * done with, as a framework that frees saved tensors during backward does; views take
 * their root's buffer once the block is placed (resolve_views). GPUCMP_PLAN_REUSE=0
 * turns the refills off (and arena_commit the sharing), for tests that compare both. */
/* whether node q (a root) could get its output back at time t by a refill of its own --
 * its kind refills, no consumer's backward reads it where the kind refills sparingly, and
 * its inputs are in place at t -- so that a refill reading it at t may count on it: the
 * loop of alloc_activations, deciding q after the reader, then refills q for that read
 * (ResNet-50's stem: a batch norm whose backward does not read its output, refilled for
 * the padding refilled for the max pool). Only for readers that refill freely (padding):
 * a second refill for a sparingly refilled reader (a batch norm whose residual is another
 * one's output) put both outputs back at once and raised the backward's peak. */
static int refillable_at(const gc_plan *p, int q, int t, const int *end, const int *direct)
{
    const plan_node *l = &p->L[q];
    if (!l->ops->refill || l->alias_of >= 0 || (l->ops->refill_sparingly && direct[q])) return 0;
    for (int k = 0; k < l->n_in; k++)
        if (needs_cast(p, l, k) || end[alias_root(p, l->in[k])] < t) return 0;
    return 1;
}

static gc_status alloc_activations(gc_plan *p, arena *shared)
{
    pool pl = {0};
    gc_status s = GC_OK;
    const int n = p->n;
    /* per root: end of the first life, the backward reads (first, last; any by a
     * consumer's own backward), refilled */
    int *end = calloc((size_t)(unsigned)n, sizeof *end), *bfirst = calloc((size_t)(unsigned)n, sizeof *bfirst);
    int *blast = calloc((size_t)(unsigned)n, sizeof *blast), *direct = calloc((size_t)(unsigned)n, sizeof *direct);
    int *fwd_end = calloc((size_t)(unsigned)n, sizeof *fwd_end), *recomp = calloc((size_t)(unsigned)n, sizeof *recomp);
    if (!end || !bfirst || !blast || !direct || !fwd_end || !recomp) {
        free(end), free(bfirst), free(blast), free(direct), free(fwd_end), free(recomp);
        return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    }
    const int reuse = !p->no_reuse;
    for (int i = 0; i < n; i++) {
        p->L[i].recompute_at = p->L[i].refill_head = p->L[i].refill_next = -1;
        bfirst[i] = blast[i] = -1;
        end[i] = fwd_end[i] = -1;
        recomp[i] = 0;
    }
    for (int i = 0; i < n; i++) /* recomp[r] = 1 for now: r is the root of some view or absorbed node */
        if (p->L[i].alias_of >= 0) recomp[p->L[i].alias_of] = 1;
#define READ_AT(r, t, by_consumer)                    \
    do {                                              \
        if (bfirst[r] < 0 || (t) < bfirst[r]) bfirst[r] = (t); \
        if ((t) > blast[r]) blast[r] = (t);           \
        direct[r] |= (by_consumer);                   \
    } while (0)
    for (int i = 0; i < n; i++) {
        const plan_node *l = &p->L[i];
        const int r = alias_root(p, i);
        int e;
        if (!p->training) e = i == n - 1 ? n : l->last_consumer;
        else if (i == n - 1) e = STEP_END(p);
        else if (l->absorbed && !l->n_consumers) e = i; /* fused away with its reader (a padding into its pool) */
        else if (!l->n_consumers && !recomp[i]) e = 2 * n - i; /* read by nothing (a loss mask) */
        else e = l->last_consumer;
        if (e < i) e = i;
        if (e > fwd_end[r]) fwd_end[r] = e;
        if (bwd_reads(p, l, -1)) READ_AT(r, 2 * n - i, 0);
        /* l reads input k in its backward (a cast is read instead); a max pool's read does not
         * count as a consumer's for refill_sparingly: one pass over its input, as cheap as
         * the refill that lets the producer's output go for the step (ResNet-50's stem batch
         * norm, read by the max pool the padding was fused into) */
        for (int k = 0; k < l->n_in; k++)
            if (!needs_cast(p, l, k) && bwd_reads(p, l, k))
                READ_AT(alias_root(p, l->in[k]), 2 * n - i, l->d.kind != GC_LAYER_MAXPOOL2D);
    }
    for (int r = 0; r < n; r++) {
        end[r] = fwd_end[r] > blast[r] ? fwd_end[r] : blast[r];
        recomp[r] = 0;
    }
    for (int r = n - 1; r >= 0 && p->training && reuse; r--) {
        plan_node *l = &p->L[r];
        if (!l->ops->refill || l->alias_of >= 0 || bfirst[r] < 0 || fwd_end[r] >= bfirst[r] ||
            (l->ops->refill_sparingly && direct[r]))
            continue;
        int ok = 1;
        for (int k = 0; k < l->n_in; k++) /* each input in place when the refill runs, or refillable then */
            ok &= !needs_cast(p, l, k) &&
                  (end[alias_root(p, l->in[k])] >= bfirst[r] ||
                   (!l->ops->refill_sparingly && refillable_at(p, alias_root(p, l->in[k]), bfirst[r], end, direct)));
        if (!ok) continue;
        recomp[r] = 1;
        end[r] = fwd_end[r];
        for (int k = 0; k < l->n_in; k++) READ_AT(alias_root(p, l->in[k]), bfirst[r], 0);
        const int c = 2 * n - bfirst[r]; /* the node whose backward comes first among the readers */
        l->recompute_at = c;
        int *at = &p->L[c].refill_head; /* node order within the slot: inputs are refilled first */
        while (*at >= 0 && *at < r) at = &p->L[*at].refill_next;
        l->refill_next = *at;
        *at = r;
    }
#undef READ_AT
    for (int i = 0; i < n && s == GC_OK; i++) {
        plan_node *l = &p->L[i];
        if (l->alias_of >= 0) {
            if (!p->training) l->out = p->L[l->alias_of].out;
            continue;
        }
        size_t bytes = (size_t)(p->max_batch * l->out_numel) * gc_dtype_size(l->dt);
        int input = l->d.kind == GC_LAYER_INPUT;
        p->mem_what = input ? "input" : "activation", p->mem_node = i;
        if (p->training)
            s = arena_add2(shared, bytes, input ? 0 : i, end[i], recomp[i] ? bfirst[i] : -1, recomp[i] ? blast[i] : -1,
                           &l->out, input ? "input" : recomp[i] ? "activation_refilled" : "activation", i);
        else if (input) s = alloc_bytes(p, bytes, &l->out);
        else s = pool_get(p, &pl, bytes, i, end[i], &l->out);
        l->owns_out = 1;
    }
    free(end), free(bfirst), free(blast), free(direct), free(fwd_end), free(recomp);
    free(pl.b);
    return s;
}

/* Input casts, and in training the backward temporaries. A cast l->xc[k] is written by
 * l's forward and read by it and, where it reads that input, by its backward; in training
 * it lives in the step block for just those calls. Each node's backward temporaries are
 * sized for that node in its dtype -- scratch its dz (its output's shape), gtmp the
 * gradient w.r.t. an input before it is cast or added, gtmp2 that gradient cast to the
 * producer's dtype before it is added -- and live in the step block during its backward
 * only, so they take room the backward has already freed. */
static gc_status alloc_casts_and_scratch(gc_plan *p, arena *shared)
{
    const int n = p->n;
    for (int i = 0; i < n; i++) {
        plan_node *l = &p->L[i];
        for (int k = 0; k < l->n_in; k++) {
            if (!needs_cast(p, l, k)) continue;
            p->mem_what = "input_cast", p->mem_node = i;
            size_t bytes = (size_t)(p->max_batch * l->in_numel[k]) * gc_dtype_size(l->dt);
            if (p->training)
                TRY(arena_add(shared, bytes, i, bwd_reads(p, l, k) ? 2 * n - i : i, &l->xc[k], "input_cast", i));
            else
                TRY(gc_plan_alloc(p, p->max_batch * l->in_numel[k], l->dt, &l->xc[k]));
        }
    }
    if (!p->training) return GC_OK;
    for (int i = 0; i < n; i++) {
        plan_node *l = &p->L[i];
        int any = l->trains;
        for (int k = 0; k < l->n_in; k++) any |= l->in_grad[k];
        if (!any || !l->ops->backward || l->absorbed) continue; /* no backward */
        const size_t es = gc_dtype_size(l->dt);
        size_t tmp = 0, tmp2 = 0;
        for (int k = 0; k < l->n_in; k++) {
            if (!l->in_grad[k]) continue;
            const gc_dtype pdt = p->L[l->in[k]].dt;
            int cast = pdt != l->dt;
            if ((cast || l->in_accum[k]) && (size_t)l->in_numel[k] * es > tmp) tmp = (size_t)l->in_numel[k] * es;
            if (cast && l->in_accum[k] && (size_t)l->in_numel[k] * gc_dtype_size(pdt) > tmp2)
                tmp2 = (size_t)l->in_numel[k] * gc_dtype_size(pdt);
        }
        const int t = 2 * n - i;
        /* dz = act'(y) * dy (conv, dense), a folded ReLU's product (batch norm, add) */
        if (l->d.act != GC_ACT_LINEAR)
            TRY(arena_add(shared, (size_t)p->max_batch * (size_t)l->out_numel * es, t, t, &l->bscratch, "scratch", i));
        if (tmp) TRY(arena_add(shared, (size_t)p->max_batch * tmp, t, t, &l->bgtmp, "gtmp", i));
        if (tmp2) TRY(arena_add(shared, (size_t)p->max_batch * tmp2, t, t, &l->bgtmp2, "gtmp2", i));
    }
    return GC_OK;
}

/* Gradient buffers, reused across the backward pass. Backward time t = p->n - i for node
 * i (t = 0: the loss writes the output's gradient); gout[i] is live from when its first
 * gradient arrives (its last consumer's backward) to its own backward. A view aliasing
 * its input's gradient joins that buffer's life. */
static gc_status alloc_gradients(gc_plan *p, arena *shared)
{
    if (!p->training) return GC_OK;
    int *start = malloc((size_t)p->n * sizeof *start), *stop = malloc((size_t)p->n * sizeof *stop);
    int *root = malloc((size_t)p->n * sizeof *root);
    if (!start || !stop || !root) {
        free(start), free(stop), free(root);
        return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    }
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        root[i] = i;
        start[i] = i == p->n - 1 ? 0 : p->n - l->last_consumer;
        stop[i] = p->n - i;
    }
    for (int i = p->n - 1; i >= 0; i--) { /* views: one buffer with their input */
        plan_node *l = &p->L[i];
        if (!l->gout_alias) continue;
        int r = l->alias_of;
        while (p->L[r].gout_alias) r = p->L[r].alias_of;
        root[i] = r; /* resolved below, inputs first */
        if (start[i] < start[r]) start[r] = start[i];
        if (stop[i] > stop[r]) stop[r] = stop[i];
    }
    /* requests in order of start (insertion sort: n is small) */
    int *order = malloc((size_t)p->n * sizeof *order);
    int m = 0;
    gc_status s = order ? GC_OK : gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    for (int i = 0; i < p->n && s == GC_OK; i++) {
        /* the output's gradient is always written (by the loss) */
        if (root[i] != i || (!p->L[i].grad_needed && i != p->n - 1) || p->L[i].d.kind == GC_LAYER_INPUT)
            continue;
        int j = m++;
        while (j > 0 && start[order[j - 1]] > start[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    for (int q = 0; q < m && s == GC_OK; q++) { /* on the step's schedule: backward times + n */
        plan_node *l = &p->L[order[q]];
        size_t bytes = (size_t)(p->max_batch * l->out_numel) * gc_dtype_size(l->dt);
        s = arena_add(shared, bytes, p->n + start[order[q]], p->n + stop[order[q]], &l->gout, "gradient", order[q]);
    }
    free(order);
    free(start), free(stop), free(root);
    return s;
}

/* Weight casts and gradients. Every float32 gradient the optimizer reads is in one arena
 * (one fused update); the half-precision casts of the weights in another block. A weight
 * gradient that is not written straight into the arena -- the half-precision gradients,
 * and in a plan where no weight is float32 the batch norms' float32 ones too -- is a
 * buffer of the step block, live from its node's backward to the update, which converts
 * it into the arena; the arena itself is then needed only at the update, and is in the
 * step block too (one contiguous request). Where some node computes in float32 and writes
 * its gradients straight into the arena, the arena is a block of its own. Requests are
 * made before the step block is placed; weight_grads_placed sets the arena's pointers. */
#define UPDATE_T(p) (2 * (p)->n + 1)
#define W_ALIGN 64 /* elements: 256 bytes */

static gc_status alloc_weights(gc_plan *p, arena *shared)
{
    int64_t f32 = 0, half = 0;
    int staged = p->training; /* no gradient goes straight into the arena */
    for (int i = 0; i < p->n; i++)
        if (p->L[i].trains && p->L[i].dt == GC_F32) staged = 0;
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        int cast = l->dt != GC_F32 && !l->ops->f32_weights;
        for (int k = 0; k < l->n_w; k++) {
            plan_weight *w = &l->w[k];
            if (!w->w) continue;
            int64_t n = (w->n + W_ALIGN - 1) / W_ALIGN * W_ALIGN;
            if (cast) half += n;
            if (!w->trains) continue;
            f32 += n;
            w->dwdt = cast ? l->dt : GC_F32;
            if (cast || staged)
                TRY(arena_add(shared, (size_t)n * gc_dtype_size(w->dwdt), 2 * p->n - i, UPDATE_T(p), &w->dw,
                              "weight_grad", i));
        }
    }
    p->grad_arena_numel = f32;
    p->mem_what = "weight_grads_f32", p->mem_node = -1;
    if (f32 && staged) TRY(arena_add(shared, (size_t)f32 * 4, UPDATE_T(p), UPDATE_T(p), &p->grad_arena,
                                     "weight_grads_f32", -1));
    else if (f32) TRY(gc_plan_alloc(p, f32, GC_F32, &p->grad_arena));
    p->mem_what = "weight_casts";
    if (half) TRY(gc_plan_alloc(p, half, GC_F16, &p->half_arena));
    half = 0;
    for (int i = 0; i < p->n; i++) { /* the casts' places in their block */
        plan_node *l = &p->L[i];
        if (l->dt == GC_F32 || l->ops->f32_weights) continue;
        for (int k = 0; k < l->n_w; k++)
            if (l->w[k].w) {
                l->w[k].wc = (char *)p->half_arena + half * 2;
                half += (l->w[k].n + W_ALIGN - 1) / W_ALIGN * W_ALIGN;
            }
    }
    return GC_OK;
}

/* the forward's weight casts as one cast_multi table (backends that have it) */
static gc_status build_weight_casts(gc_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) n += p->L[i].w[k].wc != NULL;
    if (n == 0 || !p->be->cast_multi) return GC_OK;
    gc_cast_slot *h = calloc((size_t)n, sizeof *h);
    if (!h) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    int j = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) {
            const plan_weight *w = &p->L[i].w[k];
            if (!w->wc) continue;
            h[j].x = w->w;
            h[j].y = w->wc;
            h[j].n = w->n;
            h[j].xdt = GC_F32;
            h[j].ydt = (int32_t)p->L[i].dt;
            j++;
        }
    gc_status s = gc_plan_cast_table(p, h, n, &p->wcast_slots, &p->max_wcast_n);
    free(h);
    if (s == GC_OK && p->wcast_slots) p->n_wcast = n;
    return s;
}

/* once the step block is placed: each float32 gradient's place in the arena, and the
 * gradients written straight into it */
static void weight_grads_placed(gc_plan *p)
{
    int64_t f32 = 0;
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        for (int k = 0; k < l->n_w; k++) {
            plan_weight *w = &l->w[k];
            if (!w->w || !w->trains) continue;
            w->dw32 = (char *)p->grad_arena + f32 * 4;
            f32 += (w->n + W_ALIGN - 1) / W_ALIGN * W_ALIGN;
            if (!w->dw) w->dw = w->dw32;
        }
    }
}

/* Views (and absorbed nodes) share their input's activation; a gradient view its input's
 * gradient. Inputs come first (alias_of < i), so chains resolve in one pass. */
static void resolve_views(gc_plan *p)
{
    for (int i = 0; i < p->n; i++) {
        plan_node *l = &p->L[i];
        if (l->alias_of >= 0) l->out = p->L[l->alias_of].out;
        if (l->gout_alias) l->gout = p->L[l->alias_of].gout;
    }
}

gc_status gc_plan_create(const gc_backend *be, const gc_layer_desc *nodes, int n_nodes,
                         const gc_train_desc *train, int64_t max_batch, gc_plan **out)
{
    *out = NULL;
    if (!be) return gc_fail(GC_ERR_INVALID_ARG, "plan: no backend");
    if (n_nodes < 1 || !nodes) return gc_fail(GC_ERR_INVALID_ARG, "plan: the model has no layers");
    if (max_batch < 1) return gc_fail(GC_ERR_INVALID_ARG, "plan: max_batch must be >= 1");
    gc_plan *p = calloc(1, sizeof *p);
    if (!p) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    p->be = be;
    p->max_batch = max_batch;
    p->training = train != NULL;
    const char *reuse = getenv("GPUCMP_PLAN_REUSE");
    p->no_reuse = reuse && reuse[0] == '0';
    if (train) p->train = *train; /* check_nodes reads the loss mask node */
    gc_status s = resolve_inputs(p, nodes, n_nodes);
    if (s == GC_OK) s = check_nodes(p);
    if (s == GC_OK) {
        for (int i = 0; i < p->n; i++)
            if (p->L[i].dt != GC_F32 && !(be->native_dtypes & (1u << p->L[i].dt))) p->widen = 1;
        p->out_numel = p->L[p->n - 1].out_numel;
        fuse_nodes(p);
        s = analyse_gradients(p);
    }
    arena shared = {0}; /* a training step's activations and gradients, on one schedule */
    if (s == GC_OK) {
        pair_nodes(p);
        s = alloc_activations(p, &shared);
    }
    if (s == GC_OK) s = alloc_casts_and_scratch(p, &shared);
    if (s == GC_OK) s = alloc_gradients(p, &shared);
    if (s == GC_OK) s = alloc_weights(p, &shared);
    if (s == GC_OK) s = arena_commit(p, &shared);
    free(shared.r);
    if (s == GC_OK && p->training) resolve_views(p);
    if (s == GC_OK) weight_grads_placed(p);
    p->mem_what = "weight_cast_table", p->mem_node = -1;
    if (s == GC_OK) s = build_weight_casts(p);
    for (int i = 0; i < p->n && s == GC_OK; i++) { /* per-channel statistics of a batchnorm pass */
        p->mem_what = "bn_stats", p->mem_node = i;
        if (p->L[i].d.kind == GC_LAYER_BATCHNORM)
            s = gc_plan_alloc(p, 2 * p->L[i].d.out_shape[p->L[i].d.out_ndim - 1], GC_F32, &p->L[i].save);
    }
    for (int i = 0; i < p->n && s == GC_OK; i++) { /* the kinds' own buffers */
        p->mem_what = "layer_own", p->mem_node = i;
        if (p->L[i].ops->setup) s = p->L[i].ops->setup(p, &p->L[i]);
    }
    p->mem_what = "loss_and_output", p->mem_node = -1;
    if (s == GC_OK && p->L[p->n - 1].dt != GC_F32) /* float32 loss input / predictions */
        s = gc_plan_alloc(p, max_batch * p->out_numel, GC_F32, &p->logits32);
    if (s == GC_OK && p->training) {
        p->train = *train;
        s = gc_plan_setup_loss(p);
    }
    p->mem_what = "optimizer_table";
    if (s == GC_OK && p->training) s = gc_plan_setup_update(p, train);
    p->mem_what = "step_fixed";
    if (s == GC_OK && p->training) { /* the fixed buffers a captured step reads */
        s = gc_plan_alloc(p, max_batch, GC_F32, &p->idx_step);
        /* {lr, t} and, 64 bytes on, the seed: one block, so that a staged step puts both
         * with one copy (step_graph.c) */
        if (s == GC_OK) s = gc_plan_alloc(p, GC_PLAN_DYN_SEED_OFF / 4 + 2, GC_F32, &p->dyn);
        if (s == GC_OK) p->dyn_seed = (char *)p->dyn + GC_PLAN_DYN_SEED_OFF;
        if (s == GC_OK) s = gc_plan_alloc(p, GC_PLAN_ACC_FLOATS, GC_F32, &p->acc);
    }
    p->graphs_on = !p->no_graphs; /* training steps and full-size predicts */
    p->mem_what = "resident", p->mem_node = -1; /* whatever comes later: the data set, staging */
    /* dry run: every op call of a full step, validated by core */
    if (s == GC_OK) {
        p->checking = 1;
        if (p->training) {
            gc_step_stats st;
            gc_opt_hparams hp = {p->train.opt, 0.001f, 0.9f, 0.999f, 1e-7f, 0.0f, 0.9f, 0, 1, 1.0f, 0.0f};
            if (p->train.opt == GC_OPT_SGD && p->state_copy) hp.momentum = 0.9f;
            s = gc_plan_train_step(p, NULL, NULL, max_batch, &hp, 1, &st);
        }
        if (s == GC_OK) s = gc_plan_predict(p, NULL, max_batch, NULL);
        p->checking = 0;
    }
    if (s != GC_OK) {
        gc_plan_destroy(p);
        return s;
    }
    *out = p;
    return GC_OK;
}
