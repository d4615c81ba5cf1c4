/* embedding.cu -- embedding lookup (a gather of table rows by int32 index) and its
 * backward (zeros + a deterministic scatter-add) on CUDA.
 *
 * Forward: a pure copy, so any dtype (f32 / f16 / bf16 / int32) is moved by element
 * size, as raw bits. Each thread copies one vector of one row: 16-byte vectors when the
 * table, the output and the row length are 16-byte aligned, else 8, 4 or 2 bytes.
 *
 * Backward, deterministic and independent of scheduling (the sums are the CPU's, bit for
 * bit): (1) one pass writes the keys (the index, or the sentinel V for a bad one) and
 * the positions 0..n-1; (2) a stable CUB radix sort by key, over just the bits V needs,
 * orders the positions by index and, within one index, by position; (3) one binary
 * search per table row finds where its run starts; (4) one thread per (row, column)
 * adds the dy rows of its run in position order, in float32 from +0, and stores the sum
 * once (rows without any index get 0). Everything lives in the backend's workspace
 * (gc_cuda_workspace), so the op can be captured into a graph once the workspace has
 * been grown by an eager call of the same size.
 *
 * Out-of-range indices (the device error-flag protocol): a bad index is never read
 * through; the forward writes zeros to its row and the backward ignores it. The kernels
 * record the smallest bad flat position in the backend's error flag, as one uint64 at
 * int32 slots 2-3 of gc_cuda_err_flag(be) (8-byte aligned), packed as
 * (position << 32) | (uint32)value, atomicMin'ed (positions past 2^31-1 are clamped);
 * UINT64_MAX means "none" (slots 0-1 are loss.cu's). A standalone call (no stream
 * capture) resets the flag before its kernels, reads it back after them (one stream
 * sync) and returns GC_ERR_INVALID_ARG "indices: value %d at position %lld is outside
 * [0, V)", the CPU's message. While the stream is being captured the op neither resets
 * nor reads the flag: it accumulates over every embedding op of the graph, and whoever
 * replays the graph resets it (8 bytes of 0xff) before a replay and reads it after.
 */
#include "common.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <limits.h>
#include <string.h>

#define EMB_NO_BAD 0xFFFFFFFFFFFFFFFFull

static unsigned long long *bad_flag(const gc_backend *be)
{
    int32_t *f = gc_cuda_err_flag(be);
    return f ? (unsigned long long *)(f + 2) : NULL;
}

__device__ __forceinline__ void mark_bad(unsigned long long *flag, int64_t p, int32_t value)
{
    unsigned long long pos = p < INT_MAX ? (unsigned long long)p : (unsigned long long)INT_MAX;
    atomicMin(flag, (pos << 32) | (unsigned long long)(uint32_t)value);
}

/* Item i of a grid over `items` = rows x per_row: (row, column) with a 32-bit division
 * when everything fits in 32 bits (the common case), 64-bit otherwise. */
__device__ __forceinline__ void split_item(int64_t i, int64_t per_row, int small, int64_t *row, int64_t *col)
{
    if (small) {
        uint32_t r = (uint32_t)i / (uint32_t)per_row;
        *row = r;
        *col = (int64_t)((uint32_t)i - r * (uint32_t)per_row);
    } else {
        *row = i / per_row;
        *col = i - *row * per_row;
    }
}

static unsigned emb_grid(const gc_backend *be, int64_t items)
{
    int64_t b = (items + GC_CUDA_THREADS - 1) / GC_CUDA_THREADS;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

/* ------------------------------------------------------------------ forward */
template <typename Vec>
__global__ void __launch_bounds__(GC_CUDA_THREADS)
gather_kernel(int64_t items, int64_t vpr, int small, int64_t V, const Vec *__restrict__ table,
              const int32_t *__restrict__ idx, Vec *__restrict__ out, unsigned long long *flag)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        int64_t p, j;
        split_item(i, vpr, small, &p, &j);
        const int32_t k = __ldg(idx + p);
        if (k < 0 || (int64_t)k >= V) {
            if (j == 0) mark_bad(flag, p, k);
            out[i] = Vec();
            continue;
        }
        out[i] = table[(int64_t)k * vpr + j];
    }
}

/* The index check alone (rows of zero bytes: nothing to copy, indices still checked). */
__global__ void __launch_bounds__(GC_CUDA_THREADS)
check_kernel(int64_t n, int64_t V, const int32_t *__restrict__ idx, unsigned long long *flag)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += stride) {
        const int32_t k = idx[p];
        if (k < 0 || (int64_t)k >= V) mark_bad(flag, p, k);
    }
}

template <typename Vec>
static void launch_gather(const gc_backend *be, int64_t n, int64_t row_bytes, int64_t V, const void *table,
                          const int32_t *idx, void *out, unsigned long long *flag)
{
    const int64_t vpr = row_bytes / (int64_t)sizeof(Vec), items = n * vpr;
    const int small = items <= (int64_t)UINT32_MAX;
    gather_kernel<Vec><<<emb_grid(be, items), GC_CUDA_THREADS, 0, gc_cuda_stream(be)>>>(
        items, vpr, small, V, (const Vec *)table, idx, (Vec *)out, flag);
}

