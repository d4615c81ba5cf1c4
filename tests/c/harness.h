/* harness.h -- the shared scaffolding of the standalone C tests of the CPU kernels
 * (test_cpu_ops.c, test_dyn.c, test_cpu_fast.c): a check counter with a printf-style
 * CHECK, a seeded splitmix64 generator so a failing run is replayed by its seed, and
 * the OpenMP thread-count switch.
 * Each test is one translation unit, so the definitions here are static. */
#ifndef GPUCMP_TESTS_C_HARNESS_H
#define GPUCMP_TESTS_C_HARNESS_H

#include <stdint.h>
#include <stdio.h>
#ifdef _OPENMP
#include <omp.h>
#endif

static long g_checks = 0, g_failures = 0;
static uint64_t g_rng = 12345; /* the tests may reseed it */

#define CHECK(cond, ...)                                \
    do {                                                \
        g_checks++;                                     \
        if (!(cond)) {                                  \
            g_failures++;                               \
            printf("FAIL %s:%d: ", __FILE__, __LINE__); \
            printf(__VA_ARGS__);                        \
            printf("\n");                               \
        }                                               \
    } while (0)

static inline uint64_t next_u64(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* uniform in [0, 1) with 53 random bits */
static inline double urand(void) { return (double)(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

/* the OpenMP thread count for what follows (no-op without OpenMP) */
static inline void set_threads(int t)
{
#ifdef _OPENMP
    omp_set_num_threads(t);
#else
    (void)t;
#endif
}

#endif
