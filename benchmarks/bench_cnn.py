"""Training throughput of the seeds' CNN: gpucmp.keras side by side with PyTorch (and JAX).

The model of ../shared/seeds (Conv 32 -> MaxPool -> Conv 64 -> MaxPool -> Conv 64 ->
Flatten -> Dense 64 -> Dense 10, 93,322 parameters), Adam (Keras defaults), categorical
cross-entropy, one epoch of 60,000 MNIST-shaped samples (the real digits tiled), shuffled
each epoch, last partial batch kept -- the same work in every framework. Reported: epoch
time and samples/s, median over repeats (after a warm-up), and the ratio to each peer;
for gpucmp also the time per step inside fit (on_train_begin to on_train_end over the
steps: no data upload, the quantity gpucmp.benchmark() reports for a model).

CPU: gpucmp vs PyTorch eager (same threads). GPU (when gpucmp has a CUDA device): gpucmp
vs PyTorch eager (cudnn.benchmark on), PyTorch with the whole step captured in a CUDA
graph (Adam(capturable=True)), and JAX with the step under jax.jit (when jax is
importable; its column is left out otherwise).

Precisions (--precision, default float32):
- float32: gpucmp's default (TF32 allowed for GEMM/conv on the GPU, as TensorFlow does);
  PyTorch and JAX likewise allowed TF32 (torch.backends.{cuda.matmul,cudnn}.allow_tf32,
  JAX's default matmul precision) so all three do the same arithmetic.
- mixed_float16: gpucmp under keras.mixed_precision.set_global_policy('mixed_float16');
  PyTorch eager under torch.autocast(device_type='cuda', dtype=torch.float16) with a
  GradScaler (dynamic loss scaling); PyTorch graph and JAX with float16 compute, float32
  master weights and a static loss scale of 1024 (GradScaler's skip-on-overflow syncs
  the host, which a captured graph cannot do). GPU only: CPU rows stay float32.

Each measurement runs in its own Python process: PyTorch ships its own OpenMP runtime,
and two OpenMP runtimes spin-waiting in one process on 2 cores slow both down by an
order of magnitude, which would measure the collision rather than the frameworks.

    python benchmarks/bench_cnn.py [--batch-sizes 32 128] [--samples 60000] [--repeats 3]
                                   [--devices cpu cuda:0] [--precision float32 mixed_float16]
"""
import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, table, try_import_torch  # noqa: E402

import gpucmp  # noqa: E402
from gpucmp import keras  # noqa: E402

PRECISIONS = ("float32", "mixed_float16")
STATIC_LOSS_SCALE = 1024.0
WORKER_TIMEOUT = float(os.environ.get("BENCH_CNN_WORKER_TIMEOUT", "300"))
WARMUP_BATCHES = 30   # warm-up: this many full batches and the partial last one


def mnist_shaped(n, rng):
    """n images (n, 28, 28, 1) in [0, 1] and one-hot labels: the real digits, tiled."""
    try:
        from gpucmp.datasets import load_digits_mnist
        (x, y), _ = load_digits_mnist()
        idx = rng.integers(0, len(x), n)
        x = x[idx].reshape(n, 28, 28, 1).astype(np.float32) / 255.0
        y = np.asarray(y)[idx]
    except ImportError:
        x = rng.random((n, 28, 28, 1), dtype=np.float32)
        y = rng.integers(0, 10, n)
    return x, np.eye(10, dtype=np.float32)[y]


def warmup_rows(n, batch_size):
    """Rows of the warm-up: WARMUP_BATCHES full batches plus a partial one when the epoch has one."""
    rows = min(n, WARMUP_BATCHES * batch_size)
    return rows + (n % batch_size if rows < n else 0)


