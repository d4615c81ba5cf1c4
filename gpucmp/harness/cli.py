"""The command line: gpucmp {compare,specs,devices,bench,calibrate,cnn} (also python -m gpucmp).

- `gpucmp compare A4000 A5000 [--workloads ...] [--precision ...] [--batch-size ...]
  [--results FILE ...] [--csv FILE] [--json FILE] [--plot FILE]`: the GPUs side by side,
  measured where present (and this machine's CPU as a reference), projected elsewhere;
  a GPU may be a data-parallel configuration such as "2x A4000" or "2x A5000 NVLink";
- `gpucmp specs [NAME ...]`: the spec database; `gpucmp devices`: what is here;
- `gpucmp bench [--workloads ...] [--devices ...] ...`: measured rows, optionally saved;
- `gpucmp calibrate --device cuda:0 --out FILE`: the calibration projections start from;
  `--merge EXISTING NEW --out FILE` merges a calibration of a few workloads into an
  existing one of the same card and build (no GPU needed);
- `gpucmp cnn`: train the seeds' CNN on real digits (the first main job).
Bad arguments (unknown GPU, workload or device, a batch that fits no card, a corrupt
results file) end with exit code 2 and one line on stderr, never a traceback.
"""
import argparse
import math
import sys
import time

import numpy as np

PROG = "gpucmp"


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


class _UsageError(Exception):
    pass


def _fmt_rate(v, unit):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "n/a"
    return f"{v:,.0f} {unit}" if v >= 100 else f"{v:,.2f} {unit}"


def _gb(v):
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v / 1e9:.2f} GB"


def _is_nan(v):
    return isinstance(v, float) and math.isnan(v)


def _memory_cell(v, gpus):
    """One card's memory; a multi-GPU row's is each card's share of the batch."""
    text = _gb(v)
    return f"{text}/GPU" if text and gpus > 1 else text


def print_compare(df, out=sys.stdout):
    import pandas as pd
    gpus = df["gpus"] if "gpus" in df else pd.Series(1, index=df.index)
    view = pd.DataFrame({
        "gpu": df["gpu"], "workload": df["workload"], "precision": df["precision"],
        "batch": [("" if (isinstance(b, float) and math.isnan(b)) or w in ("gemm", "bandwidth") else int(b))
                  for b, w in zip(df["batch_size"], df["workload"])],
        "throughput": [f"does not fit ({_fmt_rate(v, u)})" if isinstance(f, (bool, np.bool_)) and not f
                       else _fmt_rate(v, u) for v, u, f in zip(df["throughput"], df["unit"], df["fits"])],
        "ratio": [("" if isinstance(r, float) and math.isnan(r) else f"{r:.2f}x") for r in df["ratio"]],
        "source": df["source"],
        "per W": [("" if isinstance(v, float) and math.isnan(v) else f"{v:.3g}") for v in df["perf_per_watt"]],
        "per $1000": [("" if isinstance(v, float) and math.isnan(v) else f"{1000 * v:.3g}")
                      for v in df["perf_per_dollar"]],
        "memory": [_memory_cell(v, n) for v, n in zip(df["memory_needed_bytes"], gpus)],
        "max batch": [("" if isinstance(v, float) and math.isnan(v) else f"{int(v):,}") for v in df["max_batch"]],
    })
    if (gpus > 1).any():      # multi-GPU rows: how much of N cards' throughput data parallelism keeps
        view.insert(view.columns.get_loc("ratio") + 1, "scaling",
                    ["" if _is_nan(e) else f"{100 * e:.0f}%" for e in df["scaling_efficiency"]])
    print(view.to_string(index=False), file=out)


def cmd_compare(args):
    from .compare import compare
    from . import multi_gpu, specs as specs_mod
    df = compare(args.gpus, args.workloads, args.precision, args.batch_size, args.results or None,
                 measure=not args.no_measure, include_local=not args.no_local)
    compared = dict.fromkeys(df.loc[~df["reference"].astype(bool), "gpu"])
    gpus = list(dict.fromkeys(multi_gpu.parse(g).gpu for g in compared))     # the cards of "2x A4000"
    cols = ["name", "architecture", "sms", "fp32_tflops", "tf32_tflops", "fp16_tflops", "memory_gb",
            "bandwidth_gbs", "tdp_w", "launch_price_usd"]
    print("Specs (dense Tensor Core TFLOP/s with fp32 accumulation):")
    print(specs_mod.specs(gpus)[cols].to_string(index=False))
    print()
    print_compare(df)
    if "note" in df:
        noted = df[df["note"].notna() & (df["note"].astype(str) != "")]
        for text, rows in noted.groupby("note", sort=False):
            which = ", ".join(dict.fromkeys(f"{r.gpu} {r.workload} {r.precision}" for r in rows.itertuples()))
            print(f"note ({which}): {text}")
    cal = df.attrs.get("calibration", {})
    print(f"\nprojected rows: scaled per op from measurements on {cal.get('gpu', '?')} "
          f"({cal.get('device', '?')}, {cal.get('date', '?')}); per W uses measured power, or TDP where "
          "projected; per $1000 uses launch prices")
    _export(df, args)
    return 0


