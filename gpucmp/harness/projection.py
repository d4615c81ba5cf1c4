"""Projection: how a workload would run on a GPU that is not here, op by op.

What it provides: `DeviceModel` (the achievable peaks of one card: per unit FLOP/s,
copy bandwidth, SMs, launch latency), `origin_model(calibration)` (the card the
per-op times were measured on: the local GPU, or the calibration shipped in
data/calibration.json), `target_model(gpu, origin)` (a spec row scaled by the
efficiencies measured on the origin), and `project(workload, gpu, precision, config)`
-> a results row with source = "projected".

The model, in the spirit of Habitat (Yu et al., USENIX ATC 2021), which scales each op
measured on one GPU to another by the mix of compute and bandwidth ratios its position
against the target's roofline ridge gives -- with these differences:
- FLOPs are counted from op shapes (costs.py), so Tensor-Core work is seen as such and
  each op is bound by the peak of the unit it runs on (tf32, fp16, bf16 or fp32; a
  card without that unit falls back as frameworks do: tf32 -> fp32; bf16 unsupported);
- peaks are achievable ones: the origin's GEMM rate per precision and copy bandwidth
  are measured, and a target's datasheet peak is multiplied by the fraction of its
  datasheet the origin achieves (a per-unit efficiency, never a per-card factor);
- the roofline time of an op on a card is max(FLOPs x wave / peak, bytes / bandwidth),
  where wave = ceil(blocks / SMs) / (blocks / SMs) is the wave-quantization loss of its
  thread blocks on that card's SMs. The blocks are those the op's kernel really launches
  for that SM count, recorded by the calibration through the core's launch log (split-K
  and grid-stride kernels size their grids from the SMs they see, so a small layer that
  fills 132 SMs with 132 blocks launches 48 on 48 SMs, each doing more); ops without a
  record count their output tiles. An op whose grid follows the SMs was also timed on the
  whole origin card with the grid it launches for 8 SMs; the two times give its per-block
  latency L and its work T (seconds of one SM), and on the target it takes
  ceil(B / SMs) x (L x clock ratio + T x per-SM-rate ratio / B), never less than its
  roofline there: small split-K layers are latency per wave, not FLOPs, so four times
  fewer SMs do not make them four times slower. Bandwidth follows the copy's saturation
  curve measured on the origin confined to 8-96 SMs (copy_bandwidth: the per-SM rate and
  the memory system's limit as a p-norm), which matters only for cards with few SMs;
- each op's measured time (timed alone from a graph for GEMMs and convolutions, timed
  inside a profiled step for the rest: step_profile.py) is split into a launch latency
  (measured on the origin, kept) and a device part, which is scaled by the ratio of the
  target's roofline time to the origin's; an op without a measured time gets the
  origin's roofline time over the efficiency the same op reached at the nearest measured
  batch size, else over what measured ops of its kind and unit reach at its size;
- the recurrence of a recurrent layer (rnn_fwd / rnn_bwd) is a latency-bound loop of
  dependent steps, not a roofline op: it is scaled by the ratio of the per-step model
  (recurrent.py: T x max(step FLOPs at the fp32 rate of the SMs it covers, a calibrated
  per-step floor that scales with the SM clock)) on the target to the same on the
  origin, for the variant that runs it there (stepwise / persistent: cuda.rnn); its
  origin time is its own graph-replayed time at its shape (never the eager profile,
  which pays a host launch per kernel of a stepwise loop), else the model;
- host overhead is carried separately: the origin's host work per step (Python, graph
  launch) is the smallest surplus of a calibrated model step over its ops, and is added
  unscaled; the rest of a step's surplus is device time the ops' own measurements missed
  (an op runs slower inside a ResNet-50 step than timed alone), so the ops are scaled up
  to it; when the ops add up to more than the step (they overlap), they are scaled down
  to it; a batch size whose step was not measured takes that attribution from the
  nearest one that was;
- a target with fewer SMs than the origin is projected from the origin measured on SM
  partitions (the calibration's "partitions": the card confined to 8/24/48/96 SMs) --
  the two whose SM counts bracket the target's, blended geometrically by log-SM
  distance (partition_weights), so the grids, waves and per-SM memory contention of
  that SM count are measured, not modelled from the whole card (a weight-gradient
  kernel that is latency- and L2-bound on 132 SMs is not on 16); only clocks, per-SM
  rates (the partition's own GEMM efficiency) and bandwidth (the whole card's
  efficiency; for the same card confined, the copy curve through the partition's own
  copy) are scaled;
- clocks: a long GEMM holds a card at its power limit, below its top clock, so the
  origin's efficiencies are per clock (measured rate over the datasheet rate at the
  time-averaged clock it held), each workload runs at the clock measured for it on the
  origin, and the target at the clock its power allows: for the origin confined to fewer
  SMs, dynamic power ~ SMs x f^3 from the origin's own measurement; for other cards, their
  rated clock (tensor clock for a workload that throttled the origin, else boost).
"""
import json
import math
from dataclasses import dataclass, field, replace
from importlib import resources

