/* layer_merge.c -- the merge layers as plan nodes: Add (n inputs), Multiply (2 inputs) and
 * Concatenate (n inputs along one axis of the sample shape).
 *
 * Add's backward passes its output gradient to every input unchanged (after relu' when
 * the plan folded a following ReLU into it), so it moves no data of its own beyond the
 * copy or accumulation into each producer's gradient. Concatenate works on the 2-D view
 * (rows * outer extents, inner extents): forward joins the inputs side by side, backward
 * slices the output gradient back into per-input column blocks. */
#include "plan_internal.h"

static gc_status same_shapes(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                             const int *nd)
{
    const char *what = d->kind == GC_LAYER_ADD ? "add" : "multiply";
    for (int k = 0; k < n_in; k++) {
        int same = nd[k] == d->out_ndim;
        for (int a = 0; same && a < nd[k]; a++) same = in[k][a] == d->out_shape[a];
        if (!same)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: %s node %d: input %d does not have the output's shape", what,
                           idx, k);
    }
    if (d->kind == GC_LAYER_ADD && d->act != GC_ACT_LINEAR && d->act != GC_ACT_RELU)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: add node %d: activation must be linear or relu", idx);
    return GC_OK;
}

/* ---------------------------------------------------------------- add */

static gc_status add_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    gc_act_params ap = {l->d.act};
    gc_tensor x[GC_NODE_MAX_INPUTS], y = gc_t1(l->out, l->dt, rows * l->out_numel);
    const gc_tensor *in[GC_NODE_MAX_INPUTS];
    for (int k = 0; k < l->n_in; k++) {
        x[k] = gc_t1(gc_node_input(p, l, k), l->dt, rows * l->out_numel);
        in[k] = &x[k];
    }
    gc_tensor *out[1] = {&y};
    return gc_plan_run_n(p, GC_OP_ADD, &ap, in, l->n_in, out, 1);
}

static gc_status add_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    void *g = l->gout;
    if (l->d.act == GC_ACT_RELU) { /* the folded ReLU's derivative first */
        gc_act_params ap = {GC_ACT_RELU};
        gc_tensor y = gc_t1(l->out, l->dt, rows * l->out_numel), gy = gc_t1(l->gout, l->dt, rows * l->out_numel);
        gc_tensor dz = gc_t1(p->scratch, l->dt, rows * l->out_numel);
        TRY(gc_plan_run(p, GC_OP_ACT_BWD, &ap, &y, &gy, NULL, &dz, NULL, NULL));
        g = p->scratch;
    }
    for (int k = 0; k < l->n_in; k++)
        if (l->in_grad[k]) TRY(gc_node_pass_grad(p, l, k, g, rows));
    return GC_OK;
}

/* ---------------------------------------------------------------- multiply */

static gc_status mul_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    int64_t n = rows * l->out_numel;
    gc_tensor a = gc_t1(gc_node_input(p, l, 0), l->dt, n), b = gc_t1(gc_node_input(p, l, 1), l->dt, n);
    gc_tensor y = gc_t1(l->out, l->dt, n);
    return gc_plan_run(p, GC_OP_MUL, &(gc_no_params){0}, &a, &b, NULL, &y, NULL, NULL);
}

static gc_status mul_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    int64_t n = rows * l->out_numel;
    gc_tensor gy = gc_t1(l->gout, l->dt, n);
    for (int k = 0; k < 2; k++) { /* d(a*b)/da = b, and the other way round */
        if (!l->in_grad[k]) continue;
        gc_tensor other = gc_t1(gc_node_input(p, l, 1 - k), l->dt, n);
        gc_tensor gin = gc_node_gin_tensor(p, l, k, rows);
        gc_tensor g1 = gc_t1(gin.data, l->dt, n);
        TRY(gc_plan_run(p, GC_OP_MUL, &(gc_no_params){0}, &gy, &other, NULL, &g1, NULL, NULL));
        TRY(gc_node_deliver(p, l, k, rows));
    }
    return GC_OK;
}

