"""Training step time of the seeds' recurrent programs and GAN: gpucmp.keras beside PyTorch.

The models of ../shared/seeds (002) at the sizes RECURRENT_SPEC.md counts them with:
Embedding(10000, 256) over sequences of 100 ids, then SimpleRNN(128) -> Dense(10000,
softmax) ("rnn", text generation) or LSTM(128) -> Dense(10, softmax) ("lstm", sequence
classification); Adam, sparse categorical cross-entropy (the seeds' one-hot labels are
the same step without a 10000-wide label array per row). "gan": one iteration of the
seeds' GAN loop (generator Dense(128, relu) -> Dense(784, tanh) from 100-d noise,
discriminator Flatten -> Dense(128, relu) -> Dense(1, sigmoid)): generate a batch, a
discriminator step on a real and one on the generated batch, a generator step through the
frozen discriminator (Adam(2e-4, 0.5) / Adam(), binary cross-entropy). Random data, the
same shapes in every framework. Default batches: rnn 128, lstm 64, gan 128 (issue 10's
table). Reported: the median time of one step over --steps steps after a warm-up.

gpucmp: rnn / lstm the step of `fit` (on_train_begin to on_train_end over the steps, data
resident); gan the harness workload's loop (predict + three train_on_batch per iteration,
as the seed's program calls them).
PyTorch: nn.Embedding + nn.RNN(tanh) / nn.LSTM (batch_first; cuDNN on the GPU) + nn.Linear,
or the GAN's nn.Linear stacks; Adam; "torch" is eager with synchronised timing,
"torch-graph" the whole step captured once in a CUDA graph (capturable Adam) and replayed;
the same arithmetic (float32, TF32 off: gpucmp's float32 path is exact float32).

Each measurement runs in its own process (two OpenMP runtimes in one process on a small
CPU measure their collision, see bench_cnn.py).

    python benchmarks/bench_rnn.py [--models rnn lstm gan] [--devices cpu cuda:0] [--batch N]
                                   [--steps 20] [--frameworks gpucmp torch torch-graph]
                                   [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, table  # noqa: E402

VOCAB, SEQ, CLASSES, EMB, UNITS = 10000, 100, 10, 256, 128
NOISE = 100
DEFAULT_BATCH = {"rnn": 128, "lstm": 64, "gan": 128}


def data(model, n, rng):
    x = rng.integers(0, VOCAB, (n, SEQ))
    y = rng.integers(0, VOCAB if model == "rnn" else CLASSES, n)
    return x, y


def run_gpucmp_gan(device, batch, steps):
    import gpucmp
    from gpucmp.harness.workloads.base import Config
    from gpucmp.harness.workloads.gan import GanWorkload
    gpucmp.set_device(device)
    run = GanWorkload().prepare(device, Config(batch, ""), "float32")
    run.run(3)                                                          # warm-up, plans
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        run.run(steps)                  # the last train_on_batch returns its loss: the device is done
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / steps


def run_gpucmp(model, device, batch, steps):
    if model == "gan":
        return run_gpucmp_gan(device, batch, steps)
    import gpucmp
    from gpucmp import keras
    from gpucmp.harness.workloads.seeds import build_seed_lstm, build_seed_rnn
    gpucmp.set_device(device)
    build = build_seed_rnn if model == "rnn" else build_seed_lstm
    m = build(keras, loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x, y = data(model, batch * steps, rng)
    x = x.astype(np.float32)
    m.fit(x[:batch * 3], y[:batch * 3], batch_size=batch, epochs=1, verbose=0)      # warm-up, plans
    times = []

    class Stamp(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.t0 = time.perf_counter()

        def on_train_end(self, logs=None):
            times.append(time.perf_counter() - self.t0)
    for _ in range(3):
        m.fit(x, y, batch_size=batch, epochs=1, verbose=0, shuffle=False, callbacks=[Stamp()])
    return float(np.median(times)) / steps


def _torch_rnn_step(torch, model, dev, batch, steps):
    """(step(i), parameters' optimizer) for the recurrent models; step i uses batch i."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(VOCAB, EMB)
            self.rnn = (torch.nn.RNN(EMB, UNITS, batch_first=True, nonlinearity="tanh") if model == "rnn"
                        else torch.nn.LSTM(EMB, UNITS, batch_first=True))
            self.out = torch.nn.Linear(UNITS, VOCAB if model == "rnn" else CLASSES)

        def forward(self, ids):
            h, _ = self.rnn(self.emb(ids))
            return self.out(h[:, -1])
    net = Net().to(dev)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7, capturable=dev.type == "cuda")
    rng = np.random.default_rng(0)
    x, y = data(model, batch * steps, rng)
    xs = torch.tensor(x, device=dev)
    ys = torch.tensor(y, device=dev)
    lossf = torch.nn.CrossEntropyLoss()

    def step(i):
        opt.zero_grad(set_to_none=False)
        loss = lossf(net(xs[i * batch:(i + 1) * batch]), ys[i * batch:(i + 1) * batch])
        loss.backward()
        opt.step()
    return step


