"""The projection on known inputs: compute-bound ops scale by peak, bandwidth-bound ops by
bandwidth, waves quantize on SMs, launch latency and host overhead are carried, a card
projected onto itself gives back what was measured; and the shipped calibration is real."""
import math

import numpy as np
import pytest

from gpucmp.harness import costs, projection, specs
from gpucmp.harness.workloads import Config, get

ORIGIN = "H200 SXM"


def synthetic_calibration(rng, ops=(), steps=()):
    """A calibration with random (not round) achievable peaks, built here for the test."""
    f = rng.uniform(0.6, 0.9, 4)
    row = specs.spec(ORIGIN)
    return {"schema": projection.CALIBRATION_SCHEMA, "gpu": ORIGIN, "sms": int(row["sms"]),
            "provenance": {"date": "test"},
            "peaks": {"gemm_flops": {"float32": f[0] * row["fp32_tflops"] * 1e12,
                                     "tf32": f[1] * row["tf32_tflops"] * 1e12,
                                     "float16": f[2] * row["fp16_tflops"] * 1e12,
                                     "bfloat16": f[2] * row["bf16_tflops"] * 1e12},
                      "copy_bytes_per_s": f[3] * row["bandwidth_gbs"] * 1e9, "launch_s": rng.uniform(1e-6, 4e-6)},
            "ops": {op.key: {"seconds": t, "kind": op.kind, "unit": op.unit, "roofline_s": None} for op, t in ops},
            "steps": list(steps)}


@pytest.fixture
def rng():
    return np.random.default_rng()


def _models(cal, gpu):
    origin = projection.origin_model(cal)
    eff = projection.efficiencies(origin, cal)
    return origin, projection.target_model(gpu, origin, eff)


def test_compute_bound_op_scales_by_the_tensor_peak(rng):
    n = int(rng.choice([8192, 12288, 16384]))
    op = costs.gemm("g", n, n, n, "float16", tf32=False)
    t_meas = rng.uniform(2e-3, 9e-3)
    cal = synthetic_calibration(rng, [(op, t_meas)])
    origin, target = _models(cal, "RTX A5000")
    t, rows, _ = projection.project_ops([op], origin, target, cal)
    expected_ratio = (specs.spec(ORIGIN)["fp16_tflops"] / specs.spec("RTX A5000")["fp16_tflops"]
                      * target.wave(op) / origin.wave(op))
    assert rows[0]["origin_time"] == "measured"
    got = (t - target.launch_s) / (t_meas - origin.launch_s)
    assert got == pytest.approx(expected_ratio, rel=1e-9)
    # the datasheet ratio alone is 8.9x; waves of 64 SMs vs 132 change it by a few percent only
    assert 7.0 < got < 11.0


def test_bandwidth_bound_op_scales_by_bandwidth(rng):
    nbytes = int(rng.integers(256, 2048)) << 20
    op = costs.copy("copy", nbytes)
    t_meas = rng.uniform(1e-4, 1e-3)
    cal = synthetic_calibration(rng, [(op, t_meas)])
    origin, target = _models(cal, "RTX A4000")
    t, _, _ = projection.project_ops([op], origin, target, cal)
    ratio = specs.spec(ORIGIN)["bandwidth_gbs"] / specs.spec("RTX A4000")["bandwidth_gbs"]
    assert (t - target.launch_s) / (t_meas - origin.launch_s) == pytest.approx(ratio, rel=1e-9)


def test_wave_quantization_on_fewer_sms(rng):
    sms = int(specs.spec(ORIGIN)["sms"])
    op = costs.gemm("g", 128 * sms, 1024, 16384, "float16", tf32=False)   # 8 full waves on the full card
    assert op.blocks == 8 * sms
    cal = synthetic_calibration(rng, [(op, 1e-3)])
    origin = projection.origin_model(cal)
    eff = projection.efficiencies(origin, cal)
    n = sms // 2 + 1
    part = projection.target_model(ORIGIN, origin, eff, sms=n)             # 8 sms / n = 15.8 waves -> 16
    assert origin.wave(op) == 1.0
    q = math.ceil(8 * sms / n) / (8 * sms / n)
    assert part.wave(op) == pytest.approx(q) and q > 1.01
    t, _, _ = projection.project_ops([op], origin, part, cal)
    assert (t - part.launch_s) / (1e-3 - origin.launch_s) == pytest.approx(sms / n * q, rel=1e-9)


