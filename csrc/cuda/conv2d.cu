/* conv2d.cu -- 2-D convolution on CUDA: the op adapters (conv2d_fwd, conv2d_bwd_data,
 * conv2d_bwd_filter) and gpucmp's own Tensor Core kernels.
 *
 * Semantics are those of csrc/cpu/conv2d.c: NHWC input, kernel (KH, KW, C, F) as Keras
 * stores it, cross-correlation, strides, dilation, Keras valid / same padding (geometry
 * from gc_conv2d_geometry only). Storage is f32, f16 or bf16 (one dtype per call);
 * accumulation is always float32. f16/bf16 run on mma.sync.m16n8k16; f32 runs as TF32
 * (mma.sync.m16n8k8, operands rounded with cvt.rna) when gc_get_allow_tf32(), else on
 * the exact-f32 SIMT kernels of conv2d_simt.cu.
 * conv2d_bwd_data's accumulate (dx += the gradient: the plan's fan-out) is added in the
 * epilogue by the GEMM route and the Hopper kernels; for the others the gradient is
 * staged in gc_cuda_staging and added with one elementwise pass (staged_bwd_data).
 *
 * Why implicit GEMM, and which GEMMs (no im2col matrix is ever materialised):
 *   forward      M = N*OH*OW pixels, N = F, K = KH*KW*C; A gathered from NHWC x
 *   bwd data     M = N*H*W pixels,   N = C, K = KH*KW*F; A gathered from dy at
 *                oh = (h + pad - kh*dh) / sh where divisible (a predicated gather for
 *                strides > 1: the skipped taps are zeros; no atomics: deterministic)
 *   bwd filter   M = KH*KW*C (+1), N = F, K = N*OH*OW; split-K over pixels into a
 *                float32 workspace, then a fixed-order second pass (deterministic).
 *                db rides along as one extra GEMM row whose A values are all 1, so
 *                the column sums of dy come out of the same pass.
 * Forward and backward data are the same kernel (one instantiation per dtype): both
 * gather an NHWC "source" image along one tap and a run of channels per K-tile, and
 * both read B K-major: for bwd data the kernel (KH,KW,C,F) already is (row c, tap, f
 * contiguous); for forward it is transposed once per call to (F, KH*KW*C) in the
 * workspace (a tiny kernel; the weights are small). With both operands K-major every
 * fragment comes from ldmatrix (also for TF32: an 8x4 block of floats is an 8x8 b16
 * matrix). The K loop runs over (channel chunk of 64 bytes, kh, kw), kw fastest. A
 * chunk past C is zero-filled, so any C works; C % 8 (f16) / C % 4 (f32) == 0 takes
 * 16-byte cp.async copies (zero-fill for padding), otherwise element-wise loads. The
 * loader is what limits an mma.sync conv (ncu: issue-bound, not L2-bound), so each row
 * precomputes its source offset and a bit mask of the taps inside the image: a K-tile
 * costs an add and a bit test per row, no divisions.
 *
 * Tiles: 128 x 64 output tile per block of 4 warps (64 x 32 each), K-tiles of 64 bytes
 * per row, a cp.async pipeline whose depth is chosen at run time (3 stages = 45 KB:
 * measured best on an H200, 4 blocks per SM; no opt-in needed). Rows are padded to 80
 * bytes so ldmatrix is conflict-free. The epilogue (bias + activation, rounding to the
 * storage type) goes through shared memory so that global stores are 16-byte and
 * coalesced. When the output tiles alone cannot fill the GPU (small M: the seeds' 3x3
 * output layer) K is split over blockIdx.z into float32 partials in the workspace and
 * a fixed-order reduction applies bias + activation (deterministic).
 *
 * Special cases: C < 8 (the first layer of most CNNs, C = 1: K = 9) uses a direct
 * kernel (8 filters per thread, exact f32 FMA) instead of padding K to 32; the same
 * tiny channel counts go to the SIMT kernels for the backward passes, except where
 * KH*KW*C >= 48 (forward) / > 64 (weight gradient), e.g. ResNet's 7x7x3 stem: there
 * conv2d_smallc.cu's Tensor Core kernels run, whose K / M index is (kh, kw*C + c), one
 * contiguous run of x per kernel row; and the data gradient with F >= 16 and strides
 * 1-2, which conv2d_smallc_dgrad.cu's kernel takes (runs of 16 input pixels of one
 * stride residue class as m16n8 GEMMs over the class's taps). A 1x1 stride-1 unpadded convolution is a plain
 * GEMM on the NHWC matrices: where the GEMM backend's own kernels are the faster ones
 * (big channel counts on Hopper, see conv2d_gemm.cu) every pass goes to gc_cuda_gemm;
 * elsewhere the implicit GEMM here runs it (with one tap the gather is a plain row
 * read). A strided 1x1 convolution's data gradient is nonzero only at the
 * pixels the stride samples: dx is zeroed (cudaMemsetAsync) and a GEMM over the dy
 * pixels (M = N*OH*OW, K = F: a plain row read) scatters its output rows to those
 * pixels in the epilogue, instead of the predicated gather over all N*H*W pixels that
 * would spend 3/4 of its MMAs (stride 2) on zeros.
 *
 * Hopper: on a compute capability 9.0 device with sm_90a code, a 16-bit forward with
 * stride 1, dilation 1, C and F multiples of 64 and at least one 128-row tile per SM
 * goes to conv2d_wgmma.cu (persistent wgmma kernels, weights resident in shared memory:
 * the halo kernel, which reads each input tile once for all taps, or the TMA im2col one
 * for larger weight slices); when neither applies (GC_ERR_UNSUPPORTED before any
 * launch) the mma.sync kernel here runs instead. Forward and data gradient also go to
 * the GEMM kernel with an im2col A (conv2d_wgmma_igemm.cu, gc_conv2d_igemm_wanted:
 * strided layers and big weight slices), for 16-bit storage and for float32 as TF32 --
 * the same rule; float32 only while gc_get_allow_tf32() is on (exact float32 never gets
 * past use_simt, and igemm refuses it when forced), and never the halo / im2col kernels
 * of conv2d_wgmma.cu, which refuse any float32. The weight gradient of stride-1 layers
 * and of unpadded 1x1 layers of any stride (C and F multiples of 64, enough pixels),
 * 16-bit or float32 as TF32 (gc_conv2d_wgrad_wgmma_wanted: exact float32 never, and the
 * kernel refuses it when forced), goes to conv2d_wgmma_wgrad.cu (wgmma on TMA-loaded x /
 * dy boxes, split K with the same fixed-order reduction) before the GEMM route.
 */
#include "conv2d_ptx.cuh"

#include <limits.h>
#include <stdint.h>

/* Variant points (gpucmp_variants.h; tests/cuda/test_conv.cu forces them), one per pass:
 * cuda.conv2d.fwd / .bwd_data / .wgrad. A forced kernel runs wherever it applies:
 * simt (the SIMT reference), mma (the Tensor Core implicit GEMM; for the data gradient
 * of a strided 1x1 layer its scatter form, reported "scatter"), direct (the small-C
 * forward), smallc (conv2d_smallc.cu, forward and weight gradient, any C;
 * conv2d_smallc_dgrad.cu, data gradient, C <= 8; elsewhere as auto without the GEMM
 * route and the wgmma kernels), wgmma (conv2d_wgmma.cu /
 * conv2d_wgmma_wgrad.cu: their GC_ERR_UNSUPPORTED where they do not apply); a forced
 * kernel never takes the GEMM route. "gemm" and "conv" keep the automatic choice and
 * only steer the GEMM route of stride-1 unpadded 1x1 layers (conv2d_gemm.cu): always
 * where it is valid / never. The variant each pass ran is recorded with
 * gc_variant_ran (variant_last), "gemm" for the route. Inside this file a forced
 * kernel is a `path` number (PATH_*), as the dispatch below reads it. */
enum { PATH_AUTO = 0, PATH_SIMT, PATH_MMA, PATH_DIRECT, PATH_WGMMA, PATH_SMALLC };

static int fwd_path(void)
{
    switch (gc_variant_forced(GC_VP_CUDA_CONV2D_FWD)) {
    case GC_V_FWD_SIMT: return PATH_SIMT;
    case GC_V_FWD_MMA: return PATH_MMA;
    case GC_V_FWD_DIRECT: return PATH_DIRECT;
    case GC_V_FWD_SMALLC: return PATH_SMALLC;
    case GC_V_FWD_WGMMA: return PATH_WGMMA;
    default: return PATH_AUTO; /* auto, gemm, conv */
    }
}

static int bwd_data_path(void)
{
    switch (gc_variant_forced(GC_VP_CUDA_CONV2D_BWD_DATA)) {
    case GC_V_BWDD_SIMT: return PATH_SIMT;
    case GC_V_BWDD_MMA: return PATH_MMA;
    case GC_V_BWDD_WGMMA: return PATH_WGMMA;
    case GC_V_BWDD_SMALLC: return PATH_SMALLC;
    default: return PATH_AUTO;
    }
}

/* the weight gradient's wgmma kernel is forced through *wgw (1 forced, 0 automatic,
 * 2 never), as conv2d_wgmma_wgrad.cu is asked before the path below */
static int wgrad_path(int *wgw)
{
    const int f = gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD);
    int path = PATH_AUTO;
    switch (f) {
    case GC_V_WGRAD_SIMT: path = PATH_SIMT; break;
    case GC_V_WGRAD_MMA: path = PATH_MMA; break;
    case GC_V_WGRAD_SMALLC: path = PATH_SMALLC; break;
    default: break;
    }
    *wgw = f == GC_V_WGRAD_WGMMA ? 1 : path == PATH_AUTO ? 0 : 2;
    return path;
}

