/* conv2d_internal.cuh -- what the conv2d sources share (private to them): conv2d.cu
 * (adapters + Tensor Core implicit GEMMs), conv2d_wgmma.cu (the Hopper forward and data
 * gradient), conv2d_wgmma_igemm.cu (the same on the GEMM kernel), conv2d_wgmma_wgrad.cu (the Hopper weight gradient), conv2d_smallc.cu
 * (forward and weight gradient for C < 8), conv2d_simt.cu (the exact-f32 direct
 * reference kernels) and conv2d_vendor.cu (cuDNN loaded at run time).
 *
 * All entry points take the geometry from gc_conv2d_geometry (core/geometry.c), device
 * pointers of one storage dtype (f32 / f16 / bf16) and launch on gc_cuda_stream(be);
 * none synchronises the host or allocates outside gc_cuda_workspace, so they can be
 * captured into CUDA graphs. */
#ifndef GPUCMP_CUDA_CONV2D_INTERNAL_CUH
#define GPUCMP_CUDA_CONV2D_INTERNAL_CUH

#include "common.cuh"
#include "gpucmp_variants.h"

/* The fused epilogue activation (the formulas of csrc/cpu/act.c: relu keeps NaN,
 * sigmoid from e = exp(-|x|)). Softmax is rejected by core for conv2d. */
static __device__ __forceinline__ float conv_act(float v, int act)
{
    switch (act) {
    case GC_ACT_RELU: return v < 0.0f ? 0.0f : v;
    case GC_ACT_TANH: return tanhf(v);
    case GC_ACT_SIGMOID: {
        float e = expf(-fabsf(v));
        float s = 1.0f / (1.0f + e);
        return v < 0.0f ? e * s : s;
    }
    default: return v;
    }
}

#ifdef __cplusplus
extern "C" {
#endif

/* ---- conv2d_simt.cu: exact float32 direct convolution (f32 FMA, f32 accumulation,
 * any storage dtype). bwd_filter needs gc_conv2d_simt_bwd_filter_ws() bytes of
 * workspace (it calls gc_cuda_workspace itself). */
gc_status gc_conv2d_simt_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                             const void *x, const void *w, const void *bias, gc_act act, void *y);
gc_status gc_conv2d_simt_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                  const void *dy, const void *w, void *dx);
gc_status gc_conv2d_simt_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                    const void *x, const void *dy, void *dw, void *db);

/* ---- conv2d.cu: small helpers the vendor path reuses.
 * out[c][r] = in[r][c] for an (R, Cc) matrix (weights: (KH*KW*C, F) <-> (F, KH*KW*C)). */
gc_status gc_conv2d_transpose(const gc_backend *be, gc_dtype dt, const void *in, int64_t R,
                              int64_t Cc, void *out);
/* y[m][f] = act(y[m][f] + bias[f]) in place (bias may be NULL). */
gc_status gc_conv2d_bias_act(const gc_backend *be, gc_dtype dt, void *y, int64_t M, int64_t F,
                             const void *bias, gc_act act);
/* out[i] = sum_{s < S} part[s * stride + i] for i < n (fixed order: deterministic),
 * rounded to dt. */
gc_status gc_conv2d_reduce_splits(const gc_backend *be, gc_dtype dt, const float *part, int S,
                                  int64_t stride, int64_t n, void *out);
/* db[f] = sum_m dy[m][f], deterministic two-pass through `ws` (>= gc_conv2d_colsum_ws). */
size_t gc_conv2d_colsum_ws(const gc_backend *be, int64_t M, int64_t F);
gc_status gc_conv2d_colsum(const gc_backend *be, gc_dtype dt, const void *dy, int64_t M, int64_t F,
                           void *db, void *ws);

/* ---- conv2d_wgmma.cu: Hopper wgmma kernels (sm_90a; f16 / bf16, stride 1, dilation 1,
 * C and F multiples of 64, the 64-filter weight slice resident in shared memory: the
 * halo kernel where it fits, else TMA im2col). _check: GC_OK when the forward applies to
 * this geometry / dtype / device, else GC_ERR_UNSUPPORTED with a message. _fwd: the whole
 * forward; w is the (KH, KW, C, F) kernel. GC_ERR_UNSUPPORTED means nothing was launched
 * and the caller may take another path. _compiled: 1 when this binary holds the sm_90a
 * code for the device and the driver has the tensor-map encoders. */
int gc_conv2d_wgmma_compiled(const gc_backend *be);
gc_status gc_conv2d_wgmma_check(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt);
gc_status gc_conv2d_wgmma_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                              const void *x, const void *w, const void *bias, gc_act act, void *y);
/* the data gradient of a stride-1 layer on the halo kernel (same dtype / shape rules;
 * forced: also where the tiles waste much); GC_ERR_UNSUPPORTED before any launch.
 * accumulate: dx += the gradient (the halo kernel's tile stores become TMA reduce-adds,
 * the igemm kernel's epilogue reads dx: beta = 1). */
gc_status gc_conv2d_wgmma_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                   const void *dy, const void *w, void *dx, int forced, int accumulate);

