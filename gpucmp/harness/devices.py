"""Device discovery: the CPU and every CUDA device this process can use, matched to the spec database.

What it provides: `devices()` -> a DataFrame, one row per device ('cpu', 'cuda:0', ...):
name, kind, the spec row it matches (`gpu`), compute capability, SMs (and the SM
limit when the process is confined to part of the GPU), memory, clocks, power limit
and driver -- CUDA properties from the core (gpucmp._core.device_info) completed by NVML
through nvidia-ml-py when it is installed -- and for the CPU its model, cores, threads
and the SIMD level of the GEMM micro-kernel. `device_record(name)` gives one row as a dict;
`check_device(name)` raises ValueError for a device that is not present.

Why it is built this way: what the core reports is what the kernels run on (SMs of a
green context, the device's shared-memory limits); NVML adds what only the driver knows
(power limit, current clocks, board name). Both are optional: without NVML or without a
GPU the table still answers, with the CPU alone.
"""
import math

import pandas as pd

from . import energy, specs
from .. import _core

COLUMNS = ["device", "kind", "name", "gpu", "compute_capability", "sms", "sm_limit", "memory_bytes",
           "sm_clock_mhz", "max_sm_clock_mhz", "memory_clock_mhz", "power_limit_w", "driver_version",
           "cores", "threads", "simd"]


def available():
    return list(_core.backends())


def check_device(name):
    """The canonical device name ('cuda' -> 'cuda:0'); ValueError listing the present ones."""
    from .._device import canonical_device
    return canonical_device(name)


def _nvml_extra(info, index):
    mod, h = energy.nvml_handle(info.get("pci_bus_id"), index)
    out = {}
    if h is None:
        return out
    for key, fn in (("power_limit_w", lambda: mod.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0),
                    ("sm_clock_mhz", lambda: mod.nvmlDeviceGetClockInfo(h, mod.NVML_CLOCK_SM)),
                    ("max_sm_clock_mhz", lambda: mod.nvmlDeviceGetMaxClockInfo(h, mod.NVML_CLOCK_SM)),
                    ("nvml_name", lambda: mod.nvmlDeviceGetName(h)),
                    ("driver", lambda: mod.nvmlSystemGetDriverVersion())):
        try:
            v = fn()
            out[key] = v.decode() if isinstance(v, bytes) else v
        except Exception:
            pass
    return out


def device_record(name):
    """One device as a dict with the COLUMNS keys (NaN / None where unknown)."""
    name = check_device(name)
    info = dict(_core.device_info(name))
    row = dict.fromkeys(COLUMNS)
    row["device"] = name
    if name == "cpu":
        row.update(kind="cpu", name=info.get("name", "cpu"), cores=info.get("logical_cores"),
                   threads=info.get("omp_threads"), simd=info.get("simd"))
        return row
    index = int(name.split(":")[1])
    extra = _nvml_extra(info, index)
    board = extra.get("nvml_name") or info.get("name")
    row.update(kind="cuda", name=board, compute_capability=info.get("compute_capability"),
               sms=info.get("sms"), sm_limit=info.get("sm_limit"), memory_bytes=info.get("total_memory_bytes"),
               sm_clock_mhz=extra.get("sm_clock_mhz", info.get("sm_clock_mhz")),
               max_sm_clock_mhz=extra.get("max_sm_clock_mhz", info.get("sm_clock_mhz")),
               memory_clock_mhz=info.get("memory_clock_mhz"), power_limit_w=extra.get("power_limit_w", math.nan),
               driver_version=extra.get("driver", info.get("driver_version")))
    row["gpu"] = specs.match_device(board, info.get("total_memory_bytes"))
    return row


def devices():
    """Every device present, one row each (the CPU first)."""
    return pd.DataFrame([device_record(d) for d in available()], columns=COLUMNS)
