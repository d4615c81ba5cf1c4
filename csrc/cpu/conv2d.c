/* conv2d.c -- 2-D convolution on the CPU (NHWC, Keras kernel layout (KH, KW, C, F),
 * cross-correlation, strides, dilation, valid / same padding): forward with the fused
 * bias + activation, backward data and backward filter, and their op adapters.
 *
 * Why it is built this way: the kernel (KH, KW, C, F) is already a row-major
 * (KH*KW*C, F) matrix, so every pass is one GEMM on an im2col matrix whose row m is the
 * receptive field of output pixel m = (n, oh, ow):
 *     forward        Y[m, :]  = act(col[m, :] @ W + bias)   (epilogue of gc_cpu_sgemm)
 *     backward data  dcol     = dY @ W^T, then dX = col2im(dcol)
 *     backward filt. dW       = col^T @ dY, db = column sums of dY
 * A 1x1 kernel with stride 1 needs no im2col (X itself is the matrix).
 *
 * The im2col matrix is never built for the whole batch: the work is cut into tiles of
 * whole samples whose col buffer stays around GC_CONV_TILE_BYTES (L2-sized), and each
 * OpenMP thread runs im2col + GEMM on its own tiles (the GEMM runs single-threaded
 * inside the parallel region), so a tile is written and read back by the same core while
 * it is still in its L2, and col2im writes whole samples that no other thread touches.
 * Backward filter keeps one partial dW per thread, summed at the end. When there are
 * fewer samples than threads (or one sample's col matrix is too big for a tile), the
 * tiles are row ranges processed one after the other, with im2col / col2im split across
 * threads and the GEMM parallelising itself.
 *
 * im2col copies runs of KW*C contiguous floats (dilation 1) or C floats; the copies of
 * a few floats (C = 1, the first layer of most CNNs) are done inline rather than through
 * memcpy calls. col2im works per dX image row (each row sums the dcol entries of the
 * taps that read it, as strided runs), so it needs no atomics and any split of the dX
 * rows across threads is race-free.
 *
 * When the GEMM runs its AVX-512 variant (gc_cpu_sgemm_variant() == "avx512"):
 * - im2col (C >= 16) and col2im are the same code compiled for AVX-512 (zmm copies
 *   instead of a memcpy call per run; the col2im adds are elementwise): same results.
 * - Kc <= 12 with F = 16 or 32 (the first layer: 3x3, C = 1) skips the GEMM: forward and
 *   backward filter are direct register-blocked kernels on the tile's col matrix (see
 *   "small-K direct kernels"), bitwise the GEMM's results, and backward filter sums db
 *   in the same pass over dy (per thread, per K block of the tile, then the threads'
 *   partials in thread order, as dW) instead of a separate gc_cpu_bias_grad pass:
 *   deterministic for a given thread count, like dW; the rounding of db differs from
 *   gc_cpu_bias_grad's by float32 summation order only.
 * GPUCMP_CPU_SIMD=fma|generic (and valgrind runs) keep the paths above unchanged.
 */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GC_CONV_HAVE_AVX512 1
#endif

/* Tile sizes; overridable at build time so that the tests can force many small tiles. */
#ifndef GC_CONV_TILE_BYTES /* per-thread im2col tile (scheme "tiles per thread") */
#define GC_CONV_TILE_BYTES (512 << 10)
#endif
#ifndef GC_CONV_SHARED_TILE_BYTES /* shared im2col tile (scheme "row tiles, threads inside") */
#define GC_CONV_SHARED_TILE_BYTES (4 << 20)
#endif
#ifndef GC_CONV_PAR_MIN_FLOPS /* below this many flops one thread is faster than a fork */
#define GC_CONV_PAR_MIN_FLOPS 1.0e6
#endif

static int conv_threads(void)
{
#ifdef _OPENMP
    return omp_in_parallel() ? 1 : omp_get_max_threads();
#else
    return 1;
#endif
}

static int thread_id(void)
{
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

static int team_size(void)
{
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

/* Copies / zeroes of n floats; small n without a libc call (n = 1..16 is the C = 1 and
 * C = 3 case, where a memcpy call per run would cost more than the copy). */
static inline void copy_f(float *restrict d, const float *restrict s, int64_t n)
{
    if (n > 16) {
        memcpy(d, s, (size_t)n * sizeof(float));
        return;
    }
    if (n >= 8) {
        memcpy(d, s, 8 * sizeof(float));
        d += 8; s += 8; n -= 8;
    }
    if (n >= 4) {
        memcpy(d, s, 4 * sizeof(float));
        d += 4; s += 4; n -= 4;
    }
    switch (n) {
    case 4: d[3] = s[3]; /* fallthrough */
    case 3: d[2] = s[2]; /* fallthrough */
    case 2: d[1] = s[1]; /* fallthrough */
    case 1: d[0] = s[0]; /* fallthrough */
    default: break;
    }
}

static inline void zero_f(float *d, int64_t n)
{
    if (n > 16) {
        memset(d, 0, (size_t)n * sizeof(float));
        return;
    }
    if (n >= 8) {
        memset(d, 0, 8 * sizeof(float));
        d += 8; n -= 8;
    }
    if (n >= 4) {
        memset(d, 0, 4 * sizeof(float));
        d += 4; n -= 4;
    }
    switch (n) {
    case 4: d[3] = 0.0f; /* fallthrough */
    case 3: d[2] = 0.0f; /* fallthrough */
    case 2: d[1] = 0.0f; /* fallthrough */
    case 1: d[0] = 0.0f; /* fallthrough */
    default: break;
    }
}

static inline int64_t kc_of(const gc_conv2d_geom *g) { return g->KH * g->KW * g->C; }

static inline int is_pointwise(const gc_conv2d_geom *g)
{
    return g->KH == 1 && g->KW == 1 && g->sh == 1 && g->sw == 1 && g->pad_top == 0 &&
           g->pad_left == 0 && g->OH == g->H && g->OW == g->W;
}

static int use_avx512(void)
{
#ifdef GC_CONV_HAVE_AVX512
    return strcmp(gc_cpu_sgemm_variant(), "avx512") == 0;
#else
    return 0;
#endif
}

#ifdef GC_CONV_HAVE_AVX512
/* copy_f / zero_f in zmm registers, a masked move for the tail: no libc call per run
 * (a 3x3x32 layer copies runs of 96 floats, and a call costs a good part of the copy).
 * Used for C >= 16; for C = 1..3 copy_f's scalar moves are faster. */
__attribute__((target("avx512f"))) static inline void copy_f512(float *restrict d,
                                                              const float *restrict s,
                                                              int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_loadu_ps(s + i));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(d + i, m, _mm512_maskz_loadu_ps(m, s + i));
    }
}

