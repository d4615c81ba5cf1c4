"""Where a training step's device memory goes: the execution plan's bytes, by category and buffer.

What it provides: for `gpucmp.keras.applications.ResNet50` (or the seeds' CNN) at a given batch
and precision, the plan is built on the core's meta backend (counted memory, nothing runs:
any batch on any machine) and its own allocation map (`Plan.memory()`) is printed: the total
(`Plan.bytes`), the bytes by category (input, input casts, weight casts and half-precision
weight gradients, the float32 weight-gradient arena, backward temporaries, BatchNormalization
statistics, loss buffers, and the step's one block of activations and activation gradients),
the largest buffers, and the live-bytes curve over the step's schedule inside the step block:
its peak, the op at the peak and what is live there. Weights and optimizer state are the
caller's (Keras variables), not the plan's; they are printed apart, counted from the model.

Why it exists: the plan lays out activations and gradients offline, so its memory is known
exactly before anything runs; this turns that layout into a report to compare with what
another framework keeps (`--json` writes the same figures for diffs between builds).

    python benchmarks/plan_memory.py --batch 256 --precision mixed_bfloat16 [--top 25] [--json f]
"""
import argparse
import collections
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

GIB = float(1 << 30)


def build(model, batch, precision, optimizer):
    from gpucmp.keras import mixed_precision
    from gpucmp.harness.describe import model_descs, meta_plan, STATE_PER_WEIGHT, layer_params
    mixed_precision.set_global_policy(precision)
    if model == "resnet50":
        from gpucmp.keras.applications import ResNet50
        m = ResNet50(weights=None, input_shape=(224, 224, 3), classes=1000)
    else:
        from gpucmp.harness.workloads import seeds
        m = seeds.cnn_model()
    m.compile(optimizer=optimizer, loss="sparse_categorical_crossentropy")
    descs = model_descs(m)
    plan = meta_plan(descs, batch, "sparse_categorical_crossentropy", optimizer)
    mixed_precision.set_global_policy("float32")
    trainable, total = layer_params(descs)
    names = [getattr(l, "name", "?") for l in m.layers]
    if len(names) != len(descs):
        names = [None] * len(descs)
    labels = [f"{i}:{d['kind']}" + (f":{names[i]}" if names[i] else "") for i, d in enumerate(descs)]
    owned = {"weights (float32, the model's)": 4 * total,
             f"optimizer state ({optimizer}, the model's)": 4 * trainable * STATE_PER_WEIGHT.get(optimizer, 2)}
    return plan, labels, owned


def report(plan, labels, owned, top):
    mem = plan.memory()
    n = len(labels)
    blocks = [e for e in mem if e["offset"] < 0]
    inner = [e for e in mem if e["offset"] >= 0]
    out = {"plan_bytes": plan.bytes, "by_category": {}, "step_block": {}, "largest": [], "peak": {}}
    assert sum(e["bytes"] for e in blocks) == plan.bytes
    cats = collections.Counter()
    for e in blocks:
        cats[e["what"]] += e["bytes"]
    print(f"plan bytes {plan.bytes / GIB:.3f} GiB ({plan.bytes} B)")
    for k, v in owned.items():
        print(f"  + {k}: {v / GIB:.3f} GiB (not in the plan's bytes)")
    print("by category (the plan's own blocks):")
    for k, v in cats.most_common():
        print(f"  {k:30s} {v / GIB:8.3f} GiB")
        out["by_category"][k] = v
    icats = collections.Counter()
    for e in inner:
        icats[e["what"]] += e["bytes"]
    print("inside the step block (sum of requests; they share memory over time):")
    for k, v in icats.most_common():
        print(f"  {k:30s} {v / GIB:8.3f} GiB")
        out["step_block"][k] = v

    def name(e):
        return labels[e["node"]] if 0 <= e["node"] < n else "plan"

    print(f"largest {top} buffers:")
    for e in sorted(mem, key=lambda e: -e["bytes"])[:top]:
        life = f" live [{e['start']}, {e['end']}]" if e["offset"] >= 0 else ""
        life += f" + [{e['start2']}, {e['end2']}]" if e.get("start2", -1) >= 0 else ""
        print(f"  {e['bytes'] / GIB:7.3f} GiB  {e['what']:22s} {name(e)}{life}")
        out["largest"].append({**e, "name": name(e)})
    if not inner:
        return out
    T = max(max(e["end"], e["end2"]) for e in inner) + 1
    live = [0] * (T + 1)
    for e in inner:
        for s, t in ((e["start"], e["end"]), (e["start2"], e["end2"])):
            if s >= 0:
                live[s] += e["bytes"]
                live[t + 1] -= e["bytes"]
    for t in range(1, T + 1):
        live[t] += live[t - 1]
    t_peak = max(range(T), key=lambda t: live[t])

    def when(t):
        if t < n:
            return f"forward of {labels[t]}"
        if t == n:
            return "loss"
        if t <= 2 * n:
            return f"backward of {labels[2 * n - t]}"
        return "update"

    block = next(e["bytes"] for e in blocks if e["what"] == "step_block")
    print(f"step block {block / GIB:.3f} GiB; live-bytes peak {live[t_peak] / GIB:.3f} GiB at t={t_peak} "
          f"({when(t_peak)}); layout overhead {(block - live[t_peak]) / GIB:.3f} GiB")
    at = sorted((e for e in inner if e["start"] <= t_peak <= e["end"] or e["start2"] <= t_peak <= e["end2"]),
                key=lambda e: -e["bytes"])
    by = collections.Counter()
    for e in at:
        by[e["what"]] += e["bytes"]
    print("  live there: " + ", ".join(f"{k} {v / GIB:.3f} GiB" for k, v in by.most_common()))
    for e in at[:top]:
        print(f"    {e['bytes'] / GIB:7.3f} GiB  {e['what']:12s} {name(e)} [{e['start']}, {e['end']}]")
    out["peak"] = {"t": t_peak, "when": when(t_peak), "live_bytes": live[t_peak], "step_block": block,
                   "live_by_kind": dict(by)}
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="resnet50", choices=["resnet50", "cnn"])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", default="mixed_bfloat16",
                    choices=["float32", "mixed_bfloat16", "mixed_float16"])
    ap.add_argument("--optimizer", default="sgd", help="the plan's bytes do not depend on it")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    plan, labels, owned = build(args.model, args.batch, args.precision, args.optimizer)
    print(f"{args.model}, batch {args.batch}, {args.precision} (meta backend)")
    out = report(plan, labels, owned, args.top)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": args.model, "batch": args.batch, "precision": args.precision, **out}, f, indent=1)


if __name__ == "__main__":
    main()
