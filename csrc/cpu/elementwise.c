/* elementwise.c -- add and mul on the CPU (float32; core widens f16/bf16 storage).
 *
 * add: y = act(x0 + x1 + ...) over up to 8 operands of one element count, summed in
 * float32 in input order (the CUDA kernel adds in the same order, so both backends
 * give the same bits). mul: y = a * b. Either output may alias its first input (the
 * plan accumulates gradients at a fan-out in place): each element is read before it
 * is written, by the same thread. */
#include "cpu_kernels.h"

#define EW_PAR_MIN 32768

gc_status gc_cpu_add(int n_in, const float *const *x, int64_t n, int relu, float *y)
{
    if (n_in < 1 || n_in > GC_MAX_OP_IN) return gc_fail(GC_ERR_INVALID_ARG, "add: %d operands", n_in);
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN)
    for (int64_t i = 0; i < n; i++) {
        float s = x[0][i];
        for (int k = 1; k < n_in; k++) s += x[k][i];
        y[i] = relu && s < 0.0f ? 0.0f : s; /* relu keeps NaN, as act.c */
    }
    return GC_OK;
}

gc_status gc_cpu_op_add(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const float *x[GC_MAX_OP_IN];
    int n_in = 0;
    for (int k = 0; k < GC_MAX_OP_IN; k++)
        if (call->in[k] && call->in[k]->data) x[n_in++] = call->in[k]->data;
    const gc_act_params *p = call->params;
    return gc_cpu_add(n_in, x, gc_tensor_numel(call->in[0]), p->act == GC_ACT_RELU, call->out[0]->data);
}

gc_status gc_cpu_op_mul(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const float *a = call->in[0]->data, *b = call->in[1]->data;
    float *y = call->out[0]->data;
    int64_t n = gc_tensor_numel(call->in[0]);
#pragma omp parallel for schedule(static) if (n >= EW_PAR_MIN)
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
    return GC_OK;
}
