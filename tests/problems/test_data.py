"""Label-sorted split, the MNIST reader (idx raw/gz, npz, directories, every error), digits."""

import gzip
import struct
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from riemfl import ParameterError, RiemflError
from riemfl.errors import DataError, MissingDependencyError
from riemfl.problems import label_sorted_indices, label_sorted_split, load_digits, load_mnist
from riemfl.testing import importorskip


# ---------------------------------------------------------------------- split
@settings(max_examples=60, deadline=None)
@given(
    labels=st.lists(st.integers(0, 4), min_size=1, max_size=40),
    data=st.data(),
)
def test_label_sorted_split_properties(labels, data):
    labels = np.array(labels)
    n = data.draw(st.integers(1, labels.size))
    features = np.column_stack([np.arange(labels.size), labels]).astype(float)
    blocks = label_sorted_split(features, labels, n)
    assert len(blocks) == n
    rows = np.concatenate(blocks)[:, 0].astype(int)
    assert sorted(rows) == list(range(labels.size))  # every row exactly once
    assert np.all(np.diff(labels[rows]) >= 0)  # sorted by label across the blocks
    for lab in np.unique(labels):  # stable: original order within a label
        same = rows[labels[rows] == lab]
        assert np.all(np.diff(same) > 0)
    sizes = [len(b) for b in blocks]
    assert max(sizes) - min(sizes) <= 1 and min(sizes) >= 1
    assert [len(i) for i in label_sorted_indices(labels, n)] == sizes


def test_label_sorted_split_mnist_sizes():
    labels = np.repeat(np.arange(10), [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949])
    idx = label_sorted_indices(labels, 10)
    assert [len(i) for i in idx] == [6000] * 10
    assert set(labels[idx[0]]) == {0, 1}  # neighbouring digits share a client


@pytest.mark.parametrize(
    "features, labels, n, error, words",
    [
        (np.ones((3, 2)), np.arange(3), 4, ParameterError, "n_clients .* <= 3, got 4"),
        (np.ones((3, 2)), np.arange(3), 0, ParameterError, "n_clients .* >= 1 and <= 3, got 0"),
        (np.ones((3, 2)), np.arange(3), 1.5, ParameterError, "int"),
        (np.ones((3, 2)), np.arange(4), 2, DataError, "one label per row"),
        (np.ones(3), np.arange(3), 2, RiemflError, "2-D"),
    ],
)
def test_split_errors(features, labels, n, error, words):
    with pytest.raises(error, match=words):
        label_sorted_split(features, labels, n)


# ---------------------------------------------------------------------- idx files
def _idx(array: np.ndarray, code: int = 0x08) -> bytes:
    header = bytes([0, 0, code, array.ndim]) + b"".join(struct.pack(">i", s) for s in array.shape)
    dtype = {0x08: ">u1", 0x0B: ">i2", 0x0D: ">f4"}[code]
    return header + array.astype(dtype).tobytes()


@pytest.fixture
def mnist_like():
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(7, 28, 28), dtype=np.uint8)
    images[0, 0, 0], images[1, 0, 0] = 0, 255
    labels = rng.integers(0, 10, size=7).astype(np.uint8)
    return images, labels


def _write(path, payload: bytes, gz: bool):
    if gz:
        with gzip.open(path, "wb") as fh:
            fh.write(payload)
    else:
        path.write_bytes(payload)


@pytest.mark.parametrize("gz", [False, True])
@pytest.mark.parametrize("sep", ["-", "."])
def test_idx_pair_raw_and_gz(tmp_path, mnist_like, gz, sep):
    images, labels = mnist_like
    ext = ".gz" if gz else ""
    img = tmp_path / f"train-images{sep}idx3-ubyte{ext}"
    lab = tmp_path / f"train-labels{sep}idx1-ubyte{ext}"
    _write(img, _idx(images), gz)
    _write(lab, _idx(labels), gz)
    for path in (img, lab, tmp_path, str(img)):
        x, y = load_mnist(path)
        assert x.shape == (7, 784) and x.dtype == np.float64
        assert y.dtype == np.int64
        np.testing.assert_allclose(x, images.reshape(7, -1) / 255.0)
        np.testing.assert_array_equal(y, labels)
        assert x.min() == 0.0 and x.max() == 1.0


