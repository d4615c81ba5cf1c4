/* gpucmp_plan.h -- the execution plan: a compiled Keras model run as one C call per step.
 *
 * What it provides: gc_plan_create / destroy, one training step (forward, loss, metrics,
 * backward, update) per call, evaluation, inference, and device-resident training over
 * a data set uploaded once (on GPUs one step captured into a CUDA graph and replayed).
 *
 * The model is a graph of layer nodes in topological order (Sequential models are the
 * chain case): a node names the nodes it takes as inputs (any number up to
 * GC_NODE_MAX_INPUTS) and may feed several consumers, whose gradients are accumulated.
 * Weights and optimizer state live in buffers owned by the caller (shared between plans,
 * as Keras models share layers); activations and gradients are owned by the plan and
 * allocated once, for max_batch rows. This layer sits on top of the op API in gpucmp.h
 * (as ggml-opt.h does on ggml.h) and uses nothing but backend slots. */
#ifndef GPUCMP_PLAN_H
#define GPUCMP_PLAN_H

#include "gpucmp.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    GC_LAYER_DENSE = 0,   /* weights: kernel (in, units), bias (units,) or NULL   */
    GC_LAYER_CONV2D,      /* weights: kernel (kh, kw, in, f), bias (f,) or NULL    */
    GC_LAYER_MAXPOOL2D,
    GC_LAYER_AVGPOOL2D,
    GC_LAYER_RESHAPE,     /* Flatten / Reshape: a view, no work                   */
    GC_LAYER_DROPOUT,
    GC_LAYER_ACTIVATION,
    GC_LAYER_INPUT,       /* a model input: no inputs, out_shape given             */
    GC_LAYER_ADD,         /* n inputs of one shape, summed                         */
    GC_LAYER_MULTIPLY,    /* 2 inputs of one shape, elementwise product            */
    GC_LAYER_CONCAT,      /* n inputs joined along `axis` of the per-sample shape  */
    GC_LAYER_BATCHNORM,   /* weights: gamma, beta (or NULL), moving_mean, moving_var;
                           * channels on the last axis; not trainable = inference mode */
    GC_LAYER_PAD2D,       /* zero padding of (H, W, C): pad = {top, bottom, left, right} */
    GC_LAYER_EMBEDDING,   /* weights: embeddings (input_dim, D); input ids as float32 (T,) */
    GC_LAYER_RNN,         /* SimpleRNN / LSTM / GRU over (T, in): weights kernel (in, G*u),
                           * recurrent_kernel (u, G*u), bias (G*u,) -- GRU reset_after (2, 3u);
                           * optional non-trainable state_h, state_c (stateful_batch, u):
                           * inputs x, then rnn_state_inputs initial states (u,), then a
                           * (T,) float32 mask when rnn_mask_input; with return_state the
                           * output is [y | h_T | c_T] side by side per sample            */
    GC_LAYER_SEQ_MASK,    /* Keras step mask of x (T,) or (T, F): any(x != mask_value) over
                           * F, float32 (T,), read as stored by every consumer            */
    GC_LAYER_MASKING,     /* Keras Masking: inputs x (T, F) and its mask (T,): x * mask   */
    GC_LAYER_SELECT,      /* one output of a node with several: elements [select_offset,
                           * select_offset + out_numel) of each sample of its input      */
    GC_LAYER_REVERSE,     /* a (T, ...) sample in reverse time order (axis 0): Bidirectional's
                           * backward outputs back in input order                         */
    GC_LAYER_SCALE,       /* x * scale (Bidirectional's merge_mode "ave")                 */
    GC_LAYER_MASK_OR,     /* Keras masks (T,) float32 of n inputs OR-ed: the mask of a merge */
    GC_LAYER_COUNT
} gc_layer_kind;

#define GC_NODE_MAX_INPUTS 8
#define GC_LAYER_MAX_WEIGHTS 8
/* weight slots by kind */
enum { GC_W_KERNEL = 0, GC_W_BIAS = 1 };
enum { GC_W_GAMMA = 0, GC_W_BETA = 1, GC_W_MOVING_MEAN = 2, GC_W_MOVING_VAR = 3 };
enum { GC_W_EMBEDDINGS = 0 };
enum { GC_W_RNN_KERNEL = 0, GC_W_RNN_RECURRENT = 1, GC_W_RNN_BIAS = 2, GC_W_RNN_STATE_H = 3, GC_W_RNN_STATE_C = 4 };

