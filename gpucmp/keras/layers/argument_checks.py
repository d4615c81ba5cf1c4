"""Checks and normalisations of layer arguments, shared by the layer files.

Every bad argument is a ValueError at construction that names the layer class and the
argument, as Keras does, so a typo is reported where it is written.
"""
import numbers


def positive_int(value, arg, cls_name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{cls_name}: `{arg}` must be a positive integer, received {arg}={value!r}")
    return int(value)


def int_tuple(value, n, arg, cls_name, allow_none=False):
    """An int or an n-tuple of positive ints -> n-tuple (``kernel_size=3`` -> (3, 3))."""
    if value is None and allow_none:
        return None
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        value = (value,) * n
    try:
        value = tuple(value)
    except TypeError:
        raise ValueError(f"{cls_name}: `{arg}` must be an int or a tuple of {n} ints, "
                         f"received {arg}={value!r}") from None
    if len(value) != n or any(isinstance(v, bool) or not isinstance(v, numbers.Integral) or v <= 0
                              for v in value):
        raise ValueError(f"{cls_name}: `{arg}` must be a positive int or a tuple of {n} positive "
                         f"ints, received {arg}={value!r}")
    return tuple(int(v) for v in value)


def padding(value, cls_name):
    if not isinstance(value, str) or value.lower() not in ("valid", "same"):
        raise ValueError(f"{cls_name}: `padding` must be 'valid' or 'same', received padding={value!r}")
    return value.lower()


def data_format(value, cls_name):
    if value is None:
        return "channels_last"
    if not isinstance(value, str) or value.lower() not in ("channels_last", "channels_first"):
        raise ValueError(f"{cls_name}: `data_format` must be 'channels_last' or 'channels_first', "
                         f"received data_format={value!r}")
    if value.lower() == "channels_first":
        raise ValueError(f"{cls_name}: data_format='channels_first' is not supported by gpucmp; "
                         "its kernels are NHWC (channels_last). Transpose the data to "
                         "(batch, height, width, channels) and use channels_last.")
    return "channels_last"


def unsupported(cls_name, **kwargs):
    """Keras arguments gpucmp accepts only at their neutral value (regularizers, constraints...)."""
    for arg, value in kwargs.items():
        if value is not None:
            raise NotImplementedError(f"{cls_name}: `{arg}` is not supported by gpucmp yet "
                                      f"(received {arg}={value!r}); leave it None")


def image_batch(input_shape, layer_name):
    """A batch of NHWC images: rank 4, else Keras' incompatible-input ValueError."""
    if len(input_shape) != 4:
        from .layer import format_shape
        raise ValueError(
            f"Input 0 of layer '{layer_name}' is incompatible with the layer: expected "
            f"ndim=4 (batch, height, width, channels), found ndim={len(input_shape)}. "
            f"Full shape received: {format_shape(input_shape)}")
