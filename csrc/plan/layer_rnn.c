/* layer_rnn.c -- SimpleRNN, LSTM and GRU as one plan node kind: a recurrence over the T
 * steps of a (T, in) sample, as Keras' generic (non-cuDNN) path computes it.
 *
 * Why it is built this way (RECURRENT_SPEC.md section 2): the input projection of every
 * step does not depend on the recurrence, so it is one GEMM for the whole batch
 * (xw = x W + b, rows*T x G*u), and so are the weight gradients after the backward
 * recurrence (dW = x^T dxw, dU = hprev^T dz, db = column sums); only the recurrence
 * itself -- rnn_fwd / rnn_bwd, one op each -- walks the steps. rnn_fwd keeps what the
 * backward needs in `save`, whose first block is the state entering each step (hprev),
 * laid out (rows*T, u) for the dU GEMM. GRU with reset_after has a recurrent bias (row 1
 * of Keras' (2, 3u) bias): its gradient is the column sums of rnn_bwd's dm.
 * Not yet here: masks, initial_state, return_state, stateful, dropout (the Python layer
 * refuses them with a clear error). */
#include "plan_internal.h"

/* priv buffers; the last four are GRU reset_before's dU column blocks (below) */
enum { RNN_XW = 0, RNN_SAVE, RNN_HT, RNN_CT, RNN_DXW, RNN_DM, RNN_DZR, RNN_DH, RNN_DUZR, RNN_DUH };

static int64_t rnn_units(const gc_layer_desc *d) { return d->out_shape[d->out_ndim - 1]; }
static int64_t rnn_steps(const int64_t *in_shape) { return in_shape[0]; }

static gc_status rnn_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    (void)n_in;
    if (nd[0] != 2)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d needs (timesteps, features) samples, got rank %d", idx,
                       nd[0]);
    if ((unsigned)d->rnn_cell > GC_RNN_GRU_RESET_BEFORE)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d has an unknown cell %d", idx, d->rnn_cell);
    int want = d->return_sequences ? 2 : 1;
    if (d->out_ndim != want || (d->return_sequences && d->out_shape[0] != in[0][0]))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: output shape does not match return_sequences=%d", idx,
                       d->return_sequences);
    if (in[0][0] < 1) return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d has no timesteps", idx);
    if (!d->weights[GC_W_RNN_KERNEL] || !d->weights[GC_W_RNN_RECURRENT])
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d needs a kernel and a recurrent_kernel", idx);
    return GC_OK;
}

static void rnn_weights(const gc_layer_desc *d, const int64_t *in, int64_t *n, int *tr)
{
    const int64_t u = rnn_units(d), G = gc_rnn_gates((gc_rnn_cell)d->rnn_cell);
    n[GC_W_RNN_KERNEL] = in[1] * G * u;
    n[GC_W_RNN_RECURRENT] = u * G * u;
    n[GC_W_RNN_BIAS] = (d->rnn_cell == GC_RNN_GRU ? 2 : 1) * G * u;
    tr[GC_W_RNN_KERNEL] = tr[GC_W_RNN_RECURRENT] = tr[GC_W_RNN_BIAS] = 1;
}

static gc_status rnn_setup(gc_plan *p, plan_node *l)
{
    const int64_t B = p->max_batch, T = rnn_steps(l->d.in_shape), u = rnn_units(&l->d);
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    const int64_t S = gc_rnn_save_blocks((gc_rnn_cell)l->d.rnn_cell);
    TRY(gc_plan_alloc(p, B * T * Gu, l->dt, &l->priv[RNN_XW]));
    TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_HT]));
    if (l->d.rnn_cell == GC_RNN_LSTM) TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_CT]));
    if (!p->training) return GC_OK; /* inference saves nothing */
    TRY(gc_plan_alloc(p, S * B * T * u, l->dt, &l->priv[RNN_SAVE]));
    TRY(gc_plan_alloc(p, B * T * Gu, l->dt, &l->priv[RNN_DXW]));
    if (l->d.rnn_cell == GC_RNN_GRU) TRY(gc_plan_alloc(p, B * T * Gu, l->dt, &l->priv[RNN_DM]));
    if (l->d.rnn_cell == GC_RNN_GRU_RESET_BEFORE) {
        TRY(gc_plan_alloc(p, B * T * 2 * u, l->dt, &l->priv[RNN_DZR]));
        TRY(gc_plan_alloc(p, B * T * u, l->dt, &l->priv[RNN_DH]));
        TRY(gc_plan_alloc(p, u * 2 * u, l->dt, &l->priv[RNN_DUZR]));
        TRY(gc_plan_alloc(p, u * u, l->dt, &l->priv[RNN_DUH]));
    }
    return GC_OK;
}

