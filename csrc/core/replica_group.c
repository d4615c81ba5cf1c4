/* replica_group.c -- the meeting point of data-parallel replicas: barriers and the
 * gradient mean (gpucmp_plan.h, "Data parallelism").
 *
 * What it provides: gc_replica_group_create / _destroy / _size / _abort / _aborted and
 * gc_replica_group_reduce(g, rank, arena, numel, rows, bad), which each of the n members
 * calls from its own thread with its float32 gradients. It returns in every member's
 * arena the same bits: the rows-weighted mean sum_r (rows_r / rows_total) * g_r, added
 * in rank order, so identical weights take identical updates; rows_r / rows_total makes
 * it the gradient of the global batch's mean loss whatever the split (a last partial
 * batch may leave a replica fewer rows, or none). Member r adds up slice r of the arena
 * across all members into the group's buffer, then every member copies the whole buffer
 * back: three barriers per call (posted, summed, copied), the adding spread over the
 * members' threads. `bad` (loss scaling's overflow count, or NULL) is summed too, so a
 * step one replica finds non-finite is skipped by all.
 *
 * Why here, apart from the plan: it is plain host threading over host pointers, tested
 * on its own (tests/c/test_replicas.c, also under the sanitizers); csrc/plan/replicas.c
 * joins plans to a group. A member that fails before it reaches the reduce aborts the
 * group, so the others return an error instead of waiting forever; an aborted group
 * stays aborted. */
#include "gpucmp.h"
#include "gpucmp_plan.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define TRY(expr)                   \
    do {                            \
        gc_status s_ = (expr);      \
        if (s_ != GC_OK) return s_; \
    } while (0)

struct gc_replica_group {
    int n;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int waiting;           /* members at the current barrier */
    unsigned long round;   /* barrier generation */
    int aborted;
    unsigned long long joined; /* bit per rank taken */
    /* the current reduce: what each member posted */
    float **arena;
    int64_t *numel, *rows;
    float *bad;            /* each member's overflow count (0 without loss scaling) */
    float *sum;            /* the group's result buffer */
    int64_t sum_cap;
};

gc_status gc_replica_group_create(int n, gc_replica_group **out)
{
    *out = NULL;
    if (n < 1 || n > 64) return gc_fail(GC_ERR_INVALID_ARG, "replica group: %d replicas (1 to 64)", n);
    gc_replica_group *g = calloc(1, sizeof *g);
    if (!g) return gc_fail(GC_ERR_NOMEM, "replica group: out of host memory");
    g->n = n;
    g->arena = calloc((size_t)n, sizeof *g->arena);
    g->numel = calloc((size_t)n, sizeof *g->numel);
    g->rows = calloc((size_t)n, sizeof *g->rows);
    g->bad = calloc((size_t)n, sizeof *g->bad);
    if (!g->arena || !g->numel || !g->rows || !g->bad) {
        gc_replica_group_destroy(g);
        return gc_fail(GC_ERR_NOMEM, "replica group: out of host memory");
    }
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    *out = g;
    return GC_OK;
}

void gc_replica_group_destroy(gc_replica_group *g)
{
    if (!g) return;
    if (g->arena) { /* made by create: the mutex and condition exist */
        pthread_mutex_destroy(&g->mu);
        pthread_cond_destroy(&g->cv);
    }
    free(g->arena);
    free(g->numel);
    free(g->rows);
    free(g->bad);
    free(g->sum);
    free(g);
}

int gc_replica_group_size(const gc_replica_group *g) { return g ? g->n : 0; }

void gc_replica_group_abort(gc_replica_group *g)
{
    if (!g) return;
    pthread_mutex_lock(&g->mu);
    g->aborted = 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

int gc_replica_group_aborted(gc_replica_group *g)
{
    pthread_mutex_lock(&g->mu);
    const int a = g->aborted;
    pthread_mutex_unlock(&g->mu);
    return a;
}

gc_status gc_replica_group_take_rank(gc_replica_group *g, int rank)
{
    if (rank < 0 || rank >= g->n)
        return gc_fail(GC_ERR_INVALID_ARG, "join_group: rank %d of a group of %d", rank, g->n);
    pthread_mutex_lock(&g->mu);
    const int taken = (int)((g->joined >> rank) & 1);
    if (!taken) g->joined |= 1ull << rank;
    pthread_mutex_unlock(&g->mu);
    if (taken) return gc_fail(GC_ERR_INVALID_ARG, "join_group: rank %d is taken", rank);
    return GC_OK;
}

/* All n members arrive, or the group is aborted (then GC_ERR_INVALID_ARG for everyone). */
static gc_status barrier(gc_replica_group *g)
{
    pthread_mutex_lock(&g->mu);
    if (g->aborted) {
        pthread_mutex_unlock(&g->mu);
        return gc_fail(GC_ERR_INVALID_ARG, "replica group: another replica failed; this step was not applied");
    }
    const unsigned long round = g->round;
    if (++g->waiting == g->n) {
        g->waiting = 0;
        g->round++;
        pthread_cond_broadcast(&g->cv);
    } else {
        while (g->round == round && !g->aborted) pthread_cond_wait(&g->cv, &g->mu);
    }
    const int aborted = g->round == round && g->aborted; /* released by an abort, not by the last arrival */
    pthread_mutex_unlock(&g->mu);
    if (aborted) return gc_fail(GC_ERR_INVALID_ARG, "replica group: another replica failed; this step was not applied");
    return GC_OK;
}

gc_status gc_replica_group_reduce(gc_replica_group *g, int rank, float *arena, int64_t numel, int64_t rows,
                                  float *bad)
{
    const int n = g->n;
    g->arena[rank] = arena;
    g->numel[rank] = numel;
    g->rows[rank] = rows;
    g->bad[rank] = bad ? *bad : 0.0f;
    if (rank == 0 && g->sum_cap < numel) { /* before the barrier: every member reads it after */
        float *s = realloc(g->sum, (size_t)(numel > 0 ? numel : 1) * sizeof *s);
        if (!s) {
            gc_replica_group_abort(g);
            return gc_fail(GC_ERR_NOMEM, "replica group: out of host memory for %lld gradients", (long long)numel);
        }
        g->sum = s;
        g->sum_cap = numel;
    }
    TRY(barrier(g)); /* 1: everyone posted */
    int64_t total = 0;
    for (int r = 0; r < n; r++) {
        if (g->numel[r] != numel) {
            gc_replica_group_abort(g);
            return gc_fail(GC_ERR_INVALID_ARG, "replica group: replica %d has %lld gradients, replica %d %lld",
                           r, (long long)g->numel[r], rank, (long long)numel);
        }
        total += g->rows[r];
    }
    if (total <= 0) {
        gc_replica_group_abort(g);
        return gc_fail(GC_ERR_INVALID_ARG, "replica group: no rows in this step");
    }
    const int64_t lo = numel * rank / n, hi = numel * (rank + 1) / n;
    float wt[64];
    for (int r = 0; r < n; r++) wt[r] = (float)((double)g->rows[r] / (double)total);
    for (int64_t i = lo; i < hi; i++) {
        float s = 0.0f;
        for (int r = 0; r < n; r++) s += wt[r] * g->arena[r][i];
        g->sum[i] = s;
    }
    TRY(barrier(g)); /* 2: every slice summed */
    memcpy(arena, g->sum, (size_t)numel * sizeof *arena);
    if (bad) {
        float b = 0.0f;
        for (int r = 0; r < n; r++) b += g->bad[r];
        *bad = b;
    }
    return barrier(g); /* 3: every member copied (the buffer may be reused) */
}

