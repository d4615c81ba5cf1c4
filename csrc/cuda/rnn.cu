/* rnn.cu -- the recurrence of SimpleRNN / LSTM / GRU on CUDA: rnn_fwd and rnn_bwd
 * (gpucmp.h has the interface, the save layout and the masking rules; csrc/cpu/rnn.c is
 * the same algorithm on the host).
 *
 * Correct first: per time step one launch of a small tiled SIMT matmul of the float32
 * states with the recurrent kernel (h.U forward, dz.U^T backward; GRU reset_before has a
 * second one for its h block, (r*h).U_h / da.U_h^T) and one fused gate kernel over the B*u
 * (row, unit) pairs -- 2 launches per step (4 for reset_before), all on the backend's one
 * stream, no host sync and no allocation once the workspace is sized, so a plan step that
 * contains them can be captured into a CUDA graph.
 * Why not the backend's GEMM: the states are carried in float32 across steps (U and the
 * storage may be f16/bf16), a mixed-dtype product the GEMM does not take, and the GEMM
 * may itself use the workspace, which would invalidate the states kept there.
 * Scratch: the float32 states (h, c, the carried emitted output e, r*h; backward dh, dc,
 * de, the direct part dd, d(r*h)) and one step's B x G*u matmul operand live in the
 * backend's growable workspace (gc_cuda_workspace): the first eager call sizes it, later
 * captured calls of the same shape find it big enough (growing during capture is refused
 * with a clear error, as for every other op that uses it). Accumulation is float32, in a
 * fixed order (deterministic). Gate math uses expf / tanhf (no fast-math).
 * Recurrent dropout (rmask, one (B, u) block per gate): forward hm = h * rmask (B, G*u)
 * and one matmul per gate block, m_g = hm_g . U_g; backward one matmul per gate into dr
 * (B, G*u), dr_g = dz_g . U_g^T, summed with the mask into dh = dd + sum_g dr_g * rmask_g
 * (both in the workspace).
 * gc_cuda_op_rnn_fwd / _bwd first offer the call to the one-launch kernels (variant
 * point cuda.rnn: rnn_resident.cu for a small U, then rnn_persistent.cu) and run this
 * stepwise path where they decline. */
#include "common.cuh"
#include "gpucmp_rnn_act.h"
#include "gpucmp_variants.h"
#include "rnn_persistent.cuh"

#define RNN_TILE 16

namespace {

__device__ __forceinline__ int used(const float *mask, int64_t T, int64_t b, int64_t t)
{
    return !mask || mask[b * T + t] != 0.0f;
}

/* out[b, n] (row stride ldo) = (add ? add[b, n] (stride ldo) : 0) + sum_k A[b, k] * W(k, n),
 * b < M, n < N, k < K; A float32 with row stride lda; W from U (u, Gu) of storage type T:
 * !trans: W(k, n) = U[k, off + n] (forward: h . U); trans: W(k, n) = U[n, off + k]
 * (backward: dz . U^T). 16 x 16 output tiles, K in steps of 16 through shared memory;
 * the loads of both tiles are coalesced. */
template <typename T, bool TRANS>
__global__ void __launch_bounds__(RNN_TILE * RNN_TILE)
rec_mm(int64_t M, int64_t N, int64_t K, const float *__restrict__ A, int64_t lda, const T *__restrict__ U,
       int64_t Gu, int64_t off, const float *add, float *out, int64_t ldo)
{
    __shared__ float As[RNN_TILE][RNN_TILE + 1];
    __shared__ float Ws[RNN_TILE][RNN_TILE + 1]; /* Ws[k][n] */
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int64_t row = (int64_t)blockIdx.y * RNN_TILE + ty, col = (int64_t)blockIdx.x * RNN_TILE + tx;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < K; k0 += RNN_TILE) {
        As[ty][tx] = (row < M && k0 + tx < K) ? A[row * lda + k0 + tx] : 0.0f;
        if (!TRANS) {
            const int64_t k = k0 + ty;
            Ws[ty][tx] = (k < K && col < N) ? gc_to_f(U[k * Gu + off + col]) : 0.0f;
        } else {
            /* thread (ty, tx) loads U[n = colbase + ty, off + k0 + tx] into Ws[tx][ty] */
            const int64_t n = (int64_t)blockIdx.x * RNN_TILE + ty, k = k0 + tx;
            Ws[tx][ty] = (k < K && n < N) ? gc_to_f(U[n * Gu + off + k]) : 0.0f;
        }
        __syncthreads();
#pragma unroll
        for (int q = 0; q < RNN_TILE; q++) acc = fmaf(As[ty][q], Ws[q][tx], acc);
        __syncthreads();
    }
    if (row < M && col < N) out[row * ldo + col] = (add ? add[row * ldo + col] : 0.0f) + acc;
}

