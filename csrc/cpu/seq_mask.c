/* seq_mask.c -- the sequence-mask ops on the CPU (float32; core widens f16/bf16 storage).
 *
 * seq_mask computes Keras' step masks -- any(x != value) over the last axis, the mask of
 * Embedding(mask_zero=True) (F = 1) and of Masking -- as float32 0/1, the form rnn_fwd
 * reads. mul_bcast multiplies a (A, M, C) tensor by a (A, C) float32 factor repeated
 * along M: Masking's output and gradient (C = 1), and the variational dropout of a
 * recurrent layer's inputs, one mask per row reused at every step (M = T). Both are one
 * pass, rows in parallel; mul_bcast may run in place. reverse_seq reverses the middle
 * (time) axis of a (A, T, C) tensor: Bidirectional's backward outputs back in input
 * order, and their gradient (the op is its own inverse). */
#include "cpu_kernels.h"

#include <string.h>

gc_status gc_cpu_op_seq_mask(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_seq_mask_params *p = call->params;
    const gc_tensor *x = call->in[0];
    const int64_t F = x->shape[x->ndim - 1], R = F ? gc_tensor_numel(x) / F : gc_tensor_numel(call->out[0]);
    const float *xs = x->data, v = p->value;
    float *m = call->out[0]->data;
#pragma omp parallel for schedule(static) if (R >= 4096)
    for (int64_t r = 0; r < R; r++) {
        int any = 0;
        for (int64_t f = 0; f < F && !any; f++) any = !(xs[r * F + f] == v); /* NaN != v */
        m[r] = any ? 1.0f : 0.0f;
    }
    return GC_OK;
}

gc_status gc_cpu_op_mul_bcast(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0];
    const int64_t A = x->shape[0], M = x->shape[1], C = x->shape[2];
    const float *xs = x->data, *m = call->in[1]->data;
    float *y = call->out[0]->data;
#pragma omp parallel for schedule(static) if (A * M * C >= 32768)
    for (int64_t a = 0; a < A; a++)
        for (int64_t j = 0; j < M; j++) {
            const int64_t o = (a * M + j) * C;
            for (int64_t c = 0; c < C; c++) y[o + c] = xs[o + c] * m[a * C + c];
        }
    return GC_OK;
}

gc_status gc_cpu_op_reverse_seq(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0];
    const int64_t A = x->shape[0], T = x->shape[1], C = x->shape[2];
    const float *xs = x->data;
    float *y = call->out[0]->data;
#pragma omp parallel for schedule(static) if (A * T * C >= 32768)
    for (int64_t a = 0; a < A; a++)
        for (int64_t t = 0; t < T; t++)
            memcpy(y + (a * T + t) * C, xs + (a * T + (T - 1 - t)) * C, (size_t)C * sizeof *y);
    return GC_OK;
}
