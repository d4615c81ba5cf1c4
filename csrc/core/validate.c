/* validate.c -- shape, dtype and parameter checks of every op, run once in core
 * before any backend sees the call (backends may assume a validated call).
 *
 * Messages name the argument and print the shapes, since they become the text of the
 * Python exception. The geometry of window ops comes from geometry.c. */
#include "gpucmp.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct { char s[96]; } shape_text;

static shape_text shp(const gc_tensor *t)
{
    shape_text o;
    size_t len = 0;
    len += (size_t)snprintf(o.s + len, sizeof o.s - len, "(");
    for (int i = 0; i < t->ndim && len < sizeof o.s - 24; i++)
        len += (size_t)snprintf(o.s + len, sizeof o.s - len, i ? ", %lld" : "%lld",
                                (long long)t->shape[i]);
    if (t->ndim == 1 && len < sizeof o.s - 4) len += (size_t)snprintf(o.s + len, sizeof o.s - len, ",");
    snprintf(o.s + len, sizeof o.s - len, ")");
    return o;
}

static int present(const gc_tensor *t) { return t && t->data; }

static int is_float(gc_dtype d) { return d == GC_F32 || d == GC_F16 || d == GC_BF16; }

static gc_status need(const gc_op_call *c, const gc_tensor *t, const char *name)
{
    if (!present(t))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: argument '%s' is required", gc_op_name(c->op), name);
    if (t->ndim < 0 || t->ndim > GC_MAX_DIMS)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' has rank %d (at most %d)", gc_op_name(c->op),
                       name, t->ndim, GC_MAX_DIMS);
    for (int i = 0; i < t->ndim; i++)
        if (t->shape[i] < 0)
            return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' has a negative extent in shape %s",
                           gc_op_name(c->op), name, shp(t).s);
    return GC_OK;
}

static gc_status rank(const gc_op_call *c, const gc_tensor *t, const char *name, int nd)
{
    if (t->ndim != nd)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' must have rank %d, got shape %s",
                       gc_op_name(c->op), name, nd, shp(t).s);
    return GC_OK;
}

static int same_shape(const gc_tensor *a, const gc_tensor *b)
{
    if (a->ndim != b->ndim) return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->shape[i] != b->shape[i]) return 0;
    return 1;
}

static gc_status match(const gc_op_call *c, const gc_tensor *t, const char *name,
                       const gc_tensor *ref, const char *refname)
{
    if (!same_shape(t, ref))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' has shape %s but must match '%s' %s",
                       gc_op_name(c->op), name, shp(t).s, refname, shp(ref).s);
    return GC_OK;
}

static gc_status want4(const gc_op_call *c, const gc_tensor *t, const char *name, int64_t a,
                       int64_t b, int64_t d, int64_t e)
{
    if (t->ndim != 4 || t->shape[0] != a || t->shape[1] != b || t->shape[2] != d ||
        t->shape[3] != e)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "%s: '%s' has shape %s, expected (%lld, %lld, %lld, %lld)",
                       gc_op_name(c->op), name, shp(t).s, (long long)a, (long long)b,
                       (long long)d, (long long)e);
    return GC_OK;
}

static gc_status want1(const gc_op_call *c, const gc_tensor *t, const char *name, int64_t n)
{
    if (t->ndim != 1 || t->shape[0] != n)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' has shape %s, expected (%lld,)",
                       gc_op_name(c->op), name, shp(t).s, (long long)n);
    return GC_OK;
}

static gc_status want2(const gc_op_call *c, const gc_tensor *t, const char *name, int64_t a, int64_t b)
{
    if (t->ndim != 2 || t->shape[0] != a || t->shape[1] != b)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' has shape %s, expected (%lld, %lld)",
                       gc_op_name(c->op), name, shp(t).s, (long long)a, (long long)b);
    return GC_OK;
}

/* All float tensors of a call share one float dtype (cast excepted); int32 only
 * where labels are allowed. */
static gc_status dtypes(const gc_op_call *c, int labels_slot)
{
    gc_dtype common = GC_DTYPE_COUNT;
    int nin = gc_op_num_inputs(c->op), nout = gc_op_num_outputs(c->op);
    for (int k = 0; k < nin + nout; k++) {
        const gc_tensor *t = k < nin ? c->in[k] : c->out[k - nin];
        if (!present(t)) continue;
        if ((unsigned)t->dtype >= GC_DTYPE_COUNT)
            return gc_fail(GC_ERR_DTYPE, "%s: tensor %d has an unknown dtype", gc_op_name(c->op), k);
        if (k == labels_slot && (t->dtype == GC_I32 || is_float(t->dtype))) continue;
        if (c->op == GC_OP_ACCURACY && k == nin) {
            if (t->dtype != GC_F32)
                return gc_fail(GC_ERR_DTYPE, "accuracy: 'count' must be float32, got %s",
                               gc_dtype_name(t->dtype));
            continue;
        }
        if (!is_float(t->dtype)) {
            char what[24];
            if (k < nin) snprintf(what, sizeof what, "input %d", k);
            else snprintf(what, sizeof what, "output %d", k - nin);
            return gc_fail(GC_ERR_DTYPE, "%s: %s must be a float tensor, got %s", gc_op_name(c->op), what,
                           gc_dtype_name(t->dtype));
        }
        if (c->op == GC_OP_CAST) continue;
        if (common == GC_DTYPE_COUNT) common = t->dtype;
        else if (t->dtype != common)
            return gc_fail(GC_ERR_DTYPE, "%s: float tensors must share one dtype, got %s and %s",
                           gc_op_name(c->op), gc_dtype_name(common), gc_dtype_name(t->dtype));
    }
    return GC_OK;
}

static gc_status act_ok(const gc_op_call *c, gc_act a, int allow_softmax)
{
    if ((unsigned)a >= GC_ACT_COUNT || (!allow_softmax && a == GC_ACT_SOFTMAX))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: activation %d is not supported here%s",
                       gc_op_name(c->op), (int)a,
                       a == GC_ACT_SOFTMAX ? " (softmax is not elementwise: use act_fwd)" : "");
    return GC_OK;
}

#define TRY(expr)                    \
    do {                             \
        gc_status s_ = (expr);       \
        if (s_ != GC_OK) return s_;  \
    } while (0)

/* One validator per op of GC_OP_LIST, v_<name>, declared here from the list and put in
 * the dispatch table at the end: an op without one fails to build. Ops that share
 * their rules call the shared function from a one-line v_<name>. */
#define GC_X_VDECL(E, n, P, ni, no) static gc_status v_##n(const gc_op_call *c);
GC_OP_LIST(GC_X_VDECL)
#undef GC_X_VDECL

