/* optim.cu -- optimizer updates on CUDA (Adam, SGD with optional (Nesterov) momentum,
 * RMSprop), in place, per tensor (the op-table adapters) and fused over many tensors
 * (gc_cuda_optim_multi).
 *
 * The formulas and their operation order are those of csrc/cpu/optim.c (Keras 3), in
 * float32 with every product, sum, quotient and square root rounded separately
 * (__fmul_rn / __fadd_rn / __fdiv_rn / __fsqrt_rn, so nvcc cannot contract them into
 * FMAs): on f32 storage the GPU update is bit-identical to the CPU's. Adam's bias
 * correction alpha = lr*sqrt(1-b2^t)/(1-b1^t) is computed in double, like the CPU, and
 * the moments' factors 1 - beta as Keras 3 rounds them (gc_one_minus, on the host).
 * Per-tensor updates are one gc_map_launch each (vectorised). The fused variant walks
 * a device array of (w, g, state) slots in one launch and reads its hyper-parameters
 * from device memory, so a captured CUDA graph replays it with a new learning rate and
 * step t written into that memory between replays; the per-tensor ops do the same
 * through the params' `dyn` pointer (gpucmp.h, "Dynamic values").
 */
#include "common.cuh"

#include <math.h>

__device__ __forceinline__ void adam_one(float g, float &w, float &m, float &v, float alpha, float omb1,
                                         float omb2, float eps)
{
    m = __fadd_rn(m, __fmul_rn(__fsub_rn(g, m), omb1));
    v = __fadd_rn(v, __fmul_rn(__fsub_rn(__fmul_rn(g, g), v), omb2));
    w = __fsub_rn(w, __fdiv_rn(__fmul_rn(m, alpha), __fadd_rn(__fsqrt_rn(v), eps)));
}

__device__ __forceinline__ void sgd_one(float g, float &w, float &m, int use_m, float lr, float mu,
                                        int nesterov)
{
    if (!use_m) {
        w = __fsub_rn(w, __fmul_rn(g, lr));
        return;
    }
    float mi = __fadd_rn(__fmul_rn(-g, lr), __fmul_rn(m, mu));
    m = mi;
    if (!nesterov) w = __fadd_rn(w, mi);
    else w = __fadd_rn(w, __fadd_rn(__fmul_rn(-g, lr), __fmul_rn(mi, mu)));
}

__device__ __forceinline__ void rmsprop_one(float g, float &w, float &v, float lr, float rho, float omr,
                                            float eps)
{
    v = __fadd_rn(__fmul_rn(rho, v), __fmul_rn(omr, __fmul_rn(g, g)));
    float den = __fsqrt_rn(__fadd_rn(v, eps));
    w = __fsub_rn(w, __fdiv_rn(__fmul_rn(lr, g), den));
}

/* Dynamic values (gpucmp.h): `dyn`, when not NULL, is device memory read by the kernel
 * when it runs (so a captured graph replays with what the plan wrote there): lr = dyn[0]
 * for sgd / rmsprop; for Adam each block of adam_dyn_kernel turns {lr, t} into alpha
 * (in double, as the host does). */

/* the step is skipped (dynamic loss scaling found a non-finite gradient): the update
 * writes back what it read */
__device__ __forceinline__ bool skipped(const float *skip) { return skip && __ldg(skip) != 0.0f; }

/* in: g, w, m, v; out: w, m, v */
struct adam_f {
    float alpha, omb1, omb2, eps;
    const float *skip;      /* not NULL and != 0: leave everything as it is */
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const
    {
        float w = x[1], m = x[2], v = x[3];
        if (!skipped(skip)) adam_one(x[0], w, m, v, alpha, omb1, omb2, eps);
        y[0] = w; y[1] = m; y[2] = v;
    }
};
/* in: g, w[, m]; out: w[, m] */
template <int USE_M> struct sgd_f {
    float lr, mu;
    int nesterov;
    const float *dyn; /* not NULL: lr = dyn[0] */
    const float *skip;
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const
    {
        float w = x[1], m = USE_M ? x[2] : 0.0f;
        if (!skipped(skip)) sgd_one(x[0], w, m, USE_M, dyn ? __ldg(dyn) : lr, mu, nesterov);
        y[0] = w;
        if (USE_M) y[1] = m;
    }
};
/* in: g, w, v; out: w, v */
struct rmsprop_f {
    float lr, rho, omr, eps;
    const float *dyn; /* not NULL: lr = dyn[0] */
    const float *skip;
    __device__ __forceinline__ void operator()(int64_t, const float *x, float *y) const
    {
        float w = x[1], v = x[2];
        if (!skipped(skip)) rmsprop_one(x[0], w, v, dyn ? __ldg(dyn) : lr, rho, omr, eps);
        y[0] = w; y[1] = v;
    }
};

