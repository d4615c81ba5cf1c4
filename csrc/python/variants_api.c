/* variants_api.c -- the Python face of the kernel-variant registry (gpucmp_variants.h).
 *
 * What it provides (CORE_API.md): variants() -> {point: {"backend", "kind", "help",
 * "variants", "available", "forced", "last", "range"}} for every point of this build;
 * force_variant(point, name); variant_forced(point) / variant_last(point) -> str;
 * reset_variants(point=None); variants_env_report() -> str; and the older hooks kept as
 * thin wrappers over the same registry: cpu_simd_variant(), cpu_simd_variants(),
 * cpu_force_simd(name), cuda_gemm_force_path(name), cuda_gemm_last_path().
 *
 * How: names go straight to gc_variant_force, whose status becomes the exception
 * (ValueError: unknown point or name, listing the valid ones; NotImplementedError: not
 * available here, saying why). `last` is per thread: the thread that ran the op. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>
#include <string.h>

#include "gpucmp.h"
#include "gpucmp_variants.h"
#include "cpu_kernels.h"
#include "bench.h"
#include "variants_api.h"

/* the index of a point named by a str argument, or -1 with an exception */
static int point_arg(PyObject *arg, const char *fn)
{
    if (!PyUnicode_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "%s: the point must be a str such as 'cuda.gemm.path', got %R", fn, arg);
        return -1;
    }
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return -1;
    const int i = gc_variant_lookup(name);
    if (i < 0) {
        /* the registry's message names the point and lists the known ones (a reset of an
         * unknown point changes nothing) */
        gc_py_raise(gc_variant_reset(name));
        return -1;
    }
    return i;
}

static PyObject *str_list(const gc_variant_point *p, int point, int only_available)
{
    PyObject *l = PyList_New(0);
    const int n = p->kind == GC_VARIANT_CHOICE ? p->n_names : 1;
    for (int i = 0; l && i < n; i++) {
        if (p->kind == GC_VARIANT_CHOICE && (p->flags[i] & GC_VARIANT_REPORT_ONLY)) continue;
        if (only_available && !gc_variant_available(point, i, NULL)) continue;
        PyObject *s = PyUnicode_FromString(p->kind == GC_VARIANT_CHOICE ? p->names[i] : "auto");
        if (!s || PyList_Append(l, s)) Py_CLEAR(l);
        Py_XDECREF(s);
    }
    gc_clear_error();
    return l;
}

static PyObject *point_dict(int point)
{
    const gc_variant_point *p = gc_variant_point_at(point);
    char forced[64], last[64];
    PyObject *range = p->kind == GC_VARIANT_KNOB ? Py_BuildValue("(ii)", p->lo, p->hi) : Py_NewRef(Py_None);
    PyObject *names = str_list(p, point, 0), *avail = str_list(p, point, 1);
    PyObject *d = NULL;
    if (range && names && avail)
        d = Py_BuildValue("{s:s,s:s,s:s,s:O,s:O,s:s,s:s,s:O}", "backend", p->backend, "kind",
                          p->kind == GC_VARIANT_KNOB ? "knob" : "choice", "help", p->help, "variants", names,
                          "available", avail, "forced", gc_variant_forced_name(point, forced, sizeof forced),
                          "last", gc_variant_last_name(point, last, sizeof last), "range", range);
    Py_XDECREF(range);
    Py_XDECREF(names);
    Py_XDECREF(avail);
    return d;
}

static PyObject *py_variants(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    PyObject *out = PyDict_New();
    for (int i = 0; out && i < GC_VP_COUNT; i++) {
        if (!gc_variant_present(i)) continue;
        PyObject *d = point_dict(i);
        if (!d || PyDict_SetItemString(out, gc_variant_point_at(i)->name, d)) Py_CLEAR(out);
        Py_XDECREF(d);
    }
    return out;
}

