/* sync_latency.cu -- what one step of a persistent recurrent kernel can cost in
 * synchronisation on this GPU: grid-wide barrier, thread-block-cluster barrier, readiness
 * flags in global memory, and the kernel-launch floor it replaces.
 *
 * Why: RECURRENT_SPEC.md 2.2 -- the recurrence at batch 64, hidden 128 is bound by the
 * per-step synchronisation, not by FLOPs, and no published figure gives these latencies on
 * an H100/H200; the persistent kernel's design (flags within groups of co-resident blocks,
 * or clusters on Hopper) follows from them. Method (Zhang et al., IPDPS 2020): time a
 * kernel doing N1 and N2 barriers, the latency is the difference over N2 - N1, so launch
 * and fill costs cancel. Every figure is the median of 7 repetitions, in nanoseconds.
 *
 * Measured:
 *   grid      cooperative_groups grid.sync() with B blocks (one per SM up to the SM count)
 *   cluster   barrier.cluster.arrive.release + wait.acquire, cluster sizes 2..16, as many
 *             clusters as fit (sm_90 only)
 *   flags     groups of G blocks; per step each block publishes a release add to its
 *             group's counter and polls it (acquire loads) until all G arrived -- the
 *             persistent kernel's per-step handshake; n_groups groups at once
 *   pingpong  two blocks on different SMs alternately writing one flag (one-way latency)
 *   launch    an empty kernel per step: stream launches and the same in a CUDA graph
 * Output: one JSON object per line on stdout.
 *
 *     nvcc -O3 -arch=sm_90a -o sync_latency benchmarks/cuda/sync_latency.cu && ./sync_latency
 */
#include "cuda_check.h"
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace cg = cooperative_groups;


__global__ void grid_sync_kernel(int n)
{
    cg::grid_group g = cg::this_grid();
    for (int i = 0; i < n; i++) g.sync();
}

__device__ __forceinline__ unsigned ld_acquire(const unsigned *p)
{
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ __forceinline__ void red_release_add(unsigned *p, unsigned v)
{
    asm volatile("red.release.gpu.global.add.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/* groups of G consecutive blocks; counters[group] counts arrivals over all steps */
__global__ void flag_group_kernel(int n, int G, unsigned *counters)
{
    unsigned *ctr = counters + blockIdx.x / G;
    for (int i = 0; i < n; i++) {
        __syncthreads();
        if (threadIdx.x == 0) {
            red_release_add(ctr, 1u);
            const unsigned target = (unsigned)G * (unsigned)(i + 1);
            while (ld_acquire(ctr) < target) {
            }
        }
        __syncthreads();
    }
}

/* block 0 and block 1 take turns: block b waits for flag == i (its turn), writes i + 1 */
__global__ void pingpong_kernel(int n, unsigned *flag)
{
    if (threadIdx.x != 0) return;
    const unsigned me = blockIdx.x;
    for (int i = 0; i < n; i++) {
        const unsigned turn = 2u * i + me;
        while (ld_acquire(flag) != turn) {
        }
        asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(flag), "r"(turn + 1) : "memory");
    }
}

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define HAS_CLUSTER 1
#endif

__global__ void cluster_kernel(int n)
{
#ifdef HAS_CLUSTER
    for (int i = 0; i < n; i++) {
        asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    }
#endif
}

__global__ void empty_kernel() {}

static float time_ms(void (*launch)(void *, int), void *ctx, int n)
{
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a));
    launch(ctx, n);
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return ms;
}

