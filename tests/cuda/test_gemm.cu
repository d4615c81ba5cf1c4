/* test_gemm.cu -- standalone correctness test and benchmark of the CUDA GEMM paths.
 *
 * Links csrc/cuda/gemm*.cu and tensor_map.cu with csrc/core/status.c, dtype.c and
 * variants.c (the path is forced through the variant registry) only: the few backend
 * helpers of common.cuh (stream, device properties, workspace) are stubbed below over
 * one device, so the GEMM can be tested before / without the rest of the backend.
 *
 * Correctness: against a double-precision host reference on fresh random inputs
 * (seed printed; --seed N replays), for f32 exact (SIMT), f32 as TF32, f16 and bf16,
 * every path this device runs (auto, SIMT forced for f32, mma.sync forced, wgmma forced
 * where sm_90a code is present, the small-GEMM kernel forced, cuBLASLt), all four
 * transpose cases, odd sizes (1x1x1, 37x53x71, 127x129x65, K=0, 1000x3x500 ...),
 * alpha / beta / bias / every elementwise act. The SIMT kernel also on its own: its
 * 16-byte load path and scalar fallback (aligned, either or both operands misaligned,
 * odd or aligned leading dimensions longer than the rows, K < 8, tails), and (not with
 * --quick) the recurrent layers' GEMMs at full size (M 6400, K up to 6400, split K).
 * C is poisoned with NaN when beta == 0 (an unwritten element stays NaN). The strided
 * cases call gc_cuda_gemm directly with leading dimensions larger than the rows (NaN
 * in the padding: never to be read), pointers off 16-byte alignment (the scalar-load
 * and copy paths) and a sentinel in C's padding (never to be written). One case is
 * captured into a CUDA graph and replayed. Pass: relative Frobenius error
 * <= 1e-5 * max(1, sqrt(K)/8) for exact f32, 5e-4 for TF32 (operands rounded to
 * nearest), 1e-2 for f16 / bf16 (when C has >= 64 elements), every element within
 * 1e-5*max(1,sqrt(K)/8) / 4e-3 / 2e-2 of the magnitude of the terms it sums, no NaN.
 *
 * Benchmark (--bench): TFLOP/s at 4096^3 and 8192^3 for f32 (SIMT, all four transpose
 * cases), TF32, f16 and bf16, ours and cuBLASLt side by side (CUDA events around each
 * call, 3 warm-ups, median of 15), each result spot-checked on 256 random elements
 * against a double reference; then the exact-f32 GEMMs of a recurrent layer's training
 * step (LSTM / GRU / SimpleRNN, batch 64 x 100 steps); then the GEMMs of the seed CNN (28x28x1 -> conv32 -> pool -> conv64 -> pool -> conv64
 * -> dense64 -> dense10, batch 128, im2col shapes, forward and two backward) in us.
 *
 * usage: test_gemm [--seed N] [--bench] [--quick] [--only-bench]   exit status 0 = pass
 */
#include "gemm.cuh"

#include <algorithm>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <vector>

/* ------------------------------------------------------------------ the path, forced
 * The variant point cuda.gemm.path (gpucmp_variants.h; core/variants.c is linked in): the
 * stubbed backend registers without a probe, so every path may be forced and the GEMM
 * itself refuses what this device cannot run. */
static gc_status force_path(const char *name) { return gc_variant_force("cuda.gemm.path", name); }
static const char *last_path(void)
{
    const int v = gc_variant_last(GC_VP_CUDA_GEMM_PATH);
    return v ? gc_variant_point_at(GC_VP_CUDA_GEMM_PATH)->names[v] : "none";
}

/* ------------------------------------------------------------------ backend stubs */
static cudaStream_t g_stream;
static int g_cc, g_sms;
static size_t g_optin;
static void *g_ws;
static size_t g_ws_bytes;
static int g_allow_tf32 = 1;

extern "C" gc_status gc_cuda_launch_check(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return gc_fail(GC_ERR_BACKEND, "%s: launch failed: %s", what, cudaGetErrorString(e));
    return GC_OK;
}
extern "C" cudaStream_t gc_cuda_stream(const gc_backend *) { return g_stream; }
extern "C" int gc_cuda_cc(const gc_backend *) { return g_cc; }
extern "C" int gc_cuda_sm_count(const gc_backend *) { return g_sms; }
extern "C" size_t gc_cuda_smem_optin(const gc_backend *) { return g_optin; }
extern "C" gc_status gc_cuda_set_device(const gc_backend *) { return GC_OK; }
extern "C" int gc_cuda_capturing(const gc_backend *)
{
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(g_stream, &cs);
    return cs != cudaStreamCaptureStatusNone;
}
extern "C" gc_status gc_cuda_workspace(const gc_backend *be, size_t bytes, void **out)
{
    if (bytes > g_ws_bytes) {
        if (gc_cuda_capturing(be)) return gc_fail(GC_ERR_BACKEND, "workspace growth during capture");
        cudaStreamSynchronize(g_stream);
        cudaFree(g_ws);
        g_ws = NULL;
        GC_CUDA_TRY(cudaMalloc(&g_ws, bytes));
        g_ws_bytes = bytes;
    }
    *out = g_ws;
    return GC_OK;
}
extern "C" void gc_set_allow_tf32(int a) { g_allow_tf32 = a != 0; }
extern "C" int gc_get_allow_tf32(void) { return g_allow_tf32; }

/* ------------------------------------------------------------------ utilities */
#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) {                                                                \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(2);                                                                            \
        }                                                                                       \
    } while (0)

static uint64_t rng_state;
static double urand(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (double)((rng_state * 2685821657736338717ull) >> 11) * (1.0 / 9007199254740992.0);
}

