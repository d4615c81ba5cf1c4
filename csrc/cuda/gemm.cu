/* gemm.cu -- the CUDA backend's gemm op: adapter, path choice and small helpers.
 *
 * What it provides: gc_cuda_op_gemm (the op-table slot), gc_cuda_gemm (the same GEMM on
 * raw pointers and leading dimensions, for other CUDA ops) and the helper kernels the
 * paths share: the K == 0 epilogue, the split-K reduction, a tiled transpose and a TF32
 * rounding copy. The path is the variant point cuda.gemm.path (gpucmp_variants.h):
 * forced there for tests and benchmarks, recorded there as the calling thread's `last`.
 *
 * Path choice when not forced (first match):
 *   impl == vendor                     -> cuBLASLt (gemm_vendor.cu), loaded at run time
 *   K == 0                             -> act(beta * C + bias), no multiply
 *   small (small_worth_it)             -> 32 x 32 tiles + split K, fp32 FMA (gemm_small.cu),
 *                                         f32 (exact, TF32 on or off), f16, bf16
 *   f32 and TF32 not allowed           -> exact SIMT fp32 (gemm_simt.cu)
 *   sm_90a code for this device and a
 *   big enough problem                 -> wgmma + TMA (gemm_wgmma.cu)
 *   otherwise                          -> mma.sync Tensor Cores (gemm_mma.cu), f32 as TF32
 * "Big enough" (wgmma_worth_it): M*N*K >= 2^27, M, N >= 128, K >= 256, at least half of
 * the 128 x 256 tiles' area real output and tiles for at least a quarter of the SMs:
 * below that the big tile leaves most of the chip idle, its set-up (tensor maps, a copy
 * of a misaligned or transposed operand) is not paid back, and the mma.sync kernel's
 * 128 x 128 tiles with split K win. The SIMT and mma.sync paths split K themselves
 * when there are few output tiles (gc_cuda_gemm_splits: weight gradients, small
 * latency-bound products), adding the fp32 partial sums in a fixed order.
 * "Small" (small_worth_it): M*N*K <= 2^24 and the 128 x 128 tiles times the split the
 * SIMT / mma.sync path would choose give fewer than half as many blocks as SMs (the
 * Dense layers of the seed CNN: 1-5 blocks, 20-30 us each on an H200); there most SMs
 * idle while a few pull the operands, and 32 x 32 tiles with their own split spread
 * the same work over about one block per SM.
 */
#include "gemm.cuh"

#include <string.h>

/* ------------------------------------------------------------------ helper kernels */

/* C = act(beta * C + bias); beta == 0 does not read C. */
template <typename T>
__global__ void gc_gemm_epi_only_kernel(int64_t M, int64_t N, T *C, int64_t ldc, float beta,
                                        const T *bias, int act)
{
    const int64_t total = M * N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        const int64_t r = i / N, c = i % N;
        T *p = C + r * ldc + c;
        float v = beta != 0.0f ? beta * gc_to_f(*p) : 0.0f;
        if (bias) v += gc_to_f(bias[c]);
        *p = gc_from_f<T>(gc_gemm_act(act, v));
    }
}

/* dst[c][r] = src[r][c] through a 32 x 33 shared tile; U is the raw storage word. */
template <typename U>
__global__ void gc_gemm_transpose_kernel(int64_t rows, int64_t cols, const U *src, int64_t lds,
                                         U *dst, int64_t ldd, int round_tf32)
{
    __shared__ U tile[32][33];
    const int64_t tiles_r = (rows + 31) / 32;
    const int64_t c0 = (int64_t)blockIdx.x * 32;
    for (int64_t tr = blockIdx.y; tr < tiles_r; tr += gridDim.y) {
        const int64_t r0 = tr * 32;
        for (int j = threadIdx.y; j < 32; j += blockDim.y) {
            const int64_t r = r0 + j, c = c0 + threadIdx.x;
            U v = 0;
            if (r < rows && c < cols) v = src[r * lds + c];
            if (sizeof(U) == 4 && round_tf32) {
                uint32_t o;
                asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(o) : "f"(__uint_as_float((uint32_t)v)));
                v = (U)o;
            }
            tile[j][threadIdx.x] = v;
        }
        __syncthreads();
        for (int j = threadIdx.y; j < 32; j += blockDim.y) {
            const int64_t c = c0 + j, r = r0 + threadIdx.x;
            if (c < cols && r < rows) dst[c * ldd + r] = tile[threadIdx.x][j];
        }
        __syncthreads();
    }
}

