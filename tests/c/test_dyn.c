/* test_dyn.c -- standalone test of the CPU backend's "dynamic values" and embedding
 * kernels, the parts of the core that Python's run_op cannot reach or cannot vary.
 *
 * What it checks:
 * - Dynamic values (gpucmp.h): adam / sgd (plain, momentum, Nesterov) / rmsprop with
 *   params.dyn = {lr, t} give, bit for bit, what the lr / t fields give (the fields then
 *   hold other values, so a kernel that ignores dyn fails), over several steps with the
 *   values changing between steps as a plan writes them; dropout_fwd / dropout_bwd with
 *   dyn_seed give what seed ^ *dyn_seed in the field gives. Through the kernels and the
 *   op adapters (gc_cpu_op_*), on sizes that take the threaded paths.
 * - embedding_fwd / embedding_bwd: against naive loops (the backward's sums in position
 *   order, so bit for bit), at 1, 2, 3 and 7 threads (identical bits: the scatter-add
 *   must be deterministic), element sizes 2 and 4, heavy repeats, V * D tilings that
 *   leave remainders; an out-of-range index gives GC_ERR_INVALID_ARG with the value and
 *   position in the message and writes nothing.
 *
 * Plain C, no framework (built by tests/c/ops.mk with the sources it needs). Usage:
 * test_dyn [--small]; exit status 0 when every check passes.
 */
#include "cpu_kernels.h"
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_small = 0;
static float frand(double lo, double hi)
{
    return (float)(lo + (hi - lo) * (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0));
}

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}

static float *frand_buf(int64_t n, double lo, double hi)
{
    float *p = (float *)xmalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = frand(lo, hi);
    return p;
}

static float *dup(const float *a, int64_t n)
{
    float *p = (float *)xmalloc((size_t)n * sizeof(float));
    memcpy(p, a, (size_t)n * sizeof(float));
    return p;
}

static int same(const float *a, const float *b, int64_t n)
{
    return memcmp(a, b, (size_t)n * sizeof(float)) == 0;
}

static gc_tensor t1(void *data, gc_dtype dt, int64_t n) { return gc_tensor_make(data, dt, 1, &n); }

/* ------------------------------------------------------------------ dynamic values */
static void test_dyn_optim(int64_t n)
{
    float *g = frand_buf(n, -1, 1), *w0 = frand_buf(n, -1, 1), *m0 = frand_buf(n, -0.1, 0.1);
    float *v0 = frand_buf(n, 0, 0.01);
    const float lrs[3] = {0.01f, 0.003f, 0.25f};

    /* adam: three steps, t and lr changing, through the kernel and through the adapter */
    for (int via_op = 0; via_op < 2; via_op++) {
        float *wa = dup(w0, n), *ma = dup(m0, n), *va = dup(v0, n);
        float *wb = dup(w0, n), *mb = dup(m0, n), *vb = dup(v0, n);
        for (int s = 0; s < 3; s++) {
            gc_adam_params fa = {lrs[s], 0.9f, 0.999f, 1e-7f, 5 + s, NULL, NULL};
            float dyn[2] = {lrs[s], (float)(5 + s)};
            gc_adam_params fb = {123.0f, 0.9f, 0.999f, 1e-7f, 1, dyn, NULL}; /* fields ignored */
            gc_status sa, sb;
            if (!via_op) {
                sa = gc_cpu_adam(n, wa, g, ma, va, &fa);
                sb = gc_cpu_adam(n, wb, g, mb, vb, &fb);
            } else {
                gc_tensor tg = t1(g, GC_F32, n), twa = t1(wa, GC_F32, n), tma = t1(ma, GC_F32, n),
                          tva = t1(va, GC_F32, n), twb = t1(wb, GC_F32, n), tmb = t1(mb, GC_F32, n),
                          tvb = t1(vb, GC_F32, n);
                gc_op_call ca = {GC_OP_ADAM, {&tg}, {&twa, &tma, &tva}, &fa};
                gc_op_call cb = {GC_OP_ADAM, {&tg}, {&twb, &tmb, &tvb}, &fb};
                sa = gc_cpu_op_adam(NULL, &ca);
                sb = gc_cpu_op_adam(NULL, &cb);
            }
            CHECK(sa == GC_OK && sb == GC_OK, "adam status %d %d", (int)sa, (int)sb);
        }
        CHECK(same(wa, wb, n) && same(ma, mb, n) && same(va, vb, n), "adam dyn != fields (n=%lld, op=%d)",
              (long long)n, via_op);
        CHECK(!same(wa, w0, n), "adam did not move w");
        /* a dynamic t < 1 is refused on the CPU (it can read it) */
        float bad[2] = {0.01f, 0.0f};
        gc_adam_params fbad = {0.01f, 0.9f, 0.999f, 1e-7f, 3, bad, NULL};
        CHECK(gc_cpu_adam(n, wb, g, mb, vb, &fbad) == GC_ERR_INVALID_ARG, "adam dyn t = 0 accepted");
        free(wa); free(ma); free(va); free(wb); free(mb); free(vb);
    }

    /* sgd: plain, momentum, nesterov */
    for (int kind = 0; kind < 3; kind++) {
        float *wa = dup(w0, n), *ma = dup(m0, n), *wb = dup(w0, n), *mb = dup(m0, n);
        for (int s = 0; s < 3; s++) {
            float dyn[2] = {lrs[s], 0.0f};
            gc_sgd_params fa = {lrs[s], kind ? 0.9f : 0.0f, kind == 2, NULL, NULL};
            gc_sgd_params fb = {-7.0f, kind ? 0.9f : 0.0f, kind == 2, dyn, NULL};
            gc_tensor tg = t1(g, GC_F32, n), twa = t1(wa, GC_F32, n), tma = t1(kind ? ma : NULL, GC_F32, n),
                      twb = t1(wb, GC_F32, n), tmb = t1(kind ? mb : NULL, GC_F32, n);
            gc_op_call ca = {GC_OP_SGD, {&tg}, {&twa, &tma}, &fa};
            gc_op_call cb = {GC_OP_SGD, {&tg}, {&twb, &tmb}, &fb};
            CHECK(gc_cpu_op_sgd(NULL, &ca) == GC_OK && gc_cpu_op_sgd(NULL, &cb) == GC_OK, "sgd status");
        }
        CHECK(same(wa, wb, n) && same(ma, mb, n), "sgd kind %d dyn != fields", kind);
        CHECK(!same(wa, w0, n), "sgd did not move w");
        free(wa); free(ma); free(wb); free(mb);
    }

    /* rmsprop */
    {
        float *wa = dup(w0, n), *va = dup(v0, n), *wb = dup(w0, n), *vb = dup(v0, n);
        for (int s = 0; s < 3; s++) {
            float dyn[2] = {lrs[s], 0.0f};
            gc_rmsprop_params fa = {lrs[s], 0.9f, 1e-7f, NULL, NULL};
            gc_rmsprop_params fb = {99.0f, 0.9f, 1e-7f, dyn, NULL};
            CHECK(gc_cpu_rmsprop(n, wa, g, va, &fa) == GC_OK && gc_cpu_rmsprop(n, wb, g, vb, &fb) == GC_OK,
                  "rmsprop status");
        }
        CHECK(same(wa, wb, n) && same(va, vb, n), "rmsprop dyn != fields");
        free(wa); free(va); free(wb); free(vb);
    }
    free(g); free(w0); free(m0); free(v0);
}