enum { MODE_F32 = 0, MODE_TF32, MODE_F16, MODE_BF16, MODE_COUNT };
static const char *mode_name[] = {"f32", "tf32", "f16", "bf16"};
static int mode_dtype(int m) { return m == MODE_F16 ? GC_F16 : m == MODE_BF16 ? GC_BF16 : GC_F32; }

/* host float -> storage bytes (rounded) and back, so the reference sees what the GPU reads */
static void to_storage(int dtype, const float *src, void *dst, size_t n)
{
    if (dtype == GC_F16) gc_f32_to_f16(src, (uint16_t *)dst, n);
    else if (dtype == GC_BF16) gc_f32_to_bf16(src, (uint16_t *)dst, n);
    else memcpy(dst, src, n * 4);
}
static void from_storage(int dtype, const void *src, float *dst, size_t n)
{
    if (dtype == GC_F16) gc_f16_to_f32((const uint16_t *)src, dst, n);
    else if (dtype == GC_BF16) gc_bf16_to_f32((const uint16_t *)src, dst, n);
    else memcpy(dst, src, n * 4);
}

static double act_d(int act, double v)
{
    switch (act) {
    case GC_ACT_RELU: return v < 0 ? 0 : v;
    case GC_ACT_TANH: return tanh(v);
    case GC_ACT_SIGMOID: return 1.0 / (1.0 + exp(-v));
    default: return v;
    }
}

struct epi_combo { float alpha, beta; int bias, act; };
static const epi_combo combos[] = {
    {1.0f, 0.0f, 0, GC_ACT_LINEAR}, {1.5f, 0.0f, 1, GC_ACT_RELU},   {1.0f, 0.5f, 1, GC_ACT_TANH},
    {0.75f, -1.0f, 0, GC_ACT_SIGMOID}, {1.0f, 1.0f, 1, GC_ACT_LINEAR}, {-2.0f, 0.0f, 1, GC_ACT_RELU},
};

static gc_backend g_be;
static int g_fail, g_pass;
static double g_worst[MODE_COUNT];

/* One problem: host copies (as float, rounded to storage), device buffers, reference. */
struct problem {
    int dtype, ta, tb;
    int64_t M, N, K, lda, ldb, ldc;
    int off_a, off_b, off_c; /* element offsets from the allocation (misalignment) */
    std::vector<float> A, B, C0, bias; /* A, B include padding (NaN) */
    std::vector<double> ref;           /* M x N */
    std::vector<double> mag;           /* M x N: |alpha| sum|a b| + |beta C| + |bias| + |ref| */
    void *dA, *dB, *dC, *dbias;
    epi_combo ep;
};

static void problem_make(problem &p, int dtype, int ta, int tb, int64_t M, int64_t N, int64_t K,
                         int pad, int misalign, epi_combo ep)
{
    p.dtype = dtype; p.ta = ta; p.tb = tb; p.M = M; p.N = N; p.K = K; p.ep = ep;
    const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
    /* pad < 0: each leading dimension rounded up to a multiple of 4 elements, plus 4
     * (longer than the row and 16-byte aligned for f32: the SIMT kernel's float4 path) */
    auto ld_of = [pad](int64_t c) { return pad >= 0 ? c + pad : (c + 3) / 4 * 4 + 4; };
    p.lda = ld_of(ac); p.ldb = ld_of(bc); p.ldc = ld_of(N);
    /* misalign: 1 = A, B and C off 16-byte alignment, 2 = A only, 3 = B only */
    p.off_a = misalign == 1 || misalign == 2 ? 1 : 0;
    p.off_b = misalign == 1 || misalign == 3 ? 3 : 0;
    p.off_c = misalign == 1 ? 1 : 0;
    const float nanv = nanf("");
    const double sa = K > 0 ? sqrt(3.0 / (double)K) : 1.0; /* outputs of order 1 */
    p.A.assign((size_t)(ar * p.lda + 1), nanv);
    p.B.assign((size_t)(br * p.ldb + 1), nanv);
    for (int64_t r = 0; r < ar; r++)
        for (int64_t c = 0; c < ac; c++) p.A[r * p.lda + c] = (float)((2 * urand() - 1) * sa);
    for (int64_t r = 0; r < br; r++)
        for (int64_t c = 0; c < bc; c++) p.B[r * p.ldb + c] = (float)(2 * urand() - 1);
    p.C0.assign((size_t)(M * p.ldc), 0.0f);
    for (auto &v : p.C0) v = (float)(2 * urand() - 1);
    p.bias.assign((size_t)N, 0.0f);
    for (auto &v : p.bias) v = (float)(2 * urand() - 1);
    /* round through the storage type so the reference sees the same values */
    const size_t es = gc_dtype_size((gc_dtype)dtype);
    std::vector<unsigned char> tmp;
    auto round_trip = [&](std::vector<float> &v) {
        tmp.resize(v.size() * es);
        to_storage(dtype, v.data(), tmp.data(), v.size());
        from_storage(dtype, tmp.data(), v.data(), v.size());
    };
    round_trip(p.A); round_trip(p.B); round_trip(p.C0); round_trip(p.bias);
    /* reference: row i of op(A) times op(B) with op(B) in a dense K x N double copy, so
     * that the inner loop runs along contiguous memory (the LSTM shapes have K = 6400) */
    p.ref.assign((size_t)(M * N), 0.0);
    p.mag.assign((size_t)(M * N), 0.0);
    std::vector<double> bd((size_t)(K * N)), s((size_t)N), sabs((size_t)N);
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N; j++) bd[k * N + j] = tb ? p.B[j * p.ldb + k] : p.B[k * p.ldb + j];
    for (int64_t i = 0; i < M; i++) {
        std::fill(s.begin(), s.end(), 0.0);
        std::fill(sabs.begin(), sabs.end(), 0.0);
        for (int64_t k = 0; k < K; k++) {
            const double a = ta ? p.A[k * p.lda + i] : p.A[i * p.lda + k];
            const double *brow = &bd[k * N];
            for (int64_t j = 0; j < N; j++) {
                const double t = a * brow[j];
                s[j] += t;
                sabs[j] += fabs(t);
            }
        }
        for (int64_t j = 0; j < N; j++) {
            double v = ep.alpha * s[j], m = fabs(ep.alpha) * sabs[j];
            if (ep.beta != 0) {
                v += ep.beta * (double)p.C0[i * p.ldc + j];
                m += fabs(ep.beta * (double)p.C0[i * p.ldc + j]);
            }
            if (ep.bias) {
                v += p.bias[j];
                m += fabs((double)p.bias[j]);
            }
            p.ref[i * N + j] = act_d(ep.act, v);
            p.mag[i * N + j] = m + fabs(p.ref[i * N + j]); /* the acts have |act'| <= 1 */
        }
    }
    /* device */
    auto up = [&](const std::vector<float> &v, int off, void **d) {
        const size_t n = v.size() + 8;
        std::vector<unsigned char> h(n * es, 0);
        to_storage(dtype, v.data(), h.data() + off * es, v.size());
        CK(cudaMalloc(d, n * es));
        CK(cudaMemcpy(*d, h.data(), n * es, cudaMemcpyHostToDevice));
    };
    up(p.A, p.off_a, &p.dA);
    up(p.B, p.off_b, &p.dB);
    up(p.C0, p.off_c, &p.dC);
    up(p.bias, 0, &p.dbias);
}

