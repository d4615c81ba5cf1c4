/* reduce.cu -- reduce_sum on CUDA: y = scale * sum(x), or y += that (accumulate).
 *
 * The plan accumulates its loss and metric totals on the device with this op, inside
 * captured steps, so it must be deterministic and capturable: one block sums in double
 * with a fixed thread-to-element map and a fixed-order tree; no atomics, no host sync.
 * The inputs are small (per-row losses of one batch), so one block is enough. */
#include "common.cuh"

#define REDUCE_THREADS 256

static __global__ void reduce_sum_kernel(const void *x, int dt, int64_t n, float *y, float scale,
                                         int accumulate)
{
    __shared__ double part[REDUCE_THREADS];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += REDUCE_THREADS) s += (double)gc_ld(x, dt, i);
    part[threadIdx.x] = s;
    __syncthreads();
    for (int w = REDUCE_THREADS / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) part[threadIdx.x] += part[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        double t = part[0] * (double)scale;
        y[0] = accumulate ? (float)((double)y[0] + t) : (float)t;
    }
}

extern "C" gc_status gc_cuda_op_reduce_sum(const gc_backend *be, const gc_op_call *call)
{
    gc_status s = gc_cuda_set_device(be);
    if (s) return s;
    const gc_reduce_params *p = (const gc_reduce_params *)call->params;
    const gc_tensor *x = call->in[0];
    reduce_sum_kernel<<<1, REDUCE_THREADS, 0, gc_cuda_stream(be)>>>(
        x->data, (int)x->dtype, gc_tensor_numel(x), (float *)call->out[0]->data, p->scale, p->accumulate);
    return gc_cuda_launch_check("reduce_sum");
}
