/* stage.c -- the plan's staging buffer: a step's host inputs, labels and per-step values
 * (learning rate and t, the dropout seed) go to the device through it with copies that
 * only queue on the backend's stream (upload_async), so that a train_on_batch waits for
 * the device once, when it reads its result.
 *
 * Why it is built this way: a pageable upload cannot return before its DMA has read the
 * caller's memory, so each one synchronised the stream; four or five of them per step
 * were most of a small model's train_on_batch on a GPU. The buffer is the backend's host
 * memory (page-locked on CUDA), owned by the plan, made at the first staged call, sized
 * for max_batch rows of every input and the labels plus the per-step values, each put in
 * its own 64-byte aligned slot.
 *
 * Float inputs and labels are checked for NaN / Inf on their way in
 * (gc_plan_stage_put_floats: in the same pass as the copy into the stage, or a pass of its
 * own where nothing is staged), before anything of the call is queued for them, so a bad
 * batch is refused with GC_ERR_NONFINITE and no weight moves; the Keras front end leaves
 * its own per-call check of repeated calls to this one (a pass over the batch saved).
 *
 * The reuse rule: a queued copy may read its slot until the stream is next waited for.
 * gc_plan_stage_begin, before the first put of a call, waits for the stream when copies
 * of an earlier call may still be reading the buffer; every step path ends with a result
 * read (gc_plan_download: a download waits for the whole stream, so every copy queued
 * before it is done), which marks the buffer free. So a call that reads its result never
 * waits at its next begin; one that failed before its read makes the next call wait once.
 *
 * Backends whose uploads finish reading on return (CPU, meta: uploads_done_on_return)
 * get the caller's arrays directly, with no extra copy, exactly as before. A buffer that
 * cannot be made (no page-locked memory), a plan whose inputs need more than
 * GC_PLAN_STAGE_MAX bytes (the backend's own chunked pinned upload serves those) and a
 * put that would not fit all take the synchronous upload instead. GPUCMP_PLAN_STAGE=1 in
 * the environment (read once) stages on those backends too: the tests run this file's
 * logic on the CPU build, where upload_async is a memcpy. */
#include "plan_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#define GC_PLAN_STAGE_MAX ((size_t)64 << 20)
#define SLOT(n) (((size_t)(n) + 63u) & ~(size_t)63u)

static size_t stage_size(const gc_plan *p)
{
    size_t need = 2 * SLOT(16); /* {lr, t} and the seed (put as one block of SLOT(16) + 8 bytes) */
    if (p->training && p->train.loss_scaling) need += SLOT(2 * sizeof(float)); /* {scale, good steps} */
    for (int k = 0; k < p->n_inputs; k++)
        need += SLOT((size_t)(p->max_batch * p->L[p->input_node[k]].out_numel) * sizeof(float));
    if (p->training)
        need += SLOT((size_t)p->max_batch * (p->sparse ? (size_t)p->rows_per_sample * sizeof(int32_t)
                                                       : (size_t)p->out_numel * sizeof(float)));
    return need;
}

static int forced(void)
{
    static int f = -1;
    if (f < 0) {
        const char *v = getenv("GPUCMP_PLAN_STAGE");
        f = v && v[0] == '1' && !v[1];
    }
    return f;
}

static int stages(const gc_plan *p)
{
    const gc_backend *be = p->be;
    return (!be->uploads_done_on_return || forced()) && be->host_alloc && be->host_free && be->upload_async;
}

gc_status gc_plan_stage_begin(gc_plan *p)
{
    p->stage_off = 0;
    if (p->checking || p->stage_state < 0 || !stages(p)) return GC_OK;
    if (!p->stage_state) {
        size_t n = stage_size(p);
        p->stage_state = -1;
        if (n > GC_PLAN_STAGE_MAX) return GC_OK;
        if (p->be->host_alloc(p->be, n, &p->stage) != GC_OK) {
            gc_clear_error(); /* no page-locked memory: synchronous uploads, as before */
            p->stage = NULL;
            return GC_OK;
        }
        p->stage_bytes = n;
        p->stage_state = 1;
    }
    if (p->stage_busy) {
        TRY(p->be->sync(p->be)); /* an earlier call queued copies and never read a result */
        p->stage_busy = 0;
    }
    return GC_OK;
}

