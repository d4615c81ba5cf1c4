/* dtype.c -- dtype sizes and names, tensor helpers, and float16 / bfloat16 storage
 * conversions (round to nearest even, NaN kept quiet, overflow to Inf).
 *
 * The scalar code is plain C with bit manipulation, so the one binary runs on any
 * x86-64 or ARM machine, and it defines the results (NaN bits included). On x86-64
 * with F16C (chosen at run time) float16 is converted 8 values at a time with the same
 * results: mixed_float16 on the CPU converts every activation at every op. */
#include "gpucmp.h"

#include <string.h>

size_t gc_dtype_size(gc_dtype t)
{
    switch (t) {
    case GC_F32: return 4;
    case GC_F16: return 2;
    case GC_BF16: return 2;
    case GC_I32: return 4;
    default: return 0;
    }
}

const char *gc_dtype_name(gc_dtype t)
{
    switch (t) {
    case GC_F32: return "float32";
    case GC_F16: return "float16";
    case GC_BF16: return "bfloat16";
    case GC_I32: return "int32";
    default: return "unknown";
    }
}

int64_t gc_tensor_numel(const gc_tensor *t)
{
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

gc_tensor gc_tensor_make(void *data, gc_dtype dtype, int ndim, const int64_t *shape)
{
    gc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dtype;
    t.ndim = ndim;
    for (int i = 0; i < ndim && i < GC_MAX_DIMS; i++) t.shape[i] = shape[i];
    return t;
}

static inline uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t f32_to_f16_one(float f)
{
    uint32_t x = f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t absx = x & 0x7FFFFFFFu;
    if (absx >= 0x7F800000u) /* Inf or NaN */
        return (uint16_t)(sign | 0x7C00u | (absx > 0x7F800000u ? 0x200u : 0u));
    if (absx >= 0x477FF000u) /* rounds to >= 65520: overflow */
        return (uint16_t)(sign | 0x7C00u);
    if (absx < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        if (absx < 0x33000000u) return (uint16_t)sign; /* < 2^-25 rounds to zero */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7FFFFFu) | 0x800000u;
        uint32_t shift = 126u - e; /* 14..24 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t mid = 1u << (shift - 1u);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t h = ((absx >> 13) - (112u << 10));
    uint32_t rem = absx & 0x1FFFu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}

static float f16_to_f32_one(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1Fu;
    uint32_t m = h & 0x3FFu;
    if (e == 0x1Fu) return bits_f32(sign | 0x7F800000u | (m << 13));
    if (e == 0) {
        if (m == 0) return bits_f32(sign);
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return sign ? -v : v;
    }
    return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
/* F16C: 8 values per instruction, round to nearest even like the scalar code; a group
 * holding a NaN goes through the scalar code, whose NaN bits are the contract (the
 * hardware would keep NaN payloads). Chosen at run time, so the binary still runs
 * without F16C. */
__attribute__((target("avx,f16c"))) static size_t f32_to_f16_f16c(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(src + i);
        if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q))) {
            for (size_t k = i; k < i + 8; k++) dst[k] = f32_to_f16_one(src[k]);
            continue;
        }
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
    return i;
}

__attribute__((target("avx,f16c"))) static size_t f16_to_f32_f16c(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
    const __m128i expo = _mm_set1_epi16(0x7C00);
    for (; i + 8 <= n; i += 8) {
        __m128i h = _mm_loadu_si128((const __m128i *)(src + i));
        /* a NaN: exponent all ones and a mantissa (Inf converts exactly either way) */
        __m128i e = _mm_cmpeq_epi16(_mm_and_si128(h, expo), expo);
        __m128i m = _mm_andnot_si128(_mm_cmpeq_epi16(_mm_and_si128(h, _mm_set1_epi16(0x03FF)), _mm_setzero_si128()),
                                     _mm_set1_epi16(-1));
        if (_mm_movemask_epi8(_mm_and_si128(e, m))) {
            for (size_t k = i; k < i + 8; k++) dst[k] = f16_to_f32_one(src[k]);
            continue;
        }
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
    }
    return i;
}

static int have_f16c(void)
{
    static int cached = -1;
    if (cached < 0) cached = __builtin_cpu_supports("f16c") && __builtin_cpu_supports("avx");
    return cached;
}
#endif

void gc_f32_to_f16(const float *src, uint16_t *dst, size_t n)
{
    size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_f16c()) i = f32_to_f16_f16c(src, dst, n);
#endif
    for (; i < n; i++) dst[i] = f32_to_f16_one(src[i]);
}

void gc_f16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    size_t i = 0;
#if defined(__x86_64__) && defined(__GNUC__)
    if (have_f16c()) i = f16_to_f32_f16c(src, dst, n);
#endif
    for (; i < n; i++) dst[i] = f16_to_f32_one(src[i]);
}

void gc_f32_to_bf16(const float *src, uint16_t *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = f32_bits(src[i]);
        if ((x & 0x7FFFFFFFu) > 0x7F800000u) { /* NaN stays a quiet NaN */
            dst[i] = (uint16_t)((x >> 16) | 0x40u);
            continue;
        }
        x += 0x7FFFu + ((x >> 16) & 1u);
        dst[i] = (uint16_t)(x >> 16);
    }
}

void gc_bf16_to_f32(const uint16_t *src, float *dst, size_t n)
{
    for (size_t i = 0; i < n; i++) dst[i] = bits_f32((uint32_t)src[i] << 16);
}
