"""BatchNormalization: normalizes each channel with batch statistics (training) or the
moving statistics (inference), then scales by gamma and shifts by beta.

Keras 3 semantics (KERAS_SEMANTICS.md, "BatchNormalization"): defaults axis=-1,
momentum=0.99, epsilon=1e-3, center=True, scale=True; weights gamma (ones), beta (zeros)
-- trainable -- then moving_mean (zeros), moving_variance (ones) -- non-trainable, in
that get_weights() order. In training, mean and biased variance over every axis but
``axis``, ``y = gamma * (x - mean) / sqrt(var + epsilon) + beta`` and
``moving = moving * momentum + stat * (1 - momentum)``; in inference the moving
statistics. ``trainable=False`` also means inference mode (Keras >= 2.1), so a frozen
backbone keeps its statistics: the plan node's ``trainable`` flag says both.

The plan normalizes over the last axis only (NHWC channels, or the features of a
(batch, features) input): ``axis=-1`` or its positive spelling (3 for (None, H, W, C));
any other axis is a NotImplementedError. gamma / beta are None in the plan node when
scale / center is False.
"""
import numbers

from .. import initializers
from . import argument_checks as check
from .layer import Layer, format_shape


class BatchNormalization(Layer):
    supports_masking = True     # passes a Keras mask on (Keras 3 does)
    _training_matters = True

    def __init__(self, axis=-1, momentum=0.99, epsilon=1e-3, center=True, scale=True,
                 beta_initializer="zeros", gamma_initializer="ones",
                 moving_mean_initializer="zeros", moving_variance_initializer="ones",
                 beta_regularizer=None, gamma_regularizer=None, beta_constraint=None,
                 gamma_constraint=None, renorm=False, renorm_clipping=None,
                 renorm_momentum=0.99, synchronized=False, **kwargs):
        if isinstance(axis, (list, tuple)):
            raise NotImplementedError(f"BatchNormalization: several axes (axis={axis!r}) are "
                                      "not supported; the plan normalizes the last axis")
        if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
            raise ValueError(f"BatchNormalization: `axis` must be an int, received axis={axis!r}")
        if synchronized:
            raise ValueError("Argument synchronized=True is only supported with the TensorFlow "
                             "backend.")
        if renorm:
            raise NotImplementedError("BatchNormalization: renorm=True is not supported by gpucmp")
        check.unsupported("BatchNormalization", beta_regularizer=beta_regularizer,
                          gamma_regularizer=gamma_regularizer, beta_constraint=beta_constraint,
                          gamma_constraint=gamma_constraint, renorm_clipping=renorm_clipping)
        self.axis = int(axis)
        self.momentum = float(momentum)
        self.epsilon = float(epsilon)
        self.center = bool(center)
        self.scale = bool(scale)
        self.renorm_momentum = float(renorm_momentum)
        self.beta_initializer = initializers.get(beta_initializer, "beta_initializer")
        self.gamma_initializer = initializers.get(gamma_initializer, "gamma_initializer")
        self.moving_mean_initializer = initializers.get(moving_mean_initializer,
                                                        "moving_mean_initializer")
        self.moving_variance_initializer = initializers.get(moving_variance_initializer,
                                                            "moving_variance_initializer")
        super().__init__(**kwargs)
        self.gamma = self.beta = self.moving_mean = self.moving_variance = None

    def _check_input(self, input_shape):
        rank = len(input_shape)
        if not -rank <= self.axis < rank:
            raise ValueError(f"Axis {self.axis} is out of bounds for input shape "
                             f"{format_shape(input_shape)}. Received: axis={self.axis}")
        if rank < 2 or self.axis % rank != rank - 1:
            raise NotImplementedError(
                f"Layer '{self.name}': BatchNormalization over axis {self.axis} of inputs "
                f"{format_shape(input_shape)} is not supported; gpucmp normalizes the last "
                f"axis only (axis=-1 or axis={rank - 1}, channels_last)")
        if input_shape[-1] is None:
            raise ValueError(f"Layer '{self.name}': the normalized axis of the inputs must be "
                             f"known, received {format_shape(input_shape)}")

    def build(self, input_shape):
        self._check_input(input_shape)
        shape = (int(input_shape[-1]),)
        if self.scale:
            self.gamma = self.add_weight(shape, self.gamma_initializer, "gamma")
        if self.center:
            self.beta = self.add_weight(shape, self.beta_initializer, "beta")
        self.moving_mean = self.add_weight(shape, self.moving_mean_initializer, "moving_mean",
                                           trainable=False)
        self.moving_variance = self.add_weight(shape, self.moving_variance_initializer,
                                               "moving_variance", trainable=False)
        super().build(input_shape)

    def compute_output_shape(self, input_shape):
        self._check_input(input_shape)
        return tuple(input_shape)

    def plan_layers(self, input_shape):
        shape = tuple(input_shape[1:])
        return [{
            "kind": "batchnorm", "in_shape": shape, "out_shape": shape,
            "epsilon": self.epsilon, "momentum": self.momentum,
            "gamma": self.gamma.buffer if self.gamma is not None else None,
            "beta": self.beta.buffer if self.beta is not None else None,
            "moving_mean": self.moving_mean.buffer,
            "moving_variance": self.moving_variance.buffer,
        }]

    def get_config(self):
        config = super().get_config()
        config.update({
            "axis": self.axis, "momentum": self.momentum, "epsilon": self.epsilon,
            "center": self.center, "scale": self.scale,
            "beta_initializer": initializers.serialize(self.beta_initializer),
            "gamma_initializer": initializers.serialize(self.gamma_initializer),
            "moving_mean_initializer": initializers.serialize(self.moving_mean_initializer),
            "moving_variance_initializer": initializers.serialize(self.moving_variance_initializer),
            "beta_regularizer": None, "gamma_regularizer": None, "beta_constraint": None,
            "gamma_constraint": None, "synchronized": False, "renorm": False,
            "renorm_clipping": None, "renorm_momentum": self.renorm_momentum,
        })
        return config
