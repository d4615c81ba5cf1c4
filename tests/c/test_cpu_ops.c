/* test_cpu_ops.c -- standalone smoke test of the CPU float32 kernels other than GEMM.
 *
 * What it provides: every kernel of act.c, conv2d.c, pool2d.c, loss.c, dropout.c,
 * optim.c and metrics.c (and their op adapters) compared with a naive loop in double
 * on small random inputs: conv over odd shapes, strides 1-2, dilation 1-2, both
 * paddings, 1x1 and C = 1 kernels, each at 1, 2 and 3 threads; max / average pooling
 * with overlapping windows and ties; the losses' gradients against central
 * differences of a double re-implementation; one optimizer step against its formula.
 * Outputs are poisoned with NaN before each kernel runs, so unwritten elements fail.
 *
 * Why it is built this way: plain C with no test framework, so it builds with the
 * sources alone (plus csrc/core/status.c, geometry.c and any gc_cpu_sgemm) and runs
 * under valgrind. Usage: test_cpu_ops [--small] [--seed N]; --small keeps the sizes
 * valgrind-friendly. Exit status 0 when every check passes.
 */
#include "cpu_kernels.h"
#include "harness.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ harness */
static int g_small = 0;

static float frand(double lo, double hi) { return (float)(lo + (hi - lo) * urand()); }
static int irand(int n) { return (int)(next_u64() % (uint64_t)n); }

static float *fbuf(int64_t n) /* poisoned with NaN */
{
    float *p = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    for (int64_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}
static double *dbuf(int64_t n)
{
    double *p = (double *)calloc((size_t)(n > 0 ? n : 1), sizeof(double));
    if (!p) {
        printf("out of memory\n");
        exit(2);
    }
    return p;
}
static float *frand_buf(int64_t n, double lo, double hi)
{
    float *p = fbuf(n);
    for (int64_t i = 0; i < n; i++) p[i] = frand(lo, hi);
    return p;
}

/* sqrt(sum (out - ref)^2 / max(sum ref^2, floor_sq)) (the absolute norm where both are
 * 0); a floor for sums of random terms that may cancel (a bias gradient: the column sums
 * of dy), whose rounding error scales with the terms, not with the sum */
static double rel_err_floor(const float *out, const double *ref, int64_t n, double floor_sq)
{
    double num = 0.0, den = 0.0;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(out[i])) return INFINITY;
        double d = (double)out[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    if (den < floor_sq) den = floor_sq;
    if (den == 0.0) return sqrt(num);
    return sqrt(num / den);
}

/* ||out - ref|| / ||ref||; +inf when out has a non-finite value where ref is finite */
static double rel_err(const float *out, const double *ref, int64_t n) { return rel_err_floor(out, ref, n, 0.0); }

static double ref_act(gc_act a, double v)
{
    switch (a) {
    case GC_ACT_RELU: return v > 0 ? v : 0;
    case GC_ACT_TANH: return tanh(v);
    case GC_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    default: return v;
    }
}

static void ref_softmax_rows(int64_t rows, int64_t cols, double *y)
{
    for (int64_t r = 0; r < rows; r++) {
        double *v = y + r * cols, mx = v[0], s = 0;
        for (int64_t c = 1; c < cols; c++) mx = v[c] > mx ? v[c] : mx;
        for (int64_t c = 0; c < cols; c++) s += (v[c] = exp(v[c] - mx));
        for (int64_t c = 0; c < cols; c++) v[c] /= s;
    }
}

static gc_tensor tens(void *data, gc_dtype dt, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    gc_tensor t;
    memset(&t, 0, sizeof t);
    t.data = data;
    t.dtype = dt;
    t.ndim = ndim;
    int64_t s[4] = {a, b, c, d};
    for (int i = 0; i < ndim && i < 4; i++) t.shape[i] = s[i];
    return t;
}

/* ------------------------------------------------------------------ activations */
static void test_act(void)
{
    const gc_act acts[] = {GC_ACT_LINEAR, GC_ACT_RELU, GC_ACT_TANH, GC_ACT_SIGMOID};
    const int64_t n = g_small ? 3000 : 200000; /* the large size takes the threaded path */
    float *x = frand_buf(n, -30.0, 30.0);
    const float special[] = {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-4f, -1e-4f, 0.625f, -0.625f,
                             0.6249f, 44.0f, -44.0f, 88.0f, -88.0f, 100.0f, -100.0f,
                             1e30f, -1e30f, 3.0e38f, -3.0e38f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) x[i] = special[i];
    for (int64_t i = 20; i < 1000 && i < n; i++) x[i] = frand(-2.0, 2.0);
    float *y = fbuf(n);
    for (size_t k = 0; k < sizeof acts / sizeof acts[0]; k++) {
        gc_act a = acts[k];
        for (int64_t i = 0; i < n; i++) y[i] = NAN;
        gc_status st = gc_cpu_act_fwd(a, 1, n, x, y);
        CHECK(st == GC_OK, "act_fwd %d status %d", (int)a, (int)st);
        double worst = 0.0;
        int64_t wi = 0;
        for (int64_t i = 0; i < n; i++) {
            double r = ref_act(a, x[i]);
            double err = fabs((double)y[i] - r);
            double tol = 4e-7 * fabs(r) + 2e-38;
            if (!(err <= tol) && err / (fabs(r) + 1e-300) > worst) {
                worst = err / (fabs(r) + 1e-300);
                wi = i;
            }
        }
        CHECK(worst == 0.0, "act %d: x=%g y=%.9g ref=%.9g", (int)a, (double)x[wi], (double)y[wi],
              ref_act(a, x[wi]));
        /* in place, and NaN propagation */
        float z[3] = {NAN, 1.5f, -1.5f};
        gc_cpu_act_inplace(a, z, 3);
        CHECK(isnan(z[0]), "act %d does not propagate NaN", (int)a);
        CHECK(fabs(z[1] - ref_act(a, 1.5)) < 1e-6 && fabs(z[2] - ref_act(a, -1.5)) < 1e-6,
              "act %d in place", (int)a);
    }
    /* backward from the forward output */
    const int64_t rows = 37, cols = 13;
    float *xb = frand_buf(rows * cols, -4, 4), *yb = fbuf(rows * cols), *dy = frand_buf(rows * cols, -1, 1);
    float *dx = fbuf(rows * cols);
    double *ref = dbuf(rows * cols);
    const gc_act all[] = {GC_ACT_LINEAR, GC_ACT_RELU, GC_ACT_TANH, GC_ACT_SIGMOID, GC_ACT_SOFTMAX};
    for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) {
        gc_act a = all[k];
        CHECK(gc_cpu_act_fwd(a, rows, cols, xb, yb) == GC_OK, "act_fwd");
        if (a == GC_ACT_SOFTMAX) {
            for (int64_t i = 0; i < rows * cols; i++) ref[i] = xb[i];
            ref_softmax_rows(rows, cols, ref);
            CHECK(rel_err(yb, ref, rows * cols) < 1e-6, "softmax fwd %g", rel_err(yb, ref, rows * cols));
            /* in place */
            float *xc = fbuf(rows * cols);
            memcpy(xc, xb, sizeof(float) * (size_t)(rows * cols));
            gc_cpu_act_fwd(a, rows, cols, xc, xc);
            CHECK(rel_err(xc, ref, rows * cols) < 1e-6, "softmax in place");
            free(xc);
        }
        for (int64_t i = 0; i < rows * cols; i++) dx[i] = NAN;
        CHECK(gc_cpu_act_bwd(a, rows, cols, yb, dy, dx) == GC_OK, "act_bwd");
        for (int64_t r = 0; r < rows; r++) {
            double s = 0;
            for (int64_t c = 0; c < cols; c++) s += (double)dy[r * cols + c] * yb[r * cols + c];
            for (int64_t c = 0; c < cols; c++) {
                int64_t i = r * cols + c;
                double yv = yb[i], g = dy[i];
                switch (a) {
                case GC_ACT_RELU: ref[i] = yv > 0 ? g : 0; break;
                case GC_ACT_TANH: ref[i] = g * (1 - yv * yv); break;
                case GC_ACT_SIGMOID: ref[i] = g * yv * (1 - yv); break;
                case GC_ACT_SOFTMAX: ref[i] = yv * (g - s); break;
                default: ref[i] = g; break;
                }
            }
        }
        CHECK(rel_err(dx, ref, rows * cols) < 1e-6, "act_bwd %d: %g", (int)a, rel_err(dx, ref, rows * cols));
        /* adapters: (rows, cols) given as a 3-D tensor (a, b, cols) */
        gc_tensor tx = tens(xb, GC_F32, 3, 1, rows, cols, 0), ty = tens(yb, GC_F32, 3, 1, rows, cols, 0);
        gc_tensor tdy = tens(dy, GC_F32, 3, 1, rows, cols, 0), tdx = tens(dx, GC_F32, 3, 1, rows, cols, 0);
        gc_act_params ap = {a};
        gc_op_call c1 = {GC_OP_ACT_FWD, {&tx, NULL, NULL}, {&ty, NULL, NULL}, &ap};
        for (int64_t i = 0; i < rows * cols; i++) yb[i] = NAN;
        CHECK(gc_cpu_op_act_fwd(NULL, &c1) == GC_OK, "op act_fwd");
        CHECK(!isnan(yb[rows * cols - 1]), "op act_fwd wrote");
        gc_op_call c2 = {GC_OP_ACT_BWD, {&ty, &tdy, NULL}, {&tdx, NULL, NULL}, &ap};
        for (int64_t i = 0; i < rows * cols; i++) dx[i] = NAN;
        CHECK(gc_cpu_op_act_bwd(NULL, &c2) == GC_OK, "op act_bwd");
        CHECK(rel_err(dx, ref, rows * cols) < 1e-6, "op act_bwd %d", (int)a);
    }
    free(x); free(y); free(xb); free(yb); free(dy); free(dx); free(ref);
}

