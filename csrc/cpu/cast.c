/* cast.c -- the cast op on the CPU: any float storage dtype to any other, and float to
 * int32 (truncation toward zero: Embedding's ids).
 *
 * Core relies on it to widen f16/bf16 storage to float32 before a kernel and narrow
 * the results after, so it converts between every pair itself (round to nearest even
 * via core/dtype.c) and is the one op core never converts for. */
#include "cpu_kernels.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* float -> int32 as Keras casts ids: truncation toward zero; NaN and values outside
 * the int32 range become INT32_MIN, which every index check rejects. */
static int32_t f_to_i32(float v)
{
    if (!(v > -2147483648.0f && v < 2147483648.0f)) return INT32_MIN;
    return (int32_t)v;
}

static gc_status cast_to_int32(const gc_tensor *x, gc_tensor *y, size_t n)
{
    int32_t *out = y->data;
    if (x->dtype == GC_F32) {
        const float *in = x->data;
        for (size_t i = 0; i < n; i++) out[i] = f_to_i32(in[i]);
        return GC_OK;
    }
    float buf[256];
    for (size_t i = 0; i < n; i += 256) {
        size_t m = n - i < 256 ? n - i : 256;
        if (x->dtype == GC_F16) gc_f16_to_f32((const uint16_t *)x->data + i, buf, m);
        else gc_bf16_to_f32((const uint16_t *)x->data + i, buf, m);
        for (size_t j = 0; j < m; j++) out[i + j] = f_to_i32(buf[j]);
    }
    return GC_OK;
}

gc_status gc_cpu_op_cast(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0];
    size_t n = (size_t)gc_tensor_numel(x);
    if (x->dtype == y->dtype) {
        if (x->data != y->data) memmove(y->data, x->data, n * gc_dtype_size(x->dtype));
        return GC_OK;
    }
    const float *src = x->data;
    float *wide = NULL;
    if (y->dtype == GC_I32) return cast_to_int32(x, y, n);
    if (x->dtype != GC_F32) {
        float *dst = y->dtype == GC_F32 ? (float *)y->data : NULL;
        if (!dst) {
            wide = malloc(n ? n * sizeof(float) : sizeof(float));
            if (!wide) return gc_fail(GC_ERR_NOMEM, "cast: cannot allocate %zu floats", n);
            dst = wide;
        }
        if (x->dtype == GC_F16) gc_f16_to_f32(x->data, dst, n);
        else gc_bf16_to_f32(x->data, dst, n);
        src = dst;
    }
    if (y->dtype == GC_F16) gc_f32_to_f16(src, y->data, n);
    else if (y->dtype == GC_BF16) gc_f32_to_bf16(src, y->data, n);
    free(wide);
    return GC_OK;
}
