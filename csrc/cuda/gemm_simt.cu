/* gemm_simt.cu -- exact float32 GEMM on the CUDA cores (no TF32).
 *
 * What it provides: gc_cuda_gemm_simt, the f32 path when gc_get_allow_tf32() is 0,
 * and the readable reference next to the Tensor Core paths (gemm_mma.cu,
 * gemm_wgmma.cu): same contract, same epilogue (gemm.cuh), plain fp32 FMAs.
 *
 * Design: the classic register-blocked SIMT GEMM. A 256-thread block computes a
 * 128 x 128 tile of C; each thread an 8 x 8 sub-tile split into four 4 x 4 quadrants
 * (rows ty*4 and 64 + ty*4, columns tx*4 and 64 + tx*4) so that the shared-memory reads
 * of a warp are float4 broadcasts without bank conflicts. K advances 8 at a time
 * through two shared-memory buffers; the next slice is loaded into registers while the
 * current one is multiplied (one barrier per slice). Global loads are scalar and
 * predicated, each thread reading along the contiguous axis of its operand, so every
 * transpose case, any size and any alignment take the same code; the transpose is
 * absorbed by where a value lands in shared memory (As[k][m], Bs[k][n]). At most 128
 * registers (2 blocks per SM; at 141 registers and 1 block the kernel ran 15% slower).
 * Few output tiles and a long K: the grid's z dimension splits K (see gemm_mma.cu).
 */
#include "gemm.cuh"

#define SIMT_BM 128
#define SIMT_BN 128
#define SIMT_BK 8
#define SIMT_PAD 4 /* keeps float4 alignment, spreads the transposing stores over banks */
#define SIMT_THREADS 256

__global__ void __launch_bounds__(SIMT_THREADS, 2) /* 2 blocks per SM: <= 128 registers */
gc_gemm_simt_kernel(int M, int N, int K, const float *__restrict__ A, int64_t lda, int ta,
                    const float *__restrict__ B, int64_t ldb, int tb, gc_gemm_epi_args e, int kps,
                    float *__restrict__ partial)
{
    if (partial) { /* split K (see gemm_mma.cu): this block's K range, raw sums out */
        const int kb = blockIdx.z * kps;
        A += ta ? (int64_t)kb * lda : (int64_t)kb;
        B += tb ? (int64_t)kb : (int64_t)kb * ldb;
        K = min(K - kb, kps);
    }
    __shared__ __align__(16) float As[2][SIMT_BK][SIMT_BM + SIMT_PAD];
    __shared__ __align__(16) float Bs[2][SIMT_BK][SIMT_BN + SIMT_PAD];

    const int tid = threadIdx.x;
    const int m0 = blockIdx.x * SIMT_BM, n0 = blockIdx.y * SIMT_BN;
    const int tx = tid & 15, ty = tid >> 4;

    /* Where this thread's 4 loads of each operand land in the tile: the index runs
     * along the operand's contiguous axis across neighbouring threads. */
    int am[4], ak[4], bn[4], bk[4];
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int q = tid + i * SIMT_THREADS;
        if (ta) { ak[i] = q >> 7; am[i] = q & 127; } /* A stored K x M: m contiguous */
        else { am[i] = q >> 3; ak[i] = q & 7; }      /* A stored M x K: k contiguous */
        if (tb) { bn[i] = q >> 3; bk[i] = q & 7; }   /* B stored N x K */
        else { bk[i] = q >> 7; bn[i] = q & 127; }    /* B stored K x N */
    }

    float ra[4], rb[4];
    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    const int nk = (K + SIMT_BK - 1) / SIMT_BK;

#define SIMT_LOAD(k0)                                                                    \
    do {                                                                                 \
        _Pragma("unroll") for (int i = 0; i < 4; i++) {                                 \
            const int gm = m0 + am[i], gk = (k0) + ak[i];                                \
            ra[i] = (gm < M && gk < K) ? (ta ? A[(int64_t)gk * lda + gm]                 \
                                             : A[(int64_t)gm * lda + gk])                \
                                       : 0.0f;                                           \
            const int gn = n0 + bn[i], gk2 = (k0) + bk[i];                               \
            rb[i] = (gn < N && gk2 < K) ? (tb ? B[(int64_t)gn * ldb + gk2]               \
                                              : B[(int64_t)gk2 * ldb + gn])              \
                                        : 0.0f;                                          \
        }                                                                                \
    } while (0)
