/* plan.c -- the execution plan: a compiled Sequential model run as flat op sequences.
 *
 * What it provides: gc_plan_create / train_step / eval_step / predict. A plan owns
 * every activation and gradient buffer (allocated once, for max_batch rows, through the
 * backend table), borrows the weights and optimizer state from the caller (so models
 * that share layers share weights, as in Keras), and runs one training step -- forward,
 * loss, metrics, backward, update -- in a single call that only touches backend ops.
 * The CUDA backend therefore plugs in without changes here.
 *
 * Why this shape: small models are launch-bound, so everything that can be decided
 * once is decided at creation: buffer sizes, aliasing (Flatten/Reshape are views),
 * which layers need an input gradient (none below the first trainable layer), and the
 * softmax/sigmoid + cross-entropy fusion (the loss is computed from the logits, as
 * TensorFlow does). Creation also runs the whole step once in "check" mode, where
 * each op call is validated by core instead of executed; steps then call the backend
 * slots directly.
 *
 * Mixed precision (Keras' dtype policies): each layer has a compute dtype. Its output
 * and the gradient of its output are stored in it; an input of another dtype is cast
 * on the way in (and its gradient on the way back); the caller's float32 master
 * weights are cast to it at every forward pass; weight gradients come out in it and are
 * converted to float32 for the optimizer. The loss is computed in float32 from a cast
 * of the last output, as Keras casts y_pred. With loss scaling (mixed_float16) the loss
 * gradient is multiplied by the scale held in backend memory, the weight gradients are
 * divided by it while they are converted, counting non-finite values, and the optimizer
 * kernels skip the step when that count is not 0 -- no host round trip, so a captured
 * step replays it. A backend without native half storage (the CPU) computes each op in
 * float32 through core's widening (gc_op_run): storage precision as on the GPU,
 * float32 arithmetic. */
#include "gpucmp.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { MODE_TRAIN, MODE_EVAL, MODE_PREDICT } run_mode;

typedef struct {
    gc_layer_desc d;
    int64_t in_numel, out_numel;  /* per sample */
    void *out;                    /* output activations (aliases for views) */
    void *gout;                   /* gradient w.r.t. the output */
    void *dw, *db;                /* weight gradients when trainable */
    void **state_w, **state_b;    /* optimizer state for kernel / bias */
    int needs_gin;                /* compute the gradient w.r.t. the input */
    int is_view;                  /* reshape: out aliases the input */
    int owns_gout;                /* gout was allocated for this layer (not an alias) */
    gc_dtype dt, in_dt;           /* compute dtype; dtype of the input as it arrives */
    void *xc, *gxc;               /* input cast to dt, its gradient in dt (dt != in_dt) */
    void *wc, *bc;                /* the weights cast to dt (dt != f32) */
    void *dw32, *db32;            /* float32 weight gradients for the optimizer (dw, db
                                   * themselves when they are float32 already) */
    int fold_relu;                /* max pool after a ReLU layer: its backward applies relu' */
    int gout_masked;              /* a ReLU layer whose gout already holds dz (fold_relu above) */
} plan_layer;

struct gc_plan {
    const gc_backend *be;
    int n;
    plan_layer *L;
    int64_t max_batch;
    int64_t in_numel, out_numel; /* per sample, model input / output */
    void *x;                     /* model input */
    void *scratch;               /* act' products (dz), largest layer output */
    int64_t scratch_numel;
    int training;
    gc_train_desc train;
    void **state_copy;
    /* loss / metrics */
    int sparse;                  /* int32 labels */
    int fused;                   /* last softmax/sigmoid folded into the loss */
    int64_t rows_per_sample;     /* rows of the loss view per sample */
    int64_t cols;                /* classes / last axis */
    void *y, *loss_rows, *probs, *metric_rows, *count;
    float *host_rows;            /* download area for per-row values */
    int checking;                /* creation dry run: validate instead of execute */
    /* device-resident training (gc_plan_train_steps) */
    void *data_x, *data_y;       /* the data set: (data_n, in_numel) f32, labels */
    int64_t data_n;
    void *idx_all, *dyn_all, *seed_all; /* one call's indices, per-step {lr, t}, seeds */
    int64_t idx_cap, steps_cap, seed_cap;
    void *idx_step;              /* this step's rows (int32, max_batch) */
    void *dyn;                   /* float {lr, t} the optimizer kernels read */
    void *dyn_seed;              /* uint64 the dropout kernels read */
    void *acc;                   /* float[6]: loss total, then one per metric bit */
    int device_mode;             /* gather on device, dynamic params, totals on device */
    int graphs_on;               /* capture the full-size step when the backend can */
    void *graph;                 /* captured step, for graph_rows rows */
    int64_t graph_rows, warm_rows, replays;
    /* mixed precision */
    int widen;                   /* some dtype is not native to the backend: gc_op_run */
    void *logits32, *glast32;    /* float32 last output / its loss gradient, when needed */
    void *ls_state, *ls_bad;     /* loss scaling: float {scale, good steps}, bad count */
    /* the fused optimizer step (backends with optim_multi) */
    void *opt_slots;             /* backend memory: one gc_opt_slot per trained tensor */
    int n_slots, fused_opt;
    int64_t max_slot_n;
};

/* ------------------------------------------------------------------ helpers */

static int64_t numel(const int64_t *shape, int nd)
{
    int64_t n = 1;
    for (int i = 0; i < nd; i++) n *= shape[i];
    return n;
}

/* tensor of dtype dt with a leading batch axis of `rows` */
static gc_tensor btd(void *data, gc_dtype dt, int64_t rows, const int64_t *shape, int nd)
{
    gc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = nd + 1;
    t.shape[0] = rows;
    for (int i = 0; i < nd; i++) t.shape[i + 1] = shape[i];
    return t;
}

static gc_tensor t1(void *data, gc_dtype dt, int64_t n) { return gc_tensor_make(data, dt, 1, &n); }

static gc_tensor t2(void *data, gc_dtype dt, int64_t r, int64_t c)
{
    gc_tensor t = t1(data, dt, r);
    t.ndim = 2;
    t.shape[1] = c;
    return t;
}

static gc_tensor none_tensor(void)
{
    gc_tensor t;
    memset(&t, 0, sizeof t);
    return t;
}

static gc_status run(gc_plan *p, gc_op op, const void *params, const gc_tensor *i0,
                     const gc_tensor *i1, const gc_tensor *i2, gc_tensor *o0, gc_tensor *o1,
                     gc_tensor *o2)
{
    gc_op_call c;
    c.op = op;
    c.in[0] = i0; c.in[1] = i1; c.in[2] = i2;
    c.out[0] = o0; c.out[1] = o1; c.out[2] = o2;
    c.params = params;
    if (p->checking) {
        gc_status s = gc_op_validate(&c);
        if (s) return s;
        if (!p->be->ops[op])
            return gc_fail(GC_ERR_UNSUPPORTED, "%s: not implemented on backend '%s'",
                           gc_op_name(op), p->be->name);
        return GC_OK;
    }
    if (p->widen) return gc_op_run(p->be, &c); /* half storage, float32 compute */
    return p->be->ops[op](p->be, &c);
}

#define TRY(expr)                   \
    do {                            \
        gc_status s_ = (expr);      \
        if (s_ != GC_OK) return s_; \
    } while (0)

static gc_status alloc_dt(gc_plan *p, int64_t n, gc_dtype dt, void **out)
{
    size_t bytes = (size_t)(n > 0 ? n : 1) * gc_dtype_size(dt);
    TRY(p->be->alloc(p->be, bytes, out));
    return p->be->fill_zero(p->be, *out, bytes);
}

