/* plan_internal.h -- what the files of the execution plan share: the node and plan
 * structs, the table each layer kind fills in, and the helpers the tables call.
 *
 * Why a table per kind (darknet's layer function pointers): the plan's driver code
 * (plan.c: graph, buffers, the step; loss.c; update.c; resident.c) never switches over
 * layer kinds. A kind says which weights it has, checks its shapes, and runs its
 * forward and backward through backend ops; adding a kind is one layer_*.c file and
 * one line in the kind registry (layers.c). */
#ifndef GPUCMP_PLAN_INTERNAL_H
#define GPUCMP_PLAN_INTERNAL_H

#include "gpucmp_plan.h"

#include <string.h>

typedef enum { MODE_TRAIN, MODE_EVAL, MODE_PREDICT } run_mode;

/* One weight of a node: the caller's float32 master copy, its cast to the node's
 * compute dtype, and its gradient (in the compute dtype, and float32 for the update). */
typedef struct {
    void *w;          /* caller's buffer (float32) */
    void *wc;         /* w cast to the node's dtype (dtype != f32), else NULL */
    void *dw;         /* gradient as the node writes it (dtype dwdt), or the arena's dw32 itself */
    gc_dtype dwdt;
    void *dw32;       /* float32 gradient the optimizer reads (the arena) */
    void **state;     /* optimizer state buffers (the caller's) */
    int64_t n;        /* elements */
    int trains;       /* updated by this plan */
} plan_weight;

typedef struct plan_node plan_node;
typedef struct gc_plan gc_plan;
#define GC_NODE_MAX_PRIV 32
/* the plan's device totals (acc): the loss, one per metric bit, then two floats where the
 * step graph copies the loss-scale state so that one read brings both back */
#define GC_PLAN_ACC_TOTALS (1 + GC_METRIC_COUNT)
#define GC_PLAN_ACC_FLOATS (GC_PLAN_ACC_TOTALS + 2)
/* where the dropout seed sits in the block of {lr, t} (plan.c, step_graph.c) */
#define GC_PLAN_DYN_SEED_OFF 64

/* What a layer kind provides. `check` validates the descriptor against its inputs'
 * shapes (in_shapes[k], in_nds[k]) at creation; `weights` fills the element count of
 * each weight slot it uses (0 = unused) and whether the slot is trainable; forward and
 * backward issue backend ops through gc_plan_run. */
typedef struct {
    const char *name;
    int min_inputs, max_inputs;
    gc_status (*check)(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in_shapes)[GC_MAX_DIMS - 1],
                       const int *in_nds);
    void (*weights)(const gc_layer_desc *d, const int64_t *first_in_shape, int64_t *numel, int *trainable);
    gc_status (*forward)(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed);
    gc_status (*backward)(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed);
    int is_view;      /* out aliases the input (reshape): no forward work */
    int elementwise;  /* out has the input's shape and depends on it per element */
    int f32_weights;  /* reads its weights in float32 whatever the compute dtype */
    /* optional: allocates the node's own buffers (l->priv) once its shapes and dtype are
     * known, with gc_plan_alloc (recurrent layers: the input projections, the saved steps) */
    gc_status (*setup)(gc_plan *p, plan_node *l);
    int raw_inputs;   /* reads its inputs as their producers store them (embedding ids): no cast */
    int raw_output;   /* every consumer reads its output as stored, with no gradient (a
                       * float32 step mask): no cast on the way in, nothing on the way back */
    /* optional: whether the node's backward reads its input k (k >= 0) or its own output
     * (k = -1), as configured (weights trained, activation, fusions). The plan frees an
     * activation once no later call reads it, so this must never say 0 for a buffer the
     * backward reads; NULL means it reads all of them. */
    int (*bwd_reads)(const gc_plan *p, const plan_node *l, int k);
    /* optional: the forward's output again, from inputs the plan kept, with no other
     * effect (no statistics updated), bit for bit what the forward wrote: a cheap
     * memory-bound pass (padding, batch norm's normalisation). Where the inputs are kept
     * for the backward anyway, the plan refills the output just before the first backward
     * call that reads it instead of keeping it through the step. */
    gc_status (*refill)(gc_plan *p, plan_node *l, int64_t rows);
    /* refill only an output that no consumer's backward reads (one kept for the node's
     * own backward and for other refills; a max pool's read excepted): a pass as costly
     * as the forward's apply, so not for every output a weight gradient reads */
    int refill_sparingly;
} gc_layer_ops;

