/* conv2d_wgmma_wgrad.cu -- Hopper (sm_90a) weight gradient of a convolution on wgmma + TMA.
 *
 * What: gc_conv2d_wgrad_wgmma computes dw[kh][kw][c][f] = sum over the output pixels
 * (n, oh, ow) of x[n][oh*sh + kh - pad_top][ow*sw + kw - pad_left][c] * dy[n][oh][ow][f]
 * (zero outside the image) and, when asked, db[f] = sum dy[.][f], for NHWC f16 / bf16
 * storage (C % 8 == 0 and F % 8 == 0), or f32 storage as TF32 (only while
 * gc_get_allow_tf32() is on; C % 4 == 0 and F % 4 == 0), with fp32 accumulation on an
 * H100 / H200: stride 1 with any kernel (dilation 1), or 1x1 unpadded with any stride.
 * dw and db come out in the storage dtype, as from the other weight-gradient kernels of
 * conv2d.cu. Everything else -- exact float32 included, forced or not -- returns
 * GC_ERR_UNSUPPORTED before anything is launched (conv2d.cu then runs its mma.sync
 * kernel, conv_wgrad_kernel, or for exact float32 the SIMT one).
 *
 * The GEMM: dW (KH*KW*C rows, F columns) = X^T . DY over K = N*OH*OW pixels, both
 * operands MN-major in memory (a pixel's C channels / F filters are contiguous). The
 * operands are cut into "boxes" of 64 pixels x 64 channels (x; one tap, one 64-channel
 * chunk) or 64 pixels x 64 filters (dy): 8 KB of 128-byte pixel rows in the TMA
 * 128-byte swizzle, which is the wgmma canonical MN-major layout (8-row groups 1024
 * bytes apart: SBO; 64-element column blocks one box apart: LBO), read with the
 * transpose bit set for both A and B (16-bit types only). x boxes come from one TMA copy
 * in im2col mode (the tap is the im2col offset, padding and pixels past the batch arrive
 * as zeros, exactly as the forward's im2col kernel in conv2d_wgmma.cu loads them); a
 * strided 1x1 layer reads x through a tensor map whose W / H strides are the stride
 * times the real ones, so that it is a 1x1 stride-1 layer on the sampled pixels. dy
 * boxes are tiled 2-D copies of the (pixels, F) matrix. Channels / filters past C / F
 * and pixels past the batch are zero-filled by the copy engine.
 *
 * Block: 3 warpgroups, one block per SM. Warpgroup 0 (one thread) is the producer: per
 * K-block of 64 pixels it loads the block's boxes into a ring of stages (full / empty
 * mbarriers). Warpgroups 1 and 2 are consumers, each a 64 x 64*NB fp32 accumulator
 * (NB = 1..4: wgmma .m64n{64,128,192,256}k16, 4 per K-block); A is one box, B is NB
 * consecutive boxes of the stage. Which operand is A (x or dy) and the block shape come
 * from a rule measured over ResNet-50's layers (wgw_rule: the 4-box side gets real
 * boxes); where it has no answer, from a small cost model (loaded bytes vs Tensor Core
 * work, wasted columns, wave quantisation, the split-K partial traffic), which also picks
 * the split count:
 *   shared (alt = 0): stage = 2 A boxes + NB B boxes; consumer w multiplies A box w by
 *     the shared B boxes on every K-block (a 128 x 64*NB tile; the layers with many
 *     boxes on both sides);
 *   alternate (alt = 1): stage = 1 A box + NB B boxes; consumer w takes the block's
 *     K-blocks w, w+2, ... (a 64 x 64*NB tile, both consumers busy: the layers with a
 *     single 64-wide box on one side, F = 64 or a 1x1 layer with C = 64). The ring depth
 *     is even, so each stage is only ever consumed by the same warpgroup and the phase
 *     parity of its barrier is never ambiguous, and at least 4, so that each consumer
 *     owns two stages (it frees one only after issuing the next).
 * Split K: blockIdx.y takes a fixed range of K-blocks and each consumer writes its raw
 * fp32 sums to its own slice of the workspace (no atomics); gc_conv2d_reduce_splits then
 * adds the slices in a fixed order and rounds (deterministic for a given split count,
 * which depends on the SM count). db: the producer warpgroup's three idle warps sum the
 * staged dy boxes' columns, the blocks that stage the same dy boxes in a split (the tiles
 * along the x side) taking turns over its K-blocks, each into its own row of F sums,
 * reduced like the partials: no second pass over dy, and no block does all of it.
 * TF32 (f32 storage, gc_wgrad_wgmma_tf32_kernel): wgmma .tf32 reads shared memory
 * K-major only (the transpose bits exist for 16-bit types only), and here K = pixels
 * while x and dy are both MN-major in memory, so the kernel transposes in shared memory.
 * The producer thread's TMA copies land in a staging ring: a box is still 8 KB, now 32
 * pixel rows x 64 channels (two copies of 32 fp32 = 128 bytes per row, the same 128-byte
 * swizzle; K-blocks of WGT_BK = 32 pixels). The producer warpgroup's warps 1-3 (idle in
 * the 16-bit kernel) move each staged box into an operand ring in the K-major canonical
 * layout -- 64 rows (channel / filter) of 32 pixels = 128 bytes, 8-row groups 1024 bytes
 * apart, same swizzle; a stage's NB B boxes are then one 64*NB-row K-major matrix --
 * with 16-byte loads, a 4 x 4 transpose in registers and 16-byte stores, both sides free
 * of bank conflicts (see the kernel), then fence.proxy.async (generic writes -> wgmma's
 * async-proxy reads) and arrive on the operand stage's full barrier. The consumers run
 * wgmma .m64n{64..256}k8.f32.tf32.tf32, stepping the descriptors' start 32 bytes (8
 * pixels) along the 128-byte rows, 4 per K-block. Rounding: each operand element is
 * rounded to nearest TF32 (cvt.rna) on its way through the transposers, which touch every
 * element anyway -- x and dy both, unlike the forward's TMA-read activation (truncated
 * by the tensor cores): truncating both operands would give a coherent relative error of
 * up to ~2^-10 (conv2d_wgmma_igemm.cu's header), and the mma.sync kernel this replaces
 * rounds both. db sums the staged, unrounded dy on the same warps (after the operand
 * stage is released, before the staging stage is), in fp32. Why two rings rather than
 * transposing in place: a staging stage is freed as soon as it is transposed, so the
 * copies of K-block i+1 overlap the transposition of i and the wgmma of i-1. The rings
 * (wgt_rings) are sized from the device's opt-in shared-memory limit: at least 2 staging
 * and 2 operand stages (4 when alternating); on 227 KB an xs4 / ds4 stage of 6 boxes
 * (48 KB) gets 2 + 2, 196 KB in all. An alternating NB = 4 stage does not fit 4 + 2, so
 * the rule's da4 becomes da3 (boxes a multiple of 3) or da2 for float32; otherwise the
 * block shapes and split counts are the 16-bit rule's and cost model's (the split as a
 * number of 64-pixel blocks, twice as many 32-pixel ones), a starting point not measured
 * for TF32. No setmaxnreg in this kernel: every role fits the launch bound's 168
 * registers (the transposers spill at the 16-bit producer's 40).
 * Device code exists only for sm_90a (GC_WGW_DEVICE); other targets compile empty
 * kernels and the entry point reports GC_ERR_UNSUPPORTED (probe kernel, as in
 * gemm_wgmma.cu). The PTX primitives come from hopper_ptx.cuh.
 * Variant points (gpucmp_variants.h): cuda.conv2d.wgrad=wgmma forces this kernel
 * (conv2d.cu), cuda.conv2d.wgrad_wgmma the block shape (e.g. "da3": A = dy, alternate,
 * NB = 3; "xs4": A = x, shared, NB = 4; auto: the rule, else the cost model), and the knobs
 * cuda.conv2d.wgrad_wgmma_splits / _stages the split count and the ring depth cap (TF32:
 * of the operand ring; a forced shape whose rings do not fit is refused).
 */
#include "conv2d_internal.cuh"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums only: the encoders come from the driver (tensor_map.cu) */