static gc_status alloc_f32(gc_plan *p, int64_t n, void **out) { return alloc_dt(p, n, GC_F32, out); }

/* y (n elements of ydt) = x (of xdt) * s, s = 1 or the loss scale (dyn: the plan's
 * ls_state; invert: divided by it); bad: count non-finite results into ls_bad */
static gc_status scale_cast(gc_plan *p, const void *x, gc_dtype xdt, void *y, gc_dtype ydt, int64_t n,
                            const float *dyn, int invert, int bad)
{
    gc_scale_cast_params sp = {1.0f, dyn, invert};
    gc_tensor tx = t1((void *)x, xdt, n), ty = t1(y, ydt, n);
    gc_tensor tb = bad ? t1(p->ls_bad, GC_F32, 1) : none_tensor();
    return run(p, GC_OP_SCALE_CAST, &sp, &tx, NULL, NULL, &ty, &tb, NULL);
}

static gc_status cast_to(gc_plan *p, const void *x, gc_dtype xdt, void *y, gc_dtype ydt, int64_t n)
{
    gc_no_params none = {0};
    gc_tensor tx = t1((void *)x, xdt, n), ty = t1(y, ydt, n);
    return run(p, GC_OP_CAST, &none, &tx, NULL, NULL, &ty, NULL, NULL);
}

static int64_t kernel_numel(const plan_layer *l)
{
    return l->d.kind == GC_LAYER_DENSE ? l->in_numel * l->out_numel
                                       : (int64_t)l->d.kernel_h * l->d.kernel_w * l->d.in_shape[2] *
                                             l->d.out_shape[2];
}

static int64_t bias_numel(const plan_layer *l)
{
    return l->d.kind == GC_LAYER_DENSE ? l->out_numel : l->d.out_shape[2];
}

static int has_weights(const gc_layer_desc *d)
{
    return d->kind == GC_LAYER_DENSE || d->kind == GC_LAYER_CONV2D;
}

static int trains(const gc_plan *p, const plan_layer *l)
{
    return p->training && has_weights(&l->d) && l->d.trainable;
}

/* effective activation of a layer in a mode: the fused last one is linear */
static gc_act layer_act(const gc_plan *p, int i, run_mode mode)
{
    if (p->fused && i == p->n - 1 && mode != MODE_PREDICT) return GC_ACT_LINEAR;
    return p->L[i].d.act;
}

/* Layer i's mask seed: the step's seed XOR a per-layer constant; in device mode the
 * step's part is read by the kernel from backend memory (dyn_seed). */
static gc_dropout_params dropout_params(const gc_plan *p, const gc_layer_desc *d, int i, uint64_t seed)
{
    gc_dropout_params dp = {d->dropout_rate, 0x9E37ull * (uint64_t)(i + 1), NULL};
    if (p->device_mode) dp.dyn_seed = p->dyn_seed;
    else dp.seed ^= seed;
    return dp;
}

/* ------------------------------------------------------------------ forward */

static gc_status forward(gc_plan *p, int64_t rows, run_mode mode, uint64_t seed)
{
    void *in = p->x;
    for (int i = 0; i < p->n; i++) {
        plan_layer *l = &p->L[i];
        const gc_layer_desc *d = &l->d;
        const gc_dtype dt = l->dt;
        if (l->xc) { /* Keras casts a layer's input to its compute dtype */
            TRY(cast_to(p, in, l->in_dt, l->xc, dt, rows * l->in_numel));
            in = l->xc;
        }
        void *kernel = d->kernel, *bias = d->bias;
        if (l->wc) { /* float32 master weights, cast for this pass */
            TRY(cast_to(p, d->kernel, GC_F32, l->wc, dt, kernel_numel(l)));
            kernel = l->wc;
            if (bias) {
                TRY(cast_to(p, d->bias, GC_F32, l->bc, dt, bias_numel(l)));
                bias = l->bc;
            }
        }
        gc_tensor x = btd(in, dt, rows, d->in_shape, d->in_ndim);
        gc_tensor y = btd(l->out, dt, rows, d->out_shape, d->out_ndim);
        gc_act act = layer_act(p, i, mode);
        switch (d->kind) {
        case GC_LAYER_DENSE: {
            gc_gemm_params gp = {0, 0, 1.0f, 0.0f, act == GC_ACT_SOFTMAX ? GC_ACT_LINEAR : act, GC_IMPL_OWN};
            gc_tensor a = t2(in, dt, rows, l->in_numel);
            gc_tensor w = t2(kernel, dt, l->in_numel, l->out_numel);
            gc_tensor b = bias ? t1(bias, dt, l->out_numel) : none_tensor();
            gc_tensor c = t2(l->out, dt, rows, l->out_numel);
            TRY(run(p, GC_OP_GEMM, &gp, &a, &w, &b, &c, NULL, NULL));
            if (act == GC_ACT_SOFTMAX) {
                gc_act_params ap = {GC_ACT_SOFTMAX};
                TRY(run(p, GC_OP_ACT_FWD, &ap, &c, NULL, NULL, &c, NULL, NULL));
            }
            break;
        }
        case GC_LAYER_CONV2D: {
            gc_conv2d_params cp = d->conv;
            cp.act = act == GC_ACT_SOFTMAX ? GC_ACT_LINEAR : act;
            int64_t ks[4] = {d->kernel_h, d->kernel_w, d->in_shape[2], d->out_shape[2]};
            gc_tensor w = gc_tensor_make(kernel, dt, 4, ks);
            gc_tensor b = bias ? t1(bias, dt, ks[3]) : none_tensor();
            TRY(run(p, GC_OP_CONV2D_FWD, &cp, &x, &w, &b, &y, NULL, NULL));
            if (act == GC_ACT_SOFTMAX) {
                gc_act_params ap = {GC_ACT_SOFTMAX};
                TRY(run(p, GC_OP_ACT_FWD, &ap, &y, NULL, NULL, &y, NULL, NULL));
            }
            break;
        }
        case GC_LAYER_MAXPOOL2D:
            TRY(run(p, GC_OP_MAXPOOL2D_FWD, &d->pool, &x, NULL, NULL, &y, NULL, NULL));
            break;
        case GC_LAYER_AVGPOOL2D:
            TRY(run(p, GC_OP_AVGPOOL2D_FWD, &d->pool, &x, NULL, NULL, &y, NULL, NULL));
            break;
        case GC_LAYER_RESHAPE:
            break; /* l->out aliases in */
        case GC_LAYER_DROPOUT:
            if (mode == MODE_TRAIN && d->dropout_rate > 0.0f) {
                gc_dropout_params dp = dropout_params(p, d, i, seed);
                TRY(run(p, GC_OP_DROPOUT_FWD, &dp, &x, NULL, NULL, &y, NULL, NULL));
            } else if (!p->checking) {
                TRY(p->be->copy(p->be, l->out, in, (size_t)(rows * l->out_numel) * gc_dtype_size(dt)));
            }
            break;
        case GC_LAYER_ACTIVATION: {
            gc_act_params ap = {act};
            TRY(run(p, GC_OP_ACT_FWD, &ap, &x, NULL, NULL, &y, NULL, NULL));
            break;
        }
        default:
            return gc_fail(GC_ERR_INVALID_ARG, "plan: layer %d has unknown kind %d", i, (int)d->kind);
        }
        in = l->out;
    }
    return GC_OK;
}

/* ------------------------------------------------------------------ loss and metrics */