typedef struct {
    gc_layer_kind kind;
    /* producers: indices of earlier nodes, in argument order. n_inputs == 0 on a node
     * that is not an INPUT means the node before it (a chain); the first node of a list
     * without INPUT nodes reads the one implicit model input (of shape in_shape). */
    int n_inputs;
    int inputs[GC_NODE_MAX_INPUTS];
    int in_ndim, out_ndim;                 /* per-sample shapes (no batch axis); in_shape */
    int64_t in_shape[GC_MAX_DIMS - 1],     /* is the shape of the first input          */
        out_shape[GC_MAX_DIMS - 1];
    gc_act act;                            /* dense / conv epilogue, activation layer */
    int kernel_h, kernel_w;                /* conv2d window */
    gc_conv2d_params conv;
    gc_pool2d_params pool;
    float dropout_rate;
    int axis;                              /* concat: axis of the per-sample shape */
    int pad[4];                            /* pad2d: top, bottom, left, right */
    float epsilon, momentum;               /* batchnorm */
    int64_t input_dim;                     /* embedding: rows of the table */
    int rnn_cell;                          /* rnn: a gc_rnn_cell */
    int rnn_act, rnn_recurrent_act;        /* rnn: gc_rnn_act of the candidate and the gates */
    int go_backwards, return_sequences;    /* rnn */
    int zero_output_for_mask, return_state; /* rnn (RECURRENT_SPEC 1.6, 1.8) */
    int rnn_state_inputs, rnn_mask_input;  /* rnn: initial states among the inputs (0, 1: h0,
                                            * 2: h0 and c0), and a mask input after them */
    int64_t stateful_batch;                /* rnn: > 0 for a stateful layer (its batch size):
                                            * state_h / state_c are the initial states when no
                                            * state input is given, and take h_T / c_T after
                                            * every pass; dropout_rate: its input dropout */
    float recurrent_dropout_rate;          /* rnn: the recurrent dropout applied (0 = none) */
    int rnn_gate_dropout;                  /* rnn: one input dropout mask per gate (Keras'
                                            * implementation 1: recurrent_dropout != 0) */
    int rnn_impl;                          /* rnn: 0 gpucmp's kernels, 1 cuDNN's RNN API
                                            * (use_cudnn=True; layer_rnn_cudnn.c) */
    float mask_value;                      /* seq_mask */
    int64_t select_offset;                 /* select */
    float scale;                           /* scale: the factor */
    int trainable;                         /* snapshot taken at compile() */
    void *weights[GC_LAYER_MAX_WEIGHTS];   /* backend memory, float32; owned by caller */
    gc_dtype dtype;                        /* compute dtype (Keras' policy): activations and
                                            * their gradients are stored in it; f32 master
                                            * weights are cast to it each step; 0 = f32 */
} gc_layer_desc;

typedef enum {
    GC_LOSS_CATEGORICAL_XENT = 0, GC_LOSS_SPARSE_CATEGORICAL_XENT, GC_LOSS_BINARY_XENT,
    GC_LOSS_MSE, GC_LOSS_MAE, GC_LOSS_COUNT
} gc_loss_kind;

/* Metrics the plan evaluates on device in the same pass (bit flags). */
enum { GC_METRIC_ACC_CATEGORICAL = 1, GC_METRIC_ACC_SPARSE = 2, GC_METRIC_ACC_BINARY = 4,
       GC_METRIC_MSE = 8, GC_METRIC_MAE = 16 };
#define GC_METRIC_COUNT 5

