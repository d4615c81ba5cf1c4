/* test_backend_standalone.cu -- checks the CUDA backend against the CPU backend without
 * Python: every memory-bound op (act, pool2d, losses, bias_grad, dropout, optimizers,
 * accuracy, cast) on random inputs in f32 / f16 / bf16 storage, plus the backend
 * machinery: graph capture + replay equals direct launch, out-of-range labels, an
 * impossible allocation (GC_ERR_NOMEM with a message, never a crash), workspace growth
 * refused during capture, the dropout hash on device equal to gpucmp.h's, the fused
 * optimizer equal to the per-tensor ops, and misaligned (scalar-path) tensors.
 *
 * Both backends get the same stored bytes (inputs are rounded to the storage dtype
 * first) and run through gc_op_run, so the comparison is CPU(f32 compute) vs GPU(f32
 * compute): errors are float rounding only. Outputs are poisoned (all-ones bytes = NaN)
 * before a run so unwritten elements show. Element-wise ops whose CPU and GPU formulas
 * are identical (pooling, dropout, optimizers, cast, relu/linear) must match bit for
 * bit in f32. Prints one line per check and a summary; exit status 0 when all pass,
 * 77 when there is no CUDA device. Build: tests/cuda/Makefile.
 */
#include "common.cuh"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <string>
#include <vector>

extern "C" const gc_backend *gc_cpu_backend(void);

static int g_fail, g_pass;
static const gc_backend *CPU, *GPU;

static const char *dn(gc_dtype d) { return gc_dtype_name(d); }

static void report(bool ok, const std::string &what, const char *fmt = "", ...)
{
    char extra[512] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(extra, sizeof extra, fmt, ap);
    va_end(ap);
    printf("%s  %s %s\n", ok ? "PASS" : "FAIL", what.c_str(), extra);
    fflush(stdout);
    if (ok) g_pass++;
    else g_fail++;
}

/* ------------------------------------------------------------------ host tensors */
static uint64_t rng_state = 0x1234567ull;
static double urand() /* [0, 1) */
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}
static float nrand() { return (float)(sqrt(-2.0 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand())); }

struct HT {
    gc_dtype dt;
    int nd;
    int64_t shape[GC_MAX_DIMS];
    std::vector<uint8_t> b; /* stored bytes */
    int64_t numel() const
    {
        int64_t n = 1;
        for (int i = 0; i < nd; i++) n *= shape[i];
        return n;
    }
};

static HT make(gc_dtype dt, std::vector<int64_t> shape, const std::vector<float> &vals)
{
    HT t;
    t.dt = dt;
    t.nd = (int)shape.size();
    for (int i = 0; i < t.nd; i++) t.shape[i] = shape[i];
    size_t n = (size_t)t.numel();
    t.b.resize(n * gc_dtype_size(dt) + 1);
    if (dt == GC_F32) memcpy(t.b.data(), vals.data(), n * 4);
    else if (dt == GC_F16) gc_f32_to_f16(vals.data(), (uint16_t *)t.b.data(), n);
    else if (dt == GC_BF16) gc_f32_to_bf16(vals.data(), (uint16_t *)t.b.data(), n);
    else memcpy(t.b.data(), vals.data(), n * 4); /* i32: vals hold the bits */
    return t;
}

static HT make_i32(std::vector<int64_t> shape, const std::vector<int32_t> &v)
{
    HT t;
    t.dt = GC_I32;
    t.nd = (int)shape.size();
    for (int i = 0; i < t.nd; i++) t.shape[i] = shape[i];
    t.b.resize(v.size() * 4 + 1);
    memcpy(t.b.data(), v.data(), v.size() * 4);
    return t;
}

static HT poison_like(gc_dtype dt, std::vector<int64_t> shape)
{
    HT t;
    t.dt = dt;
    t.nd = (int)shape.size();
    for (int i = 0; i < t.nd; i++) t.shape[i] = shape[i];
    t.b.assign((size_t)t.numel() * gc_dtype_size(dt) + 1, 0xFF);
    return t;
}

static std::vector<float> randn(int64_t n, float scale = 1.0f)
{
    std::vector<float> v((size_t)n);
    for (auto &x : v) x = nrand() * scale;
    return v;
}

static std::vector<double> as_f64(const HT &t, const uint8_t *bytes)
{
    size_t n = (size_t)t.numel();
    std::vector<float> f(n);
    if (t.dt == GC_F32) memcpy(f.data(), bytes, n * 4);
    else if (t.dt == GC_F16) gc_f16_to_f32((const uint16_t *)bytes, f.data(), n);
    else if (t.dt == GC_BF16) gc_bf16_to_f32((const uint16_t *)bytes, f.data(), n);
    else
        for (size_t i = 0; i < n; i++) f[i] = (float)((const int32_t *)bytes)[i];
    return std::vector<double>(f.begin(), f.end());
}

static double tol_for(gc_dtype dt, double f32tol)
{
    return dt == GC_F32 ? f32tol : (dt == GC_F16 ? 2e-3 : 1e-2);
}

/* ------------------------------------------------------------------ running one op on both */
struct Slot {
    HT *t;       /* NULL: absent (data NULL) */
    bool inout;  /* output read too (optimizer state): keep its initial content */
};

static gc_tensor view(const HT *t, void *data)
{
    gc_tensor v;
    memset(&v, 0, sizeof v);
    if (!t) return v;
    v.data = data;
    v.dtype = t->dt;
    v.ndim = t->nd;
    for (int i = 0; i < t->nd; i++) v.shape[i] = t->shape[i];
    return v;
}

