/* pool2d.cu -- max and average pooling on CUDA, NHWC, forward and backward,
 * f32/f16/bf16 storage, float32 compute.
 *
 * Same rules as csrc/cpu/pool2d.c: windows are clipped to the image, so padded cells
 * never win a max and are not counted in an average (TensorFlow's rule); max backward
 * routes dy to the FIRST maximal cell of each window in row-major (kh, kw) order (a
 * scan with strict `>` from the window's first cell, so a NaN there wins, a later NaN
 * never does), and a dx cell inside several windows sums their contributions in (oh, ow)
 * order starting from +0 (the CPU adds into a zeroed dx); with disjoint windows the one
 * contribution is stored as is, as the CPU's single-write path does (so -0 survives).
 * Every kernel is deterministic (no atomics) and writes every element of its output;
 * results are bit-identical to the CPU for f32 and, f16/bf16 being converted to float
 * at the load and rounded once at the store, for those too.
 *
 * Forward: one thread per output element, or, when C and the pointers allow 16-byte
 * accesses, per output pixel and 16 bytes of channels (pool_fwd_vec_kernel: 4 f32 /
 * 8 f16 or bf16 channels per load, the same float compares and sums per channel).
 * Average backward likewise: avgpool_bwd_kernel per element, avgpool_bwd_vec_kernel per
 * input pixel and 16 bytes of channels.
 * 32-bit index math when sizes allow (64-bit division is emulated and costs more than
 * the loads).
 *
 * Max backward, three kernels, chosen in gc_cuda_op_maxpool2d_bwd:
 * - maxpool_bwd_tiled_kernel: disjoint, never clipped windows (stride >= pool, no
 *   leading padding, the last window inside the image: VALID pooling with stride ==
 *   pool, as in the seed CNN). One thread takes one output window (and V consecutive
 *   channels when C and the pointers allow 16-byte accesses), finds its first arg-max
 *   and writes its whole tile of dx: dy at the arg-max, 0 elsewhere. The tiles of the
 *   windows partition the image (window (oh, ow) owns rows [oh*sh, (oh+1)*sh) and
 *   columns [ow*sw, (ow+1)*sw), the last row / column of windows also the uncovered rest
 *   up to H / W), so every dx element is written exactly once.
 * - maxpool_bwd_smem_kernel: everything else that has 32-bit sizes and at most 255
 *   cells per window (overlapping windows such as ResNet's 3x3 / 2 stem pool, padding,
 *   clipping). A block takes a tile of output windows (plus the halo of windows that
 *   also cover its cells) and up to 8 channel vectors. Phase 1: one thread per (window,
 *   channel vector) scans the window once with 16-byte loads and leaves in shared memory
 *   the arg-max's position inside the window per channel (one byte, 255 = passes
 *   nothing: the folded ReLU with max <= 0) and the window's dy. Phase 2: one thread per
 *   dx cell and channel vector walks the <= ceil(PH/sh) * ceil(PW/sw) windows covering
 *   the cell in (oh, ow) order and adds dy where the stored position is the cell's:
 *   the same decision and the same summation order as the CPU, but each arg-max is
 *   computed once per window instead of once per covering cell (the gather before this
 *   re-scanned every window for each of its ~PH*PW cells, one scalar channel at a
 *   time). The dx cells of the tiles partition the image: tile rows [oa*sh - pt,
 *   (oa+TOH)*sh - pt) clipped to [0, H), the last tile down to H; every window covering
 *   such a row is in the tile or its halo of floor((PH-1)/sh) window rows above, so no
 *   cell needs another block's windows (same for columns).
 * - maxpool_bwd_kernel: the plain gather (one thread per dx element re-scanning each
 *   covering window), for 64-bit sizes and huge windows.
 * Avg backward is the plain gather (avgpool_bwd_kernel).
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

/* V channels of one cell as loaded (px<T, V>::raw) and as floats (unpack): a 16-byte word
 * vector for V > 1 (bf16 -> float is exact: the bits shifted into the top half; two 16-bit
 * elements stay in one register until they are used), the element itself for V == 1. */
