/* device_api.c -- gpucmp._core.device_info / memory_stats / reset_peak_memory: what
 * the comparison harness asks a backend about its device.
 *
 * What it provides (CORE_API.md): device_info(backend) -> dict of the device's
 * properties (for a GPU the figures the projection needs -- SMs, clocks, bus width,
 * L2, shared memory -- and the PCI bus id that matches it to NVML; for the CPU the
 * model, cores, OpenMP threads and active GEMM micro-kernel); memory_stats(backend)
 * -> the backend's own memory accounting (gc_backend.memory_stats) with the driver's
 * free / total; reset_peak_memory(backend); launch_log_begin(backend, sms=0) /
 * launch_log_end() -> the kernel launches in between (csrc/cuda/launch_log.cu), with
 * grids sized as for `sms` SMs when given; cuda_stream_syncs() -> how often the CUDA
 * backend's transfer and sync entry points have waited for the stream (None without CUDA).
 *
 * How: a thin layer. The CUDA figures come from gc_cuda_device_info_get
 * (csrc/cuda/backend.cu, gpucmp_cuda.h), which only reads attributes -- no context is
 * made unless GPUCMP_CUDA_SMS confines the backend, whose granted SM count exists
 * only once its green context does. Backend names go through the registry
 * (bench_backend: the ValueError naming the device and listing the backends); a
 * status becomes an exception through gc_py_raise, as everywhere in _core. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "gpucmp.h"
#include "cpu_kernels.h"
#include "bench.h"
#include "device_api.h"
#ifdef GPUCMP_WITH_CUDA
#include "gpucmp_cuda.h"
#endif

/* ------------------------------------------------------------------ dict helpers */

/* d[k] = v, consuming the reference to v; -1 with an exception on failure */
static int put(PyObject *d, const char *k, PyObject *v)
{
    if (!v) return -1;
    int r = PyDict_SetItemString(d, k, v);
    Py_DECREF(v);
    return r;
}

static int put_none(PyObject *d, const char *k)
{
    Py_INCREF(Py_None);
    return put(d, k, Py_None);
}

/* ------------------------------------------------------------------ the CPU */

/* The first "model name" of /proc/cpuinfo ("" when there is none: not Linux, or an
 * architecture that names it otherwise). */
static void cpu_model_name(char *out, size_t n)
{
    out[0] = '\0';
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) != 0) continue;
        const char *v = strchr(line, ':');
        if (!v) continue;
        v++;
        while (*v == ' ' || *v == '\t') v++;
        snprintf(out, n, "%s", v);
        size_t len = strlen(out);
        while (len && (out[len - 1] == '\n' || out[len - 1] == ' ' || out[len - 1] == '\r')) out[--len] = '\0';
        break;
    }
    fclose(f);
}