def test_idx_mixed_compression_and_test_split(tmp_path, mnist_like):
    images, labels = mnist_like
    _write(tmp_path / "t10k-images-idx3-ubyte.gz", _idx(images[:3]), True)
    _write(tmp_path / "t10k-labels-idx1-ubyte", _idx(labels[:3]), False)
    x, y = load_mnist(tmp_path, split="test")
    assert x.shape == (3, 784)
    np.testing.assert_array_equal(y, labels[:3])


def test_idx_other_dtype(tmp_path):
    images = np.arange(2 * 3 * 2, dtype=np.int16).reshape(2, 3, 2) * 20
    _write(tmp_path / "train-images-idx3-ubyte", _idx(images, 0x0B), False)
    _write(tmp_path / "train-labels-idx1-ubyte", _idx(np.array([1, 2])), False)
    x, _ = load_mnist(tmp_path)
    np.testing.assert_allclose(x, images.reshape(2, 6) / 255.0)


@pytest.mark.parametrize(
    "images_bytes, labels_bytes, words",
    [
        (lambda i: b"\x00\x00\x08\x01" + i[4:], None, "bad magic number 2049"),
        (lambda i: b"\x12\x34" + i[2:], None, "bad magic number"),
        (lambda i: i[:-5], None, "truncated"),
        (lambda i: i[:10], None, "truncated"),
        (lambda i: i[:2], None, "truncated"),
        (lambda i: i + b"\x00", None, "bytes after"),
        (None, lambda lab: lab[:-1], "truncated"),
        (None, lambda lab: b"\x00\x00\x08\x03" + lab[4:], "bad magic number 2051"),
    ],
)
def test_idx_errors(tmp_path, mnist_like, images_bytes, labels_bytes, words):
    images, labels = mnist_like
    ib, lb = _idx(images), _idx(labels)
    ib = images_bytes(ib) if images_bytes else ib
    lb = labels_bytes(lb) if labels_bytes else lb
    _write(tmp_path / "train-images-idx3-ubyte", ib, False)
    _write(tmp_path / "train-labels-idx1-ubyte", lb, False)
    with pytest.raises(DataError, match=words):
        load_mnist(tmp_path)


def test_idx_count_mismatch(tmp_path, mnist_like):
    images, labels = mnist_like
    _write(tmp_path / "train-images-idx3-ubyte", _idx(images), False)
    _write(tmp_path / "train-labels-idx1-ubyte", _idx(labels[:5]), False)
    with pytest.raises(DataError, match="7 images but 5 labels"):
        load_mnist(tmp_path)


