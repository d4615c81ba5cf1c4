/* conv2d_wgmma.cu -- Hopper (sm_90a) forward convolution on wgmma + TMA, warp-specialised
 * and persistent: two kernels behind one entry point.
 *
 * What: gc_conv2d_wgmma_fwd computes y = act(conv(x, w) + bias) for NHWC f16 / bf16
 * storage with fp32 accumulation, stride 1, dilation 1, C % 64 == 0, F % 64 == 0, on an
 * H100 / H200; gc_conv2d_wgmma_bwd_data the data gradient dx of such a layer (on the
 * halo kernel: the forward convolution of dy with the flipped kernel, C and F swapped).
 * Both entry points first hand the layer to conv2d_wgmma_igemm.cu (the GEMM kernel with
 * an im2col A, any stride) where cuda.conv2d.fwd_wgmma says igemm or its automatic
 * choice takes it (the big weight slices, the strided layers); float32 (as TF32) runs
 * only there: both kernels of this file refuse it (cw_layer_why, gc_conv2d_wgmma_check).
 * Everything else returns GC_ERR_UNSUPPORTED before anything is launched, and conv2d.cu
 * falls back to the mma.sync implicit GEMM (conv_igemm_kernel).
 *
 * 1. The halo kernel (gc_conv_halo_kernel, the one taken wherever its shared memory fits:
 *    3x3 with C = 64, 1x1 up to C = 1024, for any F). It computes the product
 *    transposed, Y^T = W^T . X^T, so that the input crosses L2 -> SM about 1.4 times
 *    instead of KH * KW times: each 8 x BH output tile's input halo is one tiled TMA box
 *    per 64 channels, and every tap reads it through a shifted shared-memory descriptor
 *    (see the kernel's comment). The weights are the A operand (64 filters = the wgmma
 *    M), resident and read as stored; N = 224 or 256 pixels per wgmma.
 * 2. The im2col kernel (gc_conv_wgmma_kernel, for larger weight slices): M = N*OH*OW
 *    pixels, N = F, K = KH*KW*C ordered (kh, kw, c); one K-block of 64 halves is one
 *    tap's 64-channel slice, loaded by a TMA copy in im2col mode (cp.async.bulk.tensor.4d
 *    ... .im2col) of the NHWC input seen as a (C, W, H, N) tensor: the coordinates name
 *    the first pixel's filter corner (q - pad_left, p - pad_top, n), the im2col offsets
 *    the tap (kw, kh), the box corners of the tensor map bound the filter corners of the
 *    output pixels (lower = -pad, upper = OW - W - pad_left, ...), and the copy walks
 *    128 pixels along W, then H, then N (tiles that cross rows, images and the end of the
 *    batch need nothing special; padding and rows past M arrive as zeros). The 128-byte
 *    swizzle of the copy is the wgmma canonical K-major layout. Each block keeps its
 *    64-column slice of W^T (F, KH*KW*C, transposed into the workspace first) resident.
 * Both: block of 3 warpgroups, one per SM, persistent; block b owns the filter tile
 * tn = b % tiles_n and walks the pixel tiles b / tiles_n, + gm, + 2 gm, ... (adjacent
 * blocks on adjacent tiles share input rows in L2). Warpgroup 0, one thread: the
 * producer (weights once, then the ring of TMA stages, full / empty mbarriers).
 * Warpgroups 1 and 2: consumers in ping-pong (CUTLASS's "pingpong" schedule): consumer w
 * takes the block's tiles w, w+2, ... whole, their mainloops take turns (named-barrier
 * hand-over) so one runs its epilogue while the other multiplies, and each retires a
 * stage as soon as the wgmma group that read it has completed. Epilogue: bias and
 * activation in fp32, rounding to the storage type, into a staging tile in the 128-byte
 * swizzle, then one asynchronous TMA tensor store per tile (the copy engine clips what
 * lies past the output).
 * Device code exists only for sm_90a (GC_CW_DEVICE); other targets compile empty kernels
 * and gc_conv2d_wgmma_fwd reports GC_ERR_UNSUPPORTED (probe kernel, as in gemm_wgmma.cu).
 * The PTX primitives both wgmma files use come from hopper_ptx.cuh.
 *
 * Measured (H200, 2026-11-29, tests/cuda/test_conv.cu wgbench, 3x3 64->64 56x56 batch 64
 * 'same', graph-timed): forward, halo f16 573 TFLOP/s (25.8 us), bf16 582; im2col 209 /
 * 211; mma.sync 159 / 161; cuDNN 346 / 344 (halo / cuDNN 1.66 / 1.69). Data gradient:
 * halo 570 / 577, mma.sync 166 / 165, cuDNN 306 / 305. Why the im2col kernel stays
 * at ~210: the same launch without its wgmma (loads only) takes 61 us and without its
 * loads 75 us -- the KH*KW-fold im2col traffic and the m64n64 instruction both cap it.
 * Halo ring depth 2..4 makes no difference. Correctness: wgtest (float64 reference,
 * mma.sync, shortest ring on 3 blocks bitwise, graph replay) for both kernels and the
 * data gradient, also under compute-sanitizer memcheck (0 errors).
 */
#include "conv2d_internal.cuh"

#include <limits.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums only: the encoders come from the driver (tensor_map.cu) */

/* the device test's watchdog (tests/cuda/conv_wgmma_device.sh) for the shared mbarrier wait */
#if defined(GC_CONV_WATCHDOG) && !defined(GC_HOPPER_WATCHDOG)
#define GC_HOPPER_WATCHDOG GC_CONV_WATCHDOG
#endif
#include "hopper_ptx.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GC_CW_DEVICE 1
#else
#define GC_CW_DEVICE 0
#endif

/* Variant points (gpucmp_variants.h; tests/cuda/test_conv.cu forces them):
 * cuda.conv2d.fwd_wgmma, which kernel: auto = the halo kernel where it fits, else the
 * im2col one; halo (GC_ERR_UNSUPPORTED where it does not fit); im2col. Knobs
 * cuda.conv2d.wgmma_stages (ring depth cap; auto = as many stages as fit) and
 * cuda.conv2d.wgmma_blocks (cap on the blocks per column tile; auto = one per SM), so
 * that small problems also give each block several tiles (ring wrap-around, the
 * consumers' hand-over, staging reuse). */