typedef struct {
    gc_loss_kind loss;
    int from_logits;  /* the last layer's output is a logit */
    unsigned metrics; /* GC_METRIC_* flags */
    gc_opt_kind opt;
    /* optimizer state per trainable weight, node by node in plan order, each node's
     * trainable weights in slot order (dense/conv: kernel, bias; batchnorm: gamma,
     * beta): adam: 2 buffers (m, v); sgd with momentum: 1 (m); rmsprop: 1 (v); sgd: 0. */
    void **opt_state;
    int n_opt_state;
    /* Keras' LossScaleOptimizer (mixed_float16): the loss gradient is multiplied by the
     * scale, weight gradients are unscaled into float32 and checked; a step with a
     * non-finite gradient leaves weights and state as they were and halves the scale;
     * loss_scale_growth good steps double it. All decided on the device. */
    int loss_scaling;
    int loss_scale_growth;
    /* Keras' masked loss: when has_loss_mask, node loss_mask_node (a float32 0/1 mask with
     * one value per loss row of a sample, e.g. the (T,) step mask of a (T, C) output; it
     * may feed no other node) weights the loss rows as Keras 3 does: the batch's loss is
     * sum(loss * mask) / sum(mask) (0 when nothing is unmasked), its gradient likewise. */
    int has_loss_mask;
    int loss_mask_node;
} gc_train_desc;

/* Sums over the rows of one call (divide by rows for means). */
typedef struct {
    double loss_sum;
    double metric_sum[GC_METRIC_COUNT]; /* indexed by bit position of GC_METRIC_* */
    /* steps the optimizer applied (all of them without loss scaling), and the loss
     * scale state after the call (loss scaling only) */
    int64_t steps_applied;
    double loss_scale, loss_scale_good;
} gc_step_stats;

typedef struct gc_plan gc_plan;

/* Data parallelism (replicas.c): a group of n training plans, one per replica, each
 * training on its shard of the global batch in its own thread. A member plan averages
 * its float32 weight gradients with the others' -- weighted by each shard's rows, added
 * in rank order, the same bits on every member -- before its optimizer step, so the
 * replicas' weights stay identical. Host-memory backends (CPU) only for now. A member
 * whose step fails aborts the group: the others' steps then fail too instead of
 * waiting; an aborted group is not reused. Destroy the group after its plans. */
typedef struct gc_replica_group gc_replica_group;
gc_status gc_replica_group_create(int n, gc_replica_group **out);
void gc_replica_group_destroy(gc_replica_group *g);
int gc_replica_group_size(const gc_replica_group *g);
void gc_replica_group_abort(gc_replica_group *g);
int gc_replica_group_aborted(gc_replica_group *g);
/* rank as a member (once per rank); the reduce every member calls each step (see replica_group.c) */
gc_status gc_replica_group_take_rank(gc_replica_group *g, int rank);
gc_status gc_replica_group_reduce(gc_replica_group *g, int rank, float *arena, int64_t numel, int64_t rows,
                                  float *bad);
/* p (a training plan) becomes replica `rank` of g; it captures no graphs from then on */
gc_status gc_plan_join_group(gc_plan *p, gc_replica_group *g, int rank);

gc_status gc_plan_create(const gc_backend *be, const gc_layer_desc *nodes, int n_nodes,
                         const gc_train_desc *train /* NULL: inference only */,
                         int64_t max_batch, gc_plan **out);
void gc_plan_destroy(gc_plan *plan);
/* The model inputs (INPUT nodes in order, or the one implicit input): how many, and the
 * per-sample element count of input k. */
int gc_plan_num_inputs(const gc_plan *plan);
int64_t gc_plan_input_numel(const gc_plan *plan, int k);
/* x: one host float32 array per model input, (rows, *shape); y: host float32 (rows,
 * *out_shape) or int32 (rows,) for sparse labels. One forward + loss + backward + update,
 * in one call. */
gc_status gc_plan_train_step(gc_plan *plan, const float *const *x, const void *y, int64_t rows,
                             const gc_opt_hparams *hp, uint64_t dropout_seed,
                             gc_step_stats *stats);
/* Loss and metrics without an update (no dropout, BatchNormalization in inference mode). */
gc_status gc_plan_eval_step(gc_plan *plan, const float *const *x, const void *y, int64_t rows,
                            gc_step_stats *stats);
/* Inference: out host float32 (rows, *out_shape). */
gc_status gc_plan_predict(gc_plan *plan, const float *const *x, int64_t rows, float *out);

