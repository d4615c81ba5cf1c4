/* cast.c -- the cast op on the CPU: any float storage dtype to any other.
 *
 * Core relies on it to widen f16/bf16 storage to float32 before a kernel and narrow
 * the results after, so it converts between every pair itself (round to nearest even
 * via core/dtype.c) and is the one op core never converts for. */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>

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