static gc_rnn_params rnn_params(const plan_node *l)
{
    gc_rnn_params rp;
    memset(&rp, 0, sizeof rp);
    rp.cell = (gc_rnn_cell)l->d.rnn_cell;
    rp.act = (gc_rnn_act)l->d.rnn_act;
    rp.recurrent_act = (gc_rnn_act)l->d.rnn_recurrent_act;
    rp.go_backwards = l->d.go_backwards;
    rp.sequences = l->d.return_sequences;
    return rp;
}

static gc_tensor t3(void *data, gc_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t shape[3] = {a, b, c};
    return gc_tensor_make(data, dt, 3, shape);
}

static gc_tensor rnn_y(const plan_node *l, void *data, int64_t rows)
{
    const int64_t T = rnn_steps(l->d.in_shape), u = rnn_units(&l->d);
    return l->d.return_sequences ? t3(data, l->dt, rows, T, u) : gc_t2(data, l->dt, rows, u);
}

static gc_status rnn_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    (void)mode, (void)seed;
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), in = l->d.in_shape[1], u = rnn_units(&l->d);
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    const int gru = l->d.rnn_cell == GC_RNN_GRU;
    /* xw = x W + b_x for every step at once */
    gc_gemm_params gp = {0, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_tensor x = gc_t2(gc_node_input(p, l, 0), dt, rows * T, in);
    gc_tensor w = gc_t2(gc_node_weight(l, GC_W_RNN_KERNEL), dt, in, Gu);
    void *bias = l->w[GC_W_RNN_BIAS].w ? gc_node_weight(l, GC_W_RNN_BIAS) : NULL;
    gc_tensor b = bias ? gc_t1(bias, dt, Gu) : gc_none();
    gc_tensor xw = gc_t2(l->priv[RNN_XW], dt, rows * T, Gu);
    TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &x, &w, &b, &xw, NULL, NULL));
    /* the recurrence */
    gc_rnn_params rp = rnn_params(l);
    gc_tensor xw3 = t3(l->priv[RNN_XW], dt, rows, T, Gu);
    gc_tensor U = gc_t2(gc_node_weight(l, GC_W_RNN_RECURRENT), dt, u, Gu);
    gc_tensor none = gc_none();
    gc_tensor bh = gru && bias ? gc_t1((char *)bias + (size_t)Gu * gc_dtype_size(dt), dt, Gu) : gc_none();
    const int64_t S = gc_rnn_save_blocks(rp.cell);
    int64_t sshape[4] = {S, rows, T, u};
    gc_tensor save = l->priv[RNN_SAVE] ? gc_tensor_make(l->priv[RNN_SAVE], dt, 4, sshape) : gc_none();
    gc_tensor y = rnn_y(l, l->out, rows);
    gc_tensor hT = gc_t2(l->priv[RNN_HT], dt, rows, u);
    gc_tensor cT = l->priv[RNN_CT] ? gc_t2(l->priv[RNN_CT], dt, rows, u) : gc_none();
    const gc_tensor *ins[6] = {&xw3, &U, &none, &none, &none, &bh};
    gc_tensor *outs[4] = {&y, &save, &hT, &cT};
    return gc_plan_run_n(p, GC_OP_RNN_FWD, &rp, ins, 6, outs, 4);
}

/* dU = hprev^T dm, hprev = save block 0. GRU reset_before multiplies U_h by r * hprev
 * (save block 4) instead, so its z, r columns and its h columns are two GEMMs over column
 * slices of dxw, joined side by side. */
