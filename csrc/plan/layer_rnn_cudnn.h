/* layer_rnn_cudnn.h -- the rnn node's second implementation, cuDNN's RNN API
 * (layer_rnn_cudnn.c), as layer_rnn.c dispatches to it. */
#ifndef GPUCMP_LAYER_RNN_CUDNN_H
#define GPUCMP_LAYER_RNN_CUDNN_H

#include "plan_internal.h"

/* layer_rnn.c: u of an rnn node (also with return_state's packed sample) */
int64_t gc_rnn_node_units(const gc_layer_desc *d);

/* NULL when cuDNN computes this layer as Keras does, else what it lacks ("reset_after=False",
 * "recurrent_dropout", ...): the option to name in the error */
const char *gc_rnn_cudnn_incompatible(const gc_layer_desc *d);
/* 1 when the node runs through cuDNN on this plan: the layer asked (use_cudnn=True, the
 * descriptor's rnn_impl) or cuda.rnn.impl=cudnn is forced on a CUDA backend, and
 * cuda.rnn.impl=own is not */
int gc_rnn_cudnn_selected(const gc_plan *p, const plan_node *l);
gc_status gc_rnn_cudnn_setup(gc_plan *p, plan_node *l);
/* records cuda.rnn.impl's `last` = own for a pass of gpucmp's kernels on a CUDA backend */
void gc_rnn_cudnn_note_own(const gc_plan *p);
/* 1 on a node gc_rnn_cudnn_setup set up */
int gc_rnn_cudnn_active(const plan_node *l);
gc_status gc_rnn_cudnn_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed);
gc_status gc_rnn_cudnn_backward(gc_plan *p, plan_node *l, int64_t rows);

#endif /* GPUCMP_LAYER_RNN_CUDNN_H */
