/* norm.cu -- batch normalization on CUDA: batchnorm_fwd (batch statistics, moving
 * averages, y = act(gamma * xhat + beta + residual)) and batchnorm_bwd (dx, dgamma,
 * dbeta, dresidual), f32/f16/bf16 activations, float32 per-channel tensors.
 *
 * x is viewed as (R, C), channels contiguous (NHWC). Per-channel reductions are two
 * deterministic stages (no atomics, fixed order, so a step replays bit for bit):
 *   1. partial: blocks of 32 channels x 8 row lanes (each warp reads 32 consecutive
 *      channels of a row: coalesced) reduce one chunk of rows each into the backend's
 *      fixed scratch buffer (capture-safe). The forward keeps (mean, M2) per thread
 *      (Welford, merged 4 rows at a time: accurate whatever the mean's size), merged
 *      across the 8 lanes with Chan's formula; the backward sums dz and dz * xhat.
 *   2. final: one block per channel merges the chunks in double (thread-strided, then
 *      a fixed tree) and writes the statistics (save, moving averages) or dgamma, dbeta
 *      and the two means the training dx needs.
 * The chunking depends only on (R, C), never on the device, so every GPU reduces in the
 * same order; 100 KB of shared memory or less is used anywhere (3 KB). The elementwise
 * pass reads 8 channels per thread with vector accesses when C % 8 == 0 (every ResNet
 * layer) and computes exactly csrc/cpu/norm.c's float32 formulas. dx may alias dy:
 * each element is read and then written by one thread. All launches go to the
 * backend's stream; no host syncs (graph-capturable). */
#include "common.cuh"

#define BN_COLS 32
#define BN_LANES 8
#define BN_FIN 128        /* threads of a final-stage block (one channel) */
#define BN_TARGET 1024    /* partial-stage blocks aimed at (device independent) */
#define BN_MAX_ROWS 8192  /* rows per chunk at most (1024 per thread: float sums stay accurate) */

/* ------------------------------------------------------------------ chunking */
typedef struct {
    int64_t chunks, rpc; /* rows per chunk; the last chunk may be shorter */
    float *part;         /* chunks x 2 x C floats */
    float *coef;         /* 2 x C floats after the partials */
} bn_plan;

static gc_status bn_chunking(const gc_backend *be, const char *what, int64_t R, int64_t C, bn_plan *pl)
{
    const int64_t col_blocks = (C + BN_COLS - 1) / BN_COLS;
    const int64_t by_mem = (int64_t)(GC_CUDA_SCRATCH_BYTES / (2 * sizeof(float))) / C - 1;
    if (by_mem < 1)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: %lld channels are more than the CUDA backend's batch norm handles (%lld)",
                       what, (long long)C, (long long)(GC_CUDA_SCRATCH_BYTES / (4 * sizeof(float))));
    int64_t chunks = (BN_TARGET + col_blocks - 1) / col_blocks;
    if (chunks < (R + BN_MAX_ROWS - 1) / BN_MAX_ROWS) chunks = (R + BN_MAX_ROWS - 1) / BN_MAX_ROWS;
    if (chunks > (R + 63) / 64) chunks = (R + 63) / 64; /* >= 8 rows per lane */
    if (chunks > by_mem) chunks = by_mem;
    if (chunks > 65535) chunks = 65535;
    if (chunks < 1) chunks = 1;
    pl->rpc = (R + chunks - 1) / chunks;
    pl->chunks = (R + pl->rpc - 1) / pl->rpc;
    if (col_blocks > 0x7fffffffLL)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: %lld channels is too many", what, (long long)C);
    pl->part = (float *)gc_cuda_scratch(be);
    pl->coef = pl->part + pl->chunks * 2 * C;
    return GC_OK;
}

