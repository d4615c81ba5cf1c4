/* rnn_persistent.cuh -- the entry points of the one-launch recurrences (rnn_persistent.cu,
 * rnn_resident.cu) that rnn.cu's rnn_fwd / rnn_bwd try before their stepwise loop.
 *
 * Each takes the op call exactly as rnn.cu gets it. Three outcomes: GC_OK with *ran = 1
 * (the whole recurrence ran as one launch), GC_OK with *ran = 0 and a static reason in
 * *why (the shape, the device or the options are not eligible; nothing was launched or
 * written, the caller runs the stepwise path), or an error status (a launch that failed,
 * or CTAs that stopped waiting for each other: the outputs are not valid then). */
#ifndef GPUCMP_CUDA_RNN_PERSISTENT_CUH
#define GPUCMP_CUDA_RNN_PERSISTENT_CUH

#include "common.cuh"

gc_status gc_rnn_persistent_fwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why);
gc_status gc_rnn_persistent_bwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why);

/* The cluster variant (cuda.rnn=cluster): the same outcomes; never chosen by auto (yet).
 * _available: 1 when the device and the build can run it at all (compute capability 9.0+
 * and the sm_90 image), else 0 with a static reason in *why (the variant probe). */
gc_status gc_rnn_cluster_fwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why);
gc_status gc_rnn_cluster_bwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why);
int gc_rnn_cluster_available(const gc_backend *be, const char **why);

/* The register-resident variant (cuda.rnn=resident, rnn_resident.cu: one CTA per group of
 * rows holds all of U in registers; small recurrences only): the same outcomes (it has
 * no wait that can fail: an error status is a launch that failed). auto tries it first. */
gc_status gc_rnn_resident_fwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why);
gc_status gc_rnn_resident_bwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why);

#endif
