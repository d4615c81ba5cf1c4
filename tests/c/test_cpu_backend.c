/* test_cpu_backend.c -- standalone test of the CPU backend's memory accounting
 * (csrc/cpu/backend.c, the memory_stats / reset_peak slots; gc_mem_counter in gpucmp.h).
 *
 * What it checks: every pointer is 64-byte aligned and writable over its whole size
 * (the size header sits in front of it); allocated_bytes grows by at least the size
 * asked for and returns exactly to where it was after release; the peak stays until
 * reset_peak, which sets it to the current value; zero-size and odd sizes; release of
 * NULL; the NULL-safe wrappers on a backend without the slots; and alloc / release
 * racing from several OpenMP threads (the counter is atomic: it ends where it began,
 * and the peak is at least one thread's live set).
 *
 * Built from the library's C sources alone (core + cpu), as setup.py compiles them:
 * `make -C tests/c backend-check` (also under valgrind: backend-valgrind). */
#include "cpu_kernels.h"
#include "harness.h"

#include <stdlib.h>
#include <string.h>

extern const gc_backend *gc_cpu_backend(void);

static gc_memory_stats stats(const gc_backend *be)
{
    gc_memory_stats m;
    gc_status s = gc_backend_memory_stats(be, &m);
    CHECK(s == GC_OK, "memory_stats failed: %s", gc_last_error());
    return m;
}

static void test_single_thread(const gc_backend *be)
{
    static const size_t sizes[] = {0, 1, 3, 63, 64, 65, 4096, 1000003};
    const int n = (int)(sizeof sizes / sizeof sizes[0]);
    void *p[8];
    gc_backend_reset_peak(be);
    gc_memory_stats m0 = stats(be);
    CHECK(m0.peak_bytes == m0.allocated_bytes, "after reset: peak %lld, allocated %lld",
          (long long)m0.peak_bytes, (long long)m0.allocated_bytes);
    CHECK(m0.device_free_bytes == -1 && m0.device_total_bytes == -1, "the CPU has no device figures");
    int64_t asked = 0;
    for (int i = 0; i < n; i++) {
        gc_status s = be->alloc(be, sizes[i], &p[i]);
        CHECK(s == GC_OK && p[i], "alloc %zu: %s", sizes[i], gc_last_error());
        CHECK(((uintptr_t)p[i] & 63u) == 0, "alloc %zu: pointer %p not 64-byte aligned", sizes[i], p[i]);
        if (sizes[i]) memset(p[i], 0xA5, sizes[i]); /* valgrind: the whole block is ours */
        asked += (int64_t)sizes[i];
        gc_memory_stats m = stats(be);
        CHECK(m.allocated_bytes >= m0.allocated_bytes + asked, "after %d allocs: %lld < %lld + %lld", i + 1,
              (long long)m.allocated_bytes, (long long)m0.allocated_bytes, (long long)asked);
        CHECK(m.peak_bytes == m.allocated_bytes, "peak %lld while growing to %lld", (long long)m.peak_bytes,
              (long long)m.allocated_bytes);
    }
    gc_memory_stats full = stats(be);
    for (int i = n - 1; i >= 0; i--) be->release(be, p[i]);
    be->release(be, NULL);
    gc_memory_stats m1 = stats(be);
    CHECK(m1.allocated_bytes == m0.allocated_bytes, "after release: %lld, before %lld",
          (long long)m1.allocated_bytes, (long long)m0.allocated_bytes);
    CHECK(m1.peak_bytes == full.allocated_bytes, "the peak %lld must stay at %lld", (long long)m1.peak_bytes,
          (long long)full.allocated_bytes);
    gc_backend_reset_peak(be);
    gc_memory_stats m2 = stats(be);
    CHECK(m2.peak_bytes == m2.allocated_bytes && m2.allocated_bytes == m0.allocated_bytes,
          "reset: peak %lld, allocated %lld", (long long)m2.peak_bytes, (long long)m2.allocated_bytes);

    void *q = NULL;
    gc_status s = be->alloc(be, (size_t)-1 - 10, &q);
    CHECK(s == GC_ERR_NOMEM && !q, "an impossible size is GC_ERR_NOMEM, got %d", (int)s);
    CHECK(stats(be).allocated_bytes == m0.allocated_bytes, "a failed alloc is not counted");
}

static void test_threads(const gc_backend *be)
{
    gc_backend_reset_peak(be);
    gc_memory_stats m0 = stats(be);
    const int threads = 4, rounds = 2000, live = 8;
    long failures = 0;
#pragma omp parallel num_threads(threads) reduction(+ : failures)
    {
        void *p[8] = {0};
        uint64_t x = 0x9E3779B97F4A7C15ull;
#ifdef _OPENMP
        x ^= (uint64_t)omp_get_thread_num() << 32;
#endif
        for (int r = 0; r < rounds; r++) {
            int k = r % live;
            if (p[k]) be->release(be, p[k]);
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            size_t n = (size_t)(x >> 52); /* 0 .. 4095 */
            if (be->alloc(be, n, &p[k]) != GC_OK) {
                p[k] = NULL;
                failures++;
            } else if (((uintptr_t)p[k] & 63u) != 0) {
                failures++;
            }
        }
        for (int k = 0; k < live; k++) be->release(be, p[k]);
    }
    CHECK(failures == 0, "%ld failed or misaligned allocations", failures);
    gc_memory_stats m1 = stats(be);
    CHECK(m1.allocated_bytes == m0.allocated_bytes, "after the threads: %lld, before %lld",
          (long long)m1.allocated_bytes, (long long)m0.allocated_bytes);
    CHECK(m1.peak_bytes > m0.allocated_bytes, "the peak %lld saw no allocation", (long long)m1.peak_bytes);
}

static void test_counter_and_wrappers(void)
{
    gc_mem_counter c = {0, 0};
#pragma omp parallel for num_threads(4)
    for (int i = 0; i < 100000; i++) {
        gc_mem_add(&c, 3);
        gc_mem_sub(&c, 3);
    }
    int64_t cur, peak;
    gc_mem_read(&c, &cur, &peak);
    CHECK(cur == 0 && peak >= 3 && peak <= 12, "counter: cur %lld peak %lld", (long long)cur, (long long)peak);
    gc_mem_reset_peak(&c);
    gc_mem_read(&c, &cur, &peak);
    CHECK(peak == 0, "reset counter: peak %lld", (long long)peak);

    gc_backend bare;
    memset(&bare, 0, sizeof bare);
    bare.name = "bare";
    gc_memory_stats m;
    gc_status s = gc_backend_memory_stats(&bare, &m);
    CHECK(s == GC_ERR_UNSUPPORTED && m.allocated_bytes == 0 && m.device_total_bytes == -1,
          "a backend without the slot: status %d", (int)s);
    gc_backend_reset_peak(&bare); /* no slot: nothing happens */
    gc_backend_reset_peak(NULL);
    CHECK(gc_backend_memory_stats(NULL, &m) == GC_ERR_INVALID_ARG, "NULL backend");
    gc_clear_error();
}

int main(void)
{
    const gc_backend *be = gc_cpu_backend();
    test_single_thread(be);
    test_threads(be);
    test_counter_and_wrappers();
    printf("test_cpu_backend: %ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
