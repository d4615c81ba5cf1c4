"""Op costs: FLOPs, bytes and launch shape of every op a workload runs.

What it provides: the `Op` record (one kernel launch of a training step or of a kernel
benchmark: kind, the arithmetic unit it runs on, FLOPs, the fewest bytes it must move,
thread blocks) and one constructor per op family (GEMM, convolution passes, pooling,
elementwise, loss, optimizer update, copy).

Why it is built this way: the projection (projection.py) scales each op by the ratio of
two rooflines, so every op must carry what a roofline needs -- FLOPs counted from the op's
shapes (tensor-core work is not visible to FP32 counters), bytes as each operand read
once and each result written once, and the number of output tiles, which decides wave
quantization on a card with a different SM count. `unit` names the peak that bounds the
op: 'fp32' (CUDA cores), 'tf32', 'fp16', 'bf16' (Tensor Cores, fp32 accumulation) or
'memory' (no arithmetic worth counting).
"""
from dataclasses import asdict, dataclass, field
import math

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4}
TENSOR_UNITS = ("tf32", "fp16", "bf16")
UNITS = ("fp32",) + TENSOR_UNITS + ("memory",)
TILE = 128            # output tile edge of the tensor-core GEMM/conv kernels (rows and cols)
ELEMS_PER_BLOCK = 1024  # elements one block of an elementwise kernel covers


@dataclass(frozen=True)
class Op:
    """One launch: what it computes and what it costs."""
    name: str                 # "conv2d_1/bwd_filter", "adam", "gemm"
    kind: str                 # gemm, conv2d_fwd, conv2d_bwd_data, conv2d_bwd_filter, pool, ...
    unit: str                 # which peak bounds it (UNITS)
    flops: float
    bytes: float
    blocks: int = 1           # thread blocks of the launch (wave quantization)
    phase: str = "forward"    # forward, backward, update, data
    dtype: str = "float32"    # storage dtype of its operands
    shape: str = ""           # readable shape, e.g. "M=4096 N=4096 K=4096"
    key: str = ""             # identifies the op for measured per-op times (calibration)
    launches: int = 1         # kernel launches it stands for
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def intensity(self):
        """FLOPs per byte of device memory traffic."""
        return self.flops / self.bytes if self.bytes else math.inf

    def as_dict(self):
        d = asdict(self)
        d.pop("extra")
        d["intensity"] = self.intensity
        return d


def matmul_unit(dtype, tf32):
    """The unit a GEMM or convolution of this storage dtype runs on."""
    if dtype == "float16":
        return "fp16"
    if dtype == "bfloat16":
        return "bf16"
    return "tf32" if tf32 else "fp32"


def _tiles(m, n):
    return max(1, math.ceil(m / TILE) * math.ceil(n / TILE))


def _elem_blocks(n):
    return max(1, math.ceil(n / ELEMS_PER_BLOCK))


def gemm(name, m, n, k, dtype="float32", tf32=True, phase="forward", bias=False, trans_a=False, trans_b=False):
    """C[m,n] = op(A)[m,k] op(B)[k,n] (+ bias, activation in the epilogue)."""
    s = DTYPE_BYTES[dtype]
    t = "".join("T" if f else "N" for f in (trans_a, trans_b))
    return Op(name, "gemm", matmul_unit(dtype, tf32), 2.0 * m * n * k,
              float(s * (m * k + k * n + m * n) + (s * n if bias else 0)), _tiles(m, n), phase, dtype,
              f"M={m} N={n} K={k} {t}", f"gemm:{m}x{n}x{k}:{t}:{dtype}:{'tf32' if tf32 else 'ieee'}",
              extra={"m": m, "n": n, "k": k, "trans_a": trans_a, "trans_b": trans_b})


