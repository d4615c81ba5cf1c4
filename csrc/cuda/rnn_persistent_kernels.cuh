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

namespace {

/* Phase timing for benchmarks/cuda/rnn_persistent_prof.cu only (GC_RNN_PROF): thread 0
 * of block 0 adds the clock64 cycles since its previous mark to its slot `slot` (a
 * constant: the 8 sums stay in registers, so a mark costs no memory round trip on the
 * step's chain) and PERS_PROF_END adds the sums to g_pers_prof[kind] (0 forward,
 * 1 backward) once at the kernel's end. Nothing in the library's build. */
#if defined(GC_RNN_PROF) && !defined(GC_RNN_EMU)
__device__ unsigned long long g_pers_prof[2][8];
#define PERS_PROF_START                                                                    \
    long long pers_t_ = clock64();                                                         \
    unsigned long long pers_acc_[8] = {0, 0, 0, 0, 0, 0, 0, 0}
#define PERS_PROF(kind, slot)                                                              \
    do {                                                                                   \
        if (blockIdx.x == 0 && threadIdx.x == 0) {                                         \
            const long long t_ = clock64();                                                \
            pers_acc_[slot] += (unsigned long long)(t_ - pers_t_);                         \
            pers_t_ = t_;                                                                  \
        }                                                                                  \
    } while (0)
#define PERS_PROF_END(kind)                                                                \
    do {                                                                                   \
        if (blockIdx.x == 0 && threadIdx.x == 0)                                           \
            for (int q_ = 0; q_ < 8; q_++) g_pers_prof[kind][q_] += pers_acc_[q_];         \
    } while (0)
#else
#define PERS_PROF_START
#define PERS_PROF(kind, slot) ((void)0)
#define PERS_PROF_END(kind) ((void)0)
#endif

/* ------------------------------------------------------------------ shapes */

/* n / d for 0 <= n < 2^31 and a divisor fixed for the launch: a multiply-high, an add and a
 * shift. GPUs have no integer divider (n / d with a run-time d is ~25 dependent
 * instructions) and the step loop splits flat indices in every phase. With sh = ceil(log2 d)
 * and mul = floor(2^32 (2^sh - d) / d) + 1, (umulhi(n, mul) + n) >> sh == n / d (the
 * round-up method of Granlund and Montgomery); pers_div_of fills it on the host. */
struct pers_div {
    int d;
    unsigned mul, sh;
};

static inline pers_div pers_div_of(int d)
{
    pers_div v;
    v.d = d < 1 ? 1 : d;
    v.sh = 0;
    while ((1ull << v.sh) < (unsigned long long)v.d) v.sh++;
    v.mul = (unsigned)(((1ull << 32) * ((1ull << v.sh) - (unsigned long long)v.d)) / (unsigned long long)v.d + 1);
    return v;
}

__device__ __forceinline__ int pdiv(int n, const pers_div &v)
{
#ifdef __CUDA_ARCH__
    const unsigned hi = __umulhi((unsigned)n, v.mul);
#else
    const unsigned hi = (unsigned)(((unsigned long long)(unsigned)n * v.mul) >> 32);
#endif
    return (int)((hi + (unsigned)n) >> v.sh);
}

/* how a product spreads over the CTA's threads (prod_fwd_rt / prod_bwd_rt): KS thread
 * sets split K (forward) or the columns (backward) in ranges of Kc; cols divides an item
 * index into (column or unit, set) */
struct pers_split {
    int KS, Kc;
    pers_div cols;
};

struct pers_shape {
    int B, T, u, G, cell, act, ract, seq, zo, gb;
    int NC, UC, GCP, ldu, R, RP, nsave;
    int64_t blk; /* B*T*u */
    unsigned long long timeout_ns;
    /* dynamic shared memory offsets in bytes (16-aligned) */
    unsigned o_us, o_a, o_b, o_red, o_z, o_x, o_s0, o_s1, o_s2, o_s3, o_m, o_bh;
    /* the forward's second buffers of h, xw and mask (the first are o_a, o_x, o_m); the
     * backward's summed d(r*h) (reset_before) and the cluster's two receive buffers of
     * partial dh (0 where unused) */
    unsigned o_h1, o_x1, o_m1, o_dr, o_rx;
    unsigned o_z1; /* the backward's second buffer of the staged save blocks */
    /* the launch's divisors (layout fills them): u, GCP, UC (= the units of every CTA but
     * the last), the last CTA's units, R * UC and the last group's rows * UC */
    pers_div d_u, d_gcp, d_uc, d_nu_last, d_ruc, d_ruc_last;
    /* the products' splits over column ranges of GCP, 2 UC and UC columns (forward: sf,
     * backward: sb; pers_split_of picks one) */
    pers_split sf[3], sb[3];
};

/* by value, each array element named by a constant index: a reference or a run-time index
 * into the kernel's copy of the shape would put that copy in local memory */
__device__ __forceinline__ pers_split pers_split_of(const pers_split (&sp)[3], const pers_shape &s, int ncols)
{
    pers_split p = sp[2];
    if (ncols == s.GCP) p = sp[0];
    else if (ncols == 2 * s.UC) p = sp[1];
    return p;
}

struct pers_sync {
    int *abort;              /* this launch: nonzero = leave */
    int *status;             /* the backend's error flag slots PERS_ERR_SLOT.. */
    unsigned long long *xbuf; /* exchange buffers: 2 x xstride words (ll_st), zeroed per launch */
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

/* The flags exchange (XC = 0) sends each value as one 64-bit word: the float's bits in
 * the low half, the exchange's ordinal (1, 2, ...; 0 = the launch's memset) in the high
 * half. A naturally aligned 64-bit access is single-copy atomic, so a reader that sees
 * the ordinal it waits for has the value of that exchange: no fence, no counter, no
 * second round trip for the data (NCCL's LL protocol is built the same way). */
#ifndef GC_RNN_EMU
__device__ __forceinline__ unsigned long long ll_ld(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.b64 %0, [%1];" : "=l"(v) : "l"(p));
    return v;
}

__device__ __forceinline__ void ll_st(unsigned long long *p, float v, unsigned tag)
{
    const unsigned long long w = ((unsigned long long)tag << 32) | (unsigned long long)__float_as_uint(v);
    asm volatile("st.relaxed.gpu.global.b64 [%0], %1;" ::"l"(p), "l"(w) : "memory");
}
#endif

/* 4-byte asynchronous copies global -> shared (sm_80+; float32 storage only): the next
 * step's inputs are fetched while this step computes, off the recurrence's critical
 * path. A thread's copies are complete after cp_async_wait_all, visible to the CTA after
 * the barrier that follows it. */
#ifndef GC_RNN_EMU
__device__ __forceinline__ void cp_async4(float *dst, const float *src)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }
#endif

/* Called every 16th poll of a wait that began at t0 (global_ns): 1 = leave, the launch
 * is being abandoned (another CTA's timeout, or this wait's, which it then declares:
 * the abort word for every CTA, the status slots for the host). */
__device__ __noinline__ int ll_give_up(int *abort, int *status, unsigned long long t0,
                                       unsigned long long timeout_ns, unsigned tag)
{
    if (ld_relaxed_s32(abort)) return 1;
    if (global_ns() - t0 <= timeout_ns) return 0;
    atomicExch(abort, 1);
    if (atomicCAS(status, 0, PERS_ERR_TIMEOUT) == 0) {
        status[1] = (int)tag;
        status[2] = (int)blockIdx.x;
    }
    return 1;
}

/* Waits until each word p + q * stride (bit q of `pending`, q < CNT) holds exchange
 * `tag`, its value then in v[q]; w[q] holds a first load of each (issued early). Every
 * word still pending is reloaded in each round, so the words are in flight together:
 * the wait ends one memory latency after the last of them was put. Returns 0 when the
 * launch is abandoned. */
template <int CNT>
__device__ __forceinline__ int ll_wait(const pers_sync &y, const pers_shape &s, const unsigned long long *p,
                                       int64_t stride, unsigned long long *w, float *v, unsigned pending,
                                       unsigned tag)
{
    unsigned long long t0 = 0;
    for (unsigned round = 0;; round++) {
#pragma unroll
        for (int q = 0; q < CNT; q++)
            if (((pending >> q) & 1u) && (unsigned)(w[q] >> 32) == tag) {
                v[q] = __uint_as_float((unsigned)w[q]);
                pending &= ~(1u << q);
            }
        if (!pending) return 1;
        if (round == 0) t0 = global_ns();
        else if ((round & 15u) == 0) {
            if (ll_give_up(y.abort, y.status, t0, s.timeout_ns, tag)) return 0;
            if (round > 4096) __nanosleep(128); /* a long wait: something is wrong, poll gently */
        }
#pragma unroll
        for (int q = 0; q < CNT; q++)
            if ((pending >> q) & 1u) w[q] = ll_ld(p + q * stride);
    }
}

#define PERS_LLB 4 /* exchange words (and staging loads) a thread has in flight at once */

/* AT[k][r] = exchange `tag`'s value of (row b0 + r, unit k) for r < nr (the group's rows
 * of the h buffer src, row stride u). The first loads are issued, then between() runs
 * (the step's staging: its loads overlap the exchange's latency), then every word is
 * awaited. Returns 0 when the launch is abandoned (CTA-uniform after the caller's
 * __syncthreads_and). */
template <typename F>
__device__ int ll_gather_rows_t(const pers_sync &y, const pers_shape &s, const unsigned long long *src, int nr,
                                float *AT, unsigned tag, F between)
{
    const int u = s.u, n = nr * u;
    unsigned long long w[PERS_LLB];
    float v[PERS_LLB];
    int ok = 1;
    for (int base = threadIdx.x; base < n || base == (int)threadIdx.x; base += PERS_LLB * PERS_NT) {
        unsigned pending = 0;
#pragma unroll
        for (int q = 0; q < PERS_LLB; q++)
            if (base + q * PERS_NT < n) {
                w[q] = ll_ld(src + base + q * PERS_NT);
                pending |= 1u << q;
            }
        if (base == (int)threadIdx.x) between();
        if (!pending) break;
        if (ok) ok = ll_wait<PERS_LLB>(y, s, src + base, PERS_NT, w, v, pending, tag);
        if (!ok) continue;
#pragma unroll
        for (int q = 0; q < PERS_LLB; q++) {
            const int i = base + q * PERS_NT;
            if (i < n) {
                const int r = pdiv(i, s.d_u), k = i - r * u;
                AT[k * s.RP + r] = v[q];
            }
        }
    }
    return ok;
}

/* out[si] = add[si] + the sum over the NC CTAs (in CTA order: deterministic) of their
 * partials of exchange `tag` for (row b0 + r, unit j0 + jj), each (r, jj < nu) of the
 * CTA's; src = the exchange buffer (partials [c][B][u]). between() as above. */
template <typename F>
__device__ int ll_sum_partials(const pers_sync &y, const pers_shape &s, const unsigned long long *src, int b0,
                               int nr, int j0, int nu, const pers_div &dnu, const float *add, float *out,
                               unsigned tag, F between)
{
    const int64_t cs = (int64_t)s.B * s.u;
    const unsigned all = s.NC >= 32 ? ~0u : (1u << s.NC) - 1u;
    unsigned long long w[PERS_MAX_NC];
    float v[PERS_MAX_NC];
    const int n = nr * nu;
    int ok = 1;
    for (int i = threadIdx.x; i < n || i == (int)threadIdx.x; i += PERS_NT) {
        const int r = pdiv(i, dnu), jj = i - r * nu;
        const unsigned long long *p = src + (int64_t)(b0 + r) * s.u + j0 + jj;
        const int live = i < n;
        if (live) {
#pragma unroll
            for (int c = 0; c < PERS_MAX_NC; c++)
                if (c < s.NC) w[c] = ll_ld(p + c * cs);
        }
        if (i == (int)threadIdx.x) between();
        if (!live) break;
        if (ok) ok = ll_wait<PERS_MAX_NC>(y, s, p, cs, w, v, all, tag);
        if (!ok) continue;
        float acc = 0.0f;
#pragma unroll
        for (int c = 0; c < PERS_MAX_NC; c++)
            if (c < s.NC) acc += v[c];
        const int si = r * s.UC + jj;
        out[si] = (add ? add[si] : 0.0f) + acc;
    }
    return ok;
}

/* ------------------------------------------------------------------ the products */

/* RT accumulators of one (column, K range) item: acc[r] += AT[k][rt + r] * w_k over k of
 * [k0, k1) in order, where the weight of k is at w + k * wstride (float4 loads of AT:
 * RP, rt multiples of 4). The loads of 8 k are issued before their FMAs: a CTA has 8
 * warps, too few to hide a shared-memory latency per k. */
template <int RT, typename T>
__device__ __forceinline__ void dot_rows(const T *w, int64_t wstride, const float *AT, int RP, int rt, int k0,
                                         int k1, float *acc)
{
#pragma unroll
    for (int r = 0; r < RT; r++) acc[r] = 0.0f;
    const T *wp = w + (int64_t)k0 * wstride;
    const float *hp = AT + k0 * RP + rt;
    int k = k0;
    for (; k + 8 <= k1; k += 8, wp += 8 * wstride, hp += 8 * RP) {
        float wk[8];
        float4 h[8][RT / 4];
#pragma unroll
        for (int e = 0; e < 8; e++) {
            wk[e] = gc_to_f(wp[e * wstride]);
#pragma unroll
            for (int q = 0; q < RT / 4; q++) h[e][q] = *(const float4 *)(hp + e * RP + 4 * q);
        }
#pragma unroll
        for (int e = 0; e < 8; e++)
#pragma unroll
            for (int q = 0; q < RT / 4; q++) {
                float *c = acc + 4 * q;
                c[0] = fmaf(h[e][q].x, wk[e], c[0]), c[1] = fmaf(h[e][q].y, wk[e], c[1]);
                c[2] = fmaf(h[e][q].z, wk[e], c[2]), c[3] = fmaf(h[e][q].w, wk[e], c[3]);
            }
    }
    for (; k < k1; k++, wp += wstride, hp += RP) {
        const float wk = gc_to_f(*wp);
#pragma unroll
        for (int q = 0; q < RT / 4; q++) {
            const float4 a = *(const float4 *)(hp + 4 * q);
            float *c = acc + 4 * q;
            c[0] = fmaf(a.x, wk, c[0]), c[1] = fmaf(a.y, wk, c[1]);
            c[2] = fmaf(a.z, wk, c[2]), c[3] = fmaf(a.w, wk, c[3]);
        }
    }
}

/* p[0] + p[stride] + ... + p[(n - 1) stride] (the K sets' partials of one result) in four
 * independent chains, combined in a fixed order: deterministic, and the loads in flight
 * together instead of one shared-memory latency per set */
__device__ __forceinline__ float sum_sets(const float *p, int n, int stride)
{
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
    int q = 0;
    for (; q + 4 <= n; q += 4) {
        a0 += p[q * stride], a1 += p[(q + 1) * stride];
        a2 += p[(q + 2) * stride], a3 += p[(q + 3) * stride];
    }
    for (; q < n; q++) a0 += p[q * stride];
    return (a0 + a1) + (a2 + a3);
}

/* Z[r][col] (row stride GCP) = sum_k AT[k][r] * Us[k][col], cols [c0, c1), all RP rows
 * in tiles of RT (8 where RP allows, else 4: the rows are padded to 4 only). Columns are
 * split over the threads, and K over KS thread sets when the columns alone leave threads
 * idle (partials in red, summed in a fixed order). Ends with a __syncthreads. */
template <int RT, typename T>
__device__ void prod_fwd_rt(const pers_shape &s, const T *Us, const float *AT, int c0, int c1, float *red, float *Z)
{
    const int u = s.u, RP = s.RP, ncols = c1 - c0;
    const pers_split sp = pers_split_of(s.sf, s, ncols);
    const int KS = sp.KS, Kc = sp.Kc;
    for (int rt = 0; rt < RP; rt += RT) {
        for (int item = threadIdx.x; item < ncols * KS; item += PERS_NT) {
            const int ks = KS == 1 ? 0 : pdiv(item, sp.cols), cc = item - ks * ncols, col = c0 + cc;
            const int k0 = ks * Kc, k1 = min(u, k0 + Kc);
            float acc[RT];
            dot_rows<RT>(Us + col, s.ldu, AT, RP, rt, k0, k1, acc);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                if (KS == 1) Z[(rt + r) * s.GCP + col] = acc[r];
                else red[(ks * RT + r) * ncols + cc] = acc[r];
            }
        }
        if (KS > 1) {
            __syncthreads();
            for (int i = threadIdx.x; i < RT * ncols; i += PERS_NT) {
                const int r = pdiv(i, sp.cols), cc = i - r * ncols;
                Z[(rt + r) * s.GCP + c0 + cc] = sum_sets(red + r * ncols + cc, KS, RT * ncols);
            }
        }
        __syncthreads(); /* Z complete; red free for the next tile */
    }
}

