/* gpucmp_variants.h -- kernel variants: one interface to list, force and report them.
 *
 * What it provides: the table of "variant points" (GC_VARIANT_POINTS below, the one
 * list every backend's choices come from), a process-wide forced value per point
 * ("auto" by default), the variant the calling thread's last call at each point ran,
 * availability on this build / device (a probe each backend registers), and one
 * environment parser (GPUCMP_FORCE, read once). core/variants.c implements it.
 *
 * Why: the backends choose kernels automatically (SIMD level, GEMM path, convolution
 * kernel, pipeline depth...), and tests, benchmarks and bug reports need to force each
 * choice and to know which one ran. One registry instead of a switch per file: a new
 * variant is one line here, and every point is listed, forced and reported the same way
 * (in C, from Python as _core.variants() / force_variant(), from the environment).
 *
 * Two kinds of point:
 *   choice  named variants; index 0 is "auto". Names flagged GC_VARIANT_REPORT_ONLY are
 *           outcomes `last` may report (the GEMM's "vendor" = cuBLASLt) but not forced.
 *   knob    an integer tuning value in [lo, hi] (a pipeline depth, a split count),
 *           named by its decimal text; 0 is "auto". `last` is the value used.
 * A point is present when its backend registered (gc_variant_register_backend: the CPU
 * backend always, the CUDA backend when the build has it). Forcing is process-wide and
 * meant for tests and benchmarks: change it between calls, not while ops run on other
 * threads. `last` is per thread (0 / "none" until a call at that point ran).
 */
#ifndef GPUCMP_VARIANTS_H
#define GPUCMP_VARIANTS_H

#include <stddef.h>

#include "gpucmp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------ the variants
 * V(P, SUFFIX, "name", flags): P is the enum prefix (GC_V_<POINT>_), index = position. */
#define GC_VARIANT_REPORT_ONLY 1

#define GC_VARIANTS_CPU_GEMM_SIMD(V, P) \
    V(P, AUTO, "auto", 0) V(P, AVX512, "avx512", 0) V(P, FMA, "fma", 0) V(P, GENERIC, "generic", 0)

/* the CPU recurrence (rnn_fwd / rnn_bwd): the fused kernels of csrc/cpu/rnn_fast.c at a
 * SIMD level, or "stepwise" (rnn.c's GEMM per step; also what reset_before GRUs and
 * recurrent dropout masks always run) */
#define GC_VARIANTS_CPU_RNN_SIMD(V, P) \
    V(P, AUTO, "auto", 0) V(P, AVX512, "avx512", 0) V(P, AVX2, "avx2", 0) V(P, GENERIC, "generic", 0) \
    V(P, STEPWISE, "stepwise", 0)

#define GC_VARIANTS_CUDA_GEMM_PATH(V, P) \
    V(P, AUTO, "auto", 0) V(P, SIMT, "simt", 0) V(P, MMA, "mma", 0) V(P, WGMMA, "wgmma", 0) \
    V(P, SMALL, "small", 0) V(P, VENDOR, "vendor", GC_VARIANT_REPORT_ONLY) \
    V(P, EPILOGUE, "epilogue", GC_VARIANT_REPORT_ONLY)

/* the epilogue of the Hopper wgmma GEMM kernel (wgmma_gemm_kernel.cuh: the GEMM and the
 * igemm convolutions): from registers, or staged in shared memory and written by TMA
 * (reduce-add for beta 1) where it applies; auto: TMA for short K */
#define GC_VARIANTS_CUDA_GEMM_WGMMA_EPI(V, P) V(P, AUTO, "auto", 0) V(P, REGS, "regs", 0) V(P, TMA, "tma", 0)

/* the convolution passes: a kernel, "gemm" (the GEMM route of stride-1 unpadded 1x1
 * layers where it is valid, else auto) or "conv" (auto, never the GEMM route) */
#define GC_VARIANTS_CUDA_CONV2D_FWD(V, P) \
    V(P, AUTO, "auto", 0) V(P, SIMT, "simt", 0) V(P, MMA, "mma", 0) V(P, DIRECT, "direct", 0) \
    V(P, SMALLC, "smallc", 0) V(P, WGMMA, "wgmma", 0) V(P, GEMM, "gemm", 0) V(P, CONV, "conv", 0)

