/* op_run.c -- the one entry point that runs an op: validate in core, then dispatch to
 * the backend's slot.
 *
 * Storage dtypes a backend does not take natively (f16/bf16 on the CPU) are widened
 * to float32 temporaries through the backend's own cast op, computed in f32 and
 * narrowed back, so that every backend gets the same "convert at the edges" rule and
 * works on its own memory (the cast op takes every float dtype on every backend).
 * int32 tensors (labels, indices, integer tables) are never converted; embedding_fwd is
 * never converted either (a gather is exact in any dtype), while embedding_bwd is
 * (it sums in float32). One cleanup path frees the temporaries whatever happened. */
#include "gpucmp.h"

#include <string.h>

static int is_float(gc_dtype d) { return d == GC_F32 || d == GC_F16 || d == GC_BF16; }

static gc_status cast(const gc_backend *be, const gc_tensor *src, gc_tensor *dst)
{
    gc_no_params none = {0};
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = GC_OP_CAST;
    c.in[0] = src;
    c.out[0] = dst;
    c.params = &none;
    return be->ops[GC_OP_CAST](be, &c);
}

static int allow_tf32 = 1;
void gc_set_allow_tf32(int allow) { allow_tf32 = allow != 0; }
int gc_get_allow_tf32(void) { return allow_tf32; }

static int uses_vendor(const gc_op_call *c)
{
    switch (c->op) {
    case GC_OP_GEMM: return ((const gc_gemm_params *)c->params)->impl != GC_IMPL_OWN;
    case GC_OP_CONV2D_FWD:
    case GC_OP_CONV2D_BWD_DATA:
    case GC_OP_CONV2D_BWD_FILTER: return ((const gc_conv2d_params *)c->params)->impl != GC_IMPL_OWN;
    default: return 0;
    }
}

gc_status gc_op_run(const gc_backend *be, const gc_op_call *call)
{
    gc_status s = gc_op_validate(call);
    if (s) return s;
    if (!be) return gc_fail(GC_ERR_INVALID_ARG, "%s: no backend given", gc_op_name(call->op));
    if (!be->capture_begin && uses_vendor(call)) /* host backends have no vendor baseline */
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: impl='vendor' (cuBLAS / cuDNN) needs a GPU backend, not '%s'",
                       gc_op_name(call->op), be->name);
    gc_op_fn fn = be->ops[call->op];
    if (!fn)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: not implemented on backend '%s'",
                       gc_op_name(call->op), be->name);

    int nin = gc_op_num_inputs(call->op), nout = gc_op_num_outputs(call->op);
    int needs = 0;
    /* cast and scale_cast convert by definition; embedding_fwd is a gather that copies rows by
     * element size, so it takes every dtype as stored (int32 tables included: only
     * float dtypes are ever widened here) */
    if (call->op != GC_OP_CAST && call->op != GC_OP_SCALE_CAST && call->op != GC_OP_EMBEDDING_FWD) {
        for (int k = 0; k < nin + nout; k++) {
            const gc_tensor *t = k < nin ? call->in[k] : call->out[k - nin];
            if (t && t->data && is_float(t->dtype) && !(be->native_dtypes & (1u << t->dtype)))
                needs = 1;
        }
    }
    if (!needs) return fn(be, call);
    if (!be->ops[GC_OP_CAST])
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: backend '%s' cannot convert storage dtypes",
                       gc_op_name(call->op), be->name);

    gc_tensor wide[GC_MAX_OP_IN + GC_MAX_OP_OUT];
    void *tmp[GC_MAX_OP_IN + GC_MAX_OP_OUT] = {0};
    gc_op_call c = *call;
    gc_batchnorm_params bn;
    if (call->op == GC_OP_BATCHNORM_BWD) { /* a recomputed relu mask rounds as x was stored */
        bn = *(const gc_batchnorm_params *)call->params;
        bn.mask_dtype = call->in[0]->dtype;
        c.params = &bn;
    }
    for (int k = 0; k < nin + nout && s == GC_OK; k++) {
        const gc_tensor *t = k < nin ? call->in[k] : call->out[k - nin];
        if (!(t && t->data && is_float(t->dtype) && !(be->native_dtypes & (1u << t->dtype))))
            continue;
        wide[k] = *t;
        wide[k].dtype = GC_F32;
        size_t nbytes = (size_t)gc_tensor_numel(t) * 4u;
        s = be->alloc(be, nbytes ? nbytes : 4u, &tmp[k]);
        if (s) break;
        wide[k].data = tmp[k];
        /* outputs are widened too: gemm's beta and the optimizers read them */
        s = cast(be, t, &wide[k]);
        if (k < nin) c.in[k] = &wide[k];
        else c.out[k - nin] = &wide[k];
    }
    if (s == GC_OK) s = fn(be, &c);
    for (int k = nin; k < nin + nout && s == GC_OK; k++)
        if (tmp[k]) s = cast(be, &wide[k], call->out[k - nin]);
    for (int k = 0; k < nin + nout; k++)
        if (tmp[k]) be->release(be, tmp[k]);
    return s;
}