__attribute__((target("avx512f"))) static inline void zero_f512(float *d, int64_t n)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_setzero_ps());
    if (i < n) _mm512_mask_storeu_ps(d + i, (__mmask16)((1u << (n - i)) - 1u), _mm512_setzero_ps());
}
#define IM2COL_COPY(v, d, s, n) ((v) ? copy_f512(d, s, n) : copy_f(d, s, n))
#define IM2COL_ZERO(v, d, n) ((v) ? zero_f512(d, n) : zero_f(d, n))
#else
#define IM2COL_COPY(v, d, s, n) copy_f(d, s, n)
#define IM2COL_ZERO(v, d, n) zero_f(d, n)
#endif

/* im2col of output pixels [m0, m1) into col (row m - m0, KH*KW*C floats each). */
static inline __attribute__((always_inline)) void
im2col_range_impl(const gc_conv2d_geom *g, const float *x, int64_t m0, int64_t m1, float *col,
                  const int v512)
{
    const int64_t H = g->H, W = g->W, C = g->C, KH = g->KH, KW = g->KW, OW = g->OW;
    const int64_t P = g->OH * OW, Kc = KH * KW * C, runlen = KW * C;
    const int contiguous = g->dw == 1;
    int64_t m = m0;
    while (m < m1) {
        int64_t n = m / P, r = m - n * P, oh = r / OW, ow0 = r - oh * OW;
        int64_t ow1 = OW < ow0 + (m1 - m) ? OW : ow0 + (m1 - m);
        const float *xn = x + n * H * W * C;
        float *rowbase = col + (m - m0) * Kc;
        for (int64_t kh = 0; kh < KH; kh++) {
            int64_t ih = oh * g->sh - g->pad_top + kh * g->dh;
            float *dbase = rowbase + kh * runlen;
            if (ih < 0 || ih >= H) {
                for (int64_t ow = ow0; ow < ow1; ow++)
                    IM2COL_ZERO(v512, dbase + (ow - ow0) * Kc, runlen);
                continue;
            }
            const float *xr = xn + ih * W * C;
            for (int64_t ow = ow0; ow < ow1; ow++) {
                float *d = dbase + (ow - ow0) * Kc;
                int64_t iw0 = ow * g->sw - g->pad_left;
                if (contiguous && iw0 >= 0 && iw0 + KW <= W) {
                    IM2COL_COPY(v512, d, xr + iw0 * C, runlen);
                    continue;
                }
                for (int64_t kw = 0; kw < KW; kw++) {
                    int64_t iw = iw0 + kw * g->dw;
                    if (iw >= 0 && iw < W) IM2COL_COPY(v512, d + kw * C, xr + iw * C, C);
                    else IM2COL_ZERO(v512, d + kw * C, C);
                }
            }
        }
        m += ow1 - ow0;
    }
}

static void im2col_range_plain(const gc_conv2d_geom *g, const float *x, int64_t m0,
                               int64_t m1, float *col)
{
    im2col_range_impl(g, x, m0, m1, col, 0);
}

#ifdef GC_CONV_HAVE_AVX512
__attribute__((target("avx512f"))) static void
im2col_range_avx512(const gc_conv2d_geom *g, const float *x, int64_t m0, int64_t m1, float *col)
{
    im2col_range_impl(g, x, m0, m1, col, 1);
}
#endif

static void im2col_range(const gc_conv2d_geom *g, const float *x, int64_t m0, int64_t m1,
                         float *col)
{
#ifdef GC_CONV_HAVE_AVX512
    if (g->C >= 16 && use_avx512()) { /* runs of a few floats: copy_f's are faster */
        im2col_range_avx512(g, x, m0, m1, col);
        return;
    }
#endif
    im2col_range_plain(g, x, m0, m1, col);
}

