/* layer_select.c -- one output of a node that has several, as its own plan node.
 *
 * A plan node has one output buffer. A layer call with several outputs (a recurrent
 * layer with return_state: [output, h, c], RECURRENT_SPEC 1.6) lowers to one node whose
 * sample is its outputs side by side, and one "select" node per output used: elements
 * [select_offset, select_offset + out_numel) of each sample (slice_cols on the (rows,
 * W) view). Its backward puts the gradient back in place with zeros around it (concat
 * with two zero blocks the node owns), so the plan's usual fan-out accumulation adds
 * the gradients of the several outputs into the producer's gradient, and an output no
 * one uses contributes zeros. */
#include "plan_internal.h"

enum { SEL_ZL = 0, SEL_ZR }; /* priv: the zero blocks left and right of the selection */

static int64_t sel_right(const plan_node *l) { return l->in_numel[0] - l->d.select_offset - l->out_numel; }

static gc_status sel_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    (void)n_in;
    int64_t W = gc_numel(in[0], nd[0]), w = gc_numel(d->out_shape, d->out_ndim);
    if (d->select_offset < 0 || d->select_offset + w > W)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: select node %d takes elements [%lld, %lld) of samples of %lld", idx,
                       (long long)d->select_offset, (long long)(d->select_offset + w), (long long)W);
    return GC_OK;
}

static gc_status sel_setup(gc_plan *p, plan_node *l)
{
    if (!p->training) return GC_OK;
    if (l->d.select_offset) TRY(gc_plan_alloc(p, p->max_batch * l->d.select_offset, l->dt, &l->priv[SEL_ZL]));
    if (sel_right(l)) TRY(gc_plan_alloc(p, p->max_batch * sel_right(l), l->dt, &l->priv[SEL_ZR]));
    return GC_OK;
}

static gc_status sel_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    gc_slice_params sp = {l->d.select_offset};
    gc_tensor x = gc_t2(gc_node_input(p, l, 0), l->dt, rows, l->in_numel[0]);
    gc_tensor y = gc_t2(l->out, l->dt, rows, l->out_numel);
    return gc_plan_run(p, GC_OP_SLICE_COLS, &sp, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_status sel_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_tensor zl = gc_t2(l->priv[SEL_ZL], l->dt, rows, l->d.select_offset);
    gc_tensor g = gc_t2(l->gout, l->dt, rows, l->out_numel);
    gc_tensor zr = gc_t2(l->priv[SEL_ZR], l->dt, rows, sel_right(l));
    const gc_tensor *parts[3];
    int n = 0;
    if (l->d.select_offset) parts[n++] = &zl;
    parts[n++] = &g;
    if (sel_right(l)) parts[n++] = &zr;
    gc_tensor gin = gc_node_gin_tensor(p, l, 0, rows);
    gc_tensor gin2 = gc_t2(gin.data, l->dt, rows, l->in_numel[0]);
    gc_tensor *out[1] = {&gin2};
    if (n == 1) TRY(gc_plan_copy(p, gin.data, l->gout, (size_t)(rows * l->out_numel) * gc_dtype_size(l->dt)));
    else TRY(gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, parts, n, out, 1));
    return gc_node_deliver(p, l, 0, rows);
}

const gc_layer_ops gc_layer_select = {"select", 1, 1, sel_check, NULL, sel_forward, sel_backward,
                                      0, 0, 0, sel_setup, 0, 0};
