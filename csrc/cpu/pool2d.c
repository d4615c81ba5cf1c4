/* pool2d.c -- max and average pooling on the CPU, NHWC, strides, valid / same padding,
 * forward and backward, and their op adapters.
 *
 * Why it is built this way: in NHWC the C channels of one pixel are contiguous, so
 * every loop runs over a window's cells with the channel loop innermost (a plain
 * vectorisable loop over C). Window bounds are clipped to the image, which gives
 * TensorFlow's rule for free: padded cells never win a max and are not counted in an
 * average. Max backward recomputes the arg-max of each window (the first maximal cell
 * in row-major (kh, kw) order, as TensorFlow's CPU kernel) and adds dy there, so
 * overlapping windows accumulate; dX is zeroed first so every element is written. When
 * windows cannot overlap (stride >= pool, the usual 2x2 / 2), backward writes each dX
 * cell exactly once instead (the window's first maximal cell takes dy, the others 0).
 * OpenMP splits forward over output rows and backward over samples (one thread writes
 * all of a sample's dX, so accumulation needs no atomics). Max pooling 2x2 / 2 without
 * padding, C a multiple of 16, has AVX-512 versions of both passes (pool2x2_fast),
 * bitwise the results of the loops.
 */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define GC_POOL_HAVE_AVX512 1
#endif

/* below this many window-cell visits one thread is faster than a fork */
#define POOL_PAR_MIN 32768

/* The common 2x2 / 2 max pooling (no padding, C a multiple of 16) has AVX-512 paths
 * when the GEMM runs its AVX-512 variant (so GPUCMP_CPU_SIMD=fma|generic, and valgrind
 * runs, keep the plain loops): the same compares and selects, in the same cell order,
 * on 16 channels at a time -- bitwise the results of the loops. At large batches these
 * passes stream activations from DRAM; the plain loops, vectorised for SSE2 only and
 * going through scratch arrays, were compute-bound well below the memory bandwidth. */
static int pool2x2_fast(const gc_pool2d_geom *g)
{
#ifdef GC_POOL_HAVE_AVX512
    return g->PH == 2 && g->PW == 2 && g->sh == 2 && g->sw == 2 && g->pad_top == 0 &&
           g->pad_left == 0 && 2 * g->OH <= g->H && 2 * g->OW <= g->W && g->C % 16 == 0 &&
           g->C > 0 && strcmp(gc_cpu_sgemm_variant(), "avx512") == 0;
#else
    (void)g;
    return 0;
#endif
}

#ifdef GC_POOL_HAVE_AVX512
#define POOL_AVX512 __attribute__((target("avx512f")))

/* Output row (n, oh) of 2x2 / 2 max pooling: y = x00, then y = x > y ? x : y over
 * x01, x10, x11 (maxpool_row's order and NaN behaviour). */
POOL_AVX512 static void maxpool2x2_row_avx512(const gc_pool2d_geom *g, const float *xn,
                                              int64_t oh, float *yrow)
{
    const int64_t W = g->W, C = g->C;
    const float *r0 = xn + 2 * oh * W * C, *r1 = r0 + W * C;
    for (int64_t ow = 0; ow < g->OW; ow++) {
        const float *a = r0 + 2 * ow * C, *b = r1 + 2 * ow * C;
        float *y = yrow + ow * C;
        for (int64_t c = 0; c < C; c += 16) {
            __m512 m = _mm512_loadu_ps(a + c), v;
            v = _mm512_loadu_ps(a + C + c);
            m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), v);
            v = _mm512_loadu_ps(b + c);
            m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), v);
            v = _mm512_loadu_ps(b + C + c);
            m = _mm512_mask_mov_ps(m, _mm512_cmp_ps_mask(v, m, _CMP_GT_OQ), v);
            _mm512_storeu_ps(y + c, m);
        }
    }
}

