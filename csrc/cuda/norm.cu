/* norm.cu -- batch normalization on CUDA: batchnorm_fwd (batch statistics, moving
 * averages, y = act(gamma * xhat + beta + residual)) and batchnorm_bwd (dx, dgamma,
 * dbeta, dresidual), f32/f16/bf16 activations, float32 per-channel tensors.
 *
 * x is viewed as (R, C), channels contiguous (NHWC). These passes are memory-bound, so
 * every kernel gives a thread one fixed group of V consecutive channels, V = 16 bytes /
 * sizeof(T) (8 for f16/bf16, 4 for f32), and loops over rows: every access is one
 * 16-byte vector, consecutive threads touch consecutive vectors of a row, the
 * per-channel factors sit in registers from before the row loop (no per-element channel
 * index or reload), and a thread keeps several rows' loads in flight. When C is not a
 * multiple of V or a pointer is not 16-byte aligned the same kernels run with scalar
 * accesses (the last group of a row partly masked) and the same arithmetic.
 *
 * Per-channel reductions are two deterministic stages (no atomics, fixed order, so a
 * step replays bit for bit):
 *   1. partial: a block of TX channel groups x TY row lanes (TX * TY = 256, powers of
 *      two) reduces one chunk of rows into the backend's fixed scratch buffer
 *      (capture-safe); lane ty takes rows ty, ty + TY, ... of the chunk in order, and
 *      the lanes are combined by a fixed shared-memory tree. The forward keeps (count,
 *      mean, M2) per channel (Welford, merged 4 rows at a time; Chan's formula across
 *      lanes: accurate whatever the mean's size); the backward sums dz and dz * xhat.
 *   2. final: a block of 8 channels x 32 chunk lanes merges the chunks in double (lane
 *      l takes chunks l, l + 32, ..., then a fixed tree; a warp reads whole 32-byte
 *      sectors of the partials; the forward's merge is two passes, mean then M2, as the
 *      chunks' row counts are known: no divisions) and writes the statistics (save,
 *      moving averages) or dgamma, dbeta and the two means the training dx needs.
 * Block shape and chunking depend only on (R, C, dtype), never on the device or on
 * pointer alignment (both access paths do the same per-channel arithmetic), so every GPU
 * reduces in the same order. Static shared memory is 17 KB per block at most: any sm_80+.
 *
 * The elementwise passes run one resident wave of blocks (occupancy calculator) with a
 * grid stride over rows; the grid spreads the work and never changes a result. The
 * forward is csrc/cpu/norm.c's float32 formula, (x - mean) * (gamma * invstd) + beta;
 * the training dx folds its factors per channel, a * dz - d - b * (x - mean) with
 * a = gamma * invstd, d = a * mean_R(dz), b = a * invstd * mean_R(dz * xhat) (the CPU's
 * formula to float32 rounding; x - mean stays explicit so a large mean costs nothing).
 * The relu mask of the backward is read from y, or (mask_from_x: BN + ReLU without a
 * residual) recomputed from x with the forward's own fused multiply-add and compared with
 * half the storage type's smallest subnormal -- the mask of the rounded y bit for bit,
 * without y's two reads (the kernels are instantiated per mask source).
 * f16/bf16 stores round to nearest even with common.cuh's NaN encoding, branch-free.
 * dx may alias dy: each element is read and then written by one thread, loads before
 * stores. All launches go to the backend's stream; no host syncs (graph-capturable). */
#include "common.cuh"

#define BN_THREADS 256   /* threads of every partial / elementwise block */
#define BN_FIN_C 8       /* channels of a final-stage block (a 32-byte sector of a chunk row) */
#define BN_FIN_L 32      /* chunk lanes of a final-stage block */
#define BN_TARGET 1024   /* partial-stage blocks aimed at (device independent) */
#define BN_LANE_MAX 1024 /* rows per lane of a chunk at most (float sums stay accurate) */
#define BN_LANE_MIN 8    /* rows per lane of a chunk at least (where R allows) */
#define BN_ROWS_MIN 8    /* rows per elementwise thread at least (where R allows) */

/* channels per thread: one 16-byte vector of T */
template <typename T> struct bn_vec_width { static constexpr int V = 16 / (int)sizeof(T); };

/* ------------------------------------------------------------------ accesses
 * A thread's V values of T travel as one 16-byte word vector (bn_raw); bn_cvt converts
 * element j to float and pairs of floats back, rounding to nearest even with NaN
 * mapped exactly as common.cuh's gc_f2h / gc_f2bf (the same bits), without branches. */
struct bn_raw { uint32_t u[4]; };

template <typename T> struct bn_cvt;
template <> struct bn_cvt<float> {
    static __device__ __forceinline__ float get(const bn_raw &r, int j) { return __uint_as_float(r.u[j]); }
    static __device__ __forceinline__ void put2(bn_raw &r, int j, float a, float b)
    {
        r.u[j] = __float_as_uint(a);
        r.u[j + 1] = __float_as_uint(b);
    }
};
template <> struct bn_cvt<__nv_bfloat16> {
    static __device__ __forceinline__ float get(const bn_raw &r, int j)
    {
        const uint32_t w = r.u[j >> 1];
        return __uint_as_float((j & 1) ? (w & 0xffff0000u) : (w << 16));
    }
    static __device__ __forceinline__ void put2(bn_raw &r, int j, float a, float b) /* j even */
    {
        const __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* a in the low half */
        uint32_t w;
        __builtin_memcpy(&w, &h, 4);
        const uint32_t qa = (__float_as_uint(a) >> 16) | 0x40u, qb = (__float_as_uint(b) & 0xffff0000u) | 0x400000u;
        w = a != a ? (w & 0xffff0000u) | qa : w;
        w = b != b ? (w & 0x0000ffffu) | qb : w;
        r.u[j >> 1] = w;
    }
};
template <> struct bn_cvt<__half> {
    static __device__ __forceinline__ float get(const bn_raw &r, int j)
    {
        const uint32_t w = r.u[j >> 1];
        return __half2float(__ushort_as_half((unsigned short)((j & 1) ? (w >> 16) : (w & 0xffffu))));
    }
    static __device__ __forceinline__ void put2(bn_raw &r, int j, float a, float b) /* j even */
    {
        const __half2 h = __floats2half2_rn(a, b); /* a in the low half */
        uint32_t w;
        __builtin_memcpy(&w, &h, 4);
        const uint32_t qa = ((__float_as_uint(a) >> 16) & 0x8000u) | 0x7e00u;
        const uint32_t qb = (__float_as_uint(b) & 0x80000000u) | 0x7e000000u;
        w = a != a ? (w & 0xffff0000u) | qa : w;
        w = b != b ? (w & 0x0000ffffu) | qb : w;
        r.u[j >> 1] = w;
    }
};

