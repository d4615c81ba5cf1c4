"""In-step op times: every op of a model's training step timed where it runs, for the
ops the calibration cannot time alone.

What it provides: `profile_run(run, repeats=3)` -> {signature: seconds} of a
prepared ModelRun, and `lookup(table, op)`, an op of the workload's op list found in that table
(`signature(op)` is its key). The calibration times GEMMs and convolutions alone (bench_gemm /
bench_conv, replayed from a graph), but batch norms, residual adds, casts, pools and the
optimizer update have no bench function; without a time of their own the projection
would estimate them from the copy's efficiency, and a step whose ops are underestimated
shows the difference as host overhead that does not scale with the target.

How: Plan.profile runs one eager training step with the device synchronised around each
op call and reports each call's host-clock time (launch + kernel + synchronisation); the
median over `repeats` profiled steps (and over calls of the same signature) is kept, as
measured. The projection (projection.find_profile) removes the eager overhead, which it
measures against the ops the calibration also timed alone. The per-tensor optimizer
calls are the one fused launch the GPU backends make (describe.trace_ops names it
update/<kind>).
"""
import statistics

from . import describe


UPDATE_KEY = "update|optimizer"     # the fused optimizer launch, whatever its size


def signature(op):
    """The key of an op in a profile table: its name, kind and bytes moved (two calls of
    the same name and size are the same op)."""
    return f"{op.name}|{op.kind}|{int(round(op.bytes))}"


def _profile_ops(entries):
    """(Op, seconds) of the profiled op calls, the fused optimizer call as the workload's
    update op."""
    out, fused, per_tensor = [], None, []
    for e in entries:
        if e["op"] == "optim_multi":
            fused = float(e["seconds"])
        elif e["op"] == "cast_multi":
            # the GPU's one-launch weight casts / gradient conversions: the meta trace the
            # harness models lists them per tensor (those keep their modelled cost)
            continue
        elif e["op"] in ("adam", "sgd", "rmsprop"):      # a backend without the fused update
            per_tensor.append(float(e["seconds"]))
        else:
            out.append((describe.op_of(e), float(e["seconds"])))
    return out, fused if fused is not None else (sum(per_tensor) if per_tensor else None)


def profile_run(run, repeats=3):
    """{signature: median host-clock seconds of one synchronised call} of the ops of one
    training step of a prepared ModelRun (it must have trained once, so its plan exists)."""
    model = getattr(run, "model", None)
    if model is None:
        raise NotImplementedError(f"{type(run).__name__} runs several models per step; only a single "
                                  "model's step can be profiled")
    x, y = run.x[:run.batch], run.y[:run.batch]
    cfg = model._train_config(y.shape)
    plan = model._train_plan(run.batch, cfg, [x])
    hp = model.optimizer.hparams()
    plan.profile(x, y, hp)                     # the eager path's first call
    samples, updates = {}, []
    for _ in range(max(1, int(repeats))):
        ops, update = _profile_ops(plan.profile(x, y, hp))
        if update is not None:
            updates.append(update)
        for op, sec in ops:
            samples.setdefault(signature(op), []).append(sec)
    table = {k: statistics.median(v) for k, v in samples.items()}
    if updates:
        table[UPDATE_KEY] = statistics.median(updates)
    return table


def lookup(table, op):
    """Seconds of op in a profile table, or None."""
    if not table:
        return None
    return table.get(UPDATE_KEY if op.kind == "optimizer" else signature(op))