#if defined(GC_CONV_WATCHDOG) && !defined(GC_HOPPER_WATCHDOG)
#define GC_HOPPER_WATCHDOG GC_CONV_WATCHDOG
#endif
#include "hopper_ptx.cuh"

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define GC_WGW_DEVICE 1
#else
#define GC_WGW_DEVICE 0
#endif

namespace {

constexpr int WGW_BK = 64;                  /* pixels per K-block */
constexpr int WGT_BK = 32;                  /* TF32: pixels per K-block (32 fp32 = one 128-byte row) */
constexpr int WGW_BOX = WGW_BK * 128;       /* 8 KB: 64 pixel rows of 64 16-bit values */
constexpr int WGW_THREADS = 384;            /* producer + 2 consumer warpgroups */
constexpr int WGW_MAX_STAGES = 8;
constexpr int WGW_BAR_BYTES = 256;          /* full[8], empty[8] */
constexpr int WGW_SUM_THREADS = 96;         /* warps 1-3 of the producer warpgroup: db's column sums */
constexpr int WGW_SUM_BYTES = WGW_SUM_THREADS * 8 * 4; /* their per-thread partial sums, combined at the end */

size_t wgw_smem_bytes(int stages, int nbox)
{
    return 1024 + (size_t)stages * nbox * WGW_BOX + WGW_BAR_BYTES + WGW_SUM_BYTES;
}

/* TF32: the two rings in `optin` bytes of shared memory for stages of nbox boxes --
 * operand stages *S (at least 2, or an even 4 when alternating, as the 16-bit ring) and
 * staging stages *SS (at least 2: the copy engine fills one while the transposers read
 * the other); what is left over deepens the staging ring (more copies in flight against
 * L2 latency), after one more operand stage (two when alternating) once the staging ring
 * has 4. cap: the stages knob, applied to the operand ring. 0 when they do not fit. */
int wgt_rings(size_t optin, int alt, int nbox, int cap, int *S, int *SS)
{
    const size_t fixed = 1024 + WGW_BAR_BYTES + WGW_SUM_BYTES;
    if (optin <= fixed) return 0;
    const int T = (int)((optin - fixed) / ((size_t)nbox * WGW_BOX)), smin = alt ? 4 : 2;
    if (T < smin + 2) return 0;
    int s = smin, ss = T - smin;
    if (ss >= (alt ? 6 : 4)) {
        s += alt ? 2 : 1;
        ss -= alt ? 2 : 1;
    }
    if (cap > 0 && cap < s) s = alt ? ((cap & ~1) < smin ? smin : cap & ~1) : (cap < smin ? smin : cap);
    *S = s < WGW_MAX_STAGES ? s : WGW_MAX_STAGES;
    *SS = ss < WGW_MAX_STAGES ? ss : WGW_MAX_STAGES;
    return 1;
}
size_t wgt_smem_bytes(int S, int SS, int nbox) { return wgw_smem_bytes(S + SS, nbox); }

struct wgw_params {
    float *part;          /* slices of (KC, F) fp32 partial sums */
    float *dbpart;        /* db: splits x db_rows rows of F column sums (NULL: no db) */
    int db_rows;          /* the blocks that stage the same dy boxes in a split (they share its sums) */
    int C, F, KW, cch;    /* cch: x boxes per tap, ceil(C / 64) */
    int OH, OW;           /* output pixels per image (the pixel walk of a K-block) */
    int pad_top, pad_left;
    int nX, nD;           /* x boxes (taps * cch), dy boxes (ceil(F / 64)) */
    int a_x;              /* 1: A (the 64 accumulator rows) is x and B dy; 0: the reverse */
    int alt;              /* 1: alternate K-blocks between the consumers (1 A box per stage) */
    int tiles_n;          /* groups of NB B boxes */
    int nkb, kbps;        /* K-blocks in all, per split */
    int stages, stage_bytes;
    int sstages;          /* TF32: stages of the staging ring (the operand ring has `stages`) */
    int KC;
};

#if GC_WGW_DEVICE
using namespace gc_hopper; /* smem_u32, mbar_*, tma_load_2d, wg_fence / commit / wait */

__device__ __forceinline__ void wgw_mbar_arrive(uint32_t bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
/* im2col box of the (C, W, H, N) tensor (as conv2d_wgmma.cu's): channels [c, c + 64) of
 * 64 pixels whose filter corners start at (w, h, n), each read at corner + (off_w, off_h) */
__device__ __forceinline__ void wgw_tma_im2col(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c, int w,
                                               int h, int n, uint16_t off_w, uint16_t off_h)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c), "r"(w), "r"(h), "r"(n), "h"(off_w), "h"(off_h)
                 : "memory");
}
/* the two 16-bit values of a 32-bit word as floats (low half first) */
template <typename T> __device__ __forceinline__ void wgw_pair(uint32_t w, float &lo, float &hi);
template <> __device__ __forceinline__ void wgw_pair<__nv_bfloat16>(uint32_t w, float &lo, float &hi)
{
    lo = __uint_as_float(w << 16);
    hi = __uint_as_float(w & 0xffff0000u);
}
template <> __device__ __forceinline__ void wgw_pair<__half>(uint32_t w, float &lo, float &hi)
{
    __half2 h;
    __builtin_memcpy(&h, &w, 4);
    const float2 f = __half22float2(h);
    lo = f.x;
    hi = f.y;
}
/* acc[0..7] += the eight 16-bit values of q (a 16-byte vector of 8 filters) */
template <typename T> __device__ __forceinline__ void wgw_add8(const uint4 &q, float *acc)
{
    float lo, hi;
    wgw_pair<T>(q.x, lo, hi); acc[0] += lo; acc[1] += hi;
    wgw_pair<T>(q.y, lo, hi); acc[2] += lo; acc[3] += hi;
    wgw_pair<T>(q.z, lo, hi); acc[4] += lo; acc[5] += hi;
    wgw_pair<T>(q.w, lo, hi); acc[6] += lo; acc[7] += hi;
}
template <int N> __device__ __forceinline__ void wgw_fence_regs(float *d)
{
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}
/* MN-major operand, 128-byte swizzle: 8 K-rows of 128 bytes per 1024-byte group (SBO),
 * 64-element MN blocks one box apart (LBO; unused by a 64-wide A) */
__device__ __forceinline__ uint64_t wgw_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)(WGW_BOX >> 4) << 16) | ((uint64_t)(1024 >> 4) << 32) |
           (1ull << 62);
}

/* d (64 x 64*NB per warpgroup, fp32) += A (64 x 16, stored K x M) * B (16 x 64*NB, stored
 * K x N): both transpose bits set */
template <typename T, int NB> struct wgw_mma;
#define WGW_MMA_DEF(T, NB, instr, DREGS, DOUTS, IA, IB, IS)                                       \
    template <> struct wgw_mma<T, NB> {                                                            \
        static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db)             \
        {                                                                                          \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n" instr " {" DREGS "}, %" IA \
                         ", %" IB ", p, 1, 1, 1, 1;\n}\n"                                          \
                         : DOUTS                                                                   \
                         : "l"(da), "l"(db), "r"(1));                                              \
        }                                                                                          \
    };
#define WGW_MMA_DEFS(T, S)                                                                                       \
    WGW_MMA_DEF(T, 1, "wgmma.mma_async.sync.aligned.m64n64k16.f32." S "." S, GC_WG_DREGS32, GC_WG_DOUTS32, "32", "33", \
                "34")                                                                                            \
    WGW_MMA_DEF(T, 2, "wgmma.mma_async.sync.aligned.m64n128k16.f32." S "." S, GC_WG_DREGS64, GC_WG_DOUTS64, "64",      \
                "65", "66")                                                                                      \
    WGW_MMA_DEF(T, 3, "wgmma.mma_async.sync.aligned.m64n192k16.f32." S "." S, GC_WG_DREGS96, GC_WG_DOUTS96, "96",      \
                "97", "98")                                                                                      \
    WGW_MMA_DEF(T, 4, "wgmma.mma_async.sync.aligned.m64n256k16.f32." S "." S, GC_WG_DREGS, GC_WG_DOUTS, "128",    \
                "129", "130")