/* Runs op on the CPU and the GPU; returns the outputs of both through cpu_out / gpu_out. */
static gc_status run_both(gc_op op, const void *params, std::vector<HT *> ins, std::vector<Slot> outs,
                          std::vector<std::vector<uint8_t>> &cpu_out, std::vector<std::vector<uint8_t>> &gpu_out,
                          gc_status *cpu_status, size_t misalign = 0)
{
    gc_tensor ci[GC_MAX_OP_IN], gi[GC_MAX_OP_IN], co[GC_MAX_OP_OUT], go[GC_MAX_OP_OUT];
    std::vector<std::vector<uint8_t>> hin(ins.size());
    std::vector<void *> dptr;
    gc_op_call cc, gcall;
    memset(&cc, 0, sizeof cc);
    memset(&gcall, 0, sizeof gcall);
    cc.op = gcall.op = op;
    cc.params = gcall.params = params;
    gc_status st = GC_OK;
    for (size_t k = 0; k < ins.size(); k++) {
        HT *t = ins[k];
        if (!t) {
            ci[k] = view(NULL, NULL);
            gi[k] = view(NULL, NULL);
        } else {
            hin[k] = t->b;
            ci[k] = view(t, hin[k].data());
            size_t nb = (size_t)t->numel() * gc_dtype_size(t->dt);
            void *d = NULL;
            if ((st = GPU->alloc(GPU, nb + misalign + 16, &d))) return st;
            dptr.push_back(d);
            d = (char *)d + misalign;
            if ((st = GPU->upload(GPU, d, t->b.data(), nb))) return st;
            gi[k] = view(t, d);
        }
        cc.in[k] = &ci[k];
        gcall.in[k] = &gi[k];
    }
    cpu_out.assign(outs.size(), {});
    gpu_out.assign(outs.size(), {});
    std::vector<void *> gdata(outs.size(), NULL);
    for (size_t k = 0; k < outs.size(); k++) {
        HT *t = outs[k].t;
        if (!t) {
            co[k] = view(NULL, NULL);
            go[k] = view(NULL, NULL);
        } else {
            size_t nb = (size_t)t->numel() * gc_dtype_size(t->dt);
            cpu_out[k] = outs[k].inout ? t->b : std::vector<uint8_t>(nb + 1, 0xFF);
            co[k] = view(t, cpu_out[k].data());
            void *d = NULL;
            if ((st = GPU->alloc(GPU, nb + misalign + 16, &d))) return st;
            dptr.push_back(d);
            d = (char *)d + misalign;
            if ((st = GPU->upload(GPU, d, cpu_out[k].data(), nb))) return st;
            gdata[k] = d;
            go[k] = view(t, d);
        }
        cc.out[k] = &co[k];
        gcall.out[k] = &go[k];
    }
    *cpu_status = gc_op_run(CPU, &cc);
    st = gc_op_run(GPU, &gcall);
    if (st == GC_OK) st = GPU->sync(GPU);
    for (size_t k = 0; k < outs.size() && st == GC_OK; k++) {
        HT *t = outs[k].t;
        if (!t) continue;
        size_t nb = (size_t)t->numel() * gc_dtype_size(t->dt);
        gpu_out[k].assign(nb + 1, 0);
        st = GPU->download(GPU, gpu_out[k].data(), gdata[k], nb);
    }
    for (void *d : dptr) GPU->release(GPU, d);
    return st;
}

/* Compares output k; returns relative error ||g - c|| / ||c|| (NaN mismatch: inf). */
static double compare(const HT &t, const std::vector<uint8_t> &c, const std::vector<uint8_t> &g, bool *bit_equal,
                      int64_t *nan_bad)
{
    size_t nb = (size_t)t.numel() * gc_dtype_size(t.dt);
    *bit_equal = memcmp(c.data(), g.data(), nb) == 0;
    auto a = as_f64(t, c.data()), b = as_f64(t, g.data());
    double num = 0, den = 0;
    *nan_bad = 0;
    for (size_t i = 0; i < a.size(); i++) {
        bool na = a[i] != a[i], nbn = b[i] != b[i];
        if (na || nbn) {
            if (na != nbn) (*nan_bad)++;
            continue;
        }
        if (isinf(a[i]) || isinf(b[i])) {
            if (a[i] != b[i]) (*nan_bad)++;
            continue;
        }
        num += (a[i] - b[i]) * (a[i] - b[i]);
        den += a[i] * a[i];
    }
    return num == 0 ? 0.0 : sqrt(num) / (den > 0 ? sqrt(den) : 1e-30);
}

static void check(const std::string &name, gc_op op, const void *params, std::vector<HT *> ins,
                  std::vector<Slot> outs, double f32tol, bool bitexact_f32, size_t misalign = 0)
{
    std::vector<std::vector<uint8_t>> c, g;
    gc_status cs = GC_OK;
    gc_status st = run_both(op, params, ins, outs, c, g, &cs, misalign);
    if (st != GC_OK || cs != GC_OK) {
        report(false, name, "gpu=%s cpu=%s: %s", gc_status_name(st), gc_status_name(cs), gc_last_error());
        return;
    }
    bool ok = true;
    std::string info;
    for (size_t k = 0; k < outs.size(); k++) {
        if (!outs[k].t) continue;
        bool be;
        int64_t nanbad;
        double rel = compare(*outs[k].t, c[k], g[k], &be, &nanbad);
        double tol = tol_for(outs[k].t->dt, f32tol);
        bool need_bits = bitexact_f32 && outs[k].t->dt == GC_F32;
        bool okk = nanbad == 0 && rel <= tol && (!need_bits || be);
        char buf[160];
        snprintf(buf, sizeof buf, "[out%zu rel=%.2e%s%s]", k, rel, be ? " bit-exact" : "",
                 nanbad ? " NaN/Inf MISMATCH" : "");
        info += buf;
        ok = ok && okk;
    }
    report(ok, name, "%s", info.c_str());
}

/* ------------------------------------------------------------------ op checks */
static const gc_dtype DTS[3] = {GC_F32, GC_F16, GC_BF16};

static void test_act()
{
    const char *names[] = {"linear", "relu", "tanh", "sigmoid", "softmax"};
    std::vector<std::vector<int64_t>> shapes = {{4, 33, 17}, {37, 19}, {5, 3001}, {1000}};
    for (gc_dtype dt : DTS)
        for (int a = 0; a < GC_ACT_COUNT; a++)
            for (auto &shp : shapes) {
                int64_t n = 1;
                for (auto s : shp) n *= s;
                HT x = make(dt, shp, randn(n, 3.0f));
                HT y = poison_like(dt, shp);
                gc_act_params p = {(gc_act)a};
                char nm[128];
                snprintf(nm, sizeof nm, "act_fwd %s %s n=%lld", names[a], dn(dt), (long long)n);
                bool exact = a == GC_ACT_LINEAR || a == GC_ACT_RELU;
                check(nm, GC_OP_ACT_FWD, &p, {&x}, {{&y, false}}, 2e-6, exact);
                /* backward from the forward output (computed on the CPU) */
                std::vector<std::vector<uint8_t>> c, g;
                gc_status cs;
                run_both(GC_OP_ACT_FWD, &p, {&x}, {{&y, false}}, c, g, &cs);
                HT yv = y;
                yv.b = c[0];
                HT dy = make(dt, shp, randn(n));
                HT dx = poison_like(dt, shp);
                snprintf(nm, sizeof nm, "act_bwd %s %s n=%lld", names[a], dn(dt), (long long)n);
                check(nm, GC_OP_ACT_BWD, &p, {&yv, &dy}, {{&dx, false}}, 2e-6, a != GC_ACT_SOFTMAX);
            }
    /* misaligned storage: the scalar path of gc_map_launch and of the row kernels */
    for (gc_dtype dt : DTS) {
        HT x = make(dt, {3, 1001}, randn(3003, 2.0f)), y = poison_like(dt, {3, 1001});
        gc_act_params p = {GC_ACT_SIGMOID};
        check(std::string("act_fwd sigmoid misaligned ") + dn(dt), GC_OP_ACT_FWD, &p, {&x}, {{&y, false}}, 2e-6,
              false, gc_dtype_size(dt));
        gc_act_params q = {GC_ACT_SOFTMAX};
        check(std::string("act_fwd softmax misaligned ") + dn(dt), GC_OP_ACT_FWD, &q, {&x}, {{&y, false}}, 2e-6,
              false, gc_dtype_size(dt));
    }
}

