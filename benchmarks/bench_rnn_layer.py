"""One recurrent LAYER, forward and forward+backward: gpucmp side by side with PyTorch.

Issue 10, deliverable 7. LSTM, GRU (reset_after=True, Keras' default; PyTorch's nn.GRU
computes the same cell) and SimpleRNN (tanh) at batch 64, 100 steps, 256 inputs, 128
units, float32, return_sequences=False -- the shape RECURRENT_SPEC.md 2.2 counts.

Two measurements per layer:
- forward: gpucmp `Sequential([Input((T, in)), LSTM(u)]).predict_on_batch(x)` (one plan
  call; on a GPU it includes uploading x, which PyTorch's resident tensor does not: the
  note column says so, and "device ms" gives the forward's ops on the device alone, each
  timed synchronised by Plan.profile and summed); PyTorch `with torch.no_grad(): layer(x)`.
- forward+backward: gpucmp one `fit` step (SGD, MSE on the final h) on resident data, the
  time of `fit` over --steps batches divided by them; PyTorch forward, MSE on the final h,
  backward, SGD step.
Each worker: median of --repeats timed repeats after warm-up, synchronised on CUDA. The
whole set of workers runs --rounds times, alternating, so that a shared machine's noise
hits every framework alike; the table gives the median over rounds, and each ratio is the
median over rounds of the ratio of the two workers measured next to each other.

Devices (--devices cpu cuda:0): on CUDA PyTorch runs eager and with the whole step captured
in a CUDA graph ("torch-graph"). TF32 is off for matmuls and cuDNN by default (exact fp32
against exact fp32; gpucmp's recurrence is exact fp32 and its GEMMs follow
gpucmp.config's TF32 switch, set the same way); --allow-tf32 turns it on in both. The
table records torch.backends.cudnn.allow_tf32. --rnn-variants forces the `cuda.rnn`
variant point per gpucmp run on CUDA where the build has it (names it lacks are skipped);
the name "cudnn" instead forces `cuda.rnn.impl=cudnn`: the layer runs through cuDNN's RNN
API inside gpucmp (the baseline of gpucmp's own kernels; exact fp32, CUDNN_FMA_MATH), so
the table shows gpucmp's kernels, gpucmp-through-cuDNN and PyTorch side by side. Its
"device ms" is left empty: the cuDNN calls are not plan ops, which Plan.profile times.

Each framework/device/measurement runs in its own subprocess: PyTorch's and gpucmp's
OpenMP runtimes spin-waiting in one process on a small CPU measure their collision (see
bench_cnn.py). --torch-python runs the PyTorch workers with another interpreter;
--gpucmp-builds NAME=DIR adds gpucmp builds (DIR on PYTHONPATH) as extra columns, for
before/after comparisons in one run. Ratios are PyTorch time / gpucmp time (> 1: gpucmp
faster), against eager PyTorch and (CUDA) the captured graph on the same device.

    python benchmarks/bench_rnn_layer.py [--layers lstm gru simple] [--devices cpu cuda:0]
        [--repeats 5] [--steps 5] [--rnn-variants auto stepwise persistent cudnn] [--allow-tf32]
        [--torch-python PY] [--gpucmp-builds before=/tmp/old] [--json out.json]
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
from common import header, table, timeit  # noqa: E402

LAYERS = ("lstm", "gru", "simple")
MODES = ("fwd", "fwd+bwd")
RNN_POINT = "cuda.rnn"
IMPL_POINT = "cuda.rnn.impl"   # --rnn-variants cudnn: the layer through cuDNN's RNN API
LR = 0.01


def data(shape, rng):
    b, t, i, u = shape
    x = rng.standard_normal((b, t, i), dtype=np.float32)
    y = rng.standard_normal((b, u), dtype=np.float32) * 0.1
    return x, y


# ------------------------------------------------------------------ workers

def run_gpucmp(a):
    import gpucmp
    from gpucmp import keras
    gpucmp.set_device(a.device)
    if a.device != "cpu":
        gpucmp.config.set_tf32(a.allow_tf32)
    if a.variant != "auto":
        from gpucmp import variants
        if a.variant == "cudnn":
            variants.force(IMPL_POINT, "cudnn")
        else:
            variants.force(RNN_POINT, a.variant)
    b, t, i, u = a.shape
    cls = {"lstm": keras.layers.LSTM, "gru": keras.layers.GRU, "simple": keras.layers.SimpleRNN}[a.layer]
    kw = {"reset_after": True} if a.layer == "gru" else {}
    m = keras.Sequential([keras.Input((t, i)), cls(u, **kw)])
    m.compile(optimizer=keras.optimizers.SGD(LR), loss="mse")
    rng = np.random.default_rng(0)
    if a.mode == "fwd":
        x, y = data(a.shape, rng)
        med, lo, hi = timeit(lambda: m.predict_on_batch(x), repeats=a.repeats, warmup=a.warmup)
        out = {"s": med, "min": lo, "max": hi}
        if a.device != "cpu" and a.variant != "cudnn":
            # the forward on the device alone: the plan's forward-phase ops, each timed
            # synchronised (Plan.profile), summed -- no upload of x, as PyTorch's resident x
            plan = m._train_plan(b, m._train_config(y.shape), [x])
            hp = m.optimizer.hparams()
            plan.profile(x, y, hp)
            sums = [sum(e["seconds"] for e in plan.profile(x, y, hp) if e["phase"] == "forward")
                    for _ in range(a.repeats)]
            out["device_s"] = statistics.median(sums)
        return out
    xs, ys = zip(*(data(a.shape, rng) for _ in range(a.steps)))
    x, y = np.concatenate(xs), np.concatenate(ys)
    m.fit(x, y, batch_size=b, epochs=1, verbose=0, shuffle=False)          # warm-up: plans, data
    times = []

    class Stamp(keras.callbacks.Callback):
        def on_train_begin(self, logs=None):
            self.t0 = time.perf_counter()

        def on_train_end(self, logs=None):
            times.append((time.perf_counter() - self.t0) / a.steps)
    for _ in range(a.repeats):
        m.fit(x, y, batch_size=b, epochs=1, verbose=0, shuffle=False, callbacks=[Stamp()])
    return {"s": statistics.median(times), "min": min(times), "max": max(times)}


def run_torch(a, graph):
    import torch
    torch.backends.cuda.matmul.allow_tf32 = a.allow_tf32
    torch.backends.cudnn.allow_tf32 = a.allow_tf32
    dev = torch.device(a.device)
    cuda = dev.type == "cuda"
    b, t, i, u = a.shape
    torch.manual_seed(0)
    layer = {"lstm": lambda: torch.nn.LSTM(i, u, batch_first=True),
             "gru": lambda: torch.nn.GRU(i, u, batch_first=True),
             "simple": lambda: torch.nn.RNN(i, u, batch_first=True, nonlinearity="tanh")}[a.layer]().to(dev)
    opt = torch.optim.SGD(layer.parameters(), lr=LR)
    x, y = (torch.tensor(v, device=dev) for v in data(a.shape, np.random.default_rng(0)))
    lossf = torch.nn.MSELoss()

    def fwd():
        with torch.no_grad():
            return layer(x)[1]

    def train():
        opt.zero_grad(set_to_none=False)       # gradients stay allocated: capturable
        h = layer(x)[1]
        h = (h[0] if isinstance(h, tuple) else h)[-1]
        loss = lossf(h, y)
        loss.backward()
        opt.step()
    step = fwd if a.mode == "fwd" else train
    sync = torch.cuda.synchronize if cuda else None
    if graph:
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(3):
                step()
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            step()
        step = g.replay
    med, lo, hi = timeit(step, repeats=a.repeats, warmup=a.warmup, sync=sync)
    return {"s": med, "min": lo, "max": hi, "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
            "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32, "torch": torch.__version__,
            "threads": torch.get_num_threads()}


def worker(a):
    if a.worker == "gpucmp":
        r = run_gpucmp(a)
    else:
        r = run_torch(a, graph=a.worker == "torch-graph")
    print(json.dumps(r))


# ------------------------------------------------------------------ driver

def measure(a, fw, layer, device, mode, variant="auto", path=None):
    py = a.torch_python if fw.startswith("torch") and a.torch_python else sys.executable
    cmd = [py, os.path.abspath(__file__), "--worker", "gpucmp" if path is not None else fw, "--layer", layer,
           "--device", device, "--mode", mode, "--variant", variant, "--repeats", str(a.repeats),
           "--warmup", str(a.warmup), "--steps", str(a.steps), "--shape", *map(str, a.shape)]
    if a.allow_tf32:
        cmd.append("--allow-tf32")
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, env=env,
                             timeout=float(os.environ.get("BENCH_RNN_TIMEOUT", "900")))
    except subprocess.TimeoutExpired:
        return None, "timed out"
    if out.returncode != 0:
        lines = (out.stderr or out.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {out.returncode}"
    return json.loads(out.stdout.strip().splitlines()[-1]), None


def rnn_variants(device, wanted, path):
    """The --rnn-variants names this build has at cuda.rnn, and "cudnn" where cuda.rnn.impl
    has it (['auto'] without the points)."""
    if device == "cpu":
        return ["auto"]
    code = ("import json, gpucmp; from gpucmp import variants; pts = variants.points(); "
            f"p, q = pts.get({RNN_POINT!r}), pts.get({IMPL_POINT!r}); "
            "print(json.dumps((p['available'] if p else []) + "
            "(['cudnn'] if q and 'cudnn' in q['available'] else [])))")
    env = dict(os.environ)
    if path:
        env["PYTHONPATH"] = path + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    have = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 and out.stdout.strip() else []
    return [v for v in wanted if v == "auto" or v in have] or ["auto"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", nargs="+", default=list(LAYERS), choices=LAYERS)
    ap.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    ap.add_argument("--devices", nargs="+", default=["cpu"])
    ap.add_argument("--frameworks", nargs="+", default=["gpucmp", "torch", "torch-graph"],
                    help="subset of gpucmp torch torch-graph (torch-graph on CUDA only)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3,
                    help="every measurement this many times, alternating; ms and ratios are medians over rounds")
    ap.add_argument("--steps", type=int, default=5, help="fit steps per timed repeat (fwd+bwd)")
    ap.add_argument("--shape", type=int, nargs=4, default=[64, 100, 256, 128], metavar=("B", "T", "IN", "U"))
    ap.add_argument("--rnn-variants", nargs="+", default=["auto"])
    ap.add_argument("--allow-tf32", action="store_true")
    ap.add_argument("--torch-python", help="interpreter for the PyTorch workers (default: this one)")
    ap.add_argument("--gpucmp-builds", nargs="*", default=[], metavar="NAME=DIR",
                    help="extra gpucmp builds measured as their own rows (DIR holds the gpucmp package)")
    ap.add_argument("--json")
    ap.add_argument("--worker", choices=("gpucmp", "torch", "torch-graph"))
    ap.add_argument("--layer", default="lstm")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--mode", default="fwd")
    ap.add_argument("--variant", default="auto")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    if a.repeats < 1 or a.rounds < 1 or a.steps < 1 or a.warmup < 0 or min(a.shape) < 1:
        ap.error("--repeats, --rounds, --steps and the shape must be >= 1, --warmup >= 0")
    builds = [("gpucmp", None)]
    for spec in a.gpucmp_builds:
        name, sep, path = spec.partition("=")
        if not sep or not os.path.isdir(os.path.join(path, "gpucmp")):
            ap.error(f"--gpucmp-builds {spec!r}: expected NAME=DIR with DIR/gpucmp a package")
        builds.append((f"gpucmp:{name}", os.path.abspath(path)))
    b, t, i, u = a.shape
    print(header(f"Recurrent layer: batch {b}, {t} steps, input {i}, {u} units, float32, "
                 f"return_sequences=False (TF32 {'allowed' if a.allow_tf32 else 'off'})"))
    # the runs of each (device, layer, mode) group, measured --rounds times, alternating
    groups = []
    for device in a.devices:
        variants_of = {path: rnn_variants(device, a.rnn_variants, path) for _, path in builds}
        for layer in a.layers:
            for mode in a.modes:
                runs = []
                for fw in a.frameworks:
                    if fw == "torch-graph" and device == "cpu":
                        continue
                    if fw == "gpucmp":
                        runs += [(name, path, v) for name, path in builds for v in variants_of[path]]
                    else:
                        runs.append((fw, None, "auto"))
                groups.append((device, layer, mode, runs, [[] for _ in runs]))
    for _ in range(a.rounds):
        for device, layer, mode, runs, results in groups:
            for (name, path, v), res in zip(runs, results):
                res.append(measure(a, name if path is None else "gpucmp", layer, device, mode, v, path))
    rows = []
    for device, layer, mode, runs, results in groups:
        by_name = {(name, v): res for (name, _, v), res in zip(runs, results)}
        for (name, _, v), res in zip(runs, results):
            ok = [r for r, _ in res if r]
            errs = [e for _, e in res if e]
            med = statistics.median(r["s"] for r in ok) if ok else None
            note = errs[-1] if errs else ""
            if ok and name.startswith("gpucmp") and device != "cpu" and mode == "fwd":
                note = note or "includes the x upload"
            if ok and name == "torch":
                note = note or f"torch {ok[0]['torch']}, {ok[0]['threads']} threads"
            row = {"layer": layer, "device": device, "mode": mode, "framework": name,
                   "rnn variant": v if name.startswith("gpucmp") and device != "cpu" else "",
                   "ms": med * 1e3 if ok else None,
                   "min ms": min(r["min"] for r in ok) * 1e3 if ok else None,
                   "device ms": (statistics.median(r["device_s"] for r in ok) * 1e3
                                 if ok and "device_s" in ok[0] else None),
                   "rounds": len(ok), "ms rounds": [r["s"] * 1e3 for r in ok],
                   "torch/gpucmp": None, "torch-graph/gpucmp": None,
                   "cudnn tf32": ok[0].get("cudnn_allow_tf32", "") if ok else "", "note": note}
            if name.startswith("gpucmp"):
                # per round: the peer's time over this run's, measured next to each other
                for peer, col in (("torch", "torch/gpucmp"), ("torch-graph", "torch-graph/gpucmp")):
                    pres = by_name.get((peer, "auto"), [])
                    ratios = [p["s"] / r["s"] for (r, _), (p, _) in zip(res, pres) if r and p]
                    row[col] = statistics.median(ratios) if ratios else None
                    row[col + " rounds"] = ratios       # the spread: in the JSON, not the table
            rows.append(row)
    print(table(rows, ["layer", "device", "mode", "framework", "rnn variant", "ms", "min ms", "device ms", "rounds",
                       "torch/gpucmp", "torch-graph/gpucmp", "cudnn tf32", "note"]))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"shape": a.shape, "allow_tf32": a.allow_tf32, "repeats": a.repeats, "steps": a.steps,
                       "rounds": a.rounds,
                       "header": header("bench_rnn_layer"), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