static float adam_alpha(float lr, float b1, float b2, int64_t t)
{
    return (float)((double)lr * sqrt(1.0 - pow((double)b2, (double)t)) / (1.0 - pow((double)b1, (double)t)));
}

/* Adam with dynamic {lr, t} (a captured step): thread 0 of each block turns them into
 * alpha in double, exactly as the host (adam_alpha) and the CPU do, and the block updates its
 * grid-stride share -- one launch per tensor instead of a prologue kernel plus the map
 * (the seeds' CNN has 10 tensors: 10 launches saved per step). */
template <typename T>
static __global__ void __launch_bounds__(256) adam_dyn_kernel(int64_t n, const T *g, T *w, T *m, T *v,
                                                              const float *dyn, const float *skip, float b1,
                                                              float b2, float omb1, float omb2, float eps)
{
    __shared__ float sh_alpha;
    if (skipped(skip)) return;
    if (threadIdx.x == 0) {
        double t = (double)dyn[1];
        sh_alpha = t >= 1.0 ? (float)((double)dyn[0] * sqrt(1.0 - pow((double)b2, t)) / (1.0 - pow((double)b1, t)))
                            : __int_as_float(0x7fc00000);
    }
    __syncthreads();
    const float alpha = sh_alpha;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float wv = gc_to_f(w[i]), mv = gc_to_f(m[i]), vv = gc_to_f(v[i]);
        adam_one(gc_to_f(g[i]), wv, mv, vv, alpha, omb1, omb2, eps);
        w[i] = gc_from_f<T>(wv);
        m[i] = gc_from_f<T>(mv);
        v[i] = gc_from_f<T>(vv);
    }
}

extern "C" gc_status gc_cuda_op_adam(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_adam_params *p = (const gc_adam_params *)call->params;
    int64_t n = gc_tensor_numel(call->in[0]);
    if (n == 0) return GC_OK;
    adam_f f = {p->dyn ? 0.0f : adam_alpha(p->lr, p->beta_1, p->beta_2, p->t), gc_one_minus(p->beta_1),
                gc_one_minus(p->beta_2), p->epsilon, p->skip};
    if (p->dyn) { /* one launch: each block computes alpha from {lr, t} itself */
        int64_t b = (n + 255) / 256;
        const int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 8;
        if (b > cap) b = cap;
        GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T,
            adam_dyn_kernel<T><<<(unsigned)b, 256, 0, gc_cuda_stream(be)>>>(
                n, (const T *)call->in[0]->data, (T *)call->out[0]->data, (T *)call->out[1]->data,
                (T *)call->out[2]->data, p->dyn, p->skip, p->beta_1, p->beta_2, f.omb1, f.omb2, p->epsilon));
        return gc_cuda_launch_check("adam (dynamic lr / t)");
    }
    const void *in[4] = {call->in[0]->data, call->out[0]->data, call->out[1]->data, call->out[2]->data};
    void *out[3] = {call->out[0]->data, call->out[1]->data, call->out[2]->data};
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = (gc_map_launch<T, 4, 3>(be, n, in, out, f, "adam")));
    return st;
}

extern "C" gc_status gc_cuda_op_sgd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_sgd_params *p = (const gc_sgd_params *)call->params;
    int64_t n = gc_tensor_numel(call->in[0]);
    if (n == 0) return GC_OK;
    int use_m = p->momentum != 0.0f;
    if (use_m && !(call->out[1] && call->out[1]->data))
        return gc_fail(GC_ERR_INVALID_ARG, "sgd: momentum %g needs a momentum buffer", (double)p->momentum);
    if (use_m) {
        sgd_f<1> f = {p->lr, p->momentum, p->nesterov, p->dyn, p->skip};
        const void *in[3] = {call->in[0]->data, call->out[0]->data, call->out[1]->data};
        void *out[2] = {call->out[0]->data, call->out[1]->data};
        GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = (gc_map_launch<T, 3, 2>(be, n, in, out, f, "sgd")));
    } else {
        sgd_f<0> f = {p->lr, 0.0f, 0, p->dyn, p->skip};
        const void *in[2] = {call->in[0]->data, call->out[0]->data};
        void *out[1] = {call->out[0]->data};
        GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = (gc_map_launch<T, 2, 1>(be, n, in, out, f, "sgd")));
    }
    return st;
}

extern "C" gc_status gc_cuda_op_rmsprop(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_rmsprop_params *p = (const gc_rmsprop_params *)call->params;
    int64_t n = gc_tensor_numel(call->in[0]);
    if (n == 0) return GC_OK;
    rmsprop_f f = {p->lr, p->rho, gc_one_minus(p->rho), p->epsilon, p->dyn, p->skip};
    const void *in[3] = {call->in[0]->data, call->out[0]->data, call->out[1]->data};
    void *out[2] = {call->out[0]->data, call->out[1]->data};
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = (gc_map_launch<T, 3, 2>(be, n, in, out, f, "rmsprop")));
    return st;
}

