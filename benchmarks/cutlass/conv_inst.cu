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