__device__ __forceinline__ void unpack_word(uint32_t u, float *f, const float *) { f[0] = __uint_as_float(u); }
__device__ __forceinline__ void unpack_word(uint32_t u, float *f, const __nv_bfloat16 *)
{
    f[0] = __uint_as_float(u << 16);
    f[1] = __uint_as_float(u & 0xFFFF0000u);
}
__device__ __forceinline__ void unpack_word(uint32_t u, float *f, const __half *)
{
    f[0] = __half2float(__ushort_as_half((unsigned short)(u & 0xFFFFu)));
    f[1] = __half2float(__ushort_as_half((unsigned short)(u >> 16)));
}
template <typename T, int V> struct px {
    typedef uint4 raw;
    static __device__ __forceinline__ void unpack(const uint4 &w, float *f)
    {
        constexpr int E = 4 / sizeof(T); /* elements per word */
        unpack_word(w.x, f, (const T *)0);
        unpack_word(w.y, f + E, (const T *)0);
        unpack_word(w.z, f + 2 * E, (const T *)0);
        unpack_word(w.w, f + 3 * E, (const T *)0);
    }
};
template <typename T> struct px<T, 1> {
    typedef T raw;
    static __device__ __forceinline__ void unpack(const T &w, float *f) { f[0] = gc_to_f(w); }
};

/* Calls f(h, w, floats of the cell) for the cells of the clipped window [h0, h1) x [w0, w1)
 * in row-major order, the order of the CPU's scans; the cell (h, w) is xp[(h * W + w) * Cv].
 * Up to 4 cells of a row are loaded before the first of them is used, so a 3-wide window
 * costs three memory round trips, not nine. */
template <typename T, int V, typename F>
__device__ __forceinline__ void scan_window(const T *x, int W, int Cv, int h0, int h1, int w0, int w1, F &&f)
{
    typedef typename px<T, V>::raw R;
    const R *xp = (const R *)x;
    for (int h = h0; h < h1; h++) {
        const R *row = xp + h * W * Cv;
        for (int w = w0; w < w1; w += 4) {
            R v[4];
#pragma unroll
            for (int r = 0; r < 4; r++)
                if (w + r < w1) v[r] = row[(w + r) * Cv];
#pragma unroll
            for (int r = 0; r < 4; r++)
                if (w + r < w1) {
                    float c[V];
                    px<T, V>::unpack(v[r], c);
                    f(h, w + r, c);
                }
        }
    }
}

/* pool_fwd_kernel on V channels at a time: thread i owns output pixel (n, oh, ow) and
 * channels [cv*V, cv*V + V) (C % V == 0, x and y 16-byte aligned, 32-bit sizes); per
 * channel the same float operations in the same cell order as pool_fwd_kernel. */
template <typename T, int V, int IS_MAX>
__global__ void __launch_bounds__(256) pool_fwd_vec_kernel(pool_dims d, const T *x, T *y)
{
    typedef gc_pack<T, V> P;
    const int Cv = (int)d.C / V, W = (int)d.W, H = (int)d.H, OW = (int)d.OW, OH = (int)d.OH;
    const int total = (int)d.N * OH * OW * Cv;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cv = i % Cv;
        int q = i / Cv;
        const int ow = q % OW;
        q /= OW;
        const int oh = q % OH, n = q / OH;
        const int hs = oh * d.sh - d.pt, ws = ow * d.sw - d.pl;
        const int h1 = hs + d.PH > H ? H : hs + d.PH, w1 = ws + d.PW > W ? W : ws + d.PW;
        const int h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws;
        const T *xn = x + (n * H * W * Cv + cv) * V; /* channel pack cv of the image */
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++) acc[j] = 0.0f;
        /* max: the first cell, then v > acc ? v : acc over all cells (a NaN first cell stays) */
        scan_window<T, V>(xn, W, Cv, h0, h1, w0, w1, [&](int h, int w, const float *c) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                if (!IS_MAX) acc[j] += c[j];
                else if (h == h0 && w == w0) acc[j] = c[j];
                else acc[j] = c[j] > acc[j] ? c[j] : acc[j];
            }
        });
        if (!IS_MAX) {
            const float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] = __fmul_rn(acc[j], inv);
        }
        P o;