def test_recorded_grids_replace_the_tile_count(rng):
    """A split-K op (fewer output tiles than SMs, grid sized to the SMs it sees) slows down
    as the SMs go, as its recorded grids say; the tile count alone says 1 wave either way."""
    sms = int(specs.spec(ORIGIN)["sms"])
    op = costs.gemm("g", 1024, 1024, 1 << 16, "float16", tf32=False)     # 64 output tiles, compute bound
    assert op.blocks == 64
    t_meas = rng.uniform(1e-4, 5e-4)
    cal = synthetic_calibration(rng, [(op, t_meas)])
    origin = projection.origin_model(cal)
    eff = projection.efficiencies(origin, cal)
    n = int(rng.choice([16, 32, 64]))
    part = projection.target_model(ORIGIN, origin, eff, sms=n)
    t_tiles, _, _ = projection.project_ops([op], origin, part, cal)
    by_tiles = sms / n * part.wave(op) / origin.wave(op)                  # = 64 / n: the tiles fill n SMs
    assert (t_tiles - part.launch_s) / (t_meas - origin.launch_s) == pytest.approx(by_tiles, rel=1e-9)
    split = int(rng.integers(2, 5))
    cal["ops"][op.key]["grids"] = {str(k): [split * k, 128, 2] for k in (n, sms)}
    t, rows, _ = projection.project_ops([op], origin, part, cal)
    assert rows[0]["origin_blocks"] == split * sms and rows[0]["target_blocks"] == split * n
    assert (t - part.launch_s) / (t_meas - origin.launch_s) == pytest.approx(sms / n, rel=1e-9)
    assert sms / n > by_tiles
    # an SM count without a record takes the nearest recorded one (log scale); no record: tiles
    assert projection.blocks_at(cal["ops"][op.key], n + 1, 4) == split * n
    assert projection.blocks_at({"seconds": 1.0}, n, 7) == 7


def test_per_block_model_from_two_grids_on_the_origin(rng):
    """An op timed with the grid for the origin's SMs and for 8 SMs (both on the whole card)
    gives its per-block latency and work; fewer SMs then cost waves x (L + T / blocks)."""
    sms = int(specs.spec(ORIGIN)["sms"])
    op = costs.gemm("g", 1024, 1024, 4096, "float16", tf32=False)       # compute bound
    cal = synthetic_calibration(rng, [(op, 1.0)])
    origin = projection.origin_model(cal)
    launch = origin.launch_s
    # per-block latency (s) and work (SM-seconds; more than the roofline's, as real kernels need)
    lat, work = rng.uniform(2e-6, 8e-6), projection._per_sm_work(origin, op) * rng.uniform(1.5, 3.0)
    per_sm = rng.integers(1, 4)

    def time(blocks, on_sms):
        return launch + math.ceil(blocks / on_sms) * (lat + work / blocks)
    grids = {str(k): [int(per_sm * k), 128, 2] for k in (8, 16, 32, 64, sms)}
    cal["ops"][op.key].update(grids=grids, seconds=time(per_sm * sms, sms), small_sms=8,
                              seconds_small=time(per_sm * 8, sms))
    got_lat, got_work, b_o = projection.block_model(cal["ops"][op.key], sms, launch)
    assert got_lat == pytest.approx(lat, rel=1e-6) and got_work == pytest.approx(work, rel=1e-6)
    eff = projection.efficiencies(origin, cal)
    n = int(rng.choice([16, 32, 64]))
    part = projection.target_model(ORIGIN, origin, eff, sms=n)
    t, rows, _ = projection.project_ops([op], origin, part, cal)
    want = part.launch_s + math.ceil(per_sm * n / n) * (lat + work / (per_sm * n))
    assert t == pytest.approx(want, rel=1e-6)
    assert rows[0]["origin_time"].endswith("per-block model")
    # a grid that does not follow the SMs, or inconsistent times, leave the roofline scaling
    flat = dict(cal["ops"][op.key], grids={str(k): [64, 128, 2] for k in (8, sms)})
    assert projection.block_model(flat, sms, launch) is None
    bad = dict(cal["ops"][op.key], seconds_small=cal["ops"][op.key]["seconds"] / 10)
    assert projection.block_model(bad, sms, launch) is None


