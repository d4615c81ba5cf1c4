/* module.c -- gpucmp._core, the only Python boundary of the C core.
 *
 * What it provides (CORE_API.md beside this file): run_op over NumPy arrays, Buffer
 * (backend memory holding float32 weights and optimizer state), Plan (a compiled
 * Sequential model; one training step = one call), and introspection of the op list
 * and the backends (kernel variants: variants_api.c; device queries: device_api.c).
 *
 * How: arguments are parsed and checked while holding the GIL; the compute call runs
 * with the GIL released; a gc_status becomes ValueError / TypeError / MemoryError /
 * NotImplementedError / RuntimeError carrying the core's message. Objects borrowed by
 * C (Buffers inside a Plan) are kept alive by references the Plan holds. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>
#if NPY_ABI_VERSION < 0x02000000 /* NumPy 1.x headers */
#define PyDataType_ELSIZE(d) ((d)->elsize)
#endif

#include <string.h>

#include "gpucmp.h"
#include "gpucmp_plan.h"
#include "cpu_kernels.h"
#include "bench.h"
#include "device_api.h"
#include "variants_api.h"
#include "rnn_cudnn_api.h"
#include "replicas_api.h"

#ifdef GPUCMP_WITH_CUDA
extern gc_status gc_cuda_register_all(void);
#endif

/* ------------------------------------------------------------------ errors */

/* NonFiniteError (a ValueError): a NaN / Inf in a plan's input or labels, which the Keras
 * front end turns into its own message naming the element */
static PyObject *nonfinite_error;

PyObject *gc_py_raise(gc_status s)
{
    PyObject *type;
    switch (s) {
    case GC_ERR_INVALID_ARG: type = PyExc_ValueError; break;
    case GC_ERR_NONFINITE: type = nonfinite_error ? nonfinite_error : PyExc_ValueError; break;
    case GC_ERR_DTYPE: type = PyExc_TypeError; break;
    case GC_ERR_NOMEM: type = PyExc_MemoryError; break;
    case GC_ERR_UNSUPPORTED: type = PyExc_NotImplementedError; break;
    default: type = PyExc_RuntimeError; break;
    }
    const char *msg = gc_last_error();
    PyErr_SetString(type, msg && *msg ? msg : gc_status_name(s));
    return NULL;
}

static const gc_backend *get_backend(PyObject *name)
{
    if (!PyUnicode_Check(name)) {
        PyErr_Format(PyExc_TypeError, "backend must be a string such as 'cpu' or 'cuda:0', got %R", name);
        return NULL;
    }
    const gc_backend *be = NULL;
    gc_status s = gc_backend_get(PyUnicode_AsUTF8(name), &be);
    if (s) return (const gc_backend *)gc_py_raise(s);
    return be;
}

/* "cpu" or "cuda:N": the name users pass to set_device() */
static PyObject *backend_label(const gc_backend *be)
{
    if (strcmp(be->name, "cpu") == 0) return PyUnicode_FromString("cpu");
    return PyUnicode_FromFormat("%s:%d", be->name, be->device_index);
}

/* ------------------------------------------------------------------ enums from strings */

static int parse_enum(PyObject *v, const char *what, const char *const *names, int n, int *out)
{
    if (PyUnicode_Check(v)) {
        const char *s = PyUnicode_AsUTF8(v);
        for (int i = 0; i < n; i++)
            if (names[i] && strcmp(s, names[i]) == 0) {
                *out = i;
                return 0;
            }
        PyObject *choices = PyUnicode_FromString("");
        for (int i = 0; i < n && choices; i++) {
            if (!names[i]) continue;
            PyObject *next = PyUnicode_FromFormat("%U%s'%s'", choices, PyUnicode_GET_LENGTH(choices) ? ", " : "", names[i]);
            Py_DECREF(choices);
            choices = next;
        }
        if (choices) {
            PyErr_Format(PyExc_ValueError, "%s: unknown value '%s' (expected one of %U)", what, s, choices);
            Py_DECREF(choices);
        }
        return -1;
    }
    if (PyLong_Check(v)) {
        long x = PyLong_AsLong(v);
        if (x >= 0 && x < n && names[x]) {
            *out = (int)x;
            return 0;
        }
    }
    PyErr_Format(PyExc_TypeError, "%s: expected a string, got %R", what, v);
    return -1;
}

static const char *const act_names[GC_ACT_COUNT] = {"linear", "relu", "tanh", "sigmoid", "softmax"};
static const char *const pad_names[2] = {"valid", "same"};
static const char *const reg_names[2] = {"mse", "mae"};
static const char *const acc_names[3] = {"categorical", "sparse", "binary"};
static const char *const impl_names[2] = {"own", "vendor"};
static const char *const compute_dtype_names[3] = {"float32", "float16", "bfloat16"}; /* gc_dtype order */

/* ------------------------------------------------------------------ params dict */

static PyObject *item(PyObject *d, const char *k)
{
    return d ? PyDict_GetItemString(d, k) : NULL; /* borrowed */
}

static int p_float(PyObject *d, const char *k, double def, float *out)
{
    PyObject *v = item(d, k);
    if (!v) {
        *out = (float)def;
        return 0;
    }
    double x = PyFloat_AsDouble(v);
    if (x == -1.0 && PyErr_Occurred()) {
        PyErr_Format(PyExc_TypeError, "parameter '%s' must be a number, got %R", k, v);
        return -1;
    }
    *out = (float)x;
    return 0;
}

static int p_long(PyObject *d, const char *k, long long def, long long *out)
{
    PyObject *v = item(d, k);
    if (!v) {
        *out = def;
        return 0;
    }
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "parameter '%s' must be an integer, got %R", k, v);
        return -1;
    }
    *out = PyLong_AsLongLong(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static int p_u64(PyObject *d, const char *k, uint64_t *out)
{
    PyObject *v = item(d, k);
    *out = 0;
    if (!v) return 0;
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "parameter '%s' must be an integer, got %R", k, v);
        return -1;
    }
    *out = PyLong_AsUnsignedLongLongMask(v);
    return PyErr_Occurred() ? -1 : 0;
}

static int p_bool(PyObject *d, const char *k, int def, int *out)
{
    PyObject *v = item(d, k);
    if (!v) {
        *out = def;
        return 0;
    }
    int b = PyObject_IsTrue(v);
    if (b < 0) return -1;
    *out = b;
    return 0;
}

static int to_int(PyObject *v, const char *k, int *out)
{
    if (!PyLong_Check(v) || PyBool_Check(v)) {
        PyErr_Format(PyExc_TypeError, "'%s' must hold integers, got %R", k, v);
        return -1;
    }
    long x = PyLong_AsLong(v);
    if (x == -1 && PyErr_Occurred()) return -1;
    if (x < -(1L << 30) || x > (1L << 30)) {
        PyErr_Format(PyExc_ValueError, "'%s' value %ld is out of range", k, x);
        return -1;
    }
    *out = (int)x;
    return 0;
}

/* an int or a pair of ints */
static int p_pair(PyObject *d, const char *k, int def0, int def1, int *a, int *b)
{
    PyObject *v = item(d, k);
    if (!v) {
        *a = def0;
        *b = def1;
        return 0;
    }
    if (PyLong_Check(v)) {
        if (to_int(v, k, a)) return -1;
        *b = *a;
        return 0;
    }
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq || PySequence_Fast_GET_SIZE(seq) != 2) {
        Py_XDECREF(seq);
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "'%s' must be an int or a pair of ints, got %R", k, v);
        return -1;
    }
    int r = to_int(PySequence_Fast_GET_ITEM(seq, 0), k, a) || to_int(PySequence_Fast_GET_ITEM(seq, 1), k, b);
    Py_DECREF(seq);
    return r ? -1 : 0;
}

static int p_enum(PyObject *d, const char *k, const char *const *names, int n, int def, int *out)
{
    PyObject *v = item(d, k);
    if (!v) {
        *out = def;
        return 0;
    }
    return parse_enum(v, k, names, n, out);
}

/* All ops' params in one union, filled from the dict by op. */
typedef union {
    gc_gemm_params gemm;
    gc_conv2d_params conv;
    gc_pool2d_params pool;
    gc_act_params act;
    gc_loss_params loss;
    gc_dropout_params drop;
    gc_adam_params adam;
    gc_sgd_params sgd;
    gc_rmsprop_params rms;
    gc_accuracy_params acc;
    gc_reduce_params reduce;
    gc_scale_cast_params scast;
    gc_loss_scale_params lscale;
    gc_batchnorm_params bn;
    gc_pad2d_params pad;
    gc_slice_params slice;
    gc_rnn_params rnn;
    gc_seq_mask_params smask;
    gc_no_params none;
} any_params;

/* A device-pointer parameter (the `dyn`, `skip`, `dyn_scale` fields): a _core.Buffer of
 * the op's backend, or absent / None (NULL). Defined after the Buffer type. */
static int p_devptr(PyObject *d, const char *k, const gc_backend *be, Py_ssize_t min, const float **out);

