/* conv2d_simt.cu -- the readable exact-float32 direct convolution on CUDA: forward,
 * backward data and backward filter, one output element per thread, float32 FMA and
 * float32 accumulation whatever the storage dtype (f32 / f16 / bf16).
 *
 * Why it exists: it is the path for float32 when TF32 is off (exact float32, as the
 * CPU backend computes), the path for shapes the Tensor Core kernels do not take
 * (C or F below 8 in the backward passes, tensors past 32-bit index arithmetic), and
 * the cross-check of conv2d.cu in the tests. It follows the definitions literally:
 *     y[n,oh,ow,f]   = act(bias[f] + sum_{kh,kw,c} x[n, oh*sh-pt+kh*dh, ow*sw-pl+kw*dw, c]
 *                                                  * w[kh,kw,c,f])
 *     dx[n,h,w,c]    = sum_{kh,kw,f} dy[n, oh, ow, f] * w[kh,kw,c,f]
 *                      over oh = (h+pt-kh*dh)/sh, ow = (w+pl-kw*dw)/sw exact and in range
 *     dw[kh,kw,c,f]  = sum_{n,oh,ow} x[n, ih, iw, c] * dy[n,oh,ow,f],  db[f] = sum dy[...,f]
 * Backward data is a gather (each dx element sums what read it), so no atomics.
 * Backward filter reduces over every output pixel, so the pixels are split into S
 * ranges whose float32 partial sums land in the workspace and are added in a fixed
 * order by a second kernel (deterministic); db is the extra row "x = 1" of that sum.
 * Index arithmetic is 64-bit throughout.
 */
#include "conv2d_internal.cuh"

template <typename T>
static __global__ void __launch_bounds__(256) conv_simt_fwd_kernel(const gc_conv2d_geom g, const T *x,
                                                       const T *w, const T *bias, int act, T *y)
{
    const int64_t total = g.N * g.OH * g.OW * g.F;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t f = i % g.F, m = i / g.F;
        const int64_t ow = m % g.OW, oh = (m / g.OW) % g.OH, n = m / (g.OW * g.OH);
        float acc = 0.0f;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                const int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                const T *xp = x + ((n * g.H + ih) * g.W + iw) * g.C;
                const T *wp = w + (kh * g.KW + kw) * g.C * g.F + f;
                for (int64_t c = 0; c < g.C; c++)
                    acc = fmaf(gc_to_f(xp[c]), gc_to_f(wp[c * g.F]), acc);
            }
        }
        if (bias) acc += gc_to_f(bias[f]);
        y[i] = gc_from_f<T>(conv_act(acc, act));
    }
}

/* sum_f a[f] * b[f] in order, 16 bytes at a time when `vec` (both rows 16-byte aligned) */
template <typename T>
static __device__ __forceinline__ float simt_dot(const T *a, const T *b, int64_t n, bool vec, float acc)
{
    constexpr int V = 16 / (int)sizeof(T);
    int64_t f = 0;
    if (vec) {
        for (; f + V <= n; f += V) {
            uint4 ua = *(const uint4 *)(a + f), ub = *(const uint4 *)(b + f);
            const T *ea = (const T *)&ua, *eb = (const T *)&ub;
#pragma unroll
            for (int j = 0; j < V; j++) acc = fmaf(gc_to_f(ea[j]), gc_to_f(eb[j]), acc);
        }
    }
    for (; f < n; f++) acc = fmaf(gc_to_f(a[f]), gc_to_f(b[f]), acc);
    return acc;
}

template <typename T>
static __global__ void __launch_bounds__(256) conv_simt_bwd_data_kernel(const gc_conv2d_geom g, const T *dy,
                                                            const T *w, T *dx, int vec)
{
    const int64_t total = g.N * g.H * g.W * g.C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c = i % g.C, pix = i / g.C;
        const int64_t xw = pix % g.W, xh = (pix / g.W) % g.H, n = pix / (g.W * g.H);
        float acc = 0.0f;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            const int64_t th = xh + g.pad_top - kh * g.dh;
            if (th < 0 || th % g.sh) continue;
            const int64_t oh = th / g.sh;
            if (oh >= g.OH) continue;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                const int64_t tw = xw + g.pad_left - kw * g.dw;
                if (tw < 0 || tw % g.sw) continue;
                const int64_t ow = tw / g.sw;
                if (ow >= g.OW) continue;
                const T *dyp = dy + ((n * g.OH + oh) * g.OW + ow) * g.F;
                const T *wp = w + ((kh * g.KW + kw) * g.C + c) * g.F;
                acc = simt_dot(dyp, wp, g.F, vec != 0, acc);
            }
        }
        dx[i] = gc_from_f<T>(acc);
    }
}

