/* rnn_persistent.cu -- the recurrence of SimpleRNN / LSTM / GRU (both reset variants) as
 * ONE kernel launch for all T steps, forward and backward (BPTT); rnn.cu uses it for the
 * shapes it takes (gc_rnn_persistent_fwd / _bwd, rnn_persistent.cuh) and its stepwise
 * loop otherwise. The arithmetic is the stepwise path's (gpucmp.h has the interface, the
 * save layout and the masking rules): float32 FFMA accumulation, expf / tanhf, no TF32.
 * This file is the host side (grid choice, workspace, launch, status check); the kernels
 * are in rnn_persistent_kernels.cuh.
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
 *   and masks; each new h value goes to an exchange buffer in global memory (L2) at once,
 *   as one 64-bit word with the exchange's ordinal in its high half, before the step's
 *   y / save writes; the peers poll the words of the group's whole h themselves
 *   (ld.relaxed.gpu) until they carry the ordinal: one L2 round trip per exchange, no
 *   fence, no counter (the word is single-copy atomic: its tag vouches for its value;
 *   a reader takes only the exact ordinal it waits for, so a protocol error would show
 *   as a timeout, never as a wrong value). The next step's xw and mask come by cp.async,
 *   issued a step ahead by the threads without gate items (float32; the half types stage
 *   them while the exchange's loads are in flight); h, xw and the mask are
 *   double-buffered, so a step needs no barrier between its gate loop and the next
 *   gather. GRU reset_before exchanges twice per step (h, then r*h).
 * - Backward step: each CTA computes its units' gate gradients dz from the saved
 *   activations, then its partial dh_{t-1} over ALL u units, dz_own . U_slice^T (the same
 *   slice as the forward), and exchanges these partials; every CTA sums the NC partials
 *   of its own units in CTA order (deterministic) and adds the direct part. reset_before
 *   exchanges twice (d(r*h), then dh). dxw / dm / dh0 / dc0 are written as rnn.cu does.
 *   The previous step's saved activations, dy and mask come by cp.async as above.
 * - Exchange buffers alternate by the exchange ordinal's parity: a CTA writes ordinal
 *   o + 2's data only after reading ordinal o + 1's from every peer, which each peer put
 *   after it had read ordinal o's, so two buffers suffice whatever the exchanges per
 *   step. The buffers are zeroed before each launch (tag 0 is no exchange's).
 * - Co-residency (the flags would deadlock otherwise): a cooperative launch
 *   (cudaLaunchAttributeCooperative, valid in stream capture: a cooperative kernel node),
 *   whose grid is sized from the occupancy query x the SMs the backend reports (its
 *   green-context grant under GPUCMP_CUDA_SMS), so the driver refuses any grid that could
 *   not all be resident. Every wait is bounded in time (globaltimer, default 2 s,
 *   GPUCMP_RNN_TIMEOUT_MS): a CTA that gives up sets the launch's abort word (every CTA
 *   then leaves) and the backend's error flag slots 4-6 (code, exchange ordinal, block);
 *   a call outside capture resets the slots before and reads them after (one stream
 *   sync, as the embedding's bad-index check does) and returns a clear error.
 * - Graph capture: the exchange buffers and the abort word live in the backend
 *   workspace and are zeroed by a cudaMemsetAsync before each launch; nothing is allocated once the
 *   workspace is sized (an eager call of the same shape sizes it).
 * Not taken (stepwise instead): recurrent dropout (rmask), a slice of U that does not fit
 * the per-block shared memory with NC <= 16, a grid that cannot be co-resident, a device
 * without cooperative launch.
 *
 * The cluster variant (cuda.rnn=cluster, sm_90 and newer; gc_rnn_cluster_fwd / _bwd): the
 * same kernels (rnn_pers_fwd / _bwd with XC = 1), one group = one thread-block cluster of
 * NC CTAs (cudaLaunchAttributeClusterDimension; NC = 16 needs the non-portable cluster
 * size). The exchange is a store into every peer's shared memory (mapa +
 * st.shared::cluster) and one hardware cluster barrier (arrive.release / wait.acquire) per
 * exchange instead of the global tagged words and their polling: no L2 round trip,
 * no timeout (a hardware barrier cannot be left waiting: every CTA runs the same barrier
 * sequence), no workspace, no co-residency requirement between groups (each cluster's
 * CTAs are co-scheduled by the hardware; clusters are independent). The clusters' count
 * comes from cudaOccupancyMaxActiveClusters, capped by the backend's SMs / NC. Cluster
 * launches are ordinary kernel nodes in stream capture (the cluster dimension is a node
 * attribute). */
#include "rnn_persistent.cuh"

#include "gpucmp_rnn_act.h"
#include "gpucmp_variants.h"

#include <limits.h>
#include <stdlib.h>

#include "rnn_persistent_kernels.cuh"

