/* test_cpu_fast.c -- checks the AVX-512 fast paths of conv2d.c and pool2d.c against the
 * paths they replace.
 *
 * What it checks (each at 1, 2 and 3 threads, skipped with a note when the CPU has no
 * AVX-512):
 * - conv2d forward with Kc <= 12 and F = 16 / 32 (the direct small-K kernel): bitwise
 *   equal to gc_cpu_sgemm on an im2col matrix built here (the GEMM path it replaces),
 *   for every activation and with / without bias;
 * - conv2d backward filter on those shapes (direct kernel, dW and the fused db): within
 *   float32 rounding of a double reference, and bitwise the same on a second run;
 * - conv2d backward data / forward with C >= 16 (AVX-512 col2im / im2col): within
 *   rounding of a double reference;
 * - 2x2 / 2 max pooling, forward and backward, C a multiple of 16, with ties and NaN:
 *   bitwise equal to the same kernels under GPUCMP's "generic" variant (plain loops).
 * Usage: test_cpu_fast [--small]. Exit status 0 when every check passes.
 */
#include "cpu_kernels.h"
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static float frand(void) { return (float)((double)(next_u64() >> 11) * (2.0 / 9007199254740992.0) - 1.0); }
static void fill(float *p, int64_t n) { for (int64_t i = 0; i < n; i++) p[i] = frand(); }
static float *fa(int64_t n) { return (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float)); }

static int same_bits(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

/* max |a - ref| / max(1, max |ref|) */
static double rel_err(const float *a, const double *ref, int64_t n)
{
    double e = 0.0, m = 1.0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - ref[i]);
        if (!(d <= e)) e = d;
        if (fabs(ref[i]) > m) m = fabs(ref[i]);
    }
    return e / m;
}

static float xat(const gc_conv2d_geom *g, const float *x, int64_t n, int64_t ih, int64_t iw, int64_t c)
{
    if (ih < 0 || ih >= g->H || iw < 0 || iw >= g->W) return 0.0f;
    return x[((n * g->H + ih) * g->W + iw) * g->C + c];
}

static void im2col_ref(const gc_conv2d_geom *g, const float *x, float *col)
{
    int64_t Kc = g->KH * g->KW * g->C, m = 0;
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++, m++)
                for (int64_t kh = 0; kh < g->KH; kh++)
                    for (int64_t kw = 0; kw < g->KW; kw++)
                        for (int64_t c = 0; c < g->C; c++)
                            col[m * Kc + (kh * g->KW + kw) * g->C + c] =
                                xat(g, x, n, oh * g->sh - g->pad_top + kh * g->dh,
                                    ow * g->sw - g->pad_left + kw * g->dw, c);
}

