/* elementwise.cu -- add and mul on CUDA, f32/f16/bf16 storage, float32 arithmetic.
 *
 * Both go through gc_map_launch (8 elements per thread, 16/32-byte vector accesses when
 * aligned). add sums its 2..8 present operands in input order, ((x0 + x1) + x2) ..., as
 * csrc/cpu/elementwise.c does, so both backends round the same way; the number of
 * operands is a template argument (one instantiation per count) so the sum unrolls.
 * The output may alias the first input (in-place gradient accumulation): each element
 * is loaded, then stored, by the same thread. Launches go to the backend's stream. */
#include "common.cuh"

template <int NI> struct add_f {
    int relu;
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const
    {
        float s = x[0];
#pragma unroll
        for (int k = 1; k < NI; k++) s += x[k];
        y[0] = (relu && s < 0.0f) ? 0.0f : s; /* relu keeps NaN */
    }
};

struct mul_f {
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const { y[0] = x[0] * x[1]; }
};

template <typename T>
static gc_status add_launch(const gc_backend *be, int n_in, int64_t n, const void *const *in, void *const *out,
                            int relu)
{
    switch (n_in) {
    case 2: return gc_map_launch<T, 2, 1>(be, n, in, out, add_f<2>{relu}, "add");
    case 3: return gc_map_launch<T, 3, 1>(be, n, in, out, add_f<3>{relu}, "add");
    case 4: return gc_map_launch<T, 4, 1>(be, n, in, out, add_f<4>{relu}, "add");
    case 5: return gc_map_launch<T, 5, 1>(be, n, in, out, add_f<5>{relu}, "add");
    case 6: return gc_map_launch<T, 6, 1>(be, n, in, out, add_f<6>{relu}, "add");
    case 7: return gc_map_launch<T, 7, 1>(be, n, in, out, add_f<7>{relu}, "add");
    case 8: return gc_map_launch<T, 8, 1>(be, n, in, out, add_f<8>{relu}, "add");
    default: return gc_fail(GC_ERR_INVALID_ARG, "add: %d operands (2 to 8)", n_in);
    }
}

extern "C" gc_status gc_cuda_op_add(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_act_params *p = (const gc_act_params *)call->params;
    const void *in[GC_MAX_OP_IN];
    int n_in = 0;
    for (int k = 0; k < GC_MAX_OP_IN; k++)
        if (call->in[k] && call->in[k]->data) in[n_in++] = call->in[k]->data;
    void *out[1] = {call->out[0]->data};
    const int64_t n = gc_tensor_numel(call->in[0]);
    const int relu = p->act == GC_ACT_RELU;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = add_launch<T>(be, n_in, n, in, out, relu));
    return st;
}

extern "C" gc_status gc_cuda_op_mul(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const void *in[2] = {call->in[0]->data, call->in[1]->data};
    void *out[1] = {call->out[0]->data};
    const int64_t n = gc_tensor_numel(call->in[0]);
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = (gc_map_launch<T, 2, 1>(be, n, in, out, mul_f(), "mul")));
    return st;
}
