/* embedding.c -- embedding lookup (a gather of table rows by int32 index) and its
 * backward (a scatter-add into a zeroed table gradient) on the CPU, and their adapters.
 *
 * Why it is built this way:
 * - The forward is a pure copy, so it works on any dtype by element size (core does not
 *   widen its operands: f16/bf16/int32 rows are copied as stored, bit for bit). Rows are
 *   copied with memcpy, split across OpenMP threads by position.
 * - The backward must be deterministic and independent of the thread count, without a
 *   sort: the (V, D) gradient is cut into tiles of table-row bands x column blocks, one
 *   per task; every task scans ALL positions in order and adds the rows whose index falls
 *   in its band, restricted to its columns. Each element of dtable therefore receives its
 *   contributions in position order, in float32 starting from +0 -- the same sums whatever
 *   the tiling (and the same as the CUDA backend's segmented sums). Column blocks are at
 *   least EMB_COL_MIN floats wide so that tasks rarely share cache lines.
 * - Indices are checked in one pass before anything is written: an index outside [0, V)
 *   is GC_ERR_INVALID_ARG naming the value and its flat (row-major) position in the index
 *   tensor, never a silent read.
 */
#include "cpu_kernels.h"

#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define EMB_PAR_MIN 32768 /* elements moved below which one thread does the work */
#define EMB_COL_MIN 64    /* narrowest column block of a backward task (floats) */

/* GC_OK, or the error naming the first index outside [0, V). */
static gc_status check_indices(int64_t n, int64_t V, const int32_t *idx)
{
    for (int64_t p = 0; p < n; p++)
        if (idx[p] < 0 || (int64_t)idx[p] >= V)
            return gc_fail(GC_ERR_INVALID_ARG, "indices: value %d at position %lld is outside [0, %lld)",
                           (int)idx[p], (long long)p, (long long)V);
    return GC_OK;
}

gc_status gc_cpu_embedding_fwd(int64_t n, int64_t V, int64_t row_bytes, const void *table,
                               const int32_t *idx, void *out)
{
    if (n < 0 || V < 0 || row_bytes < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "embedding_fwd: negative size");
    gc_status s = check_indices(n, V, idx);
    if (s || n == 0 || row_bytes == 0) return s;
    const char *src = (const char *)table;
    char *dst = (char *)out;
#pragma omp parallel for schedule(static) if (n * row_bytes >= 4 * EMB_PAR_MIN)
    for (int64_t p = 0; p < n; p++)
        memcpy(dst + p * row_bytes, src + (int64_t)idx[p] * row_bytes, (size_t)row_bytes);
    return GC_OK;
}

/* dtable[v0:v1, c0:c1] = sum, in position order, of the dy rows whose index is in
 * [v0, v1); dtable's tile was zeroed by the caller's task. */
static void scatter_tile(int64_t n, int64_t D, const float *dy, const int32_t *idx, float *dtable,
                         int64_t v0, int64_t v1, int64_t c0, int64_t c1)
{
    for (int64_t r = v0; r < v1; r++) memset(dtable + r * D + c0, 0, (size_t)(c1 - c0) * sizeof(float));
    for (int64_t p = 0; p < n; p++) {
        int64_t v = idx[p];
        if (v < v0 || v >= v1) continue;
        float *restrict d = dtable + v * D;
        const float *restrict g = dy + p * D;
        for (int64_t c = c0; c < c1; c++) d[c] += g[c];
    }
}

gc_status gc_cpu_embedding_bwd(int64_t n, int64_t V, int64_t D, const float *dy,
                               const int32_t *idx, float *dtable)
{
    if (n < 0 || V < 0 || D < 0) return gc_fail(GC_ERR_INVALID_ARG, "embedding_bwd: negative size");
    gc_status s = check_indices(n, V, idx);
    if (s || V == 0 || D == 0) return s;
    int threads = 1;
#ifdef _OPENMP
    if (n * D >= EMB_PAR_MIN || V * D >= 4 * EMB_PAR_MIN) threads = omp_get_max_threads();
#endif
    /* column blocks first (no imbalance when indices repeat), then row bands */
    int64_t cb = D / EMB_COL_MIN;
    if (cb < 1) cb = 1;
    if (cb > threads) cb = threads;
    int64_t rb = (threads + cb - 1) / cb;
    if (rb > V) rb = V;
    const int64_t tasks = rb * cb;
#pragma omp parallel for schedule(static) if (tasks > 1)
    for (int64_t t = 0; t < tasks; t++) {
        int64_t br = t / cb, bc = t % cb;
        int64_t v0 = V * br / rb, v1 = V * (br + 1) / rb;
        int64_t c0 = D * bc / cb, c1 = D * (bc + 1) / cb;
        scatter_tile(n, D, dy, idx, dtable, v0, v1, c0, c1);
    }
    return GC_OK;
}

/* ---------------------------------------------------------------- adapters */
gc_status gc_cpu_op_embedding_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *table = call->in[0], *idx = call->in[1];
    gc_tensor *out = call->out[0];
    int64_t row_bytes = table->shape[1] * (int64_t)gc_dtype_size(table->dtype);
    return gc_cpu_embedding_fwd(gc_tensor_numel(idx), table->shape[0], row_bytes, table->data,
                                (const int32_t *)idx->data, out->data);
}

gc_status gc_cpu_op_embedding_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *dy = call->in[0], *idx = call->in[1];
    gc_tensor *dt = call->out[0];
    if (dy->dtype != GC_F32 || dt->dtype != GC_F32) /* core widens f16/bf16 on this backend */
        return gc_fail(GC_ERR_DTYPE, "embedding_bwd: the CPU kernel takes float32 (got %s)",
                       gc_dtype_name(dy->dtype));
    return gc_cpu_embedding_bwd(gc_tensor_numel(idx), dt->shape[0], dt->shape[1], (const float *)dy->data,
                                (const int32_t *)idx->data, (float *)dt->data);
}
