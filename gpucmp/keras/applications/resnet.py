"""ResNet (v1, "Deep Residual Learning for Image Recognition", He et al. 2015) as Keras 3
builds it in ``keras/src/applications/resnet.py``: the same layers, in the same order,
with the same names (``conv1_pad``, ``conv1_conv``, ``conv1_bn``, ``conv1_relu``,
``pool1_pad``, ``pool1_pool``, the stacks ``conv2`` .. ``conv5`` of bottleneck blocks
``convK_blockJ_{0,1,2,3}_{conv,bn}``, ``_1_relu``, ``_2_relu``, ``_add``, ``_out``, then
``avg_pool`` and ``predictions``), so ``model.get_weights()`` lines up with Keras' and a
weights file saved by Keras loads by layer name.

gpucmp cannot download: ``weights`` is None (random initialisation) or the path of a
weights file (a gpucmp or Keras ``.weights.h5`` / ``.h5``), loaded through
``model.load_weights``; ``weights="imagenet"`` is a ValueError saying so. The input
checks are Keras' (``imagenet_utils.obtain_input_shape``): 3 channels when pretrained,
at least 32x32, a static shape with ``include_top=True``. Only channels_last.
"""
import os
import warnings

from .. import activations, layers
from ..keras_tensor import KerasTensor
from ..models.model import Model

DEFAULT_SIZE = 224
MIN_SIZE = 32
BN_EPSILON = 1.001e-5


def _input_shape(input_shape, require_flatten, pretrained):
    """Keras' obtain_input_shape for channels_last (default 224x224x3, min 32x32)."""
    if input_shape is not None:
        input_shape = tuple(input_shape)
    if not pretrained and input_shape and len(input_shape) == 3:
        if input_shape[-1] not in (1, 3):
            warnings.warn("This model usually expects 1 or 3 input channels. However, it was "
                          f"passed an input_shape with {input_shape[-1]} input channels.",
                          stacklevel=3)
        default = (DEFAULT_SIZE, DEFAULT_SIZE, input_shape[-1])
    else:
        default = (DEFAULT_SIZE, DEFAULT_SIZE, 3)
    if input_shape:
        if len(input_shape) != 3:
            raise ValueError("`input_shape` must be a tuple of three integers.")
        if input_shape[-1] != 3 and pretrained:
            raise ValueError(f"The input must have 3 channels; Received `input_shape={input_shape}`")
        if (input_shape[0] is not None and input_shape[0] < MIN_SIZE) or \
                (input_shape[1] is not None and input_shape[1] < MIN_SIZE):
            raise ValueError(f"Input size must be at least {MIN_SIZE}x{MIN_SIZE}; Received: "
                             f"input_shape={input_shape}")
    elif require_flatten:
        input_shape = default
    else:
        input_shape = (None, None, 3)
    if require_flatten and None in input_shape:
        raise ValueError("If `include_top` is True, you should specify a static `input_shape`. "
                         f"Received: input_shape={input_shape}")
    return input_shape


def _check_weights(weights, include_top, classes):
    if weights == "imagenet":
        raise ValueError(
            "weights='imagenet': gpucmp cannot download the ImageNet weights (it never goes "
            "on the network). Download them with Keras (keras.applications.ResNet50("
            "weights='imagenet').save_weights('resnet50.weights.h5')) and pass the file: "
            "weights='resnet50.weights.h5', or use weights=None for a random initialisation.")
    if weights is not None and not (isinstance(weights, (str, os.PathLike))
                                    and os.path.exists(weights)):
        raise ValueError("The `weights` argument should be either `None` (random "
                         "initialization), 'imagenet' (pre-training on ImageNet), or the path "
                         f"to the weights file to be loaded.  Received: weights={weights}")


