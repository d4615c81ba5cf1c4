/* rnn_persistent_kernels.cuh -- the device side of the persistent recurrence
 * (rnn_persistent.cu has the design, the host side and the entry points): the kernels
 * rnn_pers_fwd / rnn_pers_bwd, their argument structs, the exchange protocol and the
 * shared-memory layout, which the host plan and the kernels must agree on.
 *
 * Kept apart so that tests/cuda/rnn_persistent_emu.cpp can compile the very same kernel
 * code on the host (GC_RNN_EMU: one std::thread per CUDA thread, a std::barrier per
 * block, std::atomic for the flags) and check it against the oracle on machines without a
 * GPU; the few device-only lines (PTX loads, the timer, the dynamic shared memory) have an
 * emulated twin there. */
#ifndef GPUCMP_CUDA_RNN_PERSISTENT_KERNELS_CUH
#define GPUCMP_CUDA_RNN_PERSISTENT_KERNELS_CUH

#ifndef GC_RNN_EMU
#include "common.cuh"
#endif
#include "gpucmp_rnn_act.h"

#include <stddef.h>

#define PERS_NT 256                 /* threads per CTA */
#define PERS_MAX_NC 16              /* CTAs per group at most */
#define PERS_US_TARGET (32u << 10)  /* per-CTA slice of U the choice of NC aims below */
#define PERS_ERR_SLOT 4             /* gc_cuda_err_flag slots 4-6 (0-1 loss, 2-3 embedding) */
#define PERS_ERR_TIMEOUT 1
#define PERS_CNT_STRIDE 32          /* one 128-byte line per group counter */

