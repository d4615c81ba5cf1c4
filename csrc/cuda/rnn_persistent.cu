/* rnn_persistent.cu -- the recurrence of SimpleRNN / LSTM / GRU (both reset variants) as
 * ONE kernel launch for all T steps, forward and backward (BPTT); rnn.cu uses it for the
 * shapes it takes (gc_rnn_persistent_fwd / _bwd, rnn_persistent.cuh) and its stepwise
 * loop otherwise. The arithmetic is the stepwise path's (gpucmp.h has the interface, the
 * save layout and the masking rules): float32 FFMA accumulation, expf / tanhf, no TF32.
 *
 * Why it is built this way: the recurrence is latency bound (a launch per step costs more
 * than a step's work), and U is small enough to stay on chip for the whole launch if it
 * is spread over a few CTAs.
 * - Grid = groups x NC CTAs. Batch rows are independent, so each group owns R rows and
 *   never talks to another group. Inside a group, CTA c owns UC hidden units and ALL the
 *   gate columns of those units (U's gate-block columns are permuted at load), so the
 *   cell update is CTA-local; its slice of U, u x (G*UC) in the storage type, sits in
 *   shared memory (rows padded to an odd number of 32-bit words: conflict-free both for
 *   the forward's row reads and the backward's column reads).
 * - Forward step: z = h_{t-1} (R x u, float32, shared) . U_slice, the fused gate math
 *   and masks, y / save writes; the CTA's h slice goes to an exchange buffer in global
 *   memory (L2), then one release (fence + atomicAdd) on the group's step counter;
 *   peers poll it with ld.acquire.gpu until it reaches NC x the exchange's ordinal and
 *   read the group's whole h. GRU reset_before exchanges twice per step (h, then r*h).
 * - Backward step: each CTA computes its units' gate gradients dz from the saved
 *   activations, then its partial dh_{t-1} over ALL u units, dz_own . U_slice^T (the same
 *   slice as the forward), and exchanges these partials; every CTA sums the NC partials
 *   of its own units in CTA order (deterministic) and adds the direct part. reset_before
 *   exchanges twice (d(r*h), then dh). dxw / dm / dh0 / dc0 are written as rnn.cu does.
 * - Exchange buffers alternate by the exchange ordinal's parity: a CTA writes ordinal
 *   o + 2's data only after waiting for ordinal o + 1, which every peer signals after it
 *   has read ordinal o's, so two buffers suffice whatever the exchanges per step.
 * - Co-residency (the flags would deadlock otherwise): a cooperative launch
 *   (cudaLaunchAttributeCooperative, valid in stream capture: a cooperative kernel node),
 *   whose grid is sized from the occupancy query x the SMs the backend reports (its
 *   green-context grant under GPUCMP_CUDA_SMS), so the driver refuses any grid that could
 *   not all be resident. Every wait is bounded in time (globaltimer, default 2 s,
 *   GPUCMP_RNN_TIMEOUT_MS): a CTA that gives up sets the launch's abort word (every CTA
 *   then leaves) and the backend's error flag slots 4-6 (code, exchange ordinal, block);
 *   a call outside capture resets the slots before and reads them after (one stream
 *   sync, as the embedding's bad-index check does) and returns a clear error.
 * - Graph capture: counters and the abort word live in the backend workspace and are
 *   zeroed by a cudaMemsetAsync before each launch; nothing is allocated once the
 *   workspace is sized (an eager call of the same shape sizes it).
 * Not taken (stepwise instead): recurrent dropout (rmask), a slice of U that does not fit
 * the per-block shared memory with NC <= 16, a grid that cannot be co-resident, a device
 * without cooperative launch. */
#include "rnn_persistent.cuh"

#include "gpucmp_rnn_act.h"
#include "gpucmp_variants.h"

#include <limits.h>
#include <stdlib.h>

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
template <typename T>
__device__ void prod_bwd(const pers_shape &s, const T *Us, const float *ZT, int c0, int c1, float *red,
                         float *out, int nr)
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
#pragma unroll
                for (int r = 0; r < 8; r++)
                    if (rt + r < nr) out[(int64_t)(rt + r) * u + j] = acc[r];
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
                out[(int64_t)(rt + r) * u + j] = v;
            }
        }
        __syncthreads();
    }
}

