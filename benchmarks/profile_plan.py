"""Where a training step's time goes, op by op: one eager step of a gpucmp.keras model with
the device synchronised around every op (Plan.profile).

Prints the total per op kind and the slowest op calls, for ResNet-50 (default) or the
seeds' CNN. The per-op times include each launch (a captured CUDA graph step is faster
by the launch latencies); their sum is compared with the step time of fit.

    python benchmarks/profile_plan.py [--model resnet50|cnn|lstm] [--batch 256]
        [--precision mixed_bfloat16] [--image 224] [--top 25] [--json out.json]
"""
import argparse
import collections
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, table  # noqa: E402

SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "int32": "i32"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=("resnet50", "cnn", "lstm"), default="resnet50")
    ap.add_argument("--device", default=None)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", default="mixed_bfloat16")
    ap.add_argument("--image", type=int, default=224)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--json")
    args = ap.parse_args()

    import gpucmp
    from gpucmp import keras
    from gpucmp.harness.workloads.seeds import build_seed_cnn, build_seed_lstm
    gpus = [d for d in gpucmp.available_devices() if d.startswith("cuda")]
    device = args.device or (gpus[0] if gpus else "cpu")
    gpucmp.set_device(device)
    keras.mixed_precision.set_global_policy(args.precision)
    if args.model == "resnet50":
        model = keras.applications.ResNet50(weights=None, input_shape=(args.image, args.image, 3))
        model.compile(optimizer=keras.optimizers.SGD(0.01, momentum=0.9), loss="sparse_categorical_crossentropy")
        shape, classes = (args.image, args.image, 3), 1000
    elif args.model == "lstm":           # the seeds' LSTM classifier: ids in, 100 steps
        model = build_seed_lstm(keras, loss="sparse_categorical_crossentropy")
        shape, classes = (100,), 10
    else:
        model = build_seed_cnn(keras, loss="sparse_categorical_crossentropy")
        shape, classes = (28, 28, 1), 10
    rng = np.random.default_rng(0)
    b = args.batch
    x = rng.random((b,) + shape, dtype=np.float32)
    if args.model == "lstm":
        x = rng.integers(0, 10000, (b,) + shape).astype(np.float32)
    y = rng.integers(0, classes, b).astype(np.int32)
    model.fit(x, y, batch_size=b, epochs=1, verbose=0)       # builds the plan (and warms up)
    t0 = time.perf_counter()
    model.fit(np.concatenate([x] * 5), np.concatenate([y] * 5), batch_size=b, epochs=1, verbose=0, shuffle=False)
    step_s = (time.perf_counter() - t0) / 5
    cfg = model._train_config(y.shape)
    plan = model._train_plan(b, cfg, [x])
    hp = model.optimizer.hparams()
    plan.profile(x, y, hp)                                    # warm-up of the eager path
    prof = plan.profile(x, y, hp)
    print(header(f"Plan profile: {args.model}, batch {b}, {args.precision}, {device}"))
    total = sum(e["seconds"] for e in prof)
    print(f"fit step {step_s * 1e3:.2f} ms; {len(prof)} op calls, sum of synchronised op times {total * 1e3:.2f} ms")
    by = collections.defaultdict(lambda: [0, 0.0])
    for e in prof:
        k = (e["op"], e["phase"])
        by[k][0] += 1
        by[k][1] += e["seconds"]
    rows = [{"op": k[0], "phase": k[1], "calls": v[0], "ms": v[1] * 1e3, "share": v[1] / total}
            for k, v in sorted(by.items(), key=lambda kv: -kv[1][1])]
    print(table(rows, ["op", "phase", "calls", "ms", "share"]))
    slow = sorted(prof, key=lambda e: -e["seconds"])[:args.top]
    rows = [{"op": e["op"], "node": e["node"], "phase": e["phase"], "ms": e["seconds"] * 1e3,
             "shapes": " ".join("x".join(map(str, t["shape"])) + ":" + SHORT.get(t["dtype"], t["dtype"])
                                for t in e["inputs"] + e["outputs"] if t)} for e in slow]
    print(f"\nslowest {args.top} op calls:")
    print(table(rows, ["op", "node", "phase", "ms", "shapes"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"step_s": step_s, "ops": prof}, f)


if __name__ == "__main__":
    main()