namespace {

/* ------------------------------------------------------------------ shapes */

struct pers_shape {
    int B, T, u, G, cell, act, ract, seq, zo, gb;
    int NC, UC, GCP, ldu, R, RP, nsave;
    int64_t blk; /* B*T*u */
    unsigned long long timeout_ns;
    /* dynamic shared memory offsets in bytes (16-aligned) */
    unsigned o_us, o_a, o_b, o_red, o_z, o_x, o_s0, o_s1, o_s2, o_s3, o_m, o_bh, o_ctl;
    /* the cluster exchange's receive buffers (0 under the flags): the forward's second h
     * buffer (the first is o_a), the backward's two partial-dh buffers */
    unsigned o_h1, o_rx;
};

struct pers_sync {
    unsigned *cnt;   /* per group, PERS_CNT_STRIDE apart */
    int *abort;      /* this launch: nonzero = leave */
    int *status;     /* the backend's error flag slots PERS_ERR_SLOT.. */
    float *xbuf;     /* exchange buffers: 2 x xstride floats */
    int64_t xstride;
};

struct pers_fwd_args {
    pers_shape s;
    pers_sync y;
    const void *xw, *U, *h0, *c0, *bh;
    const float *mask;
    void *out, *save, *hT, *cT;
};

struct pers_bwd_args {
    pers_shape s;
    pers_sync y;
    const void *dy, *dhT, *dcT, *U, *save;
    const float *mask;
    void *dxw, *dm, *dh0, *dc0;
};

/* ------------------------------------------------------------------ synchronisation */

#ifndef GC_RNN_EMU
__device__ __forceinline__ unsigned ld_acquire_u32(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ int ld_relaxed_s32(const int *p)
{
    int v;
    asm volatile("ld.relaxed.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ unsigned long long global_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define PERS_SMEM_DECL extern __shared__ __align__(16) unsigned char smem[]

/* ------------------------------------------------------------------ the cluster exchange
 * (XC = 1: one group = one thread-block cluster, sm_90; rnn_persistent.cu has the host
 * side). Every thread of every CTA of the cluster executes each barrier (.aligned), so
 * the barriers double as __syncthreads. Compiled to traps below sm_90: the host never
 * launches the cluster kernels there (it refuses the variant). */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define PERS_CLUSTER_PTX 1
#endif

__device__ __forceinline__ void cl_arrive()
{
#ifdef PERS_CLUSTER_PTX
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void cl_wait()
{
#ifdef PERS_CLUSTER_PTX
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#else
    __trap();
#endif
}

__device__ __forceinline__ void cl_sync()
{
    cl_arrive();
    cl_wait();
}

/* v into CTA `rank`'s shared memory at the offset p has in this CTA's (the layouts agree) */
__device__ __forceinline__ void cl_st(float *p, unsigned rank, float v)
{
#ifdef PERS_CLUSTER_PTX
    const unsigned a = (unsigned)__cvta_generic_to_shared(p);
    unsigned ra;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(ra) : "r"(a), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" ::"r"(ra), "f"(v) : "memory");
#else
    (void)p, (void)rank, (void)v;
    __trap();
#endif
}
#endif

/* Called by every thread after a __syncthreads that follows the CTA's writes of the
 * exchange: thread 0 makes them visible at gpu scope, then counts the CTA in. */
__device__ __forceinline__ void pers_signal(const pers_sync &y, int grp)
{
    if (threadIdx.x == 0) {
        __threadfence();
        atomicAdd(y.cnt + (int64_t)grp * PERS_CNT_STRIDE, 1u);
    }
}

/* Every thread: returns 1 once the group's counter reached target (the peers' data of
 * that exchange is then visible to the whole CTA), 0 when the launch is being abandoned
 * (a timeout here or in another CTA): the caller returns at once. */
__device__ int pers_wait(const pers_sync &y, const pers_shape &s, int grp, unsigned target, unsigned ordinal,
                         int *ctl)
{
    if (threadIdx.x == 0) {
        const unsigned *cnt = y.cnt + (int64_t)grp * PERS_CNT_STRIDE;
        int ok = 1;
        if (ld_acquire_u32(cnt) < target) {
            const unsigned long long t0 = global_ns();
            unsigned spins = 0;
            while (ld_acquire_u32(cnt) < target) {
                if ((++spins & 15u) != 0) continue;
                if (ld_relaxed_s32(y.abort)) {
                    ok = 0;
                    break;
                }
                if (global_ns() - t0 > s.timeout_ns) {
                    atomicExch(y.abort, 1);
                    if (atomicCAS(y.status, 0, PERS_ERR_TIMEOUT) == 0) {
                        y.status[1] = (int)ordinal;
                        y.status[2] = (int)blockIdx.x;
                    }
                    ok = 0;
                    break;
                }
                if (spins > 4096) __nanosleep(128); /* a long wait: something is wrong, poll gently */
            }
        }
        __threadfence();
        ctl[0] = ok;
    }
    __syncthreads();
    return ctl[0];
}

/* ------------------------------------------------------------------ the products */

/* Z[r][col] (row stride ldz) = sum_k AT[k][r] * Us[k][col], cols [c0, c1), all RP rows
 * (in tiles of 8); AT is (u, RP) float32. Columns are split over the threads, and K over
 * KS thread sets when the columns alone leave threads idle (partials in red, summed in a
 * fixed order). Ends with a __syncthreads. */
template <typename T>
__device__ void prod_fwd(const pers_shape &s, const T *Us, const float *AT, int c0, int c1, float *red, float *Z)
{
    const int u = s.u, RP = s.RP, ldu = s.ldu, ncols = c1 - c0;
    int KS = 1;
    if (ncols < PERS_NT) {
        KS = PERS_NT / ncols;
        const int kmax = (u + 7) / 8;
        if (KS > kmax) KS = kmax;
        if (KS < 1) KS = 1;
    }
    const int Kc = (u + KS - 1) / KS;
    for (int rt = 0; rt < RP; rt += 8) {
        for (int item = threadIdx.x; item < ncols * KS; item += PERS_NT) {
            const int cc = item % ncols, ks = item / ncols, col = c0 + cc;
            const int k0 = ks * Kc, k1 = min(u, k0 + Kc);
            float acc[8];
#pragma unroll
            for (int r = 0; r < 8; r++) acc[r] = 0.0f;
            for (int k = k0; k < k1; k++) {
                const float w = gc_to_f(Us[(int64_t)k * ldu + col]);
                const float4 a = *(const float4 *)(AT + k * RP + rt);
                const float4 b = *(const float4 *)(AT + k * RP + rt + 4);
                acc[0] = fmaf(a.x, w, acc[0]), acc[1] = fmaf(a.y, w, acc[1]);
                acc[2] = fmaf(a.z, w, acc[2]), acc[3] = fmaf(a.w, w, acc[3]);
                acc[4] = fmaf(b.x, w, acc[4]), acc[5] = fmaf(b.y, w, acc[5]);
                acc[6] = fmaf(b.z, w, acc[6]), acc[7] = fmaf(b.w, w, acc[7]);
            }
            if (KS == 1) {
#pragma unroll
                for (int r = 0; r < 8; r++) Z[(rt + r) * s.GCP + col] = acc[r];
            } else {
#pragma unroll
                for (int r = 0; r < 8; r++) red[(ks * 8 + r) * ncols + cc] = acc[r];
            }
        }
        if (KS > 1) {
            __syncthreads();
            for (int i = threadIdx.x; i < 8 * ncols; i += PERS_NT) {
                const int r = i / ncols, cc = i - r * ncols;
                float v = red[r * ncols + cc];
                for (int ks = 1; ks < KS; ks++) v += red[(ks * 8 + r) * ncols + cc];
                Z[(rt + r) * s.GCP + c0 + cc] = v;
            }
        }
        __syncthreads(); /* Z complete; red free for the next tile */
    }
}

/* out[r * u + j] (global, r < nr) = sum over cols [c0, c1) of ZT[col][r] * Us[j][col],
 * every j < u: this CTA's partial of dz . U^T. ZT is (GCP, RP) float32. Threads over j,
 * the columns split over KS thread sets when u alone leaves threads idle. Ends with a
 * __syncthreads (the CTA's global writes are then ordered before a pers_signal). */
/* one element of a CTA's partial dh (row r, unit j): flags: into the global exchange
 * buffer out (row stride u); cluster: into the owner CTA's receive buffer out (local
 * address; slot [c][r][j - owner's first unit], rows RP apart, UC wide) */
template <int XC>
__device__ __forceinline__ void bwd_put(const pers_shape &s, float *out, int c, int r, int j, int owner, float v)
{
    if constexpr (XC) {
        cl_st(out + ((int64_t)c * s.RP + r) * s.UC + (j - owner * s.UC), (unsigned)owner, v);
    } else {
        (void)c, (void)owner;
        out[(int64_t)r * s.u + j] = v;
    }
}

template <typename T, int XC>
__device__ void prod_bwd(const pers_shape &s, const T *Us, const float *ZT, int c0, int c1, float *red,
                         float *out, int nr, int c)
{
    const int u = s.u, RP = s.RP, ldu = s.ldu, ncols = c1 - c0;
    int KS = 1;
    if (u < PERS_NT) {
        KS = PERS_NT / u;
        const int kmax = (ncols + 3) / 4;
        if (KS > kmax) KS = kmax;
        if (KS < 1) KS = 1;
    }
    const int Kc = (ncols + KS - 1) / KS;
    for (int rt = 0; rt < RP; rt += 8) {
        for (int item = threadIdx.x; item < u * KS; item += PERS_NT) {
            const int j = item % u, ks = item / u;
            const int q0 = c0 + ks * Kc, q1 = min(c1, q0 + Kc);
            float acc[8];
#pragma unroll
            for (int r = 0; r < 8; r++) acc[r] = 0.0f;
            const T *urow = Us + (int64_t)j * ldu;
            for (int q = q0; q < q1; q++) {
                const float w = gc_to_f(urow[q]);
                const float4 a = *(const float4 *)(ZT + q * RP + rt);
                const float4 b = *(const float4 *)(ZT + q * RP + rt + 4);
                acc[0] = fmaf(a.x, w, acc[0]), acc[1] = fmaf(a.y, w, acc[1]);
                acc[2] = fmaf(a.z, w, acc[2]), acc[3] = fmaf(a.w, w, acc[3]);
                acc[4] = fmaf(b.x, w, acc[4]), acc[5] = fmaf(b.y, w, acc[5]);
                acc[6] = fmaf(b.z, w, acc[6]), acc[7] = fmaf(b.w, w, acc[7]);
            }
            if (KS == 1) {
                const int owner = XC ? j / s.UC : 0;
#pragma unroll
                for (int r = 0; r < 8; r++)
                    if (rt + r < nr) bwd_put<XC>(s, out, c, rt + r, j, owner, acc[r]);
            } else {
#pragma unroll
                for (int r = 0; r < 8; r++) red[(ks * 8 + r) * u + j] = acc[r];
            }
        }
        if (KS > 1) {
            __syncthreads();
            for (int i = threadIdx.x; i < 8 * u; i += PERS_NT) {
                const int r = i / u, j = i - r * u;
                if (rt + r >= nr) continue;
                float v = red[r * u + j];
                for (int ks = 1; ks < KS; ks++) v += red[(ks * 8 + r) * u + j];
                bwd_put<XC>(s, out, c, rt + r, j, XC ? j / s.UC : 0, v);
            }
        }
        __syncthreads();
    }
}

/* AT[k][r] = src[r * u + k] for r < nr (the group's rows of an exchange buffer); (r, k)
 * of i advance by PERS_NT without a division per element */
__device__ __forceinline__ void load_rows_t(const pers_shape &s, const float *src, int nr, float *AT)
{
    const int u = s.u, n = nr * u, dr = PERS_NT / u, dk = PERS_NT - dr * u;
    int r = (int)threadIdx.x / u, k = (int)threadIdx.x - r * u;
    for (int i = threadIdx.x; i < n; i += PERS_NT) {
        AT[k * s.RP + r] = __ldcg(src + i);
        r += dr, k += dk;
        if (k >= u) k -= u, r++;
    }
}

template <typename T> __device__ __forceinline__ const T *cptr(const void *p) { return (const T *)p; }

/* ------------------------------------------------------------------ forward */

/* the step's inputs of this CTA (xw of its columns, mask of its rows) into shared memory */
template <typename T>
__device__ void fwd_stage(const pers_fwd_args &a, int t, int b0, int nr, int j0, int nu, float *xs, float *ms)
{
    const pers_shape &s = a.s;
    const T *xw = cptr<T>(a.xw);
    const int64_t Gu = (int64_t)s.G * s.u;
    for (int i = threadIdx.x; i < nr * s.GCP; i += PERS_NT) {
        const int r = i / s.GCP, col = i - r * s.GCP, g = col / s.UC, jj = col - g * s.UC;
        xs[i] = jj < nu ? gc_to_f(xw[((int64_t)(b0 + r) * s.T + t) * Gu + (int64_t)g * s.u + j0 + jj]) : 0.0f;
    }
    for (int r = threadIdx.x; r < nr; r += PERS_NT) ms[r] = a.mask ? a.mask[(int64_t)(b0 + r) * s.T + t] : 1.0f;
}

/* XC = 0: the flags exchange through global memory (a.y); XC = 1: the cluster exchange
 * through distributed shared memory (a.y unused; one group = one cluster of NC CTAs,
 * CTA c of the group = cluster rank c, as a 1-D cluster over a 1-D grid numbers them).
 *
 * Forward, cluster: h_t is written by each CTA straight into EVERY CTA's (its own too)
 * h buffer of parity (k+1)&1 (hb[0] / hb[1] = hb0 / hb1: the transposed [k][RP] operand
 * layout, so there is no copy: the step reads hT = hb[k&1]); reset_before's r*h goes the
 * same way into rhT
 * (one buffer). Barriers per step, the same sequence in every CTA: [X_k: after the r*h
 * writes] (reset_before only), then H_k after the h writes (k < T-1), plus one at the
 * start (after the initialisation, before any remote write: the peers' shared memory
 * exists and their zeroing is done) and one at the end (no CTA exits while a peer may
 * still write into it). Why this is race-free:
 * - hb[p] is written in step k (p = (k+1)&1) after the writer passed H_{k-1} (or the
 *   start barrier for k = 0); every read of hb[p] by its owner was in step k-1 (the
 *   products, the r*h and the gate loops), all before the owner's arrive at H_{k-1}.
 *   The data is read in step k+1, after H_k, which follows every writer's writes.
 * - rhT is written in step k before X_k, read between X_k and H_k (the products), and
 *   written again in step k+1 only after H_k (H_{T-1} does not exist, but there is no
 *   step T). */
template <typename T, int XC = 0>
__global__ void __launch_bounds__(PERS_NT, 1) rnn_pers_fwd(pers_fwd_args a)
{
    PERS_SMEM_DECL;
    const pers_shape s = a.s;
    const int grp = blockIdx.x / s.NC, c = blockIdx.x - grp * s.NC;
    const int b0 = grp * s.R, nr = min(s.R, s.B - b0);
    const int j0 = c * s.UC, nu = min(s.UC, s.u - j0);
    const int u = s.u, UC = s.UC, GCP = s.GCP, RP = s.RP;
    const int64_t Gu = (int64_t)s.G * u;
    const int before = s.cell == GC_RNN_GRU_RESET_BEFORE;
    T *Us = (T *)(smem + s.o_us);
    float *hT = (float *)(smem + s.o_a), *rhT = (float *)(smem + s.o_b), *red = (float *)(smem + s.o_red);
    float *zs = (float *)(smem + s.o_z), *xs = (float *)(smem + s.o_x);
    float *hs = (float *)(smem + s.o_s0), *cs = (float *)(smem + s.o_s1), *es = (float *)(smem + s.o_s2);
    float *ms = (float *)(smem + s.o_m), *bhs = (float *)(smem + s.o_bh);
    int *ctl = (int *)(smem + s.o_ctl);
    float *const hb0 = hT, *const hb1 = XC ? (float *)(smem + s.o_h1) : hT; /* (no array: no stack) */
    const T *U = cptr<T>(a.U), *h0 = cptr<T>(a.h0), *c0 = cptr<T>(a.c0), *bh = cptr<T>(a.bh);
    T *out = (T *)a.out, *save = (T *)a.save;

    /* the slice of U: Us[k][g*UC + jj] = U[k][g*u + j0 + jj] (0 past the CTA's units) */
    for (int i = threadIdx.x; i < u * GCP; i += PERS_NT) {
        const int k = i / GCP, col = i - k * GCP, g = col / UC, jj = col - g * UC;
        Us[(int64_t)k * s.ldu + col] = jj < nu ? U[(int64_t)k * Gu + (int64_t)g * u + j0 + jj] : gc_from_f<T>(0.0f);
    }
    for (int col = threadIdx.x; col < GCP; col += PERS_NT) {
        const int g = col / UC, jj = col - g * UC;
        bhs[col] = (bh && jj < nu) ? gc_to_f(bh[(int64_t)g * u + j0 + jj]) : 0.0f;
    }
    for (int i = threadIdx.x; i < u * RP; i += PERS_NT) {
        hT[i] = 0.0f;
        if (XC) hb1[i] = 0.0f;
        if (before) rhT[i] = 0.0f;
    }
    for (int i = threadIdx.x; i < RP * GCP; i += PERS_NT) zs[i] = 0.0f;
    __syncthreads();
    /* the initial state: every unit of the group's rows (h0 is an input all CTAs read) */
    for (int i = threadIdx.x; i < nr * u; i += PERS_NT) {
        const int r = i / u, k = i - r * u;
        hT[k * RP + r] = h0 ? gc_to_f(h0[(int64_t)(b0 + r) * u + k]) : 0.0f;
    }
    for (int i = threadIdx.x; i < nr * UC; i += PERS_NT) {
        const int r = i / UC, jj = i - r * UC;
        const int64_t o = (int64_t)(b0 + r) * u + j0 + jj;
        hs[i] = (h0 && jj < nu) ? gc_to_f(h0[o]) : 0.0f;
        cs[i] = (c0 && jj < nu) ? gc_to_f(c0[o]) : 0.0f;
        es[i] = 0.0f;
    }
    fwd_stage<T>(a, s.gb ? s.T - 1 : 0, b0, nr, j0, nu, xs, ms);
    if constexpr (XC) cl_sync(); /* the start barrier (a __syncthreads too) */
    else __syncthreads();

    unsigned ord = 0; /* exchanges signalled so far */
    const int64_t grow = (int64_t)b0 * u;
    for (int k = 0; k < s.T; k++) {
        const int t = s.gb ? s.T - 1 - k : k;
        const int last = k == s.T - 1;
        if constexpr (XC) {
            hT = (k & 1) ? hb1 : hb0; /* H_{k-1} (or the start barrier) was passed */
        } else if (k > 0) {
            if (!pers_wait(a.y, s, grp, (unsigned)s.NC * ord, ord, ctl)) return;
            load_rows_t(s, a.y.xbuf + (ord & 1) * a.y.xstride + grow, nr, hT);
            __syncthreads();
        }
        if (before) {
            prod_fwd<T>(s, Us, hT, 0, 2 * UC, red, zs);
            float *dst = a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + grow;
            for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                const int r = i / nu, jj = i - r * nu, q = r * GCP + UC + jj;
                const float rg = gc_rnn_act_apply(s.ract, xs[q] + zs[q]);
                const float v = rg * hT[(j0 + jj) * RP + r];
                if constexpr (XC) {
                    for (int p = 0; p < s.NC; p++) cl_st(rhT + (j0 + jj) * RP + r, (unsigned)p, v);
                } else {
                    dst[(int64_t)r * u + j0 + jj] = v;
                }
            }
            if constexpr (XC) {
                cl_sync(); /* X_k */
            } else {
                __syncthreads();
                pers_signal(a.y, grp);
                ord++;
                if (!pers_wait(a.y, s, grp, (unsigned)s.NC * ord, ord, ctl)) return;
                load_rows_t(s, a.y.xbuf + (ord & 1) * a.y.xstride + grow, nr, rhT);
                __syncthreads();
            }
            prod_fwd<T>(s, Us, rhT, 2 * UC, 3 * UC, red, zs);
        } else {
            prod_fwd<T>(s, Us, hT, 0, GCP, red, zs);
        }
        /* the gates, the states, the outputs of (row, own unit) */
        float *hnext = XC ? ((k & 1) ? hb0 : hb1) : a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + grow;
        for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
            const int r = i / nu, jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
            const float *x = xs + r * GCP, *m = zs + r * GCP;
            const float hp = hT[j * RP + r];
            float hn, cn = 0.0f, sv[7];
            int S = 2;
            sv[0] = hp;
            switch (s.cell) {
            case GC_RNN_SIMPLE:
                hn = gc_rnn_act_apply(s.act, x[jj] + m[jj]);
                sv[1] = hn;
                break;
            case GC_RNN_LSTM: {
                const float cp = cs[si];
                const float ig = gc_rnn_act_apply(s.ract, x[jj] + m[jj]);
                const float fg = gc_rnn_act_apply(s.ract, x[UC + jj] + m[UC + jj]);
                const float gg = gc_rnn_act_apply(s.act, x[2 * UC + jj] + m[2 * UC + jj]);
                const float og = gc_rnn_act_apply(s.ract, x[3 * UC + jj] + m[3 * UC + jj]);
                cn = fg * cp + ig * gg;
                hn = og * gc_rnn_act_apply(s.act, cn);
                sv[1] = cp, sv[2] = ig, sv[3] = fg, sv[4] = gg, sv[5] = og, sv[6] = cn;
                S = 7;
                break;
            }
            case GC_RNN_GRU: {
                const float mz = m[jj] + bhs[jj], mr = m[UC + jj] + bhs[UC + jj];
                const float mh = m[2 * UC + jj] + bhs[2 * UC + jj];
                const float z = gc_rnn_act_apply(s.ract, x[jj] + mz), rg = gc_rnn_act_apply(s.ract, x[UC + jj] + mr);
                const float hh = gc_rnn_act_apply(s.act, x[2 * UC + jj] + rg * mh);
                hn = z * hp + (1.0f - z) * hh;
                sv[1] = z, sv[2] = rg, sv[3] = hh, sv[4] = mh;
                S = 5;
                break;
            }
            default: { /* reset_before: m's h block is (r*h).U_h */
                const float z = gc_rnn_act_apply(s.ract, x[jj] + m[jj]);
                const float rg = gc_rnn_act_apply(s.ract, x[UC + jj] + m[UC + jj]);
                const float hh = gc_rnn_act_apply(s.act, x[2 * UC + jj] + m[2 * UC + jj]);
                hn = z * hp + (1.0f - z) * hh;
                sv[1] = z, sv[2] = rg, sv[3] = hh, sv[4] = rg * hp;
                S = 5;
                break;
            }
            }
            const int64_t o = ((int64_t)(b0 + r) * s.T + t) * u + j;
            if (save)
                for (int q = 0; q < S; q++) save[q * s.blk + o] = gc_from_f<T>(sv[q]);
            float ev = es[si], hv = hp;
            if (ms[r] != 0.0f) {
                hv = hn;
                if (s.cell == GC_RNN_LSTM) cs[si] = cn;
                ev = hn;
            } else if (s.zo) {
                ev = 0.0f;
            }
            es[si] = ev;
            hs[si] = hv;
            if (s.seq) out[((int64_t)(b0 + r) * s.T + k) * u + j] = gc_from_f<T>(ev);
            if (!last) {
                if constexpr (XC) {
                    for (int p = 0; p < s.NC; p++) cl_st(hnext + j * RP + r, (unsigned)p, hv);
                } else {
                    hnext[(int64_t)r * u + j] = hv;
                }
            }
        }
        if constexpr (XC) {
            if (!last) {
                cl_arrive(); /* H_k: the h writes are released; stage while the peers finish */
                __syncthreads(); /* every thread's gate loop read xs / ms before they are restaged */
                fwd_stage<T>(a, s.gb ? s.T - 2 - k : k + 1, b0, nr, j0, nu, xs, ms);
                cl_wait(); /* H_k complete: the next h is in hb[(k+1)&1], the staging visible */
            } else {
                __syncthreads();
            }
            continue;
        }
        __syncthreads();
        if (!last) {
            pers_signal(a.y, grp);
            ord++;
            fwd_stage<T>(a, s.gb ? s.T - 2 - k : k + 1, b0, nr, j0, nu, xs, ms);
            /* (the next step's first barrier orders the staging before its use) */
        }
    }
    T *hTo = (T *)a.hT, *cTo = (T *)a.cT;
    for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
        const int r = i / nu, jj = i - r * nu, si = r * UC + jj;
        const int64_t o = (int64_t)(b0 + r) * u + j0 + jj;
        if (!s.seq) out[o] = gc_from_f<T>(es[si]);
        if (hTo) hTo[o] = gc_from_f<T>(hs[si]);
        if (cTo) cTo[o] = gc_from_f<T>(cs[si]);
    }
    if constexpr (XC) cl_sync(); /* the end barrier: no peer writes into this CTA any more */
}

/* ------------------------------------------------------------------ backward */

/* the step's inputs of (row, own unit): every save block, dy (sequences), the mask */
template <typename T>
__device__ void bwd_stage(const pers_bwd_args &a, int k, int b0, int nr, int j0, int nu, float *ss, float *dys,
                          float *ms)
{
    const pers_shape &s = a.s;
    const int t = s.gb ? s.T - 1 - k : k, UC = s.UC, n = nr * UC;
    const T *save = cptr<T>(a.save), *dy = cptr<T>(a.dy);
    for (int i = threadIdx.x; i < n; i += PERS_NT) {
        const int r = i / UC, jj = i - r * UC;
        if (jj >= nu) continue;
        const int64_t b = b0 + r, o = (b * s.T + t) * s.u + j0 + jj;
        for (int q = 0; q < s.nsave; q++) ss[q * s.RP * UC + i] = gc_to_f(save[q * s.blk + o]);
        dys[i] = (s.seq && dy) ? gc_to_f(dy[(b * s.T + k) * s.u + j0 + jj]) : 0.0f;
    }
    for (int r = threadIdx.x; r < nr; r += PERS_NT) ms[r] = a.mask ? a.mask[(int64_t)(b0 + r) * s.T + t] : 1.0f;
}

/* XC as for rnn_pers_fwd. Backward, cluster: each CTA writes its partial of every unit
 * j straight into the receive buffer of j's owner CTA (rx[parity], slot [c][r][jj]);
 * parity = the exchange ordinal's, one barrier per exchange (E_o: after the writes of
 * exchange o, before its reads), the same sequence in every CTA, plus the start and end
 * barriers. Race-free: the writes of exchange o+2 (parity of o) come after the writer
 * passed E_{o+1}; every read of exchange o (the d(r*h) or the dh sums) precedes its
 * reader's arrive at E_{o+1} (the next exchange's writes come after those reads). */
template <typename T, int XC = 0>
__global__ void __launch_bounds__(PERS_NT, 1) rnn_pers_bwd(pers_bwd_args a)
{
    PERS_SMEM_DECL;
    const pers_shape s = a.s;
    const int grp = blockIdx.x / s.NC, c = blockIdx.x - grp * s.NC;
    const int b0 = grp * s.R, nr = min(s.R, s.B - b0);
    const int j0 = c * s.UC, nu = min(s.UC, s.u - j0);
    const int u = s.u, UC = s.UC, GCP = s.GCP, RP = s.RP, NC = s.NC;
    const int64_t Gu = (int64_t)s.G * u, B = s.B;
    const int before = s.cell == GC_RNN_GRU_RESET_BEFORE;
    T *Us = (T *)(smem + s.o_us);
    float *dzT = (float *)(smem + s.o_a), *red = (float *)(smem + s.o_red), *ss = (float *)(smem + s.o_z);
    float *dys = (float *)(smem + s.o_x);
    float *dh = (float *)(smem + s.o_s0), *dc = (float *)(smem + s.o_s1), *de = (float *)(smem + s.o_s2);
    float *dd = (float *)(smem + s.o_s3), *ms = (float *)(smem + s.o_m);
    int *ctl = (int *)(smem + s.o_ctl);
    float *rx = (float *)(smem + s.o_rx); /* cluster: 2 x NC x RP x UC */
    const int64_t rxs = (int64_t)NC * RP * UC;
    const T *U = cptr<T>(a.U), *dy = cptr<T>(a.dy), *dhT = cptr<T>(a.dhT), *dcT = cptr<T>(a.dcT);
    T *dxw = (T *)a.dxw, *dm = (T *)a.dm;
    const int PS = RP * UC; /* one block of ss */

    for (int i = threadIdx.x; i < u * GCP; i += PERS_NT) {
        const int k = i / GCP, col = i - k * GCP, g = col / UC, jj = col - g * UC;
        Us[(int64_t)k * s.ldu + col] = jj < nu ? U[(int64_t)k * Gu + (int64_t)g * u + j0 + jj] : gc_from_f<T>(0.0f);
    }
    for (int i = threadIdx.x; i < GCP * RP; i += PERS_NT) dzT[i] = 0.0f;
    for (int i = threadIdx.x; i < nr * UC; i += PERS_NT) {
        const int r = i / UC, jj = i - r * UC;
        const int64_t o = (int64_t)(b0 + r) * u + j0 + jj;
        const int own = jj < nu;
        dh[i] = (dhT && own) ? gc_to_f(dhT[o]) : 0.0f;
        dc[i] = (dcT && own) ? gc_to_f(dcT[o]) : 0.0f;
        de[i] = (!s.seq && dy && own) ? gc_to_f(dy[o]) : 0.0f;
        dd[i] = 0.0f;
    }
    bwd_stage<T>(a, s.T - 1, b0, nr, j0, nu, ss, dys, ms);
    if constexpr (XC) cl_sync(); /* the start barrier */
    else __syncthreads();

    unsigned ord = 0;
    for (int k = s.T - 1; k >= 0; k--) {
        const int t = s.gb ? s.T - 1 - k : k;
        /* phase A: the gate gradients of (row, own unit) */
        for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
            const int r = i / nu, jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
            const int64_t row = ((int64_t)(b0 + r) * s.T + t) * Gu;
            const float dev = de[si] + dys[si];
            if (ms[r] == 0.0f) {
                dd[si] = dh[si];
                de[si] = s.zo ? 0.0f : dev;
                for (int q = 0; q < s.G; q++) {
                    dzT[(q * UC + jj) * RP + r] = 0.0f;
                    dxw[row + (int64_t)q * u + j] = gc_from_f<T>(0.0f);
                    if (dm) dm[row + (int64_t)q * u + j] = gc_from_f<T>(0.0f);
                }
                continue;
            }
            const float g = dh[si] + dev;
            de[si] = 0.0f;
            const float hp = ss[si];
            switch (s.cell) {
            case GC_RNN_SIMPLE: {
                const float da = g * gc_rnn_act_dout(s.act, ss[PS + si]);
                dzT[jj * RP + r] = da;
                dxw[row + j] = gc_from_f<T>(da);
                dd[si] = 0.0f;
                break;
            }
            case GC_RNN_LSTM: {
                const float cp = ss[PS + si], ig = ss[2 * PS + si], fg = ss[3 * PS + si];
                const float gg = ss[4 * PS + si], og = ss[5 * PS + si], cn = ss[6 * PS + si];
                const float ac = gc_rnn_act_apply(s.act, cn);
                const float dcn = dc[si] + g * og * gc_rnn_act_dout(s.act, ac);
                const float v0 = dcn * gg * gc_rnn_act_dout(s.ract, ig), v1 = dcn * cp * gc_rnn_act_dout(s.ract, fg);
                const float v2 = dcn * ig * gc_rnn_act_dout(s.act, gg), v3 = g * ac * gc_rnn_act_dout(s.ract, og);
                dzT[jj * RP + r] = v0, dzT[(UC + jj) * RP + r] = v1;
                dzT[(2 * UC + jj) * RP + r] = v2, dzT[(3 * UC + jj) * RP + r] = v3;
                dxw[row + j] = gc_from_f<T>(v0), dxw[row + u + j] = gc_from_f<T>(v1);
                dxw[row + 2 * u + j] = gc_from_f<T>(v2), dxw[row + 3 * u + j] = gc_from_f<T>(v3);
                dc[si] = dcn * fg;
                dd[si] = 0.0f;
                break;
            }
            default: { /* GRU, both variants */
                const float zg = ss[PS + si], rg = ss[2 * PS + si], hh = ss[3 * PS + si], s4 = ss[4 * PS + si];
                const float da = g * (1.0f - zg) * gc_rnn_act_dout(s.act, hh);
                const float vz = g * (hp - hh) * gc_rnn_act_dout(s.ract, zg);
                dzT[jj * RP + r] = vz;
                dxw[row + j] = gc_from_f<T>(vz);
                dd[si] = g * zg;
                dxw[row + 2 * u + j] = gc_from_f<T>(da);
                if (s.cell == GC_RNN_GRU) {
                    const float vr = da * s4 * gc_rnn_act_dout(s.ract, rg);
                    dzT[(UC + jj) * RP + r] = vr;
                    dzT[(2 * UC + jj) * RP + r] = da * rg;
                    dxw[row + u + j] = gc_from_f<T>(vr);
                    if (dm) {
                        dm[row + j] = gc_from_f<T>(vz);
                        dm[row + u + j] = gc_from_f<T>(vr);
                        dm[row + 2 * u + j] = gc_from_f<T>(da * rg);
                    }
                } else {
                    dzT[(2 * UC + jj) * RP + r] = da; /* the r block: after d(r*h) below */
                }
                break;
            }
            }
        }
        __syncthreads();
        if (before) {
            /* d(r*h) = da . U_h^T, exchanged, then the r gate and the r*h part of dd */
            float *dst = XC ? rx + ((ord + 1) & 1) * rxs
                            : a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + ((int64_t)c * B + b0) * u;
            prod_bwd<T, XC>(s, Us, dzT, 2 * UC, 3 * UC, red, dst, nr, c);
            ord++;
            if constexpr (XC) {
                cl_sync();
            } else {
                pers_signal(a.y, grp);
                if (!pers_wait(a.y, s, grp, (unsigned)NC * ord, ord, ctl)) return;
            }
            const float *src = a.y.xbuf + (ord & 1) * a.y.xstride, *rsrc = rx + (ord & 1) * rxs;
            for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                const int r = i / nu, jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
                if (ms[r] == 0.0f) continue;
                float drh = 0.0f;
                for (int cc = 0; cc < NC; cc++)
                    drh += XC ? rsrc[(cc * RP + r) * UC + jj] : __ldcg(src + ((int64_t)cc * B + b0 + r) * u + j);
                const float hp = ss[si], rg = ss[2 * PS + si];
                const float vr = drh * hp * gc_rnn_act_dout(s.ract, rg);
                dzT[(UC + jj) * RP + r] = vr;
                dxw[((int64_t)(b0 + r) * s.T + t) * Gu + u + j] = gc_from_f<T>(vr);
                dd[si] += drh * rg;
            }
            __syncthreads();
        }
        /* phase B: this CTA's partial of dh_{t-1} over every unit, exchanged and summed */
        float *dst = XC ? rx + ((ord + 1) & 1) * rxs
                        : a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + ((int64_t)c * B + b0) * u;
        prod_bwd<T, XC>(s, Us, dzT, 0, before ? 2 * UC : GCP, red, dst, nr, c);
        ord++;
        if constexpr (XC) {
            cl_arrive(); /* E_ord: released (prod_bwd ended with a __syncthreads: the stage is free) */
            if (k > 0) bwd_stage<T>(a, k - 1, b0, nr, j0, nu, ss, dys, ms);
            cl_wait();
        } else {
            pers_signal(a.y, grp);
            if (k > 0) bwd_stage<T>(a, k - 1, b0, nr, j0, nu, ss, dys, ms);
            if (!pers_wait(a.y, s, grp, (unsigned)NC * ord, ord, ctl)) return;
        }
        const float *src = a.y.xbuf + (ord & 1) * a.y.xstride, *rsrc = rx + (ord & 1) * rxs;
        for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
            const int r = i / nu, jj = i - r * nu, si = r * UC + jj;
            float acc = 0.0f;
            for (int cc = 0; cc < NC; cc++)
                acc += XC ? rsrc[(cc * RP + r) * UC + jj]
                          : __ldcg(src + ((int64_t)cc * B + b0 + r) * u + j0 + jj);
            dh[si] = dd[si] + acc;
        }
        __syncthreads();
    }
    T *dh0 = (T *)a.dh0, *dc0 = (T *)a.dc0;
    for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
        const int r = i / nu, jj = i - r * nu, si = r * UC + jj;
        const int64_t o = (int64_t)(b0 + r) * u + j0 + jj;
        if (dh0) dh0[o] = gc_from_f<T>(dh[si]);
        if (dc0) dc0[o] = gc_from_f<T>(dc[si]);
    }
    if constexpr (XC) cl_sync(); /* the end barrier */
}

