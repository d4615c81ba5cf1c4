"""Measured runs: `benchmark()` -> a tidy DataFrame, and `measure_callable()` for the pytest plugin.

What it provides: `benchmark(workloads, devices, precisions, batch_sizes, repeats)` runs
every device x workload x precision x size and returns one row each: the median step
time and its spread over `repeats` samples, throughput in the workload's unit, the
backend's peak device memory next to the modelled one, energy per step and average
power, the SM clock, and what software measured it (results.py's schema, source =
"measured"). `measure_callable(fn, ...)` times any callable the same way.

How: a warm-up sample builds plans, loads kernels and captures graphs; a short probe
sizes the samples so each lasts at least `min_sample_s` (energy counters tick every
few ms); then `repeats` samples. Kernel workloads are timed by the core between two
device synchronisations; models from fit's on_train_begin to on_train_end. An energy
meter (energy.py) records the counter throughout, and each sample's window is cut out
of it. Peak memory comes from the backend's own high-water mark, reset before the run.
"""
import datetime
import gc
import math
import numbers
import os
import platform
import statistics
import sys
import time
import warnings

from . import devices as devices_mod
from . import energy, results
from . import workloads as wl
from .workloads.base import NotMeasurable, canonical_precision
from .. import _core

DEFAULT_PRECISIONS = {"cpu": ("float32",), "cuda": ("float32", "float16")}
DEFAULT_REPEATS = {"cpu": 3, "cuda": 5}
MIN_SAMPLE_S = {"cpu": 0.2, "cuda": 1.0}
MAX_STEPS_PER_SAMPLE = 200000


def _kind(device):
    return "cuda" if device.startswith("cuda") else "cpu"


def _default_devices():
    present = devices_mod.available()
    gpus = [d for d in present if d.startswith("cuda")]
    return gpus or ["cpu"]


def _as_list(v, what):
    if v is None:
        return None
    if isinstance(v, (str, int)) or not hasattr(v, "__iter__"):
        v = [v]
    v = list(v)
    if not v:
        raise ValueError(f"{what} is empty: leave it out for the defaults or give at least one value")
    return v


def _batch_list(batch_sizes):
    sizes = _as_list(batch_sizes, "batch_sizes")
    if sizes is None:
        return None
    out = []
    for b in sizes:
        if isinstance(b, bool) or not isinstance(b, numbers.Integral):
            raise TypeError(f"batch sizes must be positive integers, got {b!r}")
        if int(b) < 1:
            raise ValueError(f"batch sizes must be positive integers, got {b!r}")
        out.append(int(b))
    return out


def _versions(device, info):
    import numpy
    from .. import __version__
    v = {"gpucmp_version": __version__, "numpy_version": numpy.__version__, "python_version": platform.python_version()}
    if device.startswith("cuda"):
        v["cuda_runtime"] = info.get("runtime_version")
        v["cuda_driver"] = info.get("driver_version")
    return v


class _Sample:
    __slots__ = ("seconds", "steps", "joules", "clock")

    def __init__(self, seconds, steps, joules, clock):
        self.seconds, self.steps, self.joules, self.clock = seconds, steps, joules, clock


def _one_sample(run, n, meter):
    t = run.timed(n)
    t_end = time.perf_counter()
    if t is None:
        t0 = time.perf_counter()
        run.run(n)
        t_end = time.perf_counter()
        t = t_end - t0
    steps = run.steps_done() if hasattr(run, "steps_done") else n
    if hasattr(run, "window"):
        w0, w1 = run.window()
    else:
        w0, w1 = t_end - t, t_end
    return _Sample(t, steps, meter.joules(w0, w1), meter.mean_clock(w0, w1))


def _measure_run(run, repeats, min_sample_s, meter):
    _one_sample(run, 1, meter)                     # warm-up: plans, kernels, graph capture
    probe = _one_sample(run, 3, meter)
    per_step = max(probe.seconds / max(1, probe.steps), 1e-7)
    n = int(min(MAX_STEPS_PER_SAMPLE, max(1, math.ceil(min_sample_s / per_step))))
    return [_one_sample(run, n, meter) for _ in range(repeats)], n


