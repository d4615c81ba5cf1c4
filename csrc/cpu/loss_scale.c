/* loss_scale.c -- the two ops of dynamic loss scaling on the CPU: scale_cast (multiply by
 * a (dynamic) scale while converting between storage dtypes, counting non-finite results)
 * and loss_scale_update (Keras' LossScaleOptimizer bookkeeping after one step).
 *
 * Why ops and not plan code: the plan's loss scale, gradient check and skip decision must
 * live in backend memory so that a step captured into a CUDA graph makes them without a
 * host round trip; the CPU versions do the same arithmetic (float32, one rounding per
 * product, the result rounded once to the output dtype) so both backends agree exactly.
 * scale_cast converts f16/bf16 itself (like cast), in chunks, so core never widens it. */
#include "cpu_kernels.h"

#include <math.h>
#include <string.h>

#define CHUNK 1024

/* the effective multiplier, as the CUDA kernel computes it (float32, one rounding) */
static float effective_scale(const gc_scale_cast_params *p)
{
    if (!p->dyn_scale) return p->scale;
    return p->invert ? p->scale / p->dyn_scale[0] : p->scale * p->dyn_scale[0];
}

static void widen(const void *src, gc_dtype dt, size_t n, float *dst)
{
    if (dt == GC_F16) gc_f16_to_f32(src, dst, n);
    else if (dt == GC_BF16) gc_bf16_to_f32(src, dst, n);
    else memcpy(dst, src, n * sizeof(float));
}

static void narrow(const float *src, gc_dtype dt, size_t n, void *dst)
{
    if (dt == GC_F16) gc_f32_to_f16(src, dst, n);
    else if (dt == GC_BF16) gc_f32_to_bf16(src, dst, n);
    else memcpy(dst, src, n * sizeof(float));
}

gc_status gc_cpu_op_scale_cast(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_scale_cast_params *p = call->params;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0], *bad = call->out[1];
    const size_t n = (size_t)gc_tensor_numel(x);
    const size_t xs = gc_dtype_size(x->dtype), ys = gc_dtype_size(y->dtype);
    const float s = effective_scale(p);
    float buf[CHUNK], back[CHUNK];
    double count = 0.0;
    for (size_t i0 = 0; i0 < n; i0 += CHUNK) {
        size_t m = n - i0 < CHUNK ? n - i0 : CHUNK;
        widen((const char *)x->data + i0 * xs, x->dtype, m, buf);
        for (size_t i = 0; i < m; i++) buf[i] *= s;
        narrow(buf, y->dtype, m, (char *)y->data + i0 * ys);
        if (bad && bad->data) {
            widen((const char *)y->data + i0 * ys, y->dtype, m, back); /* what was stored */
            for (size_t i = 0; i < m; i++) count += !isfinite(back[i]);
        }
    }
    if (bad && bad->data) ((float *)bad->data)[0] += (float)count;
    return GC_OK;
}

gc_status gc_cpu_op_loss_scale_update(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_loss_scale_params *p = call->params;
    float *bad = call->out[0]->data, *state = call->out[1]->data;
    float *dyn = call->out[2] && call->out[2]->data ? (float *)call->out[2]->data : NULL;
    if (bad[0] == 0.0f) {
        if (state[1] + 1.0f >= (float)p->growth_steps) {
            state[0] *= 2.0f;
            state[1] = 0.0f;
        } else {
            state[1] += 1.0f;
        }
        if (dyn) dyn[1] += 1.0f;
    } else {
        state[0] *= 0.5f;
        state[1] = 0.0f;
    }
    bad[0] = 0.0f;
    return GC_OK;
}