static void problem_free(problem &p)
{
    cudaFree(p.dA); cudaFree(p.dB); cudaFree(p.dC); cudaFree(p.dbias);
}

static gc_gemm_desc problem_desc(const problem &p, int impl)
{
    const size_t es = gc_dtype_size((gc_dtype)p.dtype);
    gc_gemm_desc d;
    memset(&d, 0, sizeof d);
    d.dtype = p.dtype; d.trans_a = p.ta; d.trans_b = p.tb;
    d.M = p.M; d.N = p.N; d.K = p.K;
    d.A = (char *)p.dA + p.off_a * es; d.lda = p.lda;
    d.B = (char *)p.dB + p.off_b * es; d.ldb = p.ldb;
    d.C = (char *)p.dC + p.off_c * es; d.ldc = p.ldc;
    d.bias = p.ep.bias ? p.dbias : NULL;
    d.alpha = p.ep.alpha; d.beta = p.ep.beta; d.act = p.ep.act; d.impl = impl;
    return d;
}

/* Resets C on the device: C0 when beta != 0, else NaN; padding gets a sentinel. */
static void problem_reset_c(problem &p)
{
    const size_t es = gc_dtype_size((gc_dtype)p.dtype);
    std::vector<float> c(p.C0.size());
    for (int64_t i = 0; i < p.M; i++)
        for (int64_t j = 0; j < p.ldc; j++)
            c[i * p.ldc + j] = j >= p.N ? 1024.0f : p.ep.beta != 0 ? p.C0[i * p.ldc + j] : nanf("");
    std::vector<unsigned char> h(c.size() * es);
    to_storage(p.dtype, c.data(), h.data(), c.size());
    CK(cudaMemcpy((char *)p.dC + p.off_c * es, h.data(), h.size(), cudaMemcpyHostToDevice));
}

/* relative Frobenius error of C on the device against the reference (<0: NaN or an
 * unwritten element); *elem gets the largest |out - ref| / mag over the elements, the
 * error measured against the size of the terms summed (what rounding scales with). */
