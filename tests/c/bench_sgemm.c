/* bench_sgemm.c -- GFLOP/s of gc_cpu_sgemm, per micro-kernel variant.
 *
 * Square NN products (256 .. 2048) and the seed CNN's convolution as GEMMs: the
 * forward im2col product (128*11*11) x 64 x 288, its weight gradient 288 x 64 x 15488
 * (trans_a) and its data gradient 15488 x 288 x 64 (trans_b). Each figure is the median
 * of several timed runs after a warm-up. Threads: OMP_NUM_THREADS.
 *
 * usage: bench_sgemm [--variant auto|generic|fma|avx512|all] [--reps N] [M N K ta tb]
 */
#define _DEFAULT_SOURCE /* clock_gettime, madvise */
#include "cpu_kernels.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Operands are allocated as NumPy allocates arrays (the library's callers): aligned,
 * and on Linux advised onto huge pages, which NumPy does for large arrays. Without
 * it a 2048^2 product loses several percent to TLB misses on the rows of A and C. */
static float *rand_buf(size_t n)
{
    const size_t huge = (size_t)2 << 20;
    const size_t bytes = (n * sizeof(float) + huge - 1) / huge * huge;
    float *p = aligned_alloc(huge, bytes);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    madvise(p, bytes, MADV_HUGEPAGE);
#endif
    for (size_t i = 0; i < n; i++)
        p[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    return p;
}

static int bench(const char *label, int64_t M, int64_t N, int64_t K, int ta, int tb, int reps)
{
    float *A = rand_buf((size_t)(M * K)), *B = rand_buf((size_t)(K * N)),
          *C = rand_buf((size_t)(M * N));
    gc_sgemm_args g = {ta, tb, M, N, K, 1.0f, 0.0f, A, ta ? M : K, B, tb ? K : N, C, N,
                       NULL, GC_ACT_LINEAR};
    double flops = 2.0 * (double)M * (double)N * (double)K;
    /* enough runs that small shapes are timed over ~0.2 s */
    int r = reps;
    if (flops * r < 2e10)
        r = (int)(2e10 / flops) + 1;
    if (r > 2000)
        r = 2000;
    double *t = malloc(sizeof(double) * (size_t)r);
    if (gc_cpu_sgemm(&g) != GC_OK) {
        fprintf(stderr, "%s: %s\n", label, gc_last_error());
        return 1;
    }
    for (int i = 0; i < r; i++) {
        const double t0 = now();
        gc_cpu_sgemm(&g);
        t[i] = now() - t0;
    }
    qsort(t, (size_t)r, sizeof(double), cmp_double);
    printf("  %-28s %6lld x %5lld x %5lld  %8.1f GFLOP/s  (median of %d, %.3f ms)\n", label,
           (long long)M, (long long)N, (long long)K, flops / t[r / 2] / 1e9, r, t[r / 2] * 1e3);
    fflush(stdout);
    free(t);
    free(A);
    free(B);
    free(C);
    return 0;
}

static int run_all(int reps, int custom, int64_t M, int64_t N, int64_t K, int ta, int tb)
{
    int fail = 0;
    printf("variant %s\n", gc_cpu_sgemm_variant());
    if (custom)
        return bench("custom", M, N, K, ta, tb, reps);
    static const int sq[] = {256, 512, 1024, 1536, 2048};
    for (size_t i = 0; i < sizeof sq / sizeof sq[0]; i++) {
        char label[32];
        snprintf(label, sizeof label, "square %d NN", sq[i]);
        fail |= bench(label, sq[i], sq[i], sq[i], 0, 0, reps);
    }
    fail |= bench("conv fwd (im2col) NN", 128 * 11 * 11, 64, 288, 0, 0, reps);
    fail |= bench("conv weight grad TN", 288, 64, 128 * 11 * 11, 1, 0, reps);
    fail |= bench("conv data grad NT", 128 * 11 * 11, 288, 64, 0, 1, reps);
    return fail;
}

int main(int argc, char **argv)
{
    const char *variant = "auto";
    int reps = 11, custom = 0, ta = 0, tb = 0;
    int64_t M = 0, N = 0, K = 0;
    int i = 1;
    for (; i < argc; i++) {
        if (strcmp(argv[i], "--variant") == 0 && i + 1 < argc)
            variant = argv[++i];
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else
            break;
    }
    if (argc - i >= 3) {
        custom = 1;
        M = atoll(argv[i]);
        N = atoll(argv[i + 1]);
        K = atoll(argv[i + 2]);
        if (argc - i >= 5) {
            ta = atoi(argv[i + 3]);
            tb = atoi(argv[i + 4]);
        }
    }
    if (reps < 1)
        reps = 1;
    int fail = 0;
    if (strcmp(variant, "all") == 0) {
        static const char *names[] = {"avx512", "fma", "generic"};
        for (int v = 0; v < 3; v++) {
            if (gc_cpu_sgemm_force_variant(names[v]) != GC_OK) {
                printf("variant %s: not available on this CPU\n", names[v]);
                continue;
            }
            fail |= run_all(reps, custom, M, N, K, ta, tb);
        }
    } else {
        if (gc_cpu_sgemm_force_variant(variant) != GC_OK) {
            fprintf(stderr, "%s\n", gc_last_error());
            return 2;
        }
        fail |= run_all(reps, custom, M, N, K, ta, tb);
    }
    return fail;
}