def test_launch_latency_and_host_overhead_are_carried(rng):
    tiny = costs.elementwise("e", "act", 1000, 1, 1)
    cal = synthetic_calibration(rng)
    origin, target = _models(cal, "RTX A4000")
    step = rng.uniform(1e-4, 5e-4)
    t, rows, overhead = projection.project_ops([tiny] * 5, origin, target, cal, step_time_s=step)
    assert overhead == pytest.approx(step - sum(r["origin_s"] for r in rows))
    assert t >= overhead + 5 * target.launch_s
    # when the ops add up to more than the step they overlap: scaled down, no overhead
    t2, rows2, overhead2 = projection.project_ops([tiny] * 5, origin, target, cal, step_time_s=1e-7)
    assert overhead2 == 0.0 and sum(r["origin_s"] for r in rows2) == pytest.approx(1e-7)


def test_a_card_projected_onto_itself_gives_the_measured_step(rng):
    w = get("cnn")
    c = Config(64, "batch 64")
    step = rng.uniform(2e-4, 6e-4)
    cal = synthetic_calibration(rng, steps=[{"workload": "cnn", "precision": "float32", "batch_size": 64,
                                             "step_time_s": step}])
    row = projection.project(w, ORIGIN, "float32", c, cal)
    assert row["source"] == "projected"
    assert row["step_time_s"] == pytest.approx(step, rel=1e-9)
    assert row["throughput"] == pytest.approx(64 / step, rel=1e-9)


def test_missing_units_fall_back_or_are_unsupported(rng):
    cal = synthetic_calibration(rng)
    w = get("gemm")
    c = w.configs("cuda")[0]
    v100 = specs.resolve("V100 SXM2 32GB")
    assert math.isnan(projection.project(w, v100, "bfloat16", c, cal)["throughput"])
    # a float32 model on a card without TF32 runs on its FP32 units (as frameworks do)
    cnn = projection.project(get("cnn"), v100, "float32", Config(32, "batch 32"), cal)
    assert cnn["throughput"] > 0


def test_the_shipped_calibration_was_measured_on_a_gpu():
    cal = projection.load_calibration()
    prov = cal["provenance"]
    assert specs.resolve(cal["gpu"]) == cal["gpu"]
    assert "H200" in prov["device"] and prov["date"].startswith("2026")
    assert cal["peaks"]["gemm_flops"]["float16"] > 1e14            # a GPU, not a CPU
    assert cal["ops"] and cal["steps"]
    for rec in cal["ops"].values():
        assert rec["seconds"] > 0


def test_corrupt_calibration_is_refused(tmp_path):
    p = tmp_path / "cal.json"
    p.write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        projection.load_calibration(str(p))
    p.write_text('{"schema": "something-else"}')
    with pytest.raises(ValueError, match="schema"):
        projection.load_calibration(str(p))


@pytest.mark.parametrize("gpu", ["RTX A4000", "RTX A5000", "H100 SXM"])
def test_a_batch_between_calibrated_ones_projects_between_them(gpu):
    """cnn is calibrated at batch 32 and 128; 64 borrows its ops' efficiencies and its step's
    attribution from those, so its step time lands between theirs."""
    cal = projection.load_calibration()
    w = get("cnn")
    assert projection.measured_step(cal, "cnn", "float32", 64) is None
    t = {b: projection.project(w, gpu, "float32", Config(b, ""), cal)["step_time_s"] for b in (32, 64, 128)}
    assert t[32] < t[64] < t[128]


