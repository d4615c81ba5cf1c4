/* cudnn_lib.cuh -- the one run-time loader of libcudnn, shared by the cuDNN baselines
 * (conv2d_vendor.cu: convolutions, rnn_cudnn.cu: recurrent layers).
 *
 * Why: nothing in gpucmp links libcudnn or includes cudnn.h (`import gpucmp` and CI work
 * without it); the library is dlopen'ed once ("libcudnn.so.9", then "libcudnn.so"), its
 * version checked (9.x), and each user resolves the entry points it needs from the one
 * handle with gc_cudnn_resolve. */
#ifndef GPUCMP_CUDNN_LIB_CUH
#define GPUCMP_CUDNN_LIB_CUH

#include <stddef.h>

typedef struct {
    void **slot;
    const char *name;
} gc_cudnn_sym;

/* The library handle (loaded on the first call), or NULL with a static reason in *why. */
void *gc_cudnn_lib(const char **why);
/* Fills every slot from the library; 0 when all resolved, else -1 with the missing name
 * in why (the slots are then all NULL). */
int gc_cudnn_resolve(const gc_cudnn_sym *syms, size_t n, char *why, size_t why_len);

#endif /* GPUCMP_CUDNN_LIB_CUH */
