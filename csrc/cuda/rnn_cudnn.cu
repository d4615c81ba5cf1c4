/* rnn_cudnn.cu -- the backend side of the cuDNN recurrent-layer baseline
 * (gpucmp_rnn_cudnn.h: gc_cuda_rnn_cudnn_api): cuDNN 9's RNN API (cudnnRNNForward,
 * cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8), loaded at run time, and the two
 * small kernels that gather Keras' weights into cuDNN's weight space and scatter its
 * gradient back.
 *
 * Why it is built this way: as conv2d_vendor.cu, nothing includes cudnn.h or links
 * libcudnn; the entry points are resolved from the shared loader (cudnn_lib.cu) and the
 * enums used are declared below with cudnn_adv_v9.h / cudnn_graph_v9.h's values.
 * Data are batch-major and padded (CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED with
 * CUDNN_RNN_PADDED_IO_ENABLED): gpucmp's (rows, T, features) as stored, padded outputs 0.
 * Math: float32 storage runs CUDNN_FMA_MATH (exact fp32, never TF32, as the baseline must
 * be comparable with gpucmp's exact kernels; CUDNN_DEFAULT_MATH only where a cuDNN refuses
 * FMA for RNNs); float16 / bfloat16 storage CUDNN_TENSOR_OP_MATH; compute float32 always.
 * One RNN descriptor per (device, cell, sizes, dtype), created once and kept; the data
 * and state descriptors are made per call (host-only work); the workspace is the
 * backend's (gc_cuda_workspace), the reserve space the plan's (kept from the forward to
 * the backward). */
#include "common.cuh"
#include "cudnn_lib.cuh"
#include "gpucmp_rnn_cudnn.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ cuDNN declarations */
typedef int rnStatus;
typedef struct cudnnContext *rnHandle;
typedef struct cudnnTensorStruct *rnTensorDesc;
typedef struct cudnnDropoutStruct *rnDropoutDesc;
typedef struct cudnnRNNStruct *rnRNNDesc;
typedef struct cudnnRNNDataStruct *rnDataDesc;

enum {
    RN_STATUS_SUCCESS = 0,
    RN_STATUS_NOT_SUPPORTED = 3000, /* 3000..3999: the NOT_SUPPORTED family */
    RN_DATA_FLOAT = 0,
    RN_DATA_HALF = 2,
    RN_DATA_BFLOAT16 = 9,
    RN_DEFAULT_MATH = 0,
    RN_TENSOR_OP_MATH = 1,
    RN_FMA_MATH = 3,
    RN_ALGO_STANDARD = 0,
    RN_FWD_INFERENCE = 0,
    RN_FWD_TRAINING = 1,
    RN_RNN_RELU = 0,
    RN_RNN_TANH = 1,
    RN_LSTM = 2,
    RN_GRU = 3,
    RN_DOUBLE_BIAS = 2,
    RN_UNIDIRECTIONAL = 0,
    RN_LINEAR_INPUT = 0,
    RN_BATCH_MAJOR_UNPACKED = 2,
    RN_PADDED_IO_ENABLED = 1,
    RN_WGRAD_ADD = 0
};