static gc_status v_gemm(const gc_op_call *c)
{
    const gc_gemm_params *p = c->params;
    const gc_tensor *A = c->in[0], *B = c->in[1], *bias = c->in[2];
    const gc_tensor *C = c->out[0];
    TRY(need(c, A, "a")); TRY(need(c, B, "b")); TRY(need(c, C, "c"));
    TRY(rank(c, A, "a", 2)); TRY(rank(c, B, "b", 2)); TRY(rank(c, C, "c", 2));
    TRY(act_ok(c, p->act, 0));
    int64_t M = p->trans_a ? A->shape[1] : A->shape[0], K = p->trans_a ? A->shape[0] : A->shape[1];
    int64_t KB = p->trans_b ? B->shape[1] : B->shape[0], N = p->trans_b ? B->shape[0] : B->shape[1];
    if (K != KB)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "gemm: inner dimensions differ: a %s%s gives K=%lld, b %s%s gives K=%lld",
                       shp(A).s, p->trans_a ? " (transposed)" : "", (long long)K, shp(B).s,
                       p->trans_b ? " (transposed)" : "", (long long)KB);
    if (C->shape[0] != M || C->shape[1] != N)
        return gc_fail(GC_ERR_INVALID_ARG, "gemm: 'c' has shape %s, expected (%lld, %lld)", shp(C).s,
                       (long long)M, (long long)N);
    if (present(bias)) TRY(want1(c, bias, "bias", N));
    if (!isfinite(p->alpha) || !isfinite(p->beta))
        return gc_fail(GC_ERR_INVALID_ARG, "gemm: alpha and beta must be finite");
    return dtypes(c, -1);
}

static gc_status conv_geom(const gc_op_call *c, const gc_tensor *x, const gc_tensor *w,
                           gc_conv2d_geom *g)
{
    const gc_conv2d_params *p = c->params;
    TRY(rank(c, x, c->op == GC_OP_CONV2D_BWD_DATA ? "dx" : "x", 4));
    TRY(rank(c, w, c->op == GC_OP_CONV2D_BWD_FILTER ? "dw" : "kernel", 4));
    if (w->shape[2] != x->shape[3])
        return gc_fail(GC_ERR_INVALID_ARG,
                       "%s: kernel %s expects %lld input channels but the input %s has %lld",
                       gc_op_name(c->op), shp(w).s, (long long)w->shape[2], shp(x).s,
                       (long long)x->shape[3]);
    TRY(act_ok(c, p->act, 0));
    if (p->accumulate && c->op != GC_OP_CONV2D_BWD_DATA)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: accumulate applies to conv2d_bwd_data only", gc_op_name(c->op));
    gc_status s = gc_conv2d_geometry(x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                                     w->shape[0], w->shape[1], w->shape[3], p, g);
    if (s) {
        char why[512];
        snprintf(why, sizeof why, "%s", gc_last_error()); /* gc_fail rewrites that buffer */
        return gc_fail(s, "%s: %s (input %s, kernel %s)", gc_op_name(c->op), why, shp(x).s, shp(w).s);
    }
    return GC_OK;
}

static gc_status v_conv2d_fwd(const gc_op_call *c)
{
    gc_conv2d_geom g;
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->in[1], "kernel")); TRY(need(c, c->out[0], "y"));
    TRY(conv_geom(c, c->in[0], c->in[1], &g));
    TRY(want4(c, c->out[0], "y", g.N, g.OH, g.OW, g.F));
    if (present(c->in[2])) TRY(want1(c, c->in[2], "bias", g.F));
    return dtypes(c, -1);
}

static gc_status v_conv2d_bwd_data(const gc_op_call *c)
{
    gc_conv2d_geom g;
    TRY(need(c, c->in[0], "dy")); TRY(need(c, c->in[1], "kernel")); TRY(need(c, c->out[0], "dx"));
    TRY(conv_geom(c, c->out[0], c->in[1], &g));
    TRY(want4(c, c->in[0], "dy", g.N, g.OH, g.OW, g.F));
    return dtypes(c, -1);
}

static gc_status v_conv2d_bwd_filter(const gc_op_call *c)
{
    gc_conv2d_geom g;
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->in[1], "dy")); TRY(need(c, c->out[0], "dw"));
    TRY(conv_geom(c, c->in[0], c->out[0], &g));
    TRY(want4(c, c->in[1], "dy", g.N, g.OH, g.OW, g.F));
    if (present(c->out[1])) TRY(want1(c, c->out[1], "db", g.F));
    return dtypes(c, -1);
}

static gc_status pool_geom(const gc_op_call *c, const gc_tensor *x, const char *name,
                           gc_pool2d_geom *g)
{
    TRY(rank(c, x, name, 4));
    gc_status s = gc_pool2d_geometry(x->shape[0], x->shape[1], x->shape[2], x->shape[3],
                                     c->params, g);
    if (s) {
        char why[512];
        snprintf(why, sizeof why, "%s", gc_last_error()); /* gc_fail rewrites that buffer */
        return gc_fail(s, "%s: %s (input %s)", gc_op_name(c->op), why, shp(x).s);
    }
    return GC_OK;
}

/* pooling's `act`: relu is the folded ReLU backward of maxpool2d_bwd, linear elsewhere */
static gc_status pool_act(const gc_op_call *c)
{
    const gc_act a = ((const gc_pool2d_params *)c->params)->act;
    if (a == GC_ACT_LINEAR || (a == GC_ACT_RELU && c->op == GC_OP_MAXPOOL2D_BWD)) return GC_OK;
    return gc_fail(GC_ERR_INVALID_ARG, "%s: act %d is not supported (linear%s)", gc_op_name(c->op), (int)a,
                   c->op == GC_OP_MAXPOOL2D_BWD ? " or relu" : "");
}

static gc_status v_pool_fwd(const gc_op_call *c)
{
    gc_pool2d_geom g;
    TRY(pool_act(c));
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->out[0], "y"));
    TRY(pool_geom(c, c->in[0], "x", &g));
    TRY(want4(c, c->out[0], "y", g.N, g.OH, g.OW, g.C));
    return dtypes(c, -1);
}

static gc_status v_maxpool2d_bwd(const gc_op_call *c)
{
    gc_pool2d_geom g;
    TRY(pool_act(c));
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->in[1], "dy")); TRY(need(c, c->out[0], "dx"));
    TRY(pool_geom(c, c->in[0], "x", &g));
    TRY(want4(c, c->in[1], "dy", g.N, g.OH, g.OW, g.C));
    TRY(match(c, c->out[0], "dx", c->in[0], "x"));
    return dtypes(c, -1);
}

static gc_status v_avgpool2d_bwd(const gc_op_call *c)
{
    gc_pool2d_geom g;
    TRY(pool_act(c));
    TRY(need(c, c->in[0], "dy")); TRY(need(c, c->out[0], "dx"));
    TRY(pool_geom(c, c->out[0], "dx", &g));
    TRY(want4(c, c->in[0], "dy", g.N, g.OH, g.OW, g.C));
    return dtypes(c, -1);
}

static gc_status v_act_fwd(const gc_op_call *c)
{
    const gc_act_params *p = c->params;
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->out[0], "y"));
    TRY(act_ok(c, p->act, 1));
    if (c->in[0]->ndim < 1) return gc_fail(GC_ERR_INVALID_ARG, "act_fwd: 'x' must have rank >= 1");
    TRY(match(c, c->out[0], "y", c->in[0], "x"));
    return dtypes(c, -1);
}

static gc_status v_act_bwd(const gc_op_call *c)
{
    const gc_act_params *p = c->params;
    TRY(need(c, c->in[0], "y")); TRY(need(c, c->in[1], "dy")); TRY(need(c, c->out[0], "dx"));
    TRY(act_ok(c, p->act, 1));
    if (c->in[0]->ndim < 1) return gc_fail(GC_ERR_INVALID_ARG, "act_bwd: 'y' must have rank >= 1");
    TRY(match(c, c->in[1], "dy", c->in[0], "y"));
    TRY(match(c, c->out[0], "dx", c->in[0], "y"));
    return dtypes(c, -1);
}

