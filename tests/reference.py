"""The test oracle: plain NumPy float64 implementations of every op of GC_OP_LIST.

What it provides: for each op family of the C core (gemm, conv2d, pooling,
activations, losses, bias_grad, dropout, optimizers, accuracy, cast, embedding, the graph
ops: add, mul, batch normalization, zero padding, concat / slice) a forward
and, where the core has one, a backward function, written to be obviously right
rather than fast (loops over kernel taps / output cells, everything in float64).
The argument conventions follow gpucmp.ops (same names, same order), except that
the oracle never works in place: optimizer updates return the new arrays.

Why: tests/test_ops.py compares every kernel of every backend and dtype against
these functions. The oracle itself is not assumed to be right: the backward
functions are checked against the forward ones by central differences
(`numerical_grad`, tests/test_reference.py), and the forward functions against
naive loops and, when it is importable, Keras itself.

Semantics (KERAS_SEMANTICS.md, csrc/include/gpucmp.h):
- conv/pool 'valid': out = floor((in - d*(k-1) - 1)/s) + 1; 'same': out = ceil(in/s),
  total pad max(0, (out-1)*s + (k-1)*d + 1 - in), top/left = total//2.
- max pool: padded cells never win; backward routes to the FIRST max of the window
  in row-major order. avg pool: padded cells are not counted.
- activation backward takes the forward OUTPUT y.
- losses return (per-row loss, gradient of grad_scale * sum(loss)).
- dropout reproduces gc_uniform01 (a splitmix64-style hash) bit for bit.
"""
import math

import numpy as np

EPSILON = 1e-7  # Keras backend epsilon, used by the clipped cross-entropies
# Keras clips float32 tensors, so the bounds are the float32 values of eps and 1 - eps
# (1 - float32(1 - 1e-7) is 1.19e-7, not 1e-7: it matters for log(1 - p) at p = 1).
CLIP_LO = float(np.float32(EPSILON))
CLIP_HI = float(np.float32(1.0 - EPSILON))

ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax")


def _f64(a):
    return np.asarray(a, dtype=np.float64)


def _pair(v):
    if np.ndim(v) == 0:
        return (int(v), int(v))
    a, b = v
    return (int(a), int(b))


# =====================================================================================
# dtype rounding (what storing a float64 value in float32 / float16 / bfloat16 gives)
# =====================================================================================

_BF16_MAX = float.fromhex("0x1.fep127")  # largest finite bfloat16


def round_bf16(x):
    """Round to the nearest bfloat16 (ties to even), returned as float64.

    Written with frexp arithmetic rather than bit tricks so that it is an independent
    check of gpucmp.ops' bit-level conversion. Input is first rounded to float32,
    as the core only ever converts float32 to bfloat16.
    """
    x = _f64(np.asarray(x, dtype=np.float32))
    out = np.array(x, dtype=np.float64, copy=True)
    finite = np.isfinite(x) & (x != 0)
    v = x[finite]
    _, e = np.frexp(np.abs(v))  # |v| = m * 2**e, m in [0.5, 1)
    # bfloat16 keeps 8 significant bits: quantum 2**(e-8); subnormals 2**-133.
    q = np.ldexp(1.0, np.maximum(e - 8, -133))
    r = np.round(v / q) * q  # np.round is round-half-to-even
    r[np.abs(r) > _BF16_MAX] = np.copysign(np.inf, r[np.abs(r) > _BF16_MAX])
    out[finite] = r
    return out


def round_to(x, dtype):
    """The float64 values that `x` takes when stored in `dtype`."""
    dtype = str(np.dtype(dtype)) if dtype not in ("bfloat16",) else "bfloat16"
    if dtype == "float64":
        return _f64(x)
    if dtype == "float32":
        return _f64(np.asarray(x, dtype=np.float32))
    if dtype == "float16":
        with np.errstate(over="ignore"):  # beyond 65504 rounds to inf, as it should
            return _f64(np.asarray(x, dtype=np.float16))
    if dtype == "bfloat16":
        return round_bf16(x)
    raise ValueError(f"round_to: unknown dtype {dtype!r}")


def cast(x, dtype):
    """cast op: the values of x converted to `dtype` (returned as float64)."""
    return round_to(x, dtype)


# =====================================================================================
# activations
# =====================================================================================

def _sigmoid(x):
    x = _f64(x)
    out = np.empty_like(x)
    pos = x >= 0
    out[pos] = 1.0 / (1.0 + np.exp(-x[pos]))
    ex = np.exp(x[~pos])
    out[~pos] = ex / (1.0 + ex)
    return out


def _softmax(x):
    x = _f64(x)
    z = x - x.max(axis=-1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=-1, keepdims=True)


def _log_softmax(x):
    x = _f64(x)
    z = x - x.max(axis=-1, keepdims=True)
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def activation(x, name):
    """act_fwd: elementwise activation, softmax over the last axis."""
    x = _f64(x)
    if name == "linear":
        return x.copy()
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return _sigmoid(x)
    if name == "softmax":
        return _softmax(x)
    raise ValueError(f"activation: unknown activation {name!r}")


def activation_backward(y, dy, name):
    """act_bwd: dx = dy * act'(.), expressed through the forward output y."""
    y, dy = _f64(y), _f64(dy)
    if name == "linear":
        return dy.copy()
    if name == "relu":
        return dy * (y > 0)
    if name == "tanh":
        return dy * (1.0 - y * y)
    if name == "sigmoid":
        return dy * y * (1.0 - y)
    if name == "softmax":
        # Jacobian of softmax: diag(y) - y y^T, applied row by row.
        return y * (dy - (dy * y).sum(axis=-1, keepdims=True))
    raise ValueError(f"activation_backward: unknown activation {name!r}")


_activate = activation  # for functions whose `activation` argument shadows the name


