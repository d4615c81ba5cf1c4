/* layout.cu -- data movement of the graph ops on CUDA: zero padding of NHWC images
 * (pad2d_fwd), its crop (pad2d_bwd), column concatenation of 2-D views (concat) and
 * the column slice that is its backward (slice_cols).
 *
 * Pure copies, so elements are moved as raw words (f16/bf16 or f32: the bits are kept
 * exactly; a zero word is +0.0 in every float format). Launches go to the backend's
 * stream; no host syncs (graph-capturable).
 *
 * pad2d: a padded image row (n, oh) is one contiguous run of OW * C words: zeros, the
 * W * C words of x's row (n, oh - top), zeros; the crop copies the middle back. Both
 * directions run one flat kernel over the output in packs of 16, 8, 4 or 2 bytes: the
 * widest that divides the input and output row lengths, the left padding (all in bytes)
 * and both pointers, so that a pack never straddles a row or the edge of the interior
 * (C * element size a multiple of 16, as ResNet's 64-channel bf16 pad, gives 16-byte
 * packs; the 3-channel stem pad falls back to words). Each thread moves 4 packs (8 when
 * they are narrower than 8 bytes) per step, all loads first, so enough bytes are in
 * flight to reach the memory bandwidth; a pack's (row, column) comes from one 32-bit
 * division by a precomputed multiplier (div31) when the sizes fit in 31 bits, else from
 * 64-bit division. The row kernels (concat, slice_cols) walk rows: blockIdx.y strides
 * over rows, blockIdx.x / threadIdx.x over the contiguous words of a row. */
#include "common.cuh"

#include <string.h>

#define LAYOUT_THREADS 256

static dim3 row_grid(int64_t rows, int64_t len)
{
    int64_t gx = (len + LAYOUT_THREADS - 1) / LAYOUT_THREADS;
    if (gx > 1024) gx = 1024;
    if (gx < 1) gx = 1;
    int64_t gy = rows < 65535 ? rows : 65535;
    if (gy < 1) gy = 1;
    return dim3((unsigned)gx, (unsigned)gy);
}

/* Division by an invariant d >= 1 for dividends 0 <= q < 2^31 (Granlund and Montgomery,
 * PLDI 1994, Theorem 4.2, with N = 31): with l = ceil(log2 d) and m = ceil(2^(31+l) / d),
 * 2^(31+l) <= m*d < 2^(31+l) + d <= 2^(31+l) + 2^l, so floor(q / d) = (q * m) >> (31 + l).
 * m < 2^32 (d > 2^(l-1), or m = 2^31 for d = 2^l), so it is one 32x32->64 multiply and a
 * shift on the device. */
typedef struct {
    uint32_t m;
    int s;
} div31_t;

static div31_t div31_make(uint32_t d)
{
    int l = 0;
    while (((uint64_t)1 << l) < d) l++;
    div31_t f;
    f.m = (uint32_t)((((uint64_t)1 << (31 + l)) + d - 1) / d);
    f.s = 31 + l;
    return f;
}

__device__ __forceinline__ uint32_t div31(uint32_t q, div31_t f) { return (uint32_t)(((uint64_t)q * f.m) >> f.s); }

/* pad2d in packs (see the header): output pack q is row q / len, pack j = q % len of it.
 * Forward: row (n, oh) of N*OH, the input's row n*H + oh - top at packs [lo, hi) of it.
 * Backward: row (n, h) of N*H, taken from dy's row n*OH + h + top from pack lo on. */
typedef struct {
    int64_t total;  /* output packs: rows * len */
    int64_t len;    /* packs per output row */
    int64_t in_len; /* packs per input row */
    int64_t lo, hi; /* forward: the interior [lo, hi); backward: lo = the crop's first pack */
    int64_t per, H, OH; /* output rows per image (forward OH, backward H); the heights */
    int64_t top;
    div31_t d_len, d_per; /* by len and by per (32-bit path only) */
} pad_geom;