def residual_block_v1(x, filters, kernel_size=3, stride=1, conv_shortcut=True, name=None):
    """One bottleneck block: 1x1 (stride) -> kxk same -> 1x1 (4*filters), plus the
    shortcut (a 1x1 projection with BN in the first block of a stack)."""
    if conv_shortcut:
        shortcut = layers.Conv2D(4 * filters, 1, strides=stride, name=f"{name}_0_conv")(x)
        shortcut = layers.BatchNormalization(axis=3, epsilon=BN_EPSILON, name=f"{name}_0_bn")(shortcut)
    else:
        shortcut = x
    x = layers.Conv2D(filters, 1, strides=stride, name=f"{name}_1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=BN_EPSILON, name=f"{name}_1_bn")(x)
    x = layers.Activation("relu", name=f"{name}_1_relu")(x)
    x = layers.Conv2D(filters, kernel_size, padding="SAME", name=f"{name}_2_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=BN_EPSILON, name=f"{name}_2_bn")(x)
    x = layers.Activation("relu", name=f"{name}_2_relu")(x)
    x = layers.Conv2D(4 * filters, 1, name=f"{name}_3_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=BN_EPSILON, name=f"{name}_3_bn")(x)
    x = layers.Add(name=f"{name}_add")([shortcut, x])
    return layers.Activation("relu", name=f"{name}_out")(x)


def stack_residual_blocks_v1(x, filters, blocks, stride1=2, name=None):
    x = residual_block_v1(x, filters, stride=stride1, name=f"{name}_block1")
    for i in range(2, blocks + 1):
        x = residual_block_v1(x, filters, conv_shortcut=False, name=f"{name}_block{i}")
    return x


def ResNet(stack_fn, preact, use_bias, include_top=True, weights=None, input_tensor=None,
           input_shape=None, pooling=None, classes=1000, classifier_activation="softmax",
           name="resnet"):
    """The ResNet family's common stem and head around ``stack_fn`` (v1 only: preact=False)."""
    if preact:
        raise NotImplementedError("ResNetV2 (preact=True) is not provided by gpucmp yet")
    _check_weights(weights, include_top, classes)
    if pooling not in (None, "avg", "max"):
        raise ValueError(f"`pooling` must be None, 'avg' or 'max', received pooling={pooling!r}")
    input_shape = _input_shape(input_shape, include_top, pretrained=False)
    if input_tensor is None:
        img_input = layers.Input(shape=input_shape)
    elif isinstance(input_tensor, KerasTensor):
        img_input = input_tensor
    else:
        raise ValueError(f"`input_tensor` must be a KerasTensor (keras.Input), received "
                         f"{type(input_tensor).__name__}")
    x = layers.ZeroPadding2D(padding=((3, 3), (3, 3)), name="conv1_pad")(img_input)
    x = layers.Conv2D(64, 7, strides=2, use_bias=use_bias, name="conv1_conv")(x)
    x = layers.BatchNormalization(axis=3, epsilon=BN_EPSILON, name="conv1_bn")(x)
    x = layers.Activation("relu", name="conv1_relu")(x)
    x = layers.ZeroPadding2D(padding=((1, 1), (1, 1)), name="pool1_pad")(x)
    x = layers.MaxPooling2D(3, strides=2, name="pool1_pool")(x)
    x = stack_fn(x)
    if include_top:
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
        activations.get(classifier_activation)        # a bad name fails here, as in Keras
        x = layers.Dense(classes, activation=classifier_activation, name="predictions")(x)
    elif pooling == "avg":
        x = layers.GlobalAveragePooling2D(name="avg_pool")(x)
    elif pooling == "max":
        x = layers.GlobalMaxPooling2D(name="max_pool")(x)
    model = Model(img_input, x, name=name)
    if weights is not None:
        model.load_weights(weights)
    return model


def ResNet50(include_top=True, weights=None, input_tensor=None, input_shape=None, pooling=None,
             classes=1000, classifier_activation="softmax", name="resnet50"):
    """ResNet50: 3, 4, 6, 3 bottleneck blocks of 64, 128, 256, 512 filters; 25,636,712
    parameters at 224x224x3 with 1000 classes (53,120 of them BN moving statistics).

    As Keras' ``keras.applications.ResNet50`` except that ``weights`` defaults to None
    and must be None or a file (gpucmp cannot download "imagenet")."""
    def stack_fn(x):
        x = stack_residual_blocks_v1(x, 64, 3, stride1=1, name="conv2")
        x = stack_residual_blocks_v1(x, 128, 4, name="conv3")
        x = stack_residual_blocks_v1(x, 256, 6, name="conv4")
        return stack_residual_blocks_v1(x, 512, 3, name="conv5")

    return ResNet(stack_fn, False, True, include_top=include_top, weights=weights,
                  input_tensor=input_tensor, input_shape=input_shape, pooling=pooling,
                  classes=classes, classifier_activation=classifier_activation, name=name)
