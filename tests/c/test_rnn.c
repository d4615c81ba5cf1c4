/* test_rnn.c -- standalone test of the CPU recurrent ops (csrc/cpu/rnn.c: rnn_fwd,
 * rnn_bwd) below the Python boundary, small enough for ASan / UBSan and valgrind.
 *
 * What it checks, for every cell (simple, lstm, gru, gru_reset_before) with masks
 * (left / middle padding, a fully masked row), go_backwards, sequences and
 * zero_output_for_mask, through core validation and the op adapters:
 * - every output element is written (outputs NaN-poisoned first) and finite;
 * - the same bits at 1 and 3 threads (also on a size that takes the threaded gate pass);
 * - the backward against a directional central difference of the forward's loss
 *   <dy, y> + <dh_T, h_T> + <dc_T, c_T> (double sums of the float32 outputs);
 * - validation: a wrong xw width, c0 for a non-LSTM cell and T == 0 are rejected with
 *   GC_ERR_INVALID_ARG and a message naming the argument.
 * The Python tests (tests/test_rnn_ops.py) compare with the float64 oracle; this one is
 * about memory safety and the C interface. Usage: test_rnn [--small]; exit 0 on success.
 */
#include "cpu_kernels.h"
#include "gpucmp_variants.h"
#include "harness.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static float *arr(int64_t n, double scale)
{
    float *p = (float *)malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!p) exit(2);
    for (int64_t i = 0; i < n; i++) p[i] = (float)((2.0 * urand() - 1.0) * scale);
    return p;
}

static float *nans(int64_t n)
{
    float *p = (float *)malloc((size_t)(n ? n : 1) * sizeof(float));
    if (!p) exit(2);
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static int all_finite(const float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(p[i])) return 0;
    return 1;
}

typedef struct {
    gc_rnn_params p;
    int64_t B, T, u;
    float *xw, *U, *h0, *c0, *mask, *bh, *dy, *dhT, *dcT;
} problem;

typedef struct {
    float *y, *save, *hT, *cT, *dxw, *dm, *dh0, *dc0;
} results;

static int64_t ny(const problem *q) { return q->p.sequences ? q->B * q->T * q->u : q->B * q->u; }

static gc_status run_fwd(const problem *q, const float *xw, results *r)
{
    const int G = gc_rnn_gates(q->p.cell), S = gc_rnn_save_blocks(q->p.cell), lstm = q->p.cell == GC_RNN_LSTM;
    const int64_t sx[3] = {q->B, q->T, G * q->u}, sU[2] = {q->u, G * q->u}, sBu[2] = {q->B, q->u};
    const int64_t sm[2] = {q->B, q->T}, sb[1] = {G * q->u}, sy[3] = {q->B, q->T, q->u};
    const int64_t ss[4] = {S, q->B, q->T, q->u};
    gc_tensor txw = gc_tensor_make((void *)xw, GC_F32, 3, sx), tU = gc_tensor_make(q->U, GC_F32, 2, sU);
    gc_tensor th0 = gc_tensor_make(q->h0, GC_F32, 2, sBu), tc0 = gc_tensor_make(lstm ? q->c0 : NULL, GC_F32, 2, sBu);
    gc_tensor tm = gc_tensor_make(q->mask, GC_F32, 2, sm);
    gc_tensor tbh = gc_tensor_make(q->p.cell == GC_RNN_GRU ? q->bh : NULL, GC_F32, 1, sb);
    gc_tensor ty = q->p.sequences ? gc_tensor_make(r->y, GC_F32, 3, sy) : gc_tensor_make(r->y, GC_F32, 2, sBu);
    gc_tensor tsave = gc_tensor_make(r->save, GC_F32, 4, ss), thT = gc_tensor_make(r->hT, GC_F32, 2, sBu);
    gc_tensor tcT = gc_tensor_make(lstm ? r->cT : NULL, GC_F32, 2, sBu);
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = GC_OP_RNN_FWD;
    c.in[0] = &txw, c.in[1] = &tU, c.in[2] = &th0, c.in[3] = &tc0, c.in[4] = &tm, c.in[5] = &tbh;
    c.out[0] = &ty, c.out[1] = &tsave, c.out[2] = &thT, c.out[3] = &tcT;
    c.params = &q->p;
    gc_status s = gc_op_validate(&c);
    return s ? s : gc_cpu_op_rnn_fwd(NULL, &c);
}

