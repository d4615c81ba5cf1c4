"""Comparison: GPUs side by side per workload and precision, measured where possible, projected elsewhere.

What it provides: `compare(gpus, workloads, precisions, batch_sizes, results, measure,
include_local)` -> a DataFrame, one row per GPU x workload x precision x batch size:
throughput, step time, source ('measured' / 'projected'), the ratio to the first GPU,
performance per watt (measured power, or TDP for projected rows) and per dollar (launch
price), the memory the step needs, whether it fits the card and the largest batch that
does. A GPU may be a data-parallel configuration of one host ("2x A4000", "2x A5000 NVLink":
multi_gpu.py), projected from one card at the per-GPU batch plus the gradients' all-reduce,
with the power, price and largest batch of N cards (columns gpus, interconnect,
scaling_efficiency). Results passed in (`results=`: DataFrames or files from `benchmark` on other
machines) and GPUs present here (measured when `measure=True`) replace projections;
`include_local` adds the measured rows of other devices -- this machine's CPU, GPUs not
in the list -- as reference rows (column `reference`; no ratio).

Why it is built this way: the user's question is one table -- "A4000 or A5000, for my
work" -- so every row says where its number comes from, and measured numbers always win
over the model (results.merge decides).
"""
import math
import platform

import pandas as pd

from . import devices as devices_mod
from . import multi_gpu, projection, results, specs
from . import workloads as wl
from .memory import CONTEXT_RESERVE_BYTES
from .runner import benchmark, DEFAULT_PRECISIONS
from .workloads.base import canonical_precision

COLUMNS = ["gpu", "device", "workload", "precision", "batch_size", "size", "throughput", "unit", "ratio", "step_time_s",
           "source", "perf_per_watt", "perf_per_dollar", "power_w", "price_usd", "memory_needed_bytes", "fits",
           "max_batch", "origin", "note", "reference"]
MULTI_GPU_COLUMNS = ["scaling_efficiency", "gpus", "interconnect"]
SINGLE_GPU_VALUES = {"scaling_efficiency": math.nan, "gpus": 1, "interconnect": ""}


def _gpu_list(gpus):
    if isinstance(gpus, str):
        gpus = [gpus]
    if gpus is None or not list(gpus):
        raise ValueError("compare: give at least one GPU, e.g. compare(['A4000', 'A5000'])")
    names = [multi_gpu.label(multi_gpu.parse(g)) for g in gpus]
    return list(dict.fromkeys(names))


def _measured_here(gpu_names, workloads, precisions, batch_sizes, include_local):
    """benchmark() rows of the devices here: GPUs that are among gpu_names, and (include_local)
    the CPU when no listed GPU is present."""
    table = devices_mod.devices()
    gpus_here = [r["device"] for r in table.to_dict("records") if r["kind"] == "cuda" and r["gpu"] in gpu_names]
    frames = []
    measurable = [w for w in workloads if w.measurable]
    if gpus_here and measurable:
        frames.append(benchmark(measurable, gpus_here, precisions, batch_sizes))
    on_cpu = [w for w in measurable if w.cpu_measurable]
    if include_local and not gpus_here and on_cpu:
        precs = [p for p in (precisions or DEFAULT_PRECISIONS["cpu"]) if p in DEFAULT_PRECISIONS["cpu"]]
        if precs:
            frames.append(benchmark(on_cpu, ["cpu"], precs, batch_sizes))
    return frames


def compare(gpus, workloads=None, precisions=None, batch_sizes=None, results=None, measure=True,
            include_local=True, calibration=None):
    """GPUs side by side (see the module docstring). gpus: names ('A4000', 'RTX A5000', ...,
    or data-parallel configurations such as '2x A4000': multi_gpu.parse); workloads as for
    benchmark() (default cnn, gemm, conv, bandwidth, resnet50); precisions default float32
    and float16 (mixed_float16 for models); results: DataFrames or .csv/.json files of
    measured rows to use instead of projections."""
    names = _gpu_list(gpus)
    setups = {g: multi_gpu.parse(g) for g in names}
    ws = wl.resolve_list(workloads)
    if isinstance(precisions, (list, tuple)) and not precisions:
        raise ValueError("compare: precisions is empty")
    if isinstance(precisions, str):
        precisions = [precisions]
    precs = [canonical_precision(p) for p in (precisions if precisions is not None else DEFAULT_PRECISIONS["cuda"])]
    from .runner import _batch_list
    sizes = _batch_list(batch_sizes)
    given = [results] if isinstance(results, (str, pd.DataFrame)) or hasattr(results, "__fspath__") else (results or [])
    frames = [_load(r) for r in given]
    _check_fit(setups, ws, precs, sizes)
    if measure:
        frames += _measured_here(names, ws, precs, sizes, include_local)
    measured = _merge(frames)
    cal = calibration if isinstance(calibration, dict) else projection.load_calibration(calibration)
    rows = []
    for w in ws:
        for p in precs:
            if not w.supports(p):
                continue
            for c in w.configs("cuda", sizes if w.kind == "model" or w.name == "conv" else None):
                block = []
                for g in names:
                    m = _find(measured, g, w.name, p, c.batch_size)
                    row = dict(m) if m is not None else _project(w, setups[g], p, c, cal)
                    block.append(_decorate(row, setups[g], g, w, p, c))
                base = block[0]["throughput"]
                for r in block:
                    r["ratio"] = r["throughput"] / base if base and not math.isnan(base) else math.nan
                rows.extend(block)
    out = pd.DataFrame(rows).assign(reference=False)
    local = _local_rows(measured, names)
    if include_local and len(local):
        out = pd.concat([out, local], ignore_index=True)
    for col in COLUMNS:
        if col not in out.columns:
            out[col] = math.nan
    for col, single in SINGLE_GPU_VALUES.items():
        out[col] = out[col].fillna(single) if col in out.columns else single
    out["gpus"] = out["gpus"].astype(int)
    shown = COLUMNS + MULTI_GPU_COLUMNS
    out = out[shown + [c for c in out.columns if c not in shown]]
    out.attrs["calibration"] = cal["provenance"] | {"gpu": cal["gpu"]}
    return out


