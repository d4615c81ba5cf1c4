/* gemm_mma_64x64x32.cu -- the mma.sync GEMM's 64x64x32 block tile (gemm_mma.cuh: GC_MMA_CONFIGS
 * gives its warp tile and stages): its 12 kernels (f16, bf16, TF32 x 4 layouts) in a
 * translation unit of their own so that the tiles compile in parallel. */
#include "gemm_mma.cuh"

GC_MMA_DEFINE(64x64x32)
