/* gemm.c -- float32 GEMM of the CPU backend: C = act(alpha op(A) op(B) + beta C + bias).
 *
 * What it provides: gc_cpu_sgemm (the kernel other CPU ops call, conv2d included), the
 * run-time choice of micro-kernel (gc_cpu_sgemm_variant / _force_variant) and the op
 * table adapter gc_cpu_op_gemm.
 *
 * Design (BLIS / GotoBLAS blocking, row-major): C is cut into a grid of per-thread
 * rectangles (no two threads write the same element, no barriers). Each thread walks
 * its rectangle by N blocks (nc) and K blocks (kc); it packs the kc x nc block of op(B)
 * into nr-wide panels (kept in L2), then for each mr-row slice of op(A) packs a kc x mr
 * micro-panel (kept in L1) and sweeps the B panels with the micro-kernel, streaming
 * them from L2. Packing is where transposes are absorbed, so all four trans cases run
 * the same kernel, and where edges are zero-padded, so tails of any size are exact.
 * alpha/beta are applied by the micro-kernel at the store of each K block (beta only on
 * the first one); bias and the activation once, on the last K block, while the tile is
 * still in L1, so the epilogue costs no extra pass over C. Accumulation is float32.
 */
#include "cpu_kernels.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------ variant choice */

static const gc_sgemm_kernel *const variants[] = {
#if defined(__x86_64__) || defined(__i386__)
    &gc_sgemm_kernel_avx512,
    &gc_sgemm_kernel_fma,
#endif
    &gc_sgemm_kernel_generic,
};
#define N_VARIANTS ((int)(sizeof variants / sizeof variants[0]))

/* Does this CPU (and OS: libgcc checks XCR0) run variant i? */
static int variant_supported(int i)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (variants[i] == &gc_sgemm_kernel_avx512)
        return __builtin_cpu_supports("avx512f");
    if (variants[i] == &gc_sgemm_kernel_fma)
        return __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma");
#endif
    return variants[i] == &gc_sgemm_kernel_generic;
}

static int variant_index(const char *name)
{
    for (int i = 0; i < N_VARIANTS; i++)
        if (strcmp(name, variants[i]->name) == 0)
            return i;
    return -1;
}

/* The automatic choice: GPUCMP_CPU_SIMD when it names a variant this CPU runs (an
 * unknown or unsupported value is ignored, so a setting copied from another machine
 * cannot break a run), else the first supported one, best first. */
static int auto_variant(void)
{
    const char *env = getenv("GPUCMP_CPU_SIMD");
    if (env && *env) {
        const int i = variant_index(env);
        if (i >= 0 && variant_supported(i))
            return i;
    }
    for (int i = 0; i < N_VARIANTS; i++)
        if (variant_supported(i))
            return i;
    return N_VARIANTS - 1;
}

/* Index of the active variant, -1 until first use. Atomic because the first GEMMs may
 * come from several threads at once; they all compute the same value. */
static atomic_int active_variant = -1;

static const gc_sgemm_kernel *active_kernel(void)
{
    int i = atomic_load_explicit(&active_variant, memory_order_acquire);
    if (i < 0) {
        i = auto_variant();
        atomic_store_explicit(&active_variant, i, memory_order_release);
    }
    return variants[i];
}

const char *gc_cpu_sgemm_variant(void) { return active_kernel()->name; }

gc_status gc_cpu_sgemm_force_variant(const char *name)
{
    if (!name)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm variant: name is NULL");
    if (strcmp(name, "auto") == 0) {
        atomic_store(&active_variant, auto_variant());
        return GC_OK;
    }
    const int i = variant_index(name);
    if (i < 0) {
#if defined(__x86_64__) || defined(__i386__)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "sgemm variant: unknown name '%s' (expected auto, avx512, fma or generic)",
                       name);
#else
        return gc_fail(GC_ERR_INVALID_ARG,
                       "sgemm variant: unknown name '%s' (this build has auto and generic)",
                       name);
#endif
    }
    if (!variant_supported(i))
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm variant: this CPU cannot run '%s'", name);
    atomic_store(&active_variant, i);
    return GC_OK;
}