template <typename T>
static gc_status launch_mm(const gc_backend *be, bool trans, int64_t M, int64_t N, int64_t K, const float *A,
                           int64_t lda, const T *U, int64_t Gu, int64_t off, const float *add, float *out,
                           int64_t ldo)
{
    dim3 block(RNN_TILE, RNN_TILE), grid((unsigned)((N + RNN_TILE - 1) / RNN_TILE), (unsigned)((M + RNN_TILE - 1) / RNN_TILE));
    if (trans)
        rec_mm<T, true><<<grid, block, 0, gc_cuda_stream(be)>>>(M, N, K, A, lda, U, Gu, off, add, out, ldo);
    else
        rec_mm<T, false><<<grid, block, 0, gc_cuda_stream(be)>>>(M, N, K, A, lda, U, Gu, off, add, out, ldo);
    return gc_cuda_launch_check("rnn: recurrent matmul");
}

struct rnn_dims {
    int64_t B, T, u, Gu, blk; /* blk = B*T*u, one save block */
    int cell, act, ract, seq, zo, gb;
};

/* ------------------------------------------------------------------ forward */

template <typename T>
__global__ void fwd_init(int64_t n, const T *h0, const T *c0, float *h, float *c, float *e)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        h[i] = h0 ? gc_to_f(h0[i]) : 0.0f;
        c[i] = c0 ? gc_to_f(c0[i]) : 0.0f;
        e[i] = 0.0f;
    }
}

/* recurrent dropout: hm (B, Gu) = h (repeated per gate block) * rmask */
__global__ void fwd_rmask(int64_t n, int64_t u, int64_t Gu, const float *h, const float *rm, float *hm)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / Gu, q = i - b * Gu;
        hm[i] = h[b * u + q % u] * rm[i];
    }
}

/* reset_before, before the second matmul: rh = r * h (hs: h, row stride ldh; with rmask
 * the masked copy's h block) */
template <typename T>
__global__ void fwd_reset(rnn_dims d, int64_t t, const T *xw, const float *m, const float *hs, int64_t ldh, float *rh)
{
    const int64_t n = d.B * d.u, u = d.u;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / u, j = i - b * u;
        const T *x = xw + (b * d.T + t) * d.Gu;
        rh[i] = gc_rnn_act_apply(d.ract, gc_to_f(x[u + j]) + m[b * d.Gu + u + j]) * hs[b * ldh + j];
    }
}