static void test_pool()
{
    struct Cfg {
        int N, H, W, C, ph, pw, sh, sw;
        gc_padding pad;
    } cfgs[] = {
        {3, 11, 9, 5, 3, 3, 2, 2, GC_PAD_SAME}, {2, 8, 8, 16, 2, 2, 2, 2, GC_PAD_VALID},
        {2, 7, 10, 3, 3, 2, 1, 1, GC_PAD_SAME}, {1, 13, 13, 32, 3, 3, 2, 2, GC_PAD_VALID},
        {4, 6, 5, 7, 4, 4, 3, 1, GC_PAD_SAME},
    };
    for (gc_dtype dt : DTS)
        for (auto &c : cfgs) {
            gc_pool2d_params p = {c.ph, c.pw, c.sh, c.sw, c.pad};
            gc_pool2d_geom g;
            if (gc_pool2d_geometry(c.N, c.H, c.W, c.C, &p, &g)) {
                report(false, "pool geometry", "%s", gc_last_error());
                continue;
            }
            int64_t nx = (int64_t)c.N * c.H * c.W * c.C, ny = g.N * g.OH * g.OW * g.C;
            /* quantised values: many ties, so the first-arg-max rule is exercised */
            std::vector<float> xv((size_t)nx);
            for (auto &v : xv) v = (float)(int)(urand() * 5) - 2.0f;
            HT x = make(dt, {c.N, c.H, c.W, c.C}, xv);
            HT y = poison_like(dt, {g.N, g.OH, g.OW, g.C});
            std::vector<float> dyv = randn(ny);
            for (int64_t i = 0; i < ny; i += 7) dyv[(size_t)i] = -0.0f; /* signed zeros must survive too */
            HT dy = make(dt, {g.N, g.OH, g.OW, g.C}, dyv);
            HT dx = poison_like(dt, {c.N, c.H, c.W, c.C});
            char nm[160];
            snprintf(nm, sizeof nm, "%dx%d/%dx%d %s (%d,%d,%d,%d) %s", c.ph, c.pw, c.sh, c.sw,
                     c.pad == GC_PAD_SAME ? "same" : "valid", c.N, c.H, c.W, c.C, dn(dt));
            check(std::string("maxpool2d_fwd ") + nm, GC_OP_MAXPOOL2D_FWD, &p, {&x}, {{&y, false}}, 0, true);
            check(std::string("maxpool2d_bwd ") + nm, GC_OP_MAXPOOL2D_BWD, &p, {&x, &dy}, {{&dx, false}}, 0, true);
            HT xr = make(dt, {c.N, c.H, c.W, c.C}, randn(nx));
            check(std::string("avgpool2d_fwd ") + nm, GC_OP_AVGPOOL2D_FWD, &p, {&xr}, {{&y, false}}, 0, true);
            check(std::string("avgpool2d_bwd ") + nm, GC_OP_AVGPOOL2D_BWD, &p, {&dy}, {{&dx, false}}, 0, true);
        }
}

static void test_bias_grad()
{
    std::vector<std::pair<int64_t, int64_t>> sz = {{3, 7}, {5000, 37}, {100000, 10}, {64, 4099}, {0, 5}};
    for (gc_dtype dt : DTS)
        for (auto &s : sz) {
            HT dy = make(dt, {s.first, s.second}, randn(s.first * s.second));
            HT db = poison_like(dt, {s.second});
            gc_no_params p = {0};
            char nm[96];
            snprintf(nm, sizeof nm, "bias_grad (%lld, %lld) %s", (long long)s.first, (long long)s.second, dn(dt));
            check(nm, GC_OP_BIAS_GRAD, &p, {&dy}, {{&db, false}}, 1e-5, false);
        }
}

static std::vector<float> softmax_rows(int64_t rows, int64_t cols, float scale, bool zeros)
{
    std::vector<float> v((size_t)(rows * cols));
    for (int64_t r = 0; r < rows; r++) {
        double s = 0;
        for (int64_t c = 0; c < cols; c++) {
            double e = exp(nrand() * scale);
            if (zeros && r % 3 == 0 && c % 4 == 0) e = 0.0; /* clipped entries */
            v[(size_t)(r * cols + c)] = (float)e;
            s += e;
        }
        for (int64_t c = 0; c < cols; c++) v[(size_t)(r * cols + c)] /= (float)s;
    }
    return v;
}

