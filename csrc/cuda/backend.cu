/* backend.cu -- the CUDA backend table: one gc_backend per visible device, device
 * memory, transfers, the one stream, graph capture and replay, and the shared state
 * that common.cuh exposes (workspace, scratch, error flag, device properties).
 *
 * Why it is built this way: `import gpucmp` must work on machines without a GPU or a
 * driver, and the module links cudart statically, so registration asks
 * cudaGetDeviceCount and registers nothing, silently, on any failure (but for the
 * backend's kernel-variant probe, variants.cu, which answers "no device" then).
 * Registration only reads attributes; the context, the stream (non-blocking, so it never serialises with
 * the legacy default stream) and the small fixed buffers are created by the first call
 * that needs them (gc_cuda_set_device). Every op and copy goes to that one stream, so
 * a plan step is captured into a CUDA graph (thread-local capture mode: an illegal
 * call from this thread fails the capture rather than silently syncing) and replayed
 * with one launch. The growable workspace is never freed while a graph exists (a
 * graph holds its address); outgrown buffers are kept until the last graph goes.
 * Host memory is pageable, so upload and download synchronise the stream; an upload
 * of >= 2 MB (a training set, a window of one) is streamed through two page-locked
 * 8 MB buffers, the host copy into one overlapping the DMA out of the other, which
 * runs at the link's pinned rate instead of the driver's pageable path. The host
 * staging slots (host_alloc / host_free / upload_async) give a plan its own page-locked
 * buffer and a copy out of it that only queues (cudaMemcpyAsync on the stream): a step's
 * inputs go up without a synchronisation, and the plan waits once, at its result.
 *
 * Memory accounting (the memory_stats slot): every byte the backend holds on the device
 * -- tensors from cu_alloc, the workspace (outgrown ones kept for live graphs too), the
 * scratch area and the error flags -- is counted in one lock-free gc_mem_counter per
 * device. cudaFree does not tell a size, so cu_alloc records each pointer's size in a
 * small hash table (open addressing) that cu_release looks up. The page-locked host
 * staging buffers are host memory and not counted.
 *
 * SM confinement (GPUCMP_CUDA_SMS=N, read once at registration): each device's first
 * use makes a CUDA green context holding N SMs (driver API, fetched at run time with
 * cudaGetDriverEntryPointByVersion: the module never links libcuda) and makes it
 * current instead of the primary context; the stream is created while it is current,
 * so all the backend's work runs on those SMs, and `sms` (what kernels size grids
 * for) becomes the granted count. cudaSetDevice would make the primary context
 * current again, so every entry point goes through make_current(). A confinement
 * that cannot be made fails every use of the backend with a message naming
 * GPUCMP_CUDA_SMS; the backend never falls back to the whole device.
 */
#include "common.cuh"
#include "gpucmp_cuda.h"
#include "gpucmp_variants.h"

#include <cuda.h> /* driver types only: the green-context functions are fetched at run time */
#if CUDA_VERSION >= 12040
#include <cudaTypedefs.h>
#endif
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GC_CUDA_MAX_DEVICES 16

typedef struct {
    int dev;
    int ready;                 /* stream and fixed buffers created */
    cudaStream_t stream;
    int cc, sms;
    size_t smem_optin;
    void *ws[2];               /* growable buffers: the workspace, the staging buffer */
    size_t ws_bytes[2];
    void **retired;            /* outgrown workspaces a live graph may still use */
    int n_retired, cap_retired;
    int live_graphs;
    int32_t *err_flag;         /* 16 int32 */
    void *scratch;             /* GC_CUDA_SCRATCH_BYTES */
    void *pinned[2];           /* upload staging (page-locked), made on the first big upload */
    cudaEvent_t pinned_done[2];
    int pinned_state;          /* 0 not tried, 1 ready, -1 unavailable (direct copies) */
    size_t retired_bytes;      /* held by `retired` */
    pthread_mutex_t mu;
    int sms_physical;
    /* SM confinement: a green context made at the first use when GPUCMP_CUDA_SMS is set */
    int green;                 /* 1: ctx is the context of every call */
    CUgreenCtx gctx;
    CUcontext ctx;
    int init_failed;           /* the confinement could not be made: every use fails with */
    gc_status init_status;     /* this status and message */
    char init_msg[512];
    /* memory accounting */
    gc_mem_counter mem;
    pthread_mutex_t tab_mu;    /* the pointer -> size table of cu_alloc */
    void **tab_key;
    size_t *tab_size;
    size_t tab_cap, tab_n;
} cuda_state;

/* GPUCMP_CUDA_SMS as read at registration: mode 0 unset, 1 a positive integer (sm_req),
 * -1 not one (the text is kept for the message) */
static int g_sms_mode;
static long g_sms_req;
static char g_sms_text[64];

static cuda_state g_state[GC_CUDA_MAX_DEVICES];
static gc_backend g_backend[GC_CUDA_MAX_DEVICES];
static int g_ndev;

static cuda_state *st_of(const gc_backend *be) { return (cuda_state *)be->impl; }

/* ------------------------------------------------------------------ shared helpers */
extern "C" gc_status gc_cuda_launch_check(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return gc_fail(e == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                       "%s: kernel launch failed: %s", what ? what : "cuda", cudaGetErrorString(e));
    return GC_OK;
}

/* ------------------------------------------------------------------ green contexts
 * The driver entry points, fetched once by the version whose signature cudaTypedefs.h
 * gives (PFN_<name>_v<version>), so a newer driver's changed ABI is never called. */
