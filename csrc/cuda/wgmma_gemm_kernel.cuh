/* wgmma_gemm_kernel.cuh -- the Hopper (sm_90a) GEMM kernel, shared by the GEMM
 * (gemm_wgmma.cu) and the implicit-GEMM convolutions (conv2d_wgmma_igemm.cu).
 *
 * What: gc_wgmma_gemm_kernel<T, KMAJ_B, AMODE> -- the warp-specialised persistent
 * TMA + mbarrier + wgmma kernel described in gemm_wgmma.cu (clusters of 2 along M
 * sharing B by multicast, 128 x 256 tiles, a 4-stage ring of 48 KB stages, two consumer
 * warpgroups of m64n256 wgmma, the fused epilogue from registers), and the host helpers
 * to launch it (wg_make_map_2d, wg_launch). For 16-bit C (where wg_epi_mode allows) the
 * epilogue goes through shared memory and TMA instead (wg_epi: each consumer stages its
 * half tile and one thread stores it -- or reduce-adds it, beta = 1 -- while the next
 * tile's mainloop starts; the ring gives up one 256-wide stage for the staging areas):
 * the register epilogue's 4-byte stores made the short-K GEMMs epilogue-bound.
 *
 * Why a header: the convolutions are the same GEMM with a different A load. AMODE says
 * how the producer fetches the A slice of each K-block:
 *   WG_A_TILED        the GEMM: a tiled 2-D box of A (M x K, K-major);
 *   WG_A_IM2COL       a forward convolution, A = im2col(x): one TMA copy in im2col mode
 *                     per K-block (one tap's 128-byte channel slice -- 64 16-bit or 32
 *                     float channels -- for 128 output pixels; traversal strides are the
 *                     layer's strides); B = w as stored, (KH*KW*C) x F, the K x N layout
 *                     (16-bit), or w^T, F x (KH*KW*C), K-major (TF32: the caller's copy);
 *   WG_A_IM2COL_FLIP  a stride-1 data gradient seen as the forward convolution of dy
 *                     with the flipped kernel: A = im2col(dy), B = w as stored read
 *                     K-major (tap t of w is a C x F matrix = N x K), tap taps-1-t for
 *                     K-block tap t: no weight copy (TF32: a rounded copy, same layout);
 *   WG_A_TILED_SCATTER the GEMM's loads, and the epilogue writes row r to row
 *                     wg_scatter_row(r) (a strided 1x1 layer's data gradient: dy's
 *                     pixels to every sh-th / sw-th pixel of dx).
 * Everything past the loads (ring, consumers, epilogue) is the GEMM's. T = float runs
 * as TF32 (wgmma .tf32, k8): a stage row of 128 bytes is then BKE = 32 elements, the
 * K-major descriptors step 32 bytes = one k8 per wgmma as for 16-bit k16, and B must be
 * K-major (tf32 wgmma has no transpose bit: KMAJ_B only, asserted). The tensor cores
 * read the fp32 bits from shared memory and ignore the low 13 mantissa bits
 * (truncation); the callers round what they copy anyway (gemm_wgmma.cu,
 * conv2d_wgmma_igemm.cu). Each file that includes this gets its own instantiations
 * (anonymous namespace). */
#pragma once

#include "gemm.cuh"
#include "hopper_ptx.cuh"

#include <string.h>
#include <type_traits>

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GC_WG_DEVICE 1
#else
#define GC_WG_DEVICE 0
#endif

enum { WG_A_TILED = 0, WG_A_IM2COL = 1, WG_A_IM2COL_FLIP = 2, WG_A_TILED_SCATTER = 3 };

/* The convolution geometry the im2col producer (and the scattering epilogue) needs;
 * unused by the GEMM. */
struct wg_conv {
    int ohw, ow;             /* output pixels per image and per row */
    int sh, sw;              /* strides (the traversal strides of the map) */
    int pad_top, pad_left;
    int kw, cchunks, taps;   /* taps per kernel row, 128-byte channel chunks per tap (C / BKE), KH*KW */
    int ihw, iw;             /* scatter: pixels per image and per row of the image rows go to */
};

