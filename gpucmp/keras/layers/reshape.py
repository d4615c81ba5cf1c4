"""Reshape: (batch, ...) -> (batch, *target_shape), row-major; one -1 entry is inferred."""
import math
import numbers

from .layer import Layer, format_shape


class Reshape(Layer):
    def __init__(self, target_shape, **kwargs):
        try:
            target = tuple(target_shape)
        except TypeError:
            raise ValueError(f"Reshape: `target_shape` must be a tuple of ints, received "
                             f"target_shape={target_shape!r}") from None
        if not target or any(isinstance(d, bool) or not isinstance(d, numbers.Integral)
                             or (d <= 0 and d != -1) for d in target) \
                or sum(d == -1 for d in target) > 1:
            raise ValueError("Reshape: `target_shape` must be a non-empty tuple of positive ints "
                             f"with at most one -1, received target_shape={target_shape!r}")
        self.target_shape = tuple(int(d) for d in target)
        super().__init__(**kwargs)

    def compute_output_shape(self, input_shape):
        rest = input_shape[1:]
        if any(d is None for d in rest):
            raise ValueError(f"Layer '{self.name}': Reshape needs fully known input dimensions, "
                             f"received {format_shape(input_shape)}")
        total = math.prod(rest)
        known = math.prod(d for d in self.target_shape if d != -1)
        out = self.target_shape
        if -1 in out:
            if total % known:
                raise ValueError(self._mismatch(input_shape))
            out = tuple(total // known if d == -1 else d for d in out)
        elif known != total:
            raise ValueError(self._mismatch(input_shape))
        return (input_shape[0],) + out

    def _mismatch(self, input_shape):
        return (f"Layer '{self.name}': the total size of the new array must be unchanged, "
                f"input_shape = {format_shape(input_shape[1:])}, "
                f"output_shape = {format_shape(self.target_shape)}")

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        super().build(input_shape)

    def plan_layers(self, input_shape):
        return [{"kind": "reshape", "in_shape": tuple(input_shape[1:]),
                 "out_shape": tuple(self.compute_output_shape(input_shape)[1:])}]

    def _forward_numpy(self, x, out_shape):
        return x.reshape((x.shape[0],) + tuple(out_shape[1:])).copy()

    def get_config(self):
        config = super().get_config()
        config["target_shape"] = list(self.target_shape)
        return config
