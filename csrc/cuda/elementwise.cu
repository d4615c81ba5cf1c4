/* elementwise.cu -- add and mul on CUDA, f32/f16/bf16 storage, float32 arithmetic.
 *
 * add sums its 2..8 present operands in input order, ((x0 + x1) + x2) ..., as
 * csrc/cpu/elementwise.c does, so both backends round the same way; the number of
 * operands is a template argument (one instantiation per count) so the sum unrolls.
 * add is the plan's gradient accumulation (acc = acc + g at every fan-out, on
 * activation-sized tensors), so it is built to stream at the memory bandwidth:
 * ew_kernel moves 16-byte packs (4 f32 / 8 f16 or bf16) and each thread issues the loads
 * of U packs of every operand before it computes and stores any of them (U = 4 for two
 * operands, fewer for more, <= 128 bytes of loads in flight per thread and no register
 * spills); consecutive threads take consecutive packs, so every access is coalesced.
 * Pointers not all 16-byte aligned take the scalar loop (as does the tail of < 1 pack).
 * The output may alias any input exactly (in-place accumulation, out = x0): each
 * element is read and then written by the one thread that owns it, and a thread's loads
 * of a step come before its stores (the pointers are not __restrict__, so neither the
 * compiler nor the non-coherent load path may assume otherwise). Partial overlaps are
 * not supported. Launches go to the backend's stream; no host syncs. */
#include "common.cuh"

template <int NI> struct add_f {
    int relu;
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const
    {
        float s = x[0];
#pragma unroll
        for (int k = 1; k < NI; k++) s += x[k];
        y[0] = (relu && s < 0.0f) ? 0.0f : s; /* relu keeps NaN */
    }
};

struct mul_f {
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const { y[0] = x[0] * x[1]; }
};

/* packs per thread per step for NI operands: <= 8 * 16 bytes of loads in flight */
template <int NI> struct ew_unroll {
    static constexpr int U = NI <= 2 ? 4 : NI <= 4 ? 2 : 1;
};

/* A 16-byte pack (uint4) <-> its 16 / sizeof(T) elements as float, with the conversions
 * of gc_to_f / gc_from_f (bf16 -> float is exact: the bits shifted into the top half).
 * Working on the 32-bit words keeps two 16-bit elements per register (a struct of eight
 * 16-bit elements gets split into eight registers and doubles the register count). */
