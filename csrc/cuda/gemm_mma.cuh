/* gemm_mma.cuh -- the mma.sync GEMM kernel, templated on its tile configuration
 * (internal: included by gemm_mma.cu, which plans, and by one gemm_mma_<tile>.cu per
 * configuration, which instantiates it).
 *
 * What it provides: GC_MMA_CONFIGS, the list of block tiles (M x N, the K slice in bytes,
 * the warp tile, cp.async stages, minimum blocks per SM for __launch_bounds__), and the
 * kernel + launcher templates behind gc_gemm_mma_cfg_<tile> (gc_mma_cfg_fns: occupancy
 * query and launch) for f16 / bf16 (mma.m16n8k16) and f32 as TF32 (mma.m16n8k8, operands
 * rounded to nearest with cvt.rna in registers), every transpose case, any M, N, K and
 * alignment, fp32 accumulation, the shared epilogue of gemm.cuh.
 *
 * Design (the Ampere recipe, as CUTLASS's sm80 multistage mainloop builds it):
 * - A block of (BM/WM) x (BN/WN) warps computes a BM x BN tile of C, each warp a WM x WN
 *   piece as (WM/16) x (WN/8) mma tiles; 64 x 64 warp tiles where registers allow, which
 *   halves the shared-memory fragment traffic per mma against 64 x 32.
 * - K advances in slices of BKB bytes (64: 32 halves / 16 floats, or 128) through a
 *   STAGES-deep cp.async ring. Each operand keeps its global layout in shared memory (the
 *   transpose is absorbed where fragments are read: ldmatrix / ldmatrix.trans for 16-bit,
 *   scalar reads for TF32), rows of 16-byte chunks XOR-swizzled so that the cp.async
 *   stores and the fragment reads are free of bank conflicts without padding.
 * - One __syncthreads per K slice: it sits after the fragments of the slice's last k-step
 *   were read, so the stage just consumed becomes the next cp.async target at once; the
 *   copies of slice kt + STAGES - 1 are issued at the start of slice kt.
 * - Register double buffering: the fragments of k-step i+1 (the first of the next slice
 *   included) are loaded while the mma of step i issue (where registers allow: see DB).
 * - Tails are predicated at the 16-byte chunk (a partly valid chunk zero-filled by
 *   cp.async's src-size; rows past M / N and columns past K read as zeros), so the
 *   multiply needs no masks. When an operand is not 16-byte aligned (pointer or leading
 *   dimension) the same kernel loads its chunks with scalar loads (`vec` 0): synchronous
 *   and slower, but exact.
 * - The epilogue stages each warp's accumulators through shared memory, 16 rows at a time,
 *   so that a warp writes whole rows of 64 (32) consecutive columns: coalesced stores
 *   through gc_gemm_epi2 (alpha, beta * C, bias, activation, rounding). Split K (the
 *   grid's y) writes raw fp32 sums instead, reduced in a fixed order by gemm.cu.
 * One configuration per translation unit (its 12 kernels: 3 dtypes x 4 layouts) keeps the
 * build parallel.
 */
#ifndef GPUCMP_CUDA_GEMM_MMA_CUH
#define GPUCMP_CUDA_GEMM_MMA_CUH

#include "gemm.cuh"

/* X(NAME, VARIANT, BM, BN, BKB, WM, WN, STAGES, MINB): VARIANT is the name's index in
 * cuda.gemm.mma_tile (GC_V_MMAT_*); BKB the K slice in bytes; MINB the blocks per SM
 * __launch_bounds__ plans registers for (65536 / (threads * MINB) at most). Shared
 * memory: STAGES * (BM + BN) * BKB bytes. Add a line here and a gemm_mma_<NAME>.cu. */