static gc_status v_bias_grad(const gc_op_call *c)
{
    TRY(need(c, c->in[0], "dy")); TRY(need(c, c->out[0], "db"));
    const gc_tensor *dy = c->in[0];
    if (dy->ndim < 1) return gc_fail(GC_ERR_INVALID_ARG, "bias_grad: 'dy' must have rank >= 1");
    TRY(want1(c, c->out[0], "db", dy->shape[dy->ndim - 1]));
    return dtypes(c, -1);
}

/* rows x cols view of a (..., cols) tensor; labels either the same shape or, when
 * allowed, int32 with one label per row. */
static gc_status v_rows_labels(const gc_op_call *c, const char *xname, int allow_sparse,
                               int64_t *rows_out)
{
    const gc_tensor *x = c->in[0], *y = c->in[1];
    TRY(need(c, x, xname)); TRY(need(c, y, "labels"));
    if (x->ndim < 2)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' must have rank >= 2 (rows, classes), got %s",
                       gc_op_name(c->op), xname, shp(x).s);
    int64_t cols = x->shape[x->ndim - 1];
    int64_t rows = gc_tensor_numel(x) / (cols ? cols : 1);
    if (cols == 0) rows = 0;
    if (cols < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' %s has no classes", gc_op_name(c->op), xname,
                       shp(x).s);
    if (y->dtype == GC_I32) {
        if (!allow_sparse)
            return gc_fail(GC_ERR_DTYPE, "%s: integer labels are not accepted (use float labels of shape %s)",
                           gc_op_name(c->op), shp(x).s);
        if (gc_tensor_numel(y) != rows)
            return gc_fail(GC_ERR_INVALID_ARG,
                           "%s: sparse labels %s must hold one class index per row of %s (%lld rows)",
                           gc_op_name(c->op), shp(y).s, shp(x).s, (long long)rows);
    } else {
        TRY(match(c, y, "labels", x, xname));
    }
    *rows_out = rows;
    return GC_OK;
}

static gc_status v_loss(const gc_op_call *c)
{
    const gc_loss_params *p = c->params;
    int allow_sparse = c->op == GC_OP_SOFTMAX_XENT || (c->op == GC_OP_XENT_PROBS && !p->binary);
    int64_t rows = 0;
    TRY(v_rows_labels(c, c->op == GC_OP_REGRESSION_LOSS ? "pred" : "logits", allow_sparse, &rows));
    TRY(need(c, c->out[0], "loss"));
    if (gc_tensor_numel(c->out[0]) != rows)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: 'loss' %s must hold one value per row (%lld rows)",
                       gc_op_name(c->op), shp(c->out[0]).s, (long long)rows);
    if (present(c->out[1])) TRY(match(c, c->out[1], "grad", c->in[0], "input"));
    if (!isfinite(p->grad_scale))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: grad_scale must be finite", gc_op_name(c->op));
    if (c->op == GC_OP_REGRESSION_LOSS && p->kind != GC_REG_MSE && p->kind != GC_REG_MAE)
        return gc_fail(GC_ERR_INVALID_ARG, "regression_loss: kind must be mse or mae");
    return dtypes(c, 1);
}

static gc_status v_dropout(const gc_op_call *c)
{
    const gc_dropout_params *p = c->params;
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->out[0], "y"));
    TRY(match(c, c->out[0], "output", c->in[0], "input"));
    if (!(p->rate >= 0.0f && p->rate < 1.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "%s: rate must be in [0, 1), got %g", gc_op_name(c->op),
                       (double)p->rate);
    return dtypes(c, -1);
}

static gc_status v_optim(const gc_op_call *c, int n_state_required)
{
    static const char *const names[] = {"w", "m", "v"};
    TRY(need(c, c->in[0], "g"));
    int64_t n = gc_tensor_numel(c->in[0]);
    for (int k = 0; k < gc_op_num_outputs(c->op); k++) {
        const gc_tensor *t = c->out[k];
        const char *nm = c->op == GC_OP_RMSPROP && k == 1 ? "v" : names[k];
        if (k > n_state_required && !present(t)) continue;
        TRY(need(c, t, nm));
        if (gc_tensor_numel(t) != n)
            return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' %s must have as many elements as 'g' %s",
                           gc_op_name(c->op), nm, shp(t).s, shp(c->in[0]).s);
    }
    return dtypes(c, -1);
}

static gc_status v_adam(const gc_op_call *c)
{
    const gc_adam_params *p = c->params;
    if (p->t < 1) return gc_fail(GC_ERR_INVALID_ARG, "adam: step t must be >= 1, got %lld", (long long)p->t);
    if (!isfinite(p->lr) || !(p->beta_1 >= 0 && p->beta_1 < 1) || !(p->beta_2 >= 0 && p->beta_2 < 1) ||
        !(p->epsilon >= 0))
        return gc_fail(GC_ERR_INVALID_ARG,
                       "adam: need finite lr, beta_1 and beta_2 in [0, 1), epsilon >= 0 (got lr=%g, "
                       "beta_1=%g, beta_2=%g, epsilon=%g)",
                       (double)p->lr, (double)p->beta_1, (double)p->beta_2, (double)p->epsilon);
    return v_optim(c, 2);
}

static gc_status v_sgd(const gc_op_call *c)
{
    const gc_sgd_params *p = c->params;
    if (!isfinite(p->lr) || !(p->momentum >= 0 && p->momentum <= 1))
        return gc_fail(GC_ERR_INVALID_ARG, "sgd: need finite lr and momentum in [0, 1] (got %g, %g)",
                       (double)p->lr, (double)p->momentum);
    return v_optim(c, p->momentum != 0.0f ? 1 : 0);
}

static gc_status v_rmsprop(const gc_op_call *c)
{
    const gc_rmsprop_params *p = c->params;
    if (!isfinite(p->lr) || !(p->rho >= 0 && p->rho < 1) || !(p->epsilon >= 0))
        return gc_fail(GC_ERR_INVALID_ARG, "rmsprop: need finite lr, rho in [0, 1), epsilon >= 0");
    return v_optim(c, 1);
}

static gc_status v_accuracy(const gc_op_call *c)
{
    const gc_accuracy_params *p = c->params;
    int64_t rows = 0;
    if ((unsigned)p->kind > GC_ACC_BINARY)
        return gc_fail(GC_ERR_INVALID_ARG, "accuracy: unknown kind %d", (int)p->kind);
    TRY(v_rows_labels(c, "pred", p->kind == GC_ACC_SPARSE, &rows));
    if (p->kind == GC_ACC_SPARSE && c->in[1]->dtype != GC_I32)
        return gc_fail(GC_ERR_DTYPE, "accuracy: sparse accuracy needs int32 labels");
    TRY(need(c, c->out[0], "count"));
    if (gc_tensor_numel(c->out[0]) != 1)
        return gc_fail(GC_ERR_INVALID_ARG, "accuracy: 'count' must hold one value, got %s",
                       shp(c->out[0]).s);
    return dtypes(c, 1);
}