WGW_MMA_DEFS(__half, "f16")
WGW_MMA_DEFS(__nv_bfloat16, "bf16")
#undef WGW_MMA_DEFS
#undef WGW_MMA_DEF

/* ---- TF32 (float storage): the transposers' shared-memory accesses, the rounding, the
 * K-major descriptor and the k8 instructions */
__device__ __forceinline__ void wgt_lds4(uint32_t addr, uint32_t (&v)[4])
{
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void wgt_sts4(uint32_t addr, uint32_t a, uint32_t b, uint32_t c, uint32_t d)
{
    asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};\n" ::"r"(addr), "r"(a), "r"(b), "r"(c), "r"(d)
                 : "memory");
}
/* fp32 bits -> nearest TF32 (ties away from zero), as fp32 bits with the low 13 zero */
__device__ __forceinline__ uint32_t wgt_rna(uint32_t f)
{
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(__uint_as_float(f)));
    return r;
}
/* generic-proxy writes of shared memory made visible to the async proxy (wgmma's reads) */
__device__ __forceinline__ void wgt_fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
/* K-major operand, 128-byte swizzle: a row (M or N index) of 128 bytes = 32 fp32 K
 * values, 8-row groups 1024 bytes apart (SBO); LBO unused for a swizzled K-major layout */
__device__ __forceinline__ uint64_t wgt_desc(uint32_t addr)
{
    return (uint64_t)((addr & 0x3FFFF) >> 4) | ((uint64_t)1 << 16) | ((uint64_t)(1024 >> 4) << 32) | (1ull << 62);
}
/* d (64 x 64*NB per warpgroup, fp32) += A (64 x 8, K-major) * B (8 x 64*NB, stored N x K,
 * K-major): tf32 has no transpose bits (scale-d, imm-scale-a, imm-scale-b only) */
template <int NB> struct wgt_mma;
#define WGT_MMA_DEF(NB, instr, DREGS, DOUTS, IA, IB, IS)                                                   \
    template <> struct wgt_mma<NB> {                                                                        \
        static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db)                      \
        {                                                                                                   \
            asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %" IS ", 0;\n" instr " {" DREGS "}, %" IA ", %" IB \
                         ", p, 1, 1;\n}\n"                                                                  \
                         : DOUTS                                                                            \
                         : "l"(da), "l"(db), "r"(1));                                                       \
        }                                                                                                   \
    };
WGT_MMA_DEF(1, "wgmma.mma_async.sync.aligned.m64n64k8.f32.tf32.tf32", GC_WG_DREGS32, GC_WG_DOUTS32, "32", "33", "34")
WGT_MMA_DEF(2, "wgmma.mma_async.sync.aligned.m64n128k8.f32.tf32.tf32", GC_WG_DREGS64, GC_WG_DOUTS64, "64", "65", "66")
WGT_MMA_DEF(3, "wgmma.mma_async.sync.aligned.m64n192k8.f32.tf32.tf32", GC_WG_DREGS96, GC_WG_DOUTS96, "96", "97", "98")
WGT_MMA_DEF(4, "wgmma.mma_async.sync.aligned.m64n256k8.f32.tf32.tf32", GC_WG_DREGS, GC_WG_DOUTS, "128", "129", "130")
#undef WGT_MMA_DEF

/* The consumer's epilogue (both kernels): d[4j + {0,1}] is (row 16 warp + g, column 8j +
 * 2q + {0,1}) of its 64 x 64*NB tile, d[4j + {2,3}] the same columns 8 rows below; raw
 * fp32 sums into this consumer's slice (A box ma = tm * NA + w, B boxes from tn * NB). */
template <int NB>
__device__ __forceinline__ void wgw_store(const wgw_params &p, const float *d, int tm, int tn, int w, int NA, int nM,
                                          int nN, int warp, int lane)
{
    const int ma = tm * NA + (p.alt ? 0 : w);
    if (ma >= nM) return;
    const int slice = p.alt ? 2 * (int)blockIdx.y + w : (int)blockIdx.y;
    float *part = p.part + (int64_t)slice * p.KC * p.F;
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int hf = 0; hf < 2; hf++) {
        const int r = 16 * warp + g + 8 * hf; /* row within the A box */
        if (p.a_x) { /* rows: channels of one tap; columns: filters */
            const int tap = ma / p.cch, c = (ma - tap * p.cch) * 64 + r;
            if (c < p.C) {
                float *row = part + (int64_t)(tap * p.C + c) * p.F;
#pragma unroll
                for (int j = 0; j < 8 * NB; j++) {
                    const int f = (tn * NB + j / 8) * 64 + (j % 8) * 8 + 2 * q;
                    if (f < p.F) *(float2 *)(row + f) = make_float2(d[4 * j + 2 * hf], d[4 * j + 2 * hf + 1]);
                }
            }
        } else { /* rows: filters; columns: channels of the B boxes' taps */
            const int f = ma * 64 + r;
            if (f < p.F) {
#pragma unroll
                for (int j = 0; j < 8 * NB; j++) {
                    const int nb = tn * NB + j / 8;
                    if (nb < nN) {
                        const int tap = nb / p.cch, c = (nb - tap * p.cch) * 64 + (j % 8) * 8 + 2 * q;
                        if (c < p.C) {
                            float *col = part + (int64_t)(tap * p.C + c) * p.F + f;
                            col[0] = d[4 * j + 2 * hf];
                            col[p.F] = d[4 * j + 2 * hf + 1]; /* c + 1 < C: C is even */
                        }
                    }
                }
            }
        }
    }
}
#endif /* GC_WGW_DEVICE */

/* ------------------------------------------------------------------ the kernel
 * Shared memory (from a 1024-aligned base): ring [stages][NA + NB boxes] | barriers.
 * blockIdx.x: the output tile (tm, tn) -- A boxes tm*NA .. +NA-1, B boxes tn*NB .. +NB-1
 * (indices past the operand's box count load its last box again and are not stored);
 * blockIdx.y: the split, K-blocks [y*kbps, min(nkb, (y+1)*kbps)). */
