/* bench.c -- gpucmp._core.bench_gemm / bench_conv / bench_rnn / bench_copy: time one op or one copy on
 * backend-resident data.
 *
 * What it provides: module functions (added by gpucmp_add_bench, bench.h) that
 * return the median seconds of one GEMM or one convolution pass on a backend ('cpu',
 * 'cuda:N'), with the operands already in that backend's memory -- what run_op cannot
 * measure, since it stages NumPy arrays through the host on every call.
 *
 * How: operands are allocated with the backend's alloc, filled with fresh uniform
 * random values in [-1, 1) (drawn on the host in float32 with the counter-based
 * gc_uniform01, narrowed with gc_f32_to_f16/bf16, uploaded, a big operand's first 4M
 * values repeated on the device: never zeros, which can run faster than real data), the call is validated once by core (gc_op_validate), the first
 * warm-up goes through gc_op_run (every core check, incl. "vendor needs a GPU"), then
 * each timed sample is `inner` calls of the backend's op slot between two be->sync, read
 * with a monotonic host clock; the result is the median over `repeats` samples divided
 * by `inner`. Storage dtypes a backend does not take natively (f16/bf16 on the CPU) run
 * through gc_op_run every time, so their conversion is part of what is timed, as it is
 * for users. dtype 'float32' is exact float32 (allow_tf32 off for the call), 'tfloat32'
 * lets GPU backends use TF32 (on for the call); the setting is restored afterwards.
 * Everything between argument parsing and the result runs with the GIL released and
 * has one cleanup path; a status becomes the same exception as in module.c.
 * bench_copy times the backend's device-to-device copy the same way (the harness's
 * bandwidth workload); all share the sampling loop (bench_sample). bench_rnn times one
 * recurrent op (rnn_fwd / rnn_bwd) at a cell's shape the same way as the GEMM. graph=True (GEMM,
 * conv) captures one sample's `inner` calls into a graph after the warm-up and times its
 * replays instead: a captured plan's view of an op (no host launch cost per call). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpucmp.h"
#include "bench.h"
#ifdef GPUCMP_WITH_CUDA
#include "gpucmp_cuda.h"
#endif

/* ------------------------------------------------------------------ argument helpers */

/* A string argument that must be one of names[0..n): TypeError / ValueError otherwise. */
static int bench_choice(PyObject *v, const char *fn, const char *what, const char *const *names, int n,
                        int *out)
{
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s: %s must be a string, got %R", fn, what, v);
        return -1;
    }
    const char *s = PyUnicode_AsUTF8(v);
    if (!s) return -1;
    for (int i = 0; i < n; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    char list[256] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, i ? ", '" : "'", sizeof list - strlen(list) - 1);
        strncat(list, names[i], sizeof list - strlen(list) - 1);
        strncat(list, "'", sizeof list - strlen(list) - 1);
    }
    PyErr_Format(PyExc_ValueError, "%s: unknown %s '%s' (expected one of %s)", fn, what, s, list);
    return -1;
}

#define BENCH_MAX_DIM ((long long)INT32_MAX)

static int bench_dim(long long v, const char *fn, const char *what)
{
    if (v < 1 || v > BENCH_MAX_DIM) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be in [1, %lld], got %lld", fn, what, BENCH_MAX_DIM, v);
        return -1;
    }
    return 0;
}

/* An int or a pair of ints, each >= 1 (strides, dilation). */
static int bench_pair(PyObject *v, const char *fn, const char *what, int *a, int *b)
{
    if (!v || v == Py_None) return 0; /* keep the defaults */
    long x = 0, y = 0;
    if (PyLong_Check(v)) {
        x = y = PyLong_AsLong(v);
    } else if (PyTuple_Check(v) || PyList_Check(v)) {
        if (PySequence_Size(v) != 2) {
            PyErr_Format(PyExc_ValueError, "%s: %s must be an int or a pair of ints, got %R", fn, what, v);
            return -1;
        }
        PyObject *i0 = PySequence_GetItem(v, 0), *i1 = PySequence_GetItem(v, 1);
        int ok = i0 && i1 && PyLong_Check(i0) && PyLong_Check(i1);
        if (ok) {
            x = PyLong_AsLong(i0);
            y = PyLong_AsLong(i1);
        }
        Py_XDECREF(i0);
        Py_XDECREF(i1);
        if (!ok) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_TypeError, "%s: %s must hold ints, got %R", fn, what, v);
            return -1;
        }
    } else {
        PyErr_Format(PyExc_TypeError, "%s: %s must be an int or a pair of ints, got %R", fn, what, v);
        return -1;
    }
    if (PyErr_Occurred()) return -1;
    if (x < 1 || y < 1 || x > 65535 || y > 65535) {
        PyErr_Format(PyExc_ValueError, "%s: %s must be >= 1, got %R", fn, what, v);
        return -1;
    }
    *a = (int)x;
    *b = (int)y;
    return 0;
}

static int bench_counts(const char *fn, int repeats, int warmup, int inner)
{
    if (repeats < 1 || repeats > 100000) {
        PyErr_Format(PyExc_ValueError, "%s: repeats must be in [1, 100000], got %d", fn, repeats);
        return -1;
    }
    if (warmup < 0 || warmup > 100000) {
        PyErr_Format(PyExc_ValueError, "%s: warmup must be in [0, 100000], got %d", fn, warmup);
        return -1;
    }
    if (inner < 1 || inner > 100000) {
        PyErr_Format(PyExc_ValueError, "%s: inner must be in [1, 100000], got %d", fn, inner);
        return -1;
    }
    return 0;
}

