/* kernels.cuh -- the CUTLASS 2.x kernel types of libgpucmp_cutlass_bench.so and the one
 * routine per kind that checks, initialises and launches them.
 *
 * What it provides: data-type tags (f16, bf16: fp32 accumulation, output in the input
 * type; tf32: fp32 in and out, TF32 Tensor Core math), gcb::GemmOp<...> (a
 * cutlass::gemm::device::Gemm for Sm80 / OpClassTensorOp, C row-major) and
 * gcb::ConvOp<...> (cutlass::conv::device::ImplicitGemmConvolution over
 * DefaultConv2dFprop / Dgrad / Wgrad, NHWC), and gemm_entry / conv_entry: can_implement
 * (a refusal is GCB_NOT_SUPPORTED with CUTLASS's reason), a shared-memory check against
 * the device's opt-in limit, initialize once, then `iters` launches of run() on the given
 * stream, then cudaGetLastError.
 *
 * Why: the kernel types are the ones CUTLASS's own generator (cutlass_library/generator.py,
 * GenerateSM80_TensorOp_16816 / _1688) emits for these tiles -- threadblock swizzle
 * Identity8 for GEMMs, Identity4 for convolutions, StridedDgradIdentity1 for strided data
 * gradients, LinearCombination epilogues -- so the baseline is CUTLASS as its profiler
 * would run it, not a hand-tuned variant. Only the instantiation named by a config is
 * compiled in each translation unit (gemm_inst.cu / conv_inst.cu pick it by GCB_ID).
 */
#ifndef GPUCMP_CUTLASS_BENCH_KERNELS_CUH
#define GPUCMP_CUTLASS_BENCH_KERNELS_CUH

#include <cstdarg>
#include <cstdio>
#include <type_traits>

#include <cuda_runtime.h>

#include "cutlass/cutlass.h"
#include "cutlass/conv/conv2d_problem_size.h"
#include "cutlass/conv/device/implicit_gemm_convolution.h"
#include "cutlass/conv/kernel/default_conv2d_dgrad.h"
#include "cutlass/conv/kernel/default_conv2d_fprop.h"
#include "cutlass/conv/kernel/default_conv2d_wgrad.h"
#include "cutlass/conv/threadblock/threadblock_swizzle.h"
#include "cutlass/epilogue/thread/linear_combination.h"
#include "cutlass/gemm/device/gemm.h"
#include "cutlass/gemm/threadblock/threadblock_swizzle.h"

#include "entry.h"