/* ------------------------------------------------------------------ tile shapes
 * One block computes a 128 x 64 output tile with 4 warps (64 x 32 each). A K-tile is
 * IG_KB bytes of every smem row (64: 32 halves / 16 floats); rows are padded by 16
 * bytes so ldmatrix is conflict-free. The number of pipeline stages is chosen at run
 * time (dynamic shared memory) from the device, see ig_stages(). */
#ifndef IG_KB
#define IG_KB 64
#endif
#ifndef IG_MINB
#define IG_MINB (IG_KB == 64 ? 4 : 2)
#endif
#define IG_BM 128
#define IG_BN 64
#define IG_THREADS 128
#define IG_PITCH (IG_KB + 16)
#define IG_SEGS (IG_KB / 16)              /* 16-byte segments per smem row */
#define IG_RSTEP (IG_THREADS / IG_SEGS)   /* rows covered by one loader pass */
#define IG_NA (IG_BM / IG_RSTEP)          /* A rows per thread */
#define IG_NB (IG_BN / IG_RSTEP)          /* B rows per thread */
#define IG_A_BYTES (IG_BM * IG_PITCH)
#define IG_STAGE_BYTES ((IG_BM + IG_BN) * IG_PITCH)
#define IG_MAX_STAGES 7

/* wait until at most n cp.async groups are pending (n is uniform; PTX needs an immediate) */
/* A warp's 64 x 32 accumulator block (mma.sync C fragments: acc[mi][ni][2*hf + j] is
 * row row0 + mi*16 + g + hf*8, column col0 + ni*8 + 2*t + j) as raw float32 partial sums
 * into part (rows x cols, row-major), predicated at the edges; both implicit-GEMM
 * kernels write their split-K partials this way. */
static __device__ __forceinline__ void cv_store_partials(float *part, int rows, int cols, int row0, int col0,
                                                         int g, int t, const float (&acc)[4][4][4])
{
    const bool pair = (cols & 1) == 0;
#pragma unroll
    for (int mi = 0; mi < 4; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            int m = row0 + mi * 16 + g + hf * 8;
            if (m >= rows) continue;
            float *row = part + (int64_t)m * cols;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                int n = col0 + ni * 8 + 2 * t;
                if (n >= cols) continue;
                if (pair) {
                    *(float2 *)(row + n) = make_float2(acc[mi][ni][2 * hf], acc[mi][ni][2 * hf + 1]);
                } else {
                    row[n] = acc[mi][ni][2 * hf];
                    if (n + 1 < cols) row[n + 1] = acc[mi][ni][2 * hf + 1];
                }
            }
        }
}

/* Implicit GEMM over an NHWC "source" image (x for forward, dy for bwd data).
 * Output pixel (n, p, q) and tap (kh, kw) read source row
 *     sh_ = (p*ah + bh + kh*ch) / divh,  sw_ = (q*aw + bw + kw*cw) / divw
 * when both divisions are exact and in range, else zero:
 *     forward:  a = stride, b = -pad, c = dilation,  div = 1
 *     bwd data: a = 1,      b = pad,  c = -dilation, div = stride.
 * With div == 1 and at most 32 taps ("fast"), each loader row keeps the offset of its
 * tap-(0,0) source pixel and a bit mask of the taps that land inside the image, so a
 * K-tile costs one add and one bit test per row (tap offsets kh*dsh + kw*dsw are the
 * same for every row). Otherwise (bwd data with stride > 1) the rows are recomputed
 * per K-tile with divisions. B element (GEMM column n, tap, channel c) is
 * wt[n*ldn + tap*ldtap + c]. Offsets are 32-bit (the adapter checks the sizes).
 * part != NULL: split-K, blockIdx.z takes K-tiles [z*ktps, (z+1)*ktps) and writes raw
 * float32 sums to part[z][m][n]; the bias, activation and rounding then happen in
 * conv_splitk_reduce_kernel. */
struct ig_args {
    const void *src, *wt, *bias;
    void *out;              /* (M, NN) row-major */
    float *part;            /* split-K partial sums or NULL */
    int SH, SW, SC;         /* source image (per sample) and its channels (= GEMM K per tap) */
    int PH, PW;             /* output pixels per sample */
    int KH, KW;
    int M, NN;
    int ah, bh, ch, divh;
    int aw, bw, cw, divw;
    int dsh, dsw;           /* fast path: element offset of one kh / kw step */
    int ldn, ldtap;
    int cchunks;            /* K-tiles per tap: ceil(SC / BK) */
    int ktps;               /* K-tiles per split */
    int stages;             /* pipeline depth (3..IG_MAX_STAGES) */
    int act, vec, vec_out, fast;
    int scat, oH, oW, osh, osw; /* scat: output row m = (n, p, q) goes to pixel (n, p*osh, q*osw)
                                 * of an (oH, oW) image (no split-K then) */
};

