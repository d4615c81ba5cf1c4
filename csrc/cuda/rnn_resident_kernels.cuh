/* rnn_resident_kernels.cuh -- the device side of the register-resident recurrence
 * (rnn_resident.cu has the host side, the entry points and the why of the design): the
 * kernels rnn_res_fwd / rnn_res_bwd, their argument structs, and the thread layout and
 * shared-memory layout that the host plan (rres_plan / rres_layout, below) and the
 * kernels must agree on.
 *
 * Kept apart so that tests/cuda/rnn_resident_emu.cpp compiles the very same kernel code
 * on the host (GC_RNN_EMU: one std::thread per CUDA thread, a std::barrier per block and
 * per warp; it provides threadIdx / blockIdx, __syncthreads, the dynamic shared memory
 * RRES_SMEM_DECL, the warp shuffles rres_shfl / rres_shfl_xor, float4, gc_to_f and
 * gc_from_f) and checks it against the float64 oracle on machines without a GPU.
 *
 * Thread layout (RRES_NT threads, one CTA per group of R batch rows, nothing shared
 * between CTAs):
 * - forward, h_{t-1} . U: K = u split into KS slices of kc (<= KC) units; the lanes of
 *   unit j are L = GP * KS adjacent lanes (GP = 1 for SimpleRNN, else 4 >= G: one lane
 *   group per gate, the 4th idle for GRU), lane (j, g, ks) holds U[ks*kc + kk, g*u + j]
 *   for kk < KC in registers (float32, zero past u). After the dot product the KS
 *   partials are combined with a shuffle butterfly (every lane of the column gets the
 *   same bits), each gate lane applies its gate's activation, and the gate values are
 *   gathered by shuffles into the unit's lane (g = 0, ks = 0), which does the cell update.
 *   L divides 32: a unit's lanes never straddle warps.
 * - backward, dz . U^T: K = G*u split into KS slices; lane (j, ks) holds U[j, ks*kc + kk];
 *   the butterfly gives dh_{t-1}[j] to unit j's lanes, and lane (j, 0) does the gate
 *   gradients of unit j for the next step right away.
 * The vectors a product reads (h, r*h, dz) sit in shared memory sliced as the lanes read
 * them: element k at (k / kc) * (KC + 4) + k % kc of a row, so that a lane's KC values are
 * contiguous (float4 broadcast loads) and the KS slices start 4 banks apart (no
 * conflict between the slices a warp reads at once). Positions past the vector are zero
 * and never written. */
#ifndef GPUCMP_CUDA_RNN_RESIDENT_KERNELS_CUH
#define GPUCMP_CUDA_RNN_RESIDENT_KERNELS_CUH

#ifndef GC_RNN_EMU
#include "common.cuh"
#endif
#include "gpucmp_rnn_act.h"

#include <stddef.h>
#include <stdint.h>

#define RRES_NT 256    /* threads per CTA */
#define RRES_KC_MAX 64 /* U's floats per thread at most (the register budget) */
#define RRES_PF 8      /* next-step input elements a thread holds in registers */

