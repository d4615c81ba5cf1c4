"""The describe pass: a compiled model's execution plan as the list of ops one training step runs.

What it provides: `plan_ops(descs, batch, ...)` walks the layer descriptions that
`model.compile()` lowers a gpucmp.keras model to (the very dicts `gpucmp._core.Plan`
is built from, lowering.describe) and returns, in launch order, the `costs.Op`s the
plan issues for one training step: the batch gather, each layer's forward pass (bias
and activation fused into the GEMM / convolution epilogue), the fused softmax +
cross-entropy, each layer's backward passes (the activation gradient unless a following
max-pool folds the ReLU, weight and bias gradients, the input gradient of every layer
above the first trainable one), the casts of a mixed-precision policy, and the fused
optimizer update. `model_ops(model, batch)` does the same for a model object.

Why it is built this way: the op list must be the one the plan really runs -- the
projection scales each op separately and the memory model sizes each buffer -- so it is
derived from the plan's own layer descriptions and mirrors csrc/core/plan.c's forward /
backward / update order, rather than from a second, hand-kept description of the model.
"""
import math

from . import costs


def _numel(shape):
    return int(math.prod(shape))


def _weights(d):
    """(kernel elements, bias elements) of a plan layer."""
    if d["kind"] == "dense":
        return _numel(d["in_shape"]) * _numel(d["out_shape"]), (_numel(d["out_shape"]) if d.get("bias") is not None else 0)
    if d["kind"] == "conv2d":
        kh, kw = d["kernel_size"]
        c, f = d["in_shape"][-1], d["out_shape"][-1]
        return kh * kw * c * f, (f if d.get("bias") is not None else 0)
    return 0, 0


def layer_params(descs):
    """Trainable and total weight elements over the plan's layers."""
    total = trainable = 0
    for d in descs:
        k, b = _weights(d)
        total += k + b
        if d.get("trainable", True):
            trainable += k + b
    return trainable, total


def plan_ops(descs, batch, loss="categorical_crossentropy", optimizer="adam", tf32=True, train=True):
    """The ops of one training step (train=True) or one inference batch of the plan."""
    ops = []
    n_in = _numel(descs[0]["in_shape"])
    ops.append(costs.elementwise("data/gather", "gather", batch * n_in, 1, 1, "float32", 0, "data"))
    first_trainable = next((i for i, d in enumerate(descs) if d.get("trainable", True) and _weights(d)[0]), None)
    for i, d in enumerate(descs):
        ops.extend(_forward(i, d, descs, batch, tf32))
    if not train:
        return ops
    classes = _numel(descs[-1]["out_shape"])
    ops.append(costs.softmax_cross_entropy(f"loss/{loss}", batch, classes))
    for i in range(len(descs) - 1, -1, -1):
        needs_gin = first_trainable is not None and i > first_trainable
        ops.extend(_backward(i, descs[i], descs, batch, tf32, needs_gin))
    trainable, _ = layer_params(descs)
    dts = {d.get("dtype", "float32") for d in descs}
    if dts != {"float32"}:
        # mixed precision: gradients unscaled into float32 (and checked) before the update
        ops.append(costs.elementwise("update/unscale", "cast", trainable, 1, 2, "float16", 2, "update"))
    if trainable:
        ops.append(costs.optimizer_update(f"update/{optimizer}", trainable, optimizer))
    return ops


def _dt(d):
    return d.get("dtype", "float32")


def _act(d):
    return d.get("activation", "linear") or "linear"


def _relu_folded(i, descs):
    """A ReLU whose gradient the next max-pool's backward applies (plan.c fold_relu)."""
    nxt = descs[i + 1] if i + 1 < len(descs) else None
    return _act(descs[i]) == "relu" and nxt is not None and nxt["kind"] == "maxpool2d"


