/* act.cu -- activations on CUDA: act_fwd and act_bwd (linear, relu, tanh, sigmoid,
 * softmax over the last axis), f32/f16/bf16 storage, float32 compute.
 *
 * Elementwise activations go through gc_map_launch (vectorised 16/32-byte accesses);
 * the formulas are those of csrc/cpu/act.c (relu keeps NaN, sigmoid from e = exp(-|x|)
 * so it never overflows, tanh via tanhf). Softmax gives each row one warp (up to 1024
 * columns) or one 256-thread block: max, sum of exp (fixed-order tree: deterministic),
 * then y = exp(x - max) * (1 / sum), which may run in place. Its backward is
 * dx = y * (dy - sum(dy * y)) with the dot product taken before dx is written, so dx
 * may alias dy. All launches go to the backend's stream (graph-capturable).
 */
#include "common.cuh"

__device__ __forceinline__ float act_sigmoid(float x)
{
    float e = expf(-fabsf(x));
    float s = 1.0f / (1.0f + e);
    return x < 0.0f ? e * s : s;
}

struct act_fwd_f {
    int act;
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const
    {
        float v = x[0];
        switch (act) {
        case GC_ACT_RELU: y[0] = v < 0.0f ? 0.0f : v; break;
        case GC_ACT_TANH: y[0] = tanhf(v); break;
        case GC_ACT_SIGMOID: y[0] = act_sigmoid(v); break;
        default: y[0] = v; break;
        }
    }
};

/* in: y, dy; out: dx (separately rounded products, as the CPU computes them) */
struct act_bwd_f {
    int act;
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *o) const
    {
        float y = x[0], dy = x[1];
        switch (act) {
        case GC_ACT_RELU: o[0] = y > 0.0f ? dy : 0.0f; break;
        case GC_ACT_TANH: o[0] = __fmul_rn(dy, __fsub_rn(1.0f, __fmul_rn(y, y))); break;
        case GC_ACT_SIGMOID: o[0] = __fmul_rn(__fmul_rn(dy, y), __fsub_rn(1.0f, y)); break;
        default: o[0] = dy; break;
        }
    }
};

template <typename T, int TPR>
__global__ void __launch_bounds__(256) softmax_fwd_kernel(int64_t rows, int64_t cols, const T *x, T *y)
{
    __shared__ float smem[8];
    const int rpb = 256 / TPR;
    const int sub = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    for (int64_t r = (int64_t)blockIdx.x * rpb + sub; r < rows; r += (int64_t)gridDim.x * rpb) {
        const T *xr = x + r * cols;
        T *yr = y + r * cols;
        float mx = -INFINITY;
        for (int64_t c = lane; c < cols; c += TPR) mx = gc_op_max()(mx, gc_to_f(xr[c]));
        mx = gc_row_reduce<TPR>(mx, gc_op_max(), smem);
        float s = 0.0f;
        for (int64_t c = lane; c < cols; c += TPR) s += expf(gc_to_f(xr[c]) - mx);
        s = gc_row_reduce<TPR>(s, gc_op_sum(), smem);
        float inv = 1.0f / s;
        for (int64_t c = lane; c < cols; c += TPR) yr[c] = gc_from_f<T>(expf(gc_to_f(xr[c]) - mx) * inv);
    }
}

template <typename T, int TPR>
__global__ void __launch_bounds__(256) softmax_bwd_kernel(int64_t rows, int64_t cols, const T *y,
                                                          const T *dy, T *dx)
{
    __shared__ float smem[8];
    const int rpb = 256 / TPR;
    const int sub = threadIdx.x / TPR, lane = threadIdx.x % TPR;
    for (int64_t r = (int64_t)blockIdx.x * rpb + sub; r < rows; r += (int64_t)gridDim.x * rpb) {
        const T *yr = y + r * cols, *gr = dy + r * cols;
        T *dr = dx + r * cols;
        float s = 0.0f;
        for (int64_t c = lane; c < cols; c += TPR) s += gc_to_f(gr[c]) * gc_to_f(yr[c]);
        s = gc_row_reduce<TPR>(s, gc_op_sum(), smem);
        for (int64_t c = lane; c < cols; c += TPR) {
            float yv = gc_to_f(yr[c]);
            dr[c] = gc_from_f<T>(__fmul_rn(yv, __fsub_rn(gc_to_f(gr[c]), s)));
        }
    }
}