#define GC_VARIANTS_CUDA_CONV2D_BWD_DATA(V, P) \
    V(P, AUTO, "auto", 0) V(P, SIMT, "simt", 0) V(P, MMA, "mma", 0) V(P, WGMMA, "wgmma", 0) \
    V(P, GEMM, "gemm", 0) V(P, CONV, "conv", 0) V(P, SCATTER, "scatter", GC_VARIANT_REPORT_ONLY) \
    V(P, SMALLC, "smallc", 0)

#define GC_VARIANTS_CUDA_CONV2D_WGRAD(V, P) \
    V(P, AUTO, "auto", 0) V(P, SIMT, "simt", 0) V(P, MMA, "mma", 0) V(P, SMALLC, "smallc", 0) \
    V(P, WGMMA, "wgmma", 0) V(P, GEMM, "gemm", 0) V(P, CONV, "conv", 0)

/* the Hopper wgmma convolution kernels (conv2d_wgmma.cu, conv2d_wgmma_igemm.cu): the
 * forward on halo / im2col (resident 64-filter weight slices, stride 1) or igemm (the
 * GEMM kernel with an im2col A: any stride); the stride-1 data gradient on halo or
 * igemm (im2col forced there means halo) */
#define GC_VARIANTS_CUDA_CONV2D_FWD_WGMMA(V, P) \
    V(P, AUTO, "auto", 0) V(P, HALO, "halo", 0) V(P, IM2COL, "im2col", 0) V(P, IGEMM, "igemm", 0)

/* block shapes of the wgmma weight gradient: A = d(y) or x, s(hared) or a(lternate)
 * K-blocks, NB = 1..4 B boxes; index - 1 = a_x << 3 | alt << 2 | (NB - 1) */
#define GC_VARIANTS_CUDA_CONV2D_WGRAD_WGMMA(V, P) \
    V(P, AUTO, "auto", 0) \
    V(P, DS1, "ds1", 0) V(P, DS2, "ds2", 0) V(P, DS3, "ds3", 0) V(P, DS4, "ds4", 0) \
    V(P, DA1, "da1", 0) V(P, DA2, "da2", 0) V(P, DA3, "da3", 0) V(P, DA4, "da4", 0) \
    V(P, XS1, "xs1", 0) V(P, XS2, "xs2", 0) V(P, XS3, "xs3", 0) V(P, XS4, "xs4", 0) \
    V(P, XA1, "xa1", 0) V(P, XA2, "xa2", 0) V(P, XA3, "xa3", 0) V(P, XA4, "xa4", 0)

/* which implementation runs a recurrent layer, read when a plan is built: auto = the
 * layer's own choice (use_cudnn=True: cudnn, else own), own = gpucmp's kernels for every
 * layer, cudnn = cuDNN's RNN API for every layer (layer_rnn_cudnn.c; refused where a
 * layer is not cuDNN-compatible) */
#define GC_VARIANTS_CUDA_RNN_IMPL(V, P) V(P, AUTO, "auto", 0) V(P, OWN, "own", 0) V(P, CUDNN, "cudnn", 0)

/* the recurrence of rnn_fwd / rnn_bwd: one launch per time step, or one persistent
 * launch for all steps (rnn_persistent.cu; refused where it does not fit on chip), its
 * groups exchanging through global memory (persistent) or as thread-block clusters
 * through distributed shared memory (cluster: sm_90+; auto does not pick it), or one
 * launch whose CTAs each hold all of U in registers and exchange nothing (resident,
 * rnn_resident.cu: small U only; auto tries it first) */
#define GC_VARIANTS_CUDA_RNN(V, P) \
    V(P, AUTO, "auto", 0) V(P, STEPWISE, "stepwise", 0) V(P, PERSISTENT, "persistent", 0) \
    V(P, CLUSTER, "cluster", 0) V(P, RESIDENT, "resident", 0)

/* ------------------------------------------------------------------ the points
 * C(ID, "name", "backend", variant list, "help") for a choice,
 * K(ID, "name", "backend", lo, hi, "help") for a knob. */