const gc_backend *bench_backend(PyObject *name, const char *fn)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "%s: device must be a string such as 'cpu' or 'cuda:0', got %R", fn, name);
        return NULL;
    }
    const char *s = PyUnicode_AsUTF8(name);
    if (!s) return NULL;
    const gc_backend *be = NULL;
    gc_status st = gc_backend_get(s, &be);
    if (st) return (const gc_backend *)gc_py_raise(st);
    return be;
}

/* 'float32' (exact), 'tfloat32', 'float16', 'bfloat16' -> storage dtype and tf32 switch */
static const char *const bench_dtype_names[4] = {"float32", "tfloat32", "float16", "bfloat16"};
static const gc_dtype bench_dtype_storage[4] = {GC_F32, GC_F32, GC_F16, GC_BF16};
static const int bench_dtype_tf32[4] = {0, 1, -1, -1}; /* -1: leave the setting alone */
static const char *const bench_impl_names[2] = {"own", "vendor"};
static const char *const bench_pad_names[2] = {"valid", "same"};

/* ------------------------------------------------------------------ the timed job */

#define BENCH_MAX_GRIDS 64    /* SM counts one grids_for call may ask for */
#define BENCH_MAX_LAUNCHES 16 /* launches kept per call (an op makes a few) */

typedef struct {
    gc_op op;
    int nin, nout;
    gc_tensor in[GC_MAX_OP_IN], out[GC_MAX_OP_OUT]; /* shapes set; data filled by bench_run */
    int in_used[GC_MAX_OP_IN], out_used[GC_MAX_OP_OUT];
    union {
        gc_gemm_params gemm;
        gc_conv2d_params conv;
        gc_rnn_params rnn;
    } params;
    int tf32; /* -1 leave, 0 off, 1 on */
    int repeats, warmup, inner;
    int graph; /* time replays of the `inner` calls captured into one graph */
    int plan_sms; /* > 0: the CUDA kernels size their grids for this many SMs while timed */
    /* grids_for: after timing, one more call per SM count with the launch log open
     * (grids sized for that count), its launches kept per count */
    int ngrids;
    int grid_sms[BENCH_MAX_GRIDS];
    int grid_n[BENCH_MAX_GRIDS];
    struct bench_launch {
        unsigned blocks, threads;
        int blocks_per_sm;
        long long smem;
        char name[128];
    } (*grid_rec)[BENCH_MAX_LAUNCHES]; /* ngrids rows (PyMem; bench_finish frees it) */
} bench_job;

static double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static uint64_t bench_seed(void)
{
    static uint64_t counter = 0;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    counter++;
    return ((uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec) ^ (counter * 0x9E3779B97F4A7C15ull);
}

/* Allocates t's backend memory and fills it: uniform [-1, 1) when random (a block of
 * BENCH_FILL_BLOCK fresh values, repeated: no kernel's speed depends on values repeating
 * 16 MB apart), else zeros. */
#define BENCH_FILL_BLOCK ((int64_t)1 << 22)
static gc_status bench_make(const gc_backend *be, gc_tensor *t, int random, void **dev)
{
    int64_t numel = gc_tensor_numel(t);
    size_t es = gc_dtype_size(t->dtype);
    if (numel < 1 || (uint64_t)numel > ((uint64_t)1 << 40) / es)
        return gc_fail(GC_ERR_INVALID_ARG, "bench: operand of %lld elements is out of range", (long long)numel);
    size_t nbytes = (size_t)numel * es;
    gc_status s = be->alloc(be, nbytes, dev);
    if (s) return s;
    t->data = *dev;
    if (!random) return be->fill_zero(be, *dev, nbytes);
    /* draw at most BENCH_FILL_BLOCK values on the host and repeat them on the device by
     * doubling copies: a big operand's host draw and upload cost more than its timing */
    int64_t drawn = numel < BENCH_FILL_BLOCK ? numel : BENCH_FILL_BLOCK;
    float *host = (float *)malloc((size_t)drawn * sizeof(float));
    uint16_t *half = NULL;
    if (!host) return gc_fail(GC_ERR_NOMEM, "bench: no host memory for %lld values", (long long)numel);
    uint64_t seed = bench_seed();
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < drawn; i++) host[i] = 2.0f * gc_uniform01(seed, (uint64_t)i) - 1.0f;
    const void *src = host;
    if (t->dtype == GC_F16 || t->dtype == GC_BF16) {
        half = (uint16_t *)malloc((size_t)drawn * sizeof(uint16_t));
        if (!half) {
            free(host);
            return gc_fail(GC_ERR_NOMEM, "bench: no host memory for %lld values", (long long)drawn);
        }
        if (t->dtype == GC_F16) gc_f32_to_f16(host, half, (size_t)drawn);
        else gc_f32_to_bf16(host, half, (size_t)drawn);
        src = half;
    }
    size_t done = (size_t)drawn * es;
    s = be->upload(be, *dev, src, done);
    free(half);
    free(host);
    while (s == GC_OK && done < nbytes) {
        size_t n = done < nbytes - done ? done : nbytes - done;
        s = be->copy(be, (char *)*dev + done, *dev, n);
        done += n;
    }
    return s;
}