/* ------------------------------------------------------------------ conv2d */
typedef struct {
    int64_t N, H, W, C, KH, KW, F;
    int sh, sw, dh, dw;
    gc_padding pad;
    gc_act act;
    int big; /* skipped with --small */
} conv_case;

static void ref_conv_fwd(const gc_conv2d_geom *g, const float *x, const float *w,
                         const float *b, gc_act act, double *y)
{
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++)
                for (int64_t f = 0; f < g->F; f++) {
                    double s = b ? b[f] : 0.0;
                    for (int64_t kh = 0; kh < g->KH; kh++) {
                        int64_t ih = oh * g->sh - g->pad_top + kh * g->dh;
                        if (ih < 0 || ih >= g->H) continue;
                        for (int64_t kw = 0; kw < g->KW; kw++) {
                            int64_t iw = ow * g->sw - g->pad_left + kw * g->dw;
                            if (iw < 0 || iw >= g->W) continue;
                            for (int64_t c = 0; c < g->C; c++)
                                s += (double)x[((n * g->H + ih) * g->W + iw) * g->C + c] *
                                     w[((kh * g->KW + kw) * g->C + c) * g->F + f];
                        }
                    }
                    y[((n * g->OH + oh) * g->OW + ow) * g->F + f] = act == GC_ACT_SOFTMAX ? s : ref_act(act, s);
                }
    if (act == GC_ACT_SOFTMAX) ref_softmax_rows(g->N * g->OH * g->OW, g->F, y);
}

static void ref_conv_bwd(const gc_conv2d_geom *g, const float *x, const float *w,
                         const float *dy, double *dx, double *dw, double *db)
{
    memset(dx, 0, sizeof(double) * (size_t)(g->N * g->H * g->W * g->C));
    memset(dw, 0, sizeof(double) * (size_t)(g->KH * g->KW * g->C * g->F));
    memset(db, 0, sizeof(double) * (size_t)g->F);
    for (int64_t n = 0; n < g->N; n++)
        for (int64_t oh = 0; oh < g->OH; oh++)
            for (int64_t ow = 0; ow < g->OW; ow++)
                for (int64_t f = 0; f < g->F; f++) {
                    double d = dy[((n * g->OH + oh) * g->OW + ow) * g->F + f];
                    db[f] += d;
                    for (int64_t kh = 0; kh < g->KH; kh++) {
                        int64_t ih = oh * g->sh - g->pad_top + kh * g->dh;
                        if (ih < 0 || ih >= g->H) continue;
                        for (int64_t kw = 0; kw < g->KW; kw++) {
                            int64_t iw = ow * g->sw - g->pad_left + kw * g->dw;
                            if (iw < 0 || iw >= g->W) continue;
                            for (int64_t c = 0; c < g->C; c++) {
                                int64_t xi = ((n * g->H + ih) * g->W + iw) * g->C + c;
                                int64_t wi = ((kh * g->KW + kw) * g->C + c) * g->F + f;
                                dx[xi] += d * w[wi];
                                dw[wi] += d * x[xi];
                            }
                        }
                    }
                }
}