namespace {

/* ------------------------------------------------------------------ host: the plan */

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
    pers_pick_nc(s, ts, 0);
    const int NC = s->NC;
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
    occ = min(occ, gc_cuda_smem_blocks_per_sm(be, smem)); /* a smaller card's SM under cuda.smem_limit_kb */
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
        occ2 = min(occ2, gc_cuda_smem_blocks_per_sm(be, smem2));
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

/* Workspace: [the abort word: 256 bytes][2 exchange buffers of xstride words], all
 * zeroed on the stream before each launch (a tag 0 is no exchange's: what a launch reads
 * is its own); resets the error slots outside capture. */
static gc_status prepare(const gc_backend *be, int64_t xstride, pers_sync *y)
{
    const size_t ctl = 256, bytes = ctl + 2 * (size_t)xstride * sizeof(unsigned long long);
    void *ws = NULL;
    gc_status st = gc_cuda_workspace(be, bytes, &ws);
    if (st) return st;
    int32_t *flag = gc_cuda_err_flag(be);
    if (!flag) return gc_fail(GC_ERR_BACKEND, "rnn: the backend has no error flag");
    cudaStream_t str = gc_cuda_stream(be);
    GC_CUDA_TRY(cudaMemsetAsync(ws, 0, bytes, str));
    if (!gc_cuda_capturing(be)) GC_CUDA_TRY(cudaMemsetAsync(flag + PERS_ERR_SLOT, 0, 3 * sizeof(int32_t), str));
    y->abort = (int *)ws;
    y->status = flag + PERS_ERR_SLOT;
    y->xbuf = (unsigned long long *)((char *)ws + ctl);
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
    if (G < 1 || B < 1 || T < 1 || u < 1 || B > INT_MAX / 2 || T > (1 << 26) || u > 4096) {
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
    gc_status st = prepare(be, (int64_t)s.B * s.u, &a.y);
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
    gc_status st = prepare(be, (int64_t)s.NC * s.B * s.u, &a.y);
    if (st) return st;
    a.dy = in_data(call->in[0]), a.dhT = in_data(call->in[1]), a.dcT = in_data(call->in[2]);
    a.U = call->in[3]->data, a.save = save->data, a.mask = (const float *)in_data(call->in[5]);
    a.dxw = call->out[0]->data, a.dm = call->out[1] ? call->out[1]->data : NULL;
    a.dh0 = call->out[2] ? call->out[2]->data : NULL, a.dc0 = call->out[3] ? call->out[3]->data : NULL;
    return launch(be, rnn_pers_bwd<T>, a, grid, smem, "rnn_bwd", forced, ran, why);
}

/* ------------------------------------------------------------------ the cluster variant */

/* Holds 256 bytes of static shared memory in sm_90+ code only: cudaFuncGetAttributes on
 * it tells whether the image the driver picked for this device has the cluster kernels. */
__global__ void rnn_cluster_probe(int *p)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    __shared__ int sh[64];
    sh[threadIdx.x & 63] = (int)threadIdx.x;
    __syncthreads();
    if (p) p[threadIdx.x] = sh[(threadIdx.x + 1) & 63];
#else
    (void)p;
#endif
}

static int cluster_compiled(const gc_backend *be, const char **why)
{
    static int known[64]; /* per device: 0 unknown, 1 yes, 2 no */
    if (gc_cuda_cc(be) < 90) {
        *why = "thread-block clusters need compute capability 9.0 or newer";
        return 0;
    }
    const int dev = be->device_index;
    if (dev < 0 || dev >= 64 || !known[dev]) {
        cudaFuncAttributes fa;
        int yes = 0;
        if (cudaFuncGetAttributes(&fa, rnn_cluster_probe) == cudaSuccess)
            yes = fa.sharedSizeBytes >= 256;
        else
            (void)cudaGetLastError();
        if (dev < 0 || dev >= 64) {
            if (!yes) *why = "the build has no sm_90 image of the cluster kernels for this device";
            return yes;
        }
        known[dev] = yes ? 1 : 2;
    }
    if (known[dev] != 1) *why = "the build has no sm_90 image of the cluster kernels for this device";
    return known[dev] == 1;
}

/* NC CTAs per cluster, R rows per cluster: as many clusters as run at once (at most the
 * backend's SMs / NC, at most B). *grid = clusters * NC. 0 + *why when not eligible. */
static int choose_cluster(const gc_backend *be, const void *kern, int bwd, size_t ts, pers_shape *s, int *grid,
                          size_t *smem_out, const char **why)
{
    if (!cluster_compiled(be, why)) return 0;
    pers_pick_nc(s, ts, 0);
    const int NC = s->NC;
    if (NC > PERS_MAX_NC) {
        *why = "more CTAs per cluster than 16";
        return 0;
    }
    int dev = 0, phys = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&phys, cudaDevAttrMultiProcessorCount, dev)) {
        (void)cudaGetLastError();
        *why = "the device's attributes could not be read";
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
    size_t smem = layout(s, bwd, ts, 1);
    if (smem > optin || smem > (size_t)INT_MAX) {
        *why = "the slice of U, the group's states and the receive buffers do not fit in one block's shared memory";
        return 0;
    }
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess ||
        (NC > 8 && cudaFuncSetAttribute(kern, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess)) {
        (void)cudaGetLastError();
        *why = NC > 8 ? "the kernel's shared memory or its non-portable cluster size (16) could not be set"
                      : "the kernel's shared memory could not be raised to what it needs";
        return 0;
    }
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)NC, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)(NG * NC), 1, 1);
    cfg.blockDim = dim3(PERS_NT, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kern, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        clusters = 0;
    }
    if (clusters < 1) {
        *why = "no cluster of the kernel fits on the device (cudaOccupancyMaxActiveClusters is 0)";
        return 0;
    }
    if (clusters < NG) {
        /* fewer clusters run at once than the SMs suggest: fewer, taller groups where they
         * fit, else the same groups in waves (clusters are independent: correct, slower) */
        pers_shape t = *s;
        t.R = (B + clusters - 1) / clusters;
        const size_t smem2 = layout(&t, bwd, ts, 1);
        if (smem2 <= optin && smem2 <= (size_t)INT_MAX &&
            cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem2) == cudaSuccess) {
            *s = t;
            smem = smem2;
        } else {
            (void)cudaGetLastError(); /* s keeps its layout and the attribute set for it */
        }
    }
    NG = (B + s->R - 1) / s->R;
    *grid = NG * NC;
    *smem_out = smem;
    s->timeout_ns = 0;
    return 1;
}

