/* conv2d_wgmma_igemm.cu -- Hopper (sm_90a) convolutions as the GEMM kernel with an
 * im2col A operand: the forward of any stride and the stride-1 data gradient, for
 * layers whose weights are too big for conv2d_wgmma.cu's resident 64-filter slices.
 *
 * What: gc_conv2d_igemm_fwd computes y = act(conv(x, w) + bias) for NHWC f16 / bf16
 * storage (C and F multiples of 64) or f32 storage as TF32 (only while
 * gc_get_allow_tf32() is on; C and F multiples of 32), fp32 accumulation, dilation 1,
 * strides 1..8; gc_conv2d_igemm_bwd_data the data gradient of a stride-1 layer, or of a
 * strided unpadded 1x1 layer (dx zeroed, then dy's pixels as a GEMM with w^T, the
 * epilogue writing each to its strided pixel of dx: WG_A_TILED_SCATTER); either can add
 * to dx instead (accumulate: the epilogue's beta = 1, and no zeroing). _why says why
 * a geometry is refused (NULL: it runs), _wanted is the automatic choice (the same rule
 * for every dtype it takes).
 *
 * How: wgmma_gemm_kernel.cuh's persistent kernel (128 x 256 tiles -- 128 x 128 where
 * N <= 128 --, clusters of 2 sharing B by multicast, m64nN wgmma, a 192 KB ring) with
 * M = output pixels, N = F, K = KH*KW*C ordered (kh, kw, c). The producer fetches each
 * K-block of A -- 128 bytes of channels of one tap (64 16-bit / 32 float) for 128 output
 * pixels -- with one TMA copy in im2col mode of the input seen as a (C, W, H, N) tensor:
 * coordinates = the first pixel's filter corner (q*sw - pad_left, p*sh - pad_top, n),
 * offsets = the tap (kw, kh), traversal strides = the layer's strides, box corners = the
 * range of filter corners (lower = -pad, upper = (O-1)*s + 1 - I - pad per dimension);
 * padding, rows past M and pixels past the batch arrive as zeros. The B slice (16-bit)
 * is w itself, (KH*KW*C) x F read in the K x N layout, so nothing is copied or
 * transposed before the launch and no workspace is taken.
 * The data gradient is the forward convolution of dy with the kernel flipped and C, F
 * swapped (padding KH-1-pad_top, KW-1-pad_left): A = im2col(dy), and w read K-major,
 * tap KH*KW-1-t for K-block tap t (each tap of w is a C x F matrix = N x K).
 * TF32 (f32 storage, gc_get_allow_tf32()): wgmma .tf32 reads A and B K-major only, and
 * the tensor cores truncate the fp32 bits they read to TF32. The forward therefore
 * transposes w into w^T, F x (KH*KW*C), in the workspace (gc_cuda_workspace; one small
 * kernel, rounding each weight to nearest TF32 on the way) and reads it K-major; the
 * data gradients read w K-major already, and take a copy rounded to nearest TF32 (same
 * layout, in the workspace) -- both roundings follow gc_cuda_gemm_get_tf32_round()
 * (default on; off: the forward's copy is not rounded and the data gradient reads w in
 * place).
 * Why round the weights: the activation operand (x / dy, read by TMA) stays truncated, as
 * in cuDNN's and CUTLASS's Hopper TF32 kernels -- truncation scales every product by
 * 1 - e, e in [0, 2^-10), a coherent error (-3.5e-4 of the result on normal operands)
 * that does not average out over K. Simulated in float64 on normal operands (K = 32 ..
 * 4608, ||err|| / ||exact||): activation truncated, weights rounded 4.6e-4 (-3.5e-4 of it
 * coherent); both truncated 7.7e-4 (-7.0e-4 coherent), close to the TF32 tolerance of
 * 1e-3; both rounded (mma.sync's cvt.rna) 2.9e-4. The data gradient's copy costs one
 * read and one write of w: 19 MB for ResNet-50's largest, 3x3 512 (~5 us on an H200,
 * about 3% of that layer's ~59 GFLOP data gradient at batch 256; under 1% for the
 * others, under 0.1% of a training step). A stage row is still 128 bytes (32 floats,
 * k8 wgmma: tile, ring and 192 KB of shared memory as for 16-bit); this path runs only on
 * compute capability 9.0 (gc_cuda_gemm_wgmma_compiled), so no other device's shared-memory
 * limit is concerned.
 * Versus conv2d_wgmma.cu: its im2col kernel keeps a 64-filter slice of w^T resident
 * (m64n64 wgmma: every 64 filters re-read the input, and slices of C >= 256 3x3 layers
 * do not fit), its halo kernel needs the slice and two halo stages on chip; this one
 * streams w with the input, at the GEMM's tile shape.
 * The epilogue is the GEMM's: bias and activation in fp32, one rounding to storage. */
