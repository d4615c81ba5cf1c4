/* conv2d_smallc_dgrad.cu -- Tensor Core data gradient for convolutions with few input
 * channels (C <= 8), such as ResNet's stem (7x7 stride 2, 3 -> 64).
 *
 * Why a kernel of its own: the implicit GEMM of conv2d.cu computes dx with N = C, so
 * C = 3 fills 3 of its 64 output columns, and the SIMT kernel re-reads dy from memory for
 * every tap; either way the stem's data gradient cost 10-30x its forward.
 *
 * The GEMM, per input pixel: dx[ih][iw][c] = sum over the taps (kh, kw) whose output
 * pixel oh = (ih + pad_top - kh) / sh, ow = (iw + pad_left - kw) / sw is whole and in the
 * image, and over f, of dy[oh][ow][f] * w[kh][kw][c][f]. With stride s, the input pixels
 * of one residue class (ih + pad_top) mod sh, (iw + pad_left) mod sw all take the same
 * taps, so a run of 16 same-class pixels of one row is an m16 x n8 x K GEMM: M = the
 * pixels, N = the channels (C <= 8 of the mma's 8 columns), K = the class's taps x F.
 *
 * Block: a tile of TH x TW input pixels of one image (TW = 16 * sw, TH = 16 / sw: 16 runs
 * of 16 pixels), 4 warps of 4 runs each; the runs of a warp share a residue class (rows
 * of one parity), so each tap's B fragment (the weights, one ldmatrix pair) serves its 4
 * runs. Per chunk of 128 bytes of filters (64 halves / 32 floats) the block copies into
 * shared memory the dy pixels its tile reads (RH x RW, zero outside the image: the taps
 * that fall off the image multiply zeros, with no test per pixel) and all weight rows
 * (kh, kw, c); A fragments are ldmatrix gathers with one row address per lane (the
 * pixel's dy row), rows padded to 144 bytes so that 8 consecutive pixels hit 8 distinct
 * bank groups. Channels c >= C read a zero row. The sum runs chunk by chunk, tap by tap,
 * in a fixed order: deterministic. dx += the gradient (accumulate: the plan's fan-out)
 * adds the old value in float32 before the one rounding.
 *
 * f16 / bf16 on mma.sync.m16n8k16, f32 as TF32 (m16n8k8, both operands rounded to
 * nearest with cvt.rna; the caller sends exact float32 to the SIMT kernel), float32
 * accumulation. Shared memory (RH*RW + KH*KW*C + 1) * 144 bytes <= 48 KB per block (no
 * opt-in: 4 blocks on a 228 KB SM, 2 on the 100 KB sm_86 / sm_89 parts).
 * Limits (gc_conv2d_smallc_dgrad_applies): C <= 8, strides 1-2, dilation 1, the tile's
 * rows within 48 KB, N <= 65535, 32-bit pixel counts.
 */
#include "conv2d_ptx.cuh"

#include <limits.h>

#define SD_THREADS 128
#define SD_PITCH 144     /* bytes per shared row: a 128-byte chunk of filters + 16 */
#define SD_CHUNK 128     /* bytes of filters per chunk */
#define SD_SMEM 49152    /* no opt-in */

struct sd_args {
    const void *dy, *w;
    void *dx;
    int N, H, W, C, F, KH, KW, sh, sw, pt, pl, OH, OW;
    int TH, TW, RH, RW, tiles_w, nchunks, vec, acc;
};

/* floor(a / b) for b > 0 and any a */
static __host__ __device__ __forceinline__ int sd_floordiv(int a, int b)
{
    return a >= 0 ? a / b : -((-a + b - 1) / b);
}

/* one 16-byte group of a shared row: elements [f, f + VEC) of src (zero past F or when
 * !in); cp.async when every row is 16-byte aligned, else element copies */
template <typename T>
static __device__ __forceinline__ void sd_group(unsigned char *smem, uint32_t sbase, uint32_t dst, const T *src,
                                                int64_t o, int f, bool in, const sd_args &a, bool weights)
{
    constexpr int VEC = 16 / (int)sizeof(T);
    if (a.vec) {
        const bool ok = in && f < a.F;
        if (weights)
            cv_cp16(dst, src + (ok ? o : 0), ok ? 16 : 0);
        else
            cv_cp16_cg(dst, src + (ok ? o : 0), ok ? 16 : 0);
    } else {
        uint4 u;
        T *e = (T *)&u;
#pragma unroll
        for (int j = 0; j < VEC; j++) e[j] = (in && f + j < a.F) ? src[o + j] : gc_from_f<T>(0.0f);
        *(uint4 *)(smem + (dst - sbase)) = u;
    }
}