def conv2d(name, which, n, h, w, c, f, kh, kw, oh, ow, strides=(1, 1), padding="valid",
           dtype="float32", tf32=True, phase=None):
    """One pass of a 2-D convolution (NHWC, kernel KH x KW x C x F): which in
    'fwd' (y = x * w), 'bwd_data' (dx) or 'bwd_filter' (dw). Each pass is the same
    implicit GEMM of 2 N OH OW F KH KW C FLOPs; the output tiles differ."""
    s = DTYPE_BYTES[dtype]
    flops = 2.0 * n * oh * ow * f * kh * kw * c
    x, wt, y = n * h * w * c, kh * kw * c * f, n * oh * ow * f
    tiles = {"fwd": _tiles(n * oh * ow, f), "bwd_data": _tiles(n * h * w, c),
             "bwd_filter": _tiles(kh * kw * c, f) * max(1, min(32, math.ceil(n * oh * ow / (8 * TILE))))}[which]
    key = (f"conv2d_{which}:{n}x{h}x{w}x{c}:{f}:{kh}x{kw}:s{strides[0]}x{strides[1]}:{padding}:"
           f"{dtype}:{'tf32' if tf32 else 'ieee'}")
    return Op(f"{name}/{which}", f"conv2d_{which}", matmul_unit(dtype, tf32), flops,
              float(s * (x + wt + y)), tiles, phase or ("forward" if which == "fwd" else "backward"),
              dtype, f"N={n} {h}x{w}x{c} -> {oh}x{ow}x{f} k{kh}x{kw} s{strides[0]}", key,
              extra={"n": n, "h": h, "w": w, "c": c, "f": f, "kh": kh, "kw": kw, "strides": tuple(strides),
                     "padding": padding, "which": which})


def elementwise(name, kind, n_elems, reads, writes, dtype="float32", flops_per_elem=1.0, phase="forward"):
    """A memory-bound pass over n_elems elements reading `reads` and writing `writes` arrays."""
    s = DTYPE_BYTES[dtype]
    return Op(name, kind, "memory", float(flops_per_elem * n_elems), float(s * n_elems * (reads + writes)),
              _elem_blocks(n_elems), phase, dtype, f"{n_elems} elements")


def pool2d(name, which, n, h, w, c, oh, ow, ph, pw, dtype="float32"):
    """Max/average pooling forward (read x, write y) or backward (read dy (+x, y), write dx)."""
    s = DTYPE_BYTES[dtype]
    x, y = n * h * w * c, n * oh * ow * c
    if which == "fwd":
        return Op(f"{name}/fwd", "pool_fwd", "memory", float(y * ph * pw), float(s * (x + y)),
                  _elem_blocks(y), "forward", dtype, f"N={n} {h}x{w}x{c} -> {oh}x{ow}")
    return Op(f"{name}/bwd", "pool_bwd", "memory", float(y * ph * pw), float(s * (2 * x + 2 * y)),
              _elem_blocks(x), "backward", dtype, f"N={n} {oh}x{ow}x{c} -> {h}x{w}")


def softmax_cross_entropy(name, rows, classes, dtype="float32"):
    """Fused softmax + cross-entropy loss, its gradient and the metric sums."""
    n = rows * classes
    return Op(name, "loss", "memory", float(8 * n), float(4 * n * 3 + 4 * rows * 2), _elem_blocks(n),
              "backward", "float32", f"{rows} rows x {classes}")


def optimizer_update(name, params, kind="adam", grad_dtype="float32"):
    """One fused optimizer step over every trainable float32 weight: Adam reads w, g, m, v
    and writes w, m, v; RMSprop drops m; plain SGD reads w, g and writes w."""
    state = {"adam": 2, "rmsprop": 1, "sgd": 0}.get(kind, 2)
    g = DTYPE_BYTES[grad_dtype]
    nbytes = params * (4 * 2 + g + 8 * state)
    return Op(name, "optimizer", "memory", float(12 * params), float(nbytes), _elem_blocks(params),
              "update", "float32", f"{params} parameters, {kind}")


def copy(name, nbytes, phase="data"):
    """A device copy of nbytes (read once, written once: 2 x nbytes moved)."""
    return Op(name, "copy", "memory", 0.0, float(2 * nbytes), _elem_blocks(nbytes // 4), phase, "float32",
              f"{nbytes} bytes", f"copy:{nbytes}")


def totals(ops):
    """(flops, bytes) summed over ops."""
    return sum(o.flops for o in ops), sum(o.bytes for o in ops)
