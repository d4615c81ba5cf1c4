"""Result files: the schema of measured and projected rows, CSV/JSON I/O, validation, merging.

What it provides: `frame(rows)` (a DataFrame with the schema's columns first),
`save(df, path)` (CSV or JSON by extension, written atomically, with the schema
version: a JSON object {"schema": ..., "rows": [...]}, or a CSV whose first line is
`# gpucmp-results schema=N`), `load(path_or_frame)` (validated: a wrong or missing
schema, missing columns, bad values raise ValueError naming the file and the problem),
and `merge(frames)` (concatenates; for the same gpu x workload x precision x batch
size a measured row wins over a projected one, and the newest measurement wins).

Why it is built this way: results from several machines (an A4000 box and an A5000
box) are combined by `compare(results=...)`, so files must say what they are and be
checked on read rather than trusted; pandas does the table work.
"""
import io
import json
import math
import os

import pandas as pd

from .._files import atomic_write

SCHEMA = "gpucmp-results/1"
CSV_MAGIC = "# gpucmp-results schema=1"
REQUIRED = ["device", "gpu", "workload", "precision", "batch_size", "step_time_s", "throughput", "unit", "source"]
COLUMNS = REQUIRED[:2] + ["device_name"] + REQUIRED[2:] + [
    "size", "step_time_iqr_s", "step_time_min_s", "step_time_max_s", "repeats", "steps_per_repeat",
    "flops_per_step", "bytes_per_step", "peak_memory_bytes", "modeled_memory_bytes", "energy_per_step_j",
    "avg_power_w", "sm_clock_mhz", "sms", "date", "host", "gpucmp_version"]
SOURCES = ("measured", "projected")
KEY = ["gpu", "workload", "precision", "batch_size"]


def frame(rows):
    df = pd.DataFrame(list(rows))
    for c in COLUMNS:
        if c not in df.columns:
            df[c] = pd.Series(dtype="float64" if c not in ("device", "gpu", "workload", "precision", "unit",
                                                          "source", "size") else "object")
    rest = [c for c in df.columns if c not in COLUMNS]
    return df[COLUMNS + rest].reset_index(drop=True)


def _atomic_write(path, text):
    atomic_write(path, lambda fh: fh.write(text))


def _jsonable(v):
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "item"):
        return _jsonable(v.item())
    return v


def save(df, path):
    """Write df to path (.csv or .json) with the schema version, atomically."""
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"save: expected a DataFrame from benchmark()/compare(), got {type(df).__name__}")
    path = os.fspath(path)
    if path.endswith(".json"):
        rows = [{k: _jsonable(v) for k, v in r.items()} for r in df.to_dict("records")]
        _atomic_write(path, json.dumps({"schema": SCHEMA, "rows": rows}, indent=1) + "\n")
    elif path.endswith(".csv"):
        _atomic_write(path, CSV_MAGIC + "\n" + df.to_csv(index=False))
    else:
        raise ValueError(f"save: {path!r}: the file name must end in .csv or .json")
    return path


def _validate(df, where):
    missing = [c for c in REQUIRED if c not in df.columns]
    if missing:
        raise ValueError(f"{where}: not a gpucmp results table: missing columns {missing}")
    bad_src = sorted(set(df["source"].dropna()) - set(SOURCES))
    if bad_src:
        raise ValueError(f"{where}: column 'source' must be 'measured' or 'projected', found {bad_src}")
    st = pd.to_numeric(df["step_time_s"], errors="coerce")
    tp = pd.to_numeric(df["throughput"], errors="coerce")
    unsupported = st.isna() & (df["source"] == "projected")       # a precision the card has no unit for
    if ((st <= 0) | (st.isna() & ~unsupported)).any():
        raise ValueError(f"{where}: column 'step_time_s' holds missing, non-numeric or non-positive values")
    if (tp < 0).any():
        raise ValueError(f"{where}: column 'throughput' holds negative values")
    out = df.copy()
    out["step_time_s"], out["throughput"] = st, tp
    out["batch_size"] = pd.to_numeric(out["batch_size"], errors="coerce")
    return frame(out.to_dict("records"))


def load(src):
    """A validated results DataFrame from a .csv / .json file written by save(), or a DataFrame."""
    if isinstance(src, pd.DataFrame):
        return _validate(src, "results DataFrame")
    path = os.fspath(src)
    if not os.path.exists(path):
        raise ValueError(f"results file {path!r} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"results file {path!r} cannot be read: {exc}") from None
    if path.endswith(".json"):
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"results file {path!r} is not valid JSON ({exc.msg} at line {exc.lineno})") from None
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA or not isinstance(obj.get("rows"), list):
            raise ValueError(f"results file {path!r} is not a gpucmp results file of schema {SCHEMA!r} "
                             f"(found schema {obj.get('schema') if isinstance(obj, dict) else None!r})")
        df = pd.DataFrame(obj["rows"])
    elif path.endswith(".csv"):
        first, _, body = text.partition("\n")
        if first.strip() != CSV_MAGIC:
            raise ValueError(f"results file {path!r} does not start with {CSV_MAGIC!r}: not a gpucmp results "
                             "file of this schema")
        try:
            df = pd.read_csv(io.StringIO(body))
        except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
            raise ValueError(f"results file {path!r} is not a readable CSV table ({exc})") from None
    else:
        raise ValueError(f"results file {path!r}: the name must end in .csv or .json")
    return _validate(df, f"results file {path!r}")


def merge(frames):
    """One table from several; per gpu x workload x precision x batch size, measured beats
    projected and a newer measurement beats an older one."""
    frames = [load(f) for f in frames]
    frames = [f for f in frames if len(f)]
    if not frames:
        return frame([])
    df = pd.concat(frames, ignore_index=True)
    df["_rank"] = (df["source"] == "measured").astype(int)
    df["_date"] = df["date"].fillna("").astype(str)
    df = df.sort_values(["_rank", "_date"], kind="stable")
    keyed = df.assign(_gpu=df["gpu"].fillna(df["device_name"]).fillna(df["device"]))
    keyed = keyed.drop_duplicates(subset=["_gpu", "workload", "precision", "batch_size"], keep="last")
    return frame(keyed.drop(columns=["_rank", "_date", "_gpu"]).sort_index().to_dict("records"))
