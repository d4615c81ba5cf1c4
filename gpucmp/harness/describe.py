"""The describe pass: a compiled model's execution plan as the list of ops one training step runs.

What it provides: `plan_ops(descs, batch, ...)` builds the model's execution plan on the
core's "meta" backend (counted memory, no-op kernels: any batch fits, nothing runs) from
the very node dicts `gpucmp._core.Plan` is built from (lowering.describe), asks it for
the op calls of one training step (`Plan.trace`), and turns each call into a `costs.Op`
from the shapes it was issued with: the batch gather, each node's forward ops (bias and
activation fused in the GEMM / convolution epilogue, BatchNormalization + ReLU + residual
in one op where the plan fused them, a recurrent layer's recurrence as one rnn_fwd /
rnn_bwd op with its cell, steps and variant), the fused loss, each node's backward ops (with the
adds of gradients at fan-out), the casts of a mixed policy and the optimizer update.
`model_ops(model, batch)` does the same for a model object; `meta_plan` gives the plan
itself (memory.py reads its exact allocation from it).

Why it is built this way: the op list must be the one the plan really runs -- the
projection scales each op separately -- so it comes from the plan's own trace rather than
from a second description of the plan kept in Python, and it stays right for graphs,
fusions and buffer reuse as the plan changes.
"""
import math

from . import costs

WEIGHT_KEYS = ("kernel", "bias", "gamma", "beta", "moving_mean", "moving_variance", "embeddings",
               "recurrent_kernel")
TRAINABLE_KEYS = ("kernel", "bias", "gamma", "beta", "embeddings", "recurrent_kernel")
STATE_PER_WEIGHT = {"adam": 2, "rmsprop": 1, "sgd": 0, "sgd_momentum": 1}


def _numel(shape):
    return int(math.prod(shape))


def _buffer_size(v):
    return int(getattr(v, "size", 0) or 0)


def layer_params(descs):
    """(trainable, total) weight elements over the plan's nodes (BN statistics count as
    weights, never as trainable ones)."""
    total = trainable = 0
    for d in descs:
        for k in WEIGHT_KEYS:
            n = _buffer_size(d.get(k))
            total += n
            if k in TRAINABLE_KEYS and d.get("trainable", True):
                trainable += n
    return trainable, total


def trainable_tensors(descs):
    return sum(1 for d in descs if d.get("trainable", True) for k in TRAINABLE_KEYS if d.get(k) is not None)


def meta_plan(descs, batch, loss="categorical_crossentropy", optimizer="adam", train=True):
    """The plan of `descs` for `batch` rows on the meta backend (weights replaced by
    meta buffers of the same size)."""
    from .. import _core
    nodes = []
    for d in descs:
        nodes.append({k: (_core.Buffer("meta", max(1, _buffer_size(v))) if k in WEIGHT_KEYS and v is not None
                          else v) for k, v in d.items()})
    cfg = None
    if train:
        kind = "sgd" if optimizer == "sgd_momentum" else optimizer
        per = STATE_PER_WEIGHT.get(optimizer, 2)
        state = [_core.Buffer("meta", 1) for _ in range(per * trainable_tensors(descs))]
        cfg = {"loss": loss, "optimizer": kind, "opt_state": state}
    return _core.Plan("meta", nodes, max(1, int(batch)), cfg)


def _t(entry, side, k):
    ts = entry[side]
    return ts[k] if k < len(ts) else None


def _shape(entry, side, k):
    t = _t(entry, side, k)
    return tuple(t["shape"]) if t else None


def _tensors(entry):
    return [t for t in entry["inputs"] + entry["outputs"] if t]


def _bytes(entry):
    return float(sum(_numel(t["shape"]) * costs.DTYPE_BYTES[t["dtype"]] for t in _tensors(entry)))


def _dtype(entry):
    out = [t for t in entry["outputs"] if t] or _tensors(entry)
    return out[0]["dtype"] if out else "float32"


ELEMENTWISE_FLOPS = {"act_fwd": 2, "act_bwd": 1, "add": 1, "mul": 1, "dropout_fwd": 2, "dropout_bwd": 2,
                     "batchnorm_fwd": 8, "batchnorm_bwd": 12, "scale_cast": 2, "bias_grad": 1, "reduce_sum": 1,
                     "accuracy": 2}


RNN_CELL_OF_GATES = {1: "simple", 4: "lstm", 3: "gru"}


