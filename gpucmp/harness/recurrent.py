"""The per-step cost model of the recurrence (rnn_fwd / rnn_bwd), calibrated on the origin.

What it provides: `op_seconds(op, device, params)` -> seconds of one recurrent op on a
DeviceModel; `params_for(cal, variant, which)` -> the model's two quantities for a
variant and direction, fitted from the recurrent ops the calibration timed (`fit`,
stored as cal["recurrent"]), else documented defaults marked as such; `resolve(op, cal,
target_row)` -> the op with the variant that runs it on the origin and on the target.

The model: a recurrence is T dependent steps; each step waits for the previous one's
state, so it is bound by latency, not by bandwidth or peak FLOPs (RECURRENT_SPEC.md
section 2). time = T x step + (launches outside the steps) x launch, with
    step = max(step FLOPs / (e x per-SM fp32 rate x SMs it can use), floor x units)
- the FLOP term: the step's recurrent product and gate math at a fraction `e` of the
  fp32 rate (FFMA on the CUDA cores; no Tensor Cores in the Keras-exact path) of the
  SMs its CTAs cover, min(SMs, op.blocks);
- the floor: a per-step latency that no SM count removes. `units` is what it is paid
  per: stepwise, the kernel launches of a step (each a graph node plus a kernel that
  waits on the one before); persistent, the exchanges of the state among the CTAs of a
  group (tagged words through L2: csrc/cuda/rnn_persistent.cu). It is a calibrated quantity of the origin,
  fitted with `e` to the ops the calibration timed at several cells, batches and widths
  (least squares in log time), per variant and direction, on the whole card and on each
  SM partition (each keeps its own fit);
- to a target the floor scales by the SM clock (origin clock / target clock): it is
  taken to be a fixed number of cycles -- L2 round trips and the front end's handling of
  dependent launches, both in the SM/L2 clock domain. Assumption, with its uncertainty:
  L2 latency in cycles differs between architectures (roughly +-30% from Ampere to
  Hopper), and the launch part of the stepwise floor also depends on the driver and
  the host, so a target's recurrent time is uncertain by about that much even where the
  origin's is measured exactly; the fit's own residual (rms_log_error) is recorded.
Without calibrated recurrent ops the defaults are derived from what was measured on an
H200 (RESULTS.md, the synchronisation latencies; the calibration's own launch cost):
stepwise, one graph-replayed launch (the calibration's peaks.launch_s) per launch of a
step; persistent, 1800 cycles per exchange (what the earlier flags cost among 8 groups at
once, ~0.9 us at 1980 MHz: an upper bound for the tagged words); e = 0.25 (stepwise SIMT tiles) and 0.5 (persistent, U on chip): guesses,
flagged as estimated wherever they are used.

Why it is built this way: a bandwidth roofline projects a latency-bound loop as if it
streamed its bytes, which gets both the size and the direction of the change between
cards wrong (a card with less bandwidth but a similar clock runs the loop about as
fast); two fitted quantities per variant keep the model small enough to fit from a
minute of measurements and to check against the card confined to fewer SMs.
"""
import math

from . import costs

RNN_KINDS = ("rnn_fwd", "rnn_bwd")
DEFAULT_STEPWISE_EFFICIENCY = 0.25
DEFAULT_PERSISTENT_EFFICIENCY = 0.5
DEFAULT_PERSISTENT_EXCHANGE_CYCLES = 1800.0
DEFAULT_RESIDENT_STEP_CYCLES = 1000.0
# the persistent kernel keeps U's slices in shared memory: a target whose SMs cannot hold
# a sixteenth of U plus the group's states runs the stepwise loop instead
PERSISTENT_STATE_BYTES = 16 * 1024


def is_recurrent(op):
    return op.kind in RNN_KINDS


