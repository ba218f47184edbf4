r"""The AsyncBezier client on a curved federated problem (Riemannian SGD; numpy, torch autograd).

:class:`ManifoldBezierTrainer` is :class:`~riemfl.federated.curve_local.BezierProblemTrainer`
(Licudi et al. 2025, App. C, Alg. 2) on any base manifold with ``exp`` and ``log``: the curve is
the geodesic Bezier curve of :mod:`riemfl.manifolds.bezier` (geodesic de Casteljau), the points
it trains stay on the manifold, and ``train`` returns the control points
:math:`\phi^K = (A, B, C)`, the upload of
:class:`~riemfl.federated.async_manifold.AsyncManifold` (AsyncBezier, AsyncBezierED).

Client i, from the received :math:`\Theta^t`, with the local objective
:math:`F_i(x) = l_i(x) + \frac\mu2 d^2(x, \Theta^t)` (the FedProx term of the Euclidean client,
:math:`\frac\mu2\|x - \Theta^t\|^2`, with the geodesic distance; its Riemannian gradient is
:math:`-\mu\,\mathrm{Log}_x\Theta^t`):

1. :math:`\phi^{(0)} = (\Theta^t, \dots, \Theta^t)`;
2. ``warmup_steps`` (K1) Riemannian SGD steps on the end point:
   :math:`C \leftarrow R_C(-\eta\,\operatorname{grad} F_i(C))`;
3. ``curve_steps`` (K - K1) steps with :math:`s \sim U[0, 1]` per step: at
   :math:`x = c_\phi(s)`, every trained control point (the inner ones, and the end point when
   ``freeze_end=False``) takes :math:`P_k \leftarrow R_{P_k}(-\eta\,\operatorname{grad}_{P_k}
   F_i(c_\phi(s)))`, all from the same :math:`\phi`. The start :math:`A = \Theta^t` is never
   trained.

The gradient with respect to a control point (:func:`curve_point_gradient`). Let
:math:`r = \operatorname{grad} F_i(x)` and let :math:`G` be a covector of r: an ambient array
with :math:`\langle G, w\rangle_F = \langle r, w\rangle_x` for every tangent w at x (for the
problem's part the Euclidean gradient :math:`\nabla l_i(x)` itself; for the prox part the
gradient of :math:`v \mapsto \langle r, v\rangle_x`, the metric written in ambient
coordinates). The curve point :math:`x = c(P_0, \dots, P_n; s)` is computed in torch by riemfl's
geodesic de Casteljau (its ``exp`` and ``log`` on torch tensors, autograd through them: closed
forms, or the implicit derivative of an iterative ``log``), and one backward pass with the
incoming gradient G gives :math:`a_k = (\mathrm{D}_{P_k} c)^\top G`, the ambient arrays with

.. math::
    \langle a_k, \xi\rangle_F = \langle G, \mathrm{D}_{P_k} c[\xi]\rangle_F
    = \langle r, \mathrm{D}_{P_k} c[\xi]\rangle_x = \mathrm{D}_{P_k}(F_i \circ c)[\xi]
    \qquad (\xi \in T_{P_k}M),

(the second equality because :math:`\mathrm{D}_{P_k}c[\xi]` is tangent at x). The Riemannian
gradient is then the tangent vector with :math:`\langle \rho_k, \xi\rangle_{P_k} =
\langle a_k, \xi\rangle_F` on :math:`T_{P_k}M`: :math:`\rho_k =` ``egrad_to_rgrad``
:math:`(P_k, a_k)`, the map from an ambient gradient to the Riemannian one. The torch maps are
defined on an open set around the manifold; only their derivatives along tangent directions
enter, and those are the derivatives of the maps on M, so the result does not depend on how
they extend off it. On a Euclidean base this is :math:`B_k^n(s)\,\nabla F_i(x)`, the chain rule
of :class:`~riemfl.federated.curve_local.BezierProblemTrainer`.

A :class:`~riemfl.manifolds.Product` of one factor repeated (the nodes of an embedding) is
evaluated as a batch of that factor's points: the product's maps act factor by factor, so the
values are the same and one torch call replaces one per factor.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..extras import import_extra
from ..manifolds.base import Manifold
from ..manifolds.bezier_eval import geodesic_de_casteljau
from ..manifolds.product import Product
from ..problems.base import FederatedProblem
from .curve_local import CurveClientBase

__all__ = [
    "REQUIRED_MAPS",
    "ManifoldBezierTrainer",
    "batch_geometry",
    "covector",
    "curve_point_gradient",
    "require_maps",
]

#: the maps of the base manifold the client calls: the geodesic curve (exp, log) and the
#: Riemannian SGD step (retract)
REQUIRED_MAPS = ("exp", "log", "retract")


def require_maps(manifold: Manifold, owner: str) -> None:
    """Raise :class:`~riemfl.errors.ParameterError` unless ``manifold`` has every map of
    :data:`REQUIRED_MAPS`, naming the first missing one and the manifold's reason."""
    for name in REQUIRED_MAPS:
        ok, why = manifold.supports(name)
        if not ok:
            raise ParameterError(
                f"{owner} needs {manifold.name}.{name} (the geodesic Bezier curve is built from "
                f"exp and log, the SGD step is a retraction): {why}"
            )


