/* test_sgemm.c -- gc_cpu_sgemm against a naive double-precision reference.
 *
 * For every micro-kernel variant this CPU runs (forced with
 * gc_cpu_sgemm_force_variant, the variant registry's cpu.gemm.simd, which must then
 * report it as the last one run): shapes from 1x1x1 through primes, K = 0, tall/skinny and
 * (full mode) 1024^3, all four transpose cases, alpha/beta (beta = 0 with C pre-filled
 * with NaN, so an element the kernel fails to write stays NaN), bias or not, every
 * elementwise activation, leading dimensions larger than the rows with NaN in the
 * padding (never to be read) and a sentinel after each row of C (never to be written).
 * Pass: relative Frobenius error <= 1e-5 * max(1, sqrt(K)/8), every element within a
 * K-scaled bound of the reference, no NaN. Also checks the argument errors and calls
 * from inside an OpenMP parallel region. Fresh random inputs each run; the seed is
 * printed and can be given back with --seed to replay a failure.
 *
 * usage: test_sgemm [--quick] [--seed N]     (exit status 0 = all passed)
 */
#include "cpu_kernels.h"
#include "gpucmp_variants.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef _OPENMP
#include <omp.h>
#endif

static uint64_t rng_state;
static double urand(void) /* uniform [0, 1), xorshift64* */
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 0x2545F4914F6CDD1Dull) >> 11) * (1.0 / 9007199254740992.0);
}
static float frand(void) { return (float)(2.0 * urand() - 1.0); }

static int failures = 0, checks = 0;
static const char *variant_now = "?";

static double act_ref(gc_act act, double x)
{
    switch (act) {
    case GC_ACT_RELU: return x < 0.0 ? 0.0 : x;
    case GC_ACT_TANH: return tanh(x);
    case GC_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    default: return x;
    }
}
static const char *act_name(gc_act a)
{
    static const char *n[] = {"linear", "relu", "tanh", "sigmoid", "softmax"};
    return (int)a >= 0 && a < GC_ACT_COUNT ? n[a] : "?";
}

typedef struct {
    int64_t M, N, K;
    int ta, tb;
    float alpha, beta;
    int use_bias;
    gc_act act;
    int64_t pad; /* extra floats at the end of each row of A, B, C */
} case_t;

