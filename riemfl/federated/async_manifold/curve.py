r"""The AsyncCurve server of Licudi 2025 (TR), Sec. 5.2: :class:`AsyncCurve`."""

from __future__ import annotations

from typing import Any

import numpy as np

from ...backend import Array
from ...errors import ParameterError, ShapeError
from ...manifolds.base import Manifold
from ...manifolds.euclidean import Euclidean
from ...manifolds.rotation import PlaneRotation
from ..async_rules import Arrival, AsyncRule
from .embedding import BezierEmbedding
from .rule import AsyncManifold


class AsyncCurve(AsyncManifold):
    r"""AsyncCurve server of Licudi 2025 (TR), Sec. 5.2, Algorithm 1 (its ordering bug fixed).

    The client (:class:`riemfl.nn.CurveClientTrainer`) uploads :math:`(\Theta^t, \phi_i,
    \Theta_i^t)`. On arrival:

    1. the corrected end point :math:`\hat\Theta_i^\tau = \Theta^\tau +
       \mathrm{dir}` from the ``endpoint`` rule's corrected update (default
       :class:`~riemfl.federated.OrthoDyn`; the report's Alg. 1 uses it *before* computing it:
       riemfl computes it first);
    2. the rotated control point (Licudi 2025 (TR), eq. (17)): :math:`\hat\phi = (\Theta^\tau +
       \hat\Theta)/2 + R(\phi - (\Theta^t + \Theta_i^t)/2)`, R the plane rotation taking
       :math:`\Theta_i^t - \Theta^t` to :math:`\hat\Theta - \Theta^\tau`
       (:class:`~riemfl.manifolds.PlaneRotation`; the identity when the correction keeps the
       direction, i.e. a pure translation, as the report says);
    3. :math:`\Theta^{\tau+1}` = the quadratic through
       :math:`(\Theta^\tau, \hat\phi, \hat\Theta)` at :math:`\alpha`, with
       ``weighting="dominance"``: :math:`\alpha = \eta(\tau) / (N p_i)` (the report's Alg. 1;
       :math:`p_i` the share of arrivals so far from client i, an estimator the report leaves
       open) or ``"weight"``: :math:`\alpha = w_i \eta(\tau)` (its eq. (32)); :math:`\eta(\tau)`
       is ``server_lr`` or ``schedule(version)``. ``step_mode="parameter"`` (default, eq. (31))
       evaluates the curve at :math:`\alpha`; ``beyond="clip"`` (default) stops at the local
       end point.
    4. periodic SWA (``swa_start``, ``swa_every``, ``swa_cycle``) as in :class:`AsyncManifold`;
       the version counter advances only on arrivals (the report's Alg. 1 increments it on
       every loop iteration, received or not).

    The quadratic is in Bernstein form, middle weight :math:`2s(1-s)` (Licudi et al. 2025,
    eq. (8)): the report prints :math:`s(1-s)` (eqs. (28), (31)), which with a midpoint control
    point does not reproduce the straight line and pulls the model towards the origin.

    Euclidean base (the rotation acts on flat vectors).
    """

    name = "asynccurve"
    _state_helpers = ("correction", "embedding", "endpoint", "schedule")

    def __init__(
        self,
        base: Manifold,
        server_lr: float = 1.0,
        *,
        endpoint: AsyncRule | None = None,
        rotate: bool = True,
        weighting: str = "dominance",
        schedule: Any = None,
        step_mode: str = "parameter",
        beyond: str = "clip",
        **kw: Any,
    ) -> None:
        if not isinstance(base, Euclidean):
            raise ParameterError(f"AsyncCurve needs a Euclidean base (the rotation R), got {base}")
        if weighting not in ("dominance", "weight"):
            raise ParameterError(f"weighting must be 'dominance' or 'weight', got {weighting!r}")
        if schedule is not None and not callable(schedule):
            raise ParameterError("schedule must be a callable of the server version")
        from ..async_rules import DirectionRule, OrthoDyn

        self.endpoint = OrthoDyn() if endpoint is None else endpoint
        if not isinstance(self.endpoint, DirectionRule):
            raise ParameterError(
                "AsyncCurve's endpoint rule must be a DirectionRule (FedAsync, ASGD, the "
                f"OrthoCorrect family), got {type(self.endpoint).__name__}"
            )
        super().__init__(
            BezierEmbedding(base, 2),
            server_lr,
            correction=None,
            step_mode=step_mode,
            beyond=beyond,
            dominance=weighting == "dominance",
            **kw,
        )
        self.rotate = bool(rotate)
        self.weighting = weighting
        self.schedule = schedule

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "endpoint": self.endpoint.describe(),
            "rotate": self.rotate,
            "weighting": self.weighting,
        }

    def reset(self, manifold: Manifold, n_clients: int) -> None:
        super().reset(manifold, n_clients)
        self.endpoint.reset(manifold, n_clients)

    def _has_fast_path(self, a: Arrival) -> bool:
        return False

    def corrected_parameters(self, a: Arrival) -> Array:
        m = self.embedding.base
        if tuple(np.shape(a.local)) != (3, *m.point_shape):
            raise ShapeError(
                f"asynccurve: a client uploaded shape {tuple(np.shape(a.local))}; expected "
                f"(3, {', '.join(map(str, m.point_shape))}) = (Theta^t, phi, Theta_i) from a "
                f"CurveClientTrainer"
            )
        _, phi, local = a.local
        point_arrival = Arrival(
            a.client, a.base, local, a.current, a.staleness, a.weight, a.version
        )
        hat = a.current + self.endpoint.direction(m, point_arrival)
        offset = phi - 0.5 * (a.base + local)
        if self.rotate:
            u, w = (local - a.base).reshape(-1), (hat - a.current).reshape(-1)
            offset = PlaneRotation(u, w)(offset.reshape(-1)).reshape(offset.shape)
        return np.stack([a.current, 0.5 * (a.current + hat) + offset, hat])

    def _fraction(self, a: Arrival, local_distance: float, drift_distance: float) -> float:
        eta = float(self.schedule(a.version)) if self.schedule is not None else self.server_lr
        if self.weighting == "dominance":
            rate = eta / (self.n_clients * self.counts[a.client] / self.counts.sum())
        else:
            rate = eta * a.weight
        self.last = {"penalty": 1.0, "local_distance": local_distance, "drift": drift_distance}
        return float(rate)
