"""Tests of the GPU spec database (gpucmp/harness/data/gpus.csv) and its loader.

The module is loaded from its file path, so these tests need neither the compiled core
(`import gpucmp` loads it) nor an installed package. The per-SM Tensor Core rates each
row is checked against are written out below from the whitepapers, independently of the
CSV's columns, so a wrong clock, SM count or halving in a row makes a test fail.
"""
import importlib
import importlib.util
import math
from pathlib import Path

import pytest

SPECS_PATH = Path(__file__).resolve().parents[2] / "gpucmp" / "harness" / "specs.py"
_module_spec = importlib.util.spec_from_file_location("gpucmp_harness_specs", SPECS_PATH)
specs = importlib.util.module_from_spec(_module_spec)
_module_spec.loader.exec_module(specs)

REQUIRED_GPUS = [
    "RTX A4000", "RTX A5000", "V100 PCIe 16GB", "V100 PCIe 32GB", "V100 SXM2 16GB",
    "V100 SXM2 32GB", "RTX 2080 Ti", "A100 PCIe 40GB", "A100 PCIe 80GB", "A100 SXM4 40GB",
    "A100 SXM4 80GB", "Quadro RTX 6000", "Quadro RTX 8000", "RTX 3080", "RTX 3090",
    "RTX A4500", "RTX A5500", "RTX A6000", "A40", "L4", "L40S", "RTX 4090", "H100 PCIe",
    "H100 SXM", "H200 SXM",
]
TENSOR_COLUMNS = {"tf32": "tf32_tflops", "fp16": "fp16_tflops", "bf16": "bf16_tflops",
                  "int8": "int8_tops"}