static gc_status v_reduce_sum(const gc_op_call *c)
{
    const gc_reduce_params *p = c->params;
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->out[0], "y"));
    if (c->out[0]->dtype != GC_F32 || gc_tensor_numel(c->out[0]) != 1)
        return gc_fail(GC_ERR_INVALID_ARG, "reduce_sum: 'y' must be one float32 value, got %s %s",
                       gc_dtype_name(c->out[0]->dtype), shp(c->out[0]).s);
    if (!is_float(c->in[0]->dtype))
        return gc_fail(GC_ERR_DTYPE, "reduce_sum: 'x' must be a float tensor, got %s",
                       gc_dtype_name(c->in[0]->dtype));
    if (!isfinite(p->scale)) return gc_fail(GC_ERR_INVALID_ARG, "reduce_sum: scale must be finite");
    return GC_OK;
}

static gc_status v_cast(const gc_op_call *c)
{
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->out[0], "y"));
    if (gc_tensor_numel(c->in[0]) != gc_tensor_numel(c->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "cast: 'y' %s must have as many elements as 'x' %s",
                       shp(c->out[0]).s, shp(c->in[0]).s);
    if (c->out[0]->dtype == GC_I32) { /* float -> int32: truncation toward zero (ids) */
        if ((unsigned)c->in[0]->dtype >= GC_DTYPE_COUNT || !is_float(c->in[0]->dtype))
            return gc_fail(GC_ERR_DTYPE, "cast: an int32 'y' takes a float 'x', got %s",
                           (unsigned)c->in[0]->dtype < GC_DTYPE_COUNT ? gc_dtype_name(c->in[0]->dtype) : "unknown");
        return GC_OK;
    }
    return dtypes(c, -1);
}

static gc_status v_scale_cast(const gc_op_call *c)
{
    const gc_scale_cast_params *p = c->params;
    TRY(need(c, c->in[0], "x")); TRY(need(c, c->out[0], "y"));
    if (!is_float(c->in[0]->dtype) || !is_float(c->out[0]->dtype))
        return gc_fail(GC_ERR_DTYPE, "scale_cast: 'x' and 'y' must be float tensors, got %s and %s",
                       gc_dtype_name(c->in[0]->dtype), gc_dtype_name(c->out[0]->dtype));
    if (gc_tensor_numel(c->in[0]) != gc_tensor_numel(c->out[0]))
        return gc_fail(GC_ERR_INVALID_ARG, "scale_cast: 'y' %s must have as many elements as 'x' %s",
                       shp(c->out[0]).s, shp(c->in[0]).s);
    if (present(c->out[1]) && (c->out[1]->dtype != GC_F32 || gc_tensor_numel(c->out[1]) != 1))
        return gc_fail(GC_ERR_INVALID_ARG, "scale_cast: 'bad' must be one float32 value, got %s %s",
                       gc_dtype_name(c->out[1]->dtype), shp(c->out[1]).s);
    if (!isfinite(p->scale)) return gc_fail(GC_ERR_INVALID_ARG, "scale_cast: scale must be finite, got %g",
                                            (double)p->scale);
    return GC_OK;
}

static gc_status v_loss_scale_update(const gc_op_call *c)
{
    static const char *const names[] = {"bad", "state", "dyn"};
    static const int64_t sizes[] = {1, 2, 2};
    const gc_loss_scale_params *p = c->params;
    if (p->growth_steps < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "loss_scale_update: growth_steps must be >= 1, got %d",
                       p->growth_steps);
    for (int k = 0; k < 3; k++) {
        const gc_tensor *t = c->out[k];
        if (k == 2 && !present(t)) continue;
        TRY(need(c, t, names[k]));
        if (t->dtype != GC_F32 || gc_tensor_numel(t) != sizes[k])
            return gc_fail(GC_ERR_INVALID_ARG, "loss_scale_update: '%s' must be %lld float32 values, got %s %s",
                           names[k], (long long)sizes[k], gc_dtype_name(t->dtype), shp(t).s);
    }
    return GC_OK;
}

/* Text of the shape idx.shape + (d,) (what embedding_fwd writes, what
 * embedding_bwd reads). */
static shape_text rows_shape(const gc_tensor *idx, int64_t d)
{
    gc_tensor t = *idx;
    t.shape[t.ndim] = d;
    t.ndim++;
    return shp(&t);
}

static int is_rows_shape(const gc_tensor *t, const gc_tensor *idx, int64_t d)
{
    if (t->ndim != idx->ndim + 1 || t->shape[idx->ndim] != d) return 0;
    for (int i = 0; i < idx->ndim; i++)
        if (t->shape[i] != idx->shape[i]) return 0;
    return 1;
}

/* The index tensor of an embedding op: int32, rank 1 .. GC_MAX_DIMS - 1 (the rows it
 * gathers add one axis). Its values are checked by the backends, which can read them. */
static gc_status embedding_indices(const gc_op_call *c, const gc_tensor *idx)
{
    TRY(need(c, idx, "indices"));
    if ((unsigned)idx->dtype >= GC_DTYPE_COUNT || idx->dtype != GC_I32)
        return gc_fail(GC_ERR_DTYPE, "%s: 'indices' must be int32, got %s", gc_op_name(c->op),
                       (unsigned)idx->dtype < GC_DTYPE_COUNT ? gc_dtype_name(idx->dtype) : "an unknown dtype");
    if (idx->ndim < 1 || idx->ndim > GC_MAX_DIMS - 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: 'indices' must have rank 1 to %d, got shape %s",
                       gc_op_name(c->op), GC_MAX_DIMS - 1, shp(idx).s);
    return GC_OK;
}

/* embedding_fwd: table (V, D) of any dtype, indices int32, out idx.shape + (D,) of the
 * table's dtype. */
static gc_status v_embedding_fwd(const gc_op_call *c)
{
    const gc_tensor *table = c->in[0], *idx = c->in[1], *out = c->out[0];
    TRY(need(c, table, "table")); TRY(need(c, out, "out"));
    TRY(embedding_indices(c, idx));
    TRY(rank(c, table, "table", 2));
    if ((unsigned)table->dtype >= GC_DTYPE_COUNT || (unsigned)out->dtype >= GC_DTYPE_COUNT)
        return gc_fail(GC_ERR_DTYPE, "embedding_fwd: 'table' or 'out' has an unknown dtype");
    if (!is_rows_shape(out, idx, table->shape[1]))
        return gc_fail(GC_ERR_INVALID_ARG,
                       "embedding_fwd: 'out' has shape %s, expected %s (indices %s, one row of "
                       "table %s each)",
                       shp(out).s, rows_shape(idx, table->shape[1]).s, shp(idx).s, shp(table).s);
    if (out->dtype != table->dtype)
        return gc_fail(GC_ERR_DTYPE, "embedding_fwd: 'out' is %s but 'table' is %s (a gather keeps the dtype)",
                       gc_dtype_name(out->dtype), gc_dtype_name(table->dtype));
    return GC_OK;
}

/* embedding_bwd: dy idx.shape + (D,), indices int32, dtable (V, D); dy and dtable share
 * one float dtype. */
static gc_status v_embedding_bwd(const gc_op_call *c)
{
    const gc_tensor *dy = c->in[0], *idx = c->in[1], *dt = c->out[0];
    TRY(need(c, dy, "dy")); TRY(need(c, dt, "dtable"));
    TRY(embedding_indices(c, idx));
    TRY(rank(c, dt, "dtable", 2));
    if (!is_rows_shape(dy, idx, dt->shape[1]))
        return gc_fail(GC_ERR_INVALID_ARG,
                       "embedding_bwd: 'dy' has shape %s, expected %s (indices %s, one row of "
                       "dtable %s each)",
                       shp(dy).s, rows_shape(idx, dt->shape[1]).s, shp(idx).s, shp(dt).s);
    return dtypes(c, 1);
}

