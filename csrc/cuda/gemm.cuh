/* gemm.cuh -- what the CUDA GEMM files share (internal; not part of the C API).
 *
 * The one GEMM of the CUDA backend: C[M,N] = act(alpha * op(A) @ op(B) + beta * C
 * + bias[N]), row-major storage, all of A, B, C and bias of one float dtype (f32, f16,
 * bf16), fp32 accumulation everywhere. It is the contract of cpu/cpu_kernels.h
 * (gc_sgemm_args) with explicit leading dimensions so that other CUDA ops (conv2d
 * through im2col, RNN cells) can call gc_cuda_gemm on sub-matrices:
 *   op(A) is A (M x K, row stride lda) or, when trans_a, A^T with A stored K x M;
 *   op(B) is B (K x N, ldb) or, when trans_b, B^T with B stored N x K;
 *   beta == 0 never reads C (it may hold NaN); bias may be NULL; K == 0 gives
 *   act(beta * C + bias); act is elementwise (linear, relu, tanh, sigmoid).
 *
 * Files and paths (gemm.cu dispatches):
 *   gemm_simt.cu   exact float32 on the CUDA cores (the readable reference; the f32 path
 *                  when TF32 is off)
 *   gemm_small.cu  small products (few 128 x 128 tiles): 32 x 32 tiles + split K, fp32
 *                  FMA from any storage dtype, so that they spread over the SMs
 *   gemm_mma.cu    Tensor Cores through mma.sync (sm_80+): f16/bf16 m16n8k16, tf32 m16n8k8;
 *                  cp.async multi-stage pipeline; every layout, size and alignment
 *   gemm_wgmma.cu  Hopper (sm_90a): TMA + mbarrier pipeline + wgmma, warp-specialised,
 *                  persistent; big problems
 *   gemm_vendor.cu cuBLASLt through dlopen (impl = vendor), the baseline
 * The epilogue (alpha, beta*C, bias, act, rounding to C's dtype) is the same inline
 * code for every own kernel (gc_gemm_epi below), so the paths differ only in how the
 * fp32 sums are formed.
 */
#ifndef GPUCMP_CUDA_GEMM_CUH
#define GPUCMP_CUDA_GEMM_CUH

#include "common.cuh"
#include "gpucmp_variants.h"

typedef struct {
    int dtype;          /* gc_dtype of A, B, C and bias: GC_F32, GC_F16 or GC_BF16 */
    int trans_a, trans_b;
    int64_t M, N, K;
    const void *A; int64_t lda;
    const void *B; int64_t ldb;
    void *C; int64_t ldc;
    const void *bias;   /* N values or NULL */
    float alpha, beta;
    int act;            /* gc_act, elementwise only */
    int impl;           /* gc_impl: own kernels or the vendor library */
} gc_gemm_desc;

