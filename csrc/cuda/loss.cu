/* loss.cu -- losses on CUDA (softmax_xent, sigmoid_bce, xent_probs, regression_loss:
 * per-row loss plus the optional gradient of grad_scale * sum(loss)) and bias_grad.
 *
 * Formulas are those of csrc/cpu/loss.c (Keras'): the fused log-softmax path with the
 * exact gradient sum(y) * softmax - y (softmax - y for labels summing to 1); Keras' clipped path on
 * probabilities (eps 1e-7, zero gradient where the clip is active, row normalisation
 * included); mean over columns for the binary and regression losses. Each row gets a
 * warp (up to 1024 columns) or a 256-thread block; per-element exp/log run in float,
 * row accumulators in double (as the CPU's), combined in a fixed order, so results are
 * deterministic. Storage dtypes are read per tensor at run time (gc_ld / gc_st): the
 * labels may have another float dtype than the logits, or be int32 class indices.
 *
 * Out-of-range int32 labels: the kernel writes NaN to that row's loss and gradient and
 * records the smallest such row in the backend's error flag; outside graph capture the
 * adapter reads the flag back (one stream sync) and returns GC_ERR_INVALID_ARG with the
 * CPU's message; inside a capture the readback is skipped (no host syncs there).
 *
 * bias_grad sums columns in two deterministic passes: blocks of 32 columns x 8 row
 * lanes reduce row chunks into partials in the backend's fixed scratch buffer, then
 * one thread per column adds the partials in chunk order (one pass when one chunk
 * suffices).
 */
#include "common.cuh"

#include <limits.h>
#include <string.h>

#define LOSS_EPS 1e-7f
#define NO_BAD_ROW 0x7f7f7f7f /* the flag's value after memset(0x7f) */

typedef struct {
    int64_t rows, cols;
    const void *x; int xdt;     /* logits / probabilities / predictions */
    const void *y; int ydt;     /* labels: float dtype or GC_I32 */
    void *loss;                 /* (rows,) of xdt */
    void *grad;                 /* (rows, cols) of xdt, or NULL */
    float gs;                   /* grad_scale (softmax_xent, xent_probs) or grad_scale/cols */
    double gsd;
    int binary, kind;
    int32_t *flag;
} loss_args;

__device__ __forceinline__ float lab(const loss_args &a, int64_t r, int64_t c, int32_t li)
{
    if (a.ydt == GC_I32) return c == li ? 1.0f : 0.0f;
    return gc_ld(a.y, a.ydt, r * a.cols + c);
}

/* Reads row r's int32 label; an out-of-range label marks the row and returns -1. */
__device__ __forceinline__ int32_t sparse_label(const loss_args &a, int64_t r)
{
    if (a.ydt != GC_I32) return -1;
    int32_t li = ((const int32_t *)a.y)[r];
    if (li < 0 || (int64_t)li >= a.cols) {
        atomicMin(a.flag, r < INT_MAX ? (int)r : INT_MAX - 1);
        return INT_MIN;
    }
    return li;
}

__device__ __forceinline__ void nan_row(const loss_args &a, int64_t r, int lane, int tpr)
{
    if (lane == 0) gc_st(a.loss, a.xdt, r, NAN);
    if (a.grad)
        for (int64_t c = lane; c < a.cols; c += tpr) gc_st(a.grad, a.xdt, r * a.cols + c, NAN);
}

#define ROW_LOOP(TPR)                                                                      \
    __shared__ float smf[8];                                                               \
    __shared__ double smd[8];                                                              \
    const int rpb = 256 / (TPR);                                                           \
    const int lane = threadIdx.x % (TPR);                                                  \
    for (int64_t r = (int64_t)blockIdx.x * rpb + threadIdx.x / (TPR); r < a.rows;         \
         r += (int64_t)gridDim.x * rpb)