/* Runs one case; returns 0 on pass. */
static int run_case(const case_t *t)
{
    const int64_t M = t->M, N = t->N, K = t->K;
    const int64_t arows = t->ta ? K : M, acols = t->ta ? M : K;
    const int64_t brows = t->tb ? N : K, bcols = t->tb ? K : N;
    const int64_t lda = acols + t->pad, ldb = bcols + t->pad, ldc = N + t->pad;
    float *A = malloc(sizeof(float) * (size_t)(arows * lda + 1));
    float *B = malloc(sizeof(float) * (size_t)(brows * ldb + 1));
    float *C = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    float *C0 = malloc(sizeof(float) * (size_t)(M * ldc + 1));
    float *bias = malloc(sizeof(float) * (size_t)(N + 1));
    double *ref = malloc(sizeof(double) * (size_t)(M * N + 1));
    if (!A || !B || !C || !C0 || !bias || !ref) {
        fprintf(stderr, "test: out of memory\n");
        exit(2);
    }
    const float sentinel = 12345.0f;
    for (int64_t r = 0; r < arows; r++)
        for (int64_t c = 0; c < lda; c++)
            A[r * lda + c] = c < acols ? frand() : NAN;
    for (int64_t r = 0; r < brows; r++)
        for (int64_t c = 0; c < ldb; c++)
            B[r * ldb + c] = c < bcols ? frand() : NAN;
    for (int64_t r = 0; r < M; r++)
        for (int64_t c = 0; c < ldc; c++)
            C[r * ldc + c] = c >= N ? sentinel : t->beta == 0.0f ? NAN : frand();
    memcpy(C0, C, sizeof(float) * (size_t)(M * ldc));
    for (int64_t j = 0; j < N; j++)
        bias[j] = frand();

    /* reference, in double, and the scale of each element's error: float rounding in
     * alpha A B + beta C + bias is bounded by a multiple of the sum of the magnitudes
     * of the terms (the result alone can cancel to ~0), the activations have slope
     * <= 1, and the vector exp / tanh add an error relative to the output. */
    double *scale = malloc(sizeof(double) * (size_t)(M * N + 1));
    /* op(A) and op(B)^T copied to contiguous double rows so every dot product reads
     * memory in order */
    double *opa = malloc(sizeof(double) * (size_t)(M * K + 1));
    double *opbt = malloc(sizeof(double) * (size_t)(N * K + 1));
    if (!scale || !opa || !opbt) {
        fprintf(stderr, "test: out of memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < M; i++)
        for (int64_t k = 0; k < K; k++)
            opa[i * K + k] = t->ta ? A[k * lda + i] : A[i * lda + k];
    for (int64_t j = 0; j < N; j++)
        for (int64_t k = 0; k < K; k++)
            opbt[j * K + k] = t->tb ? B[j * ldb + k] : B[k * ldb + j];
#pragma omp parallel for schedule(dynamic, 8)
    for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) {
            double s = 0.0, sa = 0.0;
            if (t->alpha != 0.0f)
                for (int64_t k = 0; k < K; k++) {
                    const double a = opa[i * K + k], b = opbt[j * K + k];
                    s += a * b;
                    sa += fabs(a * b);
                }
            double v = (double)t->alpha * s;
            double sc = fabs((double)t->alpha) * sa;
            if (t->beta != 0.0f) {
                v += (double)t->beta * C0[i * ldc + j];
                sc += fabs((double)t->beta * C0[i * ldc + j]);
            }
            if (t->use_bias) {
                v += bias[j];
                sc += fabs((double)bias[j]);
            }
            v = act_ref(t->act, v);
            ref[i * N + j] = v;
            scale[i * N + j] = sc + fabs(v);
        }
    double scale_sq = 0.0;
    for (int64_t i = 0; i < M * N; i++)
        scale_sq += scale[i] * scale[i];

    gc_sgemm_args g = {t->ta, t->tb, M, N, K, t->alpha, t->beta, A, lda, B, ldb, C, ldc,
                       t->use_bias ? bias : NULL, t->act};
    gc_status st = gc_cpu_sgemm(&g);
    int bad = 0;
    char why[256] = "";
    double err_sq = 0.0, worst = 0.0; /* worst: largest |error| / scale of an element */
    int64_t worst_at = 0;
    if (st != GC_OK) {
        bad = 1;
        snprintf(why, sizeof why, "status %s: %s", gc_status_name(st), gc_last_error());
    } else {
        int64_t nan_at = -1, sent_at = -1;
        for (int64_t i = 0; i < M; i++) {
            for (int64_t j = 0; j < N; j++) {
                const double o = C[i * ldc + j];
                if (o != o) { /* NaN */
                    if (nan_at < 0)
                        nan_at = i * N + j;
                    continue;
                }
                const double d = fabs(o - ref[i * N + j]);
                err_sq += d * d;
                const double r = d / fmax(scale[i * N + j], 1e-30);
                if (r > worst) {
                    worst = r;
                    worst_at = i * N + j;
                }
            }
            for (int64_t j = N; j < ldc; j++)
                if (C[i * ldc + j] != sentinel && sent_at < 0)
                    sent_at = i * ldc + j;
        }
        const double tol = 1e-5 * fmax(1.0, sqrt((double)K) / 8.0);
        const double rel = sqrt(err_sq) / fmax(sqrt(scale_sq), 1e-30);
        if (nan_at >= 0) {
            bad = 1;
            snprintf(why, sizeof why, "NaN at (%lld, %lld)", (long long)(nan_at / N),
                     (long long)(nan_at % N));
        } else if (sent_at >= 0) {
            bad = 1;
            snprintf(why, sizeof why, "wrote past N in row %lld (column %lld)",
                     (long long)(sent_at / ldc), (long long)(sent_at % ldc));
        } else if (rel > tol) {
            bad = 1;
            snprintf(why, sizeof why, "relative Frobenius error %.3g > %.3g", rel, tol);
        } else if (worst > 4.0 * tol) { /* one wrong element in a large matrix */
            bad = 1;
            snprintf(why, sizeof why, "element (%lld, %lld): error %.3g of its scale > %.3g",
                     (long long)(worst_at / N), (long long)(worst_at % N), worst, 4.0 * tol);
        }
    }
    checks++;
    if (bad) {
        failures++;
        fprintf(stderr,
                "FAIL [%s] M=%lld N=%lld K=%lld ta=%d tb=%d alpha=%g beta=%g bias=%d act=%s "
                "pad=%lld: %s\n",
                variant_now, (long long)M, (long long)N, (long long)K, t->ta, t->tb,
                (double)t->alpha, (double)t->beta, t->use_bias, act_name(t->act),
                (long long)t->pad, why);
    }
    free(A);
    free(B);
    free(C);
    free(C0);
    free(bias);
    free(ref);
    free(scale);
    free(opa);
    free(opbt);
    return bad;
}

static void expect_invalid(const gc_sgemm_args *g, const char *what, const char *needle)
{
    checks++;
    gc_clear_error();
    const gc_status st = gc_cpu_sgemm(g);
    if (st != GC_ERR_INVALID_ARG || !strstr(gc_last_error(), needle)) {
        failures++;
        fprintf(stderr, "FAIL %s: expected invalid argument mentioning '%s', got %s '%s'\n",
                what, needle, gc_status_name(st), gc_last_error());
    }
}

static void test_errors(void)
{
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, c[4];
    const gc_sgemm_args ok = {0, 0, 2, 2, 2, 1.0f, 0.0f, a, 2, b, 2, c, 2, NULL, GC_ACT_LINEAR};
    gc_sgemm_args g = ok;
    g.M = -1;
    expect_invalid(&g, "negative M", "M=-1");
    g = ok;
    g.K = -3;
    expect_invalid(&g, "negative K", "K=-3");
    g = ok;
    g.lda = 1;
    expect_invalid(&g, "small lda", "lda=1");
    g = ok;
    g.trans_b = 1;
    g.N = 3;
    g.ldc = 3;
    g.ldb = 1;
    expect_invalid(&g, "small ldb (trans_b)", "ldb=1");
    g = ok;
    g.ldc = 1;
    expect_invalid(&g, "small ldc", "ldc=1");
    g = ok;
    g.act = GC_ACT_SOFTMAX;
    expect_invalid(&g, "softmax epilogue", "softmax");
    g = ok;
    g.act = (gc_act)99;
    expect_invalid(&g, "unknown act", "activation");
    g = ok;
    g.C = NULL;
    expect_invalid(&g, "NULL C", "C is NULL");
    g = ok;
    g.A = NULL;
    expect_invalid(&g, "NULL A", "A is NULL");
    expect_invalid(NULL, "NULL args", "NULL");

    checks++;
    if (gc_cpu_sgemm(&ok) != GC_OK || c[0] != 7.0f || c[1] != 10.0f || c[2] != 15.0f ||
        c[3] != 22.0f) {
        failures++;
        fprintf(stderr, "FAIL 2x2 literal product\n");
    }
    /* alpha == 0: A and B are not read, so a NaN there must not reach C */
    float an[4] = {NAN, NAN, NAN, NAN}, cc[4] = {1, 2, 3, 4};
    const gc_sgemm_args z = {0, 0, 2, 2, 2, 0.0f, 2.0f, an, 2, b, 2, cc, 2, NULL, GC_ACT_LINEAR};
    checks++;
    if (gc_cpu_sgemm(&z) != GC_OK || cc[0] != 2.0f || cc[3] != 8.0f) {
        failures++;
        fprintf(stderr, "FAIL alpha = 0 with NaN in A\n");
    }
    /* M == 0 or N == 0: nothing to do, pointers may be NULL */
    const gc_sgemm_args e = {0, 0, 0, 5, 5, 1.0f, 0.0f, NULL, 5, NULL, 5, NULL, 5, NULL,
                             GC_ACT_RELU};
    checks++;
    if (gc_cpu_sgemm(&e) != GC_OK) {
        failures++;
        fprintf(stderr, "FAIL M = 0\n");
    }
}

static void test_variant_api(void)
{
    checks++;
    if (gc_cpu_sgemm_force_variant("no-such-isa") != GC_ERR_INVALID_ARG ||
        !strstr(gc_last_error(), "no-such-isa")) {
        failures++;
        fprintf(stderr, "FAIL unknown variant name accepted\n");
    }
    checks++;
    if (gc_cpu_sgemm_force_variant(NULL) != GC_ERR_INVALID_ARG) {
        failures++;
        fprintf(stderr, "FAIL NULL variant name accepted\n");
    }
    checks++;
    if (gc_cpu_sgemm_force_variant("generic") != GC_OK ||
        strcmp(gc_cpu_sgemm_variant(), "generic") != 0 ||
        gc_cpu_sgemm_force_variant("auto") != GC_OK) {
        failures++;
        fprintf(stderr, "FAIL forcing generic / auto\n");
    }
}

/* Each thread of an enclosing parallel region runs its own GEMM (the kernel must then
 * stay on that thread) and checks it. */
static void test_nested(void)
{
    int bad = 0;
#pragma omp parallel reduction(+ : bad)
    {
        const int64_t M = 150, N = 70, K = 300;
        float *A = malloc(sizeof(float) * M * K), *B = malloc(sizeof(float) * K * N),
              *C = malloc(sizeof(float) * M * N);
        for (int64_t i = 0; i < M * K; i++)
            A[i] = (float)((i * 7) % 13) - 6.0f;
        for (int64_t i = 0; i < K * N; i++)
            B[i] = (float)((i * 5) % 11) - 5.0f;
        gc_sgemm_args g = {0, 0, M, N, K, 1.0f, 0.0f, A, K, B, N, C, N, NULL, GC_ACT_LINEAR};
        if (gc_cpu_sgemm(&g) != GC_OK)
            bad++;
        for (int64_t i = 0; i < M && !bad; i += 37)
            for (int64_t j = 0; j < N; j += 11) {
                double s = 0.0; /* small integers: the float result is exact */
                for (int64_t k = 0; k < K; k++)
                    s += (double)A[i * K + k] * B[k * N + j];
                if ((double)C[i * N + j] != s) {
                    bad++;
                    break;
                }
            }
        free(A);
        free(B);
        free(C);
    }
    checks++;
    if (bad) {
        failures++;
        fprintf(stderr, "FAIL [%s] GEMM inside an OpenMP parallel region\n", variant_now);
    }
}

/* The activations over their whole range, through the epilogue: C = act(x 1^T) with K
 * = 1, x from -100 to 100 plus specials. Each element within 1e-6 relative (2e-7 is
 * the design) or 1e-30 absolute of the double reference; NaN in, NaN out. */
static void test_activation_range(void)
{
    enum { M = 2011, N = 37 }; /* a full 32-wide vector and a tail per row */
    static float x[M], ones[N], c[M * N];
    const float specials[] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-30f, -1e-30f,
                              0.625f, -0.625f, 0.62499f, 88.0f, -87.0f, 44.0f, -44.0f};
    const int ns = (int)(sizeof specials / sizeof specials[0]);
    for (int i = 0; i < M; i++)
        x[i] = i < ns ? specials[i] : (float)(-100.0 + 200.0 * (i - ns) / (M - ns - 1));
    for (int j = 0; j < N; j++)
        ones[j] = 1.0f;
    for (int act = GC_ACT_LINEAR; act <= GC_ACT_SIGMOID; act++) {
        gc_sgemm_args g = {0, 0, M, N, 1, 1.0f, 0.0f, x, 1, ones, N, c, N, NULL, (gc_act)act};
        checks++;
        if (gc_cpu_sgemm(&g) != GC_OK) {
            failures++;
            fprintf(stderr, "FAIL [%s] activation range %s: %s\n", variant_now,
                    act_name((gc_act)act), gc_last_error());
            continue;
        }
        for (int64_t e = 0; e < (int64_t)M * N; e++) {
            const double in = x[e / N], ref = act_ref((gc_act)act, in), out = c[e];
            const int ok = in != in ? out != out
                                    : fabs(out - ref) <= 1e-6 * fabs(ref) + 1e-30 ||
                                          out == ref; /* inf == inf */
            if (!ok) {
                failures++;
                fprintf(stderr, "FAIL [%s] %s(%.9g) = %.9g, expected %.9g\n", variant_now,
                        act_name((gc_act)act), in, out, ref);
                break;
            }
        }
    }
}

