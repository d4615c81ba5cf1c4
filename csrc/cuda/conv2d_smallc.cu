/* conv2d_smallc.cu -- Tensor Core forward and weight gradient for convolutions with few
 * input channels (C < 8), such as ResNet's stem (7x7 stride 2, 3 -> 64 on the padded
 * 230x230 RGB image).
 *
 * Why a kernel of its own: the implicit GEMMs of conv2d.cu gather one tap and a run of
 * 16-byte channel chunks per K-tile, so C = 3 pads each tap to 32 (16-bit) channels, 10x
 * waste, and their weight gradient falls back to the SIMT kernels (150 ms for the stem at
 * batch 256 on an H200). Here the GEMM K (forward) / M (weight gradient) index runs over
 * (kh, j) with j = kw*C + c: with dilation 1 along w, the KW*C values of one kernel row
 * are contiguous in NHWC memory, so one window row is a single run of KW*C elements (21
 * for the stem), padded only to a 4-byte word (KWCp = 22): 154 GEMM rows for the stem
 * instead of 1568. The operand tiles are built word by word (4-byte cp.async, zero-fill
 * outside the image; element loads when the words are not 4-byte aligned), from a per-
 * block table word -> (offset from the window corner, kh, kw of its two elements), so
 * a word costs a table read, an add and a copy, and a pixel's (n, oh, ow) is decomposed
 * once per tile.
 *
 *   forward      M = N*OH*OW pixels (128 per block, one per loader thread), N = F (64 per
 *                block), K = KH*KWCp padded to the K-tile (64 bytes): A words gathered
 *                from x, B from the weights re-laid once per call as (F, Kpad) in the
 *                workspace (zeros in the pad). Bias + activation in the epilogue,
 *                staged through shared memory for 16-byte stores.
 *   weight grad  M = KH*KWCp (+1: the db row, whose A values are 1), 160 per block
 *                (2 x 2 warps of 80 x 32), N = F (64 per block), K = pixels: a 3-stage
 *                cp.async pipeline of 32 (16-bit) / 16 (f32) pixels per stage, split-K
 *                over blockIdx.z into float32 partials part[z][row][f] with the rows of
 *                the (KH, KW, C, F) kernel (the pad rows are dropped), summed in a fixed
 *                order by gc_conv2d_reduce_splits: deterministic.
 * f16 / bf16 on mma.sync.m16n8k16, f32 as TF32 (m16n8k8, operands rounded with
 * cvt.rna); float32 accumulation. Shared memory <= 48 KB per block (no opt-in: two or
 * more blocks per SM on the 100 KB sm_86 / sm_89 parts, three on sm_80 / sm_90).
 * Limits (gc_conv2d_smallc_applies): dilation 1 along w, KH*KWCp <= 320, 32-bit offsets.
 */
#include "conv2d_ptx.cuh"

#include <limits.h>

#define SC_THREADS 128
#define SC_KMAX 320 /* KH*KWCp at most: the forward's word table fits beside 3 stages */

struct sc_args {
    const void *x, *w, *bias, *dy;
    void *y;
    float *part;
    int H, W, C, F, KH, KW, sh, sw, dh, pt, pl;
    int OH, OW, P;     /* P = N*OH*OW */
    int KWC, KWCp, KC; /* KW*C, KW*C rounded to a 4-byte word, KH*KW*C */
    int Kpad;          /* forward: KH*KWCp rounded to the K-tile */
    int with_db, chunk, vec, vec_dy, vec_out, act;
    cv_fastdiv ohw, ow;
};

/* word-table entry: .x = element offset from the window's corner (kh*dh*W*C + j),
 * .y = kind | kw of the word's first element << 2 | kw of its second << 12 | kh << 22;
 * kind 0 zero (pad), 1 data, 2 data whose second element is pad, 3 the ones word (db). */
static __device__ __forceinline__ int2 sc_entry(const sc_args &a, int m, int ones_row)
{
    int2 e = make_int2(0, 0);
    const int kh = m / a.KWCp, j = m - kh * a.KWCp;
    if (kh < a.KH && j < a.KWC) {
        e.x = kh * a.dh * a.W * a.C + j;
        const int kind = (j + 1 >= a.KWC) ? 2 : 1;
        e.y = kind | ((j / a.C) << 2) | (((j + 1) / a.C) << 12) | (kh << 22);
    } else if (m == ones_row) {
        e.y = 3;
    }
    return e;
}