template <int TPR>
__global__ void __launch_bounds__(256) softmax_xent_kernel(loss_args a)
{
    ROW_LOOP(TPR)
    {
        const int64_t base = r * a.cols;
        int32_t li = sparse_label(a, r);
        if (li == INT_MIN) { /* uniform over the row's threads */
            nan_row(a, r, lane, TPR);
            continue;
        }
        float mx = -INFINITY;
        for (int64_t c = lane; c < a.cols; c += TPR) mx = gc_op_max()(mx, gc_ld(a.x, a.xdt, base + c));
        mx = gc_row_reduce<TPR>(mx, gc_op_max(), smf);
        double sum = 0.0, yz = 0.0, ysum = a.ydt == GC_I32 ? 1.0 : 0.0;
        for (int64_t c = lane; c < a.cols; c += TPR) {
            float z = gc_ld(a.x, a.xdt, base + c);
            sum += (double)expf(z - mx);
            if (a.ydt != GC_I32) {
                float y = gc_ld(a.y, a.ydt, base + c);
                yz += (double)y * z;
                ysum += y;
            }
        }
        sum = gc_row_reduce<TPR>(sum, gc_op_sum(), smd);
        double lse = (double)mx + log(sum), l;
        if (a.ydt == GC_I32) {
            l = lse - (double)gc_ld(a.x, a.xdt, base + li);
        } else {
            yz = gc_row_reduce<TPR>(yz, gc_op_sum(), smd);
            ysum = gc_row_reduce<TPR>(ysum, gc_op_sum(), smd);
            l = lse * ysum - yz;
        }
        if (lane == 0) gc_st(a.loss, a.xdt, r, (float)l);
        if (a.grad) {
            float inv = (float)(1.0 / sum);
            for (int64_t c = lane; c < a.cols; c += TPR) {
                float p = expf(gc_ld(a.x, a.xdt, base + c) - mx) * inv;
                /* the exact gradient sum(y) * softmax - y (softmax - y when labels sum to 1) */
                gc_st(a.grad, a.xdt, base + c, (float)(a.gsd * ((double)p * ysum - (double)lab(a, r, c, li))));
            }
        }
    }
}

template <int TPR>
__global__ void __launch_bounds__(256) sigmoid_bce_kernel(loss_args a)
{
    ROW_LOOP(TPR)
    {
        (void)smf;
        const int64_t base = r * a.cols;
        double s = 0.0;
        for (int64_t c = lane; c < a.cols; c += TPR) {
            float z = gc_ld(a.x, a.xdt, base + c), y = gc_ld(a.y, a.ydt, base + c);
            float e = expf(-fabsf(z));
            s += (double)(z > 0.0f ? z : 0.0f) - (double)z * y + (double)log1pf(e);
            if (a.grad) {
                float sig = z >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
                gc_st(a.grad, a.xdt, base + c, (float)(a.gsd * ((double)sig - y)));
            }
        }
        s = gc_row_reduce<TPR>(s, gc_op_sum(), smd);
        if (lane == 0) gc_st(a.loss, a.xdt, r, (float)(s / (double)a.cols));
    }
}

__device__ __forceinline__ float clip01(float q)
{
    return q < LOSS_EPS ? LOSS_EPS : (q > 1.0f - LOSS_EPS ? 1.0f - LOSS_EPS : q);
}

