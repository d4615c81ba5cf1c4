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
 * Index arithmetic is 64-bit throughout, except in the small-K kernel below.
 *
 * Small-K weight gradient (conv_simt_wgrad_smallk_kernel): with few rows
 * KC = KH*KW*C <= 64 (first layers, C < 8) the kernel above reads dy once per row
 * (10 times for the seed CNN's 3x3x1 layer). There, a thread owns one f and one
 * strided subset of a pixel range and keeps all KC sums (and db's) in registers
 * (KC <= MAXR, a template of 16 / 32 / 64), so each dy value is read once; the x
 * values of a pixel are the same for the FT threads of its f-tile (a broadcast load).
 * A 256-thread block is G = 256 / FT pixel groups x FT filters (FT = min(F, 64),
 * F-tiles over blockIdx.y); block z takes pixels [z*chunk, (z+1)*chunk), group g the
 * pixels z*chunk + g + k*G (neighbouring groups read neighbouring dy rows), with the
 * dy values of its next 4 pixels already requested (4 loads in flight per thread). The G group sums are
 * added in shared memory in group order and written as part[z][r][f], exactly as the
 * general kernel writes its partials, for the same fixed-order split reduction. 32-bit
 * index math (the dispatcher checks the sizes).
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

#define SK_THREADS 256
#define SK_FT 64  /* filters per block at most */
#define SK_U 4    /* pixels per group in flight */
#define SK_RED 16 /* rows per shared-memory reduction round */

template <typename T, int MAXR>
static __global__ void __launch_bounds__(SK_THREADS, MAXR <= 16 ? 4 : MAXR <= 32 ? 3 : 2)
conv_simt_wgrad_smallk_kernel(const gc_conv2d_geom g, const T *__restrict__ x, const T *__restrict__ dy,
                              int FT, int chunk, int with_db, float *__restrict__ part)
{
    /* the tap tables are read per pixel (volatile: not hoisted into 3 x MAXR registers) */
    __shared__ int toff_s[MAXR], th_s[MAXR], tw_s[MAXR];
    volatile int *toff = toff_s, *th = th_s, *tw = tw_s;
    __shared__ float red[SK_RED][SK_THREADS];
    const int H = (int)g.H, W = (int)g.W, C = (int)g.C, F = (int)g.F;
    const int OH = (int)g.OH, OW = (int)g.OW, KC = (int)(g.KH * g.KW * g.C);
    const int P = (int)g.N * OH * OW, rows = KC + with_db;
    const int t = threadIdx.x, G = SK_THREADS / FT, grp = t / FT, fl = t % FT;
    const int f = blockIdx.y * FT + fl;
    if (t < KC) { /* tap r -> (kh, kw, c): offset in x from the window's corner */
        const int c = t % C, tap = t / C, kw = tap % (int)g.KW, kh = tap / (int)g.KW;
        th[t] = kh * g.dh;
        tw[t] = kw * g.dw;
        toff[t] = (th[t] * W + tw[t]) * C + c;
    }
    __syncthreads();

    float acc[MAXR], accb = 0.0f;
#pragma unroll
    for (int r = 0; r < MAXR; r++) acc[r] = 0.0f;
    const int p0 = blockIdx.x * chunk, p1 = min(p0 + chunk, P);
    if (grp < G && f < F && p0 + grp < p1) {
        const int ext_h = (int)(g.KH - 1) * g.dh, ext_w = (int)(g.KW - 1) * g.dw;
        /* pixel p = p0 + grp as (n, oh, ow), and the step G in the same mixed radix */
        int p = p0 + grp;
        int ow = p % OW, oh = (p / OW) % OH, n = p / (OW * OH);
        const int s_ow = G % OW, s_oh = (G / OW) % OH, s_n = G / (OW * OH);
        /* dq: dy of the next SK_U pixels of this group (loads kept in flight) */
        float dq[SK_U];
#pragma unroll
        for (int u = 0; u < SK_U; u++) dq[u] = p + u * G < p1 ? gc_to_f(dy[(p + u * G) * F + f]) : 0.0f;
#pragma unroll 1
        for (; p < p1; p += G) {
            const float dv = dq[0];
#pragma unroll
            for (int u = 0; u < SK_U - 1; u++) dq[u] = dq[u + 1];
            const int pn = p + SK_U * G;
            dq[SK_U - 1] = pn < p1 ? gc_to_f(dy[pn * F + f]) : 0.0f;
            const int ih0 = oh * g.sh - g.pad_top, iw0 = ow * g.sw - g.pad_left;
            const T *xb = x + ((n * H + ih0) * W + iw0) * C;
            if (ih0 >= 0 && iw0 >= 0 && ih0 + ext_h < H && iw0 + ext_w < W) {
#pragma unroll
                for (int r = 0; r < MAXR; r++)
                    if (r < KC) acc[r] = fmaf(gc_to_f(xb[toff[r]]), dv, acc[r]);
            } else { /* a window over the padding: skip the cells outside */
#pragma unroll
                for (int r = 0; r < MAXR; r++)
                    if (r < KC && (unsigned)(ih0 + th[r]) < (unsigned)H &&
                        (unsigned)(iw0 + tw[r]) < (unsigned)W)
                        acc[r] = fmaf(gc_to_f(xb[toff[r]]), dv, acc[r]);
            }
            accb += dv;
            ow += s_ow; /* advance by G pixels */
            const int cw = ow >= OW;
            ow -= cw ? OW : 0;
            oh += s_oh + cw;
            const int ch = oh >= OH;
            oh -= ch ? OH : 0;
            n += s_n + ch;
        }
    }
    /* the G group sums of each (r, f), added in group order, SK_RED rows per round */
    float *pz = part + (size_t)blockIdx.x * rows * F;
#pragma unroll
    for (int r0 = 0; r0 < MAXR + 1; r0 += SK_RED) {
        if (r0 >= rows) break;
        __syncthreads();
#pragma unroll
        for (int rr = 0; rr < SK_RED; rr++) {
            const int r = r0 + rr;
            red[rr][t] = r < KC && r < MAXR ? acc[r < MAXR ? r : 0] : accb;
        }
        __syncthreads();
        for (int o = t; o < SK_RED * FT; o += SK_THREADS) {
            const int rr = o / FT, fo = o % FT, r = r0 + rr, ff = blockIdx.y * FT + fo;
            if (r >= rows || ff >= F) continue;
            float v = 0.0f;
            for (int q = 0; q < G; q++) v += red[rr][q * FT + fo];
            pz[r * F + ff] = v;
        }
    }
}

/* 1 when the small-K kernel takes the shape: KC <= 64 and every offset it forms
 * (including a window's corner over the padding) within 32-bit index math. */
static int smallk_applies(const gc_conv2d_geom *g)
{
    const int64_t lim = (int64_t)1 << 30;
    const int64_t KC = g->KH * g->KW * g->C, eh = (g->KH - 1) * g->dh, ew = (g->KW - 1) * g->dw;
    if (KC > 64 || g->F > lim || eh >= lim || ew >= lim || g->H >= lim || g->W >= lim) return 0;
    return g->N * g->OH * g->OW * g->F < lim &&
           (double)(g->N * g->H + eh + 1) * (double)(g->W + ew + 1) * (double)g->C < (double)lim;
}

/* The small-K kernel's launch (smallk_applies checked). */
static gc_status simt_bwd_filter_smallk(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                        const void *x, const void *dy, void *dw, void *db)
{
    const int64_t KC = g->KH * g->KW * g->C, P = g->N * g->OH * g->OW, F = g->F;
    const int FT = F < SK_FT ? (int)F : SK_FT, G = SK_THREADS / FT;
    const int64_t ftiles = (F + FT - 1) / FT;
    const int64_t rows = KC + (db ? 1 : 0);
    /* about 4 blocks per SM in all, each pixel group summing >= 2 batches of SK_U */
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    int64_t S = (sms * 4 + ftiles - 1) / ftiles;
    int64_t chunk = (P + S - 1) / S;
    if (chunk < (int64_t)G * SK_U * 2) chunk = (int64_t)G * SK_U * 2;
    S = (P + chunk - 1) / chunk;
    if (S > 4096) {
        chunk = (P + 4095) / 4096;
        S = (P + chunk - 1) / chunk;
    }
    if (ftiles > 65535)
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter: F=%lld is too large", (long long)F);

    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(S * rows * F) * sizeof(float), &ws);
    if (st) return st;
    float *part = (float *)ws;
    dim3 grid((unsigned)S, (unsigned)ftiles);
    cudaStream_t s = gc_cuda_stream(be);
    const int wdb = db ? 1 : 0;
#define SK_LAUNCH(MR)                                                                       \
    GC_CUDA_DISPATCH_FLOAT(dt, T,                                                           \
        conv_simt_wgrad_smallk_kernel<T, MR><<<grid, SK_THREADS, 0, s>>>(                   \
            *g, (const T *)x, (const T *)dy, FT, (int)chunk, wdb, part))
    if (KC <= 16) {
        SK_LAUNCH(16);
    } else if (KC <= 32) {
        SK_LAUNCH(32);
    } else {
        SK_LAUNCH(64);
    }
#undef SK_LAUNCH
    if ((st = gc_cuda_launch_check("conv2d_bwd_filter (simt, small K)"))) return st;
    if ((st = gc_conv2d_reduce_splits(be, dt, part, (int)S, rows * F, KC * F, dw))) return st;
    if (db) st = gc_conv2d_reduce_splits(be, dt, part + KC * F, (int)S, rows * F, F, db);
    return st;
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
    if (smallk_applies(g)) return simt_bwd_filter_smallk(be, g, dt, x, dy, dw, db);
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