def _export(df, args):
    from . import results
    if getattr(args, "csv", None):
        results.save(df if "step_time_s" in df else df, args.csv)
        print(f"wrote {args.csv}")
    if getattr(args, "json", None):
        results.save(df, args.json)
        print(f"wrote {args.json}")
    if getattr(args, "plot", None):
        from .plots import save_report
        save_report(df, args.plot)
        print(f"wrote {args.plot}")


def cmd_specs(args):
    from . import multi_gpu, specs as specs_mod
    import pandas as pd
    for name in args.names or ():
        cfg = multi_gpu.parse(name)
        if cfg.count > 1:
            raise ValueError(f"specs: {name!r} is a multi-GPU configuration; the spec database holds single "
                             f"cards: gpucmp specs {cfg.gpu!r}")
    df = specs_mod.specs(args.names or None)
    with pd.option_context("display.width", 200, "display.max_columns", 30):
        shown = df.drop(columns=[c for c in ("source", "aliases") if c in df.columns])
        print(shown.to_string(index=False))
    if args.names:
        for _, r in df.iterrows():
            print(f"\n{r['name']} source: {r['source']}")
    return 0


def cmd_devices(args):
    from .devices import devices
    df = devices()
    print(df.dropna(axis=1, how="all").to_string(index=False))
    return 0


def cmd_bench(args):
    from .runner import benchmark
    df = benchmark(args.workloads, args.devices, args.precision, args.batch_size, args.repeats)
    cols = ["device", "gpu", "workload", "precision", "batch_size", "size", "step_time_s", "throughput", "unit",
            "peak_memory_bytes", "energy_per_step_j", "avg_power_w", "sm_clock_mhz"]
    print(df[cols].to_string(index=False))
    _export(df, args)
    return 0


def cmd_calibrate(args):
    from .calibration import PARTITION_SMS, calibrate
    kw = {k: v for k, v in (("workloads", args.workloads), ("precisions", args.precision),
                            ("batch_sizes", args.batch_size)) if v}
    if args.attach and args.merge:
        raise ValueError("calibrate: --attach and --merge are separate steps; give one of them")
    if args.attach:
        return _attach(args)
    if args.merge:
        return _merge(args)
    cal = calibrate(args.device, ops_budget_s=args.ops_budget_s, path=args.out, copy_curve=not args.no_copy_curve,
                    partitions=() if args.no_partitions else (args.partitions or PARTITION_SMS),
                    partition_ops_budget_s=args.partition_ops_budget_s, peaks_from=args.peaks_from,
                    step_repeats=args.step_repeats, **kw)
    parts = "/".join(cal.get("partitions") or {}) or "no"
    print(f"wrote {args.out}: {cal['gpu']}, {len(cal['ops'])} ops, {len(cal['steps'])} model steps, "
          f"{parts} SM partitions")
    return 0


def _attach(args):
    """gpucmp calibrate --attach FULL.json PART.json ... --out OUT: no measuring, the partition
    calibrations (measured with GPUCMP_CUDA_SMS=N) filed into the whole card's."""
    from .calibration import attach_partitions, save
    from .projection import load_calibration
    full, *parts = [load_calibration(p) for p in args.attach]
    if not parts:
        raise ValueError("calibrate --attach: give the whole card's calibration, then its partitions")
    cal = attach_partitions(full, {int(p["sms"]): p for p in parts})
    save(cal, args.out)
    print(f"wrote {args.out}: {cal['gpu']} with {'/'.join(cal['partitions'])} SM partitions")
    return 0


def _merge(args):
    """gpucmp calibrate --merge EXISTING NEW --out OUT [--workloads ...]: no measuring, NEW's
    workloads (all, or those named) merged into EXISTING (merge.py)."""
    from .calibration import save
    from .merge import merge_calibrations
    from .projection import load_calibration
    existing, new = (load_calibration(p) for p in args.merge)
    cal = merge_calibrations(existing, new, args.workloads)
    save(cal, args.out)
    note = cal["provenance"]["merged"][-1]
    parts = "/".join(note.get("partitions") or []) or "no"
    print(f"wrote {args.out}: {cal['gpu']}, {', '.join(note['workloads'])} merged on the whole card and "
          f"{parts} SM partitions")
    for key, what in (("partitions_left_out", "only in the new file, left out"),
                      ("partitions_without_them", "without the merged workloads")):
        if note.get(key):
            print(f"  partitions {'/'.join(note[key])}: {what}")
    return 0