gc_status gc_plan_stage_put(gc_plan *p, void *dst, const void *src, size_t nbytes)
{
    const gc_backend *be = p->be;
    if (p->stage_state <= 0 || !nbytes || p->stage_off + SLOT(nbytes) > p->stage_bytes)
        return be->upload(be, dst, src, nbytes);
    char *slot = (char *)p->stage + p->stage_off;
    memcpy(slot, src, nbytes);
    p->stage_off += SLOT(nbytes);
    p->stage_busy = 1; /* set before queuing: a failed queue may still have started */
    return be->upload_async(be, dst, slot, nbytes);
}

/* Whether one of the n floats at x is NaN or +-Inf (exponent all ones), copying them to
 * dst on the way when dst is not NULL: the stage's copy of a float input is the check's
 * pass. AVX2 where the CPU has it (32-byte loads, four vectors a step: as fast as the
 * memcpy it replaces; the -O3 SSE2 loop below it was 20-40% slower), else plain integer
 * code that -O3 vectorises. The library is built without -march: a target attribute and
 * a run-time probe, as the GEMM's micro-kernels. */
static int scan_generic(uint32_t *restrict d, const uint32_t *restrict u, size_t n)
{
    uint32_t bad = 0;
    if (d)
        for (size_t i = 0; i < n; i++) {
            d[i] = u[i];
            bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
        }
    else
        for (size_t i = 0; i < n; i++) bad |= (u[i] & 0x7f800000u) == 0x7f800000u;
    return bad != 0;
}

#if defined(__x86_64__) || defined(__i386__)
#define STAGE_X86 1
__attribute__((target("avx2"))) static int scan_avx2(uint32_t *restrict d, const uint32_t *restrict u, size_t n)
{
    const __m256i e = _mm256_set1_epi32(0x7f800000);
    __m256i acc = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i v[4];
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_si256((const __m256i *)(u + i + 8 * k));
            if (d) _mm256_storeu_si256((__m256i *)(d + i + 8 * k), v[k]);
            acc = _mm256_or_si256(acc, _mm256_cmpeq_epi32(_mm256_and_si256(v[k], e), e));
        }
    }
    const int tail = scan_generic(d ? d + i : NULL, u + i, n - i); /* copies the tail too */
    return tail || !_mm256_testz_si256(acc, acc);
}

static int have_avx2(void)
{
    static int v = -1; /* the same answer from every thread: a benign race */
    if (v < 0) {
        __builtin_cpu_init();
        v = __builtin_cpu_supports("avx2") != 0;
    }
    return v;
}
#endif

static int scan_nonfinite(float *dst, const float *x, size_t n)
{
    uint32_t *d = (uint32_t *)dst; /* the build has -fno-strict-aliasing */
    const uint32_t *u = (const uint32_t *)x;
#ifdef STAGE_X86
    if (have_avx2()) return scan_avx2(d, u, n);
#endif
    return scan_generic(d, u, n);
}

gc_status gc_plan_stage_put_floats(gc_plan *p, void *dst, const float *src, size_t n, const char *what)
{
    const gc_backend *be = p->be;
    const size_t nbytes = n * sizeof(float);
    if (p->stage_state <= 0 || !nbytes || p->stage_off + SLOT(nbytes) > p->stage_bytes) {
        if (scan_nonfinite(NULL, src, n)) return gc_fail(GC_ERR_NONFINITE, "plan: %s contains NaN or Inf", what);
        return be->upload(be, dst, src, nbytes);
    }
    char *slot = (char *)p->stage + p->stage_off;
    if (scan_nonfinite((float *)slot, src, n)) return gc_fail(GC_ERR_NONFINITE, "plan: %s contains NaN or Inf", what);
    p->stage_off += SLOT(nbytes);
    p->stage_busy = 1;
    return be->upload_async(be, dst, slot, nbytes);
}

gc_status gc_plan_download(gc_plan *p, void *host_dst, const void *src, size_t nbytes)
{
    TRY(p->be->download(p->be, host_dst, src, nbytes));
    if (nbytes) p->stage_busy = 0; /* the download waited for the stream: every queued copy is done */
    return GC_OK;
}

void gc_plan_stage_free(gc_plan *p)
{
    if (!p->stage) return;
    if (p->stage_busy) (void)p->be->sync(p->be); /* nothing may still read it */
    p->be->host_free(p->be, p->stage);
    p->stage = NULL;
    p->stage_state = 0;
    p->stage_busy = 0;
}
