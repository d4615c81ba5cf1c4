/* gemm_inst.cu -- one CUTLASS GEMM instantiation of libgpucmp_cutlass_bench.so.
 *
 * What it provides: gcb_gemm_entry_<GCB_ID>, the entry point (entry.h) of GEMM config
 * GCB_ID of configs.h: describe its kernel, size its workspace, run it (kernels.cuh).
 *
 * Why one file per config: build.sh compiles this file once per GEMM config with
 * -DGCB_ID=k; the X-macro below only names each config's type (naming a class template
 * specialisation does not instantiate it), and only config GCB_ID's kernel is
 * instantiated by the entry point, so each object holds one kernel and the objects
 * compile in parallel.
 */
#include "kernels.cuh"
#include "configs.h"
#ifndef GCB_ID
#error "compile with -DGCB_ID=<the GEMM config's id in configs.h>"
#endif
namespace gcb {
template <int ID> struct GemmCfg;
#define GCB_X(ID, DT, LA, LB, TM, TN, TK, WM, WN, WK, ST, AL) \
    template <> struct GemmCfg<ID> { using type = GemmOp<DT, LA, LB, TM, TN, TK, WM, WN, WK, ST, AL>; };
GCB_GEMM_CONFIGS(GCB_X)
#undef GCB_X
} // namespace gcb
extern "C" int GCB_PASTE(gcb_gemm_entry_, GCB_ID)(int what, const gcb::GemmArgs *a, const gcb::Launch *l,
                                                  gcb::KernelInfo *info, size_t *ws)
{
    return gcb::gemm_entry<typename gcb::GemmCfg<GCB_ID>::type>(what, a, l, info, ws);
}