template <typename T>
__device__ void prod_fwd(const pers_shape &s, const T *Us, const float *AT, int c0, int c1, float *red, float *Z)
{
    if (s.RP % 8 == 0) prod_fwd_rt<8>(s, Us, AT, c0, c1, red, Z);
    else prod_fwd_rt<4>(s, Us, AT, c0, c1, red, Z);
}

/* one element of a CTA's partial dh (row r, unit j) of exchange `tag`: flags: into the
 * global exchange buffer out (unsigned long long, row stride u); cluster: into the owner
 * CTA's receive buffer out (float, local address; slot [c][r][j - owner's first unit],
 * rows RP apart, UC wide) */
template <int XC>
__device__ __forceinline__ void bwd_put(const pers_shape &s, void *out, int c, int r, int j, unsigned tag, float v)
{
    if constexpr (XC) {
        const int owner = j / s.UC;
        cl_st((float *)out + ((int64_t)c * s.RP + r) * s.UC + (j - owner * s.UC), (unsigned)owner, v);
    } else {
        (void)c;
        ll_st((unsigned long long *)out + (int64_t)r * s.u + j, v, tag);
    }
}

/* out[r * u + j] (r < nr) = sum over cols [c0, c1) of ZT[col][r] * Us[j][col], every
 * j < u: this CTA's partial of dz . U^T, put with bwd_put. ZT is (GCP, RP) float32.
 * Threads over j, the columns split over KS thread sets when u alone leaves threads idle.
 * Ends with a __syncthreads. */