template <typename T, int V> __device__ __forceinline__ bn_raw bn_pack(const float (&f)[V])
{
    bn_raw r;
#pragma unroll
    for (int j = 0; j < V; j += 2) bn_cvt<T>::put2(r, j, f[j], f[j + 1]);
    return r;
}

/* VEC: one 16-byte access (p aligned, all V channels present); else nv (<= V) scalar
 * accesses, the missing channels reading as 0. Plain (coherent) loads: dx may alias dy. */
template <typename T, int V, bool VEC> __device__ __forceinline__ bn_raw bn_ld(const T *p, int nv)
{
    bn_raw r;
    if (VEC) {
        const uint4 t = *(const uint4 *)p;
        r.u[0] = t.x;
        r.u[1] = t.y;
        r.u[2] = t.z;
        r.u[3] = t.w;
    } else if (sizeof(T) == 4) {
        const uint32_t *q = (const uint32_t *)p;
#pragma unroll
        for (int j = 0; j < 4; j++) r.u[j] = j < nv ? q[j] : 0u;
    } else {
        const unsigned short *q = (const unsigned short *)p;
#pragma unroll
        for (int j = 0; j < 4; j++)
            r.u[j] = (2 * j < nv ? (uint32_t)q[2 * j] : 0u) | (2 * j + 1 < nv ? (uint32_t)q[2 * j + 1] << 16 : 0u);
    }
    return r;
}

template <typename T, int V, bool VEC> __device__ __forceinline__ void bn_st(T *p, int nv, const bn_raw &r)
{
    if (VEC) {
        *(uint4 *)p = make_uint4(r.u[0], r.u[1], r.u[2], r.u[3]);
    } else if (sizeof(T) == 4) {
        uint32_t *q = (uint32_t *)p;
#pragma unroll
        for (int j = 0; j < 4; j++)
            if (j < nv) q[j] = r.u[j];
    } else {
        unsigned short *q = (unsigned short *)p;
#pragma unroll
        for (int j = 0; j < V; j++)
            if (j < nv) q[j] = (unsigned short)((j & 1) ? r.u[j >> 1] >> 16 : r.u[j >> 1] & 0xffffu);
    }
}

/* V per-channel floats (float4 accesses when VEC: p is then 16-byte aligned) */
template <int V, bool VEC> __device__ __forceinline__ void bn_ldc(const float *p, int nv, float (&f)[V])
{
    if (VEC) {
#pragma unroll
        for (int j = 0; j < V; j += 4) {
            const float4 t = *(const float4 *)(p + j);
            f[j] = t.x;
            f[j + 1] = t.y;
            f[j + 2] = t.z;
            f[j + 3] = t.w;
        }
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) f[j] = j < nv ? p[j] : 0.0f;
    }
}

template <int V, bool VEC> __device__ __forceinline__ void bn_stc(float *p, int nv, const float (&f)[V])
{
    if (VEC) {
#pragma unroll
        for (int j = 0; j < V; j += 4) *(float4 *)(p + j) = make_float4(f[j], f[j + 1], f[j + 2], f[j + 3]);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++)
            if (j < nv) p[j] = f[j];
    }
}

/* ------------------------------------------------------------------ chunking */
typedef struct {
    int tx, ty;          /* partial-stage block: channel groups x row lanes */
    int64_t col_blocks;  /* partial-stage blocks across the channels */
    int64_t chunks, rpc; /* rows per chunk; the last chunk may be shorter */
    float *part;         /* chunks x 2 x C floats */
    float *coef;         /* 2 x C floats after the partials */
} bn_plan;

static gc_status bn_chunking(const gc_backend *be, const char *what, int64_t R, int64_t C, int V, bn_plan *pl)
{
    const int64_t groups = (C + V - 1) / V;
    int tx = 1;
    while (tx < 32 && tx < groups) tx <<= 1; /* a warp spans >= 512 contiguous bytes when C allows */
    pl->tx = tx;
    pl->ty = BN_THREADS / tx;
    pl->col_blocks = (groups + tx - 1) / tx;
    const int64_t by_mem = (int64_t)(GC_CUDA_SCRATCH_BYTES / (2 * sizeof(float))) / C - 1;
    if (by_mem < 1)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: %lld channels are more than the CUDA backend's batch norm handles (%lld)",
                       what, (long long)C, (long long)(GC_CUDA_SCRATCH_BYTES / (4 * sizeof(float))));
    const int64_t most = (int64_t)BN_LANE_MAX * pl->ty, least = (int64_t)BN_LANE_MIN * pl->ty;
    int64_t chunks = (BN_TARGET + pl->col_blocks - 1) / pl->col_blocks;
    if (chunks < (R + most - 1) / most) chunks = (R + most - 1) / most;
    if (chunks > (R + least - 1) / least) chunks = (R + least - 1) / least;
    if (chunks > by_mem) chunks = by_mem;
    if (chunks > 65535) chunks = 65535;
    if (chunks < 1) chunks = 1;
    pl->rpc = (R + chunks - 1) / chunks;
    pl->chunks = (R + pl->rpc - 1) / pl->rpc;
    if (pl->col_blocks > 0x7fffffffLL)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: %lld channels is too many", what, (long long)C);
    pl->part = (float *)gc_cuda_scratch(be);
    pl->coef = pl->part + pl->chunks * 2 * C;
    return GC_OK;
}

/* (n, mean, M2) += (nb, mb, qb) for V channels sharing one count n: Chan et al.'s
 * pairwise update, w = nb / (n + nb) computed once */
