/* gemm_wgmma.cu -- Hopper GEMM: TMA + mbarrier pipeline + wgmma (sm_90a only).
 *
 * What it provides: gc_cuda_gemm_wgmma (f16 / bf16 with fp32 accumulation; f32 as
 * TF32) for big problems on an H100 / H200, and gc_cuda_gemm_wgmma_compiled, which
 * tells whether this binary holds sm_90a code for the running device.
 *
 * Design (the warp-specialised persistent kernel of CUTLASS 3 / DeepGEMM, written
 * out): a block of 3 warpgroups owns one multiprocessor for the whole launch, blocks
 * run in clusters of 2 (grid = 2 x the clusters that fit, 66 on an H200) and walk
 * pairs of vertically adjacent 128 x 256 output tiles in a grouped order (8 pairs of
 * tile-rows at a time, so the blocks running together share A rows and B columns in
 * L2); the pair shares its B slice through TMA multicast (see the kernel).
 *   - Warpgroup 0 is the producer: it gives registers back (setmaxnreg 40) and one of
 *     its threads issues the bulk tensor copies (TMA, cp.async.bulk.tensor with a
 *     CUtensorMap) of the A slice (128 x 128 bytes) and B slice (256 x 128 bytes) of
 *     every K step into a 4-stage ring of 48 KB stages, each stage guarded by a "full"
 *     mbarrier (transaction bytes) and an "empty" one (consumers done).
 *   - Warpgroups 1 and 2 are consumers (setmaxnreg 232): each multiplies its 64 rows
 *     of A by the whole 256-wide B slice with wgmma.m64n256k16 (k8 for TF32) straight
 *     from shared memory into 128 fp32 accumulators per thread, keeps one wgmma group
 *     in flight, frees a stage as soon as the group that read it retires, and runs the
 *     fused epilogue (alpha, beta*C, bias, act, rounding; gemm.cuh) from registers
 *     while the producer is already loading the next tile.
 * Shared-memory layout is the TMA 128-byte swizzle, which is the wgmma canonical
 * layout: K-major operands (A always; B when stored N x K) as rows of 128 bytes, 8-row
 * groups 1024 bytes apart (descriptor SBO); B stored K x N (16-bit only) as four
 * 64-column boxes 8 KB apart (LBO) read with the transpose bit. TMA zero-fills reads
 * past M, N and K, so tails cost nothing in the main loop and only the epilogue is
 * predicated. What it takes directly: A not transposed and 16-byte aligned (pointer and
 * row pitch), B likewise in either layout for 16-bit, B transposed for TF32 (wgmma
 * reads TF32 K-major only); any other case is first copied into that form in the
 * workspace (one pass over the operand, the transpose folded in), which also rounds
 * fp32 operands to nearest TF32 when gc_cuda_gemm_set_tf32_round is on (the default:
 * the tensor cores would truncate). Template parameters: storage type and B's layout
 * (5 kernels); the device code exists only for sm_90a (elsewhere the kernels are empty
 * and gc_cuda_gemm_wgmma_compiled says 0).
 *
 * Measured (H200, 2026-11-29, tests/cuda/test_gemm.cu --bench, vs cuBLASLt on the same
 * card): 8192^3 bf16 765 TFLOP/s (97%), f16 734 (97%), TF32 359 (91%, rounding copies
 * included); 4096^3 bf16 688 (93%), TF32 304 (80%). What mattered: the consumers'
 * remote arrivals must not carry .release.cluster (two MEMBAR.ALL.GPU per K step held
 * the kernel near 440 TFLOP/s); the B multicast is worth ~5% at 8192 (729 without);
 * the plain-store epilogue path matters at 4096 (short K, more epilogues per FLOP).
 */
#include "gemm.cuh"

#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums only: the encoder comes from the driver (tensor_map.cu) */

/* the standalone test's watchdog (tests/cuda/gemm.mk) for the shared mbarrier wait */
#if defined(GC_GEMM_WATCHDOG) && !defined(GC_HOPPER_WATCHDOG)
#define GC_HOPPER_WATCHDOG GC_GEMM_WATCHDOG
#endif
#include "hopper_ptx.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GC_WG_DEVICE 1
#else
#define GC_WG_DEVICE 0
#endif