template <int RT, typename T, int XC>
__device__ void prod_bwd_rt(const pers_shape &s, const T *Us, const float *ZT, int c0, int c1, float *red,
                            void *out, int nr, int c, unsigned tag)
{
    const int u = s.u, RP = s.RP, ncols = c1 - c0;
    const pers_split sp = pers_split_of(s.sb, s, ncols);
    const int KS = sp.KS, Kc = sp.Kc;
    for (int rt = 0; rt < RP; rt += RT) {
        for (int item = threadIdx.x; item < u * KS; item += PERS_NT) {
            const int ks = KS == 1 ? 0 : pdiv(item, sp.cols), j = item - ks * u;
            const int q0 = c0 + ks * Kc, q1 = min(c1, q0 + Kc);
            float acc[RT];
            dot_rows<RT>(Us + (int64_t)j * s.ldu, 1, ZT, RP, rt, q0, q1, acc);
#pragma unroll
            for (int r = 0; r < RT; r++) {
                if (KS == 1) {
                    if (rt + r < nr) bwd_put<XC>(s, out, c, rt + r, j, tag, acc[r]);
                } else {
                    red[(ks * RT + r) * u + j] = acc[r];
                }
            }
        }
        if (KS > 1) {
            __syncthreads();
            for (int i = threadIdx.x; i < RT * u; i += PERS_NT) {
                const int r = pdiv(i, s.d_u), j = i - r * u;
                if (rt + r >= nr) continue;
                bwd_put<XC>(s, out, c, rt + r, j, tag, sum_sets(red + r * u + j, KS, RT * u));
            }
        }
        __syncthreads();
    }
}