/* ------------------------------------------------------------------ helpers */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* 64-byte aligned buffers: aligned vector loads of packed B and whole cache lines. */
static float *alloc_floats(int64_t n)
{
    size_t bytes = ((size_t)n * sizeof(float) + 63u) & ~(size_t)63u;
#if defined(_WIN32)
    return (float *)_aligned_malloc(bytes, 64);
#else
    return (float *)aligned_alloc(64, bytes);
#endif
}

static void free_floats(float *p)
{
#if defined(_WIN32)
    _aligned_free(p);
#else
    free(p);
#endif
}

/* op(B)[pc:pc+kc, jc:jc+nc] into ceil(nc/nr) panels, each kc rows of nr values,
 * columns past nc zero so the micro-kernel never needs a column mask. */
static void pack_b(const gc_sgemm_args *g, int64_t pc, int64_t kc, int64_t jc, int64_t nc,
                   int nr, float *restrict dst)
{
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        const int w = (int)min64(nr, nc - j0);
        float *restrict d = dst + j0 * kc;
        if (!g->trans_b) { /* rows of B are rows of op(B): copies */
            const float *restrict s = g->B + pc * g->ldb + jc + j0;
            for (int64_t k = 0; k < kc; k++) {
                memcpy(d + k * nr, s + k * g->ldb, (size_t)w * sizeof(float));
                for (int j = w; j < nr; j++)
                    d[k * nr + j] = 0.0f;
            }
        } else { /* B is N x K: a transpose, read along rows of B */
            const float *restrict s = g->B + (jc + j0) * g->ldb + pc;
            for (int j = 0; j < w; j++) {
                const float *restrict sj = s + j * g->ldb;
                for (int64_t k = 0; k < kc; k++)
                    d[k * nr + j] = sj[k];
            }
            for (int j = w; j < nr; j++)
                for (int64_t k = 0; k < kc; k++)
                    d[k * nr + j] = 0.0f;
        }
    }
}

/* op(A)[ic:ic+h, pc:pc+kc] into one micro-panel: kc groups of mr values, rows past h
 * zero. */
static void pack_a(const gc_sgemm_args *g, int64_t ic, int h, int64_t pc, int64_t kc, int mr,
                   float *restrict dst)
{
    if (g->trans_a) { /* A is K x M: each k is a contiguous run of op(A)'s column */
        const float *restrict s = g->A + pc * g->lda + ic;
        for (int64_t k = 0; k < kc; k++) {
            memcpy(dst + k * mr, s + k * g->lda, (size_t)h * sizeof(float));
            for (int i = h; i < mr; i++)
                dst[k * mr + i] = 0.0f;
        }
    } else { /* a transpose of h rows, read along each row */
        const float *restrict s = g->A + ic * g->lda + pc;
#if defined(__SSE2__)
        if (h == mr && mr % 4 == 0) {
            int64_t k = 0;
            for (; k + 4 <= kc; k += 4) {
                for (int i = 0; i < mr; i += 4) {
                    __m128 r0 = _mm_loadu_ps(s + (i + 0) * g->lda + k);
                    __m128 r1 = _mm_loadu_ps(s + (i + 1) * g->lda + k);
                    __m128 r2 = _mm_loadu_ps(s + (i + 2) * g->lda + k);
                    __m128 r3 = _mm_loadu_ps(s + (i + 3) * g->lda + k);
                    _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                    _mm_storeu_ps(dst + (k + 0) * mr + i, r0);
                    _mm_storeu_ps(dst + (k + 1) * mr + i, r1);
                    _mm_storeu_ps(dst + (k + 2) * mr + i, r2);
                    _mm_storeu_ps(dst + (k + 3) * mr + i, r3);
                }
            }
            for (; k < kc; k++)
                for (int i = 0; i < mr; i++)
                    dst[k * mr + i] = s[i * g->lda + k];
            return;
        }
#endif
        for (int i = 0; i < h; i++) {
            const float *restrict si = s + i * g->lda;
            for (int64_t k = 0; k < kc; k++)
                dst[k * mr + i] = si[k];
        }
        for (int i = h; i < mr; i++)
            for (int64_t k = 0; k < kc; k++)
                dst[k * mr + i] = 0.0f;
    }
}