/* The windows of one sample, 2x2 / 2 backward (maxpool_bwd_sample_disjoint): the first
 * cell holding the max (strict > in scan order) takes dy, the other three 0. */
POOL_AVX512 static void maxpool2x2_bwd_sample_avx512(const gc_pool2d_geom *g, int relu,
                                                     const float *restrict xn,
                                                     const float *restrict dyn,
                                                     float *restrict dxn)
{
    const int64_t W = g->W, C = g->C;
    for (int64_t oh = 0; oh < g->OH; oh++) {
        const float *x0 = xn + 2 * oh * W * C, *x1 = x0 + W * C;
        float *d0 = dxn + 2 * oh * W * C, *d1 = d0 + W * C;
        const float *dr = dyn + oh * g->OW * C;
        for (int64_t ow = 0; ow < g->OW; ow++) {
            const int64_t o = 2 * ow * C;
            for (int64_t c = 0; c < C; c += 16) {
                __m512 best = _mm512_loadu_ps(x0 + o + c);
                const __m512 v1 = _mm512_loadu_ps(x0 + o + C + c);
                const __mmask16 m1 = _mm512_cmp_ps_mask(v1, best, _CMP_GT_OQ);
                best = _mm512_mask_mov_ps(best, m1, v1);
                const __m512 v2 = _mm512_loadu_ps(x1 + o + c);
                const __mmask16 m2 = _mm512_cmp_ps_mask(v2, best, _CMP_GT_OQ);
                best = _mm512_mask_mov_ps(best, m2, v2);
                const __m512 v3 = _mm512_loadu_ps(x1 + o + C + c);
                const __mmask16 m3 = _mm512_cmp_ps_mask(v3, best, _CMP_GT_OQ);
                best = _mm512_mask_mov_ps(best, m3, v3);
                /* folded ReLU backward: the window's max must be > 0 to pass dy */
                const __mmask16 on = relu ? _mm512_cmp_ps_mask(best, _mm512_setzero_ps(), _CMP_GT_OQ)
                                          : (__mmask16)0xFFFF;
                const __mmask16 s3 = (__mmask16)(m3 & on), s2 = (__mmask16)(m2 & ~m3 & on);
                const __mmask16 s1 = (__mmask16)(m1 & ~(m2 | m3) & on);
                const __mmask16 s0 = (__mmask16)(~(m1 | m2 | m3) & on);
                const __m512 dv = _mm512_loadu_ps(dr + ow * C + c);
                _mm512_storeu_ps(d0 + o + c, _mm512_maskz_mov_ps(s0, dv));
                _mm512_storeu_ps(d0 + o + C + c, _mm512_maskz_mov_ps(s1, dv));
                _mm512_storeu_ps(d1 + o + c, _mm512_maskz_mov_ps(s2, dv));
                _mm512_storeu_ps(d1 + o + C + c, _mm512_maskz_mov_ps(s3, dv));
            }
        }
    }
}
#endif /* GC_POOL_HAVE_AVX512 */

/* Window of output (oh, ow), clipped to the image: [h0, h1) x [w0, w1). */
static inline void window(const gc_pool2d_geom *g, int64_t oh, int64_t ow, int64_t *h0,
                          int64_t *h1, int64_t *w0, int64_t *w1)
{
    int64_t hs = oh * g->sh - g->pad_top, ws = ow * g->sw - g->pad_left;
    int64_t he = hs + g->PH, we = ws + g->PW;
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = he > g->H ? g->H : he;
    *w1 = we > g->W ? g->W : we;
}

static inline int pool_parallel(const gc_pool2d_geom *g)
{
    return g->N * g->OH * g->OW * g->C * g->PH * g->PW >= POOL_PAR_MIN;
}

