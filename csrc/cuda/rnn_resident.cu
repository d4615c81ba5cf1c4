/* rnn_resident.cu -- the recurrence of SimpleRNN / LSTM / GRU (both reset variants) for
 * small recurrent kernels, one launch for all T steps, forward and backward: each CTA
 * owns a group of batch rows and holds the WHOLE recurrent kernel U in registers
 * (float32), so the CTAs never exchange anything (cuda.rnn=resident; rnn.cu's auto
 * tries it first). The arithmetic is the stepwise path's and the persistent kernels'
 * (gpucmp.h has the interface, the save layout and the masking rules): float32 FFMA
 * accumulation, expf / tanhf, no TF32; only the summation order of the products differs.
 * This file is the host side (eligibility, grid choice, launch); the kernels are in
 * rnn_resident_kernels.cuh.
 *
 * Why it is built this way: the persistent kernel (rnn_persistent.cu) splits U over NC
 * CTAs per row group and pays an L2 round trip per step for the h exchange (1.86 us per
 * SimpleRNN(128) step forward on an H200, 2.7 backward). When G*u*u floats fit in one
 * CTA's registers there is nothing to exchange: a step is a dot product from registers,
 * a few shuffles, the gate math and one __syncthreads.
 * - Grid: one CTA of RRES_NT = 256 threads per R batch rows, R = 1 while the batch fits
 *   in the SMs x the occupancy, else ceil(B / (SMs x occupancy)) (fewer when the shared
 *   memory of R rows does not fit: the CTAs then run in waves; rows are independent, so
 *   no co-residency is required: a plain launch, no cooperative attribute, no flags, no
 *   timeout, graph-capturable as an ordinary kernel node).
 * - Registers, not shared memory, for U: 64K registers per SM against 228 KB (H200) or
 *   100 KB (A4000) of shared memory; and a register operand costs no load, so the step's
 *   inner loop is one broadcast LDS.128 of h per 4 FFMA. The per-thread count KC is a
 *   template parameter (16 or 64), so the fully unrolled array stays in
 *   registers (ptxas: no stack, no spills). 64 floats per thread x 256 threads = 16384
 *   floats: SimpleRNN u <= 128 (K in 2 slices of 64), LSTM u <= 64 (4 lanes per unit, one
 *   per gate), GRU u <= 64 (the 4th gate lane idle; that keeps a unit's lanes a power of
 *   two inside one warp, so the gate values meet by shuffles instead of a second
 *   barrier through shared memory). Larger U is refused (the persistent kernel takes it).
 *   512-thread CTAs were considered: at 128 registers per thread they hold no more of U
 *   than 256 threads with 64 each, so they add nothing but barrier cost.
 * - Forward step: acc = h_{t-1} (shared, float32, double-buffered) . U_slice in 4
 *   independent FMA chains per row (2 per row in 2-row tiles when R > 1), the K-slice
 *   butterfly, each gate's activation in its own lane, the gates gathered into the unit's
 *   lane, the cell update, masks, save / y stores, h_t into the other buffer, one
 *   __syncthreads. GRU reset_before has a second in-CTA product (r*h).U_h, hence a
 *   second barrier. The next step's xw and mask are loaded into registers right after a
 *   step's barrier and stored to shared memory just before the next one, so their
 *   latency is hidden behind a whole step (RRES_PF elements per thread; more rows per CTA
 *   than that covers are copied synchronously).
 * - Backward step: the gate gradients of (row, unit j) from the staged save blocks in
 *   unit j's lane (dxw, dm written), dz into shared memory, one barrier, then dh_{t-1}[j]
 *   = direct part + dz . U^T[j] from registers (U's row j, K = G*u in slices); the
 *   butterfly leaves the sum in unit j's lanes, where the next step's gate gradients
 *   need it: again one barrier per step (reset_before: two, d(r*h) = da . U_h^T first).
 * - Storage float32 / float16 / bfloat16: converted at the loads and stores only.
 * Not taken (persistent or stepwise instead): recurrent dropout (rmask), U too large for
 * the registers (above), rows whose shared memory does not fit even one per CTA. */