/* AT[k][r] = src[r * u + k] for r < nr (the group's rows of an exchange buffer) */
__device__ __forceinline__ void load_rows_t(const pers_shape &s, const float *src, int nr, float *AT)
{
    const int u = s.u, n = nr * u;
    for (int i = threadIdx.x; i < n; i += PERS_NT) {
        const int r = i / u, k = i - r * u;
        AT[k * s.RP + r] = __ldcg(src + i);
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

template <typename T>
__global__ void __launch_bounds__(PERS_NT) rnn_pers_fwd(pers_fwd_args a)
{
    extern __shared__ __align__(16) unsigned char smem[];
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
    __syncthreads();

    unsigned ord = 0; /* exchanges signalled so far */
    const int64_t grow = (int64_t)b0 * u;
    for (int k = 0; k < s.T; k++) {
        const int t = s.gb ? s.T - 1 - k : k;
        const int last = k == s.T - 1;
        if (k > 0) {
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
                dst[(int64_t)r * u + j0 + jj] = rg * hT[(j0 + jj) * RP + r];
            }
            __syncthreads();
            pers_signal(a.y, grp);
            ord++;
            if (!pers_wait(a.y, s, grp, (unsigned)s.NC * ord, ord, ctl)) return;
            load_rows_t(s, a.y.xbuf + (ord & 1) * a.y.xstride + grow, nr, rhT);
            __syncthreads();
            prod_fwd<T>(s, Us, rhT, 2 * UC, 3 * UC, red, zs);
        } else {
            prod_fwd<T>(s, Us, hT, 0, GCP, red, zs);
        }
        /* the gates, the states, the outputs of (row, own unit) */
        float *hnext = a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + grow;
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
            if (!last) hnext[(int64_t)r * u + j] = hv;
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

template <typename T>
__global__ void __launch_bounds__(PERS_NT) rnn_pers_bwd(pers_bwd_args a)
{
    extern __shared__ __align__(16) unsigned char smem[];
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
    __syncthreads();

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
            float *dst = a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + ((int64_t)c * B + b0) * u;
            prod_bwd<T>(s, Us, dzT, 2 * UC, 3 * UC, red, dst, nr);
            pers_signal(a.y, grp);
            ord++;
            if (!pers_wait(a.y, s, grp, (unsigned)NC * ord, ord, ctl)) return;
            const float *src = a.y.xbuf + (ord & 1) * a.y.xstride;
            for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                const int r = i / nu, jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
                if (ms[r] == 0.0f) continue;
                float drh = 0.0f;
                for (int cc = 0; cc < NC; cc++) drh += __ldcg(src + ((int64_t)cc * B + b0 + r) * u + j);
                const float hp = ss[si], rg = ss[2 * PS + si];
                const float vr = drh * hp * gc_rnn_act_dout(s.ract, rg);
                dzT[(UC + jj) * RP + r] = vr;
                dxw[((int64_t)(b0 + r) * s.T + t) * Gu + u + j] = gc_from_f<T>(vr);
                dd[si] += drh * rg;
            }
            __syncthreads();
        }
        /* phase B: this CTA's partial of dh_{t-1} over every unit, exchanged and summed */
        float *dst = a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + ((int64_t)c * B + b0) * u;
        prod_bwd<T>(s, Us, dzT, 0, before ? 2 * UC : GCP, red, dst, nr);
        pers_signal(a.y, grp);
        ord++;
        if (k > 0) bwd_stage<T>(a, k - 1, b0, nr, j0, nu, ss, dys, ms);
        if (!pers_wait(a.y, s, grp, (unsigned)NC * ord, ord, ctl)) return;
        const float *src = a.y.xbuf + (ord & 1) * a.y.xstride;
        for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
            const int r = i / nu, jj = i - r * nu, si = r * UC + jj;
            float acc = 0.0f;
            for (int cc = 0; cc < NC; cc++) acc += __ldcg(src + ((int64_t)cc * B + b0 + r) * u + j0 + jj);
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
}

/* ------------------------------------------------------------------ host: the plan */

static unsigned align16(size_t b) { return (unsigned)((b + 15) & ~(size_t)15); }

/* the shared-memory layout for R rows (0 when it does not fit in 32 bits) */
static size_t layout(pers_shape *s, int bwd, size_t ts)
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
    return o;
}

