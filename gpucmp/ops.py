"""Functional ops on NumPy arrays: thin, checked wrappers over the C core.

What it provides: one function per op of the core (gemm/matmul, conv2d and its two
backward passes, max/avg pooling and their backward passes, activations, the fused
losses, bias_grad, dropout, the Adam / SGD / RMSprop updates, accuracy, cast, the
embedding gather and its backward, and the graph ops: add, mul, batch normalization,
zero padding, concat and its column slice), each taking NumPy arrays and returning NumPy arrays, computed by `gpucmp._core.run_op` on
a backend ('cpu', 'cuda:0', ...) in a storage dtype ('float32', 'float16',
'bfloat16').

Why it looks like this:
- Cheap checks happen here, before C, so that a mistake gives a ValueError /
  TypeError naming the argument and the shapes (the core re-checks everything and
  raises with its own message if something slips through).
- Output arrays are allocated here, with shapes from the same Keras rules as the
  core, and POISONED with NaN first: an element a kernel forgets to write shows up.
- Arguments common to every op: `backend=None` (None -> gpucmp._device.get_device())
  and `dtype=None` (None -> the dtype of the first array argument when it is float16
  or bfloat16, else float32; float64 and integer inputs are converted to float32).
- bfloat16 travels to C as uint16 bit patterns (round-to-nearest-even from float32,
  done here in NumPy); bfloat16 results come back as ml_dtypes.bfloat16 arrays when
  ml_dtypes is importable, else widened (exactly) to float32.
- NaN in inputs is not an error: it propagates, as in Keras.
- Empty arrays are rejected (ValueError), except a zero-length reduction in gemm
  (K == 0 gives act(beta*C + bias), as the core documents).
"""
import math
import numbers

import numpy as np

from gpucmp import _core

try:  # optional: a real bfloat16 NumPy dtype
    import ml_dtypes

    _BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    ml_dtypes = None
    _BF16 = None

__all__ = [
    "DTYPES", "ACTIVATIONS", "PADDINGS",
    "gemm", "matmul", "conv2d", "conv2d_output_shape", "conv2d_backward_data",
    "conv2d_backward_filter", "pool2d_output_shape", "max_pool2d", "max_pool2d_backward",
    "avg_pool2d", "avg_pool2d_backward", "activation", "activation_backward",
    "softmax_cross_entropy", "sigmoid_binary_cross_entropy", "cross_entropy_from_probs",
    "regression_loss", "mse", "mae", "bias_grad", "dropout", "dropout_backward",
    "adam_update", "sgd_update", "rmsprop_update", "accuracy", "cast",
    "embedding", "embedding_backward",
    "add", "mul", "batchnorm_forward", "batchnorm_backward", "pad2d", "pad2d_backward",
    "concat", "slice_cols",
    "float32_to_bfloat16_bits", "bfloat16_bits_to_float32",
]

DTYPES = ("float32", "float16", "bfloat16")
ACTIVATIONS = ("linear", "relu", "tanh", "sigmoid", "softmax")
PADDINGS = ("valid", "same")
ACCURACY_KINDS = ("categorical", "sparse", "binary")

_BF16_NAN_BITS = 0x7FC0


# =====================================================================================
# bfloat16 <-> float32 (bit patterns in uint16)
# =====================================================================================