namespace {

/* ------------------------------------------------------------------ shapes */

/* n / d for 0 <= n < 2^31 and a divisor fixed for the launch (round-up method of
 * Granlund and Montgomery, as rnn_persistent_kernels.cuh's pers_div) */
struct rres_div {
    int d;
    unsigned mul, sh;
};

static inline rres_div rres_div_of(int d)
{
    rres_div v;
    v.d = d < 1 ? 1 : d;
    v.sh = 0;
    while ((1ull << v.sh) < (unsigned long long)v.d) v.sh++;
    v.mul = (unsigned)(((1ull << 32) * ((1ull << v.sh) - (unsigned long long)v.d)) / (unsigned long long)v.d + 1);
    return v;
}

__device__ __forceinline__ int rdiv(int n, const rres_div &v)
{
#ifdef __CUDA_ARCH__
    const unsigned hi = __umulhi((unsigned)n, v.mul);
#else
    const unsigned hi = (unsigned)(((unsigned long long)(unsigned)n * v.mul) >> 32);
#endif
    return (int)((hi + (unsigned)n) >> v.sh);
}

__device__ __forceinline__ int rres_min(int a, int b) { return a < b ? a : b; }

struct rres_shape {
    int B, T, u, G, cell, act, ract, seq, zo, gb, nsave, fast;
    int64_t blk; /* B*T*u */
    /* the thread layout (rres_plan): K slices, their length, the template's KC, lanes
     * per gate (GP) and per unit (L) */
    int KS, kc, KC, GP, L;
    int R, RT, RP, HS; /* rows per CTA, row tile, rows padded to RT, sliced row stride */
    /* shared memory (byte offsets, 16-aligned); forward: h0/h1 (the double-buffered h),
     * v (reset_before's r*h), x0/x1 (staged xw), m0/m1 (staged mask), c, e (states),
     * z, r (reset_before's gates between its products); backward: h0/h1 (dz, double),
     * v (reset_before's h-block dz), x0/x1 (staged save blocks + dy), m0/m1, c (dc),
     * e (de), z (dh), r (dd) */
    unsigned o_h0, o_h1, o_v, o_x0, o_x1, o_m0, o_m1, o_c, o_e, o_z, o_r;
    rres_div d_gu, d_u, d_nru, d_nru_last; /* G*u, u, R*u, (last CTA's rows)*u */
};

struct rres_fwd_args {
    rres_shape s;
    const void *xw, *U, *h0, *c0, *bh;
    const float *mask;
    void *out, *save, *hT, *cT;
};

struct rres_bwd_args {
    rres_shape s;
    const void *dy, *dhT, *dcT, *U, *save;
    const float *mask;
    void *dxw, *dm, *dh0, *dc0;
};

#ifndef GC_RNN_EMU
#define RRES_SMEM_DECL extern __shared__ __align__(16) unsigned char smem[]
__device__ __forceinline__ float rres_shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
__device__ __forceinline__ float rres_shfl(float v, int src) { return __shfl_sync(0xffffffffu, v, src); }
#endif

template <typename T> __device__ __forceinline__ const T *rres_cptr(const void *p) { return (const T *)p; }

/* Keras' default activations constant-folded (F = 1: tanh, sigmoid gates), else the
 * layer's kinds: the same functions (gpucmp_rnn_act.h) either way */
template <bool F>
struct rres_acts {
    int act, ract;
    __device__ __forceinline__ float a(float x) const { return gc_rnn_act_apply(F ? GC_RNN_TANH : act, x); }
    __device__ __forceinline__ float r(float x) const { return gc_rnn_act_apply(F ? GC_RNN_SIGMOID : ract, x); }
    __device__ __forceinline__ float da(float y) const { return gc_rnn_act_dout(F ? GC_RNN_TANH : act, y); }
    __device__ __forceinline__ float dr(float y) const { return gc_rnn_act_dout(F ? GC_RNN_SIGMOID : ract, y); }
};

/* ------------------------------------------------------------------ the product */

/* acc[i] = sum over kk < KC of h[i * HS + kk] * w[kk], for the RT rows of a tile: float4
 * broadcast loads, the row's FMAs spread over 4 / RT independent chains (by the float4
 * component) summed in a fixed order at the end */
template <int KC, int RT>
__device__ __forceinline__ void rres_dot(const float (&w)[KC], const float *h, int HS, float (&acc)[RT])
{
    constexpr int C = RT >= 4 ? 1 : 4 / RT;
    float a[RT][C];
#pragma unroll
    for (int i = 0; i < RT; i++)
#pragma unroll
        for (int c = 0; c < C; c++) a[i][c] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < KC; kk += 4) {
#pragma unroll
        for (int i = 0; i < RT; i++) {
            const float4 v = *(const float4 *)(h + i * HS + kk);
            a[i][0 % C] = fmaf(v.x, w[kk], a[i][0 % C]);
            a[i][1 % C] = fmaf(v.y, w[kk + 1], a[i][1 % C]);
            a[i][2 % C] = fmaf(v.z, w[kk + 2], a[i][2 % C]);
            a[i][3 % C] = fmaf(v.w, w[kk + 3], a[i][3 % C]);
        }
    }
#pragma unroll
    for (int i = 0; i < RT; i++) {
        if (C == 4) acc[i] = (a[i][0] + a[i][1]) + (a[i][2 % C] + a[i][3 % C]);
        else if (C == 2) acc[i] = a[i][0] + a[i][1 % C];
        else acc[i] = a[i][0];
    }
}

/* the KS partials of a column into every one of its lanes (adjacent lanes): a butterfly,
 * each stage adding the same two values in both lanes, so all lanes get the same bits */
template <int RT>
__device__ __forceinline__ void rres_reduce(float (&acc)[RT], int KS)
{
    for (int o = 1; o < KS; o <<= 1)
#pragma unroll
        for (int i = 0; i < RT; i++) acc[i] += rres_shfl_xor(acc[i], o);
}

/* ------------------------------------------------------------------ staging the inputs
 * A step's inputs (forward: xw rows and the mask; backward: the save blocks, dy and the
 * mask) are loaded a step ahead: issued right after a step's barrier into registers (the
 * storage type, converted only at the store, so no instruction waits for the load), and
 * stored into the other shared buffer just before the next barrier, a whole step later.
 * Items past RRES_PF per thread (many rows per CTA) are copied synchronously at the
 * store. Flat item i of a step is element i of the staged buffer. */
template <typename T>
struct rres_pf {
    T v[RRES_PF];
    float m;
};

/* forward items: i < nr*G*u: xw[b0 + i / Gu, t, i % Gu] */
template <typename T>
__device__ __forceinline__ const T *rres_fwd_src(const rres_fwd_args &a, const rres_shape &s, int b0, int t, int i)
{
    const int Gu = s.G * s.u, r = rdiv(i, s.d_gu), n = i - r * Gu;
    return rres_cptr<T>(a.xw) + ((int64_t)(b0 + r) * s.T + t) * Gu + n;
}