def test_truncated_gzip(tmp_path, mnist_like):
    images, labels = mnist_like
    _write(tmp_path / "train-images-idx3-ubyte.gz", _idx(images), True)
    raw = (tmp_path / "train-images-idx3-ubyte.gz").read_bytes()
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(raw[: len(raw) // 2])
    _write(tmp_path / "train-labels-idx1-ubyte.gz", _idx(labels), True)
    with pytest.raises(DataError, match="gzip"):
        load_mnist(tmp_path)
    (tmp_path / "train-images-idx3-ubyte.gz").write_bytes(b"not gzip at all")
    with pytest.raises(DataError, match="gzip"):
        load_mnist(tmp_path)


def test_missing_files(tmp_path, mnist_like):
    images, _ = mnist_like
    with pytest.raises(DataError, match="does not exist"):
        load_mnist(tmp_path / "nothing.npz")
    with pytest.raises(DataError, match="no MNIST files"):
        load_mnist(tmp_path)
    _write(tmp_path / "train-images-idx3-ubyte", _idx(images), False)
    with pytest.raises(DataError, match="train-labels-idx1-ubyte"):
        load_mnist(tmp_path)
    (tmp_path / "what.bin").write_bytes(b"")
    with pytest.raises(DataError, match="cannot tell"):
        load_mnist(tmp_path / "what.bin")
    with pytest.raises(ParameterError, match="split"):
        load_mnist(tmp_path, split="validation")


# ---------------------------------------------------------------------- npz
@pytest.mark.parametrize(
    "keys", [("x_train", "y_train"), ("images", "labels"), ("X", "y"), ("data", "target")]
)
def test_npz_keys(tmp_path, mnist_like, keys):
    images, labels = mnist_like
    path = tmp_path / "mnist.npz"
    np.savez(path, **{keys[0]: images, keys[1]: labels})
    for p in (path, tmp_path):
        x, y = load_mnist(p)
        np.testing.assert_allclose(x, images.reshape(7, -1) / 255.0)
        np.testing.assert_array_equal(y, labels)


def test_npz_scaling_rules(tmp_path):
    unit = np.linspace(0, 1, 12).reshape(3, 4)
    np.savez(tmp_path / "a.npz", images=unit, labels=np.array([0.0, 1.0, 2.0]))
    x, y = load_mnist(tmp_path / "a.npz")
    np.testing.assert_allclose(x, unit)  # float in [0, 1]: kept
    assert y.dtype == np.int64
    np.savez(tmp_path / "b.npz", images=unit * 255, labels=np.arange(3))
    np.testing.assert_allclose(load_mnist(tmp_path / "b.npz")[0], unit)  # float 0..255


def test_npz_test_split(tmp_path, mnist_like):
    images, labels = mnist_like
    np.savez(
        tmp_path / "m.npz", x_train=images, y_train=labels, x_test=images[:2], y_test=labels[:2]
    )
    assert load_mnist(tmp_path / "m.npz", split="test")[0].shape == (2, 784)
    assert load_mnist(tmp_path / "m.npz")[0].shape == (7, 784)


@pytest.mark.parametrize(
    "arrays, words",
    [
        ({"a": np.ones((2, 3)), "b": np.ones(2)}, "expected one of the pairs"),
        ({"images": np.ones((3, 4)), "labels": np.ones(2)}, "3 images but 2 labels"),
        ({"images": np.full((2, 4), 300.0), "labels": np.ones(2)}, r"expected \[0, 255\]"),
        ({"images": np.full((2, 4), -1.0), "labels": np.ones(2)}, r"expected \[0, 255\]"),
        ({"images": np.full((2, 4), np.nan), "labels": np.ones(2)}, "NaN"),
        ({"images": np.ones((2, 4)), "labels": np.array([0.5, 1])}, "integers"),
        ({"images": np.ones(4), "labels": np.ones(4)}, r"expected \(N, ...\)"),
        ({"images": np.ones((0, 4)), "labels": np.ones(0)}, "empty"),
    ],
)
def test_npz_errors(tmp_path, arrays, words):
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(DataError, match=words):
        load_mnist(tmp_path / "bad.npz")


def test_npz_corrupt(tmp_path):
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04garbage")
    with pytest.raises(DataError, match="npz"):
        load_mnist(tmp_path / "bad.npz")


# ---------------------------------------------------------------------- digits
def test_load_digits():
    importorskip("sklearn")
    x, y = load_digits()
    assert x.shape == (1797, 64) and y.shape == (1797,)
    assert x.dtype == np.float64 and x.min() == 0.0 and x.max() == 1.0
    assert set(np.unique(y)) == set(range(10))


def test_load_digits_without_sklearn(monkeypatch):
    # what an environment without scikit-learn does: its import fails (sys.modules refuses it)
    for module in ("sklearn", "sklearn.datasets"):
        monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(MissingDependencyError, match=r"riemfl\[data\]"):
        load_digits()
