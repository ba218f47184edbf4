"""LEAF FEMNIST / Shakespeare readers on small files written here in LEAF's JSON format."""

import json

import numpy as np
import pytest

from riemfl.errors import DataError, ParameterError
from riemfl.problems.leaf import (
    LEAF_LETTERS,
    leaf_client_datasets,
    load_femnist,
    load_shakespeare,
    read_leaf_json,
)


def _write(path, users):
    """users: {name: (x list, y list)} -> a LEAF JSON file."""
    blob = {
        "users": list(users),
        "num_samples": [len(x) for x, _ in users.values()],
        "user_data": {u: {"x": x, "y": y} for u, (x, y) in users.items()},
        "hierarchies": [],
    }
    path.write_text(json.dumps(blob))
    return path


def _femnist_users(rng, names, n=3):
    return {
        u: (rng.random((n, 784)).round(3).tolist(), rng.integers(0, 62, n).tolist()) for u in names
    }


def test_femnist_file_and_directory(tmp_path):
    rng = np.random.default_rng(0)
    a = _femnist_users(rng, ["f_0001", "f_0002"])
    b = _femnist_users(rng, ["f_0003"], n=2)
    for split in ("train", "test"):
        (tmp_path / split).mkdir()
        _write(tmp_path / split / "all_data_0.json", a)
        _write(tmp_path / split / "all_data_1.json", b)
    one = load_femnist(tmp_path / "train" / "all_data_0.json")
    assert list(one) == ["f_0001", "f_0002"]
    x, y = one["f_0001"]
    assert x.shape == (3, 1, 28, 28) and x.dtype == np.float32 and y.dtype == np.int64
    np.testing.assert_allclose(x.reshape(3, -1), np.array(a["f_0001"][0]), rtol=1e-6)
    assert y.tolist() == a["f_0001"][1]
    train = load_femnist(tmp_path, split="train")
    assert list(train) == ["f_0001", "f_0002", "f_0003"]
    assert load_femnist(tmp_path / "test", image_shape=False)["f_0003"][0].shape == (2, 784)
    users, datasets = leaf_client_datasets(train, load_femnist(tmp_path, "test"))
    assert users == ["f_0001", "f_0002", "f_0003"] and len(datasets[2]) == 4
    with pytest.raises(DataError, match="differ"):
        leaf_client_datasets(train, one)


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda b: b.pop("user_data"), "missing"),
        (lambda b: b["num_samples"].append(3), "num_samples"),
        (lambda b: b["num_samples"].__setitem__(0, 5), "num_samples says"),
        (lambda b: b["user_data"]["u"]["y"].pop(), "x but"),
        (lambda b: b["user_data"].pop("u"), "no"),
        (lambda b: b["user_data"]["u"]["x"][0].pop(), "784"),
        (lambda b: [r.pop() for r in b["user_data"]["u"]["x"]], "shape"),
        (lambda b: b["user_data"]["u"]["x"][0].__setitem__(5, float("nan")), "NaN"),
        (lambda b: b["user_data"]["u"]["y"].__setitem__(0, 62), "0..61"),
        (lambda b: b["user_data"]["u"]["y"].__setitem__(0, 1.5), "ints"),
        (lambda b: b["user_data"]["u"]["x"].__setitem__(0, "abc"), "784 numbers"),
        (lambda b: b["users"].append("u") or b["num_samples"].append(2), "twice"),
    ],
)
def test_femnist_malformed(tmp_path, mutate, match):
    rng = np.random.default_rng(1)
    blob = {
        "users": ["u"],
        "num_samples": [2],
        "user_data": {"u": {"x": rng.random((2, 784)).tolist(), "y": [1, 2]}},
    }
    mutate(blob)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(blob))
    with pytest.raises(DataError, match=match):
        load_femnist(p)


def test_missing_and_invalid_files(tmp_path):
    with pytest.raises(DataError, match="does not exist"):
        read_leaf_json(tmp_path / "nope.json")
    with pytest.raises(DataError, match="no .json"):
        read_leaf_json(tmp_path)
    (tmp_path / "x.json").write_text("{not json")
    with pytest.raises(DataError, match="not valid JSON"):
        read_leaf_json(tmp_path / "x.json")
    (tmp_path / "y.json").write_text("[1, 2]")
    with pytest.raises(DataError, match="JSON object"):
        read_leaf_json(tmp_path / "y.json")
    with pytest.raises(DataError):
        read_leaf_json(tmp_path / "y.json", split="train")
    with pytest.raises(ParameterError):
        read_leaf_json(tmp_path, split="valid")
    # the same user in two files of a directory
    d = tmp_path / "dup"
    d.mkdir()
    _write(d / "a.json", {"u": (["ab"], ["c"])})
    _write(d / "b.json", {"u": (["ab"], ["c"])})
    with pytest.raises(DataError, match="twice"):
        read_leaf_json(d)


def _play_lines(rng, n, length=80):
    text = "".join(rng.choice(list("ABCabc .,\n!"), n + length + 1))
    return [text[k : k + length] for k in range(n)], [text[k + length] for k in range(n)]


def test_shakespeare_leaf_vocabulary(tmp_path):
    rng = np.random.default_rng(2)
    users = {"THE_TEMPEST_PROSPERO": _play_lines(rng, 4), "HAMLET_HAMLET": _play_lines(rng, 3)}
    p = _write(tmp_path / "train.json", users)
    data, vocab = load_shakespeare(p)
    assert vocab == LEAF_LETTERS and len(vocab) == 80
    x, y = data["HAMLET_HAMLET"]
    assert x.shape == (3, 80) and y.shape == (3,) and x.dtype == np.int64
    xs, ys = users["HAMLET_HAMLET"]
    assert "".join(vocab[i] for i in x[1]) == xs[1]
    assert [vocab[i] for i in y] == ys
    assert LEAF_LETTERS.index("A") == 25 and LEAF_LETTERS.index("\n") == 0


def test_shakespeare_data_vocabulary_and_errors(tmp_path):
    p = _write(tmp_path / "t.json", {"u": (["ab~", "b~a"], ["~", "a"])})
    with pytest.raises(DataError, match="not in the vocabulary"):
        load_shakespeare(p)  # '~' is not one of LEAF's 80 letters
    data, vocab = load_shakespeare(p, vocabulary="data")
    assert vocab == "ab~"
    assert data["u"][0].tolist() == [[0, 1, 2], [1, 2, 0]] and data["u"][1].tolist() == [2, 0]
    data, vocab = load_shakespeare(p, vocabulary="~ba")
    assert data["u"][1].tolist() == [0, 2]
    with pytest.raises(ParameterError):
        load_shakespeare(p, vocabulary="aa")
    with pytest.raises(ParameterError):
        load_shakespeare(p, vocabulary="x")
    bad_len = _write(tmp_path / "l.json", {"u": (["abc", "ab"], ["a", "b"])})
    with pytest.raises(DataError, match="window"):
        load_shakespeare(bad_len)
    bad_y = _write(tmp_path / "y.json", {"u": (["abc"], ["ab"])})
    with pytest.raises(DataError, match="one character"):
        load_shakespeare(bad_y)
    bad_x = _write(tmp_path / "x.json", {"u": ([[1, 2]], ["a"])})
    with pytest.raises(DataError, match="strings"):
        load_shakespeare(bad_x)
