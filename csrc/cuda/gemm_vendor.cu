/* gemm_vendor.cu -- impl = vendor: the same GEMM through cuBLASLt, as the baseline.
 *
 * What it provides: gc_cuda_gemm_vendor. cuBLASLt is opened at run time (dlopen of
 * $GPUCMP_CUBLASLT, then libcublasLt.so.13 / .12 / .11 / libcublasLt.so, then the same
 * names under /usr/local/cuda/lib64), so importing gpucmp never needs it; when it is
 * absent the call fails with GC_ERR_UNSUPPORTED and says so. Only cublasLt.h's types
 * and enums are used at compile time (no link); without the header the file compiles
 * to the "not found" answer.
 *
 * Design: cuBLAS is column-major, so the row-major C (M x N) is computed as the
 * column-major C^T = op(B)^T op(A)^T: cuBLAS's "A" is our B, its "B" our A, m = N,
 * n = M, and each buffer is described as stored (a row-major K x N is a column-major
 * N x K with the same leading dimension). The bias (one value per column of C) is then
 * one value per row of C^T, which is what CUBLASLT_EPILOGUE_BIAS adds; relu fuses as
 * RELU_BIAS; tanh / sigmoid (no cuBLASLt epilogue) run as a follow-up in-place pass
 * (gemm.cu). Compute is fp32 (CUBLAS_COMPUTE_32F, or _FAST_TF32 for f32 when
 * gc_get_allow_tf32()), scale type fp32. The heuristic's choice is cached per shape,
 * layout and alignment (64 entries, replaced round robin); handles are per device.
 * The workspace (32 MB) is the backend's gc_cuda_workspace.
 */
#include "gemm.cuh"

#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<cublasLt.h>)
#include <cublasLt.h>
#define GC_HAVE_CUBLASLT_H 1
#endif
#endif

#ifndef GC_HAVE_CUBLASLT_H
extern "C" gc_status gc_cuda_gemm_vendor(const gc_backend *be, const gc_gemm_desc *d)
{
    (void)be;
    (void)d;
    return gc_fail(GC_ERR_UNSUPPORTED,
                   "gemm: impl='vendor' needs libcublasLt, not found (built without cublasLt.h)");
}
#else

namespace {

struct lt_api {
    void *lib;
    const char *path;
    cublasStatus_t (*create)(cublasLtHandle_t *);
    cublasStatus_t (*desc_create)(cublasLtMatmulDesc_t *, cublasComputeType_t, cudaDataType_t);
    cublasStatus_t (*desc_destroy)(cublasLtMatmulDesc_t);
    cublasStatus_t (*desc_set)(cublasLtMatmulDesc_t, cublasLtMatmulDescAttributes_t, const void *, size_t);
    cublasStatus_t (*layout_create)(cublasLtMatrixLayout_t *, cudaDataType, uint64_t, uint64_t, int64_t);
    cublasStatus_t (*layout_destroy)(cublasLtMatrixLayout_t);
    cublasStatus_t (*pref_create)(cublasLtMatmulPreference_t *);
    cublasStatus_t (*pref_destroy)(cublasLtMatmulPreference_t);
    cublasStatus_t (*pref_set)(cublasLtMatmulPreference_t, cublasLtMatmulPreferenceAttributes_t, const void *, size_t);
    cublasStatus_t (*heuristic)(cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t,
                                cublasLtMatrixLayout_t, cublasLtMatrixLayout_t, cublasLtMatrixLayout_t,
                                cublasLtMatmulPreference_t, int, cublasLtMatmulHeuristicResult_t *, int *);
    cublasStatus_t (*matmul)(cublasLtHandle_t, cublasLtMatmulDesc_t, const void *, const void *,
                             cublasLtMatrixLayout_t, const void *, cublasLtMatrixLayout_t, const void *,
                             const void *, cublasLtMatrixLayout_t, void *, cublasLtMatrixLayout_t,
                             const cublasLtMatmulAlgo_t *, void *, size_t, cudaStream_t);
};

lt_api g_lt;
int g_lt_state; /* 0 not tried, 1 loaded, 2 not found */
pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
cublasLtHandle_t g_handle[64];

#define GC_LT_WORKSPACE ((size_t)32 << 20)

/* key of the heuristic cache */
struct lt_key {
    int dtype, ta, tb, tf32, epi, beta_nz;
    int64_t M, N, K, lda, ldb, ldc;
    uint32_t align_a, align_b, align_c;
    int dev;
};
struct lt_entry {
    int used;
    lt_key key;
    cublasLtMatmulAlgo_t algo;
    size_t ws;
};
lt_entry g_cache[64];
int g_cache_next;

int lt_load_locked(void)
{
    if (g_lt_state) return g_lt_state == 1;
    static const char *names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so.11",
                                  "libcublasLt.so", "/usr/local/cuda/lib64/libcublasLt.so.13",
                                  "/usr/local/cuda/lib64/libcublasLt.so.12",
                                  "/usr/local/cuda/lib64/libcublasLt.so"};
    void *lib = NULL;
    const char *env = getenv("GPUCMP_CUBLASLT");
    if (env && *env) {
        lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
        if (lib) g_lt.path = env;
    }
    for (size_t i = 0; !lib && i < sizeof names / sizeof names[0]; i++) {
        lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (lib) g_lt.path = names[i];
    }
    if (!lib) {
        g_lt_state = 2;
        return 0;
    }
    g_lt.lib = lib;
#define GC_LT_SYM(field, name)                                 \
    do {                                                       \
        *(void **)&g_lt.field = dlsym(lib, name);              \
        if (!g_lt.field) { g_lt_state = 2; return 0; }         \
    } while (0)
    GC_LT_SYM(create, "cublasLtCreate");
    GC_LT_SYM(desc_create, "cublasLtMatmulDescCreate");
    GC_LT_SYM(desc_destroy, "cublasLtMatmulDescDestroy");
    GC_LT_SYM(desc_set, "cublasLtMatmulDescSetAttribute");
    GC_LT_SYM(layout_create, "cublasLtMatrixLayoutCreate");
    GC_LT_SYM(layout_destroy, "cublasLtMatrixLayoutDestroy");
    GC_LT_SYM(pref_create, "cublasLtMatmulPreferenceCreate");
    GC_LT_SYM(pref_destroy, "cublasLtMatmulPreferenceDestroy");
    GC_LT_SYM(pref_set, "cublasLtMatmulPreferenceSetAttribute");
    GC_LT_SYM(heuristic, "cublasLtMatmulAlgoGetHeuristic");
    GC_LT_SYM(matmul, "cublasLtMatmul");
#undef GC_LT_SYM
    g_lt_state = 1;
    return 1;
}