template <typename T, int XC>
__device__ void prod_bwd(const pers_shape &s, const T *Us, const float *ZT, int c0, int c1, float *red, void *out,
                         int nr, int c, unsigned tag)
{
    if (s.RP % 8 == 0) prod_bwd_rt<8, T, XC>(s, Us, ZT, c0, c1, red, out, nr, c, tag);
    else prod_bwd_rt<4, T, XC>(s, Us, ZT, c0, c1, red, out, nr, c, tag);
}

template <typename T> __device__ __forceinline__ const T *cptr(const void *p) { return (const T *)p; }

/* The gate loops' activations. F = 1: Keras' defaults (tanh, and sigmoid for the gates),
 * with the kind a constant, so the activation functions' switches fold away (they sit on
 * the step's critical path, several per gate item); F = 0: the layer's own kinds. The
 * same functions either way (gpucmp_rnn_act.h), so the results are identical. */
template <bool F>
struct pers_acts {
    int act, ract;
    __device__ __forceinline__ float a(float x) const { return gc_rnn_act_apply(F ? GC_RNN_TANH : act, x); }
    __device__ __forceinline__ float r(float x) const { return gc_rnn_act_apply(F ? GC_RNN_SIGMOID : ract, x); }
    __device__ __forceinline__ float da(float y) const { return gc_rnn_act_dout(F ? GC_RNN_TANH : act, y); }
    __device__ __forceinline__ float dr(float y) const { return gc_rnn_act_dout(F ? GC_RNN_SIGMOID : ract, y); }
};

/* F = 1 applies: tanh, and sigmoid gates where the cell has gates */
__device__ __forceinline__ bool pers_default_acts(const pers_shape &s)
{
    return s.act == GC_RNN_TANH && (s.cell == GC_RNN_SIMPLE || s.ract == GC_RNN_SIGMOID);
}

/* ------------------------------------------------------------------ forward */

/* the step's inputs of this CTA (xw of its columns, mask of its rows) into shared memory */
template <typename T>
__device__ void fwd_stage(const pers_fwd_args &a, int t, int b0, int nr, int j0, int nu, float *xs, float *ms)
{
    const pers_shape &s = a.s;
    const T *xw = cptr<T>(a.xw);
    const int64_t Gu = (int64_t)s.G * s.u;
    for (int i = threadIdx.x; i < nr * s.GCP; i += PERS_NT) {
        const int r = pdiv(i, s.d_gcp), col = i - r * s.GCP, g = pdiv(col, s.d_uc), jj = col - g * s.UC;
        xs[i] = jj < nu ? gc_to_f(xw[((int64_t)(b0 + r) * s.T + t) * Gu + (int64_t)g * s.u + j0 + jj]) : 0.0f;
    }
    for (int r = threadIdx.x; r < nr; r += PERS_NT) ms[r] = a.mask ? a.mask[(int64_t)(b0 + r) * s.T + t] : 1.0f;
}

/* The threads that issue a step's prefetch: those without a gate item (tid >= busy, the
 * gate loops' item count) while there are any, so that issuing the copies overlaps the
 * gate math instead of delaying it; all of them otherwise. */
__device__ __forceinline__ void pf_threads(int busy, int *first, int *stride)
{
    *first = busy < PERS_NT ? busy : 0;
    *stride = PERS_NT - *first;
}

/* fwd_stage's copies of the CTA's own xw and mask elements as cp.async (float32, the
 * flags variant), issued by the threads pf_threads picks: the padding columns (jj >= nu)
 * and an absent mask's ones are written once at the start, so the copies alone refill a
 * buffer. Every thread commits its (possibly empty) group. */