/* Parallel im2col of [m0, m1) (row slices per thread). */
static void im2col_par(const gc_conv2d_geom *g, const float *x, int64_t m0, int64_t m1,
                       float *col, int nthr)
{
    int64_t rows = m1 - m0, Kc = kc_of(g);
    int use = nthr > 1 && rows * Kc >= 16384;
    int64_t nslice = use ? (int64_t)nthr * 4 : 1;
    if (nslice > rows) nslice = rows;
#pragma omp parallel for schedule(static) num_threads(nthr) if (use)
    for (int64_t s = 0; s < nslice; s++) {
        int64_t a = m0 + rows * s / nslice, b = m0 + rows * (s + 1) / nslice;
        im2col_range(g, x, a, b, col + (a - m0) * Kc);
    }
}

/* dx[n, h, :, :] += every dcol entry of rows [m0, m1) that im2col took from image row h.
 * dcol row m - m0 holds the gradient of the receptive field of output pixel m. For each
 * tap (kh, kw) that reads row h, the output pixels ow that read this row form a range,
 * and they read input columns w = ow*sw + kw*dw - pad_left: a strided run, no tests
 * inside the loop. */
static inline __attribute__((always_inline)) void
col2im_row_impl(const gc_conv2d_geom *g, const float *dcol, int64_t m0, int64_t m1, int64_t n,
                int64_t h, float *dxrow)
{
    const int64_t W = g->W, C = g->C, KH = g->KH, KW = g->KW, OH = g->OH, OW = g->OW;
    const int64_t Kc = KH * KW * C, sw = g->sw;
    for (int64_t kh = 0; kh < KH; kh++) {
        int64_t t = h + g->pad_top - kh * g->dh;
        if (t < 0 || t % g->sh) continue;
        int64_t oh = t / g->sh;
        if (oh >= OH) continue;
        int64_t mrow = (n * OH + oh) * OW;
        int64_t olo = m0 - mrow > 0 ? m0 - mrow : 0, ohi = m1 - mrow < OW ? m1 - mrow : OW;
        if (olo >= ohi) continue;
        for (int64_t kw = 0; kw < KW; kw++) {
            int64_t base = kw * g->dw - g->pad_left; /* w = ow * sw + base */
            if (W - 1 - base < 0) continue;
            int64_t owa = base >= 0 ? 0 : (-base + sw - 1) / sw;
            int64_t owb = (W - 1 - base) / sw + 1;
            if (owa < olo) owa = olo;
            if (owb > ohi) owb = ohi;
            const float *src = dcol + (mrow + owa - m0) * Kc + (kh * KW + kw) * C;
            float *dst = dxrow + (owa * sw + base) * C;
            for (int64_t ow = owa; ow < owb; ow++, src += Kc, dst += sw * C)
                for (int64_t c = 0; c < C; c++) dst[c] += src[c];
        }
    }
}

static void col2im_row_plain(const gc_conv2d_geom *g, const float *dcol, int64_t m0,
                             int64_t m1, int64_t n, int64_t h, float *dxrow)
{
    col2im_row_impl(g, dcol, m0, m1, n, h, dxrow);
}

/* The same code compiled for AVX-512 (the run adds are elementwise, so the results are
 * bitwise those of the plain build); used when the GEMM runs its AVX-512 variant. */
#ifdef GC_CONV_HAVE_AVX512
__attribute__((target("avx512f"))) static void
col2im_row_avx512(const gc_conv2d_geom *g, const float *dcol, int64_t m0, int64_t m1, int64_t n,
                  int64_t h, float *dxrow)
{
    col2im_row_impl(g, dcol, m0, m1, n, h, dxrow);
}
#endif

static inline void col2im_row(int v512, const gc_conv2d_geom *g, const float *dcol, int64_t m0,
                              int64_t m1, int64_t n, int64_t h, float *dxrow)
{
#ifdef GC_CONV_HAVE_AVX512
    if (v512) {
        col2im_row_avx512(g, dcol, m0, m1, n, h, dxrow);
        return;
    }
#else
    (void)v512;
#endif
    col2im_row_plain(g, dcol, m0, m1, n, h, dxrow);
}

/* Rows of dX that dcol rows [m0, m1) reach: samples n_lo..n_hi, and for the partial
 * first / last sample only the image rows its output rows read. */
static void col2im_range_par(const gc_conv2d_geom *g, const float *dcol, int64_t m0,
                             int64_t m1, float *dx, int nthr)
{
    const int64_t H = g->H, OW = g->OW, P = g->OH * OW, WC = g->W * g->C;
    int64_t n_lo = m0 / P, n_hi = (m1 - 1) / P;
    int64_t nq = (n_hi - n_lo + 1) * H;
    int64_t span = (g->KH - 1) * g->dh;
    int use = nthr > 1 && (m1 - m0) * kc_of(g) >= 16384, v512 = use_avx512();
#pragma omp parallel for schedule(static) num_threads(nthr) if (use)
    for (int64_t q = 0; q < nq; q++) {
        int64_t n = n_lo + q / H, h = q % H;
        int64_t a = m0 > n * P ? m0 : n * P;             /* rows of this sample in range */
        int64_t b = m1 < (n + 1) * P ? m1 : (n + 1) * P;
        int64_t oh_a = (a - n * P) / OW, oh_b = (b - 1 - n * P) / OW;
        int64_t h_a = oh_a * g->sh - g->pad_top, h_b = oh_b * g->sh - g->pad_top + span;
        if (h < h_a || h > h_b) continue;
        col2im_row(v512, g, dcol, m0, m1, n, h, dx + (n * H + h) * WC);
    }
}

