/* gemm_mma.cu -- Tensor Core GEMM through mma.sync (sm_80 and newer; also the fallback
 * on sm_90 for what the wgmma path does not take).
 *
 * What it provides: gc_cuda_gemm_mma for f16 / bf16 storage (mma.m16n8k16, fp32
 * accumulation) and f32 storage as TF32 (mma.m16n8k8, operands rounded to nearest
 * TF32 with cvt.rna in registers, fp32 accumulation), every transpose case, any M, N,
 * K and any alignment.
 *
 * Design (the Ampere recipe): a 256-thread block (8 warps as 2 x 4, each warp 64 x 32)
 * computes a 128 x 128 tile of C. K advances in slices of 64 bytes (32 halves or 16
 * floats) through a 3-stage cp.async pipeline: 16 KB per stage, 48 KB in all, so two
 * blocks fit on an sm_86 multiprocessor and no opt-in is needed. Shared memory keeps
 * each operand in its global layout (the transpose is absorbed where the fragments are
 * read: ldmatrix or ldmatrix.trans for 16-bit, scalar reads for TF32), rows of 16-byte
 * chunks XOR-swizzled so that both the cp.async stores and the fragment reads are free
 * of bank conflicts without padding. Tails are predicated at the 16-byte chunk: a
 * partly valid chunk is zero-filled by cp.async's src-size, rows past M / N and
 * columns past K read as zeros, so the multiply needs no masks. When an operand is not
 * 16-byte aligned (pointer or leading dimension) the same kernel loads chunks with
 * scalar loads instead of cp.async (the `vec` argument); that path is synchronous and
 * slower but exact. With few output tiles and a long K the grid's second dimension
 * splits K (fp32 partial sums in the workspace, reduced in a fixed order by gemm.cu).
 * Template parameters: storage type and the two transpose flags (12 kernels; one tile
 * shape).
 */
#include "gemm.cuh"

#include <type_traits>

namespace {

constexpr int MMA_BM = 128, MMA_BN = 128, MMA_THREADS = 256, MMA_STAGES = 3;

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldsm_x4(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t *r, uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

__device__ __forceinline__ uint32_t to_tf32(float f)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(f));
    return r;
}

template <typename T> struct mma_op;
template <> struct mma_op<__half> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct mma_op<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b)
    {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};
