/* cpu_kernels.h -- float32 kernels of the CPU backend and their op-table adapters.
 *
 * Each op family lives in one file (gemm.c, conv2d.c, pool2d.c, act.c, loss.c,
 * dropout.c, optim.c, metrics.c, cast.c, embedding.c, elementwise.c, norm.c, rnn.c,
 * layout.c). A file holds (1) raw float32 kernels (embedding_fwd: any element size)
 * with plain pointer arguments, usable from other kernels (conv2d calls
 * gc_cpu_sgemm), and (2) one adapter per op of GC_OP_LIST,
 * gc_cpu_op_<name>, which unpacks a validated gc_op_call (core/validate.c has already
 * checked shapes, dtypes and params, and f16/bf16 storage has been converted to f32 by
 * core, except for embedding_fwd's gather) and calls the kernel.
 * backend.c builds the op table from GC_OP_LIST, so a missing adapter is a link error.
 *
 * Threading: kernels use OpenMP themselves; none may be called with a buffer that
 * aliases another argument unless stated. All return GC_OK or a gc_fail(...) status.
 */
#ifndef GPUCMP_CPU_KERNELS_H
#define GPUCMP_CPU_KERNELS_H

#include "gpucmp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- gemm.c: C[M,N] = act(alpha * op(A) @ op(B) + beta * C + bias[N]).
 * op(A) is A (M x K, row stride lda) or, when trans_a, A^T with A stored K x M.
 * op(B) is B (K x N, ldb) or, when trans_b, B^T with B stored N x K.
 * beta == 0 means C is not read (it may hold NaN). bias may be NULL. K == 0 gives
 * act(beta * C + bias). act must be elementwise (not softmax). */
typedef struct {
    int trans_a, trans_b;
    int64_t M, N, K;
    float alpha, beta;
    const float *A; int64_t lda;
    const float *B; int64_t ldb;
    float *C; int64_t ldc;
    const float *bias;
    gc_act act;
} gc_sgemm_args;
gc_status gc_cpu_sgemm(const gc_sgemm_args *a);
/* n (1..GC_SGEMM_SHARED_MAX) products that share B (the same B, ldb, trans_b, N and K;
 * each its own A, C, alpha, beta, bias and act), computed as one product with the
 * problems stacked along M, so each block of B is packed once for all of them: the
 * weight gradients x^T g and h^T g of one output gradient g. colsum (N values, or NULL;
 * B stored K x N) gets the column sums of B, taken from the packed blocks (the bias
 * gradient of g, without another pass over it). */
#define GC_SGEMM_SHARED_MAX 4
gc_status gc_cpu_sgemm_shared_b(const gc_sgemm_args *const *gs, int n, float *colsum);
/* Name of the micro-kernel the next GEMM runs ("avx512", "fma" (256-bit AVX + FMA, no
 * AVX2 needed) or "generic"): the one forced at the variant point cpu.gemm.simd
 * (gpucmp_variants.h; GPUCMP_FORCE=cpu.gemm.simd=... or its alias GPUCMP_CPU_SIMD), else
 * the best this CPU has. For benchmarks and bug reports. */
const char *gc_cpu_sgemm_variant(void);
/* A thin wrapper of gc_variant_force("cpu.gemm.simd", name) ("auto" goes back to the
 * automatic choice), so tests and benchmarks can run each variant the machine has; an
 * unknown name or one the CPU lacks gives GC_ERR_INVALID_ARG. Process-wide; a GEMM
 * already running keeps its variant. */
gc_status gc_cpu_sgemm_force_variant(const char *name);
/* Registers the CPU backend's variant points and their probe with the registry (once;
 * gc_cpu_backend() and the GEMM entry points call it). */
void gc_cpu_register_variants(void);