@pytest.mark.parametrize("precision", ["float32", "float16"])
def test_a_measured_step_whose_ops_were_not_timed_uses_their_timed_batch(precision):
    """The shipped calibration measured ResNet-50's step at batch 64 and 256 but timed the
    ops of batch 64 only (its ops budget): batch 256's ops take the efficiency the same op
    reached at 64, so a bigger batch is not projected slower per image than a smaller one."""
    cal = projection.load_calibration()
    w = get("resnet50")
    steps = {int(s["batch_size"]) for s in cal["steps"] if s["workload"] == "resnet50" and
             s["precision"] == precision}
    assert {64, 256} <= steps
    rows = {b: projection.project(w, "RTX A4000", precision, Config(b, f"batch {b}"), cal) for b in (64, 256)}
    assert rows[256]["throughput"] >= rows[64]["throughput"], rows


def test_copy_curve_limits_and_fit(rng):
    """The copy model: all SMs give the card's bandwidth, an infinite exponent is the plain
    min of the per-SM and memory rates, the rate rises with the SMs, and fit_copy_curve
    recovers the parameters of points drawn from the model."""
    full_sms, full_bw = 132, rng.uniform(3e12, 5e12)
    r, p = rng.uniform(60e9, 90e9), rng.uniform(2.0, 4.0)
    assert projection.copy_bandwidth(full_sms, r, p, full_sms, full_bw) == full_bw
    assert projection.copy_bandwidth(16, r, math.inf, full_sms, full_bw) == min(full_bw, 16 * r)
    rates = [projection.copy_bandwidth(n, r, p, full_sms, full_bw) for n in (8, 16, 32, 64, 96, 131)]
    assert all(a < b for a, b in zip(rates, rates[1:])) and rates[-1] < full_bw
    assert all(x <= n * r for x, n in zip(rates, (8, 16, 32, 64, 96, 131)))
    curve = {str(n): projection.copy_bandwidth(n, r, p, full_sms, full_bw) for n in (8, 24, 48, 96)}
    r_fit, p_fit = projection.fit_copy_curve(curve, full_sms, full_bw)
    assert r_fit == pytest.approx(r, rel=0.01) and p_fit == pytest.approx(p, abs=0.06)
    with pytest.raises(ValueError, match="no point"):
        projection.fit_copy_curve({"132": full_bw}, full_sms, full_bw)


def test_a_partition_follows_the_calibrated_copy_curve(rng):
    """A memory-bound op projected onto the origin confined to N SMs runs at the calibrated
    curve's rate there; another card with all its SMs keeps its own full bandwidth."""
    cal = synthetic_calibration(rng)
    cal["peaks"].update(per_sm_copy_bytes_per_s=rng.uniform(60e9, 90e9), copy_exponent=rng.uniform(2, 4))
    origin = projection.origin_model(cal)
    eff = projection.efficiencies(origin, cal)
    part = projection.target_model(ORIGIN, origin, eff, sms=32)
    expect = projection.copy_bandwidth(32, cal["peaks"]["per_sm_copy_bytes_per_s"], cal["peaks"]["copy_exponent"],
                                       origin.sms, cal["peaks"]["copy_bytes_per_s"])
    assert part.effective_bandwidth() == pytest.approx(expect, rel=1e-12)
    a4000 = projection.target_model("RTX A4000", origin, eff)
    assert a4000.effective_bandwidth() == pytest.approx(a4000.bandwidth, rel=1e-12)


def test_an_op_timed_in_the_step_uses_that_time(rng):
    """An op that no bench function times takes its time from the calibration's step profile
    (step_profile.lookup) instead of the copy-efficiency estimate."""
    from gpucmp.harness import step_profile
    op = costs.elementwise("7:batchnorm_fwd", "batchnorm_fwd", int(rng.integers(10 ** 6, 10 ** 7)), 2, 1)
    cal = synthetic_calibration(rng)
    origin, target = _models(cal, "RTX A4000")
    sec = rng.uniform(5e-5, 2e-4)
    t_est, rows_est, _ = projection.project_ops([op], origin, target, cal)
    t, rows, _ = projection.project_ops([op], origin, target, cal, profile={step_profile.signature(op): sec})
    assert rows_est[0]["origin_time"] == "estimated"
    assert rows[0]["origin_time"] == "profiled in the step" and rows[0]["origin_s"] == sec
    # the device part scales by the bandwidth ratio of the two cards
    dev = (sec - origin.launch_s) * origin.effective_bandwidth() / target.effective_bandwidth()
    assert t == pytest.approx(target.launch_s + dev, rel=1e-9)