static gc_status download_sum(gc_plan *p, void *rows_buf, int64_t n, double *sum)
{
    *sum = 0.0;
    if (p->checking || n == 0) return GC_OK;
    TRY(p->be->download(p->be, p->host_rows, rows_buf, (size_t)n * sizeof(float)));
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
    gc_tensor x = t1(rows_buf, GC_F32, n), y = t1((float *)p->acc + slot, GC_F32, 1);
    *sum = 0.0;
    return run(p, GC_OP_REDUCE_SUM, &rp, &x, NULL, NULL, &y, NULL, NULL);
}

static gc_status loss_and_metrics(gc_plan *p, int64_t rows, int want_grad, gc_step_stats *st)
{
    plan_layer *last = &p->L[p->n - 1];
    int64_t R = rows * p->rows_per_sample, C = p->cols;
    /* the loss in float32, from a float32 copy of a half-precision output (Keras casts
     * y_pred); its gradient goes through glast32 when it must be cast or scaled */
    void *out32 = last->out;
    if (p->logits32) {
        TRY(cast_to(p, last->out, last->dt, p->logits32, GC_F32, R * C));
        out32 = p->logits32;
    }
    gc_tensor out = t2(out32, GC_F32, R, C);
    gc_tensor lab = p->sparse ? t1(p->y, GC_I32, R) : t2(p->y, GC_F32, R, C);
    gc_tensor lr = t1(p->loss_rows, GC_F32, R);
    gc_tensor g = want_grad ? t2(p->glast32 ? p->glast32 : last->gout, GC_F32, R, C) : none_tensor();
    gc_loss_params lp = {R > 0 ? 1.0f / (float)R : 0.0f, 0, GC_REG_MSE};
    switch (p->train.loss) {
    case GC_LOSS_CATEGORICAL_XENT:
    case GC_LOSS_SPARSE_CATEGORICAL_XENT:
        if (p->fused || p->train.from_logits)
            TRY(run(p, GC_OP_SOFTMAX_XENT, &lp, &out, &lab, NULL, &lr, &g, NULL));
        else
            TRY(run(p, GC_OP_XENT_PROBS, &lp, &out, &lab, NULL, &lr, &g, NULL));
        break;
    case GC_LOSS_BINARY_XENT:
        if (p->fused || p->train.from_logits)
            TRY(run(p, GC_OP_SIGMOID_BCE, &lp, &out, &lab, NULL, &lr, &g, NULL));
        else {
            lp.binary = 1;
            TRY(run(p, GC_OP_XENT_PROBS, &lp, &out, &lab, NULL, &lr, &g, NULL));
        }
        break;
    case GC_LOSS_MSE:
    case GC_LOSS_MAE:
        lp.kind = p->train.loss == GC_LOSS_MSE ? GC_REG_MSE : GC_REG_MAE;
        TRY(run(p, GC_OP_REGRESSION_LOSS, &lp, &out, &lab, NULL, &lr, &g, NULL));
        break;
    default:
        return gc_fail(GC_ERR_INVALID_ARG, "plan: unknown loss %d", (int)p->train.loss);
    }
    if (want_grad && p->glast32) /* times the loss scale, into the last layer's dtype */
        TRY(scale_cast(p, p->glast32, GC_F32, last->gout, last->dt, R * C,
                       p->train.loss_scaling ? (const float *)p->ls_state : NULL, 0, 0));
    double s;
    TRY(total(p, p->loss_rows, R, 0, &s));
    st->loss_sum = s / (double)p->rows_per_sample;

    if (!p->train.metrics) return GC_OK;
    /* metrics see what predict() returns: probabilities when the loss was fused */
    gc_tensor pred = out;
    if (p->fused) {
        gc_act_params ap = {p->L[p->n - 1].d.act};
        gc_tensor pr = t2(p->probs, GC_F32, R, C);
        TRY(run(p, GC_OP_ACT_FWD, &ap, &out, NULL, NULL, &pr, NULL, NULL));
        pred = pr;
    }
    for (int bit = 0; bit < 5; bit++) {
        unsigned m = 1u << bit;
        if (!(p->train.metrics & m)) continue;
        if (m == GC_METRIC_MSE || m == GC_METRIC_MAE) {
            gc_loss_params mp = {0.0f, 0, m == GC_METRIC_MSE ? GC_REG_MSE : GC_REG_MAE};
            gc_tensor tgt = p->sparse ? none_tensor() : lab;
            if (p->sparse) return gc_fail(GC_ERR_INVALID_ARG, "plan: mse/mae metrics need dense labels");
            gc_tensor mr = t1(p->metric_rows, GC_F32, R);
            gc_tensor nog = none_tensor();
            TRY(run(p, GC_OP_REGRESSION_LOSS, &mp, &pred, &tgt, NULL, &mr, &nog, NULL));
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
            gc_tensor cnt = t1(p->count, GC_F32, 1);
            TRY(run(p, GC_OP_ACCURACY, &ap, &pred, &lab, NULL, &cnt, NULL, NULL));
            TRY(total(p, p->count, 1, 1 + bit, &s));
            st->metric_sum[bit] = s / (double)p->rows_per_sample;
        }
    }
    return GC_OK;
}

/* ------------------------------------------------------------------ backward + update */