namespace gcb {

/* ------------------------------------------------------------------ data types */
struct f16 {
    using E = cutlass::half_t;
    using Inst = cutlass::gemm::GemmShape<16, 8, 16>;
};
struct bf16 {
    using E = cutlass::bfloat16_t;
    using Inst = cutlass::gemm::GemmShape<16, 8, 16>;
};
struct tf32 { /* float storage; OpMultiplyAdd on float operands is TF32 mma.sync on Sm80 */
    using E = float;
    using Inst = cutlass::gemm::GemmShape<16, 8, 8>;
};

using Row = cutlass::layout::RowMajor;
using Col = cutlass::layout::ColumnMajor;

/* conv passes */
struct Fprop {};
struct Dgrad {};
struct Wgrad {};

inline int fail(const Launch *l, int status, const char *fmt, ...)
{
    if (l && l->msg && l->msg_len > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(l->msg, (size_t)l->msg_len, fmt, ap);
        va_end(ap);
    }
    return status;
}

/* The device's opt-in shared memory per block (the current device). */
inline int smem_optin(int *bytes)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return -1;
    if (cudaDeviceGetAttribute(bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return -1;
    return 0;
}

/* Shared-memory and launch plumbing common to both kinds: checks the block fits this
 * device, initialises, launches `iters` times. */
template <class Device, class Arguments>
int launch(Device &op, const Arguments &args, int smem, const Launch *l, const char *what)
{
    int optin = 0;
    if (smem_optin(&optin) != 0) {
        cudaError_t e = cudaGetLastError();
        return fail(l, GCB_CUDA_ERROR, "%s: cannot query the device: %s", what, cudaGetErrorString(e));
    }
    if (smem > optin)
        return fail(l, GCB_NOT_SUPPORTED, "%s: needs %d bytes of shared memory per block, the device allows %d",
                    what, smem, optin);
    size_t need = Device::get_workspace_size(args);
    if (need > l->workspace_bytes || (need && !l->workspace))
        return fail(l, GCB_INVALID_ARG, "%s: needs %zu bytes of workspace, got %zu", what, need, l->workspace_bytes);
    if (l->iters < 1) return fail(l, GCB_INVALID_ARG, "%s: iters must be >= 1, got %d", what, l->iters);
    cudaStream_t stream = (cudaStream_t)l->stream;
    (void)cudaGetLastError(); /* a stale error is not ours */
    cutlass::Status s = op.initialize(args, l->workspace, stream);
    if (s != cutlass::Status::kSuccess) {
        cudaError_t e = cudaGetLastError();
        return fail(l, GCB_CUDA_ERROR, "%s: initialize failed: %s (CUDA: %s)", what, cutlassGetStatusString(s),
                    cudaGetErrorString(e));
    }
    for (int i = 0; i < l->iters; i++) {
        s = op.run(stream);
        if (s != cutlass::Status::kSuccess) {
            cudaError_t e = cudaGetLastError();
            return fail(l, GCB_CUDA_ERROR, "%s: launch %d failed: %s (CUDA: %s)", what, i, cutlassGetStatusString(s),
                        cudaGetErrorString(e));
        }
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return fail(l, GCB_CUDA_ERROR, "%s: %s", what, cudaGetErrorString(e));
    return GCB_OK;
}

/* ------------------------------------------------------------------ GEMM */
template <class DT, class LA, class LB, int TM, int TN, int TK, int WM, int WN, int WK, int STAGES, int ALIGN>
struct GemmOp {
    using E = typename DT::E;
    using LA_ = LA;
    using LB_ = LB;
    using Epilogue = cutlass::epilogue::thread::LinearCombination<E, ALIGN, float, float>;
    using Device = cutlass::gemm::device::Gemm<
        E, LA, E, LB, E, Row, float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80,
        cutlass::gemm::GemmShape<TM, TN, TK>, cutlass::gemm::GemmShape<WM, WN, WK>, typename DT::Inst, Epilogue,
        cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, STAGES, ALIGN, ALIGN, false,
        cutlass::arch::OpMultiplyAdd>;
    using Kernel = typename Device::GemmKernel;
};

template <class Op>
int gemm_entry(int what, const GemmArgs *a, const Launch *l, KernelInfo *info, size_t *ws)
{
    using Device = typename Op::Device;
    using E = typename Op::E;
    if (what == kInfo) {
        info->smem_bytes = (int)sizeof(typename Op::Kernel::SharedStorage);
        info->threads = Op::Kernel::kThreadCount;
        return GCB_OK;
    }
    if (a->m < 1 || a->n < 1 || a->k < 1) return fail(l, GCB_INVALID_ARG, "gemm: sizes must be >= 1");
    const bool a_row = std::is_same<typename Op::LA_, Row>::value, b_row = std::is_same<typename Op::LB_, Row>::value;
    const int lda = a_row ? a->k : a->m, ldb = b_row ? a->n : a->k, ldc = a->n;
    typename Device::Arguments args({a->m, a->n, a->k}, {(const E *)a->A, lda}, {(const E *)a->B, ldb},
                                    {(const E *)a->C, ldc}, {(E *)a->C, ldc}, {a->alpha, a->beta}, 1);
    if (what == kWorkspace) {
        *ws = Device::get_workspace_size(args);
        return GCB_OK;
    }
    if (!a->A || !a->B || !a->C) return fail(l, GCB_INVALID_ARG, "gemm: NULL operand");
    cutlass::Status s = Device::can_implement(args);
    if (s != cutlass::Status::kSuccess)
        return fail(l, GCB_NOT_SUPPORTED, "gemm %dx%dx%d: not supported by this config (can_implement: %s)", a->m,
                    a->n, a->k, cutlassGetStatusString(s));
    Device op;
    return launch(op, args, (int)sizeof(typename Op::Kernel::SharedStorage), l, "gemm");
}

/* ------------------------------------------------------------------ convolution */
template <class Pass, class E, class TB, class W, class I, class Epi, class Swz, int ST,
          cutlass::conv::IteratorAlgorithm ALGO, cutlass::conv::StrideSupport SS, int AL>
struct DefaultConv;

#define GCB_DEFAULT_CONV(PASS, NAME)                                                                              \
    template <class E, class TB, class W, class I, class Epi, class Swz, int ST,                                  \
              cutlass::conv::IteratorAlgorithm ALGO, cutlass::conv::StrideSupport SS, int AL>                     \
    struct DefaultConv<PASS, E, TB, W, I, Epi, Swz, ST, ALGO, SS, AL> {                                           \
        using Kernel = typename cutlass::conv::kernel::NAME<                                                      \
            E, cutlass::layout::TensorNHWC, E, cutlass::layout::TensorNHWC, E, cutlass::layout::TensorNHWC,       \
            float, cutlass::arch::OpClassTensorOp, cutlass::arch::Sm80, TB, W, I, Epi, Swz, ST,                   \
            cutlass::arch::OpMultiplyAdd, ALGO, SS, AL, AL>::Kernel;                                              \
    };
GCB_DEFAULT_CONV(Fprop, DefaultConv2dFprop)
GCB_DEFAULT_CONV(Dgrad, DefaultConv2dDgrad)
GCB_DEFAULT_CONV(Wgrad, DefaultConv2dWgrad)
#undef GCB_DEFAULT_CONV

template <class Pass, class DT, cutlass::conv::IteratorAlgorithm ALGO, cutlass::conv::StrideSupport SS, int TM,
          int TN, int TK, int WM, int WN, int WK, int STAGES, int ALIGN>
struct ConvOp {
    using E = typename DT::E;
    using Pass_ = Pass;
    using Epilogue = cutlass::epilogue::thread::LinearCombination<E, ALIGN, float, float>;
    static constexpr bool kStridedDgrad =
        std::is_same<Pass, Dgrad>::value && SS == cutlass::conv::StrideSupport::kStrided;
    using Swizzle = typename std::conditional<kStridedDgrad,
                                              cutlass::conv::threadblock::StridedDgradIdentityThreadblockSwizzle<1>,
                                              cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<4>>::type;
    using Kernel = typename DefaultConv<Pass, E, cutlass::gemm::GemmShape<TM, TN, TK>,
                                        cutlass::gemm::GemmShape<WM, WN, WK>, typename DT::Inst, Epilogue, Swizzle,
                                        STAGES, ALGO, SS, ALIGN>::Kernel;
    using Device = cutlass::conv::device::ImplicitGemmConvolution<Kernel>;
};

template <class Op>
int conv_entry(int what, const ConvArgs *a, const Launch *l, KernelInfo *info, size_t *ws)
{
    using Device = typename Op::Device;
    using E = typename Op::E;
    using Pass = typename Op::Pass_;
    using NHWC = cutlass::layout::TensorNHWC;
    if (what == kInfo) {
        info->smem_bytes = (int)sizeof(typename Op::Kernel::SharedStorage);
        info->threads = 32 * Device::kWarpCount;
        return GCB_OK;
    }
    const gcb_conv_problem &p = a->p;
    if (p.n < 1 || p.h < 1 || p.w < 1 || p.c < 1 || p.k < 1 || p.r < 1 || p.s < 1 || p.p < 1 || p.q < 1 ||
        p.stride_h < 1 || p.stride_w < 1 || p.dil_h < 1 || p.dil_w < 1 || p.split_k < 1 || p.pad_h < 0 ||
        p.pad_w < 0)
        return fail(l, GCB_INVALID_ARG, "conv: a size is out of range");
    cutlass::conv::Conv2dProblemSize ps(p.n, p.h, p.w, p.c, p.k, p.r, p.s, p.p, p.q, p.pad_h, p.pad_w, p.stride_h,
                                        p.stride_w, p.dil_h, p.dil_w, cutlass::conv::Mode::kCrossCorrelation,
                                        p.split_k, 1);
    cutlass::TensorRef<E, NHWC> x((E *)a->x, NHWC::packed({p.n, p.h, p.w, p.c}));
    cutlass::TensorRef<E, NHWC> w((E *)a->w, NHWC::packed({p.k, p.r, p.s, p.c}));
    cutlass::TensorRef<E, NHWC> y((E *)a->y, NHWC::packed({p.n, p.p, p.q, p.k}));
    cutlass::TensorRef<E, NHWC> A, B, D;
    const char *name;
    if (std::is_same<Pass, Fprop>::value) {
        A = x, B = w, D = y, name = "conv fprop";
    } else if (std::is_same<Pass, Dgrad>::value) {
        A = y, B = w, D = x, name = "conv dgrad";
    } else {
        A = y, B = x, D = w, name = "conv wgrad";
    }
    /* split-K (wgrad's long reduction): serial, the slices summing through D in turn */
    typename Device::Arguments args(ps, A, B, D, D, {a->alpha, a->beta}, cutlass::conv::SplitKMode::kSerial);
    if (what == kWorkspace) {
        *ws = Device::get_workspace_size(args);
        return GCB_OK;
    }
    if (!a->x || !a->w || !a->y) return fail(l, GCB_INVALID_ARG, "%s: NULL operand", name);
    cutlass::Status s = Device::can_implement(args);
    if (s != cutlass::Status::kSuccess)
        return fail(l, GCB_NOT_SUPPORTED, "%s: not supported by this config (can_implement: %s)", name,
                    cutlassGetStatusString(s));
    Device op;
    return launch(op, args, (int)sizeof(typename Op::Kernel::SharedStorage), l, name);
}

} // namespace gcb

#define GCB_PASTE_(a, b) a##b
#define GCB_PASTE(a, b) GCB_PASTE_(a, b)

#endif /* GPUCMP_CUTLASS_BENCH_KERNELS_CUH */
