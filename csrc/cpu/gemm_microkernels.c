/* gemm_microkernels.c -- the register-blocked inner kernels of the float32 GEMM.
 *
 * What it provides: three gc_sgemm_kernel tables ("avx512", "fma", "generic"), each a
 * micro-kernel that computes one mr x nr tile of C from a packed A micro-panel
 * (kc groups of mr values) and a packed B micro-panel (kc groups of nr values), plus a
 * vectorised elementwise activation for gemm.c's epilogue.
 *
 * Design: C is row-major, so a tile is vectorised along N: per k the kernel loads
 * nr/width vectors of B and broadcasts each of the mr values of A, all accumulators in
 * registers (avx512 12x32: 24 zmm; fma 6x16: 12 ymm; generic 6x8: 12 of 4 floats),
 * float32 accumulation. The ISA variants use GCC target attributes, so the library is
 * built without -march and gemm.c picks one at run time; "fma" uses only AVX and FMA
 * instructions (CPUs with FMA but no AVX2 exist); on non-x86 only "generic" is built.
 * alpha, beta and the bias are applied as the tile is stored (beta == 0 never reads C).
 * The vector exp (Cephes' polynomial) keeps sigmoid and tanh within ~2e-7 relative, and
 * NaN passes through every activation.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <stddef.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

/* ------------------------------------------------------------------ portable */

/* 6 x 8 with GCC/Clang vector extensions (4 floats, SSE2 or NEON): 12 accumulators,
 * 2 for B and a broadcast fit the 16 registers of SSE2. Without them, plain loops, which
 * are also the readable statement of what every variant computes. */
#define G_MR 6
#define G_NR 8

#if defined(__GNUC__)
typedef float gv4 __attribute__((vector_size(16)));

static inline gv4 gv4_load(const float *p)
{
    gv4 v;
    memcpy(&v, p, sizeof v); /* one unaligned load; no aliasing question */
    return v;
}

static void ukr_generic(int64_t kc, const float *restrict a, const float *restrict b,
                        float *restrict c, int64_t ldc, float alpha, float beta,
                        const float *restrict bias)
{
    gv4 acc[G_MR][2];
    for (int i = 0; i < G_MR; i++)
        acc[i][0] = acc[i][1] = (gv4){0.0f, 0.0f, 0.0f, 0.0f};
    for (int64_t k = 0; k < kc; k++) {
        const gv4 b0 = gv4_load(b), b1 = gv4_load(b + 4);
        for (int i = 0; i < G_MR; i++) {
            const gv4 ai = (gv4){a[i], a[i], a[i], a[i]};
            acc[i][0] += ai * b0;
            acc[i][1] += ai * b1;
        }
        a += G_MR;
        b += G_NR;
    }
    gv4 bs0 = {0.0f, 0.0f, 0.0f, 0.0f}, bs1 = bs0;
    if (bias) {
        bs0 = gv4_load(bias);
        bs1 = gv4_load(bias + 4);
    }
    for (int i = 0; i < G_MR; i++) {
        float *ci = c + i * ldc;
        gv4 v0 = acc[i][0] * alpha, v1 = acc[i][1] * alpha;
        if (beta != 0.0f) {
            v0 += beta * gv4_load(ci);
            v1 += beta * gv4_load(ci + 4);
        }
        v0 += bs0;
        v1 += bs1;
        memcpy(ci, &v0, sizeof v0);
        memcpy(ci + 4, &v1, sizeof v1);
    }
}
#else
static void ukr_generic(int64_t kc, const float *restrict a, const float *restrict b,
                        float *restrict c, int64_t ldc, float alpha, float beta,
                        const float *restrict bias)
{
    float acc[G_MR][G_NR] = {{0.0f}};
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < G_MR; i++)
            for (int j = 0; j < G_NR; j++)
                acc[i][j] += a[i] * b[j];
        a += G_MR;
        b += G_NR;
    }
    for (int i = 0; i < G_MR; i++) {
        float *ci = c + i * ldc;
        for (int j = 0; j < G_NR; j++) {
            float v = alpha * acc[i][j];
            if (beta != 0.0f)
                v += beta * ci[j];
            if (bias)
                v += bias[j];
            ci[j] = v;
        }
    }
}
#endif

