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
 */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
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

/* im2col of output pixels [m0, m1) into col (row m - m0, KH*KW*C floats each). */
static void im2col_range(const gc_conv2d_geom *g, const float *x, int64_t m0, int64_t m1,
                         float *col)
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
                for (int64_t ow = ow0; ow < ow1; ow++) zero_f(dbase + (ow - ow0) * Kc, runlen);
                continue;
            }
            const float *xr = xn + ih * W * C;
            for (int64_t ow = ow0; ow < ow1; ow++) {
                float *d = dbase + (ow - ow0) * Kc;
                int64_t iw0 = ow * g->sw - g->pad_left;
                if (contiguous && iw0 >= 0 && iw0 + KW <= W) {
                    copy_f(d, xr + iw0 * C, runlen);
                    continue;
                }
                for (int64_t kw = 0; kw < KW; kw++) {
                    int64_t iw = iw0 + kw * g->dw;
                    if (iw >= 0 && iw < W) copy_f(d + kw * C, xr + iw * C, C);
                    else zero_f(d + kw * C, C);
                }
            }
        }
        m += ow1 - ow0;
    }
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
static void col2im_row(const gc_conv2d_geom *g, const float *dcol, int64_t m0, int64_t m1,
                       int64_t n, int64_t h, float *dxrow)
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

/* Rows of dX that dcol rows [m0, m1) reach: samples n_lo..n_hi, and for the partial
 * first / last sample only the image rows its output rows read. */
static void col2im_range_par(const gc_conv2d_geom *g, const float *dcol, int64_t m0,
                             int64_t m1, float *dx, int nthr)
{
    const int64_t H = g->H, OW = g->OW, P = g->OH * OW, WC = g->W * g->C;
    int64_t n_lo = m0 / P, n_hi = (m1 - 1) / P;
    int64_t nq = (n_hi - n_lo + 1) * H;
    int64_t span = (g->KH - 1) * g->dh;
    int use = nthr > 1 && (m1 - m0) * kc_of(g) >= 16384;
#pragma omp parallel for schedule(static) num_threads(nthr) if (use)
    for (int64_t q = 0; q < nq; q++) {
        int64_t n = n_lo + q / H, h = q % H;
        int64_t a = m0 > n * P ? m0 : n * P;             /* rows of this sample in range */
        int64_t b = m1 < (n + 1) * P ? m1 : (n + 1) * P;
        int64_t oh_a = (a - n * P) / OW, oh_b = (b - 1 - n * P) / OW;
        int64_t h_a = oh_a * g->sh - g->pad_top, h_b = oh_b * g->sh - g->pad_top + span;
        if (h < h_a || h > h_b) continue;
        col2im_row(g, dcol, m0, m1, n, h, dx + (n * H + h) * WC);
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
                    par_error_set(&err, gemm_fwd((n1 - n0) * P, g, col, w, bias, gact,
                                                 y + n0 * P * F));
                }
            }
            st = par_error_raise(&err);
        } else {
            for (int64_t i = 0; i < t.ntiles && st == GC_OK; i++) {
                int64_t m0 = i * t.tile_rows, m1 = m0 + t.tile_rows < M ? m0 + t.tile_rows : M;
                im2col_par(g, x, m0, m1, buf, t.nthr);
                st = gemm_fwd(m1 - m0, g, buf, w, bias, gact, y + m0 * F);
            }
        }
        free(buf);
    }
    if (st == GC_OK && act == GC_ACT_SOFTMAX) st = gc_cpu_act_fwd(GC_ACT_SOFTMAX, M, F, y, y);
    return st;
}

/* ---------------------------------------------------------------- backward data */
/* dcol[rows, Kc] = dy[rows, F] @ W^T */
static gc_status gemm_dcol(int64_t rows, const gc_conv2d_geom *g, const float *dy,
                           const float *w, float *dcol)
{
    gc_sgemm_args a = {0};
    a.trans_b = 1;
    a.M = rows; a.N = kc_of(g); a.K = g->F;
    a.alpha = 1.0f; a.beta = 0.0f;
    a.A = dy; a.lda = g->F;
    a.B = w; a.ldb = g->F;
    a.C = dcol; a.ldc = a.N;
    a.act = GC_ACT_LINEAR;
    return gc_cpu_sgemm(&a);
}

