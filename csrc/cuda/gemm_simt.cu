/* gemm_simt.cu -- exact float32 GEMM on the CUDA cores (no TF32).
 *
 * What it provides: gc_cuda_gemm_simt, the f32 path when gc_get_allow_tf32() is 0,
 * and the readable reference next to the Tensor Core paths (gemm_mma.cu,
 * gemm_wgmma.cu): same contract, same epilogue (gemm.cuh), plain fp32 FMAs, every
 * transpose case, any M, N, K, leading dimension and alignment.
 *
 * Design: the register-blocked SIMT GEMM with warp tiling. A 256-thread block computes
 * a 128 x 128 tile of C; its 8 warps are arranged 4 (M) x 2 (N), each warp 32 x 64, its
 * 32 lanes 4 x 8, each lane 8 x 8 results split into four 4 x 4 quadrants (rows +0 and
 * +16, columns +0 and +32 of the warp tile). Per k a lane reads its 8 A and 8 B values
 * as four float4 from shared memory; a warp's A reads touch 64 contiguous bytes and its
 * B reads 128, one wavefront each, and 64 FMAs follow: the FMA pipe is the limit, so
 * the design spends few issue slots on anything else.
 * K advances 8 at a time through two shared buffers (As[k][m], Bs[k][n]); the next
 * slice is loaded into registers while the current one is multiplied, one barrier per
 * slice. Each thread loads one 16-byte chunk of each operand per slice: along k (A not
 * transposed, B transposed: stored to shared memory as 4 transposing scalar stores,
 * free of bank conflicts through the 4-float row padding) or along m / n (A transposed,
 * B not: one float4 store). A chunk is read with one 16-byte load when the operand is
 * 16-byte aligned (pointer and leading dimension a multiple of 4 floats) and the chunk
 * lies wholly inside the matrix; otherwise (tails, K < 8, misaligned operands) with
 * predicated scalar loads, zeros outside: the same kernel is exact for every case.
 * The transposes are template parameters (4 kernels), so the address arithmetic of the
 * loop is fixed at compile time. At most 128 registers: two blocks per SM, so that
 * one block's barrier and global-load waits are covered by the other's FMAs.
 * Tiles are visited in groups of 8 tile rows (L2 reuse of B's column panels). Few
 * output tiles and a long K (weight gradients): the grid's second dimension splits K
 * (gc_cuda_gemm_splits from the SM count; raw fp32 partial sums reduced in a fixed
 * order by gc_cuda_gemm_splitk_reduce), so results are bitwise reproducible.
 */
#include "gemm.cuh"

