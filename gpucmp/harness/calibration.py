"""Calibration: the measurements on one real GPU that every projection starts from.

What it provides: `calibrate(device, workloads, precisions, batch_sizes)` -> a dict
(schema gpucmp-calibration/1) holding the card's achievable peaks (GEMM rate per
precision at 8192^3, device copy bandwidth, launch latency), the measured time of every
GEMM and convolution the workloads run (each at its exact shape, dtype and pass, timed
on device-resident operands by the core's bench functions, replayed from a CUDA graph
as a captured training step runs them), the grid each of those ops launches for the SM
counts of the cards in the spec database (the core's launch log: split K and
grid-stride kernels size their grids from the SMs they see, which the projection's wave
model needs) and, for an op whose grid follows the SMs, its time with the grid for 8
SMs on the whole card (the projection's per-block latency model), the measured step time of each measurable model workload, and its
provenance (device, date, driver, runtime, gpucmp version). `save(cal, path)` writes it
atomically.
`python -m gpucmp calibrate` runs it; data/calibration.json is its output on an H200.

Why it is built this way: a machine without a GPU must still project (the shipped file),
and a machine with one can replace it by its own measurements -- the same function,
so the shipped numbers are reproducible with one command on the card they name.
"""
import dataclasses
import datetime
import json
import math
import platform

from . import devices as devices_mod
from . import energy
from . import results
from . import specs
from . import workloads as wl
from .projection import CALIBRATION_SCHEMA, DeviceModel, UNIT_COLUMN, PEAK_PRECISION, blocks_at
from .workloads.base import canonical_precision
from .. import _core

BENCH_DTYPE = {"fp32": "float32", "tf32": "tfloat32", "fp16": "float16", "bf16": "bfloat16"}
PEAK_N = 8192
SAMPLE_S = 0.02


def _sized(fn, estimate_s, target_s=SAMPLE_S, repeats=5):
    """fn(inner, repeats) with inner sized from an estimate of one call (one core call, no probe)."""
    return fn(max(1, min(10000, int(target_s / max(estimate_s, 1e-6)))), repeats)


def measure_peaks(device, n=PEAK_N, repeats=3):
    """The card's sustained achievable peaks through benchmark(): the n^3 GEMM per precision
    and the 1 GiB copy, each with the SM clock and power it held (the projection's clock
    model needs both); the conv rows come along as further sustained kernel steps. Returns
    (peaks, kernel rows)."""
    from .runner import benchmark
    core = _core
    df = benchmark([f"gemm:{n}", "conv", "bandwidth"], [device], ["float32", "tf32", "float16", "bfloat16"],
                   repeats=repeats, min_sample_s=0.5)
    rows = [{"workload": r["workload"], "precision": r["precision"], "batch_size": int(r["batch_size"]),
             "step_time_s": float(r["step_time_s"]), "sm_clock_mhz": float(r["sm_clock_mhz"]),
             "avg_power_w": float(r["avg_power_w"])} for r in df.to_dict("records")]
    gemm = {r["precision"]: r for r in rows if r["workload"] == "gemm"}
    copy = next(r for r in rows if r["workload"] == "bandwidth")
    eager = _sized(lambda inner, reps: core.bench_gemm(device, 16, 16, 16, "float32", repeats=reps, warmup=5,
                                                       inner=inner), 5e-6, 0.05, 7)
    # the per-kernel cost that does not scale with SMs, as a captured step sees it: a tiny
    # GEMM replayed from a graph (the ops below are timed the same way)
    launch = _sized(lambda inner, reps: core.bench_gemm(device, 16, 16, 16, "float32", repeats=reps, warmup=5,
                                                        inner=inner, graph=True), 3e-6, 0.05, 7)
    peaks = {"gemm_flops": {p: 2.0 * n ** 3 / r["step_time_s"] for p, r in gemm.items()},
             "gemm_clock_mhz": {p: r["sm_clock_mhz"] for p, r in gemm.items()}, "gemm_n": n,
             "copy_bytes_per_s": 2.0 * (copy["batch_size"] << 20) / copy["step_time_s"],
             "copy_bytes": copy["batch_size"] << 20,
             "launch_s": launch, "launch_eager_s": eager, "op_timing": "graph"}
    return peaks, rows