def _row(device, info, record, workload, precision, config, samples, n, peak, modeled):
    per_step = [s.seconds / s.steps for s in samples]
    step = statistics.median(per_step)
    q = statistics.quantiles(per_step, n=4) if len(per_step) >= 2 else [step, step, step]
    joules = [s.joules for s in samples]
    secs = sum(s.seconds for s in samples)
    power = sum(joules) / secs if joules and all(not math.isnan(j) for j in joules) and secs > 0 else math.nan
    ops = workload.ops(config, precision)
    flops = sum(o.flops for o in ops)
    nbytes = sum(o.bytes for o in ops)
    row = {
        "device": device, "device_name": record.get("name"), "gpu": record.get("gpu"),
        "workload": workload.name, "precision": precision, "batch_size": config.batch_size,
        "size": config.label, "step_time_s": step, "step_time_iqr_s": q[2] - q[0],
        "step_time_min_s": min(per_step), "step_time_max_s": max(per_step), "repeats": len(samples),
        "steps_per_repeat": n, "throughput": workload.throughput(config, precision, step), "unit": workload.unit,
        "flops_per_step": flops, "bytes_per_step": nbytes, "peak_memory_bytes": peak,
        "modeled_memory_bytes": modeled, "energy_per_step_j": power * step if not math.isnan(power) else math.nan,
        "avg_power_w": power, "sm_clock_mhz": _clock(samples, device, info), "sms": record.get("sms"),
        "source": "measured", "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
    }
    row.update(_versions(device, info))
    return row


def _clock(samples, device, info):
    """The SM clock the samples ran at: the median of their time-averaged clocks, else a reading now."""
    clocks = [s.clock for s in samples if not math.isnan(s.clock)]
    return statistics.median(clocks) if clocks else _sm_clock(device, info)


def _sm_clock(device, info):
    if not device.startswith("cuda"):
        return math.nan
    mod, h = energy.nvml_handle(info.get("pci_bus_id"), int(device.split(":")[1]))
    if h is not None:
        try:
            return float(mod.nvmlDeviceGetClockInfo(h, mod.NVML_CLOCK_SM))
        except Exception:
            pass
    return float(info.get("sm_clock_mhz") or math.nan)


def _progress(total, enabled):
    if enabled is None:
        enabled = total > 1 and sys.stderr.isatty()
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="gpucmp benchmark", unit="run")


def plan_runs(workloads=None, devices=None, precisions=None, batch_sizes=None):
    """[(device, workload, precision, config)] that benchmark() would measure (all arguments
    checked: unknown workloads, devices or precisions raise ValueError before anything runs)."""
    ws = wl.resolve_list(workloads)
    devs = [devices_mod.check_device(d) for d in (_as_list(devices, "devices") or _default_devices())]
    precs = _as_list(precisions, "precisions")
    precs = [canonical_precision(p) for p in precs] if precs is not None else None
    sizes = _batch_list(batch_sizes)
    runs = []
    for d in devs:
        kind = _kind(d)
        for w in ws:
            for p in (precs or DEFAULT_PRECISIONS[kind]):
                if not w.supports(p):
                    continue
                for c in w.configs(kind, sizes if w.kind == "model" or w.name == "conv" else None):
                    runs.append((d, w, p, c))
    return runs


def capacity_bytes(device, info):
    """Memory a workload may use on the device: the GPU's memory, or the host's RAM for 'cpu'."""
    if device.startswith("cuda"):
        return float(info.get("total_memory_bytes") or math.inf)
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return math.inf


def check_fits(device, info, workload, config, precision):
    """ValueError when the modelled training step cannot fit the device at all."""
    if workload.kind != "model":
        return
    need = workload.memory(config, precision, config.batch_size, _kind(device))["total"]
    cap = capacity_bytes(device, info)
    if need > cap:
        raise ValueError(f"batch size {config.batch_size} of workload '{workload.name}' does not fit {device}: "
                         f"it needs about {need / 1e9:,.1f} GB, the device has {cap / 1e9:,.1f} GB "
                         f"(largest batch that fits: {workload.max_batch(cap, precision):,})")


