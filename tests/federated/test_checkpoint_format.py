"""The checkpoint file format (no pickle, SHA-256 digests, appended records, atomic writes) and
the data digest."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import signal
import struct
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from riemfl.errors import CheckpointError
from riemfl.federated import checkpoint as checkpoint_module
from riemfl.federated._tensors import tensor_to_numpy
from riemfl.federated.checkpoint import (
    CHECKPOINT_FORMAT,
    CheckpointFile,
    load_checkpoint,
    require,
    save_checkpoint,
)
from riemfl.federated.fingerprint import data_digest
from riemfl.problems import KPCAProblem, LRMCProblem, SoftmaxRegressionProblem
from riemfl.testing import importorskip

torch = importorskip("torch")

MAGIC = b"RIEMFL-CHECKPOINT 3\n"
HEAD = 56  # a record's lengths (16 bytes), check (8) and digest (32)


# ----------------------------------------------------------------------------- helpers
def _same(a, b, where="payload"):
    """``b`` is ``a`` come back: same types (tuple vs list, int vs str keys), bit-exact values."""
    assert type(a) is type(b) or (torch.is_tensor(a) and type(b) is torch.Tensor), where
    if isinstance(a, dict):
        assert [(type(k), k) for k in a] == [(type(k), k) for k in b], where
        for k in a:
            _same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, list | tuple):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            _same(x, y, f"{where}[{i}]")
    elif isinstance(a, float):
        assert struct.pack("<d", a) == struct.pack("<d", b), where
    elif isinstance(a, np.ndarray):
        assert (a.dtype, a.shape) == (b.dtype, b.shape), where
        assert b.flags.c_contiguous and b.flags.writeable, where
        assert a.tobytes() == b.tobytes(), where
    elif isinstance(a, np.generic):
        assert np.asarray(a).tobytes() == np.asarray(b).tobytes(), where
    elif torch.is_tensor(a):
        assert (a.dtype, a.shape, a.device) == (b.dtype, b.shape, b.device), where
        assert a.requires_grad == b.requires_grad, where
        assert tensor_to_numpy(a)[0].tobytes() == tensor_to_numpy(b)[0].tobytes(), where
    else:
        assert a == b, where


def _round_trip(path, payload):
    save_checkpoint(path, payload)
    return load_checkpoint(path)


def _record(previous, rows, state):
    """A record of the documented layout (written here independently of the module)."""
    lengths = struct.pack("<QQ", len(rows), len(state))
    digest = hashlib.sha256(previous + lengths + rows + state).digest()
    return lengths + hashlib.sha256(lengths).digest()[:8] + digest + rows + state, digest


def _records(data):
    """``[(start, end, rows part, state part)]`` of the records of a valid file's bytes."""
    out, pos = [], len(MAGIC)
    while pos < len(data):
        r, s = struct.unpack("<QQ", data[pos : pos + 16])
        body = pos + HEAD
        out.append((pos, body + r + s, data[body : body + r], data[body + r : body + r + s]))
        pos = body + r + s
    return out


def _rewrite_header(path, edit):
    """Apply ``edit`` to the JSON header of the state of ``path`` (a file of one record) and
    write valid lengths, check and digest (a crafted file)."""
    ((_, _, rows, state),) = _records(path.read_bytes())
    n = int.from_bytes(state[:8], "little")
    header = edit(json.loads(state[8 : 8 + n]))
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    state = len(text).to_bytes(8, "little") + text + state[8 + n :]
    path.write_bytes(MAGIC + _record(bytes(32), rows, state)[0])


def _tmp_files(folder):
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".tmp"))


def _realistic_payload():
    rng = np.random.default_rng(5)
    return {
        "round": 12,
        "server": {"x": rng.standard_normal((6, 3)), "m": None},
        "clients": {"y": rng.standard_normal((4, 6, 3)), "z": torch.ones(4, 3)},
        "rng": np.random.default_rng(0).bit_generator.state,
        "history": {"loss": [1.5, float("nan"), 0.25], "config": {"seed": 3, "name": "kpca"}},
        "fingerprint": {"data": "ab" * 32, "steps": (1, 2)},
        "wall": 3.25,
    }


