"""One-off (2026-12-01): give the calibration measured by `gpucmp calibrate` in device call 3
the sustained kernel rows, GEMM clocks and power figures that the clock model reads and that
`gpucmp calibrate` records itself from now on. They come from the same build on the same
H200 in the same session: bench_full.json (`gpucmp bench` of cnn, gemm, conv, bandwidth,
float32 / float16, device call 2) and nvidia-smi's idle power before call 3's calibration.

    python benchmarks/results/h200-2026-12-01-harness/augment_calibration.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
cal = json.load(open(os.path.join(HERE, "calibration_per_sm.json")))
rows = json.load(open(os.path.join(HERE, "bench_full.json")))["rows"]
pick = ("workload", "precision", "batch_size", "step_time_s", "sm_clock_mhz", "avg_power_w")
cal["kernels"] = [{k: r[k] for k in pick} for r in rows if r["workload"] != "cnn"]
by = {(r["workload"], r["precision"], r["batch_size"]): r for r in rows}
for s in cal["steps"]:
    r = by[(s["workload"], s["precision"], s["batch_size"])]
    s["sm_clock_mhz"], s["avg_power_w"] = r["sm_clock_mhz"], r["avg_power_w"]
cal["peaks"]["gemm_clock_mhz"] = {r["precision"]: r["sm_clock_mhz"] for r in rows if r["workload"] == "gemm"}
cal["power"] = {"idle_w": 79.68, "limit_w": 700.0, "max_sm_clock_mhz": 1980.0}
cal["provenance"]["added"] = ("kernels, steps' sm_clock_mhz / avg_power_w, peaks.gemm_clock_mhz: bench_full.json "
                              "(gpucmp bench, same build and H200, 2026-12-01); power.idle_w: nvidia-smi before "
                              "the calibration; per_sm_copy_bytes_per_s: bench_sm16.json (16-SM green context)")
out = os.path.join(HERE, "..", "..", "..", "gpucmp", "harness", "data", "calibration.json")
with open(out, "w") as f:
    f.write(json.dumps(cal, indent=1, sort_keys=True) + "\n")
print("wrote", os.path.normpath(out))