template <typename P, typename I, int BWD>
__global__ void __launch_bounds__(LAYOUT_THREADS) pad2d_kernel(pad_geom g, const P *__restrict__ x, P *__restrict__ y)
{
    constexpr int U = sizeof(P) >= 8 ? 4 : 8; /* packs per thread per step */
    const I total = (I)g.total, len = (I)g.len, in_len = (I)g.in_len, per = (I)g.per;
    const I H = (I)g.H, OH = (I)g.OH, top = (I)g.top, lo = (I)g.lo, hi = (I)g.hi;
    const I step = (I)gridDim.x * (LAYOUT_THREADS * U);
    for (I base = (I)blockIdx.x * (LAYOUT_THREADS * U) + threadIdx.x; base < total; base += step) {
        P v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const I q = base + u * LAYOUT_THREADS;
            v[u] = P();
            if (q < total) {
                I row, n;
                if (sizeof(I) == 4) {
                    row = (I)div31((uint32_t)q, g.d_len);
                    n = (I)div31((uint32_t)row, g.d_per);
                } else {
                    row = q / len;
                    n = row / per;
                }
                const I j = q - row * len, r = row - n * per; /* pack j of image row r of image n */
                if (BWD) {
                    v[u] = x[(n * OH + r + top) * in_len + lo + j];
                } else {
                    const I h = r - top;
                    if (h >= 0 && h < H && j >= lo && j < hi) v[u] = x[(n * H + h) * in_len + (j - lo)];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const I q = base + u * LAYOUT_THREADS;
            if (q < total) y[q] = v[u];
        }
    }
}

typedef struct {
    const void *x[GC_MAX_OP_IN];
    int64_t w[GC_MAX_OP_IN], off[GC_MAX_OP_IN];
    int n;
} concat_args;

template <typename E>
__global__ void __launch_bounds__(LAYOUT_THREADS) concat_kernel(int64_t rows, int64_t W, concat_args a, E *__restrict__ y)
{
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        E *yr = y + r * W;
        for (int k = 0; k < a.n; k++) {
            const E *xr = (const E *)a.x[k] + r * a.w[k];
            for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < a.w[k];
                 j += (int64_t)gridDim.x * blockDim.x)
                yr[a.off[k] + j] = xr[j];
        }
    }
}

template <typename E>
__global__ void __launch_bounds__(LAYOUT_THREADS)
slice_cols_kernel(int64_t rows, int64_t W, int64_t w, int64_t offset, const E *__restrict__ x, E *__restrict__ y)
{
    for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
        const E *xr = x + r * W + offset;
        E *yr = y + r * w;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < w; j += (int64_t)gridDim.x * blockDim.x)
            yr[j] = xr[j];
    }
}

/* Runs the statement with E bound to the word type of float dtype dt (2 or 4 bytes). */
#define LAYOUT_DISPATCH(dt, E, ...)                                    \
    do {                                                               \
        if (gc_dtype_size(dt) == 2) { typedef uint16_t E; __VA_ARGS__; } \
        else { typedef uint32_t E; __VA_ARGS__; }                      \
    } while (0)

static gc_status pad2d(const gc_backend *be, const gc_op_call *call, int bwd)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_pad2d_params *p = (const gc_pad2d_params *)call->params;
    const gc_tensor *small = bwd ? call->out[0] : call->in[0];
    const int64_t N = small->shape[0], H = small->shape[1], W = small->shape[2], C = small->shape[3];
    const int64_t OH = H + p->top + p->bottom, OW = W + p->left + p->right;
    if ((bwd ? N * H * W * C : N * OH * OW * C) == 0) return GC_OK; /* nothing to write */
    const void *x = call->in[0]->data;
    void *y = call->out[0]->data;
    const int64_t es = (int64_t)gc_dtype_size(small->dtype);
    /* the widest pack that divides every row length and offset (bytes) and both pointers */
    const uint64_t bits = (uint64_t)(OW * C * es) | (uint64_t)(W * C * es) | (uint64_t)(p->left * C * es) |
                          (uint64_t)(uintptr_t)x | (uint64_t)(uintptr_t)y;
    const int64_t pb = bits % 16 == 0 ? 16 : bits % 8 == 0 ? 8 : bits % 4 == 0 ? 4 : es;
    const int64_t wpp = pb / es; /* words per pack */
    pad_geom g;
    g.len = (bwd ? W : OW) * C / wpp;
    g.in_len = (bwd ? OW : W) * C / wpp;
    g.lo = p->left * C / wpp;
    g.hi = g.lo + (bwd ? 0 : W * C / wpp);
    g.per = bwd ? H : OH;
    g.H = H;
    g.OH = OH;
    g.top = p->top;
    g.total = N * g.per * g.len;
    const int64_t in_total = N * (bwd ? OH : H) * g.in_len;
    const int U = pb >= 8 ? 4 : 8;
    int64_t blocks = (g.total + (int64_t)LAYOUT_THREADS * U - 1) / ((int64_t)LAYOUT_THREADS * U);
    const int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (blocks > cap) blocks = cap;
    /* 32-bit indices when every pack index, and the loop's last step past the end, fit */
    const int64_t lim = (int64_t)1 << 30;
    const int narrow = g.total < lim && in_total < lim && blocks * LAYOUT_THREADS * U < lim;
    if (narrow) {
        g.d_len = div31_make((uint32_t)g.len);
        g.d_per = div31_make((uint32_t)g.per);
    } else {
        g.d_len = g.d_per = div31_make(1);
    }
    cudaStream_t s = gc_cuda_stream(be);