from . import recurrent, specs, step_profile
from .workloads.base import canonical_precision

UNIT_COLUMN = {"fp32": "fp32_tflops", "tf32": "tf32_tflops", "fp16": "fp16_tflops", "bf16": "bf16_tflops"}
PEAK_PRECISION = {"fp32": "float32", "tf32": "tf32", "fp16": "float16", "bf16": "bfloat16"}
DEFAULT_EFFICIENCY = {"tensor": 0.5, "memory": 0.6}
CALIBRATION_SCHEMA = "gpucmp-calibration/1"
# a profiled call is used when its device part is at least this many graph launches
# (~40 us on an H200): the host clock of one synchronised call scatters by ~15 us
PROFILE_MIN_LAUNCHES = 20
# a projected row whose ops are more than this share estimated (never timed) says so
ESTIMATED_NOTE_SHARE = 0.5


class Unsupported(ValueError):
    """The target has no unit for this precision (bf16 before Ampere)."""


@dataclass
class DeviceModel:
    name: str
    sms: int
    peaks: dict                  # unit -> achievable FLOP/s (at clock_mhz)
    bandwidth: float             # achievable bytes/s (read + written)
    launch_s: float
    per_sm_bandwidth: float = math.inf
    memory_bytes: float = math.nan
    tdp_w: float = math.nan
    price_usd: float = math.nan
    fallback: dict = field(default_factory=dict)   # unit -> unit used instead
    clock_mhz: float = math.nan  # the SM clock the peaks hold at
    copy_exponent: float = math.inf  # how sharply the copy rate saturates (copy_bandwidth)
    full_sms: int = 0            # the SMs `bandwidth` was reached with (0: sms)

    def peak(self, unit):
        unit = self.fallback.get(unit, unit)
        p = self.peaks.get(unit, math.nan)
        if not p or math.isnan(p):
            raise Unsupported(f"{self.name} has no {unit} unit")
        return p

    def effective_bandwidth(self):
        return copy_bandwidth(self.sms, self.per_sm_bandwidth, self.copy_exponent, self.full_sms or self.sms,
                              self.bandwidth)

    def wave(self, op):
        if op.unit == "memory" or op.blocks <= 0:
            return 1.0
        waves = math.ceil(op.blocks / self.sms)
        return waves / (op.blocks / self.sms)

    def roofline(self, op):
        """Seconds the op needs at this card's achievable peaks (no launch latency)."""
        t_mem = op.bytes / self.effective_bandwidth()
        if op.unit == "memory" or op.flops == 0:
            return t_mem
        return max(op.flops * self.wave(op) / self.peak(op.unit), t_mem)


def copy_bandwidth(sms, per_sm, exponent, full_sms, full_bandwidth):
    """Copy bytes/s with `sms` SMs active on a card whose `full_sms` SMs reach full_bandwidth:
    the per-SM rate (each SM's bytes in flight over the memory latency) and the memory
    system's own limit combine as a p-norm of their times, t = (t_sm^p + t_mem^p)^(1/p)
    (p = exponent; infinite p is the plain min of the two rates), with t_mem solved so that
    all SMs give full_bandwidth -- the queueing of a memory system that holds its latency
    until it nears saturation."""
    if sms >= full_sms or math.isinf(per_sm):
        return full_bandwidth if sms >= full_sms else min(full_bandwidth, sms * per_sm)
    if math.isinf(exponent):
        return min(full_bandwidth, sms * per_sm)
    p = exponent
    # in units of the full card's time per byte, so the powers stay in range
    rest = 1.0 - (full_bandwidth / (full_sms * per_sm)) ** p
    if rest <= 0:            # the full card is itself per-SM bound
        return sms * per_sm
    return full_bandwidth / ((full_bandwidth / (sms * per_sm)) ** p + rest) ** (1.0 / p)


def fit_copy_curve(curve, full_sms, full_bandwidth):
    """(per-SM copy rate, exponent) of copy_bandwidth fitted to `curve` ({sms: bytes/s}
    measured on the card confined to those SMs) and the whole card's rate, by least squares
    in log time over a grid of exponents (1 to 12) and rates."""
    pts = [(int(n), float(b)) for n, b in curve.items() if 0 < int(n) < full_sms and b > 0]
    if not pts:
        raise ValueError("fit_copy_curve: no point below the full card's SM count")
    base = max(b / n for n, b in pts)
    best = None
    for i in range(0, 221):
        p = 1.0 + i * 0.05
        for j in range(0, 161):
            r = base * (1.0 + j * 0.005)
            err = sum(math.log(copy_bandwidth(n, r, p, full_sms, full_bandwidth) / b) ** 2 for n, b in pts)
            if best is None or err < best[0]:
                best = (err, r, p)
    return best[1], best[2]


