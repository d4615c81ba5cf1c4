/* rnn_fast.c -- the fused CPU recurrence (SimpleRNN, LSTM, GRU reset_after) at three SIMD
 * levels, and the variant point cpu.rnn.simd that picks one.
 *
 * What it provides: gc_cpu_rnn_fast_fwd / _bwd (rnn_fast.h), which rnn.c calls for the
 * cells they cover; the vector activations they use (accurate exp, tanh, sigmoid, and
 * relu / linear / hard_sigmoid with the scalar definitions' NaN behaviour); the probe.
 * The kernels are one text, rnn_fast_kernel.inc, included once per level below with that
 * level's vector type and primitives: AVX-512F, AVX2 + FMA (256-bit), and portable C
 * (one float per "vector", libm for the activations: the statement of what the others
 * compute, and the path of non-x86 builds). GCC target attributes, so the library is
 * built without -march and the level is chosen at run time, as the GEMM's is.
 *
 * Vector exp: x = n ln2 + r, |r| <= ln2/2 (ln2 in two parts), a degree-6 polynomial
 * (Cephes expf's), summed so that the last rounding is the one of 1 + (r + r^2 P(r));
 * 2^n applied with one scaling (AVX-512 scalef) or two exact power-of-two products (AVX2),
 * so overflow gives inf and the subnormal range is rounded once, like libm. tanh: Cephes'
 * odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) above; sigmoid
 * 1 / (1 + exp(-x)), the scalar formula. NaN propagates through all of them (min/max put
 * x second, which they return on NaN).
 */
#include "cpu_kernels.h"
#include "gpucmp_rnn_act.h"
#include "gpucmp_variants.h"
#include "rnn_fast.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define RNN_X86 1
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

/* multiply-adds of a whole recurrence worth a second thread */
#define RNN_FAST_PAR_MIN (1 << 20)

static float *rnn_fast_alloc(int64_t n)
{
    size_t bytes = ((size_t)n * sizeof(float) + 63u) & ~(size_t)63u;
    return (float *)aligned_alloc(64, bytes ? bytes : 64);
}
static void rnn_fast_free(float *p) { free(p); }

/* ------------------------------------------------------------------ portable */
#define NAME(x) x##_generic
#define TGT
#define VW 1
#define VF float
#define V_ZERO 0.0f
#define V_LD(p) (*(p))
#define V_LDA(p) (*(p))
#define V_ST(p, v) (*(p) = (v))
#define V_LDN(p, n) ((n) ? *(p) : 0.0f)
#define V_STN(p, v, n) do { if (n) *(p) = (v); } while (0)
#define V_STS(p, v) (*(p) = (v))
#define V_FENCE() ((void)0)
#define V_SET(x) (x)
#define V_ADD(a, b) ((a) + (b))
#define V_SUB(a, b) ((a) - (b))
#define V_MUL(a, b) ((a) * (b))
#define V_FMA(a, b, c) ((a) * (b) + (c))
#define V_ACT(a, x) gc_rnn_act_apply(a, x)
#define V_DOUT(a, y) gc_rnn_act_dout(a, y)
#define MR_NV(nv) ((nv) == 1 ? 12 : (nv) == 2 ? 6 : (nv) == 3 ? 4 : 3)
#define NVB 4
#define UB_SIMPLE 2
#include "rnn_fast_kernel.inc"
#undef NAME
#undef TGT
#undef VW
#undef VF
#undef V_ZERO
#undef V_LD
#undef V_LDA
#undef V_ST
#undef V_LDN
#undef V_STN
#undef V_STS
#undef V_FENCE
#undef V_SET
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_FMA
#undef V_ACT
#undef V_DOUT
#undef MR_NV
#undef NVB
#undef UB_SIMPLE

#ifdef RNN_X86
/* exp constants (Cephes expf) and tanh's small-argument polynomial (Cephes tanhf) */
#define RX_HI 89.0f   /* above: inf (exp(88.73) > FLT_MAX) */
#define RX_LO -104.0f /* below: 0 (exp(-103.98) < FLT_TRUE_MIN / 2) */
#define RX_LOG2E 1.44269504088896341f
#define RX_LN2_HI 0.693359375f
#define RX_LN2_LO -2.12194440e-4f
#define RX_P0 1.9875691500e-4f
#define RX_P1 1.3981999507e-3f
#define RX_P2 8.3334519073e-3f
#define RX_P3 4.1665795894e-2f
#define RX_P4 1.6666665459e-1f
#define RX_P5 5.0000001201e-1f
#define RT_0 -5.70498872745e-3f
#define RT_1 2.06390887954e-2f
#define RT_2 -5.37397155531e-2f
#define RT_3 1.33314422036e-1f
#define RT_4 -3.33332819422e-1f
#define RT_SMALL 0.625f

