/* test_replicas.c -- the data-parallel replica group (csrc/core/replica_group.c) on its
 * own: n threads, each with its own gradient arena and row count, meet in
 * gc_replica_group_reduce; every member must come back with the rows-weighted mean in
 * rank order (recomputed here the same way: bit for bit), members with zero rows
 * contribute nothing, the overflow counts are summed, an aborting member releases the
 * others with an error, mismatched sizes are refused. Built with -pthread; .ci/run runs
 * it plain and under ASan + UBSan (quick-all). */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "gpucmp.h"
#include "gpucmp_plan.h"
#include "harness.h"

#define MAX_N 8

typedef struct {
    gc_replica_group *g;
    int rank, abort_instead;
    float *arena;
    int64_t numel, rows;
    float bad;
    gc_status st;
} member;

static void *run_member(void *arg)
{
    member *m = arg;
    if (m->abort_instead) {
        gc_replica_group_abort(m->g);
        m->st = GC_ERR_INVALID_ARG;
    } else {
        m->st = gc_replica_group_reduce(m->g, m->rank, m->arena, m->numel, m->rows, &m->bad);
    }
    return NULL;
}

/* n members reduce `rounds` times, each round with fresh arenas, rows and overflow counts */
static void check_rounds(int n, int64_t numel, int rounds)
{
    gc_replica_group *g = NULL;
    CHECK(gc_replica_group_create(n, &g) == GC_OK && g, "create(%d)", n);
    if (!g) return;
    CHECK(gc_replica_group_size(g) == n, "size");
    for (int r = 0; r < n; r++) CHECK(gc_replica_group_take_rank(g, r) == GC_OK, "take rank %d", r);
    CHECK(gc_replica_group_take_rank(g, 0) != GC_OK, "rank 0 taken twice");
    CHECK(gc_replica_group_take_rank(g, n) != GC_OK, "rank %d of %d", n, n);
    member m[MAX_N];
    float *in[MAX_N], posted[MAX_N];
    for (int round = 0; round < rounds; round++) {
        int64_t total = 0;
        float bad = 0.0f;
        for (int r = 0; r < n; r++) {
            m[r] = (member){g, r, 0, malloc((size_t)numel * sizeof(float)), numel, 0, 0.0f, GC_OK};
            in[r] = malloc((size_t)numel * sizeof(float));
            m[r].rows = (n > 1 && r == n - 1 && round % 2) ? 0 : 1 + (int64_t)(next_u64() % 7); /* some rounds: an idle member */
            m[r].bad = posted[r] = (float)(next_u64() % 2);
            bad += posted[r];
            for (int64_t i = 0; i < numel; i++) in[r][i] = m[r].arena[i] = (float)(urand() * 2.0 - 1.0);
            total += m[r].rows;
        }
        pthread_t t[MAX_N];
        for (int r = 0; r < n; r++) pthread_create(&t[r], NULL, run_member, &m[r]);
        for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
        float wt[MAX_N];
        for (int r = 0; r < n; r++) wt[r] = (float)((double)m[r].rows / (double)total);
        int64_t wrong = 0, differ = 0;
        for (int64_t i = 0; i < numel; i++) {
            float s = 0.0f;
            for (int r = 0; r < n; r++) s += wt[r] * in[r][i];
            if (memcmp(&s, &m[0].arena[i], sizeof s) != 0) wrong++;
            for (int r = 1; r < n; r++)
                if (memcmp(&m[r].arena[i], &m[0].arena[i], sizeof s) != 0) differ++;
        }
        for (int r = 0; r < n; r++) CHECK(m[r].st == GC_OK, "n %d round %d member %d: status %d", n, round, r, m[r].st);
        CHECK(wrong == 0, "n %d round %d: %lld values differ from the rank-order weighted sum", n, round,
              (long long)wrong);
        CHECK(differ == 0, "n %d round %d: members disagree in %lld values", n, round, (long long)differ);
        for (int r = 0; r < n; r++) CHECK(m[r].bad == bad, "n %d: member %d overflow count %g, posted %g", n, r,
                                          m[r].bad, bad);
        for (int r = 0; r < n; r++) {
            free(m[r].arena);
            free(in[r]);
        }
    }
    gc_replica_group_destroy(g);
}

static void check_bad_sum(void)
{
    gc_replica_group *g = NULL;
    gc_replica_group_create(3, &g);
    member m[3];
    float a[3][4];
    const float posted[3] = {0.0f, 2.0f, 1.0f};
    for (int r = 0; r < 3; r++) {
        for (int i = 0; i < 4; i++) a[r][i] = (float)(r + i);
        m[r] = (member){g, r, 0, a[r], 4, 2, posted[r], GC_OK};
    }
    pthread_t t[3];
    for (int r = 0; r < 3; r++) pthread_create(&t[r], NULL, run_member, &m[r]);
    for (int r = 0; r < 3; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < 3; r++) CHECK(m[r].st == GC_OK && m[r].bad == 3.0f, "member %d: bad %g", r, m[r].bad);
    gc_replica_group_destroy(g);
}

static void check_abort(int n, int aborter)
{
    gc_replica_group *g = NULL;
    gc_replica_group_create(n, &g);
    member m[MAX_N];
    float a[MAX_N][16];
    for (int r = 0; r < n; r++) {
        memset(a[r], 0, sizeof a[r]);
        m[r] = (member){g, r, r == aborter, a[r], 16, 1, 0.0f, GC_OK};
    }
    pthread_t t[MAX_N];
    for (int r = 0; r < n; r++) pthread_create(&t[r], NULL, run_member, &m[r]);
    for (int r = 0; r < n; r++) pthread_join(t[r], NULL); /* a hang here is the failure */
    for (int r = 0; r < n; r++) CHECK(m[r].st != GC_OK, "n %d: member %d returned OK after member %d aborted", n, r,
                                      aborter);
    CHECK(gc_replica_group_aborted(g), "aborted flag");
    gc_replica_group_destroy(g);
}

static void check_size_mismatch(void)
{
    gc_replica_group *g = NULL;
    gc_replica_group_create(2, &g);
    float a[8] = {0}, b[8] = {0};
    member m[2] = {{g, 0, 0, a, 8, 1, 0.0f, GC_OK}, {g, 1, 0, b, 6, 1, 0.0f, GC_OK}};
    pthread_t t[2];
    for (int r = 0; r < 2; r++) pthread_create(&t[r], NULL, run_member, &m[r]);
    for (int r = 0; r < 2; r++) pthread_join(t[r], NULL);
    CHECK(m[0].st != GC_OK || m[1].st != GC_OK, "8 vs 6 gradients accepted");
    gc_replica_group_destroy(g);
}

int main(int argc, char **argv)
{
    const int small = argc > 1 && !strcmp(argv[1], "--small");
    gc_replica_group *g = NULL;
    CHECK(gc_replica_group_create(0, &g) != GC_OK && !g, "create(0) refused");
    CHECK(gc_replica_group_create(65, &g) != GC_OK && !g, "create(65) refused");
    const int ns[] = {1, 2, 3, 5, 8};
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        check_rounds(ns[k], 1, 3);
        check_rounds(ns[k], small ? 1001 : 100003, small ? 4 : 6);
    }
    check_bad_sum();
    for (int n = 2; n <= 5; n++) check_abort(n, n / 2);
    check_size_mismatch();
    printf("test_replicas: %ld checks, %ld failures\n", g_checks, g_failures);
    return g_failures ? 1 : 0;
}
