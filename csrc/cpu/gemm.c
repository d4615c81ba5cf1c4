/* gemm.c -- float32 GEMM of the CPU backend: C = act(alpha op(A) op(B) + beta C + bias).
 *
 * What it provides: gc_cpu_sgemm (the kernel other CPU ops call, conv2d included), the
 * run-time choice of micro-kernel (the variant point cpu.gemm.simd: its probe, and
 * gc_cpu_sgemm_variant / _force_variant over it), the op table adapters gc_cpu_op_gemm
 * and gc_cpu_op_weight_grads, and gc_cpu_sgemm_shared_b: several products that share B
 * run as one, stacked along M (each problem starting at a whole tile), so each block of B
 * is packed once for all of them and its column sums come from those packed blocks. The
 * micro-kernels are in gemm_microkernels.c.
 *
 * Design (BLIS / GotoBLAS blocking, row-major C, so tiles are vectorised along N):
 * - Threads: C is cut into a grid of per-thread rectangles, each thread packing its own
 *   operands: no two threads write one element, no barriers, and each packed B block
 *   sits in its own core's L2. One thread below ~2^18 multiply-adds per thread, and
 *   inside an enclosing OpenMP region.
 * - Blocking: per K block (kc = 256; about 2 kc when K is long against a thread's share of
 *   C, so C is reread half as often) and N block (nc from the L2 size), the kc x nc block
 *   of op(B) is packed into nr-wide panels that stay in L2; each mr x kc micro-panel of
 *   op(A) stays in L1 while the micro-kernel sweeps the B panels, streaming them from
 *   L2. A is packed right before each sweep when a thread's columns are one N block
 *   (few outputs: conv layers, dense layers), else once per K block for a block of rows
 *   (up to ~4 MiB) that all N blocks reuse.
 * - Packing absorbs the transposes, so the four trans cases run one kernel, and zero-
 *   pads the edges, so tails of any size are exact (partial tiles go through a small
 *   buffer). It prefetches what it will pack two panels later (both operands, both
 *   layouts), since a large operand comes from DRAM in runs too short for the hardware
 *   prefetchers.
 * - Epilogue: alpha and beta at the store of each K block (beta on the first only, and
 *   beta == 0 never reads C); bias and the activation once, after the last K block,
 *   while the tile is in L1, so it costs no extra pass over C. Accumulation is float32.
 */
#define _GNU_SOURCE /* sysconf(_SC_LEVEL2_CACHE_SIZE) in glibc */
#include "cpu_kernels.h"
#include "gpucmp_variants.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#if defined(__SSE2__)
#include <immintrin.h>
#endif

#if defined(__unix__) || defined(__APPLE__)
#include <unistd.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#endif

/* ------------------------------------------------------------------ variant choice
 * The point cpu.gemm.simd of the variant registry (core/variants.c): forced there, or
 * automatic (the best micro-kernel this CPU runs). GPUCMP_CPU_SIMD is read by the
 * registry's environment parser, as an alias of GPUCMP_FORCE=cpu.gemm.simd=... */

/* The kernel of a variant of cpu.gemm.simd (NULL: not in this build). */
static const gc_sgemm_kernel *kernel_of(int v)
{
    switch (v) {
#if defined(__x86_64__) || defined(__i386__)
    case GC_V_SIMD_AVX512: return &gc_sgemm_kernel_avx512;
    case GC_V_SIMD_FMA: return &gc_sgemm_kernel_fma;
#endif
    case GC_V_SIMD_GENERIC: return &gc_sgemm_kernel_generic;
    default: return NULL;
    }
}

/* Does this CPU (and OS: libgcc checks XCR0) run variant v? */
static int variant_supported(int v)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (v == GC_V_SIMD_AVX512)
        return __builtin_cpu_supports("avx512f");
    if (v == GC_V_SIMD_FMA)
        return __builtin_cpu_supports("avx") && __builtin_cpu_supports("fma");
#endif
    return v == GC_V_SIMD_GENERIC;
}

/* cpu.rnn.simd (csrc/cpu/rnn_fast.c): avx512 needs AVX-512F + FMA, avx2 AVX2 + FMA; the
 * portable and stepwise paths run everywhere. Here, so that every program linking the GEMM
 * links the probe without the recurrence kernels. */
