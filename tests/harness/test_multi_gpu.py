"""Multi-GPU data-parallel configurations ("2x A4000"): names, the all-reduce model checked by
hand from the spec rows, compare() rows (projected from one card at the per-GPU batch plus the
exposed all-reduce, N cards' power, price and batch), a measured row winning, and the CLI.
Nothing is benchmarked: every compare() here has measure=False, include_local=False."""
import math

import pandas as pd
import pytest

import gpucmp
from cli_run import gpucmp_cli
from gpucmp.harness import compare as compare_mod
from gpucmp.harness import multi_gpu as mg
from gpucmp.harness import projection, results, specs
from gpucmp.harness.workloads.base import Config as RunConfig


def compare(gpus, workload, batch, precision="mixed_float16", **kw):
    return compare_mod.compare(gpus, workloads=[workload], precisions=[precision], batch_sizes=[batch],
                               measure=False, include_local=False, **kw)


@pytest.fixture(scope="module")
def cal():
    return projection.load_calibration()


@pytest.mark.parametrize("name, count, gpu, link, label", [
    ("2x A4000", 2, "RTX A4000", None, "2x RTX A4000"),
    ("2 x RTX A5000", 2, "RTX A5000", None, "2x RTX A5000"),
    ("4xA5000", 4, "RTX A5000", None, "4x RTX A5000"),
    ("2X a5000 nvlink", 2, "RTX A5000", "nvlink", "2x RTX A5000 NVLink"),
    ("2x A5000 pcie", 2, "RTX A5000", "pcie", "2x RTX A5000"),          # PCIe is an A5000's default
    ("8x H100 SXM", 8, "H100 SXM", None, "8x H100 SXM"),
    ("2x H100 SXM PCIe", 2, "H100 SXM", "pcie", "2x H100 SXM PCIe"),
    ("2x H100 PCIe", 2, "H100 PCIe", None, "2x H100 PCIe"),            # the card's name, not a link
    ("1x A4000", 1, "RTX A4000", None, "RTX A4000"),
    ("A4000", 1, "RTX A4000", None, "RTX A4000"),
])
def test_parse_and_label_round_trip(name, count, gpu, link, label):
    cfg = mg.parse(name)
    assert (cfg.count, cfg.gpu, cfg.link) == (count, gpu, link)
    assert mg.label(cfg) == label
    again = mg.parse(label)
    assert mg.label(again) == label and (again.count, again.gpu) == (count, gpu)
    assert mg.interconnect(again) == mg.interconnect(cfg)


@pytest.mark.parametrize("name, needle", [
    ("9x A4000", "8 GPUs of one host at most"),
    ("0x A4000", "at least one GPU"),
    ("2x A4000 NVLink", "has no NVLink"),
    ("A5000 NVLink", "2 or more GPUs"),
    ("2x", "no GPU named"),
])
def test_bad_configurations_name_the_argument(name, needle):
    with pytest.raises(ValueError) as exc:
        mg.parse(name)
    assert needle in str(exc.value) and repr(name) in str(exc.value)


def test_an_unknown_gpu_is_specs_own_error():
    with pytest.raises(ValueError, match="unknown GPU 'A9999'"):
        mg.parse("2x A9999")
    with pytest.raises(TypeError):
        mg.parse(2)


def pcie_x16_per_direction(gen):
    """PCIe x16, one direction: 8/16/32 GT/s per lane (gen 3/4/5), 128b/130b encoding."""
    return {3: 8e9, 4: 16e9, 5: 32e9}[gen] * 16 * 128 / 130 / 8


def ring(n, nbytes, bus, latency):
    return 2 * (n - 1) / n * nbytes / bus + 2 * (n - 1) * latency


@pytest.mark.parametrize("name", ["2x A4000", "4x A4000", "8x RTX 3090"])
def test_allreduce_over_pcie_by_hand(name):
    cfg = mg.parse(name)
    row = specs.spec(cfg.gpu)
    nbytes = 100e6
    expected = ring(cfg.count, nbytes, pcie_x16_per_direction(int(row["pcie_gen"])) * 0.65, 10e-6)
    assert mg.allreduce_seconds(cfg, nbytes) == pytest.approx(expected, rel=1e-3)
    assert mg.interconnect(cfg).kind == "pcie"


