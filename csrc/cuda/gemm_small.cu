/* gemm_small.cu -- small GEMMs on many SMs: 32 x 32 output tiles, split K, SIMT fp32.
 *
 * What it provides: gc_cuda_gemm_small, the path gemm.cu takes for products too small
 * to fill the GPU with the 128 x 128 tiles of gemm_mma.cu / gemm_simt.cu (Dense layers
 * at batch 128: 128 x 64 x 576, 576 x 64 x 128, 128 x 10 x 64 ...). There 1-5 blocks
 * ran on 1-5 SMs, each pulling all of A and B through one SM's load path (20-30 us
 * for a few MFLOP). Here a 256-thread block computes a 32 x 32 tile of C and K is
 * split over blockIdx.z so that about one block runs per SM; the fp32 partial sums go
 * to the workspace and gc_cuda_gemm_splitk_reduce adds them in a fixed order and runs
 * the epilogue (deterministic). Without a split the block runs the epilogue itself
 * (gc_gemm_epi1: the same code as every other path).
 *
 * Arithmetic: operands of any storage dtype (f32 / f16 / bf16) are converted to float
 * when they are staged in shared memory and multiplied with fp32 FMAs: exact float32
 * (so it also serves f32 with TF32 off) and at least as exact as TF32 / the f16 Tensor
 * Core paths. Every transpose case, size, leading dimension and alignment: the global
 * loads are scalar and predicated, each thread reading along its operand's contiguous
 * axis, and the transpose is absorbed by where a value lands in shared memory. The
 * next K slice is loaded into registers while the current one is multiplied.
 */
#include "gemm.cuh"

#define SG_BM 32
#define SG_BN 32
#define SG_BK 32
#define SG_THREADS 256
#define SG_LD ((SG_BM * SG_BK) / SG_THREADS) /* elements of each operand per thread per slice */

template <typename T>
__global__ void __launch_bounds__(SG_THREADS)
gc_gemm_small_kernel(int M, int N, int K, const T *__restrict__ A, int64_t lda, int ta,
                     const T *__restrict__ B, int64_t ldb, int tb, gc_gemm_epi_args e, int kps,
                     float *__restrict__ partial)
{
    __shared__ float As[SG_BK][SG_BM + 1]; /* As[k][m] */
    __shared__ float Bs[SG_BK][SG_BN + 1]; /* Bs[k][n] */
    const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    const int m0 = blockIdx.x * SG_BM, n0 = blockIdx.y * SG_BN;
    const int kb = blockIdx.z * kps, ke = min(K, kb + kps);

    /* where this thread's loads land in the tiles: the index runs along the operand's
     * contiguous axis across neighbouring threads */
    int am[SG_LD], ak[SG_LD], bn[SG_LD], bk[SG_LD];
#pragma unroll
    for (int i = 0; i < SG_LD; i++) {
        const int q = tid + i * SG_THREADS;
        if (ta) { ak[i] = q / SG_BM; am[i] = q % SG_BM; } /* A stored K x M */
        else { am[i] = q / SG_BK; ak[i] = q % SG_BK; }    /* A stored M x K */
        if (tb) { bn[i] = q / SG_BK; bk[i] = q % SG_BK; } /* B stored N x K */
        else { bk[i] = q / SG_BN; bn[i] = q % SG_BN; }    /* B stored K x N */
    }
    float ra[SG_LD], rb[SG_LD];
#define SG_LOAD(k0)                                                                        \
    do {                                                                                   \
        _Pragma("unroll") for (int i = 0; i < SG_LD; i++) {                               \
            const int gm = m0 + am[i], gk = (k0) + ak[i];                                  \
            ra[i] = (gm < M && gk < ke) ? gc_to_f(ta ? A[(int64_t)gk * lda + gm]           \
                                                     : A[(int64_t)gm * lda + gk])          \
                                        : 0.0f;                                            \
            const int gn = n0 + bn[i], gk2 = (k0) + bk[i];                                 \
            rb[i] = (gn < N && gk2 < ke) ? gc_to_f(tb ? B[(int64_t)gn * ldb + gk2]         \
                                                      : B[(int64_t)gk2 * ldb + gn])        \
                                         : 0.0f;                                           \
        }                                                                                  \
    } while (0)

    float acc[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
    if (kb < ke) SG_LOAD(kb);
    for (int k0 = kb; k0 < ke; k0 += SG_BK) {
#pragma unroll
        for (int i = 0; i < SG_LD; i++) {
            As[ak[i]][am[i]] = ra[i];
            Bs[bk[i]][bn[i]] = rb[i];
        }
        __syncthreads();
        if (k0 + SG_BK < ke) SG_LOAD(k0 + SG_BK);
#pragma unroll
        for (int k = 0; k < SG_BK; k++) {
            const float a0 = As[k][ty], a1 = As[k][ty + 16], b0 = Bs[k][tx], b1 = Bs[k][tx + 16];
            acc[0][0] = fmaf(a0, b0, acc[0][0]);
            acc[0][1] = fmaf(a0, b1, acc[0][1]);
            acc[1][0] = fmaf(a1, b0, acc[1][0]);
            acc[1][1] = fmaf(a1, b1, acc[1][1]);
        }
        __syncthreads();
    }
#undef SG_LOAD

#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int r = m0 + ty + 16 * i;
        if (r >= M) continue;
#pragma unroll
        for (int j = 0; j < 2; j++) {
            const int c = n0 + tx + 16 * j;
            if (c >= N) continue;
            if (partial) partial[(int64_t)blockIdx.z * M * N + (int64_t)r * N + c] = acc[i][j];
            else gc_gemm_epi1<T>(e, r, c, acc[i][j]);
        }
    }
}