/* ---------------------------------------------------------------- tiling */
typedef struct {
    int per_thread;     /* 1: tiles of whole samples, one thread each */
    int nthr;           /* threads to use */
    int64_t ntiles;
    int64_t tile_rows;  /* row tiles (per_thread == 0) */
    int64_t buf_floats; /* col floats per buffer */
} conv_tiling;

static void plan_tiles(const gc_conv2d_geom *g, int64_t ops_per_mac, conv_tiling *t)
{
    const int64_t P = g->OH * g->OW, Kc = kc_of(g), M = g->N * P;
    double flops = 2.0 * (double)M * (double)Kc * (double)g->F * (double)ops_per_mac;
    int T = conv_threads();
    if (flops < GC_CONV_PAR_MIN_FLOPS) T = 1;
    int64_t sample_floats = P * Kc, budget = (int64_t)GC_CONV_TILE_BYTES / (int64_t)sizeof(float);
    t->nthr = T;
    if (T > 1 && g->N >= T && sample_floats <= budget) {
        int64_t cap = budget / sample_floats;
        int64_t nt = (g->N + cap - 1) / cap;
        nt = (nt + T - 1) / T * T;
        if (nt > g->N) nt = g->N;
        t->per_thread = 1;
        t->ntiles = nt;
        t->tile_rows = 0;
        t->buf_floats = (g->N + nt - 1) / nt * sample_floats;
    } else {
        int64_t rows = (int64_t)GC_CONV_SHARED_TILE_BYTES / (int64_t)sizeof(float) / Kc;
        if (rows < 1) rows = 1;
        if (rows > M) rows = M;
        t->per_thread = 0;
        t->ntiles = (M + rows - 1) / rows;
        t->tile_rows = rows;
        t->buf_floats = rows * Kc;
    }
}

/* Samples of tile i among nt balanced tiles. */
static inline void tile_samples(int64_t N, int64_t nt, int64_t i, int64_t *n0, int64_t *n1)
{
    *n0 = N * i / nt;
    *n1 = N * (i + 1) / nt;
}

/* First failure inside a parallel region, re-raised on the calling thread (the message
 * of gc_fail lives in the failing thread's storage). */
typedef struct {
    gc_status st;
    char msg[256];
} par_error;

static void par_error_set(par_error *e, gc_status s)
{
    if (s == GC_OK) return;
#pragma omp critical(gc_conv2d_error)
    {
        if (e->st == GC_OK) {
            e->st = s;
            strncpy(e->msg, gc_last_error(), sizeof e->msg - 1);
            e->msg[sizeof e->msg - 1] = '\0';
        }
    }
}

static gc_status par_error_raise(const par_error *e)
{
    if (e->st == GC_OK) return GC_OK;
    return gc_fail(e->st, "%s", e->msg);
}

static gc_status nomem(const char *what, int64_t floats)
{
    return gc_fail(GC_ERR_NOMEM, "%s: cannot allocate %lld bytes of im2col workspace", what,
                   (long long)(floats * (int64_t)sizeof(float)));
}

/* ---------------------------------------------------------------- small-K direct kernels
 * A layer with few inputs per output (Kc = KH*KW*C <= 12: the first layer of a CNN, C = 1)
 * makes a GEMM with a tiny K: forward C[rows, F] (K = Kc) and backward filter
 * dW[Kc, F] (M = Kc, K = rows). Packing costs as much as the arithmetic there, so when
 * the GEMM runs its AVX-512 micro-kernel these two products are done here straight from
 * the col matrix and dy, without packing, with F = 16 or 32 in zmm registers. They
 * perform the micro-kernel's operations in its order (forward: acc = fma over k from
 * 0, then acc * 1 + bias, then the activation; filter: the K blocks of gemm.c, each
 * summed from 0 by fma over its rows and then added to dW), so results are bitwise those
 * of the GEMM path. Other variants (GPUCMP_CPU_SIMD=fma|generic) keep the GEMM. */
#define SMALLK_MAX_KC 12

static int smallk_ok(const gc_conv2d_geom *g)
{
#ifdef GC_CONV_HAVE_AVX512
    return kc_of(g) <= SMALLK_MAX_KC && (g->F == 16 || g->F == 32) &&
           strcmp(gc_cpu_sgemm_variant(), "avx512") == 0;
#else
    (void)g;
    return 0;
#endif
}

#ifdef GC_CONV_HAVE_AVX512
#define CONV_AVX512 __attribute__((target("avx512f")))

