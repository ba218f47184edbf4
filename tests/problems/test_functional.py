"""FunctionProblem: explicit, autograd and torch gradients; mini-batches; types; errors."""

import numpy as np
import pytest

from riemfl import Euclidean, ParameterError, ShapeError, Sphere, Stiefel
from riemfl.backend import is_torch
from riemfl.errors import MissingDependencyError
from riemfl.problems import FunctionProblem, KPCAProblem
from riemfl.testing import importorskip

RNG = np.random.default_rng(0)
MATS = [RNG.standard_normal((4, 4)) for _ in range(3)]
MATS = [m + m.T for m in MATS]


def _numpy_problem(**kw):
    losses = [lambda x, m=m: 0.5 * np.sum(x * (m @ x)) + np.sum(np.sin(x)) for m in MATS]
    egrads = [lambda x, m=m: m @ x + np.cos(x) for m in MATS]
    return FunctionProblem(Stiefel(4, 2), losses, egrads, **kw)


def _autograd_problem():
    anp = importorskip("autograd.numpy")
    losses = [lambda x, m=m: 0.5 * anp.sum(x * (m @ x)) + anp.sum(anp.sin(x)) for m in MATS]
    return FunctionProblem(Stiefel(4, 2), losses, differentiation="autograd")


def _torch_problem():
    torch = importorskip("torch")
    tm = [torch.as_tensor(m) for m in MATS]
    losses = [lambda x, m=m: 0.5 * (x * (m.to(x.dtype) @ x)).sum() + torch.sin(x).sum() for m in tm]
    return FunctionProblem(Stiefel(4, 2), losses, differentiation="torch")


@pytest.mark.parametrize("make", [_numpy_problem, _autograd_problem, _torch_problem])
def test_gradients_match_finite_differences(make, assert_grad_matches_fd):
    problem = make()
    xs = problem.manifold.random_point(3, rng=1)
    grads = problem.client_egrads([0, 1, 2], xs)
    assert isinstance(grads, np.ndarray) and grads.shape == (3, 4, 2)
    rng = np.random.default_rng(2)
    for i in range(3):

        def f(x, i=i):
            return problem.client_losses([i], x[None])[0]

        assert_grad_matches_fd(f, grads[i], xs[i], rng)
    # every way of differentiating agrees with the explicit gradient
    np.testing.assert_allclose(grads, _numpy_problem().client_egrads([0, 1, 2], xs), rtol=1e-12)


def test_torch_in_torch_out():
    torch = importorskip("torch")
    problem = _torch_problem()
    xs = torch.as_tensor(problem.manifold.random_point(2, rng=3), dtype=torch.float32)
    g = problem.client_egrads([1, 2], xs)
    assert is_torch(g) and g.dtype == torch.float32 and not g.requires_grad
    ref = _numpy_problem().client_egrads([1, 2], xs.double().numpy())
    np.testing.assert_allclose(g.numpy(), ref, rtol=1e-5, atol=1e-5)
    losses = problem.client_losses([1, 2], xs)
    assert isinstance(losses, np.ndarray) and losses.dtype == np.float64
    # a point that requires grad is fine too (the oracle differentiates a detached copy)
    problem.client_egrads([0], xs[:1].clone().requires_grad_(True))


def test_stacked_equals_loop_and_global_quantities():
    problem = _numpy_problem(optimum=-100.0)
    x = problem.manifold.random_point(rng=4)
    g = problem.egrad(x)
    np.testing.assert_allclose(g, np.mean([m @ x + np.cos(x) for m in MATS], axis=0))
    assert problem.optimality_gap(x) == pytest.approx(problem.loss(x) + 100.0)
    assert np.isfinite(problem.grad_norm(x))


