r"""The linear delay-correction family of Licudi 2025 (TR), eq. (15): :class:`LinearCorrection`.

A client's pseudo-gradient :math:`\Delta = \Theta^t - \Theta_i` was computed at the model
:math:`\Theta^t` it received; by the time it arrives the server is at :math:`\Theta^\tau`. The
family corrects it to first order in the drift,

.. math::  \hat\Delta = \Delta + \lambda\, M\, (\Theta^\tau - \Theta^t), \qquad
           \Theta^{\tau+1} = \Theta^\tau - \text{rate}\;\hat\Delta,

with :math:`\lambda \ge 0` and a matrix M (the report leaves the staleness down-weighting to the
server's rate). Its members (Licudi 2025 (TR), Sec. 2):

=============  =========================================  ==============================
method          :math:`\lambda`                            M
=============  =========================================  ==============================
ASGD            0                                          I
FedAsync        1                                          I
DC-ASGD         :math:`\lambda_0`                          :math:`\mathrm{diag}(\Delta)^2`
OrthoCorrect    :func:`orthocorrect_lambda` (a projection  I
                coefficient on conflict, else alpha)
=============  =========================================  ==============================

On a manifold, as riemfl's ASGD and DC-ASGD: :math:`\Delta` is the client's update carried to
:math:`\Theta^\tau` (negated), the drift is :math:`-R^{-1}_{\Theta^\tau}(\Theta^t)`, M acts on
their ambient coordinates, and the corrected step is projected onto :math:`T_{\Theta^\tau}M`
before the retraction.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from ..backend import to_like, to_numpy
from ..errors import ParameterError, ShapeError
from ..manifolds.base import Manifold
from .algorithm import check_step_size
from .async_rules import Arrival, DirectionRule, check_vartheta

__all__ = ["LinearCorrection", "orthocorrect_lambda", "squared_update"]

#: ``M(delta, drift) -> M @ drift``: a linear map of the drift that may depend on the update
MatrixAction = Callable[[Any, Any], Any]
#: ``lam(manifold, x, delta, drift) -> lambda``: a coefficient that may depend on the arrival
Coefficient = Callable[[Manifold, Any, Any, Any], float]


def squared_update(delta: Any, drift: Any) -> Any:
    r"""DC-ASGD's :math:`M = \mathrm{diag}(\Delta)^2` applied to the drift:
    :math:`\Delta \odot \Delta \odot (\Theta^\tau - \Theta^t)` (Licudi 2025 (TR), eq. (12))."""
    return delta * delta * drift


def orthocorrect_lambda(alpha: float = 0.0, vartheta: float = 0.0) -> Coefficient:
    r"""OrthoCorrect's :math:`\lambda` (Licudi 2025 (TR), Sec. 3) with M = I: with
    :math:`b = \Theta^t - \Theta^\tau` (minus the drift), the scalar projection
    :math:`\langle\Delta, b\rangle / \langle b, b\rangle` when :math:`\cos(\Delta, b) \le
    \vartheta` (the update conflicts with the drift: :math:`\hat\Delta` is then the part of
    :math:`\Delta` orthogonal to it), else ``alpha`` (0: ASGD, 1: FedAsync). As
    :class:`~riemfl.federated.OrthoCorrect`: no projection on a zero drift, and a zero update
    counts as orthogonal to the drift."""
    alpha, vartheta = float(alpha), check_vartheta(vartheta)

    def coefficient(manifold: Manifold, x: Any, delta: Any, drift: Any) -> float:
        bb = float(manifold.inner(x, drift, drift))
        if bb > 0:
            dd = float(manifold.inner(x, delta, delta))
            db = -float(manifold.inner(x, delta, drift)) if dd > 0 else 0.0
            if (db / math.sqrt(dd * bb) if dd > 0 else 0.0) <= vartheta:
                return db / bb
        return alpha

    return coefficient


class LinearCorrection(DirectionRule):
    r"""Licudi 2025 (TR), eq. (15): :math:`\hat\Delta = \Delta + \lambda M (\Theta^\tau -
    \Theta^t)` (module docstring), with a user's :math:`\lambda` and M.

    Parameters
    ----------
    lam : float or callable
        :math:`\lambda \ge 0`, or ``lam(manifold, x, delta, drift) -> float`` per arrival
        (e.g. :func:`orthocorrect_lambda`), with ``x`` the current model and ``delta``, ``drift``
        tangent vectors at it.
    matrix : None, array or callable
        M: None (the identity); an array of the point's shape (a diagonal, applied entrywise);
        a ``(d, d)`` array with d the number of the point's entries (applied to the flattened
        drift); or ``matrix(delta, drift) -> M @ drift`` of the point's shape (e.g.
        :func:`squared_update`, DC-ASGD's).
    server_lr, operators, staleness
        As every :class:`~riemfl.federated.AsyncRule`.

    Raises
    ------
    ParameterError
        A negative or non-finite ``lam``, or a ``matrix`` that is none of the above.
    ShapeError
        An array ``matrix`` that fits neither the point's shape nor ``(d, d)`` (at
        :meth:`validate`).
    """

    name = "linearcorrection"

    def __init__(
        self,
        lam: float | Coefficient = 1.0,
        matrix: Any = None,
        server_lr: float = 1.0,
        operators: str = "approximate",
        staleness: Any = "constant",
    ) -> None:
        super().__init__(server_lr, operators, staleness)
        self.lam = lam if callable(lam) else check_step_size("lam", lam, allow_zero=True)
        if matrix is not None and not callable(matrix):
            matrix = np.asarray(matrix, dtype=float)
            if not np.isfinite(matrix).all():
                raise ParameterError("LinearCorrection: matrix M has non-finite entries")
        self.matrix = matrix

    def validate(self, manifold: Manifold) -> None:
        """The maps the rule needs, and an array M that fits the manifold's points."""
        super().validate(manifold)
        if isinstance(self.matrix, np.ndarray):
            shape = tuple(manifold.point_shape)
            d = math.prod(shape)
            if self.matrix.shape not in (shape, (d, d)):
                raise ShapeError(
                    f"LinearCorrection: matrix M must have the point's shape {shape} (a diagonal) "
                    f"or ({d}, {d}), got {self.matrix.shape}"
                )

    def _apply_matrix(self, delta: Any, drift: Any) -> Any:
        """:math:`M (\\Theta^\\tau - \\Theta^t)`."""
        m = self.matrix
        if m is None:
            return drift
        if callable(m):
            return m(delta, drift)
        if m.shape == tuple(np.shape(drift)):
            return to_like(m, drift) * drift
        flat = to_numpy(drift).reshape(-1)
        return to_like((m @ flat).reshape(np.shape(drift)), drift)

    def direction(self, manifold: Manifold, a: Arrival) -> Any:
        r""":math:`-\hat\Delta` at the current model, in its tangent space."""
        delta = -self.trusted_update(manifold, a, self.update(manifold, a))
        drift = -self.operators.inverse_retract(manifold, a.current, a.base)
        lam = self.lam(manifold, a.current, delta, drift) if callable(self.lam) else self.lam
        corrected = delta + lam * self._apply_matrix(delta, drift) if lam else delta
        return manifold.to_tangent(a.current, -corrected)

    def describe(self) -> dict[str, Any]:
        """The settings, JSON-ready: ``lam`` and ``matrix`` name a callable by its name."""
        m = self.matrix
        return {
            "name": self.name,
            "server_lr": self.server_lr,
            "operators": self.operators.kind,
            "staleness": _label(self.staleness),
            "lam": _label(self.lam),
            "matrix": "identity" if m is None else _label(m),
        }


def _label(value: Any) -> Any:
    """A JSON-ready name of a setting: a function's qualified name, an array's shape."""
    if isinstance(value, types.FunctionType):
        return value.__qualname__
    if isinstance(value, np.ndarray):
        return f"array{tuple(value.shape)}"
    if callable(value):
        return type(value).__name__
    return value
