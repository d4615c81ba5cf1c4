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
SMs on the whole card (the projection's per-block latency model), the device copy on
the card confined to 8/24/48/96 SMs (green contexts: how the copy rate saturates), the
measured step time of each measurable model workload with the in-step time of each of
its ops (step_profile.py: the batch norms, adds, casts and updates no bench function
times alone), the same calibration measured again with the card confined to 8/24/48/96
SMs ("partitions", one child process each: the projection onto a card with fewer SMs
starts from the two that bracket its SM count, so grids, waves and per-SM contention
are measured near that count rather than modelled from the whole card), the recurrent
ops (rnn_fwd / rnn_bwd, bench_rnn replayed from a graph) at the workloads' shapes and
at a sweep of cells, batches and widths for each CUDA recurrence variant the build has,
with the per-step model fitted to them ("recurrent", recurrent.py), and its
provenance (device, date, driver, runtime, gpucmp version, the build's kernel-variant
fingerprint; each partition keeps its own). `save(cal, path)` writes it atomically;
`peaks_from` reuses the GEMM and copy peaks of an existing calibration of the same card
(a calibration of a few more workloads to merge into it: merge.py).
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

from . import costs
from . import devices as devices_mod
from . import energy
from . import results
from . import specs
from . import step_profile
from . import workloads as wl
from . import recurrent
from .projection import CALIBRATION_SCHEMA, DeviceModel, UNIT_COLUMN, PEAK_PRECISION, blocks_at, fit_copy_curve
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


def reuse_peaks(device, cal):
    """(peaks, kernel rows) of an existing calibration `cal` of this card, with only the
    launch costs measured again (a second or two): for a calibration of a few workloads
    that is merged into `cal` afterwards, whose own GEMM and copy peaks are not used."""
    core = _core
    peaks = dict(cal["peaks"])
    peaks["launch_eager_s"] = _sized(lambda inner, reps: core.bench_gemm(device, 16, 16, 16, "float32", repeats=reps,
                                                                         warmup=5, inner=inner), 5e-6, 0.05, 7)
    peaks["launch_s"] = _sized(lambda inner, reps: core.bench_gemm(device, 16, 16, 16, "float32", repeats=reps,
                                                                   warmup=5, inner=inner, graph=True), 3e-6, 0.05, 7)
    peaks["reused_from"] = f"{cal['gpu']} calibration of {(cal.get('provenance') or {}).get('date', '?')}"
    return peaks, list(cal.get("kernels", []))


def peaks_source(path, gpu, sm_limit):
    """The calibration whose peaks a run with peaks_from=path reuses: the file's whole card,
    or its partition of `sm_limit` SMs for a confined run; ValueError for another GPU or
    a partition it lacks."""
    from .projection import load_calibration
    cal = load_calibration(path)
    if cal["gpu"] != gpu:
        raise ValueError(f"calibrate: --peaks-from {path!r} is a {cal['gpu']} calibration, this is a {gpu}")
    if sm_limit is None:
        return cal
    part = (cal.get("partitions") or {}).get(str(int(sm_limit)))
    if part is None:
        raise ValueError(f"calibrate: --peaks-from {path!r} has no {int(sm_limit)}-SM partition to take peaks from")
    return part


def build_fingerprint():
    """A short hash of the build's kernel-variant points and their variants: two calibrations
    with different fingerprints were measured with different kernels."""
    import hashlib
    try:
        pts = _core.variants()
    except Exception:
        return None
    desc = {k: sorted(v.get("variants") or []) for k, v in sorted(pts.items())}
    return hashlib.sha1(json.dumps(desc, sort_keys=True).encode()).hexdigest()[:12]


def _rnn_variant_ran():
    """The cuda.rnn variant the last recurrent op ran ('stepwise' in a build without the point)."""
    try:
        v = _core.variant_last("cuda.rnn")
    except (ValueError, KeyError, AttributeError):
        return "stepwise"
    return v if v in costs.RNN_VARIANTS else "stepwise"


def rnn_variants_here():
    """The cuda.rnn variants this build and device can run, [] without the point (the build's
    only recurrence then is the stepwise loop, run by auto)."""
    info = _core.variants().get("cuda.rnn")
    if not info:
        return []
    return [v for v in info.get("available") or [] if v in costs.RNN_VARIANTS]


def bench_recurrent(device, cell, which, batch, steps, units, dtype, estimate_s, variant=None, graph=True):
    """(seconds, variant that ran) of one recurrent op timed from a graph (bench_rnn; graph=False
    times eager calls, for a backend without capture); variant forces cuda.rnn (None: auto)."""
    from .. import variants as variants_mod

    def one():
        t = _sized(lambda inner, reps: _core.bench_rnn(device, cell, batch, steps, units, dtype, which=which,
                                                       repeats=reps, warmup=2, inner=inner, graph=graph),
                   estimate_s, RNN_SAMPLE_S, 5)
        return t, _rnn_variant_ran()
    if variant is None:
        return one()
    with variants_mod.forced("cuda.rnn", variant):
        return one()


RNN_SAMPLE_S = 0.01
# the sweep the per-step model is fitted to: cells x batches x widths at a fixed length
RNN_SWEEP = {"cells": ("simple", "lstm", "gru"), "batches": (16, 128), "units": (64, 256), "steps": 32}


def _rnn_estimate(op, launch_s):
    return op.launches * launch_s + op.extra["steps"] * 2e-6


def measure_recurrent(device, launch_s, skipped, sweep=RNN_SWEEP, graph=True):
    """Points {seconds, cell, which, batch, steps, units, dtype, variant} of the recurrent
    sweep, for each cuda.rnn variant available here (the build's auto choice alone in a
    build without the point); shapes a variant refuses are noted in `skipped`."""
    from .costs import recurrent as rnn_op
    points = []
    for variant in rnn_variants_here() or [None]:
        for cell in sweep["cells"]:
            for b in sweep["batches"]:
                for u in sweep["units"]:
                    for which in ("fwd", "bwd"):
                        op = rnn_op("sweep", which, cell, b, sweep["steps"], u, "float32", variant or "stepwise")
                        try:
                            sec, ran = bench_recurrent(device, cell, which, b, sweep["steps"], u, "float32",
                                                       _rnn_estimate(op, launch_s), variant, graph)
                        except (ValueError, RuntimeError, MemoryError, NotImplementedError) as exc:
                            skipped.append(f"recurrent sweep {variant or 'auto'} {cell} {which} B={b} u={u}: {exc}")
                            continue
                        points.append({"seconds": sec, "cell": cell, "which": which, "batch": b,
                                       "steps": sweep["steps"], "units": u, "dtype": "float32", "variant": ran})
    return points


def recurrent_record(points, ops, origin, launch_s, clock_mhz):
    """cal["recurrent"]: the sweep's points, the per-step model fitted to them and to the
    workloads' own recurrent ops, and the variant auto ran for most of those ops."""
    own = [dict(r, seconds=r["seconds"]) for r in ops.values() if r.get("kind") in recurrent.RNN_KINDS]
    ran = [r["variant"] for r in own if r.get("variant")]
    auto = max(set(ran), key=ran.count) if ran else None
    fits = recurrent.fit(points + own, origin, launch_s, clock_mhz) if points or own else {}
    return {"points": points, "fits": fits, "auto_variant": auto, "clock_mhz": clock_mhz,
            "model": "recurrent.py: T x max(step FLOPs / (efficiency x per-SM fp32 x SMs), floor_s x units)"}


def _idle_power(device, info):
    mod, h = energy.nvml_handle(info.get("pci_bus_id"), int(device.split(":")[1]))
    try:
        return mod.nvmlDeviceGetPowerUsage(h) / 1000.0 if h is not None else math.nan
    except Exception:
        return math.nan


COPY_CURVE_SMS = (8, 24, 48, 96)
PARTITION_SMS = (8, 24, 48, 96)
PARTITION_OPS_BUDGET_S = 60.0
_COPY_CHILD = """
import json, sys
from gpucmp import _core
dev, nbytes = sys.argv[1], int(sys.argv[2])
info = dict(_core.device_info(dev))
t = _core.bench_copy(dev, nbytes, repeats=5)
print(json.dumps({"sms": info["sms"], "sm_limit": info.get("sm_limit"), "seconds": t}))
"""


def measure_copy_curve(device, sms_counts, nbytes, skipped, timeout_s=120):
    """{sms: bytes/s} of the device copy of `nbytes` with the CUDA backend confined to each of
    `sms_counts` SMs (a CUDA green context; GPUCMP_CUDA_SMS applies when a process starts its
    backend, so each count runs in a child interpreter). How the copy rate saturates as SMs
    are added is the projection's bandwidth model for cards with fewer SMs (fit_copy_curve);
    a count that cannot be confined is noted in `skipped` and left out."""
    import os
    import subprocess
    import sys
    curve = {}
    for n in sms_counts:
        env = dict(os.environ, GPUCMP_CUDA_SMS=str(int(n)))
        try:
            out = subprocess.run([sys.executable, "-c", _COPY_CHILD, device, str(int(nbytes))], env=env,
                                 capture_output=True, text=True, timeout=timeout_s)
            rec = json.loads(out.stdout.strip().splitlines()[-1]) if out.returncode == 0 else None
        except (subprocess.TimeoutExpired, ValueError, IndexError, OSError) as exc:
            skipped.append(f"copy on {n} SMs: {exc}")
            continue
        if rec is None or int(rec.get("sm_limit") or 0) != int(n):
            skipped.append(f"copy on {n} SMs: {(out.stderr or '').strip().splitlines()[-1:] or 'not confined'}")
            continue
        curve[str(int(n))] = 2.0 * nbytes / float(rec["seconds"])
    return curve


def profile_models(device, models, precs, batch_sizes, skipped, repeats=3):
    """In-step op times (step_profile.profile_run) of each model workload x batch size x
    precision: records {workload, precision, batch_size, ops: {signature: seconds}}."""
    out = []
    for w in models:
        for c in w.configs("cuda", batch_sizes):
            for p in precs:
                if not w.supports(p):
                    continue
                run = None
                try:
                    run = w.prepare(device, c, p)
                    run.run(2)
                    table = step_profile.profile_run(run, repeats)
                except (ValueError, RuntimeError, MemoryError, NotImplementedError) as exc:
                    skipped.append(f"profile of {w.name} {p} batch {c.batch_size}: {exc}")
                    continue
                finally:
                    if run is not None:
                        run.close()
                out.append({"workload": w.name, "precision": p, "batch_size": int(c.batch_size), "ops": table})
    return out


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


def time_ops(device, ws, precs, batch_sizes, origin, launch_s, sm_list, ops, skipped, budget_s=None,
             t_start=None, checkpoint=None):
    """Time every GEMM, convolution and copy the workloads `ws` run (each op key once) into
    `ops` (op key -> record), with its grids for `sm_list` SM counts and, for an op whose
    grid follows the SMs, its time with the grid for sm_list[0] SMs; ops not timed go to
    `skipped` with the reason. budget_s bounds the seconds spent from t_start (batch sizes
    outer, precisions inner: a budget cut leaves whole batch sizes out, not whole
    precisions); checkpoint() runs after each workload."""
    import time
    t_start = time.perf_counter() if t_start is None else t_start
    n_sms = origin.sms
    log_grids = True
    for w in ws:
        for c in w.configs("cuda", batch_sizes if w.kind == "model" else None):
            for p in precs:
                if not w.supports(p):
                    continue
                for op in w.ops(c, p):
                    rnn = op.kind in recurrent.RNN_KINDS
                    if not (rnn or op.kind in ("gemm", "copy") or op.kind.startswith("conv2d_")):
                        continue
                    if not op.key or op.key in ops:
                        continue
                    if budget_s is not None and time.perf_counter() - t_start > budget_s:
                        skipped.append(f"{op.key}: not timed (ops budget of {budget_s} s spent)")
                        continue
                    if rnn:
                        rec = time_recurrent(device, op, launch_s, skipped)
                        if rec is not None:
                            ops[op.key] = rec
                        continue
                    estimate = 2 * origin.roofline(op) + launch_s
                    try:
                        sec, grids = _bench_op(device, op, estimate, sm_list if log_grids else None)
                    except NotImplementedError as exc:
                        if log_grids and "launch log" in str(exc):   # a build without the launch wrap
                            log_grids = False
                            skipped.append(f"grids: {exc}")
                            sec, grids = _bench_op(device, op, estimate)
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
                        if blocks_at(rec, small, 0) != blocks_at(rec, n_sms, 0):
                            # the grid follows the SMs: time it with the grid for `small` SMs too
                            # (the projection's per-block model, projection.block_model)
                            try:
                                rec["seconds_small"] = _bench_op(device, op, sec, plan_sms=small)[0]
                                rec["small_sms"] = small
                            except (ValueError, RuntimeError, MemoryError) as exc:
                                skipped.append(f"{op.key} at plan_sms={small}: {exc}")
                    rec["roofline_s"] = origin.roofline(
                        dataclasses.replace(op, blocks=blocks_at(rec, origin.sms, op.blocks)))
                    ops[op.key] = rec
        if checkpoint:
            checkpoint()
    return ops


def time_recurrent(device, op, launch_s, skipped, graph=True):
    """The calibration record of a workload's recurrent op, timed at its shape with the
    variant auto picks (recurrent dropout is not timed: bench_rnn runs without it), or None."""
    e = op.extra
    if e["rmask"]:
        skipped.append(f"{op.key}: not timed (bench_rnn has no recurrent dropout)")
        return None
    try:
        sec, ran = bench_recurrent(device, e["cell"], e["which"], e["batch"], e["steps"], e["units"], op.dtype,
                                   _rnn_estimate(op, launch_s), graph=graph)
    except (ValueError, RuntimeError, MemoryError, NotImplementedError) as exc:
        skipped.append(f"{op.key}: {exc}")
        return None
    from .costs import rnn_launches
    return {"seconds": sec, "kind": op.kind, "unit": op.unit, "flops": op.flops, "bytes": op.bytes,
            "blocks": op.blocks, "variant": ran, "launches": rnn_launches(e["cell"], e["steps"], ran, e["rmask"]),
            "cell": e["cell"], "which": e["which"], "batch": e["batch"], "steps": e["steps"], "units": e["units"],
            "dtype": op.dtype}


CALIBRATED_WORKLOADS = ("cnn", "gemm", "conv", "bandwidth", "resnet50", "rnn", "lstm", "gan")


def calibrate(device="cuda:0", workloads=CALIBRATED_WORKLOADS,
              precisions=("float32", "float16", "bfloat16"), batch_sizes=None, step_repeats=3, progress=None,
              ops_budget_s=None, path=None, copy_curve=True, partitions=PARTITION_SMS,
              partition_ops_budget_s=PARTITION_OPS_BUDGET_S, peaks_from=None):
    """Measure the calibration of `device` (see the module docstring). ops_budget_s bounds
    the time spent timing single ops (those left are projected from their kind's measured
    efficiency); path, when given, is written after each phase, so a cut-off run keeps
    what it measured. partitions: the SM counts the card is confined to for the
    partition calibrations (each with partition_ops_budget_s for its single ops); () or
    None for none; a card already confined measures none. peaks_from: the path of a
    calibration of this card whose GEMM / copy peaks (and copy curve) are reused instead
    of measured (its partition of the same SM count for a confined card; the partitions
    measured here reuse theirs the same way)."""
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
    if peaks_from:
        peaks, kernels = reuse_peaks(device, peaks_source(peaks_from, record["gpu"], info.get("sm_limit")))
    else:
        peaks, kernels = measure_peaks(device)
    skipped = []
    if copy_curve and info.get("sm_limit") is None and not peaks_from:
        curve = measure_copy_curve(device, [n for n in COPY_CURVE_SMS if n < int(info["sms"])], peaks["copy_bytes"],
                                   skipped)
        if curve:
            rate, exponent = fit_copy_curve(curve, int(info["sms"]), peaks["copy_bytes_per_s"])
            peaks.update(copy_curve=curve, per_sm_copy_bytes_per_s=rate, copy_exponent=exponent,
                         per_sm_copy_from=f"device copy on {'/'.join(curve)} SMs (green contexts)")
    origin = DeviceModel(record["gpu"], int(info["sms"]),
                         {u: peaks["gemm_flops"][PEAK_PRECISION[u]] for u in UNIT_COLUMN},
                         peaks["copy_bytes_per_s"], peaks["launch_s"])
    ws = wl.resolve_list(list(workloads))
    precs = [canonical_precision(p) for p in precisions]
    ops, profiles = {}, []
    models = [w for w in ws if w.kind == "model" and w.measurable]
    steps = []
    rnn_info = {}
    from .. import __version__

    def result():
        return {
            "schema": CALIBRATION_SCHEMA, "gpu": record["gpu"], "sms": int(info["sms"]),
            "provenance": {"device": record["name"], "date": datetime.datetime.now(datetime.timezone.utc).isoformat(
                timespec="seconds"), "driver": record.get("driver_version"), "cuda_runtime": info.get("runtime_version"),
                "gpucmp": __version__, "host": platform.node(), "sm_clock_mhz": record.get("sm_clock_mhz"),
                "power_limit_w": record.get("power_limit_w"), "sm_limit": info.get("sm_limit"),
                "build": build_fingerprint(), "workloads": [w.name for w in ws],
                "command": "gpucmp calibrate"},
            "peaks": peaks, "power": power, "kernels": kernels, "ops": ops, "steps": steps, "grid_sms": sm_list,
            "profiles": profiles,
            "skipped_ops": skipped,
            **({"recurrent": rnn_info} if rnn_info else {}),
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
        profiles.extend(profile_models(device, models, precs, batch_sizes, skipped))
    t_start = time.perf_counter()            # the ops budget starts once the steps are measured
    time_ops(device, ws, precs, batch_sizes, origin, peaks["launch_s"], sm_list, ops, skipped,
             budget_s=ops_budget_s, t_start=t_start, checkpoint=(lambda: save(result(), path)) if path else None)
    if any(r.get("kind") in recurrent.RNN_KINDS for r in ops.values()):
        # the per-step model's fit: a sweep of shapes per variant, and the workloads' own ops
        clock = float(power.get("max_sm_clock_mhz") or math.nan)
        rnn_origin = DeviceModel(record["gpu"], int(info["sms"]), {"fp32": peaks["gemm_flops"]["float32"]},
                                 peaks["copy_bytes_per_s"], peaks["launch_s"], clock_mhz=clock)
        rnn_info.update(recurrent_record(measure_recurrent(device, peaks["launch_s"], skipped), ops, rnn_origin,
                                         peaks["launch_s"], clock))
    cal = result()
    if path:
        save(cal, path)
    if partitions and info.get("sm_limit") is None:
        subs = measure_partitions(device, [n for n in partitions if n < int(info["sms"])], list(workloads), precs,
                                  batch_sizes, partition_ops_budget_s, skipped, peaks_from=peaks_from,
                                  step_repeats=step_repeats)
        cal = attach_partitions(cal, subs)
        if path:
            save(cal, path)
    return cal


def measure_partitions(device, sms_counts, workloads, precisions, batch_sizes, ops_budget_s, skipped,
                       timeout_s=600, peaks_from=None, step_repeats=3):
    """{sms: calibration} of the card confined to each of `sms_counts` SMs: `gpucmp calibrate`
    in a child process with GPUCMP_CUDA_SMS set (a green context applies when a process
    starts its backend), without a copy curve or partitions of its own. A count that cannot
    be confined or does not finish is noted in `skipped` and left out."""
    import os
    import subprocess
    import sys
    import tempfile
    subs = {}
    for n in sms_counts:
        with tempfile.TemporaryDirectory() as tmp:
            out_path = os.path.join(tmp, f"partition{int(n)}.json")
            cmd = [sys.executable, "-m", "gpucmp", "calibrate", "--device", device, "--out", out_path,
                   "--no-partitions", "--no-copy-curve", "--workloads", *workloads, "--precision", *precisions]
            if ops_budget_s is not None:
                cmd += ["--ops-budget-s", str(float(ops_budget_s))]
            if batch_sizes:
                cmd += ["--batch-size", *[str(int(b)) for b in batch_sizes]]
            if peaks_from:
                cmd += ["--peaks-from", os.path.abspath(peaks_from)]
            if step_repeats != 3:
                cmd += ["--step-repeats", str(int(step_repeats))]
            env = dict(os.environ, GPUCMP_CUDA_SMS=str(int(n)))
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout_s)
            except (subprocess.TimeoutExpired, OSError) as exc:
                skipped.append(f"partition of {n} SMs: {exc}")
                continue
            if proc.returncode != 0 or not os.path.exists(out_path):
                last = (proc.stderr or proc.stdout or "").strip().splitlines()[-1:]
                skipped.append(f"partition of {n} SMs: exit {proc.returncode} {last[0] if last else ''}".strip())
                continue
            with open(out_path, encoding="utf-8") as f:
                subs[int(n)] = json.load(f)
    return subs


def attach_partitions(cal, subs):
    """cal with `subs` ({sms: calibration of the same GPU confined to sms SMs}) as its
    partitions; ValueError for one of another GPU or not confined to the SMs it is filed
    under, or not fewer than the card's."""
    out = dict(cal)
    parts = dict(cal.get("partitions") or {})
    for n, sub in subs.items():
        n = int(n)
        limit = (sub.get("provenance") or {}).get("sm_limit")
        if sub.get("schema") != CALIBRATION_SCHEMA or sub.get("gpu") != cal["gpu"]:
            raise ValueError(f"attach_partitions: the {n}-SM partition is not a {cal['gpu']} calibration")
        if limit is None or int(limit) != n or int(sub.get("sms", 0)) != n or n >= int(cal["sms"]):
            raise ValueError(f"attach_partitions: the {n}-SM partition was measured on {sub.get('sms')} SMs "
                             f"(sm_limit {limit}) of {cal['sms']}")
        sub = {k: v for k, v in sub.items() if k != "partitions"}
        parts[str(n)] = sub
    out["partitions"] = dict(sorted(parts.items(), key=lambda kv: int(kv[0])))
    return out


def save(cal, path):
    results._atomic_write(path, json.dumps(cal, indent=1, sort_keys=True) + "\n")
    return path
