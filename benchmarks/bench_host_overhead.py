"""Host overhead of the Keras single-batch calls: microseconds per call of the GAN loop's
three kinds of call, and of the front end alone (the plan stubbed out), on tiny batches.

What it measures: the seeds' GAN (seeds.build_seed_gan; the discriminator compiled with
Adam, as the harness loop does) at --batch rows (default 2, so the math is negligible
next to the host work), per build:
- generator.predict(noise, batch_size=b, verbose=0)
- discriminator.train_on_batch(real, ones)
- gan.train_on_batch(noise, ones)            (through the frozen discriminator)
each as the median over --repeats of the mean over --calls calls ("total"), and the same
call with the model's cached plan swapped for a stub that returns the real plan's last
result at once ("python": what the Keras front end costs per call -- argument and data
checks, plan lookup, result formatting -- without the math, whose time on a shared CPU is
noisier than the overhead itself).

Why it is built this way: a before/after comparison in ONE run on a shared machine -- each
build (--gpucmp-builds NAME=DIR puts DIR first on PYTHONPATH; "this" is the tree holding
this file) runs in its own subprocess, and the set of builds runs --rounds times,
alternating, the table giving the median over rounds. OMP_NUM_THREADS defaults to 1 so an
OpenMP team spinning up per op does not dominate a 2-row batch.

    python benchmarks/bench_host_overhead.py [--batch 2] [--calls 300] [--repeats 5]
        [--rounds 3] [--device cpu] [--gpucmp-builds before=/tmp/old] [--json out.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CALLS = ("generator.predict", "discriminator.train_on_batch", "gan.train_on_batch")


def _models(keras):
    from gpucmp.harness.workloads.seeds import build_seed_gan
    generator, discriminator, gan = build_seed_gan(keras)
    discriminator.trainable = True       # the loop's own discriminator compile (tf.keras 2 snapshot)
    discriminator.compile(loss="binary_crossentropy", optimizer=keras.optimizers.Adam(2e-4, beta_1=0.5))
    return generator, discriminator, gan


class _StubPlan:
    """Stands in for a cached plan: its step methods return the real plan's result of one
    call (predict a fresh array, as the real one allocates its output per call)."""

    def __init__(self, plan, x, y, hp):
        self._plan = plan
        if y is None:
            out = plan.predict(x)
            self.predict = lambda x: np.empty_like(out)
        else:
            stats = plan.train_step(x, y, hp, 0)
            self.train_step = lambda x, y, hp, seed=0: dict(stats)

    def __getattr__(self, name):
        return getattr(self._plan, name)


def _stub_only_plan(model, cache, x, y=None, hp=None):
    """Swaps the one plan in a model's PlanCache for a _StubPlan; returns a function putting
    it back. A build that keeps plans per call signature (model._calls) forgets them on
    both swaps, so that its next call looks the plan up again."""
    entries = [(by_size, mb) for by_size in cache._plans.values() for mb in by_size]
    assert len(entries) == 1, f"expected one cached plan, found {len(entries)}"
    by_size, mb = entries[0]
    real = by_size[mb]
    forget = getattr(getattr(model, "_calls", None), "clear", lambda: None)
    by_size[mb] = _StubPlan(real, x, y, hp)
    forget()

    def restore():
        by_size[mb] = real
        forget()
    return restore


def _per_call(fn, calls, repeats):
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times) * 1e6


def worker(a):
    import gpucmp
    from gpucmp import keras
    gpucmp.set_device(a.device)
    g, d, gan = _models(keras)
    b = a.batch
    rng = np.random.default_rng(0)
    noise = rng.standard_normal((b, 100)).astype(np.float32)
    real = rng.uniform(-1, 1, (b, 28, 28, 1)).astype(np.float32)
    ones = np.ones((b, 1), np.float32)
    calls = {
        "generator.predict": lambda: g.predict(noise, batch_size=b, verbose=0),
        "discriminator.train_on_batch": lambda: d.train_on_batch(real, ones),
        "gan.train_on_batch": lambda: gan.train_on_batch(noise, ones),
    }
    for fn in calls.values():        # plans, graphs, optimizer state
        for _ in range(3):
            fn()
    stubs = {
        "generator.predict": lambda: _stub_only_plan(g, g._infer_plans, noise),
        "discriminator.train_on_batch": lambda: _stub_only_plan(d, d._train_plans, real, ones,
                                                                d.optimizer.hparams()),
        "gan.train_on_batch": lambda: _stub_only_plan(gan, gan._train_plans, noise, ones,
                                                      gan.optimizer.hparams()),
    }
    out = {}
    for name in CALLS:
        total = _per_call(calls[name], a.calls, a.repeats)
        restore = stubs[name]()
        try:
            python = _per_call(calls[name], a.calls, a.repeats)
        finally:
            restore()
        out[name] = {"total_us": total, "python_us": python}
    print("RESULT " + json.dumps(out))


def _run_build(a, path):
    env = dict(os.environ, PYTHONPATH=path + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.setdefault("OMP_NUM_THREADS", str(a.threads))
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", a.device,
           "--batch", str(a.batch), "--calls", str(a.calls), "--repeats", str(a.repeats)]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd="/tmp")
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    raise RuntimeError(f"worker for {path} failed (rc {r.returncode}):\n{r.stdout}\n{r.stderr}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of the workers (unless set)")
    ap.add_argument("--gpucmp-builds", nargs="*", default=[], metavar="NAME=DIR")
    ap.add_argument("--json")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    builds = [b.split("=", 1) for b in a.gpucmp_builds] + [["this", os.path.dirname(HERE)]]
    rounds = {name: [] for name, _ in builds}
    for _ in range(a.rounds):
        for name, path in builds:
            rounds[name].append(_run_build(a, path))
    print(f"# host overhead per call, device {a.device}, batch {a.batch}, "
          f"{a.calls} calls x {a.repeats} repeats, median of {a.rounds} rounds (us)")
    print(f"{'call':32s} " + " ".join(f"{n + ' ' + k:>18s}" for n, _ in builds for k in ("total", "python")))
    result = {}
    for call in CALLS:
        cells = []
        for name, _ in builds:
            t = statistics.median(r[call]["total_us"] for r in rounds[name])
            p = statistics.median(r[call]["python_us"] for r in rounds[name])
            cells += [t, p]
            result.setdefault(name, {})[call] = {"total_us": t, "python_us": p}
        print(f"{call:32s} " + " ".join(f"{c:18.1f}" for c in cells))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "result": result, "rounds": rounds}, f, indent=1)


if __name__ == "__main__":
    main()