/* backward items: i < nb*nr*u, block q = i / (nr*u): save block q < nsave (time t), or dy
 * (sequences, processing index k) */
template <typename T>
__device__ __forceinline__ const T *rres_bwd_src(const rres_bwd_args &a, const rres_shape &s, const rres_div &dnru,
                                                 int nru, int b0, int k, int t, int i)
{
    const int q = rdiv(i, dnru), rem = i - q * nru, r = rdiv(rem, s.d_u), j = rem - r * s.u;
    const int64_t b = b0 + r;
    if (q < s.nsave) return rres_cptr<T>(a.save) + q * s.blk + (b * s.T + t) * s.u + j;
    return rres_cptr<T>(a.dy) + (b * s.T + k) * s.u + j;
}

/* ------------------------------------------------------------------ forward */

template <typename T, int KC, int RT, bool F>
__device__ __forceinline__ void rres_fwd_body(const rres_fwd_args &a, unsigned char *smem)
{
    const rres_shape s = a.s;
    const rres_acts<F> acts{s.act, s.ract};
    const int tid = (int)threadIdx.x, lane = tid & 31;
    const int u = s.u, G = s.G, Gu = G * u, KS = s.KS, kc = s.kc, L = s.L, HS = s.HS;
    const int ks = tid & (KS - 1), g = (tid / KS) & (s.GP - 1), j = tid / L;
    const int b0 = (int)blockIdx.x * s.R, nr = rres_min(s.R, s.B - b0);
    const bool wact = (tid & ~31) / L < u; /* warp-uniform: the warp holds some unit */
    const bool col = j < u && g < G;       /* this lane holds a column of U */
    const bool gl = col && g == 0 && ks == 0; /* the unit's lane: the cell update */
    const int base = lane & ~(L - 1);
    const int pj = j < u ? (j / kc) * (KC + 4) + j % kc : 0; /* unit j in a sliced row */
    const int cell = s.cell, before = cell == GC_RNN_GRU_RESET_BEFORE;
    const T *U = rres_cptr<T>(a.U), *h0 = rres_cptr<T>(a.h0), *c0 = rres_cptr<T>(a.c0), *bh = rres_cptr<T>(a.bh);
    T *out = (T *)a.out, *save = (T *)a.save;
    float *const hb0 = (float *)(smem + s.o_h0), *const hb1 = (float *)(smem + s.o_h1);
    float *const rhb = (float *)(smem + s.o_v);
    float *const xs0 = (float *)(smem + s.o_x0), *const xs1 = (float *)(smem + s.o_x1);
    float *const ms0 = (float *)(smem + s.o_m0), *const ms1 = (float *)(smem + s.o_m1);
    float *const cs = (float *)(smem + s.o_c), *const es = (float *)(smem + s.o_e);
    float *const zsv = (float *)(smem + s.o_z), *const rsv = (float *)(smem + s.o_r);

    /* U's column slice into registers, float32 */
    float w[KC];
#pragma unroll
    for (int kk = 0; kk < KC; kk++) {
        const int k = ks * kc + kk;
        w[kk] = (col && kk < kc && k < u) ? gc_to_f(U[(int64_t)k * Gu + g * u + j]) : 0.0f;
    }
    const float bhv = (cell == GC_RNN_GRU && bh && col) ? gc_to_f(bh[g * u + j]) : 0.0f;

    /* zero the sliced vectors (their padding stays zero), the initial states */
    for (int i = tid; i < s.RP * HS; i += RRES_NT) {
        hb0[i] = 0.0f, hb1[i] = 0.0f;
        if (before) rhb[i] = 0.0f;
    }
    for (int r = tid; r < s.R; r += RRES_NT) ms0[r] = 1.0f, ms1[r] = 1.0f;
    __syncthreads();
    for (int i = tid; i < nr * u; i += RRES_NT) {
        const int r = rdiv(i, s.d_u), jj = i - r * u;
        const int64_t o = (int64_t)(b0 + r) * u + jj;
        hb0[r * HS + (jj / kc) * (KC + 4) + jj % kc] = h0 ? gc_to_f(h0[o]) : 0.0f;
        cs[i] = c0 ? gc_to_f(c0[o]) : 0.0f;
        es[i] = 0.0f;
    }
    /* step 0's inputs, synchronously */
    {
        const int t = s.gb ? s.T - 1 : 0;
        for (int i = tid; i < nr * Gu; i += RRES_NT) xs0[i] = gc_to_f(*rres_fwd_src<T>(a, s, b0, t, i));
        if (a.mask)
            for (int r = tid; r < nr; r += RRES_NT) ms0[r] = a.mask[(int64_t)(b0 + r) * s.T + t];
    }
    const int ntot = nr * Gu;
    rres_pf<T> pf;
    pf.m = 1.0f;
    auto issue = [&](int kn) { /* step kn's inputs into registers */
        const int t = s.gb ? s.T - 1 - kn : kn;
#pragma unroll
        for (int q = 0; q < RRES_PF; q++) {
            const int i = tid + q * RRES_NT;
            if (i < ntot) pf.v[q] = *rres_fwd_src<T>(a, s, b0, t, i);
        }
        if (a.mask && tid < nr) pf.m = a.mask[(int64_t)(b0 + tid) * s.T + t];
    };
    auto store = [&](int kn, float *xs, float *ms) { /* ... and into shared buffers */
        const int t = s.gb ? s.T - 1 - kn : kn;
#pragma unroll
        for (int q = 0; q < RRES_PF; q++) {
            const int i = tid + q * RRES_NT;
            if (i < ntot) xs[i] = gc_to_f(pf.v[q]);
        }
        for (int i = tid + RRES_PF * RRES_NT; i < ntot; i += RRES_NT) xs[i] = gc_to_f(*rres_fwd_src<T>(a, s, b0, t, i));
        if (a.mask) {
            if (tid < nr) ms[tid] = pf.m;
            for (int r = tid + RRES_NT; r < nr; r += RRES_NT) ms[r] = a.mask[(int64_t)(b0 + r) * s.T + t];
        }
    };
    __syncthreads();
    if (s.T > 1) issue(1);

    for (int k = 0; k < s.T; k++) {
        const int t = s.gb ? s.T - 1 - k : k;
        const int cur = k & 1;
        const float *hcur = cur ? hb1 : hb0;
        float *hnext = cur ? hb0 : hb1;
        const float *xs = cur ? xs1 : xs0, *ms = cur ? ms1 : ms0;
        /* the cell update of (row r, unit j), in the unit's lane; v0..v3: the gates */
        auto update = [&](int r, float v0, float v1, float v2, float v3) {
            const int si = r * u + j;
            const float hp = hcur[r * HS + pj];
            float hn, cn = 0.0f, sv[7];
            int S = 2;
            sv[0] = hp;
            switch (cell) {
            case GC_RNN_SIMPLE:
                hn = v0;
                sv[1] = hn;
                break;
            case GC_RNN_LSTM: {
                const float cp = cs[si];
                cn = v1 * cp + v0 * v2;
                hn = v3 * acts.a(cn);
                sv[1] = cp, sv[2] = v0, sv[3] = v1, sv[4] = v2, sv[5] = v3, sv[6] = cn;
                S = 7;
                break;
            }
            case GC_RNN_GRU: { /* v0 z, v1 r, v2 m_h + bh_h */
                const float hh = acts.a(xs[r * Gu + 2 * u + j] + v1 * v2);
                hn = v0 * hp + (1.0f - v0) * hh;
                sv[1] = v0, sv[2] = v1, sv[3] = hh, sv[4] = v2;
                S = 5;
                break;
            }
            default: { /* reset_before: v0 = (r*h).U_h; z, r from the first product */
                const float z = zsv[si], rg = rsv[si];
                const float hh = acts.a(xs[r * Gu + 2 * u + j] + v0);
                hn = z * hp + (1.0f - z) * hh;
                sv[1] = z, sv[2] = rg, sv[3] = hh, sv[4] = rg * hp;
                S = 5;
                break;
            }
            }
            const int live = ms[r] != 0.0f;
            hnext[r * HS + pj] = live ? hn : hp;
            float ev = es[si];
            if (live) {
                if (cell == GC_RNN_LSTM) cs[si] = cn;
                ev = hn;
            } else if (s.zo) {
                ev = 0.0f;
            }
            es[si] = ev;
            const int64_t o = ((int64_t)(b0 + r) * s.T + t) * u + j;
            if (save) /* constant indices: sv stays in registers */
#pragma unroll
                for (int q = 0; q < 7; q++)
                    if (q < S) save[q * s.blk + o] = gc_from_f<T>(sv[q]);
            if (s.seq) out[((int64_t)(b0 + r) * s.T + k) * u + j] = gc_from_f<T>(ev);
        };
        /* the first (for reset_before: the z, r) product, the gates, the update */
        if (wact) {
            for (int r0 = 0; r0 < nr; r0 += RT) {
                float acc[RT];
                rres_dot<KC, RT>(w, hcur + r0 * HS + ks * (KC + 4), HS, acc);
                rres_reduce<RT>(acc, KS);
#pragma unroll
                for (int i = 0; i < RT; i++) {
                    const int r = r0 + i, rr = r < nr ? r : 0;
                    const float m = acc[i];
                    float v = 0.0f;
                    if (col) {
                        const float x = xs[rr * Gu + g * u + j];
                        switch (cell) {
                        case GC_RNN_SIMPLE: v = acts.a(x + m); break;
                        case GC_RNN_LSTM: v = g == 2 ? acts.a(x + m) : acts.r(x + m); break;
                        case GC_RNN_GRU: v = g == 2 ? m + bhv : acts.r(x + (m + bhv)); break;
                        default: v = acts.r(x + m); break; /* reset_before z, r (g = 2: unused) */
                        }
                    }
                    float v1 = 0.0f, v2 = 0.0f, v3 = 0.0f;
                    if (G > 1) {
                        v1 = rres_shfl(v, base + KS);
                        if (!before) v2 = rres_shfl(v, base + 2 * KS);
                        if (G > 3) v3 = rres_shfl(v, base + 3 * KS);
                    }
                    if (gl && r < nr) {
                        if (before) { /* r * hprev for the second product */
                            const int si = r * u + j;
                            const float hp = hcur[r * HS + pj];
                            zsv[si] = v, rsv[si] = v1;
                            rhb[r * HS + pj] = v1 * hp;
                        } else {
                            update(r, v, v1, v2, v3);
                        }
                    }
                }
            }
        }
        if (before) {
            __syncthreads(); /* r*h complete */
            if (wact) {
                for (int r0 = 0; r0 < nr; r0 += RT) {
                    float acc[RT];
                    rres_dot<KC, RT>(w, rhb + r0 * HS + ks * (KC + 4), HS, acc);
                    rres_reduce<RT>(acc, KS);
#pragma unroll
                    for (int i = 0; i < RT; i++) {
                        const float m = rres_shfl(acc[i], base + 2 * KS); /* the h block's column */
                        const int r = r0 + i;
                        if (gl && r < nr) update(r, m, 0.0f, 0.0f, 0.0f);
                    }
                }
            }
        }
        if (k + 1 < s.T) store(k + 1, cur ? xs0 : xs1, cur ? ms0 : ms1);
        __syncthreads(); /* h_t (and the next inputs) complete */
        if (k + 2 < s.T) issue(k + 2);
    }
    /* the final states: h_T is in buffer T & 1 (written by this very lane) */
    const float *hfin = (s.T & 1) ? hb1 : hb0;
    T *hTo = (T *)a.hT, *cTo = (T *)a.cT;
    if (gl)
        for (int r = 0; r < nr; r++) {
            const int si = r * u + j;
            const int64_t o = (int64_t)(b0 + r) * u + j;
            if (!s.seq) out[o] = gc_from_f<T>(es[si]);
            if (hTo) hTo[o] = gc_from_f<T>(hfin[r * HS + pj]);
            if (cTo) cTo[o] = gc_from_f<T>(cs[si]);
        }
}

