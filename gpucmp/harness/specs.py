"""GPU spec database: the rows of data/gpus.csv and the lookups built on them.

What it provides: `load()` and `specs()` (the table as a pandas DataFrame), `resolve()`
(any spelling of a GPU name -> its canonical row name), `spec()` (one row as a dict),
`match_device()` (what NVML / CUDA report -> a row, or None), `rate_column()` and
`peak_tflops()` (the peak a precision runs at), and `PER_SM_DENSE` with `per_sm_dense()`
(dense Tensor Core FLOP per clock per SM, the figure each tensor column is built from).

Why: the comparison harness projects a run measured on one card onto another, so it needs
one place with each card's peaks and memory system, and one way to name a card whether a
user typed "a4000" or the driver said "NVIDIA RTX A4000". Tensor columns are DENSE rates
with FP32 accumulation (what Keras / PyTorch mixed precision use); datasheet "sparse"
figures are twice these. Only pandas, numpy and the standard library: this module must not
import the compiled core, so it can be used (and tested) without a build.
"""
import difflib
import functools
import math
import re
from importlib import resources
from pathlib import Path

import pandas as pd

REQUIRED_COLUMNS = (
    "name", "architecture", "compute_capability", "sms", "cuda_cores", "tensor_cores",
    "boost_clock_mhz", "fp32_tflops", "tf32_tflops", "fp16_tflops", "bf16_tflops", "int8_tops",
    "memory_gb", "memory_type", "bandwidth_gbs", "l2_mb", "smem_per_sm_kb", "tdp_w",
    "nvlink_gbs", "pcie_gen", "launch_price_usd", "source",
)
EXTRA_COLUMNS = ("tensor_clock_mhz", "market", "aliases", "memory_bus_bits", "memory_gbps")
MARKETS = ("datacenter", "workstation", "geforce")