template <typename T>
static __global__ void __launch_bounds__(IG_THREADS, IG_MINB) conv_igemm_kernel(const ig_args a)
{
    constexpr int VEC = 16 / (int)sizeof(T); /* elements per 16-byte segment */
    constexpr int BK = IG_KB / (int)sizeof(T);
    extern __shared__ __align__(128) unsigned char smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.x * IG_BM, n0 = blockIdx.y * IG_BN;
    const T *src = (const T *)a.src;
    const T *wt = (const T *)a.wt;
    const int taps = a.KH * a.KW;
    const int KT = taps * a.cchunks;
    const int kt0 = blockIdx.z * a.ktps;
    const int nkt = min(KT, kt0 + a.ktps) - kt0;

    /* Loader: thread owns 16-byte segment `seg` of rows row0 + IG_RSTEP*i. */
    const int seg = tid % IG_SEGS, row0 = tid / IG_SEGS;
    int off[IG_NA], ahb[IG_NA], awb[IG_NA];
    unsigned mask[IG_NA];
    const int PQ = a.PH * a.PW;
#pragma unroll
    for (int i = 0; i < IG_NA; i++) {
        int m = m0 + row0 + IG_RSTEP * i;
        off[i] = 0;
        mask[i] = 0;
        ahb[i] = INT_MIN / 4; /* never in range, divisible or not */
        awb[i] = 0;
        if (m < a.M) {
            int n = m / PQ, r = m - n * PQ;
            int p = r / a.PW, q = r - p * a.PW;
            ahb[i] = p * a.ah + a.bh;
            awb[i] = q * a.aw + a.bw;
            off[i] = n * a.SH * a.SW * a.SC;
            if (a.fast) {
                off[i] += (ahb[i] * a.SW + awb[i]) * a.SC;
                unsigned mk = 0;
                int t = 0;
                for (int kh = 0; kh < a.KH; kh++) {
                    bool hok = (unsigned)(ahb[i] + kh * a.ch) < (unsigned)a.SH;
                    for (int kw = 0; kw < a.KW; kw++, t++)
                        if (hok && (unsigned)(awb[i] + kw * a.cw) < (unsigned)a.SW) mk |= 1u << t;
                }
                mask[i] = mk;
            }
        }
    }
    int boff[IG_NB];
    bool bok[IG_NB];
#pragma unroll
    for (int j = 0; j < IG_NB; j++) {
        int n = n0 + row0 + IG_RSTEP * j;
        bok[j] = n < a.NN;
        boff[j] = bok[j] ? n * a.ldn : 0;
    }
    const uint32_t sbase = cv_smem(smem);

    /* the next K-tile to load: (chunk, kh, kw), kw fastest -- consecutive tiles gather
     * the same rows shifted by one pixel */
    int lchunk = kt0 / taps, ltap = kt0 - lchunk * taps;
    int lkh = ltap / a.KW, lkw = ltap - lkh * a.KW;

    auto load_next = [&](int stage) {
        const int c = lchunk * BK + seg * VEC;
        const bool cok = c < a.SC;
        const uint32_t sA = sbase + stage * IG_STAGE_BYTES + row0 * IG_PITCH + seg * 16;
        const uint32_t sB = sA + IG_A_BYTES;
        const int toff = lkh * a.dsh + lkw * a.dsw + c;
#pragma unroll
        for (int i = 0; i < IG_NA; i++) {
            bool ok;
            int o;
            if (a.fast) {
                ok = (mask[i] >> ltap) & 1u;
                o = off[i] + toff;
            } else {
                int h = ahb[i] + lkh * a.ch, w = awb[i] + lkw * a.cw;
                ok = (h % a.divh) == 0 && (w % a.divw) == 0;
                h /= a.divh;
                w /= a.divw;
                ok = ok && (unsigned)h < (unsigned)a.SH && (unsigned)w < (unsigned)a.SW;
                o = off[i] + (h * a.SW + w) * a.SC + c;
            }
            const uint32_t d = sA + i * IG_RSTEP * IG_PITCH;
            if (a.vec) {
                ok = ok && cok;
                cv_cp16_cg(d, src + (ok ? o : 0), ok ? 16 : 0);
            } else {
                uint4 u;
                T *e = (T *)&u;
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    e[j] = (ok && c + j < a.SC) ? src[o + j] : gc_from_f<T>(0.0f);
                *(uint4 *)(smem + (d - sbase)) = u;
            }
        }
        const int bo = ltap * a.ldtap + c;
#pragma unroll
        for (int j = 0; j < IG_NB; j++) {
            const uint32_t d = sB + j * IG_RSTEP * IG_PITCH;
            const int o = boff[j] + bo;
            if (a.vec) {
                bool ok = bok[j] && cok;
                cv_cp16(d, wt + (ok ? o : 0), ok ? 16 : 0);
            } else {
                uint4 u;
                T *e = (T *)&u;
#pragma unroll
                for (int q = 0; q < VEC; q++)
                    e[q] = (bok[j] && c + q < a.SC) ? wt[o + q] : gc_from_f<T>(0.0f);
                *(uint4 *)(smem + (d - sbase)) = u;
            }
        }
        if (++lkw == a.KW) {
            lkw = 0;
            if (++lkh == a.KH) {
                lkh = 0;
                lchunk++;
            }
        }
        ltap = lkh * a.KW + lkw;
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    /* ldmatrix lane offsets (bytes within a stage) */
    const uint32_t a_off = (wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 8) * IG_PITCH + (lane >> 4) * 16;
    const uint32_t b_off = IG_A_BYTES + (wn * 32 + (lane & 7) + (lane >> 4) * 8) * IG_PITCH +
                           ((lane >> 3) & 1) * 16;

    const int S = a.stages;
    int wstage = 0, rstage = 0;
    for (int s = 0; s < S - 1; s++) {
        if (s < nkt) load_next(wstage);
        cv_cp_commit();
        wstage = wstage + 1 == S ? 0 : wstage + 1;
    }
    for (int kt = 0; kt < nkt; kt++) {
        cv_cp_wait_dyn(S - 2);
        __syncthreads();
        if (kt + S - 1 < nkt) load_next(wstage);
        cv_cp_commit();
        wstage = wstage + 1 == S ? 0 : wstage + 1;

        const uint32_t st = sbase + rstage * IG_STAGE_BYTES;
        rstage = rstage + 1 == S ? 0 : rstage + 1;
#pragma unroll
        for (int ks = 0; ks < IG_KB / 32; ks++) {
            uint32_t af[4][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                cv_ldsm4(af[mi], st + a_off + mi * 16 * IG_PITCH + ks * 32);
#pragma unroll
                for (int r = 0; r < 4; r++) af[mi][r] = cv_prep<T>(af[mi][r]);
            }
#pragma unroll
            for (int p = 0; p < 2; p++) {
                uint32_t r[4];
                cv_ldsm4(r, st + b_off + p * 16 * IG_PITCH + ks * 32);
                bf[2 * p][0] = cv_prep<T>(r[0]);
                bf[2 * p][1] = cv_prep<T>(r[1]);
                bf[2 * p + 1][0] = cv_prep<T>(r[2]);
                bf[2 * p + 1][1] = cv_prep<T>(r[3]);
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) cv_mma(acc[mi][ni], af[mi], bf[ni], T());
        }
    }
    cv_cp_wait<0>();
    __syncthreads();

    const int g = lane >> 2, t = lane & 3;
    if (a.part) { /* split-K: raw float32 partial sums, straight from the registers */
        cv_store_partials(a.part + (int64_t)blockIdx.z * a.M * a.NN, a.M, a.NN, m0 + wm * 64, n0 + wn * 32, g, t,
                          acc);
        return;
    }

    /* ---- epilogue: bias + act, round, stage the tile in smem, 16-byte stores */
    constexpr int CP = IG_BN * (int)sizeof(T) + 16; /* staging pitch (bytes) */
    const T *bias = (const T *)a.bias;
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        int col = wn * 32 + ni * 8 + 2 * t;
        float b0 = 0.0f, b1 = 0.0f;
        if (bias) {
            if (n0 + col < a.NN) b0 = gc_to_f(bias[n0 + col]);
            if (n0 + col + 1 < a.NN) b1 = gc_to_f(bias[n0 + col + 1]);
        }
#pragma unroll
        for (int mi = 0; mi < 4; mi++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                int r = wm * 64 + mi * 16 + g + hf * 8;
                T *d = (T *)(smem + r * CP) + col;
                d[0] = gc_from_f<T>(conv_act(acc[mi][ni][2 * hf] + b0, a.act));
                d[1] = gc_from_f<T>(conv_act(acc[mi][ni][2 * hf + 1] + b1, a.act));
            }
    }
    __syncthreads();
    constexpr int SEGS = IG_BN * (int)sizeof(T) / 16;
    T *out = (T *)a.out;
    for (int idx = tid; idx < IG_BM * SEGS; idx += IG_THREADS) {
        int r = idx / SEGS, s = idx - r * SEGS;
        int m = m0 + r, n = n0 + s * VEC;
        if (m >= a.M || n >= a.NN) continue;
        int64_t orow = m;
        if (a.scat) {
            const int ns = m / PQ, rr = m - ns * PQ, pp = rr / a.PW, qq = rr - pp * a.PW;
            orow = ((int64_t)ns * a.oH + pp * a.osh) * a.oW + (int64_t)qq * a.osw;
        }
        T *dst = out + orow * a.NN + n;
        const unsigned char *sp = smem + r * CP + s * 16;
        if (a.vec_out) {
            *(uint4 *)dst = *(const uint4 *)sp;
        } else {
            const T *e = (const T *)sp;
            for (int j = 0; j < VEC && n + j < a.NN; j++) dst[j] = e[j];
        }
    }
}

/* ------------------------------------------------------------------ backward filter
 * dW_ext[m][f] = sum_k A[m][k] * dy[k][f] over pixels k of this block's split, where
 * A[m][k] = x at (pixel k, tap of m, channel of m) for m < KC; row KC (db, when asked)
 * is the column sums of the split's dy, which the blocks of the first row tile add up
 * from the dy tiles they stage anyway (a ones row of A instead took an extra, mostly
 * empty row tile where KC % 128 == 0, and a scalar loader path that slowed every block
 * 2-3x on ResNet-50's layers).
 * Both operands are M/N-major (contiguous along m and f), so the tiles are stored
 * [k][m] / [k][n]: 16-bit fragments come from ldmatrix.trans, TF32 ones from 32-bit
 * shared loads (rows padded to 8 words mod 32: conflict-free). A thread's A segment
 * (one tap, VEC channels) is fixed for the whole block; per K-tile it decomposes its
 * pixel rows with multiply-shift divisions. Pipeline depth is chosen at run time. */
#define WG_BM 128
#define WG_BN 64
#define WG_THREADS 128
/* per stage: A [BK][BM] + B [BK][BN]; BK = 32 (16-bit) or 16 (f32): the same bytes */
#define WG_PA(sz) (WG_BM * (sz) + ((sz) == 2 ? 16 : 32))
#define WG_PB(sz) (WG_BN * (sz) + ((sz) == 2 ? 16 : 32))
#define WG_STAGE_BYTES 13312 /* 32*272 + 32*144 = 16*544 + 16*288 */
#ifndef WG_MINB
#define WG_MINB 4
#endif

struct wg_args {
    const void *x, *dy;
    float *part;        /* (S, Mext, F) */
    int H, W, C, OH, OW, F, KW;
    int sh, sw, dh, dw, pt, pl;
    int KC, Mext, P, chunk, stages; /* Mext = KC + 1 with the bias row (db), else KC */
    int vecA, vecB;
    cv_fastdiv ohw, ow;
};

