/* act.c -- activations on the CPU: in-place elementwise (also the GEMM / conv epilogue),
 * forward and backward, softmax over the last axis; the act_fwd / act_bwd adapters.
 *
 * Why it is built this way: gc_cpu_act_inplace runs inside the GEMM epilogue, often on
 * one cache-resident tile at a time, so it is a plain sequential loop (no OpenMP, which
 * would cost a fork per tile) that gcc -O3 vectorises without -ffast-math or -march:
 * libm's expf / tanhf are scalar calls, so exp is computed here with a branch-free
 * Cody-Waite reduction and a degree-6 polynomial (Cephes expf coefficients, ~1-2 ulp),
 * the power of two being built from the integer bits. tanh uses a small-|x| odd
 * polynomial (Cephes tanhf) and 1 - 2/(exp(2|x|)+1) above, sigmoid uses e = exp(-|x|)
 * so it never overflows; both saturate exactly for large |x| and propagate NaN.
 * The forward / backward entry points split large arrays into blocks across OpenMP
 * threads. Softmax subtracts the row max and may run in place (y == x).
 */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

/* Work below this many elements stays on one thread (a fork costs more). */
#define ACT_PAR_MIN 32768
#define ACT_BLOCK 4096

/* Branch-free select (c ? a : b) on the bits: with FP operands a ?: would be a branch
 * that gcc may not if-convert under -ftrapping-math (or that jump threading splits). */
static inline float fsel(int c, float a, float b)
{
    uint32_t ia, ib, m = 0u - (uint32_t)(c != 0);
    memcpy(&ia, &a, sizeof ia);
    memcpy(&ib, &b, sizeof ib);
    ia = (ia & m) | (ib & ~m);
    float r;
    memcpy(&r, &ia, sizeof r);
    return r;
}

/* exp(x) for float, vectorisable. Inputs are clamped to [-87.3, 88.3], so results stay
 * normal and finite (exp(-87.3) ~ 1.2e-38 stands in for smaller values); NaN stays NaN. */
static inline float vexpf(float x)
{
    x = fsel(x < -87.3f, -87.3f, x);
    x = fsel(x > 88.3f, 88.3f, x);
    /* n = round(x / ln2) by the 1.5*2^23 trick (round to nearest, no libm call) */
    const float magic = 12582912.0f;
    float kf = x * 1.44269504088896341f + magic;
    float n = kf - magic;
    int32_t kbits, mbits;
    memcpy(&kbits, &kf, sizeof kbits);
    memcpy(&mbits, &magic, sizeof mbits);
    int32_t ni = kbits - mbits;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float r2 = r * r;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r2 + r + 1.0f;
    /* (n + 127) << 23 in unsigned arithmetic: for a NaN input ni is the NaN's bits, and
     * the signed product overflowed (UB); the result is NaN whatever scale is */
    uint32_t sbits = ((uint32_t)ni + 127u) << 23;
    float scale;
    memcpy(&scale, &sbits, sizeof scale);
    return p * scale;
}

static inline float vsigmoidf(float x)
{
    float a = fabsf(x);
    float e = vexpf(-a);
    float s = 1.0f / (1.0f + e);
    return fsel(x < 0.0f, e * s, s);
}

static inline float vtanhf(float x)
{
    float a = fabsf(x);
    /* |x| < 0.625: odd minimax polynomial (Cephes tanhf) */
    float z = x * x;
    float p = -5.70498872745e-3f;
    p = p * z + 2.06390887954e-2f;
    p = p * z - 5.37397155531e-2f;
    p = p * z + 1.33314422036e-1f;
    p = p * z - 3.33332819422e-1f;
    float small = p * z * x + x;
    /* otherwise 1 - 2 / (exp(2|x|) + 1), sign restored */
    float big = 1.0f - 2.0f / (vexpf(2.0f * a) + 1.0f);
    big = fsel(x < 0.0f, -big, big);
    return fsel(a < 0.625f, small, big);
}

void gc_cpu_act_inplace(gc_act act, float *x, int64_t n)
{
    switch (act) {
    case GC_ACT_RELU:
        /* x < 0 ? 0 : x keeps NaN (as tf.nn.relu does) */
        for (int64_t i = 0; i < n; i++) x[i] = x[i] < 0.0f ? 0.0f : x[i];
        break;
    case GC_ACT_TANH:
        for (int64_t i = 0; i < n; i++) x[i] = vtanhf(x[i]);
        break;
    case GC_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) x[i] = vsigmoidf(x[i]);
        break;
    default: /* linear; softmax is not elementwise and is handled by gc_cpu_act_fwd */
        break;
    }
}

/* One softmax row; y may equal x. */
static void softmax_row(int64_t cols, const float *x, float *y)
{
    float mx = x[0];
    {
        float pm[8] = {x[0], x[0], x[0], x[0], x[0], x[0], x[0], x[0]};
        int64_t c = 0;
        for (; c + 8 <= cols; c += 8)
            for (int j = 0; j < 8; j++) pm[j] = x[c + j] > pm[j] ? x[c + j] : pm[j];
        for (; c < cols; c++) mx = x[c] > mx ? x[c] : mx;
        for (int j = 0; j < 8; j++) mx = pm[j] > mx ? pm[j] : mx;
    }
    /* 8 partial sums so that gcc vectorises the reduction without -ffast-math */
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t c = 0;
    for (; c + 8 <= cols; c += 8)
        for (int j = 0; j < 8; j++) {
            float e = vexpf(x[c + j] - mx);
            y[c + j] = e;
            part[j] += e;
        }
    float sum = 0.0f;
    for (; c < cols; c++) {
        float e = vexpf(x[c] - mx);
        y[c] = e;
        sum += e;
    }
    for (int j = 0; j < 8; j++) sum += part[j];
    float inv = 1.0f / sum;
    for (c = 0; c < cols; c++) y[c] *= inv;
}