typedef struct {
    rnStatus (*Create)(rnHandle *);
    rnStatus (*SetStream)(rnHandle, cudaStream_t);
    const char *(*GetErrorString)(rnStatus);
    rnStatus (*CreateTensorDescriptor)(rnTensorDesc *);
    rnStatus (*SetTensorNdDescriptor)(rnTensorDesc, int, int, const int *, const int *);
    rnStatus (*GetTensorNdDescriptor)(rnTensorDesc, int, int *, int *, int *, int *);
    rnStatus (*DestroyTensorDescriptor)(rnTensorDesc);
    rnStatus (*CreateDropoutDescriptor)(rnDropoutDesc *);
    rnStatus (*SetDropoutDescriptor)(rnDropoutDesc, rnHandle, float, void *, size_t, unsigned long long);
    rnStatus (*CreateRNNDescriptor)(rnRNNDesc *);
    rnStatus (*DestroyRNNDescriptor)(rnRNNDesc);
    rnStatus (*SetRNNDescriptor_v8)(rnRNNDesc, int, int, int, int, int, int, int, int, int32_t, int32_t, int32_t,
                                    int32_t, rnDropoutDesc, uint32_t);
    rnStatus (*GetRNNWeightSpaceSize)(rnHandle, rnRNNDesc, size_t *);
    rnStatus (*GetRNNWeightParams)(rnHandle, rnRNNDesc, int32_t, size_t, const void *, int32_t, rnTensorDesc,
                                   void **, rnTensorDesc, void **);
    rnStatus (*GetRNNTempSpaceSizes)(rnHandle, rnRNNDesc, int, rnDataDesc, size_t *, size_t *);
    rnStatus (*CreateRNNDataDescriptor)(rnDataDesc *);
    rnStatus (*DestroyRNNDataDescriptor)(rnDataDesc);
    rnStatus (*SetRNNDataDescriptor)(rnDataDesc, int, int, int, int, int, const int *, void *);
    rnStatus (*RNNForward)(rnHandle, rnRNNDesc, int, const int32_t *, rnDataDesc, const void *, rnDataDesc, void *,
                           rnTensorDesc, const void *, void *, rnTensorDesc, const void *, void *, size_t,
                           const void *, size_t, void *, size_t, void *);
    rnStatus (*RNNBackwardData_v8)(rnHandle, rnRNNDesc, const int32_t *, rnDataDesc, const void *, const void *,
                                   rnDataDesc, void *, rnTensorDesc, const void *, const void *, void *,
                                   rnTensorDesc, const void *, const void *, void *, size_t, const void *, size_t,
                                   void *, size_t, void *);
    rnStatus (*RNNBackwardWeights_v8)(rnHandle, rnRNNDesc, int, const int32_t *, rnDataDesc, const void *,
                                      rnTensorDesc, const void *, rnDataDesc, const void *, size_t, void *, size_t,
                                      void *, size_t, void *);
} rn_api;

static rn_api g_rn;
static int g_rn_ok;
static char g_rn_why[256];
static pthread_once_t g_rn_once = PTHREAD_ONCE_INIT;

static void rn_load(void)
{
    const gc_cudnn_sym syms[] = {
        {(void **)&g_rn.Create, "cudnnCreate"},
        {(void **)&g_rn.SetStream, "cudnnSetStream"},
        {(void **)&g_rn.GetErrorString, "cudnnGetErrorString"},
        {(void **)&g_rn.CreateTensorDescriptor, "cudnnCreateTensorDescriptor"},
        {(void **)&g_rn.SetTensorNdDescriptor, "cudnnSetTensorNdDescriptor"},
        {(void **)&g_rn.GetTensorNdDescriptor, "cudnnGetTensorNdDescriptor"},
        {(void **)&g_rn.DestroyTensorDescriptor, "cudnnDestroyTensorDescriptor"},
        {(void **)&g_rn.CreateDropoutDescriptor, "cudnnCreateDropoutDescriptor"},
        {(void **)&g_rn.SetDropoutDescriptor, "cudnnSetDropoutDescriptor"},
        {(void **)&g_rn.CreateRNNDescriptor, "cudnnCreateRNNDescriptor"},
        {(void **)&g_rn.DestroyRNNDescriptor, "cudnnDestroyRNNDescriptor"},
        {(void **)&g_rn.SetRNNDescriptor_v8, "cudnnSetRNNDescriptor_v8"},
        {(void **)&g_rn.GetRNNWeightSpaceSize, "cudnnGetRNNWeightSpaceSize"},
        {(void **)&g_rn.GetRNNWeightParams, "cudnnGetRNNWeightParams"},
        {(void **)&g_rn.GetRNNTempSpaceSizes, "cudnnGetRNNTempSpaceSizes"},
        {(void **)&g_rn.CreateRNNDataDescriptor, "cudnnCreateRNNDataDescriptor"},
        {(void **)&g_rn.DestroyRNNDataDescriptor, "cudnnDestroyRNNDataDescriptor"},
        {(void **)&g_rn.SetRNNDataDescriptor, "cudnnSetRNNDataDescriptor"},
        {(void **)&g_rn.RNNForward, "cudnnRNNForward"},
        {(void **)&g_rn.RNNBackwardData_v8, "cudnnRNNBackwardData_v8"},
        {(void **)&g_rn.RNNBackwardWeights_v8, "cudnnRNNBackwardWeights_v8"},
    };
    if (gc_cudnn_resolve(syms, sizeof syms / sizeof syms[0], g_rn_why, sizeof g_rn_why) == 0) g_rn_ok = 1;
}