namespace {

constexpr int CW_BM = 128;         /* output pixels per tile (one consumer warpgroup) */
constexpr int CW_BN = 64;          /* output channels per tile */
constexpr int CW_BK = 64;          /* K elements per block: 128 bytes of 16-bit values */
constexpr int CW_THREADS = 384;    /* producer + 2 consumer warpgroups */
constexpr int CW_A_BYTES = CW_BM * 128;     /* 16 KB: one im2col box */
constexpr int CW_B_BLOCK = CW_BN * 128;     /* 8 KB: one K-block of the B slice */
constexpr int CW_OUT_BYTES = CW_BM * CW_BN * 2; /* 16 KB staging tile per consumer */
constexpr int CW_MAX_STAGES = 8;
constexpr int CW_BAR_BYTES = 256;  /* full[8], empty[8], bfull */

/* dynamic shared memory of a launch: alignment slack + ring + B slice + staging + barriers */
size_t cw_smem_bytes(int stages, int nk)
{
    return 1024 + (size_t)stages * CW_A_BYTES + (size_t)nk * CW_B_BLOCK + 2 * CW_OUT_BYTES + CW_BAR_BYTES;
}

struct cw_params {
    int M;            /* N*OH*OW */
    int OH, OW;
    int pad_top, pad_left;
    int KW, cchunks;  /* taps per row of the kernel, C / 64 */
    int nk;           /* K-blocks: KH*KW*C / 64 */
    int tiles_m, tiles_n, gm; /* gm: blocks per column tile */
    int stages;
    int act;
    const void *bias; /* F values or NULL */
};

#if GC_CW_DEVICE
using namespace gc_hopper; /* smem_u32, mbar_*, tma_load_2d, wg_fence / commit / wait */
/* after a launch's mbarrier inits (one thread): fence them for the async proxy and start
 * fetching its three tensor maps */
__device__ __forceinline__ void cw_fence_init_prefetch(const CUtensorMap *a, const CUtensorMap *b,
                                                       const CUtensorMap *c)
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)a) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)b) : "memory");
    asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)c) : "memory");
}
__device__ __forceinline__ void cw_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* shared -> global tiled 2-D box (bulk async group of the issuing thread) */
__device__ __forceinline__ void cw_tma_store_2d(const CUtensorMap *map, uint32_t src, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group [%0, {%2, %3}], [%1];\n" ::"l"(
                     (uint64_t)map),
                 "r"(src), "r"(c0), "r"(c1)
                 : "memory");
}
__device__ __forceinline__ void cw_bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
/* the issuing thread's stores have finished reading shared memory */
__device__ __forceinline__ void cw_bulk_wait_read0()
{
    asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
}
/* ... and are complete (written to global memory) */
__device__ __forceinline__ void cw_bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* generic-proxy shared-memory writes made visible to the async proxy (TMA store) */
__device__ __forceinline__ void cw_fence_proxy_async()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* barrier among the 128 threads of one consumer warpgroup (ids 1 and 2; 0 is __syncthreads) */
__device__ __forceinline__ void cw_wg_bar(int id)
{
    asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
/* the mainloop hand-over between the two consumer warpgroups (ids 3 and 4): one
 * warpgroup arrives (does not wait), the other waits for those 128 arrivals */
__device__ __forceinline__ void cw_turn_wait(int id)
{
    asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void cw_turn_give(int id)
{
    asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void cw_st_shared_u32(uint32_t addr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(addr), "r"(v) : "memory");
}
/* keeps the compiler from moving reads / writes of N accumulators across the async region */
template <int N> __device__ __forceinline__ void cw_fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* shared-memory matrix descriptor, 128-byte swizzle (K-major: LBO unused, SBO = 1024
 * bytes between 8-row groups) */
__device__ __forceinline__ uint64_t cw_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(16 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

#define CW_D32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15," \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define CW_DOUT32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define CW_MMA(instr)                                                                   \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" instr " {" CW_D32        \
                 "}, %32, %33, p, 1, 1, 0, 0;\n}\n"                                     \
                 : CW_DOUT32                                                            \
                 : "l"(da), "l"(db), "r"(scale_d))

/* d (64 x 64 per warpgroup, fp32) += A (64 x 16, K-major) * B (16 x 64, stored N x K) */
template <typename T> struct cw_mma;
template <> struct cw_mma<__half> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { CW_MMA("wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16"); }
};
template <> struct cw_mma<__nv_bfloat16> {
    static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d)
    { CW_MMA("wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16"); }
};
#undef CW_MMA

__device__ __forceinline__ uint32_t cw_bits(__half v) { return (uint32_t)__half_as_ushort(v); }
__device__ __forceinline__ uint32_t cw_bits(__nv_bfloat16 v) { return (uint32_t)__bfloat16_as_ushort(v); }
/* two results rounded to T, the first in the low half (lower address) */
template <typename T> __device__ __forceinline__ uint32_t cw_pack2(float a, float b)
{
    return cw_bits(gc_from_f<T>(a)) | (cw_bits(gc_from_f<T>(b)) << 16);
}
#endif /* GC_CW_DEVICE */

/* ------------------------------------------------------------------ the kernel
 * Shared memory (from a 1024-aligned base): ring [stages][16 KB] | B slice [nk][8 KB]
 * (64 rows of W^T x 128 bytes per K-block) | staging [2][16 KB] | barriers. */
