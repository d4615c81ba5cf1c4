/* layer_pad2d.c -- ZeroPadding2D as a plan node: (H, W, C) -> (H+top+bottom, W+left+right, C)
 * with zeros around; its backward crops the gradient back to the input. */
#include "plan_internal.h"

static gc_status pad_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    (void)n_in;
    if (nd[0] != 3 || d->out_ndim != 3)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: pad2d node %d needs (H, W, C) shapes", idx);
    for (int k = 0; k < 4; k++)
        if (d->pad[k] < 0) return gc_fail(GC_ERR_INVALID_ARG, "plan: pad2d node %d has a negative padding", idx);
    if (d->out_shape[0] != in[0][0] + d->pad[0] + d->pad[1] || d->out_shape[1] != in[0][1] + d->pad[2] + d->pad[3] ||
        d->out_shape[2] != in[0][2])
        return gc_fail(GC_ERR_INVALID_ARG, "plan: pad2d node %d: output (%lld, %lld, %lld) is not the padded input",
                       idx, (long long)d->out_shape[0], (long long)d->out_shape[1], (long long)d->out_shape[2]);
    return GC_OK;
}

static gc_pad2d_params pad_params(const plan_node *l)
{
    gc_pad2d_params pp = {l->d.pad[0], l->d.pad[1], l->d.pad[2], l->d.pad[3]};
    return pp;
}

static gc_status pad_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    gc_pad2d_params pp = pad_params(l);
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
    return gc_plan_run(p, GC_OP_PAD2D_FWD, &pp, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_status pad_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_pad2d_params pp = pad_params(l);
    gc_tensor gy = gc_node_gout_tensor(l, rows), gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(gc_plan_run(p, GC_OP_PAD2D_BWD, &pp, &gy, NULL, NULL, &gx, NULL, NULL));
    return gc_node_deliver(p, l, 0, rows);
}

/* the crop reads only the output gradient */
static int pad_bwd_reads(const gc_plan *p, const plan_node *l, int k) { (void)p, (void)l, (void)k; return 0; }

/* a copy with zeros around: refilled in the backward where its input is kept */
static gc_status pad_refill(gc_plan *p, plan_node *l, int64_t rows) { return pad_forward(p, l, rows, MODE_TRAIN, 0); }

const gc_layer_ops gc_layer_pad2d = {"pad2d", 1, 1, pad_check, NULL, pad_forward, pad_backward, 0, 0, 0,
                                     .bwd_reads = pad_bwd_reads, .refill = pad_refill};