#define GC_MMA_CONFIGS(X)                                                   \
    X(128x256x32, GC_V_MMAT_T128X256X32, 128, 256, 64, 64, 64, 4, 1)        \
    X(128x128x32, GC_V_MMAT_T128X128X32, 128, 128, 64, 64, 64, 5, 2)        \
    X(128x128x64, GC_V_MMAT_T128X128X64, 128, 128, 128, 64, 64, 3, 2)       \
    X(128x64x32, GC_V_MMAT_T128X64X32, 128, 64, 64, 64, 32, 4, 2)           \
    X(64x64x32, GC_V_MMAT_T64X64X32, 64, 64, 64, 32, 32, 5, 3)              \
    X(128x256x64, GC_V_MMAT_T128X256X64, 128, 256, 128, 64, 64, 3, 1)

#ifdef __cplusplus
extern "C" {
#endif
/* One configuration's entry points (gemm_mma_<NAME>.cu). occupancy: blocks of the kernel
 * for (dtype, trans_a, trans_b) that fit one SM of the current device by registers,
 * threads and shared memory (it sets the kernel's dynamic shared-memory attribute first;
 * 0 when it cannot run here, e.g. more shared memory than the device's opt-in). launch:
 * the grid tiles_m * tiles_n x splits on gc_cuda_stream(be), K ranges of kps when
 * splits > 1 (partial: splits x M x N fp32 sums, reduced by the caller). */
typedef struct {
    int (*occupancy)(int dtype, int trans_a, int trans_b);
    gc_status (*launch)(const gc_backend *be, const gc_gemm_desc *d, int splits, int kps, float *partial);
} gc_mma_cfg_fns;
#define GC_MMA_DECLARE_(name, v, bm, bn, bkb, wm, wn, st, minb) extern const gc_mma_cfg_fns gc_gemm_mma_cfg_##name;
GC_MMA_CONFIGS(GC_MMA_DECLARE_)
#undef GC_MMA_DECLARE_
#ifdef __cplusplus
}
#endif

#ifdef __CUDACC__
#include <type_traits>