static void test_dyn_dropout(int64_t n)
{
    float *x = frand_buf(n, -2, 2), *ya = (float *)xmalloc((size_t)n * 4), *yb = (float *)xmalloc((size_t)n * 4);
    const uint64_t seed = 0x1234567890ABCDEFull, dyn = 0xFEDCBA0987654321ull;
    for (int bwd = 0; bwd < 2; bwd++) {
        gc_dropout_params fa = {0.3f, seed ^ dyn, NULL};
        gc_dropout_params fb = {0.3f, seed, &dyn};
        gc_tensor tx = t1(x, GC_F32, n), tya = t1(ya, GC_F32, n), tyb = t1(yb, GC_F32, n);
        gc_op_call ca = {bwd ? GC_OP_DROPOUT_BWD : GC_OP_DROPOUT_FWD, {&tx}, {&tya}, &fa};
        gc_op_call cb = {bwd ? GC_OP_DROPOUT_BWD : GC_OP_DROPOUT_FWD, {&tx}, {&tyb}, &fb};
        gc_status sa = bwd ? gc_cpu_op_dropout_bwd(NULL, &ca) : gc_cpu_op_dropout_fwd(NULL, &ca);
        gc_status sb = bwd ? gc_cpu_op_dropout_bwd(NULL, &cb) : gc_cpu_op_dropout_fwd(NULL, &cb);
        CHECK(sa == GC_OK && sb == GC_OK && same(ya, yb, n), "dropout %s: dyn_seed != seed field",
              bwd ? "bwd" : "fwd");
        /* and the dynamic part is really used: seed alone draws another mask */
        gc_dropout_params fc = {0.3f, seed, NULL};
        gc_op_call cc = {GC_OP_DROPOUT_FWD, {&tx}, {&tyb}, &fc};
        CHECK(gc_cpu_op_dropout_fwd(NULL, &cc) == GC_OK && !same(ya, yb, n), "dropout ignores dyn_seed");
    }
    free(x); free(ya); free(yb);
}

