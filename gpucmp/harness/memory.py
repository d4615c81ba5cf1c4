"""Device memory of a training step: what the execution plan allocates, as a function of batch.

What it provides: `plan_memory(descs, batch, optimizer, dataset_rows)` -> a breakdown in
bytes (the weights and optimizer state the model owns, the plan's own buffers --
activations, their gradients, casts, scratch, loss buffers, the float32 gradient arena --,
the resident data set, the backend's fixed buffers), and `max_batch(descs, capacity_bytes,
...)`, the largest batch whose plan fits a card (`largest_batch` for several plans).

Why it is built this way: the plan's part is not modelled but asked for: the plan is built
on the core's meta backend (describe.meta_plan: counted memory, nothing allocated), so its
buffer reuse, fusions and views are exactly those of a real run, for any batch on any
machine, and the total can be checked against the backend's measured high-water mark
(runner.py records it). The bytes grow with the batch, linearly once the batch is large
(to the 256-byte rounding of the plan's buffers) but not from the first rows, where a
buffer shared by several nodes is sized by a batch-independent user; so the largest batch
that fits is searched on the plan itself (doubling, then bisection), never extrapolated.
"""

from .describe import STATE_PER_WEIGHT, layer_params, meta_plan, _numel

BACKEND_FIXED_BYTES = {"cuda": (4 << 20) + 64, "cpu": 0}   # the CUDA backend's scratch and error flags
CONTEXT_RESERVE_BYTES = 600 << 20   # CUDA context, modules and the allocator's slack on a real card


def plan_memory(descs, batch, optimizer="adam", dataset_rows=0, label_numel=None, backend="cuda",
                loss="categorical_crossentropy"):
    """Bytes the plan and its model hold on the device for a training step at `batch` rows."""
    trainable, total = layer_params(descs)
    if int(batch) == 0:   # the part that does not grow with the batch, from the slope at large batches
        plan_bytes = 2 * meta_plan(descs, 1024, loss, optimizer).bytes - meta_plan(descs, 2048, loss, optimizer).bytes
    else:
        plan_bytes = meta_plan(descs, int(batch), loss, optimizer).bytes
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


def per_sample_bytes(descs, optimizer="adam", batch=1024):
    """Bytes that grow with each row of the batch around `batch` rows (the slope of
    plan_memory there: at small batches the plan's shared scratch can hide the growth)."""
    return plan_memory(descs, 2 * batch, optimizer)["total"] - plan_memory(descs, batch, optimizer)["total"]


def max_batch(descs, capacity_bytes, optimizer="adam", reserve_bytes=CONTEXT_RESERVE_BYTES):
    """The largest batch whose training plan fits capacity_bytes (after the context reserve); 0 if none."""
    return largest_batch(lambda n: plan_memory(descs, n, optimizer)["total"], capacity_bytes, reserve_bytes)


def largest_batch(total_bytes, capacity_bytes, reserve_bytes=CONTEXT_RESERVE_BYTES):
    """The largest n with total_bytes(n) + reserve_bytes <= capacity_bytes; 0 if none.

    A plan's bytes grow with the batch but not linearly from the first rows (buffers
    shared between nodes are as large as their largest user, which changes with the
    batch), so the answer is searched on the plans themselves -- doubling to a batch that
    does not fit, then bisection: about 2 log2(batch) meta plans -- never extrapolated."""
    fits = lambda n: total_bytes(n) + reserve_bytes <= capacity_bytes
    if not fits(1):
        return 0
    lo, hi = 1, 2
    while fits(hi):
        lo, hi = hi, 2 * hi
        if hi > 1 << 40:
            raise ValueError(f"largest_batch: the plan's memory does not grow with the batch (capacity_bytes="
                             f"{capacity_bytes:.4g})")
    while hi - lo > 1:     # fits(lo), not fits(hi)
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo
