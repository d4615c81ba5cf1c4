/* layer_rnn_cudnn.c -- an rnn node (SimpleRNN / LSTM / GRU) through cuDNN's RNN API: the
 * baseline gpucmp's recurrence kernels are measured against (use_cudnn=True, or
 * GPUCMP_FORCE=cuda.rnn.impl=cudnn for every layer of a plan built while it is forced).
 *
 * Why a layer-level path (gpucmp_rnn_cudnn.h): cuDNN computes the input projection
 * itself, so it runs x -> y and dy -> dx, dW, dU, db whole, where layer_rnn.c runs a GEMM
 * and rnn_fwd / rnn_bwd. The plan packs Keras' kernel, recurrent_kernel and bias into
 * cuDNN's weight space before every forward (a gather by an index map computed once at
 * setup from cuDNN's layout) and scatters the weight-space gradient into Keras' gradients
 * after the backward; the optimizer is the plan's, as for any layer.
 *
 * Keras' arguments as cuDNN sees them:
 * - masks: right padding only, each row's length read on the host from the (T,) mask
 *   input (a device -> host copy per pass; the plan takes no CUDA graphs then). The
 *   outputs at padded steps are 0 (cuDNN's padding fill, as Keras' own cuDNN kernels
 *   return them: zero_output_for_mask is implied); y (not sequences) and the states are
 *   those after each row's last step. Other patterns fail at run time, naming the row;
 * - go_backwards (no mask): x reversed in time (reverse_seq) before cuDNN, whose y is
 *   then in Keras' processing order; dx is reversed back;
 * - initial states (inputs) and return_state: cuDNN's hx / cx, hy / cy and their
 *   gradients; return_state's packed sample [y | h | c] as layer_rnn.c builds it;
 * - dropout (training): the input mask drawn as layer_rnn.c draws it (same seeds: the
 *   same mask), x * m into cuDNN, dx * m after;
 * - not cuDNN-compatible (gc_rnn_cudnn_incompatible): reset_after=False, activations other
 *   than tanh / sigmoid (SimpleRNN: tanh or relu), recurrent_dropout, stateful,
 *   go_backwards with a mask. */
#include "layer_rnn_cudnn.h"

#include "gpucmp_rnn_cudnn.h"
#include "gpucmp_variants.h"

#include <stdlib.h>

/* the node's priv buffers on this path (layer_rnn.c's own set is not allocated) */
enum { CD_W = 0, CD_DW, CD_RES, CD_MAP, CD_SEQ, CD_Y, CD_HT, CD_CT, CD_XR, CD_DX, CD_DXR, CD_DY, CD_DHY, CD_DHT,
       CD_DCT, CD_DYT, CD_DH0, CD_DC0, CD_ONES, CD_DPM, CD_XD, CD_COUNT };
_Static_assert(CD_COUNT <= GC_NODE_MAX_PRIV, "rnn cudnn: more priv buffers than a plan node holds");

/* the sizes setup learnt from cuDNN, in the node's aux values */
enum { AUX_W_BYTES = 0, AUX_RES_BYTES, AUX_WS_ELEMS, AUX_ACTIVE };

int gc_rnn_cudnn_active(const plan_node *l) { return l->aux[AUX_ACTIVE] == 1; }

static int64_t T_of(const plan_node *l) { return l->d.in_shape[0]; }
static int64_t in_of(const plan_node *l) { return l->d.in_shape[1]; }
static int lstm_of(const plan_node *l) { return l->d.rnn_cell == GC_RNN_LSTM; }

const char *gc_rnn_cudnn_incompatible(const gc_layer_desc *d)
{
    if (d->rnn_cell == GC_RNN_GRU_RESET_BEFORE) return "reset_after=False (cuDNN's GRU is reset_after=True)";
    if (d->rnn_cell == GC_RNN_SIMPLE) {
        if (d->rnn_act != GC_RNN_TANH && d->rnn_act != GC_RNN_RELU)
            return "activation other than tanh or relu (cuDNN's basic cells)";
    } else {
        if (d->rnn_act != GC_RNN_TANH) return "activation other than tanh";
        if (d->rnn_recurrent_act != GC_RNN_SIGMOID) return "recurrent_activation other than sigmoid";
    }
    if (d->recurrent_dropout_rate > 0.0f || d->rnn_gate_dropout) return "recurrent_dropout";
    if (d->stateful_batch > 0) return "stateful=True";
    if (d->go_backwards && d->rnn_mask_input) return "go_backwards=True with a mask (left padding)";
    return NULL;
}

