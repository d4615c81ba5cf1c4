/* reduce.c -- reduce_sum on the CPU: y = scale * sum(x), or y += that (accumulate).
 *
 * The plan keeps its loss and metric totals on the backend with this op, so that a
 * step needs no transfer; here the sum runs in double (sequential order: the values
 * are per-row losses, a few thousand at most per call). */
#include "cpu_kernels.h"

gc_status gc_cpu_op_reduce_sum(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_reduce_params *p = call->params;
    const float *x = call->in[0]->data;
    float *y = call->out[0]->data;
    int64_t n = gc_tensor_numel(call->in[0]);
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    s *= p->scale;
    y[0] = p->accumulate ? (float)((double)y[0] + s) : (float)s;
    return GC_OK;
}