# Dense Tensor Core FLOP (int8: OP) per clock per SM, FP32 accumulation, on the
# workstation / datacenter parts, by compute capability. A precision a generation has no
# tensor unit for is absent (-> NaN). Sources: Volta whitepaper (8 TC x 64 FMA), Turing
# whitepaper, A100 and GA102 whitepapers, Ada whitepaper, H100 whitepaper.
PER_SM_DENSE = {
    "7.0": {"fp16": 1024},                                            # Volta GV100
    "7.5": {"fp16": 1024, "int8": 2048},                              # Turing TU10x
    "8.0": {"tf32": 1024, "fp16": 2048, "bf16": 2048, "int8": 4096},  # Ampere GA100
    "8.6": {"tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048},   # Ampere GA10x
    "8.9": {"tf32": 512, "fp16": 1024, "bf16": 1024, "int8": 2048},   # Ada AD10x
    "9.0": {"tf32": 2048, "fp16": 4096, "bf16": 4096, "int8": 8192},  # Hopper GH100
}
# GeForce cards run these with FP32 accumulation at half the rate (int8 is not halved).
GEFORCE_HALF_RATE = ("tf32", "fp16", "bf16")

_RATE_COLUMNS = {
    "float32": "fp32_tflops", "fp32": "fp32_tflops",
    "tf32": "tf32_tflops", "tfloat32": "tf32_tflops",
    "float16": "fp16_tflops", "mixed_float16": "fp16_tflops", "fp16": "fp16_tflops",
    "bfloat16": "bf16_tflops", "mixed_bfloat16": "bf16_tflops", "bf16": "bf16_tflops",
    "int8": "int8_tops",
}
_PREFIX_WORDS = ("nvidia", "geforce", "quadro", "tesla", "rtx")
_SEPARATORS = re.compile(r"[\s\-_]+")
_VARIANT_TOKEN = re.compile(r"^(pcie|sxm\d*|nvl|\d+gb|hbm\d+e?)$")


def _data_file():
    """gpus.csv from the package data (importlib.resources), or next to this file when
    the module was loaded by path outside its package."""
    if __package__:
        return resources.files(__package__) / "data" / "gpus.csv"
    return Path(__file__).with_name("data") / "gpus.csv"


@functools.lru_cache(maxsize=1)
def _table():
    with _data_file().open("r", encoding="utf-8") as f:
        table = pd.read_csv(f, dtype={"compute_capability": str, "aliases": str,
                                      "source": str, "market": str})
    missing = [c for c in REQUIRED_COLUMNS if c not in table.columns]
    if missing or tuple(table.columns[:len(REQUIRED_COLUMNS)]) != REQUIRED_COLUMNS:
        raise ValueError(f"gpus.csv columns out of order or missing: {missing}")
    table["aliases"] = table["aliases"].fillna("")
    return table


def load():
    """The whole table (one row per GPU) as a new DataFrame; the file is read once."""
    return _table().copy()


def _key(text):
    """Lower case, no spaces/dashes/underscores, leading NVIDIA/GeForce/Quadro/Tesla/RTX
    dropped: 'NVIDIA GeForce RTX 3090' -> '3090', 'RTX A4000' -> 'a4000'."""
    key = _SEPARATORS.sub("", text.lower())
    stripped = True
    while stripped:
        stripped = False
        for word in _PREFIX_WORDS:
            if key.startswith(word) and len(key) > len(word):
                key, stripped = key[len(word):], True
    return key


def _model_and_variants(text):
    """('a100', {'sxm', '80gb'}) for 'NVIDIA A100-SXM4-80GB': the model, and the
    form-factor / memory words that tell its variants apart."""
    tokens = [t for t in _SEPARATORS.split(text.lower()) if t and t not in _PREFIX_WORDS]
    variants = frozenset("sxm" if t.startswith("sxm") else t
                         for t in tokens if _VARIANT_TOKEN.match(t))
    model = _key("".join(t for t in tokens if not _VARIANT_TOKEN.match(t)))
    return model, variants


@functools.lru_cache(maxsize=1)
def _index():
    """(exact key -> canonical names, [(model, variants, canonical)]), names and aliases."""
    exact, models = {}, []
    for name, aliases in zip(_table()["name"], _table()["aliases"]):
        for spelling in [name] + [a for a in aliases.split(";") if a.strip()]:
            exact.setdefault(_key(spelling), []).append(name)
            models.append((*_model_and_variants(spelling), name))
    return exact, models


def _candidates(name):
    """Canonical names `name` may mean, in table order (one, several, or none)."""
    exact, models = _index()
    hits = exact.get(_key(name))
    if not hits:
        model, variants = _model_and_variants(name)
        hits = [c for m, v, c in models if m == model and variants <= v]
    return list(dict.fromkeys(hits))


def resolve(name):
    """Canonical row name for any spelling: 'A4000' -> 'RTX A4000', '3090' -> 'RTX 3090'.

    Raises TypeError for a non-string, ValueError for an ambiguous short name (the message
    lists the variants) or an unknown one (the message lists close matches)."""
    if not isinstance(name, str):
        raise TypeError(f"a GPU name must be a string, got {type(name).__name__}")
    found = _candidates(name)
    if len(found) == 1:
        return found[0]
    if found:
        raise ValueError(f"{name!r} is ambiguous; it may mean: {', '.join(found)}")
    exact, _ = _index()
    close = difflib.get_close_matches(_key(name), list(exact), n=5, cutoff=0.6)
    suggestions = list(dict.fromkeys(c for k in close for c in exact[k]))
    hint = (f"close matches: {', '.join(suggestions)}" if suggestions
            else f"known GPUs: {', '.join(_table()['name'])}")
    raise ValueError(f"unknown GPU {name!r}; {hint}")


def specs(names=None):
    """All rows, or the rows for `names` (each resolved) in the order given."""
    table = load()
    if names is None:
        return table
    if isinstance(names, str):
        names = [names]
    wanted = [resolve(n) for n in names]
    return table.set_index("name").loc[wanted].reset_index()


def spec(name):
    """One GPU's row as a dict (NaN where the card has no such unit or no figure)."""
    return specs([name]).iloc[0].to_dict()


def match_device(reported_name, memory_bytes=None):
    """Row name for a device as NVML / CUDA report it ('NVIDIA H100 80GB HBM3',
    'NVIDIA A100-SXM4-40GB', 'NVIDIA GeForce RTX 3090'), or None when no row matches.
    Where the name fits several variants, `memory_bytes` (total device memory) picks the
    one with the nearest memory size; without it, or on a tie, the answer is None."""
    if not isinstance(reported_name, str):
        raise TypeError(f"a device name must be a string, got {type(reported_name).__name__}")
    found = _candidates(reported_name)
    if len(found) <= 1:
        return found[0] if found else None
    if memory_bytes is None:
        return None
    sizes = _table().set_index("name").loc[found, "memory_gb"]
    gap = (sizes - memory_bytes / 2**30).abs()
    nearest = gap[gap == gap.min()]
    return nearest.index[0] if len(nearest) == 1 else None


def rate_column(precision):
    """The column holding the peak for a precision or Keras dtype policy name:
    'float32' -> 'fp32_tflops', 'mixed_float16' -> 'fp16_tflops', 'int8' -> 'int8_tops'."""
    if not isinstance(precision, str):
        raise TypeError(f"a precision must be a string, got {type(precision).__name__}")
    column = _RATE_COLUMNS.get(precision.strip().lower())
    if column is None:
        raise ValueError(f"unknown precision {precision!r}; expected one of {', '.join(_RATE_COLUMNS)}")
    return column


def peak_tflops(name, precision):
    """Peak TFLOP/s (int8: TOPS) of a GPU at a precision; NaN where it has no such unit."""
    return float(spec(name)[rate_column(precision)])


def per_sm_dense(compute_capability, precision, market):
    """Dense Tensor Core FLOP per clock per SM (FP32 accumulation) for a generation and
    market; NaN where the generation has no tensor unit for `precision`."""
    rate = PER_SM_DENSE[str(compute_capability)].get(precision, math.nan)
    if market == "geforce" and precision in GEFORCE_HALF_RATE:
        rate /= 2
    return rate
