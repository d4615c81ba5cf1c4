"""Convolution throughput: gpucmp's own kernels side by side with cuDNN and PyTorch.

Layers: the seeds' CNN at batch 128 (28x28x1->32, 13x13x32->64, 5x5x64->64; 3x3,
'valid') and a 3x3 64->64 56x56 batch-64 'same' layer. Passes: forward, and fwd+bwd
(forward + backward-data + backward-filter, no bias unless --bias, which times layers as
Keras builds them: the forward adds the bias, the filter pass also computes its gradient;
FLOPs 3x the forward's, time the sum of the three). Columns, all measured in one run on
the same device:

- gpucmp: `_core.bench_conv(..., impl='own')` -- gpucmp's kernels on operands already in
  device memory;
- cuDNN: the same call with impl='vendor' (gpucmp's cuDNN baseline, loaded at run time);
- PyTorch: `torch.nn.functional.conv2d` and `aten.convolution_backward` (data, filter)
  on channels_last tensors with `torch.backends.cudnn.benchmark = True`, timed in a child
  process (one for all its rows; on the CPU its OpenMP runtime must not share a process
  with gpucmp's).

dtypes on a GPU: float16, bfloat16 (fp32 accumulation) and tfloat32 ('float32' = exact
fp32 on request); on the CPU float32 only (f16/bf16 are storage there). Timing: every
sample is `inner` calls between two device syncs (host clock), `inner` chosen so that a
sample lasts ~2 ms (the small layers take microseconds; one sync per call would measure
the launch, not the kernel); median over `repeats` samples after warm-up.

    python benchmarks/bench_conv.py [--device cuda:0] [--dtypes float16 bfloat16 tfloat32]
                                    [--repeats 10] [--quick]

Without a GPU it runs on the CPU (use --quick there: batch / 16, 2 repeats).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import header, table, try_import_torch  # noqa: E402

import gpucmp  # noqa: E402
from gpucmp import _core  # noqa: E402

# name, N, H, W, C, F, KH, KW, stride, padding
LAYERS = [
    ("seeds conv1 28x28x1->32", 128, 28, 28, 1, 32, 3, 3, 1, "valid"),
    ("seeds conv2 13x13x32->64", 128, 13, 13, 32, 64, 3, 3, 1, "valid"),
    ("seeds conv3 5x5x64->64", 128, 5, 5, 64, 64, 3, 3, 1, "valid"),
    ("3x3 64->64 56x56 same", 64, 56, 56, 64, 64, 3, 3, 1, "same"),
]


def resnet50_layers(batch):
    """Every distinct convolution of Keras' ResNet50 at 224x224 (NHWC, bias not timed), with
    how many times it occurs: the stem's 7x7/2 on the zero-padded 230x230 image, then per
    stage the bottleneck 1x1 -> 3x3 'same' -> 1x1 (stride 2 on the first 1x1 of stages 3-5,
    as Keras places it) and the first block's 1x1 projection shortcut."""
    out = [("resnet50 conv1 7x7/2 3->64", batch, 230, 230, 3, 64, 7, 7, 2, "valid", 1)]
    size, cin = 56, 64
    for stage, (filters, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), start=2):
        s = 1 if stage == 2 else 2
        hin = size if stage == 2 else size * 2
        hw = size
        tag = f"resnet50 conv{stage}"
        out.append((f"{tag} 1x1/{s} {cin}->{filters} (block 1)", batch, hin, hin, cin, filters, 1, 1, s, "valid", 1))
        out.append((f"{tag} 1x1/{s} {cin}->{4 * filters} shortcut", batch, hin, hin, cin, 4 * filters, 1, 1, s,
                    "valid", 1))
        out.append((f"{tag} 3x3 {filters}->{filters}", batch, hw, hw, filters, filters, 3, 3, 1, "same", blocks))
        out.append((f"{tag} 1x1 {filters}->{4 * filters}", batch, hw, hw, filters, 4 * filters, 1, 1, 1, "valid",
                    blocks))
        if blocks > 1:
            out.append((f"{tag} 1x1 {4 * filters}->{filters}", batch, hw, hw, 4 * filters, filters, 1, 1, 1, "valid",
                        blocks - 1))
        cin = 4 * filters
        size //= 2
    return out


PASSES = ("fwd", "bwd_data", "bwd_filter")
SAMPLE_SECONDS = 2e-3   # target length of one timed sample
MAX_INNER = 500


