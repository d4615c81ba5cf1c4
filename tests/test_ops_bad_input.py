"""Bad inputs to gpucmp.ops raise a clear exception, never crash.

What it checks: each wrong call (wrong rank, mismatched channels, a kernel larger
than the input under 'valid', zero / negative / non-integer strides, unknown padding,
activation, kind, dtype or backend, complex / string / object arrays, empty batches,
sparse labels out of range or not integers, mismatched label shapes, bad optimizer
state) raises ValueError or TypeError whose message names the argument and, where
shapes are involved, prints them. A few malformed calls straight into
gpucmp._core.run_op check that the C boundary answers with exceptions too.
"""
import re

import numpy as np
import pytest

from gpucmp import _core, ops

rng = np.random.default_rng()


def f32(*shape):
    return rng.standard_normal(shape).astype(np.float32)


X = f32(2, 5, 5, 3)
K = f32(3, 3, 3, 4)
Z = f32(3, 4)

# (id, call, exception, substrings the message must contain)
CASES = [
    # ---- ranks
    ("conv2d x rank 3", lambda: ops.conv2d(f32(5, 5, 3), K), ValueError, ["x", "(5, 5, 3)"]),
    ("conv2d kernel rank 2", lambda: ops.conv2d(X, f32(3, 3)), ValueError, ["kernel", "(3, 3)"]),
    ("max_pool2d x rank 2", lambda: ops.max_pool2d(f32(4, 4)), ValueError, ["x", "(4, 4)"]),
    ("avg_pool2d x rank 5", lambda: ops.avg_pool2d(f32(1, 2, 4, 4, 1)), ValueError,
     ["x", "(1, 2, 4, 4, 1)"]),
    ("gemm a rank 1", lambda: ops.gemm(f32(3), f32(3, 2)), ValueError, ["a", "(3,)"]),
    ("gemm b rank 3", lambda: ops.gemm(f32(2, 3), f32(3, 2, 1)), ValueError, ["b", "(3, 2, 1)"]),
    ("softmax_xent logits rank 1", lambda: ops.softmax_cross_entropy(f32(4), np.array([1])),
     ValueError, ["logits", "(4,)"]),
    ("activation of a scalar", lambda: ops.activation(np.float32(1.0), "relu"), ValueError,
     ["x", "()"]),
    # ---- shapes that do not fit together
    ("conv2d channels", lambda: ops.conv2d(X, f32(3, 3, 2, 4)), ValueError,
     ["kernel", "(3, 3, 2, 4)", "(2, 5, 5, 3)"]),
    ("conv2d kernel larger than input (valid)", lambda: ops.conv2d(f32(1, 2, 2, 3), K),
     ValueError, ["kernel", "(2, 2)", "valid"]),
    ("conv2d dilated kernel larger than input", lambda: ops.conv2d(
        f32(1, 4, 4, 3), K, dilation_rate=2), ValueError, ["dilation", "(4, 4)", "valid"]),
    ("conv2d bias length", lambda: ops.conv2d(X, K, f32(5)), ValueError, ["bias", "(5,)"]),
    ("max_pool larger than input", lambda: ops.max_pool2d(f32(1, 2, 2, 1), 3), ValueError,
     ["pool_size", "(2, 2)"]),
    ("gemm inner dimensions", lambda: ops.gemm(f32(2, 3), f32(4, 5)), ValueError,
     ["a (2, 3)", "b (4, 5)"]),
    ("gemm inner dimensions transposed", lambda: ops.gemm(f32(2, 3), f32(4, 3), trans_a=True,
                                                          trans_b=True),
     ValueError, ["transposed", "(2, 3)", "(4, 3)"]),
    ("gemm bias length", lambda: ops.gemm(f32(2, 3), f32(3, 4), f32(3)), ValueError,
     ["bias", "(3,)"]),
    ("gemm c shape", lambda: ops.gemm(f32(2, 3), f32(3, 4), c=f32(4, 2), beta=1.0), ValueError,
     ["c", "(4, 2)", "(2, 4)"]),
    ("gemm beta without c", lambda: ops.gemm(f32(2, 3), f32(3, 4), beta=0.5), ValueError, ["c"]),
    ("conv2d_backward_data dy shape", lambda: ops.conv2d_backward_data(
        f32(2, 4, 4, 4), K, (2, 5, 5, 3)), ValueError, ["dy", "(2, 4, 4, 4)", "(2, 3, 3, 4)"]),
    ("conv2d_backward_data input_shape", lambda: ops.conv2d_backward_data(
        f32(2, 3, 3, 4), K, (5, 5, 3)), ValueError, ["input_shape"]),
    ("conv2d_backward_data channels", lambda: ops.conv2d_backward_data(
        f32(2, 3, 3, 4), K, (2, 5, 5, 2)), ValueError, ["kernel", "(3, 3, 3, 4)"]),
    ("conv2d_backward_data accumulate_into shape", lambda: ops.conv2d_backward_data(
        f32(2, 3, 3, 4), K, (2, 5, 5, 3), accumulate_into=f32(2, 5, 5, 4)), ValueError,
     ["accumulate_into", "(2, 5, 5, 4)", "(2, 5, 5, 3)"]),
    ("conv2d_backward_filter dy shape", lambda: ops.conv2d_backward_filter(
        X, f32(2, 3, 3, 4), (2, 2)), ValueError, ["dy", "(2, 3, 3, 4)", "(2, 4, 4, 4)"]),
    ("max_pool2d_backward dy shape", lambda: ops.max_pool2d_backward(
        f32(1, 4, 4, 2), f32(1, 3, 3, 2)), ValueError, ["dy", "(1, 3, 3, 2)", "(1, 2, 2, 2)"]),
    ("avg_pool2d_backward dy shape", lambda: ops.avg_pool2d_backward(
        f32(1, 3, 3, 2), (1, 4, 4, 2)), ValueError, ["dy", "(1, 3, 3, 2)", "(1, 2, 2, 2)"]),
    ("activation_backward dy shape", lambda: ops.activation_backward(
        f32(3, 4), f32(4, 3), "tanh"), ValueError, ["dy", "(4, 3)", "(3, 4)"]),
    ("bias_grad of a scalar", lambda: ops.bias_grad(np.float32(2.0)), ValueError, ["dy"]),
    # ---- window parameters
    ("conv2d zero stride", lambda: ops.conv2d(X, K, strides=0), ValueError, ["strides", "0"]),
    ("conv2d negative stride", lambda: ops.conv2d(X, K, strides=(1, -2)), ValueError,
     ["strides", "-2"]),
    ("conv2d float stride", lambda: ops.conv2d(X, K, strides=1.5), TypeError, ["strides"]),
    ("conv2d three strides", lambda: ops.conv2d(X, K, strides=(1, 1, 1)), TypeError,
     ["strides"]),
    ("conv2d zero dilation", lambda: ops.conv2d(X, K, dilation_rate=0), ValueError,
     ["dilation_rate"]),
    ("max_pool zero pool_size", lambda: ops.max_pool2d(X, 0), ValueError, ["pool_size"]),
    ("avg_pool negative stride", lambda: ops.avg_pool2d(X, 2, -1), ValueError, ["strides"]),
    ("conv2d padding 'full'", lambda: ops.conv2d(X, K, padding="full"), ValueError,
     ["padding", "full"]),
    ("max_pool padding None", lambda: ops.max_pool2d(X, 2, padding=None), ValueError,
     ["padding"]),
    # ---- names
    ("unknown activation", lambda: ops.activation(Z, "gelu"), ValueError, ["activation", "gelu"]),
    ("unknown activation in conv2d", lambda: ops.conv2d(X, K, activation="swish"), ValueError,
     ["activation", "swish"]),
    ("softmax epilogue in gemm", lambda: ops.gemm(Z, f32(4, 2), activation="softmax"),
     ValueError, ["softmax"]),
    ("unknown regression kind", lambda: ops.regression_loss(Z, Z, "huber"), ValueError,
     ["kind", "huber"]),
    ("unknown accuracy kind", lambda: ops.accuracy(Z, Z, "top5"), ValueError, ["kind", "top5"]),
    ("unknown backend", lambda: ops.activation(Z, "relu", backend="tpu"), ValueError,
     ["backend", "tpu"]),
    ("backend of the wrong type", lambda: ops.activation(Z, "relu", backend=3), TypeError,
     ["backend"]),
    ("unknown dtype", lambda: ops.activation(Z, "relu", dtype="float64"), ValueError,
     ["dtype", "float64"]),
    ("cast to int", lambda: ops.cast(Z, "int32"), ValueError, ["dtype", "int32"]),
    # ---- array dtypes
    ("complex input", lambda: ops.conv2d(X.astype(np.complex64), K), TypeError,
     ["x", "complex64"]),
    ("complex kernel", lambda: ops.conv2d(X, K.astype(complex)), TypeError,
     ["kernel", "complex128"]),
    ("string input", lambda: ops.activation(np.array([["a", "b"]]), "relu"), TypeError, ["x"]),
    ("object input", lambda: ops.gemm(np.array([[object()]]), f32(1, 1)), TypeError, ["a"]),
    ("ragged list", lambda: ops.activation([[1.0, 2.0], [3.0]], "relu"), TypeError, ["x"]),
    ("None input", lambda: ops.activation(None, "relu"), TypeError, ["x"]),
    ("string labels", lambda: ops.softmax_cross_entropy(Z, np.array(["a", "b", "c"])),
     TypeError, ["labels"]),
    # ---- empty arrays
    ("empty batch conv2d", lambda: ops.conv2d(f32(0, 5, 5, 3), K), ValueError,
     ["x", "empty", "(0, 5, 5, 3)"]),
    ("empty batch loss", lambda: ops.softmax_cross_entropy(f32(0, 4), np.zeros(0, np.int32)),
     ValueError, ["logits", "empty", "(0, 4)"]),
    ("no classes", lambda: ops.sigmoid_binary_cross_entropy(f32(3, 0), f32(3, 0)), ValueError,
     ["logits", "(3, 0)"]),
    ("empty gemm result", lambda: ops.gemm(f32(0, 3), f32(3, 2)), ValueError, ["(0, 3)"]),
    ("empty dropout", lambda: ops.dropout(f32(0), 0.5, 1), ValueError, ["x", "empty"]),
    # ---- labels
    ("sparse label out of range", lambda: ops.softmax_cross_entropy(Z, np.array([0, 4, 1])),
     ValueError, ["label 4", "row 1", "(3, 4)"]),
    ("negative sparse label", lambda: ops.cross_entropy_from_probs(
        np.abs(Z), np.array([0, 1, -1])), ValueError, ["label -1", "row 2"]),
    ("sparse labels not integers", lambda: ops.softmax_cross_entropy(
        Z, np.array([0.0, 1.5, 2.0])), ValueError, ["labels", "row 1", "1.5"]),
    ("sparse accuracy label out of range", lambda: ops.accuracy(Z, np.array([9, 0, 0])),
     ValueError, ["label 9", "row 0"]),
    ("dense label shape", lambda: ops.softmax_cross_entropy(Z, f32(3, 5)), ValueError,
     ["labels", "(3, 5)", "(3, 4)"]),
    ("sparse label count", lambda: ops.softmax_cross_entropy(Z, np.array([0, 1])), ValueError,
     ["labels", "(2,)", "(3, 4)"]),
    ("sparse labels for a binary loss", lambda: ops.sigmoid_binary_cross_entropy(
        Z, np.array([0, 1, 1])), ValueError, ["labels", "(3,)", "(3, 4)"]),
    ("regression target shape", lambda: ops.mse(Z, f32(4, 3)), ValueError,
     ["target", "(4, 3)", "(3, 4)"]),
    # ---- scalars
    ("dropout rate 1", lambda: ops.dropout(Z, 1.0, 0), ValueError, ["rate"]),
    ("dropout negative rate", lambda: ops.dropout(Z, -0.1, 0), ValueError, ["rate"]),
    ("dropout NaN rate", lambda: ops.dropout(Z, float("nan"), 0), ValueError, ["rate"]),
    ("dropout negative seed", lambda: ops.dropout(Z, 0.5, -1), ValueError, ["seed"]),
    ("dropout seed too large", lambda: ops.dropout(Z, 0.5, 1 << 64), ValueError, ["seed"]),
    ("dropout float seed", lambda: ops.dropout(Z, 0.5, 1.5), TypeError, ["seed"]),
    ("gemm infinite alpha", lambda: ops.gemm(Z, f32(4, 2), alpha=float("inf")), ValueError,
     ["alpha"]),
    ("loss grad_scale string", lambda: ops.mse(Z, Z, grad_scale="1"), TypeError, ["grad_scale"]),
    # ---- optimizer state (updated in place)
    ("adam float64 weights", lambda: ops.adam_update(
        np.zeros(4), f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32), t=1),
     TypeError, ["w", "float64"]),
    ("adam list weights", lambda: ops.adam_update(
        [0.0] * 4, f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32), t=1),
     TypeError, ["w"]),
    ("adam mixed state dtypes", lambda: ops.adam_update(
        f32(4), f32(4), np.zeros(4, np.float16), np.zeros(4, np.float32), t=1),
     TypeError, ["m", "float16"]),
    ("adam m shape", lambda: ops.adam_update(
        f32(4), f32(4), np.zeros(5, np.float32), np.zeros(4, np.float32), t=1),
     ValueError, ["m", "(5,)", "(4,)"]),
    ("adam g shape", lambda: ops.adam_update(
        f32(4), f32(2, 2), np.zeros(4, np.float32), np.zeros(4, np.float32), t=1),
     ValueError, ["g", "(2, 2)", "(4,)"]),
    ("adam t = 0", lambda: ops.adam_update(
        f32(4), f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32), t=0),
     ValueError, ["t"]),
    ("adam beta_1 = 1", lambda: ops.adam_update(
        f32(4), f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32), t=1, beta_1=1.0),
     ValueError, ["beta_1"]),
    ("adam non-contiguous w", lambda: ops.adam_update(
        f32(8)[::2], f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32), t=1),
     ValueError, ["w", "contiguous"]),
    ("adam read-only w", lambda: ops.adam_update(
        np.frombuffer(np.zeros(4, np.float32).tobytes(), np.float32), f32(4),
        np.zeros(4, np.float32), np.zeros(4, np.float32), t=1), ValueError, ["w", "writable"]),
    ("adam dtype argument disagrees", lambda: ops.adam_update(
        f32(4), f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32), t=1,
        dtype="float16"), TypeError, ["w", "float16"]),
    ("sgd momentum without m", lambda: ops.sgd_update(f32(4), f32(4), momentum=0.9),
     ValueError, ["m", "momentum"]),
    ("sgd momentum > 1", lambda: ops.sgd_update(f32(4), f32(4), f32(4), momentum=1.5),
     ValueError, ["momentum"]),
    ("rmsprop rho = 1", lambda: ops.rmsprop_update(f32(4), f32(4), np.zeros(4, np.float32),
                                                   rho=1.0), ValueError, ["rho"]),
    # ---- embedding
    ("embedding index out of range", lambda: ops.embedding(f32(5, 3), np.array([0, 5, 1])),
     ValueError, ["indices", "value 5", "position 1", "[0, 5)", "(5, 3)"]),
    ("embedding negative index", lambda: ops.embedding(f32(5, 3), np.array([[0, 1], [-1, 2]])),
     ValueError, ["indices", "value -1", "position 2", "(1, 0)"]),
    ("embedding float indices", lambda: ops.embedding(f32(5, 3), np.array([0.0, 1.0])),
     TypeError, ["indices", "float64"]),
    ("embedding bool indices", lambda: ops.embedding(f32(5, 3), np.array([True])),
     TypeError, ["indices", "bool"]),
    ("embedding table rank 1", lambda: ops.embedding(f32(5), np.array([0])), ValueError,
     ["table", "(5,)"]),
    ("embedding table rank 3", lambda: ops.embedding(f32(5, 3, 2), np.array([0])), ValueError,
     ["table", "(5, 3, 2)"]),
    ("embedding empty indices", lambda: ops.embedding(f32(5, 3), np.zeros(0, np.int32)),
     ValueError, ["indices", "empty"]),
    ("embedding indices rank 6", lambda: ops.embedding(f32(5, 3), np.zeros((1,) * 6, np.int32)),
     ValueError, ["indices", "rank"]),
    ("embedding float table as int32", lambda: ops.embedding(f32(5, 3), [0], dtype="int32"),
     TypeError, ["table", "int32"]),
    ("embedding_backward index out of range", lambda: ops.embedding_backward(
        f32(3, 4), np.array([0, 1, 9]), 9), ValueError, ["indices", "value 9", "position 2",
                                                         "[0, 9)"]),
    ("embedding_backward dy shape", lambda: ops.embedding_backward(
        f32(2, 4), np.array([0, 1, 2]), 5), ValueError, ["dy", "(2, 4)", "(3,)"]),
    ("embedding_backward vocab_size 0", lambda: ops.embedding_backward(
        f32(3, 4), np.array([0, 0, 0]), 0), ValueError, ["vocab_size"]),
    ("embedding_backward float vocab_size", lambda: ops.embedding_backward(
        f32(3, 4), np.array([0, 0, 0]), 5.0), TypeError, ["vocab_size"]),
    ("embedding_backward float indices", lambda: ops.embedding_backward(
        f32(3, 4), np.array([0.5, 0, 0]), 5), TypeError, ["indices", "float64"]),
    # ---- graph ops, through gpucmp.ops
    ("add element counts", lambda: ops.add(Z, f32(5)), ValueError, ["x1", "(5,)", "(3, 4)"]),
    ("add tanh", lambda: ops.add(Z, Z, activation="tanh"), ValueError, ["activation", "tanh", "relu"]),
    ("add one array", lambda: ops.add(Z), ValueError, ["add", "2 to 8"]),
    ("add nine arrays", lambda: ops.add(*[Z] * 9), ValueError, ["add", "2 to 8"]),
    ("add out shape", lambda: ops.add(Z, Z, out=f32(5)), ValueError, ["out", "(5,)"]),
    ("mul element counts", lambda: ops.mul(Z, f32(4)), ValueError, ["b", "(4,)", "(3, 4)"]),
    ("batchnorm gamma channels", lambda: ops.batchnorm_forward(
        X, np.zeros(3, np.float32), np.ones(3, np.float32), gamma=f32(5)), ValueError,
     ["gamma", "(5,)", "(3,)", "(2, 5, 5, 3)"]),
    ("batchnorm moving_mean channels", lambda: ops.batchnorm_forward(
        X, np.zeros(4, np.float32), np.ones(3, np.float32)), ValueError, ["moving_mean", "(4,)", "(2, 5, 5, 3)"]),
    ("batchnorm moving_variance float64", lambda: ops.batchnorm_forward(
        X, np.zeros(3, np.float32), np.ones(3)), TypeError, ["moving_variance", "float32"]),
    ("batchnorm sigmoid", lambda: ops.batchnorm_forward(
        X, np.zeros(3, np.float32), np.ones(3, np.float32), activation="sigmoid"), ValueError,
     ["activation", "sigmoid"]),
    ("batchnorm residual shape", lambda: ops.batchnorm_forward(
        X, np.zeros(3, np.float32), np.ones(3, np.float32), residual=f32(2, 5, 5, 4)), ValueError,
     ["residual", "(2, 5, 5, 4)", "(2, 5, 5, 3)"]),
    ("batchnorm negative epsilon", lambda: ops.batchnorm_forward(
        X, np.zeros(3, np.float32), np.ones(3, np.float32), epsilon=-1.0), ValueError, ["epsilon"]),
    ("batchnorm_backward relu without y", lambda: ops.batchnorm_backward(
        X, X, f32(2, 3), activation="relu"), ValueError, ["y", "relu"]),
    ("batchnorm_backward save shape", lambda: ops.batchnorm_backward(X, X, f32(2, 4)), ValueError,
     ["save", "(2, 4)", "(2, 3)"]),
    ("batchnorm_backward dy shape", lambda: ops.batchnorm_backward(X, f32(2, 5, 5, 4), f32(2, 3)), ValueError,
     ["dy", "(2, 5, 5, 4)", "(2, 5, 5, 3)"]),
    ("pad2d negative", lambda: ops.pad2d(X, ((1, -1), (0, 0))), ValueError, ["padding", "-1"]),
    ("pad2d x rank 3", lambda: ops.pad2d(f32(5, 5, 3)), ValueError, ["x", "(5, 5, 3)"]),
    ("pad2d_backward dy too small", lambda: ops.pad2d_backward(f32(1, 2, 2, 1), 2), ValueError,
     ["dy", "(1, 2, 2, 1)"]),
    ("slice_cols out of range", lambda: ops.slice_cols(Z, 3, 2), ValueError, ["slice_cols", "[3, 5)", "(3, 4)"]),
    ("slice_cols negative offset", lambda: ops.slice_cols(Z, -1, 2), ValueError, ["offset", "-1"]),
    ("concat shapes", lambda: ops.concat([Z, f32(2, 4)]), ValueError, ["arrays[1]", "(2, 4)", "(3, 4)"]),
    ("concat nine arrays", lambda: ops.concat([Z] * 9), ValueError, ["concat", "8"]),
    # ---- graph ops, straight into the core's validator
    ("core conv2d_fwd accumulate", lambda: _core.run_op(
        "conv2d_fwd", "cpu", (X, K, None), (f32(2, 3, 3, 4),), {"accumulate": True}), ValueError,
     ["conv2d_fwd", "accumulate", "conv2d_bwd_data only"]),
    ("core add element counts", lambda: _core.run_op("add", "cpu", (Z, f32(5)) + (None,) * 6, (Z.copy(),), {}),
     ValueError, ["x1", "(5,)", "(3, 4)"]),
    ("core add y element counts", lambda: _core.run_op("add", "cpu", (Z, Z) + (None,) * 6, (f32(13),), {}),
     ValueError, ["y", "(13,)", "(3, 4)"]),
    ("core add sigmoid", lambda: _core.run_op("add", "cpu", (Z, Z) + (None,) * 6, (Z.copy(),), {"act": "sigmoid"}),
     ValueError, ["add", "linear or relu"]),
    ("core add x1 missing", lambda: _core.run_op("add", "cpu", (Z,) + (None,) * 7, (Z.copy(),), {}), ValueError,
     ["x1", "required"]),
    ("core mul dtypes", lambda: _core.run_op("mul", "cpu", (Z, Z.astype(np.float16)), (Z.copy(),), {}), TypeError,
     ["mul", "float32", "float16"]),
    ("core batchnorm gamma channels", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, f32(5), None, None), (X.copy(), f32(3), f32(3), f32(2, 3)), {}), ValueError,
     ["gamma", "(5,)", "(3,)", "(2, 5, 5, 3)"]),
    ("core batchnorm gamma float16", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, f32(3).astype(np.float16), None, None), (X.copy(), f32(3), f32(3), f32(2, 3)),
        {}), TypeError, ["gamma", "float32", "float16"]),
    ("core batchnorm y is x", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, None, None, None), (X, f32(3), f32(3), f32(2, 3)), {}), ValueError,
     ["y", "x", "(2, 5, 5, 3)"]),
    ("core batchnorm save shape", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, None, None, None), (X.copy(), f32(3), f32(3), f32(3, 2)), {}), ValueError,
     ["save", "(3, 2)", "(2, 3)"]),
    ("core batchnorm residual dtype", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, None, None, X.astype(np.float16)), (X.copy(), f32(3), f32(3), f32(2, 3)), {}),
     TypeError, ["residual", "float16", "float32"]),
    ("core batchnorm tanh", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, None, None, None), (X.copy(), f32(3), f32(3), f32(2, 3)), {"act": "tanh"}),
     ValueError, ["batchnorm_fwd", "linear or relu"]),
    ("core batchnorm momentum", lambda: _core.run_op(
        "batchnorm_fwd", "cpu", (X, None, None, None), (X.copy(), f32(3), f32(3), f32(2, 3)), {"momentum": 2.0}),
     ValueError, ["momentum"]),
    ("core batchnorm_bwd relu without y", lambda: _core.run_op(
        "batchnorm_bwd", "cpu", (X, X, None, f32(2, 3), None, None), (X.copy(), None, None, None), {"act": "relu"}),
     ValueError, ["y", "relu"]),
    ("core batchnorm_bwd mask_from_x with y", lambda: _core.run_op(
        "batchnorm_bwd", "cpu", (X, X, None, f32(2, 3), X, None), (X.copy(), None, None, None),
        {"act": "relu", "mask_from_x": True}), ValueError, ["y", "mask_from_x", "(2, 5, 5, 3)"]),
    ("core batchnorm_bwd mask_from_x linear", lambda: _core.run_op(
        "batchnorm_bwd", "cpu", (X, X, None, f32(2, 3), None, None), (X.copy(), None, None, None),
        {"mask_from_x": True}), ValueError, ["mask_from_x", "relu"]),
    ("core batchnorm_bwd beta without mask_from_x", lambda: _core.run_op(
        "batchnorm_bwd", "cpu", (X, X, None, f32(2, 3), X, f32(3)), (X.copy(), None, None, None),
        {"act": "relu"}), ValueError, ["beta", "mask_from_x"]),
    ("core batchnorm_bwd beta channels", lambda: _core.run_op(
        "batchnorm_bwd", "cpu", (X, X, None, f32(2, 3), None, f32(4)), (X.copy(), None, None, None),
        {"act": "relu", "mask_from_x": True}), ValueError, ["beta", "(4,)", "(3,)"]),
    ("core batchnorm_bwd dgamma channels", lambda: _core.run_op(
        "batchnorm_bwd", "cpu", (X, X, None, f32(2, 3), None, None), (None, f32(4), None, None), {}), ValueError,
     ["dgamma", "(4,)", "(2, 5, 5, 3)"]),
    ("core maxpool pads not below the pool", lambda: _core.run_op(
        "maxpool2d_fwd", "cpu", (X,), (f32(2, 3, 3, 3),), {"pool_size": 2, "pads_h": (2, 0)}),
     ValueError, ["pads", "top 2", "pool_size (2, 2)"]),
    ("core maxpool pads with same", lambda: _core.run_op(
        "maxpool2d_fwd", "cpu", (X,), (f32(2, 3, 3, 3),), {"pool_size": 2, "padding": "same", "pads_w": (0, 1)}),
     ValueError, ["pads", "valid"]),
    ("core pad2d negative", lambda: _core.run_op("pad2d_fwd", "cpu", (X,), (f32(2, 5, 5, 3),), {"top": -1}),
     ValueError, ["padding", "top=-1"]),
    ("core pad2d y shape", lambda: _core.run_op("pad2d_fwd", "cpu", (X,), (f32(2, 6, 5, 3),), {"top": 1, "bottom": 1}),
     ValueError, ["y", "(2, 6, 5, 3)", "(2, 7, 5, 3)"]),
    ("core pad2d_bwd dy shape", lambda: _core.run_op("pad2d_bwd", "cpu", (X,), (X.copy(),), {"left": 2}),
     ValueError, ["dy", "(2, 5, 5, 3)", "(2, 5, 7, 3)"]),
    ("core slice_cols out of range", lambda: _core.run_op("slice_cols", "cpu", (Z,), (f32(3, 2),), {"offset": 3}),
     ValueError, ["slice_cols", "(3, 2)", "(3, 4)"]),
    ("core slice_cols negative", lambda: _core.run_op("slice_cols", "cpu", (Z,), (f32(3, 2),), {"offset": -1}),
     ValueError, ["slice_cols", "(3, 4)"]),
    ("core concat rows", lambda: _core.run_op("concat", "cpu", (Z, f32(2, 2)) + (None,) * 6, (f32(3, 6),), {}),
     ValueError, ["x1", "(2, 2)", "(3, 4)"]),
    ("core concat y shape", lambda: _core.run_op("concat", "cpu", (Z, f32(3, 2)) + (None,) * 6, (f32(3, 5),), {}),
     ValueError, ["y", "(3, 5)", "(3, 6)"]),
]