def cmd_cnn(args):
    import gpucmp
    from gpucmp import keras
    from gpucmp.datasets import load_digits_mnist
    from .workloads.seeds import build_seed_cnn
    if args.device:
        gpucmp.set_device(args.device)
    if args.seed is not None:
        keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_digits_mnist()
    x_train = (x_train.reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
    x_test = (x_test.reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
    y_train1 = np.eye(10, dtype=np.float32)[y_train]
    y_test1 = np.eye(10, dtype=np.float32)[y_test]
    print(f"device: {gpucmp.get_device()}  train: {len(x_train)} images  test: {len(x_test)} images")
    model = build_seed_cnn(keras)
    model.summary()
    start = time.perf_counter()
    model.fit(x_train, y_train1, batch_size=args.batch_size, epochs=args.epochs, verbose=args.verbose)
    seconds = time.perf_counter() - start
    loss, acc = model.evaluate(x_test, y_test1, verbose=0)
    rate = len(x_train) * args.epochs / seconds
    print(f"test accuracy: {acc:.4f}  test loss: {loss:.4f}")
    print(f"training: {seconds:.2f} s for {args.epochs} epochs, {rate:,.0f} samples/s "
          f"(batch {args.batch_size}, {gpucmp.get_device()})")
    return 0


def _positive(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return v


def build_parser():
    p = _Parser(prog=PROG, description="How do my models run on this GPU, and how would they run on that one?")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    c = sub.add_parser("compare", help="GPUs side by side: measured where present, projected elsewhere")
    c.add_argument("gpus", nargs="+", help="GPU names, e.g. A4000 A5000 (see `gpucmp specs`)")
    c.add_argument("--workloads", nargs="+", default=None, help="cnn gemm conv bandwidth resnet50 rnn lstm gan (default: all)")
    c.add_argument("--precision", nargs="+", default=None, help="float32 mixed_float16 mixed_bfloat16 ...")
    c.add_argument("--batch-size", nargs="+", type=_positive, default=None)
    c.add_argument("--results", nargs="+", default=None, help="results files from `gpucmp bench` elsewhere")
    c.add_argument("--no-measure", action="store_true", help="do not measure the devices here")
    c.add_argument("--no-local", action="store_true", help="leave this machine's own rows out")
    c.add_argument("--csv"), c.add_argument("--json"), c.add_argument("--plot")
    c.set_defaults(func=cmd_compare)

    s = sub.add_parser("specs", help="the GPU spec database")
    s.add_argument("names", nargs="*")
    s.set_defaults(func=cmd_specs)

    d = sub.add_parser("devices", help="the devices here, matched to the spec database")
    d.set_defaults(func=cmd_devices)

    b = sub.add_parser("bench", help="measure workloads on the devices here")
    b.add_argument("--workloads", nargs="+", default=None)
    b.add_argument("--devices", nargs="+", default=None, help="cpu, cuda:0 ... (default: the GPUs, else the CPU)")
    b.add_argument("--precision", nargs="+", default=None)
    b.add_argument("--batch-size", nargs="+", type=_positive, default=None)
    b.add_argument("--repeats", type=_positive, default=None)
    b.add_argument("--csv"), b.add_argument("--json")
    b.set_defaults(func=cmd_bench)

    k = sub.add_parser("calibrate", help="measure the calibration projections start from (needs a GPU)")
    k.add_argument("--device", default="cuda:0")
    k.add_argument("--out", required=True)
    k.add_argument("--ops-budget-s", type=float, default=None, help="time spent timing single ops at most")
    k.add_argument("--workloads", nargs="+", default=None, help="default: cnn gemm conv bandwidth resnet50 rnn lstm gan")
    k.add_argument("--precision", nargs="+", default=None, help="default: float32 float16 bfloat16")
    k.add_argument("--batch-size", nargs="+", type=_positive, default=None, help="model batch sizes (default: "
                   "each workload's own)")
    k.add_argument("--partitions", nargs="+", type=_positive, default=None,
                   help="SM counts to calibrate the card confined to (default: 8 24 48 96)")
    k.add_argument("--no-partitions", action="store_true", help="measure no SM partitions")
    k.add_argument("--partition-ops-budget-s", type=float, default=60.0,
                   help="single-op time budget of each partition (default 60)")
    k.add_argument("--no-copy-curve", action="store_true", help="skip the copy on 8/24/48/96 SMs")
    k.add_argument("--step-repeats", type=_positive, default=3, help="samples per model step (default 3)")
    k.add_argument("--attach", nargs="+", default=None, metavar="FILE",
                   help="measure nothing: file partition calibrations (FILE 2..) into the first FILE's")
    k.add_argument("--merge", nargs=2, default=None, metavar=("EXISTING", "NEW"),
                   help="measure nothing: merge NEW's workloads (or those of --workloads) into EXISTING")
    k.add_argument("--peaks-from", default=None, metavar="FILE",
                   help="reuse the GEMM / copy peaks of this calibration of the same card (a calibration of a few "
                        "workloads to --merge into it)")
    k.set_defaults(func=cmd_calibrate)

    n = sub.add_parser("cnn", help="train the seeds' CNN on real handwritten digits")
    n.add_argument("--epochs", type=_positive, default=5)
    n.add_argument("--batch-size", type=_positive, default=32)
    n.add_argument("--device", default=None, help="cpu or cuda:N (default: the GPU when present)")
    n.add_argument("--seed", type=int, default=None)
    n.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    n.set_defaults(func=cmd_cnn)
    return p


def main(argv=None):
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return args.func(args)
    except _UsageError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, IndexError, MemoryError, NotImplementedError, ImportError, OSError) as exc:
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"{PROG}: error: {msg}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
