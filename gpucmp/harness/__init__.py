"""gpucmp.harness: how do my models run on this GPU, and how would they run on that one?

The spec database (specs), device discovery (devices), workloads, measured runs
(benchmark), the projection onto GPUs that are not here, the comparison table (compare),
result files, plots, the CLI and the pytest plugin. The names below are re-exported as
gpucmp.specs, gpucmp.devices, gpucmp.benchmark, gpucmp.compare.

Submodules are imported lazily, so gpucmp.harness.specs loads without the compiled core.
"""
import importlib

_EXPORTS = {
    "specs": ("specs", "specs"), "resolve": ("specs", "resolve"), "spec": ("specs", "spec"),
    "devices": ("devices", "devices"), "benchmark": ("runner", "benchmark"),
    "measure_callable": ("runner", "measure_callable"), "compare": ("compare", "compare"),
    "project": ("projection", "project"), "load_results": ("results", "load"),
    "save_results": ("results", "save"), "merge_results": ("results", "merge"),
    "calibrate": ("calibration", "calibrate"), "get_workload": ("workloads", "get"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        mod, attr = _EXPORTS[name]
        return getattr(importlib.import_module(f"{__name__}.{mod}"), attr)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