static int bench_is_float(gc_dtype d) { return d == GC_F32 || d == GC_F16 || d == GC_BF16; }

/* The timing both jobs share: `warmup` steps and a sync, then `repeats` samples of
 * `inner` steps between two be->sync on the monotonic clock; *median = the median
 * sample / inner. step(ctx) is one timed call; its first failure ends the run. */
typedef gc_status (*bench_step_fn)(const gc_backend *be, void *ctx);

static gc_status bench_sample(const gc_backend *be, bench_step_fn step, void *ctx, int warmup, int repeats,
                              int inner, int graph, double *median)
{
    gc_status s = GC_OK;
    void *g = NULL;
    if (graph && !(be->capture_begin && be->capture_end && be->graph_launch && be->graph_destroy))
        return gc_fail(GC_ERR_INVALID_ARG, "bench: graph=True needs a backend with graph capture ('%s' has none)",
                       be->name);
    for (int w = 0; w < warmup && s == GC_OK; w++) s = step(be, ctx);
    if (s == GC_OK) s = be->sync(be);
    if (s) return s;
    if (graph) { /* the `inner` calls of one sample, captured once (after the warm-up grew any workspace) */
        s = be->capture_begin(be);
        if (s) return s;
        for (int i = 0; i < inner && s == GC_OK; i++) s = step(be, ctx);
        gc_status e = be->capture_end(be, &g);
        if (s == GC_OK) s = e;
        if (s) {
            if (g) be->graph_destroy(be, g);
            return s;
        }
        s = be->graph_launch(be, g); /* the first replay uploads the graph: not timed */
        if (s == GC_OK) s = be->sync(be);
        if (s) {
            be->graph_destroy(be, g);
            return s;
        }
    }
    double *times = (double *)malloc((size_t)repeats * sizeof(double));
    if (!times) {
        if (g) be->graph_destroy(be, g);
        return gc_fail(GC_ERR_NOMEM, "bench: no host memory");
    }
    for (int r = 0; r < repeats && s == GC_OK; r++) {
        double t0 = bench_now();
        if (g) s = be->graph_launch(be, g);
        for (int i = 0; !g && i < inner && s == GC_OK; i++) s = step(be, ctx);
        if (s == GC_OK) s = be->sync(be);
        double t1 = bench_now();
        times[r] = (t1 - t0) / (double)inner;
    }
    if (g) be->graph_destroy(be, g);
    if (s == GC_OK) {
        qsort(times, (size_t)repeats, sizeof(double), bench_cmp);
        *median = repeats % 2 ? times[repeats / 2] : 0.5 * (times[repeats / 2 - 1] + times[repeats / 2]);
    }
    free(times);
    return s;
}

/* one op call: the backend's slot when it takes the dtypes natively, else through core */
typedef struct {
    gc_op_fn fn;
    int direct;
    gc_op_call *call;
} bench_op_ctx;

static gc_status bench_op_step(const gc_backend *be, void *ctx)
{
    bench_op_ctx *c = (bench_op_ctx *)ctx;
    return c->direct ? c->fn(be, c->call) : gc_op_run(be, c->call);
}

/* One call per SM count of j->grid_sms with the launch log open (CUDA backends only;
 * the Python layer checked that), keeping each call's launches. */
static gc_status bench_grids(const gc_backend *be, bench_job *j, bench_op_ctx *ctx)
{
#ifdef GPUCMP_WITH_CUDA
    gc_cuda_launch recs[BENCH_MAX_LAUNCHES];
    for (int g = 0; g < j->ngrids; g++) {
        gc_cuda_launch_log_begin(j->grid_sms[g]);
        gc_status s = bench_op_step(be, ctx);
        if (s == GC_OK) s = be->sync(be);
        const int seen = gc_cuda_launch_log_end(recs, BENCH_MAX_LAUNCHES);
        if (s) return s;
        if (seen > BENCH_MAX_LAUNCHES)
            return gc_fail(GC_ERR_UNSUPPORTED, "bench: grids_for: one call made %d kernel launches, more than %d",
                           seen, BENCH_MAX_LAUNCHES);
        j->grid_n[g] = seen;
        for (int i = 0; i < seen; i++) {
            struct bench_launch *r = &j->grid_rec[g][i];
            r->blocks = recs[i].grid[0] * recs[i].grid[1] * recs[i].grid[2];
            r->threads = recs[i].block[0] * recs[i].block[1] * recs[i].block[2];
            r->blocks_per_sm = recs[i].blocks_per_sm;
            r->smem = (long long)recs[i].smem_bytes;
            memcpy(r->name, recs[i].name, sizeof r->name);
        }
    }
    return GC_OK;
#else
    (void)ctx;
    (void)j;
    return gc_fail(GC_ERR_INVALID_ARG, "bench: grids_for needs a CUDA backend ('%s' launches no kernels)", be->name);
#endif
}

