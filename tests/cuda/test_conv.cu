/* test_conv.cu -- standalone correctness test and benchmark of the CUDA conv2d ops
 * (csrc/cuda/conv2d.cu, conv2d_simt.cu, conv2d_vendor.cu).
 *
 *   test_conv            correctness: every case x {f32 exact (SIMT), f32 TF32, f16, bf16,
 *                        forced Tensor Core / forced SIMT paths, cuDNN when present}
 *                        against a float64 host reference; outputs poisoned with NaN
 *                        before each call; determinism and graph-capture checks
 *   test_conv bench      TFLOP/s of the seeds' CNN layers (batch 128) and a 3x3 64->64
 *                        56x56 batch-64 'same' layer, ours vs cuDNN, fp16 / bf16 / tf32
 *   test_conv all        both
 *   test_conv wgtest     only the Hopper wgmma checks: both forward kernels and the halo
 *                        data gradient (also part of 'test')
 *   test_conv resnet     ResNet-50's stem and strided / plain 1x1 layers at batch BATCH
 *                        (default 256): ms per pass and the path each took, ours vs cuDNN
 *                        (DTYPE=f16|bf16|tf32 for one dtype); stride-1 1x1 layers also
 *                        with the GEMM route off ("conv") and forced ("gemm")
 *   test_conv wgbench    only the 3x3 64->64 56x56 b64 layer: forward (halo, im2col,
 *                        mma.sync, auto, cuDNN, ring depths) and data gradient (halo,
 *                        mma.sync, cuDNN) (also printed at the end of 'bench')
 *   test_conv wgradtest  only the Hopper wgmma weight gradient (conv2d_wgmma_wgrad.cu,
 *                        forced): vs float64, vs mma.sync, determinism, every block
 *                        variant, split / ring overrides, graph replay, refusals, auto
 *   test_conv wgradbench ResNet-50's weight gradients at batch BATCH (default 256): the
 *                        wgmma kernel, mma.sync, auto (path), cuDNN; ms and TFLOP/s
 *
 * The ops run through gc_op_run (core validation) on a minimal fake CUDA backend that
 * implements the few common.cuh services the conv sources use (stream, workspace,
 * device attributes), so the program links without backend.cu and the other ops.
 * Exit status 0 only when every check passed. */
#include "conv2d_internal.cuh"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <algorithm>
#include <vector>

/* ------------------------------------------------------------------ forcing kernels
 * Through the variant registry (gpucmp_variants.h, core/variants.c linked in): the fake
 * backend registers without a probe, so every variant may be forced and the kernels
 * refuse (GC_ERR_UNSUPPORTED) what they cannot run. A kernel family for all three passes
 * (the configs below): K_DIRECT is the forward's, its backward passes run SIMT; K_WGMMA
 * forces the forward and the data gradient; K_SMALLC all three passes (conv2d_smallc.cu,
 * conv2d_smallc_dgrad.cu), each falling back to the automatic choice where it does not
 * apply. */
enum { K_AUTO, K_SIMT, K_MMA, K_DIRECT, K_WGMMA, K_SMALLC };

static void force(gc_vp point, int value)
{
    if (gc_variant_force_value(point, value) != GC_OK) {
        fprintf(stderr, "cannot force %s to %d: %s\n", gc_variant_point_at(point)->name, value, gc_last_error());
        exit(2);
    }
}

static void force_kernel(int k)
{
    static const int fwd[6] = {GC_V_FWD_AUTO, GC_V_FWD_SIMT, GC_V_FWD_MMA, GC_V_FWD_DIRECT, GC_V_FWD_WGMMA,
                               GC_V_FWD_SMALLC};
    static const int bwd[6] = {GC_V_BWDD_AUTO, GC_V_BWDD_SIMT, GC_V_BWDD_MMA, GC_V_BWDD_SIMT, GC_V_BWDD_WGMMA,
                               GC_V_BWDD_SMALLC};
    static const int wgr[6] = {GC_V_WGRAD_AUTO, GC_V_WGRAD_SIMT, GC_V_WGRAD_MMA, GC_V_WGRAD_SIMT, GC_V_WGRAD_AUTO,
                               GC_V_WGRAD_SMALLC};
    force(GC_VP_CUDA_CONV2D_FWD, fwd[k]);
    force(GC_VP_CUDA_CONV2D_BWD_DATA, bwd[k]);
    force(GC_VP_CUDA_CONV2D_WGRAD, wgr[k]);
}

/* every point back to automatic (what the last calls ran stays readable) */
static void force_none(void)
{
    for (int i = 0; i < GC_VP_COUNT; i++)
        if (gc_variant_present(i)) force((gc_vp)i, 0);
}

/* the GEMM route of stride-1 1x1 layers in every pass: 0 auto, 1 always ("gemm"), 2 never ("conv") */
static void force_route(int route)
{
    force(GC_VP_CUDA_CONV2D_FWD, route == 1 ? GC_V_FWD_GEMM : route == 2 ? GC_V_FWD_CONV : GC_V_FWD_AUTO);
    force(GC_VP_CUDA_CONV2D_BWD_DATA, route == 1 ? GC_V_BWDD_GEMM : route == 2 ? GC_V_BWDD_CONV : GC_V_BWDD_AUTO);
    force(GC_VP_CUDA_CONV2D_WGRAD, route == 1 ? GC_V_WGRAD_GEMM : route == 2 ? GC_V_WGRAD_CONV : GC_V_WGRAD_AUTO);
}

/* the name of what the last call at a point ran ("none" before any) */
static const char *last_name(gc_vp point)
{
    const gc_variant_point *p = gc_variant_point_at(point);
    const int v = gc_variant_last(point);
    return v == 0 ? "none" : p->kind == GC_VARIANT_CHOICE ? p->names[v] : "(knob)";
}

/* ------------------------------------------------------------------ fake backend */
static cudaStream_t g_stream;
static int g_sms, g_cc;
static size_t g_optin;
static void *g_ws;
static size_t g_ws_bytes;

extern "C" gc_status gc_cuda_launch_check(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return gc_fail(GC_ERR_BACKEND, "%s: %s", what, cudaGetErrorString(e));
    return GC_OK;
}
extern "C" cudaStream_t gc_cuda_stream(const gc_backend *) { return g_stream; }
extern "C" int gc_cuda_cc(const gc_backend *) { return g_cc; }
extern "C" int gc_cuda_sm_count(const gc_backend *) { return g_sms; }
extern "C" size_t gc_cuda_smem_optin(const gc_backend *) { return g_optin; }
extern "C" gc_status gc_cuda_set_device(const gc_backend *) { return GC_OK; }
extern "C" int gc_cuda_capturing(const gc_backend *)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(g_stream, &cs) != cudaSuccess) return 0;
    return cs != cudaStreamCaptureStatusNone;
}
/* a growable device buffer (*buf, *have bytes) of at least `bytes` */
static gc_status grow(const gc_backend *be, void **buf, size_t *have, size_t bytes, void **out)
{
    if (bytes > *have) {
        if (gc_cuda_capturing(be)) return gc_fail(GC_ERR_BACKEND, "buffer growth during capture");
        GC_CUDA_TRY(cudaStreamSynchronize(g_stream));
        if (*buf) cudaFree(*buf);
        *buf = NULL;
        *have = 0;
        GC_CUDA_TRY(cudaMalloc(buf, bytes));
        *have = bytes;
    }
    *out = *buf;
    return GC_OK;
}
extern "C" gc_status gc_cuda_workspace(const gc_backend *be, size_t bytes, void **out)
{
    return grow(be, &g_ws, &g_ws_bytes, bytes, out);
}

static void *g_scratch;
extern "C" void *gc_cuda_scratch(const gc_backend *) { return g_scratch; }

/* conv2d_bwd_data's accumulate on kernels without an adding epilogue: the staging buffer
 * and the add (backend.cu / elementwise.cu in the library) */
static void *g_stage;
static size_t g_stage_bytes;
extern "C" gc_status gc_cuda_staging(const gc_backend *be, size_t bytes, void **out)
{
    return grow(be, &g_stage, &g_stage_bytes, bytes, out);
}
template <typename T> __global__ void add_into_kernel(int64_t n, T *acc, const T *src)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        acc[i] = gc_from_f<T>(gc_to_f(acc[i]) + gc_to_f(src[i]));
}
extern "C" gc_status gc_cuda_add_into(const gc_backend *, gc_dtype dt, int64_t n, void *acc, const void *src)
{
    GC_CUDA_DISPATCH_FLOAT(dt, T, add_into_kernel<T><<<1024, 256, 0, g_stream>>>(n, (T *)acc, (const T *)src));
    return gc_cuda_launch_check("add_into");
}

static gc_status fake_capture_begin(const gc_backend *)
{
    GC_CUDA_TRY(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
    return GC_OK;
}

static gc_backend g_be;

static void init_backend(void)
{
    int dev = 0;
    if (cudaSetDevice(dev) != cudaSuccess) {
        fprintf(stderr, "no CUDA device\n");
        exit(2);
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, dev);
    g_sms = prop.multiProcessorCount;
    g_cc = prop.major * 10 + prop.minor;
    g_optin = prop.sharedMemPerBlockOptin;
    cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking);
    if (cudaMalloc(&g_scratch, GC_CUDA_SCRATCH_BYTES) != cudaSuccess) {
        fprintf(stderr, "no scratch buffer\n");
        exit(2);
    }
    printf("device: %s, cc %d.%d, %d SMs, %.0f GB; cuDNN %s\n", prop.name, prop.major, prop.minor,
           g_sms, prop.totalGlobalMem / 1e9, gc_conv2d_vendor_available() ? "loaded" : "absent");
    memset(&g_be, 0, sizeof g_be);
    g_be.name = "cuda";
    g_be.native_dtypes = (1u << GC_F32) | (1u << GC_F16) | (1u << GC_BF16);
    g_be.ops[GC_OP_CONV2D_FWD] = gc_cuda_op_conv2d_fwd;
    g_be.ops[GC_OP_CONV2D_BWD_DATA] = gc_cuda_op_conv2d_bwd_data;
    g_be.ops[GC_OP_CONV2D_BWD_FILTER] = gc_cuda_op_conv2d_bwd_filter;
    g_be.capture_begin = fake_capture_begin; /* marks a GPU backend (vendor allowed) */
    gc_variant_register_backend("cuda", NULL, 0);
}

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                       \
        }                                                                                  \
    } while (0)

/* ------------------------------------------------------------------ host data */
static uint64_t g_rng;
static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

/* random values representable in dtype dt: returns the float values; `bits` gets the storage */
static std::vector<float> rand_tensor(size_t n, gc_dtype dt, std::vector<uint8_t> &bits, float scale)
{
    std::vector<float> v(n);
    for (size_t i = 0; i < n; i++) v[i] = frand() * scale;
    bits.resize(n * gc_dtype_size(dt) + 16);
    if (dt == GC_F16) {
        gc_f32_to_f16(v.data(), (uint16_t *)bits.data(), n);
        gc_f16_to_f32((const uint16_t *)bits.data(), v.data(), n);
    } else if (dt == GC_BF16) {
        gc_f32_to_bf16(v.data(), (uint16_t *)bits.data(), n);
        gc_bf16_to_f32((const uint16_t *)bits.data(), v.data(), n);
    } else {
        memcpy(bits.data(), v.data(), n * 4);
    }
    return v;
}

static std::vector<float> to_float(const std::vector<uint8_t> &bits, size_t n, gc_dtype dt)
{
    std::vector<float> v(n);
    if (dt == GC_F16) gc_f16_to_f32((const uint16_t *)bits.data(), v.data(), n);
    else if (dt == GC_BF16) gc_bf16_to_f32((const uint16_t *)bits.data(), v.data(), n);
    else memcpy(v.data(), bits.data(), n * 4);
    return v;
}

struct dbuf {
    void *p = NULL;
    size_t bytes = 0;
    void alloc(size_t b) { bytes = b; CK(cudaMalloc(&p, b ? b : 16)); }
    void up(const std::vector<uint8_t> &h) { CK(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice)); }
    void poison() { CK(cudaMemset(p, 0xFF, bytes)); }
    std::vector<uint8_t> down() const
    {
        std::vector<uint8_t> h(bytes + 16);
        CK(cudaMemcpy(h.data(), p, bytes, cudaMemcpyDeviceToHost));
        return h;
    }
    void release() { if (p) cudaFree(p); p = NULL; }
};

/* ------------------------------------------------------------------ float64 reference */
static double ref_act(double v, gc_act a)
{
    switch (a) {
    case GC_ACT_RELU: return v < 0 ? 0 : v;
    case GC_ACT_TANH: return tanh(v);
    case GC_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    default: return v;
    }
}

/* the F outputs of output pixel (n, oh, ow), in float64, into yo (zeroed by the caller) */
static void ref_fwd_pixel(const gc_conv2d_geom &g, const float *x, const float *w, const float *b, gc_act act,
                          int64_t n, int64_t oh, int64_t ow, double *yo)
{
    for (int64_t kh = 0; kh < g.KH; kh++) {
        int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
        if (ih < 0 || ih >= g.H) continue;
        for (int64_t kw = 0; kw < g.KW; kw++) {
            int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
            if (iw < 0 || iw >= g.W) continue;
            const float *xp = x + ((n * g.H + ih) * g.W + iw) * g.C;
            for (int64_t c = 0; c < g.C; c++) {
                const float *wp = w + ((kh * g.KW + kw) * g.C + c) * g.F;
                double xv = xp[c];
                for (int64_t f = 0; f < g.F; f++) yo[f] += xv * wp[f];
            }
        }
    }
    for (int64_t f = 0; f < g.F; f++) yo[f] = ref_act(yo[f] + (b ? b[f] : 0.0), act);
}

static void ref_fwd(const gc_conv2d_geom &g, const float *x, const float *w, const float *b, gc_act act,
                    std::vector<double> &y)
{
    y.assign((size_t)(g.N * g.OH * g.OW * g.F), 0.0);
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++)
                ref_fwd_pixel(g, x, w, b, act, n, oh, ow, &y[(size_t)(((n * g.OH + oh) * g.OW + ow) * g.F)]);
}