static gc_status backward(gc_plan *p, int64_t rows, uint64_t seed)
{
    for (int i = p->n - 1; i >= 0; i--) {
        plan_layer *l = &p->L[i];
        const gc_layer_desc *d = &l->d;
        const gc_dtype dt = l->dt;
        int tr = trains(p, l);
        if (!tr && !l->needs_gin) continue;
        void *in = l->xc ? l->xc : i ? p->L[i - 1].out : p->x;
        /* the input gradient in dt; cast to the layer below's dtype afterwards */
        void *gin = l->gxc ? l->gxc : i ? p->L[i - 1].gout : NULL;
        void *kernel = l->wc ? l->wc : d->kernel;
        gc_tensor x = btd(in, dt, rows, d->in_shape, d->in_ndim);
        gc_tensor y = btd(l->out, dt, rows, d->out_shape, d->out_ndim);
        gc_tensor gy = btd(l->gout, dt, rows, d->out_shape, d->out_ndim);
        gc_tensor gx = btd(gin, dt, rows, d->in_shape, d->in_ndim);
        gc_act act = layer_act(p, i, MODE_TRAIN);
        switch (d->kind) {
        case GC_LAYER_DENSE:
        case GC_LAYER_CONV2D: {
            gc_tensor dz = gy;
            if (act != GC_ACT_LINEAR && !l->gout_masked) {
                gc_act_params ap = {act};
                dz = btd(p->scratch, dt, rows, d->out_shape, d->out_ndim);
                TRY(run(p, GC_OP_ACT_BWD, &ap, &y, &gy, NULL, &dz, NULL, NULL));
            }
            if (d->kind == GC_LAYER_DENSE) {
                gc_tensor a = t2(in, dt, rows, l->in_numel);
                gc_tensor dz2 = t2(dz.data, dt, rows, l->out_numel);
                gc_tensor w = t2(kernel, dt, l->in_numel, l->out_numel);
                gc_tensor nob = none_tensor();
                if (tr) {
                    gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
                    gc_tensor dw = t2(l->dw, dt, l->in_numel, l->out_numel);
                    TRY(run(p, GC_OP_GEMM, &gp, &a, &dz2, &nob, &dw, NULL, NULL));
                    if (d->bias) {
                        gc_tensor db = t1(l->db, dt, l->out_numel);
                        TRY(run(p, GC_OP_BIAS_GRAD, &(gc_no_params){0}, &dz2, NULL, NULL, &db, NULL, NULL));
                    }
                }
                if (l->needs_gin) {
                    gc_gemm_params gp = {0, 1, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
                    gc_tensor ga = t2(gin, dt, rows, l->in_numel);
                    TRY(run(p, GC_OP_GEMM, &gp, &dz2, &w, &nob, &ga, NULL, NULL));
                }
            } else {
                int64_t ks[4] = {d->kernel_h, d->kernel_w, d->in_shape[2], d->out_shape[2]};
                gc_conv2d_params cp = d->conv;
                cp.act = GC_ACT_LINEAR;
                if (tr) {
                    gc_tensor dw = gc_tensor_make(l->dw, dt, 4, ks);
                    gc_tensor db = d->bias ? t1(l->db, dt, ks[3]) : none_tensor();
                    TRY(run(p, GC_OP_CONV2D_BWD_FILTER, &cp, &x, &dz, NULL, &dw, &db, NULL));
                }
                if (l->needs_gin) {
                    gc_tensor w = gc_tensor_make(kernel, dt, 4, ks);
                    TRY(run(p, GC_OP_CONV2D_BWD_DATA, &cp, &dz, &w, NULL, &gx, NULL, NULL));
                }
            }
            break;
        }
        case GC_LAYER_MAXPOOL2D: {
            gc_pool2d_params pp = d->pool;
            pp.act = l->fold_relu ? GC_ACT_RELU : GC_ACT_LINEAR;
            TRY(run(p, GC_OP_MAXPOOL2D_BWD, &pp, &x, &gy, NULL, &gx, NULL, NULL));
            break;
        }
        case GC_LAYER_AVGPOOL2D:
            TRY(run(p, GC_OP_AVGPOOL2D_BWD, &d->pool, &gy, NULL, NULL, &gx, NULL, NULL));
            break;
        case GC_LAYER_RESHAPE:
            break; /* gout of the layer below aliases ours */
        case GC_LAYER_DROPOUT:
            if (d->dropout_rate > 0.0f) {
                gc_dropout_params dp = dropout_params(p, d, i, seed);
                TRY(run(p, GC_OP_DROPOUT_BWD, &dp, &gy, NULL, NULL, &gx, NULL, NULL));
            } else if (!p->checking) {
                TRY(p->be->copy(p->be, gin, l->gout, (size_t)(rows * l->in_numel) * gc_dtype_size(dt)));
            }
            break;
        case GC_LAYER_ACTIVATION: {
            gc_act_params ap = {act};
            TRY(run(p, GC_OP_ACT_BWD, &ap, &y, &gy, NULL, &gx, NULL, NULL));
            break;
        }
        default:
            return gc_fail(GC_ERR_INVALID_ARG, "plan: layer %d has unknown kind %d", i, (int)d->kind);
        }
        if (l->gxc && l->needs_gin) /* back to the dtype of the layer below */
            TRY(cast_to(p, l->gxc, dt, p->L[i - 1].gout, l->in_dt, rows * l->in_numel));
    }
    return GC_OK;
}

static gc_status update_one(gc_plan *p, const gc_opt_hparams *hp, void *w, void *g, void **st,
                            int64_t n)
{
    gc_tensor tw = t1(w, GC_F32, n), tg = t1(g, GC_F32, n);
    const float *dyn = p->device_mode ? (const float *)p->dyn : NULL;
    const float *skip = p->train.loss_scaling ? (const float *)p->ls_bad : NULL;
    switch (p->train.opt) {
    case GC_OPT_ADAM: {
        gc_adam_params ap = {hp->lr, hp->beta_1, hp->beta_2, hp->epsilon, hp->t, dyn, skip};
        gc_tensor m = t1(st[0], GC_F32, n), v = t1(st[1], GC_F32, n);
        return run(p, GC_OP_ADAM, &ap, &tg, NULL, NULL, &tw, &m, &v);
    }
    case GC_OPT_SGD: {
        gc_sgd_params sp = {hp->lr, st ? hp->momentum : 0.0f, hp->nesterov, dyn, skip};
        gc_tensor m = st ? t1(st[0], GC_F32, n) : none_tensor();
        return run(p, GC_OP_SGD, &sp, &tg, NULL, NULL, &tw, &m, NULL);
    }
    case GC_OPT_RMSPROP: {
        gc_rmsprop_params rp = {hp->lr, hp->rho, hp->epsilon, dyn, skip};
        gc_tensor v = t1(st[0], GC_F32, n);
        return run(p, GC_OP_RMSPROP, &rp, &tg, NULL, NULL, &tw, &v, NULL);
    }
    default:
        return gc_fail(GC_ERR_INVALID_ARG, "plan: unknown optimizer %d", (int)p->train.opt);
    }
}

static gc_status update(gc_plan *p, const gc_opt_hparams *hp)
{
    if (hp->kind != p->train.opt)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: hyper-parameters are for optimizer %d, plan uses %d",
                       (int)hp->kind, (int)p->train.opt);
    const int ls = p->train.loss_scaling;
    const float *scale = ls ? (const float *)p->ls_state : NULL;
    /* float32 (and, with loss scaling, unscaled and counted) gradients first: the skip
     * decision needs every gradient checked before any weight moves */
    for (int i = 0; i < p->n; i++) {
        plan_layer *l = &p->L[i];
        if (!trains(p, l)) continue;
        if (l->dw32 != l->dw || ls)
            TRY(scale_cast(p, l->dw, l->dt, l->dw32, GC_F32, kernel_numel(l), scale, 1, ls));
        if (l->d.bias && (l->db32 != l->db || ls))
            TRY(scale_cast(p, l->db, l->dt, l->db32, GC_F32, bias_numel(l), scale, 1, ls));
    }
    if (p->fused_opt && p->opt_slots && !p->checking) { /* every tensor in one launch */
        const float *dyn = p->device_mode ? (const float *)p->dyn : NULL;
        TRY(p->be->optim_multi(p->be, hp, dyn, ls ? (const float *)p->ls_bad : NULL, p->opt_slots,
                               p->n_slots, p->max_slot_n));
    } else { /* per tensor (and always in the creation dry run: each call validated) */
        for (int i = 0; i < p->n; i++) {
            plan_layer *l = &p->L[i];
            if (!trains(p, l)) continue;
            TRY(update_one(p, hp, l->d.kernel, l->dw32, l->state_w, kernel_numel(l)));
            if (l->d.bias) TRY(update_one(p, hp, l->d.bias, l->db32, l->state_b, bias_numel(l)));
        }
    }
    if (!ls) return GC_OK;
    gc_loss_scale_params lp = {p->train.loss_scale_growth};
    gc_tensor bad = t1(p->ls_bad, GC_F32, 1), state = t1(p->ls_state, GC_F32, 2);
    gc_tensor dyn = p->device_mode ? t1(p->dyn, GC_F32, 2) : none_tensor();
    return run(p, GC_OP_LOSS_SCALE_UPDATE, &lp, NULL, NULL, NULL, &bad, &state, &dyn);
}

/* ------------------------------------------------------------------ public entry points */

static gc_status check_rows(const gc_plan *p, int64_t rows)
{
    if (rows < 1 || rows > p->max_batch)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batch of %lld rows, expected 1..%lld",
                       (long long)rows, (long long)p->max_batch);
    return GC_OK;
}

static gc_status upload_batch(gc_plan *p, const float *x, const void *y, int64_t rows)
{
    if (p->checking) return GC_OK;
    TRY(p->be->upload(p->be, p->x, x, (size_t)(rows * p->in_numel) * sizeof(float)));
    if (y) {
        size_t per = p->sparse ? (size_t)p->rows_per_sample * sizeof(int32_t)
                               : (size_t)p->out_numel * sizeof(float);
        TRY(p->be->upload(p->be, p->y, y, (size_t)rows * per));
    }
    return GC_OK;
}

