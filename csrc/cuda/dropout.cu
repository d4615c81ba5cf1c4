/* dropout.cu -- inverted dropout on CUDA with the counter-based mask of gpucmp.h.
 *
 * Element i is kept iff gc_uniform01(seed, i) >= rate (gc_uniform01_dev in common.cuh
 * is the same hash, bit for bit), kept elements scaled by 1/(1-rate) computed in float,
 * dropped ones +0 even where x is -0, Inf or NaN (as csrc/cpu/dropout.c),
 * so the mask is a pure function of (seed, i): backward regenerates it, no mask is
 * stored, and the CPU and GPU draw identical masks (the standalone test checks this).
 * Rate 0 is a copy. Vectorised through gc_map_launch; in place is allowed. The params'
 * dyn_seed (device memory, gpucmp.h "Dynamic values") is read by the kernel when it runs,
 * so a captured graph replays with a new seed written there.
 */
#include "common.cuh"

struct dropout_f {
    float rate, scale;
    uint64_t seed;
    const uint64_t *dyn_seed; /* not NULL: device memory XORed into seed when the kernel runs */
    __device__ __forceinline__ void operator()(int64_t i, const float *x, float *y) const
    {
        const uint64_t s = dyn_seed ? seed ^ __ldg((const unsigned long long *)dyn_seed) : seed;
        float v = __fmul_rn(x[0], scale); /* a dropped element is +0, whatever x holds */
        y[0] = gc_uniform01_dev(s, (uint64_t)i) >= rate ? v : 0.0f;
    }
};

static gc_status dropout(const gc_backend *be, const gc_op_call *call, const char *what)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_dropout_params *p = (const gc_dropout_params *)call->params;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0];
    int64_t n = gc_tensor_numel(x);
    if (n == 0) return GC_OK;
    if (p->rate == 0.0f) {
        if (x->data != y->data)
            GC_CUDA_TRY(cudaMemcpyAsync(y->data, x->data, (size_t)n * gc_dtype_size(x->dtype),
                                        cudaMemcpyDeviceToDevice, gc_cuda_stream(be)));
        return GC_OK;
    }
    dropout_f f = {p->rate, 1.0f / (1.0f - p->rate), p->seed, p->dyn_seed};
    const void *in[1] = {x->data};
    void *out[1] = {y->data};
    GC_CUDA_DISPATCH_FLOAT(x->dtype, T, st = (gc_map_launch<T, 1, 1>(be, n, in, out, f, what)));
    return st;
}

extern "C" gc_status gc_cuda_op_dropout_fwd(const gc_backend *be, const gc_op_call *call)
{
    return dropout(be, call, "dropout_fwd");
}

extern "C" gc_status gc_cuda_op_dropout_bwd(const gc_backend *be, const gc_op_call *call)
{
    return dropout(be, call, "dropout_bwd");
}