namespace gc_mma {

template <int BM_, int BN_, int BKB_, int WM_, int WN_, int STAGES_, int MINB_> struct Cfg {
    static constexpr int BM = BM_, BN = BN_, BKB = BKB_, WM = WM_, WN = WN_, STAGES = STAGES_, MINB = MINB_;
    static constexpr int WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = 32 * WARPS_M * WARPS_N;
    static constexpr size_t SMEM = (size_t)STAGES * (BM + BN) * BKB;
    static_assert(BM % WM == 0 && BN % WN == 0 && WM % 16 == 0 && WN % 16 == 0, "warp tiling");
    static_assert(BKB == 64 || BKB == 128, "K slice of 64 or 128 bytes");
    static_assert(STAGES >= 3, "the ring needs 3 stages or more");
};

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
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
__device__ __forceinline__ float lds_f32(uint32_t addr)
{
    float v;
    asm volatile("ld.shared.f32 %0, [%1];\n" : "=f"(v) : "r"(addr));
    return v;
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

/* One operand tile in shared memory: ROWS rows of CPR 16-byte chunks. K-contiguous tiles
 * (A not transposed, B transposed) are OUTER rows of one K slice (4 or 8 chunks);
 * MN-contiguous ones (A transposed, B not) are BK rows (k) of OUTER elements.
 * swz(row, chunk): the physical chunk of a logical one. Conflict-free because a row is a
 * multiple of 128 bytes (or two 64-byte rows share one) and the XOR spreads the 8 rows an
 * ldmatrix phase (or a TF32 fragment read) touches over 8 distinct chunk slots. */
template <typename T, bool KCONT, int OUTER, int BKB> struct Geo {
    static constexpr int ES = (int)sizeof(T);
    static constexpr int CH = 16 / ES;            /* elements per chunk */
    static constexpr int BK = BKB / ES;           /* K slice in elements */
    static constexpr int ROWS = KCONT ? OUTER : BK;
    static constexpr int CPR = KCONT ? BKB / 16 : OUTER * ES / 16;
    static constexpr int LD = CPR * CH;           /* elements per row */
    static constexpr int ELEMS = ROWS * LD;
    static constexpr int CHUNKS = ROWS * CPR;
    static_assert(KCONT || CPR >= 8, "an MN-contiguous row needs 8 chunks for its swizzle");
    static __device__ __forceinline__ int swz(int row, int c)
    {
        if (KCONT) return CPR == 4 ? c ^ ((row >> 1) & 3) : c ^ (row & 7);
        if (ES == 2) return c ^ (row & 7);
        return c ^ ((row & 3) << 1);
    }
};

/* The cp.async side of one operand: this thread's chunks of every slice. Chunk q = tid +
 * i * THREADS sits at row q / CPR, chunk q % CPR; THREADS is a multiple of CPR, so the
 * chunk column is the thread's for every i and rows step by RS = THREADS / CPR, which
 * keeps the swizzle (RS is a multiple of 8, or of 4 for f32 MN tiles): destinations step
 * by RS rows too. */
template <typename T, bool KCONT, int OUTER, int BKB, int THREADS> struct Loader {
    typedef Geo<T, KCONT, OUTER, BKB> G;
    static_assert(THREADS % G::CPR == 0 && G::CHUNKS % THREADS == 0, "chunks per thread");
    static constexpr int PER = G::CHUNKS / THREADS, RS = THREADS / G::CPR;
    static_assert(RS % (KCONT || G::ES == 2 ? 8 : 4) == 0, "row step keeps the swizzle");

    const T *base;  /* the matrix (a valid address for zero-byte copies) */
    const T *ptr;   /* chunk i = 0 of the next slice */
    int64_t step;   /* between chunks i and i + 1 */
    int64_t adv;    /* between slices */
    uint32_t dst0;  /* byte offset of chunk i = 0 in the operand's tile */
    int fixed;      /* K-contig: bit i = row valid; MN: valid elements of the chunk (outer) */
    int kleft;      /* K-contig: K - k of this chunk's first column; MN: K - k of row 0 */

    __device__ __forceinline__ void init(const T *g, int64_t ld, int outer, int K, int o0)
    {
        const int row = threadIdx.x / G::CPR, c = threadIdx.x % G::CPR;
        base = g;
        dst0 = (uint32_t)((row * G::LD + G::swz(row, c) * G::CH) * G::ES);
        if (KCONT) {
            ptr = g + (int64_t)(o0 + row) * ld + c * G::CH;
            step = (int64_t)RS * ld;
            adv = G::BK;
            fixed = 0;
#pragma unroll
            for (int i = 0; i < PER; i++)
                if (o0 + row + i * RS < outer) fixed |= 1 << i;
            kleft = K - c * G::CH;
        } else {
            ptr = g + (int64_t)row * ld + o0 + c * G::CH;
            step = (int64_t)RS * ld;
            adv = (int64_t)G::BK * ld;
            fixed = min(max(outer - (o0 + c * G::CH), 0), G::CH);
            kleft = K - row;
        }
    }

    /* the next slice into the tile at shared address s; then advance */
    __device__ __forceinline__ void load(uint32_t s, int vec)
    {
#pragma unroll
        for (int i = 0; i < PER; i++) {
            int valid;
            if (KCONT) valid = (fixed >> i) & 1 ? min(max(kleft, 0), G::CH) : 0;
            else valid = i * RS < kleft ? fixed : 0;
            const T *src = ptr + i * step;
            const uint32_t dst = s + dst0 + (uint32_t)(i * RS * G::LD * G::ES);
            if (vec) {
                cp_async16(dst, valid ? (const void *)src : (const void *)base, valid * G::ES);
            } else { /* bit copies: no conversion, so raw storage words do */
                typedef typename std::conditional<sizeof(T) == 2, uint16_t, uint32_t>::type U;
                const U *gu = (const U *)src;
                union { uint4 u; U v[G::CH]; } buf;
#pragma unroll
                for (int j = 0; j < G::CH; j++) buf.v[j] = j < valid ? gu[j] : (U)0;
                asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(dst), "r"(buf.u.x),
                             "r"(buf.u.y), "r"(buf.u.z), "r"(buf.u.w)
                             : "memory");
            }
        }
        ptr += adv;
        kleft -= G::BK;
    }
};

/* The fragments of one k-step (16 halves or 8 floats of K) of a warp's WM x WN piece,
 * read from the tiles at shared addresses As / Bs. Layouts of mma.m16n8k16 (f16/bf16;
 * ldmatrix delivers them) and m16n8k8 (tf32: a0 (g, t) a1 (g+8, t) a2 (g, t+4)
 * a3 (g+8, t+4); b0 (k=t, n=g) b1 (k=t+4, n=g), g = lane / 4, t = lane % 4). */
template <typename C, typename T, bool TA, bool TB> struct Frags {
    typedef Geo<T, !TA, C::BM, C::BKB> GA;
    typedef Geo<T, TB, C::BN, C::BKB> GB;
    static constexpr int MI = C::WM / 16, NI = C::WN / 8;
    uint32_t a[MI][4], b[NI][2];

    __device__ __forceinline__ void load(uint32_t As, uint32_t Bs, int ks, int wm, int wn, int lane)
    {
        if (sizeof(T) == 2) {
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
                if (!TA) { /* As[m][k]: matrices (m0-7,k0-7) (m8-15,k0-7) (m0-7,k8-15) (m8-15,k8-15) */
                    const int r = wm * C::WM + mi * 16 + (lane & 15);
                    const int c = ks * 2 + (lane >> 4);
                    ldsm_x4(a[mi], As + (uint32_t)((r * GA::LD + GA::swz(r, c) * 8) * 2));
                } else { /* As[k][m]: transposing ldmatrix */
                    const int k = ks * 16 + (lane & 7) + ((lane >> 4) << 3);
                    const int c = (wm * C::WM + mi * 16) / 8 + ((lane >> 3) & 1);
                    ldsm_x4_t(a[mi], As + (uint32_t)((k * GA::LD + GA::swz(k, c) * 8) * 2));
                }
            }
#pragma unroll
            for (int nj = 0; nj < NI / 2; nj++) {
                uint32_t r4[4];
                if (TB) { /* Bs[n][k] */
                    const int n = wn * C::WN + nj * 16 + (lane & 7) + ((lane >> 4) << 3);
                    const int c = ks * 2 + ((lane >> 3) & 1);
                    ldsm_x4(r4, Bs + (uint32_t)((n * GB::LD + GB::swz(n, c) * 8) * 2));
                } else { /* Bs[k][n] */
                    const int k = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                    const int c = (wn * C::WN + nj * 16) / 8 + (lane >> 4);
                    ldsm_x4_t(r4, Bs + (uint32_t)((k * GB::LD + GB::swz(k, c) * 8) * 2));
                }
                b[2 * nj][0] = r4[0];
                b[2 * nj][1] = r4[1];
                b[2 * nj + 1][0] = r4[2];
                b[2 * nj + 1][1] = r4[3];
            }
        } else {
            const int g = lane >> 2, t = lane & 3;
#pragma unroll
            for (int mi = 0; mi < MI; mi++) {
#pragma unroll
                for (int h = 0; h < 4; h++) {
                    const int m = wm * C::WM + mi * 16 + g + (h & 1) * 8;
                    const int k = ks * 8 + t + (h >> 1) * 4;
                    const int off = !TA ? m * GA::LD + GA::swz(m, k >> 2) * 4 + (k & 3)
                                        : k * GA::LD + GA::swz(k, m >> 2) * 4 + (m & 3);
                    a[mi][h] = to_tf32(lds_f32(As + (uint32_t)(off * 4)));
                }
            }
#pragma unroll
            for (int ni = 0; ni < NI; ni++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int n = wn * C::WN + ni * 8 + g;
                    const int k = ks * 8 + t + h * 4;
                    const int off = TB ? n * GB::LD + GB::swz(n, k >> 2) * 4 + (k & 3)
                                       : k * GB::LD + GB::swz(k, n >> 2) * 4 + (n & 3);
                    b[ni][h] = to_tf32(lds_f32(Bs + (uint32_t)(off * 4)));
                }
            }
        }
    }
};

