"""The recurrence's cost model and its calibration: the recurrent ops' kind, launches per
variant and per-step model (floor, FLOP term, clock scaling), its fit, bench_rnn, the
recurrent workloads' op lists and memory, and their projection with a calibration that
timed them (no "rough figure" note) or did not (the default model, said so)."""
import math

import numpy as np
import pytest

from gpucmp.harness import calibration, costs, describe, projection, recurrent, specs
from gpucmp.harness.workloads import Config, get

ORIGIN = "H200 SXM"


@pytest.fixture
def rng():
    return np.random.default_rng()


def _device(rng, name=ORIGIN, clock=None, sms=None):
    row = specs.spec(name)
    n = int(sms or row["sms"])
    return projection.DeviceModel(row["name"], n, {"fp32": rng.uniform(0.6, 0.9) * row["fp32_tflops"] * 1e12 * n
                                                   / int(row["sms"])},
                                  row["bandwidth_gbs"] * 1e9, rng.uniform(1e-6, 4e-6),
                                  clock_mhz=float(clock or row["boost_clock_mhz"]))


def test_recurrent_ops_have_their_kind_flops_and_launches_per_variant(rng):
    b, t, u = (int(x) for x in rng.integers(2, 200, 3))
    for cell, g in costs.RNN_GATES.items():
        op = costs.recurrent("r", "fwd", cell, b, t, u)
        assert op.kind == "rnn_fwd" and op.unit == "fp32" and op.extra["steps"] == t
        assert op.extra["step_flops"] == 2.0 * b * u * g * u + costs.RNN_GATE_FLOPS["fwd"][cell] * b * u
        assert op.flops == pytest.approx(t * op.extra["step_flops"])
        per_step = 4 if cell == "gru_reset_before" else 2
        assert op.launches == per_step * t + 2
        assert costs.recurrent("r", "bwd", cell, b, t, u).launches == per_step * t + 2
        p = costs.with_variant(op, "persistent", "test")
        assert p.launches == 1 and p.extra["variant"] == "persistent" and p.key == op.key
    with pytest.raises(ValueError, match="unknown cell"):
        costs.recurrent("r", "fwd", "lstmx", 1, 1, 1)
    with pytest.raises(ValueError, match="steps must be >= 1"):
        costs.recurrent("r", "fwd", "lstm", 1, 0, 1)
    with pytest.raises(ValueError, match="unknown variant"):
        costs.recurrent("r", "fwd", "lstm", 1, 1, 1, variant="cudnn")


def test_a_small_step_costs_the_floor_and_a_large_one_its_flops(rng):
    dev = _device(rng)
    params = {"floor_s": rng.uniform(0.5e-6, 3e-6), "efficiency": rng.uniform(0.1, 0.6),
              "clock_mhz": dev.clock_mhz}
    t = int(rng.integers(10, 200))
    small = costs.recurrent("s", "fwd", "simple", 2, t, 8)           # a few hundred FLOPs per step
    expect = t * 2 * params["floor_s"] + 2 * dev.launch_s             # 2 launches per step + init/final
    assert recurrent.op_seconds(small, dev, params) == pytest.approx(expect, rel=1e-12)
    big = costs.recurrent("b", "bwd", "lstm", 4096, t, 1024)
    sms = min(dev.sms, big.blocks)
    flop_step = big.extra["step_flops"] / (params["efficiency"] * dev.peak("fp32") / dev.sms * sms)
    assert flop_step > 2 * params["floor_s"]
    assert recurrent.op_seconds(big, dev, params) == pytest.approx(t * flop_step + 2 * dev.launch_s, rel=1e-12)
    # persistent: its one launch, the floor paid per exchange (two for GRU reset_before)
    pers = costs.with_variant(costs.recurrent("p", "fwd", "gru_reset_before", 2, t, 8), "persistent", "test")
    assert recurrent.op_seconds(pers, dev, params) == pytest.approx(t * 2 * params["floor_s"] + dev.launch_s,
                                                                    rel=1e-12)


