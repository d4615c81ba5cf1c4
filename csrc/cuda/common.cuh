/* common.cuh -- what every CUDA source of gpucmp shares: CUDA error -> gc_status,
 * the backend's one stream, device properties, a growable per-backend workspace,
 * f32/f16/bf16 storage loads and stores, the dropout hash, and the declarations of
 * every op adapter (gc_cuda_op_<name>, one per entry of GC_OP_LIST).
 *
 * Design: every op launches on the backend's single non-blocking stream, so that a
 * sequence of ops (one plan step) can be captured into a CUDA graph and replayed;
 * hence no op may synchronise the host or allocate while a capture is active
 * (gc_cuda_capturing() tells). Errors are values: GC_CUDA_TRY turns a failing
 * cudaError_t into `return gc_fail(...)` of the enclosing gc_status function,
 * nothing here exits or aborts. Storage is converted to float at the load and back
 * at the store (round to nearest even); all arithmetic is float32.
 * Implemented in backend.cu (state, stream, workspace) and per op family in
 * act.cu, pool2d.cu, loss.cu, dropout.cu, optim.cu, metrics.cu, cast.cu, gemm*.cu,
 * conv2d*.cu, elementwise.cu, norm.cu, layout.cu. */
#ifndef GPUCMP_CUDA_COMMON_CUH
#define GPUCMP_CUDA_COMMON_CUH

#include "gpucmp.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

/* ------------------------------------------------------------------ errors */

/* Evaluates a cudaError_t expression; on failure returns from the enclosing function
 * (which returns gc_status) with GC_ERR_NOMEM for an allocation failure, else
 * GC_ERR_BACKEND, and a message "file:line: expr: CUDA error text". The sticky error
 * state of the runtime is cleared (cudaGetLastError) where the error is not sticky. */
#define GC_CUDA_TRY(expr)                                                                \
    do {                                                                                 \
        cudaError_t gc_e_ = (expr);                                                      \
        if (gc_e_ != cudaSuccess) {                                                      \
            (void)cudaGetLastError();                                                    \
            return gc_fail(gc_e_ == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND, \
                           "%s:%d: %s: %s", __FILE__, __LINE__, #expr,                   \
                           cudaGetErrorString(gc_e_));                                   \
        }                                                                                \
    } while (0)

/* Number of threads per block of the elementwise kernels and a grid size that covers
 * n elements with a grid-stride loop (capped: the loop does the rest). */
#define GC_CUDA_THREADS 256
static inline unsigned gc_cuda_grid(int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    if (b > 65535LL * 8) b = 65535LL * 8;
    return (unsigned)b;
}

/* Runs the statement(s) with T bound to the storage type of float dtype `dt`
 * (float, __half, __nv_bfloat16); other dtypes run nothing (core has validated). */
#define GC_CUDA_DISPATCH_FLOAT(dt, T, ...)                       \
    switch (dt) {                                                \
    case GC_F16: { typedef __half T; __VA_ARGS__; } break;       \
    case GC_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break; \
    default: { typedef float T; __VA_ARGS__; } break;            \
    }

