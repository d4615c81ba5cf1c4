/* layer_misc.c -- the plan nodes without weights that keep the element count: model
 * inputs, Reshape/Flatten (views: no work, no copy), Dropout, Activation, and scale (x
 * times a constant: Bidirectional's merge_mode "ave" after the add). */
#include "plan_internal.h"

static gc_status same_count(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                            const int *nd)
{
    (void)n_in;
    int64_t a = gc_numel(in[0], nd[0]), b = gc_numel(d->out_shape, d->out_ndim);
    if (a != b)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: node %d changes the element count (%lld -> %lld)", idx,
                       (long long)a, (long long)b);
    return GC_OK;
}

/* ---------------------------------------------------------------- reshape */

static gc_status reshape_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0] || l->gout_alias) return GC_OK; /* the input's gradient is ours */
    return gc_node_pass_grad(p, l, 0, l->gout, rows);
}

/* ---------------------------------------------------------------- dropout */

/* node i's mask seed: the step's seed XOR a per-node constant; in device mode the step's
 * part is read by the kernel from backend memory (dyn_seed) */
static gc_dropout_params dropout_params(const gc_plan *p, const plan_node *l, uint64_t seed)
{
    gc_dropout_params dp = {l->d.dropout_rate, 0x9E37ull * (uint64_t)(l->idx), NULL};
    if (p->device_mode) dp.dyn_seed = p->dyn_seed;
    else dp.seed ^= seed;
    return dp;
}

static gc_status dropout_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    if (mode == MODE_TRAIN && l->d.dropout_rate > 0.0f) {
        gc_dropout_params dp = dropout_params(p, l, seed);
        gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
        return gc_plan_run(p, GC_OP_DROPOUT_FWD, &dp, &x, NULL, NULL, &y, NULL, NULL);
    }
    return gc_plan_copy(p, l->out, gc_node_input(p, l, 0), (size_t)(rows * l->out_numel) * gc_dtype_size(l->dt));
}

static gc_status dropout_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    if (!l->in_grad[0]) return GC_OK;
    if (l->d.dropout_rate <= 0.0f) return gc_node_pass_grad(p, l, 0, l->gout, rows);
    gc_dropout_params dp = dropout_params(p, l, seed);
    gc_tensor gy = gc_node_gout_tensor(l, rows), gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(gc_plan_run(p, GC_OP_DROPOUT_BWD, &dp, &gy, NULL, NULL, &gx, NULL, NULL));
    return gc_node_deliver(p, l, 0, rows);
}

/* ---------------------------------------------------------------- activation */

static gc_status act_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)seed;
    gc_act_params ap = {gc_node_act(p, l, mode)};
    gc_tensor x = gc_node_in_tensor(p, l, 0, rows), y = gc_node_out_tensor(l, rows);
    if (ap.act == GC_ACT_LINEAR)
        return gc_plan_copy(p, l->out, x.data, (size_t)(rows * l->out_numel) * gc_dtype_size(l->dt));
    return gc_plan_run(p, GC_OP_ACT_FWD, &ap, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_status act_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_act_params ap = {gc_node_act(p, l, MODE_TRAIN)};
    if (ap.act == GC_ACT_LINEAR) return gc_node_pass_grad(p, l, 0, l->gout, rows);
    gc_tensor y = gc_node_out_tensor(l, rows), gy = gc_node_gout_tensor(l, rows);
    gc_tensor gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(gc_plan_run(p, GC_OP_ACT_BWD, &ap, &y, &gy, NULL, &gx, NULL, NULL));
    return gc_node_deliver(p, l, 0, rows);
}

/* ---------------------------------------------------------------- scale */

/* y = x * scale (scale_cast within one dtype: float32 arithmetic, one rounding) */
static gc_status scaled(gc_plan *p, const plan_node *l, int64_t rows, void *x, void *y)
{
    gc_scale_cast_params sp = {l->d.scale, NULL, 0};
    gc_tensor tx = gc_t1(x, l->dt, rows * l->out_numel), ty = gc_t1(y, l->dt, rows * l->out_numel);
    return gc_plan_run(p, GC_OP_SCALE_CAST, &sp, &tx, NULL, NULL, &ty, NULL, NULL);
}

static gc_status scale_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    return scaled(p, l, rows, gc_node_input(p, l, 0), l->out);
}

static gc_status scale_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->in_grad[0]) return GC_OK;
    gc_tensor gx = gc_node_gin_tensor(p, l, 0, rows);
    TRY(scaled(p, l, rows, l->gout, gx.data));
    return gc_node_deliver(p, l, 0, rows);
}

const gc_layer_ops gc_layer_input = {"input", 0, 0, NULL, NULL, NULL, NULL, 0, 0};
const gc_layer_ops gc_layer_reshape = {"reshape", 1, 1, same_count, NULL, NULL, reshape_backward, 1, 0};
const gc_layer_ops gc_layer_dropout = {"dropout", 1, 1, same_count, NULL, dropout_forward, dropout_backward, 0, 1};
const gc_layer_ops gc_layer_activation = {"activation", 1, 1, same_count, NULL, act_forward, act_backward, 0, 1};
const gc_layer_ops gc_layer_scale = {"scale", 1, 1, same_count, NULL, scale_forward, scale_backward, 0, 0};
