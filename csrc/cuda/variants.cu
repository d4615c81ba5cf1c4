/* variants.cu -- which CUDA kernel variants can run here: the probe the CUDA backend
 * registers with the variant registry (core/variants.c, gpucmp_variants.h).
 *
 * Answers for the first device (cuda:0, gpucmp's default): the mma.sync kernels (and
 * what is built on them: the small-C kernels, the GEMM route) need compute capability
 * 8.0; the wgmma kernels need their sm_90a image to be the one the driver loaded for the
 * device (each file's probe kernel) and the driver's tensor-map encoders. Asking those
 * initialises the device as its first op would (gc_cuda_set_device), which is why the
 * backend registers the probe as not to be called while the environment is read.
 * Knobs are always available (a kernel that does not run ignores its knob). */
#include "conv2d_internal.cuh"
#include "gemm.cuh"
#include "rnn_persistent.cuh"
#include "gpucmp_rnn_cudnn.h"

/* the device's context exists (probe kernels are looked up in it) */
static int device_ready(const gc_backend *be, const char **why)
{
    if (gc_cuda_set_device(be) == GC_OK) return 1;
    gc_clear_error();
    *why = "cuda:0 could not be initialised";
    return 0;
}

static int tensor_cores(const gc_backend *be, const char **why)
{
    if (gc_cuda_cc(be) >= 80) return 1;
    *why = "mma.sync needs compute capability 8.0 or newer";
    return 0;
}

static int wgmma(const gc_backend *be, int (*compiled)(const gc_backend *), const char **why)
{
    if (gc_cuda_cc(be) != 90) {
        *why = "wgmma needs compute capability 9.0 (sm_90a)";
        return 0;
    }
    if (!device_ready(be, why)) return 0;
    if (compiled(be)) return 1;
    *why = "no sm_90a image for this device in the build, or no tensor-map encoder in the driver";
    return 0;
}

extern "C" int gc_cuda_variant_probe(int point, int value, const char **why)
{
    const gc_backend *be = gc_cuda_backend(0);
    if (!be) {
        *why = "no CUDA device";
        return 0;
    }
    switch (point) {
    case GC_VP_CUDA_RNN_IMPL: /* cudnn: libcudnn with the RNN API, opened at run time */
        if (value != GC_V_RNNI_CUDNN) return 1;
        return gc_rnn_cudnn_api_of(be)->available(why);
    case GC_VP_CUDA_GEMM_PATH:
        if (value == GC_V_GEMM_WGMMA) return wgmma(be, gc_cuda_gemm_wgmma_compiled, why);
        return value == GC_V_GEMM_MMA ? tensor_cores(be, why) : 1;
    case GC_VP_CUDA_GEMM_WGMMA_EPI: return value == GC_V_WGEPI_AUTO || wgmma(be, gc_cuda_gemm_wgmma_compiled, why);
    case GC_VP_CUDA_CONV2D_FWD:
        if (value == GC_V_FWD_WGMMA) return wgmma(be, gc_conv2d_wgmma_compiled, why);
        return value == GC_V_FWD_MMA || value == GC_V_FWD_SMALLC || value == GC_V_FWD_GEMM ? tensor_cores(be, why)
                                                                                            : 1;
    case GC_VP_CUDA_CONV2D_BWD_DATA:
        if (value == GC_V_BWDD_WGMMA) return wgmma(be, gc_conv2d_wgmma_compiled, why);
        return value == GC_V_BWDD_MMA || value == GC_V_BWDD_GEMM ? tensor_cores(be, why) : 1;
    case GC_VP_CUDA_CONV2D_WGRAD:
        if (value == GC_V_WGRAD_WGMMA) return wgmma(be, gc_conv2d_wgrad_wgmma_compiled, why);
        return value == GC_V_WGRAD_MMA || value == GC_V_WGRAD_SMALLC || value == GC_V_WGRAD_GEMM
                   ? tensor_cores(be, why)
                   : 1;
    case GC_VP_CUDA_CONV2D_FWD_WGMMA: /* igemm: the GEMM kernel's image (wgmma_gemm_kernel.cuh) */
        return wgmma(be, value == GC_V_FWDWG_IGEMM ? gc_cuda_gemm_wgmma_compiled : gc_conv2d_wgmma_compiled, why);
    case GC_VP_CUDA_CONV2D_WGRAD_WGMMA: return wgmma(be, gc_conv2d_wgrad_wgmma_compiled, why);
    case GC_VP_CUDA_RNN:
        if (value != GC_V_RNN_CLUSTER) return 1;
        if (gc_cuda_cc(be) < 90) {
            *why = "thread-block clusters need compute capability 9.0 or newer";
            return 0;
        }
        return device_ready(be, why) && gc_rnn_cluster_available(be, why);
    default: return 1;
    }
}