int gc_rnn_cudnn_selected(const gc_plan *p, const plan_node *l)
{
    const int cuda = gc_rnn_cudnn_api_of(p->be) != NULL;
    const int forced = cuda && gc_variant_present(GC_VP_CUDA_RNN_IMPL) ? gc_variant_forced(GC_VP_CUDA_RNN_IMPL) : 0;
    if (forced == GC_V_RNNI_OWN) return 0;
    if (forced == GC_V_RNNI_CUDNN) return 1;
    return l->d.rnn_impl == 1;
}

void gc_rnn_cudnn_note_own(const gc_plan *p)
{
    if (!p->checking && gc_rnn_cudnn_api_of(p->be)) gc_variant_ran(GC_VP_CUDA_RNN_IMPL, GC_V_RNNI_OWN);
}

static gc_rnn_cudnn_layer layer_of(const plan_node *l)
{
    gc_rnn_cudnn_layer L;
    memset(&L, 0, sizeof L);
    L.cell = l->d.rnn_cell;
    L.act = l->d.rnn_act;
    L.bias = l->w[GC_W_RNN_BIAS].w != NULL;
    L.in = in_of(l);
    L.u = gc_rnn_node_units(&l->d);
    L.dt = l->dt;
    return L;
}

gc_status gc_rnn_cudnn_setup(gc_plan *p, plan_node *l)
{
    const char *bad = gc_rnn_cudnn_incompatible(&l->d);
    if (bad)
        return gc_fail(GC_ERR_INVALID_ARG, "plan: rnn node %d runs through cuDNN (use_cudnn=True or cuda.rnn.impl="
                       "cudnn), which has no %s; use use_cudnn='auto' / False", l->idx, bad);
    const gc_rnn_cudnn_api *api = gc_rnn_cudnn_api_of(p->be);
    if (!api)
        return gc_fail(GC_ERR_UNSUPPORTED, "plan: rnn node %d: use_cudnn=True needs a CUDA device, the plan runs on "
                       "'%s' (use use_cudnn='auto' / False there)", l->idx, p->be->name);
    const char *why = "";
    if (!api->available(&why))
        return gc_fail(GC_ERR_UNSUPPORTED, "plan: rnn node %d: use_cudnn=True needs libcudnn 9 with the RNN API, "
                       "not available here (%s)", l->idx, why);
    if (l->dt != GC_F32 && l->dt != GC_F16 && l->dt != GC_BF16)
        return gc_fail(GC_ERR_DTYPE, "plan: rnn node %d: cuDNN takes float32, float16 or bfloat16", l->idx);
    const int nw = 2 + (l->w[GC_W_RNN_BIAS].w != NULL);
    int ntrain = 0;
    for (int k = 0; k < nw; k++) ntrain += l->w[k].trains != 0;
    if (p->training && ntrain && ntrain != nw)
        return gc_fail(GC_ERR_UNSUPPORTED, "plan: rnn node %d: through cuDNN, the kernel, recurrent_kernel and bias "
                       "train together or not at all", l->idx);

    l->aux[AUX_ACTIVE] = 1;
    const gc_rnn_cudnn_layer L = layer_of(l);
    const gc_dtype dt = l->dt;
    const int64_t B = p->max_batch, T = T_of(l), in = in_of(l), u = L.u;
    const size_t esz = gc_dtype_size(dt);
    size_t w_bytes = 0, res_bytes = 0;
    TRY(api->weight_bytes(p->be, &L, &w_bytes));
    l->aux[AUX_W_BYTES] = (int64_t)w_bytes;
    TRY(gc_plan_alloc(p, (int64_t)((w_bytes + esz - 1) / esz), dt, &l->priv[CD_W]));
    gc_rnn_cudnn_layout lay;
    TRY(api->layout(p->be, &L, l->priv[CD_W], &lay));
    int32_t *map = malloc((size_t)lay.ws_elems * sizeof *map);
    if (!map) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory for the weight map");
    gc_status s = gc_rnn_cudnn_weight_map(&L, &lay, map);
    if (s == GC_OK) s = gc_plan_alloc(p, lay.ws_elems, GC_I32, &l->priv[CD_MAP]);
    if (s == GC_OK) s = p->be->upload(p->be, l->priv[CD_MAP], map, (size_t)lay.ws_elems * sizeof *map);
    free(map);
    TRY(s);
    l->aux[AUX_WS_ELEMS] = lay.ws_elems;
    /* every row full length until a mask says otherwise */
    TRY(gc_plan_alloc(p, B, GC_I32, &l->priv[CD_SEQ]));
    int32_t *lens = malloc((size_t)B * sizeof *lens);
    if (!lens) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    for (int64_t i = 0; i < B; i++) lens[i] = (int32_t)T;
    s = p->be->upload(p->be, l->priv[CD_SEQ], lens, (size_t)B * sizeof *lens);
    free(lens);
    TRY(s);
    if (l->d.rnn_mask_input) p->no_graphs = 1; /* the lengths are read on the host every pass */

    TRY(gc_plan_alloc(p, B * T * u, dt, &l->priv[CD_Y]));
    TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_HT]));
    if (lstm_of(l)) TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_CT]));
    if (l->d.go_backwards) TRY(gc_plan_alloc(p, B * T * in, dt, &l->priv[CD_XR]));
    if (!p->training) return GC_OK;
    TRY(gc_plan_alloc(p, (int64_t)((w_bytes + esz - 1) / esz), dt, &l->priv[CD_DW]));
    TRY(api->reserve_bytes(p->be, &L, B, T, &res_bytes));
    l->aux[AUX_RES_BYTES] = (int64_t)res_bytes;
    TRY(gc_plan_alloc(p, (int64_t)((res_bytes + esz - 1) / esz), dt, &l->priv[CD_RES]));
    TRY(gc_plan_alloc(p, B * T * in, dt, &l->priv[CD_DX]));
    if (l->d.go_backwards) TRY(gc_plan_alloc(p, B * T * in, dt, &l->priv[CD_DXR]));
    TRY(gc_plan_alloc(p, B * T * u, dt, &l->priv[CD_DY])); /* stays 0 where y is not an output */
    TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_DHY]));
    TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_DHT]));
    TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_DYT]));
    if (lstm_of(l)) TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_DCT]));
    if (l->d.rnn_state_inputs >= 1 && l->in_grad[1]) TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_DH0]));
    if (l->d.rnn_state_inputs >= 2 && l->in_grad[2]) TRY(gc_plan_alloc(p, B * u, dt, &l->priv[CD_DC0]));
    if (l->d.dropout_rate > 0.0f) {
        TRY(gc_plan_alloc(p, B * in, GC_F32, &l->priv[CD_ONES]));
        TRY(gc_plan_alloc(p, B * in, GC_F32, &l->priv[CD_DPM]));
        TRY(gc_plan_alloc(p, B * T * in, dt, &l->priv[CD_XD]));
        float *ones = malloc((size_t)(B * in) * sizeof *ones);
        if (!ones) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
        for (int64_t i = 0; i < B * in; i++) ones[i] = 1.0f;
        s = p->be->upload(p->be, l->priv[CD_ONES], ones, (size_t)(B * in) * sizeof *ones);
        free(ones);
        TRY(s);
    }
    return GC_OK;
}