def _idle_power(device, info):
    mod, h = energy.nvml_handle(info.get("pci_bus_id"), int(device.split(":")[1]))
    try:
        return mod.nvmlDeviceGetPowerUsage(h) / 1000.0 if h is not None else math.nan
    except Exception:
        return math.nan


def grid_sms(origin_sms, rows=None):
    """The SM counts whose grids the calibration records: every card of the spec database,
    the origin, and partitions of it (green contexts: the projection's validation)."""
    rows = specs.specs() if rows is None else rows
    found = {int(x) for x in rows["sms"] if x == x} | {int(origin_sms)}
    return sorted(found | {n for n in (8, 16, 24, 32, 48, 64, 96) if n < origin_sms})


def main_launch(launches):
    """The launch that does an op's math: the one with the most dynamic shared memory (the
    tile kernels), then the most threads; helper launches (split-K reduction, bias sums,
    transposes) use little or none."""
    return max(launches, key=lambda r: (r["smem_bytes"], r["blocks"] * r["threads"]))


def _bench_op(device, op, estimate_s, grids_for=None, plan_sms=0):
    """(seconds, {sms: [blocks, threads, blocks_per_sm]} or None) of one op: GEMMs and convs
    replayed from a graph, with their grids for `grids_for` SM counts; copies eagerly."""
    core, e = _core, op.extra
    if op.kind == "copy":
        nbytes = int(op.bytes // 2)
        return _sized(lambda inner, reps: core.bench_copy(device, nbytes, repeats=reps, inner=inner), estimate_s), None
    dt = BENCH_DTYPE[op.unit]
    kw = {"graph": True}
    if plan_sms:
        kw["plan_sms"] = int(plan_sms)
    if grids_for:
        kw["grids_for"] = list(grids_for)
    if op.kind == "gemm":
        r = _sized(lambda inner, reps: core.bench_gemm(device, e["m"], e["n"], e["k"], dt, repeats=reps,
                                                       trans_a=e["trans_a"], trans_b=e["trans_b"], warmup=2,
                                                       inner=inner, **kw), estimate_s)
    else:
        r = _sized(lambda inner, reps: core.bench_conv(device, e["n"], e["h"], e["w"], e["c"], e["f"], e["kh"],
                                                       e["kw"], strides=e["strides"], padding=e["padding"], dtype=dt,
                                                       which=e["which"], repeats=reps, warmup=2, inner=inner, **kw),
                   estimate_s)
    if not grids_for:
        return r, None
    grids = {}
    for sms, launches in r["grids"].items():
        if launches:
            m = main_launch(launches)
            grids[str(sms)] = [int(m["blocks"]), int(m["threads"]), int(m["blocks_per_sm"])]
    return r["seconds"], grids


def calibrate(device="cuda:0", workloads=("cnn", "gemm", "conv", "bandwidth", "resnet50"),
              precisions=("float32", "float16"), batch_sizes=None, step_repeats=3, progress=None,
              ops_budget_s=None, path=None):
    """Measure the calibration of `device` (see the module docstring). ops_budget_s bounds
    the time spent timing single ops (those left are projected from their kind's measured
    efficiency); path, when given, is written after each phase, so a cut-off run keeps
    what it measured."""
    import time
    from .runner import benchmark
    core = _core
    device = devices_mod.check_device(device)
    if not device.startswith("cuda"):
        raise ValueError(f"calibrate: {device!r} is not a GPU; a calibration is measured on a CUDA device")
    record = devices_mod.device_record(device)
    if not record.get("gpu"):
        raise ValueError(f"calibrate: {record.get('name')!r} has no row in the spec database")
    info = dict(core.device_info(device))
    power = {"idle_w": _idle_power(device, info), "limit_w": record.get("power_limit_w"),
             "max_sm_clock_mhz": record.get("max_sm_clock_mhz")}
    sm_list = grid_sms(int(info["sms"]))
    peaks, kernels = measure_peaks(device)
    origin = DeviceModel(record["gpu"], int(info["sms"]),
                         {u: peaks["gemm_flops"][PEAK_PRECISION[u]] for u in UNIT_COLUMN},
                         peaks["copy_bytes_per_s"], peaks["launch_s"])
    ws = wl.resolve_list(list(workloads))
    precs = [canonical_precision(p) for p in precisions]
    ops, skipped = {}, []
    models = [w for w in ws if w.kind == "model" and w.measurable]
    steps = []
    from .. import __version__

    def result():
        return {
            "schema": CALIBRATION_SCHEMA, "gpu": record["gpu"], "sms": int(info["sms"]),
            "provenance": {"device": record["name"], "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"), "driver": record.get("driver_version"), "cuda_runtime": info.get("runtime_version"),
                "gpucmp": __version__, "host": platform.node(), "sm_clock_mhz": record.get("sm_clock_mhz"),
                "power_limit_w": record.get("power_limit_w"), "sm_limit": info.get("sm_limit"),
                "command": "gpucmp calibrate"},
            "peaks": peaks, "power": power, "kernels": kernels, "ops": ops, "steps": steps, "grid_sms": sm_list,
            "skipped_ops": skipped,
        }
    if path:
        save(result(), path)
    if models:
        df = benchmark(models, [device], precs, batch_sizes, repeats=step_repeats, min_sample_s=0.5,
                       progress=progress)
        steps = [{"workload": r["workload"], "precision": r["precision"], "batch_size": int(r["batch_size"]),
                  "step_time_s": float(r["step_time_s"]), "peak_memory_bytes": r["peak_memory_bytes"],
                  "modeled_memory_bytes": r["modeled_memory_bytes"], "sm_clock_mhz": float(r["sm_clock_mhz"]),
                  "avg_power_w": float(r["avg_power_w"])} for r in df.to_dict("records")]
    log_grids = True
    t_start = time.perf_counter()            # the ops budget starts once the steps are measured
    for w in ws:
        # batch sizes outer, precisions inner: a budget cut leaves whole batch sizes out,
        # not whole precisions
        for c in w.configs("cuda", batch_sizes if w.kind == "model" else None):
            for p in precs:
                if not w.supports(p):
                    continue
                for op in w.ops(c, p):
                    if op.kind in ("gemm", "copy") or op.kind.startswith("conv2d_"):
                        if op.key and op.key not in ops:
                            if ops_budget_s is not None and time.perf_counter() - t_start > ops_budget_s:
                                skipped.append(f"{op.key}: not timed (ops budget of {ops_budget_s} s spent)")
                                continue
                            try:
                                sec, grids = _bench_op(device, op, 2 * origin.roofline(op) + peaks["launch_s"],
                                                       sm_list if log_grids else None)
                            except NotImplementedError as exc:
                                if log_grids and "launch log" in str(exc):   # a build without the launch wrap
                                    log_grids = False
                                    skipped.append(f"grids: {exc}")
                                    sec, grids = _bench_op(device, op, 2 * origin.roofline(op) + peaks["launch_s"])
                                else:
                                    skipped.append(f"{op.key}: {exc}")
                                    continue
                            except (ValueError, RuntimeError, MemoryError) as exc:
                                skipped.append(f"{op.key}: {exc}")
                                continue
                            rec = {"seconds": sec, "kind": op.kind, "unit": op.unit, "flops": op.flops,
                                   "bytes": op.bytes, "blocks": op.blocks}
                            if grids:
                                rec["grids"] = grids
                                small = sm_list[0]
                                if blocks_at(rec, small, 0) != blocks_at(rec, int(info["sms"]), 0):
                                    # the grid follows the SMs: time it with the grid for `small` SMs
                                    # too (the projection's per-block model, projection.block_model)
                                    try:
                                        rec["seconds_small"] = _bench_op(device, op, sec, plan_sms=small)[0]
                                        rec["small_sms"] = small
                                    except (ValueError, RuntimeError, MemoryError) as exc:
                                        skipped.append(f"{op.key} at plan_sms={small}: {exc}")
                            rec["roofline_s"] = origin.roofline(
                                dataclasses.replace(op, blocks=blocks_at(rec, origin.sms, op.blocks)))
                            ops[op.key] = rec
        if path:
            save(result(), path)
    cal = result()
    if path:
        save(cal, path)
    return cal


def save(cal, path):
    results._atomic_write(path, json.dumps(cal, indent=1, sort_keys=True) + "\n")
    return path