/* gc_cpu_sgemm_shared_b: n products sharing B, each C bitwise equal to its own
 * gc_cpu_sgemm (the stacking changes which thread computes a tile, not the order of any
 * element's sums), every element written (C pre-filled with NaN where beta = 0), the
 * column sums of B within a K-scaled bound of a double sum; and its argument errors. */
static float *filled(int64_t n, float v)
{
    float *p = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        p[i] = isnan(v) ? v : frand();
    return p;
}

static void shared_case(int n, const int64_t *M, const int *ta, int64_t N, int64_t K, int sums)
{
    gc_sgemm_args g[GC_SGEMM_SHARED_MAX], sep[GC_SGEMM_SHARED_MAX];
    const gc_sgemm_args *gp[GC_SGEMM_SHARED_MAX];
    float *B = filled(K * N, 0.0f), *A[GC_SGEMM_SHARED_MAX], *C[GC_SGEMM_SHARED_MAX], *R[GC_SGEMM_SHARED_MAX];
    float *bias = filled(N, 0.0f);
    for (int i = 0; i < n; i++) {
        A[i] = filled(M[i] * K, 0.0f);
        const float beta = i == 1 ? 0.5f : 0.0f; /* one problem accumulates */
        C[i] = filled(M[i] * N, beta != 0.0f ? 0.0f : NAN);
        R[i] = (float *)malloc((size_t)(M[i] * N > 0 ? M[i] * N : 1) * sizeof(float));
        memcpy(R[i], C[i], (size_t)(M[i] * N) * sizeof(float));
        const gc_sgemm_args t = {ta[i], 0, M[i], N, K, i == 2 ? -0.5f : 1.0f, beta, A[i], ta[i] ? M[i] : K,
                                 B, N, C[i], N, i == 2 ? bias : NULL, i == 2 ? GC_ACT_TANH : GC_ACT_LINEAR};
        g[i] = sep[i] = t;
        sep[i].C = R[i];
        gp[i] = &g[i];
    }
    float *cs = sums ? filled(N, NAN) : NULL;
    checks++;
    gc_status st = gc_cpu_sgemm_shared_b(gp, n, cs);
    for (int i = 0; i < n && st == GC_OK; i++)
        st = gc_cpu_sgemm(&sep[i]);
    int bad = st != GC_OK;
    for (int i = 0; i < n && !bad; i++)
        bad = memcmp(C[i], R[i], (size_t)(M[i] * N) * sizeof(float)) != 0;
    for (int64_t j = 0; cs && j < N && !bad; j++) {
        double want = 0.0, mag = 0.0;
        for (int64_t k = 0; k < K; k++)
            want += B[k * N + j], mag += fabs(B[k * N + j]);
        bad = !(fabs(cs[j] - want) <= 1e-6 * sqrt((double)K + 1.0) * mag + 1e-30);
    }
    if (bad) {
        failures++;
        fprintf(stderr, "FAIL [%s] shared_b n=%d M0=%lld N=%lld K=%lld sums=%d: %s\n", variant_now, n,
                (long long)M[0], (long long)N, (long long)K, sums,
                st != GC_OK ? gc_last_error() : "differs from the separate products / sums");
    }
    for (int i = 0; i < n; i++)
        free(A[i]), free(C[i]), free(R[i]);
    free(B), free(bias), free(cs);
}