static gc_status run_bwd(const problem *q, results *r)
{
    const int G = gc_rnn_gates(q->p.cell), S = gc_rnn_save_blocks(q->p.cell), lstm = q->p.cell == GC_RNN_LSTM;
    const int64_t sU[2] = {q->u, G * q->u}, sBu[2] = {q->B, q->u}, sm[2] = {q->B, q->T};
    const int64_t sy[3] = {q->B, q->T, q->u}, ss[4] = {S, q->B, q->T, q->u}, sx[3] = {q->B, q->T, G * q->u};
    gc_tensor tdy = q->p.sequences ? gc_tensor_make(q->dy, GC_F32, 3, sy) : gc_tensor_make(q->dy, GC_F32, 2, sBu);
    gc_tensor tdh = gc_tensor_make(q->dhT, GC_F32, 2, sBu), tdc = gc_tensor_make(lstm ? q->dcT : NULL, GC_F32, 2, sBu);
    gc_tensor tU = gc_tensor_make(q->U, GC_F32, 2, sU), tsave = gc_tensor_make(r->save, GC_F32, 4, ss);
    gc_tensor tm = gc_tensor_make(q->mask, GC_F32, 2, sm);
    gc_tensor tdxw = gc_tensor_make(r->dxw, GC_F32, 3, sx);
    gc_tensor tdm = gc_tensor_make(q->p.cell == GC_RNN_GRU ? r->dm : NULL, GC_F32, 3, sx);
    gc_tensor tdh0 = gc_tensor_make(r->dh0, GC_F32, 2, sBu), tdc0 = gc_tensor_make(lstm ? r->dc0 : NULL, GC_F32, 2, sBu);
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = GC_OP_RNN_BWD;
    c.in[0] = &tdy, c.in[1] = &tdh, c.in[2] = &tdc, c.in[3] = &tU, c.in[4] = &tsave, c.in[5] = &tm;
    c.out[0] = &tdxw, c.out[1] = &tdm, c.out[2] = &tdh0, c.out[3] = &tdc0;
    c.params = &q->p;
    gc_status s = gc_op_validate(&c);
    return s ? s : gc_cpu_op_rnn_bwd(NULL, &c);
}

static void alloc_results(const problem *q, results *r)
{
    const int G = gc_rnn_gates(q->p.cell), S = gc_rnn_save_blocks(q->p.cell);
    const int64_t Bu = q->B * q->u, BT = q->B * q->T;
    r->y = nans(ny(q)), r->save = nans(S * BT * q->u), r->hT = nans(Bu), r->cT = nans(Bu);
    r->dxw = nans(BT * G * q->u), r->dm = nans(BT * G * q->u), r->dh0 = nans(Bu), r->dc0 = nans(Bu);
}

static void free_results(results *r)
{
    free(r->y), free(r->save), free(r->hT), free(r->cT), free(r->dxw), free(r->dm), free(r->dh0), free(r->dc0);
}

static double loss(const problem *q, const float *xw)
{
    results r;
    alloc_results(q, &r);
    gc_status s = run_fwd(q, xw, &r);
    double L = 0.0;
    if (s == GC_OK) {
        for (int64_t i = 0; i < ny(q); i++) L += (double)r.y[i] * q->dy[i];
        for (int64_t i = 0; i < q->B * q->u; i++) {
            L += (double)r.hT[i] * q->dhT[i];
            if (q->p.cell == GC_RNN_LSTM) L += (double)r.cT[i] * q->dcT[i];
        }
    }
    free_results(&r);
    return s == GC_OK ? L : NAN;
}

static const char *cell_name[4] = {"simple", "lstm", "gru", "gru_reset_before"};