template <typename T, int KC, int RT>
__global__ void __launch_bounds__(RRES_NT, 1) rnn_res_fwd(rres_fwd_args a)
{
    RRES_SMEM_DECL;
    if (a.s.fast) rres_fwd_body<T, KC, RT, true>(a, smem);
    else rres_fwd_body<T, KC, RT, false>(a, smem);
}

/* ------------------------------------------------------------------ backward */

template <typename T, int KC, int RT, bool F>
__device__ __forceinline__ void rres_bwd_body(const rres_bwd_args &a, unsigned char *smem)
{
    const rres_shape s = a.s;
    const rres_acts<F> acts{s.act, s.ract};
    const int tid = (int)threadIdx.x;
    const int u = s.u, G = s.G, Gu = G * u, KS = s.KS, kc = s.kc, L = s.L, HS = s.HS;
    const int ks = tid & (KS - 1), j = tid / L;
    const int b0 = (int)blockIdx.x * s.R, nr = rres_min(s.R, s.B - b0);
    const bool wact = (tid & ~31) / L < u;
    const bool own = j < u && ks == 0; /* unit j's lane: the gate gradients */
    const int cell = s.cell, before = cell == GC_RNN_GRU_RESET_BEFORE;
    const T *U = rres_cptr<T>(a.U), *dy = rres_cptr<T>(a.dy), *dhT = rres_cptr<T>(a.dhT), *dcT = rres_cptr<T>(a.dcT);
    T *dxw = (T *)a.dxw, *dm = (T *)a.dm;
    float *const dz0 = (float *)(smem + s.o_h0), *const dz1 = (float *)(smem + s.o_h1);
    float *const dzh = (float *)(smem + s.o_v); /* reset_before: the h block's dz alone */
    float *const ss0 = (float *)(smem + s.o_x0), *const ss1 = (float *)(smem + s.o_x1);
    float *const ms0 = (float *)(smem + s.o_m0), *const ms1 = (float *)(smem + s.o_m1);
    float *const dcs = (float *)(smem + s.o_c), *const des = (float *)(smem + s.o_e);
    float *const dhs = (float *)(smem + s.o_z), *const dds = (float *)(smem + s.o_r);
    /* where unit j's gate columns sit in a sliced dz row */
    int pg[4];
#pragma unroll
    for (int q = 0; q < 4; q++) {
        const int n = q * u + (j < u ? j : 0);
        pg[q] = (n / kc) * (KC + 4) + n % kc;
    }

    /* U^T's row slice into registers: w[kk] = U[j, ks*kc + kk] */
    float w[KC];
#pragma unroll
    for (int kk = 0; kk < KC; kk++) {
        const int n = ks * kc + kk;
        w[kk] = (j < u && kk < kc && n < Gu) ? gc_to_f(U[(int64_t)j * Gu + n]) : 0.0f;
    }
    const int want_dy = s.seq && dy;
    const int nru = nr * u, nb = s.nsave + 1, ntot = (s.nsave + want_dy) * nru;
    const rres_div dnru = nr == s.R ? s.d_nru : s.d_nru_last;
    for (int i = tid; i < s.RP * HS; i += RRES_NT) {
        dz0[i] = 0.0f, dz1[i] = 0.0f;
        if (before) dzh[i] = 0.0f;
    }
    for (int i = tid; i < nb * nru; i += RRES_NT) ss0[i] = 0.0f, ss1[i] = 0.0f; /* dy's block when absent */
    for (int r = tid; r < s.R; r += RRES_NT) ms0[r] = 1.0f, ms1[r] = 1.0f;
    for (int i = tid; i < nru; i += RRES_NT) {
        const int64_t o = (int64_t)b0 * u + i;
        dhs[i] = dhT ? gc_to_f(dhT[o]) : 0.0f;
        dcs[i] = dcT ? gc_to_f(dcT[o]) : 0.0f;
        des[i] = (!s.seq && dy) ? gc_to_f(dy[o]) : 0.0f;
        dds[i] = 0.0f;
    }
    __syncthreads();
    {
        const int k = s.T - 1, t = s.gb ? s.T - 1 - k : k;
        float *ss = (k & 1) ? ss1 : ss0, *ms = (k & 1) ? ms1 : ms0;
        for (int i = tid; i < ntot; i += RRES_NT) ss[i] = gc_to_f(*rres_bwd_src<T>(a, s, dnru, nru, b0, k, t, i));
        if (a.mask)
            for (int r = tid; r < nr; r += RRES_NT) ms[r] = a.mask[(int64_t)(b0 + r) * s.T + t];
    }
    rres_pf<T> pf;
    pf.m = 1.0f;
    auto issue = [&](int kn) {
        const int t = s.gb ? s.T - 1 - kn : kn;
#pragma unroll
        for (int q = 0; q < RRES_PF; q++) {
            const int i = tid + q * RRES_NT;
            if (i < ntot) pf.v[q] = *rres_bwd_src<T>(a, s, dnru, nru, b0, kn, t, i);
        }
        if (a.mask && tid < nr) pf.m = a.mask[(int64_t)(b0 + tid) * s.T + t];
    };
    auto store = [&](int kn, float *ss, float *ms) {
        const int t = s.gb ? s.T - 1 - kn : kn;
#pragma unroll
        for (int q = 0; q < RRES_PF; q++) {
            const int i = tid + q * RRES_NT;
            if (i < ntot) ss[i] = gc_to_f(pf.v[q]);
        }
        for (int i = tid + RRES_PF * RRES_NT; i < ntot; i += RRES_NT)
            ss[i] = gc_to_f(*rres_bwd_src<T>(a, s, dnru, nru, b0, kn, t, i));
        if (a.mask) {
            if (tid < nr) ms[tid] = pf.m;
            for (int r = tid + RRES_NT; r < nr; r += RRES_NT) ms[r] = a.mask[(int64_t)(b0 + r) * s.T + t];
        }
    };
    __syncthreads();
    if (s.T > 1) issue(s.T - 2);

    for (int k = s.T - 1; k >= 0; k--) {
        const int t = s.gb ? s.T - 1 - k : k;
        const int cur = k & 1;
        const float *ss = cur ? ss1 : ss0, *ms = cur ? ms1 : ms0;
        float *dz = cur ? dz1 : dz0;
        /* phase A: the gate gradients of (row, unit j) */
        if (own)
            for (int r = 0; r < nr; r++) {
                const int si = r * u + j;
                const int64_t row = ((int64_t)(b0 + r) * s.T + t) * Gu;
                float *dzr = dz + r * HS;
                const float dev = des[si] + ss[s.nsave * nru + si];
                if (ms[r] == 0.0f) {
                    dds[si] = dhs[si];
                    des[si] = s.zo ? 0.0f : dev;
#pragma unroll
                    for (int q = 0; q < 4; q++) {
                        if (q >= G) break;
                        dzr[pg[q]] = 0.0f;
                        dxw[row + (int64_t)q * u + j] = gc_from_f<T>(0.0f);
                        if (dm) dm[row + (int64_t)q * u + j] = gc_from_f<T>(0.0f);
                    }
                    if (before) dzh[r * HS + pg[2]] = 0.0f;
                    continue;
                }
                const float gr = dhs[si] + dev;
                des[si] = 0.0f;
                const float hp = ss[si];
                switch (cell) {
                case GC_RNN_SIMPLE: {
                    const float da = gr * acts.da(ss[nru + si]);
                    dzr[pg[0]] = da;
                    dxw[row + j] = gc_from_f<T>(da);
                    dds[si] = 0.0f;
                    break;
                }
                case GC_RNN_LSTM: {
                    const float cp = ss[nru + si], ig = ss[2 * nru + si], fg = ss[3 * nru + si];
                    const float gg = ss[4 * nru + si], og = ss[5 * nru + si], cn = ss[6 * nru + si];
                    const float ac = acts.a(cn);
                    const float dcn = dcs[si] + gr * og * acts.da(ac);
                    const float v0 = dcn * gg * acts.dr(ig), v1 = dcn * cp * acts.dr(fg);
                    const float v2 = dcn * ig * acts.da(gg), v3 = gr * ac * acts.dr(og);
                    dzr[pg[0]] = v0, dzr[pg[1]] = v1, dzr[pg[2]] = v2, dzr[pg[3]] = v3;
                    dxw[row + j] = gc_from_f<T>(v0), dxw[row + u + j] = gc_from_f<T>(v1);
                    dxw[row + 2 * u + j] = gc_from_f<T>(v2), dxw[row + 3 * u + j] = gc_from_f<T>(v3);
                    dcs[si] = dcn * fg;
                    dds[si] = 0.0f;
                    break;
                }
                default: { /* GRU, both variants */
                    const float zg = ss[nru + si], rg = ss[2 * nru + si], hh = ss[3 * nru + si];
                    const float s4 = ss[4 * nru + si];
                    const float da = gr * (1.0f - zg) * acts.da(hh);
                    const float vz = gr * (hp - hh) * acts.dr(zg);
                    dzr[pg[0]] = vz;
                    dxw[row + j] = gc_from_f<T>(vz);
                    dds[si] = gr * zg;
                    dxw[row + 2 * u + j] = gc_from_f<T>(da);
                    if (cell == GC_RNN_GRU) {
                        const float vr = da * s4 * acts.dr(rg);
                        dzr[pg[1]] = vr;
                        dzr[pg[2]] = da * rg;
                        dxw[row + u + j] = gc_from_f<T>(vr);
                        if (dm) {
                            dm[row + j] = gc_from_f<T>(vz);
                            dm[row + u + j] = gc_from_f<T>(vr);
                            dm[row + 2 * u + j] = gc_from_f<T>(da * rg);
                        }
                    } else {
                        dzh[r * HS + pg[2]] = da; /* the r gate: after d(r*h) = da . U_h^T */
                    }
                    break;
                }
                }
            }
        if (k > 0) store(k - 1, cur ? ss0 : ss1, cur ? ms0 : ms1);
        __syncthreads(); /* dz (reset_before: its h block) complete */
        if (before) {
            /* d(r*h) = da . U_h^T, then the r gate and the r*h part of the direct term */
            if (wact)
                for (int r0 = 0; r0 < nr; r0 += RT) {
                    float acc[RT];
                    rres_dot<KC, RT>(w, dzh + r0 * HS + ks * (KC + 4), HS, acc);
                    rres_reduce<RT>(acc, KS);
#pragma unroll
                    for (int i = 0; i < RT; i++) {
                        const int r = r0 + i;
                        if (!own || r >= nr || ms[r] == 0.0f) continue;
                        const int si = r * u + j;
                        const float drh = acc[i], hp = ss[si], rg = ss[2 * nru + si];
                        const float vr = drh * hp * acts.dr(rg);
                        dz[r * HS + pg[1]] = vr;
                        dxw[((int64_t)(b0 + r) * s.T + t) * Gu + u + j] = gc_from_f<T>(vr);
                        dds[si] += drh * rg;
                    }
                }
            __syncthreads(); /* the r block of dz complete */
        }
        if (k > 1) issue(k - 2);
        /* dh_{t-1} = the direct part + dz . U^T */
        if (wact)
            for (int r0 = 0; r0 < nr; r0 += RT) {
                float acc[RT];
                rres_dot<KC, RT>(w, dz + r0 * HS + ks * (KC + 4), HS, acc);
                rres_reduce<RT>(acc, KS);
#pragma unroll
                for (int i = 0; i < RT; i++) {
                    const int r = r0 + i;
                    if (own && r < nr) dhs[r * u + j] = dds[r * u + j] + acc[i];
                }
            }
    }
    T *dh0 = (T *)a.dh0, *dc0 = (T *)a.dc0;
    if (own)
        for (int r = 0; r < nr; r++) {
            const int64_t o = (int64_t)(b0 + r) * u + j;
            if (dh0) dh0[o] = gc_from_f<T>(dhs[r * u + j]);
            if (dc0) dc0[o] = gc_from_f<T>(dcs[r * u + j]);
        }
}

