"""TorchClientTrainer: protocol, FedProx training, determinism, evaluation, numpy metrics."""

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from riemfl.testing import importorskip

torch = importorskip("torch")

from torch import nn  # noqa: E402

from riemfl.errors import DataError, ParameterError, ShapeError  # noqa: E402
from riemfl.nn import (  # noqa: E402
    MLP,
    SmallCNN,
    TorchClientTrainer,
    average_precision,
    binary_auroc,
    digits_clients,
    load_flat_parameters,
    macro_auroc_auprc,
)


def _blobs(n, rng, shift=2.0):
    """Two linearly separable Gaussian blobs in 2-D."""
    y = rng.integers(0, 2, n)
    x = rng.standard_normal((n, 2)) * 0.5 + shift * (2 * y[:, None] - 1)
    return x.astype(np.float32), y


def _clients(sizes=(40, 25, 0), seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for n in sizes:
        xtr, ytr = _blobs(n, rng)
        xte, yte = _blobs(max(n // 4, 0), rng)
        out.append((xtr, ytr, xte, yte))
    return out


def _trainer(**kw):
    kw.setdefault("lr", 0.05)
    kw.setdefault("batch_size", 8)
    return TorchClientTrainer(lambda: MLP([2, 8, 2]), _clients(), **kw)


def _local_loss(trainer, i, flat):
    x, y = trainer._x["train"], trainer._y["train"]
    lo, hi = trainer._offsets["train"][i : i + 2]
    trainer._load(flat, "test")
    with torch.no_grad():
        return float(torch.nn.functional.cross_entropy(trainer.model(x[lo:hi]), y[lo:hi]))


def test_protocol_counts():
    tr = _trainer(epochs=3)
    assert tr.n_clients == 3
    assert [tr.n_samples(i) for i in range(3)] == [40, 25, 0]
    assert tr.num_batches(0) == 3 * 5 and tr.num_batches(1) == 3 * 4 and tr.num_batches(2) == 0
    assert tr.num_batches(1, epochs=1) == 4
    assert tr.n_parameters == 2 * 8 + 8 + 8 * 2 + 2
    with pytest.raises(ParameterError):
        tr.n_samples(3)
    with pytest.raises(ParameterError):
        tr.num_batches(0, epochs=0)


def test_training_decreases_local_loss_and_returns_float64():
    tr = _trainer(mu=0.0)
    start = tr.initial_parameters(0)
    out = tr.train(0, start, np.random.default_rng(0))
    assert out.dtype == np.float64 and out.shape == start.shape
    assert _local_loss(tr, 0, out) < 0.5 * _local_loss(tr, 0, start)
    assert tr.evaluate(out)["accuracy"] > 0.9  # separable blobs


def test_determinism_from_rng():
    tr = _trainer()
    start = tr.initial_parameters(3)
    a = tr.train(1, start, np.random.default_rng(7))
    tr.train(0, start, np.random.default_rng(8))  # other work in between changes nothing
    torch.manual_seed(123)
    b = tr.train(1, start, np.random.default_rng(7))
    c = tr.train(1, start, np.random.default_rng(9))
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)  # a different shuffle
    rng = np.random.default_rng(0)
    tr.train(1, start, rng)
    assert rng.bit_generator.state == _advance(np.random.default_rng(0))  # one draw per call
    assert np.array_equal(tr.initial_parameters(3), start)


def _advance(rng):
    rng.integers(0, 2**63 - 1)
    return rng.bit_generator.state


def test_global_torch_rng_is_untouched():
    tr = _trainer()
    start = tr.initial_parameters(0)
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    tr.train(0, start, np.random.default_rng(1))
    assert torch.equal(torch.rand(3), expected)


def test_fedprox_term_keeps_the_model_near_the_start():
    start = _trainer().initial_parameters(0)
    free = _trainer(mu=0.0, lr=0.01).train(0, start, np.random.default_rng(0))
    tied = _trainer(mu=1e4, lr=0.01).train(0, start, np.random.default_rng(0))
    d_free = np.linalg.norm(free - start)
    d_tied = np.linalg.norm(tied - start)
    assert d_free > 0.1
    assert d_tied < 0.2 * d_free


def test_fedprox_gradient_is_exact():
    # the prox gradient mu (theta - start) vanishes at theta = start: mu cannot change the
    # first step (one full batch, one epoch), but changes later ones (previous test)
    start = _trainer().initial_parameters(0)
    one = dict(epochs=1, batch_size=1000)
    a = _trainer(mu=0.0, **one).train(0, start, np.random.default_rng(0))
    b = _trainer(mu=10.0, **one).train(0, start, np.random.default_rng(0))
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-7)


def test_empty_client_returns_start():
    tr = _trainer()
    start = tr.initial_parameters(0)
    out = tr.train(2, start, np.random.default_rng(0))
    np.testing.assert_allclose(out, start, atol=1e-7)


def test_evaluate_and_per_client_accuracy_shapes():
    tr = _trainer()
    flat = tr.initial_parameters(0)
    ev = tr.evaluate(flat)
    assert set(ev) == {"accuracy", "loss", "error", "n_samples"}
    assert ev["n_samples"] == 10 + 6 and ev["error"] == pytest.approx(1 - ev["accuracy"])
    per = tr.per_client_accuracy(flat)
    assert per.shape == (3,) and math.isnan(per[2]) and np.all((per[:2] >= 0) & (per[:2] <= 1))
    pooled = (per[0] * 10 + per[1] * 6) / 16
    assert pooled == pytest.approx(ev["accuracy"])
    assert tr.evaluate(flat, split="train")["n_samples"] == 65
    assert tr.per_client_accuracy(flat, split="train").shape == (3,)
    with pytest.raises(ParameterError):
        tr.evaluate(flat, split="val")
    with pytest.raises(ShapeError):
        tr.evaluate(flat[:-1])
    with pytest.raises(ShapeError):
        tr.train(0, flat[:-1], np.random.default_rng(0))
    with pytest.raises(ParameterError):
        tr.train(0, flat, 0)


def test_multilabel_evaluation():
    rng = np.random.default_rng(0)

    def client(n):
        x = rng.standard_normal((n, 4)).astype(np.float32)
        y = (x[:, :3] > 0).astype(np.int64)  # label k = sign of feature k
        return x, y

    data = [(*client(30), *client(20)) for _ in range(2)]
    tr = TorchClientTrainer(
        lambda: MLP([4, 3]), data, loss="bce_multilabel", lr=0.05, batch_size=10, mu=0.0
    )
    flat = tr.initial_parameters(0)
    for _ in range(5):
        flat = tr.train(0, flat, rng, epochs=4)
    ev = tr.evaluate(flat)
    assert {"auroc", "auprc", "accuracy", "error"} <= set(ev)
    assert ev["error"] == pytest.approx(1 - ev["auroc"])
    assert ev["auroc"] > 0.9 and ev["auprc"] > 0.8
    assert tr.per_client_accuracy(flat).shape == (2,)


def test_bad_datasets():
    x, y = np.zeros((4, 2), np.float32), np.array([0, 1, 0, 1])
    with pytest.raises(DataError):
        TorchClientTrainer(lambda: MLP([2, 2]), [])
    with pytest.raises(DataError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y, x)])
    with pytest.raises(DataError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y[:3], x, y)])
    with pytest.raises(DataError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y, x, y), (np.zeros((4, 3)), y, x, y)])
    with pytest.raises(DataError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y - 1, x, y)])
    with pytest.raises(DataError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x * np.nan, y, x, y)])
    with pytest.raises(ParameterError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y, x, y)], loss="mse")
    with pytest.raises(ParameterError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y, x, y)], lr=0.0)
    with pytest.raises(ParameterError):
        TorchClientTrainer(lambda: MLP([2, 2]), [(x, y, x, y)], mu=-1.0)