def out_extent(size, k, stride, padding):
    return (size - k) // stride + 1 if padding == "valid" else -(-size // stride)


def fwd_flops(layer):
    _, n, h, w, c, f, kh, kw, s, pad = layer
    return 2.0 * n * out_extent(h, kh, s, pad) * out_extent(w, kw, s, pad) * f * kh * kw * c


def pick_inner(t_one):
    return max(1, min(MAX_INNER, math.ceil(SAMPLE_SECONDS / max(t_one, 1e-7))))


# ------------------------------------------------------------------ gpucmp
def gpucmp_seconds(device, layer, dtype, impl, which, repeats, bias=False):
    """Median seconds of one call, or a string saying why there is none."""
    _, n, h, w, c, f, kh, kw, s, pad = layer
    args = (device, n, h, w, c, f, kh, kw)
    kw_ = dict(strides=(s, s), padding=pad, dtype=dtype, impl=impl, which=which)
    if bias and which != "bwd_data":
        kw_["bias"] = True
    try:
        t_one = _core.bench_conv(*args, **kw_, repeats=3, warmup=2)
        inner = pick_inner(t_one)
        return _core.bench_conv(*args, **kw_, repeats=repeats, warmup=1, inner=inner)
    except (NotImplementedError, RuntimeError, ValueError, TypeError, MemoryError) as e:
        return f"{type(e).__name__}: {str(e)[:100]}"


# ------------------------------------------------------------------ PyTorch (child process)
def torch_worker(spec):
    """Runs in a child: times every (layer, dtype, which) of spec; prints one JSON line."""
    torch = try_import_torch()
    dev = torch.device("cuda" if spec["device"].startswith("cuda") else "cpu")
    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        sync = torch.cuda.synchronize
    else:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", os.cpu_count())))
        sync = lambda: None  # noqa: E731
    dtypes = {"float32": torch.float32, "tfloat32": torch.float32, "float16": torch.float16,
              "bfloat16": torch.bfloat16}
    cl = torch.channels_last
    conv_bwd = torch.ops.aten.convolution_backward
    bias_on = bool(spec.get("bias"))
    results = {}
    for job in spec["jobs"]:
        key, layer, dtype, which = job["key"], job["layer"], job["dtype"], job["which"]
        _, n, h, w, c, f, kh, kw, s, pad = layer
        oh, ow = out_extent(h, kh, s, pad), out_extent(w, kw, s, pad)
        if pad == "same":
            tot_h, tot_w = max((oh - 1) * s + kh - h, 0), max((ow - 1) * s + kw - w, 0)
            if tot_h % 2 or tot_w % 2:
                results[key] = "PyTorch: asymmetric 'same' padding"
                continue
            padding = [tot_h // 2, tot_w // 2]
        else:
            padding = [0, 0]
        if dev.type == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = dtype == "tfloat32"
            torch.backends.cudnn.allow_tf32 = dtype == "tfloat32"
        dt = dtypes[dtype] if dev.type == "cuda" else torch.float32
        try:
            x = (torch.rand(n, c, h, w, device=dev, dtype=dt) * 2 - 1).contiguous(memory_format=cl)
            wt = (torch.rand(f, c, kh, kw, device=dev, dtype=dt) * 2 - 1).contiguous(memory_format=cl)
            dy = (torch.rand(n, f, oh, ow, device=dev, dtype=dt) * 2 - 1).contiguous(memory_format=cl)
            b = torch.rand(f, device=dev, dtype=dt) if bias_on else None
            stride, dil = [s, s], [1, 1]
            if which == "fwd":
                def fn():
                    return torch.nn.functional.conv2d(x, wt, b, stride, padding)
            elif which == "bwd_data":
                def fn():
                    return conv_bwd(dy, x, wt, None, stride, padding, dil, False, [0, 0], 1, [True, False, False])
            else:
                def fn():
                    return conv_bwd(dy, x, wt, [f] if bias_on else None, stride, padding, dil, False, [0, 0], 1,
                                    [False, True, bias_on])
            with torch.no_grad():
                for _ in range(3):
                    fn()
                sync()
                ones = []
                for _ in range(3):
                    t0 = time.perf_counter()
                    fn()
                    sync()
                    ones.append(time.perf_counter() - t0)
                inner = pick_inner(sorted(ones)[1])
                times = []
                for _ in range(spec["repeats"]):
                    t0 = time.perf_counter()
                    for _ in range(inner):
                        fn()
                    sync()
                    times.append((time.perf_counter() - t0) / inner)
            results[key] = statistics.median(times)
        except Exception as e:  # noqa: BLE001 -- report, keep the other rows
            results[key] = f"PyTorch: {type(e).__name__}: {str(e)[:100]}"
    print("RESULT " + json.dumps(results), flush=True)


def torch_seconds(device, jobs, repeats, bias=False):
    """{key: seconds or 'n/a'} from one child process; {} when PyTorch cannot run."""
    torch = try_import_torch()
    if torch is None:
        return {}
    if device.startswith("cuda") and not torch.cuda.is_available():
        return {}
    spec = json.dumps({"device": device, "jobs": jobs, "repeats": repeats, "bias": bias})
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--torch-worker", spec],
                         capture_output=True, text=True)
    for line in out.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[7:])
    print(f"PyTorch worker failed:\n{out.stdout[-2000:]}{out.stderr[-3000:]}")
    return {}


