/* rnn_fast.h -- the CPU backend's fused recurrence kernels (rnn_fast.c), as rnn.c calls them.
 *
 * rnn.c owns the ops rnn_fwd / rnn_bwd and their stepwise path (one GEMM per step); it
 * hands the cells the fused kernels cover (SimpleRNN, LSTM, GRU reset_after, without a
 * recurrent dropout mask) to these, with the same arguments and semantics (gpucmp.h).
 * Also the variant point cpu.rnn.simd's resolution (gemm.c has the CPU probe) and, for tests, the
 * vectorised activations on their own.
 */
#ifndef GPUCMP_RNN_FAST_H
#define GPUCMP_RNN_FAST_H

#include "gpucmp.h"

typedef struct {
    const gc_rnn_params *p;
    int64_t B, T, u;
    const float *xw, *U, *h0, *c0, *mask, *bh, *rmask;
    float *y, *save, *hT, *cT;
} gc_rnn_fwd_job;

typedef struct {
    const gc_rnn_params *p;
    int64_t B, T, u;
    const float *dy, *dhT, *dcT, *U, *save, *mask, *rmask;
    float *dxw, *dm, *dh0, *dc0;
} gc_rnn_bwd_job;

/* The variant of cpu.rnn.simd the next call runs: the forced one, else the best this CPU
 * has (GC_V_CRNN_AVX512 / _AVX2 / _GENERIC); never GC_V_CRNN_AUTO. */
int gc_cpu_rnn_variant(void);
/* 1 when the fused kernels compute this call (cell and rmask); else the stepwise path. */
int gc_cpu_rnn_fast_covers(const gc_rnn_params *p, const float *rmask);
/* The fused kernels at SIMD variant v (AVX512, AVX2 or GENERIC). */
gc_status gc_cpu_rnn_fast_fwd(int v, const gc_rnn_fwd_job *j);
gc_status gc_cpu_rnn_fast_bwd(int v, const gc_rnn_bwd_job *j);
/* Tests: y = act(x) (deriv 0) or act'(from y = act(x)) (deriv 1) over n values with the
 * activation code of variant v; GC_ERR_UNSUPPORTED when this build / CPU lacks v. */
gc_status gc_cpu_rnn_vact(int v, gc_rnn_act act, int deriv, const float *x, float *y, int64_t n);

#endif