/* ------------------------------------------------------------------ fused variant */
/* Every slot in one launch: all threads stride over slot 0, then slot 1, ... (the
 * plan's tensors are small: one launch instead of one per tensor is the gain). alpha /
 * lr as the per-tensor kernels get them: from dyn when given (thread 0 of each block,
 * in double), else from hp. */
struct one_minus_f { float b1, b2, rho; }; /* gc_one_minus of beta_1, beta_2, rho (host-side) */

template <typename T>
__global__ void __launch_bounds__(256) optim_multi_kernel(const gc_opt_slot *slots, int n_slots,
                                                          const gc_opt_hparams hp, const one_minus_f om,
                                                          const float *dyn, const float *skip)
{
    __shared__ float sh_alpha, sh_lr;
    if (skipped(skip)) return;
    if (threadIdx.x == 0) {
        const double t = dyn ? (double)dyn[1] : (double)hp.t;
        const float lr = dyn ? dyn[0] : hp.lr;
        sh_lr = lr;
        sh_alpha = hp.kind != GC_OPT_ADAM ? 0.0f
                   : t >= 1.0 ? (float)((double)lr * sqrt(1.0 - pow((double)hp.beta_2, t)) / (1.0 - pow((double)hp.beta_1, t)))
                              : __int_as_float(0x7fc00000);
    }
    __syncthreads();
    const float alpha = sh_alpha, lr = sh_lr;
    const float omb1 = om.b1, omb2 = om.b2, omr = om.rho;
    const int64_t stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t tid = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (int s = 0; s < n_slots; s++) {
        const gc_opt_slot sl = slots[s];
        T *w = (T *)sl.w, *m = (T *)sl.s1, *v = (T *)sl.s2;
        const T *g = (const T *)sl.g;
        const int use_m = hp.kind == GC_OPT_SGD && hp.momentum != 0.0f && m;
        for (int64_t i = tid; i < sl.n; i += stride) {
            float gv = gc_to_f(g[i]), wv = gc_to_f(w[i]);
            if (hp.kind == GC_OPT_ADAM) {
                float mv = gc_to_f(m[i]), vv = gc_to_f(v[i]);
                adam_one(gv, wv, mv, vv, alpha, omb1, omb2, hp.epsilon);
                m[i] = gc_from_f<T>(mv);
                v[i] = gc_from_f<T>(vv);
            } else if (hp.kind == GC_OPT_RMSPROP) {
                float vv = gc_to_f(m[i]); /* rmsprop's one state is slot s1 */
                rmsprop_one(gv, wv, vv, lr, hp.rho, omr, hp.epsilon);
                m[i] = gc_from_f<T>(vv);
            } else {
                float mv = use_m ? gc_to_f(m[i]) : 0.0f;
                sgd_one(gv, wv, mv, use_m, lr, hp.momentum, hp.nesterov);
                if (use_m) m[i] = gc_from_f<T>(mv);
            }
            w[i] = gc_from_f<T>(wv);
        }
    }
}

extern "C" gc_status gc_cuda_optim_multi(const gc_backend *be, gc_dtype dtype, const gc_opt_slot *slots_dev,
                                         int n_slots, int64_t max_n, const gc_opt_hparams *hp, const float *dyn,
                                         const float *skip)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (n_slots <= 0 || max_n <= 0) return GC_OK;
    if (!slots_dev || !hp)
        return gc_fail(GC_ERR_INVALID_ARG, "optim_multi: needs the slots (device memory) and the hyper-parameters");
    if ((unsigned)hp->kind >= GC_OPT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "optim_multi: unknown optimizer %d", (int)hp->kind);
    if (dtype != GC_F32 && dtype != GC_F16 && dtype != GC_BF16)
        return gc_fail(GC_ERR_DTYPE, "optim_multi: weights must be float32, float16 or bfloat16");
    int64_t b = (max_n + 255) / 256;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 8;
    if (b > cap) b = cap;
    if (b < 1) b = 1;
    cudaStream_t s = gc_cuda_stream(be);
    const one_minus_f om = {gc_one_minus(hp->beta_1), gc_one_minus(hp->beta_2), gc_one_minus(hp->rho)};
    GC_CUDA_DISPATCH_FLOAT(dtype, T,
                           optim_multi_kernel<T><<<(unsigned)b, 256, 0, s>>>(slots_dev, n_slots, *hp, om, dyn, skip));
    return gc_cuda_launch_check("optim_multi");
}

/* the backend's optim_multi hook (gpucmp.h): float32 tensors */
extern "C" gc_status gc_cuda_optim_multi_f32(const gc_backend *be, const gc_opt_hparams *hp, const float *dyn,
                                             const float *skip, const gc_opt_slot *slots_dev, int n_slots,
                                             int64_t max_n)
{
    return gc_cuda_optim_multi(be, GC_F32, slots_dev, n_slots, max_n, hp, dyn, skip);
}
