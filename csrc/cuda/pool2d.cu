/* pool2d.cu -- max and average pooling on CUDA, NHWC, forward and backward,
 * f32/f16/bf16 storage, float32 compute.
 *
 * Same rules as csrc/cpu/pool2d.c: windows are clipped to the image, so padded cells
 * never win a max and are not counted in an average (TensorFlow's rule); max backward
 * routes dy to the FIRST maximal cell of each window in row-major (kh, kw) order.
 * One thread per output element (forward; 32-bit index math when sizes allow) or per
 * input element (backward), channel index fastest so neighbouring threads touch
 * neighbouring addresses. Backward is a
 * gather: each input element visits the windows that contain it (in (oh, ow) order,
 * the CPU's accumulation order) and, for max, recomputes each window's arg-max, so no
 * atomics are needed, every element of dx is written, and results are deterministic
 * (bit-identical to the CPU for f32; with disjoint windows the one contribution is
 * stored as is, as the CPU's single-write path does, so even -0 matches).
 *
 * Max backward fast path (maxpool_bwd_tiled_kernel): when the windows do not overlap
 * and are never clipped (stride >= pool, no leading padding, the last window inside
 * the image: VALID pooling with stride == pool, as in the seed CNN), the gather above
 * re-scans the one window of every cell. Instead one thread takes one output window
 * (and V consecutive channels when C and the pointers allow 16-byte accesses), finds
 * its first arg-max in the same order with the same strict `>`, and writes its whole
 * tile of dx: dy at the arg-max, 0 elsewhere. The tiles of the windows partition the
 * image (window (oh, ow) owns rows [oh*sh, (oh+1)*sh) and columns [ow*sw, (ow+1)*sw),
 * the last row / column of windows also the uncovered rest up to H / W), so every dx
 * element is written exactly once, with the values the general kernel writes (the
 * dy value through float, or +0): bit-identical. 32-bit index math.
 */
#include "common.cuh"

#include <stdio.h>

typedef struct {
    int64_t N, H, W, C, OH, OW;
    int PH, PW, sh, sw, pt, pl;
    int disjoint; /* stride >= pool on both axes: each cell lies in at most one window */
    int relu;     /* maxpool2d_bwd with the ReLU backward folded in: pass dy only where the
                   * window's max (the ReLU output) is > 0 */
} pool_dims;

static pool_dims dims_of(const gc_pool2d_geom *g)
{
    pool_dims d;
    d.N = g->N; d.H = g->H; d.W = g->W; d.C = g->C; d.OH = g->OH; d.OW = g->OW;
    d.PH = (int)g->PH; d.PW = (int)g->PW; d.sh = g->sh; d.sw = g->sw;
    d.pt = g->pad_top; d.pl = g->pad_left;
    d.disjoint = g->sh >= g->PH && g->sw >= g->PW;
    d.relu = 0;
    return d;
}

/* clipped window [h0, h1) x [w0, w1) of output (oh, ow) */
__device__ __forceinline__ void window(const pool_dims &d, int64_t oh, int64_t ow, int64_t &h0,
                                       int64_t &h1, int64_t &w0, int64_t &w1)
{
    int64_t hs = oh * d.sh - d.pt, ws = ow * d.sw - d.pl;
    int64_t he = hs + d.PH, we = ws + d.PW;
    h0 = hs < 0 ? 0 : hs;
    w0 = ws < 0 ? 0 : ws;
    h1 = he > d.H ? d.H : he;
    w1 = we > d.W ? d.W : we;
}

/* outputs whose window (unclipped) contains input row h: [lo, hi] (empty when lo > hi) */
__device__ __forceinline__ void out_range(int64_t h, int pad, int k, int s, int64_t O, int64_t &lo,
                                          int64_t &hi)
{
    int64_t a = h + pad - k + 1; /* oh * s >= a */
    lo = a <= 0 ? 0 : (a + s - 1) / s;
    hi = (h + pad) / s;
    if (hi > O - 1) hi = O - 1;
}

/* I: the index type -- int when every offset fits in 31 bits (the usual case: 64-bit
 * division and modulo are emulated and cost more than the loads), else int64_t */
