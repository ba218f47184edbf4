r"""The paper's two settings: :func:`AsyncBezier` and :func:`AsyncBezierED`.

Licudi et al. 2025, Sec. 4.1: :math:`\alpha = 0` and :math:`\alpha = 1` of eq. (10).
"""

from __future__ import annotations

from typing import Any

from ...manifolds.base import Manifold
from .correction import OrthoDCCorrection
from .embedding import BezierEmbedding
from .rule import AsyncManifold


def AsyncBezier(  # noqa: N802 - the paper's name
    base: Manifold,
    server_lr: float = 0.5,
    *,
    vartheta: float = 1.0,
    variant: str = "per_point",
    degree: int = 2,
    **kw: Any,
) -> AsyncManifold:
    r"""AsyncBezier (Licudi et al. 2025, App. C, Alg. 1, :math:`\alpha = 0`).

    Quadratic Bezier curves, OrthoDC(:math:`\vartheta`) per control point, chordal step; the
    paper's FEMNIST settings: :math:`\eta_g = 0.5` (Table 3), :math:`\vartheta = 1` (App. B.1;
    0 for Shakespeare and CXR8, App. B.2-B.3).
    """
    rule = AsyncManifold(
        BezierEmbedding(base, degree),
        server_lr,
        alpha=kw.pop("alpha", 0.0),
        correction=OrthoDCCorrection(vartheta, variant),
        **kw,
    )
    rule.name = "asyncbezier"
    return rule


def AsyncBezierED(base: Manifold, server_lr: float = 0.25, **kw: Any) -> AsyncManifold:  # noqa: N802
    r"""AsyncBezierED: AsyncBezier with the staleness penalty at full strength.

    :math:`\alpha = 1` in Licudi et al. 2025, eq. (10); their FEMNIST :math:`\eta_g = 0.25`
    (Table 3).
    """
    rule = AsyncBezier(base, server_lr, alpha=1.0, **kw)
    rule.name = "asyncbezier-ed"
    return rule