static int parse_params(gc_op op, PyObject *d, const gc_backend *be, any_params *P)
{
    memset(P, 0, sizeof *P);
    if (d && d != Py_None && !PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "params must be a dict");
        return -1;
    }
    if (d == Py_None) d = NULL;
    int e = 0, b = 0;
    long long ll = 0;
    switch (op) {
    case GC_OP_GEMM:
        if (p_bool(d, "trans_a", 0, &P->gemm.trans_a) || p_bool(d, "trans_b", 0, &P->gemm.trans_b) ||
            p_float(d, "alpha", 1.0, &P->gemm.alpha) || p_float(d, "beta", 0.0, &P->gemm.beta) ||
            p_enum(d, "act", act_names, GC_ACT_COUNT, 0, &e) || p_enum(d, "impl", impl_names, 2, 0, &b))
            return -1;
        P->gemm.act = (gc_act)e;
        P->gemm.impl = (gc_impl)b;
        return 0;
    case GC_OP_CONV2D_FWD:
    case GC_OP_CONV2D_BWD_DATA:
    case GC_OP_CONV2D_BWD_FILTER:
        if (p_pair(d, "strides", 1, 1, &P->conv.stride_h, &P->conv.stride_w) ||
            p_pair(d, "dilation", 1, 1, &P->conv.dil_h, &P->conv.dil_w) ||
            p_enum(d, "padding", pad_names, 2, 0, &b) || p_enum(d, "act", act_names, GC_ACT_COUNT, 0, &e))
            return -1;
        P->conv.padding = (gc_padding)b;
        P->conv.act = (gc_act)e;
        if (p_enum(d, "impl", impl_names, 2, 0, &b) || p_bool(d, "accumulate", 0, &P->conv.accumulate)) return -1;
        P->conv.impl = (gc_impl)b;
        return 0;
    case GC_OP_MAXPOOL2D_FWD:
    case GC_OP_MAXPOOL2D_BWD:
    case GC_OP_AVGPOOL2D_FWD:
    case GC_OP_AVGPOOL2D_BWD:
        if (p_pair(d, "pool_size", 2, 2, &P->pool.pool_h, &P->pool.pool_w) ||
            p_pair(d, "strides", P->pool.pool_h, P->pool.pool_w, &P->pool.stride_h, &P->pool.stride_w) ||
            p_enum(d, "padding", pad_names, 2, 0, &b))
            return -1;
        if (item(d, "strides") == Py_None) {
            P->pool.stride_h = P->pool.pool_h;
            P->pool.stride_w = P->pool.pool_w;
        }
        P->pool.padding = (gc_padding)b;
        if (p_enum(d, "act", act_names, GC_ACT_COUNT, 0, &e)) return -1;
        P->pool.act = (gc_act)e;
        /* explicit pads: (top, bottom) and (left, right), each a pair (default 0) */
        return (p_pair(d, "pads_h", 0, 0, &P->pool.pad_top, &P->pool.pad_bottom) ||
                p_pair(d, "pads_w", 0, 0, &P->pool.pad_left, &P->pool.pad_right))
                   ? -1
                   : 0;
    case GC_OP_ACT_FWD:
    case GC_OP_ACT_BWD:
    case GC_OP_ADD:
        if (p_enum(d, "act", act_names, GC_ACT_COUNT, 0, &e)) return -1;
        P->act.act = (gc_act)e;
        return 0;
    case GC_OP_SOFTMAX_XENT:
    case GC_OP_SIGMOID_BCE:
    case GC_OP_XENT_PROBS:
    case GC_OP_REGRESSION_LOSS:
        if (p_float(d, "grad_scale", 1.0, &P->loss.grad_scale) || p_bool(d, "binary", 0, &P->loss.binary) ||
            p_enum(d, "kind", reg_names, 2, 0, &e))
            return -1;
        P->loss.kind = (gc_regression_kind)e;
        return 0;
    case GC_OP_DROPOUT_FWD:
    case GC_OP_DROPOUT_BWD:
        return (p_float(d, "rate", 0.0, &P->drop.rate) || p_u64(d, "seed", &P->drop.seed)) ? -1 : 0;
    case GC_OP_ADAM:
        if (p_float(d, "lr", 0.001, &P->adam.lr) || p_float(d, "beta_1", 0.9, &P->adam.beta_1) ||
            p_float(d, "beta_2", 0.999, &P->adam.beta_2) || p_float(d, "epsilon", 1e-7, &P->adam.epsilon) ||
            p_long(d, "t", 1, &ll) || p_devptr(d, "dyn", be, 2, &P->adam.dyn) || p_devptr(d, "skip", be, 1, &P->adam.skip))
            return -1;
        P->adam.t = ll;
        return 0;
    case GC_OP_SGD:
        return (p_float(d, "lr", 0.01, &P->sgd.lr) || p_float(d, "momentum", 0.0, &P->sgd.momentum) ||
                p_bool(d, "nesterov", 0, &P->sgd.nesterov) || p_devptr(d, "dyn", be, 1, &P->sgd.dyn) ||
                p_devptr(d, "skip", be, 1, &P->sgd.skip))
                   ? -1
                   : 0;
    case GC_OP_RMSPROP:
        return (p_float(d, "lr", 0.001, &P->rms.lr) || p_float(d, "rho", 0.9, &P->rms.rho) ||
                p_float(d, "epsilon", 1e-7, &P->rms.epsilon) || p_devptr(d, "dyn", be, 1, &P->rms.dyn) ||
                p_devptr(d, "skip", be, 1, &P->rms.skip))
                   ? -1
                   : 0;
    case GC_OP_SCALE_CAST:
        return (p_float(d, "scale", 1.0, &P->scast.scale) || p_devptr(d, "dyn_scale", be, 1, &P->scast.dyn_scale) ||
                p_bool(d, "invert", 0, &P->scast.invert))
                   ? -1
                   : 0;
    case GC_OP_LOSS_SCALE_UPDATE:
        if (p_long(d, "growth_steps", 2000, &ll)) return -1;
        if (ll < 1 || ll > 0x7fffffff) {
            PyErr_Format(PyExc_ValueError, "parameter 'growth_steps' must be in 1..2^31-1, got %lld", ll);
            return -1;
        }
        P->lscale.growth_steps = (int)ll;
        return 0;
    case GC_OP_ACCURACY:
        if (p_enum(d, "kind", acc_names, 3, 0, &e) || p_float(d, "threshold", 0.5, &P->acc.threshold)) return -1;
        P->acc.kind = (gc_accuracy_kind)e;
        return 0;
    case GC_OP_REDUCE_SUM:
        return (p_bool(d, "accumulate", 0, &P->reduce.accumulate) || p_float(d, "scale", 1.0, &P->reduce.scale))
                   ? -1
                   : 0;
    case GC_OP_BATCHNORM_FWD:
    case GC_OP_BATCHNORM_BWD:
        if (p_float(d, "epsilon", 1e-3, &P->bn.epsilon) || p_float(d, "momentum", 0.99, &P->bn.momentum) ||
            p_bool(d, "training", 1, &P->bn.training) || p_enum(d, "act", act_names, GC_ACT_COUNT, 0, &e) ||
            p_bool(d, "mask_from_x", 0, &P->bn.mask_from_x))
            return -1;
        P->bn.act = (gc_act)e;
        return 0;
    case GC_OP_PAD2D_FWD:
    case GC_OP_PAD2D_BWD: {
        static const char *const sides[4] = {"top", "bottom", "left", "right"};
        int *dst[4] = {&P->pad.top, &P->pad.bottom, &P->pad.left, &P->pad.right};
        for (int i = 0; i < 4; i++) {
            PyObject *v = item(d, sides[i]);
            if (v && to_int(v, sides[i], dst[i])) return -1;
        }
        return 0;
    }
    case GC_OP_SLICE_COLS:
        if (p_long(d, "offset", 0, &ll)) return -1;
        P->slice.offset = (int64_t)ll;
        return 0;
    case GC_OP_RNN_FWD:
    case GC_OP_RNN_BWD: {
        static const char *const cells[4] = {"simple", "lstm", "gru", "gru_reset_before"};
        static const char *const rnn_acts[5] = {"tanh", "sigmoid", "relu", "linear", "hard_sigmoid"};
        int cell = 0, a = 0, ra = 0;
        if (p_enum(d, "cell", cells, 4, 0, &cell) || p_enum(d, "activation", rnn_acts, 5, 0, &a) ||
            p_enum(d, "recurrent_activation", rnn_acts, 5, 1, &ra) || p_bool(d, "go_backwards", 0, &P->rnn.go_backwards) ||
            p_bool(d, "sequences", 0, &P->rnn.sequences) ||
            p_bool(d, "zero_output_for_mask", 0, &P->rnn.zero_output_for_mask))
            return -1;
        P->rnn.cell = (gc_rnn_cell)cell;
        P->rnn.act = (gc_rnn_act)a;
        P->rnn.recurrent_act = (gc_rnn_act)ra;
        return 0;
    }
    case GC_OP_SEQ_MASK:
        return p_float(d, "value", 0.0, &P->smask.value) ? -1 : 0;
    case GC_OP_MUL_BCAST:
    case GC_OP_REVERSE_SEQ:
    case GC_OP_WEIGHT_GRADS:
    case GC_OP_MUL:
    case GC_OP_CONCAT:
    case GC_OP_BIAS_GRAD:
    case GC_OP_CAST:
    case GC_OP_EMBEDDING_FWD:
    case GC_OP_EMBEDDING_BWD:
    case GC_OP_COUNT:
        return 0;
    }
    return 0;
}

/* ------------------------------------------------------------------ arrays */

static int array_dtype(PyArrayObject *a, gc_dtype *out)
{
    PyArray_Descr *d = PyArray_DESCR(a);
    switch (d->type_num) {
    case NPY_FLOAT32: *out = GC_F32; return 0;
    case NPY_FLOAT16: *out = GC_F16; return 0;
    case NPY_INT32: *out = GC_I32; return 0;
    case NPY_UINT16: *out = GC_BF16; return 0;
    default: break;
    }
    /* ml_dtypes.bfloat16: a 2-byte user dtype named bfloat16 */
    if (PyDataType_ELSIZE(d) == 2 && d->typeobj) {
        const char *tn = ((PyTypeObject *)d->typeobj)->tp_name;
        if (tn && strstr(tn, "bfloat16")) {
            *out = GC_BF16;
            return 0;
        }
    }
    return -1;
}

static int array_tensor(PyObject *obj, const char *role, int k, int writable, gc_tensor *t)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s %d must be a NumPy array, got %s", role, k, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (!PyArray_IS_C_CONTIGUOUS(a)) {
        PyErr_Format(PyExc_ValueError, "%s %d must be C-contiguous", role, k);
        return -1;
    }
    if (writable && !PyArray_ISWRITEABLE(a)) {
        PyErr_Format(PyExc_ValueError, "%s %d must be writable", role, k);
        return -1;
    }
    if (PyArray_NDIM(a) > GC_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s %d has rank %d (at most %d)", role, k, PyArray_NDIM(a), GC_MAX_DIMS);
        return -1;
    }
    gc_dtype dt;
    if (array_dtype(a, &dt)) {
        PyErr_Format(PyExc_TypeError,
                     "%s %d has dtype %R; expected float32, float16, bfloat16 (uint16 bits) or int32",
                     role, k, (PyObject *)PyArray_DESCR(a));
        return -1;
    }
    int64_t shape[GC_MAX_DIMS];
    for (int i = 0; i < PyArray_NDIM(a); i++) shape[i] = PyArray_DIM(a, i);
    *t = gc_tensor_make(PyArray_DATA(a), dt, PyArray_NDIM(a), shape);
    /* a zero-size array may have a NULL-ish data pointer: keep it "present" */
    if (!t->data) t->data = (void *)t;
    return 0;
}

/* Copy host tensors to backend memory (non-CPU backends) and back. */
typedef struct {
    gc_tensor host[GC_MAX_OP_IN + GC_MAX_OP_OUT];
    gc_tensor dev[GC_MAX_OP_IN + GC_MAX_OP_OUT];
    int used[GC_MAX_OP_IN + GC_MAX_OP_OUT];
} staged;

