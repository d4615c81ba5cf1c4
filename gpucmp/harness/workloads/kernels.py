"""Kernel workloads: square GEMM per precision, the 3x3 64->64 56x56 convolution, device copy.

What it provides: `GemmWorkload`, `ConvWorkload`, `BandwidthWorkload`. Each times the
core's own kernels on operands already resident on the device, through
gpucmp._core.bench_gemm / bench_conv / bench_copy (random data, warm-up, samples of
back-to-back launches between two synchronisations: the same timer as the standalone
benchmarks in benchmarks/), and counts its FLOPs and bytes from the shapes.

Why it is built this way: these three measure the achievable peaks the projection needs
on the local device (Tensor-Core rate per precision, copy bandwidth) and are the simplest
cases to check a projection against; their default sizes fill a GPU, and smaller ones keep
a 2-core CPU run short.
"""
from .. import costs
from .base import Config, Run, Workload
from ... import _core

BENCH_DTYPE = {"float32": "float32", "tf32": "tfloat32", "float16": "float16", "bfloat16": "bfloat16"}
STORAGE = {"float32": "float32", "tf32": "float32", "float16": "float16", "bfloat16": "bfloat16"}


class _BenchRun(Run):
    """Times `inner` launches per sample on the device through one bench_* call."""

    def __init__(self, fn, work):
        self.fn = fn
        self.work_per_step = work

    def run(self, n_steps):
        self.fn(max(1, int(n_steps)))

    def timed(self, n_steps):
        return self.fn(max(1, int(n_steps))) * max(1, int(n_steps))


class GemmWorkload(Workload):
    name = "gemm"
    description = "square matrix product C = A B (n x n x n) on the core's GEMM, per precision"
    unit = "TFLOP/s"
    kind = "kernel"

    def __init__(self, n=None):
        self.n = n

    def configs(self, device_kind, batch_sizes=None):
        n = self.n or (8192 if device_kind == "cuda" else 1024)
        return [Config(n, f"{n}x{n}x{n}", {"n": n})]

    def ops(self, config, precision, tf32=True):
        n = config.params["n"]
        return [costs.gemm("gemm", n, n, n, STORAGE[precision], precision == "tf32")]

    def work_per_step(self, config, precision):
        n = config.params["n"]
        return 2.0 * n ** 3

    def prepare(self, device, config, precision):
        n, core = config.params["n"], _core
        return _BenchRun(lambda inner: core.bench_gemm(device, n, n, n, BENCH_DTYPE[precision], repeats=1,
                                                       warmup=1, inner=inner), self.work_per_step(config, precision))


class ConvWorkload(Workload):
    name = "conv"
    description = "3x3 convolution 64 -> 64 channels on 56x56 images ('same' padding), forward pass"
    unit = "TFLOP/s"
    kind = "kernel"
    C = F = 64
    HW = 56

    def configs(self, device_kind, batch_sizes=None):
        sizes = batch_sizes or ([64] if device_kind == "cuda" else [4])
        return [Config(int(b), f"{b}x{self.HW}x{self.HW}x{self.C} -> {self.F}, 3x3", {"n": int(b)}) for b in sizes]

    def ops(self, config, precision, tf32=True):
        b = config.params["n"]
        return [costs.conv2d("conv", "fwd", b, self.HW, self.HW, self.C, self.F, 3, 3, self.HW, self.HW, (1, 1),
                             "same", STORAGE[precision], precision == "tf32")]

    def work_per_step(self, config, precision):
        b = config.params["n"]
        return 2.0 * b * self.HW * self.HW * self.F * 9 * self.C

    def prepare(self, device, config, precision):
        b, core, hw, c = config.params["n"], _core, self.HW, self.C
        return _BenchRun(lambda inner: core.bench_conv(device, b, hw, hw, c, self.F, 3, 3, padding="same",
                                                       dtype=BENCH_DTYPE[precision], repeats=1, warmup=1,
                                                       inner=inner), self.work_per_step(config, precision))


class BandwidthWorkload(Workload):
    name = "bandwidth"
    description = "device-to-device copy (bytes read + bytes written per second)"
    unit = "GB/s"
    kind = "kernel"
    precisions = ("float32",)     # a copy has no arithmetic: measured once

    def configs(self, device_kind, batch_sizes=None):
        mib = 1024 if device_kind == "cuda" else 64
        return [Config(mib, f"{mib} MiB copy", {"nbytes": mib << 20})]

    def ops(self, config, precision, tf32=True):
        return [costs.copy("copy", config.params["nbytes"])]

    def work_per_step(self, config, precision):
        return 2.0 * config.params["nbytes"]

    def prepare(self, device, config, precision):
        nbytes, core = config.params["nbytes"], _core
        return _BenchRun(lambda inner: core.bench_copy(device, nbytes, repeats=1, inner=inner),
                         self.work_per_step(config, precision))