/* ------------------------------------------------------------------ graph ops */

/* linear or relu: the epilogues of add and batchnorm */
static gc_status act_linear_relu(const gc_op_call *c, gc_act a)
{
    if (a == GC_ACT_LINEAR || a == GC_ACT_RELU) return GC_OK;
    return gc_fail(GC_ERR_INVALID_ARG, "%s: activation %d is not supported (linear or relu)", gc_op_name(c->op),
                   (int)a);
}

static gc_status same_numel(const gc_op_call *c, const gc_tensor *t, const char *name, const gc_tensor *ref,
                            const char *refname)
{
    if (gc_tensor_numel(t) != gc_tensor_numel(ref))
        return gc_fail(GC_ERR_INVALID_ARG,
                       "%s: '%s' has shape %s (%lld elements) but must have as many elements as '%s' %s (%lld)",
                       gc_op_name(c->op), name, shp(t).s, (long long)gc_tensor_numel(t), refname, shp(ref).s,
                       (long long)gc_tensor_numel(ref));
    return GC_OK;
}

static gc_status want_f32(const gc_op_call *c, const gc_tensor *t, const char *name)
{
    if ((unsigned)t->dtype >= GC_DTYPE_COUNT || t->dtype != GC_F32)
        return gc_fail(GC_ERR_DTYPE, "%s: '%s' must be float32, got %s", gc_op_name(c->op), name,
                       (unsigned)t->dtype < GC_DTYPE_COUNT ? gc_dtype_name(t->dtype) : "an unknown dtype");
    return GC_OK;
}

/* t: x's shape and dtype (batchnorm's activations and their gradients) */
static gc_status like_x(const gc_op_call *c, const gc_tensor *t, const char *name, const gc_tensor *x)
{
    TRY(need(c, t, name));
    TRY(match(c, t, name, x, "x"));
    if (t->dtype != x->dtype)
        return gc_fail(GC_ERR_DTYPE, "%s: '%s' is %s but 'x' is %s (they share one dtype)", gc_op_name(c->op),
                       name, (unsigned)t->dtype < GC_DTYPE_COUNT ? gc_dtype_name(t->dtype) : "unknown",
                       gc_dtype_name(x->dtype));
    return GC_OK;
}

/* a per-channel float32 vector (C,) */
static gc_status channel_vec(const gc_op_call *c, const gc_tensor *t, const char *name, int64_t C)
{
    TRY(need(c, t, name));
    if (t->ndim != 1 || t->shape[0] != C)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' has shape %s, expected (%lld,) (the channels of 'x' %s)",
                       gc_op_name(c->op), name, shp(t).s, (long long)C, shp(c->in[0]).s);
    return want_f32(c, t, name);
}

static gc_status v_add(const gc_op_call *c)
{
    static const char *const names[GC_MAX_OP_IN] = {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"};
    TRY(act_linear_relu(c, ((const gc_act_params *)c->params)->act));
    TRY(need(c, c->in[0], "x0")); TRY(need(c, c->in[1], "x1")); TRY(need(c, c->out[0], "y"));
    for (int k = 1; k < 8; k++)
        if (present(c->in[k])) {
            TRY(need(c, c->in[k], names[k]));
            TRY(same_numel(c, c->in[k], names[k], c->in[0], "x0"));
        }
    TRY(same_numel(c, c->out[0], "y", c->in[0], "x0"));
    return dtypes(c, -1);
}

static gc_status v_mul(const gc_op_call *c)
{
    TRY(need(c, c->in[0], "a")); TRY(need(c, c->in[1], "b")); TRY(need(c, c->out[0], "y"));
    TRY(same_numel(c, c->in[1], "b", c->in[0], "a"));
    TRY(same_numel(c, c->out[0], "y", c->in[0], "a"));
    return dtypes(c, -1);
}

/* x of a batchnorm op: rank >= 1, a float dtype, at least one channel and one row */
static gc_status bn_x(const gc_op_call *c, const gc_tensor *x, int64_t *C)
{
    const gc_batchnorm_params *p = c->params;
    TRY(need(c, x, "x"));
    TRY(act_linear_relu(c, p->act));
    if (x->ndim < 1 || gc_tensor_numel(x) < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: 'x' must have rank >= 1 and at least one element, got shape %s",
                       gc_op_name(c->op), shp(x).s);
    if ((unsigned)x->dtype >= GC_DTYPE_COUNT || !is_float(x->dtype))
        return gc_fail(GC_ERR_DTYPE, "%s: 'x' must be a float tensor, got %s", gc_op_name(c->op),
                       (unsigned)x->dtype < GC_DTYPE_COUNT ? gc_dtype_name(x->dtype) : "an unknown dtype");
    *C = x->shape[x->ndim - 1];
    return GC_OK;
}

static gc_status bn_save(const gc_op_call *c, const gc_tensor *t, int64_t C)
{
    TRY(need(c, t, "save"));
    if (t->ndim != 2 || t->shape[0] != 2 || t->shape[1] != C)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: 'save' has shape %s, expected (2, %lld) (the channels of 'x' %s)",
                       gc_op_name(c->op), shp(t).s, (long long)C, shp(c->in[0]).s);
    return want_f32(c, t, "save");
}

static gc_status v_batchnorm_fwd(const gc_op_call *c)
{
    const gc_batchnorm_params *p = c->params;
    const gc_tensor *x = c->in[0];
    int64_t C = 0;
    TRY(bn_x(c, x, &C));
    if (!(isfinite(p->epsilon) && p->epsilon >= 0.0f) || !(p->momentum >= 0.0f && p->momentum <= 1.0f))
        return gc_fail(GC_ERR_INVALID_ARG,
                       "batchnorm_fwd: need a finite epsilon >= 0 and momentum in [0, 1] (got epsilon=%g, "
                       "momentum=%g)",
                       (double)p->epsilon, (double)p->momentum);
    if (present(c->in[1])) TRY(channel_vec(c, c->in[1], "gamma", C));
    if (present(c->in[2])) TRY(channel_vec(c, c->in[2], "beta", C));
    if (present(c->in[3])) TRY(like_x(c, c->in[3], "residual", x));
    TRY(like_x(c, c->out[0], "y", x));
    if (c->out[0]->data == x->data)
        return gc_fail(GC_ERR_INVALID_ARG, "batchnorm_fwd: 'y' must not be the memory of 'x' (shape %s)",
                       shp(x).s);
    TRY(channel_vec(c, c->out[1], "moving_mean", C));
    TRY(channel_vec(c, c->out[2], "moving_var", C));
    return bn_save(c, c->out[3], C);
}