static void conv_case(int64_t N, int64_t H, int64_t W, int64_t C, int64_t K, int64_t F,
                      int s, int d, gc_padding pad)
{
    gc_conv2d_params p = {s, s, d, d, pad, GC_ACT_LINEAR, GC_IMPL_OWN, 0};
    gc_conv2d_geom g;
    if (gc_conv2d_geometry(N, H, W, C, K, K, F, &p, &g) != GC_OK) {
        CHECK(0, "geometry");
        return;
    }
    const int64_t Kc = K * K * C, M = N * g.OH * g.OW, XN = N * H * W * C;
    float *x = fa(XN), *w = fa(Kc * F), *b = fa(F), *y = fa(M * F), *y2 = fa(M * F);
    float *col = fa(M * Kc), *dy = fa(M * F), *dw = fa(Kc * F), *db = fa(F), *dx = fa(XN);
    float *dw2 = fa(Kc * F), *db2 = fa(F);
    double *rdw = (double *)calloc((size_t)(Kc * F), sizeof(double));
    double *rdb = (double *)calloc((size_t)F, sizeof(double));
    double *rdx = (double *)calloc((size_t)XN, sizeof(double));
    fill(x, XN); fill(w, Kc * F); fill(b, F); fill(dy, M * F);
    im2col_ref(&g, x, col);
    for (int64_t m = 0; m < M; m++)
        for (int64_t k = 0; k < Kc; k++)
            for (int64_t f = 0; f < F; f++) rdw[k * F + f] += (double)col[m * Kc + k] * dy[m * F + f];
    for (int64_t m = 0; m < M; m++)
        for (int64_t f = 0; f < F; f++) rdb[f] += dy[m * F + f];
    { /* dx reference: scatter of dy @ W^T through the receptive fields */
        int64_t m = 0;
        for (int64_t n = 0; n < N; n++)
            for (int64_t oh = 0; oh < g.OH; oh++)
                for (int64_t ow = 0; ow < g.OW; ow++, m++)
                    for (int64_t kh = 0; kh < K; kh++)
                        for (int64_t kw = 0; kw < K; kw++) {
                            int64_t ih = oh * s - g.pad_top + kh * d, iw = ow * s - g.pad_left + kw * d;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            for (int64_t c = 0; c < C; c++) {
                                double a = 0.0;
                                for (int64_t f = 0; f < F; f++)
                                    a += (double)dy[m * F + f] * w[((kh * K + kw) * C + c) * F + f];
                                rdx[((n * H + ih) * W + iw) * C + c] += a;
                            }
                        }
    }
    const gc_act acts[] = {GC_ACT_LINEAR, GC_ACT_RELU, GC_ACT_TANH, GC_ACT_SIGMOID};
    for (int th = 1; th <= 3; th++) {
        set_threads(th);
        for (int a = 0; a < 4; a++)
            for (int hb = 0; hb < 2; hb++) {
                const float *bias = hb ? b : NULL;
                for (int64_t i = 0; i < M * F; i++) y[i] = y2[i] = NAN;
                gc_status st = gc_cpu_conv2d_fwd(&g, x, w, bias, acts[a], y);
                gc_sgemm_args ga = {0};
                ga.M = M; ga.N = F; ga.K = Kc; ga.alpha = 1.0f; ga.beta = 0.0f;
                ga.A = col; ga.lda = Kc; ga.B = w; ga.ldb = F; ga.C = y2; ga.ldc = F;
                ga.bias = bias; ga.act = acts[a];
                gc_status st2 = gc_cpu_sgemm(&ga);
                CHECK(st == GC_OK && st2 == GC_OK && same_bits(y, y2, M * F),
                      "conv fwd N%lld %lldx%lldx%lld k%lld F%lld s%d d%d act%d bias%d thr%d: "
                      "not bitwise the GEMM path", (long long)N, (long long)H, (long long)W,
                      (long long)C, (long long)K, (long long)F, s, d, a, hb, th);
            }
        for (int64_t i = 0; i < Kc * F; i++) dw[i] = dw2[i] = NAN;
        for (int64_t i = 0; i < F; i++) db[i] = db2[i] = NAN;
        gc_status st = gc_cpu_conv2d_bwd_filter(&g, x, dy, dw, db);
        gc_status st2 = gc_cpu_conv2d_bwd_filter(&g, x, dy, dw2, db2);
        double e1 = rel_err(dw, rdw, Kc * F), e2 = rel_err(db, rdb, F);
        CHECK(st == GC_OK && st2 == GC_OK && e1 < 1e-5 && e2 < 1e-5 && same_bits(dw, dw2, Kc * F) &&
                  same_bits(db, db2, F),
              "conv bwd_filter N%lld C%lld k%lld F%lld thr%d: dw err %g db err %g (or not repeatable)",
              (long long)N, (long long)C, (long long)K, (long long)F, th, e1, e2);
        st = gc_cpu_conv2d_bwd_filter(&g, x, dy, dw, NULL);
        CHECK(st == GC_OK && same_bits(dw, dw2, Kc * F), "conv bwd_filter without db differs");
        for (int64_t i = 0; i < XN; i++) dx[i] = NAN;
        st = gc_cpu_conv2d_bwd_data(&g, dy, w, dx, 0);
        double e3 = rel_err(dx, rdx, XN);
        CHECK(st == GC_OK && e3 < 1e-5, "conv bwd_data N%lld C%lld k%lld F%lld thr%d: err %g",
              (long long)N, (long long)C, (long long)K, (long long)F, th, e3);
    }
    free(x); free(w); free(b); free(y); free(y2); free(col); free(dy); free(dw); free(db);
    free(dx); free(dw2); free(db2); free(rdw); free(rdb); free(rdx);
}

