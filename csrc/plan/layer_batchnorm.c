/* layer_batchnorm.c -- BatchNormalization as a plan node (channels on the last axis).
 *
 * Keras' semantics: in a training step of a trainable layer the batch statistics (mean,
 * biased variance) normalise and the moving statistics are updated with `momentum`;
 * otherwise -- evaluation, prediction, or a layer with trainable=False -- the moving
 * statistics are used and nothing is updated. The op computes in float32 whatever the
 * storage dtype; gamma, beta and the statistics stay float32 (as Keras keeps them).
 * The plan may fold a following ReLU (act) and a residual Add (a second input, added
 * before the ReLU) into the node: one pass over the activations forward and backward
 * instead of three. Without a residual the backward recomputes the ReLU's mask from x
 * rather than reading the output. */
#include "plan_internal.h"

static gc_status bn_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                          const int *nd)
{
    for (int k = 0; k < n_in; k++) {
        int same = nd[k] == d->out_ndim;
        for (int a = 0; same && a < nd[k]; a++) same = in[k][a] == d->out_shape[a];
        if (!same)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: batchnorm node %d: input %d does not have the output's shape",
                           idx, k);
    }
    if (!d->weights[GC_W_MOVING_MEAN] || !d->weights[GC_W_MOVING_VAR])
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batchnorm node %d needs moving_mean and moving_variance", idx);
    if (!(d->epsilon > 0.0f) || !(d->momentum >= 0.0f && d->momentum <= 1.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batchnorm node %d: epsilon %g must be > 0 and momentum %g in [0, 1]",
                       idx, (double)d->epsilon, (double)d->momentum);
    if (d->act != GC_ACT_LINEAR && d->act != GC_ACT_RELU)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batchnorm node %d: activation must be linear or relu", idx);
    return GC_OK;
}

static void bn_weights(const gc_layer_desc *d, const int64_t *in, int64_t *n, int *tr)
{
    (void)in;
    int64_t C = d->out_shape[d->out_ndim - 1];
    n[GC_W_GAMMA] = n[GC_W_BETA] = n[GC_W_MOVING_MEAN] = n[GC_W_MOVING_VAR] = C;
    tr[GC_W_GAMMA] = tr[GC_W_BETA] = 1;
}

static int64_t channels(const plan_node *l) { return l->d.out_shape[l->d.out_ndim - 1]; }

static gc_batchnorm_params bn_params(const plan_node *l, int training)
{
    gc_batchnorm_params bp = {l->d.epsilon, l->d.momentum, training, l->d.act, 0, GC_F32};
    return bp;
}

/* batch statistics only in a training step of a trainable layer (Keras) */
static int bn_training(const plan_node *l, run_mode mode) { return mode == MODE_TRAIN && l->d.trainable; }

static gc_tensor weight_or_none(const plan_node *l, int k)
{
    return l->w[k].w ? gc_t1(l->w[k].w, GC_F32, l->w[k].n) : gc_none();
}

static gc_status bn_apply(gc_plan *p, plan_node *l, int64_t rows, int training)
{
    const int64_t C = channels(l);
    gc_batchnorm_params bp = bn_params(l, training);
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
    gc_tensor g = weight_or_none(l, GC_W_GAMMA), b = weight_or_none(l, GC_W_BETA);
    gc_tensor r = l->n_in > 1 ? gc_node_in_tensor(p, l, 1, rows) : gc_none();
    gc_tensor mm = gc_t1(l->w[GC_W_MOVING_MEAN].w, GC_F32, C), mv = gc_t1(l->w[GC_W_MOVING_VAR].w, GC_F32, C);
    gc_tensor save = gc_t2(l->save, GC_F32, 2, C);
    const gc_tensor *in[4] = {&x, &g, &b, &r};
    gc_tensor *out[4] = {&y, &mm, &mv, &save};
    return gc_plan_run_n(p, GC_OP_BATCHNORM_FWD, &bp, in, 4, out, 4);
}

static gc_status bn_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)seed;
    return bn_apply(p, l, rows, bn_training(l, mode));
}

/* y again from the statistics the training pass left in save (and the kept x, residual) */
static gc_status bn_refill(gc_plan *p, plan_node *l, int64_t rows) { return bn_apply(p, l, rows, GC_BN_REFILL); }

/* a folded ReLU without a residual: the backward recomputes its mask from x (the op's
 * mask_from_x) instead of reading the output, one activation-sized read saved in each of
 * its two passes; with a residual the mask needs y (or the residual: as costly) */
static int mask_from_x(const plan_node *l) { return l->d.act == GC_ACT_RELU && l->n_in == 1; }

static gc_status bn_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    const int64_t C = channels(l);
    gc_batchnorm_params bp = bn_params(l, bn_training(l, MODE_TRAIN));
    bp.mask_from_x = mask_from_x(l);
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), gy = gc_node_gout_tensor(l, rows);
    gc_tensor g = weight_or_none(l, GC_W_GAMMA), save = gc_t2(l->save, GC_F32, 2, C);
    gc_tensor y = l->d.act == GC_ACT_RELU && !bp.mask_from_x ? gc_node_out_tensor(l, rows) : gc_none();
    gc_tensor beta = bp.mask_from_x ? weight_or_none(l, GC_W_BETA) : gc_none();
    gc_tensor dx = l->in_grad[0] ? gc_node_gin_tensor(p, l, 0, rows) : gc_none();
    gc_tensor dg = l->w[GC_W_GAMMA].trains ? gc_t1(l->w[GC_W_GAMMA].dw, GC_F32, C) : gc_none();
    gc_tensor db = l->w[GC_W_BETA].trains ? gc_t1(l->w[GC_W_BETA].dw, GC_F32, C) : gc_none();
    /* the residual's gradient is dz itself: with a ReLU the op writes it -- straight into
     * the residual producer's gradient when it is the first to arrive there (ResNet's
     * identity blocks: this node's backward runs before the branch's first conv), else
     * into scratch, then added --; without one it is the output gradient as it is */
    int res = l->n_in > 1 && l->in_grad[1];
    const int res_direct = res && l->d.act == GC_ACT_RELU && gc_node_gin_direct(p, l, 1);
    gc_tensor dr = !res || l->d.act != GC_ACT_RELU ? gc_none()
                   : res_direct ? gc_node_gin_tensor(p, l, 1, rows)
                                : gc_btd(p->scratch, l->dt, rows, l->d.out_shape, l->d.out_ndim);
    const gc_tensor *in[6] = {&x, &gy, &g, &save, &y, &beta};
    gc_tensor *out[4] = {&dx, &dg, &db, &dr};
    TRY(gc_plan_run_n(p, GC_OP_BATCHNORM_BWD, &bp, in, 6, out, 4));
    if (l->in_grad[0]) TRY(gc_node_deliver(p, l, 0, rows));
    if (res && !res_direct) TRY(gc_node_pass_grad(p, l, 1, dr.data ? dr.data : l->gout, rows));
    return GC_OK;
}

/* x always; the output for the folded ReLU's mask where a residual was added (else the
 * mask comes from x); never the residual (its gradient is dz) */
static int bn_bwd_reads(const gc_plan *p, const plan_node *l, int k)
{
    (void)p;
    if (k < 0) return l->d.act == GC_ACT_RELU && !mask_from_x(l);
    return k == 0;
}

const gc_layer_ops gc_layer_batchnorm = {"batchnorm", 1, 2, bn_check, bn_weights, bn_forward, bn_backward, 0, 1, 1,
                                         .bwd_reads = bn_bwd_reads, .refill = bn_refill, .refill_sparingly = 1};