#define GC_VARIANT_POINTS(C, K) \
    C(CPU_GEMM_SIMD, "cpu.gemm.simd", "cpu", GC_VARIANTS_CPU_GEMM_SIMD, \
      "CPU GEMM micro-kernel (gemm, conv2d): AVX-512, AVX+FMA or portable C") \
    C(CPU_RNN_SIMD, "cpu.rnn.simd", "cpu", GC_VARIANTS_CPU_RNN_SIMD, \
      "CPU recurrence kernel (rnn_fwd, rnn_bwd): fused AVX-512, AVX2+FMA or portable C, or stepwise") \
    C(CUDA_GEMM_PATH, "cuda.gemm.path", "cuda", GC_VARIANTS_CUDA_GEMM_PATH, \
      "CUDA GEMM kernel: exact-f32 SIMT, mma.sync, Hopper wgmma, small tiles + split K") \
    C(CUDA_GEMM_WGMMA_EPI, "cuda.gemm.wgmma_epi", "cuda", GC_VARIANTS_CUDA_GEMM_WGMMA_EPI, \
      "epilogue of the Hopper wgmma GEMM kernel (GEMM, igemm convolutions): registers, or TMA stores " \
      "from shared memory (16-bit C, not scattered; auto: K <= 1024)") \
    C(CUDA_CONV2D_FWD, "cuda.conv2d.fwd", "cuda", GC_VARIANTS_CUDA_CONV2D_FWD, \
      "CUDA conv2d forward kernel") \
    C(CUDA_CONV2D_BWD_DATA, "cuda.conv2d.bwd_data", "cuda", GC_VARIANTS_CUDA_CONV2D_BWD_DATA, \
      "CUDA conv2d data-gradient kernel (scatter: the strided 1x1 mma.sync GEMM)") \
    C(CUDA_CONV2D_WGRAD, "cuda.conv2d.wgrad", "cuda", GC_VARIANTS_CUDA_CONV2D_WGRAD, \
      "CUDA conv2d weight-gradient kernel") \
    C(CUDA_CONV2D_FWD_WGMMA, "cuda.conv2d.fwd_wgmma", "cuda", GC_VARIANTS_CUDA_CONV2D_FWD_WGMMA, \
      "which Hopper wgmma convolution kernel: halo (where it fits), TMA im2col (resident weight slice) or " \
      "igemm (the GEMM kernel, im2col A; any stride); the data gradient: halo or igemm") \
    C(CUDA_CONV2D_WGRAD_WGMMA, "cuda.conv2d.wgrad_wgmma", "cuda", GC_VARIANTS_CUDA_CONV2D_WGRAD_WGMMA, \
      "block shape of the Hopper wgmma weight gradient (auto: its cost model)") \
    C(CUDA_RNN, "cuda.rnn", "cuda", GC_VARIANTS_CUDA_RNN, \
      "CUDA recurrence (rnn_fwd / rnn_bwd): one launch per step, or one persistent launch for all steps " \
      "(exchanging through global memory, or through a Hopper cluster's shared memory), or resident: " \
      "one launch, each block holding all of a small U in registers (SimpleRNN u <= 128, LSTM / GRU u <= 64)") \
    K(CUDA_CONV2D_MMA_STAGES, "cuda.conv2d.mma_stages", "cuda", 3, 7, \
      "cp.async stages of the mma.sync implicit GEMM (forward, data gradient)") \
    K(CUDA_CONV2D_MMA_SPLITS, "cuda.conv2d.mma_splits", "cuda", 1, 65535, \
      "at most this many split-K ranges of the mma.sync implicit GEMM (1: never split)") \
    K(CUDA_CONV2D_WGRAD_MMA_STAGES, "cuda.conv2d.wgrad_mma_stages", "cuda", 3, 7, \
      "cp.async stages of the mma.sync weight-gradient kernel") \
    K(CUDA_CONV2D_WGMMA_STAGES, "cuda.conv2d.wgmma_stages", "cuda", 2, 8, \
      "at most this many ring stages of the wgmma forward kernels (halo >= 2, im2col >= 3)") \
    K(CUDA_CONV2D_WGMMA_BLOCKS, "cuda.conv2d.wgmma_blocks", "cuda", 1, 65535, \
      "at most this many persistent blocks per filter tile of the wgmma forward kernels") \
    K(CUDA_CONV2D_WGRAD_WGMMA_SPLITS, "cuda.conv2d.wgrad_wgmma_splits", "cuda", 1, 65535, \
      "split-K ranges of the wgmma weight gradient (at most one per 64-pixel K-block)") \
    K(CUDA_CONV2D_WGRAD_WGMMA_STAGES, "cuda.conv2d.wgrad_wgmma_stages", "cuda", 2, 8, \
      "at most this many ring stages of the wgmma weight gradient (even; >= 4 alternating)") \
    K(CUDA_SMEM_LIMIT_KB, "cuda.smem_limit_kb", "cuda", 16, 227, \
      "plan every kernel for at most this many KB of shared memory per block (and one KB more " \
      "per SM): 99 plans as an sm_86 card (RTX A4000 / A5000) does; with GPUCMP_CUDA_SMS=48 an " \
      "A4000's SMs too") \
    C(CUDA_RNN_IMPL, "cuda.rnn.impl", "cuda", GC_VARIANTS_CUDA_RNN_IMPL, \
      "recurrent layers (when a plan is built): the layer's choice (use_cudnn=True: cuDNN), gpucmp's " \
      "kernels for all, or cuDNN's RNN API for all (the baseline)")