/* How the consumers write a tile (chosen per launch by wg_launch):
 *   mode 0  from registers (gc_gemm_epi2 / plain 2-element stores): any epilogue;
 *   mode 1  through shared memory: each consumer warpgroup rounds its 64 x BN half to a
 *           staging area in the 128-byte swizzle and one thread stores it with TMA
 *           (64-column boxes of tmC; the copy engine clips rows and columns past C), then
 *           goes on with the next tile while the copy drains -- the stores leave as whole
 *           lines instead of 4-byte pieces, and the next mainloop overlaps them;
 *   mode 2  as 1 with the copy engine's reduce-add (C += the tile: beta = 1, linear).
 * stages: the ring depth (the staging areas take the shared memory of one 256-wide
 * stage, so that width runs 3 stages instead of 4 with modes 1 / 2). */
struct wg_epi {
    int mode, stages;
};

#ifdef __CUDACC__
/* WG_A_TILED_SCATTER: GEMM row r = pixel (n, p, q) of the (ohw / ow) x ow grid goes to
 * row (n, p * sh, q * sw) of an image of ihw / iw rows of iw pixels */
__device__ __forceinline__ int64_t wg_scatter_row(const wg_conv &cv, int r)
{
    const int n = r / cv.ohw, rem = r - n * cv.ohw, p = rem / cv.ow, q = rem - p * cv.ow;
    return (int64_t)n * cv.ihw + (int64_t)(p * cv.sh) * cv.iw + (int64_t)q * cv.sw;
}
#endif

namespace {

constexpr int WG_BM = 128, WG_THREADS = 384;
constexpr int WG_A_BYTES = WG_BM * 128; /* one K step: 128 bytes of K */

/* The tile width: BN = 256 (the GEMM's; 4 stages of 48 KB) or 128 (N <= 128: 6 stages
 * of 32 KB, m64n128 wgmma) -- the same 192 KB ring either way. */
template <int BN> struct wg_cfg {
    static_assert(BN == 256 || BN == 128, "tile width 256 or 128");
    static constexpr int STAGES = BN == 256 ? 4 : 6;
    static constexpr int B_BYTES = BN * 128;
    static constexpr int STAGE_BYTES = WG_A_BYTES + B_BYTES;
    static constexpr int SMEM = STAGES * STAGE_BYTES + 1024 /* alignment */ + 256 /* barriers */;
};
constexpr int WG_BN = 256;
constexpr int WG_SMEM = wg_cfg<256>::SMEM; /* the most shared memory any width takes */
static_assert(wg_cfg<128>::SMEM <= WG_SMEM, "the 128-wide ring fits where the 256-wide one does");


/* ------------------------------------------------------------------ PTX wrappers */
#if GC_WG_DEVICE
using namespace gc_hopper; /* smem_u32, mbar_*, tma_load_2d, wg_fence / commit / wait */
/* The same tile into the same offset of every block in cta_mask (cluster multicast);
 * each destination's mbarrier at offset `bar` counts the bytes. */
__device__ __forceinline__ void tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar,
                                               int c0, int c1, uint16_t cta_mask)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 ".multicast::cluster [%0], [%1, {%3, %4}], [%2], %5;\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
                 : "memory");
}
/* arrive on the mbarrier at the same offset in block `cta` of the cluster. Default
 * semantics (release at CTA scope), as CUTLASS's ClusterBarrier: what is released is
 * "the wgmma reads of this stage are done", which wgmma.wait_group has established;
 * .release.cluster would make ptxas put two MEMBAR.ALL.GPU before every arrival, which
 * stalls the consumer warp a few hundred ns per K step. */
__device__ __forceinline__ void mbar_arrive_cluster(uint32_t bar, uint32_t cta)
{
    asm volatile("{\n.reg .b32 ra;\n"
                 "mapa.shared::cluster.u32 ra, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
                 "r"(cta)
                 : "memory");
}
/* shared -> global 2-D box (mode 1), or added to global memory element by element in the
 * map's type (mode 2); bulk async group of the issuing thread */