static int rnn_probe(int value, const char **why)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    const int fma = __builtin_cpu_supports("fma");
    if (value == GC_V_CRNN_AVX512 && !(fma && __builtin_cpu_supports("avx512f"))) {
        *why = "this CPU has no AVX-512F + FMA";
        return 0;
    }
    if (value == GC_V_CRNN_AVX2 && !(fma && __builtin_cpu_supports("avx2"))) {
        *why = "this CPU has no AVX2 + FMA";
        return 0;
    }
    return 1;
#else
    if (value == GC_V_CRNN_AVX512 || value == GC_V_CRNN_AVX2) {
        *why = "this build has only the portable recurrence kernels (not x86)";
        return 0;
    }
    return 1;
#endif
}

/* the registry's probe of the CPU backend's points (cpu.rnn.simd: rnn_fast.c's): cheap,
 * so GPUCMP_FORCE / GPUCMP_CPU_SIMD are checked with it */
static int simd_probe(int point, int value, const char **why)
{
    if (point == GC_VP_CPU_RNN_SIMD) return rnn_probe(value, why);
    if (point != GC_VP_CPU_GEMM_SIMD) return 1;
    if (!kernel_of(value)) {
        *why = "this build has only the portable micro-kernel (not x86)";
        return 0;
    }
    if (!variant_supported(value)) {
        *why = value == GC_V_SIMD_AVX512 ? "this CPU has no AVX-512F" : "this CPU has no AVX + FMA";
        return 0;
    }
    return 1;
}

void gc_cpu_register_variants(void)
{
    static atomic_int done;
    if (!atomic_exchange(&done, 1))
        gc_variant_register_backend("cpu", simd_probe, 1);
}

/* The automatic choice: the first supported variant, best first; -1 until first use.
 * Atomic because the first GEMMs may come from several threads at once; they all
 * compute the same value. */
static atomic_int auto_variant = -1;

static int active_index(void)
{
    gc_cpu_register_variants();
    const int f = gc_variant_forced(GC_VP_CPU_GEMM_SIMD);
    if (f != GC_V_SIMD_AUTO && kernel_of(f))
        return f;
    int i = atomic_load_explicit(&auto_variant, memory_order_acquire);
    if (i < 0) {
        i = GC_V_SIMD_GENERIC;
        for (int v = GC_V_SIMD_AUTO + 1; v <= GC_V_SIMD_GENERIC; v++)
            if (kernel_of(v) && variant_supported(v)) {
                i = v;
                break;
            }
        atomic_store_explicit(&auto_variant, i, memory_order_release);
    }
    return i;
}

const char *gc_cpu_sgemm_variant(void) { return kernel_of(active_index())->name; }

gc_status gc_cpu_sgemm_force_variant(const char *name)
{
    gc_cpu_register_variants();
    if (!name)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm variant: name is NULL");
    gc_status st = gc_variant_force("cpu.gemm.simd", name);
    /* this function's contract: an unknown name or one the CPU lacks is INVALID_ARG */
    return st == GC_ERR_UNSUPPORTED ? GC_ERR_INVALID_ARG : st;
}

/* ------------------------------------------------------------------ helpers */

/* Bytes of L2 per core (it holds the packed B block), asked once; 1 MiB when the
 * system does not say. */
static int64_t l2_bytes(void)
{
    static atomic_llong cached = 0;
    long long v = atomic_load_explicit(&cached, memory_order_relaxed);
    if (v == 0) {
        v = 0;
#if defined(_SC_LEVEL2_CACHE_SIZE)
        v = sysconf(_SC_LEVEL2_CACHE_SIZE);
#endif
        if (v < 128 * 1024 || v > 64 * 1024 * 1024)
            v = 1024 * 1024;
        atomic_store_explicit(&cached, v, memory_order_relaxed);
    }
    return (int64_t)v;
}

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

/* ------------------------------------------------------------------ packing
 * A panel of width w holds kc groups of w values: d[k*w + i]. Both operands are
 * packed by one of two moves: pack_n when the w values of one k are contiguous in the
 * source (rows of B, or columns of A stored transposed), pack_t when each of the h
 * source rows runs along k (rows of A, or B stored transposed), a transpose. Slots
 * i >= h are zero, so edge tiles run the full micro-kernel on well-defined values.
 * Packing is O(MK + KN) against O(MNK) compute, but with few columns (N = 64 in a
 * convolution) it is a visible share: hence the fixed-width copies and SSE
 * transposes instead of memcpy calls and scalar loops. */