def _project(w, cfg, p, c, cal):
    if cfg.count == 1:
        return projection.project(w, cfg.gpu, p, c, cal)
    return multi_gpu.project(w, cfg, p, c, cal)


def _largest_batch(w, cfg, p):
    """The largest (global) batch of a model workload on cfg: N cards, each with its share."""
    return cfg.count * w.max_batch(float(specs.spec(cfg.gpu)["memory_gb"]) * 1e9, p)


def _check_fit(setups, ws, precs, sizes):
    """A batch size the user asked for that fits none of the GPUs (configurations: label ->
    multi_gpu.Config) is an error, raised before anything is measured (not a table of
    'does not fit')."""
    names = list(setups)
    for w in ws:
        if w.kind != "model" or not sizes:
            continue
        for p in precs:
            if not w.supports(p):
                continue
            best = max(((_largest_batch(w, cfg, p), g) for g, cfg in setups.items()))
            too_big = [b for b in sizes if b > best[0]]
            if too_big:
                raise ValueError(f"batch size {too_big[0]} of workload '{w.name}' ({p}) does not fit the memory of "
                                 f"any of {', '.join(names)}: at most {best[0]:,} on {best[1]}")


def _load(r):
    try:
        return results.load(r)
    except TypeError:
        raise TypeError(f"compare: results must be DataFrames or .csv/.json paths, got {type(r).__name__}") from None


def _merge(frames):
    return results.merge(frames) if frames else results.frame([])


def _find(measured, gpu, workload, precision, batch):
    if not len(measured):
        return None
    hit = measured[(measured["gpu"] == gpu) & (measured["workload"] == workload) &
                   (measured["precision"] == precision) & (measured["batch_size"] == batch)]
    return hit.iloc[-1].to_dict() if len(hit) else None


def _per_gpu_config(w, c, n):
    """The Config each of n GPUs runs for the global config c (None: c's batch does not split evenly)."""
    if n == 1:
        return c
    if c.batch_size % n:
        return None
    return w.configs("cuda", [c.batch_size // n])[0]


def _decorate(row, cfg, gpu, w, p, c):
    """The compare columns of one row of gpu (its label; cfg its multi_gpu.Config): power,
    price and the largest batch are those of cfg.count cards, memory is one card's share."""
    sp = specs.spec(cfg.gpu)
    n = cfg.count
    capacity = float(sp["memory_gb"]) * 1e9
    share = _per_gpu_config(w, c, n) if w.kind == "model" else None
    mem = w.memory(share, p) if share is not None else None
    needed = mem["total"] if mem else math.nan
    power = row.get("avg_power_w")
    if power is None or (isinstance(power, float) and math.isnan(power)):
        power = n * float(sp["tdp_w"])
    price = n * float(sp["launch_price_usd"])
    tp = float(row.get("throughput", math.nan))
    out = {k: row.get(k) for k in ("device", "size", "step_time_s", "source", "origin", "note")}
    out.update(gpu=gpu, workload=w.name, precision=p, batch_size=c.batch_size, size=row.get("size") or c.label,
               throughput=tp, unit=w.unit, power_w=power, price_usd=price,
               perf_per_watt=tp / power if power else math.nan,
               perf_per_dollar=tp / price if price and not math.isnan(price) else math.nan,
               memory_needed_bytes=needed,
               fits=bool(needed + CONTEXT_RESERVE_BYTES <= capacity) if mem else True,
               max_batch=_largest_batch(w, cfg, p) if w.kind == "model" else math.nan,
               scaling_efficiency=_scaling_efficiency(row, n),
               gpus=n, interconnect=multi_gpu.interconnect(cfg).kind if n > 1 else "")
    if out["source"] == "measured":
        out["origin"] = f"measured on {row.get('device_name') or row.get('device')} ({row.get('date', '')})"
    return out


def _scaling_efficiency(row, n):
    """A projected multi-GPU row's; NaN for one GPU and for measured rows (no single-card
    measurement at the per-GPU batch to relate them to)."""
    if n == 1 or row.get("source") != "projected":
        return math.nan
    return row.get("scaling_efficiency", math.nan)


def _local_rows(measured, names):
    """Measured rows of devices that are not among the compared GPUs (this machine's CPU)."""
    if not len(measured):
        return pd.DataFrame()
    other = measured[~measured["gpu"].isin(names)]
    if not len(other):
        return pd.DataFrame()
    out = other[["workload", "precision", "batch_size", "size", "throughput", "unit", "step_time_s", "source"]].copy()
    here = platform.node()
    out.insert(0, "gpu", [f"{'this machine' if h == here else f'measured on {h}'}: {n or d}"
                          for n, d, h in zip(other["device_name"], other["device"], other["host"])])
    out.insert(1, "device", other["device"].values)
    out["power_w"] = other["avg_power_w"].values
    out["origin"] = [f"measured on {h} ({dt})" for h, dt in zip(other["host"], other["date"])]
    out["reference"] = True
    return out.reset_index(drop=True)