#include "conv2d_internal.cuh"

#include <limits.h>
#include <string.h>

#include <cuda.h> /* CUtensorMap and its enums only: the encoders come from the driver (tensor_map.cu) */

#include "wgmma_gemm_kernel.cuh"

namespace {

/* The im2col tensor map of an NHWC activation (N, H, W, C) for output extent (OH, OW):
 * boxes of 128 bytes of channels (64 16-bit / 32 float) x 128 pixels in the 128-byte
 * swizzle (the kernel's A slice). */
gc_status im2col_map(CUtensorMap *m, gc_dtype dt, const void *x, int64_t N, int64_t H, int64_t W, int64_t C,
                     int64_t OH, int64_t OW, int sh, int sw, int pad_top, int pad_left, const char *what)
{
    const size_t es = gc_dtype_size(dt);
    const cuuint64_t dims[4] = {(cuuint64_t)C, (cuuint64_t)W, (cuuint64_t)H, (cuuint64_t)N};
    const cuuint64_t strides[3] = {(cuuint64_t)(C * es), (cuuint64_t)(W * C * es), (cuuint64_t)(H * W * C * es)};
    /* the filter corners of the output pixels, W first (then H) */
    const int lower[2] = {-pad_left, -pad_top};
    const int upper[2] = {(int)((OW - 1) * sw + 1 - W - pad_left), (int)((OH - 1) * sh + 1 - H - pad_top)};
    const cuuint32_t estr[4] = {1, (cuuint32_t)sw, (cuuint32_t)sh, 1};
    const CUtensorMapDataType tdt = dt == GC_F16    ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16
                                    : dt == GC_BF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
                                                    : CU_TENSOR_MAP_DATA_TYPE_FLOAT32;
    const CUresult r = gc_tma_encoders()->im2col(m, tdt, 4, (void *)x, dims, strides, lower, upper,
                                                 (cuuint32_t)(128 / es), WG_BM, estr,
                                                 CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                                 CU_TENSOR_MAP_L2_PROMOTION_L2_128B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "%s (wgmma igemm): cuTensorMapEncodeIm2col failed (%d) for (%lld, %lld, %lld, %lld), "
                       "strides (%d, %d), box corners (%d, %d) .. (%d, %d)",
                       what, (int)r, (long long)N, (long long)H, (long long)W, (long long)C, sh, sw, lower[0],
                       lower[1], upper[0], upper[1]);
    return GC_OK;
}

/* Why the kernel cannot run a forward convolution of geometry g (the data gradient
 * passes its forward view), or NULL. */
const char *why_not(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt)
{
    if (dt == GC_F32 && !gc_get_allow_tf32()) return "float32 only as TF32 (TF32 is off: exact float32)";
    if (dt != GC_F16 && dt != GC_BF16 && dt != GC_F32) return "float16 / bfloat16 / float32 (TF32) storage only";
    if (!gc_cuda_gemm_wgmma_compiled(be) || !gc_tma_encoders()->im2col)
        return "no sm_90a code for this device, or no tensor-map encoder in the driver";
    /* C: a K-block is 128 bytes of one tap's channels, so whole blocks per tap; F: the
     * 16-bit forward reads w in 64-column K x N boxes. The data gradient's view swaps
     * them (the layer's F is its C), so both rules hold for every pass. */
    if (dt == GC_F32) {
        if (g->C <= 0 || g->F <= 0 || g->C % 32 || g->F % 32) return "C and F must be multiples of 32 (float32 / TF32)";
    } else if (g->C <= 0 || g->F <= 0 || g->C % 64 || g->F % 64)
        return "C and F must be multiples of 64";
    if (g->dh != 1 || g->dw != 1) return "dilation 1 only";
    if (g->sh < 1 || g->sw < 1 || g->sh > 8 || g->sw > 8) return "strides 1..8 only (TMA traversal strides)";
    if (g->KH > 256 || g->KW > 256) return "kernel taps past the 8-bit im2col offsets";
    const int64_t uw = (g->OW - 1) * g->sw + 1 - g->W - g->pad_left, uh = (g->OH - 1) * g->sh + 1 - g->H - g->pad_top;
    if (g->pad_left > 128 || g->pad_top > 128 || uw < -128 || uh < -128 || uw > 127 || uh > 127)
        return "padding past the 8-bit im2col box corners";
    const int64_t M = g->N * g->OH * g->OW, K = g->KH * g->KW * g->C;
    if (M <= 0) return "no output pixels";
    if (M > INT_MAX - 2 * WG_BM || K > INT_MAX / 2 || g->F > INT_MAX / 2 || g->KH * g->KW * g->C * g->F > INT_MAX ||
        g->N * g->H * g->W * g->C >= ((int64_t)1 << 40))
        return "sizes past 32-bit tile indices";
    return NULL;
}

/* The tile width for N output channels: 128 where N <= 128 (a 256-wide tile would be
 * half empty), else 256. */
int tile_width(int64_t N) { return N <= 128 ? 128 : 256; }

/* The launch for one dtype and tile width: A = the im2col map, B = w (K x N when !kmaj,
 * else K-major). TF32 (float): B K-major always (w^T for the forward): 6 kernels,
 * float x {IM2COL, IM2COL_FLIP, TILED_SCATTER} x {128, 256}. */
template <int AMODE>
gc_status launch(const gc_backend *be, gc_dtype dt, const CUtensorMap &ta, const CUtensorMap &tb, int64_t M,
                 int64_t N, int64_t K, const gc_gemm_epi_args &e, const wg_conv &cv, const char *what)
{
    constexpr bool KMAJ = AMODE != WG_A_IM2COL; /* w read K-major: the data gradients */
    if (dt == GC_F32) {
        if (tile_width(N) == 128) return wg_launch<float, true, AMODE, 128>(be, ta, tb, M, N, K, e, 1, cv, what, NULL);
        return wg_launch<float, true, AMODE, 256>(be, ta, tb, M, N, K, e, 1, cv, what, NULL);
    }
    if (tile_width(N) == 128) {
        if (dt == GC_F16) return wg_launch<__half, KMAJ, AMODE, 128>(be, ta, tb, M, N, K, e, 1, cv, what, NULL);
        return wg_launch<__nv_bfloat16, KMAJ, AMODE, 128>(be, ta, tb, M, N, K, e, 1, cv, what, NULL);
    }
    if (dt == GC_F16) return wg_launch<__half, KMAJ, AMODE, 256>(be, ta, tb, M, N, K, e, 1, cv, what, NULL);
    return wg_launch<__nv_bfloat16, KMAJ, AMODE, 256>(be, ta, tb, M, N, K, e, 1, cv, what, NULL);
}

/* accumulate: out += the product (beta = 1) */
gc_gemm_epi_args epilogue(gc_dtype dt, void *out, int64_t M, int64_t N, const void *bias, gc_act act,
                          int accumulate = 0)
{
    gc_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = dt;
    d.M = M; d.N = N;
    d.C = out; d.ldc = N;
    d.bias = bias;
    d.alpha = 1.0f;
    d.beta = accumulate ? 1.0f : 0.0f;
    d.act = (int)act;
    return gc_gemm_epi_of(&d);
}

/* The data gradient of g as a forward convolution of dy (C and F swapped, padding
 * KH-1-pad). */
gc_conv2d_geom dgrad_view(const gc_conv2d_geom *g)
{
    gc_conv2d_geom t = *g;
    t.H = g->OH; t.W = g->OW;
    t.C = g->F; t.F = g->C;
    t.OH = g->H; t.OW = g->W;
    t.pad_top = (int)(g->KH - 1) - g->pad_top;
    t.pad_left = (int)(g->KW - 1) - g->pad_left;
    return t;
}

/* TF32 data gradients: the weights as the kernel reads them (rows x cols, K-major, as
 * stored), rounded to nearest TF32 into the workspace when gc_cuda_gemm_get_tf32_round()
 * is on (see the header: the activation operand is truncated; this keeps the other one
 * unbiased); else, and for 16-bit storage, w itself. */
gc_status dgrad_weights(const gc_backend *be, gc_dtype dt, const void *w, int64_t rows, int64_t cols,
                        const void **out)
{
    *out = w;
    if (dt != GC_F32 || !gc_cuda_gemm_get_tf32_round()) return GC_OK;
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(rows * cols) * sizeof(float), &ws);
    if (st) return st;
    if ((st = gc_cuda_gemm_round_tf32(be, rows, cols, (const float *)w, cols, (float *)ws, cols))) return st;
    *out = ws;
    return GC_OK;
}

} // namespace