static void test_losses()
{
    std::vector<std::pair<int64_t, int64_t>> sz = {{64, 10}, {33, 1500}, {7, 1}};
    for (gc_dtype dt : DTS)
        for (auto &s : sz) {
            int64_t R = s.first, C = s.second;
            HT logits = make(dt, {R, C}, randn(R * C, 3.0f));
            std::vector<int32_t> li((size_t)R);
            for (auto &l : li) l = (int32_t)(urand() * C);
            HT lab_i = make_i32({R}, li);
            HT lab_soft = make(dt, {R, C}, softmax_rows(R, C, 1.0f, false));
            HT lab_f32 = make(GC_F32, {R, C}, softmax_rows(R, C, 1.0f, false)); /* other dtype than logits */
            std::vector<float> bin((size_t)(R * C));
            for (auto &b : bin) b = urand() < 0.5 ? 0.0f : 1.0f;
            HT lab_bin = make(dt, {R, C}, bin);
            HT probs = make(dt, {R, C}, softmax_rows(R, C, 2.0f, true));
            std::vector<float> pb((size_t)(R * C));
            for (auto &p : pb) p = urand() < 0.1 ? (urand() < 0.5 ? 0.0f : 1.0f) : (float)urand();
            HT probs_bin = make(dt, {R, C}, pb);
            HT loss = poison_like(dt, {R}), grad = poison_like(dt, {R, C});
            char sfx[64];
            snprintf(sfx, sizeof sfx, " (%lld, %lld) %s", (long long)R, (long long)C, dn(dt));
            gc_loss_params p = {0.37f, 0, GC_REG_MSE};
            check(std::string("softmax_xent sparse") + sfx, GC_OP_SOFTMAX_XENT, &p, {&logits, &lab_i},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            check(std::string("softmax_xent soft") + sfx, GC_OP_SOFTMAX_XENT, &p, {&logits, &lab_soft},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            std::vector<float> un((size_t)(R * C));
            for (auto &u : un) u = (float)urand(); /* rows do not sum to 1: grad sum(y)*p - y */
            HT lab_un = make(dt, {R, C}, un);
            check(std::string("softmax_xent unnormalised labels") + sfx, GC_OP_SOFTMAX_XENT, &p, {&logits, &lab_un},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            check(std::string("softmax_xent f32-labels no-grad") + sfx, GC_OP_SOFTMAX_XENT, &p,
                  {&logits, &lab_f32}, {{&loss, false}, {NULL, false}}, 1e-5, false);
            check(std::string("sigmoid_bce") + sfx, GC_OP_SIGMOID_BCE, &p, {&logits, &lab_bin},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            check(std::string("xent_probs sparse") + sfx, GC_OP_XENT_PROBS, &p, {&probs, &lab_i},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            check(std::string("xent_probs soft") + sfx, GC_OP_XENT_PROBS, &p, {&probs, &lab_soft},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            gc_loss_params pbn = {0.37f, 1, GC_REG_MSE};
            check(std::string("xent_probs binary") + sfx, GC_OP_XENT_PROBS, &pbn, {&probs_bin, &lab_bin},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            gc_loss_params pm = {1.5f, 0, GC_REG_MSE}, pa = {1.5f, 0, GC_REG_MAE};
            check(std::string("regression mse") + sfx, GC_OP_REGRESSION_LOSS, &pm, {&logits, &lab_soft},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
            check(std::string("regression mae") + sfx, GC_OP_REGRESSION_LOSS, &pa, {&logits, &lab_soft},
                  {{&loss, false}, {&grad, false}}, 1e-5, false);
        }
    /* out-of-range sparse label: the same error and message as the CPU */
    {
        int64_t R = 9, C = 10;
        HT logits = make(GC_F32, {R, C}, randn(R * C));
        std::vector<int32_t> li = {1, 2, 3, 4, 5, 6, 7, 8, 9};
        li[3] = 10;
        li[6] = -1;
        HT lab = make_i32({R}, li);
        HT loss = poison_like(GC_F32, {R}), grad = poison_like(GC_F32, {R, C});
        gc_loss_params p = {1.0f, 0, GC_REG_MSE};
        std::vector<std::vector<uint8_t>> c, g;
        gc_status cs;
        gc_status gs = run_both(GC_OP_SOFTMAX_XENT, &p, {&logits, &lab}, {{&loss, false}, {&grad, false}}, c, g, &cs);
        std::string gmsg = gc_last_error();
        gc_op_call cc;
        memset(&cc, 0, sizeof cc);
        std::vector<uint8_t> hl = logits.b, hy = lab.b, ho(R * 4), hg(R * C * 4);
        gc_tensor t0 = view(&logits, hl.data()), t1 = view(&lab, hy.data()), t2 = view(&loss, ho.data()),
                  t3 = view(&grad, hg.data());
        cc.op = GC_OP_SOFTMAX_XENT;
        cc.in[0] = &t0; cc.in[1] = &t1; cc.out[0] = &t2; cc.out[1] = &t3;
        cc.params = &p;
        gc_status cs2 = gc_op_run(CPU, &cc);
        std::string cmsg = gc_last_error();
        report(gs == GC_ERR_INVALID_ARG && cs2 == GC_ERR_INVALID_ARG && gmsg == cmsg,
               "softmax_xent out-of-range label", "gpu=%s '%s' cpu=%s '%s'", gc_status_name(gs), gmsg.c_str(),
               gc_status_name(cs2), cmsg.c_str());
    }
}

static void test_dropout()
{
    for (gc_dtype dt : DTS)
        for (float rate : {0.0f, 0.3f, 0.9f}) {
            int64_t n = 100003;
            std::vector<float> xv = randn(n);
            for (int64_t i = 0; i < n; i += 101) xv[(size_t)i] = -0.0f;
            /* dropped: +0. (No NaN here: a kept NaN times scale is NaN on both, but the GPU's
             * multiply returns the canonical NaN, not the input's payload, so bits differ.) */
            for (int64_t i = 3; i < n; i += 997) xv[(size_t)i] = i % 2 ? INFINITY : -INFINITY;
            HT x = make(dt, {n}, xv), y = poison_like(dt, {n});
            gc_dropout_params p = {rate, 0xDEADBEEF12345ull};
            char nm[96];
            snprintf(nm, sizeof nm, "dropout_fwd rate=%.1f %s", rate, dn(dt));
            check(nm, GC_OP_DROPOUT_FWD, &p, {&x}, {{&y, false}}, 0, true);
            snprintf(nm, sizeof nm, "dropout_bwd rate=%.1f %s", rate, dn(dt));
            check(nm, GC_OP_DROPOUT_BWD, &p, {&x}, {{&y, false}}, 0, true);
        }
}

__global__ void hash_kernel(uint64_t seed, int64_t n, uint32_t *h, float *u)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t idx = (uint64_t)i * 7919ull + ((uint64_t)i << 40); /* large indices too */
        h[i] = gc_hash32_dev(seed, idx);
        u[i] = gc_uniform01_dev(seed, idx);
    }
}

static void test_hash()
{
    const int64_t n = 1 << 20;
    uint32_t *dh;
    float *du;
    bool ok = cudaMalloc(&dh, n * 4) == cudaSuccess && cudaMalloc(&du, n * 4) == cudaSuccess;
    std::vector<uint32_t> h(n);
    std::vector<float> u(n);
    int64_t bad = 0;
    for (uint64_t seed : {0ull, 1ull, 0xFFFFFFFFFFFFFFFFull, 0x9E3779B97F4A7C15ull}) {
        hash_kernel<<<256, 256>>>(seed, n, dh, du);
        ok = ok && cudaMemcpy(h.data(), dh, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess &&
             cudaMemcpy(u.data(), du, n * 4, cudaMemcpyDeviceToHost) == cudaSuccess;
        for (int64_t i = 0; i < n; i++) {
            uint64_t idx = (uint64_t)i * 7919ull + ((uint64_t)i << 40);
            if (h[i] != gc_hash32(seed, idx) || u[i] != gc_uniform01(seed, idx)) bad++;
        }
    }
    cudaFree(dh);
    cudaFree(du);
    report(ok && bad == 0, "dropout hash: device gc_hash32_dev / gc_uniform01_dev == gpucmp.h", "(%lld mismatches of %lld)",
           (long long)bad, (long long)(4 * n));
}

static void test_optim()
{
    for (gc_dtype dt : DTS)
        for (int64_t n : {(int64_t)1, (int64_t)1000, (int64_t)123457}) {
            HT g = make(dt, {n}, randn(n, 0.1f)), w = make(dt, {n}, randn(n));
            std::vector<float> vv = randn(n, 0.01f);
            for (auto &x : vv) x = x * x;
            HT m = make(dt, {n}, randn(n, 0.05f)), v = make(dt, {n}, vv);
            char nm[96];
            gc_adam_params ap = {1e-3f, 0.9f, 0.999f, 1e-7f, 7};
            snprintf(nm, sizeof nm, "adam n=%lld %s", (long long)n, dn(dt));
            check(nm, GC_OP_ADAM, &ap, {&g}, {{&w, true}, {&m, true}, {&v, true}}, 0, true);
            gc_sgd_params s0 = {0.01f, 0.0f, 0}, s1 = {0.01f, 0.9f, 0}, s2 = {0.01f, 0.9f, 1};
            snprintf(nm, sizeof nm, "sgd n=%lld %s", (long long)n, dn(dt));
            check(nm, GC_OP_SGD, &s0, {&g}, {{&w, true}, {NULL, false}}, 0, true);
            snprintf(nm, sizeof nm, "sgd momentum n=%lld %s", (long long)n, dn(dt));
            check(nm, GC_OP_SGD, &s1, {&g}, {{&w, true}, {&m, true}}, 0, true);
            snprintf(nm, sizeof nm, "sgd nesterov n=%lld %s", (long long)n, dn(dt));
            check(nm, GC_OP_SGD, &s2, {&g}, {{&w, true}, {&m, true}}, 0, true);
            gc_rmsprop_params rp = {1e-3f, 0.9f, 1e-7f};
            snprintf(nm, sizeof nm, "rmsprop n=%lld %s", (long long)n, dn(dt));
            check(nm, GC_OP_RMSPROP, &rp, {&g}, {{&w, true}, {&v, true}}, 0, true);
            snprintf(nm, sizeof nm, "adam misaligned n=%lld %s", (long long)n, dn(dt));
            check(nm, GC_OP_ADAM, &ap, {&g}, {{&w, true}, {&m, true}, {&v, true}}, 0, true, gc_dtype_size(dt));
        }
}

static void test_accuracy()
{
    std::vector<std::pair<int64_t, int64_t>> sz = {{1000, 10}, {37, 2000}, {5, 1}, {20000, 3}};
    for (gc_dtype dt : DTS)
        for (auto &s : sz) {
            int64_t R = s.first, C = s.second;
            std::vector<float> pv((size_t)(R * C));
            for (auto &v : pv) v = (float)(int)(urand() * 4); /* ties */
            for (int64_t r = 0; r < R; r += 17) pv[(size_t)(r * C + (C > 1 ? 1 : 0))] = NAN; /* NaN, never wins */
            for (int64_t r = 5; r < R; r += 29) pv[(size_t)(r * C)] = NAN;                  /* NaN at 0: arg-max 0 */
            HT pred = make(dt, {R, C}, pv);
            std::vector<float> lv((size_t)(R * C));
            for (auto &v : lv) v = (float)(int)(urand() * 4);
            HT lab = make(dt, {R, C}, lv);
            HT labf32 = make(GC_F32, {R, C}, lv);
            std::vector<int32_t> li((size_t)R);
            for (auto &l : li) l = (int32_t)(urand() * C);
            HT labi = make_i32({R}, li);
            HT cnt = poison_like(GC_F32, {1});
            char sfx[64];
            snprintf(sfx, sizeof sfx, " (%lld, %lld) %s", (long long)R, (long long)C, dn(dt));
            gc_accuracy_params pc = {GC_ACC_CATEGORICAL, 0.5f}, ps = {GC_ACC_SPARSE, 0.5f}, pb = {GC_ACC_BINARY, 1.5f};
            check(std::string("accuracy categorical") + sfx, GC_OP_ACCURACY, &pc, {&pred, &lab}, {{&cnt, false}}, 0,
                  true);
            check(std::string("accuracy categorical f32-labels") + sfx, GC_OP_ACCURACY, &pc, {&pred, &labf32},
                  {{&cnt, false}}, 0, true);
            check(std::string("accuracy sparse") + sfx, GC_OP_ACCURACY, &ps, {&pred, &labi}, {{&cnt, false}}, 0, true);
            check(std::string("accuracy binary") + sfx, GC_OP_ACCURACY, &pb, {&pred, &lab}, {{&cnt, false}}, 1e-7,
                  false);
        }
}

static void test_cast()
{
    for (gc_dtype a : DTS)
        for (gc_dtype b : DTS)
            for (size_t mis : {(size_t)0, (size_t)4}) {
                int64_t n = 100003;
                std::vector<float> v = randn(n, 100.0f);
                v[0] = NAN; v[1] = -NAN; v[2] = INFINITY; v[3] = -INFINITY; v[4] = 70000.0f; v[5] = 1e-6f;
                v[6] = 3e-8f; v[7] = -0.0f; v[8] = 65519.0f; v[9] = 65520.0f; v[10] = 1e-40f;
                HT x = make(a, {n}, v), y = poison_like(b, {n});
                char nm[96];
                snprintf(nm, sizeof nm, "cast %s -> %s%s", dn(a), dn(b), mis ? " misaligned" : "");
                std::vector<std::vector<uint8_t>> c, g;
                gc_no_params p = {0};
                gc_status cs;
                gc_status st = run_both(GC_OP_CAST, &p, {&x}, {{&y, false}}, c, g, &cs, mis);
                bool eq = st == GC_OK && cs == GC_OK &&
                          memcmp(c[0].data(), g[0].data(), (size_t)n * gc_dtype_size(b)) == 0;
                int64_t diff = 0;
                if (st == GC_OK)
                    for (int64_t i = 0; i < n * (int64_t)gc_dtype_size(b); i++) diff += c[0][i] != g[0][i];
                report(eq, nm, "(bit-exact; %lld differing bytes)", (long long)diff);
            }
}

/* ------------------------------------------------------------------ machinery */
struct Dev {
    void *p = NULL;
    size_t n = 0;
};
static Dev dup(const HT &t)
{
    Dev d;
    d.n = (size_t)t.numel() * gc_dtype_size(t.dt);
    if (GPU->alloc(GPU, d.n, &d.p) == GC_OK) GPU->upload(GPU, d.p, t.b.data(), d.n);
    return d;
}
static std::vector<uint8_t> fetch(const Dev &d)
{
    std::vector<uint8_t> h(d.n);
    GPU->download(GPU, h.data(), d.p, d.n);
    return h;
}

/* One "training step" of ops on device buffers (relu, softmax_xent with sparse labels,
 * bias_grad, dropout, adam), issued directly or while capturing. */
struct Step {
    HT x, lab, w0, m0, v0;
    Dev x_d, h_d, lab_d, loss_d, grad_d, db_d, w_d, m_d, v_d, dr_d;
    int64_t R = 256, C = 100;
    gc_status issue()
    {
        gc_tensor tx = view(&x, x_d.p);
        HT hshape = x;
        gc_tensor th = view(&hshape, h_d.p);
        gc_tensor tl = view(&lab, lab_d.p);
        HT lossT = poison_like(GC_F32, {R});
        gc_tensor tloss = view(&lossT, loss_d.p), tgrad = view(&hshape, grad_d.p);
        HT dbT = poison_like(GC_F32, {C});
        gc_tensor tdb = view(&dbT, db_d.p), tw = view(&dbT, w_d.p), tm = view(&dbT, m_d.p), tv = view(&dbT, v_d.p);
        gc_tensor tdr = view(&hshape, dr_d.p);
        gc_op_call c;
        gc_status st;
        gc_act_params ap = {GC_ACT_RELU};
        memset(&c, 0, sizeof c);
        c.op = GC_OP_ACT_FWD; c.in[0] = &tx; c.out[0] = &th; c.params = &ap;
        if ((st = gc_op_run(GPU, &c))) return st;
        gc_dropout_params dp = {0.25f, 99};
        memset(&c, 0, sizeof c);
        c.op = GC_OP_DROPOUT_FWD; c.in[0] = &th; c.out[0] = &tdr; c.params = &dp;
        if ((st = gc_op_run(GPU, &c))) return st;
        gc_loss_params lp = {1.0f / 256, 0, GC_REG_MSE};
        memset(&c, 0, sizeof c);
        c.op = GC_OP_SOFTMAX_XENT; c.in[0] = &tdr; c.in[1] = &tl; c.out[0] = &tloss; c.out[1] = &tgrad;
        c.params = &lp;
        if ((st = gc_op_run(GPU, &c))) return st;
        gc_no_params np = {0};
        memset(&c, 0, sizeof c);
        c.op = GC_OP_BIAS_GRAD; c.in[0] = &tgrad; c.out[0] = &tdb; c.params = &np;
        if ((st = gc_op_run(GPU, &c))) return st;
        gc_adam_params adp = {1e-2f, 0.9f, 0.999f, 1e-7f, 3};
        memset(&c, 0, sizeof c);
        c.op = GC_OP_ADAM; c.in[0] = &tdb; c.out[0] = &tw; c.out[1] = &tm; c.out[2] = &tv; c.params = &adp;
        return gc_op_run(GPU, &c);
    }
    void reset()
    {
        GPU->upload(GPU, w_d.p, w0.b.data(), w_d.n);
        GPU->upload(GPU, m_d.p, m0.b.data(), m_d.n);
        GPU->upload(GPU, v_d.p, v0.b.data(), v_d.n);
    }
    std::vector<std::vector<uint8_t>> outs()
    {
        return {fetch(loss_d), fetch(grad_d), fetch(db_d), fetch(w_d), fetch(m_d), fetch(v_d)};
    }
};

static void test_graph()
{
    Step s;
    s.x = make(GC_F32, {s.R, s.C}, randn(s.R * s.C, 2.0f));
    std::vector<int32_t> li((size_t)s.R);
    for (auto &l : li) l = (int32_t)(urand() * s.C);
    s.lab = make_i32({s.R}, li);
    s.w0 = make(GC_F32, {s.C}, randn(s.C));
    s.m0 = make(GC_F32, {s.C}, randn(s.C, 0.01f));
    std::vector<float> vv = randn(s.C, 0.01f);
    for (auto &x : vv) x *= x;
    s.v0 = make(GC_F32, {s.C}, vv);
    s.x_d = dup(s.x);
    s.lab_d = dup(s.lab);
    HT big = poison_like(GC_F32, {s.R, s.C});
    s.h_d = dup(big); s.grad_d = dup(big); s.dr_d = dup(big);
    HT lossT = poison_like(GC_F32, {s.R});
    s.loss_d = dup(lossT);
    HT vec = poison_like(GC_F32, {s.C});
    s.db_d = dup(vec); s.w_d = dup(s.w0); s.m_d = dup(s.m0); s.v_d = dup(s.v0);

    /* direct: two steps */
    s.reset();
    gc_status st = s.issue();
    if (st == GC_OK) st = s.issue();
    if (st == GC_OK) st = GPU->sync(GPU);
    auto direct = s.outs();
    report(st == GC_OK, "graph: direct launches", "%s", st ? gc_last_error() : "");

    /* captured once, replayed twice */
    s.reset();
    void *graph = NULL;
    st = GPU->capture_begin(GPU);
    gc_status st_ops = st == GC_OK ? s.issue() : st;
    gc_status st_end = st == GC_OK ? GPU->capture_end(GPU, &graph) : st;
    report(st == GC_OK && st_ops == GC_OK && st_end == GC_OK && graph, "graph: capture of relu, dropout, softmax_xent, "
           "bias_grad, adam", "%s", (st || st_ops || st_end) ? gc_last_error() : "");
    if (graph) {
        st = GPU->graph_launch(GPU, graph);
        if (st == GC_OK) st = GPU->graph_launch(GPU, graph);
        if (st == GC_OK) st = GPU->sync(GPU);
        auto replay = s.outs();
        bool same = st == GC_OK && replay == direct;
        report(same, "graph: 2 replays == 2 direct launches (bit-exact: loss, grad, db, w, m, v)", "%s",
               st ? gc_last_error() : "");
        /* timing: replay vs direct, 200 steps each */
        cudaEvent_t e0, e1;
        cudaEventCreate(&e0);
        cudaEventCreate(&e1);
        cudaStream_t str = gc_cuda_stream(GPU);
        float t_direct = 0, t_graph = 0;
        cudaEventRecord(e0, str);
        for (int i = 0; i < 200; i++) s.issue();
        cudaEventRecord(e1, str);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t_direct, e0, e1);
        cudaEventRecord(e0, str);
        for (int i = 0; i < 200; i++) GPU->graph_launch(GPU, graph);
        cudaEventRecord(e1, str);
        cudaEventSynchronize(e1);
        cudaEventElapsedTime(&t_graph, e0, e1);
        printf("INFO  step of 6 kernels (relu, dropout, softmax_xent, bias_grad x2, adam): direct %.2f us, graph "
               "replay %.2f us (direct includes the sparse-label check's host sync)\n", 1000 * t_direct / 200, 1000 * t_graph / 200);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }

    /* workspace growth refused while capturing; the stream stays usable */
    {
        void *ws = NULL;
        gc_status a = gc_cuda_workspace(GPU, 1 << 20, &ws);
        gc_status b = GPU->capture_begin(GPU);
        void *ws2 = NULL;
        gc_status c = gc_cuda_workspace(GPU, (size_t)64 << 20, &ws2);
        std::string msg = gc_last_error();
        gc_status d = gc_cuda_workspace(GPU, 1 << 19, &ws2); /* fits: allowed */
        void *g2 = NULL;
        gc_status e = GPU->capture_end(GPU, &g2);
        if (g2) GPU->graph_destroy(GPU, g2);
        gc_status f = s.issue();
        if (f == GC_OK) f = GPU->sync(GPU);
        report(a == GC_OK && b == GC_OK && c == GC_ERR_BACKEND && d == GC_OK && ws2 == ws && f == GC_OK,
               "workspace: growth refused during capture, fits allowed, stream usable after", "('%s')", msg.c_str());
    }
    /* a failing op inside a capture: capture_end reports, the stream recovers */
    {
        gc_status b = GPU->capture_begin(GPU);
        gc_status u = GPU->sync(GPU); /* not allowed while capturing */
        void *g3 = NULL;
        gc_status e = GPU->capture_end(GPU, &g3);
        if (g3) GPU->graph_destroy(GPU, g3);
        gc_status f = s.issue();
        if (f == GC_OK) f = GPU->sync(GPU);
        report(b == GC_OK && u != GC_OK && f == GC_OK, "capture: sync refused while capturing, stream usable after",
               "(sync: %s, end: %s)", gc_status_name(u), gc_status_name(e));
    }
    if (graph) GPU->graph_destroy(GPU, graph);
    for (Dev *d : {&s.x_d, &s.h_d, &s.lab_d, &s.loss_d, &s.grad_d, &s.db_d, &s.w_d, &s.m_d, &s.v_d, &s.dr_d})
        GPU->release(GPU, d->p);
}

static void test_fused_optim()
{
    for (gc_dtype dt : DTS)
        for (int kind : {GC_OPT_ADAM, GC_OPT_SGD, GC_OPT_RMSPROP}) {
            const int K = 5;
            int64_t ns[K] = {3, 1000, 77777, 32, 9};
            std::vector<Dev> w, g, m, v;
            std::vector<HT> hw, hg, hm, hv;
            for (int k = 0; k < K; k++) {
                hw.push_back(make(dt, {ns[k]}, randn(ns[k])));
                hg.push_back(make(dt, {ns[k]}, randn(ns[k], 0.1f)));
                hm.push_back(make(dt, {ns[k]}, randn(ns[k], 0.05f)));
                std::vector<float> vv = randn(ns[k], 0.1f);
                for (auto &x : vv) x *= x;
                hv.push_back(make(dt, {ns[k]}, vv));
            }
            gc_opt_hparams hp;
            memset(&hp, 0, sizeof hp);
            hp.kind = (gc_opt_kind)kind;
            hp.lr = 1e-3f; hp.beta_1 = 0.9f; hp.beta_2 = 0.999f; hp.epsilon = 1e-7f; hp.momentum = 0.9f;
            hp.rho = 0.9f; hp.nesterov = 1; hp.t = 11;
            /* reference: per-tensor ops on the GPU */
            std::vector<std::vector<uint8_t>> ref;
            for (int k = 0; k < K; k++) {
                Dev dw = dup(hw[k]), dg = dup(hg[k]), dm = dup(hm[k]), dv = dup(hv[k]);
                gc_tensor tw = view(&hw[k], dw.p), tg = view(&hg[k], dg.p), tm = view(&hm[k], dm.p), tv = view(&hv[k], dv.p);
                gc_op_call c;
                memset(&c, 0, sizeof c);
                c.in[0] = &tg; c.out[0] = &tw;
                gc_adam_params ap = {hp.lr, hp.beta_1, hp.beta_2, hp.epsilon, hp.t};
                gc_sgd_params sp = {hp.lr, hp.momentum, hp.nesterov};
                gc_rmsprop_params rp = {hp.lr, hp.rho, hp.epsilon};
                if (kind == GC_OPT_ADAM) { c.op = GC_OP_ADAM; c.out[1] = &tm; c.out[2] = &tv; c.params = &ap; }
                else if (kind == GC_OPT_SGD) { c.op = GC_OP_SGD; c.out[1] = &tm; c.params = &sp; }
                else { c.op = GC_OP_RMSPROP; c.out[1] = &tv; c.params = &rp; }
                gc_op_run(GPU, &c);
                ref.push_back(fetch(dw));
                ref.push_back(fetch(kind == GC_OPT_RMSPROP ? dv : dm));
                for (Dev *d : {&dw, &dg, &dm, &dv}) GPU->release(GPU, d->p);
            }
            /* fused */
            std::vector<gc_cuda_opt_slot> slots(K);
            std::vector<Dev> all;
            for (int k = 0; k < K; k++) {
                Dev dw = dup(hw[k]), dg = dup(hg[k]), dm = dup(hm[k]), dv = dup(hv[k]);
                all.insert(all.end(), {dw, dg, dm, dv});
                slots[k].w = dw.p; slots[k].g = dg.p; slots[k].n = ns[k];
                slots[k].s1 = kind == GC_OPT_RMSPROP ? dv.p : dm.p;
                slots[k].s2 = kind == GC_OPT_ADAM ? dv.p : NULL;
            }
            void *slots_d = NULL;
            GPU->alloc(GPU, sizeof(gc_cuda_opt_slot) * K, &slots_d);
            GPU->upload(GPU, slots_d, slots.data(), sizeof(gc_cuda_opt_slot) * K);
            gc_status st = gc_cuda_optim_multi(GPU, dt, (const gc_cuda_opt_slot *)slots_d, K, 77777, &hp,
                                               NULL, NULL);
            if (st == GC_OK) st = GPU->sync(GPU);
            bool same = st == GC_OK;
            for (int k = 0; k < K && same; k++) {
                same = same && fetch(all[4 * k]) == ref[2 * k];
                same = same && fetch(all[4 * k + (kind == GC_OPT_RMSPROP ? 3 : 2)]) == ref[2 * k + 1];
            }
            const char *kn[] = {"sgd(nesterov)", "adam", "rmsprop"};
            report(same, std::string("optim_multi ") + kn[kind] + " " + dn(dt) + " == per-tensor ops (bit-exact)",
                   "%s", st ? gc_last_error() : "");
            for (Dev &d : all) GPU->release(GPU, d.p);
            GPU->release(GPU, slots_d);
        }
}

static void test_oom()
{
    void *p = NULL;
    gc_status st = GPU->alloc(GPU, (size_t)1 << 50, &p); /* 1 PiB */
    std::string msg = gc_last_error();
    report(st == GC_ERR_NOMEM && !msg.empty(), "alloc 1 PiB -> GC_ERR_NOMEM", "('%s')", msg.c_str());
    void *q = NULL;
    gc_status s2 = GPU->alloc(GPU, 1 << 20, &q);
    if (s2 == GC_OK) GPU->release(GPU, q);
    void *ws = NULL;
    gc_status s3 = gc_cuda_workspace(GPU, (size_t)1 << 50, &ws);
    std::string msg3 = gc_last_error();
    report(s2 == GC_OK && s3 == GC_ERR_NOMEM, "after OOM: 1 MiB alloc works; 1 PiB workspace -> GC_ERR_NOMEM",
           "('%s')", msg3.c_str());
}

static void test_bandwidth()
{
    /* memory-bound throughput of a few ops on 64 Mi elements (informational) */
    const int64_t n = (int64_t)64 << 20;
    void *a = NULL, *b = NULL, *c = NULL, *d = NULL;
    if (GPU->alloc(GPU, n * 4, &a) || GPU->alloc(GPU, n * 4, &b) || GPU->alloc(GPU, n * 4, &c) ||
        GPU->alloc(GPU, n * 4, &d)) {
        report(false, "bandwidth: allocation", "%s", gc_last_error());
        return;
    }
    GPU->fill_zero(GPU, a, n * 4);
    GPU->fill_zero(GPU, b, n * 4);
    GPU->fill_zero(GPU, c, n * 4);
    GPU->fill_zero(GPU, d, n * 4);
    cudaStream_t s = gc_cuda_stream(GPU);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    struct Case {
        const char *name;
        int kind;
        double bytes_per_elem;
    } cases[] = {{"relu f32", 0, 8}, {"relu bf16", 1, 4}, {"cast f32->bf16", 2, 6}, {"dropout f32", 3, 8},
                 {"adam f32", 4, 28}};
    for (auto &cs : cases) {
        float ms = 0;
        for (int rep = 0; rep < 2; rep++) {
            cudaEventRecord(e0, s);
            for (int i = 0; i < 10; i++) {
                int64_t sh[1] = {n};
                gc_tensor ta = gc_tensor_make(a, cs.kind == 1 ? GC_BF16 : GC_F32, 1, sh);
                gc_tensor tb = gc_tensor_make(b, cs.kind == 1 || cs.kind == 2 ? GC_BF16 : GC_F32, 1, sh);
                gc_tensor tc = gc_tensor_make(c, GC_F32, 1, sh), td = gc_tensor_make(d, GC_F32, 1, sh);
                gc_op_call call;
                memset(&call, 0, sizeof call);
                gc_act_params ap = {GC_ACT_RELU};
                gc_no_params np = {0};
                gc_dropout_params dp = {0.5f, 1};
                gc_adam_params adp = {1e-3f, 0.9f, 0.999f, 1e-7f, 1};
                call.in[0] = &ta; call.out[0] = &tb;
                if (cs.kind <= 1) { call.op = GC_OP_ACT_FWD; call.params = &ap; }
                else if (cs.kind == 2) { call.op = GC_OP_CAST; call.params = &np; }
                else if (cs.kind == 3) { call.op = GC_OP_DROPOUT_FWD; call.params = &dp; }
                else { call.op = GC_OP_ADAM; call.out[1] = &tc; call.out[2] = &td; call.params = &adp; }
                gc_op_run(GPU, &call);
            }
            cudaEventRecord(e1, s);
            cudaEventSynchronize(e1);
            cudaEventElapsedTime(&ms, e0, e1);
        }
        double sec = ms / 1000.0 / 10;
        printf("INFO  %-16s %lld elements: %.3f ms, %.0f GB/s\n", cs.name, (long long)n, sec * 1000,
               cs.bytes_per_elem * n / sec / 1e9);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    for (void *p : {a, b, c, d}) GPU->release(GPU, p);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    gc_cuda_register_all();
    CPU = gc_cpu_backend();
    if (gc_backend_get("cuda", &GPU) != GC_OK) {
        printf("SKIP  no CUDA device (%s)\n", gc_last_error());
        return 77;
    }
    cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    printf("device: %s, cc %d, %d SMs, smem opt-in %zu bytes\n", prop.name, gc_cuda_cc(GPU), gc_cuda_sm_count(GPU),
           gc_cuda_smem_optin(GPU));
    test_hash();
    test_cast();
    test_act();
    test_pool();
    test_bias_grad();
    test_losses();
    test_dropout();
    test_optim();
    test_fused_optim();
    test_accuracy();
    test_graph();
    test_oom();
    if (!getenv("GC_TEST_NO_BENCH")) test_bandwidth();
    printf("SUMMARY  %d passed, %d failed\n", g_pass, g_fail);
    return g_fail ? 1 : 0;
}