/* y[rows, NV*16] = act(col[rows, Kc] @ w[Kc, NV*16] + bias) */
CONV_AVX512 static inline __attribute__((always_inline)) void
smallk_fwd_nv(int64_t rows, int64_t Kc, const float *restrict col, const float *restrict w,
              const float *restrict bias, int relu, float *restrict y, const int NV)
{
    const int64_t F = 16 * NV;
    __m512 b[2];
    for (int v = 0; v < NV; v++) b[v] = bias ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
    const __m512 zero = _mm512_setzero_ps();
    int64_t m = 0;
    for (; m + 4 <= rows; m += 4) {
        __m512 acc[4][2];
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < NV; v++) acc[r][v] = zero;
        const float *a = col + m * Kc;
        for (int64_t k = 0; k < Kc; k++) {
            __m512 wv[2];
            for (int v = 0; v < NV; v++) wv[v] = _mm512_loadu_ps(w + k * F + 16 * v);
            for (int r = 0; r < 4; r++) {
                const __m512 ar = _mm512_set1_ps(a[r * Kc + k]);
                for (int v = 0; v < NV; v++) acc[r][v] = _mm512_fmadd_ps(ar, wv[v], acc[r][v]);
            }
        }
        for (int r = 0; r < 4; r++)
            for (int v = 0; v < NV; v++) {
                __m512 t = _mm512_add_ps(acc[r][v], b[v]);
                if (relu) t = _mm512_max_ps(zero, t);
                _mm512_storeu_ps(y + (m + r) * F + 16 * v, t);
            }
    }
    for (; m < rows; m++) {
        __m512 acc[2];
        for (int v = 0; v < NV; v++) acc[v] = zero;
        for (int64_t k = 0; k < Kc; k++) {
            const __m512 ar = _mm512_set1_ps(col[m * Kc + k]);
            for (int v = 0; v < NV; v++)
                acc[v] = _mm512_fmadd_ps(ar, _mm512_loadu_ps(w + k * F + 16 * v), acc[v]);
        }
        for (int v = 0; v < NV; v++) {
            __m512 t = _mm512_add_ps(acc[v], b[v]);
            if (relu) t = _mm512_max_ps(zero, t);
            _mm512_storeu_ps(y + m * F + 16 * v, t);
        }
    }
}

CONV_AVX512 static void smallk_fwd(int64_t rows, int64_t Kc, int64_t F, const float *col,
                                   const float *w, const float *bias, gc_act act, float *y)
{
    const int relu = act == GC_ACT_RELU;
    if (F == 16) smallk_fwd_nv(rows, Kc, col, w, bias, relu, y, 1);
    else smallk_fwd_nv(rows, Kc, col, w, bias, relu, y, 2);
    if (act != GC_ACT_LINEAR && !relu) /* the GEMM epilogue's activation, row by row */
        for (int64_t m = 0; m < rows; m++) gc_sgemm_kernel_avx512.act(act, y + m * F, F);
}

/* dw[KC, NV*16] (+)= col[rows, KC]^T @ dy[rows, NV*16], in gemm.c's K blocks */
CONV_AVX512 static inline __attribute__((always_inline)) void
smallk_dw_kc(int64_t rows, const float *restrict col, const float *restrict dy,
             float *restrict dw, float *restrict db, int accumulate, const int KC, const int NV)
{
    const int64_t F = 16 * NV;
    const int64_t kcb = rows <= 384 ? rows : (rows + (rows + 255) / 256 - 1) / ((rows + 255) / 256);
    const __m512 zero = _mm512_setzero_ps();
    for (int64_t p0 = 0; p0 < rows; p0 += kcb) {
        const int64_t p1 = p0 + kcb < rows ? p0 + kcb : rows;
        __m512 acc[SMALLK_MAX_KC][2], sb[2];
        for (int i = 0; i < KC; i++)
            for (int v = 0; v < NV; v++) acc[i][v] = zero;
        for (int v = 0; v < NV; v++) sb[v] = zero;
        for (int64_t k = p0; k < p1; k++) {
            __m512 d[2];
            for (int v = 0; v < NV; v++) d[v] = _mm512_loadu_ps(dy + k * F + 16 * v);
            if (db)
                for (int v = 0; v < NV; v++) sb[v] = _mm512_add_ps(sb[v], d[v]);
            for (int i = 0; i < KC; i++) {
                const __m512 a = _mm512_set1_ps(col[k * KC + i]);
                for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(a, d[v], acc[i][v]);
            }
        }
        const int add = accumulate || p0 > 0;
        for (int i = 0; i < KC; i++)
            for (int v = 0; v < NV; v++) {
                __m512 t = _mm512_add_ps(acc[i][v], zero);
                if (add) t = _mm512_add_ps(t, _mm512_loadu_ps(dw + i * F + 16 * v));
                _mm512_storeu_ps(dw + i * F + 16 * v, t);
            }
        if (db)
            for (int v = 0; v < NV; v++) {
                __m512 t = sb[v];
                if (add) t = _mm512_add_ps(_mm512_loadu_ps(db + 16 * v), t);
                _mm512_storeu_ps(db + 16 * v, t);
            }
    }
}

#define SMALLK_DW_CASE(kc)                                                                 \
    case kc:                                                                               \
        if (F == 16) smallk_dw_kc(rows, col, dy, dw, db, accumulate, kc, 1);               \
        else smallk_dw_kc(rows, col, dy, dw, db, accumulate, kc, 2);                       \
        break;

CONV_AVX512 static void smallk_dw(int64_t rows, int64_t Kc, int64_t F, const float *col,
                                  const float *dy, float *dw, float *db, int accumulate)
{
    switch (Kc) {
    SMALLK_DW_CASE(1) SMALLK_DW_CASE(2) SMALLK_DW_CASE(3) SMALLK_DW_CASE(4)
    SMALLK_DW_CASE(5) SMALLK_DW_CASE(6) SMALLK_DW_CASE(7) SMALLK_DW_CASE(8)
    SMALLK_DW_CASE(9) SMALLK_DW_CASE(10) SMALLK_DW_CASE(11) SMALLK_DW_CASE(12)
    default: break;
    }
}
#endif /* GC_CONV_HAVE_AVX512 */

