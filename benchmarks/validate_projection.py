"""Validate the projection against SM partitions of one GPU (CUDA green contexts).

The harness projects a workload onto a GPU that is not here. On one H200 we can make
"other GPUs" to check it against: GPUCMP_CUDA_SMS=N confines gpucmp's CUDA backend to N
of the card's SMs (a green context), so measured rows of the card confined to 16, 32
and 64 SMs are compared with the projection, from the full card's calibration, onto the
same card confined to the same SMs (compute peaks scale with the SMs; the memory system
stays the card's, its copy rate following the saturation curve the calibration measured
on 8/24/48/96 SMs, projection.copy_bandwidth).

    python benchmarks/validate_projection.py --calibration cal.json \
        [--measured sm16.json sm32.json sm64.json] [--measured-cal cal16.json ...] [--out table.md]

--measured takes `gpucmp bench` results files of the partitions; --measured-cal takes
calibrations measured on them (`GPUCMP_CUDA_SMS=N gpucmp calibrate`), whose model and
kernel steps are the same measurements. --per-sm-from (for a calibration without a copy
curve) takes the per-SM copy rate from the bandwidth row of that file (a fitted figure, so
its own bandwidth row is not a validation point) and writes it into the calibration
passed as --write-calibration. Prints a markdown table: workload, precision, batch, SMs,
measured and projected step time, and the error; for a calibration with SM partitions
(gpucmp calibrate's default), the projection from the whole card alone and the one from
the partitions bracketing each SM count side by side (a partition's own SM count is no
validation point and is left out). The recurrent workloads (rnn, lstm, gan) are validated
the same way (measured with `gpucmp bench --workloads rnn lstm gan` on the partitions:
harness_on_device.sh rnn-partitions) and summarised apart, since their recurrence is
projected by the per-step model (gpucmp/harness/recurrent.py) rather than the roofline;
a projected row that carries a note (estimated ops, the default recurrent model) is
marked with a *. --workloads keeps only the rows of the workloads named.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from gpucmp.harness import projection, results, workloads  # noqa: E402

RECURRENT = ("rnn", "lstm", "gan")


def per_sm_rate(df):
    bw = df[df["workload"] == "bandwidth"]
    if not len(bw):
        raise SystemExit("--per-sm-from: that file has no bandwidth row")
    r = bw.iloc[0]
    return float(r["throughput"]) * 1e9 / int(r["sms"]), int(r["sms"])


def confined_rows(cal):
    """The measured rows of a calibration taken with the card confined (GPUCMP_CUDA_SMS=N):
    its model steps and its kernel steps (gemm 8192, conv, bandwidth), as results rows."""
    sms = int(cal["sms"])
    rows = []
    for r in list(cal["steps"]) + list(cal.get("kernels", [])):
        row = dict(r, sms=sms)
        if r["workload"] == "bandwidth":
            row["throughput"] = 2.0 * (int(r["batch_size"]) << 20) / float(r["step_time_s"]) / 1e9
        rows.append(row)
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calibration", required=True)
    ap.add_argument("--measured", nargs="*", default=[], help="results files of `gpucmp bench` on partitions")
    ap.add_argument("--measured-cal", nargs="*", default=[],
                    help="calibrations measured on partitions (GPUCMP_CUDA_SMS=N gpucmp calibrate): their steps")
    ap.add_argument("--per-sm-from", default=None)
    ap.add_argument("--write-calibration", default=None)
    ap.add_argument("--fitted-sms", type=int, default=None,
                    help="the SM count the calibration's per-SM copy rate was taken from (its bandwidth row is "
                         "marked fitted, not counted as a validation point)")
    ap.add_argument("--workloads", nargs="*", default=None, help="only these workloads' rows")
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    cal = projection.load_calibration(a.calibration)
    fitted_sms = a.fitted_sms
    if a.per_sm_from:
        rate, fitted_sms = per_sm_rate(results.load(a.per_sm_from))
        cal["peaks"]["per_sm_copy_bytes_per_s"] = rate
        cal["peaks"]["per_sm_copy_from"] = f"bandwidth workload measured on {fitted_sms} SMs"
        if a.write_calibration:
            results._atomic_write(a.write_calibration, json.dumps(cal, indent=1, sort_keys=True) + "\n")
    whole = {k: v for k, v in cal.items() if k != "partitions"}
    parted = bool(cal.get("partitions"))
    if parted:
        lines = ["| workload | precision | batch | SMs | measured step | projected, whole card | error "
                 f"| projected, with the {'/'.join(sorted(cal['partitions'], key=int))}-SM partitions | error |",
                 "|---|---|---|---|---|---|---|---|---|"]
    else:
        lines = ["| workload | precision | batch | SMs | measured step | projected step | error |",
                 "|---|---|---|---|---|---|---|"]
    errors, errors_parted = [], []
    recurrent_errs = []
    sources = [results.load(path).to_dict("records") for path in a.measured]
    sources += [confined_rows(projection.load_calibration(path)) for path in a.measured_cal]
    if not sources:
        raise SystemExit("validate_projection: give --measured or --measured-cal files")
    for records in sources:
        for r in records:
            if a.workloads and r["workload"] not in a.workloads:
                continue
            w = workloads.get(r["workload"] if r["workload"] != "gemm" else f"gemm:{int(r['batch_size'])}")
            cfgs = [c for c in w.configs("cuda", [int(r["batch_size"])] if w.kind == "model" or w.name == "conv"
                                         else None) if c.batch_size == int(r["batch_size"])]
            if not cfgs:
                continue
            c = cfgs[0]
            sms = int(r["sms"])
            if str(sms) in (cal.get("partitions") or {}):
                continue            # a partition's own measurement is no validation point
            p = projection.project(w, cal["gpu"], r["precision"], c, whole, sms=sms)
            err = p["step_time_s"] / r["step_time_s"] - 1
            fitted = w.name == "bandwidth" and sms == fitted_sms
            if not fitted:
                errors.append(abs(err))
            star = "*" if p.get("note") else ""
            line = (f"| {w.name} | {r['precision']} | {c.batch_size} | {sms} | {r['step_time_s'] * 1e3:.4g} ms "
                    f"| {p['step_time_s'] * 1e3:.4g}{star} ms | {err:+.1%}{' (fitted)' if fitted else ''} |")
            best = err
            if parted:
                q = projection.project(w, cal["gpu"], r["precision"], c, cal, sms=sms)
                e2 = q["step_time_s"] / r["step_time_s"] - 1
                errors_parted.append(abs(e2))
                line += f" {q['step_time_s'] * 1e3:.4g}{'*' if q.get('note') else ''} ms | {e2:+.1%} |"
                best = e2
            if w.name in RECURRENT:
                recurrent_errs.append(abs(best))
            lines.append(line)
    for label, errs in (("whole card", errors), ("with partitions", errors_parted),
                        ("recurrent workloads, " + ("with partitions" if parted else "whole card"), recurrent_errs)):
        if errs:
            errs.sort()
            lines.append(f"\nvalidation points ({label}): {len(errs)}; median |error| {errs[len(errs) // 2]:.1%}, "
                         f"max {errs[-1]:.1%}; within 10%: {sum(e <= 0.10 for e in errs)} of {len(errs)}")
    if any("*" in x for x in lines):
        lines.append("\n* the projected row carries a note (estimated ops or the default recurrent model)")
    text = "\n".join(lines)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