namespace {

constexpr int WG_BM = 128, WG_BN = 256, WG_STAGES = 4, WG_THREADS = 384;
constexpr int WG_A_BYTES = WG_BM * 128, WG_B_BYTES = WG_BN * 128; /* one K step: 128 bytes of K */
constexpr int WG_STAGE_BYTES = WG_A_BYTES + WG_B_BYTES;           /* 48 KB */
constexpr int WG_SMEM = WG_STAGES * WG_STAGE_BYTES + 1024 /* alignment */ + 256 /* barriers */;


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
__device__ __forceinline__ void cluster_sync()
{
    asm volatile("barrier.cluster.arrive.release.aligned;\n"
                 "barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
/* keeps the compiler from moving accumulator reads/writes across the async region */
__device__ __forceinline__ void wg_fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < 128; i++) asm volatile("" : "+f"(d[i])::"memory");
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

/* d (64 x 256 per warpgroup) += A (64 x k, K-major) * B (k x 256); KMAJ_B: B stored
 * N x K, else K x N (transpose bit). */
template <typename T, bool KMAJ_B> struct wg_mma;
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
template <> struct wg_mma<float, true> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { GC_WG_ASM("wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", ", 1, 1"); }
};
#undef GC_WG_ASM

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
template <typename T, bool KMAJ_B>
__global__ void __launch_bounds__(WG_THREADS, 1)
gc_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap tmA, const __grid_constant__ CUtensorMap tmB,
                     int M, int N, int K, gc_gemm_epi_args e, int mc)
{
#if GC_WG_DEVICE
    constexpr int BKE = 128 / (int)sizeof(T);    /* K elements per stage: 64 or 32 */
    constexpr int KSTEP = sizeof(T) == 2 ? 16 : 8; /* K of one wgmma */
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u; /* 128B-swizzle atoms: 1024-aligned */
    const uint32_t full0 = base + WG_STAGES * WG_STAGE_BYTES, empty0 = full0 + 8 * WG_STAGES;

    const int tiles_m = (M + WG_BM - 1) / WG_BM, tiles_n = (N + WG_BN - 1) / WG_BN;
    const int ctiles_m = (tiles_m + 1) / 2; /* tile-row pairs */
    const int nct = ctiles_m * tiles_n, nk = (K + BKE - 1) / BKE;
    const int cluster = blockIdx.x >> 1, nclusters = gridDim.x >> 1;
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
    uint32_t rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(rank));

    if (threadIdx.x == 0) {
        for (int s = 0; s < WG_STAGES; s++) {
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
                for (int kb = 0; kb < nk; kb++) {
                    mbar_wait(empty0 + 8 * s, phase ^ 1); /* first pass: passes at once */
                    const uint32_t full = full0 + 8 * s;
                    const uint32_t sa = base + s * WG_STAGE_BYTES, sb = sa + WG_A_BYTES;
                    mbar_expect_tx(full, WG_STAGE_BYTES); /* A + both halves of B */
                    /* Boxes that would start past M or N (the spare block of an odd
                     * tile-row count, the far half of B at the N edge) are moved back
                     * inside: what they load only feeds results that are not stored, and
                     * no box is then wholly out of bounds. */
                    tma_load_2d(sa, &tmA, full, kb * BKE, min(tm, tiles_m - 1) * WG_BM);
                    if (!mc) { /* (diagnostic) each block loads all of B itself */
#pragma unroll
                        for (int h = 0; h < (KMAJ_B ? 2 : 4); h++) {
                            if (KMAJ_B)
                                tma_load_2d(sb + h * (WG_B_BYTES / 2), &tmB, full, kb * BKE,
                                            min(tn * WG_BN + h * (WG_BN / 2), N - 1));
                            else
                                tma_load_2d(sb + h * 8192, &tmB, full, min(tn * WG_BN + h * 64, (N - 1) / 64 * 64),
                                            kb * BKE);
                        }
                    } else if (KMAJ_B) {
                        tma_load_2d_mc(sb + rank * (WG_B_BYTES / 2), &tmB, full, kb * BKE,
                                       min(tn * WG_BN + (int)rank * (WG_BN / 2), N - 1), 0x3);
                    } else {
#pragma unroll
                        for (int j = 0; j < 2; j++) {
                            const int jj = 2 * (int)rank + j;
                            tma_load_2d_mc(sb + jj * 8192, &tmB, full, min(tn * WG_BN + jj * 64, (N - 1) / 64 * 64),
                                           kb * BKE, 0x3);
                        }
                    }
                    if (++s == WG_STAGES) { s = 0; phase ^= 1; }
                }
            }
        }
    } else { /* ---------------- consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int cw = wg - 1; /* rows cw*64 .. cw*64+63 of the tile */
        const int warp = tid >> 5, lane = tid & 31;
        const bool plain = e.alpha == 1.0f && e.beta == 0.0f && !e.bias && e.act == GC_ACT_LINEAR && e.vec2;
        float d[128];
        int s = 0;
        uint32_t phase = 0;
        for (int t = cluster; t < nct; t += nclusters) {
            int ctm, tn;
            wg_tile_coords(t, ctiles_m, tiles_n, ctm, tn);
            const int tm = 2 * ctm + (int)rank;
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;
            wg_fence_regs(d);
            int prev = -1;
            for (int kb = 0; kb < nk; kb++) {
                mbar_wait(full0 + 8 * s, phase);
                const uint32_t sa = base + s * WG_STAGE_BYTES + cw * (64 * 128), sb = base + s * WG_STAGE_BYTES + WG_A_BYTES;
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < BKE / KSTEP; kk++) {
                    /* a K step of 32 bytes inside the 128-byte swizzled rows */
                    const uint64_t da = wg_desc(sa + kk * 32, 16, 1024);
                    const uint64_t db = KMAJ_B ? wg_desc(sb + kk * 32, 16, 1024)
                                               : wg_desc(sb + kk * (KSTEP * 128), 8192, 1024);
                    wg_mma<T, KMAJ_B>::run(d, da, db, 1u);
                }
                wg_commit();
                wg_wait<1>(); /* the group before this one has retired: its stage is free */
                if (prev >= 0 && tid == 0) {
                    mbar_arrive_cluster(empty0 + 8 * prev, mc ? 0 : rank);
                    if (mc) mbar_arrive_cluster(empty0 + 8 * prev, 1);
                }
                prev = s;
                if (++s == WG_STAGES) { s = 0; phase ^= 1; }
            }
            wg_wait<0>();
            wg_fence_regs(d);
            if (prev >= 0 && tid == 0) {
                mbar_arrive_cluster(empty0 + 8 * prev, mc ? 0 : rank);
                if (mc) mbar_arrive_cluster(empty0 + 8 * prev, 1);
            }

            /* epilogue from registers: d[4j + {0,1}] at (row, 8j + 2q + {0,1}),
             * d[4j + {2,3}] at row + 8 */
            const int r = tm * WG_BM + cw * 64 + warp * 16 + (lane >> 2);
            const int c0 = tn * WG_BN + 2 * (lane & 3);
            if (plain && r + 8 < M && tn * WG_BN + WG_BN <= N) {
                /* the common case (C = A @ B, whole tile inside): convert and store */
                T *row0 = (T *)e.C + (int64_t)r * e.ldc + c0, *row1 = row0 + 8 * e.ldc;
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    gc_gemm_store2<T>(row0 + 8 * j, d[4 * j], d[4 * j + 1]);
                    gc_gemm_store2<T>(row1 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
                }
            } else {
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    if (r < M) gc_gemm_epi2<T>(e, r, c0 + 8 * j, d[4 * j], d[4 * j + 1]);
                    if (r + 8 < M) gc_gemm_epi2<T>(e, r + 8, c0 + 8 * j, d[4 * j + 2], d[4 * j + 3]);
                }
            }
        }
    }
    cluster_sync(); /* the peer may still multicast into / arrive on this block */