/* One 4-byte word of an operand row: the elements at x[base + e.x] (and + 1 for 16-bit
 * storage), zero outside the image, the pad or past the pixel range (pin false). */
template <typename T>
static __device__ __forceinline__ void sc_word(unsigned char *smem, uint32_t sbase, uint32_t dst, const T *x,
                                               int base, int2 e, int ih0, int iw0, bool pin, bool interior,
                                               const sc_args &a)
{
    constexpr bool HALF = sizeof(T) == 2;
    const int kind = e.y & 3;
    if (kind == 3) {
        uint32_t v;
        if (HALF) {
            T one = gc_from_f<T>(pin ? 1.0f : 0.0f);
            v = (uint32_t) * (const unsigned short *)&one;
        } else {
            v = __float_as_uint(pin ? 1.0f : 0.0f);
        }
        *(uint32_t *)(smem + (dst - sbase)) = v;
        return;
    }
    bool in0 = pin && kind != 0, in1 = in0 && kind == 1;
    if (in0 && !interior) {
        const int kh = e.y >> 22;
        const bool hok = (unsigned)(ih0 + kh * a.dh) < (unsigned)a.H;
        in0 = hok && (unsigned)(iw0 + ((e.y >> 2) & 1023)) < (unsigned)a.W;
        in1 = in1 && hok && (unsigned)(iw0 + ((e.y >> 12) & 1023)) < (unsigned)a.W;
    }
    const int o = base + e.x;
    if (!HALF || (a.vec && (in0 || !in1))) {
        const int bytes = in0 ? (HALF && !in1 ? 2 : 4) : 0;
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(dst), "l"(x + (in0 ? o : 0)),
                     "r"(bytes));
    } else { /* not 4-byte aligned, or only the second element inside the image */
        T lo = in0 ? x[o] : gc_from_f<T>(0.0f), hi = in1 ? x[o + 1] : gc_from_f<T>(0.0f);
        const uint32_t v = (uint32_t) * (const unsigned short *)&lo | ((uint32_t) * (const unsigned short *)&hi << 16);
        *(uint32_t *)(smem + (dst - sbase)) = v;
    }
}

/* the window corner of pixel k: base offset in x, (ih0, iw0), inside the image or not */
static __device__ __forceinline__ void sc_pixel(const sc_args &a, int k, int &base, int &ih0, int &iw0,
                                                bool &interior)
{
    const int n = cv_div(k, a.ohw), rem = k - n * (a.OH * a.OW);
    const int oh = cv_div(rem, a.ow), ow = rem - oh * a.OW;
    ih0 = oh * a.sh - a.pt;
    iw0 = ow * a.sw - a.pl;
    base = ((n * a.H + ih0) * a.W + iw0) * a.C;
    interior = ih0 >= 0 && iw0 >= 0 && ih0 + (a.KH - 1) * a.dh < a.H && iw0 + a.KW - 1 < a.W;
}

/* ------------------------------------------------------------------ weight gradient */
#define SCW_BM 160
#define SCW_BN 64
#define SCW_PA(sz) (SCW_BM * (sz) + ((sz) == 2 ? 16 : 32))
#define SCW_PB(sz) (SCW_BN * (sz) + ((sz) == 2 ? 16 : 32))
#define SCW_STAGE 15360 /* 32 * 336 + 32 * 144 = 16 * 672 + 16 * 288 */
#define SCW_STAGES 3

