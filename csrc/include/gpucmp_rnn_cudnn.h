/* gpucmp_rnn_cudnn.h -- a recurrent layer (SimpleRNN / LSTM / GRU) through cuDNN's RNN
 * API: the baseline gpucmp's own recurrence kernels are measured against (issue 10).
 *
 * Why a layer-level path and not a variant of the rnn_fwd op: rnn_fwd takes xw = x.W + b
 * (the plan's GEMM) and U, but cuDNN's RNN computes the input projection itself
 * (CUDNN_LINEAR_INPUT; CUDNN_SKIP_INPUT takes no per-gate projections), so it runs the
 * whole layer, x -> y (and dy -> dx, dW, dU, db). The plan (csrc/plan/layer_rnn_cudnn.c)
 * packs Keras' kernel (in, G*u), recurrent_kernel (u, G*u) and bias into cuDNN's weight
 * space before every pass and unpacks the weight-space gradient into Keras' layout after
 * the backward, through an index map computed once (gc_rnn_cudnn_weight_map, a pure
 * function, tested without cuDNN).
 *
 * cuDNN's conventions (cudnn_adv.h, cuDNN 9): linLayerID 0..G-1 are the input matrices
 * (hidden x input, row-major), G..2G-1 the recurrent ones (hidden x hidden), with one bias
 * vector each. Gates: LSTM i, f, g, o (Keras i, f, c, o: the same order); GRU r, z, n
 * (Keras z, r, h: the first two swapped); RNN_TANH / RNN_RELU one. cuDNN's GRU is Keras'
 * reset_after=True (n = tanh(W_n x + b_Wn + r * (R_n h + b_Rn))). Every layer is set up
 * with CUDNN_RNN_DOUBLE_BIAS (the default mode, supported for every cell): where Keras has
 * one bias (LSTM, SimpleRNN) the recurrent bias vectors are packed as zeros and their
 * gradient (equal to the input bias's) is dropped; without use_bias both are zeros.
 *
 * The backend side (gc_rnn_cudnn_api) exists only in CUDA builds, reached through
 * gc_rnn_cudnn_api_of(be): NULL on every other backend. libcudnn is opened at run time
 * (csrc/cuda/cudnn_lib.cu, shared with conv2d_vendor.cu); absent, available() says why. */
#ifndef GPUCMP_RNN_CUDNN_H
#define GPUCMP_RNN_CUDNN_H

#include <stddef.h>
#include <stdint.h>

#include "gpucmp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int cell;     /* gc_rnn_cell: GC_RNN_SIMPLE, GC_RNN_LSTM or GC_RNN_GRU (reset_after) */
    int act;      /* GC_RNN_SIMPLE: GC_RNN_TANH or GC_RNN_RELU (cuDNN's two basic cells) */
    int bias;     /* the Keras layer has a bias: (G*u,), GRU (2, 3u) */
    int64_t in, u;
    gc_dtype dt;  /* storage of x, y, the states and the weight space */
} gc_rnn_cudnn_layer;

#define GC_RNN_CUDNN_MAX_LIN 8 /* 2G for LSTM */

/* Where cuDNN keeps each matrix and bias vector in its weight space, in elements (-1:
 * absent), and the space's size in elements. */
typedef struct {
    int n_lin;                              /* 2G */
    int64_t mat[GC_RNN_CUDNN_MAX_LIN];      /* linLayerID's matrix: u rows x (in or u) cols */
    int64_t bias[GC_RNN_CUDNN_MAX_LIN];     /* its bias vector (u,) */
    int64_t ws_elems;
} gc_rnn_cudnn_layout;

/* ------------------------------------------------------------------ pure functions (core) */
/* G of a cuDNN-capable cell (1, 4, 3), 0 for any other cell. */
int gc_rnn_cudnn_gates(int cell);
/* Keras' gate column block that feeds cuDNN's gate c (LSTM: c; GRU: 1, 0, 2; simple: 0). */
int gc_rnn_cudnn_keras_gate(int cell, int c);
/* Elements of Keras' weights side by side: [kernel | recurrent_kernel | bias], the index
 * space of the map below (bias: G*u, GRU 2*G*u, none without a bias). */
int64_t gc_rnn_cudnn_keras_elems(const gc_rnn_cudnn_layer *L);
/* The layout of a weight space holding the 2G matrices in linLayerID order, then the 2G
 * bias vectors (what cuDNN 9 does for one unidirectional layer; the plan always asks
 * cuDNN and uses this only in tests). */
