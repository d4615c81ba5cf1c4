"""Merging a calibration of a few workloads into an existing one (merge.py, `gpucmp
calibrate --merge`): a matching file is merged on the whole card and the partitions both
have; another device, build or schema and a corrupt file are refused with one line,
and a refused merge leaves the output untouched."""
import copy
import json

import numpy as np
import pytest

from gpucmp.harness import cli, projection, specs
from gpucmp.harness.merge import check_compatible, merge_calibrations

ORIGIN = "H200 SXM"


@pytest.fixture
def rng():
    return np.random.default_rng()


def _cal(rng, workloads, sms=None, ops=None):
    row = specs.spec(ORIGIN)
    n = int(sms or row["sms"])
    prov = {"device": "NVIDIA H200", "date": "test", "gpucmp": "0.1.0", "cuda_runtime": 13000,
            "sm_limit": None if sms is None else n, "build": "abc123"}
    return {"schema": projection.CALIBRATION_SCHEMA, "gpu": ORIGIN, "sms": n, "provenance": prov,
            "peaks": {"gemm_flops": {"float32": 3e13}, "copy_bytes_per_s": 4e12, "launch_s": rng.uniform(1e-6, 3e-6)},
            "ops": dict(ops or {}), "kernels": [],
            "steps": [{"workload": w, "precision": "float32", "batch_size": 32, "step_time_s": rng.uniform(1e-4, 1e-2)}
                      for w in workloads],
            "profiles": [{"workload": w, "precision": "float32", "batch_size": 32, "ops": {"a|b|1": 1e-5}}
                         for w in workloads],
            "skipped_ops": []}


def _pair(rng):
    existing = _cal(rng, ["cnn", "resnet50"], ops={"gemm:1": {"seconds": 1.0, "kind": "gemm"},
                                                   "rnn_fwd:old": {"seconds": 9.0, "kind": "rnn_fwd"}})
    existing["partitions"] = {str(n): _cal(rng, ["cnn"], sms=n) for n in (24, 48)}
    new = _cal(rng, ["rnn", "lstm"], ops={"gemm:1": {"seconds": 2.0, "kind": "gemm"},
                                          "gemm:2": {"seconds": 3.0, "kind": "gemm"},
                                          "rnn_fwd:old": {"seconds": 5.0, "kind": "rnn_fwd"}})
    new["recurrent"] = {"fits": {"stepwise": {}}, "auto_variant": "stepwise"}
    new["partitions"] = {str(n): _cal(rng, ["rnn", "lstm"], sms=n) for n in (24, 96)}
    return existing, new


def test_a_matching_calibration_is_merged(rng):
    existing, new = _pair(rng)
    before = copy.deepcopy(existing)
    out = merge_calibrations(existing, new)
    assert existing == before                                     # the inputs are not changed
    assert sorted({s["workload"] for s in out["steps"]}) == ["cnn", "lstm", "resnet50", "rnn"]
    assert {p["workload"] for p in out["profiles"]} == {"cnn", "resnet50", "rnn", "lstm"}
    assert out["ops"]["gemm:1"]["seconds"] == 1.0                 # the existing measurement wins
    assert out["ops"]["gemm:2"]["seconds"] == 3.0                 # a new op is added
    assert out["ops"]["rnn_fwd:old"]["seconds"] == 5.0            # recurrent ops: the new ones
    assert out["recurrent"] == new["recurrent"] and out["peaks"] == existing["peaks"]
    assert sorted(out["partitions"], key=int) == ["24", "48"]      # 96 exists only in the new file
    assert {s["workload"] for s in out["partitions"]["24"]["steps"]} == {"cnn", "rnn", "lstm"}
    assert {s["workload"] for s in out["partitions"]["48"]["steps"]} == {"cnn"}
    note = out["provenance"]["merged"][-1]
    assert note["workloads"] == ["lstm", "rnn"] and note["partitions"] == ["24"]
    assert note["partitions_left_out"] == ["96"] and note["partitions_without_them"] == ["48"]
    only = merge_calibrations(existing, new, ["lstm"])
    assert {s["workload"] for s in only["steps"]} == {"cnn", "resnet50", "lstm"}
    with pytest.raises(ValueError, match="no measurements of gan"):
        merge_calibrations(existing, new, ["gan"])


def test_another_device_build_or_schema_is_refused(rng):
    existing, new = _pair(rng)
    cases = [
        (dict(new, gpu="RTX A4000"), "another device"),
        (dict(new, provenance=dict(new["provenance"], device="NVIDIA A100")), "another device"),
        (dict(new, sms=114), "another device"),
        (dict(new, provenance=dict(new["provenance"], gpucmp="0.2.0")), "another build: gpucmp version"),
        (dict(new, provenance=dict(new["provenance"], cuda_runtime=12040)), "another build: CUDA runtime"),
        (dict(new, provenance=dict(new["provenance"], build="fff000")), "another build: kernel build"),
        (dict(new, schema="gpucmp-calibration/0"), "not of schema"),
        (dict(new, provenance=dict(new["provenance"], sm_limit=48), sms=existing["sms"]), "sm_limit"),
    ]
    for bad, msg in cases:
        with pytest.raises(ValueError, match=msg):
            merge_calibrations(existing, bad)
    # a file from before the build fingerprint: nothing to compare, accepted
    old = dict(existing, provenance={k: v for k, v in existing["provenance"].items() if k != "build"})
    check_compatible(old, new)
    # a partition measured on another card is refused too
    odd = copy.deepcopy(new)
    odd["partitions"]["24"]["gpu"] = "RTX A4000"
    with pytest.raises(ValueError, match="24-SM partition.*another device"):
        merge_calibrations(existing, odd)


def _write(path, cal):
    path.write_text(json.dumps(cal))
    return str(path)


def test_cli_merge_writes_atomically_and_refuses_in_one_line(rng, tmp_path, capsys):
    existing, new = _pair(rng)
    e, n = _write(tmp_path / "e.json", existing), _write(tmp_path / "n.json", new)
    out = tmp_path / "out.json"
    assert cli.main(["calibrate", "--merge", e, n, "--out", str(out)]) == 0
    merged = projection.load_calibration(str(out))
    assert {s["workload"] for s in merged["steps"]} >= {"rnn", "lstm"}
    assert "wrote" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".") or p.suffix == ".tmp"] == []
    good = out.read_bytes()
    bad_cases = [(_write(tmp_path / "other.json", dict(new, gpu="RTX A4000")), "another device"),
                 (_write(tmp_path / "schema.json", dict(new, schema="x")), "schema"),
                 (str(tmp_path / "corrupt.json"), "not valid JSON")]
    (tmp_path / "corrupt.json").write_text('{"schema": "gpucmp-calibration/1", "gpu": ')
    for path, msg in bad_cases:
        assert cli.main(["calibrate", "--merge", e, path, "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert msg in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert out.read_bytes() == good                         # a refused merge leaves OUT as it was
    assert cli.main(["calibrate", "--merge", e, n, "--attach", e, "--out", str(out)]) == 2
    assert "separate steps" in capsys.readouterr().err
