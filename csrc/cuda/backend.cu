/* backend.cu -- the CUDA backend table: one gc_backend per visible device, device
 * memory, transfers, the one stream, graph capture and replay, and the shared state
 * that common.cuh exposes (workspace, scratch, error flag, device properties).
 *
 * Why it is built this way: `import gpucmp` must work on machines without a GPU or a
 * driver, and the module links cudart statically, so registration asks
 * cudaGetDeviceCount and registers nothing, silently, on any failure. Registration only
 * reads attributes; the context, the stream (non-blocking, so it never serialises with
 * the legacy default stream) and the small fixed buffers are created by the first call
 * that needs them (gc_cuda_set_device). Every op and copy goes to that one stream, so
 * a plan step is captured into a CUDA graph (thread-local capture mode: an illegal
 * call from this thread fails the capture rather than silently syncing) and replayed
 * with one launch. The growable workspace is never freed while a graph exists (a
 * graph holds its address); outgrown buffers are kept until the last graph goes.
 * Host memory is pageable, so upload and download synchronise the stream; an upload
 * of >= 2 MB (a training set, a window of one) is streamed through two page-locked
 * 8 MB buffers, the host copy into one overlapping the DMA out of the other, which
 * runs at the link's pinned rate instead of the driver's pageable path.
 */
#include "common.cuh"

#include <pthread.h>
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
    void *ws;                  /* growable workspace */
    size_t ws_bytes;
    void **retired;            /* outgrown workspaces a live graph may still use */
    int n_retired, cap_retired;
    int live_graphs;
    int32_t *err_flag;         /* 16 int32 */
    void *scratch;             /* GC_CUDA_SCRATCH_BYTES */
    void *pinned[2];           /* upload staging (page-locked), made on the first big upload */
    cudaEvent_t pinned_done[2];
    int pinned_state;          /* 0 not tried, 1 ready, -1 unavailable (direct copies) */
    pthread_mutex_t mu;
} cuda_state;

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

extern "C" gc_status gc_cuda_set_device(const gc_backend *be)
{
    cuda_state *s = st_of(be);
    if (!s) return gc_fail(GC_ERR_BACKEND, "cuda: backend has no state");
    GC_CUDA_TRY(cudaSetDevice(s->dev));
    if (s->ready) return GC_OK;
    pthread_mutex_lock(&s->mu);
    gc_status st = GC_OK;
    if (!s->ready) {
        cudaError_t e = cudaSuccess;
        if (!s->stream) e = cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking);
        if (e == cudaSuccess && !s->err_flag) e = cudaMalloc((void **)&s->err_flag, 16 * sizeof(int32_t));
        if (e == cudaSuccess && !s->scratch) e = cudaMalloc(&s->scratch, GC_CUDA_SCRATCH_BYTES);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gc_fail(e == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                         "cuda:%d: cannot initialise the device (stream and %zu bytes of scratch): %s",
                         s->dev, (size_t)GC_CUDA_SCRATCH_BYTES + 64, cudaGetErrorString(e));
        } else {
            s->ready = 1;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

extern "C" cudaStream_t gc_cuda_stream(const gc_backend *be)
{
    cuda_state *s = st_of(be);
    return s ? s->stream : (cudaStream_t)0;
}

extern "C" int gc_cuda_cc(const gc_backend *be) { return st_of(be) ? st_of(be)->cc : 0; }
extern "C" int gc_cuda_sm_count(const gc_backend *be) { return st_of(be) ? st_of(be)->sms : 0; }
extern "C" size_t gc_cuda_smem_optin(const gc_backend *be)
{
    return st_of(be) ? st_of(be)->smem_optin : 0;
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

extern "C" gc_status gc_cuda_workspace(const gc_backend *be, size_t bytes, void **out)
{
    cuda_state *s = st_of(be);
    if (!s) return gc_fail(GC_ERR_BACKEND, "cuda: backend has no state");
    if (bytes == 0) bytes = 1;
    pthread_mutex_lock(&s->mu);
    gc_status st = GC_OK;
    if (bytes > s->ws_bytes) {
        if (gc_cuda_capturing(be)) {
            st = gc_fail(GC_ERR_BACKEND,
                         "cuda:%d: an op needs %zu bytes of workspace (%zu held) while a CUDA graph is "
                         "being captured; run the step once without capture first so the workspace "
                         "is sized",
                         s->dev, bytes, s->ws_bytes);
        } else {
            size_t want = bytes + bytes / 4;               /* some headroom */
            want = (want + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
            if (want < bytes) want = bytes;                /* overflow */
            void *p = NULL;
            cudaError_t e = cudaMalloc(&p, want);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                st = gc_fail(e == cudaErrorMemoryAllocation ? GC_ERR_NOMEM : GC_ERR_BACKEND,
                             "cuda:%d: cannot allocate %zu bytes of workspace: %s", s->dev, want,
                             cudaGetErrorString(e));
            } else {
                if (s->ws) {
                    if (s->live_graphs > 0) {
                        if (s->n_retired == s->cap_retired) {
                            int cap = s->cap_retired ? 2 * s->cap_retired : 8;
                            void **r = (void **)realloc(s->retired, (size_t)cap * sizeof(void *));
                            if (r) {
                                s->retired = r;
                                s->cap_retired = cap;
                            }
                        }
                        if (s->n_retired < s->cap_retired) s->retired[s->n_retired++] = s->ws;
                        /* else: leak it rather than free memory a graph may use */
                    } else {
                        cudaFree(s->ws); /* implicit device sync: earlier users are done */
                    }
                }
                s->ws = p;
                s->ws_bytes = want;
            }
        }
    }
    if (st == GC_OK) *out = s->ws;
    pthread_mutex_unlock(&s->mu);
    return st;
}

extern "C" const gc_backend *gc_cuda_backend(int device_index)
{
    for (int i = 0; i < g_ndev; i++)
        if (g_backend[i].device_index == device_index) return &g_backend[i];
    return NULL;
}

/* ------------------------------------------------------------------ table slots */
static gc_status cu_alloc(const gc_backend *be, size_t nbytes, void **out)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
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
    *out = p;
    return GC_OK;
}

static void cu_release(const gc_backend *be, void *ptr)
{
    if (!ptr) return;
    if (cudaSetDevice(be->device_index) != cudaSuccess || cudaFree(ptr) != cudaSuccess)
        (void)cudaGetLastError(); /* nothing to report from a void function */
}

static gc_status no_capture(const gc_backend *be, const char *what)
{
    if (gc_cuda_capturing(be))
        return gc_fail(GC_ERR_BACKEND, "cuda:%d: %s is not allowed while a CUDA graph is being captured",
                       be->device_index, what);
    return GC_OK;
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
        GC_CUDA_TRY(cudaStreamSynchronize(s));
        return GC_OK;
    }
    /* chunk i: wait until buffer i % 2 is free (its copy two chunks ago is done), fill
     * it on the host, queue its DMA; the next fill overlaps this DMA. One upload at a
     * time uses the buffers (the state's lock). */
    cudaError_t e = cudaSuccess;
    for (size_t off = 0, i = 0; off < nbytes && e == cudaSuccess; off += PINNED_CHUNK, i++) {
        const size_t len = nbytes - off < PINNED_CHUNK ? nbytes - off : PINNED_CHUNK;
        const int b = (int)(i & 1);
        if (i >= 2) e = cudaEventSynchronize(cs->pinned_done[b]);
        if (e != cudaSuccess) break;
        memcpy(cs->pinned[b], (const char *)host_src + off, len);
        e = cudaMemcpyAsync((char *)dst + off, cs->pinned[b], len, cudaMemcpyHostToDevice, s);
        if (e == cudaSuccess) e = cudaEventRecord(cs->pinned_done[b], s);
    }
    cudaError_t e2 = cudaStreamSynchronize(s); /* the buffers are free again after this */
    pthread_mutex_unlock(&cs->mu);
    GC_CUDA_TRY(e);
    GC_CUDA_TRY(e2);
    return GC_OK;
}