#if CUDA_VERSION >= 12040
typedef struct {
    PFN_cuDeviceGet_v2000 DeviceGet;
    PFN_cuDeviceGetDevResource_v12040 DeviceGetDevResource;
    PFN_cuDevSmResourceSplitByCount_v12040 DevSmResourceSplitByCount;
    PFN_cuDevResourceGenerateDesc_v12040 DevResourceGenerateDesc;
    PFN_cuGreenCtxCreate_v12040 GreenCtxCreate;
    PFN_cuGreenCtxDestroy_v12040 GreenCtxDestroy;
    PFN_cuCtxFromGreenCtx_v12040 CtxFromGreenCtx;
    PFN_cuCtxSetCurrent_v4000 CtxSetCurrent;
    PFN_cuGetErrorString_v6000 GetErrorString;
    PFN_cuGetErrorName_v6000 GetErrorName;
} green_api;

static green_api g_green;
static int g_green_state;        /* 0 not tried, 1 loaded, -1 unavailable */
static char g_green_why[160];
static pthread_mutex_t g_green_mu = PTHREAD_MUTEX_INITIALIZER;

static int green_sym(const char *name, unsigned version, void **out)
{
    void *fn = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion(name, &fn, version, cudaEnableDefault, &q);
#else
    (void)version;
    cudaError_t e = cudaGetDriverEntryPoint(name, &fn, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
        (void)cudaGetLastError();
        snprintf(g_green_why, sizeof g_green_why, "the driver has no %s (v%u): %s", name, version,
                 e != cudaSuccess ? cudaGetErrorString(e)
                                  : q == cudaDriverEntryPointVersionNotSufficent ? "driver too old" : "symbol not found");
        return 0;
    }
    *out = fn;
    return 1;
}

/* 1 when every entry point is there (loaded once, any thread) */
static int green_load(void)
{
    pthread_mutex_lock(&g_green_mu);
    if (g_green_state == 0) {
        green_api a;
        memset(&a, 0, sizeof a);
        int ok = green_sym("cuDeviceGet", 2000, (void **)&a.DeviceGet) &&
                 green_sym("cuDeviceGetDevResource", 12040, (void **)&a.DeviceGetDevResource) &&
                 green_sym("cuDevSmResourceSplitByCount", 12040, (void **)&a.DevSmResourceSplitByCount) &&
                 green_sym("cuDevResourceGenerateDesc", 12040, (void **)&a.DevResourceGenerateDesc) &&
                 green_sym("cuGreenCtxCreate", 12040, (void **)&a.GreenCtxCreate) &&
                 green_sym("cuGreenCtxDestroy", 12040, (void **)&a.GreenCtxDestroy) &&
                 green_sym("cuCtxFromGreenCtx", 12040, (void **)&a.CtxFromGreenCtx) &&
                 green_sym("cuCtxSetCurrent", 4000, (void **)&a.CtxSetCurrent) &&
                 green_sym("cuGetErrorString", 6000, (void **)&a.GetErrorString) &&
                 green_sym("cuGetErrorName", 6000, (void **)&a.GetErrorName);
        if (ok) g_green = a;
        g_green_state = ok ? 1 : -1;
    }
    int ok = g_green_state > 0;
    pthread_mutex_unlock(&g_green_mu);
    return ok;
}

/* "CUDA_ERROR_X: text" of a driver result (the entry points may be partly missing) */
static void cu_err_text(CUresult r, char *buf, size_t n)
{
    const char *name = NULL, *str = NULL;
    if (g_green.GetErrorName && g_green.GetErrorName(r, &name) != CUDA_SUCCESS) name = NULL;
    if (g_green.GetErrorString && g_green.GetErrorString(r, &str) != CUDA_SUCCESS) str = NULL;
    if (name) snprintf(buf, n, "%s: %s", name, str ? str : "unknown error");
    else snprintf(buf, n, "CUresult %d: %s", (int)r, str ? str : "unknown error");
}
#endif /* CUDA_VERSION >= 12040 */

/* Makes the device's context current on the calling thread: the green context when the
 * backend is confined, else the primary one (cudaSetDevice). The one place that picks
 * the context: every entry point, release and teardown goes through it. Returns 0 on
 * success, else -1 with the reason in why (when given); it records no gc_fail message,
 * so release and teardown after an error keep that error's message. */
static int set_current(cuda_state *s, char *why, size_t n)
{
#if CUDA_VERSION >= 12040
    if (s->green) {
        CUresult r = g_green.CtxSetCurrent(s->ctx);
        if (r == CUDA_SUCCESS) return 0;
        if (why) cu_err_text(r, why, n);
        return -1;
    }
#endif
    cudaError_t e = cudaSetDevice(s->dev);
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    if (why) snprintf(why, n, "%s", cudaGetErrorString(e));
    return -1;
}

static gc_status make_current(cuda_state *s)
{
    char why[256];
    if (set_current(s, why, sizeof why) == 0) return GC_OK;
    if (s->green)
        return gc_fail(GC_ERR_BACKEND, "cuda:%d: cannot make the GPUCMP_CUDA_SMS green context current: %s",
                       s->dev, why);
    return gc_fail(GC_ERR_BACKEND, "cuda:%d: cudaSetDevice failed: %s", s->dev, why);
}

