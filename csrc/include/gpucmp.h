/* gpucmp.h -- the C API of the gpucmp core.
 *
 * What it provides: status codes, run-time dtypes, a tensor descriptor, typed
 * parameter structs per op, the one op list (GC_OP_LIST X-macro) from which the
 * op enum, the op names, every backend's op table and the test registry are
 * derived, and the backend table itself. The execution plan built on top of it is
 * declared in gpucmp_plan.h.
 *
 * Why it is built this way (DESIGN.md, "Rules of the core"): backends are tables
 * of function pointers chosen at run time; every op slot has the same signature
 * (gc_op_fn over a gc_op_call), so the X-macro can build the tables and an op a
 * backend lacks is a NULL slot reported as GC_ERR_UNSUPPORTED; errors are values
 * (gc_status plus a thread-local message), never exit()/abort(). No Python.h here.
 */
#ifndef GPUCMP_H
#define GPUCMP_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ status */
typedef enum {
    GC_OK = 0,
    GC_ERR_INVALID_ARG,  /* bad shape, rank or parameter       -> ValueError */
    GC_ERR_DTYPE,        /* dtype not accepted here            -> TypeError  */
    GC_ERR_NOMEM,        /* host or device allocation failed   -> MemoryError */
    GC_ERR_UNSUPPORTED,  /* the backend has no such op         -> NotImplementedError */
    GC_ERR_BACKEND,      /* driver / runtime failure           -> RuntimeError */
    GC_ERR_NONFINITE     /* NaN or Inf where it is not allowed  -> ValueError */
} gc_status;

const char *gc_status_name(gc_status s);
/* Message of the last failure on this thread ("" when none). */
const char *gc_last_error(void);
/* Records a printf-style message for the calling thread and returns s, so that
 * `return gc_fail(GC_ERR_INVALID_ARG, "x: ...");` is the one error idiom. */