static void staged_free(const gc_backend *be, staged *st)
{
    for (int k = 0; k < GC_MAX_OP_IN + GC_MAX_OP_OUT; k++)
        if (st->used[k] == 1 && st->dev[k].data) be->release(be, st->dev[k].data);
}

static gc_status run_staged(const gc_backend *be, gc_op_call *c, int nin, int nout)
{
    if (strcmp(be->name, "cpu") == 0) return gc_op_run(be, c);
    /* validate on host pointers first so no device memory is spent on a bad call */
    gc_status s = gc_op_validate(c);
    if (s) return s;
    staged st;
    memset(&st, 0, sizeof st);
    for (int k = 0; k < nin + nout && s == GC_OK; k++) {
        const gc_tensor *t = k < nin ? c->in[k] : c->out[k - nin];
        if (!t || !t->data) continue;
        size_t bytes = (size_t)gc_tensor_numel(t) * gc_dtype_size(t->dtype);
        st.host[k] = *t;
        st.dev[k] = *t;
        st.dev[k].data = NULL;
        /* the same host array passed twice (add(g, g2) -> g in place) is one device
         * buffer too, so the kernels' aliasing rules are what the call exercises */
        for (int j = 0; j < k && !st.dev[k].data; j++)
            if (st.host[j].data == t->data && st.dev[j].data &&
                (size_t)gc_tensor_numel(&st.host[j]) * gc_dtype_size(st.host[j].dtype) == bytes)
                st.dev[k].data = st.dev[j].data;
        if (!st.dev[k].data) {
            st.used[k] = 1;
            s = be->alloc(be, bytes ? bytes : 4, &st.dev[k].data);
            if (s == GC_OK && bytes) s = be->upload(be, st.dev[k].data, t->data, bytes);
        } else {
            st.used[k] = 2; /* borrowed: downloaded, never released */
        }
        if (k < nin) c->in[k] = &st.dev[k];
        else c->out[k - nin] = &st.dev[k];
    }
    if (s == GC_OK) s = gc_op_run(be, c);
    for (int k = nin; k < nin + nout && s == GC_OK; k++) {
        if (!st.used[k]) continue;
        size_t bytes = (size_t)gc_tensor_numel(&st.host[k]) * gc_dtype_size(st.host[k].dtype);
        if (bytes) s = be->download(be, st.host[k].data, st.dev[k].data, bytes);
    }
    if (s == GC_OK) s = be->sync(be);
    staged_free(be, &st);
    return s;
}

/* ------------------------------------------------------------------ run_op */

static PyObject *py_run_op(PyObject *self, PyObject *args)
{
    (void)self;
    const char *name;
    PyObject *backend, *inputs, *outputs, *params = NULL;
    if (!PyArg_ParseTuple(args, "sOOO|O:run_op", &name, &backend, &inputs, &outputs, &params)) return NULL;
    int op = gc_op_from_name(name);
    if (op < 0) return PyErr_Format(PyExc_ValueError, "run_op: unknown op '%s'", name);
    const gc_backend *be = get_backend(backend);
    if (!be) return NULL;
    int nin = gc_op_num_inputs((gc_op)op), nout = gc_op_num_outputs((gc_op)op);
    if (!PyTuple_Check(inputs) || PyTuple_GET_SIZE(inputs) != nin)
        return PyErr_Format(PyExc_ValueError, "%s: inputs must be a tuple of %d items", name, nin);
    if (!PyTuple_Check(outputs) || PyTuple_GET_SIZE(outputs) != nout)
        return PyErr_Format(PyExc_ValueError, "%s: outputs must be a tuple of %d items", name, nout);
    any_params P;
    if (parse_params((gc_op)op, params, be, &P)) return NULL;
    gc_tensor tin[GC_MAX_OP_IN], tout[GC_MAX_OP_OUT];
    gc_op_call c;
    memset(&c, 0, sizeof c);
    memset(tin, 0, sizeof tin);
    memset(tout, 0, sizeof tout);
    c.op = (gc_op)op;
    c.params = &P;
    for (int k = 0; k < nin; k++) {
        PyObject *o = PyTuple_GET_ITEM(inputs, k);
        if (o != Py_None && array_tensor(o, "input", k, 0, &tin[k])) return NULL;
        c.in[k] = &tin[k];
    }
    for (int k = 0; k < nout; k++) {
        PyObject *o = PyTuple_GET_ITEM(outputs, k);
        if (o != Py_None && array_tensor(o, "output", k, 1, &tout[k])) return NULL;
        c.out[k] = &tout[k];
    }
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = run_staged(be, &c, nin, nout);
    Py_END_ALLOW_THREADS
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ introspection */

static PyObject *py_op_names(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    PyObject *l = PyList_New(GC_OP_COUNT);
    for (int i = 0; l && i < GC_OP_COUNT; i++) PyList_SET_ITEM(l, i, PyUnicode_FromString(gc_op_name((gc_op)i)));
    return l;
}

static PyObject *py_op_arity(PyObject *self, PyObject *arg)
{
    (void)self;
    if (!PyUnicode_Check(arg)) return PyErr_Format(PyExc_TypeError, "op_arity: expected an op name");
    int op = gc_op_from_name(PyUnicode_AsUTF8(arg));
    if (op < 0) return PyErr_Format(PyExc_ValueError, "op_arity: unknown op %R", arg);
    return Py_BuildValue("(ii)", gc_op_num_inputs((gc_op)op), gc_op_num_outputs((gc_op)op));
}

static PyObject *py_backends(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    int n = gc_backend_count();
    PyObject *l = PyList_New(0);
    for (int i = 0; l && i < n; i++) {
        const gc_backend *be = gc_backend_at(i);
        PyObject *s = backend_label(be);
        if (!s || PyList_Append(l, s)) {
            Py_XDECREF(s);
            Py_DECREF(l);
            return NULL;
        }
        Py_DECREF(s);
    }
    return l;
}

static PyObject *py_set_allow_tf32(PyObject *self, PyObject *arg)
{
    (void)self;
    int b = PyObject_IsTrue(arg);
    if (b < 0) return NULL;
    gc_set_allow_tf32(b);
    Py_RETURN_NONE;
}

static PyObject *py_get_allow_tf32(PyObject *self, PyObject *noargs)
{
    (void)self; (void)noargs;
    return PyBool_FromLong(gc_get_allow_tf32());
}

/* ------------------------------------------------------------------ Buffer */

typedef struct {
    PyObject_HEAD
    const gc_backend *be;
    void *ptr;
    Py_ssize_t size; /* float32 elements */
    Py_ssize_t exports;
} BufferObject;

static void buffer_dealloc(BufferObject *b)
{
    if (b->ptr) b->be->release(b->be, b->ptr);
    Py_TYPE(b)->tp_free((PyObject *)b);
}

static PyObject *buffer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"backend", "n", NULL};
    PyObject *backend;
    Py_ssize_t n;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "On:Buffer", kwlist, &backend, &n)) return NULL;
    if (n < 0) return PyErr_Format(PyExc_ValueError, "Buffer: n must be >= 0, got %zd", n);
    const gc_backend *be = get_backend(backend);
    if (!be) return NULL;
    BufferObject *b = (BufferObject *)type->tp_alloc(type, 0);
    if (!b) return NULL;
    b->be = be;
    b->size = n;
    size_t bytes = (size_t)(n ? n : 1) * sizeof(float);
    if ((size_t)n > ((size_t)-1) / 8) {
        Py_DECREF(b);
        return PyErr_Format(PyExc_MemoryError, "Buffer: %zd float32 elements is too large", n);
    }
    gc_status s = be->alloc(be, bytes, &b->ptr);
    if (s == GC_OK) s = be->fill_zero(be, b->ptr, bytes);
    if (s) {
        Py_DECREF(b);
        return gc_py_raise(s);
    }
    return (PyObject *)b;
}

