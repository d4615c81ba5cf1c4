/* rnn_persistent_emu.cpp -- the persistent RNN kernels (csrc/cuda/rnn_persistent_kernels.cuh)
 * compiled for the host and run with one std::thread per CUDA thread, so that their
 * indexing, masking and exchange protocol are tested on machines without a GPU
 * (tests/test_rnn_persistent_emu.py builds this file with g++ and calls it via ctypes).
 *
 * What is emulated: threadIdx / blockIdx (thread-locals), __syncthreads (a std::barrier
 * per block), the dynamic shared memory (one buffer per block), the counters' atomics and
 * the PTX acquire load (std::atomic_ref; the release side is an acq_rel RMW, which is
 * what the CUDA fence + atomicAdd pair amounts to), the global timer (steady_clock).
 * Every block of the grid runs at once, as the cooperative launch guarantees. float32
 * storage only (the storage type only changes the loads and stores). The grid is the
 * caller's: max_nc is the CTAs per group (fewer when u is smaller) and rows the rows per group, so small problems
 * exercise several groups and several CTAs per group. */
#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>
#include <vector>

#define GC_RNN_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct emu_dim {
    unsigned x, y, z;
};
static thread_local emu_dim threadIdx, blockIdx;
struct float4 {
    float x, y, z, w;
};
static thread_local unsigned char *emu_smem;
static thread_local std::barrier<> *emu_bar;
#define PERS_SMEM_DECL unsigned char *smem = emu_smem

static inline void __syncthreads() { emu_bar->arrive_and_wait(); }

/* the cluster exchange (XC = 1): a std::barrier over the cluster's threads (split into
 * arrive / wait with the token), and the cluster's shared-memory bases for the remote stores */
static thread_local std::barrier<> *emu_cbar;
static thread_local std::optional<std::barrier<>::arrival_token> emu_tok;
static thread_local unsigned char *const *emu_csmem;
static inline void cl_arrive() { emu_tok.emplace(emu_cbar->arrive()); }
static inline void cl_wait()
{
    emu_cbar->wait(std::move(*emu_tok));
    emu_tok.reset();
}
static inline void cl_sync() { emu_cbar->arrive_and_wait(); }
static inline void cl_st(float *p, unsigned rank, float v)
{
    const ptrdiff_t off = (unsigned char *)p - emu_smem;
    *(float *)(emu_csmem[rank] + off) = v;
}
#ifdef __SANITIZE_THREAD__ /* TSan does not model fences; the RMW and the loads carry the order */
static inline void __threadfence() {}
#else
static inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
#endif
static inline unsigned atomicAdd(unsigned *p, unsigned v)
{
    return std::atomic_ref<unsigned>(*p).fetch_add(v, std::memory_order_acq_rel);
}
static inline int atomicExch(int *p, int v) { return std::atomic_ref<int>(*p).exchange(v); }
static inline int atomicCAS(int *p, int cmp, int v)
{
    std::atomic_ref<int>(*p).compare_exchange_strong(cmp, v);
    return cmp; /* the old value either way */
}
static inline void __nanosleep(unsigned) { std::this_thread::yield(); }
static inline float __ldcg(const float *p) { return *p; }
static inline unsigned ld_acquire_u32(const unsigned *p)
{
    std::this_thread::yield(); /* two host cores and thousands of threads: let the others run */
    return std::atomic_ref<unsigned>(*const_cast<unsigned *>(p)).load(std::memory_order_acquire);
}
static inline int ld_relaxed_s32(const int *p)
{
    return std::atomic_ref<int>(*const_cast<int *>(p)).load(std::memory_order_relaxed);
}
static inline unsigned long long global_ns()
{
    return (unsigned long long)std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
}
using std::min;
static inline float gc_to_f(float v) { return v; }
template <typename T> T gc_from_f(float v);
template <> inline float gc_from_f<float>(float v) { return v; }

#include "gpucmp.h"
#include "rnn_persistent_kernels.cuh"

