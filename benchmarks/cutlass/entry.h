/* entry.h -- what one CUTLASS instantiation of libgpucmp_cutlass_bench.so hands the
 * registry (registry.cu): the argument structs and the entry-point signatures.
 *
 * What it provides: gcb::GemmArgs / gcb::ConvArgs (one call's operands and launch
 * settings), gcb::KernelInfo (what only the instantiated kernel knows: its shared memory
 * and threads), and the entry signatures gcb_gemm_entry_<ID> / gcb_conv_entry_<ID> that
 * gemm_inst.cu / conv_inst.cu define, one object file per config.
 *
 * Why: no CUTLASS (and no CUDA header) in here, so the registry compiles in a second and
 * every heavy template instantiation sits in its own translation unit -- build.sh
 * compiles them in parallel, and editing one config rebuilds one object.
 */
#ifndef GPUCMP_CUTLASS_BENCH_ENTRY_H
#define GPUCMP_CUTLASS_BENCH_ENTRY_H

#include <stddef.h>

#include "gcb.h"

namespace gcb {

enum What { kInfo = 0, kWorkspace = 1, kRun = 2 };

struct KernelInfo {
    int smem_bytes; /* sizeof(Kernel::SharedStorage): the dynamic shared memory of a block */
    int threads;    /* threads per block */
};

struct Launch {
    void *workspace;
    size_t workspace_bytes;
    int iters;
    void *stream; /* cudaStream_t */
    char *msg;
    int msg_len;
};

struct GemmArgs {
    int m, n, k;
    const void *A, *B;
    void *C;
    float alpha, beta;
};

struct ConvArgs {
    gcb_conv_problem p;
    void *x, *w, *y;
    float alpha, beta;
};

} // namespace gcb

/* what == kInfo: fills *info; kWorkspace: *ws = bytes for the problem; kRun: runs. Each
 * returns a GCB_* status and, on failure, a message in launch->msg (when launch != NULL). */
typedef int (*gcb_gemm_entry_fn)(int what, const gcb::GemmArgs *args, const gcb::Launch *launch,
                                 gcb::KernelInfo *info, size_t *ws);
typedef int (*gcb_conv_entry_fn)(int what, const gcb::ConvArgs *args, const gcb::Launch *launch,
                                 gcb::KernelInfo *info, size_t *ws);

#endif /* GPUCMP_CUTLASS_BENCH_ENTRY_H */