# ------------------------------------------------------------------ gpucmp
def gpucmp_epoch(device, x, y, batch_size, repeats, precision):
    gpucmp.set_device(device)
    keras.mixed_precision.set_global_policy(precision)
    from gpucmp.harness.workloads.seeds import build_seed_cnn
    model = build_seed_cnn(keras)
    w = warmup_rows(len(x), batch_size)
    model.fit(x[:w], y[:w], batch_size=batch_size, epochs=1, verbose=0)  # plan built, kernels loaded
    stamps = {}

    class Stamp(keras.callbacks.Callback):        # inside fit, as gpucmp.benchmark() times a model
        def on_train_begin(self, logs=None):
            stamps["begin"] = time.perf_counter()

        def on_train_end(self, logs=None):
            stamps["end"] = time.perf_counter()
    times, inside = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0, callbacks=[Stamp()])
        times.append(time.perf_counter() - t0)
        inside.append(stamps["end"] - stamps["begin"])
    steps = -(-len(x) // batch_size)
    return float(np.median(times)), float(np.median(inside)) / steps


# ------------------------------------------------------------------ PyTorch
def torch_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(576, 64), nn.ReLU(), nn.Linear(64, 10))


def torch_epoch(torch, device, x, y, batch_size, repeats, graph=False, precision="float32"):
    dev = torch.device(device)
    mixed = precision == "mixed_float16"
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    elif mixed:
        raise ValueError("mixed_float16 is measured on GPUs only")
    model = torch_model(torch).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7, capturable=graph)
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(dev)
    yt = torch.from_numpy(y.argmax(1)).to(dev)
    n = len(xt)
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    params = [p for p in model.parameters()]
    scaler = None
    if mixed and not graph:
        scaler = torch.amp.GradScaler("cuda") if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler") \
            else torch.cuda.amp.GradScaler()

    def step(xb, yb):
        opt.zero_grad(set_to_none=False)
        if not mixed:
            loss = loss_fn(model(xb), yb)
            loss.backward()
            opt.step()
            return loss
        # (no autocast weight-cast cache under graph capture: PyTorch's rule for graphs)
        with torch.autocast(device_type="cuda", dtype=torch.float16, cache_enabled=not graph):
            loss = loss_fn(model(xb).float(), yb)
        if scaler is not None:                        # eager: dynamic loss scaling
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:                                         # graph: static loss scale, no host sync
            (loss * STATIC_LOSS_SCALE).backward()
            torch._foreach_mul_([p.grad for p in params], 1.0 / STATIC_LOSS_SCALE)
            opt.step()
        return loss

    if graph:
        # whole step captured once for the full batch size; the partial last batch runs eagerly
        sx = xt[:batch_size].clone()
        sy = yt[:batch_size].clone()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step(sx, sy)
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_loss = step(sx, sy)

    def epoch(rows):
        perm = torch.randperm(n, device=dev)[:rows]
        for i in range(0, rows, batch_size):
            idx = perm[i:i + batch_size]
            if graph and len(idx) == batch_size:
                sx.copy_(xt[idx])
                sy.copy_(yt[idx])
                g.replay()
            else:
                step(xt[idx], yt[idx])
        sync()

    epoch(warmup_rows(n, batch_size))  # warm-up (allocator, cuDNN autotune, the partial batch's shapes)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        epoch(n)
        times.append(time.perf_counter() - t0)
    if graph:
        del static_loss
    return float(np.median(times))


