/* gemm_mma.cu -- Tensor Core GEMM through mma.sync (sm_80 and newer; what the RTX
 * A4000 / A5000 run, and the fallback on sm_90 for what the wgmma path does not take):
 * the per-device plan over the block tiles of gemm_mma.cuh.
 *
 * What it provides: gc_cuda_gemm_mma for f16 / bf16 storage (mma.m16n8k16) and f32 as
 * TF32 (mma.m16n8k8), fp32 accumulation, every transpose case, any M, N, K and any
 * alignment (the kernels and their design: gemm_mma.cuh; one gemm_mma_<tile>.cu each).
 *
 * The plan: the tile is the variant point cuda.gemm.mma_tile (forced there; `last` says
 * which ran). A tile is feasible on this device when its shared memory fits the block
 * opt-in (gc_cuda_smem_optin: the cuda.smem_limit_kb knob lowers it, so an H200 plans as
 * an sm_86 card's 99 KB) and at least one block fits an SM (the occupancy query over
 * registers, threads and shared memory, capped by the knob's per-SM memory through
 * gc_cuda_smem_blocks_per_sm); a forced tile that is not feasible is refused with the
 * reason, never launched. Auto takes the feasible tile (and split K or not) of least
 * estimated time: blocks are spread over the SMs (gc_cuda_sm_count), an SM runs
 * `resident` of them at once (wave quantisation: ceil(blocks / (SMs x resident))
 * waves), each tile's work is BM x BN x (K rounded up to its slice) at a relative
 * per-SM rate of the tile shape (bigger warp and block tiles read less shared memory and
 * L2 per mma; a lone 4-warp block hides less latency than 8 warps), and a split adds
 * the traffic of its fp32 partial sums and the reduction's launch. The rates are
 * estimates of relative speed, kept in one table (tile_rate) to be set from
 * measurements; what matters here is that the grid fills the device's SMs.
 */
#include "gemm_mma.cuh"

#include <limits.h>
#include <stdio.h>