/* K ranges: about one block per SM in all, each range a multiple of SG_BK and at
 * least 2 slices long, at most 32 ranges. */
static int small_splits(const gc_backend *be, const gc_gemm_desc *d, int *kps)
{
    const int64_t tiles = ((d->M + SG_BM - 1) / SG_BM) * ((d->N + SG_BN - 1) / SG_BN);
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    int64_t s = tiles < sms ? sms / tiles : 1;
    const int64_t most = (d->K + 2 * SG_BK - 1) / (2 * SG_BK);
    if (s > most) s = most;
    if (s > 32) s = 32;
    if (s < 1) s = 1;
    int64_t len = (d->K + s - 1) / s;
    len = (len + SG_BK - 1) / SG_BK * SG_BK;
    *kps = (int)len;
    return (int)((d->K + len - 1) / len);
}

extern "C" gc_status gc_cuda_gemm_small(const gc_backend *be, const gc_gemm_desc *d)
{
    const int64_t gm = (d->M + SG_BM - 1) / SG_BM, gn = (d->N + SG_BN - 1) / SG_BN;
    if (gm > 0x7fffffffLL || gn > 65535)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: M=%lld N=%lld is too large for the small-GEMM kernel",
                       (long long)d->M, (long long)d->N);
    int kps = 0;
    const int splits = small_splits(be, d, &kps);
    float *partial = NULL;
    if (splits > 1) {
        gc_status st = gc_cuda_workspace(be, (size_t)splits * d->M * d->N * sizeof(float), (void **)&partial);
        if (st) return st;
    }
    dim3 grid((unsigned)gm, (unsigned)gn, (unsigned)splits);
    GC_CUDA_DISPATCH_FLOAT(d->dtype, T,
        gc_gemm_small_kernel<T><<<grid, SG_THREADS, 0, gc_cuda_stream(be)>>>(
            (int)d->M, (int)d->N, (int)d->K, (const T *)d->A, d->lda, d->trans_a, (const T *)d->B,
            d->ldb, d->trans_b, gc_gemm_epi_of(d), kps, partial));
    if (splits > 1) {
        gc_status st = gc_cuda_launch_check("gemm (small, split K)");
        if (st) return st;
        return gc_cuda_gemm_splitk_reduce(be, d, partial, splits);
    }
    return gc_cuda_launch_check("gemm (small)");
}