__device__ void fwd_prefetch(const pers_fwd_args &a, int t, int b0, int nr, int j0, int nu, float *xs, float *ms)
{
    const pers_shape &s = a.s;
    const float *xw = (const float *)a.xw;
    const int64_t Gu = (int64_t)s.G * s.u;
    int f, st;
    pf_threads(nr * nu, &f, &st);
    const int me = (int)threadIdx.x - f;
    for (int i = me; me >= 0 && i < nr * s.GCP; i += st) {
        const int r = pdiv(i, s.d_gcp), col = i - r * s.GCP, g = pdiv(col, s.d_uc), jj = col - g * s.UC;
        if (jj < nu) cp_async4(xs + i, xw + ((int64_t)(b0 + r) * s.T + t) * Gu + (int64_t)g * s.u + j0 + jj);
    }
    if (a.mask)
        for (int r = me; me >= 0 && r < nr; r += st) cp_async4(ms + r, a.mask + (int64_t)(b0 + r) * s.T + t);
    cp_async_commit();
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
    const pers_div dnu = nu == s.UC ? s.d_uc : s.d_nu_last;
    const int u = s.u, UC = s.UC, GCP = s.GCP, RP = s.RP;
    const int64_t Gu = (int64_t)s.G * u;
    const int before = s.cell == GC_RNN_GRU_RESET_BEFORE;
    const bool fast = pers_default_acts(s);
    constexpr bool ASYNC = sizeof(T) == 4 && !XC; /* the next step's inputs by cp.async */
    T *Us = (T *)(smem + s.o_us);
    float *hT = (float *)(smem + s.o_a), *rhT = (float *)(smem + s.o_b), *red = (float *)(smem + s.o_red);
    float *zs = (float *)(smem + s.o_z), *xs = (float *)(smem + s.o_x);
    float *hs = (float *)(smem + s.o_s0), *cs = (float *)(smem + s.o_s1), *es = (float *)(smem + s.o_s2);
    float *ms = (float *)(smem + s.o_m), *bhs = (float *)(smem + s.o_bh);
    /* two buffers of h (both variants), of the staged xw and mask (the flags': a step's
     * gather fills the other parity's while no barrier separates it from the previous
     * step's gate loop); (no arrays: no stack) */
    float *const hb0 = hT, *const hb1 = (float *)(smem + s.o_h1);
    float *const xs0 = xs, *const xs1 = (float *)(smem + s.o_x1);
    float *const ms0 = ms, *const ms1 = (float *)(smem + s.o_m1);
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
        hb1[i] = 0.0f;
        if (before) rhT[i] = 0.0f;
    }
    for (int i = threadIdx.x; i < RP * GCP; i += PERS_NT) zs[i] = xs1[i] = 0.0f;
    for (int r = threadIdx.x; r < RP; r += PERS_NT) ms1[r] = 1.0f;
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

    unsigned ord = 0; /* exchanges put so far (the flags' tags: ord + 1 is the next) */
    PERS_PROF_START;
    const int64_t grow = (int64_t)b0 * u;
    for (int k = 0; k < s.T; k++) {
        const int t = s.gb ? s.T - 1 - k : k;
        const int last = k == s.T - 1;
        hT = (k & 1) ? hb1 : hb0; /* cluster: H_{k-1} (or the start barrier) was passed */
        if constexpr (!XC) {
            xs = (k & 1) ? xs1 : xs0;
            ms = (k & 1) ? ms1 : ms0;
            if (k > 0) {
                /* h_{k-1} of the group's rows, while this step's xw and mask are staged
                 * (float32: the copies the previous step issued complete) */
                const int ok = ll_gather_rows_t(a.y, s, a.y.xbuf + (ord & 1) * a.y.xstride + grow, nr, hT, ord, [&] {
                    if constexpr (ASYNC) cp_async_wait_all();
                    else fwd_stage<T>(a, t, b0, nr, j0, nu, xs, ms);
                    PERS_PROF(0, 4);
                });
                PERS_PROF(0, 0);
                if (!__syncthreads_and(ok)) return;
                PERS_PROF(0, 1);
            }
        }
        if (before) {
            prod_fwd<T>(s, Us, hT, 0, 2 * UC, red, zs);
            unsigned long long *dst = a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + grow;
            for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                const int r = pdiv(i, dnu), jj = i - r * nu, q = r * GCP + UC + jj;
                const float rg = gc_rnn_act_apply(s.ract, xs[q] + zs[q]);
                const float v = rg * hT[(j0 + jj) * RP + r];
                if constexpr (XC) {
                    for (int p = 0; p < s.NC; p++) cl_st(rhT + (j0 + jj) * RP + r, (unsigned)p, v);
                } else {
                    ll_st(dst + (int64_t)r * u + j0 + jj, v, ord + 1);
                }
            }
            ord++;
            if constexpr (XC) {
                cl_sync(); /* X_k */
            } else {
                const int ok = ll_gather_rows_t(a.y, s, a.y.xbuf + (ord & 1) * a.y.xstride + grow, nr, rhT, ord,
                                                [] {});
                if (!__syncthreads_and(ok)) return;
            }
            prod_fwd<T>(s, Us, rhT, 2 * UC, 3 * UC, red, zs);
        } else {
            prod_fwd<T>(s, Us, hT, 0, GCP, red, zs);
        }
        PERS_PROF(0, 2);
        /* the next step's inputs into the other buffers (their last reader, the previous
         * step's gate loop, every thread passed at this step's gather), by the threads
         * without a gate item while the others run the gate loop */
        if constexpr (ASYNC)
            if (!last) fwd_prefetch(a, s.gb ? s.T - 2 - k : k + 1, b0, nr, j0, nu, (k & 1) ? xs0 : xs1,
                                    (k & 1) ? ms0 : ms1);
        /* the gates, the states, the outputs of (row, own unit); h goes to the peers first */
        float *hnext = (k & 1) ? hb0 : hb1;
        unsigned long long *xnext = XC ? nullptr : a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + grow;
        auto gate_loop = [=](auto acts) {
        for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
            const int r = pdiv(i, dnu), jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
            const float *x = xs + r * GCP, *m = zs + r * GCP;
            const float hp = hT[j * RP + r];
            float hn, cn = 0.0f, sv[7];
            int S = 2;
            sv[0] = hp;
            switch (s.cell) {
            case GC_RNN_SIMPLE:
                hn = acts.a(x[jj] + m[jj]);
                sv[1] = hn;
                break;
            case GC_RNN_LSTM: {
                const float cp = cs[si];
                const float ig = acts.r(x[jj] + m[jj]);
                const float fg = acts.r(x[UC + jj] + m[UC + jj]);
                const float gg = acts.a(x[2 * UC + jj] + m[2 * UC + jj]);
                const float og = acts.r(x[3 * UC + jj] + m[3 * UC + jj]);
                cn = fg * cp + ig * gg;
                hn = og * acts.a(cn);
                sv[1] = cp, sv[2] = ig, sv[3] = fg, sv[4] = gg, sv[5] = og, sv[6] = cn;
                S = 7;
                break;
            }
            case GC_RNN_GRU: {
                const float mz = m[jj] + bhs[jj], mr = m[UC + jj] + bhs[UC + jj];
                const float mh = m[2 * UC + jj] + bhs[2 * UC + jj];
                const float z = acts.r(x[jj] + mz), rg = acts.r(x[UC + jj] + mr);
                const float hh = acts.a(x[2 * UC + jj] + rg * mh);
                hn = z * hp + (1.0f - z) * hh;
                sv[1] = z, sv[2] = rg, sv[3] = hh, sv[4] = mh;
                S = 5;
                break;
            }
            default: { /* reset_before: m's h block is (r*h).U_h */
                const float z = acts.r(x[jj] + m[jj]);
                const float rg = acts.r(x[UC + jj] + m[UC + jj]);
                const float hh = acts.a(x[2 * UC + jj] + m[2 * UC + jj]);
                hn = z * hp + (1.0f - z) * hh;
                sv[1] = z, sv[2] = rg, sv[3] = hh, sv[4] = rg * hp;
                S = 5;
                break;
            }
            }
            const int live = ms[r] != 0.0f;
            const float hv = live ? hn : hp;
            if (!last) {
                if constexpr (XC) {
                    for (int p = 0; p < s.NC; p++) cl_st(hnext + j * RP + r, (unsigned)p, hv);
                } else {
                    ll_st(xnext + (int64_t)r * u + j, hv, ord + 1);
                }
            }
            float ev = es[si];
            if (live) {
                if (s.cell == GC_RNN_LSTM) cs[si] = cn;
                ev = hn;
            } else if (s.zo) {
                ev = 0.0f;
            }
            es[si] = ev;
            hs[si] = hv;
            const int64_t o = ((int64_t)(b0 + r) * s.T + t) * u + j;
            if (save)
                for (int q = 0; q < S; q++) save[q * s.blk + o] = gc_from_f<T>(sv[q]);
            if (s.seq) out[((int64_t)(b0 + r) * s.T + k) * u + j] = gc_from_f<T>(ev);
        }
        };
        if (fast) gate_loop(pers_acts<true>{s.act, s.ract});
        else gate_loop(pers_acts<false>{s.act, s.ract});
        if (!last) ord++;
        PERS_PROF(0, 3);
        if constexpr (XC) {
            if (!last) {
                cl_arrive(); /* H_k: the h writes are released; stage while the peers finish */
                __syncthreads(); /* every thread's gate loop read xs / ms before they are restaged */
                fwd_stage<T>(a, s.gb ? s.T - 2 - k : k + 1, b0, nr, j0, nu, xs, ms);
                cl_wait(); /* H_k complete: the next h is in hb[(k+1)&1], the staging visible */
            } else {
                __syncthreads();
            }
        }
        /* flags: no barrier here; the next step's gather writes the other parity's buffers,
         * and its __syncthreads_and orders this gate loop before the next products */
    }
    PERS_PROF_END(0);
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

