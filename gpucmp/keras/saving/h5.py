"""HDF5 through h5py, with the checks an untrusted file needs.

- ``open_h5(source, label)``: an h5py.File for reading, from a path or from bytes held in
  memory (the ``model.weights.h5`` member of a ``.keras`` zip is never written to disk);
  a file h5py cannot open is a ValueError naming it.
- ``inspect(f, label)``: walks the whole file once before anything is read and refuses what
  could reach outside it or lie about its size: external links, virtual datasets, external
  storage, non-numeric datasets, and datasets whose declared shape holds more bytes than the
  file stores for them (a truncated file, or a crafted shape like (10**9, 10**9)). It returns
  the number of values the file really holds, the budget a model built from the file's
  config may allocate (``layers.layer.weight_budget``).
- ``read_array(ds, shape, label)``: one dataset, after checking its declared shape against
  the shape the model expects (so a wrong shape is named, not allocated), as float32 (or
  its integer dtype for counters), NaN/Inf refused.
- ``write_array(group, name, value)``: writes a NumPy array as Keras does (no compression).
"""
import io
import os

import numpy as np

MAX_RATIO = 1000      # declared bytes per stored byte for a compressed (filtered) dataset


def h5py_module():
    try:
        import h5py
    except ImportError:
        raise ImportError("Keras' .keras and .h5 files are HDF5 inside: this needs the h5py "
                          "package (pip install h5py)") from None
    return h5py


def is_hdf5(path):
    """True when ``path`` starts with the HDF5 signature (at offset 0: Keras' files)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(8) == b"\x89HDF\r\n\x1a\n"
    except OSError:
        return False


def open_h5(source, label):
    h5py = h5py_module()
    try:
        if isinstance(source, (bytes, bytearray)):
            return h5py.File(io.BytesIO(bytes(source)), "r")
        return h5py.File(os.fspath(source), "r")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{label} is not a readable HDF5 file (corrupt or truncated?): "
                         f"{exc}") from None


def inspect(f, label):
    """Checks every object of ``f`` (see the module docstring); returns the number of
    values its datasets hold."""
    h5py = h5py_module()
    bad = []

    def visit_link(name, link):
        if isinstance(link, h5py.ExternalLink):
            bad.append(f"'{name}' is an external link to {link.filename!r}")
    try:
        f.visititems_links(visit_link)
        if bad:
            raise ValueError(f"{label}: refusing the file: {bad[0]}")
        datasets = []
        f.visititems(lambda name, obj: datasets.append((name, obj))
                     if isinstance(obj, h5py.Dataset) else None)
        total = 0
        for name, ds in datasets:
            total += _check_dataset(name, ds, label)
        return total
    except (OSError, RuntimeError, KeyError) as exc:
        raise ValueError(f"{label}: the HDF5 structure cannot be read (corrupt or truncated?): "
                         f"{exc}") from None


def _check_dataset(name, ds, label):
    if ds.is_virtual or ds.external:
        raise ValueError(f"{label}: refusing the file: dataset '{name}' keeps its data in "
                         "other files (virtual or external storage)")
    if ds.dtype.kind not in "fiub" or ds.dtype.itemsize > 8:
        raise ValueError(f"{label}: dataset '{name}' has dtype {ds.dtype}, not a numeric array")
    shape = ds.shape
    if shape is None:
        return 0
    count = 1
    for d in shape:
        count *= int(d)
    nbytes = count * ds.dtype.itemsize
    stored = ds.id.get_storage_size()
    if ds.compression is None and not ds.chunks:
        enough = stored >= nbytes or (count <= 1 and stored == 0)   # a scalar may be compact
    else:
        enough = nbytes <= MAX_RATIO * max(stored, 1)
    if not enough:
        raise ValueError(f"{label}: dataset '{name}' declares shape {tuple(shape)} "
                         f"({nbytes} bytes) but the file stores {stored} bytes for it "
                         "(truncated, or a crafted size); refusing to read it")
    return count


def read_array(ds, shape, label, integer=False):
    """The value of dataset ``ds``, checked to have ``shape`` (None: any) before reading."""
    if shape is not None and tuple(ds.shape) != tuple(shape):
        raise ValueError(f"{label}: '{ds.name}' has shape {tuple(ds.shape)} in the file, but "
                         f"the model expects {tuple(shape)}")
    try:
        value = np.asarray(ds[()])
    except (OSError, RuntimeError, ValueError) as exc:
        raise ValueError(f"{label}: '{ds.name}' cannot be read (corrupt?): {exc}") from None
    if integer:
        return value
    value = value.astype(np.float32)
    if not np.all(np.isfinite(value)):
        raise ValueError(f"{label}: '{ds.name}' contains NaN or Inf")
    return value



def read_layer_weights(datasets, weights, layer, label, count_note="", read_note=""):
    """The arrays of ``datasets`` for ``layer``'s ``weights`` (in the same order), after
    checking there are as many and each has its weight's shape; the notes end the count
    and the per-weight error messages (where in the file, how layers were matched)."""
    if len(datasets) != len(weights):
        raise ValueError(f"{label}: layer '{layer.name}' has {len(weights)} weights "
                         f"({', '.join(f'{w.name} {w.shape}' for w in weights)}) but the file "
                         f"has {len(datasets)}{count_note}")
    return [read_array(ds, var.shape, f"{label}: layer '{layer.name}' weight '{var.name}'{read_note}")
            for ds, var in zip(datasets, weights)]

def write_array(group, name, value):
    value = np.asarray(value)
    return group.create_dataset(name, data=value)


def text(value):
    """An HDF5 string attribute (bytes or str) as str."""
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)