/* backward data as the adjoint of the forward (scatter) -- independent of the GPU gather */
static void ref_bwd_data(const gc_conv2d_geom &g, const float *dy, const float *w, std::vector<double> &dx)
{
    dx.assign((size_t)(g.N * g.H * g.W * g.C), 0.0);
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                const float *dyo = dy + ((n * g.OH + oh) * g.OW + ow) * g.F;
                for (int64_t kh = 0; kh < g.KH; kh++) {
                    int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
                    if (ih < 0 || ih >= g.H) continue;
                    for (int64_t kw = 0; kw < g.KW; kw++) {
                        int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
                        if (iw < 0 || iw >= g.W) continue;
                        double *dxp = &dx[(size_t)(((n * g.H + ih) * g.W + iw) * g.C)];
                        for (int64_t c = 0; c < g.C; c++) {
                            const float *wp = w + ((kh * g.KW + kw) * g.C + c) * g.F;
                            double s = 0;
                            for (int64_t f = 0; f < g.F; f++) s += (double)dyo[f] * wp[f];
                            dxp[c] += s;
                        }
                    }
                }
            }
}

static void ref_bwd_filter(const gc_conv2d_geom &g, const float *x, const float *dy, std::vector<double> &dw,
                           std::vector<double> &db)
{
    dw.assign((size_t)(g.KH * g.KW * g.C * g.F), 0.0);
    db.assign((size_t)g.F, 0.0);
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++) {
                const float *dyo = dy + ((n * g.OH + oh) * g.OW + ow) * g.F;
                for (int64_t f = 0; f < g.F; f++) db[(size_t)f] += dyo[f];
                for (int64_t kh = 0; kh < g.KH; kh++) {
                    int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
                    if (ih < 0 || ih >= g.H) continue;
                    for (int64_t kw = 0; kw < g.KW; kw++) {
                        int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
                        if (iw < 0 || iw >= g.W) continue;
                        const float *xp = x + ((n * g.H + ih) * g.W + iw) * g.C;
                        for (int64_t c = 0; c < g.C; c++) {
                            double *dwp = &dw[(size_t)(((kh * g.KW + kw) * g.C + c) * g.F)];
                            double xv = xp[c];
                            for (int64_t f = 0; f < g.F; f++) dwp[f] += xv * dyo[f];
                        }
                    }
                }
            }
}

/* ||out - ref|| / ||ref||; non-finite output -> +inf */
static double rel_err(const std::vector<float> &out, const std::vector<double> &ref)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < ref.size(); i++) {
        if (!isfinite(out[i])) return INFINITY;
        double d = out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* ------------------------------------------------------------------ cases */
struct conv_case {
    int N, H, W, C, KH, KW, F, sh, sw, dh, dw;
    gc_padding pad;
    gc_act act;
    int bias, db;
};

static const conv_case g_cases[] = {
    /* N  H   W   C  KH KW  F  sh sw dh dw  pad           act             bias db */
    {2, 9, 11, 8, 3, 3, 16, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 1},
    {3, 13, 13, 32, 3, 3, 64, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 1, 1},   /* seed layer 2 */
    {2, 28, 28, 1, 3, 3, 32, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 1},      /* seed layer 1 */
    {1, 5, 5, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 1},       /* seed layer 3 */
    {2, 10, 9, 24, 3, 3, 40, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_TANH, 1, 1},       /* odd total pad */
    {2, 12, 14, 16, 3, 5, 24, 3, 2, 2, 1, GC_PAD_VALID, GC_ACT_SIGMOID, 1, 0},
    {1, 7, 7, 12, 2, 2, 10, 1, 1, 2, 2, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},      /* C, F % 8 != 0 */
    {2, 8, 8, 64, 1, 1, 48, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 1},       /* 1x1 */
    {2, 16, 15, 64, 1, 1, 32, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 1, 1},    /* 1x1 stride 2 */
    {2, 9, 9, 3, 5, 5, 7, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 1},          /* C = 3, F = 7 */
    {3, 11, 7, 16, 3, 3, 8, 3, 1, 1, 2, GC_PAD_SAME, GC_ACT_LINEAR, 1, 1},
    {1, 6, 6, 8, 3, 3, 200, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 1},        /* 4 N tiles */
    {4, 20, 20, 40, 3, 3, 72, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 1, 1},    /* many M tiles */
    {2, 17, 19, 16, 4, 4, 24, 2, 3, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 0, 1},      /* even kernel */
    {2, 6, 6, 20, 3, 3, 16, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 0},     /* C % 8 == 4 */
    {2, 33, 30, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 1},      /* the bench layer, small */
    {8, 48, 48, 16, 3, 3, 24, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_SIGMOID, 1, 1},   /* >= 132 tiles: no split */
    {3, 80, 80, 8, 3, 3, 8, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 1},        /* strided bwd, no split */
    {2, 38, 38, 3, 7, 7, 64, 2, 2, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 1},      /* ResNet stem, small (small C) */
    {1, 21, 19, 3, 7, 7, 10, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 1, 1},     /* stem padded, odd W*C: element loads */
    {2, 16, 20, 5, 6, 9, 70, 1, 2, 1, 1, GC_PAD_SAME, GC_ACT_TANH, 0, 1},       /* small C: 2 row tiles, 2 F tiles */
    {2, 12, 11, 5, 5, 5, 9, 1, 1, 2, 1, GC_PAD_SAME, GC_ACT_SIGMOID, 1, 1},     /* small C, dilation along h */
    {4, 14, 14, 64, 1, 1, 128, 2, 2, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1},  /* strided 1x1: scattered bwd data */
    {2, 9, 11, 13, 1, 1, 9, 3, 2, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 1},       /* strided 1x1, odd C / F */
    /* stride-1 1x1 (conv2d_gemm.cu's GEMM route where forced or chosen): odd C / F
     * (misaligned rows), 'same' padding (= none), split K, and a layer big enough that
     * auto takes the route in every pass on an H200 (wgmma fwd / bwd data) */
    {3, 7, 9, 13, 1, 1, 21, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_SIGMOID, 1, 1},
    {2, 5, 6, 40, 1, 1, 24, 1, 1, 2, 2, GC_PAD_VALID, GC_ACT_TANH, 1, 0},
    {4, 14, 14, 256, 1, 1, 136, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 1},
    {6, 28, 28, 256, 1, 1, 256, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1},
};

struct config {
    const char *name;
    gc_dtype dt;
    int tf32, path; /* path: the kernel family forced for every pass (K_*) */
    gc_impl impl;
    double tol;
    int stages; /* pipeline depth of both mma.sync kernels (knobs; 0: default) */
    int nosplit; /* cuda.conv2d.mma_splits = 1 */
    int gemm; /* force_route: 1 = stride-1 1x1 layers through gc_cuda_gemm, 2 = never */
};

static const config g_configs[] = {
    {"f32-exact", GC_F32, 0, 0, GC_IMPL_OWN, 2e-5},
    {"tf32", GC_F32, 1, 0, GC_IMPL_OWN, 2e-3},
    {"f16", GC_F16, 1, 0, GC_IMPL_OWN, 1e-2},
    {"bf16", GC_BF16, 1, 0, GC_IMPL_OWN, 1e-2},
    {"f16-simt", GC_F16, 1, K_SIMT, GC_IMPL_OWN, 1e-2},
    {"f16-tc", GC_F16, 1, K_MMA, GC_IMPL_OWN, 1e-2},
    {"tf32-tc", GC_F32, 1, K_MMA, GC_IMPL_OWN, 2e-3},
    {"f32-direct", GC_F32, 0, K_DIRECT, GC_IMPL_OWN, 2e-5},
    {"f16-s4", GC_F16, 1, 0, GC_IMPL_OWN, 1e-2, 4},
    {"tf32-s6", GC_F32, 1, 0, GC_IMPL_OWN, 2e-3, 6},
    {"bf16-s5", GC_BF16, 1, 0, GC_IMPL_OWN, 1e-2, 5},
    {"f16-sc", GC_F16, 1, K_SMALLC, GC_IMPL_OWN, 1e-2},   /* the small-C kernels wherever they apply */
    {"bf16-sc", GC_BF16, 1, K_SMALLC, GC_IMPL_OWN, 1e-2},
    {"tf32-sc", GC_F32, 1, K_SMALLC, GC_IMPL_OWN, 2e-3},
    {"f16-nosplit", GC_F16, 1, 0, GC_IMPL_OWN, 1e-2, 0, 1},
    {"tf32-nosplt", GC_F32, 1, 0, GC_IMPL_OWN, 2e-3, 4, 1},
    {"f16-gemm", GC_F16, 1, 0, GC_IMPL_OWN, 1e-2, 0, 0, 1},   /* 1x1 stride 1: the GEMM route */
    {"bf16-gemm", GC_BF16, 1, 0, GC_IMPL_OWN, 1e-2, 0, 0, 1},
    {"tf32-gemm", GC_F32, 1, 0, GC_IMPL_OWN, 2e-3, 0, 0, 1},
    {"f32-gemm", GC_F32, 0, 0, GC_IMPL_OWN, 2e-5, 0, 0, 1},   /* exact f32: never routed */
    {"f16-nogemm", GC_F16, 1, 0, GC_IMPL_OWN, 1e-2, 0, 0, 2}, /* the conv kernels for them */
    {"bf16-nogemm", GC_BF16, 1, 0, GC_IMPL_OWN, 1e-2, 0, 0, 2},
    {"cudnn-f32", GC_F32, 0, 0, GC_IMPL_VENDOR, 1e-4},
    {"cudnn-tf32", GC_F32, 1, 0, GC_IMPL_VENDOR, 2e-3},
    {"cudnn-f16", GC_F16, 1, 0, GC_IMPL_VENDOR, 1e-2},
    {"cudnn-bf16", GC_BF16, 1, 0, GC_IMPL_VENDOR, 1e-2},
};

static int g_fail, g_checks;

static void report(const char *cfg, int ci, const char *what, double err, double tol, const char *note)
{
    g_checks++;
    int ok = err <= tol;
    if (!ok) g_fail++;
    if (!ok || getenv("VERBOSE"))
        printf("  %-4s case %2d %-11s %-12s rel err %.3e (tol %.0e) %s\n", ok ? "ok" : "FAIL", ci, cfg,
               what, err, tol, note ? note : "");
}

static gc_status run_op(gc_op op, const gc_tensor **in, int nin, gc_tensor **out, int nout,
                        const gc_conv2d_params *p)
{
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    for (int i = 0; i < nin; i++) c.in[i] = in[i];
    for (int i = 0; i < nout; i++) c.out[i] = out[i];
    c.params = p;
    return gc_op_run(&g_be, &c);
}

static void test_case(int ci, const conv_case &k, const config &cf, double *worst)
{
    gc_conv2d_params p = {k.sh, k.sw, k.dh, k.dw, k.pad, k.act, cf.impl, 0};
    gc_conv2d_geom g;
    if (gc_conv2d_geometry(k.N, k.H, k.W, k.C, k.KH, k.KW, k.F, &p, &g) != GC_OK) {
        printf("  FAIL case %d: geometry: %s\n", ci, gc_last_error());
        g_fail++;
        return;
    }
    gc_set_allow_tf32(cf.tf32);
    if (cf.gemm) force_route(cf.gemm);
    else force_kernel(cf.path);
    force(GC_VP_CUDA_CONV2D_MMA_STAGES, cf.stages);
    force(GC_VP_CUDA_CONV2D_WGRAD_MMA_STAGES, cf.stages);
    force(GC_VP_CUDA_CONV2D_MMA_SPLITS, cf.nosplit ? 1 : 0);
    const gc_dtype dt = cf.dt;
    /* the passes that must (7) / must not run through gc_cuda_gemm */
    const int plain1x1 = k.KH == 1 && k.KW == 1 && k.sh == 1 && k.sw == 1 && cf.impl == GC_IMPL_OWN;
    const int want_gemm = plain1x1 && cf.gemm == 1 && (dt != GC_F32 || cf.tf32);
    const int check_route = cf.impl == GC_IMPL_OWN && (cf.gemm == 1 || cf.gemm == 2);
    const size_t es = gc_dtype_size(dt);
    const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F);
    const size_t ny = (size_t)(g.N * g.OH * g.OW * g.F), nb = (size_t)g.F;
    std::vector<uint8_t> bx, bw, bb, bdy;
    std::vector<float> x = rand_tensor(nx, dt, bx, 1.0f), w = rand_tensor(nw, dt, bw, 0.5f);
    std::vector<float> b = rand_tensor(nb, dt, bb, 1.0f), dy = rand_tensor(ny, dt, bdy, 1.0f);
    dbuf dx_, dw_, db_, dy_, y_, gx, gw, gb;
    gx.alloc(nx * es); gx.up(bx);
    gw.alloc(nw * es); gw.up(bw);
    gb.alloc(nb * es); gb.up(bb);
    dy_.alloc(ny * es); dy_.up(bdy);
    y_.alloc(ny * es); dx_.alloc(nx * es); dw_.alloc(nw * es); db_.alloc(nb * es);

    int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F};
    int64_t sb[1] = {g.F};
    gc_tensor tx = gc_tensor_make(gx.p, dt, 4, sx), tw = gc_tensor_make(gw.p, dt, 4, sw);
    gc_tensor tb = gc_tensor_make(k.bias ? gb.p : NULL, dt, 1, sb);
    gc_tensor ty = gc_tensor_make(y_.p, dt, 4, sy), tdy = gc_tensor_make(dy_.p, dt, 4, sy);
    gc_tensor tdx = gc_tensor_make(dx_.p, dt, 4, sx), tdw = gc_tensor_make(dw_.p, dt, 4, sw);
    gc_tensor tdb = gc_tensor_make(k.db ? db_.p : NULL, dt, 1, sb);

    std::vector<double> ry, rdx, rdw, rdb;
    ref_fwd(g, x.data(), w.data(), k.bias ? b.data() : NULL, k.act, ry);
    ref_bwd_data(g, dy.data(), w.data(), rdx);
    ref_bwd_filter(g, x.data(), dy.data(), rdw, rdb);

    /* forward */
    y_.poison();
    const gc_tensor *fin[3] = {&tx, &tw, &tb};
    gc_tensor *fout[1] = {&ty};
    gc_status st = run_op(GC_OP_CONV2D_FWD, fin, 3, fout, 1, &p);
    if (st && cf.impl == GC_IMPL_VENDOR) { /* the baseline may refuse a shape: reported, not failed */
        printf("  skip case %2d %-11s fwd: %s\n", ci, cf.name, gc_last_error());
        goto out;
    }
    if (st) {
        printf("  FAIL case %2d %-11s conv2d_fwd: %s: %s\n", ci, cf.name, gc_status_name(st), gc_last_error());
        g_fail++;
        goto out;
    }
    CK(cudaDeviceSynchronize());
    {
        double e = rel_err(to_float(y_.down(), ny, dt), ry);
        report(cf.name, ci, "fwd", e, cf.tol, NULL);
        worst[0] = std::max(worst[0], e);
        if (check_route)
            report(cf.name, ci, "fwd route", (gc_variant_last(GC_VP_CUDA_CONV2D_FWD) == GC_V_FWD_GEMM) == want_gemm ? 0.0 : 1.0, 0.0, NULL);
    }
    /* backward data */
    {
        dx_.poison();
        const gc_tensor *in[2] = {&tdy, &tw};
        gc_tensor *out[1] = {&tdx};
        st = run_op(GC_OP_CONV2D_BWD_DATA, in, 2, out, 1, &p);
        if (st && cf.impl == GC_IMPL_VENDOR) {
            printf("  skip case %2d %-11s bwd_data: %s\n", ci, cf.name, gc_last_error());
        } else if (st) {
            printf("  FAIL case %2d %-11s conv2d_bwd_data: %s\n", ci, cf.name, gc_last_error());
            g_fail++;
        } else {
            CK(cudaDeviceSynchronize());
            double e = rel_err(to_float(dx_.down(), nx, dt), rdx);
            report(cf.name, ci, "bwd_data", e, cf.tol, NULL);
            worst[1] = std::max(worst[1], e);
            if (check_route)
                report(cf.name, ci, "bwdD route", (gc_variant_last(GC_VP_CUDA_CONV2D_BWD_DATA) == GC_V_BWDD_GEMM) == want_gemm ? 0.0 : 1.0,
                       0.0, NULL);
        }
    }
    /* backward filter (+ db), twice: the results must be bitwise identical */
    {
        const gc_tensor *in[2] = {&tx, &tdy};
        gc_tensor *out[2] = {&tdw, &tdb};
        std::vector<uint8_t> first_w, first_b;
        for (int rep = 0; rep < 2; rep++) {
            dw_.poison();
            db_.poison();
            st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
            if (st && cf.impl == GC_IMPL_VENDOR) {
                printf("  skip case %2d %-11s bwd_filter: %s\n", ci, cf.name, gc_last_error());
                break;
            }
            if (st) {
                printf("  FAIL case %2d %-11s conv2d_bwd_filter: %s\n", ci, cf.name, gc_last_error());
                g_fail++;
                break;
            }
            CK(cudaDeviceSynchronize());
            std::vector<uint8_t> hw = dw_.down(), hb = db_.down();
            if (rep == 0) {
                double e = rel_err(to_float(hw, nw, dt), rdw);
                report(cf.name, ci, "bwd_filter", e, cf.tol, NULL);
                worst[2] = std::max(worst[2], e);
                if (check_route)
                    report(cf.name, ci, "bwdF route",
                           (gc_variant_last(GC_VP_CUDA_CONV2D_WGRAD) == GC_V_WGRAD_GEMM) == want_gemm ? 0.0 : 1.0, 0.0, NULL);
                if (k.db) {
                    e = rel_err(to_float(hb, nb, dt), rdb);
                    report(cf.name, ci, "db", e, cf.tol, NULL);
                    worst[3] = std::max(worst[3], e);
                }
                first_w = hw;
                first_b = hb;
            } else if (cf.impl == GC_IMPL_OWN) {
                int same = !memcmp(hw.data(), first_w.data(), nw * es) &&
                           (!k.db || !memcmp(hb.data(), first_b.data(), nb * es));
                report(cf.name, ci, "determinism", same ? 0.0 : 1.0, 0.0, NULL);
            }
        }
    }