template <typename T>
__global__ void fwd_gate(rnn_dims d, int64_t k, int64_t t, const T *xw, const float *m, const T *bh,
                         const float *mask, const float *rh, float *h, float *c, float *e, T *y, T *save)
{
    const int64_t n = d.B * d.u, u = d.u;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / u, j = i - b * u;
        const T *x = xw + (b * d.T + t) * d.Gu;
        const float *mb = m + b * d.Gu;
        const float hp = h[i];
        float hn, cn = 0.0f, s[7];
        s[0] = hp;
        int S = 2;
        switch (d.cell) {
        case GC_RNN_SIMPLE:
            hn = gc_rnn_act_apply(d.act, gc_to_f(x[j]) + mb[j]);
            s[1] = hn;
            break;
        case GC_RNN_LSTM: {
            const float cp = c[i];
            const float ig = gc_rnn_act_apply(d.ract, gc_to_f(x[j]) + mb[j]);
            const float fg = gc_rnn_act_apply(d.ract, gc_to_f(x[u + j]) + mb[u + j]);
            const float gg = gc_rnn_act_apply(d.act, gc_to_f(x[2 * u + j]) + mb[2 * u + j]);
            const float og = gc_rnn_act_apply(d.ract, gc_to_f(x[3 * u + j]) + mb[3 * u + j]);
            cn = fg * cp + ig * gg;
            hn = og * gc_rnn_act_apply(d.act, cn);
            s[1] = cp, s[2] = ig, s[3] = fg, s[4] = gg, s[5] = og, s[6] = cn;
            S = 7;
            break;
        }
        case GC_RNN_GRU: {
            const float mz = mb[j] + (bh ? gc_to_f(bh[j]) : 0.0f);
            const float mr = mb[u + j] + (bh ? gc_to_f(bh[u + j]) : 0.0f);
            const float mh = mb[2 * u + j] + (bh ? gc_to_f(bh[2 * u + j]) : 0.0f);
            const float z = gc_rnn_act_apply(d.ract, gc_to_f(x[j]) + mz), r = gc_rnn_act_apply(d.ract, gc_to_f(x[u + j]) + mr);
            const float hh = gc_rnn_act_apply(d.act, gc_to_f(x[2 * u + j]) + r * mh);
            hn = z * hp + (1.0f - z) * hh;
            s[1] = z, s[2] = r, s[3] = hh, s[4] = mh;
            S = 5;
            break;
        }
        default: { /* GC_RNN_GRU_RESET_BEFORE: m's h block is (r*h).U_h */
            const float z = gc_rnn_act_apply(d.ract, gc_to_f(x[j]) + mb[j]), r = gc_rnn_act_apply(d.ract, gc_to_f(x[u + j]) + mb[u + j]);
            const float hh = gc_rnn_act_apply(d.act, gc_to_f(x[2 * u + j]) + mb[2 * u + j]);
            hn = z * hp + (1.0f - z) * hh;
            s[1] = z, s[2] = r, s[3] = hh, s[4] = rh[i];
            S = 5;
            break;
        }
        }
        if (save) {
            const int64_t o = (b * d.T + t) * u + j;
            for (int q = 0; q < S; q++) save[q * d.blk + o] = gc_from_f<T>(s[q]);
        }
        float ev = e[i];
        if (used(mask, d.T, b, t)) {
            h[i] = hn;
            if (d.cell == GC_RNN_LSTM) c[i] = cn;
            ev = hn;
        } else if (d.zo) {
            ev = 0.0f;
        }
        e[i] = ev;
        if (d.seq) y[(b * d.T + k) * u + j] = gc_from_f<T>(ev);
    }
}

template <typename T>
__global__ void fwd_final(int64_t n, int seq, const float *h, const float *c, const float *e, T *y, T *hT, T *cT)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (!seq) y[i] = gc_from_f<T>(e[i]);
        if (hT) hT[i] = gc_from_f<T>(h[i]);
        if (cT) cT[i] = gc_from_f<T>(c[i]);
    }
}

template <typename T> static T *out_ptr(gc_tensor *t) { return t && t->data ? (T *)t->data : NULL; }
template <typename T> static const T *in_ptr(const gc_tensor *t) { return t && t->data ? (const T *)t->data : NULL; }

static rnn_dims dims_of(const gc_rnn_params *p, int64_t B, int64_t T, int64_t u)
{
    rnn_dims d;
    d.B = B, d.T = T, d.u = u;
    d.Gu = (int64_t)gc_rnn_gates(p->cell) * u;
    d.blk = B * T * u;
    d.cell = (int)p->cell, d.act = (int)p->act, d.ract = (int)p->recurrent_act;
    d.seq = p->sequences != 0, d.zo = p->zero_output_for_mask != 0, d.gb = p->go_backwards != 0;
    return d;
}