def test_surplus_beyond_the_host_overhead_is_device_time(rng):
    """Of a step's surplus over its ops, only the origin's host overhead (host_s) stays
    unscaled; the rest is device time the ops missed, so their times grow to fill it."""
    op = costs.elementwise("e", "act", int(rng.integers(10 ** 6, 10 ** 7)), 1, 1)
    cal = synthetic_calibration(rng)
    origin, target = _models(cal, "RTX A4000")
    t_op = projection.origin_op_time(op, origin, cal, projection.kind_efficiency(origin, cal))[0]
    host = float(rng.uniform(0.1, 0.5)) * t_op
    step = t_op + host + float(rng.uniform(0.2, 1.0)) * t_op
    t, rows, overhead = projection.project_ops([op], origin, target, cal, step_time_s=step, host_s=host)
    assert overhead == pytest.approx(host)
    assert rows[0]["origin_s"] == pytest.approx(step - host)
    t_all, _, overhead_all = projection.project_ops([op], origin, target, cal, step_time_s=step)
    assert overhead_all == pytest.approx(step - t_op)
    assert t > t_all        # the device part scales to the slower card, the host part does not


def test_host_overhead_is_the_smallest_model_surplus():
    cal = projection.load_calibration()
    origin = projection.origin_model(cal)
    host = projection.host_overhead(cal, origin)
    assert host is not None and 0.0 <= host < min(s["step_time_s"] for s in cal["steps"])


def _partition(rng, sms, step):
    """A synthetic calibration of the origin confined to `sms` SMs, with one measured cnn step."""
    sub = synthetic_calibration(rng, steps=[{"workload": "cnn", "precision": "float32", "batch_size": 64,
                                             "step_time_s": step}])
    sub["sms"] = sms
    sub["provenance"]["sm_limit"] = sms
    for k in ("float32", "tf32", "float16", "bfloat16"):
        sub["peaks"]["gemm_flops"][k] *= sms / specs.spec(ORIGIN)["sms"]
    return sub


def test_partition_weights_bracket_the_target_in_log_sms(rng):
    cal = synthetic_calibration(rng)
    counts = sorted(int(n) for n in rng.choice(np.arange(4, 120), 4, replace=False))
    cal["partitions"] = {str(n): {"sms": n, "name": n} for n in counts}
    full = cal["sms"]
    for n in rng.integers(counts[0] + 1, full, 20):
        n = int(n)
        parts = projection.partition_weights(cal, n)
        if str(n) in cal["partitions"]:
            assert parts == [(1.0, cal["partitions"][str(n)])]
            continue
        (w_lo, lo), (w_hi, hi) = parts
        a = lo["sms"]
        b = hi["sms"] if hi is not cal else full
        assert a < n < b and not any(a < c < b for c in counts)
        assert w_lo + w_hi == pytest.approx(1.0)
        assert w_hi == pytest.approx(math.log(n / a) / math.log(b / a))
    assert projection.partition_weights(cal, full) == [(1.0, cal)]
    assert projection.partition_weights(cal, counts[0] - 1) == [(1.0, cal["partitions"][str(counts[0])])]
    assert projection.partition_weights(synthetic_calibration(rng), 16)[0][1]["sms"] == full


