/* layout.cu -- data movement of the graph ops on CUDA: zero padding of NHWC images
 * (pad2d_fwd), its crop (pad2d_bwd), column concatenation of 2-D views (concat) and
 * the column slice that is its backward (slice_cols).
 *
 * Pure copies, so elements are moved as raw 2- or 4-byte words (f16/bf16 or f32: the
 * bits are kept exactly; a zero word is +0.0 in every float format). Every kernel walks
 * rows: blockIdx.y strides over rows, blockIdx.x / threadIdx.x over the contiguous words
 * of a row, so accesses are coalesced and no per-element division is needed (a padded
 * image row (n, oh) is one contiguous run of OW * C words). Launches go to the backend's
 * stream; no host syncs (graph-capturable). */
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

/* y row (n, oh) of OW*C words: x's row (n, oh - top) shifted by left*C, zeros around */
template <typename E>
__global__ void __launch_bounds__(LAYOUT_THREADS)
pad2d_fwd_kernel(int64_t N, int64_t H, int64_t W, int64_t C, int top, int left, int64_t OH, int64_t OW,
                 const E *__restrict__ x, E *__restrict__ y)
{
    const int64_t len = OW * C, lo = (int64_t)left * C, hi = lo + W * C;
    for (int64_t row = blockIdx.y; row < N * OH; row += gridDim.y) {
        const int64_t n = row / OH, h = row % OH - top;
        const int inside = h >= 0 && h < H;
        const int64_t xbase = (n * H + (inside ? h : 0)) * W * C - lo; /* x index of y column j: xbase + j */
        E *yr = y + row * len;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < len; j += (int64_t)gridDim.x * blockDim.x)
            yr[j] = (inside && j >= lo && j < hi) ? x[xbase + j] : (E)0;
    }
}

/* dx row (n, h) of W*C words = dy's row (n, h + top) from column left*C on */
template <typename E>
__global__ void __launch_bounds__(LAYOUT_THREADS)
pad2d_bwd_kernel(int64_t N, int64_t H, int64_t W, int64_t C, int top, int left, int64_t OH, int64_t OW,
                 const E *__restrict__ dy, E *__restrict__ dx)
{
    const int64_t len = W * C;
    for (int64_t row = blockIdx.y; row < N * H; row += gridDim.y) {
        const int64_t n = row / H, h = row % H;
        const E *src = dy + ((n * OH + h + top) * OW + left) * C;
        E *dst = dx + row * len;
        for (int64_t j = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; j < len; j += (int64_t)gridDim.x * blockDim.x)
            dst[j] = src[j];
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
    if (N * OH * OW * C == 0) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    if (!bwd) {
        dim3 grid = row_grid(N * OH, OW * C);
        LAYOUT_DISPATCH(small->dtype, E,
                        pad2d_fwd_kernel<E><<<grid, LAYOUT_THREADS, 0, s>>>(
                            N, H, W, C, p->top, p->left, OH, OW, (const E *)call->in[0]->data, (E *)call->out[0]->data));
        return gc_cuda_launch_check("pad2d_fwd");
    }
    if (N * H * W * C == 0) return GC_OK;
    dim3 grid = row_grid(N * H, W * C);
    LAYOUT_DISPATCH(small->dtype, E,
                    pad2d_bwd_kernel<E><<<grid, LAYOUT_THREADS, 0, s>>>(
                        N, H, W, C, p->top, p->left, OH, OW, (const E *)call->in[0]->data, (E *)call->out[0]->data));
    return gc_cuda_launch_check("pad2d_bwd");
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