static unsigned long long timeout_ns(void)
{
    static unsigned long long v; /* read once; a race only reads the variable twice */
    if (!v) {
        const char *e = getenv("GPUCMP_RNN_TIMEOUT_MS");
        long ms = e && *e ? strtol(e, NULL, 10) : 2000;
        if (ms < 1) ms = 1;
        v = (unsigned long long)ms * 1000000ull;
    }
    return v;
}

/* Fills the shape's grid choice for kernel `kern`: NC CTAs per group (the fewest, at most
 * 16, whose slice of U stays under PERS_US_TARGET, else 16), then R rows per group: as
 * many groups as the SMs hold one CTA each, more (up to the occupancy) only when that
 * leaves more than 8 rows per group. *grid = groups * NC. 0 + *why when not eligible. */
static int choose(const gc_backend *be, const void *kern, int bwd, size_t ts, pers_shape *s, int *grid,
                  size_t *smem_out, const char **why)
{
    const int u = s->u, G = s->G;
    int NC = 1, UC = u, ldu = 0;
    for (int nc = 1; nc <= PERS_MAX_NC && nc <= u; nc *= 2) {
        UC = (u + nc - 1) / nc;
        NC = (u + UC - 1) / UC;
        const size_t words = ((size_t)G * UC * ts + 3) / 4;
        const size_t w = words % 2 ? words : words + 1; /* odd: conflict-free row and column reads */
        ldu = (int)(w * 4 / ts);
        if ((size_t)u * ldu * ts <= PERS_US_TARGET) break;
    }
    s->NC = NC, s->UC = UC, s->GCP = G * UC, s->ldu = ldu;
    int dev = 0, phys = 0, coop = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&phys, cudaDevAttrMultiProcessorCount, dev) ||
        cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev)) {
        (void)cudaGetLastError();
        *why = "the device's attributes could not be read";
        return 0;
    }
    if (!coop) {
        *why = "the device has no cooperative launch";
        return 0;
    }
    int sms = gc_cuda_sm_count(be);
    if (sms <= 0 || sms > phys) sms = phys;
    const size_t optin = gc_cuda_smem_optin(be);
    const int B = s->B;
    int NG = sms / NC;
    if (NG < 1) NG = 1;
    if (NG > B) NG = B;
    s->R = (B + NG - 1) / NG;
    size_t smem = layout(s, bwd, ts);
    if (smem > optin || smem > (size_t)INT_MAX) {
        *why = "the slice of U and the group's states do not fit in one block's shared memory";
        return 0;
    }
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        *why = "the kernel's shared memory could not be raised to what it needs";
        return 0;
    }
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, PERS_NT, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        occ = 0;
    }
    if (occ < 1) {
        *why = "no block of the kernel fits on an SM";
        return 0;
    }
    if (s->R > 8 && occ > 1) { /* more groups, fewer rows each, where more blocks fit */
        pers_shape t = *s;
        int NG2 = (int)((int64_t)occ * sms / NC);
        if (NG2 > B) NG2 = B;
        t.R = (B + NG2 - 1) / NG2;
        const size_t smem2 = layout(&t, bwd, ts);
        int occ2 = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ2, kern, PERS_NT, smem2) != cudaSuccess) {
            (void)cudaGetLastError();
            occ2 = 0;
        }
        if (occ2 >= 1 && (int64_t)((B + t.R - 1) / t.R) * NC <= (int64_t)occ2 * sms) {
            *s = t;
            smem = smem2;
            occ = occ2;
        }
    }
    NG = (B + s->R - 1) / s->R;
    if ((int64_t)NG * NC > (int64_t)occ * sms) {
        *why = "the grid cannot be resident all at once on the backend's SMs";
        return 0;
    }
    *grid = NG * NC;
    *smem_out = smem;
    s->timeout_ns = timeout_ns();
    return 1;
}