#include "rnn_persistent.cuh"

#include "gpucmp_rnn_act.h"
#include "gpucmp_variants.h"

#include <limits.h>

#include "rnn_resident_kernels.cuh"

namespace {

template <typename T> static const void *kern_of(int bwd, int KC, int RT)
{
    if (bwd) return RT == 1 ? (const void *)rres_bwd_kernel<T, 1>(KC) : (const void *)rres_bwd_kernel<T, 2>(KC);
    return RT == 1 ? (const void *)rres_fwd_kernel<T, 1>(KC) : (const void *)rres_fwd_kernel<T, 2>(KC);
}

static const void *in_data(const gc_tensor *t) { return t && t->data ? t->data : NULL; }

static int common_checks(const gc_rnn_params *p, int64_t B, int64_t T, int64_t u, const void *rmask, int bwd,
                         rres_shape *s, const char **why)
{
    if (rmask) {
        *why = "recurrent dropout (rmask) is not the resident kernel's";
        return 0;
    }
    const int G = gc_rnn_gates(p->cell);
    if (G < 1 || B < 1 || T < 1 || u < 1 || B > INT_MAX / 2 || T > (1 << 26) || u > 4096 ||
        B * T * G * u > ((int64_t)1 << 40) || B * (int64_t)G * u > INT_MAX / 2) {
        *why = "the sizes are outside what the resident kernel indexes";
        return 0;
    }
    rres_shape_of(s, (int)B, (int)T, (int)u, (int)p->cell, (int)p->act, (int)p->recurrent_act, p->sequences,
                  p->zero_output_for_mask, p->go_backwards);
    if (!rres_plan(s, bwd, 0)) {
        *why = "U does not fit in one block's registers (at most 64 of its floats per thread of 256: "
               "SimpleRNN u <= 128, LSTM / GRU u <= 64)";
        return 0;
    }
    return 1;
}

/* blocks per SM (0: none fits), capped as a smaller card's SM would hold them under
 * cuda.smem_limit_kb */
static int occupancy(const gc_backend *be, const void *kern, size_t smem)
{
    if (smem > 48 * 1024 &&
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    int occ = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&occ, kern, RRES_NT, smem) != cudaSuccess) {
        (void)cudaGetLastError();
        occ = 0;
    }
    return min(occ, gc_cuda_smem_blocks_per_sm(be, smem));
}

/* R rows per CTA (the layout filled: RT tells the kernel), the grid and the shared
 * memory (the kernel's attribute raised to it where that is needed); 0 + *why
 * when not eligible on the running device */
template <typename T>
static int choose(const gc_backend *be, int bwd, rres_shape *s, int *grid, size_t *smem_out, const char **why)
{
    int dev = 0, phys = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&phys, cudaDevAttrMultiProcessorCount, dev)) {
        (void)cudaGetLastError();
        *why = "the device's attributes could not be read";
        return 0;
    }
    int sms = gc_cuda_sm_count(be);
    if (sms <= 0) sms = phys;
    const size_t optin = gc_cuda_smem_optin(be);
    const int B = s->B;
    s->R = 1;
    size_t smem = rres_layout(s, bwd);
    if (smem > optin || smem > (size_t)INT_MAX) {
        *why = "one batch row's states and staged inputs do not fit in one block's shared memory";
        return 0;
    }
    const void *k = kern_of<T>(bwd, s->KC, 1);
    const int occ1 = occupancy(be, k, smem);
    if (occ1 < 1) {
        *why = "no block of the resident kernel fits on an SM (registers or shared memory)";
        return 0;
    }
    const int64_t slots = (int64_t)sms * occ1;
    if (B > slots) {
        /* more rows per CTA (2-row tiles), as many CTAs as run at once; fewer rows (the
         * CTAs then run in waves) where their shared memory does not fit */
        rres_shape t = *s;
        t.R = (int)((B + slots - 1) / slots);
        size_t sm2 = rres_layout(&t, bwd);
        while (t.R > 2 && sm2 > optin) {
            t.R--;
            sm2 = rres_layout(&t, bwd);
        }
        const void *k2 = kern_of<T>(bwd, s->KC, 2);
        if (sm2 <= optin && occupancy(be, k2, sm2) >= 1) {
            *s = t;
            smem = sm2;
        } /* else one row per CTA, in waves (s keeps its layout) */
    }
    *grid = (B + s->R - 1) / s->R;
    *smem_out = smem;
    return 1;
}