/* (n, mean, M2) += (nb, mb, qb): Chan et al.'s pairwise update */
template <typename F> __device__ __forceinline__ void chan_merge(F &n, F &m, F &q, F nb, F mb, F qb)
{
    if (nb == (F)0) return;
    F t = n + nb, d = mb - m, w = nb / t;
    m += d * w;
    q += qb + d * d * n * w;
    n = t;
}

/* ------------------------------------------------------------------ forward statistics */
template <typename T>
__global__ void __launch_bounds__(BN_COLS * BN_LANES)
bn_stats_partial(int64_t R, int64_t C, int64_t rpc, const T *__restrict__ x, float *__restrict__ part)
{
    __shared__ float sn[BN_LANES][BN_COLS], sm[BN_LANES][BN_COLS], sq[BN_LANES][BN_COLS];
    const int tx = threadIdx.x % BN_COLS, ty = threadIdx.x / BN_COLS;
    const int64_t c = (int64_t)blockIdx.x * BN_COLS + tx, k = blockIdx.y;
    const int64_t r0 = k * rpc, r1 = r0 + rpc < R ? r0 + rpc : R;
    float n = 0.0f, m = 0.0f, q = 0.0f;
    if (c < C) {
        int64_t r = r0 + ty;
        /* four rows at a time: their own mean and M2, then one merge (one division) */
        for (; r + 3 * BN_LANES < r1; r += 4 * BN_LANES) {
            float a0 = gc_to_f(x[r * C + c]), a1 = gc_to_f(x[(r + BN_LANES) * C + c]);
            float a2 = gc_to_f(x[(r + 2 * BN_LANES) * C + c]), a3 = gc_to_f(x[(r + 3 * BN_LANES) * C + c]);
            float m4 = ((a0 + a1) + (a2 + a3)) * 0.25f;
            float d0 = a0 - m4, d1 = a1 - m4, d2 = a2 - m4, d3 = a3 - m4;
            chan_merge(n, m, q, 4.0f, m4, (d0 * d0 + d1 * d1) + (d2 * d2 + d3 * d3));
        }
        for (; r < r1; r += BN_LANES) chan_merge(n, m, q, 1.0f, gc_to_f(x[r * C + c]), 0.0f);
    }
    sn[ty][tx] = n;
    sm[ty][tx] = m;
    sq[ty][tx] = q;
    __syncthreads();
    if (ty == 0 && c < C) {
#pragma unroll
        for (int l = 1; l < BN_LANES; l++) chan_merge(n, m, q, sn[l][tx], sm[l][tx], sq[l][tx]);
        part[k * 2 * C + c] = m;
        part[k * 2 * C + C + c] = q;
    }
}

/* one block per channel: merge the chunks (double), write save and the moving averages */
__global__ void __launch_bounds__(BN_FIN)
bn_stats_final(int64_t R, int64_t C, int64_t chunks, int64_t rpc, const float *__restrict__ part, float *save,
               float *mmean, float *mvar, float eps, float momentum)
{
    __shared__ double sn[BN_FIN], sm[BN_FIN], sq[BN_FIN];
    const int64_t c = blockIdx.x;
    const int t = threadIdx.x;
    double n = 0.0, m = 0.0, q = 0.0;
    for (int64_t k = t; k < chunks; k += BN_FIN) {
        int64_t rows = R - k * rpc < rpc ? R - k * rpc : rpc;
        chan_merge(n, m, q, (double)rows, (double)part[k * 2 * C + c], (double)part[k * 2 * C + C + c]);
    }
    sn[t] = n;
    sm[t] = m;
    sq[t] = q;
    __syncthreads();
    for (int s = BN_FIN / 2; s > 0; s >>= 1) {
        if (t < s) {
            double a = sn[t], b = sm[t], d = sq[t];
            chan_merge(a, b, d, sn[t + s], sm[t + s], sq[t + s]);
            sn[t] = a;
            sm[t] = b;
            sq[t] = d;
        }
        __syncthreads();
    }
    if (t == 0) {
        double mean = sm[0], var = sq[0] / (double)R;
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
    int64_t n, C;
    const void *x, *res;
    void *y;
    const float *mean, *invstd, *gamma, *beta;
    int relu;
} bn_fwd_args;

template <typename T, int V>
__global__ void __launch_bounds__(256) bn_fwd_apply(bn_fwd_args a)
{
    typedef gc_pack<T, V> P;
    const int64_t np = a.n / V;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < np; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c0 = (i * V) % a.C;
        P xv = ((const P *)a.x)[i], rv, yv;
        if (a.res) rv = ((const P *)a.res)[i];
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int64_t c = c0 + j;
            float sc = a.gamma ? a.gamma[c] * a.invstd[c] : a.invstd[c];
            float v = (gc_to_f(xv.v[j]) - a.mean[c]) * sc + (a.beta ? a.beta[c] : 0.0f);
            if (a.res) v += gc_to_f(rv.v[j]);
            yv.v[j] = gc_from_f<T>((a.relu && v < 0.0f) ? 0.0f : v);
        }
        ((P *)a.y)[i] = yv;
    }
}