__device__ __forceinline__ void wg_tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1, bool add)
{
    if (add)
        asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                         (uint64_t)map),
                     "r"(src), "r"(c0), "r"(c1)
                     : "memory");
    else
        asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                         (uint64_t)map),
                     "r"(src), "r"(c0), "r"(c1)
                     : "memory");
}
__device__ __forceinline__ void wg_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* the issuing thread's bulk stores have read their shared memory / are complete */
__device__ __forceinline__ void wg_bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void wg_bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* generic-proxy shared-memory writes made visible to the async proxy (before a TMA store) */
__device__ __forceinline__ void wg_fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
/* barrier among the 128 threads of one consumer warpgroup (ids 1 and 2) */
__device__ __forceinline__ void wg_group_bar(int id) { asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory"); }
__device__ __forceinline__ void wg_st_shared_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
/* two floats rounded to a 16-bit T, packed (the first in the low half) */
template <typename T> __device__ __forceinline__ uint32_t wg_pack2(float a, float b)
{
    struct alignas(4) P2 { T x, y; } p;
    p.x = gc_from_f<T>(a);
    p.y = gc_from_f<T>(b);
    uint32_t u;
    memcpy(&u, &p, 4);
    return u;
}
/* the fast epilogues' bias and relu on a consumer's accumulators: d[4j + {0,1}] and
 * d[4j + {2,3}] are columns c0 + 8j + {0,1} (bias read only below N; NaN stays, as
 * cpu/act.c) */
template <typename T, int BN>
__device__ __forceinline__ void wg_bias_relu(float *d, const T *bias, int c0, int N, bool relu)
{
    if (bias) {
#pragma unroll
        for (int j = 0; j < BN / 8; j++) {
            const int c = c0 + 8 * j;
            const float b0 = c < N ? gc_to_f(bias[c]) : 0.0f, b1 = c + 1 < N ? gc_to_f(bias[c + 1]) : 0.0f;
            d[4 * j] += b0;
            d[4 * j + 1] += b1;
            d[4 * j + 2] += b0;
            d[4 * j + 3] += b1;
        }
    }
    if (relu) {
#pragma unroll
        for (int i = 0; i < BN / 2; i++) d[i] = d[i] < 0.0f ? 0.0f : d[i];
    }
}
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* keeps the compiler from moving accumulator reads/writes across the async region */
template <int N> __device__ __forceinline__ void wg_fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* Shared-memory matrix descriptor, 128-byte swizzle. */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFF) << 16) |
           ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) | (1ull << 62);
}

#define GC_WG_ASM(instr, tail)                                                          \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n" instr " {" GC_WG_DREGS   \
                 "}, %128, %129, p" tail ";\n}\n"                                       \
                 : GC_WG_DOUTS                                                          \
                 : "l"(da), "l"(db), "r"(scale_d))
#define GC_WG_ASM64(instr, tail)                                                        \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" instr " {" GC_WG_DREGS64  \
                 "}, %64, %65, p" tail ";\n}\n"                                         \
                 : GC_WG_DOUTS64                                                        \
                 : "l"(da), "l"(db), "r"(scale_d))

/* d (64 x BN per warpgroup) += A (64 x k, K-major) * B (k x BN); KMAJ_B: B stored
 * N x K, else K x N (transpose bit). */
template <typename T, bool KMAJ_B, int BN = 256> struct wg_mma;
template <> struct wg_mma<__half, true, 128> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", ", 1, 1, 0, 0"); }
};
template <> struct wg_mma<__half, false, 128> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16", ", 1, 1, 0, 1"); }
};
template <> struct wg_mma<__nv_bfloat16, true, 128> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 1, 1, 0, 0"); }
};
template <> struct wg_mma<__nv_bfloat16, false, 128> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16", ", 1, 1, 0, 1"); }
};
template <> struct wg_mma<__half, true> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", ", 1, 1, 0, 0"); }
};
template <> struct wg_mma<__half, false> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM("wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", ", 1, 1, 0, 1"); }
};
template <> struct wg_mma<__nv_bfloat16, true> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ", 1, 1, 0, 0"); }
};
template <> struct wg_mma<__nv_bfloat16, false> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM("wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", ", 1, 1, 0, 1"); }
};
/* TF32: K-major A and B only, no transpose immediates (scale-a, scale-b only) */
template <> struct wg_mma<float, true, 128> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM64("wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", ", 1, 1"); }
};
template <> struct wg_mma<float, true> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", ", 1, 1"); }
};
#undef GC_WG_ASM
#undef GC_WG_ASM64