/* Runs the job; GIL released by the caller. */
static gc_status bench_run(const gc_backend *be, bench_job *j, double *median)
{
    void *dev_in[GC_MAX_OP_IN] = {0}, *dev_out[GC_MAX_OP_OUT] = {0};
    int old_tf32 = gc_get_allow_tf32();
    int direct = 0;
    gc_op_fn fn = be->ops[j->op];
    gc_status s = GC_OK;
    gc_op_call call;
    memset(&call, 0, sizeof call);
    call.op = j->op;
    call.params = &j->params;
    gc_clear_error();

    for (int k = 0; k < j->nin && s == GC_OK; k++) {
        if (j->in_used[k]) s = bench_make(be, &j->in[k], 1, &dev_in[k]);
        call.in[k] = &j->in[k];
    }
    for (int k = 0; k < j->nout && s == GC_OK; k++) {
        if (j->out_used[k]) s = bench_make(be, &j->out[k], 0, &dev_out[k]);
        call.out[k] = &j->out[k];
    }
    if (s) goto done;
    s = gc_op_validate(&call);
    if (s) goto done;

    /* direct slot calls when the backend takes every operand's dtype natively */
    direct = fn != NULL;
    for (int k = 0; k < j->nin; k++)
        if (j->in_used[k] && bench_is_float(j->in[k].dtype) && !(be->native_dtypes & (1u << j->in[k].dtype)))
            direct = 0;
    for (int k = 0; k < j->nout; k++)
        if (j->out_used[k] && bench_is_float(j->out[k].dtype) && !(be->native_dtypes & (1u << j->out[k].dtype)))
            direct = 0;

    if (j->tf32 >= 0) gc_set_allow_tf32(j->tf32);
#ifdef GPUCMP_WITH_CUDA
    if (j->plan_sms > 0) gc_cuda_set_plan_sms(j->plan_sms);
#endif
    /* the first call goes through gc_op_run: every core check (vendor on a host backend,
     * a missing slot) is made there and reported as such */
    s = gc_op_run(be, &call);
    if (s == GC_OK) {
        bench_op_ctx ctx = {fn, direct, &call};
        s = bench_sample(be, bench_op_step, &ctx, j->warmup > 1 ? j->warmup - 1 : 0, j->repeats, j->inner, j->graph,
                         median);
        if (s == GC_OK && j->ngrids) s = bench_grids(be, j, &ctx);
    }

done:
    gc_set_allow_tf32(old_tf32);
#ifdef GPUCMP_WITH_CUDA
    if (j->plan_sms > 0) gc_cuda_set_plan_sms(0);
#endif
    /* (success: the stream was drained by the last sync; error: release is ordered after
     * whatever is in flight, and a sync here could overwrite the first error's message) */
    for (int k = 0; k < GC_MAX_OP_IN; k++)
        if (dev_in[k]) be->release(be, dev_in[k]);
    for (int k = 0; k < GC_MAX_OP_OUT; k++)
        if (dev_out[k]) be->release(be, dev_out[k]);
    return s;
}

static PyObject *bench_finish(const gc_backend *be, bench_job *j)
{
    double median = 0.0;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = bench_run(be, j, &median);
    Py_END_ALLOW_THREADS
    if (s || !j->ngrids) {
        PyMem_Free(j->grid_rec);
        j->grid_rec = NULL;
        return s ? gc_py_raise(s) : PyFloat_FromDouble(median);
    }
    PyObject *grids = PyDict_New(), *out = NULL;
    for (int g = 0; grids && g < j->ngrids; g++) {
        PyObject *lst = PyList_New(0);
        for (int i = 0; lst && i < j->grid_n[g]; i++) {
            const struct bench_launch *r = &j->grid_rec[g][i];
            PyObject *d = Py_BuildValue("{s:s,s:I,s:I,s:i,s:L}", "name", r->name, "blocks", r->blocks, "threads",
                                        r->threads, "blocks_per_sm", r->blocks_per_sm, "smem_bytes", r->smem);
            if (!d || PyList_Append(lst, d) < 0) Py_CLEAR(lst);
            Py_XDECREF(d);
        }
        PyObject *key = PyLong_FromLong(j->grid_sms[g]);
        if (!lst || !key || PyDict_SetItem(grids, key, lst) < 0) Py_CLEAR(grids);
        Py_XDECREF(key);
        Py_XDECREF(lst);
    }
    if (grids) out = Py_BuildValue("{s:d,s:O}", "seconds", median, "grids", grids);
    Py_XDECREF(grids);
    PyMem_Free(j->grid_rec);
    j->grid_rec = NULL;
    return out;
}

/* grids_for: None, or a sequence of SM counts (each >= 1) -> j->grid_sms; -1 with an
 * exception when it is not, or when the backend cannot log launches. */
static int bench_grids_arg(PyObject *v, const char *fn, const gc_backend *be, bench_job *j)
{
    if (!v || v == Py_None) return 0;
    if (PyUnicode_Check(v) || PyBytes_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s: grids_for must be a sequence of SM counts, got %R", fn, v);
        return -1;
    }
    PyObject *seq = PySequence_Fast(v, "grids_for must be a sequence of SM counts");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: grids_for must be a sequence of SM counts, got %R", fn, v);
        return -1;
    }
    const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > BENCH_MAX_GRIDS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: grids_for must hold 1 to %d SM counts, got %zd", fn, BENCH_MAX_GRIDS, n);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
        if ((x == -1 && PyErr_Occurred()) || x < 1 || x > 100000) {
            PyErr_Clear();
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s: grids_for[%zd] must be an SM count in [1, 100000]", fn, i);
            return -1;
        }
        j->grid_sms[i] = (int)x;
    }
    Py_DECREF(seq);
