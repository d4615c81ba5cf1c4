/* update.c -- the optimizer step of a plan and Keras' dynamic loss scaling.
 *
 * Weight gradients are first converted to float32 (and, with loss scaling, unscaled and
 * checked for non-finite values: the skip decision needs every gradient checked before
 * any weight moves; one cast_multi launch over a table of them where the backend has
 * it), averaged over the replicas when the plan is one of a group (replicas.c), then
 * every trained tensor is updated -- in one fused launch over a table of (weight,
 * gradient, state) slots where the backend has optim_multi, else one op per tensor.
 * Skipping a step on overflow and adjusting the scale happen on the device, so a
 * captured step replays them without a host round trip. */
#include "plan_internal.h"

#include <math.h>
#include <stdlib.h>

gc_status gc_plan_scale_cast(gc_plan *p, const void *x, gc_dtype xdt, void *y, gc_dtype ydt, int64_t n,
                             const float *dyn, int invert, int bad)
{
    gc_scale_cast_params sp = {1.0f, dyn, invert};
    gc_tensor tx = gc_t1((void *)x, xdt, n), ty = gc_t1(y, ydt, n);
    gc_tensor tb = bad ? gc_t1(p->ls_bad, GC_F32, 1) : gc_none();
    return gc_plan_run(p, GC_OP_SCALE_CAST, &sp, &tx, NULL, NULL, &ty, &tb, NULL);
}

gc_status gc_plan_cast_table(gc_plan *p, const gc_cast_slot *h, int n, void **dev, int64_t *max_n)
{
    *dev = NULL;
    *max_n = 0;
    if (!p->be->cast_multi || n <= 0) return GC_OK;
    for (int k = 0; k < n; k++)
        if (h[k].n > *max_n) *max_n = h[k].n;
    void *d;
    TRY(gc_plan_alloc(p, (int64_t)((size_t)n * sizeof *h + 3) / 4, GC_F32, &d));
    TRY(p->be->upload(p->be, d, h, (size_t)n * sizeof *h));
    *dev = d;
    return GC_OK;
}

int gc_plan_casts_fused(const gc_plan *p) { return !p->checking && (!p->training || p->fused_opt); }

/* the update's gradient conversions (half -> float32 arena, unscaled with loss scaling) */
static gc_status build_grad_casts(gc_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) {
            const plan_weight *w = &p->L[i].w[k];
            n += w->trains && (w->dw32 != w->dw || p->train.loss_scaling);
        }
    if (n == 0 || !p->be->cast_multi) return GC_OK;
    gc_cast_slot *h = calloc((size_t)n, sizeof *h);
    if (!h) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    int j = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) {
            const plan_weight *w = &p->L[i].w[k];
            if (!w->trains || (w->dw32 == w->dw && !p->train.loss_scaling)) continue;
            h[j].x = w->dw;
            h[j].y = w->dw32;
            h[j].n = w->n;
            h[j].xdt = (int32_t)w->dwdt;
            h[j].ydt = GC_F32;
            j++;
        }
    gc_status s = gc_plan_cast_table(p, h, n, &p->gcast_slots, &p->max_gcast_n);
    free(h);
    if (s == GC_OK && p->gcast_slots) p->n_gcast = n;
    return s;
}

static gc_status update_one(gc_plan *p, const gc_opt_hparams *hp, const plan_weight *w)
{
    const int64_t n = w->n;
    void **st = w->state;
    gc_tensor tw = gc_t1(w->w, GC_F32, n), tg = gc_t1(w->dw32, GC_F32, n);
    const float *dyn = p->device_mode ? (const float *)p->dyn : NULL;
    const float *skip = p->train.loss_scaling ? (const float *)p->ls_bad : NULL;
    switch (p->train.opt) {
    case GC_OPT_ADAM: {
        gc_adam_params ap = {hp->lr, hp->beta_1, hp->beta_2, hp->epsilon, hp->t, dyn, skip};
        gc_tensor m = gc_t1(st[0], GC_F32, n), v = gc_t1(st[1], GC_F32, n);
        return gc_plan_run(p, GC_OP_ADAM, &ap, &tg, NULL, NULL, &tw, &m, &v);
    }
    case GC_OPT_SGD: {
        gc_sgd_params sp = {hp->lr, st ? hp->momentum : 0.0f, hp->nesterov, dyn, skip};
        gc_tensor m = st ? gc_t1(st[0], GC_F32, n) : gc_none();
        return gc_plan_run(p, GC_OP_SGD, &sp, &tg, NULL, NULL, &tw, &m, NULL);
    }
    case GC_OPT_RMSPROP: {
        gc_rmsprop_params rp = {hp->lr, hp->rho, hp->epsilon, dyn, skip};
        gc_tensor v = gc_t1(st[0], GC_F32, n);
        return gc_plan_run(p, GC_OP_RMSPROP, &rp, &tg, NULL, NULL, &tw, &v, NULL);
    }
    default:
        return gc_fail(GC_ERR_INVALID_ARG, "plan: unknown optimizer %d", (int)p->train.opt);
    }
}