template <typename T, int KC, int RT>
__global__ void __launch_bounds__(RRES_NT, 1) rnn_res_bwd(rres_bwd_args a)
{
    RRES_SMEM_DECL;
    if (a.s.fast) rres_bwd_body<T, KC, RT, true>(a, smem);
    else rres_bwd_body<T, KC, RT, false>(a, smem);
}

/* ------------------------------------------------------------------ the plan (host) */

/* the smallest template KC holding kc values (0: more than RRES_KC_MAX). Two sizes only:
 * every KC is 2 passes x 2 row tiles x 3 storage types of kernels of ~2 s of nvcc each
 * per architecture (CI compiles 4), and a lane holding 64 where 48 would do costs
 * registers, not time (one CTA per SM either way at u = 64..128) */
static inline int rres_kc_template(int kc)
{
    static const int kcs[2] = {16, 64};
    for (int i = 0; i < 2; i++)
        if (kc <= kcs[i]) return kcs[i];
    return 0;
}

/* The thread layout of one pass: K = u (forward) or G*u (backward) split over KS
 * slices, u * L lanes (L = GP * KS; forward GP = 1 or 4, backward 1) within RRES_NT.
 * Picks the smallest template KC, then the fewest slices giving it (the fewest shuffle
 * stages); want_ks > 0 asks for that KS (the host emulation). 0 when U does not fit. */