/* ------------------------------------------------------------------ backward */
template <typename T>
__global__ void __launch_bounds__(BN_COLS * BN_LANES)
bn_bwd_partial(int64_t R, int64_t C, int64_t rpc, const T *__restrict__ x, const T *__restrict__ dy,
               const T *__restrict__ y, const float *__restrict__ save, float *__restrict__ part)
{
    __shared__ float s1m[BN_LANES][BN_COLS], s2m[BN_LANES][BN_COLS];
    const int tx = threadIdx.x % BN_COLS, ty = threadIdx.x / BN_COLS;
    const int64_t c = (int64_t)blockIdx.x * BN_COLS + tx, k = blockIdx.y;
    const int64_t r0 = k * rpc, r1 = r0 + rpc < R ? r0 + rpc : R;
    float s1 = 0.0f, s2 = 0.0f;
    if (c < C) {
        const float mean = save[c], inv = save[C + c];
#pragma unroll 4
        for (int64_t r = r0 + ty; r < r1; r += BN_LANES) {
            const int64_t i = r * C + c;
            float dz = gc_to_f(dy[i]);
            if (y && !(gc_to_f(y[i]) > 0.0f)) dz = 0.0f;
            float xh = (gc_to_f(x[i]) - mean) * inv;
            s1 += dz;
            s2 += dz * xh;
        }
    }
    s1m[ty][tx] = s1;
    s2m[ty][tx] = s2;
    __syncthreads();
    if (ty == 0 && c < C) {
#pragma unroll
        for (int l = 1; l < BN_LANES; l++) {
            s1 += s1m[l][tx];
            s2 += s2m[l][tx];
        }
        part[k * 2 * C + c] = s1;
        part[k * 2 * C + C + c] = s2;
    }
}

/* one block per channel: dbeta = sum dz, dgamma = sum dz * xhat (double over the chunks),
 * coef = (mean_R(dz), mean_R(dz * xhat)) for the training dx */
__global__ void __launch_bounds__(BN_FIN)
bn_bwd_final(int64_t R, int64_t C, int64_t chunks, const float *__restrict__ part, float *dgamma, float *dbeta,
             float *coef)
{
    __shared__ double a1[BN_FIN], a2[BN_FIN];
    const int64_t c = blockIdx.x;
    const int t = threadIdx.x;
    double s1 = 0.0, s2 = 0.0;
    for (int64_t k = t; k < chunks; k += BN_FIN) {
        s1 += (double)part[k * 2 * C + c];
        s2 += (double)part[k * 2 * C + C + c];
    }
    a1[t] = s1;
    a2[t] = s2;
    __syncthreads();
    for (int s = BN_FIN / 2; s > 0; s >>= 1) {
        if (t < s) {
            a1[t] += a1[t + s];
            a2[t] += a2[t + s];
        }
        __syncthreads();
    }
    if (t == 0) {
        if (dbeta) dbeta[c] = (float)a1[0];
        if (dgamma) dgamma[c] = (float)a2[0];
        coef[c] = (float)(a1[0] / (double)R);
        coef[C + c] = (float)(a2[0] / (double)R);
    }
}

