/* rnn_resident_emu.cpp -- the register-resident RNN kernels (csrc/cuda/rnn_resident_kernels.cuh)
 * compiled for the host and run with one std::thread per CUDA thread, so that their thread
 * layout, shuffles, staging and masking are tested on machines without a GPU
 * (tests/test_rnn_resident_emu.py builds this file with g++ and calls it via ctypes).
 *
 * What is emulated: threadIdx / blockIdx (thread-locals), __syncthreads (a std::barrier
 * per block), the warp shuffles (a std::barrier per warp and two 32-float exchange
 * buffers used alternately: a lane writes buffer p of shuffle n only after every lane
 * passed shuffle n-1's barrier, which each reached after reading buffer p at shuffle
 * n-2), the dynamic shared memory (one buffer per block, filled with NaN bytes, so a read
 * of anything the kernel did not write shows up in the outputs). The CTAs are
 * independent (no inter-CTA exchange), so the emulation runs them one after another.
 * float32 storage only (the storage type only changes the loads and stores). The caller
 * picks the rows per CTA and may force the K-slice count, so small problems exercise
 * several row groups, row tiles of 1 and 2 and several shuffle depths. */
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
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
#define RRES_SMEM_DECL unsigned char *smem = emu_smem

static inline void __syncthreads() { emu_bar->arrive_and_wait(); }

struct emu_warp {
    std::barrier<> bar{32};
    float buf[2][32];
};
static thread_local emu_warp *emu_w;
static thread_local unsigned emu_wgen;

static inline float emu_exchange(float v, int src)
{
    const unsigned p = emu_wgen++ & 1u, lane = threadIdx.x & 31u;
    emu_w->buf[p][lane] = v;
    emu_w->bar.arrive_and_wait();
    return emu_w->buf[p][src & 31];
}
static inline float rres_shfl(float v, int src) { return emu_exchange(v, src); }
static inline float rres_shfl_xor(float v, int m) { return emu_exchange(v, (int)(threadIdx.x & 31u) ^ m); }

static inline float gc_to_f(float v) { return v; }
template <typename T> T gc_from_f(float v);
template <> inline float gc_from_f<float>(float v) { return v; }

#include "gpucmp.h"
#include "rnn_resident_kernels.cuh"

namespace {

template <typename Args> static void run(void (*kern)(Args), const Args &a, int grid, size_t smem_bytes)
{
    for (int b = 0; b < grid; b++) {
        std::vector<unsigned char> smem(smem_bytes + 16, 0xFF); /* NaN bytes */
        uintptr_t p = (uintptr_t)smem.data();
        unsigned char *base = (unsigned char *)((p + 15) & ~(uintptr_t)15);
        std::barrier<> bar(RRES_NT);
        std::vector<emu_warp> warps(RRES_NT / 32);
        std::vector<std::thread> th;
        th.reserve(RRES_NT);
        for (int t = 0; t < RRES_NT; t++)
            th.emplace_back([&, b, t] {
                blockIdx = {(unsigned)b, 0, 0};
                threadIdx = {(unsigned)t, 0, 0};
                emu_smem = base;
                emu_bar = &bar;
                emu_w = &warps[(size_t)(t / 32)];
                emu_wgen = 0;
                kern(a);
            });
        for (auto &x : th) x.join();
    }
}

/* the shape as rnn_resident.cu sets it, with the caller's rows per CTA and K slices;
 * 0 when the plan refuses */
static int setup(rres_shape *s, int B, int T, int u, int cell, int act, int ract, int seq, int zo, int gb, int bwd,
                 int want_ks, int rows, size_t *smem, int *info)
{
    rres_shape_of(s, B, T, u, cell, act, ract, seq, zo, gb);
    if (!rres_plan(s, bwd, want_ks)) return 0;
    s->R = rows < 1 ? 1 : (rows > B ? B : rows);
    *smem = rres_layout(s, bwd);
    const int grid = (B + s->R - 1) / s->R;
    if (info) info[0] = grid, info[1] = s->KS, info[2] = s->KC, info[3] = s->R, info[4] = s->RT;
    return grid;
}

template <int RT> static void (*fwd_kern(int KC))(rres_fwd_args) { return rres_fwd_kernel<float, RT>(KC); }
template <int RT> static void (*bwd_kern(int KC))(rres_bwd_args) { return rres_bwd_kernel<float, RT>(KC); }

} // namespace

extern "C" {

/* forward: float32 arrays as rnn_fwd takes them (NULL for absent optional ones); info:
 * grid, KS, KC, R, RT. Returns 0, or -1 when the plan refuses the shape. */
int emu_res_fwd(int B, int T, int u, int cell, int act, int ract, int seq, int zo, int gb, int want_ks, int rows,
                const float *xw, const float *U, const float *h0, const float *c0, const float *bh, const float *mask,
                float *y, float *save, float *hT, float *cT, int *info)
{
    rres_fwd_args a;
    size_t smem = 0;
    const int grid = setup(&a.s, B, T, u, cell, act, ract, seq, zo, gb, 0, want_ks, rows, &smem, info);
    if (!grid) return -1;
    a.xw = xw, a.U = U, a.h0 = h0, a.c0 = c0, a.bh = bh, a.mask = mask;
    a.out = y, a.save = save, a.hT = hT, a.cT = cT;
    run(a.s.RT == 1 ? fwd_kern<1>(a.s.KC) : fwd_kern<2>(a.s.KC), a, grid, smem);
    return 0;
}

int emu_res_bwd(int B, int T, int u, int cell, int act, int ract, int seq, int zo, int gb, int want_ks, int rows,
                const float *dy, const float *dhT, const float *dcT, const float *U, const float *save,
                const float *mask, float *dxw, float *dm, float *dh0, float *dc0, int *info)
{
    rres_bwd_args a;
    size_t smem = 0;
    const int grid = setup(&a.s, B, T, u, cell, act, ract, seq, zo, gb, 1, want_ks, rows, &smem, info);
    if (!grid) return -1;
    a.dy = dy, a.dhT = dhT, a.dcT = dcT, a.U = U, a.save = save, a.mask = mask;
    a.dxw = dxw, a.dm = dm, a.dh0 = dh0, a.dc0 = dc0;
    run(a.s.RT == 1 ? bwd_kern<1>(a.s.KC) : bwd_kern<2>(a.s.KC), a, grid, smem);
    return 0;
}

/* the plan alone (which shapes the resident kernels take): 1 with KS / KC in info, else 0 */
int emu_res_plan(int u, int cell, int bwd, int *info)
{
    rres_shape s;
    rres_shape_of(&s, 1, 1, u, cell, 0, 1, 0, 0, 0);
    if (!rres_plan(&s, bwd, 0)) return 0;
    if (info) info[0] = s.KS, info[1] = s.KC;
    return 1;
}
}