static void pool_case(int64_t N, int64_t H, int64_t W, int64_t C, gc_padding pad)
{
    gc_pool2d_params p = {2, 2, 2, 2, pad, GC_ACT_LINEAR};
    gc_pool2d_geom g;
    if (gc_pool2d_geometry(N, H, W, C, &p, &g) != GC_OK) {
        CHECK(0, "pool geometry");
        return;
    }
    const int64_t XN = N * H * W * C, YN = N * g.OH * g.OW * C;
    float *x = fa(XN), *dy = fa(YN), *y[2], *dx[2];
    for (int64_t i = 0; i < XN; i++) x[i] = (float)(int)(next_u64() % 5) - 2.0f; /* ties */
    x[0] = NAN;
    x[XN / 2] = NAN;
    fill(dy, YN);
    for (int th = 1; th <= 3; th++) {
        set_threads(th);
        for (int v = 0; v < 2; v++) {
            y[v] = fa(YN);
            dx[v] = fa(XN);
            for (int64_t i = 0; i < YN; i++) y[v][i] = 12345.0f;
            for (int64_t i = 0; i < XN; i++) dx[v][i] = 12345.0f;
            gc_cpu_sgemm_force_variant(v == 0 ? "avx512" : "generic");
            gc_status s1 = gc_cpu_maxpool2d_fwd(&g, x, y[v]);
            gc_status s2 = gc_cpu_maxpool2d_bwd(&g, 0, x, dy, dx[v]);
            CHECK(s1 == GC_OK && s2 == GC_OK, "pool status");
        }
        gc_cpu_sgemm_force_variant("auto");
        CHECK(same_bits(y[0], y[1], YN) && same_bits(dx[0], dx[1], XN),
              "maxpool 2x2 N%lld %lldx%lldx%lld pad%d thr%d: AVX-512 path differs from the loops",
              (long long)N, (long long)H, (long long)W, (long long)C, (int)pad, th);
        for (int v = 0; v < 2; v++) {
            free(y[v]);
            free(dx[v]);
        }
    }
    free(x);
    free(dy);
}

int main(int argc, char **argv)
{
    int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    if (gc_cpu_sgemm_force_variant("avx512") != GC_OK) {
        printf("test_cpu_fast: no AVX-512 on this CPU, nothing to check\n");
        return 0;
    }
    gc_cpu_sgemm_force_variant("auto");
    /* direct small-K conv (Kc <= 12, F 16 / 32), odd shapes, padding, strides, dilation */
    conv_case(3, 28, 28, 1, 3, 32, 1, 1, GC_PAD_VALID);
    conv_case(2, 9, 11, 1, 3, 16, 1, 1, GC_PAD_SAME);
    conv_case(2, 10, 9, 3, 2, 32, 2, 1, GC_PAD_SAME);
    conv_case(3, 12, 12, 1, 3, 32, 1, 2, GC_PAD_VALID);
    conv_case(1, 7, 7, 4, 1, 16, 2, 1, GC_PAD_VALID);
    /* C >= 16: AVX-512 im2col / col2im */
    conv_case(3, 13, 13, 32, 3, 64, 1, 1, GC_PAD_VALID);
    conv_case(2, 8, 9, 16, 3, 8, 2, 1, GC_PAD_SAME);
    conv_case(2, 7, 7, 20, 3, 5, 1, 2, GC_PAD_SAME);
    if (!small) {
        conv_case(40, 28, 28, 1, 3, 32, 1, 1, GC_PAD_VALID); /* many tiles, K blocks > 384 */
        conv_case(9, 13, 13, 32, 3, 64, 1, 1, GC_PAD_VALID);
    }
    pool_case(3, 26, 26, 32, GC_PAD_VALID);
    pool_case(2, 11, 11, 64, GC_PAD_VALID);
    pool_case(2, 10, 12, 16, GC_PAD_SAME);
    pool_case(2, 11, 11, 32, GC_PAD_SAME); /* clipped windows: the loops */
    pool_case(2, 8, 8, 24, GC_PAD_VALID);  /* C not a multiple of 16: the loops */
    if (!small) pool_case(33, 26, 26, 32, GC_PAD_VALID);
    printf("test_cpu_fast: %ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