/* Loss scaling: the caller's {scale, good steps} into backend memory, the bad count
 * cleared (a call cut short may have left it set). */
static gc_status loss_scale_begin(gc_plan *p, const gc_opt_hparams *hp)
{
    if (!p->train.loss_scaling || p->checking) return GC_OK;
    if (!(hp->loss_scale > 0.0f) || !isfinite(hp->loss_scale) || !(hp->loss_scale_good >= 0.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: loss scale %g with %g good steps; need a finite scale > 0",
                       (double)hp->loss_scale, (double)hp->loss_scale_good);
    float state[2] = {hp->loss_scale, hp->loss_scale_good};
    TRY(p->be->upload(p->be, p->ls_state, state, sizeof state));
    return p->be->fill_zero(p->be, p->ls_bad, sizeof(float));
}

static gc_status loss_scale_end(gc_plan *p, gc_step_stats *st)
{
    if (!p->train.loss_scaling || p->checking) return GC_OK;
    float state[2];
    TRY(p->be->download(p->be, state, p->ls_state, sizeof state));
    st->loss_scale = state[0];
    st->loss_scale_good = state[1];
    return GC_OK;
}

gc_status gc_plan_train_step(gc_plan *p, const float *x, const void *y, int64_t rows,
                             const gc_opt_hparams *hp, uint64_t seed, gc_step_stats *st)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    TRY(check_rows(p, rows));
    memset(st, 0, sizeof *st);
    TRY(loss_scale_begin(p, hp));
    TRY(upload_batch(p, x, y, rows));
    TRY(forward(p, rows, MODE_TRAIN, seed));
    TRY(loss_and_metrics(p, rows, 1, st));
    TRY(backward(p, rows, seed));
    TRY(update(p, hp));
    TRY(loss_scale_end(p, st));
    /* one step: skipped exactly when the scale went down */
    st->steps_applied = p->train.loss_scaling && !p->checking && st->loss_scale < hp->loss_scale ? 0 : 1;
    return GC_OK;
}

gc_status gc_plan_eval_step(gc_plan *p, const float *x, const void *y, int64_t rows,
                            gc_step_stats *st)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled with a loss");
    TRY(check_rows(p, rows));
    memset(st, 0, sizeof *st);
    TRY(upload_batch(p, x, y, rows));
    TRY(forward(p, rows, MODE_EVAL, 0));
    return loss_and_metrics(p, rows, 0, st);
}

gc_status gc_plan_predict(gc_plan *p, const float *x, int64_t rows, float *out)
{
    if (!p) return gc_fail(GC_ERR_INVALID_ARG, "plan: missing");
    TRY(check_rows(p, rows));
    TRY(upload_batch(p, x, NULL, rows));
    TRY(forward(p, rows, MODE_PREDICT, 0));
    const plan_layer *last = &p->L[p->n - 1];
    const void *res = last->out;
    if (p->logits32) { /* predictions come back as float32 */
        TRY(cast_to(p, last->out, last->dt, p->logits32, GC_F32, rows * p->out_numel));
        res = p->logits32;
    }
    if (p->checking) return GC_OK;
    return p->be->download(p->be, out, res, (size_t)(rows * p->out_numel) * sizeof(float));
}

/* ------------------------------------------------------------------ device-resident training */

static int64_t label_width(const gc_plan *p)
{
    return p->sparse ? p->rows_per_sample : p->out_numel;
}

gc_status gc_plan_set_data(gc_plan *p, const float *x, const void *y, int64_t n)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    gc_plan_use_graphs(p, p->graphs_on); /* a captured step reads the old data: drop it */
    if (p->data_x) p->be->release(p->be, p->data_x);
    if (p->data_y) p->be->release(p->be, p->data_y);
    p->data_x = p->data_y = NULL;
    p->data_n = 0;
    if (!x) return GC_OK;
    if (n < 1 || !y) return gc_fail(GC_ERR_INVALID_ARG, "plan: set_data needs x and y with n >= 1 rows");
    size_t xb = (size_t)(n * p->in_numel) * sizeof(float);
    size_t yb = (size_t)(n * label_width(p)) * 4u; /* float32 or int32 labels */
    gc_status s = p->be->alloc(p->be, xb, &p->data_x);
    if (s == GC_OK) s = p->be->alloc(p->be, yb, &p->data_y);
    if (s == GC_OK) s = p->be->upload(p->be, p->data_x, x, xb);
    if (s == GC_OK) s = p->be->upload(p->be, p->data_y, y, yb);
    if (s != GC_OK) {
        char why[512];
        snprintf(why, sizeof why, "%s", gc_last_error());
        gc_plan_set_data(p, NULL, NULL, 0);
        return gc_fail(s, "plan: the data set (%lld rows, %zu bytes) does not fit on '%s': %s",
                       (long long)n, xb + yb, p->be->name, why);
    }
    p->data_n = n;
    return GC_OK;
}

/* One training step in device mode: gather the batch from the resident data set by
 * idx_step, then forward, loss, metrics (totals into acc), backward, update -- only
 * backend ops, no transfers, so it can be captured into a graph. */
static gc_status device_step(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    gc_no_params none = {0};
    int64_t w = label_width(p);
    gc_tensor idx = t1(p->idx_step, GC_I32, rows);
    gc_tensor tx = t2(p->data_x, GC_F32, p->data_n, p->in_numel);
    gc_tensor bx = t2(p->x, GC_F32, rows, p->in_numel);
    gc_tensor ty = t2(p->data_y, p->sparse ? GC_I32 : GC_F32, p->data_n, w);
    gc_tensor by = t2(p->y, p->sparse ? GC_I32 : GC_F32, rows, w);
    gc_step_stats ignored;
    TRY(run(p, GC_OP_EMBEDDING_FWD, &none, &tx, &idx, NULL, &bx, NULL, NULL));
    TRY(run(p, GC_OP_EMBEDDING_FWD, &none, &ty, &idx, NULL, &by, NULL, NULL));
    TRY(forward(p, rows, MODE_TRAIN, 0));
    TRY(loss_and_metrics(p, rows, 1, &ignored));
    TRY(backward(p, rows, 0));
    return update(p, hp);
}

static gc_status grow(gc_plan *p, void **buf, int64_t *cap, int64_t need, size_t elem)
{
    if (*buf && *cap >= need) return GC_OK;
    if (*buf) p->be->release(p->be, *buf);
    *buf = NULL;
    *cap = 0;
    TRY(p->be->alloc(p->be, (size_t)need * elem, buf));
    *cap = need;
    return GC_OK;
}

/* Runs one full-size step from the captured graph, capturing it first if needed: the
 * first full-size step runs eagerly (so workspaces and library handles exist before
 * capture), the second is captured and launched, later ones are replays. */
static gc_status graph_step(gc_plan *p, int64_t rows, const gc_opt_hparams *hp)
{
    const gc_backend *be = p->be;
    if (p->graph && p->graph_rows == rows) {
        p->replays++;
        return be->graph_launch(be, p->graph);
    }
    if (p->warm_rows != rows) {
        p->warm_rows = rows;
        return device_step(p, rows, hp);
    }
    if (p->graph) {
        be->graph_destroy(be, p->graph);
        p->graph = NULL;
    }
    TRY(be->capture_begin(be));
    gc_status s = device_step(p, rows, hp);
    void *g = NULL;
    gc_status e = be->capture_end(be, &g); /* always ends the capture */
    if (s == GC_OK) s = e;
    if (s != GC_OK) {
        if (g) be->graph_destroy(be, g);
        return s;
    }
    p->graph = g;
    p->graph_rows = rows;
    return be->graph_launch(be, g);
}