out:
    gx.release(); gw.release(); gb.release(); dy_.release(); y_.release();
    dx_.release(); dw_.release(); db_.release();
    force_none();
}

/* fwd + bwd_data + bwd_filter captured into one CUDA graph and replayed must give the
 * eager results bit for bit (no host syncs or allocations inside the ops). */
static void test_graph(gc_dtype dt, int tf32)
{
    const conv_case k = {4, 20, 20, 40, 3, 3, 72, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 1};
    gc_set_allow_tf32(tf32);
    gc_conv2d_params p = {k.sh, k.sw, k.dh, k.dw, k.pad, k.act, GC_IMPL_OWN, 0};
    gc_conv2d_geom g;
    gc_conv2d_geometry(k.N, k.H, k.W, k.C, k.KH, k.KW, k.F, &p, &g);
    const size_t es = gc_dtype_size(dt);
    const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F);
    const size_t ny = (size_t)(g.N * g.OH * g.OW * g.F);
    std::vector<uint8_t> bx, bw, bb, bdy;
    rand_tensor(nx, dt, bx, 1); rand_tensor(nw, dt, bw, 0.5f); rand_tensor(g.F, dt, bb, 1);
    rand_tensor(ny, dt, bdy, 1);
    dbuf gx, gw, gb, gdy, gy, gdx, gdw, gdb;
    gx.alloc(nx * es); gx.up(bx); gw.alloc(nw * es); gw.up(bw); gb.alloc(g.F * es); gb.up(bb);
    gdy.alloc(ny * es); gdy.up(bdy); gy.alloc(ny * es); gdx.alloc(nx * es); gdw.alloc(nw * es);
    gdb.alloc(g.F * es);
    int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
            sb[1] = {g.F};
    gc_tensor tx = gc_tensor_make(gx.p, dt, 4, sx), tw = gc_tensor_make(gw.p, dt, 4, sw),
              tb = gc_tensor_make(gb.p, dt, 1, sb), ty = gc_tensor_make(gy.p, dt, 4, sy),
              tdy = gc_tensor_make(gdy.p, dt, 4, sy), tdx = gc_tensor_make(gdx.p, dt, 4, sx),
              tdw = gc_tensor_make(gdw.p, dt, 4, sw), tdb = gc_tensor_make(gdb.p, dt, 1, sb);
    const gc_tensor *fin[3] = {&tx, &tw, &tb}, *din[2] = {&tdy, &tw}, *win[2] = {&tx, &tdy};
    gc_tensor *fout[1] = {&ty}, *dout[1] = {&tdx}, *wout[2] = {&tdw, &tdb};
    std::vector<uint8_t> e[4];
    int ok = 1;
    for (int pass = 0; pass < 2 && ok; pass++) {
        gy.poison(); gdx.poison(); gdw.poison(); gdb.poison();
        cudaGraph_t graph = NULL;
        cudaGraphExec_t exec = NULL;
        if (pass == 1) CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
        ok = run_op(GC_OP_CONV2D_FWD, fin, 3, fout, 1, &p) == GC_OK &&
             run_op(GC_OP_CONV2D_BWD_DATA, din, 2, dout, 1, &p) == GC_OK &&
             run_op(GC_OP_CONV2D_BWD_FILTER, win, 2, wout, 2, &p) == GC_OK;
        if (!ok) printf("  graph test: op failed: %s\n", gc_last_error());
        if (pass == 1) {
            cudaError_t ce = cudaStreamEndCapture(g_stream, &graph);
            if (ce != cudaSuccess || !ok) {
                printf("  graph test: capture failed: %s\n", cudaGetErrorString(ce));
                ok = 0;
                (void)cudaGetLastError();
                break;
            }
            CK(cudaGraphInstantiate(&exec, graph, 0));
            CK(cudaGraphLaunch(exec, g_stream));
        }
        CK(cudaStreamSynchronize(g_stream));
        std::vector<uint8_t> r[4] = {gy.down(), gdx.down(), gdw.down(), gdb.down()};
        if (pass == 0) for (int i = 0; i < 4; i++) e[i] = r[i];
        else for (int i = 0; i < 4; i++) ok = ok && r[i] == e[i];
        if (exec) cudaGraphExecDestroy(exec);
        if (graph) cudaGraphDestroy(graph);
    }
    g_checks++;
    if (!ok) g_fail++;
    printf("  %-4s graph capture + replay == eager (%s%s)\n", ok ? "ok" : "FAIL", gc_dtype_name(dt),
           dt == GC_F32 ? (tf32 ? ", tf32" : ", exact") : "");
    gx.release(); gw.release(); gb.release(); gdy.release(); gy.release(); gdx.release();
    gdw.release(); gdb.release();
}

/* ------------------------------------------------------------------ Hopper wgmma forward
 * Forced wgmma (conv2d_wgmma.cu), each kernel (variant 1 im2col, 2 halo) on the shapes
 * it takes, f16 and bf16, against the float64 reference (every output when the reference
 * is cheap, else the first and last two tiles and every 61st row), against the mma.sync
 * path (every output, both NaN-poisoned), against itself with the shortest ring on 3
 * blocks per column tile (bitwise: same summation order), and captured into a graph
 * (bitwise); with the halo variant also the data gradient (test_wgmma_bwd_data). Shapes
 * they must refuse come back GC_ERR_UNSUPPORTED. */
static const conv_case g_wg_cases[] = {
    /* N  H   W    C  KH KW  F  sh sw dh dw  pad           act             bias db */
    {2, 56, 56, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0},      /* bench layer, batch 2: 49 tiles */
    {2, 33, 30, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0},      /* M = 1980: tiles across rows/images, tail */
    {3, 20, 17, 64, 3, 3, 128, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 1, 0},  /* F = 128: 2 column tiles, M = 810 */
    {2, 15, 13, 128, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_SIGMOID, 1, 0},  /* C = 128: 2 chunks per tap */
    {2, 9, 11, 128, 3, 3, 128, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_TANH, 0, 0},     /* C = F = 128, no bias, 3 stages */
    {2, 12, 10, 64, 1, 1, 64, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 0},     /* 1x1 */
    {2, 14, 16, 64, 1, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0},      /* KH != KW: H and W box corners differ */
    {3, 7, 40, 64, 5, 3, 64, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1, 0},      /* 5x3 valid: upper corners -4 (H), -2 (W) */
    {2, 11, 9, 64, 2, 2, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 1, 0},     /* even kernel: padding after only */
    {1, 8, 8, 64, 3, 3, 192, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0},       /* 3 column tiles, one partial row tile */
    {64, 56, 56, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0},     /* the bench layer (sampled reference) */
};

/* reference rows (all F outputs of each listed output pixel) */
static void ref_fwd_rows(const gc_conv2d_geom &g, const float *x, const float *w, const float *b, gc_act act,
                         const std::vector<int64_t> &rows, std::vector<double> &y)
{
    y.assign(rows.size() * (size_t)g.F, 0.0);
    for (size_t i = 0; i < rows.size(); i++) {
        const int64_t m = rows[i], ow = m % g.OW, oh = (m / g.OW) % g.OH, n = m / (g.OW * g.OH);
        ref_fwd_pixel(g, x, w, b, act, n, oh, ow, &y[i * (size_t)g.F]);
    }
}

/* The data gradient on the halo kernel (forced wgmma) against the float64 reference
 * (when cheap) and against the mma.sync kernel (forced mma, every output, both NaN-poisoned);
 * layers whose weight slice and halo do not fit are skipped (GC_ERR_UNSUPPORTED). */
static void test_wgmma_bwd_data(int ci, const conv_case &k, gc_dtype dt, const gc_conv2d_geom &g,
                                const std::vector<float> &w, dbuf &gw, double *worst)
{
    const char *dn = gc_dtype_name(dt);
    const size_t es = gc_dtype_size(dt);
    const size_t nx = (size_t)(g.N * g.H * g.W * g.C), ny = (size_t)(g.N * g.OH * g.OW * g.F);
    gc_conv2d_params p = {k.sh, k.sw, k.dh, k.dw, k.pad, GC_ACT_LINEAR, GC_IMPL_OWN, 0};
    std::vector<uint8_t> bdy;
    std::vector<float> dy = rand_tensor(ny, dt, bdy, 1.0f);
    dbuf gdy, dx4, dx2;
    gdy.alloc(ny * es); gdy.up(bdy);
    dx4.alloc(nx * es); dx2.alloc(nx * es);
    int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F};
    gc_tensor tdy = gc_tensor_make(gdy.p, dt, 4, sy), tw = gc_tensor_make(gw.p, dt, 4, sw);
    const gc_tensor *in[2] = {&tdy, &tw};
    char what[96];
    snprintf(what, sizeof what, "%dx%dx%dx%d k%dx%d F%d %s", k.N, k.H, k.W, k.C, k.KH, k.KW, k.F,
             k.pad == GC_PAD_SAME ? "same" : "valid");
    auto run = [&](dbuf &dx, int path) -> gc_status {
        gc_tensor tdx = gc_tensor_make(dx.p, dt, 4, sx);
        gc_tensor *out[1] = {&tdx};
        dx.poison();
        force_kernel(path);
        gc_status st = run_op(GC_OP_CONV2D_BWD_DATA, in, 2, out, 1, &p);
        force_kernel(K_AUTO);
        if (st == GC_OK) CK(cudaDeviceSynchronize());
        return st;
    };
    gc_status st = run(dx4, K_WGMMA);
    if (st == GC_ERR_UNSUPPORTED && strstr(gc_last_error(), "do not fit")) {
        printf("  skip halo-bwd case %2d %-4s %s: %s\n", ci, dn, what, gc_last_error());
        gc_clear_error();
    } else if (st) {
        printf("  FAIL halo-bwd case %2d %-4s %s: %s: %s\n", ci, dn, what, gc_status_name(st), gc_last_error());
        g_fail++;
    } else {
        std::vector<float> out4 = to_float(dx4.down(), nx, dt);
        if ((double)g.N * g.OH * g.OW * g.F * g.KH * g.KW * g.C <= 4e8) {
            std::vector<double> rdx;
            ref_bwd_data(g, dy.data(), w.data(), rdx);
            const double e = rel_err(out4, rdx);
            report(dn, ci, "halo-bwd-ref", e, 1e-2, what);
            worst[0] = std::max(worst[0], e);
        }
        if ((st = run(dx2, K_MMA))) {
            printf("  FAIL halo-bwd case %2d %-4s %s: mma.sync path: %s\n", ci, dn, what, gc_last_error());
            g_fail++;
        } else {
            std::vector<float> out2 = to_float(dx2.down(), nx, dt);
            std::vector<double> r2(out2.begin(), out2.end());
            for (float v : out2)
                if (!isfinite(v)) { r2.assign(1, NAN); break; }
            const double e2 = r2.size() == nx ? rel_err(out4, r2) : INFINITY;
            report(dn, ci, "halo-bwd-vs-mma", e2, 1e-2, what);
            worst[1] = std::max(worst[1], e2);
        }
        /* the automatic choice takes it for layers with a tile per SM */
        if (run(dx2, K_AUTO) == GC_OK && g.N * g.H * g.W >= 128 * (int64_t)g_sms)
            report(dn, ci, "auto->halo-bwd", gc_variant_last(GC_VP_CUDA_CONV2D_BWD_DATA) == GC_V_BWDD_WGMMA ? 0.0 : 1.0,
                   0.0, what);
    }
    gdy.release(); dx4.release(); dx2.release();
}

