"""Calibration: the measurements on one real GPU that every projection starts from.

What it provides: `calibrate(device, workloads, precisions, batch_sizes)` -> a dict
(schema gpucmp-calibration/1) holding the card's achievable peaks (GEMM rate per
precision at 8192^3, device copy bandwidth, back-to-back launch latency), the measured
time of every GEMM and convolution the workloads run (each at its exact shape, dtype
and pass, timed on device-resident operands by the core's bench functions), the
measured step time of each measurable model workload, and its provenance (device,
date, driver, runtime, gpucmp version). `save(cal, path)` writes it atomically.
`python -m gpucmp calibrate` runs it; data/calibration.json is its output on an H200.

Why it is built this way: a machine without a GPU must still project (the shipped file),
and a machine with one can replace it by its own measurements -- the same function,
so the shipped numbers are reproducible with one command on the card they name.
"""
import datetime
import json
import platform

from . import devices as devices_mod
from . import results
from . import workloads as wl
from .projection import CALIBRATION_SCHEMA, DeviceModel, UNIT_COLUMN, PEAK_PRECISION
from .workloads.base import canonical_precision

BENCH_DTYPE = {"fp32": "float32", "tf32": "tfloat32", "fp16": "float16", "bf16": "bfloat16"}
PEAK_N = 8192
COPY_BYTES = 1 << 30
SAMPLE_S = 0.02


def _core():
    from .. import _core
    return _core


def _timed(fn, target_s=SAMPLE_S, repeats=5):
    """Median seconds of one call of fn(inner, repeats) with inner sized to ~target_s per sample."""
    t = fn(1, 3)
    inner = max(1, min(10000, int(target_s / max(t, 1e-7))))
    return fn(inner, repeats)


def measure_peaks(device, n=PEAK_N, copy_bytes=COPY_BYTES):
    core = _core()
    flops = {}
    for unit in UNIT_COLUMN:
        dt = BENCH_DTYPE[unit]
        sec = _timed(lambda inner, reps: core.bench_gemm(device, n, n, n, dt, repeats=reps, warmup=1, inner=inner),
                     0.2, 5)
        flops[PEAK_PRECISION[unit]] = 2.0 * n ** 3 / sec
    sec = _timed(lambda inner, reps: core.bench_copy(device, copy_bytes, repeats=reps, inner=inner), 0.2, 5)
    launch = _timed(lambda inner, reps: core.bench_gemm(device, 16, 16, 16, "float32", repeats=reps, warmup=5,
                                                        inner=inner), 0.05, 7)
    return {"gemm_flops": flops, "gemm_n": n, "copy_bytes_per_s": 2.0 * copy_bytes / sec, "copy_bytes": copy_bytes,
            "launch_s": launch}


def _bench_op(device, op):
    core, e, dt = _core(), op.extra, BENCH_DTYPE[op.unit]
    if op.kind == "copy":
        nbytes = int(op.bytes // 2)
        return _timed(lambda inner, reps: core.bench_copy(device, nbytes, repeats=reps, inner=inner))
    if op.kind == "gemm":
        return _timed(lambda inner, reps: core.bench_gemm(device, e["m"], e["n"], e["k"], dt, repeats=reps,
                                                          trans_a=e["trans_a"], trans_b=e["trans_b"], warmup=2,
                                                          inner=inner))
    return _timed(lambda inner, reps: core.bench_conv(device, e["n"], e["h"], e["w"], e["c"], e["f"], e["kh"],
                                                      e["kw"], strides=e["strides"], padding=e["padding"], dtype=dt,
                                                      which=e["which"], repeats=reps, warmup=2, inner=inner))


def calibrate(device="cuda:0", workloads=("cnn", "gemm", "conv", "bandwidth", "resnet50"),
              precisions=("float32", "float16", "bfloat16"), batch_sizes=None, step_repeats=3, progress=None):
    """Measure the calibration of `device` (see the module docstring)."""
    from .runner import benchmark
    core = _core()
    device = devices_mod.check_device(device)
    if not device.startswith("cuda"):
        raise ValueError(f"calibrate: {device!r} is not a GPU; a calibration is measured on a CUDA device")
    record = devices_mod.device_record(device)
    if not record.get("gpu"):
        raise ValueError(f"calibrate: {record.get('name')!r} has no row in the spec database")
    info = dict(core.device_info(device))
    peaks = measure_peaks(device)
    origin = DeviceModel(record["gpu"], int(info["sms"]),
                         {u: peaks["gemm_flops"][PEAK_PRECISION[u]] for u in UNIT_COLUMN},
                         peaks["copy_bytes_per_s"], peaks["launch_s"])
    ws = wl.resolve_list(list(workloads))
    precs = [canonical_precision(p) for p in precisions]
    ops = {}
    for w in ws:
        for p in precs:
            if not w.supports(p):
                continue
            for c in w.configs("cuda", batch_sizes if w.kind == "model" else None):
                for op in w.ops(c, p):
                    if op.kind in ("gemm", "copy") or op.kind.startswith("conv2d_"):
                        if op.key and op.key not in ops:
                            sec = _bench_op(device, op)
                            ops[op.key] = {"seconds": sec, "kind": op.kind, "unit": op.unit, "flops": op.flops,
                                           "bytes": op.bytes, "blocks": op.blocks, "roofline_s": origin.roofline(op)}
    models = [w for w in ws if w.kind == "model" and w.measurable]
    steps = []
    if models:
        df = benchmark(models, [device], precs, batch_sizes, repeats=step_repeats, min_sample_s=0.5,
                       progress=progress)
        steps = [{"workload": r["workload"], "precision": r["precision"], "batch_size": int(r["batch_size"]),
                  "step_time_s": float(r["step_time_s"]), "peak_memory_bytes": r["peak_memory_bytes"],
                  "modeled_memory_bytes": r["modeled_memory_bytes"]} for r in df.to_dict("records")]
    from .. import __version__
    return {
        "schema": CALIBRATION_SCHEMA, "gpu": record["gpu"], "sms": int(info["sms"]),
        "provenance": {"device": record["name"], "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
            timespec="seconds"), "driver": record.get("driver_version"), "cuda_runtime": info.get("runtime_version"),
            "gpucmp": __version__, "host": platform.node(), "sm_clock_mhz": record.get("sm_clock_mhz"),
            "power_limit_w": record.get("power_limit_w"), "sm_limit": info.get("sm_limit")},
        "peaks": peaks, "ops": ops, "steps": steps,
    }


def save(cal, path):
    results._atomic_write(path, json.dumps(cal, indent=1, sort_keys=True) + "\n")
    return path