# ----------------------------------------------------------------------------- round trip
_NUMPY_DTYPES = (
    hnp.boolean_dtypes()
    | hnp.integer_dtypes(endianness="?")
    | hnp.unsigned_integer_dtypes(endianness="?")
    | hnp.floating_dtypes(endianness="?", sizes=(16, 32, 64, 128))
    | hnp.complex_number_dtypes(endianness="?")
)
_LAYOUTS = st.sampled_from(
    [lambda a: a, np.transpose, lambda a: a[::-1][..., ::2] if a.ndim else a, np.asfortranarray]
)
_ARRAYS = st.builds(
    lambda a, layout: layout(a),
    hnp.arrays(_NUMPY_DTYPES, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
    _LAYOUTS,
)
_TORCH_DTYPES = st.sampled_from(
    [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.bool, torch.int8]
    + [torch.uint8, torch.int16, torch.int32, torch.int64, torch.complex64, torch.complex128]
)
_TENSORS = st.builds(
    lambda a, dtype, layout, grad: layout(torch.from_numpy(a).to(dtype)).requires_grad_(
        grad and (dtype.is_floating_point or dtype.is_complex)
    ),
    hnp.arrays(np.float32, hnp.array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4)),
    _TORCH_DTYPES,
    st.sampled_from(
        [
            lambda t: t,
            lambda t: t.T if t.ndim == 2 else t,
            lambda t: t.flip(0)[:-1] if t.ndim else t,
        ]
    ),
    st.booleans(),
)
_FLOATS = st.floats() | st.integers(0, 2**64 - 1).map(
    lambda bits: struct.unpack("<d", bits.to_bytes(8, "little"))[0]  # NaN payloads included
)
_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(2**4090, 2**4200).flatmap(lambda v: st.sampled_from([v, -v]))
    | _FLOATS
    | st.text(st.characters(exclude_categories=()), max_size=6)
    | _ARRAYS
    | _ARRAYS.filter(lambda a: a.size > 0).map(lambda a: a.reshape(-1)[0])  # numpy scalars
    | _TENSORS
)
_KEYS = st.text(max_size=4) | st.integers(-(2**70), 2**70)
_TREES = st.recursive(
    _LEAVES,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(_KEYS, inner, max_size=3)
    ),
    max_leaves=12,
)


@given(payload=st.dictionaries(_KEYS, _TREES, max_size=5))
def test_every_supported_payload_comes_back_identical(tmp_path_factory, payload):
    path = tmp_path_factory.mktemp("round_trip") / "run.ckpt"
    _same(payload, _round_trip(path, payload))


def test_the_engine_payloads_come_back_identical(tmp_path):
    rng = np.random.default_rng(1)
    sync = _realistic_payload()
    floral = {
        "round": 3,
        "x": rng.standard_normal(50),
        "rng": np.random.default_rng(7).bit_generator.state,
        "clients": {"router_logits": np.zeros((4, 2)), "private": np.ones((4, 0))},
        "server_optimizer": {"t": 3, "m": rng.standard_normal(50), "v": None},
        "history": json.dumps({"accuracy": [0.5, 0.75]}),
        "counters": {"updates": 6.0, "dropped": 0.0},
        "info": {"cos": float("nan")},
        "wall": 1.0 / 3.0,
        "fingerprint": {"seed": 2, "x0": "00" * 20, "trainer": {"lr": np.float64(0.1)}},
    }
    for payload in (sync, floral):
        _same(payload, _round_trip(tmp_path / "run.ckpt", payload))
    state = load_checkpoint(tmp_path / "run.ckpt")
    generator = np.random.default_rng()
    generator.bit_generator.state = state["rng"]  # the 128-bit PCG64 state is usable as is
    assert generator.random() == np.random.default_rng(7).random()