/* variant: 1 the im2col kernel, 2 the halo kernel (conv2d_wgmma.cu) */
static void test_wgmma_case(int ci, const conv_case &k, gc_dtype dt, double *worst, int variant)
{
    const int wv = variant == 2 ? GC_V_FWDWG_HALO : GC_V_FWDWG_IM2COL; /* cuda.conv2d.fwd_wgmma */
    const char *dn = gc_dtype_name(dt);
    gc_conv2d_params p = {k.sh, k.sw, k.dh, k.dw, k.pad, k.act, GC_IMPL_OWN, 0};
    gc_conv2d_geom g;
    if (gc_conv2d_geometry(k.N, k.H, k.W, k.C, k.KH, k.KW, k.F, &p, &g) != GC_OK) {
        printf("  FAIL wgmma case %d: geometry: %s\n", ci, gc_last_error());
        g_fail++;
        return;
    }
    gc_set_allow_tf32(1);
    const size_t es = gc_dtype_size(dt);
    const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F);
    const size_t ny = (size_t)(g.N * g.OH * g.OW * g.F), nb = (size_t)g.F;
    const int64_t M = g.N * g.OH * g.OW;
    std::vector<uint8_t> bx, bw, bb;
    std::vector<float> x = rand_tensor(nx, dt, bx, 1.0f), w = rand_tensor(nw, dt, bw, 0.5f);
    std::vector<float> b = rand_tensor(nb, dt, bb, 1.0f);
    dbuf gx, gw, gb, y4, y2, y3;
    gx.alloc(nx * es); gx.up(bx);
    gw.alloc(nw * es); gw.up(bw);
    gb.alloc(nb * es); gb.up(bb);
    y4.alloc(ny * es); y2.alloc(ny * es); y3.alloc(ny * es);
    int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F};
    int64_t sb[1] = {g.F};
    gc_tensor tx = gc_tensor_make(gx.p, dt, 4, sx), tw = gc_tensor_make(gw.p, dt, 4, sw);
    gc_tensor tb = gc_tensor_make(k.bias ? gb.p : NULL, dt, 1, sb);
    const gc_tensor *fin[3] = {&tx, &tw, &tb};
    char what[96];
    snprintf(what, sizeof what, "%dx%dx%dx%d k%dx%d F%d %s", k.N, k.H, k.W, k.C, k.KH, k.KW, k.F,
             k.pad == GC_PAD_SAME ? "same" : "valid");
    auto run = [&](dbuf &y, int path, int stages, int blocks) -> gc_status {
        gc_tensor ty = gc_tensor_make(y.p, dt, 4, sy);
        gc_tensor *fout[1] = {&ty};
        y.poison();
        force_kernel(path);
        force(GC_VP_CUDA_CONV2D_WGMMA_STAGES, stages);
        force(GC_VP_CUDA_CONV2D_WGMMA_BLOCKS, blocks);
        force(GC_VP_CUDA_CONV2D_FWD_WGMMA, path == K_WGMMA ? wv : GC_V_FWDWG_AUTO);
        gc_status st = run_op(GC_OP_CONV2D_FWD, fin, 3, fout, 1, &p);
        force_none();
        if (st == GC_OK) CK(cudaDeviceSynchronize());
        return st;
    };
    const char *vn = variant == 2 ? "halo" : "im2col";
    char lab[32];
    gc_status st = run(y4, K_WGMMA, 0, 0);
    /* the halo kernel needs the weight slice and two halo stages in shared memory */
    if (st == GC_ERR_UNSUPPORTED && variant == 2 && g.KH * g.KW * g.C / 64 > 12) {
        printf("  skip halo case %2d %-4s %s: %s\n", ci, dn, what, gc_last_error());
        gc_clear_error();
    } else if (st) {
        printf("  FAIL %s case %2d %-4s %s: %s: %s\n", vn, ci, dn, what, gc_status_name(st), gc_last_error());
        g_fail++;
    } else {
        std::vector<float> out4 = to_float(y4.down(), ny, dt);
        /* float64 reference */
        double e;
        const char *note;
        if ((double)M * g.F * g.KH * g.KW * g.C <= 4e8) {
            std::vector<double> ry;
            ref_fwd(g, x.data(), w.data(), k.bias ? b.data() : NULL, k.act, ry);
            e = rel_err(out4, ry);
            note = "all outputs";
        } else {
            std::vector<int64_t> rows;
            for (int64_t m = 0; m < M; m++)
                if (m < 256 || m >= M - 256 || m % 61 == 0) rows.push_back(m);
            std::vector<double> ry;
            ref_fwd_rows(g, x.data(), w.data(), k.bias ? b.data() : NULL, k.act, rows, ry);
            std::vector<float> sel(ry.size());
            for (size_t i = 0; i < rows.size(); i++)
                for (int64_t f = 0; f < g.F; f++)
                    sel[i * (size_t)g.F + f] = out4[(size_t)(rows[i] * g.F + f)];
            e = rel_err(sel, ry);
            note = "sampled rows";
        }
        char buf[160];
        snprintf(buf, sizeof buf, "%s (%s)", what, note);
        snprintf(lab, sizeof lab, "%s-ref", vn);
        report(dn, ci, lab, e, 1e-2, buf);
        worst[0] = std::max(worst[0], e);
        /* the mma.sync path on the same inputs, every output */
        if ((st = run(y2, K_MMA, 0, 0))) {
            printf("  FAIL wgmma case %2d %-4s %s: mma.sync path: %s\n", ci, dn, what, gc_last_error());
            g_fail++;
        } else {
            std::vector<float> out2 = to_float(y2.down(), ny, dt);
            std::vector<double> r2(out2.begin(), out2.end());
            for (float v : out2)
                if (!isfinite(v)) { r2.assign(1, NAN); break; }
            double e2 = r2.size() == ny ? rel_err(out4, r2) : INFINITY;
            snprintf(lab, sizeof lab, "%s-vs-mma", vn);
            report(dn, ci, lab, e2, 1e-2, what);
            worst[1] = std::max(worst[1], e2);
        }
        /* the shortest ring (3 stages; 2 for the halo kernel), 3 blocks per column
         * tile (several tiles per block: ring wrap, consumer hand-over, staging reuse):
         * the same sums in the same order */
        if ((st = run(y3, K_WGMMA, variant == 2 ? 2 : 3, 3))) {
            printf("  FAIL %s case %2d %-4s %s: short ring, 3 blocks: %s\n", vn, ci, dn, what, gc_last_error());
            g_fail++;
        } else {
            std::vector<uint8_t> a = y4.down(), c = y3.down();
            snprintf(lab, sizeof lab, "%s-ring3b", vn);
            report(dn, ci, lab, memcmp(a.data(), c.data(), ny * es) ? 1.0 : 0.0, 0.0, what);
        }
        /* auto dispatch takes wgmma where it is wanted (big enough) */
        if ((st = run(y3, K_AUTO, 0, 0)) == GC_OK && M >= 128 * (int64_t)g_sms) {
            report(dn, ci, "auto->wgmma", gc_variant_last(GC_VP_CUDA_CONV2D_FWD) == GC_V_FWD_WGMMA ? 0.0 : 1.0, 0.0,
                   what);
        }
        /* graph capture of the forced path, replayed == eager */
        if (ci == 1) {
            y3.poison();
            gc_tensor ty = gc_tensor_make(y3.p, dt, 4, sy);
            gc_tensor *fout[1] = {&ty};
            cudaGraph_t graph = NULL;
            cudaGraphExec_t exec = NULL;
            int ok = 0;
            force_kernel(K_WGMMA);
            force(GC_VP_CUDA_CONV2D_FWD_WGMMA, wv);
            CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
            st = run_op(GC_OP_CONV2D_FWD, fin, 3, fout, 1, &p);
            cudaError_t ce = cudaStreamEndCapture(g_stream, &graph);
            force_none();
            if (st == GC_OK && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
                CK(cudaGraphLaunch(exec, g_stream));
                CK(cudaStreamSynchronize(g_stream));
                std::vector<uint8_t> a = y4.down(), c = y3.down();
                ok = !memcmp(a.data(), c.data(), ny * es);
            } else {
                printf("  wgmma graph capture failed: %s / %s\n", gc_last_error(), cudaGetErrorString(ce));
                (void)cudaGetLastError();
            }
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
            snprintf(lab, sizeof lab, "%s-graph", vn);
            report(dn, ci, lab, ok ? 0.0 : 1.0, 0.0, what);
        }
    }
    if (variant == 2) test_wgmma_bwd_data(ci, k, dt, g, w, gw, worst + 2);
    gx.release(); gw.release(); gb.release(); y4.release(); y2.release(); y3.release();
}

/* shapes / dtypes the wgmma kernel must refuse (status, no launch) */
static void test_wgmma_refusals(void)
{
    struct { conv_case k; gc_dtype dt; const char *why; } bad[] = {
        {{2, 8, 8, 32, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0}, GC_F16, "C = 32"},
        {{2, 8, 8, 64, 3, 3, 48, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0}, GC_F16, "F = 48"},
        {{2, 8, 8, 64, 3, 3, 64, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0}, GC_F16, "stride 2"},
        {{2, 8, 8, 64, 3, 3, 64, 1, 1, 2, 2, GC_PAD_SAME, GC_ACT_RELU, 1, 0}, GC_BF16, "dilation 2"},
        {{2, 8, 8, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0}, GC_F32, "float32"},
        {{1, 8, 8, 256, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 1, 0}, GC_F16, "weight slice too big"},
    };
    for (auto &t : bad) {
        gc_conv2d_params p = {t.k.sh, t.k.sw, t.k.dh, t.k.dw, t.k.pad, t.k.act, GC_IMPL_OWN, 0};
        gc_conv2d_geom g;
        gc_conv2d_geometry(t.k.N, t.k.H, t.k.W, t.k.C, t.k.KH, t.k.KW, t.k.F, &p, &g);
        const size_t es = gc_dtype_size(t.dt);
        const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F);
        const size_t ny = (size_t)(g.N * g.OH * g.OW * g.F);
        dbuf gx, gw, gy;
        gx.alloc(nx * es); gw.alloc(nw * es); gy.alloc(ny * es);
        int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                sb[1] = {g.F};
        gc_tensor tx = gc_tensor_make(gx.p, t.dt, 4, sx), tw = gc_tensor_make(gw.p, t.dt, 4, sw),
                  ty = gc_tensor_make(gy.p, t.dt, 4, sy), tb = gc_tensor_make(NULL, t.dt, 1, sb);
        const gc_tensor *in[3] = {&tx, &tw, &tb};
        gc_tensor *out[1] = {&ty};
        gc_set_allow_tf32(1);
        force_kernel(K_WGMMA);
        gc_status st = run_op(GC_OP_CONV2D_FWD, in, 3, out, 1, &p);
        force_kernel(K_AUTO);
        (void)cudaGetLastError();
        g_checks++;
        const int ok = st == GC_ERR_UNSUPPORTED && cudaDeviceSynchronize() == cudaSuccess;
        if (!ok) g_fail++;
        printf("  %-4s wgmma refuses %-20s: %s\n", ok ? "ok" : "FAIL", t.why, st ? gc_last_error() : "ran");
        gx.release(); gw.release(); gy.release();
    }
}

static void run_wgmma_tests(void)
{
    /* does this device / binary have the kernel at all? */
    gc_conv2d_params p = {1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, GC_IMPL_OWN, 0};
    gc_conv2d_geom g;
    gc_conv2d_geometry(2, 56, 56, 64, 3, 3, 64, &p, &g);
    if (gc_conv2d_wgmma_check(&g_be, &g, GC_F16) != GC_OK) {
        printf("wgmma forward: skipped: %s\n", gc_last_error());
        return;
    }
    const int n = (int)(sizeof g_wg_cases / sizeof g_wg_cases[0]);
    printf("wgmma forward (forced): %d cases x f16, bf16; vs float64 reference, vs mma.sync, "
           "3-stage ring, graph\n", n);
    const gc_dtype dts[2] = {GC_F16, GC_BF16};
    for (int variant = 1; variant <= 2; variant++)
        for (gc_dtype dt : dts) {
            double worst[4] = {0, 0, 0, 0};
            int before = g_fail;
            for (int i = 0; i < n; i++) test_wgmma_case(i, g_wg_cases[i], dt, worst, variant);
            printf("  %s %-4s worst rel err: vs float64 %.2e, vs mma.sync %.2e (tol 1e-02)%s\n",
                   variant == 2 ? "halo  " : "im2col", gc_dtype_name(dt), worst[0], worst[1],
                   g_fail > before ? "  FAILURES" : "");
            if (variant == 2)
                printf("  halo-bwd %-4s worst rel err: vs float64 %.2e, vs mma.sync %.2e (tol 1e-02)\n",
                       gc_dtype_name(dt), worst[2], worst[3]);
            fflush(stdout);
        }
    test_wgmma_refusals();
}

static void run_wgrad_tests(void);
static int g_quick; /* 'quick' mode: own kernels in f16 / tf32 only (for compute-sanitizer) */