/* ------------------------------------------------------------------ AVX-512F */
#define Z_TGT __attribute__((target("avx512f,fma")))

Z_TGT static inline __m512 rz_poly_exp(__m512 x, __m512 *n)
{
    x = _mm512_max_ps(_mm512_set1_ps(RX_LO), _mm512_min_ps(_mm512_set1_ps(RX_HI), x));
    *n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(RX_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(RX_LN2_HI), x);
    r = _mm512_fnmadd_ps(*n, _mm512_set1_ps(RX_LN2_LO), r);
    __m512 p = _mm512_set1_ps(RX_P0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(RX_P1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(RX_P2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(RX_P3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(RX_P4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(RX_P5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r);
    return _mm512_add_ps(p, _mm512_set1_ps(1.0f));
}

Z_TGT static inline __m512 rz_exp(__m512 x)
{
    __m512 n;
    const __m512 p = rz_poly_exp(x, &n);
    return _mm512_scalef_ps(p, n);
}

Z_TGT static inline __m512 rz_tanh(__m512 x)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 z = _mm512_abs_ps(x);
    const __m512 e = rz_exp(_mm512_add_ps(z, z));
    __m512 big = _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(e, one)));
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    big = _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(big), _mm512_and_si512(sign, _mm512_castps_si512(x))));
    const __m512 x2 = _mm512_mul_ps(x, x);
    __m512 p = _mm512_set1_ps(RT_0);
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(RT_1));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(RT_2));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(RT_3));
    p = _mm512_fmadd_ps(p, x2, _mm512_set1_ps(RT_4));
    const __m512 small = _mm512_fmadd_ps(_mm512_mul_ps(p, x2), x, x);
    /* NaN compares false and takes the small branch, which keeps it */
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(z, _mm512_set1_ps(RT_SMALL), _CMP_GT_OQ), small, big);
}

Z_TGT static inline __m512 rz_act(int a, __m512 x)
{
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    switch (a) {
    case GC_RNN_TANH: return rz_tanh(x);
    case GC_RNN_SIGMOID: return _mm512_div_ps(one, _mm512_add_ps(one, rz_exp(_mm512_sub_ps(zero, x))));
    case GC_RNN_RELU: return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(x, zero, _CMP_GT_OQ), x); /* NaN -> 0 */
    case GC_RNN_LINEAR: return x;
    default: {
        const __m512 v = _mm512_fmadd_ps(x, _mm512_set1_ps(1.0f / 6.0f), _mm512_set1_ps(0.5f));
        return _mm512_min_ps(one, _mm512_max_ps(zero, v)); /* NaN stays */
    }
    }
}

Z_TGT static inline __m512 rz_dout(int a, __m512 y)
{
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    switch (a) {
    case GC_RNN_TANH: return _mm512_fnmadd_ps(y, y, one);
    case GC_RNN_SIGMOID: return _mm512_mul_ps(y, _mm512_sub_ps(one, y));
    case GC_RNN_RELU: return _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ), one);
    case GC_RNN_LINEAR: return one;
    default: {
        const __mmask16 in = _mm512_cmp_ps_mask(y, zero, _CMP_GT_OQ) & _mm512_cmp_ps_mask(y, one, _CMP_LT_OQ);
        return _mm512_maskz_mov_ps(in, _mm512_set1_ps(1.0f / 6.0f));
    }
    }
}

#define NAME(x) x##_avx512
#define TGT Z_TGT
#define VW 16
#define VF __m512
#define V_ZERO _mm512_setzero_ps()
#define V_LD(p) _mm512_loadu_ps(p)
#define V_LDA(p) _mm512_load_ps(p)
#define V_ST(p, v) _mm512_storeu_ps(p, v)
#define V_LDN(p, n) _mm512_maskz_loadu_ps((__mmask16)((1u << (n)) - 1u), p)
#define V_STN(p, v, n) _mm512_mask_storeu_ps(p, (__mmask16)((1u << (n)) - 1u), v)
#define V_STS(p, v) _mm512_stream_ps(p, v)
#define V_FENCE() _mm_sfence()
#define V_SET(x) _mm512_set1_ps(x)
#define V_ADD(a, b) _mm512_add_ps(a, b)
#define V_SUB(a, b) _mm512_sub_ps(a, b)
#define V_MUL(a, b) _mm512_mul_ps(a, b)
#define V_FMA(a, b, c) _mm512_fmadd_ps(a, b, c)
#define V_ACT(a, x) rz_act(a, x)
#define V_DOUT(a, y) rz_dout(a, y)
#define MR_NV(nv) ((nv) == 1 ? 12 : (nv) == 2 ? 12 : (nv) == 3 ? 8 : 6)
#define NVB 4
#define UB_SIMPLE 2
#include "rnn_fast_kernel.inc"
#undef NAME
#undef TGT
#undef VW
#undef VF
#undef V_ZERO
#undef V_LD
#undef V_LDA
#undef V_ST
#undef V_LDN
#undef V_STN
#undef V_STS
#undef V_FENCE
#undef V_SET
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_FMA
#undef V_ACT
#undef V_DOUT
#undef MR_NV
#undef NVB
#undef UB_SIMPLE