uint32_t align_of(const void *p)
{
    uintptr_t a = (uintptr_t)p;
    uint32_t r = 256;
    while (r > 1 && (a % r) != 0) r >>= 1;
    return r;
}

int key_eq(const lt_key &a, const lt_key &b) { return memcmp(&a, &b, sizeof a) == 0; }

/* One cuBLASLt call; epi is the cuBLASLt epilogue, bias may be NULL. */
gc_status lt_run(const gc_backend *be, cublasLtHandle_t h, const gc_gemm_desc *d, int tf32,
                 cublasLtEpilogue_t epi, const void *bias, void *ws)
{
    const cudaDataType_t t = d->dtype == GC_F16 ? CUDA_R_16F : d->dtype == GC_BF16 ? CUDA_R_16BF : CUDA_R_32F;
    const cublasComputeType_t ct = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    cublasLtMatmulDesc_t op = NULL;
    cublasLtMatrixLayout_t la = NULL, lb = NULL, lc = NULL;
    cublasLtMatmulPreference_t pref = NULL;
    gc_status st = GC_OK;
    cublasStatus_t cs;
    /* cuBLAS A := our B, cuBLAS B := our A (see the header) */
    const cublasOperation_t opa = d->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t opb = d->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const uint64_t ra = d->trans_b ? d->K : d->N, ca = d->trans_b ? d->N : d->K;
    const uint64_t rb = d->trans_a ? d->M : d->K, cb = d->trans_a ? d->K : d->M;
    lt_key key;
    memset(&key, 0, sizeof key);
    key.dtype = d->dtype; key.ta = d->trans_a; key.tb = d->trans_b; key.tf32 = tf32;
    key.epi = (int)epi; key.beta_nz = d->beta != 0.0f;
    key.M = d->M; key.N = d->N; key.K = d->K; key.lda = d->lda; key.ldb = d->ldb; key.ldc = d->ldc;
    key.align_a = align_of(d->B); key.align_b = align_of(d->A); key.align_c = align_of(d->C);
    key.dev = be->device_index;
    if (bias) key.align_c |= align_of(bias) << 16;

#define GC_LT(call)                                                                        \
    do {                                                                                   \
        cs = (call);                                                                       \
        if (cs != CUBLAS_STATUS_SUCCESS) {                                                 \
            st = gc_fail(GC_ERR_BACKEND, "gemm (cuBLASLt): %s failed with status %d", #call, \
                         (int)cs);                                                         \
            goto done;                                                                     \
        }                                                                                  \
    } while (0)
    {
        GC_LT(g_lt.desc_create(&op, ct, CUDA_R_32F));
        GC_LT(g_lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSA, &opa, sizeof opa));
        GC_LT(g_lt.desc_set(op, CUBLASLT_MATMUL_DESC_TRANSB, &opb, sizeof opb));
        GC_LT(g_lt.desc_set(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
        if (bias) GC_LT(g_lt.desc_set(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
        GC_LT(g_lt.layout_create(&la, t, ra, ca, d->ldb));
        GC_LT(g_lt.layout_create(&lb, t, rb, cb, d->lda));
        GC_LT(g_lt.layout_create(&lc, t, d->N, d->M, d->ldc));

        cublasLtMatmulAlgo_t algo;
        size_t need = 0;
        int found = 0;
        pthread_mutex_lock(&g_mu);
        for (int i = 0; i < 64; i++)
            if (g_cache[i].used && key_eq(g_cache[i].key, key)) {
                algo = g_cache[i].algo;
                need = g_cache[i].ws;
                found = 1;
                break;
            }
        pthread_mutex_unlock(&g_mu);
        if (!found) {
            GC_LT(g_lt.pref_create(&pref));
            const size_t wsb = GC_LT_WORKSPACE;
            GC_LT(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
            uint32_t al = key.align_a;
            GC_LT(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al));
            al = key.align_b;
            GC_LT(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al));
            al = align_of(d->C);
            GC_LT(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al));
            GC_LT(g_lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al));
            cublasLtMatmulHeuristicResult_t res;
            int n = 0;
            memset(&res, 0, sizeof res);
            GC_LT(g_lt.heuristic(h, op, la, lb, lc, lc, pref, 1, &res, &n));
            if (n < 1) {
                st = GC_ERR_UNSUPPORTED; /* no message: the caller retries without the epilogue */
                goto done;
            }
            algo = res.algo;
            need = res.workspaceSize;
            pthread_mutex_lock(&g_mu);
            lt_entry *e = &g_cache[g_cache_next];
            g_cache_next = (g_cache_next + 1) % 64;
            e->used = 1;
            e->key = key;
            e->algo = algo;
            e->ws = need;
            pthread_mutex_unlock(&g_mu);
        }
        const float alpha = d->alpha, beta = d->beta;
        GC_LT(g_lt.matmul(h, op, &alpha, d->B, la, d->A, lb, &beta, d->C, lc, d->C, lc, &algo,
                          need ? ws : NULL, need, gc_cuda_stream(be)));
    }
#undef GC_LT
done:
    if (pref) g_lt.pref_destroy(pref);
    if (lc) g_lt.layout_destroy(lc);
    if (lb) g_lt.layout_destroy(lb);
    if (la) g_lt.layout_destroy(la);
    if (op) g_lt.desc_destroy(op);
    return st;
}

} // namespace