/* NaN passes through every activation (relu included, as in TensorFlow). */
static void act_generic(gc_act act, float *x, int64_t n)
{
    switch (act) {
    case GC_ACT_RELU:
        for (int64_t i = 0; i < n; i++)
            x[i] = x[i] < 0.0f ? 0.0f : x[i];
        break;
    case GC_ACT_TANH:
        for (int64_t i = 0; i < n; i++)
            x[i] = tanhf(x[i]);
        break;
    case GC_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++)
            x[i] = 1.0f / (1.0f + expf(-x[i]));
        break;
    default: /* linear; softmax is rejected by gemm.c before any work */
        break;
    }
}

const gc_sgemm_kernel gc_sgemm_kernel_generic = {
    "generic", G_MR, G_NR, 256, ukr_generic, act_generic,
};

#if defined(__x86_64__) || defined(__i386__)

/* Constants of the vector exp (Cephes expf: |relative error| < 2e-7 on the clamped
 * range) and tanh (odd polynomial below 0.625, where 1 - 2/(e^2x + 1) would cancel). */
#define EXP_HI 88.0f  /* keeps 2^n a normal float: n <= 127 */
#define EXP_LO -87.0f /* n >= -126 */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define EP0 1.9875691500e-4f
#define EP1 1.3981999507e-3f
#define EP2 8.3334519073e-3f
#define EP3 4.1665795894e-2f
#define EP4 1.6666665459e-1f
#define EP5 5.0000001201e-1f
#define TH0 -5.70498872745e-3f
#define TH1 2.06390887954e-2f
#define TH2 -5.37397155531e-2f
#define TH3 1.33314422036e-1f
#define TH4 -3.33332819422e-1f
#define TANH_SMALL 0.625f

/* ------------------------------------------------------------------ AVX + FMA (256-bit) */
/* 6 x 16: 12 ymm accumulators + 2 for B + 1 broadcast = 15 of the 16 registers.
 * Only AVX and FMA instructions: integer work on ymm (AVX2) is split into SSE2 halves. */
#define F_MR 6
#define F_NR 16
#define FMA_TARGET __attribute__((target("avx,fma")))

FMA_TARGET static void ukr_fma(int64_t kc, const float *restrict a, const float *restrict b,
                               float *restrict c, int64_t ldc, float alpha, float beta,
                               const float *restrict bias)
{
    __m256 c0[F_MR], c1[F_MR];
#pragma GCC unroll 6
    for (int i = 0; i < F_MR; i++) {
        /* the tile is stored after the k loop: start bringing it in now */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + F_NR - 1), _MM_HINT_T0);
        c0[i] = _mm256_setzero_ps();
        c1[i] = _mm256_setzero_ps();
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
#pragma GCC unroll 6
        for (int i = 0; i < F_MR; i++) {
            const __m256 ai = _mm256_broadcast_ss(a + i);
            c0[i] = _mm256_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm256_fmadd_ps(ai, b1, c1[i]);
        }
        a += F_MR;
        b += F_NR;
    }
    const __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    __m256 bias0 = _mm256_setzero_ps(), bias1 = _mm256_setzero_ps();
    if (bias) {
        bias0 = _mm256_loadu_ps(bias);
        bias1 = _mm256_loadu_ps(bias + 8);
    }
#pragma GCC unroll 6
    for (int i = 0; i < F_MR; i++) {
        float *ci = c + i * ldc;
        __m256 v0 = _mm256_mul_ps(c0[i], va), v1 = _mm256_mul_ps(c1[i], va);
        if (beta != 0.0f) {
            v0 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), v0);
            v1 = _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), v1);
        }
        _mm256_storeu_ps(ci, _mm256_add_ps(v0, bias0));
        _mm256_storeu_ps(ci + 8, _mm256_add_ps(v1, bias1));
    }
}

