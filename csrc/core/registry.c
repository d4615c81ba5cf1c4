/* registry.c -- the table of backends, chosen at run time by name.
 *
 * The CPU backend is registered on first use; the CUDA backend registers itself from
 * gc_cuda_register() when the library was built with it and a device answers. A
 * fixed-size array: there are a handful of devices, and registration happens once at
 * import, under the GIL. */
#include "gpucmp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GC_MAX_BACKENDS 17

extern const gc_backend *gc_cpu_backend(void);
extern const gc_backend *gc_meta_backend(void);

static const gc_backend *backends[GC_MAX_BACKENDS];
static int n_backends;

static void ensure_cpu(void)
{
    if (n_backends == 0) backends[n_backends++] = gc_cpu_backend();
}

gc_status gc_backend_register(const gc_backend *be)
{
    ensure_cpu();
    if (n_backends >= GC_MAX_BACKENDS)
        return gc_fail(GC_ERR_INVALID_ARG, "too many backends (at most %d)", GC_MAX_BACKENDS);
    for (int i = 0; i < n_backends; i++)
        if (backends[i] == be) return GC_OK;
    backends[n_backends++] = be;
    return GC_OK;
}

int gc_backend_count(void)
{
    ensure_cpu();
    return n_backends;
}

const gc_backend *gc_backend_at(int i)
{
    ensure_cpu();
    return (i >= 0 && i < n_backends) ? backends[i] : NULL;
}

gc_status gc_backend_get(const char *name, const gc_backend **out)
{
    ensure_cpu();
    if (!name) return gc_fail(GC_ERR_INVALID_ARG, "backend: name is missing");
    if (strcmp(name, "meta") == 0) { /* counted memory, no-op kernels: not a listed device */
        *out = gc_meta_backend();
        return GC_OK;
    }
    for (int i = 0; i < n_backends; i++) {
        const gc_backend *be = backends[i];
        if (strcmp(name, be->name) == 0 && (strcmp(be->name, "cpu") == 0 || be->device_index == 0)) {
            *out = be;
            return GC_OK;
        }
        if (strncmp(name, be->name, strlen(be->name)) == 0 && name[strlen(be->name)] == ':') {
            char *end = NULL;
            long idx = strtol(name + strlen(be->name) + 1, &end, 10);
            if (end && *end == '\0' && idx == be->device_index) {
                *out = be;
                return GC_OK;
            }
        }
    }
    char known[256] = "";
    size_t len = 0;
    for (int i = 0; i < n_backends && len + 40 < sizeof known; i++) {
        const gc_backend *be = backends[i];
        if (strcmp(be->name, "cpu") == 0)
            len += (size_t)snprintf(known + len, sizeof known - len, "%s'cpu'", i ? ", " : "");
        else
            len += (size_t)snprintf(known + len, sizeof known - len, "%s'%s:%d'", i ? ", " : "",
                                    be->name, be->device_index);
    }
    return gc_fail(GC_ERR_INVALID_ARG, "backend: unknown or unavailable device '%s' (available: %s)",
                   name, known);
}

/* ------------------------------------------------------------------ memory accounting
 * The backends count their own memory (gc_mem_counter); these wrappers only make the
 * optional slots safe to call on any backend. */
gc_status gc_backend_memory_stats(const gc_backend *be, gc_memory_stats *out)
{
    if (!out) return gc_fail(GC_ERR_INVALID_ARG, "memory_stats: no output");
    out->allocated_bytes = out->peak_bytes = 0;
    out->device_free_bytes = out->device_total_bytes = -1;
    if (!be) return gc_fail(GC_ERR_INVALID_ARG, "memory_stats: no backend");
    if (!be->memory_stats)
        return gc_fail(GC_ERR_UNSUPPORTED, "memory_stats: backend '%s' does not count its memory", be->name);
    return be->memory_stats(be, out);
}

void gc_backend_reset_peak(const gc_backend *be)
{
    if (be && be->reset_peak) be->reset_peak(be);
}
