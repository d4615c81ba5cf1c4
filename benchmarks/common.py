"""Shared helpers of the benchmarks: timing, environment facts, table printing.

Every benchmark measures gpucmp and the alternatives a user would otherwise pick in ONE
run, on the same machine and threads, and reports ratios; absolute times are only
quoted from the GPU. Timing: warm-up first, then the median (and spread) of repeats.
"""
import datetime
import os
import platform
import statistics
import subprocess
import time


def timeit(fn, repeats=5, warmup=1, sync=None):
    """Median and min/max seconds of `fn()` over `repeats` runs after `warmup` runs."""
    for _ in range(warmup):
        fn()
        if sync:
            sync()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), min(times), max(times)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_name():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
        return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
    except (OSError, subprocess.SubprocessError):
        return None


def header(title):
    threads = os.environ.get("OMP_NUM_THREADS", str(os.cpu_count()))
    lines = [
        f"# {title}",
        f"date: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}",
        f"cpu: {cpu_name()} ({os.cpu_count()} cores, OMP_NUM_THREADS={threads})",
    ]
    gpu = gpu_name()
    if gpu:
        lines.append(f"gpu: {gpu}")
    return "\n".join(lines)


def table(rows, columns):
    """Markdown table of dict rows."""
    out = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        out.append("| " + " | ".join(_fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(out)


def _fmt(v):
    if isinstance(v, float):
        if v == 0 or abs(v) >= 100:
            return f"{v:,.0f}"
        if abs(v) >= 1:
            return f"{v:.2f}"
        return f"{v:.3f}"
    return str(v)


def try_import_torch():
    try:
        import torch  # noqa: F401
        return torch
    except Exception:  # noqa: BLE001 -- any import failure means "not available"
        return None