/* A strided, unpadded 1x1 layer: its data gradient is a GEMM of dy's pixels scattered
 * to every sh-th / sw-th pixel of dx (the others are zero). */
static int strided_1x1(const gc_conv2d_geom *g)
{
    return g->KH == 1 && g->KW == 1 && (g->sh > 1 || g->sw > 1) && g->pad_top == 0 && g->pad_left == 0 &&
           g->dh == 1 && g->dw == 1;
}

extern "C" const char *gc_conv2d_igemm_why(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int pass)
{
    if (pass == 0) return why_not(be, g, dt);
    if (strided_1x1(g)) {
        gc_conv2d_geom t = *g; /* the GEMM: dy (N*OH*OW, F) x w^T (F, C) */
        t.H = g->OH; t.W = g->OW; t.C = g->F; t.F = g->C;
        t.sh = t.sw = 1;
        return why_not(be, &t, dt);
    }
    if (g->sh != 1 || g->sw != 1) return "the data gradient of stride-1 layers (or strided unpadded 1x1 ones) only";
    const gc_conv2d_geom t = dgrad_view(g);
    if (t.pad_top < 0 || t.pad_left < 0) return "padding wider than the kernel";
    return why_not(be, &t, dt);
}

/* Automatic choice (measured on an H200 against conv2d_wgmma.cu's kernels and the
 * mma.sync implicit GEMM, benchmarks/RESULTS.md): where the output has at least 128
 * channels (whole 128 x 128 or 128 x 256 tiles) and the layer is not one the
 * resident-slice kernels run well (the 3x3 64-channel layers and the stride-1 1x1
 * layers: halo kernel or the GEMM route); enough tiles for every SM. float32 as TF32
 * takes the same rule without the halo kernel's exclusions (that kernel is 16-bit only:
 * those layers would otherwise fall to mma.sync). */
