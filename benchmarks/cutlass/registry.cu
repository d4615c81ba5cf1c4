/* registry.cu -- the public C API of libgpucmp_cutlass_bench.so (gcb.h) over the configs of
 * configs.h.
 *
 * What it provides: gcb_build_info, the per-kind count / describe / workspace / run
 * functions, dispatching by config id to the entry points gemm_inst.cu and conv_inst.cu
 * define (one object file per config); describe() is a JSON object per config with its
 * tile, stages, alignment, the kernel's shared memory bytes and threads (asked of the
 * instantiated kernel), "sm86": whether that shared memory fits one block of an sm_86
 * card (<= 99 KB opt-in, 101376 bytes -- the RTX A4000 / A5000), and "built": false for
 * a stand-in whose instantiation did not compile (stub_inst.cu).
 *
 * Why: the config table is written once (configs.h, an X-macro) and every list here is
 * derived from it, so adding a config is one line there; no CUTLASS header is included
 * here (entry.h is plain C++), so this file builds in a second.
 */
#include <cstdio>
#include <cstring>

#include "configs.h"
#include "entry.h"

#ifndef GCB_ARCH
#define GCB_ARCH "unknown"
#endif
#ifndef GCB_CUTLASS_VERSION
#define GCB_CUTLASS_VERSION "unknown"
#endif

/* the objects are built with -fvisibility=hidden: only the gcb.h API is exported */
#define GCB_API extern "C" __attribute__((visibility("default")))

/* the entry points, one per config */
#define GCB_X(ID, ...) \
    extern "C" int gcb_gemm_entry_##ID(int, const gcb::GemmArgs *, const gcb::Launch *, gcb::KernelInfo *, size_t *);
GCB_GEMM_CONFIGS(GCB_X)
#undef GCB_X
#define GCB_X(ID, ...) \
    extern "C" int gcb_conv_entry_##ID(int, const gcb::ConvArgs *, const gcb::Launch *, gcb::KernelInfo *, size_t *);
GCB_CONV_CONFIGS(GCB_X)
#undef GCB_X