static void test_shared_b(int quick)
{
    static const int64_t Ms[][3] = {{256, 128, 0}, {1, 1, 1}, {13, 0, 40}, {0, 5, 7}, {37, 12, 25},
                                    {40, 24, 0}};
    static const int tas[][3] = {{1, 1, 1}, {0, 1, 0}, {1, 0, 1}, {1, 1, 0}, {0, 0, 1}, {1, 1, 1}};
    /* the last: a recurrent layer's weight gradients, K (batch x steps) long against C */
    static const int64_t NK[][2] = {{512, 640}, {1, 1}, {45, 300}, {33, 0}, {2500, 70}, {96, 2333}};
    for (int s = 0; s < 6; s++)
        for (int n = 1; n <= 3; n++) {
            int64_t N = NK[s][0], K = NK[s][1];
            if (quick && N * K > 40000) N = 40;
            shared_case(n, Ms[s], tas[s], N, K, s != 2 || n != 2);
        }
    /* errors: problems that do not share B, column sums of a transposed B, no problems */
    float a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 3, 4}, b2[4] = {1, 2, 3, 4}, c[4], c2[4], cs[2];
    const gc_sgemm_args p0 = {0, 0, 2, 2, 2, 1.0f, 0.0f, a, 2, b, 2, c, 2, NULL, GC_ACT_LINEAR};
    gc_sgemm_args p1 = p0;
    p1.C = c2;
    p1.B = b2;
    const gc_sgemm_args *two[2] = {&p0, &p1};
    gc_sgemm_args pt = p0;
    pt.trans_b = 1;
    const gc_sgemm_args *tr[1] = {&pt};
    struct { const gc_sgemm_args *const *gs; int n; float *cs; const char *needle; } bad[] = {
        {two, 2, NULL, "does not share"}, {tr, 1, cs, "trans_b"}, {two, 0, NULL, "problems"}};
    for (int i = 0; i < 3; i++) {
        checks++;
        gc_clear_error();
        const gc_status st = gc_cpu_sgemm_shared_b(bad[i].gs, bad[i].n, bad[i].cs);
        if (st != GC_ERR_INVALID_ARG || !strstr(gc_last_error(), bad[i].needle)) {
            failures++;
            fprintf(stderr, "FAIL shared_b error %d: expected '%s', got %s '%s'\n", i, bad[i].needle,
                    gc_status_name(st), gc_last_error());
        }
    }
}