#pragma unroll
        for (int j = 0; j < V; j++) o.v[j] = gc_from_f<T>(acc[j]);
        ((P *)y)[i] = o;
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

/* ---------------------------------------------------------------- maxpool_bwd_smem_kernel
 * The tile of one block (header comment): output windows [oa, oa+TOH) x [owa, owa+TOW)
 * of image n, channel vectors [cv0, cv0+ct); shared memory holds its windows from row
 * oa-hh and column owa-hw on, TWH x TWW of them, each as CT dy packs and CT packs of V
 * arg-max codes (window-local cell (h - hs) * PW + (w - ws) of the unclipped window
 * starting at (hs, ws); 255 = no gradient). All sizes fit in 31 bits (host check). */
#define MPB_THREADS 256
#define MPB_SMEM_MAX 16384 /* bytes of dynamic shared memory per block at most (no opt-in needed):
                            * the 4 blocks per SM that the registers allow (__launch_bounds__
                            * below: <= 64 per thread) take <= 64 KB, within sm_86's 100 KB */
#define MPB_NONE 255

typedef struct {
    int N, H, W, C, OH, OW, PH, PW, sh, sw, pt, pl;
    int Cv;             /* C / V */
    int CT;             /* channel vectors per tile */
    int TOH, TOW;       /* output windows per tile */
    int hh, hw;         /* halo: window rows / columns before the tile that also cover its cells */
    int tiles_h, tiles_w, tiles_c;
    int disjoint, relu; /* as pool_dims */
} mpb_dims;

/* outputs [lo, hi] whose windows cover row (or column) i; empty when lo > hi */
__device__ __forceinline__ void cover32(int i, int pad, int k, int s, int O, int &lo, int &hi)
{
    const int a = i + pad - k + 1; /* o * s >= a */
    lo = a <= 0 ? 0 : (a + s - 1) / s;
    hi = (i + pad) / s;
    if (hi > O - 1) hi = O - 1;
}