static int rn_available(const char **why)
{
    pthread_once(&g_rn_once, rn_load);
    if (!g_rn_ok && why) *why = g_rn_why;
    return g_rn_ok;
}

static gc_status rn_fail(rnStatus s, const char *what)
{
    const gc_status code = (s >= RN_STATUS_NOT_SUPPORTED && s < 4000) ? GC_ERR_UNSUPPORTED : GC_ERR_BACKEND;
    return gc_fail(code, "rnn (impl cudnn): cuDNN %s failed: %s (%d)", what, g_rn.GetErrorString(s), s);
}

#define RN_TRY(what, expr)                  \
    do {                                    \
        rnStatus s_ = (expr);               \
        if (s_ != RN_STATUS_SUCCESS) {      \
            st = rn_fail(s_, what);         \
            goto done;                      \
        }                                   \
    } while (0)

/* ------------------------------------------------------------------ handles, descriptors */
#define RN_MAX_DEV 64
#define RN_CACHE 64
typedef struct {
    int used, dev, cell, act, dt;
    int64_t in, u;
    rnRNNDesc desc;
} rn_entry;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static rnHandle g_handle[RN_MAX_DEV];
static rnDropoutDesc g_nodrop[RN_MAX_DEV];
static rn_entry g_desc[RN_CACHE];

static int rn_dtype(gc_dtype dt) { return dt == GC_F16 ? RN_DATA_HALF : dt == GC_BF16 ? RN_DATA_BFLOAT16 : RN_DATA_FLOAT; }

static int rn_cell(const gc_rnn_cudnn_layer *L)
{
    if (L->cell == GC_RNN_LSTM) return RN_LSTM;
    if (L->cell == GC_RNN_GRU) return RN_GRU;
    return L->act == GC_RNN_RELU ? RN_RNN_RELU : RN_RNN_TANH;
}