const gc_layer_ops *gc_layer_ops_of(gc_layer_kind kind);

struct plan_node {
    gc_layer_desc d;
    const gc_layer_ops *ops;
    int idx;
    int n_in;
    int in[GC_NODE_MAX_INPUTS];        /* producer nodes */
    int64_t in_numel[GC_NODE_MAX_INPUTS], out_numel; /* per sample */
    int n_consumers, last_consumer;
    gc_dtype dt;                       /* compute dtype: out and gout are stored in it */
    void *out, *gout;                  /* activations and the gradient w.r.t. them */
    void *xc[GC_NODE_MAX_INPUTS];      /* input k cast to dt when its producer's dtype differs */
    int n_w;
    plan_weight w[GC_LAYER_MAX_WEIGHTS];
    int trains;                        /* some weight is updated by this plan */
    int grad_needed;                   /* the gradient w.r.t. out is needed upstream */
    int in_grad[GC_NODE_MAX_INPUTS];   /* compute the gradient w.r.t. input k */
    int in_accum[GC_NODE_MAX_INPUTS];  /* ... and add it to what is already there (fan-out) */
    int is_view, owns_out;             /* out aliases input 0's out */
    int absorbed;                      /* folded into node alias_of (a ReLU or residual Add): no work */
    int alias_of;                      /* out is this node's out (views, absorbed nodes), else -1 */
    int gout_alias;                    /* gout is alias_of's gout (a view with one consumer, absorbed) */
    int fold_relu;                     /* max pool after a ReLU: its backward applies relu' */
    int gout_masked;                   /* a ReLU node whose gout already holds dz */
    void *save;                        /* batchnorm: per-channel (mean, inv std) of the pass */
    /* the backward temporaries of this node (in the step block, live during its backward
     * only): dz (its output's shape, l->dt), an input gradient before it is cast or added,
     * and it cast to the producer's dtype; gc_plan_backward points p->scratch / gtmp / gtmp2
     * at them while the node runs */
    void *bscratch, *bgtmp, *bgtmp2;
    int recompute_at;                  /* re-run this node's forward just before the backward
                                        * of that node (its output is not kept), else -1 */
    int refill_head, refill_next;      /* the nodes to re-run before this one's backward: a
                                        * list through refill_next, -1 ended */
    void *priv[GC_NODE_MAX_PRIV];      /* buffers a kind's setup allocated for itself */
    int64_t aux[4];                    /* small values a kind's setup keeps (rnn cudnn: sizes) */
};

/* one block of backend memory the plan owns (released at destroy) */
typedef struct {
    void *ptr;
    size_t bytes;
    const char *what; /* for gc_plan_memory: the label current at allocation */
    int node;
} plan_block;