/* input cell i (NHWC order) as (n, h, w, c), and the outputs [oh0, oh1] x [ow0, ow1]
 * whose windows may contain it (the backward gathers walk those) */
__device__ __forceinline__ void cell_windows(const pool_dims &d, int64_t i, int64_t &n, int64_t &h, int64_t &w,
                                             int64_t &c, int64_t &oh0, int64_t &oh1, int64_t &ow0, int64_t &ow1)
{
    c = i % d.C;
    int64_t q = i / d.C;
    w = q % d.W;
    q /= d.W;
    h = q % d.H;
    n = q / d.H;
    out_range(h, d.pt, d.PH, d.sh, d.OH, oh0, oh1);
    out_range(w, d.pl, d.PW, d.sw, d.OW, ow0, ow1);
}

template <typename T, int IS_MAX, typename I>
__global__ void __launch_bounds__(256) pool_fwd_kernel(pool_dims d, const T *x, T *y)
{
    const I C = (I)d.C, W = (I)d.W, H = (I)d.H, OW = (I)d.OW, OH = (I)d.OH;
    const I total = (I)d.N * OH * OW * C;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        I c = i % C, q = i / C;
        I ow = q % OW;
        q /= OW;
        I oh = q % OH, n = q / OH;
        I hs = oh * d.sh - d.pt, ws = ow * d.sw - d.pl; /* the clipped window, as window() */
        I h1 = hs + d.PH > H ? H : hs + d.PH, w1 = ws + d.PW > W ? W : ws + d.PW;
        I h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws;
        const T *xn = x + n * H * W * C + c;
        float acc;
        if (IS_MAX) {
            acc = gc_to_f(xn[(h0 * W + w0) * C]);
            for (I h = h0; h < h1; h++)
                for (I w = w0; w < w1; w++) {
                    float v = gc_to_f(xn[(h * W + w) * C]);
                    acc = v > acc ? v : acc;
                }
        } else {
            acc = 0.0f;
            for (I h = h0; h < h1; h++)
                for (I w = w0; w < w1; w++) acc += gc_to_f(xn[(h * W + w) * C]);
            acc = __fmul_rn(acc, 1.0f / (float)((h1 - h0) * (w1 - w0)));
        }
        y[i] = gc_from_f<T>(acc);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) maxpool_bwd_kernel(pool_dims d, const T *x, const T *dy, T *dx)
{
    const int64_t total = d.N * d.H * d.W * d.C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n, h, w, c, oh0, oh1, ow0, ow1;
        cell_windows(d, i, n, h, w, c, oh0, oh1, ow0, ow1);
        const T *xn = x + n * d.H * d.W * d.C + c;
        const T *dyn = dy + n * d.OH * d.OW * d.C + c;
        float acc = 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                int64_t h0, h1, w0, w1;
                window(d, oh, ow, h0, h1, w0, w1);
                /* the window's first arg-max, scanned in the CPU's order */
                float best = gc_to_f(xn[(h0 * d.W + w0) * d.C]);
                int64_t bh = h0, bw = w0;
                for (int64_t hh = h0; hh < h1; hh++)
                    for (int64_t ww = w0; ww < w1; ww++) {
                        float v = gc_to_f(xn[(hh * d.W + ww) * d.C]);
                        if (v > best) {
                            best = v;
                            bh = hh;
                            bw = ww;
                        }
                    }
                if (bh == h && bw == w && (!d.relu || best > 0.0f)) {
                    float v = gc_to_f(dyn[(oh * d.OW + ow) * d.C]);
                    acc = d.disjoint ? v : acc + v; /* the CPU writes, or adds to a zeroed dx */
                }
            }
        dx[i] = gc_from_f<T>(acc);
    }
}