/* ---- conv2d_wgmma_igemm.cu: the Hopper GEMM kernel (wgmma_gemm_kernel.cuh) with an
 * im2col A operand (sm_90a; f16 / bf16 with C and F multiples of 64, or f32 as TF32 --
 * only while gc_get_allow_tf32() is on -- with C and F multiples of 32; dilation 1): the
 * forward of strides 1..8 (pass 0) and the data gradient of stride-1 layers and of
 * strided unpadded 1x1 layers (pass 1). _why: NULL when it runs the pass of this
 * geometry, else why not. _wanted: the automatic choice. The entry points launch nothing
 * and return GC_ERR_UNSUPPORTED (with a message) where _why says no or a pointer is not
 * 16-byte aligned. Workspace (gc_cuda_workspace): none for 16-bit; TF32 takes the
 * weights' size (the forward's w^T, the data gradient's rounded copy of w). */
const char *gc_conv2d_igemm_why(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int pass);
int gc_conv2d_igemm_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int pass);
gc_status gc_conv2d_igemm_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                              const void *x, const void *w, const void *bias, gc_act act, void *y);
gc_status gc_conv2d_igemm_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                   const void *dy, const void *w, void *dx, int accumulate);

/* ---- conv2d_wgmma_wgrad.cu: the Hopper weight gradient (sm_90a; f16 / bf16 with C % 8 ==
 * 0, F % 8 == 0, or f32 as TF32 -- only while gc_get_allow_tf32() is on -- with C % 4 ==
 * 0, F % 4 == 0; dilation 1, stride 1 or a 1x1 unpadded kernel). _compiled: 1 when this
 * binary holds its sm_90a code for the device and the driver has the tensor-map encoders.
 * _wanted: the automatic choice (compute capability 9.0 with the sm_90a code, C and F
 * multiples of 64, enough pixels; never exact float32). The entry point computes dw (and
 * db when non-NULL) in the storage dtype, deterministic, through gc_cuda_workspace;
 * GC_ERR_UNSUPPORTED means nothing was launched. _describe: the 16-bit plan it would
 * launch (variant, tiles, splits). */
int gc_conv2d_wgrad_wgmma_compiled(const gc_backend *be);
int gc_conv2d_wgrad_wgmma_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt);
gc_status gc_conv2d_wgrad_wgmma(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                const void *x, const void *dy, void *dw, void *db);
void gc_conv2d_wgrad_wgmma_describe(const gc_backend *be, const gc_conv2d_geom *g, char *buf, size_t n);

/* ---- conv2d_smallc.cu: Tensor Core forward and weight gradient for few input channels
 * (C < 8, e.g. ResNet's 7x7/2 RGB stem): the GEMM K (forward) / M (weight gradient) runs
 * over (kh, kw*C + c), one contiguous run of x per kernel row. _applies: 1 when the
 * kernels take the geometry (dilation 1 along w, KH * round_up(KW*C, 4 bytes) <= 320,
 * 32-bit offsets). f16 / bf16, and f32 as TF32 (the caller decides when TF32 is allowed).
 * bwd_filter uses gc_cuda_workspace for its split-K partials, fwd for the re-laid
 * weights. */
int gc_conv2d_smallc_applies(const gc_conv2d_geom *g, gc_dtype dt);
gc_status gc_conv2d_smallc_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                               const void *x, const void *w, const void *bias, gc_act act, void *y);
gc_status gc_conv2d_smallc_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                      const void *x, const void *dy, void *dw, void *db);

/* ---- conv2d_smallc_dgrad.cu: Tensor Core data gradient for few input channels (C <= 8,
 * strides 1-2, dilation 1; the stem): per residue class of the input pixels, runs of 16
 * pixels as m16n8 GEMMs over (tap, f), dy gathered from a shared-memory tile. _applies: 1
 * when it takes the geometry. f16 / bf16, and f32 as TF32 (the caller decides). acc:
 * dx += the gradient. No workspace. */
int gc_conv2d_smallc_dgrad_applies(const gc_conv2d_geom *g);
gc_status gc_conv2d_smallc_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                    const void *dy, const void *w, void *dx, int acc);

/* ---- conv2d_gemm.cu: stride-1, unpadded 1x1 convolutions as plain GEMMs through
 * gc_cuda_gemm (gemm.cu). _wanted: 1 when pass (0 fwd, 1 bwd data, 2 bwd filter) of
 * this layer should take the route (validity, the pass's variant point -- "gemm", "conv"
 * or a forced kernel --, the automatic choice); the three passes then do all of the work
 * (bwd_filter also db, deterministic). No conv workspace: the GEMM owns it. */
int gc_conv2d_gemm_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int pass);
gc_status gc_conv2d_gemm_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                             const void *x, const void *w, const void *bias, gc_act act, void *y);
gc_status gc_conv2d_gemm_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                  const void *dy, const void *w, void *dx, int accumulate); /* beta = accumulate */
gc_status gc_conv2d_gemm_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                    const void *x, const void *dy, void *dw, void *db);

/* ---- conv2d_vendor.cu: cuDNN (legacy API through dlopen). op is one of the three
 * conv2d ops; the tensors are those of the gc_op_call. */
gc_status gc_conv2d_vendor(const gc_backend *be, gc_op op, const gc_conv2d_geom *g, gc_dtype dt,
                           int allow_tf32, const void *in0, const void *in1, const void *bias,
                           gc_act act, void *out0, void *out1);
/* 1 when libcudnn could be loaded (loads it on first use). */
int gc_conv2d_vendor_available(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUCMP_CUDA_CONV2D_INTERNAL_CUH */