template <typename T, int NB>
__global__ void __launch_bounds__(WGW_THREADS, 1)
gc_wgrad_wgmma_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmD,
                      const wgw_params p)
{
#if GC_WGW_DEVICE
    constexpr int ND = NB * 32; /* accumulators per thread */
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int S = p.stages, NA = p.alt ? 1 : 2;
    const uint32_t full0 = base + (uint32_t)(S * p.stage_bytes), empty0 = full0 + 8 * WGW_MAX_STAGES;

    const int tm = (int)blockIdx.x / p.tiles_n, tn = (int)blockIdx.x - tm * p.tiles_n;
    const int kb0 = (int)blockIdx.y * p.kbps;
    const int nst = min(p.nkb - kb0, p.kbps); /* >= 1 by construction */
    const int nM = p.a_x ? p.nX : p.nD, nN = p.a_x ? p.nD : p.nX;
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
    /* db: the db_rows blocks that stage the same dy boxes in a split take every
     * db_rows-th K-block of it each (the tiles along the x side) */
    const bool sums = p.dbpart != NULL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(full0 + 8 * s, 1);                /* the producer's expect_tx arrival */
            mbar_init(empty0 + 8 * s, (p.alt ? 1 : 2) + (sums ? 1 : 0)); /* consumer(s) (+ the column sums) */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmX) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmD) : "memory");
    }
    __syncthreads();

    if (wg == 0) { /* ---------------- producer: one thread */
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            const int OHW = p.OH * p.OW;
            int s = 0;
            uint32_t phase = 0;
            for (int i = 0; i < nst; i++) {
                const int kb = kb0 + i, k0 = kb * WGW_BK;
                const int n0 = k0 / OHW, r0 = k0 - n0 * OHW;
                const int p0 = r0 / p.OW, q0 = r0 - p0 * p.OW;
                mbar_wait(empty0 + 8 * s, phase ^ 1); /* first pass: passes at once */
                const uint32_t full = full0 + 8 * s;
                const uint32_t sb = base + (uint32_t)(s * p.stage_bytes);
                mbar_expect_tx(full, (uint32_t)((NA + NB) * WGW_BOX));
                for (int b = 0; b < NA + NB; b++) {
                    const bool isA = b < NA;
                    int box = isA ? tm * NA + b : tn * NB + (b - NA);
                    box = min(box, (isA ? nM : nN) - 1);
                    const uint32_t dst = sb + (uint32_t)(b * WGW_BOX);
                    if (isA == (p.a_x != 0)) { /* an x box: tap, 64-channel chunk */
                        const int tap = box / p.cch, c0 = (box - tap * p.cch) * 64;
                        const int kh = tap / p.KW, kw = tap - kh * p.KW;
                        wgw_tma_im2col(dst, &tmX, full, c0, q0 - p.pad_left, p0 - p.pad_top, n0, (uint16_t)kw,
                                       (uint16_t)kh);
                    } else { /* a dy box: 64 filters of 64 pixel rows */
                        tma_load_2d(dst, &tmD, full, box * 64, k0);
                    }
                }
                if (++s == S) {
                    s = 0;
                    phase ^= 1;
                }
            }
        } else if (sums && tid >= 32) {
            /* ---------------- db: warps 1-3 sum the staged dy boxes' columns. Of the
             * split's K-blocks this block takes those with i % db_rows == its index along
             * the x side; thread ct takes one 16-byte vector column (8 filters) of the
             * stage's dy boxes and rows grp, grp + groups, ... of each K-block (fixed
             * order); every stage is freed with the consumers. The groups are combined in
             * order at the end and written to the block's row of the split's db sums (TMA
             * zero-fills pixels past the batch). */
            const int ct = tid - 32;
            const int nbd = p.a_x ? NB : NA;            /* dy boxes per stage */
            const int nvec = nbd * 8, groups = WGW_SUM_THREADS / nvec;
            const int v = ct % nvec, grp = ct / nvec;
            const uint32_t doff = (uint32_t)((p.a_x ? NA : 0) * WGW_BOX + (v >> 3) * WGW_BOX);
            const int chunk = v & 7;
            const int mine = p.a_x ? tm : tn; /* this block's index among the db_rows */
            float acc[8];
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] = 0.0f;
            for (int i = 0; i < nst; i++) {
                const int s = i % S;
                mbar_wait(full0 + 8 * s, (uint32_t)(i / S) & 1u);
                if (grp < groups && i % p.db_rows == mine) {
                    /* plain loads (the full barrier's wait orders them after the copy):
                     * four rows' loads in flight before their sums */
                    const unsigned char *sb = smem_raw + (base + (uint32_t)(s * p.stage_bytes) + doff - smem_u32(smem_raw));
                    int r = grp;
                    for (; r + 3 * groups < WGW_BK; r += 4 * groups) {
                        uint4 q[4];
#pragma unroll
                        for (int u = 0; u < 4; u++) {
                            const int rr = r + u * groups;
                            q[u] = *(const uint4 *)(sb + rr * 128 + ((chunk ^ (rr & 7)) << 4));
                        }
#pragma unroll
                        for (int u = 0; u < 4; u++) wgw_add8<T>(q[u], acc);
                    }
                    for (; r < WGW_BK; r += groups)
                        wgw_add8<T>(*(const uint4 *)(sb + r * 128 + ((chunk ^ (r & 7)) << 4)), acc);
                }
                asm volatile("bar.sync 1, %0;\n" ::"r"(WGW_SUM_THREADS) : "memory"); /* all reads of the stage done */
                if (ct == 0) wgw_mbar_arrive(empty0 + 8 * s);
            }
            float *scratch = (float *)(smem_raw + (full0 + WGW_BAR_BYTES - smem_u32(smem_raw)));
#pragma unroll
            for (int e = 0; e < 8; e++) scratch[ct * 8 + e] = acc[e];
            asm volatile("bar.sync 1, %0;\n" ::"r"(WGW_SUM_THREADS) : "memory");
            const int first = p.a_x ? tn * NB : tm * NA; /* the stage's first dy box */
            float *row = p.dbpart + ((int64_t)blockIdx.y * p.db_rows + mine) * p.F;
            for (int col = ct; col < nvec * 8; col += WGW_SUM_THREADS) {
                const int box = first + col / 64, f = box * 64 + col % 64;
                if (box >= p.nD || f >= p.F) continue; /* a clamped repeat of the last box, or past F */
                float t = 0.0f;
                for (int g2 = 0; g2 < groups; g2++) t += scratch[(g2 * nvec + col / 8) * 8 + col % 8];
                row[f] = t;
            }
        }
    } else { /* ---------------- consumers */
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int w = wg - 1;
        const int warp = tid >> 5, lane = tid & 31;
        const uint32_t aoff = (uint32_t)((p.alt ? 0 : w) * WGW_BOX), boff = (uint32_t)(NA * WGW_BOX);
        float d[ND];
#pragma unroll
        for (int j = 0; j < ND; j++) d[j] = 0.0f;
        wgw_fence_regs<ND>(d);
        int prev = -1;
        const int step = p.alt ? 2 : 1;
        for (int i = p.alt ? w : 0; i < nst; i += step) {
            const int s = i % S;
            mbar_wait(full0 + 8 * s, (uint32_t)(i / S) & 1u);
            const uint32_t sa = base + (uint32_t)(s * p.stage_bytes) + aoff;
            const uint32_t sb = base + (uint32_t)(s * p.stage_bytes) + boff;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < WGW_BK / 16; kk++) /* 16 pixel rows = 2048 bytes per K step */
                wgw_mma<T, NB>::run(d, wgw_desc(sa + kk * 2048), wgw_desc(sb + kk * 2048));
            wg_commit();
            wg_wait<1>(); /* the group before this one has retired: its stage is free */
            if (prev >= 0 && tid == 0) wgw_mbar_arrive(empty0 + 8 * prev);
            prev = s;
        }
        wg_wait<0>();
        wgw_fence_regs<ND>(d);
        if (prev >= 0 && tid == 0) wgw_mbar_arrive(empty0 + 8 * prev);

        wgw_store<NB>(p, d, tm, tn, w, NA, nM, nN, warp, lane);
    }
#endif
}

/* ------------------------------------------------------------------ the TF32 kernel
 * Shared memory (from a 1024-aligned base): staging ring [sstages][NA + NB boxes] |
 * operand ring [stages][NA + NB boxes] | barriers sfull[8], sempty[8], ofull[8],
 * oempty[8] | the db threads' partial sums. A box is 8 KB both ways: staged, two TMA
 * copies of 32 pixel rows x 32 channels (128 bytes, swizzled), channels 0-31 then 32-63
 * of the box; in the operand ring, 64 K-major rows (channel / filter) of 32 pixels (128
 * bytes, swizzled) -- the B boxes of a stage are then one 64*NB-row K-major matrix.
 * blockIdx as in the 16-bit kernel; K-blocks are WGT_BK = 32 pixels. */