/* the step's inputs of (row, own unit): every save block, dy (sequences), the mask. The
 * (block, row, unit) items are spread over all the threads and each thread's loads are
 * issued together (PERS_LLB at a time) before they are stored: the stage sits on the
 * step's critical path, so it should cost one memory latency, not one per block. */
template <typename T>
__device__ void bwd_stage(const pers_bwd_args &a, int k, int b0, int nr, int j0, int nu, float *ss, float *dys,
                          float *ms)
{
    const pers_shape &s = a.s;
    const int t = s.gb ? s.T - 1 - k : k, UC = s.UC, n = nr * UC, tot = (s.nsave + 1) * n;
    const pers_div dn = nr == s.R ? s.d_ruc : s.d_ruc_last;
    const T *save = cptr<T>(a.save), *dy = cptr<T>(a.dy);
    const int want_dy = s.seq && dy;
    for (int base = threadIdx.x; base < tot; base += PERS_LLB * PERS_NT) {
        float v[PERS_LLB];
#pragma unroll
        for (int e = 0; e < PERS_LLB; e++) {
            const int idx = base + e * PERS_NT;
            v[e] = 0.0f;
            if (idx < tot) {
                const int q = pdiv(idx, dn), i = idx - q * n, r = pdiv(i, s.d_uc), jj = i - r * UC;
                const int64_t b = b0 + r;
                if (jj < nu && q < s.nsave) v[e] = gc_to_f(save[q * s.blk + (b * s.T + t) * s.u + j0 + jj]);
                else if (jj < nu && want_dy) v[e] = gc_to_f(dy[(b * s.T + k) * s.u + j0 + jj]);
            }
        }
#pragma unroll
        for (int e = 0; e < PERS_LLB; e++) {
            const int idx = base + e * PERS_NT;
            if (idx < tot) {
                const int q = pdiv(idx, dn), i = idx - q * n;
                (q < s.nsave ? ss + q * s.RP * UC : dys)[i] = v[e];
            }
        }
    }
    for (int r = threadIdx.x; r < nr; r += PERS_NT) ms[r] = a.mask ? a.mask[(int64_t)(b0 + r) * s.T + t] : 1.0f;
}

/* bwd_stage's copies of the CTA's own elements as cp.async (float32, the flags
 * variant): absent dy / mask leave the zeros / ones written at the start. */
