"""CXR8 (Licudi et al. 2025, Table 2): the NIH reader on small files written here, the
per-patient clients, the offline stand-in, and the multi-label metrics and T_e."""

import csv

import numpy as np
import pytest

from riemfl.errors import DataError, ParameterError, ShapeError
from riemfl.experiments.licudi2025.cxr8 import (
    CSV_NAME,
    FINDINGS,
    PAPER_CONDITIONS,
    cxr8_clients,
    iter_images,
    load_images,
    patient_clients,
    read_cxr8_index,
)
from riemfl.experiments.licudi2025.cxr8_standin import cxr8_standin, cxr8_standin_clients
from riemfl.experiments.licudi2025.multilabel import (
    CXR8_TARGET_ERROR,
    auroc_t_e,
    multilabel_scores,
)

Image = pytest.importorskip("PIL.Image")

HEADER = [
    "Image Index",
    "Finding Labels",
    "Follow-up #",
    "Patient ID",
    "Patient Age",
    "Patient Gender",
    "View Position",
]
#: (image, findings, patient)
ROWS = [
    ("00000001_000.png", "Cardiomegaly", "1"),
    ("00000001_001.png", "Cardiomegaly|Emphysema", "1"),
    ("00000002_000.png", "No Finding", "2"),
    ("00000003_000.png", "Hernia", "3"),
    ("00000003_001.png", "Effusion|Infiltration|Pneumothorax", "3"),
    ("00000004_000.png", "Atelectasis|Mass|Nodule|Pneumonia", "4"),
]


