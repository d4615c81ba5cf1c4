/* hopper_ptx.cuh -- the Hopper (sm_90a) PTX primitives shared by the two wgmma kernels
 * (gemm_wgmma.cu, conv2d_wgmma.cu): shared-memory addresses, mbarriers, the tiled TMA
 * load and the wgmma group fences.
 *
 * One copy so that a fix (a barrier's memory semantics, say) reaches both kernels. Only
 * device code for sm_90a: the body is empty for other targets, where those kernels
 * compile to stubs. GC_HOPPER_WATCHDOG (cycles; the standalone tests set it): an mbarrier
 * wait that never completes traps instead of hanging the GPU (a bad tensor map, say);
 * 0 in the library, where a preempted context may legitimately wait long. */
#pragma once

#include <cuda.h>
#include <stdint.h>

#ifndef GC_HOPPER_WATCHDOG
#define GC_HOPPER_WATCHDOG 0
#endif

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
__device__ __forceinline__ void wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

} // namespace gc_hopper
#endif
