/* cuda_check.h -- CK(call): the standalone benchmark programs' CUDA error check (print
 * the call, the file and line and the error, exit 1): they are measurements, and a
 * failed call must stop them rather than print figures of work that did not run. */
#ifndef GPUCMP_BENCH_CUDA_CHECK_H
#define GPUCMP_BENCH_CUDA_CHECK_H

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#endif
