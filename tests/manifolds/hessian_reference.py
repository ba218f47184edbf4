"""Independent references for ``ehess_to_rhess`` on open manifolds (SPD, the Poincare ball).

Where M is an open subset of its ambient space, straight lines ``x + t a`` stay on M for small t
and the Levi-Civita connection is :math:`\\nabla_U V = \\mathrm{D}V[U] + \\Gamma_x(U, V)`, with
the Christoffel map given by the Koszul formula for constant fields,
:math:`\\langle\\Gamma_x(U, V), W\\rangle_x = \\tfrac12(\\mathrm{D}_U\\langle V, W\\rangle +
\\mathrm{D}_V\\langle U, W\\rangle - \\mathrm{D}_W\\langle U, V\\rangle)`. Everything here is
computed from the manifold's ``inner`` and ``egrad_to_rgrad`` alone, by central differences, so it
checks the closed-form Hessians without sharing their derivation.
"""

from __future__ import annotations

import numpy as np

H = 1e-5


def quadratic(shape, rng):
    """f(a) = <C, a> + 1/2 <D o a, a>: (f, Euclidean gradient, Euclidean Hessian-vector product)."""
    c = rng.standard_normal(shape)
    d = rng.standard_normal(shape)

    def f(a):
        return float(np.sum(c * a) + 0.5 * np.sum(d * a * a))

    return f, (lambda a: c + d * a), (lambda a, u: d * u)


def christoffel(manifold, x, u, v, basis):
    """Gamma_x(u, v) from the Koszul formula, the metric differentiated by central differences."""

    def d_inner(a, b, c):
        plus = float(manifold.inner(x + H * a, b, c))
        minus = float(manifold.inner(x - H * a, b, c))
        return (plus - minus) / (2 * H)

    gram = np.array([[float(manifold.inner(x, p, q)) for q in basis] for p in basis])
    koszul = np.array(
        [0.5 * (d_inner(u, v, w) + d_inner(v, u, w) - d_inner(w, u, v)) for w in basis]
    )
    coefficients = np.linalg.solve(gram, koszul)
    return sum(k * b for k, b in zip(coefficients, basis, strict=True))


def hessian_by_connection(manifold, x, egrad, u, basis):
    """Hess f(x)[u] = D grad f(x)[u] + Gamma_x(u, grad f(x)), both by central differences."""

    def grad(z):
        return np.asarray(manifold.egrad_to_rgrad(z, egrad(z)))

    derivative = (grad(x + H * u) - grad(x - H * u)) / (2 * H)
    return derivative + christoffel(manifold, x, u, grad(x), basis)


def hessian_by_transport(manifold, x, egrad, u, transport="parallel_transport"):
    """Hess f(x)[u] = d/dt P_{exp(tu) -> x} grad f(exp(tu)) at t = 0 (central differences), with
    the parallel transport P or a transport whose derivative is the connection."""
    back = getattr(manifold, transport)

    def carried(t):
        y = np.asarray(manifold.exp(x, t * u))
        return np.asarray(back(y, x, manifold.egrad_to_rgrad(y, egrad(y))))

    return (carried(H) - carried(-H)) / (2 * H)


def second_derivative_along_exp(manifold, x, f, u, h=1e-4):
    """d^2/dt^2 f(exp_x(tu)) at t = 0 (central differences) = <Hess f(x)[u], u>_x."""
    values = [f(np.asarray(manifold.exp(x, t * u))) for t in (-h, 0.0, h)]
    return (values[0] - 2 * values[1] + values[2]) / (h * h)