#endif
}

/* Holds 256 bytes of static shared memory in sm_90a code only: cudaFuncGetAttributes
 * on it tells which image the driver picked for this device. */
__global__ void gc_gemm_wgmma_probe(int *p)
{
#if GC_WG_DEVICE
    __shared__ int s[64];
    s[threadIdx.x & 63] = (int)threadIdx.x;
    __syncthreads();
    if (p) p[threadIdx.x] = s[(threadIdx.x + 1) & 63];
#endif
}

/* ------------------------------------------------------------------ host side */
/* 2-D row-major matrix `outer` x `inner` (pitch ld_bytes) cut into boxes of
 * box_outer x box_inner with the 128-byte swizzle. */
gc_status make_map(CUtensorMap *m, int dtype, const void *ptr, int64_t inner, int64_t outer,
                   int64_t ld_bytes, int box_inner, int box_outer)
{
    const gc_tma_encode_tiled_fn enc = gc_tma_encoders()->tiled;
    if (!enc)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: the driver has no cuTensorMapEncodeTiled");
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
                       "gemm: cuTensorMapEncodeTiled failed (%d) for a %lld x %lld matrix, pitch %lld "
                       "bytes, box %d x %d",
                       (int)r, (long long)outer, (long long)inner, (long long)ld_bytes, box_outer,
                       box_inner);
    return GC_OK;
}

