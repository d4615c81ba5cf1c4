/* gcb.h -- the C API of libgpucmp_cutlass_bench.so, the CUTLASS sm80 baselines of
 * benchmarks/bench_cutlass.py.
 *
 * What it provides: plain C functions (callable through ctypes) that list the CUTLASS 2.x
 * kernels this library was built with -- GEMMs (cutlass::gemm::device::Gemm) and implicit
 * GEMM convolutions (cutlass::conv::device::ImplicitGemmConvolution: fprop, dgrad, wgrad)
 * for cutlass::arch::Sm80 / OpClassTensorOp -- describe each one (a JSON line: data type,
 * layouts, tile, stages, shared memory bytes, whether it fits an sm_86 block) and run one
 * of them `iters` times back to back on a given stream, on device pointers the caller owns.
 *
 * Why it is built this way: it is a benchmark-only program, never a run-time dependency
 * of gpucmp (gpucmp links nothing of CUTLASS). A C API with int/pointer arguments only
 * keeps the Python side a thin ctypes wrapper; every failure is a status and a message
 * written into the caller's buffer (can_implement refusing a shape is GCB_NOT_SUPPORTED,
 * never a crash); the workspace is the caller's (allocated once, outside any timed loop);
 * `iters` launches in one call keep the host's per-launch cost out of the timing.
 *
 * Layouts, as gpucmp's ops (csrc/include/gpucmp.h) store their operands:
 *   GEMM  C (m, n) row-major = alpha * op(A) op(B) + beta * C; A is (m, k) row-major, or
 *         (k, m) row-major (= column-major (m, k): gpucmp's trans_a) in a "t?" config;
 *         B is (k, n) row-major, or (n, k) row-major (gpucmp's trans_b) in a "?t" config.
 *         C is read only when beta != 0.
 *   conv  x NHWC, y NPQK (P, Q the output extents), w KRSC: (out channels, kh, kw, in
 *         channels) -- CUTLASS's filter layout (= PyTorch's channels_last weight), NOT the
 *         (kh, kw, in, out) kernel gpucmp and Keras store: the caller transposes once.
 *         fprop reads x, w and writes y; dgrad reads y (= dy), w and writes x (= dx);
 *         wgrad reads y (= dy), x and writes w (= dw). Padding is pad_h / pad_w cells
 *         before the first row / column; the far side is whatever P, Q imply (Keras'
 *         'same' puts an odd total's extra cell there). Cross-correlation, as Keras.
 */
#ifndef GPUCMP_CUTLASS_BENCH_H
#define GPUCMP_CUTLASS_BENCH_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
    GCB_OK = 0,
    GCB_NOT_SUPPORTED = 1, /* can_implement refused the problem, or the device lacks the shared memory */
    GCB_INVALID_ARG = 2,   /* bad id, size, pointer or workspace */
    GCB_CUDA_ERROR = 3     /* initialize / launch failed (the message has the CUDA error) */
};

/* One convolution problem: the names of cutlass::conv::Conv2dProblemSize. */
typedef struct {
    int n, h, w, c;      /* input x: N, H, W, C */
    int k, r, s;         /* filter: K out channels, R x S window */
    int p, q;            /* output extents */
    int pad_h, pad_w;    /* cells of zero padding before the first row / column */
    int stride_h, stride_w, dil_h, dil_w;
    int split_k;         /* split-K slices (serial reduction through the output); 1 = none */
} gcb_conv_problem;

/* {"cutlass": "4.2.0", "arch": "sm_90a", "nvcc": "13.0", "gemm": n, "conv": m} */
const char *gcb_build_info(void);

int gcb_gemm_count(void);
/* A JSON object describing GEMM config `id` (NULL past the end). */
const char *gcb_gemm_describe(int id);
/* Workspace bytes config `id` needs for (m, n, k) (0 for these configs; kept so that the
 * caller allocates it once outside the timed loop, whatever a config needs). */
size_t gcb_gemm_workspace(int id, int m, int n, int k);
/* Runs GEMM config `id` `iters` times (>= 1) on `stream` (a cudaStream_t; NULL = the
 * legacy default stream); returns a GCB_* status, with a message in msg on failure. */
int gcb_gemm_run(int id, int m, int n, int k, const void *A, const void *B, void *C, float alpha, float beta,
                 void *workspace, size_t workspace_bytes, int iters, void *stream, char *msg, int msg_len);

int gcb_conv_count(void);
const char *gcb_conv_describe(int id);
/* Workspace bytes for problem p (split-K semaphores); GCB_* status. */
int gcb_conv_workspace(int id, const gcb_conv_problem *p, size_t *bytes, char *msg, int msg_len);
/* Runs conv config `id` `iters` times; which of x, w, y are read and which written is
 * the config's op (above). */
int gcb_conv_run(int id, const gcb_conv_problem *p, void *x, void *w, void *y, float alpha, float beta,
                 void *workspace, size_t workspace_bytes, int iters, void *stream, char *msg, int msg_len);

#ifdef __cplusplus
}
#endif
#endif /* GPUCMP_CUTLASS_BENCH_H */