/* dst = src rounded to nearest TF32; block rows of the grid walk rows, threads columns */
__global__ void gc_gemm_round_tf32_kernel(int64_t rows, int64_t cols, const float *src,
                                          int64_t lds, float *dst, int64_t ldd)
{
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
        for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < cols;
             c += (int64_t)gridDim.x * blockDim.x) {
            uint32_t o;
            asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(o) : "f"(src[r * lds + c]));
            dst[r * ldd + c] = __uint_as_float(o);
        }
}

static unsigned grid_for(const gc_backend *be, int64_t n)
{
    int64_t b = (n + 255) / 256, cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 16;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

extern "C" gc_status gc_cuda_gemm_epilogue_only(const gc_backend *be, const gc_gemm_desc *d,
                                                float beta, const void *bias)
{
    const int64_t n = d->M * d->N;
    if (n == 0) return GC_OK;
    GC_CUDA_DISPATCH_FLOAT(d->dtype, T,
        gc_gemm_epi_only_kernel<T><<<grid_for(be, n), 256, 0, gc_cuda_stream(be)>>>(
            d->M, d->N, (T *)d->C, d->ldc, beta, (const T *)bias, d->act));
    return gc_cuda_launch_check("gemm (epilogue)");
}

extern "C" gc_status gc_cuda_gemm_transpose(const gc_backend *be, int dtype, int64_t rows,
                                            int64_t cols, const void *src, int64_t ld_src,
                                            void *dst, int64_t ld_dst, int round_tf32)
{
    if (rows == 0 || cols == 0) return GC_OK;
    const int64_t gx = (cols + 31) / 32, gy = (rows + 31) / 32;
    if (gx > 0x7fffffffLL) return gc_fail(GC_ERR_UNSUPPORTED, "gemm: transpose too wide");
    dim3 grid((unsigned)gx, (unsigned)(gy < 65535 ? gy : 65535)), block(32, 8);
    if (gc_dtype_size((gc_dtype)dtype) == 4)
        gc_gemm_transpose_kernel<uint32_t><<<grid, block, 0, gc_cuda_stream(be)>>>(
            rows, cols, (const uint32_t *)src, ld_src, (uint32_t *)dst, ld_dst, round_tf32);
    else
        gc_gemm_transpose_kernel<uint16_t><<<grid, block, 0, gc_cuda_stream(be)>>>(
            rows, cols, (const uint16_t *)src, ld_src, (uint16_t *)dst, ld_dst, 0);
    return gc_cuda_launch_check("gemm (transpose)");
}

extern "C" gc_status gc_cuda_gemm_round_tf32(const gc_backend *be, int64_t rows, int64_t cols,
                                             const float *src, int64_t ld_src, float *dst,
                                             int64_t ld_dst)
{
    const int64_t n = rows * cols;
    if (n == 0) return GC_OK;
    const int64_t gx = (cols + 255) / 256;
    dim3 grid((unsigned)(gx < 64 ? gx : 64), (unsigned)(rows < 65535 ? rows : 65535));
    gc_gemm_round_tf32_kernel<<<grid, 256, 0, gc_cuda_stream(be)>>>(rows, cols, src, ld_src, dst, ld_dst);
    return gc_cuda_launch_check("gemm (tf32 rounding)");
}

/* sum over the splits in order, then the epilogue */
template <typename T>
__global__ void gc_gemm_splitk_kernel(int64_t M, int64_t N, int splits, const float *P,
                                      gc_gemm_epi_args e)
{
    const int64_t total = M * N, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += stride) {
        float v = 0.0f;
        for (int s = 0; s < splits; s++) v += P[s * total + i];
        gc_gemm_epi1<T>(e, (int)(i / N), (int)(i % N), v);
    }
}

