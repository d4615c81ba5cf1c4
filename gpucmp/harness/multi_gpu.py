"""Multi-GPU data-parallel configurations ("2x A4000"): their names, an all-reduce model, projected rows.

What it provides: `parse(name)` -> `Config(count, gpu, link)` for names such as "2x A4000",
"4xA5000" or "2x A5000 NVLink"; `label(cfg)`, the canonical display name (a single GPU is
its spec name); `interconnect(cfg)` -> the `Link` the gradients' all-reduce runs over;
`allreduce_seconds(cfg, nbytes)`, a ring all-reduce on that link; and
`project(workload, cfg, precision, config, cal)` -> a projected results row of data-parallel
training on the GPUs of one host, the global batch split evenly over them (the semantics of
Keras' MirroredStrategy: fit's batch_size is the global batch).

Why it is built this way: no multi-GPU trainer exists yet, so nothing here is measured. Each
GPU's step is the single-GPU projection at the per-GPU batch (projection.py), which already
carries everything known about one card; data parallelism adds only the all-reduce of the
float32 gradients, modelled as NCCL's ring at an achieved fraction of the link's rate and
overlapped with the backward pass in buckets, as PyTorch DDP does. The constants are few
and stated below, so a measured multi-GPU row can later check them.
"""
import math
import re
from dataclasses import dataclass, replace

from . import describe, projection, specs
from .workloads.base import canonical_precision

MAX_GPUS = 8
# Achieved fractions of a link's per-direction rate for an NCCL ring all-reduce ("bus bandwidth").
# nccl-tests all_reduce reference figures: 230-250 GB/s on 8x A100 SXM4 (NVLink 3, 300 GB/s per
# direction: ~0.8) and 35-45 GB/s on 8x H100 PCIe (Gen5, 63 GB/s per direction: ~0.65),
# https://docs.alayanew.com/en/docs/tech-blog/2026-05-06-nccl-tests ; PCIe Gen5 x16 peer-to-peer
# writes alone reach ~56 of 63 GB/s,
# http://www.webkkk.net/voipmonitor/rtx6kpro/blob/master/hardware/pcie-bandwidth.md
NVLINK_FRACTION = 0.80
PCIE_FRACTION = 0.65
PCIE_X16_GBS = {3: 15.75, 4: 31.5, 5: 63.0}       # per direction, by PCIe generation
HOP_LATENCY_S = {"pcie": 10e-6, "nvlink": 5e-6}   # per step of the ring
BUCKET_BYTES = 25 * 2 ** 20                       # PyTorch DDP's default bucket (bucket_cap_mb=25)
GRADIENT_BYTES = 4                                # float32 gradients, mixed precision included
# The backward pass is taken as 2/3 of a training step (it does about twice the forward's
# FLOPs); the buckets' all-reduces overlap it, the last bucket's cannot.
BACKWARD_SHARE = 2 / 3
LINK_WORDS = ("nvlink", "pcie")
_COUNT_PREFIX = re.compile(r"^\s*(\d+)\s*[x\u00d7]\s*(.*)$", re.IGNORECASE)


@dataclass(frozen=True)
class Config:
    """`count` GPUs of the spec row `gpu`; link: 'nvlink', 'pcie' or None (the card's default)."""
    count: int
    gpu: str
    link: str = None


@dataclass(frozen=True)
class Link:
    """What a ring all-reduce runs over: kind ('nvlink' / 'pcie'), a readable name, the
    achieved per-direction bus bandwidth, the latency of one ring step, and a remark."""
    kind: str
    name: str
    bus_bytes_per_s: float
    hop_latency_s: float
    remark: str = ""


def parse(name):
    """Config for '2x A4000', '2 x RTX A5000', '4xA5000', '2x A5000 NVLink', '2x A5000 pcie', 'A4000'.

    ValueError (naming `name`) for a count outside 1..8, a link word on a single GPU, NVLink
    on a card that has none, or an unknown GPU (specs.resolve's message)."""
    if isinstance(name, Config):
        return name
    if not isinstance(name, str):
        raise TypeError(f"a GPU configuration must be a string such as '2x A4000', got {type(name).__name__}")
    count, rest = _split_count(name)
    if not rest.strip():
        raise ValueError(f"{name!r}: no GPU named after the count (e.g. '2x A4000')")
    gpu, link = _gpu_and_link(rest.strip())
    _check(name, count, gpu, link)
    return Config(count, gpu, link)


def _split_count(name):
    m = _COUNT_PREFIX.match(name)
    return (int(m.group(1)), m.group(2)) if m else (1, name)


def _gpu_and_link(text):
    """(canonical GPU, link word or None): the whole text as a GPU name first ('H100 PCIe' is a
    card), else a trailing 'NVLink' / 'PCIe' as the link."""
    words = text.split()
    try:
        return specs.resolve(text), None
    except ValueError:
        if len(words) < 2 or words[-1].lower() not in LINK_WORDS:
            raise
    return specs.resolve(" ".join(words[:-1])), words[-1].lower()


