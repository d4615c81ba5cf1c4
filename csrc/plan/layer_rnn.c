/* layer_rnn.c -- SimpleRNN, LSTM and GRU as one plan node kind: a recurrence over the T
 * steps of a (T, in) sample, as Keras' generic (non-cuDNN) path computes it.
 *
 * Why it is built this way (RECURRENT_SPEC.md section 2): the input projection of every
 * step does not depend on the recurrence, so it is one GEMM for the whole batch
 * (xw = x W + b, rows*T x G*u), and so are the weight gradients after the backward
 * recurrence (dW = x^T dxw, dU = hprev^T dz, db = column sums: one weight_grads op where
 * both products read the same dz -- SimpleRNN, LSTM, no recurrent dropout -- so a
 * backend can read it once); only the recurrence
 * itself -- rnn_fwd / rnn_bwd, one op each -- walks the steps. rnn_fwd keeps what the
 * backward needs in `save`, whose first block is the state entering each step (hprev),
 * laid out (rows*T, u) for the dU GEMM. GRU with reset_after has a recurrent bias (row 1
 * of Keras' (2, 3u) bias): its gradient is the column sums of rnn_bwd's dm.
 *
 * Keras' layer arguments (RECURRENT_SPEC 1.6-1.8), all through the one rnn_fwd / rnn_bwd:
 * - inputs after x: rnn_state_inputs initial states (h0 [, c0], tensors of the graph that
 *   get their gradients dh0 / dc0), then a (T,) float32 step mask (a seq_mask node) when
 *   rnn_mask_input, read as stored; zero_output_for_mask passes through to the op;
 * - return_state: the node's sample is [y | h_T | c_T] (select nodes pick the outputs,
 *   layer_select.c): y, h_T and c_T are computed into the node's own buffers and joined,
 *   the gradient is split back into dy, dh_T and dc_T before rnn_bwd;
 * - stateful: the non-trainable weight slots state_h / state_c (stateful_batch, u) are
 *   the initial states unless a state input is given, and take h_T / c_T (cast to float32)
 *   after every pass; no gradient flows into earlier batches (Keras' truncated BPTT);
 * - dropout (training only): one inverted-dropout mask (rows, in) per pass, drawn with
 *   dropout_fwd on ones (a counter-based seed per node and step) and applied to x at every
 *   step (mul_bcast); the GEMMs read the masked x, dx gets the same mask.
 * - recurrent_dropout (training only, RECURRENT_SPEC 1.7, Keras' implementation 1): a
 *   mask rm (rows, G*u) per pass, one block per gate, drawn the same way with its own
 *   seed constant, passed to rnn_fwd / rnn_bwd as rmask (the op masks h_{t-1} in each
 *   gate's recurrent product and its gradient); dU then is per gate block,
 *   dU_g = (hprev * rm_g)^T . dz_g (mul_bcast of save[0], G GEMMs, one concat;
 *   reset_before's h block stays save[4]^T . dz_h). With gate_dropout (LSTM / GRU with
 *   recurrent_dropout != 0) the input dropout is G masks too, stored (G, rows, in): the
 *   projection is then one GEMM per gate, xw_g = (x * m_g) . W_g + b_g (column slices of
 *   W and b, joined by a concat), dW_g = (x * m_g)^T . dz_g, and
 *   dx = sum_g (dz_g . W_g^T) * m_g (an add of the G masked products). */
#include "plan_internal.h"
#include "layer_rnn_cudnn.h" /* the cuDNN path (use_cudnn=True): setup, forward, backward */

#include <stdlib.h>

/* priv buffers; the last four are GRU reset_before's dU column blocks (below) */
enum { RNN_XW = 0, RNN_SAVE, RNN_HT, RNN_CT, RNN_DXW, RNN_DM, RNN_DZR, RNN_DH, RNN_DUZR, RNN_DUH,
       RNN_Y, RNN_DY, RNN_DHT, RNN_DCT, RNN_DH0, RNN_DC0, /* return_state, state inputs */
       RNN_ONES, RNN_DPM, RNN_XD,                          /* input dropout */
       RNN_WG, RNN_BG, RNN_DZG, RNN_DWG,                   /* per-gate input masks */
       RNN_RM, RNN_RMG, RNN_HMG, RNN_DZS, RNN_DUG,         /* recurrent dropout */
       RNN_PRIV_COUNT };
_Static_assert(RNN_PRIV_COUNT <= GC_NODE_MAX_PRIV, "rnn: more priv buffers than a plan node holds");

/* u: the last extent of the output, or with return_state (a packed (Ty*u + S*u,) sample,
 * S = 1 state, 2 for LSTM) solved from its length */
