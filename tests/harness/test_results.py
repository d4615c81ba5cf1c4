"""Result files: written atomically with their schema, validated on read, merged with
measured rows winning over projected ones."""
import json

import numpy as np
import pandas as pd
import pytest

from gpucmp.harness import results


def rows(rng, gpu="RTX A4000", source="measured", n=3, date="2026-12-01T10:00:00+00:00"):
    return [{"device": "cuda:0", "gpu": gpu, "device_name": "NVIDIA " + gpu, "workload": w, "precision": "float32",
             "batch_size": 32, "step_time_s": float(rng.uniform(1e-4, 1e-2)), "throughput": float(rng.uniform(1, 1e5)),
             "unit": "samples/s", "source": source, "date": date} for w in ["cnn", "gemm", "conv"][:n]]


@pytest.fixture
def rng():
    return np.random.default_rng()


@pytest.mark.parametrize("ext", ["csv", "json"])
def test_round_trip(tmp_path, rng, ext):
    df = results.frame(rows(rng))
    path = results.save(df, tmp_path / f"r.{ext}")
    back = results.load(path)
    assert list(back["workload"]) == list(df["workload"])
    np.testing.assert_allclose(back["step_time_s"], df["step_time_s"], rtol=1e-12)
    assert not list(tmp_path.glob(".*.tmp"))          # no temporary file left behind


def test_merge_measured_beats_projected_and_newer_beats_older(rng):
    proj = results.frame(rows(rng, source="projected"))
    old = results.frame(rows(rng, date="2026-11-01T00:00:00+00:00", n=1))
    new = results.frame(rows(rng, date="2026-12-01T00:00:00+00:00", n=1))
    other = results.frame(rows(rng, gpu="RTX A5000", n=2))
    m = results.merge([proj, new, old, other])
    a4000 = m[m["gpu"] == "RTX A4000"].set_index("workload")
    assert a4000.loc["cnn", "source"] == "measured"
    assert a4000.loc["cnn", "throughput"] == new["throughput"][0]
    assert a4000.loc["gemm", "source"] == "projected"
    assert len(m[m["gpu"] == "RTX A5000"]) == 2 and len(m) == 5


def test_corrupt_and_wrong_schema_files_are_refused(tmp_path, rng):
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(ValueError, match="not valid JSON"):
        results.load(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "gpucmp-results/99", "rows": []}))
    with pytest.raises(ValueError, match="schema"):
        results.load(other)
    csv = tmp_path / "plain.csv"
    pd.DataFrame(rows(rng)).to_csv(csv, index=False)          # no schema line
    with pytest.raises(ValueError, match="does not start with"):
        results.load(csv)
    missing = tmp_path / "missing.json"
    missing.write_text(json.dumps({"schema": results.SCHEMA, "rows": [{"gpu": "x"}]}))
    with pytest.raises(ValueError, match="missing columns"):
        results.load(missing)
    neg = results.frame(rows(rng))
    neg.loc[0, "step_time_s"] = -1.0
    with pytest.raises(ValueError, match="step_time_s"):
        results.load(neg)
    with pytest.raises(ValueError, match="does not exist"):
        results.load(tmp_path / "nowhere.csv")
    with pytest.raises(ValueError, match=".csv or .json"):
        results.save(results.frame(rows(rng)), tmp_path / "r.txt")


def test_a_failed_write_keeps_the_old_file(tmp_path, rng, monkeypatch):
    path = tmp_path / "r.json"
    results.save(results.frame(rows(rng)), path)
    before = path.read_text()

    def boom(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(results.os, "replace", boom)
    with pytest.raises(OSError):
        results.save(results.frame(rows(rng, n=1)), path)
    assert path.read_text() == before
    assert not list(tmp_path.glob(".*.tmp"))


def test_a_written_file_has_a_plain_files_permissions(tmp_path, rng):
    """Atomic writes go through a private temporary file; the result must still have the
    permissions open() would give it (0666 less the umask), or those of the file replaced."""
    import os
    import stat
    path = tmp_path / "r.json"
    results.save(results.frame(rows(rng)), path)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
    os.chmod(path, 0o640)
    results.save(results.frame(rows(rng)), path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