@pytest.mark.parametrize("call,exc,needles", [pytest.param(c, e, n, id=i) for i, c, e, n in CASES])
def test_bad_input_raises_a_clear_error(call, exc, needles):
    with pytest.raises((ValueError, TypeError)) as info:
        call()
    assert info.type is exc or issubclass(info.type, exc), \
        f"raised {info.type.__name__}, expected {exc.__name__}: {info.value}"
    text = str(info.value)
    for needle in needles:
        assert needle in text, f"message {text!r} does not mention {needle!r}"


def test_state_is_untouched_when_the_call_is_rejected():
    w, m, v = f32(4), np.zeros(4, np.float32), np.zeros(4, np.float32)
    before = w.copy()
    with pytest.raises(ValueError):
        ops.adam_update(w, f32(4), m, v, t=0)
    assert np.array_equal(w, before)


def test_valid_edge_cases_are_accepted():
    # what the checks above must NOT reject
    assert ops.conv2d(f32(1, 2, 2, 3), K, padding="same").shape == (1, 2, 2, 4)  # k > in, same
    assert ops.conv2d(X, K, strides=(3, 2), padding="SAME").shape == (2, 2, 3, 4)
    assert ops.max_pool2d(f32(1, 2, 2, 1), 3, padding="same").shape == (1, 1, 1, 1)
    loss, _ = ops.softmax_cross_entropy(Z, np.array([[0], [3], [1]]))  # (rows, 1) labels
    assert loss.shape == (3,)
    loss, _ = ops.softmax_cross_entropy(Z, np.array([0.0, 3.0, 1.0]))  # integral floats
    assert loss.shape == (3,)
    loss, grad = ops.sigmoid_binary_cross_entropy(f32(2, 3, 4), f32(2, 3, 4))  # rank 3
    assert loss.shape == (2, 3) and grad.shape == (2, 3, 4)
    assert ops.gemm(f32(2, 0), f32(0, 3), f32(3)).shape == (2, 3)  # K = 0
    assert ops.dropout(np.float32(2.0), 0.0, (1 << 64) - 1).shape == ()
    assert ops.activation(np.arange(6).reshape(2, 3), "relu").dtype == np.float32  # ints ok
    assert ops.conv2d(X.astype(np.float64), K.T.T).dtype == np.float32
    assert ops.conv2d(np.asfortranarray(X), K).shape == (2, 3, 3, 4)  # non-contiguous ok