gc_status gc_cpu_conv2d_bwd_data(const gc_conv2d_geom *g, const float *dy, const float *w,
                                 float *dx)
{
    if (g->N == 0) return GC_OK;
    const int64_t P = g->OH * g->OW, M = g->N * P, F = g->F;
    const int64_t HWC = g->H * g->W * g->C;
    if (is_pointwise(g)) return gemm_dcol(M, g, dy, w, dx); /* dx = dy @ W^T, (M, C) */

    conv_tiling t;
    plan_tiles(g, 1, &t);
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
                gc_status s = gemm_dcol((n1 - n0) * P, g, dy + n0 * P * F, w, dcol);
                par_error_set(&err, s);
                if (s != GC_OK) continue;
                memset(dx + n0 * HWC, 0, (size_t)((n1 - n0) * HWC) * sizeof(float));
                for (int64_t n = n0; n < n1; n++)
                    for (int64_t h = 0; h < g->H; h++)
                        col2im_row(g, dcol, n0 * P, n1 * P, n, h, dx + (n * g->H + h) * g->W * g->C);
            }
        }
        st = par_error_raise(&err);
    } else {
        int64_t total = g->N * HWC;
#pragma omp parallel for schedule(static) num_threads(t.nthr) if (t.nthr > 1 && total >= 65536)
        for (int64_t b = 0; b < (total + 65535) / 65536; b++) {
            int64_t a0 = b * 65536, len = total - a0 < 65536 ? total - a0 : 65536;
            memset(dx + a0, 0, (size_t)len * sizeof(float));
        }
        for (int64_t i = 0; i < t.ntiles && st == GC_OK; i++) {
            int64_t m0 = i * t.tile_rows, m1 = m0 + t.tile_rows < M ? m0 + t.tile_rows : M;
            st = gemm_dcol(m1 - m0, g, dy + m0 * F, w, buf);
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
        /* per-thread: one col buffer per thread plus a partial dW for threads 1.. */
        int64_t nbuf = t.per_thread ? t.nthr : 1;
        int64_t nfl = nbuf * t.buf_floats + (t.per_thread ? (int64_t)(t.nthr - 1) * Kc * F : 0);
        float *buf = (float *)malloc((size_t)nfl * sizeof(float));
        if (!buf) return nomem("conv2d_bwd_filter", nfl);
        if (t.per_thread) {
            float *partials = buf + nbuf * t.buf_floats;
            par_error err = {GC_OK, {0}};
#pragma omp parallel num_threads(t.nthr)
            {
                int tid = thread_id(), nteam = team_size();
                float *col = buf + (int64_t)tid * t.buf_floats;
                float *mine = tid == 0 ? dw : partials + (int64_t)(tid - 1) * Kc * F;
                int first = 1;
#pragma omp for schedule(static)
                for (int64_t i = 0; i < t.ntiles; i++) {
                    int64_t n0, n1;
                    tile_samples(g->N, t.ntiles, i, &n0, &n1);
                    im2col_range(g, x, n0 * P, n1 * P, col);
                    par_error_set(&err, gemm_dw((n1 - n0) * P, g, col, dy + n0 * P * F, mine,
                                                !first));
                    first = 0;
                }
                if (first) memset(mine, 0, (size_t)(Kc * F) * sizeof(float));
#pragma omp barrier
#pragma omp for schedule(static)
                for (int64_t j = 0; j < Kc * F; j++) {
                    float s = dw[j];
                    for (int u = 1; u < nteam; u++) s += partials[(int64_t)(u - 1) * Kc * F + j];
                    dw[j] = s;
                }
            }
            st = par_error_raise(&err);
        } else {
            for (int64_t i = 0; i < t.ntiles && st == GC_OK; i++) {
                int64_t m0 = i * t.tile_rows, m1 = m0 + t.tile_rows < M ? m0 + t.tile_rows : M;
                im2col_par(g, x, m0, m1, buf, t.nthr);
                st = gemm_dw(m1 - m0, g, buf, dy + m0 * F, dw, i > 0);
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
                                  (const float *)call->in[1]->data, (float *)call->out[0]->data);
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