template <int NB>
__global__ void __launch_bounds__(WGW_THREADS, 1)
gc_wgrad_wgmma_tf32_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmD,
                           const wgw_params p)
{
#if GC_WGW_DEVICE
    constexpr int ND = NB * 32; /* accumulators per thread */
    extern __shared__ unsigned char smem_raw[];
    const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
    const int S = p.stages, SS = p.sstages, NA = p.alt ? 1 : 2, nbox = NA + NB;
    const uint32_t sring = base, oring = base + (uint32_t)(SS * p.stage_bytes);
    const uint32_t bars = oring + (uint32_t)(S * p.stage_bytes);
    const uint32_t sfull0 = bars, sempty0 = bars + 64, ofull0 = bars + 128, oempty0 = bars + 192;

    const int tm = (int)blockIdx.x / p.tiles_n, tn = (int)blockIdx.x - tm * p.tiles_n;
    const int kb0 = (int)blockIdx.y * p.kbps;
    const int nst = min(p.nkb - kb0, p.kbps); /* >= 1 by construction */
    const int nM = p.a_x ? p.nX : p.nD, nN = p.a_x ? p.nD : p.nX;
    const int wg = threadIdx.x >> 7, tid = threadIdx.x & 127;
    const bool sums = p.dbpart != NULL;

    if (threadIdx.x == 0) {
        for (int s = 0; s < SS; s++) {
            mbar_init(sfull0 + 8 * s, 1);  /* the producer's expect_tx arrival */
            mbar_init(sempty0 + 8 * s, 1); /* one transposer thread, after all 96 are done with it */
        }
        for (int s = 0; s < S; s++) {
            mbar_init(ofull0 + 8 * s, 1);              /* one transposer thread, after the fence */
            mbar_init(oempty0 + 8 * s, p.alt ? 1 : 2); /* the consumer(s) */
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmX) : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)&tmD) : "memory");
    }
    __syncthreads();

    /* no setmaxnreg (see the header) */
    if (wg == 0) {
        if (tid == 0) { /* ---------------- TMA producer: one thread */
            const int OHW = p.OH * p.OW;
            int s = 0;
            uint32_t phase = 0;
            for (int i = 0; i < nst; i++) {
                const int kb = kb0 + i, k0 = kb * WGT_BK;
                const int n0 = k0 / OHW, r0 = k0 - n0 * OHW;
                const int p0 = r0 / p.OW, q0 = r0 - p0 * p.OW;
                mbar_wait(sempty0 + 8 * s, phase ^ 1); /* first pass: passes at once */
                const uint32_t full = sfull0 + 8 * s;
                const uint32_t sb = sring + (uint32_t)(s * p.stage_bytes);
                mbar_expect_tx(full, (uint32_t)(nbox * WGW_BOX));
                for (int b = 0; b < nbox; b++) {
                    const bool isA = b < NA;
                    int box = isA ? tm * NA + b : tn * NB + (b - NA);
                    box = min(box, (isA ? nM : nN) - 1);
                    for (int h = 0; h < 2; h++) {
                        /* a half wholly past C / F loads the box's first half again (rows
                         * never stored): no copy is wholly out of bounds */
                        const uint32_t dst = sb + (uint32_t)(b * WGW_BOX + h * (WGW_BOX / 2));
                        if (isA == (p.a_x != 0)) { /* x: tap, 32 channels */
                            const int tap = box / p.cch, cb = (box - tap * p.cch) * 64;
                            const int kh = tap / p.KW, kw = tap - kh * p.KW;
                            const int c0 = cb + 32 * h < p.C ? cb + 32 * h : cb;
                            wgw_tma_im2col(dst, &tmX, full, c0, q0 - p.pad_left, p0 - p.pad_top, n0, (uint16_t)kw,
                                           (uint16_t)kh);
                        } else { /* dy: 32 filters of 32 pixel rows */
                            const int fb = box * 64, f0 = fb + 32 * h < p.F ? fb + 32 * h : fb;
                            tma_load_2d(dst, &tmD, full, f0, k0);
                        }
                    }
                }
                if (++s == SS) {
                    s = 0;
                    phase ^= 1;
                }
            }
        } else if (tid >= 32) {
            /* ---------------- transposers: warps 1-3. Per K-block: staged box -> K-major
             * operand box, each element rounded to nearest TF32. A unit is a quarter of a
             * box (one staged half ch, parity k); lane (q = lane >> 3, t = lane & 7) moves
             * the 4 x 4 block of pixels 4a..4a+3, channels 4b..4b+3 of the half: four
             * 16-byte loads (one per pixel row), the transpose in registers, four 16-byte
             * stores (one per channel row). With a = (q & 1, t1, t2), b = (q >> 1, t1 ^ k,
             * t0) (bits high to low) each quarter-warp's 8 loads hit 8 distinct 16-byte
             * chunks of a 128-byte row (swizzle chunk b ^ (pixel & 7)) and so do its 8
             * stores (a ^ (channel & 7)): no bank conflicts either way. */
            const int ct = tid - 32, wv = ct >> 5, lane = ct & 31;
            const int t = lane & 7, q = lane >> 3, t0 = t & 1, t1 = (t >> 1) & 1, t2 = t >> 2;
            const int a = ((q & 1) << 2) | (t1 << 1) | t2;
            /* db: as in the 16-bit kernel, thread ct sums one 16-byte column (4 filters) of
             * the stage's staged dy boxes over rows grp, grp + groups, ... */
            const int nbd = p.a_x ? NB : NA;
            const int nvec = nbd * 16, groups = WGW_SUM_THREADS / nvec;
            const int v = ct % nvec, grp = ct / nvec;
            const uint32_t doff = (uint32_t)(((p.a_x ? NA : 0) + (v >> 4)) * WGW_BOX + ((v >> 3) & 1) * (WGW_BOX / 2));
            const int chunk = v & 7;
            const int mine = p.a_x ? tm : tn;
            float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int i = 0; i < nst; i++) {
                const int ss = i % SS, os = i % S;
                mbar_wait(sfull0 + 8 * ss, (uint32_t)(i / SS) & 1u);
                mbar_wait(oempty0 + 8 * os, ((uint32_t)(i / S) & 1u) ^ 1u); /* first pass: passes at once */
                const uint32_t sst = sring + (uint32_t)(ss * p.stage_bytes);
                const uint32_t ost = oring + (uint32_t)(os * p.stage_bytes);
                for (int u = wv; u < 4 * nbox; u += 3) {
                    const int box = u >> 2, ch = (u >> 1) & 1, k = u & 1;
                    const int b = ((q >> 1) << 2) | ((t1 ^ k) << 1) | t0;
                    const uint32_t src = sst + (uint32_t)(box * WGW_BOX + ch * (WGW_BOX / 2) + a * 512);
                    uint32_t x[4][4];
#pragma unroll
                    for (int r = 0; r < 4; r++)
                        wgt_lds4(src + (uint32_t)(r * 128 + ((b ^ ((4 * a + r) & 7)) << 4)), x[r]);
                    const uint32_t dst = ost + (uint32_t)(box * WGW_BOX + (ch * 32 + 4 * b) * 128);
#pragma unroll
                    for (int j = 0; j < 4; j++)
                        wgt_sts4(dst + (uint32_t)(j * 128 + ((a ^ ((4 * b + j) & 7)) << 4)), wgt_rna(x[0][j]),
                                 wgt_rna(x[1][j]), wgt_rna(x[2][j]), wgt_rna(x[3][j]));
                }
                wgt_fence_async_smem();
                asm volatile("bar.sync 1, %0;\n" ::"r"(WGW_SUM_THREADS) : "memory"); /* the operand stage is written */
                if (ct == 0) wgw_mbar_arrive(ofull0 + 8 * os);
                if (sums && i % p.db_rows == mine) { /* db: the staged (unrounded) dy values */
                    if (grp < groups) {
                        const uint32_t sb = sst + doff;
                        for (int r = grp; r < WGT_BK; r += groups) {
                            uint32_t y[4];
                            wgt_lds4(sb + (uint32_t)(r * 128 + ((chunk ^ (r & 7)) << 4)), y);
#pragma unroll
                            for (int e = 0; e < 4; e++) acc[e] += __uint_as_float(y[e]);
                        }
                    }
                    /* all reads of the stage done */
                    asm volatile("bar.sync 1, %0;\n" ::"r"(WGW_SUM_THREADS) : "memory");
                }
                if (ct == 0) wgw_mbar_arrive(sempty0 + 8 * ss);
            }
            if (sums) {
                float *scratch = (float *)(smem_raw + (bars + WGW_BAR_BYTES - smem_u32(smem_raw)));
#pragma unroll
                for (int e = 0; e < 4; e++) scratch[ct * 4 + e] = acc[e];
                asm volatile("bar.sync 1, %0;\n" ::"r"(WGW_SUM_THREADS) : "memory");
                const int first = p.a_x ? tn * NB : tm * NA; /* the stage's first dy box */
                float *row = p.dbpart + ((int64_t)blockIdx.y * p.db_rows + mine) * p.F;
                for (int col = ct; col < nvec * 4; col += WGW_SUM_THREADS) {
                    const int box = first + col / 64, f = box * 64 + col % 64;
                    if (box >= p.nD || f >= p.F) continue; /* a clamped repeat of a box or half, or past F */
                    float tsum = 0.0f;
                    for (int g2 = 0; g2 < groups; g2++) tsum += scratch[(g2 * nvec + col / 4) * 4 + col % 4];
                    row[f] = tsum;
                }
            }
        }
    } else { /* ---------------- consumers */
        const int w = wg - 1;
        const int warp = tid >> 5, lane = tid & 31;
        const uint32_t aoff = (uint32_t)((p.alt ? 0 : w) * WGW_BOX), boff = (uint32_t)(NA * WGW_BOX);
        float d[ND];
#pragma unroll
        for (int j = 0; j < ND; j++) d[j] = 0.0f;
        wgw_fence_regs<ND>(d);
        int prev = -1;
        const int step = p.alt ? 2 : 1;
        for (int i = p.alt ? w : 0; i < nst; i += step) {
            const int s = i % S;
            mbar_wait(ofull0 + 8 * s, (uint32_t)(i / S) & 1u);
            const uint32_t sa = oring + (uint32_t)(s * p.stage_bytes) + aoff;
            const uint32_t sb = oring + (uint32_t)(s * p.stage_bytes) + boff;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < WGT_BK / 8; kk++) /* k8: 8 pixels = 32 bytes of every 128-byte row */
                wgt_mma<NB>::run(d, wgt_desc(sa + kk * 32), wgt_desc(sb + kk * 32));
            wg_commit();
            wg_wait<1>(); /* the group before this one has retired: its stage is free */
            if (prev >= 0 && tid == 0) wgw_mbar_arrive(oempty0 + 8 * prev);
            prev = s;
        }
        wg_wait<0>();
        wgw_fence_regs<ND>(d);
        if (prev >= 0 && tid == 0) wgw_mbar_arrive(oempty0 + 8 * prev);
        wgw_store<NB>(p, d, tm, tn, w, NA, nM, nN, warp, lane);
    }