static void run_variant(int quick)
{
    /* M, N, K: degenerate, tiny, primes, K = 0, tall/skinny, several K blocks
     * (kc <= 256), several N blocks (nc <= 1024), odd tails everywhere */
    static const int64_t small[][3] = {
        {1, 1, 1},    {1, 1, 7},     {7, 1, 1},     {1, 9, 1},     {2, 3, 4},
        {13, 17, 19}, {37, 53, 71},  {64, 64, 64},  {12, 32, 5},   {6, 16, 8},
        {100, 33, 0}, {0, 5, 5},     {5, 0, 5},     {3, 100, 513}, {25, 47, 257},
        {11, 67, 29}, {49, 31, 300}, {4, 1100, 17}, {73, 9, 1},
        {37, 45, 1700}, /* K long against C: K blocks of about 2 kc, a short last one */
    };
    static const int64_t large[][3] = {
        {1000, 3, 500}, {3, 1000, 500},  {129, 257, 300}, {200, 2100, 40},
        {257, 129, 700}, {500, 500, 64}, {1, 700, 900},   {701, 1, 900},
    };
    static const float alphas[] = {1.0f, -0.5f, 2.0f, 0.0f};
    static const float betas[] = {0.0f, 1.0f, -1.5f, 0.0f};
    int rot = 0;
    /* small shapes: every transpose case x every epilogue, rotating alpha/beta */
    for (size_t s = 0; s < sizeof small / sizeof small[0]; s++)
        for (int tr = 0; tr < 4; tr++)
            for (int act = GC_ACT_LINEAR; act <= GC_ACT_SIGMOID; act++)
                for (int use_bias = 0; use_bias < 2; use_bias++) {
                    case_t t = {small[s][0], small[s][1], small[s][2], tr & 1, tr >> 1,
                                alphas[rot % 4], betas[(rot / 4) % 4], use_bias, (gc_act)act,
                                (rot % 3 == 0) ? 3 : 0};
                    rot++;
                    run_case(&t);
                }
    /* larger shapes (the parallel path): every transpose case, rotating the rest */
    const size_t nlarge = quick ? 2 : sizeof large / sizeof large[0];
    for (size_t s = 0; s < nlarge; s++)
        for (int tr = 0; tr < 4; tr++) {
            case_t t = {large[s][0], large[s][1], large[s][2], tr & 1, tr >> 1,
                        alphas[rot % 3], betas[rot % 4], rot & 1, (gc_act)(rot % 4),
                        (rot % 2) ? 5 : 0};
            rot++;
            if (quick) { /* keep valgrind runs short */
                t.M = t.M > 200 ? 200 : t.M;
                t.N = t.N > 200 ? 200 : t.N;
            }
            run_case(&t);
        }
    if (!quick) {
        case_t t = {1024, 1024, 1024, 0, 0, 1.0f, 0.0f, 1, GC_ACT_RELU, 0};
        run_case(&t);
        case_t u = {1024, 1024, 1024, 1, 1, 0.5f, 1.0f, 0, GC_ACT_TANH, 0};
        run_case(&u);
        /* one thread owning 2800 rows that span several N blocks: A is packed in more
         * than one block of rows (at most ~4 MiB of packed A each) */
#ifdef _OPENMP
        const int nt = omp_get_max_threads();
        omp_set_num_threads(1);
#endif
        case_t v = {2800, 800, 384, 0, 1, 1.0f, 0.5f, 1, GC_ACT_SIGMOID, 1};
        run_case(&v);
#ifdef _OPENMP
        omp_set_num_threads(nt);
#endif
    }
    test_activation_range();
    test_nested();
    test_shared_b(quick);
}

