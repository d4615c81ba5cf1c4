/* optim.c -- optimizer updates on the CPU (Adam, SGD with optional (Nesterov) momentum,
 * RMSprop), in place, and their op adapters.
 *
 * Why it is built this way: the formulas and their operation order are Keras 3's
 * (KERAS_SEMANTICS.md), in float32 like the Keras variables, so the weights track a
 * Keras run to float rounding; only Adam's bias correction alpha = lr*sqrt(1-b2^t)/
 * (1-b1^t) is computed in double (b^t for large t). Each update is one pass over
 * contiguous arrays, a loop gcc vectorises; large arrays are split in blocks across
 * OpenMP threads. gcc will not vectorise sqrtf without -fno-math-errno (it keeps a
 * call for errno), so the square roots of a sub-block are taken in a separate pass
 * with SSE's sqrtps where available (IEEE correctly rounded, the same values as
 * sqrtf), the other passes staying plain vectorisable C.
 * Dynamic values (gpucmp.h): when the params' `dyn` is not NULL, lr (and Adam's t) are
 * read from it when the update runs -- host memory on this backend.
 */
#include "cpu_kernels.h"

#include <math.h>
#if defined(__SSE__) || defined(_M_X64) || (defined(_M_IX86_FP) && _M_IX86_FP >= 1)
#include <xmmintrin.h>
#define GC_HAVE_SSE_SQRT 1
#endif

#define OPT_PAR_MIN 65536
#define OPT_BLOCK 8192
#define OPT_SUB 512 /* sub-block whose square roots are taken in one pass (L1) */

/* x[i] = sqrt(x[i]) for i < n */
static inline void sqrt_inplace(float *x, int64_t n)
{
    int64_t i = 0;
#ifdef GC_HAVE_SSE_SQRT
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(x + i, _mm_sqrt_ps(_mm_loadu_ps(x + i)));
#endif
    for (; i < n; i++) x[i] = sqrtf(x[i]);
}

static inline int64_t blk_end(int64_t b, int64_t n)
{
    return (b + 1) * OPT_BLOCK < n ? (b + 1) * OPT_BLOCK : n;
}

/* the step is skipped (dynamic loss scaling found a non-finite gradient) */
static int skipped(const float *skip) { return skip && skip[0] != 0.0f; }

gc_status gc_cpu_adam(int64_t n, float *w, const float *g, float *m, float *v,
                      const gc_adam_params *p)
{
    if (n < 0) return gc_fail(GC_ERR_INVALID_ARG, "adam: negative size %lld", (long long)n);
    /* dynamic values: {lr, t} read now (host memory on the CPU) instead of the fields */
    const float lr = p->dyn ? p->dyn[0] : p->lr;
    const double t = p->dyn ? (double)p->dyn[1] : (double)p->t;
    if (!(t >= 1.0)) return gc_fail(GC_ERR_INVALID_ARG, "adam: step t must be >= 1, got %g", t);
    if (n == 0 || skipped(p->skip)) return GC_OK;
    const float alpha = (float)((double)lr * sqrt(1.0 - pow((double)p->beta_2, t)) /
                                (1.0 - pow((double)p->beta_1, t)));
    const float omb1 = gc_one_minus(p->beta_1), omb2 = gc_one_minus(p->beta_2), eps = p->epsilon;
    const int64_t nblk = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= OPT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t bend = blk_end(b, n);
        float den[OPT_SUB];
        for (int64_t i0 = b * OPT_BLOCK; i0 < bend; i0 += OPT_SUB) {
            const int64_t len = bend - i0 < OPT_SUB ? bend - i0 : OPT_SUB;
            float *restrict wi = w + i0, *restrict mi = m + i0, *restrict vi = v + i0;
            const float *restrict gi = g + i0;
            for (int64_t i = 0; i < len; i++) {
                float gv = gi[i];
                mi[i] += (gv - mi[i]) * omb1;
                vi[i] += (gv * gv - vi[i]) * omb2;
                den[i] = vi[i];
            }
            sqrt_inplace(den, len);
            for (int64_t i = 0; i < len; i++) wi[i] -= (mi[i] * alpha) / (den[i] + eps);
        }
    }
    return GC_OK;
}