# ---- malformed calls straight into the C boundary: exceptions, never a crash

CORE_CASES = [
    ("unknown op", lambda: _core.run_op("conv3d", "cpu", (), (), {})),
    ("unknown backend", lambda: _core.run_op("act_fwd", "nope", (Z,), (Z.copy(),), {})),
    ("wrong number of inputs", lambda: _core.run_op("act_fwd", "cpu", (Z, Z), (Z.copy(),), {})),
    ("wrong number of outputs", lambda: _core.run_op("act_fwd", "cpu", (Z,), (), {})),
    ("inputs not a tuple", lambda: _core.run_op("act_fwd", "cpu", Z, (Z.copy(),), {})),
    ("missing required input", lambda: _core.run_op("act_fwd", "cpu", (None,), (Z.copy(),), {})),
    ("float64 array", lambda: _core.run_op("act_fwd", "cpu", (Z.astype(np.float64),),
                                           (Z.copy(),), {})),
    ("mixed float dtypes", lambda: _core.run_op("act_fwd", "cpu", (Z,),
                                                (Z.astype(np.float16),), {})),
    ("non-contiguous input", lambda: _core.run_op("act_fwd", "cpu", (f32(4, 6)[:, ::2],),
                                                  (Z.copy(),), {})),
    ("read-only output", lambda: _core.run_op(
        "act_fwd", "cpu", (Z,), (np.frombuffer(Z.tobytes(), np.float32).reshape(3, 4),), {})),
    ("output shape", lambda: _core.run_op("act_fwd", "cpu", (Z,), (f32(4, 3),), {})),
    ("unknown activation", lambda: _core.run_op("act_fwd", "cpu", (Z,), (Z.copy(),),
                                                {"act": "gelu"})),
    ("params not a dict", lambda: _core.run_op("act_fwd", "cpu", (Z,), (Z.copy(),), [1])),
    ("conv channels", lambda: _core.run_op("conv2d_fwd", "cpu", (X, f32(3, 3, 2, 4), None),
                                           (f32(2, 3, 3, 4),), {})),
    ("conv zero stride", lambda: _core.run_op("conv2d_fwd", "cpu", (X, K, None),
                                              (f32(2, 3, 3, 4),), {"strides": (0, 1)})),
    ("sparse label out of range", lambda: _core.run_op(
        "softmax_xent", "cpu", (Z, np.array([0, 7, 1], np.int32)), (f32(3), None), {})),
    ("adam t = 0", lambda: _core.run_op("adam", "cpu", (f32(4),), (f32(4), f32(4), f32(4)),
                                        {"t": 0})),
    ("embedding float32 indices", lambda: _core.run_op(
        "embedding_fwd", "cpu", (Z, np.array([0.0, 1.0], np.float32)), (f32(2, 4),), {})),
    ("embedding table rank 3", lambda: _core.run_op(
        "embedding_fwd", "cpu", (f32(3, 4, 1), np.array([0, 1], np.int32)), (f32(2, 4),), {})),
    ("embedding output shape", lambda: _core.run_op(
        "embedding_fwd", "cpu", (Z, np.array([0, 1], np.int32)), (f32(2, 3),), {})),
    ("embedding output dtype", lambda: _core.run_op(
        "embedding_fwd", "cpu", (Z, np.array([0, 1], np.int32)), (np.zeros((2, 4), np.float16),),
        {})),
    ("embedding_bwd int32 dy", lambda: _core.run_op(
        "embedding_bwd", "cpu", (np.zeros((2, 4), np.int32), np.array([0, 1], np.int32)),
        (f32(3, 4),), {})),
    ("embedding_bwd dy shape", lambda: _core.run_op(
        "embedding_bwd", "cpu", (f32(2, 5), np.array([0, 1], np.int32)), (f32(3, 4),), {})),
]


