/* metrics.c -- accuracy on the CPU (categorical, sparse categorical, binary) and its
 * op adapter.
 *
 * Why it is built this way: the plan evaluates metrics in the same pass as the loss, so
 * accuracy is a count of correct rows (a sum the caller divides by the rows it has
 * seen, as Keras' running mean does). Arg-max ties go to the first index, as numpy's
 * and TensorFlow's argmax; binary accuracy counts, per row, the fraction of columns
 * where (pred > threshold) equals (label > 0.5). The count is accumulated in double.
 */
#include "cpu_kernels.h"

#define METRIC_PAR_MIN 65536

static inline int64_t argmax_row(int64_t cols, const float *x)
{
    int64_t best = 0;
    float bv = x[0];
    for (int64_t c = 1; c < cols; c++)
        if (x[c] > bv) {
            bv = x[c];
            best = c;
        }
    return best;
}

gc_status gc_cpu_accuracy(gc_accuracy_kind kind, int64_t rows, int64_t cols,
                          const float *pred, const float *labels, const int32_t *labels_i32,
                          float threshold, double *count)
{
    if (rows < 0 || cols < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "accuracy: bad shape (%lld, %lld)", (long long)rows,
                       (long long)cols);
    if (kind != GC_ACC_CATEGORICAL && kind != GC_ACC_SPARSE && kind != GC_ACC_BINARY)
        return gc_fail(GC_ERR_INVALID_ARG, "accuracy: unknown kind %d", (int)kind);
    if (rows > 0 && (!pred || (kind == GC_ACC_SPARSE ? !labels_i32 : !labels)))
        return gc_fail(GC_ERR_INVALID_ARG, "accuracy: %s labels are required",
                       kind == GC_ACC_SPARSE ? "int32" : "float32");
    double total = 0.0;
#pragma omp parallel for schedule(static) reduction(+ : total) if (rows * cols >= METRIC_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        const float *p = pred + r * cols;
        if (kind == GC_ACC_BINARY) {
            const float *y = labels + r * cols;
            int64_t hits = 0;
            for (int64_t c = 0; c < cols; c++) hits += (p[c] > threshold) == (y[c] > 0.5f);
            total += (double)hits / (double)cols;
        } else if (kind == GC_ACC_SPARSE) {
            total += argmax_row(cols, p) == (int64_t)labels_i32[r] ? 1.0 : 0.0;
        } else {
            total += argmax_row(cols, p) == argmax_row(cols, labels + r * cols) ? 1.0 : 0.0;
        }
    }
    *count = total;
    return GC_OK;
}

gc_status gc_cpu_op_accuracy(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_accuracy_params *p = (const gc_accuracy_params *)call->params;
    const gc_tensor *pred = call->in[0], *y = call->in[1];
    gc_tensor *out = call->out[0];
    if (!p || !pred || !y || !out || !out->data)
        return gc_fail(GC_ERR_INVALID_ARG, "accuracy: missing tensor or params");
    int64_t rows = 1;
    for (int d = 0; d + 1 < pred->ndim; d++) rows *= pred->shape[d];
    int64_t cols = pred->ndim > 0 ? pred->shape[pred->ndim - 1] : 1;
    gc_accuracy_kind kind = p->kind;
    /* integer labels mean sparse; float labels with a categorical / sparse kind are
     * taken as given (categorical compares two arg-maxes) */
    if (y->dtype == GC_I32) {
        if (kind != GC_ACC_SPARSE)
            return gc_fail(GC_ERR_DTYPE, "accuracy: int32 labels need the sparse kind");
    } else if (kind == GC_ACC_SPARSE) {
        return gc_fail(GC_ERR_DTYPE, "accuracy: sparse accuracy takes int32 labels");
    }
    double count = 0.0;
    gc_status st = gc_cpu_accuracy(kind, rows, cols, (const float *)pred->data,
                                   y->dtype == GC_I32 ? NULL : (const float *)y->data,
                                   y->dtype == GC_I32 ? (const int32_t *)y->data : NULL,
                                   p->threshold, &count);
    if (st) return st;
    *(float *)out->data = (float)count;
    return GC_OK;
}