def batch_geometry(manifold: Manifold) -> tuple[Manifold, tuple[int, ...]]:
    """The manifold to evaluate the curve on, and the shape of one point on it.

    A :class:`~riemfl.manifolds.Product` whose factors are one manifold object repeated is
    evaluated as a batch of points of that factor (shape ``(k, *factor.point_shape)``); any
    other manifold as itself.
    """
    if isinstance(manifold, Product):
        first = manifold.manifolds[0]
        if all(m is first for m in manifold.manifolds):
            return first, (len(manifold.manifolds), *first.point_shape)
    return manifold, tuple(manifold.point_shape)


def covector(manifold: Manifold, x: np.ndarray, r: np.ndarray) -> np.ndarray:
    r"""An ambient array G with :math:`\langle G, w\rangle_F = \langle r, w\rangle_x` for every
    tangent w at x: the gradient of :math:`v \mapsto \langle r, v\rangle_x` (torch autograd).

    ``x`` and ``r`` are numpy arrays of the shape of a point of ``manifold`` (any leading batch
    dimensions; the inner products of a batch are summed).
    """
    torch = import_extra("torch", "ManifoldBezierTrainer")
    xt, rt = torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(r))
    v = torch.zeros_like(xt, requires_grad=True)
    (g,) = torch.autograd.grad(manifold.inner(xt, rt, v).sum(), v)
    return g.numpy()


