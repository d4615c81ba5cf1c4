/* weight_grads.cu -- the weight_grads op on CUDA: dw = x^T g, du = h^T g, db = the column
 * sums of g (gpucmp.h), a recurrent layer's dW, dU and db from one dz.
 *
 * What it provides: gc_cuda_op_weight_grads, the op-table slot. It runs the GEMM op twice
 * and then bias_grad, as the plan did before the op existed. The CPU stacks the two
 * products because its packing of g is a pass over memory; here each GEMM reads g through
 * its own tiles anyway. A file of its own, so that the test programs linking gemm.cu do
 * not need loss.cu's bias_grad. */
#include "common.cuh"

#include <string.h>

static gc_op_call call_of(gc_op op, const void *params, const gc_tensor *in0, const gc_tensor *in1, gc_tensor *out0)
{
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = op;
    c.params = params;
    c.in[0] = in0;
    c.in[1] = in1;
    c.out[0] = out0;
    return c;
}

extern "C" gc_status gc_cuda_op_weight_grads(const gc_backend *be, const gc_op_call *call)
{
    const gc_tensor *x = call->in[0], *h = call->in[1], *g = call->in[2];
    gc_tensor *dw = call->out[0], *du = call->out[1], *db = call->out[2];
    gc_gemm_params gp;
    memset(&gp, 0, sizeof gp);
    gp.trans_a = 1;
    gp.alpha = 1.0f;
    gp.act = GC_ACT_LINEAR;
    gp.impl = GC_IMPL_OWN;
    gc_no_params none;
    memset(&none, 0, sizeof none);
    gc_op_call c = call_of(GC_OP_GEMM, &gp, x, g, dw);
    gc_status st = gc_cuda_op_gemm(be, &c);
    if (st == GC_OK && h && h->data) {
        c = call_of(GC_OP_GEMM, &gp, h, g, du);
        st = gc_cuda_op_gemm(be, &c);
    }
    if (st == GC_OK && db && db->data) {
        c = call_of(GC_OP_BIAS_GRAD, &none, g, NULL, db);
        st = gc_cuda_op_bias_grad(be, &c);
    }
    return st;
}