/* ---------------------------------------------------------------- forward */
static gc_status gemm_fwd(int64_t rows, const gc_conv2d_geom *g, const float *col,
                          const float *w, const float *bias, gc_act act, float *y)
{
    gc_sgemm_args a = {0};
    a.M = rows; a.N = g->F; a.K = kc_of(g);
    a.alpha = 1.0f; a.beta = 0.0f;
    a.A = col; a.lda = a.K;
    a.B = w; a.ldb = g->F;
    a.C = y; a.ldc = g->F;
    a.bias = bias; a.act = act;
    return gc_cpu_sgemm(&a);
}

/* One tile's forward product on the calling thread: direct when `direct` (smallk_ok). */
static gc_status tile_fwd(int direct, int64_t rows, const gc_conv2d_geom *g, const float *col,
                          const float *w, const float *bias, gc_act act, float *y)
{
#ifdef GC_CONV_HAVE_AVX512
    if (direct) {
        smallk_fwd(rows, kc_of(g), g->F, col, w, bias, act, y);
        return GC_OK;
    }
#else
    (void)direct;
#endif
    return gemm_fwd(rows, g, col, w, bias, act, y);
}

gc_status gc_cpu_conv2d_fwd(const gc_conv2d_geom *g, const float *x, const float *w,
                            const float *bias, gc_act act, float *y)
{
    if ((unsigned)act >= GC_ACT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "conv2d: unknown activation %d", (int)act);
    if (g->N == 0) return GC_OK;
    const int64_t P = g->OH * g->OW, M = g->N * P, F = g->F;
    gc_act gact = act == GC_ACT_SOFTMAX ? GC_ACT_LINEAR : act; /* softmax after the GEMM */
    gc_status st = GC_OK;

    if (is_pointwise(g)) {
        st = gemm_fwd(M, g, x, w, bias, gact, y);
    } else {
        conv_tiling t;
        plan_tiles(g, 1, &t);
        const int direct = smallk_ok(g);
        int64_t nbuf = t.per_thread ? t.nthr : 1;
        float *buf = (float *)malloc((size_t)(nbuf * t.buf_floats) * sizeof(float));
        if (!buf) return nomem("conv2d_fwd", nbuf * t.buf_floats);
        if (t.per_thread) {
            par_error err = {GC_OK, {0}};
#pragma omp parallel num_threads(t.nthr)
            {
                float *col = buf + (int64_t)thread_id() * t.buf_floats;
#pragma omp for schedule(static)
                for (int64_t i = 0; i < t.ntiles; i++) {
                    int64_t n0, n1;
                    tile_samples(g->N, t.ntiles, i, &n0, &n1);
                    im2col_range(g, x, n0 * P, n1 * P, col);
                    par_error_set(&err, tile_fwd(direct, (n1 - n0) * P, g, col, w, bias, gact,
                                                 y + n0 * P * F));
                }
            }
            st = par_error_raise(&err);
        } else {
            for (int64_t i = 0; i < t.ntiles && st == GC_OK; i++) {
                int64_t m0 = i * t.tile_rows, m1 = m0 + t.tile_rows < M ? m0 + t.tile_rows : M;
                im2col_par(g, x, m0, m1, buf, t.nthr);
                st = tile_fwd(direct && t.nthr == 1, m1 - m0, g, buf, w, bias, gact, y + m0 * F);
            }
        }
        free(buf);
    }
    if (st == GC_OK && act == GC_ACT_SOFTMAX) st = gc_cpu_act_fwd(GC_ACT_SOFTMAX, M, F, y, y);
    return st;
}

/* ---------------------------------------------------------------- backward data */
/* dcol[rows, Kc] = dy[rows, F] @ W^T (+ dcol when accumulate) */
static gc_status gemm_dcol(int64_t rows, const gc_conv2d_geom *g, const float *dy,
                           const float *w, float *dcol, int accumulate)
{
    gc_sgemm_args a = {0};
    a.trans_b = 1;
    a.M = rows; a.N = kc_of(g); a.K = g->F;
    a.alpha = 1.0f; a.beta = accumulate ? 1.0f : 0.0f;
    a.A = dy; a.lda = g->F;
    a.B = w; a.ldb = g->F;
    a.C = dcol; a.ldc = a.N;
    a.act = GC_ACT_LINEAR;
    return gc_cpu_sgemm(&a);
}

/* dx = (or, accumulate: dx +=) the data gradient. col2im adds into dx, so accumulating
 * is the same pass without zeroing dx first. */