/* One output row (n, oh) of max pooling. */
static void maxpool_row(const gc_pool2d_geom *g, const float *xn, int64_t oh, float *yrow)
{
    const int64_t W = g->W, C = g->C;
    for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t h0, h1, w0, w1;
        window(g, oh, ow, &h0, &h1, &w0, &w1);
        float *y = yrow + ow * C;
        memcpy(y, xn + (h0 * W + w0) * C, (size_t)C * sizeof(float));
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
                const float *xp = xn + (h * W + w) * C;
                for (int64_t c = 0; c < C; c++) y[c] = xp[c] > y[c] ? xp[c] : y[c];
            }
    }
}

gc_status gc_cpu_maxpool2d_fwd(const gc_pool2d_geom *g, const float *x, float *y)
{
    const int64_t N = g->N, OH = g->OH, HWC = g->H * g->W * g->C, OWC = g->OW * g->C;
#ifdef GC_POOL_HAVE_AVX512
    if (pool2x2_fast(g)) {
#pragma omp parallel for schedule(static) if (pool_parallel(g))
        for (int64_t q = 0; q < N * OH; q++) {
            int64_t n = q / OH, oh = q % OH;
            maxpool2x2_row_avx512(g, x + n * HWC, oh, y + q * OWC);
        }
        return GC_OK;
    }
#endif
#pragma omp parallel for schedule(static) if (pool_parallel(g))
    for (int64_t q = 0; q < N * OH; q++) {
        int64_t n = q / OH, oh = q % OH;
        maxpool_row(g, x + n * HWC, oh, y + q * OWC);
    }
    return GC_OK;
}

/* The first arg-max of window [h0, h1) x [w0, w1) per channel: best[c] its value,
 * idx[c] its window-local cell number in row-major scan order (strictly greater wins,
 * so the first maximal cell keeps the gradient; int32 like the floats, so the select
 * vectorises). Shared by both max-pooling backward paths. */
static inline void window_argmax(const gc_pool2d_geom *g, const float *restrict xn, int64_t h0,
                                 int64_t h1, int64_t w0, int64_t w1, float *restrict best,
                                 int32_t *restrict idx)
{
    const int64_t W = g->W, C = g->C;
    const float *x0 = xn + (h0 * W + w0) * C;
    for (int64_t c = 0; c < C; c++) {
        best[c] = x0[c];
        idx[c] = 0;
    }
    int32_t k = 0;
    for (int64_t h = h0; h < h1; h++)
        for (int64_t w = w0; w < w1; w++, k++) {
            const float *xp = xn + (h * W + w) * C;
            for (int64_t c = 0; c < C; c++) {
                float v = xp[c], b = best[c];
                int32_t gt = -(int32_t)(v > b), i = idx[c];
                best[c] = v > b ? v : b;
                idx[c] = i + ((k - i) & gt);
            }
        }
}

/* Max backward for output row (n, oh): dx += dy at each window's first arg-max.
 * best / idx are scratch arrays of C elements; idx holds the window-local cell number
 * (int32 like the floats, so the select vectorises). */
static void maxpool_bwd_row(const gc_pool2d_geom *g, int relu, const float *restrict xn,
                            const float *dyrow, int64_t oh, float *dxn,
                            float *restrict best, int32_t *restrict idx)
{
    const int64_t W = g->W, C = g->C;
    for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t h0, h1, w0, w1;
        window(g, oh, ow, &h0, &h1, &w0, &w1);
        int64_t ww = w1 - w0;
        window_argmax(g, xn, h0, h1, w0, w1, best, idx);
        const float *dy = dyrow + ow * C;
        for (int64_t c = 0; c < C; c++) {
            int64_t cell = (h0 + idx[c] / ww) * W + w0 + idx[c] % ww;
            if (!relu || best[c] > 0.0f) dxn[cell * C + c] += dy[c];
        }
    }
}

/* Windows that cannot overlap (stride >= pool size on both axes): every dX cell lies in
 * at most one window, so backward writes each cell exactly once (no zeroing pass, no
 * scatter). Cells outside every window are zeroed here. */
static inline int no_overlap(const gc_pool2d_geom *g)
{
    return g->sh >= g->PH && g->sw >= g->PW;
}