static int64_t rnn_units(const gc_layer_desc *d)
{
    if (!d->return_state) return d->out_shape[d->out_ndim - 1];
    const int64_t per = (d->return_sequences ? d->in_shape[0] : 1) + (d->rnn_cell == GC_RNN_LSTM ? 2 : 1);
    return d->out_shape[0] / per;
}
int64_t gc_rnn_node_units(const gc_layer_desc *d) { return rnn_units(d); }
static int64_t rnn_steps(const int64_t *in_shape) { return in_shape[0]; }
static int rnn_lstm(const plan_node *l) { return l->d.rnn_cell == GC_RNN_LSTM; }
/* elements of y per sample */
static int64_t rnn_ylen(const plan_node *l) { return (l->d.return_sequences ? rnn_steps(l->d.in_shape) : 1) * rnn_units(&l->d); }
static int rnn_dropout_on(const plan_node *l) { return l->d.dropout_rate > 0.0f; }
static int rnn_rdrop_on(const plan_node *l) { return l->d.recurrent_dropout_rate > 0.0f; }
static int rnn_gates_of(const plan_node *l) { return gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell); }
/* input dropout masks: one shared by every gate, or one per gate (gate_dropout) */
static int rnn_in_masks(const plan_node *l) { return rnn_dropout_on(l) && l->d.rnn_gate_dropout ? rnn_gates_of(l) : 1; }
static char *at(void *base, int64_t elems, gc_dtype dt) { return (char *)base + (size_t)elems * gc_dtype_size(dt); }

static gc_status rnn_check(const gc_layer_desc *d, int idx, int n_in, const int64_t (*in)[GC_MAX_DIMS - 1],
                           const int *nd)
{
    if (nd[0] != 2)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d needs (timesteps, features) samples, got rank %d", idx,
                       nd[0]);
    if ((unsigned)d->rnn_cell > GC_RNN_GRU_RESET_BEFORE)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d has an unknown cell %d", idx, d->rnn_cell);
    const int lstm = d->rnn_cell == GC_RNN_LSTM, nstates = lstm ? 2 : 1;
    const int64_t T = in[0][0], u = rnn_units(d);
    if (T < 1) return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d has no timesteps", idx);
    if (d->return_state) {
        const int64_t want = ((d->return_sequences ? T : 1) + nstates) * u;
        if (d->out_ndim != 1 || u < 1 || d->out_shape[0] != want)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d with return_state: the sample must be [y | states] "
                           "side by side", idx);
    } else {
        int want = d->return_sequences ? 2 : 1;
        if (d->out_ndim != want || (d->return_sequences && d->out_shape[0] != T))
            return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: output shape does not match return_sequences=%d",
                           idx, d->return_sequences);
    }
    if (d->rnn_state_inputs < 0 || d->rnn_state_inputs > nstates ||
        (d->rnn_state_inputs && d->rnn_state_inputs != nstates))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: %d initial states given, the cell has %d", idx,
                       d->rnn_state_inputs, nstates);
    if (n_in != 1 + d->rnn_state_inputs + (d->rnn_mask_input != 0))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d has %d inputs, expected x, %d states%s", idx, n_in,
                       d->rnn_state_inputs, d->rnn_mask_input ? " and a mask" : "");
    for (int k = 1; k <= d->rnn_state_inputs; k++)
        if (nd[k] != 1 || in[k][0] != u)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: initial state %d must be (%lld,) per sample", idx,
                           k - 1, (long long)u);
    if (d->rnn_mask_input) {
        const int k = 1 + d->rnn_state_inputs;
        if (nd[k] != 1 || in[k][0] != T)
            return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: the mask must be (%lld,) per sample", idx,
                           (long long)T);
    }
    if (d->stateful_batch < 0 || (d->stateful_batch > 0 && (!d->weights[GC_W_RNN_STATE_H] ||
                                                            (lstm && !d->weights[GC_W_RNN_STATE_C]))))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: a stateful layer needs its state buffers", idx);
    if (d->dropout_rate < 0.0f || d->dropout_rate > 1.0f)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: dropout rate %g outside [0, 1]", idx,
                       (double)d->dropout_rate);
    if (!(d->recurrent_dropout_rate >= 0.0f && d->recurrent_dropout_rate <= 1.0f))
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: recurrent_dropout rate %g outside [0, 1]", idx,
                       (double)d->recurrent_dropout_rate);
    if (!d->weights[GC_W_RNN_KERNEL] || !d->weights[GC_W_RNN_RECURRENT])
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d needs a kernel and a recurrent_kernel", idx);
    if (d->rnn_impl != 0 && d->rnn_impl != 1)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d has an unknown impl %d", idx, d->rnn_impl);
    const char *bad = d->rnn_impl ? gc_rnn_cudnn_incompatible(d) : NULL;
    if (bad)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d: use_cudnn=True, but cuDNN has no %s; use "
                       "use_cudnn='auto' / False", idx, bad);
    return GC_OK;
}

