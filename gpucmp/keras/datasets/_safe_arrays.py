"""Reading Keras' data files without trusting pickle.

``load_npz(path)``: the arrays of an ``.npz``; numeric arrays with ``allow_pickle=False``
(their header checked against the bytes that follow), ragged ``dtype=object`` arrays (IMDB,
Reuters) through ``SafeUnpickler``. ``load_pickle(path)``: the CIFAR batches (Python 2
pickles of dicts of arrays). ``SafeUnpickler`` resolves no global but the few NumPy
functions that rebuild arrays, so a pickle cannot name code to run.
"""
import io
import pickle
import zipfile

import numpy as np

from ..._npy import npy_header, read_plain_npy

_ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
            ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "scalar"),
            ("numpy._core.multiarray", "scalar")}


class SafeUnpickler(pickle.Unpickler):
    def find_class(self, module, name):
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to unpickle {module}.{name}: only NumPy arrays "
                                     "of plain values are allowed in a data set file")


def load_pickle(path, encoding="bytes"):
    with open(path, "rb") as fh:
        try:
            return SafeUnpickler(fh, encoding=encoding).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
            raise ValueError(f"{path} is not a valid data file: {exc}") from None


def load_npz(path):
    out = {}
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if not info.filename.endswith(".npy"):
                    continue
                data = zf.read(info)
                key = info.filename[:-4]
                shape, dtype, offset = npy_header(data)
                if dtype.hasobject:
                    arr = SafeUnpickler(io.BytesIO(data[offset:]), encoding="latin1").load()
                    if not isinstance(arr, np.ndarray):
                        raise ValueError(f"{key} is not an array")
                else:
                    arr = read_plain_npy(data, key)
                out[key] = arr
    except (zipfile.BadZipFile, pickle.UnpicklingError, EOFError, OSError, ValueError) as exc:
        raise ValueError(f"{path} is not a valid .npz data file: {exc}") from None
    return out


def require(arrays, keys, path):
    missing = [k for k in keys if k not in arrays]
    if missing:
        raise ValueError(f"{path} lacks the arrays {missing} (it has {sorted(arrays)})")
    return [arrays[k] for k in keys]