template <typename T>
static gc_status rnn_fwd(const gc_backend *be, const gc_op_call *call)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *xw_t = call->in[0];
    const rnn_dims d = dims_of(p, xw_t->shape[0], xw_t->shape[1], call->in[1]->shape[0]);
    const int64_t B = d.B, u = d.u, Gu = d.Gu, Bu = B * u;
    const T *xw = (const T *)xw_t->data, *U = (const T *)call->in[1]->data;
    const T *h0 = in_ptr<T>(call->in[2]), *c0 = in_ptr<T>(call->in[3]), *bh = in_ptr<T>(call->in[5]);
    const float *mask = in_ptr<float>(call->in[4]), *rm = in_ptr<float>(call->in[6]);
    T *y = (T *)call->out[0]->data, *save = out_ptr<T>(call->out[1]);
    T *hT = out_ptr<T>(call->out[2]), *cT = out_ptr<T>(call->out[3]);
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(4 * Bu + (rm ? 2 : 1) * B * Gu) * sizeof(float), &ws);
    if (st) return st;
    float *h = (float *)ws, *c = h + Bu, *e = c + Bu, *rh = e + Bu, *m = rh + Bu, *hm = m + B * Gu;
    cudaStream_t s = gc_cuda_stream(be);
    const unsigned grid = gc_cuda_grid(Bu, GC_CUDA_THREADS);
    const int before = p->cell == GC_RNN_GRU_RESET_BEFORE;
    fwd_init<T><<<grid, GC_CUDA_THREADS, 0, s>>>(Bu, h0, c0, h, c, e);
    if ((st = gc_cuda_launch_check("rnn_fwd: init"))) return st;
    for (int64_t k = 0; k < d.T; k++) {
        const int64_t t = d.gb ? d.T - 1 - k : k;
        if (!rm) {
            if ((st = launch_mm<T>(be, false, B, before ? 2 * u : Gu, u, h, u, U, Gu, 0, NULL, m, Gu))) return st;
        } else {
            fwd_rmask<<<gc_cuda_grid(B * Gu, GC_CUDA_THREADS), GC_CUDA_THREADS, 0, s>>>(B * Gu, u, Gu, h, rm, hm);
            if ((st = gc_cuda_launch_check("rnn_fwd: recurrent dropout"))) return st;
            for (int g = 0; g < (before ? 2 : (int)(Gu / u)); g++)
                if ((st = launch_mm<T>(be, false, B, u, u, hm + g * u, Gu, U, Gu, g * u, NULL, m + g * u, Gu)))
                    return st;
        }
        if (before) {
            fwd_reset<T><<<grid, GC_CUDA_THREADS, 0, s>>>(d, t, xw, m, rm ? hm + 2 * u : h, rm ? Gu : u, rh);
            if ((st = gc_cuda_launch_check("rnn_fwd: reset gate"))) return st;
            if ((st = launch_mm<T>(be, false, B, u, u, rh, u, U, Gu, 2 * u, NULL, m + 2 * u, Gu))) return st;
        }
        fwd_gate<T><<<grid, GC_CUDA_THREADS, 0, s>>>(d, k, t, xw, m, bh, mask, rh, h, c, e, y, save);
        if ((st = gc_cuda_launch_check("rnn_fwd: gates"))) return st;
    }
    fwd_final<T><<<grid, GC_CUDA_THREADS, 0, s>>>(Bu, d.seq, h, c, e, y, hT, cT);
    return gc_cuda_launch_check("rnn_fwd: final states");
}

/* ------------------------------------------------------------------ backward */

template <typename T>
__global__ void bwd_init(int64_t n, int seq, const T *dy, const T *dhT, const T *dcT, float *dh, float *dc, float *de)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        dh[i] = dhT ? gc_to_f(dhT[i]) : 0.0f;
        dc[i] = dcT ? gc_to_f(dcT[i]) : 0.0f;
        de[i] = (!seq && dy) ? gc_to_f(dy[i]) : 0.0f;
    }
}

/* Phase A of one step, per (row, unit): the gradient g reaching the cell output, every
 * gate gradient except reset_before's r (which needs d(r*h) from a matmul first). dz is
 * the float32 operand of the dh matmul (B, Gu); dd the direct part of dhprev. Masked rows:
 * zeros, dd = dh (the state gradient passes through), de kept or zeroed. */
