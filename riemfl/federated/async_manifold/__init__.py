r"""AsyncManifold: asynchronous aggregation along a learned manifold.

Licudi et al. 2025, Sec. 3 and App. C; Licudi 2025 (TR), Sec. 5.1.

A client does not send a point but the parameters :math:`\phi` of a small manifold
:math:`\iota_\phi(M) \subset M_\Theta` that it learned through the global model it received and
its own local model (a quadratic Bezier curve for AsyncBezier). The server corrects the learned
manifold for the staleness, then moves the global model *along* it instead of along the straight
line to the local model.

The pieces, each replaceable:

* :class:`Embedding` -- :math:`\iota: M_\Phi \times M \to M_\Theta` with its point
  parametrisation :math:`\phi_\Theta` (the compression requirement (i) of Licudi et al. 2025,
  Sec. 3), the latent start :math:`\iota^{-1}_\phi(\Theta^t)` and the local-model location
  :math:`\omega`. :class:`BezierEmbedding` is eq. (8) of that paper (degree n, control points on
  any base manifold).
* the correction map :math:`\pi` (:class:`OrthoDCCorrection`, Licudi et al. 2025, App. C,
  Alg. 3, on tangents of :math:`M_\Phi`);
* the staleness penalty :func:`staleness_penalty` (Licudi et al. 2025, eq. (10));
* the step-length reparametrisation (Licudi et al. 2025, eq. (12), :meth:`Embedding.step_point`);
* :class:`AsyncManifold`, the server rule (Licudi et al. 2025, App. C, Alg. 1, for any
  embedding), with optional server momentum, the dominance penalty of Licudi 2025 (TR), Sec. 5.1,
  and (periodic) SWA.

:func:`AsyncBezier` and :func:`AsyncBezierED` are the two settings of the experiments of
Licudi et al. 2025 (:math:`\alpha = 0` and :math:`\alpha = 1`, Sec. 4.1).
:class:`BezierTriangleEmbedding` and :func:`AsyncBezierTriangle` take the latent manifold to two
dimensions (a quadratic Bezier triangle through the global model, the local model and a learned
vertex), the learned surfaces of Licudi et al. 2025, Sec. 3 and Fig. 2.
"""

from .constructors import AsyncBezier, AsyncBezierED
from .correction import ControlPointCorrection, OrthoDCCorrection
from .curve import AsyncCurve
from .embedding import (
    STEP_MODES,
    BezierEmbedding,
    Embedding,
    chordal_root,
    power_coefficient_matrix,
)
from .penalty import staleness_penalty
from .rule import AsyncManifold
from .triangle import AsyncBezierTriangle, BezierTriangleEmbedding

__all__ = [
    "Embedding",
    "BezierEmbedding",
    "ControlPointCorrection",
    "OrthoDCCorrection",
    "staleness_penalty",
    "AsyncManifold",
    "AsyncBezier",
    "AsyncBezierED",
    "AsyncCurve",
    "AsyncBezierTriangle",
    "BezierTriangleEmbedding",
    "STEP_MODES",
    "chordal_root",
    "power_coefficient_matrix",
]