int aligned16(const void *p, int64_t ld, int es)
{
    return ((uintptr_t)p % 16 == 0) && ((ld * es) % 16 == 0);
}

int g_multicast = 1;

/* Clusters of 2 that can be resident at once (cached per device: the same for every
 * instantiation, which all take the same resources). */
int g_fit[64];
int resident_clusters(const gc_backend *be, const void *kern, cudaLaunchConfig_t *cfg)
{
    const int dev = be->device_index;
    if (dev >= 0 && dev < 64 && g_fit[dev] > 0) return g_fit[dev];
    int n = 0;
    cfg->gridDim = dim3(2, 1, 1);
    if (cudaOccupancyMaxActiveClusters(&n, kern, cfg) != cudaSuccess || n < 1) {
        (void)cudaGetLastError();
        n = gc_cuda_sm_count(be) / 2;
        if (n < 1) n = 1;
    }
    if (dev >= 0 && dev < 64) g_fit[dev] = n;
    return n;
}

template <typename T, bool KMAJ_B>
gc_status launch_wgmma(const gc_backend *be, const void *A, int64_t lda, const void *B,
                       int64_t ldb, const gc_gemm_desc *d)
{
    const int es = (int)sizeof(T), bke = 128 / es;
    CUtensorMap ta, tb;
    gc_status st = make_map(&ta, d->dtype, A, d->K, d->M, lda * es, bke, WG_BM);
    if (st) return st;
    if (KMAJ_B) st = make_map(&tb, d->dtype, B, d->K, d->N, ldb * es, bke, WG_BN / 2);
    else st = make_map(&tb, d->dtype, B, d->N, d->K, ldb * es, 64, bke);
    if (st) return st;
    const int64_t ctiles = ((d->M + 2 * WG_BM - 1) / (2 * WG_BM)) * ((d->N + WG_BN - 1) / WG_BN);
    auto kern = gc_gemm_wgmma_kernel<T, KMAJ_B>;
    GC_CUDA_TRY(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, WG_SMEM));
    cudaLaunchConfig_t cfg;
    memset(&cfg, 0, sizeof cfg);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(WG_THREADS, 1, 1);
    cfg.dynamicSmemBytes = WG_SMEM;
    cfg.stream = gc_cuda_stream(be);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    /* persistent: as many clusters as fit at once (an SM left over in a GPC of odd size
     * stays idle), never more than there are tile pairs */
    int fit = resident_clusters(be, (const void *)kern, &cfg);
    const unsigned nclusters = (unsigned)(ctiles < fit ? ctiles : fit);
    cfg.gridDim = dim3(2 * nclusters, 1, 1);
    GC_CUDA_TRY(cudaLaunchKernelEx(&cfg, kern, ta, tb, (int)d->M, (int)d->N, (int)d->K, gc_gemm_epi_of(d),
                                   g_multicast));
    return gc_cuda_launch_check("gemm (wgmma)");
}

int g_tf32_round = 1;
int g_compiled[64]; /* per device: 0 unknown, 1 yes, 2 no */

} // namespace

extern "C" void gc_cuda_gemm_set_tf32_round(int on) { g_tf32_round = on != 0; }

extern "C" void gc_cuda_gemm_set_wgmma_multicast(int on) { g_multicast = on != 0; }

extern "C" int gc_cuda_gemm_wgmma_clusters(const gc_backend *be)
{
    const int dev = be->device_index;
    return dev >= 0 && dev < 64 ? g_fit[dev] : 0;
}