template <typename T> struct ew_pack;
template <> struct ew_pack<float> {
    static __device__ __forceinline__ void load(const uint4 &w, float *f)
    {
        f[0] = __uint_as_float(w.x), f[1] = __uint_as_float(w.y), f[2] = __uint_as_float(w.z), f[3] = __uint_as_float(w.w);
    }
    static __device__ __forceinline__ uint4 store(const float *f)
    {
        return make_uint4(__float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    }
};
template <> struct ew_pack<__nv_bfloat16> {
    static __device__ __forceinline__ void two(uint32_t w, float *f)
    {
        f[0] = __uint_as_float(w << 16);
        f[1] = __uint_as_float(w & 0xFFFF0000u);
    }
    static __device__ __forceinline__ uint32_t word(const float *f)
    {
        return (uint32_t)__bfloat16_as_ushort(gc_f2bf(f[0])) | ((uint32_t)__bfloat16_as_ushort(gc_f2bf(f[1])) << 16);
    }
    static __device__ __forceinline__ void load(const uint4 &w, float *f) { two(w.x, f), two(w.y, f + 2), two(w.z, f + 4), two(w.w, f + 6); }
    static __device__ __forceinline__ uint4 store(const float *f) { return make_uint4(word(f), word(f + 2), word(f + 4), word(f + 6)); }
};
template <> struct ew_pack<__half> {
    static __device__ __forceinline__ void two(uint32_t w, float *f)
    {
        f[0] = __half2float(__ushort_as_half((unsigned short)(w & 0xFFFFu)));
        f[1] = __half2float(__ushort_as_half((unsigned short)(w >> 16)));
    }
    static __device__ __forceinline__ uint32_t word(const float *f)
    {
        return (uint32_t)__half_as_ushort(gc_f2h(f[0])) | ((uint32_t)__half_as_ushort(gc_f2h(f[1])) << 16);
    }
    static __device__ __forceinline__ void load(const uint4 &w, float *f) { two(w.x, f), two(w.y, f + 2), two(w.z, f + 4), two(w.w, f + 6); }
    static __device__ __forceinline__ uint4 store(const float *f) { return make_uint4(word(f), word(f + 2), word(f + 4), word(f + 6)); }
};

/* One step of ew_kernel's vector loop: packs base, base + 256, ... (U of them) of every
 * operand loaded, then combined and stored. GUARD: some of them may lie past nv. */
template <typename T, int NI, typename F, int U, bool GUARD>
__device__ __forceinline__ void ew_step(const gc_map_ptrs<T, NI, 1> &p, const F &f, int64_t base, int64_t nv)
{
    constexpr int V = 16 / sizeof(T);
    uint4 a[U][NI];
#pragma unroll
    for (int u = 0; u < U; u++)
        if (!GUARD || base + u * GC_CUDA_THREADS < nv) {
#pragma unroll
            for (int k = 0; k < NI; k++) a[u][k] = ((const uint4 *)p.in[k])[base + u * GC_CUDA_THREADS];
        }
#pragma unroll
    for (int u = 0; u < U; u++)
        if (!GUARD || base + u * GC_CUDA_THREADS < nv) {
            const int64_t q = base + u * GC_CUDA_THREADS;
            float x[NI][V], y[V];
#pragma unroll
            for (int k = 0; k < NI; k++) ew_pack<T>::load(a[u][k], x[k]);
#pragma unroll
            for (int j = 0; j < V; j++) {
                float xj[NI];
#pragma unroll
                for (int k = 0; k < NI; k++) xj[k] = x[k][j];
                f(q * V + j, xj, y + j);
            }
            ((uint4 *)p.out[0])[q] = ew_pack<T>::store(y);
        }
}

/* y = f(x0, ..., x{NI-1}) over n elements; vec: every pointer 16-byte aligned. */
template <typename T, int NI, typename F>
__global__ void __launch_bounds__(GC_CUDA_THREADS) ew_kernel(int64_t n, gc_map_ptrs<T, NI, 1> p, F f, int vec)
{
    constexpr int V = 16 / sizeof(T), U = ew_unroll<NI>::U;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (!vec) {
        for (int64_t i = tid; i < n; i += (int64_t)gridDim.x * blockDim.x) {
            float x[NI], y[1];
#pragma unroll
            for (int k = 0; k < NI; k++) x[k] = gc_to_f(p.in[k][i]);
            f(i, x, y);
            p.out[0][i] = gc_from_f<T>(y[0]);
        }
        return;
    }
    const int64_t nv = n / V, step = (int64_t)gridDim.x * (GC_CUDA_THREADS * U);
    int64_t base = (int64_t)blockIdx.x * (GC_CUDA_THREADS * U) + threadIdx.x;
    for (; base + (U - 1) * GC_CUDA_THREADS < nv; base += step) ew_step<T, NI, F, U, false>(p, f, base, nv);
    if (base < nv) ew_step<T, NI, F, U, true>(p, f, base, nv); /* the last, partial step */
    /* the last n % V elements: the first threads of block 0 */
    const int64_t i = nv * V + tid;
    if (i < n) {
        float x[NI], y[1];
#pragma unroll
        for (int k = 0; k < NI; k++) x[k] = gc_to_f(p.in[k][i]);
        f(i, x, y);
        p.out[0][i] = gc_from_f<T>(y[0]);
    }
}

template <typename T, int NI, typename F>
static gc_status ew_launch(const gc_backend *be, int64_t n, const void *const *in, void *out, F f,
                           const char *what)
{
    if (n <= 0) return GC_OK;
    gc_map_ptrs<T, NI, 1> p;
    uintptr_t bits = (uintptr_t)out;
    for (int k = 0; k < NI; k++) {
        p.in[k] = (const T *)in[k];
        bits |= (uintptr_t)in[k];
    }
    p.out[0] = (T *)out;
    const int vec = bits % 16 == 0;
    /* one thread per U packs (vector path) or per element, at most 32 blocks per SM (the
     * loops do the rest) */
    const int64_t per_block = vec ? (int64_t)GC_CUDA_THREADS * ew_unroll<NI>::U * (16 / sizeof(T)) : GC_CUDA_THREADS;
    int64_t blocks = (n + per_block - 1) / per_block;
    const int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (blocks > cap) blocks = cap;
    if (blocks < 1) blocks = 1;
    ew_kernel<T, NI, F><<<(unsigned)blocks, GC_CUDA_THREADS, 0, gc_cuda_stream(be)>>>(n, p, f, vec);
    return gc_cuda_launch_check(what);
}

template <typename T>
static gc_status add_launch(const gc_backend *be, int n_in, int64_t n, const void *const *in, void *out, int relu)
{
    switch (n_in) {
    case 2: return ew_launch<T, 2>(be, n, in, out, add_f<2>{relu}, "add");
    case 3: return ew_launch<T, 3>(be, n, in, out, add_f<3>{relu}, "add");
    case 4: return ew_launch<T, 4>(be, n, in, out, add_f<4>{relu}, "add");
    case 5: return ew_launch<T, 5>(be, n, in, out, add_f<5>{relu}, "add");
    case 6: return ew_launch<T, 6>(be, n, in, out, add_f<6>{relu}, "add");
    case 7: return ew_launch<T, 7>(be, n, in, out, add_f<7>{relu}, "add");
    case 8: return ew_launch<T, 8>(be, n, in, out, add_f<8>{relu}, "add");
    default: return gc_fail(GC_ERR_INVALID_ARG, "add: %d operands (2 to 8)", n_in);
    }
}

extern "C" gc_status gc_cuda_op_add(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_act_params *p = (const gc_act_params *)call->params;
    const void *in[GC_MAX_OP_IN];
    int n_in = 0;
    for (int k = 0; k < GC_MAX_OP_IN; k++)
        if (call->in[k] && call->in[k]->data) in[n_in++] = call->in[k]->data;
    const int64_t n = gc_tensor_numel(call->in[0]);
    const int relu = p->act == GC_ACT_RELU;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = add_launch<T>(be, n_in, n, in, call->out[0]->data, relu));
    return st;
}

extern "C" gc_status gc_cuda_add_into(const gc_backend *be, gc_dtype dt, int64_t n, void *acc, const void *src)
{
    const void *in[2] = {acc, src};
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(dt, T, st = add_launch<T>(be, 2, n, in, acc, 0));
    return st;
}

extern "C" gc_status gc_cuda_op_mul(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const void *in[2] = {call->in[0]->data, call->in[1]->data};
    const int64_t n = gc_tensor_numel(call->in[0]);
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = (ew_launch<T, 2>(be, n, in, call->out[0]->data, mul_f(), "mul")));
    return st;
}