/* ------------------------------------------------------------------ pieces */
static gc_tensor t3(void *data, gc_dtype dt, int64_t a, int64_t b, int64_t c)
{
    int64_t shape[3] = {a, b, c};
    return gc_tensor_make(data, dt, 3, shape);
}

/* the input dropout mask (rows, in), drawn exactly as layer_rnn.c draws it */
#define RNN_SALT_INPUT 0xD1B54A32D192ED03ull
static gc_status draw_dropout(gc_plan *p, const plan_node *l, int64_t rows, uint64_t seed)
{
    if (l->d.dropout_rate >= 1.0f) return GC_OK; /* rate 1: the zeros the mask was made as */
    gc_dropout_params dp = {l->d.dropout_rate, RNN_SALT_INPUT ^ (0x9E37ull * (uint64_t)l->idx), NULL};
    if (p->device_mode) dp.dyn_seed = p->dyn_seed;
    else dp.seed ^= seed;
    gc_tensor ones = gc_t2(l->priv[CD_ONES], GC_F32, rows, in_of(l));
    gc_tensor m = gc_t2(l->priv[CD_DPM], GC_F32, rows, in_of(l));
    return gc_plan_run(p, GC_OP_DROPOUT_FWD, &dp, &ones, NULL, NULL, &m, NULL, NULL);
}