static void run_tests(void)
{
    const int ncase = (int)(sizeof g_cases / sizeof g_cases[0]);
    const int ncfg = (int)(sizeof g_configs / sizeof g_configs[0]);
    printf("correctness: %d cases x %d configs, float64 reference, NaN-poisoned outputs\n", ncase, ncfg);
    printf("  %-11s %10s %10s %10s %10s\n", "config", "fwd", "bwd_data", "bwd_filter", "db");
    for (int c = 0; c < ncfg; c++) {
        if (g_configs[c].impl == GC_IMPL_VENDOR && !gc_conv2d_vendor_available()) continue;
        if (g_quick && (g_configs[c].impl == GC_IMPL_VENDOR || !strstr("f16 tf32 f16-tc tf32-tc bf16 f16-s4 tf32-s6 bf16-s5 f16-nosplit tf32-nosplt f16-gemm tf32-gemm", g_configs[c].name)))
            continue;
        double worst[4] = {0, 0, 0, 0};
        int before = g_fail;
        for (int i = 0; i < ncase; i++) test_case(i, g_cases[i], g_configs[c], worst);
        printf("  %-11s %10.2e %10.2e %10.2e %10.2e  worst rel err (tol %.0e)%s\n", g_configs[c].name,
               worst[0], worst[1], worst[2], worst[3], g_configs[c].tol, g_fail > before ? "  FAILURES" : "");
    }
    if (g_quick) return;
    run_wgmma_tests();
    run_wgrad_tests();
    test_graph(GC_F16, 1);
    test_graph(GC_F32, 1);
    test_graph(GC_F32, 0);
    /* invalid calls come back as status values */
    {
        gc_conv2d_params p = {1, 1, 1, 1, GC_PAD_VALID, GC_ACT_SOFTMAX, GC_IMPL_OWN, 0};
        int64_t sx[4] = {1, 4, 4, 8}, sw[4] = {3, 3, 8, 8}, sy[4] = {1, 2, 2, 8};
        gc_tensor tx = gc_tensor_make((void *)16, GC_F16, 4, sx), tw = gc_tensor_make((void *)16, GC_F16, 4, sw);
        gc_tensor ty = gc_tensor_make((void *)16, GC_F16, 4, sy), tb = gc_tensor_make(NULL, GC_F16, 1, sy);
        const gc_tensor *in[3] = {&tx, &tw, &tb};
        gc_tensor *out[1] = {&ty};
        gc_status st = run_op(GC_OP_CONV2D_FWD, in, 3, out, 1, &p);
        g_checks++;
        if (st != GC_ERR_INVALID_ARG) g_fail++;
        printf("  %-4s softmax epilogue rejected: %s\n", st == GC_ERR_INVALID_ARG ? "ok" : "FAIL", gc_last_error());
    }
}

/* ------------------------------------------------------------------ benchmark */
struct layer {
    const char *name;
    int N, H, W, C, K, F;
    gc_padding pad;
};

static const layer g_layers[] = {
    {"seed1 28x28x1->32", 128, 28, 28, 1, 3, 32, GC_PAD_VALID},
    {"seed2 13x13x32->64", 128, 13, 13, 32, 3, 64, GC_PAD_VALID},
    {"seed3 5x5x64->64", 128, 5, 5, 64, 3, 64, GC_PAD_VALID},
    {"56x56x64->64 same", 64, 56, 56, 64, 3, 64, GC_PAD_SAME},
};

#define NSETS 4
#ifndef IG_KB_BUILD
#define IG_KB_BUILD 64
#endif

template <typename T> __global__ void rand_kernel(T *p, int64_t n, uint64_t seed, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        p[i] = gc_from_f<T>((gc_uniform01_dev(seed, (uint64_t)i) * 2.0f - 1.0f) * scale);
}

static void dev_rand(dbuf &b, gc_dtype dt, size_t n, float scale)
{
    uint64_t seed = g_rng += 0x9E3779B97F4A7C15ull;
    GC_CUDA_DISPATCH_FLOAT(dt, T, rand_kernel<T><<<1024, 256>>>((T *)b.p, (int64_t)n, seed, scale));
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
}

/* Median milliseconds per call of fn(i) (i rotates the input sets): `reps` calls are
 * captured into one CUDA graph (after eager warm-up calls have sized the workspace and
 * cached cuDNN's algorithm choice) and the graph is replayed between two events, so
 * host launch overhead stays out, as in a plan step; eager loop if capture fails. */
static int g_graphed_all = 1;
template <typename Fn> static double time_ms(Fn fn, int runs)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < 3; i++) fn(i);
    CK(cudaStreamSynchronize(g_stream));
    CK(cudaEventRecord(a, g_stream));
    fn(0);
    CK(cudaEventRecord(b, g_stream));
    CK(cudaEventSynchronize(b));
    float one = 0;
    CK(cudaEventElapsedTime(&one, a, b));
    int reps = (int)(0.5 / std::max(one, 0.001f));
    reps = std::max(2, std::min(reps, 100));
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    if (cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess) {
        for (int i = 0; i < reps; i++) fn(i);
        if (cudaStreamEndCapture(g_stream, &graph) != cudaSuccess || !graph ||
            cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess)
            exec = NULL;
    }
    (void)cudaGetLastError();
    gc_clear_error();
    if (!exec) g_graphed_all = 0;
    std::vector<double> t;
    for (int r = 0; r < runs + 1; r++) {
        CK(cudaEventRecord(a, g_stream));
        if (exec) CK(cudaGraphLaunch(exec, g_stream));
        else
            for (int i = 0; i < reps; i++) fn(i);
        CK(cudaEventRecord(b, g_stream));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        if (r > 0) t.push_back(ms / reps); /* the first replay is a warm-up */
    }
    if (exec) cudaGraphExecDestroy(exec);
    if (graph) cudaGraphDestroy(graph);
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

/* pipeline depth sweep of the Tensor Core kernels on one layer (stage counts that fit) */
static int g_sweep_only;
template <typename F1, typename F2, typename F3>
static void sweep_stages(gc_dtype dt, double flops, F1 &fwd, F2 &bwdd, F3 &bwdf)
{
    const char *dn = dt == GC_F32 ? "tf32" : (dt == GC_F16 ? "f16" : "bf16");
    printf("  stage sweep (IG_KB=%d) %s:", IG_KB_BUILD, dn);
    force_kernel(K_MMA); /* the mma.sync kernel (auto takes wgmma for this layer on Hopper) */
    for (int st = 3; st <= 6; st++) {
        if ((size_t)st * (128 + 64) * (IG_KB_BUILD + 16) > g_optin) break;
        force(GC_VP_CUDA_CONV2D_MMA_STAGES, st);
        double vf = time_ms(fwd, 10), vd = time_ms(bwdd, 10);
        printf("  ig%d fwd %.0f bwdD %.0f TF;", st, flops / vf / 1e9, flops / vd / 1e9);
    }
    force_none();
    for (int st = 3; st <= 6; st++) {
        force(GC_VP_CUDA_CONV2D_WGRAD_MMA_STAGES, st);
        double vb = time_ms(bwdf, 10);
        printf("  wg%d %.0f TF;", st, flops / vb / 1e9);
    }
    force_none();
    printf("\n");
    fflush(stdout);
}

/* The forward of the 3x3 64->64 56x56 batch-64 'same' layer (no bias, linear) through
 * each path: wgmma (forced, then its ring depths), mma.sync (forced), what
 * the automatic choice runs, and cuDNN; f16 and bf16. The last lines are the summary. */
static void run_wgmma_bench(void)
{
    const layer &L = g_layers[3];
    gc_conv2d_params p0 = {1, 1, 1, 1, L.pad, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_conv2d_geom g;
    gc_conv2d_geometry(L.N, L.H, L.W, L.C, L.K, L.K, L.F, &p0, &g);
    const double flops = 2.0 * g.N * g.OH * g.OW * g.F * g.KH * g.KW * g.C;
    printf("\nforward paths, %s batch %d (median of 15 graph replays, %d input sets):\n", L.name, L.N, NSETS);
    char summary[2][384];
    const gc_dtype dts[2] = {GC_F16, GC_BF16};
    for (int di = 0; di < 2; di++) {
        const gc_dtype dt = dts[di];
        const char *dn = gc_dtype_name(dt);
        gc_set_allow_tf32(1);
        const size_t es = gc_dtype_size(dt);
        const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F),
                     ny = (size_t)(g.N * g.OH * g.OW * g.F);
        dbuf x[NSETS], y[NSETS], w;
        for (int s = 0; s < NSETS; s++) {
            x[s].alloc(nx * es); dev_rand(x[s], dt, nx, 1);
            y[s].alloc(ny * es);
        }
        w.alloc(nw * es); dev_rand(w, dt, nw, 0.1f);
        int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                sb[1] = {g.F};
        gc_tensor tw = gc_tensor_make(w.p, dt, 4, sw), tnb = gc_tensor_make(NULL, dt, 1, sb);
        gc_conv2d_params p = p0;
        gc_status err = GC_OK;
        auto fwd = [&](int i) {
            int s = i % NSETS;
            gc_tensor tx = gc_tensor_make(x[s].p, dt, 4, sx), ty = gc_tensor_make(y[s].p, dt, 4, sy);
            const gc_tensor *in[3] = {&tx, &tw, &tnb};
            gc_tensor *out[1] = {&ty};
            gc_status st = run_op(GC_OP_CONV2D_FWD, in, 3, out, 1, &p);
            if (st && !err) err = st;
        };
        auto timed = [&](int path, gc_impl impl, int stages, int variant, double *tf) -> int {
            err = GC_OK;
            p.impl = impl;
            force_kernel(path);
            force(GC_VP_CUDA_CONV2D_WGMMA_STAGES, stages);
            force(GC_VP_CUDA_CONV2D_FWD_WGMMA,
                  variant == 2 ? GC_V_FWDWG_HALO : variant == 1 ? GC_V_FWDWG_IM2COL : GC_V_FWDWG_AUTO);
            double t = 1;
            if (getenv("NCU1")) { fwd(0); CK(cudaStreamSynchronize(g_stream)); } /* one launch each, for ncu */
            else t = time_ms(fwd, 15);
            force_none();
            p.impl = GC_IMPL_OWN;
            if (err) {
                printf("  %-5s path %d impl %d: error: %s\n", dn, path, (int)impl, gc_last_error());
                gc_clear_error();
                return 0;
            }
            *tf = flops / t / 1e9;
            char label[48];
            if (impl == GC_IMPL_VENDOR) snprintf(label, sizeof label, "cuDNN");
            else if (path == K_WGMMA && stages)
                snprintf(label, sizeof label, "%s, <= %d stages", variant == 2 ? "halo" : "im2col", stages);
            else if (path == K_WGMMA) snprintf(label, sizeof label, "%s", variant == 2 ? "wgmma halo" : "wgmma im2col");
            else if (path == K_MMA) snprintf(label, sizeof label, "mma.sync");
            else snprintf(label, sizeof label, "auto");
            printf("  %-5s %-22s %8.1f us %7.1f TFLOP/s\n", dn, label, t * 1e3, *tf);
            fflush(stdout);
            return 1;
        };
        double twg = 0, twt = 0, tmma = 0, tauto = 0, tcd = 0;
        timed(K_WGMMA, GC_IMPL_OWN, 0, 1, &twg);
        timed(K_WGMMA, GC_IMPL_OWN, 0, 2, &twt);
        timed(K_MMA, GC_IMPL_OWN, 0, 0, &tmma);
        timed(K_AUTO, GC_IMPL_OWN, 0, 0, &tauto);
        fwd(0);
        CK(cudaStreamSynchronize(g_stream));
        const char *auto_path = last_name(GC_VP_CUDA_CONV2D_FWD);
        if (gc_conv2d_vendor_available()) timed(K_AUTO, GC_IMPL_VENDOR, 0, 0, &tcd);
        for (int st = 3; st <= 8 && twg > 0; st += 5) {
            double t = 0;
            timed(K_WGMMA, GC_IMPL_OWN, st, 1, &t);
        }
        for (int st = 2; st <= 4 && twt > 0; st++) {
            double t = 0;
            timed(K_WGMMA, GC_IMPL_OWN, st, 2, &t);
        }
        const double best = twt > twg ? twt : twg;
        /* the data gradient of the same layer: halo (forced wgmma), mma.sync (forced mma), cuDNN */
        double bwd[3] = {0, 0, 0};
        {
            dbuf dy, dx;
            dy.alloc(ny * es); dev_rand(dy, dt, ny, 1);
            dx.alloc(nx * es);
            gc_tensor tdy = gc_tensor_make(dy.p, dt, 4, sy), tdx = gc_tensor_make(dx.p, dt, 4, sx);
            const gc_tensor *din[2] = {&tdy, &tw};
            gc_tensor *dout[1] = {&tdx};
            const int kernels[3] = {K_WGMMA, K_MMA, K_AUTO};
            const char *names[3] = {"bwd_data halo", "bwd_data mma.sync", "bwd_data cuDNN"};
            for (int k = 0; k < 3; k++) {
                p.impl = k == 2 ? GC_IMPL_VENDOR : GC_IMPL_OWN;
                if (k == 2 && !gc_conv2d_vendor_available()) continue;
                force_kernel(kernels[k]);
                gc_status st = GC_OK;
                double t = time_ms([&](int) { gc_status e = run_op(GC_OP_CONV2D_BWD_DATA, din, 2, dout, 1, &p);
                                              if (e && !st) st = e; }, 15);
                force_kernel(K_AUTO);
                p.impl = GC_IMPL_OWN;
                if (st) {
                    printf("  %-5s %s: error: %s\n", dn, names[k], gc_last_error());
                    gc_clear_error();
                    continue;
                }
                bwd[k] = flops / t / 1e9;
                printf("  %-5s %-22s %8.1f us %7.1f TFLOP/s\n", dn, names[k], t * 1e3, bwd[k]);
            }
            dy.release(); dx.release();
        }
        snprintf(summary[di], sizeof summary[di],
                 "%-5s fwd TFLOP/s: halo %.1f | im2col %.1f | mma.sync %.1f | auto (%s) %.1f | cuDNN %.1f | "
                 "best/cuDNN %.2f; bwd_data: halo %.1f | mma.sync %.1f | cuDNN %.1f",
                 dn, twt, twg, tmma, auto_path, tauto, tcd, tcd > 0 ? best / tcd : 0.0, bwd[0], bwd[1], bwd[2]);
        for (int s = 0; s < NSETS; s++) { x[s].release(); y[s].release(); }
        w.release();
    }
    printf("summary (%s, target wgmma >= 0.70 x cuDNN):\n", L.name);
    for (int di = 0; di < 2; di++) printf("  %s\n", summary[di]);
    fflush(stdout);
}