static PyObject *py_force_variant(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pt, *val;
    if (!PyArg_ParseTuple(args, "OO:force_variant", &pt, &val)) return NULL;
    const int i = point_arg(pt, "force_variant");
    if (i < 0) return NULL;
    PyObject *text = PyLong_Check(val) && !PyBool_Check(val) ? PyObject_Str(val) : Py_NewRef(val);
    if (!text) return NULL;
    if (!PyUnicode_Check(text)) {
        Py_DECREF(text);
        return PyErr_Format(PyExc_TypeError, "force_variant: the variant must be a str (or an int for a knob), got %R",
                            val);
    }
    gc_status s = gc_variant_force(gc_variant_point_at(i)->name, PyUnicode_AsUTF8(text));
    Py_DECREF(text);
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

static PyObject *py_variant_forced(PyObject *self, PyObject *arg)
{
    (void)self;
    const int i = point_arg(arg, "variant_forced");
    char buf[64];
    return i < 0 ? NULL : PyUnicode_FromString(gc_variant_forced_name(i, buf, sizeof buf));
}

static PyObject *py_variant_last(PyObject *self, PyObject *arg)
{
    (void)self;
    const int i = point_arg(arg, "variant_last");
    char buf[64];
    return i < 0 ? NULL : PyUnicode_FromString(gc_variant_last_name(i, buf, sizeof buf));
}

static PyObject *py_reset_variants(PyObject *self, PyObject *args)
{
    (void)self;
    PyObject *pt = Py_None;
    if (!PyArg_ParseTuple(args, "|O:reset_variants", &pt)) return NULL;
    if (pt != Py_None && point_arg(pt, "reset_variants") < 0) return NULL;
    gc_status s = gc_variant_reset(pt == Py_None ? NULL : PyUnicode_AsUTF8(pt));
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

static PyObject *py_variants_env_report(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    return PyUnicode_FromString(gc_variants_env_report());
}

/* ------------------------------------------------------------------ the older hooks */

static PyObject *py_cpu_simd_variant(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    return PyUnicode_FromString(gc_cpu_sgemm_variant());
}

static PyObject *py_cpu_force_simd(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) return PyErr_Format(PyExc_TypeError, "cpu_force_simd: expected a name");
    gc_status s = gc_cpu_sgemm_force_variant(PyUnicode_AsUTF8(arg));
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

static PyObject *py_cpu_simd_variants(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    static const int order[] = {GC_V_SIMD_GENERIC, GC_V_SIMD_FMA, GC_V_SIMD_AVX512}; /* as before: worst first */
    const gc_variant_point *p = gc_variant_point_at(GC_VP_CPU_GEMM_SIMD);
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < 3; i++) {
        if (!gc_variant_available(GC_VP_CPU_GEMM_SIMD, order[i], NULL)) continue;
        PyObject *s = PyUnicode_FromString(p->names[order[i]]);
        if (!s || PyList_Append(l, s)) Py_CLEAR(l);
        Py_XDECREF(s);
    }
    return l;
}

/* Test hooks of cuda.gemm.path, as before the registry; RuntimeError without CUDA. */
static PyObject *py_cuda_gemm_force_path(PyObject *self, PyObject *arg)
{
    (void)self;
    const char *name = PyUnicode_AsUTF8(arg);
    if (!name) return NULL;
    if (!gc_variant_present(GC_VP_CUDA_GEMM_PATH))
        return PyErr_Format(PyExc_RuntimeError, "cuda_gemm_force_path: this build has no CUDA backend");
    gc_status s = gc_variant_force("cuda.gemm.path", name);
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

static PyObject *py_cuda_gemm_last_path(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    if (!gc_variant_present(GC_VP_CUDA_GEMM_PATH))
        return PyErr_Format(PyExc_RuntimeError, "cuda_gemm_last_path: this build has no CUDA backend");
    char buf[64];
    return PyUnicode_FromString(gc_variant_last_name(GC_VP_CUDA_GEMM_PATH, buf, sizeof buf));
}

static PyMethodDef variants_methods[] = {
    {"variants", py_variants, METH_NOARGS,
     "variants() -> {point: {'backend', 'kind', 'help', 'variants', 'available', 'forced', 'last', 'range'}}"},
    {"force_variant", py_force_variant, METH_VARARGS,
     "force_variant(point, name): force a kernel variant process-wide ('auto' returns to the automatic choice)"},
    {"variant_forced", py_variant_forced, METH_O, "variant_forced(point) -> the forced name ('auto' when none)"},
    {"variant_last", py_variant_last, METH_O,
     "variant_last(point) -> what this thread's last call at the point ran ('none' before any)"},
    {"reset_variants", py_reset_variants, METH_VARARGS,
     "reset_variants(point=None): every point (or one) back to 'auto', its last to 'none'"},
    {"variants_env_report", py_variants_env_report, METH_NOARGS,
     "the GPUCMP_FORCE entries skipped at import, one per line ('' when all applied)"},
    {"cpu_simd_variant", py_cpu_simd_variant, METH_NOARGS, "the CPU GEMM micro-kernel the next GEMM runs"},
    {"cpu_simd_variants", py_cpu_simd_variants, METH_NOARGS, "CPU GEMM micro-kernels this machine runs"},
    {"cpu_force_simd", py_cpu_force_simd, METH_O,
     "cpu_force_simd(name): force_variant('cpu.gemm.simd', name) ('auto' resets)"},
    {"cuda_gemm_force_path", py_cuda_gemm_force_path, METH_O,
     "cuda_gemm_force_path(name): force_variant('cuda.gemm.path', name): 'auto', 'simt', 'mma', 'wgmma', 'small'"},
    {"cuda_gemm_last_path", py_cuda_gemm_last_path, METH_NOARGS, "variant_last('cuda.gemm.path')"},
    {NULL, NULL, 0, NULL}};

int gpucmp_add_variants_api(PyObject *module)
{
    gc_variants_load_env();
    char report[1024];
    snprintf(report, sizeof report, "%s", gc_variants_env_report());
    const size_t len = strlen(report);
    if (len && report[len - 1] == '\n') report[len - 1] = '\0';
    if (report[0] && PyErr_WarnFormat(PyExc_RuntimeWarning, 1, "gpucmp: %s", report) < 0) return -1;
    return PyModule_AddFunctions(module, variants_methods);
}