/* x (rows, T, in) * the dropout mask at every step, into y (may alias x) */
static gc_status apply_dropout(gc_plan *p, const plan_node *l, int64_t rows, void *x, void *y)
{
    gc_tensor tx = t3(x, l->dt, rows, T_of(l), in_of(l)), ty = t3(y, l->dt, rows, T_of(l), in_of(l));
    gc_tensor m = gc_t2(l->priv[CD_DPM], GC_F32, rows, in_of(l));
    return gc_plan_run(p, GC_OP_MUL_BCAST, &(gc_no_params){0}, &tx, &m, NULL, &ty, NULL, NULL);
}

static gc_status reverse(gc_plan *p, const plan_node *l, int64_t rows, const void *x, void *y)
{
    gc_tensor tx = t3((void *)x, l->dt, rows, T_of(l), in_of(l)), ty = t3(y, l->dt, rows, T_of(l), in_of(l));
    return gc_plan_run(p, GC_OP_REVERSE_SEQ, &(gc_no_params){0}, &tx, NULL, NULL, &ty, NULL, NULL);
}

/* what cuDNN reads as x: the input, masked by dropout, reversed for go_backwards */
static void *cudnn_x(const gc_plan *p, const plan_node *l, run_mode mode)
{
    if (l->d.go_backwards) return l->priv[CD_XR];
    if (mode == MODE_TRAIN && l->d.dropout_rate > 0.0f) return l->priv[CD_XD];
    return gc_node_input(p, l, 0);
}

static const void *state_in(const gc_plan *p, const plan_node *l, int k)
{
    return l->d.rnn_state_inputs > k ? gc_node_input(p, l, 1 + k) : NULL;
}

/* the per-row lengths of this pass: host array (caller frees) and CD_SEQ */
static gc_status lengths(gc_plan *p, const plan_node *l, int64_t rows, int32_t **host, int *all_full)
{
    const gc_rnn_cudnn_api *api = gc_rnn_cudnn_api_of(p->be);
    *host = malloc((size_t)rows * sizeof **host);
    if (!*host) return gc_fail(GC_ERR_NOMEM, "plan: out of host memory");
    *all_full = 1;
    if (!l->d.rnn_mask_input) {
        for (int64_t i = 0; i < rows; i++) (*host)[i] = (int32_t)T_of(l);
        return GC_OK;
    }
    const float *mask = p->L[l->in[1 + l->d.rnn_state_inputs]].out;
    gc_status s = api->seq_lengths(p->be, mask, rows, T_of(l), *host, l->priv[CD_SEQ], all_full);
    if (s) {
        free(*host);
        *host = NULL;
    }
    return s;
}

static gc_rnn_cudnn_call call_of(const gc_plan *p, const plan_node *l, const gc_rnn_cudnn_layer *L, int64_t rows,
                                 run_mode mode, const int32_t *host, int all_full)
{
    gc_rnn_cudnn_call c;
    memset(&c, 0, sizeof c);
    c.L = L;
    c.rows = rows;
    c.T = T_of(l);
    c.training = mode == MODE_TRAIN && p->training;
    c.seq_host = host;
    c.seq_dev = l->priv[CD_SEQ];
    c.all_full = all_full;
    c.x = cudnn_x(p, l, mode);
    c.y = l->priv[CD_Y];
    c.hx = state_in(p, l, 0);
    c.cx = lstm_of(l) ? state_in(p, l, 1) : NULL;
    c.hy = l->priv[CD_HT];
    c.cy = l->priv[CD_CT];
    c.w = l->priv[CD_W];
    c.w_bytes = (size_t)l->aux[AUX_W_BYTES];
    c.reserve = l->priv[CD_RES];
    c.reserve_bytes = (size_t)l->aux[AUX_RES_BYTES];
    return c;
}