/* ------------------------------------------------------------------ the layout (host) */

/* NC CTAs per group: the fewest (powers of two up to PERS_MAX_NC, at most u) whose slice
 * of U stays under PERS_US_TARGET, else the most; want_nc > 0 asks for that many instead
 * (the host emulation's grids). UC units each (NC = ceil(u / UC), so no CTA is empty),
 * GCP = G * UC columns; ldu = the slice's row stride in elements, an odd number of 32-bit
 * words (conflict-free row reads in the forward and column reads in the backward). */
static inline void pers_pick_nc(pers_shape *s, size_t ts, int want_nc)
{
    const int u = s->u, G = s->G;
    for (int nc = want_nc > 0 ? want_nc : 1; nc <= (want_nc > 0 ? want_nc : PERS_MAX_NC); nc *= 2) {
        const int n = nc < u ? nc : u;
        s->UC = (u + n - 1) / n;
        s->NC = (u + s->UC - 1) / s->UC;
        const size_t words = ((size_t)G * s->UC * ts + 3) / 4;
        const size_t w = words % 2 ? words : words + 1;
        s->ldu = (int)(w * 4 / ts);
        if (n == u || (size_t)u * G * s->UC * ts <= PERS_US_TARGET) break; /* unpadded */
    }
    s->GCP = G * s->UC;
}

