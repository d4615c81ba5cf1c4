/* launch_log.cu -- which kernels an op launches, with what grid, and what grid it would
 * launch on a device with a different number of SMs (gpucmp_cuda.h).
 *
 * What it provides: gc_cuda_launch_log_begin(sms) / gc_cuda_launch_log_end() around a
 * call record every kernel launch of this process in between: its name, grid, block,
 * dynamic shared memory and how many of its blocks one SM holds at once (the occupancy
 * query). sms > 0 also makes the backend report that many SMs to its kernels
 * (gc_cuda_sm_count) while the log is open, so an op sizes its grid -- split K,
 * grid-stride caps, persistent tiles -- as it would on such a device; the work still
 * runs correctly on the real one. gc_cuda_set_plan_sms(n) does the same without a log
 * (bench's plan_sms: an op timed with the grid it would launch on n SMs). The harness's projection uses it to see the real
 * block counts of an op on another card's SMs (wave quantization), instead of guessing
 * them from output tiles.
 *
 * How: the launch code nvcc generates for `kernel<<<...>>>(...)` calls the runtime's
 * __cudaLaunchKernel (CUDA 12.8+ stubs). The module is linked with
 * `-Wl,--wrap=__cudaLaunchKernel` (setup.py), so those calls reach
 * __wrap___cudaLaunchKernel below, which notes the launch when a log is open and
 * forwards to the runtime's own (__real___cudaLaunchKernel). No kernel file changes,
 * and nothing is done per launch while no log is open but one load and a branch. The
 * wrapper exists only when the build defines GPUCMP_LAUNCH_WRAP (setup.py does, with
 * the link flag; a strong reference to __real, so the runtime's member is linked in);
 * elsewhere (the standalone test programs) the log records nothing and
 * gc_cuda_launch_log_supported() says 0. */
#include "common.cuh"
#include "gpucmp_cuda.h"

#include <pthread.h>
#include <string.h>

#define LOG_MAX 4096

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static volatile int g_open;          /* a log is open */
static int g_count;                  /* launches seen since begin (may exceed LOG_MAX) */
static gc_cuda_launch g_log[LOG_MAX];
int gc_cuda_sms_as = 0;              /* > 0: gc_cuda_sm_count reports this (backend.cu) */

#if defined(GPUCMP_LAUNCH_WRAP) && !defined(__NV_LEGACY_LAUNCH)
extern "C" {
cudaError_t __real___cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t smem,
                                      cudaStream_t stream);
cudaError_t __wrap___cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args, size_t smem,
                                      cudaStream_t stream);
}

extern "C" cudaError_t __wrap___cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void **args,
                                                 size_t smem, cudaStream_t stream)
{
    if (g_open) {
        pthread_mutex_lock(&g_mu);
        if (g_open && g_count < LOG_MAX) {
            gc_cuda_launch *r = &g_log[g_count];
            memset(r, 0, sizeof *r);
            r->grid[0] = grid.x; r->grid[1] = grid.y; r->grid[2] = grid.z;
            r->block[0] = block.x; r->block[1] = block.y; r->block[2] = block.z;
            r->smem_bytes = (int64_t)smem;
            const void *fn = (const void *)kernel; /* a cudaKernel_t serves where a function is asked */
            int per_sm = 0;
            const int threads = (int)(block.x * block.y * block.z);
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fn, threads, smem) != cudaSuccess) {
                (void)cudaGetLastError();
                per_sm = -1;
            }
            r->blocks_per_sm = per_sm;
            const char *name = NULL;
            if (cudaFuncGetName(&name, fn) != cudaSuccess || !name) {
                (void)cudaGetLastError();
                name = "?";
            }
            strncpy(r->name, name, sizeof r->name - 1);
        }
        if (g_open) g_count++;
        pthread_mutex_unlock(&g_mu);
    }
    return __real___cudaLaunchKernel(kernel, grid, block, args, smem, stream);
}

extern "C" int gc_cuda_launch_log_supported(void) { return 1; }
#else
extern "C" int gc_cuda_launch_log_supported(void) { return 0; }
#endif

static int g_plan_sms; /* gc_cuda_set_plan_sms, outside any log */

extern "C" void gc_cuda_set_plan_sms(int sms)
{
    pthread_mutex_lock(&g_mu);
    g_plan_sms = sms > 0 ? sms : 0;
    if (!g_open) gc_cuda_sms_as = g_plan_sms;
    pthread_mutex_unlock(&g_mu);
}

extern "C" void gc_cuda_launch_log_begin(int sms)
{
    pthread_mutex_lock(&g_mu);
    g_count = 0;
    gc_cuda_sms_as = sms > 0 ? sms : g_plan_sms;
    g_open = 1;
    pthread_mutex_unlock(&g_mu);
}

extern "C" int gc_cuda_launch_log_end(gc_cuda_launch *out, int max)
{
    pthread_mutex_lock(&g_mu);
    g_open = 0;
    gc_cuda_sms_as = g_plan_sms;
    const int n = g_count;
    const int keep = n < LOG_MAX ? n : LOG_MAX;
    if (out && max > 0) memcpy(out, g_log, (size_t)(keep < max ? keep : max) * sizeof *out);
    pthread_mutex_unlock(&g_mu);
    return n;
}