static void one(gc_rnn_cell cell, int64_t B, int64_t T, int64_t u, int gb, int seq, int zo, int fd)
{
    problem q;
    memset(&q, 0, sizeof q);
    q.p.cell = cell, q.p.act = GC_RNN_TANH, q.p.recurrent_act = GC_RNN_SIGMOID;
    q.p.go_backwards = gb, q.p.sequences = seq, q.p.zero_output_for_mask = zo;
    q.B = B, q.T = T, q.u = u;
    const int G = gc_rnn_gates(cell);
    const int64_t Bu = B * u, n_xw = B * T * G * u;
    q.xw = arr(n_xw, 1.0), q.U = arr(u * G * u, 1.0 / sqrt((double)u)), q.h0 = arr(Bu, 0.5), q.c0 = arr(Bu, 0.5);
    q.bh = arr(G * u, 0.3), q.dy = arr(seq ? B * T * u : Bu, 1.0), q.dhT = arr(Bu, 1.0), q.dcT = arr(Bu, 1.0);
    q.mask = arr(B * T, 1.0);
    for (int64_t b = 0; b < B; b++)
        for (int64_t t = 0; t < T; t++) {
            float v = urand() < 0.7 ? 1.0f : 0.0f;
            if (b == 0) v = t < T / 2 ? 0.0f : 1.0f;  /* left padding */
            if (b == 1) v = 0.0f;                     /* fully masked */
            q.mask[b * T + t] = v;
        }
    results r1, r3;
    alloc_results(&q, &r1);
    alloc_results(&q, &r3);
    set_threads(1);
    gc_status s1 = run_fwd(&q, q.xw, &r1);
    if (s1 == GC_OK) s1 = run_bwd(&q, &r1);
    set_threads(3);
    gc_status s3 = run_fwd(&q, q.xw, &r3);
    if (s3 == GC_OK) s3 = run_bwd(&q, &r3);
    const int S = gc_rnn_save_blocks(cell), lstm = cell == GC_RNN_LSTM;
    const int64_t BT = B * T;
    CHECK(s1 == GC_OK && s3 == GC_OK, "%s: status %d / %d: %s", cell_name[cell], s1, s3, gc_last_error());
    if (s1 == GC_OK && s3 == GC_OK) {
        struct { const char *name; const float *a, *b; int64_t n; } outs[] = {
            {"y", r1.y, r3.y, ny(&q)}, {"save", r1.save, r3.save, S * BT * u}, {"h_T", r1.hT, r3.hT, Bu},
            {"c_T", r1.cT, r3.cT, lstm ? Bu : 0}, {"dxw", r1.dxw, r3.dxw, BT * G * u},
            {"dm", r1.dm, r3.dm, cell == GC_RNN_GRU ? BT * G * u : 0}, {"dh0", r1.dh0, r3.dh0, Bu},
            {"dc0", r1.dc0, r3.dc0, lstm ? Bu : 0}};
        for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
            CHECK(all_finite(outs[k].a, outs[k].n), "%s B=%lld T=%lld u=%lld: '%s' has unwritten / non-finite values",
                  cell_name[cell], (long long)B, (long long)T, (long long)u, outs[k].name);
            CHECK(memcmp(outs[k].a, outs[k].b, (size_t)outs[k].n * sizeof(float)) == 0,
                  "%s B=%lld u=%lld: '%s' differs between 1 and 3 threads", cell_name[cell], (long long)B,
                  (long long)u, outs[k].name);
        }
        if (fd) {
            /* directional derivative along v: sum(dxw * v) vs the central difference */
            float *v = arr(n_xw, 1.0), *xp = arr(n_xw, 0.0), *xm = arr(n_xw, 0.0);
            const double eps = 1e-2;
            double an = 0.0;
            for (int64_t i = 0; i < n_xw; i++) {
                an += (double)r1.dxw[i] * v[i];
                xp[i] = (float)(q.xw[i] + eps * v[i]);
                xm[i] = (float)(q.xw[i] - eps * v[i]);
            }
            double num = (loss(&q, xp) - loss(&q, xm)) / (2.0 * eps);
            CHECK(fabs(num - an) <= 2e-2 * (1.0 + fabs(an)), "%s gb=%d seq=%d zo=%d: directional derivative %.6g, "
                  "central difference %.6g", cell_name[cell], gb, seq, zo, an, num);
            free(v), free(xp), free(xm);
        }
    }
    free_results(&r1);
    free_results(&r3);
    free(q.xw), free(q.U), free(q.h0), free(q.c0), free(q.bh), free(q.dy), free(q.dhT), free(q.dcT), free(q.mask);
}