#ifdef GPUCMP_WITH_CUDA
    if (strcmp(be->name, "cuda") == 0) {
        if (gc_cuda_launch_log_supported()) {
            j->grid_rec = PyMem_Calloc((size_t)n, sizeof *j->grid_rec);
            if (!j->grid_rec) {
                PyErr_NoMemory();
                return -1;
            }
            j->ngrids = (int)n;
            return 0;
        }
        PyErr_Format(PyExc_NotImplementedError, "%s: grids_for: this build does not route kernel launches through "
                     "the launch log (it needs setup.py's link wrap)", fn);
        return -1;
    }
#endif
    PyErr_Format(PyExc_ValueError, "%s: grids_for needs a CUDA backend ('%s' launches no kernels)", fn, be->name);
    return -1;
}

/* plan_sms: 0 (the device's own), or an SM count the CUDA kernels size grids for */
static int bench_plan_sms_arg(int v, const char *fn, const gc_backend *be, bench_job *j)
{
    if (v == 0) return 0;
    if (v < 0 || v > 100000) {
        PyErr_Format(PyExc_ValueError, "%s: plan_sms must be in [1, 100000] (or 0: the device's own), got %d", fn, v);
        return -1;
    }
    if (strcmp(be->name, "cuda") != 0) {
        PyErr_Format(PyExc_ValueError, "%s: plan_sms needs a CUDA backend ('%s' has no SMs)", fn, be->name);
        return -1;
    }
    j->plan_sms = v;
    return 0;
}

/* ------------------------------------------------------------------ bench_gemm */

static PyObject *py_bench_gemm(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"device", "m", "n", "k", "dtype", "impl", "repeats", "trans_a", "trans_b",
                             "warmup", "inner", "graph", "grids_for", "plan_sms", NULL};
    PyObject *device, *dtype_o, *impl_o = NULL, *grids_o = NULL;
    long long m, n, k;
    int repeats = 10, trans_a = 0, trans_b = 0, warmup = 3, inner = 1, graph = 0, plan_sms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLLLO|OippiipOi:bench_gemm", kwlist, &device, &m, &n, &k, &dtype_o,
                                     &impl_o, &repeats, &trans_a, &trans_b, &warmup, &inner, &graph, &grids_o,
                                     &plan_sms))
        return NULL;
    const char *fn = "bench_gemm";
    int dt, impl = 0;
    if (bench_dim(m, fn, "m") || bench_dim(n, fn, "n") || bench_dim(k, fn, "k") ||
        bench_choice(dtype_o, fn, "dtype", bench_dtype_names, 4, &dt) ||
        (impl_o && bench_choice(impl_o, fn, "impl", bench_impl_names, 2, &impl)) ||
        bench_counts(fn, repeats, warmup, inner))
        return NULL;
    const gc_backend *be = bench_backend(device, fn);
    if (!be) return NULL;

    bench_job j;
    memset(&j, 0, sizeof j);
    j.op = GC_OP_GEMM;
    j.nin = 3;
    j.nout = 1;
    gc_dtype st = bench_dtype_storage[dt];
    int64_t sa[2] = {trans_a ? k : m, trans_a ? m : k};
    int64_t sb[2] = {trans_b ? n : k, trans_b ? k : n};
    int64_t sc[2] = {m, n};
    int64_t sbias[1] = {n};
    j.in[0] = gc_tensor_make(NULL, st, 2, sa);
    j.in[1] = gc_tensor_make(NULL, st, 2, sb);
    j.in[2] = gc_tensor_make(NULL, st, 1, sbias); /* no bias: data stays NULL */
    j.out[0] = gc_tensor_make(NULL, st, 2, sc);
    j.in_used[0] = j.in_used[1] = 1;
    j.out_used[0] = 1;
    j.params.gemm.trans_a = trans_a;
    j.params.gemm.trans_b = trans_b;
    j.params.gemm.alpha = 1.0f;
    j.params.gemm.beta = 0.0f;
    j.params.gemm.act = GC_ACT_LINEAR;
    j.params.gemm.impl = (gc_impl)impl;
    j.tf32 = bench_dtype_tf32[dt];
    j.repeats = repeats;
    j.warmup = warmup;
    j.inner = inner;
    j.graph = graph;
    if (bench_plan_sms_arg(plan_sms, fn, be, &j) || bench_grids_arg(grids_o, fn, be, &j)) return NULL;
    return bench_finish(be, &j);
}

/* ------------------------------------------------------------------ bench_conv */

