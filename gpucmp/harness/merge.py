"""Merging a calibration of a few workloads into an existing one of the same card and build.

What it provides: `merge_calibrations(existing, new, workloads=None)` -> a calibration
dict: `existing` with the model steps, in-step profiles and recurrent model of the
workloads `new` measured (all of them by default) taken from `new` -- on the whole card
and on each SM partition both have -- and `new`'s single-op times added for the ops
`existing` lacks (its recurrent ops replace any it had); `check_compatible(existing,
new)` raises ValueError when the two cannot be combined. `gpucmp calibrate --merge
EXISTING NEW --out OUT` runs it and writes OUT atomically.

Why it is built this way: the whole calibration takes ~13 minutes of device time; adding
workloads (the recurrent ones) should cost only their own measurements. The two files
are combined only when their figures are comparable: the same schema, the same card
(GPU, device name, SMs), the same build (gpucmp version, CUDA runtime, and the
kernel-variant fingerprint where both record one); everything else is refused with a
message that says which. The existing card's peaks, clocks, copy curve and kernel rows
are kept (the projection's units and bandwidth come from them); `existing`'s own
measurements win wherever both timed the same GEMM or convolution, so the projections
of the workloads it already had change only through the origin's host work per plan
call, which is the smallest surplus over every measured model step
(projection.host_overhead) and may be found smaller among the merged steps. A partition only `new` has is left out
(its other workloads would be missing there) and said so in the merged provenance.
"""
import copy
import datetime

from .projection import CALIBRATION_SCHEMA
from .recurrent import RNN_KINDS


def _prov(cal):
    return cal.get("provenance") or {}


def check_compatible(existing, new, where="calibrate --merge"):
    """ValueError naming what differs when `new` cannot be merged into `existing`."""
    for name, cal in (("the existing calibration", existing), ("the new calibration", new)):
        if not isinstance(cal, dict) or cal.get("schema") != CALIBRATION_SCHEMA:
            got = cal.get("schema") if isinstance(cal, dict) else type(cal).__name__
            raise ValueError(f"{where}: {name} is not of schema {CALIBRATION_SCHEMA!r} (got {got!r})")
    pe, pn = _prov(existing), _prov(new)
    if existing.get("gpu") != new.get("gpu") or pe.get("device") != pn.get("device"):
        raise ValueError(f"{where}: another device: the existing calibration is of {existing.get('gpu')!r} "
                         f"({pe.get('device')!r}), the new one of {new.get('gpu')!r} ({pn.get('device')!r})")
    if int(existing.get("sms") or 0) != int(new.get("sms") or 0):
        raise ValueError(f"{where}: another device: the existing calibration has {existing.get('sms')} SMs, "
                         f"the new one {new.get('sms')}")
    if pe.get("sm_limit") != pn.get("sm_limit"):
        raise ValueError(f"{where}: the existing calibration was measured with sm_limit {pe.get('sm_limit')}, "
                         f"the new one with {pn.get('sm_limit')}")
    for key, what in (("gpucmp", "gpucmp version"), ("cuda_runtime", "CUDA runtime"), ("build", "kernel build")):
        a, b = pe.get(key), pn.get(key)
        if key == "build" and (a is None or b is None):
            continue                  # a calibration from before the fingerprint: nothing to compare
        if a != b:
            raise ValueError(f"{where}: another build: {what} {a!r} in the existing calibration, {b!r} in the new one")


def _workloads_of(cal):
    found = {r["workload"] for r in cal.get("steps", [])} | {r["workload"] for r in cal.get("profiles", [])}
    return sorted(found | set(_prov(cal).get("workloads") or []))


def _merge_one(existing, new, names):
    out = copy.deepcopy(existing)
    keep = lambda rows: [r for r in rows if r["workload"] not in names]  # noqa: E731
    take = lambda rows: [copy.deepcopy(r) for r in rows if r["workload"] in names]  # noqa: E731
    out["steps"] = keep(out.get("steps", [])) + take(new.get("steps", []))
    out["profiles"] = keep(out.get("profiles", [])) + take(new.get("profiles", []))
    ops = out.setdefault("ops", {})
    for k, rec in new.get("ops", {}).items():
        if k not in ops or rec.get("kind") in RNN_KINDS:
            ops[k] = copy.deepcopy(rec)
    if new.get("recurrent"):
        out["recurrent"] = copy.deepcopy(new["recurrent"])
    out["skipped_ops"] = list(out.get("skipped_ops", [])) + [f"(merged) {s}" for s in new.get("skipped_ops", [])]
    out["provenance"] = dict(_prov(out))
    out["provenance"]["merged"] = list(_prov(out).get("merged", [])) + [{
        "workloads": sorted(names), "provenance": {k: v for k, v in _prov(new).items() if k != "merged"},
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}]
    return out


def merge_calibrations(existing, new, workloads=None):
    """`existing` with `new`'s measurements of `workloads` (default: every workload `new`
    measured) merged in, on the whole card and on the partitions both have (see the module
    docstring); ValueError when they are incompatible or `new` measured none of them."""
    check_compatible(existing, new)
    have = _workloads_of(new)
    names = set(workloads or have)
    missing = sorted(names - set(have))
    if missing or not names:
        raise ValueError(f"calibrate --merge: the new calibration has no measurements of {', '.join(missing) or 'any workload'}"
                         f" (it has {', '.join(have) or 'none'})")
    out = _merge_one(existing, new, names)
    parts_e, parts_n = existing.get("partitions") or {}, new.get("partitions") or {}
    merged_parts, left_out = {}, []
    for n, sub in parts_e.items():
        if n in parts_n:
            check_compatible(sub, parts_n[n], where=f"calibrate --merge ({n}-SM partition)")
            merged_parts[n] = _merge_one(sub, parts_n[n], names)
        else:
            merged_parts[n] = copy.deepcopy(sub)
    left_out = sorted(set(parts_n) - set(parts_e), key=int)
    if merged_parts:
        out["partitions"] = dict(sorted(merged_parts.items(), key=lambda kv: int(kv[0])))
    missing_parts = sorted(set(parts_e) - set(parts_n), key=int)
    note = out["provenance"]["merged"][-1]
    note["partitions"] = sorted(set(parts_e) & set(parts_n), key=int)
    if left_out:
        note["partitions_left_out"] = left_out
    if missing_parts:
        note["partitions_without_them"] = missing_parts
    return out