static double problem_error(const problem &p, int *bad_padding, double *elem = NULL)
{
    const size_t es = gc_dtype_size((gc_dtype)p.dtype);
    std::vector<unsigned char> h(p.C0.size() * es);
    CK(cudaMemcpy(h.data(), (char *)p.dC + p.off_c * es, h.size(), cudaMemcpyDeviceToHost));
    std::vector<float> c(p.C0.size());
    from_storage(p.dtype, h.data(), c.data(), c.size());
    double num = 0, den = 0;
    int nan = 0;
    *bad_padding = 0;
    if (elem) *elem = 0;
    for (int64_t i = 0; i < p.M; i++)
        for (int64_t j = 0; j < p.ldc; j++) {
            const float v = c[i * p.ldc + j];
            if (j >= p.N) {
                if (v != 1024.0f) *bad_padding = 1;
                continue;
            }
            if (!(v == v) || isinf(v)) nan = 1;
            const double r = p.ref[i * p.N + j], m = p.mag[i * p.N + j];
            num += (v - r) * (v - r);
            den += r * r;
            if (elem && m > 0 && fabs(v - r) / m > *elem) *elem = fabs(v - r) / m;
        }
    if (nan) return -1;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Frobenius tolerance (DESIGN.md), checked when C has >= 64 elements: with fewer, one
 * cancellation (alpha*a*b close to -(beta*C + bias)) makes a relative error of the
 * result meaningless (seen: 1x1x1 TF32 with tanh at 3.4e-3). Every element is also
 * held to tol_elem times the size of the terms it sums (mag). */
static double tol_for(int mode, int64_t K)
{
    if (mode == MODE_F32) return 1e-5 * std::max(1.0, sqrt((double)K) / 8.0);
    if (mode == MODE_TF32) return 5e-4;
    return 1e-2;
}
static double tol_elem_for(int mode, int64_t K)
{
    if (mode == MODE_F32) return 1e-5 * std::max(1.0, sqrt((double)K) / 8.0);
    if (mode == MODE_TF32) return 4e-3; /* two operand roundings of <= 2^-11 each */
    return 2e-2;                        /* output rounding: 2^-9 (bf16) of |ref| <= mag */
}

/* Runs one path on one problem and checks it. */
static void run_case(problem &p, int mode, const char *path, int via_op)
{
    gc_set_allow_tf32(mode != MODE_F32);
    const int vendor = !strcmp(path, "vendor");
    if (force_path(vendor ? "auto" : path)) { printf("bad path %s\n", path); exit(2); }
    problem_reset_c(p);
    gc_status st;
    gc_gemm_desc d = problem_desc(p, vendor ? GC_IMPL_VENDOR : GC_IMPL_OWN);
    if (via_op) { /* through the op adapter: dense tensors */
        const int64_t sa[2] = {p.ta ? p.K : p.M, p.ta ? p.M : p.K};
        const int64_t sb[2] = {p.tb ? p.N : p.K, p.tb ? p.K : p.N};
        const int64_t sc[2] = {p.M, p.N}, sbias[1] = {p.N};
        gc_tensor tA = gc_tensor_make((void *)d.A, (gc_dtype)p.dtype, 2, sa);
        gc_tensor tB = gc_tensor_make((void *)d.B, (gc_dtype)p.dtype, 2, sb);
        gc_tensor tC = gc_tensor_make(d.C, (gc_dtype)p.dtype, 2, sc);
        gc_tensor tbias = gc_tensor_make((void *)d.bias, (gc_dtype)p.dtype, 1, sbias);
        gc_gemm_params prm;
        prm.trans_a = p.ta; prm.trans_b = p.tb; prm.alpha = p.ep.alpha; prm.beta = p.ep.beta;
        prm.act = (gc_act)p.ep.act; prm.impl = vendor ? GC_IMPL_VENDOR : GC_IMPL_OWN;
        gc_op_call call;
        memset(&call, 0, sizeof call);
        call.op = GC_OP_GEMM;
        call.in[0] = &tA; call.in[1] = &tB; call.in[2] = &tbias;
        call.out[0] = &tC;
        call.params = &prm;
        st = gc_cuda_op_gemm(&g_be, &call);
    } else {
        st = gc_cuda_gemm(&g_be, &d);
    }
    const char *taken = last_path();
    cudaError_t ce = cudaStreamSynchronize(g_stream);
    char what[256];
    snprintf(what, sizeof what, "%-4s %-6s->%-8s %s%s %5lldx%5lldx%5lld ld+%lld%s a=%.2g b=%.2g bias=%d act=%d",
             mode_name[mode], path, taken, p.ta ? "T" : "N", p.tb ? "T" : "N", (long long)p.M,
             (long long)p.N, (long long)p.K, (long long)(p.ldc - p.N), p.off_a && p.off_b ? " unaligned" : p.off_a ? " A unaligned" : p.off_b ? " B unaligned" : "",
             p.ep.alpha, p.ep.beta, p.ep.bias, p.ep.act);
    if (st != GC_OK || ce != cudaSuccess) {
        printf("FAIL %s: status %s (%s) cuda %s\n", what, gc_status_name(st), gc_last_error(),
               cudaGetErrorString(ce));
        if (ce != cudaSuccess) exit(3); /* context is gone */
        g_fail++;
        return;
    }
    int badpad = 0;
    double elem = 0;
    const double err = problem_error(p, &badpad, &elem);
    const double tol = tol_for(mode, p.K), tole = tol_elem_for(mode, p.K);
    const int frob_checked = p.M * p.N >= 64;
    const int ok = err >= 0 && (!frob_checked || err <= tol) && elem <= tole && !badpad;
    if (!vendor && frob_checked && err > g_worst[mode]) g_worst[mode] = err;
    if (!ok || getenv("GEMM_VERBOSE"))
        printf("%s %s: err %.3g (tol %.1g%s) elem %.3g (tol %.1g)%s%s\n", ok ? "ok  " : "FAIL", what,
               err, tol, frob_checked ? "" : ", not checked: < 64 outputs", elem, tole,
               err < 0 ? " NaN/unwritten" : "", badpad ? " PADDING WRITTEN" : "");
    if (ok) g_pass++;
    else g_fail++;
}

static int wgmma_ok(void) { return gc_cuda_gemm_wgmma_compiled(&g_be); }

static void correctness(int quick)
{
    struct sz { int64_t M, N, K; };
    std::vector<sz> sizes = {{1, 1, 1},      {37, 53, 71},    {127, 129, 65},  {64, 64, 0},
                             {1000, 3, 500}, {3, 1000, 500},  {256, 256, 256}, {130, 260, 200},
                             {384, 512, 320}, {515, 259, 1000}, {100, 70, 5000}, {300, 200, 3001}};
    if (!quick) sizes.push_back({1024, 1024, 1024});
    int ci = 0;
    for (const sz &s : sizes)
        for (int lay = 0; lay < 4; lay++) {
            const int ta = lay >> 1, tb = lay & 1;
            const epi_combo ep = combos[(ci++) % 6];
            for (int mode = 0; mode < MODE_COUNT; mode++) {
                problem p;
                problem_make(p, mode_dtype(mode), ta, tb, s.M, s.N, s.K, 0, 0, ep);
                run_case(p, mode, "small", 1);
                if (mode == MODE_F32) {
                    run_case(p, mode, "auto", 1);
                    run_case(p, mode, "simt", 1);
                    run_case(p, mode, "vendor", 1);
                } else {
                    run_case(p, mode, "auto", 1);
                    run_case(p, mode, "mma", 1);
                    if (wgmma_ok()) run_case(p, mode, "wgmma", 1);
                    run_case(p, mode, "vendor", 1);
                }
                problem_free(p);
            }
        }
    /* strided / misaligned through gc_cuda_gemm */
    std::vector<sz> ssizes = {{100, 200, 77}, {333, 300, 150}, {17, 9, 3}};
    for (const sz &s : ssizes)
        for (int lay = 0; lay < 4; lay++)
            for (int mis = 0; mis < 2; mis++) {
                const int ta = lay >> 1, tb = lay & 1;
                const epi_combo ep = combos[(ci++) % 6];
                for (int mode = 0; mode < MODE_COUNT; mode++) {
                    problem p;
                    problem_make(p, mode_dtype(mode), ta, tb, s.M, s.N, s.K, 5, mis, ep);
                    run_case(p, mode, "small", 0);
                    if (mode == MODE_F32) {
                        run_case(p, mode, "auto", 0);
                        run_case(p, mode, "simt", 0);
                    } else {
                        run_case(p, mode, "mma", 0);
                        if (wgmma_ok()) run_case(p, mode, "wgmma", 0);
                    }
                    run_case(p, mode, "vendor", 0);
                    problem_free(p);
                }
            }
    /* exact f32 on the SIMT kernel (forced, TF32 off): its 16-byte load path (operand
     * pointer and leading dimension multiples of 4 floats, here with rows longer than the
     * matrix) and the scalar fallback (either operand or both misaligned, odd leading
     * dimensions), every transpose case, M / N off the 128 tile, K off the 8-slice and
     * K < 8 */
    {
        std::vector<sz> fsizes = {{129, 131, 13}, {300, 136, 67}, {64, 260, 5}, {260, 64, 3},
                                  {1, 200, 9},    {200, 1, 9},    {131, 257, 8}, {33, 40, 1},
                                  {256, 128, 130}, {140, 390, 700}};
        for (const sz &s : fsizes)
            for (int lay = 0; lay < 4; lay++)
                for (int var = 0; var < 5; var++) {
                    /* var 0: dense (pad 0; aligned only when the row lengths are multiples
                     * of 4), 1: aligned rows longer than the matrix, 2: all misaligned +
                     * odd pad, 3: A misaligned, 4: B misaligned (aligned pads) */
                    static const int pads[5] = {0, -1, 5, -1, -1}, mis[5] = {0, 0, 1, 2, 3};
                    problem p;
                    problem_make(p, GC_F32, lay >> 1, lay & 1, s.M, s.N, s.K, pads[var], mis[var],
                                 combos[(ci++) % 6]);
                    run_case(p, MODE_F32, "simt", var == 0);
                    problem_free(p);
                }
    }
    /* the recurrent layers' GEMMs at their real sizes (batch 64 x 100 steps, 256 inputs,
     * LSTM 4 x 128, GRU 3 x 128, SimpleRNN 128 units): input projection with bias, data
     * gradient, weight gradients (few output tiles, long K: split K, also with beta = 1 to
     * accumulate) */
    if (!quick) {
        struct rs { int64_t M, N, K; int ta, tb; epi_combo ep; };
        const epi_combo fwd = {1.0f, 0.0f, 1, GC_ACT_LINEAR}, plain = {1.0f, 0.0f, 0, GC_ACT_LINEAR},
                        accum = {1.0f, 1.0f, 0, GC_ACT_LINEAR};
        const rs rsh[] = {
            {6400, 512, 256, 0, 0, fwd},   {6400, 256, 512, 0, 1, plain}, {256, 512, 6400, 1, 0, plain},
            {128, 512, 6400, 1, 0, accum}, {6400, 384, 256, 0, 0, fwd},   {6400, 128, 256, 0, 0, fwd},
            {256, 384, 6400, 1, 0, plain}, {6400, 256, 384, 0, 1, plain}, {128, 128, 6400, 1, 0, plain},
        };
        for (const rs &r : rsh) {
            problem p;
            problem_make(p, GC_F32, r.ta, r.tb, r.M, r.N, r.K, 0, 0, r.ep);
            run_case(p, MODE_F32, "simt", 1);
            run_case(p, MODE_F32, "auto", 1);
            problem_free(p);
        }
    }
    /* TF32 on wgmma without the rounding copy: report the truncation error */
    if (wgmma_ok()) {
        problem p;
        problem_make(p, GC_F32, 0, 1, 512, 512, 512, 0, 0, combos[0]);
        gc_cuda_gemm_set_tf32_round(0);
        gc_set_allow_tf32(1);
        force_path("wgmma");
        problem_reset_c(p);
        gc_gemm_desc d = problem_desc(p, GC_IMPL_OWN);
        gc_status st = gc_cuda_gemm(&g_be, &d);
        CK(cudaStreamSynchronize(g_stream));
        int bp;
        printf("info: tf32 wgmma, operands truncated by the tensor cores (no rounding copy): "
               "status %d err %.3g (rounded: worst tf32 above)\n",
               (int)st, problem_error(p, &bp));
        gc_cuda_gemm_set_tf32_round(1);
        problem_free(p);
    }
    /* graph capture of a GEMM that takes the auto path (wgmma on sm_90a) */
    {
        problem p;
        problem_make(p, GC_BF16, 0, 0, 2048, 1024, 512, 0, 0, combos[1]);
        force_path("auto");
        gc_set_allow_tf32(1);
        gc_gemm_desc d = problem_desc(p, GC_IMPL_OWN);
        problem_reset_c(p);
        gc_status st = gc_cuda_gemm(&g_be, &d); /* eager first: sizes the workspace */
        CK(cudaStreamSynchronize(g_stream));
        problem_reset_c(p);
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        CK(cudaStreamBeginCapture(g_stream, cudaStreamCaptureModeThreadLocal));
        gc_status st2 = gc_cuda_gemm(&g_be, &d);
        cudaError_t ce = cudaStreamEndCapture(g_stream, &graph);
        int bp = 0;
        double err = -2;
        if (st == GC_OK && st2 == GC_OK && ce == cudaSuccess) {
            CK(cudaGraphInstantiate(&exec, graph, 0));
            CK(cudaGraphLaunch(exec, g_stream));
            CK(cudaStreamSynchronize(g_stream));
            err = problem_error(p, &bp);
            cudaGraphExecDestroy(exec);
            cudaGraphDestroy(graph);
        } else {
            (void)cudaGetLastError();
        }
        const int ok = err >= 0 && err <= 1e-2 && !bp;
        printf("%s graph capture (bf16 2048x1024x512 via %s): status %d/%d capture %s err %.3g\n",
               ok ? "ok  " : "FAIL", last_path(), (int)st, (int)st2,
               cudaGetErrorString(ce), err);
        if (!ok) printf("     %s\n", gc_last_error());
        ok ? g_pass++ : g_fail++;
        problem_free(p);
    }
    force_path("auto");
}

/* ------------------------------------------------------------------ benchmark */
template <typename T>
__global__ void fill_kernel(T *p, int64_t n, uint64_t seed, float scale)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const float u = gc_uniform01_dev(seed, (uint64_t)i) * 2.0f - 1.0f;
        p[i] = gc_from_f<T>(u * scale);
    }
}