static gc_status cu_download(const gc_backend *be, void *host_dst, const void *src, size_t nbytes)
{
    gc_status st = gc_cuda_set_device(be);
    if (st || (st = no_capture(be, "download"))) return st;
    if (!nbytes) return GC_OK;
    cudaStream_t s = gc_cuda_stream(be);
    GC_CUDA_TRY(cudaMemcpyAsync(host_dst, src, nbytes, cudaMemcpyDeviceToHost, s));
    GC_CUDA_TRY(cudaStreamSynchronize(s));
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
    GC_CUDA_TRY(cudaStreamSynchronize(gc_cuda_stream(be)));
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

static void cu_graph_destroy(const gc_backend *be, void *graph)
{
    if (!graph) return;
    cuda_state *s = st_of(be);
    if (cudaSetDevice(be->device_index) != cudaSuccess) (void)cudaGetLastError();
    if (cudaGraphExecDestroy((cudaGraphExec_t)graph) != cudaSuccess) (void)cudaGetLastError();
    pthread_mutex_lock(&s->mu);
    if (s->live_graphs > 0) s->live_graphs--;
    if (s->live_graphs == 0 && s->n_retired) {
        /* a launched graph may still be running: let it finish before freeing its memory */
        if (s->stream && cudaStreamSynchronize(s->stream) != cudaSuccess) (void)cudaGetLastError();
        for (int i = 0; i < s->n_retired; i++) cudaFree(s->retired[i]);
        s->n_retired = 0;
    }
    pthread_mutex_unlock(&s->mu);
}

/* ------------------------------------------------------------------ registration */
extern "C" gc_status gc_cuda_register_all(void)
{
    static int done;
    if (done) return GC_OK;
    done = 1;
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
        s->dev = i;
        s->cc = major * 10 + minor;
        s->sms = sms;
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
        be->capture_end = cu_capture_end;
        be->graph_launch = cu_graph_launch;
        be->graph_destroy = cu_graph_destroy;
        be->impl = s;
        if (gc_backend_register(be) != GC_OK) break; /* registry full */
        g_ndev++;
    }
    gc_clear_error();
    return GC_OK;
}