namespace {

constexpr int SIMT_BM = 128, SIMT_BN = 128, SIMT_BK = 8, SIMT_THREADS = 256;
/* shared row pitch in floats: keeps float4 alignment (132 * 4 = 528 = 33 * 16) and
 * shifts the two k-halves of the transposing stores onto different banks */
constexpr int SIMT_LDS = SIMT_BM + 4;

/* One operand's 128 x 8 slice, one 16-byte chunk per thread. KCONT: stored
 * outer x K (k contiguous; A not transposed, B transposed); else K x outer. `outer` is
 * M for A and N for B. */
template <bool KCONT> struct simt_chunk {
    const float *p; /* the chunk's first element in the current slice */
    int kk;         /* k of the chunk inside the slice */
    int n_outer;    /* KCONT: 4 if the chunk's row is inside the matrix, else 0;
                       else: how many of its 4 outer elements are (0..4) */
    int sofs;       /* float offset of the chunk's first element in the shared slice */

    __device__ __forceinline__ void init(const float *__restrict__ g, int64_t ld, int outer,
                                         int o0)
    {
        const int q = threadIdx.x;
        if (KCONT) { /* 128 rows of 2 chunks */
            const int o = q >> 1;
            kk = (q & 1) * 4;
            const int go = o0 + o;
            n_outer = go < outer ? 4 : 0;
            p = g + (int64_t)min(go, outer - 1) * ld + kk;
            sofs = kk * SIMT_LDS + o;
        } else { /* 8 k-rows of 32 chunks */
            const int o = (q & 31) * 4;
            kk = q >> 5;
            const int go = o0 + o;
            n_outer = min(max(outer - go, 0), 4);
            p = g + (int64_t)kk * ld + min(go, outer - 1);
            sofs = kk * SIMT_LDS + o;
        }
    }

    /* the chunk of the slice starting at k0, then on to the next slice */
    __device__ __forceinline__ float4 load(int k0, int K, int vec, int64_t step)
    {
        int n; /* valid elements of the chunk, a prefix of its 4 */
        if (KCONT) n = min(max(K - (k0 + kk), 0), n_outer);
        else n = k0 + kk < K ? n_outer : 0;
        float4 v;
        if (vec && n == 4) {
            v = __ldg((const float4 *)p);
        } else {
            v.x = n > 0 ? __ldg(p) : 0.0f;
            v.y = n > 1 ? __ldg(p + 1) : 0.0f;
            v.z = n > 2 ? __ldg(p + 2) : 0.0f;
            v.w = n > 3 ? __ldg(p + 3) : 0.0f;
        }
        p += step;
        return v;
    }

    __device__ __forceinline__ void store(float *s, float4 v) const
    {
        if (KCONT) { /* transposing: s[kk + j][o] */
            s[sofs] = v.x;
            s[sofs + SIMT_LDS] = v.y;
            s[sofs + 2 * SIMT_LDS] = v.z;
            s[sofs + 3 * SIMT_LDS] = v.w;
        } else {
            *(float4 *)(s + sofs) = v;
        }
    }
};

template <bool TA, bool TB>
__global__ void __launch_bounds__(SIMT_THREADS, 2) /* 2 blocks per SM: <= 128 registers */
gc_gemm_simt_kernel(int M, int N, int K, const float *__restrict__ A, int64_t lda,
                    const float *__restrict__ B, int64_t ldb, gc_gemm_epi_args e, int tiles_m,
                    int tiles_n, int vec_a, int vec_b, int kps, float *__restrict__ partial)
{
    if (partial) { /* split K: this block's K range, raw sums out (kps: a multiple of 64) */
        const int kb = blockIdx.y * kps;
        A += TA ? (int64_t)kb * lda : (int64_t)kb;
        B += TB ? (int64_t)kb : (int64_t)kb * ldb;
        K = min(K - kb, kps);
    }
    __shared__ __align__(16) float As[2][SIMT_BK * SIMT_LDS];
    __shared__ __align__(16) float Bs[2][SIMT_BK * SIMT_LDS];

    /* grouped tile order: 8 tile rows walk the same B column panels together */
    int tm, tn;
    {
        const int t = blockIdx.x, G = 8;
        const int group = t / (G * tiles_n), first = group * G;
        const int gm = min(tiles_m - first, G), in = t - group * G * tiles_n;
        tm = first + in % gm;
        tn = in / gm;
    }
    const int m0 = tm * SIMT_BM, n0 = tn * SIMT_BN;

    simt_chunk<!TA> la;
    simt_chunk<TB> lb;
    la.init(A, lda, M, m0);
    lb.init(B, ldb, N, n0);
    const int64_t step_a = TA ? SIMT_BK * lda : SIMT_BK;
    const int64_t step_b = TB ? SIMT_BK : SIMT_BK * ldb;

    /* warp tile and lane position (see the header) */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int ar = (warp >> 1) * 32 + (lane >> 3) * 4; /* rows ar..ar+3, ar+16..ar+19 */
    const int bc = (warp & 1) * 64 + (lane & 7) * 4;   /* columns bc..bc+3, bc+32..bc+35 */

    float acc[8][8];
#pragma unroll
    for (int i = 0; i < 8; i++)
#pragma unroll
        for (int j = 0; j < 8; j++) acc[i][j] = 0.0f;

    const int nk = (K + SIMT_BK - 1) / SIMT_BK;
    {
        const float4 va = la.load(0, K, vec_a, step_a), vb = lb.load(0, K, vec_b, step_b);
        la.store(As[0], va);
        lb.store(Bs[0], vb);
    }
    __syncthreads();
    for (int kt = 0; kt < nk; kt++) {
        const int cur = kt & 1;
        const bool more = kt + 1 < nk;
        float4 va, vb;
        if (more) {
            va = la.load((kt + 1) * SIMT_BK, K, vec_a, step_a);
            vb = lb.load((kt + 1) * SIMT_BK, K, vec_b, step_b);
        }
        const float *as = As[cur], *bs = Bs[cur];
#pragma unroll
        for (int k = 0; k < SIMT_BK; k++) {
            float a[8], b[8];
            *(float4 *)&a[0] = *(const float4 *)&as[k * SIMT_LDS + ar];
            *(float4 *)&a[4] = *(const float4 *)&as[k * SIMT_LDS + ar + 16];
            *(float4 *)&b[0] = *(const float4 *)&bs[k * SIMT_LDS + bc];
            *(float4 *)&b[4] = *(const float4 *)&bs[k * SIMT_LDS + bc + 32];
#pragma unroll
            for (int i = 0; i < 8; i++)
#pragma unroll
                for (int j = 0; j < 8; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        if (more) { /* the other buffer was last read before the previous barrier */
            la.store(As[cur ^ 1], va);
            lb.store(Bs[cur ^ 1], vb);
        }
        __syncthreads();
    }

    if (partial) {
        float *P = partial + (int64_t)blockIdx.y * M * N;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int r = m0 + ar + (i >> 2) * 16 + (i & 3);
            if (r >= M) continue;
#pragma unroll
            for (int jh = 0; jh < 2; jh++) {
                const int c = n0 + bc + jh * 32;
                gc_gemm_part2(P, N, r, c, acc[i][jh * 4 + 0], acc[i][jh * 4 + 1]);
                gc_gemm_part2(P, N, r, c + 2, acc[i][jh * 4 + 2], acc[i][jh * 4 + 3]);
            }
        }
        return;
    }
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int r = m0 + ar + (i >> 2) * 16 + (i & 3);
        if (r >= M) continue;
#pragma unroll
        for (int jh = 0; jh < 2; jh++) {
            const int c = n0 + bc + jh * 32;
            gc_gemm_epi2<float>(e, r, c, acc[i][jh * 4 + 0], acc[i][jh * 4 + 1]);
            gc_gemm_epi2<float>(e, r, c + 2, acc[i][jh * 4 + 2], acc[i][jh * 4 + 3]);
        }
    }
}

template <bool TA, bool TB>
gc_status launch_simt(const gc_backend *be, const gc_gemm_desc *d, int64_t tiles_m,
                      int64_t tiles_n)
{
    /* 16-byte chunks: pointer and leading dimension multiples of 4 floats (the split-K
     * offsets, multiples of 64 elements along k, keep that) */
    const int vec_a = ((uintptr_t)d->A % 16 == 0) && (d->lda % 4 == 0);
    const int vec_b = ((uintptr_t)d->B % 16 == 0) && (d->ldb % 4 == 0);
    int kps = 0;
    const int splits = gc_cuda_gemm_splits(be, d, SIMT_BM, SIMT_BN, 2, 64, &kps);
    float *partial = NULL;
    if (splits > 1) {
        gc_status st = gc_cuda_workspace(be, (size_t)splits * d->M * d->N * sizeof(float), (void **)&partial);
        if (st) return st;
    }
    dim3 grid((unsigned)(tiles_m * tiles_n), (unsigned)splits);
    gc_gemm_simt_kernel<TA, TB><<<grid, SIMT_THREADS, 0, gc_cuda_stream(be)>>>(
        (int)d->M, (int)d->N, (int)d->K, (const float *)d->A, d->lda, (const float *)d->B,
        d->ldb, gc_gemm_epi_of(d), (int)tiles_m, (int)tiles_n, vec_a, vec_b, kps, partial);
    if (splits > 1) {
        gc_status st = gc_cuda_launch_check("gemm (simt, split K)");
        if (st) return st;
        return gc_cuda_gemm_splitk_reduce(be, d, partial, splits);
    }
    return gc_cuda_launch_check("gemm (simt)");
}

} // namespace

extern "C" gc_status gc_cuda_gemm_simt(const gc_backend *be, const gc_gemm_desc *d)
{
    if (d->dtype != GC_F32)
        return gc_fail(GC_ERR_DTYPE, "gemm: the exact float32 (SIMT) kernel takes float32 only");
    const int64_t tm = (d->M + SIMT_BM - 1) / SIMT_BM, tn = (d->N + SIMT_BN - 1) / SIMT_BN;
    if (tm * tn > 0x7fffffffLL)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: %lld x %lld is too large for one launch",
                       (long long)d->M, (long long)d->N);
    if (!d->trans_a && !d->trans_b) return launch_simt<false, false>(be, d, tm, tn);
    if (!d->trans_a && d->trans_b) return launch_simt<false, true>(be, d, tm, tn);
    if (d->trans_a && !d->trans_b) return launch_simt<true, false>(be, d, tm, tn);
    return launch_simt<true, true>(be, d, tm, tn);
}
