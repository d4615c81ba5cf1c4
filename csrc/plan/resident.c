/* resident.c -- device-resident training: the data set uploaded once, batches gathered
 * on the device, one CUDA graph per step.
 *
 * gc_plan_train_steps runs many steps in one call: per-step values (batch indices,
 * learning rate, Adam's t, dropout seed) are uploaded once for the whole call and copied
 * into fixed buffers the step reads, so the full-size step can be captured into a graph
 * once (after one eager warm-up step, which creates workspaces and library handles) and
 * replayed; loss and metric totals are accumulated on the device and come back once. */
#include "plan_internal.h"

#include <stdio.h>
#include <stdlib.h>

static int64_t label_width(const gc_plan *p) { return p->sparse ? p->rows_per_sample : p->out_numel; }

void gc_plan_release_resident(gc_plan *p)
{
    for (int k = 0; k < GC_NODE_MAX_INPUTS; k++) {
        if (p->data_x[k]) p->be->release(p->be, p->data_x[k]);
        p->data_x[k] = NULL;
    }
    void **own[] = {&p->data_y, &p->idx_all, &p->dyn_all, &p->seed_all};
    for (size_t k = 0; k < sizeof own / sizeof own[0]; k++) {
        if (*own[k]) p->be->release(p->be, *own[k]);
        *own[k] = NULL;
    }
    p->idx_cap = p->steps_cap = p->seed_cap = 0;
    p->data_n = 0;
}

gc_status gc_plan_set_data(gc_plan *p, const float *const *x, const void *y, int64_t n)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    gc_plan_use_graphs(p, p->graphs_on); /* a captured step reads the old data: drop it */
    for (int k = 0; k < GC_NODE_MAX_INPUTS; k++) {
        if (p->data_x[k]) p->be->release(p->be, p->data_x[k]);
        p->data_x[k] = NULL;
    }
    if (p->data_y) p->be->release(p->be, p->data_y);
    p->data_y = NULL;
    p->data_n = 0;
    if (!x) return GC_OK;
    if (n < 1 || !y) return gc_fail(GC_ERR_INVALID_ARG, "plan: set_data needs x and y with n >= 1 rows");
    size_t total = 0;
    gc_status s = GC_OK;
    for (int k = 0; k < p->n_inputs && s == GC_OK; k++) {
        if (!x[k]) {
            s = gc_fail(GC_ERR_INVALID_ARG, "plan: set_data: input %d is missing", k);
            break;
        }
        size_t xb = (size_t)(n * gc_plan_input_numel(p, k)) * sizeof(float);
        total += xb;
        s = p->be->alloc(p->be, xb, &p->data_x[k]);
        if (s == GC_OK) s = p->be->upload(p->be, p->data_x[k], x[k], xb);
    }
    size_t yb = (size_t)(n * label_width(p)) * 4u; /* float32 or int32 labels */
    total += yb;
    if (s == GC_OK) s = p->be->alloc(p->be, yb, &p->data_y);
    if (s == GC_OK) s = p->be->upload(p->be, p->data_y, y, yb);
    if (s != GC_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", gc_last_error());
        gc_plan_set_data(p, NULL, NULL, 0);
        return gc_fail(s, "plan: the data set (%lld rows, %zu bytes) does not fit on '%s': %s",
                       (long long)n, total, p->be->name, why);
    }
    p->data_n = n;
    return GC_OK;
}

/* One training step in device mode: gather the batch from the resident data set by
 * idx_step, then forward, loss, metrics (totals into acc), backward, update -- only
 * backend ops, no transfers, so it can be captured into a graph. */
static gc_status device_step(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    gc_no_params none = {0};
    int64_t w = label_width(p);
    gc_tensor idx = gc_t1(p->idx_step, GC_I32, rows);
    for (int k = 0; k < p->n_inputs; k++) {
        plan_node *in = &p->L[p->input_node[k]];
        gc_tensor tx = gc_t2(p->data_x[k], GC_F32, p->data_n, in->out_numel);
        gc_tensor bx = gc_t2(in->out, GC_F32, rows, in->out_numel);
        TRY(gc_plan_run(p, GC_OP_EMBEDDING_FWD, &none, &tx, &idx, NULL, &bx, NULL, NULL));
    }
    gc_tensor ty = gc_t2(p->data_y, p->sparse ? GC_I32 : GC_F32, p->data_n, w);
    gc_tensor by = gc_t2(p->y, p->sparse ? GC_I32 : GC_F32, rows, w);
    TRY(gc_plan_run(p, GC_OP_EMBEDDING_FWD, &none, &ty, &idx, NULL, &by, NULL, NULL));
    return gc_plan_device_work(p, rows, hp);
}

