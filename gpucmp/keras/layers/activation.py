"""Activation: applies an activation function ('relu', 'tanh', 'sigmoid', 'softmax', ...)."""
from .. import activations
from .layer import Layer


class Activation(Layer):
    supports_masking = True     # passes a Keras mask on (Keras 3 does)
    def __init__(self, activation, **kwargs):
        self.activation = activations.get(activation)
        super().__init__(**kwargs)

    def plan_layers(self, input_shape):
        return [{"kind": "activation", "in_shape": tuple(input_shape[1:]),
                 "out_shape": tuple(input_shape[1:]), "activation": self.activation}]

    def get_config(self):
        config = super().get_config()
        config["activation"] = self.activation
        return config
