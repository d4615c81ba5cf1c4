"""Sequential: a model made of layers added one after another.

The input shape comes from, in order: a leading ``InputLayer`` / ``keras.Input``, the
first layer's ``input_shape=`` / ``input_dim=`` / ``batch_input_shape=``, a first layer
that is an already built model (a GAN's generator), an explicit ``build(shape)``, or
the first data seen by fit/predict. Once it is known, every ``add`` builds the new
layer at once, so a misplaced layer fails where it is added (and is not kept).
"""
from ..keras_tensor import KerasTensor
from ..layers.input_layer import InputLayer
from ..layers.layer import Layer
from .model import Model


class Sequential(Model):
    def __init__(self, layers=None, name=None, trainable=True, **kwargs):
        super().__init__(name=name, trainable=trainable, **kwargs)
        if layers is not None:
            if isinstance(layers, Layer):
                layers = [layers]
            for layer in layers:
                self.add(layer)

    @property
    def layers(self):
        return self._chain()

    def add(self, layer, rebuild=True):
        if isinstance(layer, KerasTensor) and isinstance(layer._layer, InputLayer):
            layer = layer._layer      # keras.Input(...) as the first entry
        if not isinstance(layer, Layer):
            raise ValueError("Only instances of `keras.Layer` can be added to a Sequential "
                             f"model. Received: {layer!r} (of type {type(layer).__name__})")
        if isinstance(layer, InputLayer) and self._layers:
            raise ValueError("An InputLayer can only be the first layer of a Sequential model; "
                             f"'{self.name}' already has layers")
        if any(l.name == layer.name for l in self._layers):
            raise ValueError(f"All layers added to a Sequential model should have unique names. "
                             f"Name '{layer.name}' is already the name of a layer in this model. "
                             "Update the `name` argument to pass a unique name.")
        if layer is self:
            raise ValueError("A model cannot be added to itself")
        self._layers.append(layer)
        try:
            if rebuild:
                self._maybe_build()
        except Exception:
            self._layers.pop()
            raise
        self._invalidate_plans()

    def pop(self, rebuild=True):
        chain = self._chain()
        if not chain:
            raise TypeError("There are no layers in the model.")
        layer = chain[-1]
        self._layers.remove(layer)
        self.built = False
        self._output_batch_shape = None
        self._invalidate_plans()
        if rebuild and self._chain():
            self._maybe_build()
        return layer

    def _declared_input_shape_of_model(self):
        if self._layers and isinstance(self._layers[0], InputLayer):
            return self._layers[0].batch_shape
        chain = self._chain()
        if not chain:
            return None
        first = chain[0]
        if first._declared_input_shape is not None:
            return first._declared_input_shape
        if isinstance(first, Model) and first.built:
            return first.input_shape
        if first.built and first._build_input_shape is not None:
            return first._build_input_shape
        return self._input_batch_shape

    def _maybe_build(self):
        shape = self._declared_input_shape_of_model()
        if shape is not None and self._chain():
            self.build(shape)

    @classmethod
    def from_config(cls, config):
        from .. import layers as layers_mod
        model = cls(name=config.get("name"))
        for layer_config in config.get("layers", []):
            model.add(layers_mod.deserialize(layer_config), rebuild=False)
        shape = config.get("build_input_shape")
        if shape is not None:
            model.build(tuple(shape))
        else:
            model._maybe_build()
        model._trainable = bool(config.get("trainable", True))   # layers keep their own flags
        return model
