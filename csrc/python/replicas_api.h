/* replicas_api.h -- gpucmp._core.ReplicaGroup (replicas_api.c): the Python face of a
 * gc_replica_group, the data-parallel replicas' meeting point (gpucmp_plan.h).
 *
 * Include after Python.h. PyInit__core calls gpucmp_add_replicas_api(m) once (0, or -1
 * with an exception); Plan.join_group uses gpucmp_replica_group_of(obj), which gives the
 * group of a ReplicaGroup object or NULL with a TypeError. */
#ifndef GPUCMP_PYTHON_REPLICAS_API_H
#define GPUCMP_PYTHON_REPLICAS_API_H

#include "gpucmp_plan.h"

int gpucmp_add_replicas_api(PyObject *module);
gc_replica_group *gpucmp_replica_group_of(PyObject *obj);

#endif /* GPUCMP_PYTHON_REPLICAS_API_H */