static PyObject *buffer_write(BufferObject *b, PyObject *arg)
{
    PyArrayObject *a = (PyArrayObject *)PyArray_FROMANY(arg, NPY_FLOAT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
    if (!a) return NULL;
    if (PyArray_SIZE(a) != b->size) {
        PyErr_Format(PyExc_ValueError, "Buffer.write: expected %zd values, got an array of %zd", b->size,
                     (Py_ssize_t)PyArray_SIZE(a));
        Py_DECREF(a);
        return NULL;
    }
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = b->be->upload(b->be, b->ptr, PyArray_DATA(a), (size_t)b->size * sizeof(float));
    if (s == GC_OK) s = b->be->sync(b->be);
    Py_END_ALLOW_THREADS
    Py_DECREF(a);
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

static PyObject *buffer_read(BufferObject *b, PyObject *noargs)
{
    (void)noargs;
    npy_intp dim = b->size;
    PyArrayObject *a = (PyArrayObject *)PyArray_SimpleNew(1, &dim, NPY_FLOAT32);
    if (!a) return NULL;
    gc_status s = GC_OK;
    Py_BEGIN_ALLOW_THREADS
    s = b->be->sync(b->be);
    if (s == GC_OK) s = b->be->download(b->be, PyArray_DATA(a), b->ptr, (size_t)b->size * sizeof(float));
    Py_END_ALLOW_THREADS
    if (s) {
        Py_DECREF(a);
        return gc_py_raise(s);
    }
    return (PyObject *)a;
}

static int buffer_getbuffer(BufferObject *b, Py_buffer *view, int flags)
{
    if (strcmp(b->be->name, "cpu") != 0) {
        PyErr_SetString(PyExc_BufferError, "Buffer: only CPU buffers can be viewed; use read()");
        return -1;
    }
    int r = PyBuffer_FillInfo(view, (PyObject *)b, b->ptr, b->size * (Py_ssize_t)sizeof(float), 0, flags);
    if (r == 0) {
        if (flags & PyBUF_FORMAT) view->format = "f";
        view->itemsize = sizeof(float);
        b->exports++;
    }
    return r;
}

static void buffer_releasebuffer(BufferObject *b, Py_buffer *view)
{
    (void)view;
    b->exports--;
}

static PyBufferProcs buffer_as_buffer = {(getbufferproc)buffer_getbuffer, (releasebufferproc)buffer_releasebuffer};

static PyObject *buffer_get_backend(BufferObject *b, void *c)
{
    (void)c;
    return backend_label(b->be);
}

static PyObject *buffer_get_size(BufferObject *b, void *c)
{
    (void)c;
    return PyLong_FromSsize_t(b->size);
}

static PyMethodDef buffer_methods[] = {
    {"write", (PyCFunction)buffer_write, METH_O, "write(array): copy `size` values in (converted to float32)"},
    {"read", (PyCFunction)buffer_read, METH_NOARGS, "read() -> float32 1-D copy"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef buffer_getset[] = {
    {"backend", (getter)buffer_get_backend, NULL, "backend name", NULL},
    {"size", (getter)buffer_get_size, NULL, "number of float32 elements", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject BufferType;

static int p_devptr(PyObject *d, const char *k, const gc_backend *be, Py_ssize_t min, const float **out)
{
    PyObject *v = item(d, k);
    *out = NULL;
    if (!v || v == Py_None) return 0;
    if (!PyObject_TypeCheck(v, &BufferType)) {
        PyErr_Format(PyExc_TypeError, "parameter '%s' must be a gpucmp._core.Buffer (backend memory), got %R", k, v);
        return -1;
    }
    BufferObject *b = (BufferObject *)v;
    if (b->be != be) {
        PyErr_Format(PyExc_ValueError, "parameter '%s' is a Buffer on another backend", k);
        return -1;
    }
    if (b->size < min) {
        PyErr_Format(PyExc_ValueError, "parameter '%s' needs a Buffer of >= %zd values, got %zd", k, min, b->size);
        return -1;
    }
    *out = (const float *)b->ptr;
    return 0;
}

static PyTypeObject BufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpucmp._core.Buffer",
    .tp_basicsize = sizeof(BufferObject),
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_buffer = &buffer_as_buffer,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Buffer(backend, n): n float32 elements of backend memory, zero-filled",
    .tp_methods = buffer_methods,
    .tp_getset = buffer_getset,
    .tp_new = buffer_new,
};

/* ------------------------------------------------------------------ Plan */

typedef struct {
    PyObject_HEAD
    gc_plan *plan;
    const gc_backend *be;
    PyObject *keep; /* list of Buffers the plan borrows */
    int64_t max_batch;
    int n_layers;
    int n_inputs;                                   /* model inputs, in order */
    int in_ndim[GC_NODE_MAX_INPUTS], out_ndim;
    int64_t in_shape[GC_NODE_MAX_INPUTS][GC_MAX_DIMS], out_shape[GC_MAX_DIMS];
    int has_train, sparse, loss_scaling;
    unsigned metrics;
    gc_opt_kind opt;
    PyObject *group; /* the ReplicaGroup this plan joined (outlives the plan), or NULL */
} PlanObject;

static void plan_dealloc(PlanObject *p)
{
    gc_plan_destroy(p->plan);
    Py_XDECREF(p->keep);
    Py_XDECREF(p->group);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

static int get_shape(PyObject *d, const char *k, int idx, int *nd, int64_t *shape)
{
    PyObject *v = item(d, k);
    if (!v) {
        PyErr_Format(PyExc_ValueError, "Plan: layer %d is missing '%s'", idx, k);
        return -1;
    }
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "Plan: layer %d '%s' must be a tuple of ints, got %R", idx, k, v);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n < 1 || n > GC_MAX_DIMS - 1) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "Plan: layer %d '%s' has rank %zd (1..%d allowed)", idx, k, n, GC_MAX_DIMS - 1);
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        long long x = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Plan: layer %d '%s' must hold ints, got %R", idx, k, v);
            return -1;
        }
        shape[i] = x;
    }
    *nd = (int)n;
    Py_DECREF(seq);
    return 0;
}

static int get_buffer(PyObject *d, const char *k, int idx, PyObject *keep, const gc_backend *be, void **out)
{
    PyObject *v = item(d, k);
    *out = NULL;
    if (!v || v == Py_None) return 0;
    if (!PyObject_TypeCheck(v, &BufferType)) {
        PyErr_Format(PyExc_TypeError, "Plan: layer %d '%s' must be a Buffer, got %s", idx, k, Py_TYPE(v)->tp_name);
        return -1;
    }
    BufferObject *b = (BufferObject *)v;
    if (b->be != be) {
        PyErr_Format(PyExc_ValueError, "Plan: layer %d '%s' lives on backend '%s', the plan on '%s'", idx, k,
                     b->be->name, be->name);
        return -1;
    }
    if (PyList_Append(keep, v)) return -1;
    *out = b->ptr;
    return 0;
}

static const char *const layer_kinds[GC_LAYER_COUNT] = {"dense",   "conv2d",   "maxpool2d", "avgpool2d", "reshape",
                                                        "dropout", "activation", "input", "add",      "multiply",
                                                        "concat",  "batchnorm", "pad2d",   "embedding", "rnn",
                                                        "seq_mask", "masking", "select", "reverse",
                                                        "scale", "mask_or"};
/* rnn nodes: "cell" and the activations, as gc_rnn_cell / gc_rnn_act number them */
static const char *const rnn_cell_names[] = {"simple", "lstm", "gru", "gru_reset_before"};
static const char *const rnn_act_names[] = {"tanh", "sigmoid", "relu", "linear", "hard_sigmoid"};
/* rnn nodes: "impl", as gc_layer_desc.rnn_impl numbers them */
static const char *const rnn_impl_names[] = {"own", "cudnn"};
static const char *const loss_names[GC_LOSS_COUNT] = {"categorical_crossentropy", "sparse_categorical_crossentropy",
                                                      "binary_crossentropy", "mse", "mae"};
static const char *const opt_names[GC_OPT_COUNT] = {"sgd", "adam", "rmsprop"};
static const char *const metric_names[GC_METRIC_COUNT] = {"acc_categorical", "acc_sparse", "acc_binary", "mse", "mae"};

/* "inputs": the producers of a node, as indices into the node list */
static int get_inputs(PyObject *d, int idx, gc_layer_desc *L)
{
    PyObject *v = item(d, "inputs");
    if (!v || v == Py_None) return 0;
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "Plan: node %d 'inputs' must be a list of node indices, got %R", idx, v);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > GC_NODE_MAX_INPUTS) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "Plan: node %d has %zd inputs (at most %d)", idx, n, GC_NODE_MAX_INPUTS);
        return -1;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        long x = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
        if (x == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "Plan: node %d 'inputs' must hold ints, got %R", idx, v);
            return -1;
        }
        L->inputs[k] = (int)x;
    }
    L->n_inputs = (int)n;
    Py_DECREF(seq);
    return 0;
}

/* pad2d "padding": an int, (h, w), or ((top, bottom), (left, right)) */
static int get_pad2d(PyObject *d, int idx, int *pad)
{
    PyObject *v = item(d, "padding");
    pad[0] = pad[1] = pad[2] = pad[3] = 1;
    if (!v || v == Py_None) return 0;
    if (PyLong_Check(v)) {
        int x;
        if (to_int(v, "padding", &x)) return -1;
        pad[0] = pad[1] = pad[2] = pad[3] = x;
        return 0;
    }
    PyObject *seq = PySequence_Fast(v, "");
    int ok = seq && PySequence_Fast_GET_SIZE(seq) == 2;
    for (int k = 0; ok && k < 2; k++) {
        PyObject *e = PySequence_Fast_GET_ITEM(seq, k);
        if (PyLong_Check(e)) {
            ok = to_int(e, "padding", &pad[2 * k]) == 0;
            pad[2 * k + 1] = pad[2 * k];
        } else {
            PyObject *pr = PySequence_Fast(e, "");
            ok = pr && PySequence_Fast_GET_SIZE(pr) == 2 &&
                 to_int(PySequence_Fast_GET_ITEM(pr, 0), "padding", &pad[2 * k]) == 0 &&
                 to_int(PySequence_Fast_GET_ITEM(pr, 1), "padding", &pad[2 * k + 1]) == 0;
            Py_XDECREF(pr);
        }
    }
    Py_XDECREF(seq);
    if (!ok) {
        if (!PyErr_Occurred() || PyErr_ExceptionMatches(PyExc_TypeError)) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "Plan: pad2d node %d 'padding' must be an int, (h, w) or "
                         "((top, bottom), (left, right)), got %R", idx, v);
        }
        return -1;
    }
    for (int k = 0; k < 4; k++)
        if (pad[k] < 0) {
            PyErr_Format(PyExc_ValueError, "Plan: pad2d node %d has a negative padding %R", idx, v);
            return -1;
        }
    return 0;
}

/* the weight buffers each kind takes, by slot */
static const char *const *weight_names(gc_layer_kind kind)
{
    static const char *const dense[] = {"kernel", "bias", NULL};
    static const char *const bn[] = {"gamma", "beta", "moving_mean", "moving_variance", NULL};
    static const char *const emb[] = {"embeddings", NULL};
    static const char *const rnn[] = {"kernel", "recurrent_kernel", "bias", "state_h", "state_c", NULL};
    static const char *const none[] = {NULL};
    switch (kind) {
    case GC_LAYER_EMBEDDING: return emb;
    case GC_LAYER_RNN: return rnn;
    case GC_LAYER_DENSE:
    case GC_LAYER_CONV2D: return dense;
    case GC_LAYER_BATCHNORM: return bn;
    default: return none;
    }
}