typedef struct {
    int64_t n, C;
    const void *x, *dy, *y; /* y: the relu mask, NULL for linear */
    void *dx, *dres;
    const float *mean, *invstd, *gamma, *mdz, *mdzx;
    int train;
} bn_bwd_args;

template <typename T, int V>
__global__ void __launch_bounds__(256) bn_bwd_apply(bn_bwd_args a)
{
    typedef gc_pack<T, V> P;
    const int64_t np = a.n / V;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < np; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t c0 = (i * V) % a.C;
        P gv = ((const P *)a.dy)[i], xv, yv, dzv, dxv;
        if (a.y) yv = ((const P *)a.y)[i];
        if (a.train) xv = ((const P *)a.x)[i];
#pragma unroll
        for (int j = 0; j < V; j++) {
            const int64_t c = c0 + j;
            float dz = gc_to_f(gv.v[j]);
            if (a.y && !(gc_to_f(yv.v[j]) > 0.0f)) dz = 0.0f;
            float kf = a.gamma ? a.gamma[c] * a.invstd[c] : a.invstd[c];
            float v = dz;
            if (a.train) {
                float xh = (gc_to_f(xv.v[j]) - a.mean[c]) * a.invstd[c];
                v = dz - a.mdz[c] - xh * a.mdzx[c];
            }
            dzv.v[j] = gc_from_f<T>(dz);
            dxv.v[j] = gc_from_f<T>(kf * v);
        }
        if (a.dres) ((P *)a.dres)[i] = dzv;
        if (a.dx) ((P *)a.dx)[i] = dxv;
    }
}

/* ------------------------------------------------------------------ launches */
static unsigned apply_grid(const gc_backend *be, int64_t items)
{
    int64_t b = (items + 255) / 256;
    int64_t cap = (int64_t)(gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80) * 32;
    if (b > cap) b = cap;
    return (unsigned)(b < 1 ? 1 : b);
}

/* 8 channels per thread when C % 8 == 0 and every activation pointer is aligned to it */
static int bn_vec(int64_t C, size_t esize, const void *const *ptrs, int n)
{
    if (C % 8) return 0;
    uintptr_t bits = 0;
    for (int k = 0; k < n; k++) bits |= (uintptr_t)ptrs[k];
    return bits % (8 * esize) == 0;
}

static const float *f32_or_null(const gc_tensor *t) { return t && t->data ? (const float *)t->data : NULL; }
static void *data_or_null(const gc_tensor *t) { return t && t->data ? t->data : NULL; }