static void rnn_weights(const gc_layer_desc *d, const int64_t *in, int64_t *n, int *tr)
{
    const int64_t u = rnn_units(d), G = gc_rnn_gates((gc_rnn_cell)d->rnn_cell);
    n[GC_W_RNN_KERNEL] = in[1] * G * u;
    n[GC_W_RNN_RECURRENT] = u * G * u;
    n[GC_W_RNN_BIAS] = (d->rnn_cell == GC_RNN_GRU ? 2 : 1) * G * u;
    tr[GC_W_RNN_KERNEL] = tr[GC_W_RNN_RECURRENT] = tr[GC_W_RNN_BIAS] = 1;
    if (d->stateful_batch > 0) { /* the carried states: buffers, never trained */
        n[GC_W_RNN_STATE_H] = d->stateful_batch * u;
        if (d->rnn_cell == GC_RNN_LSTM) n[GC_W_RNN_STATE_C] = d->stateful_batch * u;
    }
}

static gc_status rnn_setup(gc_plan *p, plan_node *l)
{
    if (gc_rnn_cudnn_selected(p, l)) return gc_rnn_cudnn_setup(p, l);
    const int64_t B = p->max_batch, T = rnn_steps(l->d.in_shape), u = rnn_units(&l->d), in = l->d.in_shape[1];
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    const int64_t S = gc_rnn_save_blocks((gc_rnn_cell)l->d.rnn_cell);
    TRY(gc_plan_alloc(p, B * T * Gu, l->dt, &l->priv[RNN_XW]));
    TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_HT]));
    if (rnn_lstm(l)) TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_CT]));
    if (l->d.return_state) TRY(gc_plan_alloc(p, B * rnn_ylen(l), l->dt, &l->priv[RNN_Y]));
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
    if (l->d.return_state) {
        TRY(gc_plan_alloc(p, B * rnn_ylen(l), l->dt, &l->priv[RNN_DY]));
        TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_DHT]));
        if (rnn_lstm(l)) TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_DCT]));
    }
    if (l->d.rnn_state_inputs >= 1 && l->in_grad[1]) TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_DH0]));
    if (l->d.rnn_state_inputs >= 2 && l->in_grad[2]) TRY(gc_plan_alloc(p, B * u, l->dt, &l->priv[RNN_DC0]));
    const int64_t Gi = rnn_in_masks(l), G = rnn_gates_of(l);
    if (rnn_dropout_on(l)) {
        TRY(gc_plan_alloc(p, Gi * B * in, GC_F32, &l->priv[RNN_DPM]));
        TRY(gc_plan_alloc(p, Gi * B * T * in, l->dt, &l->priv[RNN_XD]));
    }
    if (Gi > 1) {
        TRY(gc_plan_alloc(p, G * in * u, l->dt, &l->priv[RNN_WG]));
        TRY(gc_plan_alloc(p, Gu, l->dt, &l->priv[RNN_BG]));
        TRY(gc_plan_alloc(p, B * T * Gu, l->dt, &l->priv[RNN_DZG]));
        TRY(gc_plan_alloc(p, G * in * u, l->dt, &l->priv[RNN_DWG]));
    }
    if (rnn_rdrop_on(l)) {
        TRY(gc_plan_alloc(p, B * Gu, GC_F32, &l->priv[RNN_RM]));
        TRY(gc_plan_alloc(p, B * u, GC_F32, &l->priv[RNN_RMG]));
        TRY(gc_plan_alloc(p, B * T * u, l->dt, &l->priv[RNN_HMG]));
        TRY(gc_plan_alloc(p, B * T * u, l->dt, &l->priv[RNN_DZS]));
        TRY(gc_plan_alloc(p, G * u * u, l->dt, &l->priv[RNN_DUG]));
    }
    /* the ones the masks are drawn from */
    const int64_t n1 = rnn_dropout_on(l) ? Gi * B * in : 0, n2 = rnn_rdrop_on(l) ? B * Gu : 0;
    const int64_t nones = n1 > n2 ? n1 : n2;
    if (nones) {
        TRY(gc_plan_alloc(p, nones, GC_F32, &l->priv[RNN_ONES]));
        float *ones = malloc((size_t)nones * sizeof *ones);
        if (!ones) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        for (int64_t i = 0; i < nones; i++) ones[i] = 1.0f;
        gc_status s = p->be->upload(p->be, l->priv[RNN_ONES], ones, (size_t)nones * sizeof *ones);
        free(ones);
        TRY(s);
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
    rp.zero_output_for_mask = l->d.zero_output_for_mask;
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

/* the (rows, T) float32 mask input, or none */
static gc_tensor rnn_mask(const gc_plan *p, const plan_node *l, int64_t rows)
{
    if (!l->d.rnn_mask_input) return gc_none();
    return gc_t2(p->L[l->in[1 + l->d.rnn_state_inputs]].out, GC_F32, rows, rnn_steps(l->d.in_shape));
}

/* the initial state k (0 h, 1 c): a state input, the stateful layer's carried state, or none (zeros) */
static gc_tensor rnn_state0(const gc_plan *p, const plan_node *l, int k, int64_t rows)
{
    const int64_t u = rnn_units(&l->d);
    if (k == 1 && !rnn_lstm(l)) return gc_none();
    if (l->d.rnn_state_inputs > k) return gc_t2(gc_node_input(p, l, 1 + k), l->dt, rows, u);
    if (l->d.stateful_batch > 0) return gc_t2(gc_node_weight(l, GC_W_RNN_STATE_H + k), l->dt, rows, u);
    return gc_none();
}

/* a dropout mask's seed: the step's seed XOR a per-node constant (as dropout nodes do);
 * salt tells the input masks from the recurrent ones */
#define RNN_SALT_INPUT 0xD1B54A32D192ED03ull
#define RNN_SALT_RECURRENT 0x8CB92BA72F3D8DD7ull
static gc_dropout_params rnn_dropout_params(const gc_plan *p, const plan_node *l, uint64_t seed, float rate,
                                            uint64_t salt)
{
    gc_dropout_params dp = {rate, salt ^ (0x9E37ull * (uint64_t)l->idx), NULL};
    if (p->device_mode) dp.dyn_seed = p->dyn_seed;
    else dp.seed ^= seed;
    return dp;
}

/* x (rows, T, in) times the pass's input dropout mask g (rows, in) at every step, into y */
static gc_status rnn_apply_dropout(gc_plan *p, const plan_node *l, int64_t rows, int g, void *x, void *y)
{
    const int64_t T = rnn_steps(l->d.in_shape), in = l->d.in_shape[1];
    gc_tensor tx = t3(x, l->dt, rows, T, in), ty = t3(y, l->dt, rows, T, in);
    gc_tensor m = gc_t2(at(l->priv[RNN_DPM], g * rows * in, GC_F32), GC_F32, rows, in);
    return gc_plan_run(p, GC_OP_MUL_BCAST, &(gc_no_params){0}, &tx, &m, NULL, &ty, NULL, NULL);
}

/* draws a pass's mask (n ones through dropout_fwd; rate 1 leaves the zeros it was made as) */
static gc_status rnn_draw(gc_plan *p, const plan_node *l, uint64_t seed, float rate, uint64_t salt, void *mask,
                          int64_t rows, int64_t cols)
{
    if (rate >= 1.0f) return GC_OK;
    gc_dropout_params dp = rnn_dropout_params(p, l, seed, rate, salt);
    gc_tensor ones = gc_t2(l->priv[RNN_ONES], GC_F32, rows, cols), m = gc_t2(mask, GC_F32, rows, cols);
    return gc_plan_run(p, GC_OP_DROPOUT_FWD, &dp, &ones, NULL, NULL, &m, NULL, NULL);
}

/* the pass's recurrent dropout mask for rnn_fwd / rnn_bwd, or none */
static gc_tensor rnn_rmask(const plan_node *l, run_mode mode, int64_t rows)
{
    if (mode != MODE_TRAIN || !rnn_rdrop_on(l)) return gc_none();
    return gc_t2(l->priv[RNN_RM], GC_F32, rows, rnn_gates_of(l) * rnn_units(&l->d));
}

/* column block g (width w) of a (rows, W) tensor into dst (rows, w) */
static gc_status rnn_cols(gc_plan *p, const gc_tensor *src, int64_t g, int64_t w, void *dst, gc_dtype dt)
{
    gc_slice_params sp = {g * w};
    gc_tensor d = gc_t2(dst, dt, src->shape[0], w);
    return gc_plan_run(p, GC_OP_SLICE_COLS, &sp, src, NULL, NULL, &d, NULL, NULL);
}

/* W_g (and b_g) of every gate into RNN_WG (G, in, u) / RNN_BG (G, u) */
static gc_status rnn_gate_weights(gc_plan *p, const plan_node *l)
{
    const gc_dtype dt = l->dt;
    const int64_t in = l->d.in_shape[1], u = rnn_units(&l->d), G = rnn_gates_of(l);
    gc_tensor w = gc_t2(gc_node_weight(l, GC_W_RNN_KERNEL), dt, in, G * u);
    for (int64_t g = 0; g < G; g++) TRY(rnn_cols(p, &w, g, u, at(l->priv[RNN_WG], g * in * u, dt), dt));
    if (!l->w[GC_W_RNN_BIAS].w) return GC_OK;
    gc_tensor b = gc_t2(gc_node_weight(l, GC_W_RNN_BIAS), dt, 1, G * u);
    for (int64_t g = 0; g < G; g++) TRY(rnn_cols(p, &b, g, u, at(l->priv[RNN_BG], g * u, dt), dt));
    return GC_OK;
}

/* per-gate input masks: xw = [ (x * m_g) . W_g + b_g ]_g, the G products joined */
static gc_status rnn_gate_projection(gc_plan *p, const plan_node *l, int64_t rows)
{
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), in = l->d.in_shape[1], u = rnn_units(&l->d), G = rnn_gates_of(l);
    const int64_t BT = rows * T;
    TRY(rnn_gate_weights(p, l));
    gc_gemm_params gp = {0, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_tensor parts[4];
    const gc_tensor *pp[4];
    for (int64_t g = 0; g < G; g++) {
        gc_tensor x = gc_t2(at(l->priv[RNN_XD], g * BT * in, dt), dt, BT, in);
        gc_tensor w = gc_t2(at(l->priv[RNN_WG], g * in * u, dt), dt, in, u);
        gc_tensor b = l->w[GC_W_RNN_BIAS].w ? gc_t1(at(l->priv[RNN_BG], g * u, dt), dt, u) : gc_none();
        parts[g] = gc_t2(at(l->priv[RNN_DZG], g * BT * u, dt), dt, BT, u);
        pp[g] = &parts[g];
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &x, &w, &b, &parts[g], NULL, NULL));
    }
    gc_tensor xw = gc_t2(l->priv[RNN_XW], dt, BT, G * u);
    gc_tensor *o[1] = {&xw};
    return gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, pp, (int)G, o, 1);
}