def test_the_floor_scales_by_the_sm_clock_and_the_flops_by_the_target(rng):
    """Projected onto a card with another clock, a floor-bound recurrence scales by the
    clock ratio (not by bandwidth); a FLOP-bound one by the fp32 rate of the SMs it uses."""
    o = _device(rng, ORIGIN, clock=1980)
    a4000 = _device(rng, "RTX A4000")
    params = {"floor_s": 2e-6, "efficiency": 0.3, "clock_mhz": o.clock_mhz}
    op = costs.recurrent("s", "fwd", "lstm", 8, int(rng.integers(20, 100)), 16)
    ratio = (recurrent.op_seconds(op, a4000, params) - 2 * a4000.launch_s) / (
        recurrent.op_seconds(op, o, params) - 2 * o.launch_s)
    assert ratio == pytest.approx(1980 / a4000.clock_mhz, rel=1e-12)
    assert abs(ratio - o.bandwidth / a4000.bandwidth) > 1.0      # bandwidth would say ~9x
    big = costs.recurrent("b", "fwd", "lstm", 2048, 10, 1024)
    r_big = recurrent.step_seconds(big, a4000, params) / recurrent.step_seconds(big, o, params)
    per_sm = lambda d: d.peak("fp32") / d.sms * min(d.sms, big.blocks)   # noqa: E731
    assert r_big == pytest.approx(per_sm(o) / per_sm(a4000), rel=1e-12)


def test_the_fit_recovers_the_floor_and_the_efficiency(rng):
    origin = _device(rng)
    truth = {"stepwise": (rng.uniform(1e-6, 3e-6), rng.uniform(0.1, 0.5)),
             "persistent": (rng.uniform(0.3e-6, 1e-6), rng.uniform(0.2, 0.8))}
    recs = []
    for variant, (floor, eff) in truth.items():
        params = {"floor_s": floor, "efficiency": eff, "clock_mhz": origin.clock_mhz}
        for cell in ("simple", "lstm", "gru"):
            for b in (8, 128, 1024):
                for u in (32, 256, 1024):
                    for which in ("fwd", "bwd"):
                        op = costs.recurrent("x", which, cell, b, 32, u, variant=variant)
                        recs.append({"seconds": recurrent.op_seconds(op, origin, params), "cell": cell, "which": which,
                                     "batch": b, "steps": 32, "units": u, "variant": variant})
    fits = recurrent.fit(recs, origin, origin.launch_s, origin.clock_mhz)
    for variant, (floor, eff) in truth.items():
        for which in ("fwd", "bwd"):
            f = fits[variant][which]
            assert f["floor_s"] == pytest.approx(floor, rel=0.05)
            assert f["efficiency"] == pytest.approx(eff, rel=0.1)
            assert f["rms_log_error"] < 0.05


def test_variants_follow_the_calibration_and_the_target(rng):
    op = costs.recurrent("r", "fwd", "lstm", 32, 100, 128, variant_source="assumed")
    cal = {"ops": {op.key: {"seconds": 1e-4, "variant": "persistent"}}, "peaks": {"launch_s": 2e-6}}
    o, t = recurrent.resolve(op, cal, specs.spec("RTX A4000"))
    assert o.extra["variant"] == t.extra["variant"] == "persistent" and o.launches == 1
    # U of 1024 LSTM units (16 MB) cannot sit in a sixteenth of any SM's shared memory
    wide = costs.recurrent("r", "fwd", "lstm", 32, 100, 1024, variant_source="assumed")
    cal["recurrent"] = {"auto_variant": "persistent"}
    o, t = recurrent.resolve(wide, cal, specs.spec("RTX A4000"))
    assert o.extra["variant"] == "persistent" and t.extra["variant"] == "stepwise" and t.launches == 2 * 100 + 2
    given = costs.recurrent("r", "fwd", "lstm", 32, 100, 128, variant="stepwise", variant_source="given")
    assert recurrent.resolve(given, cal, specs.spec("RTX A4000"))[0].extra["variant"] == "stepwise"


def test_workload_ops_carry_the_recurrence():
    lstm, rnn = get("lstm"), get("rnn")
    b = 16
    for w, cell in ((lstm, "lstm"), (rnn, "simple")):
        rec = [o for o in w.ops(Config(b, ""), "float32") if o.kind in recurrent.RNN_KINDS]
        assert [o.kind for o in rec] == ["rnn_fwd", "rnn_bwd"]
        for o in rec:
            assert o.extra["cell"] == cell and o.extra["batch"] == b and o.extra["steps"] == 100
            assert o.extra["units"] == 128 and o.extra["variant"] in costs.RNN_VARIANTS
            assert o.launches == costs.rnn_launches(cell, 100, o.extra["variant"])
    v, source = describe.build_rnn_variant()
    assert v in costs.RNN_VARIANTS and source in ("build", "assumed")