template <typename T>
static gc_status bn_fwd(const gc_backend *be, const gc_op_call *call)
{
    const gc_batchnorm_params *p = (const gc_batchnorm_params *)call->params;
    const gc_tensor *x = call->in[0];
    const int64_t C = x->shape[x->ndim - 1], n = gc_tensor_numel(x), R = n / C;
    float *save = (float *)call->out[3]->data, *mm = (float *)call->out[1]->data, *mv = (float *)call->out[2]->data;
    cudaStream_t s = gc_cuda_stream(be);
    gc_status st;
    if (p->training) {
        bn_plan pl;
        if ((st = bn_chunking(be, "batchnorm_fwd", R, C, &pl))) return st;
        dim3 grid((unsigned)((C + BN_COLS - 1) / BN_COLS), (unsigned)pl.chunks);
        bn_stats_partial<T><<<grid, BN_COLS * BN_LANES, 0, s>>>(R, C, pl.rpc, (const T *)x->data, pl.part);
        if ((st = gc_cuda_launch_check("batchnorm_fwd (partial statistics)"))) return st;
        bn_stats_final<<<(unsigned)C, BN_FIN, 0, s>>>(R, C, pl.chunks, pl.rpc, pl.part, save, mm, mv, p->epsilon,
                                                     p->momentum);
        if ((st = gc_cuda_launch_check("batchnorm_fwd (statistics)"))) return st;
    } else {
        bn_stats_moving<<<gc_cuda_grid(C, 256), 256, 0, s>>>(C, mm, mv, save, p->epsilon);
        if ((st = gc_cuda_launch_check("batchnorm_fwd (moving statistics)"))) return st;
    }
    bn_fwd_args a;
    a.n = n;
    a.C = C;
    a.x = x->data;
    a.res = data_or_null(call->in[3]);
    a.y = call->out[0]->data;
    a.mean = save;
    a.invstd = save + C;
    a.gamma = f32_or_null(call->in[1]);
    a.beta = f32_or_null(call->in[2]);
    a.relu = p->act == GC_ACT_RELU;
    const void *ptrs[3] = {a.x, a.y, a.res};
    if (bn_vec(C, sizeof(T), ptrs, 3))
        bn_fwd_apply<T, 8><<<apply_grid(be, n / 8), 256, 0, s>>>(a);
    else
        bn_fwd_apply<T, 1><<<apply_grid(be, n), 256, 0, s>>>(a);
    return gc_cuda_launch_check("batchnorm_fwd");
}

template <typename T>
static gc_status bn_bwd(const gc_backend *be, const gc_op_call *call)
{
    const gc_batchnorm_params *p = (const gc_batchnorm_params *)call->params;
    const gc_tensor *x = call->in[0];
    const int64_t C = x->shape[x->ndim - 1], n = gc_tensor_numel(x), R = n / C;
    const float *save = (const float *)call->in[3]->data;
    const void *mask = p->act == GC_ACT_RELU ? call->in[4]->data : NULL;
    float *dgamma = (float *)data_or_null(call->out[1]), *dbeta = (float *)data_or_null(call->out[2]);
    void *dx = data_or_null(call->out[0]), *dres = data_or_null(call->out[3]);
    cudaStream_t s = gc_cuda_stream(be);
    gc_status st;
    bn_plan pl;
    pl.coef = NULL;
    if (p->training || dgamma || dbeta) {
        if ((st = bn_chunking(be, "batchnorm_bwd", R, C, &pl))) return st;
        dim3 grid((unsigned)((C + BN_COLS - 1) / BN_COLS), (unsigned)pl.chunks);
        bn_bwd_partial<T><<<grid, BN_COLS * BN_LANES, 0, s>>>(R, C, pl.rpc, (const T *)x->data,
                                                             (const T *)call->in[1]->data, (const T *)mask, save,
                                                             pl.part);
        if ((st = gc_cuda_launch_check("batchnorm_bwd (partial sums)"))) return st;
        bn_bwd_final<<<(unsigned)C, BN_FIN, 0, s>>>(R, C, pl.chunks, pl.part, dgamma, dbeta, pl.coef);
        if ((st = gc_cuda_launch_check("batchnorm_bwd (sums)"))) return st;
    }
    if (!dx && !dres) return GC_OK;
    bn_bwd_args a;
    a.n = n;
    a.C = C;
    a.x = x->data;
    a.dy = call->in[1]->data;
    a.y = mask;
    a.dx = dx;
    a.dres = dres;
    a.mean = save;
    a.invstd = save + C;
    a.gamma = f32_or_null(call->in[2]);
    a.mdz = pl.coef;
    a.mdzx = pl.coef ? pl.coef + C : NULL;
    a.train = p->training;
    const void *ptrs[5] = {a.x, a.dy, a.y, a.dx, a.dres};
    if (bn_vec(C, sizeof(T), ptrs, 5))
        bn_bwd_apply<T, 8><<<apply_grid(be, n / 8), 256, 0, s>>>(a);
    else
        bn_bwd_apply<T, 1><<<apply_grid(be, n), 256, 0, s>>>(a);
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