def test_a_large_array_is_written_in_one_piece(tmp_path):
    x = np.random.default_rng(0).standard_normal(10**6)
    path = tmp_path / "model.ckpt"
    save_checkpoint(path, {"x": x})
    assert path.stat().st_size < x.nbytes + 200  # raw bytes plus a short header
    np.testing.assert_array_equal(load_checkpoint(path)["x"], x)


def test_a_tensor_from_a_missing_device_comes_back_on_the_cpu(tmp_path):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"w": torch.arange(3.0)})

    def to_missing_device(header):
        header["payload"]["d"]["w"]["T"][2] = "cuda:99"
        return header

    _rewrite_header(path, to_missing_device)
    w = load_checkpoint(path)["w"]
    assert w.device.type == "cpu" and torch.equal(w, torch.arange(3.0))


def test_the_format_number_is_in_the_magic_line(tmp_path):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"round": 1})
    assert CHECKPOINT_FORMAT == 3 and path.read_bytes().startswith(MAGIC)


def test_the_file_is_the_documented_layout(tmp_path):
    """Magic line, then records of lengths, check, chained digest, rows part, state part."""
    path = tmp_path / "run.ckpt"
    f = CheckpointFile(path)
    f.save({"round": 1, "x": np.arange(3.0)}, [{"loss": [0, [1.5]]}])
    f.save({"round": 2, "x": np.arange(3.0)}, [{"loss": [1, [0.5]]}, {"loss": [2, [0.25]]}])
    data = path.read_bytes()
    first, second = _records(data)
    assert second[1] == len(data)
    rebuilt, digest = _record(bytes(32), first[2], first[3])
    assert MAGIC + rebuilt == data[: first[1]]
    assert _record(digest, second[2], second[3])[0] == data[second[0] :]
    entries = second[2]  # two entries, each an 8-byte length and a tree
    n = int.from_bytes(entries[:8], "little")
    assert int.from_bytes(entries[8 + n : 16 + n], "little") == len(entries) - 16 - n
    payload, rows = CheckpointFile(path).load()
    assert payload["round"] == 2 and rows == [
        {"loss": [0, [1.5]]},
        {"loss": [1, [0.5]]},
        {"loss": [2, [0.25]]},
    ]


# ----------------------------------------------------------------------------- integrity
def test_every_single_byte_flip_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, _realistic_payload())
    good = path.read_bytes()
    ((start, end, _, state),) = _records(good)
    header_end = start + HEAD + 8 + int.from_bytes(state[:8], "little")
    regions = [(0, len(MAGIC)), (start, start + 16), (start + 16, start + 24)]
    regions += [(start + 24, start + HEAD), (start + HEAD, header_end), (header_end, end)]
    rng = np.random.default_rng(2024)
    positions = np.concatenate([rng.integers(lo, hi, 25) for lo, hi in regions])
    for pos in positions:
        bad = bytearray(good)
        bad[pos] ^= int(rng.integers(1, 256))
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError, match="cannot read checkpoint"):
            load_checkpoint(path)


def test_every_truncation_of_a_file_of_one_record_is_refused(tmp_path):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, _realistic_payload())
    good = path.read_bytes()
    for n in [*range(0, 80), *range(80, len(good), 37), len(good) - 1]:
        path.write_bytes(good[:n])
        with pytest.raises(CheckpointError, match="cannot read checkpoint"):
            load_checkpoint(path)


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "empty"),
        (pickle.dumps({"format": 1, "round": 3}), "pickle"),
        (b"RIEMFL-CHECKPOINT 2\n" + bytes(100), r"format '2'.*--overwrite"),
        (b"RIEMFL-CHECKPOINT 4\n" + bytes(100), "format '4'"),
        (MAGIC + bytes(30), "no complete record"),
        (bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8)), "not a riemfl"),
        (MAGIC[:7], "truncated"),
    ],
)
def test_files_of_another_kind_are_refused(tmp_path, content, match):
    path = tmp_path / "run.ckpt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(path)