def load_calibration(path=None):
    """The calibration: a dict read from `path` or the one shipped with the package."""
    if path is None:
        text = resources.files("gpucmp.harness").joinpath("data/calibration.json").read_text(encoding="utf-8")
        where = "the shipped calibration"
    else:
        with open(path, encoding="utf-8") as f:
            text = f.read()
        where = repr(path)
    try:
        cal = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where} is not valid JSON: {exc.msg}") from None
    if not isinstance(cal, dict) or cal.get("schema") != CALIBRATION_SCHEMA:
        raise ValueError(f"{where} is not a gpucmp calibration of schema {CALIBRATION_SCHEMA!r}")
    for k in ("gpu", "peaks", "ops", "steps", "provenance"):
        if k not in cal:
            raise ValueError(f"{where} lacks {k!r}")
    return cal


def gemm_clock(cal, unit):
    """SM clock (MHz) the origin's GEMM peak of `unit` was measured at (sustained, under load)."""
    clocks = cal["peaks"].get("gemm_clock_mhz", {})
    prec = PEAK_PRECISION[unit]
    if prec in clocks:
        return float(clocks[prec])
    if unit != "fp32" and "float16" in clocks:     # the same tensor pipes: tf32 / bf16 as fp16
        return float(clocks["float16"])
    return float(cal.get("power", {}).get("max_sm_clock_mhz", math.nan))


def origin_model(cal, clock_mhz=None):
    """The DeviceModel of the card a calibration was measured on, its peaks at clock_mhz
    (default: the clocks they were measured at)."""
    p = cal["peaks"]
    row = specs.spec(cal["gpu"])
    peaks = {}
    for u in UNIT_COLUMN:
        if PEAK_PRECISION[u] not in p["gemm_flops"]:
            continue
        f = p["gemm_flops"][PEAK_PRECISION[u]]
        g = gemm_clock(cal, u)
        if clock_mhz is not None and not math.isnan(g):
            f *= clock_mhz / g
        peaks[u] = f
    return DeviceModel(cal["gpu"], int(cal.get("sms", row["sms"])), peaks, p["copy_bytes_per_s"], p["launch_s"],
                       p.get("per_sm_copy_bytes_per_s", math.inf), float(row["memory_gb"]) * 1e9,
                       float(row["tdp_w"]), float(row["launch_price_usd"]),
                       clock_mhz=clock_mhz if clock_mhz is not None else math.nan,
                       copy_exponent=float(p.get("copy_exponent", math.inf)))


def _rated_clock(row, unit):
    """The clock a datasheet's rate for `unit` assumes: boost for the CUDA cores, the tensor clock
    for the Tensor Cores (they differ on Hopper)."""
    return float(row["boost_clock_mhz"] if unit == "fp32" else row["tensor_clock_mhz"])


def efficiencies(origin, cal):
    """Per unit: the origin's measured GEMM rate over its datasheet rate at the same clock (an
    efficiency per clock, so a card that throttled while measuring does not pass its
    throttling on); 'memory': measured copy bandwidth over datasheet bandwidth."""
    row = specs.spec(cal["gpu"])
    scale = int(cal.get("sms", row["sms"])) / float(row["sms"])   # an SM-confined origin
    eff = {}
    for u, c in UNIT_COLUMN.items():
        if PEAK_PRECISION[u] not in cal["peaks"]["gemm_flops"] or math.isnan(float(row[c])):
            continue
        g = gemm_clock(cal, u)
        clock_ratio = g / _rated_clock(row, u) if not math.isnan(g) else 1.0
        eff[u] = cal["peaks"]["gemm_flops"][PEAK_PRECISION[u]] / (float(row[c]) * 1e12 * scale * clock_ratio)
    eff["memory"] = cal["peaks"]["copy_bytes_per_s"] / (float(row["bandwidth_gbs"]) * 1e9)
    return eff


def sustained(cal, workload, precision):
    """(SM clock MHz, average power W) of a workload measured on the origin, or (None, None)."""
    for rec in list(cal.get("kernels", [])) + list(cal["steps"]):
        if rec["workload"] == workload and rec["precision"] == precision and rec.get("sm_clock_mhz"):
            return float(rec["sm_clock_mhz"]), float(rec.get("avg_power_w") or math.nan)
    return None, None