static int parse_layer(PyObject *d, int idx, PyObject *keep, const gc_backend *be, gc_layer_desc *L)
{
    memset(L, 0, sizeof *L);
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "Plan: layer %d must be a dict", idx);
        return -1;
    }
    int kind = 0, act = 0, pad = 0, tr = 1, dt = 0;
    long long sb = 0, si = 0;
    PyObject *k = item(d, "kind");
    if (!k) {
        PyErr_Format(PyExc_ValueError, "Plan: layer %d is missing 'kind'", idx);
        return -1;
    }
    if (parse_enum(k, "layer kind", layer_kinds, GC_LAYER_COUNT, &kind)) return -1;
    L->kind = (gc_layer_kind)kind;
    if (L->kind == GC_LAYER_INPUT) {
        if (get_shape(d, "out_shape", idx, &L->out_ndim, L->out_shape)) return -1;
        L->in_ndim = L->out_ndim;
        memcpy(L->in_shape, L->out_shape, sizeof L->in_shape);
        return 0;
    }
    if (get_shape(d, "in_shape", idx, &L->in_ndim, L->in_shape) ||
        get_shape(d, "out_shape", idx, &L->out_ndim, L->out_shape) || get_inputs(d, idx, L) ||
        p_enum(d, "activation", act_names, GC_ACT_COUNT, 0, &act) || p_bool(d, "trainable", 1, &tr) ||
        p_float(d, "rate", 0.0, &L->dropout_rate) || p_enum(d, "dtype", compute_dtype_names, 3, 0, &dt))
        return -1;
    L->act = (gc_act)act;
    L->trainable = tr;
    L->dtype = (gc_dtype)dt;
    if (L->kind == GC_LAYER_CONV2D) {
        if (!item(d, "kernel_size")) {
            PyErr_Format(PyExc_ValueError, "Plan: conv2d layer %d is missing 'kernel_size'", idx);
            return -1;
        }
        if (p_pair(d, "kernel_size", 1, 1, &L->kernel_h, &L->kernel_w) ||
            p_pair(d, "strides", 1, 1, &L->conv.stride_h, &L->conv.stride_w) ||
            p_pair(d, "dilation", 1, 1, &L->conv.dil_h, &L->conv.dil_w) || p_enum(d, "padding", pad_names, 2, 0, &pad))
            return -1;
        L->conv.padding = (gc_padding)pad;
        L->conv.act = L->act;
    }
    if (L->kind == GC_LAYER_MAXPOOL2D || L->kind == GC_LAYER_AVGPOOL2D) {
        if (p_pair(d, "pool_size", 2, 2, &L->pool.pool_h, &L->pool.pool_w) ||
            p_pair(d, "strides", L->pool.pool_h, L->pool.pool_w, &L->pool.stride_h, &L->pool.stride_w) ||
            p_enum(d, "padding", pad_names, 2, 0, &pad))
            return -1;
        if (item(d, "strides") == Py_None) {
            L->pool.stride_h = L->pool.pool_h;
            L->pool.stride_w = L->pool.pool_w;
        }
        L->pool.padding = (gc_padding)pad;
    }
    if (L->kind == GC_LAYER_CONCAT) {
        long long axis = -1;
        if (p_long(d, "axis", -1, &axis)) return -1;
        if (axis < 0) axis += L->out_ndim;
        if (axis < 0 || axis >= L->out_ndim) {
            PyErr_Format(PyExc_ValueError, "Plan: concat node %d axis %lld is outside the sample rank %d", idx,
                         axis, L->out_ndim);
            return -1;
        }
        L->axis = (int)axis;
    }
    if (L->kind == GC_LAYER_PAD2D && get_pad2d(d, idx, L->pad)) return -1;
    if (L->kind == GC_LAYER_EMBEDDING) {
        long long v = 0;
        if (p_long(d, "input_dim", 0, &v)) return -1;
        L->input_dim = v;
    }
    if (L->kind == GC_LAYER_RNN &&
        (p_enum(d, "cell", rnn_cell_names, 4, 0, &L->rnn_cell) ||
         p_enum(d, "rnn_activation", rnn_act_names, 5, 0, &L->rnn_act) ||
         p_enum(d, "recurrent_activation", rnn_act_names, 5, 1, &L->rnn_recurrent_act) ||
         p_bool(d, "go_backwards", 0, &L->go_backwards) || p_bool(d, "return_sequences", 0, &L->return_sequences) ||
         p_bool(d, "zero_output_for_mask", 0, &L->zero_output_for_mask) ||
         p_bool(d, "return_state", 0, &L->return_state) || p_long(d, "state_inputs", 0, &si) ||
         p_bool(d, "mask_input", 0, &L->rnn_mask_input) || p_long(d, "stateful_batch", 0, &sb) ||
         p_float(d, "recurrent_rate", 0.0, &L->recurrent_dropout_rate) ||
         p_bool(d, "gate_dropout", 0, &L->rnn_gate_dropout) ||
         p_enum(d, "impl", rnn_impl_names, 2, 0, &L->rnn_impl)))
        return -1;
    L->stateful_batch = sb;
    L->rnn_state_inputs = (int)si;
    if (L->kind == GC_LAYER_SEQ_MASK && p_float(d, "mask_value", 0.0, &L->mask_value)) return -1;
    if (L->kind == GC_LAYER_SCALE && p_float(d, "scale", 1.0, &L->scale)) return -1;
    if (L->kind == GC_LAYER_SELECT) {
        long long off = 0;
        if (p_long(d, "offset", 0, &off)) return -1;
        L->select_offset = off;
    }
    if (L->kind == GC_LAYER_BATCHNORM &&
        (p_float(d, "epsilon", 1e-3, &L->epsilon) || p_float(d, "momentum", 0.99, &L->momentum)))
        return -1;
    const char *const *wn = weight_names(L->kind);
    for (int w = 0; wn[w]; w++)
        if (get_buffer(d, wn[w], idx, keep, be, &L->weights[w])) return -1;
    return 0;
}

static PyObject *plan_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"backend", "layers", "max_batch", "train", NULL};
    PyObject *backend, *layers, *train = Py_None;
    long long max_batch;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOL|O:Plan", kwlist, &backend, &layers, &max_batch, &train))
        return NULL;
    const gc_backend *be = get_backend(backend);
    if (!be) return NULL;
    if (!PyList_Check(layers) && !PyTuple_Check(layers))
        return PyErr_Format(PyExc_TypeError, "Plan: layers must be a list of dicts");
    PlanObject *p = (PlanObject *)type->tp_alloc(type, 0);
    if (!p) return NULL;
    p->be = be;
    p->keep = PyList_New(0);
    Py_ssize_t n = PySequence_Size(layers);
    gc_layer_desc *L = n > 0 ? PyMem_Calloc((size_t)n, sizeof *L) : NULL;
    void **state = NULL;
    gc_train_desc td;
    memset(&td, 0, sizeof td);
    int ok = p->keep && (n == 0 || L);
    if (!ok && !PyErr_Occurred()) PyErr_NoMemory();
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *d = PySequence_GetItem(layers, i);
        ok = d && parse_layer(d, (int)i, p->keep, be, &L[i]) == 0;
        Py_XDECREF(d);
    }
    if (ok && train != Py_None) {
        int loss = 0, opt = 0, fl = 0;
        if (!PyDict_Check(train)) {
            PyErr_SetString(PyExc_TypeError, "Plan: train must be a dict or None");
            ok = 0;
        }
        PyObject *lv = ok ? item(train, "loss") : NULL, *ov = ok ? item(train, "optimizer") : NULL;
        if (ok && (!lv || !ov)) {
            PyErr_SetString(PyExc_ValueError, "Plan: train needs 'loss' and 'optimizer'");
            ok = 0;
        }
        ok = ok && parse_enum(lv, "loss", loss_names, GC_LOSS_COUNT, &loss) == 0 &&
             parse_enum(ov, "optimizer", opt_names, GC_OPT_COUNT, &opt) == 0 && p_bool(train, "from_logits", 0, &fl) == 0;
        long long growth = 2000;
        ok = ok && p_bool(train, "loss_scaling", 0, &td.loss_scaling) == 0 &&
             p_long(train, "loss_scale_growth", 2000, &growth) == 0;
        if (ok && (growth < 1 || growth > 0x7fffffff)) {
            PyErr_Format(PyExc_ValueError, "Plan: loss_scale_growth must be in 1..2^31-1, got %lld", growth);
            ok = 0;
        }
        td.loss_scale_growth = (int)growth;
        PyObject *lm = ok ? item(train, "loss_mask") : NULL;
        if (ok && lm && lm != Py_None) {
            long long node = PyLong_AsLongLong(lm);
            if (node == -1 && PyErr_Occurred()) {
                ok = 0;
            } else if (node < 0 || node > 0x7fffffff) {
                PyErr_Format(PyExc_ValueError, "Plan: loss_mask must be a node index, got %lld", node);
                ok = 0;
            } else {
                td.has_loss_mask = 1;
                td.loss_mask_node = (int)node;
            }
        }
        td.loss = (gc_loss_kind)loss;
        td.opt = (gc_opt_kind)opt;
        td.from_logits = fl;
        PyObject *mv = ok ? item(train, "metrics") : NULL;
        if (ok && mv && mv != Py_None) {
            PyObject *seq = PySequence_Fast(mv, "Plan: metrics must be a list of strings");
            ok = seq != NULL;
            for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(seq); i++) {
                int m;
                ok = parse_enum(PySequence_Fast_GET_ITEM(seq, i), "metric", metric_names, GC_METRIC_COUNT, &m) == 0;
                if (ok) td.metrics |= 1u << m;
            }
            Py_XDECREF(seq);
        }
        PyObject *sv = ok ? item(train, "opt_state") : NULL;
        if (ok && sv && sv != Py_None) {
            PyObject *seq = PySequence_Fast(sv, "Plan: opt_state must be a list of Buffers");
            ok = seq != NULL;
            Py_ssize_t ns = ok ? PySequence_Fast_GET_SIZE(seq) : 0;
            if (ok && ns) {
                state = PyMem_Calloc((size_t)ns, sizeof(void *));
                ok = state != NULL;
                if (!ok) PyErr_NoMemory();
            }
            for (Py_ssize_t i = 0; ok && i < ns; i++) {
                PyObject *b = PySequence_Fast_GET_ITEM(seq, i);
                if (!PyObject_TypeCheck(b, &BufferType) || ((BufferObject *)b)->be != be) {
                    PyErr_Format(PyExc_TypeError, "Plan: opt_state[%zd] must be a Buffer on the plan's backend", i);
                    ok = 0;
                } else {
                    state[i] = ((BufferObject *)b)->ptr;
                    ok = PyList_Append(p->keep, b) == 0;
                }
            }
            td.opt_state = state;
            td.n_opt_state = (int)ns;
            Py_XDECREF(seq);
        }
        p->has_train = 1;
        p->sparse = td.loss == GC_LOSS_SPARSE_CATEGORICAL_XENT;
        p->metrics = td.metrics;
        p->opt = td.opt;
        p->loss_scaling = td.loss_scaling;
    }
    gc_status s = GC_OK;
    if (ok) {
        Py_BEGIN_ALLOW_THREADS
        s = gc_plan_create(be, L, (int)n, train != Py_None ? &td : NULL, max_batch, &p->plan);
        Py_END_ALLOW_THREADS
        if (s) {
            gc_py_raise(s);
            ok = 0;
        }
    }
    if (ok) {
        p->max_batch = max_batch;
        p->n_layers = (int)n;
        p->n_inputs = 0;
        for (Py_ssize_t i = 0; i < n; i++)
            if (L[i].kind == GC_LAYER_INPUT) {
                p->in_ndim[p->n_inputs] = L[i].out_ndim;
                memcpy(p->in_shape[p->n_inputs++], L[i].out_shape, sizeof L[i].out_shape);
            }
        if (!p->n_inputs) { /* the implicit input of a plain chain */
            p->n_inputs = 1;
            p->in_ndim[0] = L[0].in_ndim;
            memcpy(p->in_shape[0], L[0].in_shape, sizeof L[0].in_shape);
        }
        p->out_ndim = L[n - 1].out_ndim;
        memcpy(p->out_shape, L[n - 1].out_shape, sizeof L[n - 1].out_shape);
    }
    PyMem_Free(L);
    PyMem_Free(state);
    if (!ok) {
        Py_DECREF(p);
        return NULL;
    }
    return (PyObject *)p;
}