static void test_conv_case(const conv_case *cc)
{
    gc_conv2d_params p = {cc->sh, cc->sw, cc->dh, cc->dw, cc->pad, cc->act, GC_IMPL_OWN, 0};
    gc_conv2d_geom g;
    gc_status st = gc_conv2d_geometry(cc->N, cc->H, cc->W, cc->C, cc->KH, cc->KW, cc->F, &p, &g);
    CHECK(st == GC_OK, "conv geometry: %s", gc_last_error());
    if (st) return;
    const int64_t nx = g.N * g.H * g.W * g.C, nw = g.KH * g.KW * g.C * g.F;
    const int64_t ny = g.N * g.OH * g.OW * g.F, nb = g.F;
    float *x = frand_buf(nx, -1, 1), *w = frand_buf(nw, -1, 1), *b = frand_buf(nb, -1, 1);
    float *dy = frand_buf(ny, -1, 1);
    float *y = fbuf(ny), *dx = fbuf(nx), *dw = fbuf(nw), *db = fbuf(nb);
    double *ry = dbuf(ny), *rdx = dbuf(nx), *rdw = dbuf(nw), *rdb = dbuf(nb);
    ref_conv_fwd(&g, x, w, b, cc->act, ry);
    ref_conv_bwd(&g, x, w, dy, rdx, rdw, rdb);
    const double kfwd = (double)(g.KH * g.KW * g.C), kdw = (double)(g.N * g.OH * g.OW);
    const double tf = 2e-7 * sqrt(kfwd) + 1e-6, tw = 2e-7 * sqrt(kdw) + 1e-6;
    char name[160];
    snprintf(name, sizeof name, "conv N%lld %lldx%lldx%lld k%lldx%lld F%lld s%d,%d d%d,%d %s act%d",
             (long long)g.N, (long long)g.H, (long long)g.W, (long long)g.C, (long long)g.KH,
             (long long)g.KW, (long long)g.F, g.sh, g.sw, g.dh, g.dw,
             cc->pad == GC_PAD_SAME ? "same" : "valid", (int)cc->act);
    const int threads[] = {1, 2, 3};
    for (int ti = 0; ti < 3; ti++) {
        set_threads(threads[ti]);
        for (int64_t i = 0; i < ny; i++) y[i] = NAN;
        for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
        for (int64_t i = 0; i < nw; i++) dw[i] = NAN;
        for (int64_t i = 0; i < nb; i++) db[i] = NAN;
        st = gc_cpu_conv2d_fwd(&g, x, w, b, cc->act, y);
        double e = rel_err(y, ry, ny);
        CHECK(st == GC_OK && e < tf, "%s t%d fwd err %g", name, threads[ti], e);
        st = gc_cpu_conv2d_bwd_data(&g, dy, w, dx, 0);
        e = rel_err(dx, rdx, nx);
        CHECK(st == GC_OK && e < tf * 2, "%s t%d bwd_data err %g", name, threads[ti], e);
        st = gc_cpu_conv2d_bwd_filter(&g, x, dy, dw, db);
        e = rel_err(dw, rdw, nw);
        /* db: F column sums of kdw values of dy in [-1, 1] (variance 1/3 each) */
        double eb = rel_err_floor(db, rdb, nb, (double)nb * kdw / 3.0);
        CHECK(st == GC_OK && e < tw && eb < tw, "%s t%d bwd_filter err %g db %g", name,
              threads[ti], e, eb);
    }
    set_threads(2);
    /* adapters: bias absent (NULL pointer, then NULL data), db absent */
    gc_tensor tx = tens(x, GC_F32, 4, g.N, g.H, g.W, g.C), tw4 = tens(w, GC_F32, 4, g.KH, g.KW, g.C, g.F);
    gc_tensor ty = tens(y, GC_F32, 4, g.N, g.OH, g.OW, g.F), tdy = tens(dy, GC_F32, 4, g.N, g.OH, g.OW, g.F);
    gc_tensor tdx = tens(dx, GC_F32, 4, g.N, g.H, g.W, g.C), tdw = tens(dw, GC_F32, 4, g.KH, g.KW, g.C, g.F);
    gc_tensor tnob = tens(NULL, GC_F32, 1, g.F, 0, 0, 0), tb = tens(b, GC_F32, 1, g.F, 0, 0, 0);
    gc_tensor tdb = tens(db, GC_F32, 1, g.F, 0, 0, 0);
    for (int variant = 0; variant < 3; variant++) {
        const gc_tensor *bias = variant == 0 ? NULL : (variant == 1 ? &tnob : &tb);
        gc_op_call c = {GC_OP_CONV2D_FWD, {&tx, &tw4, bias}, {&ty, NULL, NULL}, &p};
        for (int64_t i = 0; i < ny; i++) y[i] = NAN;
        st = gc_cpu_op_conv2d_fwd(NULL, &c);
        if (variant == 2) {
            CHECK(st == GC_OK && rel_err(y, ry, ny) < tf, "%s op fwd", name);
        } else {
            int finite = 1;
            for (int64_t i = 0; i < ny; i++) finite &= isfinite(y[i]) != 0;
            CHECK(st == GC_OK && finite, "%s op fwd without bias", name);
        }
    }
    gc_op_call cd = {GC_OP_CONV2D_BWD_DATA, {&tdy, &tw4, NULL}, {&tdx, NULL, NULL}, &p};
    for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
    st = gc_cpu_op_conv2d_bwd_data(NULL, &cd);
    CHECK(st == GC_OK && rel_err(dx, rdx, nx) < tf * 2, "%s op bwd_data", name);
    gc_op_call cf = {GC_OP_CONV2D_BWD_FILTER, {&tx, &tdy, NULL}, {&tdw, NULL, NULL}, &p};
    for (int64_t i = 0; i < nw; i++) dw[i] = NAN;
    st = gc_cpu_op_conv2d_bwd_filter(NULL, &cf);
    CHECK(st == GC_OK && rel_err(dw, rdw, nw) < tw, "%s op bwd_filter (no db)", name);
    gc_op_call cf2 = {GC_OP_CONV2D_BWD_FILTER, {&tx, &tdy, NULL}, {&tdw, &tdb, NULL}, &p};
    for (int64_t i = 0; i < nb; i++) db[i] = NAN;
    st = gc_cpu_op_conv2d_bwd_filter(NULL, &cf2);
    CHECK(st == GC_OK && rel_err_floor(db, rdb, nb, (double)nb * kdw / 3.0) < tw, "%s op bwd_filter db", name);
    free(x); free(w); free(b); free(dy); free(y); free(dx); free(dw); free(db);
    free(ry); free(rdx); free(rdw); free(rdb);
}