/* The fast path above: thread i owns window (n, oh, ow) and channels [c, c + V). */
template <typename T, int V>
__global__ void __launch_bounds__(256) maxpool_bwd_tiled_kernel(pool_dims d, const T *x, const T *dy,
                                                                T *dx)
{
    typedef gc_pack<T, V> P;
    const int C = (int)d.C, H = (int)d.H, W = (int)d.W, OH = (int)d.OH, OW = (int)d.OW;
    const int Cv = C / V, PH = d.PH, PW = d.PW;
    const int total = (int)d.N * OH * OW * Cv;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int c = (i % Cv) * V;
        int q = i / Cv;
        const int ow = q % OW;
        q /= OW;
        const int oh = q % OH, n = q / OH;
        const int h0 = oh * d.sh, w0 = ow * d.sw;
        const int h1 = oh == OH - 1 ? H : h0 + d.sh, w1 = ow == OW - 1 ? W : w0 + d.sw;
        const int img = n * H * W;
        /* first arg-max per channel, row-major over the window, strict > */
        float best[V];
        int bi[V];
        {
            const P v = *(const P *)(x + (size_t)(img + h0 * W + w0) * C + c);
#pragma unroll
            for (int j = 0; j < V; j++) {
                best[j] = gc_to_f(v.v[j]);
                bi[j] = h0 * W + w0;
            }
        }
        for (int h = h0; h < h0 + PH; h++)
            for (int w = w0; w < w0 + PW; w++) {
                const P v = *(const P *)(x + (size_t)(img + h * W + w) * C + c);
#pragma unroll
                for (int j = 0; j < V; j++) {
                    const float f = gc_to_f(v.v[j]);
                    if (f > best[j]) {
                        best[j] = f;
                        bi[j] = h * W + w;
                    }
                }
            }
        const P g = *(const P *)(dy + (size_t)((n * OH + oh) * OW + ow) * C + c);
        for (int h = h0; h < h1; h++)
            for (int w = w0; w < w1; w++) {
                P o;
#pragma unroll
                for (int j = 0; j < V; j++)
                    o.v[j] = gc_from_f<T>(bi[j] == h * W + w && (!d.relu || best[j] > 0.0f) ? gc_to_f(g.v[j])
                                                                                              : 0.0f);
                *(P *)(dx + (size_t)(img + h * W + w) * C + c) = o;
            }
    }
}

template <typename T>
__global__ void __launch_bounds__(256) avgpool_bwd_kernel(pool_dims d, const T *dy, T *dx)
{
    const int64_t total = d.N * d.H * d.W * d.C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t n, h, w, c, oh0, oh1, ow0, ow1;
        cell_windows(d, i, n, h, w, c, oh0, oh1, ow0, ow1);
        const T *dyn = dy + n * d.OH * d.OW * d.C + c;
        float acc = 0.0f;
        for (int64_t oh = oh0; oh <= oh1; oh++)
            for (int64_t ow = ow0; ow <= ow1; ow++) {
                int64_t h0, h1, w0, w1;
                window(d, oh, ow, h0, h1, w0, w1);
                float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
                float v = __fmul_rn(gc_to_f(dyn[(oh * d.OW + ow) * d.C]), inv);
                acc = d.disjoint ? v : __fadd_rn(acc, v); /* the CPU writes, or adds to a zeroed dx */
            }
        dx[i] = gc_from_f<T>(acc);
    }
}

static unsigned grid_for(const gc_backend *be, int64_t n)
{
    int64_t b = (n + 255) / 256;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

static gc_status geom(const char *what, const gc_tensor *xlike, const void *params, gc_pool2d_geom *g)
{
    gc_status st = gc_pool2d_geometry(xlike->shape[0], xlike->shape[1], xlike->shape[2],
                                      xlike->shape[3], (const gc_pool2d_params *)params, g);
    if (st) {
        char why[512];
        snprintf(why, sizeof why, "%s", gc_last_error()); /* gc_fail rewrites that buffer */
        return gc_fail(st, "%s: %s", what, why);
    }
    return GC_OK;
}

static gc_status pool_fwd(const gc_backend *be, const gc_op_call *call, int is_max, const char *what)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    gc_pool2d_geom g;
    if ((st = geom(what, call->in[0], call->params, &g))) return st;
    pool_dims d = dims_of(&g);
    int64_t n = d.N * d.OH * d.OW * d.C;
    if (n == 0) return GC_OK;
    const void *x = call->in[0]->data;
    void *y = call->out[0]->data;
    cudaStream_t s = gc_cuda_stream(be);
    unsigned grid = grid_for(be, n);
    /* 32-bit indices when the input, the output and the grid's stride all fit */
    const int small = d.N * d.H * d.W * d.C < ((int64_t)1 << 30) && n < ((int64_t)1 << 30) &&
                      (int64_t)grid * 256 < ((int64_t)1 << 30);
#define POOL_FWD(MX)                                                                                        \
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,                                                         \
                           if (small) pool_fwd_kernel<T, MX, int><<<grid, 256, 0, s>>>(d, (const T *)x, (T *)y); \
                           else pool_fwd_kernel<T, MX, int64_t><<<grid, 256, 0, s>>>(d, (const T *)x, (T *)y))
    if (is_max) {
        POOL_FWD(1);
    } else {
        POOL_FWD(0);
    }