constexpr int WG_GROUP_M = 8; /* cluster tile-rows (pairs of 128-row tiles) per group of the tile order */

__device__ __forceinline__ void wg_tile_coords(int t, int tiles_m, int tiles_n, int &tm, int &tn)
{
    const int group = t / (WG_GROUP_M * tiles_n), first = group * WG_GROUP_M;
    const int gm = min(tiles_m - first, WG_GROUP_M), in = t - group * WG_GROUP_M * tiles_n;
    tm = first + in % gm;
    tn = in / gm;
}
#endif /* GC_WG_DEVICE */

/* ------------------------------------------------------------------ the kernel
 * Launched in clusters of 2 blocks along M: the pair computes two vertically adjacent
 * 128 x 256 tiles (rank r takes tile-row 2*ctm + r) that share the B slice, so each
 * block's producer loads its own A slice and one half of B, the latter multicast into
 * both blocks' shared memory (same offset, completion counted on the same-offset
 * mbarrier of each block). That cuts the L2 -> SM traffic per block from 48 KB to 32 KB
 * a K step (measured: +5% at 8192^3 bf16). A stage may be
 * refilled only when the consumers of both blocks are done with it (the peer's
 * producer writes into it), so each consumer warpgroup arrives on the "empty" barrier
 * of both blocks (4 arrivals per phase). */
