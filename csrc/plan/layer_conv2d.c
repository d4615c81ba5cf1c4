/* layer_conv2d.c -- Conv2D as a plan node (NHWC, kernel (kh, kw, in, out) as Keras keeps it).
 *
 * Forward is one conv2d_fwd with bias and activation in its epilogue (softmax after it);
 * backward is dz = act'(y) * dy, conv2d_bwd_filter for the kernel and bias gradients and
 * conv2d_bwd_data for the input gradient, each only where it is needed; where that input
 * fans out and its gradient is already there, conv2d_bwd_data adds to it (accumulate). */
#include "plan_internal.h"

static gc_status conv_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                            const int *nd)
{
    (void)in, (void)n_in;
    if (nd[0] != 3 || d->out_ndim != 3)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: conv2d node %d needs (H, W, C) shapes", idx);
    if (!d->weights[GC_W_KERNEL]) return gc_fail(GC_ERR_INVALID_ARG, "plan: conv2d node %d has no kernel", idx);
    if (d->kernel_h < 1 || d->kernel_w < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: conv2d node %d has kernel size %dx%d", idx, d->kernel_h, d->kernel_w);
    return GC_OK;
}

static void conv_weights(const gc_layer_desc *d, const int64_t *in, int64_t *n, int *tr)
{
    n[GC_W_KERNEL] = (int64_t)d->kernel_h * d->kernel_w * in[2] * d->out_shape[2];
    n[GC_W_BIAS] = d->out_shape[2];
    tr[GC_W_KERNEL] = tr[GC_W_BIAS] = 1;
}

static gc_tensor kernel_tensor(const plan_node *l, const gc_plan *p, void *data)
{
    int64_t ks[4] = {l->d.kernel_h, l->d.kernel_w, p->L[l->in[0]].d.out_shape[2], l->d.out_shape[2]};
    return gc_tensor_make(data, l->dt, 4, ks);
}

static gc_status conv_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)seed;
    gc_act act = gc_node_act(p, l, mode);
    gc_conv2d_params cp = l->d.conv;
    cp.act = act == GC_ACT_SOFTMAX ? GC_ACT_LINEAR : act;
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
    gc_tensor w = kernel_tensor(l, p, gc_node_weight(l, GC_W_KERNEL));
    gc_tensor b = l->w[GC_W_BIAS].w ? gc_t1(gc_node_weight(l, GC_W_BIAS), l->dt, l->d.out_shape[2]) : gc_none();
    TRY(gc_plan_run(p, GC_OP_CONV2D_FWD, &cp, &x, &w, &b, &y, NULL, NULL));
    if (act == GC_ACT_SOFTMAX) {
        gc_act_params ap = {GC_ACT_SOFTMAX};
        TRY(gc_plan_run(p, GC_OP_ACT_FWD, &ap, &y, NULL, NULL, &y, NULL, NULL));
    }
    return GC_OK;
}

static gc_status conv_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    gc_tensor dz;
    TRY(gc_node_dz(p, l, rows, &dz));
    gc_conv2d_params cp = l->d.conv;
    cp.act = GC_ACT_LINEAR;
    if (l->w[GC_W_KERNEL].trains || l->w[GC_W_BIAS].trains) {
        gc_tensor x = gc_node_in_tensor(p, l, 0, rows);
        gc_tensor dw = kernel_tensor(l, p, l->w[GC_W_KERNEL].dw);
        gc_tensor db = l->w[GC_W_BIAS].trains ? gc_t1(l->w[GC_W_BIAS].dw, l->dt, l->d.out_shape[2]) : gc_none();
        TRY(gc_plan_run(p, GC_OP_CONV2D_BWD_FILTER, &cp, &x, &dz, NULL, &dw, &db, NULL));
    }
    if (l->in_grad[0]) {
        gc_tensor w = kernel_tensor(l, p, gc_node_weight(l, GC_W_KERNEL));
        /* a fan-out's later gradient is added by the op itself (no staging, no add pass) */
        cp.accumulate = gc_node_gin_adds(p, l, 0);
        gc_tensor gx = cp.accumulate ? gc_node_gout_tensor(&p->L[l->in[0]], rows) : gc_node_gin_tensor(p, l, 0, rows);
        TRY(gc_plan_run(p, GC_OP_CONV2D_BWD_DATA, &cp, &dz, &w, NULL, &gx, NULL, NULL));
        if (!cp.accumulate) TRY(gc_node_deliver(p, l, 0, rows));
    }
    return GC_OK;
}

/* the input for the weight gradient only; the output for act' only */
static int conv_bwd_reads(const gc_plan *p, const plan_node *l, int k)
{
    (void)p;
    if (k < 0) return l->d.act != GC_ACT_LINEAR;
    return l->w[GC_W_KERNEL].trains || l->w[GC_W_BIAS].trains;
}

const gc_layer_ops gc_layer_conv2d = {"conv2d", 1, 1, conv_check, conv_weights, conv_forward, conv_backward, 0, 0,
                                      .bwd_reads = conv_bwd_reads};