def test_a_target_between_partitions_blends_their_projections(rng):
    """The origin confined to a partition's SM count gives back that partition's measured
    step; between two partitions the step is their projections' log-SM blend."""
    w, c = get("cnn"), Config(64, "batch 64")
    cal = synthetic_calibration(rng, steps=[{"workload": "cnn", "precision": "float32", "batch_size": 64,
                                             "step_time_s": rng.uniform(2e-4, 4e-4)}])
    steps = {24: rng.uniform(8e-4, 1.2e-3), 48: rng.uniform(5e-4, 7e-4)}
    cal["partitions"] = {str(n): _partition(rng, n, t) for n, t in steps.items()}
    for n, t in steps.items():
        row = projection.project(w, ORIGIN, "float32", c, cal, sms=n)
        assert row["step_time_s"] == pytest.approx(t, rel=1e-9)
    n = int(rng.integers(25, 48))
    row = projection.project(w, ORIGIN, "float32", c, cal, sms=n)
    single = {m: projection._project_from(w, "float32", specs.spec(ORIGIN), c, cal, cal["partitions"][str(m)],
                                          None, n, True)["step_time_s"] for m in steps}
    wt = math.log(n / 24) / math.log(48 / 24)
    assert row["step_time_s"] == pytest.approx(single[24] ** (1 - wt) * single[48] ** wt, rel=1e-9)
    assert min(single.values()) <= row["step_time_s"] <= max(single.values())
    assert "24-SM and 48-SM" in row["origin"]
    # another card with 48 SMs is projected from the 48-SM partition alone
    a4000 = projection.project(w, "RTX A4000", "float32", c, cal)
    assert "48-SM" in a4000["origin"] and a4000["step_time_s"] > 0


def test_attach_partitions_checks_what_it_files(rng, tmp_path):
    from gpucmp.harness import calibration
    cal = synthetic_calibration(rng)
    sub = _partition(rng, 24, 1e-3)
    out = calibration.attach_partitions(cal, {24: sub})
    assert list(out["partitions"]) == ["24"] and "partitions" not in cal
    other = dict(sub, gpu="RTX A4000")
    with pytest.raises(ValueError, match="not a H200 SXM calibration"):
        calibration.attach_partitions(cal, {24: other})
    with pytest.raises(ValueError, match="measured on 24 SMs"):
        calibration.attach_partitions(cal, {32: sub})
    unconfined = dict(sub, provenance={"date": "test"})
    with pytest.raises(ValueError, match="sm_limit None"):
        calibration.attach_partitions(cal, {24: unconfined})


def test_an_uncalibrated_model_carries_host_work_per_call_and_says_it_is_rough():
    """A model step the calibration never measured (the GAN: four plan calls per iteration)
    keeps the origin's host work for each call, and its row says its ops were estimated;
    a calibrated workload's row has no such note."""
    cal = projection.load_calibration()
    # the GAN as never measured (the shipped calibration may measure it: take it out)
    keys = {o.key for o in get("gan").ops(Config(128, ""), "float32") if o.key} - {
        o.key for w in ("cnn", "resnet50") for c in get(w).configs("cuda") for o in get(w).ops(c, "float32")}
    cal = dict(cal, steps=[s for s in cal["steps"] if s["workload"] != "gan"],
               profiles=[p for p in cal.get("profiles", []) if p["workload"] != "gan"],
               ops={k: v for k, v in cal["ops"].items() if k not in keys}, partitions={})
    host = projection.host_overhead(cal, projection.origin_model(cal))
    gan = projection.project(get("gan"), "H200 SXM", "float32", Config(128, "batch 128"), cal)
    assert gan["host_overhead_s"] == pytest.approx(4 * host, rel=1e-9)
    assert "never timed" in gan["note"]
    cnn = projection.project(get("cnn"), "RTX A4000", "float32", Config(32, "batch 32"), cal)
    assert not cnn.get("note")


def test_the_shipped_calibration_measures_every_default_model_workload():
    """DEFAULT's rows must not be rough figures: every default model workload has measured
    steps in the shipped calibration, on the whole card and on each of its partitions."""
    from gpucmp.harness import workloads
    cal = projection.load_calibration()
    models = [n for n in workloads.DEFAULT if get(n).kind == "model" and get(n).measurable]
    for where, c in [("the whole card", cal)] + [(f"the {n}-SM partition", p)
                                                 for n, p in (cal.get("partitions") or {}).items()]:
        have = {s["workload"] for s in c["steps"]}
        missing = [n for n in models if n not in have]
        assert not missing, f"{where} of the shipped calibration does not measure {missing}"