gc_status gc_cpu_sgd(int64_t n, float *w, const float *g, float *m, const gc_sgd_params *p)
{
    if (n < 0) return gc_fail(GC_ERR_INVALID_ARG, "sgd: negative size %lld", (long long)n);
    if (p->momentum != 0.0f && !m && n > 0)
        return gc_fail(GC_ERR_INVALID_ARG, "sgd: momentum %g needs a momentum buffer",
                       (double)p->momentum);
    if (n == 0 || skipped(p->skip)) return GC_OK;
    /* momentum 0 is Keras' plain step; a buffer, if given, is left untouched */
    const float lr = p->dyn ? p->dyn[0] : p->lr, mu = p->momentum;
    const int64_t nblk = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= OPT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t i0 = b * OPT_BLOCK, i1 = blk_end(b, n);
        if (mu == 0.0f) {
            for (int64_t i = i0; i < i1; i++) w[i] -= g[i] * lr;
        } else if (!p->nesterov) {
            for (int64_t i = i0; i < i1; i++) {
                float mi = -g[i] * lr + m[i] * mu;
                m[i] = mi;
                w[i] += mi;
            }
        } else {
            for (int64_t i = i0; i < i1; i++) {
                float mi = -g[i] * lr + m[i] * mu;
                m[i] = mi;
                w[i] += -g[i] * lr + mi * mu;
            }
        }
    }
    return GC_OK;
}

gc_status gc_cpu_rmsprop(int64_t n, float *w, const float *g, float *v,
                         const gc_rmsprop_params *p)
{
    if (n < 0) return gc_fail(GC_ERR_INVALID_ARG, "rmsprop: negative size %lld", (long long)n);
    if (n == 0 || skipped(p->skip)) return GC_OK;
    const float lr = p->dyn ? p->dyn[0] : p->lr, rho = p->rho, omr = gc_one_minus(p->rho), eps = p->epsilon;
    const int64_t nblk = (n + OPT_BLOCK - 1) / OPT_BLOCK;
#pragma omp parallel for schedule(static) if (n >= OPT_PAR_MIN)
    for (int64_t b = 0; b < nblk; b++) {
        const int64_t bend = blk_end(b, n);
        float den[OPT_SUB];
        for (int64_t i0 = b * OPT_BLOCK; i0 < bend; i0 += OPT_SUB) {
            const int64_t len = bend - i0 < OPT_SUB ? bend - i0 : OPT_SUB;
            float *restrict wi = w + i0, *restrict vi = v + i0;
            const float *restrict gi = g + i0;
            for (int64_t i = 0; i < len; i++) {
                float gv = gi[i];
                vi[i] = rho * vi[i] + omr * (gv * gv);
                den[i] = vi[i] + eps;
            }
            sqrt_inplace(den, len);
            for (int64_t i = 0; i < len; i++) wi[i] -= (lr * gi[i]) / den[i];
        }
    }
    return GC_OK;
}

/* ---------------------------------------------------------------- adapters */
static int64_t numel(const gc_tensor *t)
{
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    return n;
}

static int has_data(const gc_tensor *t) { return t && t->data; }

gc_status gc_cpu_op_adam(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_adam_params *p = (const gc_adam_params *)call->params;
    if (!p || !call->in[0]) return gc_fail(GC_ERR_INVALID_ARG, "adam: missing tensor or params");
    int64_t n = numel(call->in[0]);
    if (n == 0) return GC_OK;
    if (!has_data(call->in[0]) || !has_data(call->out[0]) || !has_data(call->out[1]) ||
        !has_data(call->out[2]))
        return gc_fail(GC_ERR_INVALID_ARG, "adam: needs g, w, m and v");
    return gc_cpu_adam(n, (float *)call->out[0]->data, (const float *)call->in[0]->data,
                       (float *)call->out[1]->data, (float *)call->out[2]->data, p);
}

gc_status gc_cpu_op_sgd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_sgd_params *p = (const gc_sgd_params *)call->params;
    if (!p || !call->in[0]) return gc_fail(GC_ERR_INVALID_ARG, "sgd: missing tensor or params");
    int64_t n = numel(call->in[0]);
    if (n == 0) return GC_OK;
    if (!has_data(call->in[0]) || !has_data(call->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "sgd: needs g and w");
    float *m = has_data(call->out[1]) ? (float *)call->out[1]->data : NULL;
    return gc_cpu_sgd(n, (float *)call->out[0]->data, (const float *)call->in[0]->data, m, p);
}

gc_status gc_cpu_op_rmsprop(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_rmsprop_params *p = (const gc_rmsprop_params *)call->params;
    if (!p || !call->in[0]) return gc_fail(GC_ERR_INVALID_ARG, "rmsprop: missing tensor or params");
    int64_t n = numel(call->in[0]);
    if (n == 0) return GC_OK;
    if (!has_data(call->in[0]) || !has_data(call->out[0]) || !has_data(call->out[1]))
        return gc_fail(GC_ERR_INVALID_ARG, "rmsprop: needs g, w and v");
    return gc_cpu_rmsprop(n, (float *)call->out[0]->data, (const float *)call->in[0]->data,
                          (float *)call->out[1]->data, p);
}