/* the device's handle on the backend's stream and the layer's RNN descriptor */
static gc_status rn_setup(const gc_backend *be, const gc_rnn_cudnn_layer *L, rnHandle *h, rnRNNDesc *rd)
{
    const char *why = "";
    if (!rn_available(&why))
        return gc_fail(GC_ERR_UNSUPPORTED, "rnn (impl cudnn): needs libcudnn with the RNN API, not found (%s)", why);
    if (!L || !gc_rnn_cudnn_gates(L->cell) ||
        (L->cell == GC_RNN_SIMPLE && L->act != GC_RNN_TANH && L->act != GC_RNN_RELU))
        return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): a cell cuDNN does not have");
    const int dev = be->device_index;
    if (dev < 0 || dev >= RN_MAX_DEV)
        return gc_fail(GC_ERR_UNSUPPORTED, "rnn (impl cudnn): supports devices 0..%d", RN_MAX_DEV - 1);
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    pthread_mutex_lock(&g_mu);
    rnRNNDesc desc = NULL;
    rnDropoutDesc nd = NULL;
    if (!g_handle[dev]) {
        if (gc_cuda_capturing(be)) {
            st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): the cuDNN handle must be created outside graph capture "
                                         "(run the step once eagerly first)");
            goto done;
        }
        RN_TRY("Create", g_rn.Create(&g_handle[dev]));
        RN_TRY("CreateDropoutDescriptor", g_rn.CreateDropoutDescriptor(&nd));
        /* dropout 0: no states, no random numbers (between layers only; one layer here) */
        RN_TRY("SetDropoutDescriptor", g_rn.SetDropoutDescriptor(nd, g_handle[dev], 0.0f, NULL, 0, 0));
        g_nodrop[dev] = nd;
    }
    RN_TRY("SetStream", g_rn.SetStream(g_handle[dev], gc_cuda_stream(be)));
    for (int i = 0; i < RN_CACHE; i++) {
        rn_entry *e = &g_desc[i];
        if (e->used && e->dev == dev && e->cell == L->cell && e->act == rn_cell(L) && e->dt == (int)L->dt &&
            e->in == L->in && e->u == L->u) {
            desc = e->desc;
            break;
        }
    }
    if (!desc) {
        int slot = -1;
        for (int i = 0; i < RN_CACHE && slot < 0; i++)
            if (!g_desc[i].used) slot = i;
        if (slot < 0) {
            st = gc_fail(GC_ERR_UNSUPPORTED, "rnn (impl cudnn): more than %d layer shapes in one process", RN_CACHE);
            goto done;
        }
        RN_TRY("CreateRNNDescriptor", g_rn.CreateRNNDescriptor(&desc));
        const int ddt = rn_dtype(L->dt);
        const int math = L->dt == GC_F32 ? RN_FMA_MATH : RN_TENSOR_OP_MATH;
        rnStatus s = g_rn.SetRNNDescriptor_v8(desc, RN_ALGO_STANDARD, rn_cell(L), RN_DOUBLE_BIAS, RN_UNIDIRECTIONAL,
                                              RN_LINEAR_INPUT, ddt, RN_DATA_FLOAT, math, (int32_t)L->in,
                                              (int32_t)L->u, (int32_t)L->u, 1, g_nodrop[dev], RN_PADDED_IO_ENABLED);
        if (s != RN_STATUS_SUCCESS && math == RN_FMA_MATH) /* a cuDNN without FMA-only RNNs */
            s = g_rn.SetRNNDescriptor_v8(desc, RN_ALGO_STANDARD, rn_cell(L), RN_DOUBLE_BIAS, RN_UNIDIRECTIONAL,
                                         RN_LINEAR_INPUT, ddt, RN_DATA_FLOAT, RN_DEFAULT_MATH, (int32_t)L->in,
                                         (int32_t)L->u, (int32_t)L->u, 1, g_nodrop[dev], RN_PADDED_IO_ENABLED);
        if (s != RN_STATUS_SUCCESS) {
            g_rn.DestroyRNNDescriptor(desc);
            desc = NULL;
            st = rn_fail(s, "SetRNNDescriptor_v8");
            goto done;
        }
        rn_entry e = {1, dev, L->cell, rn_cell(L), (int)L->dt, L->in, L->u, desc};
        g_desc[slot] = e;
    }
done:
    pthread_mutex_unlock(&g_mu);
    *h = g_handle[dev];
    *rd = desc;
    return st;
}

/* a (1, rows, u) state descriptor */
static rnStatus state_desc(rnTensorDesc *d, gc_dtype dt, int64_t rows, int64_t u)
{
    rnStatus s = g_rn.CreateTensorDescriptor(d);
    if (s != RN_STATUS_SUCCESS) return s;
    int dims[3] = {1, (int)rows, (int)u}, strides[3] = {(int)(rows * u), (int)u, 1};
    return g_rn.SetTensorNdDescriptor(*d, rn_dtype(dt), 3, dims, strides);
}

/* a (rows, T, vec) batch-major padded data descriptor, padded outputs 0 */
static rnStatus data_desc(rnDataDesc *d, gc_dtype dt, int64_t rows, int64_t T, int64_t vec, const int32_t *lens)
{
    static double zero = 0.0; /* read as the data type: 0 in every float format */
    rnStatus s = g_rn.CreateRNNDataDescriptor(d);
    if (s != RN_STATUS_SUCCESS) return s;
    return g_rn.SetRNNDataDescriptor(*d, rn_dtype(dt), RN_BATCH_MAJOR_UNPACKED, (int)T, (int)rows, (int)vec,
                                     (const int *)lens, &zero);
}