/* The model inputs of a call: one float32 C-contiguous array per input, (rows, *shape)
 * (set_data: any rows >= 1, returned in *rows). x is the array itself for a one-input
 * plan, else a list or tuple of one array per input. Fills xa[] with new references. */
typedef struct {
    int n;
    PyArrayObject *a[GC_NODE_MAX_INPUTS];
    const float *ptr[GC_NODE_MAX_INPUTS];
} plan_inputs;

static void inputs_release(plan_inputs *in)
{
    for (int k = 0; k < in->n; k++) Py_XDECREF(in->a[k]);
    in->n = 0;
}

/* x's arrays, with min_rows..max_rows rows (max_rows < 0: any count from min_rows on, a
 * whole data set) */
static int plan_inputs_get(PlanObject *p, PyObject *x, const char *what, int64_t min_rows, int64_t max_rows,
                           int64_t *rows, plan_inputs *in)
{
    memset(in, 0, sizeof *in);
    PyObject *items[GC_NODE_MAX_INPUTS];
    int multi = p->n_inputs > 1;
    if (!multi && (PyList_Check(x) || PyTuple_Check(x)) && PySequence_Size(x) == 1) {
        PyObject *e = PySequence_GetItem(x, 0); /* [array]: the list of one input */
        if (e && PyArray_Check(e)) multi = 1;
        Py_XDECREF(e);
        PyErr_Clear();
    }
    if (multi) {
        if (!PyList_Check(x) && !PyTuple_Check(x)) {
            PyErr_Format(PyExc_ValueError, "Plan.%s: the model has %d inputs; x must be a list of %d arrays, got %s",
                         what, p->n_inputs, p->n_inputs, Py_TYPE(x)->tp_name);
            return -1;
        }
        if (PySequence_Size(x) != p->n_inputs) {
            PyErr_Format(PyExc_ValueError, "Plan.%s: the model has %d inputs, x holds %zd arrays", what,
                         p->n_inputs, PySequence_Size(x));
            return -1;
        }
        for (int k = 0; k < p->n_inputs; k++) items[k] = PySequence_GetItem(x, k);
    } else {
        items[0] = x;
        Py_INCREF(x);
    }
    int64_t n_rows = -1;
    int ok = 1;
    for (int k = 0; k < p->n_inputs; k++) {
        PyArrayObject *a = ok && items[k] ? (PyArrayObject *)PyArray_FROMANY(items[k], NPY_FLOAT32, 1, GC_MAX_DIMS,
                                                        NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST)
                                          : NULL;
        Py_XDECREF(items[k]);
        if (!a) {
            ok = 0;
            continue;
        }
        in->a[in->n++] = a;
        int nd = p->in_ndim[k];
        int good = PyArray_NDIM(a) == nd + 1;
        for (int i = 0; good && i < nd; i++) good = PyArray_DIM(a, i + 1) == p->in_shape[k][i];
        if (!good) {
            PyObject *want = PyTuple_New(nd + 1);
            PyTuple_SET_ITEM(want, 0, Py_None);
            Py_INCREF(Py_None);
            for (int i = 0; i < nd; i++) PyTuple_SET_ITEM(want, i + 1, PyLong_FromLongLong(p->in_shape[k][i]));
            PyObject *got = PyObject_GetAttrString((PyObject *)a, "shape");
            if (p->n_inputs > 1)
                PyErr_Format(PyExc_ValueError, "Plan.%s: input %d must have shape %R, got %R", what, k, want, got);
            else
                PyErr_Format(PyExc_ValueError, "Plan: x must have shape %R, got %R", want, got);
            Py_XDECREF(want);
            Py_XDECREF(got);
            ok = 0;
            continue;
        }
        int64_t r = PyArray_DIM(a, 0);
        if (n_rows >= 0 && r != n_rows) {
            PyErr_Format(PyExc_ValueError, "Plan.%s: input %d has %lld rows, input 0 has %lld", what, k,
                         (long long)r, (long long)n_rows);
            ok = 0;
            continue;
        }
        n_rows = r;
        in->ptr[k] = PyArray_DATA(a);
    }
    if (ok && max_rows >= 0 && (n_rows < min_rows || n_rows > max_rows)) {
        PyErr_Format(PyExc_ValueError, "Plan: batch of %lld rows, expected %lld..%lld", (long long)n_rows,
                     (long long)min_rows, (long long)max_rows);
        ok = 0;
    }
    if (ok && max_rows < 0 && n_rows < min_rows) {
        PyErr_Format(PyExc_ValueError, "Plan.%s: x must have shape (n, *in_shape) with n >= %lld", what,
                     (long long)min_rows);
        ok = 0;
    }
    if (!ok) {
        inputs_release(in);
        return -1;
    }
    *rows = n_rows;
    return 0;
}