extern "C" int gc_conv2d_igemm_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int pass)
{
    if (gc_cuda_cc(be) != 90) return 0;
    const int64_t nout = pass == 0 ? g->F : g->C;  /* the GEMM's N */
    const int64_t nin = pass == 0 ? g->C : g->F;   /* channels per tap of A */
    const int strided = g->sh > 1 || g->sw > 1;
    if (nout < 128) return 0;
    /* the halo kernel's layers in 16-bit; it takes no float32, so TF32 takes them here
     * (the GEMM route, asked first, keeps the big stride-1 1x1 layers) */
    const int halo = dt == GC_F16 || dt == GC_BF16;
    if (halo && !strided && g->KH * g->KW == 1) return 0; /* stride-1 1x1: the GEMM route / halo kernel */
    if (halo && !strided && nin < 128) return 0;          /* 3x3 64-channel inputs: the halo kernel */
    const int64_t M = pass == 0 || strided ? g->N * g->OH * g->OW : g->N * g->H * g->W;
    const int bn = tile_width(nout);
    const int64_t tiles = (M + WG_BM - 1) / WG_BM * ((nout + bn - 1) / bn);
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 132;
    if (tiles < sms) return 0;
    return gc_conv2d_igemm_why(be, g, dt, pass) == NULL;
}