#define GC_VP_ENUM_C_(id, name, be, list, help) GC_VP_##id,
#define GC_VP_ENUM_K_(id, name, be, lo, hi, help) GC_VP_##id,
typedef enum { GC_VARIANT_POINTS(GC_VP_ENUM_C_, GC_VP_ENUM_K_) GC_VP_COUNT } gc_vp;
#undef GC_VP_ENUM_C_
#undef GC_VP_ENUM_K_

#define GC_V_ENUM_(P, suffix, name, flags) P##suffix,
enum { GC_VARIANTS_CPU_GEMM_SIMD(GC_V_ENUM_, GC_V_SIMD_) };
enum { GC_VARIANTS_CPU_RNN_SIMD(GC_V_ENUM_, GC_V_CRNN_) };
enum { GC_VARIANTS_CUDA_GEMM_PATH(GC_V_ENUM_, GC_V_GEMM_) };
enum { GC_VARIANTS_CUDA_GEMM_WGMMA_EPI(GC_V_ENUM_, GC_V_WGEPI_) };
enum { GC_VARIANTS_CUDA_CONV2D_FWD(GC_V_ENUM_, GC_V_FWD_) };
enum { GC_VARIANTS_CUDA_CONV2D_BWD_DATA(GC_V_ENUM_, GC_V_BWDD_) };
enum { GC_VARIANTS_CUDA_CONV2D_WGRAD(GC_V_ENUM_, GC_V_WGRAD_) };
enum { GC_VARIANTS_CUDA_CONV2D_FWD_WGMMA(GC_V_ENUM_, GC_V_FWDWG_) };
enum { GC_VARIANTS_CUDA_CONV2D_WGRAD_WGMMA(GC_V_ENUM_, GC_V_WGWB_) };
enum { GC_VARIANTS_CUDA_RNN(GC_V_ENUM_, GC_V_RNN_) };
enum { GC_VARIANTS_CUDA_RNN_IMPL(GC_V_ENUM_, GC_V_RNNI_) };
#undef GC_V_ENUM_

typedef enum { GC_VARIANT_CHOICE = 0, GC_VARIANT_KNOB = 1 } gc_variant_kind;

typedef struct {
    const char *name;                 /* "cuda.gemm.path": backend.op.what */
    const char *backend;              /* "cpu", "cuda" */
    const char *help;
    gc_variant_kind kind;
    int n_names;                      /* choice: every name, "auto" first */
    const char *const *names;
    const unsigned char *flags;       /* per name: GC_VARIANT_REPORT_ONLY */
    int lo, hi;                       /* knob: the values it takes */
} gc_variant_point;

