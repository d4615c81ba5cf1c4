/* rnn_cudnn_map.c -- the index map between Keras' recurrent weights and cuDNN's RNN
 * weight space (gpucmp_rnn_cudnn.h), and where the backend side is found.
 *
 * Pure host code, in every build, so the packing is tested without cuDNN or a GPU
 * (tests/test_rnn_cudnn.py through _core.rnn_cudnn_weight_map): the device only gathers
 * and scatters with the map this computes. Keras' element (k, g*u + j) of the kernel
 * (in, G*u) is cuDNN's input matrix of gate c (Keras gate g = keras_gate(c)) at row j,
 * column k; the same for the recurrent kernel; bias row 0 is the input bias vectors,
 * GRU's row 1 the recurrent ones. */
#include "gpucmp_rnn_cudnn.h"

#include <stdlib.h>
#include <string.h>

int gc_rnn_cudnn_gates(int cell)
{
    switch (cell) {
    case GC_RNN_SIMPLE: return 1;
    case GC_RNN_LSTM: return 4;
    case GC_RNN_GRU: return 3;
    default: return 0;
    }
}

int gc_rnn_cudnn_keras_gate(int cell, int c)
{
    if (cell == GC_RNN_GRU && c < 2) return 1 - c; /* cuDNN r, z <- Keras z, r */
    return c;
}

int64_t gc_rnn_cudnn_keras_elems(const gc_rnn_cudnn_layer *L)
{
    const int64_t G = gc_rnn_cudnn_gates(L->cell), Gu = G * L->u;
    const int64_t nb = L->bias ? (L->cell == GC_RNN_GRU ? 2 : 1) * Gu : 0;
    return (L->in + L->u) * Gu + nb;
}

static gc_status check_layer(const gc_rnn_cudnn_layer *L)
{
    if (!L || !gc_rnn_cudnn_gates(L->cell))
        return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: the cell must be simple, lstm or gru (reset_after)");
    if (L->in < 1 || L->u < 1 || L->in > 0x7fffffff || L->u > 0x7fffffff)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: input size %lld and units %lld must be in [1, 2^31)",
                       (long long)L->in, (long long)L->u);
    if (gc_rnn_cudnn_keras_elems(L) > 0x7fffffff)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: %lld weights, more than the 2^31 the index map holds",
                       (long long)gc_rnn_cudnn_keras_elems(L));
    return GC_OK;
}

gc_status gc_rnn_cudnn_canonical_layout(const gc_rnn_cudnn_layer *L, gc_rnn_cudnn_layout *lay)
{
    gc_status s = check_layer(L);
    if (s) return s;
    const int G = gc_rnn_cudnn_gates(L->cell);
    memset(lay, 0, sizeof *lay);
    lay->n_lin = 2 * G;
    int64_t off = 0;
    for (int id = 0; id < 2 * G; id++) {
        lay->mat[id] = off;
        off += L->u * (id < G ? L->in : L->u);
    }
    for (int id = 0; id < 2 * G; id++) {
        lay->bias[id] = off;
        off += L->u;
    }
    lay->ws_elems = off;
    return GC_OK;
}

/* marks [off, off + n) of the space as taken; GC_ERR_INVALID_ARG outside it or when taken */
static gc_status claim(unsigned char *used, int64_t size, int64_t off, int64_t n, const char *what, int id)
{
    if (off < 0 || n < 0 || off + n > size)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: the %s of linLayerID %d ([%lld, %lld)) is outside the "
                       "weight space of %lld elements", what, id, (long long)off, (long long)(off + n),
                       (long long)size);
    for (int64_t i = off; i < off + n; i++) {
        if (used[i])
            return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: the %s of linLayerID %d overlaps another block at "
                           "element %lld", what, id, (long long)i);
        used[i] = 1;
    }
    return GC_OK;
}

gc_status gc_rnn_cudnn_weight_map(const gc_rnn_cudnn_layer *L, const gc_rnn_cudnn_layout *lay, int32_t *map)
{
    gc_status s = check_layer(L);
    if (s) return s;
    const int G = gc_rnn_cudnn_gates(L->cell);
    const int64_t in = L->in, u = L->u, Gu = G * u, nk = in * Gu, nr = u * Gu;
    const int64_t size = lay ? lay->ws_elems : 0, nkeras = gc_rnn_cudnn_keras_elems(L);
    if (!lay || lay->n_lin != 2 * G || size < 1 || size > 0x7fffffffffffll / 2)
        return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: a layout of %d blocks for a cell of %d gates",
                       lay ? lay->n_lin : 0, G);
    if (!map) return gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: no map to fill");
    unsigned char *used = calloc((size_t)size, 1), *seen = calloc((size_t)nkeras + 1, 1);
    if (!used || !seen) {
        free(used);
        free(seen);
        return gc_fail(GC_ERR_NOMEM, "rnn cudnn: out of host memory for the weight map");
    }
    for (int64_t i = 0; i < size; i++) map[i] = -1;
    for (int id = 0; id < 2 * G && s == GC_OK; id++) {
        const int rec = id >= G, c = rec ? id - G : id, g = gc_rnn_cudnn_keras_gate(L->cell, c);
        const int64_t cols = rec ? u : in, base = rec ? nk : 0;
        if (lay->mat[id] < 0) {
            s = gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: linLayerID %d has no matrix", id);
            break;
        }
        s = claim(used, size, lay->mat[id], u * cols, "matrix", id);
        for (int64_t j = 0; j < u && s == GC_OK; j++)      /* cuDNN row j = gate unit j */
            for (int64_t k = 0; k < cols; k++)             /* column k = input / state k */
                map[lay->mat[id] + j * cols + k] = (int32_t)(base + k * Gu + g * u + j);
        /* biases: row 0 of Keras' bias for the input vectors, row 1 (GRU) the recurrent */
        const int has = L->bias && (!rec || L->cell == GC_RNN_GRU);
        if (s == GC_OK && lay->bias[id] >= 0) {
            s = claim(used, size, lay->bias[id], u, "bias", id);
            for (int64_t j = 0; j < u && s == GC_OK && has; j++)
                map[lay->bias[id] + j] = (int32_t)(nk + nr + (rec ? Gu : 0) + g * u + j);
        } else if (s == GC_OK && has) {
            s = gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: linLayerID %d has no bias vector, the layer has one", id);
        }
    }
    for (int64_t i = 0; i < size && s == GC_OK; i++) {
        if (map[i] < 0) continue;
        if (map[i] >= nkeras || seen[map[i]]) {
            s = gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: Keras weight %d mapped twice", map[i]);
            break;
        }
        seen[map[i]] = 1;
    }
    for (int64_t e = 0; e < nkeras && s == GC_OK; e++)
        if (!seen[e]) s = gc_fail(GC_ERR_INVALID_ARG, "rnn cudnn: Keras weight %lld has no place in the weight "
                                  "space", (long long)e);
    free(used);
    free(seen);
    return s;
}

#ifdef GPUCMP_WITH_CUDA
extern const gc_rnn_cudnn_api gc_cuda_rnn_cudnn_api; /* csrc/cuda/rnn_cudnn.cu */
#endif

const gc_rnn_cudnn_api *gc_rnn_cudnn_api_of(const gc_backend *be)
{
#ifdef GPUCMP_WITH_CUDA
    if (be && be->name && !strcmp(be->name, "cuda")) return &gc_cuda_rnn_cudnn_api;
#else
    (void)be;
#endif
    return NULL;
}