#endif
}

/* Holds 256 bytes of static shared memory in sm_90a code only: cudaFuncGetAttributes on
 * it tells which image the driver picked for this device. */
__global__ void gc_wgrad_wgmma_probe(int *p)
{
#if GC_WGW_DEVICE
    __shared__ int s[64];
    s[threadIdx.x & 63] = (int)threadIdx.x;
    __syncthreads();
    if (p) p[threadIdx.x] = s[(threadIdx.x + 1) & 63];
#endif
}

/* ------------------------------------------------------------------ host side */
int g_wgw_compiled[64]; /* per device: 0 unknown, 1 yes, 2 no */

/* 1 when this binary holds sm_90a code for the running device and the driver has the
 * tensor-map encoders */
int wgw_compiled(const gc_backend *be)
{
    if (gc_cuda_cc(be) != 90) return 0; /* sm_90a code runs on compute capability 9.0 only */
    const int dev = be->device_index;
    if (dev >= 0 && dev < 64 && g_wgw_compiled[dev]) return g_wgw_compiled[dev] == 1;
    cudaFuncAttributes fa;
    int yes = 0;
    if (cudaFuncGetAttributes(&fa, gc_wgrad_wgmma_probe) == cudaSuccess)
        yes = fa.sharedSizeBytes >= 256;
    else
        (void)cudaGetLastError();
    if (yes && (!gc_tma_encoders()->tiled || !gc_tma_encoders()->im2col)) yes = 0;
    if (dev >= 0 && dev < 64) g_wgw_compiled[dev] = yes ? 1 : 2;
    return yes;
}

int wgw_aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Why the kernel cannot take this layer (everything but pointers and the driver's
 * encoding), or NULL. */
const char *wgw_why(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt)
{
    if (dt == GC_F32 && !gc_get_allow_tf32()) return "float32 only as TF32 (TF32 is off: exact float32)";
    if (dt != GC_F16 && dt != GC_BF16 && dt != GC_F32) return "float16 / bfloat16 / float32 (TF32) storage only";
    if (!wgw_compiled(be)) return "no sm_90a code for this device, or no tensor-map encoder in the driver";
    if (dt == GC_F32) {
        if (g->C <= 0 || g->F <= 0 || g->C % 4 || g->F % 4) return "C and F must be multiples of 4 (float32 / TF32)";
    } else if (g->C <= 0 || g->F <= 0 || g->C % 8 || g->F % 8) {
        return "C and F must be multiples of 8";
    }
    if (g->dh != 1 || g->dw != 1) return "dilation 1 only";
    const int one = g->KH == 1 && g->KW == 1 && g->pad_top == 0 && g->pad_left == 0;
    if (!one && (g->sh != 1 || g->sw != 1)) return "stride 1, or a 1x1 unpadded kernel";
    if (one && (g->sh > 1 || g->sw > 1) &&
        ((int64_t)g->sh * g->OH > g->H || (int64_t)g->sh * g->W < (int64_t)g->sw * g->OW))
        /* the strided view's tensor map must not have rows / images overlap in its strides */
        return "strided 1x1 with H not a multiple of the row stride";
    if (g->KH > 256 || g->KW > 256) return "kernel taps past the im2col offsets";
    const int64_t lw = -g->pad_left, lh = -g->pad_top;
    const int64_t uw = one ? 0 : g->OW - g->W - g->pad_left, uh = one ? 0 : g->OH - g->H - g->pad_top;
    if (lw < -128 || lh < -128 || uw < -128 || uh < -128 || uw > 127 || uh > 127)
        return "padding past the 8-bit im2col box corners";
    const int64_t P = g->N * g->OH * g->OW, KC = g->KH * g->KW * g->C;
    if (P <= 0 || P > INT_MAX / 2 || g->N * g->H * g->W * g->C >= ((int64_t)1 << 40) || KC * g->F > INT_MAX / 2 ||
        g->F > 65535 || g->C > 65535)
        return "sizes past 32-bit indices";
    int S, SS;
    const size_t optin = gc_cuda_smem_optin(be);
    if (dt == GC_F32 ? !wgt_rings(optin, 1, 2, 0, &S, &SS) : wgw_smem_bytes(4, 5) > optin)
        return "not enough shared memory for the ring";
    return NULL;
}

/* The plan of a launch: which operand is A, the block shape, NB, the split. */
struct wgw_plan {
    int a_x, alt, nb;
    int tiles_m, tiles_n, splits, kbps, slices;
    int stages;  /* the ring (TF32: the operand ring; 0: the forced shape does not fit) */
    int sstages; /* TF32: the staging ring */
    int nkb;     /* K-blocks of the launch (64 pixels; TF32: 32) */
};

/* Per-K-block cost of one block (arbitrary units: one 64x64x64 MMA block at full rate =
 * 1; one 8 KB box from L2 ~ 2, the H200's L2 -> SM rate per SM against its Tensor Core
 * rate); the narrow instructions lose to shared-memory bandwidth. */
double wgw_kb_cost(int alt, int nb)
{
    static const double eff[5] = {0, 0.55, 0.8, 0.9, 1.0};
    const double boxes = (alt ? 1 : 2) + nb, units = (alt ? 1 : 2) * nb;
    const double load = 2.0 * boxes, mma = units / eff[nb];
    return load > mma ? load : mma;
}

/* The block shape for nX x boxes and nD dy boxes (as the variant index: 1 + (a_x << 3 |
 * alt << 2 | (NB - 1))), or 0 for the cost model. Measured on an H200 over ResNet-50's
 * layers at batch 256 (benchmarks/sweep_wgrad.py, RESULTS.md), where the cost model's
 * picks ran up to 2.4x slower: the wide side (4 boxes a stage) wants real boxes, so A is
 * x with 4 dy boxes a stage where F >= 256, else A is dy (2 boxes shared, or 1 alternating
 * where F = 64, with as many x boxes as divide the taps' boxes evenly). */
int wgw_rule(int nX, int nD)
{
    const auto idx = [](int a_x, int alt, int nb) { return 1 + (a_x << 3 | alt << 2 | (nb - 1)); };
    if (nD >= 4) return idx(1, 0, 4);                          /* xs4 */
    if (nX >= 4 && nD >= 2) return idx(0, 0, 4);               /* ds4 */
    if (nX >= 4 && nD == 1) return idx(0, 1, nX % 4 && nX % 3 == 0 ? 3 : 4); /* da3 / da4 */
    if (nX == 1 && nD == 1) return idx(1, 1, 1);               /* xa1 */
    return 0;
}