static unsigned row_grid(const gc_backend *be, int64_t rows, int rpb)
{
    int64_t b = (rows + rpb - 1) / rpb;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 16;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

template <typename T>
static gc_status softmax_fwd(const gc_backend *be, int64_t rows, int64_t cols, const void *x, void *y)
{
    cudaStream_t s = gc_cuda_stream(be);
    if (cols <= GC_ROW_WARP_MAX_COLS)
        softmax_fwd_kernel<T, 32><<<row_grid(be, rows, 8), 256, 0, s>>>(rows, cols, (const T *)x, (T *)y);
    else
        softmax_fwd_kernel<T, 256><<<row_grid(be, rows, 1), 256, 0, s>>>(rows, cols, (const T *)x, (T *)y);
    return gc_cuda_launch_check("act_fwd (softmax)");
}

template <typename T>
static gc_status softmax_bwd(const gc_backend *be, int64_t rows, int64_t cols, const void *y,
                             const void *dy, void *dx)
{
    cudaStream_t s = gc_cuda_stream(be);
    if (cols <= GC_ROW_WARP_MAX_COLS)
        softmax_bwd_kernel<T, 32><<<row_grid(be, rows, 8), 256, 0, s>>>(rows, cols, (const T *)y,
                                                                         (const T *)dy, (T *)dx);
    else
        softmax_bwd_kernel<T, 256><<<row_grid(be, rows, 1), 256, 0, s>>>(rows, cols, (const T *)y,
                                                                          (const T *)dy, (T *)dx);
    return gc_cuda_launch_check("act_bwd (softmax)");
}

/* rows = product of all but the last dim, cols = last dim */
static void rows_cols(const gc_tensor *t, int64_t *rows, int64_t *cols)
{
    int64_t r = 1;
    for (int d = 0; d + 1 < t->ndim; d++) r *= t->shape[d];
    *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    *rows = r;
}

extern "C" gc_status gc_cuda_op_act_fwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_act_params *p = (const gc_act_params *)call->params;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0];
    int64_t rows, cols;
    rows_cols(x, &rows, &cols);
    if (rows * cols == 0) return GC_OK;
    if (p->act == GC_ACT_SOFTMAX) {
        GC_CUDA_DISPATCH_FLOAT(x->dtype, T, st = softmax_fwd<T>(be, rows, cols, x->data, y->data));
        return st;
    }
    if (p->act == GC_ACT_LINEAR && x->data == y->data) return GC_OK;
    const void *in[1] = {x->data};
    void *out[1] = {y->data};
    act_fwd_f f = {(int)p->act};
    GC_CUDA_DISPATCH_FLOAT(x->dtype, T, st = (gc_map_launch<T, 1, 1>(be, rows * cols, in, out, f, "act_fwd")));
    return st;
}

extern "C" gc_status gc_cuda_op_act_bwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_act_params *p = (const gc_act_params *)call->params;
    const gc_tensor *y = call->in[0], *dy = call->in[1];
    gc_tensor *dx = call->out[0];
    int64_t rows, cols;
    rows_cols(y, &rows, &cols);
    if (rows * cols == 0) return GC_OK;
    if (p->act == GC_ACT_SOFTMAX) {
        GC_CUDA_DISPATCH_FLOAT(y->dtype, T, st = softmax_bwd<T>(be, rows, cols, y->data, dy->data, dx->data));
        return st;
    }
    if (p->act == GC_ACT_LINEAR && dy->data == dx->data) return GC_OK;
    const void *in[2] = {y->data, dy->data};
    void *out[1] = {dx->data};
    act_bwd_f f = {(int)p->act};
    GC_CUDA_DISPATCH_FLOAT(y->dtype, T, st = (gc_map_launch<T, 2, 1>(be, rows * cols, in, out, f, "act_bwd")));
    return st;
}