/* Device-resident training (DESIGN.md, "The execution plan").
 * gc_plan_set_data uploads a whole data set once: x one float32 array per input, (n,
 * *shape); y labels as for train_step (x NULL releases it). GC_ERR_NOMEM when it does not
 * fit: the caller then feeds batches through gc_plan_train_step.
 * gc_plan_train_steps runs ceil(n_rows / batch) steps over the resident data: step s
 * trains on the rows idx[s*batch ...] (host int32 indices into the data set; the last
 * step may be partial). Batches are gathered on the device, loss and metric sums are
 * accumulated there and come back once, in *st, for all the steps. hp->t is the step of
 * the first one (+1 per step); lrs / seeds give each step's learning rate and dropout
 * seed (NULL: hp->lr, 0). On a backend that can capture graphs the full-size step is
 * captured once (after one eager warm-up step) and replayed; gc_plan_use_graphs(p, 0)
 * turns that off (the results are the same: tests compare both). */
gc_status gc_plan_set_data(gc_plan *plan, const float *const *x, const void *y, int64_t n);
gc_status gc_plan_train_steps(gc_plan *plan, const int32_t *idx, int64_t n_rows, int64_t batch,
                              const gc_opt_hparams *hp, const float *lrs, const uint64_t *seeds,
                              gc_step_stats *st);
void gc_plan_use_graphs(gc_plan *plan, int on);
/* Number of steps replayed from a captured graph so far (for tests and benchmarks). */
int64_t gc_plan_graph_replays(const gc_plan *plan);
/* The optimizer step as one fused launch over every tensor (default where the backend
 * has optim_multi) or one op per tensor (on = 0); returns what is in effect. The
 * results are the same bit for bit (tests compare both). */
int gc_plan_use_fused_optimizer(gc_plan *plan, int on);
/* The ops one step issues, in order, without running them: fn is called for every op
 * call of a training step (train != 0: forward, loss and metrics, backward, update) or of
 * an inference pass, with the node that issues it (-1 for the update) and the phase
 * ("forward", "loss", "backward", "update"); seconds is -1 (nothing runs). The harness derives its per-op costs from it
 * (on the meta backend, for any batch, without memory). */
typedef void (*gc_plan_trace_fn)(void *ctx, const gc_op_call *call, int node, const char *phase,
                                 double seconds);
gc_status gc_plan_trace(gc_plan *plan, int64_t rows, int train, gc_plan_trace_fn fn, void *ctx);
/* One training step run eagerly with the backend synchronised around every op: fn gets
 * each op call with its wall time in seconds (launch included; the fused launches of a
 * GPU backend, which are not ops of the list, come with call == NULL: the optimizer with
 * node -1, the multi-tensor casts (weights in the forward, gradients in the update) with
 * node GC_TRACE_CAST_MULTI) -- where a step's time goes, op by op, for profiling and for
 * per-op calibration. Changes the weights like a train_step. */
#define GC_TRACE_CAST_MULTI (-2)
gc_status gc_plan_profile(gc_plan *plan, const float *const *x, const void *y, int64_t rows,
                          const gc_opt_hparams *hp, gc_plan_trace_fn fn, void *ctx);
/* Bytes of backend memory the plan holds (activations, gradients, scratch, arenas):
 * for tests of the buffer reuse and for the harness' memory model. */
int64_t gc_plan_bytes(const gc_plan *plan);
/* Where those bytes are, for memory reports (benchmarks/plan_memory.py): entry k < n of
 * the plan's allocations, each with what it holds ("activation", "gradient", "scratch",
 * "weight_casts", ...) and the node it belongs to (-1: the plan's own). Entries inside
 * the step's one block (offset >= 0) carry their life on the step's schedule, [start,
 * end] inclusive (forward of node i at i, the loss at n, the backward of node i at
 * 2n - i, the update after 2n), and [start2, end2] where the buffer is refilled in the
 * backward; that block itself is the entry "step_block". Returns the
 * number of entries; fills at most cap. */
typedef struct {
    const char *what;
    int node;
    int64_t bytes, offset; /* offset in the step block, -1 for a block of its own */
    int start, end;        /* -1 outside the step block */
    int start2, end2;      /* a second life (a buffer refilled in the backward), else -1 */
} gc_plan_mem_entry;
int gc_plan_memory(const gc_plan *plan, gc_plan_mem_entry *out, int cap);

#ifdef __cplusplus
}
#endif
#endif /* GPUCMP_PLAN_H */