static gc_status check_sizes(const gc_rnn_cudnn_call *c)
{
    if (!c || !c->L || c->rows < 1 || c->T < 1 || c->rows > 0x7fffffff || c->T > 0x7fffffff ||
        c->rows * c->T * (c->L->in > c->L->u ? c->L->in : c->L->u) > 0x7fffffffll)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): sizes outside cuDNN's int32 descriptors");
    if (!c->seq_host || !c->seq_dev || !c->x || !c->y || !c->w)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): missing x, y, the lengths or the weight space");
    return GC_OK;
}

/* ------------------------------------------------------------------ the API */
static gc_status rn_weight_bytes(const gc_backend *be, const gc_rnn_cudnn_layer *L, size_t *bytes)
{
    rnHandle h;
    rnRNNDesc rd;
    gc_status st = rn_setup(be, L, &h, &rd);
    if (st) return st;
    RN_TRY("GetRNNWeightSpaceSize", g_rn.GetRNNWeightSpaceSize(h, rd, bytes));
done:
    return st;
}

/* how many elements a weight-params descriptor describes (0 when unset / absent) */
static int64_t desc_elems(rnTensorDesc d)
{
    int dt = 0, nd = 0, dims[8] = {0}, strides[8] = {0};
    if (g_rn.GetTensorNdDescriptor(d, 8, &dt, &nd, dims, strides) != RN_STATUS_SUCCESS || nd < 1) return 0;
    int64_t n = 1;
    for (int i = 0; i < nd && i < 8; i++) n *= dims[i];
    return n;
}

static gc_status rn_layout(const gc_backend *be, const gc_rnn_cudnn_layer *L, void *ws, gc_rnn_cudnn_layout *lay)
{
    rnHandle h;
    rnRNNDesc rd;
    gc_status st = rn_setup(be, L, &h, &rd);
    if (st) return st;
    const int G = gc_rnn_cudnn_gates(L->cell);
    const size_t esz = gc_dtype_size(L->dt);
    size_t bytes = 0;
    rnTensorDesc md = NULL, bd = NULL;
    memset(lay, 0, sizeof *lay);
    lay->n_lin = 2 * G;
    RN_TRY("GetRNNWeightSpaceSize", g_rn.GetRNNWeightSpaceSize(h, rd, &bytes));
    lay->ws_elems = (int64_t)(bytes / esz);
    RN_TRY("CreateTensorDescriptor", g_rn.CreateTensorDescriptor(&md));
    RN_TRY("CreateTensorDescriptor", g_rn.CreateTensorDescriptor(&bd));
    for (int id = 0; id < 2 * G; id++) {
        void *ma = NULL, *ba = NULL;
        RN_TRY("GetRNNWeightParams", g_rn.GetRNNWeightParams(h, rd, 0, bytes, ws, id, md, &ma, bd, &ba));
        const int64_t want = L->u * (id < G ? L->in : L->u);
        lay->mat[id] = ma ? (int64_t)(((char *)ma - (char *)ws) / (ptrdiff_t)esz) : -1;
        lay->bias[id] = ba ? (int64_t)(((char *)ba - (char *)ws) / (ptrdiff_t)esz) : -1;
        if (ma && desc_elems(md) != want) {
            st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): cuDNN's matrix %d has %lld elements, %lld expected", id,
                         (long long)desc_elems(md), (long long)want);
            goto done;
        }
        if (ba && desc_elems(bd) != L->u) {
            st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): cuDNN's bias %d has %lld elements, %lld expected", id,
                         (long long)desc_elems(bd), (long long)L->u);
            goto done;
        }
    }
done:
    if (md) g_rn.DestroyTensorDescriptor(md);
    if (bd) g_rn.DestroyTensorDescriptor(bd);
    return st;
}