static PyObject *cpu_info(void)
{
    char name[256];
    cpu_model_name(name, sizeof name);
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef _OPENMP
    int threads = omp_get_max_threads();
#else
    int threads = 1;
#endif
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (put(d, "name", PyUnicode_DecodeUTF8(name[0] ? name : "cpu", (Py_ssize_t)strlen(name[0] ? name : "cpu"),
                                            "replace")) ||
        put(d, "logical_cores", PyLong_FromLong(cores > 0 ? cores : 1)) ||
        put(d, "omp_threads", PyLong_FromLong(threads)) ||
        put(d, "simd", PyUnicode_FromString(gc_cpu_sgemm_variant()))) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

/* ------------------------------------------------------------------ a GPU */

#ifdef GPUCMP_WITH_CUDA
static PyObject *cuda_info(const gc_backend *be)
{
    gc_cuda_device_info in;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS /* the first use of a confined backend makes its context */
    s = gc_cuda_device_info_get(be, &in);
    Py_END_ALLOW_THREADS
    if (s) return gc_py_raise(s);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int bad = put(d, "name", PyUnicode_DecodeUTF8(in.name, (Py_ssize_t)strlen(in.name), "replace")) ||
              put(d, "compute_capability", PyUnicode_FromFormat("%d.%d", in.cc_major, in.cc_minor)) ||
              put(d, "sms", PyLong_FromLong(in.sms)) ||
              put(d, "sms_physical", PyLong_FromLong(in.sms_physical)) ||
              put(d, "total_memory_bytes", PyLong_FromLongLong((long long)in.total_memory_bytes)) ||
              put(d, "sm_clock_mhz", PyLong_FromLong(in.sm_clock_khz / 1000)) ||
              put(d, "memory_clock_mhz", PyLong_FromLong(in.memory_clock_khz / 1000)) ||
              put(d, "memory_bus_width_bits", PyLong_FromLong(in.memory_bus_width_bits)) ||
              put(d, "l2_bytes", PyLong_FromLong(in.l2_bytes)) ||
              put(d, "smem_per_sm_bytes", PyLong_FromLong(in.smem_per_sm_bytes)) ||
              put(d, "smem_per_block_optin_bytes", PyLong_FromLong(in.smem_per_block_optin_bytes)) ||
              put(d, "pci_bus_id", PyUnicode_FromString(in.pci_bus_id)) ||
              (in.sm_limit > 0 ? put(d, "sm_limit", PyLong_FromLong(in.sm_limit)) : put_none(d, "sm_limit")) ||
              put(d, "runtime_version", PyLong_FromLong(in.runtime_version)) ||
              put(d, "driver_version", PyLong_FromLong(in.driver_version));
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}
#endif

/* ------------------------------------------------------------------ module functions */

static PyObject *py_device_info(PyObject *self, PyObject *arg)
{
    (void)self;
    const gc_backend *be = bench_backend(arg, "device_info");
    if (!be) return NULL;
    if (strcmp(be->name, "cpu") == 0) return cpu_info();
#ifdef GPUCMP_WITH_CUDA
    if (strcmp(be->name, "cuda") == 0) return cuda_info(be);
#endif
    return PyErr_Format(PyExc_NotImplementedError, "device_info: no device information for backend '%s'", be->name);
}

static PyObject *py_memory_stats(PyObject *self, PyObject *arg)
{
    (void)self;
    const gc_backend *be = bench_backend(arg, "memory_stats");
    if (!be) return NULL;
    gc_memory_stats m;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = gc_backend_memory_stats(be, &m);
    Py_END_ALLOW_THREADS
    if (s) return gc_py_raise(s);
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    int bad = put(d, "allocated_bytes", PyLong_FromLongLong((long long)m.allocated_bytes)) ||
              put(d, "peak_bytes", PyLong_FromLongLong((long long)m.peak_bytes)) ||
              (m.device_free_bytes >= 0 ? put(d, "device_free_bytes", PyLong_FromLongLong((long long)m.device_free_bytes))
                                        : put_none(d, "device_free_bytes")) ||
              (m.device_total_bytes >= 0
                   ? put(d, "device_total_bytes", PyLong_FromLongLong((long long)m.device_total_bytes))
                   : put_none(d, "device_total_bytes"));
    if (bad) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

static PyObject *py_reset_peak_memory(PyObject *self, PyObject *arg)
{
    (void)self;
    const gc_backend *be = bench_backend(arg, "reset_peak_memory");
    if (!be) return NULL;
    gc_backend_reset_peak(be);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ launch log */

#ifdef GPUCMP_WITH_CUDA
static int g_log_open;
#endif

static PyObject *py_launch_log_begin(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"backend", "sms", NULL};
    PyObject *name;
    int sms = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|i:launch_log_begin", kwlist, &name, &sms)) return NULL;
    const gc_backend *be = bench_backend(name, "launch_log_begin");
    if (!be) return NULL;
    if (sms < 0 || sms > 100000)
        return PyErr_Format(PyExc_ValueError, "launch_log_begin: sms must be in [0, 100000] (0: the device's own), got %d",
                            sms);
#ifdef GPUCMP_WITH_CUDA
    if (strcmp(be->name, "cuda") == 0) {
        if (!gc_cuda_launch_log_supported())
            return PyErr_Format(PyExc_NotImplementedError,
                                "launch_log_begin: this build does not route kernel launches through the launch log "
                                "(it needs setup.py's link wrap)");
        if (g_log_open) return PyErr_Format(PyExc_RuntimeError, "launch_log_begin: a launch log is already open");
        gc_cuda_launch_log_begin(sms);
        g_log_open = 1;
        Py_RETURN_NONE;
    }
#endif
    return PyErr_Format(PyExc_ValueError, "launch_log_begin: backend '%s' launches no GPU kernels (a CUDA device is needed)",
                        be->name);
}

static PyObject *py_launch_log_end(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
#ifdef GPUCMP_WITH_CUDA
    if (!g_log_open) return PyErr_Format(PyExc_RuntimeError, "launch_log_end: no launch log is open");
    enum { KEEP = 4096 };
    gc_cuda_launch *recs = (gc_cuda_launch *)PyMem_Malloc(KEEP * sizeof(gc_cuda_launch));
    if (!recs) {
        (void)gc_cuda_launch_log_end(NULL, 0);
        g_log_open = 0;
        return PyErr_NoMemory();
    }
    const int seen = gc_cuda_launch_log_end(recs, KEEP);
    g_log_open = 0;
    const int n = seen < KEEP ? seen : KEEP;
    PyObject *out = PyList_New(0);
    for (int i = 0; out && i < n; i++) {
        const gc_cuda_launch *r = &recs[i];
        PyObject *d = PyDict_New();
        int bad = !d || put(d, "name", PyUnicode_DecodeUTF8(r->name, (Py_ssize_t)strlen(r->name), "replace")) ||
                  put(d, "grid", Py_BuildValue("(III)", r->grid[0], r->grid[1], r->grid[2])) ||
                  put(d, "block", Py_BuildValue("(III)", r->block[0], r->block[1], r->block[2])) ||
                  put(d, "blocks", PyLong_FromUnsignedLongLong((unsigned long long)r->grid[0] * r->grid[1] * r->grid[2])) ||
                  put(d, "threads", PyLong_FromUnsignedLong((unsigned long)r->block[0] * r->block[1] * r->block[2])) ||
                  put(d, "smem_bytes", PyLong_FromLongLong((long long)r->smem_bytes)) ||
                  put(d, "blocks_per_sm", PyLong_FromLong(r->blocks_per_sm)) || PyList_Append(out, d) < 0;
        Py_XDECREF(d);
        if (bad) Py_CLEAR(out);
    }
    PyMem_Free(recs);
    if (out && seen > n) {
        Py_DECREF(out);
        return PyErr_Format(PyExc_RuntimeError, "launch_log_end: %d launches were made, more than the log keeps (%d)",
                            seen, n);
    }
    return out;
#else
    return PyErr_Format(PyExc_RuntimeError, "launch_log_end: no launch log is open (this build has no CUDA backend)");
#endif
}

#ifdef GPUCMP_WITH_CUDA
int64_t gc_cuda_stream_syncs(void); /* backend.cu */
#endif

static PyObject *py_cuda_stream_syncs(PyObject *self, PyObject *unused)
{
    (void)self, (void)unused;
#ifdef GPUCMP_WITH_CUDA
    return PyLong_FromLongLong((long long)gc_cuda_stream_syncs());
#else
    Py_RETURN_NONE;
#endif
}

static PyMethodDef device_methods[] = {
    {"device_info", py_device_info, METH_O,
     "device_info(backend) -> dict\n\n"
     "The device behind a backend. 'cuda:N': name, compute_capability ('8.6'), sms (what the backend's\n"
     "kernels use: the granted count under GPUCMP_CUDA_SMS), sms_physical, total_memory_bytes, sm_clock_mhz,\n"
     "memory_clock_mhz, memory_bus_width_bits, l2_bytes, smem_per_sm_bytes, smem_per_block_optin_bytes,\n"
     "pci_bus_id, sm_limit (GPUCMP_CUDA_SMS or None), runtime_version, driver_version.\n"
     "'cpu': name, logical_cores, omp_threads, simd (the active GEMM micro-kernel)."},
    {"memory_stats", py_memory_stats, METH_O,
     "memory_stats(backend) -> dict\n\n"
     "allocated_bytes (held now by the backend: its allocations and, on a GPU, its own workspace),\n"
     "peak_bytes (high-water mark since start or reset_peak_memory), device_free_bytes and\n"
     "device_total_bytes (cudaMemGetInfo; None on the CPU)."},
    {"reset_peak_memory", py_reset_peak_memory, METH_O,
     "reset_peak_memory(backend) -> None\n\nSets the backend's peak_bytes to its allocated_bytes."},
    {"launch_log_begin", (PyCFunction)(void (*)(void))py_launch_log_begin, METH_VARARGS | METH_KEYWORDS,
     "launch_log_begin(backend, sms=0) -> None\n\n"
     "Starts recording every GPU kernel launch of the process (a CUDA backend; ValueError otherwise,\n"
     "NotImplementedError for a build without the launch wrap). sms > 0: until launch_log_end, the CUDA\n"
     "backend's kernels size their grids as if the device had that many SMs (results stay correct)."},
    {"launch_log_end", py_launch_log_end, METH_NOARGS,
     "launch_log_end() -> list of dict\n\n"
     "Stops recording; one dict per launch: name (mangled), grid, block, blocks, threads, smem_bytes\n"
     "(dynamic), blocks_per_sm (occupancy: blocks one SM holds at once, -1 if unknown)."},
    {"cuda_stream_syncs", py_cuda_stream_syncs, METH_NOARGS,
     "cuda_stream_syncs() -> int or None\n\n"
     "How many times the CUDA backend's upload / download / sync / graph-error reads have waited for\n"
     "the stream since start, all devices together (op-internal error reads of uncaptured calls are\n"
     "not counted); None in a build without CUDA."},
    {NULL, NULL, 0, NULL}};

int gpucmp_add_device_api(PyObject *module)
{
    return PyModule_AddFunctions(module, device_methods);
}