template <typename T>
__global__ void bwd_gate(rnn_dims d, int64_t k, int64_t t, const T *dy, const T *save, const float *mask,
                         float *dh, float *dc, float *de, float *dd, float *dz, T *dxw, T *dm)
{
    const int64_t n = d.B * d.u, u = d.u, Gu = d.Gu, blk = d.blk;
    const int G = (int)(Gu / u);
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / u, j = i - b * u;
        const int64_t row = (b * d.T + t) * Gu, o = (b * d.T + t) * u + j;
        float dev = de[i];
        if (d.seq && dy) dev += gc_to_f(dy[(b * d.T + k) * u + j]);
        float *dzb = dz + b * Gu;
        if (!used(mask, d.T, b, t)) {
            dd[i] = dh[i];
            de[i] = d.zo ? 0.0f : dev;
            for (int q = 0; q < G; q++) {
                dzb[q * u + j] = 0.0f;
                dxw[row + q * u + j] = gc_from_f<T>(0.0f);
                if (dm) dm[row + q * u + j] = gc_from_f<T>(0.0f);
            }
            continue;
        }
        const float g = dh[i] + dev;
        de[i] = 0.0f;
        const float hp = gc_to_f(save[o]);
        switch (d.cell) {
        case GC_RNN_SIMPLE: {
            const float da = g * gc_rnn_act_dout(d.act, gc_to_f(save[blk + o]));
            dzb[j] = da;
            dxw[row + j] = gc_from_f<T>(da);
            dd[i] = 0.0f;
            break;
        }
        case GC_RNN_LSTM: {
            const float cp = gc_to_f(save[blk + o]), ig = gc_to_f(save[2 * blk + o]), fg = gc_to_f(save[3 * blk + o]);
            const float gg = gc_to_f(save[4 * blk + o]), og = gc_to_f(save[5 * blk + o]), cn = gc_to_f(save[6 * blk + o]);
            const float ac = gc_rnn_act_apply(d.act, cn);
            const float dcn = dc[i] + g * og * gc_rnn_act_dout(d.act, ac);
            const float v0 = dcn * gg * gc_rnn_act_dout(d.ract, ig), v1 = dcn * cp * gc_rnn_act_dout(d.ract, fg);
            const float v2 = dcn * ig * gc_rnn_act_dout(d.act, gg), v3 = g * ac * gc_rnn_act_dout(d.ract, og);
            dzb[j] = v0, dzb[u + j] = v1, dzb[2 * u + j] = v2, dzb[3 * u + j] = v3;
            dxw[row + j] = gc_from_f<T>(v0), dxw[row + u + j] = gc_from_f<T>(v1);
            dxw[row + 2 * u + j] = gc_from_f<T>(v2), dxw[row + 3 * u + j] = gc_from_f<T>(v3);
            dc[i] = dcn * fg;
            dd[i] = 0.0f;
            break;
        }
        default: { /* GRU, both variants */
            const float zg = gc_to_f(save[blk + o]), rg = gc_to_f(save[2 * blk + o]);
            const float hh = gc_to_f(save[3 * blk + o]), s4 = gc_to_f(save[4 * blk + o]);
            const float da = g * (1.0f - zg) * gc_rnn_act_dout(d.act, hh);
            const float vz = g * (hp - hh) * gc_rnn_act_dout(d.ract, zg);
            dzb[j] = vz;
            dxw[row + j] = gc_from_f<T>(vz);
            dd[i] = g * zg;
            dxw[row + 2 * u + j] = gc_from_f<T>(da);
            if (d.cell == GC_RNN_GRU) {
                const float vr = da * s4 * gc_rnn_act_dout(d.ract, rg);
                dzb[u + j] = vr;
                dzb[2 * u + j] = da * rg;
                dxw[row + u + j] = gc_from_f<T>(vr);
                if (dm) {
                    dm[row + j] = gc_from_f<T>(vz);
                    dm[row + u + j] = gc_from_f<T>(vr);
                    dm[row + 2 * u + j] = gc_from_f<T>(da * rg);
                }
            } else {
                dzb[2 * u + j] = da; /* the r block: bwd_reset, after d(r*h) */
            }
            break;
        }
        }
    }
}

/* reset_before phase B: with drh = da . U_h^T, the r gate and the r*h part of dd
 * (rh = r * h * rm_h with recurrent dropout) */