namespace {

struct emu_ws {
    std::vector<unsigned> cnt;
    std::vector<int> flags; /* [0] abort, [1..3] status */
    std::vector<float> xbuf;
};

/* the shape as rnn_persistent.cu's common_checks + choose set it, with the caller's grid */
static int setup(pers_shape *s, int B, int T, int u, int cell, int act, int ract, int seq, int zo, int gb, int bwd,
                 int max_nc, int rows)
{
    *s = pers_shape();
    static const int gates[4] = {1, 4, 3, 3}, blocks[4] = {2, 7, 5, 5}; /* gpucmp.h (core/ is not linked) */
    s->B = B, s->T = T, s->u = u, s->G = gates[cell & 3];
    s->cell = cell, s->act = act, s->ract = ract, s->seq = seq, s->zo = zo, s->gb = gb;
    s->nsave = blocks[cell & 3];
    s->blk = (int64_t)B * T * u;
    pers_pick_nc(s, sizeof(float), max_nc);
    s->R = rows < 1 ? 1 : (rows > B ? B : rows);
    (void)layout(s, bwd, sizeof(float));
    s->timeout_ns = 120ull * 1000000000ull;
    return (B + s->R - 1) / s->R * s->NC;
}

static void prepare(const pers_shape &s, int grid, int64_t xstride, emu_ws *w, pers_sync *y)
{
    w->cnt.assign((size_t)(grid / s.NC) * PERS_CNT_STRIDE, 0u);
    w->flags.assign(4, 0);
    w->xbuf.assign((size_t)(2 * xstride), NAN); /* unwritten exchange data shows as NaN */
    y->cnt = w->cnt.data();
    y->abort = &w->flags[0];
    y->status = &w->flags[1];
    y->xbuf = w->xbuf.data();
    y->xstride = xstride;
}

/* nonzero: the next calls run the cluster kernels (emu_set_cluster) */
static int g_xc;

template <typename Args> static int run(void (*kern)(Args), const Args &a, int grid, size_t smem_bytes)
{
    const int NC = a.s.NC;
    std::vector<std::vector<unsigned char>> smem((size_t)grid);
    std::vector<std::barrier<> *> bars((size_t)grid), cbars((size_t)(grid / NC));
    std::vector<unsigned char *> bases((size_t)grid);
    std::vector<std::thread> th;
    for (int b = 0; b < grid; b++) {
        smem[(size_t)b].assign(smem_bytes + 16, 0xCD); /* garbage, as shared memory starts */
        bars[(size_t)b] = new std::barrier<>(PERS_NT);
        uintptr_t p = (uintptr_t)smem[(size_t)b].data();
        bases[(size_t)b] = (unsigned char *)((p + 15) & ~(uintptr_t)15);
    }
    for (auto &c : cbars) c = new std::barrier<>((ptrdiff_t)NC * PERS_NT);
    for (int b = 0; b < grid; b++)
        for (int t = 0; t < PERS_NT; t++)
            th.emplace_back([&, b, t] {
                blockIdx = {(unsigned)b, 0, 0};
                threadIdx = {(unsigned)t, 0, 0};
                emu_smem = bases[(size_t)b];
                emu_bar = bars[(size_t)b];
                emu_cbar = cbars[(size_t)(b / NC)];
                emu_csmem = bases.data() + (size_t)(b / NC * NC);
                kern(a);
            });
    for (auto &x : th) x.join();
    for (auto *b : bars) delete b;
    for (auto *b : cbars) delete b;
    return 0;
}

} // namespace

extern "C" {

void emu_set_cluster(int on) { g_xc = on; }

/* forward: float32 arrays as rnn_fwd takes them (NULL for absent optional ones); returns
 * the status word (0 = finished, else the timeout code) */
int emu_rnn_fwd(int B, int T, int u, int cell, int act, int ract, int seq, int zo, int gb, int max_nc, int rows,
                const float *xw, const float *U, const float *h0, const float *c0, const float *bh, const float *mask,
                float *y, float *save, float *hT, float *cT, int *grid_out)
{
    pers_fwd_args a;
    const int grid = setup(&a.s, B, T, u, cell, act, ract, seq, zo, gb, 0, max_nc, rows);
    const size_t smem = layout(&a.s, 0, sizeof(float), g_xc);
    emu_ws w;
    prepare(a.s, grid, (int64_t)B * u, &w, &a.y);
    a.xw = xw, a.U = U, a.h0 = h0, a.c0 = c0, a.bh = bh, a.mask = mask;
    a.out = y, a.save = save, a.hT = hT, a.cT = cT;
    if (grid_out) grid_out[0] = grid, grid_out[1] = a.s.NC, grid_out[2] = a.s.R;
    if (g_xc) run(rnn_pers_fwd<float, 1>, a, grid, smem);
    else run(rnn_pers_fwd<float>, a, grid, smem);
    return w.flags[1];
}

int emu_rnn_bwd(int B, int T, int u, int cell, int act, int ract, int seq, int zo, int gb, int max_nc, int rows,
                const float *dy, const float *dhT, const float *dcT, const float *U, const float *save,
                const float *mask, float *dxw, float *dm, float *dh0, float *dc0, int *grid_out)
{
    pers_bwd_args a;
    const int grid = setup(&a.s, B, T, u, cell, act, ract, seq, zo, gb, 1, max_nc, rows);
    const size_t smem = layout(&a.s, 1, sizeof(float), g_xc);
    emu_ws w;
    prepare(a.s, grid, (int64_t)a.s.NC * B * u, &w, &a.y);
    a.dy = dy, a.dhT = dhT, a.dcT = dcT, a.U = U, a.save = save, a.mask = mask;
    a.dxw = dxw, a.dm = dm, a.dh0 = dh0, a.dc0 = dc0;
    if (grid_out) grid_out[0] = grid, grid_out[1] = a.s.NC, grid_out[2] = a.s.R;
    if (g_xc) run(rnn_pers_bwd<float, 1>, a, grid, smem);
    else run(rnn_pers_bwd<float>, a, grid, smem);
    return w.flags[1];
}
}