/* ------------------------------------------------------------------ AVX2 + FMA */
#define Y_TGT __attribute__((target("avx2,fma")))

Y_TGT static inline __m256 ry_exp(__m256 x)
{
    x = _mm256_max_ps(_mm256_set1_ps(RX_LO), _mm256_min_ps(_mm256_set1_ps(RX_HI), x));
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(RX_LOG2E)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(RX_LN2_HI), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(RX_LN2_LO), r);
    __m256 p = _mm256_set1_ps(RX_P0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(RX_P1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(RX_P2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(RX_P3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(RX_P4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(RX_P5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r);
    p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
    /* 2^n = 2^n1 * 2^n2, both normal for n in [-150, 129]: inf and subnormals as libm */
    const __m256i ni = _mm256_cvtps_epi32(n), n1 = _mm256_srai_epi32(ni, 1), n2 = _mm256_sub_epi32(ni, n1);
    const __m256i bias = _mm256_set1_epi32(127);
    const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
    const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
    return _mm256_mul_ps(_mm256_mul_ps(p, s1), s2);
}

Y_TGT static inline __m256 ry_tanh(__m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f), sign = _mm256_set1_ps(-0.0f);
    const __m256 z = _mm256_andnot_ps(sign, x);
    const __m256 e = ry_exp(_mm256_add_ps(z, z));
    __m256 big = _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(e, one)));
    big = _mm256_or_ps(big, _mm256_and_ps(sign, x));
    const __m256 x2 = _mm256_mul_ps(x, x);
    __m256 p = _mm256_set1_ps(RT_0);
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(RT_1));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(RT_2));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(RT_3));
    p = _mm256_fmadd_ps(p, x2, _mm256_set1_ps(RT_4));
    const __m256 small = _mm256_fmadd_ps(_mm256_mul_ps(p, x2), x, x);
    return _mm256_blendv_ps(small, big, _mm256_cmp_ps(z, _mm256_set1_ps(RT_SMALL), _CMP_GT_OQ));
}

Y_TGT static inline __m256 ry_act(int a, __m256 x)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    switch (a) {
    case GC_RNN_TANH: return ry_tanh(x);
    case GC_RNN_SIGMOID: return _mm256_div_ps(one, _mm256_add_ps(one, ry_exp(_mm256_sub_ps(zero, x))));
    case GC_RNN_RELU: return _mm256_and_ps(_mm256_cmp_ps(x, zero, _CMP_GT_OQ), x);
    case GC_RNN_LINEAR: return x;
    default: {
        const __m256 v = _mm256_fmadd_ps(x, _mm256_set1_ps(1.0f / 6.0f), _mm256_set1_ps(0.5f));
        return _mm256_min_ps(one, _mm256_max_ps(zero, v));
    }
    }
}

Y_TGT static inline __m256 ry_dout(int a, __m256 y)
{
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    switch (a) {
    case GC_RNN_TANH: return _mm256_fnmadd_ps(y, y, one);
    case GC_RNN_SIGMOID: return _mm256_mul_ps(y, _mm256_sub_ps(one, y));
    case GC_RNN_RELU: return _mm256_and_ps(_mm256_cmp_ps(y, zero, _CMP_GT_OQ), one);
    case GC_RNN_LINEAR: return one;
    default: {
        const __m256 in = _mm256_and_ps(_mm256_cmp_ps(y, zero, _CMP_GT_OQ), _mm256_cmp_ps(y, one, _CMP_LT_OQ));
        return _mm256_and_ps(in, _mm256_set1_ps(1.0f / 6.0f));
    }
    }
}

/* lane masks for n < 8 lanes: 8 ints from 8 - n */
static const int32_t ry_tail[16] = {-1, -1, -1, -1, -1, -1, -1, -1, 0, 0, 0, 0, 0, 0, 0, 0};
#define RY_MASK(n) _mm256_loadu_si256((const __m256i *)(ry_tail + 8 - (n)))

