"""CIFAR for FLoRAL's Table 1: the python-version files (both kinds, both layouts), every typed
error of the loader, and the cluster constructions (rotation, label shift, disjoint labels,
reduced data) on tiny generated files."""

import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from riemfl.testing import importorskip

importorskip("torch")

from riemfl.errors import DataError, ParameterError  # noqa: E402
from riemfl.experiments.floral.cifar import (  # noqa: E402
    CIFAR_COLUMNS,
    CIFAR_PAPER_COLUMNS,
    PAPER_CIFAR,
    cifar10_task,
    cifar100_task,
    cifar_settings,
    cifar_task,
    find_cifar,
    load_cifar,
    load_cifar10,
    load_cifar100,
    standardise,
    write_cifar,
    write_generated_cifar,
)
from riemfl.experiments.floral.settings import METHODS, Settings  # noqa: E402
from riemfl.nn.floral import reduce_rows, rotate_images  # noqa: E402

COLUMN = {c.label: c for c in CIFAR_COLUMNS}


@pytest.fixture(scope="module")
def c10_dir(tmp_path_factory):
    return write_generated_cifar(tmp_path_factory.mktemp("ten"), "cifar10", train_per_class=6)


@pytest.fixture(scope="module")
def c100_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("hundred")
    write_generated_cifar(root / "cifar-100-python", "cifar100", train_per_class=2)
    return root


@pytest.fixture(scope="module")
def c10(c10_dir):
    return load_cifar10(c10_dir)


@pytest.fixture(scope="module")
def c100(c100_dir):
    return load_cifar100(c100_dir)


# ------------------------------------------------------------------------------------ loading
def test_cifar10_files_read_back(c10_dir, c10):
    assert sorted(p.name for p in Path(c10_dir).iterdir()) == [
        "batches.meta",
        *(f"data_batch_{i}" for i in range(1, 6)),
        "test_batch",
    ]
    assert c10.x_train.shape == (60, 3, 32, 32) and c10.x_train.dtype == np.float32
    assert c10.x_test.shape == (200, 3, 32, 32)
    assert c10.y_train.dtype == np.int64 and np.bincount(c10.y_train).tolist() == [6] * 10
    assert 0.0 <= c10.x_train.min() and c10.x_train.max() <= 1.0
    assert c10.n_classes == 10 and len(c10.class_names) == 10


def test_cifar100_read_from_the_folder_above(c100_dir, c100):
    assert find_cifar(c100_dir, "cifar100") == Path(c100_dir) / "cifar-100-python"
    assert find_cifar(c100_dir, "cifar10") is None
    assert c100.source.endswith("cifar-100-python")
    assert c100.x_train.shape == (200, 3, 32, 32) and c100.n_classes == 100
    assert sorted(np.unique(c100.y_test)) == list(range(100))


def test_both_layouts_give_the_same_data(tmp_path, c10):
    write_generated_cifar(tmp_path / "cifar-10-batches-py", "cifar10", train_per_class=6)
    above = load_cifar(tmp_path, "cifar10")
    inside = load_cifar(tmp_path / "cifar-10-batches-py", "cifar10")
    assert np.array_equal(above.x_train, inside.x_train)
    assert np.array_equal(above.x_train, c10.x_train)  # same seed, same files


def test_real_layout_of_pixels_and_standardise(tmp_path):
    # one image: red plane 255, green 0, blue 128, in the files' (N, 3072) row layout
    row = np.concatenate([np.full(1024, 255), np.zeros(1024), np.full(1024, 128)])
    x = np.tile(row, (10, 1)).astype(np.uint8)
    write_cifar(tmp_path, "cifar10", x, np.arange(10), x[:2], np.arange(2))
    data = load_cifar(tmp_path)
    assert data.x_train.shape == (10, 3, 32, 32)
    assert np.allclose(data.x_train[:, 0], 1.0) and np.allclose(data.x_train[:, 1], 0.0)
    assert np.allclose(data.x_train[:, 2], 128 / 255)
    z = standardise(write_and_load_noise(tmp_path / "noise"))
    assert np.allclose(z.x_train.mean(axis=(0, 2, 3)), 0, atol=1e-5)
    assert np.allclose(z.x_train.std(axis=(0, 2, 3)), 1, atol=1e-3)


def write_and_load_noise(d):
    return load_cifar(write_generated_cifar(d, "cifar10", train_per_class=2, test_per_class=1))


# ------------------------------------------------------------------------------------- errors
def _copy(src: Path, dst: Path) -> Path:
    dst.mkdir()
    for p in Path(src).iterdir():
        (dst / p.name).write_bytes(p.read_bytes())
    return dst


def _dump(path: Path, obj) -> None:
    path.write_bytes(pickle.dumps(obj, protocol=2))