static void test_conv(void)
{
    const conv_case cases[] = {
        {2, 7, 9, 3, 3, 3, 5, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 0},
        {3, 8, 7, 2, 3, 2, 4, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0},
        {2, 9, 10, 1, 3, 3, 6, 1, 2, 2, 1, GC_PAD_SAME, GC_ACT_TANH, 0},
        {4, 6, 6, 4, 1, 1, 3, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_SIGMOID, 0},
        {2, 5, 5, 3, 1, 1, 2, 1, 1, 2, 2, GC_PAD_SAME, GC_ACT_LINEAR, 0},
        {2, 7, 7, 3, 1, 1, 4, 2, 2, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 0},
        {1, 11, 11, 3, 5, 5, 2, 2, 2, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 0},
        {2, 5, 6, 3, 2, 3, 3, 2, 1, 2, 2, GC_PAD_VALID, GC_ACT_SOFTMAX, 0},
        {2, 8, 8, 2, 4, 4, 3, 3, 3, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 0},
        {3, 6, 5, 2, 3, 3, 2, 1, 1, 2, 2, GC_PAD_SAME, GC_ACT_RELU, 0},
        {2, 4, 4, 1, 4, 4, 3, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_LINEAR, 0},
        {5, 12, 12, 8, 3, 3, 16, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_RELU, 0},
        {3, 28, 28, 1, 3, 3, 32, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1},
        {4, 13, 13, 32, 3, 3, 64, 1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, 1},
        {2, 40, 40, 16, 3, 3, 8, 1, 1, 1, 1, GC_PAD_SAME, GC_ACT_LINEAR, 1},
        {2, 33, 31, 5, 3, 3, 4, 2, 2, 2, 2, GC_PAD_SAME, GC_ACT_TANH, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (g_small && cases[i].big) continue;
        test_conv_case(&cases[i]);
    }
    /* N = 0 through the adapters: nothing to do, no data needed */
    gc_conv2d_params p = {1, 1, 1, 1, GC_PAD_VALID, GC_ACT_RELU, GC_IMPL_OWN, 0};
    gc_tensor tx = tens(NULL, GC_F32, 4, 0, 5, 5, 2), tw4 = tens(NULL, GC_F32, 4, 3, 3, 2, 4);
    gc_tensor ty = tens(NULL, GC_F32, 4, 0, 3, 3, 4);
    gc_op_call c = {GC_OP_CONV2D_FWD, {&tx, &tw4, NULL}, {&ty, NULL, NULL}, &p};
    CHECK(gc_cpu_op_conv2d_fwd(NULL, &c) == GC_OK, "conv N=0 fwd");
    gc_op_call cd = {GC_OP_CONV2D_BWD_DATA, {&ty, &tw4, NULL}, {&tx, NULL, NULL}, &p};
    CHECK(gc_cpu_op_conv2d_bwd_data(NULL, &cd) == GC_OK, "conv N=0 bwd_data");
    float dwz[3 * 3 * 2 * 4], dbz[4];
    for (int i = 0; i < 72; i++) dwz[i] = NAN;
    for (int i = 0; i < 4; i++) dbz[i] = NAN;
    gc_tensor tdw = tens(dwz, GC_F32, 4, 3, 3, 2, 4), tdb = tens(dbz, GC_F32, 1, 4, 0, 0, 0);
    gc_op_call cf = {GC_OP_CONV2D_BWD_FILTER, {&tx, &ty, NULL}, {&tdw, &tdb, NULL}, &p};
    CHECK(gc_cpu_op_conv2d_bwd_filter(NULL, &cf) == GC_OK && dwz[71] == 0.0f && dbz[3] == 0.0f,
          "conv N=0 bwd_filter gives zero gradients");
}

/* ------------------------------------------------------------------ pooling */
static void ref_window(const gc_pool2d_geom *g, int64_t oh, int64_t ow, int64_t *h0, int64_t *h1,
                       int64_t *w0, int64_t *w1)
{
    *h0 = oh * g->sh - g->pad_top;
    *w0 = ow * g->sw - g->pad_left;
    *h1 = *h0 + g->PH;
    *w1 = *w0 + g->PW;
    if (*h0 < 0) *h0 = 0;
    if (*w0 < 0) *w0 = 0;
    if (*h1 > g->H) *h1 = g->H;
    if (*w1 > g->W) *w1 = g->W;
}

static void test_pool_case(int64_t N, int64_t H, int64_t W, int64_t C, int ph, int pw, int sh,
                           int sw, gc_padding pad, int ties)
{
    gc_pool2d_params p = {ph, pw, sh, sw, pad, GC_ACT_LINEAR};
    gc_pool2d_geom g;
    gc_status st = gc_pool2d_geometry(N, H, W, C, &p, &g);
    CHECK(st == GC_OK, "pool geometry: %s", gc_last_error());
    if (st) return;
    const int64_t nx = N * H * W * C, ny = N * g.OH * g.OW * C;
    float *x = frand_buf(nx, -1, 1), *dy = frand_buf(ny, -1, 1);
    if (ties)
        for (int64_t i = 0; i < nx; i++) x[i] = (float)irand(3) - 1.0f; /* many ties */
    float *y = fbuf(ny), *dx = fbuf(nx);
    double *rmax = dbuf(ny), *ravg = dbuf(ny), *rdmax = dbuf(nx), *rdavg = dbuf(nx);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < g.OH; oh++)
            for (int64_t ow = 0; ow < g.OW; ow++)
                for (int64_t c = 0; c < C; c++) {
                    int64_t h0, h1, w0, w1, yi = ((n * g.OH + oh) * g.OW + ow) * C + c;
                    ref_window(&g, oh, ow, &h0, &h1, &w0, &w1);
                    double best = -INFINITY, sum = 0;
                    int64_t bi = -1;
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) {
                            int64_t xi = ((n * H + h) * W + w) * C + c;
                            if (x[xi] > best) {
                                best = x[xi];
                                bi = xi;
                            }
                            sum += x[xi];
                        }
                    double cnt = (double)((h1 - h0) * (w1 - w0));
                    rmax[yi] = best;
                    ravg[yi] = sum / cnt;
                    rdmax[bi] += dy[yi];
                    for (int64_t h = h0; h < h1; h++)
                        for (int64_t w = w0; w < w1; w++) rdavg[((n * H + h) * W + w) * C + c] += dy[yi] / cnt;
                }
    char name[128];
    snprintf(name, sizeof name, "pool N%lld %lldx%lldx%lld p%dx%d s%d,%d %s%s", (long long)N,
             (long long)H, (long long)W, (long long)C, ph, pw, sh, sw,
             pad == GC_PAD_SAME ? "same" : "valid", ties ? " ties" : "");
    gc_tensor tx = tens(x, GC_F32, 4, N, H, W, C), ty = tens(y, GC_F32, 4, N, g.OH, g.OW, C);
    gc_tensor tdy = tens(dy, GC_F32, 4, N, g.OH, g.OW, C), tdx = tens(dx, GC_F32, 4, N, H, W, C);
    for (int ti = 1; ti <= 2; ti++) {
        set_threads(ti);
        for (int64_t i = 0; i < ny; i++) y[i] = NAN;
        CHECK(gc_cpu_maxpool2d_fwd(&g, x, y) == GC_OK && rel_err(y, rmax, ny) == 0.0, "%s max fwd", name);
        for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
        CHECK(gc_cpu_maxpool2d_bwd(&g, 0, x, dy, dx) == GC_OK && rel_err(dx, rdmax, nx) < 1e-6,
              "%s max bwd %g", name, rel_err(dx, rdmax, nx));
        for (int64_t i = 0; i < ny; i++) y[i] = NAN;
        CHECK(gc_cpu_avgpool2d_fwd(&g, x, y) == GC_OK && rel_err(y, ravg, ny) < 1e-6, "%s avg fwd", name);
        for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
        CHECK(gc_cpu_avgpool2d_bwd(&g, dy, dx) == GC_OK && rel_err(dx, rdavg, nx) < 1e-6,
              "%s avg bwd %g", name, rel_err(dx, rdavg, nx));
    }
    /* adapters */
    gc_op_call c1 = {GC_OP_MAXPOOL2D_FWD, {&tx, NULL, NULL}, {&ty, NULL, NULL}, &p};
    for (int64_t i = 0; i < ny; i++) y[i] = NAN;
    CHECK(gc_cpu_op_maxpool2d_fwd(NULL, &c1) == GC_OK && rel_err(y, rmax, ny) == 0.0, "%s op max fwd", name);
    gc_op_call c2 = {GC_OP_MAXPOOL2D_BWD, {&tx, &tdy, NULL}, {&tdx, NULL, NULL}, &p};
    for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
    CHECK(gc_cpu_op_maxpool2d_bwd(NULL, &c2) == GC_OK && rel_err(dx, rdmax, nx) < 1e-6, "%s op max bwd", name);
    gc_op_call c3 = {GC_OP_AVGPOOL2D_FWD, {&tx, NULL, NULL}, {&ty, NULL, NULL}, &p};
    for (int64_t i = 0; i < ny; i++) y[i] = NAN;
    CHECK(gc_cpu_op_avgpool2d_fwd(NULL, &c3) == GC_OK && rel_err(y, ravg, ny) < 1e-6, "%s op avg fwd", name);
    gc_op_call c4 = {GC_OP_AVGPOOL2D_BWD, {&tdy, NULL, NULL}, {&tdx, NULL, NULL}, &p};
    for (int64_t i = 0; i < nx; i++) dx[i] = NAN;
    CHECK(gc_cpu_op_avgpool2d_bwd(NULL, &c4) == GC_OK && rel_err(dx, rdavg, nx) < 1e-6, "%s op avg bwd", name);
    free(x); free(dy); free(y); free(dx); free(rmax); free(ravg); free(rdmax); free(rdavg);
}

static void test_pool(void)
{
    test_pool_case(2, 6, 6, 3, 2, 2, 2, 2, GC_PAD_VALID, 0);
    test_pool_case(2, 7, 5, 2, 3, 3, 2, 2, GC_PAD_SAME, 1);
    test_pool_case(1, 5, 6, 4, 3, 3, 1, 1, GC_PAD_SAME, 1);
    test_pool_case(2, 7, 7, 3, 2, 2, 1, 1, GC_PAD_VALID, 1);
    test_pool_case(3, 9, 8, 1, 3, 2, 2, 3, GC_PAD_SAME, 0);
    test_pool_case(2, 11, 11, 5, 2, 2, 2, 2, GC_PAD_VALID, 1);
    test_pool_case(1, 4, 4, 2, 1, 1, 3, 3, GC_PAD_VALID, 0); /* gaps: dx zero between windows */
    test_pool_case(2, 6, 7, 3, 4, 4, 3, 2, GC_PAD_SAME, 1);
    test_pool_case(2, 10, 10, 3, 2, 3, 3, 3, GC_PAD_SAME, 1); /* disjoint, pad_left 1, gaps */
    test_pool_case(2, 7, 7, 2, 2, 2, 2, 2, GC_PAD_SAME, 1);   /* disjoint, clipped last window */
    if (!g_small) test_pool_case(8, 26, 26, 32, 2, 2, 2, 2, GC_PAD_VALID, 1);
    /* N = 0 */
    gc_pool2d_params p = {2, 2, 2, 2, GC_PAD_VALID, GC_ACT_LINEAR};
    gc_tensor tx = tens(NULL, GC_F32, 4, 0, 4, 4, 2), ty = tens(NULL, GC_F32, 4, 0, 2, 2, 2);
    gc_op_call c1 = {GC_OP_MAXPOOL2D_FWD, {&tx, NULL, NULL}, {&ty, NULL, NULL}, &p};
    gc_op_call c2 = {GC_OP_MAXPOOL2D_BWD, {&tx, &ty, NULL}, {&tx, NULL, NULL}, &p};
    gc_op_call c3 = {GC_OP_AVGPOOL2D_FWD, {&tx, NULL, NULL}, {&ty, NULL, NULL}, &p};
    gc_op_call c4 = {GC_OP_AVGPOOL2D_BWD, {&ty, NULL, NULL}, {&tx, NULL, NULL}, &p};
    CHECK(gc_cpu_op_maxpool2d_fwd(NULL, &c1) == GC_OK && gc_cpu_op_maxpool2d_bwd(NULL, &c2) == GC_OK &&
              gc_cpu_op_avgpool2d_fwd(NULL, &c3) == GC_OK && gc_cpu_op_avgpool2d_bwd(NULL, &c4) == GC_OK,
          "pool N=0");
}

/* ------------------------------------------------------------------ losses */
/* Keras clips in float32: [1e-7f, 1 - 1e-7f] = [1e-7, 0.99999988] */
#define EPS ((double)1e-7f)
#define ONE_M_EPS ((double)(1.0f - 1e-7f))