@pytest.mark.parametrize("call", [pytest.param(c, id=i) for i, c in CORE_CASES])
def test_core_rejects_malformed_calls(call):
    with pytest.raises((ValueError, TypeError, NotImplementedError, KeyError)) as info:
        call()
    assert str(info.value), "the exception has no message"
    assert not re.search(r"error return without exception|NULL result", str(info.value))


# ---- an out-of-range index that only the backend can see (the core's own check)

@pytest.mark.parametrize("backend", [pytest.param(b, marks=[pytest.mark.cuda] if b.startswith("cuda")
                                                  else []) for b in _core.backends()])
def test_embedding_index_out_of_range_in_the_core(backend):
    table = f32(5, 3)
    for idx, value, pos in ((np.array([[0, 4], [5, 1]], np.int32), 5, 2),
                            (np.array([1, -3, 7, -3], np.int32), -3, 1)):
        with pytest.raises(ValueError) as info:
            _core.run_op("embedding_fwd", backend, (table, idx), (f32(*idx.shape, 3),), {})
        assert f"indices: value {value} at position {pos} is outside [0, 5)" in str(info.value)
        with pytest.raises(ValueError) as info:
            _core.run_op("embedding_bwd", backend, (f32(*idx.shape, 3), idx), (f32(5, 3),), {})
        assert f"indices: value {value} at position {pos} is outside [0, 5)" in str(info.value)
    # the next good call is not affected by the failed ones
    out = f32(2, 3)
    _core.run_op("embedding_fwd", backend, (table, np.array([4, 0], np.int32)), (out,), {})
    assert np.array_equal(out, table[[4, 0]])


def test_vendor_impls_are_named_and_unavailable_on_the_cpu():
    """impl='cublas' / 'cudnn' select the vendor baselines; on the CPU they do not exist:
    NotImplementedError naming the cause, and vendor_available says False. A wrong name
    for the op is a ValueError."""
    a = f32(4, 4)
    with pytest.raises(NotImplementedError, match="vendor.*GPU backend"):
        ops.gemm(a, a, impl="cublas", backend="cpu")
    with pytest.raises(NotImplementedError, match="vendor.*GPU backend"):
        ops.conv2d(X, K, impl="cudnn", backend="cpu")
    with pytest.raises(ValueError, match="impl: expected 'own' or 'cudnn'"):
        ops.conv2d(X, K, impl="cublas", backend="cpu")
    with pytest.raises(ValueError, match="impl: expected 'own' or 'cublas'"):
        ops.gemm(a, a, impl="cudnn", backend="cpu")
    assert not ops.vendor_available("cublas", "cpu") and not ops.vendor_available("cudnn", "cpu")
    with pytest.raises(ValueError, match="vendor_available"):
        ops.vendor_available("mkl", "cpu")
