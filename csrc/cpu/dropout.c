/* dropout.c -- inverted dropout on the CPU with a counter-based mask, and its adapters.
 *
 * Why it is built this way: element i is kept iff gc_uniform01(seed, i) >= rate (the
 * hash in gpucmp.h), so the mask is a pure function of (seed, i): backward regenerates
 * it instead of storing it, every backend draws the same mask, and any split of the
 * index range across OpenMP threads gives the same result. Kept elements are scaled by
 * 1/(1-rate) computed in float, as tf.nn.dropout does; rate 0 is a copy. The adapters
 * XOR the params' dyn_seed (when not NULL) into the seed.
 */
#include "cpu_kernels.h"

#include <string.h>

#define DROPOUT_PAR_MIN 65536
#define DROPOUT_BLOCK 8192

/* y = keep(i) ? x * scale : 0 over all n elements (x may equal y) */
static gc_status dropout_apply(const char *what, int64_t n, const float *x, float *y,
                               float rate, uint64_t seed)
{
    if (n < 0) return gc_fail(GC_ERR_INVALID_ARG, "%s: negative size %lld", what, (long long)n);
    if (!(rate >= 0.0f && rate < 1.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: rate must be in [0, 1), got %g", what, (double)rate);
    if (n == 0) return GC_OK;
    if (rate == 0.0f) {
        if (x != y) memcpy(y, x, (size_t)n * sizeof(float));
        return GC_OK;
    }
    const float scale = 1.0f / (1.0f - rate);
    const int64_t nblk = (n + DROPOUT_BLOCK - 1) / DROPOUT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= DROPOUT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        int64_t i1 = (b + 1) * DROPOUT_BLOCK < n ? (b + 1) * DROPOUT_BLOCK : n;
        for (int64_t i = b * DROPOUT_BLOCK; i < i1; i++) {
            float v = x[i] * scale; /* a dropped element is 0, whatever x holds */
            y[i] = gc_uniform01(seed, (uint64_t)i) >= rate ? v : 0.0f;
        }
    }
    return GC_OK;
}

gc_status gc_cpu_dropout_fwd(int64_t n, const float *x, float *y, float rate, uint64_t seed)
{
    return dropout_apply("dropout_fwd", n, x, y, rate, seed);
}

gc_status gc_cpu_dropout_bwd(int64_t n, const float *dy, float *dx, float rate, uint64_t seed)
{
    return dropout_apply("dropout_bwd", n, dy, dx, rate, seed);
}

/* ---------------------------------------------------------------- adapters */
static int64_t numel(const gc_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static gc_status dropout_op(const char *what, const gc_op_call *call, int backward)
{
    const gc_dropout_params *p = (const gc_dropout_params *)call->params;
    const gc_tensor *x = call->in[0];
    gc_tensor *y = call->out[0];
    if (!p || !x || !y) return gc_fail(GC_ERR_INVALID_ARG, "%s: missing tensor or params", what);
    int64_t n = numel(x);
    if (n > 0 && (!x->data || !y->data))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: missing tensor data", what);
    /* dynamic seed (gpucmp.h): host memory on this backend, read when the op runs */
    const uint64_t seed = p->dyn_seed ? p->seed ^ *p->dyn_seed : p->seed;
    return backward ? gc_cpu_dropout_bwd(n, (const float *)x->data, (float *)y->data, p->rate, seed)
                    : gc_cpu_dropout_fwd(n, (const float *)x->data, (float *)y->data, p->rate, seed);
}

gc_status gc_cpu_op_dropout_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    return dropout_op("dropout_fwd", call, 0);
}

gc_status gc_cpu_op_dropout_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    return dropout_op("dropout_bwd", call, 1);
}