def float32_to_bfloat16_bits(x):
    """float32 values -> bfloat16 bit patterns (uint16), round to nearest even.

    NaN stays a (quiet) NaN, infinities stay infinite, finite values past the bf16
    range round to infinity, as in the C core's gc_f32_to_bf16."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rounding = ((bits >> np.uint32(16)) & np.uint32(1)) + np.uint32(0x7FFF)
    with np.errstate(over="ignore"):
        out = ((bits + rounding) >> np.uint32(16)).astype(np.uint16)
    nan = (bits & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
    if nan.any():
        sign = (bits[nan] >> np.uint32(16)).astype(np.uint16) & np.uint16(0x8000)
        out[nan] = sign | np.uint16(_BF16_NAN_BITS)
    return out


def bfloat16_bits_to_float32(bits):
    """bfloat16 bit patterns (uint16) -> float32 (exact)."""
    b = np.ascontiguousarray(bits, dtype=np.uint16)
    return (b.astype(np.uint32) << np.uint32(16)).view(np.float32)


# =====================================================================================
# argument handling
# =====================================================================================

def _default_backend():
    try:
        from gpucmp import _device
    except ImportError:
        return "cpu"
    return _device.get_device()


def _resolve_backend(backend):
    if backend is None:
        backend = _default_backend()
    if not isinstance(backend, str):
        backend = getattr(backend, "name", backend)
    if not isinstance(backend, str):
        raise TypeError(f"backend: expected a backend name such as 'cpu', got {backend!r}")
    names = list(_core.backends())
    if backend in names:
        return backend
    if backend == "cuda" and "cuda:0" in names:
        return "cuda:0"
    raise ValueError(f"backend: unknown backend {backend!r}; available: {names}")


def _dtype_name(dt):
    """Name of a storage dtype given as a string, a NumPy dtype or a scalar type."""
    if isinstance(dt, str):
        name = dt.lower()
        if name in DTYPES:
            return name
    try:
        d = np.dtype(dt)
    except TypeError:
        d = None
    if d is not None:
        if _BF16 is not None and d == _BF16:
            return "bfloat16"
        if d == np.float32:
            return "float32"
        if d == np.float16:
            return "float16"
    raise ValueError(f"dtype: must be one of {DTYPES}, got {dt!r}")


def _check_kind(a, name):
    if _BF16 is not None and a.dtype == _BF16:
        return
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name}: expected a real numeric array, got dtype {a.dtype} "
                        f"(shape {a.shape})")


def _array(x, name, ndim=None, min_ndim=None, allow_empty=False):
    """x as an ndarray of a real numeric dtype, with rank and emptiness checked."""
    if x is None:
        raise TypeError(f"{name}: expected an array, got None")
    try:
        a = np.asarray(x)
    except (ValueError, TypeError) as e:
        raise TypeError(f"{name}: cannot be converted to an array ({e})") from None
    _check_kind(a, name)
    if ndim is not None and a.ndim != ndim:
        raise ValueError(f"{name}: expected rank {ndim}, got shape {a.shape}")
    if min_ndim is not None and a.ndim < min_ndim:
        raise ValueError(f"{name}: expected rank >= {min_ndim}, got shape {a.shape}")
    if not allow_empty and a.size == 0:
        raise ValueError(f"{name}: empty array of shape {a.shape} is not allowed here")
    return a


def _infer_dtype(dtype, primary):
    if dtype is not None:
        return _dtype_name(dtype)
    if primary.dtype == np.float16:
        return "float16"
    if _BF16 is not None and primary.dtype == _BF16:
        return "bfloat16"
    return "float32"


def _storage(a, dtype):
    """a converted to the C-contiguous storage array of `dtype` (bf16 as uint16)."""
    if dtype == "float32":
        return np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "float16":
        return np.ascontiguousarray(a, dtype=np.float16)
    if _BF16 is not None and a.dtype == _BF16:
        return np.ascontiguousarray(a).view(np.uint16)
    return float32_to_bfloat16_bits(np.asarray(a, dtype=np.float32))


def _poisoned(shape, dtype):
    """A fresh output array full of NaN (so unwritten elements are caught)."""
    if dtype == "bfloat16":
        return np.full(shape, _BF16_NAN_BITS, dtype=np.uint16)
    return np.full(shape, np.nan, dtype=np.float32 if dtype == "float32" else np.float16)


def _result(a, dtype):
    """A storage array as the user sees it (bf16 bits -> bfloat16 or float32)."""
    if a is None or dtype != "bfloat16":
        return a
    if _BF16 is not None:
        return a.view(_BF16)
    return bfloat16_bits_to_float32(a)


def _pair(v, name):
    """An int or a pair of ints -> a tuple of two positive ints."""
    vals = (v, v) if isinstance(v, numbers.Integral) and not isinstance(v, bool) else v
    try:
        vals = tuple(vals)
    except TypeError:
        raise TypeError(f"{name}: expected an int or a pair of ints, got {v!r}") from None
    if len(vals) != 2 or not all(isinstance(t, numbers.Integral) and not isinstance(t, bool)
                                 for t in vals):
        raise TypeError(f"{name}: expected an int or a pair of ints, got {v!r}")
    if min(vals) < 1:
        raise ValueError(f"{name}: must be positive, got {tuple(int(t) for t in vals)}")
    return (int(vals[0]), int(vals[1]))


def _padding(p):
    if not isinstance(p, str) or p.lower() not in PADDINGS:
        raise ValueError(f"padding: must be 'valid' or 'same', got {p!r}")
    return p.lower()


def _activation_name(name, allow_softmax=True, what="activation"):
    if name is None:
        return "linear"
    if not isinstance(name, str) or name.lower() not in ACTIVATIONS:
        raise ValueError(f"{what}: unknown activation {name!r}; expected one of {ACTIVATIONS}")
    name = name.lower()
    if name == "softmax" and not allow_softmax:
        raise ValueError(f"{what}: 'softmax' is not elementwise here; apply "
                         f"gpucmp.ops.activation(..., 'softmax') to the result")
    return name


def _real(v, name, lo=None, hi=None, lo_open=False, hi_open=False):
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name}: expected a real number, got {v!r}")
    v = float(v)
    bad = not math.isfinite(v)
    bad |= lo is not None and (v < lo or (lo_open and v == lo))
    bad |= hi is not None and (v > hi or (hi_open and v == hi))
    if bad:
        rng = f" in {'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}" \
            if lo is not None and hi is not None else ""
        raise ValueError(f"{name}: must be a finite number{rng}, got {v!r}")
    return v


def _int(v, name, lo=None, hi=None):
    if isinstance(v, bool) or not isinstance(v, numbers.Integral):
        raise TypeError(f"{name}: expected an int, got {v!r}")
    v = int(v)
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        want = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name}: must be {want}, got {v}")
    return v


def _impl(impl, vendor):
    """'own' -> 'own'; the vendor library's name ('cublas' for GEMM, 'cudnn' for
    convolution) or 'vendor' -> 'vendor' (the core's baseline implementation)."""
    if impl == "own":
        return "own"
    if impl in (vendor, "vendor"):
        return "vendor"
    raise ValueError(f"impl: expected 'own' or {vendor!r}, got {impl!r}")


_VENDOR_OK = {}


def vendor_available(name, backend=None):
    """Whether the baseline library `name` ('cublas' or 'cudnn') can run on `backend`: a
    GPU backend and the library found at run time (dlopen). Checked once per backend by
    a tiny call; False on the CPU or where the library is missing."""
    if name not in ("cublas", "cudnn"):
        raise ValueError(f"vendor_available: expected 'cublas' or 'cudnn', got {name!r}")
    be = _resolve_backend(backend)
    key = (name, be)
    if key not in _VENDOR_OK:
        x = np.ones((8, 8), np.float32)
        try:
            if name == "cublas":
                gemm(x, x, impl="cublas", backend=be)
            else:
                conv2d(x.reshape(1, 8, 8, 1), np.ones((3, 3, 1, 8), np.float32), impl="cudnn", backend=be)
            _VENDOR_OK[key] = True
        except NotImplementedError:
            _VENDOR_OK[key] = False
    return _VENDOR_OK[key]


def _run(name, backend, inputs, outputs, params):
    _core.run_op(name, backend, tuple(inputs), tuple(outputs), params)


def _out_extent(size, k, stride, dilation, padding):
    if padding == "same":
        return -(-size // stride)
    span = (k - 1) * dilation + 1
    return (size - span) // stride + 1 if size >= span else 0


# =====================================================================================
# gemm
# =====================================================================================

def gemm(a, b, bias=None, c=None, *, trans_a=False, trans_b=False, alpha=1.0, beta=0.0,
         activation="linear", impl="own", backend=None, dtype=None):
    """C = act(alpha * op(A) @ op(B) + beta * C + bias[None, :]), a new array.

    op(A) is `a` (M, K) or, with trans_a, `a.T` of an `a` stored (K, M); likewise
    op(B) is `b` (K, N) or `b.T`. `c` (M, N) is read only when beta != 0 and is never
    modified. `activation` must be elementwise ('linear', 'relu', 'tanh', 'sigmoid').
    Returns an (M, N) array of the call's dtype. impl: 'own' (gpucmp's kernels) or
    'cublas' (cuBLASLt, loaded at run time: the baseline; GPU backends only)."""
    impl = _impl(impl, "cublas")
    a = _array(a, "a", ndim=2, allow_empty=True)
    b = _array(b, "b", ndim=2, allow_empty=True)
    dt = _infer_dtype(dtype, a)
    be = _resolve_backend(backend)
    m, k = (a.shape[1], a.shape[0]) if trans_a else a.shape
    kb, n = (b.shape[1], b.shape[0]) if trans_b else b.shape
    if k != kb:
        raise ValueError(f"gemm: inner dimensions differ: a {a.shape}"
                         f"{' (transposed)' if trans_a else ''} has K={k}, b {b.shape}"
                         f"{' (transposed)' if trans_b else ''} has K={kb}")
    if m == 0 or n == 0:
        raise ValueError(f"gemm: empty result: a {a.shape}, b {b.shape} give ({m}, {n})")
    alpha = _real(alpha, "alpha")
    beta = _real(beta, "beta")
    act = _activation_name(activation, allow_softmax=False, what="gemm activation")
    if bias is not None:
        bias = _array(bias, "bias", ndim=1)
        if bias.shape != (n,):
            raise ValueError(f"bias: shape {bias.shape} does not match N={n} of the "
                             f"product of a {a.shape} and b {b.shape}")
        bias = _storage(bias, dt)
    if c is not None:
        c = _array(c, "c", ndim=2)
        if c.shape != (m, n):
            raise ValueError(f"c: shape {c.shape}, expected ({m}, {n}) for a {a.shape}, "
                             f"b {b.shape}")
    if beta != 0.0:
        if c is None:
            raise ValueError("c: required when beta != 0")
        out = _storage(c, dt).copy()
    else:
        out = _poisoned((m, n), dt)
    params = dict(trans_a=bool(trans_a), trans_b=bool(trans_b), alpha=alpha, beta=beta, act=act, impl=impl)
    _run("gemm", be, (_storage(a, dt), _storage(b, dt), bias), (out,), params)
    return _result(out, dt)


def matmul(a, b, *, bias=None, activation="linear", impl="own", backend=None, dtype=None):
    """act(a @ b + bias) for `a` of shape (..., K) and `b` (K, N): the leading axes of
    `a` are batch axes (a Dense layer). Returns (..., N). impl: as for gemm."""
    a = _array(a, "a", min_ndim=1)
    lead = a.shape[:-1]
    out = gemm(a.reshape(-1, a.shape[-1]), b, bias, activation=activation, impl=impl, backend=backend,
               dtype=_infer_dtype(dtype, a))
    return out.reshape(lead + (out.shape[-1],))


# =====================================================================================
# conv2d (NHWC input, kernel (KH, KW, C, F) as Keras stores it, cross-correlation)
# =====================================================================================

def conv2d_output_shape(input_shape, kernel_shape, strides=(1, 1), padding="valid",
                        dilation_rate=(1, 1)):
    """(N, OH, OW, F) by Keras' rules; ValueError when the kernel does not fit."""
    n, h, w, _ = input_shape
    kh, kw, _, f = kernel_shape
    sh, sw = _pair(strides, "strides")
    dh, dw = _pair(dilation_rate, "dilation_rate")
    padding = _padding(padding)
    oh, ow = _out_extent(h, kh, sh, dh, padding), _out_extent(w, kw, sw, dw, padding)
    if oh < 1 or ow < 1:
        raise ValueError(f"conv2d: kernel {(kh, kw)} with dilation_rate {(dh, dw)} is larger "
                         f"than the input {(h, w)} (input shape {tuple(input_shape)}) under "
                         f"padding 'valid'")
    return (n, oh, ow, f)


def _conv_params(strides, padding, dilation_rate, act="linear"):
    return dict(strides=_pair(strides, "strides"), dilation=_pair(dilation_rate, "dilation_rate"),
                padding=_padding(padding), act=act)


def _check_channels(x_shape, kernel_shape, xname):
    if kernel_shape[2] != x_shape[3]:
        raise ValueError(f"kernel: shape {tuple(kernel_shape)} expects {kernel_shape[2]} input "
                         f"channels but {xname} {tuple(x_shape)} has {x_shape[3]}")


def conv2d(x, kernel, bias=None, *, strides=(1, 1), padding="valid", dilation_rate=(1, 1),
           activation="linear", impl="own", backend=None, dtype=None):
    """y = act(conv2d(x, kernel) + bias), Keras Conv2D forward.

    x (N, H, W, C), kernel (KH, KW, C, F), bias (F,) or None; strides / dilation_rate
    an int or a pair; padding 'valid' or 'same'; activation elementwise; impl 'own' or
    'cudnn' (cuDNN loaded at run time: the baseline; GPU backends only).
    Returns (N, OH, OW, F)."""
    impl = _impl(impl, "cudnn")
    x = _array(x, "x", ndim=4)
    kernel = _array(kernel, "kernel", ndim=4)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    _check_channels(x.shape, kernel.shape, "x")
    act = _activation_name(activation, allow_softmax=False, what="conv2d activation")
    params = _conv_params(strides, padding, dilation_rate, act)
    params["impl"] = impl
    shape = conv2d_output_shape(x.shape, kernel.shape, strides, padding, dilation_rate)
    if bias is not None:
        bias = _array(bias, "bias", ndim=1)
        if bias.shape != (kernel.shape[3],):
            raise ValueError(f"bias: shape {bias.shape} does not match the {kernel.shape[3]} "
                             f"filters of kernel {kernel.shape}")
        bias = _storage(bias, dt)
    y = _poisoned(shape, dt)
    _run("conv2d_fwd", be, (_storage(x, dt), _storage(kernel, dt), bias), (y,), params)
    return _result(y, dt)


def _shape4(shape, name):
    try:
        t = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise TypeError(f"{name}: expected a shape tuple (N, H, W, C), got {shape!r}") from None
    if len(t) != 4 or min(t) < 1:
        raise ValueError(f"{name}: expected 4 positive extents (N, H, W, C), got {shape!r}")
    return t


def conv2d_backward_data(dy, kernel, input_shape, *, strides=(1, 1), padding="valid",
                         dilation_rate=(1, 1), impl="own", backend=None, dtype=None, accumulate_into=None):
    """dx (input_shape) = gradient of sum(dy * conv2d(x, kernel)) with respect to x.

    dy (N, OH, OW, F) must already be multiplied by the activation's derivative.
    accumulate_into: an array of input_shape that the gradient is added to (the op's
    accumulate: dx = accumulate_into + gradient, in one pass where the kernel can)."""
    dy = _array(dy, "dy", ndim=4)
    kernel = _array(kernel, "kernel", ndim=4)
    dt = _infer_dtype(dtype, dy)
    be = _resolve_backend(backend)
    input_shape = _shape4(input_shape, "input_shape")
    _check_channels(input_shape, kernel.shape, "input_shape")
    params = _conv_params(strides, padding, dilation_rate)
    params["impl"] = _impl(impl, "cudnn")
    params.pop("act")
    want = conv2d_output_shape(input_shape, kernel.shape, strides, padding, dilation_rate)
    if dy.shape != want:
        raise ValueError(f"dy: shape {dy.shape}, expected {want} for input_shape "
                         f"{input_shape} and kernel {kernel.shape}")
    if accumulate_into is None:
        dx = _poisoned(input_shape, dt)
    else:
        acc = _array(accumulate_into, "accumulate_into", ndim=4)
        if acc.shape != input_shape:
            raise ValueError(f"accumulate_into: shape {acc.shape}, expected input_shape {input_shape}")
        dx = np.array(_storage(acc, dt), copy=True)
        params["accumulate"] = True
    _run("conv2d_bwd_data", be, (_storage(dy, dt), _storage(kernel, dt)), (dx,), params)
    return _result(dx, dt)


def conv2d_backward_filter(x, dy, kernel_size, *, strides=(1, 1), padding="valid",
                           dilation_rate=(1, 1), with_bias=True, impl="own", backend=None, dtype=None):
    """(dw, db): gradients of sum(dy * (conv2d(x, w) + b)) with respect to the kernel
    (KH, KW, C, F) and, when with_bias, the bias (F,) (else db is None)."""
    x = _array(x, "x", ndim=4)
    dy = _array(dy, "dy", ndim=4)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    kh, kw = _pair(kernel_size, "kernel_size")
    params = _conv_params(strides, padding, dilation_rate)
    params["impl"] = _impl(impl, "cudnn")
    params.pop("act")
    kshape = (kh, kw, x.shape[3], dy.shape[3])
    want = conv2d_output_shape(x.shape, kshape, strides, padding, dilation_rate)
    if dy.shape != want:
        raise ValueError(f"dy: shape {dy.shape}, expected {want} for x {x.shape} and "
                         f"kernel_size {(kh, kw)}")
    dw = _poisoned(kshape, dt)
    db = _poisoned((kshape[3],), dt) if with_bias else None
    _run("conv2d_bwd_filter", be, (_storage(x, dt), _storage(dy, dt)), (dw, db), params)
    return _result(dw, dt), _result(db, dt)


# =====================================================================================
# pooling (NHWC)
# =====================================================================================

def _pool_params(pool_size, strides, padding, pads=None):
    ph, pw = _pair(pool_size, "pool_size")
    sh, sw = _pair(strides, "strides") if strides is not None else (ph, pw)
    out = dict(pool_size=(ph, pw), strides=(sh, sw), padding=_padding(padding))
    if pads is not None:
        (t, b), (l, r) = _pads4(pads)
        if out["padding"] != "valid":
            raise ValueError(f"pads: explicit pads {pads} need padding='valid', got {padding!r}")
        if not (0 <= t < ph and 0 <= b < ph and 0 <= l < pw and 0 <= r < pw):
            raise ValueError(f"pads: {pads} must be >= 0 and smaller than pool_size {(ph, pw)} on each axis")
        out.update(pads_h=(t, b), pads_w=(l, r))
    return out


def _pads4(pads):
    """((top, bottom), (left, right)) from that form or an int."""
    if isinstance(pads, numbers.Integral) and not isinstance(pads, bool):
        return (int(pads), int(pads)), (int(pads), int(pads))
    try:
        (t, b), (l, r) = pads
        return (_int(t, "pads", None), _int(b, "pads", None)), (_int(l, "pads", None), _int(r, "pads", None))
    except (TypeError, ValueError) as e:
        raise ValueError(f"pads: expected an int or ((top, bottom), (left, right)), got {pads!r}") from e


def pool2d_output_shape(input_shape, pool_size=(2, 2), strides=None, padding="valid", pads=None):
    """(N, OH, OW, C) by Keras' rules (strides default to pool_size); explicit pads widen
    the extent the windows run over."""
    p = _pool_params(pool_size, strides, padding, pads)
    n, h, w, c = input_shape
    h += sum(p.get("pads_h", (0, 0)))
    w += sum(p.get("pads_w", (0, 0)))
    oh = _out_extent(h, p["pool_size"][0], p["strides"][0], 1, p["padding"])
    ow = _out_extent(w, p["pool_size"][1], p["strides"][1], 1, p["padding"])
    if oh < 1 or ow < 1:
        raise ValueError(f"pool: pool_size {p['pool_size']} is larger than the input "
                         f"{(h, w)} (input shape {tuple(input_shape)}) under padding 'valid'")
    return (n, oh, ow, c)


def max_pool2d(x, pool_size=(2, 2), strides=None, padding="valid", *, pads=None, backend=None,
               dtype=None):
    """MaxPooling2D forward; padded cells never win. x (N, H, W, C). pads: explicit
    ((top, bottom), (left, right)) with padding 'valid' (each smaller than the pool): over
    x >= 0, ZeroPadding2D + MaxPooling2D without the padded copy."""
    x = _array(x, "x", ndim=4)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    params = _pool_params(pool_size, strides, padding, pads)
    y = _poisoned(pool2d_output_shape(x.shape, pool_size, strides, padding, pads), dt)
    _run("maxpool2d_fwd", be, (_storage(x, dt),), (y,), params)
    return _result(y, dt)


def max_pool2d_backward(x, dy, pool_size=(2, 2), strides=None, padding="valid", *, pads=None,
                        activation="linear", backend=None, dtype=None):
    """dx: each dy goes to the first maximum (row-major) of its window of x.
    activation='relu': x is a ReLU's output and dx comes out times relu'(x) (the ReLU's
    backward folded in: dy passes only where the window's max is > 0)."""
    x = _array(x, "x", ndim=4)
    dy = _array(dy, "dy", ndim=4)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    params = _pool_params(pool_size, strides, padding, pads)
    if activation not in ("linear", "relu"):
        raise ValueError(f"activation: expected 'linear' or 'relu', got {activation!r}")
    params["act"] = activation
    want = pool2d_output_shape(x.shape, pool_size, strides, padding, pads)
    if dy.shape != want:
        raise ValueError(f"dy: shape {dy.shape}, expected {want} for x {x.shape}")
    dx = _poisoned(x.shape, dt)
    _run("maxpool2d_bwd", be, (_storage(x, dt), _storage(dy, dt)), (dx,), params)
    return _result(dx, dt)


def avg_pool2d(x, pool_size=(2, 2), strides=None, padding="valid", *, backend=None,
               dtype=None):
    """AveragePooling2D forward; padded cells are not counted."""
    x = _array(x, "x", ndim=4)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    params = _pool_params(pool_size, strides, padding)
    y = _poisoned(pool2d_output_shape(x.shape, pool_size, strides, padding), dt)
    _run("avgpool2d_fwd", be, (_storage(x, dt),), (y,), params)
    return _result(y, dt)


def avg_pool2d_backward(dy, input_shape, pool_size=(2, 2), strides=None, padding="valid", *,
                        backend=None, dtype=None):
    """dx (input_shape): each dy spread evenly over the in-bounds cells of its window."""
    dy = _array(dy, "dy", ndim=4)
    dt = _infer_dtype(dtype, dy)
    be = _resolve_backend(backend)
    input_shape = _shape4(input_shape, "input_shape")
    params = _pool_params(pool_size, strides, padding)
    want = pool2d_output_shape(input_shape, pool_size, strides, padding)
    if dy.shape != want:
        raise ValueError(f"dy: shape {dy.shape}, expected {want} for input_shape {input_shape}")
    dx = _poisoned(input_shape, dt)
    _run("avgpool2d_bwd", be, (_storage(dy, dt),), (dx,), params)
    return _result(dx, dt)


# =====================================================================================
# activations
# =====================================================================================

def activation(x, name="linear", *, backend=None, dtype=None):
    """Elementwise activation ('linear', 'relu', 'tanh', 'sigmoid') or 'softmax' over
    the last axis. Returns an array of x's shape."""
    x = _array(x, "x", min_ndim=1)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    act = _activation_name(name)
    x2 = _storage(x, dt).reshape(-1, x.shape[-1])
    y = _poisoned(x2.shape, dt)
    _run("act_fwd", be, (x2,), (y,), dict(act=act))
    return _result(y.reshape(x.shape), dt)


def activation_backward(y, dy, name="linear", *, backend=None, dtype=None):
    """dx = dy * act'(x), computed from the forward OUTPUT y (y = activation(x))."""
    y = _array(y, "y", min_ndim=1)
    dy = _array(dy, "dy", min_ndim=1)
    if dy.shape != y.shape:
        raise ValueError(f"dy: shape {dy.shape} does not match y {y.shape}")
    dt = _infer_dtype(dtype, y)
    be = _resolve_backend(backend)
    act = _activation_name(name)
    cols = y.shape[-1]
    dx = _poisoned((y.size // cols, cols), dt)
    _run("act_bwd", be, (_storage(y, dt).reshape(-1, cols), _storage(dy, dt).reshape(-1, cols)),
         (dx,), dict(act=act))
    return _result(dx.reshape(y.shape), dt)


# =====================================================================================
# losses: per-row loss and the gradient of grad_scale * sum(loss)
# =====================================================================================

def _labels(labels, x_shape, allow_sparse, dt, xname, yname="labels"):
    """Dense labels (x's shape, call dtype) or sparse int32 class indices (rows,)."""
    y = _array(labels, yname, allow_empty=True)
    lead, cols = tuple(x_shape[:-1]), x_shape[-1]
    rows = int(np.prod(lead))
    sparse_shapes = (lead, lead + (1,)) if cols != 1 else (lead,)
    if allow_sparse and y.shape in sparse_shapes and y.shape != tuple(x_shape):
        flat = y.reshape(-1)
        if _BF16 is not None and flat.dtype == _BF16:
            flat = flat.astype(np.float32)
        if flat.dtype.kind in "f":
            bad = ~np.isfinite(flat) | (flat != np.round(flat))
            if bad.any():
                r = int(np.flatnonzero(bad)[0])
                raise ValueError(f"{yname}: sparse labels must be integers; row {r} holds "
                                 f"{float(flat[r])} (labels shape {y.shape})")
        idx = flat.astype(np.int64)
        bad = (idx < 0) | (idx >= cols)
        if bad.any():
            r = int(np.flatnonzero(bad)[0])
            raise ValueError(f"{yname}: label {int(idx[r])} in row {r} is out of range "
                             f"[0, {cols}) for {xname} of shape {tuple(x_shape)}")
        return np.ascontiguousarray(idx, dtype=np.int32).reshape(rows)
    if y.shape != tuple(x_shape):
        hint = f" or {lead} (sparse class indices)" if allow_sparse else ""
        raise ValueError(f"{yname}: shape {y.shape} does not match {xname} "
                         f"{tuple(x_shape)}; expected {tuple(x_shape)}{hint}")
    return _storage(y, dt).reshape(rows, cols)


def _loss(op, x, labels, xname, allow_sparse, params, return_grad, backend, dtype,
          yname="labels"):
    x = _array(x, xname, min_ndim=2)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    cols = x.shape[-1]
    y = _labels(labels, x.shape, allow_sparse, dt, xname, yname)
    params["grad_scale"] = _real(params.get("grad_scale", 1.0), "grad_scale")
    loss = _poisoned((x.size // cols,), dt)
    grad = _poisoned((x.size // cols, cols), dt) if return_grad else None
    _run(op, be, (_storage(x, dt).reshape(-1, cols), y), (loss, grad), params)
    loss = _result(loss.reshape(x.shape[:-1]), dt)
    return loss, (_result(grad.reshape(x.shape), dt) if return_grad else None)


def softmax_cross_entropy(logits, labels, *, grad_scale=1.0, return_grad=True, backend=None,
                          dtype=None):
    """Fused softmax + categorical cross-entropy from logits (log-softmax, no clipping).

    logits (..., classes); labels of the same shape (one-hot or a distribution) or
    integer class indices of shape (...) / (..., 1) (sparse). Returns (loss, grad):
    the per-row loss (...) and, if return_grad, d(grad_scale * sum(loss))/d logits
    (= grad_scale * (softmax(logits) - labels) for labels that sum to one)."""
    return _loss("softmax_xent", logits, labels, "logits", True, dict(grad_scale=grad_scale),
                 return_grad, backend, dtype)


def sigmoid_binary_cross_entropy(logits, labels, *, grad_scale=1.0, return_grad=True,
                                 backend=None, dtype=None):
    """Fused sigmoid + binary cross-entropy from logits, mean over the last axis.
    labels: same shape as logits, values in [0, 1]. Returns (loss, grad)."""
    return _loss("sigmoid_bce", logits, labels, "logits", False, dict(grad_scale=grad_scale),
                 return_grad, backend, dtype)


def cross_entropy_from_probs(probs, labels, *, binary=False, grad_scale=1.0,
                             return_grad=True, backend=None, dtype=None):
    """Keras' clipped cross-entropy on probabilities (epsilon 1e-7).

    categorical (binary=False): probs normalised by their row sum, clipped to
    [eps, 1-eps], loss = -sum(labels * log p); dense or sparse labels.
    binary: probs clipped, loss = mean over the last axis of
    -(y log p + (1-y) log(1-p)); dense labels. Returns (loss, grad)."""
    return _loss("xent_probs", probs, labels, "probs", not binary,
                 dict(grad_scale=grad_scale, binary=bool(binary)), return_grad, backend, dtype)


def regression_loss(pred, target, kind="mse", *, grad_scale=1.0, return_grad=True,
                    backend=None, dtype=None):
    """kind 'mse': mean((pred-target)^2), 'mae': mean(|pred-target|), over the last
    axis. Returns (loss, grad)."""
    if kind not in ("mse", "mae"):
        raise ValueError(f"kind: must be 'mse' or 'mae', got {kind!r}")
    pred = _array(pred, "pred", min_ndim=1)
    if pred.ndim == 1:  # a vector of predictions: one column per row
        pred = pred.reshape(-1, 1)
        target = _array(target, "target", allow_empty=True)
        if target.shape == (pred.shape[0],):
            target = target.reshape(-1, 1)
        loss, grad = _loss("regression_loss", pred, target, "pred", False,
                           dict(grad_scale=grad_scale, kind=kind), return_grad, backend, dtype,
                           "target")
        return loss, (grad.reshape(-1) if grad is not None else None)
    return _loss("regression_loss", pred, target, "pred", False,
                 dict(grad_scale=grad_scale, kind=kind), return_grad, backend, dtype, "target")


def mse(pred, target, **kwargs):
    """regression_loss(pred, target, 'mse', ...)."""
    return regression_loss(pred, target, "mse", **kwargs)


def mae(pred, target, **kwargs):
    """regression_loss(pred, target, 'mae', ...)."""
    return regression_loss(pred, target, "mae", **kwargs)


# =====================================================================================
# bias gradient
# =====================================================================================

def bias_grad(dy, *, backend=None, dtype=None):
    """db = sum of dy over every axis but the last; dy (..., F) -> (F,)."""
    dy = _array(dy, "dy", min_ndim=1)
    dt = _infer_dtype(dtype, dy)
    be = _resolve_backend(backend)
    cols = dy.shape[-1]
    db = _poisoned((cols,), dt)
    _run("bias_grad", be, (_storage(dy, dt).reshape(-1, cols),), (db,), {})
    return _result(db, dt)


def reduce_sum(x, *, scale=1.0, accumulate_into=None, backend=None, dtype=None):
    """scale * sum(x) as a float32 (1,) array; with ``accumulate_into`` (a float32 (1,)
    array) the sum is added to it in place and it is returned. The execution plan keeps
    its loss and metric totals on the device with this op."""
    x = _array(x, "x")
    scale = _real(scale, "scale")
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    if accumulate_into is None:
        y = _poisoned((1,), "float32")
    else:
        y = accumulate_into
        if not (isinstance(y, np.ndarray) and y.dtype == np.float32 and y.shape == (1,)
                and y.flags.c_contiguous and y.flags.writeable):
            raise TypeError("reduce_sum: accumulate_into must be a writable float32 array of shape (1,)")
    _run("reduce_sum", be, (_storage(x, dt).reshape(-1),), (y,),
         dict(scale=scale, accumulate=accumulate_into is not None))
    return y


# =====================================================================================
# dropout (counter-based mask: the same on every backend, regenerated by backward)
# =====================================================================================

def _dropout(op, x, rate, seed, name, backend, dtype):
    x = _array(x, name)
    rate = _real(rate, "rate", 0.0, 1.0, hi_open=True)
    seed = _int(seed, "seed", 0, (1 << 64) - 1)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    y = _poisoned((x.size,), dt)
    _run(op, be, (_storage(x, dt).reshape(-1),), (y,), dict(rate=rate, seed=seed))
    return _result(y.reshape(x.shape), dt)


def dropout(x, rate, seed, *, backend=None, dtype=None):
    """Training-mode dropout: element i (flat, row-major) is kept iff
    gc_uniform01(seed, i) >= rate, kept elements are scaled by 1/(1-rate).
    rate in [0, 1); seed an int in [0, 2**64)."""
    return _dropout("dropout_fwd", x, rate, seed, "x", backend, dtype)


def dropout_backward(dy, rate, seed, *, backend=None, dtype=None):
    """dx = the same mask and scale applied to dy (the mask is regenerated from seed)."""
    return _dropout("dropout_bwd", dy, rate, seed, "dy", backend, dtype)


# =====================================================================================
# optimizers (in place on the weights and the state)
# =====================================================================================

def _state_dtype(arrays, names, dtype):
    """The storage dtype shared by the in-place arrays, which must be writable,
    C-contiguous ndarrays of float32 / float16 / bfloat16 (ml_dtypes, or uint16
    holding bf16 bits when dtype='bfloat16' is given)."""
    want = _dtype_name(dtype) if dtype is not None else None
    found = None
    for a, nm in zip(arrays, names):
        if not isinstance(a, np.ndarray):
            raise TypeError(f"{nm}: must be a NumPy array (it is updated in place), "
                            f"got {type(a).__name__}")
        if a.dtype == np.uint16 and want == "bfloat16":
            d = "bfloat16"
        elif a.dtype == np.float32:
            d = "float32"
        elif a.dtype == np.float16:
            d = "float16"
        elif _BF16 is not None and a.dtype == _BF16:
            d = "bfloat16"
        else:
            raise TypeError(f"{nm}: is updated in place, so it must be float32, float16 or "
                            f"bfloat16; got dtype {a.dtype} (shape {a.shape})")
        if found is not None and d != found[0]:
            raise TypeError(f"{nm}: dtype {a.dtype} differs from {found[1]}'s; the weights "
                            f"and the optimizer state must share one dtype")
        found = found or (d, nm)
        if want is not None and d != want:
            raise TypeError(f"{nm}: dtype {a.dtype} does not match dtype={dtype!r}")
        if not a.flags.c_contiguous or not a.flags.writeable:
            raise ValueError(f"{nm}: must be a writable C-contiguous array (it is updated "
                             f"in place); got shape {a.shape}")
        if a.size == 0:
            raise ValueError(f"{nm}: empty array of shape {a.shape} is not allowed here")
        if a.shape != arrays[0].shape:
            raise ValueError(f"{nm}: shape {a.shape} does not match {names[0]} "
                             f"{arrays[0].shape}")
    return found[0]


def _flat_view(a):
    v = a.reshape(-1)
    return v.view(np.uint16) if _BF16 is not None and v.dtype == _BF16 else v


def _grad_for(g, w, dt):
    g = _array(g, "g")
    if g.shape != w.shape:
        raise ValueError(f"g: shape {g.shape} does not match w {w.shape}")
    return _storage(g, dt).reshape(-1)


def adam_update(w, g, m, v, *, t, lr=0.001, beta_1=0.9, beta_2=0.999, epsilon=1e-7,
                skip=None, backend=None, dtype=None):
    """One Keras Adam step, IN PLACE on w, m and v; t = iterations + 1 (>= 1).

    alpha = lr*sqrt(1-beta_2^t)/(1-beta_1^t); m += (g-m)(1-beta_1);
    v += (g^2-v)(1-beta_2); w -= alpha*m/(sqrt(v)+epsilon). Returns (w, m, v).
    ``skip``: see :func:`skip_flag`."""
    dt = _state_dtype((w, m, v), ("w", "m", "v"), dtype)
    be = _resolve_backend(backend)
    params = dict(lr=_real(lr, "lr"), beta_1=_real(beta_1, "beta_1", 0.0, 1.0, hi_open=True),
                  beta_2=_real(beta_2, "beta_2", 0.0, 1.0, hi_open=True),
                  epsilon=_real(epsilon, "epsilon", 0.0, math.inf), t=_int(t, "t", 1),
                  skip=_skip(skip, be))
    _run("adam", be, (_grad_for(g, w, dt),), (_flat_view(w), _flat_view(m), _flat_view(v)),
         params)
    return w, m, v


def sgd_update(w, g, m=None, *, lr=0.01, momentum=0.0, nesterov=False, skip=None, backend=None,
               dtype=None):
    """One Keras SGD step, IN PLACE on w (and m). momentum 0: w -= lr*g; else
    m = momentum*m - lr*g and w += m (nesterov: w += momentum*m - lr*g).
    m is required when momentum != 0. Returns (w, m)."""
    momentum = _real(momentum, "momentum", 0.0, 1.0)
    if momentum != 0.0 and m is None:
        raise ValueError("m: the momentum buffer is required when momentum != 0")
    arrays, names = ((w,), ("w",)) if m is None else ((w, m), ("w", "m"))
    dt = _state_dtype(arrays, names, dtype)
    be = _resolve_backend(backend)
    params = dict(lr=_real(lr, "lr"), momentum=momentum, nesterov=bool(nesterov), skip=_skip(skip, be))
    _run("sgd", be, (_grad_for(g, w, dt),),
         (_flat_view(w), None if m is None else _flat_view(m)), params)
    return w, m


def rmsprop_update(w, g, v, *, lr=0.001, rho=0.9, epsilon=1e-7, skip=None, backend=None, dtype=None):
    """One Keras RMSprop step, IN PLACE on w and v: v = rho*v + (1-rho)*g^2;
    w -= lr*g/sqrt(v + epsilon). Returns (w, v)."""
    dt = _state_dtype((w, v), ("w", "v"), dtype)
    be = _resolve_backend(backend)
    params = dict(lr=_real(lr, "lr"), rho=_real(rho, "rho", 0.0, 1.0, hi_open=True),
                  epsilon=_real(epsilon, "epsilon", 0.0, math.inf), skip=_skip(skip, be))
    _run("rmsprop", be, (_grad_for(g, w, dt),), (_flat_view(w), _flat_view(v)), params)
    return w, v


def skip_flag(value, backend=None):
    """A one-value flag in backend memory for the optimizers' ``skip``: when it holds a
    non-zero value as the update runs, the update leaves w and its state unchanged (the
    skipped step of dynamic loss scaling, decided on the device). The plan passes its
    non-finite-gradient count; tests pass a flag made here."""
    buf = _core.Buffer(_resolve_backend(backend), 1)
    buf.write(np.array([value], np.float32))
    return buf


def _skip(skip, be):
    if skip is None:
        return None
    if not isinstance(skip, _core.Buffer):
        raise TypeError(f"skip: expected a flag from gpucmp.ops.skip_flag(), got {type(skip).__name__}")
    if skip.backend != be:
        raise ValueError(f"skip: the flag is on backend {skip.backend!r}, the update runs on {be!r}")
    return skip


# =====================================================================================
# dynamic loss scaling: scale_cast, loss_scale_update
# =====================================================================================

def scale_cast(x, dtype, *, scale=1.0, count_into=None, backend=None):
    """x * scale converted to the storage dtype ``dtype`` (float32 product, one rounding to
    the target). With ``count_into`` (a writable float32 (1,) array) the number of
    non-finite results is ADDED to it in place: the gradient check of dynamic loss
    scaling (the plan reads the scale from device memory instead of ``scale``)."""
    x = _array(x, "x")
    dst = _dtype_name(dtype)
    src = _infer_dtype(None, x)
    scale = _real(scale, "scale")
    be = _resolve_backend(backend)
    if count_into is not None and not (isinstance(count_into, np.ndarray) and count_into.dtype == np.float32
                                       and count_into.shape == (1,) and count_into.flags.c_contiguous
                                       and count_into.flags.writeable):
        raise TypeError("scale_cast: count_into must be a writable float32 array of shape (1,)")
    y = _poisoned(x.shape, dst)
    _run("scale_cast", be, (_storage(x, src).reshape(-1),), (y.reshape(-1), count_into), dict(scale=scale))
    return _result(y, dst)


def loss_scale_update(bad, state, dyn=None, *, growth_steps=2000, backend=None):
    """Keras' LossScaleOptimizer bookkeeping after one step, IN PLACE on float32 arrays:
    ``bad`` (1,) non-finite gradient count, ``state`` (2,) {scale, good_steps}, optional
    ``dyn`` (2,) {lr, t}. bad == 0: good_steps + 1 (scale doubled and good_steps 0 once
    growth_steps good steps are reached), t + 1; else scale halved, good_steps 0. bad is
    reset to 0. Returns (bad, state, dyn)."""
    for name, a, n in (("bad", bad, 1), ("state", state, 2), ("dyn", dyn, 2)):
        if a is None and name == "dyn":
            continue
        if not (isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (n,)
                and a.flags.c_contiguous and a.flags.writeable):
            raise TypeError(f"loss_scale_update: {name} must be a writable float32 array of shape ({n},)")
    growth_steps = _int(growth_steps, "growth_steps", 1, (1 << 31) - 1)
    _run("loss_scale_update", _resolve_backend(backend), (), (bad, state, dyn), dict(growth_steps=growth_steps))
    return bad, state, dyn


# =====================================================================================
# accuracy
# =====================================================================================

def accuracy(pred, labels, kind=None, *, threshold=0.5, backend=None, dtype=None):
    """Number of correct rows (a float; divide by the rows for the mean).

    kind None resolves like Keras' "accuracy": pred's last axis of 1 -> 'binary';
    labels of lower rank than pred (or a last axis of 1) -> 'sparse'; else
    'categorical'. categorical: argmax(pred) == argmax(labels); sparse:
    argmax(pred) == label; binary: rows * mean of (pred > threshold) == (labels > 0.5)."""
    pred = _array(pred, "pred", min_ndim=1)
    if pred.ndim == 1:
        pred = pred.reshape(-1, 1)
    y = _array(labels, "labels", allow_empty=True)
    if kind is None:
        if pred.shape[-1] == 1:
            kind = "binary"
        elif y.ndim < pred.ndim or y.shape[-1] == 1:
            kind = "sparse"
        else:
            kind = "categorical"
    if kind not in ACCURACY_KINDS:
        raise ValueError(f"kind: must be one of {ACCURACY_KINDS} or None, got {kind!r}")
    if kind == "binary" and y.shape == pred.shape[:-1] and pred.shape[-1] == 1:
        y = y.reshape(pred.shape)
    dt = _infer_dtype(dtype, pred)
    be = _resolve_backend(backend)
    cols = pred.shape[-1]
    if kind == "sparse":
        if y.shape not in (pred.shape[:-1], pred.shape[:-1] + (1,)):
            raise ValueError(f"labels: sparse labels of shape {y.shape} do not match pred "
                             f"{pred.shape}; expected {pred.shape[:-1]}")
        lab = _labels(y, pred.shape, True, dt, "pred")
    else:
        lab = _labels(y, pred.shape, False, dt, "pred")
    count = np.full((1,), np.nan, dtype=np.float32)
    _run("accuracy", be, (_storage(pred, dt).reshape(-1, cols), lab), (count,),
         dict(kind=kind, threshold=_real(threshold, "threshold")))
    return float(count[0])


# =====================================================================================
# cast
# =====================================================================================

def cast(x, dtype, *, backend=None):
    """x converted to the storage dtype 'float32', 'float16' or 'bfloat16' by the core
    (round to nearest even). float16 / bfloat16 inputs are cast from that dtype; any
    other real input is first converted to float32 by NumPy."""
    x = _array(x, "x")
    dst = _dtype_name(dtype)
    src = _infer_dtype(None, x)
    be = _resolve_backend(backend)
    y = _poisoned(x.shape, dst)
    _run("cast", be, (_storage(x, src).reshape(-1),), (y.reshape(-1),), {})
    return _result(y, dst)


# =====================================================================================
# embedding (a gather of table rows by integer index) and its backward
# =====================================================================================

_I32 = np.iinfo(np.int32)


def _indices(indices, bound, bound_text):
    """Integer indices -> a C-contiguous int32 array, every value checked in [0, bound)."""
    if indices is None:
        raise TypeError("indices: expected an array of integers, got None")
    try:
        idx = np.asarray(indices)
    except (ValueError, TypeError) as e:
        raise TypeError(f"indices: cannot be converted to an array ({e})") from None
    if idx.dtype.kind not in "iu":
        raise TypeError(f"indices: must be integers, got dtype {idx.dtype} (shape {idx.shape})")
    if idx.ndim > 5:
        raise ValueError(f"indices: rank at most 5, got shape {idx.shape}")
    if idx.size == 0:
        raise ValueError(f"indices: empty array of shape {idx.shape} is not allowed here")
    flat = idx.reshape(-1)
    bad = (flat < 0) | (flat >= bound)
    if bad.any():
        p = int(np.flatnonzero(bad)[0])
        where = f" (index {tuple(int(v) for v in np.unravel_index(p, idx.shape))})" \
            if idx.ndim > 1 else ""
        raise ValueError(f"indices: value {int(flat[p])} at position {p}{where} is outside "
                         f"[0, {bound}) for {bound_text}")
    return np.ascontiguousarray(idx, dtype=np.int32)


def _table_dtype(table, dtype):
    """Storage dtype of an embedding table: float32 / float16 / bfloat16 / int32."""
    if dtype is not None:
        if isinstance(dtype, str) and dtype.lower() == "int32" or \
                (not isinstance(dtype, str) and np.dtype(dtype) == np.int32):
            return "int32"
        return _dtype_name(dtype)
    if table.dtype.kind in "biu":
        return "int32"
    return _infer_dtype(None, table)


def embedding(table, indices, *, backend=None, dtype=None):
    """Rows of `table` (V, D) picked by integer `indices` of any shape: the result has
    shape indices.shape + (D,) and the table's storage dtype (float32, float16, bfloat16
    or int32: integer tables are gathered as int32), copied exactly (a gather does no
    arithmetic). Every index must lie in [0, V) (ValueError naming the first that does
    not). A scalar index gives one row (D,)."""
    table = _array(table, "table", ndim=2)
    dt = _table_dtype(table, dtype)
    be = _resolve_backend(backend)
    scalar = np.ndim(indices) == 0 and indices is not None
    idx = _indices(np.reshape(indices, (1,)) if scalar else indices, table.shape[0],
                   f"table of shape {table.shape}")
    if dt == "int32":
        if table.dtype.kind == "f" or (_BF16 is not None and table.dtype == _BF16):
            raise TypeError(f"table: dtype='int32' needs an integer table, got {table.dtype}")
        if table.dtype != np.int32 and (table.min() < _I32.min or table.max() > _I32.max):
            raise ValueError(f"table: values outside the int32 range (table shape {table.shape})")
        tab = np.ascontiguousarray(table, dtype=np.int32)
        out = np.full(idx.shape + (table.shape[1],), _I32.min, dtype=np.int32)  # poisoned
    else:
        tab = _storage(table, dt)
        out = _poisoned(idx.shape + (table.shape[1],), dt)
    _run("embedding_fwd", be, (tab, idx), (out,), {})
    out = out if dt == "int32" else _result(out, dt)
    return out.reshape(table.shape[1:]) if scalar else out


def embedding_backward(dy, indices, vocab_size, *, backend=None, dtype=None):
    """Gradient of embedding() with respect to the table: a (vocab_size, D) array of
    zeros plus, for every position p, the row dy[p] added at row indices[p] (repeated
    indices accumulate, in position order: deterministic). dy has shape
    indices.shape + (D,); sums are float32, stored in dy's (or `dtype`'s) float dtype."""
    dy = _array(dy, "dy", min_ndim=2)
    vocab_size = _int(vocab_size, "vocab_size", 1)
    idx = _indices(indices, vocab_size, f"vocab_size {vocab_size}")
    if dy.shape[:-1] != idx.shape:
        raise ValueError(f"dy: shape {dy.shape} does not match indices {idx.shape}; "
                         f"expected {idx.shape + (dy.shape[-1],)}")
    dt = _infer_dtype(dtype, dy)
    be = _resolve_backend(backend)
    dtable = _poisoned((vocab_size, dy.shape[-1]), dt)
    _run("embedding_bwd", be, (_storage(dy, dt), idx), (dtable,), {})
    return _result(dtable, dt)


# =====================================================================================
# graph ops: add, mul, batch normalization, zero padding, concat / slice
# =====================================================================================

def _linear_or_relu(activation, what):
    act = _activation_name(activation, what=what)
    if act not in ("linear", "relu"):
        raise ValueError(f"{what}: expected 'linear' or 'relu', got {activation!r}")
    return act


def _out_array(out, n, dt, what):
    """The caller's output array (written in place, may be the first input) as a flat
    storage view, checked: a writable C-contiguous array of the call's dtype and n elements."""
    _state_dtype((out,), (what,), dt)
    if out.size != n:
        raise ValueError(f"{what}: shape {out.shape} has {out.size} elements, expected {n}")
    return _flat_view(out)


def _elementwise(op, arrays, names, params, out, backend, dtype):
    arrays = [_array(a, nm, allow_empty=True) for a, nm in zip(arrays, names)]
    for a, nm in zip(arrays[1:], names[1:]):
        if a.size != arrays[0].size:
            raise ValueError(f"{nm}: shape {a.shape} has {a.size} elements but {names[0]} "
                             f"{arrays[0].shape} has {arrays[0].size}")
    dt = _infer_dtype(dtype, arrays[0])
    be = _resolve_backend(backend)
    # flat views: a storage array that is `out` itself keeps its memory, so y aliases it
    ins = [_storage(a, dt).reshape(-1) for a in arrays]
    ins += [None] * (_core.op_arity(op)[0] - len(ins))
    if out is None:
        y = _poisoned(arrays[0].shape, dt)
        _run(op, be, ins, (y.reshape(-1),), params)
        return _result(y, dt)
    _run(op, be, ins, (_out_array(out, arrays[0].size, dt, "out"),), params)
    return out


def add(*xs, activation="linear", out=None, backend=None, dtype=None):
    """y = act(x0 + x1 + ...) elementwise over 2 to 8 arrays of one element count (shapes
    may differ, the result has x0's shape), summed in float32 in argument order;
    activation 'linear' or 'relu'. `out`: an array to write y into (IN PLACE; it may be
    x0 itself, as the plan accumulates gradients: add(g, g2, out=g)); returned."""
    if not 2 <= len(xs) <= 8:
        raise ValueError(f"add: expected 2 to 8 arrays, got {len(xs)}")
    act = _linear_or_relu(activation, "add activation")
    return _elementwise("add", xs, [f"x{k}" for k in range(len(xs))], dict(act=act), out,
                        backend, dtype)


def mul(a, b, *, out=None, backend=None, dtype=None):
    """y = a * b elementwise (one element count; y has a's shape). `out` as in add (it
    may be a itself)."""
    return _elementwise("mul", (a, b), ("a", "b"), {}, out, backend, dtype)


def _channel_param(v, name, x_shape):
    if v is None:
        return None
    C = x_shape[-1]
    v = _array(v, name, ndim=1)
    if v.shape != (C,):
        raise ValueError(f"{name}: shape {v.shape}, expected ({C},) (the last axis of x {x_shape})")
    return np.ascontiguousarray(v, dtype=np.float32)


def _moving(a, name, x_shape):
    C = x_shape[-1]
    if not isinstance(a, np.ndarray) or a.dtype != np.float32:
        raise TypeError(f"{name}: must be a float32 NumPy array (it is read and updated in "
                        f"place), got {type(a).__name__ if not isinstance(a, np.ndarray) else a.dtype}")
    if a.shape != (C,) or not a.flags.c_contiguous or not a.flags.writeable:
        raise ValueError(f"{name}: must be a writable C-contiguous float32 array of shape "
                         f"({C},) (the last axis of x {x_shape}), got shape {a.shape}")
    return a


def batchnorm_forward(x, moving_mean, moving_variance, gamma=None, beta=None, residual=None, *,
                      epsilon=1e-3, momentum=0.99, training=True, activation="linear",
                      backend=None, dtype=None):
    """Keras BatchNormalization over the LAST axis (C channels, R = x.size / C rows),
    with a residual add and ReLU folded in: y = act(gamma * (x - mean) * invstd + beta +
    residual). Returns (y, save): y has x's shape and dtype; save (2, C) float32 holds the
    mean and the inverse std used (the backward's input).

    training=True: mean and biased variance of the batch, invstd = 1/sqrt(var + epsilon),
    and moving_mean / moving_variance (float32 (C,) arrays) are updated IN PLACE:
    moving = moving * momentum + batch * (1 - momentum). training=False: the moving
    statistics are used and left unchanged. gamma / beta None: 1 / 0; residual None: 0."""
    x = _array(x, "x", min_ndim=1)
    C = x.shape[-1]
    act = _linear_or_relu(activation, "batchnorm activation")
    mm, mv = _moving(moving_mean, "moving_mean", x.shape), _moving(moving_variance, "moving_variance", x.shape)
    if mm is mv:
        raise ValueError("moving_mean and moving_variance must be different arrays")
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    if residual is not None:
        residual = _array(residual, "residual")
        if residual.shape != x.shape:
            raise ValueError(f"residual: shape {residual.shape} does not match x {x.shape}")
        residual = _storage(residual, dt)
    params = dict(epsilon=_real(epsilon, "epsilon", 0.0, math.inf),
                  momentum=_real(momentum, "momentum", 0.0, 1.0), training=bool(training), act=act)
    y = _poisoned(x.shape, dt)
    save = np.full((2, C), np.nan, np.float32)
    _run("batchnorm_fwd", be, (_storage(x, dt), _channel_param(gamma, "gamma", x.shape),
                               _channel_param(beta, "beta", x.shape), residual), (y, mm, mv, save), params)
    return _result(y, dt), save


def batchnorm_backward(x, dy, save, gamma=None, y=None, *, training=True, activation="linear",
                       return_dx=True, return_dgamma=True, return_dbeta=True,
                       return_dresidual=False, mask_from_x=False, beta=None, backend=None, dtype=None):
    """Gradients of batchnorm_forward: returns (dx, dgamma, dbeta, dresidual), each None
    unless asked for. dz = dy * relu'(y) (dy with activation 'linear'; y, the forward's
    output, is required with 'relu' unless mask_from_x), xhat = (x - mean) * invstd from
    `save`; dgamma = sum(dz * xhat), dbeta = sum(dz) (float32 (C,)), dresidual = dz;
    training: dx = gamma*invstd*(dz - mean(dz) - xhat*mean(dz*xhat)), else
    dx = gamma*invstd*dz. mask_from_x (relu only, no y): the mask y > 0 is recomputed
    from x, gamma, `beta` and save exactly as the forward rounded y -- the same bits as
    passing y, for a forward that had no residual (one read of y fewer per pass)."""
    x = _array(x, "x", min_ndim=1)
    dy = _array(dy, "dy")
    C = x.shape[-1]
    if dy.shape != x.shape:
        raise ValueError(f"dy: shape {dy.shape} does not match x {x.shape}")
    act = _linear_or_relu(activation, "batchnorm activation")
    save = _array(save, "save", ndim=2)
    if save.shape != (2, C):
        raise ValueError(f"save: shape {save.shape}, expected (2, {C}) (the last axis of x {x.shape})")
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    if mask_from_x:
        if act != "relu":
            raise ValueError("mask_from_x: only with activation='relu' (linear has no mask)")
        if y is not None:
            raise ValueError("y: not taken with mask_from_x=True (the mask is recomputed from x)")
    elif beta is not None:
        raise ValueError("beta: read only with mask_from_x=True")
    if act == "relu" and y is None and not mask_from_x:
        raise ValueError("y: the forward output is required with activation='relu' (or mask_from_x=True)")
    if y is not None:
        y = _array(y, "y")
        if y.shape != x.shape:
            raise ValueError(f"y: shape {y.shape} does not match x {x.shape}")
        y = _storage(y, dt)
    outs = (_poisoned(x.shape, dt) if return_dx else None,
            np.full(C, np.nan, np.float32) if return_dgamma else None,
            np.full(C, np.nan, np.float32) if return_dbeta else None,
            _poisoned(x.shape, dt) if return_dresidual else None)
    _run("batchnorm_bwd", be, (_storage(x, dt), _storage(dy, dt), _channel_param(gamma, "gamma", x.shape),
                               np.ascontiguousarray(save, dtype=np.float32), y,
                               _channel_param(beta, "beta", x.shape) if mask_from_x else None), outs,
         dict(training=bool(training), act=act, mask_from_x=bool(mask_from_x)))
    return _result(outs[0], dt), outs[1], outs[2], _result(outs[3], dt)


def _pad4(padding):
    """Keras ZeroPadding2D's padding: an int, (h, w) or ((top, bottom), (left, right))."""
    def one(v, what):
        return _int(v, f"padding ({what})", 0)
    if isinstance(padding, numbers.Integral) and not isinstance(padding, bool):
        p = one(padding, "all sides")
        return p, p, p, p
    try:
        a, b = padding
    except (TypeError, ValueError):
        raise TypeError(f"padding: expected an int, (h, w) or ((top, bottom), (left, right)), "
                        f"got {padding!r}") from None
    if isinstance(a, numbers.Integral) and isinstance(b, numbers.Integral):
        h, w = one(a, "height"), one(b, "width")
        return h, h, w, w
    try:
        (t, bo), (le, r) = a, b
    except (TypeError, ValueError):
        raise TypeError(f"padding: expected an int, (h, w) or ((top, bottom), (left, right)), "
                        f"got {padding!r}") from None
    return one(t, "top"), one(bo, "bottom"), one(le, "left"), one(r, "right")


def pad2d(x, padding=1, *, backend=None, dtype=None):
    """Keras ZeroPadding2D of NHWC x (N, H, W, C): (N, H+top+bottom, W+left+right, C) with
    zeros around. padding: an int, (h, w) (symmetric) or ((top, bottom), (left, right))."""
    x = _array(x, "x", ndim=4)
    t, b, le, r = _pad4(padding)
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    n, h, w, c = x.shape
    y = _poisoned((n, h + t + b, w + le + r, c), dt)
    _run("pad2d_fwd", be, (_storage(x, dt),), (y,), dict(top=t, bottom=b, left=le, right=r))
    return _result(y, dt)


def pad2d_backward(dy, padding=1, *, backend=None, dtype=None):
    """Gradient of pad2d: the crop dy[:, top:H+top, left:W+left, :] of the padded dy."""
    dy = _array(dy, "dy", ndim=4)
    t, b, le, r = _pad4(padding)
    n, ph, pw, c = dy.shape
    if ph - t - b < 0 or pw - le - r < 0:
        raise ValueError(f"dy: shape {dy.shape} is smaller than the padding "
                         f"((top, bottom), (left, right)) = (({t}, {b}), ({le}, {r}))")
    dt = _infer_dtype(dtype, dy)
    be = _resolve_backend(backend)
    dx = _poisoned((n, ph - t - b, pw - le - r, c), dt)
    _run("pad2d_bwd", be, (_storage(dy, dt),), (dx,), dict(top=t, bottom=b, left=le, right=r))
    return _result(dx, dt)


def _axis(axis, ndim, name="axis"):
    axis = _int(axis, name)
    if not -ndim <= axis < ndim:
        raise ValueError(f"{name}: {axis} is out of range for rank {ndim}")
    return axis % ndim


def concat(arrays, axis=-1, *, backend=None, dtype=None):
    """The arrays (1 to 8, one rank, equal shapes but along `axis`) joined along `axis`
    (Keras Concatenate). The core works on 2-D views (outer, w_i * inner)."""
    if isinstance(arrays, np.ndarray) or not isinstance(arrays, (list, tuple)):
        raise TypeError("arrays: expected a list or tuple of arrays")
    if not 1 <= len(arrays) <= 8:
        raise ValueError(f"concat: expected 1 to 8 arrays, got {len(arrays)}")
    xs = [_array(a, f"arrays[{k}]", min_ndim=1, allow_empty=True) for k, a in enumerate(arrays)]
    ax = _axis(axis, xs[0].ndim)
    for k, a in enumerate(xs[1:], 1):
        if a.ndim != xs[0].ndim or a.shape[:ax] + a.shape[ax + 1:] != xs[0].shape[:ax] + xs[0].shape[ax + 1:]:
            raise ValueError(f"arrays[{k}]: shape {a.shape} does not fit arrays[0] {xs[0].shape} "
                             f"(equal shapes but along axis {ax})")
    dt = _infer_dtype(dtype, xs[0])
    be = _resolve_backend(backend)
    outer = int(np.prod(xs[0].shape[:ax], dtype=np.int64))
    shape = list(xs[0].shape)
    shape[ax] = sum(a.shape[ax] for a in xs)
    y = _poisoned(tuple(shape), dt)
    ins = [_storage(a, dt).reshape(outer, int(np.prod(a.shape[ax:], dtype=np.int64))) for a in xs]
    total = int(np.prod(shape[ax:], dtype=np.int64))
    _run("concat", be, ins + [None] * (8 - len(ins)), (y.reshape(outer, total),), {})
    return _result(y, dt)


def slice_cols(x, offset, width, axis=-1, *, backend=None, dtype=None):
    """x[..., offset:offset+width, ...] along `axis` (concat's backward: one input's share
    of the gradient); 0 <= offset and offset + width <= x.shape[axis]."""
    x = _array(x, "x", min_ndim=1)
    ax = _axis(axis, x.ndim)
    offset, width = _int(offset, "offset", 0), _int(width, "width", 0)
    if offset + width > x.shape[ax]:
        raise ValueError(f"slice_cols: [{offset}, {offset + width}) is outside axis {ax} of x "
                         f"{x.shape} (length {x.shape[ax]})")
    dt = _infer_dtype(dtype, x)
    be = _resolve_backend(backend)
    outer = int(np.prod(x.shape[:ax], dtype=np.int64))
    inner = int(np.prod(x.shape[ax + 1:], dtype=np.int64))
    shape = list(x.shape)
    shape[ax] = width
    y = _poisoned(tuple(shape), dt)
    _run("slice_cols", be, (_storage(x, dt).reshape(outer, x.shape[ax] * inner),),
         (y.reshape(outer, width * inner),),
         dict(offset=offset * inner))
    return _result(y, dt)