__device__ void bwd_prefetch(const pers_bwd_args &a, int k, int b0, int nr, int j0, int nu, float *ss, float *dys,
                             float *ms)
{
    const pers_shape &s = a.s;
    const int t = s.gb ? s.T - 1 - k : k, UC = s.UC, n = nr * UC, tot = (s.nsave + 1) * n;
    const pers_div dn = nr == s.R ? s.d_ruc : s.d_ruc_last;
    const float *save = (const float *)a.save, *dy = (const float *)a.dy;
    const int want_dy = s.seq && dy;
    int f, st;
    pf_threads(nr * nu, &f, &st);
    const int me = (int)threadIdx.x - f;
    for (int idx = me; me >= 0 && idx < tot; idx += st) {
        const int q = pdiv(idx, dn), i = idx - q * n, r = pdiv(i, s.d_uc), jj = i - r * UC;
        if (jj >= nu) continue;
        const int64_t b = b0 + r;
        if (q < s.nsave) cp_async4(ss + q * s.RP * UC + i, save + q * s.blk + (b * s.T + t) * s.u + j0 + jj);
        else if (want_dy) cp_async4(dys + i, dy + (b * s.T + k) * s.u + j0 + jj);
    }
    if (a.mask)
        for (int r = me; me >= 0 && r < nr; r += st) cp_async4(ms + r, a.mask + (int64_t)(b0 + r) * s.T + t);
    cp_async_commit();
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
    const pers_div dnu = nu == s.UC ? s.d_uc : s.d_nu_last;
    const int u = s.u, UC = s.UC, GCP = s.GCP, RP = s.RP, NC = s.NC;
    const int64_t Gu = (int64_t)s.G * u, B = s.B;
    const int before = s.cell == GC_RNN_GRU_RESET_BEFORE;
    const bool fast = pers_default_acts(s);
    constexpr bool ASYNC = sizeof(T) == 4 && !XC; /* the previous step's inputs by cp.async */
    T *Us = (T *)(smem + s.o_us);
    float *dzT = (float *)(smem + s.o_a), *red = (float *)(smem + s.o_red);
    /* the staged inputs of step k are in buffer k & 1 (ss: save blocks, dys: dy, ms: mask) */
    float *const ss0 = (float *)(smem + s.o_z), *const ss1 = (float *)(smem + s.o_z1);
    float *const dys0 = (float *)(smem + s.o_x), *const dys1 = (float *)(smem + s.o_x1);
    float *const ms0 = (float *)(smem + s.o_m), *const ms1 = (float *)(smem + s.o_m1);
    float *ss = ss0, *dys = dys0, *ms = ms0;
    float *dh = (float *)(smem + s.o_s0), *dc = (float *)(smem + s.o_s1), *de = (float *)(smem + s.o_s2);
    float *dd = (float *)(smem + s.o_s3);
    float *rx = (float *)(smem + s.o_rx); /* cluster: 2 x NC x RP x UC */
    float *dr = (float *)(smem + s.o_dr); /* reset_before: the summed d(r*h) of (row, own unit) */
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
    for (int i = threadIdx.x; i < RP * UC; i += PERS_NT) dys0[i] = dys1[i] = 0.0f;
    for (int r = threadIdx.x; r < RP; r += PERS_NT) ms0[r] = ms1[r] = 1.0f;
    __syncthreads();
    bwd_stage<T>(a, s.T - 1, b0, nr, j0, nu, ((s.T - 1) & 1) ? ss1 : ss0, ((s.T - 1) & 1) ? dys1 : dys0,
                 ((s.T - 1) & 1) ? ms1 : ms0);
    if constexpr (XC) cl_sync(); /* the start barrier */
    else __syncthreads();

    unsigned ord = 0;
    PERS_PROF_START;
    for (int k = s.T - 1; k >= 0; k--) {
        const int t = s.gb ? s.T - 1 - k : k;
        ss = (k & 1) ? ss1 : ss0, dys = (k & 1) ? dys1 : dys0, ms = (k & 1) ? ms1 : ms0;
        float *const ssn = (k & 1) ? ss0 : ss1, *const dysn = (k & 1) ? dys0 : dys1, *const msn = (k & 1) ? ms0 : ms1;
        /* step k - 1's inputs into the other buffers (their last reader, step k + 1, ended
         * with a barrier), by the threads without a gate item during phase A */
        if constexpr (ASYNC)
            if (k > 0) bwd_prefetch(a, k - 1, b0, nr, j0, nu, ssn, dysn, msn);
        /* phase A: the gate gradients of (row, own unit) */
        auto gate_loop = [=](auto acts) {
        for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
            const int r = pdiv(i, dnu), jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
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
                const float da = g * acts.da(ss[PS + si]);
                dzT[jj * RP + r] = da;
                dxw[row + j] = gc_from_f<T>(da);
                dd[si] = 0.0f;
                break;
            }
            case GC_RNN_LSTM: {
                const float cp = ss[PS + si], ig = ss[2 * PS + si], fg = ss[3 * PS + si];
                const float gg = ss[4 * PS + si], og = ss[5 * PS + si], cn = ss[6 * PS + si];
                const float ac = acts.a(cn);
                const float dcn = dc[si] + g * og * acts.da(ac);
                const float v0 = dcn * gg * acts.dr(ig), v1 = dcn * cp * acts.dr(fg);
                const float v2 = dcn * ig * acts.da(gg), v3 = g * ac * acts.dr(og);
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
                const float da = g * (1.0f - zg) * acts.da(hh);
                const float vz = g * (hp - hh) * acts.dr(zg);
                dzT[jj * RP + r] = vz;
                dxw[row + j] = gc_from_f<T>(vz);
                dd[si] = g * zg;
                dxw[row + 2 * u + j] = gc_from_f<T>(da);
                if (s.cell == GC_RNN_GRU) {
                    const float vr = da * s4 * acts.dr(rg);
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
        };
        if (fast) gate_loop(pers_acts<true>{s.act, s.ract});
        else gate_loop(pers_acts<false>{s.act, s.ract});
        __syncthreads();
        if (before) {
            /* d(r*h) = da . U_h^T, exchanged, then the r gate and the r*h part of dd */
            void *dst = XC ? (void *)(rx + ((ord + 1) & 1) * rxs)
                           : (void *)(a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + ((int64_t)c * B + b0) * u);
            prod_bwd<T, XC>(s, Us, dzT, 2 * UC, 3 * UC, red, dst, nr, c, ord + 1);
            ord++;
            const float *rsrc = rx + (ord & 1) * rxs;
            if constexpr (XC) {
                cl_sync();
                for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                    const int r = pdiv(i, dnu), jj = i - r * nu;
                    float v = 0.0f;
                    for (int cc = 0; cc < NC; cc++) v += rsrc[(cc * RP + r) * UC + jj];
                    dr[r * UC + jj] = v;
                }
            } else {
                const int ok = ll_sum_partials(a.y, s, a.y.xbuf + (ord & 1) * a.y.xstride, b0, nr, j0, nu, dnu, nullptr,
                                               dr, ord, [] {});
                if (!__syncthreads_and(ok)) return;
            }
            for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                const int r = pdiv(i, dnu), jj = i - r * nu, j = j0 + jj, si = r * UC + jj;
                if (ms[r] == 0.0f) continue;
                const float drh = dr[si];
                const float hp = ss[si], rg = ss[2 * PS + si];
                const float vr = drh * hp * gc_rnn_act_dout(s.ract, rg);
                dzT[(UC + jj) * RP + r] = vr;
                dxw[((int64_t)(b0 + r) * s.T + t) * Gu + u + j] = gc_from_f<T>(vr);
                dd[si] += drh * rg;
            }
            __syncthreads();
        }
        PERS_PROF(1, 0);
        /* phase B: this CTA's partial of dh_{t-1} over every unit, exchanged and summed */
        void *dst = XC ? (void *)(rx + ((ord + 1) & 1) * rxs)
                       : (void *)(a.y.xbuf + ((ord + 1) & 1) * a.y.xstride + ((int64_t)c * B + b0) * u);
        prod_bwd<T, XC>(s, Us, dzT, 0, before ? 2 * UC : GCP, red, dst, nr, c, ord + 1);
        ord++;
        PERS_PROF(1, 2);
        if constexpr (XC) {
            cl_arrive(); /* E_ord: released (prod_bwd ended with a __syncthreads: the stage is free) */
            if (k > 0) bwd_stage<T>(a, k - 1, b0, nr, j0, nu, ssn, dysn, msn);
            cl_wait();
            const float *rsrc = rx + (ord & 1) * rxs;
            for (int i = threadIdx.x; i < nr * nu; i += PERS_NT) {
                const int r = pdiv(i, dnu), jj = i - r * nu, si = r * UC + jj;
                float acc = 0.0f;
                for (int cc = 0; cc < NC; cc++) acc += rsrc[(cc * RP + r) * UC + jj];
                dh[si] = dd[si] + acc;
            }
            __syncthreads();
        } else {
            /* the partials of the CTA's units, while the previous step's inputs are staged
             * (prod_bwd ended with a __syncthreads: the stage is free) */
            const int ok = ll_sum_partials(a.y, s, a.y.xbuf + (ord & 1) * a.y.xstride, b0, nr, j0, nu, dnu, dd, dh, ord,
                                           [&] {
                                               if constexpr (ASYNC) cp_async_wait_all();
                                               else if (k > 0)
                                                   bwd_stage<T>(a, k - 1, b0, nr, j0, nu, ssn, dysn, msn);
                                               PERS_PROF(1, 4);
                                           });
            PERS_PROF(1, 3);
            if (!__syncthreads_and(ok)) return;
            PERS_PROF(1, 5);
        }
    }
    PERS_PROF_END(1);
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