#define NAME(x) x##_avx2
#define TGT Y_TGT
#define VW 8
#define VF __m256
#define V_ZERO _mm256_setzero_ps()
#define V_LD(p) _mm256_loadu_ps(p)
#define V_LDA(p) _mm256_load_ps(p)
#define V_ST(p, v) _mm256_storeu_ps(p, v)
#define V_LDN(p, n) _mm256_maskload_ps(p, RY_MASK(n))
#define V_STN(p, v, n) _mm256_maskstore_ps(p, RY_MASK(n), v)
#define V_STS(p, v) _mm256_stream_ps(p, v)
#define V_FENCE() _mm_sfence()
#define V_SET(x) _mm256_set1_ps(x)
#define V_ADD(a, b) _mm256_add_ps(a, b)
#define V_SUB(a, b) _mm256_sub_ps(a, b)
#define V_MUL(a, b) _mm256_mul_ps(a, b)
#define V_FMA(a, b, c) _mm256_fmadd_ps(a, b, c)
#define V_ACT(a, x) ry_act(a, x)
#define V_DOUT(a, y) ry_dout(a, y)
#define MR_NV(nv) ((nv) == 1 ? 8 : (nv) == 2 ? 6 : (nv) == 3 ? 4 : 3)
#define NVB 2
#define UB_SIMPLE 2
#include "rnn_fast_kernel.inc"
#undef NAME
#undef TGT
#undef VW
#undef VF
#undef V_ZERO
#undef V_LD
#undef V_LDA
#undef V_ST
#undef V_LDN
#undef V_STN
#undef V_STS
#undef V_FENCE
#undef V_SET
#undef V_ADD
#undef V_SUB
#undef V_MUL
#undef V_FMA
#undef V_ACT
#undef V_DOUT
#undef MR_NV
#undef NVB
#undef UB_SIMPLE
#endif /* RNN_X86 */

/* ------------------------------------------------------------------ the variant point */

static int rnn_supported(int v)
{
#ifdef RNN_X86
    __builtin_cpu_init();
    if (v == GC_V_CRNN_AVX512) return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
    if (v == GC_V_CRNN_AVX2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    return v == GC_V_CRNN_GENERIC || v == GC_V_CRNN_STEPWISE;
}

static atomic_int rnn_auto = -1;

int gc_cpu_rnn_variant(void)
{
    gc_cpu_register_variants();
    const int f = gc_variant_forced(GC_VP_CPU_RNN_SIMD);
    if (f != GC_V_CRNN_AUTO && rnn_supported(f)) return f;
    int v = atomic_load_explicit(&rnn_auto, memory_order_acquire);
    if (v < 0) {
        v = GC_V_CRNN_GENERIC;
        for (int c = GC_V_CRNN_AVX512; c < GC_V_CRNN_GENERIC; c++)
            if (rnn_supported(c)) {
                v = c;
                break;
            }
        atomic_store_explicit(&rnn_auto, v, memory_order_release);
    }
    return v;
}

int gc_cpu_rnn_fast_covers(const gc_rnn_params *p, const float *rmask)
{
    return !rmask && (p->cell == GC_RNN_SIMPLE || p->cell == GC_RNN_LSTM || p->cell == GC_RNN_GRU);
}

gc_status gc_cpu_rnn_fast_fwd(int v, const gc_rnn_fwd_job *j)
{
    switch (v) {
#ifdef RNN_X86
    case GC_V_CRNN_AVX512: return fwd_avx512(j);
    case GC_V_CRNN_AVX2: return fwd_avx2(j);
#endif
    case GC_V_CRNN_GENERIC: return fwd_generic(j);
    default: return gc_fail(GC_ERR_UNSUPPORTED, "rnn_fwd: no fused kernel for variant %d", v);
    }
}

gc_status gc_cpu_rnn_fast_bwd(int v, const gc_rnn_bwd_job *j)
{
    switch (v) {
#ifdef RNN_X86
    case GC_V_CRNN_AVX512: return bwd_avx512(j);
    case GC_V_CRNN_AVX2: return bwd_avx2(j);
#endif
    case GC_V_CRNN_GENERIC: return bwd_generic(j);
    default: return gc_fail(GC_ERR_UNSUPPORTED, "rnn_bwd: no fused kernel for variant %d", v);
    }
}

gc_status gc_cpu_rnn_vact(int v, gc_rnn_act act, int deriv, const float *x, float *y, int64_t n)
{
    if (!rnn_supported(v) || v == GC_V_CRNN_STEPWISE || v == GC_V_CRNN_AUTO)
        return gc_fail(GC_ERR_UNSUPPORTED, "rnn vact: variant %d is not a SIMD level this CPU runs", v);
    switch (v) {
#ifdef RNN_X86
    case GC_V_CRNN_AVX512: vact_avx512(act, deriv, x, y, n); break;
    case GC_V_CRNN_AVX2: vact_avx2(act, deriv, x, y, n); break;
#endif
    default: vact_generic(act, deriv, x, y, n); break;
    }
    return GC_OK;
}