template <typename Args>
static gc_status launch_cluster(const gc_backend *be, void (*kern)(Args), Args args, int grid, size_t smem,
                                const char *what, int *ran)
{
    cudaLaunchConfig_t cfg = {};
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = (unsigned)args.s.NC, attr[0].val.clusterDim.y = 1, attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3((unsigned)grid, 1, 1);
    cfg.blockDim = dim3(PERS_NT, 1, 1);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = gc_cuda_stream(be);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    cudaError_t e = cudaLaunchKernelEx(&cfg, kern, args);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gc_fail(GC_ERR_BACKEND,
                       "%s: the cluster recurrence kernel (grid %d x %d threads, clusters of %d, %zu bytes of shared "
                       "memory) did not launch: %s",
                       what, grid, PERS_NT, args.s.NC, smem, cudaGetErrorString(e));
    }
    *ran = 1;
    return GC_OK;
}

template <typename T>
static gc_status cluster_fwd_typed(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *xw = call->in[0];
    pers_shape s;
    if (!common_checks(p, xw->shape[0], xw->shape[1], call->in[1]->shape[0], in_data(call->in[6]), &s, why))
        return GC_OK;
    int grid = 0;
    size_t smem = 0;
    if (!choose_cluster(be, (const void *)rnn_pers_fwd<T, 1>, 0, sizeof(T), &s, &grid, &smem, why)) return GC_OK;
    pers_fwd_args a = {};
    a.s = s;
    a.xw = xw->data, a.U = call->in[1]->data, a.h0 = in_data(call->in[2]), a.c0 = in_data(call->in[3]);
    a.mask = (const float *)in_data(call->in[4]), a.bh = in_data(call->in[5]);
    a.out = call->out[0]->data, a.save = call->out[1] ? call->out[1]->data : NULL;
    a.hT = call->out[2] ? call->out[2]->data : NULL, a.cT = call->out[3] ? call->out[3]->data : NULL;
    return launch_cluster(be, rnn_pers_fwd<T, 1>, a, grid, smem, "rnn_fwd", ran);
}

template <typename T>
static gc_status cluster_bwd_typed(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *save = call->in[4];
    pers_shape s;
    if (!common_checks(p, save->shape[1], save->shape[2], save->shape[3], in_data(call->in[6]), &s, why))
        return GC_OK;
    int grid = 0;
    size_t smem = 0;
    if (!choose_cluster(be, (const void *)rnn_pers_bwd<T, 1>, 1, sizeof(T), &s, &grid, &smem, why)) return GC_OK;
    pers_bwd_args a = {};
    a.s = s;
    a.dy = in_data(call->in[0]), a.dhT = in_data(call->in[1]), a.dcT = in_data(call->in[2]);
    a.U = call->in[3]->data, a.save = save->data, a.mask = (const float *)in_data(call->in[5]);
    a.dxw = call->out[0]->data, a.dm = call->out[1] ? call->out[1]->data : NULL;
    a.dh0 = call->out[2] ? call->out[2]->data : NULL, a.dc0 = call->out[3] ? call->out[3]->data : NULL;
    return launch_cluster(be, rnn_pers_bwd<T, 1>, a, grid, smem, "rnn_bwd", ran);
}

} // namespace

int gc_rnn_cluster_available(const gc_backend *be, const char **why) { return cluster_compiled(be, why); }

gc_status gc_rnn_cluster_fwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    *ran = 0;
    *why = NULL;
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = cluster_fwd_typed<T>(be, call, ran, why));
    return st;
}

gc_status gc_rnn_cluster_bwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    *ran = 0;
    *why = NULL;
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(call->in[4]->dtype, T, st = cluster_bwd_typed<T>(be, call, ran, why));
    return st;
}

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
