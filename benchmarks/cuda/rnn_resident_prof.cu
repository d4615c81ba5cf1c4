/* rnn_resident_prof.cu -- time per step of the register-resident recurrence (the kernels of
 * csrc/cuda/rnn_resident_kernels.cuh, cuda.rnn=resident) launched directly, float32, on
 * the seeds' small shapes: SimpleRNN u = 128, LSTM and GRU (reset_after, with b_h) u = 64,
 * B = 64, 128, 256, T = 100 by default; forward (with the save blocks, as in training) and
 * backward (dy of the last output and dh_T, from that forward's save). The grid is chosen
 * as rnn_resident.cu does (rows per CTA from the SMs x the occupancy). Timed with events
 * over back-to-back launches after warm-up. Output: one JSON object per line per
 * (pass, cell, shape), in the shape of rnn_persistent_prof.cu's lines.
 *
 *     nvcc -O3 -std=c++17 -arch=sm_90a -Icsrc/include -Icsrc/cuda --expt-relaxed-constexpr \
 *          -o rnn_res_prof benchmarks/cuda/rnn_resident_prof.cu
 *     ./rnn_res_prof [T] [reps] [B ...]          # default 100 20, B 64 128 256
 */
#include "cuda_check.h"
#include "rnn_resident_kernels.cuh"

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

template <int RT> static void (*fwd_kern(int KC))(rres_fwd_args) { return rres_fwd_kernel<float, RT>(KC); }
template <int RT> static void (*bwd_kern(int KC))(rres_bwd_args) { return rres_bwd_kernel<float, RT>(KC); }

/* rnn_resident.cu's choice: one row per CTA while the batch fits the SMs x the
 * occupancy, else ceil(B / that) rows in 2-row tiles; returns the occupancy used */
template <typename K>
static int plan(rres_shape *s, int bwd, int sms, K (*kern_of)(rres_shape *), size_t *smem)
{
    s->R = 1;
    *smem = rres_layout(s, bwd);
    int occ = 0;
    CK(cudaFuncSetAttribute(kern_of(s), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern_of(s), RRES_NT, *smem));
    if (s->B > sms * occ && occ > 0) {
        s->R = (s->B + sms * occ - 1) / (sms * occ);
        *smem = rres_layout(s, bwd);
        CK(cudaFuncSetAttribute(kern_of(s), cudaFuncAttributeMaxDynamicSharedMemorySize, (int)*smem));
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern_of(s), RRES_NT, *smem));
    }
    return occ;
}

static void (*fwd_of(rres_shape *s))(rres_fwd_args) { return s->R > 1 ? fwd_kern<2>(s->KC) : fwd_kern<1>(s->KC); }
static void (*bwd_of(rres_shape *s))(rres_bwd_args) { return s->R > 1 ? bwd_kern<2>(s->KC) : bwd_kern<1>(s->KC); }

