/* rnn_persistent_emu.cpp -- the persistent RNN kernels (csrc/cuda/rnn_persistent_kernels.cuh)
 * compiled for the host and run with one std::thread per CUDA thread, so that their
 * indexing, masking and exchange protocol are tested on machines without a GPU
 * (tests/test_rnn_persistent_emu.py builds this file with g++ and calls it via ctypes).
 *
 * What is emulated: threadIdx / blockIdx (thread-locals), __syncthreads (a std::barrier
 * per block, __syncthreads_and with a per-block count), the dynamic shared memory (one
 * buffer per block), the exchange's 64-bit tagged words (relaxed std::atomic_ref loads
 * and stores: the word carries its own tag, so nothing stronger is needed, as on the GPU),
 * the abort word's atomics, the global timer (steady_clock), cp.async (a plain copy).
 * Every block of the grid runs at once, as the cooperative launch guarantees. float32
 * storage only (the storage type only changes the loads and stores). The grid is the
 * caller's: max_nc is the CTAs per group (fewer when u is smaller) and rows the rows per group, so small problems
 * exercise several groups and several CTAs per group. emu_set_absent leaves one block
 * out (its threads return at once) to check that the others time out and leave. */
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
#define __noinline__
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

/* __syncthreads_and: every thread of a block makes the same sequence of calls; call g
 * counts its zero predicates in slot g % 3 and clears slot (g + 2) % 3, whose last
 * readers (call g - 1) all passed call g's barrier, and whose next writers (call g + 2)
 * come after call g + 1's, which the clearing thread reaches only after clearing. */
static thread_local std::atomic<int> *emu_and; /* 3 slots per block */
static thread_local unsigned emu_and_gen;
static inline int __syncthreads_and(int p)
{
    const unsigned g = emu_and_gen++;
    if (!p) emu_and[g % 3].fetch_add(1);
    emu_bar->arrive_and_wait();
    const int all = emu_and[g % 3].load() == 0;
    emu_and[(g + 2) % 3].store(0);
    return all;
}

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
static inline int atomicExch(int *p, int v) { return std::atomic_ref<int>(*p).exchange(v); }
static inline int atomicCAS(int *p, int cmp, int v)
{
    std::atomic_ref<int>(*p).compare_exchange_strong(cmp, v);
    return cmp; /* the old value either way */
}
static inline void __nanosleep(unsigned) { std::this_thread::yield(); }
static inline unsigned __float_as_uint(float v)
{
    unsigned u;
    std::memcpy(&u, &v, 4);
    return u;
}
static inline float __uint_as_float(unsigned u)
{
    float v;
    std::memcpy(&v, &u, 4);
    return v;
}
static inline unsigned long long ll_ld(const unsigned long long *p)
{
    std::this_thread::yield(); /* two host cores and thousands of threads: let the others run */
    return std::atomic_ref<unsigned long long>(*const_cast<unsigned long long *>(p)).load(std::memory_order_relaxed);
}
/* cp.async: the copy happens at once (the kernels wait before any use) */
static inline void cp_async4(float *dst, const float *src) { *dst = *src; }
static inline void cp_async_commit() {}
static inline void cp_async_wait_all() {}
static inline void ll_st(unsigned long long *p, float v, unsigned tag)
{
    std::atomic_ref<unsigned long long>(*p).store(((unsigned long long)tag << 32) | __float_as_uint(v),
                                                  std::memory_order_relaxed);
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
    std::vector<int> flags; /* [0] abort, [1..3] status */
    std::vector<unsigned long long> xbuf;
};

/* the waits' time limit (emu_set_timeout_ms) and a block that never runs (emu_set_absent:
 * what a grid that is not all resident looks like to the others; -1 = none) */
static unsigned long long g_timeout_ns = 120ull * 1000000000ull;
static int g_absent = -1;

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
    s->timeout_ns = g_timeout_ns;
    return (B + s->R - 1) / s->R * s->NC;
}

static void prepare(const pers_shape &s, int grid, int64_t xstride, emu_ws *w, pers_sync *y)
{
    (void)s, (void)grid;
    w->flags.assign(4, 0);
    w->xbuf.assign((size_t)(2 * xstride), 0ull); /* tag 0: no exchange's (the launch's memset) */
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
    std::vector<std::atomic<int>> ands((size_t)grid * 3);
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
                emu_and = ands.data() + (size_t)b * 3;
                emu_and_gen = 0;
                emu_cbar = cbars[(size_t)(b / NC)];
                emu_csmem = bases.data() + (size_t)(b / NC * NC);
                if (b != g_absent) kern(a);
            });
    for (auto &x : th) x.join();
    for (auto *b : bars) delete b;
    for (auto *b : cbars) delete b;
    return 0;
}

} // namespace

extern "C" {

void emu_set_cluster(int on) { g_xc = on; }
void emu_set_timeout_ms(int ms) { g_timeout_ns = (unsigned long long)ms * 1000000ull; }
void emu_set_absent(int block) { g_absent = block; }

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
