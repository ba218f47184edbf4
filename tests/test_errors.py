"""Bad input raises typed RiemflError subclasses whose messages say what was wrong."""

import numpy as np
import pytest

import riemfl
from riemfl import (
    ConvergenceError,
    CutLocusError,
    Euclidean,
    Grassmann,
    Lorentz,
    NotOnManifoldError,
    ParameterError,
    Product,
    ProjectionError,
    RiemflError,
    ShapeError,
    Sphere,
    Stiefel,
)
from riemfl.errors import DTypeError, NonFiniteError


def test_every_error_is_a_riemfl_error():
    for cls in (
        ShapeError,
        NotOnManifoldError,
        ProjectionError,
        ConvergenceError,
        CutLocusError,
        ParameterError,
        DTypeError,
        NonFiniteError,
    ):
        assert issubclass(cls, RiemflError)
    assert issubclass(DTypeError, ShapeError) and issubclass(DTypeError, TypeError)
    assert issubclass(NonFiniteError, NotOnManifoldError)


@pytest.mark.parametrize(
    "factory",
    [
        lambda: Stiefel(3, 5),
        lambda: Stiefel(5, 2, retraction="exp"),
        lambda: Stiefel(5, 2, metric="euclidean"),
        lambda: Stiefel(5.0, 2),
        lambda: Sphere(1),
        lambda: Grassmann(3, 3),
        lambda: Lorentz(0),
        lambda: Lorentz(3, beta=-1.0),
        lambda: Lorentz(3, beta=float("nan")),
        lambda: Euclidean(),
        lambda: Euclidean(0, 2),
        lambda: Product(),
    ],
)
def test_invalid_parameters(factory):
    with pytest.raises(ParameterError):
        factory()


def test_shape_error_names_manifold_and_expected_shape():
    m = Stiefel(5, 2)
    with pytest.raises(ShapeError, match=r"Stiefel\(5, 2\): tangent vector u has shape \(5, 3\)"):
        m.retract(m.random_point(rng=0), np.zeros((5, 3)))
    with pytest.raises(ShapeError, match=r"expected \(\.\.\., 5, 2\)"):
        m.project(np.zeros(10))


def test_not_on_manifold_message_has_constraint_and_violation():
    m = Stiefel(4, 2)
    x = m.random_point(rng=0) * 1.01
    with pytest.raises(NotOnManifoldError, match=r"X\^T X = I is violated by [0-9.]+e-0[12]"):
        m.check_point(x)
    with pytest.raises(NotOnManifoldError, match=r"\|x\| = 1"):
        Sphere(3).check_point(np.array([1.0, 1.0, 0.0]))
    with pytest.raises(NotOnManifoldError, match="upper sheet"):
        Lorentz(2).check_point(np.array([-np.sqrt(3.0), 1.0, 1.0]))
    with pytest.raises(NotOnManifoldError, match="NaN"):
        m.check_point(np.full((4, 2), np.nan))
    with pytest.raises(NotOnManifoldError, match="NaN"):
        m.project(np.full((4, 2), np.inf))


def test_product_reports_the_failing_factor():
    p = Product(Sphere(3), Stiefel(3, 2))
    x = p.random_point(rng=0)
    x[0] *= 2.0
    with pytest.raises(NotOnManifoldError, match=r"Sphere\(3\): \|x\| = 1"):
        p.check_point(x)


def test_projection_errors():
    with pytest.raises(ProjectionError, match="not defined at a = 0"):
        Sphere(3).project(np.zeros(3))
    rank_one = np.outer(np.arange(1.0, 6.0), [1.0, 2.0])
    with pytest.raises(ProjectionError, match=r"rank is below 2"):
        Stiefel(5, 2).project(rank_one)
    with pytest.raises(ProjectionError):
        Grassmann(5, 2).project(rank_one)


def test_cut_locus_errors():
    s = Sphere(3)
    x = np.array([1.0, 0.0, 0.0])
    with pytest.raises(CutLocusError, match="antipodal"):
        s.log(x, -x)
    with pytest.raises(CutLocusError):
        s.inverse_retract(x, np.array([-0.5, np.sqrt(0.75), 0.0]))
    g = Grassmann(4, 1)
    with pytest.raises(CutLocusError, match="principal angle"):
        g.log(np.array([[1.0], [0], [0], [0]]), np.array([[0.0], [1], [0], [0]]))


def test_stiefel_log_raises_when_it_cannot_converge():
    m = Stiefel(4, 2, log_max_iter=3)
    x = m.random_point(rng=0)
    with pytest.raises(ConvergenceError, match="did not converge in 3 iterations"):
        m.log(x, m.random_point(rng=1))


def test_missing_map_raises_not_implemented_with_reason():
    m = Stiefel(4, 2)
    x = m.random_point(rng=0)
    with pytest.raises(NotImplementedError, match="no closed-form parallel transport"):
        m.parallel_transport(x, x, m.zero_tangent(x))
    assert m.supports("parallel_transport")[0] is False
    assert m.supports("log") == (True, "")


def test_bad_random_state():
    with pytest.raises(ParameterError, match="rng must be"):
        Sphere(3).random_point(rng="seed")


def test_import_needs_only_the_core():
    import subprocess
    import sys

    code = (
        "import sys, riemfl; assert 'torch' not in sys.modules; "
        "assert 'hypothesis' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    assert riemfl.__version__