template <typename T>
__global__ void __launch_bounds__(CW_THREADS, 1)
gc_conv_wgmma_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW,
                     const __grid_constant__ CUtensorMap tmY, const cw_params p)
{
#if GC_CW_DEVICE
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u; /* 128B-swizzle atoms: 1024-aligned */
    const int S = p.stages, nk = p.nk;
    const uint32_t bslice = base + (uint32_t)S * CW_A_BYTES;
    const uint32_t stage_out = bslice + (uint32_t)nk * CW_B_BLOCK;
    const uint32_t full0 = stage_out + 2 * CW_OUT_BYTES, empty0 = full0 + 8 * CW_MAX_STAGES;
    const uint32_t bfull = empty0 + 8 * CW_MAX_STAGES;

    const int tn = (int)blockIdx.x % p.tiles_n;  /* this block's column tile, fixed */
    const int tm0 = (int)blockIdx.x / p.tiles_n; /* its first row tile; then + gm, + 2 gm, ... */
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full0 + 8 * s, 1);  /* the producer's expect_tx arrival */
            mbar_init(empty0 + 8 * s, 1); /* the consuming warpgroup's arrival */
        }
        mbar_init(bfull, 1);
        cw_fence_init_prefetch(&tmX, &tmW, &tmY);
    }
    __syncthreads();

    if (wg == 0) { /* ---------------- producer: one thread */
        if (tid == 0) {
            /* the B slice: rows tn*64 .. +63 of W^T, all K-blocks, once */
            mbar_expect_tx(bfull, (uint32_t)nk * CW_B_BLOCK);
            for (int kb = 0; kb < nk; kb++)
                tma_load_2d(bslice + (uint32_t)kb * CW_B_BLOCK, &tmW, bfull, kb * CW_BK, tn * CW_BN);
            const int OHW = p.OH * p.OW;
            int s = 0;
            uint32_t phase = 0;
            for (int tm = tm0; tm < p.tiles_m; tm += p.gm) {
                /* filter corner of the tile's first pixel (inside the box by construction) */
                const int m0 = tm * CW_BM;
                const int n0 = m0 / OHW, r0 = m0 - n0 * OHW;
                const int p0 = r0 / p.OW, q0 = r0 - p0 * p.OW;
                const int w0 = q0 - p.pad_left, h0 = p0 - p.pad_top;
                int cc = 0, kw = 0, kh = 0; /* K-block kb = ((kh * KW) + kw) * cchunks + cc */
                for (int kb = 0; kb < nk; kb++) {
                    mbar_wait(empty0 + 8 * s, phase ^ 1); /* first pass: passes at once */
                    const uint32_t full = full0 + 8 * s;
                    mbar_expect_tx(full, CW_A_BYTES);
                    tma_load_im2col_4d(base + (uint32_t)s * CW_A_BYTES, &tmX, full, cc * CW_BK, w0, h0, n0,
                                       (uint16_t)kw, (uint16_t)kh);
                    if (++cc == p.cchunks) {
                        cc = 0;
                        if (++kw == p.KW) {
                            kw = 0;
                            kh++;
                        }
                    }
                    if (++s == S) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else { /* ---------------- consumers: warpgroup w takes the block's tiles w, w+2, ... */
        const int w = wg - 1;
        const int warp = tid >> 5, lane = tid & 31;
        const int q = lane & 3, g = lane >> 2;
        /* bias of this thread's columns (fixed for the launch): 8j + 2q + {0, 1} */
        float bv[16];
        const T *bias = (const T *)p.bias;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = tn * CW_BN + 8 * j + 2 * q;
            bv[2 * j] = bias ? gc_to_f(bias[c]) : 0.0f;
            bv[2 * j + 1] = bias ? gc_to_f(bias[c + 1]) : 0.0f;
        }
        const uint32_t out = stage_out + (uint32_t)w * CW_OUT_BYTES;
        float d0[32], d1[32]; /* rows 0..63 and 64..127 of the tile */
        const int ntiles = (p.tiles_m - tm0 + p.gm - 1) / p.gm; /* the block's tiles */
        mbar_wait(bfull, 0);
        for (int i = w; i < ntiles; i += 2) {
            const int tm = tm0 + i * p.gm;
            /* Mainloops take turns (tile i starts after tile i-1's mainloop has passed its
             * last full-barrier wait): a warpgroup then never waits on a ring stage whose
             * previous fill (the other warpgroup's) has not completed, which the phase
             * parity alone could not tell from this fill. The epilogue of one overlaps the
             * mainloop of the other. */
            if (i > 0) cw_turn_wait(3 + w);
#pragma unroll
            for (int j = 0; j < 32; j++) {
                d0[j] = 0.0f;
                d1[j] = 0.0f;
            }
            cw_fence_regs<32>(d0);
            cw_fence_regs<32>(d1);
            int prev = -1;
            int it = i * nk; /* ring position of the tile's first K-block */
            for (int kb = 0; kb < nk; kb++, it++) {
                const int s = it % S;
                mbar_wait(full0 + 8 * s, (uint32_t)(it / S) & 1u);
                const uint32_t sa = base + (uint32_t)s * CW_A_BYTES;
                const uint32_t sb = bslice + (uint32_t)kb * CW_B_BLOCK;
                wg_fence();
#pragma unroll
                for (int kk = 0; kk < CW_BK / 16; kk++) { /* K steps of 32 bytes in the 128-byte rows */
                    const uint64_t db = cw_desc(sb + kk * 32);
                    cw_mma<T>::run(d0, cw_desc(sa + kk * 32), db, 1u);
                    cw_mma<T>::run(d1, cw_desc(sa + 64 * 128 + kk * 32), db, 1u);
                }
                wg_commit();
                wg_wait<1>(); /* the group before this one has retired: its stage is free */
                if (prev >= 0 && tid == 0) cw_mbar_arrive(empty0 + 8 * prev);
                prev = s;
            }
            if (i + 1 < ntiles) cw_turn_give(3 + (1 - w)); /* tile i+1 (the other warpgroup's) may start */
            wg_wait<0>();
            cw_fence_regs<32>(d0);
            cw_fence_regs<32>(d1);
            if (prev >= 0 && tid == 0) cw_mbar_arrive(empty0 + 8 * prev);

            /* epilogue. d[4j + {0,1}] is (row 16*warp + g, column 8j + 2q + {0,1}) of the
             * m64 half, d[4j + {2,3}] the same 8 rows below. The staging tile is 128 rows
             * of 128 bytes in the 128-byte swizzle of tmY: 16-byte chunk c of row r at
             * r*128 + ((c ^ (r & 7)) * 16), and r & 7 == g here. */
            if (tid == 0) cw_bulk_wait_read0(); /* the previous store has read the staging tile */
            cw_wg_bar(1 + w);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const float *d = h ? d1 : d0;
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int r = h * 64 + warp * 16 + g + 8 * half;
                    const uint32_t row = out + (uint32_t)r * 128 + 4 * q;
#pragma unroll
                    for (int j = 0; j < 8; j++) {
                        const float v0 = conv_act(d[4 * j + 2 * half] + bv[2 * j], p.act);
                        const float v1 = conv_act(d[4 * j + 2 * half + 1] + bv[2 * j + 1], p.act);
                        cw_st_shared_u32(row + (uint32_t)((j ^ g) * 16), cw_pack2<T>(v0, v1));
                    }
                }
            }
            cw_fence_proxy_async(); /* each writer, before the barrier the store waits on */
            cw_wg_bar(1 + w);
            if (tid == 0) {
                cw_tma_store_2d(&tmY, out, tn * CW_BN, tm * CW_BM);
                cw_bulk_commit();
            }
        }
        if (tid == 0) cw_bulk_wait0(); /* the last store is complete before the block exits */
    }
#endif
}

/* ------------------------------------------------------------------ the halo kernel
 * The same convolution for layers whose weight slice leaves room for two halo stages,
 * computed transposed, Y^T = W^T . X^T, so that the input can be read once per tile:
 *   - An output tile is 8 columns x BH rows of one image (BH = 28 or 32, so N = 8 BH =
 *     224 or 256 pixels, the wgmma N). Its input halo, (8 + KW - 1) x (BH + KH - 1)
 *     pixels x 64 channels, is ONE tiled TMA box per 64-channel chunk (zero fill
 *     outside the image is the padding), stored as 128-byte pixel rows in the 128-byte
 *     swizzle.
 *   - Tap (kh, kw) reads that box shifted: output row r's 8 pixels are the 8
 *     consecutive halo rows from (r + kh) * HW + kw (HW = halo width), so the B operand
 *     (N x 16 channels, K-major) is a descriptor starting at row kh * HW + kw with
 *     8-row groups HW * 128 bytes apart (SBO). No im2col copy, no register staging: the
 *     input crosses L2 -> SM (8 + KW - 1)(BH + KH - 1) / (8 BH) ~ 1.4 times instead of
 *     KH * KW times.
 *   - The A operand is the 64-filter slice of w, resident for the launch, read as
 *     stored ((KH*KW*C) x F rows, F-major: the transpose bit) -- no weight transpose.
 *   - One wgmma .m64n224/256k16 per 16 channels of a tap: 4 per tap and chunk.
 *   - Producer warpgroup + two consumers in ping-pong (as the im2col kernel); the
 *     accumulators (filter rows, pixel columns) go back through stmatrix .trans into a
 *     staging tile of pixel rows shared by the two consumers in turn, and one 4-D TMA
 *     store (box 64 x 8 x BH x 1; the copy engine clips columns and rows past the image),
 *     or with p.reduce the copy engine's reduce-add of that box (a data gradient added to
 *     the one already in dx, the plan's fan-out: no staging pass, no separate add).
 *   - The activation is a template parameter: a run-time switch unrolled over 128
 *     accumulators made the kernel too big for the instruction cache.
 * Shared memory (1024-aligned base): ring [stages][halo box, rounded to 1 KB] |
 * A slice [nk][8 KB] | staging [8 BH x 128 bytes] | barriers. */
constexpr int CH_BW = 8;          /* output columns per tile: one 8-row group per output row */
constexpr int CH_MAX_STAGES = 4;

struct ch_params {
    int OH, OW, pad_top, pad_left;
    int KH, KW, cchunks, nk;
    int HW;                       /* halo width in pixels: 8 + KW - 1 */
    int stage_bytes, box_bytes;
    int wrows;                    /* data gradient: rows of w per tap (the layer's C) */
    int tiles_q, tiles_p, tiles_m, tiles_n, gm;
    int stages;
    int reduce;                   /* 1: the tile stores add to y (TMA reduce-add): dx += */
    const void *bias;
};

/* bytes of one halo box and of its ring stage (1024-aligned) */
int ch_box_bytes(int BH, int KH, int KW) { return (CH_BW + KW - 1) * (BH + KH - 1) * 128; }
int ch_stage_bytes(int BH, int KH, int KW) { return (ch_box_bytes(BH, KH, KW) + 1023) & ~1023; }
size_t ch_smem_bytes(int stages, int nk, int BH, int KH, int KW)
{
    return 1024 + (size_t)stages * ch_stage_bytes(BH, KH, KW) + (size_t)nk * CW_B_BLOCK +
           (size_t)CH_BW * BH * 128 + CW_BAR_BYTES;
}

