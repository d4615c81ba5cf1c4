"""GlobalAveragePooling2D / GlobalMaxPooling2D: the mean / maximum over height and width.

(None, H, W, C) -> (None, C), or (None, 1, 1, C) with ``keepdims=True``; channels_last
only. The plan has no node of its own for them: an ``avgpool2d`` / ``maxpool2d`` node
with ``pool_size`` (H, W), strides (1, 1), padding 'valid', then (unless keepdims) a
``reshape`` to (C,).
"""
from . import argument_checks as check
from .layer import Layer, format_shape


class GlobalPooling2D(Layer):
    _kind = None      # 'avgpool2d' | 'maxpool2d'

    def __init__(self, data_format=None, keepdims=False, **kwargs):
        self.data_format = check.data_format(data_format, type(self).__name__)
        self.keepdims = bool(keepdims)
        super().__init__(**kwargs)

    def compute_output_shape(self, input_shape):
        check.image_batch(input_shape, self.name)
        if self.keepdims:
            return (input_shape[0], 1, 1, input_shape[3])
        return (input_shape[0], input_shape[3])

    def build(self, input_shape):
        self.compute_output_shape(input_shape)
        super().build(input_shape)

    def plan_layers(self, input_shape):
        self.compute_output_shape(input_shape)
        _, h, w, c = input_shape
        if h is None or w is None or c is None:
            raise ValueError(f"Layer '{self.name}': the plan needs known input sizes, received "
                             f"{format_shape(input_shape)}")
        descs = [{"kind": self._kind, "in_shape": (h, w, c), "out_shape": (1, 1, c),
                  "pool_size": (h, w), "strides": (1, 1), "padding": "valid"}]
        if not self.keepdims:
            descs.append({"kind": "reshape", "in_shape": (1, 1, c), "out_shape": (c,)})
        return descs

    def get_config(self):
        config = super().get_config()
        config.update({"data_format": self.data_format, "keepdims": self.keepdims})
        return config


class GlobalAveragePooling2D(GlobalPooling2D):
    _kind = "avgpool2d"


class GlobalMaxPooling2D(GlobalPooling2D):
    _kind = "maxpool2d"


GlobalAvgPool2D = GlobalAveragePooling2D
GlobalMaxPool2D = GlobalMaxPooling2D