template <> struct mma_op<float> { /* TF32 */
    static __device__ __forceinline__ void run(float *d, const uint32_t *a, const uint32_t *b)
    {
        asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, "
                     "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
};

/* Tile geometry of one operand tile in shared memory: ROWS rows of CPR 16-byte chunks.
 * K-contiguous tiles (A not transposed, B transposed) have 128 rows of 64 bytes;
 * MN-contiguous ones (A transposed, B not) have 64/ES rows (k) of 128 elements.
 * swz(row, chunk) is the physical chunk of a logical one. */
template <typename T, bool KCONT> struct tile_geo {
    static constexpr int ES = (int)sizeof(T);
    static constexpr int CH = 16 / ES;       /* elements per chunk */
    static constexpr int BK = 64 / ES;       /* K slice: 32 halves or 16 floats */
    static constexpr int ROWS = KCONT ? 128 : BK;
    static constexpr int CPR = KCONT ? 4 : 128 / CH; /* chunks per row: 4, 16 or 32 */
    static constexpr int LD = CPR * CH;      /* elements per row */
    static __device__ __forceinline__ int swz(int row, int c)
    {
        if (KCONT) return c ^ ((row >> 1) & 3);       /* 4 chunks a row */
        if (ES == 2) return c ^ (row & 7);             /* 16 chunks a row */
        return c ^ ((row & 3) << 1);                   /* 32 chunks a row (f32) */
    }
};

/* One 128 x BK (or BK x 128) operand tile into shared memory. For operand A,
 * `outer` is M (rows of C) and `inner` K; the tile starts at (o0, k0). KCONT: the
 * operand is stored outer x K (k contiguous, leading dim ld); else K x outer. */
template <typename T, bool KCONT>
__device__ __forceinline__ void load_tile(T *s, const T *__restrict__ g, int64_t ld, int outer,
                                          int K, int o0, int k0, int vec)
{
    typedef tile_geo<T, KCONT> G;
#pragma unroll
    for (int i = 0; i < 2; i++) { /* 512 chunks, 2 per thread */
        const int q = threadIdx.x + i * MMA_THREADS;
        const int row = q / G::CPR, c = q % G::CPR;
        int64_t off;
        int valid;
        if (KCONT) {
            const int go = o0 + row, gk = k0 + c * G::CH;
            valid = go < outer ? min(max(K - gk, 0), G::CH) : 0;
            off = (int64_t)go * ld + gk;
        } else {
            const int gk = k0 + row, go = o0 + c * G::CH;
            valid = gk < K ? min(max(outer - go, 0), G::CH) : 0;
            off = (int64_t)gk * ld + go;
        }
        T *dst = s + row * G::LD + G::swz(row, c) * G::CH;
        if (vec) {
            cp_async16(smem_u32(dst), valid ? (const void *)(g + off) : (const void *)g,
                       valid * G::ES);
        } else { /* bit copies: no conversion, so raw storage words do */
            typedef typename std::conditional<sizeof(T) == 2, uint16_t, uint32_t>::type U;
            const U *gu = (const U *)g;
            union { uint4 u; U v[G::CH]; } buf;
#pragma unroll
            for (int j = 0; j < G::CH; j++) buf.v[j] = j < valid ? gu[off + j] : (U)0;
            *(uint4 *)dst = buf.u;
        }
    }
}

template <typename T, bool TA, bool TB>
__global__ void __launch_bounds__(MMA_THREADS, 2)
gc_gemm_mma_kernel(int M, int N, int K, const T *__restrict__ A, int64_t lda,
                   const T *__restrict__ B, int64_t ldb, gc_gemm_epi_args e, int tiles_m,
                   int tiles_n, int vec, int kps, float *__restrict__ partial)
{
    /* split K: block row y takes K range [y*kps, y*kps + kps) and writes raw fp32 sums to
     * partial[y] (gc_cuda_gemm_splitk_reduce adds them up and runs the epilogue) */
    if (partial) {
        const int kb = blockIdx.y * kps;
        A += TA ? (int64_t)kb * lda : (int64_t)kb;
        B += TB ? (int64_t)kb : (int64_t)kb * ldb;
        K = min(K - kb, kps);
    }
    typedef tile_geo<T, !TA> GA;
    typedef tile_geo<T, TB> GB;
    constexpr int BK = GA::BK;
    constexpr int A_ELEMS = GA::ROWS * GA::LD, B_ELEMS = GB::ROWS * GB::LD;
    constexpr bool F32 = sizeof(T) == 4;

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T *smem = (T *)smem_raw;

    /* grouped tile order: 8 tile-rows share the B columns they stream (L2 reuse) */
    int tm, tn;
    {
        const int t = blockIdx.x, G = 8;
        const int group = t / (G * tiles_n), first = group * G;
        const int gm = min(tiles_m - first, G), in = t - group * G * tiles_n;
        tm = first + in % gm;
        tn = in / gm;
    }
    const int m0 = tm * MMA_BM, n0 = tn * MMA_BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp >> 2, wn = warp & 3; /* warp tile: rows wm*64, columns wn*32 */

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    const int nk = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < MMA_STAGES - 1; s++) {
        if (s < nk) {
            T *st = smem + s * (A_ELEMS + B_ELEMS);
            load_tile<T, !TA>(st, A, lda, M, K, m0, s * BK, vec);
            load_tile<T, TB>(st + A_ELEMS, B, ldb, N, K, n0, s * BK, vec);
        }
        cp_async_commit();
    }

    for (int kt = 0; kt < nk; kt++) {
        cp_async_wait<MMA_STAGES - 2>();
        __syncthreads(); /* slice kt landed for all; slice kt-1's stage is free */
        {
            const int pf = kt + MMA_STAGES - 1;
            if (pf < nk) {
                T *st = smem + (pf % MMA_STAGES) * (A_ELEMS + B_ELEMS);
                load_tile<T, !TA>(st, A, lda, M, K, m0, pf * BK, vec);
                load_tile<T, TB>(st + A_ELEMS, B, ldb, N, K, n0, pf * BK, vec);
            }
            cp_async_commit();
        }
        const T *As = smem + (kt % MMA_STAGES) * (A_ELEMS + B_ELEMS);
        const T *Bs = As + A_ELEMS;

        if (!F32) {
#pragma unroll
            for (int ks = 0; ks < BK / 16; ks++) {
                uint32_t a[4][4], b[4][2];
#pragma unroll
                for (int mi = 0; mi < 4; mi++) {
                    if (!TA) { /* As[m][k]: plain ldmatrix, matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15) */
                        const int r = wm * 64 + mi * 16 + (lane & 15);
                        const int c = ks * 2 + (lane >> 4);
                        ldsm_x4(a[mi], smem_u32(As + r * GA::LD + GA::swz(r, c) * 8));
                    } else { /* As[k][m]: transposing ldmatrix */
                        const int k = ks * 16 + (lane & 7) + ((lane >> 4) << 3);
                        const int c = (wm * 64 + mi * 16) / 8 + ((lane >> 3) & 1);
                        ldsm_x4_t(a[mi], smem_u32(As + k * GA::LD + GA::swz(k, c) * 8));
                    }
                }
#pragma unroll
                for (int nj = 0; nj < 2; nj++) {
                    uint32_t r4[4];
                    if (TB) { /* Bs[n][k] */
                        const int n = wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
                        const int c = ks * 2 + ((lane >> 3) & 1);
                        ldsm_x4(r4, smem_u32(Bs + n * GB::LD + GB::swz(n, c) * 8));
                    } else { /* Bs[k][n] */
                        const int k = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                        const int c = (wn * 32 + nj * 16) / 8 + (lane >> 4);
                        ldsm_x4_t(r4, smem_u32(Bs + k * GB::LD + GB::swz(k, c) * 8));
                    }
                    b[2 * nj][0] = r4[0];
                    b[2 * nj][1] = r4[1];
                    b[2 * nj + 1][0] = r4[2];
                    b[2 * nj + 1][1] = r4[3];
                }
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) mma_op<T>::run(acc[mi][ni], a[mi], b[ni]);
            }
        } else {
            const float *Af = (const float *)As, *Bf = (const float *)Bs;
            const int g = lane >> 2, t = lane & 3;
#pragma unroll
            for (int ks = 0; ks < BK / 8; ks++) {
                uint32_t a[4][4], b[4][2];
#pragma unroll
                for (int mi = 0; mi < 4; mi++) {
#pragma unroll
                    for (int h = 0; h < 4; h++) { /* a0 (g,t) a1 (g+8,t) a2 (g,t+4) a3 (g+8,t+4) */
                        const int m = wm * 64 + mi * 16 + g + (h & 1) * 8;
                        const int k = ks * 8 + t + (h >> 1) * 4;
                        float v;
                        if (!TA) v = Af[m * GA::LD + GA::swz(m, k >> 2) * 4 + (k & 3)];
                        else v = Af[k * GA::LD + GA::swz(k, m >> 2) * 4 + (m & 3)];
                        a[mi][h] = to_tf32(v);
                    }
                }
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
#pragma unroll
                    for (int h = 0; h < 2; h++) { /* b0 (k=t, n=g) b1 (k=t+4, n=g) */
                        const int n = wn * 32 + ni * 8 + g;
                        const int k = ks * 8 + t + h * 4;
                        float v;
                        if (TB) v = Bf[n * GB::LD + GB::swz(n, k >> 2) * 4 + (k & 3)];
                        else v = Bf[k * GB::LD + GB::swz(k, n >> 2) * 4 + (n & 3)];
                        b[ni][h] = to_tf32(v);
                    }
                }
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) mma_op<T>::run(acc[mi][ni], a[mi], b[ni]);
            }
        }
    }
    cp_async_wait<0>(); /* nothing may be in flight when the block exits */

    const int g = lane >> 2, t = lane & 3;
    if (partial) {
        float *P = partial + (int64_t)blockIdx.y * M * N;
#pragma unroll
        for (int mi = 0; mi < 4; mi++) {
            const int r = m0 + wm * 64 + mi * 16 + g;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int c = n0 + wn * 32 + ni * 8 + 2 * t;
                if (r < M) gc_gemm_part2(P, N, r, c, acc[mi][ni][0], acc[mi][ni][1]);
                if (r + 8 < M) gc_gemm_part2(P, N, r + 8, c, acc[mi][ni][2], acc[mi][ni][3]);
            }
        }
        return;
    }