template <typename C, typename T, bool TA, bool TB>
__global__ void __launch_bounds__(C::THREADS, C::MINB)
kernel(int M, int N, int K, const T *__restrict__ A, int64_t lda, const T *__restrict__ B, int64_t ldb,
       gc_gemm_epi_args e, int tiles_m, int tiles_n, int vec, int kps, float *__restrict__ partial)
{
    /* split K: block row y takes K range [y*kps, y*kps + kps) and writes raw fp32 sums to
     * partial[y] (gc_cuda_gemm_splitk_reduce adds them up and runs the epilogue) */
    if (partial) {
        const int kb = blockIdx.y * kps;
        A += TA ? (int64_t)kb * lda : (int64_t)kb;
        B += TB ? (int64_t)kb : (int64_t)kb * ldb;
        K = min(K - kb, kps);
    }
    typedef Frags<C, T, TA, TB> F;
    typedef typename F::GA GA;
    typedef typename F::GB GB;
    constexpr int BK = GA::BK, KS = BK / (sizeof(T) == 2 ? 16 : 8), S = C::STAGES;
    constexpr uint32_t A_BYTES = GA::ELEMS * GA::ES, STAGE_BYTES = A_BYTES + GB::ELEMS * GB::ES;
    static_assert(KS >= 2, "two k-steps per slice or more");
    /* register double buffering of the fragments where the registers allow it: not on
     * 64 x 64 warp tiles with TF32 (scalar fragment reads) or 128-byte slices (four k-steps'
     * addresses); ptxas spills there otherwise */
    constexpr bool DB = C::WM * C::WN < 64 * 64 || (sizeof(T) == 2 && C::BKB == 64);
    static_assert(STAGE_BYTES * S == C::SMEM, "shared memory of the configuration");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    const uint32_t smem0 = smem_u32(smem_raw);

    /* grouped tile order: 8 tile-rows share the B columns they stream (L2 reuse) */
    int tm, tn;
    {
        const int t = blockIdx.x, G = 8;
        const int group = t / (G * tiles_n), first = group * G;
        const int gm = min(tiles_m - first, G), in = t - group * G * tiles_n;
        tm = first + in % gm;
        tn = in / gm;
    }
    const int m0 = tm * C::BM, n0 = tn * C::BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm = warp / C::WARPS_N, wn = warp % C::WARPS_N;

    float acc[F::MI][F::NI][4];
#pragma unroll
    for (int i = 0; i < F::MI; i++)
#pragma unroll
        for (int j = 0; j < F::NI; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    Loader<T, !TA, C::BM, C::BKB, C::THREADS> la;
    Loader<T, TB, C::BN, C::BKB, C::THREADS> lb;
    la.init(A, lda, M, K, m0);
    lb.init(B, ldb, N, K, n0);

    const int nk = (K + BK - 1) / BK;
#pragma unroll
    for (int s = 0; s < S - 1; s++) {
        if (s < nk) {
            la.load(smem0 + s * STAGE_BYTES, vec);
            lb.load(smem0 + s * STAGE_BYTES + A_BYTES, vec);
        }
        cp_async_commit();
    }
    cp_async_wait<S - 2>();
    __syncthreads(); /* slice 0 landed for all */

    int rd = 0, wr = S - 1; /* stages read and written in this slice */
    if (DB) {
        F fr[2];
        fr[0].load(smem0, smem0 + A_BYTES, 0, wm, wn, lane);
        for (int kt = 0; kt < nk; kt++) {
#pragma unroll
            for (int ks = 0; ks < KS; ks++) {
                /* the next k-step's fragments (the next slice's first after the barrier) */
                {
                    const uint32_t st = smem0 + rd * STAGE_BYTES;
                    fr[(ks + 1) & 1].load(st, st + A_BYTES, (ks + 1) % KS, wm, wn, lane);
                }
                if (ks == 0) { /* slice kt + S - 1 into the stage freed at the last barrier */
                    if (kt + S - 1 < nk) {
                        la.load(smem0 + wr * STAGE_BYTES, vec);
                        lb.load(smem0 + wr * STAGE_BYTES + A_BYTES, vec);
                    }
                    cp_async_commit();
                }
#pragma unroll
                for (int mi = 0; mi < F::MI; mi++)
#pragma unroll
                    for (int ni = 0; ni < F::NI; ni++)
                        mma_op<T>::run(acc[mi][ni], fr[ks & 1].a[mi], fr[ks & 1].b[ni]);
                if (ks == KS - 2) {
                    /* every fragment of stage rd is in registers: slice kt + 1 landed, rd free */
                    cp_async_wait<S - 2>();
                    __syncthreads();
                    wr = rd;
                    rd = rd + 1 == S ? 0 : rd + 1;
                }
            }
        }
    } else { /* one fragment buffer (TF32 on the widest warp tiles: its scalar reads need
              * the registers): the barrier follows the slice's last mma */
        F fr;
        for (int kt = 0; kt < nk; kt++) {
            /* TF32 with four k-steps a slice (128-byte slices) keeps them a loop: unrolled,
             * their scalar fragment addresses do not fit the registers */
#pragma unroll((KS > 2 && sizeof(T) == 4) ? 1 : KS)
            for (int ks = 0; ks < KS; ks++) {
                if (ks == 0) {
                    if (kt + S - 1 < nk) {
                        la.load(smem0 + wr * STAGE_BYTES, vec);
                        lb.load(smem0 + wr * STAGE_BYTES + A_BYTES, vec);
                    }
                    cp_async_commit();
                }
                {
                    const uint32_t st = smem0 + rd * STAGE_BYTES;
                    fr.load(st, st + A_BYTES, ks, wm, wn, lane);
                }
#pragma unroll
                for (int mi = 0; mi < F::MI; mi++)
#pragma unroll
                    for (int ni = 0; ni < F::NI; ni++) mma_op<T>::run(acc[mi][ni], fr.a[mi], fr.b[ni]);
            }
            cp_async_wait<S - 2>();
            __syncthreads();
            wr = rd;
            rd = rd + 1 == S ? 0 : rd + 1;
        }
    }
    cp_async_wait<0>(); /* nothing may be in flight when shared memory is reused / the block exits */
    __syncthreads();    /* every warp is done with its fragments: the ring becomes the staging area */

    /* epilogue: per warp, 16 rows (one mi) at a time through a padded fp32 buffer, then
     * whole rows of WN columns out (LPR lanes a row, two columns each) */
    constexpr int PAD = C::WN + 8, LPR = C::WN / 2, RPI = 32 / LPR;
    static_assert(C::THREADS / 32 * 16 * PAD * 4 <= (int)C::SMEM, "staging fits the ring");
    float *stg = (float *)smem_raw + warp * 16 * PAD;
    const int g = lane >> 2, t = lane & 3;
    float *P = partial ? partial + (int64_t)blockIdx.y * M * N : NULL;
#pragma unroll
    for (int mi = 0; mi < F::MI; mi++) {
#pragma unroll
        for (int ni = 0; ni < F::NI; ni++) {
            *(float2 *)(stg + g * PAD + ni * 8 + 2 * t) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
            *(float2 *)(stg + (g + 8) * PAD + ni * 8 + 2 * t) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
        }
        __syncwarp();
#pragma unroll
        for (int it = 0; it < 16 / RPI; it++) {
            const int row = it * RPI + lane / LPR, col = (lane % LPR) * 2;
            const float2 v = *(const float2 *)(stg + row * PAD + col);
            const int r = m0 + wm * C::WM + mi * 16 + row, c = n0 + wn * C::WN + col;
            if (r < M) {
                if (P) gc_gemm_part2(P, N, r, c, v.x, v.y);
                else gc_gemm_epi2<T>(e, r, c, v.x, v.y);
            }
        }
        __syncwarp();
    }
}

template <typename C, typename T, bool TA, bool TB> int occupancy_of()
{
    auto kern = kernel<C, T, TA, TB>;
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)C::SMEM) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    int n = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kern, C::THREADS, C::SMEM) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