#ifdef __cplusplus
extern "C" {
#endif

/* cudaGetLastError() after a launch -> GC_OK or GC_ERR_BACKEND "what: error text". */
gc_status gc_cuda_launch_check(const char *what);

/* The backend's one stream (created by gc_cuda_set_device); every op launches on it. */
cudaStream_t gc_cuda_stream(const gc_backend *be);
/* Compute capability major*10+minor (90 for H100/H200, 86 for the A4000/A5000). */
int gc_cuda_cc(const gc_backend *be);
int gc_cuda_sm_count(const gc_backend *be);
/* cudaDevAttrMaxSharedMemoryPerBlockOptin in bytes, or less under the cuda.smem_limit_kb
 * knob (a smaller card's limit, planned for on this one: tests of the A4000/A5000's
 * kernel choices on an H200). */
size_t gc_cuda_smem_optin(const gc_backend *be);
/* At most this many blocks of `smem` bytes of dynamic + static shared memory per SM as
 * the knob's card would hold them (its per-SM memory: the limit + 1 KB, as sm_86's 100 KB
 * against 99 KB per block); INT_MAX without the knob (the occupancy query alone). */
int gc_cuda_smem_blocks_per_sm(const gc_backend *be, size_t smem);

/* A per-backend scratch area of at least `bytes` bytes, valid until the next call of
 * gc_cuda_workspace on the same backend (ops on the one stream are ordered, so one op
 * may use it without racing another). Grows on demand with cudaMalloc; growing while a
 * stream capture is active is refused with GC_ERR_BACKEND (size it before capturing,
 * e.g. by running the step once eagerly). Buffers a live CUDA graph may still use are
 * kept until the last graph of the backend is destroyed. */
gc_status gc_cuda_workspace(const gc_backend *be, size_t bytes, void **out);
/* A second buffer with the workspace's rules, for an op that stages its whole result
 * while the kernel it calls takes the workspace (conv2d_bwd_data's accumulate where the
 * kernel cannot add in its epilogue); valid until the next gc_cuda_staging call. */
gc_status gc_cuda_staging(const gc_backend *be, size_t bytes, void **out);
/* acc[0..n) += src[0..n) in storage type dt, as the add op does it (elementwise.cu) */
gc_status gc_cuda_add_into(const gc_backend *be, gc_dtype dt, int64_t n, void *acc, const void *src);

/* cudaSetDevice(be->device_index) and lazy creation of the stream and the small
 * per-backend device buffers; the first call of every entry point. */
gc_status gc_cuda_set_device(const gc_backend *be);

/* 1 when the backend's stream is being captured into a graph (no host syncs, no
 * allocation, no readbacks then), else 0. */
int gc_cuda_capturing(const gc_backend *be);

/* A small device buffer of 16 int32 owned by the backend, for error flags written by
 * kernels (out-of-range labels); read back only outside capture. */
int32_t *gc_cuda_err_flag(const gc_backend *be);
/* embedding.cu: the backend's graph_errors (gpucmp.h) */
gc_status gc_cuda_embedding_graph_errors(const gc_backend *be, int read);

/* A fixed per-backend device buffer of GC_CUDA_SCRATCH_BYTES bytes (256-byte
 * aligned), allocated with the stream and never resized, so it is safe inside graph
 * capture: for the partial sums of deterministic two-pass reductions (bias_grad,
 * accuracy). Ops on the one stream are ordered, so ops may share it; an op must not
 * expect its content to survive to the next op. Distinct from gc_cuda_workspace. */
#define GC_CUDA_SCRATCH_BYTES ((size_t)4 << 20)
void *gc_cuda_scratch(const gc_backend *be);

/* The fused multi-tensor optimizer step (optim.cu; the backend's optim_multi hook):
 * every slot (gpucmp.h, gc_opt_slot) of one storage dtype updated in one launch with
 * the per-tensor ops' arithmetic, bit for bit. hp: host struct, passed by value; dyn /
 * skip: device memory as for the per-tensor ops (a captured graph replays with the lr,
 * t and skip flag written there). max_n: the largest slot's n (sizes the grid). */
typedef gc_opt_slot gc_cuda_opt_slot;
gc_status gc_cuda_optim_multi(const gc_backend *be, gc_dtype dtype, const gc_opt_slot *slots_dev, int n_slots,
                              int64_t max_n, const gc_opt_hparams *hp, const float *dyn, const float *skip);
gc_status gc_cuda_optim_multi_f32(const gc_backend *be, const gc_opt_hparams *hp, const float *dyn,
                                  const float *skip, const gc_opt_slot *slots_dev, int n_slots, int64_t max_n);
/* loss_scale.cu: the backend's cast_multi (gpucmp.h) */
gc_status gc_cuda_cast_multi(const gc_backend *be, const gc_cast_slot *slots, int n_slots, int64_t max_n,
                             float scale, const float *dyn, int invert, float *bad);

/* The backend of device i registered by gc_cuda_register_all (NULL when none). */
const gc_backend *gc_cuda_backend(int device_index);
gc_status gc_cuda_register_all(void);

/* ---- op adapters, one per op of GC_OP_LIST (gemm*.cu, conv2d*.cu, act.cu, ...) */
#define GC_X_CUDA_DECL(E, n, P, ni, no) \
    gc_status gc_cuda_op_##n(const gc_backend *be, const gc_op_call *call);
GC_OP_LIST(GC_X_CUDA_DECL)
#undef GC_X_CUDA_DECL

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------ device helpers */
#ifdef __CUDACC__

/* Element i of storage p of gc_dtype `dtype` (f32, f16 or bf16) as float. */
__device__ __forceinline__ float gc_ld(const void *p, int dtype, int64_t i)
{
    if (dtype == GC_F16) return __half2float(((const __half *)p)[i]);
    if (dtype == GC_BF16) return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    return ((const float *)p)[i];
}

/* float -> f16 / bf16 with round to nearest even, NaN handled bit for bit as the CPU
 * conversions of core/dtype.c do (f16: quiet NaN 0x7E00 with the sign; bf16: the top
 * half of the float with the quiet bit set), so CPU and GPU casts agree exactly. */
__device__ __forceinline__ __half gc_f2h(float v)
{
    if (v != v) return __ushort_as_half((unsigned short)(((__float_as_uint(v) >> 16) & 0x8000u) | 0x7E00u));
    return __float2half_rn(v);
}
__device__ __forceinline__ __nv_bfloat16 gc_f2bf(float v)
{
    if (v != v) return __ushort_as_bfloat16((unsigned short)((__float_as_uint(v) >> 16) | 0x40u));
    return __float2bfloat16_rn(v);
}

/* Stores v as element i of storage p, rounding to nearest even for f16/bf16. */
__device__ __forceinline__ void gc_st(void *p, int dtype, int64_t i, float v)
{
    if (dtype == GC_F16) ((__half *)p)[i] = gc_f2h(v);
    else if (dtype == GC_BF16) ((__nv_bfloat16 *)p)[i] = gc_f2bf(v);
    else ((float *)p)[i] = v;
}

/* Typed variants for kernels templated on the storage type T (float, __half,
 * __nv_bfloat16). */
__device__ __forceinline__ float gc_to_f(float v) { return v; }
__device__ __forceinline__ float gc_to_f(__half v) { return __half2float(v); }
__device__ __forceinline__ float gc_to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T> __device__ __forceinline__ T gc_from_f(float v);
template <> __device__ __forceinline__ float gc_from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __half gc_from_f<__half>(float v) { return gc_f2h(v); }
template <> __device__ __forceinline__ __nv_bfloat16 gc_from_f<__nv_bfloat16>(float v)
{
    return gc_f2bf(v);
}

/* The counter-based hash of gpucmp.h (gc_hash32 / gc_uniform01), copied bit for bit
 * for device code (gpucmp.h's versions are host-only static inline functions); the
 * standalone test checks that CPU and GPU dropout masks are identical. */
__device__ __forceinline__ uint32_t gc_hash32_dev(uint64_t seed, uint64_t i)
{
    uint64_t z = seed ^ (i * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}
__device__ __forceinline__ float gc_uniform01_dev(uint64_t seed, uint64_t i)
{
    return (float)(gc_hash32_dev(seed, i) >> 8) * (1.0f / 16777216.0f);
}

/* Warp-level sum / max (all 32 lanes participate). */
__device__ __forceinline__ float gc_warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float gc_warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}


/* ------------------------------------------------------------------ elementwise maps
 * gc_map_launch runs f over n elements of NI inputs and NO outputs of one storage type
 * T: each thread loads 8 consecutive elements of every operand with 16/32-byte vector
 * accesses when all pointers are aligned to 8 * sizeof(T) (scalar accesses otherwise),
 * converts them to float, calls f(i, in, out) per element and stores the outputs
 * rounded to T. f is a functor `__device__ void operator()(int64_t i, const float *in,
 * float *out) const`. An output may alias an input (in-place updates): each element is
 * read and written by the same thread, reads first. */
template <typename T, int N> struct alignas(sizeof(T) * N) gc_pack { T v[N]; };

template <typename T, int NI, int NO> struct gc_map_ptrs {
    const T *in[NI];
    T *out[NO];
};

#define GC_MAP_VEC 8

template <typename T, int NI, int NO, typename F>
__global__ void __launch_bounds__(GC_CUDA_THREADS)
gc_map_kernel(int64_t n, gc_map_ptrs<T, NI, NO> p, F f, int vec)
{
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int64_t done = 0;
    if (vec) {
        typedef gc_pack<T, GC_MAP_VEC> P;
        const int64_t nv = n / GC_MAP_VEC;
        for (int64_t v = tid; v < nv; v += stride) {
            P a[NI], o[NO];
#pragma unroll
            for (int k = 0; k < NI; k++) a[k] = ((const P *)p.in[k])[v];
#pragma unroll
            for (int j = 0; j < GC_MAP_VEC; j++) {
                float x[NI], y[NO];
#pragma unroll
                for (int k = 0; k < NI; k++) x[k] = gc_to_f(a[k].v[j]);
                f(v * GC_MAP_VEC + j, x, y);
#pragma unroll
                for (int k = 0; k < NO; k++) o[k].v[j] = gc_from_f<T>(y[k]);
            }
#pragma unroll
            for (int k = 0; k < NO; k++) ((P *)p.out[k])[v] = o[k];
        }
        done = nv * GC_MAP_VEC;
    }
    for (int64_t i = done + tid; i < n; i += stride) {
        float x[NI], y[NO];
#pragma unroll
        for (int k = 0; k < NI; k++) x[k] = gc_to_f(p.in[k][i]);
        f(i, x, y);
#pragma unroll
        for (int k = 0; k < NO; k++) p.out[k][i] = gc_from_f<T>(y[k]);
    }
}

/* Grid for n elements handled 8 at a time, capped at 32 blocks per SM (the kernels
 * loop over the rest). */
static inline unsigned gc_cuda_map_grid(const gc_backend *be, int64_t n)
{
    int64_t items = (n + GC_MAP_VEC - 1) / GC_MAP_VEC;
    int64_t b = (items + GC_CUDA_THREADS - 1) / GC_CUDA_THREADS;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    return (unsigned)b;
}

template <typename T, int NI, int NO, typename F>
static gc_status gc_map_launch(const gc_backend *be, int64_t n, const void *const *in,
                               void *const *out, F f, const char *what)
{
    if (n <= 0) return GC_OK;
    gc_map_ptrs<T, NI, NO> p;
    uintptr_t bits = 0;
    for (int k = 0; k < NI; k++) {
        p.in[k] = (const T *)in[k];
        bits |= (uintptr_t)in[k];
    }
    for (int k = 0; k < NO; k++) {
        p.out[k] = (T *)out[k];
        bits |= (uintptr_t)out[k];
    }
    int vec = (bits % (sizeof(T) * GC_MAP_VEC)) == 0;
    gc_map_kernel<T, NI, NO, F><<<gc_cuda_map_grid(be, n), GC_CUDA_THREADS, 0, gc_cuda_stream(be)>>>(n, p, f, vec);
    return gc_cuda_launch_check(what);
}

/* ------------------------------------------------------------------ row reductions
 * Row-wise ops (softmax, losses, accuracy) give each row TPR threads: a warp
 * (TPR == 32, 8 rows per 256-thread block) for rows up to GC_ROW_WARP_MAX_COLS, the whole
 * block (TPR == 256) above. gc_row_reduce combines the TPR values of a row in a fixed
 * order (deterministic) and returns the result to every thread of the row; with
 * TPR == 256 it synchronises the block, so every thread must call it. smem holds 8
 * values of V. */
#define GC_ROW_WARP_MAX_COLS 1024

struct gc_op_sum {
    template <typename V> __device__ __forceinline__ V operator()(V a, V b) const { return a + b; }
};
struct gc_op_max { /* NaN-propagating: a NaN anywhere in the row wins */
    __device__ __forceinline__ float operator()(float a, float b) const
    {
        return (a != a || a > b) ? a : b;
    }
};

template <int TPR, typename V, typename Op>
__device__ __forceinline__ V gc_row_reduce(V v, Op op, V *smem)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (TPR == 32) return v;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    V r = smem[0];
#pragma unroll
    for (int w = 1; w < TPR / 32; w++) r = op(r, smem[w]);
    __syncthreads(); /* smem may be reused by the next reduction */
    return r;
}

#endif /* __CUDACC__ */

#endif /* GPUCMP_CUDA_COMMON_CUH */