static PyArrayObject *plan_y(PlanObject *p, PyObject *y, int64_t rows)
{
    int64_t per = 1;
    for (int i = 0; i < p->out_ndim; i++) per *= p->out_shape[i];
    int64_t want;
    PyArrayObject *a;
    if (p->sparse) {
        a = (PyArrayObject *)PyArray_FROMANY(y, NPY_INT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        want = rows * (per / p->out_shape[p->out_ndim - 1]);
    } else {
        a = (PyArrayObject *)PyArray_FROMANY(y, NPY_FLOAT32, 0, 0, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        want = rows * per;
    }
    if (!a) return NULL;
    if (PyArray_SIZE(a) != want) {
        PyErr_Format(PyExc_ValueError, "Plan: y holds %lld values, expected %lld for %lld rows (%s labels)",
                     (long long)PyArray_SIZE(a), (long long)want, (long long)rows, p->sparse ? "sparse" : "dense");
        Py_DECREF(a);
        return NULL;
    }
    return a;
}

static PyObject *stats_dict(PlanObject *p, const gc_step_stats *st)
{
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    PyObject *v = PyFloat_FromDouble(st->loss_sum);
    if (!v || PyDict_SetItemString(d, "loss", v)) goto fail;
    Py_DECREF(v);
    for (int bit = 0; bit < GC_METRIC_COUNT; bit++) {
        if (!(p->metrics & (1u << bit))) continue;
        v = PyFloat_FromDouble(st->metric_sum[bit]);
        if (!v || PyDict_SetItemString(d, metric_names[bit], v)) goto fail;
        Py_DECREF(v);
    }
    v = PyLong_FromLongLong(st->steps_applied);
    if (!v || PyDict_SetItemString(d, "steps_applied", v)) goto fail;
    Py_DECREF(v);
    if (p->loss_scaling) {
        v = PyFloat_FromDouble(st->loss_scale);
        if (!v || PyDict_SetItemString(d, "loss_scale", v)) goto fail;
        Py_DECREF(v);
        v = PyFloat_FromDouble(st->loss_scale_good);
        if (!v || PyDict_SetItemString(d, "loss_scale_good", v)) goto fail;
        Py_DECREF(v);
    }
    return d;
fail:
    Py_XDECREF(v);
    Py_DECREF(d);
    return NULL;
}

static int parse_hparams(PlanObject *p, PyObject *h, gc_opt_hparams *hp)
{
    memset(hp, 0, sizeof *hp);
    if (!PyDict_Check(h)) {
        PyErr_SetString(PyExc_TypeError, "train_step: hparams must be a dict");
        return -1;
    }
    long long t = 1;
    hp->kind = p->opt;
    double lr_def = p->opt == GC_OPT_SGD ? 0.01 : 0.001;
    if (p_float(h, "lr", lr_def, &hp->lr) || p_float(h, "beta_1", 0.9, &hp->beta_1) ||
        p_float(h, "beta_2", 0.999, &hp->beta_2) || p_float(h, "epsilon", 1e-7, &hp->epsilon) ||
        p_float(h, "momentum", 0.0, &hp->momentum) || p_float(h, "rho", 0.9, &hp->rho) ||
        p_bool(h, "nesterov", 0, &hp->nesterov) || p_long(h, "t", 1, &t) ||
        p_float(h, "loss_scale", 32768.0, &hp->loss_scale) || p_float(h, "loss_scale_good", 0.0, &hp->loss_scale_good))
        return -1;
    hp->t = t;
    return 0;
}

static PyObject *train_step_impl(PlanObject *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"x", "y", "hparams", "seed", NULL};
    PyObject *x, *y, *h;
    unsigned long long seed = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|K:train_step", kwlist, &x, &y, &h, &seed)) return NULL;
    if (!p->has_train) return PyErr_Format(PyExc_RuntimeError, "Plan: compiled without a loss; cannot train");
    gc_opt_hparams hp;
    if (parse_hparams(p, h, &hp)) return NULL;
    int64_t rows;
    plan_inputs xa;
    /* a replica may get no rows of a small last batch: it still joins its group's step */
    if (plan_inputs_get(p, x, "train_step", p->group ? 0 : 1, p->max_batch, &rows, &xa)) return NULL;
    PyArrayObject *ya = plan_y(p, y, rows);
    if (!ya) {
        inputs_release(&xa);
        return NULL;
    }
    gc_step_stats st;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = gc_plan_train_step(p->plan, xa.ptr, PyArray_DATA(ya), rows, &hp, seed, &st);
    Py_END_ALLOW_THREADS
    inputs_release(&xa);
    Py_DECREF(ya);
    if (s) return gc_py_raise(s);
    return stats_dict(p, &st);
}

static PyObject *plan_eval_step(PlanObject *p, PyObject *args)
{
    PyObject *x, *y;
    if (!PyArg_ParseTuple(args, "OO:eval_step", &x, &y)) return NULL;
    if (!p->has_train) return PyErr_Format(PyExc_RuntimeError, "Plan: compiled without a loss; cannot evaluate");
    int64_t rows;
    plan_inputs xa;
    if (plan_inputs_get(p, x, "eval_step", 1, p->max_batch, &rows, &xa)) return NULL;
    PyArrayObject *ya = plan_y(p, y, rows);
    if (!ya) {
        inputs_release(&xa);
        return NULL;
    }
    gc_step_stats st;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = gc_plan_eval_step(p->plan, xa.ptr, PyArray_DATA(ya), rows, &st);
    Py_END_ALLOW_THREADS
    inputs_release(&xa);
    Py_DECREF(ya);
    if (s) return gc_py_raise(s);
    return stats_dict(p, &st);
}

static PyObject *plan_predict(PlanObject *p, PyObject *x)
{
    int64_t rows;
    plan_inputs xa;
    if (plan_inputs_get(p, x, "predict", 1, p->max_batch, &rows, &xa)) return NULL;
    npy_intp dims[GC_MAX_DIMS];
    dims[0] = rows;
    for (int i = 0; i < p->out_ndim; i++) dims[i + 1] = p->out_shape[i];
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(p->out_ndim + 1, dims, NPY_FLOAT32);
    if (!out) {
        inputs_release(&xa);
        return NULL;
    }
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = gc_plan_predict(p->plan, xa.ptr, rows, PyArray_DATA(out));
    Py_END_ALLOW_THREADS
    inputs_release(&xa);
    if (s) {
        Py_DECREF(out);
        return gc_py_raise(s);
    }
    return (PyObject *)out;
}

static PyObject *plan_set_data(PlanObject *p, PyObject *args)
{
    PyObject *x, *y;
    if (!PyArg_ParseTuple(args, "OO:set_data", &x, &y)) return NULL;
    if (!p->has_train) return PyErr_Format(PyExc_RuntimeError, "Plan: compiled without a loss; cannot train");
    gc_status s;
    if (x == Py_None) {
        s = gc_plan_set_data(p->plan, NULL, NULL, 0);
        if (s) return gc_py_raise(s);
        Py_RETURN_NONE;
    }
    plan_inputs xa;
    int64_t n;
    if (plan_inputs_get(p, x, "set_data", 1, -1, &n, &xa)) return NULL;
    PyArrayObject *ya = plan_y(p, y, n);
    if (!ya) {
        inputs_release(&xa);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    s = gc_plan_set_data(p->plan, xa.ptr, PyArray_DATA(ya), n);
    Py_END_ALLOW_THREADS
    inputs_release(&xa);
    Py_DECREF(ya);
    if (s) return gc_py_raise(s);
    Py_RETURN_NONE;
}

static PyObject *train_steps_impl(PlanObject *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"indices", "batch_size", "hparams", "lrs", "seeds", NULL};
    PyObject *idx, *h, *lrs = Py_None, *seeds = Py_None;
    long long batch;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OLO|OO:train_steps", kwlist, &idx, &batch, &h, &lrs, &seeds))
        return NULL;
    if (!p->has_train) return PyErr_Format(PyExc_RuntimeError, "Plan: compiled without a loss; cannot train");
    gc_opt_hparams hp;
    if (parse_hparams(p, h, &hp)) return NULL;
    PyArrayObject *ia = (PyArrayObject *)PyArray_FROMANY(idx, NPY_INT32, 1, 1, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
    if (!ia) return NULL;
    int64_t n_rows = PyArray_DIM(ia, 0);
    int64_t steps = batch > 0 ? (n_rows + batch - 1) / batch : 0;
    PyArrayObject *la = NULL, *sa = NULL;
    if (lrs != Py_None) {
        la = (PyArrayObject *)PyArray_FROMANY(lrs, NPY_FLOAT32, 1, 1, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        if (!la || PyArray_DIM(la, 0) != steps) {
            if (la) PyErr_Format(PyExc_ValueError, "Plan.train_steps: lrs must hold one value per step (%lld)", (long long)steps);
            goto fail;
        }
    }
    if (seeds != Py_None) {
        sa = (PyArrayObject *)PyArray_FROMANY(seeds, NPY_UINT64, 1, 1, NPY_ARRAY_C_CONTIGUOUS | NPY_ARRAY_ALIGNED | NPY_ARRAY_FORCECAST);
        if (!sa || PyArray_DIM(sa, 0) != steps) {
            if (sa) PyErr_Format(PyExc_ValueError, "Plan.train_steps: seeds must hold one value per step (%lld)", (long long)steps);
            goto fail;
        }
    }
    gc_step_stats st;
    gc_status s;
    Py_BEGIN_ALLOW_THREADS
    s = gc_plan_train_steps(p->plan, PyArray_DATA(ia), n_rows, batch, &hp, la ? PyArray_DATA(la) : NULL,
                            sa ? PyArray_DATA(sa) : NULL, &st);
    Py_END_ALLOW_THREADS
    Py_DECREF(ia);
    Py_XDECREF(la);
    Py_XDECREF(sa);
    if (s) return gc_py_raise(s);
    return stats_dict(p, &st);
fail:
    Py_DECREF(ia);
    Py_XDECREF(la);
    Py_XDECREF(sa);
    return NULL;
}

/* Plan.trace: the op calls of one step as dicts (see gc_plan_trace) */
static PyObject *tensor_info(const gc_tensor *t)
{
    if (!t || !t->data) Py_RETURN_NONE;
    PyObject *shape = PyTuple_New(t->ndim);
    if (!shape) return NULL;
    for (int i = 0; i < t->ndim; i++) PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(t->shape[i]));
    PyObject *d = Py_BuildValue("{s:N,s:s}", "shape", shape, "dtype", gc_dtype_name(t->dtype));
    return d;
}

static PyObject *params_info(const gc_op_call *c)
{
    switch (c->op) {
    case GC_OP_GEMM: {
        const gc_gemm_params *g = c->params;
        return Py_BuildValue("{s:i,s:i,s:s}", "trans_a", g->trans_a, "trans_b", g->trans_b, "activation",
                             act_names[g->act]);
    }
    case GC_OP_CONV2D_FWD:
    case GC_OP_CONV2D_BWD_DATA:
    case GC_OP_CONV2D_BWD_FILTER: {
        const gc_conv2d_params *q = c->params;
        return Py_BuildValue("{s:(ii),s:(ii),s:s,s:s,s:O}", "strides", q->stride_h, q->stride_w, "dilation",
                             q->dil_h, q->dil_w, "padding", pad_names[q->padding], "activation", act_names[q->act],
                             "accumulate", q->accumulate ? Py_True : Py_False);
    }
    case GC_OP_MAXPOOL2D_FWD:
    case GC_OP_MAXPOOL2D_BWD:
    case GC_OP_AVGPOOL2D_FWD:
    case GC_OP_AVGPOOL2D_BWD: {
        const gc_pool2d_params *q = c->params;
        return Py_BuildValue("{s:(ii),s:(ii),s:s,s:((ii)(ii))}", "pool_size", q->pool_h, q->pool_w, "strides",
                             q->stride_h, q->stride_w, "padding", pad_names[q->padding], "pads", q->pad_top,
                             q->pad_bottom, q->pad_left, q->pad_right);
    }
    case GC_OP_ACT_FWD:
    case GC_OP_ACT_BWD:
    case GC_OP_ADD: {
        const gc_act_params *q = c->params;
        return Py_BuildValue("{s:s}", "activation", act_names[q->act]);
    }
    case GC_OP_BATCHNORM_FWD:
    case GC_OP_BATCHNORM_BWD: {
        const gc_batchnorm_params *q = c->params;
        return Py_BuildValue("{s:i,s:s,s:O}", "training", q->training, "activation", act_names[q->act],
                             "mask_from_x", q->mask_from_x ? Py_True : Py_False);
    }
    default: return PyDict_New();
    }
}

typedef struct {
    PyObject *list;
    int failed;
} trace_sink;

static void trace_one(void *ctx, const gc_op_call *c, int node, const char *phase, double seconds)
{
    trace_sink *sink = ctx;
    if (sink->failed) return;
    if (!c) { /* a fused launch (profile only): the optimizer, or the multi-tensor casts */
        PyObject *d = Py_BuildValue("{s:s,s:i,s:s,s:[],s:[],s:{},s:d}", "op",
                                    node == GC_TRACE_CAST_MULTI ? "cast_multi" : "optim_multi", "node", node, "phase",
                                    phase ? phase : "other", "inputs", "outputs", "params", "seconds", seconds);
        if (!d || PyList_Append(sink->list, d)) sink->failed = 1;
        Py_XDECREF(d);
        return;
    }
    int ni = gc_op_num_inputs(c->op), no = gc_op_num_outputs(c->op);
    PyObject *ins = PyList_New(ni), *outs = PyList_New(no);
    if (!ins || !outs) goto fail;
    for (int k = 0; k < ni; k++) {
        PyObject *t = tensor_info(c->in[k]);
        if (!t) goto fail;
        PyList_SET_ITEM(ins, k, t);
    }
    for (int k = 0; k < no; k++) {
        PyObject *t = tensor_info(c->out[k]);
        if (!t) goto fail;
        PyList_SET_ITEM(outs, k, t);
    }
    PyObject *params = params_info(c);
    if (!params) goto fail;
    PyObject *d = Py_BuildValue("{s:s,s:i,s:s,s:N,s:N,s:N}", "op", gc_op_name(c->op), "node", node, "phase",
                                phase ? phase : "other", "inputs", ins, "outputs", outs, "params", params);
    if (d && seconds >= 0.0) {
        PyObject *t = PyFloat_FromDouble(seconds);
        if (!t || PyDict_SetItemString(d, "seconds", t)) sink->failed = 1;
        Py_XDECREF(t);
    }
    if (!d || PyList_Append(sink->list, d)) {
        Py_XDECREF(d);
        sink->failed = 1;
        return;
    }
    Py_DECREF(d);
    return;
fail:
    Py_XDECREF(ins);
    Py_XDECREF(outs);
    sink->failed = 1;
}

static PyObject *plan_trace(PlanObject *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"rows", "train", NULL};
    long long rows = 0;
    int train = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|Lp:trace", kwlist, &rows, &train)) return NULL;
    if (rows == 0) rows = p->max_batch;
    trace_sink sink = {PyList_New(0), 0};
    if (!sink.list) return NULL;
    /* the GIL is held: the callback builds Python objects */
    gc_status s = gc_plan_trace(p->plan, rows, train && p->has_train, trace_one, &sink);
    if (sink.failed) {
        Py_DECREF(sink.list);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    if (s) {
        Py_DECREF(sink.list);
        return gc_py_raise(s);
    }
    return sink.list;
}

static PyObject *plan_profile(PlanObject *p, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"x", "y", "hparams", NULL};
    PyObject *x, *y, *h;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO:profile", kwlist, &x, &y, &h)) return NULL;
    if (!p->has_train) return PyErr_Format(PyExc_RuntimeError, "Plan: compiled without a loss; cannot train");
    gc_opt_hparams hp;
    if (parse_hparams(p, h, &hp)) return NULL;
    int64_t rows;
    plan_inputs xa;
    if (plan_inputs_get(p, x, "profile", 1, p->max_batch, &rows, &xa)) return NULL;
    PyArrayObject *ya = plan_y(p, y, rows);
    if (!ya) {
        inputs_release(&xa);
        return NULL;
    }
    trace_sink sink = {PyList_New(0), 0};
    gc_status s = sink.list ? gc_plan_profile(p->plan, xa.ptr, PyArray_DATA(ya), rows, &hp, trace_one, &sink)
                            : GC_OK;
    inputs_release(&xa);
    Py_DECREF(ya);
    if (!sink.list) return NULL;
    if (sink.failed || s) {
        Py_DECREF(sink.list);
        if (s) return gc_py_raise(s);
        return PyErr_Occurred() ? NULL : PyErr_NoMemory();
    }
    return sink.list;
}

/* Plan.memory: every allocation of the plan, labelled (see gc_plan_memory) */
static PyObject *plan_memory(PlanObject *p, PyObject *unused)
{
    (void)unused;
    int n = gc_plan_memory(p->plan, NULL, 0);
    gc_plan_mem_entry *e = malloc((size_t)(n ? n : 1) * sizeof *e);
    if (!e) return PyErr_NoMemory();
    gc_plan_memory(p->plan, e, n);
    PyObject *list = PyList_New(n);
    for (int i = 0; list && i < n; i++) {
        PyObject *d = Py_BuildValue("{s:s,s:i,s:L,s:L,s:i,s:i,s:i,s:i}", "what", e[i].what, "node", e[i].node,
                                    "bytes", (long long)e[i].bytes, "offset", (long long)e[i].offset, "start",
                                    e[i].start, "end", e[i].end, "start2", e[i].start2, "end2", e[i].end2);
        if (!d) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, d);
    }
    free(e);
    return list;
}

