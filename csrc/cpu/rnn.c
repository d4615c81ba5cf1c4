/* rnn.c -- the recurrence of SimpleRNN / LSTM / GRU on the CPU: rnn_fwd and rnn_bwd
 * (gpucmp.h has the interface, the save layout and the masking rules).
 *
 * The cells and calls rnn_fast.c covers (SimpleRNN, LSTM, GRU reset_after, no rmask) go
 * to its fused kernels unless cpu.rnn.simd is forced to "stepwise"; this file is the
 * stepwise path, for the rest (reset_before, recurrent dropout) and as the reference.
 *
 * Only the sequential part: the plan has already computed xw = x.W + b for all steps and
 * does the weight-gradient GEMMs after the backward. Per step there is one small GEMM of
 * the states with the recurrent kernel (the backend's own gc_cpu_sgemm: h.U forward,
 * dz.U^T backward; GRU with reset_before has two, since its h block multiplies r*h) and
 * one fused pass of gate math over the batch rows (OpenMP over rows when the step is big
 * enough to pay for it). Everything is float32 (core widens f16/bf16 storage at the
 * edges), with expf / tanhf; the states are carried in float32 scratch across steps, and
 * masking follows Keras' generic path: every row is computed, then `where(mask, new, old)`.
 * With a recurrent dropout mask (rmask, one (B, u) block per gate) the recurrent GEMM is one
 * per gate on hm = h * rmask (B, G*u), and backward one per gate of dz_g . U_g^T, each
 * times its mask block before they are summed into dhprev.
 */
#include "cpu_kernels.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gpucmp_rnn_act.h"
#include "gpucmp_variants.h"
#include "rnn_fast.h"

#define RNN_PAR_MIN 16384 /* elements of one step's gate pass worth spreading over threads */

/* C (M x N, ldc) = beta * C + A (M x K, lda) . op(B); op(B) = B (K x N, ldb) or, when
 * trans_b, B^T with B stored N x K */
static gc_status mm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda, const float *B, int64_t ldb,
                    int trans_b, float beta, float *C, int64_t ldc)
{
    gc_sgemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_b = trans_b;
    g.M = M, g.N = N, g.K = K;
    g.alpha = 1.0f, g.beta = beta;
    g.A = A, g.lda = lda, g.B = B, g.ldb = ldb, g.C = C, g.ldc = ldc;
    g.act = GC_ACT_LINEAR;
    return gc_cpu_sgemm(&g);
}

static inline int used(const float *mask, int64_t T, int64_t b, int64_t t) { return !mask || mask[b * T + t] != 0.0f; }

/* ------------------------------------------------------------------ forward */

typedef gc_rnn_fwd_job rnn_fwd_args;