template <typename C, typename T, bool TA, bool TB>
gc_status launch_of(const gc_backend *be, const gc_gemm_desc *d, int splits, int kps, float *partial)
{
    const int64_t tiles_m = (d->M + C::BM - 1) / C::BM, tiles_n = (d->N + C::BN - 1) / C::BN;
    if (tiles_m * tiles_n > 0x7fffffffLL || splits > 65535)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: %lld x %lld is too large for one launch", (long long)d->M,
                       (long long)d->N);
    /* 16-byte chunks need 16-byte aligned pointers and leading dimensions */
    const int es = (int)sizeof(T);
    const int vec = ((uintptr_t)d->A % 16 == 0) && ((uintptr_t)d->B % 16 == 0) && ((d->lda * es) % 16 == 0) &&
                    ((d->ldb * es) % 16 == 0);
    kernel<C, T, TA, TB><<<dim3((unsigned)(tiles_m * tiles_n), (unsigned)splits), C::THREADS, C::SMEM,
                           gc_cuda_stream(be)>>>((int)d->M, (int)d->N, (int)d->K, (const T *)d->A, d->lda,
                                                 (const T *)d->B, d->ldb, gc_gemm_epi_of(d), (int)tiles_m,
                                                 (int)tiles_n, vec, kps, splits > 1 ? partial : NULL);
    return gc_cuda_launch_check(splits > 1 ? "gemm (mma.sync, split K)" : "gemm (mma.sync)");
}