/* what the projection GEMMs read: x, or x with this pass's dropout mask */
static void *rnn_x(const gc_plan *p, const plan_node *l, run_mode mode)
{
    return mode == MODE_TRAIN && rnn_dropout_on(l) ? l->priv[RNN_XD] : gc_node_input(p, l, 0);
}

static gc_status rnn_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    if (gc_rnn_cudnn_active(l)) return gc_rnn_cudnn_forward(p, l, rows, mode, seed);
    gc_rnn_cudnn_note_own(p);
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), in = l->d.in_shape[1], u = rnn_units(&l->d);
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    const int gru = l->d.rnn_cell == GC_RNN_GRU;
    if (l->d.stateful_batch > 0 && rows != l->d.stateful_batch && !p->checking)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d is stateful with a batch size of %lld, but a batch of "
                       "%lld rows was given (every batch of a stateful layer must have that size)", l->idx,
                       (long long)l->d.stateful_batch, (long long)rows);
    const int Gi = rnn_in_masks(l);
    if (mode == MODE_TRAIN && rnn_dropout_on(l)) { /* Gi masks, the same at every step of this pass */
        TRY(rnn_draw(p, l, seed, l->d.dropout_rate, RNN_SALT_INPUT, l->priv[RNN_DPM], Gi * rows, in));
        for (int g = 0; g < Gi; g++)
            TRY(rnn_apply_dropout(p, l, rows, g, gc_node_input(p, l, 0), at(l->priv[RNN_XD], g * rows * T * in, dt)));
    }
    if (mode == MODE_TRAIN && rnn_rdrop_on(l))
        TRY(rnn_draw(p, l, seed, l->d.recurrent_dropout_rate, RNN_SALT_RECURRENT, l->priv[RNN_RM], rows, Gu));
    /* xw = x W + b_x for every step at once (per-gate input masks: one GEMM per gate) */
    void *bias = l->w[GC_W_RNN_BIAS].w ? gc_node_weight(l, GC_W_RNN_BIAS) : NULL;
    if (mode == MODE_TRAIN && Gi > 1) {
        TRY(rnn_gate_projection(p, l, rows));
    } else {
        gc_gemm_params gp = {0, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_tensor x = gc_t2(rnn_x(p, l, mode), dt, rows * T, in);
        gc_tensor w = gc_t2(gc_node_weight(l, GC_W_RNN_KERNEL), dt, in, Gu);
        gc_tensor b = bias ? gc_t1(bias, dt, Gu) : gc_none();
        gc_tensor xw = gc_t2(l->priv[RNN_XW], dt, rows * T, Gu);
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &x, &w, &b, &xw, NULL, NULL));
    }
    /* the recurrence */
    gc_rnn_params rp = rnn_params(l);
    gc_tensor xw3 = t3(l->priv[RNN_XW], dt, rows, T, Gu);
    gc_tensor U = gc_t2(gc_node_weight(l, GC_W_RNN_RECURRENT), dt, u, Gu);
    gc_tensor h0 = rnn_state0(p, l, 0, rows), c0 = rnn_state0(p, l, 1, rows), mask = rnn_mask(p, l, rows);
    gc_tensor bh = gru && bias ? gc_t1((char *)bias + (size_t)Gu * gc_dtype_size(dt), dt, Gu) : gc_none();
    const int64_t S = gc_rnn_save_blocks(rp.cell);
    int64_t sshape[4] = {S, rows, T, u};
    gc_tensor save = l->priv[RNN_SAVE] ? gc_tensor_make(l->priv[RNN_SAVE], dt, 4, sshape) : gc_none();
    gc_tensor y = rnn_y(l, l->d.return_state ? l->priv[RNN_Y] : l->out, rows);
    gc_tensor hT = gc_t2(l->priv[RNN_HT], dt, rows, u);
    gc_tensor cT = l->priv[RNN_CT] ? gc_t2(l->priv[RNN_CT], dt, rows, u) : gc_none();
    gc_tensor rm = rnn_rmask(l, mode, rows);
    const gc_tensor *ins[7] = {&xw3, &U, &h0, &c0, &mask, &bh, &rm};
    gc_tensor *outs[4] = {&y, &save, &hT, &cT};
    TRY(gc_plan_run_n(p, GC_OP_RNN_FWD, &rp, ins, 7, outs, 4));
    if (l->d.stateful_batch > 0) { /* the states the next batch starts from */
        TRY(gc_plan_cast(p, l->priv[RNN_HT], dt, l->w[GC_W_RNN_STATE_H].w, GC_F32, rows * u));
        if (rnn_lstm(l)) TRY(gc_plan_cast(p, l->priv[RNN_CT], dt, l->w[GC_W_RNN_STATE_C].w, GC_F32, rows * u));
    }
    if (!l->d.return_state) return GC_OK;
    gc_tensor y2 = gc_t2(l->priv[RNN_Y], dt, rows, rnn_ylen(l)), out = gc_t2(l->out, dt, rows, l->out_numel);
    const gc_tensor *parts[3] = {&y2, &hT, &cT};
    gc_tensor *o[1] = {&out};
    return gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, parts, rnn_lstm(l) ? 3 : 2, o, 1);
}

