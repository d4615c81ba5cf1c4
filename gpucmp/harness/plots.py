"""Plots of comparison tables (matplotlib, the optional `plots` extra).

What it provides: `throughput_bars(df)` and `perf_per_watt_bars(df)` (grouped bars:
one group per workload x precision, one bar per GPU, hatched where projected),
`roofline(gpus, workloads)` (each GPU's achievable roofline per unit with the
workloads' ops placed at their arithmetic intensity), and `save_report(df, path)`,
which draws the bars and the roofline into one figure file.

Why it is built this way: one figure per question a buyer asks (how fast, how efficient,
why), drawn from the same DataFrame compare() returns; matplotlib is imported only here,
so the rest of gpucmp works without it.
"""
import math


def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plots need matplotlib: pip install 'gpucmp[plots]'") from None
    return plt


def _bars(df, column, ylabel, ax=None):
    plt = _plt()
    data = df[~df["reference"].astype(bool)].dropna(subset=[column]) if "reference" in df else \
        df.dropna(subset=[column])
    groups = list(dict.fromkeys(zip(data["workload"], data["precision"], data["batch_size"])))
    gpus = list(dict.fromkeys(data["gpu"]))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) * max(1, len(gpus)) / 2), 4))
    width = 0.8 / max(1, len(gpus))
    for j, g in enumerate(gpus):
        xs, ys, hatches = [], [], []
        for i, (w, p, b) in enumerate(groups):
            hit = data[(data["gpu"] == g) & (data["workload"] == w) & (data["precision"] == p) &
                       (data["batch_size"] == b)]
            if len(hit):
                base = data[(data["workload"] == w) & (data["precision"] == p) & (data["batch_size"] == b)][column]
                xs.append(i + j * width)
                ys.append(float(hit[column].iloc[0]) / float(base.iloc[0]))
                hatches.append("//" if hit["source"].iloc[0] == "projected" else "")
        bars = ax.bar(xs, ys, width, label=g)
        for bar, h in zip(bars, hatches):
            bar.set_hatch(h)
    ax.set_xticks([i + width * (len(gpus) - 1) / 2 for i in range(len(groups))])
    ax.set_xticklabels([f"{w}\n{p}" + (f"\nb{int(b)}" if b == b and w in ("cnn", "resnet50") else "")
                        for w, p, b in groups], fontsize=8)
    ax.set_ylabel(ylabel + f" (relative to {gpus[0]})" if gpus else ylabel)
    ax.axhline(1.0, color="gray", lw=0.5)
    ax.legend(fontsize=8, title="hatched: projected", title_fontsize=7)
    return ax


def throughput_bars(df, ax=None):
    """Grouped bars of throughput per workload x precision, relative to the first GPU."""
    return _bars(df, "throughput", "throughput", ax)


def perf_per_watt_bars(df, ax=None):
    """Grouped bars of throughput per watt, relative to the first GPU."""
    return _bars(df, "perf_per_watt", "performance per watt", ax)


def roofline(gpus, workloads=("cnn", "conv", "gemm"), precision="float16", ax=None, calibration=None):
    """Each GPU's achievable roofline for `precision` and the workloads' ops at their intensity."""
    from . import projection
    from . import workloads as wl
    from .workloads.base import canonical_precision
    plt = _plt()
    p = canonical_precision(precision)
    cal = calibration or projection.load_calibration()
    origin = projection.origin_model(cal)
    eff = projection.efficiencies(origin, cal)
    if ax is None:
        _, ax = plt.subplots(figsize=(6, 4))
    xs = [10 ** (k / 10) for k in range(-10, 41)]
    unit = {"float32": "tf32", "tf32": "tf32", "float16": "fp16", "bfloat16": "bf16"}[p]
    for g in gpus:
        t = projection.target_model(g, origin, eff)
        try:
            peak = t.peak(unit)
        except projection.Unsupported:
            continue
        bw = t.effective_bandwidth()
        ax.plot(xs, [min(peak, x * bw) / 1e12 for x in xs], label=f"{t.name} ({unit})")
    for w in wl.resolve_list(list(workloads)):
        if not w.supports(p):
            continue
        c = w.configs("cuda")[0]
        ops = [o for o in w.ops(c, p) if o.flops > 0 and o.bytes > 0]
        if not ops:
            continue
        t = projection.target_model(gpus[0], origin, eff)
        perf = []
        for o in ops:
            try:
                perf.append(o.flops / t.roofline(o) / 1e12)
            except projection.Unsupported:
                perf.append(math.nan)
        ax.scatter([o.intensity for o in ops], perf, s=12, label=f"{w.name} ops on {gpus[0]}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP / byte)")
    ax.set_ylabel("TFLOP/s")
    ax.legend(fontsize=7)
    return ax


def save_report(df, path, gpus=None):
    """Throughput, perf/W and roofline panels of a compare() table, written to `path` (the
    roofline is per card, so a multi-GPU configuration shows its card's)."""
    from . import multi_gpu
    plt = _plt()
    gpus = gpus or list(dict.fromkeys(df.loc[~df["reference"].astype(bool), "gpu"]))
    fig, axes = plt.subplots(3, 1, figsize=(10, 12))
    throughput_bars(df, axes[0])
    axes[0].set_title("throughput")
    perf_per_watt_bars(df, axes[1])
    axes[1].set_title("performance per watt (measured power, or TDP where projected)")
    cards = list(dict.fromkeys(multi_gpu.parse(g).gpu for g in gpus))     # "2x RTX A4000": an RTX A4000's
    roofline(cards, ax=axes[2])
    axes[2].set_title("roofline (achievable peaks) and the workloads' ops")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