/* Prefetches part `part` of `parts` of the cache lines of op(A)[ic:ic+h, pc:pc+kc], the
 * next micro-panel to pack. Rows of A far apart in memory miss all caches on a large
 * matrix, and each is read only kc floats at a time, too short a run for the hardware
 * prefetcher: spread over the kernel calls of the current sweep, the misses overlap
 * with compute instead of stalling the packing. */
static void prefetch_a(const gc_sgemm_args *g, int64_t ic, int h, int64_t pc, int64_t kc,
                       int64_t part, int64_t parts)
{
    const int64_t rows = g->trans_a ? kc : h, len = g->trans_a ? h : kc;
    const float *base = g->trans_a ? g->A + pc * g->lda + ic : g->A + ic * g->lda + pc;
    for (int64_t r = rows * part / parts; r < rows * (part + 1) / parts; r++) {
        const float *row = base + r * g->lda;
        for (int64_t o = 0; o < len; o += 16)
            __builtin_prefetch(row + o, 0, 1);
        __builtin_prefetch(row + len - 1, 0, 1);
    }
}

/* ------------------------------------------------------------------ the blocked loop */

typedef struct {
    const gc_sgemm_args *g;
    const gc_sgemm_kernel *kr;
    int64_t kc_blk; /* K block, balanced so the last one is not a sliver */
    int64_t nc_max; /* N block, a multiple of nr */
} plan_t;

/* Partial tiles (h < mr or w < nr): the micro-kernel writes a full tile to tmp with
 * beta = 0 and no bias, and this adds beta * C (first K block) or C and the bias. */
static void merge_tile(float *restrict c, int64_t ldc, const float *restrict t, int nr, int h,
                       int w, float beta, const float *restrict bias)
{
    for (int i = 0; i < h; i++) {
        float *restrict ci = c + i * ldc;
        const float *restrict ti = t + i * nr;
        for (int j = 0; j < w; j++) {
            float v = ti[j];
            if (beta != 0.0f)
                v += beta * ci[j];
            if (bias)
                v += bias[j];
            ci[j] = v;
        }
    }
}