/* The standalone epilogue: reads the flag back and reports the first bad index. */
static gc_status report(const gc_backend *be, unsigned long long *flag, int64_t V)
{
    if (gc_cuda_capturing(be)) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    unsigned long long bad = EMB_NO_BAD;
    GC_CUDA_TRY(cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, s));
    GC_CUDA_TRY(cudaStreamSynchronize(s));
    if (bad == EMB_NO_BAD) return GC_OK;
    return gc_fail(GC_ERR_INVALID_ARG, "indices: value %d at position %lld is outside [0, %lld)",
                   (int)(int32_t)(uint32_t)(bad & 0xFFFFFFFFull), (long long)(bad >> 32), (long long)V);
}

/* The replayer's side of the protocol (the backend's graph_errors): clear the flag before
 * launches of captured graphs, or wait, read, clear and report what they recorded. The
 * table size is not known here, so the message names the bound by the layer's argument. */
extern "C" void gc_cuda_count_sync(void); /* backend.cu: _core.cuda_stream_syncs */

extern "C" gc_status gc_cuda_embedding_graph_errors(const gc_backend *be, int read)
{
    unsigned long long *flag = bad_flag(be);
    if (!flag) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    unsigned long long bad = EMB_NO_BAD;
    if (read) {
        GC_CUDA_TRY(cudaMemcpyAsync(&bad, flag, sizeof bad, cudaMemcpyDeviceToHost, s));
        gc_cuda_count_sync();
        GC_CUDA_TRY(cudaStreamSynchronize(s));
    }
    GC_CUDA_TRY(cudaMemsetAsync(flag, 0xff, sizeof(unsigned long long), s));
    if (bad == EMB_NO_BAD) return GC_OK;
    return gc_fail(GC_ERR_INVALID_ARG, "indices: value %d at position %lld of a batch is outside [0, input_dim) "
                   "of an embedding table", (int)(int32_t)(uint32_t)(bad & 0xFFFFFFFFull), (long long)(bad >> 32));
}

static gc_status reset_flag(const gc_backend *be, unsigned long long **flag)
{
    *flag = bad_flag(be);
    if (!*flag) return gc_fail(GC_ERR_BACKEND, "embedding: the backend has no error flag");
    if (!gc_cuda_capturing(be))
        GC_CUDA_TRY(cudaMemsetAsync(*flag, 0xff, sizeof(unsigned long long), gc_cuda_stream(be)));
    return GC_OK;
}

extern "C" gc_status gc_cuda_op_embedding_fwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_tensor *table = call->in[0], *idx = call->in[1];
    gc_tensor *out = call->out[0];
    const int64_t n = gc_tensor_numel(idx), V = table->shape[0];
    const int64_t row_bytes = table->shape[1] * (int64_t)gc_dtype_size(table->dtype);
    if (n == 0) return GC_OK;
    unsigned long long *flag;
    if ((st = reset_flag(be, &flag))) return st;
    const int32_t *ix = (const int32_t *)idx->data;
    if (row_bytes == 0) {
        check_kernel<<<emb_grid(be, n), GC_CUDA_THREADS, 0, gc_cuda_stream(be)>>>(n, V, ix, flag);
    } else {
        /* the widest vector that the row length and both base addresses allow */
        const uintptr_t bits = (uintptr_t)table->data | (uintptr_t)out->data | (uintptr_t)row_bytes;
        if (bits % 16 == 0) launch_gather<uint4>(be, n, row_bytes, V, table->data, ix, out->data, flag);
        else if (bits % 8 == 0) launch_gather<uint2>(be, n, row_bytes, V, table->data, ix, out->data, flag);
        else if (bits % 4 == 0) launch_gather<uint32_t>(be, n, row_bytes, V, table->data, ix, out->data, flag);
        else launch_gather<uint16_t>(be, n, row_bytes, V, table->data, ix, out->data, flag);
    }
    if ((st = gc_cuda_launch_check("embedding_fwd"))) return st;
    return report(be, flag, V);
}

/* ------------------------------------------------------------------ backward */

/* keys[p] = idx[p] (the sentinel for a bad one, which sorts after every row), vals[p] = p */
__global__ void __launch_bounds__(GC_CUDA_THREADS)
keys_kernel(int64_t n, int64_t V, uint32_t sentinel, const int32_t *__restrict__ idx, uint32_t *__restrict__ keys,
            int32_t *__restrict__ vals, unsigned long long *flag)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t p = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; p < n; p += stride) {
        const int32_t k = idx[p];
        const int ok = k >= 0 && (int64_t)k < V;
        if (!ok) mark_bad(flag, p, k);
        keys[p] = ok ? (uint32_t)k : sentinel;
        vals[p] = (int32_t)p;
    }
}