static gc_status v_batchnorm_bwd(const gc_op_call *c)
{
    const gc_batchnorm_params *p = c->params;
    const gc_tensor *x = c->in[0];
    int64_t C = 0;
    TRY(bn_x(c, x, &C));
    TRY(like_x(c, c->in[1], "dy", x));
    if (present(c->in[2])) TRY(channel_vec(c, c->in[2], "gamma", C));
    TRY(bn_save(c, c->in[3], C));
    if (p->mask_from_x) {
        if (p->act != GC_ACT_RELU)
            return gc_fail(GC_ERR_INVALID_ARG, "batchnorm_bwd: mask_from_x is for act relu (there is no mask to "
                                               "recompute with linear)");
        if (present(c->in[4]))
            return gc_fail(GC_ERR_INVALID_ARG, "batchnorm_bwd: 'y' (shape %s) must not be given with mask_from_x "
                                               "(the mask is recomputed from 'x')", shp(c->in[4]).s);
    } else if (p->act == GC_ACT_RELU || present(c->in[4])) {
        if (!present(c->in[4]))
            return gc_fail(GC_ERR_INVALID_ARG, "batchnorm_bwd: 'y' (the forward output) is required with relu "
                                               "(or mask_from_x with 'beta')");
        TRY(like_x(c, c->in[4], "y", x));
    }
    if (present(c->in[5])) {
        if (!p->mask_from_x)
            return gc_fail(GC_ERR_INVALID_ARG, "batchnorm_bwd: 'beta' is read only with mask_from_x");
        TRY(channel_vec(c, c->in[5], "beta", C));
    }
    if (present(c->out[0])) TRY(like_x(c, c->out[0], "dx", x));
    if (present(c->out[1])) TRY(channel_vec(c, c->out[1], "dgamma", C));
    if (present(c->out[2])) TRY(channel_vec(c, c->out[2], "dbeta", C));
    if (present(c->out[3])) TRY(like_x(c, c->out[3], "dresidual", x));
    return GC_OK;
}

/* pad2d: the unpadded tensor (x of the forward, dx of the backward) and the padded one */
static gc_status v_pad2d(const gc_op_call *c, int bwd)
{
    const gc_pad2d_params *p = c->params;
    const char *small_name = bwd ? "dx" : "x", *big_name = bwd ? "dy" : "y";
    const gc_tensor *small = bwd ? c->out[0] : c->in[0], *big = bwd ? c->in[0] : c->out[0];
    if (p->top < 0 || p->bottom < 0 || p->left < 0 || p->right < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: padding must be >= 0, got top=%d bottom=%d left=%d right=%d",
                       gc_op_name(c->op), p->top, p->bottom, p->left, p->right);
    TRY(need(c, c->in[0], bwd ? "dy" : "x")); TRY(need(c, c->out[0], bwd ? "dx" : "y"));
    TRY(rank(c, small, small_name, 4));
    TRY(want4(c, big, big_name, small->shape[0], small->shape[1] + p->top + p->bottom,
              small->shape[2] + p->left + p->right, small->shape[3]));
    return dtypes(c, -1);
}

static gc_status v_concat(const gc_op_call *c)
{
    static const char *const names[GC_MAX_OP_IN] = {"x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7"};
    const gc_tensor *x0 = c->in[0], *y = c->out[0];
    TRY(need(c, x0, "x0")); TRY(need(c, y, "y"));
    TRY(rank(c, x0, "x0", 2));
    int64_t w = 0;
    for (int k = 0; k < 8; k++) {
        const gc_tensor *t = c->in[k];
        if (!present(t)) continue;
        TRY(need(c, t, names[k]));
        TRY(rank(c, t, names[k], 2));
        if (t->shape[0] != x0->shape[0])
            return gc_fail(GC_ERR_INVALID_ARG, "concat: '%s' has shape %s but 'x0' %s has %lld rows",
                           names[k], shp(t).s, shp(x0).s, (long long)x0->shape[0]);
        w += t->shape[1];
    }
    if (y->ndim != 2 || y->shape[0] != x0->shape[0] || y->shape[1] != w)
        return gc_fail(GC_ERR_INVALID_ARG, "concat: 'y' has shape %s, expected (%lld, %lld)", shp(y).s,
                       (long long)x0->shape[0], (long long)w);
    return dtypes(c, -1);
}

static gc_status v_slice_cols(const gc_op_call *c)
{
    const gc_slice_params *p = c->params;
    const gc_tensor *x = c->in[0], *y = c->out[0];
    TRY(need(c, x, "x")); TRY(need(c, y, "y"));
    TRY(rank(c, x, "x", 2)); TRY(rank(c, y, "y", 2));
    if (y->shape[0] != x->shape[0])
        return gc_fail(GC_ERR_INVALID_ARG, "slice_cols: 'y' has shape %s but 'x' %s has %lld rows", shp(y).s,
                       shp(x).s, (long long)x->shape[0]);
    if (p->offset < 0 || p->offset > x->shape[1] - y->shape[1])
        return gc_fail(GC_ERR_INVALID_ARG,
                       "slice_cols: columns [%lld, %lld) of 'y' %s are outside 'x' %s (offset must be in "
                       "[0, %lld])",
                       (long long)p->offset, (long long)(p->offset + y->shape[1]), shp(y).s, shp(x).s,
                       (long long)(x->shape[1] - y->shape[1]));
    return dtypes(c, -1);
}

/* ------------------------------------------------------------------ recurrent layers */

int gc_rnn_gates(gc_rnn_cell cell)
{
    switch (cell) {
    case GC_RNN_SIMPLE: return 1;
    case GC_RNN_LSTM: return 4;
    case GC_RNN_GRU:
    case GC_RNN_GRU_RESET_BEFORE: return 3;
    }
    return 0;
}

int gc_rnn_save_blocks(gc_rnn_cell cell)
{
    switch (cell) {
    case GC_RNN_SIMPLE: return 2;
    case GC_RNN_LSTM: return 7;
    case GC_RNN_GRU:
    case GC_RNN_GRU_RESET_BEFORE: return 5;
    }
    return 0;
}

static const char *rnn_cell_name(gc_rnn_cell c)
{
    static const char *const n[4] = {"simple", "lstm", "gru", "gru_reset_before"};
    return (unsigned)c < 4 ? n[c] : "?";
}

static gc_status rnn_params_ok(const gc_op_call *c, const gc_rnn_params *p)
{
    if ((unsigned)p->cell > (unsigned)GC_RNN_GRU_RESET_BEFORE)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: unknown cell %d (simple, lstm, gru, gru_reset_before)",
                       gc_op_name(c->op), (int)p->cell);
    if ((unsigned)p->act > (unsigned)GC_RNN_HARD_SIGMOID || (unsigned)p->recurrent_act > (unsigned)GC_RNN_HARD_SIGMOID)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "%s: unknown activation %d / recurrent activation %d (tanh, sigmoid, relu, linear, "
                       "hard_sigmoid)",
                       gc_op_name(c->op), (int)p->act, (int)p->recurrent_act);
    return GC_OK;
}

/* a present tensor of the call: (a) of the given shape, (b) of the storage dtype `dt`
 * (float32 for the mask) */
static gc_status rnn_want(const gc_op_call *c, const gc_tensor *t, const char *name, int nd, const int64_t *dims,
                          gc_dtype dt)
{
    TRY(need(c, t, name));
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == dims[i];
    if (!ok) {
        char want[96];
        size_t len = (size_t)snprintf(want, sizeof want, "(");
        for (int i = 0; i < nd && len < sizeof want - 24; i++)
            len += (size_t)snprintf(want + len, sizeof want - len, i ? ", %lld" : "%lld", (long long)dims[i]);
        snprintf(want + len, sizeof want - len, nd == 1 ? ",)" : ")");
        return gc_fail(GC_ERR_INVALID_ARG, "%s (%s): '%s' has shape %s, expected %s", gc_op_name(c->op),
                       rnn_cell_name(((const gc_rnn_params *)c->params)->cell), name, shp(t).s, want);
    }
    if ((unsigned)t->dtype >= GC_DTYPE_COUNT || t->dtype != dt)
        return gc_fail(GC_ERR_DTYPE, "%s: '%s' is %s but must be %s%s", gc_op_name(c->op), name,
                       (unsigned)t->dtype < GC_DTYPE_COUNT ? gc_dtype_name(t->dtype) : "an unknown dtype",
                       gc_dtype_name(dt),
                       dt == GC_F32 && (strcmp(name, "mask") == 0 || strcmp(name, "rmask") == 0)
                           ? " (the masks are always float32)"
                           : " (every float tensor of the call but the masks shares one dtype)");
    return GC_OK;
}

