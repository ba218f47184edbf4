"""FLoRAL training: the router stays local, pi* recovers the synthetic clusters, end-to-end runs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from riemfl.testing import importorskip

torch = importorskip("torch")
importorskip("sklearn")

from torch import nn  # noqa: E402

from riemfl.errors import CheckpointError, ClientFailureError, DataError, ParameterError  # noqa: E402
from riemfl.federated import ExponentialTime, RunOptions, run_async  # noqa: E402
from riemfl.nn import MLP  # noqa: E402
from riemfl.nn.floral import (  # noqa: E402
    EnsembleModel,
    FloralAggregator,
    FloralFedBuff,
    FloralTrainer,
    aggregation_mismatch,
    cluster_recovery,
    clustered_images,
    digits_clusters,
    floralize,
    reduce_rows,
    rotate_images,
    run_floral,
    synthetic_linear,
    synthetic_mlp,
)


@pytest.fixture(scope="module")
def digits_ls():
    return digits_clusters("label_shift", n_clients=8, n_clusters=4, seed=0)


def _trainer(model, task, **kw):
    kw.setdefault("batch_size", 16)
    return FloralTrainer(model, task.clients, clusters=task.clusters, **kw)


# ------------------------------------------------------------------------------ the router
def test_router_never_leaves_the_client(digits_ls):
    torch.manual_seed(0)
    model = floralize(MLP([64, 16, 10]), 4, 0.1, seed=0, router_noise=1.0)
    tr = _trainer(model, digits_ls, router_lr=1.0)
    x0 = tr.global_parameters()
    assert "router.logits" not in {e.name for e in tr.layout.entries}
    n_router = model.router.logits.numel()
    assert tr.layout.size == sum(p.numel() for p in model.parameters()) - n_router
    upload = tr.train(0, x0, np.random.default_rng(0))
    n_k, pi_k = tr.upload_weights(0)
    # the upload is the federated vector and the aggregation weights (N^k, pi^k), nothing else
    assert upload.shape == (tr.layout.size,) and n_k == tr.n_samples(0)
    theta = tr.router_logits[0]
    assert np.abs(theta).max() > 0  # the client learned its router ...
    np.testing.assert_allclose(pi_k, np.exp(theta) / np.exp(theta).sum(), rtol=1e-6)
    # ... which the upload does not carry: reloading it with other logits gives the same vector
    before = upload.copy()
    tr.router_logits[0] = 123.0
    tr.personal_model(0, upload)  # loads the vector and the (changed) personal state
    np.testing.assert_array_equal(tr.layout.flatten(model), before)
    tr.router_logits[0] = theta
    # after a round the clients' routers differ (they are not averaged) and stay client-side
    h = run_floral(tr, 2, options=RunOptions(seed=1, record_every=None))
    assert h.final_point.shape == (tr.layout.size,)
    assert len({tuple(np.round(t, 6)) for t in tr.router_logits}) == tr.n_clients


def test_stateless_router_relearns_from_zero(digits_ls):
    torch.manual_seed(0)
    model = floralize(MLP([64, 16, 10]), 4, 0.1, seed=0)
    tr = _trainer(model, digits_ls, router_lr=1.0, stateless_router=True)
    x0 = tr.global_parameters()
    tr.router_logits[1] = 50.0  # a stale state is ignored
    tr.train(1, x0, np.random.default_rng(0))
    stateful = _trainer(floralize(MLP([64, 16, 10]), 4, 0.1, seed=0), digits_ls, router_lr=1.0)
    torch.manual_seed(0)
    stateful.train(1, x0, np.random.default_rng(0))
    np.testing.assert_allclose(tr.router_logits[1], stateful.router_logits[1], atol=1e-6)


def test_fixed_routing_uses_the_true_cluster(digits_ls):
    model = floralize(MLP([64, 16, 10]), 4, 0.1, routing="fixed", seed=0)
    tr = _trainer(model, digits_ls)
    tr.train(5, tr.global_parameters(), np.random.default_rng(0))
    np.testing.assert_array_equal(tr.upload_weights(5)[1], np.eye(4)[digits_ls.clusters[5]])
    with pytest.raises(ParameterError, match="true clusters"):
        FloralTrainer(model, digits_ls.clients)


# ------------------------------------------------------------------------------ synthetic
def test_synthetic_linear_with_pi_star_recovers_the_cluster_models():
    task = synthetic_linear(seed=0)
    assert task.clients[0][0].shape == (8, 10) and len(task.clients) == 10
    torch.manual_seed(0)
    model = floralize(nn.Sequential(nn.Linear(10, 3)), 2, rank=1, routing="fixed", seed=0)
    tr = FloralTrainer(
        model, task.clients, loss="mse", lr=0.1, batch_size=4, clusters=task.clusters
    )
    h = run_floral(tr, 150, options=RunOptions(record_every=50))
    assert h.metrics["loss"][-1] < 1e-2 * h.metrics["loss"][0]
    for k in range(len(task.clients)):
        merged = tr.personal_model(k, h.final_point)[0]
        want = task.cluster_weight(int(task.clusters[k]))
        err = np.linalg.norm(merged.weight.detach().numpy() - want) / np.linalg.norm(want)
        assert err < 0.05, (k, err)
        np.testing.assert_allclose(merged.bias.detach().numpy(), task.truth["b"], atol=0.05)


def test_synthetic_learned_router_finds_the_clusters():
    task = synthetic_linear(seed=1)
    torch.manual_seed(1)
    model = floralize(nn.Sequential(nn.Linear(10, 3)), 2, rank=1, router_noise=1.0, seed=1)
    tr = FloralTrainer(
        model, task.clients, loss="mse", lr=0.1, router_lr=1.0, batch_size=4, clusters=task.clusters
    )
    h = run_floral(tr, 60, options=RunOptions(record_every=30))
    assert h.metrics["cluster_recovery"][-1] == 1.0
    assert h.metrics["mismatch"][-1] < 0.2


def test_synthetic_generators_shapes_and_truth():
    mlp = synthetic_mlp(seed=0)
    assert len(mlp.clients) == 20 and mlp.n_clusters == 4
    assert mlp.clients[0][0].shape == (55, 10) and mlp.clients[0][1].shape == (55, 1)
    assert (mlp.clients[0][1] >= 0).all() or mlp.truth["Phi"].min() < 0
    x = mlp.clients[3][0].astype(float)
    c = int(mlp.clusters[3])
    want = np.maximum(x @ mlp.cluster_weight(c).T + mlp.truth["b"], 0) @ mlp.truth["Phi"].T
    np.testing.assert_allclose(mlp.clients[3][1], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(mlp.clusters, np.arange(20) % 4)


def test_routing_metrics():
    pi = np.array([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]])
    clusters = np.array([0, 1, 0])  # learned labels are swapped: still a perfect recovery
    assert cluster_recovery(pi, clusters) == 1.0
    mismatch = aggregation_mismatch(pi, clusters, np.ones(3))
    assert mismatch.shape == (2,) and (mismatch > 0).all() and (mismatch <= 2).all()
    np.testing.assert_allclose(aggregation_mismatch(np.eye(2)[[1, 0, 1]], clusters, np.ones(3)), 0)


# ------------------------------------------------------------------------------ image tasks
def test_clustered_images_rotation_label_shift_and_reduced():
    images = np.arange(40 * 16, dtype=float).reshape(40, 16) / 640
    labels = np.arange(40) % 10
    rot = clustered_images(
        images, labels, transform="rotation", n_clients=4, n_clusters=4, test_fraction=0.25, seed=0
    )
    assert rot.input_shape == (1, 4, 4) and rot.clusters.tolist() == [0, 1, 2, 3]
    x1, y1 = rot.clients[1][2], rot.clients[1][3]
    x0, y0 = rot.clients[0][2], rot.clients[0][3]  # "full" evaluation: the same test rows
    np.testing.assert_array_equal(x1, np.rot90(x0, 1, axes=(-2, -1)))
    np.testing.assert_array_equal(y1, y0)
    ls = clustered_images(
        images,
        labels,
        transform="label_shift",
        n_clients=4,
        n_clusters=4,
        test_fraction=0.25,
        seed=0,
    )
    np.testing.assert_array_equal(ls.clients[3][3], (ls.clients[0][3] + 3) % 10)
    shard = clustered_images(images, labels, n_clients=4, evaluation="shard", test_fraction=0.25)
    assert sum(c[2].shape[0] for c in shard.clients) == 10
    assert reduce_rows(200) == 10 and reduce_rows(72) == 10 and reduce_rows(1000) == 50
    assert reduce_rows(6) == 6
    with pytest.raises(DataError, match="training rows"):
        clustered_images(images[:3], labels[:3], n_clients=4, test_fraction=0.25)
    with pytest.raises(ParameterError, match="transform"):
        clustered_images(images, labels, transform="blur")
    np.testing.assert_allclose(rotate_images(np.eye(3)[None], 90)[0], np.rot90(np.eye(3)))


def test_reduced_digits_keep_ten_rows_per_client():
    task = digits_clusters("rotation", n_clients=20, reduced=True, seed=0)
    assert {c[0].shape[0] for c in task.clients} == {10}
    assert task.clients[0][0].shape[1:] == (1, 8, 8)
    # the plain 5% (no 10-row minimum): round(0.05 * 72) = 4 rows of each client's 71-72
    five = digits_clusters("rotation", n_clients=20, reduced=True, min_rows=1, seed=0)
    assert set(five.description["available_rows"]) == {71, 72}
    assert five.description["train_rows"] == [4] * 20


def test_no_client_is_left_without_rows():
    assert reduce_rows(72, 0.05, 1) == 4 and reduce_rows(5, 0.05, 1) == 1
    with pytest.raises(ParameterError, match="minimum"):
        reduce_rows(72, 0.01, 0)  # round(0.72) = 1, but a minimum of 0 could leave none
    with pytest.raises(ParameterError, match="fraction"):
        reduce_rows(72, 0.0, 1)
    images = np.zeros((40, 16))
    labels = np.arange(40) % 10
    with pytest.raises(DataError, match="without test rows"):  # 2 test rows for 4 clients
        clustered_images(images, labels, n_clients=4, evaluation="shard", test_fraction=0.05)
    full = clustered_images(images, labels, n_clients=4, evaluation="full", test_fraction=0.05)
    assert all(c[2].shape[0] == 2 for c in full.clients)


# ------------------------------------------------------------------------------ end to end
@pytest.mark.parametrize(
    "kind", ["fedavg", "local", "ensemble", "floral-learned", "floral-fixed", "products"]
)
def test_tiny_runs_of_every_method(kind, digits_ls):
    torch.manual_seed(0)
    base = MLP([64, 16, 10])
    model = {
        "fedavg": lambda: base,
        "local": lambda: floralize(base, 1, 0.1, private_adaptors=True, seed=0),
        "ensemble": lambda: EnsembleModel(base, 4, routing="learned"),
        "floral-learned": lambda: floralize(base, 4, 0.1, seed=0),
        "floral-fixed": lambda: floralize(base, 4, 0.1, routing="fixed", seed=0),
        "products": lambda: floralize(base, 4, 0.1, routing="fixed", seed=0),
    }[kind]()
    tr = _trainer(model, digits_ls, lr=0.2)
    agg = FloralAggregator(tr.layout, "products" if kind == "products" else "factors")
    h = run_floral(tr, 4, aggregator=agg, clients_per_round=4, options=RunOptions(record_every=2))
    assert h.metrics["round"] == [0, 2, 4] and len(h.log["client"]) == 16
    assert 0 <= h.metrics["accuracy"][-1] <= 1 and np.isfinite(h.metrics["loss"]).all()
    assert h.metrics["loss"][-1] < h.metrics["loss"][0]
    if kind == "local":  # private adaptors stay on the clients and differ between them
        assert tr.layout.private_size > 0 and not np.allclose(tr.private[0], tr.private[1])


def test_checkpoint_resume_equals_an_uninterrupted_run(tmp_path, digits_ls):
    def make():
        torch.manual_seed(0)
        return _trainer(
            floralize(MLP([64, 16, 10]), 4, 0.1, seed=0, router_noise=1.0), digits_ls, router_lr=1.0
        )

    class Interrupted(Exception):
        pass

    def stop_at_4(r, _):
        if r == 4:
            raise Interrupted

    full = run_floral(make(), 6, clients_per_round=3, options=RunOptions(seed=2, record_every=3))
    ckpt = tmp_path / "run.ckpt"
    with pytest.raises(Interrupted):  # killed after round 4; the checkpoint holds round 3
        run_floral(
            make(),
            6,
            clients_per_round=3,
            options=RunOptions(
                seed=2, record_every=3, checkpoint=ckpt, checkpoint_every=3, on_step=stop_at_4
            ),
        )
    resumed = run_floral(
        make(),
        6,
        clients_per_round=3,
        options=RunOptions(seed=2, record_every=3, checkpoint=ckpt, checkpoint_every=3),
    )
    np.testing.assert_array_equal(resumed.final_point, full.final_point)
    assert resumed.metrics["accuracy"] == full.metrics["accuracy"]
    assert resumed.log["client"] == full.log["client"]
    with pytest.raises(CheckpointError, match="another run"):
        run_floral(make(), 6, clients_per_round=2, options=RunOptions(seed=2, checkpoint=ckpt))


def test_diverging_client_is_dropped_with_a_warning(digits_ls):
    torch.manual_seed(0)
    tr = _trainer(floralize(MLP([64, 16, 10]), 4, 0.1, seed=0), digits_ls, lr=1e30)
    with warnings.catch_warnings(record=True), pytest.raises(ClientFailureError, match="every"):
        warnings.simplefilter("always")
        run_floral(tr, 1, options=RunOptions(record_every=None))


def test_fedbuff_floral_runs_on_the_async_engine(digits_ls):
    torch.manual_seed(0)
    tr = _trainer(floralize(MLP([64, 16, 10]), 4, 0.1, seed=0), digits_ls)
    for adaptors in ("factors", "products"):
        rule = FloralFedBuff(tr.layout, tr.upload_weights, buffer_size=3, adaptors=adaptors)
        h = run_async(
            tr,
            rule,
            4,
            workers=4,
            timing=ExponentialTime(1.0),
            x0=tr.global_parameters(),
            options=RunOptions(record_every=2),
        )
        assert h.metrics["step"][-1] == 4 and len(h.log["client"]) == 12
        assert max(h.log["staleness"]) >= 1 and 0 <= h.metrics["accuracy"][-1] <= 1


def test_user_mnist_file_goes_through_the_existing_loader(tmp_path):
    rng = np.random.default_rng(0)
    path = tmp_path / "mnist.npz"
    np.savez(
        path,
        x_train=rng.integers(0, 256, (40, 28, 28), dtype=np.uint8),
        y_train=rng.integers(0, 10, 40),
        x_test=rng.integers(0, 256, (12, 28, 28), dtype=np.uint8),
        y_test=rng.integers(0, 10, 12),
    )
    task = digits_clusters("rotation", data=str(path), n_clients=4, evaluation="shard")
    assert task.input_shape == (1, 28, 28) and task.description["test_rows"] == 12
    assert sum(c[0].shape[0] for c in task.clients) == 40
    assert 0.0 <= task.clients[0][0].min() and task.clients[0][0].max() <= 1.0


@pytest.mark.parametrize("fault", ["raise", "nan", "complex", "shape", "int"])
def test_a_faulty_floral_client_is_dropped_and_keeps_its_personal_state(digits_ls, fault):
    """Every kind of fault of one client, checked before its upload is stacked with the
    others: dropped with its reason; the others aggregated; its router not updated."""
    torch.manual_seed(0)
    tr = _trainer(floralize(MLP([64, 16, 10]), 4, 0.1, seed=0), digits_ls, router_lr=1.0)
    train, before = tr.train, tr.router_logits[2].copy()

    def faulty(i, start, rng, epochs=None):
        out = train(i, start, rng, epochs)
        if i != 2:
            return out
        return {
            "raise": lambda: (_ for _ in ()).throw(RuntimeError("client 2 crashed")),
            "nan": lambda: np.full_like(out, np.nan),
            "complex": lambda: out + 1e-3j,
            "shape": lambda: out[:-1],
            "int": lambda: out.astype(np.int64),
        }[fault]()

    tr.train = faulty
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        h = run_floral(tr, 1, options=RunOptions(record_every=None))
    assert [w["client"] for w in h.warnings] == [2]
    assert 2 not in h.log["client"] and h.participants[-1] == tr.n_clients - 1
    assert np.isfinite(h.final_point).all() and np.isrealobj(h.final_point)
    np.testing.assert_array_equal(tr.router_logits[2], before)


def test_augment_sees_every_training_batch_and_no_evaluation_batch(digits_ls):
    seen = []

    def negate(x, generator):
        assert isinstance(generator, torch.Generator)
        seen.append(x.shape[0])
        return -x

    model = floralize(MLP([64, 16, 10]), 4, 0.1, seed=0)
    tr = _trainer(model, digits_ls, augment=negate)
    plain = _trainer(floralize(MLP([64, 16, 10]), 4, 0.1, seed=0), digits_ls)
    x0 = tr.global_parameters()
    out = tr.train(0, x0, np.random.default_rng(0))
    assert sum(seen) == tr.n_samples(0)  # one call per training batch, every row once
    assert not np.allclose(out, plain.train(0, x0, np.random.default_rng(0)))
    before = len(seen)
    tr.evaluate(out)
    assert len(seen) == before  # evaluation never augments
    assert "negate" in tr.describe()["augment"]
    with pytest.raises(ParameterError, match="augment must be callable"):
        _trainer(model, digits_ls, augment="flip")
