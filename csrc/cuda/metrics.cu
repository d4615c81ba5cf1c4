/* metrics.cu -- accuracy on CUDA (categorical, sparse categorical, binary): the count
 * of correct rows as a float32 (1,) tensor, like csrc/cpu/metrics.c.
 *
 * Each row gets a warp (up to 1024 columns) or a 256-thread block. Arg-max follows the
 * CPU's sequential rule exactly: strictly greater wins, so ties go to the first index
 * and NaNs never win, except that a NaN in column 0 makes the arg-max 0. Binary
 * accuracy adds hits/cols per row. Row results are summed in double, per block in a
 * fixed order into the backend's scratch buffer, then by one block in a fixed order:
 * deterministic, capturable (no atomics, no host sync).
 */
#include "common.cuh"

#define NONE_IDX ((int64_t)0x7fffffffffffffffLL)

struct amax {
    float v;
    int64_t i; /* NONE_IDX: no candidate yet */
};

__device__ __forceinline__ amax amax_combine(amax a, amax b)
{
    if (a.i == NONE_IDX) return b;
    if (b.i == NONE_IDX) return a;
    return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

/* arg-max of row [base, base + cols) of p (dtype dt), the CPU's rule; every thread of
 * the row gets the result. sv/si: 8 entries of shared memory (TPR == 256). */
template <int TPR>
__device__ int64_t row_argmax(const void *p, int dt, int64_t base, int64_t cols, int lane, float *sv,
                              int64_t *si)
{
    amax b = {0.0f, NONE_IDX};
    for (int64_t c = lane; c < cols; c += TPR) {
        float x = gc_ld(p, dt, base + c);
        if (x == x && (b.i == NONE_IDX || x > b.v)) {
            b.v = x;
            b.i = c;
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        amax q;
        q.v = __shfl_xor_sync(0xffffffffu, b.v, o);
        q.i = __shfl_xor_sync(0xffffffffu, b.i, o);
        b = amax_combine(b, q);
    }
    if (TPR > 32) {
        const int warp = threadIdx.x >> 5;
        if ((threadIdx.x & 31) == 0) {
            sv[warp] = b.v;
            si[warp] = b.i;
        }
        __syncthreads();
        amax r = {sv[0], si[0]};
        for (int w = 1; w < TPR / 32; w++) {
            amax q = {sv[w], si[w]};
            r = amax_combine(r, q);
        }
        __syncthreads();
        b = r;
    }
    float x0 = gc_ld(p, dt, base);
    if (x0 != x0 || b.i == NONE_IDX) return 0;
    return b.i;
}

template <int TPR>
__global__ void __launch_bounds__(256) accuracy_rows(int kind, int64_t rows, int64_t cols, const void *pred,
                                                     int pdt, const void *lab, int ldt, float thr,
                                                     double *partial)
{
    __shared__ float sv[8];
    __shared__ int64_t si[8];
    __shared__ double sd[8];
    const int rpb = 256 / TPR;
    const int lane = threadIdx.x % TPR;
    double mine = 0.0; /* this row group's total (valid in lane 0) */
    for (int64_t r = (int64_t)blockIdx.x * rpb + threadIdx.x / TPR; r < rows; r += (int64_t)gridDim.x * rpb) {
        const int64_t base = r * cols;
        double ok;
        if (kind == GC_ACC_BINARY) {
            int64_t hits = 0;
            for (int64_t c = lane; c < cols; c += TPR)
                hits += (gc_ld(pred, pdt, base + c) > thr) == (gc_ld(lab, ldt, base + c) > 0.5f);
            hits = gc_row_reduce<TPR>((long long)hits, gc_op_sum(), (long long *)sd);
            ok = (double)hits / (double)cols;
        } else {
            int64_t a = row_argmax<TPR>(pred, pdt, base, cols, lane, sv, si);
            int64_t b;
            if (kind == GC_ACC_SPARSE) b = ((const int32_t *)lab)[r];
            else b = row_argmax<TPR>(lab, ldt, base, cols, lane, sv, si);
            ok = a == b ? 1.0 : 0.0;
        }
        mine += ok;
    }
    /* block total in a fixed order: row groups 0..rpb-1 */
    if (TPR == 32) {
        if (lane == 0) sd[threadIdx.x / 32] = mine;
        __syncthreads();
        if (threadIdx.x == 0) {
            double s = 0.0;
            for (int k = 0; k < rpb; k++) s += sd[k];
            partial[blockIdx.x] = s;
        }
    } else if (threadIdx.x == 0) {
        partial[blockIdx.x] = mine;
    }
}

__global__ void __launch_bounds__(256) accuracy_final(int nparts, const double *partial, float *count)
{
    __shared__ double sd[8];
    double s = 0.0;
    for (int k = threadIdx.x; k < nparts; k += 256) s += partial[k];
    s = gc_row_reduce<256>(s, gc_op_sum(), sd);
    if (threadIdx.x == 0) *count = (float)s;
}

extern "C" gc_status gc_cuda_op_accuracy(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_accuracy_params *p = (const gc_accuracy_params *)call->params;
    const gc_tensor *pred = call->in[0], *y = call->in[1];
    float *count = (float *)call->out[0]->data;
    int64_t rows = 1;
    for (int d = 0; d + 1 < pred->ndim; d++) rows *= pred->shape[d];
    int64_t cols = pred->ndim > 0 ? pred->shape[pred->ndim - 1] : 1;
    gc_accuracy_kind kind = p->kind;
    if (y->dtype == GC_I32) {
        if (kind != GC_ACC_SPARSE) return gc_fail(GC_ERR_DTYPE, "accuracy: int32 labels need the sparse kind");
    } else if (kind == GC_ACC_SPARSE) {
        return gc_fail(GC_ERR_DTYPE, "accuracy: sparse accuracy takes int32 labels");
    }
    cudaStream_t s = gc_cuda_stream(be);
    if (rows == 0 || cols == 0) {
        GC_CUDA_TRY(cudaMemsetAsync(count, 0, sizeof(float), s));
        return GC_OK;
    }
    const int tpr = cols <= GC_ROW_WARP_MAX_COLS ? 32 : 256, rpb = 256 / tpr;
    int64_t blocks = (rows + rpb - 1) / rpb;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 8;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    double *partial = (double *)gc_cuda_scratch(be);
    if (tpr == 32)
        accuracy_rows<32><<<(unsigned)blocks, 256, 0, s>>>((int)kind, rows, cols, pred->data, (int)pred->dtype,
                                                           y->data, (int)y->dtype, p->threshold, partial);
    else
        accuracy_rows<256><<<(unsigned)blocks, 256, 0, s>>>((int)kind, rows, cols, pred->data, (int)pred->dtype,
                                                            y->data, (int)y->dtype, p->threshold, partial);
    if ((st = gc_cuda_launch_check("accuracy"))) return st;
    accuracy_final<<<1, 256, 0, s>>>((int)blocks, partial, count);
    return gc_cuda_launch_check("accuracy");
}