static void run_bench(void)
{
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("\nbenchmark (%s): median of 15 runs, each an event-timed CUDA-graph replay of a loop of calls\n"
           "(inputs rotated over %d sets)\n", date, NSETS);
    printf("TFLOP/s = 2*N*OH*OW*F*KH*KW*C / time; fwd+bwd = 3x that / (fwd + bwd_data + bwd_filter)\n");
    printf("no bias, linear (pure convolution); bwd_filter includes db\n");
    printf("%-20s %-5s %-6s %9s %9s %9s %9s | %8s %8s %8s %8s\n", "layer", "dtype", "impl", "fwd us", "bwdD us",
           "bwdF us", "fb us", "fwd TF", "bwdD TF", "bwdF TF", "f+b TF");
    const gc_dtype dts[3] = {GC_F16, GC_BF16, GC_F32};
    for (const layer &L : g_layers) {
        if (g_sweep_only && &L != &g_layers[3]) continue;
        gc_conv2d_params p0 = {1, 1, 1, 1, L.pad, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_conv2d_geom g;
        gc_conv2d_geometry(L.N, L.H, L.W, L.C, L.K, L.K, L.F, &p0, &g);
        const double flops = 2.0 * g.N * g.OH * g.OW * g.F * g.KH * g.KW * g.C;
        for (gc_dtype dt : dts) {
            if (g_sweep_only && dt == GC_BF16) continue;
            gc_set_allow_tf32(1);
            const size_t es = gc_dtype_size(dt);
            const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F),
                         ny = (size_t)(g.N * g.OH * g.OW * g.F);
            dbuf x[NSETS], dy[NSETS], y[NSETS], dx[NSETS], w, dw, db;
            for (int s = 0; s < NSETS; s++) {
                x[s].alloc(nx * es); dev_rand(x[s], dt, nx, 1);
                dy[s].alloc(ny * es); dev_rand(dy[s], dt, ny, 1);
                y[s].alloc(ny * es); dx[s].alloc(nx * es);
            }
            w.alloc(nw * es); dev_rand(w, dt, nw, 0.1f);
            dw.alloc(nw * es); db.alloc(g.F * es);
            int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F},
                    sy[4] = {g.N, g.OH, g.OW, g.F}, sb[1] = {g.F};
            for (int impl = 0; impl < 2; impl++) {
                if (impl == 1 && (g_sweep_only || !gc_conv2d_vendor_available())) continue;
                gc_conv2d_params p = p0;
                p.impl = (gc_impl)impl;
                gc_tensor tw = gc_tensor_make(w.p, dt, 4, sw), tdw = gc_tensor_make(dw.p, dt, 4, sw);
                gc_tensor tnb = gc_tensor_make(NULL, dt, 1, sb), tdb = gc_tensor_make(db.p, dt, 1, sb);
                gc_status err = GC_OK;
                auto fwd = [&](int i) {
                    int s = i % NSETS;
                    gc_tensor tx = gc_tensor_make(x[s].p, dt, 4, sx), ty = gc_tensor_make(y[s].p, dt, 4, sy);
                    const gc_tensor *in[3] = {&tx, &tw, &tnb};
                    gc_tensor *out[1] = {&ty};
                    gc_status st = run_op(GC_OP_CONV2D_FWD, in, 3, out, 1, &p);
                    if (st && !err) err = st;
                };
                auto bwdd = [&](int i) {
                    int s = i % NSETS;
                    gc_tensor tdy = gc_tensor_make(dy[s].p, dt, 4, sy), tdx = gc_tensor_make(dx[s].p, dt, 4, sx);
                    const gc_tensor *in[2] = {&tdy, &tw};
                    gc_tensor *out[1] = {&tdx};
                    gc_status st = run_op(GC_OP_CONV2D_BWD_DATA, in, 2, out, 1, &p);
                    if (st && !err) err = st;
                };
                auto bwdf = [&](int i) {
                    int s = i % NSETS;
                    gc_tensor tx = gc_tensor_make(x[s].p, dt, 4, sx), tdy = gc_tensor_make(dy[s].p, dt, 4, sy);
                    const gc_tensor *in[2] = {&tx, &tdy};
                    gc_tensor *out[2] = {&tdw, &tdb};
                    gc_status st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
                    if (st && !err) err = st;
                };
                double tf = time_ms(fwd, 15), td = time_ms(bwdd, 15), tb = time_ms(bwdf, 15);
                if (err) {
                    printf("%-20s %-5s %-6s error: %s\n", L.name, dt == GC_F32 ? "tf32" : gc_dtype_name(dt),
                           impl ? "cudnn" : "ours", gc_last_error());
                    continue;
                }
                double tt = tf + td + tb;
                printf("%-20s %-5s %-6s %9.1f %9.1f %9.1f %9.1f | %8.1f %8.1f %8.1f %8.1f\n", L.name,
                       dt == GC_F32 ? "tf32" : (dt == GC_F16 ? "f16" : "bf16"), impl ? "cudnn" : "ours",
                       tf * 1e3, td * 1e3, tb * 1e3, tt * 1e3, flops / tf / 1e9, flops / td / 1e9,
                       flops / tb / 1e9, 3 * flops / tt / 1e9);
                fflush(stdout);
                /* after the table row, so that a stage count that fails cannot hide it */
                if (impl == 0 && &L == &g_layers[3]) sweep_stages(dt, flops, fwd, bwdd, bwdf);
            }
            for (int s = 0; s < NSETS; s++) { x[s].release(); dy[s].release(); y[s].release(); dx[s].release(); }
            w.release(); dw.release(); db.release();
        }
    }
    /* exact f32 (SIMT) for scale, on the large layer */
    if (!g_sweep_only) {
        const layer &L = g_layers[3];
        gc_conv2d_params p = {1, 1, 1, 1, L.pad, GC_ACT_LINEAR, GC_IMPL_OWN, 0};
        gc_conv2d_geom g;
        gc_conv2d_geometry(L.N, L.H, L.W, L.C, L.K, L.K, L.F, &p, &g);
        const double flops = 2.0 * g.N * g.OH * g.OW * g.F * g.KH * g.KW * g.C;
        gc_set_allow_tf32(0);
        const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F),
                     ny = (size_t)(g.N * g.OH * g.OW * g.F);
        dbuf x, w, y, dy, dx, dw, db;
        x.alloc(nx * 4); dev_rand(x, GC_F32, nx, 1);
        w.alloc(nw * 4); dev_rand(w, GC_F32, nw, 0.1f);
        dy.alloc(ny * 4); dev_rand(dy, GC_F32, ny, 1);
        y.alloc(ny * 4); dx.alloc(nx * 4); dw.alloc(nw * 4); db.alloc(g.F * 4);
        int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                sb[1] = {g.F};
        gc_tensor tx = gc_tensor_make(x.p, GC_F32, 4, sx), tw = gc_tensor_make(w.p, GC_F32, 4, sw),
                  ty = gc_tensor_make(y.p, GC_F32, 4, sy), tnb = gc_tensor_make(NULL, GC_F32, 1, sb),
                  tdy = gc_tensor_make(dy.p, GC_F32, 4, sy), tdx = gc_tensor_make(dx.p, GC_F32, 4, sx),
                  tdw = gc_tensor_make(dw.p, GC_F32, 4, sw), tdb = gc_tensor_make(db.p, GC_F32, 1, sb);
        for (int impl = 0; impl < 2; impl++) {
            if (impl == 1 && !gc_conv2d_vendor_available()) continue;
            p.impl = (gc_impl)impl;
            const gc_tensor *fin[3] = {&tx, &tw, &tnb}, *din[2] = {&tdy, &tw}, *win[2] = {&tx, &tdy};
            gc_tensor *fout[1] = {&ty}, *dout[1] = {&tdx}, *wout[2] = {&tdw, &tdb};
            double tf = time_ms([&](int) { run_op(GC_OP_CONV2D_FWD, fin, 3, fout, 1, &p); }, 10);
            double td = time_ms([&](int) { run_op(GC_OP_CONV2D_BWD_DATA, din, 2, dout, 1, &p); }, 10);
            double tb = time_ms([&](int) { run_op(GC_OP_CONV2D_BWD_FILTER, win, 2, wout, 2, &p); }, 10);
            double tt = tf + td + tb;
            printf("%-20s %-5s %-6s %9.1f %9.1f %9.1f %9.1f | %8.1f %8.1f %8.1f %8.1f\n", L.name, "f32",
                   impl ? "cudnn" : "ours", tf * 1e3, td * 1e3, tb * 1e3, tt * 1e3, flops / tf / 1e9,
                   flops / td / 1e9, flops / tb / 1e9, 3 * flops / tt / 1e9);
        }
        x.release(); w.release(); y.release(); dy.release(); dx.release(); dw.release(); db.release();
    }
    gc_set_allow_tf32(1);
    if (!g_sweep_only) run_wgmma_bench();
    printf("%s\n", g_graphed_all ? "all timings from graph replays" : "some timings eager (capture failed)");
}

/* 'resnet': ResNet-50's stem and strided / plain 1x1 layers (batch BATCH, default 256),
 * each pass timed separately with the path it took (last_path / last_bwd_path /
 * last_wgrad_path; 7 = gc_cuda_gemm), ours and cuDNN, f16 / bf16 / tf32 (or
 * DTYPE=f16|bf16|tf32); for the stride-1 1x1 layers also ours with the conv kernels
 * only ("conv") and with every pass through gc_cuda_gemm ("gemm"). */
struct rlayer {
    const char *name;
    int H, W, C, F, K, s;
};
static const rlayer g_rlayers[] = {
    {"conv1 7x7/2 3->64", 230, 230, 3, 64, 7, 2},
    {"conv3 1x1/2 256->512", 56, 56, 256, 512, 1, 2},
    {"conv4 1x1/2 512->1024", 28, 28, 512, 1024, 1, 2},
    {"conv5 1x1/2 1024->2048", 14, 14, 1024, 2048, 1, 2},
    {"conv5 1x1/2 1024->512", 14, 14, 1024, 512, 1, 2},
    {"conv2 1x1 64->64", 56, 56, 64, 64, 1, 1},
    {"conv2 1x1 64->256", 56, 56, 64, 256, 1, 1},
    {"conv2 1x1 256->64", 56, 56, 256, 64, 1, 1},
    {"conv3 1x1 128->512", 28, 28, 128, 512, 1, 1},
    {"conv3 1x1 512->128", 28, 28, 512, 128, 1, 1},
    {"conv4 1x1 1024->256", 14, 14, 1024, 256, 1, 1},
    {"conv4 1x1 256->1024", 14, 14, 256, 1024, 1, 1},
    {"conv5 1x1 512->2048", 7, 7, 512, 2048, 1, 1},
    {"conv5 1x1 2048->512", 7, 7, 2048, 512, 1, 1},
};

static void run_resnet_bench(void)
{
    const int N = getenv("BATCH") ? atoi(getenv("BATCH")) : 256;
    const char *only = getenv("DTYPE");
    printf("\nResNet-50 layers, batch %d: ms per pass (median of 10 graph replays, 2 input sets)\n", N);
    printf("%-24s %-5s %-6s %9s %9s %9s %9s | paths f/d/w | %8s\n", "layer", "dtype", "impl", "fwd ms", "bwdD ms",
           "bwdF ms", "sum ms", "f+b TF");
    const gc_dtype dts[3] = {GC_F16, GC_BF16, GC_F32};
    const char *dnames[3] = {"f16", "bf16", "tf32"};
    for (const rlayer &L : g_rlayers) {
        gc_conv2d_params p0 = {L.s, L.s, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_conv2d_geom g;
        gc_conv2d_geometry(N, L.H, L.W, L.C, L.K, L.K, L.F, &p0, &g);
        const double flops = 2.0 * g.N * g.OH * g.OW * g.F * g.KH * g.KW * g.C;
        for (int di = 0; di < 3; di++) {
            if (only && strcmp(only, dnames[di])) continue;
            const gc_dtype dt = dts[di];
            gc_set_allow_tf32(1);
            const size_t es = gc_dtype_size(dt);
            const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F),
                         ny = (size_t)(g.N * g.OH * g.OW * g.F);
            dbuf x[2], dy[2], y[2], dx[2], w, dw;
            for (int s = 0; s < 2; s++) {
                x[s].alloc(nx * es); dev_rand(x[s], dt, nx, 1);
                dy[s].alloc(ny * es); dev_rand(dy[s], dt, ny, 1);
                y[s].alloc(ny * es); dx[s].alloc(nx * es);
            }
            w.alloc(nw * es); dev_rand(w, dt, nw, 0.1f);
            dw.alloc(nw * es);
            int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                    sb[1] = {g.F};
            /* variants: 0 ours (auto), 1 cuDNN, 2 ours with the conv kernels only (no GEMM
             * route), 3 ours with every pass forced through gc_cuda_gemm (stride-1 1x1) */
            const int plain1x1 = L.K == 1 && L.s == 1;
            for (int var = 0; var < 4; var++) {
                const int impl = var == 1;
                if (impl == 1 && !gc_conv2d_vendor_available()) continue;
                if (var >= 2 && !plain1x1) continue;
                force_route(var == 2 ? 2 : var == 3 ? 1 : 0);
                gc_conv2d_params p = p0;
                p.impl = (gc_impl)impl;
                gc_tensor tw = gc_tensor_make(w.p, dt, 4, sw), tdw = gc_tensor_make(dw.p, dt, 4, sw);
                gc_tensor tnb = gc_tensor_make(NULL, dt, 1, sb); /* no bias, no db */
                gc_status err = GC_OK;
                auto fwd = [&](int i) {
                    gc_tensor tx = gc_tensor_make(x[i % 2].p, dt, 4, sx), ty = gc_tensor_make(y[i % 2].p, dt, 4, sy);
                    const gc_tensor *in[3] = {&tx, &tw, &tnb};
                    gc_tensor *out[1] = {&ty};
                    gc_status st = run_op(GC_OP_CONV2D_FWD, in, 3, out, 1, &p);
                    if (st && !err) err = st;
                };
                auto bwdd = [&](int i) {
                    gc_tensor tdy = gc_tensor_make(dy[i % 2].p, dt, 4, sy), tdx = gc_tensor_make(dx[i % 2].p, dt, 4, sx);
                    const gc_tensor *in[2] = {&tdy, &tw};
                    gc_tensor *out[1] = {&tdx};
                    gc_status st = run_op(GC_OP_CONV2D_BWD_DATA, in, 2, out, 1, &p);
                    if (st && !err) err = st;
                };
                auto bwdf = [&](int i) {
                    gc_tensor tx = gc_tensor_make(x[i % 2].p, dt, 4, sx), tdy = gc_tensor_make(dy[i % 2].p, dt, 4, sy);
                    const gc_tensor *in[2] = {&tx, &tdy};
                    gc_tensor *out[2] = {&tdw, &tnb};
                    gc_status st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
                    if (st && !err) err = st;
                };
                double tf = time_ms(fwd, 10);
                const char *pf = last_name(GC_VP_CUDA_CONV2D_FWD);
                double td = time_ms(bwdd, 10);
                const char *pd = last_name(GC_VP_CUDA_CONV2D_BWD_DATA);
                double tb = time_ms(bwdf, 10);
                const char *pw = last_name(GC_VP_CUDA_CONV2D_WGRAD);
                force_route(0);
                const char *vname = var == 1 ? "cudnn" : var == 2 ? "conv" : var == 3 ? "gemm" : "ours";
                if (err) {
                    printf("%-24s %-5s %-6s error: %s\n", L.name, dnames[di], vname, gc_last_error());
                    gc_clear_error();
                    continue;
                }
                const double tt = tf + td + tb;
                if (impl)
                    printf("%-24s %-5s %-6s %9.3f %9.3f %9.3f %9.3f |             | %8.1f\n", L.name, dnames[di],
                           "cudnn", tf, td, tb, tt, 3 * flops / tt / 1e9);
                else
                    printf("%-24s %-5s %-6s %9.3f %9.3f %9.3f %9.3f | %s / %s / %s | %8.1f\n", L.name, dnames[di],
                           vname, tf, td, tb, tt, pf, pd, pw, 3 * flops / tt / 1e9);
            }
            for (int s = 0; s < 2; s++) { x[s].release(); dy[s].release(); y[s].release(); dx[s].release(); }
            w.release(); dw.release();
        }
    }
    printf("%s\n", g_graphed_all ? "all timings from graph replays" : "some timings eager (capture failed)");
}