template <int V> __device__ __forceinline__ void chan_merge_v(float &n, float (&m)[V], float (&q)[V], float nb,
                                                              const float (&mb)[V], const float (&qb)[V])
{
    if (nb == 0.0f) return;
    const float t = n + nb, w = nb / t;
#pragma unroll
    for (int j = 0; j < V; j++) {
        const float d = mb[j] - m[j];
        m[j] += d * w;
        q[j] += qb[j] + d * d * n * w;
    }
    n = t;
}

/* ------------------------------------------------------------------ forward statistics */
/* block (TX, TY), grid (col_blocks, chunks): part[k][0][c] = mean, part[k][1][c] = M2 of chunk k */
template <typename T, bool VEC>
__global__ void __launch_bounds__(BN_THREADS)
bn_stats_partial(int64_t R, int64_t C, int64_t rpc, const T *__restrict__ x, float *__restrict__ part)
{
    constexpr int V = bn_vec_width<T>::V;
    typedef bn_raw P;
    __shared__ float sm[V][BN_THREADS], sq[V][BN_THREADS], sn[BN_THREADS];
    const int TX = blockDim.x, TY = blockDim.y, ty = threadIdx.y, lin = ty * TX + threadIdx.x;
    const int64_t c0 = ((int64_t)blockIdx.x * TX + threadIdx.x) * V, k = blockIdx.y;
    const int64_t r0 = k * rpc, r1 = r0 + rpc < R ? r0 + rpc : R;
    const int nv = c0 >= C ? 0 : (C - c0 < V ? (int)(C - c0) : V);
    float n = 0.0f, m[V], q[V];
#pragma unroll
    for (int j = 0; j < V; j++) m[j] = q[j] = 0.0f;
    if (nv > 0) {
        /* one element offset; row r < r1 exactly when r * C + c0 < r1 * C (c0 < C) */
        const int64_t st = (int64_t)TY * C, end = r1 * C;
        int64_t o = (r0 + ty) * C + c0;
        /* four rows at a time: their own mean and M2, then one merge (one division) */
        for (; o + 3 * st < end; o += 4 * st) {
            const P a0 = bn_ld<T, V, VEC>(x + o, nv), a1 = bn_ld<T, V, VEC>(x + (o + st), nv);
            const P a2 = bn_ld<T, V, VEC>(x + (o + 2 * st), nv), a3 = bn_ld<T, V, VEC>(x + (o + 3 * st), nv);
            float mb[V], qb[V];
#pragma unroll
            for (int j = 0; j < V; j++) {
                const float v0 = bn_cvt<T>::get(a0, j), v1 = bn_cvt<T>::get(a1, j), v2 = bn_cvt<T>::get(a2, j),
                            v3 = bn_cvt<T>::get(a3, j);
                const float m4 = ((v0 + v1) + (v2 + v3)) * 0.25f;
                const float d0 = v0 - m4, d1 = v1 - m4, d2 = v2 - m4, d3 = v3 - m4;
                mb[j] = m4;
                qb[j] = (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3);
            }
            chan_merge_v<V>(n, m, q, 4.0f, mb, qb);
        }
        for (; o < end; o += st) {
            const P a = bn_ld<T, V, VEC>(x + o, nv);
            float mb[V], qb[V];
#pragma unroll
            for (int j = 0; j < V; j++) {
                mb[j] = bn_cvt<T>::get(a, j);
                qb[j] = 0.0f;
            }
            chan_merge_v<V>(n, m, q, 1.0f, mb, qb);
        }
    }
    /* lanes [s, 2s) hand their state to lanes [0, s): a fixed tree, one barrier a level
     * (a level writes only slots that no lane of the previous level reads) */
    for (int s = TY >> 1; s > 0; s >>= 1) {
        if (ty >= s && ty < 2 * s) {
            sn[lin] = n;
#pragma unroll
            for (int j = 0; j < V; j++) {
                sm[j][lin] = m[j];
                sq[j][lin] = q[j];
            }
        }
        __syncthreads();
        if (ty < s) {
            const int o = lin + s * TX;
            float mb[V], qb[V];
#pragma unroll
            for (int j = 0; j < V; j++) {
                mb[j] = sm[j][o];
                qb[j] = sq[j][o];
            }
            chan_merge_v<V>(n, m, q, sn[o], mb, qb);
        }
    }
    if (ty == 0 && nv > 0) {
        bn_stc<V, VEC>(part + k * 2 * C + c0, nv, m);
        bn_stc<V, VEC>(part + k * 2 * C + C + c0, nv, q);
    }
}

/* the sum over the BN_FIN_L lanes of a final-stage block, for each of its channels: a
 * fixed tree (deterministic); every thread gets its channel's total */
__device__ __forceinline__ double bn_fin_sum(double v, double (&sh)[BN_FIN_L][BN_FIN_C], int tx, int ty)
{
    sh[ty][tx] = v;
    __syncthreads();
    for (int s = BN_FIN_L / 2; s > 0; s >>= 1) {
        if (ty < s) {
            v += sh[ty + s][tx];
            sh[ty][tx] = v;
        }
        __syncthreads();
    }
    v = sh[0][tx];
    __syncthreads(); /* sh may be reused */
    return v;
}

/* block (BN_FIN_C channels x BN_FIN_L chunk lanes), grid ceil(C / BN_FIN_C): lane l takes
 * chunks l, l + BN_FIN_L, ... of its channel (a warp reads whole 32-byte sectors of each
 * chunk's row). Every chunk's row count is known, so the merge is two passes in double
 * without divisions: mean = sum(rows_k * mean_k) / R, then M2 = sum(M2_k + rows_k *
 * (mean_k - mean)^2). Writes save and the moving averages. */