extern "C" gc_status gc_cuda_gemm_vendor(const gc_backend *be, const gc_gemm_desc *d)
{
    pthread_mutex_lock(&g_mu);
    const int ok = lt_load_locked();
    pthread_mutex_unlock(&g_mu);
    if (!ok)
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm: impl='vendor' needs libcublasLt, not found");
    const int dev = be->device_index;
    if (dev < 0 || dev >= 64) return gc_fail(GC_ERR_UNSUPPORTED, "gemm (cuBLASLt): device index %d", dev);
    if (d->M == 0 || d->N == 0) return GC_OK;
    if (d->K == 0) return gc_cuda_gemm_epilogue_only(be, d, d->beta, d->bias);

    pthread_mutex_lock(&g_mu);
    cublasStatus_t cs = CUBLAS_STATUS_SUCCESS;
    if (!g_handle[dev]) cs = g_lt.create(&g_handle[dev]);
    cublasLtHandle_t h = g_handle[dev];
    pthread_mutex_unlock(&g_mu);
    if (cs != CUBLAS_STATUS_SUCCESS || !h)
        return gc_fail(GC_ERR_BACKEND, "gemm (cuBLASLt): cublasLtCreate failed with status %d", (int)cs);

    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, GC_LT_WORKSPACE, &ws);
    if (st) return st;
    const int tf32 = d->dtype == GC_F32 && gc_get_allow_tf32();

    /* fused: bias and relu in cuBLASLt's epilogue */
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_DEFAULT;
    int act_after = 0;
    if (d->act == GC_ACT_RELU) epi = d->bias ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_RELU;
    else {
        if (d->bias) epi = CUBLASLT_EPILOGUE_BIAS;
        act_after = d->act != GC_ACT_LINEAR;
    }
    gc_clear_error();
    st = lt_run(be, h, d, tf32, epi, epi == CUBLASLT_EPILOGUE_DEFAULT || epi == CUBLASLT_EPILOGUE_RELU ? NULL : d->bias, ws);
    if (st == GC_OK) {
        if (!act_after) return GC_OK;
        gc_gemm_desc e = *d; /* act in place: C = act(1 * C + no bias) */
        return gc_cuda_gemm_epilogue_only(be, &e, 1.0f, NULL);
    }
    if (st != GC_ERR_UNSUPPORTED || gc_last_error()[0]) return st;
    /* no algorithm with that epilogue (bias alignment, say): plain GEMM, then ours */
    st = lt_run(be, h, d, tf32, CUBLASLT_EPILOGUE_DEFAULT, NULL, ws);
    if (st == GC_ERR_UNSUPPORTED && !gc_last_error()[0])
        return gc_fail(GC_ERR_UNSUPPORTED, "gemm (cuBLASLt): no algorithm for this problem");
    if (st) return st;
    if (!d->bias && d->act == GC_ACT_LINEAR) return GC_OK;
    return gc_cuda_gemm_epilogue_only(be, d, 1.0f, d->bias);
}

#endif /* GC_HAVE_CUBLASLT_H */