template <int TPR>
__global__ void __launch_bounds__(256) xent_probs_kernel(loss_args a)
{
    ROW_LOOP(TPR)
    {
        (void)smf;
        const int64_t base = r * a.cols;
        if (a.binary) {
            double s = 0.0;
            for (int64_t c = lane; c < a.cols; c += TPR) {
                float q = gc_ld(a.x, a.xdt, base + c), yc = gc_ld(a.y, a.ydt, base + c);
                float qc = clip01(q), one_m = 1.0f - qc; /* 1 - p in float, as Keras */
                s -= (double)yc * (double)logf(qc) + (1.0 - (double)yc) * (double)logf(one_m);
                if (a.grad) {
                    int active = q < LOSS_EPS || q > 1.0f - LOSS_EPS;
                    float g = active ? 0.0f
                                     : (float)(a.gsd * (-(double)yc / qc + (1.0 - (double)yc) / one_m));
                    gc_st(a.grad, a.xdt, base + c, g);
                }
            }
            s = gc_row_reduce<TPR>(s, gc_op_sum(), smd);
            if (lane == 0) gc_st(a.loss, a.xdt, r, (float)(s / (double)a.cols));
            continue;
        }
        int32_t li = sparse_label(a, r);
        if (li == INT_MIN) {
            nan_row(a, r, lane, TPR);
            continue;
        }
        double s = 0.0;
        for (int64_t c = lane; c < a.cols; c += TPR) s += (double)gc_ld(a.x, a.xdt, base + c);
        s = gc_row_reduce<TPR>(s, gc_op_sum(), smd);
        const float sf = (float)s; /* the normalised, clipped probabilities in float, as Keras */
        double l = 0.0, gq = 0.0;
        for (int64_t c = lane; c < a.cols; c += TPR) {
            float yc = lab(a, r, c, li);
            float q = gc_ld(a.x, a.xdt, base + c) / sf;
            float qc = clip01(q);
            if (yc != 0.0f) l -= (double)yc * (double)logf(qc);
            if (a.grad) {
                int active = q < LOSS_EPS || q > 1.0f - LOSS_EPS;
                float g = active ? 0.0f : (float)(-(double)yc / (double)qc);
                gq += (double)g * q;
            }
        }
        l = gc_row_reduce<TPR>(l, gc_op_sum(), smd);
        if (lane == 0) gc_st(a.loss, a.xdt, r, (float)l);
        if (a.grad) {
            gq = gc_row_reduce<TPR>(gq, gc_op_sum(), smd);
            for (int64_t c = lane; c < a.cols; c += TPR) {
                float yc = lab(a, r, c, li);
                float q = gc_ld(a.x, a.xdt, base + c) / sf;
                int active = q < LOSS_EPS || q > 1.0f - LOSS_EPS;
                float g = active ? 0.0f : (float)(-(double)yc / (double)clip01(q));
                gc_st(a.grad, a.xdt, base + c, (float)(a.gsd * (((double)g - gq) / (double)sf)));
            }
        }
    }
}

template <int TPR>
__global__ void __launch_bounds__(256) regression_kernel(loss_args a)
{
    ROW_LOOP(TPR)
    {
        (void)smf;
        const int64_t base = r * a.cols;
        double s = 0.0;
        for (int64_t c = lane; c < a.cols; c += TPR) {
            double d = (double)gc_ld(a.x, a.xdt, base + c) - (double)gc_ld(a.y, a.ydt, base + c);
            double gd;
            if (a.kind == GC_REG_MSE) {
                s += d * d;
                gd = 2.0 * d;
            } else {
                s += fabs(d);
                gd = d > 0.0 ? 1.0 : (d < 0.0 ? -1.0 : 0.0);
            }
            if (a.grad) gc_st(a.grad, a.xdt, base + c, (float)(a.gsd * gd));
        }
        s = gc_row_reduce<TPR>(s, gc_op_sum(), smd);
        if (lane == 0) gc_st(a.loss, a.xdt, r, (float)(s / (double)a.cols));
    }
}

/* ------------------------------------------------------------------ adapters */
static void rows_cols(const gc_tensor *t, int64_t *rows, int64_t *cols)
{
    int64_t r = 1;
    for (int d = 0; d + 1 < t->ndim; d++) r *= t->shape[d];
    *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    *rows = r;
}