void wgw_make_plan(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int variant, wgw_plan *pl)
{
    const int cch = (int)((g->C + 63) / 64), nX = (int)(g->KH * g->KW) * cch, nD = (int)((g->F + 63) / 64);
    const int tf32 = dt == GC_F32;
    const size_t optin = gc_cuda_smem_optin(be);
    if (!variant) {
        variant = wgw_rule(nX, nD);
        /* TF32: an alternating NB = 4 stage (5 boxes) leaves no room for two staging
         * stages beside the 4 operand stages: NB = 3 where the boxes divide by 3, else 2 */
        if (tf32 && variant && ((variant - 1) & 7) == 7) {
            const int a_x = ((variant - 1) >> 3) & 1, nN = a_x ? nD : nX;
            variant = 1 + (a_x << 3 | 1 << 2 | (nN % 3 == 0 ? 2 : 1));
        }
    }
    const int64_t P = g->N * g->OH * g->OW, KC = g->KH * g->KW * g->C;
    const int nkb = (int)((P + WGW_BK - 1) / WGW_BK);
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 132;
    const int forced_splits = gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_SPLITS);
    double best = -1;
    for (int v = 0; v < 16; v++) {
        const int a_x = (v >> 3) & 1, alt = (v >> 2) & 1, nb = (v & 3) + 1;
        if (variant && v != variant - 1) continue;
        int rS, rSS;
        if (tf32 && !variant && !wgt_rings(optin, alt, (alt ? 1 : 2) + nb, 0, &rS, &rSS)) continue;
        const int nM = a_x ? nX : nD, nN = a_x ? nD : nX;
        const int tm = alt ? nM : (nM + 1) / 2, tn = (nN + nb - 1) / nb;
        const int64_t tiles = (int64_t)tm * tn;
        if (tiles > INT_MAX / 2) continue;
        const double kbc = wgw_kb_cost(alt, nb);
        /* the split: the fewest K ranges whose waves of one block per SM cost least, with
         * a block's start-up (~16 units per wave) and the partial sums' traffic (written
         * once, read once: 8 bytes a float at ~3 units per 8 KB, spread over the SMs)
         * counted */
        const int64_t slice_floats = KC * g->F;
        int bs = 1;
        double bc = -1;
        const int smax = forced_splits > 0 ? forced_splits : (nkb < 4096 ? nkb : 4096);
        for (int s = forced_splits > 0 ? smax : 1; s <= smax; s++) {
            const int kbps = (nkb + s - 1) / s, S = (nkb + kbps - 1) / kbps;
            if (S != s && forced_splits <= 0) continue; /* same as a smaller s */
            if ((int64_t)S > 65535) break;
            const int64_t blocks = tiles * S, waves = (blocks + sms - 1) / sms;
            const int64_t slices = (int64_t)S * (alt ? 2 : 1);
            if (slices * slice_floats * 4 > ((int64_t)1 << 31)) break; /* 2 GB of partials */
            const double c = (double)waves * (kbps * kbc + 16.0) + (double)slices * slice_floats * 24.0 / 8192.0 / sms;
            if (bc < 0 || c < bc * 0.999) {
                bc = c;
                bs = S;
            }
        }
        if (best < 0 || bc < best * 0.999) {
            best = bc;
            pl->a_x = a_x;
            pl->alt = alt;
            pl->nb = nb;
            pl->tiles_m = tm;
            pl->tiles_n = tn;
            pl->kbps = (nkb + bs - 1) / bs;
            pl->splits = (nkb + pl->kbps - 1) / pl->kbps;
            pl->slices = pl->splits * (alt ? 2 : 1);
        }
    }
    /* ring depth: as many stages as fit, at most WGW_MAX_STAGES, even (alternate stages
     * keep their consumer) and at least 4 when alternating: a consumer holds its last
     * stage until its next one has been issued, so it needs two slots of its own (the
     * shared mode needs 2) */
    const int nbox = (pl->alt ? 1 : 2) + pl->nb, st_min = pl->alt ? 4 : 2;
    pl->nkb = nkb;
    pl->sstages = 0;
    if (tf32) {
        /* the same split of the pixels (the cost model counts 64-pixel K-blocks): twice
         * the 32-pixel K-blocks per split */
        pl->nkb = (int)((P + WGT_BK - 1) / WGT_BK);
        pl->kbps *= 2;
        pl->splits = (pl->nkb + pl->kbps - 1) / pl->kbps;
        pl->slices = pl->splits * (pl->alt ? 2 : 1);
        int S = 0, SS = 0;
        if (!wgt_rings(optin, pl->alt, nbox, gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_STAGES), &S, &SS))
            S = SS = 0;
        pl->stages = S;
        pl->sstages = SS;
        return;
    }
    int st = WGW_MAX_STAGES;
    while (st > st_min && wgw_smem_bytes(st, nbox) > optin) st -= 2;
    const int cap = gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_STAGES);
    if (cap > 0 && cap < st) st = (cap & ~1) < st_min ? st_min : cap & ~1;
    pl->stages = st;
}

typedef void (*wgw_kernel_fn)(const CUtensorMap, const CUtensorMap, const wgw_params);
template <typename T> wgw_kernel_fn wgw_kernel_for(int nb)
{
    switch (nb) {
    case 1: return gc_wgrad_wgmma_kernel<T, 1>;
    case 2: return gc_wgrad_wgmma_kernel<T, 2>;
    case 3: return gc_wgrad_wgmma_kernel<T, 3>;
    default: return gc_wgrad_wgmma_kernel<T, 4>;
    }
}
wgw_kernel_fn wgt_kernel_for(int nb)
{
    switch (nb) {
    case 1: return gc_wgrad_wgmma_tf32_kernel<1>;
    case 2: return gc_wgrad_wgmma_tf32_kernel<2>;
    case 3: return gc_wgrad_wgmma_tf32_kernel<3>;
    default: return gc_wgrad_wgmma_tf32_kernel<4>;
    }
}
size_t g_wgw_smem_set[3][4][64]; /* dtype (f16, bf16, f32), NB, device: the largest limit set so far */

/* the forced block shape: 0 the cost model, else 1 + (a_x << 3 | alt << 2 | (NB - 1)),
 * which is the index of its name at cuda.conv2d.wgrad_wgmma ("ds1" = 1 ... "xa4" = 16) */
int wgw_variant(void) { return gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD_WGMMA); }

} // namespace

extern "C" int gc_conv2d_wgrad_wgmma_compiled(const gc_backend *be) { return wgw_compiled(be); }

extern "C" int gc_conv2d_wgrad_wgmma_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt)
{
    /* float32 as TF32 on the same rule (its block shapes start from the 16-bit ones, see
     * wgw_make_plan); exact float32 never */
    if (dt == GC_F32 ? !gc_get_allow_tf32() : dt != GC_F16 && dt != GC_BF16) return 0;
    if (gc_cuda_cc(be) != 90 || g->C % 64 || g->F % 64) return 0;
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 132;
    /* at least one K-block of pixels per SM (ResNet-50's 7x7 layers at batch 256 have
     * 196); below that the mma.sync kernel's small blocks split K as finely. With
     * wgw_rule's block shapes every ResNet-50 layer with C, F >= 64 ran faster here than
     * on the mma.sync kernel or the GEMM route (H200, batch 256, sweep_wgrad.py). */
    if (g->N * g->OH * g->OW < (int64_t)WGW_BK * sms) return 0;
    return wgw_why(be, g, dt) == NULL;
}