/* Records the first-use failure of the confinement: every later use repeats it. */
static gc_status green_fail(cuda_state *s, gc_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static gc_status green_fail(cuda_state *s, gc_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(s->init_msg, sizeof s->init_msg, fmt, ap);
    va_end(ap);
    s->init_status = st;
    s->init_failed = 1;
    return gc_fail(st, "%s", s->init_msg);
}

/* Makes the green context of GPUCMP_CUDA_SMS SMs on s's device and makes it current;
 * the primary context is current on entry (cudaSetDevice: the green context retains
 * it, and the docs advise it be initialised first). Called once, under s->mu. */
static gc_status green_create(cuda_state *s)
{
    if (g_sms_mode < 0)
        return green_fail(s, GC_ERR_INVALID_ARG,
                          "cuda:%d: GPUCMP_CUDA_SMS='%s' is not a positive integer (the number of SMs to "
                          "confine the backend to; unset it to use the whole device)",
                          s->dev, g_sms_text);
    if (g_sms_req > s->sms_physical)
        return green_fail(s, GC_ERR_INVALID_ARG,
                          "cuda:%d: GPUCMP_CUDA_SMS=%ld is more than the device's %d SMs", s->dev, g_sms_req,
                          s->sms_physical);
#if CUDA_VERSION >= 12040
    if (!green_load())
        return green_fail(s, GC_ERR_UNSUPPORTED,
                          "cuda:%d: GPUCMP_CUDA_SMS=%ld needs CUDA green contexts (a driver for CUDA >= 12.4): %s",
                          s->dev, g_sms_req, g_green_why);
    char why[256];
    CUdevice dev = 0;
    CUdevResource res, group, remaining;
    memset(&res, 0, sizeof res);
    memset(&group, 0, sizeof group);
    memset(&remaining, 0, sizeof remaining);
    unsigned int nb = 1;
    CUdevResourceDesc desc = NULL;
    CUgreenCtx g = NULL;
    CUcontext ctx = NULL;
    CUresult r = g_green.DeviceGet(&dev, s->dev);
    const char *what = "cuDeviceGet";
    if (r == CUDA_SUCCESS) {
        what = "cuDeviceGetDevResource(SM)";
        r = g_green.DeviceGetDevResource(dev, &res, CU_DEV_RESOURCE_TYPE_SM);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuDevSmResourceSplitByCount";
        r = g_green.DevSmResourceSplitByCount(&group, &nb, &res, &remaining, 0, (unsigned int)g_sms_req);
    }
    if (r == CUDA_SUCCESS && (nb < 1 || group.sm.smCount < (unsigned int)g_sms_req))
        return green_fail(s, GC_ERR_INVALID_ARG,
                          "cuda:%d: GPUCMP_CUDA_SMS=%ld: the driver cannot split a group of %ld SMs off the "
                          "device's %u (groups made: %u, of %u SMs; minimum partition %u, alignment %u)",
                          s->dev, g_sms_req, g_sms_req, res.sm.smCount, nb, nb ? group.sm.smCount : 0u,
                          res.sm.minSmPartitionSize, res.sm.smCoscheduledAlignment);
    if (r == CUDA_SUCCESS) {
        what = "cuDevResourceGenerateDesc";
        r = g_green.DevResourceGenerateDesc(&desc, &group, 1);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuGreenCtxCreate";
        r = g_green.GreenCtxCreate(&g, desc, dev, CU_GREEN_CTX_DEFAULT_STREAM);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuCtxFromGreenCtx";
        r = g_green.CtxFromGreenCtx(&ctx, g);
    }
    if (r == CUDA_SUCCESS) {
        what = "cuCtxSetCurrent";
        r = g_green.CtxSetCurrent(ctx);
    }
    if (r != CUDA_SUCCESS) {
        cu_err_text(r, why, sizeof why);
        if (g) {
            if (cudaSetDevice(s->dev) != cudaSuccess) (void)cudaGetLastError(); /* not the green one */
            (void)g_green.GreenCtxDestroy(g);
        }
        return green_fail(s, r == CUDA_ERROR_OUT_OF_MEMORY ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                          "cuda:%d: GPUCMP_CUDA_SMS=%ld: %s failed: %s", s->dev, g_sms_req, what, why);
    }
    s->gctx = g;
    s->ctx = ctx;
    s->green = 1;
    s->sms = (int)group.sm.smCount;
    return GC_OK;
#else
    return green_fail(s, GC_ERR_UNSUPPORTED,
                      "cuda:%d: GPUCMP_CUDA_SMS=%ld needs CUDA green contexts: this build's toolkit (CUDA %d) "
                      "is older than 12.4",
                      s->dev, g_sms_req, CUDART_VERSION);
#endif
}

/* First use: the context (green under GPUCMP_CUDA_SMS), then the stream -- created
 * while that context is current, so its work runs on the granted SMs -- and the small
 * fixed buffers. Later calls only make the context current. */
extern "C" gc_status gc_cuda_set_device(const gc_backend *be)
{
    cuda_state *s = st_of(be);
    if (!s) return gc_fail(GC_ERR_BACKEND, "cuda: backend has no state");
    if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE)) return make_current(s);
    pthread_mutex_lock(&s->mu);
    gc_status st = GC_OK;
    if (s->init_failed) {
        st = gc_fail(s->init_status, "%s", s->init_msg);
    } else if (!s->ready) {
        cudaError_t e = cudaSuccess;
        st = s->green ? GC_OK : make_current(s); /* the primary context: a green one retains it */
        if (st == GC_OK && g_sms_mode != 0) {
            /* green_create leaves the green context current; a retry after a failed
             * allocation below finds it made */
            st = s->green ? make_current(s) : green_create(s);
        }
        if (st == GC_OK) {
            if (!s->stream) e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
            if (e == cudaSuccess && !s->err_flag) {
                e = cudaMalloc((void **)&s->err_flag, 16 * sizeof(int32_t));
                if (e == cudaSuccess) gc_mem_add(&s->mem, 16 * sizeof(int32_t));
            }
            if (e == cudaSuccess && !s->scratch) {
                e = cudaMalloc(&s->scratch, GC_CUDA_SCRATCH_BYTES);
                if (e == cudaSuccess) gc_mem_add(&s->mem, (int64_t)GC_CUDA_SCRATCH_BYTES);
            }
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                st = gc_fail(e == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                             "cuda:%d: cannot initialise the device (stream and %zu bytes of scratch): %s",
                             s->dev, (size_t)GC_CUDA_SCRATCH_BYTES + 64, cudaGetErrorString(e));
            } else {
                __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
            }
        }
    }
    pthread_mutex_unlock(&s->mu);
    /* (also when another thread made it ready meanwhile) */
    if (st == GC_OK) st = make_current(s);
    return st;
}