extern "C" gc_status gc_conv2d_igemm_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, const void *x,
                                         const void *w, const void *bias, gc_act act, void *y)
{
    const char *why = why_not(be, g, dt);
    if (!why && (((uintptr_t)x | (uintptr_t)w | (uintptr_t)y) & 15u)) why = "x, w and y must be 16-byte aligned";
    if (why)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "conv2d_fwd (wgmma igemm): x (%lld, %lld, %lld, %lld), kernel %lldx%lld -> %lld, stride "
                       "(%d, %d), dilation (%d, %d), %s: %s",
                       (long long)g->N, (long long)g->H, (long long)g->W, (long long)g->C, (long long)g->KH,
                       (long long)g->KW, (long long)g->F, g->sh, g->sw, g->dh, g->dw, gc_dtype_name(dt), why);
    const int64_t M = g->N * g->OH * g->OW, K = g->KH * g->KW * g->C;
    CUtensorMap ta, tb;
    gc_status st = im2col_map(&ta, dt, x, g->N, g->H, g->W, g->C, g->OH, g->OW, g->sh, g->sw, g->pad_top,
                              g->pad_left, "conv2d_fwd");
    if (st) return st;
    const int bke = 128 / (int)gc_dtype_size(dt); /* K elements per K-block: 64 16-bit, 32 float */
    if (dt == GC_F32) {
        /* TF32: B must be K-major: w^T, F rows of K, in the workspace, each weight rounded
         * to nearest TF32 on the way (gc_cuda_gemm_get_tf32_round); boxes of 32 K x half
         * the N tile's rows (one half per cluster rank). The map is encoded before the
         * transpose is launched. */
        void *wt = NULL;
        if ((st = gc_cuda_workspace(be, (size_t)(K * g->F) * sizeof(float), &wt))) return st;
        if ((st = wg_make_map_2d(&tb, dt, wt, K, g->F, K * (int64_t)sizeof(float), bke, tile_width(g->F) / 2)))
            return st;
        if ((st = gc_cuda_gemm_transpose(be, GC_F32, K, g->F, w, g->F, wt, K, gc_cuda_gemm_get_tf32_round())))
            return st;
    } else {
        /* w as stored: K rows of F (the K x N layout), boxes of 64 filters x 64 K */
        if ((st = wg_make_map_2d(&tb, dt, w, g->F, K, g->F * (int64_t)gc_dtype_size(dt), 64, 64))) return st;
    }
    wg_conv cv;
    cv.ohw = (int)(g->OH * g->OW); cv.ow = (int)g->OW;
    cv.sh = g->sh; cv.sw = g->sw;
    cv.pad_top = g->pad_top; cv.pad_left = g->pad_left;
    cv.kw = (int)g->KW; cv.cchunks = (int)(g->C / bke); cv.taps = (int)(g->KH * g->KW);
    return launch<WG_A_IM2COL>(be, dt, ta, tb, M, g->F, K, epilogue(dt, y, M, g->F, bias, act), cv,
                               "conv2d_fwd (wgmma igemm)");
}