template <typename T>
static __global__ void __launch_bounds__(SD_THREADS, 4) conv_smallc_dgrad_kernel(const sd_args a)
{
    constexpr int SZ = (int)sizeof(T), FC = SD_CHUNK / SZ, VEC = 16 / SZ, GROUPS = SD_CHUNK / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int n = blockIdx.y;
    const int ty = blockIdx.x / a.tiles_w, tx = blockIdx.x - ty * a.tiles_w;
    const int ih0 = ty * a.TH, iw0 = tx * a.TW;
    /* the first dy row / column the tile reads (ceil of the lowest tap's position) */
    const int ohb = sd_floordiv(ih0 + a.pt - (a.KH - 1) + a.sh - 1, a.sh);
    const int owb = sd_floordiv(iw0 + a.pl - (a.KW - 1) + a.sw - 1, a.sw);
    const int tile_rows = a.RH * a.RW, wrows = a.KH * a.KW * a.C;
    const uint32_t sbase = cv_smem(smem);
    const uint32_t s_dy = sbase, s_w = sbase + tile_rows * SD_PITCH, s_zero = s_w + wrows * SD_PITCH;
    for (int i = tid; i < SD_PITCH / 4; i += SD_THREADS) ((uint32_t *)(smem + (s_zero - sbase)))[i] = 0u;

    /* the warp's runs: t = warp + 4k (k = 0..3), row i = t / sw, column phase pw = t % sw;
     * with sw in {1, 2} pw and the parity of i are the warp's own */
    const int pw = warp % a.sw;
    const int rh = (ih0 + warp / a.sw + a.pt) % a.sh, rw = (iw0 + pw + a.pl) % a.sw;
    const T *dy = (const T *)a.dy, *w = (const T *)a.w;
    const int64_t img = (int64_t)n * a.OH * a.OW;
    const int lrow = (lane & 7) + ((lane >> 3) & 1) * 8, lcol = (lane >> 4) * 16;
    const int brow = lane & 7, bcol = (lane >> 3) * 16;

    float acc[4][4];
#pragma unroll
    for (int k = 0; k < 4; k++)
#pragma unroll
        for (int e = 0; e < 4; e++) acc[k][e] = 0.0f;

    for (int ci = 0; ci < a.nchunks; ci++) {
        const int f0 = ci * FC;
        if (ci) __syncthreads(); /* the previous chunk's reads are done */
        for (int idx = tid; idx < tile_rows * GROUPS; idx += SD_THREADS) {
            const int r = idx / GROUPS, s = idx - r * GROUPS;
            const int qr = r / a.RW, oh = ohb + qr, ow = owb + (r - qr * a.RW), f = f0 + s * VEC;
            const bool in = (unsigned)oh < (unsigned)a.OH && (unsigned)ow < (unsigned)a.OW;
            const int64_t o = in ? (img + (int64_t)oh * a.OW + ow) * a.F + f : 0;
            sd_group<T>(smem, sbase, s_dy + r * SD_PITCH + s * 16, dy, o, f, in, a, false);
        }
        for (int idx = tid; idx < wrows * GROUPS; idx += SD_THREADS) {
            const int r = idx / GROUPS, s = idx - r * GROUPS, f = f0 + s * VEC;
            sd_group<T>(smem, sbase, s_w + r * SD_PITCH + s * 16, w, (int64_t)r * a.F + f, f, true, a, true);
        }
        cv_cp_commit();
        cv_cp_wait<0>();
        __syncthreads();

        for (int kh = rh; kh < a.KH; kh += a.sh) {
            for (int kw = rw; kw < a.KW; kw += a.sw) {
                const int tap = kh * a.KW + kw;
                const uint32_t baddr = (brow < a.C ? s_w + (tap * a.C + brow) * SD_PITCH : s_zero) + bcol;
                uint32_t b[2][4];
                cv_ldsm4(b[0], baddr);
                cv_ldsm4(b[1], baddr + 64);
#pragma unroll
                for (int p = 0; p < 2; p++)
#pragma unroll
                    for (int r = 0; r < 4; r++) b[p][r] = cv_prep<T>(b[p][r]);
                /* exact divisions: the tap is of the run's class */
                const int q0 = (iw0 + pw + a.pl - kw) / a.sw - owb;
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int i = (warp + 4 * k) / a.sw;
                    const int r = (ih0 + i + a.pt - kh) / a.sh - ohb;
                    const uint32_t aaddr = s_dy + (r * a.RW + q0 + lrow) * SD_PITCH + lcol;
#pragma unroll
                    for (int ks = 0; ks < 4; ks++) {
                        uint32_t af[4];
                        cv_ldsm4(af, aaddr + ks * 32);
#pragma unroll
                        for (int e = 0; e < 4; e++) af[e] = cv_prep<T>(af[e]);
                        cv_mma(acc[k], af, &b[ks >> 1][(ks & 1) * 2], T());
                    }
                }
            }
        }
    }

    /* lane (g, t) holds pixels g and g + 8 of each run, channels 2t and 2t + 1 */
    const int g = lane >> 2, t = lane & 3;
    T *dx = (T *)a.dx;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int ih = ih0 + (warp + 4 * k) / a.sw;
        if (ih >= a.H) continue;
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int iw = iw0 + pw + a.sw * (g + 8 * hf);
            if (iw >= a.W) continue;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int c = 2 * t + e;
                if (c >= a.C) continue;
                const int64_t o = (((int64_t)n * a.H + ih) * a.W + iw) * a.C + c;
                float v = acc[k][2 * hf + e];
                if (a.acc) v += gc_to_f(dx[o]);
                dx[o] = gc_from_f<T>(v);
            }
        }
    }
}

