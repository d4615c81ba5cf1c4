/* loss.c -- losses on the CPU (per-row loss plus the optional gradient of
 * grad_scale * sum(loss)), the bias gradient, and their op adapters.
 *
 * Why it is built this way: loss tensors are small (batch x classes) next to the layers
 * that produce them, so each row is computed with float inputs and double
 * accumulators / double exp and log, which keeps them exact to float rounding whatever
 * the row length; rows are split across OpenMP threads only when the work is large.
 * The formulas follow Keras (KERAS_SEMANTICS.md): softmax_xent is the fused
 * log-softmax path, with the exact gradient sum(y) * softmax - y (TensorFlow's
 * softmax - y whenever a row's labels sum to 1, as one-hot and probability labels do,
 * and still the derivative of the reported loss when they do not); xent_probs is
 * Keras' clipped path on probabilities (eps 1e-7, clip bounds in float32 as Keras has
 * them) and its gradient is the exact derivative of that expression, row
 * normalisation included, with zero where the clip is active (as tf.clip_by_value).
 * bias_grad sums columns with one partial row per thread.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define LOSS_EPS 1e-7f
#define LOSS_PAR_MIN 16384

/* Sparse labels: every label must index a column. */
static gc_status check_labels(int64_t rows, int64_t cols, const int32_t *labels)
{
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] < 0 || (int64_t)labels[r] >= cols)
            return gc_fail(GC_ERR_INVALID_ARG, "labels: value %d at row %lld is outside [0, %lld)",
                           (int)labels[r], (long long)r, (long long)cols);
    return GC_OK;
}

static gc_status check_args(const char *what, int64_t rows, int64_t cols, const void *in,
                            const float *labels, const int32_t *labels_i32, const float *loss)
{
    if (rows < 0 || cols < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: bad shape (%lld, %lld)", what, (long long)rows,
                       (long long)cols);
    if (rows > 0 && (!in || !loss || (!labels && !labels_i32)))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: missing input, labels or loss", what);
    if (labels && labels_i32)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: give float or integer labels, not both", what);
    return GC_OK;
}

gc_status gc_cpu_softmax_xent(int64_t rows, int64_t cols, const float *logits,
                              const float *labels, const int32_t *labels_i32, float *loss,
                              float *dlogits, float grad_scale)
{
    gc_status st = check_args("softmax_xent", rows, cols, logits, labels, labels_i32, loss);
    if (st) return st;
    if (labels_i32 && (st = check_labels(rows, cols, labels_i32))) return st;
#pragma omp parallel for schedule(static) if (rows * cols >= LOSS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * cols;
        float mx = z[0];
        for (int64_t c = 1; c < cols; c++) mx = z[c] > mx ? z[c] : mx;
        double sum = 0.0;
        for (int64_t c = 0; c < cols; c++) sum += exp((double)z[c] - mx);
        double lse = mx + log(sum);
        /* loss = -sum_c y_c (z_c - lse) = lse * sum(y) - sum(y z) */
        double l, ysum = 1.0;
        if (labels_i32) {
            l = lse - z[labels_i32[r]];
        } else {
            const float *y = labels + r * cols;
            double yz = 0.0;
            ysum = 0.0;
            for (int64_t c = 0; c < cols; c++) {
                yz += (double)y[c] * z[c];
                ysum += y[c];
            }
            l = lse * ysum - yz;
        }
        loss[r] = (float)l;
        if (dlogits) {
            float *d = dlogits + r * cols;
            double inv = 1.0 / sum;
            for (int64_t c = 0; c < cols; c++) {
                double p = exp((double)z[c] - mx) * inv;
                double y = labels_i32 ? (c == labels_i32[r] ? 1.0 : 0.0) : labels[r * cols + c];
                d[c] = (float)(grad_scale * (p * ysum - y));
            }
        }
    }
    return GC_OK;
}

