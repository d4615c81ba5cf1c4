/* conv_inst.cu -- one CUTLASS implicit GEMM convolution instantiation of libgpucmp_cutlass_bench.so.
 *
 * What it provides: gcb_conv_entry_<GCB_ID>, the entry point (entry.h) of conv config
 * GCB_ID of configs.h: describe its kernel, size its workspace, run it (kernels.cuh).
 *
 * Why one file per config: build.sh compiles this file once per conv config with
 * -DGCB_ID=k; the X-macro below only names each config's type (naming a class template
 * specialisation does not instantiate it), and only config GCB_ID's kernel is
 * instantiated by the entry point, so each object holds one kernel and the objects
 * compile in parallel.
 */
#include "kernels.cuh"
#include "configs.h"
#ifndef GCB_ID
#error "compile with -DGCB_ID=<the conv config's id in configs.h>"
#endif
namespace gcb {
template <int ID> struct ConvCfg;
#define GCB_X(ID, PASS, DT, ALGO, SS, TM, TN, TK, WM, WN, WK, ST, AL)                                          \
    template <> struct ConvCfg<ID> {                                                                           \
        using type = ConvOp<PASS, DT, cutlass::conv::IteratorAlgorithm::ALGO, cutlass::conv::StrideSupport::SS, \
                            TM, TN, TK, WM, WN, WK, ST, AL>;                                                   \
    };
GCB_CONV_CONFIGS(GCB_X)
#undef GCB_X
} // namespace gcb
extern "C" int GCB_PASTE(gcb_conv_entry_, GCB_ID)(int what, const gcb::ConvArgs *a, const gcb::Launch *l,
                                                  gcb::KernelInfo *info, size_t *ws)
{
    return gcb::conv_entry<typename gcb::ConvCfg<GCB_ID>::type>(what, a, l, info, ws);
}