/* ---------------------------------------------------------------- concatenate */

static gc_status concat_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                              const int *nd)
{
    int64_t sum = 0;
    for (int k = 0; k < n_in; k++) {
        if (nd[k] != d->out_ndim)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: concat node %d: input %d has rank %d, the output %d", idx, k,
                           nd[k], d->out_ndim);
        for (int a = 0; a < nd[k]; a++)
            if (a != d->axis && in[k][a] != d->out_shape[a])
                return gc_fail(GC_ERR_INVALID_ARG,
                               "plan: concat node %d: input %d differs from the output on axis %d (%lld vs %lld), "
                               "which is not the concatenation axis %d", idx, k, a, (long long)in[k][a],
                               (long long)d->out_shape[a], d->axis);
        sum += in[k][d->axis];
    }
    if (sum != d->out_shape[d->axis])
        return gc_fail(GC_ERR_INVALID_ARG, "plan: concat node %d: the inputs add up to %lld on axis %d, the output "
                       "has %lld", idx, (long long)sum, d->axis, (long long)d->out_shape[d->axis]);
    return GC_OK;
}

/* the 2-D view of the concatenation: outer rows (batch and the axes before `axis`),
 * and the inner width of input k (its extents from `axis` on) */
static int64_t concat_outer(const plan_node *l, int64_t rows)
{
    return rows * gc_numel(l->d.out_shape, l->d.axis);
}

static int64_t concat_width(const gc_plan *p, const plan_node *l, int k)
{
    const plan_node *src = &p->L[l->in[k]];
    return gc_numel(src->d.out_shape + l->d.axis, src->d.out_ndim - l->d.axis);
}

static gc_status concat_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    int64_t outer = concat_outer(l, rows);
    gc_tensor x[GC_NODE_MAX_INPUTS];
    const gc_tensor *in[GC_NODE_MAX_INPUTS];
    for (int k = 0; k < l->n_in; k++) {
        x[k] = gc_t2(gc_node_input(p, l, k), l->dt, outer, concat_width(p, l, k));
        in[k] = &x[k];
    }
    gc_tensor y = gc_t2(l->out, l->dt, outer, rows * l->out_numel / outer);
    gc_tensor *out[1] = {&y};
    return gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, in, l->n_in, out, 1);
}

static gc_status concat_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    int64_t outer = concat_outer(l, rows), offset = 0;
    gc_tensor gy = gc_t2(l->gout, l->dt, outer, rows * l->out_numel / outer);
    for (int k = 0; k < l->n_in; k++) {
        int64_t w = concat_width(p, l, k);
        if (l->in_grad[k]) {
            gc_slice_params sp = {offset};
            gc_tensor gin = gc_node_gin_tensor(p, l, k, rows);
            gc_tensor g2 = gc_t2(gin.data, l->dt, outer, w);
            TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &sp, &gy, NULL, NULL, &g2, NULL, NULL));
            TRY(gc_node_deliver(p, l, k, rows));
        }
        offset += w;
    }
    return GC_OK;
}

/* no input; the output for the folded ReLU's mask */
static int add_bwd_reads(const gc_plan *p, const plan_node *l, int k)
{
    (void)p;
    return k < 0 && l->d.act != GC_ACT_LINEAR;
}

static int concat_bwd_reads(const gc_plan *p, const plan_node *l, int k) { (void)p, (void)l, (void)k; return 0; }

const gc_layer_ops gc_layer_add = {"add", 2, GC_NODE_MAX_INPUTS, same_shapes, NULL, add_forward, add_backward, 0, 1, 0,
                                   .bwd_reads = add_bwd_reads};
const gc_layer_ops gc_layer_multiply = {"multiply", 2, 2, same_shapes, NULL, mul_forward, mul_backward, 0, 1, 0};
const gc_layer_ops gc_layer_concat = {"concat", 1, GC_NODE_MAX_INPUTS, concat_check, NULL, concat_forward,
                                      concat_backward, 0, 0, 0, .bwd_reads = concat_bwd_reads};
