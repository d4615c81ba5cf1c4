"""ResNet-50 training throughput and peak memory: gpucmp.keras side by side with PyTorch.

The model: `gpucmp.keras.applications.ResNet50(weights=None)` (Keras' layer graph, 25.6M
parameters) against torchvision's `resnet50()` in channels_last, eager and under
`torch.compile`. Work per step, the same everywhere: a batch of 224x224x3 images (random
values, fixed), integer labels over 1000 classes, sparse categorical cross-entropy from
softmax outputs (gpucmp fuses it; PyTorch computes it from logits), SGD with momentum
0.9, a full forward + backward + update.

Precisions (--precisions):
- float32: TF32 allowed on both (gpucmp's default; torch.backends.*.allow_tf32 = True);
- mixed_bfloat16: gpucmp's mixed_bfloat16 policy; PyTorch autocast(bfloat16);
- mixed_float16: gpucmp's mixed_float16 (dynamic loss scaling on the device); PyTorch
  autocast(float16) with a GradScaler.

Reported per (framework, precision, batch): the steady-state step time (gpucmp: the
difference of two fit calls over the same resident data, after a first fit over it, so
the upload and the graph capture are left out; the median of three such differences;
PyTorch: --steps steps after warm-up), images/s, and
peak device memory of the training (gpucmp: the backend's own
high-water mark after a reset, less what the backend held before the model was built --
an earlier configuration's model freed first; PyTorch: torch.cuda.max_memory_allocated). PyTorch runs in
a child process per configuration, so the two never share a device's memory.

    python benchmarks/bench_resnet50.py [--batch-sizes 128 256]
        [--precisions float32 mixed_bfloat16 mixed_float16] [--steps 20]
        [--compile mixed_bfloat16] [--no-torch] [--image 224]

Without a GPU it runs on the CPU at small images (--image 64 --batch-sizes 8): the CPU
comparison is against PyTorch CPU eager, float32 only.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, table, try_import_torch  # noqa: E402

WORKER_TIMEOUT = float(os.environ.get("BENCH_RESNET_WORKER_TIMEOUT", "400"))


def data(n, image, classes, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.random((n, image, image, 3), dtype=np.float32)
    y = rng.integers(0, classes, n).astype(np.int32)
    return x, y


# ------------------------------------------------------------------ gpucmp
def gpucmp_run(device, precision, batch, steps, image, classes):
    import gc
    import gpucmp
    from gpucmp import _core, keras
    keras.backend.clear_session()
    gc.collect()          # an earlier run's model (reference cycles) is gone before this one's is made
    keras.mixed_precision.set_global_policy(precision)
    gpucmp.set_device(device)
    base = _core.memory_stats(device)["allocated_bytes"]   # the backend's own buffers, anything left
    model = keras.applications.ResNet50(weights=None, input_shape=(image, image, 3), classes=classes)
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.01, momentum=0.9),
                  loss="sparse_categorical_crossentropy")
    x, y = data(batch * 4, image, classes)
    model.fit(x[:batch * 2], y[:batch * 2], batch_size=batch, epochs=1, verbose=0)   # the plan
    _core.reset_peak_memory(device)
    # steady state: one fit call uploads the data and captures the step's graph once;
    # (1 + steps // 4) epochs of 4 steps minus 1 epoch: 4 * (steps // 4) steps of it.
    # A first fit over x takes the one-off costs of this data set (upload, capture) before
    # anything is timed: in the 1-epoch span they would shrink the difference (an
    # optimistic step time; measured once at 37 ms against 43 on the same tree).
    model.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False)
    times = []
    for _ in range(3):
        spans = []
        for epochs in (1, 1 + steps // 4):
            t0 = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=epochs, verbose=0, shuffle=False)
            spans.append(time.perf_counter() - t0)
        times.append((spans[1] - spans[0]) / (4 * (steps // 4)))
    peak = _core.memory_stats(device)["peak_bytes"] - base
    keras.mixed_precision.set_global_policy("float32")
    params = model.count_params()
    del model
    gc.collect()
    return {"step_s": statistics.median(times), "peak_bytes": peak, "params": params}


# ------------------------------------------------------------------ PyTorch (child process)
def torch_worker(spec):
    torch = try_import_torch()
    import torchvision
    dev = torch.device("cuda" if spec["device"].startswith("cuda") else "cpu")
    batch, steps, image, classes = spec["batch"], spec["steps"], spec["image"], spec["classes"]
    precision, compiled = spec["precision"], spec["compile"]
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    model = torchvision.models.resnet50(num_classes=classes).to(dev).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    step_model = torch.compile(model) if compiled else model
    amp = {"mixed_bfloat16": torch.bfloat16, "mixed_float16": torch.float16}.get(precision)
    scaler = torch.amp.GradScaler("cuda") if precision == "mixed_float16" else None
    x = torch.rand(batch, 3, image, image, device=dev).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, classes, (batch,), device=dev)
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=amp, enabled=amp is not None):
            loss = loss_fn(step_model(x), y)
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    for _ in range(5 if not compiled else 8):
        step()
    sync()
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(2):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync()
        times.append((time.perf_counter() - t0) / steps)
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else -1
    print("RESULT " + json.dumps({"step_s": min(times), "peak_bytes": peak}), flush=True)


def torch_run(spec):
    try:
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", json.dumps(spec)],
                             capture_output=True, text=True, timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        return f"timed out after {WORKER_TIMEOUT:.0f} s"
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    return "failed: " + (out.stderr.strip().splitlines() or ["?"])[-1][:150]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=None)
    ap.add_argument("--precisions", nargs="+", default=None)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--image", type=int, default=None)
    ap.add_argument("--classes", type=int, default=1000)
    ap.add_argument("--compile", nargs="*", default=["mixed_bfloat16"],
                    help="precisions for which torch.compile is also measured (GPU)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--json", help="write the rows here")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(json.loads(args.torch_worker))

    import gpucmp
    gpus = [d for d in gpucmp.available_devices() if d.startswith("cuda")]
    device = args.device or (gpus[0] if gpus else "cpu")
    on_gpu = device.startswith("cuda")
    batches = args.batch_sizes or ([128, 256] if on_gpu else [8])
    precisions = args.precisions or (["float32", "mixed_bfloat16", "mixed_float16"] if on_gpu else ["float32"])
    image = args.image or (224 if on_gpu else 64)
    torch = None if args.no_torch else try_import_torch()
    print(header("ResNet-50 training benchmark"))
    print(f"device {device}; {image}x{image}x3, {args.classes} classes; SGD momentum 0.9; median of "
          f"{args.steps} steps" + (f"; torch {torch.__version__}" if torch else ""))
    rows = []
    for precision in precisions:
        for batch in batches:
            configs = [("gpucmp", False)]
            if torch is not None:
                configs.append(("PyTorch eager", False))
                if on_gpu and precision in (args.compile or []):
                    configs.append(("PyTorch compile", True))
            ref = None
            for name, compiled in configs:
                if name == "gpucmp":
                    try:
                        r = gpucmp_run(device, precision, batch, args.steps, image, args.classes)
                    except (MemoryError, NotImplementedError, RuntimeError, ValueError) as e:
                        r = f"{type(e).__name__}: {str(e)[:150]}"
                else:
                    r = torch_run({"device": device, "batch": batch, "steps": args.steps, "image": image,
                                   "classes": args.classes, "precision": precision, "compile": compiled})
                row = {"framework": name, "precision": precision, "batch": batch}
                if isinstance(r, str):
                    row["note"] = r
                else:
                    row["step ms"] = r["step_s"] * 1e3
                    row["img/s"] = batch / r["step_s"]
                    if r["peak_bytes"] >= 0:
                        row["peak GiB"] = r["peak_bytes"] / 2**30
                    if name == "gpucmp":
                        ref = r["step_s"]
                    elif ref:
                        row["gpucmp speed-up"] = r["step_s"] / ref
                rows.append(row)
                print(json.dumps(row), flush=True)
    print()
    cols = ["framework", "precision", "batch", "step ms", "img/s", "peak GiB", "gpucmp speed-up", "note"]
    print(table(rows, [c for c in cols if any(c in r for r in rows)]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": device, "image": image, "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
