"""Folds Nsight Compute's CSV (--metrics gpu__time_duration.sum --csv) into a table of
GPU time per kernel name: calls, total and mean microseconds, share of the total.

    python3 benchmarks/ncu_summary.py ncu.csv [--steps N]   # --steps: divide totals per step
"""
import argparse
import collections
import csv
import io
import re
import sys


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--steps", type=float, default=1.0)
    a = ap.parse_args()
    text = open(a.csv, errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        sys.exit("no ncu CSV table in " + a.csv)
    rows = list(csv.DictReader(io.StringIO(text[start:])))
    tot = collections.defaultdict(float)
    cnt = collections.Counter()
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1000.0 if unit.startswith("n") else (v if unit.startswith("u") else v * 1000.0)
        name = re.sub(r"\(.*", "", r["Kernel Name"])[:70] + " " + r.get("Grid Size", "") + r.get("Block Size", "")
        tot[name] += us
        cnt[name] += 1
    total = sum(tot.values())
    print(f"{'kernel':<100} {'calls':>6} {'us/step':>9} {'mean us':>8} {'share':>6}")
    for k, v in sorted(tot.items(), key=lambda kv: -kv[1]):
        print(f"{k:<100} {cnt[k]:>6} {v / a.steps:9.1f} {v / cnt[k]:8.2f} {100 * v / total:5.1f}%")
    print(f"total {total / a.steps:.1f} us/step over {sum(cnt.values())} kernels")


if __name__ == "__main__":
    main()