def floor_units(op):
    """What an op's per-step floor is paid per: launches per step (stepwise) or exchanges
    per step (persistent, resident)."""
    e = op.extra
    if e["variant"] in ("persistent", "resident"):
        return costs.rnn_exchanges_per_step(e["cell"])
    return costs.rnn_launches_per_step(e["cell"], "stepwise", e["rmask"])


def _outside_launches(op):
    e = op.extra
    return op.launches - e["steps"] * costs.rnn_launches_per_step(e["cell"], e["variant"], e["rmask"])


def default_params(variant, launch_s, clock_mhz):
    """The model's quantities when the calibration timed no recurrent op (see the module
    docstring); floor_s is per unit, at clock_mhz."""
    if variant in ("persistent", "resident"):
        cycles = DEFAULT_PERSISTENT_EXCHANGE_CYCLES if variant == "persistent" else DEFAULT_RESIDENT_STEP_CYCLES
        floor = cycles / (clock_mhz * 1e6) if clock_mhz == clock_mhz else cycles / 2e9
        return {"floor_s": floor, "efficiency": DEFAULT_PERSISTENT_EFFICIENCY, "clock_mhz": clock_mhz,
                "source": "default"}
    return {"floor_s": float(launch_s), "efficiency": DEFAULT_STEPWISE_EFFICIENCY, "clock_mhz": clock_mhz,
            "source": "default"}


def params_for(cal, variant, which):
    """The model's quantities for `variant` and `which` ('fwd' / 'bwd'): the calibration's fit
    (cal["recurrent"]["fits"][variant][which]), else the defaults at the calibration's clock."""
    fit = ((cal.get("recurrent") or {}).get("fits") or {}).get(variant, {}).get(which)
    if fit:
        return dict(fit, source="calibrated")
    clock = float((cal.get("power") or {}).get("max_sm_clock_mhz") or math.nan)
    return default_params(variant, cal["peaks"]["launch_s"], clock)


def step_seconds(op, device, params):
    """Seconds of one time step of recurrent op `op` on `device` (a DeviceModel)."""
    e = op.extra
    per_sm = device.peak("fp32") / device.sms
    sms = max(1, min(device.sms, op.blocks))
    t_flops = e["step_flops"] / (params["efficiency"] * per_sm * sms)
    clock = 1.0
    c_p, c_d = float(params.get("clock_mhz") or math.nan), float(device.clock_mhz)
    if not (math.isnan(c_p) or math.isnan(c_d)) and c_d > 0:
        clock = c_p / c_d
    return max(t_flops, params["floor_s"] * floor_units(op) * clock)


def op_seconds(op, device, params):
    """Seconds of recurrent op `op` on `device`: T steps plus the launches outside them
    (stepwise: its init and final-state kernels) at the device's launch cost."""
    return op.extra["steps"] * step_seconds(op, device, params) + max(0, _outside_launches(op)) * device.launch_s


def persistent_fits(op, row):
    """Whether the persistent kernel can hold this op's U on spec row `row`'s SMs: a
    sixteenth of U (16 CTAs per group at most) plus the states in one SM's shared memory."""
    e = op.extra
    g = costs.RNN_GATES[e["cell"]]
    u_bytes = e["units"] * g * e["units"] * costs.DTYPE_BYTES[op.dtype]
    smem = float(row.get("smem_per_sm_kb", math.nan)) * 1024
    if math.isnan(smem):
        return True
    return u_bytes / costs.RNN_MAX_CTAS_PER_GROUP + PERSISTENT_STATE_BYTES <= smem and not e["rmask"]


