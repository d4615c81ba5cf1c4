/* device_api.h -- gpucmp._core's device queries (device_api.c): device_info,
 * memory_stats, reset_peak_memory.
 *
 * Include after Python.h. PyInit__core calls gpucmp_add_device_api(m) once; it adds the
 * functions to the module and returns 0, or -1 with a Python exception set. */
#ifndef GPUCMP_PYTHON_DEVICE_API_H
#define GPUCMP_PYTHON_DEVICE_API_H

int gpucmp_add_device_api(PyObject *module);

#endif /* GPUCMP_PYTHON_DEVICE_API_H */