#if defined(__GNUC__)
#define GC_ALWAYS_INLINE static inline __attribute__((always_inline))
#else
#define GC_ALWAYS_INLINE static inline
#endif

/* Panels ahead that pack_t and pack_n prefetch: a panel of a large A takes as long to pack
 * (from DRAM) as it takes to compute, unless its lines were requested earlier. */
#ifndef PACK_PF_PANELS
#define PACK_PF_PANELS 2
#endif

/* d[k*w + i] = s[k*ld + i] for i < h, 0 for h <= i < w. With pf > 0 (full panels only),
 * each row's copy also prefetches that row's w floats pf floats on: the panel packed
 * PACK_PF_PANELS later. Each panel reads only w floats (one or two lines) of every row,
 * a strided pattern the hardware prefetchers do not run ahead of, so without this a
 * long-K product whose operands come from DRAM waits on every row (weight gradients
 * of narrow layers: N = 64, twice as many panels per FLOP as square products). */
GC_ALWAYS_INLINE void pack_n_w(const float *restrict s, int64_t ld, int h, int64_t kc,
                               float *restrict d, const int w, int64_t pf)
{
    if (h == w) { /* w is a constant here: a fixed-size, vectorised copy */
        if (pf)
            for (int64_t k = 0; k < kc; k++) {
                const float *p = s + k * ld + pf;
                __builtin_prefetch(p, 0, 3);
                if (w > 16)
                    __builtin_prefetch(p + 16, 0, 3);
                __builtin_prefetch(p + w - 1, 0, 3);
                for (int i = 0; i < w; i++)
                    d[k * w + i] = s[k * ld + i];
            }
        else
            for (int64_t k = 0; k < kc; k++)
                for (int i = 0; i < w; i++)
                    d[k * w + i] = s[k * ld + i];
        return;
    }
    for (int64_t k = 0; k < kc; k++) {
        for (int i = 0; i < h; i++)
            d[k * w + i] = s[k * ld + i];
        for (int i = h; i < w; i++)
            d[k * w + i] = 0.0f;
    }
}

/* d[k*w + i] = s[i*ld + k] for i < h, 0 for h <= i < w. While it reads, it prefetches
 * the same lines of the panel PACK_PF_PANELS ahead (rows s + PACK_PF_PANELS*w*ld on),
 * of which hpf rows exist: a steady stream of one prefetch per line consumed, far
 * enough ahead to hide DRAM latency, which neither the short row runs (kc floats)
 * nor the hardware prefetchers achieve. */
GC_ALWAYS_INLINE void pack_t_w(const float *restrict s, int64_t ld, int h, int64_t kc,
                               float *restrict d, const int w, int hpf)
{
    const float *pf = s + (int64_t)PACK_PF_PANELS * w * ld;
    int64_t k = 0;
#if defined(__SSE2__)
    /* 4 x 4 transposes in SSE registers (baseline on x86-64): four source rows in
     * (zero rows past h), four k groups out; w is a multiple of 2 for every kernel */
    if (w % 2 == 0) {
        for (; k + 4 <= kc; k += 4) {
            float *dk = d + k * w;
            if ((k & 15) == 0)
                for (int i = 0; i < hpf; i++)
                    _mm_prefetch((const char *)(pf + i * ld + k), _MM_HINT_T0);
            for (int i = 0; i < w; i += 4) {
                __m128 r0 = i + 0 < h ? _mm_loadu_ps(s + (i + 0) * ld + k) : _mm_setzero_ps();
                __m128 r1 = i + 1 < h ? _mm_loadu_ps(s + (i + 1) * ld + k) : _mm_setzero_ps();
                __m128 r2 = i + 2 < h ? _mm_loadu_ps(s + (i + 2) * ld + k) : _mm_setzero_ps();
                __m128 r3 = i + 3 < h ? _mm_loadu_ps(s + (i + 3) * ld + k) : _mm_setzero_ps();
                _MM_TRANSPOSE4_PS(r0, r1, r2, r3);
                if (i + 4 <= w) {
                    _mm_storeu_ps(dk + i, r0);
                    _mm_storeu_ps(dk + w + i, r1);
                    _mm_storeu_ps(dk + 2 * w + i, r2);
                    _mm_storeu_ps(dk + 3 * w + i, r3);
                } else { /* the last two slots of a width 4n + 2 */
                    _mm_storel_pi((__m64 *)(dk + i), r0);
                    _mm_storel_pi((__m64 *)(dk + w + i), r1);
                    _mm_storel_pi((__m64 *)(dk + 2 * w + i), r2);
                    _mm_storel_pi((__m64 *)(dk + 3 * w + i), r3);
                }
            }
        }
    }
#endif
    if (kc > 0)
        for (int i = 0; i < hpf; i++) /* the last, possibly partial, line of each row */
            __builtin_prefetch(pf + i * ld + kc - 1, 0, 3);
    for (; k < kc; k++) {
        for (int i = 0; i < h; i++)
            d[k * w + i] = s[i * ld + k];
        for (int i = h; i < w; i++)
            d[k * w + i] = 0.0f;
    }
}

