"""Command line: python -m gpucmp {cnn,devices}.

`cnn` is the main job of the README: it trains the seeds' CNN (the TensorFlow/Keras
example program, imports changed to gpucmp.keras) on real handwritten digits on
whatever hardware is here -- the GPU when one answers, else the CPU -- and prints test
accuracy and training throughput. `devices` lists the backends the core can use.
The GPU comparison commands (specs, bench, compare) arrive with the harness.
"""
import argparse
import sys
import time

import numpy as np


def build_seed_cnn(keras):
    """The CNN of ../shared/seeds (002), layer for layer."""
    model = keras.models.Sequential()
    model.add(keras.layers.Conv2D(32, (3, 3), activation="relu", input_shape=(28, 28, 1)))
    model.add(keras.layers.MaxPooling2D((2, 2)))
    model.add(keras.layers.Conv2D(64, (3, 3), activation="relu"))
    model.add(keras.layers.MaxPooling2D((2, 2)))
    model.add(keras.layers.Conv2D(64, (3, 3), activation="relu"))
    model.add(keras.layers.Flatten())
    model.add(keras.layers.Dense(64, activation="relu"))
    model.add(keras.layers.Dense(10, activation="softmax"))
    model.compile(optimizer="adam", loss="categorical_crossentropy", metrics=["accuracy"])
    return model


def cmd_cnn(args):
    import gpucmp
    from gpucmp import keras
    from gpucmp.datasets import load_digits_mnist

    if args.device:
        gpucmp.set_device(args.device)
    if args.seed is not None:
        keras.utils.set_random_seed(args.seed)
    (x_train, y_train), (x_test, y_test) = load_digits_mnist()
    x_train = (x_train.reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
    x_test = (x_test.reshape(-1, 28, 28, 1) / 255.0).astype(np.float32)
    y_train1 = np.eye(10, dtype=np.float32)[y_train]
    y_test1 = np.eye(10, dtype=np.float32)[y_test]
    print(f"device: {gpucmp.get_device()}  train: {len(x_train)} images  test: {len(x_test)} images")
    model = build_seed_cnn(keras)
    model.summary()
    start = time.perf_counter()
    model.fit(x_train, y_train1, batch_size=args.batch_size, epochs=args.epochs, verbose=args.verbose)
    seconds = time.perf_counter() - start
    loss, acc = model.evaluate(x_test, y_test1, verbose=0)
    rate = len(x_train) * args.epochs / seconds
    print(f"test accuracy: {acc:.4f}  test loss: {loss:.4f}")
    print(f"training: {seconds:.2f} s for {args.epochs} epochs, {rate:,.0f} samples/s "
          f"(batch {args.batch_size}, {gpucmp.get_device()})")
    return 0


def cmd_devices(args):
    import gpucmp
    from gpucmp import _core

    for name in gpucmp.available_devices():
        extra = f"  (GEMM micro-kernel: {_core.cpu_simd_variant()})" if name == "cpu" else ""
        print(name + extra)
    print(f"default: {gpucmp.get_device()}")
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m gpucmp", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("cnn", help="train the seeds' CNN on real handwritten digits")
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--device", default=None, help="cpu or cuda:N (default: the GPU when present)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--verbose", type=int, default=1, choices=(0, 1, 2))
    p.set_defaults(func=cmd_cnn)
    d = sub.add_parser("devices", help="list the devices the core can use")
    d.set_defaults(func=cmd_devices)
    args = parser.parse_args(argv)
    if getattr(args, "epochs", 1) < 1 or getattr(args, "batch_size", 1) < 1:
        parser.error("--epochs and --batch-size must be >= 1")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
