/* hopper_ptx.cuh -- what the Hopper (sm_90a) TMA / wgmma files share (gemm_wgmma.cu,
 * conv2d_wgmma.cu, conv2d_wgmma_wgrad.cu): on the device, the PTX primitives
 * (shared-memory addresses, mbarriers, the tiled and im2col TMA loads, the wgmma group fences); on
 * the host, the driver's tensor-map encoders (gc_tma_encoders, tensor_map.cu).
 *
 * One copy so that a fix (a barrier's memory semantics, say) reaches every kernel. The
 * device primitives exist for sm_90a only: the body is empty for other targets, where
 * those kernels compile to stubs. GC_HOPPER_WATCHDOG (cycles; the standalone tests set it): an mbarrier
 * wait that never completes traps instead of hanging the GPU (a bad tensor map, say);
 * 0 in the library, where a preempted context may legitimately wait long. */
#pragma once

#include <cuda.h>
#include <stdint.h>

/* The fp32 accumulator operands of a wgmma .m64nN (N/2 per thread: 32 for n64 up to 128
 * for n256): d[0..N/2-1] of each thread, as the asm operand list and as "+f"
 * constraints. Each list extends the one before it. */
#define GC_WG_DREGS32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15" \
    ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define GC_WG_DOUTS32 \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
    "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
    "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
#define GC_WG_DREGS64 GC_WG_DREGS32 \
    ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47" \
    ", %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define GC_WG_DOUTS64 GC_WG_DOUTS32, \
    "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), \
    "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), \
    "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
    "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
#define GC_WG_DREGS96 GC_WG_DREGS64 \
    ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79" \
    ", %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95"
#define GC_WG_DOUTS96 GC_WG_DOUTS64, \
    "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), \
    "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), \
    "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), \
    "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95])
#define GC_WG_DREGS112 GC_WG_DREGS96 \
    ", %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111"
#define GC_WG_DOUTS112 GC_WG_DOUTS96, \
    "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), \
    "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111])
#define GC_WG_DREGS GC_WG_DREGS112 \
    ", %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
#define GC_WG_DOUTS GC_WG_DOUTS112, \
    "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]), \
    "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])

#ifndef GC_HOPPER_WATCHDOG
#define GC_HOPPER_WATCHDOG 0
#endif

/* Host: cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col as the CUDA 12.0 driver API
 * declares them, fetched once from the driver at run time (the module never links
 * libcuda). gc_tma_encoders() never returns NULL; a member is NULL when the driver lacks
 * that function. Thread-safe (the first call fetches them). */
typedef CUresult (*gc_tma_encode_tiled_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                           const cuuint64_t *, const cuuint64_t *, const cuuint32_t *,
                                           const cuuint32_t *, CUtensorMapInterleave, CUtensorMapSwizzle,
                                           CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
typedef CUresult (*gc_tma_encode_im2col_fn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *,
                                            const cuuint64_t *, const cuuint64_t *, const int *, const int *,
                                            cuuint32_t, cuuint32_t, const cuuint32_t *, CUtensorMapInterleave,
                                            CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);
struct gc_tma_encoder_fns {
    gc_tma_encode_tiled_fn tiled;
    gc_tma_encode_im2col_fn im2col;
};
const gc_tma_encoder_fns *gc_tma_encoders(void);

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
namespace gc_hopper {

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity)
{
    uint32_t done;
#if GC_HOPPER_WATCHDOG
    const long long t0 = clock64();
#endif
    do {
#if GC_HOPPER_WATCHDOG
        if (clock64() - t0 > (long long)GC_HOPPER_WATCHDOG) __trap();
#endif
        asm volatile("{\n.reg .pred p;\n"
                     "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done)
                     : "r"(bar), "r"(parity)
                     : "memory");
    } while (!done);
}
/* 2-D tile of the tensor map into shared memory; c0 is the inner (contiguous)
 * coordinate. Completion is counted on the mbarrier in bytes. */
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
                 : "memory");
}
/* im2col box of a 4-D (C, W, H, N) tensor map: channels [c, c + channelsPerPixel) of
 * pixelsPerColumn pixels whose filter corners start at (w, h, n) and advance by the
 * map's traversal strides, each read at (corner + (off_w, off_h)); padding and pixels
 * past the tensor read as zeros. */
__device__ __forceinline__ void tma_load_im2col_4d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c, int w,
                                                   int h, int n, uint16_t off_w, uint16_t off_h)
{
    asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.im2col.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4, %5, %6}], [%2], {%7, %8};\n" ::"r"(dst),
                 "l"((uint64_t)map), "r"(bar), "r"(c), "r"(w), "r"(h), "r"(n), "h"(off_w), "h"(off_h)
                 : "memory");
}
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

} // namespace gc_hopper
#endif