/* double re-implementations of one row's loss, for values and central differences */
static double dl_softmax_xent(int64_t cols, const double *z, const double *y)
{
    double mx = z[0], s = 0, l = 0;
    for (int64_t c = 1; c < cols; c++) mx = z[c] > mx ? z[c] : mx;
    for (int64_t c = 0; c < cols; c++) s += exp(z[c] - mx);
    for (int64_t c = 0; c < cols; c++) l -= y[c] * (z[c] - mx - log(s));
    return l;
}
static double dl_sigmoid_bce(int64_t cols, const double *z, const double *y)
{
    double l = 0;
    for (int64_t c = 0; c < cols; c++)
        l += (z[c] > 0 ? z[c] : 0) - z[c] * y[c] + log1p(exp(-fabs(z[c])));
    return l / (double)cols;
}
static double clipd(double q) { return q < EPS ? EPS : (q > ONE_M_EPS ? ONE_M_EPS : q); }
static double dl_xent_probs(int64_t cols, const double *p, const double *y)
{
    double s = 0, l = 0;
    for (int64_t c = 0; c < cols; c++) s += p[c];
    for (int64_t c = 0; c < cols; c++) l -= y[c] * log(clipd(p[c] / s));
    return l;
}
static double dl_bce_probs(int64_t cols, const double *p, const double *y)
{
    double l = 0;
    for (int64_t c = 0; c < cols; c++) {
        double q = clipd(p[c]);
        l -= y[c] * log(q) + (1 - y[c]) * log(1 - q);
    }
    return l / (double)cols;
}
static double dl_mse(int64_t cols, const double *p, const double *y)
{
    double l = 0;
    for (int64_t c = 0; c < cols; c++) l += (p[c] - y[c]) * (p[c] - y[c]);
    return l / (double)cols;
}
static double dl_mae(int64_t cols, const double *p, const double *y)
{
    double l = 0;
    for (int64_t c = 0; c < cols; c++) l += fabs(p[c] - y[c]);
    return l / (double)cols;
}

typedef double (*row_loss_fn)(int64_t, const double *, const double *);

/* compares loss (rows,) and grad (rows, cols) with the double function and its central
 * differences (step h relative to |x|) */
static void check_loss(const char *name, row_loss_fn f, int64_t rows, int64_t cols,
                       const float *x, const float *y, const int32_t *yi, const float *loss,
                       const float *grad, double grad_scale, double lossTol, double gradTol,
                       double hrel)
{
    double *xd = dbuf(cols), *yd = dbuf(cols), *rl = dbuf(rows), *rg = dbuf(rows * cols);
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            xd[c] = x[r * cols + c];
            yd[c] = yi ? (c == yi[r] ? 1.0 : 0.0) : y[r * cols + c];
        }
        rl[r] = f(cols, xd, yd);
        for (int64_t c = 0; c < cols; c++) {
            double x0 = xd[c], h = hrel * (fabs(x0) > 1e-3 ? fabs(x0) : 1e-3);
            xd[c] = x0 + h;
            double lp = f(cols, xd, yd);
            xd[c] = x0 - h;
            double lm = f(cols, xd, yd);
            xd[c] = x0;
            rg[r * cols + c] = grad_scale * (lp - lm) / (2 * h);
        }
    }
    double el = rel_err(loss, rl, rows);
    CHECK(el < lossTol, "%s loss err %g", name, el);
    if (grad) {
        double eg = rel_err(grad, rg, rows * cols);
        CHECK(eg < gradTol, "%s grad err %g", name, eg);
    }
    free(xd); free(yd); free(rl); free(rg);
}