template <typename T>
static __global__ void __launch_bounds__(SC_THREADS, 3) conv_smallc_wgrad_kernel(const sc_args a)
{
    constexpr int SZ = (int)sizeof(T), WE = 4 / SZ, VEC = 16 / SZ;
    constexpr int BK = 512 / SZ / 8;              /* pixels per stage: 32 or 16 */
    constexpr int PA = SCW_PA(SZ), PB = SCW_PB(SZ);
    constexpr int A_BYTES = BK * PA;
    constexpr int WPR = SCW_BM / WE;              /* words per pixel row: 80 or 160 */
    constexpr int TPP = SC_THREADS / BK;          /* loader threads per pixel: 4 or 8 */
    constexpr int WPT = WPR / TPP;                /* words per thread: 20 */
    constexpr int SEGB = SCW_BN / VEC, RSTEP_B = SC_THREADS / SEGB;
    static_assert(A_BYTES + BK * PB == SCW_STAGE, "smallc wgrad stage size");
    static_assert(RSTEP_B * 2 == BK && WPT * TPP == WPR, "smallc wgrad loader coverage");
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int2 tab[WPR];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.x * SCW_BM, n0 = blockIdx.y * SCW_BN;
    const int kbeg = blockIdx.z * a.chunk, kend = min(a.P, kbeg + a.chunk);
    const int ones_row = a.with_db ? a.KH * a.KWCp : -1;
    const T *x = (const T *)a.x, *dy = (const T *)a.dy;
    for (int i = tid; i < WPR; i += SC_THREADS) tab[i] = sc_entry(a, m0 + i * WE, ones_row);
    __syncthreads();

    const int pl = tid / TPP, q = tid % TPP;
    const int segB = tid % SEGB, rowB = tid / SEGB, fB = n0 + segB * VEC;
    const uint32_t sbase = cv_smem(smem);
    const int KT = (kend - kbeg + BK - 1) / BK;

    auto load_tile = [&](int kt, int stage) {
        const uint32_t sA = sbase + stage * SCW_STAGE, sB = sA + A_BYTES;
        const int kb = kbeg + kt * BK, k = kb + pl;
        const bool pin = k < kend;
        int base = 0, ih0 = 0, iw0 = 0;
        bool interior = false;
        if (pin) sc_pixel(a, k, base, ih0, iw0, interior);
        const uint32_t rowA = sA + pl * PA;
#pragma unroll 4
        for (int i = 0; i < WPT; i++) {
            const int wi = q + i * TPP;
            sc_word<T>(smem, sbase, rowA + wi * 4, x, base, tab[wi], ih0, iw0, pin, interior, a);
        }
#pragma unroll
        for (int i = 0; i < 2; i++) {
            const int r = rowB + i * RSTEP_B, kk = kb + r;
            const uint32_t d = sB + r * PB + segB * 16;
            const int o = kk * a.F + fB;
            if (a.vec_dy) {
                const bool ok = kk < kend && fB < a.F;
                cv_cp16_cg(d, dy + (ok ? o : 0), ok ? 16 : 0);
            } else {
                uint4 u;
                T *e = (T *)&u;
#pragma unroll
                for (int j = 0; j < VEC; j++) e[j] = (kk < kend && fB + j < a.F) ? dy[o + j] : gc_from_f<T>(0.0f);
                *(uint4 *)(smem + (d - sbase)) = u;
            }
        }
    };

    float acc[5][4][4];
#pragma unroll
    for (int i = 0; i < 5; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int k = 0; k < 4; k++) acc[i][j][k] = 0.0f;

    const int g = lane >> 2, t = lane & 3;
    int wstage = 0, rstage = 0;
    for (int s = 0; s < SCW_STAGES - 1; s++) {
        if (s < KT) load_tile(s, wstage);
        cv_cp_commit();
        wstage++;
    }
    for (int kt = 0; kt < KT; kt++) {
        cv_cp_wait<SCW_STAGES - 2>();
        __syncthreads();
        if (kt + SCW_STAGES - 1 < KT) load_tile(kt + SCW_STAGES - 1, wstage);
        cv_cp_commit();
        wstage = wstage + 1 == SCW_STAGES ? 0 : wstage + 1;

        const uint32_t sA = sbase + rstage * SCW_STAGE, sB = sA + A_BYTES;
        rstage = rstage + 1 == SCW_STAGES ? 0 : rstage + 1;
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t af[5][4], bf[4][2];
            if (SZ == 2) {
#pragma unroll
                for (int mi = 0; mi < 5; mi++)
                    cv_ldsm4_t(af[mi], sA + (ks * 16 + (lane & 7) + (lane >> 4) * 8) * PA +
                                           (wm * 80 + mi * 16 + ((lane >> 3) & 1) * 8) * 2);
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
                for (int mi = 0; mi < 5; mi++) {
                    const uint32_t b = sA + (ks * 8 + t) * PA + (wm * 80 + mi * 16 + g) * 4;
                    af[mi][0] = cv_prep<T>(cv_lds32(b));
                    af[mi][1] = cv_prep<T>(cv_lds32(b + 32));
                    af[mi][2] = cv_prep<T>(cv_lds32(b + 4 * PA));
                    af[mi][3] = cv_prep<T>(cv_lds32(b + 4 * PA + 32));
                }
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    const uint32_t b = sB + (ks * 8 + t) * PB + (wn * 32 + ni * 8 + g) * 4;
                    bf[ni][0] = cv_prep<T>(cv_lds32(b));
                    bf[ni][1] = cv_prep<T>(cv_lds32(b + 4 * PB));
                }
            }
#pragma unroll
            for (int mi = 0; mi < 5; mi++)
#pragma unroll
                for (int ni = 0; ni < 4; ni++) cv_mma(acc[mi][ni], af[mi], bf[ni], T());
        }
    }
    cv_cp_wait<0>();

    /* partials of this split: GEMM row (kh, j) -> kernel row kh*KW*C + j, db row -> KC */
    const int rows = a.KC + a.with_db;
    float *pz = a.part + (int64_t)blockIdx.z * rows * a.F;
    const bool pair = (a.F & 1) == 0;