def _torch_gan_step(torch, dev, batch, steps):
    """One iteration of the GAN loop: G(noise) without gradients, a D step on real and one
    on fake (two Adam steps, as two train_on_batch), a G step through D (D's weights get no
    gradient, as the frozen discriminator in the combined model)."""
    nn = torch.nn
    g = nn.Sequential(nn.Linear(NOISE, 128), nn.ReLU(), nn.Linear(128, 784), nn.Tanh()).to(dev)
    d = nn.Sequential(nn.Flatten(), nn.Linear(784, 128), nn.ReLU(), nn.Linear(128, 1), nn.Sigmoid()).to(dev)
    cap = dev.type == "cuda"
    opt_d = torch.optim.Adam(d.parameters(), lr=2e-4, betas=(0.5, 0.999), eps=1e-7, capturable=cap)
    opt_g = torch.optim.Adam(g.parameters(), lr=1e-3, eps=1e-7, capturable=cap)
    rng = np.random.default_rng(0)
    real = torch.tensor(rng.uniform(-1, 1, (8 * batch, 1, 28, 28)).astype(np.float32), device=dev)
    noise = torch.tensor(rng.standard_normal((8, 2, batch, NOISE)).astype(np.float32), device=dev)
    ones, zeros = torch.ones(batch, 1, device=dev), torch.zeros(batch, 1, device=dev)
    bce = nn.BCELoss()
    g_params = list(g.parameters())

    def step(i):
        i = i % 8
        with torch.no_grad():
            fake = g(noise[i, 0])
        for imgs, target in ((real[i * batch:(i + 1) * batch], ones), (fake, zeros)):
            opt_d.zero_grad(set_to_none=False)
            bce(d(imgs), target).backward()
            opt_d.step()
        opt_g.zero_grad(set_to_none=False)
        bce(d(g(noise[i, 1])), ones).backward(inputs=g_params)
        opt_g.step()
    return step


def run_torch(model, device, batch, steps, graph=False):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")
    if graph and dev.type != "cuda":
        raise SystemExit("torch-graph needs a CUDA device")
    step = _torch_gan_step(torch, dev, batch, steps) if model == "gan" else _torch_rnn_step(torch, model, dev,
                                                                                           batch, steps)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    if graph:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(3):
                step(0)                                             # warm-up on a side stream
        torch.cuda.current_stream().wait_stream(side)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step(0)                                                 # one batch, replayed (data resident)
        run = g.replay
    else:
        for i in range(3):
            step(i)
        run = None
    sync()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(steps):
            run() if run else step(i)
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / steps


def worker(args):
    if args.worker == "gpucmp":
        t = run_gpucmp(args.model, args.device, args.batch, args.steps)
    else:
        t = run_torch(args.model, args.device, args.batch, args.steps, graph=args.worker == "torch-graph")
    print(json.dumps({"step_s": t}))


def measure(framework, model, device, batch, steps):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", framework, "--model", model, "--device", device,
           "--batch", str(batch), "--steps", str(steps)]
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=float(os.environ.get("BENCH_RNN_TIMEOUT",
                                                                                                "600")))
    except subprocess.TimeoutExpired:
        return None, "timed out"
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {out.returncode}"
    return json.loads(out.stdout.strip().splitlines()[-1])["step_s"], None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", nargs="+", default=["rnn", "lstm", "gan"], choices=("rnn", "lstm", "gan"))
    ap.add_argument("--devices", nargs="+", default=["cpu"])
    ap.add_argument("--frameworks", nargs="+", default=["gpucmp", "torch"],
                    choices=("gpucmp", "torch", "torch-graph"))
    ap.add_argument("--batch", type=int, help="batch of every model (default: rnn 128, lstm 64, gan 128)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--worker", choices=("gpucmp", "torch", "torch-graph"))
    ap.add_argument("--model", default="lstm")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    print(header(f"Seeds' recurrent programs and GAN: training step ({SEQ} time steps)"))
    rows = []
    for device in args.devices:
        for model in args.models:
            base = None
            batch = args.batch or DEFAULT_BATCH[model]
            for fw in args.frameworks:
                if fw == "torch-graph" and not device.startswith("cuda"):
                    continue
                t, err = measure(fw, model, device, batch, args.steps)
                row = {"model": model, "batch": batch, "device": device, "framework": fw,
                       "step_ms": t * 1e3 if t else None, "samples/s": batch / t if t else None,
                       "gpucmp speedup": None, "note": err or ""}
                if fw == "gpucmp":
                    base = t
                elif t and base:
                    row["gpucmp speedup"] = t / base
                rows.append(row)
    print(table(rows, ["model", "batch", "device", "framework", "step_ms", "samples/s", "gpucmp speedup", "note"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