static PyObject *py_bench_conv(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"device", "n", "h", "w", "c", "f", "kh", "kw", "strides", "padding", "dtype", "impl",
                             "which", "repeats", "warmup", "dilation", "inner", "graph", "grids_for", "plan_sms",
                             "bias", NULL};
    PyObject *device, *grids_o = NULL, *strides_o = NULL, *pad_o = NULL, *dtype_o = NULL, *impl_o = NULL, *which_o = NULL,
             *dil_o = NULL;
    long long N, H, W, C, F, KH, KW;
    int repeats = 10, warmup = 3, inner = 1, graph = 0, plan_sms = 0, with_bias = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLLLLLLL|OOOOOiiOipOip:bench_conv", kwlist, &device, &N, &H, &W, &C,
                                     &F, &KH, &KW, &strides_o, &pad_o, &dtype_o, &impl_o, &which_o, &repeats, &warmup,
                                     &dil_o, &inner, &graph, &grids_o, &plan_sms, &with_bias))
        return NULL;
    const char *fn = "bench_conv";
    static const char *const which_names[3] = {"fwd", "bwd_data", "bwd_filter"};
    int sh = 1, sw = 1, dh = 1, dw = 1, pad = 0, dt = 2 /* float16 */, impl = 0, which = 0;
    if (bench_dim(N, fn, "n") || bench_dim(H, fn, "h") || bench_dim(W, fn, "w") || bench_dim(C, fn, "c") ||
        bench_dim(F, fn, "f") || bench_dim(KH, fn, "kh") || bench_dim(KW, fn, "kw") ||
        bench_pair(strides_o, fn, "strides", &sh, &sw) || bench_pair(dil_o, fn, "dilation", &dh, &dw) ||
        (pad_o && bench_choice(pad_o, fn, "padding", bench_pad_names, 2, &pad)) ||
        (dtype_o && bench_choice(dtype_o, fn, "dtype", bench_dtype_names, 4, &dt)) ||
        (impl_o && bench_choice(impl_o, fn, "impl", bench_impl_names, 2, &impl)) ||
        (which_o && bench_choice(which_o, fn, "which", which_names, 3, &which)) ||
        bench_counts(fn, repeats, warmup, inner))
        return NULL;
    const gc_backend *be = bench_backend(device, fn);
    if (!be) return NULL;

    bench_job j;
    memset(&j, 0, sizeof j);
    gc_conv2d_params *p = &j.params.conv;
    p->stride_h = sh;
    p->stride_w = sw;
    p->dil_h = dh;
    p->dil_w = dw;
    p->padding = (gc_padding)pad;
    p->act = GC_ACT_LINEAR;
    p->impl = (gc_impl)impl;
    gc_conv2d_geom g;
    gc_status s = gc_conv2d_geometry(N, H, W, C, KH, KW, F, p, &g);
    if (s) return gc_py_raise(s);

    gc_dtype st = bench_dtype_storage[dt];
    int64_t sx[4] = {N, H, W, C}, swt[4] = {KH, KW, C, F}, sy[4] = {N, g.OH, g.OW, F}, sbias[1] = {F};
    gc_tensor x = gc_tensor_make(NULL, st, 4, sx), wt = gc_tensor_make(NULL, st, 4, swt),
              y = gc_tensor_make(NULL, st, 4, sy), bias = gc_tensor_make(NULL, st, 1, sbias);
    switch (which) {
    case 0: /* y = conv(x, w) (+ bias) */
        j.op = GC_OP_CONV2D_FWD;
        j.nin = 3;
        j.nout = 1;
        j.in[0] = x;
        j.in[1] = wt;
        j.in[2] = bias;
        j.out[0] = y;
        j.in_used[0] = j.in_used[1] = 1;
        j.in_used[2] = with_bias;
        j.out_used[0] = 1;
        break;
    case 1: /* dx = conv_bwd_data(dy, w) */
        j.op = GC_OP_CONV2D_BWD_DATA;
        j.nin = 2;
        j.nout = 1;
        j.in[0] = y;
        j.in[1] = wt;
        j.out[0] = x;
        j.in_used[0] = j.in_used[1] = 1;
        j.out_used[0] = 1;
        break;
    default: /* dw = conv_bwd_filter(x, dy) (and db: cuDNN's filter pass has none) */
        j.op = GC_OP_CONV2D_BWD_FILTER;
        j.nin = 2;
        j.nout = 2;
        j.in[0] = x;
        j.in[1] = y;
        j.out[0] = wt;
        j.out[1] = bias;
        j.in_used[0] = j.in_used[1] = 1;
        j.out_used[0] = 1;
        j.out_used[1] = with_bias;
        break;
    }
    j.tf32 = bench_dtype_tf32[dt];
    j.repeats = repeats;
    j.warmup = warmup;
    j.inner = inner;
    j.graph = graph;
    if (bench_plan_sms_arg(plan_sms, fn, be, &j) || bench_grids_arg(grids_o, fn, be, &j)) return NULL;
    return bench_finish(be, &j);
}

/* ------------------------------------------------------------------ bench_rnn
 * One rnn_fwd (training: y (B, u) and the save blocks) or rnn_bwd (from dy (B, u) and a
 * random save; GRU reset_after also writes dm) of a cell at (B, T, u), no mask, no
 * dropout, no initial states: the calls a plan's recurrent layer makes. The CUDA
 * recurrence picks its own variant (cuda.rnn where the build has it). */