def clocks_for(cal, workload, precision, target_row, sms=None):
    """(origin clock, target clock) in MHz for a workload: the origin's as measured; a target
    that is the origin confined to fewer SMs gets the clock its power limit allows (dynamic
    power ~ SMs x f^3, from the origin's own measurement); another card its rated clock --
    the tensor clock for a workload that held the origin below its top clock, else boost."""
    power = cal.get("power", {})
    f_max = float(power.get("max_sm_clock_mhz", math.nan))
    f_o, p_o = sustained(cal, workload, precision)
    if f_o is None:
        f_o = f_max
    if math.isnan(f_o):
        return None, None
    heavy = f_o < 0.97 * f_max
    same_card = target_row["name"] == cal["gpu"]
    if same_card:
        n_o = int(cal.get("sms", target_row["sms"]))
        n_t = int(sms or target_row["sms"])
        idle, limit = float(power.get("idle_w", math.nan)), float(power.get("limit_w", math.nan))
        if p_o is None or math.isnan(p_o) or math.isnan(idle) or math.isnan(limit) or p_o <= idle:
            return f_o, f_o if heavy else f_max
        f_pl = f_o * ((limit - idle) / (p_o - idle) * n_o / n_t) ** (1 / 3)
        return f_o, min(f_max, f_pl)
    unit_clock = float(target_row["tensor_clock_mhz"]) if heavy else float(target_row["boost_clock_mhz"])
    return f_o, unit_clock


def target_model(gpu, origin, eff, sms=None, clock_mhz=None):
    """The DeviceModel of spec row `gpu`: datasheet peaks times the origin's efficiencies, at
    clock_mhz (default: the datasheet's own clocks). sms < the card's SMs models that card
    confined to sms SMs (a green context)."""
    row = specs.spec(gpu) if isinstance(gpu, str) else gpu
    full = int(row["sms"])
    n = int(sms or full)
    frac = n / full
    peaks, fallback = {}, {}
    for u, c in UNIT_COLUMN.items():
        v = float(row[c])
        if not math.isnan(v) and u in eff:
            at_clock = clock_mhz / _rated_clock(row, u) if clock_mhz else 1.0
            peaks[u] = v * 1e12 * frac * eff[u] * at_clock
    if "tf32" not in peaks:
        fallback["tf32"] = "fp32"
    name = row["name"] if n == full else f"{row['name']} ({n} SMs)"
    o_row = specs.spec(origin.name.split(" (")[0])
    clock_ratio = float(row["boost_clock_mhz"]) / max(1.0, float(o_row["boost_clock_mhz"]))
    return DeviceModel(name, n, peaks, float(row["bandwidth_gbs"]) * 1e9 * eff["memory"], origin.launch_s,
                       origin.per_sm_bandwidth * clock_ratio, float(row["memory_gb"]) * 1e9, float(row["tdp_w"]),
                       float(row["launch_price_usd"]), fallback, clock_mhz if clock_mhz else math.nan,
                       origin.copy_exponent, full)


def kind_efficiency(origin, cal):
    """Per op kind, and per (kind, unit): the calibrated ops' efficiencies (origin roofline /
    measured device time) as (log10 FLOPs, efficiency) pairs sorted by size -- small kernels
    reach a small fraction of the roofline, large ones most of it."""
    by_kind = {}
    for rec in cal["ops"].values():
        t = rec["seconds"] - origin.launch_s
        if t <= 0 or not rec.get("roofline_s"):
            continue
        point = (math.log10(max(rec.get("flops") or rec.get("bytes") or 1.0, 1.0)), min(1.0, rec["roofline_s"] / t))
        by_kind.setdefault((rec["kind"], rec["unit"]), []).append(point)
        by_kind.setdefault(rec["kind"], []).append(point)
    return {k: sorted(v) for k, v in by_kind.items()}