static gc_status rn_reserve_bytes(const gc_backend *be, const gc_rnn_cudnn_layer *L, int64_t rows, int64_t T,
                                  size_t *bytes)
{
    rnHandle h;
    rnRNNDesc rd;
    gc_status st = rn_setup(be, L, &h, &rd);
    if (st) return st;
    rnDataDesc xd = NULL;
    size_t work = 0;
    int32_t *lens = (int32_t *)malloc((size_t)rows * sizeof *lens);
    if (!lens) return gc_fail(GC_ERR_NOMEM, "rnn (impl cudnn): out of host memory");
    for (int64_t i = 0; i < rows; i++) lens[i] = (int32_t)T;
    RN_TRY("SetRNNDataDescriptor", data_desc(&xd, L->dt, rows, T, L->in, lens));
    RN_TRY("GetRNNTempSpaceSizes", g_rn.GetRNNTempSpaceSizes(h, rd, RN_FWD_TRAINING, xd, &work, bytes));
done:
    if (xd) g_rn.DestroyRNNDataDescriptor(xd);
    free(lens);
    return st;
}

template <typename T>
__global__ void pack_kernel(const int32_t *map, int64_t n, const T *k, const T *r, const T *b, int64_t nk,
                            int64_t nr, T *ws)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = map[i];
        T v = 0;
        if (m >= 0) v = m < nk ? k[m] : m < nk + nr ? r[m - nk] : b[m - nk - nr];
        ws[i] = v;
    }
}

template <typename T>
__global__ void unpack_kernel(const int32_t *map, int64_t n, const T *ws, T *k, T *r, T *b, int64_t nk, int64_t nr)
{
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        const int64_t m = map[i];
        if (m < 0) continue;
        if (m < nk) k[m] = ws[i];
        else if (m < nk + nr) r[m - nk] = ws[i];
        else if (b) b[m - nk - nr] = ws[i];
    }
}

/* elements are moved, not converted: 2- or 4-byte words */
static gc_status rn_pack(const gc_backend *be, gc_dtype dt, const int32_t *map, int64_t n, const void *k,
                         const void *r, const void *b, int64_t nk, int64_t nr, void *ws)
{
    if (!map || !k || !r || !ws || n < 1) return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): pack: missing buffers");
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const unsigned grid = gc_cuda_grid(n, GC_CUDA_THREADS);
    cudaStream_t s = gc_cuda_stream(be);
    if (gc_dtype_size(dt) == 2)
        pack_kernel<uint16_t><<<grid, GC_CUDA_THREADS, 0, s>>>(map, n, (const uint16_t *)k, (const uint16_t *)r,
                                                                (const uint16_t *)b, nk, nr, (uint16_t *)ws);
    else
        pack_kernel<uint32_t><<<grid, GC_CUDA_THREADS, 0, s>>>(map, n, (const uint32_t *)k, (const uint32_t *)r,
                                                                (const uint32_t *)b, nk, nr, (uint32_t *)ws);
    return gc_cuda_launch_check("rnn (impl cudnn): pack");
}

static gc_status rn_unpack(const gc_backend *be, gc_dtype dt, const int32_t *map, int64_t n, const void *ws, void *k,
                           void *r, void *b, int64_t nk, int64_t nr)
{
    if (!map || !k || !r || !ws || n < 1) return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): unpack: missing buffers");
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    const unsigned grid = gc_cuda_grid(n, GC_CUDA_THREADS);
    cudaStream_t s = gc_cuda_stream(be);
    if (gc_dtype_size(dt) == 2)
        unpack_kernel<uint16_t><<<grid, GC_CUDA_THREADS, 0, s>>>(map, n, (const uint16_t *)ws, (uint16_t *)k,
                                                                  (uint16_t *)r, (uint16_t *)b, nk, nr);
    else
        unpack_kernel<uint32_t><<<grid, GC_CUDA_THREADS, 0, s>>>(map, n, (const uint32_t *)ws, (uint32_t *)k,
                                                                  (uint32_t *)r, (uint32_t *)b, nk, nr);
    return gc_cuda_launch_check("rnn (impl cudnn): unpack");
}

