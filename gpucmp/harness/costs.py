"""Op costs: FLOPs, bytes and launch shape of every op a workload runs.

What it provides: the `Op` record (one kernel launch of a training step or of a kernel
benchmark: kind, the arithmetic unit it runs on, FLOPs, the fewest bytes it must move,
thread blocks) and one constructor per op family (GEMM, convolution passes, pooling,
elementwise, loss, optimizer update, copy, the recurrence of a recurrent layer).

Why it is built this way: the projection (projection.py) scales each op by the ratio of
two rooflines, so every op must carry what a roofline needs -- FLOPs counted from the op's
shapes (tensor-core work is not visible to FP32 counters), bytes as each operand read
once and each result written once, and the number of output tiles, which decides wave
quantization on a card with a different SM count. `unit` names the peak that bounds the
op: 'fp32' (CUDA cores), 'tf32', 'fp16', 'bf16' (Tensor Cores, fp32 accumulation) or
'memory' (no arithmetic worth counting). The recurrence (`recurrent`: rnn_fwd / rnn_bwd)
is a loop of T dependent steps, latency- rather than throughput-bound, so it carries
what the per-step model (recurrent.py) needs instead: steps, the FLOPs of one step,
the CTAs its FLOPs spread over, and the kernel launches of the variant that runs it.
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


RNN_GATES = {"simple": 1, "lstm": 4, "gru": 3, "gru_reset_before": 3}
RNN_SAVE_BLOCKS = {"simple": 2, "lstm": 7, "gru": 5, "gru_reset_before": 5}
RNN_VARIANTS = ("stepwise", "persistent", "resident")
# gate math per (row, unit) of one step, besides the recurrent product (a rough count)
RNN_GATE_FLOPS = {"fwd": {"simple": 2, "lstm": 14, "gru": 14, "gru_reset_before": 14},
                  "bwd": {"simple": 3, "lstm": 24, "gru": 20, "gru_reset_before": 20}}
RNN_TILE = 16         # the stepwise recurrent matmul's output tile (csrc/cuda/rnn.cu)
RNN_MAX_CTAS_PER_GROUP = 16   # the persistent kernel's CTAs per group of batch rows, at most


def rnn_resident_eligible(cell, units, which, rmask=False):
    """Whether cuda.rnn=resident (csrc/cuda/rnn_resident*: one CTA per batch row holding
    all of U in registers) takes a call -- the Python twin of its rres_plan: no recurrent
    dropout, and U in one block's registers (K = u forward, G*u backward, split over
    power-of-two slices of at most 64 floats per lane, u x lanes per unit <= 256 with one
    lane per gate in the gated cells' forward): SimpleRNN u <= 128, LSTM / GRU u <= 64."""
    if rmask:
        return False
    g, u = RNN_GATES[cell], int(units)
    gp = 1 if which == "bwd" or g == 1 else 4
    k = g * u if which == "bwd" else u
    ks = 1
    while gp * ks <= 32 and u * gp * ks <= 256:
        if -(-k // ks) <= 64:
            return True
        ks *= 2
    return False


def rnn_launches_per_step(cell, variant, rmask=False):
    """Kernel launches one time step of the CUDA recurrence makes: stepwise, the recurrent
    matmul and the fused gate kernel (GRU reset_before adds its reset kernel and a second
    matmul; recurrent dropout one matmul per gate block and a mask kernel); persistent,
    and resident none (their one launch covers every step)."""
    if variant in ("persistent", "resident"):
        return 0
    if not rmask:
        return 4 if cell == "gru_reset_before" else 2
    return {"simple": 3, "lstm": 6, "gru": 5, "gru_reset_before": 6}[cell]


def rnn_launches(cell, steps, variant, rmask=False):
    """Kernel launches of one rnn_fwd / rnn_bwd call: stepwise, steps x the per-step ones
    plus its init and final-state kernels; persistent and resident, one."""
    if variant in ("persistent", "resident"):
        return 1
    return steps * rnn_launches_per_step(cell, variant, rmask) + 2


def rnn_exchanges_per_step(cell):
    """Synchronisations per step: among the persistent kernel's CTAs, or the resident
    kernel's block barriers (GRU reset_before exchanges r*h as well as h, d(r*h) as well
    as dh)."""
    return 2 if cell == "gru_reset_before" else 1


def recurrent(name, which, cell, batch, steps, units, dtype="float32", variant="stepwise", nbytes=None,
              rmask=False, phase=None, variant_source="given"):
    """The recurrence of a recurrent layer: which 'fwd' (rnn_fwd: h_t from xw_t and h_{t-1}.U,
    the gates, the saved activations) or 'bwd' (rnn_bwd: BPTT, dz_t.U^T per step), `steps`
    dependent steps of a (batch x units) state. FLOPs count the recurrent product (2 B u G u
    per step, fp32 FFMA whatever the storage dtype) and the gate math; bytes default to
    the op's operands read or written once; blocks are the CTAs the step's FLOPs spread
    over (stepwise: the recurrent matmul's 16 x 16 output tiles; persistent: up to 16 per
    batch row; resident: one per batch row); launches follow the variant (rnn_launches). variant_source says where the
    variant came from: 'given' (the op's description), 'build' (the auto choice of the
    running build), 'assumed' (neither: the projection takes the calibration's)."""
    if cell not in RNN_GATES:
        raise ValueError(f"recurrent: unknown cell {cell!r}; expected one of {', '.join(RNN_GATES)}")
    if which not in ("fwd", "bwd"):
        raise ValueError(f"recurrent: which must be 'fwd' or 'bwd', got {which!r}")
    if variant not in RNN_VARIANTS:
        raise ValueError(f"recurrent: unknown variant {variant!r}; expected one of {', '.join(RNN_VARIANTS)}")
    for what, v in (("batch", batch), ("steps", steps), ("units", units)):
        if int(v) < 1:
            raise ValueError(f"recurrent: {what} must be >= 1, got {v}")
    b, t, u = int(batch), int(steps), int(units)
    g = RNN_GATES[cell]
    step_flops = 2.0 * b * u * g * u + RNN_GATE_FLOPS[which][cell] * b * u
    s = DTYPE_BYTES[dtype]
    if nbytes is None:
        io = b * t * g * u + RNN_SAVE_BLOCKS[cell] * b * t * u + u * g * u + b * u
        nbytes = float(s * io)
    if variant == "persistent":
        blocks = b * RNN_MAX_CTAS_PER_GROUP
    elif variant == "resident":
        blocks = b
    else:
        n = g * u if which == "fwd" else u
        blocks = math.ceil(n / RNN_TILE) * math.ceil(b / RNN_TILE)
    key = f"rnn_{which}:{cell}:{b}x{t}x{u}:{dtype}{':rmask' if rmask else ''}"
    return Op(name, f"rnn_{which}", "fp32", step_flops * t, float(nbytes), int(blocks),
              phase or ("forward" if which == "fwd" else "backward"), dtype,
              f"{cell} B={b} T={t} u={u} {variant}", key, rnn_launches(cell, t, variant, rmask),
              extra={"cell": cell, "which": which, "batch": b, "steps": t, "units": u, "step_flops": step_flops,
                     "variant": variant, "variant_source": variant_source, "rmask": bool(rmask)})


def with_variant(op, variant, source):
    """The recurrent op `op` run by `variant` instead (launches and blocks follow it)."""
    e = op.extra
    if e.get("variant") == variant:
        return op
    return recurrent(op.name, e["which"], e["cell"], e["batch"], e["steps"], e["units"], op.dtype, variant,
                     op.bytes, e["rmask"], op.phase, source)
