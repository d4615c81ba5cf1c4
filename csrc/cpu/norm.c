/* norm.c -- batch normalization on the CPU: batchnorm_fwd (training: batch statistics
 * and the moving-average update; inference: the moving statistics) and batchnorm_bwd
 * (dx, dgamma, dbeta, dresidual), with the residual add and ReLU of a ResNet block folded
 * in (y = act(gamma * xhat + beta + residual)).
 *
 * x is viewed as (R, C): channels on the last axis (NHWC), R = numel / C. Statistics and
 * the backward's two channel sums are taken in double, two-pass (mean, then the centred
 * squares: no cancellation), over fixed blocks of BN_CHUNK rows whose partial sums are
 * then added in block order: the result does not depend on the thread count. The
 * per-element work (y, dx) is float32 with the per-channel factors rounded once: y is
 * the formula csrc/cuda/norm.cu uses; its training dx folds the factors per channel
 * differently, so the two agree to float32 rounding. The backward's relu mask is y > 0,
 * or (mask_from_x) the forward's pre-activation recomputed from x by the same expression
 * and compared with the storage dtype's rounding edge (core's widening names the dtype). */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BN_CHUNK 256
#define BN_PAR_MIN 32768

/* part[k * C + c] = sum over the rows of block k of f(r, c); out[c] = the sum over blocks. */
typedef struct {
    int64_t R, C;
    const float *x, *dy, *y; /* y: relu mask (bwd), NULL for linear */
    const float *mean, *invstd;
    const double *center; /* fwd second pass: the mean in double */
    const float *scale, *shift; /* bwd with the mask from x: per channel, as the forward's */
    float floor;                /* ... and the mask is pre-activation > floor */
} bn_sum_args;

/* the forward's pre-activation (before residual and ReLU): one expression for the forward
 * and for the backward's recomputed mask, so that both round alike (no -march: no FMA
 * contraction) */
static inline float bn_pre(float x, float mean, float scale, float shift) { return (x - mean) * scale + shift; }

/* the recomputed mask is round_to_storage(v) > 0, i.e. v > half the storage dtype's
 * smallest subnormal (a tie rounds to the even 0) */
static float bn_mask_floor(gc_dtype storage)
{
    return storage == GC_F16 ? 0x1p-25f : storage == GC_BF16 ? 0x1p-134f : 0.0f;
}

/* which = 0: sum x; 1: sum (x - center)^2; 2: sums of dz and dz * xhat (two outputs) */
static gc_status bn_channel_sums(const bn_sum_args *a, int which, double *out0, double *out1)
{
    const int64_t R = a->R, C = a->C, nb = (R + BN_CHUNK - 1) / BN_CHUNK;
    const int two = which == 2;
    double *part = (double *)calloc((size_t)(nb * C * (two ? 2 : 1)), sizeof(double));
    if (!part) return gc_fail(GC_ERR_NOMEM, "batchnorm: no host memory for %lld partial sums", (long long)(nb * C));
#pragma omp parallel for schedule(static) if (R * C >= BN_PAR_MIN && nb > 1)
    for (int64_t k = 0; k < nb; k++) {
        double *p0 = part + k * C * (two ? 2 : 1), *p1 = p0 + C;
        const int64_t r1 = (k + 1) * BN_CHUNK < R ? (k + 1) * BN_CHUNK : R;
        for (int64_t r = k * BN_CHUNK; r < r1; r++) {
            const float *xr = a->x + r * C;
            if (which == 0) {
                for (int64_t c = 0; c < C; c++) p0[c] += xr[c];
            } else if (which == 1) {
                for (int64_t c = 0; c < C; c++) {
                    double d = (double)xr[c] - a->center[c];
                    p0[c] += d * d;
                }
            } else {
                const float *gr = a->dy + r * C, *yr = a->y ? a->y + r * C : NULL;
                for (int64_t c = 0; c < C; c++) {
                    const int off = yr ? !(yr[c] > 0.0f)
                                       : a->scale && !(bn_pre(xr[c], a->mean[c], a->scale[c], a->shift[c]) > a->floor);
                    double dz = off ? 0.0 : (double)gr[c];
                    double xh = ((double)xr[c] - a->mean[c]) * a->invstd[c];
                    p0[c] += dz;
                    p1[c] += dz * xh;
                }
            }
        }
    }
    for (int64_t c = 0; c < C; c++) out0[c] = 0.0;
    if (two)
        for (int64_t c = 0; c < C; c++) out1[c] = 0.0;
    for (int64_t k = 0; k < nb; k++) {
        const double *p0 = part + k * C * (two ? 2 : 1);
        for (int64_t c = 0; c < C; c++) out0[c] += p0[c];
        if (two)
            for (int64_t c = 0; c < C; c++) out1[c] += p0[C + c];
    }
    free(part);
    return GC_OK;
}

