/* seq_mask.cu -- the sequence-mask ops on CUDA (csrc/cpu/seq_mask.c is the reference).
 *
 * seq_mask: one thread per row of (R, F): mask = any(x != value) as float32 0/1 (NaN is
 * different), Keras' step mask of Embedding(mask_zero=True) and Masking. mul_bcast:
 * y[a, j, c] = x[a, j, c] * m[a, c], one thread per element with a grid-stride loop, in
 * place allowed (each element read then written by one thread). Storage f32/f16/bf16,
 * float32 arithmetic, one rounding at the store, as every elementwise op here. Both are
 * launch-only (no host sync), so a plan step that uses them can be captured. reverse_seq:
 * y[a, t, c] = x[a, T-1-t, c], one thread per element (not in place). */
#include "common.cuh"

template <typename T>
__global__ void seq_mask_kernel(const T *x, float *m, int64_t R, int64_t F, float v)
{
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < R; r += (int64_t)gridDim.x * blockDim.x) {
        int any = 0;
        for (int64_t f = 0; f < F && !any; f++) any = !(gc_to_f(x[r * F + f]) == v);
        m[r] = any ? 1.0f : 0.0f;
    }
}

template <typename T>
__global__ void mul_bcast_kernel(const T *x, const float *m, T *y, int64_t n, int64_t M, int64_t C)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C, a = i / (M * C);
        y[i] = gc_from_f<T>(gc_to_f(x[i]) * m[a * C + c]);
    }
}

template <typename T>
__global__ void reverse_seq_kernel(const T *x, T *y, int64_t n, int64_t S, int64_t C)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % C, t = (i / C) % S, a = i / (S * C);
        y[i] = x[(a * S + (S - 1 - t)) * C + c];
    }
}

extern "C" gc_status gc_cuda_op_seq_mask(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_seq_mask_params *p = (const gc_seq_mask_params *)call->params;
    const gc_tensor *x = call->in[0];
    const int64_t R = gc_tensor_numel(call->out[0]), F = x->shape[x->ndim - 1];
    if (R == 0) return GC_OK;
    const unsigned grid = gc_cuda_grid(R, GC_CUDA_THREADS);
    cudaStream_t s = gc_cuda_stream(be);
    GC_CUDA_DISPATCH_FLOAT(x->dtype, T,
                           seq_mask_kernel<T><<<grid, GC_CUDA_THREADS, 0, s>>>((const T *)x->data,
                                                                              (float *)call->out[0]->data, R, F,
                                                                              p->value));
    return gc_cuda_launch_check("seq_mask");
}

extern "C" gc_status gc_cuda_op_mul_bcast(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_tensor *x = call->in[0];
    const int64_t n = gc_tensor_numel(x), M = x->shape[1], C = x->shape[2];
    if (n == 0) return GC_OK;
    const unsigned grid = gc_cuda_grid(n, GC_CUDA_THREADS);
    cudaStream_t s = gc_cuda_stream(be);
    GC_CUDA_DISPATCH_FLOAT(x->dtype, T,
                           mul_bcast_kernel<T><<<grid, GC_CUDA_THREADS, 0, s>>>(
                               (const T *)x->data, (const float *)call->in[1]->data, (T *)call->out[0]->data, n, M, C));
    return gc_cuda_launch_check("mul_bcast");
}

extern "C" gc_status gc_cuda_op_reverse_seq(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_tensor *x = call->in[0];
    const int64_t n = gc_tensor_numel(x), S = x->shape[1], C = x->shape[2];
    if (n == 0) return GC_OK;
    const unsigned grid = gc_cuda_grid(n, GC_CUDA_THREADS);
    cudaStream_t s = gc_cuda_stream(be);
    GC_CUDA_DISPATCH_FLOAT(x->dtype, T,
                           reverse_seq_kernel<T><<<grid, GC_CUDA_THREADS, 0, s>>>(
                               (const T *)x->data, (T *)call->out[0]->data, n, S, C));
    return gc_cuda_launch_check("reverse_seq");
}
