/* layers.c -- the registry of layer kinds: one table (gc_layer_ops) per kind, each in its
 * own layer_*.c file. A kind without a table here is reported as unsupported. */
#include "plan_internal.h"

extern const gc_layer_ops gc_layer_dense, gc_layer_conv2d, gc_layer_maxpool2d, gc_layer_avgpool2d,
    gc_layer_reshape, gc_layer_dropout, gc_layer_activation, gc_layer_input, gc_layer_add, gc_layer_multiply,
    gc_layer_concat, gc_layer_batchnorm, gc_layer_pad2d, gc_layer_embedding, gc_layer_rnn,
    gc_layer_seq_mask, gc_layer_masking, gc_layer_select, gc_layer_reverse, gc_layer_scale, gc_layer_mask_or;

static const gc_layer_ops *const kinds[GC_LAYER_COUNT] = {
    [GC_LAYER_DENSE] = &gc_layer_dense,         [GC_LAYER_CONV2D] = &gc_layer_conv2d,
    [GC_LAYER_MAXPOOL2D] = &gc_layer_maxpool2d, [GC_LAYER_AVGPOOL2D] = &gc_layer_avgpool2d,
    [GC_LAYER_RESHAPE] = &gc_layer_reshape,     [GC_LAYER_DROPOUT] = &gc_layer_dropout,
    [GC_LAYER_ACTIVATION] = &gc_layer_activation, [GC_LAYER_INPUT] = &gc_layer_input,
    [GC_LAYER_ADD] = &gc_layer_add,             [GC_LAYER_MULTIPLY] = &gc_layer_multiply,
    [GC_LAYER_CONCAT] = &gc_layer_concat,       [GC_LAYER_BATCHNORM] = &gc_layer_batchnorm,
    [GC_LAYER_PAD2D] = &gc_layer_pad2d,         [GC_LAYER_EMBEDDING] = &gc_layer_embedding,
    [GC_LAYER_RNN] = &gc_layer_rnn,             [GC_LAYER_SEQ_MASK] = &gc_layer_seq_mask,
    [GC_LAYER_MASKING] = &gc_layer_masking,     [GC_LAYER_SELECT] = &gc_layer_select,
    [GC_LAYER_REVERSE] = &gc_layer_reverse,     [GC_LAYER_SCALE] = &gc_layer_scale,
    [GC_LAYER_MASK_OR] = &gc_layer_mask_or,
};

const gc_layer_ops *gc_layer_ops_of(gc_layer_kind kind)
{
    return (unsigned)kind < GC_LAYER_COUNT ? kinds[kind] : NULL;
}
