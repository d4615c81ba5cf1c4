/* layer_dense.c -- Dense as a plan node: y = act(x @ kernel + bias) on the last axis.
 *
 * Forward is one GEMM with the bias and activation in its epilogue (softmax, which is
 * not elementwise, runs after it); backward is dz = act'(y) * dy, then dW = x^T dz,
 * db = column sums of dz, dx = dz W^T. Inputs of rank > 1 are treated as (rows, last). */
#include "plan_internal.h"

static gc_status dense_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                             const int *nd)
{
    (void)in, (void)n_in;
    if (nd[0] != 1 || d->out_ndim != 1)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: dense node %d needs rank-1 sample shapes", idx);
    if (!d->weights[GC_W_KERNEL]) return gc_fail(GC_ERR_INVALID_ARG, "plan: dense node %d has no kernel", idx);
    return GC_OK;
}

static void dense_weights(const gc_layer_desc *d, const int64_t *in, int64_t *n, int *tr)
{
    n[GC_W_KERNEL] = in[0] * d->out_shape[0];
    n[GC_W_BIAS] = d->out_shape[0];
    tr[GC_W_KERNEL] = tr[GC_W_BIAS] = 1;
}

static gc_status dense_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)seed;
    const gc_dtype dt = l->dt;
    const int64_t K = l->in_numel[0], N = l->out_numel;
    gc_act act = gc_node_act(p, l, mode);
    gc_gemm_params gp = {0, 0, 1.0f, 0.0f, act == GC_ACT_SOFTMAX ? GC_ACT_LINEAR : act, GC_IMPL_OWN};
    gc_tensor a = gc_t2(gc_node_input(p, l, 0), dt, rows, K);
    gc_tensor w = gc_t2(gc_node_weight(l, GC_W_KERNEL), dt, K, N);
    gc_tensor b = l->w[GC_W_BIAS].w ? gc_t1(gc_node_weight(l, GC_W_BIAS), dt, N) : gc_none();
    gc_tensor c = gc_t2(l->out, dt, rows, N);
    TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &a, &w, &b, &c, NULL, NULL));
    if (act == GC_ACT_SOFTMAX) {
        gc_act_params ap = {GC_ACT_SOFTMAX};
        TRY(gc_plan_run(p, GC_OP_ACT_FWD, &ap, &c, NULL, NULL, &c, NULL, NULL));
    }
    return GC_OK;
}

static gc_status dense_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    const gc_dtype dt = l->dt;
    const int64_t K = l->in_numel[0], N = l->out_numel;
    gc_tensor dz;
    TRY(gc_node_dz(p, l, rows, &dz));
    gc_tensor a = gc_t2(gc_node_input(p, l, 0), dt, rows, K);
    gc_tensor dz2 = gc_t2(dz.data, dt, rows, N);
    gc_tensor nob = gc_none();
    if (l->w[GC_W_KERNEL].trains) {
        gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_tensor dw = gc_t2(l->w[GC_W_KERNEL].dw, dt, K, N);
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &a, &dz2, &nob, &dw, NULL, NULL));
    }
    if (l->w[GC_W_BIAS].trains) {
        gc_tensor db = gc_t1(l->w[GC_W_BIAS].dw, dt, N);
        TRY(gc_plan_run(p, GC_OP_BIAS_GRAD, &(gc_no_params){0}, &dz2, NULL, NULL, &db, NULL, NULL));
    }
    if (l->in_grad[0]) {
        gc_gemm_params gp = {0, 1, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_tensor w = gc_t2(gc_node_weight(l, GC_W_KERNEL), dt, K, N);
        gc_tensor gin = gc_node_gin_tensor(p, l, 0, rows);
        gc_tensor ga = gc_t2(gin.data, dt, rows, K);
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &dz2, &w, &nob, &ga, NULL, NULL));
        TRY(gc_node_deliver(p, l, 0, rows));
    }
    return GC_OK;
}

/* the input for the kernel gradient only; the output for act' only */
static int dense_bwd_reads(const gc_plan *p, const plan_node *l, int k)
{
    (void)p;
    if (k < 0) return l->d.act != GC_ACT_LINEAR;
    return l->w[GC_W_KERNEL].trains;
}

const gc_layer_ops gc_layer_dense = {"dense", 1, 1, dense_check, dense_weights, dense_forward, dense_backward, 0, 0,
                                     .bwd_reads = dense_bwd_reads};