gc_status gc_plan_update(gc_plan *p, const gc_opt_hparams *hp)
{
    if (hp->kind != p->train.opt)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: hyper-parameters are for optimizer %d, plan uses %d",
                       (int)hp->kind, (int)p->train.opt);
    const int ls = p->train.loss_scaling;
    const float *scale = ls ? (const float *)p->ls_state : NULL;
    p->cur_phase = "update";
    p->cur_node = -1;
    if (p->group && p->cur_rows == 0) { /* a replica without rows this step: no gradient */
        TRY(p->be->fill_zero(p->be, p->grad_arena, (size_t)p->grad_arena_numel * sizeof(float)));
    } else if (p->gcast_slots && gc_plan_casts_fused(p)) { /* every conversion in one launch */
        double t0 = p->profiling ? gc_plan_clock(p) : 0.0;
        TRY(p->be->cast_multi(p->be, (const gc_cast_slot *)p->gcast_slots, p->n_gcast, p->max_gcast_n, 1.0f, scale,
                              1, ls ? (float *)p->ls_bad : NULL));
        if (p->profiling && p->trace) /* not an op of the list: reported with call == NULL */
            p->trace(p->trace_ctx, NULL, GC_TRACE_CAST_MULTI, "update", gc_plan_clock(p) - t0);
    } else {
        for (int i = 0; i < p->n; i++) {
            plan_node *l = &p->L[i];
            for (int k = 0; k < l->n_w; k++) {
                plan_weight *w = &l->w[k];
                if (!w->trains || (w->dw32 == w->dw && !ls)) continue;
                TRY(gc_plan_scale_cast(p, w->dw, w->dwdt, w->dw32, GC_F32, w->n, scale, 1, ls));
            }
        }
    }
    TRY(gc_plan_reduce_gradients(p)); /* data parallel: every replica's mean, before any weight moves */
    if (p->fused_opt && p->opt_slots && !p->checking) { /* every tensor in one launch */
        const float *dyn = p->device_mode ? (const float *)p->dyn : NULL;
        double t0 = p->profiling ? gc_plan_clock(p) : 0.0;
        TRY(p->be->optim_multi(p->be, hp, dyn, ls ? (const float *)p->ls_bad : NULL, p->opt_slots,
                               p->n_slots, p->max_slot_n));
        if (p->profiling && p->trace) /* not an op of the list: reported with call == NULL */
            p->trace(p->trace_ctx, NULL, -1, "update", gc_plan_clock(p) - t0);
    } else { /* per tensor (and always in the creation dry run: each call validated) */
        for (int i = 0; i < p->n; i++)
            for (int k = 0; k < p->L[i].n_w; k++)
                if (p->L[i].w[k].trains) TRY(update_one(p, hp, &p->L[i].w[k]));
    }
    if (!ls) return GC_OK;
    gc_loss_scale_params lp = {p->train.loss_scale_growth};
    gc_tensor bad = gc_t1(p->ls_bad, GC_F32, 1), state = gc_t1(p->ls_state, GC_F32, 2);
    gc_tensor dyn = p->device_mode ? gc_t1(p->dyn, GC_F32, 2) : gc_none();
    return gc_plan_run(p, GC_OP_LOSS_SCALE_UPDATE, &lp, NULL, NULL, NULL, &bad, &state, &dyn);
}