static gc_status rn_seq_lengths(const gc_backend *be, const float *mask, int64_t rows, int64_t T, int32_t *host,
                                int32_t *dev, int *all_full)
{
    if (!mask || !host || !dev || rows < 1 || T < 1)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): sequence lengths: missing buffers");
    if (gc_cuda_capturing(be))
        return gc_fail(GC_ERR_UNSUPPORTED, "rnn (impl cudnn): with a mask, cuDNN takes each row's length on the "
                       "host, which a captured CUDA graph cannot read back (the plan turns graphs off for such "
                       "layers; do not turn them on)");
    gc_status st = gc_cuda_set_device(be);
    if (st) return st;
    float *m = (float *)malloc((size_t)(rows * T) * sizeof *m);
    if (!m) return gc_fail(GC_ERR_NOMEM, "rnn (impl cudnn): out of host memory for the mask");
    cudaStream_t s = gc_cuda_stream(be);
    cudaError_t e = cudaMemcpyAsync(m, mask, (size_t)(rows * T) * sizeof *m, cudaMemcpyDeviceToHost, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s);
    if (e != cudaSuccess) {
        free(m);
        (void)cudaGetLastError();
        return gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): reading the mask back: %s", cudaGetErrorString(e));
    }
    int full = 1;
    for (int64_t r = 0; r < rows && st == GC_OK; r++) {
        const float *row = m + r * T;
        int64_t n = 0;
        while (n < T && row[n] != 0.0f) n++;
        for (int64_t t = n; t < T && st == GC_OK; t++)
            if (row[t] != 0.0f)
                st = gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): the mask of row %lld is not right-padded (step "
                             "%lld is masked, step %lld is not): cuDNN takes only sequences padded at the end; "
                             "use use_cudnn='auto' / False for other mask patterns", (long long)r, (long long)n,
                             (long long)t);
        if (st == GC_OK && n == 0)
            st = gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): row %lld of the mask has no step: cuDNN takes "
                         "sequences of length >= 1; use use_cudnn='auto' / False", (long long)r);
        host[r] = (int32_t)n;
        if (n != T) full = 0;
    }
    free(m);
    if (st) return st;
    e = cudaMemcpyAsync(dev, host, (size_t)rows * sizeof *host, cudaMemcpyHostToDevice, s);
    if (e == cudaSuccess) e = cudaStreamSynchronize(s); /* host is the caller's: done before returning */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): uploading the lengths: %s", cudaGetErrorString(e));
    }
    if (all_full) *all_full = full;
    return GC_OK;
}

/* the descriptors of one call's x, y and states and cuDNN's space sizes for them: made
 * together for the forward and the backward (rn_io_free releases what was made) */
struct rn_io {
    rnDataDesc xd, yd;
    rnTensorDesc hd;
    size_t work, reserve;
};

static void rn_io_free(rn_io *io)
{
    if (io->hd) g_rn.DestroyTensorDescriptor(io->hd);
    if (io->yd) g_rn.DestroyRNNDataDescriptor(io->yd);
    if (io->xd) g_rn.DestroyRNNDataDescriptor(io->xd);
}

static gc_status rn_io_make(rnHandle h, rnRNNDesc rd, int mode, const gc_rnn_cudnn_call *c, rn_io *io)
{
    const gc_rnn_cudnn_layer *L = c->L;
    gc_status st = GC_OK;
    *io = rn_io{};
    RN_TRY("SetRNNDataDescriptor (x)", data_desc(&io->xd, L->dt, c->rows, c->T, L->in, c->seq_host));
    RN_TRY("SetRNNDataDescriptor (y)", data_desc(&io->yd, L->dt, c->rows, c->T, L->u, c->seq_host));
    RN_TRY("SetTensorNdDescriptor (h)", state_desc(&io->hd, L->dt, c->rows, L->u));
    RN_TRY("GetRNNTempSpaceSizes", g_rn.GetRNNTempSpaceSizes(h, rd, mode, io->xd, &io->work, &io->reserve));
done:
    return st;
}