template <typename T, bool KMAJ_B, int AMODE, int BN>
__global__ void __launch_bounds__(WG_THREADS, 1)
gc_wgmma_gemm_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                     const __grid_constant__ CUtensorMap tmC, int M, int N, int K, gc_gemm_epi_args e, int mc,
                     wg_conv cv, wg_epi ep)
{
    static_assert(sizeof(T) == 2 || KMAJ_B, "TF32 wgmma reads B K-major only");
#if GC_WG_DEVICE
    constexpr int BKE = 128 / (int)sizeof(T);    /* K elements per stage: 64 or 32 */
    constexpr int KSTEP = sizeof(T) == 2 ? 16 : 8; /* K of one wgmma */
    constexpr int STAGE_BYTES = wg_cfg<BN>::STAGE_BYTES, B_BYTES = wg_cfg<BN>::B_BYTES;
    constexpr int STG_BYTES = 64 * BN * (int)sizeof(T); /* one consumer's staged half tile (modes 1, 2) */
    const int STAGES = ep.stages;
    constexpr int NACC = BN / 2;                     /* fp32 accumulators per consumer thread */
    constexpr int NBOX = BN / 64;                    /* 64-column boxes of a K x N B slice */
    constexpr bool IM2 = AMODE == WG_A_IM2COL || AMODE == WG_A_IM2COL_FLIP; /* A through im2col copies */
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u; /* 128B-swizzle atoms: 1024-aligned */
    const uint32_t stg0 = base + STAGES * STAGE_BYTES; /* staging (modes 1, 2): 1024-aligned */
    const uint32_t full0 = stg0 + (ep.mode ? 2 * STG_BYTES : 0), empty0 = full0 + 8 * STAGES;

    const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + BN - 1) / BN;
    const int ctiles_m = (tiles_m + 1) / 2; /* tile-row pairs */
    const int nct = ctiles_m * tiles_n, nk = (K + BKE - 1) / BKE;
    const int cluster = blockIdx.x >> 1, nclusters = gridDim.x >> 1;
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full0 + 8 * s, 1);  /* this block's producer: expect_tx arrival */
            mbar_init(empty0 + 8 * s, mc ? 4 : 2); /* 2 consumer warpgroups x 2 blocks (1 without multicast) */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmA) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmB) : "memory");
    }
    cluster_sync(); /* both blocks' barriers exist before any multicast or remote arrive */

    if (wg == 0) { /* ---------------- producer */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            int s = 0;
            uint32_t phase = 0;
            for (int t = cluster; t < nct; t += nclusters) {
                int ctm, tn;
                wg_tile_coords(t, ctiles_m, tiles_n, ctm, tn);
                const int tm = 2 * ctm + (int)rank;
                /* Boxes that would start past M or N (the spare block of an odd
                 * tile-row count, the far half of B at the N edge) are moved back
                 * inside: what they load only feeds results that are not stored, and
                 * no box is then wholly out of bounds. */
                const int mrow = min(tm, tiles_m - 1) * WG_BM;
                /* im2col: the filter corner of the tile's first output pixel */
                int cw0 = 0, ch0 = 0, cn0 = 0;
                if (IM2) {
                    cn0 = mrow / cv.ohw;
                    const int r0 = mrow - cn0 * cv.ohw, p0 = r0 / cv.ow;
                    cw0 = (r0 - p0 * cv.ow) * cv.sw - cv.pad_left;
                    ch0 = p0 * cv.sh - cv.pad_top;
                }
                int cc = 0, kw = 0, kh = 0, tap = 0; /* im2col K-block kb = tap * cchunks + cc */
                for (int kb = 0; kb < nk; kb++) {
                    mbar_wait(empty0 + 8 * s, phase ^ 1); /* first pass: passes at once */
                    const uint32_t full = full0 + 8 * s;
                    const uint32_t sa = base + s * STAGE_BYTES, sb = sa + WG_A_BYTES;
                    mbar_expect_tx(full, STAGE_BYTES); /* A + both halves of B */
                    if (!IM2)
                        tma_load_2d(sa, &tmA, full, kb * BKE, mrow);
                    else
                        tma_load_im2col_4d(sa, &tmA, full, cc * BKE, cw0, ch0, cn0, (uint16_t)kw, (uint16_t)kh);
                    /* B's K coordinate, and (K-major B) the row offset of its N rows: the
                     * data gradient reads tap (taps - 1 - tap) of w, rows c, columns f */
                    const int bk = AMODE == WG_A_IM2COL_FLIP ? cc * BKE : kb * BKE;
                    const int boff = AMODE == WG_A_IM2COL_FLIP ? (cv.taps - 1 - tap) * N : 0;
                    if (!mc) { /* (diagnostic) each block loads all of B itself */
#pragma unroll
                        for (int h = 0; h < (KMAJ_B ? 2 : NBOX); h++) {
                            if (KMAJ_B)
                                tma_load_2d(sb + h * (B_BYTES / 2), &tmB, full, bk,
                                            boff + min(tn * BN + h * (BN / 2), N - 1));
                            else
                                tma_load_2d(sb + h * 8192, &tmB, full, min(tn * BN + h * 64, (N - 1) / 64 * 64), bk);
                        }
                    } else if (KMAJ_B) {
                        tma_load_2d_mc(sb + rank * (B_BYTES / 2), &tmB, full, bk,
                                       boff + min(tn * BN + (int)rank * (BN / 2), N - 1), 0x3);
                    } else {
#pragma unroll
                        for (int j = 0; j < NBOX / 2; j++) { /* each rank loads half the boxes */
                            const int jj = (NBOX / 2) * (int)rank + j;
                            tma_load_2d_mc(sb + jj * 8192, &tmB, full, min(tn * BN + jj * 64, (N - 1) / 64 * 64),
                                           bk, 0x3);
                        }
                    }
                    if (IM2 && ++cc == cv.cchunks) {
                        cc = 0;
                        tap++;
                        if (++kw == cv.kw) { kw = 0; kh++; }
                    }
                    if (++s == STAGES) { s = 0; phase ^= 1; }
                }
            }
        }
    } else { /* ---------------- consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int cw = wg - 1; /* rows cw*64 .. cw*64+63 of the tile */
        const int warp = tid >> 5, lane = tid & 31;
        /* the whole-tile fast path: alpha 1, beta 0 or 1 (a data gradient added to what
         * is there), 2-element aligned rows, linear or relu (bias optional; a
         * convolution's epilogue) */
        const bool plain = e.alpha == 1.0f && (e.beta == 0.0f || e.beta == 1.0f) &&
                           (e.act == GC_ACT_LINEAR || e.act == GC_ACT_RELU) && e.vec2;
        const bool relu = e.act == GC_ACT_RELU, add_c = e.beta != 0.0f;
        const T *bias = (const T *)e.bias;
        float d[NACC];
        int s = 0;
        uint32_t phase = 0;
        for (int t = cluster; t < nct; t += nclusters) {
            int ctm, tn;
            wg_tile_coords(t, ctiles_m, tiles_n, ctm, tn);
            const int tm = 2 * ctm + (int)rank;
#pragma unroll
            for (int i = 0; i < NACC; i++) d[i] = 0.0f;
            wg_fence_regs<NACC>(d);
            int prev = -1;
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(full0 + 8 * s, phase);
                const uint32_t sa = base + s * STAGE_BYTES + cw * (64 * 128), sb = base + s * STAGE_BYTES + WG_A_BYTES;
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < BKE / KSTEP; kk++) {
                    /* a K step of 32 bytes inside the 128-byte swizzled rows */
                    const uint64_t da = wg_desc(sa + kk * 32, 16, 1024);
                    const uint64_t db = KMAJ_B ? wg_desc(sb + kk * 32, 16, 1024)
                                               : wg_desc(sb + kk * (KSTEP * 128), 8192, 1024);
                    wg_mma<T, KMAJ_B, BN>::run(d, da, db, 1u);
                }
                wg_commit();
                wg_wait<1>(); /* the group before this one has retired: its stage is free */
                if (prev >= 0 && tid == 0) {
                    mbar_arrive_cluster(empty0 + 8 * prev, mc ? 0 : rank);
                    if (mc) mbar_arrive_cluster(empty0 + 8 * prev, 1);
                }
                prev = s;
                if (++s == STAGES) { s = 0; phase ^= 1; }
            }
            wg_wait<0>();
            wg_fence_regs<NACC>(d);
            if (prev >= 0 && tid == 0) {
                mbar_arrive_cluster(empty0 + 8 * prev, mc ? 0 : rank);
                if (mc) mbar_arrive_cluster(empty0 + 8 * prev, 1);
            }

            if constexpr (sizeof(T) == 2 && AMODE != WG_A_TILED_SCATTER) {
                if (ep.mode) { /* through the staging area and TMA (see wg_epi) */
                    const int g = lane >> 2, q = lane & 3;
                    const uint32_t stg = stg0 + (uint32_t)(cw * STG_BYTES);
                    const int row0 = tm * WG_BM + cw * 64, cbase = tn * BN + 2 * q;
                    wg_bias_relu<T, BN>(d, bias, cbase, N, relu);
                    if (tid == 0) wg_bulk_wait_read0(); /* this half's previous stores have read the area */
                    wg_group_bar(1 + cw);
                    /* 64-column boxes of 64 rows x 128 bytes, 8 KB apart; 16-byte chunk c of
                     * row r at r * 128 + ((c ^ (r & 7)) * 16), and r & 7 == g */
#pragma unroll
                    for (int j = 0; j < BN / 8; j++) {
                        const uint32_t a = stg + (uint32_t)((j >> 3) * 8192 + (warp * 16 + g) * 128 + 4 * q +
                                                            (((j & 7) ^ g) * 16));
                        wg_st_shared_u32(a, wg_pack2<T>(d[4 * j], d[4 * j + 1]));
                        wg_st_shared_u32(a + 8 * 128, wg_pack2<T>(d[4 * j + 2], d[4 * j + 3]));
                    }
                    wg_fence_proxy_async(); /* every writer, before the barrier the store waits on */
                    wg_group_bar(1 + cw);
                    if (tid == 0 && row0 < M) {
#pragma unroll
                        for (int b = 0; b < BN / 64; b++)
                            if (tn * BN + b * 64 < N)
                                wg_tma_store_2d(&tmC, stg + (uint32_t)(b * 8192), tn * BN + b * 64, row0, ep.mode == 2);
                        wg_bulk_commit();
                    }
                    continue;
                }
            }
            /* epilogue from registers: d[4j + {0,1}] at (row, 8j + 2q + {0,1}),
             * d[4j + {2,3}] at row + 8 */
            const int r = tm * WG_BM + cw * 64 + warp * 16 + (lane >> 2);
            const int c0 = tn * BN + 2 * (lane & 3);
            /* the rows of C these two GEMM rows go to */
            const int64_t dr0 = AMODE == WG_A_TILED_SCATTER ? (r < M ? wg_scatter_row(cv, r) : 0) : r;
            const int64_t dr1 = AMODE == WG_A_TILED_SCATTER ? (r + 8 < M ? wg_scatter_row(cv, r + 8) : 0) : r + 8;
            if (plain && r + 8 < M && tn * BN + BN <= N) {
                /* the common case (C = A @ B, whole tile inside): convert and store */
                T *row0 = (T *)e.C + dr0 * e.ldc + c0, *row1 = (T *)e.C + dr1 * e.ldc + c0;
                if (add_c) { /* C's old values first, then the bias: gc_gemm_epi2's order */
#pragma unroll
                    for (int j = 0; j < BN / 8; j++) {
                        gc_gemm_add2<T>(row0 + 8 * j, d[4 * j], d[4 * j + 1]);
                        gc_gemm_add2<T>(row1 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
                    }
                }
                wg_bias_relu<T, BN>(d, bias, c0, N, relu);
#pragma unroll
                for (int j = 0; j < BN / 8; j++) {
                    gc_gemm_store2<T>(row0 + 8 * j, d[4 * j], d[4 * j + 1]);
                    gc_gemm_store2<T>(row1 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < BN / 8; j++) {
                    if (r < M) gc_gemm_epi2<T>(e, (int)dr0, c0 + 8 * j, d[4 * j], d[4 * j + 1]);
                    if (r + 8 < M) gc_gemm_epi2<T>(e, (int)dr1, c0 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
                }
            }
        }
        if (ep.mode && tid == 0) wg_bulk_wait0(); /* the last stores are done before the block leaves */
    }
    cluster_sync(); /* the peer may still multicast into / arrive on this block */
#endif
}