gc_status gc_plan_device_work(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    gc_step_stats ignored;
    TRY(gc_plan_forward(p, rows, MODE_TRAIN, 0));
    TRY(gc_plan_loss_and_metrics(p, rows, 1, &ignored));
    TRY(gc_plan_backward(p, rows, 0));
    return gc_plan_update(p, hp);
}

gc_status gc_plan_capture(gc_plan *p, gc_status (*work)(gc_plan *, int64_t, const gc_opt_hparams *), int64_t rows,
                          const gc_opt_hparams *hp, void **graph)
{
    const gc_backend *be = p->be;
    *graph = NULL;
    TRY(be->capture_begin(be));
    gc_status s = work(p, rows, hp);
    void *g = NULL;
    gc_status e = be->capture_end(be, &g); /* always ends the capture */
    if (s == GC_OK) s = e;
    if (s != GC_OK) {
        if (g) be->graph_destroy(be, g);
        return s;
    }
    *graph = g;
    return GC_OK;
}

static gc_status grow(gc_plan *p, void **buf, int64_t *cap, int64_t need, size_t elem)
{
    if (*buf && *cap >= need) return GC_OK;
    if (*buf) p->be->release(p->be, *buf);
    *buf = NULL;
    *cap = 0;
    TRY(p->be->alloc(p->be, (size_t)need * elem, buf));
    *cap = need;
    return GC_OK;
}

/* Runs one full-size step from the captured graph, capturing it first if needed: the
 * first full-size step runs eagerly (so workspaces and library handles exist before
 * capture), the second is captured and launched, later ones are replays. */
static gc_status graph_step(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    const gc_backend *be = p->be;
    if (p->graph && p->graph_rows == rows) {
        p->replays++;
        return be->graph_launch(be, p->graph);
    }
    if (p->warm_rows != rows) {
        p->warm_rows = rows;
        return device_step(p, rows, hp);
    }
    if (p->graph) {
        be->graph_destroy(be, p->graph);
        p->graph = NULL;
    }
    TRY(gc_plan_capture(p, device_step, rows, hp, &p->graph));
    p->graph_rows = rows;
    return be->graph_launch(be, p->graph);
}