static gc_status rn_forward(const gc_backend *be, const gc_rnn_cudnn_call *c)
{
    gc_status st = check_sizes(c);
    if (st) return st;
    const gc_rnn_cudnn_layer *L = c->L;
    rnHandle h;
    rnRNNDesc rd;
    if ((st = rn_setup(be, L, &h, &rd))) return st;
    rn_io io;
    void *ws = NULL;
    const int mode = c->training ? RN_FWD_TRAINING : RN_FWD_INFERENCE;
    const int lstm = L->cell == GC_RNN_LSTM;
    if ((st = rn_io_make(h, rd, mode, c, &io))) goto done;
    if (c->training && (io.reserve > c->reserve_bytes || !c->reserve)) {
        st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): cuDNN asks %zu bytes of reserve space, the plan holds %zu",
                     io.reserve, c->reserve_bytes);
        goto done;
    }
    if ((st = gc_cuda_workspace(be, io.work ? io.work : 256, &ws))) goto done;
    RN_TRY("RNNForward", g_rn.RNNForward(h, rd, mode, c->seq_dev, io.xd, c->x, io.yd, c->y, io.hd, c->hx, c->hy, io.hd,
                                         lstm ? c->cx : NULL, lstm ? c->cy : NULL, c->w_bytes, c->w, io.work, ws,
                                         c->training ? c->reserve_bytes : 0, c->training ? c->reserve : NULL));
done:
    rn_io_free(&io);
    return st;
}

static gc_status rn_backward(const gc_backend *be, const gc_rnn_cudnn_call *c)
{
    gc_status st = check_sizes(c);
    if (st) return st;
    if (!c->dy || !c->dx || !c->dw || !c->reserve)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn (impl cudnn): the backward needs dy, dx, dw and the reserve space");
    const gc_rnn_cudnn_layer *L = c->L;
    rnHandle h;
    rnRNNDesc rd;
    if ((st = rn_setup(be, L, &h, &rd))) return st;
    rn_io io;
    void *ws = NULL;
    const int lstm = L->cell == GC_RNN_LSTM;
    cudaStream_t s = gc_cuda_stream(be);
    if ((st = rn_io_make(h, rd, RN_FWD_TRAINING, c, &io))) goto done;
    if (io.reserve > c->reserve_bytes) {
        st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): cuDNN asks %zu bytes of reserve space, the plan holds %zu",
                     io.reserve, c->reserve_bytes);
        goto done;
    }
    if ((st = gc_cuda_workspace(be, io.work ? io.work : 256, &ws))) goto done;
    if (!c->all_full) { /* padded steps of dx: zeros, whatever cuDNN leaves there */
        cudaError_t e = cudaMemsetAsync(c->dx, 0, (size_t)(c->rows * c->T * L->in) * gc_dtype_size(L->dt), s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): clearing dx: %s", cudaGetErrorString(e));
            goto done;
        }
    }
    RN_TRY("RNNBackwardData_v8",
           g_rn.RNNBackwardData_v8(h, rd, c->seq_dev, io.yd, c->y, c->dy, io.xd, c->dx, io.hd, c->hx, c->dhy, c->dhx, io.hd,
                                   lstm ? c->cx : NULL, lstm ? c->dcy : NULL, lstm ? c->dcx : NULL, c->w_bytes, c->w,
                                   io.work, ws, c->reserve_bytes, c->reserve));
    {   /* the weight gradient accumulates (CUDNN_WGRAD_MODE_ADD): from zero */
        cudaError_t e = cudaMemsetAsync(c->dw, 0, c->w_bytes, s);
        if (e != cudaSuccess) {
            (void)cudaGetLastError();
            st = gc_fail(GC_ERR_BACKEND, "rnn (impl cudnn): clearing dw: %s", cudaGetErrorString(e));
            goto done;
        }
    }
    RN_TRY("RNNBackwardWeights_v8",
           g_rn.RNNBackwardWeights_v8(h, rd, RN_WGRAD_ADD, c->seq_dev, io.xd, c->x, io.hd, c->hx, io.yd, c->y, c->w_bytes,
                                      c->dw, io.work, ws, c->reserve_bytes, c->reserve));
done:
    rn_io_free(&io);
    return st;
}

extern "C" const gc_rnn_cudnn_api gc_cuda_rnn_cudnn_api = {
    rn_available, rn_weight_bytes, rn_layout, rn_reserve_bytes, rn_pack, rn_unpack, rn_seq_lengths,
    rn_forward,   rn_backward,
};