gc_status gc_cpu_conv2d_bwd_data(const gc_conv2d_geom *g, const float *dy, const float *w,
                                 float *dx, int accumulate)
{
    if (g->N == 0) return GC_OK;
    const int64_t P = g->OH * g->OW, M = g->N * P, F = g->F;
    const int64_t HWC = g->H * g->W * g->C;
    if (is_pointwise(g)) return gemm_dcol(M, g, dy, w, dx, accumulate); /* dx = dy @ W^T, (M, C) */

    conv_tiling t;
    plan_tiles(g, 1, &t);
    const int v512 = use_avx512();
    int64_t nbuf = t.per_thread ? t.nthr : 1;
    float *buf = (float *)malloc((size_t)(nbuf * t.buf_floats) * sizeof(float));
    if (!buf) return nomem("conv2d_bwd_data", nbuf * t.buf_floats);
    gc_status st = GC_OK;
    if (t.per_thread) {
        par_error err = {GC_OK, {0}};
#pragma omp parallel num_threads(t.nthr)
        {
            float *dcol = buf + (int64_t)thread_id() * t.buf_floats;
#pragma omp for schedule(static)
            for (int64_t i = 0; i < t.ntiles; i++) {
                int64_t n0, n1;
                tile_samples(g->N, t.ntiles, i, &n0, &n1);
                gc_status s = gemm_dcol((n1 - n0) * P, g, dy + n0 * P * F, w, dcol, 0);
                par_error_set(&err, s);
                if (s != GC_OK) continue;
                if (!accumulate) memset(dx + n0 * HWC, 0, (size_t)((n1 - n0) * HWC) * sizeof(float));
                for (int64_t n = n0; n < n1; n++)
                    for (int64_t h = 0; h < g->H; h++)
                        col2im_row(v512, g, dcol, n0 * P, n1 * P, n, h,
                                   dx + (n * g->H + h) * g->W * g->C);
            }
        }
        st = par_error_raise(&err);
    } else {
        int64_t total = g->N * HWC;
        if (!accumulate) {
#pragma omp parallel for schedule(static) num_threads(t.nthr) if (t.nthr > 1 && total >= 65536)
            for (int64_t b = 0; b < (total + 65535) / 65536; b++) {
                int64_t a0 = b * 65536, len = total - a0 < 65536 ? total - a0 : 65536;
                memset(dx + a0, 0, (size_t)len * sizeof(float));
            }
        }
        for (int64_t i = 0; i < t.ntiles && st == GC_OK; i++) {
            int64_t m0 = i * t.tile_rows, m1 = m0 + t.tile_rows < M ? m0 + t.tile_rows : M;
            st = gemm_dcol(m1 - m0, g, dy + m0 * F, w, buf, 0);
            if (st == GC_OK) col2im_range_par(g, buf, m0, m1, dx, t.nthr);
        }
    }
    free(buf);
    return st;
}

/* ---------------------------------------------------------------- backward filter */
/* dw[Kc, F] = col[rows, Kc]^T @ dy[rows, F] (+ dw when accumulate) */
static gc_status gemm_dw(int64_t rows, const gc_conv2d_geom *g, const float *col,
                         const float *dy, float *dw, int accumulate)
{
    gc_sgemm_args a = {0};
    a.trans_a = 1;
    a.M = kc_of(g); a.N = g->F; a.K = rows;
    a.alpha = 1.0f; a.beta = accumulate ? 1.0f : 0.0f;
    a.A = col; a.lda = a.M;
    a.B = dy; a.ldb = g->F;
    a.C = dw; a.ldc = g->F;
    a.act = GC_ACT_LINEAR;
    return gc_cpu_sgemm(&a);
}

/* One tile's filter product on the calling thread: direct when `direct` (smallk_ok). */
static gc_status tile_dw(int direct, int64_t rows, const gc_conv2d_geom *g, const float *col,
                         const float *dy, float *dw, float *db, int accumulate)
{
#ifdef GC_CONV_HAVE_AVX512
    if (direct) {
        smallk_dw(rows, kc_of(g), g->F, col, dy, dw, db, accumulate);
        return GC_OK;
    }
#else
    (void)direct;
    (void)db;
#endif
    return gemm_dw(rows, g, col, dy, dw, accumulate);
}