struct gc_plan {
    const gc_backend *be;
    int n;
    plan_node *L;
    int64_t max_batch;
    int n_inputs;
    int input_node[GC_NODE_MAX_INPUTS];  /* the INPUT nodes, in order */
    int64_t out_numel;                   /* per sample, model output (the last node) */
    void *scratch;                       /* act' products (dz) of the node in its backward */
    void *gtmp, *gtmp2;                  /* a gradient to be cast and / or accumulated (same) */
    int fusions;                         /* node fusions on (GPUCMP_PLAN_FUSE unset or not 0) */
    int training;
    gc_train_desc train;
    void **state_copy;
    /* loss / metrics */
    int sparse;                  /* int32 labels */
    int fused;                   /* last softmax/sigmoid folded into the loss */
    int64_t rows_per_sample;     /* rows of the loss view per sample */
    int64_t cols;                /* classes / last axis */
    void *y, *loss_rows, *probs, *metric_rows, *count;
    float *host_rows;            /* download area for per-row values */
    void *mask_w, *mask_valid, *mask_eps; /* masked loss: per-row weights, sum(mask), a tiny constant */
    int checking;                /* creation dry run: validate instead of execute */
    gc_plan_trace_fn trace;      /* gc_plan_trace / profile: told of every op call of the pass */
    int profiling;               /* gc_plan_profile: sync and time around every op */
    void *trace_ctx;
    int cur_node;                /* the node issuing ops, and the step's phase (for the trace) */
    const char *cur_phase;
    /* device-resident training (gc_plan_train_steps) */
    void *data_x[GC_NODE_MAX_INPUTS], *data_y; /* the data set, one array per input */
    int64_t data_n;
    void *idx_all, *dyn_all, *seed_all; /* one call's indices, per-step {lr, t}, seeds */
    int64_t idx_cap, steps_cap, seed_cap;
    void *idx_step;              /* this step's rows (int32, max_batch) */
    void *dyn;                   /* float {lr, t} the optimizer kernels read */
    void *dyn_seed;              /* uint64 the dropout kernels read: dyn + GC_PLAN_DYN_SEED_OFF */
    void *acc;                   /* float[GC_PLAN_ACC_FLOATS]: loss total, one per metric bit,
                                    then the step graph's copy of the loss-scale state */
    int device_mode;             /* gather on device, dynamic params, totals on device */
    int graphs_on;               /* capture the full-size step when the backend can */
    int no_graphs;               /* a node reads back from the device every pass (an rnn
                                  * node through cuDNN with a mask): never capture */
    void *graph;                 /* captured step, for graph_rows rows */
    int64_t graph_rows, warm_rows, replays;
    void *batch_graph;           /* captured full-size single-batch step (step_graph.c) */
    int64_t batch_warm_rows;     /* the full-size step ran once: capture at the next */
    gc_opt_hparams batch_graph_hp; /* the hyperparameters baked into it (lr and t excepted) */
    void *predict_graph;         /* captured full-size predict: forward + float32 cast (plan.c) */
    int64_t predict_warm_rows;   /* the full-size predict ran once: capture at the next
                                  * (-1: a capture failed, predicts stay eager) */
    /* per-call host staging (stage.c): the backend's host memory the step's inputs go up from */
    void *stage;
    size_t stage_bytes, stage_off;
    int stage_state;             /* 0 not made yet, 1 in use, -1 none (uploads are synchronous) */
    int stage_busy;              /* queued copies may still read it: wait before refilling */
    /* mixed precision */
    int widen;                   /* some dtype is not native to the backend: gc_op_run */
    void *logits32, *glast32;    /* float32 last output / its loss gradient, when needed */
    void *ls_state, *ls_bad;     /* loss scaling: float {scale, good steps}, bad count */
    /* weights: every float32 gradient in one arena (one fused update, later one
     * bucketed all-reduce), the half-precision gradients and weight casts in another */
    void *grad_arena, *half_arena;
    int64_t grad_arena_numel;
    void *opt_slots;             /* backend memory: one gc_opt_slot per trained tensor */
    int n_slots, fused_opt;
    int64_t max_slot_n;
    /* backend memory: gc_cast_slot tables for cast_multi (where the backend has it) --
     * the forward's weight casts and the update's gradient conversions, one launch each */
    void *wcast_slots, *gcast_slots;
    int n_wcast, n_gcast;
    int64_t max_wcast_n, max_gcast_n;
    /* every block of backend memory the plan allocated */
    plan_block *blocks;
    int n_blocks, cap_blocks;
    int64_t bytes;
    int no_reuse;                /* GPUCMP_PLAN_REUSE=0: every step-block buffer its own memory, no refills */
    const char *mem_what;        /* label of the allocations made now (gc_plan_memory) */
    int mem_node;
    gc_plan_mem_entry *arena_map; /* the step block's requests, as placed */
    int n_arena_map;
    /* data parallelism (replicas.c): the group this plan is replica `rank` of, and the
     * rows of the step being run (the reduce weights each member's gradient by them) */
    gc_replica_group *group;
    int rank;
    int64_t cur_rows;
};

/* ------------------------------------------------------------------ helpers (plan.c) */

#define TRY(expr)                   \
    do {                            \
        gc_status s_ = (expr);      \
        if (s_ != GC_OK) return s_; \
    } while (0)