extern "C" int gc_cuda_gemm_wgmma_compiled(const gc_backend *be)
{
    if (gc_cuda_cc(be) != 90) return 0; /* sm_90a code runs on compute capability 9.0 only */
    const int dev = be->device_index;
    if (dev >= 0 && dev < 64 && g_compiled[dev]) return g_compiled[dev] == 1;
    cudaFuncAttributes fa;
    int yes = 0;
    if (cudaFuncGetAttributes(&fa, gc_gemm_wgmma_probe) == cudaSuccess)
        yes = fa.sharedSizeBytes >= 256;
    else
        (void)cudaGetLastError();
    if (yes && !gc_tma_encoders()->tiled) yes = 0;
    if (yes && gc_cuda_smem_optin(be) < (size_t)WG_SMEM) yes = 0;
    if (dev >= 0 && dev < 64) g_compiled[dev] = yes ? 1 : 2;
    return yes;
}

extern "C" gc_status gc_cuda_gemm_wgmma(const gc_backend *be, const gc_gemm_desc *d)
{
    if (!gc_cuda_gemm_wgmma_compiled(be)) return GC_ERR_UNSUPPORTED;
    if (d->M > 0x7fffffffLL || d->N > 0x7fffffffLL || d->K > 0x7fffffffLL) return GC_ERR_UNSUPPORTED;
    const int es = (int)gc_dtype_size((gc_dtype)d->dtype);
    const int f32 = d->dtype == GC_F32;
    /* What the kernel reads directly: A K-major, B K-major (TF32) or either (16-bit),
     * 16-byte aligned; f32 with rounding always goes through a rounded copy. */
    const int copy_a = d->trans_a || !aligned16(d->A, d->lda, es) || (f32 && g_tf32_round);
    const int copy_b = !aligned16(d->B, d->ldb, es) || (f32 && (!d->trans_b || g_tf32_round));
    const void *A = d->A, *B = d->B;
    int64_t lda = d->lda, ldb = d->ldb;
    int kmaj_b = d->trans_b;
    if (copy_a || copy_b) {
        const int64_t ldk = (d->K + 7) / 8 * 8; /* 16-byte aligned rows for either size */
        const size_t bytes_a = copy_a ? (size_t)(d->M * ldk * es + 255) / 256 * 256 : 0;
        const size_t bytes_b = copy_b ? (size_t)(d->N * ldk * es) : 0;
        void *ws = NULL;
        gc_status st = gc_cuda_workspace(be, bytes_a + bytes_b, &ws);
        if (st) return st;
        const int rnd = f32 && g_tf32_round;
        if (copy_a) {
            void *dst = ws;
            if (d->trans_a) /* A stored K x M -> M x K */
                st = gc_cuda_gemm_transpose(be, d->dtype, d->K, d->M, d->A, d->lda, dst, ldk, rnd);
            else if (rnd)
                st = gc_cuda_gemm_round_tf32(be, d->M, d->K, (const float *)d->A, d->lda, (float *)dst, ldk);
            else {
                GC_CUDA_TRY(cudaMemcpy2DAsync(dst, ldk * es, d->A, d->lda * es, d->K * es, d->M,
                                              cudaMemcpyDeviceToDevice, gc_cuda_stream(be)));
            }
            if (st) return st;
            A = dst;
            lda = ldk;
        }
        if (copy_b) {
            void *dst = (char *)ws + bytes_a;
            if (!d->trans_b) /* B stored K x N -> N x K */
                st = gc_cuda_gemm_transpose(be, d->dtype, d->K, d->N, d->B, d->ldb, dst, ldk, rnd);
            else if (rnd)
                st = gc_cuda_gemm_round_tf32(be, d->N, d->K, (const float *)d->B, d->ldb, (float *)dst, ldk);
            else {
                GC_CUDA_TRY(cudaMemcpy2DAsync(dst, ldk * es, d->B, d->ldb * es, d->K * es, d->N,
                                              cudaMemcpyDeviceToDevice, gc_cuda_stream(be)));
            }
            if (st) return st;
            B = dst;
            ldb = ldk;
            kmaj_b = 1;
        }
    }
    switch (d->dtype) {
    case GC_F16:
        return kmaj_b ? launch_wgmma<__half, true>(be, A, lda, B, ldb, d)
                      : launch_wgmma<__half, false>(be, A, lda, B, ldb, d);
    case GC_BF16:
        return kmaj_b ? launch_wgmma<__nv_bfloat16, true>(be, A, lda, B, ldb, d)
                      : launch_wgmma<__nv_bfloat16, false>(be, A, lda, B, ldb, d);
    case GC_F32: return launch_wgmma<float, true>(be, A, lda, B, ldb, d);
    default: return GC_ERR_UNSUPPORTED;
    }
}