template <typename T>
__global__ void bwd_reset(rnn_dims d, int64_t t, const T *save, const float *mask, const float *rm,
                          const float *drh, float *dd, float *dz, T *dxw)
{
    const int64_t n = d.B * d.u, u = d.u, Gu = d.Gu;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / u, j = i - b * u;
        if (!used(mask, d.T, b, t)) continue;
        const int64_t o = (b * d.T + t) * u + j;
        const float km = rm ? rm[b * Gu + 2 * u + j] : 1.0f;
        const float hp = gc_to_f(save[o]) * km, rg = gc_to_f(save[2 * d.blk + o]);
        const float vr = drh[i] * hp * gc_rnn_act_dout(d.ract, rg);
        dz[b * Gu + u + j] = vr;
        dxw[(b * d.T + t) * Gu + u + j] = gc_from_f<T>(vr);
        dd[i] += drh[i] * rg * km;
    }
}

/* recurrent dropout: dh = dd + sum over the first ng gate blocks of dr_g * rmask_g */
__global__ void bwd_rsum(int64_t n, int64_t u, int64_t Gu, int ng, const float *dd, const float *dr,
                         const float *rm, float *dh)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t b = i / u, j = i - b * u;
        float acc = dd[i];
        for (int g = 0; g < ng; g++) acc += dr[b * Gu + g * u + j] * rm[b * Gu + g * u + j];
        dh[i] = acc;
    }
}

template <typename T>
__global__ void bwd_final(int64_t n, const float *dh, const float *dc, T *dh0, T *dc0)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        if (dh0) dh0[i] = gc_from_f<T>(dh[i]);
        if (dc0) dc0[i] = gc_from_f<T>(dc[i]);
    }
}

template <typename T>
static gc_status rnn_bwd(const gc_backend *be, const gc_op_call *call)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *save_t = call->in[4];
    const rnn_dims d = dims_of(p, save_t->shape[1], save_t->shape[2], save_t->shape[3]);
    const int64_t B = d.B, u = d.u, Gu = d.Gu, Bu = B * u;
    const T *dy = in_ptr<T>(call->in[0]), *dhT = in_ptr<T>(call->in[1]), *dcT = in_ptr<T>(call->in[2]);
    const T *U = (const T *)call->in[3]->data, *save = (const T *)save_t->data;
    const float *mask = in_ptr<float>(call->in[5]), *rm = in_ptr<float>(call->in[6]);
    T *dxw = (T *)call->out[0]->data, *dm = out_ptr<T>(call->out[1]);
    T *dh0 = out_ptr<T>(call->out[2]), *dc0 = out_ptr<T>(call->out[3]);
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, (size_t)(6 * Bu + (rm ? 2 : 1) * B * Gu) * sizeof(float), &ws);
    if (st) return st;
    float *dh = (float *)ws, *dc = dh + Bu, *de = dc + Bu, *dd = de + Bu, *drh = dd + Bu, *dz = drh + Bu;
    float *dr = dz + B * Gu; /* rmask only */
    cudaStream_t s = gc_cuda_stream(be);
    const unsigned grid = gc_cuda_grid(Bu, GC_CUDA_THREADS);
    const int before = p->cell == GC_RNN_GRU_RESET_BEFORE;
    bwd_init<T><<<grid, GC_CUDA_THREADS, 0, s>>>(Bu, d.seq, dy, dhT, dcT, dh, dc, de);
    if ((st = gc_cuda_launch_check("rnn_bwd: init"))) return st;
    for (int64_t k = d.T - 1; k >= 0; k--) {
        const int64_t t = d.gb ? d.T - 1 - k : k;
        bwd_gate<T><<<grid, GC_CUDA_THREADS, 0, s>>>(d, k, t, dy, save, mask, dh, dc, de, dd, dz, dxw, dm);
        if ((st = gc_cuda_launch_check("rnn_bwd: gates"))) return st;
        if (before) {
            if ((st = launch_mm<T>(be, true, B, u, u, dz + 2 * u, Gu, U, Gu, 2 * u, NULL, drh, u))) return st;
            bwd_reset<T><<<grid, GC_CUDA_THREADS, 0, s>>>(d, t, save, mask, rm, drh, dd, dz, dxw);
            if ((st = gc_cuda_launch_check("rnn_bwd: reset gate"))) return st;
        }
        /* dh = dd + dz . U^T (reset_before: the z, r blocks); rmask: per gate, masked */
        if (!rm) {
            if ((st = launch_mm<T>(be, true, B, u, before ? 2 * u : Gu, dz, Gu, U, Gu, 0, dd, dh, u))) return st;
        } else {
            const int ng = before ? 2 : (int)(Gu / u);
            for (int g = 0; g < ng; g++)
                if ((st = launch_mm<T>(be, true, B, u, u, dz + g * u, Gu, U, Gu, g * u, NULL, dr + g * u, Gu)))
                    return st;
            bwd_rsum<<<grid, GC_CUDA_THREADS, 0, s>>>(Bu, u, Gu, ng, dd, dr, rm, dh);
            if ((st = gc_cuda_launch_check("rnn_bwd: recurrent dropout"))) return st;
        }
    }
    bwd_final<T><<<grid, GC_CUDA_THREADS, 0, s>>>(Bu, dh, dc, dh0, dc0);
    return gc_cuda_launch_check("rnn_bwd: initial-state gradients");
}

} // namespace