gc_status gc_cpu_batchnorm_fwd(const gc_batchnorm_params *p, int64_t R, int64_t C, const float *x,
                               const float *gamma, const float *beta, const float *residual, float *y,
                               float *moving_mean, float *moving_var, float *save)
{
    float *mean = save, *invstd = save + C;
    if (p->training == GC_BN_REFILL) {
        /* the statistics of the training pass are in save: only y again */
    } else if (p->training) {
        double *m = (double *)malloc((size_t)C * 2 * sizeof(double));
        if (!m) return gc_fail(GC_ERR_NOMEM, "batchnorm_fwd: no host memory for %lld channels", (long long)C);
        double *v = m + C;
        bn_sum_args a = {R, C, x, NULL, NULL, NULL, NULL, m, NULL, NULL, 0.0f};
        gc_status s = bn_channel_sums(&a, 0, m, NULL);
        for (int64_t c = 0; c < C && s == GC_OK; c++) m[c] /= (double)R;
        if (s == GC_OK) s = bn_channel_sums(&a, 1, v, NULL);
        if (s) {
            free(m);
            return s;
        }
        const double mom = p->momentum;
        for (int64_t c = 0; c < C; c++) {
            double var = v[c] / (double)R;
            mean[c] = (float)m[c];
            invstd[c] = (float)(1.0 / sqrt(var + (double)p->epsilon));
            moving_mean[c] = (float)((double)moving_mean[c] * mom + m[c] * (1.0 - mom));
            moving_var[c] = (float)((double)moving_var[c] * mom + var * (1.0 - mom));
        }
        free(m);
    } else {
        for (int64_t c = 0; c < C; c++) {
            mean[c] = moving_mean[c];
            invstd[c] = (float)(1.0 / sqrt((double)moving_var[c] + (double)p->epsilon));
        }
    }
    const int relu = p->act == GC_ACT_RELU;
#pragma omp parallel for schedule(static) if (R * C >= BN_PAR_MIN)
    for (int64_t r = 0; r < R; r++) {
        const float *xr = x + r * C, *rr = residual ? residual + r * C : NULL;
        float *yr = y + r * C;
        for (int64_t c = 0; c < C; c++) {
            float scale = gamma ? gamma[c] * invstd[c] : invstd[c];
            float v = bn_pre(xr[c], mean[c], scale, beta ? beta[c] : 0.0f);
            if (rr) v += rr[c];
            yr[c] = relu && v < 0.0f ? 0.0f : v;
        }
    }
    return GC_OK;
}