#if GC_CW_DEVICE
/* 4-D tiled box (C, W, H, N) into shared memory */
__device__ __forceinline__ void ch_tma_load_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1,
                                               int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
__device__ __forceinline__ void ch_tma_store_4d(const CUtensorMap *map, uint32_t src, int c0, int c1, int c2, int c3)
{
    asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.bulk_group [%0, {%2, %3, %4, %5}], [%1];\n" ::"l"(
                     (uint64_t)map),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
/* the same box added element by element to what global memory holds (the copy engine's
 * reduction, in the map's element type) */
__device__ __forceinline__ void ch_tma_reduce_add_4d(const CUtensorMap *map, uint32_t src, int c0, int c1, int c2,
                                                     int c3)
{
    asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group [%0, {%2, %3, %4, %5}], "
                 "[%1];\n" ::"l"((uint64_t)map),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
                 : "memory");
}
/* A: MN-major, 128-byte swizzle: rows of 64 filters (128 bytes) along K, 8-row groups
 * 1024 bytes apart (SBO); 64 filters are one swizzle atom wide, so LBO is never used */
__device__ __forceinline__ uint64_t ch_desc_a(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(8192 >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}
/* B: K-major, 128-byte swizzle, 8-row groups sbo bytes apart, starting at any 128-byte
 * row of a swizzle pattern that TMA wrote 1024-aligned. The base-offset field stays 0:
 * the hardware swizzles by the absolute address bits, as TMA does (measured on the H200:
 * setting it to the start row, (addr >> 7) & 7, gives wrong sums). */
__device__ __forceinline__ uint64_t ch_desc_b(uint32_t addr, uint32_t sbo)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)((sbo >> 4) & 0x3FFF) << 32) |
           (1ull << 62);
}
/* TA: A's transpose bit (1: A stored K x M, the forward's weights; 0: K-major, the
 * data gradient's) */
template <typename T, int NPX, int TA> struct ch_mma;
#define CH_MMA_DEF(T, NPX, TA, instr, DREGS, DOUTS, IA, IB, IS)                                 \
    template <> struct ch_mma<T, NPX, TA> {                                                      \
        static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db, uint32_t scale_d) \
        {                                                                                        \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n" instr " {" DREGS "}, %" IA \
                         ", %" IB ", p, 1, 1, " #TA ", 0;\n}\n"                                  \
                         : DOUTS                                                                 \
                         : "l"(da), "l"(db), "r"(scale_d));                                      \
        }                                                                                        \
    };
#define CH_MMA_DEFS(TA)                                                                                         \
    CH_MMA_DEF(__half, 256, TA, "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16", GC_WG_DREGS, GC_WG_DOUTS, \
               "128", "129", "130")                                                                           \
    CH_MMA_DEF(__half, 224, TA, "wgmma.mma_async.sync.aligned.m64n224k16.f32.f16.f16", GC_WG_DREGS112,          \
               GC_WG_DOUTS112, "112", "113", "114")                                                            \
    CH_MMA_DEF(__nv_bfloat16, 256, TA, "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16", GC_WG_DREGS,    \
               GC_WG_DOUTS, "128", "129", "130")                                                               \
    CH_MMA_DEF(__nv_bfloat16, 224, TA, "wgmma.mma_async.sync.aligned.m64n224k16.f32.bf16.bf16", GC_WG_DREGS112, \
               GC_WG_DOUTS112, "112", "113", "114")
CH_MMA_DEFS(1)
CH_MMA_DEFS(0)
#undef CH_MMA_DEFS
#undef CH_MMA_DEF
/* four 8x8 16-bit matrices stored transposed: lane l gives the address of row l % 8 of
 * matrix l / 8; register k holds (row l / 4, columns 2 (l % 4) + {0, 1}) of matrix k */
__device__ __forceinline__ void ch_stmatrix_x4_trans(uint32_t addr, uint32_t r0, uint32_t r1, uint32_t r2,
                                                     uint32_t r3)
{
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(addr),
                 "r"(r0), "r"(r1), "r"(r2), "r"(r3)
                 : "memory");
}
#endif /* GC_CW_DEVICE */

/* BWD: the data gradient, computed as the forward convolution of dy with the flipped,
 * transposed kernel: the A blocks are rows of w (K = F contiguous: K-major, no transpose
 * bit), tap t's block taken from tap KH*KW-1-t (the producer's coordinates) */