template <typename T>
static __global__ void __launch_bounds__(WG_THREADS, WG_MINB) conv_wgrad_kernel(const wg_args a)
{
    constexpr int SZ = (int)sizeof(T);
    constexpr int VEC = 16 / SZ;
    constexpr int BK = 512 / SZ / 8; /* 32 or 16 pixel rows per stage */
    constexpr int PA = WG_PA(SZ), PB = WG_PB(SZ);
    constexpr int A_BYTES = BK * PA;
    constexpr int SEGA = WG_BM / VEC, RSTEP_A = WG_THREADS / SEGA; /* 4 passes */
    constexpr int SEGB = WG_BN / VEC, RSTEP_B = WG_THREADS / SEGB; /* 2 passes */
    static_assert(BK * PA + BK * PB == WG_STAGE_BYTES, "wgrad stage size");
    static_assert(RSTEP_A * 4 == BK && RSTEP_B * 2 == BK, "wgrad loader coverage");
    extern __shared__ __align__(128) unsigned char smem[];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.x * WG_BM, n0 = blockIdx.y * WG_BN;
    const int kbeg = blockIdx.z * a.chunk;
    const int kend = min(a.P, kbeg + a.chunk);
    const T *x = (const T *)a.x, *dy = (const T *)a.dy;
    const int OHW = a.OH * a.OW;

    /* A segment of this thread: rows m = m0 + segA*VEC .. +VEC-1 (one tap when vecA) */
    const int segA = tid % SEGA, rowA = tid / SEGA;
    const int mA = m0 + segA * VEC;
    int kindA = 0; /* 0 zero, 1 gather */
    int offh = 0, offw = 0, cA = 0;
    if (mA < a.KC) {
        kindA = 1;
        int tap = mA / a.C;
        cA = mA - tap * a.C;
        int kh = tap / a.KW, kw = tap - kh * a.KW;
        offh = kh * a.dh - a.pt;
        offw = kw * a.dw - a.pl;
    }
    const int segB = tid % SEGB, rowB = tid / SEGB;
    const int fB = n0 + segB * VEC;
    const uint32_t sbase = cv_smem(smem);
    const int KT = (kend - kbeg + BK - 1) / BK;

    auto load_tile = [&](int kt, int stage) {
        const uint32_t sA = sbase + stage * WG_STAGE_BYTES;
        const uint32_t sB = sA + A_BYTES;
        const int kb = kbeg + kt * BK;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int r = rowA + i * RSTEP_A, k = kb + r;
            uint32_t d = sA + r * PA + segA * 16;
            bool kin = k < kend;
            int n = 0, oh = 0, ow = 0;
            if (kin) {
                n = cv_div(k, a.ohw);
                int rem = k - n * OHW;
                oh = cv_div(rem, a.ow);
                ow = rem - oh * a.OW;
            }
            if (a.vecA) {
                int ih = oh * a.sh + offh, iw = ow * a.sw + offw;
                bool ok = kin && kindA == 1 && (unsigned)ih < (unsigned)a.H &&
                          (unsigned)iw < (unsigned)a.W;
                int o = ((n * a.H + ih) * a.W + iw) * a.C + cA;
                cv_cp16_cg(d, x + (ok ? o : 0), ok ? 16 : 0);
            } else {
                uint4 u;
                T *e = (T *)&u;
#pragma unroll
                for (int j = 0; j < VEC; j++) {
                    int m = mA + j;
                    float v = 0.0f;
                    if (kin && m < a.KC) {
                        int tap = m / a.C, c = m - tap * a.C;
                        int kh = tap / a.KW, kw = tap - kh * a.KW;
                        int ih = oh * a.sh + kh * a.dh - a.pt, iw = ow * a.sw + kw * a.dw - a.pl;
                        if ((unsigned)ih < (unsigned)a.H && (unsigned)iw < (unsigned)a.W)
                            v = gc_to_f(x[((n * a.H + ih) * a.W + iw) * a.C + c]);
                    }
                    e[j] = gc_from_f<T>(v);
                }
                *(uint4 *)(smem + (d - sbase)) = u;
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int r = rowB + i * RSTEP_B, k = kb + r;
            uint32_t d = sB + r * PB + segB * 16;
            const int o = k * a.F + fB;
            if (a.vecB) {
                bool ok = k < kend && fB < a.F;
                cv_cp16_cg(d, dy + (ok ? o : 0), ok ? 16 : 0);
            } else {
                uint4 u;
                T *e = (T *)&u;
#pragma unroll
                for (int j = 0; j < VEC; j++)
                    e[j] = (k < kend && fB + j < a.F) ? dy[o + j] : gc_from_f<T>(0.0f);
                *(uint4 *)(smem + (d - sbase)) = u;
            }
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    const int g = lane >> 2, t = lane & 3;
    const int S = a.stages;
    /* the bias row: sums of dy's columns over this split (block-uniform condition) */
    const bool dsum = a.Mext > a.KC && blockIdx.x == 0;
    float bsum0 = 0.0f, bsum1 = 0.0f;
    int wstage = 0, rstage = 0;
    for (int s = 0; s < S - 1; s++) {
        if (s < KT) load_tile(s, wstage);
        cv_cp_commit();
        wstage = wstage + 1 == S ? 0 : wstage + 1;
    }
    for (int kt = 0; kt < KT; kt++) {
        cv_cp_wait_dyn(S - 2);
        __syncthreads();
        if (kt + S - 1 < KT) load_tile(kt + S - 1, wstage);
        cv_cp_commit();
        wstage = wstage + 1 == S ? 0 : wstage + 1;

        const uint32_t sA = sbase + rstage * WG_STAGE_BYTES;
        const uint32_t sB = sA + A_BYTES;
        rstage = rstage + 1 == S ? 0 : rstage + 1;
        if (dsum) { /* db: this thread's two columns of the staged dy tile, rows rg, rg + 4, ... */
            const T *col = (const T *)(smem + (sB - sbase)) + 2 * (tid & 31);
#pragma unroll
            for (int r = tid >> 5; r < BK; r += 4) {
                struct alignas(2 * sizeof(T)) P2 { T x, y; };
                const P2 v = *(const P2 *)(col + r * (PB / SZ));
                bsum0 += gc_to_f(v.x);
                bsum1 += gc_to_f(v.y);
            }
        }
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t af[4][4], bf[4][2];
            if (SZ == 2) {
#pragma unroll
                for (int mi = 0; mi < 4; mi++)
                    cv_ldsm4_t(af[mi], sA + (ks * 16 + (lane & 7) + (lane >> 4) * 8) * PA +
                                           (wm * 64 + mi * 16 + ((lane >> 3) & 1) * 8) * 2);
#pragma unroll
                for (int p = 0; p < 2; p++) {
                    uint32_t r[4];
                    cv_ldsm4_t(r, sB + (ks * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * PB +
                                      (wn * 32 + p * 16 + (lane >> 4) * 8) * 2);
                    bf[2 * p][0] = r[0];
                    bf[2 * p][1] = r[1];
                    bf[2 * p + 1][0] = r[2];
                    bf[2 * p + 1][1] = r[3];
                }
            } else {
#pragma unroll
                for (int mi = 0; mi < 4; mi++) {
                    uint32_t base = sA + (ks * 8 + t) * PA + (wm * 64 + mi * 16 + g) * 4;
                    af[mi][0] = cv_prep<T>(cv_lds32(base));
                    af[mi][1] = cv_prep<T>(cv_lds32(base + 32));
                    af[mi][2] = cv_prep<T>(cv_lds32(base + 4 * PA));
                    af[mi][3] = cv_prep<T>(cv_lds32(base + 4 * PA + 32));
                }
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    uint32_t base = sB + (ks * 8 + t) * PB + (wn * 32 + ni * 8 + g) * 4;
                    bf[ni][0] = cv_prep<T>(cv_lds32(base));
                    bf[ni][1] = cv_prep<T>(cv_lds32(base + 4 * PB));
                }
            }
#pragma unroll
            for (int mi = 0; mi < 4; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) cv_mma(acc[mi][ni], af[mi], bf[ni], T());
        }
    }
    cv_cp_wait<0>();

    /* partial sums of this split, float32, straight from the registers */
    float *part = a.part + (int64_t)blockIdx.z * a.Mext * a.F;
    cv_store_partials(part, a.KC, a.F, m0 + wm * 64, n0 + wn * 32, g, t, acc);
    if (dsum) { /* row KC: the four row groups of each column, in a fixed order */
        __syncthreads(); /* every thread's last reads of the stages are done */
        float *red = (float *)smem; /* [row group][64 columns] */
        red[(tid >> 5) * 64 + 2 * (tid & 31)] = bsum0;
        red[(tid >> 5) * 64 + 2 * (tid & 31) + 1] = bsum1;
        __syncthreads();
        if (tid < 64 && n0 + tid < a.F)
            part[(int64_t)a.KC * a.F + n0 + tid] = ((red[tid] + red[64 + tid]) + red[128 + tid]) + red[192 + tid];
    }
}

/* ------------------------------------------------------------------ direct small-C forward
 * C < 8: one thread computes 8 consecutive filters of one output pixel with float32
 * FMA (exact), reading its KH*KW*C inputs once and each weight row of 8 filters as one
 * 16/32-byte vector when F % 8 == 0; the weights are the same for every pixel and stay
 * in L1. Consecutive threads take consecutive filter groups of one pixel, so the
 * stores are coalesced 16/32-byte vectors. */
#define DC_FB 8
template <typename T>
static __global__ void __launch_bounds__(256) conv_direct_fwd_kernel(const gc_conv2d_geom g, const T *x,
                                                         const T *w, const T *bias, int act,
                                                         T *y, int64_t total, int FG, int vec)
{
    const int64_t F = g.F, C = g.C;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (int64_t)gridDim.x * blockDim.x) {
        int64_t fg = i % FG, m = i / FG;
        int64_t ow = m % g.OW, t = m / g.OW, oh = t % g.OH, n = t / g.OH;
        int64_t f0 = fg * DC_FB;
        int nf = (int)(F - f0 < DC_FB ? F - f0 : DC_FB);
        float acc[DC_FB];
#pragma unroll
        for (int j = 0; j < DC_FB; j++) acc[j] = (bias && j < nf) ? gc_to_f(bias[f0 + j]) : 0.0f;
        for (int64_t kh = 0; kh < g.KH; kh++) {
            int64_t ih = oh * g.sh - g.pad_top + kh * g.dh;
            if (ih < 0 || ih >= g.H) continue;
            for (int64_t kw = 0; kw < g.KW; kw++) {
                int64_t iw = ow * g.sw - g.pad_left + kw * g.dw;
                if (iw < 0 || iw >= g.W) continue;
                const T *xp = x + ((n * g.H + ih) * g.W + iw) * C;
                const T *wp = w + (kh * g.KW + kw) * C * F + f0;
                for (int64_t c = 0; c < C; c++) {
                    float xv = gc_to_f(xp[c]);
                    const T *wr = wp + c * F;
                    if (vec) {
                        float wv[DC_FB];
#pragma unroll
                        for (int v = 0; v < DC_FB * (int)sizeof(T) / 16; v++)
                            cv_unpack<T>(((const uint4 *)wr)[v], wv + v * (16 / (int)sizeof(T)));
#pragma unroll
                        for (int j = 0; j < DC_FB; j++) acc[j] = fmaf(xv, wv[j], acc[j]);
                    } else {
#pragma unroll
                        for (int j = 0; j < DC_FB; j++)
                            if (j < nf) acc[j] = fmaf(xv, gc_to_f(wr[j]), acc[j]);
                    }
                }
            }
        }
        T *yp = y + m * F + f0;
        if (vec) {
            union { uint4 u[DC_FB * sizeof(T) / 16]; T e[DC_FB]; } o;
#pragma unroll
            for (int j = 0; j < DC_FB; j++) o.e[j] = gc_from_f<T>(conv_act(acc[j], act));
#pragma unroll
            for (int v = 0; v < DC_FB * (int)sizeof(T) / 16; v++) ((uint4 *)yp)[v] = o.u[v];
        } else {
#pragma unroll
            for (int j = 0; j < DC_FB; j++)
                if (j < nf) yp[j] = gc_from_f<T>(conv_act(acc[j], act));
        }
    }
}