def test_digits_clients_with_small_cnn():
    importorskip("sklearn")
    data = digits_clients(n_clients=5, alpha=0.5, seed=0)
    assert len(data) == 5
    assert sum(len(d[0]) + len(d[2]) for d in data) == 1797
    for xtr, ytr, xte, yte in data:
        assert xtr.shape[1:] == (1, 8, 8) and xtr.dtype == np.float32
        assert abs(len(xte) - 0.2 * (len(xtr) + len(xte))) <= 0.5
        assert len(ytr) == len(xtr) and len(yte) == len(xte) and ytr.dtype == np.int64
        assert set(ytr.tolist()) | set(yte.tolist()) <= set(range(10))
    again = digits_clients(n_clients=5, alpha=0.5, seed=0)
    assert all(np.array_equal(a[1], b[1]) for a, b in zip(data, again, strict=True))
    tr = TorchClientTrainer(SmallCNN, data, lr=3e-3, batch_size=64)
    flat = tr.initial_parameters(0)
    i = int(np.argmax([len(d[0]) for d in data]))
    before = tr.per_client_accuracy(flat, split="train")[i]
    flat = tr.train(i, flat, np.random.default_rng(0), epochs=5)
    # the client's own (label-skewed) training rows; the pooled loss may well go up
    assert tr.per_client_accuracy(flat, split="train")[i] > max(before, 0.5)