/* recurrent dropout: dU_g = (hprev * rm_g)^T . dz_g per gate block (reset_before's h
 * block: save[4]^T . dz_h), joined side by side */
static gc_status recurrent_grad_masked(gc_plan *p, plan_node *l, int64_t rows, const gc_tensor *dmz)
{
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), u = rnn_units(&l->d), BT = rows * T, G = rnn_gates_of(l);
    const int before = l->d.rnn_cell == GC_RNN_GRU_RESET_BEFORE;
    gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_tensor nob = gc_none(), rm = gc_t2(l->priv[RNN_RM], GC_F32, rows, G * u);
    gc_tensor rmg = gc_t2(l->priv[RNN_RMG], GC_F32, rows, u);
    gc_tensor hp3 = t3(l->priv[RNN_SAVE], dt, rows, T, u), hm3 = t3(l->priv[RNN_HMG], dt, rows, T, u);
    gc_tensor hm = gc_t2(l->priv[RNN_HMG], dt, BT, u), dzs = gc_t2(l->priv[RNN_DZS], dt, BT, u);
    gc_tensor rh = gc_t2(at(l->priv[RNN_SAVE], 4 * BT * u, dt), dt, BT, u);
    gc_tensor parts[4];
    const gc_tensor *pp[4];
    for (int64_t g = 0; g < G; g++) {
        parts[g] = gc_t2(at(l->priv[RNN_DUG], g * u * u, dt), dt, u, u);
        pp[g] = &parts[g];
        TRY(rnn_cols(p, dmz, g, u, l->priv[RNN_DZS], dt));
        if (before && g == 2) {
            TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &rh, &dzs, &nob, &parts[g], NULL, NULL));
            continue;
        }
        TRY(rnn_cols(p, &rm, g, u, l->priv[RNN_RMG], GC_F32));
        TRY(gc_plan_run(p, GC_OP_MUL_BCAST, &(gc_no_params){0}, &hp3, &rmg, NULL, &hm3, NULL, NULL));
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &hm, &dzs, &nob, &parts[g], NULL, NULL));
    }
    gc_tensor du = gc_t2(l->w[GC_W_RNN_RECURRENT].dw, dt, u, G * u);
    gc_tensor *o[1] = {&du};
    return gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, pp, (int)G, o, 1);
}