extern "C" gc_status gc_conv2d_igemm_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                              const void *dy, const void *w, void *dx, int accumulate)
{
    const char *why = gc_conv2d_igemm_why(be, g, dt, 1);
    if (!why && (((uintptr_t)dy | (uintptr_t)w | (uintptr_t)dx) & 15u)) why = "dy, w and dx must be 16-byte aligned";
    if (why)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "conv2d_bwd_data (wgmma igemm): dy (%lld, %lld, %lld, %lld), kernel %lldx%lld, x channels "
                       "%lld, stride (%d, %d), %s: %s",
                       (long long)g->N, (long long)g->OH, (long long)g->OW, (long long)g->F, (long long)g->KH,
                       (long long)g->KW, (long long)g->C, g->sh, g->sw, gc_dtype_name(dt), why);
    const int64_t es = (int64_t)gc_dtype_size(dt);
    const int bke = (int)(128 / es); /* K elements per K-block: 64 16-bit, 32 float */
    if (strided_1x1(g)) { /* dx = 0 (unless accumulating), then dy (P, F) x w^T scattered to dx's strided pixels */
        const int64_t P = g->N * g->OH * g->OW;
        if (!accumulate)
            GC_CUDA_TRY(cudaMemsetAsync(dx, 0, (size_t)(g->N * g->H * g->W * g->C * es), gc_cuda_stream(be)));
        CUtensorMap ta, tb;
        const void *wk = w;
        gc_status st = wg_make_map_2d(&ta, dt, dy, g->F, P, g->F * es, bke, WG_BM);
        if (st) return st;
        if ((st = dgrad_weights(be, dt, w, g->C, g->F, &wk))) return st;
        if ((st = wg_make_map_2d(&tb, dt, wk, g->F, g->C, g->F * es, bke, tile_width(g->C) / 2))) return st;
        wg_conv cv;
        memset(&cv, 0, sizeof cv);
        cv.ohw = (int)(g->OH * g->OW); cv.ow = (int)g->OW;
        cv.sh = g->sh; cv.sw = g->sw;
        cv.ihw = (int)(g->H * g->W); cv.iw = (int)g->W;
        return launch<WG_A_TILED_SCATTER>(be, dt, ta, tb, P, g->C, g->F,
                                          epilogue(dt, dx, g->N * g->H * g->W, g->C, NULL, GC_ACT_LINEAR, accumulate), cv,
                                          "conv2d_bwd_data (wgmma, strided 1x1)");
    }
    const gc_conv2d_geom t = dgrad_view(g);
    const int64_t M = t.N * t.OH * t.OW, K = t.KH * t.KW * t.C; /* t.C = the layer's F */
    CUtensorMap ta, tb;
    gc_status st = im2col_map(&ta, dt, dy, t.N, t.H, t.W, t.C, t.OH, t.OW, 1, 1, t.pad_top, t.pad_left,
                              "conv2d_bwd_data");
    if (st) return st;
    /* w as stored (TF32: its rounded copy), (KH*KW*C) rows of F = per tap a C x F
     * matrix: N rows of K, K-major; boxes of one K-block x half the N tile's rows (one
     * half per cluster rank) */
    const void *wk = w;
    if ((st = dgrad_weights(be, dt, w, g->KH * g->KW * g->C, g->F, &wk))) return st;
    if ((st = wg_make_map_2d(&tb, dt, wk, g->F, g->KH * g->KW * g->C, g->F * es, bke, tile_width(t.F) / 2)))
        return st;
    wg_conv cv;
    cv.ohw = (int)(t.OH * t.OW); cv.ow = (int)t.OW;
    cv.sh = 1; cv.sw = 1;
    cv.pad_top = t.pad_top; cv.pad_left = t.pad_left;
    cv.kw = (int)t.KW; cv.cchunks = (int)(t.C / bke); cv.taps = (int)(t.KH * t.KW);
    return launch<WG_A_IM2COL_FLIP>(be, dt, ta, tb, M, t.F, K, epilogue(dt, dx, M, t.F, NULL, GC_ACT_LINEAR, accumulate), cv,
                                    "conv2d_bwd_data (wgmma igemm)");
}