static void validation(void)
{
    problem q;
    memset(&q, 0, sizeof q);
    q.p.cell = GC_RNN_GRU, q.B = 2, q.T = 3, q.u = 4;
    float buf[512] = {0};
    q.U = buf, q.h0 = buf, q.c0 = buf, q.mask = NULL;
    results r = {buf, buf, buf, NULL, NULL, NULL, NULL, NULL};
    /* c0 for a GRU */
    gc_status s = run_fwd(&q, buf, &r);
    CHECK(s == GC_OK, "gru without c0: %s", gc_last_error());
    q.p.cell = GC_RNN_LSTM; /* xw of width 3u for an LSTM (4u) */
    const int64_t sx[3] = {2, 3, 12}, sU[2] = {4, 16}, sBu[2] = {2, 4}, sy[2] = {2, 4};
    gc_tensor txw = gc_tensor_make(buf, GC_F32, 3, sx), tU = gc_tensor_make(buf, GC_F32, 2, sU);
    gc_tensor none = gc_tensor_make(NULL, GC_F32, 2, sBu), ty = gc_tensor_make(buf, GC_F32, 2, sy);
    gc_op_call c;
    memset(&c, 0, sizeof c);
    c.op = GC_OP_RNN_FWD;
    c.in[0] = &txw, c.in[1] = &tU;
    for (int k = 2; k < 6; k++) c.in[k] = &none;
    c.out[0] = &ty;
    for (int k = 1; k < 4; k++) c.out[k] = &none;
    c.params = &q.p;
    s = gc_op_validate(&c);
    CHECK(s == GC_ERR_INVALID_ARG && strstr(gc_last_error(), "'xw'"), "lstm xw (2, 3, 12): %d %s", s, gc_last_error());
    q.p.cell = GC_RNN_SIMPLE; /* c0 for SimpleRNN */
    const int64_t sx1[3] = {2, 3, 4}, sU1[2] = {4, 4};
    gc_tensor txw1 = gc_tensor_make(buf, GC_F32, 3, sx1), tU1 = gc_tensor_make(buf, GC_F32, 2, sU1);
    gc_tensor tc0 = gc_tensor_make(buf, GC_F32, 2, sBu);
    c.in[0] = &txw1, c.in[1] = &tU1, c.in[3] = &tc0;
    s = gc_op_validate(&c);
    CHECK(s == GC_ERR_INVALID_ARG && strstr(gc_last_error(), "c0"), "simple with c0: %d %s", s, gc_last_error());
    c.in[3] = &none;
    const int64_t sx0[3] = {2, 0, 4}; /* T == 0 */
    gc_tensor txw0 = gc_tensor_make(buf, GC_F32, 3, sx0);
    c.in[0] = &txw0;
    s = gc_op_validate(&c);
    CHECK(s == GC_ERR_INVALID_ARG && strstr(gc_last_error(), "time steps"), "T == 0: %d %s", s, gc_last_error());
}

int main(int argc, char **argv)
{
    const int small = argc > 1 && strcmp(argv[1], "--small") == 0;
    validation();
    gc_cpu_register_variants();
    /* every variant of cpu.rnn.simd this CPU runs: the fused kernels and the stepwise path */
    static const char *const rv[] = {"avx512", "avx2", "generic", "stepwise"};
    for (int vi = 0; vi < 4; vi++) {
        if (gc_variant_force("cpu.rnn.simd", rv[vi]) != GC_OK) {
            printf("test_rnn: cpu.rnn.simd=%s not on this CPU, skipped\n", rv[vi]);
            continue;
        }
        for (int cell = 0; cell < 4; cell++) {
            for (int cfg = 0; cfg < 8; cfg++)
                one((gc_rnn_cell)cell, 3 + cfg % 3, 1 + cfg, 1 + 3 * cfg % 8, cfg & 1, (cfg >> 1) & 1, (cfg >> 2) & 1, 1);
            /* the threaded paths (stepwise: B * G * u >= 16384) */
            if (!small) one((gc_rnn_cell)cell, 64, 4, 96, cell & 1, 1, 0, 0);
            else one((gc_rnn_cell)cell, 48, 2, 120, 0, 1, 0, 0);
        }
    }
    gc_variant_reset(NULL);
    printf("test_rnn: %ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