/* ------------------------------------------------------------------ small helpers */
template <typename T>
static __global__ void __launch_bounds__(256) conv_transpose_kernel(const T *in, int64_t R, int64_t Cc, T *out)
{
    __shared__ T tile[32][33];
    int64_t r0 = (int64_t)blockIdx.y * 32, c0 = (int64_t)blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += 8) {
        int64_t r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < Cc) tile[i][threadIdx.x] = in[r * Cc + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        int64_t c = c0 + i, r = r0 + threadIdx.x;
        if (r < R && c < Cc) out[c * R + r] = tile[threadIdx.x][i];
    }
}

template <typename T>
static __global__ void __launch_bounds__(256) conv_bias_act_kernel(T *y, int64_t n, int64_t F, const T *bias,
                                                       int act)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = gc_to_f(y[i]);
        if (bias) v += gc_to_f(bias[i % F]);
        y[i] = gc_from_f<T>(conv_act(v, act));
    }
}

/* out[i] = act(sum_{z<S} part[z*stride + i] + bias[i % ncols]) for i < n. Block (32, 8):
 * 32 consecutive outputs, 8 lanes over z (lane y sums z = y, y+8, ... in order), then
 * lane 0 adds the 8 lane sums in order: a fixed summation order, so deterministic. */
template <typename T>
static __global__ void __launch_bounds__(1024) conv_splitk_reduce_kernel(const float *part, int S, int64_t stride,
                                                            int64_t n, int64_t ncols, const T *bias,
                                                            int act, T *out)
{
    /* blockDim = (32, RY): RY = 8, or 32 when S is large (hundreds of pixel ranges of a
     * weight gradient): the sum over S is a chain of dependent L2 loads per thread, so
     * more threads per output shorten it. Fixed order for a given S: deterministic. */
    __shared__ float red[32][33];
    const int RY = blockDim.y;
    const int64_t i = (int64_t)blockIdx.x * 32 + threadIdx.x;
    float s = 0.0f;
    if (i < n) {
        const float *p = part + i;
#pragma unroll 4
        for (int z = threadIdx.y; z < S; z += RY) s += p[(int64_t)z * stride];
    }
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && i < n) {
        float v = red[0][threadIdx.x];
        for (int k = 1; k < RY; k++) v += red[k][threadIdx.x];
        if (bias) v += gc_to_f(bias[i % ncols]);
        out[i] = gc_from_f<T>(conv_act(v, act));
    }
}

/* partial column sums: block (32, 8) sums rows [z*chunk, (z+1)*chunk) of 32 columns */
template <typename T>
static __global__ void __launch_bounds__(256) conv_colsum_kernel(const T *dy, int64_t M, int64_t F, int64_t chunk,
                                                     float *part)
{
    __shared__ float red[8][33];
    int64_t f = (int64_t)blockIdx.x * 32 + threadIdx.x;
    int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < M ? r0 + chunk : M;
    float s = 0.0f;
    if (f < F)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += 8) s += gc_to_f(dy[r * F + f]);
    red[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && f < F) {
        float t = red[0][threadIdx.x];
        for (int k = 1; k < 8; k++) t += red[k][threadIdx.x];
        part[(int64_t)blockIdx.y * F + f] = t;
    }
}

/* the same with 16-byte rows: block (32, CS_LANES) sums 32 * V columns (V = 16 / sizeof(T);
 * F % V == 0, dy 16-byte aligned), one vector load per row and thread */
#define CS_LANES 32
template <typename T>
static __global__ void __launch_bounds__(32 * CS_LANES) conv_colsum_vec_kernel(const T *dy, int64_t M, int64_t F, int64_t chunk,
                                                                     float *part)
{
    constexpr int V = 16 / (int)sizeof(T);
    __shared__ float red[CS_LANES][32 * V + 1];
    const int64_t f0 = ((int64_t)blockIdx.x * 32 + threadIdx.x) * V;
    const int64_t r0 = (int64_t)blockIdx.y * chunk, r1 = r0 + chunk < M ? r0 + chunk : M;
    float s[V];
#pragma unroll
    for (int j = 0; j < V; j++) s[j] = 0.0f;
    if (f0 < F)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += CS_LANES) {
            const uint4 u = *(const uint4 *)(dy + r * F + f0);
            const T *e = (const T *)&u;
#pragma unroll
            for (int j = 0; j < V; j++) s[j] += gc_to_f(e[j]);
        }
#pragma unroll
    for (int j = 0; j < V; j++) red[threadIdx.y][threadIdx.x * V + j] = s[j];
    __syncthreads();
    /* the block's columns, each summed over the lanes in a fixed order */
    for (int c = threadIdx.y * 32 + threadIdx.x; c < 32 * V; c += 32 * CS_LANES) {
        const int64_t f = (int64_t)blockIdx.x * 32 * V + c;
        if (f >= F) continue;
        float t = red[0][c];
        for (int k = 1; k < CS_LANES; k++) t += red[k][c];
        part[(int64_t)blockIdx.y * F + f] = t;
    }
}

static unsigned grid_for(const gc_backend *be, int64_t n, int threads)
{
    int64_t b = (n + threads - 1) / threads;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 16;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

extern "C" gc_status gc_conv2d_transpose(const gc_backend *be, gc_dtype dt, const void *in,
                                         int64_t R, int64_t Cc, void *out)
{
    if (R <= 0 || Cc <= 0) return GC_OK;
    if ((R + 31) / 32 > 65535) return gc_fail(GC_ERR_UNSUPPORTED, "conv2d: kernel too large to transpose");
    dim3 grid((unsigned)((Cc + 31) / 32), (unsigned)((R + 31) / 32)), block(32, 8);
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        conv_transpose_kernel<T><<<grid, block, 0, gc_cuda_stream(be)>>>((const T *)in, R, Cc, (T *)out));
    return gc_cuda_launch_check("conv2d: weight transpose");
}

extern "C" gc_status gc_conv2d_bias_act(const gc_backend *be, gc_dtype dt, void *y, int64_t M,
                                        int64_t F, const void *bias, gc_act act)
{
    if (M <= 0 || (!bias && act == GC_ACT_LINEAR)) return GC_OK;
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        conv_bias_act_kernel<T><<<grid_for(be, M * F, 256), 256, 0, gc_cuda_stream(be)>>>(
            (T *)y, M * F, F, (const T *)bias, (int)act));
    return gc_cuda_launch_check("conv2d: bias + activation");
}

static gc_status splitk_reduce(const gc_backend *be, gc_dtype dt, const float *part, int S,
                               int64_t stride, int64_t n, int64_t ncols, const void *bias,
                               gc_act act, void *out)
{
    if (n <= 0) return GC_OK;
    dim3 grid((unsigned)((n + 31) / 32)), block(32, S >= 128 ? 32 : 8);
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        conv_splitk_reduce_kernel<T><<<grid, block, 0, gc_cuda_stream(be)>>>(
            part, S, stride, n, ncols > 0 ? ncols : 1, (const T *)bias, (int)act, (T *)out));
    return gc_cuda_launch_check("conv2d: split reduction");
}

extern "C" gc_status gc_conv2d_reduce_splits(const gc_backend *be, gc_dtype dt, const float *part,
                                             int S, int64_t stride, int64_t n, void *out)
{
    return splitk_reduce(be, dt, part, S, stride, n, 1, NULL, GC_ACT_LINEAR, out);
}

static int64_t colsum_splits(const gc_backend *be, int64_t M, int64_t F, int64_t *chunk)
{
    /* as many row ranges as keep ~2 blocks of 256 columns x 32 row lanes per SM busy
     * (the vector kernel; the scalar one then runs 8x the blocks of 8 lanes): few
     * enough ranges that the final reduction over them is short */
    int64_t fb = (F + 255) / 256;
    int64_t want = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 2 / fb;
    if (want < 1) want = 1;
    if (want > 1024) want = 1024;
    int64_t c = (M + want - 1) / want;
    if (c < 64) c = 64;
    *chunk = c;
    return M > 0 ? (M + c - 1) / c : 1;
}

extern "C" size_t gc_conv2d_colsum_ws(const gc_backend *be, int64_t M, int64_t F)
{
    int64_t chunk;
    return (size_t)(colsum_splits(be, M, F, &chunk) * F) * sizeof(float);
}

extern "C" gc_status gc_conv2d_colsum(const gc_backend *be, gc_dtype dt, const void *dy, int64_t M,
                                      int64_t F, void *db, void *ws)
{
    if (M <= 0) {
        GC_CUDA_TRY(cudaMemsetAsync(db, 0, (size_t)F * gc_dtype_size(dt), gc_cuda_stream(be)));
        return GC_OK;
    }
    int64_t chunk, S = colsum_splits(be, M, F, &chunk);
    const int64_t V = 16 / (int64_t)gc_dtype_size(dt);
    dim3 block(32, 8);
    if (F % V == 0 && ((uintptr_t)dy & 15u) == 0) {
        dim3 grid((unsigned)((F + 32 * V - 1) / (32 * V)), (unsigned)S), vblock(32, CS_LANES);
        GC_CUDA_DISPATCH_FLOAT(dt, T,
            conv_colsum_vec_kernel<T><<<grid, vblock, 0, gc_cuda_stream(be)>>>((const T *)dy, M, F, chunk,
                                                                          (float *)ws));
    } else {
        dim3 grid((unsigned)((F + 31) / 32), (unsigned)S);
        GC_CUDA_DISPATCH_FLOAT(dt, T,
            conv_colsum_kernel<T><<<grid, block, 0, gc_cuda_stream(be)>>>((const T *)dy, M, F, chunk,
                                                                     (float *)ws));
    }
    gc_status st = gc_cuda_launch_check("conv2d: bias gradient");
    if (st) return st;
    return gc_conv2d_reduce_splits(be, dt, (const float *)ws, (int)S, F, F, db);
}

