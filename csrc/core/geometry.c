/* geometry.c -- output shapes and padding of window ops (conv, pooling).
 *
 * One source of truth for Keras' rules (KERAS_SEMANTICS.md, "Shapes and padding"):
 * valid: out = floor((in - d*(k-1) - 1) / s) + 1; same: out = ceil(in / s), total pad
 * max(0, (out-1)*s + (k-1)*d + 1 - in), the smaller half before, the extra after.
 * Every backend and the plan take their geometry from here. */
#include "gpucmp.h"

int64_t gc_out_extent(int64_t in, int64_t k, int stride, int dil, gc_padding pad)
{
    if (in < 1 || k < 1 || stride < 1 || dil < 1) return 0;
    if (pad == GC_PAD_SAME) return (in + stride - 1) / stride;
    int64_t span = (int64_t)dil * (k - 1) + 1;
    if (in < span) return 0;
    return (in - span) / stride + 1;
}

int gc_pad_before(int64_t in, int64_t out, int64_t k, int stride, int dil, gc_padding pad)
{
    if (pad != GC_PAD_SAME) return 0;
    int64_t total = (out - 1) * stride + (k - 1) * dil + 1 - in;
    if (total < 0) total = 0;
    return (int)(total / 2);
}

static gc_status check_window(const char *what, int64_t kh, int64_t kw, int sh, int sw,
                              int dh, int dw)
{
    if (kh < 1 || kw < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: window size must be positive, got (%lld, %lld)",
                       what, (long long)kh, (long long)kw);
    if (sh < 1 || sw < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: strides must be positive, got (%d, %d)", what,
                       sh, sw);
    if (dh < 1 || dw < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: dilation_rate must be positive, got (%d, %d)",
                       what, dh, dw);
    return GC_OK;
}

gc_status gc_conv2d_geometry(int64_t N, int64_t H, int64_t W, int64_t C, int64_t KH,
                             int64_t KW, int64_t F, const gc_conv2d_params *p,
                             gc_conv2d_geom *g)
{
    gc_status s = check_window("conv2d", KH, KW, p->stride_h, p->stride_w, p->dil_h, p->dil_w);
    if (s) return s;
    if (p->padding != GC_PAD_VALID && p->padding != GC_PAD_SAME)
        return gc_fail(GC_ERR_INVALID_ARG, "conv2d: padding must be 'valid' or 'same'");
    if (N < 0 || H < 1 || W < 1 || C < 1 || F < 1)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "conv2d: input (%lld, %lld, %lld, %lld) and filters %lld must be positive",
                       (long long)N, (long long)H, (long long)W, (long long)C, (long long)F);
    int64_t OH = gc_out_extent(H, KH, p->stride_h, p->dil_h, p->padding);
    int64_t OW = gc_out_extent(W, KW, p->stride_w, p->dil_w, p->padding);
    if (OH < 1 || OW < 1)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "conv2d: kernel (%lld, %lld) with dilation (%d, %d) is larger than the "
                       "input (%lld, %lld) under padding 'valid'",
                       (long long)KH, (long long)KW, p->dil_h, p->dil_w, (long long)H,
                       (long long)W);
    g->N = N; g->H = H; g->W = W; g->C = C; g->KH = KH; g->KW = KW; g->F = F;
    g->OH = OH; g->OW = OW;
    g->sh = p->stride_h; g->sw = p->stride_w; g->dh = p->dil_h; g->dw = p->dil_w;
    g->pad_top = gc_pad_before(H, OH, KH, p->stride_h, p->dil_h, p->padding);
    g->pad_left = gc_pad_before(W, OW, KW, p->stride_w, p->dil_w, p->padding);
    return GC_OK;
}

gc_status gc_pool2d_geometry(int64_t N, int64_t H, int64_t W, int64_t C,
                             const gc_pool2d_params *p, gc_pool2d_geom *g)
{
    gc_status s = check_window("pool2d", p->pool_h, p->pool_w, p->stride_h, p->stride_w, 1, 1);
    if (s) return s;
    if (p->padding != GC_PAD_VALID && p->padding != GC_PAD_SAME)
        return gc_fail(GC_ERR_INVALID_ARG, "pool2d: padding must be 'valid' or 'same'");
    if (N < 0 || H < 1 || W < 1 || C < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "pool2d: input (%lld, %lld, %lld, %lld) must be positive",
                       (long long)N, (long long)H, (long long)W, (long long)C);
    const int pt = p->pad_top, pb = p->pad_bottom, pl = p->pad_left, pr = p->pad_right;
    if (pt || pb || pl || pr) {
        if (p->padding != GC_PAD_VALID)
            return gc_fail(GC_ERR_INVALID_ARG, "pool2d: explicit pads (%d, %d, %d, %d) need padding 'valid'", pt, pb,
                           pl, pr);
        if (pt < 0 || pb < 0 || pl < 0 || pr < 0 || pt >= p->pool_h || pb >= p->pool_h || pl >= p->pool_w ||
            pr >= p->pool_w)
            return gc_fail(GC_ERR_INVALID_ARG,
                           "pool2d: explicit pads (top %d, bottom %d, left %d, right %d) must be >= 0 and smaller "
                           "than pool_size (%d, %d)",
                           pt, pb, pl, pr, p->pool_h, p->pool_w);
    }
    int64_t OH = gc_out_extent(H + pt + pb, p->pool_h, p->stride_h, 1, p->padding);
    int64_t OW = gc_out_extent(W + pl + pr, p->pool_w, p->stride_w, 1, p->padding);
    if (OH < 1 || OW < 1)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "pool2d: pool_size (%d, %d) is larger than the input (%lld, %lld) under "
                       "padding 'valid'",
                       p->pool_h, p->pool_w, (long long)H, (long long)W);
    g->N = N; g->H = H; g->W = W; g->C = C; g->PH = p->pool_h; g->PW = p->pool_w;
    g->OH = OH; g->OW = OW; g->sh = p->stride_h; g->sw = p->stride_w;
    g->pad_top = pt + gc_pad_before(H, OH, p->pool_h, p->stride_h, 1, p->padding);
    g->pad_left = pl + gc_pad_before(W, OW, p->pool_w, p->stride_w, 1, p->padding);
    return GC_OK;
}
