/* bench.h -- gpucmp._core's timing helpers (bench.c): bench_gemm, bench_conv, bench_copy.
 *
 * Include after Python.h. PyInit__core calls gpucmp_add_bench(m) once; it adds the
 * functions to the module and returns 0, or -1 with a Python exception set. */
#ifndef GPUCMP_PYTHON_BENCH_H
#define GPUCMP_PYTHON_BENCH_H

#include "gpucmp.h"

int gpucmp_add_bench(PyObject *module);

/* A device-name argument ('cpu', 'cuda:0') -> its backend; NULL with TypeError (not a
 * string) or the registry's ValueError naming the device and the available ones. fn
 * prefixes the TypeError's message. Shared by bench.c and device_api.c. */
const gc_backend *bench_backend(PyObject *name, const char *fn);

/* Sets the Python exception for a failed status (module.c: ValueError, TypeError,
 * MemoryError, NotImplementedError or RuntimeError with the core's message); returns NULL. */
PyObject *gc_py_raise(gc_status s);

#endif /* GPUCMP_PYTHON_BENCH_H */