template <typename C, typename T> int occupancy_t(int ta, int tb)
{
    if (!ta && !tb) return occupancy_of<C, T, false, false>();
    if (!ta && tb) return occupancy_of<C, T, false, true>();
    if (ta && !tb) return occupancy_of<C, T, true, false>();
    return occupancy_of<C, T, true, true>();
}
template <typename C, typename T>
gc_status launch_t(const gc_backend *be, const gc_gemm_desc *d, int splits, int kps, float *partial)
{
    if (!d->trans_a && !d->trans_b) return launch_of<C, T, false, false>(be, d, splits, kps, partial);
    if (!d->trans_a && d->trans_b) return launch_of<C, T, false, true>(be, d, splits, kps, partial);
    if (d->trans_a && !d->trans_b) return launch_of<C, T, true, false>(be, d, splits, kps, partial);
    return launch_of<C, T, true, true>(be, d, splits, kps, partial);
}
template <typename C> int occupancy(int dtype, int ta, int tb)
{
    switch (dtype) {
    case GC_F16: return occupancy_t<C, __half>(ta, tb);
    case GC_BF16: return occupancy_t<C, __nv_bfloat16>(ta, tb);
    case GC_F32: return occupancy_t<C, float>(ta, tb);
    default: return 0;
    }
}
template <typename C> gc_status launch(const gc_backend *be, const gc_gemm_desc *d, int splits, int kps, float *partial)
{
    switch (d->dtype) {
    case GC_F16: return launch_t<C, __half>(be, d, splits, kps, partial);
    case GC_BF16: return launch_t<C, __nv_bfloat16>(be, d, splits, kps, partial);
    case GC_F32: return launch_t<C, float>(be, d, splits, kps, partial);
    default: return gc_fail(GC_ERR_DTYPE, "gemm: the mma.sync path takes f16, bf16 or f32 as TF32");
    }
}

} // namespace gc_mma

namespace gc_mma {
#define GC_MMA_TYPEDEF_(name, v, bm, bn, bkb, wm, wn, st, minb) typedef Cfg<bm, bn, bkb, wm, wn, st, minb> cfg_##name;
GC_MMA_CONFIGS(GC_MMA_TYPEDEF_)
#undef GC_MMA_TYPEDEF_
} // namespace gc_mma

/* The body of gemm_mma_<NAME>.cu: that configuration's entry points (its 12 kernels). */
#define GC_MMA_DEFINE(name)                                                                    \
    extern "C" const gc_mma_cfg_fns gc_gemm_mma_cfg_##name = {gc_mma::occupancy<gc_mma::cfg_##name>, \
                                                               gc_mma::launch<gc_mma::cfg_##name>};
#endif /* __CUDACC__ */

#endif
