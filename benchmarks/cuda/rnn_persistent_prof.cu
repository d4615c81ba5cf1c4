/* rnn_persistent_prof.cu -- where a step of the persistent recurrence goes: the kernels of
 * csrc/cuda/rnn_persistent_kernels.cuh (flags exchange, float32) launched directly on
 * the seeds' LSTM shape, timed per launch with events and, built with -DGC_RNN_PROF,
 * split into phases by clock64 marks of thread 0 of block 0 (the CTA's view: a phase
 * that ends at a barrier includes the wait for the slowest thread).
 *
 * Why a standalone program: the phases are inside one kernel launch (no profiler sees
 * them), and the grid (CTAs per group, rows per group) can be swept here without
 * changing the library's choice. Output: one JSON object per line.
 *
 *     nvcc -O3 -std=c++17 -arch=sm_90a -Icsrc/include -Icsrc/cuda --expt-relaxed-constexpr \
 *          [-DGC_RNN_PROF] -o rnn_prof benchmarks/cuda/rnn_persistent_prof.cu
 *     ./rnn_prof [B T u cell] [nc ...]        # default 64 100 128 1 (LSTM), nc 4 8 16
 */
#include "cuda_check.h"
#include "rnn_persistent_kernels.cuh"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>


static float *dev_random(size_t n, float scale, std::mt19937 &g)
{
    std::uniform_real_distribution<float> d(-scale, scale);
    std::vector<float> h(n);
    for (auto &v : h) v = d(g);
    float *p = nullptr;
    CK(cudaMalloc(&p, n * sizeof(float)));
    CK(cudaMemcpy(p, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    return p;
}

template <typename Args>
static void launch(void (*kern)(Args), const Args &a, int grid, size_t smem, unsigned long long *xbuf,
                   size_t xbytes, int *abort_word)
{
    CK(cudaMemsetAsync(xbuf, 0, xbytes));
    CK(cudaMemsetAsync(abort_word, 0, 4 * sizeof(int)));
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.gridDim = dim3((unsigned)grid);
    cfg.blockDim = dim3(PERS_NT);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, kern, a));
}