static PyObject *py_bench_rnn(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"device", "cell", "batch", "steps", "units", "dtype", "which", "repeats", "warmup",
                             "inner", "graph", NULL};
    PyObject *device, *cell_o, *dtype_o = NULL, *which_o = NULL;
    long long B, T, u;
    int repeats = 10, warmup = 3, inner = 1, graph = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOLLL|OOiiip:bench_rnn", kwlist, &device, &cell_o, &B, &T, &u,
                                     &dtype_o, &which_o, &repeats, &warmup, &inner, &graph))
        return NULL;
    const char *fn = "bench_rnn";
    static const char *const cell_names[4] = {"simple", "lstm", "gru", "gru_reset_before"};
    static const char *const which_names[2] = {"fwd", "bwd"};
    int cell = 0, dt = 0, which = 0;
    if (bench_choice(cell_o, fn, "cell", cell_names, 4, &cell) || bench_dim(B, fn, "batch") ||
        bench_dim(T, fn, "steps") || bench_dim(u, fn, "units") ||
        (dtype_o && bench_choice(dtype_o, fn, "dtype", bench_dtype_names, 4, &dt)) ||
        (which_o && bench_choice(which_o, fn, "which", which_names, 2, &which)) ||
        bench_counts(fn, repeats, warmup, inner))
        return NULL;
    const gc_backend *be = bench_backend(device, fn);
    if (!be) return NULL;

    bench_job j;
    memset(&j, 0, sizeof j);
    gc_rnn_params *p = &j.params.rnn;
    p->cell = (gc_rnn_cell)cell;
    p->act = GC_RNN_TANH;
    p->recurrent_act = GC_RNN_SIGMOID;
    const int64_t G = gc_rnn_gates(p->cell), S = gc_rnn_save_blocks(p->cell);
    gc_dtype st = bench_dtype_storage[dt];
    int64_t sxw[3] = {B, T, G * u}, sU[2] = {u, G * u}, sh[2] = {B, u}, ssave[4] = {S, B, T, u};
    int64_t sdm[3] = {B, T, 3 * u};
    j.op = which ? GC_OP_RNN_BWD : GC_OP_RNN_FWD;
    j.nin = 7;
    j.nout = 4;
    for (int k = 0; k < 7; k++) j.in[k] = gc_tensor_make(NULL, st, 2, sh); /* unused slots: data NULL */
    for (int k = 0; k < 4; k++) j.out[k] = gc_tensor_make(NULL, st, 2, sh);
    if (!which) { /* in xw, U; out y, save */
        j.in[0] = gc_tensor_make(NULL, st, 3, sxw);
        j.in[1] = gc_tensor_make(NULL, st, 2, sU);
        j.in_used[0] = j.in_used[1] = 1;
        j.out[1] = gc_tensor_make(NULL, st, 4, ssave);
        j.out_used[0] = j.out_used[1] = 1;
    } else { /* in dy, U, save; out dxw (and dm for GRU reset_after) */
        j.in[3] = gc_tensor_make(NULL, st, 2, sU);
        j.in[4] = gc_tensor_make(NULL, st, 4, ssave);
        j.in_used[0] = j.in_used[3] = j.in_used[4] = 1;
        j.out[0] = gc_tensor_make(NULL, st, 3, sxw);
        j.out_used[0] = 1;
        if (p->cell == GC_RNN_GRU) {
            j.out[1] = gc_tensor_make(NULL, st, 3, sdm);
            j.out_used[1] = 1;
        }
    }
    j.tf32 = 0; /* the recurrence is float32 FFMA whatever the setting */
    j.repeats = repeats;
    j.warmup = warmup;
    j.inner = inner;
    j.graph = graph;
    return bench_finish(be, &j);
}

/* ------------------------------------------------------------------ bench_copy
 * One device-to-device copy through be->copy: source and destination allocated on the
 * backend, the source filled once with random values (bench_make), then bench_sample. */

typedef struct {
    void *dst;
    const void *src;
    size_t nbytes;
} bench_copy_ctx;

static gc_status bench_copy_step(const gc_backend *be, void *ctx)
{
    bench_copy_ctx *c = (bench_copy_ctx *)ctx;
    return be->copy(be, c->dst, c->src, c->nbytes);
}

/* GIL released by the caller */
static gc_status bench_copy_run(const gc_backend *be, size_t nbytes, int warmup, int repeats, int inner,
                                double *median)
{
    void *dst = NULL, *src = NULL;
    gc_clear_error();
    gc_status s = be->alloc(be, nbytes, &dst); /* the destination first: a size too large fails here */
    if (s == GC_OK) s = be->fill_zero(be, dst, nbytes);
    if (s == GC_OK) {
        int64_t n4 = (int64_t)((nbytes + 3) / 4); /* float32 values covering nbytes */
        gc_tensor t = gc_tensor_make(NULL, GC_F32, 1, &n4);
        s = bench_make(be, &t, 1, &src);
    }
    if (s == GC_OK) {
        bench_copy_ctx ctx = {dst, src, nbytes};
        s = bench_sample(be, bench_copy_step, &ctx, warmup, repeats, inner, 0, median);
    }
    if (src) be->release(be, src);
    if (dst) be->release(be, dst);
    return s;
}

#define BENCH_COPY_TARGET_BYTES ((long long)256 << 20) /* inner=None: copies per sample >= this */