template <typename T, int NPX, int ACT, bool BWD>
__global__ void __launch_bounds__(CW_THREADS, 1)
gc_conv_halo_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW,
                    const __grid_constant__ CUtensorMap tmY, const ch_params p)
{
#if GC_CW_DEVICE
    constexpr int BH = NPX / CH_BW, ND = NPX / 2;
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int S = p.stages, nk = p.nk;
    const uint32_t aslice = base + (uint32_t)(S * p.stage_bytes);
    const uint32_t stage_out = aslice + (uint32_t)nk * CW_B_BLOCK;
    const uint32_t full0 = stage_out + (uint32_t)(NPX * 128), empty0 = full0 + 8 * CW_MAX_STAGES;
    const uint32_t afull = empty0 + 8 * CW_MAX_STAGES, stg_free = afull + 8;

    const int tn = (int)blockIdx.x % p.tiles_n;  /* this block's filter tile, fixed */
    const int tm0 = (int)blockIdx.x / p.tiles_n; /* its first pixel tile; then + gm, + 2 gm, ... */
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 1);
        }
        mbar_init(afull, 1);
        mbar_init(stg_free, 1); /* phase i completes when tile i's store has read the staging tile */
        cw_fence_init_prefetch(&tmX, &tmW, &tmY);
    }
    __syncthreads();

    if (wg == 0) { /* ---------------- producer: one thread */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            /* the A slice, once: forward, filters tn*64 .. +63 of every K row of w; data
             * gradient, block t * cchunks + cc = input channels tn*64 .. +63 (rows of w) of
             * tap KH*KW-1-t, output channels (w's columns) cc*64 .. +63 */
            mbar_expect_tx(afull, (uint32_t)nk * CW_B_BLOCK);
            for (int kb = 0; kb < nk; kb++) {
                const uint32_t dst = aslice + (uint32_t)kb * CW_B_BLOCK;
                if (BWD) {
                    const int t = kb / p.cchunks, cc = kb - t * p.cchunks;
                    tma_load_2d(dst, &tmW, afull, cc * CW_BK, (p.KH * p.KW - 1 - t) * p.wrows + tn * 64);
                } else {
                    tma_load_2d(dst, &tmW, afull, tn * 64, kb * CW_BK);
                }
            }
            int s = 0;
            uint32_t phase = 0;
            for (int tm = tm0; tm < p.tiles_m; tm += p.gm) {
                const int tq = tm % p.tiles_q, r = tm / p.tiles_q;
                const int tp = r % p.tiles_p, n = r / p.tiles_p;
                const int w0 = tq * CH_BW - p.pad_left, h0 = tp * BH - p.pad_top;
                for (int cc = 0; cc < p.cchunks; cc++) {
                    mbar_wait(empty0 + 8 * s, phase ^ 1);
                    const uint32_t full = full0 + 8 * s;
                    mbar_expect_tx(full, (uint32_t)p.box_bytes);
                    ch_tma_load_4d(base + (uint32_t)(s * p.stage_bytes), &tmX, full, cc * CW_BK, w0, h0, n);
                    if (++s == S) {
                        s = 0;
                        phase ^= 1;
                    }
                }
            }
        }
    } else { /* ---------------- consumers in ping-pong */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int w = wg - 1;
        const int warp = tid >> 5, lane = tid & 31;
        /* this thread's accumulator rows: filters 16 warp + g and + 8 */
        const int fr = tn * 64 + 16 * warp + (lane >> 2);
        const T *bias = (const T *)p.bias;
        const float b0 = bias ? gc_to_f(bias[fr]) : 0.0f, b1 = bias ? gc_to_f(bias[fr + 8]) : 0.0f;
        /* stmatrix: lane gives row i = lane % 8 of matrix mk = lane / 8; matrix mk of step
         * jj is (filters 16 warp + 8 (mk & 1) .., pixels 16 jj + 8 (mk >> 1) ..), stored
         * transposed: pixel row 16 jj + 8 (mk >> 1) + i, 16-byte chunk 2 warp + (mk & 1)
         * of it, swizzled with the row's low 3 bits, i */
        const int mk = lane >> 3, mi = lane & 7;
        const uint32_t st_row = stage_out + (uint32_t)(8 * (mk >> 1) + mi) * 128 +
                                ((uint32_t)((2 * warp + (mk & 1)) ^ mi) << 4);
        const uint32_t sbo = (uint32_t)p.HW * 128; /* one output row further down the halo */
        float d[ND];
        const int ntiles = (p.tiles_m - tm0 + p.gm - 1) / p.gm;
        /* ring position: this consumer's tiles are every other one, cchunks stages each */
        int s = (w * p.cchunks) % S;
        uint32_t phase = (uint32_t)((w * p.cchunks) / S) & 1u;
        const int skip = p.cchunks; /* stages of the other consumer's tile, skipped */
        mbar_wait(afull, 0);
        for (int i = w; i < ntiles; i += 2) {
            const int tm = tm0 + i * p.gm;
            if (i > 0) cw_turn_wait(3 + w);
#pragma unroll
            for (int j = 0; j < ND; j++) d[j] = 0.0f;
            cw_fence_regs<ND>(d);
            int prev = -1;
            for (int cc = 0; cc < p.cchunks; cc++) {
                mbar_wait(full0 + 8 * s, phase);
                const uint32_t sb = base + (uint32_t)(s * p.stage_bytes);
                /* tap t = (kh, kw): A block t * cchunks + cc, B from halo row kh * HW + kw */
                uint32_t sa = aslice + (uint32_t)(cc * CW_B_BLOCK), srow = sb;
                const uint32_t row_skip = (uint32_t)(p.HW - p.KW) * 128; /* last tap of a row -> next row */
                /* one fence per chunk: ptxas adds the one the loop's back edge needs (info
                 * C7519); an explicit fence inside the loop made it serialize the wgmma (C7520) */
                wg_fence();
                for (int kw = 0, t = 0; t < p.KH * p.KW; t++) {
#pragma unroll
                    for (int kk = 0; kk < CW_BK / 16; kk++)
                        ch_mma<T, NPX, BWD ? 0 : 1>::run(d, BWD ? cw_desc(sa + kk * 32) : ch_desc_a(sa + kk * 2048),
                                                         ch_desc_b(srow + kk * 32, sbo), 1u);
                    sa += (uint32_t)(p.cchunks * CW_B_BLOCK);
                    /* branch-free (a branch here makes ptxas serialize the wgmma) */
                    const uint32_t wrap = (uint32_t)(++kw == p.KW);
                    kw *= (int)(1u - wrap);
                    srow += 128 + wrap * row_skip;
                }
                wg_commit();
                wg_wait<1>();
                if (prev >= 0 && tid == 0) cw_mbar_arrive(empty0 + 8 * prev);
                prev = s;
                if (++s == S) {
                    s = 0;
                    phase ^= 1;
                }
            }
            /* skip the other consumer's tile in the ring */
            for (int k = 0; k < skip; k++)
                if (++s == S) {
                    s = 0;
                    phase ^= 1;
                }
            if (i + 1 < ntiles) cw_turn_give(3 + (1 - w));
            wg_wait<0>();
            cw_fence_regs<ND>(d);
            if (prev >= 0 && tid == 0) cw_mbar_arrive(empty0 + 8 * prev);

            /* epilogue: d[4j + {0,1}] is (filter 16 warp + g, pixels 8j + 2q + {0,1}),
             * d[4j + {2,3}] the same pixels of filter + 8. The staging tile is free once
             * the previous tile's store (either consumer's) has read it. */
            if (i > 0) mbar_wait(stg_free, (uint32_t)(i - 1) & 1u);
#pragma unroll
            for (int jj = 0; jj < NPX / 16; jj++) {
                const int j = 2 * jj;
                const uint32_t r0 = cw_pack2<T>(conv_act(d[4 * j] + b0, ACT), conv_act(d[4 * j + 1] + b0, ACT));
                const uint32_t r1 = cw_pack2<T>(conv_act(d[4 * j + 2] + b1, ACT), conv_act(d[4 * j + 3] + b1, ACT));
                const uint32_t r2 = cw_pack2<T>(conv_act(d[4 * j + 4] + b0, ACT), conv_act(d[4 * j + 5] + b0, ACT));
                const uint32_t r3 = cw_pack2<T>(conv_act(d[4 * j + 6] + b1, ACT), conv_act(d[4 * j + 7] + b1, ACT));
                ch_stmatrix_x4_trans(st_row + (uint32_t)jj * (16 * 128), r0, r1, r2, r3);
            }
            cw_fence_proxy_async();
            cw_wg_bar(1 + w);
            if (tid == 0) {
                const int tq = tm % p.tiles_q, r = tm / p.tiles_q;
                const int tp = r % p.tiles_p, n = r / p.tiles_p;
                if (p.reduce)
                    ch_tma_reduce_add_4d(&tmY, stage_out, tn * 64, tq * CH_BW, tp * BH, n);
                else
                    ch_tma_store_4d(&tmY, stage_out, tn * 64, tq * CH_BW, tp * BH, n);
                cw_bulk_commit();
                cw_bulk_wait_read0();
                cw_mbar_arrive(stg_free);
            }
        }
        if (tid == 0) cw_bulk_wait0();
    }
#endif
}

/* Holds 256 bytes of static shared memory in sm_90a code only: cudaFuncGetAttributes
 * on it tells which image the driver picked for this device. */
__global__ void gc_conv_wgmma_probe(int *p)
{
#if GC_CW_DEVICE
    __shared__ int s[64];
    s[threadIdx.x & 63] = (int)threadIdx.x;
    __syncthreads();
    if (p) p[threadIdx.x] = s[(threadIdx.x + 1) & 63];
#endif
}

/* ------------------------------------------------------------------ host side */
int g_cw_compiled[64]; /* per device: 0 unknown, 1 yes, 2 no */

/* 1 when this binary holds sm_90a code for the running device and the driver has the
 * tensor-map encoders. */
int cw_compiled(const gc_backend *be)
{
    if (gc_cuda_cc(be) != 90) return 0; /* sm_90a code runs on compute capability 9.0 only */
    const int dev = be->device_index;
    if (dev >= 0 && dev < 64 && g_cw_compiled[dev]) return g_cw_compiled[dev] == 1;
    cudaFuncAttributes fa;
    int yes = 0;
    if (cudaFuncGetAttributes(&fa, gc_conv_wgmma_probe) == cudaSuccess)
        yes = fa.sharedSizeBytes >= 256;
    else
        (void)cudaGetLastError();
    if (yes && (!gc_tma_encoders()->tiled || !gc_tma_encoders()->im2col)) yes = 0;
    if (dev >= 0 && dev < 64) g_cw_compiled[dev] = yes ? 1 : 2;
    return yes;
}