extern "C" cudaStream_t gc_cuda_stream(const gc_backend *be)
{
    cuda_state *s = st_of(be);
    return s ? s->stream : (cudaStream_t)0;
}

extern "C" int gc_cuda_cc(const gc_backend *be) { return st_of(be) ? st_of(be)->cc : 0; }
extern int gc_cuda_sms_as; /* launch_log.cu: the SM count a launch-log query plans for */
extern "C" int gc_cuda_sm_count(const gc_backend *be)
{
    if (!st_of(be)) return 0;
    return gc_cuda_sms_as > 0 ? gc_cuda_sms_as : st_of(be)->sms;
}
extern "C" size_t gc_cuda_smem_optin(const gc_backend *be)
{
    if (!st_of(be)) return 0;
    size_t v = st_of(be)->smem_optin;
    const int kb = gc_variant_forced(GC_VP_CUDA_SMEM_LIMIT_KB);
    if (kb > 0) {
        if ((size_t)kb << 10 < v) v = (size_t)kb << 10;
        gc_variant_ran(GC_VP_CUDA_SMEM_LIMIT_KB, kb);
    }
    return v;
}
extern "C" int gc_cuda_smem_blocks_per_sm(const gc_backend *be, size_t smem)
{
    const int kb = gc_variant_forced(GC_VP_CUDA_SMEM_LIMIT_KB);
    if (!st_of(be) || kb <= 0) return INT_MAX;
    const size_t per_sm = ((size_t)kb + 1) << 10;
    return smem ? (int)(per_sm / smem) : INT_MAX;
}
extern "C" int32_t *gc_cuda_err_flag(const gc_backend *be) { return st_of(be) ? st_of(be)->err_flag : NULL; }
extern "C" void *gc_cuda_scratch(const gc_backend *be) { return st_of(be) ? st_of(be)->scratch : NULL; }

extern "C" int gc_cuda_capturing(const gc_backend *be)
{
    cuda_state *s = st_of(be);
    if (!s || !s->stream) return 0;
    cudaStreamCaptureStatus cs = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(s->stream, &cs) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return cs != cudaStreamCaptureStatusNone;
}

/* The growable buffer `slot` (0 the workspace, 1 the staging buffer) of at least `bytes`. */
static gc_status grow_buffer(const gc_backend *be, int slot, size_t bytes, void **out)
{
    cuda_state *s = st_of(be);
    if (!s) return gc_fail(GC_ERR_BACKEND, "cuda: backend has no state");
    if (bytes == 0) bytes = 1;
    pthread_mutex_lock(&s->mu);
    gc_status st = GC_OK;
    if (bytes > s->ws_bytes[slot]) {
        if (gc_cuda_capturing(be)) {
            st = gc_fail(GC_ERR_BACKEND,
                         "cuda:%d: an op needs %zu bytes of %s (%zu held) while a CUDA graph is "
                         "being captured; run the step once without capture first so the buffer "
                         "is sized",
                         s->dev, bytes, slot ? "staging" : "workspace", s->ws_bytes[slot]);
        } else {
            size_t want = bytes + bytes / 4;               /* some headroom */
            want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
            if (want < bytes) want = bytes;                /* overflow */
            void *p = NULL;
            cudaError_t e = cudaMalloc(&p, want);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                st = gc_fail(e == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                             "cuda:%d: cannot allocate %zu bytes of %s: %s", s->dev, want, slot ? "staging" : "workspace",
                             cudaGetErrorString(e));
            } else {
                if (s->ws[slot]) {
                    if (s->live_graphs > 0) {
                        if (s->n_retired == s->cap_retired) {
                            int cap = s->cap_retired ? 2 * s->cap_retired : 8;
                            void **r = (void **)realloc(s->retired, (size_t)cap * sizeof(void *));
                            if (r) {
                                s->retired = r;
                                s->cap_retired = cap;
                            }
                        }
                        if (s->n_retired < s->cap_retired) {
                            s->retired[s->n_retired++] = s->ws[slot];
                            s->retired_bytes += s->ws_bytes[slot];
                        }
                        /* else: leak it rather than free memory a graph may use (it stays
                         * counted: the device still holds it) */
                    } else {
                        cudaFree(s->ws[slot]); /* implicit device sync: earlier users are done */
                        gc_mem_sub(&s->mem, (int64_t)s->ws_bytes[slot]);
                    }
                }
                s->ws[slot] = p;
                s->ws_bytes[slot] = want;
                gc_mem_add(&s->mem, (int64_t)want);
            }
        }
    }
    if (st == GC_OK) *out = s->ws[slot];
    pthread_mutex_unlock(&s->mu);
    return st;
}