/* ------------------------------------------------------------------ own implementations */
static int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* true when the 32-bit offsets of the Tensor Core kernels are safe */
static int fits_int(const gc_conv2d_geom *g)
{
    const int64_t lim = (int64_t)INT_MAX / 2;
    return g->N * g->OH * g->OW < lim && g->N * g->H * g->W < lim &&
           g->N * g->H * g->W * g->C < lim && g->N * g->OH * g->OW * g->F < lim &&
           g->KH * g->KW * g->C * g->F < lim && g->H < lim / 8 && g->W < lim / 8;
}

/* Pipeline depth (stages of IG_STAGE_BYTES / WG_STAGE_BYTES) per device: measured on
 * an H200 (tests/cuda/test_conv.cu bench); elsewhere 3, which leaves room for 2 blocks
 * per SM on the 100 KB parts (sm_86/89). The knobs cuda.conv2d.mma_stages /
 * wgrad_mma_stages override. */
#ifndef IG_STAGES_SM90
#define IG_STAGES_SM90 3 /* H200, f16 3x3 64->64 56x56: 3 stages 162 TFLOP/s, 4 stages 140 */
#endif
#ifndef WG_STAGES_SM90
#define WG_STAGES_SM90 3 /* the same layer's bwd filter: 3 stages 74 TFLOP/s, 4 stages 73 */
#endif

static int ig_stages(const gc_backend *be)
{
    const int forced = gc_variant_forced(GC_VP_CUDA_CONV2D_MMA_STAGES);
    int s = forced ? forced : (gc_cuda_cc(be) >= 90 ? IG_STAGES_SM90 : 3);
    size_t optin = gc_cuda_smem_optin(be);
    while (s > 3 && optin && (size_t)s * IG_STAGE_BYTES > optin) s--;
    return s < 3 ? 3 : (s > IG_MAX_STAGES ? IG_MAX_STAGES : s);
}

static int wg_stages(const gc_backend *be)
{
    const int forced = gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD_MMA_STAGES);
    int s = forced ? forced : (gc_cuda_cc(be) >= 90 ? WG_STAGES_SM90 : 3);
    size_t optin = gc_cuda_smem_optin(be);
    while (s > 3 && optin && (size_t)s * WG_STAGE_BYTES > optin) s--;
    return s < 3 ? 3 : (s > IG_MAX_STAGES ? IG_MAX_STAGES : s);
}

/* Raises a kernel's dynamic shared-memory limit to at least `bytes` on this device;
 * set[dev] remembers the largest limit set so far (the attribute is per device and a
 * later call may need more, e.g. a test overriding the stage count). */
#define CV_MAX_DEV 64
static gc_status smem_limit(const void *kernel, size_t bytes, size_t *set, int dev)
{
    if (bytes <= 48 * 1024) return GC_OK;
    if (dev < 0 || dev >= CV_MAX_DEV) dev = CV_MAX_DEV - 1;
    if (__atomic_load_n(&set[dev], __ATOMIC_ACQUIRE) >= bytes) return GC_OK;
    GC_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes));
    __atomic_store_n(&set[dev], bytes, __ATOMIC_RELEASE);
    return GC_OK;
}

/* Split-K plan of an implicit GEMM: more blocks when the output tiles fill at most
 * half the SMs (small M: the seeds' 3x3-output layer, 9 tiles: 25 -> 12 us on an H200).
 * Not above that: with 121 tiles (seeds' second layer) the partials' traffic cost more
 * than the split gained (19 -> 34 us). The knob cuda.conv2d.mma_splits caps the split
 * (1: never split). */

static int ig_splits(const gc_backend *be, int64_t M, int64_t NN, int KT, int *ktps)
{
    const int64_t tiles = ((M + IG_BM - 1) / IG_BM) * ((NN + IG_BN - 1) / IG_BN);
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    int64_t S = 1;
    if (tiles * 2 <= sms && KT >= 4) {
        S = (2 * sms + tiles - 1) / tiles;
        if (S > KT / 2) S = KT / 2;
        if (S < 1) S = 1;
    }
    const int cap = gc_variant_forced(GC_VP_CUDA_CONV2D_MMA_SPLITS);
    if (cap > 0 && S > cap) S = cap;
    *ktps = (int)((KT + S - 1) / S);
    return (KT + *ktps - 1) / *ktps;
}

/* Fills the shape-independent fields of *a and returns the workspace bytes it needs
 * (split-K partials). */
static size_t ig_plan(const gc_backend *be, gc_dtype dt, ig_args *a)
{
    const int bk = IG_KB / (int)gc_dtype_size(dt);
    a->cchunks = (a->SC + bk - 1) / bk;
    a->fast = a->divh == 1 && a->divw == 1 && a->KH * a->KW <= 32;
    a->dsh = a->ch * a->SW * a->SC;
    a->dsw = a->cw * a->SC;
    a->stages = ig_stages(be);
    a->part = NULL;
    if (a->scat) { /* the split reduction writes rows in order: no split */
        a->ktps = a->KH * a->KW * a->cchunks;
        return 0;
    }
    const int KT = a->KH * a->KW * a->cchunks;
    int S = ig_splits(be, a->M, a->NN, KT, &a->ktps);
    return S > 1 ? (size_t)S * (size_t)a->M * (size_t)a->NN * sizeof(float) : 0;
}

static gc_status ig_launch(const gc_backend *be, gc_dtype dt, ig_args *a, void *part, const char *what)
{
    const int esz = (int)gc_dtype_size(dt), vec = 16 / esz;
    a->vec = a->SC % vec == 0 && aligned16(a->src) && aligned16(a->wt);
    a->vec_out = a->NN % vec == 0 && aligned16(a->out);
    const int KT = a->KH * a->KW * a->cchunks;
    const int S = (KT + a->ktps - 1) / a->ktps;
    a->part = S > 1 ? (float *)part : NULL;
    gc_variant_ran(GC_VP_CUDA_CONV2D_MMA_STAGES, a->stages);
    gc_variant_ran(GC_VP_CUDA_CONV2D_MMA_SPLITS, S);
    int64_t gy = (a->NN + IG_BN - 1) / IG_BN;
    if (gy > 65535) return gc_fail(GC_ERR_UNSUPPORTED, "%s: %d output channels is too many", what, a->NN);
    dim3 grid((unsigned)((a->M + IG_BM - 1) / IG_BM), (unsigned)gy, (unsigned)S);
    const size_t smem = (size_t)a->stages * IG_STAGE_BYTES;
    static size_t set[3][CV_MAX_DEV];
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        st = smem_limit((const void *)conv_igemm_kernel<T>, smem, set[dt == GC_F32 ? 0 : dt == GC_F16 ? 1 : 2],
                        be->device_index);
        if (st == GC_OK) conv_igemm_kernel<T><<<grid, IG_THREADS, smem, gc_cuda_stream(be)>>>(*a));
    if (st) return st;
    if ((st = gc_cuda_launch_check(what))) return st;
    if (S > 1)
        st = splitk_reduce(be, dt, (const float *)part, S, (int64_t)a->M * a->NN, (int64_t)a->M * a->NN,
                           a->NN, a->bias, (gc_act)a->act, a->out);
    return st;
}

static int use_simt(gc_dtype dt, int path)
{
    if (path == PATH_SIMT) return 1;
    return dt == GC_F32 && !gc_get_allow_tf32() && path != PATH_MMA;
}

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

/* Worth trying the Hopper resident-slice kernels (cheap pre-checks; gc_conv2d_wgmma_check
 * has the rest): 16-bit storage on a compute capability 9.0 device, their shape rules, and
 * enough 128-row tiles for one per SM (below that the mma.sync kernel's 128 x 64 blocks,
 * several per SM and split K, fill the GPU better). The callers also ask
 * gc_conv2d_igemm_wanted (the GEMM kernel with an im2col A, strided layers too; 16-bit
 * and TF32 float32 storage, the same rule), after use_simt has sent exact float32 away. */
static int wgmma_wanted(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt)
{
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    return (dt == GC_F16 || dt == GC_BF16) && gc_cuda_cc(be) == 90 && g->C % 64 == 0 && g->F % 64 == 0 &&
           g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && g->N * g->OH * g->OW >= 128 * sms;
}