static gc_status rnn_forward(const rnn_fwd_args *a)
{
    const gc_rnn_params *p = a->p;
    const int64_t B = a->B, T = a->T, u = a->u;
    const int G = gc_rnn_gates(p->cell), S = gc_rnn_save_blocks(p->cell);
    const int64_t Gu = G * u, blk = B * T * u;
    const gc_rnn_act act = p->act, ract = p->recurrent_act;
    const int lstm = p->cell == GC_RNN_LSTM, before = p->cell == GC_RNN_GRU_RESET_BEFORE;
    const float *rm = a->rmask;
    /* scratch: h, c, e (the emitted output), m = h.U (B, Gu), rh (B, u); one save step;
     * with rmask hm = h * rmask (B, Gu) */
    size_t n = (size_t)(4 * B * u + (rm ? 2 : 1) * B * Gu) + (size_t)S * (size_t)(B * u);
    float *buf = (float *)malloc(n * sizeof(float));
    if (!buf) return gc_fail(GC_ERR_NOMEM, "rnn_fwd: no host memory for %zu floats of scratch", n);
    float *h = buf, *c = h + B * u, *e = c + B * u, *rh = e + B * u, *m = rh + B * u, *sv = m + B * Gu;
    float *hm = sv + (size_t)S * (size_t)(B * u); /* used only with rmask */
    for (int64_t i = 0; i < B * u; i++) {
        h[i] = a->h0 ? a->h0[i] : 0.0f;
        c[i] = a->c0 ? a->c0[i] : 0.0f;
        e[i] = 0.0f;
    }
    gc_status st = GC_OK;
    const int par = B > 1 && B * Gu >= RNN_PAR_MIN;
    for (int64_t k = 0; k < T && st == GC_OK; k++) {
        const int64_t t = p->go_backwards ? T - 1 - k : k;
        /* the recurrent GEMM: m = h.U (reset_before: only the z, r blocks for now); with
         * rmask one per gate block, m_g = (h * rmask_g) . U_g */
        if (!rm) {
            st = mm(B, before ? 2 * u : Gu, u, h, u, a->U, Gu, 0, 0.0f, m, Gu);
        } else {
            for (int64_t b = 0; b < B; b++)
                for (int64_t q = 0; q < Gu; q++) hm[b * Gu + q] = h[b * u + q % u] * rm[b * Gu + q];
            for (int g = 0; g < (before ? 2 : G) && st == GC_OK; g++)
                st = mm(B, u, u, hm + g * u, Gu, a->U + g * u, Gu, 0, 0.0f, m + g * u, Gu);
        }
        if (st) break;
        if (before) { /* rh = r * h (the masked copy of h with rmask) */
            for (int64_t b = 0; b < B; b++) {
                const float *x = a->xw + (b * T + t) * Gu, *mr = m + b * Gu + u;
                const float *hb = rm ? hm + b * Gu + 2 * u : h + b * u;
                for (int64_t j = 0; j < u; j++) rh[b * u + j] = gc_rnn_act_apply(ract, x[u + j] + mr[j]) * hb[j];
            }
            st = mm(B, u, u, rh, u, a->U + 2 * u, Gu, 0, 0.0f, m + 2 * u, Gu);
            if (st) break;
        }
#pragma omp parallel for schedule(static) if (par)
        for (int64_t b = 0; b < B; b++) {
            const float *x = a->xw + (b * T + t) * Gu, *mb = m + b * Gu;
            float *hb = h + b * u, *cb = c + b * u, *eb = e + b * u;
            /* this step's save values, one row of each block, before the state update */
            float *s[7];
            for (int q = 0; q < S; q++) s[q] = sv + (q * B + b) * u;
            const int valid = used(a->mask, T, b, t);
            for (int64_t j = 0; j < u; j++) {
                const float hp = hb[j];
                float hn, cn = 0.0f;
                s[0][j] = hp;
                switch (p->cell) {
                case GC_RNN_SIMPLE:
                    hn = gc_rnn_act_apply(act, x[j] + mb[j]);
                    s[1][j] = hn;
                    break;
                case GC_RNN_LSTM: {
                    const float cp = cb[j];
                    const float i = gc_rnn_act_apply(ract, x[j] + mb[j]), f = gc_rnn_act_apply(ract, x[u + j] + mb[u + j]);
                    const float g = gc_rnn_act_apply(act, x[2 * u + j] + mb[2 * u + j]);
                    const float o = gc_rnn_act_apply(ract, x[3 * u + j] + mb[3 * u + j]);
                    cn = f * cp + i * g;
                    hn = o * gc_rnn_act_apply(act, cn);
                    s[1][j] = cp, s[2][j] = i, s[3][j] = f, s[4][j] = g, s[5][j] = o, s[6][j] = cn;
                    break;
                }
                case GC_RNN_GRU: {
                    const float *bh = a->bh;
                    const float mz = mb[j] + (bh ? bh[j] : 0.0f), mr = mb[u + j] + (bh ? bh[u + j] : 0.0f);
                    const float mh = mb[2 * u + j] + (bh ? bh[2 * u + j] : 0.0f);
                    const float z = gc_rnn_act_apply(ract, x[j] + mz), r = gc_rnn_act_apply(ract, x[u + j] + mr);
                    const float hh = gc_rnn_act_apply(act, x[2 * u + j] + r * mh);
                    hn = z * hp + (1.0f - z) * hh;
                    s[1][j] = z, s[2][j] = r, s[3][j] = hh, s[4][j] = mh;
                    break;
                }
                default: { /* GC_RNN_GRU_RESET_BEFORE */
                    const float z = gc_rnn_act_apply(ract, x[j] + mb[j]), r = gc_rnn_act_apply(ract, x[u + j] + mb[u + j]);
                    const float hh = gc_rnn_act_apply(act, x[2 * u + j] + mb[2 * u + j]);
                    hn = z * hp + (1.0f - z) * hh;
                    s[1][j] = z, s[2][j] = r, s[3][j] = hh, s[4][j] = rh[b * u + j];
                    break;
                }
                }
                if (valid) {
                    hb[j] = hn;
                    if (lstm) cb[j] = cn;
                    eb[j] = hn;
                } else if (p->zero_output_for_mask) {
                    eb[j] = 0.0f;
                }
            }
            if (p->sequences) memcpy(a->y + (b * T + k) * u, eb, (size_t)u * sizeof(float));
            if (a->save)
                for (int q = 0; q < S; q++) memcpy(a->save + q * blk + (b * T + t) * u, s[q], (size_t)u * sizeof(float));
        }
    }
    if (st == GC_OK) {
        if (!p->sequences) memcpy(a->y, e, (size_t)(B * u) * sizeof(float));
        if (a->hT) memcpy(a->hT, h, (size_t)(B * u) * sizeof(float));
        if (a->cT) memcpy(a->cT, c, (size_t)(B * u) * sizeof(float));
    }
    free(buf);
    return st;
}