FMA_TARGET static inline __m256 exp_fma(__m256 x)
{
    /* min/max with x second keep a NaN x (they return the second operand on NaN) */
    x = _mm256_max_ps(_mm256_set1_ps(EXP_LO), _mm256_min_ps(_mm256_set1_ps(EXP_HI), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(LOG2E)),
                                     _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(LN2_LO), r);
    __m256 p = _mm256_set1_ps(EP0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(EP5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    /* 2^n built in the exponent field, with SSE2 integer halves (AVX has none on ymm) */
    const __m256i ni = _mm256_cvtps_epi32(n);
    const __m128i bias = _mm_set1_epi32(127);
    const __m128i lo = _mm_slli_epi32(_mm_add_epi32(_mm256_castsi256_si128(ni), bias), 23);
    const __m128i hi = _mm_slli_epi32(_mm_add_epi32(_mm256_extractf128_si256(ni, 1), bias), 23);
    const __m256 pow2n =
        _mm256_castsi256_ps(_mm256_insertf128_si256(_mm256_castsi128_si256(lo), hi, 1));
    return _mm256_mul_ps(p, pow2n);
}

FMA_TARGET static inline __m256 act_vec_fma(gc_act act, __m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f);
    switch (act) {
    case GC_ACT_RELU:
        return _mm256_max_ps(_mm256_setzero_ps(), x);
    case GC_ACT_SIGMOID:
        return _mm256_div_ps(one, _mm256_add_ps(one, exp_fma(_mm256_sub_ps(_mm256_setzero_ps(), x))));
    case GC_ACT_TANH: {
        const __m256 sign = _mm256_set1_ps(-0.0f);
        const __m256 z = _mm256_andnot_ps(sign, x);
        /* large |x|: 1 - 2 / (e^2|x| + 1), sign restored */
        const __m256 e = exp_fma(_mm256_add_ps(z, z));
        __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
        big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
        /* small |x|: x + x^3 P(x^2) */
        const __m256 x2 = _mm256_mul_ps(x, x);
        __m256 p = _mm256_set1_ps(TH0);
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TH1));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TH2));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TH3));
        p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(TH4));
        const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
        /* NaN compares false and takes the small branch, which keeps it */
        const __m256 use_big = _mm256_cmp_ps(z, _mm256_set1_ps(TANH_SMALL), _CMP_GT_OQ);
        return _mm256_blendv_ps(small, big, use_big);
    }
    default:
        return x;
    }
}

/* Lane masks for a tail of r < 8 elements: load 8 ints starting at 8 - r. */
static const int32_t fma_tail_mask[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};

FMA_TARGET static void act_fma(gc_act act, float *x, int64_t n)
{
    if (act == GC_ACT_LINEAR)
        return;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, act_vec_fma(act, _mm256_loadu_ps(x + i)));
    if (i < n) {
        const __m256i m = _mm256_loadu_si256((const __m256i *)(fma_tail_mask + 8 - (n - i)));
        _mm256_maskstore_ps(x + i, m, act_vec_fma(act, _mm256_maskload_ps(x + i, m)));
    }
}

const gc_sgemm_kernel gc_sgemm_kernel_fma = {
    "fma", F_MR, F_NR, 256, ukr_fma, act_fma,
};

/* ------------------------------------------------------------------ AVX-512F */
/* 12 x 32: 24 zmm accumulators, 2 for B, broadcasts of A folded into the FMAs. */
#define Z_MR 12
#define Z_NR 32
#define AVX512_TARGET __attribute__((target("avx512f")))