#pragma unroll
    for (int mi = 0; mi < 4; mi++) {
        const int r = m0 + wm * 64 + mi * 16 + g;
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const int c = n0 + wn * 32 + ni * 8 + 2 * t;
            if (r < M) gc_gemm_epi2<T>(e, r, c, acc[mi][ni][0], acc[mi][ni][1]);
            if (r + 8 < M) gc_gemm_epi2<T>(e, r + 8, c, acc[mi][ni][2], acc[mi][ni][3]);
        }
    }
}

template <typename T, bool TA, bool TB>
gc_status launch_mma(const gc_backend *be, const gc_gemm_desc *d)
{
    typedef tile_geo<T, !TA> GA;
    typedef tile_geo<T, TB> GB;
    const size_t smem =
        (size_t)MMA_STAGES * (GA::ROWS * GA::LD + GB::ROWS * GB::LD) * sizeof(T);
    const int64_t tiles_m = (d->M + MMA_BM - 1) / MMA_BM, tiles_n = (d->N + MMA_BN - 1) / MMA_BN;
    if (tiles_m * tiles_n > 0x7fffffffLL)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: %lld x %lld is too large for one launch",
                       (long long)d->M, (long long)d->N);
    /* 16-byte chunks need 16-byte aligned pointers and leading dimensions */
    const int es = (int)sizeof(T);
    const int vec = ((uintptr_t)d->A % 16 == 0) && ((uintptr_t)d->B % 16 == 0) &&
                    ((d->lda * es) % 16 == 0) && ((d->ldb * es) % 16 == 0);
    auto kern = gc_gemm_mma_kernel<T, TA, TB>;
    if (smem > 48 * 1024)
        GC_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int kps = 0;
    const int splits = gc_cuda_gemm_splits(be, d, MMA_BM, MMA_BN, 2, 128, &kps);
    float *partial = NULL;
    if (splits > 1) {
        gc_status st = gc_cuda_workspace(be, (size_t)splits * d->M * d->N * sizeof(float), (void **)&partial);
        if (st) return st;
    }
    kern<<<dim3((unsigned)(tiles_m * tiles_n), (unsigned)splits), MMA_THREADS, smem, gc_cuda_stream(be)>>>(
        (int)d->M, (int)d->N, (int)d->K, (const T *)d->A, d->lda, (const T *)d->B, d->ldb,
        gc_gemm_epi_of(d), (int)tiles_m, (int)tiles_n, vec, kps, partial);
    if (splits > 1) {
        gc_status st = gc_cuda_launch_check("gemm (mma.sync, split K)");
        if (st) return st;
        return gc_cuda_gemm_splitk_reduce(be, d, partial, splits);
    }
    return gc_cuda_launch_check("gemm (mma.sync)");
}