def _forward(i, d, descs, b, tf32):
    kind, dt, name = d["kind"], _dt(d), f"{i}:{d['kind']}"
    ops = []
    prev_dt = _dt(descs[i - 1]) if i else "float32"
    if dt != prev_dt:
        ops.append(costs.elementwise(f"{name}/cast_in", "cast", b * _numel(d["in_shape"]), 1, 1, dt, 0))
    if kind in ("dense", "conv2d") and dt != "float32":
        k, bias = _weights(d)
        ops.append(costs.elementwise(f"{name}/cast_weights", "cast", k + bias, 2, 1, dt, 0))
    if kind == "dense":
        ops.append(costs.gemm(f"{name}/fwd", b, _numel(d["out_shape"]), _numel(d["in_shape"]), dt, tf32,
                              bias=d.get("bias") is not None))
    elif kind == "conv2d":
        h, w, c = d["in_shape"]
        oh, ow, f = d["out_shape"]
        kh, kw = d["kernel_size"]
        ops.append(costs.conv2d(name, "fwd", b, h, w, c, f, kh, kw, oh, ow, tuple(d.get("strides", (1, 1))),
                                d.get("padding", "valid"), dt, tf32))
    elif kind in ("maxpool2d", "avgpool2d"):
        h, w, c = d["in_shape"]
        oh, ow, _ = d["out_shape"]
        ph, pw = d.get("pool_size", (2, 2))
        ops.append(costs.pool2d(name, "fwd", b, h, w, c, oh, ow, ph, pw, dt))
    elif kind in ("dropout", "activation"):
        ops.append(costs.elementwise(f"{name}/fwd", kind, b * _numel(d["out_shape"]), 1, 1, dt, 2))
    if i == len(descs) - 1 and dt != "float32":
        ops.append(costs.elementwise(f"{name}/cast_out", "cast", b * _numel(d["out_shape"]), 1, 2, dt, 0))
    return ops


def _backward(i, d, descs, b, tf32, needs_gin):
    kind, dt, name = d["kind"], _dt(d), f"{i}:{d['kind']}"
    trains = d.get("trainable", True) and _weights(d)[0] > 0
    ops = []
    if kind in ("dense", "conv2d"):
        if not trains and not needs_gin:
            return ops
        out_n = b * _numel(d["out_shape"])
        last = i == len(descs) - 1
        if _act(d) not in ("linear", "softmax") and not _relu_folded(i, descs) and not last:
            ops.append(costs.elementwise(f"{name}/act_bwd", "act_bwd", out_n, 2, 1, dt, 1, "backward"))
        if kind == "dense":
            n_in, n_out = _numel(d["in_shape"]), _numel(d["out_shape"])
            if trains:
                ops.append(costs.gemm(f"{name}/bwd_filter", n_in, n_out, b, dt, tf32, "backward", trans_a=True))
                if d.get("bias") is not None:
                    ops.append(costs.elementwise(f"{name}/bias_grad", "bias_grad", out_n, 1, 0, dt, 1, "backward"))
            if needs_gin:
                ops.append(costs.gemm(f"{name}/bwd_data", b, n_in, n_out, dt, tf32, "backward", trans_b=True))
        else:
            h, w, c = d["in_shape"]
            oh, ow, f = d["out_shape"]
            kh, kw = d["kernel_size"]
            st, pad = tuple(d.get("strides", (1, 1))), d.get("padding", "valid")
            if trains:
                ops.append(costs.conv2d(name, "bwd_filter", b, h, w, c, f, kh, kw, oh, ow, st, pad, dt, tf32))
            if needs_gin:
                ops.append(costs.conv2d(name, "bwd_data", b, h, w, c, f, kh, kw, oh, ow, st, pad, dt, tf32))
    elif kind in ("maxpool2d", "avgpool2d") and needs_gin:
        h, w, c = d["in_shape"]
        oh, ow, _ = d["out_shape"]
        ph, pw = d.get("pool_size", (2, 2))
        ops.append(costs.pool2d(name, "bwd", b, h, w, c, oh, ow, ph, pw, dt))
    elif kind in ("dropout", "activation") and needs_gin:
        ops.append(costs.elementwise(f"{name}/bwd", f"{kind}_bwd", b * _numel(d["out_shape"]), 2, 1, dt, 1,
                                     "backward"))
    prev_dt = _dt(descs[i - 1]) if i else "float32"
    if needs_gin and dt != prev_dt:
        ops.append(costs.elementwise(f"{name}/cast_grad", "cast", b * _numel(d["in_shape"]), 1, 1, dt, 0,
                                     "backward"))
    return ops


def model_descs(model):
    """The plan layer descriptions of a built gpucmp.keras model (what compile() lowers it to)."""
    from ..keras.models import lowering
    if not getattr(model, "built", False):
        raise ValueError(f"model '{model.name}' is not built: give it an input shape (or call it on data) "
                         "before asking for its op list")
    return lowering.model_nodes(model, model._trainable_of)


def model_ops(model, batch, tf32=True, train=True):
    """The ops one training step of a compiled model runs at this batch size."""
    loss = getattr(model._loss_obj, "plan_kind", None) or "categorical_crossentropy"
    opt = getattr(getattr(model, "optimizer", None), "kind", None) or "adam"
    return plan_ops(model_descs(model), batch, loss, opt, tf32, train)