/* ------------------------------------------------------------------ backward */

typedef gc_rnn_bwd_job rnn_bwd_args;

static gc_status rnn_backward(const rnn_bwd_args *a)
{
    const gc_rnn_params *p = a->p;
    const int64_t B = a->B, T = a->T, u = a->u;
    const int G = gc_rnn_gates(p->cell);
    const int64_t Gu = G * u, blk = B * T * u;
    const gc_rnn_act act = p->act, ract = p->recurrent_act;
    const int before = p->cell == GC_RNN_GRU_RESET_BEFORE, after = p->cell == GC_RNN_GRU;
    /* scratch: dh, dc, de, g (the gradient reaching the cell output), dd (the direct
     * part of dhprev), drh (reset_before), dz (B, Gu): what the GEMM with U^T reads;
     * with rmask dr (B, Gu): dz_g . U_g^T per gate block */
    const float *rm = a->rmask;
    size_t n = (size_t)(6 * B * u + (rm ? 2 : 1) * B * Gu);
    float *buf = (float *)malloc(n * sizeof(float));
    if (!buf) return gc_fail(GC_ERR_NOMEM, "rnn_bwd: no host memory for %zu floats of scratch", n);
    float *dh = buf, *dc = dh + B * u, *de = dc + B * u, *gb = de + B * u, *dd = gb + B * u, *drh = dd + B * u;
    float *dz = drh + B * u, *dr = dz + B * Gu; /* dr: only with rmask */
    for (int64_t i = 0; i < B * u; i++) {
        dh[i] = a->dhT ? a->dhT[i] : 0.0f;
        dc[i] = a->dcT ? a->dcT[i] : 0.0f;
        de[i] = (!p->sequences && a->dy) ? a->dy[i] : 0.0f;
    }
    gc_status st = GC_OK;
    const int par = B > 1 && B * Gu >= RNN_PAR_MIN;
    const float *sv = a->save;
    for (int64_t k = T - 1; k >= 0 && st == GC_OK; k--) {
        const int64_t t = p->go_backwards ? T - 1 - k : k;
        /* phase 1: the gradient reaching the cell output, the gate gradients that need no
         * GEMM (all but reset_before's z, r blocks) */
#pragma omp parallel for schedule(static) if (par)
        for (int64_t b = 0; b < B; b++) {
            const int64_t o = (b * T + t) * u;
            const int valid = used(a->mask, T, b, t);
            float *dhb = dh + b * u, *dcb = dc + b * u, *deb = de + b * u, *g = gb + b * u, *ddb = dd + b * u;
            float *dzb = dz + b * Gu, *dx = a->dxw + (b * T + t) * Gu;
            float *dmb = a->dm ? a->dm + (b * T + t) * Gu : NULL;
            if (p->sequences && a->dy)
                for (int64_t j = 0; j < u; j++) deb[j] += a->dy[(b * T + k) * u + j];
            if (!valid) { /* the where(): states and emitted output pass through */
                for (int64_t j = 0; j < u; j++) ddb[j] = dhb[j];
                if (p->zero_output_for_mask)
                    for (int64_t j = 0; j < u; j++) deb[j] = 0.0f;
                memset(dzb, 0, (size_t)Gu * sizeof(float));
                memset(dx, 0, (size_t)Gu * sizeof(float));
                if (dmb) memset(dmb, 0, (size_t)Gu * sizeof(float));
                continue;
            }
            for (int64_t j = 0; j < u; j++) {
                g[j] = dhb[j] + deb[j];
                deb[j] = 0.0f;
            }
            const float *hp = sv + o;
            switch (p->cell) {
            case GC_RNN_SIMPLE:
                for (int64_t j = 0; j < u; j++) {
                    dzb[j] = g[j] * gc_rnn_act_dout(act, sv[blk + o + j]);
                    ddb[j] = 0.0f;
                }
                break;
            case GC_RNN_LSTM: {
                const float *cp = sv + blk + o, *ig = sv + 2 * blk + o, *fg = sv + 3 * blk + o;
                const float *gg = sv + 4 * blk + o, *og = sv + 5 * blk + o, *cn = sv + 6 * blk + o;
                for (int64_t j = 0; j < u; j++) {
                    const float ac = gc_rnn_act_apply(act, cn[j]);
                    /* act'(c) from act(c): every act_f is a function of its output here */
                    const float dcn = dcb[j] + g[j] * og[j] * gc_rnn_act_dout(act, ac);
                    dzb[j] = dcn * gg[j] * gc_rnn_act_dout(ract, ig[j]);
                    dzb[u + j] = dcn * cp[j] * gc_rnn_act_dout(ract, fg[j]);
                    dzb[2 * u + j] = dcn * ig[j] * gc_rnn_act_dout(act, gg[j]);
                    dzb[3 * u + j] = g[j] * ac * gc_rnn_act_dout(ract, og[j]);
                    dcb[j] = dcn * fg[j];
                    ddb[j] = 0.0f;
                }
                break;
            }
            default: { /* GRU, both variants */
                const float *zg = sv + blk + o, *rg = sv + 2 * blk + o, *hh = sv + 3 * blk + o, *s4 = sv + 4 * blk + o;
                for (int64_t j = 0; j < u; j++) {
                    const float da = g[j] * (1.0f - zg[j]) * gc_rnn_act_dout(act, hh[j]);
                    dzb[j] = g[j] * (hp[j] - hh[j]) * gc_rnn_act_dout(ract, zg[j]);
                    ddb[j] = g[j] * zg[j];
                    if (after) {
                        /* hh = act(x_h + r * m_h): d x_h = da, d m_h = da * r, d r = da * m_h */
                        dzb[u + j] = da * s4[j] * gc_rnn_act_dout(ract, rg[j]);
                        dzb[2 * u + j] = da * rg[j];
                        dx[2 * u + j] = da;
                    } else {
                        dzb[2 * u + j] = da; /* r is finished after the GEMM below */
                    }
                }
                break;
            }
            }
            if (after) {
                for (int64_t j = 0; j < 2 * u; j++) dx[j] = dzb[j];
                if (dmb) memcpy(dmb, dzb, (size_t)Gu * sizeof(float));
            } else if (!before) {
                memcpy(dx, dzb, (size_t)Gu * sizeof(float));
            }
        }
        if (before) {
            /* d(r*h) = da . U_h^T, then the z, r gates */
            st = mm(B, u, u, dz + 2 * u, Gu, a->U + 2 * u, Gu, 1, 0.0f, drh, u);
            if (st) break;
#pragma omp parallel for schedule(static) if (par)
            for (int64_t b = 0; b < B; b++) {
                if (!used(a->mask, T, b, t)) continue;
                const int64_t o = (b * T + t) * u;
                const float *hp = sv + o, *rg = sv + 2 * blk + o;
                float *dzb = dz + b * Gu, *dx = a->dxw + (b * T + t) * Gu, *ddb = dd + b * u;
                const float *d = drh + b * u, *mh = rm ? rm + b * Gu + 2 * u : NULL;
                for (int64_t j = 0; j < u; j++) { /* rh = r * (h * mh) */
                    const float k = mh ? mh[j] : 1.0f;
                    dzb[u + j] = d[j] * hp[j] * k * gc_rnn_act_dout(ract, rg[j]);
                    ddb[j] += d[j] * rg[j] * k;
                }
                memcpy(dx, dzb, (size_t)Gu * sizeof(float));
            }
        }
        /* dh = dd + dz . U^T (masked rows: dz = 0, dd = dh); reset_before: the z, r blocks;
         * with rmask dh = dd + sum_g (dz_g . U_g^T) * rmask_g */
        for (int64_t i = 0; i < B * u; i++) dh[i] = dd[i];
        if (!rm) {
            st = mm(B, u, before ? 2 * u : Gu, dz, Gu, a->U, Gu, 1, 1.0f, dh, u);
        } else {
            const int ng = before ? 2 : G;
            for (int g = 0; g < ng && st == GC_OK; g++)
                st = mm(B, u, u, dz + g * u, Gu, a->U + g * u, Gu, 1, 0.0f, dr + g * u, Gu);
            for (int64_t b = 0; b < B && st == GC_OK; b++)
                for (int g = 0; g < ng; g++)
                    for (int64_t j = 0; j < u; j++)
                        dh[b * u + j] += dr[b * Gu + g * u + j] * rm[b * Gu + g * u + j];
        }
    }
    if (st == GC_OK) {
        if (a->dh0) memcpy(a->dh0, dh, (size_t)(B * u) * sizeof(float));
        if (a->dc0) memcpy(a->dc0, dc, (size_t)(B * u) * sizeof(float));
    }
    free(buf);
    return st;
}

