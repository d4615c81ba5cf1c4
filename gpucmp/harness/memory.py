"""Device memory of a training step: what the execution plan allocates, as a function of batch.

What it provides: `plan_memory(descs, batch, optimizer, dataset_rows)` -> a breakdown
(weights, gradients, optimizer state, activations and their gradients, casts, loss
buffers, the resident data set, fixed backend buffers) in bytes, and
`max_batch(descs, capacity_bytes, ...)`, the largest batch whose plan fits a card.

Why it is built this way: the breakdown follows csrc/core/plan.c's allocations buffer by
buffer (one output and one gradient buffer per layer for max_batch rows -- a reshape is a
view of the layer below --, casts and float32 gradient copies under a mixed policy, the
scratch of the largest layer), so it can be checked against the backend's measured
high-water mark (runner.py records it) rather than being a rule of thumb. Everything is
linear in the batch, so the largest batch that fits is solved for, not searched.
"""
import math

from .describe import _numel, _weights

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
STATE_PER_WEIGHT = {"adam": 2, "rmsprop": 1, "sgd": 0, "sgd_momentum": 1}
BACKEND_FIXED_BYTES = {"cuda": (4 << 20) + 64, "cpu": 0}   # the CUDA backend's scratch and error flags
CONTEXT_RESERVE_BYTES = 600 << 20   # CUDA context, modules and the allocator's slack on a real card


def plan_memory(descs, batch, optimizer="adam", dataset_rows=0, label_numel=None, backend="cuda"):
    """Bytes the plan and its model hold on the device for a training step at `batch` rows."""
    b = int(batch)
    weights = grads = grads32 = casts_w = acts = gouts = casts_x = 0
    biggest = 1
    trainable = 0
    first_trainable = next((i for i, d in enumerate(descs) if d.get("trainable", True) and _weights(d)[0]), None)
    for i, d in enumerate(descs):
        s = DTYPE_BYTES.get(d.get("dtype", "float32"), 4)
        prev = DTYPE_BYTES.get(descs[i - 1].get("dtype", "float32"), 4) if i else 4
        out_n, in_n = _numel(d["out_shape"]), _numel(d["in_shape"])
        biggest = max(biggest, out_n)
        k, bias = _weights(d)
        weights += 4 * (k + bias)
        if d["kind"] != "reshape":
            acts += b * out_n * s
            gouts += b * out_n * s
        if s != prev:
            casts_x += b * in_n * s * (2 if first_trainable is not None and i > first_trainable else 1)
        if k and s != 4:
            casts_w += (k + bias) * s
        if k and d.get("trainable", True):
            trainable += k + bias
            grads += (k + bias) * s
            if s != 4:
                grads32 += (k + bias) * 4
    in_n, out_n = _numel(descs[0]["in_shape"]), _numel(descs[-1]["out_shape"])
    label_numel = out_n if label_numel is None else label_numel
    last_s = DTYPE_BYTES.get(descs[-1].get("dtype", "float32"), 4)
    io = 4 * b * in_n + 4 * b * out_n + 4 * b * out_n + 8 * b          # x, y, probabilities, loss rows
    if last_s != 4:
        io += 4 * b * out_n * 2                                         # float32 logits and their gradient
    scratch = 4 * b * biggest
    state = 4 * trainable * STATE_PER_WEIGHT.get(optimizer, 2)
    dataset = 4 * int(dataset_rows) * (in_n + label_numel)
    parts = {
        "weights": weights, "gradients": grads + grads32, "optimizer_state": state,
        "activations": acts, "activation_gradients": gouts, "casts": casts_w + casts_x,
        "io_and_scratch": io + scratch, "dataset": dataset,
        "backend_fixed": BACKEND_FIXED_BYTES.get(backend.split(":")[0], 0),
    }
    parts["total"] = sum(parts.values())
    return parts


def per_sample_bytes(descs, optimizer="adam"):
    """Bytes that grow with each row of the batch (the slope of plan_memory)."""
    return plan_memory(descs, 2, optimizer)["total"] - plan_memory(descs, 1, optimizer)["total"]


def max_batch(descs, capacity_bytes, optimizer="adam", reserve_bytes=CONTEXT_RESERVE_BYTES):
    """The largest batch whose training plan fits capacity_bytes (after the context reserve); 0 if none."""
    fixed = plan_memory(descs, 0, optimizer)["total"]
    slope = per_sample_bytes(descs, optimizer)
    room = capacity_bytes - reserve_bytes - fixed
    if room < slope or slope <= 0:
        return 0
    return int(math.floor(room / slope))