extern "C" int gc_cuda_gemm_splits(const gc_backend *be, const gc_gemm_desc *d, int tile_m,
                                   int tile_n, int ctas_per_sm, int min_len, int *kps)
{
    *kps = (int)d->K;
    const int64_t tiles = ((d->M + tile_m - 1) / tile_m) * ((d->N + tile_n - 1) / tile_n);
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    const int64_t target = (int64_t)sms * ctas_per_sm;
    if (d->K < 2 * min_len || tiles * 2 > target) return 1;
    int64_t s = target / tiles;
    if (s > d->K / min_len) s = d->K / min_len;
    if (s > 64) s = 64;
    if (s < 2) return 1;
    const int64_t len = ((d->K + s - 1) / s + 63) / 64 * 64;
    *kps = (int)len;
    return (int)((d->K + len - 1) / len);
}

extern "C" gc_status gc_cuda_gemm_splitk_reduce(const gc_backend *be, const gc_gemm_desc *d,
                                                const float *partial, int splits)
{
    const int64_t n = d->M * d->N;
    GC_CUDA_DISPATCH_FLOAT(d->dtype, T,
        gc_gemm_splitk_kernel<T><<<grid_for(be, n), 256, 0, gc_cuda_stream(be)>>>(
            d->M, d->N, splits, partial, gc_gemm_epi_of(d)));
    return gc_cuda_launch_check("gemm (split-K reduction)");
}

/* ------------------------------------------------------------------ path choice */

static int wgmma_worth_it(const gc_backend *be, const gc_gemm_desc *d)
{
    if (d->M < 128 || d->N < 128 || d->K < 256) return 0;
    if ((double)d->M * (double)d->N * (double)d->K < (double)(1 << 27)) return 0;
    /* 128 x 256 tiles: at least half of the computed tile area must be real output, and
     * at least a quarter of the SMs busy (else mma.sync's 128 x 128 tiles, split K) */
    const int64_t tm = (d->M + 127) / 128, tn = (d->N + 255) / 256;
    if ((double)d->M * (double)d->N < 0.5 * (double)(tm * 128) * (double)(tn * 256)) return 0;
    return tm * tn * 4 >= gc_cuda_sm_count(be);
}

/* Few big tiles: the 128 x 128 grid times the split K the SIMT (exact f32) or mma.sync
 * path would choose (their gc_cuda_gemm_splits arguments) fills under half the SMs. */
static int small_worth_it(const gc_backend *be, const gc_gemm_desc *d, int exact_f32)
{
    if ((double)d->M * (double)d->N * (double)d->K > (double)(1 << 24)) return 0;
    int kps = 0;
    const int splits = exact_f32 ? gc_cuda_gemm_splits(be, d, 128, 128, 2, 64, &kps)
                                 : gc_cuda_gemm_splits(be, d, 128, 128, 2, 128, &kps);
    const int64_t tiles = ((d->M + 127) / 128) * ((d->N + 127) / 128);
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    return tiles * splits * 2 < sms;
}