extern "C" gc_status gc_cuda_workspace(const gc_backend *be, size_t bytes, void **out)
{
    return grow_buffer(be, 0, bytes, out);
}

extern "C" gc_status gc_cuda_staging(const gc_backend *be, size_t bytes, void **out)
{
    return grow_buffer(be, 1, bytes, out);
}

extern "C" const gc_backend *gc_cuda_backend(int device_index)
{
    for (int i = 0; i < g_ndev; i++)
        if (g_backend[i].device_index == device_index) return &g_backend[i];
    return NULL;
}

/* ------------------------------------------------------------------ pointer sizes
 * cu_alloc's pointer -> size table: open addressing with linear probing, deletion by
 * backward shift (no tombstones), grown at half full. Under tab_mu. */
static size_t tab_slot(const void *p, size_t cap)
{
    uint64_t h = (uint64_t)(uintptr_t)p * 0x9E3779B97F4A7C15ull;
    return (size_t)(h >> 20) & (cap - 1);
}

static int tab_grow(cuda_state *s)
{
    size_t cap = s->tab_cap ? 2 * s->tab_cap : 256;
    void **k = (void **)calloc(cap, sizeof(void *));
    size_t *v = (size_t *)calloc(cap, sizeof(size_t));
    if (!k || !v) {
        free(k);
        free(v);
        return 0;
    }
    for (size_t i = 0; i < s->tab_cap; i++) {
        if (!s->tab_key[i]) continue;
        size_t j = tab_slot(s->tab_key[i], cap);
        while (k[j]) j = (j + 1) & (cap - 1);
        k[j] = s->tab_key[i];
        v[j] = s->tab_size[i];
    }
    free(s->tab_key);
    free(s->tab_size);
    s->tab_key = k;
    s->tab_size = v;
    s->tab_cap = cap;
    return 1;
}

static int tab_put(cuda_state *s, void *p, size_t n)
{
    pthread_mutex_lock(&s->tab_mu);
    int ok = 1;
    if (2 * (s->tab_n + 1) > s->tab_cap) ok = tab_grow(s);
    if (ok) {
        size_t j = tab_slot(p, s->tab_cap);
        while (s->tab_key[j] && s->tab_key[j] != p) j = (j + 1) & (s->tab_cap - 1);
        if (!s->tab_key[j]) s->tab_n++;
        s->tab_key[j] = p;
        s->tab_size[j] = n;
    }
    pthread_mutex_unlock(&s->tab_mu);
    return ok;
}

/* removes p; its size, or 0 when p was not recorded */
static size_t tab_take(cuda_state *s, const void *p)
{
    size_t n = 0;
    pthread_mutex_lock(&s->tab_mu);
    if (s->tab_cap) {
        const size_t mask = s->tab_cap - 1;
        size_t j = tab_slot(p, s->tab_cap);
        while (s->tab_key[j] && s->tab_key[j] != p) j = (j + 1) & mask;
        if (s->tab_key[j]) {
            n = s->tab_size[j];
            s->tab_key[j] = NULL;
            s->tab_n--;
            /* backward shift: move later entries of the run into the hole where their
             * home slot allows it, so lookups never stop at a false gap */
            size_t hole = j;
            for (size_t i = (j + 1) & mask; s->tab_key[i]; i = (i + 1) & mask) {
                size_t home = tab_slot(s->tab_key[i], s->tab_cap);
                if (((i - home) & mask) >= ((i - hole) & mask)) {
                    s->tab_key[hole] = s->tab_key[i];
                    s->tab_size[hole] = s->tab_size[i];
                    s->tab_key[i] = NULL;
                    hole = i;
                }
            }
        }
    }
    pthread_mutex_unlock(&s->tab_mu);
    return n;
}

/* ------------------------------------------------------------------ table slots */
static gc_status cu_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    cuda_state *s = st_of(be);
    size_t n = nbytes ? nbytes : 256; /* a zero-size tensor still gets a distinct non-NULL pointer */
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) != cudaSuccess) (void)cudaGetLastError();
        if (e == cudaErrorMemoryAllocation)
            return gc_fail(GC_ERR_NOMEM, "cuda:%d: cannot allocate %zu bytes (free %zu of %zu bytes)",
                           be->device_index, nbytes, fr, tot);
        return gc_fail(GC_ERR_BACKEND, "cuda:%d: cannot allocate %zu bytes: %s", be->device_index,
                       nbytes, cudaGetErrorString(e));
    }
    if (!tab_put(s, p, n)) {
        if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();
        return gc_fail(GC_ERR_NOMEM, "cuda:%d: no host memory to record an allocation", be->device_index);
    }
    gc_mem_add(&s->mem, (int64_t)n);
    *out = p;
    return GC_OK;
}

static void cu_release(const gc_backend *be, void *ptr)
{
    if (!ptr) return;
    cuda_state *s = st_of(be);
    if (!s) return;
    size_t n = tab_take(s, ptr);
    if (set_current(s, NULL, 0) != 0) {
        /* nothing to report from a void function; the block stays counted */
    } else if (cudaFree(ptr) != cudaSuccess) {
        (void)cudaGetLastError();
    } else if (n) {
        gc_mem_sub(&s->mem, (int64_t)n);
    }
}