extern "C" gc_status gc_conv2d_wgrad_wgmma(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                          const void *x, const void *dy, void *dw, void *db)
{
    const char *why = wgw_why(be, g, dt);
    if (!why && (!wgw_aligned16(x) || !wgw_aligned16(dy))) why = "x and dy must be 16-byte aligned";
    if (why)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "conv2d_bwd_filter (wgmma): x (%lld, %lld, %lld, %lld), kernel %lldx%lld -> %lld, stride "
                       "(%d, %d), dilation (%d, %d), %s: %s",
                       (long long)g->N, (long long)g->H, (long long)g->W, (long long)g->C, (long long)g->KH,
                       (long long)g->KW, (long long)g->F, g->sh, g->sw, g->dh, g->dw, gc_dtype_name(dt), why);
    const int64_t P = g->N * g->OH * g->OW, KC = g->KH * g->KW * g->C;
    const int tf32 = dt == GC_F32;
    wgw_plan pl;
    memset(&pl, 0, sizeof pl);
    wgw_make_plan(be, g, dt, wgw_variant(), &pl);
    const int nbox = (pl.alt ? 1 : 2) + pl.nb;
    if (tf32 && pl.stages == 0)
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter (wgmma): the %c%c%d block shape's rings (%d KB stages) "
                       "do not fit %zu bytes of shared memory (float32 / TF32)", pl.a_x ? 'x' : 'd', pl.alt ? 'a' : 's',
                       pl.nb, nbox * WGW_BOX / 1024, gc_cuda_smem_optin(be));
    const size_t smem = tf32 ? wgt_smem_bytes(pl.stages, pl.sstages, nbox) : wgw_smem_bytes(pl.stages, nbox);
    if (smem > gc_cuda_smem_optin(be))
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter (wgmma): %zu bytes of shared memory needed", smem);
    const int64_t grid_x = (int64_t)pl.tiles_m * pl.tiles_n;
    if (grid_x > INT_MAX || pl.splits > 65535)
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter (wgmma): grid too large");

    /* workspace: [slices of KC x F fp32 partials | db: splits x db_rows rows of F sums] */
    const int db_rows = pl.a_x ? pl.tiles_m : pl.tiles_n;
    const size_t part_bytes = ((size_t)pl.slices * (size_t)(KC * g->F) * sizeof(float) + 255) & ~(size_t)255;
    const size_t db_bytes = db ? (size_t)pl.splits * (size_t)db_rows * (size_t)g->F * sizeof(float) : 0;
    const size_t es = gc_dtype_size(dt);
    const CUtensorMapDataType tdt = dt == GC_F16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                    : dt == GC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                    : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    /* a box: 128-byte rows (64 16-bit / 32 float channels) of BK pixels (TF32: two per
     * 64-channel box) */
    const int bk = tf32 ? WGT_BK : WGW_BK, bc = tf32 ? 32 : 64;
    CUtensorMap tmX, tmD;
    {
        /* x as (C, W, H, N); a strided 1x1 layer as its sampled pixels (C, OW, OH, N), the
         * strides of W and H multiplied by the layer's */
        const int one = g->KH == 1 && g->KW == 1;
        const int64_t Wv = one ? g->OW : g->W, Hv = one ? g->OH : g->H;
        const int64_t sw = one ? g->sw : 1, sh = one ? g->sh : 1;
        const cuuint64_t dims[4] = {(cuuint64_t)g->C, (cuuint64_t)Wv, (cuuint64_t)Hv, (cuuint64_t)g->N};
        const cuuint64_t strides[3] = {(cuuint64_t)(sw * g->C * es), (cuuint64_t)(sh * g->W * g->C * es),
                                       (cuuint64_t)(g->H * g->W * g->C * es)};
        const int lower[2] = {-g->pad_left, -g->pad_top};
        const int upper[2] = {one ? 0 : (int)(g->OW - g->W - g->pad_left), one ? 0 : (int)(g->OH - g->H - g->pad_top)};
        const cuuint32_t estr[4] = {1, 1, 1, 1};
        CUresult r = gc_tma_encoders()->im2col(&tmX, tdt, 4, (void *)x, dims, strides, lower, upper, (cuuint32_t)bc,
                                               (cuuint32_t)bk, estr,
                                      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED,
                           "conv2d_bwd_filter (wgmma): cuTensorMapEncodeIm2col failed (%d) for x (%lld, %lld, %lld, "
                           "%lld) seen as (%lld, %lld) pixels, strides (%lld, %lld), corners (%d, %d) .. (%d, %d)",
                           (int)r, (long long)g->N, (long long)g->H, (long long)g->W, (long long)g->C, (long long)Hv,
                           (long long)Wv, (long long)sh, (long long)sw, lower[0], lower[1], upper[0], upper[1]);
    }
    {
        const cuuint64_t dims[2] = {(cuuint64_t)g->F, (cuuint64_t)P};
        const cuuint64_t strides[1] = {(cuuint64_t)(g->F * es)};
        const cuuint32_t box[2] = {(cuuint32_t)bc, (cuuint32_t)bk}, estr[2] = {1, 1};
        CUresult r = gc_tma_encoders()->tiled(&tmD, tdt, 2, (void *)dy, dims, strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE,
                                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
        if (r != CUDA_SUCCESS)
            return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter (wgmma): cuTensorMapEncodeTiled failed (%d) for dy "
                           "(%lld, %lld)", (int)r, (long long)P, (long long)g->F);
    }
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, part_bytes + db_bytes, &ws);
    if (st) return st;

    wgw_params prm;
    prm.part = (float *)ws;
    prm.dbpart = db ? (float *)((char *)ws + part_bytes) : NULL;
    prm.db_rows = db_rows;
    prm.C = (int)g->C;
    prm.F = (int)g->F;
    prm.KW = (int)g->KW;
    prm.cch = (int)((g->C + 63) / 64);
    prm.OH = (int)g->OH;
    prm.OW = (int)g->OW;
    prm.pad_top = g->pad_top;
    prm.pad_left = g->pad_left;
    prm.nX = (int)(g->KH * g->KW) * prm.cch;
    prm.nD = (int)((g->F + 63) / 64);
    prm.a_x = pl.a_x;
    prm.alt = pl.alt;
    prm.tiles_n = pl.tiles_n;
    prm.nkb = pl.nkb;
    prm.kbps = pl.kbps;
    prm.stages = pl.stages;
    prm.sstages = pl.sstages;
    prm.stage_bytes = nbox * WGW_BOX;
    prm.KC = (int)KC;

    const int di = be->device_index >= 0 && be->device_index < 64 ? be->device_index : 63;
    const int ti = dt == GC_F16 ? 0 : dt == GC_BF16 ? 1 : 2;
    const wgw_kernel_fn k = ti == 0   ? wgw_kernel_for<__half>(pl.nb)
                            : ti == 1 ? wgw_kernel_for<__nv_bfloat16>(pl.nb)
                                      : wgt_kernel_for(pl.nb);
    if (g_wgw_smem_set[ti][pl.nb - 1][di] < smem) {
        GC_CUDA_TRY(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        g_wgw_smem_set[ti][pl.nb - 1][di] = smem;
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD_WGMMA, 1 + (pl.a_x << 3 | pl.alt << 2 | (pl.nb - 1)));
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_SPLITS, pl.splits);
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_STAGES, pl.stages);
    k<<<dim3((unsigned)grid_x, (unsigned)pl.splits), WGW_THREADS, smem, gc_cuda_stream(be)>>>(tmX, tmD, prm);
    if ((st = gc_cuda_launch_check("conv2d_bwd_filter (wgmma)"))) return st;
    const int64_t n = KC * g->F;
    if ((st = gc_conv2d_reduce_splits(be, dt, (const float *)ws, pl.slices, n, n, dw))) return st;
    if (db) st = gc_conv2d_reduce_splits(be, dt, prm.dbpart, pl.splits * db_rows, g->F, g->F, db);
    return st;
}

/* What the automatic choice would launch (for benchmarks / tests): "xs4" style variant
 * string, the split count and the ring depth. */
extern "C" void gc_conv2d_wgrad_wgmma_describe(const gc_backend *be, const gc_conv2d_geom *g, char *buf, size_t n)
{
    wgw_plan pl;
    memset(&pl, 0, sizeof pl);
    wgw_make_plan(be, g, GC_BF16, wgw_variant(), &pl); /* the 16-bit plan */
    snprintf(buf, n, "%c%c%d tiles %dx%d splits %d (kb/split %d) stages %d", pl.a_x ? 'x' : 'd', pl.alt ? 'a' : 's',
             pl.nb, pl.tiles_m, pl.tiles_n, pl.splits, pl.kbps, pl.stages);
}
