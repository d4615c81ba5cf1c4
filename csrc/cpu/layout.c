/* layout.c -- data movement of the graph ops on the CPU: zero padding of NHWC images
 * (pad2d_fwd) and its crop (pad2d_bwd), column concatenation of 2-D views (concat) and
 * its backward (slice_cols).
 *
 * No arithmetic: rows of contiguous floats are copied with memcpy, padding written
 * with memset, so every element of the output is written exactly once. Core widens
 * f16/bf16 storage to float32 (exact both ways), so one float32 version serves all. */
#include "cpu_kernels.h"

#include <string.h>

#define LAYOUT_PAR_MIN 65536

/* y (N, H+t+b, W+l+r, C) from x (N, H, W, C); crop = 1: the reverse (x from y). */
gc_status gc_cpu_pad2d(int crop, int64_t N, int64_t H, int64_t W, int64_t C, const gc_pad2d_params *p,
                       const float *src, float *dst)
{
    const int64_t OH = H + p->top + p->bottom, OW = W + p->left + p->right;
    const size_t row = (size_t)(W * C) * sizeof(float);
    const int64_t total = N * OH * OW * C;
    (void)total;
#pragma omp parallel for schedule(static) if (total >= LAYOUT_PAR_MIN)
    for (int64_t nh = 0; nh < N * OH; nh++) {
        const int64_t n = nh / OH, oh = nh % OH, h = oh - p->top;
        const int inside = h >= 0 && h < H;
        if (crop) {
            if (inside) memcpy(dst + (n * H + h) * W * C, src + (nh * OW + p->left) * C, row);
            continue;
        }
        float *y = dst + nh * OW * C;
        if (!inside) {
            memset(y, 0, (size_t)(OW * C) * sizeof(float));
            continue;
        }
        memset(y, 0, (size_t)(p->left * C) * sizeof(float));
        memcpy(y + p->left * C, src + (n * H + h) * W * C, row);
        memset(y + (p->left + W) * C, 0, (size_t)(p->right * C) * sizeof(float));
    }
    return GC_OK;
}

gc_status gc_cpu_op_pad2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0];
    return gc_cpu_pad2d(0, x->shape[0], x->shape[1], x->shape[2], x->shape[3], call->params, x->data,
                        call->out[0]->data);
}

gc_status gc_cpu_op_pad2d_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *dx = call->out[0];
    return gc_cpu_pad2d(1, dx->shape[0], dx->shape[1], dx->shape[2], dx->shape[3], call->params,
                        call->in[0]->data, dx->data);
}

gc_status gc_cpu_op_concat(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const float *x[GC_MAX_OP_IN];
    int64_t w[GC_MAX_OP_IN], off[GC_MAX_OP_IN];
    int n_in = 0;
    int64_t W = 0;
    for (int k = 0; k < GC_MAX_OP_IN; k++) {
        const gc_tensor *t = call->in[k];
        if (!t || !t->data) continue;
        x[n_in] = t->data;
        w[n_in] = t->shape[1];
        off[n_in] = W;
        W += t->shape[1];
        n_in++;
    }
    const int64_t rows = call->out[0]->shape[0];
    float *y = call->out[0]->data;
#pragma omp parallel for schedule(static) if (rows * W >= LAYOUT_PAR_MIN)
    for (int64_t r = 0; r < rows; r++)
        for (int k = 0; k < n_in; k++)
            if (w[k]) memcpy(y + r * W + off[k], x[k] + r * w[k], (size_t)w[k] * sizeof(float));
    return GC_OK;
}

gc_status gc_cpu_op_slice_cols(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_slice_params *p = call->params;
    const int64_t rows = call->in[0]->shape[0], W = call->in[0]->shape[1], w = call->out[0]->shape[1];
    const float *x = call->in[0]->data;
    float *y = call->out[0]->data;
    if (w == 0) return GC_OK;
#pragma omp parallel for schedule(static) if (rows * w >= LAYOUT_PAR_MIN)
    for (int64_t r = 0; r < rows; r++) memcpy(y + r * w, x + r * W + p->offset, (size_t)w * sizeof(float));
    return GC_OK;
}
