/* gpucmp_rnn_act.h -- the recurrent layers' activations and their derivatives, one
 * definition for the CPU (csrc/cpu/rnn.c) and the CUDA kernels (csrc/cuda/rnn.cu), so
 * both backends compute the same functions (host and device inline under nvcc).
 *
 * gc_rnn_act_apply(a, x) = act(x); gc_rnn_act_dout(a, y) = act'(x) from y = act(x):
 * every one of these is a function of its output (relu / hard_sigmoid: the open interval
 * where the slope is nonzero, which is exactly where x is). hard_sigmoid is Keras 3's
 * clip(x/6 + 0.5, 0, 1). */
#ifndef GPUCMP_RNN_ACT_H
#define GPUCMP_RNN_ACT_H

#include <math.h>

#include "gpucmp.h"

#ifdef __CUDACC__
#define GC_RNN_HD __host__ __device__ __forceinline__
#else
#define GC_RNN_HD static inline
#endif

GC_RNN_HD float gc_rnn_act_apply(int a, float x)
{
    switch (a) {
    case GC_RNN_TANH: return tanhf(x);
    case GC_RNN_SIGMOID: return 1.0f / (1.0f + expf(-x));
    case GC_RNN_RELU: return x > 0.0f ? x : 0.0f;
    case GC_RNN_LINEAR: return x;
    default: { /* GC_RNN_HARD_SIGMOID */
        float v = x * (1.0f / 6.0f) + 0.5f;
        return v < 0.0f ? 0.0f : (v > 1.0f ? 1.0f : v);
    }
    }
}

GC_RNN_HD float gc_rnn_act_dout(int a, float y)
{
    switch (a) {
    case GC_RNN_TANH: return 1.0f - y * y;
    case GC_RNN_SIGMOID: return y * (1.0f - y);
    case GC_RNN_RELU: return y > 0.0f ? 1.0f : 0.0f;
    case GC_RNN_LINEAR: return 1.0f;
    default: return (y > 0.0f && y < 1.0f) ? (1.0f / 6.0f) : 0.0f;
    }
}

#endif