/* C[m0:m1, n0:n1] on the calling thread, with its own packing buffers. */
static void run_block(const plan_t *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                      float *restrict bbuf, float *restrict abuf, float *restrict tmp)
{
    const gc_sgemm_args *g = p->g;
    const gc_sgemm_kernel *kr = p->kr;
    const int mr = kr->mr, nr = kr->nr;
    const int64_t K = g->K;
    for (int64_t jc = n0; jc < n1; jc += p->nc_max) {
        const int64_t nc = min64(p->nc_max, n1 - jc);
        for (int64_t pc = 0; pc < K; pc += p->kc_blk) {
            const int64_t kc = min64(p->kc_blk, K - pc);
            const int last = pc + kc == K;
            const float beta = pc == 0 ? g->beta : 1.0f;
            pack_b(g, pc, kc, jc, nc, nr, bbuf);
            for (int64_t ic = m0; ic < m1; ic += mr) {
                const int h = (int)min64(mr, m1 - ic);
                pack_a(g, ic, h, pc, kc, mr, abuf);
                const int64_t next = ic + mr, nparts = ceil_div(nc, nr);
                const int hn = (int)min64(mr, m1 - next);
                for (int64_t jr = 0; jr < nc; jr += nr) {
                    const int w = (int)min64(nr, nc - jr);
                    if (hn > 0)
                        prefetch_a(g, next, hn, pc, kc, jr / nr, nparts);
                    float *c = g->C + ic * g->ldc + jc + jr;
                    const float *bias = last && g->bias ? g->bias + jc + jr : NULL;
                    if (h == mr && w == nr) {
                        kr->ukr(kc, abuf, bbuf + jr * kc, c, g->ldc, g->alpha, beta, bias);
                    } else {
                        kr->ukr(kc, abuf, bbuf + jr * kc, tmp, nr, g->alpha, 0.0f, NULL);
                        merge_tile(c, g->ldc, tmp, nr, h, w, beta, bias);
                    }
                    if (last && g->act != GC_ACT_LINEAR)
                        for (int i = 0; i < h; i++)
                            kr->act(g->act, c + i * g->ldc, w);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ threading */

/* Below this many multiply-adds per thread, forking costs more than it saves. */
#define MIN_FMAS_PER_THREAD (1 << 20)

static int threads_for(int64_t M, int64_t N, int64_t K, int64_t tiles)
{
#ifdef _OPENMP
    if (omp_in_parallel()) /* a caller already spread work over the cores */
        return 1;
    int64_t nt = omp_get_max_threads();
    const double fmas = (double)M * (double)N * (double)K;
    const double by_work = fmas / MIN_FMAS_PER_THREAD;
    if (by_work < (double)nt)
        nt = by_work < 1.0 ? 1 : (int64_t)by_work;
    if (nt > tiles)
        nt = tiles;
    return nt < 1 ? 1 : (int)nt;
#else
    (void)M; (void)N; (void)K; (void)tiles;
    return 1;
#endif
}

/* Splits nt threads into a pm x pn grid over C. Cost of a split: the largest
 * rectangle's multiply-adds plus its packing (A is packed once per N block, B once),
 * so square-ish rectangles in tile units win, and no thread is left idle when
 * another factorisation keeps all busy. */
static void pick_grid(int nt, int64_t M, int64_t N, int64_t K, const plan_t *p, int *pm,
                      int *pn)
{
    const int64_t mt = ceil_div(M, p->kr->mr), ntl = ceil_div(N, p->kr->nr);
    double best = -1.0;
    *pm = 1;
    *pn = nt;
    for (int a = 1; a <= nt; a++) {
        if (nt % a)
            continue;
        const int b = nt / a;
        const double rows = (double)ceil_div(mt, a) * p->kr->mr;
        const double cols = (double)ceil_div(ntl, b) * p->kr->nr;
        const double nblocks = (double)ceil_div((int64_t)cols, p->nc_max);
        const double cost = rows * cols * (double)K + 4.0 * (double)K * (cols + rows * nblocks);
        if (best < 0.0 || cost < best) {
            best = cost;
            *pm = a;
            *pn = b;
        }
    }
}

/* K == 0 or alpha == 0: C = act(beta C + bias) without touching A or B (BLAS: a NaN in
 * A must not reach C when alpha is 0). */
static void scale_only(const gc_sgemm_args *g, const gc_sgemm_kernel *kr)
{
    const int64_t M = g->M, N = g->N;
    int par = 0;
#ifdef _OPENMP
    par = !omp_in_parallel() && (double)M * (double)N >= (double)(1 << 18);
#endif
#pragma omp parallel for if (par) schedule(static)
    for (int64_t i = 0; i < M; i++) {
        float *ci = g->C + i * g->ldc;
        for (int64_t j = 0; j < N; j++) {
            float v = g->beta != 0.0f ? g->beta * ci[j] : 0.0f;
            ci[j] = g->bias ? v + g->bias[j] : v;
        }
        kr->act(g->act, ci, N);
    }
}

/* ------------------------------------------------------------------ entry point */

gc_status gc_cpu_sgemm(const gc_sgemm_args *g)
{
    if (!g)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: args is NULL");
    const int64_t M = g->M, N = g->N, K = g->K;
    if (M < 0 || N < 0 || K < 0)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "sgemm: sizes must be >= 0, got M=%lld N=%lld K=%lld", (long long)M,
                       (long long)N, (long long)K);
    /* row-major: the leading dimension is the stored row length */
    const int64_t a_cols = g->trans_a ? M : K, b_cols = g->trans_b ? K : N;
    if (g->lda < a_cols || g->lda < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: lda=%lld < %lld, the row length of A (%s)",
                       (long long)g->lda, (long long)a_cols,
                       g->trans_a ? "K x M, trans_a" : "M x K");
    if (g->ldb < b_cols || g->ldb < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: ldb=%lld < %lld, the row length of B (%s)",
                       (long long)g->ldb, (long long)b_cols,
                       g->trans_b ? "N x K, trans_b" : "K x N");
    if (g->ldc < N || g->ldc < 0)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: ldc=%lld < N=%lld, the row length of C",
                       (long long)g->ldc, (long long)N);
    if (g->act == GC_ACT_SOFTMAX)
        return gc_fail(GC_ERR_INVALID_ARG,
                       "sgemm: softmax is not an elementwise epilogue (use act_fwd after the GEMM)");
    if ((int)g->act < 0 || g->act >= GC_ACT_COUNT)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: unknown activation %d", (int)g->act);
    if (M == 0 || N == 0)
        return GC_OK;
    if (!g->C)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: C is NULL for a %lld x %lld result",
                       (long long)M, (long long)N);
    const gc_sgemm_kernel *kr = active_kernel();
    if (K == 0 || g->alpha == 0.0f) {
        scale_only(g, kr);
        return GC_OK;
    }
    if (!g->A || !g->B)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: %s is NULL with K=%lld", !g->A ? "A" : "B",
                       (long long)K);

    plan_t p;
    p.g = g;
    p.kr = kr;
    int kc_def = kr->kc, nc_def = kr->nc;
    if (getenv("T_KC")) kc_def = atoi(getenv("T_KC"));
    if (getenv("T_NC")) nc_def = atoi(getenv("T_NC"));
    p.kc_blk = ceil_div(K, ceil_div(K, kc_def));
    const int mr = kr->mr, nr = kr->nr;
    const int nt = threads_for(M, N, K, ceil_div(M, mr) * ceil_div(N, nr));
    int pm = 1, pn = 1;
    p.nc_max = nc_def;
    if (nt > 1)
        pick_grid(nt, M, N, K, &p, &pm, &pn);
    if (getenv("T_PM")) { pm = atoi(getenv("T_PM")); pn = nt / pm; }
    /* N block: a multiple of nr, balanced over each thread's columns */
    {
        const int64_t n_thr = ceil_div(ceil_div(N, nr), pn) * nr;
        const int64_t nb = ceil_div(n_thr, nc_def);
        p.nc_max = ceil_div(ceil_div(n_thr, nb), nr) * nr;
    }
    const int64_t mtiles = ceil_div(M, mr), ntiles = ceil_div(N, nr);
    const int64_t bsize = p.kc_blk * p.nc_max, asize = p.kc_blk * mr, tsize = (int64_t)mr * nr;
    int nomem = 0;

#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : nomem)
    {
        int tid = 0;
#ifdef _OPENMP
        tid = omp_get_thread_num();
#endif
        const int ti = tid / pn, tj = tid % pn;
        const int64_t m0 = min64(M, (mtiles * ti / pm) * mr);
        const int64_t m1 = min64(M, (mtiles * (ti + 1) / pm) * mr);
        const int64_t n0 = min64(N, (ntiles * tj / pn) * nr);
        const int64_t n1 = min64(N, (ntiles * (tj + 1) / pn) * nr);
        if (m0 < m1 && n0 < n1) {
            float *buf = alloc_floats(bsize + asize + tsize);
            if (!buf) {
                nomem = 1;
            } else {
                run_block(&p, m0, m1, n0, n1, buf, buf + bsize, buf + bsize + asize);
                free_floats(buf);
            }
        }
    }
    if (nomem)
        return gc_fail(GC_ERR_NOMEM, "sgemm: cannot allocate %lld bytes of packing buffers",
                       (long long)((bsize + asize + tsize) * (int64_t)sizeof(float)));
    return GC_OK;
}

/* ------------------------------------------------------------------ op adapter */

gc_status gc_cpu_op_gemm(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_gemm_params *pr = (const gc_gemm_params *)call->params;
    const gc_tensor *A = call->in[0], *B = call->in[1], *bias = call->in[2];
    gc_tensor *C = call->out[0];
    gc_sgemm_args g;
    g.trans_a = pr->trans_a;
    g.trans_b = pr->trans_b;
    g.M = C->shape[0];
    g.N = C->shape[1];
    g.K = pr->trans_a ? A->shape[0] : A->shape[1];
    g.alpha = pr->alpha;
    g.beta = pr->beta;
    g.A = (const float *)A->data;
    g.lda = A->shape[1];
    g.B = (const float *)B->data;
    g.ldb = B->shape[1];
    g.C = (float *)C->data;
    g.ldc = C->shape[1];
    g.bias = bias ? (const float *)bias->data : NULL;
    g.act = pr->act;
    return gc_cpu_sgemm(&g);
}
