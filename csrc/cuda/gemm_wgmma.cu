/* gemm_wgmma.cu -- Hopper GEMM: TMA + mbarrier pipeline + wgmma (sm_90a only).
 *
 * What it provides: gc_cuda_gemm_wgmma (f16 / bf16 with fp32 accumulation; f32 as
 * TF32) for big problems on an H100 / H200, and gc_cuda_gemm_wgmma_compiled, which
 * tells whether this binary holds sm_90a code for the running device.
 *
 * Design (the warp-specialised persistent kernel of CUTLASS 3 / DeepGEMM, written
 * out; the kernel is in wgmma_gemm_kernel.cuh, which the implicit-GEMM convolutions of
 * conv2d_wgmma_igemm.cu share): a block of 3 warpgroups owns one multiprocessor for the whole launch, blocks
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
 *     while the producer is already loading the next tile -- or, for 16-bit C, through
 *     shared memory and TMA stores (wgmma_gemm_kernel.cuh's wg_epi).
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
#include "wgmma_gemm_kernel.cuh" /* the kernel (shared with conv2d_wgmma_igemm.cu) and its launch */

namespace {

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
int aligned16(const void *p, int64_t ld, int es)
{
    return ((uintptr_t)p % 16 == 0) && ((ld * es) % 16 == 0);
}

int g_multicast = 1;
int g_fit[64]; /* per device: the clusters of 2 that fit (gc_cuda_gemm_wgmma_clusters) */

template <typename T, bool KMAJ_B>
gc_status launch_wgmma(const gc_backend *be, const void *A, int64_t lda, const void *B,
                       int64_t ldb, const gc_gemm_desc *d)
{
    const int es = (int)sizeof(T), bke = 128 / es;
    CUtensorMap ta, tb;
    gc_status st = wg_make_map_2d(&ta, d->dtype, A, d->K, d->M, lda * es, bke, WG_BM);
    if (st) return st;
    if (KMAJ_B) st = wg_make_map_2d(&tb, d->dtype, B, d->K, d->N, ldb * es, bke, WG_BN / 2);
    else st = wg_make_map_2d(&tb, d->dtype, B, d->N, d->K, ldb * es, 64, bke);
    if (st) return st;
    wg_conv none;
    memset(&none, 0, sizeof none);
    int fit = 0;
    st = wg_launch<T, KMAJ_B, WG_A_TILED>(be, ta, tb, d->M, d->N, d->K, gc_gemm_epi_of(d), g_multicast, none,
                                          "gemm (wgmma)", &fit);
    const int dev = be->device_index;
    if (dev >= 0 && dev < 64 && fit > 0) g_fit[dev] = fit;
    return st;
}

int g_tf32_round = 1;
int g_compiled[64]; /* per device: 0 unknown, 1 yes, 2 no */

} // namespace

extern "C" void gc_cuda_gemm_set_tf32_round(int on) { g_tf32_round = on != 0; }

extern "C" int gc_cuda_gemm_get_tf32_round(void) { return g_tf32_round; }

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