static gc_status train_steps(gc_plan *p, const int32_t *idx, int64_t n_rows, int64_t batch,
                             const gc_opt_hparams *hp, const float *lrs, const uint64_t *seeds,
                             gc_step_stats *st)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    if (!p->data_y) return gc_fail(GC_ERR_INVALID_ARG, "plan: train_steps needs set_data first");
    if (batch < 1 || batch > p->max_batch)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batch %lld, expected 1..%lld", (long long)batch,
                       (long long)p->max_batch);
    if (n_rows < 1 || !idx) return gc_fail(GC_ERR_INVALID_ARG, "plan: train_steps needs >= 1 index");
    for (int64_t i = 0; i < n_rows; i++)
        if (idx[i] < 0 || idx[i] >= p->data_n)
            return gc_fail(GC_ERR_INVALID_ARG, "indices: value %d at position %lld is outside [0, %lld)",
                           idx[i], (long long)i, (long long)p->data_n);
    memset(st, 0, sizeof *st);
    const gc_backend *be = p->be;
    int64_t steps = (n_rows + batch - 1) / batch;

    /* every op call of a device step, validated once by core */
    p->device_mode = p->checking = 1;
    gc_status s = device_step(p, batch, hp);
    p->checking = 0;
    if (s) goto done;

    /* per-step values, uploaded once for the whole call */
    s = grow(p, &p->idx_all, &p->idx_cap, n_rows, sizeof(int32_t));
    if (s == GC_OK) s = grow(p, &p->dyn_all, &p->steps_cap, steps, 2 * sizeof(float));
    if (s == GC_OK) s = grow(p, &p->seed_all, &p->seed_cap, steps, sizeof(uint64_t));
    if (s) goto done;
    float *dyn_host = malloc((size_t)steps * 2 * sizeof(float));
    uint64_t *seed_host = malloc((size_t)steps * sizeof(uint64_t));
    if (!dyn_host || !seed_host) {
        free(dyn_host);
        free(seed_host);
        s = gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        goto done;
    }
    for (int64_t k = 0; k < steps; k++) {
        dyn_host[2 * k] = lrs ? lrs[k] : hp->lr;
        dyn_host[2 * k + 1] = (float)(hp->t + k);
        seed_host[k] = seeds ? seeds[k] : 0;
    }
    s = be->upload(be, p->idx_all, idx, (size_t)n_rows * sizeof(int32_t));
    if (s == GC_OK) s = be->upload(be, p->dyn_all, dyn_host, (size_t)steps * 2 * sizeof(float));
    if (s == GC_OK) s = be->upload(be, p->seed_all, seed_host, (size_t)steps * sizeof(uint64_t));
    free(dyn_host);
    free(seed_host);
    if (s == GC_OK) s = be->fill_zero(be, p->acc, GC_PLAN_ACC_TOTALS * sizeof(float));
    if (s == GC_OK) s = gc_plan_loss_scale_begin(p, hp);
    /* with loss scaling, Adam's t (dyn[1]) advances on the device, only for the steps
     * the optimizer applied: it is set once, then each step copies its lr alone */
    const int ls = p->train.loss_scaling;

    int can_graph = p->graphs_on && be->capture_begin && be->capture_end && be->graph_launch &&
                    be->graph_destroy;
    /* replayed steps record bad embedding ids without reading them back: cleared before
     * the first replay, read before an eager step (whose ops clear it) and at the end */
    int replayed = 0;
    if (s == GC_OK && can_graph) s = gc_plan_graph_errors(p, 0);
    for (int64_t k = 0; k < steps && s == GC_OK; k++) {
        int64_t rows = n_rows - k * batch < batch ? n_rows - k * batch : batch;
        /* this step's values into the fixed buffers the (captured) step reads */
        s = be->copy(be, p->idx_step, (const int32_t *)p->idx_all + k * batch, (size_t)rows * sizeof(int32_t));
        if (s == GC_OK)
            s = be->copy(be, p->dyn, (const float *)p->dyn_all + 2 * k, (ls && k ? 1 : 2) * sizeof(float));
        if (s == GC_OK) s = be->copy(be, p->dyn_seed, (const uint64_t *)p->seed_all + k, sizeof(uint64_t));
        if (s != GC_OK) break;
        if (can_graph && rows == batch && p->graph && p->graph_rows == rows) {
            s = graph_step(p, rows, hp);
            replayed = 1;
            continue;
        }
        if (replayed) s = gc_plan_graph_errors(p, 1);
        replayed = 0;
        if (s == GC_OK) s = (can_graph && rows == batch) ? graph_step(p, rows, hp) : device_step(p, rows, hp);
        replayed = s == GC_OK && p->graph && can_graph && rows == batch;
    }
    if (s == GC_OK && replayed) s = gc_plan_graph_errors(p, 1);
    if (s == GC_OK) {
        float acc[GC_PLAN_ACC_TOTALS];
        s = be->download(be, acc, p->acc, sizeof acc);
        st->loss_sum = acc[0] / (double)p->rows_per_sample;
        for (int bit = 0; bit < GC_METRIC_COUNT; bit++) st->metric_sum[bit] = acc[1 + bit] / (double)p->rows_per_sample;
        st->steps_applied = steps;
    }
    if (s == GC_OK && ls) {
        float dyn[2];
        s = be->download(be, dyn, p->dyn, sizeof dyn);
        if (s == GC_OK) s = gc_plan_loss_scale_end(p, st);
        st->steps_applied = (int64_t)dyn[1] - hp->t; /* t advanced once per applied step */
    }
done:
    p->device_mode = p->checking = 0;
    return s;
}

void gc_plan_use_graphs(gc_plan *p, int on)
{
    if (!p) return;
    p->graphs_on = on != 0 && !p->no_graphs && !p->group; /* a replica reduces on the host each step */
    if (p->graph) {
        p->be->graph_destroy(p->be, p->graph);
        p->graph = NULL;
    }
    p->warm_rows = 0;
    gc_plan_drop_batch_graph(p);
    gc_plan_drop_predict_graph(p);
}

int64_t gc_plan_graph_replays(const gc_plan *p) { return p ? p->replays : 0; }

int gc_plan_use_fused_optimizer(gc_plan *p, int on)
{
    if (!p) return 0;
    gc_plan_use_graphs(p, p->graphs_on); /* a captured step holds the old choice */
    p->fused_opt = on && p->opt_slots != NULL;
    return p->fused_opt;
}

gc_status gc_plan_train_steps(gc_plan *p, const int32_t *idx, int64_t n_rows, int64_t batch,
                              const gc_opt_hparams *hp, const float *lrs, const uint64_t *seeds,
                              gc_step_stats *st)
{
    gc_status s = train_steps(p, idx, n_rows, batch, hp, lrs, seeds, st);
    if (s && p && p->group) gc_replica_group_abort(p->group); /* the other replicas must not wait */
    return s;
}