static gc_status rnn_only(const gc_op_call *c, const gc_tensor *t, const char *name, int allowed, const char *who)
{
    if (present(t) && !allowed)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: '%s' is given (shape %s) but the %s cell has none (%s only)",
                       gc_op_name(c->op), name, shp(t).s,
                       rnn_cell_name(((const gc_rnn_params *)c->params)->cell), who);
    return GC_OK;
}

/* B, T, u > 0 and the storage dtype, from the tensor that defines them */
static gc_status rnn_dims(const gc_op_call *c, const gc_tensor *t, const char *name, int64_t *B, int64_t *T,
                          int64_t *u)
{
    if (*B < 1 || *T < 1 || *u < 1)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "%s: '%s' has shape %s: batch (%lld), time steps (%lld) and units (%lld) must all be >= 1",
                       gc_op_name(c->op), name, shp(t).s, (long long)*B, (long long)*T, (long long)*u);
    if ((unsigned)t->dtype >= GC_DTYPE_COUNT || !is_float(t->dtype))
        return gc_fail(GC_ERR_DTYPE, "%s: '%s' must be float32, float16 or bfloat16, got %s", gc_op_name(c->op),
                       name, (unsigned)t->dtype < GC_DTYPE_COUNT ? gc_dtype_name(t->dtype) : "an unknown dtype");
    return GC_OK;
}

static gc_status v_rnn_fwd(const gc_op_call *c)
{
    const gc_rnn_params *p = c->params;
    TRY(rnn_params_ok(c, p));
    const gc_tensor *xw = c->in[0], *U = c->in[1];
    const int G = gc_rnn_gates(p->cell), S = gc_rnn_save_blocks(p->cell), lstm = p->cell == GC_RNN_LSTM;
    TRY(need(c, xw, "xw")); TRY(need(c, U, "U"));
    TRY(rank(c, xw, "xw", 3)); TRY(rank(c, U, "U", 2));
    int64_t B = xw->shape[0], T = xw->shape[1], u = U->shape[0];
    TRY(rnn_dims(c, xw, "xw", &B, &T, &u));
    const gc_dtype dt = xw->dtype;
    if (xw->shape[2] != G * u)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "rnn_fwd (%s): 'xw' has shape %s: its last dim must be G*u = %d*%lld = %lld (u from 'U' %s)",
                       rnn_cell_name(p->cell), shp(xw).s, G, (long long)u, (long long)(G * u), shp(U).s);
    const int64_t dU[2] = {u, G * u}, dBu[2] = {B, u}, dBT[2] = {B, T}, dbh[1] = {G * u};
    const int64_t dseq[3] = {B, T, u}, dsave[4] = {S, B, T, u}, dBG[2] = {B, G * u};
    TRY(rnn_want(c, U, "U", 2, dU, dt));
    TRY(rnn_only(c, c->in[3], "c0", lstm, "lstm"));
    TRY(rnn_only(c, c->in[5], "bh", p->cell == GC_RNN_GRU, "gru with reset_after"));
    TRY(rnn_only(c, c->out[3], "c_T", lstm, "lstm"));
    if (present(c->in[2])) TRY(rnn_want(c, c->in[2], "h0", 2, dBu, dt));
    if (present(c->in[3])) TRY(rnn_want(c, c->in[3], "c0", 2, dBu, dt));
    if (present(c->in[4])) TRY(rnn_want(c, c->in[4], "mask", 2, dBT, GC_F32));
    if (present(c->in[5])) TRY(rnn_want(c, c->in[5], "bh", 1, dbh, dt));
    if (present(c->in[6])) TRY(rnn_want(c, c->in[6], "rmask", 2, dBG, GC_F32));
    TRY(rnn_want(c, c->out[0], "y", p->sequences ? 3 : 2, p->sequences ? dseq : dBu, dt));
    if (present(c->out[1])) TRY(rnn_want(c, c->out[1], "save", 4, dsave, dt));
    if (present(c->out[2])) TRY(rnn_want(c, c->out[2], "h_T", 2, dBu, dt));
    if (present(c->out[3])) TRY(rnn_want(c, c->out[3], "c_T", 2, dBu, dt));
    return GC_OK;
}

static gc_status v_rnn_bwd(const gc_op_call *c)
{
    const gc_rnn_params *p = c->params;
    TRY(rnn_params_ok(c, p));
    const gc_tensor *U = c->in[3], *save = c->in[4];
    const int G = gc_rnn_gates(p->cell), S = gc_rnn_save_blocks(p->cell), lstm = p->cell == GC_RNN_LSTM;
    TRY(need(c, save, "save")); TRY(need(c, U, "U"));
    if (save->ndim != 4 || save->shape[0] != S)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn_bwd (%s): 'save' has shape %s, expected (%d, B, T, u)",
                       rnn_cell_name(p->cell), shp(save).s, S);
    int64_t B = save->shape[1], T = save->shape[2], u = save->shape[3];
    TRY(rnn_dims(c, save, "save", &B, &T, &u));
    const gc_dtype dt = save->dtype;
    const int64_t dU[2] = {u, G * u}, dBu[2] = {B, u}, dBT[2] = {B, T}, dseq[3] = {B, T, u};
    const int64_t dxw[3] = {B, T, G * u}, dBG[2] = {B, G * u};
    TRY(rnn_want(c, U, "U", 2, dU, dt));
    TRY(rnn_only(c, c->in[2], "dc_T", lstm, "lstm"));
    TRY(rnn_only(c, c->out[1], "dm", p->cell == GC_RNN_GRU, "gru with reset_after"));
    TRY(rnn_only(c, c->out[3], "dc0", lstm, "lstm"));
    if (present(c->in[0])) TRY(rnn_want(c, c->in[0], "dy", p->sequences ? 3 : 2, p->sequences ? dseq : dBu, dt));
    if (present(c->in[1])) TRY(rnn_want(c, c->in[1], "dh_T", 2, dBu, dt));
    if (present(c->in[2])) TRY(rnn_want(c, c->in[2], "dc_T", 2, dBu, dt));
    if (present(c->in[5])) TRY(rnn_want(c, c->in[5], "mask", 2, dBT, GC_F32));
    if (present(c->in[6])) TRY(rnn_want(c, c->in[6], "rmask", 2, dBG, GC_F32));
    TRY(rnn_want(c, c->out[0], "dxw", 3, dxw, dt));
    if (present(c->out[1])) TRY(rnn_want(c, c->out[1], "dm", 3, dxw, dt));
    if (present(c->out[2])) TRY(rnn_want(c, c->out[2], "dh0", 2, dBu, dt));
    if (present(c->out[3])) TRY(rnn_want(c, c->out[3], "dc0", 2, dBu, dt));
    return GC_OK;
}