/* The widths of the micro-kernels, as constants, so the loops above unroll. */
#define GC_PACK_DISPATCH(fn, w, ...)                                                     \
    switch (w) {                                                                         \
    case 6: fn(__VA_ARGS__, 6); break;                                                   \
    case 8: fn(__VA_ARGS__, 8); break;                                                   \
    case 12: fn(__VA_ARGS__, 12); break;                                                 \
    case 16: fn(__VA_ARGS__, 16); break;                                                 \
    case 32: fn(__VA_ARGS__, 32); break;                                                 \
    default: fn(__VA_ARGS__, w); break;                                                  \
    }

#define PACK_N_W(s, ld, h, kc, d, pf, w) pack_n_w(s, ld, h, kc, d, w, pf)
static void pack_n(const float *s, int64_t ld, int h, int64_t kc, float *d, int w, int64_t pf)
{
    GC_PACK_DISPATCH(PACK_N_W, w, s, ld, h, kc, d, pf)
}

#define PACK_T_W(s, ld, h, kc, d, hpf, w) pack_t_w(s, ld, h, kc, d, w, hpf)
static void pack_t(const float *s, int64_t ld, int h, int64_t kc, float *d, int w, int hpf)
{
    GC_PACK_DISPATCH(PACK_T_W, w, s, ld, h, kc, d, hpf)
}

/* Rows of the panel PACK_PF_PANELS panels after the one at `at` (panels of width w)
 * that exist before `end`. */
static int rows_ahead(int64_t at, int64_t end, int w)
{
    const int64_t first = at + (int64_t)PACK_PF_PANELS * w;
    return first >= end ? 0 : (int)min64(w, end - first);
}

/* op(B)[pc:pc+kc, jc:jc+nc] into ceil(nc/nr) panels of width nr. */
static void pack_b(const gc_sgemm_args *g, int64_t pc, int64_t kc, int64_t jc, int64_t nc,
                   int nr, float *dst)
{
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        const int w = (int)min64(nr, nc - j0);
        if (!g->trans_b) /* B is K x N */
            pack_n(g->B + pc * g->ldb + jc + j0, g->ldb, w, kc, dst + j0 * kc, nr,
                   j0 + (int64_t)(PACK_PF_PANELS + 1) * nr <= nc ? (int64_t)PACK_PF_PANELS * nr : 0);
        else /* B is N x K */
            pack_t(g->B + (jc + j0) * g->ldb + pc, g->ldb, w, kc, dst + j0 * kc, nr,
                   rows_ahead(j0, nc, nr));
    }
}

/* op(A)[ic:ic+h, pc:pc+kc] into one micro-panel of width mr; m_end: the end of the
 * rows this thread packs (the limit of the prefetch). */
static void pack_a(const gc_sgemm_args *g, int64_t ic, int h, int64_t pc, int64_t kc, int mr,
                   int64_t m_end, float *dst)
{
    if (g->trans_a) /* A is K x M: prefetch the panel PACK_PF_PANELS on, when it is whole */
        pack_n(g->A + pc * g->lda + ic, g->lda, h, kc, dst, mr,
               ic + (int64_t)(PACK_PF_PANELS + 1) * mr <= m_end ? (int64_t)PACK_PF_PANELS * mr : 0);
    else /* A is M x K */
        pack_t(g->A + ic * g->lda + pc, g->lda, h, kc, dst, mr, rows_ahead(ic, m_end, mr));
}