template <typename T, int V>
__global__ void __launch_bounds__(MPB_THREADS, 4) maxpool_bwd_smem_kernel(mpb_dims d, const T *x, const T *dy, T *dx)
{
    typedef gc_pack<T, V> P;
    typedef gc_pack<uint8_t, V> K;
    extern __shared__ __align__(16) unsigned char mpb_smem[];
    const int CT = d.CT, TWH = d.TOH + d.hh, TWW = d.TOW + d.hw, nwin = TWH * TWW;
    P *sdy = (P *)mpb_smem;                                   /* [nwin * CT] */
    K *scode = (K *)(mpb_smem + (size_t)nwin * CT * sizeof(P)); /* [nwin * CT], 16-byte aligned */

    int t = blockIdx.x;
    const int tc = t % d.tiles_c;
    t /= d.tiles_c;
    const int tw = t % d.tiles_w;
    t /= d.tiles_w;
    const int th = t % d.tiles_h, n = t / d.tiles_h;
    const int oa = th * d.TOH, owa = tw * d.TOW;  /* the tile's first output row / column */
    const int wr0 = oa - d.hh, wc0 = owa - d.hw;  /* the first window row / column held */
    const int cv0 = tc * CT;
    const int ct = d.Cv - cv0 < CT ? d.Cv - cv0 : CT; /* channel vectors of this tile */
    const P *xn = (const P *)x + n * d.H * d.W * d.Cv + cv0;    /* pack (h, w, cv): xn[(h*W + w)*Cv + cv] */
    const P *dyn = (const P *)dy + n * d.OH * d.OW * d.Cv + cv0;

    /* phase 1: the first arg-max of each window held, per channel (strict >, row-major) */
    for (int it = threadIdx.x; it < nwin * CT; it += MPB_THREADS) {
        const int cv = it % CT, win = it / CT;
        const int oh = wr0 + win / TWW, ow = wc0 + win % TWW;
        if (cv >= ct || oh < 0 || oh >= d.OH || ow < 0 || ow >= d.OW) continue; /* never read */
        const int hs = oh * d.sh - d.pt, ws = ow * d.sw - d.pl;
        const int h0 = hs < 0 ? 0 : hs, w0 = ws < 0 ? 0 : ws;
        const int h1 = hs + d.PH > d.H ? d.H : hs + d.PH, w1 = ws + d.PW > d.W ? d.W : ws + d.PW;
        const P g = dyn[(oh * d.OW + ow) * d.Cv + cv]; /* in flight during the scan */
        float best[V];
        int code[V];
        scan_window<T, V>((const T *)(xn + cv), d.W, d.Cv, h0, h1, w0, w1, [&](int h, int w, const float *c) {
            const int k = (h - hs) * d.PW + (w - ws);
            const bool first = h == h0 && w == w0;
#pragma unroll
            for (int j = 0; j < V; j++)
                if (first || c[j] > best[j]) { /* strict >: the first maximal cell keeps it */
                    best[j] = c[j];
                    code[j] = k;
                }
        });
        K kk;
#pragma unroll
        for (int j = 0; j < V; j++) kk.v[j] = (uint8_t)(d.relu && !(best[j] > 0.0f) ? MPB_NONE : code[j]);
        scode[it] = kk;
        sdy[it] = g;
    }
    __syncthreads();

    /* phase 2: thread (col, cv) takes dx columns wa+col, wa+col+cpp, ... of the tile, every row */
    const int cpp = MPB_THREADS / CT;
    const int cv = threadIdx.x % CT, col = threadIdx.x / CT;
    if (col >= cpp || cv >= ct) return; /* no barrier follows */
    int ha = oa * d.sh - d.pt, wa = owa * d.sw - d.pl;
    int hb = th == d.tiles_h - 1 ? d.H : (oa + d.TOH) * d.sh - d.pt;
    int wb = tw == d.tiles_w - 1 ? d.W : (owa + d.TOW) * d.sw - d.pl;
    ha = ha < 0 ? 0 : ha;
    wa = wa < 0 ? 0 : wa;
    hb = hb < 0 ? 0 : hb;
    wb = wb < 0 ? 0 : wb;
    P *dxn = (P *)dx + n * d.H * d.W * d.Cv + cv0 + cv;
    for (int w = wa + col; w < wb; w += cpp) {
        int ow0, ow1;
        cover32(w, d.pl, d.PW, d.sw, d.OW, ow0, ow1);
        for (int h = ha; h < hb; h++) {
            int oh0, oh1;
            cover32(h, d.pt, d.PH, d.sh, d.OH, oh0, oh1);
            float acc[V];
#pragma unroll
            for (int j = 0; j < V; j++) acc[j] = 0.0f;
            for (int oh = oh0; oh <= oh1; oh++) {
                const int kh = (h - (oh * d.sh - d.pt)) * d.PW, wrow = (oh - wr0) * TWW - wc0;
                for (int ow = ow0; ow <= ow1; ow++) {
                    const int k = kh + w - (ow * d.sw - d.pl), idx = (wrow + ow) * CT + cv;
                    const K kk = scode[idx];
                    bool any = false;
#pragma unroll
                    for (int j = 0; j < V; j++) any |= kk.v[j] == k;
                    if (!any) continue;
                    const P g = sdy[idx];
#pragma unroll
                    for (int j = 0; j < V; j++)
                        if (kk.v[j] == k) {
                            const float v = gc_to_f(g.v[j]);
                            acc[j] = d.disjoint ? v : acc[j] + v; /* the CPU writes, or adds to a zeroed dx */
                        }
                }
            }
            P o;
#pragma unroll
            for (int j = 0; j < V; j++) o.v[j] = gc_from_f<T>(acc[j]);
            dxn[(h * d.W + w) * d.Cv] = o;
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

/* avgpool_bwd_kernel on V channels at a time: thread i owns input cell (n, h, w) and
 * channels [cv*V, cv*V + V) (C % V == 0, dy and dx 16-byte aligned, 32-bit sizes), the
 * window ranges and 1 / count worked out once for the V channels; per channel the same
 * float operations in the same window order as avgpool_bwd_kernel (ResNet-50's global
 * average pool backward spends its time in the scalar kernel's 64-bit index math). */
template <typename T, int V>
__global__ void __launch_bounds__(256) avgpool_bwd_vec_kernel(pool_dims d, const T *dy, T *dx)
{
    typedef gc_pack<T, V> P;
    const int Cv = (int)d.C / V, W = (int)d.W, H = (int)d.H, OW = (int)d.OW, OH = (int)d.OH;
    const int total = (int)d.N * H * W * Cv;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int cv = i % Cv;
        int q = i / Cv;
        const int w = q % W;
        q /= W;
        const int h = q % H, n = q / H;
        /* the outputs whose (unclipped) windows contain row h / column w */
        const int ah = h + d.pt - d.PH + 1, aw = w + d.pl - d.PW + 1;
        const int oh0 = ah <= 0 ? 0 : (ah + d.sh - 1) / d.sh, ow0 = aw <= 0 ? 0 : (aw + d.sw - 1) / d.sw;
        const int oh1 = min((h + d.pt) / d.sh, OH - 1), ow1 = min((w + d.pl) / d.sw, OW - 1);
        const P *dyn = (const P *)dy + (int64_t)n * OH * OW * Cv + cv;
        float acc[V];
#pragma unroll
        for (int j = 0; j < V; j++) acc[j] = 0.0f;
        for (int oh = oh0; oh <= oh1; oh++) {
            const int hs = oh * d.sh - d.pt;
            const int hc = min(hs + d.PH, H) - max(hs, 0);
            for (int ow = ow0; ow <= ow1; ow++) {
                const int ws = ow * d.sw - d.pl;
                const int wc = min(ws + d.PW, W) - max(ws, 0);
                const float inv = 1.0f / (float)(hc * wc);
                const P g = dyn[(oh * OW + ow) * Cv];
#pragma unroll
                for (int j = 0; j < V; j++) {
                    const float v = __fmul_rn(gc_to_f(g.v[j]), inv);
                    acc[j] = d.disjoint ? v : __fadd_rn(acc[j], v); /* as the scalar kernel */
                }
            }
        }
        P o;
#pragma unroll
        for (int j = 0; j < V; j++) o.v[j] = gc_from_f<T>(acc[j]);
        ((P *)dx)[i] = o;
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
    /* 16 bytes of channels per thread when C and both pointers allow it */
    const int V = 16 / (int)gc_dtype_size(call->in[0]->dtype);
    if (small && d.C % V == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)y % 16) == 0) {
        const unsigned gv = grid_for(be, n / V);
#define POOL_FWD_VEC(MX)                                                                                  \
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,                                                       \
                           pool_fwd_vec_kernel<T, 16 / sizeof(T), MX><<<gv, 256, 0, s>>>(d, (const T *)x, (T *)y))
        if (is_max) {
            POOL_FWD_VEC(1);
        } else {
            POOL_FWD_VEC(0);
        }
#undef POOL_FWD_VEC
        return gc_cuda_launch_check(what);
    }
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

/* The tile of maxpool_bwd_smem_kernel for V channels per pack of es-byte elements:
 * 0 when the kernel cannot take the shape (64-bit sizes, more than 255 cells per window,
 * or a halo too large for MPB_SMEM_MAX even with one window and one channel vector). */
static int mpb_plan(const pool_dims &p, int V, int es, mpb_dims *m, size_t *smem, int64_t *blocks)
{
    const int64_t lim = (int64_t)1 << 31;
    if (p.PH * (int64_t)p.PW > 255 || p.N * p.H * p.W * p.C >= lim || p.N * p.OH * p.OW * p.C >= lim)
        return 0;
    mpb_dims d;
    d.N = (int)p.N; d.H = (int)p.H; d.W = (int)p.W; d.C = (int)p.C; d.OH = (int)p.OH; d.OW = (int)p.OW;
    d.PH = p.PH; d.PW = p.PW; d.sh = p.sh; d.sw = p.sw; d.pt = p.pt; d.pl = p.pl;
    d.disjoint = p.disjoint; d.relu = p.relu;
    d.Cv = d.C / V;
    d.hh = (d.PH - 1) / d.sh;
    d.hw = (d.PW - 1) / d.sw;
    /* 8 packs (128 bytes) of channels, or 32 scalar channels, per tile; fewer when a large
     * halo would not fit otherwise */
    for (int CT = d.Cv < (V > 1 ? 8 : 32) ? d.Cv : (V > 1 ? 8 : 32); CT >= 1; CT /= 2) {
        const int64_t per_win = (int64_t)CT * (V * es + V);
        /* dx columns per tile ~ the threads' columns (256 / CT), rows ~ 8 */
        int64_t tow = (MPB_THREADS / CT) / d.sw, toh = 8 / d.sh;
        tow = tow < 1 ? 1 : tow > d.OW ? d.OW : tow;
        toh = toh < 1 ? 1 : toh > d.OH ? d.OH : toh;
        while ((toh + d.hh) * (tow + d.hw) * per_win > MPB_SMEM_MAX && (toh > 1 || tow > 1)) {
            if (toh > 1) toh--;
            else tow--;
        }
        if ((toh + d.hh) * (tow + d.hw) * per_win > MPB_SMEM_MAX) continue;
        /* even tiles: as many as needed, then the smallest size that gives that count */
        int64_t th = (d.OH + toh - 1) / toh, tw = (d.OW + tow - 1) / tow;
        toh = (d.OH + th - 1) / th;
        tow = (d.OW + tw - 1) / tw;
        d.CT = CT;
        d.TOH = (int)toh;
        d.TOW = (int)tow;
        d.tiles_h = (int)((d.OH + toh - 1) / toh);
        d.tiles_w = (int)((d.OW + tow - 1) / tow);
        d.tiles_c = (d.Cv + CT - 1) / CT;
        *m = d;
        *smem = (size_t)((toh + d.hh) * (tow + d.hw) * per_win);
        *blocks = (int64_t)d.N * d.tiles_h * d.tiles_w * d.tiles_c;
        return *blocks < lim;
    }
    return 0;
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
    const int es = (int)gc_dtype_size(call->in[0]->dtype), V = 16 / es;
    const int vec = d.C % V == 0 && ((uintptr_t)x % 16) == 0 && ((uintptr_t)dy % 16) == 0 &&
                    ((uintptr_t)dx % 16) == 0;
    /* disjoint, unclipped windows: one thread per window (maxpool_bwd_tiled_kernel) */
    if (d.disjoint && d.pt == 0 && d.pl == 0 && (d.OH - 1) * d.sh + d.PH <= d.H &&
        (d.OW - 1) * d.sw + d.PW <= d.W && n < (1LL << 30)) {
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
    /* overlapping or clipped windows: arg-max once per window through shared memory */
    mpb_dims m;
    size_t smem;
    int64_t blocks;
    if (mpb_plan(d, vec ? V : 1, es, &m, &smem, &blocks)) {
        if (vec) {
            GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                                   maxpool_bwd_smem_kernel<T, 16 / sizeof(T)><<<(unsigned)blocks, MPB_THREADS, smem, s>>>(
                                       m, (const T *)x, (const T *)dy, (T *)dx));
        } else {
            GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                                   maxpool_bwd_smem_kernel<T, 1><<<(unsigned)blocks, MPB_THREADS, smem, s>>>(
                                       m, (const T *)x, (const T *)dy, (T *)dx));
        }
        return gc_cuda_launch_check("maxpool2d_bwd (shared-memory arg-max)");
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
    const int V = 16 / (int)gc_dtype_size(call->in[0]->dtype);
    const int vec = d.C % V == 0 && (((uintptr_t)dy | (uintptr_t)dx) & 15u) == 0 && n < ((int64_t)1 << 30) &&
                    d.N * d.OH * d.OW * d.C < ((int64_t)1 << 30);
    if (vec) {
        GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                               avgpool_bwd_vec_kernel<T, 16 / sizeof(T)><<<grid_for(be, n / V), 256, 0, s>>>(
                                   d, (const T *)dy, (T *)dx));
        return gc_cuda_launch_check("avgpool2d_bwd (16-byte channel vectors)");
    }
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
                           avgpool_bwd_kernel<T><<<grid_for(be, n), 256, 0, s>>>(d, (const T *)dy, (T *)dx));
    return gc_cuda_launch_check("avgpool2d_bwd");
}