static unsigned row_grid(const gc_backend *be, int64_t rows, int rpb)
{
    int64_t b = (rows + rpb - 1) / rpb;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 16;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

enum { L_SOFTMAX, L_BCE, L_PROBS, L_REG };

template <int TPR>
static void launch(int which, unsigned grid, cudaStream_t s, const loss_args &a)
{
    switch (which) {
    case L_SOFTMAX: softmax_xent_kernel<TPR><<<grid, 256, 0, s>>>(a); break;
    case L_BCE: sigmoid_bce_kernel<TPR><<<grid, 256, 0, s>>>(a); break;
    case L_PROBS: xent_probs_kernel<TPR><<<grid, 256, 0, s>>>(a); break;
    default: regression_kernel<TPR><<<grid, 256, 0, s>>>(a); break;
    }
}

static gc_status run_loss(const gc_backend *be, const gc_op_call *call, int which, const char *what)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_loss_params *p = (const gc_loss_params *)call->params;
    const gc_tensor *x = call->in[0], *y = call->in[1];
    loss_args a;
    memset(&a, 0, sizeof a);
    rows_cols(x, &a.rows, &a.cols);
    if (a.rows == 0 || a.cols == 0) return GC_OK;
    a.x = x->data; a.xdt = (int)x->dtype;
    a.y = y->data; a.ydt = (int)y->dtype;
    a.loss = call->out[0]->data;
    a.grad = (call->out[1] && call->out[1]->data) ? call->out[1]->data : NULL;
    a.binary = p->binary;
    a.kind = (int)p->kind;
    int scaled = which == L_BCE || which == L_REG || (which == L_PROBS && p->binary);
    a.gsd = scaled ? (double)p->grad_scale / (double)a.cols : (double)p->grad_scale;
    a.gs = (float)a.gsd;
    a.flag = gc_cuda_err_flag(be);
    cudaStream_t s = gc_cuda_stream(be);
    int sparse = y->dtype == GC_I32;
    if (sparse) GC_CUDA_TRY(cudaMemsetAsync(a.flag, 0x7f, sizeof(int32_t), s));
    if (a.cols <= GC_ROW_WARP_MAX_COLS) launch<32>(which, row_grid(be, a.rows, 8), s, a);
    else launch<256>(which, row_grid(be, a.rows, 1), s, a);
    if ((st = gc_cuda_launch_check(what))) return st;
    if (!sparse || gc_cuda_capturing(be)) return GC_OK;
    /* a standalone call: report a bad label as the CPU does (costs one sync) */
    int32_t bad = NO_BAD_ROW, value = 0;
    GC_CUDA_TRY(cudaMemcpyAsync(&bad, a.flag, sizeof bad, cudaMemcpyDeviceToHost, s));
    GC_CUDA_TRY(cudaStreamSynchronize(s));
    if (bad == NO_BAD_ROW) return GC_OK;
    GC_CUDA_TRY(cudaMemcpyAsync(&value, (const int32_t *)a.y + bad, sizeof value,
                                cudaMemcpyDeviceToHost, s));
    GC_CUDA_TRY(cudaStreamSynchronize(s));
    return gc_fail(GC_ERR_INVALID_ARG, "labels: value %d at row %lld is outside [0, %lld)", (int)value,
                   (long long)bad, (long long)a.cols);
}

extern "C" gc_status gc_cuda_op_softmax_xent(const gc_backend *be, const gc_op_call *call)
{
    return run_loss(be, call, L_SOFTMAX, "softmax_xent");
}

extern "C" gc_status gc_cuda_op_sigmoid_bce(const gc_backend *be, const gc_op_call *call)
{
    return run_loss(be, call, L_BCE, "sigmoid_bce");
}

extern "C" gc_status gc_cuda_op_xent_probs(const gc_backend *be, const gc_op_call *call)
{
    return run_loss(be, call, L_PROBS, "xent_probs");
}

extern "C" gc_status gc_cuda_op_regression_loss(const gc_backend *be, const gc_op_call *call)
{
    return run_loss(be, call, L_REG, "regression_loss");
}

/* ------------------------------------------------------------------ bias_grad */
#define BG_COLS 32
#define BG_LANES 8