#undef POOL_FWD
    return gc_cuda_launch_check(what);
}

extern "C" gc_status gc_cuda_op_maxpool2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    return pool_fwd(be, call, 1, "maxpool2d_fwd");
}

extern "C" gc_status gc_cuda_op_avgpool2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    return pool_fwd(be, call, 0, "avgpool2d_fwd");
}

extern "C" gc_status gc_cuda_op_maxpool2d_bwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    gc_pool2d_geom g;
    if ((st = geom("maxpool2d_bwd", call->in[0], call->params, &g))) return st;
    pool_dims d = dims_of(&g);
    d.relu = ((const gc_pool2d_params *)call->params)->act == GC_ACT_RELU;
    int64_t n = d.N * d.H * d.W * d.C;
    if (n == 0) return GC_OK;
    const void *x = call->in[0]->data, *dy = call->in[1]->data;
    void *dx = call->out[0]->data;
    cudaStream_t s = gc_cuda_stream(be);
    /* disjoint, unclipped windows: one thread per window (maxpool_bwd_tiled_kernel) */
    if (d.disjoint && d.pt == 0 && d.pl == 0 && (d.OH - 1) * d.sh + d.PH <= d.H &&
        (d.OW - 1) * d.sw + d.PW <= d.W && n < (1LL << 30)) {
        const int es = (int)gc_dtype_size(call->in[0]->dtype), V = 16 / es;
        const int vec = d.C % V == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)dy % 16) == 0 &&
                        ((uintptr_t)dx % 16) == 0;
        const int64_t windows = d.N * d.OH * d.OW * (vec ? d.C / V : d.C);
        const unsigned grid = grid_for(be, windows);
        if (vec) {
            GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                                   maxpool_bwd_tiled_kernel<T, 16 / sizeof(T)><<<grid, 256, 0, s>>>(
                                       d, (const T *)x, (const T *)dy, (T *)dx));
        } else {
            GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                                   maxpool_bwd_tiled_kernel<T, 1><<<grid, 256, 0, s>>>(
                                       d, (const T *)x, (const T *)dy, (T *)dx));
        }
        return gc_cuda_launch_check("maxpool2d_bwd (disjoint windows)");
    }
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                           maxpool_bwd_kernel<T><<<grid_for(be, n), 256, 0, s>>>(
                               d, (const T *)x, (const T *)dy, (T *)dx));
    return gc_cuda_launch_check("maxpool2d_bwd");
}

extern "C" gc_status gc_cuda_op_avgpool2d_bwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    gc_pool2d_geom g;
    /* the input's shape is dx's shape */
    if ((st = geom("avgpool2d_bwd", call->out[0], call->params, &g))) return st;
    pool_dims d = dims_of(&g);
    int64_t n = d.N * d.H * d.W * d.C;
    if (n == 0) return GC_OK;
    const void *dy = call->in[0]->data;
    void *dx = call->out[0]->data;
    cudaStream_t s = gc_cuda_stream(be);
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                           avgpool_bwd_kernel<T><<<grid_for(be, n), 256, 0, s>>>(d, (const T *)dy, (T *)dx));
    return gc_cuda_launch_check("avgpool2d_bwd");
}