template <typename T>
static gc_status fwd_typed(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *xw = call->in[0];
    rres_shape s;
    if (!common_checks(p, xw->shape[0], xw->shape[1], call->in[1]->shape[0], in_data(call->in[6]), 0, &s, why))
        return GC_OK;
    int grid = 0;
    size_t smem = 0;
    if (!choose<T>(be, 0, &s, &grid, &smem, why)) return GC_OK;
    rres_fwd_args a;
    a.s = s;
    a.xw = xw->data, a.U = call->in[1]->data, a.h0 = in_data(call->in[2]), a.c0 = in_data(call->in[3]);
    a.mask = (const float *)in_data(call->in[4]), a.bh = in_data(call->in[5]);
    a.out = call->out[0]->data, a.save = call->out[1] ? call->out[1]->data : NULL;
    a.hT = call->out[2] ? call->out[2]->data : NULL, a.cT = call->out[3] ? call->out[3]->data : NULL;
    void (*kern)(rres_fwd_args) = s.RT == 1 ? rres_fwd_kernel<T, 1>(s.KC) : rres_fwd_kernel<T, 2>(s.KC);
    kern<<<grid, RRES_NT, smem, gc_cuda_stream(be)>>>(a);
    gc_status st = gc_cuda_launch_check("rnn_fwd: the resident recurrence");
    if (!st) *ran = 1;
    return st;
}

template <typename T>
static gc_status bwd_typed(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    const gc_rnn_params *p = (const gc_rnn_params *)call->params;
    const gc_tensor *save = call->in[4];
    rres_shape s;
    if (!common_checks(p, save->shape[1], save->shape[2], save->shape[3], in_data(call->in[6]), 1, &s, why))
        return GC_OK;
    int grid = 0;
    size_t smem = 0;
    if (!choose<T>(be, 1, &s, &grid, &smem, why)) return GC_OK;
    rres_bwd_args a;
    a.s = s;
    a.dy = in_data(call->in[0]), a.dhT = in_data(call->in[1]), a.dcT = in_data(call->in[2]);
    a.U = call->in[3]->data, a.save = save->data, a.mask = (const float *)in_data(call->in[5]);
    a.dxw = call->out[0]->data, a.dm = call->out[1] ? call->out[1]->data : NULL;
    a.dh0 = call->out[2] ? call->out[2]->data : NULL, a.dc0 = call->out[3] ? call->out[3]->data : NULL;
    void (*kern)(rres_bwd_args) = s.RT == 1 ? rres_bwd_kernel<T, 1>(s.KC) : rres_bwd_kernel<T, 2>(s.KC);
    kern<<<grid, RRES_NT, smem, gc_cuda_stream(be)>>>(a);
    gc_status st = gc_cuda_launch_check("rnn_bwd: the resident recurrence");
    if (!st) *ran = 1;
    return st;
}

} // namespace

gc_status gc_rnn_resident_fwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    *ran = 0;
    *why = NULL;
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(call->in[0]->dtype, T, st = fwd_typed<T>(be, call, ran, why));
    return st;
}

gc_status gc_rnn_resident_bwd(const gc_backend *be, const gc_op_call *call, int *ran, const char **why)
{
    *ran = 0;
    *why = NULL;
    gc_status st = GC_OK;
    GC_CUDA_DISPATCH_FLOAT(call->in[4]->dtype, T, st = bwd_typed<T>(be, call, ran, why));
    return st;
}
