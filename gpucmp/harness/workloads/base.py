"""The Workload interface: a named, described, reproducible unit of work to measure or project.

What it provides: `Workload` (name, description, unit, the configurations it runs at,
its op list per configuration, and `prepare()` -> a `Run` that executes steps on a
device), `Config` (one batch size / problem size), `Run` (the object runner.py times),
and `NotMeasurable` for workloads that can only be projected today.

Why it is built this way: the runner, the projection and the CLI treat every workload the
same way -- the seeds' models, kernels and a user's own model -- so adding a workload is
one small file that says what it computes (ops, work per step) and how to run it.
"""
from dataclasses import dataclass, field

PRECISION_ALIASES = {"float32": "float32", "fp32": "float32", "tf32": "tf32", "tfloat32": "tf32",
                     "float16": "float16", "fp16": "float16", "mixed_float16": "float16",
                     "bfloat16": "bfloat16", "bf16": "bfloat16", "mixed_bfloat16": "bfloat16"}
PRECISIONS = ("float32", "tf32", "float16", "bfloat16")
POLICY_OF = {"float32": "float32", "tf32": "float32", "float16": "mixed_float16", "bfloat16": "mixed_bfloat16"}


def canonical_precision(precision):
    """'mixed_float16' -> 'float16', 'fp32' -> 'float32', ...; ValueError for anything else."""
    if not isinstance(precision, str):
        raise TypeError(f"precision must be a string such as 'float32' or 'mixed_float16', got {precision!r}")
    p = PRECISION_ALIASES.get(precision.strip().lower())
    if p is None:
        raise ValueError(f"unknown precision {precision!r}; expected one of "
                         f"{sorted(set(PRECISION_ALIASES))}")
    return p


class NotMeasurable(RuntimeError):
    """The workload cannot run on gpucmp yet; it is projected from its op list only."""


@dataclass(frozen=True)
class Config:
    """One size a workload runs at."""
    batch_size: int            # rows per step (models, conv); the matrix size n (gemm); MiB (bandwidth)
    label: str                 # readable problem size
    params: dict = field(default_factory=dict, compare=False, hash=False)


class Run:
    """Steps of a workload prepared on one device: run(n) executes n steps and returns only
    when the device has finished them (so host timing brackets device work)."""

    work_per_step = 1.0        # samples, FLOPs or bytes per step, in the workload's unit base

    def run(self, n_steps):
        raise NotImplementedError

    def timed(self, n_steps):
        """Seconds of n steps when the run times itself (kernel benchmarks time on the
        device side of the core); None: the runner times run() with the host clock."""
        return None

    def close(self):
        pass


class Workload:
    name = ""
    description = ""
    unit = "samples/s"          # samples/s, TFLOP/s or GB/s
    kind = "model"              # model or kernel
    measurable = True
    cpu_measurable = True   # False: projected, never measured, on the CPU (too slow there)
    precisions = PRECISIONS     # the precisions it runs at

    def supports(self, precision):
        return canonical_precision(precision) in self.precisions

    def configs(self, device_kind, batch_sizes=None):
        """The Configs to run on a 'cpu' or 'cuda' device (batch_sizes override the defaults)."""
        raise NotImplementedError

    def ops(self, config, precision, tf32=True):
        """The costs.Op list of one step at this config and (canonical) precision."""
        raise NotImplementedError

    def work_per_step(self, config, precision):
        """What one step delivers in the unit's base: samples, FLOPs or bytes."""
        raise NotImplementedError

    def memory(self, config, precision):
        """Modelled device bytes of one step (memory.py breakdown), or None."""
        return None

    def max_batch(self, capacity_bytes, precision):
        """Largest batch that fits capacity_bytes, or None when batch size does not apply."""
        return None

    def prepare(self, device, config, precision):
        """A Run of this workload on `device` ('cpu', 'cuda:N')."""
        raise NotMeasurable(f"workload '{self.name}' cannot be measured yet")

    def throughput(self, config, precision, step_time_s):
        scale = {"samples/s": 1.0, "TFLOP/s": 1e-12, "GB/s": 1e-9}[self.unit]
        return self.work_per_step(config, precision) * scale / step_time_s

    def __repr__(self):
        return f"<Workload {self.name}: {self.description}>"