/* ------------------------------------------------------------------ adapters */

static const float *in_or_null(const gc_tensor *t) { return t && t->data ? (const float *)t->data : NULL; }
static float *out_or_null(gc_tensor *t) { return t && t->data ? (float *)t->data : NULL; }

gc_status gc_cpu_op_rnn_fwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *xw = call->in[0], *U = call->in[1];
    rnn_fwd_args a = {call->params, xw->shape[0], xw->shape[1], U->shape[0],
                      xw->data, U->data, in_or_null(call->in[2]), in_or_null(call->in[3]),
                      in_or_null(call->in[4]), in_or_null(call->in[5]), in_or_null(call->in[6]),
                      call->out[0]->data, out_or_null(call->out[1]), out_or_null(call->out[2]),
                      out_or_null(call->out[3])};
    const int v = gc_cpu_rnn_variant();
    if (v != GC_V_CRNN_STEPWISE && gc_cpu_rnn_fast_covers(a.p, a.rmask)) {
        gc_variant_ran(GC_VP_CPU_RNN_SIMD, v);
        return gc_cpu_rnn_fast_fwd(v, &a);
    }
    gc_variant_ran(GC_VP_CPU_RNN_SIMD, GC_V_CRNN_STEPWISE);
    return rnn_forward(&a);
}

gc_status gc_cpu_op_rnn_bwd(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *save = call->in[4];
    rnn_bwd_args a = {call->params, save->shape[1], save->shape[2], save->shape[3],
                      in_or_null(call->in[0]), in_or_null(call->in[1]), in_or_null(call->in[2]),
                      call->in[3]->data, save->data, in_or_null(call->in[5]), in_or_null(call->in[6]),
                      call->out[0]->data, out_or_null(call->out[1]), out_or_null(call->out[2]),
                      out_or_null(call->out[3])};
    const int v = gc_cpu_rnn_variant();
    if (v != GC_V_CRNN_STEPWISE && gc_cpu_rnn_fast_covers(a.p, a.rmask)) {
        gc_variant_ran(GC_VP_CPU_RNN_SIMD, v);
        return gc_cpu_rnn_fast_bwd(v, &a);
    }
    gc_variant_ran(GC_VP_CPU_RNN_SIMD, GC_V_CRNN_STEPWISE);
    return rnn_backward(&a);
}