/* ------------------------------------------------------------------ host side */
/* 2-D row-major matrix `outer` x `inner` (pitch ld_bytes) cut into boxes of
 * box_outer x box_inner with the 128-byte swizzle. */
inline gc_status wg_make_map_2d(CUtensorMap *m, int dtype, const void *ptr, int64_t inner, int64_t outer,
                                int64_t ld_bytes, int box_inner, int box_outer)
{
    const gc_tma_encode_tiled_fn enc = gc_tma_encoders()->tiled;
    if (!enc)
        return gc_fail(GC_ERR_UNSUPPORTED, "wgmma: the driver has no cuTensorMapEncodeTiled");
    const CUtensorMapDataType t = dtype == GC_F16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                  : dtype == GC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                     : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)outer};
    cuuint64_t strides[1] = {(cuuint64_t)ld_bytes};
    cuuint32_t box[2] = {(cuuint32_t)box_inner, (cuuint32_t)box_outer};
    cuuint32_t estr[2] = {1, 1};
    CUresult r = enc(m, t, 2, (void *)ptr, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return gc_fail(GC_ERR_BACKEND,
                       "wgmma: cuTensorMapEncodeTiled failed (%d) for a %lld x %lld matrix, pitch %lld "
                       "bytes, box %d x %d",
                       (int)r, (long long)outer, (long long)inner, (long long)ld_bytes, box_outer,
                       box_inner);
    return GC_OK;
}