@pytest.mark.parametrize("name", ["2x A5000 NVLink", "8x H100 SXM", "4x A100 SXM4 80GB"])
def test_allreduce_over_nvlink_by_hand(name):
    cfg = mg.parse(name)
    row = specs.spec(cfg.gpu)
    nbytes = 100e6
    per_direction = float(row["nvlink_gbs"]) * 1e9 / 2          # the spec column is bidirectional
    expected = ring(cfg.count, nbytes, per_direction * 0.80, 5e-6)
    assert mg.allreduce_seconds(cfg, nbytes) == pytest.approx(expected, rel=1e-12)
    assert mg.interconnect(cfg).kind == "nvlink"


def test_allreduce_of_nothing_or_on_one_gpu_takes_no_time():
    assert mg.allreduce_seconds("2x A4000", 0) == 0.0
    assert mg.allreduce_seconds("A4000", 1e9) == 0.0


def test_an_nvlink_bridge_beats_pcie_for_two_cards(cal):
    nbytes = 102e6
    assert mg.allreduce_seconds("2x A5000 NVLink", nbytes) < mg.allreduce_seconds("2x A5000", nbytes)
    c = RunConfig(64, "batch 64")
    bridged = mg.project("resnet50", "2x A5000 NVLink", "float16", c, cal)
    plain = mg.project("resnet50", "2x A5000", "float16", c, cal)
    assert bridged["comm_s"] < plain["comm_s"] and bridged["comm_exposed_s"] < plain["comm_exposed_s"]
    assert bridged["interconnect"] == "nvlink" and plain["interconnect"] == "pcie"
    assert bridged["throughput"] > plain["throughput"]


def test_four_bridged_cards_run_at_pcie_and_say_so(cal):
    four = mg.parse("4x A5000 NVLink")
    assert mg.interconnect(four).kind == "pcie"
    assert mg.allreduce_seconds(four, 1e8) == mg.allreduce_seconds("4x A5000", 1e8)
    row = mg.project("cnn", four, "float16", RunConfig(64, "batch 64"), cal)
    assert row["gpu"] == "4x RTX A5000 NVLink" and row["interconnect"] == "pcie"
    assert "NVLink bridges pair two cards" in row["note"] and "PCIe 4.0" in row["note"]


def test_kernel_workloads_run_independently_on_each_gpu(cal):
    from gpucmp.harness import workloads
    g = workloads.get("gemm:1024")
    cfg = g.configs("cuda")[0]
    two = mg.project(g, "2x A4000", "float16", cfg, cal)
    one = projection.project(g, "RTX A4000", "float16", cfg, cal)
    assert two["throughput"] == pytest.approx(2 * one["throughput"], rel=1e-12)
    assert "no communication" in two["note"] and two["scaling_efficiency"] == 1.0


@pytest.fixture(scope="module")
def resnet_rows():
    both = compare(["2x A4000", "A5000"], "resnet50", 64)
    single = compare(["A4000"], "resnet50", 32)
    return both.set_index("gpu"), single.iloc[0]


