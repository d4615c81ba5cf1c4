/* variants_api.h -- gpucmp._core's kernel-variant functions (variants_api.c): variants,
 * force_variant, variant_forced, variant_last, reset_variants, variants_env_report and
 * the older single-point wrappers (cpu_simd_variant(s), cpu_force_simd,
 * cuda_gemm_force_path, cuda_gemm_last_path).
 *
 * Include after Python.h. PyInit__core calls gpucmp_add_variants_api(m) once, after the
 * backends have registered; it reads the environment (GPUCMP_FORCE and its aliases),
 * warns about entries it skipped, adds the functions and returns 0, or -1 with a Python
 * exception set. */
#ifndef GPUCMP_PYTHON_VARIANTS_API_H
#define GPUCMP_PYTHON_VARIANTS_API_H

int gpucmp_add_variants_api(PyObject *module);

#endif /* GPUCMP_PYTHON_VARIANTS_API_H */
