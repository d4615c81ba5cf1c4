"""Device memory of a training step: what the execution plan allocates, as a function of batch.

What it provides: `plan_memory(descs, batch, optimizer, dataset_rows)` -> a breakdown in
bytes (the weights and optimizer state the model owns, the plan's own buffers --
activations, their gradients, casts, scratch, loss buffers, the float32 gradient arena --,
the resident data set, the backend's fixed buffers), and `max_batch(descs, capacity_bytes,
...)`, the largest batch whose plan fits a card.

Why it is built this way: the plan's part is not modelled but asked for: the plan is built
on the core's meta backend (describe.meta_plan: counted memory, nothing allocated), so its
buffer reuse, fusions and views are exactly those of a real run, for any batch on any
machine, and the total can be checked against the backend's measured high-water mark
(runner.py records it). Everything is linear in the batch (to the 256-byte rounding of the
plan's buffers), so the largest batch that fits is solved for and then checked against the
plan, not searched.
"""
import math

from .describe import STATE_PER_WEIGHT, layer_params, meta_plan, _numel

BACKEND_FIXED_BYTES = {"cuda": (4 << 20) + 64, "cpu": 0}   # the CUDA backend's scratch and error flags
CONTEXT_RESERVE_BYTES = 600 << 20   # CUDA context, modules and the allocator's slack on a real card


def plan_memory(descs, batch, optimizer="adam", dataset_rows=0, label_numel=None, backend="cuda",
                loss="categorical_crossentropy"):
    """Bytes the plan and its model hold on the device for a training step at `batch` rows."""
    trainable, total = layer_params(descs)
    plan_bytes = meta_plan(descs, max(1, int(batch)), loss, optimizer).bytes
    if int(batch) == 0:   # the part that does not grow with the batch
        plan_bytes = 2 * plan_bytes - meta_plan(descs, 2, loss, optimizer).bytes
    inputs = [d for d in descs if d["kind"] == "input"] or [{"out_shape": descs[0]["in_shape"]}]
    in_n = sum(_numel(d["out_shape"]) for d in inputs)
    label_numel = _numel(descs[-1]["out_shape"]) if label_numel is None else label_numel
    grads = 4 * trainable   # the float32 gradient arena (inside the plan's bytes)
    parts = {
        "weights": 4 * total, "gradients": grads,
        "optimizer_state": 4 * trainable * STATE_PER_WEIGHT.get(optimizer, 2),
        "plan_buffers": plan_bytes - grads,
        "dataset": 4 * int(dataset_rows) * (in_n + label_numel),
        "backend_fixed": BACKEND_FIXED_BYTES.get(backend.split(":")[0], 0),
    }
    parts["total"] = sum(parts.values())
    return parts


def per_sample_bytes(descs, optimizer="adam"):
    """Bytes that grow with each row of the batch (the slope of plan_memory)."""
    return plan_memory(descs, 2, optimizer)["total"] - plan_memory(descs, 1, optimizer)["total"]


def max_batch(descs, capacity_bytes, optimizer="adam", reserve_bytes=CONTEXT_RESERVE_BYTES):
    """The largest batch whose training plan fits capacity_bytes (after the context reserve); 0 if none."""
    m1 = plan_memory(descs, 1, optimizer)["total"]
    slope = plan_memory(descs, 2, optimizer)["total"] - m1
    fixed = m1 - slope
    room = capacity_bytes - reserve_bytes - fixed
    if room < slope or slope <= 0:
        return 0
    b = int(math.floor(room / slope))
    # the plan's layout rounds each buffer to 256 bytes: linear to within a few KB, so the
    # solved batch is checked against the plan itself and moved by the odd row
    fits = lambda n: plan_memory(descs, n, optimizer)["total"] + reserve_bytes <= capacity_bytes
    while b > 0 and not fits(b):
        b -= 1
    while fits(b + 1):
        b += 1
    return b