gc_status gc_plan_train_steps(gc_plan *p, const int32_t *idx, int64_t n_rows, int64_t batch,
                              const gc_opt_hparams *hp, const float *lrs, const uint64_t *seeds,
                              gc_step_stats *st)
{
    if (!p || !p->training) return gc_fail(GC_ERR_INVALID_ARG, "plan: not compiled for training");
    if (!p->data_x) return gc_fail(GC_ERR_INVALID_ARG, "plan: train_steps needs set_data first");
    if (batch < 1 || batch > p->max_batch)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: batch %lld, expected 1..%lld", (long long)batch,
                       (long long)p->max_batch);
    if (n_rows < 1 || !idx) return gc_fail(GC_ERR_INVALID_ARG, "plan: train_steps needs >= 1 index");
    for (int64_t i = 0; i < n_rows; i++)
        if (idx[i] < 0 || idx[i] >= p->data_n)
            return gc_fail(GC_ERR_INVALID_ARG, "indices: value %d at position %lld is outside [0, %lld)",
                           idx[i], (long long)i, (long long)p->data_n);
    memset(st, 0, sizeof *st);
    const gc_backend *be = p->be;
    int64_t steps = (n_rows + batch - 1) / batch;

    /* every op call of a device step, validated once by core */
    p->device_mode = p->checking = 1;
    gc_status s = device_step(p, batch, hp);
    p->checking = 0;
    if (s) goto done;

    /* per-step values, uploaded once for the whole call */
    s = grow(p, &p->idx_all, &p->idx_cap, n_rows, sizeof(int32_t));
    if (s == GC_OK) s = grow(p, &p->dyn_all, &p->steps_cap, steps, 2 * sizeof(float));
    if (s == GC_OK) s = grow(p, &p->seed_all, &p->seed_cap, steps, sizeof(uint64_t));
    if (s) goto done;
    float *dyn_host = malloc((size_t)steps * 2 * sizeof(float));
    uint64_t *seed_host = malloc((size_t)steps * sizeof(uint64_t));
    if (!dyn_host || !seed_host) {
        free(dyn_host);
        free(seed_host);
        s = gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        goto done;
    }
    for (int64_t k = 0; k < steps; k++) {
        dyn_host[2 * k] = lrs ? lrs[k] : hp->lr;
        dyn_host[2 * k + 1] = (float)(hp->t + k);
        seed_host[k] = seeds ? seeds[k] : 0;
    }
    s = be->upload(be, p->idx_all, idx, (size_t)n_rows * sizeof(int32_t));
    if (s == GC_OK) s = be->upload(be, p->dyn_all, dyn_host, (size_t)steps * 2 * sizeof(float));
    if (s == GC_OK) s = be->upload(be, p->seed_all, seed_host, (size_t)steps * sizeof(uint64_t));
    free(dyn_host);
    free(seed_host);
    if (s == GC_OK) s = be->fill_zero(be, p->acc, 6 * sizeof(float));
    if (s == GC_OK) s = loss_scale_begin(p, hp);
    /* with loss scaling, Adam's t (dyn[1]) advances on the device, only for the steps
     * the optimizer applied: it is set once, then each step copies its lr alone */
    const int ls = p->train.loss_scaling;

    int can_graph = p->graphs_on && be->capture_begin && be->capture_end && be->graph_launch &&
                    be->graph_destroy;
    for (int64_t k = 0; k < steps && s == GC_OK; k++) {
        int64_t rows = n_rows - k * batch < batch ? n_rows - k * batch : batch;
        /* this step's values into the fixed buffers the (captured) step reads */
        s = be->copy(be, p->idx_step, (const int32_t *)p->idx_all + k * batch, (size_t)rows * sizeof(int32_t));
        if (s == GC_OK)
            s = be->copy(be, p->dyn, (const float *)p->dyn_all + 2 * k, (ls && k ? 1 : 2) * sizeof(float));
        if (s == GC_OK) s = be->copy(be, p->dyn_seed, (const uint64_t *)p->seed_all + k, sizeof(uint64_t));
        if (s == GC_OK) s = (can_graph && rows == batch) ? graph_step(p, rows, hp) : device_step(p, rows, hp);
    }
    if (s == GC_OK) {
        float acc[6];
        s = be->download(be, acc, p->acc, sizeof acc);
        st->loss_sum = acc[0] / (double)p->rows_per_sample;
        for (int bit = 0; bit < 5; bit++) st->metric_sum[bit] = acc[1 + bit] / (double)p->rows_per_sample;
        st->steps_applied = steps;
    }
    if (s == GC_OK && ls) {
        float dyn[2];
        s = be->download(be, dyn, p->dyn, sizeof dyn);
        if (s == GC_OK) s = loss_scale_end(p, st);
        st->steps_applied = (int64_t)dyn[1] - hp->t; /* t advanced once per applied step */
    }
done:
    p->device_mode = p->checking = 0;
    return s;
}

void gc_plan_use_graphs(gc_plan *p, int on)
{
    if (!p) return;
    p->graphs_on = on != 0;
    if (p->graph) {
        p->be->graph_destroy(p->be, p->graph);
        p->graph = NULL;
    }
    p->warm_rows = 0;
}

int64_t gc_plan_graph_replays(const gc_plan *p) { return p ? p->replays : 0; }

int gc_plan_use_fused_optimizer(gc_plan *p, int on)
{
    if (!p) return 0;
    gc_plan_use_graphs(p, p->graphs_on); /* a captured step holds the old choice */
    p->fused_opt = on && p->opt_slots != NULL;
    return p->fused_opt;
}

void gc_plan_destroy(gc_plan *p)
{
    if (!p) return;
    const gc_backend *be = p->be;
    if (p->L) {
        for (int i = 0; i < p->n; i++) {
            plan_layer *l = &p->L[i];
            if (!l->is_view && l->out) be->release(be, l->out);
            if (l->owns_gout) be->release(be, l->gout);
            if (l->dw) be->release(be, l->dw);
            if (l->db) be->release(be, l->db);
            if (l->dw32 && l->dw32 != l->dw) be->release(be, l->dw32);
            if (l->db32 && l->db32 != l->db) be->release(be, l->db32);
            void *own[] = {l->xc, l->gxc, l->wc, l->bc};
            for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
                if (own[k]) be->release(be, own[k]);
        }
        free(p->L);
    }
    if (p->graph && be->graph_destroy) be->graph_destroy(be, p->graph);
    void *bufs[] = {p->x,        p->scratch,  p->y,        p->loss_rows, p->probs,
                    p->metric_rows, p->count, p->data_x,   p->data_y,    p->idx_all,
                    p->dyn_all,  p->seed_all, p->idx_step, p->dyn,       p->dyn_seed,
                    p->acc,      p->logits32, p->glast32, p->ls_state,  p->ls_bad,
                    p->opt_slots};
    for (size_t k = 0; k < sizeof bufs / sizeof bufs[0]; k++)
        if (bufs[k]) be->release(be, bufs[k]);
    free(p->host_rows);
    free(p->state_copy);
    free(p);
}

static gc_status check_layers(const gc_layer_desc *layers, int n)
{
    for (int i = 0; i < n; i++) {
        const gc_layer_desc *d = &layers[i];
        if ((unsigned)d->kind >= GC_LAYER_COUNT)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: layer %d has unknown kind %d", i, (int)d->kind);
        if (d->dtype != GC_F32 && d->dtype != GC_F16 && d->dtype != GC_BF16)
            return gc_fail(GC_ERR_DTYPE, "plan: layer %d has compute dtype %s; expected float32, float16 or "
                           "bfloat16", i, gc_dtype_name(d->dtype));
        if (d->in_ndim < 1 || d->in_ndim > GC_MAX_DIMS - 1 || d->out_ndim < 1 ||
            d->out_ndim > GC_MAX_DIMS - 1)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: layer %d has a rank outside 1..%d", i,
                           GC_MAX_DIMS - 1);
        for (int k = 0; k < d->in_ndim; k++)
            if (d->in_shape[k] < 1)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: layer %d input extent %d is %lld", i, k,
                               (long long)d->in_shape[k]);
        for (int k = 0; k < d->out_ndim; k++)
            if (d->out_shape[k] < 1)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: layer %d output extent %d is %lld", i, k,
                               (long long)d->out_shape[k]);
        if (i > 0) {
            const gc_layer_desc *prev = &layers[i - 1];
            int same = prev->out_ndim == d->in_ndim;
            for (int k = 0; same && k < d->in_ndim; k++) same = prev->out_shape[k] == d->in_shape[k];
            if (!same)
                return gc_fail(GC_ERR_INVALID_ARG,
                               "plan: layer %d expects the output shape of layer %d as its input", i,
                               i - 1);
        }
        int64_t in_n = numel(d->in_shape, d->in_ndim), out_n = numel(d->out_shape, d->out_ndim);
        switch (d->kind) {
        case GC_LAYER_DENSE:
            if (d->in_ndim != 1 || d->out_ndim != 1)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: dense layer %d needs rank-1 sample shapes", i);
            if (!d->kernel) return gc_fail(GC_ERR_INVALID_ARG, "plan: dense layer %d has no kernel", i);
            break;
        case GC_LAYER_CONV2D:
            if (d->in_ndim != 3 || d->out_ndim != 3)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: conv2d layer %d needs (H, W, C) shapes", i);
            if (!d->kernel) return gc_fail(GC_ERR_INVALID_ARG, "plan: conv2d layer %d has no kernel", i);
            break;
        case GC_LAYER_MAXPOOL2D:
        case GC_LAYER_AVGPOOL2D:
            if (d->in_ndim != 3 || d->out_ndim != 3)
                return gc_fail(GC_ERR_INVALID_ARG, "plan: pooling layer %d needs (H, W, C) shapes", i);
            break;
        case GC_LAYER_RESHAPE:
        case GC_LAYER_DROPOUT:
        case GC_LAYER_ACTIVATION:
            if (in_n != out_n)
                return gc_fail(GC_ERR_INVALID_ARG,
                               "plan: layer %d changes the element count (%lld -> %lld)", i,
                               (long long)in_n, (long long)out_n);
            break;
        default: break;
        }
    }
    return GC_OK;
}

/* The fused optimizer step's table: (w, g, state) of every trained tensor, in backend
 * memory, built once (the pointers never change for the plan's life). */
static gc_status build_opt_slots(gc_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n; i++)
        if (trains(p, &p->L[i])) n += p->L[i].d.bias ? 2 : 1;
    if (n == 0) return GC_OK;
    gc_opt_slot *h = calloc((size_t)n, sizeof *h);
    if (!h) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    const int per = p->train.opt == GC_OPT_ADAM ? 2 : 1;
    int k = 0;
    for (int i = 0; i < p->n; i++) {
        plan_layer *l = &p->L[i];
        if (!trains(p, l)) continue;
        for (int b = 0; b < (l->d.bias ? 2 : 1); b++, k++) {
            void **st = b ? l->state_b : l->state_w;
            h[k].w = b ? l->d.bias : l->d.kernel;
            h[k].g = b ? l->db32 : l->dw32;
            h[k].s1 = st ? st[0] : NULL;
            h[k].s2 = st && per == 2 ? st[1] : NULL;
            h[k].n = b ? bias_numel(l) : kernel_numel(l);
            if (h[k].n > p->max_slot_n) p->max_slot_n = h[k].n;
        }
    }
    gc_status s = p->be->alloc(p->be, (size_t)n * sizeof *h, &p->opt_slots);
    if (s == GC_OK) s = p->be->upload(p->be, p->opt_slots, h, (size_t)n * sizeof *h);
    free(h);
    p->n_slots = n;
    p->fused_opt = 1;
    return s;
}

static gc_status setup_train(gc_plan *p, const gc_train_desc *t)
{
    plan_layer *last = &p->L[p->n - 1];
    p->train = *t;
    if ((unsigned)t->loss >= GC_LOSS_COUNT || (unsigned)t->opt >= GC_OPT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: unknown loss or optimizer");
    p->sparse = t->loss == GC_LOSS_SPARSE_CATEGORICAL_XENT;
    const gc_layer_desc *ld = &last->d;
    p->cols = ld->out_shape[ld->out_ndim - 1];
    p->rows_per_sample = last->out_numel / p->cols;
    int final_softmax = ld->act == GC_ACT_SOFTMAX &&
                        (ld->kind == GC_LAYER_DENSE || ld->kind == GC_LAYER_CONV2D ||
                         ld->kind == GC_LAYER_ACTIVATION);
    int final_sigmoid = ld->act == GC_ACT_SIGMOID &&
                        (ld->kind == GC_LAYER_DENSE || ld->kind == GC_LAYER_CONV2D ||
                         ld->kind == GC_LAYER_ACTIVATION);
    p->fused = !t->from_logits &&
               ((final_softmax && (t->loss == GC_LOSS_CATEGORICAL_XENT ||
                                   t->loss == GC_LOSS_SPARSE_CATEGORICAL_XENT)) ||
                (final_sigmoid && t->loss == GC_LOSS_BINARY_XENT));
    if (p->sparse && (t->metrics & (GC_METRIC_MSE | GC_METRIC_MAE)))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: mse/mae metrics need one-hot labels, not sparse ones");

    /* optimizer state: per trainable weight in layer order (kernel, bias) */
    int per = t->opt == GC_OPT_ADAM ? 2 : t->opt == GC_OPT_RMSPROP ? 1 : -1;
    int n_weights = 0;
    for (int i = 0; i < p->n; i++)
        if (has_weights(&p->L[i].d) && p->L[i].d.trainable) n_weights += p->L[i].d.bias ? 2 : 1;
    if (per < 0) per = t->n_opt_state == 0 ? 0 : 1; /* sgd: momentum iff state given */
    if (t->n_opt_state != per * n_weights)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "plan: optimizer state has %d buffers, expected %d (%d per trainable weight, "
                       "%d weights)",
                       t->n_opt_state, per * n_weights, per, n_weights);
    if (t->n_opt_state) {
        p->state_copy = malloc(sizeof(void *) * (size_t)t->n_opt_state);
        if (!p->state_copy) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        memcpy(p->state_copy, t->opt_state, sizeof(void *) * (size_t)t->n_opt_state);
        for (int k = 0; k < t->n_opt_state; k++)
            if (!p->state_copy[k]) return gc_fail(GC_ERR_INVALID_ARG, "plan: optimizer state %d is missing", k);
    }
    p->train.opt_state = p->state_copy;
    int k = 0;
    for (int i = 0; i < p->n; i++) {
        plan_layer *l = &p->L[i];
        if (!(has_weights(&l->d) && l->d.trainable)) continue;
        if (per) {
            l->state_w = p->state_copy + k;
            k += per;
            if (l->d.bias) {
                l->state_b = p->state_copy + k;
                k += per;
            }
        }
    }
    int64_t R = p->max_batch * p->rows_per_sample;
    TRY(alloc_f32(p, p->sparse ? R : p->max_batch * last->out_numel, &p->y));
    TRY(alloc_f32(p, R, &p->loss_rows));
    TRY(alloc_f32(p, R, &p->metric_rows));
    TRY(alloc_f32(p, 1, &p->count));
    if (p->fused) TRY(alloc_f32(p, p->max_batch * last->out_numel, &p->probs));
    if (t->loss_scaling) {
        if (t->loss_scale_growth < 1)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: loss_scale_growth must be >= 1, got %d", t->loss_scale_growth);
        TRY(alloc_f32(p, 2, &p->ls_state));
        TRY(alloc_f32(p, 1, &p->ls_bad));
    }
    if (last->dt != GC_F32 || t->loss_scaling) /* the loss gradient is cast and / or scaled */
        TRY(alloc_f32(p, p->max_batch * last->out_numel, &p->glast32));
    p->host_rows = malloc((size_t)(R > 0 ? R : 1) * sizeof(float));
    if (!p->host_rows) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    return GC_OK;
}