#ifdef __cplusplus
extern "C" {
#endif

/* The GEMM entry for other CUDA ops: checks the descriptor (dtype, leading dimensions),
 * picks the path (impl, dtype, gc_get_allow_tf32(), device, size, alignment) and
 * launches on gc_cuda_stream(be); no host sync, no allocation beyond gc_cuda_workspace. */
gc_status gc_cuda_gemm(const gc_backend *be, const gc_gemm_desc *d);

/* The path is the variant point cuda.gemm.path (gpucmp_variants.h): forced there
 * ("simt" f32 only, "mma", "wgmma" sm_90a only, "small" any size; a forced path that
 * cannot run a call gives that call's error status), and the path the calling thread's
 * last gc_cuda_gemm took is its `last` ("simt", "mma", "wgmma", "small", "vendor",
 * "epilogue" (K == 0), "none").
 * TF32 on the wgmma path: the tensor cores read fp32 operands from shared memory and
 * truncate them to TF32 (about 1e-3 relative error, biased); with rounding on
 * (default 1) the operands are first rounded to nearest TF32 in a copy (with the
 * transpose that path needs anyway), which costs one pass over A and B and brings the
 * error to ~3e-4, what mma.sync (cvt.rna in registers) and the DESIGN tolerance give. */
void gc_cuda_gemm_set_tf32_round(int on);
/* The switch above (1 by default). The TF32 convolutions on the same kernel
 * (conv2d_wgmma_igemm.cu) follow it for their weight operand (rounded copies when on;
 * their activation operand is always read as stored, i.e. truncated). */
int gc_cuda_gemm_get_tf32_round(void);

/* ---- internal: one per path file, called by gc_cuda_gemm with a checked descriptor
 * (M, N, K >= 1). */
gc_status gc_cuda_gemm_simt(const gc_backend *be, const gc_gemm_desc *d);
gc_status gc_cuda_gemm_mma(const gc_backend *be, const gc_gemm_desc *d, int tf32);
/* fp32 FMA for every dtype (exact f32, so valid with TF32 on or off) */
gc_status gc_cuda_gemm_small(const gc_backend *be, const gc_gemm_desc *d);
/* 1 when this binary holds sm_90a code for the running device (probe kernel). */
int gc_cuda_gemm_wgmma_compiled(const gc_backend *be);
/* Runs when the layout / alignment is one it takes directly (see gemm_wgmma.cu);
 * GC_ERR_UNSUPPORTED (no message) when not, and the caller takes another path. */
gc_status gc_cuda_gemm_wgmma(const gc_backend *be, const gc_gemm_desc *d);
/* Clusters of 2 blocks the wgmma kernel runs at once on this device (its persistent
 * grid); 0 before the first wgmma launch. For benchmarks and bug reports. */
int gc_cuda_gemm_wgmma_clusters(const gc_backend *be);
/* Diagnostic: 0 makes each block of a wgmma cluster load all of B itself instead of
 * sharing it by multicast (default 1), to measure what the multicast buys. */
void gc_cuda_gemm_set_wgmma_multicast(int on);
gc_status gc_cuda_gemm_vendor(const gc_backend *be, const gc_gemm_desc *d);

/* Helpers in gemm.cu shared by the paths. */
/* C = act(beta * C + bias) over M x N (the K == 0 case; vendor's tanh/sigmoid with
 * beta = 1 and no bias: act in place). */
gc_status gc_cuda_gemm_epilogue_only(const gc_backend *be, const gc_gemm_desc *d, float beta,
                                     const void *bias);
/* dst[c, r] = src[r, c] (rows x cols, leading dims ld_src / ld_dst), same dtype; with
 * round_tf32 (f32 only) each value is rounded to nearest TF32 on the way. Any
 * alignment. */
gc_status gc_cuda_gemm_transpose(const gc_backend *be, int dtype, int64_t rows, int64_t cols,
                                 const void *src, int64_t ld_src, void *dst, int64_t ld_dst,
                                 int round_tf32);
/* Split K for problems with few output tiles and a long K (weight gradients: M x N the
 * size of a layer's kernel, K = batch x pixels) and for small latency-bound ones: how
 * many K ranges (1 = none) so that about ctas_per_sm blocks of tile_m x tile_n run per
 * SM, each range a multiple of 64 and at least min_len long; *kps receives the length. The partial sums (fp32,
 * splits x M x N in the workspace) are added in a fixed order by
 * gc_cuda_gemm_splitk_reduce, which then runs the epilogue: deterministic. */
int gc_cuda_gemm_splits(const gc_backend *be, const gc_gemm_desc *d, int tile_m, int tile_n,
                        int ctas_per_sm, int min_len, int *kps);
gc_status gc_cuda_gemm_splitk_reduce(const gc_backend *be, const gc_gemm_desc *d,
                                     const float *partial, int splits);
/* dst = src (rows x cols, f32) rounded to nearest TF32, any leading dims. */
gc_status gc_cuda_gemm_round_tf32(const gc_backend *be, int64_t rows, int64_t cols,
                                  const float *src, int64_t ld_src, float *dst, int64_t ld_dst);

#ifdef __cplusplus
}
#endif

/* ------------------------------------------------------------------ device side */
#ifdef __CUDACC__

__device__ __forceinline__ float gc_gemm_act(int act, float v)
{
    /* the formulas of cpu/act.c and cuda/act.cu: relu keeps NaN, sigmoid from
     * e = exp(-|x|) so it never overflows */
    switch (act) {
    case GC_ACT_RELU: return v < 0.0f ? 0.0f : v;
    case GC_ACT_TANH: return tanhf(v);
    case GC_ACT_SIGMOID: {
        const float e = expf(-fabsf(v)), s = 1.0f / (1.0f + e);
        return v < 0.0f ? e * s : s;
    }
    default: return v;
    }
}

/* Epilogue parameters, passed by value to every kernel. */
typedef struct {
    void *C;
    int64_t ldc;
    const void *bias;
    float alpha, beta;
    int act;
    int M, N;
    int vec2; /* C + r*ldc + c is 2-element aligned for every even c */
} gc_gemm_epi_args;

/* Two horizontally adjacent results (row r, columns c and c+1) through the epilogue
 * and out to C in storage type T. r < M is the caller's check; c+1 may be >= N. */