#pragma unroll
    for (int mi = 0; mi < 5; mi++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int m = m0 + wm * 80 + mi * 16 + g + hf * 8;
            const int kh = m / a.KWCp, j = m - kh * a.KWCp;
            int row = -1;
            if (kh < a.KH && j < a.KWC) row = kh * a.KWC + j;
            else if (m == ones_row) row = a.KC;
            if (row < 0) continue;
            float *pr = pz + (int64_t)row * a.F;
#pragma unroll
            for (int ni = 0; ni < 4; ni++) {
                const int n = n0 + wn * 32 + ni * 8 + 2 * t;
                if (n >= a.F) continue;
                if (pair) {
                    *(float2 *)(pr + n) = make_float2(acc[mi][ni][2 * hf], acc[mi][ni][2 * hf + 1]);
                } else {
                    pr[n] = acc[mi][ni][2 * hf];
                    if (n + 1 < a.F) pr[n + 1] = acc[mi][ni][2 * hf + 1];
                }
            }
        }
}

/* ------------------------------------------------------------------ forward */
#define SCF_BM 128
#define SCF_BN 64
#define SCF_PITCH 80 /* 64 bytes of K per row + 16: conflict-free ldmatrix */
#define SCF_A_BYTES (SCF_BM * SCF_PITCH)
#define SCF_STAGE ((SCF_BM + SCF_BN) * SCF_PITCH)
#define SCF_STAGES 3
#define SCF_TAB (SC_KMAX) /* words of K at most (f32: one element per word) */

/* wt[f][k] = w[kh*KW*C + j][f] for k = kh*KWCp + j with j < KW*C, else 0 (k < Kpad) */
template <typename T>
static __global__ void __launch_bounds__(256) conv_smallc_wt_kernel(const sc_args a, T *wt)
{
    const int total = a.F * a.Kpad;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        const int f = i / a.Kpad, k = i - f * a.Kpad;
        const int kh = k / a.KWCp, j = k - kh * a.KWCp;
        wt[i] = (kh < a.KH && j < a.KWC) ? ((const T *)a.w)[(int64_t)(kh * a.KWC + j) * a.F + f]
                                         : gc_from_f<T>(0.0f);
    }
}

