"""Reading .npy bytes from a file nobody vouches for (a data set download, a saved model).

`npy_header(data)` -> (shape, dtype, offset of the array's bytes); `read_plain_npy(data,
name)` -> the array, after checking that the declared shape fits in the bytes that follow
the header (so a crafted header cannot make NumPy allocate what the file does not hold),
never unpickling: an object array is a ValueError naming `name`.
"""
import io

import numpy as np


def npy_header(data):
    fh = io.BytesIO(data)
    version = np.lib.format.read_magic(fh)
    read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
    shape, _, dtype = read(fh)
    return shape, dtype, fh.tell()


def read_plain_npy(data, name):
    shape, dtype, offset = npy_header(data)
    if dtype.hasobject:
        raise ValueError(f"{name} holds Python objects")
    count = 1
    for d in shape:
        count *= int(d)
    if count * dtype.itemsize > len(data) - offset:
        raise ValueError(f"{name} declares shape {shape} but holds only {len(data) - offset} bytes")
    return np.lib.format.read_array(io.BytesIO(data), allow_pickle=False)
