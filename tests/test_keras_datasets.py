"""keras.utils.get_file and keras.datasets against a local HTTP server on 127.0.0.1 started
here in a thread: hashes verified, files cached where Keras caches them (KERAS_HOME), a bad
hash refused and not kept, archives unpacked safely; the loaders return what real Keras'
loaders return for the same (small, synthetic) files; offline with no cache, a clear error."""
import gzip
import hashlib
import http.server
import io
import os
import pickle
import tarfile
import threading

import numpy as np
import pytest

from gpucmp.keras import datasets
from gpucmp.keras.datasets import _fetch
from gpucmp.keras.utils import file_utils, get_file


class Server:
    def __init__(self, root):
        self.root, self.hits = root, []
        outer = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs):
                super().__init__(*args, directory=str(root), **kwargs)

            def do_GET(self):
                outer.hits.append(self.path)
                super().do_GET()

            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def put(self, name, data):
        (self.root / name).write_bytes(data)
        return hashlib.sha256(data).hexdigest()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server(tmp_path, monkeypatch):
    (tmp_path / "www").mkdir()
    monkeypatch.setenv("KERAS_HOME", str(tmp_path / "home"))
    s = Server(tmp_path / "www")
    monkeypatch.setattr(_fetch, "TF_KERAS_DATASETS", s.url)
    monkeypatch.setattr(_fetch, "CIFAR", s.url)
    yield s
    s.close()


def cache(tmp_path, *parts):
    return tmp_path.joinpath("home", "datasets", *parts)


# ---------------------------------------------------------------- get_file
def test_get_file_verifies_caches_and_refuses_a_bad_hash(server, tmp_path):
    data = os.urandom(200_000)
    sha = server.put("blob.bin", data)
    path = get_file("blob.bin", server.url + "blob.bin", file_hash=sha)
    assert path == str(cache(tmp_path, "blob.bin")) and open(path, "rb").read() == data
    assert get_file("blob.bin", server.url + "blob.bin", file_hash=sha) == path
    assert len(server.hits) == 1                               # the second call is the cache
    md5 = hashlib.md5(data).hexdigest()
    assert get_file("blob.bin", server.url + "blob.bin", md5_hash=md5) == path
    with pytest.raises(ValueError, match="hash.*not kept"):
        get_file("other.bin", server.url + "blob.bin", file_hash="0" * 64)
    assert sorted(os.listdir(cache(tmp_path))) == ["blob.bin"]    # no bad file, no .part
    # a damaged cached file is fetched again
    cache(tmp_path, "blob.bin").write_bytes(b"damaged")
    assert open(get_file("blob.bin", server.url + "blob.bin", file_hash=sha), "rb").read() == data
    assert len(server.hits) == 3
    other = get_file(origin=server.url + "blob.bin", cache_dir=tmp_path / "elsewhere")
    assert other == str(tmp_path / "elsewhere" / "datasets" / "blob.bin")


def test_get_file_errors(server, tmp_path):
    with pytest.raises(file_utils.DownloadError, match="404"):
        get_file("nope.bin", server.url + "nope.bin")
    with pytest.raises(ValueError, match="fname"):
        get_file("a/b.bin", server.url + "b.bin")
    with pytest.raises(ValueError, match="origin"):
        get_file("b.bin")
    server.close()
    with pytest.raises(file_utils.DownloadError, match="URL fetch failure"):
        get_file("gone.bin", server.url + "gone.bin")
    assert os.listdir(cache(tmp_path)) == []


def tar_bytes(files, extra=None):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        if extra is not None:
            tf.addfile(extra)
    return buf.getvalue()


def test_get_file_extracts_archives_and_refuses_escaping_members(server, tmp_path):
    sha = server.put("pack.tar.gz", tar_bytes({"pack/a.txt": b"A", "pack/b/c.txt": b"C"}))
    out = get_file("pack", server.url + "pack.tar.gz", file_hash=sha, extract=True)
    assert out == str(cache(tmp_path, "pack"))
    assert open(os.path.join(out, "pack", "b", "c.txt"), "rb").read() == b"C"
    assert os.path.exists(cache(tmp_path, "pack_archive"))
    server.put("evil.tar.gz", tar_bytes({"../evil.txt": b"x"}))
    with pytest.raises(ValueError, match="evil.txt"):
        get_file("evil", server.url + "evil.tar.gz", extract=True)
    link = tarfile.TarInfo("link")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    server.put("link.tar.gz", tar_bytes({"ok.txt": b"ok"}, extra=link))
    with pytest.raises(ValueError, match="link"):
        get_file("linked", server.url + "link.tar.gz", extract=True)
    assert not (tmp_path / "home" / "evil.txt").exists()
    assert not os.path.exists(cache(tmp_path, "evil")) and not os.path.exists(cache(tmp_path, "linked"))