# Dense FLOP/clk/SM, FP32 accumulation, as the whitepapers give them (NaN: no unit).
NAN = math.nan
WHITEPAPER_PER_SM = {
    ("7.0", "datacenter"): {"tf32": NAN, "fp16": 1024, "bf16": NAN, "int8": NAN},
    ("7.5", "workstation"): {"tf32": NAN, "fp16": 1024, "bf16": NAN, "int8": 2048},
    ("7.5", "geforce"): {"tf32": NAN, "fp16": 512, "bf16": NAN, "int8": 2048},
    ("8.0", "datacenter"): {"tf32": 1024, "fp16": 2048, "bf16": 2048, "int8": 4096},
    ("8.6", "workstation"): {"tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048},
    ("8.6", "datacenter"): {"tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048},
    ("8.6", "geforce"): {"tf32": 256, "fp16": 512, "bf16": 512, "int8": 2048},
    ("8.9", "datacenter"): {"tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048},
    ("8.9", "geforce"): {"tf32": 256, "fp16": 512, "bf16": 512, "int8": 2048},
    ("9.0", "datacenter"): {"tf32": 2048, "fp16": 4096, "bf16": 4096, "int8": 8192},
}
TENSOR_CORES_PER_SM = {"7.0": 8, "7.5": 8, "8.0": 4, "8.6": 4, "8.9": 4, "9.0": 4}
CUDA_CORES_PER_SM = {"7.0": 64, "7.5": 64, "8.0": 64, "8.6": 128, "8.9": 128, "9.0": 128}


@pytest.fixture(scope="module")
def table():
    return specs.load()


def rows(table):
    return [row for _, row in table.iterrows()]


def same_or_both_nan(a, b, rel):
    if math.isnan(b):
        return math.isnan(a)
    return not math.isnan(a) and a == pytest.approx(b, rel=rel)


def test_columns_in_order(table):
    assert tuple(table.columns[:len(specs.REQUIRED_COLUMNS)]) == specs.REQUIRED_COLUMNS
    assert set(specs.EXTRA_COLUMNS) <= set(table.columns)


def test_every_required_gpu_present(table):
    assert set(REQUIRED_GPUS) <= set(table["name"])


def test_names_unique_and_every_alias_resolves_to_its_own_row(table):
    assert table["name"].is_unique
    for row in rows(table):
        assert specs.resolve(row["name"]) == row["name"]
        for alias in filter(None, row["aliases"].split(";")):
            assert specs.resolve(alias) == row["name"], alias


def test_every_row_has_source_market_and_sane_price(table):
    for row in rows(table):
        assert isinstance(row["source"], str) and len(row["source"]) > 40, row["name"]
        assert row["market"] in specs.MARKETS, row["name"]
        price = row["launch_price_usd"]
        assert math.isnan(price) or price > 0, row["name"]


def test_fp32_is_two_flops_per_cuda_core_per_boost_clock(table):
    for row in rows(table):
        expected = 2 * row["cuda_cores"] * row["boost_clock_mhz"] / 1e6
        assert row["fp32_tflops"] == pytest.approx(expected, rel=0.01), row["name"]


def test_whitepaper_per_sm_table_matches_module_table():
    for (cc, market), rates in WHITEPAPER_PER_SM.items():
        for precision, rate in rates.items():
            assert same_or_both_nan(specs.per_sm_dense(cc, precision, market), rate, 1e-9), \
                (cc, market, precision)


def test_tensor_columns_are_sms_times_per_sm_rate_times_tensor_clock(table):
    for row in rows(table):
        rates = WHITEPAPER_PER_SM[(row["compute_capability"], row["market"])]
        for precision, column in TENSOR_COLUMNS.items():
            expected = row["sms"] * rates[precision] * row["tensor_clock_mhz"] / 1e6
            assert same_or_both_nan(row[column], expected, 0.015), (row["name"], column)


def test_tensor_clock_equals_boost_except_hopper(table):
    for row in rows(table):
        if row["architecture"] == "Hopper":
            assert row["tensor_clock_mhz"] < row["boost_clock_mhz"], row["name"]
        else:
            assert row["tensor_clock_mhz"] == row["boost_clock_mhz"], row["name"]


def test_core_counts_follow_sm_count(table):
    for row in rows(table):
        cc = row["compute_capability"]
        assert row["tensor_cores"] == row["sms"] * TENSOR_CORES_PER_SM[cc], row["name"]
        assert row["cuda_cores"] == row["sms"] * CUDA_CORES_PER_SM[cc], row["name"]


def test_bandwidth_is_bus_width_times_data_rate(table):
    for row in rows(table):
        expected = row["memory_bus_bits"] * row["memory_gbps"] / 8
        assert row["bandwidth_gbs"] == pytest.approx(expected, rel=0.01), row["name"]


def test_a4000_and_a5000_anchors():
    a4000, a5000 = specs.spec("RTX A4000"), specs.spec("RTX A5000")
    assert a4000["fp16_tflops"] == pytest.approx(76.7, abs=0.05)
    assert a5000["fp16_tflops"] == pytest.approx(111.1, abs=0.05)
    assert (a4000["bandwidth_gbs"], a4000["memory_gb"], a4000["tdp_w"]) == (448, 16, 140)
    assert (a5000["bandwidth_gbs"], a5000["memory_gb"], a5000["tdp_w"]) == (768, 24, 230)
    assert a4000["nvlink_gbs"] == 0 and a5000["nvlink_gbs"] == 112.5


def test_other_anchors():
    h200 = specs.spec("H200 SXM")
    assert (h200["memory_gb"], h200["bandwidth_gbs"], h200["tdp_w"], h200["sms"]) == (141, 4800, 700, 132)
    assert h200["bf16_tflops"] == pytest.approx(989.4, abs=0.05)
    assert h200["l2_mb"] == 60
    assert specs.peak_tflops("RTX 3090", "mixed_float16") == pytest.approx(71, rel=0.01)
    assert specs.peak_tflops("RTX 4090", "float16") == pytest.approx(165.2, abs=0.05)
    assert specs.peak_tflops("A100 SXM4 80GB", "bfloat16") == pytest.approx(312, rel=0.005)


def test_geforce_halves_fp16_but_not_int8():
    per_clock = {n: specs.spec(n) for n in ("RTX 3090", "RTX A6000")}
    def per_sm_clock(row, column):
        return row[column] / (row["sms"] * row["tensor_clock_mhz"])
    geforce, pro = per_clock["RTX 3090"], per_clock["RTX A6000"]
    assert per_sm_clock(geforce, "fp16_tflops") == pytest.approx(per_sm_clock(pro, "fp16_tflops") / 2, rel=0.01)
    assert per_sm_clock(geforce, "int8_tops") == pytest.approx(per_sm_clock(pro, "int8_tops"), rel=0.01)


@pytest.mark.parametrize("name, precision", [
    ("V100 SXM2 32GB", "tf32"), ("V100 SXM2 32GB", "bfloat16"), ("V100 PCIe 16GB", "int8"),
    ("RTX 2080 Ti", "tf32"), ("Quadro RTX 6000", "mixed_bfloat16"),
])
def test_missing_units_are_nan(name, precision):
    assert math.isnan(specs.peak_tflops(name, precision))


@pytest.mark.parametrize("typed, canonical", [
    ("A4000", "RTX A4000"), ("rtx a5000", "RTX A5000"), ("3090", "RTX 3090"),
    ("NVIDIA GeForce RTX 3090", "RTX 3090"), ("nvidia_rtx-a4000", "RTX A4000"),
    ("RTXA6000", "RTX A6000"), ("Quadro RTX 6000", "Quadro RTX 6000"), ("rtx 8000", "Quadro RTX 8000"),
    ("l40s", "L40S"), ("h100 sxm5", "H100 SXM"), ("H200", "H200 SXM"),
    ("a100 sxm4 80gb", "A100 SXM4 80GB"), ("Tesla V100-SXM2-32GB", "V100 SXM2 32GB"),
    ("2080ti", "RTX 2080 Ti"),
])
def test_resolve(typed, canonical):
    assert specs.resolve(typed) == canonical


@pytest.mark.parametrize("short, variants", [
    ("h100", ["H100 PCIe", "H100 SXM"]),
    ("a100", ["A100 PCIe 40GB", "A100 PCIe 80GB", "A100 SXM4 40GB", "A100 SXM4 80GB"]),
    ("v100", ["V100 PCIe 16GB", "V100 SXM2 32GB"]),
    ("A100 80GB", ["A100 PCIe 80GB", "A100 SXM4 80GB"]),
])
def test_ambiguous_name_lists_variants(short, variants):
    with pytest.raises(ValueError, match="ambiguous") as caught:
        specs.resolve(short)
    for variant in variants:
        assert variant in str(caught.value)


@pytest.mark.parametrize("typo, suggestion", [
    ("RTX A4001", "RTX A4000"), ("L40", "L40S"), ("2080", "RTX 2080 Ti"), ("3080 Ti", "RTX 3080"),
])
def test_unknown_name_lists_close_matches(typo, suggestion):
    with pytest.raises(ValueError, match="unknown GPU") as caught:
        specs.resolve(typo)
    assert suggestion in str(caught.value)


@pytest.mark.parametrize("not_a_name", [None, 4000, ["RTX A4000"]])
def test_resolve_rejects_non_strings(not_a_name):
    with pytest.raises(TypeError):
        specs.resolve(not_a_name)


def test_specs_keeps_order_and_resolves():
    assert list(specs.specs(["a5000", "A4000", "h200"])["name"]) == ["RTX A5000", "RTX A4000", "H200 SXM"]
    assert len(specs.specs()) == len(specs.load())
    with pytest.raises(ValueError):
        specs.specs(["a4000", "no such card"])


def test_load_returns_a_copy():
    first = specs.load()
    first.loc[0, "fp32_tflops"] = -1.0
    assert specs.load().loc[0, "fp32_tflops"] > 0


def test_loads_through_importlib_resources_inside_a_package(tmp_path, monkeypatch):
    package = tmp_path / "specs_pkg"
    (package / "data").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "specs.py").write_text(SPECS_PATH.read_text())
    (package / "data" / "gpus.csv").write_bytes((SPECS_PATH.parent / "data" / "gpus.csv").read_bytes())
    monkeypatch.syspath_prepend(str(tmp_path))
    packaged = importlib.import_module("specs_pkg.specs")
    assert packaged.__package__ == "specs_pkg"
    assert packaged.resolve("a4000") == "RTX A4000"


GIB = 2**30


@pytest.mark.parametrize("reported, memory_bytes, expected", [
    ("NVIDIA H100 80GB HBM3", 81559 * 2**20, "H100 SXM"),
    ("NVIDIA H100 PCIe", None, "H100 PCIe"),
    ("NVIDIA A100-SXM4-40GB", 40 * GIB, "A100 SXM4 40GB"),
    ("NVIDIA A100-SXM4-80GB", None, "A100 SXM4 80GB"),
    ("NVIDIA A100 80GB PCIe", None, "A100 PCIe 80GB"),
    ("NVIDIA GeForce RTX 3090", 24 * GIB, "RTX 3090"),
    ("NVIDIA RTX A4000", None, "RTX A4000"),
    ("NVIDIA H200", 143771 * 2**20, "H200 SXM"),
    ("Tesla V100-SXM2-16GB", None, "V100 SXM2 16GB"),
    ("Quadro RTX 6000", None, "Quadro RTX 6000"),
    ("NVIDIA A100-SXM4", 81920 * 2**20, "A100 SXM4 80GB"),   # variant picked by memory
    ("Tesla V100-PCIE", 32510 * 2**20, "V100 PCIe 32GB"),
    ("NVIDIA A100-SXM4", None, None),                         # ambiguous, no memory given
    ("NVIDIA GeForce RTX 3080 Ti", 12 * GIB, None),           # not in the table
    ("AMD Instinct MI250X", None, None),
])
def test_match_device(reported, memory_bytes, expected):
    assert specs.match_device(reported, memory_bytes) == expected


@pytest.mark.parametrize("precision, column", [
    ("float32", "fp32_tflops"), ("tf32", "tf32_tflops"), ("tfloat32", "tf32_tflops"),
    ("float16", "fp16_tflops"), ("mixed_float16", "fp16_tflops"), ("bfloat16", "bf16_tflops"),
    ("mixed_bfloat16", "bf16_tflops"), ("int8", "int8_tops"),
])
def test_rate_column(precision, column):
    assert specs.rate_column(precision) == column


@pytest.mark.parametrize("bad", ["float64", "fp8", "", "mixed_float32"])
def test_rate_column_rejects_unknown_precision(bad):
    with pytest.raises(ValueError, match="unknown precision"):
        specs.rate_column(bad)


def test_rate_column_rejects_non_string():
    with pytest.raises(TypeError):
        specs.rate_column(16)