gc_status gc_plan_create(const gc_backend *be, const gc_layer_desc *layers, int n_layers,
                         const gc_train_desc *train, int64_t max_batch, gc_plan **out)
{
    *out = NULL;
    if (!be) return gc_fail(GC_ERR_INVALID_ARG, "plan: no backend");
    if (n_layers < 1) return gc_fail(GC_ERR_INVALID_ARG, "plan: the model has no layers");
    if (max_batch < 1) return gc_fail(GC_ERR_INVALID_ARG, "plan: max_batch must be >= 1");
    TRY(check_layers(layers, n_layers));

    gc_plan *p = calloc(1, sizeof *p);
    if (!p) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    p->be = be;
    p->n = n_layers;
    p->max_batch = max_batch;
    p->training = train != NULL;
    p->L = calloc((size_t)n_layers, sizeof *p->L);
    gc_status s = p->L ? GC_OK : gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    int first_trainable = n_layers;
    for (int i = 0; i < n_layers && s == GC_OK; i++) {
        plan_layer *l = &p->L[i];
        l->d = layers[i];
        l->in_numel = numel(l->d.in_shape, l->d.in_ndim);
        l->out_numel = numel(l->d.out_shape, l->d.out_ndim);
        l->in_dt = i ? p->L[i - 1].dt : GC_F32;
        l->dt = l->d.kind == GC_LAYER_RESHAPE ? l->in_dt : l->d.dtype; /* a view keeps its input's */
        if (l->dt != GC_F32 && !(be->native_dtypes & (1u << l->dt))) p->widen = 1;
        if (p->training && has_weights(&l->d) && l->d.trainable && first_trainable == n_layers)
            first_trainable = i;
    }
    if (s == GC_OK) {
        p->in_numel = p->L[0].in_numel;
        p->out_numel = p->L[n_layers - 1].out_numel;
        s = alloc_f32(p, max_batch * p->in_numel, &p->x);
    }
    int64_t biggest = 1;
    for (int i = 0; i < n_layers && s == GC_OK; i++) {
        plan_layer *l = &p->L[i];
        l->needs_gin = p->training && i > first_trainable;
        if (l->out_numel > biggest) biggest = l->out_numel;
        if (l->d.kind == GC_LAYER_RESHAPE) {
            l->is_view = 1;
            l->out = i ? p->L[i - 1].out : p->x;
        } else {
            s = alloc_dt(p, max_batch * l->out_numel, l->dt, &l->out);
        }
        if (s == GC_OK && l->dt != l->in_dt) s = alloc_dt(p, max_batch * l->in_numel, l->dt, &l->xc);
        if (s == GC_OK && l->dt != GC_F32 && has_weights(&l->d)) {
            s = alloc_dt(p, kernel_numel(l), l->dt, &l->wc);
            if (s == GC_OK && l->d.bias) s = alloc_dt(p, bias_numel(l), l->dt, &l->bc);
        }
    }
    if (s == GC_OK && p->L[n_layers - 1].dt != GC_F32) /* float32 loss input / predictions */
        s = alloc_f32(p, max_batch * p->out_numel, &p->logits32);
    /* gradients: a reshape's gout is the gout of the layer below (allocated top-down) */
    for (int i = n_layers - 1; i >= 0 && s == GC_OK && p->training; i--) {
        plan_layer *l = &p->L[i];
        if (!l->gout) {
            s = alloc_dt(p, max_batch * l->out_numel, l->dt, &l->gout);
            l->owns_gout = s == GC_OK;
        }
        if (s == GC_OK && l->is_view && i > 0) p->L[i - 1].gout = l->gout;
        if (s == GC_OK && l->xc && l->needs_gin)
            s = alloc_dt(p, max_batch * l->in_numel, l->dt, &l->gxc);
        if (s == GC_OK && has_weights(&l->d) && l->d.trainable) {
            s = alloc_dt(p, kernel_numel(l), l->dt, &l->dw);
            if (s == GC_OK && l->d.bias) s = alloc_dt(p, bias_numel(l), l->dt, &l->db);
            l->dw32 = l->dw;
            l->db32 = l->db;
            if (s == GC_OK && l->dt != GC_F32) {
                s = alloc_f32(p, kernel_numel(l), &l->dw32);
                if (s == GC_OK && l->d.bias) s = alloc_f32(p, bias_numel(l), &l->db32);
            }
        }
    }
    if (s == GC_OK && p->training) {
        p->scratch_numel = max_batch * biggest;
        s = alloc_f32(p, p->scratch_numel, &p->scratch);
    }
    if (s == GC_OK && p->training) s = setup_train(p, train);
    /* conv / dense + ReLU followed by a max pool: the pool's backward applies relu' (one
     * pass over the activations instead of two); needs both in one dtype */
    for (int i = 1; i < n_layers && s == GC_OK && p->training; i++) {
        plan_layer *l = &p->L[i], *prev = &p->L[i - 1];
        if (l->d.kind == GC_LAYER_MAXPOOL2D && has_weights(&prev->d) && prev->d.act == GC_ACT_RELU &&
            !l->xc && l->dt == prev->dt) {
            l->fold_relu = 1;
            prev->gout_masked = 1;
        }
    }
    if (s == GC_OK && p->training && be->optim_multi) s = build_opt_slots(p);
    if (s == GC_OK && p->training) { /* the fixed buffers a captured step reads */
        s = alloc_f32(p, max_batch, &p->idx_step);
        if (s == GC_OK) s = alloc_f32(p, 2, &p->dyn);
        if (s == GC_OK) s = alloc_f32(p, 2, &p->dyn_seed);
        if (s == GC_OK) s = alloc_f32(p, 6, &p->acc);
        p->graphs_on = 1;
    }

    /* dry run: every op call of a full step, validated by core */
    if (s == GC_OK) {
        p->checking = 1;
        if (p->training) {
            gc_step_stats st;
            gc_opt_hparams hp = {p->train.opt, 0.001f, 0.9f, 0.999f, 1e-7f, 0.0f, 0.9f, 0, 1, 1.0f, 0.0f};
            if (p->train.opt == GC_OPT_SGD && p->state_copy) hp.momentum = 0.9f;
            s = gc_plan_train_step(p, NULL, NULL, max_batch, &hp, 1, &st);
        }
        if (s == GC_OK) s = gc_plan_predict(p, NULL, max_batch, NULL);
        p->checking = 0;
    }
    if (s != GC_OK) {
        gc_plan_destroy(p);
        return s;
    }
    *out = p;
    return GC_OK;
}
