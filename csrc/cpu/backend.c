/* backend.c -- the CPU backend: host memory and the op table built from GC_OP_LIST.
 *
 * Memory is 64-byte aligned host memory (cache lines, AVX-512 loads). Kernels take
 * float32 only; core converts f16/bf16 storage at the edges through gc_cpu_op_cast.
 * The table is filled by the X-macro, so an op without a CPU adapter fails to link.
 *
 * Memory accounting (the memory_stats slot): every block carries a 64-byte header in
 * front of the pointer handed out, holding the block's size, so release knows what to
 * subtract without a table; the header is one alignment unit, so the pointer keeps
 * its 64-byte alignment. The counter is lock-free (gc_mem_counter, gpucmp.h). */
#define _DEFAULT_SOURCE /* madvise */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#define CPU_HEADER ((size_t)64) /* a multiple of the alignment */
/* Blocks of at least HUGE_MIN bytes are 2 MiB aligned and advised onto transparent huge
 * pages, as NumPy does for its large arrays: the GEMM packs and the recurrences read
 * them in short strided runs, and with 4 KiB pages those cost TLB misses. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

static gc_mem_counter cpu_mem;

static gc_status cpu_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    (void)be;
    size_t rounded = (nbytes + 63u) & ~(size_t)63u;
    if (rounded < nbytes || rounded > (size_t)INT64_MAX - CPU_HEADER - 64)
        return gc_fail(GC_ERR_NOMEM, "cpu: allocation of %zu bytes overflows", nbytes);
    size_t total = (rounded ? rounded : 64) + CPU_HEADER;
    char *p;
    if (total >= HUGE_MIN && total <= SIZE_MAX - HUGE_PAGE) {
        total = (total + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
        p = (char *)aligned_alloc(HUGE_PAGE, total);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
        if (p) (void)madvise(p, total, MADV_HUGEPAGE); /* advice only: a refusal changes nothing */
#endif
    } else {
        p = (char *)aligned_alloc(64, total);
    }
    if (!p) return gc_fail(GC_ERR_NOMEM, "cpu: cannot allocate %zu bytes of host memory", nbytes);
    memcpy(p, &total, sizeof total);
    gc_mem_add(&cpu_mem, (int64_t)total);
    *out = p + CPU_HEADER;
    return GC_OK;
}

static void cpu_release(const gc_backend *be, void *ptr)
{
    (void)be;
    if (!ptr) return;
    char *p = (char *)ptr - CPU_HEADER;
    size_t total;
    memcpy(&total, p, sizeof total);
    gc_mem_sub(&cpu_mem, (int64_t)total);
    free(p);
}

static gc_status cpu_memory_stats(const gc_backend *be, gc_memory_stats *out)
{
    (void)be;
    gc_mem_read(&cpu_mem, &out->allocated_bytes, &out->peak_bytes);
    out->device_free_bytes = out->device_total_bytes = -1;
    return GC_OK;
}

static void cpu_reset_peak(const gc_backend *be)
{
    (void)be;
    gc_mem_reset_peak(&cpu_mem);
}

static gc_status cpu_copy(const gc_backend *be, void *dst, const void *src, size_t nbytes)
{
    (void)be;
    if (nbytes) memmove(dst, src, nbytes);
    return GC_OK;
}

static gc_status cpu_fill_zero(const gc_backend *be, void *dst, size_t nbytes)
{
    (void)be;
    if (nbytes) memset(dst, 0, nbytes);
    return GC_OK;
}

static gc_status cpu_sync(const gc_backend *be)
{
    (void)be;
    return GC_OK;
}

/* host staging (gpucmp.h): plain host memory; a copy is done when it returns */
static gc_status cpu_host_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    (void)be;
    *out = malloc(nbytes ? nbytes : 1);
    if (!*out) return gc_fail(GC_ERR_NOMEM, "cpu: cannot allocate %zu bytes of staging memory", nbytes);
    return GC_OK;
}

static void cpu_host_free(const gc_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static const gc_backend cpu_backend = {
    .name = "cpu",
    .device_index = 0,
    .native_dtypes = 1u << GC_F32,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .upload = cpu_copy,
    .download = cpu_copy,
    .copy = cpu_copy,
    .fill_zero = cpu_fill_zero,
    .sync = cpu_sync,
    .ops = {
#define X(E, n, P, ni, no) [GC_OP_##E] = gc_cpu_op_##n,
        GC_OP_LIST(X)
#undef X
    },
    .memory_stats = cpu_memory_stats,
    .reset_peak = cpu_reset_peak,
    .host_alloc = cpu_host_alloc,
    .host_free = cpu_host_free,
    .upload_async = cpu_copy,
    .uploads_done_on_return = 1,
    .impl = NULL,
};

const gc_backend *gc_cpu_backend(void)
{
    gc_cpu_register_variants();
    return &cpu_backend;
}