gc_status gc_cpu_batchnorm_bwd(const gc_batchnorm_params *p, int64_t R, int64_t C, const float *x,
                               const float *dy, const float *gamma, const float *save, const float *y,
                               const float *beta, float *dx, float *dgamma, float *dbeta, float *dresidual)
{
    const float *mean = save, *invstd = save + C;
    const int relu = p->act == GC_ACT_RELU, from_x = relu && p->mask_from_x;
    const float *mask = relu && !from_x ? y : NULL;
    const float floor = bn_mask_floor(p->mask_dtype);
    float *mdz = NULL, *mdzx = NULL; /* training: mean_R(dz), mean_R(dz * xhat) */
    /* the mask from x: the forward's per-channel scale and shift */
    float *sc = from_x ? (float *)malloc((size_t)C * 2 * sizeof(float)) : NULL, *sh = sc ? sc + C : NULL;
    if (from_x && !sc) return gc_fail(GC_ERR_NOMEM, "batchnorm_bwd: no host memory for %lld channels", (long long)C);
    for (int64_t c = 0; c < C && sc; c++) {
        sc[c] = gamma ? gamma[c] * invstd[c] : invstd[c];
        sh[c] = beta ? beta[c] : 0.0f;
    }
    if (p->training || dgamma || dbeta) {
        double *s = (double *)malloc((size_t)C * 2 * sizeof(double));
        mdz = (float *)malloc((size_t)C * 2 * sizeof(float));
        if (!s || !mdz) {
            free(s);
            free(mdz);
            free(sc);
            return gc_fail(GC_ERR_NOMEM, "batchnorm_bwd: no host memory for %lld channels", (long long)C);
        }
        mdzx = mdz + C;
        bn_sum_args a = {R, C, x, dy, mask, mean, invstd, NULL, sc, sh, floor};
        gc_status st = bn_channel_sums(&a, 2, s, s + C);
        if (st) {
            free(s);
            free(mdz);
            free(sc);
            return st;
        }
        for (int64_t c = 0; c < C; c++) {
            if (dbeta) dbeta[c] = (float)s[c];
            if (dgamma) dgamma[c] = (float)s[C + c];
            mdz[c] = (float)(s[c] / (double)R);
            mdzx[c] = (float)(s[C + c] / (double)R);
        }
        free(s);
    }
    if (dx || dresidual) {
        const int train = p->training;
#pragma omp parallel for schedule(static) if (R * C >= BN_PAR_MIN)
        for (int64_t r = 0; r < R; r++) {
            const int64_t o = r * C;
            for (int64_t c = 0; c < C; c++) {
                float g = dy[o + c];
                const int off = mask ? !(mask[o + c] > 0.0f)
                                     : sc && !(bn_pre(x[o + c], mean[c], sc[c], sh[c]) > floor);
                float dz = off ? 0.0f : g;
                float k = gamma ? gamma[c] * invstd[c] : invstd[c];
                float v = dz;
                if (train) {
                    float xh = (x[o + c] - mean[c]) * invstd[c];
                    v = dz - mdz[c] - xh * mdzx[c];
                }
                if (dresidual) dresidual[o + c] = dz;
                if (dx) dx[o + c] = k * v;
            }
        }
    }
    free(mdz);
    free(sc);
    return GC_OK;
}

static const float *data_or_null(const gc_tensor *t) { return t && t->data ? (const float *)t->data : NULL; }
static float *out_or_null(gc_tensor *t) { return t && t->data ? (float *)t->data : NULL; }

gc_status gc_cpu_op_batchnorm_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0];
    const int64_t C = x->shape[x->ndim - 1], R = gc_tensor_numel(x) / C;
    return gc_cpu_batchnorm_fwd(call->params, R, C, x->data, data_or_null(call->in[1]), data_or_null(call->in[2]),
                                data_or_null(call->in[3]), call->out[0]->data, call->out[1]->data,
                                call->out[2]->data, call->out[3]->data);
}

gc_status gc_cpu_op_batchnorm_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0];
    const int64_t C = x->shape[x->ndim - 1], R = gc_tensor_numel(x) / C;
    return gc_cpu_batchnorm_bwd(call->params, R, C, x->data, call->in[1]->data, data_or_null(call->in[2]),
                                call->in[3]->data, data_or_null(call->in[4]), data_or_null(call->in[5]),
                                out_or_null(call->out[0]),
                                out_or_null(call->out[1]), out_or_null(call->out[2]), out_or_null(call->out[3]));
}