def test_compare_two_a4000s_with_one_a5000(resnet_rows, cal):
    rows, one = resnet_rows
    assert list(rows.index) == ["2x RTX A4000", "RTX A5000"]
    assert (rows["source"] == "projected").all()
    two = rows.loc["2x RTX A4000"]
    a4000 = specs.spec("A4000")
    assert two["batch_size"] == 64 and two["gpus"] == 2 and two["interconnect"] == "pcie"
    assert two["ratio"] == 1.0
    # communication only adds to each card's step at its share of the batch
    assert two["step_time_s"] >= one["step_time_s"]
    exposed = mg.project("resnet50", "2x A4000", "float16", RunConfig(64, "batch 64"), cal)["comm_exposed_s"]
    assert two["step_time_s"] - one["step_time_s"] == pytest.approx(exposed, rel=1e-9)
    eff = two["scaling_efficiency"]
    assert 0 < eff <= 1
    assert two["throughput"] == pytest.approx(2 * one["throughput"] * eff, rel=1e-9)
    assert two["power_w"] == 2 * a4000["tdp_w"] and two["price_usd"] == 2 * a4000["launch_price_usd"]
    assert two["memory_needed_bytes"] == one["memory_needed_bytes"]
    assert two["max_batch"] == 2 * one["max_batch"] and two["fits"]
    assert "gradients 102 MB" in two["note"] and "PCIe 4.0" in two["note"]
    assert "data parallel over 2 GPUs" in two["origin"]
    a5000 = rows.loc["RTX A5000"]
    assert a5000["gpus"] == 1 and a5000["interconnect"] == "" and math.isnan(a5000["scaling_efficiency"])
    assert a5000["ratio"] == pytest.approx(a5000["throughput"] / two["throughput"], rel=1e-12)


def test_single_gpu_rows_keep_their_names_and_columns():
    df = compare(["A4000", "RTX A4000", "1x A4000"], "cnn", 32)
    assert list(df["gpu"]) == ["RTX A4000"]
    shown = compare_mod.COLUMNS + compare_mod.MULTI_GPU_COLUMNS
    assert list(df.columns[:len(shown)]) == shown


def test_an_odd_global_batch_is_a_nan_row_with_a_note():
    df = compare(["2x A4000", "A5000"], "cnn", 63).set_index("gpu")
    two = df.loc["2x RTX A4000"]
    assert math.isnan(two["throughput"]) and math.isnan(two["ratio"])
    assert "must divide evenly" in two["note"]
    assert math.isnan(df.loc["RTX A5000", "ratio"])


def test_the_batch_check_counts_every_card():
    # float32 cnn: about 58,000 rows fit one A4000, twice that two of them
    df = compare(["2x A4000"], "cnn", 100_000, precision="float32")
    assert df["fits"].iloc[0] and df["max_batch"].iloc[0] >= 100_000
    with pytest.raises(ValueError, match="does not fit"):
        compare(["A4000"], "cnn", 100_000, precision="float32")


def test_a_measured_row_for_the_configuration_wins(cal):
    row = mg.project("cnn", "2x A4000", "float16", RunConfig(64, "batch 64"), cal)
    row.update(source="measured", throughput=12345.0, step_time_s=64 / 12345.0, device="cuda:0",
               device_name="2x NVIDIA RTX A4000", host="a4000-box", date="2026-01-01T00:00:00")
    measured = results.load(pd.DataFrame([row]))
    df = compare(["2x A4000", "A5000"], "cnn", 64, results=measured).set_index("gpu")
    assert not df["reference"].astype(bool).any()
    two = df.loc["2x RTX A4000"]
    assert two["source"] == "measured" and two["throughput"] == 12345.0
    assert math.isnan(two["scaling_efficiency"]) and two["gpus"] == 2
    assert df.loc["RTX A5000", "source"] == "projected"


def test_cli_compares_two_a4000s_with_an_a5000():
    r = gpucmp_cli("compare", "2x A4000", "A5000", "--workloads", "cnn", "--no-measure")
    assert r.returncode == 0, r.stderr
    assert "2x RTX A4000" in r.stdout and "RTX A5000" in r.stdout and "scaling" in r.stdout
    assert "data parallel: 2 x batch 16" in r.stdout


@pytest.mark.parametrize("args, needle", [
    (["compare", "9x A4000", "A5000"], "8 GPUs of one host at most"),
    (["compare", "2x A4000 NVLink", "A5000"], "has no NVLink"),
    (["specs", "2x A4000"], "multi-GPU configuration"),
])
def test_cli_bad_configurations_exit_2_with_one_line(args, needle):
    r = gpucmp_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle in lines[0]
