"""The command line end to end, as a user runs it: `gpucmp compare A4000 A5000` on a machine
without a GPU, specs, devices, bench with files, merging results, and every bad argument
ending with exit code 2 and one line (no traceback)."""
import json

import pytest

import gpucmp
from cli_run import gpucmp_cli
from gpucmp.harness import results


def test_compare_a4000_a5000_prints_measured_and_projected_rows(tmp_path):
    out = tmp_path / "cmp.json"
    r = gpucmp_cli("compare", "A4000", "A5000", "--workloads", "cnn", "gemm", "bandwidth", "resnet50",
                   "--json", str(out))
    assert r.returncode == 0, r.stderr
    assert "RTX A4000" in r.stdout and "RTX A5000" in r.stdout and "projected" in r.stdout
    df = results.load(out)
    gpus = df[df["gpu"].isin(["RTX A4000", "RTX A5000"])]
    assert not gpus["reference"].astype(bool).any()
    assert set(gpus["workload"]) == {"cnn", "gemm", "bandwidth", "resnet50"}
    assert (gpus["throughput"] > 0).all()
    a4000 = gpus[gpus["gpu"] == "RTX A4000"]
    assert (a4000["ratio"].round(12) == 1.0).all()
    if not any(d.startswith("cuda") for d in gpucmp.available_devices()):
        assert (gpus["source"] == "projected").all()
        local = df[df["reference"].astype(bool)]
        assert len(local) and (local["source"] == "measured").all()


def test_specs_and_devices_commands():
    r = gpucmp_cli("specs", "A4000", "h200")
    assert r.returncode == 0 and "RTX A4000" in r.stdout and "H200" in r.stdout and "source:" in r.stdout
    r = gpucmp_cli("devices")
    assert r.returncode == 0 and "cpu" in r.stdout


def test_bench_writes_a_file_compare_merges_it(tmp_path):
    f = tmp_path / "here.csv"
    r = gpucmp_cli("bench", "--workloads", "gemm:256", "--devices", "cpu", "--repeats", "2", "--csv", str(f))
    assert r.returncode == 0, r.stderr
    df = results.load(f)
    assert list(df["workload"]) == ["gemm"] and df["source"][0] == "measured"
    # a file from "another machine": the same rows claimed for an RTX A5000 are measured rows there
    other = df.assign(gpu="RTX A5000", device="cuda:0", device_name="NVIDIA RTX A5000", batch_size=8192,
                      throughput=12.5, step_time_s=2 * 8192 ** 3 / 12.5e12, precision="float32")
    path = tmp_path / "a5000_box.json"
    results.save(other, path)
    out = tmp_path / "merged.csv"
    r = gpucmp_cli("compare", "A4000", "A5000", "--workloads", "gemm", "--precision", "float32", "--no-measure",
                   "--results", str(path), "--csv", str(out))
    assert r.returncode == 0, r.stderr
    m = results.load(out).set_index("gpu")
    assert m.loc["RTX A5000", "source"] == "measured" and m.loc["RTX A5000", "throughput"] == 12.5
    assert m.loc["RTX A4000", "source"] == "projected"


@pytest.mark.parametrize("args, needle", [
    (["compare", "A4000", "A9999"], "unknown"),
    (["compare", "A4000", "h100"], "H100"),
    (["compare", "A4000", "A5000", "--workloads", "resnet51"], "unknown workload"),
    (["compare", "A4000", "A5000", "--workloads", "cnn", "--batch-size", "100000000"], "does not fit"),
    (["compare", "A4000", "A5000", "--batch-size", "0"], "positive integer"),
    (["compare", "A4000", "A5000", "--precision", "float8"], "unknown precision"),
    (["bench", "--devices", "cuda:77", "--workloads", "gemm"], "not present"),
    (["compare"], "required"),
    (["frobnicate"], "invalid choice"),
])
def test_bad_arguments_exit_2_with_one_line(args, needle):
    r = gpucmp_cli(*args)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert needle.lower() in lines[0].lower()


def test_a_corrupt_results_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema": "nope"}))
    r = gpucmp_cli("compare", "A4000", "A5000", "--results", str(bad), "--no-measure")
    assert r.returncode == 2 and "schema" in r.stderr and "Traceback" not in r.stderr


def test_calibrate_attach_files_partitions_and_refuses_a_wrong_one(tmp_path):
    """`gpucmp calibrate --attach FULL PART...` measures nothing (no GPU needed): it files
    calibrations of the card confined to fewer SMs into the whole card's, and refuses a
    file that is not one."""
    from gpucmp.harness import projection
    full = projection.load_calibration()
    full.pop("partitions", None)
    part = dict(full, sms=24, provenance=dict(full["provenance"], sm_limit=24))
    part.pop("partitions", None)
    paths = {}
    for name, cal in (("full", full), ("p24", part), ("bad", dict(part, gpu="RTX A4000"))):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(cal))
    out = tmp_path / "cal.json"
    r = gpucmp_cli("calibrate", "--attach", str(paths["full"]), str(paths["p24"]), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert list(projection.load_calibration(str(out))["partitions"]) == ["24"]
    r = gpucmp_cli("calibrate", "--attach", str(paths["full"]), str(paths["bad"]), "--out", str(tmp_path / "x.json"))
    assert r.returncode == 2 and "Traceback" not in r.stderr and "not a H200 SXM calibration" in r.stderr
    assert not (tmp_path / "x.json").exists()
