/* rnn_cudnn_api.c -- the Python face of the pure part of the cuDNN recurrent baseline
 * (gpucmp_rnn_cudnn.h): the weight map the plan packs Keras' weights into cuDNN's weight
 * space with, so that tests check it on any machine, without cuDNN.
 *
 * rnn_cudnn_weight_map(cell, input_size, units, use_bias, layout=None) -> (map, layout):
 * cell 'simple' | 'lstm' | 'gru' (reset_after); layout a dict {"mat": [2G offsets],
 * "bias": [2G offsets, -1 absent], "ws_elems": n} in elements, None for the canonical one
 * (matrices then biases in linLayerID order); map the int32 entries as bytes (index in
 * Keras' [kernel | recurrent_kernel | bias] flattened, -1 none), layout the one used.
 * Bad arguments raise ValueError with the core's message. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdlib.h>
#include <string.h>

#include "gpucmp.h"
#include "gpucmp_rnn_cudnn.h"
#include "bench.h"
#include "rnn_cudnn_api.h"

static int offsets(PyObject *layout, const char *key, int n, int64_t *out)
{
    PyObject *v = PyDict_GetItemString(layout, key); /* borrowed */
    if (!v) {
        PyErr_Format(PyExc_ValueError, "rnn_cudnn_weight_map: layout has no '%s'", key);
        return -1;
    }
    PyObject *seq = PySequence_Fast(v, "rnn_cudnn_weight_map: layout offsets must be a sequence");
    if (!seq) return -1;
    if (PySequence_Fast_GET_SIZE(seq) != n) {
        PyErr_Format(PyExc_ValueError, "rnn_cudnn_weight_map: layout[%s] needs %d offsets, got %zd", key, n,
                     PySequence_Fast_GET_SIZE(seq));
        Py_DECREF(seq);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (out[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return -1;
        }
    }
    Py_DECREF(seq);
    return 0;
}

static PyObject *layout_dict(const gc_rnn_cudnn_layout *lay)
{
    PyObject *mat = PyList_New(lay->n_lin), *bias = PyList_New(lay->n_lin);
    if (!mat || !bias) {
        Py_XDECREF(mat);
        Py_XDECREF(bias);
        return NULL;
    }
    for (int i = 0; i < lay->n_lin; i++) {
        PyList_SET_ITEM(mat, i, PyLong_FromLongLong(lay->mat[i]));
        PyList_SET_ITEM(bias, i, PyLong_FromLongLong(lay->bias[i]));
    }
    return Py_BuildValue("{s:N,s:N,s:L}", "mat", mat, "bias", bias, "ws_elems", (long long)lay->ws_elems);
}

static PyObject *py_weight_map(PyObject *self, PyObject *args, PyObject *kw)
{
    (void)self;
    static char *kwlist[] = {"cell", "input_size", "units", "use_bias", "layout", NULL};
    const char *cell = NULL;
    long long in = 0, u = 0;
    int bias = 1;
    PyObject *layout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sLLp|O", kwlist, &cell, &in, &u, &bias, &layout)) return NULL;
    gc_rnn_cudnn_layer L;
    memset(&L, 0, sizeof L);
    if (!strcmp(cell, "simple")) L.cell = GC_RNN_SIMPLE;
    else if (!strcmp(cell, "lstm")) L.cell = GC_RNN_LSTM;
    else if (!strcmp(cell, "gru")) L.cell = GC_RNN_GRU;
    else {
        PyErr_Format(PyExc_ValueError, "rnn_cudnn_weight_map: cell must be 'simple', 'lstm' or 'gru' (reset_after), "
                     "got '%s'", cell);
        return NULL;
    }
    L.act = GC_RNN_TANH;
    L.bias = bias;
    L.in = in;
    L.u = u;
    L.dt = GC_F32;
    gc_rnn_cudnn_layout lay;
    memset(&lay, 0, sizeof lay);
    if (layout == Py_None) {
        gc_status s0 = gc_rnn_cudnn_canonical_layout(&L, &lay);
        if (s0) return gc_py_raise(s0);
    } else {
        if (!PyDict_Check(layout)) {
            PyErr_SetString(PyExc_TypeError, "rnn_cudnn_weight_map: layout must be a dict or None");
            return NULL;
        }
        const int G = gc_rnn_cudnn_gates(L.cell);
        lay.n_lin = 2 * G;
        if (offsets(layout, "mat", 2 * G, lay.mat) || offsets(layout, "bias", 2 * G, lay.bias)) return NULL;
        PyObject *n = PyDict_GetItemString(layout, "ws_elems");
        lay.ws_elems = n ? PyLong_AsLongLong(n) : -1;
        if (PyErr_Occurred()) return NULL;
        if (lay.ws_elems < 1 || lay.ws_elems > ((int64_t)1 << 31)) {
            PyErr_Format(PyExc_ValueError, "rnn_cudnn_weight_map: layout['ws_elems'] must be in [1, 2^31], got %lld",
                         (long long)lay.ws_elems);
            return NULL;
        }
    }
    int32_t *map = malloc((size_t)lay.ws_elems * sizeof *map);
    if (!map) return PyErr_NoMemory();
    gc_status s = gc_rnn_cudnn_weight_map(&L, &lay, map);
    if (s) {
        free(map);
        gc_py_raise(s);
        return NULL;
    }
    PyObject *bytes = PyBytes_FromStringAndSize((const char *)map, (Py_ssize_t)(lay.ws_elems * sizeof *map));
    free(map);
    if (!bytes) return NULL;
    return Py_BuildValue("(NN)", bytes, layout_dict(&lay));
}

static PyMethodDef rnn_cudnn_methods[] = {
    {"rnn_cudnn_weight_map", (PyCFunction)(void (*)(void))py_weight_map, METH_VARARGS | METH_KEYWORDS,
     "rnn_cudnn_weight_map(cell, input_size, units, use_bias, layout=None) -> (int32 map bytes, layout)"},
    {NULL, NULL, 0, NULL}};

int gpucmp_add_rnn_cudnn_api(PyObject *module) { return PyModule_AddFunctions(module, rnn_cudnn_methods); }