namespace {

struct TileInfo {
    const char *name;
    int variant; /* GC_V_MMAT_* */
    int bm, bn, bkb, threads;
    size_t smem;
    const gc_mma_cfg_fns *fns;
};

#define GC_MMA_INFO_(name, v, bm, bn, bkb, wm, wn, st, minb) \
    {#name, v, bm, bn, bkb, 32 * (bm / wm) * (bn / wn), (size_t)(st) * ((bm) + (bn)) * (bkb), &gc_gemm_mma_cfg_##name},
const TileInfo TILES[] = {GC_MMA_CONFIGS(GC_MMA_INFO_)};
#undef GC_MMA_INFO_
constexpr int NTILES = (int)(sizeof TILES / sizeof TILES[0]);

/* relative mma throughput of one SM running the tile (1.0: 128 x 256, 8 warps of 64 x 64) */
double tile_rate(int variant)
{
    switch (variant) {
    case GC_V_MMAT_T128X256X64: return 1.05;
    case GC_V_MMAT_T128X256X32: return 1.0;
    case GC_V_MMAT_T128X128X64: return 0.97;
    case GC_V_MMAT_T128X128X32: return 0.95;
    case GC_V_MMAT_T128X64X32: return 0.8;
    case GC_V_MMAT_T64X64X32: return 0.6;
    default: return 0.5;
    }
}

/* occupancy per device, tile, dtype and layout: 0 unknown, -1 none, else blocks per SM
 * (the query also sets the kernel's shared-memory attribute on that device, which every
 * launch needs first) */
constexpr int MAX_DEV = 64;
int g_occ[MAX_DEV][NTILES][3][4];

int dtype_slot(int dtype) { return dtype == GC_F16 ? 0 : dtype == GC_BF16 ? 1 : 2; }

int occupancy(const TileInfo &t, int ti, const gc_gemm_desc *d)
{
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= MAX_DEV) {
        (void)cudaGetLastError();
        return t.fns->occupancy(d->dtype, d->trans_a, d->trans_b);
    }
    int *slot = &g_occ[dev][ti][dtype_slot(d->dtype)][(d->trans_a ? 2 : 0) + (d->trans_b ? 1 : 0)];
    int v = __atomic_load_n(slot, __ATOMIC_RELAXED);
    if (v == 0) {
        const int n = t.fns->occupancy(d->dtype, d->trans_a, d->trans_b);
        v = n > 0 ? n : -1;
        __atomic_store_n(slot, v, __ATOMIC_RELAXED);
    }
    return v > 0 ? v : 0;
}

/* Blocks of tile t resident per SM here (0: the tile cannot run on this device), and why
 * not in *why. */
int resident(const gc_backend *be, const TileInfo &t, int ti, const gc_gemm_desc *d, char *why, size_t n)
{
    const size_t optin = gc_cuda_smem_optin(be);
    if (t.smem > optin) {
        snprintf(why, n, "needs %zu KB of shared memory per block, this device offers %zu KB", t.smem >> 10,
                 optin >> 10);
        return 0;
    }
    int r = occupancy(t, ti, d);
    if (r <= 0) {
        snprintf(why, n, "does not fit one SM of this device (%zu KB of shared memory, %d threads)", t.smem >> 10,
                 t.threads);
        return 0;
    }
    const int lim = gc_cuda_smem_blocks_per_sm(be, t.smem);
    if (lim < r) r = lim;
    if (r <= 0) snprintf(why, n, "needs %zu KB of shared memory, more than the planned SM holds", t.smem >> 10);
    return r;
}

struct Plan {
    int tile, splits, kps;
    double cost;
};

/* estimated time, in FMA at the reference rate per SM */
double cost_of(const gc_backend *be, const TileInfo &t, int res, const gc_gemm_desc *d, int splits, int kps)
{
    const int sms = gc_cuda_sm_count(be) > 0 ? gc_cuda_sm_count(be) : 80;
    const int es = (int)gc_dtype_size((gc_dtype)d->dtype);
    const int64_t bk = t.bkb / es;
    const int64_t tiles = ((d->M + t.bm - 1) / t.bm) * ((d->N + t.bn - 1) / t.bn);
    const int64_t blocks = tiles * splits;
    const int64_t klen = ((splits > 1 ? kps : d->K) + bk - 1) / bk * bk;
    const int64_t per_sm = (blocks + sms - 1) / sms, waves = (per_sm + res - 1) / res;
    const double rate = tile_rate(t.variant), share = t.threads >= 256 ? 1.0 : 0.75;
    const double work = (double)t.bm * t.bn * (double)klen * (es == 4 ? 2.0 : 1.0); /* TF32: half rate */
    double c = (double)per_sm * work / rate;
    const double lat = (double)waves * work / (rate * share);
    if (lat > c) c = lat;
    if (splits > 1) /* partial sums written and read (8 bytes each) at ~100 FMA a byte, + a launch */
        c += 8.0 * splits * (double)d->M * (double)d->N / sms * 100.0 + 2e6;
    return c;
}

/* the better of no split and gemm.cu's split for tile t */
Plan plan_tile(const gc_backend *be, int ti, int res, const gc_gemm_desc *d)
{
    const TileInfo &t = TILES[ti];
    Plan p = {ti, 1, (int)d->K, cost_of(be, t, res, d, 1, (int)d->K)};
    int kps = 0;
    const int splits = gc_cuda_gemm_splits(be, d, t.bm, t.bn, res, 128, &kps);
    if (splits > 1) {
        const double c = cost_of(be, t, res, d, splits, kps);
        if (c < p.cost) p = Plan{ti, splits, kps, c};
    }
    return p;
}

gc_status run(const gc_backend *be, const gc_gemm_desc *d)
{
    char why[160];
    const int forced = gc_variant_forced(GC_VP_CUDA_GEMM_MMA_TILE);
    Plan best = {-1, 1, 0, 0.0};
    if (forced) {
        int ti = -1;
        for (int i = 0; i < NTILES; i++)
            if (TILES[i].variant == forced) ti = i;
        if (ti < 0) return gc_fail(GC_ERR_UNSUPPORTED, "gemm: cuda.gemm.mma_tile: no such tile in this build");
        const int res = resident(be, TILES[ti], ti, d, why, sizeof why);
        if (res <= 0)
            return gc_fail(GC_ERR_UNSUPPORTED, "gemm: the mma.sync tile %s (forced by cuda.gemm.mma_tile) %s",
                           TILES[ti].name, why);
        best = plan_tile(be, ti, res, d);
    } else {
        for (int i = 0; i < NTILES; i++) {
            const int res = resident(be, TILES[i], i, d, why, sizeof why);
            if (res <= 0) continue;
            const Plan p = plan_tile(be, i, res, d);
            if (best.tile < 0 || p.cost < best.cost) best = p;
        }
        if (best.tile < 0)
            return gc_fail(GC_ERR_UNSUPPORTED, "gemm: no mma.sync tile fits this device (the smallest %s)", why);
    }
    const TileInfo &t = TILES[best.tile];
    float *partial = NULL;
    if (best.splits > 1) {
        gc_status st = gc_cuda_workspace(be, (size_t)best.splits * d->M * d->N * sizeof(float), (void **)&partial);
        if (st) return st;
    }
    gc_variant_ran(GC_VP_CUDA_GEMM_MMA_TILE, t.variant);
    gc_status st = t.fns->launch(be, d, best.splits, best.kps, partial);
    if (st || best.splits == 1) return st;
    return gc_cuda_gemm_splitk_reduce(be, d, partial, best.splits);
}

} // namespace

extern "C" gc_status gc_cuda_gemm_mma(const gc_backend *be, const gc_gemm_desc *d, int tf32)
{
    if (gc_cuda_cc(be) < 80)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "gemm: the Tensor Core kernels need compute capability 8.0 or newer (this "
                       "device is %d.%d)",
                       gc_cuda_cc(be) / 10, gc_cuda_cc(be) % 10);
    if (d->dtype == GC_F16 || d->dtype == GC_BF16 || (d->dtype == GC_F32 && tf32)) return run(be, d);
    return gc_fail(GC_ERR_DTYPE, "gemm: the mma.sync path takes f16, bf16 or f32 as TF32");
}
