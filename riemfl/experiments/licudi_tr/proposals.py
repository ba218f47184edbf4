r"""The correction proposals: where one server step would move the global model from a
checkpoint, under each endpoint and control-point correction.

Every proposal moves the fraction :math:`r = \min(\eta_g w_i, 1)` of the way (the runs' own
fraction) from :math:`\Theta^\tau`.

**Endpoint corrections** (Fig. 1; Licudi 2025 (TR), eq. (15)) are riemfl's server rules applied
to the checkpoint's arrival, :math:`\Theta^\tau + r\,(\hat\Theta_i^\tau - \Theta^\tau)`:
:class:`~riemfl.federated.ASGD`, :class:`~riemfl.federated.FedAsync`, OrthoGrad, OrthoPos,
OrthoStrict (:class:`~riemfl.federated.OrthoCorrect`), eq. (15) with :math:`\lambda = 1/2`
(:class:`~riemfl.federated.linear_correction.LinearCorrection`) and
:class:`~riemfl.federated.DCASGD` with the adaptive :math:`\lambda` of Zheng et al. x 2.5. DC-ASGD's
:math:`\lambda = 2.5\,\lambda_0 / \sqrt{\text{MeanSquare}}` keeps a running mean square of the
pseudo-gradients; one :class:`Proposals` per run updates it at every checkpoint, in order, as
the rule would have along the run.

**Control-point corrections** (Fig. 3; AsyncCurve's checkpoints): the quadratic Bezier curve
:math:`(1-r)^2\Theta^\tau + 2r(1-r)\hat\phi + r^2\hat\Theta` (Bernstein form) from
:math:`\Theta^\tau` to the end point of the gradient-based base (ASGD,
:math:`\hat\Theta = \Theta^\tau + \Theta_i^t - \Theta^t`) or the position-based one (FedAsync,
:math:`\hat\Theta = \Theta_i^t`), with

* ``stale``: :math:`\hat\phi = \phi`, the control point as learned against the stale chord;
* ``translation``: :math:`\hat\phi = (\Theta^\tau + \hat\Theta)/2 + (\phi - (\Theta^t +
  \Theta_i^t)/2)`, the offset from the chord's midpoint kept (eq. (17) with R = I; on the
  gradient base the chord is only translated, so this is also the rotation);
* ``rotation``: eq. (17), the offset rotated by the plane rotation taking
  :math:`\Theta_i^t - \Theta^t` to :math:`\hat\Theta - \Theta^\tau`
  (:class:`~riemfl.manifolds.PlaneRotation`);
* ``line``: the straight line, which is the curve through the chord's midpoint, so the same point
  as the base's endpoint proposal.
"""

from __future__ import annotations

import numpy as np

from ...errors import ParameterError
from ...federated.async_rules import ASGD, DCASGD, FedAsync, OrthoGrad, OrthoPos, OrthoStrict
from ...federated.linear_correction import LinearCorrection
from ...manifolds.euclidean import Euclidean
from ...manifolds.rotation import PlaneRotation
from .checkpoints import Checkpoint
from .settings import Settings

__all__ = ["Proposals", "curve_point", "control_point", "fraction"]


def fraction(s: Settings, c: Checkpoint) -> float:
    """r = min(eta_g w_i, 1), the fraction of the way every proposal moves."""
    return min(s.server_lr * c.weight, 1.0)


def curve_point(start: np.ndarray, control: np.ndarray, end: np.ndarray, r: float) -> np.ndarray:
    """The quadratic Bezier curve (Bernstein form) at parameter r."""
    return (1.0 - r) ** 2 * start + 2.0 * r * (1.0 - r) * control + r * r * end


def control_point(c: Checkpoint, end: np.ndarray, kind: str) -> np.ndarray:
    """The corrected control point for the end point ``end``: ``"stale"``, ``"translation"`` or
    ``"rotation"`` (module docstring)."""
    if c.phi is None:
        raise ParameterError("control_point needs a checkpoint with a control point (AsyncCurve)")
    if kind == "stale":
        return c.phi
    offset = c.phi - 0.5 * (c.base + c.local)
    if kind == "rotation":
        offset = PlaneRotation(c.local - c.base, end - c.current)(offset)
    elif kind != "translation":
        raise ParameterError(f"kind must be 'stale', 'translation' or 'rotation', got {kind!r}")
    return 0.5 * (c.current + end) + offset


class Proposals:
    """The proposals of one run's checkpoints (module docstring), in the order of the run.

    Parameters
    ----------
    s : Settings
    dim : int
        The model's number of parameters.
    """

    def __init__(self, s: Settings, dim: int) -> None:
        self.s = s
        self.manifold = Euclidean(dim)
        lr = s.server_lr
        self.rules = {
            "asgd": ASGD(lr),
            "fedasync": FedAsync(lr),
            "orthograd": OrthoGrad(server_lr=lr),
            "orthopos": OrthoPos(server_lr=lr),
            "dcasgd": DCASGD(
                lr, lambda0=s.dc_scale * s.dc_lambda0, adaptive=True, momentum=s.dc_momentum
            ),
            "orthostrict": OrthoStrict(server_lr=lr),
            "halfway": LinearCorrection(0.5, server_lr=lr),
        }
        for rule in self.rules.values():
            rule.reset(self.manifold, 1)

    def endpoints(self, c: Checkpoint) -> dict[str, np.ndarray]:
        """Every endpoint proposal's next global model (advances DC-ASGD's mean square)."""
        a = c.arrival()
        r = fraction(self.s, c)
        out = {}
        for name, rule in self.rules.items():
            point = rule.apply(self.manifold, a)
            if r < self.s.server_lr * c.weight:  # clipped: the rule's own step is longer
                point = c.current + (r / (self.s.server_lr * c.weight)) * (point - c.current)
            out[name] = point
        return out

    def bases(self, c: Checkpoint) -> dict[str, np.ndarray]:
        r"""The end points :math:`\hat\Theta` of the two bases of Fig. 3."""
        return {"gradient": c.current + (c.local - c.base), "position": c.local}

    def controls(self, c: Checkpoint) -> dict[str, np.ndarray]:
        """The curve proposals' next global models (the lines are the endpoint proposals
        ``asgd`` and ``fedasync``)."""
        r = fraction(self.s, c)
        out = {}
        for base, end in self.bases(c).items():
            kinds = ("stale", "translation") + (("rotation",) if base == "position" else ())
            for kind in kinds:
                out[f"{base}/{kind}"] = curve_point(c.current, control_point(c, end, kind), end, r)
        return out
