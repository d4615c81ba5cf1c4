"""Masking: Keras' layer that masks the steps whose features all equal ``mask_value``.

Keras 3 (``layers/core/masking.py``): mask = any(x != mask_value, axis=-1), output =
x * mask (masked steps are zeros), and the mask is attached to the output for the layers
after it (a recurrent layer skips the masked steps, RECURRENT_SPEC 1.8). In the plan: a
"seq_mask" node computing the mask (the same op as Embedding's ids != 0) and a
"masking" node multiplying by it; the gradient is dy * mask.
"""
from .layer import Layer, format_shape


class Masking(Layer):
    supports_masking = True
    takes_mask = True

    def __init__(self, mask_value=0.0, **kwargs):
        self.mask_value = float(mask_value)
        super().__init__(**kwargs)

    def _check_input(self, input_shape):
        if len(input_shape) != 3 or input_shape[1] is None or input_shape[2] is None:
            raise ValueError(f"Layer '{self.name}' (Masking) takes (batch, timesteps, features) inputs "
                             f"with known timesteps and features, found shape {format_shape(input_shape)}")

    def build(self, input_shape):
        self._check_input(input_shape)
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        self._check_input(input_shape)
        return tuple(input_shape)

    def makes_mask(self, input_shape):
        return (self.mask_value, True)

    def plan_layers(self, input_shape, mask=False):
        return [{"kind": "masking", "in_shape": tuple(input_shape[1:]), "out_shape": tuple(input_shape[1:])}]

    def get_config(self):
        config = super().get_config()
        config["mask_value"] = self.mask_value
        return config