namespace {

const int kSm86SmemOptin = 101376; /* cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_86 (99 KB) */

struct GemmRow {
    int id;
    gcb_gemm_entry_fn fn;
    const char *dt, *la, *lb;
    int tm, tn, tk, wm, wn, wk, stages, align;
};
struct ConvRow {
    int id;
    gcb_conv_entry_fn fn;
    const char *pass, *dt, *algo, *ss;
    int tm, tn, tk, wm, wn, wk, stages, align;
};

#define GCB_X(ID, DT, LA, LB, TM, TN, TK, WM, WN, WK, ST, AL) \
    {ID, gcb_gemm_entry_##ID, #DT, #LA, #LB, TM, TN, TK, WM, WN, WK, ST, AL},
constexpr GemmRow kGemm[] = {GCB_GEMM_CONFIGS(GCB_X)};
#undef GCB_X
#define GCB_X(ID, PASS, DT, ALGO, SS, TM, TN, TK, WM, WN, WK, ST, AL) \
    {ID, gcb_conv_entry_##ID, #PASS, #DT, #ALGO, #SS, TM, TN, TK, WM, WN, WK, ST, AL},
constexpr ConvRow kConv[] = {GCB_CONV_CONFIGS(GCB_X)};
#undef GCB_X

constexpr int kGemmCount = (int)(sizeof kGemm / sizeof kGemm[0]);
constexpr int kConvCount = (int)(sizeof kConv / sizeof kConv[0]);

template <class Row, int N>
constexpr bool ids_in_order(const Row (&rows)[N])
{
    for (int i = 0; i < N; i++)
        if (rows[i].id != i) return false;
    return true;
}
static_assert(ids_in_order(kGemm), "configs.h: GEMM ids must be 0, 1, 2, ... in order");
static_assert(ids_in_order(kConv), "configs.h: conv ids must be 0, 1, 2, ... in order");

const char *dtype_name(const char *t)
{
    if (!strcmp(t, "f16")) return "float16";
    if (!strcmp(t, "bf16")) return "bfloat16";
    if (!strcmp(t, "tf32")) return "tfloat32";
    return t;
}

/* "Row" / "Col" -> the gpucmp transpose flag's letter: n (as stored) or t (transposed) */
char trans_letter(const char *layout) { return strcmp(layout, "Row") ? 't' : 'n'; }

const char *lower_pass(const char *p)
{
    if (!strcmp(p, "Fprop")) return "fprop";
    if (!strcmp(p, "Dgrad")) return "dgrad";
    if (!strcmp(p, "Wgrad")) return "wgrad";
    return p;
}

/* a stand-in (stub_inst.cu: the instantiation did not compile) reports -1 bytes */
const char *built(const gcb::KernelInfo &i) { return i.smem_bytes >= 0 ? "true" : "false"; }
const char *fits_sm86(const gcb::KernelInfo &i)
{
    return i.smem_bytes >= 0 && i.smem_bytes <= kSm86SmemOptin ? "true" : "false";
}

void set_msg(char *msg, int len, const char *text)
{
    if (msg && len > 0) snprintf(msg, (size_t)len, "%s", text);
}

char g_gemm_json[kGemmCount][512];
char g_conv_json[kConvCount][512];
char g_build_json[256];

} // namespace

GCB_API const char *gcb_build_info(void)
{
    snprintf(g_build_json, sizeof g_build_json,
             "{\"cutlass\": \"%s\", \"arch\": \"%s\", \"nvcc\": \"%d.%d\", \"gemm\": %d, \"conv\": %d}",
             GCB_CUTLASS_VERSION, GCB_ARCH, __CUDACC_VER_MAJOR__, __CUDACC_VER_MINOR__, kGemmCount, kConvCount);
    return g_build_json;
}

GCB_API int gcb_gemm_count(void) { return kGemmCount; }

GCB_API const char *gcb_gemm_describe(int id)
{
    if (id < 0 || id >= kGemmCount) return nullptr;
    const GemmRow &r = kGemm[id];
    gcb::KernelInfo info = {0, 0};
    r.fn(gcb::kInfo, nullptr, nullptr, &info, nullptr);
    const char lay[3] = {trans_letter(r.la), trans_letter(r.lb), 0};
    snprintf(g_gemm_json[id], sizeof g_gemm_json[id],
             "{\"id\": %d, \"kind\": \"gemm\", \"name\": \"%s_%s_%dx%dx%d_s%d_a%d\", \"dtype\": \"%s\", "
             "\"layout\": \"%s\", \"tile\": [%d, %d, %d], \"warp\": [%d, %d, %d], \"stages\": %d, "
             "\"align\": %d, \"smem_bytes\": %d, \"threads\": %d, \"sm86\": %s, \"built\": %s}",
             id, r.dt, lay, r.tm, r.tn, r.tk, r.stages, r.align, dtype_name(r.dt), lay, r.tm, r.tn, r.tk, r.wm, r.wn,
             r.wk, r.stages, r.align, info.smem_bytes, info.threads, fits_sm86(info), built(info));
    return g_gemm_json[id];
}

GCB_API size_t gcb_gemm_workspace(int id, int m, int n, int k)
{
    if (id < 0 || id >= kGemmCount) return 0;
    gcb::GemmArgs a = {m, n, k, nullptr, nullptr, nullptr, 1.0f, 0.0f};
    size_t ws = 0;
    kGemm[id].fn(gcb::kWorkspace, &a, nullptr, nullptr, &ws);
    return ws;
}

GCB_API int gcb_gemm_run(int id, int m, int n, int k, const void *A, const void *B, void *C, float alpha,
                            float beta, void *workspace, size_t workspace_bytes, int iters, void *stream, char *msg,
                            int msg_len)
{
    set_msg(msg, msg_len, "");
    if (id < 0 || id >= kGemmCount) {
        if (msg && msg_len > 0) snprintf(msg, (size_t)msg_len, "gemm: no config %d (there are %d)", id, kGemmCount);
        return GCB_INVALID_ARG;
    }
    gcb::GemmArgs a = {m, n, k, A, B, C, alpha, beta};
    gcb::Launch l = {workspace, workspace_bytes, iters, stream, msg, msg_len};
    return kGemm[id].fn(gcb::kRun, &a, &l, nullptr, nullptr);
}

GCB_API int gcb_conv_count(void) { return kConvCount; }

GCB_API const char *gcb_conv_describe(int id)
{
    if (id < 0 || id >= kConvCount) return nullptr;
    const ConvRow &r = kConv[id];
    gcb::KernelInfo info = {0, 0};
    r.fn(gcb::kInfo, nullptr, nullptr, &info, nullptr);
    const char *algo = !strcmp(r.algo, "kOptimized")       ? "optimized"
                       : !strcmp(r.algo, "kAnalytic")     ? "analytic"
                       : !strcmp(r.algo, "kFixedChannels") ? "fixed_channels"
                                                           : r.algo;
    const char *ss = !strcmp(r.ss, "kUnity") ? "unity" : "strided";
    snprintf(g_conv_json[id], sizeof g_conv_json[id],
             "{\"id\": %d, \"kind\": \"conv\", \"name\": \"%s_%s_%s%s_%dx%dx%d_s%d_a%d\", \"op\": \"%s\", "
             "\"dtype\": \"%s\", \"iterator\": \"%s\", \"stride_support\": \"%s\", \"tile\": [%d, %d, %d], "
             "\"warp\": [%d, %d, %d], \"stages\": %d, \"align\": %d, \"smem_bytes\": %d, \"threads\": %d, "
             "\"sm86\": %s, \"built\": %s}",
             id, r.dt, lower_pass(r.pass), algo, !strcmp(r.pass, "Dgrad") ? (ss[0] == 'u' ? "_unity" : "_strided") : "",
             r.tm, r.tn, r.tk, r.stages, r.align, lower_pass(r.pass), dtype_name(r.dt), algo, ss, r.tm, r.tn, r.tk, r.wm, r.wn,
             r.wk, r.stages, r.align, info.smem_bytes, info.threads, fits_sm86(info), built(info));
    return g_conv_json[id];
}

GCB_API int gcb_conv_workspace(int id, const gcb_conv_problem *p, size_t *bytes, char *msg, int msg_len)
{
    set_msg(msg, msg_len, "");
    if (id < 0 || id >= kConvCount || !p || !bytes) {
        set_msg(msg, msg_len, "conv: bad config id or NULL argument");
        return GCB_INVALID_ARG;
    }
    gcb::ConvArgs a = {*p, nullptr, nullptr, nullptr, 1.0f, 0.0f};
    *bytes = 0;
    return kConv[id].fn(gcb::kWorkspace, &a, nullptr, nullptr, bytes);
}

GCB_API int gcb_conv_run(int id, const gcb_conv_problem *p, void *x, void *w, void *y, float alpha, float beta,
                            void *workspace, size_t workspace_bytes, int iters, void *stream, char *msg, int msg_len)
{
    set_msg(msg, msg_len, "");
    if (id < 0 || id >= kConvCount || !p) {
        if (msg && msg_len > 0) snprintf(msg, (size_t)msg_len, "conv: no config %d (there are %d)", id, kConvCount);
        return GCB_INVALID_ARG;
    }
    gcb::ConvArgs a = {*p, x, w, y, alpha, beta};
    gcb::Launch l = {workspace, workspace_bytes, iters, stream, msg, msg_len};
    return kConv[id].fn(gcb::kRun, &a, &l, nullptr, nullptr);
}