int main(int argc, char **argv)
{
    const int T = argc > 1 ? atoi(argv[1]) : 100, reps = argc > 2 ? atoi(argv[2]) : 20;
    std::vector<int> Bs;
    for (int i = 3; i < argc; i++) Bs.push_back(atoi(argv[i]));
    if (Bs.empty()) Bs = {64, 128, 256};
    int sms = 0;
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    const struct {
        int cell, u;
        const char *name;
    } cells[3] = {{GC_RNN_SIMPLE, 128, "simple"}, {GC_RNN_LSTM, 64, "lstm"}, {GC_RNN_GRU, 64, "gru"}};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::mt19937 g(7);
    for (const auto &c : cells)
        for (int B : Bs) {
            const int u = c.u, cell = c.cell;
            const int G = cell == GC_RNN_SIMPLE ? 1 : cell == GC_RNN_LSTM ? 4 : 3;
            const int nsave = cell == GC_RNN_SIMPLE ? 2 : cell == GC_RNN_LSTM ? 7 : 5;
            float *xw = dev_random((size_t)B * T * G * u, 0.5f, g), *U = dev_random((size_t)u * G * u, 0.1f, g);
            float *bh = dev_random((size_t)G * u, 0.1f, g), *dy = dev_random((size_t)B * u, 1.0f, g);
            float *dhT = dev_random((size_t)B * u, 1.0f, g);
            float *out, *save, *hT, *dxw, *dm, *dh0;
            CK(cudaMalloc(&out, (size_t)B * u * 4));
            CK(cudaMalloc(&hT, (size_t)B * u * 4));
            CK(cudaMalloc(&save, (size_t)nsave * B * T * u * 4));
            CK(cudaMalloc(&dxw, (size_t)B * T * G * u * 4));
            CK(cudaMalloc(&dm, (size_t)B * T * G * u * 4));
            CK(cudaMalloc(&dh0, (size_t)B * u * 4));
            for (int bwd = 0; bwd < 2; bwd++) {
                rres_shape s;
                rres_shape_of(&s, B, T, u, cell, GC_RNN_TANH, GC_RNN_SIGMOID, 0, 0, 0);
                if (!rres_plan(&s, bwd, 0)) {
                    printf("{\"pass\": \"%s\", \"cell\": \"%s\", \"u\": %d, \"error\": \"not resident\"}\n",
                           bwd ? "bwd" : "fwd", c.name, u);
                    continue;
                }
                size_t smem = 0;
                const int occ = bwd ? plan(&s, 1, sms, bwd_of, &smem) : plan(&s, 0, sms, fwd_of, &smem);
                const int grid = (B + s.R - 1) / s.R;
                cudaFuncAttributes fa;
                float ms = 0.0f;
                if (!bwd) {
                    rres_fwd_args a = {};
                    a.s = s, a.xw = xw, a.U = U, a.bh = cell == GC_RNN_GRU ? bh : nullptr;
                    a.out = out, a.save = save, a.hT = hT;
                    auto k = fwd_of(&s);
                    CK(cudaFuncGetAttributes(&fa, k));
                    for (int w = 0; w < 3; w++) k<<<grid, RRES_NT, smem>>>(a);
                    CK(cudaGetLastError());
                    CK(cudaEventRecord(e0));
                    for (int w = 0; w < reps; w++) k<<<grid, RRES_NT, smem>>>(a);
                    CK(cudaEventRecord(e1));
                } else {
                    rres_bwd_args a = {};
                    a.s = s, a.dy = dy, a.dhT = dhT, a.U = U, a.save = save;
                    a.dxw = dxw, a.dm = cell == GC_RNN_GRU ? dm : nullptr, a.dh0 = dh0;
                    auto k = bwd_of(&s);
                    CK(cudaFuncGetAttributes(&fa, k));
                    for (int w = 0; w < 3; w++) k<<<grid, RRES_NT, smem>>>(a);
                    CK(cudaGetLastError());
                    CK(cudaEventRecord(e0));
                    for (int w = 0; w < reps; w++) k<<<grid, RRES_NT, smem>>>(a);
                    CK(cudaEventRecord(e1));
                }
                CK(cudaEventSynchronize(e1));
                CK(cudaEventElapsedTime(&ms, e0, e1));
                const double us = 1000.0 * ms / reps;
                printf("{\"pass\": \"%s\", \"variant\": \"resident\", \"cell\": \"%s\", \"B\": %d, \"T\": %d, "
                       "\"u\": %d, \"KS\": %d, \"KC\": %d, \"R\": %d, \"RT\": %d, \"grid\": %d, \"occupancy\": %d, "
                       "\"regs\": %d, \"smem\": %zu, \"us_per_launch\": %.2f, \"us_per_step\": %.3f}\n",
                       bwd ? "bwd" : "fwd", c.name, B, T, u, s.KS, s.KC, s.R, s.RT, grid, occ, fa.numRegs, smem, us,
                       us / T);
                fflush(stdout);
            }
            for (float *p : {xw, U, bh, dy, dhT, out, hT, save, dxw, dm, dh0}) CK(cudaFree(p));
        }
    return 0;
}