/* Loss scaling: the caller's {scale, good steps} into backend memory, the bad count
 * cleared (a call cut short may have left it set). */
gc_status gc_plan_loss_scale_begin(gc_plan *p, const gc_opt_hparams *hp)
{
    if (!p->train.loss_scaling || p->checking) return GC_OK;
    if (!(hp->loss_scale > 0.0f) || !isfinite(hp->loss_scale) || !(hp->loss_scale_good >= 0.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: loss scale %g with %g good steps; need a finite scale > 0",
                       (double)hp->loss_scale, (double)hp->loss_scale_good);
    float state[2] = {hp->loss_scale, hp->loss_scale_good};
    TRY(p->be->upload(p->be, p->ls_state, state, sizeof state));
    return p->be->fill_zero(p->be, p->ls_bad, sizeof(float));
}

gc_status gc_plan_loss_scale_end(gc_plan *p, gc_step_stats *st)
{
    if (!p->train.loss_scaling || p->checking) return GC_OK;
    float state[2];
    TRY(p->be->download(p->be, state, p->ls_state, sizeof state));
    st->loss_scale = state[0];
    st->loss_scale_good = state[1];
    return GC_OK;
}

/* The fused optimizer step's table: (w, g, state) of every trained tensor, in backend
 * memory, built once (the pointers never change for the plan's life). */
static gc_status build_opt_slots(gc_plan *p)
{
    int n = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) n += p->L[i].w[k].trains;
    if (n == 0) return GC_OK;
    gc_opt_slot *h = calloc((size_t)n, sizeof *h);
    if (!h) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    const int per = p->train.opt == GC_OPT_ADAM ? 2 : 1;
    int j = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) {
            const plan_weight *w = &p->L[i].w[k];
            if (!w->trains) continue;
            h[j].w = w->w;
            h[j].g = w->dw32;
            h[j].s1 = w->state ? w->state[0] : NULL;
            h[j].s2 = w->state && per == 2 ? w->state[1] : NULL;
            h[j].n = w->n;
            if (w->n > p->max_slot_n) p->max_slot_n = w->n;
            j++;
        }
    void *dev;
    gc_status s = gc_plan_alloc(p, (int64_t)((size_t)n * sizeof *h + 3) / 4, GC_F32, &dev);
    if (s == GC_OK) s = p->be->upload(p->be, dev, h, (size_t)n * sizeof *h);
    free(h);
    p->opt_slots = dev;
    p->n_slots = n;
    p->fused_opt = 1;
    return s;
}

/* optimizer state: per trainable weight, node by node, in weight-slot order */
gc_status gc_plan_setup_update(gc_plan *p, const gc_train_desc *t)
{
    int per = t->opt == GC_OPT_ADAM ? 2 : t->opt == GC_OPT_RMSPROP ? 1 : -1;
    int n_weights = 0;
    for (int i = 0; i < p->n; i++)
        for (int k = 0; k < p->L[i].n_w; k++) n_weights += p->L[i].w[k].trains;
    if (per < 0) per = t->n_opt_state == 0 ? 0 : 1; /* sgd: momentum iff state given */
    if (t->n_opt_state != per * n_weights)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "plan: optimizer state has %d buffers, expected %d (%d per trainable weight, "
                       "%d weights)",
                       t->n_opt_state, per * n_weights, per, n_weights);
    if (t->n_opt_state) {
        p->state_copy = malloc(sizeof(void *) * (size_t)t->n_opt_state);
        if (!p->state_copy) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        memcpy(p->state_copy, t->opt_state, sizeof(void *) * (size_t)t->n_opt_state);
        for (int k = 0; k < t->n_opt_state; k++)
            if (!p->state_copy[k]) return gc_fail(GC_ERR_INVALID_ARG, "plan: optimizer state %d is missing", k);
    }
    p->train.opt_state = p->state_copy;
    int j = 0;
    for (int i = 0; i < p->n && per; i++)
        for (int k = 0; k < p->L[i].n_w; k++)
            if (p->L[i].w[k].trains) {
                p->L[i].w[k].state = p->state_copy + j;
                j += per;
            }
    if (p->be->optim_multi) TRY(build_opt_slots(p));
    return build_grad_casts(p);
}
