"""Energy meters: joules a device used between two host times.

What it provides: `meter_for(device)` -> an `EnergyMeter` that samples, in a background
thread, a cumulative energy counter -- NVML's total-energy counter of a GPU
(nvmlDeviceGetTotalEnergyConsumption, through nvidia-ml-py), else NVML power readings
integrated over time, or on the CPU the RAPL package counter
(/sys/class/powercap/intel-rapl:*/energy_uj) where it is readable -- and answers
`joules(t0, t1)` for any window inside the sampled span by interpolating the counter.
Where nothing is readable the meter answers NaN; `method` says which source was used.

Why it is built this way: the windows to meter are known only afterwards (a kernel
benchmark's timed samples are the last seconds of one core call, after its set-up; a
model's are fit's on_train_begin..on_train_end), so the counter is recorded as a time
series and windows are cut out of it, instead of reading it around each call. Counters
tick every few milliseconds, so windows are kept to a second or more by the runner.
"""
import glob
import math
import threading
import time

SAMPLE_S = 0.01


class EnergyMeter:
    method = "none"

    def __init__(self):
        self._samples = []            # (host time, cumulative joules)
        self._clocks = []             # (host time, SM clock MHz) where the device reports it
        self._stop = threading.Event()
        self._thread = None

    def read_joules(self):
        """The cumulative counter now (joules), or None when unreadable."""
        return None

    def read_clock(self):
        """The SM clock now (MHz), or None."""
        return None

    def start(self):
        if self.read_joules() is None:
            self.method = "none"
            return self
        self._samples = [(time.perf_counter(), self.read_joules())]
        self._thread = threading.Thread(target=self._loop, name="gpucmp-energy", daemon=True)
        self._thread.start()
        return self

    def _loop(self):
        while not self._stop.wait(SAMPLE_S):
            v = self.read_joules()
            now = time.perf_counter()
            if v is not None:
                self._samples.append((now, v))
            c = self.read_clock()
            if c is not None:
                self._clocks.append((now, c))

    def mean_clock(self, t0, t1):
        """The SM clock averaged over the samples taken between t0 and t1 (NaN without any)."""
        inside = [c for t, c in self._clocks if t0 <= t <= t1]
        return sum(inside) / len(inside) if inside else math.nan

    def stop(self):
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            v = self.read_joules()
            if v is not None:
                self._samples.append((time.perf_counter(), v))

    def _at(self, t):
        s = self._samples
        if not s or t < s[0][0] or t > s[-1][0]:
            return None
        lo, hi = 0, len(s) - 1
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if s[mid][0] <= t:
                lo = mid
            else:
                hi = mid
        (ta, ea), (tb, eb) = s[lo], s[hi]
        return ea if tb == ta else ea + (eb - ea) * (t - ta) / (tb - ta)

    def joules(self, t0, t1):
        """Energy between host times t0 < t1 (time.perf_counter), NaN when not metered."""
        if self.method == "none":
            return math.nan
        if self._thread is not None and self._thread.is_alive() and t1 > self._samples[-1][0]:
            deadline = time.perf_counter() + 5 * SAMPLE_S
            while self._samples[-1][0] < t1 and time.perf_counter() < deadline:
                time.sleep(SAMPLE_S / 2)
        a, b = self._at(t0), self._at(t1)
        if a is None or b is None:
            return math.nan
        return max(0.0, b - a)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class _NvmlEnergy(EnergyMeter):
    """NVML total energy (mJ since driver load); power samples integrated as a fallback."""

    def __init__(self, handle, nvml):
        super().__init__()
        self.h, self.nvml = handle, nvml
        try:
            nvml.nvmlDeviceGetTotalEnergyConsumption(handle)
            self.method = "nvml_energy"
        except Exception:
            self.method = "nvml_power"
            self._acc, self._last = 0.0, None

    def read_clock(self):
        try:
            return float(self.nvml.nvmlDeviceGetClockInfo(self.h, self.nvml.NVML_CLOCK_SM))
        except Exception:
            return None

    def read_joules(self):
        try:
            if self.method == "nvml_energy":
                return self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.h) / 1000.0
            p = self.nvml.nvmlDeviceGetPowerUsage(self.h) / 1000.0      # watts
        except Exception:
            return None
        now = time.perf_counter()
        if self._last is not None:
            self._acc += p * (now - self._last)
        self._last = now
        return self._acc


class _RaplEnergy(EnergyMeter):
    """Intel/AMD RAPL package counters (microjoules, wrapping at max_energy_range_uj)."""
    method = "rapl"

    def __init__(self, paths):
        super().__init__()
        self.paths = paths
        self.ranges = []
        for p in paths:
            try:
                with open(p.replace("energy_uj", "max_energy_range_uj")) as f:
                    self.ranges.append(int(f.read()))
            except (OSError, ValueError):
                self.ranges.append(2 ** 32)
        self._prev = None
        self._acc = 0.0

    def read_joules(self):
        try:
            vals = []
            for p in self.paths:
                with open(p) as f:
                    vals.append(int(f.read()))
        except (OSError, ValueError):
            return None
        if self._prev is not None:
            for v, pv, r in zip(vals, self._prev, self.ranges):
                self._acc += (v - pv if v >= pv else v + r - pv) / 1e6
        self._prev = vals
        return self._acc


def nvml():
    """The pynvml module (nvidia-ml-py), initialised, or None."""
    try:
        import pynvml
        pynvml.nvmlInit()
        return pynvml
    except Exception:
        return None


def nvml_handle(pci_bus_id=None, index=0):
    """(nvml module, device handle) for a CUDA device, matched by PCI bus id where known."""
    mod = nvml()
    if mod is None:
        return None, None
    try:
        if pci_bus_id:
            return mod, mod.nvmlDeviceGetHandleByPciBusId(pci_bus_id)
        return mod, mod.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        try:
            return mod, mod.nvmlDeviceGetHandleByIndex(index)
        except Exception:
            return mod, None


def meter_for(device, info=None):
    """An unstarted EnergyMeter for 'cpu' or 'cuda:N' (info: _core.device_info of it)."""
    if device.startswith("cuda"):
        idx = int(device.split(":")[1]) if ":" in device else 0
        mod, h = nvml_handle((info or {}).get("pci_bus_id"), idx)
        if h is not None:
            return _NvmlEnergy(h, mod)
        return EnergyMeter()
    paths = sorted(p for p in glob.glob("/sys/class/powercap/intel-rapl:*/energy_uj") if p.count(":") == 1)
    if paths:
        m = _RaplEnergy(paths)
        if m.read_joules() is not None:
            return m
    return EnergyMeter()