template <typename T>
static __global__ void __launch_bounds__(SC_THREADS, 3) conv_smallc_fwd_kernel(const sc_args a)
{
    constexpr int SZ = (int)sizeof(T), WE = 4 / SZ, VEC = 16 / SZ;
    constexpr int BK = 64 / SZ;   /* K elements per stage */
    constexpr int WPK = BK / WE;  /* words per row per stage: 16 */
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ int2 tab[SCF_TAB];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp >> 1, wn = warp & 1;
    const int m0 = blockIdx.x * SCF_BM, n0 = blockIdx.y * SCF_BN;
    const int KT = a.Kpad / BK, nwords = a.Kpad / WE;
    const T *x = (const T *)a.x, *wt = (const T *)a.w;
    for (int i = tid; i < nwords; i += SC_THREADS) tab[i] = sc_entry(a, i * WE, -1);

    /* loader: row tid of A (one output pixel), 2 x 16-byte segments of B */
    const int k = m0 + tid;
    const bool pin = k < a.P;
    int base = 0, ih0 = 0, iw0 = 0;
    bool interior = false;
    if (pin) sc_pixel(a, k, base, ih0, iw0, interior);
    const int segB = tid & 3, rowB = tid >> 2; /* rows rowB, rowB + 32 */
    __syncthreads();
    const uint32_t sbase = cv_smem(smem);

    auto load_tile = [&](int kt, int stage) {
        const uint32_t sA = sbase + stage * SCF_STAGE + tid * SCF_PITCH;
        const uint32_t sB = sbase + stage * SCF_STAGE + SCF_A_BYTES;
#pragma unroll 4
        for (int i = 0; i < WPK; i++)
            sc_word<T>(smem, sbase, sA + i * 4, x, base, tab[kt * WPK + i], ih0, iw0, pin, interior, a);
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int f = n0 + rowB + 32 * r;
            const bool ok = f < a.F;
            cv_cp16(sB + (rowB + 32 * r) * SCF_PITCH + segB * 16,
                    wt + (ok ? (int64_t)f * a.Kpad + kt * BK + segB * VEC : 0), ok ? 16 : 0);
        }
    };

    float acc[4][4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++)