extern "C" gc_status gc_cuda_gemm(const gc_backend *be, const gc_gemm_desc *d)
{
    gc_variant_ran(GC_VP_CUDA_GEMM_PATH, 0);
    if (d->dtype != GC_F32 && d->dtype != GC_F16 && d->dtype != GC_BF16)
        return gc_fail(GC_ERR_DTYPE, "gemm: CUDA takes float32, float16 or bfloat16, not %s",
                       gc_dtype_name((gc_dtype)d->dtype));
    if (d->M < 0 || d->N < 0 || d->K < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "gemm: negative size");
    if (d->M == 0 || d->N == 0) return GC_OK;
    if (d->M > 0x7fffffffLL || d->N > 0x7fffffffLL || d->K > 0x7fffffffLL)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: dimensions above 2^31-1 are not supported on CUDA");
    if (d->act != GC_ACT_LINEAR && d->act != GC_ACT_RELU && d->act != GC_ACT_TANH &&
        d->act != GC_ACT_SIGMOID)
        return gc_fail(GC_ERR_INVALID_ARG, "gemm: the activation must be elementwise");
    const int64_t need_a = d->trans_a ? d->M : d->K, need_b = d->trans_b ? d->K : d->N;
    if (d->ldc < d->N || (d->K > 0 && (d->lda < need_a || d->ldb < need_b)))
        return gc_fail(GC_ERR_INVALID_ARG, "gemm: leading dimension smaller than the row");

    if (d->impl == GC_IMPL_VENDOR) {
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_VENDOR);
        return gc_cuda_gemm_vendor(be, d);
    }
    if (d->K == 0) {
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_EPILOGUE);
        return gc_cuda_gemm_epilogue_only(be, d, d->beta, d->bias);
    }
    const int tf32 = d->dtype == GC_F32 && gc_get_allow_tf32();
    switch (gc_variant_forced(GC_VP_CUDA_GEMM_PATH)) {
    case GC_V_GEMM_SIMT:
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_SIMT);
        return gc_cuda_gemm_simt(be, d);
    case GC_V_GEMM_MMA:
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_MMA);
        return gc_cuda_gemm_mma(be, d, 1);
    case GC_V_GEMM_WGMMA: {
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_WGMMA);
        gc_clear_error();
        gc_status st = gc_cuda_gemm_wgmma(be, d);
        if (st == GC_ERR_UNSUPPORTED && !gc_last_error()[0])
            return gc_fail(GC_ERR_UNSUPPORTED, "gemm: the wgmma path is not available here");
        return st;
    }
    case GC_V_GEMM_SMALL:
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_SMALL);
        return gc_cuda_gemm_small(be, d);
    default: break;
    }
    if (small_worth_it(be, d, d->dtype == GC_F32 && !tf32)) {
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_SMALL);
        return gc_cuda_gemm_small(be, d);
    }
    if (d->dtype == GC_F32 && !tf32) {
        gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_SIMT);
        return gc_cuda_gemm_simt(be, d);
    }
    if (wgmma_worth_it(be, d) && gc_cuda_gemm_wgmma_compiled(be)) {
        gc_clear_error();
        gc_status st = gc_cuda_gemm_wgmma(be, d);
        if (st != GC_ERR_UNSUPPORTED) {
            gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_WGMMA);
            return st;
        }
    }
    gc_variant_ran(GC_VP_CUDA_GEMM_PATH, GC_V_GEMM_MMA);
    return gc_cuda_gemm_mma(be, d, tf32);
}

/* ------------------------------------------------------------------ the op adapter */

extern "C" gc_status gc_cuda_op_gemm(const gc_backend *be, const gc_op_call *call)
{
    const gc_gemm_params *p = (const gc_gemm_params *)call->params;
    const gc_tensor *A = call->in[0], *B = call->in[1], *bias = call->in[2];
    gc_tensor *C = call->out[0];
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    gc_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = C->dtype;
    d.trans_a = p->trans_a != 0;
    d.trans_b = p->trans_b != 0;
    d.M = C->shape[0];
    d.N = C->shape[1];
    d.K = p->trans_a ? A->shape[0] : A->shape[1];
    d.A = A->data;
    d.lda = A->shape[1];
    d.B = B->data;
    d.ldb = B->shape[1];
    d.C = C->data;
    d.ldc = C->shape[1];
    d.bias = (bias && bias->data) ? bias->data : NULL;
    d.alpha = p->alpha;
    d.beta = p->beta;
    d.act = p->act;
    d.impl = p->impl;
    return gc_cuda_gemm(be, &d);
}