gc_status gc_cpu_conv2d_bwd_filter(const gc_conv2d_geom *g, const float *x, const float *dy,
                                   float *dw, float *db)
{
    const int64_t P = g->OH * g->OW, M = g->N * P, F = g->F, Kc = kc_of(g);
    if (M == 0) {
        memset(dw, 0, (size_t)(Kc * F) * sizeof(float));
        if (db) memset(db, 0, (size_t)F * sizeof(float));
        return GC_OK;
    }
    gc_status st = GC_OK;
    if (is_pointwise(g)) {
        st = gemm_dw(M, g, x, dy, dw, 0); /* x is the (M, C) col matrix */
    } else {
        conv_tiling t;
        plan_tiles(g, 1, &t);
        const int direct = smallk_ok(g);
        /* per-thread: one col buffer per thread plus a partial dW for threads 1.. */
        int64_t nbuf = t.per_thread ? t.nthr : 1;
        /* the direct kernel sums db with dW (one pass over dy instead of two) */
        const int fuse_db = direct && t.per_thread && db;
        const int64_t pw = Kc * F + (fuse_db ? F : 0); /* floats of one thread's partial */
        int64_t nfl = nbuf * t.buf_floats + (t.per_thread ? (int64_t)(t.nthr - 1) * pw : 0);
        float *buf = (float *)malloc((size_t)nfl * sizeof(float));
        if (!buf) return nomem("conv2d_bwd_filter", nfl);
        if (t.per_thread) {
            float *partials = buf + nbuf * t.buf_floats;
            par_error err = {GC_OK, {0}};
#pragma omp parallel num_threads(t.nthr)
            {
                int tid = thread_id(), nteam = team_size();
                float *col = buf + (int64_t)tid * t.buf_floats;
                float *mine = tid == 0 ? dw : partials + (int64_t)(tid - 1) * pw;
                float *mine_db = !fuse_db ? NULL : tid == 0 ? db : mine + Kc * F;
                int first = 1;
#pragma omp for schedule(static)
                for (int64_t i = 0; i < t.ntiles; i++) {
                    int64_t n0, n1;
                    tile_samples(g->N, t.ntiles, i, &n0, &n1);
                    im2col_range(g, x, n0 * P, n1 * P, col);
                    par_error_set(&err, tile_dw(direct, (n1 - n0) * P, g, col, dy + n0 * P * F,
                                                mine, mine_db, !first));
                    first = 0;
                }
                if (first) {
                    memset(mine, 0, (size_t)(Kc * F) * sizeof(float));
                    if (mine_db) memset(mine_db, 0, (size_t)F * sizeof(float));
                }
#pragma omp barrier
#pragma omp for schedule(static)
                for (int64_t j = 0; j < Kc * F; j++) {
                    float s = dw[j];
                    for (int u = 1; u < nteam; u++) s += partials[(int64_t)(u - 1) * pw + j];
                    dw[j] = s;
                }
                if (fuse_db) {
#pragma omp for schedule(static)
                    for (int64_t j = 0; j < F; j++) {
                        float s = db[j];
                        for (int u = 1; u < nteam; u++)
                            s += partials[(int64_t)(u - 1) * pw + Kc * F + j];
                        db[j] = s;
                    }
                }
            }
            st = par_error_raise(&err);
            if (fuse_db) db = NULL; /* done */
        } else {
            for (int64_t i = 0; i < t.ntiles && st == GC_OK; i++) {
                int64_t m0 = i * t.tile_rows, m1 = m0 + t.tile_rows < M ? m0 + t.tile_rows : M;
                im2col_par(g, x, m0, m1, buf, t.nthr);
                st = tile_dw(direct && t.nthr == 1, m1 - m0, g, buf, dy + m0 * F, dw, NULL, i > 0);
            }
        }
        free(buf);
    }
    if (st == GC_OK && db) st = gc_cpu_bias_grad(M, F, dy, db);
    return st;
}

/* ---------------------------------------------------------------- adapters */
static const float *opt_data(const gc_tensor *t) { return t ? (const float *)t->data : NULL; }

static gc_status geom_from(const char *what, const gc_tensor *xlike, const gc_tensor *wt,
                           const gc_conv2d_params *p, gc_conv2d_geom *g)
{
    if (!p || !xlike || !wt || xlike->ndim != 4 || wt->ndim != 4)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: expected 4-D input and kernel", what);
    if (p->impl != GC_IMPL_OWN)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: the CPU backend has no vendor implementation",
                       what);
    return gc_conv2d_geometry(xlike->shape[0], xlike->shape[1], xlike->shape[2],
                              xlike->shape[3], wt->shape[0], wt->shape[1], wt->shape[3], p, g);
}

gc_status gc_cpu_op_conv2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_conv2d_params *p = (const gc_conv2d_params *)call->params;
    gc_conv2d_geom g;
    gc_status st = geom_from("conv2d_fwd", call->in[0], call->in[1], p, &g);
    if (st) return st;
    if (g.N == 0) return GC_OK;
    if (!call->out[0] || !call->in[0]->data || !call->in[1]->data || !call->out[0]->data)
        return gc_fail(GC_ERR_INVALID_ARG, "conv2d_fwd: missing tensor data");
    return gc_cpu_conv2d_fwd(&g, (const float *)call->in[0]->data,
                             (const float *)call->in[1]->data, opt_data(call->in[2]), p->act,
                             (float *)call->out[0]->data);
}

gc_status gc_cpu_op_conv2d_bwd_data(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_conv2d_params *p = (const gc_conv2d_params *)call->params;
    gc_conv2d_geom g;
    /* the geometry comes from dx's shape (the forward input) and the kernel */
    gc_status st = geom_from("conv2d_bwd_data", call->out[0], call->in[1], p, &g);
    if (st) return st;
    if (g.N == 0) return GC_OK;
    if (!call->in[0] || !call->in[0]->data || !call->in[1]->data || !call->out[0]->data)
        return gc_fail(GC_ERR_INVALID_ARG, "conv2d_bwd_data: missing tensor data");
    return gc_cpu_conv2d_bwd_data(&g, (const float *)call->in[0]->data,
                                  (const float *)call->in[1]->data, (float *)call->out[0]->data, p->accumulate);
}

gc_status gc_cpu_op_conv2d_bwd_filter(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_conv2d_params *p = (const gc_conv2d_params *)call->params;
    gc_conv2d_geom g;
    /* the geometry comes from x's shape and dw's shape (the kernel) */
    gc_status st = geom_from("conv2d_bwd_filter", call->in[0], call->out[0], p, &g);
    if (st) return st;
    if (!call->in[1] || !call->out[0]->data || (g.N > 0 && (!call->in[0]->data || !call->in[1]->data)))
        return gc_fail(GC_ERR_INVALID_ARG, "conv2d_bwd_filter: missing tensor data");
    float *db = call->out[1] ? (float *)call->out[1]->data : NULL;
    return gc_cpu_conv2d_bwd_filter(&g, (const float *)call->in[0]->data,
                                    (const float *)call->in[1]->data,
                                    (float *)call->out[0]->data, db);
}