/* part[z][r][f] for r < KC (+1 with db): the sum over pixels [z*chunk, (z+1)*chunk). */
template <typename T>
static __global__ void __launch_bounds__(256) conv_simt_bwd_filter_kernel(const gc_conv2d_geom g, const T *x,
                                                              const T *dy, int64_t rows,
                                                              int64_t chunk, float *part)
{
    const int64_t KC = g.KH * g.KW * g.C, P = g.N * g.OH * g.OW;
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= rows * g.F) return;
    const int64_t f = i % g.F, r = i / g.F;
    const int64_t p0 = (int64_t)blockIdx.y * chunk, p1 = p0 + chunk < P ? p0 + chunk : P;
    float acc = 0.0f;
    if (r < KC) {
        const int64_t c = r % g.C, tap = r / g.C, kw = tap % g.KW, kh = tap / g.KW;
        /* walk the pixels p = (n, oh, ow) of the range without dividing per pixel */
        int64_t ow = p0 % g.OW, oh = (p0 / g.OW) % g.OH, n = p0 / (g.OW * g.OH);
        for (int64_t p = p0; p < p1; p++) {
            const int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
            const int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
            if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W)
                acc = fmaf(gc_to_f(x[((n * g.H + ih) * g.W + iw) * g.C + c]),
                           gc_to_f(dy[p * g.F + f]), acc);
            if (++ow == g.OW) {
                ow = 0;
                if (++oh == g.OH) {
                    oh = 0;
                    n++;
                }
            }
        }
    } else { /* the db row */
        for (int64_t p = p0; p < p1; p++) acc += gc_to_f(dy[p * g.F + f]);
    }
    part[(int64_t)blockIdx.y * rows * g.F + i] = acc;
}

static unsigned simt_grid(const gc_backend *be, int64_t n)
{
    int64_t b = (n + 255) / 256;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

extern "C" gc_status gc_conv2d_simt_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                        const void *x, const void *w, const void *bias, gc_act act,
                                        void *y)
{
    const int64_t total = g->N * g->OH * g->OW * g->F;
    if (total == 0) return GC_OK;
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        conv_simt_fwd_kernel<T><<<simt_grid(be, total), 256, 0, gc_cuda_stream(be)>>>(
            *g, (const T *)x, (const T *)w, (const T *)bias, (int)act, (T *)y));
    return gc_cuda_launch_check("conv2d_fwd (simt)");
}

extern "C" gc_status gc_conv2d_simt_bwd_data(const gc_backend *be, const gc_conv2d_geom *g,
                                             gc_dtype dt, const void *dy, const void *w, void *dx)
{
    const int64_t total = g->N * g->H * g->W * g->C;
    if (total == 0) return GC_OK;
    const int vec = (g->F * (int64_t)gc_dtype_size(dt)) % 16 == 0 && ((uintptr_t)dy & 15) == 0 &&
                    ((uintptr_t)w & 15) == 0;
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        conv_simt_bwd_data_kernel<T><<<simt_grid(be, total), 256, 0, gc_cuda_stream(be)>>>(
            *g, (const T *)dy, (const T *)w, (T *)dx, vec));
    return gc_cuda_launch_check("conv2d_bwd_data (simt)");
}

extern "C" gc_status gc_conv2d_simt_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g,
                                               gc_dtype dt, const void *x, const void *dy, void *dw,
                                               void *db)
{
    const int64_t KC = g->KH * g->KW * g->C, P = g->N * g->OH * g->OW, F = g->F;
    cudaStream_t s = gc_cuda_stream(be);
    if (P == 0) {
        GC_CUDA_TRY(cudaMemsetAsync(dw, 0, (size_t)(KC * F) * gc_dtype_size(dt), s));
        if (db) GC_CUDA_TRY(cudaMemsetAsync(db, 0, (size_t)F * gc_dtype_size(dt), s));
        return GC_OK;
    }
    /* splits: enough blocks for about 8 per SM, each thread summing >= 64 pixels */
    const int64_t rows = KC + (db ? 1 : 0);
    const int64_t xblocks = (rows * F + 255) / 256;
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    int64_t S = (sms * 8 + xblocks - 1) / xblocks;
    if (S > (P + 63) / 64) S = (P + 63) / 64;
    if (S > 4096) S = 4096;
    if (S < 1) S = 1;
    const int64_t chunk = (P + S - 1) / S;
    S = (P + chunk - 1) / chunk;
    if (xblocks > 0x7fffffffLL)
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter: kernel with %lld weights is too large",
                       (long long)(KC * F));

    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(S * rows * F) * sizeof(float), &ws);
    if (st) return st;
    float *part = (float *)ws;
    dim3 grid((unsigned)xblocks, (unsigned)S);
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        conv_simt_bwd_filter_kernel<T><<<grid, 256, 0, s>>>(*g, (const T *)x, (const T *)dy, rows, chunk,
                                                        part));
    if ((st = gc_cuda_launch_check("conv2d_bwd_filter (simt)"))) return st;
    if ((st = gc_conv2d_reduce_splits(be, dt, part, (int)S, rows * F, KC * F, dw))) return st;
    if (db) st = gc_conv2d_reduce_splits(be, dt, part + KC * F, (int)S, rows * F, F, db);
    return st;
}
