"""Where the seeds' GAN iteration goes on a GPU: host time per call, device time per call.

What it prints, for the harness's GAN loop (predict + three train_on_batch per iteration,
gpucmp.harness.workloads.gan at --batch rows):
- the wall time of each of the four calls, median over --iters iterations (perf_counter
  around the call; every call ends with the device idle, as each returns host data);
- with torch installed, a kernel trace of --trace-iters iterations through torch.profiler
  (CUPTI records every kernel and memcpy in the process, gpucmp's included): the device
  busy time per iteration, kernels and copies per iteration, the top kernels by time, and
  the CUDA API calls the host made (graph launches, copies, synchronisations).
So "call wall - its device time" is what the host adds per call, the part one CUDA graph
for the whole iteration (PyTorch's baseline) does not pay.

Why it is built this way: the iteration is four short host round trips; a plain timer says
how long each takes and the CUPTI trace says how much of that the GPU was busy, without
instrumenting the core.

    python benchmarks/profile_gan_cuda.py [--device cuda:0] [--batch 128] [--iters 200]
        [--trace-iters 20]
"""
import argparse
import statistics
import time
from collections import defaultdict

CALLS = ("generator.predict", "discriminator.train_on_batch(real)",
         "discriminator.train_on_batch(fake)", "gan.train_on_batch")


def _timed_iters(run, iters):
    per = defaultdict(list)
    whole = []
    for _ in range(iters):
        t0 = time.perf_counter()
        for name, fn in run():
            t = time.perf_counter()
            fn()
            per[name].append(time.perf_counter() - t)
        whole.append(time.perf_counter() - t0)
    return per, whole


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--iters", type=int, default=200)
    ap.add_argument("--trace-iters", type=int, default=20)
    a = ap.parse_args()

    import numpy as np
    import gpucmp
    from gpucmp import keras
    from gpucmp.harness.workloads.gan import _build, NOISE_DIM

    gpucmp.set_device(a.device)
    g, d, gan = _build(keras)
    b = a.batch
    rng = np.random.default_rng(0)
    real = rng.uniform(-1.0, 1.0, (b, 28, 28, 1)).astype(np.float32)
    noise = rng.standard_normal((2, b, NOISE_DIM)).astype(np.float32)
    ones, zeros = np.ones((b, 1), np.float32), np.zeros((b, 1), np.float32)
    state = {}

    def iteration():
        def predict():
            state["fake"] = g.predict(noise[0], batch_size=b, verbose=0)
        return [(CALLS[0], predict),
                (CALLS[1], lambda: d.train_on_batch(real, ones)),
                (CALLS[2], lambda: d.train_on_batch(state["fake"], zeros)),
                (CALLS[3], lambda: gan.train_on_batch(noise[1], ones))]

    _timed_iters(iteration, 10)                     # plans, graphs, optimizer state
    per, whole = _timed_iters(iteration, a.iters)
    print(f"# GAN iteration on {a.device}, batch {b}, {a.iters} iterations: median wall per call (us)")
    for name in CALLS:
        print(f"{name:40s} {statistics.median(per[name]) * 1e6:9.1f}")
    print(f"{'iteration':40s} {statistics.median(whole) * 1e6:9.1f}")

    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        print("(torch not installed: no kernel trace)")
        return
    if not a.device.startswith("cuda") or not torch.cuda.is_available():
        print("(not a CUDA device, or torch without CUDA: no kernel trace)")
        return
    torch.cuda.synchronize()                        # torch's own context first, so kineto can trace
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        _timed_iters(iteration, a.trace_iters)
        torch.cuda.synchronize()
    n = a.trace_iters
    kernels, copies, api = defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0]), defaultdict(lambda: [0, 0.0])
    for ev in prof.events():
        dev = getattr(ev, "device_type", None)
        name = ev.name
        dur = ev.time_range.elapsed_us()
        if dev is not None and str(dev).endswith("CUDA"):
            bucket = copies if name.lower().startswith(("memcpy", "memset")) else kernels
            bucket[name][0] += 1
            bucket[name][1] += dur
        elif name.startswith("cuda") or name.startswith("cu"):
            api[name][0] += 1
            api[name][1] += dur
    ksum = sum(v[1] for v in kernels.values())
    csum = sum(v[1] for v in copies.values())
    print(f"\n# CUPTI trace of {n} iterations: per iteration")
    print(f"kernels: {sum(v[0] for v in kernels.values()) / n:.1f} launches, {ksum / n:.1f} us busy")
    print(f"copies / memsets: {sum(v[0] for v in copies.values()) / n:.1f}, {csum / n:.1f} us busy")
    print("\n# top kernels (us per iteration, launches per iteration)")
    for name, (c, t) in sorted(kernels.items(), key=lambda kv: -kv[1][1])[:25]:
        print(f"{t / n:9.2f} {c / n:6.1f}  {name[:110]}")
    print("\n# copies")
    for name, (c, t) in sorted(copies.items(), key=lambda kv: -kv[1][1]):
        print(f"{t / n:9.2f} {c / n:6.1f}  {name[:110]}")
    print("\n# host CUDA API calls (us per iteration, calls per iteration)")
    for name, (c, t) in sorted(api.items(), key=lambda kv: -kv[1][1])[:20]:
        print(f"{t / n:9.2f} {c / n:6.1f}  {name}")


if __name__ == "__main__":
    main()
