/* backend.c -- the CPU backend: host memory and the op table built from GC_OP_LIST.
 *
 * Memory is 64-byte aligned host memory (cache lines, AVX-512 loads). Kernels take
 * float32 only; core converts f16/bf16 storage at the edges through gc_cpu_op_cast.
 * The table is filled by the X-macro, so an op without a CPU adapter fails to link. */
#include "cpu_kernels.h"

#include <stdlib.h>
#include <string.h>

static gc_status cpu_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    (void)be;
    size_t rounded = (nbytes + 63u) & ~(size_t)63u;
    if (rounded < nbytes) return gc_fail(GC_ERR_NOMEM, "cpu: allocation of %zu bytes overflows", nbytes);
    void *p = aligned_alloc(64, rounded ? rounded : 64);
    if (!p) return gc_fail(GC_ERR_NOMEM, "cpu: cannot allocate %zu bytes of host memory", nbytes);
    *out = p;
    return GC_OK;
}

static void cpu_release(const gc_backend *be, void *ptr)
{
    (void)be;
    free(ptr);
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
    .impl = NULL,
};

const gc_backend *gc_cpu_backend(void) { return &cpu_backend; }
