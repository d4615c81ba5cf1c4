/* layer_reverse.c -- "reverse": a (T, ...) sample in reverse time order (axis 0).
 *
 * Keras' Bidirectional returns the backward layer's sequence flipped back to input order
 * (ops.flip(y_rev, axis=1)); the rnn node emits it in processing order (RECURRENT_SPEC
 * 1.6), so the plan puts one reverse node after it. Forward and backward are the same op,
 * reverse_seq on the (rows, T, rest) view: the flip is its own inverse. */
#include "plan_internal.h"

static gc_status rev_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    (void)n_in;
    int same = nd[0] >= 1 && d->out_ndim == nd[0];
    for (int k = 0; same && k < nd[0]; k++) same = d->out_shape[k] == in[0][k];
    if (!same)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: reverse node %d must keep its input's shape", idx);
    return GC_OK;
}

/* x -> y, both (rows, T, numel / T) */
static gc_status reversed(gc_plan *p, const plan_node *l, int64_t rows, const void *x, void *y)
{
    const int64_t T = l->d.out_shape[0], C = l->out_numel / T;
    int64_t shape[3] = {rows, T, C};
    gc_tensor tx = gc_tensor_make((void *)x, l->dt, 3, shape), ty = gc_tensor_make(y, l->dt, 3, shape);
    return gc_plan_run(p, GC_OP_REVERSE_SEQ, &(gc_no_params){0}, &tx, NULL, NULL, &ty, NULL, NULL);
}

static gc_status rev_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    return reversed(p, l, rows, gc_node_input(p, l, 0), l->out);
}

static gc_status rev_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_tensor gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(reversed(p, l, rows, l->gout, gx.data));
    return gc_node_deliver(p, l, 0, rows);
}

const gc_layer_ops gc_layer_reverse = {"reverse", 1, 1, rev_check, NULL, rev_forward, rev_backward, 0, 0, 0};