gc_status gc_fail(gc_status s, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
void gc_clear_error(void);

/* ------------------------------------------------------------------ dtypes */
typedef enum { GC_F32 = 0, GC_F16, GC_BF16, GC_I32, GC_DTYPE_COUNT } gc_dtype;
size_t gc_dtype_size(gc_dtype t);
const char *gc_dtype_name(gc_dtype t);

/* Storage conversions (round-to-nearest-even), used at the edges of float32
 * compute on the CPU and by the tests. */
void gc_f32_to_f16(const float *src, uint16_t *dst, size_t n);
void gc_f16_to_f32(const uint16_t *src, float *dst, size_t n);
void gc_f32_to_bf16(const float *src, uint16_t *dst, size_t n);
void gc_bf16_to_f32(const uint16_t *src, float *dst, size_t n);

/* ------------------------------------------------------------------ tensors */
#define GC_MAX_DIMS 6
/* A dense row-major tensor; `data` is host memory for the CPU backend and
 * device memory for the CUDA backend. */
typedef struct {
    void *data;
    gc_dtype dtype;
    int ndim;
    int64_t shape[GC_MAX_DIMS];
} gc_tensor;

int64_t gc_tensor_numel(const gc_tensor *t);
gc_tensor gc_tensor_make(void *data, gc_dtype dtype, int ndim, const int64_t *shape);

/* ------------------------------------------------------------------ op params */
typedef enum { GC_ACT_LINEAR = 0, GC_ACT_RELU, GC_ACT_TANH, GC_ACT_SIGMOID, GC_ACT_SOFTMAX,
               GC_ACT_COUNT } gc_act;
typedef enum { GC_PAD_VALID = 0, GC_PAD_SAME } gc_padding;

/* C = act(alpha * op(A) @ op(B) + beta * C + bias[None, :]); A, B, C row-major.
 * inputs: A, B, bias (optional: data NULL); outputs: C.  act is elementwise
 * (softmax is rejected: use act_fwd). */
/* impl: 0 = gpucmp's own kernels; 1 = the vendor library (cuBLAS(Lt) / cuDNN) as a
 * baseline, GC_ERR_UNSUPPORTED where absent (always on the CPU). */
typedef enum { GC_IMPL_OWN = 0, GC_IMPL_VENDOR = 1 } gc_impl;
typedef struct { int trans_a, trans_b; float alpha, beta; gc_act act; gc_impl impl; } gc_gemm_params;

/* NHWC input, kernel (kh, kw, in, out) as Keras stores it, cross-correlation.
 * conv2d_fwd:        in x, w, bias(opt)      out y = act(conv(x, w) + bias)
 * conv2d_bwd_data:   in dy, w                out dx            (dy already through act')
 * conv2d_bwd_filter: in x, dy                out dw, db(opt)
 * accumulate (conv2d_bwd_data only; 0 elsewhere): dx += the gradient instead of dx = it
 * (GEMM's beta = 1: the plan adds a fanned-out input's second gradient this way). */
typedef struct {
    int stride_h, stride_w, dil_h, dil_w;
    gc_padding padding;
    gc_act act;
    gc_impl impl;
    int accumulate;
} gc_conv2d_params;

/* maxpool2d_fwd / avgpool2d_fwd: in x out y; maxpool2d_bwd: in x, dy out dx;
 * avgpool2d_bwd: in dy out dx (shape of x taken from dx).  Padded cells never win a
 * max and are not counted in an average (TensorFlow's rule).
 * act: linear, or for maxpool2d_bwd relu: x is the output of a ReLU, and dx comes out
 * multiplied by relu'(x) -- the backward of ReLU folded in (the plan uses it for the
 * conv + relu + max-pool pattern: one pass over the activations instead of two).
 * pad_top / pad_bottom / pad_left / pad_right (>= 0, each smaller than the pool's extent
 * on its axis, so that every window holds a cell of x): explicit padding, with padding
 * 'valid' only -- the windows run over the padded extent and padded cells count as
 * above. Over x >= 0 a max pool so padded is ZeroPadding2D + MaxPooling2D without the
 * padded copy (the plan's ResNet stem; a -0.0 against a padded 0 can come out as -0.0). */
typedef struct {
    int pool_h, pool_w, stride_h, stride_w;
    gc_padding padding;
    gc_act act;
    int pad_top, pad_bottom, pad_left, pad_right;
} gc_pool2d_params;

/* act_fwd: in x out y; act_bwd: in y (the forward output), dy out dx.
 * Softmax works over the last axis. */
typedef struct { gc_act act; } gc_act_params;

/* Losses write a per-sample loss (rows,) and, when the second output's data is not
 * NULL, the gradient of grad_scale * sum(loss) with respect to their first input.
 * softmax_xent:    in logits (rows, cols), labels (rows, cols) f32 or (rows,) i32
 * sigmoid_bce:     in logits, labels (rows, cols); loss = mean over cols
 * xent_probs:      in probabilities, labels; Keras' clipped path (eps 1e-7);
 *                  binary != 0 gives binary cross-entropy (mean over cols)
 * regression_loss: in pred, target; kind 0 = mse, 1 = mae (mean over cols) */
typedef enum { GC_REG_MSE = 0, GC_REG_MAE = 1 } gc_regression_kind;
typedef struct { float grad_scale; int binary; gc_regression_kind kind; } gc_loss_params;

/* bias_grad: in dy (rows, cols) out db (cols,) = sum over rows. */
typedef struct { int unused; } gc_no_params;

/* Dropout with a counter-based mask: keep element i iff gc_uniform01(seed, i) >= rate,
 * kept elements scaled by 1/(1-rate). Backward regenerates the mask from the seed, so
 * no mask is stored and every backend draws the same mask.
 * dropout_fwd: in x out y; dropout_bwd: in dy out dx. */
/* dyn_seed: see "Dynamic values" below; the effective seed is seed ^ *dyn_seed. */
typedef struct { float rate; uint64_t seed; const uint64_t *dyn_seed; } gc_dropout_params;

/* Optimizer updates, in place. Inputs: g. Outputs (read and written): w, then state.
 * adam: outputs w, m, v    (Keras: alpha = lr*sqrt(1-b2^t)/(1-b1^t), t = iterations+1)
 * sgd: outputs w, m (m optional when momentum == 0)
 * rmsprop: outputs w, v */
typedef struct { float lr, beta_1, beta_2, epsilon; int64_t t; const float *dyn, *skip; } gc_adam_params;
/* 1 - b as Keras 3's updates use it: from the shortest decimal that rounds to b, in
 * double, rounded to float (csrc/core/keras_constants.c): 0.999f -> 0.001f, where
 * 1.0f - 0.999f is 0.000999987f */
float gc_one_minus(float b);
typedef struct { float lr, momentum; int nesterov; const float *dyn, *skip; } gc_sgd_params;
typedef struct { float lr, rho, epsilon; const float *dyn, *skip; } gc_rmsprop_params;
/* Dynamic values (for steps captured once into a CUDA graph and replayed): when `dyn`
 * is not NULL it points to BACKEND memory holding float32 {lr, t} (t: Adam's step, exact
 * up to 2^24) that the kernel reads when it runs, instead of the lr / t fields; likewise
 * dropout's `dyn_seed` (a uint64 in backend memory, XORed into `seed`). The plan updates
 * that memory before each replay, so one graph serves every step.
 * `skip`, when not NULL, points to one float32 in backend memory: when it is not 0 when
 * the kernel runs (the non-finite gradient count of scale_cast under dynamic loss
 * scaling), the update leaves w and the state as they are -- the skipped step of Keras'
 * LossScaleOptimizer, decided on the device so a captured step needs no host sync. */

/* accuracy: in pred (rows, cols), labels (rows, cols) f32 or (rows,) i32; out count (1,)
 * = number of correct rows (categorical: argmax match; sparse: argmax == label;
 * binary: mean over all elements of (pred > threshold) == (label > 0.5), times rows). */
typedef enum { GC_ACC_CATEGORICAL = 0, GC_ACC_SPARSE, GC_ACC_BINARY } gc_accuracy_kind;
typedef struct { gc_accuracy_kind kind; float threshold; } gc_accuracy_params;

/* cast: in x (any float dtype) out y (any float dtype, same shape). */

/* scale_cast: in x (any float dtype); out y (any float dtype, x's element count),
 * optionally out bad (1,) float32. y = x * s in float32, rounded to y's dtype once, with
 * s = scale, times *dyn_scale (or divided by it when `invert`) when dyn_scale is not NULL
 * (backend memory: the plan's dynamic loss scale). When `bad` is given, the number of
 * non-finite elements of y is ADDED to it (the gradient check of dynamic loss scaling).
 * loss_scale_update: out bad (1,), state (2,) {scale, good_steps}, optionally dyn (2,)
 * {lr, t}, all float32, read and written -- Keras' LossScaleOptimizer after one step: bad
 * == 0: good_steps + 1, and scale * 2 with good_steps = 0 once growth_steps good steps
 * are reached, t + 1 (the optimizer applied the step); bad != 0: scale / 2, good_steps
 * = 0, t unchanged (skipped). bad is reset to 0 for the next step. */
typedef struct { float scale; const float *dyn_scale; int invert; } gc_scale_cast_params;
typedef struct { int growth_steps; } gc_loss_scale_params;

/* reduce_sum: in x (any shape, float) out y (1,) float32: y = scale * sum(x), or
 * y += scale * sum(x) when accumulate (the plan keeps loss / metric totals on the
 * device this way). Summed in double on the CPU, in a fixed order on GPUs. */
typedef struct { int accumulate; float scale; } gc_reduce_params;

/* embedding_fwd: in table (V, D) of any dtype (f32/f16/bf16/i32), idx int32 of any shape
 *                out rows: shape idx.shape + (D,), table's dtype (a gather: also how a
 *                plan takes batches out of a data set resident on the device)
 * embedding_bwd: in dy (idx.shape + (D,)), idx; out dtable (V, D) = zeros + the dy rows
 *                summed per index (deterministic order).
 * An index outside [0, V) is an error (GC_ERR_INVALID_ARG naming it), never a silent
 * read; on GPUs it is detected on the device and reported outside graph capture. */

/* ---- graph ops (the functional-API plan: ResNet-style residual graphs)
 * add:   in x0, x1 (required), x2..x7 (optional: data NULL); out y = act(x0 + x1 + ...)
 *        summed in float32 in input order; every operand of one dtype and one element
 *        count (ranks may differ). act: linear or relu. y may alias x0 (in-place
 *        accumulation of gradients at a fan-out).
 * mul:   in a, b; out y = a * b elementwise (same dtype and element count); y may alias a.
 * batchnorm_fwd: in x (rank >= 1, channels = the LAST axis C, R = numel / C rows),
 *        gamma (C,) f32 (NULL = 1), beta (C,) f32 (NULL = 0), residual (x's shape and
 *        dtype, optional); out y (x's shape and dtype, must not alias x), moving_mean (C,)
 *        f32, moving_var (C,) f32 (read; written when training), save (2, C) f32 (row 0 the
 *        mean used, row 1 the inverse std used).
 *        training: mean and biased variance over the R rows (float64 on the CPU, a fixed
 *        reduction order on GPUs), moving = moving * momentum + batch * (1 - momentum),
 *        save = (mean, 1/sqrt(var + epsilon)); inference: the moving statistics, not
 *        written. y = act(gamma * (x - mean) * invstd + beta + residual), act linear or
 *        relu, float32 compute, rounded once.
 * batchnorm_bwd: in x, dy (x's shape/dtype), gamma (optional), save (from the forward),
 *        y (the forward output: the relu mask y > 0), beta (optional, (C,) f32: only
 *        with mask_from_x); out (each optional) dx (x's shape/dtype; may alias dy),
 *        dgamma (C,) f32 = sum(dz * xhat), dbeta (C,) f32 = sum(dz), dresidual (x's
 *        shape/dtype) = dz, where dz = dy * relu'(y) (dy for linear) and xhat = (x -
 *        mean) * invstd. With relu, y is required unless mask_from_x: then y is not
 *        given and the mask is recomputed from x, gamma, beta and save exactly as the
 *        forward rounded y (bit for bit the same mask: the forward's float32 formula and
 *        its rounding to x's dtype), which holds only for a forward without a residual
 *        -- the caller's promise; it saves reading y twice (the plan's BN + ReLU). training:
 *        dx = gamma*invstd*(dz - mean_R(dz) - xhat*mean_R(dz*xhat)); inference:
 *        dx = gamma*invstd*dz. The backward reads only training and act.
 *        training = GC_BN_REFILL (forward only): y from the statistics already in save (a
 *        training pass's), bit for bit that pass's y; moving_mean / moving_var and save are
 *        neither read nor written (the plan refills an output it did not keep). */
typedef struct {
    float epsilon, momentum;
    int training;
    gc_act act;
    int mask_from_x;     /* batchnorm_bwd: the relu mask from x (see above), not from y */
    gc_dtype mask_dtype; /* set by core where it widens x to float32 (gc_op_run): the storage
                          * dtype whose rounding the recomputed mask reproduces; callers leave 0 */
} gc_batchnorm_params;
#define GC_BN_REFILL 2
/* pad2d_fwd: in x (N, H, W, C) out y (N, H+top+bottom, W+left+right, C), zeros outside
 * (Keras ZeroPadding2D); pad2d_bwd: in dy (the padded shape) out dx (N, H, W, C) = the
 * crop. All four >= 0. */
typedef struct { int top, bottom, left, right; } gc_pad2d_params;
/* concat: in x0 (outer, w0) required, x1..x7 (outer, w_i) optional; out y (outer, sum w_i)
 * = the inputs side by side in input order, one dtype (the plan reshapes an N-d concat
 * to 2-D: outer = product of the axes before the concat axis).
 * slice_cols: in x (outer, W) out y (outer, w) = x[:, offset:offset+w], offset + w <= W
 * (concat's backward). */
typedef struct { int64_t offset; } gc_slice_params;

/* ---- recurrent layers (SimpleRNN / LSTM / GRU; RECURRENT_SPEC.md 1.1-1.3, 1.5-1.8, 1.12):
 * only the sequential part of the layer. The plan computes the input projection of all
 * steps as one GEMM, xw = x.W + b (Keras kernel layout (in, G*u), gate column blocks), and
 * after the backward the weight gradients as GEMMs over all steps (below).
 * G = gc_rnn_gates(cell) = 1, 4, 3, 3; gate order LSTM i, f, c, o; GRU z, r, h.
 * Activations: SimpleRNN uses act; LSTM / GRU use act for the candidate and the cell
 * output and recurrent_act for the gates (Keras defaults tanh / sigmoid).
 * Time order: xw, mask, save, dxw and dm are in INPUT order (index t = the step that
 * consumes x[:, t]); with go_backwards the loop runs t = T-1 .. 0 and y (sequences) is in
 * PROCESSING order as Keras returns it: y[:, k] is the output after consuming x[:, T-1-k].
 * Masking is Keras' generic path (1.8): a masked (row, step) carries every state over;
 * its emitted output is the previous emitted output (zeros before the first valid step),
 * or 0 with zero_output_for_mask; y (not sequences) is the last emitted output; h_T / c_T
 * the states after the last valid step (the initial state for a fully masked row). Any
 * mask pattern. Compute and the carried states are float32; storage float32, float16 or
 * bfloat16, one dtype for every float tensor of a call except mask (always float32).
 *
 * rnn_fwd: in xw (B, T, G*u); U (u, G*u) the recurrent kernel (Keras layout); h0 (B, u)
 *        optional (NULL = zeros); c0 (B, u) optional, LSTM only; mask (B, T) float32
 *        optional (nonzero = step used; NULL = all used); bh (G*u,) optional, GRU
 *        reset_after only: the recurrent bias b_h (row 1 of Keras' (2, 3u) bias);
 *        rmask (B, G*u) float32 optional (below).
 *        out y (B, T, u) when sequences else (B, u); save (S, B, T, u) optional (NULL:
 *        inference, nothing saved), S = gc_rnn_save_blocks(cell); h_T (B, u) optional;
 *        c_T (B, u) optional, LSTM only. Every element of every output is written
 *        (masked steps included: save holds the cell's values computed for every row).
 *        save blocks, each (B, T, u), in input order; block 0 is always hprev (the h
 *        state entering the step that consumes x[:, t]):
 *          simple:           0 hprev, 1 hn = act(xw + hprev.U)  (the cell output)
 *          lstm:             0 hprev, 1 cprev, 2 i, 3 f, 4 g (candidate), 5 o, 6 c_t
 *          gru (reset_after):0 hprev, 1 z, 2 r, 3 hh (candidate), 4 m_h = hprev.U_h + bh_h
 *          gru_reset_before: 0 hprev, 1 z, 2 r, 3 hh, 4 rh = r * (hprev * rmask_h)
 *        rmask (B, G*u) float32 optional (NULL = none), the recurrent dropout masks of
 *        Keras' implementation 1 (RECURRENT_SPEC 1.7): one (B, u) column block per gate,
 *        the same at every step. Gate g's recurrent product is (hprev * rmask_g) . U_g
 *        (U_g = U[:, g*u:(g+1)*u]); every other use of hprev is unmasked (GRU's
 *        z * hprev, save block 0); reset_before's reset multiplies the masked copy.
 * rnn_bwd: in dy (y's shape, optional = zeros: the gradient of y in y's order); dh_T
 *        (B, u) optional; dc_T (B, u) optional, LSTM only; U; save (from rnn_fwd); mask
 *        (optional, as in the forward); rmask (optional, the forward's). out dxw (B, T, G*u) = d loss / d xw (the
 *        pre-activation input parts), zeros for masked (row, step); dm (B, T, 3u) optional,
 *        GRU reset_after only (NULL for the other cells, for which dm == dxw): d loss / d m
 *        with m = hprev.U + bh (differs from dxw in the h block by the factor r); dh0
 *        (B, u) optional; dc0 (B, u) optional, LSTM only. Through a masked (row, step) the
 *        state gradients go straight to the previous states.
 *        The plan then does, with hprev = save[0] viewed as (B*T, u):
 *          dU = hprev^T . dxw   (gru reset_after: hprev^T . dm; gru_reset_before: the z, r
 *               blocks hprev^T . dxw[..., :2u] and the h block save[4]^T . dxw[..., 2u:])
 *          dW = x^T . dxw, db = sum dxw, dbh = sum dm, dx = dxw . W^T.
 *        With rmask, dh0 (and every dhprev inside) gets each gate's recurrent part
 *        (dz_g . U_g^T) * rmask_g, and the plan's dU is per gate block with the masked
 *        hprev: dU_g = (hprev * rmask_g)^T . dxw_g (or dm_g; reset_before's h block
 *        stays save[4]^T . dxw_h, save[4] holding the masked product already). */
/* ---- sequence masks (Keras masking, RECURRENT_SPEC.md 1.8; recurrent dropout, 1.7)
 * seq_mask: in x (..., F) of any float dtype, rank >= 2; out mask (x's shape without the
 *        last axis) float32 = 1 where some x[..., f] != value (NaN counts as different),
 *        else 0: Embedding(mask_zero=True)'s mask ids != 0 (F = 1) and Masking(mask_value)'s
 *        any(x != mask_value, axis=-1).
 * mul_bcast: in x (A, M, C) of any float dtype, m (A, C) float32; out y (x's shape and
 *        dtype) = x * m[:, None, :], y may alias x: Masking's output x * mask (C = 1) and
 *        its gradient, and a variational dropout mask (B, F) applied at every step of a
 *        (B, T, F) sequence (M = T) and to its gradient. */
/* reverse_seq: in x (A, T, C) of any float dtype; out y (x's shape and dtype, must not
 *        alias x) = x[:, T-1-t, :]: a sequence in reverse time order -- Bidirectional's
 *        backward outputs put back in input order, and (being its own inverse) their
 *        gradient. */
typedef struct { float value; } gc_seq_mask_params;
/* weight_grads: in x (K, M1), h (K, M2) optional, g (K, N), one float dtype; out dw (M1, N)
 *        = x^T . g, du (M2, N) = h^T . g (present iff h is), db (N,) optional = the column
 *        sums of g. Outputs must not alias inputs. The weight gradients of y = x.W + h.U + b
 *        from one output gradient g: a recurrent layer's W, U and b (g = dxw, h = save[0])
 *        in one op, so that a backend can read g once for all three (the CPU stacks the
 *        two products into one GEMM over a shared packing of g and sums g's columns from
 *        that packing; CUDA runs its GEMM twice and bias_grad). */

typedef enum { GC_RNN_SIMPLE = 0, GC_RNN_LSTM, GC_RNN_GRU /* reset_after=True */, GC_RNN_GRU_RESET_BEFORE } gc_rnn_cell;
typedef enum { GC_RNN_TANH = 0, GC_RNN_SIGMOID, GC_RNN_RELU, GC_RNN_LINEAR,
               GC_RNN_HARD_SIGMOID /* Keras 3: clip(x/6 + 0.5, 0, 1) */ } gc_rnn_act;
typedef struct { gc_rnn_cell cell; gc_rnn_act act, recurrent_act; int go_backwards, sequences, zero_output_for_mask; } gc_rnn_params;
int gc_rnn_gates(gc_rnn_cell cell);       /* G: 1, 4, 3, 3 (0 for an unknown cell) */
int gc_rnn_save_blocks(gc_rnn_cell cell); /* S: blocks of (B, T, u) in `save`: 2, 7, 5, 5 */

/* ------------------------------------------------------------------ the op list
 * X(ENUM, name, params type, inputs, outputs) -- the one source of truth. */
#define GC_OP_LIST(X)                                                        \
    X(GEMM, gemm, gc_gemm_params, 3, 1)                                      \
    X(CONV2D_FWD, conv2d_fwd, gc_conv2d_params, 3, 1)                        \
    X(CONV2D_BWD_DATA, conv2d_bwd_data, gc_conv2d_params, 2, 1)              \
    X(CONV2D_BWD_FILTER, conv2d_bwd_filter, gc_conv2d_params, 2, 2)          \
    X(MAXPOOL2D_FWD, maxpool2d_fwd, gc_pool2d_params, 1, 1)                  \
    X(MAXPOOL2D_BWD, maxpool2d_bwd, gc_pool2d_params, 2, 1)                  \
    X(AVGPOOL2D_FWD, avgpool2d_fwd, gc_pool2d_params, 1, 1)                  \
    X(AVGPOOL2D_BWD, avgpool2d_bwd, gc_pool2d_params, 1, 1)                  \
    X(ACT_FWD, act_fwd, gc_act_params, 1, 1)                                 \
    X(ACT_BWD, act_bwd, gc_act_params, 2, 1)                                 \
    X(BIAS_GRAD, bias_grad, gc_no_params, 1, 1)                              \
    X(SOFTMAX_XENT, softmax_xent, gc_loss_params, 2, 2)                      \
    X(SIGMOID_BCE, sigmoid_bce, gc_loss_params, 2, 2)                        \
    X(XENT_PROBS, xent_probs, gc_loss_params, 2, 2)                          \
    X(REGRESSION_LOSS, regression_loss, gc_loss_params, 2, 2)                \
    X(DROPOUT_FWD, dropout_fwd, gc_dropout_params, 1, 1)                     \
    X(DROPOUT_BWD, dropout_bwd, gc_dropout_params, 1, 1)                     \
    X(ADAM, adam, gc_adam_params, 1, 3)                                      \
    X(SGD, sgd, gc_sgd_params, 1, 2)                                         \
    X(RMSPROP, rmsprop, gc_rmsprop_params, 1, 2)                             \
    X(ACCURACY, accuracy, gc_accuracy_params, 2, 1)                          \
    X(CAST, cast, gc_no_params, 1, 1)                                        \
    X(EMBEDDING_FWD, embedding_fwd, gc_no_params, 2, 1)                      \
    X(EMBEDDING_BWD, embedding_bwd, gc_no_params, 2, 1)                      \
    X(REDUCE_SUM, reduce_sum, gc_reduce_params, 1, 1)                        \
    X(SCALE_CAST, scale_cast, gc_scale_cast_params, 1, 2)                    \
    X(LOSS_SCALE_UPDATE, loss_scale_update, gc_loss_scale_params, 0, 3)     \
    /* graph ops: {cpu,cuda}/elementwise (add, mul), norm (batchnorm), layout */ \
    X(ADD, add, gc_act_params, 8, 1)                                         \
    X(MUL, mul, gc_no_params, 2, 1)                                          \
    X(BATCHNORM_FWD, batchnorm_fwd, gc_batchnorm_params, 4, 4)               \
    X(BATCHNORM_BWD, batchnorm_bwd, gc_batchnorm_params, 6, 4)               \
    X(PAD2D_FWD, pad2d_fwd, gc_pad2d_params, 1, 1)                           \
    X(PAD2D_BWD, pad2d_bwd, gc_pad2d_params, 1, 1)                           \
    X(CONCAT, concat, gc_no_params, 8, 1)                                    \
    X(SLICE_COLS, slice_cols, gc_slice_params, 1, 1)                         \
    /* recurrent layers: {cpu,cuda}/rnn */                                   \
    X(RNN_FWD, rnn_fwd, gc_rnn_params, 7, 4)                                 \
    X(RNN_BWD, rnn_bwd, gc_rnn_params, 7, 4)                                 \
    /* sequence masks: {cpu,cuda}/seq_mask */                                \
    X(SEQ_MASK, seq_mask, gc_seq_mask_params, 1, 1)                          \
    X(MUL_BCAST, mul_bcast, gc_no_params, 2, 1)                              \
    X(REVERSE_SEQ, reverse_seq, gc_no_params, 1, 1)                          \
    /* recurrent weight gradients: {cpu/gemm.c, cuda/weight_grads.cu} */     \
    X(WEIGHT_GRADS, weight_grads, gc_no_params, 3, 3)

typedef enum {
#define GC_X_ENUM(E, n, P, ni, no) GC_OP_##E,
    GC_OP_LIST(GC_X_ENUM)
#undef GC_X_ENUM
    GC_OP_COUNT
} gc_op;

#define GC_MAX_OP_IN 8  /* add and concat take up to 8 operands */
#define GC_MAX_OP_OUT 4 /* batchnorm's four */

const char *gc_op_name(gc_op op);
int gc_op_from_name(const char *name); /* -1 when unknown */
int gc_op_num_inputs(gc_op op);
int gc_op_num_outputs(gc_op op);
size_t gc_op_params_size(gc_op op);

/* One call of one op. Unused optional tensors have data == NULL. */
typedef struct {
    gc_op op;
    const gc_tensor *in[GC_MAX_OP_IN];
    gc_tensor *out[GC_MAX_OP_OUT];
    const void *params; /* points to the op's params type */
} gc_op_call;

/* ------------------------------------------------------------------ backends */
typedef struct gc_backend gc_backend;
typedef gc_status (*gc_op_fn)(const gc_backend *be, const gc_op_call *call);

struct gc_opt_hparams; /* below, after the backend table */
struct gc_opt_slot;
struct gc_cast_slot;

/* Memory accounting of one backend (its memory_stats slot). allocated_bytes: what the
 * backend holds now for its allocations -- every be->alloc not yet released, plus its
 * own device buffers (a GPU backend's workspace, scratch, error flags); peak_bytes: the
 * high-water mark of allocated_bytes since start or the last reset_peak. The device
 * figures come from the driver (cudaMemGetInfo): -1 where the backend has none (CPU). */
typedef struct {
    int64_t allocated_bytes, peak_bytes;
    int64_t device_free_bytes, device_total_bytes;
} gc_memory_stats;

/* The counter the backends keep: lock-free (GCC/Clang __atomic builtins, usable from C
 * and from nvcc's host code alike), so alloc and release from any thread stay exact.
 * The peak is raised with a compare-and-swap loop; a reset sets it to the current value. */
typedef struct {
    int64_t cur, peak;
} gc_mem_counter;
static inline void gc_mem_add(gc_mem_counter *c, int64_t n)
{
    int64_t now = __atomic_add_fetch(&c->cur, n, __ATOMIC_RELAXED);
    int64_t p = __atomic_load_n(&c->peak, __ATOMIC_RELAXED);
    while (now > p && !__atomic_compare_exchange_n(&c->peak, &p, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}
static inline void gc_mem_sub(gc_mem_counter *c, int64_t n) { __atomic_sub_fetch(&c->cur, n, __ATOMIC_RELAXED); }
static inline void gc_mem_read(const gc_mem_counter *c, int64_t *cur, int64_t *peak)
{
    *cur = __atomic_load_n(&c->cur, __ATOMIC_RELAXED);
    *peak = __atomic_load_n(&c->peak, __ATOMIC_RELAXED);
    if (*peak < *cur) *peak = *cur; /* an add between the two loads */
}
static inline void gc_mem_reset_peak(gc_mem_counter *c)
{
    __atomic_store_n(&c->peak, __atomic_load_n(&c->cur, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

struct gc_backend {
    const char *name;          /* "cpu", "cuda" */
    int device_index;
    unsigned native_dtypes;    /* bit (1u << dtype) per float dtype the kernels take
                                  directly; others are converted to f32 by core */
    gc_status (*alloc)(const gc_backend *be, size_t nbytes, void **out);
    void (*release)(const gc_backend *be, void *ptr);
    gc_status (*upload)(const gc_backend *be, void *dst, const void *host_src, size_t nbytes);
    gc_status (*download)(const gc_backend *be, void *host_dst, const void *src, size_t nbytes);
    gc_status (*copy)(const gc_backend *be, void *dst, const void *src, size_t nbytes);
    gc_status (*fill_zero)(const gc_backend *be, void *dst, size_t nbytes);
    gc_status (*sync)(const gc_backend *be);
    gc_op_fn ops[GC_OP_COUNT]; /* NULL: unsupported */
    /* Optional (NULL on the CPU): record the ops issued between begin and end into a
     * replayable graph (CUDA graphs), launch it, free it. */
    gc_status (*capture_begin)(const gc_backend *be);
    gc_status (*capture_end)(const gc_backend *be, void **graph);
    gc_status (*graph_launch)(const gc_backend *be, void *graph);
    void (*graph_destroy)(const gc_backend *be, void *graph);
    /* Optional: the device error flags that captured ops record into without reading them
     * (embedding ids outside the table): read 0 clears them (asynchronously, before graph
     * launches), read 1 waits for the stream, clears them and returns the error of the
     * first bad value recorded since, if any. */
    gc_status (*graph_errors)(const gc_backend *be, int read);
    /* Optional (NULL on the CPU): one optimizer step over many float32 tensors in one
     * launch -- the plan's fused multi-tensor update. slots: BACKEND memory holding
     * n_slots gc_opt_slot; max_n: the largest slot's n; hp: the static hyper-parameters
     * (kind, lr, betas, epsilon, momentum, nesterov, rho, t), with dyn / skip as for the
     * per-tensor ops. Bit for bit what the per-tensor ops give. */
    gc_status (*optim_multi)(const gc_backend *be, const struct gc_opt_hparams *hp, const float *dyn,
                             const float *skip, const struct gc_opt_slot *slots, int n_slots,
                             int64_t max_n);
    /* Optional (NULL on the CPU): scale_cast over many tensors in one launch (the plan's
     * weight casts and gradient conversions). slots: BACKEND memory holding n_slots
     * gc_cast_slot; max_n: the largest slot's n; scale, dyn, invert and bad as the
     * scale_cast op takes them (bad: a float count in backend memory, or NULL). Bit for
     * bit what scale_cast gives per tensor, and with scale 1 and no dyn what cast gives. */
    gc_status (*cast_multi)(const gc_backend *be, const struct gc_cast_slot *slots, int n_slots, int64_t max_n,
                            float scale, const float *dyn, int invert, float *bad);
    /* Optional: the backend's memory accounting (gc_memory_stats) and a reset of its
     * peak to the current value. Call them through gc_backend_memory_stats /
     * gc_backend_reset_peak, which are NULL-safe. A GPU backend initialises its device
     * (as its first op would) to ask the driver for free / total memory. */
    gc_status (*memory_stats)(const gc_backend *be, gc_memory_stats *out);
    void (*reset_peak)(const gc_backend *be);
    /* Host staging of per-call inputs (the plan's stage, csrc/plan/stage.c). host_alloc:
     * host memory the backend can copy from asynchronously (CUDA: page-locked,
     * cudaHostAlloc; not counted in memory_stats); host_free releases it (after the copies
     * that read it are done). upload_async: queues a host -> device copy on the backend's
     * stream and returns; the copy may read host_src until the stream is next waited for
     * (sync, or any download, which waits for the stream), so the caller must neither
     * change nor free host_src before that. uploads_done_on_return: the backend's uploads
     * (upload_async included) have finished reading the source when they return (CPU,
     * meta): a caller needs no staging buffer and passes its own arrays. */
    gc_status (*host_alloc)(const gc_backend *be, size_t nbytes, void **out);
    void (*host_free)(const gc_backend *be, void *ptr);
    gc_status (*upload_async)(const gc_backend *be, void *dst, const void *host_src, size_t nbytes);
    int uploads_done_on_return;
    void *impl;                /* backend private state */
};

typedef enum { GC_OPT_SGD = 0, GC_OPT_ADAM, GC_OPT_RMSPROP, GC_OPT_COUNT } gc_opt_kind;

/* Per-step optimizer hyper-parameters (the learning rate may change between steps): what
 * the plan passes to a fused update (optim_multi) and the per-tensor optimizer ops take. */
typedef struct gc_opt_hparams {
    gc_opt_kind kind;
    float lr, beta_1, beta_2, epsilon, momentum, rho;
    int nesterov;
    int64_t t; /* iterations + 1 */
    /* dynamic loss scaling (plans with gc_train_desc.loss_scaling): the scale and the
     * count of good steps since it last changed, at the start of the call */
    float loss_scale, loss_scale_good;
} gc_opt_hparams;

/* One conversion of a multi-tensor cast (cast_multi): n elements of x (storage dtype
 * xdt) into y (ydt). */
typedef struct gc_cast_slot {
    const void *x;
    void *y;
    int64_t n;
    int32_t xdt, ydt;
} gc_cast_slot;

/* One tensor of a fused optimizer step: w and g, the state (adam: s1 = m, s2 = v; sgd:
 * s1 = momentum or NULL; rmsprop: s1 = v), n elements. */
typedef struct gc_opt_slot {
    void *w;
    const void *g;
    void *s1, *s2;
    int64_t n;
} gc_opt_slot;

/* Registry: the CPU backend is always registered; CUDA registers itself when built
 * and a device is usable. name is "cpu", "cuda" or "cuda:N". */
gc_status gc_backend_get(const char *name, const gc_backend **out);
int gc_backend_count(void);
const gc_backend *gc_backend_at(int i);
gc_status gc_backend_register(const gc_backend *be);
/* The memory_stats / reset_peak slots of `be`; a backend without the slot reports
 * GC_ERR_UNSUPPORTED (stats zeroed, device figures -1) and ignores the reset. */
gc_status gc_backend_memory_stats(const gc_backend *be, gc_memory_stats *out);
void gc_backend_reset_peak(const gc_backend *be);

/* Validates the call against the op's shape / param rules (core/validate.c) and
 * runs it on `be`, converting f16/bf16 storage through f32 temporaries when the
 * backend does not take that dtype natively. */
gc_status gc_op_run(const gc_backend *be, const gc_op_call *call);
/* Only the checks (used by the plan once at creation). */
gc_status gc_op_validate(const gc_op_call *call);

/* Float32 GEMM/conv inputs may run as TF32 on Tensor Cores (the default on Ampere and
 * newer, as TensorFlow does); 0 gives exact float32. Read by GPU backends per call. */
void gc_set_allow_tf32(int allow);
int gc_get_allow_tf32(void);

/* ------------------------------------------------------------------ geometry
 * One source of truth for output shapes and padding (Keras rules). */
typedef struct {
    int64_t N, H, W, C, KH, KW, F, OH, OW;
    int sh, sw, dh, dw, pad_top, pad_left;
} gc_conv2d_geom;
typedef struct {
    int64_t N, H, W, C, PH, PW, OH, OW;
    int sh, sw, pad_top, pad_left;
} gc_pool2d_geom;

/* Output extent of a window op along one axis; returns < 1 when none fits. */
int64_t gc_out_extent(int64_t in, int64_t k, int stride, int dil, gc_padding pad);
/* Leading (top / left) padding; the extra cell of an odd total goes bottom/right. */
int gc_pad_before(int64_t in, int64_t out, int64_t k, int stride, int dil, gc_padding pad);
gc_status gc_conv2d_geometry(int64_t N, int64_t H, int64_t W, int64_t C, int64_t KH,
                             int64_t KW, int64_t F, const gc_conv2d_params *p,
                             gc_conv2d_geom *g);
gc_status gc_pool2d_geometry(int64_t N, int64_t H, int64_t W, int64_t C,
                             const gc_pool2d_params *p, gc_pool2d_geom *g);

/* ------------------------------------------------------------------ RNG */
/* Counter-based uniform in [0, 1): the same value on every backend. */
static inline uint32_t gc_hash32(uint64_t seed, uint64_t i)
{
    uint64_t z = seed ^ (i * 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (uint32_t)(z >> 32);
}
static inline float gc_uniform01(uint64_t seed, uint64_t i)
{
    return (float)(gc_hash32(seed, i) >> 8) * (1.0f / 16777216.0f);
}

#ifdef __cplusplus
}
#endif
#endif /* GPUCMP_H */