/* sum_c a[c] * b[c], vectorisable */
static float dot_row(int64_t n, const float *a, const float *b)
{
    float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++) part[j] += a[i + j] * b[i + j];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    for (int j = 0; j < 8; j++) s += part[j];
    return s;
}

gc_status gc_cpu_act_fwd(gc_act act, int64_t rows, int64_t cols, const float *x, float *y)
{
    if ((unsigned)act >= GC_ACT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "act_fwd: unknown activation %d", (int)act);
    if (rows < 0 || cols < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "act_fwd: negative shape (%lld, %lld)",
                       (long long)rows, (long long)cols);
    int64_t n = rows * cols;
    if (n == 0) return GC_OK;
    if (act == GC_ACT_SOFTMAX) {
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN && rows > 1)
        for (int64_t r = 0; r < rows; r++) softmax_row(cols, x + r * cols, y + r * cols);
        return GC_OK;
    }
    int64_t nblk = (n + ACT_BLOCK - 1) / ACT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * ACT_BLOCK, len = n - i0 < ACT_BLOCK ? n - i0 : ACT_BLOCK;
        if (y != x) memcpy(y + i0, x + i0, (size_t)len * sizeof(float));
        gc_cpu_act_inplace(act, y + i0, len);
    }
    return GC_OK;
}

/* dx = dy * act'(y) on a contiguous block */
static void act_bwd_block(gc_act act, int64_t n, const float *y, const float *dy, float *dx)
{
    switch (act) {
    case GC_ACT_RELU:
        for (int64_t i = 0; i < n; i++) {
            float g = dy[i]; /* loaded unconditionally, so the select vectorises */
            dx[i] = y[i] > 0.0f ? g : 0.0f;
        }
        break;
    case GC_ACT_TANH:
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * (1.0f - y[i] * y[i]);
        break;
    case GC_ACT_SIGMOID:
        for (int64_t i = 0; i < n; i++) dx[i] = dy[i] * y[i] * (1.0f - y[i]);
        break;
    default:
        if (dx != dy) memmove(dx, dy, (size_t)n * sizeof(float));
        break;
    }
}

gc_status gc_cpu_act_bwd(gc_act act, int64_t rows, int64_t cols, const float *y,
                         const float *dy, float *dx)
{
    if ((unsigned)act >= GC_ACT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "act_bwd: unknown activation %d", (int)act);
    if (rows < 0 || cols < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "act_bwd: negative shape (%lld, %lld)",
                       (long long)rows, (long long)cols);
    int64_t n = rows * cols;
    if (n == 0) return GC_OK;
    if (act == GC_ACT_SOFTMAX) {
        /* dx = y * (dy - sum(dy * y)); dx may alias dy (the sum is taken first) */
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN && rows > 1)
        for (int64_t r = 0; r < rows; r++) {
            const float *yr = y + r * cols, *gr = dy + r * cols;
            float *dr = dx + r * cols;
            float s = dot_row(cols, gr, yr);
            for (int64_t c = 0; c < cols; c++) dr[c] = yr[c] * (gr[c] - s);
        }
        return GC_OK;
    }
    int64_t nblk = (n + ACT_BLOCK - 1) / ACT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= ACT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i0 = b * ACT_BLOCK, len = n - i0 < ACT_BLOCK ? n - i0 : ACT_BLOCK;
        act_bwd_block(act, len, y + i0, dy + i0, dx + i0);
    }
    return GC_OK;
}

/* ---------------------------------------------------------------- adapters */

/* rows = product of all but the last dim, cols = last dim (a scalar is 1 x 1) */
static void rows_cols(const gc_tensor *t, int64_t *rows, int64_t *cols)
{
    int64_t r = 1;
    for (int d = 0; d + 1 < t->ndim; d++) r *= t->shape[d];
    *cols = t->ndim > 0 ? t->shape[t->ndim - 1] : 1;
    *rows = r;
}

gc_status gc_cpu_op_act_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_act_params *p = (const gc_act_params *)call->params;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0];
    if (!p || !x || !y) return gc_fail(GC_ERR_INVALID_ARG, "act_fwd: missing tensor or params");
    int64_t rows, cols;
    rows_cols(x, &rows, &cols);
    if (rows * cols == 0) return GC_OK;
    if (!x->data || !y->data) return gc_fail(GC_ERR_INVALID_ARG, "act_fwd: tensor without data");
    return gc_cpu_act_fwd(p->act, rows, cols, (const float *)x->data, (float *)y->data);
}

gc_status gc_cpu_op_act_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_act_params *p = (const gc_act_params *)call->params;
    const gc_tensor *y = call->in[0], *dy = call->in[1];
    gc_tensor *dx = call->out[0];
    if (!p || !y || !dy || !dx)
        return gc_fail(GC_ERR_INVALID_ARG, "act_bwd: missing tensor or params");
    int64_t rows, cols;
    rows_cols(y, &rows, &cols);
    if (rows * cols == 0) return GC_OK;
    if (!y->data || !dy->data || !dx->data)
        return gc_fail(GC_ERR_INVALID_ARG, "act_bwd: tensor without data");
    return gc_cpu_act_bwd(p->act, rows, cols, (const float *)y->data, (const float *)dy->data,
                          (float *)dx->data);
}
