r"""The AsyncBezier client on a federated problem (Licudi et al. 2025, App. C, Alg. 2; SGD; numpy).

:class:`BezierProblemTrainer` follows the trainer protocol of :mod:`riemfl.federated.local`, but
``train`` returns the learned control points :math:`\phi^K = (A, B, C)` (shape
``(degree + 1, *point_shape)``) instead of a point: the upload of
:class:`~riemfl.federated.async_manifold.AsyncManifold`. Torch models use
:class:`riemfl.nn.BezierClientTrainer`.

Client i, from the received :math:`\Theta^t` (Licudi et al. 2025, App. C, Alg. 2):

1. :math:`\phi^{(0)} = (\Theta^t, \Theta^t, \Theta^t)`;
2. ``warmup_steps`` (K1) steps on the end point at t = 1 (plain FedProx training of C):
   :math:`C \leftarrow C - \eta\,(\nabla l_i(C) + \mu (C - \Theta^t))`;
3. ``curve_steps`` (K - K1) steps with :math:`s \sim U[0, 1]` per step: at
   :math:`x = \iota_\phi(s)`, :math:`g = \nabla l_i(x) + \mu(x - \Theta^t)` (the prox term at
   the sampled point, as in eq. (6) of the paper; the technical report's Alg. 2 trains the
   control point on the loss without the prox term), and by the chain rule
   :math:`\nabla_{P_k} = B_k^n(s)\, g` for the trained control points: the inner ones, plus the
   end point when ``freeze_end=False`` (the paper's experiments freeze both end points after
   the warm-up, Sec. 3; it calls freezing the local end point optional).
   The start :math:`A = \Theta^t` is never trained, so the curve passes through the global
   model the client received.

Euclidean problems only (the paper's experiments); on a curved base the client is
:class:`~riemfl.federated.curve_manifold_local.ManifoldBezierTrainer`, which differentiates
through geodesic de Casteljau.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._validation import integer, real
from ..errors import ParameterError
from ..manifolds.bezier import bernstein_weights
from ..manifolds.euclidean import Euclidean
from ..problems.base import FederatedProblem, sample_batches
from .algorithm import check_step_size
from .local import problem_metrics

__all__ = ["CurveClientBase", "BezierProblemTrainer"]


class CurveClientBase:
    """The settings and sizes of an AsyncBezier client on a federated problem, shared by
    :class:`BezierProblemTrainer` (flat space) and
    :class:`~riemfl.federated.curve_manifold_local.ManifoldBezierTrainer` (any manifold with
    exp, log and retract); their parameters are documented there.

    Raises
    ------
    ParameterError
        For a bad step size, step count, degree or FedProx weight, or a batch size on a problem
        without samples.
    """

    def __init__(
        self,
        name: str,
        problem: FederatedProblem,
        step_size: float,
        warmup_steps: int,
        curve_steps: int,
        *,
        mu: float,
        batch_size: int | None,
        degree: int,
        freeze_end: bool,
    ) -> None:
        self.problem = problem
        self.manifold = problem.manifold
        self.step_size = check_step_size("step_size", step_size)
        self.warmup_steps = integer(warmup_steps, f"{name}: warmup_steps", minimum=0)
        self.curve_steps = integer(curve_steps, f"{name}: curve_steps", minimum=0)
        self.degree = integer(degree, f"{name}: degree", minimum=1)
        self.mu = real(mu, f"{name}: mu", at_least=0)
        if batch_size is not None and problem.n_samples is None:
            raise ParameterError(f"{problem.name} has no samples, so batch_size must be None")
        self.batch_size = batch_size
        self.freeze_end = bool(freeze_end)
        self.n_clients = problem.n_clients

    def n_samples(self, i: int) -> int:
        return 1 if self.problem.n_samples is None else int(self.problem.n_samples[i])

    def num_batches(self, i: int, epochs: int | None = None) -> int:
        """K1 + (K - K1): every step costs one gradient (the compute-time models count them)."""
        return self.warmup_steps + self.curve_steps

    def evaluate(self, x: Any) -> dict[str, float]:
        return problem_metrics(self.problem, x)

    def _egrad(self, i: int, x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """The Euclidean gradient of :math:`l_i` at x (on a mini-batch when ``batch_size``)."""
        batch = None
        if self.batch_size is not None:
            batch = sample_batches(rng, self.problem.n_samples, [i], self.batch_size)
        return np.asarray(self.problem.client_egrads([i], x[None], batch)[0])


class BezierProblemTrainer(CurveClientBase):
    """AsyncBezier's client (learned quadratic curve) on a Euclidean federated problem.

    Parameters
    ----------
    problem : FederatedProblem
        On a :class:`~riemfl.manifolds.Euclidean` manifold.
    step_size : float
        SGD step :math:`\\eta` (control points and end point alike).
    warmup_steps : int
        K1, steps on the end point at t = 1.
    curve_steps : int
        K - K1, steps of curve learning.
    mu : float
        FedProx weight (default 0).
    batch_size : int, optional
        Mini-batch size (default: full local gradients).
    degree : int
        Curve degree n (2: the quadratic of Licudi et al. 2025).
    freeze_end : bool
        Keep the end point fixed during curve learning (Licudi et al. 2025, Sec. 3: True in their
        experiments).
    """

    def __init__(
        self,
        problem: FederatedProblem,
        step_size: float,
        warmup_steps: int = 5,
        curve_steps: int = 5,
        *,
        mu: float = 0.0,
        batch_size: int | None = None,
        degree: int = 2,
        freeze_end: bool = True,
    ) -> None:
        if not isinstance(problem.manifold, Euclidean):
            raise ParameterError(
                f"BezierProblemTrainer needs a Euclidean problem (the curve's gradients are those "
                f"of de Casteljau in flat space); got {problem.manifold.name}"
            )
        super().__init__(
            "BezierProblemTrainer",
            problem,
            step_size,
            warmup_steps,
            curve_steps,
            mu=mu,
            batch_size=batch_size,
            degree=degree,
            freeze_end=freeze_end,
        )

    def _gradient(self, i: int, x: np.ndarray, anchor: np.ndarray, rng) -> np.ndarray:
        g = self._egrad(i, x, rng)
        return g + self.mu * (x - anchor) if self.mu else g

    def train(
        self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None
    ) -> np.ndarray:
        """The control points :math:`\\phi^K` learned by client ``i`` from ``start``."""
        start = np.asarray(start, dtype=np.float64)
        n = self.degree
        phi = np.repeat(start[None], n + 1, axis=0)
        eta = self.step_size
        for _ in range(self.warmup_steps):
            phi[n] -= eta * self._gradient(i, phi[n], start, rng)
        last = n if self.freeze_end else n + 1
        for _ in range(self.curve_steps):
            s = float(rng.uniform())
            w = np.asarray(bernstein_weights(n, np.float64(s)))
            x = np.tensordot(w, phi, axes=1)
            g = self._gradient(i, x, start, rng)
            for k in range(1, last):
                phi[k] -= eta * w[k] * g
        return phi
