"""Training throughput of the seeds' CNN: gpucmp.keras side by side with PyTorch.

The model of ../shared/seeds (Conv 32 -> MaxPool -> Conv 64 -> MaxPool -> Conv 64 ->
Flatten -> Dense 64 -> Dense 10, 93,322 parameters), Adam (Keras defaults), categorical
cross-entropy, one epoch of 60,000 MNIST-shaped samples (the real digits tiled), shuffled
each epoch, last partial batch kept -- the same work in every framework. Reported: epoch
time and samples/s, median over repeats, and the ratio to each peer.

CPU: gpucmp vs PyTorch eager (same threads). GPU (when gpucmp has a CUDA device): gpucmp
vs PyTorch eager and PyTorch with the whole step captured in a CUDA graph.

Each measurement runs in its own Python process: PyTorch ships its own OpenMP runtime,
and two OpenMP runtimes spin-waiting in one process on 2 cores slow both down by an
order of magnitude, which would measure the collision rather than the frameworks.

    python benchmarks/bench_cnn.py [--batch-sizes 32 128] [--samples 60000] [--repeats 3]
"""
import argparse
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


def gpucmp_epoch(device, x, y, batch_size, repeats):
    gpucmp.set_device(device)
    from gpucmp.__main__ import build_seed_cnn
    model = build_seed_cnn(keras)
    model.fit(x[: batch_size * 3], y[: batch_size * 3], batch_size=batch_size, epochs=1, verbose=0)  # plan built
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        model.fit(x, y, batch_size=batch_size, epochs=1, verbose=0)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def torch_model(torch):
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(), nn.Flatten(),
        nn.Linear(576, 64), nn.ReLU(), nn.Linear(64, 10))


def torch_epoch(torch, device, x, y, batch_size, repeats, graph=False):
    dev = torch.device(device)
    model = torch_model(torch).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, eps=1e-7)
    xt = torch.from_numpy(np.ascontiguousarray(x.transpose(0, 3, 1, 2))).to(dev)
    yt = torch.from_numpy(y.argmax(1)).to(dev)
    n = len(xt)
    loss_fn = torch.nn.CrossEntropyLoss()
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)

    def step(xb, yb):
        opt.zero_grad(set_to_none=False)
        loss = loss_fn(model(xb), yb)
        loss.backward()
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

    def epoch():
        perm = torch.randperm(n, device=dev)
        for i in range(0, n, batch_size):
            idx = perm[i:i + batch_size]
            if graph and len(idx) == batch_size:
                sx.copy_(xt[idx])
                sy.copy_(yt[idx])
                g.replay()
            else:
                step(xt[idx], yt[idx])
        sync()

    epoch()  # warm-up (allocator, cuDNN autotune)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        epoch()
        times.append(time.perf_counter() - t0)
    if graph:
        del static_loss
    return float(np.median(times))


def worker(args):
    """One measurement in this process; prints one JSON line."""
    rng = np.random.default_rng()
    x, y = mnist_shaped(args.samples, rng)
    threads = int(os.environ.get("OMP_NUM_THREADS", os.cpu_count()))
    if args.framework == "gpucmp":
        t = gpucmp_epoch(args.device, x, y, args.batch, args.repeats)
    else:
        torch = try_import_torch()
        torch.set_num_threads(threads)
        t = torch_epoch(torch, "cpu" if args.device == "cpu" else "cuda", x, y, args.batch, args.repeats,
                        graph=args.framework == "torch-graph")
    print("RESULT " + json.dumps({"seconds": t}), flush=True)


def measure(framework, device, batch, args):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--device", device,
           "--batch", str(batch), "--samples", str(args.samples), "--repeats", str(args.repeats)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])["seconds"]
    print(f"{framework} on {device} (batch {batch}) failed:\n{out.stdout[-2000:]}{out.stderr[-4000:]}")
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[32, 128])
    ap.add_argument("--samples", type=int, default=60000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--devices", nargs="+", default=None, help="default: cpu and the first GPU")
    ap.add_argument("--worker", choices=["gpucmp", "torch", "torch-graph"], help=argparse.SUPPRESS)
    ap.add_argument("--device", help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.framework = args.worker
        return worker(args)
    torch = try_import_torch()
    devices = args.devices or (["cpu"] + [d for d in gpucmp.available_devices() if d.startswith("cuda")][:1])
    print(header(f"Seeds' CNN training, one epoch of {args.samples:,} samples"))
    if torch is not None:
        print(f"torch {torch.__version__}")
    rows = []
    for device in devices:
        for bs in args.batch_sizes:
            row = {"device": device, "batch": bs}
            t = measure("gpucmp", device, bs, args)
            if t:
                row["gpucmp s/epoch"] = t
                row["gpucmp samples/s"] = args.samples / t
            if torch is not None and (device == "cpu" or torch.cuda.is_available()):
                te = measure("torch", device, bs, args)
                if te:
                    row["torch eager s/epoch"] = te
                    row["torch eager samples/s"] = args.samples / te
                    if t:
                        row["gpucmp / torch eager (speed)"] = te / t
                if device != "cpu":
                    tg = measure("torch-graph", device, bs, args)
                    if tg:
                        row["torch graph s/epoch"] = tg
                        if t:
                            row["gpucmp / torch graph (speed)"] = tg / t
            rows.append(row)
            print(row, flush=True)
    cols = ["device", "batch", "gpucmp s/epoch", "gpucmp samples/s", "torch eager s/epoch",
            "torch eager samples/s", "gpucmp / torch eager (speed)", "torch graph s/epoch",
            "gpucmp / torch graph (speed)"]
    print()
    print(table(rows, cols))


if __name__ == "__main__":
    main()