gc_status gc_cpu_sigmoid_bce(int64_t rows, int64_t cols, const float *logits,
                             const float *labels, float *loss, float *dlogits, float grad_scale)
{
    gc_status st = check_args("sigmoid_bce", rows, cols, logits, labels, NULL, loss);
    if (st) return st;
    if (rows > 0 && !labels)
        return gc_fail(GC_ERR_INVALID_ARG, "sigmoid_bce: float labels are required");
    const double gs = (double)grad_scale / (double)cols;
#pragma omp parallel for schedule(static) if (rows * cols >= LOSS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *z = logits + r * cols, *y = labels + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            double zc = z[c], e = exp(-fabs(zc));
            s += (zc > 0.0 ? zc : 0.0) - zc * y[c] + log1p(e);
            if (dlogits) {
                /* sigmoid(z) from e = exp(-|z|), never overflowing */
                double sig = zc >= 0.0 ? 1.0 / (1.0 + e) : e / (1.0 + e);
                dlogits[r * cols + c] = (float)(gs * (sig - y[c]));
            }
        }
        loss[r] = (float)(s / (double)cols);
    }
    return GC_OK;
}

/* Keras categorical cross-entropy on probabilities, one row. */
static float xent_probs_row(int64_t cols, const float *p, const float *y, int32_t label,
                            float *dp, double grad_scale)
{
    double s = 0.0;
    for (int64_t c = 0; c < cols; c++) s += p[c];
    /* the normalised, clipped probabilities are computed in float as Keras does */
    float sf = (float)s;
    double l = 0.0, gq = 0.0; /* gq = sum_c g_c q_c with g = dL/dq */
    for (int64_t c = 0; c < cols; c++) {
        double yc = y ? (double)y[c] : (c == label ? 1.0 : 0.0);
        float q = p[c] / sf;
        float qc = q < LOSS_EPS ? LOSS_EPS : (q > 1.0f - LOSS_EPS ? 1.0f - LOSS_EPS : q);
        if (yc != 0.0) l -= yc * log((double)qc);
        if (dp) {
            int active = q < LOSS_EPS || q > 1.0f - LOSS_EPS; /* clip: zero gradient */
            double g = active ? 0.0 : -yc / (double)qc;
            dp[c] = (float)g; /* g_c kept here until the row sum is known */
            gq += g * q;
        }
    }
    if (dp) {
        /* q = p / s: dL/dp_j = (g_j - sum_c g_c q_c) / s */
        for (int64_t c = 0; c < cols; c++)
            dp[c] = (float)(grad_scale * (((double)dp[c] - gq) / (double)sf));
    }
    return (float)l;
}

gc_status gc_cpu_xent_probs(int binary, int64_t rows, int64_t cols, const float *p,
                            const float *labels, const int32_t *labels_i32, float *loss,
                            float *dp, float grad_scale)
{
    gc_status st = check_args("xent_probs", rows, cols, p, labels, labels_i32, loss);
    if (st) return st;
    if (binary && labels_i32)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "xent_probs: binary cross-entropy takes float labels of the same shape");
    if (labels_i32 && (st = check_labels(rows, cols, labels_i32))) return st;
    if (!binary) {
        /* dp temporarily holds dL/dq, so it must not alias p */
#pragma omp parallel for schedule(static) if (rows * cols >= LOSS_PAR_MIN)
        for (int64_t r = 0; r < rows; r++)
            loss[r] = xent_probs_row(cols, p + r * cols, labels ? labels + r * cols : NULL,
                                     labels_i32 ? labels_i32[r] : -1, dp ? dp + r * cols : NULL,
                                     grad_scale);
        return GC_OK;
    }
    const double gs = (double)grad_scale / (double)cols;