def test_a_missing_file_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(tmp_path / "absent.ckpt")


class _Evil:
    """Unpickling this creates the file ``marker`` (what a malicious checkpoint could do)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_pickle_is_never_unpickled(tmp_path):
    marker = tmp_path / "code-ran"
    path = tmp_path / "run.ckpt"
    path.write_bytes(pickle.dumps({"round": 1, "x": _Evil(marker)}))
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(path)
    assert not marker.exists()


_CRAFTED = {
    "header not an object": lambda h: [1, 2],
    "unknown tag": lambda h: {**h, "payload": {"q": 1}},
    "payload not a dict": lambda h: {**h, "payload": {"t": []}},
    "array used twice": lambda h: {**h, "payload": {"d": {"a": {"a": 0}, "b": {"a": 0}}}},
    "array never used": lambda h: {**h, "payload": {"d": {}}},
    "array out of range": lambda h: {**h, "payload": {"d": {"a": {"a": 7}}}},
    "object dtype": lambda h: {**h, "arrays": [["|O8", [3]]]},
    "negative shape": lambda h: {**h, "arrays": [["<f8", [-3]]]},
    "shape too large": lambda h: {**h, "arrays": [["<f8", [4]]]},
    "scalar of an array": lambda h: {**h, "payload": {"d": {"a": {"s": 0}}}},
    "tensor of no dtype": lambda h: {
        **h,
        "payload": {"d": {"a": {"T": [0, "load", "cpu", False]}}},
    },
    "tensor of the wrong width": lambda h: {
        **h,
        "payload": {"d": {"a": {"T": [0, "float32", "cpu", False]}}},
    },
    "bad float": lambda h: {**h, "payload": {"d": {"a": {"f": "12"}, "b": {"a": 0}}}},
    "bad int": lambda h: {**h, "payload": {"d": {"a": {"i": "zz"}, "b": {"a": 0}}}},
    "float key": lambda h: {**h, "payload": {"D": [[1.5, {"a": 0}]]}},
    "NaN constant": lambda h: json.dumps(h).replace('"round":', '"r": NaN, "round":').encode(),
    "deep nesting": lambda h: b"[" * 100_000 + b"]" * 100_000,
}


@pytest.mark.parametrize("edit", _CRAFTED.values(), ids=_CRAFTED.keys())
def test_a_crafted_header_with_a_valid_digest_is_a_checkpoint_error(tmp_path, edit):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"round": 1, "x": np.arange(3.0)})
    _rewrite_header(path, edit)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path)


# ----------------------------------------------------------------------------- appended records
def _saved(path, rounds, start=1, x_size=4):
    """A file saved ``rounds`` times by one writer: record r holds the entry ``{"r": r}`` and the
    state ``{"round": r, "x": [r, ...]}``."""
    f = CheckpointFile(path)
    for r in range(start, start + rounds):
        f.save({"round": r, "x": np.full(x_size, float(r))}, [{"r": r}])
    return f


def test_each_save_appends_a_record_and_a_load_gives_the_last_state_and_every_entry(tmp_path):
    path = tmp_path / "run.ckpt"
    f = _saved(path, 5)
    sizes = [end for _, end, _, _ in _records(path.read_bytes())]
    assert len(sizes) == 5 and sizes == sorted(sizes)
    payload, entries = CheckpointFile(path).load()
    assert payload["round"] == 5 and np.all(payload["x"] == 5.0)
    assert entries == [{"r": r} for r in range(1, 6)]
    assert load_checkpoint(path)["round"] == 5
    assert CheckpointFile(path).load(rows=False)[1] == []
    f.write({"round": 0}, [{"r": 0}])  # a new file: the previous records are gone
    assert len(_records(path.read_bytes())) == 1
    assert CheckpointFile(path).load() == ({"round": 0}, [{"r": 0}])


def test_a_torn_last_record_is_dropped_and_cut_off_by_the_next_save(tmp_path):
    path = tmp_path / "run.ckpt"
    _saved(path, 3)
    good = path.read_bytes()
    first_end, last_start = _records(good)[0][1], _records(good)[-1][0]
    cuts = [last_start + 1, last_start + 20, last_start + HEAD]
    for n in [*cuts, *range(last_start + 60, len(good), 9)]:
        path.write_bytes(good[:n])  # what a writer killed while appending leaves
        f = CheckpointFile(path)
        payload, entries = f.load()
        assert payload["round"] == 2 and entries == [{"r": 1}, {"r": 2}]
        assert f.dropped == n - last_start
    f.save({"round": 3, "x": np.full(4, 3.0)}, [{"r": 3}])  # the resumed writer
    assert path.read_bytes() == good  # the same bytes as if nothing had happened
    for n in range(len(MAGIC), first_end):  # no complete record left: refused
        path.write_bytes(good[:n])
        with pytest.raises(CheckpointError, match="no complete record"):
            load_checkpoint(path)


@pytest.mark.parametrize("record", [0, 1, 2])
def test_a_damaged_record_is_refused_by_its_number_wherever_it_is(tmp_path, record):
    path = tmp_path / "run.ckpt"
    _saved(path, 3)
    good = path.read_bytes()
    start, end, _, _ = _records(good)[record]
    rng = np.random.default_rng(record)
    for pos in [start, start + 17, start + 30, *rng.integers(start + HEAD, end, 20)]:
        bad = bytearray(good)
        bad[pos] ^= 0x10
        path.write_bytes(bytes(bad))
        with pytest.raises(CheckpointError, match=f"record {record} .*damaged"):
            load_checkpoint(path)


def test_records_cannot_be_dropped_or_reordered_in_the_middle(tmp_path):
    path = tmp_path / "run.ckpt"
    _saved(path, 3)
    good = path.read_bytes()
    (a, b, c) = [good[start:end] for start, end, _, _ in _records(good)]
    for forged in (MAGIC + a + c, MAGIC + b + c, MAGIC + a + c + b):
        path.write_bytes(forged)
        with pytest.raises(CheckpointError, match="does not match its SHA-256 hash"):
            load_checkpoint(path)


def test_a_save_compacts_the_file_when_most_of_it_is_superseded_states(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_module, "COMPACT_MIN_BYTES", 0)
    path = tmp_path / "run.ckpt"
    f = CheckpointFile(path)
    counts = []
    for r in range(1, 41):
        f.save({"round": r, "x": np.full(500, float(r))}, [{"r": r, "rows": [r] * 20}])
        data = path.read_bytes()
        records = _records(data)
        counts.append(len(records))
        live = len(MAGIC) + HEAD + sum(len(rows) for _, _, rows, _ in records)
        assert len(data) <= 2 * (live + len(records[-1][3]))  # superseded states <= live bytes
    assert max(counts) > 2 and 1 in counts[1:]  # compacted now and then, and appended
    payload, entries = CheckpointFile(path).load()
    assert payload["round"] == 40 and entries == [{"r": r, "rows": [r] * 20} for r in range(1, 41)]
    assert _tmp_files(tmp_path) == []


def test_a_file_deleted_or_replaced_during_the_run_is_written_anew(tmp_path):
    path = tmp_path / "run.ckpt"
    f = _saved(path, 2)
    path.unlink()
    f.save({"round": 3, "x": np.full(4, 3.0)}, [{"r": 3}])
    assert CheckpointFile(path).load()[1] == [{"r": 1}, {"r": 2}, {"r": 3}]
    save_checkpoint(path, {"round": 99})  # another writer's file
    f.save({"round": 4, "x": np.full(4, 4.0)}, [{"r": 4}])
    payload, entries = CheckpointFile(path).load()
    assert payload["round"] == 4 and entries == [{"r": r} for r in range(1, 5)]


def _failing_sync(monkeypatch):
    def failing(fd):
        raise OSError("the disk is gone")

    monkeypatch.setattr(os, "fdatasync", failing, raising=False)
    monkeypatch.setattr(os, "fsync", failing)


def test_a_background_sync_is_waited_for_and_its_error_raised_once(tmp_path, monkeypatch):
    path = tmp_path / "run.ckpt"
    f = CheckpointFile(path, background_sync=True)
    f.save({"round": 1}, [{"r": 1}])  # the first save writes a new file (synced at once)
    f.save({"round": 2}, [{"r": 2}])  # appended; synced in the background
    f.wait()
    assert load_checkpoint(path)["round"] == 2
    _failing_sync(monkeypatch)
    f.save({"round": 3}, [{"r": 3}])  # returns before its sync fails
    with pytest.raises(OSError, match="the disk is gone"):
        f.save({"round": 4}, [{"r": 4}])  # waits for the previous sync first: nothing written
    f.wait()  # the error is raised once
    monkeypatch.undo()
    assert CheckpointFile(path).load()[1] == [{"r": 1}, {"r": 2}, {"r": 3}]


def test_an_entry_that_cannot_be_saved_is_named_and_nothing_is_written(tmp_path):
    path = tmp_path / "run.ckpt"
    f = _saved(path, 1)
    good = path.read_bytes()
    with pytest.raises(CheckpointError, match=r"row entry 1: payload\['w'\]: object of type"):
        f.save({"round": 2}, [{"r": 2}, {"w": object()}])
    assert path.read_bytes() == good


# ----------------------------------------------------------------------------- validation
def test_required_entries_are_checked_by_name(tmp_path):
    path = tmp_path / "run.ckpt"
    save_checkpoint(path, {"round": 3, "wall": 1.5, "flag": True, "m": None})
    state = load_checkpoint(path, required={"round": int, "wall": float, "m": (dict, None)})
    assert state["round"] == 3
    with pytest.raises(CheckpointError, match=r"no 'server' \(expected dict\)"):
        load_checkpoint(path, required={"server": dict})
    with pytest.raises(CheckpointError, match=r"\['round'\] must be str, found int 3"):
        load_checkpoint(path, required={"round": str})
    with pytest.raises(CheckpointError, match=r"\['flag'\] must be int, found bool"):
        load_checkpoint(path, required={"flag": int})


def test_require_checks_nested_fields():
    state = {"server_optimizer": {"t": 4, "m": None}}
    opt = require(state, "server_optimizer", dict)
    assert require(opt, "t", int, where="server_optimizer") == 4
    assert require(opt, "m", (np.ndarray, None)) is None
    with pytest.raises(CheckpointError, match=r"server_optimizer has no 'v' \(expected ndarray"):
        require(opt, "v", (np.ndarray, None), where="server_optimizer")
    with pytest.raises(CheckpointError, match=r"must be a dict with 't' \(int\), found list"):
        require([], "t", int)


class _Foo:
    pass


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ({"clients": {"x": _Foo()}}, r"payload\['clients'\]\['x'\]: object of type _Foo"),
        ({"a": [1, (2, {3.5: 1})]}, r"payload\['a'\]\[1\]\[1\]: key 3.5 of type float"),
        ({"a": np.array(["s"])}, r"payload\['a'\]: numpy array of dtype <U1"),
        ({"a": np.datetime64(0, "s")}, r"payload\['a'\]: numpy scalar of dtype datetime64"),
        ({"a": {1, 2}}, r"payload\['a'\]: object of type set"),
        ({"t": torch.zeros(2).to_sparse()}, r"payload\['t'\]: torch tensor cannot be saved"),
    ],
)
def test_an_unsupported_object_is_named_by_its_path(tmp_path, payload, match):
    path = tmp_path / "run.ckpt"
    with pytest.raises(CheckpointError, match=match):
        save_checkpoint(path, payload)
    assert list(tmp_path.iterdir()) == []


def test_a_cycle_is_refused(tmp_path):
    loop: list = [1]
    loop.append(loop)
    with pytest.raises(CheckpointError, match=r"payload\['a'\]\[1\]: the payload contains itself"):
        save_checkpoint(tmp_path / "run.ckpt", {"a": loop})


# ----------------------------------------------------------------------------- temporary files
def _dead_pid():
    code = "import os; print(os.getpid())"
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return int(done.stdout)  # run() has waited for it: no such process any more


def test_leftovers_of_dead_writers_are_removed_and_no_others(tmp_path):
    path = tmp_path / "run.ckpt"
    dead = _dead_pid()
    other_host = "0" * 8 if checkpoint_module._HOST != "0" * 8 else "1" * 8
    dead_file = checkpoint_module._temporary_path(path, dead)
    kept = [
        checkpoint_module._temporary_path(path, os.getpid()),  # a live writer: this process
        checkpoint_module._temporary_path(tmp_path / "other.ckpt", dead),  # another checkpoint
        tmp_path / f"run.ckpt.{dead}.{other_host}-{'0' * 16}.tmp",  # a writer on another host
        tmp_path / "run.ckpt.backup",
    ]
    for f in [dead_file, *kept]:
        f.write_bytes(b"partial")
    save_checkpoint(path, {"round": 1})
    assert not dead_file.exists() and all(f.exists() for f in kept)
    dead_file.write_bytes(b"partial")
    assert load_checkpoint(path) == {"round": 1}
    assert not dead_file.exists() and all(f.exists() for f in kept)


_WRITER = """
import sys
import numpy as np
from riemfl.federated.checkpoint import CheckpointFile
f = CheckpointFile(sys.argv[1])
r = f.load()[0]["round"]  # a resumed writer appends to the file it read
while True:
    r += 1
    f.save({"round": r, "x": np.full(300_000, float(r))}, [{"r": r, "row": [0.5] * (r % 50)}])