def _efficiency_at(points, size):
    """Efficiency at log10 size, interpolated linearly between the calibrated ops around it
    (the nearest one's beyond either end)."""
    x = math.log10(max(size, 1.0))
    if x <= points[0][0]:
        return points[0][1]
    if x >= points[-1][0]:
        return points[-1][1]
    for (x0, e0), (x1, e1) in zip(points, points[1:]):
        if x0 <= x <= x1:
            return e0 if x1 == x0 else e0 + (e1 - e0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def find_profile(cal, workload, precision, batch_size, ops):
    """The in-step op times of a model workload at this precision and batch size as a
    captured step would run them, {signature: seconds} (step_profile), or None. The
    profile's times are host-clock times of single synchronised calls; each exceeds the
    op's time inside a graph by an eager overhead (launch, synchronisation) of about the
    same size, taken as the smallest excess over the graph-timed time among the profiled
    single-launch ops the calibration also timed alone (GEMMs, forward and data-gradient
    convolutions), else the smallest call's time less the graph launch latency. Calls
    whose device part is under PROFILE_MIN_LAUNCHES launches are left out: there the host
    clock's scatter is as large as the time, and the op keeps its estimate."""
    for prof in cal.get("profiles", []):
        if (prof["workload"], prof["precision"], int(prof["batch_size"])) == (workload, precision, int(batch_size)):
            break
    else:
        return None
    launch = float(cal["peaks"]["launch_s"])
    raw = prof["ops"]
    excess = []
    for op in ops:
        rec = cal["ops"].get(op.key) if op.key else None
        sec = step_profile.lookup(raw, op)
        if rec is not None and sec is not None and op.kind in ("gemm", "conv2d_fwd", "conv2d_bwd_data"):
            excess.append(sec - rec["seconds"])
    eager = min(excess) if excess else min(raw.values()) - launch
    return {k: v - eager for k, v in raw.items() if v - eager >= PROFILE_MIN_LAUNCHES * launch}


def origin_op_time(op, origin, cal, kind_eff, siblings=None, profile=None):
    """Measured seconds of op on the origin: timed alone (graph replays), else timed in the
    step (profile: step_profile's table of this workload and batch); else its roofline over
    the efficiency of the same op of the workload measured at another batch size
    (siblings: op name -> efficiency), else over the efficiency that calibrated ops of its
    kind and unit reach at its size."""
    if recurrent.is_recurrent(op):
        op = costs_with_variant(op, recurrent.origin_variant(op, cal))
        return recurrent.origin_seconds(op, origin, cal)
    rec = cal["ops"].get(op.key) if op.key else None
    if rec is not None:
        return rec["seconds"], "measured"
    sec = step_profile.lookup(profile, op)
    if sec is not None:
        return sec, "profiled in the step"
    if siblings and op.name in siblings:
        return origin.launch_s + origin.roofline(op) / siblings[op.name], "estimated from its other batch sizes"
    points = kind_eff.get((op.kind, op.unit)) or kind_eff.get(op.kind)
    if points is None and op.unit == "memory":     # elementwise passes: the copy's efficiency
        points = kind_eff.get("copy")
    if points:
        e = _efficiency_at(points, op.flops or op.bytes)
    else:
        e = DEFAULT_EFFICIENCY["memory" if op.unit == "memory" else "tensor"]
    return origin.launch_s + origin.roofline(op) / e, "estimated"


def costs_with_variant(op, variant):
    from . import costs
    return costs.with_variant(op, variant, "calibration" if variant != op.extra["variant"]
                              else op.extra["variant_source"])


def _spec_row_of(model):
    """The spec row of a DeviceModel's card ('H200 SXM (16 SMs)' -> 'H200 SXM'), or {}."""
    try:
        return specs.spec(model.name.split(" (")[0])
    except ValueError:
        return {}


def measured_step(cal, workload, precision, batch_size):
    """A sustained step time of the workload measured on the origin (models and kernels)."""
    for s in list(cal["steps"]) + list(cal.get("kernels", [])):
        if s["workload"] == workload and s["precision"] == precision and int(s["batch_size"]) == int(batch_size):
            return float(s["step_time_s"])
    return None


def _attribution(total, step_time_s, whole, host_s=None):
    """(scale of the ops' times, host overhead) that make ops adding up to `total` fit a
    measured step: a deficit means the ops overlap (or were slower timed alone than inside
    the plan's graph), so their times are scaled down; of a surplus, at most host_s (the
    origin's host overhead per step, host_overhead; all of it when None) is host overhead,
    the rest device time the ops' own measurements missed, so their times are scaled up."""
    if step_time_s is None:
        return 1.0, 0.0
    if whole or step_time_s < total:
        return step_time_s / total, 0.0
    overhead = step_time_s - total if host_s is None else min(step_time_s - total, host_s)
    return (step_time_s - overhead) / total, overhead


_HOST = {}


def host_overhead(cal, origin):
    """Seconds of host work per plan call on the origin that no op accounts for: the
    smallest surplus of a calibrated model step over its ops, per plan call of the step
    (the GAN's iteration makes four; the smallest step is the one whose surplus is all
    host -- Python, the graph launch); a step its ops add up to more
    than (they overlap, or ran slower timed alone) says nothing of it. None without a
    model step that has a surplus."""
    key = id(cal)
    if key in _HOST and _HOST[key][0] is cal:
        return _HOST[key][1]
    from .workloads import get
    kind_eff = kind_efficiency(origin, cal)
    found = []
    for s in cal["steps"]:
        try:
            w = get(s["workload"])
        except ValueError:
            continue
        cfgs = [c for c in w.configs("cuda", [int(s["batch_size"])])]
        if w.kind != "model" or not cfgs:
            continue
        ops = w.ops(cfgs[0], s["precision"])
        prof = find_profile(cal, w.name, s["precision"], s["batch_size"], ops)
        total = sum(origin_op_time(op, origin, cal, kind_eff, profile=prof)[0] for op in ops)
        if float(s["step_time_s"]) > total:
            found.append((float(s["step_time_s"]) - total) / getattr(w, "host_calls", 1))
    host = min(found) if found else None
    _HOST[key] = (cal, host)
    return host


def _host_per_step(cal, origin, w):
    """The origin's host work for one step of model workload w (host_overhead per plan call
    x the plan calls of its step), None for a kernel or without a calibrated model step."""
    host = host_overhead(cal, origin) if w.kind == "model" else None
    return None if host is None else host * getattr(w, "host_calls", 1)


def blocks_at(rec, sms, default):
    """Thread blocks the op of calibration record `rec` launches on `sms` SMs: the recorded
    grid of that SM count, else of the nearest recorded count (log scale); `default` (the
    op's output tiles) when the calibration recorded no grids for it."""
    grids = rec.get("grids") if rec else None
    if not grids:
        return default
    key = str(int(sms))
    if key not in grids:
        key = min(grids, key=lambda k: abs(math.log(int(k) / max(1, int(sms)))))
    return int(grids[key][0])


def block_model(rec, origin_sms, launch_s):
    """(L, T, blocks_o) of an op whose grid follows the SM count, from two measurements on
    the whole origin card: its time with the grid for the origin's SMs (B_o blocks) and with
    the grid for `small_sms` (B_s blocks; the calibration's plan_sms run). Each wave of
    blocks costs a per-block latency L plus the block's share of the op's work T (seconds
    of one SM): t = launch + ceil(B / SMs) * (L + T / B). None when the record lacks the
    second measurement, the grid does not change, or the two do not fit the model."""
    if not rec or "seconds_small" not in rec or not rec.get("grids"):
        return None
    b_o = blocks_at(rec, origin_sms, 0)
    b_s = blocks_at(rec, rec["small_sms"], 0)
    if b_o <= 0 or b_s <= 0 or b_o == b_s:
        return None
    a_o = (rec["seconds"] - launch_s) / math.ceil(b_o / origin_sms)
    a_s = (rec["seconds_small"] - launch_s) / math.ceil(b_s / origin_sms)
    work = (a_s - a_o) / (1.0 / b_s - 1.0 / b_o)
    lat = a_o - work / b_o
    if work <= 0 or lat < 0:
        return None
    return lat, work, b_o


def _per_sm_work(model, op):
    """Seconds one SM of `model` needs for all of op's work (its wave-free roofline x SMs)."""
    t_mem = op.bytes / model.effective_bandwidth()
    t = t_mem if op.unit == "memory" or op.flops == 0 else max(op.flops / model.peak(op.unit), t_mem)
    return t * model.sms


def project_ops(ops, origin, target, cal, step_time_s=None, whole=False, siblings=None, anchor=None,
                profile=None, host_s=None):
    """(projected step seconds, per-op table rows, host overhead seconds) of ops on target.
    whole: the measured step is all device work (a kernel benchmark), so it replaces the
    ops' own times instead of leaving an overhead. anchor: (scale, overhead) taken from a
    measured step at another batch size, for a step that was not measured itself.
    profile: the in-step op times of this workload and batch (find_profile)."""
    kind_eff = kind_efficiency(origin, cal)
    times = [origin_op_time(op, origin, cal, kind_eff, siblings, profile) for op in ops]
    total = sum(t for t, _ in times)
    scale, overhead = (anchor if step_time_s is None and anchor
                       else _attribution(total, step_time_s, whole, host_s))
    rows, projected = [], overhead
    for op, (t_o, how) in zip(ops, times):
        t_o *= scale
        dev_o = max(0.0, t_o - origin.launch_s)
        rec = cal["ops"].get(op.key) if op.key else None
        if recurrent.is_recurrent(op):
            op_o, op_t = recurrent.resolve(op, cal, _spec_row_of(target))
            r_o, r_t = origin.roofline(op_o), target.roofline(op_t)
            m_o = recurrent.op_seconds(op_o, origin, recurrent.params_for(cal, op_o.extra["variant"], op_o.extra["which"]))
            m_t = recurrent.op_seconds(op_t, target, recurrent.params_for(cal, op_t.extra["variant"], op_t.extra["which"]))
            t_t = t_o * m_t / m_o if m_o > 0 else m_t
            projected += t_t
            rows.append({"op": op.name, "kind": op.kind, "unit": op.unit, "flops": op.flops, "bytes": op.bytes,
                         "origin_s": t_o, "origin_time": how + f", per-step model ({op_o.extra['variant']}"
                         + (f" -> {op_t.extra['variant']}" if op_t is not op_o else "") + ")",
                         "target_s": t_t, "intensity": op.intensity, "origin_blocks": op_o.blocks,
                         "target_blocks": op_t.blocks, "launches": op_t.launches})
            continue
        op_o = replace(op, blocks=blocks_at(rec, origin.sms, op.blocks))
        op_t = replace(op, blocks=blocks_at(rec, target.sms, op.blocks))
        r_o, r_t = origin.roofline(op_o), target.roofline(op_t)
        bm = block_model(rec, origin.sms, origin.launch_s)
        if bm is not None and r_o > 0:
            lat, work, b_o = bm
            known = not (math.isnan(origin.clock_mhz) or math.isnan(target.clock_mhz))
            clock = origin.clock_mhz / target.clock_mhz if known else 1.0
            rho = _per_sm_work(target, op) / _per_sm_work(origin, op)
            at_o = math.ceil(b_o / origin.sms) * (lat + work / b_o)
            at_t = math.ceil(op_t.blocks / target.sms) * (lat * clock + work * rho / op_t.blocks)
            # never faster than the target's roofline (relative to how close the origin came to its own)
            dev_t = max(dev_o * at_t / at_o, r_t * min(1.0, dev_o / r_o))
            how = how + ", per-block model"
        else:
            dev_t = dev_o * r_t / r_o if r_o > 0 else 0.0
        t_t = target.launch_s + dev_t
        projected += t_t
        rows.append({"op": op.name, "kind": op.kind, "unit": op.unit, "flops": op.flops, "bytes": op.bytes,
                     "origin_s": t_o, "origin_time": how, "target_s": t_t, "intensity": op.intensity,
                     "origin_blocks": op_o.blocks, "target_blocks": op_t.blocks})
    return projected, rows, overhead


def _measured_batches(w, p, config, cal, tf32):
    """The workload's other default batch sizes, nearest first in log scale, with their ops."""
    others = [c for c in w.configs("cuda") if c.batch_size != config.batch_size]
    others.sort(key=lambda c: abs(math.log(c.batch_size / config.batch_size)))
    return [(c, w.ops(c, p, tf32)) for c in others]


def siblings_and_anchor(w, p, config, origin, cal, tf32=True):
    """For a model workload at a batch size the calibration lacks: each op's efficiency at the
    nearest batch where the same op (same name) was measured, and (scale, overhead) from the
    nearest batch whose whole step was measured."""
    if w.kind != "model":
        return None, None
    siblings, anchor = {}, None
    kind_eff = kind_efficiency(origin, cal)
    for c, ops in _measured_batches(w, p, config, cal, tf32):
        prof = find_profile(cal, w.name, p, c.batch_size, ops)
        for op in ops:
            if op.name in siblings:
                continue
            rec = cal["ops"].get(op.key) if op.key else None
            sec = rec["seconds"] if rec is not None else step_profile.lookup(prof, op)
            if sec is None:
                continue
            t = sec - origin.launch_s
            r = origin.roofline(op)
            if t > 0 and r > 0:
                siblings[op.name] = min(1.0, r / t)
        step = measured_step(cal, w.name, p, c.batch_size)
        if anchor is None and step is not None:
            total = sum(origin_op_time(op, origin, cal, kind_eff, profile=prof)[0] for op in ops)
            anchor = _attribution(total, step, False, _host_per_step(cal, origin, w))
    return siblings, anchor


def partition_weights(cal, sms):
    """[(weight, calibration)] whose projections, blended geometrically, give a target with
    `sms` SMs: the two calibrations whose SM counts bracket it among the origin's SM
    partitions (cal["partitions"]: the same calibration measured on the card confined to
    fewer SMs) and the whole card, weighted by log-SM distance; the whole card alone for a
    target as large as it, the smallest partition alone below it."""
    full = int(cal.get("sms") or specs.spec(cal["gpu"])["sms"])
    points = sorted((int(k), v) for k, v in (cal.get("partitions") or {}).items() if int(k) < full)
    if not points or sms >= full:
        return [(1.0, cal)]
    points.append((full, cal))
    if sms <= points[0][0]:
        return [(1.0, points[0][1])]
    for (a, ca), (b, cb) in zip(points, points[1:]):
        if a <= sms <= b:
            if sms == a or sms == b:
                return [(1.0, ca if sms == a else cb)]
            w = math.log(sms / a) / math.log(b / a)
            return [(1.0 - w, ca), (w, cb)]
    return [(1.0, cal)]


def project(workload, gpu, precision, config, cal=None, step_time_s=None, sms=None, tf32=True):
    """A projected results row for workload x gpu x precision x config.

    cal: the calibration dict (default: the shipped one); step_time_s: a measured step of
    this workload on the origin (default: the calibration's sustained one, if it has one);
    sms: project onto the gpu confined to that many SMs.

    A target with fewer SMs than the origin is projected from the origin's partitions
    that bracket its SM count (partition_weights), when the calibration has them: each
    partition is an origin whose grids, waves and per-SM contention were measured at
    about the target's SM count, so only clocks, per-SM rates and bandwidth are scaled
    (the units' efficiencies are the partition's, the memory efficiency and the copy
    curve the whole card's)."""
    from .workloads import get
    w = get(workload)
    p = canonical_precision(precision)
    cal = cal or load_calibration()
    row = specs.spec(gpu)
    parts = [(1.0, cal)] if step_time_s is not None else partition_weights(cal, int(sms or row["sms"]))
    outs = [(wt, _project_from(w, p, row, config, cal, sub, step_time_s, sms, tf32)) for wt, sub in parts]
    if len(outs) == 1:
        outs[0][1].pop("origin_sms")
        return outs[0][1]
    out = dict(outs[0][1])
    if any(math.isnan(o.get("step_time_s", math.nan)) for _, o in outs):
        bad = next(o for _, o in outs if math.isnan(o.get("step_time_s", math.nan)))
        return dict(bad, origin=out["origin"])
    t = math.exp(sum(wt * math.log(o["step_time_s"]) for wt, o in outs))
    out.update(step_time_s=t, throughput=w.throughput(config, p, t),
               host_overhead_s=sum(wt * o["host_overhead_s"] for wt, o in outs),
               energy_per_step_j=out["avg_power_w"] * t,
               origin=f"{cal['gpu']} ({cal['provenance'].get('date', '?')}), from its "
               + " and ".join(f"{o['origin_sms']}-SM" for _, o in outs) + " measurements")
    out.pop("origin_sms")
    return out


def _project_from(w, p, row, config, cal, sub, step_time_s, sms, tf32):
    """project() from one origin: `sub` (the calibration or one of its partitions) gives the
    measured times; `cal` (the whole card's) the memory efficiency and copy curve the
    target is built from, and the host work per step (Python and the graph launch do not
    depend on the SMs; the whole card's steps, with most of their ops timed alone, measure
    it best)."""
    full_origin = origin_model(cal)
    eff = efficiencies(full_origin, cal)
    if sub is not cal:  # the units' per-SM efficiency as the partition reached it
        eff.update({u: e for u, e in efficiencies(origin_model(sub), sub).items() if u != "memory"})
    f_o, f_t = clocks_for(sub, w.name, p, row, sms)
    origin = origin_model(sub, f_o)
    if sub is cal:
        base = origin
    else:       # the whole card's copy curve and per-SM rate, the partition's clock and launch latency
        base = replace(full_origin, clock_mhz=origin.clock_mhz, launch_s=origin.launch_s)
    target = target_model(row, base, eff, sms, f_t)
    if sub is not cal and row["name"] == cal["gpu"]:
        # the same card confined: the copy curve's shape through the partition's own copy
        k = origin.bandwidth / replace(target, sms=origin.sms).effective_bandwidth()
        target = replace(target, bandwidth=target.bandwidth * k, per_sm_bandwidth=target.per_sm_bandwidth * k)
    ops = w.ops(config, p, tf32)
    if step_time_s is None:
        step_time_s = measured_step(sub, w.name, p, config.batch_size)
    out = {"gpu": target.name, "device": None, "device_name": target.name, "workload": w.name, "precision": p,
           "batch_size": config.batch_size, "size": config.label, "unit": w.unit, "source": "projected",
           "origin": f"{cal['gpu']} ({cal['provenance'].get('date', '?')})"
           + (f", from its {origin.sms}-SM measurements" if sub is not cal else ""), "origin_sms": origin.sms}
    # ops the calibration did not time at this batch take the efficiency the same op reached
    # at a timed one; the step's attribution comes from a measured batch only when this
    # batch's own step was not measured
    siblings, anchor = siblings_and_anchor(w, p, config, origin, sub, tf32)
    if step_time_s is not None:
        anchor = None
    elif anchor is None and w.kind == "model":
        # a model step never measured on the origin: its ops as timed or estimated, plus the
        # origin's host work for each plan call the step makes (Python, the graph launch)
        host = host_overhead(cal, full_origin)
        anchor = (1.0, (host or 0.0) * getattr(w, "host_calls", 1))
    try:
        t, rows, overhead = project_ops(ops, origin, target, sub, step_time_s, whole=w.kind == "kernel",
                                     siblings=siblings, anchor=anchor,
                                     profile=find_profile(sub, w.name, p, config.batch_size, ops),
                                     host_s=_host_per_step(cal, full_origin, w))
    except Unsupported as exc:
        out.update(step_time_s=math.nan, throughput=math.nan, note=str(exc))
        return out
    out.update(step_time_s=t, throughput=w.throughput(config, p, t), host_overhead_s=overhead,
               flops_per_step=sum(o.flops for o in ops), bytes_per_step=sum(o.bytes for o in ops),
               sms=target.sms, sm_clock_mhz=target.clock_mhz, avg_power_w=target.tdp_w,
               energy_per_step_j=target.tdp_w * t)
    guessed = sum(r["target_s"] for r in rows if r["origin_time"].split(",")[0] == "estimated")
    if t > 0 and guessed > ESTIMATED_NOTE_SHARE * t:
        out["note"] = ("most of this step comes from ops the calibration never timed "
                       "(estimated from timed ops of their kind): a rough figure")
    elif any(r["origin_time"].startswith("estimated from the default recurrent model") for r in rows):
        out["note"] = ("its recurrent ops use the default per-step model (the calibration timed no recurrent "
                       "op): an estimate")
    return out