#pragma omp parallel for schedule(static) if (rows * cols >= LOSS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *pr = p + r * cols, *y = labels + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            float q = pr[c];
            float qc = q < LOSS_EPS ? LOSS_EPS : (q > 1.0f - LOSS_EPS ? 1.0f - LOSS_EPS : q);
            double yc = y[c], pc = qc, one_m = 1.0f - qc; /* 1 - p in float, as Keras */
            s -= yc * log(pc) + (1.0 - yc) * log(one_m);
            if (dp) {
                int active = q < LOSS_EPS || q > 1.0f - LOSS_EPS;
                dp[r * cols + c] = active ? 0.0f : (float)(gs * (-yc / pc + (1.0 - yc) / one_m));
            }
        }
        loss[r] = (float)(s / (double)cols);
    }
    return GC_OK;
}

gc_status gc_cpu_regression_loss(gc_regression_kind kind, int64_t rows, int64_t cols,
                                 const float *pred, const float *target, float *loss,
                                 float *dpred, float grad_scale)
{
    gc_status st = check_args("regression_loss", rows, cols, pred, target, NULL, loss);
    if (st) return st;
    if (rows > 0 && !target)
        return gc_fail(GC_ERR_INVALID_ARG, "regression_loss: float targets are required");
    if (kind != GC_REG_MSE && kind != GC_REG_MAE)
        return gc_fail(GC_ERR_INVALID_ARG, "regression_loss: unknown kind %d", (int)kind);
    const double gs = (double)grad_scale / (double)cols;
#pragma omp parallel for schedule(static) if (rows * cols >= LOSS_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *a = pred + r * cols, *t = target + r * cols;
        double s = 0.0;
        for (int64_t c = 0; c < cols; c++) {
            double d = (double)a[c] - (double)t[c];
            double gd;
            if (kind == GC_REG_MSE) {
                s += d * d;
                gd = 2.0 * d;
            } else {
                s += fabs(d);
                gd = d > 0.0 ? 1.0 : (d < 0.0 ? -1.0 : 0.0);
            }
            if (dpred) dpred[r * cols + c] = (float)(gs * gd);
        }
        loss[r] = (float)(s / (double)cols);
    }
    return GC_OK;
}

gc_status gc_cpu_bias_grad(int64_t rows, int64_t cols, const float *dy, float *db)
{
    if (rows < 0 || cols < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "bias_grad: bad shape (%lld, %lld)", (long long)rows,
                       (long long)cols);
    if (cols == 0) return GC_OK;
    int nthr = 1;
#ifdef _OPENMP
    if (!omp_in_parallel() && rows * cols >= 65536 && rows >= 64) nthr = omp_get_max_threads();
#endif
    if (nthr > rows / 16) nthr = (int)(rows / 16) > 1 ? (int)(rows / 16) : 1;
    if (nthr <= 1) {
        memset(db, 0, (size_t)cols * sizeof(float));
        for (int64_t r = 0; r < rows; r++) {
            const float *d = dy + r * cols;
            for (int64_t c = 0; c < cols; c++) db[c] += d[c];
        }
        return GC_OK;
    }
    /* one partial row per thread (thread 0 writes db), then a sum over the partials */
    float *part = (float *)malloc((size_t)((nthr - 1) * cols) * sizeof(float));
    if (!part)
        return gc_fail(GC_ERR_NOMEM, "bias_grad: cannot allocate %lld bytes",
                       (long long)((nthr - 1) * cols * (int64_t)sizeof(float)));
#pragma omp parallel num_threads(nthr)
    {
        int t = 0, nt = 1;
#ifdef _OPENMP
        t = omp_get_thread_num();
        nt = omp_get_num_threads();
#endif
        float *acc = t == 0 ? db : part + (int64_t)(t - 1) * cols;
        int64_t r0 = rows * t / nt, r1 = rows * (t + 1) / nt;
        memset(acc, 0, (size_t)cols * sizeof(float));
        for (int64_t r = r0; r < r1; r++) {
            const float *d = dy + r * cols;
            for (int64_t c = 0; c < cols; c++) acc[c] += d[c];
        }
#pragma omp barrier
#pragma omp for schedule(static)
        for (int64_t c = 0; c < cols; c++) {
            float s = db[c];
            for (int u = 1; u < nt; u++) s += part[(int64_t)(u - 1) * cols + c];
            db[c] = s;
        }
    }
    free(part);
    return GC_OK;
}