/* Workspace: [counters + abort word: ctl bytes][2 exchange buffers]; zeroes the control
 * part on the stream; resets the error slots outside capture. */
static gc_status prepare(const gc_backend *be, int NG, int64_t xstride, pers_sync *y)
{
    const size_t ctl = ((size_t)NG * PERS_CNT_STRIDE + 64) * sizeof(unsigned);
    const size_t ctl_al = (ctl + 255) & ~(size_t)255;
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, ctl_al + 2 * (size_t)xstride * sizeof(float), &ws);
    if (st) return st;
    int32_t *flag = gc_cuda_err_flag(be);
    if (!flag) return gc_fail(GC_ERR_BACKEND, "rnn: the backend has no error flag");
    cudaStream_t str = gc_cuda_stream(be);
    GC_CUDA_TRY(cudaMemsetAsync(ws, 0, ctl, str));
    if (!gc_cuda_capturing(be)) GC_CUDA_TRY(cudaMemsetAsync(flag + PERS_ERR_SLOT, 0, 3 * sizeof(int32_t), str));
    y->cnt = (unsigned *)ws;
    y->abort = (int *)((unsigned *)ws + (size_t)NG * PERS_CNT_STRIDE);
    y->status = flag + PERS_ERR_SLOT;
    y->xbuf = (float *)((char *)ws + ctl_al);
    y->xstride = xstride;
    return GC_OK;
}

template <typename Args>
static gc_status launch(const gc_backend *be, void (*kern)(Args), Args args, int grid, size_t smem,
                        const char *what, int forced, int *ran, const char **why)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.gridDim = dim3((unsigned)grid, 1, 1);
    cfg.blockDim = dim3(PERS_NT, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = gc_cuda_stream(be);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kern, args);
    if (e == cudaErrorCooperativeLaunchTooLarge && !forced && !gc_cuda_capturing(be)) {
        (void)cudaGetLastError();
        *why = "the driver refused the grid as not co-resident";
        return GC_OK; /* *ran stays 0: the stepwise path runs (the workspace memset is harmless) */
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gc_fail(e == cudaErrorCooperativeLaunchTooLarge ? GC_ERR_UNSUPPORTED : GC_ERR_BACKEND,
                       "%s: the persistent kernel (grid %d x %d threads, %zu bytes of shared memory) did not "
                       "launch: %s",
                       what, grid, PERS_NT, smem, cudaGetErrorString(e));
    }
    *ran = 1;
    if (gc_cuda_capturing(be)) return GC_OK;
    /* the device status word, as the embedding's bad-index check reads its own */
    int32_t got[3] = {0, 0, 0};
    cudaStream_t str = gc_cuda_stream(be);
    GC_CUDA_TRY(cudaMemcpyAsync(got, gc_cuda_err_flag(be) + PERS_ERR_SLOT, sizeof got, cudaMemcpyDeviceToHost, str));
    GC_CUDA_TRY(cudaStreamSynchronize(str));
    if (got[0] == PERS_ERR_TIMEOUT)
        return gc_fail(GC_ERR_BACKEND,
                       "%s: the persistent recurrence stopped: block %d waited more than %llu ms for its group "
                       "at exchange %d (the blocks were not all running at once); the outputs are not valid "
                       "(cuda.rnn=stepwise avoids this kernel)",
                       what, (int)got[2], (unsigned long long)(timeout_ns() / 1000000ull), (int)got[1]);
    return GC_OK;
}

static const void *in_data(const gc_tensor *t) { return t && t->data ? t->data : NULL; }