def benchmark(workloads=None, devices=None, precisions=None, batch_sizes=None, repeats=None,
              min_sample_s=None, progress=None):
    """Measure workloads on devices: one row per device x workload x precision x batch size.

    workloads: names ('cnn', 'gemm', 'gemm:4096', 'conv', 'bandwidth'), Workload objects or
    compiled gpucmp.keras models (default: all measurable built-ins); devices: 'cpu',
    'cuda:N' (default: the GPUs present, else the CPU); precisions: 'float32', 'tf32',
    'float16' / 'mixed_float16', 'bfloat16' / 'mixed_bfloat16' (default float32 on the CPU,
    float32 and float16 on GPUs); batch_sizes for models and conv; repeats: samples per row.
    Workloads that cannot be measured on a device (resnet50 on the CPU) are skipped with a
    warning when named.
    """
    if repeats is not None and (isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1):
        raise ValueError(f"repeats must be a positive integer, got {repeats!r}")
    named = workloads is not None
    runs = plan_runs(workloads, devices, precisions, batch_sizes)
    core = _core
    rows, skipped = [], []
    infos = {}
    for device, w, p, c in runs:      # every batch is checked against the memory before anything runs
        if w.measurable:
            check_fits(device, infos.setdefault(device, dict(core.device_info(device))), w, c, p)
    bar = _progress(len(runs), progress)
    try:
        for device, w, p, c in runs:
            if not w.measurable:
                if named:
                    skipped.append(f"{w.name}: cannot be measured yet")
                if bar:
                    bar.update(1)
                continue
            kind = _kind(device)
            info = infos.setdefault(device, dict(core.device_info(device)))
            record = devices_mod.device_record(device)
            reps = repeats or DEFAULT_REPEATS[kind]
            gc.collect()                       # buffers of the previous run go before the peak is reset
            core.reset_peak_memory(device)
            base = core.memory_stats(device)["allocated_bytes"]
            meter = energy.meter_for(device, info).start()
            try:
                run = w.prepare(device, c, p)
                try:
                    samples, n = _measure_run(run, reps, min_sample_s or MIN_SAMPLE_S[kind], meter)
                finally:
                    run.close()
            except NotMeasurable as exc:
                skipped.append(f"{w.name}: {exc}")
                continue
            finally:
                meter.stop()
            peak = core.memory_stats(device)["peak_bytes"] - base     # what this run added at most
            dataset_rows = getattr(run, "last_rows", 0)    # the rows the last fit uploaded
            mem = w.memory(c, p, dataset_rows, kind) if w.kind == "model" else None
            modeled = mem["total"] if mem else math.nan
            rows.append(_row(device, info, record, w, p, c, samples, n, peak, modeled))
            if bar:
                bar.update(1)
    finally:
        if bar:
            bar.close()
    for s in skipped:
        warnings.warn(f"benchmark: skipped {s}", stacklevel=2)
    df = results.frame(rows)
    df.attrs["skipped"] = skipped
    return df


def measure_callable(fn, args=(), kwargs=None, device=None, repeats=5, warmup=1, min_sample_s=0.0):
    """(result of the last call, measurement dict) for fn(*args, **kwargs) run on `device`
    (gpucmp's current device while it runs): median seconds per call and spread, peak
    memory of the backend during the calls, energy per call and average power."""
    import gpucmp
    kwargs = kwargs or {}
    device = devices_mod.check_device(device or gpucmp.get_device())
    core = _core
    info = dict(core.device_info(device))
    before = gpucmp.get_device()
    gpucmp.set_device(device)
    try:
        result = None
        for _ in range(max(0, int(warmup))):
            result = fn(*args, **kwargs)
        gc.collect()
        core.reset_peak_memory(device)
        base = core.memory_stats(device)["allocated_bytes"]
        meter = energy.meter_for(device, info).start()
        times, joules = [], []
        try:
            for _ in range(max(1, int(repeats))):
                t0 = time.perf_counter()
                inner = 0
                while True:
                    result = fn(*args, **kwargs)
                    inner += 1
                    t1 = time.perf_counter()
                    if t1 - t0 >= min_sample_s:
                        break
                times.append((t1 - t0) / inner)
                joules.append(meter.joules(t0, t1) / inner)
        finally:
            meter.stop()
        peak = core.memory_stats(device)["peak_bytes"] - base
    finally:
        gpucmp.set_device(before)
    median = statistics.median(times)
    power = (sum(joules) / sum(times)) if all(not math.isnan(j) for j in joules) and sum(times) > 0 else math.nan
    return result, {"device": device, "seconds": median, "min_seconds": min(times), "max_seconds": max(times),
                    "repeats": len(times), "peak_memory_bytes": peak,
                    "energy_j": statistics.median(joules) if joules else math.nan, "avg_power_w": power,
                    "energy_method": meter.method}