/* Internal to gemm.c and gemm_microkernels.c: one micro-kernel variant.
 * ukr computes the mr x nr tile C = alpha * Ap Bp + beta * C + bias from a packed A
 * micro-panel (kc groups of mr values) and a packed B micro-panel (kc groups of nr
 * values, 64-byte aligned); beta == 0 does not read C; bias (nr values) may be NULL.
 * act applies an elementwise activation to n contiguous values in place. */
typedef struct {
    const char *name;
    int mr, nr; /* micro-tile */
    int kc;     /* K block: the A micro-panel (mr x kc) stays in L1; gemm.c sizes the N
                   block from the L2, which holds the packed B block (kc x nc) */
    void (*ukr)(int64_t kc, const float *ap, const float *bp, float *c, int64_t ldc,
                float alpha, float beta, const float *bias);
    void (*act)(gc_act act, float *x, int64_t n);
} gc_sgemm_kernel;
extern const gc_sgemm_kernel gc_sgemm_kernel_generic;
#if defined(__x86_64__) || defined(__i386__)
extern const gc_sgemm_kernel gc_sgemm_kernel_fma;    /* needs avx + fma */
extern const gc_sgemm_kernel gc_sgemm_kernel_avx512; /* needs avx512f */
#endif

/* ---- act.c: elementwise activation applied in place to n values (not softmax). */
void gc_cpu_act_inplace(gc_act act, float *x, int64_t n);
/* dx = dy * act'(y), y being the forward output; for softmax, rows x cols. */
gc_status gc_cpu_act_fwd(gc_act act, int64_t rows, int64_t cols, const float *x, float *y);
gc_status gc_cpu_act_bwd(gc_act act, int64_t rows, int64_t cols, const float *y,
                         const float *dy, float *dx);

/* ---- conv2d.c (NHWC, kernel kh,kw,in,out; geometry from core) */
gc_status gc_cpu_conv2d_fwd(const gc_conv2d_geom *g, const float *x, const float *w,
                            const float *bias, gc_act act, float *y);
gc_status gc_cpu_conv2d_bwd_data(const gc_conv2d_geom *g, const float *dy, const float *w,
                                 float *dx, int accumulate); /* accumulate: dx += */
gc_status gc_cpu_conv2d_bwd_filter(const gc_conv2d_geom *g, const float *x, const float *dy,
                                   float *dw, float *db /* may be NULL */);

/* ---- pool2d.c */
gc_status gc_cpu_maxpool2d_fwd(const gc_pool2d_geom *g, const float *x, float *y);
gc_status gc_cpu_maxpool2d_bwd(const gc_pool2d_geom *g, int relu, const float *x, const float *dy,
                               float *dx);
gc_status gc_cpu_avgpool2d_fwd(const gc_pool2d_geom *g, const float *x, float *y);
gc_status gc_cpu_avgpool2d_bwd(const gc_pool2d_geom *g, const float *dy, float *dx);

/* ---- loss.c: per-row loss, optional gradient (NULL to skip) scaled by grad_scale.
 * Exactly one of labels / labels_i32 is non-NULL; an i32 label outside [0, cols)
 * returns GC_ERR_INVALID_ARG naming the row. */
gc_status gc_cpu_softmax_xent(int64_t rows, int64_t cols, const float *logits,
                              const float *labels, const int32_t *labels_i32,
                              float *loss, float *dlogits, float grad_scale);
gc_status gc_cpu_sigmoid_bce(int64_t rows, int64_t cols, const float *logits,
                             const float *labels, float *loss, float *dlogits,
                             float grad_scale);
gc_status gc_cpu_xent_probs(int binary, int64_t rows, int64_t cols, const float *p,
                            const float *labels, const int32_t *labels_i32, float *loss,
                            float *dp, float grad_scale);
gc_status gc_cpu_regression_loss(gc_regression_kind kind, int64_t rows, int64_t cols,
                                 const float *pred, const float *target, float *loss,
                                 float *dpred, float grad_scale);
/* db[c] = sum_r dy[r, c] */
gc_status gc_cpu_bias_grad(int64_t rows, int64_t cols, const float *dy, float *db);