__global__ void __launch_bounds__(BN_FIN_C * BN_FIN_L)
bn_stats_final(int64_t R, int64_t C, int64_t chunks, int64_t rpc, const float *__restrict__ part, float *save,
               float *mmean, float *mvar, float eps, float momentum)
{
    __shared__ double sh[BN_FIN_L][BN_FIN_C];
    const int tx = threadIdx.x % BN_FIN_C, ty = threadIdx.x / BN_FIN_C;
    const int64_t c = (int64_t)blockIdx.x * BN_FIN_C + tx;
    double sw = 0.0;
    if (c < C)
        for (int64_t k = ty; k < chunks; k += BN_FIN_L) {
            const int64_t rows = R - k * rpc < rpc ? R - k * rpc : rpc;
            sw += (double)rows * (double)part[k * 2 * C + c];
        }
    const double mean = bn_fin_sum(sw, sh, tx, ty) / (double)R;
    double q = 0.0;
    if (c < C)
        for (int64_t k = ty; k < chunks; k += BN_FIN_L) {
            const int64_t rows = R - k * rpc < rpc ? R - k * rpc : rpc;
            const double d = (double)part[k * 2 * C + c] - mean;
            q += (double)part[k * 2 * C + C + c] + (double)rows * d * d;
        }
    q = bn_fin_sum(q, sh, tx, ty);
    if (ty == 0 && c < C) {
        double var = q / (double)R;
        if (var < 0.0) var = 0.0;
        save[c] = (float)mean;
        save[C + c] = (float)(1.0 / sqrt(var + (double)eps));
        const double mom = (double)momentum;
        mmean[c] = (float)((double)mmean[c] * mom + mean * (1.0 - mom));
        mvar[c] = (float)((double)mvar[c] * mom + var * (1.0 - mom));
    }
}

/* inference: save = (moving_mean, 1/sqrt(moving_var + eps)) */
__global__ void bn_stats_moving(int64_t C, const float *mmean, const float *mvar, float *save, float eps)
{
    for (int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; c < C; c += (int64_t)gridDim.x * blockDim.x) {
        save[c] = mmean[c];
        save[C + c] = (float)(1.0 / sqrt((double)mvar[c] + (double)eps));
    }
}

/* ------------------------------------------------------------------ forward elementwise */
typedef struct {
    int64_t R, C;
    const void *x, *res;
    void *y;
    const float *mean, *invstd, *gamma, *beta;
    int relu;
} bn_fwd_args;

/* the pre-activation (before residual and ReLU), one fused multiply-add: the forward and
 * the backward's recomputed relu mask evaluate the same expression, so they agree bit for
 * bit (the contraction is spelled out, not left to the compiler) */
__device__ __forceinline__ float bn_pre(float x, float mean, float sc, float sh) { return __fmaf_rn(x - mean, sc, sh); }

/* the recomputed relu mask is round_to_T(v) > 0, i.e. v > half of T's smallest subnormal
 * (a tie rounds to the even 0): 0 for float32 */
template <typename T> __device__ __forceinline__ float bn_mask_floor();
template <> __device__ __forceinline__ float bn_mask_floor<float>() { return 0.0f; }
template <> __device__ __forceinline__ float bn_mask_floor<__half>() { return 0x1p-25f; }
template <> __device__ __forceinline__ float bn_mask_floor<__nv_bfloat16>() { return 0x1p-134f; }

/* one row of a thread's V channels: y = act((x - mean) * (gamma * invstd) + beta (+ res)) */
template <typename T, int V, bool VEC>
__device__ __forceinline__ void bn_fwd_row(const bn_raw &xv, const bn_raw &rv, bool res, int relu,
                                           const float (&mean)[V], const float (&sc)[V], const float (&sh)[V],
                                           T *yp, int nv)
{
    float y[V];
#pragma unroll
    for (int j = 0; j < V; j++) {
        float v = bn_pre(bn_cvt<T>::get(xv, j), mean[j], sc[j], sh[j]);
        if (res) v += bn_cvt<T>::get(rv, j);
        y[j] = (relu && v < 0.0f) ? 0.0f : v;
    }
    bn_st<T, V, VEC>(yp, nv, bn_pack<T, V>(y));
}

/* block (TX, TY), grid (ceil(groups / TX), any): thread (group, row lane) holds its V
 * channels' mean, gamma * invstd and beta and walks the rows with a grid stride, the
 * loads of U rows in flight at a time */
template <typename T, bool VEC>
__global__ void __launch_bounds__(BN_THREADS) bn_fwd_apply(bn_fwd_args a)
{
    constexpr int V = bn_vec_width<T>::V, U = 4;
    typedef bn_raw P;
    const int64_t C = a.C, R = a.R;
    const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (c0 >= C || r >= R) return;
    const int nv = VEC ? V : (C - c0 < V ? (int)(C - c0) : V);
    float mean[V], sc[V], sh[V];
    bn_ldc<V, VEC>(a.mean + c0, nv, mean);
    bn_ldc<V, VEC>(a.invstd + c0, nv, sc);
    if (a.gamma) {
        float g[V];
        bn_ldc<V, VEC>(a.gamma + c0, nv, g);
#pragma unroll
        for (int j = 0; j < V; j++) sc[j] = g[j] * sc[j];
    }
    if (a.beta) {
        bn_ldc<V, VEC>(a.beta + c0, nv, sh);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) sh[j] = 0.0f;
    }
    const int relu = a.relu;
    const bool res = a.res != NULL;
    const int64_t step = (int64_t)gridDim.y * blockDim.y * C;
    const T *xb = (const T *)a.x, *rb = (const T *)a.res;
    T *yb = (T *)a.y;
    /* one element offset for every operand. The rows are walked from the last one down
     * (row R - 1 - r, then step rows lower, ...): the statistics pass read the last rows
     * last, so they are still in L2, and the consumer of y (the next layer, reading
     * from row 0) finds the first rows there. Row R - 1 - r >= 0 exactly when its
     * offset is >= 0 (c0 < C). */
    int64_t o = (R - 1 - r) * C + c0;
    for (; o - (U - 1) * step >= 0; o -= U * step) {
        P xv[U], rv[U];
#pragma unroll
        for (int u = 0; u < U; u++) xv[u] = bn_ld<T, V, VEC>(xb + (o - u * step), nv);
        if (res) {
#pragma unroll
            for (int u = 0; u < U; u++) rv[u] = bn_ld<T, V, VEC>(rb + (o - u * step), nv);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            bn_fwd_row<T, V, VEC>(xv[u], rv[u], res, relu, mean, sc, sh, yb + (o - u * step), nv);
    }
    for (; o >= 0; o -= step) {
        P xv = bn_ld<T, V, VEC>(xb + o, nv), rv;
        if (res) rv = bn_ld<T, V, VEC>(rb + o, nv);
        bn_fwd_row<T, V, VEC>(xv, rv, res, relu, mean, sc, sh, yb + o, nv);
    }
}

