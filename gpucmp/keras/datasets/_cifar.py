"""The CIFAR batch files: pickled dicts with ``data`` (n, 3072) uint8 and a label list."""
import numpy as np

from ._safe_arrays import load_pickle


def load_batch(fpath, label_key="labels"):
    d = load_pickle(fpath)
    if not isinstance(d, dict):
        raise ValueError(f"{fpath} is not a CIFAR batch (not a dict)")
    d = {(k.decode("utf8") if isinstance(k, bytes) else k): v for k, v in d.items()}
    if "data" not in d or label_key not in d:
        raise ValueError(f"{fpath} is not a CIFAR batch: it lacks 'data' or {label_key!r}")
    data = np.asarray(d["data"], dtype=np.uint8)
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
        raise ValueError(f"{fpath}: 'data' has shape {data.shape}, expected (n, 3072)")
    labels = np.asarray(d[label_key])
    if labels.shape != (data.shape[0],):
        raise ValueError(f"{fpath}: {len(labels)} labels for {data.shape[0]} images")
    return data.reshape(-1, 3, 32, 32), labels


def channels_last(x):
    return x.transpose(0, 2, 3, 1)