/* ---- dropout.c (the adapters apply the params' dyn_seed: seed ^ *dyn_seed) */
gc_status gc_cpu_dropout_fwd(int64_t n, const float *x, float *y, float rate, uint64_t seed);
gc_status gc_cpu_dropout_bwd(int64_t n, const float *dy, float *dx, float rate, uint64_t seed);

/* ---- optim.c (Keras formulas, KERAS_SEMANTICS.md). When p->dyn is not NULL, lr (and
 * Adam's t) are read from p->dyn[0] (and p->dyn[1]), host memory on this backend. */
gc_status gc_cpu_adam(int64_t n, float *w, const float *g, float *m, float *v,
                      const gc_adam_params *p);
gc_status gc_cpu_sgd(int64_t n, float *w, const float *g, float *m /* NULL if momentum 0 */,
                     const gc_sgd_params *p);
gc_status gc_cpu_rmsprop(int64_t n, float *w, const float *g, float *v,
                         const gc_rmsprop_params *p);

/* ---- metrics.c: number of correct rows (see gc_accuracy_params). */
gc_status gc_cpu_accuracy(gc_accuracy_kind kind, int64_t rows, int64_t cols,
                          const float *pred, const float *labels, const int32_t *labels_i32,
                          float threshold, double *count);

/* ---- embedding.c: n = number of indices (flat, row-major); an index outside [0, V)
 * returns GC_ERR_INVALID_ARG "indices: value %d at position %lld is outside [0, V)"
 * before anything is written.
 * fwd: out row p = table row idx[p], copied as bytes (row_bytes = D * element size), so
 * every dtype works as stored. bwd: dtable (V, D) = zeros + the dy rows added per index
 * in position order (float32; deterministic, the same for every thread count). */
gc_status gc_cpu_embedding_fwd(int64_t n, int64_t V, int64_t row_bytes, const void *table,
                               const int32_t *idx, void *out);
gc_status gc_cpu_embedding_bwd(int64_t n, int64_t V, int64_t D, const float *dy,
                               const int32_t *idx, float *dtable);

/* ---- elementwise.c: y = act(x[0] + ... + x[n_in-1]) (relu or linear), summed in input
 * order; y may alias x[0]. */
gc_status gc_cpu_add(int n_in, const float *const *x, int64_t n, int relu, float *y);

/* ---- layout.c: zero padding of (N, H, W, C) images to (N, H+t+b, W+l+r, C); crop != 0
 * is the backward (src padded, dst unpadded). */
gc_status gc_cpu_pad2d(int crop, int64_t N, int64_t H, int64_t W, int64_t C, const gc_pad2d_params *p,
                       const float *src, float *dst);

/* ---- norm.c: batch normalization of x viewed as (R, C) (gpucmp.h, batchnorm_fwd /
 * batchnorm_bwd); optional tensors are NULL. save is (2, C): mean, inverse std. */
gc_status gc_cpu_batchnorm_fwd(const gc_batchnorm_params *p, int64_t R, int64_t C, const float *x,
                               const float *gamma, const float *beta, const float *residual, float *y,
                               float *moving_mean, float *moving_var, float *save);
gc_status gc_cpu_batchnorm_bwd(const gc_batchnorm_params *p, int64_t R, int64_t C, const float *x,
                               const float *dy, const float *gamma, const float *save, const float *y,
                               const float *beta, float *dx, float *dgamma, float *dbeta, float *dresidual);

/* ---- adapters, one per op of GC_OP_LIST (defined in the op family's file;
 * gc_cpu_op_cast in cast.c) */
#define GC_X_CPU_DECL(E, n, P, ni, no) gc_status gc_cpu_op_##n(const gc_backend *be, const gc_op_call *call);
GC_OP_LIST(GC_X_CPU_DECL)
#undef GC_X_CPU_DECL

#ifdef __cplusplus
}
#endif
#endif