/* ------------------------------------------------------------------ backward
 * MM, the relu mask's source: BN_MASK_NONE (linear), BN_MASK_Y (the forward's output y >
 * 0, read), BN_MASK_X (recomputed from x with the forward's scale and shift: no y read;
 * a forward without a residual only) */
enum { BN_MASK_NONE = 0, BN_MASK_Y = 1, BN_MASK_X = 2 };

/* dz of element j: dy, zeroed where the mask is off */
template <typename T, int MM>
__device__ __forceinline__ float bn_dz(const bn_raw &gv, const bn_raw &xv, const bn_raw &yv, int j, float mean,
                                       float sc, float sh)
{
    const float g = bn_cvt<T>::get(gv, j);
    if (MM == BN_MASK_Y) return bn_cvt<T>::get(yv, j) > 0.0f ? g : 0.0f;
    if (MM == BN_MASK_X) return bn_pre(bn_cvt<T>::get(xv, j), mean, sc, sh) > bn_mask_floor<T>() ? g : 0.0f;
    return g;
}

/* s1 += dz, s2 += dz * xhat over one row of a thread's V channels */
template <typename T, int V, int MM>
__device__ __forceinline__ void bn_bwd_sums(const bn_raw &gv, const bn_raw &xv, const bn_raw &yv,
                                            const float (&mean)[V], const float (&inv)[V], const float (&sc)[V],
                                            const float (&sh)[V], float (&s1)[V], float (&s2)[V])
{
#pragma unroll
    for (int j = 0; j < V; j++) {
        const float dz = bn_dz<T, MM>(gv, xv, yv, j, mean[j], sc[j], sh[j]);
        const float xh = (bn_cvt<T>::get(xv, j) - mean[j]) * inv[j];
        s1[j] += dz;
        s2[j] += dz * xh;
    }
}

/* a thread's forward scale gamma * invstd (invstd without gamma) and shift beta (0
 * without), for BN_MASK_X; exactly the products bn_fwd_apply forms */
template <int V, bool VEC>
__device__ __forceinline__ void bn_scale_shift(const float *gamma, const float *beta, const float (&inv)[V], int nv,
                                               float (&sc)[V], float (&sh)[V])
{
    if (gamma) {
        bn_ldc<V, VEC>(gamma, nv, sc);
#pragma unroll
        for (int j = 0; j < V; j++) sc[j] = sc[j] * inv[j];
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) sc[j] = inv[j];
    }
    if (beta) {
        bn_ldc<V, VEC>(beta, nv, sh);
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) sh[j] = 0.0f;
    }
}

/* block (TX, TY), grid (col_blocks, chunks): part[k][0][c] = sum dz, part[k][1][c] = sum dz * xhat */
template <typename T, bool VEC, int MM>
__global__ void __launch_bounds__(BN_THREADS)
bn_bwd_partial(int64_t R, int64_t C, int64_t rpc, const T *__restrict__ x, const T *__restrict__ dy,
               const T *__restrict__ y, const float *__restrict__ save, const float *__restrict__ gamma,
               const float *__restrict__ beta, float *__restrict__ part)
{
    constexpr int V = bn_vec_width<T>::V, U = 2;
    typedef bn_raw P;
    __shared__ float s1m[V][BN_THREADS], s2m[V][BN_THREADS];
    const int TX = blockDim.x, TY = blockDim.y, ty = threadIdx.y, lin = ty * TX + threadIdx.x;
    const int64_t c0 = ((int64_t)blockIdx.x * TX + threadIdx.x) * V, k = blockIdx.y;
    const int64_t r0 = k * rpc, r1 = r0 + rpc < R ? r0 + rpc : R;
    const int nv = c0 >= C ? 0 : (C - c0 < V ? (int)(C - c0) : V);
    float s1[V], s2[V];
#pragma unroll
    for (int j = 0; j < V; j++) s1[j] = s2[j] = 0.0f;
    if (nv > 0) {
        float mean[V], inv[V], sc[V], sh[V];
        bn_ldc<V, VEC>(save + c0, nv, mean);
        bn_ldc<V, VEC>(save + C + c0, nv, inv);
        if (MM == BN_MASK_X) bn_scale_shift<V, VEC>(gamma ? gamma + c0 : NULL, beta ? beta + c0 : NULL, inv, nv, sc, sh);
        /* one element offset; row r < r1 exactly when r * C + c0 < r1 * C (c0 < C). The
         * rows of a lane in order, U rows' loads in flight at a time */
        const int64_t st = (int64_t)TY * C, end = r1 * C;
        int64_t o = (r0 + ty) * C + c0;
        for (; o + (U - 1) * st < end; o += U * st) {
            P gv[U], xv[U], yv[U];
#pragma unroll
            for (int u = 0; u < U; u++) {
                gv[u] = bn_ld<T, V, VEC>(dy + (o + u * st), nv);
                xv[u] = bn_ld<T, V, VEC>(x + (o + u * st), nv);
            }
            if (MM == BN_MASK_Y) {
#pragma unroll
                for (int u = 0; u < U; u++) yv[u] = bn_ld<T, V, VEC>(y + (o + u * st), nv);
            }
#pragma unroll
            for (int u = 0; u < U; u++) bn_bwd_sums<T, V, MM>(gv[u], xv[u], yv[u], mean, inv, sc, sh, s1, s2);
        }
        for (; o < end; o += st) {
            const P gv = bn_ld<T, V, VEC>(dy + o, nv), xv = bn_ld<T, V, VEC>(x + o, nv);
            P yv;
            if (MM == BN_MASK_Y) yv = bn_ld<T, V, VEC>(y + o, nv);
            bn_bwd_sums<T, V, MM>(gv, xv, yv, mean, inv, sc, sh, s1, s2);
        }
    }
    /* the same fixed tree as bn_stats_partial */
    for (int s = TY >> 1; s > 0; s >>= 1) {
        if (ty >= s && ty < 2 * s) {
#pragma unroll
            for (int j = 0; j < V; j++) {
                s1m[j][lin] = s1[j];
                s2m[j][lin] = s2[j];
            }
        }
        __syncthreads();
        if (ty < s) {
            const int o = lin + s * TX;
#pragma unroll
            for (int j = 0; j < V; j++) {
                s1[j] += s1m[j][o];
                s2[j] += s2m[j][o];
            }
        }
    }
    if (ty == 0 && nv > 0) {
        bn_stc<V, VEC>(part + k * 2 * C + c0, nv, s1);
        bn_stc<V, VEC>(part + k * 2 * C + C + c0, nv, s2);
    }
}