/* the largest dynamic shared-memory limit set so far, per device and dtype */
size_t g_cw_smem_set[2][64];

int cw_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* What both Hopper kernels require of a layer, whichever pass they run: NULL, or why not. */
const char *cw_layer_why(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt)
{
    if (dt != GC_F16 && dt != GC_BF16) return "float16 / bfloat16 storage only";
    if (!cw_compiled(be)) return "no sm_90a code for this device, or no tensor-map encoder in the driver";
    if (g->C <= 0 || g->F <= 0 || g->C % 64 || g->F % 64) return "C and F must be multiples of 64";
    if (g->sh != 1 || g->sw != 1 || g->dh != 1 || g->dw != 1) return "stride 1 and dilation 1 only";
    return NULL;
}

/* Blocks per filter (column) tile of a persistent launch: one block per SM (the shared
 * memory says so), a whole number per column tile, no more than its pixel tiles (the
 * knob cuda.conv2d.wgmma_blocks caps it, so that each block gets several). */
int cw_blocks_per_column_tile(const gc_backend *be, int tiles_m, int tiles_n)
{
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 132;
    int gm = sms / tiles_n;
    if (gm < 1) gm = 1;
    if (gm > tiles_m) gm = tiles_m;
    const int cap = gc_variant_forced(GC_VP_CUDA_CONV2D_WGMMA_BLOCKS);
    if (cap > 0 && gm > cap) gm = cap;
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGMMA_BLOCKS, gm);
    return gm;
}

/* ---- the halo kernel's host side ---- */
typedef void (*ch_kernel_fn)(const CUtensorMap, const CUtensorMap, const CUtensorMap, const ch_params);
/* ai: the activation, or 4 for the data gradient */
template <typename T, int NPX> ch_kernel_fn ch_kernel_for(int ai)
{
    switch (ai) {
    case GC_ACT_RELU: return gc_conv_halo_kernel<T, NPX, GC_ACT_RELU, false>;
    case GC_ACT_TANH: return gc_conv_halo_kernel<T, NPX, GC_ACT_TANH, false>;
    case GC_ACT_SIGMOID: return gc_conv_halo_kernel<T, NPX, GC_ACT_SIGMOID, false>;
    case 4: return gc_conv_halo_kernel<T, NPX, GC_ACT_LINEAR, true>;
    default: return gc_conv_halo_kernel<T, NPX, GC_ACT_LINEAR, false>;
    }
}
size_t g_ch_smem_set[2][2][5][64]; /* dtype, NPX, activation / data gradient, device */

/* Whether the halo kernel takes this layer (BH: its tile height), or why not. */
const char *ch_fits(const gc_backend *be, const gc_conv2d_geom *g, int forced, int *BH_out)
{
    const int64_t KC = g->KH * g->KW * g->C;
    const int nk = (int)(KC / CW_BK);
    /* the tile height that wastes the fewest rows (ties: 32) */
    const int64_t c28 = (g->OH + 27) / 28 * 28, c32 = (g->OH + 31) / 32 * 32;
    const int BH = c28 < c32 ? 28 : 32;
    *BH_out = BH;
    if (g->KH + BH - 1 > 256 || g->KW + CH_BW - 1 > 256) return "kernel taller or wider than a TMA box";
    if (ch_smem_bytes(2, nk, BH, (int)g->KH, (int)g->KW) > gc_cuda_smem_optin(be))
        return "the weight slice and two halo stages do not fit in shared memory";
    if (g->N * ((g->OH + BH - 1) / BH) * ((g->OW + CH_BW - 1) / CH_BW) > INT_MAX / 2)
        return "more than 2^30 tiles";
    /* the automatic choice leaves layers whose tiles would mostly hang past the image
     * (8 x BH tiles on a 7 x 7 map, say) to the im2col kernel */
    if (!forced && (4 * g->OW < 3 * ((g->OW + CH_BW - 1) / CH_BW * CH_BW) ||
                    4 * g->OH < 3 * ((g->OH + BH - 1) / BH * BH)))
        return "tiles would waste more than a quarter of the work";
    return NULL;
}

/* The halo kernel on geometry g. bwd: g is the data gradient seen as a forward
 * convolution (x = dy, y = dx, C and F swapped, padding KH-1-pad; see
 * gc_conv2d_wgmma_bwd_data) and w the layer's own weights. */
gc_status ch_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, const void *x, const void *w,
                 const void *bias, gc_act act, void *y, int BH, int bwd, int reduce)
{
    const int64_t KC = g->KH * g->KW * g->C;
    const int nk = (int)(KC / CW_BK), KH = (int)g->KH, KW = (int)g->KW;
    const int NPX = CH_BW * BH;
    const size_t optin = gc_cuda_smem_optin(be);
    int stages = CH_MAX_STAGES;
    while (stages > 2 && ch_smem_bytes(stages, nk, BH, KH, KW) > optin) stages--;
    const int cap = gc_variant_forced(GC_VP_CUDA_CONV2D_WGMMA_STAGES);
    if (cap >= 2 && cap < stages) stages = cap;
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGMMA_STAGES, stages);
    const size_t smem = ch_smem_bytes(stages, nk, BH, KH, KW);
    const size_t es = gc_dtype_size(dt);
    const CUtensorMapDataType tdt = dt == GC_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    const int HW = CH_BW + KW - 1, HH = BH + KH - 1;
    CUtensorMap tmX, tmW, tmY;
    CUresult r;
    {
        const cuuint64_t dims[4] = {(cuuint64_t)g->C, (cuuint64_t)g->W, (cuuint64_t)g->H, (cuuint64_t)g->N};
        const cuuint64_t strides[3] = {(cuuint64_t)(g->C * es), (cuuint64_t)(g->W * g->C * es),
                                       (cuuint64_t)(g->H * g->W * g->C * es)};
        const cuuint32_t box[4] = {CW_BK, (cuuint32_t)HW, (cuuint32_t)HH, 1}, estr[4] = {1, 1, 1, 1};
        if ((r = gc_tma_encoders()->tiled(&tmX, tdt, 4, (void *)x, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)) != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma halo): cuTensorMapEncodeTiled failed (%d) for x "
                           "(%lld, %lld, %lld, %lld), box %dx%d", (int)r, (long long)g->N, (long long)g->H,
                           (long long)g->W, (long long)g->C, HH, HW);
    }
    {
        /* w as stored, (KH*KW*C rows of F): forward, C and F are g's; data gradient, swapped */
        const int64_t inner = bwd ? g->C : g->F, rows = g->KH * g->KW * (bwd ? g->F : g->C);
        const cuuint64_t dims[2] = {(cuuint64_t)inner, (cuuint64_t)rows};
        const cuuint64_t strides[1] = {(cuuint64_t)(inner * es)};
        const cuuint32_t box[2] = {CW_BN, CW_BK}, estr[2] = {1, 1};
        if ((r = gc_tma_encoders()->tiled(&tmW, tdt, 2, (void *)w, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)) != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d (wgmma halo): cuTensorMapEncodeTiled failed (%d) for w "
                           "as (%lld, %lld)", (int)r, (long long)rows, (long long)inner);
    }
    {
        const cuuint64_t dims[4] = {(cuuint64_t)g->F, (cuuint64_t)g->OW, (cuuint64_t)g->OH, (cuuint64_t)g->N};
        const cuuint64_t strides[3] = {(cuuint64_t)(g->F * es), (cuuint64_t)(g->OW * g->F * es),
                                       (cuuint64_t)(g->OH * g->OW * g->F * es)};
        const cuuint32_t box[4] = {CW_BN, CH_BW, (cuuint32_t)BH, 1}, estr[4] = {1, 1, 1, 1};
        if ((r = gc_tma_encoders()->tiled(&tmY, tdt, 4, y, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)) != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma halo): cuTensorMapEncodeTiled failed (%d) for y "
                           "(%lld, %lld, %lld, %lld)", (int)r, (long long)g->N, (long long)g->OH, (long long)g->OW,
                           (long long)g->F);
    }
    ch_params prm;
    prm.OH = (int)g->OH;
    prm.OW = (int)g->OW;
    prm.pad_top = g->pad_top;
    prm.pad_left = g->pad_left;
    prm.KH = KH;
    prm.KW = KW;
    prm.cchunks = (int)(g->C / CW_BK);
    prm.nk = nk;
    prm.HW = HW;
    prm.stage_bytes = ch_stage_bytes(BH, KH, KW);
    prm.box_bytes = ch_box_bytes(BH, KH, KW);
    prm.wrows = (int)g->F;
    prm.tiles_q = (int)((g->OW + CH_BW - 1) / CH_BW);
    prm.tiles_p = (int)((g->OH + BH - 1) / BH);
    prm.tiles_m = (int)(g->N * prm.tiles_p * prm.tiles_q);
    prm.tiles_n = (int)(g->F / CW_BN);
    prm.gm = cw_blocks_per_column_tile(be, prm.tiles_m, prm.tiles_n);
    prm.stages = stages;
    prm.reduce = reduce;
    prm.bias = bias;
    const int64_t grid = (int64_t)prm.gm * prm.tiles_n;
    if (grid > INT_MAX) return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma halo): %lld blocks", (long long)grid);

    const int di = be->device_index >= 0 && be->device_index < 64 ? be->device_index : 63;
    const int ti = dt == GC_F16 ? 0 : 1, ni = NPX == 256 ? 1 : 0;
    const int ai = bwd ? 4 : (int)act >= 0 && (int)act < 4 ? (int)act : 0;
    const ch_kernel_fn k = ti == 0 ? (ni ? ch_kernel_for<__half, 256>(ai) : ch_kernel_for<__half, 224>(ai))
                                   : (ni ? ch_kernel_for<__nv_bfloat16, 256>(ai)
                                         : ch_kernel_for<__nv_bfloat16, 224>(ai));
    if (g_ch_smem_set[ti][ni][ai][di] < smem) {
        GC_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        g_ch_smem_set[ti][ni][ai][di] = smem;
    }
    k<<<(unsigned)grid, CW_THREADS, smem, gc_cuda_stream(be)>>>(tmX, tmW, tmY, prm);
    return gc_cuda_launch_check("conv2d_fwd (wgmma halo)");
}

} // namespace

