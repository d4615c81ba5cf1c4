/* step_graph.c -- a single training step from host arrays (train_on_batch, and fit when
 * the data is not resident) replayed as one CUDA graph.
 *
 * Why: a small model's step is a few dozen small kernels; launched one by one each costs
 * the launch overhead (several microseconds) and the eager step also reads the loss and
 * every metric back separately. Here the batch is uploaded into the plan's fixed input and
 * label buffers, the per-step values (learning rate, Adam's t, the dropout seed) into the
 * fixed buffers device mode reads (dyn, dyn_seed, as resident.c does), the device work of
 * the step (forward, loss and metric totals summed on the device, backward, update) is
 * captured once and replayed, and the totals come back in one transfer.
 *
 * As resident.c: the first full-size step runs eagerly in device mode (workspaces and
 * library handles are created outside a capture), the second is captured, later ones
 * replay it; smaller batches run eagerly in device mode and keep the graph. A graph holds the
 * hyperparameters it was captured with other than lr and t (which it reads from dyn): a call
 * with other values recaptures. Dynamic loss scaling is graph work too: the loss and the
 * update read the scale from device memory (ls_state), the update skips itself on the
 * device when a gradient overflowed (ls_bad), and the scale's new state travels back with
 * the totals, so the caller's {scale, good steps} go up through the staging buffer like
 * {lr, t}. Profiled and traced steps stay eager (they time or list the ops one by one). Totals are float32 sums on the
 * device, as in resident training, where the eager step sums the per-row values in double.
 * Embedding ids outside the table, which captured ops record without reading back, are
 * read back after each replay (gc_plan_graph_errors), after the totals.
 *
 * Synchronisation: the batch, the labels and {lr, t} with the seed (one block, one copy)
 * go up through the plan's staging buffer (stage.c) with copies that only queue, the totals are zeroed and the
 * graph launched on the same stream, and the one wait of the call is the read of the
 * totals (an embedding plan's error read after it finds the stream idle). That read also
 * frees the staging buffer for the next call, which is what makes refilling it safe. */
#include "plan_internal.h"

#include <math.h>
#include <string.h>

gc_status gc_plan_graph_errors(gc_plan *p, int read)
{
    const gc_backend *be = p->be;
    if (!be->graph_errors || p->checking) return GC_OK;
    for (int i = 0; i < p->n; i++)
        if (p->L[i].d.kind == GC_LAYER_EMBEDDING) return be->graph_errors(be, read);
    return GC_OK;
}

void gc_plan_drop_batch_graph(gc_plan *p)
{
    if (p->batch_graph) p->be->graph_destroy(p->be, p->batch_graph);
    p->batch_graph = NULL;
    p->batch_warm_rows = 0;
}

int gc_plan_batch_graph_eligible(const gc_plan *p)
{
    const gc_backend *be = p->be;
    return p->graphs_on && !p->checking && !p->profiling && !p->trace && be->capture_begin && be->capture_end &&
           be->graph_launch && be->graph_destroy;
}

/* the hyperparameters a captured step holds: all but lr and t, which it reads from dyn */
static int same_baked_hparams(const gc_opt_hparams *a, const gc_opt_hparams *b)
{
    return a->kind == b->kind && a->beta_1 == b->beta_1 && a->beta_2 == b->beta_2 && a->epsilon == b->epsilon &&
           a->momentum == b->momentum && a->rho == b->rho && a->nesterov == b->nesterov;
}

static gc_status capture(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    TRY(gc_plan_capture(p, gc_plan_device_work, rows, hp, &p->batch_graph));
    p->batch_graph_hp = *hp;
    return GC_OK;
}

/* full-size steps replay the graph; other sizes (a last partial batch) run eagerly in
 * device mode beside it, validated first (device mode's calls are not the ones plan
 * creation validated) */
static gc_status run(gc_plan *p, int64_t rows, const gc_opt_hparams *hp, int *replayed)
{
    const gc_backend *be = p->be;
    const int full = rows == p->max_batch;
    if (p->batch_graph && !same_baked_hparams(&p->batch_graph_hp, hp)) gc_plan_drop_batch_graph(p);
    if (full && !p->batch_graph && p->batch_warm_rows == rows) TRY(capture(p, rows, hp));
    if (full && p->batch_graph) {
        p->replays++;
        TRY(gc_plan_graph_errors(p, 0));
        *replayed = 1; /* the caller reads the errors back after the totals */
        return be->graph_launch(be, p->batch_graph);
    }
    p->checking = 1;
    gc_status s = gc_plan_device_work(p, rows, hp);
    p->checking = 0;
    TRY(s);
    TRY(gc_plan_device_work(p, rows, hp));
    if (full) p->batch_warm_rows = rows;
    return GC_OK;
}

gc_status gc_plan_batch_graph_step(gc_plan *p, const float *const *x, const void *y, int64_t rows,
                                   const gc_opt_hparams *hp, uint64_t seed, gc_step_stats *st)
{
    const gc_backend *be = p->be;
    const float dyn[2] = {hp->lr, (float)hp->t};
    const int ls = p->train.loss_scaling;
    float acc[GC_PLAN_ACC_FLOATS]; /* the totals, then (loss scaling) the scale's new state */
    const size_t totals = GC_PLAN_ACC_TOTALS * sizeof(float);
    int replayed = 0;
    if (ls && !(hp->loss_scale > 0.0f && isfinite(hp->loss_scale) && hp->loss_scale_good >= 0.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: loss scale %g with %g good steps; need a finite scale > 0",
                       (double)hp->loss_scale, (double)hp->loss_scale_good);
    unsigned char vals[GC_PLAN_DYN_SEED_OFF + sizeof seed] = {0}; /* {lr, t} .. seed, as in the block */
    memcpy(vals, dyn, sizeof dyn);
    memcpy(vals + GC_PLAN_DYN_SEED_OFF, &seed, sizeof seed);
    gc_status s = gc_plan_upload_batch(p, x, y, rows);
    p->device_mode = 1;
    if (s == GC_OK) s = gc_plan_stage_put(p, p->dyn, vals, sizeof vals); /* one copy for both */
    if (s == GC_OK && ls) {
        const float state[2] = {hp->loss_scale, hp->loss_scale_good};
        s = gc_plan_stage_put(p, p->ls_state, state, sizeof state);
        if (s == GC_OK) s = be->fill_zero(be, p->ls_bad, sizeof(float));
    }
    if (s == GC_OK) s = be->fill_zero(be, p->acc, totals);
    if (s == GC_OK) s = run(p, rows, hp, &replayed);
    p->device_mode = 0;
    if (s == GC_OK && ls) s = be->copy(be, (float *)p->acc + GC_PLAN_ACC_TOTALS, p->ls_state, 2 * sizeof(float));
    if (s == GC_OK) s = gc_plan_download(p, acc, p->acc, ls ? sizeof acc : totals);
    if (s == GC_OK && replayed) s = gc_plan_graph_errors(p, 1);
    if (s != GC_OK) return s;
    st->loss_sum = acc[0] / (double)p->rows_per_sample;
    for (int bit = 0; bit < GC_METRIC_COUNT; bit++) st->metric_sum[bit] = acc[1 + bit] / (double)p->rows_per_sample;
    st->steps_applied = 1;
    if (ls) { /* as the eager step: skipped exactly when the scale went down */
        st->loss_scale = acc[GC_PLAN_ACC_TOTALS];
        st->loss_scale_good = acc[GC_PLAN_ACC_TOTALS + 1];
        st->steps_applied = st->loss_scale < hp->loss_scale ? 0 : 1;
    }
    return GC_OK;
}