/* the layout of bn_stats_final: dbeta = sum dz, dgamma = sum dz * xhat (double over the
 * chunks), coef = (mean_R(dz), mean_R(dz * xhat)) for the training dx */
__global__ void __launch_bounds__(BN_FIN_C * BN_FIN_L)
bn_bwd_final(int64_t R, int64_t C, int64_t chunks, const float *__restrict__ part, float *dgamma, float *dbeta,
             float *coef)
{
    __shared__ double sh[BN_FIN_L][BN_FIN_C];
    const int tx = threadIdx.x % BN_FIN_C, ty = threadIdx.x / BN_FIN_C;
    const int64_t c = (int64_t)blockIdx.x * BN_FIN_C + tx;
    double s1 = 0.0, s2 = 0.0;
    if (c < C)
        for (int64_t k = ty; k < chunks; k += BN_FIN_L) {
            s1 += (double)part[k * 2 * C + c];
            s2 += (double)part[k * 2 * C + C + c];
        }
    s1 = bn_fin_sum(s1, sh, tx, ty);
    s2 = bn_fin_sum(s2, sh, tx, ty);
    if (ty == 0 && c < C) {
        if (dbeta) dbeta[c] = (float)s1;
        if (dgamma) dgamma[c] = (float)s2;
        coef[c] = (float)(s1 / (double)R);
        coef[C + c] = (float)(s2 / (double)R);
    }
}

typedef struct {
    int64_t R, C;
    const void *x, *dy, *y; /* y: the relu mask (BN_MASK_Y), else NULL */
    void *dx, *dres;
    const float *mean, *invstd, *gamma, *beta, *mdz, *mdzx; /* beta: BN_MASK_X only */
    int train;
} bn_bwd_args;

/* a thread's per-channel factors: a = gamma * invstd and, when training (or for the mask
 * from x), the mean, b = a * invstd * mean_R(dz * xhat) and d = a * mean_R(dz), so that
 * dx = a * dz - d - b * (x - mean) = gamma * invstd * (dz - mean_R(dz) - xhat * mean_R(dz * xhat));
 * sh: beta, for the mask from x (whose scale is a) */
template <int V> struct bn_bwd_coef { float a[V], b[V], d[V], mean[V], sh[V]; };

/* one row of a thread's V channels: dz = dy * relu'(y); dres = dz; dx as above when
 * training, a * dz else */
template <typename T, int V, bool VEC, int MM>
__device__ __forceinline__ void bn_bwd_row(const bn_raw &gv, const bn_raw &xv, const bn_raw &yv, int train,
                                           const bn_bwd_coef<V> &k, T *dxp, T *drp, int nv)
{
    float dz[V];
#pragma unroll
    for (int j = 0; j < V; j++) dz[j] = bn_dz<T, MM>(gv, xv, yv, j, k.mean[j], k.a[j], k.sh[j]);
    if (drp) {
        bn_st<T, V, VEC>(drp, nv, bn_pack<T, V>(dz));
    }
    if (dxp) {
        float dx[V];
#pragma unroll
        for (int j = 0; j < V; j++) {
            dx[j] = k.a[j] * dz[j];
            if (train) dx[j] = (dx[j] - k.d[j]) - k.b[j] * (bn_cvt<T>::get(xv, j) - k.mean[j]);
        }
        bn_st<T, V, VEC>(dxp, nv, bn_pack<T, V>(dx));
    }
}

/* the layout of bn_fwd_apply, one row in flight per thread (the three input streams
 * give it 48 bytes; more rows cost the registers of a fourth resident block). dx / dres
 * may alias dy: a thread loads a row's inputs before it stores that row's outputs */
template <typename T, bool VEC, int MM>
__global__ void __launch_bounds__(BN_THREADS) bn_bwd_apply(bn_bwd_args a)
{
    constexpr int V = bn_vec_width<T>::V;
    typedef bn_raw P;
    const int64_t C = a.C, R = a.R;
    const int64_t c0 = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) * V;
    const int64_t r = (int64_t)blockIdx.y * blockDim.y + threadIdx.y;
    if (c0 >= C || r >= R) return;
    const int nv = VEC ? V : (C - c0 < V ? (int)(C - c0) : V);
    const int train = a.train;
    bn_bwd_coef<V> k;
    float inv[V];
    bn_ldc<V, VEC>(a.invstd + c0, nv, inv);
    bn_scale_shift<V, VEC>(a.gamma ? a.gamma + c0 : NULL, MM == BN_MASK_X && a.beta ? a.beta + c0 : NULL, inv, nv,
                           k.a, k.sh);
    if (train || MM == BN_MASK_X) bn_ldc<V, VEC>(a.mean + c0, nv, k.mean);
    if (train) {
        bn_ldc<V, VEC>(a.mdz + c0, nv, k.d);
        bn_ldc<V, VEC>(a.mdzx + c0, nv, k.b);
#pragma unroll
        for (int j = 0; j < V; j++) {
            k.d[j] = k.a[j] * k.d[j];
            k.b[j] = k.a[j] * inv[j] * k.b[j];
        }
    } else {
#pragma unroll
        for (int j = 0; j < V; j++) {
            k.b[j] = k.d[j] = 0.0f;
            if (MM != BN_MASK_X) k.mean[j] = 0.0f;
        }
    }
    const int64_t step = (int64_t)gridDim.y * blockDim.y * C;
    /* one element offset for every operand (fewer live registers than a pointer each);
     * rows from the last one down, as bn_fwd_apply (the sums pass read the last rows
     * last; the convolutions after this read dx from row 0): row R - 1 - r >= 0 exactly
     * when its offset is >= 0 (c0 < C) */
    const T *gb = (const T *)a.dy, *xb = (const T *)a.x, *yb = (const T *)a.y;
    T *dxb = (T *)a.dx, *drb = (T *)a.dres;
    for (int64_t o = (R - 1 - r) * C + c0; o >= 0; o -= step) {
        P gv = bn_ld<T, V, VEC>(gb + o, nv), xv, yv;
        if (train || MM == BN_MASK_X) xv = bn_ld<T, V, VEC>(xb + o, nv);
        if (MM == BN_MASK_Y) yv = bn_ld<T, V, VEC>(yb + o, nv);
        bn_bwd_row<T, V, VEC, MM>(gv, xv, yv, train, k, dxb ? dxb + o : NULL, drb ? drb + o : NULL, nv);
    }
}