# ---------------------------------------------------------------------- metrics
@given(
    y=st.lists(st.booleans(), min_size=2, max_size=40),
    seed=st.integers(0, 1000),
    ties=st.booleans(),
)
def test_metrics_match_sklearn(y, seed, ties):
    sk = importorskip("sklearn.metrics")
    y = np.array(y)
    s = np.random.default_rng(seed).standard_normal(y.size)
    if ties:
        s = np.round(s)
    if y.all() or not y.any():
        assert math.isnan(binary_auroc(y, s))
    else:
        assert binary_auroc(y, s) == pytest.approx(sk.roc_auc_score(y, s), abs=1e-12)
    if y.any():
        assert average_precision(y, s) == pytest.approx(sk.average_precision_score(y, s), abs=1e-12)
    else:
        assert math.isnan(average_precision(y, s))


def test_metrics_hand_values():
    assert binary_auroc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8]) == pytest.approx(0.75)
    assert binary_auroc([0, 1], [0.5, 0.5]) == 0.5
    # ranking 1 (pos), 0.8 (neg), 0.6 (pos): AP = 1/2 * 1 + 1/2 * 2/3
    assert average_precision([1, 0, 1], [1.0, 0.8, 0.6]) == pytest.approx(0.5 + 1 / 3)
    y = np.array([[1, 0], [0, 0], [1, 0]])
    s = np.array([[0.9, 0.1], [0.2, 0.3], [0.8, 0.5]])
    roc, ap = macro_auroc_auprc(y, s)  # label 1 has no positive: left out of both means
    assert roc == 1.0 and ap == 1.0
    with pytest.raises(ShapeError):
        macro_auroc_auprc(y, s[:, :1])


def test_batch_norm_is_evaluated_with_the_pooled_training_statistics():
    g = np.random.default_rng(0)
    clients = [
        (
            g.normal(3.0, 2.0, (n, 4)),
            g.integers(0, 2, n),
            g.normal(3.0, 2.0, (5, 4)),
            g.integers(0, 2, 5),
        )
        for n in (7, 11)
    ]

    def model_fn():
        torch.manual_seed(0)
        return nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3), nn.ReLU(), nn.Linear(3, 2))

    tr = TorchClientTrainer(model_fn, clients, epochs=1, batch_size=4)
    flat = tr.train(0, tr.initial_parameters(), np.random.default_rng(1))
    got = tr.evaluate(flat)["loss"]
    # by hand: the population statistics of the first layer's outputs on all 18 training rows
    ref = model_fn().double()
    load_flat_parameters(ref, flat)
    x_train = torch.from_numpy(np.concatenate([c[0] for c in clients]))
    h = ref[0](x_train)
    bn = ref[1]
    with torch.no_grad():
        bn.running_mean.copy_(h.mean(0))
        bn.running_var.copy_(h.var(0, unbiased=True))
    ref.eval()
    x_test = torch.from_numpy(np.concatenate([c[2] for c in clients]))
    y_test = torch.from_numpy(np.concatenate([c[3] for c in clients]))
    with torch.no_grad():
        want = float(nn.CrossEntropyLoss()(ref(x_test), y_test))
    assert got == pytest.approx(want, rel=1e-5)  # float32 model against float64
    # the statistics come from the evaluated parameters, whatever trained before
    tr.train(1, flat, np.random.default_rng(2))
    tr.evaluate(flat, "train")  # replaces the cached test logits: the next call recomputes
    assert tr.evaluate(flat)["loss"] == pytest.approx(got, rel=1e-6)
