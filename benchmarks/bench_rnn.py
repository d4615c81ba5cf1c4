"""Training step time of the seeds' recurrent programs: gpucmp.keras side by side with PyTorch.

The models of ../shared/seeds (002) at the sizes RECURRENT_SPEC.md counts them with:
Embedding(10000, 256) over sequences of 100 ids, then SimpleRNN(128) -> Dense(10000,
softmax) ("rnn", text generation) or LSTM(128) -> Dense(10, softmax) ("lstm", sequence
classification); Adam, sparse categorical cross-entropy (the seeds' one-hot labels are
the same step without a 10000-wide label array per row). Random ids, the same shapes in
every framework. Reported: the median time of one training step over --steps steps
after a warm-up, and samples/s.

gpucmp: the step of `fit` (on_train_begin to on_train_end over the steps, data resident).
PyTorch: nn.Embedding + nn.RNN(tanh) / nn.LSTM (batch_first; cuDNN on the GPU) + nn.Linear,
Adam, eager, synchronised timing; the same arithmetic (float32, TF32 off for the
recurrence: gpucmp's recurrence is exact float32).

Each measurement runs in its own process (two OpenMP runtimes in one process on a small
CPU measure their collision, see bench_cnn.py).

    python benchmarks/bench_rnn.py [--models rnn lstm] [--devices cpu cuda:0] [--batch 128]
                                   [--steps 20] [--frameworks gpucmp torch] [--json out.json]
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


def data(model, n, rng):
    x = rng.integers(0, VOCAB, (n, SEQ))
    y = rng.integers(0, VOCAB if model == "rnn" else CLASSES, n)
    return x, y


def run_gpucmp(model, device, batch, steps):
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


def run_torch(model, device, batch, steps):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    dev = torch.device("cuda" if device.startswith("cuda") else "cpu")

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
    opt = torch.optim.Adam(net.parameters(), lr=1e-3, eps=1e-7)
    rng = np.random.default_rng(0)
    x, y = data(model, batch * steps, rng)
    xs = torch.tensor(x, device=dev)
    ys = torch.tensor(y, device=dev)
    lossf = torch.nn.CrossEntropyLoss()

    def step(i):
        opt.zero_grad(set_to_none=True)
        loss = lossf(net(xs[i * batch:(i + 1) * batch]), ys[i * batch:(i + 1) * batch])
        loss.backward()
        opt.step()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for i in range(3):
        step(i)
    sync()
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
        sync()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / steps


def worker(args):
    fn = run_gpucmp if args.worker == "gpucmp" else run_torch
    t = fn(args.model, args.device, args.batch, args.steps)
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
    ap.add_argument("--models", nargs="+", default=["rnn", "lstm"], choices=("rnn", "lstm"))
    ap.add_argument("--devices", nargs="+", default=["cpu"])
    ap.add_argument("--frameworks", nargs="+", default=["gpucmp", "torch"])
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--worker", choices=("gpucmp", "torch"))
    ap.add_argument("--model", default="lstm")
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    print(header(f"Seeds' recurrent programs: training step, batch {args.batch}, {SEQ} steps"))
    rows = []
    for device in args.devices:
        for model in args.models:
            base = None
            for fw in args.frameworks:
                t, err = measure(fw, model, device, args.batch, args.steps)
                row = {"model": model, "device": device, "framework": fw,
                       "step_ms": t * 1e3 if t else None, "samples/s": args.batch / t if t else None,
                       "gpucmp speedup": None, "note": err or ""}
                if fw == "gpucmp":
                    base = t
                elif t and base:
                    row["gpucmp speedup"] = t / base
                rows.append(row)
    print(table(rows, ["model", "device", "framework", "step_ms", "samples/s", "gpucmp speedup", "note"]))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