def curve_point_gradient(
    manifold: Manifold,
    control_points: np.ndarray,
    s: float,
    point_covector: Callable[[np.ndarray], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    r"""The curve point :math:`x = c_\phi(s)` and the Riemannian gradients of a loss of it with
    respect to every control point (module docstring).

    Parameters
    ----------
    manifold : Manifold
        The base manifold (``exp``, ``log`` on torch float64 tensors, ``egrad_to_rgrad``).
    control_points : numpy.ndarray, shape (n + 1, *point_shape)
        Points of ``manifold``.
    s : float
        The curve parameter.
    point_covector : callable
        ``point_covector(x) -> G``: for the curve point x (numpy, ``point_shape``) a covector
        of the loss's Riemannian gradient at x, e.g. the Euclidean gradient of the loss.

    Returns
    -------
    x, grads : numpy.ndarray
        The curve point (shape ``point_shape``) and the Riemannian gradients
        :math:`\operatorname{grad}_{P_k}`, stacked like the control points (each tangent at
        its :math:`P_k`).
    """
    torch = import_extra("torch", "curve_point_gradient")
    phi = np.ascontiguousarray(control_points, dtype=np.float64)
    geometry, shape = batch_geometry(manifold)
    P = torch.from_numpy(phi.reshape(phi.shape[0], *shape)).requires_grad_(True)
    c = geodesic_de_casteljau(geometry, P, torch.tensor(float(s), dtype=torch.float64))
    x = c.detach().numpy().reshape(manifold.point_shape)
    G = np.asarray(point_covector(x), dtype=np.float64).reshape(shape)
    (a,) = torch.autograd.grad(c, P, torch.from_numpy(G))
    ambient = a.numpy().reshape(phi.shape)
    return x, np.asarray(manifold.egrad_to_rgrad(phi, ambient))


class ManifoldBezierTrainer(CurveClientBase):
    """AsyncBezier's client (learned geodesic Bezier curve) on a federated problem on any
    manifold with ``exp``, ``log`` and ``retract``.

    The trainer protocol of :mod:`riemfl.federated.local`, like
    :class:`~riemfl.federated.curve_local.BezierProblemTrainer`, whose parameters it takes and
    whose random draws it makes in the same order (so on a Euclidean problem the two give the
    same control points, to rounding).

    Parameters
    ----------
    problem : FederatedProblem
        On a manifold with ``exp``, ``log`` and ``retract`` (:data:`REQUIRED_MAPS`) whose maps
        accept torch tensors.
    step_size : float
        Riemannian SGD step :math:`\\eta` (control points and end point alike).
    warmup_steps : int
        K1, steps on the end point.
    curve_steps : int
        K - K1, steps of curve learning.
    mu : float
        FedProx weight of :math:`\\frac\\mu2 d^2(x, \\Theta^t)` (default 0).
    batch_size : int, optional
        Mini-batch size (default: full local gradients).
    degree : int
        Curve degree n (2: the quadratic of Licudi et al. 2025).
    freeze_end : bool
        Keep the end point fixed during curve learning (Licudi et al. 2025, Sec. 3).

    Raises
    ------
    ParameterError
        A manifold without one of :data:`REQUIRED_MAPS`, or a bad setting.
    MissingDependencyError
        torch is not installed.
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
        name = "ManifoldBezierTrainer"
        require_maps(problem.manifold, name)
        import_extra("torch", name)
        super().__init__(
            name,
            problem,
            step_size,
            warmup_steps,
            curve_steps,
            mu=mu,
            batch_size=batch_size,
            degree=degree,
            freeze_end=freeze_end,
        )

    def _prox(self, x: np.ndarray, anchor: np.ndarray) -> np.ndarray:
        r"""The Riemannian gradient :math:`-\mu\,\mathrm{Log}_x(\Theta^t)` of the prox term."""
        return -self.mu * np.asarray(self.manifold.log(x, anchor))

    def _covector(self, i: int, x: np.ndarray, anchor: np.ndarray, rng) -> np.ndarray:
        """A covector of :math:`\\operatorname{grad} F_i(x)` (module docstring)."""
        g = self._egrad(i, x, rng)
        if self.mu:
            g = g + covector(self.manifold, x, self._prox(x, anchor))
        return g

    def train(
        self, i: int, start: Any, rng: np.random.Generator, epochs: int | None = None
    ) -> np.ndarray:
        """The control points :math:`\\phi^K` learned by client ``i`` from ``start``."""
        M = self.manifold
        start = np.asarray(start, dtype=np.float64)
        n, eta = self.degree, self.step_size
        phi = np.repeat(start[None], n + 1, axis=0)
        for _ in range(self.warmup_steps):
            end = phi[n]
            r = M.egrad_to_rgrad(end, self._egrad(i, end, rng))
            if self.mu:
                r = r + self._prox(end, start)
            phi[n] = M.retract(end, -eta * np.asarray(r))
        trained = slice(1, n if self.freeze_end else n + 1)
        for _ in range(self.curve_steps):
            s = float(rng.uniform())
            _, grads = curve_point_gradient(M, phi, s, lambda x: self._covector(i, x, start, rng))
            if trained.start < trained.stop:
                phi[trained] = M.retract(phi[trained], -eta * grads[trained])
        return phi
