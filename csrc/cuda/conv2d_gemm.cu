/* conv2d_gemm.cu -- stride-1, unpadded 1x1 convolutions as plain GEMMs (gemm.cu).
 *
 * With one tap, stride 1 and no padding, NHWC data is a row-major matrix of P = N*H*W
 * pixel rows and the three passes are ordinary GEMMs on it (no gather, no copy):
 *   forward      y(P, F)  = x(P, C) w(C, F) (+ bias, act)   M = P, N = F, K = C
 *   bwd data     dx(P, C) = dy(P, F) w^T                     M = P, N = C, K = F (B trans)
 *   bwd filter   dw(C, F) = x^T dy                           M = C, N = F, K = P (A trans)
 *                db(F)    = column sums of dy (gc_conv2d_colsum: fixed-order two passes)
 * They go to gc_cuda_gemm, i.e. the GEMM backend's own kernels: wgmma + TMA on sm_90a
 * for big problems (650-770 TFLOP/s at bf16 4096-8192, against 130-320 for the conv
 * kernels on ResNet-50's 14x14 / 7x7 1x1 layers), mma.sync otherwise, split K with a
 * fixed-order reduction where the output is small (weight gradients): deterministic.
 * f16 / bf16, and f32 as TF32 when gc_get_allow_tf32() (the GEMM rounds the operands
 * to nearest TF32, as the conv kernels do); exact f32 stays on the conv SIMT kernels.
 *
 * Workspace: the GEMM takes gc_cuda_workspace itself (split-K partials, wgmma's
 * transposed / TF32-rounded operand copies). The forward and the data gradient use no
 * conv workspace at all; the weight gradient's bias sums use the backend's fixed
 * scratch buffer (gc_cuda_scratch, never the GEMM workspace), launched after the GEMM on
 * the same stream, so neither can overwrite the other's data within the call.
 *
 * Which shapes take the route (gc_conv2d_gemm_wanted; conv2d.cu asks first in each
 * pass) -- auto: only where the GEMM backend is measured fast and the conv kernels are
 * not, on a compute capability 9.0 device with the sm_90a GEMM code:
 *   forward / bwd data: the GEMM would take its wgmma path (gemm.cu's wgmma_worth_it:
 *     M*N*K >= 2^27, M, N >= 128, K >= 256, 128 x 256 tiles for a quarter of the SMs)
 *     with at least 3/4 of the tiles' area real output (gemm.cu asks 1/2; an N = 128
 *     GEMM wastes half of every 128 x 256 tile, where the conv wgmma kernel is ~0.85x
 *     PyTorch already);
 *   bwd filter: C, F >= 128 with 3/4 of the 128 x 128 tiles real and the mma.sync
 *     GEMM's grid (tiles x its split K) at least one block per SM.
 * ResNet-50 at batch 256 on an H200 (132 SMs): conv4 256<->1024 (14x14) and conv5
 * 512<->2048 (7x7) take it in the forward and the data gradient; their weight gradients
 * (and conv3's 128<->512) go to conv2d_wgmma_wgrad.cu, which conv2d.cu asks first and
 * which was measured faster there; the 56x56 64/256-channel layers take it in no pass.
 * Elsewhere (the 64-channel 56x56 layers, already ~1.0x PyTorch on the conv kernels;
 * every other device, where nothing was measured) the conv kernels run as before.
 * Forcing: each pass's variant point (cuda.conv2d.fwd / .bwd_data / .wgrad,
 * gpucmp_variants.h): "gemm" = the GEMM route for every stride-1 unpadded 1x1 layer it
 * is valid for, "conv" = never, "auto" = the automatic choice above; a forced conv
 * kernel (simt, mma, ...) never takes the route. */
#include "conv2d_internal.cuh"
#include "gemm.cuh"

#include <limits.h>
#include <string.h>

/* The route's switch for one pass (0 fwd, 1 bwd data, 2 bwd filter): 0 automatic,
 * 1 forced where valid, 2 never. */
static int gemm_mode(int pass)
{
    static const gc_vp point[3] = {GC_VP_CUDA_CONV2D_FWD, GC_VP_CUDA_CONV2D_BWD_DATA, GC_VP_CUDA_CONV2D_WGRAD};
    static const int gemm[3] = {GC_V_FWD_GEMM, GC_V_BWDD_GEMM, GC_V_WGRAD_GEMM};
    const int f = gc_variant_forced(point[pass]);
    return f == 0 ? 0 : f == gemm[pass] ? 1 : 2; /* "conv" and every forced kernel: never */
}

/* The GEMM of one pass: (M, N, K) as above. */
static void pass_dims(const gc_conv2d_geom *g, int pass, int64_t *M, int64_t *N, int64_t *K)
{
    const int64_t P = g->N * g->H * g->W;
    if (pass == 0) { *M = P; *N = g->F; *K = g->C; }
    else if (pass == 1) { *M = P; *N = g->C; *K = g->F; }
    else { *M = g->C; *N = g->F; *K = P; }
}