/* Clusters of 2 that can be resident at once (cached per device: every instantiation
 * takes the same resources). */
inline int wg_resident_clusters(const gc_backend *be, const void *kern, cudaLaunchConfig_t *cfg)
{
    static int fit[64];
    const int dev = be->device_index;
    if (dev >= 0 && dev < 64 && fit[dev] > 0) return fit[dev];
    int n = 0;
    cfg->gridDim = dim3(2, 1, 1);
    if (cudaOccupancyMaxActiveClusters(&n, kern, cfg) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = gc_cuda_sm_count(be) / 2;
        if (n < 1) n = 1;
    }
    if (dev >= 0 && dev < 64) fit[dev] = n;
    return n;
}

/* One persistent launch of the kernel (as many clusters of 2 as fit at once, never more
 * than there are tile pairs; an SM left over in a GPC of odd size stays idle).
 * *clusters (optional) receives the cluster count that fit. */
/* The epilogue of a launch (wg_epi): through TMA (mode 1, or 2 = reduce-add for beta 1)
 * for 16-bit C written as a dense matrix (not scattered), alpha 1, beta 0 with a linear
 * or relu act, or beta 1 with a linear one, C and its pitch 16-byte aligned, and a ring
 * of at least 3 stages beside the staging areas; cuda.gemm.wgmma_epi forces it where it
 * applies (tma) or never (regs); auto takes it wherever it applies: it measured faster or
 * level on every ResNet-50 forward and data-gradient GEMM (the short-K ones most) and
 * on the square 4096 / 8192 products, whose long K had kept the register epilogue's
 * deeper ring until both were timed (benchmarks/RESULTS.md). *stages and *smem: the
 * launch's ring depth and dynamic shared memory. */