/* The memory_stats slot: the counter, and the driver's free / total for the device
 * (which needs the device initialised, as any first use would do). */
static gc_status cu_memory_stats(const gc_backend *be, gc_memory_stats *out)
{
    cuda_state *s = st_of(be);
    if (!s) return gc_fail(GC_ERR_BACKEND, "cuda: backend has no state");
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    gc_mem_read(&s->mem, &out->allocated_bytes, &out->peak_bytes);
    size_t fr = 0, tot = 0;
    GC_CUDA_TRY(cudaMemGetInfo(&fr, &tot));
    out->device_free_bytes = (int64_t)fr;
    out->device_total_bytes = (int64_t)tot;
    return GC_OK;
}

static void cu_reset_peak(const gc_backend *be)
{
    cuda_state *s = st_of(be);
    if (s) gc_mem_reset_peak(&s->mem);
}

static gc_status no_capture(const gc_backend *be, const char *what)
{
    if (gc_cuda_capturing(be))
        return gc_fail(GC_ERR_BACKEND, "cuda:%d: %s is not allowed while a CUDA graph is being captured",
                       be->device_index, what);
    return GC_OK;
}

/* Waits of the host for the stream in the backend's transfer and sync entry points
 * (upload, download, sync, graph error reads; embedding.cu counts its own there), for
 * _core.cuda_stream_syncs(): the tests check a replayed train_on_batch waits once. Op
 * internal error reads of standalone (uncaptured) calls -- sparse labels, embedding ids,
 * the persistent recurrence's status -- are not counted. */
static int64_t g_stream_syncs;
extern "C" void gc_cuda_count_sync(void) { __atomic_add_fetch(&g_stream_syncs, 1, __ATOMIC_RELAXED); }
extern "C" int64_t gc_cuda_stream_syncs(void) { return __atomic_load_n(&g_stream_syncs, __ATOMIC_RELAXED); }

static cudaError_t stream_sync(cudaStream_t s)
{
    gc_cuda_count_sync();
    return cudaStreamSynchronize(s);
}

#define PINNED_CHUNK ((size_t)8 << 20)
#define PINNED_MIN ((size_t)2 << 20)

/* the two staging buffers, once; on failure (no page-locked memory) uploads stay direct */
static int pinned_ready(cuda_state *cs)
{
    if (cs->pinned_state) return cs->pinned_state > 0;
    cs->pinned_state = -1;
    for (int i = 0; i < 2; i++) {
        if (cudaHostAlloc(&cs->pinned[i], PINNED_CHUNK, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&cs->pinned_done[i], cudaEventDisableTiming) != cudaSuccess) {
            (void)cudaGetLastError();
            return 0; /* what was made stays until exit: at most 16 MB */
        }
    }
    cs->pinned_state = 1;
    return 1;
}

static gc_status cu_upload(const gc_backend *be, void *dst, const void *host_src, size_t nbytes)
{
    gc_status st = gc_cuda_set_device(be);
    if (st || (st = no_capture(be, "upload"))) return st;
    if (!nbytes) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    cuda_state *cs = st_of(be);
    int staged = 0;
    if (nbytes >= PINNED_MIN) {
        pthread_mutex_lock(&cs->mu);
        staged = pinned_ready(cs); /* keeps the lock when staging */
        if (!staged) pthread_mutex_unlock(&cs->mu);
    }
    if (!staged) {
        GC_CUDA_TRY(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, s));
        GC_CUDA_TRY(stream_sync(s));
        return GC_OK;
    }
    /* chunk i: wait until buffer i % 2 is free (its copy two chunks ago is done), fill
     * it on the host, queue its DMA; the next fill overlaps this DMA. One upload at a
     * time uses the buffers (the state's lock). */
    cudaError_t e = cudaSuccess;
    for (size_t off = 0, i = 0; off < nbytes && e == cudaSuccess; off += PINNED_CHUNK, i++) {
        const size_t len = nbytes - off < PINNED_CHUNK ? nbytes - off : PINNED_CHUNK;
        const int b = (int)(i & 1);
        if (i >= 2) {
            gc_cuda_count_sync();
            e = cudaEventSynchronize(cs->pinned_done[b]);
        }
        if (e != cudaSuccess) break;
        memcpy(cs->pinned[b], (const char *)host_src + off, len);
        e = cudaMemcpyAsync((char *)dst + off, cs->pinned[b], len, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaEventRecord(cs->pinned_done[b], s);
    }
    cudaError_t e2 = stream_sync(s); /* the buffers are free again after this */
    pthread_mutex_unlock(&cs->mu);
    GC_CUDA_TRY(e);
    GC_CUDA_TRY(e2);
    return GC_OK;
}

/* host staging (gpucmp.h): page-locked memory, and a copy out of it that only queues */
static gc_status cu_host_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    *out = NULL;
    cudaError_t e = cudaHostAlloc(out, nbytes ? nbytes : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *out = NULL;
        return gc_fail(GC_ERR_NOMEM, "cuda:%d: cannot allocate %zu bytes of page-locked host memory: %s",
                       be->device_index, nbytes, cudaGetErrorString(e));
    }
    return GC_OK;
}

static void cu_host_free(const gc_backend *be, void *ptr)
{
    if (!ptr) return;
    cuda_state *s = st_of(be);
    if (s) (void)set_current(s, NULL, 0); /* nothing to report from a void function */
    if (cudaFreeHost(ptr) != cudaSuccess) (void)cudaGetLastError();
}