extern "C" int gc_conv2d_wgmma_compiled(const gc_backend *be) { return cw_compiled(be); }

/* The conditions under which gc_conv2d_wgmma_fwd runs (everything but the pointers and
 * the driver's tensor-map encoding): GC_OK, or GC_ERR_UNSUPPORTED with a message. */
extern "C" gc_status gc_conv2d_wgmma_check(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt)
{
    const int64_t M = g->N * g->OH * g->OW, KC = g->KH * g->KW * g->C;
    const int64_t nk = KC / CW_BK;
    const size_t optin = gc_cuda_smem_optin(be);
    const int lw = -g->pad_left, lh = -g->pad_top;
    const int64_t uw = g->OW - g->W - g->pad_left, uh = g->OH - g->H - g->pad_top;
    const char *why = cw_layer_why(be, g, dt);
    if (why) {
        /* the message below says it */
    } else if (g->KH > 256 || g->KW > 256) why = "kernel taps past the 8-bit im2col offsets";
    else if (lw < -128 || lh < -128 || uw < -128 || uh < -128 || uw > 127 || uh > 127)
        why = "padding past the 8-bit im2col box corners";
    else if (M <= 0 || M > INT_MAX - CW_BM || g->N * g->H * g->W * g->C >= ((int64_t)1 << 40) ||
             KC > INT_MAX / 64 || g->F > 65535)
        why = "sizes past 32-bit tile indices";
    else if (cw_smem_bytes(3, (int)nk) > optin)
        why = "the weight slice (64 x KH*KW*C) does not fit in shared memory with 3 ring stages";
    if (why)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "conv2d_fwd (wgmma): x (%lld, %lld, %lld, %lld), kernel %lldx%lld -> %lld, stride "
                       "(%d, %d), dilation (%d, %d), %s: %s",
                       (long long)g->N, (long long)g->H, (long long)g->W, (long long)g->C, (long long)g->KH,
                       (long long)g->KW, (long long)g->F, g->sh, g->sw, g->dh, g->dw, gc_dtype_name(dt), why);
    return GC_OK;
}