int main(int argc, char **argv)
{
    int quick = 0;
    uint64_t seed = (uint64_t)time(NULL) * 2654435761u + (uint64_t)clock();
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0)
            quick = 1;
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc)
            seed = strtoull(argv[++i], NULL, 10);
        else {
            fprintf(stderr, "usage: %s [--quick] [--seed N]\n", argv[0]);
            return 2;
        }
    }
    rng_state = seed ? seed : 1;
    int threads = 1;
#ifdef _OPENMP
    threads = omp_get_max_threads();
#endif
    const char *initial = gc_cpu_sgemm_variant();
    printf("test_sgemm: seed %llu, %d thread(s), default variant %s%s\n",
           (unsigned long long)seed, threads, initial, quick ? ", quick" : "");
    test_errors();
    test_variant_api();
    static const char *names[] = {"avx512", "fma", "generic"}; /* best first */
    const char *env = getenv("GPUCMP_CPU_SIMD"), *best = NULL;
    int env_ok = 0;
    for (int v = 0; v < 3; v++) {
        if (gc_cpu_sgemm_force_variant(names[v]) != GC_OK) {
            printf("  variant %-8s not available on this CPU, skipped\n", names[v]);
            continue;
        }
        if (!best)
            best = names[v];
        if (env && strcmp(env, names[v]) == 0)
            env_ok = 1;
        variant_now = names[v];
        const int before = failures, nb = checks;
        run_variant(quick);
        /* the registry reports the micro-kernel the GEMMs of this thread ran */
        char last[32];
        checks++;
        if (strcmp(gc_variant_last_name(GC_VP_CPU_GEMM_SIMD, last, sizeof last), names[v]) != 0) {
            failures++;
            fprintf(stderr, "FAIL variant %s: the registry's last is %s\n", names[v], last);
        }
        printf("  variant %-8s %d checks, %d failed\n", names[v], checks - nb, failures - before);
    }
    /* at start: GPUCMP_CPU_SIMD (read by the variant registry as cpu.gemm.simd) when it
     * names a variant this CPU runs (an unknown or unsupported value is ignored), else the
     * best one; "auto" is the automatic choice, the best one */
    const char *expect = env_ok ? env : best;
    gc_cpu_sgemm_force_variant("auto");
    checks += 2;
    if (!expect || strcmp(initial, expect) != 0 || strcmp(gc_cpu_sgemm_variant(), best) != 0) {
        failures++;
        fprintf(stderr, "FAIL automatic variant: got %s at start (expected %s), %s after auto (expected %s)\n",
                initial, expect ? expect : "?", gc_cpu_sgemm_variant(), best ? best : "?");
    }
    printf("test_sgemm: %d checks, %d failed -> %s\n", checks, failures,
           failures ? "FAIL" : "PASS");
    return failures ? 1 : 0;
}
