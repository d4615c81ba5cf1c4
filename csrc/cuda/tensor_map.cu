/* tensor_map.cu -- the driver's tensor-map encoders for the Hopper TMA kernels
 * (gemm_wgmma.cu, conv2d_wgmma.cu, conv2d_wgmma_wgrad.cu), declared in hopper_ptx.cuh.
 *
 * Why a file of its own: the module links the CUDA runtime statically and never
 * libcuda, so cuTensorMapEncodeTiled / cuTensorMapEncodeIm2col are fetched from the
 * driver at run time (cudaGetDriverEntryPointByVersion, the 12.0 signatures declared in
 * hopper_ptx.cuh); one fetch serves the three files, which used to carry a copy each.
 * Host code only; each kernel file keeps its own probe kernel for "is my sm_90a image
 * the one the driver loaded". */
#include "common.cuh"
#include "hopper_ptx.cuh"

/* the driver function `name` (ABI of CUDA 12.0), or NULL when this driver lacks it */
static void *driver_fn(const char *name)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, 12000, cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    return fn;
}

const gc_tma_encoder_fns *gc_tma_encoders(void)
{
    static const gc_tma_encoder_fns e = {(gc_tma_encode_tiled_fn)driver_fn("cuTensorMapEncodeTiled"),
                                         (gc_tma_encode_im2col_fn)driver_fn("cuTensorMapEncodeIm2col")};
    return &e; /* thread-safe static init */
}