# ---------------------------------------------------------------- data sets
def npz_bytes(**arrays):
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def keras_reference_loader(monkeypatch, module, path):
    """Real Keras' loader for ``module``, reading ``path`` instead of downloading."""
    import importlib
    os.environ.setdefault("KERAS_BACKEND", "jax")
    pytest.importorskip("keras")
    mod = importlib.import_module(f"keras.src.datasets.{module}")
    monkeypatch.setattr(mod, "get_file", lambda *a, **k: str(path))
    return mod.load_data


def assert_same(a, b):
    for x, y in zip(a, b):
        for u, v in zip(x, y):
            assert u.dtype == v.dtype and u.shape == v.shape
            if u.dtype == object:
                assert [list(p) for p in u] == [list(q) for q in v]
            else:
                np.testing.assert_array_equal(u, v)


def test_mnist_downloads_once_then_reuses_the_cache(server, tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    arrays = {"x_train": rng.integers(0, 256, (6, 28, 28), dtype=np.uint8),
              "y_train": rng.integers(0, 10, 6, dtype=np.uint8),
              "x_test": rng.integers(0, 256, (3, 28, 28), dtype=np.uint8),
              "y_test": rng.integers(0, 10, 3, dtype=np.uint8)}
    monkeypatch.setitem(_fetch.HASHES, "mnist.npz", server.put("mnist.npz", npz_bytes(**arrays)))
    (x_train, y_train), (x_test, y_test) = datasets.mnist.load_data()
    np.testing.assert_array_equal(x_train, arrays["x_train"])
    np.testing.assert_array_equal(y_test, arrays["y_test"])
    assert x_train.dtype == np.uint8 and x_test.shape == (3, 28, 28)
    datasets.mnist.load_data()
    assert server.hits == ["/mnist.npz"]
    assert cache(tmp_path, "mnist.npz").exists()


def test_offline_without_cache_says_what_to_do(server, tmp_path, monkeypatch):
    server.close()
    with pytest.raises(file_utils.DownloadError, match="load_digits_mnist") as info:
        datasets.mnist.load_data()
    assert str(cache(tmp_path)) in str(info.value)
    # a file real Keras already downloaded is used without the network
    arrays = {k: np.zeros((1, 28, 28) if k.startswith("x") else 1, np.uint8)
              for k in ("x_train", "y_train", "x_test", "y_test")}
    data = npz_bytes(**arrays)
    cache(tmp_path, "mnist.npz").write_bytes(data)
    monkeypatch.setitem(_fetch.HASHES, "mnist.npz", hashlib.sha256(data).hexdigest())
    assert datasets.mnist.load_data()[0][0].shape == (1, 28, 28)


def test_fashion_mnist_reads_the_idx_files(server, tmp_path):
    rng = np.random.default_rng(1)
    parts = {}
    for split, n in (("train", 4), ("t10k", 2)):
        parts[f"{split}-labels-idx1-ubyte.gz"] = rng.integers(0, 10, n, dtype=np.uint8)
        parts[f"{split}-images-idx3-ubyte.gz"] = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    for name, arr in parts.items():
        header = b"\0" * (8 if "labels" in name else 16)
        server.put(name, gzip.compress(header + arr.tobytes()))
    (x_train, y_train), (x_test, y_test) = datasets.fashion_mnist.load_data()
    np.testing.assert_array_equal(x_train, parts["train-images-idx3-ubyte.gz"])
    np.testing.assert_array_equal(y_test, parts["t10k-labels-idx1-ubyte.gz"])
    assert cache(tmp_path, "fashion-mnist", "t10k-images-idx3-ubyte.gz").exists()


def test_boston_housing_matches_keras(server, monkeypatch):
    rng = np.random.default_rng(2)
    data = npz_bytes(x=rng.normal(size=(20, 13)), y=rng.normal(size=20))
    monkeypatch.setitem(_fetch.HASHES, "boston_housing.npz", server.put("boston_housing.npz", data))
    ours = datasets.boston_housing.load_data(test_split=0.25, seed=7)
    ref = keras_reference_loader(monkeypatch, "boston_housing", server.root / "boston_housing.npz")
    assert_same(ours, ref(test_split=0.25, seed=7))


def ragged(rng, n, vocab=30):
    out = np.empty(n, dtype=object)
    out[:] = [list(map(int, rng.integers(1, vocab, rng.integers(2, 9)))) for _ in range(n)]
    return out


@pytest.mark.parametrize("kwargs", [{}, {"num_words": 12, "skip_top": 2, "maxlen": 8},
                                    {"start_char": None, "oov_char": None, "index_from": 0,
                                     "num_words": 20}])
def test_imdb_and_reuters_match_keras(server, monkeypatch, kwargs):
    rng = np.random.default_rng(3)
    imdb = npz_bytes(x_train=ragged(rng, 10), y_train=rng.integers(0, 2, 10),
                     x_test=ragged(rng, 6), y_test=rng.integers(0, 2, 6))
    reuters = npz_bytes(x=ragged(rng, 15), y=rng.integers(0, 46, 15))
    monkeypatch.setitem(_fetch.HASHES, "imdb.npz", server.put("imdb.npz", imdb))
    monkeypatch.setitem(_fetch.HASHES, "reuters.npz", server.put("reuters.npz", reuters))
    ours = datasets.imdb.load_data(**kwargs)
    assert_same(ours, keras_reference_loader(monkeypatch, "imdb", server.root / "imdb.npz")(**kwargs))
    ours = datasets.reuters.load_data(test_split=0.3, **kwargs)
    ref = keras_reference_loader(monkeypatch, "reuters", server.root / "reuters.npz")
    assert_same(ours, ref(test_split=0.3, **kwargs))


def cifar_batch(rng, n, **labels):
    d = {b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8)}
    d.update({k.encode(): list(map(int, v)) for k, v in labels.items()})
    return pickle.dumps(d, protocol=4)