static void test_losses_size(int64_t rows, int64_t cols)
{
    const float gs = 0.37f;
    const int64_t n = rows * cols;
    float *z = frand_buf(n, -6, 6), *yf = fbuf(n), *loss = fbuf(rows), *grad = fbuf(n);
    int32_t *yi = (int32_t *)malloc(sizeof(int32_t) * (size_t)rows);
    char name[96];
    /* soft labels that sum to one, then one-hot as int32 */
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) s += (yf[r * cols + c] = frand(0, 1));
        for (int64_t c = 0; c < cols; c++) yf[r * cols + c] = (float)(yf[r * cols + c] / s);
        yi[r] = irand((int)cols);
    }
    snprintf(name, sizeof name, "softmax_xent %lldx%lld", (long long)rows, (long long)cols);
    CHECK(gc_cpu_softmax_xent(rows, cols, z, yf, NULL, loss, grad, gs) == GC_OK, "%s", name);
    check_loss(name, dl_softmax_xent, rows, cols, z, yf, NULL, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    CHECK(gc_cpu_softmax_xent(rows, cols, z, NULL, yi, loss, grad, gs) == GC_OK, "%s i32", name);
    check_loss(name, dl_softmax_xent, rows, cols, z, NULL, yi, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    CHECK(gc_cpu_softmax_xent(rows, cols, z, NULL, yi, loss, NULL, gs) == GC_OK, "%s no grad", name);
    /* labels that do not sum to one: the gradient is still the loss's derivative */
    float *yu = frand_buf(n, 0, 2);
    CHECK(gc_cpu_softmax_xent(rows, cols, z, yu, NULL, loss, grad, gs) == GC_OK, "%s unnormalised", name);
    check_loss(name, dl_softmax_xent, rows, cols, z, yu, NULL, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    free(yu);

    /* sigmoid bce: logits up to +-40, labels in [0, 1] */
    float *zb = frand_buf(n, -40, 40), *yb = frand_buf(n, 0, 1);
    for (int64_t i = 0; i < n / 2; i++) zb[i] = frand(-3, 3);
    snprintf(name, sizeof name, "sigmoid_bce %lldx%lld", (long long)rows, (long long)cols);
    CHECK(gc_cpu_sigmoid_bce(rows, cols, zb, yb, loss, grad, gs) == GC_OK, "%s", name);
    check_loss(name, dl_sigmoid_bce, rows, cols, zb, yb, NULL, loss, grad, gs, 1e-6, 1e-5, 1e-6);

    /* categorical on probabilities: unnormalised rows, some entries far below the clip */
    float *p = frand_buf(n, 0.05, 1);
    for (int64_t r = 0; r < rows; r++)
        if (r % 3 == 1) p[r * cols + irand((int)cols)] = 1e-12f;
    snprintf(name, sizeof name, "xent_probs %lldx%lld", (long long)rows, (long long)cols);
    CHECK(gc_cpu_xent_probs(0, rows, cols, p, yf, NULL, loss, grad, gs) == GC_OK, "%s", name);
    check_loss(name, dl_xent_probs, rows, cols, p, yf, NULL, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    CHECK(gc_cpu_xent_probs(0, rows, cols, p, NULL, yi, loss, grad, gs) == GC_OK, "%s i32", name);
    check_loss(name, dl_xent_probs, rows, cols, p, NULL, yi, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    /* a row where one class holds all the mass: q > 1 - eps, clipped */
    {
        float pr[3] = {1.0f, 1e-12f, 1e-12f}, yr[3] = {1, 0, 0}, l, gr[3];
        gc_cpu_xent_probs(0, 1, 3, pr, yr, NULL, &l, gr, 1.0f);
        CHECK(fabs(l + log(ONE_M_EPS)) < 1e-9 && gr[0] == 0.0f && gr[1] == 0.0f && gr[2] == 0.0f,
              "xent_probs saturated row: loss %g grads %g %g %g", (double)l, (double)gr[0],
              (double)gr[1], (double)gr[2]);
    }
    /* binary on probabilities, with values beyond both clip bounds */
    float *pb = frand_buf(n, 0.001, 0.999);
    for (int64_t i = 0; i < n; i += 7) pb[i] = (i / 7) % 2 ? 1e-9f : ((i / 7) % 4 ? 0.99999994f : 1.0f);
    snprintf(name, sizeof name, "bce_probs %lldx%lld", (long long)rows, (long long)cols);
    CHECK(gc_cpu_xent_probs(1, rows, cols, pb, yb, NULL, loss, grad, gs) == GC_OK, "%s", name);
    check_loss(name, dl_bce_probs, rows, cols, pb, yb, NULL, loss, grad, gs, 1e-6, 1e-5, 3e-8);
    for (int64_t i = 0; i < n; i += 7) CHECK(grad[i] == 0.0f, "%s clipped grad %g", name, (double)grad[i]);

    /* regression, with exact equalities for mae */
    float *t = frand_buf(n, -2, 2), *pr = frand_buf(n, -2, 2);
    for (int64_t i = 0; i < n; i++) /* equal every 5th; elsewhere clear of the kink */
        if (i % 5 == 0) pr[i] = t[i];
        else if (fabs(pr[i] - t[i]) < 1e-3) pr[i] = t[i] + 0.01f;
    snprintf(name, sizeof name, "mse %lldx%lld", (long long)rows, (long long)cols);
    CHECK(gc_cpu_regression_loss(GC_REG_MSE, rows, cols, pr, t, loss, grad, gs) == GC_OK, "%s", name);
    check_loss(name, dl_mse, rows, cols, pr, t, NULL, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    snprintf(name, sizeof name, "mae %lldx%lld", (long long)rows, (long long)cols);
    CHECK(gc_cpu_regression_loss(GC_REG_MAE, rows, cols, pr, t, loss, grad, gs) == GC_OK, "%s", name);
    check_loss(name, dl_mae, rows, cols, pr, t, NULL, loss, grad, gs, 1e-6, 1e-5, 1e-6);
    for (int64_t i = 0; i < n; i += 5) CHECK(grad[i] == 0.0f, "mae grad at equality");

    free(z); free(yf); free(loss); free(grad); free(yi); free(zb); free(yb); free(p); free(pb);
    free(t); free(pr);
}

static void test_losses(void)
{
    test_losses_size(7, 5);
    test_losses_size(3, 1);
    if (!g_small) test_losses_size(300, 200);

    /* labels out of range */
    float z[10], l[2], gr[10];
    for (int i = 0; i < 10; i++) z[i] = (float)i;
    int32_t bad[2] = {1, 5};
    gc_clear_error();
    gc_status st = gc_cpu_softmax_xent(2, 5, z, NULL, bad, l, gr, 1.0f);
    CHECK(st == GC_ERR_INVALID_ARG && strstr(gc_last_error(), "labels: value 5 at row 1 is outside [0, 5)"),
          "softmax_xent bad label: %d '%s'", (int)st, gc_last_error());
    bad[1] = -1;
    st = gc_cpu_xent_probs(0, 2, 5, z, NULL, bad, l, gr, 1.0f);
    CHECK(st == GC_ERR_INVALID_ARG && strstr(gc_last_error(), "value -1 at row 1"),
          "xent_probs bad label: '%s'", gc_last_error());

    /* adapters: 3-D logits (2, 3, 4) -> rows 6; i32 labels (6,); gradient absent / present */
    float x[24], y[24], loss[6], g1[24], g2[24];
    int32_t yi[6] = {0, 3, 2, 1, 1, 0};
    for (int i = 0; i < 24; i++) {
        x[i] = frand(0.1, 1);
        y[i] = frand(0, 1);
    }
    gc_loss_params lp = {0.5f, 0, GC_REG_MSE};
    gc_tensor tx = tens(x, GC_F32, 3, 2, 3, 4, 0), ty = tens(y, GC_F32, 3, 2, 3, 4, 0);
    gc_tensor tyi = tens(yi, GC_I32, 1, 6, 0, 0, 0), tl = tens(loss, GC_F32, 1, 6, 0, 0, 0);
    gc_tensor tg = tens(g1, GC_F32, 3, 2, 3, 4, 0), tgnull = tens(NULL, GC_F32, 3, 2, 3, 4, 0);
    float rl[6];
    gc_op_call c = {GC_OP_SOFTMAX_XENT, {&tx, &tyi, NULL}, {&tl, &tg, NULL}, &lp};
    CHECK(gc_cpu_op_softmax_xent(NULL, &c) == GC_OK, "op softmax_xent");
    gc_cpu_softmax_xent(6, 4, x, NULL, yi, rl, g2, 0.5f);
    CHECK(memcmp(rl, loss, sizeof rl) == 0 && memcmp(g1, g2, sizeof g1) == 0, "op softmax_xent values");
    c.out[1] = &tgnull;
    CHECK(gc_cpu_op_softmax_xent(NULL, &c) == GC_OK, "op softmax_xent, gradient data NULL");
    c.out[1] = NULL;
    CHECK(gc_cpu_op_softmax_xent(NULL, &c) == GC_OK, "op softmax_xent, gradient tensor NULL");
    gc_op_call c2 = {GC_OP_SIGMOID_BCE, {&tx, &ty, NULL}, {&tl, &tg, NULL}, &lp};
    CHECK(gc_cpu_op_sigmoid_bce(NULL, &c2) == GC_OK, "op sigmoid_bce");
    gc_cpu_sigmoid_bce(6, 4, x, y, rl, g2, 0.5f);
    CHECK(memcmp(rl, loss, sizeof rl) == 0 && memcmp(g1, g2, sizeof g1) == 0, "op sigmoid_bce values");
    gc_op_call c3 = {GC_OP_XENT_PROBS, {&tx, &tyi, NULL}, {&tl, &tg, NULL}, &lp};
    CHECK(gc_cpu_op_xent_probs(NULL, &c3) == GC_OK, "op xent_probs");
    gc_cpu_xent_probs(0, 6, 4, x, NULL, yi, rl, g2, 0.5f);
    CHECK(memcmp(rl, loss, sizeof rl) == 0 && memcmp(g1, g2, sizeof g1) == 0, "op xent_probs values");
    lp.binary = 1;
    c3.in[1] = &ty;
    CHECK(gc_cpu_op_xent_probs(NULL, &c3) == GC_OK, "op xent_probs binary");
    gc_cpu_xent_probs(1, 6, 4, x, y, NULL, rl, g2, 0.5f);
    CHECK(memcmp(rl, loss, sizeof rl) == 0 && memcmp(g1, g2, sizeof g1) == 0, "op bce values");
    lp.kind = GC_REG_MAE;
    gc_op_call c4 = {GC_OP_REGRESSION_LOSS, {&tx, &ty, NULL}, {&tl, NULL, NULL}, &lp};
    CHECK(gc_cpu_op_regression_loss(NULL, &c4) == GC_OK, "op regression_loss");
    gc_cpu_regression_loss(GC_REG_MAE, 6, 4, x, y, rl, NULL, 0.5f);
    CHECK(memcmp(rl, loss, sizeof rl) == 0, "op regression values");
}

/* ------------------------------------------------------------------ bias grad */
static void test_bias_grad(void)
{
    const int64_t shapes[][2] = {{3, 5}, {1000, 37}, {64, 1}, {20000, 64}, {0, 4}};
    for (int s = 0; s < 5; s++) {
        int64_t rows = shapes[s][0], cols = shapes[s][1];
        if (g_small && rows * cols > 50000) continue;
        float *dy = frand_buf(rows * cols, -1, 1), *db = fbuf(cols);
        double *ref = dbuf(cols), *mag = dbuf(cols);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t c = 0; c < cols; c++) {
                ref[c] += dy[r * cols + c];
                mag[c] += fabs(dy[r * cols + c]);
            }
        /* float accumulation: error ~ eps * sqrt(rows) * sum |dy| (sums may cancel) */
        const double k = 5e-7 * sqrt((double)rows + 1);
        for (int ti = 1; ti <= 3; ti++) {
            set_threads(ti);
            for (int64_t c = 0; c < cols; c++) db[c] = NAN;
            int64_t bad = gc_cpu_bias_grad(rows, cols, dy, db) != GC_OK;
            for (int64_t c = 0; c < cols; c++) bad += !(fabs(db[c] - ref[c]) <= k * mag[c]);
            CHECK(bad == 0, "bias_grad %lldx%lld t%d: %lld off", (long long)rows, (long long)cols, ti,
                  (long long)bad);
        }
        gc_tensor tdy = tens(dy, GC_F32, 2, rows, cols, 0, 0), tdb = tens(db, GC_F32, 1, cols, 0, 0, 0);
        gc_no_params np = {0};
        gc_op_call c = {GC_OP_BIAS_GRAD, {&tdy, NULL, NULL}, {&tdb, NULL, NULL}, &np};
        for (int64_t c2 = 0; c2 < cols; c2++) db[c2] = NAN;
        int64_t bad = gc_cpu_op_bias_grad(NULL, &c) != GC_OK;
        for (int64_t c2 = 0; c2 < cols; c2++) bad += !(fabs(db[c2] - ref[c2]) <= k * mag[c2]);
        CHECK(bad == 0, "op bias_grad");
        free(mag);
        free(dy); free(db); free(ref);
    }
    set_threads(2);
}

/* ------------------------------------------------------------------ dropout */
static void test_dropout(void)
{
    const int64_t n = g_small ? 5000 : 300000;
    const float rate = 0.3f, scale = 1.0f / (1.0f - rate);
    const uint64_t seed = next_u64();
    float *x = frand_buf(n, -1, 1), *y = fbuf(n), *dx = fbuf(n);
    CHECK(gc_cpu_dropout_fwd(n, x, y, rate, seed) == GC_OK, "dropout_fwd");
    CHECK(gc_cpu_dropout_bwd(n, x, dx, rate, seed) == GC_OK, "dropout_bwd");
    int64_t kept = 0, bad = 0;
    for (int64_t i = 0; i < n; i++) {
        int keep = gc_uniform01(seed, (uint64_t)i) >= rate;
        kept += keep;
        float want = keep ? x[i] * scale : 0.0f;
        bad += y[i] != want || dx[i] != want;
    }
    CHECK(bad == 0, "dropout mask mismatch at %lld elements", (long long)bad);
    double frac = (double)kept / (double)n;
    CHECK(fabs(frac - (1 - rate)) < (g_small ? 0.03 : 0.005), "dropout keep fraction %g", frac);
    /* rate 0 copies; in place works */
    CHECK(gc_cpu_dropout_fwd(n, x, y, 0.0f, seed) == GC_OK && memcmp(x, y, sizeof(float) * (size_t)n) == 0,
          "dropout rate 0");
    memcpy(dx, x, sizeof(float) * (size_t)n);
    gc_cpu_dropout_fwd(n, dx, dx, rate, seed);
    gc_cpu_dropout_fwd(n, x, y, rate, seed);
    CHECK(memcmp(dx, y, sizeof(float) * (size_t)n) == 0, "dropout in place");
    CHECK(gc_cpu_dropout_fwd(n, x, y, 1.0f, seed) == GC_ERR_INVALID_ARG, "dropout rate 1 rejected");
    gc_dropout_params dp = {rate, seed, NULL};
    gc_tensor tx = tens(x, GC_F32, 2, n / 5, 5, 0, 0), ty = tens(dx, GC_F32, 2, n / 5, 5, 0, 0);
    gc_op_call c = {GC_OP_DROPOUT_FWD, {&tx, NULL, NULL}, {&ty, NULL, NULL}, &dp};
    CHECK(gc_cpu_op_dropout_fwd(NULL, &c) == GC_OK && memcmp(dx, y, sizeof(float) * (size_t)(n / 5 * 5)) == 0,
          "op dropout_fwd");
    c.op = GC_OP_DROPOUT_BWD;
    CHECK(gc_cpu_op_dropout_bwd(NULL, &c) == GC_OK && memcmp(dx, y, sizeof(float) * (size_t)(n / 5 * 5)) == 0,
          "op dropout_bwd");
    free(x); free(y); free(dx);
}

/* ------------------------------------------------------------------ optimizers */
static void test_optim_size(int64_t n)
{
    float *w0 = frand_buf(n, -0.1, 0.1), *g = frand_buf(n, -1, 1), *m0 = frand_buf(n, -0.1, 0.1);
    float *v0 = frand_buf(n, 0, 0.5), *w = fbuf(n), *m = fbuf(n), *v = fbuf(n);
    double *rw = dbuf(n), *rm = dbuf(n), *rv = dbuf(n), *dstep = dbuf(n);
    float *fstep = fbuf(n);
    const size_t bytes = sizeof(float) * (size_t)n;
    char name[64];

    /* adam: elementwise, against error bounds scaled by the operands (m = m0 + (g-m0)/10
     * may cancel, so a plain relative error would be meaningless for single elements) */
    gc_adam_params ap = {0.01f, 0.9f, 0.999f, 1e-7f, 7, NULL, NULL};
    double alpha = 0.01 * sqrt(1 - pow(0.999, 7)) / (1 - pow(0.9, 7));
    memcpy(w, w0, bytes); memcpy(m, m0, bytes); memcpy(v, v0, bytes);
    snprintf(name, sizeof name, "adam n=%lld", (long long)n);
    CHECK(gc_cpu_adam(n, w, g, m, v, &ap) == GC_OK, "%s", name);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        double sm = fabs(m0[i]) + fabs(g[i]), sv = fabs(v0[i]) + (double)g[i] * g[i];
        rm[i] = m0[i] + ((double)g[i] - m0[i]) * (1 - 0.9);
        rv[i] = v0[i] + ((double)g[i] * g[i] - v0[i]) * (1 - 0.999);
        double den = sqrt(rv[i]) + 1e-7;
        dstep[i] = -alpha * rm[i] / den;
        double tol_step = 1e-5 * alpha * sm / den + 2e-7 * fabs(w0[i]) + 1e-5 * fabs(dstep[i]);
        bad += !(fabs(m[i] - rm[i]) <= 1e-6 * sm) || !(fabs(v[i] - rv[i]) <= 1e-6 * sv) ||
               !(fabs((double)w[i] - w0[i] - dstep[i]) <= tol_step);
    }
    CHECK(bad == 0, "%s: %lld elements off", name, (long long)bad);
    /* adapter: the same values as the kernel */
    float *wk = fbuf(n);
    memcpy(wk, w, bytes);
    memcpy(w, w0, bytes); memcpy(m, m0, bytes); memcpy(v, v0, bytes);
    gc_tensor tg = tens(g, GC_F32, 1, n, 0, 0, 0), tw = tens(w, GC_F32, 1, n, 0, 0, 0);
    gc_tensor tm = tens(m, GC_F32, 1, n, 0, 0, 0), tv = tens(v, GC_F32, 1, n, 0, 0, 0);
    gc_op_call ca = {GC_OP_ADAM, {&tg, NULL, NULL}, {&tw, &tm, &tv}, &ap};
    CHECK(gc_cpu_op_adam(NULL, &ca) == GC_OK && memcmp(w, wk, bytes) == 0, "op adam");
    free(wk);

    /* sgd: plain, momentum, nesterov */
    for (int kind = 0; kind < 3; kind++) {
        gc_sgd_params sp = {0.05f, kind ? 0.9f : 0.0f, kind == 2, NULL, NULL};
        for (int64_t i = 0; i < n; i++) {
            if (kind == 0) {
                dstep[i] = -0.05 * g[i];
            } else {
                rm[i] = 0.9 * m0[i] - 0.05 * g[i];
                dstep[i] = kind == 2 ? 0.9 * rm[i] - 0.05 * g[i] : rm[i];
            }
        }
        memcpy(w, w0, bytes); memcpy(m, m0, bytes);
        snprintf(name, sizeof name, "sgd kind %d n=%lld", kind, (long long)n);
        CHECK(gc_cpu_sgd(n, w, g, kind ? m : NULL, &sp) == GC_OK, "%s", name);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
            double sm = 0.9 * fabs(m0[i]) + 0.05 * fabs(g[i]);
            bad += !(fabs((double)w[i] - w0[i] - dstep[i]) <= 2e-6 * sm + 2e-7 * fabs(w0[i])) ||
                   (kind && !(fabs(m[i] - rm[i]) <= 1e-6 * sm));
        }
        CHECK(bad == 0, "%s: %lld elements off", name, (long long)bad);
        memcpy(w, w0, bytes); memcpy(m, m0, bytes);
        gc_tensor tmn = tens(NULL, GC_F32, 1, n, 0, 0, 0);
        gc_op_call cs = {GC_OP_SGD, {&tg, NULL, NULL}, {&tw, kind ? &tm : &tmn, NULL}, &sp};
        CHECK(gc_cpu_op_sgd(NULL, &cs) == GC_OK, "op sgd");
        for (int64_t i = 0; i < n; i++) fstep[i] = w[i] - w0[i];
        bad = 0;
        for (int64_t i = 0; i < n; i++)
            bad += !(fabs((double)w[i] - w0[i] - dstep[i]) <=
                     2e-6 * (0.9 * fabs(m0[i]) + 0.05 * fabs(g[i])) + 2e-7 * fabs(w0[i]));
        CHECK(bad == 0, "op sgd values");
        if (kind == 0) {
            cs.out[1] = NULL;
            memcpy(w, w0, bytes);
            CHECK(gc_cpu_op_sgd(NULL, &cs) == GC_OK, "op sgd without momentum tensor");
            /* momentum 0 with a buffer: the same plain step, the buffer left as it was */
            float *wp = fbuf(n);
            memcpy(wp, w, bytes);
            memcpy(w, w0, bytes); memcpy(m, m0, bytes);
            CHECK(gc_cpu_sgd(n, w, g, m, &sp) == GC_OK && memcmp(w, wp, bytes) == 0 &&
                      memcmp(m, m0, bytes) == 0,
                  "sgd momentum 0 with a buffer");
            free(wp);
        } else {
            CHECK(gc_cpu_sgd(n, w, g, NULL, &sp) == GC_ERR_INVALID_ARG, "sgd momentum without buffer");
        }
    }

    /* rmsprop */
    gc_rmsprop_params rp = {0.001f, 0.9f, 1e-7f, NULL, NULL};
    for (int64_t i = 0; i < n; i++) {
        rv[i] = 0.9 * v0[i] + (1 - 0.9) * (double)g[i] * g[i];
        dstep[i] = -0.001 * g[i] / sqrt(rv[i] + 1e-7);
    }
    memcpy(w, w0, bytes); memcpy(v, v0, bytes);
    snprintf(name, sizeof name, "rmsprop n=%lld", (long long)n);
    CHECK(gc_cpu_rmsprop(n, w, g, v, &rp) == GC_OK, "%s", name);
    int64_t badr = 0;
    for (int64_t i = 0; i < n; i++)
        badr += !(fabs(v[i] - rv[i]) <= 1e-6 * rv[i]) ||
                !(fabs((double)w[i] - w0[i] - dstep[i]) <= 1e-5 * fabs(dstep[i]) + 2e-7 * fabs(w0[i]));
    CHECK(badr == 0, "%s: %lld elements off", name, (long long)badr);
    wk = fbuf(n);
    memcpy(wk, w, bytes);
    memcpy(w, w0, bytes); memcpy(v, v0, bytes);
    gc_op_call cr = {GC_OP_RMSPROP, {&tg, NULL, NULL}, {&tw, &tv, NULL}, &rp};
    CHECK(gc_cpu_op_rmsprop(NULL, &cr) == GC_OK && memcmp(w, wk, bytes) == 0, "op rmsprop");
    free(wk);

    free(w0); free(g); free(m0); free(v0); free(w); free(m); free(v);
    free(rw); free(rm); free(rv); free(dstep); free(fstep);
}

static void test_optim(void)
{
    test_optim_size(1);
    test_optim_size(1037);
    if (!g_small) test_optim_size(200003);
}

/* ------------------------------------------------------------------ accuracy */
static void test_accuracy(void)
{
    /* hand-made ties: argmax takes the first index */
    const float pred[] = {1, 3, 3, /**/ 3, 3, 1, /**/ 0, 0, 0, /**/ 2, 1, 5};
    const float lab[] = {0, 0, 1, /**/ 1, 0, 0, /**/ 1, 0, 0, /**/ 0, 0, 1};
    const int32_t li[] = {2, 0, 0, 2};
    double cnt = -1;
    CHECK(gc_cpu_accuracy(GC_ACC_CATEGORICAL, 4, 3, pred, lab, NULL, 0.5f, &cnt) == GC_OK && cnt == 3.0,
          "categorical accuracy %g", cnt);
    CHECK(gc_cpu_accuracy(GC_ACC_SPARSE, 4, 3, pred, NULL, li, 0.5f, &cnt) == GC_OK && cnt == 3.0,
          "sparse accuracy %g", cnt);
    const float bp[] = {0.2f, 0.7f, 0.5f, 0.9f}, bl[] = {0, 1, 1, 0};
    /* row 0: (0==0) (1==1) -> 1; row 1: (0==1) (1==0) -> 0 */
    CHECK(gc_cpu_accuracy(GC_ACC_BINARY, 2, 2, bp, bl, NULL, 0.5f, &cnt) == GC_OK && cnt == 1.0,
          "binary accuracy %g", cnt);
    /* random, against a direct count */
    const int64_t rows = g_small ? 50 : 20000, cols = 7;
    float *p = frand_buf(rows * cols, 0, 1), *y = fbuf(rows * cols);
    int32_t *yi = (int32_t *)malloc(sizeof(int32_t) * (size_t)rows);
    double want = 0, wantb = 0;
    for (int64_t r = 0; r < rows; r++) {
        yi[r] = irand((int)cols);
        int64_t am = 0;
        for (int64_t c = 0; c < cols; c++) {
            y[r * cols + c] = c == yi[r] ? 1.0f : 0.0f;
            if (p[r * cols + c] > p[r * cols + am]) am = c;
        }
        want += am == yi[r];
        int64_t hits = 0;
        for (int64_t c = 0; c < cols; c++) hits += (p[r * cols + c] > 0.3f) == (y[r * cols + c] > 0.5f);
        wantb += (double)hits / cols;
    }
    CHECK(gc_cpu_accuracy(GC_ACC_CATEGORICAL, rows, cols, p, y, NULL, 0.5f, &cnt) == GC_OK && cnt == want,
          "categorical random");
    CHECK(gc_cpu_accuracy(GC_ACC_SPARSE, rows, cols, p, NULL, yi, 0.5f, &cnt) == GC_OK && cnt == want,
          "sparse random");
    CHECK(gc_cpu_accuracy(GC_ACC_BINARY, rows, cols, p, y, NULL, 0.3f, &cnt) == GC_OK &&
              fabs(cnt - wantb) < 1e-9 * rows,
          "binary random %g %g", cnt, wantb);
    /* adapter */
    float out = -1;
    gc_accuracy_params acp = {GC_ACC_SPARSE, 0.5f};
    gc_tensor tp = tens(p, GC_F32, 2, rows, cols, 0, 0), tyi = tens(yi, GC_I32, 1, rows, 0, 0, 0);
    gc_tensor to = tens(&out, GC_F32, 1, 1, 0, 0, 0), ty = tens(y, GC_F32, 2, rows, cols, 0, 0);
    gc_op_call c = {GC_OP_ACCURACY, {&tp, &tyi, NULL}, {&to, NULL, NULL}, &acp};
    CHECK(gc_cpu_op_accuracy(NULL, &c) == GC_OK && out == (float)want, "op accuracy sparse");
    acp.kind = GC_ACC_CATEGORICAL;
    c.in[1] = &ty;
    CHECK(gc_cpu_op_accuracy(NULL, &c) == GC_OK && out == (float)want, "op accuracy categorical");
    free(p); free(y); free(yi);
}

int main(int argc, char **argv)
{
    uint64_t seed = (uint64_t)time(NULL);
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--small") == 0) g_small = 1;
        else if (strcmp(argv[i], "--seed") == 0 && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
    }
    g_rng = seed;
    printf("test_cpu_ops: seed %llu%s, sgemm variant %s\n", (unsigned long long)seed,
           g_small ? " (small)" : "", gc_cpu_sgemm_variant());
    test_act();
    test_conv();
    test_pool();
    test_losses();
    test_bias_grad();
    test_dropout();
    test_optim();
    test_accuracy();
    printf("test_cpu_ops: %ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
