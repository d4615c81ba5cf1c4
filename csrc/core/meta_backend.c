/* meta_backend.c -- the "meta" backend: memory that is counted but never touched, ops
 * that do nothing.
 *
 * What it is for: building an execution plan for a model and batch that do not fit the
 * machine at hand (ResNet-50 at batch 256 on a laptop) to learn exactly what the plan
 * would allocate (gc_plan_bytes) and which ops one step issues (gc_plan_trace), as
 * PyTorch's meta device does for tensors. The comparison harness uses it for its memory
 * model and op lists. Allocations return distinct fake addresses (never dereferenced:
 * every op slot is a no-op and transfers only zero the host side), so a plan's creation
 * and its checking pass run unchanged. It is reachable by name ("meta") but not listed
 * among the devices. */
#include "gpucmp.h"

#include <stdlib.h>
#include <string.h>

static gc_mem_counter meta_mem;
static uint64_t next_addr = (uint64_t)1 << 44;

static gc_status meta_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    (void)be;
    uint64_t n = ((uint64_t)nbytes + 255u) & ~(uint64_t)255u;
    *out = (void *)(uintptr_t)__atomic_fetch_add(&next_addr, n ? n : 256u, __ATOMIC_RELAXED);
    gc_mem_add(&meta_mem, (int64_t)nbytes);
    return GC_OK;
}

/* the size is not known at release: the counter keeps what was allocated (a plan on the
 * meta backend is short-lived; memory_stats reports the running total and its peak) */
static void meta_release(const gc_backend *be, void *ptr) { (void)be, (void)ptr; }

static gc_status meta_upload(const gc_backend *be, void *dst, const void *src, size_t n)
{
    (void)be, (void)dst, (void)src, (void)n;
    return GC_OK;
}

static gc_status meta_download(const gc_backend *be, void *dst, const void *src, size_t n)
{
    (void)be, (void)src;
    memset(dst, 0, n);
    return GC_OK;
}

static gc_status meta_copy(const gc_backend *be, void *dst, const void *src, size_t n)
{
    (void)be, (void)dst, (void)src, (void)n;
    return GC_OK;
}

static gc_status meta_fill_zero(const gc_backend *be, void *dst, size_t n)
{
    (void)be, (void)dst, (void)n;
    return GC_OK;
}

static gc_status meta_sync(const gc_backend *be)
{
    (void)be;
    return GC_OK;
}

/* host staging (gpucmp.h): real host memory (a caller writes into it); uploads do nothing */
static gc_status meta_host_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    (void)be;
    *out = malloc(nbytes ? nbytes : 1);
    if (!*out) return gc_fail(GC_ERR_NOMEM, "meta: cannot allocate %zu bytes of staging memory", nbytes);
    return GC_OK;
}

static void meta_host_free(const gc_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
}

static gc_status meta_op(const gc_backend *be, const gc_op_call *call)
{
    (void)be, (void)call;
    return GC_OK;
}

static gc_status meta_memory_stats(const gc_backend *be, gc_memory_stats *out)
{
    (void)be;
    gc_mem_read(&meta_mem, &out->allocated_bytes, &out->peak_bytes);
    out->device_free_bytes = out->device_total_bytes = -1;
    return GC_OK;
}

static void meta_reset_peak(const gc_backend *be)
{
    (void)be;
    gc_mem_reset_peak(&meta_mem);
}

static const gc_backend meta_backend = {
    .name = "meta",
    .device_index = 0,
    .native_dtypes = (1u << GC_F32) | (1u << GC_F16) | (1u << GC_BF16),
    .alloc = meta_alloc,
    .release = meta_release,
    .upload = meta_upload,
    .download = meta_download,
    .copy = meta_copy,
    .fill_zero = meta_fill_zero,
    .sync = meta_sync,
    .ops = {
#define X(E, n, P, ni, no) [GC_OP_##E] = meta_op,
        GC_OP_LIST(X)
#undef X
    },
    .memory_stats = meta_memory_stats,
    .reset_peak = meta_reset_peak,
    .host_alloc = meta_host_alloc,
    .host_free = meta_host_free,
    .upload_async = meta_upload,
    .uploads_done_on_return = 1,
};

const gc_backend *gc_meta_backend(void) { return &meta_backend; }