static gc_status cu_upload_async(const gc_backend *be, void *dst, const void *host_src, size_t nbytes)
{
    gc_status st = gc_cuda_set_device(be);
    if (st || (st = no_capture(be, "upload"))) return st;
    if (!nbytes) return GC_OK;
    GC_CUDA_TRY(cudaMemcpyAsync(dst, host_src, nbytes, cudaMemcpyHostToDevice, gc_cuda_stream(be)));
    return GC_OK;
}

static gc_status cu_download(const gc_backend *be, void *host_dst, const void *src, size_t nbytes)
{
    gc_status st = gc_cuda_set_device(be);
    if (st || (st = no_capture(be, "download"))) return st;
    if (!nbytes) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    GC_CUDA_TRY(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, s));
    GC_CUDA_TRY(stream_sync(s));
    return GC_OK;
}

static gc_status cu_copy(const gc_backend *be, void *dst, const void *src, size_t nbytes)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (!nbytes || dst == src) return GC_OK;
    GC_CUDA_TRY(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToDevice, gc_cuda_stream(be)));
    return GC_OK;
}

static gc_status cu_fill_zero(const gc_backend *be, void *dst, size_t nbytes)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (!nbytes) return GC_OK;
    GC_CUDA_TRY(cudaMemsetAsync(dst, 0, nbytes, gc_cuda_stream(be)));
    return GC_OK;
}

static gc_status cu_sync(const gc_backend *be)
{
    gc_status st = gc_cuda_set_device(be);
    if (st || (st = no_capture(be, "sync"))) return st;
    GC_CUDA_TRY(stream_sync(gc_cuda_stream(be)));
    return GC_OK;
}

static gc_status cu_capture_begin(const gc_backend *be)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (gc_cuda_capturing(be))
        return gc_fail(GC_ERR_BACKEND, "cuda:%d: a capture is already in progress", be->device_index);
    GC_CUDA_TRY(cudaStreamBeginCapture(gc_cuda_stream(be), cudaStreamCaptureModeThreadLocal));
    return GC_OK;
}

/* Ends the capture whatever happened inside it (so the stream is usable again), then
 * instantiates; a capture broken by a failed op reports that here. */
static gc_status cu_capture_end(const gc_backend *be, void **graph)
{
    if (graph) *graph = NULL;
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    cuda_state *s = st_of(be);
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(s->stream, &g);
    if (e != cudaSuccess || !g) {
        (void)cudaGetLastError();
        if (g) cudaGraphDestroy(g);
        return gc_fail(GC_ERR_BACKEND, "cuda:%d: graph capture failed: %s (an op issued a call that "
                       "cannot be captured, or failed while capturing)",
                       be->device_index, cudaGetErrorString(e != cudaSuccess ? e : cudaErrorStreamCaptureInvalidated));
    }
    cudaGraphExec_t exec = NULL;
    e = cudaGraphInstantiateWithFlags(&exec, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gc_fail(e == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                       "cuda:%d: cannot instantiate the captured graph: %s", be->device_index,
                       cudaGetErrorString(e));
    }
    pthread_mutex_lock(&s->mu);
    s->live_graphs++;
    pthread_mutex_unlock(&s->mu);
    if (graph) *graph = (void *)exec;
    else cudaGraphExecDestroy(exec);
    return GC_OK;
}

static gc_status cu_graph_launch(const gc_backend *be, void *graph)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (!graph) return gc_fail(GC_ERR_INVALID_ARG, "cuda:%d: no graph to launch", be->device_index);
    GC_CUDA_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, gc_cuda_stream(be)));
    return GC_OK;
}

static gc_status cu_graph_errors(const gc_backend *be, int read)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    return gc_cuda_embedding_graph_errors(be, read);
}