def build_rnn_variant(rmask=False, cell=None, units=None, which="fwd"):
    """(variant, source) of the CUDA recurrence in the running build: the variant forced
    at point cuda.rnn, else its auto choice -- resident where the build has it and the
    call fits it (cell and units given: costs.rnn_resident_eligible), else persistent where
    the build has it and the call is eligible (no recurrent dropout), else stepwise; ('stepwise', 'assumed') in a
    build without the point (a CPU-only build cannot say what its CUDA build would run:
    the projection then takes the variant the calibration recorded)."""
    try:
        from .. import _core
        info = _core.variants().get("cuda.rnn")
    except Exception:          # a core without the variant registry
        info = None
    if not info:
        return "stepwise", "assumed"
    forced = info.get("forced") or "auto"
    if forced in costs.RNN_VARIANTS:
        return forced, "build"
    avail = info.get("available") or []
    if "resident" in avail and cell is not None and costs.rnn_resident_eligible(cell, units, which, rmask):
        return "resident", "build"
    ok = "persistent" in avail and not rmask
    return ("persistent" if ok else "stepwise"), "build"


def _rnn_op(entry, name, phase, desc=None):
    """The costs.recurrent op of a traced rnn_fwd / rnn_bwd call: the cell from the layer's
    node (else from the shapes: gates per unit; a GRU's recurrent bias or dm output says
    reset_after), the variant from the call's params when the trace gives one, else the
    running build's (build_rnn_variant)."""
    fwd = entry["op"] == "rnn_fwd"
    xw = _shape(entry, "inputs" if fwd else "outputs", 0)
    b, t, gu = xw
    u = _shape(entry, "inputs", 1 if fwd else 3)[0]
    cell = (desc or {}).get("cell")
    if cell not in costs.RNN_GATES:
        cell = RNN_CELL_OF_GATES.get(gu // u, "lstm")
        after = _t(entry, "inputs", 5) if fwd else _t(entry, "outputs", 1)    # b_h / dm: reset_after only
        if cell == "gru" and after is None:
            cell = "gru_reset_before"
    rmask = _t(entry, "inputs", 6) is not None
    variant = entry["params"].get("variant")
    source = "given"
    if variant not in costs.RNN_VARIANTS:
        variant, source = build_rnn_variant(rmask, cell, u, "fwd" if fwd else "bwd")
    return costs.recurrent(name, "fwd" if fwd else "bwd", cell, b, t, u, _dtype(entry), variant, _bytes(entry),
                           rmask, phase, source)


def op_of(entry, tf32=True, desc=None):
    """The costs.Op of one traced op call (an entry of Plan.trace); desc: the plan node
    dict of the call's node, when known (a recurrent op reads its cell there)."""
    op, phase, node = entry["op"], entry["phase"], entry["node"]
    name = f"{node}:{op}" if node >= 0 else op
    p = entry["params"]
    if op in ("rnn_fwd", "rnn_bwd"):
        return _rnn_op(entry, name, phase, desc)
    if op == "gemm":
        a, c = _shape(entry, "inputs", 0), _shape(entry, "outputs", 0)
        m, n = c
        k = a[0] if p.get("trans_a") else a[1]
        return costs.gemm(name, m, n, k, _dtype(entry), tf32, phase, bias=_t(entry, "inputs", 2) is not None,
                          trans_a=bool(p.get("trans_a")), trans_b=bool(p.get("trans_b")))
    if op == "weight_grads":          # one call (a profile's): its products as one stacked GEMM
        k, n = _shape(entry, "inputs", 2)
        m = sum(_shape(entry, "outputs", i)[0] for i in (0, 1) if _t(entry, "outputs", i) is not None)
        return costs.gemm(name, m, n, k, _dtype(entry), tf32, phase, trans_a=True)
    if op.startswith("conv2d_"):
        which = op[len("conv2d_"):]
        if which == "fwd":
            x, w, y = _shape(entry, "inputs", 0), _shape(entry, "inputs", 1), _shape(entry, "outputs", 0)
        elif which == "bwd_data":
            y, w, x = _shape(entry, "inputs", 0), _shape(entry, "inputs", 1), _shape(entry, "outputs", 0)
        else:
            x, y, w = _shape(entry, "inputs", 0), _shape(entry, "inputs", 1), _shape(entry, "outputs", 0)
        n, h, wd, c = x
        _, oh, ow, f = y
        return costs.conv2d(f"{node}:conv2d", which, n, h, wd, c, f, w[0], w[1], oh, ow, tuple(p["strides"]),
                            p["padding"], _dtype(entry), tf32, phase)
    if op in ("maxpool2d_fwd", "avgpool2d_fwd", "maxpool2d_bwd", "avgpool2d_bwd"):
        fwd = op.endswith("fwd")
        x = _shape(entry, "inputs", 0) if fwd else _shape(entry, "outputs", 0)
        y = _shape(entry, "outputs", 0) if fwd else _shape(entry, "inputs", 1 if op == "maxpool2d_bwd" else 0)
        ph, pw = p["pool_size"]
        return costs.pool2d(name, "fwd" if fwd else "bwd", x[0], x[1], x[2], x[3], y[1], y[2], ph, pw,
                            _dtype(entry))
    if op in ("softmax_xent", "sigmoid_bce", "xent_probs", "regression_loss"):
        logits = _shape(entry, "inputs", 0)
        return costs.softmax_cross_entropy(f"loss/{op}", logits[0], _numel(logits[1:]))
    n = max([_numel(t["shape"]) for t in _tensors(entry)] or [1])
    kind = {"embedding_fwd": "gather", "cast": "cast"}.get(op, op)
    return costs.Op(name, kind, "memory", float(ELEMENTWISE_FLOPS.get(op, 0) * n), _bytes(entry),
                    costs._elem_blocks(n), phase if phase != "loss" else "backward", _dtype(entry),
                    f"{n} elements")


def _split_weight_grads(entry):
    """A traced weight_grads call as the calls it stands for -- gemm(x, g, trans_a) ->
    dw, gemm(h, g, trans_a) -> du, bias_grad(g) -> db, those present -- which is what the
    CUDA backend runs and what the calibration timed (the CPU's one stacked product over a
    shared packing of g does the same FLOPs); any other call as it is."""
    if entry["op"] != "weight_grads":
        return [entry]
    (x, h, g), (dw, du, db) = entry["inputs"], entry["outputs"]
    base = {k: v for k, v in entry.items() if k not in ("op", "inputs", "outputs", "params")}
    gemm = {"trans_a": 1, "trans_b": 0, "activation": "linear"}
    parts = [dict(base, op="gemm", inputs=[a, g, None], outputs=[c], params=dict(gemm))
             for a, c in ((x, dw), (h, du)) if a and c]
    if db:
        parts.append(dict(base, op="bias_grad", inputs=[g], outputs=[db], params={}))
    return parts


def trace_ops(trace, tf32=True, optimizer="adam", descs=None):
    """costs.Ops of a plan trace; the per-tensor optimizer calls become the one fused
    update the GPU backends launch. descs: the plan's node dicts (index = node)."""
    ops, update = [], 0
    for e in trace:
        if e["op"] in ("adam", "sgd", "rmsprop"):
            update += _numel(e["inputs"][0]["shape"])
            continue
        node = e["node"]
        for part in _split_weight_grads(e):
            ops.append(op_of(part, tf32, descs[node] if descs and 0 <= node < len(descs) else None))
    if update:
        kind = "rmsprop" if optimizer == "sgd_momentum" else optimizer
        ops.append(costs.optimizer_update(f"update/{optimizer}", update, kind))
    return ops


def plan_ops(descs, batch, loss="categorical_crossentropy", optimizer="adam", tf32=True, train=True):
    """The ops of one training step (train=True) or one inference batch of the plan."""
    plan = meta_plan(descs, batch, loss, optimizer, train)
    inputs = [d for d in descs if d["kind"] == "input"] or [{"out_shape": descs[0]["in_shape"]}]
    ops = [costs.elementwise("data/gather", "gather", batch * sum(_numel(d["out_shape"]) for d in inputs), 1, 1,
                             "float32", 0, "data")]
    return ops + trace_ops(plan.trace(batch, train), tf32, optimizer, descs)


def model_descs(model):
    """The plan node dicts of a built gpucmp.keras model (what compile() lowers it to)."""
    from ..keras.models import lowering
    if not getattr(model, "built", False):
        raise ValueError(f"model '{model.name}' is not built: give it an input shape (or call it on data) "
                         "before asking for its op list")
    return lowering.model_nodes(model, model._trainable_of)


def optimizer_kind(model):
    """The optimizer as the cost model names it (SGD with momentum keeps one state)."""
    opt = getattr(model, "optimizer", None)
    kind = getattr(opt, "kind", None) or "adam"
    if kind == "sgd" and float(getattr(opt, "momentum", 0.0) or 0.0) != 0.0:
        return "sgd_momentum"
    return kind


def model_ops(model, batch, tf32=True, train=True):
    """The ops one training step of a compiled model runs at this batch size."""
    loss = getattr(model._loss_obj, "plan_kind", None) or "categorical_crossentropy"
    return plan_ops(model_descs(model), batch, loss, optimizer_kind(model), tf32, train)