/* dU = hprev^T dm, hprev = save block 0. GRU reset_before multiplies U_h by r * hprev
 * (save block 4) instead, so its z, r columns and its h columns are two GEMMs over column
 * slices of dxw, joined side by side. */
static gc_status recurrent_grad(gc_plan *p, plan_node *l, int64_t rows, const gc_tensor *dmz)
{
    if (rnn_rdrop_on(l)) return recurrent_grad_masked(p, l, rows, dmz);
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

/* per-gate input masks, backward: dz's gate blocks into RNN_DZG (G, rows*T, u) */
static gc_status rnn_gate_dz(gc_plan *p, const plan_node *l, int64_t rows, const gc_tensor *dz)
{
    const int64_t BT = rows * rnn_steps(l->d.in_shape), u = rnn_units(&l->d), G = rnn_gates_of(l);
    for (int64_t g = 0; g < G; g++) TRY(rnn_cols(p, dz, g, u, at(l->priv[RNN_DZG], g * BT * u, l->dt), l->dt));
    return GC_OK;
}

/* dW_g = (x * m_g)^T . dz_g, joined side by side into dW (in, G*u) */
static gc_status rnn_gate_kernel_grad(gc_plan *p, plan_node *l, int64_t rows)
{
    const gc_dtype dt = l->dt;
    const int64_t BT = rows * rnn_steps(l->d.in_shape), in = l->d.in_shape[1], u = rnn_units(&l->d);
    const int64_t G = rnn_gates_of(l);
    gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_tensor nob = gc_none(), parts[4];
    const gc_tensor *pp[4];
    for (int64_t g = 0; g < G; g++) {
        gc_tensor x = gc_t2(at(l->priv[RNN_XD], g * BT * in, dt), dt, BT, in);
        gc_tensor dzg = gc_t2(at(l->priv[RNN_DZG], g * BT * u, dt), dt, BT, u);
        parts[g] = gc_t2(at(l->priv[RNN_DWG], g * in * u, dt), dt, in, u);
        pp[g] = &parts[g];
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &x, &dzg, &nob, &parts[g], NULL, NULL));
    }
    gc_tensor dw = gc_t2(l->w[GC_W_RNN_KERNEL].dw, dt, in, G * u);
    gc_tensor *o[1] = {&dw};
    return gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, pp, (int)G, o, 1);
}