/* ------------------------------------------------------------------ Hopper wgmma weight gradient
 * conv2d_wgmma_wgrad.cu forced (cuda.conv2d.wgrad=wgmma): NaN-poisoned dw / db against
 * the float64 reference (sampled rows when the reference is expensive), against the
 * mma.sync kernel on the same inputs (cuda.conv2d.wgrad=mma: no GEMM route), bitwise
 * repeatable, every block variant and split / ring overrides (vs the reference), one
 * graph capture (replay == eager bitwise); refusals come back GC_ERR_UNSUPPORTED. */
static const conv_case g_wgw_cases[] = {
    /* N  H   W    C  KH KW  F  sh sw dh dw  pad           act            bias db */
    {4, 20, 20, 64, 1, 1, 256, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1},  /* 1x1 64->256 */
    {3, 15, 17, 256, 1, 1, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},   /* 1x1 256->64, P = 765 */
    {4, 28, 28, 128, 1, 1, 256, 2, 2, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1}, /* 1x1/2 */
    {2, 16, 16, 64, 1, 1, 128, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 0},   /* 1x1/2 'same' */
    {3, 20, 20, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},    /* 3x3 64->64 */
    {2, 17, 23, 128, 3, 3, 128, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1}, /* 3x3 valid */
    {2, 14, 14, 128, 3, 3, 192, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},  /* 3 dy boxes */
    {2, 12, 13, 72, 3, 3, 40, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},    /* C, F not multiples of 64 */
    {3, 9, 9, 24, 1, 1, 200, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1},    /* 1x1 ragged C, F */
    {1, 6, 5, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},      /* one K-block */
    {2, 11, 9, 64, 2, 2, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},     /* even kernel: pad after only */
    {8, 56, 56, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1},    /* ResNet conv2 3x3, batch 8 */
    {16, 14, 14, 256, 3, 3, 256, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1}, /* ResNet conv4 3x3, batch 16 */
    {16, 28, 28, 512, 1, 1, 256, 2, 2, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1},/* ResNet conv4 1x1/2 */
};

/* dw reference rows: all of them when cheap, else every 7th row of dw (KC rows) */
static double wgw_ref_err(const gc_conv2d_geom &g, const std::vector<float> &x, const std::vector<float> &dy,
                          const std::vector<float> &out_w, const std::vector<float> &out_b, int with_db,
                          double *err_b)
{
    std::vector<double> rw, rb;
    ref_bwd_filter(g, x.data(), dy.data(), rw, rb);
    *err_b = with_db ? rel_err(out_b, rb) : 0.0;
    return rel_err(out_w, rw);
}

static void test_wgrad_case(int ci, const conv_case &k, gc_dtype dt, double *worst)
{
    const char *dn = gc_dtype_name(dt);
    gc_conv2d_params p = {k.sh, k.sw, k.dh, k.dw, k.pad, GC_ACT_LINEAR, GC_IMPL_OWN, 0};
    gc_conv2d_geom g;
    if (gc_conv2d_geometry(k.N, k.H, k.W, k.C, k.KH, k.KW, k.F, &p, &g) != GC_OK) {
        printf("  FAIL wgrad case %d: geometry: %s\n", ci, gc_last_error());
        g_fail++;
        return;
    }
    gc_set_allow_tf32(1);
    const size_t es = gc_dtype_size(dt);
    const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F);
    const size_t ny = (size_t)(g.N * g.OH * g.OW * g.F), nb = (size_t)g.F;
    std::vector<uint8_t> bx, bdy;
    std::vector<float> x = rand_tensor(nx, dt, bx, 1.0f), dy = rand_tensor(ny, dt, bdy, 1.0f);
    dbuf gx, gdy, dwa, dba, dwb, dbb;
    gx.alloc(nx * es); gx.up(bx);
    gdy.alloc(ny * es); gdy.up(bdy);
    dwa.alloc(nw * es); dba.alloc(nb * es); dwb.alloc(nw * es); dbb.alloc(nb * es);
    int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F};
    int64_t sb[1] = {g.F};
    gc_tensor tx = gc_tensor_make(gx.p, dt, 4, sx), tdy = gc_tensor_make(gdy.p, dt, 4, sy);
    const gc_tensor *in[2] = {&tx, &tdy};
    char what[128];
    snprintf(what, sizeof what, "%dx%dx%dx%d k%dx%d F%d s%d %s", k.N, k.H, k.W, k.C, k.KH, k.KW, k.F, k.sh,
             k.pad == GC_PAD_SAME ? "same" : "valid");
    /* mode: 1 wgmma forced, 2 the mma.sync kernel (GEMM route off) */
    auto run = [&](dbuf &dw, dbuf &db, int mode, int variant, int splits, int stages) -> gc_status {
        gc_tensor tdw = gc_tensor_make(dw.p, dt, 4, sw), tdb = gc_tensor_make(k.db ? db.p : NULL, dt, 1, sb);
        gc_tensor *out[2] = {&tdw, &tdb};
        dw.poison();
        db.poison();
        force(GC_VP_CUDA_CONV2D_WGRAD, mode == 1 ? GC_V_WGRAD_WGMMA : mode == 2 ? GC_V_WGRAD_MMA : GC_V_WGRAD_AUTO);
        force(GC_VP_CUDA_CONV2D_WGRAD_WGMMA, variant); /* 1..16 = ds1..xa4, the kernel's numbering */
        force(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_SPLITS, splits);
        force(GC_VP_CUDA_CONV2D_WGRAD_WGMMA_STAGES, stages);
        gc_status st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
        force_none();
        if (st == GC_OK) CK(cudaDeviceSynchronize());
        return st;
    };
    char plan[128];
    gc_conv2d_wgrad_wgmma_describe(&g_be, &g, plan, sizeof plan);
    gc_status st = run(dwa, dba, 1, 0, 0, 0);
    if (st) {
        printf("  FAIL wgrad case %2d %-4s %s: %s: %s\n", ci, dn, what, gc_status_name(st), gc_last_error());
        g_fail++;
        goto out;
    }
    {
        const std::vector<uint8_t> ha = dwa.down(), hba = dba.down();
        const std::vector<float> ow = to_float(ha, nw, dt), ob = to_float(hba, nb, dt);
        double eb = 0;
        const double ew = wgw_ref_err(g, x, dy, ow, ob, k.db, &eb);
        char buf[256];
        snprintf(buf, sizeof buf, "%s [%s]", what, plan);
        report(dn, ci, "wgrad-ref", ew, 1e-2, buf);
        if (k.db) report(dn, ci, "wgrad-db", eb, 1e-2, buf);
        worst[0] = std::max(worst[0], std::max(ew, eb));
        /* bitwise repeatable */
        if (run(dwb, dbb, 1, 0, 0, 0) == GC_OK) {
            const std::vector<uint8_t> hb = dwb.down(), hbb = dbb.down();
            const int same = !memcmp(ha.data(), hb.data(), nw * es) && (!k.db || !memcmp(hba.data(), hbb.data(), nb * es));
            report(dn, ci, "wgrad-determinism", same ? 0.0 : 1.0, 0.0, what);
        }
        /* the mma.sync kernel on the same inputs */
        if ((st = run(dwb, dbb, 2, 0, 0, 0))) {
            printf("  FAIL wgrad case %2d %-4s %s: mma.sync path: %s\n", ci, dn, what, gc_last_error());
            g_fail++;
        } else {
            const std::vector<float> o2 = to_float(dwb.down(), nw, dt);
            std::vector<double> r2(o2.begin(), o2.end());
            for (float v : o2)
                if (!isfinite(v)) { r2.assign(1, NAN); break; }
            const double e2 = r2.size() == nw ? rel_err(ow, r2) : INFINITY;
            report(dn, ci, "wgrad-vs-mma", e2, 2e-2, what);
            worst[1] = std::max(worst[1], e2);
        }
        /* split / ring overrides: one split, three splits, the shortest ring */
        const int ovr[3][2] = {{1, 0}, {3, 0}, {0, 2}};
        for (int o = 0; o < 3; o++) {
            if ((st = run(dwb, dbb, 1, 0, ovr[o][0], ovr[o][1]))) {
                printf("  FAIL wgrad case %2d %-4s %s: splits %d stages %d: %s\n", ci, dn, what, ovr[o][0], ovr[o][1],
                       gc_last_error());
                g_fail++;
                continue;
            }
            const std::vector<float> o3 = to_float(dwb.down(), nw, dt);
            const double e3 = rel_err(o3, std::vector<double>(ow.begin(), ow.end()));
            char lab[32];
            snprintf(lab, sizeof lab, ovr[o][0] ? "wgrad-split%d" : "wgrad-ring%d", ovr[o][0] ? ovr[o][0] : ovr[o][1]);
            report(dn, ci, lab, e3, 1e-2, what);
        }
        /* every block variant (the cheap cases) */
        if ((double)g.N * g.OH * g.OW * nw <= 2e8) {
            for (int v = 1; v <= 16; v++) {
                if ((st = run(dwb, dbb, 1, v, 0, 0))) {
                    printf("  FAIL wgrad case %2d %-4s %s: variant %d: %s\n", ci, dn, what, v, gc_last_error());
                    g_fail++;
                    continue;
                }
                const std::vector<float> o4 = to_float(dwb.down(), nw, dt);
                const double e4 = rel_err(o4, std::vector<double>(ow.begin(), ow.end()));
                char lab[32];
                const int vv = v - 1;
                snprintf(lab, sizeof lab, "wgrad-var-%c%c%d", (vv >> 3) & 1 ? 'x' : 'd', (vv >> 2) & 1 ? 'a' : 's',
                         (vv & 3) + 1);
                report(dn, ci, lab, e4, 1e-2, what);
                worst[2] = std::max(worst[2], e4);
            }
        }
        /* one graph capture of the forced path, replayed == eager */
        if (ci == 4) {
            gc_tensor tdw = gc_tensor_make(dwb.p, dt, 4, sw), tdb = gc_tensor_make(dbb.p, dt, 1, sb);
            gc_tensor *out[2] = {&tdw, &tdb};
            dwb.poison();
            dbb.poison();
            cudaGraph_t graph = NULL;
            cudaGraphExec_t exec = NULL;
            int ok = 0;
            force(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_WGMMA);
            CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
            st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
            cudaError_t ce = cudaStreamEndCapture(g_stream, &graph);
            force_none();
            if (st == GC_OK && ce == cudaSuccess && cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess) {
                CK(cudaGraphLaunch(exec, g_stream));
                CK(cudaStreamSynchronize(g_stream));
                const std::vector<uint8_t> c = dwb.down(), cb = dbb.down();
                ok = !memcmp(ha.data(), c.data(), nw * es) && (!k.db || !memcmp(hba.data(), cb.data(), nb * es));
            } else {
                printf("  wgrad graph capture failed: %s / %s\n", gc_last_error(), cudaGetErrorString(ce));
                (void)cudaGetLastError();
            }
            if (exec) cudaGraphExecDestroy(exec);
            if (graph) cudaGraphDestroy(graph);
            report(dn, ci, "wgrad-graph", ok ? 0.0 : 1.0, 0.0, what);
        }
        /* the automatic choice takes it for the layers it wants (C, F multiples of 64 and
         * >= 128, enough pixels, a 1x1 layer only up to 64K pixels, not the GEMM route's) */
        const int64_t pix = g.N * g.OH * g.OW;
        if (g.C % 64 == 0 && g.F % 64 == 0 && g.C >= 128 && g.F >= 128 && pix >= 64 * (int64_t)g_sms &&
            !(g.KH == 1 && g.KW == 1 && pix > 65536) &&
            !(g.KH == 1 && g.KW == 1 && g.sh == 1 && g.sw == 1 && g.C >= 128 && g.F >= 128) &&
            run(dwb, dbb, 0, 0, 0, 0) == GC_OK)
            report(dn, ci, "auto->wgrad-wgmma", gc_variant_last(GC_VP_CUDA_CONV2D_WGRAD) == GC_V_WGRAD_WGMMA ? 0.0 : 1.0,
                   0.0, what);
    }
out:
    gx.release(); gdy.release(); dwa.release(); dba.release(); dwb.release(); dbb.release();
}