/* ------------------------------------------------------------------ launches */
/* 1 when C is a multiple of the vector width and every pointer given is 16-byte aligned */
static int bn_vec(int64_t C, int V, const void *const *ptrs, int n)
{
    if (C % V) return 0;
    uintptr_t bits = 0;
    for (int k = 0; k < n; k++) bits |= (uintptr_t)ptrs[k];
    return bits % 16 == 0;
}

/* Elementwise launch shape: TX threads across the C / V channel groups (all of them up to
 * 256 groups, else an even split over several column blocks), TY = 256 / TX rows;
 * blocks along the rows to fill the device once (resident blocks from the occupancy
 * calculator, cached per device in `fit`), each thread >= BN_ROWS_MIN rows where R
 * allows. The elementwise result does not depend on the grid. */
static void bn_apply_shape(const gc_backend *be, const void *kern, int *fit, int64_t R, int64_t C, int V,
                           dim3 *grid, dim3 *block)
{
    const int64_t groups = (C + V - 1) / V, ncb = (groups + BN_THREADS - 1) / BN_THREADS;
    const int tx = (int)((groups + ncb - 1) / ncb), ty = BN_THREADS / tx;
    const int dev = be->device_index;
    int per_sm = dev >= 0 && dev < 64 ? fit[dev] : 0;
    if (per_sm < 1) {
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, BN_THREADS, 0) != cudaSuccess || per_sm < 1) {
            (void)cudaGetLastError();
            per_sm = 2;
        }
        if (dev >= 0 && dev < 64) fit[dev] = per_sm;
    }
    const int64_t sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    const int64_t resident = sms * per_sm * BN_THREADS / ((int64_t)tx * ty);
    int64_t gy = resident / ncb;
    const int64_t by_rows = (R + (int64_t)ty * BN_ROWS_MIN - 1) / ((int64_t)ty * BN_ROWS_MIN);
    if (gy > by_rows) gy = by_rows;
    if (gy > 65535) gy = 65535;
    if (gy < 1) gy = 1;
    *grid = dim3((unsigned)ncb, (unsigned)gy);
    *block = dim3((unsigned)tx, (unsigned)ty);
}

static const float *f32_or_null(const gc_tensor *t) { return t && t->data ? (const float *)t->data : NULL; }
static void *data_or_null(const gc_tensor *t) { return t && t->data ? t->data : NULL; }

template <typename T, bool VEC> static void bn_fwd_launch(const gc_backend *be, const bn_fwd_args &a)
{
    static int fit[64];
    dim3 grid, block;
    bn_apply_shape(be, (const void *)bn_fwd_apply<T, VEC>, fit, a.R, a.C, bn_vec_width<T>::V, &grid, &block);
    bn_fwd_apply<T, VEC><<<grid, block, 0, gc_cuda_stream(be)>>>(a);
}

template <typename T, bool VEC, int MM> static void bn_bwd_launch(const gc_backend *be, const bn_bwd_args &a)
{
    static int fit[64];
    dim3 grid, block;
    bn_apply_shape(be, (const void *)bn_bwd_apply<T, VEC, MM>, fit, a.R, a.C, bn_vec_width<T>::V, &grid, &block);
    bn_bwd_apply<T, VEC, MM><<<grid, block, 0, gc_cuda_stream(be)>>>(a);
}

/* the partial sums' launch for one mask source */
template <typename T, bool VEC, int MM>
static void bn_bwd_partial_launch(dim3 grid, dim3 block, cudaStream_t s, int64_t R, int64_t C, int64_t rpc,
                                  const T *x, const T *dy, const T *y, const float *save, const float *gamma,
                                  const float *beta, float *part)
{
    bn_bwd_partial<T, VEC, MM><<<grid, block, 0, s>>>(R, C, rpc, x, dy, y, save, gamma, beta, part);
}

/* one of the (VEC, mask source) instantiations */
#define BN_BWD_PICK(VEC, MM, CALL)                                                              \
    do {                                                                                        \
        if (VEC) {                                                                              \
            if ((MM) == BN_MASK_Y) CALL(true, BN_MASK_Y);                                       \
            else if ((MM) == BN_MASK_X) CALL(true, BN_MASK_X);                                  \
            else CALL(true, BN_MASK_NONE);                                                      \
        } else {                                                                                \
            if ((MM) == BN_MASK_Y) CALL(false, BN_MASK_Y);                                      \
            else if ((MM) == BN_MASK_X) CALL(false, BN_MASK_X);                                 \
            else CALL(false, BN_MASK_NONE);                                                     \
        }                                                                                       \
    } while (0)

