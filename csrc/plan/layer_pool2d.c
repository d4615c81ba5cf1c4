/* layer_pool2d.c -- MaxPooling2D / AveragePooling2D (and the global poolings, lowered to a
 * window covering the whole image) as plan nodes.
 *
 * After a Dense/Conv2D + ReLU node that feeds only the pool, the max pool's backward
 * applies relu' itself (the plan marks the pair at creation): one pass over the
 * activations instead of two. */
#include "plan_internal.h"

static gc_status pool_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                            const int *nd)
{
    (void)in, (void)n_in;
    if (nd[0] != 3 || d->out_ndim != 3)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: pooling node %d needs (H, W, C) shapes", idx);
    return GC_OK;
}

static gc_status maxpool_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
    return gc_plan_run(p, GC_OP_MAXPOOL2D_FWD, &l->d.pool, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_status maxpool_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_pool2d_params pp = l->d.pool;
    pp.act = l->fold_relu ? GC_ACT_RELU : GC_ACT_LINEAR;
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), gy = gc_node_gout_tensor(l, rows);
    gc_tensor gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(gc_plan_run(p, GC_OP_MAXPOOL2D_BWD, &pp, &x, &gy, NULL, &gx, NULL, NULL));
    return gc_node_deliver(p, l, 0, rows);
}

static gc_status avgpool_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
    return gc_plan_run(p, GC_OP_AVGPOOL2D_FWD, &l->d.pool, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_status avgpool_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_tensor gy = gc_node_gout_tensor(l, rows), gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(gc_plan_run(p, GC_OP_AVGPOOL2D_BWD, &l->d.pool, &gy, NULL, NULL, &gx, NULL, NULL));
    return gc_node_deliver(p, l, 0, rows);
}

/* max: the input (where the maxima are), not the output; average: neither */
static int maxpool_bwd_reads(const gc_plan *p, const plan_node *l, int k) { (void)p, (void)l; return k == 0; }
static int avgpool_bwd_reads(const gc_plan *p, const plan_node *l, int k) { (void)p, (void)l, (void)k; return 0; }

const gc_layer_ops gc_layer_maxpool2d = {"maxpool2d", 1, 1, pool_check, NULL, maxpool_forward, maxpool_backward, 0, 0,
                                         .bwd_reads = maxpool_bwd_reads};
const gc_layer_ops gc_layer_avgpool2d = {"avgpool2d", 1, 1, pool_check, NULL, avgpool_forward, avgpool_backward, 0, 0,
                                         .bwd_reads = avgpool_bwd_reads};
