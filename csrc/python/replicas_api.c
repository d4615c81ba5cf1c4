/* replicas_api.c -- gpucmp._core.ReplicaGroup(n): n data-parallel replicas' meeting point.
 *
 * What it provides: ReplicaGroup(n) (the core's ValueError outside 1..64), .size, .aborted, .abort();
 * Plan.join_group(group, rank) (module.c) makes a training plan replica `rank` of it.
 * Each member's train_step / train_steps then averages its gradients with the others'
 * before its update (gpucmp_plan.h), so the members must step together, one thread each
 * (the steps release the GIL). A Plan that joined keeps a reference to its group, so the
 * group outlives every member's plan whatever order Python frees them in. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "gpucmp.h"
#include "gpucmp_plan.h"
#include "bench.h"
#include "replicas_api.h"

typedef struct {
    PyObject_HEAD
    gc_replica_group *group;
} GroupObject;

static PyTypeObject GroupType;

static PyObject *group_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"n", NULL};
    int n;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "i:ReplicaGroup", kwlist, &n)) return NULL;
    GroupObject *g = (GroupObject *)type->tp_alloc(type, 0);
    if (!g) return NULL;
    gc_status s = gc_replica_group_create(n, &g->group); /* its error: n outside 1..64, or memory */
    if (s) {
        Py_DECREF(g);
        return gc_py_raise(s);
    }
    return (PyObject *)g;
}

static void group_dealloc(GroupObject *g)
{
    gc_replica_group_destroy(g->group);
    Py_TYPE(g)->tp_free((PyObject *)g);
}

static PyObject *group_abort(GroupObject *g, PyObject *unused)
{
    (void)unused;
    gc_replica_group_abort(g->group);
    Py_RETURN_NONE;
}

static PyObject *group_get_size(GroupObject *g, void *c)
{
    (void)c;
    return PyLong_FromLong(gc_replica_group_size(g->group));
}

static PyObject *group_get_aborted(GroupObject *g, void *c)
{
    (void)c;
    return PyBool_FromLong(gc_replica_group_aborted(g->group));
}

static PyMethodDef group_methods[] = {
    {"abort", (PyCFunction)group_abort, METH_NOARGS,
     "abort(): members waiting in a step return an error; the group is not usable afterwards"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef group_getset[] = {
    {"size", (getter)group_get_size, NULL, "number of replicas", NULL},
    {"aborted", (getter)group_get_aborted, NULL, "whether a member failed (or abort() was called)", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject GroupType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpucmp._core.ReplicaGroup",
    .tp_basicsize = sizeof(GroupObject),
    .tp_dealloc = (destructor)group_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "ReplicaGroup(n): data-parallel replicas whose plans average their gradients every step",
    .tp_methods = group_methods,
    .tp_getset = group_getset,
    .tp_new = group_new,
};

gc_replica_group *gpucmp_replica_group_of(PyObject *obj)
{
    if (!PyObject_TypeCheck(obj, &GroupType)) {
        PyErr_Format(PyExc_TypeError, "join_group: expected a ReplicaGroup, got %s", Py_TYPE(obj)->tp_name);
        return NULL;
    }
    return ((GroupObject *)obj)->group;
}

int gpucmp_add_replicas_api(PyObject *m)
{
    if (PyType_Ready(&GroupType) < 0) return -1;
    Py_INCREF(&GroupType);
    if (PyModule_AddObject(m, "ReplicaGroup", (PyObject *)&GroupType) < 0) {
        Py_DECREF(&GroupType);
        return -1;
    }
    return 0;
}
