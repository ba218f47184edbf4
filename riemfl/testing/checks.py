r"""One reusable check per geometric identity of the manifold contract.

Every check takes a manifold, concrete arrays (numpy or torch) and a
:class:`~riemfl.testing.config.Tolerance`, and raises :class:`AssertionError` with the manifold,
the identity and the measured discrepancy when the identity fails. They are plain functions so
they can be used from any test runner; :class:`riemfl.testing.ManifoldTests` wires them to
hypothesis.

Identities checked (the conformance kit's list, also in ``docs/custom-manifold.md``):

* points: ``random_point`` on M; ``project`` idempotent and fixing points of M;
* tangent spaces: ``to_tangent`` idempotent with tangent output; ``zero_tangent``;
* metric: symmetric, bilinear, positive, ``norm**2 == inner(u, u)``;
* retraction: :math:`R_x(0) = x`, :math:`R_x(u) \in M`, first order (Taylor slope >= 2 of
  :math:`\|R_x(tu) - x - tu\|`); ``exp`` second order (slope >= 3 of the tangential part);
  ``inverse_retract`` inverts ``retract``;
* exp/log inverse within the injectivity radius, ``dist = norm(log)``, symmetry of ``dist``;
  ``squared_dist = dist**2``; torch gradients of ``dist`` and ``squared_dist`` at coincident
  points finite, and that of ``squared_dist`` zero (to the rounding of the computed distance);
* transports tangent and linear; parallel transport isometric;
* ``egrad_to_rgrad`` against central finite differences along retraction curves;
* ``ehess_to_rhess`` (for a quadratic test function, :func:`quadratic_function`): self-adjoint
  in the metric, tangent and linear; second-order Taylor slope >= 3 along exp (or the
  retraction); the derivative of the transported Riemannian gradient by central differences;
* ``project`` returns the nearest point inside the proximal-smoothness tube (exactly for normal
  offsets, and compared against perturbed manifold points) and is 2-Lipschitz on the half tube;
* batch = loop, numpy = torch, torch autograd against finite differences, types preserved.

The checks live in one module per kind of identity (:mod:`~riemfl.testing.checks_points`,
:mod:`~riemfl.testing.checks_retraction`, :mod:`~riemfl.testing.checks_distance`,
:mod:`~riemfl.testing.checks_transport`, :mod:`~riemfl.testing.checks_derivatives`,
:mod:`~riemfl.testing.checks_backends`), with the comparison helpers in
:mod:`~riemfl.testing.assertions` and the Taylor-slope fit in :mod:`~riemfl.testing.slopes`;
this module gathers their public names, the one place to import checks from.
"""

from __future__ import annotations

from .assertions import assert_close, assert_same_point
from .checks_backends import (
    check_autograd,
    check_autograd_at_zero,
    check_backends_agree,
    check_batch_equals_loop,
    check_broadcast_batch_point,
    check_float32_accuracy,
    check_types_preserved,
    float32_error,
)
from .checks_derivatives import (
    QuadraticFunction,
    check_egrad_to_rgrad,
    check_ehess_to_rhess_gradient,
    check_ehess_to_rhess_symmetric,
    check_ehess_to_rhess_taylor,
    quadratic_function,
)
from .checks_distance import (
    check_diameter,
    check_distance_gradients_at_coincident_points,
    check_exp_log,
    check_squared_dist,
)
from .checks_points import (
    check_metric,
    check_nearest_point,
    check_point_on_manifold,
    check_projection,
    check_projection_lipschitz,
    check_to_tangent,
    check_zero_tangent,
    tangent_basis,
)
from .checks_retraction import (
    check_exp_second_order,
    check_inverse_retraction,
    check_retraction,
    check_retraction_first_order,
)
from .checks_transport import (
    check_parallel_transport,
    check_retraction_transport,
    check_retraction_transport_first_order,
    check_transport,
)
from .config import Tolerance as Tolerance  # the type every check takes
from .slopes import taylor_slope

__all__ = [
    "assert_close",
    "assert_same_point",
    "taylor_slope",
    "tangent_basis",
    "check_point_on_manifold",
    "check_projection",
    "check_to_tangent",
    "check_zero_tangent",
    "check_metric",
    "check_retraction",
    "check_retraction_first_order",
    "check_exp_second_order",
    "check_inverse_retraction",
    "check_exp_log",
    "check_squared_dist",
    "check_distance_gradients_at_coincident_points",
    "check_transport",
    "check_parallel_transport",
    "check_retraction_transport",
    "check_retraction_transport_first_order",
    "check_egrad_to_rgrad",
    "QuadraticFunction",
    "quadratic_function",
    "check_ehess_to_rhess_symmetric",
    "check_ehess_to_rhess_taylor",
    "check_ehess_to_rhess_gradient",
    "check_nearest_point",
    "check_projection_lipschitz",
    "check_batch_equals_loop",
    "check_backends_agree",
    "check_autograd",
    "check_autograd_at_zero",
    "check_types_preserved",
    "check_diameter",
    "check_broadcast_batch_point",
    "float32_error",
    "check_float32_accuracy",
]