def test_weight_grads_is_costed_as_its_two_gemms_and_bias_grad():
    """A recurrent layer's weight_grads call (dW = x^T dz, dU = hprev^T dz, db) is costed as
    the GEMMs and bias_grad it stands for: the ops the calibration times, with their sizes."""
    from gpucmp import keras
    b, t, f, u = 4, 7, 5, 6
    m = keras.models.Sequential([keras.layers.LSTM(u, input_shape=(t, f)), keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    trace = describe.meta_plan(describe.model_descs(m), b, "mse", "adam", True).trace(b, True)
    assert [e["op"] for e in trace].count("weight_grads") == 1
    node = next(e["node"] for e in trace if e["op"] == "weight_grads")
    ops = [o for o in describe.trace_ops(trace, tf32=False) if o.name.startswith(f"{node}:")]
    gemms = sorted((o.extra["m"], o.extra["n"], o.extra["k"], o.extra["trans_a"]) for o in ops
                   if o.kind == "gemm" and o.phase == "backward")
    assert gemms == sorted([(u, 4 * u, b * t, True), (f, 4 * u, b * t, True)])
    assert [o.flops for o in ops if o.name == f"{node}:bias_grad"] == [float(b * t * 4 * u)]


def test_a_gru_reset_before_model_is_costed_with_its_four_launches_per_step():
    from gpucmp import keras
    m = keras.models.Sequential([keras.layers.GRU(16, reset_after=False, input_shape=(7, 5)),
                                 keras.layers.Dense(1)])
    m.compile(optimizer="adam", loss="mse")
    ops = [o for o in describe.model_ops(m, 4) if o.kind in recurrent.RNN_KINDS]
    assert len(ops) == 2 and all(o.extra["cell"] == "gru_reset_before" for o in ops)
    if ops[0].extra["variant"] == "stepwise":
        assert all(o.launches == 4 * 7 + 2 for o in ops)


@pytest.mark.parametrize("name", ["lstm", "rnn"])
def test_recurrent_memory_model_is_within_15_percent_on_the_cpu(name):
    import gpucmp
    df = gpucmp.benchmark(workloads=[name], devices=["cpu"], precisions=["float32"], batch_sizes=[4], repeats=1)
    row = df.iloc[0]
    assert row["step_time_s"] > 0
    assert abs(row["peak_memory_bytes"] / row["modeled_memory_bytes"] - 1) < 0.15


def test_bench_rnn_times_each_cell_and_refuses_bad_input():
    from gpucmp import _core
    for cell in costs.RNN_GATES:
        for which in ("fwd", "bwd"):
            assert _core.bench_rnn("cpu", cell, 3, 4, 8, "float32", which=which, repeats=1, warmup=0) > 0
    with pytest.raises(ValueError, match="unknown cell"):
        _core.bench_rnn("cpu", "lstmx", 1, 1, 1)
    with pytest.raises(ValueError, match="steps must be in"):
        _core.bench_rnn("cpu", "lstm", 1, 0, 1)
    with pytest.raises(ValueError, match="graph capture"):
        _core.bench_rnn("cpu", "lstm", 1, 1, 1, graph=True)


def test_the_calibration_times_recurrent_ops_and_fits_them_on_the_cpu():
    """The calibration's recurrent pieces (on the CPU backend, eagerly: CUDA graphs are the
    device's): the sweep, a workload op's record, and the fit stored with them."""
    skipped = []
    sweep = {"cells": ("simple", "lstm"), "batches": (2, 8), "units": (8, 32), "steps": 4}
    pts = calibration.measure_recurrent("cpu", 2e-6, skipped, sweep, graph=False)
    assert len(pts) == 16 and not skipped and all(p["seconds"] > 0 for p in pts)
    op = costs.recurrent("x", "bwd", "lstm", 4, 6, 16)
    rec = calibration.time_recurrent("cpu", op, 2e-6, skipped, graph=False)
    assert rec["kind"] == "rnn_bwd" and rec["variant"] == "stepwise" and rec["launches"] == op.launches
    assert "roofline_s" not in rec          # kept out of the roofline kinds' efficiency curves
    dropout = costs.recurrent("x", "fwd", "lstm", 4, 6, 16, rmask=True)
    assert calibration.time_recurrent("cpu", dropout, 2e-6, skipped, graph=False) is None
    assert "recurrent dropout" in skipped[-1]
    origin = projection.DeviceModel(ORIGIN, 132, {"fp32": 3e13}, 4e12, 2e-6, clock_mhz=1980.0)
    # launch cost ~0 for the fit: the CPU's fused recurrence takes microseconds at these
    # sizes, less than a GPU launch cost would leave after subtracting it
    info = calibration.recurrent_record(pts, {op.key: rec}, origin, 1e-9, 1980.0)
    assert set(info["fits"]["stepwise"]) == {"fwd", "bwd"} and info["auto_variant"] == "stepwise"
    assert info["fits"]["stepwise"]["bwd"]["points"] == 9


# ------------------------------------------------------------------ projection with a calibration

def timed_calibration(rng, names=("rnn", "lstm", "gan"), precisions=("float32", "float16"), recurrent_ops=True):
    """The shipped calibration with every keyed op of `names` "timed" (its estimate x a random
    factor; the recurrent ops by the per-step model at random quantities) and their steps
    "measured" a little above their ops: what a calibration of them would hold."""
    cal = projection.load_calibration()
    cal = {k: v for k, v in cal.items() if k != "partitions"}
    # the shipped file's own recurrent measurements out: the test builds its own
    cal.pop("recurrent", None)
    cal["ops"] = {k: v for k, v in cal["ops"].items() if v.get("kind") not in recurrent.RNN_KINDS}
    cal["steps"] = [s for s in cal["steps"] if s["workload"] not in names]
    origin = projection.origin_model(cal)
    kind_eff = projection.kind_efficiency(origin, cal)
    fits = {v: {w: {"floor_s": rng.uniform(0.5e-6, 3e-6), "efficiency": rng.uniform(0.2, 0.5),
                    "clock_mhz": 1980.0, "points": 24, "rms_log_error": 0.05} for w in ("fwd", "bwd")}
            for v in costs.RNN_VARIANTS}
    if recurrent_ops:
        cal["recurrent"] = {"fits": fits, "auto_variant": "stepwise", "points": []}
    for name in names:
        w = get(name)
        for c in w.configs("cuda"):
            for p in precisions:
                ops = w.ops(c, p)
                for op in ops:
                    if not op.key or op.key in cal["ops"]:
                        continue
                    if op.kind in recurrent.RNN_KINDS:
                        if not recurrent_ops:
                            continue
                        o = costs.with_variant(op, "stepwise", "test")
                        sec = recurrent.op_seconds(o, origin, fits["stepwise"][op.extra["which"]])
                        cal["ops"][op.key] = {"seconds": sec * rng.uniform(1.0, 1.2), "kind": op.kind, "unit": "fp32",
                                              "variant": "stepwise"}
                    elif op.kind == "gemm":
                        sec = origin.launch_s + origin.roofline(op) / rng.uniform(0.2, 0.6)
                        cal["ops"][op.key] = {"seconds": sec, "kind": op.kind, "unit": op.unit, "roofline_s": None}
                total = sum(projection.origin_op_time(op, origin, cal, kind_eff)[0] for op in ops)
                cal["steps"].append({"workload": name, "precision": p, "batch_size": c.batch_size,
                                     "step_time_s": total * rng.uniform(1.05, 1.3) + 4 * 20e-6})
    return cal


def test_compare_projects_the_recurrent_workloads_from_a_calibration_that_timed_them(rng):
    from gpucmp.harness.compare import compare
    cal = timed_calibration(rng)
    df = compare(["A4000", "A5000"], ["rnn", "lstm", "gan"], ["float32", "float16"], measure=False,
                 include_local=False, calibration=cal)
    assert set(df["workload"]) == {"rnn", "lstm", "gan"} and (df["source"] == "projected").all()
    assert (df["step_time_s"] > 0).all() and df["step_time_s"].notna().all()
    notes = df["note"].fillna("") if "note" in df else []
    assert not any("rough" in n or "estimate" in n for n in notes), set(notes)
    a4, a5 = (df[df["gpu"] == g].set_index(["workload", "precision", "batch_size"])["step_time_s"]
              for g in ("RTX A4000", "RTX A5000"))
    assert (a5 < a4).all()                 # more SMs, bandwidth and clock: never slower
    # the recurrent ops themselves: scaled by the clock ratio of two cards with one architecture
    w, c = get("lstm"), Config(32, "batch 32")
    _, rows_a4, _ = _project_rows(w, "RTX A4000", c, cal)
    _, rows_a5, _ = _project_rows(w, "RTX A5000", c, cal)
    r4 = {r["op"]: r for r in rows_a4 if r["kind"] in recurrent.RNN_KINDS}
    r5 = {r["op"]: r for r in rows_a5 if r["kind"] in recurrent.RNN_KINDS}
    assert r4 and all(r4[k]["origin_time"].startswith("measured") for k in r4)
    for k in r4:
        assert 0.8 < r4[k]["target_s"] / r5[k]["target_s"] < 1.3


def _project_rows(w, gpu, c, cal):
    row = specs.spec(gpu)
    origin = projection.origin_model(cal)
    eff = projection.efficiencies(origin, cal)
    target = projection.target_model(row, origin, eff, None, float(row["boost_clock_mhz"]))
    return projection.project_ops(w.ops(c, "float32"), origin, target, cal)


def test_without_timed_recurrent_ops_the_row_says_it_uses_the_default_model(rng):
    cal = timed_calibration(rng, names=("lstm",), precisions=("float32",), recurrent_ops=False)
    row = projection.project(get("lstm"), "RTX A4000", "float32", Config(32, "batch 32"), cal)
    assert "default per-step model" in row["note"]
    timed = timed_calibration(rng, names=("lstm",), precisions=("float32",))
    assert not projection.project(get("lstm"), "RTX A4000", "float32", Config(32, "batch 32"), timed).get("note")


def test_a_timed_recurrent_op_projected_onto_its_own_card_keeps_its_time(rng):
    cal = timed_calibration(rng, names=("lstm",), precisions=("float32",))
    origin = projection.origin_model(cal)
    op = next(o for o in get("lstm").ops(Config(32, ""), "float32") if o.kind == "rnn_fwd")
    t, rows, _ = projection.project_ops([op], origin, replace_model(origin), cal)
    assert t == pytest.approx(cal["ops"][op.key]["seconds"], rel=1e-9)
    assert math.isfinite(rows[0]["target_s"]) and rows[0]["launches"] == op.launches


def replace_model(m):
    from dataclasses import replace
    return replace(m)


def test_the_resident_variant_takes_small_recurrences_in_one_launch(rng):
    """cuda.rnn=resident (U in one block's registers): SimpleRNN u <= 128, LSTM / GRU
    u <= 64, no recurrent dropout; one launch, one CTA per batch row, one barrier a step
    (two for reset_before); a calibration whose auto ran resident gives persistent to the
    ops it cannot hold."""
    for cell, top in (("simple", 128), ("lstm", 64), ("gru", 64), ("gru_reset_before", 64)):
        for which in ("fwd", "bwd"):
            assert costs.rnn_resident_eligible(cell, top, which), (cell, which)
            assert not costs.rnn_resident_eligible(cell, top + 1, which), (cell, which)
            assert not costs.rnn_resident_eligible(cell, 1 + int(rng.integers(top)), which, rmask=True)
    b, t = (int(x) for x in rng.integers(2, 300, 2))
    op = costs.recurrent("r", "fwd", "gru_reset_before", b, t, 32, variant="resident")
    assert op.launches == 1 and op.blocks == b and recurrent.floor_units(op) == 2
    big = costs.recurrent("r", "bwd", "lstm", b, t, 128, variant_source="assumed")
    small = costs.recurrent("r", "bwd", "simple", b, t, 128, variant_source="assumed")
    cal = {"ops": {}, "peaks": {"launch_s": 2e-6}, "recurrent": {"auto_variant": "resident"}}
    assert recurrent.origin_variant(big, cal) == "persistent"
    assert recurrent.origin_variant(small, cal) == "resident"
    p = recurrent.default_params("resident", 2e-6, 1980.0)
    assert p["source"] == "default" and 0 < p["floor_s"] < recurrent.default_params("persistent", 2e-6, 1980.0)["floor_s"]