/* ------------------------------------------------------------------ forward */
gc_status gc_rnn_cudnn_forward(gc_plan *p, plan_node *l, int64_t rows, run_mode mode, uint64_t seed)
{
    const gc_dtype dt = l->dt;
    const int64_t T = T_of(l), u = gc_rnn_node_units(&l->d);
    const int seq = l->d.return_sequences;
    if (mode == MODE_TRAIN && l->d.dropout_rate > 0.0f) {
        TRY(draw_dropout(p, l, rows, seed));
        TRY(apply_dropout(p, l, rows, gc_node_input(p, l, 0), l->priv[CD_XD]));
    }
    if (l->d.go_backwards) {
        void *x = mode == MODE_TRAIN && l->d.dropout_rate > 0.0f ? l->priv[CD_XD] : gc_node_input(p, l, 0);
        TRY(reverse(p, l, rows, x, l->priv[CD_XR]));
    }
    if (!p->checking) { /* cuDNN itself: not an op core validates */
        const gc_rnn_cudnn_api *api = gc_rnn_cudnn_api_of(p->be);
        const gc_rnn_cudnn_layer L = layer_of(l);
        const int64_t nk = L.in * gc_rnn_cudnn_gates(L.cell) * u, nr = u * gc_rnn_cudnn_gates(L.cell) * u;
        TRY(api->pack(p->be, dt, l->priv[CD_MAP], l->aux[AUX_WS_ELEMS], gc_node_weight(l, GC_W_RNN_KERNEL),
                      gc_node_weight(l, GC_W_RNN_RECURRENT), L.bias ? gc_node_weight(l, GC_W_RNN_BIAS) : NULL, nk, nr,
                      l->priv[CD_W]));
        int32_t *host = NULL;
        int full = 1;
        TRY(lengths(p, l, rows, &host, &full));
        gc_rnn_cudnn_call c = call_of(p, l, &L, rows, mode, host, full);
        gc_status s = api->forward(p->be, &c);
        free(host);
        TRY(s);
        gc_variant_ran(GC_VP_CUDA_RNN_IMPL, GC_V_RNNI_CUDNN);
    }
    /* the node's output: y or h_T, or [y | h_T | c_T] side by side */
    const int64_t ylen = seq ? T * u : u;
    void *ysrc = seq ? l->priv[CD_Y] : l->priv[CD_HT];
    if (!l->d.return_state) return gc_plan_copy(p, l->out, ysrc, (size_t)(rows * ylen) * gc_dtype_size(dt));
    gc_tensor y2 = gc_t2(ysrc, dt, rows, ylen), hT = gc_t2(l->priv[CD_HT], dt, rows, u);
    gc_tensor cT = lstm_of(l) ? gc_t2(l->priv[CD_CT], dt, rows, u) : gc_none();
    gc_tensor out = gc_t2(l->out, dt, rows, l->out_numel);
    const gc_tensor *parts[3] = {&y2, &hT, &cT};
    gc_tensor *o[1] = {&out};
    return gc_plan_run_n(p, GC_OP_CONCAT, &(gc_no_params){0}, parts, lstm_of(l) ? 3 : 2, o, 1);
}