/* an op call with up to 3 inputs and 3 outputs (NULL for absent ones) */
gc_status gc_plan_run(gc_plan *p, gc_op op, const void *params, const gc_tensor *i0, const gc_tensor *i1,
                      const gc_tensor *i2, gc_tensor *o0, gc_tensor *o1, gc_tensor *o2);
/* an op call with any number of tensors (n_in <= GC_MAX_OP_IN, n_out <= GC_MAX_OP_OUT) */
gc_status gc_plan_run_n(gc_plan *p, gc_op op, const void *params, const gc_tensor *const *in, int n_in,
                        gc_tensor *const *out, int n_out);
gc_status gc_plan_scale_cast(gc_plan *p, const void *x, gc_dtype xdt, void *y, gc_dtype ydt, int64_t n,
                             const float *dyn, int invert, int bad);
gc_status gc_plan_cast(gc_plan *p, const void *x, gc_dtype xdt, void *y, gc_dtype ydt, int64_t n);
/* update.c: a cast_multi table of n slots uploaded to backend memory (*dev; *max_n the
 * largest slot), or nothing when the backend has no cast_multi or n == 0; and whether
 * the plan runs its casts through the tables now (not in the creation dry run, where
 * every call is validated, nor while the per-tensor optimizer is forced) */
gc_status gc_plan_cast_table(gc_plan *p, const gc_cast_slot *h, int n, void **dev, int64_t *max_n);
int gc_plan_casts_fused(const gc_plan *p);
/* backend memory owned by the plan, zero-filled */
gc_status gc_plan_alloc(gc_plan *p, int64_t n, gc_dtype dt, void **out);
gc_status gc_plan_copy(gc_plan *p, void *dst, const void *src, size_t bytes);
/* profiling: the backend synchronised, then the monotonic clock in seconds */
double gc_plan_clock(gc_plan *p);

int64_t gc_numel(const int64_t *shape, int nd);
gc_tensor gc_btd(void *data, gc_dtype dt, int64_t rows, const int64_t *shape, int nd);
gc_tensor gc_t1(void *data, gc_dtype dt, int64_t n);
gc_tensor gc_t2(void *data, gc_dtype dt, int64_t r, int64_t c);
gc_tensor gc_none(void);

/* what a kind's forward / backward read and write */
void *gc_node_input(const gc_plan *p, const plan_node *l, int k);  /* input k in l->dt */
void *gc_node_weight(const plan_node *l, int k);                   /* weight k in l->dt */
gc_tensor gc_node_in_tensor(const gc_plan *p, const plan_node *l, int k, int64_t rows);
gc_tensor gc_node_out_tensor(const plan_node *l, int64_t rows);
gc_tensor gc_node_gout_tensor(const plan_node *l, int64_t rows);
/* where the gradient w.r.t. input k goes (in l->dt, shape of input k); after writing it,
 * call gc_node_deliver(p, l, k, rows), which casts and / or accumulates it into the
 * producer's gout when it was not written there directly */
gc_tensor gc_node_gin_tensor(gc_plan *p, const plan_node *l, int k, int64_t rows);
gc_status gc_node_deliver(gc_plan *p, const plan_node *l, int k, int64_t rows);
/* for kinds whose input gradient is a buffer that exists already (add, reshape,
 * dropout at rate 0): copies, casts or accumulates src (l->dt) into the producer's gout */
gc_status gc_node_pass_grad(gc_plan *p, const plan_node *l, int k, void *src, int64_t rows);
/* 1 when the gradient w.r.t. input k may be written straight into the producer's gradient
 * buffer (no cast, nothing there to add to): gc_node_gin_tensor then returns that buffer
 * and gc_node_deliver has nothing to do */
int gc_node_gin_direct(const gc_plan *p, const plan_node *l, int k);
/* 1 when an op that can add its result to what is there (conv2d_bwd_data's accumulate)
 * should add the gradient w.r.t. input k straight into the producer's gradient buffer
 * (gc_node_gout_tensor of the producer; no gc_node_deliver then): a fanned-out input's
 * later gradient, same dtype, node fusions on (GPUCMP_PLAN_FUSE=0 keeps the separate add) */