/* gemm.cu's wgmma_worth_it, with the stricter tile-area rule (3/4 instead of 1/2). */
static int wgmma_big(const gc_backend *be, int64_t M, int64_t N, int64_t K)
{
    if (M < 128 || N < 128 || K < 256) return 0;
    if ((double)M * (double)N * (double)K < (double)(1 << 27)) return 0;
    const int64_t tm = (M + 127) / 128, tn = (N + 255) / 256;
    if ((double)M * (double)N < 0.75 * (double)(tm * 128) * (double)(tn * 256)) return 0;
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    return tm * tn * 4 >= sms;
}

extern "C" int gc_conv2d_gemm_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, int pass)
{
    const int mode = gemm_mode(pass < 0 || pass > 2 ? 2 : pass);
    if (mode == 2) return 0;
    /* valid: one tap, stride 1, no padding (then OH = H, OW = W and NHWC is (P, C)) */
    if (g->KH != 1 || g->KW != 1 || g->sh != 1 || g->sw != 1 || g->pad_top != 0 || g->pad_left != 0 ||
        g->OH != g->H || g->OW != g->W)
        return 0;
    if (!(dt == GC_F16 || dt == GC_BF16 || (dt == GC_F32 && gc_get_allow_tf32()))) return 0;
    if (gc_cuda_cc(be) < 80) return 0; /* the GEMM's Tensor Core kernels */
    const int64_t P = g->N * g->H * g->W;
    /* the conv kernels' 32-bit bound (fits_int), so the route never widens what runs */
    if (P <= 0 || P * g->C >= INT_MAX / 2 || P * g->F >= INT_MAX / 2 || g->C * g->F >= INT_MAX / 2) return 0;
    if (mode == 1) return 1;
    if (gc_cuda_cc(be) != 90 || !gc_cuda_gemm_wgmma_compiled(be)) return 0;
    int64_t M, N, K;
    pass_dims(g, pass, &M, &N, &K);
    if (pass < 2) return wgmma_big(be, M, N, K);
    /* weight gradient: mma.sync 128 x 128 tiles (or wgmma when huge) with split K */
    if (M < 128 || N < 128) return 0;
    const int64_t tm = (M + 127) / 128, tn = (N + 127) / 128;
    if ((double)M * (double)N < 0.75 * (double)(tm * 128) * (double)(tn * 128)) return 0;
    gc_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.M = M; d.N = N; d.K = K;
    int kps = 0;
    const int splits = gc_cuda_gemm_splits(be, &d, 128, 128, 2, 128, &kps);
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    return tm * tn * splits >= sms;
}

static void desc_init(gc_gemm_desc *d, gc_dtype dt)
{
    memset(d, 0, sizeof *d);
    d->dtype = dt;
    d->alpha = 1.0f;
    d->beta = 0.0f;
    d->act = GC_ACT_LINEAR;
    d->impl = GC_IMPL_OWN;
}

extern "C" gc_status gc_conv2d_gemm_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                        const void *x, const void *w, const void *bias, gc_act act, void *y)
{
    gc_gemm_desc d;
    desc_init(&d, dt);
    d.M = g->N * g->H * g->W; d.N = g->F; d.K = g->C;
    d.A = x; d.lda = g->C;       /* x (P, C) */
    d.B = w; d.ldb = g->F;       /* w (1, 1, C, F) = (C, F) */
    d.C = y; d.ldc = g->F;       /* y (P, F) */
    d.bias = bias;
    d.act = (int)act;
    return gc_cuda_gemm(be, &d);
}

extern "C" gc_status gc_conv2d_gemm_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                             const void *dy, const void *w, void *dx, int accumulate)
{
    gc_gemm_desc d;
    desc_init(&d, dt);
    d.beta = accumulate ? 1.0f : 0.0f; /* dx += dy w^T */
    d.M = g->N * g->H * g->W; d.N = g->C; d.K = g->F;
    d.A = dy; d.lda = g->F;      /* dy (P, F) */
    d.trans_b = 1;
    d.B = w; d.ldb = g->F;       /* w stored (C, F) = N x K */
    d.C = dx; d.ldc = g->C;      /* dx (P, C) */
    return gc_cuda_gemm(be, &d);
}

extern "C" gc_status gc_conv2d_gemm_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                               const void *x, const void *dy, void *dw, void *db)
{
    const int64_t P = g->N * g->H * g->W;
    gc_gemm_desc d;
    desc_init(&d, dt);
    d.M = g->C; d.N = g->F; d.K = P;
    d.trans_a = 1;
    d.A = x; d.lda = g->C;       /* x stored (P, C) = K x M */
    d.B = dy; d.ldb = g->F;      /* dy (P, F) */
    d.C = dw; d.ldc = g->F;      /* dw (C, F) */
    gc_status st = gc_cuda_gemm(be, &d);
    if (st || !db) return st;
    /* bias: column sums of dy through the fixed scratch buffer (not the GEMM's
     * workspace; the workspace only if the partials do not fit, taken after the GEMM
     * has launched everything that uses it: stream order keeps them apart) */
    const size_t need = gc_conv2d_colsum_ws(be, P, g->F);
    void *ws = gc_cuda_scratch(be);
    if (!ws || need > GC_CUDA_SCRATCH_BYTES) {
        if ((st = gc_cuda_workspace(be, need, &ws))) return st;
    }
    return gc_conv2d_colsum(be, dt, dy, P, g->F, db, ws);
}