# =====================================================================================
# gemm
# =====================================================================================

def gemm(a, b, bias=None, c=None, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
         activation="linear"):
    """C = act(alpha * op(A) @ op(B) + beta * C + bias[None, :]).

    op(A) is A (M, K) or, with trans_a, A.T of A stored (K, M); likewise B.
    beta == 0 never reads C (so a NaN there does not propagate)."""
    a, b = _f64(a), _f64(b)
    opa = a.T if trans_a else a
    opb = b.T if trans_b else b
    out = alpha * (opa @ opb)
    if beta != 0.0:
        out = out + beta * _f64(c)
    if bias is not None:
        out = out + _f64(bias)[None, :]
    if activation == "softmax":
        raise ValueError("gemm: softmax is not elementwise")
    return _activate(out, activation)


def matmul(a, b, bias=None, activation="linear"):
    a = _f64(a)
    lead = a.shape[:-1]
    out = gemm(a.reshape(-1, a.shape[-1]), b, bias=bias, activation=activation)
    return out.reshape(lead + (out.shape[-1],))


# =====================================================================================
# window geometry (conv and pooling)
# =====================================================================================

def window_geometry(size, k, stride, dilation, padding):
    """(out, pad_before, pad_after) of one axis, Keras rules."""
    span = (k - 1) * dilation + 1
    if padding == "valid":
        if size < span:
            raise ValueError(f"window {span} larger than input {size} under 'valid'")
        out = (size - span) // stride + 1
        return out, 0, 0
    if padding == "same":
        out = -(-size // stride)
        total = max(0, (out - 1) * stride + span - size)
        return out, total // 2, total - total // 2
    raise ValueError(f"unknown padding {padding!r}")


def conv2d_output_shape(input_shape, kernel_shape, strides=(1, 1), padding="valid",
                        dilation_rate=(1, 1)):
    n, h, w, _ = input_shape
    kh, kw, _, f = kernel_shape
    sh, sw = _pair(strides)
    dh, dw = _pair(dilation_rate)
    oh = window_geometry(h, kh, sh, dh, padding)[0]
    ow = window_geometry(w, kw, sw, dw, padding)[0]
    return (n, oh, ow, f)


def pool2d_output_shape(input_shape, pool_size=(2, 2), strides=None, padding="valid"):
    n, h, w, c = input_shape
    ph, pw = _pair(pool_size)
    sh, sw = _pair(strides if strides is not None else (ph, pw))
    return (n, window_geometry(h, ph, sh, 1, padding)[0],
            window_geometry(w, pw, sw, 1, padding)[0], c)


# =====================================================================================
# conv2d (NHWC, kernel (KH, KW, C, F), cross-correlation)
# =====================================================================================

def _conv_setup(input_shape, kernel_hw, strides, padding, dilation_rate):
    _, h, w, _ = input_shape
    kh, kw = kernel_hw
    sh, sw = _pair(strides)
    dh, dw = _pair(dilation_rate)
    oh, pt, pb = window_geometry(h, kh, sh, dh, padding)
    ow, pl, pr = window_geometry(w, kw, sw, dw, padding)
    return dict(kh=kh, kw=kw, sh=sh, sw=sw, dh=dh, dw=dw, oh=oh, ow=ow,
                pt=pt, pb=pb, pl=pl, pr=pr)


def _tap(g, i, j):
    """Slices of the zero-padded input read by kernel tap (i, j) for all outputs."""
    r0, c0 = i * g["dh"], j * g["dw"]
    return (slice(None), slice(r0, r0 + (g["oh"] - 1) * g["sh"] + 1, g["sh"]),
            slice(c0, c0 + (g["ow"] - 1) * g["sw"] + 1, g["sw"]), slice(None))


def _padded_zeros(shape, g):
    n, h, w, c = shape
    return np.zeros((n, g["pt"] + h + g["pb"], g["pl"] + w + g["pr"], c))


def conv2d(x, kernel, bias=None, strides=(1, 1), padding="valid", dilation_rate=(1, 1),
           activation="linear"):
    """conv2d_fwd: y = act(conv(x, kernel) + bias), one einsum per kernel tap."""
    x, kernel = _f64(x), _f64(kernel)
    g = _conv_setup(x.shape, kernel.shape[:2], strides, padding, dilation_rate)
    xp = _padded_zeros(x.shape, g)
    xp[:, g["pt"]:g["pt"] + x.shape[1], g["pl"]:g["pl"] + x.shape[2], :] = x
    y = np.zeros((x.shape[0], g["oh"], g["ow"], kernel.shape[3]))
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            y += np.einsum("nhwc,cf->nhwf", xp[_tap(g, i, j)], kernel[i, j])
    if bias is not None:
        y += _f64(bias)
    return _activate(y, activation)


def conv2d_naive(x, kernel, bias=None, strides=(1, 1), padding="valid",
                 dilation_rate=(1, 1)):
    """conv2d_fwd written as the textbook sum over every index (tiny inputs only);
    used to prove `conv2d`."""
    x, kernel = _f64(x), _f64(kernel)
    n, h, w, c = x.shape
    kh, kw, _, f = kernel.shape
    g = _conv_setup(x.shape, (kh, kw), strides, padding, dilation_rate)
    y = np.zeros((n, g["oh"], g["ow"], f))
    for b in range(n):
        for oy in range(g["oh"]):
            for ox in range(g["ow"]):
                for o in range(f):
                    s = 0.0
                    for i in range(kh):
                        for j in range(kw):
                            iy = oy * g["sh"] - g["pt"] + i * g["dh"]
                            ix = ox * g["sw"] - g["pl"] + j * g["dw"]
                            if 0 <= iy < h and 0 <= ix < w:
                                for ch in range(c):
                                    s += x[b, iy, ix, ch] * kernel[i, j, ch, o]
                    y[b, oy, ox, o] = s + (0.0 if bias is None else bias[o])
    return y


def conv2d_backward_data(dy, kernel, input_shape, strides=(1, 1), padding="valid",
                         dilation_rate=(1, 1)):
    """conv2d_bwd_data: dx = d(sum(dy * conv(x, kernel)))/dx (dy already through act')."""
    dy, kernel = _f64(dy), _f64(kernel)
    input_shape = tuple(int(s) for s in input_shape)
    g = _conv_setup(input_shape, kernel.shape[:2], strides, padding, dilation_rate)
    dxp = _padded_zeros(input_shape, g)
    for i in range(g["kh"]):
        for j in range(g["kw"]):
            dxp[_tap(g, i, j)] += np.einsum("nhwf,cf->nhwc", dy, kernel[i, j])
    _, h, w, _ = input_shape
    return dxp[:, g["pt"]:g["pt"] + h, g["pl"]:g["pl"] + w, :].copy()


def conv2d_backward_filter(x, dy, kernel_size, strides=(1, 1), padding="valid",
                           dilation_rate=(1, 1)):
    """conv2d_bwd_filter: (dw (KH, KW, C, F), db (F,))."""
    x, dy = _f64(x), _f64(dy)
    kh, kw = _pair(kernel_size)
    g = _conv_setup(x.shape, (kh, kw), strides, padding, dilation_rate)
    xp = _padded_zeros(x.shape, g)
    xp[:, g["pt"]:g["pt"] + x.shape[1], g["pl"]:g["pl"] + x.shape[2], :] = x
    dw = np.zeros((kh, kw, x.shape[3], dy.shape[3]))
    for i in range(kh):
        for j in range(kw):
            dw[i, j] = np.einsum("nhwc,nhwf->cf", xp[_tap(g, i, j)], dy)
    return dw, dy.sum(axis=(0, 1, 2))


# =====================================================================================
# pooling (NHWC)
# =====================================================================================

def _pool_windows(input_shape, pool_size, strides, padding):
    """Yields (oy, ox, row slice, col slice) of the in-bounds part of every window."""
    _, h, w, _ = input_shape
    ph, pw = _pair(pool_size)
    sh, sw = _pair(strides if strides is not None else (ph, pw))
    oh, pt, _ = window_geometry(h, ph, sh, 1, padding)
    ow, pl, _ = window_geometry(w, pw, sw, 1, padding)
    for oy in range(oh):
        r0 = oy * sh - pt
        rows = slice(max(r0, 0), min(r0 + ph, h))
        for ox in range(ow):
            c0 = ox * sw - pl
            yield oy, ox, rows, slice(max(c0, 0), min(c0 + pw, w))


def max_pool2d(x, pool_size=(2, 2), strides=None, padding="valid"):
    x = _f64(x)
    y = np.empty(pool2d_output_shape(x.shape, pool_size, strides, padding))
    for oy, ox, rows, cols in _pool_windows(x.shape, pool_size, strides, padding):
        y[:, oy, ox, :] = x[:, rows, cols, :].max(axis=(1, 2))
    return y


def max_pool2d_backward(x, dy, pool_size=(2, 2), strides=None, padding="valid"):
    """Each dy goes to the first maximum of its window in row-major (kh, kw) order."""
    x, dy = _f64(x), _f64(dy)
    n, _, _, c = x.shape
    dx = np.zeros_like(x)
    nn, cc = np.meshgrid(np.arange(n), np.arange(c), indexing="ij")
    for oy, ox, rows, cols in _pool_windows(x.shape, pool_size, strides, padding):
        win = x[:, rows, cols, :]  # (n, rh, rw, c)
        rw = win.shape[2]
        first = win.reshape(n, -1, c).argmax(axis=1)  # argmax returns the first max
        dx[nn, rows.start + first // rw, cols.start + first % rw, cc] += dy[:, oy, ox, :]
    return dx


def avg_pool2d(x, pool_size=(2, 2), strides=None, padding="valid"):
    x = _f64(x)
    y = np.empty(pool2d_output_shape(x.shape, pool_size, strides, padding))
    for oy, ox, rows, cols in _pool_windows(x.shape, pool_size, strides, padding):
        y[:, oy, ox, :] = x[:, rows, cols, :].mean(axis=(1, 2))
    return y


def avg_pool2d_backward(dy, input_shape, pool_size=(2, 2), strides=None, padding="valid"):
    dy = _f64(dy)
    input_shape = tuple(int(s) for s in input_shape)
    dx = np.zeros(input_shape)
    for oy, ox, rows, cols in _pool_windows(input_shape, pool_size, strides, padding):
        count = (rows.stop - rows.start) * (cols.stop - cols.start)
        dx[:, rows, cols, :] += dy[:, oy, ox, None, None, :] / count
    return dx


# =====================================================================================
# bias gradient
# =====================================================================================

def reduce_sum(x, scale=1.0, start=None):
    """reduce_sum op: scale * sum(x) (+ start when accumulating), in float64."""
    total = float(scale) * _f64(x).sum()
    return total if start is None else float(start) + total


def bias_grad(dy):
    """db = sum of dy over every axis but the last."""
    dy = _f64(dy)
    return dy.reshape(-1, dy.shape[-1]).sum(axis=0)


def weight_grads(x, h, g):
    """The weight gradients of y = x W + h U + b from g = dL/dy (rows = samples):
    (x^T g, h^T g or None without h, the column sums of g), in float64."""
    x, g = _f64(x), _f64(g)
    return x.T @ g, (None if h is None else _f64(h).T @ g), g.sum(axis=0)


# =====================================================================================
# losses: (per-row loss, gradient of grad_scale * sum(loss) w.r.t. the first input)
# =====================================================================================

def _dense_labels(labels, cols):
    """One-hot float labels from integer labels of shape (rows,), else as float64."""
    labels = np.asarray(labels)
    if np.issubdtype(labels.dtype, np.integer):
        idx = labels.reshape(-1)
        if idx.min(initial=0) < 0 or idx.max(initial=0) >= cols:
            raise ValueError("labels out of range")
        out = np.zeros((idx.size, cols))
        out[np.arange(idx.size), idx] = 1.0
        return out
    return _f64(labels)


def softmax_cross_entropy(logits, labels, grad_scale=1.0):
    """loss = -sum(y * log_softmax(z)); integer labels are class indices.

    The gradient is the exact one of that loss, sum(y) * softmax(z) - y, which is
    softmax(z) - y for labels that sum to one."""
    z = _f64(logits)
    y = _dense_labels(labels, z.shape[-1])
    loss = -(y * _log_softmax(z)).sum(axis=-1)
    grad = grad_scale * (_softmax(z) * y.sum(axis=-1, keepdims=True) - y)
    return loss, grad


def sigmoid_binary_cross_entropy(logits, labels, grad_scale=1.0):
    """loss = mean over columns of -(y log s(z) + (1-y) log(1-s(z))), from the logits."""
    z, y = _f64(logits), _f64(labels)
    cols = z.shape[-1]
    # -(y log s + (1-y) log(1-s)) = max(z, 0) - z y + log(1 + exp(-|z|)), stably
    per = np.maximum(z, 0.0) - z * y + np.log1p(np.exp(-np.abs(z)))
    loss = per.mean(axis=-1)
    grad = grad_scale * (_sigmoid(z) - y) / cols
    return loss, grad


def cross_entropy_from_probs(probs, labels, binary=False, grad_scale=1.0):
    """Keras' clipped cross-entropy on probabilities (epsilon 1e-7, float32 bounds).

    categorical: p <- p / sum(p), q = clip(p, eps, 1-eps), loss = -sum(y log q).
    binary:      q = clip(p, eps, 1-eps), loss = mean(-(y log q + (1-y) log(1-q))).
    The clip passes the gradient inside [eps, 1-eps] (ends included, as TensorFlow's
    clip_by_value does) and blocks it outside."""
    p = _f64(probs)
    cols = p.shape[-1]
    lo, hi = CLIP_LO, CLIP_HI
    if binary:
        y = _f64(labels)
        q = np.clip(p, lo, hi)
        inside = (p >= lo) & (p <= hi)
        loss = (-(y * np.log(q) + (1.0 - y) * np.log(1.0 - q))).mean(axis=-1)
        grad = grad_scale * inside * (-y / q + (1.0 - y) / (1.0 - q)) / cols
        return loss, grad
    y = _dense_labels(labels, cols)
    s = p.sum(axis=-1, keepdims=True)
    n = p / s
    q = np.clip(n, lo, hi)
    inside = (n >= lo) & (n <= hi)
    loss = -(y * np.log(q)).sum(axis=-1)
    g_n = inside * (-y / q)  # dL/dn
    # n_j = p_j / s  =>  dL/dp_k = (g_k - sum_j g_j n_j) / s
    grad = grad_scale * (g_n - (g_n * n).sum(axis=-1, keepdims=True)) / s
    return loss, grad


def regression_loss(pred, target, kind="mse", grad_scale=1.0):
    """mse: mean((p-t)^2); mae: mean(|p-t|), over the last axis (sign(0) = 0)."""
    p, t = _f64(pred), _f64(target)
    cols = p.shape[-1]
    d = p - t
    if kind == "mse":
        return (d * d).mean(axis=-1), grad_scale * 2.0 * d / cols
    if kind == "mae":
        return np.abs(d).mean(axis=-1), grad_scale * np.sign(d) / cols
    raise ValueError(f"regression_loss: unknown kind {kind!r}")


def mse(pred, target, grad_scale=1.0):
    return regression_loss(pred, target, "mse", grad_scale)


def mae(pred, target, grad_scale=1.0):
    return regression_loss(pred, target, "mae", grad_scale)


# =====================================================================================
# dropout (counter-based mask, gc_uniform01 of gpucmp.h)
# =====================================================================================

_M64 = (1 << 64) - 1


def hash32(seed, index):
    """gc_hash32(seed, i) for an array of indices, in wrapping uint64 arithmetic."""
    i = np.asarray(index, dtype=np.uint64)
    s = np.uint64(int(seed) & _M64)
    with np.errstate(over="ignore"):
        z = s ^ (i * np.uint64(0x9E3779B97F4A7C15))
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(32)).astype(np.uint32)


def hash32_python(seed, i):
    """The same hash with Python integers (a second, independent implementation)."""
    z = (int(seed) ^ (int(i) * 0x9E3779B97F4A7C15)) & _M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _M64
    z ^= z >> 31
    return z >> 32


def uniform01(seed, index):
    """gc_uniform01: the top 24 bits of the hash times 2^-24 (exact in float32)."""
    return (hash32(seed, index) >> np.uint32(8)).astype(np.float64) / 16777216.0


def dropout_mask(shape, rate, seed):
    """Boolean keep-mask of the given shape: element i (flat, row-major) is kept iff
    gc_uniform01(seed, i) >= rate, the comparison done in float32 as in C."""
    shape = tuple(np.atleast_1d(shape)) if np.ndim(shape) else (int(shape),)
    n = int(np.prod(shape))
    u = uniform01(seed, np.arange(n, dtype=np.uint64))
    return (u >= float(np.float32(rate))).reshape(shape)


def dropout(x, rate, seed):
    x = _f64(x)
    keep = dropout_mask(x.shape, rate, seed)
    return np.where(keep, x / (1.0 - float(np.float32(rate))), 0.0)


def dropout_backward(dy, rate, seed):
    # the op is linear in x, so its backward is the same masked scaling
    return dropout(dy, rate, seed)


# =====================================================================================
# optimizers (Keras formulas; functional: they return the updated arrays)
# =====================================================================================

def adam_update(w, g, m, v, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7, t=1,
                one_minus_beta_1=None, one_minus_beta_2=None):
    """Keras Adam step t (t = iterations + 1): returns (w, m, v). one_minus_beta_*: the
    factors of the moment updates when not 1 - beta_* (Keras 3 multiplies by the float32
    of 1 - beta computed in double from the user's beta, while the bias correction uses
    the float32 beta itself: pass beta_* = f32(b), one_minus_beta_* = f32(1 - b))."""
    w, g, m, v = _f64(w), _f64(g), _f64(m), _f64(v)
    alpha = lr * math.sqrt(1.0 - beta_2 ** t) / (1.0 - beta_1 ** t)
    m = m + (g - m) * (1.0 - beta_1 if one_minus_beta_1 is None else one_minus_beta_1)
    v = v + (g * g - v) * (1.0 - beta_2 if one_minus_beta_2 is None else one_minus_beta_2)
    w = w - alpha * m / (np.sqrt(v) + epsilon)
    return w, m, v


def sgd_update(w, g, m=None, lr=0.01, momentum=0.0, nesterov=False):
    """Keras SGD: returns (w, m); m is None when momentum == 0 and no m was given."""
    w, g = _f64(w), _f64(g)
    if momentum == 0.0 and m is None:
        return w - lr * g, None
    m = momentum * _f64(m) - lr * g
    if nesterov:
        w = w + momentum * m - lr * g
    else:
        w = w + m
    return w, m


def rmsprop_update(w, g, v, lr=0.001, rho=0.9, epsilon=1e-7, one_minus_rho=None):
    """Keras RMSprop (not centered, no momentum): returns (w, v); one_minus_rho as
    adam_update's one_minus_beta_*."""
    w, g, v = _f64(w), _f64(g), _f64(v)
    v = rho * v + (1.0 - rho if one_minus_rho is None else one_minus_rho) * g * g
    w = w - lr * g / np.sqrt(v + epsilon)
    return w, v


# =====================================================================================
# accuracy (number of correct rows)
# =====================================================================================

def accuracy(pred, labels, kind="categorical", threshold=0.5):
    """categorical: argmax(pred) == argmax(labels); sparse: argmax(pred) == label;
    binary: rows * mean over all elements of (pred > threshold) == (labels > 0.5).
    argmax takes the first of equal maxima."""
    p = _f64(pred)
    p = p.reshape(-1, p.shape[-1])
    rows = p.shape[0]
    if kind == "categorical":
        y = _f64(labels).reshape(rows, -1)
        return float((p.argmax(axis=1) == y.argmax(axis=1)).sum())
    if kind == "sparse":
        y = np.asarray(labels).reshape(rows)
        return float((p.argmax(axis=1) == y).sum())
    if kind == "binary":
        thr = float(np.float32(threshold))
        y = _f64(labels).reshape(p.shape)
        # rows * mean over all elements = matching elements / cols
        return float(((p > thr) == (y > 0.5)).sum()) / p.shape[1]
    raise ValueError(f"accuracy: unknown kind {kind!r}")


# =====================================================================================
# embedding (gather of table rows) and its backward (scatter-add)
# =====================================================================================

def embedding(table, indices):
    """out[..., :] = table[indices[...], :]: shape indices.shape + (D,). Integer tables
    stay integer (a gather is exact); float tables come back as float64. An index
    outside [0, V) is a ValueError (no negative wrap-around as in NumPy)."""
    t = np.asarray(table)
    idx = np.asarray(indices)
    if t.ndim != 2:
        raise ValueError(f"embedding: table must be (V, D), got shape {t.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= t.shape[0]):
        raise ValueError(f"embedding: an index is outside [0, {t.shape[0]})")
    out = np.empty(idx.shape + (t.shape[1],), dtype=t.dtype if t.dtype.kind in "iu" else np.float64)
    for pos in np.ndindex(*idx.shape):
        out[pos] = t[int(idx[pos])]
    return out


def embedding_backward(dy, indices, vocab_size):
    """d/d table of sum(dy * embedding(table, indices)): zeros (vocab_size, D) plus, for
    every position, the row dy[position] added at row indices[position]."""
    dy = _f64(dy)
    idx = np.asarray(indices)
    if dy.shape[:-1] != idx.shape:
        raise ValueError(f"embedding_backward: dy {dy.shape} does not match indices {idx.shape}")
    dtable = np.zeros((vocab_size, dy.shape[-1]))
    for pos in np.ndindex(*idx.shape):
        dtable[int(idx[pos])] += dy[pos]
    return dtable


# =====================================================================================
# graph ops: add, mul, batch normalization, zero padding, concat / slice
# =====================================================================================

def add(*xs, activation="linear"):
    """act(x0 + x1 + ...) in float64, with x0's shape (the others reshaped to it)."""
    y = _f64(xs[0]).copy()
    for x in xs[1:]:
        y = y + _f64(x).reshape(y.shape)
    return np.maximum(y, 0.0) if activation == "relu" else y


def mul(a, b):
    a = _f64(a)
    return a * _f64(b).reshape(a.shape)


def batchnorm_forward(x, moving_mean, moving_variance, gamma=None, beta=None, residual=None,
                      epsilon=1e-3, momentum=0.99, training=True, activation="linear"):
    """Keras BatchNormalization over the last axis, plus residual and activation:
    returns (y, new moving_mean, new moving_variance, save (2, C) = (mean, invstd))."""
    x = _f64(x)
    C = x.shape[-1]
    rows = x.reshape(-1, C)
    mm, mv = _f64(moving_mean), _f64(moving_variance)
    if training:
        mean = rows.mean(axis=0)
        var = ((rows - mean) ** 2).mean(axis=0)  # biased (Keras 3)
        new_mm = mm * momentum + mean * (1.0 - momentum)
        new_mv = mv * momentum + var * (1.0 - momentum)
    else:
        mean, var, new_mm, new_mv = mm, mv, mm.copy(), mv.copy()
    invstd = 1.0 / np.sqrt(var + epsilon)
    g = np.ones(C) if gamma is None else _f64(gamma)
    b = np.zeros(C) if beta is None else _f64(beta)
    y = g * (x - mean) * invstd + b
    if residual is not None:
        y = y + _f64(residual)
    if activation == "relu":
        y = np.maximum(y, 0.0)
    return y, new_mm, new_mv, np.stack([mean, invstd])


def batchnorm_backward(x, dy, save, gamma=None, y=None, training=True, activation="linear"):
    """(dx, dgamma, dbeta, dresidual) of batchnorm_forward, from its save (mean, invstd)
    and, for relu, its output y."""
    x, dy, save = _f64(x), _f64(dy), _f64(save)
    C = x.shape[-1]
    mean, invstd = save[0], save[1]
    dz = dy * (_f64(y) > 0) if activation == "relu" else dy
    xhat = (x - mean) * invstd
    g = np.ones(C) if gamma is None else _f64(gamma)
    dzr, xhr = dz.reshape(-1, C), xhat.reshape(-1, C)
    dbeta, dgamma = dzr.sum(axis=0), (dzr * xhr).sum(axis=0)
    if training:
        dx = g * invstd * (dz - dzr.mean(axis=0) - xhat * (dzr * xhr).mean(axis=0))
    else:
        dx = g * invstd * dz
    return dx, dgamma, dbeta, dz


def pad2d(x, padding):
    """Keras ZeroPadding2D: padding ((top, bottom), (left, right)) of NHWC x."""
    (t, b), (l, r) = padding
    return np.pad(_f64(x), ((0, 0), (t, b), (l, r), (0, 0)))


def pad2d_backward(dy, padding):
    (t, b), (l, r) = padding
    dy = _f64(dy)
    return dy[:, t:dy.shape[1] - b, l:dy.shape[2] - r, :]


def concat(arrays, axis=-1):
    return np.concatenate([_f64(a) for a in arrays], axis=axis)


def slice_cols(x, offset, width, axis=-1):
    x = _f64(x)
    return np.take(x, np.arange(offset, offset + width), axis=axis)


# =====================================================================================
# recurrent layers: the sequential part of SimpleRNN / LSTM / GRU (rnn_fwd / rnn_bwd)
# =====================================================================================
# Written from RECURRENT_SPEC.md 1.1-1.3 (cells), 1.5 (Keras 3 hard_sigmoid), 1.6
# (go_backwards: outputs in processing order), 1.8 (TF generic-path masking) and 1.12
# (BPTT). xw = x.W + b for every step (B, T, G*u), U the recurrent kernel (u, G*u) in
# Keras layout (gate blocks: LSTM i, f, c, o; GRU z, r, h), bh GRU reset_after's recurrent
# bias (row 1 of Keras' (2, 3u) bias). Everything float64, one step at a time.
# rmask (B, G*u): recurrent dropout (1.7, Keras' implementation 1), one (B, u) block per
# gate multiplying h_{t-1} in that gate's recurrent product only (GRU's z * h_{t-1} is
# unmasked; reset_before's reset multiplies the masked copy).

RNN_GATES = {"simple": 1, "lstm": 4, "gru": 3, "gru_reset_before": 3}
RNN_ACTIVATIONS = ("tanh", "sigmoid", "relu", "linear", "hard_sigmoid")


def _rnn_act(name, x):
    if name == "tanh":
        return np.tanh(x)
    if name == "sigmoid":
        return _sigmoid(x)
    if name == "relu":
        return np.maximum(x, 0.0)
    if name == "linear":
        return x
    if name == "hard_sigmoid":  # Keras 3 (tf.keras 2 had 0.2x + 0.5)
        return np.clip(x / 6.0 + 0.5, 0.0, 1.0)
    raise ValueError(name)


def _rnn_dact(name, x):
    """d act / dx at the PRE-activation x."""
    if name == "tanh":
        return 1.0 - np.tanh(x) ** 2
    if name == "sigmoid":
        s = _sigmoid(x)
        return s * (1.0 - s)
    if name == "relu":
        return (x > 0.0).astype(np.float64)
    if name == "linear":
        return np.ones_like(x)
    if name == "hard_sigmoid":
        return ((x > -3.0) & (x < 3.0)).astype(np.float64) / 6.0
    raise ValueError(name)


def _rnn_setup(xw, U, h0, c0, mask, bh, cell):
    xw, U = _f64(xw), _f64(U)
    B, T, Gu = xw.shape
    u = U.shape[0]
    G = RNN_GATES[cell]
    assert Gu == G * u and U.shape == (u, G * u)
    h0 = np.zeros((B, u)) if h0 is None else _f64(h0)
    c0 = np.zeros((B, u)) if c0 is None else _f64(c0)
    used = np.ones((B, T), bool) if mask is None else (_f64(mask) != 0.0)
    bh = np.zeros(G * u) if bh is None else _f64(bh)
    return xw, U, h0, c0, used, bh, B, T, u


def _rnn_gate_h(h, rmask, G, u):
    """h_{t-1} as each gate's recurrent product reads it: [h * rmask_g for g < G]."""
    if rmask is None:
        return [h] * G
    return [h * rmask[:, g * u:(g + 1) * u] for g in range(G)]


def _rnn_rec(hg, U, u):
    """The recurrent products side by side: [hg[g] . U_g for g]."""
    return np.concatenate([hg[g] @ U[:, g * u:(g + 1) * u] for g in range(len(hg))], axis=1)


def _rnn_cell(cell, act, ract, x, h, c, U, bh, u, rmask=None):
    """One step for all rows: (h_new, c_new, the values a backward needs)."""
    hg = _rnn_gate_h(h, rmask, RNN_GATES[cell], u)
    if cell == "simple":
        a = x + _rnn_rec(hg, U, u)
        hn = _rnn_act(act, a)
        return hn, c, {"a": a, "hn": hn}
    if cell == "lstm":
        zz = x + _rnn_rec(hg, U, u)
        zi, zf, zg, zo = (zz[:, k * u:(k + 1) * u] for k in range(4))
        i, f, g, o = _rnn_act(ract, zi), _rnn_act(ract, zf), _rnn_act(act, zg), _rnn_act(ract, zo)
        cn = f * c + i * g
        hn = o * _rnn_act(act, cn)
        return hn, cn, {"zi": zi, "zf": zf, "zg": zg, "zo": zo, "i": i, "f": f, "g": g, "o": o, "cn": cn, "cp": c}
    if cell == "gru":  # reset_after=True
        m = _rnn_rec(hg, U, u) + bh
        xz, xr, xh = x[:, :u], x[:, u:2 * u], x[:, 2 * u:]
        mz, mr, mh = m[:, :u], m[:, u:2 * u], m[:, 2 * u:]
        az, ar = xz + mz, xr + mr
        z, r = _rnn_act(ract, az), _rnn_act(ract, ar)
        ah = xh + r * mh
        hh = _rnn_act(act, ah)
        hn = z * h + (1.0 - z) * hh
        return hn, c, {"az": az, "ar": ar, "ah": ah, "z": z, "r": r, "hh": hh, "mh": mh}
    if cell == "gru_reset_before":
        xz, xr, xh = x[:, :u], x[:, u:2 * u], x[:, 2 * u:]
        az, ar = xz + hg[0] @ U[:, :u], xr + hg[1] @ U[:, u:2 * u]
        z, r = _rnn_act(ract, az), _rnn_act(ract, ar)
        rh = r * hg[2]
        ah = xh + rh @ U[:, 2 * u:]
        hh = _rnn_act(act, ah)
        hn = z * h + (1.0 - z) * hh
        return hn, c, {"az": az, "ar": ar, "ah": ah, "z": z, "r": r, "hh": hh, "rh": rh}
    raise ValueError(cell)


def seq_mask(x, value=0.0):
    """Keras' step mask: 1.0 where some x[..., f] != value over the last axis (NaN
    differs), else 0.0; x's shape without its last axis."""
    return np.any(np.asarray(x, np.float64) != value, axis=-1).astype(np.float64)


def mul_bcast(x, m):
    """x (A, M, C) times m (A, C) repeated along M, in float64."""
    return _f64(x) * _f64(m)[:, None, :]


def reverse_seq(x):
    """x (A, T, C) with its middle (time) axis reversed, in float64."""
    return _f64(x)[:, ::-1, :]


def rnn_forward(xw, U, h0=None, c0=None, mask=None, bh=None, cell="lstm", activation="tanh",
                recurrent_activation="sigmoid", go_backwards=False, sequences=False,
                zero_output_for_mask=False, rmask=None):
    """The recurrence of a Keras RNN layer after its input projection. Returns a dict:
    y ((B, T, u) in processing order when sequences, else (B, u): the last emitted output),
    h, c (the final states: after each row's last valid step), save (the list of the
    (B, T, u) blocks rnn_fwd documents for the cell, in input order; block 0 = hprev)."""
    xw, U, h, c, used, bh, B, T, u = _rnn_setup(xw, U, h0, c0, mask, bh, cell)
    rmask = None if rmask is None else _f64(rmask)
    act, ract = activation, recurrent_activation
    names = {"simple": ["hp", "hn"], "lstm": ["hp", "cp", "i", "f", "g", "o", "cn"],
             "gru": ["hp", "z", "r", "hh", "mh"], "gru_reset_before": ["hp", "z", "r", "hh", "rh"]}[cell]
    save = {n: np.zeros((B, T, u)) for n in names}
    emitted = np.zeros((B, u))  # TF's prev_output starts as zeros
    ys = np.zeros((B, T, u))
    for k in range(T):
        t = T - 1 - k if go_backwards else k  # the mask is reversed with the input
        hn, cn, v = _rnn_cell(cell, act, ract, xw[:, t], h, c, U, bh, u, rmask)
        v["hp"] = h
        for n in names:
            save[n][:, t] = v[n]
        m = used[:, t][:, None]
        out = np.where(m, hn, 0.0 if zero_output_for_mask else emitted)
        h = np.where(m, hn, h)
        c = np.where(m, cn, c)
        emitted = out
        ys[:, k] = out
    return {"y": ys if sequences else emitted, "h": h, "c": c, "save": [save[n] for n in names]}


def rnn_backward(xw, U, h0=None, c0=None, mask=None, bh=None, dy=None, dh_T=None, dc_T=None,
                 cell="lstm", activation="tanh", recurrent_activation="sigmoid", go_backwards=False,
                 sequences=False, zero_output_for_mask=False, rmask=None):
    """BPTT of rnn_forward for the loss sum(dy * y) + sum(dh_T * h_T) + sum(dc_T * c_T).
    Returns a dict: dxw (B, T, G*u) input order; dm (gru: the gradient of m = hprev.U + bh);
    dh0, dc0; and the weight gradients the plan derives from them: dU, dbh (gru)."""
    xw, U, h0_, c0_, used, bh_, B, T, u = _rnn_setup(xw, U, h0, c0, mask, bh, cell)
    G = RNN_GATES[cell]
    rm = np.ones((B, G * u)) if rmask is None else _f64(rmask)
    rmb = [rm[:, g * u:(g + 1) * u] for g in range(G)]
    act, ract = activation, recurrent_activation

    def rec_back(dz, hp, gates):
        """(dhprev, dU) of the recurrent products of the listed gate blocks."""
        dhp, dUk = np.zeros_like(hp), np.zeros_like(U)
        for g in gates:
            sl = slice(g * u, (g + 1) * u)
            dhp += (dz[:, sl] @ U[:, sl].T) * rmb[g]
            dUk[:, sl] = (hp * rmb[g]).T @ dz[:, sl]
        return dhp, dUk
    # forward again, keeping each step's values
    h, c, steps = h0_, c0_, []
    for k in range(T):
        t = T - 1 - k if go_backwards else k
        hn, cn, v = _rnn_cell(cell, act, ract, xw[:, t], h, c, U, bh_, u, rmask)
        steps.append((t, h, c, v))
        m = used[:, t][:, None]
        h, c = np.where(m, hn, h), np.where(m, cn, c)
    dxw = np.zeros((B, T, G * u))
    dm = np.zeros((B, T, G * u))
    dU = np.zeros_like(U)
    dbh = np.zeros(G * u)
    dh = np.zeros((B, u)) if dh_T is None else _f64(dh_T).copy()
    dc = np.zeros((B, u)) if dc_T is None else _f64(dc_T).copy()
    de = np.zeros((B, u))  # gradient of the carried emitted output
    if dy is not None and not sequences:
        de = _f64(dy).copy()
    for k in range(T - 1, -1, -1):
        t, hp, cp, v = steps[k]
        if dy is not None and sequences:
            de = de + _f64(dy)[:, k]
        m = used[:, t][:, None]
        # out = where(m, hn, emitted_prev or 0); h = where(m, hn, hp); c = where(m, cn, cp)
        g = np.where(m, dh + de, 0.0)        # reaches hn
        dcn = np.where(m, dc, 0.0)           # reaches cn
        de = np.where(m, 0.0, 0.0 if zero_output_for_mask else de)
        dh_pass = np.where(m, 0.0, dh)
        dc_pass = np.where(m, 0.0, dc)
        if cell == "simple":
            da = g * _rnn_dact(act, v["a"])
            dz = da
            dhp, dUk = rec_back(dz, hp, range(G))
            dcp = np.zeros_like(dc)
            dU += dUk
            dxw[:, t] = dz
        elif cell == "lstm":
            tc = _rnn_act(act, v["cn"])
            do = g * tc
            dcn = dcn + g * v["o"] * _rnn_dact(act, v["cn"])
            di, dg, df = dcn * v["g"], dcn * v["i"], dcn * cp
            dcp = dcn * v["f"]
            dz = np.concatenate([di * _rnn_dact(ract, v["zi"]), df * _rnn_dact(ract, v["zf"]),
                                 dg * _rnn_dact(act, v["zg"]), do * _rnn_dact(ract, v["zo"])], axis=1)
            dhp, dUk = rec_back(dz, hp, range(G))
            dU += dUk
            dxw[:, t] = dz
        elif cell == "gru":
            z, r, hh = v["z"], v["r"], v["hh"]
            dhh = g * (1.0 - z)
            dzv = g * (hp - hh)
            dah = dhh * _rnn_dact(act, v["ah"])
            dr = dah * v["mh"]
            daz, dar = dzv * _rnn_dact(ract, v["az"]), dr * _rnn_dact(ract, v["ar"])
            dmk = np.concatenate([daz, dar, dah * r], axis=1)
            dxw[:, t] = np.concatenate([daz, dar, dah], axis=1)
            dm[:, t] = dmk
            dhr, dUk = rec_back(dmk, hp, range(G))
            dhp = g * z + dhr
            dcp = np.zeros_like(dc)
            dU += dUk
            dbh += dmk.sum(axis=0)
        else:  # gru_reset_before
            z, r, hh = v["z"], v["r"], v["hh"]
            dhh = g * (1.0 - z)
            dzv = g * (hp - hh)
            dah = dhh * _rnn_dact(act, v["ah"])
            drh = dah @ U[:, 2 * u:].T          # rh = r * (hp * rm_h)
            dr = drh * hp * rmb[2]
            daz, dar = dzv * _rnn_dact(ract, v["az"]), dr * _rnn_dact(ract, v["ar"])
            dzr = np.concatenate([daz, dar, np.zeros_like(dah)], axis=1)
            dxw[:, t] = np.concatenate([daz, dar, dah], axis=1)
            dhr, dUk = rec_back(dzr, hp, (0, 1))
            dhp = g * z + drh * r * rmb[2] + dhr
            dcp = np.zeros_like(dc)
            dU[:, :2 * u] += dUk[:, :2 * u]
            dU[:, 2 * u:] += v["rh"].T @ dah
        dh = dh_pass + np.where(m, dhp, 0.0)
        dc = dc_pass + np.where(m, dcp, 0.0)
    out = {"dxw": dxw, "dh0": dh, "dc0": dc, "dU": dU}
    if cell == "gru":
        out["dm"] = dm
        out["dbh"] = dbh
    return out


# =====================================================================================
# numerical differentiation (to prove the backward functions above)
# =====================================================================================

def numerical_grad(f, x, eps=1e-6):
    """Central-difference gradient of the scalar function f at x (float64)."""
    x = np.array(x, dtype=np.float64, copy=True)
    grad = np.zeros_like(x)
    flat, gflat = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.size):
        old = flat[k]
        flat[k] = old + eps
        fp = float(f(x))
        flat[k] = old - eps
        fm = float(f(x))
        flat[k] = old
        gflat[k] = (fp - fm) / (2.0 * eps)
    return grad