class _Payload:
    """What a hostile pickle carries: a call of ``os.system`` (``print`` is no good as the
    example: Ray replaces ``builtins.print`` in a process that imported it)."""

    def __reduce__(self):
        return (os.system, ("true",))


def _good_batch(n=4):
    return {b"data": np.zeros((n, 3072), np.uint8), b"labels": [0] * n}


BAD_BATCHES = {
    "not a dict": ([1, 2, 3], "holds a list"),
    "refused global": (
        {b"data": _Payload(), b"labels": [0]},
        r"refused global (posix|nt|os)\.system",
    ),
    "missing labels": ({b"data": np.zeros((4, 3072), np.uint8)}, "no key b'labels'"),
    "float data": (
        {b"data": np.zeros((4, 3072), np.float32), b"labels": [0] * 4},
        "must be a uint8 array",
    ),
    "list data": ({b"data": [[0] * 3072], b"labels": [0]}, "must be a uint8 array"),
    "wrong width": (
        {b"data": np.zeros((4, 1024), np.uint8), b"labels": [0] * 4},
        "3072 columns",
    ),
    "too few labels": ({**_good_batch(), b"labels": [0] * 3}, "must be 4 integer labels"),
    "label out of range": ({**_good_batch(), b"labels": [0, 1, 2, 10]}, "must lie in 0..9"),
    "negative label": ({**_good_batch(), b"labels": [0, -1, 2, 3]}, "must lie in 0..9"),
}


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_malformed_batches_are_refused_naming_the_file(tmp_path, c10_dir, case):
    d = _copy(c10_dir, tmp_path / "c")
    obj, message = BAD_BATCHES[case]
    _dump(d / "data_batch_3", obj)
    with pytest.raises(DataError, match=message) as err:
        load_cifar(d)
    assert "data_batch_3" in str(err.value)


def test_missing_directory_and_files(tmp_path, c10_dir):
    with pytest.raises(DataError, match="does not exist"):
        load_cifar(tmp_path / "nowhere")
    with pytest.raises(DataError, match="holds neither 'data_batch_1' nor cifar-10-batches-py"):
        load_cifar(tmp_path)
    for name in ("data_batch_5", "test_batch", "batches.meta"):
        d = _copy(c10_dir, tmp_path / name)
        (d / name).unlink()
        with pytest.raises(DataError, match=f"{name}' is missing"):
            load_cifar(d)


def test_not_a_pickle_and_bad_meta(tmp_path, c10_dir):
    d = _copy(c10_dir, tmp_path / "garbage")
    (d / "test_batch").write_bytes(b"\x00not a pickle at all")
    with pytest.raises(DataError, match="test_batch' is not a CIFAR pickle"):
        load_cifar(d)
    d = _copy(c10_dir, tmp_path / "meta")
    _dump(d / "batches.meta", {b"label_names": [b"a", b"b"]})
    with pytest.raises(DataError, match="batches.meta.*must list 10 names"):
        load_cifar(d)
    _dump(d / "batches.meta", {b"names": []})
    with pytest.raises(DataError, match="no key b'label_names'"):
        load_cifar(d)


def test_cifar100_label_ranges(tmp_path, c100_dir):
    folder = Path(c100_dir) / "cifar-100-python"
    good = {b"data": np.zeros((2, 3072), np.uint8), b"fine_labels": [0, 99]}
    cases = {
        "fine out of range": (
            {**good, b"fine_labels": [0, 100], b"coarse_labels": [0, 0]},
            "0..99",
        ),
        "coarse out of range": ({**good, b"coarse_labels": [0, 20]}, "0..19"),
        "no coarse": (good, "no key b'coarse_labels'"),
        "cifar-10 keys": (_good_batch(2), "no key b'fine_labels'"),
    }
    for i, (obj, message) in enumerate(cases.values()):
        d = _copy(folder, tmp_path / str(i))
        _dump(d / "test", obj)
        with pytest.raises(DataError, match=message):
            load_cifar(d, "cifar100")


def test_unknown_kind():
    with pytest.raises(ParameterError):
        load_cifar(".", "cifar1000")


# ----------------------------------------------------------------------------------- clusters
def test_paper_setups_and_scale_down():
    s = cifar_settings(Settings(), "cifar10")
    assert (s.n_clients, s.n_clusters, s.clients_per_round) == (20, 4, 20)
    s = cifar_settings(Settings(), "cifar100")
    assert (s.n_clients, s.n_clusters, s.clients_per_round) == (100, 10, 50)
    s = cifar_settings(Settings(), "cifar100", n_clients=20)
    assert (s.n_clients, s.n_clusters, s.clients_per_round) == (20, 10, 10)
    with pytest.raises(ParameterError, match="multiple of C = 10"):
        cifar_settings(Settings(), "cifar100", n_clients=25)
    assert set(PAPER_CIFAR) == {m.label for m in METHODS}
    assert all(len(v) == len(CIFAR_PAPER_COLUMNS) for v in PAPER_CIFAR.values())
    assert [CIFAR_PAPER_COLUMNS[c.paper] for c in CIFAR_COLUMNS] == [c.label for c in CIFAR_COLUMNS]