template <typename T> gc_status launch_mma_layout(const gc_backend *be, const gc_gemm_desc *d)
{
    if (!d->trans_a && !d->trans_b) return launch_mma<T, false, false>(be, d);
    if (!d->trans_a && d->trans_b) return launch_mma<T, false, true>(be, d);
    if (d->trans_a && !d->trans_b) return launch_mma<T, true, false>(be, d);
    return launch_mma<T, true, true>(be, d);
}

} // namespace

extern "C" gc_status gc_cuda_gemm_mma(const gc_backend *be, const gc_gemm_desc *d, int tf32)
{
    if (gc_cuda_cc(be) < 80)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "gemm: the Tensor Core kernels need compute capability 8.0 or newer (this "
                       "device is %d.%d)",
                       gc_cuda_cc(be) / 10, gc_cuda_cc(be) % 10);
    switch (d->dtype) {
    case GC_F16: return launch_mma_layout<__half>(be, d);
    case GC_BF16: return launch_mma_layout<__nv_bfloat16>(be, d);
    case GC_F32:
        if (!tf32) break;
        return launch_mma_layout<float>(be, d);
    default: break;
    }
    return gc_fail(GC_ERR_DTYPE, "gemm: the mma.sync path takes f16, bf16 or f32 as TF32");
}