/* ------------------------------------------------------------------ host side */
/* tile shape and shared bytes for a geometry; 0 when the kernel does not take it */
static size_t sd_plan(const gc_conv2d_geom *g, sd_args *a)
{
    if (g->C < 1 || g->C > 8 || g->F < 1 || g->dh != 1 || g->dw != 1) return 0;
    if (g->sh < 1 || g->sh > 2 || g->sw < 1 || g->sw > 2) return 0;
    if (g->N > 65535 || g->KH > 64 || g->KW > 64 || g->OH < 1 || g->OW < 1) return 0;
    const int64_t lim = (int64_t)INT_MAX / 2;
    if (g->H >= lim / 64 || g->W >= lim / 64 || g->OH >= lim / 64 || g->OW >= lim / 64) return 0;
    const int TW = 16 * g->sw, TH = 16 / g->sw;
    const int64_t RH = (TH + g->KH - 2) / g->sh + 1, RW = (TW + g->KW - 2) / g->sw + 1;
    const int64_t rows = RH * RW + g->KH * g->KW * g->C + 1;
    const int64_t tiles = ((g->H + TH - 1) / TH) * ((g->W + TW - 1) / TW);
    if (rows * SD_PITCH > SD_SMEM || tiles > INT_MAX) return 0;
    if (a) {
        a->N = (int)g->N; a->H = (int)g->H; a->W = (int)g->W; a->C = (int)g->C; a->F = (int)g->F;
        a->KH = (int)g->KH; a->KW = (int)g->KW; a->sh = g->sh; a->sw = g->sw;
        a->pt = g->pad_top; a->pl = g->pad_left; a->OH = (int)g->OH; a->OW = (int)g->OW;
        a->TH = TH; a->TW = TW; a->RH = (int)RH; a->RW = (int)RW;
        a->tiles_w = (int)((g->W + TW - 1) / TW);
    }
    return (size_t)(rows * SD_PITCH);
}

extern "C" int gc_conv2d_smallc_dgrad_applies(const gc_conv2d_geom *g)
{
    return sd_plan(g, NULL) != 0 && g->F <= INT_MAX / 2;
}

extern "C" gc_status gc_conv2d_smallc_bwd_data(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                               const void *dy, const void *w, void *dx, int acc)
{
    sd_args a;
    const size_t smem = sd_plan(g, &a);
    if (!smem || g->F > INT_MAX / 2)
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_data: the small-C kernel does not take this shape");
    const int esz = (int)gc_dtype_size(dt);
    a.dy = dy; a.w = w; a.dx = dx; a.acc = acc ? 1 : 0;
    a.nchunks = (int)((g->F * esz + SD_CHUNK - 1) / SD_CHUNK);
    a.vec = (g->F * esz) % 16 == 0 && ((uintptr_t)dy & 15u) == 0 && ((uintptr_t)w & 15u) == 0;
    if (g->N * g->H * g->W == 0) return GC_OK;
    const int64_t tiles = ((g->H + a.TH - 1) / a.TH) * (int64_t)a.tiles_w;
    dim3 grid((unsigned)tiles, (unsigned)g->N);
    GC_CUDA_DISPATCH_FLOAT(dt, T, conv_smallc_dgrad_kernel<T><<<grid, SD_THREADS, smem, gc_cuda_stream(be)>>>(a));
    return gc_cuda_launch_check("conv2d_bwd_data (small C)");
}