/* ------------------------------------------------------------------ the blocked loop */

typedef struct {
    const gc_sgemm_args *const *gs; /* the n problems stacked along M; B, K and N are gs[0]'s */
    int64_t off[GC_SGEMM_SHARED_MAX + 1]; /* problem i: stacked rows [off[i], off[i+1]), whole tiles */
    int n;
    float *colsum;               /* sum over k of op(B)[k, :], or NULL */
    const gc_sgemm_kernel *kr;
    int64_t kc_blk; /* K block, balanced so the last one is not a sliver */
    int64_t nc_max; /* N block, a multiple of nr */
    int64_t mc_max; /* rows of A packed at once when a thread spans several N blocks */
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

/* One tile of C from a packed A micro-panel and a packed B micro-panel, with the
 * epilogue: beta (first K block) or accumulation into C, bias and activation (last). */
static inline void do_tile(const plan_t *p, const gc_sgemm_args *g, const float *ap, const float *bp, float *c,
                           int h, int w, int64_t kc, float beta, int last,
                           const float *bias, float *tmp)
{
    const gc_sgemm_kernel *kr = p->kr;
    if (h == kr->mr && w == kr->nr) {
        kr->ukr(kc, ap, bp, c, g->ldc, g->alpha, beta, bias);
    } else {
        kr->ukr(kc, ap, bp, tmp, kr->nr, g->alpha, 0.0f, NULL);
        merge_tile(c, g->ldc, tmp, kr->nr, h, w, beta, bias);
    }
    if (last && g->act != GC_ACT_LINEAR)
        for (int i = 0; i < h; i++)
            kr->act(g->act, c + i * g->ldc, w);
}

/* The problem that stacked row r (a multiple of mr) belongs to, r's row in it (*row) and
 * the rows of that tile (*h: up to mr, fewer at the problem's end). */
static const gc_sgemm_args *row_owner(const plan_t *p, int64_t r, int64_t *row, int *h)
{
    int i = 0;
    while (i + 1 < p->n && r >= p->off[i + 1])
        i++;
    *row = r - p->off[i];
    *h = (int)min64(p->kr->mr, p->gs[i]->M - *row);
    return p->gs[i];
}

/* colsum[n0:n0+nc] += the column sums of a packed kc x nc block of B (first K block:
 * =); one thread owns each column range, so no two threads add to one sum */
static void add_colsums(const plan_t *p, const float *restrict bbuf, int64_t kc, int64_t n0, int64_t nc,
                        int first)
{
    const int nr = p->kr->nr;
    float s[64];
    for (int64_t j0 = 0; j0 < nc; j0 += nr) {
        const int w = (int)min64(nr, nc - j0);
        const float *d = bbuf + j0 * kc;
        for (int i = 0; i < nr; i++)
            s[i] = 0.0f;
        for (int64_t k = 0; k < kc; k++)
            for (int i = 0; i < nr; i++)
                s[i] += d[k * nr + i];
        float *out = p->colsum + n0 + j0;
        for (int i = 0; i < w; i++)
            out[i] = first ? s[i] : out[i] + s[i];
    }
}

/* C[m0:m1, n0:n1] on the calling thread, with its own packing buffers: bbuf holds a
 * kc x nc block of B, abuf one A micro-panel or, when the columns span several N
 * blocks, a block of p->mc_max rows of A.
 *
 * One N block (the common case of a layer with few outputs): each A micro-panel is
 * packed just before the sweep that uses it, so it is hot in L1, and the packing
 * streams A once. Several N blocks: A would be packed again for each of them, so a
 * block of A rows is packed once per K block into a buffer (L3) and each N block's
 * sweep reads its micro-panels from there. */
static void run_block(const plan_t *p, int64_t m0, int64_t m1, int64_t n0, int64_t n1,
                      float *restrict bbuf, float *restrict abuf, float *restrict tmp)
{
    const gc_sgemm_args *g0 = p->gs[0];
    const int mr = p->kr->mr, nr = p->kr->nr;
    const int64_t K = g0->K;
    /* the column sums of B come from the thread that packs B for the first rows */
    const int sums = p->colsum && m0 == 0;
    if (n1 - n0 <= p->nc_max) {
        const int64_t nc = n1 - n0;
        for (int64_t pc = 0; pc < K; pc += p->kc_blk) {
            const int64_t kc = min64(p->kc_blk, K - pc);
            const int last = pc + kc == K;
            pack_b(g0, pc, kc, n0, nc, nr, bbuf);
            if (sums) add_colsums(p, bbuf, kc, n0, nc, pc == 0);
            for (int64_t ic = m0; ic < m1; ic += mr) {
                int64_t row;
                int h;
                const gc_sgemm_args *g = row_owner(p, ic, &row, &h);
                const float beta = pc == 0 ? g->beta : 1.0f;
                pack_a(g, row, h, pc, kc, mr, g->M, abuf);
                for (int64_t jr = 0; jr < nc; jr += nr)
                    do_tile(p, g, abuf, bbuf + jr * kc, g->C + row * g->ldc + n0 + jr, h,
                            (int)min64(nr, nc - jr), kc, beta, last,
                            last && g->bias ? g->bias + n0 + jr : NULL, tmp);
            }
        }
        return;
    }
    for (int64_t ib = m0; ib < m1; ib += p->mc_max) {
        const int64_t mc = min64(p->mc_max, m1 - ib);
        for (int64_t pc = 0; pc < K; pc += p->kc_blk) {
            const int64_t kc = min64(p->kc_blk, K - pc);
            const int last = pc + kc == K;
            for (int64_t i0 = 0; i0 < mc; i0 += mr) {
                int64_t row;
                int h;
                const gc_sgemm_args *g = row_owner(p, ib + i0, &row, &h);
                pack_a(g, row, h, pc, kc, mr, g->M, abuf + i0 * kc);
            }
            for (int64_t jc = n0; jc < n1; jc += p->nc_max) {
                const int64_t nc = min64(p->nc_max, n1 - jc);
                pack_b(g0, pc, kc, jc, nc, nr, bbuf);
                if (sums && ib == m0) add_colsums(p, bbuf, kc, jc, nc, pc == 0);
                for (int64_t i0 = 0; i0 < mc; i0 += mr) {
                    int64_t row;
                    int h;
                    const gc_sgemm_args *g = row_owner(p, ib + i0, &row, &h);
                    const float beta = pc == 0 ? g->beta : 1.0f;
                    for (int64_t jr = 0; jr < nc; jr += nr)
                        do_tile(p, g, abuf + i0 * kc, bbuf + jr * kc,
                                g->C + row * g->ldc + jc + jr, h,
                                (int)min64(nr, nc - jr), kc, beta, last,
                                last && g->bias ? g->bias + jc + jr : NULL, tmp);
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ threading */

/* Below this many multiply-adds per thread, forking costs more than it saves (on two
 * Zen 5 cores, 80^3 gains from a second thread, 64^3 loses). */
#define MIN_FMAS_PER_THREAD (1 << 18)

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
 * rectangle's multiply-adds plus the packing of its rows of A and columns of B, so
 * rectangles with whole tiles and little padding win, and square-ish ones on a tie. */
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
        const double cost = rows * cols * (double)K + 4.0 * (double)K * (cols + rows);
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
#ifdef _OPENMP
    const int par = !omp_in_parallel() && (double)M * (double)N >= (double)(1 << 18);
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

/* The argument checks of one problem (the kernel's contract, for direct C callers). */
static gc_status check_args(const gc_sgemm_args *g)
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
    if (M > 0 && N > 0 && !g->C)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: C is NULL for a %lld x %lld result",
                       (long long)M, (long long)N);
    if (M > 0 && N > 0 && K > 0 && g->alpha != 0.0f && (!g->A || !g->B))
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm: %s is NULL with K=%lld", !g->A ? "A" : "B",
                       (long long)K);
    return GC_OK;
}

/* The blocked product of the n problems gs (n >= 1, each with M, N, K > 0 and alpha != 0,
 * all sharing B, ldb, trans_b, N and K) stacked along M, each starting at a whole tile;
 * colsum (N values, or NULL) gets the column sums of op(B). */
static gc_status sgemm_stacked(const gc_sgemm_args *const *gs, int n, const gc_sgemm_kernel *kr, float *colsum)
{
    const gc_sgemm_args *g = gs[0];
    plan_t p;
    p.gs = gs;
    p.n = n;
    p.kr = kr;
    p.colsum = colsum;
    const int mr = kr->mr, nr = kr->nr, kc = kr->kc;
    p.off[0] = 0;
    for (int i = 0; i < n; i++)
        p.off[i + 1] = p.off[i] + ceil_div(gs[i]->M, mr) * mr;
    const int64_t M = p.off[n], N = g->N, K = g->K;
    const int64_t mtiles = M / mr, ntiles = ceil_div(N, nr); /* M is stacked in whole tiles */
    const int nt = threads_for(M, N, K, mtiles * ntiles);
    int pm = 1, pn = 1;
    if (nt > 1)
        pick_grid(nt, M, N, K, &p, &pm, &pn);
    /* a thread's share of C: rows and columns */
    const int64_t m_thr = ceil_div(mtiles, pm) * mr, n_thr = ceil_div(ntiles, pn) * nr;
    /* K blocks of about kc, equal so the last is not a sliver; up to 1.5 kc in one block
     * (K = 288 of a 3x3x32 convolution), since each extra block rereads C. When K is long
     * against a thread's share of C (weight gradients: K is the batch, C the weights),
     * blocks of about 2 kc: C is reread half as often, and the A micro-panel (mr x 2 kc)
     * still fits L1; square products keep kc, whose B block reuse is what they need. */
    const int64_t kcb = K >= 8 * (m_thr > n_thr ? m_thr : n_thr) && K > 3 * kc ? 2 * (int64_t)kc : kc;
    p.kc_blk = K <= kcb + kcb / 2 ? K : ceil_div(K, ceil_div(K, kcb));
    /* N block: the packed B block (kcb x nc) takes 3/4 of the L2, the rest is for the
     * A micro-panels and C tiles passing through */
    const int64_t nc_l2 = l2_bytes() * 3 / 4 / (kcb * (int64_t)sizeof(float)) / nr * nr;
    p.nc_max = nc_l2 < 4 * nr ? 4 * nr : nc_l2 > 4096 ? 4096 : nc_l2;
    { /* balance the N blocks over each thread's columns, in multiples of nr */
        const int64_t nb = ceil_div(n_thr, p.nc_max);
        p.nc_max = ceil_div(ceil_div(n_thr, nb), nr) * nr;
    }
    /* A block (used when a thread spans several N blocks): the thread's rows, in equal
     * blocks of at most about 4 MiB of packed A (a share of L3) */
    {
        const int64_t cap = ((int64_t)4 << 20) / ((int64_t)sizeof(float) * p.kc_blk);
        const int64_t nb = ceil_div(m_thr, cap < mr ? mr : cap);
        p.mc_max = ceil_div(ceil_div(m_thr, nb), mr) * mr;
    }
    const int64_t bsize = p.kc_blk * p.nc_max, tsize = (int64_t)mr * nr;
    const int64_t asize = p.kc_blk * (n_thr > p.nc_max ? p.mc_max : mr);
    int nomem = 0;

#pragma omp parallel num_threads(nt) if (nt > 1) reduction(| : nomem)
    {
        int tid = 0, team = 1;
#ifdef _OPENMP
        tid = omp_get_thread_num();
        team = omp_get_num_threads(); /* may be fewer than nt (OMP_DYNAMIC, limits) */
#endif
        float *buf = NULL;
        for (int r = tid; r < pm * pn && !nomem; r += team) {
            const int ti = r / pn, tj = r % pn;
            const int64_t m0 = (mtiles * ti / pm) * mr, m1 = (mtiles * (ti + 1) / pm) * mr;
            const int64_t n0 = min64(N, (ntiles * tj / pn) * nr);
            const int64_t n1 = min64(N, (ntiles * (tj + 1) / pn) * nr);
            if (m0 >= m1 || n0 >= n1)
                continue;
            if (!buf && !(buf = alloc_floats(bsize + asize + tsize))) {
                nomem = 1;
                break;
            }
            run_block(&p, m0, m1, n0, n1, buf, buf + bsize, buf + bsize + asize);
        }
        free_floats(buf);
    }
    if (nomem)
        return gc_fail(GC_ERR_NOMEM, "sgemm: cannot allocate %lld bytes of packing buffers",
                       (long long)((bsize + asize + tsize) * (int64_t)sizeof(float)));
    return GC_OK;
}

static const gc_sgemm_kernel *active_kernel(void)
{
    const int vi = active_index();
    gc_variant_ran(GC_VP_CPU_GEMM_SIMD, vi);
    return kernel_of(vi);
}

gc_status gc_cpu_sgemm(const gc_sgemm_args *g)
{
    const gc_status st = check_args(g);
    if (st)
        return st;
    if (g->M == 0 || g->N == 0)
        return GC_OK;
    const gc_sgemm_kernel *kr = active_kernel();
    if (g->K == 0 || g->alpha == 0.0f) {
        scale_only(g, kr);
        return GC_OK;
    }
    const gc_sgemm_args *one[1] = {g};
    return sgemm_stacked(one, 1, kr, NULL);
}

gc_status gc_cpu_sgemm_shared_b(const gc_sgemm_args *const *gs, int n, float *colsum)
{
    if (!gs || n < 1 || n > GC_SGEMM_SHARED_MAX)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm_shared_b: %d problems (1..%d)", n, GC_SGEMM_SHARED_MAX);
    for (int i = 0; i < n; i++) {
        const gc_status st = check_args(gs[i]);
        if (st)
            return st;
        if (gs[i]->B != gs[0]->B || gs[i]->ldb != gs[0]->ldb || gs[i]->trans_b != gs[0]->trans_b ||
            gs[i]->N != gs[0]->N || gs[i]->K != gs[0]->K)
            return gc_fail(GC_ERR_INVALID_ARG, "sgemm_shared_b: problem %d does not share problem 0's B, N and K", i);
    }
    const int64_t N = gs[0]->N, K = gs[0]->K;
    if (colsum && gs[0]->trans_b)
        return gc_fail(GC_ERR_INVALID_ARG, "sgemm_shared_b: column sums need B stored K x N (no trans_b)");
    if (N == 0)
        return GC_OK;
    const gc_sgemm_kernel *kr = active_kernel();
    /* the problems that need the blocked product; the others are scaled (or empty) */
    const gc_sgemm_args *run[GC_SGEMM_SHARED_MAX];
    int nrun = 0;
    for (int i = 0; i < n; i++) {
        if (gs[i]->M == 0)
            continue;
        if (K == 0 || gs[i]->alpha == 0.0f)
            scale_only(gs[i], kr);
        else
            run[nrun++] = gs[i];
    }
    if (nrun)
        return sgemm_stacked(run, nrun, kr, colsum);
    if (colsum) { /* no product packs B: sum it here */
        memset(colsum, 0, (size_t)N * sizeof(float));
        for (int64_t k = 0; k < K; k++)
            for (int64_t j = 0; j < N; j++)
                colsum[j] += gs[0]->B[k * gs[0]->ldb + j];
    }
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

/* weight_grads: dw = x^T g and du = h^T g as one stacked product over one packing of g,
 * whose column sums are db (gpucmp.h) */
gc_status gc_cpu_op_weight_grads(const gc_backend *be, const gc_op_call *call)
{
    (void)be;
    const gc_tensor *x = call->in[0], *h = call->in[1], *gt = call->in[2];
    gc_tensor *dw = call->out[0], *du = call->out[1], *db = call->out[2];
    const int64_t K = gt->shape[0], N = gt->shape[1];
    gc_sgemm_args a[2];
    const gc_sgemm_args *gs[2] = {&a[0], &a[1]};
    const gc_tensor *lhs[2] = {x, h};
    gc_tensor *out[2] = {dw, du};
    int n = 0;
    for (int i = 0; i < 2; i++) {
        if (!lhs[i] || !lhs[i]->data) continue;
        gc_sgemm_args *g = &a[n++];
        memset(g, 0, sizeof *g);
        g->trans_a = 1;
        g->M = lhs[i]->shape[1];
        g->N = N;
        g->K = K;
        g->alpha = 1.0f;
        g->A = (const float *)lhs[i]->data;
        g->lda = lhs[i]->shape[1];
        g->B = (const float *)gt->data;
        g->ldb = N;
        g->C = (float *)out[i]->data;
        g->ldc = N;
        g->act = GC_ACT_LINEAR;
    }
    return gc_cpu_sgemm_shared_b(gs, n, db && db->data ? (float *)db->data : NULL);
}