/* Is image row / column i (of extent n) inside a window (pool k, stride s, padding p,
 * out windows)? Counters instead of a division per cell. */
static void covered_mask(int64_t n, int64_t k, int64_t s, int64_t p, int64_t out,
                         unsigned char *mask)
{
    int64_t q = p / s, r = p % s; /* i + p = q * s + r */
    for (int64_t i = 0; i < n; i++) {
        mask[i] = q < out && r < k;
        if (++r == s) {
            r = 0;
            q++;
        }
    }
}

/* Zeroes the cells of one sample that no window covers (none for the usual 2x2 / 2 on
 * an even image); rowm / colm from covered_mask. */
static void zero_uncovered(const gc_pool2d_geom *g, const unsigned char *rowm,
                           const unsigned char *colm, int cols_all, float *dxn)
{
    const int64_t W = g->W, C = g->C;
    for (int64_t h = 0; h < g->H; h++) {
        float *row = dxn + h * W * C;
        if (!rowm[h]) {
            memset(row, 0, (size_t)(W * C) * sizeof(float));
            continue;
        }
        if (cols_all) continue;
        for (int64_t w = 0; w < W; w++)
            if (!colm[w]) memset(row + w * C, 0, (size_t)C * sizeof(float));
    }
}

/* Max backward of one sample, non-overlapping windows: per window and channel the first
 * cell holding the max (strict > in scan order), then every cell written once: dy at
 * that cell, 0 elsewhere. best / idx are scratch arrays of C elements. */
static void maxpool_bwd_sample_disjoint(const gc_pool2d_geom *g, int relu, const float *restrict xn,
                                        const float *restrict dyn, float *restrict dxn,
                                        float *restrict best, int32_t *restrict idx)
{
    const int64_t W = g->W, C = g->C;
    for (int64_t oh = 0; oh < g->OH; oh++)
        for (int64_t ow = 0; ow < g->OW; ow++) {
            int64_t h0, h1, w0, w1;
            window(g, oh, ow, &h0, &h1, &w0, &w1);
            const float *d = dyn + (oh * g->OW + ow) * C;
            window_argmax(g, xn, h0, h1, w0, w1, best, idx);
            if (relu) /* folded ReLU backward: a window whose max is <= 0 passes nothing */
                for (int64_t c = 0; c < C; c++) idx[c] = best[c] > 0.0f ? idx[c] : -1;
            int32_t k = 0;
            for (int64_t h = h0; h < h1; h++)
                for (int64_t w = w0; w < w1; w++, k++) {
                    float *dp = dxn + (h * W + w) * C;
                    for (int64_t c = 0; c < C; c++) {
                        float dv = d[c];
                        dp[c] = idx[c] == k ? dv : 0.0f;
                    }
                }
        }
}