/* Block (32 columns x 8 row lanes) sums rows [chunk*rpc, (chunk+1)*rpc) of its columns
 * into out[chunk * cols + c] (stored as odt). */
__global__ void __launch_bounds__(BG_COLS * BG_LANES)
bias_grad_partial(int64_t rows, int64_t cols, int64_t rpc, const void *dy, int dt, void *out, int odt)
{
    __shared__ float sm[BG_LANES][BG_COLS];
    const int tx = threadIdx.x % BG_COLS, ty = threadIdx.x / BG_COLS;
    const int64_t c = (int64_t)blockIdx.x * BG_COLS + tx;
    const int64_t chunk = blockIdx.y;
    const int64_t r0 = chunk * rpc, r1 = r0 + rpc < rows ? r0 + rpc : rows;
    float acc = 0.0f;
    if (c < cols)
        for (int64_t r = r0 + ty; r < r1; r += BG_LANES) acc += gc_ld(dy, dt, r * cols + c);
    sm[ty][tx] = acc;
    __syncthreads();
    if (ty == 0 && c < cols) {
        float s = sm[0][tx];
#pragma unroll
        for (int k = 1; k < BG_LANES; k++) s += sm[k][tx];
        gc_st(out, odt, chunk * cols + c, s);
    }
}

__global__ void bias_grad_final(int64_t chunks, int64_t cols, const float *part, void *db, int dt)
{
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
         c += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.0f;
        for (int64_t k = 0; k < chunks; k++) s += part[k * cols + c];
        gc_st(db, dt, c, s);
    }
}

extern "C" gc_status gc_cuda_op_bias_grad(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_tensor *dy = call->in[0];
    gc_tensor *db = call->out[0];
    int64_t rows, cols;
    rows_cols(dy, &rows, &cols);
    if (cols == 0) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    const int dt = (int)dy->dtype;
    if (rows == 0) {
        GC_CUDA_TRY(cudaMemsetAsync(db->data, 0, (size_t)cols * gc_dtype_size(db->dtype), s));
        return GC_OK;
    }
    /* enough chunks to fill the GPU (about 4 blocks per SM), each of >= 64 rows, within
     * the scratch buffer */
    const int64_t col_blocks = (cols + BG_COLS - 1) / BG_COLS;
    int64_t want = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 4 / col_blocks;
    int64_t by_rows = rows / 64;
    int64_t by_mem = (int64_t)(GC_CUDA_SCRATCH_BYTES / sizeof(float)) / cols;
    int64_t chunks = want;
    if (chunks > by_rows) chunks = by_rows;
    if (chunks > by_mem) chunks = by_mem;
    if (chunks > 65535) chunks = 65535;
    if (chunks < 1) chunks = 1;
    int64_t rpc = (rows + chunks - 1) / chunks;
    chunks = (rows + rpc - 1) / rpc;
    if (col_blocks > 0x7fffffffLL)
        return gc_fail(GC_ERR_INVALID_ARG, "bias_grad: %lld columns is too many", (long long)cols);
    dim3 grid((unsigned)col_blocks, (unsigned)chunks);
    if (chunks == 1) {
        bias_grad_partial<<<grid, BG_COLS * BG_LANES, 0, s>>>(rows, cols, rpc, dy->data, dt, db->data,
                                                             (int)db->dtype);
        return gc_cuda_launch_check("bias_grad");
    }
    float *part = (float *)gc_cuda_scratch(be);
    bias_grad_partial<<<grid, BG_COLS * BG_LANES, 0, s>>>(rows, cols, rpc, dy->data, dt, part, GC_F32);
    if ((st = gc_cuda_launch_check("bias_grad"))) return st;
    bias_grad_final<<<gc_cuda_grid(cols, 256), 256, 0, s>>>(chunks, cols, part, db->data, (int)db->dtype);
    return gc_cuda_launch_check("bias_grad");
}