def _write_csv(root, rows=ROWS, header=HEADER):
    with open(root / CSV_NAME, "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        for name, labels, patient in rows:
            full = {"Image Index": name, "Finding Labels": labels, "Patient ID": patient}
            writer.writerow([full.get(c, "0") for c in header])


def _png(path, value=51, mode="L", side=12):
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode == "I;16":
        Image.fromarray(np.full((side, side), value * 257, dtype=np.uint16)).save(path)
    elif mode == "RGBA":
        Image.new("RGBA", (side, side), (value, value, value, 255)).save(path)
    else:
        Image.new("L", (side, side), value).save(path)


def _dataset(root, layout="flat", rows=ROWS):
    _write_csv(root, rows)
    for k, (name, _, _) in enumerate(rows):
        folder = root / "images" if layout == "flat" else root / f"images_00{1 + k % 2}" / "images"
        _png(folder / name, value=51 * (k % 5))
    return root


# ---------------------------------------------------------------------- the reader
@pytest.mark.parametrize("layout", ["flat", "official"])
def test_reads_both_layouts(tmp_path, layout):
    index = read_cxr8_index(_dataset(tmp_path, layout))
    assert len(index) == 6 and index.conditions == PAPER_CONDITIONS
    assert index.names == tuple(r[0] for r in ROWS)
    assert [p.name for p in index.paths] == list(index.names)
    assert index.patients.tolist() == ["1", "1", "2", "3", "3", "4"]
    expected = np.zeros((6, 8), dtype=np.float32)
    expected[0, 1] = expected[1, 1] = 1  # Cardiomegaly; Emphysema is not one of the 8
    expected[4, [2, 3, 7]] = 1
    expected[5, [0, 4, 5, 6]] = 1  # row 3 (Hernia only) stays all zero
    np.testing.assert_array_equal(index.targets, expected)
    x = load_images(index, size=4)
    assert x.shape == (6, 1, 4, 4) and x.dtype == np.float32
    np.testing.assert_allclose(x[:, 0, 0, 0], [0.0, 0.2, 0.4, 0.6, 0.8, 0.0], atol=1e-6)


def test_all_fourteen_findings_in_order(tmp_path):
    index = read_cxr8_index(_dataset(tmp_path), conditions=FINDINGS)
    assert index.targets.shape == (6, 14)
    assert FINDINGS[:8] == PAPER_CONDITIONS
    assert index.targets[1, FINDINGS.index("Emphysema")] == 1
    assert index.targets[3].tolist() == [0.0] * 13 + [1.0]  # Hernia, the last
    chosen = read_cxr8_index(tmp_path, conditions=("Hernia", "Cardiomegaly"))
    assert chosen.targets[:, 0].tolist() == [0, 0, 0, 1, 0, 0]
    assert chosen.targets[:, 1].tolist() == [1, 1, 0, 0, 0, 0]


def test_image_modes_sizes_and_channels(tmp_path):
    _write_csv(tmp_path, ROWS[:3])
    _png(tmp_path / "images" / ROWS[0][0], value=51, mode="RGBA")
    _png(tmp_path / "images" / ROWS[1][0], value=102, mode="I;16")
    half = np.zeros((10, 10), dtype=np.uint8)
    half[:, 5:] = 255
    Image.fromarray(half).save(tmp_path / "images" / ROWS[2][0])
    index = read_cxr8_index(tmp_path)
    x = load_images(index, [0, 1], size=6, channels=3)
    assert x.shape == (2, 3, 6, 6)
    np.testing.assert_allclose(x[0], 0.2, atol=1e-6)
    np.testing.assert_allclose(x[1], 0.4, atol=1e-6)
    edge = load_images(index, [2], size=4)[0, 0]
    assert edge.min() >= 0 and edge.max() <= 1
    assert (edge[:, 0] < 0.1).all() and (edge[:, -1] > 0.9).all()  # dark left, bright right


def test_iter_images_chunks_match_load_images(tmp_path):
    index = read_cxr8_index(_dataset(tmp_path))
    chunks = list(iter_images(index, chunk_size=4, size=3))
    assert [len(rows) for rows, _, _ in chunks] == [4, 2]
    np.testing.assert_array_equal(
        np.concatenate([c[1] for c in chunks]), load_images(index, size=3)
    )
    np.testing.assert_array_equal(np.concatenate([c[2] for c in chunks]), index.targets)


def _bad_csv(rows=None, header=HEADER):
    def write(root):
        root.mkdir()
        _dataset(root)
        _write_csv(root, rows if rows is not None else ROWS, header)

    return write


@pytest.mark.parametrize(
    "break_it, match",
    [
        (lambda root: None, "does not exist"),
        (lambda root: (root.mkdir(), _write_csv(root)), "no image folder"),
        (lambda root: (root.mkdir(), (root / "images").mkdir()), "not found in"),
        (
            _bad_csv(header=["Image Index", "Patient ID"]),
            r"missing column\(s\) \['Finding Labels'\]",
        ),
        (_bad_csv(rows=[("a.png", "Cardiomegaly|Flu", "1")]), r"unknown finding\(s\) \['Flu'\]"),
        (_bad_csv(rows=[("a.png", "No Finding|Mass", "1")]), "together with findings"),
        (_bad_csv(rows=[("a.png", "", "1")]), "empty finding"),
        (_bad_csv(rows=[("a.png", "Mass||Nodule", "1")]), "empty finding"),
        (_bad_csv(rows=[("a.png", "Mass", "")]), "empty 'Image Index' or 'Patient ID'"),
        (_bad_csv(rows=[ROWS[0], ROWS[0]]), "listed twice"),
        (_bad_csv(rows=[]), "no image rows"),
        (
            _bad_csv(rows=[*ROWS, ("00000009_000.png", "Mass", "9")]),
            r"1 image file\(s\) .* not found",
        ),
    ],
)
def test_typed_errors_of_the_reader(tmp_path, break_it, match):
    root = tmp_path / "nih"
    break_it(root)
    with pytest.raises(DataError, match=match):
        read_cxr8_index(root)


def test_empty_csv_file(tmp_path):
    _dataset(tmp_path)
    (tmp_path / CSV_NAME).write_text("")
    with pytest.raises(DataError, match="missing column"):
        read_cxr8_index(tmp_path)


def test_missing_images_skipped_on_request(tmp_path):
    _dataset(tmp_path)
    (tmp_path / "images" / ROWS[2][0]).unlink()
    with pytest.raises(DataError, match="missing='skip'"):
        read_cxr8_index(tmp_path)
    index = read_cxr8_index(tmp_path, missing="skip")
    assert ROWS[2][0] not in index.names and len(index) == 5
    for name in [r[0] for r in ROWS if r[0] != ROWS[2][0]]:
        (tmp_path / "images" / name).unlink()
    with pytest.raises(DataError, match="none of the images"):
        read_cxr8_index(tmp_path, missing="skip")


def test_image_in_two_folders(tmp_path):
    _dataset(tmp_path, "official")
    _png(tmp_path / "images" / ROWS[0][0])
    with pytest.raises(DataError, match="is in both"):
        read_cxr8_index(tmp_path)


def test_unreadable_and_vanished_images(tmp_path):
    index = read_cxr8_index(_dataset(tmp_path))
    index.paths[1].write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    with pytest.raises(DataError, match="cannot read image"):
        load_images(index, [1])
    index.paths[2].unlink()
    with pytest.raises(DataError, match="not found"):
        load_images(index, [2])
    load_images(index, [0, 3])  # the others still read


def test_bad_parameters(tmp_path):
    _dataset(tmp_path)
    with pytest.raises(ParameterError, match="conditions"):
        read_cxr8_index(tmp_path, conditions=("Cardiomegaly", "Flu"))
    with pytest.raises(ParameterError, match="conditions"):
        read_cxr8_index(tmp_path, conditions=("Mass", "Mass"))
    with pytest.raises(ParameterError, match="missing"):
        read_cxr8_index(tmp_path, missing="ignore")
    with pytest.raises(ParameterError, match="max_images"):
        read_cxr8_index(tmp_path, max_images=0)


def test_max_images_keeps_whole_patients(tmp_path):
    _dataset(tmp_path)
    sizes = {"1": 2, "2": 1, "3": 2, "4": 1}
    for seed in range(6):
        index = read_cxr8_index(tmp_path, max_images=3, seed=seed)
        kept, counts = np.unique(index.patients, return_counts=True)
        left = [n for p, n in sizes.items() if p not in kept]  # the next patient drawn overflows
        assert 0 < len(index) <= 3 and any(len(index) + n > 3 for n in left)
        assert all(sizes[p] == c for p, c in zip(kept, counts, strict=True))
        assert list(index.names) == [r[0] for r in ROWS if r[2] in kept]  # CSV order
        again = read_cxr8_index(tmp_path, max_images=3, seed=seed)
        assert again.names == index.names
    assert len(read_cxr8_index(tmp_path, max_images=100)) == 6
    firsts, refused = set(), 0
    for seed in range(40):
        try:
            firsts.add(read_cxr8_index(tmp_path, max_images=1, seed=seed).patients[0])
        except ParameterError as exc:  # a two-image patient drawn first
            assert "patients are never split" in str(exc)
            refused += 1
    assert firsts == {"2", "4"} and refused > 0


# ---------------------------------------------------------------------- clients
def _check_partition(parts, patients):
    rows = np.concatenate([np.concatenate(p) for p in parts])
    assert np.array_equal(np.sort(rows), np.arange(patients.size))  # every row exactly once
    owners = {}
    for k, (train, test) in enumerate(parts):
        for split, idx in (("train", train), ("test", test)):
            for p in np.unique(patients[idx]):
                assert p not in owners, f"patient {p} in {owners[p]} and {(k, split)}"
                owners[p] = (k, split)
    assert set(owners) == set(np.unique(patients).tolist())


def test_patient_clients_keep_patients_whole():
    rng = np.random.default_rng(0)
    patients = rng.integers(0, 57, 300)
    parts = patient_clients(patients, 10, test_fraction=0.2, seed=3)
    assert len(parts) == 10
    _check_partition(parts, patients)
    n_test = sum(np.unique(patients[test]).size for _, test in parts)
    assert 8 <= n_test <= 14  # about a fifth of 57, rounded per client
    assert all(
        np.array_equal(a[0], b[0])
        for a, b in zip(parts, patient_clients(patients, 10, seed=3), strict=True)
    )
    few = patient_clients(np.array(["a", "b", "a"]), 30, test_fraction=0.0)
    assert len(few) == 2 and all(test.size == 0 for _, test in few)
    with pytest.raises(ParameterError, match="test_fraction"):
        patient_clients(patients, 10, test_fraction=1.0)


def test_cxr8_clients_end_to_end(tmp_path):
    _dataset(tmp_path, "official")
    clients = cxr8_clients(tmp_path, n_clients=3, size=8, channels=3, test_fraction=0.0)
    assert len(clients) == 3
    assert sum(len(c[0]) for c in clients) == 6
    for x_train, y_train, x_test, y_test in clients:
        assert x_train.shape[1:] == (3, 8, 8) and y_train.shape[1:] == (8,)
        assert x_test.shape == (0, 3, 8, 8) and y_test.shape == (0, 8)


# ---------------------------------------------------------------------- the stand-in
def test_standin_shapes_labels_and_patients():
    x, y, patients = cxr8_standin(40, seed=1)
    n = patients.size
    assert x.shape == (n, 1, 16, 16) and y.shape == (n, 8)
    assert x.dtype == np.float32 and 0 <= x.min() and x.max() <= 1
    assert set(np.unique(y)) <= {0.0, 1.0}
    assert np.array_equal(np.unique(patients), np.arange(40)) and n > 40
    assert y[:, 0].mean() > y[:, -1].mean()  # imbalanced: prevalence from 0.2 down to 0.02
    again = cxr8_standin(40, seed=1)
    assert all(np.array_equal(a, b) for a, b in zip((x, y, patients), again, strict=True))
    assert not np.array_equal(x, cxr8_standin(40, seed=2)[0][: x.shape[0]])
    assert cxr8_standin(5, n_conditions=14, size=8)[1].shape[1] == 14


def test_standin_clients_follow_the_patient_path():
    _, _, patients = cxr8_standin(120, seed=0)
    clients = cxr8_standin_clients(30, n_patients=120, seed=0)
    parts = patient_clients(patients, 30, seed=0)
    assert len(clients) == 30
    for (x_train, y_train, x_test, _), (train, test) in zip(clients, parts, strict=True):
        assert len(x_train) == len(y_train) == train.size and len(x_test) == test.size
    _check_partition(parts, patients)


def test_standin_trains_with_the_multilabel_trainer():
    torch = pytest.importorskip("torch")
    from riemfl.nn import SmallCNN, TorchClientTrainer

    torch.manual_seed(0)
    clients = cxr8_standin_clients(4, n_patients=40, seed=0)
    trainer = TorchClientTrainer(
        lambda: SmallCNN(n_classes=8, image_size=16), clients, loss="bce_multilabel", epochs=1
    )
    start = trainer.initial_parameters(0)
    result = trainer.evaluate(start)
    assert {"auroc", "auprc", "error"} <= set(result)
    assert result["error"] == pytest.approx(1 - result["auroc"])


# ---------------------------------------------------------------------- metrics
def test_macro_metrics_match_scikit_learn():
    metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for trial in range(5):
        y = (rng.random((80, 6)) < rng.uniform(0.1, 0.6, 6)).astype(int)
        y[0], y[1] = 1, 0  # both classes in every label
        s = rng.normal(size=y.shape) + y
        if trial % 2:
            s = np.round(s, 1)  # many ties
        got = multilabel_scores(y, s)
        assert got.skipped_auroc == got.skipped_auprc == ()
        assert got.macro_auroc == pytest.approx(metrics.roc_auc_score(y, s, average="macro"))
        assert got.macro_auprc == pytest.approx(
            metrics.average_precision_score(y, s, average="macro")
        )
        for k in range(6):
            assert got.auroc[k] == pytest.approx(metrics.roc_auc_score(y[:, k], s[:, k]))


def test_hand_example_with_ties():
    # positives score 0.5 and 0.9, negatives 0.5 and 0.1: pairs 1/2 (tie) + 1 + 1 + 1 over 4
    # precision-recall steps: {0.9}: P = 1, R = 1/2; {0.9, 0.5, 0.5}: P = 2/3, R = 1
    got = multilabel_scores([[0], [1], [1], [0]], [[0.5], [0.5], [0.9], [0.1]], labels=["Mass"])
    assert got.auroc == (0.875,) and got.macro_auroc == 0.875
    assert got.auprc[0] == pytest.approx(0.5 * 1 + 0.5 * 2 / 3)
    assert got.labels == ("Mass",)


def test_single_class_labels_are_skipped_and_named():
    from riemfl.nn import macro_auroc_auprc

    y = np.array([[1, 0, 1], [0, 0, 1], [1, 0, 1], [0, 0, 1]])
    s = np.array([[0.9, 0.2, 0.1], [0.1, 0.3, 0.2], [0.8, 0.1, 0.3], [0.3, 0.4, 0.4]])
    got = multilabel_scores(y, s, labels=("a", "none", "all"))
    assert got.skipped_auroc == ("none", "all") and got.skipped_auprc == ("none",)
    assert got.macro_auroc == 1.0 and np.isnan(got.auroc[1]) and np.isnan(got.auroc[2])
    assert got.auprc[2] == 1.0 and got.macro_auprc == 1.0
    assert (got.macro_auroc, got.macro_auprc) == macro_auroc_auprc(y, s)
    empty = multilabel_scores(np.zeros((3, 2)), np.ones((3, 2)))
    assert np.isnan(empty.macro_auroc) and np.isnan(empty.macro_auprc)
    assert empty.skipped_auroc == ("0", "1")


def test_metric_input_errors():
    with pytest.raises(ShapeError, match="one \\(n, K\\)"):
        multilabel_scores(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(ShapeError, match="0 or 1"):
        multilabel_scores(np.full((3, 2), 2), np.zeros((3, 2)))
    with pytest.raises(ShapeError, match="NaN"):
        multilabel_scores(np.zeros((3, 2)), np.full((3, 2), np.nan))
    with pytest.raises(ShapeError, match="label names"):
        multilabel_scores(np.zeros((3, 2)), np.zeros((3, 2)), labels=["a"])


def test_t_e_on_auroc():
    assert CXR8_TARGET_ERROR == 0.25
    steps = [0, 10, 20, 30]
    assert auroc_t_e(steps, [0.6, 0.74, 0.76, 0.8]) == 20.0
    assert auroc_t_e(steps, [0.6, 0.75, 0.7, 0.8]) == 10.0  # at e exactly, the first reading
    assert auroc_t_e(steps, [0.6, np.nan, 0.7, 0.74]) is None
    assert auroc_t_e(steps, [0.6, 0.72, 0.7, 0.74], e=0.3) == 10.0
    with pytest.raises(ParameterError):
        auroc_t_e(steps, [0.6, 0.7])