AVX512_TARGET static void ukr_avx512(int64_t kc, const float *restrict a,
                                     const float *restrict b, float *restrict c, int64_t ldc,
                                     float alpha, float beta, const float *restrict bias)
{
    __m512 c0[Z_MR], c1[Z_MR];
#pragma GCC unroll 16
    for (int i = 0; i < Z_MR; i++) {
        /* 32 floats of a row span up to three cache lines */
        _mm_prefetch((const char *)(c + i * ldc), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + 16), _MM_HINT_T0);
        _mm_prefetch((const char *)(c + i * ldc + Z_NR - 1), _MM_HINT_T0);
        c0[i] = _mm512_setzero_ps();
        c1[i] = _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int64_t k = 0; k < kc; k++) {
        const __m512 b0 = _mm512_load_ps(b), b1 = _mm512_load_ps(b + 16);
#pragma GCC unroll 16
        for (int i = 0; i < Z_MR; i++) {
            const __m512 ai = _mm512_set1_ps(a[i]);
            c0[i] = _mm512_fmadd_ps(ai, b0, c0[i]);
            c1[i] = _mm512_fmadd_ps(ai, b1, c1[i]);
        }
        a += Z_MR;
        b += Z_NR;
    }
    const __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    __m512 bias0 = _mm512_setzero_ps(), bias1 = _mm512_setzero_ps();
    if (bias) {
        bias0 = _mm512_loadu_ps(bias);
        bias1 = _mm512_loadu_ps(bias + 16);
    }
#pragma GCC unroll 16
    for (int i = 0; i < Z_MR; i++) {
        float *ci = c + i * ldc;
        __m512 v0 = _mm512_mul_ps(c0[i], va), v1 = _mm512_mul_ps(c1[i], va);
        if (beta != 0.0f) {
            v0 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), v0);
            v1 = _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16), v1);
        }
        _mm512_storeu_ps(ci, _mm512_add_ps(v0, bias0));
        _mm512_storeu_ps(ci + 16, _mm512_add_ps(v1, bias1));
    }
}

AVX512_TARGET static inline __m512 exp_avx512(__m512 x)
{
    x = _mm512_max_ps(_mm512_set1_ps(EXP_LO), _mm512_min_ps(_mm512_set1_ps(EXP_HI), x));
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(LOG2E)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_HI), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(LN2_LO), r);
    __m512 p = _mm512_set1_ps(EP0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(EP5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, n); /* p * 2^n */
}

AVX512_TARGET static inline __m512 act_vec_avx512(gc_act act, __m512 x)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    switch (act) {
    case GC_ACT_RELU:
        return _mm512_max_ps(_mm512_setzero_ps(), x);
    case GC_ACT_SIGMOID:
        return _mm512_div_ps(one, _mm512_add_ps(one, exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
    case GC_ACT_TANH: {
        const __m512 z = _mm512_abs_ps(x);
        const __m512 e = exp_avx512(_mm512_add_ps(z, z));
        __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
        /* copy the sign of x onto big (bitwise, in the integer domain of AVX-512F) */
        const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
        big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big),
                                                  _mm512_and_si512(sign, _mm512_castps_si512(x))));
        const __m512 x2 = _mm512_mul_ps(x, x);
        __m512 p = _mm512_set1_ps(TH0);
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TH1));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TH2));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TH3));
        p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(TH4));
        const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), x, x);
        const __mmask16 use_big = _mm512_cmp_ps_mask(z, _mm512_set1_ps(TANH_SMALL), _CMP_GT_OQ);
        return _mm512_mask_blend_ps(use_big, small, big);
    }
    default:
        return x;
    }
}

AVX512_TARGET static void act_avx512(gc_act act, float *x, int64_t n)
{
    if (act == GC_ACT_LINEAR)
        return;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, act_vec_avx512(act, _mm512_loadu_ps(x + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);
        _mm512_mask_storeu_ps(x + i, m, act_vec_avx512(act, _mm512_maskz_loadu_ps(m, x + i)));
    }
}

const gc_sgemm_kernel gc_sgemm_kernel_avx512 = {
    "avx512", Z_MR, Z_NR, 256, ukr_avx512, act_avx512,
};

#endif /* x86 */