/* median over 7 of (t(n2) - t(n1)) / (n2 - n1), in ns */
static double per_op_ns(void (*launch)(void *, int), void *ctx, int n1, int n2, void (*reset)(void *) = nullptr)
{
    std::vector<double> v;
    if (reset) reset(ctx);
    time_ms(launch, ctx, n1); /* warm-up */
    for (int r = 0; r < 7; r++) {
        if (reset) reset(ctx);
        const float t1 = time_ms(launch, ctx, n1);
        if (reset) reset(ctx);
        const float t2 = time_ms(launch, ctx, n2);
        v.push_back((t2 - t1) * 1e6 / (n2 - n1));
    }
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

struct GridCtx { int blocks, threads; };
static void launch_grid(void *p, int n)
{
    GridCtx *c = (GridCtx *)p;
    void *args[] = {&n};
    CK(cudaLaunchCooperativeKernel((void *)grid_sync_kernel, c->blocks, c->threads, args, 0, 0));
}

struct FlagCtx { int blocks, threads, G; unsigned *counters; };
static void reset_flags(void *p)
{
    FlagCtx *c = (FlagCtx *)p;
    CK(cudaMemset(c->counters, 0, sizeof(unsigned) * (c->blocks / c->G + 1)));
}
static void launch_flags(void *p, int n)
{
    FlagCtx *c = (FlagCtx *)p;
    void *args[] = {&n, &c->G, &c->counters};
    /* cooperative: the launch fails rather than deadlocks if the blocks cannot be co-resident */
    CK(cudaLaunchCooperativeKernel((void *)flag_group_kernel, c->blocks, c->threads, args, 0, 0));
}

static void launch_pingpong(void *p, int n)
{
    FlagCtx *c = (FlagCtx *)p;
    void *args[] = {&n, &c->counters};
    CK(cudaLaunchCooperativeKernel((void *)pingpong_kernel, 2, 32, args, 0, 0));
}

struct ClusterCtx { int cluster, clusters, threads; bool ok; };
static void launch_cluster(void *p, int n)
{
    ClusterCtx *c = (ClusterCtx *)p;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(c->cluster * c->clusters);
    cfg.blockDim = dim3(c->threads);
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = c->cluster;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    CK(cudaLaunchKernelEx(&cfg, cluster_kernel, n));
}

static void launch_empty(void *, int n)
{
    for (int i = 0; i < n; i++) empty_kernel<<<1, 32>>>();
}

struct GraphCtx { cudaGraphExec_t exec[2]; int n[2]; };
static void launch_graph(void *p, int n)
{
    GraphCtx *c = (GraphCtx *)p;
    CK(cudaGraphLaunch(c->exec[n == c->n[0] ? 0 : 1], 0));
}

int main()
{
    int dev = 0, sms = 0, cc_major = 0, cc_minor = 0;
    CK(cudaSetDevice(dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    CK(cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    CK(cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("{\"device\": \"%s\", \"sms\": %d, \"cc\": \"%d.%d\"}\n", prop.name, sms, cc_major, cc_minor);
    const int threads = 256;

    for (int blocks : {8, 16, 32, 64, sms}) {
        if (blocks > sms) continue;
        GridCtx c{blocks, threads};
        printf("{\"what\": \"grid\", \"blocks\": %d, \"threads\": %d, \"ns\": %.1f}\n", blocks, threads,
               per_op_ns(launch_grid, &c, 256, 2816));
        fflush(stdout);
    }

    unsigned *counters;
    CK(cudaMalloc(&counters, sizeof(unsigned) * (sms + 1)));
    for (int G : {2, 4, 8, 16}) {
        for (int groups : {1, 8}) {
            if (G * groups > sms) continue;
            FlagCtx c{G * groups, threads, G, counters};
            printf("{\"what\": \"flags\", \"group\": %d, \"groups\": %d, \"threads\": %d, \"ns\": %.1f}\n", G,
                   groups, threads, per_op_ns(launch_flags, &c, 256, 2816, reset_flags));
            fflush(stdout);
        }
    }
    {
        FlagCtx c{2, 32, 2, counters};
        /* each iteration is two one-way hand-offs */
        printf("{\"what\": \"pingpong\", \"ns_one_way\": %.1f}\n",
               per_op_ns(launch_pingpong, &c, 256, 2816, reset_flags) / 2.0);
        fflush(stdout);
    }

    if (cc_major >= 9) {
        CK(cudaFuncSetAttribute(cluster_kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
        for (int cl : {2, 4, 8, 16}) {
            ClusterCtx c{cl, 1, threads, true};
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(cl);
            cfg.blockDim = dim3(threads);
            cudaLaunchAttribute at[1];
            at[0].id = cudaLaunchAttributeClusterDimension;
            at[0].val.clusterDim.x = cl;
            at[0].val.clusterDim.y = 1;
            at[0].val.clusterDim.z = 1;
            cfg.attrs = at;
            cfg.numAttrs = 1;
            int max_clusters = 0;
            if (cudaOccupancyMaxActiveClusters(&max_clusters, cluster_kernel, &cfg) != cudaSuccess || max_clusters < 1) {
                cudaGetLastError();
                printf("{\"what\": \"cluster\", \"size\": %d, \"note\": \"not launchable\"}\n", cl);
                continue;
            }
            for (int n_cl : {1, max_clusters}) {
                c.clusters = n_cl;
                printf("{\"what\": \"cluster\", \"size\": %d, \"clusters\": %d, \"max_clusters\": %d, \"ns\": %.1f}\n",
                       cl, n_cl, max_clusters, per_op_ns(launch_cluster, &c, 256, 2816));
                fflush(stdout);
            }
        }
    }

    printf("{\"what\": \"launch\", \"mode\": \"stream\", \"ns\": %.1f}\n", per_op_ns(launch_empty, nullptr, 256, 2816));
    {
        GraphCtx g;
        g.n[0] = 256;
        g.n[1] = 2816;
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        for (int k = 0; k < 2; k++) {
            cudaGraph_t graph;
            CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
            for (int i = 0; i < g.n[k]; i++) empty_kernel<<<1, 32, 0, s>>>();
            CK(cudaStreamEndCapture(s, &graph));
            CK(cudaGraphInstantiate(&g.exec[k], graph, 0));
            CK(cudaGraphDestroy(graph));
        }
        printf("{\"what\": \"launch\", \"mode\": \"graph\", \"ns\": %.1f}\n", per_op_ns(launch_graph, &g, 256, 2816));
    }
    CK(cudaFree(counters));
    return 0;
}