gc_status gc_cpu_maxpool2d_bwd(const gc_pool2d_geom *g, int relu, const float *x, const float *dy,
                               float *dx)
{
    const int64_t N = g->N, OH = g->OH, C = g->C, HWC = g->H * g->W * C, OWC = g->OW * C;
    if (N == 0) return GC_OK;
    int par = pool_parallel(g), disjoint = no_overlap(g), fast = pool2x2_fast(g);
    (void)fast;
    int bad = 0;
    unsigned char *mask = NULL;
    int cols_all = 1;
    if (disjoint) {
        mask = (unsigned char *)malloc((size_t)(g->H + g->W));
        if (!mask) return gc_fail(GC_ERR_NOMEM, "maxpool2d_bwd: cannot allocate scratch");
        covered_mask(g->H, g->PH, g->sh, g->pad_top, g->OH, mask);
        covered_mask(g->W, g->PW, g->sw, g->pad_left, g->OW, mask + g->H);
        for (int64_t w = 0; w < g->W; w++) cols_all &= mask[g->H + w];
    }
#pragma omp parallel if (par) reduction(| : bad)
    {
        float *best = (float *)malloc((size_t)C * sizeof(float));
        int32_t *idx = (int32_t *)malloc((size_t)C * sizeof(int32_t));
        if (!best || !idx) {
            bad = 1;
        }
        /* every thread takes part in the worksharing loops below, even without scratch */
#pragma omp for schedule(static)
        for (int64_t n = 0; n < N; n++) {
            float *dxn = dx + n * HWC;
            if (!best || !idx) {
                memset(dxn, 0, (size_t)HWC * sizeof(float));
                continue;
            }
            if (disjoint) {
                zero_uncovered(g, mask, mask + g->H, cols_all, dxn);
#ifdef GC_POOL_HAVE_AVX512
                if (fast) {
                    maxpool2x2_bwd_sample_avx512(g, relu, x + n * HWC, dy + n * OH * OWC, dxn);
                    continue;
                }
#endif
                maxpool_bwd_sample_disjoint(g, relu, x + n * HWC, dy + n * OH * OWC, dxn, best, idx);
                continue;
            }
            memset(dxn, 0, (size_t)HWC * sizeof(float));
            for (int64_t oh = 0; oh < OH; oh++)
                maxpool_bwd_row(g, relu, x + n * HWC, dy + (n * OH + oh) * OWC, oh, dxn, best, idx);
        }
        free(best);
        free(idx);
    }
    free(mask);
    if (bad)
        return gc_fail(GC_ERR_NOMEM, "maxpool2d_bwd: cannot allocate %lld bytes of scratch",
                       (long long)(C * (int64_t)(sizeof(float) + sizeof(int32_t))));
    return GC_OK;
}

/* One output row (n, oh) of average pooling (mean over the cells inside the image). */
static void avgpool_row(const gc_pool2d_geom *g, const float *xn, int64_t oh, float *yrow)
{
    const int64_t W = g->W, C = g->C;
    for (int64_t ow = 0; ow < g->OW; ow++) {
        int64_t h0, h1, w0, w1;
        window(g, oh, ow, &h0, &h1, &w0, &w1);
        float *y = yrow + ow * C;
        memset(y, 0, (size_t)C * sizeof(float));
        for (int64_t h = h0; h < h1; h++)
            for (int64_t w = w0; w < w1; w++) {
                const float *xp = xn + (h * W + w) * C;
                for (int64_t c = 0; c < C; c++) y[c] += xp[c];
            }
        float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
        for (int64_t c = 0; c < C; c++) y[c] *= inv;
    }
}

gc_status gc_cpu_avgpool2d_fwd(const gc_pool2d_geom *g, const float *x, float *y)
{
    const int64_t N = g->N, OH = g->OH, HWC = g->H * g->W * g->C, OWC = g->OW * g->C;
#pragma omp parallel for schedule(static) if (pool_parallel(g))
    for (int64_t q = 0; q < N * OH; q++) {
        int64_t n = q / OH, oh = q % OH;
        avgpool_row(g, x + n * HWC, oh, y + q * OWC);
    }
    return GC_OK;
}