static int common_checks(const gc_rnn_params *p, int64_t B, int64_t T, int64_t u, const void *rmask,
                         pers_shape *s, const char **why)
{
    if (rmask) {
        *why = "recurrent dropout (rmask) runs stepwise";
        return 0;
    }
    const int G = gc_rnn_gates(p->cell);
    if (G < 1 || B < 1 || T < 1 || u < 1 || B > INT_MAX / 2 || T > INT_MAX / 2 || u > 4096) {
        *why = "the sizes are outside what the persistent kernel indexes";
        return 0;
    }
    if ((int64_t)B * T * G * u > ((int64_t)1 << 40)) {
        *why = "the sizes are outside what the persistent kernel indexes";
        return 0;
    }
    *s = pers_shape();
    s->B = (int)B, s->T = (int)T, s->u = (int)u, s->G = G;
    s->cell = (int)p->cell, s->act = (int)p->act, s->ract = (int)p->recurrent_act;
    s->seq = p->sequences != 0, s->zo = p->zero_output_for_mask != 0, s->gb = p->go_backwards != 0;
    s->nsave = gc_rnn_save_blocks(p->cell);
    s->blk = B * T * u;
    return 1;
}

template <typename T>
static gc_status fwd_typed(const gc_backend *be, const gc_op_call *call, int forced, int *ran, const char **why)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *xw = call->in[0];
    pers_shape s;
    if (!common_checks(p, xw->shape[0], xw->shape[1], call->in[1]->shape[0], in_data(call->in[6]), &s, why))
        return GC_OK;
    int grid = 0;
    size_t smem = 0;
    if (!choose(be, (const void *)rnn_pers_fwd<T>, 0, sizeof(T), &s, &grid, &smem, why)) return GC_OK;
    pers_fwd_args a;
    a.s = s;
    gc_status st = prepare(be, grid / s.NC, (int64_t)s.B * s.u, &a.y);
    if (st) return st;
    a.xw = xw->data, a.U = call->in[1]->data, a.h0 = in_data(call->in[2]), a.c0 = in_data(call->in[3]);
    a.mask = (const float *)in_data(call->in[4]), a.bh = in_data(call->in[5]);
    a.out = call->out[0]->data, a.save = call->out[1] ? call->out[1]->data : NULL;
    a.hT = call->out[2] ? call->out[2]->data : NULL, a.cT = call->out[3] ? call->out[3]->data : NULL;
    return launch(be, rnn_pers_fwd<T>, a, grid, smem, "rnn_fwd", forced, ran, why);
}

template <typename T>
static gc_status bwd_typed(const gc_backend *be, const gc_op_call *call, int forced, int *ran, const char **why)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *save = call->in[4];
    pers_shape s;
    if (!common_checks(p, save->shape[1], save->shape[2], save->shape[3], in_data(call->in[6]), &s, why))
        return GC_OK;
    int grid = 0;
    size_t smem = 0;
    if (!choose(be, (const void *)rnn_pers_bwd<T>, 1, sizeof(T), &s, &grid, &smem, why)) return GC_OK;
    pers_bwd_args a;
    a.s = s;
    gc_status st = prepare(be, grid / s.NC, (int64_t)s.NC * s.B * s.u, &a.y);
    if (st) return st;
    a.dy = in_data(call->in[0]), a.dhT = in_data(call->in[1]), a.dcT = in_data(call->in[2]);
    a.U = call->in[3]->data, a.save = save->data, a.mask = (const float *)in_data(call->in[5]);
    a.dxw = call->out[0]->data, a.dm = call->out[1] ? call->out[1]->data : NULL;
    a.dh0 = call->out[2] ? call->out[2]->data : NULL, a.dc0 = call->out[3] ? call->out[3]->data : NULL;
    return launch(be, rnn_pers_bwd<T>, a, grid, smem, "rnn_bwd", forced, ran, why);
}

} // namespace

gc_status gc_rnn_persistent_fwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    *ran = 0;
    *why = NULL;
    const int forced = gc_variant_forced(GC_VP_CUDA_RNN) == GC_V_RNN_PERSISTENT;
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = fwd_typed<T>(be, call, forced, ran, why));
    return st;
}

gc_status gc_rnn_persistent_bwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    *ran = 0;
    *why = NULL;
    const int forced = gc_variant_forced(GC_VP_CUDA_RNN) == GC_V_RNN_PERSISTENT;
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(call->in[4]->dtype, T, st = bwd_typed<T>(be, call, forced, ran, why));
    return st;
}