# ------------------------------------------------------------------ JAX
def jax_epoch(device, x, y, batch_size, repeats, precision):
    """The same model, loss and Keras' Adam in plain JAX, one jax.jit'ed step per batch."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    platform = "gpu" if device.startswith("cuda") else "cpu"
    if platform == "cpu" and precision != "float32":
        raise ValueError("mixed_float16 is measured on GPUs only")
    dev = jax.devices(platform)[0]
    cdt = jnp.float16 if precision == "mixed_float16" else jnp.float32
    scale = STATIC_LOSS_SCALE if precision == "mixed_float16" else 1.0
    rng = np.random.default_rng(0)

    def glorot(shape, fan_in, fan_out):
        lim = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-lim, lim, shape).astype(np.float32)

    shapes = [((3, 3, 1, 32), 9, 288), ((3, 3, 32, 64), 288, 576), ((3, 3, 64, 64), 576, 576),
              ((576, 64), 576, 64), ((64, 10), 64, 10)]
    params = [(glorot(s, a, b), np.zeros(s[-1], np.float32)) for s, a, b in shapes]
    params = jax.device_put(params, dev)
    zeros = jax.tree_util.tree_map(jnp.zeros_like, params)
    m, v = zeros, jax.tree_util.tree_map(jnp.zeros_like, params)

    def forward(p, xb):
        h = xb.astype(cdt)
        for i, (w, b) in enumerate(p[:3]):
            h = lax.conv_general_dilated(h, w.astype(cdt), (1, 1), "VALID",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
            h = jax.nn.relu(h + b.astype(cdt))
            if i < 2:
                h = lax.reduce_window(h, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        h = h.reshape(h.shape[0], -1)
        h = jax.nn.relu(h @ p[3][0].astype(cdt) + p[3][1].astype(cdt))
        return (h @ p[4][0].astype(cdt) + p[4][1].astype(cdt)).astype(jnp.float32)

    def loss_fn(p, xb, yb):
        logp = jax.nn.log_softmax(forward(p, xb))
        return -jnp.mean(jnp.sum(yb * logp, axis=-1)) * scale

    @jax.jit
    def step(p, m, v, t, xs, ys, idx):
        xb, yb = xs[idx], ys[idx]
        g = jax.grad(loss_fn)(p, xb, yb)
        g = jax.tree_util.tree_map(lambda a: a / scale, g)
        b1, b2, lr, eps = 0.9, 0.999, 1e-3, 1e-7
        m = jax.tree_util.tree_map(lambda m_, g_: b1 * m_ + (1 - b1) * g_, m, g)
        v = jax.tree_util.tree_map(lambda v_, g_: b2 * v_ + (1 - b2) * g_ * g_, v, g)
        alpha = lr * jnp.sqrt(1 - b2 ** t) / (1 - b1 ** t)
        p = jax.tree_util.tree_map(lambda w, m_, v_: w - alpha * m_ / (jnp.sqrt(v_) + eps), p, m, v)
        return p, m, v, t + 1

    xs = jax.device_put(x, dev)
    ys = jax.device_put(y, dev)
    n = len(x)
    state = [params, m, v, jax.device_put(jnp.float32(1.0), dev)]
    key = jax.random.PRNGKey(0)

    def epoch(rows):
        nonlocal key
        key, sub = jax.random.split(key)
        perm = jax.device_put(jax.random.permutation(sub, n)[:rows], dev)
        for i in range(0, rows, batch_size):
            state[:] = step(*state, xs, ys, perm[i:i + batch_size])
        jax.block_until_ready(state)

    epoch(warmup_rows(n, batch_size))  # compiles the full and the partial batch's step
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        epoch(n)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


# ------------------------------------------------------------------ processes
def worker(args):
    """One measurement in this process; prints one JSON line."""
    rng = np.random.default_rng()
    x, y = mnist_shaped(args.samples, rng)
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    step = None
    if args.framework == "gpucmp":
        t, step = gpucmp_epoch(args.device, x, y, args.batch, args.repeats, args.precision)
    elif args.framework == "jax":
        t = jax_epoch(args.device, x, y, args.batch, args.repeats, args.precision)
    else:
        torch = try_import_torch()
        torch.set_num_threads(threads)
        t = torch_epoch(torch, "cpu" if args.device == "cpu" else "cuda", x, y, args.batch, args.repeats,
                        graph=args.framework == "torch-graph", precision=args.precision)
    print("RESULT " + json.dumps({"seconds": t, "step_seconds": step}), flush=True)


def measure(framework, device, batch, precision, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--device", device,
           "--batch", str(batch), "--samples", str(args.samples), "--repeats", str(args.repeats),
           "--precision", precision]
    env = dict(os.environ)
    if framework == "jax":
        env.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
        if device == "cpu":
            env.setdefault("JAX_PLATFORMS", "cpu")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=WORKER_TIMEOUT)
    except subprocess.TimeoutExpired:
        print(f"{framework} on {device} (batch {batch}, {precision}) timed out after {WORKER_TIMEOUT:.0f} s")
        return None
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            r = json.loads(line[7:])
            return (r["seconds"], r["step_seconds"]) if framework == "gpucmp" else r["seconds"]
    print(f"{framework} on {device} (batch {batch}, {precision}) failed:\n{out.stdout[-2000:]}{out.stderr[-4000:]}")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", nargs="+", default=None, help="default: cpu and the first GPU")
    ap.add_argument("--precision", nargs="+", choices=PRECISIONS, default=["float32"],
                    help="float32 and/or mixed_float16 (mixed: GPU only)")
    ap.add_argument("--frameworks", nargs="+", default=None,
                    help="subset of gpucmp torch torch-graph jax (default: all that can run)")
    ap.add_argument("--worker", choices=["gpucmp", "torch", "torch-graph", "jax"], help=argparse.SUPPRESS)
    ap.add_argument("--device", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.framework = args.worker
        args.precision = args.precision[0]
        return worker(args)
    torch = try_import_torch()
    has_jax = importlib.util.find_spec("jax") is not None
    wanted = set(args.frameworks or ["gpucmp", "torch", "torch-graph", "jax"])
    devices = args.devices or (["cpu"] + [d for d in gpucmp.available_devices() if d.startswith("cuda")][:1])
    print(header(f"Seeds' CNN training, one epoch of {args.samples:,} samples"))
    versions = [f"gpucmp {gpucmp.__version__}"]
    if torch is not None:
        versions.append(f"torch {torch.__version__}")
    if has_jax and "jax" in wanted:
        try:
            import jax
            versions.append(f"jax {jax.__version__}")
        except Exception:  # noqa: BLE001
            has_jax = False
    print(", ".join(versions) + f"; median of {args.repeats} epochs after a warm-up; Adam; batch as given")
    rows = []
    for device in devices:
        gpu = device != "cpu"
        torch_ok = torch is not None and (not gpu or torch.cuda.is_available())
        for precision in args.precision:
            if precision != "float32" and not gpu:
                print(f"({precision} is measured on GPUs only: no {device} row)")
                continue
            for bs in args.batch_sizes:
                row = {"device": device, "precision": precision, "batch": bs}
                r = measure("gpucmp", device, bs, precision, args) if "gpucmp" in wanted else None
                t = r[0] if r else None
                if t:
                    row["gpucmp s/epoch"] = t
                    row["gpucmp samples/s"] = args.samples / t
                    row["gpucmp ms/step in fit"] = r[1] * 1e3
                    row["gpucmp samples/s in fit"] = bs / r[1]
                peers = [("torch", "torch eager", torch_ok), ("torch-graph", "torch graph", torch_ok and gpu),
                         ("jax", "jax jit", has_jax)]
                for fw, label, ok in peers:
                    if not ok or fw not in wanted:
                        continue
                    tp = measure(fw, device, bs, precision, args)
                    if tp:
                        row[f"{label} s/epoch"] = tp
                        row[f"{label} samples/s"] = args.samples / tp
                        if t:
                            row[f"gpucmp / {label} (speed)"] = tp / t
                rows.append(row)
                print(row, flush=True)
    cols = ["device", "precision", "batch", "gpucmp s/epoch", "gpucmp samples/s", "gpucmp ms/step in fit",
            "gpucmp samples/s in fit"]
    for label in ("torch eager", "torch graph", "jax jit"):
        if any(f"{label} s/epoch" in r for r in rows):
            cols += [f"{label} s/epoch", f"gpucmp / {label} (speed)"]
    print()
    print(table(rows, cols))


if __name__ == "__main__":
    main()