gc_status gc_rnn_cudnn_canonical_layout(const gc_rnn_cudnn_layer *L, gc_rnn_cudnn_layout *lay);
/* map[i] (lay->ws_elems entries) = the index in Keras' [kernel | recurrent_kernel | bias]
 * of the weight-space element i, or -1 (padding, LSTM / SimpleRNN's recurrent biases, no
 * bias): packing is ws[i] = keras[map[i]] (0 for -1), unpacking keras[map[i]] = ws[i].
 * GC_ERR_INVALID_ARG when the layout does not fit the layer (a block outside the space,
 * two blocks overlapping) or some Keras element would not be mapped exactly once. */
gc_status gc_rnn_cudnn_weight_map(const gc_rnn_cudnn_layer *L, const gc_rnn_cudnn_layout *lay, int32_t *map);

/* ------------------------------------------------------------------ the backend side (CUDA) */
/* One pass over rows sequences of T steps, batch-major (rows, T, features) as gpucmp
 * stores them. seq_host / seq_dev: each row's length (right padding; 1..T), on the host
 * and in device memory (cuDNN reads both). Optional tensors are NULL: hx / cx zeros, hy /
 * cy not written, dhy / dcy zeros, dhx / dcx not computed. */
typedef struct {
    const gc_rnn_cudnn_layer *L;
    int64_t rows, T;
    int training;                  /* forward: fill the reserve space for a backward */
    const int32_t *seq_host, *seq_dev;
    int all_full;                  /* every length is T (no padding) */
    const void *x;                 /* (rows, T, in) */
    void *y;                       /* (rows, T, u); padded steps 0 */
    const void *hx, *cx;           /* (rows, u) */
    void *hy, *cy;
    const void *dy, *dhy, *dcy;    /* backward: dy (rows, T, u) */
    void *dx, *dhx, *dcx;          /* dx (rows, T, in) (padded steps 0) */
    const void *w;                 /* the packed weight space */
    void *dw;                      /* backward: its gradient (overwritten) */
    size_t w_bytes;
    void *reserve;                 /* training: kept from the forward to the backward */
    size_t reserve_bytes;
} gc_rnn_cudnn_call;

typedef struct {
    /* 1 when libcudnn (9.x, with the RNN API) loaded, else 0 and *why */
    int (*available)(const char **why);
    /* the weight space's size in bytes */
    gc_status (*weight_bytes)(const gc_backend *be, const gc_rnn_cudnn_layer *L, size_t *bytes);
    /* cuDNN's layout of a weight space at ws (a device buffer of weight_bytes) */
    gc_status (*layout)(const gc_backend *be, const gc_rnn_cudnn_layer *L, void *ws, gc_rnn_cudnn_layout *lay);
    /* the reserve space a training forward of rows x T full-length sequences needs */
    gc_status (*reserve_bytes)(const gc_backend *be, const gc_rnn_cudnn_layer *L, int64_t rows, int64_t T,
                               size_t *bytes);
    /* ws[i] = src(map[i]) with src the three Keras buffers side by side (0 for -1); n = ws elements */
    gc_status (*pack)(const gc_backend *be, gc_dtype dt, const int32_t *map, int64_t n, const void *kernel,
                      const void *recurrent, const void *bias, int64_t n_kernel, int64_t n_recurrent, void *ws);
    /* the inverse: dst(map[i]) = ws[i] for map[i] >= 0 (into three buffers; bias may be NULL) */
    gc_status (*unpack)(const gc_backend *be, gc_dtype dt, const int32_t *map, int64_t n, const void *ws,
                        void *kernel, void *recurrent, void *bias, int64_t n_kernel, int64_t n_recurrent);
    /* lengths from a (rows, T) float32 step mask in device memory: into host (rows) and
     * dev (rows, device); GC_ERR_INVALID_ARG naming the row when a mask is not right-padded
     * (1s then 0s) or has no step; GC_ERR_UNSUPPORTED inside a graph capture (it reads the
     * mask on the host) */
    gc_status (*seq_lengths)(const gc_backend *be, const float *mask, int64_t rows, int64_t T, int32_t *host,
                             int32_t *dev, int *all_full);
    gc_status (*forward)(const gc_backend *be, const gc_rnn_cudnn_call *c);
    /* backward data, then backward weights into c->dw (zeroed first) */
    gc_status (*backward)(const gc_backend *be, const gc_rnn_cudnn_call *c);
} gc_rnn_cudnn_api;

/* The backend's cuDNN RNN entry points, or NULL (CPU, meta, a build without CUDA). */
const gc_rnn_cudnn_api *gc_rnn_cudnn_api_of(const gc_backend *be);

#ifdef __cplusplus
}
#endif

#endif /* GPUCMP_RNN_CUDNN_H */