static inline unsigned align16(size_t b) { return (unsigned)((b + 15) & ~(size_t)15); }

/* the shared-memory layout for R rows (0 when it does not fit in 32 bits) */
static inline size_t layout(pers_shape *s, int bwd, size_t ts, int xc = 0)
{
    s->RP = (s->R + 7) / 8 * 8;
    const size_t RP = (size_t)s->RP, u = (size_t)s->u, UC = (size_t)s->UC, GCP = (size_t)s->GCP;
    size_t o = 0;
    s->o_us = 0;
    o += align16(u * (size_t)s->ldu * ts);
    s->o_a = (unsigned)o;
    o += align16((bwd ? GCP : u) * RP * 4);
    s->o_b = (unsigned)o;
    if (!bwd && s->cell == GC_RNN_GRU_RESET_BEFORE) o += align16(u * RP * 4);
    s->o_red = (unsigned)o;
    o += align16(8 * PERS_NT * 4);
    s->o_z = (unsigned)o;
    o += align16(bwd ? (size_t)s->nsave * RP * UC * 4 : RP * GCP * 4);
    s->o_x = (unsigned)o;
    o += align16(bwd ? RP * UC * 4 : RP * GCP * 4);
    s->o_s0 = (unsigned)o;
    o += align16(RP * UC * 4);
    s->o_s1 = (unsigned)o;
    o += align16(RP * UC * 4);
    s->o_s2 = (unsigned)o;
    o += align16(RP * UC * 4);
    s->o_s3 = (unsigned)o;
    if (bwd) o += align16(RP * UC * 4);
    s->o_m = (unsigned)o;
    o += align16(RP * 4);
    s->o_bh = (unsigned)o;
    if (!bwd) o += align16(GCP * 4);
    s->o_ctl = (unsigned)o;
    o += 16;
    s->o_h1 = s->o_rx = 0;
    if (xc && !bwd) { /* the second h buffer (the first is o_a) */
        s->o_h1 = (unsigned)align16(o);
        o = s->o_h1 + align16(u * RP * 4);
    } else if (xc) { /* two receive buffers of NC partials */
        s->o_rx = (unsigned)align16(o);
        o = s->o_rx + 2 * align16((size_t)s->NC * RP * UC * 4);
    }
    return o;
}

} // namespace

#endif