def _check(name, count, gpu, link):
    if count < 1:
        raise ValueError(f"{name!r}: a configuration needs at least one GPU")
    if count > MAX_GPUS:
        raise ValueError(f"{name!r}: {MAX_GPUS} GPUs of one host at most (data parallel within one machine)")
    if link and count == 1:
        raise ValueError(f"{name!r}: an interconnect ({link}) applies to 2 or more GPUs, e.g. '2x {gpu} {link}'")
    if link == "nvlink" and not _nvlink_gbs(specs.spec(gpu)):
        raise ValueError(f"{name!r}: the {gpu} has no NVLink (nvlink_gbs is 0 in its spec row); "
                         "leave the link out for PCIe")


def _nvlink_gbs(row):
    v = row.get("nvlink_gbs")
    return 0.0 if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)


def is_sxm(gpu):
    return "SXM" in gpu


def _default_link(gpu):
    return "nvlink" if is_sxm(gpu) else "pcie"


def label(cfg):
    """'2x RTX A4000', '2x RTX A5000 NVLink', '2x H100 SXM PCIe'; a single GPU is its spec name.
    The link is named only when it is not the card's default (NVLink for SXM parts, else PCIe)."""
    cfg = parse(cfg)
    if cfg.count == 1:
        return cfg.gpu
    suffix = "" if cfg.link in (None, _default_link(cfg.gpu)) else {"nvlink": " NVLink", "pcie": " PCIe"}[cfg.link]
    return f"{cfg.count}x {cfg.gpu}{suffix}"


def interconnect(cfg):
    """The Link the ring all-reduce of `cfg` runs over. SXM parts: NVLink through NVSwitch
    for any count (unless PCIe is asked); cards with an NVLink bridge: NVLink when asked and
    only for two cards (a bridge pairs two; a larger ring also crosses PCIe and runs at its
    rate); everything else: PCIe x16 of the card's generation."""
    cfg = parse(cfg)
    row = specs.spec(cfg.gpu)
    pcie = _pcie_link(row)
    if (cfg.link or _default_link(cfg.gpu)) != "nvlink":
        return pcie
    if is_sxm(cfg.gpu):
        return _nvlink(row, "NVLink via NVSwitch")
    if cfg.count == 2:
        return _nvlink(row, "NVLink bridge")
    return replace(pcie, remark=f"NVLink bridges pair two cards: the ring over {cfg.count} GPUs also crosses "
                                f"PCIe, so it runs at {pcie.name}'s bandwidth")


def _pcie_link(row):
    gen = int(row["pcie_gen"])
    if gen not in PCIE_X16_GBS:
        raise ValueError(f"{row['name']}: no PCIe x16 rate known for PCIe generation {gen}")
    return Link("pcie", f"PCIe {gen}.0", PCIE_X16_GBS[gen] * 1e9 * PCIE_FRACTION, HOP_LATENCY_S["pcie"])


def _nvlink(row, name):
    per_direction = _nvlink_gbs(row) / 2 * 1e9      # the spec column is both directions together
    return Link("nvlink", name, per_direction * NVLINK_FRACTION, HOP_LATENCY_S["nvlink"])


def allreduce_seconds(cfg, nbytes):
    """Seconds of one ring all-reduce of nbytes over the GPUs of cfg:
    2(N-1)/N x nbytes / bus bandwidth + 2(N-1) x hop latency (0 for one GPU or no bytes)."""
    cfg = parse(cfg)
    n = cfg.count
    if n == 1 or nbytes <= 0:
        return 0.0
    link = interconnect(cfg)
    return 2 * (n - 1) / n * nbytes / link.bus_bytes_per_s + 2 * (n - 1) * link.hop_latency_s


def gradient_bytes(w, precision):
    """Bytes all-reduced per step: float32 gradients of every trainable weight of the
    workload's plans (the GAN: its discriminator's and its combined model's plans)."""
    if hasattr(w, "descs"):
        plans = [w.descs(precision)]
    elif hasattr(w, "_descs"):
        plans = w._descs(precision)[1:]     # the generator's inference plan trains nothing
    else:
        return None
    return GRADIENT_BYTES * sum(describe.layer_params(d)[0] for d in plans)


def buckets(nbytes):
    """Bucket sizes in the order they are all-reduced: full buckets from the output end, the
    first layers' remainder last (its gradients are the last the backward pass makes)."""
    if nbytes <= 0:
        return []
    full, rest = divmod(int(nbytes), BUCKET_BYTES)
    return [BUCKET_BYTES] * full + ([rest] if rest else [])