static PyObject *plan_use_graphs(PlanObject *p, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    gc_plan_use_graphs(p->plan, on);
    Py_RETURN_NONE;
}

static PyObject *plan_use_fused_optimizer(PlanObject *p, PyObject *arg)
{
    int on = PyObject_IsTrue(arg);
    if (on < 0) return NULL;
    return PyBool_FromLong(gc_plan_use_fused_optimizer(p->plan, on));
}

static PyObject *plan_get_graph_replays(PlanObject *p, void *c)
{
    (void)c;
    return PyLong_FromLongLong(gc_plan_graph_replays(p->plan));
}

static PyObject *plan_get_backend(PlanObject *p, void *c)
{
    (void)c;
    return backend_label(p->be);
}

static PyObject *plan_get_max_batch(PlanObject *p, void *c)
{
    (void)c;
    return PyLong_FromLongLong(p->max_batch);
}

/* A replica whose step fails anywhere -- bad arguments caught here included -- aborts its
 * group, so the other replicas' steps return an error instead of waiting for it. */
static PyObject *abort_group_on_error(PlanObject *p, PyObject *ret)
{
    if (!ret && p->group) gc_replica_group_abort(gpucmp_replica_group_of(p->group));
    return ret;
}

static PyObject *plan_train_step(PlanObject *p, PyObject *args, PyObject *kw)
{
    return abort_group_on_error(p, train_step_impl(p, args, kw));
}

static PyObject *plan_train_steps(PlanObject *p, PyObject *args, PyObject *kw)
{
    return abort_group_on_error(p, train_steps_impl(p, args, kw));
}

static PyObject *plan_join_group(PlanObject *p, PyObject *args)
{
    PyObject *g;
    int rank;
    if (!PyArg_ParseTuple(args, "Oi:join_group", &g, &rank)) return NULL;
    gc_replica_group *group = gpucmp_replica_group_of(g);
    if (!group) return NULL;
    if (!p->has_train) return PyErr_Format(PyExc_ValueError, "join_group: the plan is compiled without a loss");
    if (rank < 0 || rank >= gc_replica_group_size(group))
        return PyErr_Format(PyExc_IndexError, "join_group: rank %d of a group of %d replicas", rank,
                            gc_replica_group_size(group));
    gc_status s = gc_plan_join_group(p->plan, group, rank);
    if (s) return gc_py_raise(s);
    Py_INCREF(g);
    p->group = g;
    Py_RETURN_NONE;
}

static PyMethodDef plan_methods[] = {
    {"join_group", (PyCFunction)plan_join_group, METH_VARARGS,
     "join_group(group, rank): this training plan becomes replica `rank` of a ReplicaGroup (its steps average "
     "their gradients with the other replicas' before the update)"},
    {"train_step", (PyCFunction)(void (*)(void))plan_train_step, METH_VARARGS | METH_KEYWORDS,
     "train_step(x, y, hparams, seed=0) -> dict of sums (loss, metrics) before the update"},
    {"eval_step", (PyCFunction)plan_eval_step, METH_VARARGS, "eval_step(x, y) -> dict of sums"},
    {"predict", (PyCFunction)plan_predict, METH_O, "predict(x) -> float32 array"},
    {"set_data", (PyCFunction)plan_set_data, METH_VARARGS,
     "set_data(x, y): upload a whole data set to the plan's device once (None, None releases it)"},
    {"train_steps", (PyCFunction)(void (*)(void))plan_train_steps, METH_VARARGS | METH_KEYWORDS,
     "train_steps(indices, batch_size, hparams, lrs=None, seeds=None) -> dict of sums over all the steps"},
    {"trace", (PyCFunction)(void (*)(void))plan_trace, METH_VARARGS | METH_KEYWORDS,
     "trace(rows=max_batch, train=True) -> [dict]: the op calls of one step (op, node, phase, inputs, outputs, "
     "params), issued but not run"},
    {"profile", (PyCFunction)(void (*)(void))plan_profile, METH_VARARGS | METH_KEYWORDS,
     "profile(x, y, hparams) -> [dict]: one training step run eagerly, each op call with its 'seconds' "
     "(synchronised around every op); updates the weights like train_step"},
    {"memory", (PyCFunction)plan_memory, METH_NOARGS,
     "memory() -> [dict]: the plan's allocations (what, node, bytes; offset, start, end inside the step's one "
     "block, on the step's schedule, and start2, end2: a second life where it is refilled in the backward, else "
     "-1): the blocks (offset -1) add up to Plan.bytes, the entries with an offset "
     "lie inside the block 'step_block'"},
    {"use_graphs", (PyCFunction)plan_use_graphs, METH_O, "use_graphs(bool): capture and replay the step (GPU)"},
    {"use_fused_optimizer", (PyCFunction)plan_use_fused_optimizer, METH_O,
     "use_fused_optimizer(bool) -> bool: one launch for the whole optimizer step (GPU) or one op per tensor"},
    {NULL, NULL, 0, NULL}};

static PyObject *plan_get_bytes(PlanObject *p, void *c)
{
    (void)c;
    return PyLong_FromLongLong(gc_plan_bytes(p->plan));
}

static PyGetSetDef plan_getset[] = {
    {"bytes", (getter)plan_get_bytes, NULL, "backend memory the plan holds (activations, gradients, scratch)", NULL},
    {"backend", (getter)plan_get_backend, NULL, "backend name", NULL},
    {"max_batch", (getter)plan_get_max_batch, NULL, "largest batch the plan holds", NULL},
    {"graph_replays", (getter)plan_get_graph_replays, NULL, "steps and full-size predicts replayed from captured graphs", NULL},
    {NULL, NULL, NULL, NULL, NULL}};

static PyTypeObject PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "gpucmp._core.Plan",
    .tp_basicsize = sizeof(PlanObject),
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Plan(backend, nodes, max_batch, train=None): a compiled model (a graph of layer nodes)",
    .tp_methods = plan_methods,
    .tp_getset = plan_getset,
    .tp_new = plan_new,
};

/* ------------------------------------------------------------------ module */

static PyMethodDef module_methods[] = {
    {"run_op", py_run_op, METH_VARARGS, "run_op(name, backend, inputs, outputs, params=None)"},
    {"op_names", py_op_names, METH_NOARGS, "names of every op, in GC_OP_LIST order"},
    {"op_arity", py_op_arity, METH_O, "op_arity(name) -> (n_inputs, n_outputs)"},
    {"backends", py_backends, METH_NOARGS, "usable backends, e.g. ['cpu', 'cuda:0']"},
    {"set_allow_tf32", py_set_allow_tf32, METH_O, "set_allow_tf32(bool): float32 GEMM/conv may use TF32 on GPUs"},
    {"get_allow_tf32", py_get_allow_tf32, METH_NOARGS, "whether float32 GEMM/conv may use TF32 on GPUs"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef core_module = {PyModuleDef_HEAD_INIT, "gpucmp._core",
                                         "The gpucmp C core (see csrc/python/CORE_API.md).", -1, module_methods,
                                         NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit__core(void)
{
    import_array();
    if (PyType_Ready(&BufferType) < 0 || PyType_Ready(&PlanType) < 0) return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m) return NULL;
    Py_INCREF(&BufferType);
    Py_INCREF(&PlanType);
    nonfinite_error = PyErr_NewExceptionWithDoc("gpucmp._core.NonFiniteError",
                                                "NaN or Inf in an array the call refuses them in", PyExc_ValueError,
                                                NULL);
    if (!nonfinite_error || PyModule_AddObject(m, "Buffer", (PyObject *)&BufferType) < 0 ||
        PyModule_AddObject(m, "Plan", (PyObject *)&PlanType) < 0 ||
        PyModule_AddObjectRef(m, "NonFiniteError", nonfinite_error) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (gpucmp_add_bench(m) < 0 || gpucmp_add_device_api(m) < 0 || gpucmp_add_rnn_cudnn_api(m) < 0 ||
        gpucmp_add_replicas_api(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#ifdef GPUCMP_WITH_CUDA
    /* a machine without a driver or device simply has no CUDA backend */
    gc_cuda_register_all();
    gc_clear_error();
    PyModule_AddIntConstant(m, "built_with_cuda", 1);
#else
    PyModule_AddIntConstant(m, "built_with_cuda", 0);
#endif
    /* the backends are registered (the CPU one with the first registry call): now the
     * variant registry reads GPUCMP_FORCE and its aliases */
    (void)gc_backend_count();
    if (gpucmp_add_variants_api(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