#define PAD_LAUNCH(P)                                                                                          \
    do {                                                                                                       \
        if (narrow && bwd) pad2d_kernel<P, int, 1><<<(unsigned)blocks, LAYOUT_THREADS, 0, s>>>(g, (const P *)x, (P *)y); \
        else if (narrow) pad2d_kernel<P, int, 0><<<(unsigned)blocks, LAYOUT_THREADS, 0, s>>>(g, (const P *)x, (P *)y);  \
        else if (bwd) pad2d_kernel<P, int64_t, 1><<<(unsigned)blocks, LAYOUT_THREADS, 0, s>>>(g, (const P *)x, (P *)y); \
        else pad2d_kernel<P, int64_t, 0><<<(unsigned)blocks, LAYOUT_THREADS, 0, s>>>(g, (const P *)x, (P *)y);           \
    } while (0)
    switch (pb) {
    case 16: PAD_LAUNCH(uint4); break;
    case 8: PAD_LAUNCH(uint2); break;
    case 4: PAD_LAUNCH(uint32_t); break;
    default: PAD_LAUNCH(uint16_t); break;
    }
#undef PAD_LAUNCH
    return gc_cuda_launch_check(bwd ? "pad2d_bwd" : "pad2d_fwd");
}

extern "C" gc_status gc_cuda_op_pad2d_fwd(const gc_backend *be, const gc_op_call *call) { return pad2d(be, call, 0); }
extern "C" gc_status gc_cuda_op_pad2d_bwd(const gc_backend *be, const gc_op_call *call) { return pad2d(be, call, 1); }

extern "C" gc_status gc_cuda_op_concat(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    concat_args a;
    memset(&a, 0, sizeof a);
    int64_t W = 0, widest = 0;
    for (int k = 0; k < GC_MAX_OP_IN; k++) {
        const gc_tensor *t = call->in[k];
        if (!t || !t->data || t->shape[1] == 0) continue;
        a.x[a.n] = t->data;
        a.w[a.n] = t->shape[1];
        a.off[a.n] = W;
        W += t->shape[1];
        if (t->shape[1] > widest) widest = t->shape[1];
        a.n++;
    }
    const gc_tensor *y = call->out[0];
    const int64_t rows = y->shape[0];
    W = y->shape[1];
    if (rows * W == 0) return GC_OK;
    dim3 grid = row_grid(rows, widest);
    LAYOUT_DISPATCH(y->dtype, E,
                    concat_kernel<E><<<grid, LAYOUT_THREADS, 0, gc_cuda_stream(be)>>>(rows, W, a, (E *)y->data));
    return gc_cuda_launch_check("concat");
}

extern "C" gc_status gc_cuda_op_slice_cols(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const gc_slice_params *p = (const gc_slice_params *)call->params;
    const gc_tensor *x = call->in[0], *y = call->out[0];
    const int64_t rows = x->shape[0], W = x->shape[1], w = y->shape[1];
    if (rows * w == 0) return GC_OK;
    dim3 grid = row_grid(rows, w);
    LAYOUT_DISPATCH(x->dtype, E,
                    slice_cols_kernel<E><<<grid, LAYOUT_THREADS, 0, gc_cuda_stream(be)>>>(
                        rows, W, w, p->offset, (const E *)x->data, (E *)y->data));
    return gc_cuda_launch_check("slice_cols");
}