def origin_variant(op, cal):
    """The variant that ran `op` on the origin: the op's own when its description gave it,
    else the one the calibration recorded for its shape, else the one auto ran for most of
    the calibration's recurrent ops, else the op's (the running build's choice)."""
    e = op.extra
    if e.get("variant_source") == "given":
        return e["variant"]
    rec = cal["ops"].get(op.key)
    if rec and rec.get("variant") in costs.RNN_VARIANTS:
        return rec["variant"]
    auto = (cal.get("recurrent") or {}).get("auto_variant")
    if auto == "resident" and not costs.rnn_resident_eligible(e["cell"], e["units"], e["which"], e["rmask"]):
        auto = "persistent"  # auto's next choice for a U the resident kernel does not hold
    if auto in costs.RNN_VARIANTS and not (auto == "persistent" and e["rmask"]):
        return auto
    return e["variant"]


def resolve(op, cal, target_row):
    """(op as the origin ran it, op as the target runs it): the origin's variant, and the
    same on the target unless that is persistent and U does not fit the target's SMs."""
    v = origin_variant(op, cal)
    op_o = costs.with_variant(op, v, "calibration" if v != op.extra["variant"] else op.extra["variant_source"])
    if v == "persistent" and not persistent_fits(op_o, target_row):
        return op_o, costs.with_variant(op_o, "stepwise", "target")
    return op_o, op_o


def origin_seconds(op, origin, cal):
    """(seconds, how) of recurrent op `op` (variant resolved) on the origin: timed alone by the
    calibration at its shape and variant, else the per-step model."""
    rec = cal["ops"].get(op.key)
    if rec is not None and rec.get("variant", op.extra["variant"]) == op.extra["variant"]:
        return float(rec["seconds"]), "measured"
    p = params_for(cal, op.extra["variant"], op.extra["which"])
    how = ("modelled from the calibrated recurrent fit" if p["source"] == "calibrated"
           else "estimated from the default recurrent model")
    return op_seconds(op, origin, p), how


# ------------------------------------------------------------------ the fit

def _fit_group(points):
    """(floor_s per unit, efficiency, rms log error) of step = max(x / e, floor x units)
    fitted to points [(step seconds, x = the step's FLOP time at the full per-SM rate,
    units)] by least squares in log time over a grid (e in [0.005, 1], floor around the
    measured per-unit steps)."""
    per_unit = sorted(s / n for s, _, n in points)
    lo, hi = per_unit[0] / 4, per_unit[-1] * 2
    floors = [lo * (hi / lo) ** (i / 120) for i in range(121)]
    effs = [0.005 * (1.0 / 0.005) ** (j / 80) for j in range(81)]
    best = None
    for f in floors:
        for e in effs:
            err = sum(math.log(max(x / e, f * n) / s) ** 2 for s, x, n in points)
            if best is None or err < best[0]:
                best = (err, f, e)
    err, f, e = best
    return f, e, math.sqrt(err / len(points))


def fit(records, origin, launch_s, clock_mhz):
    """{variant: {which: {floor_s, efficiency, clock_mhz, points, rms_log_error}}} fitted to
    timed recurrent ops: records of {seconds, cell, which, batch, steps, units, dtype,
    variant} (the calibration's recurrent sweep and the workloads' own shapes) on `origin`
    (a DeviceModel at the clock the ops ran at)."""
    groups = {}
    for r in records:
        op = costs.recurrent("fit", r["which"], r["cell"], r["batch"], r["steps"], r["units"],
                             r.get("dtype", "float32"), r["variant"])
        outside = max(0, _outside_launches(op)) * launch_s
        step = (float(r["seconds"]) - outside) / op.extra["steps"]
        if step <= 0:
            continue
        x = op.extra["step_flops"] / (origin.peak("fp32") / origin.sms * max(1, min(origin.sms, op.blocks)))
        groups.setdefault((r["variant"], r["which"]), []).append((step, x, floor_units(op)))
    out = {}
    for (variant, which), pts in sorted(groups.items()):
        if len(pts) < 2:
            continue
        f, e, rms = _fit_group(pts)
        out.setdefault(variant, {})[which] = {"floor_s": f, "efficiency": e, "clock_mhz": clock_mhz,
                                              "points": len(pts), "rms_log_error": rms}
    return out