def test_minibatches_with_a_kpca_reference():
    """A FunctionProblem written as per-sample means reproduces KPCAProblem's oracle."""
    kp = KPCAProblem.synthetic(n_clients=3, d=5, k=2, p=4, seed=1)

    def make_loss(a):
        p = a.shape[0]

        def loss(x, batch):
            rows = a if batch is None else a[batch]
            # mean over the rows of f_il = -(p/2)|x^T a_l|^2
            return -(p / 2) * np.mean(np.sum((rows @ x) ** 2, axis=1))

        return loss

    def make_grad(a):
        p = a.shape[0]

        def grad(x, batch):
            rows = a if batch is None else a[batch]
            return -(p / len(rows)) * rows.T @ (rows @ x)

        return grad

    fp = FunctionProblem(
        kp.manifold,
        [make_loss(a) for a in kp.blocks],
        [make_grad(a) for a in kp.blocks],
        n_samples=kp.n_samples,
    )
    xs = kp.manifold.random_point(3, rng=5)
    batches = np.array([[0, 3], [1, 2], [3, 0]])
    np.testing.assert_allclose(
        fp.client_egrads(range(3), xs, batches), kp.client_egrads(range(3), xs, batches)
    )
    np.testing.assert_allclose(fp.client_losses(range(3), xs), kp.client_losses(range(3), xs))
    np.testing.assert_allclose(fp.client_egrads(range(3), xs), kp.client_egrads(range(3), xs))
    ag = importorskip("autograd.numpy")

    def ad_loss(a):
        p = a.shape[0]
        return lambda x, batch: (
            -(p / 2) * ag.mean(ag.sum(((a if batch is None else a[batch]) @ x) ** 2, axis=1))
        )

    fa = FunctionProblem(
        kp.manifold,
        [ad_loss(a) for a in kp.blocks],
        differentiation="autograd",
        n_samples=kp.n_samples,
    )
    np.testing.assert_allclose(
        fa.client_egrads(range(3), xs, batches), kp.client_egrads(range(3), xs, batches)
    )


def test_any_manifold():
    problem = FunctionProblem(
        Sphere(3),
        [lambda x: x[0], lambda x: -x[1]],
        [lambda x: np.eye(3)[0], lambda x: -np.eye(3)[1]],
    )
    x = np.array([0.0, 0.0, 1.0])
    np.testing.assert_allclose(problem.rgrad(x), [0.5, -0.5, 0.0])
    e = FunctionProblem(Euclidean(2), [lambda x: x @ x], [lambda x: 2 * x])
    np.testing.assert_allclose(e.egrad(np.array([1.0, 2.0])), [2.0, 4.0])


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda: FunctionProblem("St", [abs]), ParameterError, "Manifold"),
        (lambda: FunctionProblem(Euclidean(2), [abs]), ParameterError, "needs egrads"),
        (
            lambda: FunctionProblem(Euclidean(2), [], differentiation="torch"),
            ParameterError,
            "non-empty",
        ),
        (lambda: FunctionProblem(Euclidean(2), [abs], [abs, abs]), ParameterError, "1 callables"),
        (
            lambda: FunctionProblem(Euclidean(2), [abs], differentiation="jax"),
            ParameterError,
            "differentiation",
        ),
        (
            lambda: FunctionProblem(Euclidean(2), [abs], [abs], n_samples=[0]),
            ParameterError,
            "n_samples",
        ),
    ],
)
def test_constructor_errors(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_oracle_errors():
    problem = FunctionProblem(Euclidean(2), [lambda x: 0.0], [lambda x: np.zeros(3)])
    with pytest.raises(ShapeError, match="gradient has shape"):
        problem.client_egrads([0], np.zeros((1, 2)))
    with pytest.raises(ShapeError, match="one point per listed client"):
        problem.client_egrads([0], np.zeros((2, 2)))
    with pytest.raises(ParameterError, match="out of range"):
        problem.client_egrads([1], np.zeros((1, 2)))
    with pytest.raises(ParameterError, match="need n_samples"):
        problem.client_egrads([0], np.zeros((1, 2)), np.zeros((1, 1), dtype=int))
    torch = importorskip("torch")
    with pytest.raises(ParameterError, match="differentiation=.torch."):
        problem.client_egrads([0], torch.zeros((1, 2)))


def test_missing_autodiff_dependency(monkeypatch):
    import importlib

    real = importlib.import_module

    def fake(name, *a, **k):
        if name == "autograd":
            raise ImportError("No module named 'autograd'")
        return real(name, *a, **k)

    monkeypatch.setattr(importlib, "import_module", fake)
    with pytest.raises(MissingDependencyError, match=r"riemfl\[autograd\]"):
        FunctionProblem(Euclidean(2), [abs], differentiation="autograd")


def test_the_deprecated_backend_keyword_warns_and_still_works():
    with pytest.warns(DeprecationWarning, match="differentiation"):
        problem = FunctionProblem(Euclidean(2), [abs], [abs], backend="numpy")
    assert problem.differentiation == "explicit"
