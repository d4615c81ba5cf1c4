/* loss.c -- the plan's loss, its gradient and the metrics, from the output node.
 *
 * The loss is computed in float32 from a float32 copy of a half-precision output (Keras
 * casts y_pred). A softmax / sigmoid output with a cross-entropy loss is fused: the last
 * node runs linear and the loss is computed from the logits, as TensorFlow does, while
 * metrics see the probabilities predict() returns. Per-row values are summed on the
 * device in device-resident mode (no transfer per step), else downloaded once.
 *
 * A masked output (Keras 3, losses/loss.py apply_mask with "sum_over_batch_size") weights
 * each loss row r by w_r = mask_r * R / sum(mask) -- 0 for every row when nothing is
 * unmasked (divide_no_nan) -- so the batch loss sum(l * w) / R is sum(l * mask) /
 * sum(mask) and its gradient dl * mask / sum(mask). All on the device: sum(mask) by
 * reduce_sum (plus 1e-20, which leaves any count >= 1 unchanged and makes an all-masked
 * batch 0 * R / 1e-20 = 0), w by scale_cast dividing by it, the products by mul /
 * mul_bcast. Metrics stay unmasked (the Python side refuses them on a masked output). */
#include "plan_internal.h"

#include <stdlib.h>

static gc_status download_sum(gc_plan *p, void *rows_buf, int64_t n, double *sum)
{
    *sum = 0.0;
    if (p->checking || n == 0) return GC_OK;
    TRY(gc_plan_download(p, p->host_rows, rows_buf, (size_t)n * sizeof(float)));
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += p->host_rows[i];
    *sum = s;
    return GC_OK;
}

/* The total of n per-row values: summed on the device into acc[slot] in device mode (no
 * transfer), else downloaded and summed in double. */
