/* layer_seq_mask.c -- Keras masks as plan nodes: "seq_mask" computes a step mask,
 * "masking" applies one (the Masking layer's output), and "mask_or" joins the masks of a
 * merge layer's inputs (Keras' rule for Add / Multiply / Concatenate: logical OR).
 *
 * Keras attaches a (B, T) boolean mask to a tensor (Embedding(mask_zero=True): ids != 0;
 * Masking(mask_value): any(x != mask_value) over the features) and hands it to the layers
 * that take one (the recurrent layers: RECURRENT_SPEC 1.8). Here a mask is an ordinary
 * node output of shape (T,), float32 0/1 -- what rnn_fwd / rnn_bwd read -- that every
 * consumer reads as stored (raw_output: no cast to a half compute dtype, no gradient).
 * seq_mask reads its input as its producer stores it (raw ids from the model input: the
 * mask is computed from the uncast ids, as Keras does). masking's gradient is dy * mask. */
#include "plan_internal.h"

/* ---------------------------------------------------------------- seq_mask */

static gc_status smask_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                             const int *nd)
{
    (void)n_in;
    int same = nd[0] >= 1 && (d->out_ndim == nd[0] || d->out_ndim == nd[0] - 1);
    for (int k = 0; same && k < d->out_ndim; k++) same = d->out_shape[k] == in[0][k];
    if (!same)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: seq_mask node %d: the mask must have the input's shape or the "
                       "input's shape without its last (feature) axis", idx);
    return GC_OK;
}

static gc_status smask_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    const plan_node *src = &p->L[l->in[0]];
    const int64_t R = rows * l->out_numel, F = l->in_numel[0] / l->out_numel;
    gc_seq_mask_params mp = {l->d.mask_value};
    gc_tensor x = gc_t2(src->out, src->dt, R, F), m = gc_t1(l->out, GC_F32, R);
    return gc_plan_run(p, GC_OP_SEQ_MASK, &mp, &x, NULL, NULL, &m, NULL, NULL);
}

const gc_layer_ops gc_layer_seq_mask = {"seq_mask", 1, 1, smask_check, NULL, smask_forward, NULL,
                                        0, 0, 0, NULL, 1, 1};

/* ---------------------------------------------------------------- masking */

static gc_status masking_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                               const int *nd)
{
    int64_t steps = gc_numel(in[1], nd[1]);
    (void)n_in;
    if (nd[0] < 2 || gc_numel(in[0], nd[0] - 1) != steps || gc_numel(d->out_shape, d->out_ndim) != gc_numel(in[0], nd[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: masking node %d needs x (T, F) and its mask (T,)", idx);
    return GC_OK;
}

/* x (rows * T, F, 1) times the mask (rows * T, 1) */
static gc_status masked_product(gc_plan *p, const plan_node *l, int64_t rows, void *x, void *y)
{
    const int64_t RT = rows * l->in_numel[1], F = l->in_numel[0] / l->in_numel[1];
    int64_t shape[3] = {RT, F, 1};
    gc_tensor tx = gc_tensor_make(x, l->dt, 3, shape), ty = gc_tensor_make(y, l->dt, 3, shape);
    gc_tensor m = gc_t2(p->L[l->in[1]].out, GC_F32, RT, 1);
    return gc_plan_run(p, GC_OP_MUL_BCAST, &(gc_no_params){0}, &tx, &m, NULL, &ty, NULL, NULL);
}

static gc_status masking_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    return masked_product(p, l, rows, gc_node_input(p, l, 0), l->out);
}

static gc_status masking_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_tensor gin = gc_node_gin_tensor(p, l, 0, rows);
    TRY(masked_product(p, l, rows, l->gout, gin.data));
    return gc_node_deliver(p, l, 0, rows);
}

const gc_layer_ops gc_layer_masking = {"masking", 2, 2, masking_check, NULL, masking_forward, masking_backward,
                                       0, 0, 0, NULL, 0, 0};

/* ---------------------------------------------------------------- mask_or */

/* priv[0]: the n masks side by side per step, (rows * T, n) */
static gc_status mor_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    int64_t T = gc_numel(d->out_shape, d->out_ndim);
    for (int k = 0; k < n_in; k++)
        if (gc_numel(in[k], nd[k]) != T)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: mask_or node %d: mask %d has %lld steps, the output %lld", idx,
                           k, (long long)gc_numel(in[k], nd[k]), (long long)T);
    return GC_OK;
}

static gc_status mor_setup(gc_plan *p, plan_node *l)
{
    return gc_plan_alloc(p, p->max_batch * l->out_numel * l->n_in, GC_F32, &l->priv[0]);
}

/* or = any(m_k != 0) over k: the masks interleaved (concat of (rows*T, 1) columns), then
 * seq_mask with value 0 over that last axis */
static gc_status mor_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    const int64_t R = rows * l->out_numel;
    gc_tensor m[GC_NODE_MAX_INPUTS];
    const gc_tensor *in[GC_NODE_MAX_INPUTS];
    for (int k = 0; k < l->n_in; k++) {
        m[k] = gc_t2(p->L[l->in[k]].out, GC_F32, R, 1);
        in[k] = &m[k];
    }
    gc_tensor side = gc_t2(l->priv[0], GC_F32, R, l->n_in), y = gc_t1(l->out, GC_F32, R);
    gc_tensor *out[1] = {&side};
    TRY(gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, in, l->n_in, out, 1));
    gc_seq_mask_params mp = {0.0f};
    return gc_plan_run(p, GC_OP_SEQ_MASK, &mp, &side, NULL, NULL, &y, NULL, NULL);
}

const gc_layer_ops gc_layer_mask_or = {"mask_or", 2, GC_NODE_MAX_INPUTS, mor_check, NULL, mor_forward, NULL,
                                       0, 0, 0, mor_setup, 1, 1};