static inline int rres_plan(rres_shape *s, int bwd, int want_ks)
{
    const int u = s->u, G = s->G, K = bwd ? G * u : u;
    s->GP = bwd || G == 1 ? 1 : 4;
    int best = 0, best_ks = 0;
    for (int ks = 1; ks <= 32; ks *= 2) {
        if (want_ks > 0 && ks != want_ks) continue;
        if (s->GP * ks > 32 || (int64_t)u * s->GP * ks > RRES_NT) break;
        const int kct = rres_kc_template((K + ks - 1) / ks);
        if (kct && (!best || kct < best)) best = kct, best_ks = ks;
    }
    if (!best) return 0;
    s->KS = best_ks;
    s->kc = (K + best_ks - 1) / best_ks;
    s->KC = best;
    s->L = s->GP * best_ks;
    s->HS = best_ks * (best + 4);
    return 1;
}

static inline unsigned rres_align16(size_t b) { return (unsigned)((b + 15) & ~(size_t)15); }

/* the shared-memory layout for s->R rows (row tile 2 when R > 1); fills the divisors;
 * returns the bytes */
static inline size_t rres_layout(rres_shape *s, int bwd)
{
    s->RT = s->R > 1 ? 2 : 1;
    s->RP = (s->R + s->RT - 1) / s->RT * s->RT;
    const size_t R = (size_t)s->R, u = (size_t)s->u, Gu = (size_t)s->G * u, vec = (size_t)s->RP * s->HS * 4;
    const int before = s->cell == GC_RNN_GRU_RESET_BEFORE;
    size_t o = 0;
    auto take = [&o](size_t bytes) {
        const unsigned at = (unsigned)o;
        o += rres_align16(bytes);
        return at;
    };
    s->o_h0 = take(vec);
    s->o_h1 = take(vec);
    s->o_v = take(before ? vec : 0);
    const size_t stage = bwd ? (size_t)(s->nsave + 1) * R * u * 4 : R * Gu * 4;
    s->o_x0 = take(stage);
    s->o_x1 = take(stage);
    s->o_m0 = take(R * 4);
    s->o_m1 = take(R * 4);
    s->o_c = take(R * u * 4);
    s->o_e = take(R * u * 4);
    s->o_z = take(bwd || before ? R * u * 4 : 0);
    s->o_r = take(bwd || before ? R * u * 4 : 0);
    const int NG = (s->B + s->R - 1) / s->R;
    s->d_gu = rres_div_of((int)Gu);
    s->d_u = rres_div_of(s->u);
    s->d_nru = rres_div_of(s->R * s->u);
    s->d_nru_last = rres_div_of((s->B - (NG - 1) * s->R) * s->u);
    return o;
}