/* seq_mask: x (..., F) float, rank >= 2 -> mask (...) float32 */
static gc_status v_seq_mask(const gc_op_call *c)
{
    const gc_tensor *x = c->in[0], *m = c->out[0];
    TRY(need(c, x, "x")); TRY(need(c, m, "mask"));
    if (x->ndim < 2)
        return gc_fail(GC_ERR_INVALID_ARG, "seq_mask: 'x' must have rank >= 2 (..., features), got shape %s",
                       shp(x).s);
    if ((unsigned)x->dtype >= GC_DTYPE_COUNT || !is_float(x->dtype))
        return gc_fail(GC_ERR_DTYPE, "seq_mask: 'x' must be a float tensor");
    int ok = m->ndim == x->ndim - 1;
    for (int i = 0; ok && i < m->ndim; i++) ok = m->shape[i] == x->shape[i];
    if (!ok)
        return gc_fail(GC_ERR_INVALID_ARG, "seq_mask: 'mask' has shape %s, expected the shape of 'x' %s without "
                       "its last axis", shp(m).s, shp(x).s);
    return want_f32(c, m, "mask");
}

/* mul_bcast: x (A, M, C), m (A, C) float32 -> y (x's shape and dtype) */
static gc_status v_mul_bcast(const gc_op_call *c)
{
    const gc_tensor *x = c->in[0], *m = c->in[1], *y = c->out[0];
    TRY(need(c, x, "x")); TRY(need(c, m, "m")); TRY(need(c, y, "y"));
    TRY(rank(c, x, "x", 3));
    if ((unsigned)x->dtype >= GC_DTYPE_COUNT || !is_float(x->dtype))
        return gc_fail(GC_ERR_DTYPE, "mul_bcast: 'x' must be a float tensor");
    if (m->ndim != 2 || m->shape[0] != x->shape[0] || m->shape[1] != x->shape[2])
        return gc_fail(GC_ERR_INVALID_ARG, "mul_bcast: 'm' has shape %s, expected (%lld, %lld) for 'x' %s", shp(m).s,
                       (long long)x->shape[0], (long long)x->shape[2], shp(x).s);
    TRY(want_f32(c, m, "m"));
    TRY(match(c, y, "y", x, "x"));
    if (y->dtype != x->dtype)
        return gc_fail(GC_ERR_DTYPE, "mul_bcast: 'y' must have the dtype of 'x' (%s), got %s", gc_dtype_name(x->dtype),
                       gc_dtype_name(y->dtype));
    return GC_OK;
}

/* reverse_seq: x (A, T, C) float -> y (x's shape and dtype), not in place */
static gc_status v_reverse_seq(const gc_op_call *c)
{
    const gc_tensor *x = c->in[0], *y = c->out[0];
    TRY(need(c, x, "x")); TRY(need(c, y, "y"));
    TRY(rank(c, x, "x", 3));
    if ((unsigned)x->dtype >= GC_DTYPE_COUNT || !is_float(x->dtype))
        return gc_fail(GC_ERR_DTYPE, "reverse_seq: 'x' must be a float tensor");
    TRY(match(c, y, "y", x, "x"));
    if (y->dtype != x->dtype)
        return gc_fail(GC_ERR_DTYPE, "reverse_seq: 'y' must have the dtype of 'x' (%s), got %s",
                       gc_dtype_name(x->dtype), gc_dtype_name(y->dtype));
    if (y->data == x->data && gc_tensor_numel(x) > 0)
        return gc_fail(GC_ERR_INVALID_ARG, "reverse_seq: 'y' must not alias 'x' (the op is not in place)");
    return GC_OK;
}

/* weight_grads: x (K, M1), h (K, M2) optional, g (K, N) -> dw (M1, N), du (M2, N) iff h,
 * db (N,) optional; one float dtype; no output aliases an input */
static gc_status v_weight_grads(const gc_op_call *c)
{
    const gc_tensor *x = c->in[0], *h = c->in[1], *g = c->in[2];
    const gc_tensor *dw = c->out[0], *du = c->out[1], *db = c->out[2];
    TRY(need(c, x, "x")); TRY(need(c, g, "g")); TRY(need(c, dw, "dw"));
    TRY(rank(c, x, "x", 2)); TRY(rank(c, g, "g", 2));
    if (x->shape[0] != g->shape[0])
        return gc_fail(GC_ERR_INVALID_ARG, "weight_grads: 'x' %s and 'g' %s must have the same rows (K)",
                       shp(x).s, shp(g).s);
    const int64_t K = g->shape[0], N = g->shape[1];
    TRY(want2(c, dw, "dw", x->shape[1], N));
    if (present(h) != present(du))
        return gc_fail(GC_ERR_INVALID_ARG, "weight_grads: 'du' is computed from 'h': give both or neither");
    if (present(h)) {
        TRY(rank(c, h, "h", 2));
        if (h->shape[0] != K)
            return gc_fail(GC_ERR_INVALID_ARG, "weight_grads: 'h' %s and 'g' %s must have the same rows (K)",
                           shp(h).s, shp(g).s);
        TRY(want2(c, du, "du", h->shape[1], N));
    }
    if (present(db)) TRY(want1(c, db, "db", N));
    static const char *const in_names[3] = {"x", "h", "g"}, *const out_names[3] = {"dw", "du", "db"};
    for (int o = 0; o < 3; o++) {
        const gc_tensor *t = c->out[o];
        if (!present(t) || gc_tensor_numel(t) == 0) continue;
        for (int i = 0; i < 3; i++)
            if (present(c->in[i]) && c->in[i]->data == t->data && gc_tensor_numel(c->in[i]) > 0)
                return gc_fail(GC_ERR_INVALID_ARG, "weight_grads: '%s' must not alias '%s'", out_names[o],
                               in_names[i]);
    }
    return dtypes(c, -1);
}

/* the shared rules, one name per op */
static gc_status v_maxpool2d_fwd(const gc_op_call *c) { return v_pool_fwd(c); }
static gc_status v_avgpool2d_fwd(const gc_op_call *c) { return v_pool_fwd(c); }
static gc_status v_softmax_xent(const gc_op_call *c) { return v_loss(c); }
static gc_status v_sigmoid_bce(const gc_op_call *c) { return v_loss(c); }
static gc_status v_xent_probs(const gc_op_call *c) { return v_loss(c); }
static gc_status v_regression_loss(const gc_op_call *c) { return v_loss(c); }
static gc_status v_dropout_fwd(const gc_op_call *c) { return v_dropout(c); }
static gc_status v_dropout_bwd(const gc_op_call *c) { return v_dropout(c); }
static gc_status v_pad2d_fwd(const gc_op_call *c) { return v_pad2d(c, 0); }
static gc_status v_pad2d_bwd(const gc_op_call *c) { return v_pad2d(c, 1); }

typedef gc_status (*validator)(const gc_op_call *c);
static const validator validators[GC_OP_COUNT] = {
#define GC_X_VSLOT(E, n, P, ni, no) [GC_OP_##E] = v_##n,
    GC_OP_LIST(GC_X_VSLOT)
#undef GC_X_VSLOT
};

gc_status gc_op_validate(const gc_op_call *c)
{
    if (!c || (unsigned)c->op >= GC_OP_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "unknown op");
    if (!c->params) return gc_fail(GC_ERR_INVALID_ARG, "%s: parameters are missing", gc_op_name(c->op));
    return validators[c->op](c);
}
