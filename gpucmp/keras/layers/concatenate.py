"""Concatenate: joins a list of tensors along ``axis`` (default -1, the channels).

As Keras: every other axis must match (ValueError "A `Concatenate` layer requires inputs
with matching shapes except for the concatenation axis"). The plan node's ``axis`` is an
index into the per-sample shape (Keras' axis -1 on (None, H, W, C) is 2); the batch
axis cannot be concatenated over by the plan (NotImplementedError).

Masks (Keras 3 ``Concatenate.compute_mask``): each input's (batch, T) mask is broadcast
over its features (an unmasked input counts as all True), the results are joined along
``axis`` and reduced with any() over the last axis. Along the feature (last) axis that is
the OR of the masks when every input carries one; with an unmasked input it is all True,
which gpucmp passes on as no mask (the same for every later layer and the loss). Masks
with another axis are a NotImplementedError.
"""
import numbers

from .layer import Layer, format_shape, is_shape_list


class Concatenate(Layer):
    def __init__(self, axis=-1, **kwargs):
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ValueError(f"Concatenate: `axis` must be an int, received axis={axis!r}")
        self.axis = int(axis)
        super().__init__(**kwargs)

    supports_masking = True

    def merge_mask(self, flat, in_masks):
        rank = len(flat.shapes[in_masks[0] if in_masks[0] is not None else
                               next(m for m in in_masks if m is not None)]) + 1
        if self.axis % rank != rank - 1:
            raise NotImplementedError(
                f"Layer '{self.name}': masked inputs concatenated along axis={self.axis} (not the "
                "feature axis) are not supported by gpucmp's plan yet")
        if any(m is None for m in in_masks):
            return None
        return flat.add_mask_or(self, in_masks)

    def _check_inputs(self, input_shape):
        if not is_shape_list(input_shape):
            raise ValueError("A `Concatenate` layer should be called on a list of at least 1 "
                             f"input. Received: input_shape={format_shape(input_shape)}")
        rank = len(input_shape[0])
        mismatch = ("A `Concatenate` layer requires inputs with matching shapes except for the "
                    f"concatenation axis. Received: input_shape={format_shape(input_shape)}")
        if any(len(s) != rank for s in input_shape):
            raise ValueError(mismatch)
        if not -rank <= self.axis < rank:
            raise ValueError(f"Layer '{self.name}': axis {self.axis} is out of bounds for inputs "
                             f"of rank {rank} {format_shape(input_shape)}")
        axis = self.axis % rank
        if axis == 0:
            raise NotImplementedError(f"Layer '{self.name}': concatenating along the batch axis "
                                      "(axis=0) is not supported by the plan")
        for d in range(1, rank):
            if d == axis:
                continue
            sizes = {s[d] for s in input_shape} - {None}
            if len(sizes) > 1:
                raise ValueError(mismatch)
        return axis

    def build(self, input_shape):
        self._check_inputs(input_shape)
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        axis = self._check_inputs(input_shape)
        out = list(input_shape[0])
        sizes = [s[axis] for s in input_shape]
        out[axis] = None if None in sizes else sum(sizes)
        return tuple(out)

    def plan_layers(self, input_shape):
        if len(input_shape) == 1:
            return []
        axis = self._check_inputs(input_shape)
        return [{"kind": "concat", "in_shape": tuple(input_shape[0][1:]),
                 "out_shape": tuple(self.compute_output_shape(input_shape)[1:]),
                 "axis": axis - 1}]

    def get_config(self):
        config = super().get_config()
        config["axis"] = self.axis
        return config
