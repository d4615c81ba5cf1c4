/* loss_scale.cu -- dynamic loss scaling on CUDA: scale_cast (y = x * s between storage
 * dtypes, counting non-finite results into a device flag), its multi-tensor form
 * (gc_cuda_cast_multi: the backend's cast_multi, one launch for a plan's weight casts or
 * gradient conversions) and loss_scale_update (Keras' LossScaleOptimizer bookkeeping,
 * one thread).
 *
 * Both read the loss scale from device memory and decide on the device whether a step is
 * skipped, so a captured training step replays without any host round trip. The
 * arithmetic is csrc/cpu/loss_scale.c's (float32, __fmul_rn / __fdiv_rn so nothing is
 * contracted, one rounding to the output dtype): both backends give the same bits. The
 * non-finite count is added with one atomicAdd per block of an integer-valued float, so
 * it is exact and order-independent. */
#include "common.cuh"

#define SC_THREADS 256

static __global__ void __launch_bounds__(SC_THREADS) scale_cast_kernel(const void *x, int xdt, void *y, int ydt,
                                                                       int64_t n, float scale, const float *dyn,
                                                                       int invert, float *bad)
{
    float s = scale;
    if (dyn) s = invert ? __fdiv_rn(scale, __ldg(dyn)) : __fmul_rn(scale, __ldg(dyn));
    int cnt = 0;
    for (int64_t i = (int64_t)blockIdx.x * SC_THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * SC_THREADS) {
        gc_st(y, ydt, i, __fmul_rn(gc_ld(x, xdt, i), s));
        if (bad) cnt += !isfinite(gc_ld(y, ydt, i));
    }
    if (!bad) return;
    __shared__ int block_cnt;
    if (threadIdx.x == 0) block_cnt = 0;
    __syncthreads();
    if (cnt) atomicAdd(&block_cnt, cnt);
    __syncthreads();
    if (threadIdx.x == 0 && block_cnt) atomicAdd(bad, (float)block_cnt);
}

/* The same over a table of tensors: all threads stride over slot 0, then slot 1, ...;
 * one count per block over all of them. */
static __global__ void __launch_bounds__(SC_THREADS) cast_multi_kernel(const gc_cast_slot *slots, int n_slots,
                                                                       float scale, const float *dyn, int invert,
                                                                       float *bad)
{
    float s = scale;
    if (dyn) s = invert ? __fdiv_rn(scale, __ldg(dyn)) : __fmul_rn(scale, __ldg(dyn));
    int cnt = 0;
    const int64_t tid = (int64_t)blockIdx.x * SC_THREADS + threadIdx.x, stride = (int64_t)gridDim.x * SC_THREADS;
    for (int k = 0; k < n_slots; k++) {
        const gc_cast_slot sl = slots[k];
        for (int64_t i = tid; i < sl.n; i += stride) {
            gc_st(sl.y, sl.ydt, i, __fmul_rn(gc_ld(sl.x, sl.xdt, i), s));
            if (bad) cnt += !isfinite(gc_ld(sl.y, sl.ydt, i));
        }
    }
    if (!bad) return;
    __shared__ int block_cnt;
    if (threadIdx.x == 0) block_cnt = 0;
    __syncthreads();
    if (cnt) atomicAdd(&block_cnt, cnt);
    __syncthreads();
    if (threadIdx.x == 0 && block_cnt) atomicAdd(bad, (float)block_cnt);
}

extern "C" gc_status gc_cuda_cast_multi(const gc_backend *be, const gc_cast_slot *slots, int n_slots, int64_t max_n,
                                        float scale, const float *dyn, int invert, float *bad)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (n_slots <= 0 || max_n <= 0) return GC_OK;
    if (!slots) return gc_fail(GC_ERR_INVALID_ARG, "cast_multi: needs the slots (device memory)");
    int64_t b = (max_n + SC_THREADS - 1) / SC_THREADS;
    const int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 8;
    if (b > cap) b = cap;
    cast_multi_kernel<<<(unsigned)b, SC_THREADS, 0, gc_cuda_stream(be)>>>(slots, n_slots, scale, dyn, invert, bad);
    return gc_cuda_launch_check("cast_multi");
}

extern "C" gc_status gc_cuda_op_scale_cast(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_scale_cast_params *p = (const gc_scale_cast_params *)call->params;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0], *bad = call->out[1];
    const int64_t n = gc_tensor_numel(x);
    if (n == 0) return GC_OK;
    int64_t b = (n + SC_THREADS - 1) / SC_THREADS;
    const int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 8;
    if (b > cap) b = cap;
    scale_cast_kernel<<<(unsigned)b, SC_THREADS, 0, gc_cuda_stream(be)>>>(
        x->data, (int)x->dtype, y->data, (int)y->dtype, n, p->scale, p->dyn_scale, p->invert,
        bad && bad->data ? (float *)bad->data : NULL);
    return gc_cuda_launch_check("scale_cast");
}

static __global__ void loss_scale_update_kernel(float *bad, float *state, float *dyn, int growth)
{
    if (bad[0] == 0.0f) {
        if (state[1] + 1.0f >= (float)growth) {
            state[0] = __fmul_rn(state[0], 2.0f);
            state[1] = 0.0f;
        } else {
            state[1] += 1.0f;
        }
        if (dyn) dyn[1] += 1.0f;
    } else {
        state[0] = __fmul_rn(state[0], 0.5f);
        state[1] = 0.0f;
    }
    bad[0] = 0.0f;
}

extern "C" gc_status gc_cuda_op_loss_scale_update(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_loss_scale_params *p = (const gc_loss_scale_params *)call->params;
    float *dyn = call->out[2] && call->out[2]->data ? (float *)call->out[2]->data : NULL;
    loss_scale_update_kernel<<<1, 1, 0, gc_cuda_stream(be)>>>((float *)call->out[0]->data,
                                                              (float *)call->out[1]->data, dyn, p->growth_steps);
    return gc_cuda_launch_check("loss_scale_update");
}