/* the products' thread sets: forward, K split over KS sets when the columns alone leave
 * threads idle (at least 8 k each); backward, the columns split over KS sets when the u
 * units leave threads idle (at least 4 columns each) */
static inline pers_split pers_split_fwd(int u, int ncols)
{
    pers_split p;
    p.KS = 1;
    if (ncols < PERS_NT) {
        p.KS = PERS_NT / ncols;
        const int kmax = (u + 7) / 8;
        if (p.KS > kmax) p.KS = kmax;
        if (p.KS < 1) p.KS = 1;
    }
    p.Kc = (u + p.KS - 1) / p.KS;
    p.cols = pers_div_of(ncols);
    return p;
}

static inline pers_split pers_split_bwd(int u, int ncols)
{
    pers_split p;
    p.KS = 1;
    if (u < PERS_NT) {
        p.KS = PERS_NT / u;
        const int kmax = (ncols + 3) / 4;
        if (p.KS > kmax) p.KS = kmax;
        if (p.KS < 1) p.KS = 1;
    }
    p.Kc = (ncols + p.KS - 1) / p.KS;
    p.cols = pers_div_of(u);
    return p;
}

/* the launch's divisors and product splits (NC, UC, GCP and R chosen) */
static inline void pers_fill_divs(pers_shape *s)
{
    const int NG = (s->B + s->R - 1) / s->R;
    s->d_u = pers_div_of(s->u);
    s->d_gcp = pers_div_of(s->GCP);
    s->d_uc = pers_div_of(s->UC);
    s->d_nu_last = pers_div_of(s->u - (s->NC - 1) * s->UC);
    s->d_ruc = pers_div_of(s->R * s->UC);
    s->d_ruc_last = pers_div_of((s->B - (NG - 1) * s->R) * s->UC);
    const int ncols[3] = {s->GCP, 2 * s->UC, s->UC};
    for (int i = 0; i < 3; i++) {
        s->sf[i] = pers_split_fwd(s->u, ncols[i]);
        s->sb[i] = pers_split_bwd(s->u, ncols[i]);
    }
}

static inline unsigned align16(size_t b) { return (unsigned)((b + 15) & ~(size_t)15); }

/* the shared-memory layout for R rows (padded to RP, a multiple of 4) */
static inline size_t layout(pers_shape *s, int bwd, size_t ts, int xc = 0)
{
    s->RP = (s->R + 3) / 4 * 4;
    const size_t RP = (size_t)s->RP, u = (size_t)s->u, UC = (size_t)s->UC, GCP = (size_t)s->GCP;
    size_t o = 0;
    auto take = [&o](size_t bytes) {
        const unsigned at = (unsigned)o;
        o += align16(bytes);
        return at;
    };
    s->o_h1 = s->o_x1 = s->o_m1 = s->o_dr = s->o_rx = s->o_z1 = 0;
    s->o_us = take(u * (size_t)s->ldu * ts);
    s->o_a = take((bwd ? GCP : u) * RP * 4);
    s->o_b = take(!bwd && s->cell == GC_RNN_GRU_RESET_BEFORE ? u * RP * 4 : 0);
    s->o_red = take(8 * PERS_NT * 4);
    s->o_z = take(bwd ? (size_t)s->nsave * RP * UC * 4 : RP * GCP * 4);
    s->o_x = take(bwd ? RP * UC * 4 : RP * GCP * 4);
    s->o_s0 = take(RP * UC * 4);
    s->o_s1 = take(RP * UC * 4);
    s->o_s2 = take(RP * UC * 4);
    s->o_s3 = take(bwd ? RP * UC * 4 : 0);
    s->o_m = take(RP * 4);
    s->o_bh = take(bwd ? 0 : GCP * 4);
    if (!bwd) {
        s->o_h1 = take(u * RP * 4);
        s->o_x1 = take(RP * GCP * 4);
        s->o_m1 = take(RP * 4);
    } else {
        s->o_z1 = take((size_t)s->nsave * RP * UC * 4);
        s->o_x1 = take(RP * UC * 4);
        s->o_m1 = take(RP * 4);
        if (s->cell == GC_RNN_GRU_RESET_BEFORE) s->o_dr = take(RP * UC * 4);
        if (xc) s->o_rx = take(2 * (size_t)s->NC * RP * UC * 4);
    }
    pers_fill_divs(s);
    return o;
}

} // namespace

#endif