def communication_seconds(cfg, nbytes, step_s):
    """(total all-reduce seconds, seconds not hidden behind the backward pass) of one step
    whose compute on each GPU takes step_s: the last bucket waits for the end of the
    backward pass; the others overlap it, and spill over when they outlast it."""
    times = [allreduce_seconds(cfg, b) for b in buckets(nbytes)]
    if not times:
        return 0.0, 0.0
    backward_s = BACKWARD_SHARE * step_s
    return sum(times), times[-1] + max(0.0, sum(times[:-1]) - backward_s)


def project(workload, cfg, precision, config, cal=None):
    """A projected results row of data-parallel training on cfg (a Config or a name) with the
    global batch config.batch_size split evenly over its GPUs. Kernel workloads run
    independently on each GPU (N x the single GPU's throughput); one GPU is projection.project."""
    from .workloads import get
    w, cfg, p = get(workload), parse(cfg), canonical_precision(precision)
    cal = cal or projection.load_calibration()
    if cfg.count == 1:
        return projection.project(w, cfg.gpu, p, config, cal)
    if w.kind != "model":
        return _independent(w, cfg, p, config, cal)
    if config.batch_size % cfg.count:
        return _uneven(w, cfg, p, config)
    return _data_parallel(w, cfg, p, config, cal)


def _with_setup(row, cfg, link):
    """The row renamed to the configuration, with its multi-GPU columns."""
    name = label(cfg)
    return dict(row, gpu=name, device=None, device_name=name, gpus=cfg.count, interconnect=link.kind)


def _independent(w, cfg, p, config, cal):
    one = projection.project(w, cfg.gpu, p, config, cal)
    n, link = cfg.count, interconnect(cfg)
    out = _with_setup(one, cfg, link)
    tp = n * one["throughput"]
    out.update(throughput=tp, scaling_efficiency=math.nan if math.isnan(tp) else 1.0, comm_s=0.0, comm_exposed_s=0.0,
               avg_power_w=n * one.get("avg_power_w", math.nan),
               energy_per_step_j=n * one.get("energy_per_step_j", math.nan),
               origin=f"{one['origin']}, on each of {n} GPUs",
               note=_join(one.get("note"), "independent work on each GPU: no communication"))
    return out


def _uneven(w, cfg, p, config):
    n, b, link = cfg.count, config.batch_size, interconnect(cfg)
    row = {"workload": w.name, "precision": p, "batch_size": b, "size": config.label, "unit": w.unit,
           "source": "projected", "step_time_s": math.nan, "throughput": math.nan,
           "scaling_efficiency": math.nan, "origin": f"data parallel over {n} GPUs",
           "note": f"data parallel: the global batch must divide evenly over the {n} GPUs "
                   f"({b} = {n} x {b // n} + {b % n}); give a multiple of {n}"}
    return _with_setup(row, cfg, link)


def _data_parallel(w, cfg, p, config, cal):
    n = cfg.count
    per_gpu = w.configs("cuda", [config.batch_size // n])[0]
    one = projection.project(w, cfg.gpu, p, per_gpu, cal)
    link = interconnect(cfg)
    out = _with_setup(one, cfg, link)
    out.update(batch_size=config.batch_size, size=config.label)
    if math.isnan(one.get("step_time_s", math.nan)):
        return dict(out, throughput=math.nan, scaling_efficiency=math.nan)
    nbytes = gradient_bytes(w, p)
    if nbytes is None:
        comm_s = exposed_s = 0.0
        remark = "its gradients could not be counted: communication not modelled"
    else:
        comm_s, exposed_s = communication_seconds(cfg, nbytes, one["step_time_s"])
        remark = _comm_remark(n, per_gpu, nbytes, link, comm_s, exposed_s)
    step = one["step_time_s"] + exposed_s
    throughput = w.throughput(config, p, step)
    power = n * one["avg_power_w"]
    out.update(step_time_s=step, throughput=throughput,
               scaling_efficiency=throughput / (n * one["throughput"]),
               comm_s=comm_s, comm_exposed_s=exposed_s, avg_power_w=power, energy_per_step_j=power * step,
               flops_per_step=n * one.get("flops_per_step", math.nan),
               bytes_per_step=n * one.get("bytes_per_step", math.nan),
               origin=f"{one['origin']}, data parallel over {n} GPUs: {link.name} all-reduce model",
               note=_join(remark, link.remark, one.get("note")))
    return out


def _comm_remark(n, per_gpu, nbytes, link, comm_s, exposed_s):
    return (f"data parallel: {n} x {per_gpu.label}, gradients {nbytes / 1e6:.3g} MB all-reduced over "
            f"{link.name} ({link.bus_bytes_per_s / 1e9:.1f} GB/s achieved) in {_ms(comm_s)}, {_ms(exposed_s)} exposed")


def _ms(seconds):
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e3:.3f} ms"


def _join(*parts):
    return "; ".join(p for p in parts if p)