static gc_status recurrent_grad(gc_plan *p, plan_node *l, int64_t rows, const gc_tensor *dmz)
{
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), u = rnn_units(&l->d), BT = rows * T;
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_tensor nob = gc_none();
    gc_tensor hprev = gc_t2(l->priv[RNN_SAVE], dt, BT, u);
    gc_tensor du = gc_t2(l->w[GC_W_RNN_RECURRENT].dw, dt, u, Gu);
    if (l->d.rnn_cell != GC_RNN_GRU_RESET_BEFORE)
        return gc_plan_run(p, GC_OP_GEMM, &gp, &hprev, dmz, &nob, &du, NULL, NULL);
    gc_tensor dzr = gc_t2(l->priv[RNN_DZR], dt, BT, 2 * u), dh = gc_t2(l->priv[RNN_DH], dt, BT, u);
    gc_slice_params s0 = {0}, s2 = {2 * u};
    TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s0, dmz, NULL, NULL, &dzr, NULL, NULL));
    TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s2, dmz, NULL, NULL, &dh, NULL, NULL));
    gc_tensor duzr = gc_t2(l->priv[RNN_DUZR], dt, u, 2 * u), duh = gc_t2(l->priv[RNN_DUH], dt, u, u);
    gc_tensor rh = gc_t2((char *)l->priv[RNN_SAVE] + (size_t)(4 * BT * u) * gc_dtype_size(dt), dt, BT, u);
    TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &hprev, &dzr, &nob, &duzr, NULL, NULL));
    TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &rh, &dh, &nob, &duh, NULL, NULL));
    return gc_plan_run(p, GC_OP_CONCAT, &(gc_no_params){0}, &duzr, &duh, NULL, &du, NULL, NULL);
}

static gc_status rnn_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), in = l->d.in_shape[1], u = rnn_units(&l->d);
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    const int gru = l->d.rnn_cell == GC_RNN_GRU;
    gc_rnn_params rp = rnn_params(l);
    const int64_t S = gc_rnn_save_blocks(rp.cell);
    int64_t sshape[4] = {S, rows, T, u};
    gc_tensor save = gc_tensor_make(l->priv[RNN_SAVE], dt, 4, sshape);
    gc_tensor dy = rnn_y(l, l->gout, rows);
    gc_tensor U = gc_t2(gc_node_weight(l, GC_W_RNN_RECURRENT), dt, u, Gu);
    gc_tensor none = gc_none();
    gc_tensor dxw = t3(l->priv[RNN_DXW], dt, rows, T, Gu);
    gc_tensor dm = gru ? t3(l->priv[RNN_DM], dt, rows, T, Gu) : gc_none();
    const gc_tensor *ins[6] = {&dy, &none, &none, &U, &save, &none};
    gc_tensor *outs[4] = {&dxw, &dm, &none, &none};
    TRY(gc_plan_run_n(p, GC_OP_RNN_BWD, &rp, ins, 6, outs, 4));

    gc_tensor nob = gc_none();
    gc_tensor dz = gc_t2(l->priv[RNN_DXW], dt, rows * T, Gu);           /* d(x W + b_x) */
    gc_tensor dmz = gc_t2(gru ? l->priv[RNN_DM] : l->priv[RNN_DXW], dt, rows * T, Gu); /* d(hprev U [+ b_h]) */
    if (l->w[GC_W_RNN_KERNEL].trains) { /* dW = x^T dz */
        gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_tensor x = gc_t2(gc_node_input(p, l, 0), dt, rows * T, in);
        gc_tensor dw = gc_t2(l->w[GC_W_RNN_KERNEL].dw, dt, in, Gu);
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &x, &dz, &nob, &dw, NULL, NULL));
    }
    if (l->w[GC_W_RNN_RECURRENT].trains) TRY(recurrent_grad(p, l, rows, &dmz));
    if (l->w[GC_W_RNN_BIAS].w && l->w[GC_W_RNN_BIAS].trains) {
        gc_tensor db = gc_t1(l->w[GC_W_RNN_BIAS].dw, dt, Gu);
        TRY(gc_plan_run(p, GC_OP_BIAS_GRAD, &(gc_no_params){0}, &dz, NULL, NULL, &db, NULL, NULL));
        if (gru) {
            gc_tensor dbh = gc_t1((char *)l->w[GC_W_RNN_BIAS].dw + (size_t)Gu * gc_dtype_size(dt), dt, Gu);
            TRY(gc_plan_run(p, GC_OP_BIAS_GRAD, &(gc_no_params){0}, &dmz, NULL, NULL, &dbh, NULL, NULL));
        }
    }
    if (l->in_grad[0]) { /* dx = dz W^T */
        gc_gemm_params gp = {0, 1, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_tensor w = gc_t2(gc_node_weight(l, GC_W_RNN_KERNEL), dt, in, Gu);
        gc_tensor gin = gc_node_gin_tensor(p, l, 0, rows);
        gc_tensor gx = gc_t2(gin.data, dt, rows * T, in);
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &dz, &w, &nob, &gx, NULL, NULL));
        TRY(gc_node_deliver(p, l, 0, rows));
    }
    return GC_OK;
}

const gc_layer_ops gc_layer_rnn = {"rnn", 1, 1, rnn_check, rnn_weights, rnn_forward, rnn_backward,
                                   0, 0, 0, rnn_setup, 0};