#pragma unroll
            for (int kk = 0; kk < 4; kk++) acc[i][j][kk] = 0.0f;

    const uint32_t a_off = (wm * 64 + (lane & 7) + ((lane >> 3) & 1) * 8) * SCF_PITCH + (lane >> 4) * 16;
    const uint32_t b_off = SCF_A_BYTES + (wn * 32 + (lane & 7) + (lane >> 4) * 8) * SCF_PITCH +
                           ((lane >> 3) & 1) * 16;
    int wstage = 0, rstage = 0;
    for (int s = 0; s < SCF_STAGES - 1; s++) {
        if (s < KT) load_tile(s, wstage);
        cv_cp_commit();
        wstage++;
    }
    for (int kt = 0; kt < KT; kt++) {
        cv_cp_wait<SCF_STAGES - 2>();
        __syncthreads();
        if (kt + SCF_STAGES - 1 < KT) load_tile(kt + SCF_STAGES - 1, wstage);
        cv_cp_commit();
        wstage = wstage + 1 == SCF_STAGES ? 0 : wstage + 1;
        const uint32_t st = sbase + rstage * SCF_STAGE;
        rstage = rstage + 1 == SCF_STAGES ? 0 : rstage + 1;
#pragma unroll
        for (int ks = 0; ks < 2; ks++) {
            uint32_t af[4][4], bf[4][2];
#pragma unroll
            for (int mi = 0; mi < 4; mi++) {
                cv_ldsm4(af[mi], st + a_off + mi * 16 * SCF_PITCH + ks * 32);
#pragma unroll
                for (int r = 0; r < 4; r++) af[mi][r] = cv_prep<T>(af[mi][r]);
            }
#pragma unroll
            for (int p = 0; p < 2; p++) {
                uint32_t r[4];
                cv_ldsm4(r, st + b_off + p * 16 * SCF_PITCH + ks * 32);
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

    /* epilogue: bias + activation, rounded, staged in shared memory, 16-byte stores */
    const int g = lane >> 2, t = lane & 3;
    constexpr int CP = SCF_BN * SZ + 16;
    static_assert(SCF_BM * CP <= SCF_STAGES * SCF_STAGE, "smallc fwd staging");
    const T *bias = (const T *)a.bias;
#pragma unroll
    for (int ni = 0; ni < 4; ni++) {
        const int col = wn * 32 + ni * 8 + 2 * t;
        float b0 = 0.0f, b1 = 0.0f;
        if (bias) {
            if (n0 + col < a.F) b0 = gc_to_f(bias[n0 + col]);
            if (n0 + col + 1 < a.F) b1 = gc_to_f(bias[n0 + col + 1]);
        }
#pragma unroll
        for (int mi = 0; mi < 4; mi++)
#pragma unroll
            for (int hf = 0; hf < 2; hf++) {
                T *d = (T *)(smem + (wm * 64 + mi * 16 + g + hf * 8) * CP) + col;
                d[0] = gc_from_f<T>(conv_act(acc[mi][ni][2 * hf] + b0, a.act));
                d[1] = gc_from_f<T>(conv_act(acc[mi][ni][2 * hf + 1] + b1, a.act));
            }
    }
    __syncthreads();
    constexpr int SEGS = SCF_BN * SZ / 16;
    T *y = (T *)a.y;
    for (int idx = tid; idx < SCF_BM * SEGS; idx += SC_THREADS) {
        const int r = idx / SEGS, s = idx - r * SEGS, m = m0 + r, n = n0 + s * VEC;
        if (m >= a.P || n >= a.F) continue;
        T *dst = y + (int64_t)m * a.F + n;
        const unsigned char *sp = smem + r * CP + s * 16;
        if (a.vec_out) {
            *(uint4 *)dst = *(const uint4 *)sp;
        } else {
            const T *e = (const T *)sp;
            for (int j = 0; j < VEC && n + j < a.F; j++) dst[j] = e[j];
        }
    }
}

/* ------------------------------------------------------------------ host side */
static int sc_aligned(const void *p, unsigned b) { return ((uintptr_t)p & (b - 1)) == 0; }

static int sc_kwcp(const gc_conv2d_geom *g, gc_dtype dt)
{
    const int64_t kwc = g->KW * g->C;
    return (int)(gc_dtype_size(dt) == 2 ? (kwc + 1) & ~(int64_t)1 : kwc);
}

extern "C" int gc_conv2d_smallc_applies(const gc_conv2d_geom *g, gc_dtype dt)
{
    const int64_t lim = (int64_t)1 << 30;
    if (g->dw != 1 || g->KW > 512 || g->KH > 512) return 0;
    if ((int64_t)g->KH * sc_kwcp(g, dt) > SC_KMAX) return 0;
    /* 32-bit offsets, including a window corner over the padding */
    return g->N * g->OH * g->OW * g->F < lim && g->N * g->OH * g->OW < lim &&
           (double)(g->N * g->H + (g->KH - 1) * g->dh + 1) * (double)(g->W + g->KW + 1) * (double)g->C <
               (double)lim &&
           g->F < 65535 * 64;
}

static void sc_fill(sc_args *a, const gc_conv2d_geom *g, gc_dtype dt)
{
    a->H = (int)g->H; a->W = (int)g->W; a->C = (int)g->C; a->F = (int)g->F;
    a->KH = (int)g->KH; a->KW = (int)g->KW;
    a->sh = g->sh; a->sw = g->sw; a->dh = g->dh; a->pt = g->pad_top; a->pl = g->pad_left;
    a->OH = (int)g->OH; a->OW = (int)g->OW; a->P = (int)(g->N * g->OH * g->OW);
    a->KWC = (int)(g->KW * g->C); a->KWCp = sc_kwcp(g, dt); a->KC = (int)(g->KH * a->KWC);
    a->ohw = cv_make_fastdiv(a->OH * a->OW);
    a->ow = cv_make_fastdiv(a->OW);
    a->x = a->w = a->bias = a->dy = NULL;
    a->y = NULL;
    a->part = NULL;
    a->Kpad = 0;
    a->with_db = 0; a->chunk = 0; a->vec = 0; a->vec_dy = 0; a->vec_out = 0; a->act = 0;
}

/* 16-bit words are 4-byte aligned for every pixel and tap: even element offsets of
 * rows, window corners and the pointer itself. */
static int sc_vec(const gc_conv2d_geom *g, gc_dtype dt, const void *x)
{
    if (gc_dtype_size(dt) != 2) return 1;
    return sc_aligned(x, 4) && (g->W * g->C) % 2 == 0 && (g->sw * g->C) % 2 == 0 && (g->pad_left * g->C) % 2 == 0;
}

extern "C" gc_status gc_conv2d_smallc_fwd(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                          const void *x, const void *w, const void *bias, gc_act act, void *y)
{
    if (!gc_conv2d_smallc_applies(g, dt))
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_fwd: the small-C kernel does not take this shape");
    sc_args a;
    sc_fill(&a, g, dt);
    const int esz = (int)gc_dtype_size(dt), bk = 64 / esz;
    a.Kpad = (a.KH * a.KWCp + bk - 1) / bk * bk;
    a.x = x; a.bias = bias; a.y = y; a.act = (int)act;
    a.vec = sc_vec(g, dt, x);
    a.vec_out = g->F % (16 / esz) == 0 && sc_aligned(y, 16);
    if (a.P == 0) return GC_OK;
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)a.F * a.Kpad * esz, &ws);
    if (st) return st;
    cudaStream_t s = gc_cuda_stream(be);
    const int total = a.F * a.Kpad;
    const unsigned wblocks = (unsigned)((total + 255) / 256 < 1024 ? (total + 255) / 256 : 1024);
    a.w = w;
    GC_CUDA_DISPATCH_FLOAT(dt, T, conv_smallc_wt_kernel<T><<<wblocks, 256, 0, s>>>(a, (T *)ws));
    if ((st = gc_cuda_launch_check("conv2d_fwd: small-C weight layout"))) return st;
    a.w = ws;
    dim3 grid((unsigned)((a.P + SCF_BM - 1) / SCF_BM), (unsigned)((a.F + SCF_BN - 1) / SCF_BN));
    const size_t smem = (size_t)SCF_STAGES * SCF_STAGE;
    GC_CUDA_DISPATCH_FLOAT(dt, T, conv_smallc_fwd_kernel<T><<<grid, SC_THREADS, smem, s>>>(a));
    return gc_cuda_launch_check("conv2d_fwd (small C)");
}

