r"""The correction map :math:`\pi`: OrthoDC on tangents of the parameter manifold.

Licudi et al. 2025, Sec. 3 and App. C, Alg. 3: :class:`OrthoDCCorrection`.
"""

from __future__ import annotations

import abc
import math
from typing import Any

import numpy as np

from ...backend import Array, is_torch
from ...errors import ParameterError
from ...manifolds.base import Manifold
from ...manifolds.control_points import ControlPoints
from ..async_rules import check_vartheta
from ..rule_state import Checkpointable


class ControlPointCorrection(Checkpointable, abc.ABC):
    r"""A correction :math:`\pi(M_\Phi, \phi_{\Theta^t}, v, \Delta^g)` of a client's
    reparametrisation vector v against the global drift (Licudi et al. 2025, Alg. 1, the
    correction step), for :class:`~riemfl.federated.async_manifold.AsyncManifold`.

    A subclass implements :meth:`__call__`; :meth:`reset` (clear counters before a run) and
    :meth:`describe` have neutral defaults. Run state (counters) travels with the rule's
    checkpoint through :class:`~riemfl.federated.rule_state.Checkpointable`.
    """

    @abc.abstractmethod
    def __call__(self, parameters: Manifold, phi_t: Array, v: Array, drift: Array) -> Array:
        """The corrected v, a tangent vector of ``parameters`` at ``phi_t``."""

    def reset(self) -> None:  # noqa: B027 - optional hook
        """Clear per-run state before a run (the default: none)."""

    def describe(self) -> dict[str, Any]:
        """The correction's settings, for a run's configuration (default: its class name)."""
        return {"name": type(self).__name__}


class OrthoDCCorrection(ControlPointCorrection):
    r"""OrthoDC(:math:`\vartheta`) on a tangent vector of :math:`M_\Phi`.

    Licudi et al. 2025, Sec. 3 and App. C, Alg. 3.

    With v the client's reparametrisation vector and :math:`\Delta^g =
    \exp^{-1}_{\phi_{\Theta^t}}(\phi_{\Theta^\tau})` the global drift in :math:`M_\Phi`:
    :math:`\pi(v) = v - \mathrm{proj}_{\Delta^g}(v)` when :math:`\cos(v, \Delta^g) \le
    \vartheta`, else v (the "trusted update" base: Alg. 1 re-applies the curve at
    :math:`\phi_{\Theta^\tau}`, eq. (9)).

    ``variant``: the paper projects "a tangent vector of :math:`M_\Phi`" and does not say how on
    stacked control points. Projecting the whole stack moves the first control point off
    :math:`\Theta^\tau`, which contradicts its requirement that the corrected manifold contain
    :math:`\Theta^\tau` (Sec. 3, correction step), so riemfl offers:

    * ``"per_point"`` (default, faithful in spirit): the test and projection act on each control
      point's displacement separately against the drift of that point. The client's first
      control point is the global model it received and stays frozen (displacement 0), and the
      zero vector is orthogonal to everything, so the corrected curve still starts at
      :math:`\Theta^\tau`, as the paper requires of :math:`\pi`;
    * ``"stacked"`` (literal): one test and one projection of the whole stacked vector against
      :math:`(d, \dots, d)` with the product metric; the first control point then moves off
      :math:`\Theta^\tau` when the update conflicts.

    ``vartheta = -1`` disables the correction only for exactly opposite updates; use
    ``correction=None`` in :class:`AsyncManifold` for none at all. ``projections`` counts the
    projections made (its state for a checkpoint).
    """

    _state_counters = ("projections",)

    def __init__(self, vartheta: float = 1.0, variant: str = "per_point") -> None:
        if variant not in ("per_point", "stacked"):
            raise ParameterError(f"variant must be 'per_point' or 'stacked', got {variant!r}")
        self.vartheta = check_vartheta(vartheta)
        self.variant = variant
        self.projections = 0

    def reset(self) -> None:
        self.projections = 0

    def __call__(self, parameters: Manifold, phi_t: Array, v: Array, drift: Array) -> Array:
        if self.variant == "stacked" or not isinstance(parameters, ControlPoints):
            return self._project(parameters, phi_t, v, drift)
        base = parameters.base
        parts = [self._project(base, phi_t[k], v[k], drift[k]) for k in range(parameters.n_points)]
        return np.stack(parts) if isinstance(v, np.ndarray) else _stack_like(parts, v)

    def coefficient(self, vv: float, vg: float, gg: float) -> float:
        r"""c with :math:`\pi(v) = v - c\,g` from :math:`\langle v,v\rangle`, :math:`\langle
        v,g\rangle`, :math:`\langle g,g\rangle` (0: no projection; counted in ``projections``)."""
        if gg <= 0.0:
            return 0.0  # no drift: nothing to correct
        cosine = vg / math.sqrt(vv * gg) if vv > 0 else 0.0  # the zero vector: cos = 0
        if cosine <= self.vartheta:
            self.projections += 1
            return vg / gg if vv > 0 else 0.0
        return 0.0

    def coefficients(self, gram: np.ndarray) -> np.ndarray:
        r"""The :math:`c_k` of all control points from the Gram matrix of
        :math:`(v_0, \dots, v_n, d)` on a Euclidean base (:math:`\Delta^g = (d, \dots, d)`)."""
        n1 = gram.shape[0] - 1
        gg = float(gram[n1, n1])
        if self.variant == "stacked":
            c = self.coefficient(
                float(np.trace(gram[:n1, :n1])), float(gram[:n1, n1].sum()), n1 * gg
            )
            return np.full(n1, c)
        return np.array(
            [self.coefficient(float(gram[k, k]), float(gram[k, n1]), gg) for k in range(n1)]
        )

    def _project(self, m: Manifold, x: Array, v: Array, g: Array) -> Array:
        gg = float(m.inner(x, g, g))
        vv = float(m.inner(x, v, v))
        vg = float(m.inner(x, v, g)) if vv > 0 and gg > 0 else 0.0
        c = self.coefficient(vv, vg, gg)
        return v - c * g if c else v

    def describe(self) -> dict[str, Any]:
        return {"name": "orthodc", "vartheta": self.vartheta, "variant": self.variant}


def _stack_like(parts: list[Any], like: Any) -> Any:
    if is_torch(like):
        import torch

        return torch.stack(parts)
    return np.stack(parts)