static void test_wgrad_refusals(void)
{
    struct { conv_case k; gc_dtype dt; const char *why; } bad[] = {
        {{2, 8, 8, 64, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1}, GC_F32, "exact float32"},
        {{2, 8, 8, 64, 3, 3, 64, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1}, GC_F16, "3x3 stride 2"},
        {{2, 8, 8, 64, 3, 3, 64, 1, 1, 2, 2, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1}, GC_BF16, "dilation 2"},
        {{2, 8, 8, 20, 3, 3, 64, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0, 1}, GC_F16, "C = 20"},
        {{2, 15, 15, 64, 1, 1, 64, 2, 2, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0, 1}, GC_F16, "1x1/2, odd H"},
    };
    for (auto &t : bad) {
        gc_conv2d_params p = {t.k.sh, t.k.sw, t.k.dh, t.k.dw, t.k.pad, t.k.act, GC_IMPL_OWN, 0};
        gc_conv2d_geom g;
        gc_conv2d_geometry(t.k.N, t.k.H, t.k.W, t.k.C, t.k.KH, t.k.KW, t.k.F, &p, &g);
        const size_t es = gc_dtype_size(t.dt);
        const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F);
        const size_t ny = (size_t)(g.N * g.OH * g.OW * g.F);
        dbuf gx, gdy, gw, gb;
        gx.alloc(nx * es); gdy.alloc(ny * es); gw.alloc(nw * es); gb.alloc(g.F * es);
        int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                sb[1] = {g.F};
        gc_tensor tx = gc_tensor_make(gx.p, t.dt, 4, sx), tdy = gc_tensor_make(gdy.p, t.dt, 4, sy),
                  tdw = gc_tensor_make(gw.p, t.dt, 4, sw), tdb = gc_tensor_make(gb.p, t.dt, 1, sb);
        const gc_tensor *in[2] = {&tx, &tdy};
        gc_tensor *out[2] = {&tdw, &tdb};
        gc_set_allow_tf32(t.dt == GC_F32 ? 0 : 1); /* float32 runs there as TF32 only */
        force(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_WGMMA);
        gc_status st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
        force_none();
        gc_set_allow_tf32(1);
        (void)cudaGetLastError();
        g_checks++;
        const int ok = st == GC_ERR_UNSUPPORTED && cudaDeviceSynchronize() == cudaSuccess;
        if (!ok) g_fail++;
        printf("  %-4s wgrad wgmma refuses %-14s: %s\n", ok ? "ok" : "FAIL", t.why, st ? gc_last_error() : "ran");
        /* and the automatic choice still computes it (another kernel) */
        st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &p);
        g_checks++;
        if (st != GC_OK) g_fail++;
        if (st != GC_OK) printf("  FAIL wgrad auto fallback for %s: %s\n", t.why, gc_last_error());
        gx.release(); gdy.release(); gw.release(); gb.release();
    }
}

static void run_wgrad_tests(void)
{
    if (g_cc != 90) {
        printf("wgrad wgmma: skipped: compute capability %d.%d, not 9.0\n", g_cc / 10, g_cc % 10);
        return;
    }
    const int n = (int)(sizeof g_wgw_cases / sizeof g_wgw_cases[0]);
    printf("wgrad wgmma (forced): %d cases x f16, bf16; vs float64, vs mma.sync, determinism, variants, "
           "splits, ring, graph\n", n);
    const gc_dtype dts[2] = {GC_F16, GC_BF16};
    for (gc_dtype dt : dts) {
        double worst[3] = {0, 0, 0};
        const int before = g_fail;
        for (int i = 0; i < n; i++) test_wgrad_case(i, g_wgw_cases[i], dt, worst);
        printf("  wgrad %-4s worst rel err: vs float64 %.2e, vs mma.sync %.2e, variants vs default %.2e%s\n",
               gc_dtype_name(dt), worst[0], worst[1], worst[2], g_fail > before ? "  FAILURES" : "");
    }
    test_wgrad_refusals();
}

/* ResNet-50's weight gradients at batch BATCH (default 256; DTYPE=f16|bf16): the wgmma
 * kernel (forced), mma.sync (conv kernels only), auto (and the path it took), cuDNN. */
static void run_wgrad_bench(void)
{
    const int N = getenv("BATCH") ? atoi(getenv("BATCH")) : 256;
    const char *only = getenv("DTYPE");
    struct wl { const char *name; int H, C, F, K, s, reps; };
    static const wl L[] = {
        {"conv2 1x1 64->64", 56, 64, 64, 1, 1, 1},      {"conv2 1x1 64->256", 56, 64, 256, 1, 1, 4},
        {"conv2 1x1 256->64", 56, 256, 64, 1, 1, 2},    {"conv2 3x3 64->64", 56, 64, 64, 3, 1, 3},
        {"conv3 1x1/2 256->128", 56, 256, 128, 1, 2, 1}, {"conv3 1x1/2 256->512", 56, 256, 512, 1, 2, 1},
        {"conv3 3x3 128->128", 28, 128, 128, 3, 1, 4},  {"conv4 1x1/2 512->256", 28, 512, 256, 1, 2, 1},
        {"conv4 1x1/2 512->1024", 28, 512, 1024, 1, 2, 1}, {"conv4 3x3 256->256", 14, 256, 256, 3, 1, 6},
        {"conv5 1x1/2 1024->512", 14, 1024, 512, 1, 2, 1}, {"conv5 1x1/2 1024->2048", 14, 1024, 2048, 1, 2, 1},
        {"conv5 3x3 512->512", 7, 512, 512, 3, 1, 3},
    };
    printf("\nResNet-50 weight gradients, batch %d (no db): ms per call (median of 10 graph replays)\n", N);
    printf("%-24s %-5s %9s %9s %9s %9s | %7s %7s %7s | auto path, plan\n", "layer", "dtype", "wgmma", "mma.sync",
           "auto", "cuDNN", "wg TF", "mma TF", "auto TF");
    const gc_dtype dts[2] = {GC_F16, GC_BF16};
    double sum[2][4] = {{0}};
    for (gc_dtype dt : dts) {
        const int di = dt == GC_F16 ? 0 : 1;
        if (only && strcmp(only, di ? "bf16" : "f16")) continue;
        for (const wl &l : L) {
            gc_conv2d_params p = {l.s, l.s, 1, 1, l.K == 3 ? GC_PAD_SAME : GC_PAD_VALID, GC_ACT_LINEAR, GC_IMPL_OWN, 0};
            gc_conv2d_geom g;
            gc_conv2d_geometry(N, l.H, l.H, l.C, l.K, l.K, l.F, &p, &g);
            const double flops = 2.0 * g.N * g.OH * g.OW * g.F * g.KH * g.KW * g.C;
            const size_t es = gc_dtype_size(dt);
            const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F),
                         ny = (size_t)(g.N * g.OH * g.OW * g.F);
            dbuf x[2], dy[2], dw;
            for (int s = 0; s < 2; s++) {
                x[s].alloc(nx * es); dev_rand(x[s], dt, nx, 1);
                dy[s].alloc(ny * es); dev_rand(dy[s], dt, ny, 1);
            }
            dw.alloc(nw * es);
            int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                    sb[1] = {g.F};
            gc_tensor tdw = gc_tensor_make(dw.p, dt, 4, sw), tnb = gc_tensor_make(NULL, dt, 1, sb);
            double t[4] = {0, 0, 0, 0};
            const char *auto_path = "none";
            for (int var = 0; var < 4; var++) { /* 0 wgmma, 1 mma.sync, 2 auto, 3 cuDNN */
                if (var == 3 && !gc_conv2d_vendor_available()) continue;
                gc_conv2d_params pp = p;
                pp.impl = var == 3 ? GC_IMPL_VENDOR : GC_IMPL_OWN;
                gc_status err = GC_OK;
                auto bwdf = [&](int i) {
                    gc_tensor tx = gc_tensor_make(x[i % 2].p, dt, 4, sx), tdy = gc_tensor_make(dy[i % 2].p, dt, 4, sy);
                    const gc_tensor *in[2] = {&tx, &tdy};
                    gc_tensor *out[2] = {&tdw, &tnb};
                    gc_status st = run_op(GC_OP_CONV2D_BWD_FILTER, in, 2, out, 2, &pp);
                    if (st && !err) err = st;
                };
                force(GC_VP_CUDA_CONV2D_WGRAD, var == 0 ? GC_V_WGRAD_WGMMA : var == 1 ? GC_V_WGRAD_MMA : GC_V_WGRAD_AUTO);
                double ms = 1.0;
                if (getenv("NCU1")) { bwdf(0); CK(cudaStreamSynchronize(g_stream)); } /* one launch each, for ncu */
                else ms = time_ms(bwdf, 10);
                if (var == 2) auto_path = last_name(GC_VP_CUDA_CONV2D_WGRAD);
                force_none();
                if (err) {
                    printf("  %s %s variant %d: error: %s\n", l.name, gc_dtype_name(dt), var, gc_last_error());
                    gc_clear_error();
                    continue;
                }
                t[var] = ms;
            }
            char plan[128];
            gc_conv2d_wgrad_wgmma_describe(&g_be, &g, plan, sizeof plan);
            printf("%-24s %-5s %9.3f %9.3f %9.3f %9.3f | %7.0f %7.0f %7.0f | %s, %s\n", l.name, gc_dtype_name(dt), t[0],
                   t[1], t[2], t[3], t[0] > 0 ? flops / t[0] / 1e9 : 0.0, t[1] > 0 ? flops / t[1] / 1e9 : 0.0,
                   t[2] > 0 ? flops / t[2] / 1e9 : 0.0, auto_path, plan);
            for (int v = 0; v < 4; v++) sum[di][v] += t[v] * l.reps;
            for (int s = 0; s < 2; s++) { x[s].release(); dy[s].release(); }
            dw.release();
        }
        printf("  %-5s per ResNet-50 step (these layers x their counts): wgmma %.2f ms, mma.sync %.2f, auto %.2f, "
               "cuDNN %.2f\n", gc_dtype_name(dt), sum[di][0], sum[di][1], sum[di][2], sum[di][3]);
    }
    printf("%s\n", g_graphed_all ? "all timings from graph replays" : "some timings eager (capture failed)");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0); /* line-buffered: a time-boxed run killed midway keeps its log */
    const char *mode = argc > 1 ? argv[1] : "test";
    g_rng = (uint64_t)time(NULL) * 0x9E3779B97F4A7C15ull + (uint64_t)clock();
    if (getenv("SEED")) g_rng = strtoull(getenv("SEED"), NULL, 10);
    if (!g_rng) g_rng = 1;
    printf("seed %llu\n", (unsigned long long)g_rng);
    init_backend();
    g_quick = !strcmp(mode, "quick");
    if (!strcmp(mode, "test") || !strcmp(mode, "all") || g_quick) {
        run_tests();
        printf("correctness: %d of %d checks passed%s\n", g_checks - g_fail, g_checks,
               g_fail ? "  -- FAILURES" : "");
    }
    if (!strcmp(mode, "wgtest")) {
        run_wgmma_tests();
        printf("correctness: %d of %d checks passed%s\n", g_checks - g_fail, g_checks, g_fail ? "  -- FAILURES" : "");
    }
    if (!strcmp(mode, "wgbench")) {
        run_wgmma_bench();
        printf("%s\n", g_graphed_all ? "all timings from graph replays" : "some timings eager (capture failed)");
    }
    if (!strcmp(mode, "wgradtest")) {
        run_wgrad_tests();
        printf("correctness: %d of %d checks passed%s\n", g_checks - g_fail, g_checks, g_fail ? "  -- FAILURES" : "");
    }
    if (!strcmp(mode, "wgradbench")) run_wgrad_bench();
    if (!strcmp(mode, "resnet")) run_resnet_bench();
    g_sweep_only = !strcmp(mode, "sweep");
    if (!strcmp(mode, "bench") || !strcmp(mode, "all") || g_sweep_only) run_bench();
    if (!strcmp(mode, "one")) { /* one call of each pass on the large layer, f16 (for ncu) */
        const layer &L = g_layers[3];
        gc_conv2d_params p = {1, 1, 1, 1, L.pad, GC_ACT_LINEAR, GC_IMPL_OWN, 0};
        gc_conv2d_geom g;
        gc_conv2d_geometry(L.N, L.H, L.W, L.C, L.K, L.K, L.F, &p, &g);
        const size_t nx = (size_t)(g.N * g.H * g.W * g.C), nw = (size_t)(g.KH * g.KW * g.C * g.F),
                     ny = (size_t)(g.N * g.OH * g.OW * g.F);
        dbuf x, w, y, dy, dx, dw, db;
        x.alloc(nx * 2); dev_rand(x, GC_F16, nx, 1); w.alloc(nw * 2); dev_rand(w, GC_F16, nw, 0.1f);
        dy.alloc(ny * 2); dev_rand(dy, GC_F16, ny, 1);
        y.alloc(ny * 2); dx.alloc(nx * 2); dw.alloc(nw * 2); db.alloc(g.F * 2);
        int64_t sx[4] = {g.N, g.H, g.W, g.C}, sw[4] = {g.KH, g.KW, g.C, g.F}, sy[4] = {g.N, g.OH, g.OW, g.F},
                sb[1] = {g.F};
        gc_tensor tx = gc_tensor_make(x.p, GC_F16, 4, sx), tw = gc_tensor_make(w.p, GC_F16, 4, sw),
                  ty = gc_tensor_make(y.p, GC_F16, 4, sy), tnb = gc_tensor_make(NULL, GC_F16, 1, sb),
                  tdy = gc_tensor_make(dy.p, GC_F16, 4, sy), tdx = gc_tensor_make(dx.p, GC_F16, 4, sx),
                  tdw = gc_tensor_make(dw.p, GC_F16, 4, sw), tdb = gc_tensor_make(db.p, GC_F16, 1, sb);
        const gc_tensor *fin[3] = {&tx, &tw, &tnb}, *din[2] = {&tdy, &tw}, *win[2] = {&tx, &tdy};
        gc_tensor *fout[1] = {&ty}, *dout[1] = {&tdx}, *wout[2] = {&tdw, &tdb};
        if (run_op(GC_OP_CONV2D_FWD, fin, 3, fout, 1, &p) || run_op(GC_OP_CONV2D_BWD_DATA, din, 2, dout, 1, &p) ||
            run_op(GC_OP_CONV2D_BWD_FILTER, win, 2, wout, 2, &p))
            printf("one: %s\n", gc_last_error());
        CK(cudaDeviceSynchronize());
    }
    return g_fail ? 1 : 0;
}