static gc_status own_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, const void *x,
                         const void *w, const void *bias, gc_act act, void *y)
{
    if (gc_conv2d_gemm_wanted(be, g, dt, 0)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_GEMM);
        return gc_conv2d_gemm_fwd(be, g, dt, x, w, bias, act, y);
    }
    const int path = fwd_path();
    if (path == PATH_WGMMA) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_WGMMA);
        return gc_conv2d_wgmma_fwd(be, g, dt, x, w, bias, act, y);
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_SIMT);
    if (path == PATH_SIMT || !fits_int(g)) return gc_conv2d_simt_fwd(be, g, dt, x, w, bias, act, y);
    /* small C (the RGB stem, 7x7x3: K = 147): the row-gather Tensor Core kernel; the
     * direct kernel stays for tiny K (the seeds' 3x3x1), where it is already cheap */
    if ((path == PATH_SMALLC || (path == PATH_AUTO && g->C < 8 && g->KH * g->KW * g->C >= 48)) &&
        !use_simt(dt, path) && gc_conv2d_smallc_applies(g, dt)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_SMALLC);
        return gc_conv2d_smallc_fwd(be, g, dt, x, w, bias, act, y);
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_DIRECT);
    if (path == PATH_DIRECT || (path != PATH_MMA && g->C < 8)) {
        const int FG = (int)((g->F + DC_FB - 1) / DC_FB);
        const int64_t total = g->N * g->OH * g->OW * FG;
        int vec = g->F % DC_FB == 0 && aligned16(y) && aligned16(w);
        GC_CUDA_DISPATCH_FLOAT(dt, T,
            conv_direct_fwd_kernel<T><<<grid_for(be, total, 256), 256, 0, gc_cuda_stream(be)>>>(
                *g, (const T *)x, (const T *)w, (const T *)bias, (int)act, (T *)y, total, FG, vec));
        return gc_cuda_launch_check("conv2d_fwd: direct kernel");
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_SIMT);
    if (use_simt(dt, path)) return gc_conv2d_simt_fwd(be, g, dt, x, w, bias, act, y);
    if (path == PATH_AUTO && (wgmma_wanted(be, g, dt) || gc_conv2d_igemm_wanted(be, g, dt, 0))) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_WGMMA);
        gc_status st = gc_conv2d_wgmma_fwd(be, g, dt, x, w, bias, act, y);
        if (st != GC_ERR_UNSUPPORTED) return st;
        gc_clear_error(); /* nothing was launched: the mma.sync kernel takes it */
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_FWD, GC_V_FWD_MMA);

    const int64_t KC = g->KH * g->KW * g->C;
    ig_args a;
    a.src = x; a.bias = bias; a.out = y;
    a.SH = (int)g->H; a.SW = (int)g->W; a.SC = (int)g->C;
    a.PH = (int)g->OH; a.PW = (int)g->OW;
    a.KH = (int)g->KH; a.KW = (int)g->KW;
    a.M = (int)(g->N * g->OH * g->OW); a.NN = (int)g->F;
    a.ah = g->sh; a.bh = -g->pad_top; a.ch = g->dh; a.divh = 1;
    a.aw = g->sw; a.bw = -g->pad_left; a.cw = g->dw; a.divw = 1;
    a.ldn = (int)KC; a.ldtap = (int)g->C;
    a.act = (int)act;
    a.scat = 0;
    const size_t part_bytes = ig_plan(be, dt, &a);

    /* workspace: [W^T as (F, KH*KW*C) | split-K partials] */
    const size_t wt_bytes = align256((size_t)(KC * g->F) * gc_dtype_size(dt));
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, wt_bytes + part_bytes, &ws);
    if (st) return st;
    if ((st = gc_conv2d_transpose(be, dt, w, KC, g->F, ws))) return st;
    a.wt = ws;
    return ig_launch(be, dt, &a, (char *)ws + wt_bytes, "conv2d_fwd");
}

/* dx += the data gradient for the kernels that cannot add in their epilogue (and for
 * cuDNN, impl = vendor): the gradient into the staging buffer (the kernel may take the
 * workspace), then one add. */
static gc_status own_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                              const void *dy, const void *w, void *dx, int acc);
static gc_status staged_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt, gc_impl impl,
                                 const void *dy, const void *w, void *dx)
{
    const int64_t n = g->N * g->H * g->W * g->C;
    void *tmp = NULL;
    gc_status st = gc_cuda_staging(be, (size_t)n * gc_dtype_size(dt), &tmp);
    if (st) return st;
    if (impl == GC_IMPL_VENDOR)
        st = gc_conv2d_vendor(be, GC_OP_CONV2D_BWD_DATA, g, dt, gc_get_allow_tf32(), dy, w, NULL, GC_ACT_LINEAR,
                              tmp, NULL);
    else
        st = own_bwd_data(be, g, dt, dy, w, tmp, 0);
    if (!st) st = gc_cuda_add_into(be, dt, n, dx, tmp);
    return st;
}

/* acc: dx += the gradient. The GEMM route and the Hopper kernels add in their epilogue
 * (beta = 1, TMA reduce-add); the others go through staged_bwd_data. */
static gc_status own_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                              const void *dy, const void *w, void *dx, int acc)
{
    if (gc_conv2d_gemm_wanted(be, g, dt, 1)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_GEMM);
        return gc_conv2d_gemm_bwd_data(be, g, dt, dy, w, dx, acc);
    }
    const int path = bwd_data_path();
    if (path == PATH_WGMMA) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_WGMMA);
        return gc_conv2d_wgmma_bwd_data(be, g, dt, dy, w, dx, 1, acc);
    }
    /* few input channels (the RGB stem): the per-residue-class Tensor Core kernel, which
     * adds in place; tiny filter counts stay on the SIMT kernel */
    if ((path == PATH_SMALLC || (path == PATH_AUTO && g->C < 8 && g->F >= 16)) && !use_simt(dt, path) &&
        fits_int(g) && gc_conv2d_smallc_dgrad_applies(g)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_SMALLC);
        return gc_conv2d_smallc_bwd_data(be, g, dt, dy, w, dx, acc);
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_SIMT);
    if (path == PATH_SIMT || !fits_int(g) || use_simt(dt, path) || (path != PATH_MMA && (g->C < 8 || g->F < 8)))
        return acc ? staged_bwd_data(be, g, dt, GC_IMPL_OWN, dy, w, dx) : gc_conv2d_simt_bwd_data(be, g, dt, dy, w, dx);
    if (path == PATH_AUTO && (wgmma_wanted(be, g, dt) || gc_conv2d_igemm_wanted(be, g, dt, 1))) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_WGMMA);
        gc_status st = gc_conv2d_wgmma_bwd_data(be, g, dt, dy, w, dx, 0, acc);
        if (st != GC_ERR_UNSUPPORTED) return st;
        gc_clear_error(); /* nothing was launched: the mma.sync kernel takes it */
    }
    if (acc) return staged_bwd_data(be, g, dt, GC_IMPL_OWN, dy, w, dx);
    ig_args a;
    if (g->KH == 1 && g->KW == 1 && (g->sh > 1 || g->sw > 1) && g->pad_top == 0 && g->pad_left == 0) {
        /* strided 1x1: zero dx, then a plain GEMM over the dy pixels whose epilogue
         * scatters row (n, oh, ow) to dx pixel (n, oh*sh, ow*sw) */
        gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_SCATTER);
        GC_CUDA_TRY(cudaMemsetAsync(dx, 0, (size_t)(g->N * g->H * g->W * g->C) * gc_dtype_size(dt),
                                    gc_cuda_stream(be)));
        a.src = dy; a.wt = w; a.bias = NULL; a.out = dx;
        a.SH = (int)g->OH; a.SW = (int)g->OW; a.SC = (int)g->F;
        a.PH = (int)g->OH; a.PW = (int)g->OW;
        a.KH = 1; a.KW = 1;
        a.M = (int)(g->N * g->OH * g->OW); a.NN = (int)g->C;
        a.ah = 1; a.bh = 0; a.ch = 0; a.divh = 1;
        a.aw = 1; a.bw = 0; a.cw = 0; a.divw = 1;
        a.ldn = (int)g->F; a.ldtap = (int)(g->C * g->F);
        a.act = GC_ACT_LINEAR;
        a.scat = 1; a.oH = (int)g->H; a.oW = (int)g->W; a.osh = g->sh; a.osw = g->sw;
        ig_plan(be, dt, &a);
        return ig_launch(be, dt, &a, NULL, "conv2d_bwd_data (strided 1x1)");
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_BWD_DATA, GC_V_BWDD_MMA);
    a.scat = 0;
    a.src = dy; a.wt = w; a.bias = NULL; a.out = dx;
    a.SH = (int)g->OH; a.SW = (int)g->OW; a.SC = (int)g->F;
    a.PH = (int)g->H; a.PW = (int)g->W;
    a.KH = (int)g->KH; a.KW = (int)g->KW;
    a.M = (int)(g->N * g->H * g->W); a.NN = (int)g->C;
    a.ah = 1; a.bh = g->pad_top; a.ch = -g->dh; a.divh = g->sh;
    a.aw = 1; a.bw = g->pad_left; a.cw = -g->dw; a.divw = g->sw;
    a.ldn = (int)g->F; a.ldtap = (int)(g->C * g->F); /* W (KH,KW,C,F): row c of tap, f contiguous */
    a.act = GC_ACT_LINEAR;
    const size_t part_bytes = ig_plan(be, dt, &a);
    void *ws = NULL;
    if (part_bytes) {
        gc_status st = gc_cuda_workspace(be, part_bytes, &ws);
        if (st) return st;
    }
    return ig_launch(be, dt, &a, ws, "conv2d_bwd_data");
}