static void cu_graph_destroy(const gc_backend *be, void *graph)
{
    if (!graph) return;
    cuda_state *s = st_of(be);
    if (!s) return;
    (void)set_current(s, NULL, 0); /* nothing to report from a void function */
    if (cudaGraphExecDestroy((cudaGraphExec_t)graph) != cudaSuccess) (void)cudaGetLastError();
    pthread_mutex_lock(&s->mu);
    if (s->live_graphs > 0) s->live_graphs--;
    if (s->live_graphs == 0 && s->n_retired) {
        /* a launched graph may still be running: let it finish before freeing its memory */
        if (s->stream && cudaStreamSynchronize(s->stream) != cudaSuccess) (void)cudaGetLastError();
        for (int i = 0; i < s->n_retired; i++) cudaFree(s->retired[i]);
        gc_mem_sub(&s->mem, (int64_t)s->retired_bytes);
        s->n_retired = 0;
        s->retired_bytes = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ device_info */
extern "C" gc_status gc_cuda_device_info_get(const gc_backend *be, gc_cuda_device_info *out)
{
    cuda_state *s = st_of(be);
    if (!s || !out) return gc_fail(GC_ERR_INVALID_ARG, "device_info: not a CUDA backend");
    memset(out, 0, sizeof *out);
    if (g_sms_mode != 0) {
        gc_status st = gc_cuda_set_device(be); /* the confinement's first use: sms is granted there */
        if (st) return st;
    }
    const int d = s->dev;
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof prop);
    GC_CUDA_TRY(cudaGetDeviceProperties(&prop, d));
    snprintf(out->name, sizeof out->name, "%s", prop.name);
    out->cc_major = prop.major;
    out->cc_minor = prop.minor;
    out->total_memory_bytes = (int64_t)prop.totalGlobalMem;
    /* the clocks: attributes (CUDA 13 removed clockRate / memoryClockRate from the struct) */
    GC_CUDA_TRY(cudaDeviceGetAttribute(&out->sm_clock_khz, cudaDevAttrClockRate, d));
    GC_CUDA_TRY(cudaDeviceGetAttribute(&out->memory_clock_khz, cudaDevAttrMemoryClockRate, d));
    GC_CUDA_TRY(cudaDeviceGetAttribute(&out->memory_bus_width_bits, cudaDevAttrGlobalMemoryBusWidth, d));
    GC_CUDA_TRY(cudaDeviceGetAttribute(&out->l2_bytes, cudaDevAttrL2CacheSize, d));
    GC_CUDA_TRY(cudaDeviceGetAttribute(&out->smem_per_sm_bytes, cudaDevAttrMaxSharedMemoryPerMultiprocessor, d));
    GC_CUDA_TRY(cudaDeviceGetAttribute(&out->smem_per_block_optin_bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, d));
    GC_CUDA_TRY(cudaDeviceGetPCIBusId(out->pci_bus_id, (int)sizeof out->pci_bus_id, d));
    GC_CUDA_TRY(cudaRuntimeGetVersion(&out->runtime_version));
    GC_CUDA_TRY(cudaDriverGetVersion(&out->driver_version));
    out->sms_physical = s->sms_physical;
    out->sms = s->sms;
    out->sm_limit = g_sms_mode > 0 ? (int)g_sms_req : 0;
    return GC_OK;
}

/* ------------------------------------------------------------------ registration */

/* GPUCMP_CUDA_SMS: unset or empty -> whole device; else it must be a positive integer
 * (checked against each device at its first use, where a bad value is reported). */
static void read_sms_env(void)
{
    const char *v = getenv("GPUCMP_CUDA_SMS");
    g_sms_mode = 0;
    if (!v) return;
    while (*v == ' ' || *v == '\t') v++;
    if (!*v) return;
    snprintf(g_sms_text, sizeof g_sms_text, "%s", v);
    char *end = NULL;
    errno = 0;
    long n = strtol(v, &end, 10);
    while (end && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
    if (errno || end == v || (end && *end) || n < 1 || n > 1000000) {
        g_sms_mode = -1;
        return;
    }
    g_sms_mode = 1;
    g_sms_req = n;
}

extern "C" int gc_cuda_variant_probe(int point, int value, const char **why); /* variants.cu */

extern "C" gc_status gc_cuda_register_all(void)
{
    static int done;
    if (done) return GC_OK;
    done = 1;
    read_sms_env();
    /* the CUDA variant points are present in a CUDA build, also without a device (then
     * nothing but "auto" is available); the probe loads images, so not at env reading */
    gc_variant_register_backend("cuda", gc_cuda_variant_probe, 0);
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n <= 0) {
        (void)cudaGetLastError(); /* no driver, no device: CPU only, silently */
        return GC_OK;
    }
    if (n > GC_CUDA_MAX_DEVICES) n = GC_CUDA_MAX_DEVICES;
    for (int i = 0; i < n; i++) {
        cuda_state *s = &g_state[g_ndev];
        int major = 0, minor = 0, sms = 0, optin = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, i) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, i) != cudaSuccess ||
            cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, i) != cudaSuccess ||
            cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, i) != cudaSuccess) {
            (void)cudaGetLastError();
            continue; /* an unusable device is skipped */
        }
        memset(s, 0, sizeof *s);
        pthread_mutex_init(&s->mu, NULL);
        pthread_mutex_init(&s->tab_mu, NULL);
        s->dev = i;
        s->cc = major * 10 + minor;
        s->sms = sms; /* the granted count replaces it under GPUCMP_CUDA_SMS */
        s->sms_physical = sms;
        s->smem_optin = (size_t)optin;

        gc_backend *be = &g_backend[g_ndev];
        memset(be, 0, sizeof *be);
        be->name = "cuda";
        be->device_index = i;
        be->native_dtypes = (1u << GC_F32) | (1u << GC_F16) | (1u << GC_BF16);
        be->alloc = cu_alloc;
        be->release = cu_release;
        be->upload = cu_upload;
        be->download = cu_download;
        be->copy = cu_copy;
        be->fill_zero = cu_fill_zero;
        be->sync = cu_sync;
#define GC_X_CUDA_SLOT(E, nm, P, ni, no) be->ops[GC_OP_##E] = gc_cuda_op_##nm;
        GC_OP_LIST(GC_X_CUDA_SLOT)
#undef GC_X_CUDA_SLOT
        be->capture_begin = cu_capture_begin;
        be->optim_multi = gc_cuda_optim_multi_f32;
        be->cast_multi = gc_cuda_cast_multi;
        be->capture_end = cu_capture_end;
        be->graph_launch = cu_graph_launch;
        be->graph_destroy = cu_graph_destroy;
        be->graph_errors = cu_graph_errors;
        be->memory_stats = cu_memory_stats;
        be->reset_peak = cu_reset_peak;
        be->host_alloc = cu_host_alloc;
        be->host_free = cu_host_free;
        be->upload_async = cu_upload_async;
        be->uploads_done_on_return = 0;
        be->impl = s;
        if (gc_backend_register(be) != GC_OK) break; /* registry full */
        g_ndev++;
    }
    gc_clear_error();
    return GC_OK;
}