def test_cifar10_and_cifar100_match_keras(server, tmp_path, monkeypatch):
    rng = np.random.default_rng(4)
    files = {f"cifar-10-batches-py/data_batch_{i}": cifar_batch(rng, 3, labels=rng.integers(0, 10, 3))
             for i in range(1, 6)}
    files["cifar-10-batches-py/test_batch"] = cifar_batch(rng, 2, labels=rng.integers(0, 10, 2))
    monkeypatch.setitem(_fetch.HASHES, "cifar-10-python.tar.gz",
                        server.put("cifar-10-python.tar.gz", tar_bytes(files)))
    (x_train, y_train), (x_test, y_test) = datasets.cifar10.load_data()
    assert x_train.shape == (15, 32, 32, 3) and y_train.shape == (15, 1) and y_test.dtype == np.uint8
    batch = pickle.loads(files["cifar-10-batches-py/data_batch_2"])     # Keras' fixed 10,000 per
    np.testing.assert_array_equal(                                       # batch rules out its loader
        x_train[3:6], batch[b"data"].reshape(3, 3, 32, 32).transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(y_train[3:6, 0], batch[b"labels"])
    files = {f"cifar-100-python/{s}": cifar_batch(rng, n, fine_labels=rng.integers(0, 100, n),
                                                  coarse_labels=rng.integers(0, 20, n))
             for s, n in (("train", 4), ("test", 2))}
    monkeypatch.setitem(_fetch.HASHES, "cifar-100-python.tar.gz",
                        server.put("cifar-100-python.tar.gz", tar_bytes(files)))
    target = cache(tmp_path, "cifar-100-python-target")
    for mode in ("fine", "coarse"):
        assert_same(datasets.cifar100.load_data(mode),
                    keras_reference_loader(monkeypatch, "cifar100", target)(mode))
    assert len(server.hits) == 2                    # each archive fetched once


class Boom:
    def __reduce__(self):
        return (os.system, ("echo pwned > /tmp/gpucmp-pwned",))


def test_bad_and_malicious_data_files_are_refused(server, tmp_path, monkeypatch):
    files = {f"cifar-10-batches-py/data_batch_{i}": pickle.dumps({b"data": Boom()})
             for i in range(1, 6)}
    monkeypatch.setitem(_fetch.HASHES, "cifar-10-python.tar.gz",
                        server.put("cifar-10-python.tar.gz", tar_bytes(files)))
    with pytest.raises(ValueError, match="refusing to unpickle"):
        datasets.cifar10.load_data()
    assert not os.path.exists("/tmp/gpucmp-pwned")
    data = npz_bytes(x_train=np.zeros((2, 28, 28), np.uint8))
    monkeypatch.setitem(_fetch.HASHES, "mnist.npz", server.put("mnist.npz", data[:-40]))
    with pytest.raises(ValueError, match="mnist.npz"):
        datasets.mnist.load_data()
    monkeypatch.setitem(_fetch.HASHES, "mnist.npz", server.put("mnist.npz", data))
    with pytest.raises(ValueError, match="lacks the arrays"):
        datasets.mnist.load_data()
    with pytest.raises(ValueError, match="hash"):
        monkeypatch.setitem(_fetch.HASHES, "reuters.npz", "1" * 64)
        server.put("reuters.npz", data)
        datasets.reuters.load_data()
    assert not cache(tmp_path, "reuters.npz").exists()