/* ---------------------------------------------------------------- adapters */

/* rows = product of all but the last dim, cols = last dim */
static void rows_cols(const gc_tensor *t, int64_t *rows, int64_t *cols)
{
    int64_t r = 1;
    for (int d = 0; d + 1 < t->ndim; d++) r *= t->shape[d];
    *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    *rows = r;
}

typedef struct {
    int64_t rows, cols;
    const float *in;
    const float *labels;
    const int32_t *labels_i32;
    float *loss, *grad;
    const gc_loss_params *p;
} loss_args;

static gc_status unpack_loss(const char *what, const gc_op_call *call, int allow_sparse,
                             loss_args *a)
{
    const gc_tensor *x = call->in[0], *y = call->in[1];
    a->p = (const gc_loss_params *)call->params;
    if (!a->p || !x || !y || !call->out[0])
        return gc_fail(GC_ERR_INVALID_ARG, "%s: missing tensor or params", what);
    rows_cols(x, &a->rows, &a->cols);
    a->in = (const float *)x->data;
    a->labels = NULL;
    a->labels_i32 = NULL;
    if (y->dtype == GC_I32) {
        if (!allow_sparse)
            return gc_fail(GC_ERR_DTYPE, "%s: labels must be float32", what);
        a->labels_i32 = (const int32_t *)y->data;
    } else {
        a->labels = (const float *)y->data;
    }
    a->loss = (float *)call->out[0]->data;
    a->grad = call->out[1] ? (float *)call->out[1]->data : NULL;
    return GC_OK;
}

gc_status gc_cpu_op_softmax_xent(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    loss_args a = {0};
    gc_status st = unpack_loss("softmax_xent", call, 1, &a);
    if (st) return st;
    return gc_cpu_softmax_xent(a.rows, a.cols, a.in, a.labels, a.labels_i32, a.loss, a.grad,
                               a.p->grad_scale);
}

gc_status gc_cpu_op_sigmoid_bce(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    loss_args a = {0};
    gc_status st = unpack_loss("sigmoid_bce", call, 0, &a);
    if (st) return st;
    return gc_cpu_sigmoid_bce(a.rows, a.cols, a.in, a.labels, a.loss, a.grad, a.p->grad_scale);
}

gc_status gc_cpu_op_xent_probs(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    loss_args a = {0};
    gc_status st = unpack_loss("xent_probs", call, 1, &a);
    if (st) return st;
    return gc_cpu_xent_probs(a.p->binary, a.rows, a.cols, a.in, a.labels, a.labels_i32, a.loss,
                             a.grad, a.p->grad_scale);
}

gc_status gc_cpu_op_regression_loss(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    loss_args a = {0};
    gc_status st = unpack_loss("regression_loss", call, 0, &a);
    if (st) return st;
    return gc_cpu_regression_loss(a.p->kind, a.rows, a.cols, a.in, a.labels, a.loss, a.grad,
                                  a.p->grad_scale);
}

gc_status gc_cpu_op_bias_grad(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *dy = call->in[0];
    gc_tensor *db = call->out[0];
    if (!dy || !db) return gc_fail(GC_ERR_INVALID_ARG, "bias_grad: missing tensor");
    int64_t rows, cols;
    rows_cols(dy, &rows, &cols);
    if (cols > 0 && (!db->data || (rows > 0 && !dy->data)))
        return gc_fail(GC_ERR_INVALID_ARG, "bias_grad: missing tensor data");
    return gc_cpu_bias_grad(rows, cols, (const float *)dy->data, (float *)db->data);
}