static gc_status own_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                const void *x, const void *dy, void *dw, void *db)
{
    const int64_t P = g->N * g->OH * g->OW, KC = g->KH * g->KW * g->C;
    if (P == 0) {
        cudaStream_t s = gc_cuda_stream(be);
        GC_CUDA_TRY(cudaMemsetAsync(dw, 0, (size_t)(KC * g->F) * gc_dtype_size(dt), s));
        if (db) GC_CUDA_TRY(cudaMemsetAsync(db, 0, (size_t)g->F * gc_dtype_size(dt), s));
        return GC_OK;
    }
    int wgw = 0;
    const int path = wgrad_path(&wgw);
    /* Hopper wgmma (conv2d_wgmma_wgrad.cu): forced (its error, if any, is the result),
     * or automatic before the GEMM route (unless that is forced), falling back where it
     * does not apply */
    if (wgw == 1) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_WGMMA);
        return gc_conv2d_wgrad_wgmma(be, g, dt, x, dy, dw, db);
    }
    if (wgw == 0 && gc_variant_forced(GC_VP_CUDA_CONV2D_WGRAD) != GC_V_WGRAD_GEMM &&
        gc_conv2d_wgrad_wgmma_wanted(be, g, dt)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_WGMMA);
        gc_status st = gc_conv2d_wgrad_wgmma(be, g, dt, x, dy, dw, db);
        if (st != GC_ERR_UNSUPPORTED) return st;
        gc_clear_error(); /* nothing was launched: the kernels below take it */
    }
    if (gc_conv2d_gemm_wanted(be, g, dt, 2)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_GEMM);
        return gc_conv2d_gemm_bwd_filter(be, g, dt, x, dy, dw, db);
    }
    /* small C with more rows than the SIMT small-K kernel keeps in registers (KC > 64:
     * the 7x7x3 stem): the row-gather Tensor Core kernel, split K over the pixels */
    if (path != PATH_SIMT && fits_int(g) && !use_simt(dt, path) &&
        (path == PATH_SMALLC || (path == PATH_AUTO && g->C < 8 && KC > 64)) && gc_conv2d_smallc_applies(g, dt)) {
        gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_SMALLC);
        return gc_conv2d_smallc_bwd_filter(be, g, dt, x, dy, dw, db);
    }
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_SIMT);
    if (path == PATH_SIMT || !fits_int(g) || use_simt(dt, path) || (path != PATH_MMA && (g->C < 8 || g->F < 8)))
        return gc_conv2d_simt_bwd_filter(be, g, dt, x, dy, dw, db);
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD, GC_V_WGRAD_MMA);

    const int esz = (int)gc_dtype_size(dt), vec = 16 / esz, bk = 512 / esz / 8;
    wg_args a;
    a.x = x; a.dy = dy;
    a.H = (int)g->H; a.W = (int)g->W; a.C = (int)g->C; a.OH = (int)g->OH; a.OW = (int)g->OW;
    a.F = (int)g->F; a.KW = (int)g->KW;
    a.sh = g->sh; a.sw = g->sw; a.dh = g->dh; a.dw = g->dw; a.pt = g->pad_top; a.pl = g->pad_left;
    a.KC = (int)KC; a.Mext = (int)KC + (db ? 1 : 0); a.P = (int)P;
    a.vecA = g->C % vec == 0 && aligned16(x);
    a.vecB = g->F % vec == 0 && aligned16(dy);
    a.ohw = cv_make_fastdiv((int)(g->OH * g->OW));
    a.ow = cv_make_fastdiv((int)g->OW);
    a.stages = wg_stages(be);
    gc_variant_ran(GC_VP_CUDA_CONV2D_WGRAD_MMA_STAGES, a.stages);

    /* split-K: about two waves of 4 blocks per SM, at least 8 K-tiles per block */
    const int64_t tiles = (int64_t)((a.KC + WG_BM - 1) / WG_BM) * ((a.F + WG_BN - 1) / WG_BN);
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    int64_t S = (sms * 8 + tiles - 1) / tiles;
    if (S < 1) S = 1;
    int64_t chunk = (P + S - 1) / S;
    chunk = (chunk + bk - 1) / bk * bk;
    if (chunk < 8 * bk) chunk = 8 * bk;
    S = (P + chunk - 1) / chunk;
    if (S > 65535) {
        S = 65535;
        chunk = ((P + S - 1) / S + bk - 1) / bk * bk;
        S = (P + chunk - 1) / chunk;
    }
    a.chunk = (int)chunk;

    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(S * a.Mext * a.F) * sizeof(float), &ws);
    if (st) return st;
    a.part = (float *)ws;
    dim3 grid((unsigned)((a.KC + WG_BM - 1) / WG_BM), (unsigned)((a.F + WG_BN - 1) / WG_BN),
              (unsigned)S);
    const size_t smem = (size_t)a.stages * WG_STAGE_BYTES;
    static size_t set[3][CV_MAX_DEV];
    GC_CUDA_DISPATCH_FLOAT(dt, T,
        st = smem_limit((const void *)conv_wgrad_kernel<T>, smem, set[dt == GC_F32 ? 0 : dt == GC_F16 ? 1 : 2],
                        be->device_index);
        if (st == GC_OK) conv_wgrad_kernel<T><<<grid, WG_THREADS, smem, gc_cuda_stream(be)>>>(a));
    if (st) return st;
    if ((st = gc_cuda_launch_check("conv2d_bwd_filter"))) return st;
    const int64_t stride = (int64_t)a.Mext * a.F;
    if ((st = gc_conv2d_reduce_splits(be, dt, a.part, (int)S, stride, KC * g->F, dw))) return st;
    if (db) st = gc_conv2d_reduce_splits(be, dt, a.part + KC * g->F, (int)S, stride, g->F, db);
    return st;
}

/* ------------------------------------------------------------------ op adapters */
static gc_status check_dtype(const char *what, gc_dtype dt)
{
    if (dt != GC_F32 && dt != GC_F16 && dt != GC_BF16)
        return gc_fail(GC_ERR_DTYPE, "%s: float32, float16 or bfloat16 storage expected, got %s",
                       what, gc_dtype_name(dt));
    return GC_OK;
}

static const void *opt_data(const gc_tensor *t) { return t ? t->data : NULL; }

/* Geometry from the image-shaped tensor (x, or dx) and the kernel-shaped one. */
static gc_status setup(const gc_backend *be, const char *what, const gc_tensor *img,
                       const gc_tensor *ker, const gc_conv2d_params *p, gc_conv2d_geom *g)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    if (!p || !img || !ker || img->ndim != 4 || ker->ndim != 4)
        return gc_fail(GC_ERR_INVALID_ARG, "%s: expected 4-D input and kernel", what);
    if ((st = check_dtype(what, img->dtype))) return st;
    return gc_conv2d_geometry(img->shape[0], img->shape[1], img->shape[2], img->shape[3],
                              ker->shape[0], ker->shape[1], ker->shape[3], p, g);
}

extern "C" gc_status gc_cuda_op_conv2d_fwd(const gc_backend *be, const gc_op_call *call)
{
    const gc_conv2d_params *p = (const gc_conv2d_params *)call->params;
    const gc_tensor *x = call->in[0], *w = call->in[1];
    gc_conv2d_geom g;
    gc_status st = setup(be, "conv2d_fwd", x, w, p, &g);
    if (st) return st;
    if (g.N == 0) return GC_OK;
    if (p->act == GC_ACT_SOFTMAX)
        return gc_fail(GC_ERR_INVALID_ARG, "conv2d_fwd: softmax is not an elementwise epilogue");
    void *y = call->out[0]->data;
    if (p->impl == GC_IMPL_VENDOR)
        return gc_conv2d_vendor(be, GC_OP_CONV2D_FWD, &g, x->dtype, gc_get_allow_tf32(), x->data,
                                w->data, opt_data(call->in[2]), p->act, y, NULL);
    return own_fwd(be, &g, x->dtype, x->data, w->data, opt_data(call->in[2]), p->act, y);
}

extern "C" gc_status gc_cuda_op_conv2d_bwd_data(const gc_backend *be, const gc_op_call *call)
{
    const gc_conv2d_params *p = (const gc_conv2d_params *)call->params;
    const gc_tensor *dy = call->in[0], *w = call->in[1];
    gc_tensor *dx = call->out[0];
    gc_conv2d_geom g;
    gc_status st = setup(be, "conv2d_bwd_data", dx, w, p, &g);
    if (st) return st;
    if (g.N == 0) return GC_OK;
    if (p->impl == GC_IMPL_VENDOR && p->accumulate)
        return staged_bwd_data(be, &g, dx->dtype, GC_IMPL_VENDOR, dy->data, w->data, dx->data);
    if (p->impl == GC_IMPL_VENDOR)
        return gc_conv2d_vendor(be, GC_OP_CONV2D_BWD_DATA, &g, dx->dtype, gc_get_allow_tf32(), dy->data, w->data,
                                NULL, GC_ACT_LINEAR, dx->data, NULL);
    return own_bwd_data(be, &g, dx->dtype, dy->data, w->data, dx->data, p->accumulate);
}

extern "C" gc_status gc_cuda_op_conv2d_bwd_filter(const gc_backend *be, const gc_op_call *call)
{
    const gc_conv2d_params *p = (const gc_conv2d_params *)call->params;
    const gc_tensor *x = call->in[0], *dy = call->in[1];
    gc_tensor *dw = call->out[0];
    gc_conv2d_geom g;
    gc_status st = setup(be, "conv2d_bwd_filter", x, dw, p, &g);
    if (st) return st;
    void *db = call->out[1] ? call->out[1]->data : NULL;
    if (p->impl == GC_IMPL_VENDOR && g.N > 0) /* N == 0: zeros, whoever computes them */
        return gc_conv2d_vendor(be, GC_OP_CONV2D_BWD_FILTER, &g, x->dtype, gc_get_allow_tf32(),
                                x->data, dy->data, NULL, GC_ACT_LINEAR, dw->data, db);
    return own_bwd_filter(be, &g, x->dtype, x->data, dy->data, dw->data, db);
}
