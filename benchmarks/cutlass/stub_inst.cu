/* stub_inst.cu -- the stand-in for a config whose CUTLASS instantiation did not compile.
 *
 * What it provides: gcb_gemm_entry_<GCB_ID> (with -DGCB_STUB_GEMM) or gcb_conv_entry_<GCB_ID>
 * that describes the config as not built (shared memory -1) and refuses every problem with
 * GCB_NOT_SUPPORTED, naming the reason.
 *
 * Why: build.sh links the library even when a few of the dozens of instantiations fail (a
 * new CUDA or CUTLASS release refusing one template), so that one bad config costs its own
 * column, not the whole benchmark run on the GPU; build.sh prints which configs are stubs,
 * and bench_cutlass.py reports them as "did not compile".
 */
#include <cstdio>

#include "entry.h"

#ifndef GCB_ID
#error "compile with -DGCB_ID=<the config's id in configs.h>"
#endif
#define GCB_PASTE_(a, b) a##b
#define GCB_PASTE(a, b) GCB_PASTE_(a, b)

#ifdef GCB_STUB_GEMM
#define GCB_STUB_NAME GCB_PASTE(gcb_gemm_entry_, GCB_ID)
#define GCB_STUB_ARGS gcb::GemmArgs
#define GCB_STUB_KIND "gemm"
#else
#define GCB_STUB_NAME GCB_PASTE(gcb_conv_entry_, GCB_ID)
#define GCB_STUB_ARGS gcb::ConvArgs
#define GCB_STUB_KIND "conv"
#endif

extern "C" int GCB_STUB_NAME(int what, const GCB_STUB_ARGS *, const gcb::Launch *l, gcb::KernelInfo *info,
                             size_t *ws)
{
    if (what == gcb::kInfo) {
        info->smem_bytes = -1;
        info->threads = 0;
        return GCB_OK;
    }
    if (what == gcb::kWorkspace) {
        *ws = 0;
        return GCB_OK;
    }
    if (l && l->msg && l->msg_len > 0)
        snprintf(l->msg, (size_t)l->msg_len, "%s config %d did not compile in this build (build.sh's output names the error)",
                 GCB_STUB_KIND, GCB_ID);
    return GCB_NOT_SUPPORTED;
}