static PyObject *py_bench_copy(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"device", "nbytes", "repeats", "inner", "warmup", NULL};
    PyObject *device, *inner_o = Py_None, *warmup_o = Py_None;
    long long nbytes;
    int repeats = 20;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OL|iOO:bench_copy", kwlist, &device, &nbytes, &repeats, &inner_o,
                                     &warmup_o))
        return NULL;
    const char *fn = "bench_copy";
    if (nbytes < 1)
        return PyErr_Format(PyExc_ValueError, "%s: nbytes must be >= 1, got %lld", fn, nbytes);
    if ((unsigned long long)nbytes > (unsigned long long)(SIZE_MAX / 2))
        return PyErr_Format(PyExc_MemoryError, "%s: nbytes=%lld is too large to allocate", fn, nbytes);
    long inner = 0, warmup = 0;
    if (inner_o == Py_None) {
        long long want = (BENCH_COPY_TARGET_BYTES + nbytes - 1) / nbytes;
        inner = (long)(want < 1 ? 1 : want > 1000 ? 1000 : want);
    } else {
        if (!PyLong_Check(inner_o))
            return PyErr_Format(PyExc_TypeError, "%s: inner must be an int or None, got %R", fn, inner_o);
        inner = PyLong_AsLong(inner_o);
        if (inner == -1 && PyErr_Occurred()) return NULL;
    }
    if (warmup_o == Py_None) {
        warmup = inner; /* one sample's worth */
    } else {
        if (!PyLong_Check(warmup_o))
            return PyErr_Format(PyExc_TypeError, "%s: warmup must be an int or None, got %R", fn, warmup_o);
        warmup = PyLong_AsLong(warmup_o);
        if (warmup == -1 && PyErr_Occurred()) return NULL;
    }
    /* (clamped to int for bench_counts, which rejects anything outside its ranges) */
    inner = inner < INT32_MIN ? INT32_MIN : inner > INT32_MAX ? INT32_MAX : inner;
    warmup = warmup < INT32_MIN ? INT32_MIN : warmup > INT32_MAX ? INT32_MAX : warmup;
    if (bench_counts(fn, repeats, (int)warmup, (int)inner)) return NULL;
    const gc_backend *be = bench_backend(device, fn);
    if (!be) return NULL;

    double median = 0.0;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = bench_copy_run(be, (size_t)nbytes, (int)warmup, repeats, (int)inner, &median);
    Py_END_ALLOW_THREADS
    if (s) return gc_py_raise(s);
    return PyFloat_FromDouble(median);
}

/* ------------------------------------------------------------------ registration */

static PyMethodDef bench_methods[] = {
    {"bench_gemm", (PyCFunction)(void (*)(void))py_bench_gemm, METH_VARARGS | METH_KEYWORDS,
     "bench_gemm(device, m, n, k, dtype, impl='own', repeats=10, trans_a=False, trans_b=False, warmup=3, "
     "inner=1, graph=False) -> float\n\n"
     "Median seconds of one C = op(A) @ op(B) (A m x k, B k x n, random operands in backend memory).\n"
     "dtype: 'float32' (exact: TF32 off for the call), 'tfloat32', 'float16', 'bfloat16'; impl: 'own' or\n"
     "'vendor' (cuBLAS; NotImplementedError on the CPU). Each of `repeats` samples times `inner` calls\n"
     "between two backend syncs with a monotonic host clock. graph=True captures the `inner` calls into one\n"
     "CUDA graph and times its replays: the device time of a call as a captured plan runs it, without the\n"
     "host's launch cost (ValueError on a backend without graph capture). grids_for=[SMs, ...] (CUDA):\n"
     "after timing, one call per SM count with the launch log open and the kernels told the device has\n"
     "that many SMs; then the result is {'seconds': t, 'grids': {sms: [launch dicts]}}. plan_sms=N (CUDA):\n"
     "the timed calls themselves run with grids sized for N SMs (on the whole device)."},
    {"bench_conv", (PyCFunction)(void (*)(void))py_bench_conv, METH_VARARGS | METH_KEYWORDS,
     "bench_conv(device, n, h, w, c, f, kh, kw, strides=(1,1), padding='valid', dtype='float16', impl='own',\n"
     "           which='fwd', repeats=10, warmup=3, dilation=(1,1), inner=1, graph=False) -> float\n\n"
     "Median seconds of one conv2d pass on NHWC input (n, h, w, c) and kernel (kh, kw, c, f), without a\n"
     "bias unless bias=True (the forward adds one, the filter pass also computes its gradient):\n"
     "which = 'fwd' (y), 'bwd_data' (dx from dy) or 'bwd_filter' (dw from x, dy). dtype and impl as for\n"
     "bench_gemm ('vendor' = cuDNN), and so are inner, graph, grids_for and plan_sms."},
    {"bench_rnn", (PyCFunction)(void (*)(void))py_bench_rnn, METH_VARARGS | METH_KEYWORDS,
     "bench_rnn(device, cell, batch, steps, units, dtype='float32', which='fwd', repeats=10, warmup=3, inner=1,\n"
     "          graph=False) -> float\n\n"
     "Median seconds of one recurrent op as a training plan calls it: which='fwd' is rnn_fwd (y and the\n"
     "saved activations from random xw (batch, steps, G*units) and U), 'bwd' rnn_bwd (dxw from dy and a\n"
     "random save); cell 'simple', 'lstm', 'gru' (reset_after) or 'gru_reset_before'; no mask, dropout or\n"
     "initial state. dtype is the storage type ('tfloat32' is float32: the recurrence never uses TF32);\n"
     "repeats, warmup, inner and graph as for bench_gemm."},
    {"bench_copy", (PyCFunction)(void (*)(void))py_bench_copy, METH_VARARGS | METH_KEYWORDS,
     "bench_copy(device, nbytes, repeats=20, inner=None, warmup=None) -> float\n\n"
     "Median seconds of one device-to-device copy of nbytes bytes through the backend's copy (source and\n"
     "destination in backend memory, the source random). Each of `repeats` samples times `inner` copies\n"
     "between two backend syncs; inner=None copies at least 256 MiB per sample (1 to 1000 copies);\n"
     "warmup=None runs one sample's worth of copies first. MemoryError when the buffers do not fit."},
    {NULL, NULL, 0, NULL}};

int gpucmp_add_bench(PyObject *module)
{
    return PyModule_AddFunctions(module, bench_methods);
}