/* starts[v] = first sorted position whose key is >= v, for v in [0, nrows] */
__global__ void __launch_bounds__(GC_CUDA_THREADS)
starts_kernel(int64_t nrows, const uint32_t *__restrict__ keys, int64_t n, int32_t *__restrict__ starts)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t v = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; v <= nrows; v += stride) {
        int64_t lo = 0, hi = n;
        while (lo < hi) {
            int64_t mid = (lo + hi) >> 1;
            if ((int64_t)keys[mid] < v) lo = mid + 1;
            else hi = mid;
        }
        starts[v] = (int32_t)lo;
    }
}

/* dtable[v, c] = sum over the run of row v (position order) of dy[pos, c]; rows past
 * nrows (never indexed: indices are int32) are 0. */
template <typename T>
__global__ void __launch_bounds__(GC_CUDA_THREADS)
segsum_kernel(int64_t items, int64_t D, int small, int64_t nrows, const int32_t *__restrict__ starts,
              const int32_t *__restrict__ pos, const T *__restrict__ dy, T *__restrict__ dtable)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < items; i += stride) {
        int64_t v, c;
        split_item(i, D, small, &v, &c);
        float acc = 0.0f;
        if (v < nrows) {
            const int32_t k1 = starts[v + 1];
            for (int32_t k = starts[v]; k < k1; k++) acc = __fadd_rn(acc, gc_to_f(dy[(int64_t)pos[k] * D + c]));
        }
        dtable[i] = gc_from_f<T>(acc);
    }
}

static size_t align256(size_t b) { return (b + 255) & ~(size_t)255; }

extern "C" gc_status gc_cuda_op_embedding_bwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_tensor *dy = call->in[0], *idx = call->in[1];
    gc_tensor *dt = call->out[0];
    const int64_t n = gc_tensor_numel(idx), V = dt->shape[0], D = dt->shape[1];
    const int32_t *ix = (const int32_t *)idx->data;
    cudaStream_t s = gc_cuda_stream(be);
    if (n > (int64_t)INT_MAX)
        return gc_fail(GC_ERR_UNSUPPORTED, "embedding_bwd: %lld indices (at most %d on CUDA)", (long long)n, INT_MAX);
    if (n == 0) {
        if (V * D > 0)
            GC_CUDA_TRY(cudaMemsetAsync(dt->data, 0, (size_t)(V * D) * gc_dtype_size(dt->dtype), s));
        return GC_OK;
    }
    unsigned long long *flag;
    if ((st = reset_flag(be, &flag))) return st;
    if (V * D == 0) { /* nothing to sum into; the indices are still checked */
        check_kernel<<<emb_grid(be, n), GC_CUDA_THREADS, 0, s>>>(n, V, ix, flag);
        if ((st = gc_cuda_launch_check("embedding_bwd"))) return st;
        return report(be, flag, V);
    }
    /* rows an int32 index can reach; the sentinel sorts after all of them */
    const int64_t nrows = V < (int64_t)INT_MAX ? V : (int64_t)INT_MAX;
    const uint32_t sentinel = (uint32_t)nrows;
    int end_bit = 1;
    while (end_bit < 32 && (sentinel >> end_bit) != 0) end_bit++;
    size_t sort_bytes = 0;
    GC_CUDA_TRY(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, (const uint32_t *)NULL, (uint32_t *)NULL,
                                                (const int32_t *)NULL, (int32_t *)NULL, (int)n, 0, end_bit, s));
    const size_t nb = align256((size_t)n * 4);
    const size_t total = 4 * nb + align256((size_t)(nrows + 1) * 4) + align256(sort_bytes);
    void *ws = NULL;
    if ((st = gc_cuda_workspace(be, total, &ws))) return st;
    char *w = (char *)ws;
    uint32_t *keys = (uint32_t *)w, *keys_sorted = (uint32_t *)(w + nb);
    int32_t *vals = (int32_t *)(w + 2 * nb), *pos = (int32_t *)(w + 3 * nb);
    int32_t *starts = (int32_t *)(w + 4 * nb);
    void *sort_tmp = w + 4 * nb + align256((size_t)(nrows + 1) * 4);

    keys_kernel<<<emb_grid(be, n), GC_CUDA_THREADS, 0, s>>>(n, V, sentinel, ix, keys, vals, flag);
    if ((st = gc_cuda_launch_check("embedding_bwd (keys)"))) return st;
    GC_CUDA_TRY(cub::DeviceRadixSort::SortPairs(sort_tmp, sort_bytes, keys, keys_sorted, vals, pos, (int)n, 0,
                                                end_bit, s));
    starts_kernel<<<emb_grid(be, nrows + 1), GC_CUDA_THREADS, 0, s>>>(nrows, keys_sorted, n, starts);
    if ((st = gc_cuda_launch_check("embedding_bwd (runs)"))) return st;
    const int64_t items = V * D;
    const int small = items <= (int64_t)UINT32_MAX;
    GC_CUDA_DISPATCH_FLOAT(dt->dtype, T,
                           segsum_kernel<T><<<emb_grid(be, items), GC_CUDA_THREADS, 0, s>>>(
                               items, D, small, nrows, starts, pos, (const T *)dy->data, (T *)dt->data));
    if ((st = gc_cuda_launch_check("embedding_bwd"))) return st;
    return report(be, flag, V);
}
