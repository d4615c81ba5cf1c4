/* cast.cu -- the cast op on CUDA: every pair of f32 / f16 / bf16 storage dtypes, and
 * float to int32 (truncation toward zero, as cpu/cast.c: Embedding's ids).
 *
 * Round to nearest even, NaN encoded as core/dtype.c does (gc_from_f, cast_ld), so a
 * cast gives the same bits on the CPU and the GPU. Eight elements per thread with vector accesses
 * when both pointers are aligned; the same dtype is a device-to-device copy. Core
 * never converts for this op (it is the op core converts with).
 */
#include "common.cuh"

/* Storage -> float for the cast: gc_to_f, except that an f16 NaN keeps its payload
 * exactly as core/dtype.c widens it (the hardware conversion may canonicalise it). */
__device__ __forceinline__ float cast_ld(float v) { return v; }
__device__ __forceinline__ float cast_ld(__nv_bfloat16 v) { return gc_to_f(v); }
__device__ __forceinline__ float cast_ld(__half v)
{
    unsigned h = __half_as_ushort(v);
    if ((h & 0x7C00u) == 0x7C00u && (h & 0x3FFu))
        return __uint_as_float(((h & 0x8000u) << 16) | 0x7F800000u | ((h & 0x3FFu) << 13));
    return __half2float(v);
}

template <typename Ti, typename To>
__global__ void __launch_bounds__(GC_CUDA_THREADS) cast_kernel(int64_t n, const Ti *x, To *y, int vec)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (vec) {
        typedef gc_pack<Ti, GC_MAP_VEC> Pi;
        typedef gc_pack<To, GC_MAP_VEC> Po;
        const int64_t nv = n / GC_MAP_VEC;
        for (int64_t v = tid; v < nv; v += stride) {
            Pi a = ((const Pi *)x)[v];
            Po o;
#pragma unroll
            for (int j = 0; j < GC_MAP_VEC; j++) o.v[j] = gc_from_f<To>(cast_ld(a.v[j]));
            ((Po *)y)[v] = o;
        }
        done = nv * GC_MAP_VEC;
    }
    for (int64_t i = done + tid; i < n; i += stride) y[i] = gc_from_f<To>(cast_ld(x[i]));
}

template <typename Ti, typename To>
static void launch(const gc_backend *be, int64_t n, const void *x, void *y)
{
    int vec = ((uintptr_t)x % (sizeof(Ti) * GC_MAP_VEC)) == 0 && ((uintptr_t)y % (sizeof(To) * GC_MAP_VEC)) == 0;
    cast_kernel<Ti, To><<<gc_cuda_map_grid(be, n), GC_CUDA_THREADS, 0, gc_cuda_stream(be)>>>(
        n, (const Ti *)x, (To *)y, vec);
}

/* float -> int32 as the CPU casts (cpu/cast.c): truncation toward zero, NaN and values
 * outside the int32 range INT32_MIN */
template <typename Ti>
__global__ void __launch_bounds__(GC_CUDA_THREADS) cast_i32_kernel(int64_t n, const Ti *x, int32_t *y)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = cast_ld(x[i]);
        y[i] = (v > -2147483648.0f && v < 2147483648.0f) ? (int32_t)v : INT32_MIN;
    }
}

extern "C" gc_status gc_cuda_op_cast(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0];
    int64_t n = gc_tensor_numel(x);
    if (n == 0) return GC_OK;
    if (x->dtype == y->dtype) {
        if (x->data != y->data)
            GC_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, (size_t)n * gc_dtype_size(x->dtype),
                                        cudaMemcpyDeviceToDevice, gc_cuda_stream(be)));
        return GC_OK;
    }
    if (y->dtype == GC_I32) {
        GC_CUDA_DISPATCH_FLOAT(x->dtype, Ti, {
            cast_i32_kernel<Ti><<<gc_cuda_map_grid(be, n), GC_CUDA_THREADS, 0, gc_cuda_stream(be)>>>(
                n, (const Ti *)x->data, (int32_t *)y->data);
        });
        return gc_cuda_launch_check("cast");
    }
    GC_CUDA_DISPATCH_FLOAT(x->dtype, Ti, { GC_CUDA_DISPATCH_FLOAT(y->dtype, To, launch<Ti, To>(be, n, x->data, y->data)); });
    return gc_cuda_launch_check("cast");
}