int main(int argc, char **argv)
{
    const int B = argc > 1 ? atoi(argv[1]) : 64, T = argc > 2 ? atoi(argv[2]) : 100;
    const int u = argc > 3 ? atoi(argv[3]) : 128, cell = argc > 4 ? atoi(argv[4]) : GC_RNN_LSTM;
    std::vector<int> ncs;
    for (int i = 5; i < argc; i++) ncs.push_back(atoi(argv[i]));
    if (ncs.empty()) ncs = {4, 8, 16};
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const int G = cell == GC_RNN_SIMPLE ? 1 : cell == GC_RNN_LSTM ? 4 : 3;
    const int nsave = cell == GC_RNN_SIMPLE ? 2 : cell == GC_RNN_LSTM ? 7 : 5;
    std::mt19937 g(7);
    float *xw = dev_random((size_t)B * T * G * u, 0.5f, g), *U = dev_random((size_t)u * G * u, 0.1f, g);
    float *bh = dev_random((size_t)G * u, 0.1f, g), *dy = dev_random((size_t)B * u, 1.0f, g);
    float *out, *save, *dxw, *dm, *dh0;
    CK(cudaMalloc(&out, (size_t)B * u * 4));
    CK(cudaMalloc(&save, (size_t)nsave * B * T * u * 4));
    CK(cudaMalloc(&dxw, (size_t)B * T * G * u * 4));
    CK(cudaMalloc(&dm, (size_t)B * T * G * u * 4));
    CK(cudaMalloc(&dh0, (size_t)B * u * 4));
    int *ctl;
    CK(cudaMalloc(&ctl, 64 * sizeof(int)));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    for (int want : ncs) {
        for (int bwd = 0; bwd < 2; bwd++) {
            pers_shape s = pers_shape();
            s.B = B, s.T = T, s.u = u, s.G = G, s.cell = cell, s.act = GC_RNN_TANH, s.ract = GC_RNN_SIGMOID;
            s.seq = 0, s.zo = 0, s.gb = 0, s.nsave = nsave, s.blk = (int64_t)B * T * u;
            s.timeout_ns = 2000000000ull;
            pers_pick_nc(&s, 4, want);
            int NG = std::max(1, std::min(B, sms / s.NC));
            s.R = (B + NG - 1) / NG;
            NG = (B + s.R - 1) / s.R;
            const size_t smem = layout(&s, bwd, 4);
            const int grid = NG * s.NC;
            const int64_t xstride = bwd ? (int64_t)s.NC * B * u : (int64_t)B * u;
            unsigned long long *xbuf;
            CK(cudaMalloc(&xbuf, 2 * (size_t)xstride * 8));
            pers_sync y;
            y.abort = ctl, y.status = ctl + 1, y.xbuf = xbuf, y.xstride = xstride;
            float ms_total = 0.0f;
            const int reps = 20;
            unsigned long long prof[8] = {0};
            if (!bwd) {
                auto k = rnn_pers_fwd<float, 0>;
                CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                pers_fwd_args a = {};
                a.s = s, a.y = y, a.xw = xw, a.U = U, a.bh = cell == GC_RNN_GRU ? bh : nullptr;
                a.out = out, a.save = save;
                for (int w = 0; w < 3; w++) launch(k, a, grid, smem, xbuf, 2 * (size_t)xstride * 8, ctl);
#ifdef GC_RNN_PROF
                CK(cudaMemcpyToSymbol(g_pers_prof, prof, sizeof prof, 0));
#endif
                CK(cudaEventRecord(e0));
                for (int w = 0; w < reps; w++) launch(k, a, grid, smem, xbuf, 2 * (size_t)xstride * 8, ctl);
                CK(cudaEventRecord(e1));
            } else {
                auto k = rnn_pers_bwd<float, 0>;
                CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
                pers_bwd_args a = {};
                a.s = s, a.y = y, a.dy = dy, a.U = U, a.save = save;
                a.dxw = dxw, a.dm = cell == GC_RNN_GRU ? dm : nullptr, a.dh0 = dh0;
                for (int w = 0; w < 3; w++) launch(k, a, grid, smem, xbuf, 2 * (size_t)xstride * 8, ctl);
#ifdef GC_RNN_PROF
                CK(cudaMemcpyToSymbol(g_pers_prof, prof, sizeof prof, sizeof prof));
#endif
                CK(cudaEventRecord(e0));
                for (int w = 0; w < reps; w++) launch(k, a, grid, smem, xbuf, 2 * (size_t)xstride * 8, ctl);
                CK(cudaEventRecord(e1));
            }
            CK(cudaEventSynchronize(e1));
            CK(cudaEventElapsedTime(&ms_total, e0, e1));
            int st[4];
            CK(cudaMemcpy(st, ctl, sizeof st, cudaMemcpyDeviceToHost));
#ifdef GC_RNN_PROF
            CK(cudaMemcpyFromSymbol(prof, g_pers_prof, sizeof prof, bwd ? sizeof prof : 0));
#endif
            int clk_khz = 0;
            CK(cudaDeviceGetAttribute(&clk_khz, cudaDevAttrClockRate, 0));
            const double us = 1000.0 * ms_total / reps;
            printf("{\"pass\": \"%s\", \"B\": %d, \"T\": %d, \"u\": %d, \"cell\": %d, \"NC\": %d, \"R\": %d, "
                   "\"grid\": %d, \"smem\": %zu, \"us_per_launch\": %.2f, \"us_per_step\": %.3f, \"status\": %d",
                   bwd ? "bwd" : "fwd", B, T, u, cell, s.NC, s.R, grid, smem, us, us / T, st[1]);
            /* phase cycles per step per launch, in ns at the nominal clock */
            printf(", \"phase_ns_per_step\": [");
            for (int i = 0; i < 8; i++)
                printf("%s%.1f", i ? ", " : "", clk_khz ? prof[i] * 1e6 / clk_khz / reps / T : 0.0);
            printf("]}\n");
            fflush(stdout);
            CK(cudaFree(xbuf));
        }
    }
    return 0;
}