gc_status gc_cpu_avgpool2d_bwd(const gc_pool2d_geom *g, const float *dy, float *dx)
{
    const int64_t N = g->N, OH = g->OH, OW = g->OW, W = g->W, C = g->C;
    const int64_t HWC = g->H * W * C, OWC = OW * C;
    const int disjoint = no_overlap(g);
    unsigned char *mask = NULL;
    int cols_all = 1;
    if (disjoint) {
        mask = (unsigned char *)malloc((size_t)(g->H + g->W));
        if (!mask) return gc_fail(GC_ERR_NOMEM, "avgpool2d_bwd: cannot allocate scratch");
        covered_mask(g->H, g->PH, g->sh, g->pad_top, g->OH, mask);
        covered_mask(g->W, g->PW, g->sw, g->pad_left, g->OW, mask + g->H);
        for (int64_t w = 0; w < g->W; w++) cols_all &= mask[g->H + w];
    }
#pragma omp parallel for schedule(static) if (pool_parallel(g))
    for (int64_t n = 0; n < N; n++) {
        float *dxn = dx + n * HWC;
        if (disjoint) zero_uncovered(g, mask, mask + g->H, cols_all, dxn); /* then each covered cell is written once */
        else memset(dxn, 0, (size_t)HWC * sizeof(float));
        for (int64_t oh = 0; oh < OH; oh++)
            for (int64_t ow = 0; ow < OW; ow++) {
                int64_t h0, h1, w0, w1;
                window(g, oh, ow, &h0, &h1, &w0, &w1);
                const float *d = dy + (n * OH + oh) * OWC + ow * C;
                float inv = 1.0f / (float)((h1 - h0) * (w1 - w0));
                for (int64_t h = h0; h < h1; h++)
                    for (int64_t w = w0; w < w1; w++) {
                        float *dp = dxn + (h * W + w) * C;
                        if (disjoint)
                            for (int64_t c = 0; c < C; c++) dp[c] = d[c] * inv;
                        else
                            for (int64_t c = 0; c < C; c++) dp[c] += d[c] * inv;
                    }
            }
    }
    free(mask);
    return GC_OK;
}

/* ---------------------------------------------------------------- adapters */
static gc_status pool_geom(const char *what, const gc_tensor *xlike, const void *params,
                           gc_pool2d_geom *g)
{
    const gc_pool2d_params *p = (const gc_pool2d_params *)params;
    if (!p || !xlike || xlike->ndim != 4)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: expected a 4-D (N, H, W, C) tensor", what);
    return gc_pool2d_geometry(xlike->shape[0], xlike->shape[1], xlike->shape[2],
                              xlike->shape[3], p, g);
}

static int has_data(const gc_tensor *t) { return t && t->data; }

gc_status gc_cpu_op_maxpool2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    gc_pool2d_geom g;
    gc_status st = pool_geom("maxpool2d_fwd", call->in[0], call->params, &g);
    if (st || g.N == 0) return st;
    if (!has_data(call->in[0]) || !has_data(call->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "maxpool2d_fwd: missing tensor data");
    return gc_cpu_maxpool2d_fwd(&g, (const float *)call->in[0]->data, (float *)call->out[0]->data);
}

gc_status gc_cpu_op_maxpool2d_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    gc_pool2d_geom g;
    gc_status st = pool_geom("maxpool2d_bwd", call->in[0], call->params, &g);
    if (st || g.N == 0) return st;
    if (!has_data(call->in[0]) || !has_data(call->in[1]) || !has_data(call->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "maxpool2d_bwd: missing tensor data");
    const int relu = ((const gc_pool2d_params *)call->params)->act == GC_ACT_RELU;
    return gc_cpu_maxpool2d_bwd(&g, relu, (const float *)call->in[0]->data,
                                (const float *)call->in[1]->data, (float *)call->out[0]->data);
}

gc_status gc_cpu_op_avgpool2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    gc_pool2d_geom g;
    gc_status st = pool_geom("avgpool2d_fwd", call->in[0], call->params, &g);
    if (st || g.N == 0) return st;
    if (!has_data(call->in[0]) || !has_data(call->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "avgpool2d_fwd: missing tensor data");
    return gc_cpu_avgpool2d_fwd(&g, (const float *)call->in[0]->data, (float *)call->out[0]->data);
}

gc_status gc_cpu_op_avgpool2d_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    gc_pool2d_geom g;
    /* the input's shape is dx's shape */
    gc_status st = pool_geom("avgpool2d_bwd", call->out[0], call->params, &g);
    if (st || g.N == 0) return st;
    if (!has_data(call->in[0]) || !has_data(call->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "avgpool2d_bwd: missing tensor data");
    return gc_cpu_avgpool2d_bwd(&g, (const float *)call->in[0]->data, (float *)call->out[0]->data);
}