static gc_status total(gc_plan *p, void *rows_buf, int64_t n, int slot, double *sum)
{
    if (!p->device_mode) return download_sum(p, rows_buf, n, sum);
    gc_reduce_params rp = {1, 1.0f};
    gc_tensor x = gc_t1(rows_buf, GC_F32, n), y = gc_t1((float *)p->acc + slot, GC_F32, 1);
    *sum = 0.0;
    return gc_plan_run(p, GC_OP_REDUCE_SUM, &rp, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_tensor t3_of(void *data, int64_t R, int64_t C)
{
    int64_t shape[3] = {R, C, 1};
    return gc_tensor_make(data, GC_F32, 3, shape);
}

/* w = mask * R / (sum(mask) + 1e-20) for the R loss rows of this call */
static gc_status loss_mask_weights(gc_plan *p, int64_t R)
{
    gc_reduce_params set = {0, 1.0f}, add = {1, 1.0f};
    gc_tensor eps = gc_t1(p->mask_eps, GC_F32, 1), valid = gc_t1(p->mask_valid, GC_F32, 1);
    gc_tensor m = gc_t1(p->L[p->train.loss_mask_node].out, GC_F32, R), w = gc_t1(p->mask_w, GC_F32, R);
    TRY(gc_plan_run(p, GC_OP_REDUCE_SUM, &set, &eps, NULL, NULL, &valid, NULL, NULL));
    TRY(gc_plan_run(p, GC_OP_REDUCE_SUM, &add, &m, NULL, NULL, &valid, NULL, NULL));
    gc_scale_cast_params sp = {(float)R, (const float *)p->mask_valid, 1};
    return gc_plan_run(p, GC_OP_SCALE_CAST, &sp, &m, NULL, NULL, &w, NULL, NULL);
}

gc_status gc_plan_loss_and_metrics(gc_plan *p, int64_t rows, int want_grad, gc_step_stats *st)
{
    p->cur_phase = "loss";
    p->cur_node = p->n - 1;
    plan_node *last = &p->L[p->n - 1];
    int64_t R = rows * p->rows_per_sample, C = p->cols;
    /* the loss in float32, from a float32 copy of a half-precision output (Keras casts
     * y_pred); its gradient goes through glast32 when it must be cast or scaled */
    void *out32 = last->out;
    if (p->logits32) {
        TRY(gc_plan_cast(p, last->out, last->dt, p->logits32, GC_F32, R * C));
        out32 = p->logits32;
    }
    gc_tensor out = gc_t2(out32, GC_F32, R, C);
    gc_tensor lab = p->sparse ? gc_t1(p->y, GC_I32, R) : gc_t2(p->y, GC_F32, R, C);
    gc_tensor lr = gc_t1(p->loss_rows, GC_F32, R);
    gc_tensor g = want_grad ? gc_t2(p->glast32 ? p->glast32 : last->gout, GC_F32, R, C) : gc_none();
    gc_loss_params lp = {R > 0 ? 1.0f / (float)R : 0.0f, 0, GC_REG_MSE};
    switch (p->train.loss) {
    case GC_LOSS_CATEGORICAL_XENT:
    case GC_LOSS_SPARSE_CATEGORICAL_XENT:
        if (p->fused || p->train.from_logits)
            TRY(gc_plan_run(p, GC_OP_SOFTMAX_XENT, &lp, &out, &lab, NULL, &lr, &g, NULL));
        else
            TRY(gc_plan_run(p, GC_OP_XENT_PROBS, &lp, &out, &lab, NULL, &lr, &g, NULL));
        break;
    case GC_LOSS_BINARY_XENT:
        if (p->fused || p->train.from_logits)
            TRY(gc_plan_run(p, GC_OP_SIGMOID_BCE, &lp, &out, &lab, NULL, &lr, &g, NULL));
        else {
            lp.binary = 1;
            TRY(gc_plan_run(p, GC_OP_XENT_PROBS, &lp, &out, &lab, NULL, &lr, &g, NULL));
        }
        break;
    case GC_LOSS_MSE:
    case GC_LOSS_MAE:
        lp.kind = p->train.loss == GC_LOSS_MSE ? GC_REG_MSE : GC_REG_MAE;
        TRY(gc_plan_run(p, GC_OP_REGRESSION_LOSS, &lp, &out, &lab, NULL, &lr, &g, NULL));
        break;
    default:
        return gc_fail(GC_ERR_INVALID_ARG, "plan: unknown loss %d", (int)p->train.loss);
    }
    if (p->train.has_loss_mask) { /* Keras' masked reduction: rows weighted by w */
        TRY(loss_mask_weights(p, R));
        gc_tensor w = gc_t1(p->mask_w, GC_F32, R), w2 = gc_t2(p->mask_w, GC_F32, R, 1);
        TRY(gc_plan_run(p, GC_OP_MUL, &(gc_no_params){0}, &lr, &w, NULL, &lr, NULL, NULL));
        if (want_grad) {
            gc_tensor g3 = t3_of(g.data, R, C);
            TRY(gc_plan_run(p, GC_OP_MUL_BCAST, &(gc_no_params){0}, &g3, &w2, NULL, &g3, NULL, NULL));
        }
    }
    if (want_grad && p->glast32) /* times the loss scale, into the last layer's dtype */
        TRY(gc_plan_scale_cast(p, p->glast32, GC_F32, last->gout, last->dt, R * C,
                       p->train.loss_scaling ? (const float *)p->ls_state : NULL, 0, 0));
    double s;
    TRY(total(p, p->loss_rows, R, 0, &s));
    st->loss_sum = s / (double)p->rows_per_sample;

    if (!p->train.metrics) return GC_OK;
    /* metrics see what predict() returns: probabilities when the loss was fused */
    gc_tensor pred = out;
    if (p->fused) {
        gc_act_params ap = {last->d.act};
        gc_tensor pr = gc_t2(p->probs, GC_F32, R, C);
        TRY(gc_plan_run(p, GC_OP_ACT_FWD, &ap, &out, NULL, NULL, &pr, NULL, NULL));
        pred = pr;
    }
    for (int bit = 0; bit < GC_METRIC_COUNT; bit++) {
        unsigned m = 1u << bit;
        if (!(p->train.metrics & m)) continue;
        if (m == GC_METRIC_MSE || m == GC_METRIC_MAE) {
            gc_loss_params mp = {0.0f, 0, m == GC_METRIC_MSE ? GC_REG_MSE : GC_REG_MAE};
            gc_tensor tgt = p->sparse ? gc_none() : lab;
            if (p->sparse) return gc_fail(GC_ERR_INVALID_ARG, "plan: mse/mae metrics need dense labels");
            gc_tensor mr = gc_t1(p->metric_rows, GC_F32, R);
            gc_tensor nog = gc_none();
            TRY(gc_plan_run(p, GC_OP_REGRESSION_LOSS, &mp, &pred, &tgt, NULL, &mr, &nog, NULL));
            TRY(total(p, p->metric_rows, R, 1 + bit, &s));
            st->metric_sum[bit] = s / (double)p->rows_per_sample;
        } else {
            gc_accuracy_params ap = {m == GC_METRIC_ACC_CATEGORICAL ? GC_ACC_CATEGORICAL
                                     : m == GC_METRIC_ACC_SPARSE    ? GC_ACC_SPARSE
                                                                    : GC_ACC_BINARY,
                                     0.5f};
            if ((ap.kind == GC_ACC_SPARSE) != (p->sparse != 0))
                return gc_fail(GC_ERR_INVALID_ARG,
                               "plan: %s accuracy does not fit %s labels",
                               ap.kind == GC_ACC_SPARSE ? "sparse" : "dense",
                               p->sparse ? "integer" : "float");
            gc_tensor cnt = gc_t1(p->count, GC_F32, 1);
            TRY(gc_plan_run(p, GC_OP_ACCURACY, &ap, &pred, &lab, NULL, &cnt, NULL, NULL));
            TRY(total(p, p->count, 1, 1 + bit, &s));
            st->metric_sum[bit] = s / (double)p->rows_per_sample;
        }
    }
    return GC_OK;
}

/* the loss buffers, and whether the last activation folds into the loss */
gc_status gc_plan_setup_loss(gc_plan *p)
{
    const gc_train_desc *t = &p->train;
    plan_node *last = &p->L[p->n - 1];
    if ((unsigned)t->loss >= GC_LOSS_COUNT || (unsigned)t->opt >= GC_OPT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: unknown loss or optimizer");
    p->sparse = t->loss == GC_LOSS_SPARSE_CATEGORICAL_XENT;
    const gc_layer_desc *ld = &last->d;
    p->cols = ld->out_shape[ld->out_ndim - 1];
    p->rows_per_sample = last->out_numel / p->cols;
    int act_kind = ld->kind == GC_LAYER_DENSE || ld->kind == GC_LAYER_CONV2D || ld->kind == GC_LAYER_ACTIVATION;
    int final_softmax = act_kind && ld->act == GC_ACT_SOFTMAX;
    int final_sigmoid = act_kind && ld->act == GC_ACT_SIGMOID;
    p->fused = !t->from_logits &&
               ((final_softmax && (t->loss == GC_LOSS_CATEGORICAL_XENT ||
                                   t->loss == GC_LOSS_SPARSE_CATEGORICAL_XENT)) ||
                (final_sigmoid && t->loss == GC_LOSS_BINARY_XENT));
    if (p->sparse && (t->metrics & (GC_METRIC_MSE | GC_METRIC_MAE)))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: mse/mae metrics need one-hot labels, not sparse ones");
    int64_t R = p->max_batch * p->rows_per_sample;
    TRY(gc_plan_alloc(p, p->sparse ? R : p->max_batch * last->out_numel, GC_F32, &p->y));
    TRY(gc_plan_alloc(p, R, GC_F32, &p->loss_rows));
    TRY(gc_plan_alloc(p, R, GC_F32, &p->metric_rows));
    TRY(gc_plan_alloc(p, 1, GC_F32, &p->count));
    if (p->fused) TRY(gc_plan_alloc(p, p->max_batch * last->out_numel, GC_F32, &p->probs));
    if (t->loss_scaling) {
        if (t->loss_scale_growth < 1)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: loss_scale_growth must be >= 1, got %d", t->loss_scale_growth);
        TRY(gc_plan_alloc(p, 2, GC_F32, &p->ls_state));
        TRY(gc_plan_alloc(p, 1, GC_F32, &p->ls_bad));
    }
    if (last->dt != GC_F32 || t->loss_scaling) /* the loss gradient is cast and / or scaled */
        TRY(gc_plan_alloc(p, p->max_batch * last->out_numel, GC_F32, &p->glast32));
    if (t->has_loss_mask) {
        const int k = t->loss_mask_node;
        if (k < 0 || k >= p->n - 1 || p->L[k].dt != GC_F32 || p->L[k].out_numel != p->rows_per_sample)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: loss_mask node %d must be an earlier float32 node with one "
                           "value per loss row of a sample (%lld)", k, (long long)p->rows_per_sample);
        TRY(gc_plan_alloc(p, R, GC_F32, &p->mask_w));
        TRY(gc_plan_alloc(p, 1, GC_F32, &p->mask_valid));
        TRY(gc_plan_alloc(p, 1, GC_F32, &p->mask_eps));
        const float tiny = 1e-20f;
        TRY(p->be->upload(p->be, p->mask_eps, &tiny, sizeof tiny));
    }
    p->host_rows = malloc((size_t)(R > 0 ? R : 1) * sizeof(float));
    if (!p->host_rows) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    return GC_OK;
}