template <typename T>
__device__ __forceinline__ void gc_gemm_epi2(const gc_gemm_epi_args &e, int r, int c, float v0,
                                             float v1)
{
    if (c >= e.N) return;
    T *row = (T *)e.C + (int64_t)r * e.ldc;
    const T *bias = (const T *)e.bias;
    const bool two = c + 1 < e.N;
    v0 *= e.alpha;
    v1 *= e.alpha;
    if (e.vec2 && two) {
        if (sizeof(T) == 4) {
            float2 *p = (float2 *)(row + c);
            if (e.beta != 0.0f) {
                float2 o = *p;
                v0 += e.beta * o.x;
                v1 += e.beta * o.y;
            }
            if (bias) { v0 += gc_to_f(bias[c]); v1 += gc_to_f(bias[c + 1]); }
            *p = make_float2(gc_gemm_act(e.act, v0), gc_gemm_act(e.act, v1));
        } else {
            struct alignas(2 * sizeof(T)) P2 { T x, y; };
            P2 *p = (P2 *)(row + c);
            if (e.beta != 0.0f) {
                P2 o = *p;
                v0 += e.beta * gc_to_f(o.x);
                v1 += e.beta * gc_to_f(o.y);
            }
            if (bias) { v0 += gc_to_f(bias[c]); v1 += gc_to_f(bias[c + 1]); }
            P2 o;
            o.x = gc_from_f<T>(gc_gemm_act(e.act, v0));
            o.y = gc_from_f<T>(gc_gemm_act(e.act, v1));
            *p = o;
        }
        return;
    }
    if (e.beta != 0.0f) v0 += e.beta * gc_to_f(row[c]);
    if (bias) v0 += gc_to_f(bias[c]);
    row[c] = gc_from_f<T>(gc_gemm_act(e.act, v0));
    if (two) {
        if (e.beta != 0.0f) v1 += e.beta * gc_to_f(row[c + 1]);
        if (bias) v1 += gc_to_f(bias[c + 1]);
        row[c + 1] = gc_from_f<T>(gc_gemm_act(e.act, v1));
    }
}

/* Two adjacent values stored as they are (2-element aligned p): the epilogue's fast
 * path for alpha = 1, beta = 0, no bias, linear. */
template <typename T> __device__ __forceinline__ void gc_gemm_store2(T *p, float v0, float v1)
{
    if (sizeof(T) == 4) {
        *(float2 *)p = make_float2(v0, v1);
    } else {
        struct alignas(2 * sizeof(T)) P2 { T x, y; };
        P2 o;
        o.x = gc_from_f<T>(v0);
        o.y = gc_from_f<T>(v1);
        *(P2 *)p = o;
    }
}

/* v0, v1 += the two adjacent values at p (2-element aligned), read in storage type T */
template <typename T> __device__ __forceinline__ void gc_gemm_add2(const T *p, float &v0, float &v1)
{
    if (sizeof(T) == 4) {
        const float2 o = *(const float2 *)p;
        v0 += o.x;
        v1 += o.y;
    } else {
        struct alignas(2 * sizeof(T)) P2 { T x, y; };
        const P2 o = *(const P2 *)p;
        v0 += gc_to_f(o.x);
        v1 += gc_to_f(o.y);
    }
}

/* Two raw sums into a dense fp32 partial-sum matrix (row pitch N). */
__device__ __forceinline__ void gc_gemm_part2(float *P, int N, int r, int c, float v0, float v1)
{
    if (c >= N) return;
    float *p = P + (int64_t)r * N + c;
    p[0] = v0;
    if (c + 1 < N) p[1] = v1;
}

/* One result through the epilogue. */
template <typename T>
__device__ __forceinline__ void gc_gemm_epi1(const gc_gemm_epi_args &e, int r, int c, float v)
{
    T *p = (T *)e.C + (int64_t)r * e.ldc + c;
    v *= e.alpha;
    if (e.beta != 0.0f) v += e.beta * gc_to_f(*p);
    if (e.bias) v += gc_to_f(((const T *)e.bias)[c]);
    *p = gc_from_f<T>(gc_gemm_act(e.act, v));
}

#endif /* __CUDACC__ */

/* Host: the epilogue arguments of a descriptor. */
static inline gc_gemm_epi_args gc_gemm_epi_of(const gc_gemm_desc *d)
{
    gc_gemm_epi_args e;
    e.C = d->C;
    e.ldc = d->ldc;
    e.bias = d->bias;
    e.alpha = d->alpha;
    e.beta = d->beta;
    e.act = d->act;
    e.M = (int)d->M;
    e.N = (int)d->N;
    const size_t es = gc_dtype_size((gc_dtype)d->dtype);
    e.vec2 = (d->ldc % 2 == 0) && ((uintptr_t)d->C % (2 * es) == 0);
    return e;
}

#endif