/* dx = sum_g (dz_g . W_g^T) * m_g: the G products into RNN_XD (read by dW before), each
 * masked, then one add into the input gradient */
static gc_status rnn_gate_input_grad(gc_plan *p, plan_node *l, int64_t rows)
{
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), BT = rows * T, in = l->d.in_shape[1], u = rnn_units(&l->d);
    const int64_t G = rnn_gates_of(l);
    TRY(rnn_gate_weights(p, l));
    gc_gemm_params gp = {0, 1, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
    gc_tensor nob = gc_none(), parts[4];
    const gc_tensor *pp[4];
    for (int64_t g = 0; g < G; g++) {
        void *xg = at(l->priv[RNN_XD], g * BT * in, dt);
        gc_tensor dzg = gc_t2(at(l->priv[RNN_DZG], g * BT * u, dt), dt, BT, u);
        gc_tensor w = gc_t2(at(l->priv[RNN_WG], g * in * u, dt), dt, in, u);
        parts[g] = gc_t2(xg, dt, BT, in);
        pp[g] = &parts[g];
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &dzg, &w, &nob, &parts[g], NULL, NULL));
        TRY(rnn_apply_dropout(p, l, rows, (int)g, xg, xg));
    }
    gc_tensor gin = gc_node_gin_tensor(p, l, 0, rows);
    gc_tensor gx = gc_t2(gin.data, dt, BT, in);
    gc_act_params ap = {GC_ACT_LINEAR};
    gc_tensor *o[1] = {&gx};
    return gc_plan_run_n(p, GC_OP_ADD, &ap, pp, (int)G, o, 1);
}