static void fill(int dtype, void *p, int64_t n, uint64_t seed, float scale)
{
    GC_CUDA_DISPATCH_FLOAT(dtype, T, fill_kernel<T><<<1024, 256, 0, g_stream>>>((T *)p, n, seed, scale));
    CK(cudaGetLastError());
}

static double sample_check(const gc_gemm_desc &d, int nsamp)
{
    const size_t es = gc_dtype_size((gc_dtype)d.dtype);
    const int64_t na = d.M * d.K, nb = d.K * d.N;
    std::vector<unsigned char> ha(na * es), hb(nb * es), hc(d.M * d.N * es);
    CK(cudaMemcpy(ha.data(), d.A, ha.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb.data(), d.B, hb.size(), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hc.data(), d.C, hc.size(), cudaMemcpyDeviceToHost));
    std::vector<float> A(na), B(nb), C(d.M * d.N);
    from_storage(d.dtype, ha.data(), A.data(), na);
    from_storage(d.dtype, hb.data(), B.data(), nb);
    from_storage(d.dtype, hc.data(), C.data(), d.M * d.N);
    double num = 0, den = 0;
    for (int s = 0; s < nsamp; s++) {
        const int64_t i = (int64_t)(urand() * d.M), j = (int64_t)(urand() * d.N);
        double acc = 0;
        for (int64_t k = 0; k < d.K; k++) {
            const double a = d.trans_a ? A[k * d.lda + i] : A[i * d.lda + k];
            const double b = d.trans_b ? B[j * d.ldb + k] : B[k * d.ldb + j];
            acc += a * b;
        }
        const double v = C[i * d.ldc + j];
        if (!(v == v)) return -1;
        num += (v - acc) * (v - acc);
        den += acc * acc;
    }
    return sqrt(num / den);
}