"""


@pytest.mark.slow
def test_a_writer_killed_at_random_moments_leaves_a_complete_checkpoint(tmp_path):
    """Appends and compactions (a 2.4 MB state: one every few saves) killed at random."""
    path = tmp_path / "run.ckpt"
    CheckpointFile(path).write({"round": 0, "x": np.zeros(300_000)})
    rng = np.random.default_rng(11)
    last = 0
    for _ in range(8):
        args = [sys.executable, "-c", textwrap.dedent(_WRITER), str(path), str(last + 1)]
        writer = subprocess.Popen(args)
        while load_checkpoint(path)["round"] == last and writer.poll() is None:
            time.sleep(0.01)  # started: the writer has saved once
        time.sleep(float(rng.uniform(0.0, 0.3)))
        writer.send_signal(signal.SIGKILL)
        writer.wait()
        state, entries = CheckpointFile(path).load()  # the previous or the new checkpoint
        assert state["round"] > last and np.all(state["x"] == state["round"])
        assert entries == [{"r": r, "row": [0.5] * (r % 50)} for r in range(1, state["round"] + 1)]
        last = state["round"]
        assert _tmp_files(tmp_path) == []  # a killed compaction's file is removed by the load
    assert path.stat().st_size < 4 * 2.4e6 + checkpoint_module.COMPACT_MIN_BYTES


# ----------------------------------------------------------------------------- data digest
def _kpca_blocks(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((p, 5)) for p in (4, 6, 5)]


def test_the_same_data_give_the_same_digest_in_another_process():
    code = "from riemfl.problems import KPCAProblem; from riemfl.federated.fingerprint import "
    code += (
        "data_digest; print(data_digest(KPCAProblem.synthetic(n_clients=5, d=6, k=2, p=4, seed=3)))"
    )
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    other = done.stdout.strip()
    problem = KPCAProblem.synthetic(n_clients=5, d=6, k=2, p=4, seed=3)
    assert (
        data_digest(problem)
        == other
        == data_digest(KPCAProblem.synthetic(n_clients=5, d=6, k=2, p=4, seed=3))
    )
    assert len(other) == 64 and int(other, 16) >= 0


def test_swapped_or_changed_client_data_change_the_digest():
    blocks = _kpca_blocks()
    base = data_digest(KPCAProblem(blocks, 2))
    assert data_digest(KPCAProblem([blocks[1], blocks[0], blocks[2]], 2)) != base
    changed = [b.copy() for b in blocks]
    changed[2][3, 1] = np.nextafter(changed[2][3, 1], np.inf)
    assert data_digest(KPCAProblem(changed, 2)) != base
    assert data_digest(KPCAProblem(blocks, 2)) == base


def test_torch_data_of_the_problem_classes_work():
    blocks = _kpca_blocks()
    as_torch = [torch.from_numpy(b) for b in blocks]
    assert data_digest(KPCAProblem(as_torch, 2)) == data_digest(KPCAProblem(blocks, 2))
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((30, 3)), rng.integers(0, 3, 30)
    for make in (np.asarray, torch.from_numpy):
        digests = {
            data_digest(SoftmaxRegressionProblem.from_labelled(make(x), make(y), 3, seed=s))
            for s in (0, 0, 1)
        }
        assert len(digests) == 2
    lrmc = {
        data_digest(LRMCProblem.synthetic(d=8, T=30, k=2, n_clients=3, seed=s)) for s in (0, 0, 1)
    }
    assert len(lrmc) == 2


def test_the_digest_is_of_the_values_not_of_the_memory_layout():
    a = np.random.default_rng(0).standard_normal((50, 7))
    t = torch.from_numpy(a.T.copy()).to(torch.bfloat16)
    b = a.copy()
    same = [
        ({"a": a, "t": t}, {"a": np.asfortranarray(a), "t": t.T.contiguous().T}),
        ({"a": a, "v": a[2:5]}, {"a": b, "v": b[2:5]}),  # views of equal arrays elsewhere
    ]
    for left, right in same:
        assert data_digest(left) == data_digest(right)
    assert data_digest({"a": a, "v": a[2:5]}) != data_digest({"a": a, "v": a[3:6]})
    assert data_digest({"a": a}) != data_digest({"b": a}) != data_digest({"a": a.reshape(7, 50)})
    assert data_digest({"a": a}) != data_digest({"a": torch.from_numpy(a)})


def test_cycles_models_and_callables_are_not_searched():
    node: dict = {"x": np.arange(3)}
    node["self"] = node
    assert data_digest(node) == data_digest({"x": np.arange(3), "self": {}})
    model = torch.nn.Linear(2, 2)
    assert data_digest({"m": model, "f": lambda: 1}) == data_digest({})


def _client_data(seed, sizes=(12, 8, 10)):
    rng = np.random.default_rng(seed)
    return [
        (
            rng.standard_normal((n, 64)),
            rng.integers(0, 10, n),
            rng.standard_normal((4, 64)),
            rng.integers(0, 10, 4),
        )
        for n in sizes
    ]


def test_the_trainers_client_data_are_in_the_digest():
    from riemfl.nn import MLP, FloralTrainer, TorchClientTrainer, floralize

    data = _client_data(0)
    swapped = [data[1], data[0], data[2]]

    def torch_trainer(clients):
        torch.manual_seed(0)
        return TorchClientTrainer(lambda: MLP([64, 8, 10]), clients)

    def floral_trainer(clients):
        torch.manual_seed(0)
        return FloralTrainer(floralize(MLP([64, 8, 10]), 2, 0.1, seed=0), clients, batch_size=4)

    for make in (torch_trainer, floral_trainer):
        assert data_digest(make(data)) == data_digest(make(data)) != data_digest(make(swapped))

    trainer = floral_trainer(data)
    state = ("router_logits", "last_pi", "private")
    before = data_digest(trainer, exclude=state)
    trainer.train(0, trainer.global_parameters(), np.random.default_rng(0))
    assert data_digest(trainer, exclude=state) == before  # weights and client state left out