int gc_node_gin_adds(const gc_plan *p, const plan_node *l, int k);
/* the effective activation of a node in a mode: the fused last one is linear */
gc_act gc_node_act(const gc_plan *p, const plan_node *l, run_mode mode);
/* gradient of the op input w.r.t. an act epilogue: dz = act'(y) * gy in scratch
 * (or gy itself when linear / already masked) */
gc_status gc_node_dz(gc_plan *p, const plan_node *l, int64_t rows, gc_tensor *dz);
int gc_node_trains_weight(const plan_node *l, int k);

/* ------------------------------------------------------------------ the step's parts */
gc_status gc_plan_loss_and_metrics(gc_plan *p, int64_t rows, int want_grad, gc_step_stats *st);
gc_status gc_plan_setup_loss(gc_plan *p);
gc_status gc_plan_update(gc_plan *p, const gc_opt_hparams *hp);
/* replicas.c: the group's mean of the gradients into this member's arena (nothing outside a group) */
gc_status gc_plan_reduce_gradients(gc_plan *p);
gc_status gc_plan_setup_update(gc_plan *p, const gc_train_desc *t);
gc_status gc_plan_loss_scale_begin(gc_plan *p, const gc_opt_hparams *hp);
gc_status gc_plan_loss_scale_end(gc_plan *p, gc_step_stats *st);
gc_status gc_plan_forward(gc_plan *p, int64_t rows, run_mode mode, uint64_t seed);
gc_status gc_plan_backward(gc_plan *p, int64_t rows, uint64_t seed);
void gc_plan_release_resident(gc_plan *p);
/* resident.c: the device work of one training step on the batch already in the input and
 * label buffers (forward, loss and metric totals, backward, update), and the capture of a
 * step's work into a graph (*graph NULL on failure; the capture always ends) */
gc_status gc_plan_device_work(gc_plan *p, int64_t rows, const gc_opt_hparams *hp);
gc_status gc_plan_capture(gc_plan *p, gc_status (*work)(gc_plan *, int64_t, const gc_opt_hparams *), int64_t rows,
                          const gc_opt_hparams *hp, void **graph);
/* host arrays into the input nodes' buffers and the label buffer (nothing when checking),
 * through the stage: the copies are queued, done by the call's result read; float inputs
 * and labels with a NaN / Inf are refused (GC_ERR_NONFINITE) */
gc_status gc_plan_upload_batch(gc_plan *p, const float *const *x, const void *y, int64_t rows);

/* ------------------------------------------------------------------ host staging (stage.c)
 * begin: before a call's first put (waits only if an earlier call's copies may still read
 * the buffer); put: host bytes to dst, queued from the stage (or a synchronous upload);
 * download: a result read, which frees the stage; stage_free: at destroy. */
gc_status gc_plan_stage_begin(gc_plan *p);
gc_status gc_plan_stage_put(gc_plan *p, void *dst, const void *src, size_t nbytes);
/* put of n float32 values checked finite in the same pass: GC_ERR_NONFINITE ("plan:
 * <what> contains NaN or Inf") before anything is copied or queued for them */
gc_status gc_plan_stage_put_floats(gc_plan *p, void *dst, const float *src, size_t n, const char *what);
gc_status gc_plan_download(gc_plan *p, void *host_dst, const void *src, size_t nbytes);
void gc_plan_stage_free(gc_plan *p);
/* the errors captured ops recorded without reading them (gpucmp.h graph_errors): read 0
 * clears, read 1 waits and reports; nothing for plans without an embedding node */
gc_status gc_plan_graph_errors(gc_plan *p, int read);

/* ------------------------------------------------------------------ single-batch graphs (step_graph.c) */
int gc_plan_batch_graph_eligible(const gc_plan *p);
gc_status gc_plan_batch_graph_step(gc_plan *p, const float *const *x, const void *y, int64_t rows,
                                   const gc_opt_hparams *hp, uint64_t seed, gc_step_stats *st);
void gc_plan_drop_batch_graph(gc_plan *p);
void gc_plan_drop_predict_graph(gc_plan *p);

#endif /* GPUCMP_PLAN_INTERNAL_H */