static float time_gemm(const gc_gemm_desc &d, int warm, int reps)
{
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    for (int i = 0; i < warm; i++)
        if (gc_cuda_gemm(&g_be, &d)) { printf("  gemm failed: %s\n", gc_last_error()); return -1; }
    CK(cudaStreamSynchronize(g_stream));
    std::vector<float> t;
    for (int i = 0; i < reps; i++) {
        CK(cudaEventRecord(e0, g_stream));
        gc_cuda_gemm(&g_be, &d);
        CK(cudaEventRecord(e1, g_stream));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

static void bench_square(void)
{
    printf("\n== GEMM C = A @ B (row-major, A MxK, B KxN), TFLOP/s, median of 15 ==\n");
    printf("%-22s %6s %10s %10s %8s %10s %10s\n", "dtype/layout", "size", "ours", "cuBLASLt",
           "ratio", "path", "spot-err");
    const int sizes[2] = {4096, 8192};
    struct row { const char *name; int mode; const char *force; int ta, tb, round, mc; };
    const row rows[] = {
        {"f32 (exact, SIMT)", MODE_F32, "auto", 0, 0, 1, 1},
        {"f32 NT (SIMT)", MODE_F32, "auto", 0, 1, 1, 1},
        {"f32 TN (SIMT)", MODE_F32, "auto", 1, 0, 1, 1},
        {"f32 TT (SIMT)", MODE_F32, "auto", 1, 1, 1, 1},
        {"tf32 NN", MODE_TF32, "auto", 0, 0, 1, 1},
        {"tf32 NN truncating", MODE_TF32, "auto", 0, 0, 0, 1},
        {"tf32 NT", MODE_TF32, "auto", 0, 1, 1, 1},
        {"tf32 NT truncating", MODE_TF32, "auto", 0, 1, 0, 1},
        {"f16 NN", MODE_F16, "auto", 0, 0, 1, 1},
        {"bf16 NN", MODE_BF16, "auto", 0, 0, 1, 1},
        {"bf16 NT", MODE_BF16, "auto", 0, 1, 1, 1},
        {"bf16 TN", MODE_BF16, "auto", 1, 0, 1, 1},
        {"bf16 NN no multicast", MODE_BF16, "wgmma", 0, 0, 0, 0},
        {"bf16 NN mma.sync", MODE_BF16, "mma", 0, 0, 1, 1},
        {"tf32 NN mma.sync", MODE_TF32, "mma", 0, 0, 1, 1},
    };
    for (int si = 0; si < 2; si++) {
        const int64_t n = sizes[si];
        for (const row &r : rows) {
            const int dtype = mode_dtype(r.mode);
            const size_t es = gc_dtype_size((gc_dtype)dtype);
            void *A, *B, *C;
            CK(cudaMalloc(&A, n * n * es));
            CK(cudaMalloc(&B, n * n * es));
            CK(cudaMalloc(&C, n * n * es));
            fill(dtype, A, n * n, 1 + si, 1.0f / sqrtf((float)n));
            fill(dtype, B, n * n, 7 + si, 1.0f);
            gc_gemm_desc d;
            memset(&d, 0, sizeof d);
            d.dtype = dtype; d.trans_a = r.ta; d.trans_b = r.tb; d.M = n; d.N = n; d.K = n;
            d.A = A; d.lda = n; d.B = B; d.ldb = n; d.C = C; d.ldc = n;
            d.alpha = 1; d.beta = 0; d.act = GC_ACT_LINEAR;
            gc_set_allow_tf32(r.mode != MODE_F32);
            gc_cuda_gemm_set_tf32_round(r.round);
            force_path(r.force);
            gc_cuda_gemm_set_wgmma_multicast(r.mc);
            const int reps = (r.mode == MODE_F32 || !strcmp(r.force, "mma")) && n == 8192 ? 10 : 15;
            const float ms = time_gemm(d, 3, reps);
            const char *path = last_path();
            const double err = ms > 0 ? sample_check(d, 256) : -1;
            d.impl = GC_IMPL_VENDOR;
            float msv = -1;
            if (r.round && !strcmp(r.force, "auto")) msv = time_gemm(d, 3, reps);
            const double fl = 2.0 * n * n * n;
            const double tf = ms > 0 ? fl / (ms * 1e-3) / 1e12 : 0, tv = msv > 0 ? fl / (msv * 1e-3) / 1e12 : 0;
            printf("%-22s %6lld %10.1f %10.1f %7.0f%% %10s %10.2g\n", r.name, (long long)n, tf, tv,
                   tv > 0 ? 100.0 * tf / tv : 0.0, path, err);
            fflush(stdout);
            cudaFree(A); cudaFree(B); cudaFree(C);
        }
    }
    force_path("auto");
    gc_cuda_gemm_set_tf32_round(1);
    gc_cuda_gemm_set_wgmma_multicast(1);
    printf("wgmma persistent grid: %d clusters of 2 blocks resident\n", gc_cuda_gemm_wgmma_clusters(&g_be));
}

/* The exact-f32 GEMMs of one recurrent layer's training step (batch 64 x 100 steps,
 * 256 inputs, 128 units): what the SIMT kernel is tuned for. */
static void bench_rnn(void)
{
    printf("\n== recurrent layers' GEMMs, exact f32 (TF32 off), us per call and TFLOP/s, median of 30 ==\n");
    printf("%-28s %6s %5s %5s %3s %9s %7s %9s %7s %7s %8s\n", "gemm", "M", "N", "K", "op", "ours",
           "TFLOP/s", "cuBLASLt", "TFLOP/s", "ratio", "path");
    struct g { const char *name; int64_t M, N, K; int ta, tb, bias; };
    const g gs[] = {
        {"LSTM x W (bias)", 6400, 512, 256, 0, 0, 1},  {"LSTM dX = dG W^T", 6400, 256, 512, 0, 1, 0},
        {"LSTM dW = x^T dG", 256, 512, 6400, 1, 0, 0}, {"LSTM dU = h^T dG", 128, 512, 6400, 1, 0, 0},
        {"GRU x W (bias)", 6400, 384, 256, 0, 0, 1},   {"GRU dW = x^T dG", 256, 384, 6400, 1, 0, 0},
        {"SimpleRNN x W (bias)", 6400, 128, 256, 0, 0, 1},
    };
    for (const g &x : gs) {
        float *A, *B, *C, *bias;
        CK(cudaMalloc(&A, x.M * x.K * 4));
        CK(cudaMalloc(&B, x.K * x.N * 4));
        CK(cudaMalloc(&C, x.M * x.N * 4));
        CK(cudaMalloc(&bias, x.N * 4));
        fill(GC_F32, A, x.M * x.K, 3, 1.0f);
        fill(GC_F32, B, x.K * x.N, 4, 1.0f);
        fill(GC_F32, bias, x.N, 5, 1.0f);
        gc_gemm_desc d;
        memset(&d, 0, sizeof d);
        d.dtype = GC_F32; d.trans_a = x.ta; d.trans_b = x.tb; d.M = x.M; d.N = x.N; d.K = x.K;
        d.A = A; d.lda = x.ta ? x.M : x.K; d.B = B; d.ldb = x.tb ? x.K : x.N; d.C = C; d.ldc = x.N;
        d.bias = x.bias ? bias : NULL; d.alpha = 1; d.beta = 0; d.act = GC_ACT_LINEAR;
        gc_set_allow_tf32(0);
        force_path("auto");
        const float ms = time_gemm(d, 5, 30);
        const char *path = last_path();
        d.impl = GC_IMPL_VENDOR;
        const float msv = time_gemm(d, 5, 30);
        const double fl = 2.0 * x.M * x.N * x.K;
        printf("%-28s %6lld %5lld %5lld  %c%c %9.1f %7.1f %9.1f %7.1f %6.0f%% %8s\n", x.name, (long long)x.M,
               (long long)x.N, (long long)x.K, x.ta ? 'T' : 'N', x.tb ? 'T' : 'N', ms * 1e3,
               ms > 0 ? fl / (ms * 1e-3) / 1e12 : 0.0, msv * 1e3, msv > 0 ? fl / (msv * 1e-3) / 1e12 : 0.0,
               msv > 0 && ms > 0 ? 100.0 * msv / ms : 0.0, path);
        fflush(stdout);
        cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(bias);
    }
    gc_set_allow_tf32(1);
}

static void bench_cnn(void)
{
    printf("\n== seed CNN as GEMMs (batch 128, im2col), us per call, median of 50 ==\n");
    printf("%-26s %7s %5s %5s %6s %9s %9s %8s %8s\n", "gemm", "M", "N", "K", "dtype", "ours", "cuBLASLt",
           "ratio", "path");
    struct g { const char *name; int64_t M, N, K; int ta, tb, act, bias; };
    const g gs[] = {
        {"conv1 fwd 3x3x1->32", 128 * 26 * 26, 32, 9, 0, 0, GC_ACT_RELU, 1},
        {"conv2 fwd 3x3x32->64", 128 * 11 * 11, 64, 288, 0, 0, GC_ACT_RELU, 1},
        {"conv3 fwd 3x3x64->64", 128 * 3 * 3, 64, 576, 0, 0, GC_ACT_RELU, 1},
        {"dense1 fwd 576->64", 128, 64, 576, 0, 0, GC_ACT_RELU, 1},
        {"dense2 fwd 64->10", 128, 10, 64, 0, 0, GC_ACT_LINEAR, 1},
        {"conv2 dW (x^T dy)", 288, 64, 128 * 11 * 11, 1, 0, GC_ACT_LINEAR, 0},
        {"conv2 dX (dy w^T)", 128 * 11 * 11, 288, 64, 0, 1, GC_ACT_LINEAR, 0},
        {"dense1 dW (x^T dy)", 576, 64, 128, 1, 0, GC_ACT_LINEAR, 0},
    };
    const int modes[3] = {MODE_F32, MODE_TF32, MODE_BF16};
    for (const g &x : gs)
        for (int mi = 0; mi < 3; mi++) {
            const int mode = modes[mi], dtype = mode_dtype(mode);
            const size_t es = gc_dtype_size((gc_dtype)dtype);
            void *A, *B, *C, *bias;
            CK(cudaMalloc(&A, x.M * x.K * es));
            CK(cudaMalloc(&B, x.K * x.N * es));
            CK(cudaMalloc(&C, x.M * x.N * es));
            CK(cudaMalloc(&bias, x.N * es));
            fill(dtype, A, x.M * x.K, 3, 1.0f);
            fill(dtype, B, x.K * x.N, 4, 1.0f);
            fill(dtype, bias, x.N, 5, 1.0f);
            gc_gemm_desc d;
            memset(&d, 0, sizeof d);
            d.dtype = dtype; d.trans_a = x.ta; d.trans_b = x.tb; d.M = x.M; d.N = x.N; d.K = x.K;
            d.A = A; d.lda = x.ta ? x.M : x.K; d.B = B; d.ldb = x.tb ? x.K : x.N; d.C = C; d.ldc = x.N;
            d.bias = x.bias ? bias : NULL; d.alpha = 1; d.beta = 0; d.act = x.act;
            gc_set_allow_tf32(mode != MODE_F32);
            const float ms = time_gemm(d, 5, 50);
            const char *path = last_path();
            d.impl = GC_IMPL_VENDOR;
            const float msv = time_gemm(d, 5, 50);
            printf("%-26s %7lld %5lld %5lld %6s %9.1f %9.1f %7.0f%% %8s\n", x.name, (long long)x.M,
                   (long long)x.N, (long long)x.K, mode_name[mode], ms * 1e3, msv * 1e3,
                   msv > 0 && ms > 0 ? 100.0 * msv / ms : 0.0, path);
            fflush(stdout);
            cudaFree(A); cudaFree(B); cudaFree(C); cudaFree(bias);
        }
}

int main(int argc, char **argv)
{
    uint64_t seed = (uint64_t)time(NULL);
    int bench = 0, quick = 0, only_bench = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--bench")) bench = 1;
        else if (!strcmp(argv[i], "--quick")) quick = 1;
        else if (!strcmp(argv[i], "--only-bench")) bench = only_bench = 1;
        else { fprintf(stderr, "usage: %s [--seed N] [--bench] [--quick] [--only-bench]\n", argv[0]); return 2; }
    }
    rng_state = seed * 2654435761ull + 88172645463325252ull;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    CK(cudaSetDevice(0));
    CK(cudaStreamCreateWithFlags(&g_stream, cudaStreamNonBlocking));
    g_cc = prop.major * 10 + prop.minor;
    g_sms = prop.multiProcessorCount;
    int optin = 0;
    CK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0));
    g_optin = (size_t)optin;
    memset(&g_be, 0, sizeof g_be);
    g_be.name = "cuda";
    g_be.device_index = 0;
    gc_variant_register_backend("cuda", NULL, 0);
    time_t now = time(NULL);
    char date[64];
    strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", gmtime(&now));
    printf("device: %s (cc %d.%d, %d SMs, %zu KB smem opt-in), %s; seed %llu\n", prop.name, prop.major,
           prop.minor, g_sms, g_optin / 1024, date, (unsigned long long)seed);
    printf("wgmma (sm_90a) code for this device: %s\n", wgmma_ok() ? "yes" : "no");
    if (!only_bench) {
        correctness(quick);
        printf("\ncorrectness: %d passed, %d failed; worst own-kernel errors: f32 %.3g, tf32 %.3g, "
               "f16 %.3g, bf16 %.3g\n",
               g_pass, g_fail, g_worst[0], g_worst[1], g_worst[2], g_worst[3]);
    }
    if (bench) {
        bench_square();
        bench_rnn();
        bench_cnn();
    }
    return g_fail ? 1 : 0;
}