/* the fields of the call (rnn_resident.cu's checks and the emulation share it) */
static inline void rres_shape_of(rres_shape *s, int B, int T, int u, int cell, int act, int ract, int seq, int zo,
                                 int gb)
{
    static const int gates[4] = {1, 4, 3, 3}, blocks[4] = {2, 7, 5, 5}; /* gpucmp.h */
    *s = rres_shape();
    s->B = B, s->T = T, s->u = u, s->G = gates[cell & 3], s->nsave = blocks[cell & 3];
    s->cell = cell, s->act = act, s->ract = ract, s->seq = seq != 0, s->zo = zo != 0, s->gb = gb != 0;
    s->blk = (int64_t)B * T * u;
    s->fast = act == GC_RNN_TANH && (cell == GC_RNN_SIMPLE || ract == GC_RNN_SIGMOID);
}

/* the kernel instantiation of a plan's KC (one of rres_kc_template's) and row tile RT:
 * the one table rnn_resident.cu, the host emulation and the benchmark launch from */
template <typename T, int RT> static inline void (*rres_fwd_kernel(int KC))(rres_fwd_args)
{
    return KC == 16 ? rnn_res_fwd<T, 16, RT> : rnn_res_fwd<T, 64, RT>;
}

template <typename T, int RT> static inline void (*rres_bwd_kernel(int KC))(rres_bwd_args)
{
    return KC == 16 ? rnn_res_bwd<T, 16, RT> : rnn_res_bwd<T, 64, RT>;
}

} // namespace

#endif
