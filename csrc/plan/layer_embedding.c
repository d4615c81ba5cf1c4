/* layer_embedding.c -- Embedding as a plan node: rows of the (input_dim, D) table picked
 * by integer ids, and their gradient scattered back into the table.
 *
 * The plan's inputs are float32 arrays, so the ids arrive as floats (exact below 2^24);
 * the node reads them as its producer stores them (raw_inputs: no cast to the compute
 * dtype, which would round ids above 2048 in float16), converts them to int32 as Keras
 * does (cast: truncation toward zero), and gathers with embedding_fwd, which rejects an
 * id outside [0, input_dim) with an error naming it (on GPUs, detected on the device).
 * The backward is embedding_bwd into the table's gradient; ids have no gradient. */
#include "plan_internal.h"

enum { EMB_IDS = 0 }; /* priv: the int32 ids of the pass, max_batch x T */

static gc_status emb_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    (void)n_in;
    if (d->input_dim < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: embedding node %d needs input_dim >= 1, got %lld", idx,
                       (long long)d->input_dim);
    if (nd[0] + 1 != d->out_ndim || d->out_ndim > GC_MAX_DIMS - 2)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: embedding node %d maps ids of rank %d to rank %d (expected %d)",
                       idx, nd[0], d->out_ndim, nd[0] + 1);
    for (int i = 0; i < nd[0]; i++)
        if (in[0][i] != d->out_shape[i])
            return gc_fail(GC_ERR_INVALID_ARG, "plan: embedding node %d: output shape does not extend the ids' shape",
                           idx);
    if (!d->weights[GC_W_EMBEDDINGS])
        return gc_fail(GC_ERR_INVALID_ARG, "plan: embedding node %d has no embeddings", idx);
    return GC_OK;
}

static void emb_weights(const gc_layer_desc *d, const int64_t *in, int64_t *n, int *tr)
{
    (void)in;
    n[GC_W_EMBEDDINGS] = d->input_dim * d->out_shape[d->out_ndim - 1];
    tr[GC_W_EMBEDDINGS] = 1;
}

static gc_status emb_setup(gc_plan *p, plan_node *l)
{
    return gc_plan_alloc(p, p->max_batch * l->in_numel[0], GC_I32, &l->priv[EMB_IDS]);
}

static gc_status emb_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    const plan_node *src = &p->L[l->in[0]];
    const int64_t T = l->in_numel[0], D = l->d.out_shape[l->d.out_ndim - 1];
    gc_tensor x = gc_t2(src->out, src->dt, rows, T);
    gc_tensor ids = gc_t2(l->priv[EMB_IDS], GC_I32, rows, T);
    TRY(gc_plan_run(p, GC_OP_CAST, &(gc_no_params){0}, &x, NULL, NULL, &ids, NULL, NULL));
    gc_tensor table = gc_t2(gc_node_weight(l, GC_W_EMBEDDINGS), l->dt, l->d.input_dim, D);
    int64_t shape[3] = {rows, T, D};
    gc_tensor out = gc_tensor_make(l->out, l->dt, 3, shape);
    return gc_plan_run(p, GC_OP_EMBEDDING_FWD, &(gc_no_params){0}, &table, &ids, NULL, &out, NULL, NULL);
}

static gc_status emb_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (!l->w[GC_W_EMBEDDINGS].trains) return GC_OK;
    const int64_t T = l->in_numel[0], D = l->d.out_shape[l->d.out_ndim - 1];
    int64_t shape[3] = {rows, T, D};
    gc_tensor dy = gc_tensor_make(l->gout, l->dt, 3, shape);
    gc_tensor ids = gc_t2(l->priv[EMB_IDS], GC_I32, rows, T);
    gc_tensor dtab = gc_t2(l->w[GC_W_EMBEDDINGS].dw, l->dt, l->d.input_dim, D);
    return gc_plan_run(p, GC_OP_EMBEDDING_BWD, &(gc_no_params){0}, &dy, &ids, NULL, &dtab, NULL, NULL);
}

const gc_layer_ops gc_layer_embedding = {"embedding", 1, 1, emb_check, emb_weights, emb_forward, emb_backward,
                                         0, 0, 0, emb_setup, 1};
