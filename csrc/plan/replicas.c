/* replicas.c -- a training plan as one replica of a data-parallel group.
 *
 * What it provides (gpucmp_plan.h): gc_plan_join_group, and gc_plan_reduce_gradients,
 * which gc_plan_update calls once every float32 gradient is in the plan's arena and
 * before the optimizer reads it: the group's rows-weighted mean of all members'
 * gradients (csrc/core/replica_group.c) replaces this member's. Every member runs its
 * own step -- its shard of the global batch, its own thread -- and they meet there.
 *
 * The reducer reads and writes the arenas through host pointers, so it serves backends
 * whose memory is host memory (the CPU backend); a GPU group needs NCCL (not built
 * here) and is refused with a clear error. A joined plan captures no graphs: the reduce
 * is host code between its backward pass and its update. No weight of a member whose
 * step failed has moved: the update comes after the reduce. */
#include "plan_internal.h"

#include <string.h>

gc_status gc_plan_join_group(gc_plan *p, gc_replica_group *g, int rank)
{
    if (!p || !g) return gc_fail(GC_ERR_INVALID_ARG, "join_group: no plan or group");
    if (!p->training) return gc_fail(GC_ERR_INVALID_ARG, "join_group: the plan is not compiled for training");
    if (strcmp(p->be->name, "cpu") != 0)
        return gc_fail(GC_ERR_UNSUPPORTED,
                       "join_group: replicas on backend '%s' need NCCL, which this build does not load yet; "
                       "replicas run on the CPU backend only", p->be->name);
    if (p->group) return gc_fail(GC_ERR_INVALID_ARG, "join_group: the plan is in a group already");
    TRY(gc_replica_group_take_rank(g, rank));
    p->group = g;
    p->rank = rank;
    p->graphs_on = 0; /* the reduce is host code between the backward pass and the update */
    gc_plan_drop_batch_graph(p);
    return GC_OK;
}

/* gc_plan_update's hook: the arena of this member, after its backward pass */
gc_status gc_plan_reduce_gradients(gc_plan *p)
{
    if (!p->group || p->checking || p->trace) return GC_OK;
    return gc_replica_group_reduce(p->group, p->rank, (float *)p->grad_arena, p->grad_arena_numel, p->cur_rows,
                                   p->train.loss_scaling ? (float *)p->ls_bad : NULL);
}