def _rows(x):
    return {r.tobytes(): i for i, r in enumerate(x)}


def test_rotation_clusters_rotate(c10):
    s = cifar_settings(Settings(), "cifar10", n_clients=4)
    task = cifar10_task(COLUMN["C10 Full R"], 0, s, c10)
    assert task.input_shape == (3, 32, 32) and task.n_classes == 10
    originals = _rows(c10.x_train)
    for k, (x, y, x_te, y_te) in enumerate(task.clients):
        c = int(task.clusters[k])
        assert c == k % 4
        assert np.array_equal(x_te, rotate_images(c10.x_test, 90 * c))  # "full" evaluation
        assert np.array_equal(y_te, c10.y_test)
        back = rotate_images(x, -90 * c)
        idx = [originals[r.tobytes()] for r in back]
        assert np.array_equal(y, c10.y_train[idx])
        if c:
            assert not np.array_equal(x, back)


def test_label_shift_clusters_permute_labels(c10):
    s = cifar_settings(Settings(evaluation="shard"), "cifar10", n_clients=8)
    task = cifar_task(COLUMN["C10 Full LS"], 1, s, c10)
    originals = _rows(c10.x_train)
    for k, (x, y, _, y_te) in enumerate(task.clients):
        c = int(task.clusters[k])
        idx = [originals[r.tobytes()] for r in x]
        assert np.array_equal(y, (c10.y_train[idx] + c) % 10)
        assert y_te.size == 200 // 8  # shard evaluation: a share of the test rows
    assert sum(t[0].shape[0] for t in task.clients) == 60


def test_cifar100_clusters_have_disjoint_label_sets(c100):
    s = cifar_settings(Settings(evaluation="shard"), "cifar100", n_clients=20)
    task = cifar100_task(COLUMN["C100 Full"], 0, s, c100)
    assert task.n_clusters == 10 and task.n_classes == 100 and len(task.clients) == 20
    label_sets = []
    for c in range(10):
        members = np.flatnonzero(task.clusters == c)
        assert members.tolist() == [c, c + 10]
        labels = set(np.concatenate([task.clients[k][1] for k in members]).tolist())
        tests = set(np.concatenate([task.clients[k][3] for k in members]).tolist())
        assert len(labels) == 10 and tests == labels
        assert labels == {y for y in range(100) if y % 10 == c}
        label_sets.append(labels)
    assert set().union(*label_sets) == set(range(100))
    assert sum(len(s_) for s_ in label_sets) == 100  # disjoint
    # the cluster's rows are split uniformly among its clients
    assert task.description["train_rows"] == [10] * 20
    assert task.description["transform"] == "disjoint_labels"


def test_reduced_variant_sizes(c10, c100, tmp_path):
    s = cifar_settings(Settings(), "cifar10", n_clients=4)
    task = cifar10_task(COLUMN["C10 Reduced LS"], 0, s, c10)
    assert task.description["train_rows"] == [10] * 4  # 15 rows each: the 10-row minimum
    big = load_cifar(write_generated_cifar(tmp_path, "cifar10", train_per_class=100))
    task = cifar10_task(COLUMN["C10 Reduced R"], 0, s, big)  # 250 rows each: 5% is 12
    assert task.description["train_rows"] == [reduce_rows(250)] * 4 == [12] * 4
    assert task.description["available_rows"] == [250] * 4
    s = cifar_settings(Settings(), "cifar100", n_clients=10)
    full = cifar100_task(COLUMN["C100 Full"], 0, s, c100)
    reduced = cifar100_task(COLUMN["C100 Reduced"], 0, s, c100)
    assert full.description["train_rows"] == [20] * 10
    assert reduced.description["train_rows"] == [10] * 10
    for (x_f, _, _, _), (x_r, _, _, _) in zip(full.clients, reduced.clients, strict=True):
        assert np.array_equal(x_r, x_f[:10])  # the reduced rows are the first of the same split


def test_task_errors(c10, c100):
    s = cifar_settings(Settings(), "cifar100", n_clients=10)
    with pytest.raises(ParameterError, match="needs CIFAR-100"):
        cifar100_task(COLUMN["C100 Full"], 0, s, c10)
    with pytest.raises(ParameterError, match="needs CIFAR-10 data"):
        cifar10_task(COLUMN["C10 Full R"], 0, s, c100)
    with pytest.raises(ParameterError, match="disjoint_labels"):
        cifar100_task(COLUMN["C10 Full R"], 0, s, c100)
    with pytest.raises(DataError, match="cluster 0 has"):
        cifar100_task(COLUMN["C100 Full"], 0, cifar_settings(s, "cifar100", n_clients=300), c100)