/* ------------------------------------------------------------------ listing */
/* Points in the table (GC_VP_COUNT) and each one's description (NULL past the end). */
const gc_variant_point *gc_variant_point_at(int point);
/* The index of a point by name, or -1. */
int gc_variant_lookup(const char *name);
/* 1 when the point's backend registered (is in this build). */
int gc_variant_present(int point);
/* 1 when value (a choice index, or a knob value; 0 = auto, always available on a present
 * point) can run on this build and device; else 0 and *why (may be NULL) says why. May
 * initialise the backend's first device to ask (the CUDA probe loads the kernel images). */
int gc_variant_available(int point, int value, const char **why);

/* ------------------------------------------------------------------ forcing, reporting */
/* Forces a point by names: value "auto" (or a knob's "0") returns to the automatic
 * choice. GC_ERR_INVALID_ARG: unknown point, unknown name, a report-only name or a knob
 * value outside [lo, hi] (the message names the point and lists what is valid);
 * GC_ERR_UNSUPPORTED: the point's backend is not in this build, or the variant cannot
 * run here (the message says why and lists the available names). */
gc_status gc_variant_force(const char *point, const char *value);
/* The same by index and value. */
gc_status gc_variant_force_value(int point, int value);
/* Every point (point NULL) or one back to "auto", and the calling thread's `last` of it
 * to "none". The environment is not read again. */
gc_status gc_variant_reset(const char *point);
/* "auto", a variant name or a knob value: the forced value, written into buf. */
const char *gc_variant_forced_name(int point, char *buf, size_t n);
/* "none" or what the calling thread's last call at this point ran, written into buf. */
const char *gc_variant_last_name(int point, char *buf, size_t n);

/* ------------------------------------------------------------------ for the backends */
/* The probe a backend registers: 1 when value (never 0) of one of its points can run,
 * else 0 with a static reason in *why. */
typedef int (*gc_variant_probe)(int point, int value, const char **why);
/* Registers a backend's points (present from now on). probe NULL: every variant is
 * taken as available (the kernels refuse what they cannot run). probe_at_env: the
 * environment's entries for this backend are checked with the probe when they are read
 * (cheap probes only: the CUDA one would create a context at import, so it is not). */
void gc_variant_register_backend(const char *backend, gc_variant_probe probe, int probe_at_env);
/* The forced value of a point (0 = auto): what the dispatch code reads per call. */
int gc_variant_forced(gc_vp point);
/* Records what the calling thread's call at `point` ran (0: nothing, "none"). */
void gc_variant_ran(gc_vp point, int value);
/* The calling thread's last value recorded at `point` (0 = none). */
int gc_variant_last(gc_vp point);

/* ------------------------------------------------------------------ the environment
 * Read once, at the first use of this interface or when gc_variants_load_env is called
 * (the Python module calls it at import, after registering the backends):
 *   GPUCMP_FORCE="point=value,point=value"  e.g. "cuda.conv2d.wgrad=wgmma,cuda.gemm.path=mma"
 * and, deprecated aliases applied before it (so GPUCMP_FORCE wins):
 *   GPUCMP_CPU_SIMD=avx512|fma|generic   -> cpu.gemm.simd (ignored where unknown or the
 *                                           CPU lacks it, as before)
 *   GPUCMP_CONV_GEMM=gemm|1|on           -> cuda.conv2d.{fwd,bwd_data,wgrad}=gemm
 *   GPUCMP_CONV_GEMM=conv|0|off          -> cuda.conv2d.{fwd,bwd_data,wgrad}=conv
 *   GPUCMP_CONV_WGRAD=wgmma|1|on         -> cuda.conv2d.wgrad=wgmma
 *   GPUCMP_CONV_WGRAD=mma|0|off          -> cuda.conv2d.wgrad=mma
 *   GPUCMP_CONV_WGRAD_VARIANT=da3 ...    -> cuda.conv2d.wgrad_wgmma=da3
 * An entry of GPUCMP_FORCE that is malformed, names an unknown point or value, or (for
 * backends probed at load) a variant this machine lacks is skipped and described in
 * gc_variants_env_report(). */
void gc_variants_load_env(void);
/* "" when every GPUCMP_FORCE entry applied, else one line per skipped entry. */
const char *gc_variants_env_report(void);

#ifdef __cplusplus
}
#endif

#endif /* GPUCMP_VARIANTS_H */