/* ------------------------------------------------------------------ backward */
gc_status gc_rnn_cudnn_backward(gc_plan *p, plan_node *l, int64_t rows)
{
    const gc_dtype dt = l->dt;
    const int64_t T = T_of(l), in = in_of(l), u = gc_rnn_node_units(&l->d);
    const int seq = l->d.return_sequences, lstm = lstm_of(l);
    const int64_t ylen = seq ? T * u : u;
    /* dy (rows, T, u) for cuDNN, dhy / dcy: the gradients of y, h_T, c_T */
    const void *dy = l->priv[CD_DY], *dhy = NULL, *dcy = NULL;
    if (!l->d.return_state) {
        if (seq) dy = l->gout;
        else dhy = l->gout; /* y is h_T */
    } else {
        gc_tensor g = gc_t2(l->gout, dt, rows, l->out_numel);
        gc_slice_params s0 = {0}, s1 = {ylen}, s2 = {ylen + u};
        gc_tensor dht = gc_t2(l->priv[CD_DHT], dt, rows, u);
        TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s1, &g, NULL, NULL, &dht, NULL, NULL));
        if (seq) {
            gc_tensor dys = gc_t2(l->priv[CD_DY], dt, rows, ylen);
            TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s0, &g, NULL, NULL, &dys, NULL, NULL));
            dhy = l->priv[CD_DHT];
        } else { /* y is h_T: both gradients reach h_T */
            gc_tensor dyt = gc_t2(l->priv[CD_DYT], dt, rows, u), dh = gc_t2(l->priv[CD_DHY], dt, rows, u);
            gc_act_params ap = {GC_ACT_LINEAR};
            TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s0, &g, NULL, NULL, &dyt, NULL, NULL));
            TRY(gc_plan_run(p, GC_OP_ADD, &ap, &dyt, &dht, NULL, &dh, NULL, NULL));
            dhy = l->priv[CD_DHY];
        }
        if (lstm) {
            gc_tensor dct = gc_t2(l->priv[CD_DCT], dt, rows, u);
            TRY(gc_plan_run(p, GC_OP_SLICE_COLS, &s2, &g, NULL, NULL, &dct, NULL, NULL));
            dcy = l->priv[CD_DCT];
        }
    }
    /* dx: straight into the input's gradient where nothing follows, else a buffer */
    const int direct = l->in_grad[0] && !l->d.go_backwards;
    gc_tensor gin = l->in_grad[0] ? gc_node_gin_tensor(p, l, 0, rows) : gc_none();
    void *dx = direct ? gin.data : (l->d.go_backwards ? l->priv[CD_DXR] : l->priv[CD_DX]);
    if (!p->checking) {
        const gc_rnn_cudnn_api *api = gc_rnn_cudnn_api_of(p->be);
        const gc_rnn_cudnn_layer L = layer_of(l);
        int32_t *host = NULL;
        int full = 1;
        TRY(lengths(p, l, rows, &host, &full));
        gc_rnn_cudnn_call c = call_of(p, l, &L, rows, MODE_TRAIN, host, full);
        c.dy = dy;
        c.dhy = dhy;
        c.dcy = dcy;
        c.dx = dx;
        c.dhx = l->priv[CD_DH0];
        c.dcx = l->priv[CD_DC0];
        c.dw = l->priv[CD_DW];
        gc_status s = api->backward(p->be, &c);
        free(host);
        TRY(s);
        if (l->trains) {
            const int64_t G = gc_rnn_cudnn_gates(L.cell), nk = in * G * u, nr = u * G * u;
            TRY(api->unpack(p->be, dt, l->priv[CD_MAP], l->aux[AUX_WS_ELEMS], l->priv[CD_DW],
                            l->w[GC_W_RNN_KERNEL].dw, l->w[GC_W_RNN_RECURRENT].dw,
                            L.bias ? l->w[GC_W_RNN_BIAS].dw : NULL, nk, nr));
        }
    }
    if (l->priv[CD_DH0]) TRY(gc_node_pass_grad(p, l, 1, l->priv[CD_DH0], rows));
    if (l->priv[CD_DC0]) TRY(gc_node_pass_grad(p, l, 2, l->priv[CD_DC0], rows));
    if (!l->in_grad[0]) return GC_OK;
    if (l->d.go_backwards) TRY(reverse(p, l, rows, l->priv[CD_DXR], gin.data));
    if (l->d.dropout_rate > 0.0f) TRY(apply_dropout(p, l, rows, gin.data, gin.data));
    return gc_node_deliver(p, l, 0, rows);
}
