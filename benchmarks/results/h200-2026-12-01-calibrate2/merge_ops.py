"""One-off (2026-12-01): the shipped calibration is this folder's `gpucmp calibrate` run (device
call 5, time-averaged clocks, per-SM copy rate from bench_sm16.json), whose 40-second ops budget
timed 132 single ops; the ops it did not reach are taken from the calibrate run of device call 3
(../h200-2026-12-01-harness/calibration.json: same build of the core's bench functions, same H200,
same day, 274 ops), so that ResNet-50's convolutions are measured rather than estimated.

    python benchmarks/results/h200-2026-12-01-calibrate2/merge_ops.py
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
cal = json.load(open(os.path.join(HERE, "calibration_per_sm.json")))
earlier = json.load(open(os.path.join(HERE, "..", "h200-2026-12-01-harness", "calibration.json")))
added = {k: v for k, v in earlier["ops"].items() if k not in cal["ops"]}
cal["ops"].update(added)
timed = set(cal["ops"])
cal["skipped_ops"] = [s for s in cal["skipped_ops"] if s.split(": ")[0] not in timed]
cal["provenance"]["ops_added"] = (f"{len(added)} ops from the calibrate run of {earlier['provenance']['date']} "
                                  "(same build and H200)")
out = os.path.join(HERE, "..", "..", "..", "gpucmp", "harness", "data", "calibration.json")
with open(out, "w") as f:
    f.write(json.dumps(cal, indent=1, sort_keys=True) + "\n")
print(f"wrote {os.path.normpath(out)}: {len(cal['ops'])} ops ({len(added)} added)")