/* cuda.rnn: auto takes the resident kernel (rnn_resident.cu: all of U in each CTA's
 * registers) wherever it is eligible, else the persistent kernel (rnn_persistent.cu)
 * wherever that is, else the stepwise loop above; resident, persistent and cluster (the
 * persistent kernels exchanging through a thread-block cluster's shared memory; never
 * auto's choice for now) refuse an ineligible call (saying why); stepwise never tries
 * them. `last` reports what ran. */
typedef gc_status (*rnn_pers_fn)(const gc_backend *, const gc_op_call *, int *, const char **);

static gc_status try_persistent(const gc_backend *be, const gc_op_call *call, rnn_pers_fn rfn, rnn_pers_fn fn,
                                rnn_pers_fn cfn, const char *what, int *ran)
{
    *ran = 0;
    const int v = gc_variant_forced(GC_VP_CUDA_RNN);
    if (v == GC_V_RNN_STEPWISE) return GC_OK;
    const char *why = NULL;
    gc_status st;
    if (v == GC_V_RNN_AUTO || v == GC_V_RNN_RESIDENT) {
        if ((st = rfn(be, call, ran, &why))) return st;
        if (*ran) {
            gc_variant_ran(GC_VP_CUDA_RNN, GC_V_RNN_RESIDENT);
            return GC_OK;
        }
        if (v == GC_V_RNN_RESIDENT)
            return gc_fail(GC_ERR_UNSUPPORTED,
                           "%s: cuda.rnn=resident cannot run this call: %s (auto runs it with the persistent "
                           "kernel or stepwise)",
                           what, why ? why : "not eligible");
        why = NULL;
    }
    const int cl = v == GC_V_RNN_CLUSTER;
    st = (cl ? cfn : fn)(be, call, ran, &why);
    if (st) return st;
    if (*ran) {
        gc_variant_ran(GC_VP_CUDA_RNN, cl ? GC_V_RNN_CLUSTER : GC_V_RNN_PERSISTENT);
        return GC_OK;
    }
    if (v == GC_V_RNN_PERSISTENT || cl)
        return gc_fail(GC_ERR_UNSUPPORTED, "%s: cuda.rnn=%s cannot run this call: %s (auto runs it stepwise)", what,
                       cl ? "cluster" : "persistent", why ? why : "not eligible");
    return GC_OK;
}

extern "C" gc_status gc_cuda_op_rnn_fwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    int ran = 0;
    if ((st = try_persistent(be, call, gc_rnn_resident_fwd, gc_rnn_persistent_fwd, gc_rnn_cluster_fwd, "rnn_fwd",
                             &ran)) ||
        ran)
        return st;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = rnn_fwd<T>(be, call));
    if (!st) gc_variant_ran(GC_VP_CUDA_RNN, GC_V_RNN_STEPWISE);
    return st;
}

extern "C" gc_status gc_cuda_op_rnn_bwd(const gc_backend *be, const gc_op_call *call)
{
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    int ran = 0;
    if ((st = try_persistent(be, call, gc_rnn_resident_bwd, gc_rnn_persistent_bwd, gc_rnn_cluster_bwd, "rnn_bwd",
                             &ran)) ||
        ran)
        return st;
    GC_CUDA_DISPATCH_FLOAT(call->in[4]->dtype, T, st = rnn_bwd<T>(be, call));
    if (!st) gc_variant_ran(GC_VP_CUDA_RNN, GC_V_RNN_STEPWISE);
    return st;
}