extern "C" gc_status gc_conv2d_smallc_bwd_filter(const gc_backend *be, const gc_conv2d_geom *g, gc_dtype dt,
                                                 const void *x, const void *dy, void *dw, void *db)
{
    if (!gc_conv2d_smallc_applies(g, dt))
        return gc_fail(GC_ERR_UNSUPPORTED, "conv2d_bwd_filter: the small-C kernel does not take this shape");
    sc_args a;
    sc_fill(&a, g, dt);
    const int esz = (int)gc_dtype_size(dt), bk = 512 / esz / 8;
    a.x = x; a.dy = dy; a.with_db = db ? 1 : 0;
    a.vec = sc_vec(g, dt, x);
    a.vec_dy = g->F % (16 / esz) == 0 && sc_aligned(dy, 16);
    const int64_t P = a.P, F = a.F, KC = a.KC, rows = KC + a.with_db;
    cudaStream_t s = gc_cuda_stream(be);
    if (P == 0) {
        GC_CUDA_TRY(cudaMemsetAsync(dw, 0, (size_t)(KC * F) * esz, s));
        if (db) GC_CUDA_TRY(cudaMemsetAsync(db, 0, (size_t)F * esz, s));
        return GC_OK;
    }
    const int64_t mrows = (int64_t)a.KH * a.KWCp + a.with_db;
    const int64_t mt = (mrows + SCW_BM - 1) / SCW_BM, nt = (F + SCW_BN - 1) / SCW_BN;
    /* split-K: about two waves of 3 blocks per SM, at least 8 stages of pixels per block */
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    int64_t S = (sms * 6 + mt * nt - 1) / (mt * nt);
    if (S < 1) S = 1;
    int64_t chunk = (P + S - 1) / S;
    chunk = (chunk + bk - 1) / bk * bk;
    if (chunk < 8 * bk) chunk = 8 * bk;
    S = (P + chunk - 1) / chunk;
    if (S > 65535) {
        chunk = ((P + 65534) / 65535 + bk - 1) / bk * bk;
        S = (P + chunk - 1) / chunk;
    }
    a.chunk = (int)chunk;
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(S * rows * F) * sizeof(float), &ws);
    if (st) return st;
    a.part = (float *)ws;
    dim3 grid((unsigned)mt, (unsigned)nt, (unsigned)S);
    const size_t smem = (size_t)SCW_STAGES * SCW_STAGE;
    GC_CUDA_DISPATCH_FLOAT(dt, T, conv_smallc_wgrad_kernel<T><<<grid, SC_THREADS, smem, s>>>(a));
    if ((st = gc_cuda_launch_check("conv2d_bwd_filter (small C)"))) return st;
    if ((st = gc_conv2d_reduce_splits(be, dt, a.part, (int)S, rows * F, KC * F, dw))) return st;
    if (db) st = gc_conv2d_reduce_splits(be, dt, a.part + KC * F, (int)S, rows * F, F, db);
    return st;
}