#define SIMT_STORE(buf)                                                                  \
    do {                                                                                 \
        _Pragma("unroll") for (int i = 0; i < 4; i++) {                                 \
            As[buf][ak[i]][am[i]] = ra[i];                                               \
            Bs[buf][bk[i]][bn[i]] = rb[i];                                               \
        }                                                                                \
    } while (0)

    SIMT_LOAD(0);
    SIMT_STORE(0);
    __syncthreads();
    for (int kt = 0; kt < nk; kt++) {
        const int buf = kt & 1;
        if (kt + 1 < nk) SIMT_LOAD((kt + 1) * SIMT_BK);
#pragma unroll
        for (int k = 0; k < SIMT_BK; k++) {
            float a[8], b[8];
            *(float4 *)&a[0] = *(const float4 *)&As[buf][k][ty * 4];
            *(float4 *)&a[4] = *(const float4 *)&As[buf][k][64 + ty * 4];
            *(float4 *)&b[0] = *(const float4 *)&Bs[buf][k][tx * 4];
            *(float4 *)&b[4] = *(const float4 *)&Bs[buf][k][64 + tx * 4];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (kt + 1 < nk) SIMT_STORE(buf ^ 1);
        __syncthreads();
    }
#undef SIMT_LOAD
#undef SIMT_STORE

    if (partial) {
        float *P = partial + (int64_t)blockIdx.z * M * N;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
            if (r >= M) continue;
#pragma unroll
            for (int jh = 0; jh < 2; jh++) {
                const int c = n0 + jh * 64 + tx * 4;
                gc_gemm_part2(P, N, r, c, acc[i][jh * 4 + 0], acc[i][jh * 4 + 1]);
                gc_gemm_part2(P, N, r, c + 2, acc[i][jh * 4 + 2], acc[i][jh * 4 + 3]);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = m0 + (i < 4 ? ty * 4 + i : 64 + ty * 4 + (i - 4));
        if (r >= M) continue;
#pragma unroll
        for (int jh = 0; jh < 2; jh++) {
            const int c = n0 + jh * 64 + tx * 4;
            gc_gemm_epi2<float>(e, r, c, acc[i][jh * 4 + 0], acc[i][jh * 4 + 1]);
            gc_gemm_epi2<float>(e, r, c + 2, acc[i][jh * 4 + 2], acc[i][jh * 4 + 3]);
        }
    }
}

extern "C" gc_status gc_cuda_gemm_simt(const gc_backend *be, const gc_gemm_desc *d)
{
    if (d->dtype != GC_F32)
        return gc_fail(GC_ERR_DTYPE, "gemm: the exact float32 (SIMT) kernel takes float32 only");
    const int64_t gm = (d->M + SIMT_BM - 1) / SIMT_BM, gn = (d->N + SIMT_BN - 1) / SIMT_BN;
    if (gn > 65535)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: N=%lld is too large for the SIMT kernel",
                       (long long)d->N);
    int kps = 0;
    const int splits = gc_cuda_gemm_splits(be, d, SIMT_BM, SIMT_BN, 2, 64, &kps);
    float *partial = NULL;
    if (splits > 1) {
        gc_status st = gc_cuda_workspace(be, (size_t)splits * d->M * d->N * sizeof(float), (void **)&partial);
        if (st) return st;
    }
    dim3 grid((unsigned)gm, (unsigned)gn, (unsigned)splits);
    gc_gemm_simt_kernel<<<grid, SIMT_THREADS, 0, gc_cuda_stream(be)>>>(
        (int)d->M, (int)d->N, (int)d->K, (const float *)d->A, d->lda, d->trans_a,
        (const float *)d->B, d->ldb, d->trans_b, gc_gemm_epi_of(d), kps, partial);
    if (splits > 1) {
        gc_status st = gc_cuda_launch_check("gemm (simt, split K)");
        if (st) return st;
        return gc_cuda_gemm_splitk_reduce(be, d, partial, splits);
    }
    return gc_cuda_launch_check("gemm (simt)");
}