template <typename T>
static gc_status bn_fwd(const gc_backend *be, const gc_op_call *call)
{
    constexpr int V = bn_vec_width<T>::V;
    const gc_batchnorm_params *p = (const gc_batchnorm_params *)call->params;
    const gc_tensor *x = call->in[0];
    const int64_t C = x->shape[x->ndim - 1], n = gc_tensor_numel(x), R = n / C;
    float *save = (float *)call->out[3]->data, *mm = (float *)call->out[1]->data, *mv = (float *)call->out[2]->data;
    cudaStream_t s = gc_cuda_stream(be);
    gc_status st;
    if (p->training == GC_BN_REFILL) {
        /* the statistics of the training pass are in save: only y again */
    } else if (p->training) {
        bn_plan pl;
        if ((st = bn_chunking(be, "batchnorm_fwd", R, C, V, &pl))) return st;
        const dim3 grid((unsigned)pl.col_blocks, (unsigned)pl.chunks), block((unsigned)pl.tx, (unsigned)pl.ty);
        const void *ptrs[1] = {x->data};
        if (bn_vec(C, V, ptrs, 1))
            bn_stats_partial<T, true><<<grid, block, 0, s>>>(R, C, pl.rpc, (const T *)x->data, pl.part);
        else
            bn_stats_partial<T, false><<<grid, block, 0, s>>>(R, C, pl.rpc, (const T *)x->data, pl.part);
        if ((st = gc_cuda_launch_check("batchnorm_fwd (partial statistics)"))) return st;
        bn_stats_final<<<(unsigned)((C + BN_FIN_C - 1) / BN_FIN_C), BN_FIN_C * BN_FIN_L, 0, s>>>(
            R, C, pl.chunks, pl.rpc, pl.part, save, mm, mv, p->epsilon, p->momentum);
        if ((st = gc_cuda_launch_check("batchnorm_fwd (statistics)"))) return st;
    } else {
        bn_stats_moving<<<gc_cuda_grid(C, 256), 256, 0, s>>>(C, mm, mv, save, p->epsilon);
        if ((st = gc_cuda_launch_check("batchnorm_fwd (moving statistics)"))) return st;
    }
    bn_fwd_args a;
    a.R = R;
    a.C = C;
    a.x = x->data;
    a.res = data_or_null(call->in[3]);
    a.y = call->out[0]->data;
    a.mean = save;
    a.invstd = save + C;
    a.gamma = f32_or_null(call->in[1]);
    a.beta = f32_or_null(call->in[2]);
    a.relu = p->act == GC_ACT_RELU;
    const void *ptrs[6] = {a.x, a.y, a.res, save, a.gamma, a.beta};
    if (bn_vec(C, V, ptrs, 6))
        bn_fwd_launch<T, true>(be, a);
    else
        bn_fwd_launch<T, false>(be, a);
    return gc_cuda_launch_check("batchnorm_fwd");
}

template <typename T>
static gc_status bn_bwd(const gc_backend *be, const gc_op_call *call)
{
    constexpr int V = bn_vec_width<T>::V;
    const gc_batchnorm_params *p = (const gc_batchnorm_params *)call->params;
    const gc_tensor *x = call->in[0];
    const int64_t C = x->shape[x->ndim - 1], n = gc_tensor_numel(x), R = n / C;
    const float *save = (const float *)call->in[3]->data;
    const int mm = p->act != GC_ACT_RELU ? BN_MASK_NONE : p->mask_from_x ? BN_MASK_X : BN_MASK_Y;
    const void *mask = mm == BN_MASK_Y ? call->in[4]->data : NULL;
    const float *gamma = f32_or_null(call->in[2]), *beta = mm == BN_MASK_X ? f32_or_null(call->in[5]) : NULL;
    float *dgamma = (float *)data_or_null(call->out[1]), *dbeta = (float *)data_or_null(call->out[2]);
    void *dx = data_or_null(call->out[0]), *dres = data_or_null(call->out[3]);
    cudaStream_t s = gc_cuda_stream(be);
    gc_status st;
    bn_plan pl;
    pl.coef = NULL;
    if (p->training || dgamma || dbeta) {
        if ((st = bn_chunking(be, "batchnorm_bwd", R, C, V, &pl))) return st;
        const dim3 grid((unsigned)pl.col_blocks, (unsigned)pl.chunks), block((unsigned)pl.tx, (unsigned)pl.ty);
        const T *xd = (const T *)x->data, *dyd = (const T *)call->in[1]->data, *md = (const T *)mask;
        const void *ptrs[6] = {xd, dyd, md, save, gamma, beta};
        const bool vec = bn_vec(C, V, ptrs, 6);
#define BN_PARTIAL(VEC, MM) \
    bn_bwd_partial_launch<T, VEC, MM>(grid, block, s, R, C, pl.rpc, xd, dyd, md, save, gamma, beta, pl.part)
        BN_BWD_PICK(vec, mm, BN_PARTIAL);
#undef BN_PARTIAL
        if ((st = gc_cuda_launch_check("batchnorm_bwd (partial sums)"))) return st;
        bn_bwd_final<<<(unsigned)((C + BN_FIN_C - 1) / BN_FIN_C), BN_FIN_C * BN_FIN_L, 0, s>>>(
            R, C, pl.chunks, pl.part, dgamma, dbeta, pl.coef);
        if ((st = gc_cuda_launch_check("batchnorm_bwd (sums)"))) return st;
    }
    if (!dx && !dres) return GC_OK;
    bn_bwd_args a;
    a.R = R;
    a.C = C;
    a.x = x->data;
    a.dy = call->in[1]->data;
    a.y = mask;
    a.dx = dx;
    a.dres = dres;
    a.mean = save;
    a.invstd = save + C;
    a.gamma = gamma;
    a.beta = beta;
    a.mdz = pl.coef;
    a.mdzx = pl.coef ? pl.coef + C : NULL;
    a.train = p->training;
    const void *ptrs[9] = {a.x, a.dy, a.y, a.dx, a.dres, save, a.gamma, a.beta, pl.coef};
    const bool vec = bn_vec(C, V, ptrs, 9);
#define BN_APPLY(VEC, MM) bn_bwd_launch<T, VEC, MM>(be, a)
    BN_BWD_PICK(vec, mm, BN_APPLY);
#undef BN_APPLY
    return gc_cuda_launch_check("batchnorm_bwd");
}

extern "C" gc_status gc_cuda_op_batchnorm_fwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = bn_fwd<T>(be, call));
    return st;
}

extern "C" gc_status gc_cuda_op_batchnorm_bwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = bn_bwd<T>(be, call));
    return st;
}