static gc_status rnn_backward(gc_plan *p, plan_node *l, int64_t rows, uint64_t seed)
{
    (void)seed;
    if (gc_rnn_cudnn_active(l)) return gc_rnn_cudnn_backward(p, l, rows);
    const gc_dtype dt = l->dt;
    const int64_t T = rnn_steps(l->d.in_shape), in = l->d.in_shape[1], u = rnn_units(&l->d);
    const int64_t Gu = gc_rnn_gates((gc_rnn_cell)l->d.rnn_cell) * u;
    const int gru = l->d.rnn_cell == GC_RNN_GRU, lstm = rnn_lstm(l);
    gc_rnn_params rp = rnn_params(l);
    const int64_t S = gc_rnn_save_blocks(rp.cell);
    int64_t sshape[4] = {S, rows, T, u};
    gc_tensor save = gc_tensor_make(l->priv[RNN_SAVE], dt, 4, sshape);
    gc_tensor none = gc_none();
    gc_tensor dy = rnn_y(l, l->gout, rows), dhT = gc_none(), dcT = gc_none();
    if (l->d.return_state) { /* [dy | dh_T | dc_T] back apart */
        const int64_t yl = rnn_ylen(l);
        gc_tensor g = gc_t2(l->gout, dt, rows, l->out_numel);
        gc_tensor dy2 = gc_t2(l->priv[RNN_DY], dt, rows, yl);
        dhT = gc_t2(l->priv[RNN_DHT], dt, rows, u);
        gc_slice_params s0 = {0}, s1 = {yl}, s2 = {yl + u};
        TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s0, &g, NULL, NULL, &dy2, NULL, NULL));
        TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s1, &g, NULL, NULL, &dhT, NULL, NULL));
        if (lstm) {
            dcT = gc_t2(l->priv[RNN_DCT], dt, rows, u);
            TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s2, &g, NULL, NULL, &dcT, NULL, NULL));
        }
        dy = rnn_y(l, l->priv[RNN_DY], rows);
    }
    gc_tensor U = gc_t2(gc_node_weight(l, GC_W_RNN_RECURRENT), dt, u, Gu);
    gc_tensor mask = rnn_mask(p, l, rows);
    gc_tensor dxw = t3(l->priv[RNN_DXW], dt, rows, T, Gu);
    gc_tensor dm = gru ? t3(l->priv[RNN_DM], dt, rows, T, Gu) : gc_none();
    gc_tensor dh0 = l->priv[RNN_DH0] ? gc_t2(l->priv[RNN_DH0], dt, rows, u) : gc_none();
    gc_tensor dc0 = l->priv[RNN_DC0] ? gc_t2(l->priv[RNN_DC0], dt, rows, u) : gc_none();
    gc_tensor rm = rnn_rmask(l, MODE_TRAIN, rows);
    const gc_tensor *ins[7] = {&dy, &dhT, &dcT, &U, &save, &mask, &rm};
    gc_tensor *outs[4] = {&dxw, &dm, &dh0, &dc0};
    TRY(gc_plan_run_n(p, GC_OP_RNN_BWD, &rp, ins, 7, outs, 4));
    if (l->priv[RNN_DH0]) TRY(gc_node_pass_grad(p, l, 1, l->priv[RNN_DH0], rows));
    if (l->priv[RNN_DC0]) TRY(gc_node_pass_grad(p, l, 2, l->priv[RNN_DC0], rows));
    (void)none;

    gc_tensor nob = gc_none();
    gc_tensor dz = gc_t2(l->priv[RNN_DXW], dt, rows * T, Gu);           /* d(x W + b_x) */
    gc_tensor dmz = gc_t2(gru ? l->priv[RNN_DM] : l->priv[RNN_DXW], dt, rows * T, Gu); /* d(hprev U [+ b_h]) */
    const int Gi = rnn_in_masks(l);
    if (Gi > 1) TRY(rnn_gate_dz(p, l, rows, &dz));
    const int has_db = l->w[GC_W_RNN_BIAS].w && l->w[GC_W_RNN_BIAS].trains;
    if (Gi <= 1 && !gru && l->d.rnn_cell != GC_RNN_GRU_RESET_BEFORE && !rnn_rdrop_on(l) &&
        l->w[GC_W_RNN_KERNEL].trains && l->w[GC_W_RNN_RECURRENT].trains) {
        /* SimpleRNN, LSTM (dm == dxw): dW = x^T dz, dU = hprev^T dz and db = sum dz in one op
         * (x as the projection read it: with its dropout mask) */
        gc_tensor x = gc_t2(rnn_x(p, l, MODE_TRAIN), dt, rows * T, in);
        gc_tensor hprev = gc_t2(l->priv[RNN_SAVE], dt, rows * T, u);
        gc_tensor dw = gc_t2(l->w[GC_W_RNN_KERNEL].dw, dt, in, Gu);
        gc_tensor du = gc_t2(l->w[GC_W_RNN_RECURRENT].dw, dt, u, Gu);
        gc_tensor db = has_db ? gc_t1(l->w[GC_W_RNN_BIAS].dw, dt, Gu) : gc_none();
        const gc_tensor *wi[3] = {&x, &hprev, &dz};
        gc_tensor *wo[3] = {&dw, &du, &db};
        TRY(gc_plan_run_n(p, GC_OP_WEIGHT_GRADS, &(gc_no_params){0}, wi, 3, wo, 3));
    } else {
        if (l->w[GC_W_RNN_KERNEL].trains && Gi > 1) {
            TRY(rnn_gate_kernel_grad(p, l, rows));
        } else if (l->w[GC_W_RNN_KERNEL].trains) { /* dW = x^T dz (x as the GEMM read it: with its dropout mask) */
            gc_gemm_params gp = {1, 0, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
            gc_tensor x = gc_t2(rnn_x(p, l, MODE_TRAIN), dt, rows * T, in);
            gc_tensor dw = gc_t2(l->w[GC_W_RNN_KERNEL].dw, dt, in, Gu);
            TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &x, &dz, &nob, &dw, NULL, NULL));
        }
        if (l->w[GC_W_RNN_RECURRENT].trains) TRY(recurrent_grad(p, l, rows, &dmz));
        if (has_db) {
            gc_tensor db = gc_t1(l->w[GC_W_RNN_BIAS].dw, dt, Gu);
            TRY(gc_plan_run(p, GC_OP_BIAS_GRAD, &(gc_no_params){0}, &dz, NULL, NULL, &db, NULL, NULL));
            if (gru) {
                gc_tensor dbh = gc_t1((char *)l->w[GC_W_RNN_BIAS].dw + (size_t)Gu * gc_dtype_size(dt), dt, Gu);
                TRY(gc_plan_run(p, GC_OP_BIAS_GRAD, &(gc_no_params){0}, &dmz, NULL, NULL, &dbh, NULL, NULL));
            }
        }
    }
    if (l->in_grad[0] && Gi > 1) {
        TRY(rnn_gate_input_grad(p, l, rows));
        TRY(gc_node_deliver(p, l, 0, rows));
    } else if (l->in_grad[0]) { /* dx = dz W^T (times the dropout mask) */
        gc_gemm_params gp = {0, 1, 1.0f, 0.0f, GC_ACT_LINEAR, GC_IMPL_OWN};
        gc_tensor w = gc_t2(gc_node_weight(l, GC_W_RNN_KERNEL), dt, in, Gu);
        gc_tensor gin = gc_node_gin_tensor(p, l, 0, rows);
        gc_tensor gx = gc_t2(gin.data, dt, rows * T, in);
        TRY(gc_plan_run(p, GC_OP_GEMM, &gp, &dz, &w, &nob, &gx, NULL, NULL));
        if (rnn_dropout_on(l)) TRY(rnn_apply_dropout(p, l, rows, 0, gin.data, gin.data));
        TRY(gc_node_deliver(p, l, 0, rows));
    }
    return GC_OK;
}

const gc_layer_ops gc_layer_rnn = {"rnn", 1, 4, rnn_check, rnn_weights, rnn_forward, rnn_backward,
                                   0, 0, 0, rnn_setup, 0};