/* ------------------------------------------------------------------ embedding */
static void test_embedding_case(int64_t V, int64_t D, int64_t n, int max_repeat_rows)
{
    int32_t *idx = (int32_t *)xmalloc((size_t)n * 4);
    int64_t span = max_repeat_rows > 0 && max_repeat_rows < V ? max_repeat_rows : V;
    for (int64_t p = 0; p < n; p++) idx[p] = (int32_t)(next_u64() % (uint64_t)span);
    if (n > 1) idx[n - 1] = (int32_t)(V - 1);

    /* forward, 4-byte and 2-byte elements */
    float *table = frand_buf(V * D, -1, 1), *out = (float *)xmalloc((size_t)(n * D) * 4);
    CHECK(gc_cpu_embedding_fwd(n, V, D * 4, table, idx, out) == GC_OK, "embedding_fwd status");
    int bad = 0;
    for (int64_t p = 0; p < n; p++)
        bad += memcmp(out + p * D, table + (int64_t)idx[p] * D, (size_t)D * 4) != 0;
    CHECK(bad == 0, "embedding_fwd V=%lld D=%lld n=%lld: %d rows differ", (long long)V, (long long)D,
          (long long)n, bad);
    uint16_t *t16 = (uint16_t *)xmalloc((size_t)(V * D) * 2), *o16 = (uint16_t *)xmalloc((size_t)(n * D) * 2);
    for (int64_t i = 0; i < V * D; i++) t16[i] = (uint16_t)next_u64();
    CHECK(gc_cpu_embedding_fwd(n, V, D * 2, t16, idx, o16) == GC_OK, "embedding_fwd 16-bit status");
    bad = 0;
    for (int64_t p = 0; p < n; p++) bad += memcmp(o16 + p * D, t16 + (int64_t)idx[p] * D, (size_t)D * 2) != 0;
    CHECK(bad == 0, "embedding_fwd 16-bit: %d rows differ", bad);

    /* backward: naive position-order sums, then every thread count */
    float *dy = frand_buf(n * D, -1, 1), *want = (float *)xmalloc((size_t)(V * D) * 4);
    float *got = (float *)xmalloc((size_t)(V * D) * 4);
    memset(want, 0, (size_t)(V * D) * 4);
    for (int64_t p = 0; p < n; p++)
        for (int64_t c = 0; c < D; c++) want[(int64_t)idx[p] * D + c] += dy[p * D + c];
    const int threads[] = {1, 2, 3, 7};
    for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
        set_threads(threads[k]);
        for (int64_t i = 0; i < V * D; i++) got[i] = NAN;
        CHECK(gc_cpu_embedding_bwd(n, V, D, dy, idx, got) == GC_OK, "embedding_bwd status");
        CHECK(same(got, want, V * D), "embedding_bwd V=%lld D=%lld n=%lld threads=%d: not the position-order sums",
              (long long)V, (long long)D, (long long)n, threads[k]);
    }
    set_threads(4);

    /* an index out of range: an error naming it, nothing written */
    if (n > 2) {
        int32_t keep = idx[n / 2];
        idx[n / 2] = (int32_t)V;
        for (int64_t i = 0; i < V * D; i++) got[i] = NAN;
        gc_status s = gc_cpu_embedding_bwd(n, V, D, dy, idx, got);
        char want_msg[128];
        snprintf(want_msg, sizeof want_msg, "indices: value %lld at position %lld is outside [0, %lld)",
                 (long long)V, (long long)(n / 2), (long long)V);
        CHECK(s == GC_ERR_INVALID_ARG && strcmp(gc_last_error(), want_msg) == 0,
              "embedding_bwd bad index: status %d message '%s'", (int)s, gc_last_error());
        CHECK(isnan(got[0]), "embedding_bwd wrote dtable despite a bad index");
        idx[n / 2] = -1;
        for (int64_t i = 0; i < n * D; i++) out[i] = NAN;
        s = gc_cpu_embedding_fwd(n, V, D * 4, table, idx, out);
        snprintf(want_msg, sizeof want_msg, "indices: value -1 at position %lld is outside [0, %lld)",
                 (long long)(n / 2), (long long)V);
        CHECK(s == GC_ERR_INVALID_ARG && strcmp(gc_last_error(), want_msg) == 0,
              "embedding_fwd bad index: status %d message '%s'", (int)s, gc_last_error());
        CHECK(D == 0 || isnan(out[0]), "embedding_fwd wrote out despite a bad index");
        idx[n / 2] = keep;
    }
    free(idx); free(table); free(out); free(t16); free(o16); free(dy); free(want); free(got);
}

static void test_embedding(void)
{
    test_embedding_case(1, 1, 1, 0);
    test_embedding_case(7, 5, 13, 0);
    test_embedding_case(3, 130, 500, 0);          /* 2 column blocks, heavy repeats */
    test_embedding_case(1000, 3, 4000, 0);        /* row bands */
    test_embedding_case(64, 200, 3000, 2);        /* all in two rows: imbalanced bands */
    if (!g_small) test_embedding_case(5000, 64, 60000, 0); /* the threaded paths */
    /* zero-size edges: nothing to do, still fine */
    int32_t one = 0;
    float tab[4] = {1, 2, 3, 4}, o[4];
    CHECK(gc_cpu_embedding_fwd(0, 2, 8, tab, &one, o) == GC_OK, "embedding_fwd n=0");
    CHECK(gc_cpu_embedding_bwd(0, 2, 2, tab, &one, o) == GC_OK && o[0] == 0.0f && o[3] == 0.0f,
          "embedding_bwd n=0 zeroes dtable");
}

int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], "--small") == 0) g_small = 1;
    test_dyn_optim(g_small ? 1003 : 200003);
    test_dyn_dropout(g_small ? 1003 : 200003);
    test_dyn_optim(7);
    test_embedding();
    printf("test_dyn: %ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