template <typename T, int AMODE, int BN>
int wg_epi_mode(const gc_backend *be, const gc_gemm_epi_args &e, int *stages, int *smem)
{
    *stages = wg_cfg<BN>::STAGES;
    *smem = wg_cfg<BN>::SMEM;
    if (sizeof(T) != 2 || AMODE == WG_A_TILED_SCATTER || e.alpha != 1.0f) return 0;
    if (!((e.beta == 0.0f && (e.act == GC_ACT_LINEAR || e.act == GC_ACT_RELU)) ||
          (e.beta == 1.0f && e.act == GC_ACT_LINEAR)))
        return 0;
    if (((uintptr_t)e.C % 16) || ((e.ldc * (int64_t)sizeof(T)) % 16)) return 0;
    const int f = gc_variant_forced(GC_VP_CUDA_GEMM_WGMMA_EPI);
    if (f == GC_V_WGEPI_REGS) return 0;
    const int stg = 2 * 64 * BN * (int)sizeof(T);
    const size_t optin = gc_cuda_smem_optin(be);
    int s = wg_cfg<BN>::STAGES;
    while (s > 3 && (size_t)(s * wg_cfg<BN>::STAGE_BYTES + stg + 1024 + 256) > optin) s--;
    if ((size_t)(s * wg_cfg<BN>::STAGE_BYTES + stg + 1024 + 256) > optin) return 0;
    *stages = s;
    *smem = s * wg_cfg<BN>::STAGE_BYTES + stg + 1024 + 256;
    return e.beta != 0.0f ? 2 : 1;
}

template <typename T, bool KMAJ_B, int AMODE, int BN = 256>
gc_status wg_launch(const gc_backend *be, const CUtensorMap &ta, const CUtensorMap &tb, int64_t M, int64_t N,
                    int64_t K, const gc_gemm_epi_args &e, int multicast, const wg_conv &cv, const char *what,
                    int *clusters)
{
    const int64_t ctiles = ((M + 2 * WG_BM - 1) / (2 * WG_BM)) * ((N + BN - 1) / BN);
    auto kern = gc_wgmma_gemm_kernel<T, KMAJ_B, AMODE, BN>;
    wg_epi ep;
    int smem = 0;
    ep.mode = wg_epi_mode<T, AMODE, BN>(be, e, &ep.stages, &smem);
    CUtensorMap tc;
    memset(&tc, 0, sizeof tc);
    if (ep.mode && wg_make_map_2d(&tc, std::is_same<T, __half>::value ? GC_F16 : GC_BF16,
                                  e.C, e.N, e.M, e.ldc * (int64_t)sizeof(T), 64, 64)) {
        gc_clear_error(); /* no map: the register epilogue */
        ep.mode = wg_epi_mode<T, WG_A_TILED_SCATTER, BN>(be, e, &ep.stages, &smem);
    }
    gc_variant_ran(GC_VP_CUDA_GEMM_WGMMA_EPI, ep.mode ? GC_V_WGEPI_TMA : GC_V_WGEPI_REGS);
    GC_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(WG_THREADS, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = gc_cuda_stream(be);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    const int fit = wg_resident_clusters(be, (const void *)kern, &cfg);
    if (clusters) *clusters = fit;
    const unsigned nclusters = (unsigned)(ctiles < fit ? ctiles : fit);
    cfg.gridDim = dim3(2 * nclusters, 1, 1);
    GC_CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, ta, tb, tc, (int)M, (int)N, (int)K, e, multicast, cv, ep));
    return gc_cuda_launch_check(what);
}

} // namespace