extern "C" gc_status gc_conv2d_wgmma_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                         const void *x, const void *w, const void *bias, gc_act act, void *y)
{
    /* the GEMM kernel with an im2col A (conv2d_wgmma_igemm.cu): forced, or chosen */
    const int variant = gc_variant_forced(GC_VP_CUDA_CONV2D_FWD_WGMMA);
    if (variant == GC_V_FWDWG_IGEMM || (variant == GC_V_FWDWG_AUTO && gc_conv2d_igemm_wanted(be, g, dt, 0))) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_FWD_WGMMA, GC_V_FWDWG_IGEMM);
        return gc_conv2d_igemm_fwd(be, g, dt, x, w, bias, act, y);
    }
    gc_status st = gc_conv2d_wgmma_check(be, g, dt);
    if (st) return st;
    if (!cw_aligned16(x) || !cw_aligned16(y) || !cw_aligned16(w))
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma): x, w and y must be 16-byte aligned");
    /* the halo kernel where it fits (or forced), else the im2col one */
    if (variant != GC_V_FWDWG_IM2COL) {
        int BH = 32;
        const char *why = ch_fits(be, g, variant == GC_V_FWDWG_HALO, &BH);
        if (!why) {
            gc_variant_ran(GC_VP_CUDA_CONV2D_FWD_WGMMA, GC_V_FWDWG_HALO);
            return ch_fwd(be, g, dt, x, w, bias, act, y, BH, 0, 0);
        }
        if (variant == GC_V_FWDWG_HALO)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma halo): x (%lld, %lld, %lld, %lld), kernel "
                           "%lldx%lld -> %lld: %s", (long long)g->N, (long long)g->H, (long long)g->W,
                           (long long)g->C, (long long)g->KH, (long long)g->KW, (long long)g->F, why);
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_FWD_WGMMA, GC_V_FWDWG_IM2COL);
    const int64_t M = g->N * g->OH * g->OW, KC = g->KH * g->KW * g->C;
    const int nk = (int)(KC / CW_BK);

    /* ring depth: as many 16 KB stages as fit next to the B slice (3..8) */
    const size_t optin = gc_cuda_smem_optin(be);
    int stages = CW_MAX_STAGES;
    while (stages > 3 && cw_smem_bytes(stages, nk) > optin) stages--;
    const int cap = gc_variant_forced(GC_VP_CUDA_CONV2D_WGMMA_STAGES);
    if (cap >= 3 && cap < stages) stages = cap;
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGMMA_STAGES, stages);
    const size_t smem = cw_smem_bytes(stages, nk);

    /* W^T (F, KH*KW*C), K-major, in the workspace */
    const size_t es = gc_dtype_size(dt);
    void *wt = NULL;
    if ((st = gc_cuda_workspace(be, (size_t)(KC * g->F) * es, &wt))) return st;

    /* tensor maps (host only; a failure here still launches nothing) */
    const CUtensorMapDataType tdt = dt == GC_F16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16;
    CUtensorMap tmX, tmW, tmY;
    {
        const cuuint64_t dims[4] = {(cuuint64_t)g->C, (cuuint64_t)g->W, (cuuint64_t)g->H, (cuuint64_t)g->N};
        const cuuint64_t strides[3] = {(cuuint64_t)(g->C * es), (cuuint64_t)(g->W * g->C * es),
                                       (cuuint64_t)(g->H * g->W * g->C * es)};
        /* box corners of the filter corner, W first (then H), as CUTLASS orders them */
        const int lower[2] = {-g->pad_left, -g->pad_top};
        const int upper[2] = {(int)(g->OW - g->W - g->pad_left), (int)(g->OH - g->H - g->pad_top)};
        const cuuint32_t estr[4] = {1, 1, 1, 1};
        CUresult r = gc_tma_encoders()->im2col(&tmX, tdt, 4, (void *)x, dims, strides, lower, upper, CW_BK, CW_BM, estr,
                                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                     CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED,
                           "conv2d_fwd (wgmma): cuTensorMapEncodeIm2col failed (%d) for x (%lld, %lld, %lld, "
                           "%lld), box corners (%d, %d) .. (%d, %d)",
                           (int)r, (long long)g->N, (long long)g->H, (long long)g->W, (long long)g->C, lower[0],
                           lower[1], upper[0], upper[1]);
    }
    {
        const cuuint64_t dims[2] = {(cuuint64_t)KC, (cuuint64_t)g->F};
        const cuuint64_t strides[1] = {(cuuint64_t)(KC * es)};
        const cuuint32_t box[2] = {CW_BK, CW_BN}, estr[2] = {1, 1};
        CUresult r = gc_tma_encoders()->tiled(&tmW, tdt, 2, wt, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma): cuTensorMapEncodeTiled failed (%d) for W^T (%lld, %lld)",
                           (int)r, (long long)g->F, (long long)KC);
    }
    {
        const cuuint64_t dims[2] = {(cuuint64_t)g->F, (cuuint64_t)M};
        const cuuint64_t strides[1] = {(cuuint64_t)(g->F * es)};
        const cuuint32_t box[2] = {CW_BN, CW_BM}, estr[2] = {1, 1};
        CUresult r = gc_tma_encoders()->tiled(&tmY, tdt, 2, y, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                    CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_NONE,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma): cuTensorMapEncodeTiled failed (%d) for y (%lld, %lld)",
                           (int)r, (long long)M, (long long)g->F);
    }

    cw_params prm;
    prm.M = (int)M;
    prm.OH = (int)g->OH;
    prm.OW = (int)g->OW;
    prm.pad_top = g->pad_top;
    prm.pad_left = g->pad_left;
    prm.KW = (int)g->KW;
    prm.cchunks = (int)(g->C / CW_BK);
    prm.nk = nk;
    prm.tiles_m = (int)((M + CW_BM - 1) / CW_BM);
    prm.tiles_n = (int)(g->F / CW_BN);
    prm.gm = cw_blocks_per_column_tile(be, prm.tiles_m, prm.tiles_n);
    prm.stages = stages;
    prm.act = (int)act;
    prm.bias = bias;
    const int64_t grid = (int64_t)prm.gm * prm.tiles_n;
    if (grid > INT_MAX) return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd (wgmma): %lld blocks", (long long)grid);

    /* launch: the weight transpose, then the kernel */
    if ((st = gc_conv2d_transpose(be, dt, w, KC, g->F, wt))) return st;
    const int di = be->device_index >= 0 && be->device_index < 64 ? be->device_index : 63;
    cudaStream_t stream = gc_cuda_stream(be);
    if (dt == GC_F16) {
        if (g_cw_smem_set[0][di] < smem) {
            GC_CUDA_TRY(cudaFuncSetAttribute(gc_conv_wgmma_kernel<__half>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                             (int)smem));
            g_cw_smem_set[0][di] = smem;
        }
        gc_conv_wgmma_kernel<__half><<<(unsigned)grid, CW_THREADS, smem, stream>>>(tmX, tmW, tmY, prm);
    } else {
        if (g_cw_smem_set[1][di] < smem) {
            GC_CUDA_TRY(cudaFuncSetAttribute(gc_conv_wgmma_kernel<__nv_bfloat16>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
            g_cw_smem_set[1][di] = smem;
        }
        gc_conv_wgmma_kernel<__nv_bfloat16><<<(unsigned)grid, CW_THREADS, smem, stream>>>(tmX, tmW, tmY, prm);
    }
    return gc_cuda_launch_check("conv2d_fwd (wgmma)");
}

/* The data gradient of a stride-1 convolution is the forward convolution of dy with the
 * kernel flipped in both spatial directions and C and F swapped, padded KH-1-pad_top
 * above and KW-1-pad_left on the left: the halo kernel runs it on that geometry, reading
 * w as stored (the flip and the swap are in how it loads and multiplies the weight
 * blocks). forced: also for layers whose tiles would mostly hang past the image. */
extern "C" gc_status gc_conv2d_wgmma_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                              const void *dy, const void *w, void *dx, int forced, int accumulate)
{
    /* igemm forced at cuda.conv2d.fwd_wgmma, or chosen; any other value: the halo kernel */
    const int variant = gc_variant_forced(GC_VP_CUDA_CONV2D_FWD_WGMMA);
    if (variant == GC_V_FWDWG_IGEMM || (variant == GC_V_FWDWG_AUTO && gc_conv2d_igemm_wanted(be, g, dt, 1))) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_FWD_WGMMA, GC_V_FWDWG_IGEMM);
        return gc_conv2d_igemm_bwd_data(be, g, dt, dy, w, dx, accumulate);
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_FWD_WGMMA, GC_V_FWDWG_HALO);
    gc_conv2d_geom t = *g;
    t.H = g->OH;
    t.W = g->OW;
    t.C = g->F;
    t.F = g->C;
    t.OH = g->H;
    t.OW = g->W;
    t.pad_top = (int)(g->KH - 1) - g->pad_top;
    t.pad_left = (int)(g->KW - 1) - g->pad_left;
    int BH = 32;
    const char *why = cw_layer_why(be, g, dt);
    if (why) {
        /* the message below says it */
    } else if (g->N <= 0) why = "empty batch";
    else if (t.pad_top < 0 || t.pad_left < 0) why = "padding wider than the kernel";
    else if (!cw_aligned16(dy) || !cw_aligned16(w) || !cw_aligned16(dx)) why = "dy, w and dx must be 16-byte aligned";
    else if (g->N * g->H * g->W * g->C >= ((int64_t)1 << 40) || g->N * g->OH * g->OW * g->F >= ((int64_t)1 << 40) ||
             g->F > 65535 || g->C > 65535)
        why = "sizes past the tensor maps' range";
    else why = ch_fits(be, &t, forced, &BH);
    if (why)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "conv2d_bwd_data (wgmma halo): dy (%lld, %lld, %lld, %lld), kernel %lldx%lld, x channels "
                       "%lld, %s: %s",
                       (long long)g->N, (long long)g->OH, (long long)g->OW, (long long)g->F, (long long)g->KH,
                       (long long)g->KW, (long long)g->C, gc_dtype_name(dt), why);
    return ch_fwd(be, &t, dt, dy, w, NULL, GC_ACT_LINEAR, dx, BH, 1, accumulate);
}