# ------------------------------------------------------------------ table
def rate(flops, sec, unit):
    return flops / sec / unit if isinstance(sec, float) and sec > 0 else sec


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default=None, help="default: the first CUDA device, else cpu")
    ap.add_argument("--dtypes", nargs="+", default=None,
                    help="GPU default: float16 bfloat16 tfloat32; CPU: float32")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--quick", action="store_true", help="batch / 16, 2 repeats (smoke run)")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--no-vendor", action="store_true", help="skip gpucmp's cuDNN baseline (PyTorch is cuDNN too)")
    ap.add_argument("--per-pass", action="store_true",
                    help="a row per pass (fwd, bwd_data, bwd_filter) besides fwd+bwd")
    ap.add_argument("--bias", action="store_true",
                    help="layers with a bias, as Keras builds them: the forward adds it, the filter pass also "
                         "computes its gradient (PyTorch likewise)")
    ap.add_argument("--layers", choices=("default", "resnet50"), default="default",
                    help="resnet50: every distinct conv of ResNet-50 at 224x224 (with its count)")
    ap.add_argument("--batch", type=int, default=256, help="batch of the resnet50 layers")
    ap.add_argument("--torch-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.torch_worker:
        return torch_worker(json.loads(args.torch_worker))

    gpus = [d for d in gpucmp.available_devices() if d.startswith("cuda")]
    device = args.device or (gpus[0] if gpus else "cpu")
    if device not in gpucmp.available_devices():
        sys.exit(f"bench_conv: device {device!r} is not available (gpucmp has {gpucmp.available_devices()})")
    on_gpu = device.startswith("cuda")
    dtypes = args.dtypes or (["float16", "bfloat16", "tfloat32"] if on_gpu else ["float32"])
    counts = {}
    if args.layers == "resnet50":
        layers = []
        for L in resnet50_layers(args.batch):
            layers.append(tuple(L[:10]))
            counts[L[0]] = L[10]
    else:
        layers = [tuple(L) for L in LAYERS]
    if args.quick:
        layers = [(L[0], max(1, L[1] // 16)) + L[2:] for L in layers]
        args.repeats = 2
    unit, uname = (1e12, "TFLOP/s") if on_gpu else (1e9, "GFLOP/s")
    vendor_name = "cuDNN" if on_gpu else "vendor"

    print(header("Convolution benchmark"))
    torch = None if args.no_torch else try_import_torch()
    if torch is not None:
        print(f"torch {torch.__version__}" + (f", cuDNN {torch.backends.cudnn.version()}" if on_gpu else ""))
    print(f"device {device}; median of {args.repeats} samples of ~{SAMPLE_SECONDS * 1e3:.0f} ms; "
          f"NHWC; {'bias (forward adds it, the filter pass computes its gradient)' if args.bias else 'no bias'}; "
          f"{uname}")

    # gpucmp (own, vendor) in this process; PyTorch for every job in one child
    jobs, own, ven = [], {}, {}
    for li, layer in enumerate(layers):
        for dtype in dtypes:
            for which in PASSES:
                key = f"{li}|{dtype}|{which}"
                jobs.append({"key": key, "layer": list(layer), "dtype": dtype, "which": which})
                own[key] = gpucmp_seconds(device, layer, dtype, "own", which, args.repeats, args.bias)
                if on_gpu and not args.no_vendor:
                    ven[key] = gpucmp_seconds(device, layer, dtype, "vendor", which, args.repeats, args.bias)
    tor = {} if torch is None else torch_seconds(device, jobs, args.repeats, args.bias)

    def total(d, keys):
        vals = [d.get(k) for k in keys]
        if all(isinstance(v, float) for v in vals):
            return sum(vals)
        bad = [v for v in vals if not isinstance(v, float)]
        return bad[0] if bad and isinstance(bad[0], str) else None

    notes = []   # an unmeasured cell shows "n/a (k)"; note k says why

    def cell(v):
        if isinstance(v, str):
            if v not in notes:
                notes.append(v)
            return f"n/a ({notes.index(v) + 1})"
        return v

    rows = []
    for li, layer in enumerate(layers):
        for dtype in dtypes:
            keys = [f"{li}|{dtype}|{w}" for w in PASSES]
            passes = [("fwd", keys[:1], 1.0)]
            if args.per_pass:
                passes += [("bwd_data", keys[1:2], 1.0), ("bwd_filter", keys[2:], 1.0)]
            for pname, ks, mult in passes + [("fwd+bwd", keys, 3.0)]:
                flops = fwd_flops(layer) * mult
                row = {"layer": layer[0], "batch": layer[1], "dtype": dtype, "pass": pname}
                if counts:
                    row["count"] = counts[layer[0]]
                t_own, t_ven, t_tor = total(own, ks), total(ven, ks), total(tor, ks)
                row["gpucmp ms"] = cell(t_own * 1e3 if isinstance(t_own, float) else t_own)
                row[f"gpucmp {uname}"] = cell(rate(flops, t_own, unit))
                if ven:
                    row[f"{vendor_name} {uname}"] = cell(rate(flops, t_ven, unit))
                    if isinstance(t_own, float) and isinstance(t_ven, float):
                        row[f"gpucmp / {vendor_name}"] = t_ven / t_own
                if t_tor is not None:
                    row[f"PyTorch {uname}"] = cell(rate(flops, t_tor, unit))
                    if isinstance(t_own, float) and isinstance(t_tor, float):
                        row["gpucmp / PyTorch"] = t_tor / t_own
                rows.append(row)
    cols = ["layer", "batch"] + (["count"] if counts else []) + ["dtype", "pass", "gpucmp ms", f"gpucmp {uname}"]
    if ven:
        cols += [f"{vendor_name} {uname}", f"gpucmp / {vendor_name}"]
    if tor:
        cols += [f"PyTorch {uname}", "gpucmp / PyTorch"]
    print()
    print(table(rows, cols))
    for k, reason in enumerate(notes, 1):
        print(f"({k}) {reason}")
    if counts:   # the whole network's convolutions: each layer's time times its count
        sums = []
        for dtype in dtypes:
            # "training step": what a step runs -- no data gradient for the stem (its input is the image)
            for pname, passes in (("fwd", PASSES[:1]), ("bwd_data", PASSES[1:2]), ("bwd_filter", PASSES[2:]),
                                  ("fwd+bwd", PASSES), ("training step", PASSES)):
                agg = {}
                for name, d in (("gpucmp", own), (vendor_name, ven), ("PyTorch", tor)):
                    ts = [total(d, [f"{li}|{dtype}|{w}" for w in passes
                                    if not (pname == "training step" and li == 0 and w == "bwd_data")])
                          for li in range(len(layers))]
                    if ts and all(isinstance(t, float) for t in ts):
                        agg[name] = sum(t * counts[L[0]] for t, L in zip(ts, layers))
                row = {"dtype": dtype, "pass": pname}
                row.update({f"{k} ms": v * 1e3 for k, v in agg.items()})
                for k in (vendor_name, "PyTorch"):
                    if k in agg and "gpucmp" in agg:
                        row[f"gpucmp / {k}"] = agg[k] / agg["gpucmp"]
                sums.append(row)
        cols2 = ["dtype", "pass"] + sorted({c for r in sums for c in r if c not in ("dtype", "pass")},
                                           key=lambda c: (c.startswith("gpucmp /"), c))
        print(f"\nResNet-50, all convolutions of one step (batch {args.batch}):")
        print(table(sums, cols2))


if __name__ == "__main__":
    main()
