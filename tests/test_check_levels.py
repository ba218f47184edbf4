"""The check levels (:mod:`riemfl.check_levels`): the switch, the boundary, and deferred
violations that raise the error eager mode raises, with its message."""

from __future__ import annotations

import numpy as np
import pytest

import riemfl
from riemfl import check_levels
from riemfl.errors import (
    ConvergenceError,
    CutLocusError,
    NonFiniteError,
    NotOnManifoldError,
    ParameterError,
    ProjectionError,
    RiemflError,
)
from riemfl.federated import RunOptions
from riemfl.linalg import factorisable, polar
from riemfl.testing import importorskip

torch = importorskip("torch")


@pytest.fixture(autouse=True)
def _clean_level():
    """Every test starts and ends at ``auto`` with nothing pending."""
    check_levels.checks("auto")
    check_levels.raise_deferred()
    yield
    check_levels.checks("auto")
    check_levels._take(0)


def _t(a):
    return torch.as_tensor(np.asarray(a, dtype=np.float64))


def _sphere_args(nan=False):
    m = riemfl.Sphere(3)
    rng = np.random.default_rng(0)
    x = m.random_point(4, rng=rng)
    u = 0.3 * m.random_tangent(x, rng=rng)
    if nan:
        u[2, 1] = np.nan
    return m, _t(x), _t(u)


# ----------------------------------------------------------------------------- the switch
def test_an_unknown_level_is_refused_naming_the_levels():
    with pytest.raises(ParameterError, match=r"'strict' is unknown; expected one of auto, eager"):
        riemfl.checks("strict")
    assert check_levels.check_level() == "auto"


def test_a_call_sets_the_level_process_wide_and_a_block_restores_it():
    riemfl.checks("off")
    assert check_levels.check_level() == "off"
    with riemfl.checks("deferred") as block:
        assert check_levels.check_level() == "deferred"
        assert repr(block) == "riemfl.checks('deferred')"
    assert check_levels.check_level() == "off"


def test_auto_is_eager_for_numpy_and_cpu_tensors_and_deferred_elsewhere():
    assert check_levels.level_of(np.zeros(2)) == "eager"
    assert check_levels.level_of(torch.zeros(2)) == "eager"
    assert check_levels.level_of(torch.zeros(2, device="meta")) == "deferred"
    for level in ("eager", "deferred", "off"):
        with riemfl.checks(level):
            assert check_levels.level_of(np.zeros(2)) == level
            assert check_levels.level_of(torch.zeros(2, device="meta")) == level


def test_auto_is_deferred_while_torch_compile_traces():
    def level_code(x):
        return x + (1.0 if check_levels.level_of(x) == "deferred" else 0.0)

    compiled = torch.compile(level_code, backend="eager", fullgraph=True)
    assert float(compiled(torch.zeros(()))) == 1.0
    assert float(level_code(torch.zeros(()))) == 0.0


# ----------------------------------------------------------------------------- the boundary
def test_eager_raises_at_the_call():
    m, x, u = _sphere_args(nan=True)
    with pytest.raises(NonFiniteError, match="tangent vector u"):
        m.exp(x, u)
    assert check_levels.pending_checks() == 0


def test_deferred_records_and_raises_at_raise_deferred_with_the_eager_message():
    m, x, u = _sphere_args(nan=True)
    with pytest.raises(NonFiniteError) as eager:
        m.exp(x, u)
    riemfl.checks("deferred")
    out = m.exp(x, u)  # no error at the call
    assert out.shape == x.shape and check_levels.pending_checks() == 1
    with pytest.raises(NonFiniteError) as deferred:
        riemfl.raise_deferred()
    assert str(deferred.value) == str(eager.value)
    assert check_levels.pending_checks() == 0
    riemfl.raise_deferred()  # nothing left


def test_the_exit_of_a_block_raises_what_the_block_recorded():
    m, x, u = _sphere_args(nan=True)
    with pytest.raises(NonFiniteError, match=r"Sphere\(3\).exp: tangent vector u"):
        with riemfl.checks("deferred"):
            m.exp(x, u)
            assert check_levels.pending_checks() == 1
    assert check_levels.pending_checks() == 0 and check_levels.check_level() == "auto"


def test_valid_calls_pass_the_boundary_and_give_eager_values():
    m, x, u = _sphere_args()
    eager = m.exp(x, u)
    with riemfl.checks("deferred"):
        deferred = m.exp(x, u)
        assert check_levels.pending_checks() == 1
    torch.testing.assert_close(deferred, eager, rtol=0, atol=0)


def test_an_exception_in_a_block_drops_the_blocks_records_and_propagates():
    m, x, u = _sphere_args(nan=True)
    with pytest.raises(KeyError):
        with riemfl.checks("deferred"):
            m.exp(x, u)
            raise KeyError("the user's own error")
    assert check_levels.pending_checks() == 0


def test_an_inner_block_raises_only_its_own_records():
    m, x, u = _sphere_args(nan=True)
    _, x_ok, u_ok = _sphere_args()
    with riemfl.checks("deferred"):
        m.exp(x, u)  # the outer block's violation
        with riemfl.checks("deferred"):
            m.exp(x_ok, u_ok)
        assert check_levels.pending_checks() == 1
        with pytest.raises(NonFiniteError):
            riemfl.raise_deferred()


def test_the_first_violation_in_call_order_is_raised_and_the_rest_dropped():
    m, x, u = _sphere_args(nan=True)
    x_bad = x.clone()
    x_bad[0, 0] = float("inf")
    riemfl.checks("deferred")
    m.exp(x, u)
    m.exp(x_bad, u)
    with pytest.raises(NonFiniteError, match="tangent vector u"):
        riemfl.raise_deferred()
    assert check_levels.pending_checks() == 0


def test_an_argument_changed_in_place_before_the_boundary_is_still_named():
    m, x, u = _sphere_args()
    y = m.exp(x, u).clone()
    y[1, 0] = float("nan")
    riemfl.checks("deferred")
    m.dist(x, y)  # a map that checks its arguments (Sphere.dist is not result-checked)
    y.nan_to_num_(0.0)  # an optimiser's in-place update, say
    with pytest.raises(NonFiniteError, match=r"Sphere\(3\).dist: point y .*changed in place"):
        riemfl.raise_deferred()


def test_a_result_checked_map_whose_arguments_changed_in_place_names_its_result():
    m, x, u = _sphere_args(nan=True)
    riemfl.checks("deferred")
    m.exp(x, u)  # Sphere.exp checks its arguments through its result
    u.nan_to_num_(0.0)
    with pytest.raises(NonFiniteError, match=r"Sphere\(3\).exp: the result held NaN"):
        riemfl.raise_deferred()


def test_off_checks_nothing_and_records_nothing():
    m, x, u = _sphere_args(nan=True)
    with riemfl.checks("off"):
        out = m.exp(x, u)
        assert check_levels.pending_checks() == 0
    assert torch.isnan(out).any()


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_off_skips_the_boundary_guard_of_open_sets_and_the_other_levels_keep_it(backend):
    m = riemfl.Positive(3)
    x = np.array([1.0, 0.0, 2.0])
    g = np.array([1.0, 1.0, 1.0])
    if backend == "torch":
        x, g = torch.from_numpy(x), torch.from_numpy(g)
    with riemfl.checks("off"):
        assert np.array_equal(np.asarray(m.egrad_to_rgrad(x, g)), [1.0, 0.0, 4.0])
    with pytest.raises(NotOnManifoldError, match="egrad_to_rgrad"):
        m.egrad_to_rgrad(x, g)


def test_a_verdict_records_no_autograd_graph():
    """The verdict of a call on tensors that require gradients is not differentiated: it holds
    no autograd node (none built per call, none kept alive until the boundary)."""
    m, x, u = _sphere_args()
    x, u = x.requires_grad_(), u.requires_grad_()
    for arrays in ((x,), (x, u)):
        verdict = check_levels.largest_entries(arrays)
        assert not verdict.requires_grad and verdict.grad_fn is None
    with riemfl.checks("deferred"):
        out = m.exp(x, u)
        assert out.requires_grad  # the map's value still is
    out.sum().backward()
    assert x.grad is not None and u.grad is not None


def test_pending_checks_stay_bounded(monkeypatch):
    monkeypatch.setattr(check_levels, "MAX_PENDING", 6)  # entries: two per map call
    m, x, u = _sphere_args()
    _, _, u_nan = _sphere_args(nan=True)
    riemfl.checks("deferred")
    for _ in range(10):
        m.exp(x, u)
        assert check_levels.pending_checks() <= 3
    riemfl.raise_deferred()
    m.exp(x, u_nan)
    m.exp(x, u)
    m.exp(x, u)
    with pytest.raises(NonFiniteError):  # the fourth record runs the boundary first
        m.exp(x, u)


def test_refuse_formats_the_message_only_when_raising():
    formatted = []

    def message(value):
        formatted.append(value)
        return f"value {value}"

    check_levels.refuse(torch.tensor([False, False]), ProjectionError, message, 1)
    assert formatted == []
    with pytest.raises(ProjectionError, match="value 2"):
        check_levels.refuse(torch.tensor([False, True]), ProjectionError, message, 2)
    riemfl.checks("deferred")
    check_levels.refuse(torch.tensor([True]), ProjectionError, message, 3)
    assert formatted == [2]
    with pytest.raises(ProjectionError, match="value 3"):
        riemfl.raise_deferred()


def test_deferred_numpy_calls_follow_the_same_rules():
    m = riemfl.Sphere(3)
    x = m.random_point(2, rng=0)
    u = np.full((2, 3), np.nan)
    riemfl.checks("deferred")
    m.exp(x, u)
    with pytest.raises(NonFiniteError, match="tangent vector u"):
        riemfl.raise_deferred()


# ----------------------------------------------------------------------------- each kind
def _violations():
    """(id, call) pairs: each kind of violation a map checks, on torch float64 tensors."""
    rng = np.random.default_rng(3)
    ball = riemfl.PoincareBall(3)
    stiefel = riemfl.Stiefel(5, 2)
    sphere = riemfl.Sphere(3)
    rotations = riemfl.SpecialOrthogonal(4)
    spd = riemfl.SPD(2)
    singular = np.ones((2, 2))
    on_boundary = np.array([0.6, 0.8, 0.0])  # |x| = 1
    deficient = np.zeros((5, 2))
    deficient[0, 0] = deficient[1, 0] = 1.0  # rank 1
    x = stiefel.random_point(rng=rng)
    far = -x  # a geodesic distance beyond the log's reach
    return [
        ("non-finite-argument", NonFiniteError, sphere.log, ([0, 0, 1.0], [np.nan, 0, 0])),
        ("boundary-point", NotOnManifoldError, ball.exp, (on_boundary, [0.0, 0.0, 0.1])),
        # a singular matrix: the guard of a factorisation inside the map fails first; eager
        # mode traces it to the point on the boundary of the cone
        ("boundary-point-behind-a-guard", NotOnManifoldError, spd.log, (singular, np.eye(2))),
        ("rank-deficient", ProjectionError, stiefel.project, (deficient,)),
        ("non-unique-projection", ProjectionError, sphere.project, ([0.0, 0.0, 0.0],)),
        ("failed-convergence", ConvergenceError, stiefel.log, (x, far)),
        # a check inside the map (antipodes) before the map call's check of its NaN result
        ("antipodal-log", CutLocusError, sphere.log, ([0.0, 0.0, 1.0], [0.0, 0.0, -1.0])),
        # X^T Y a rotation by pi: the message holds the nearest-rotation test's numbers
        ("cut-locus", CutLocusError, rotations.log, (np.eye(4), np.diag([-1.0, -1.0, 1.0, 1.0]))),
    ]


_VIOLATIONS = _violations()


@pytest.mark.parametrize("kind, error, method, args", _VIOLATIONS, ids=[v[0] for v in _VIOLATIONS])
def test_each_kind_of_violation_is_deferred_and_raised_as_eager_raises_it(
    kind, error, method, args
):
    def call():
        return method(*(_t(a) for a in args))

    with pytest.raises(error) as eager:
        call()
    with riemfl.checks("deferred"):
        call()  # recorded, not raised
        assert check_levels.pending_checks() >= 1
        with pytest.raises(error) as deferred:
            riemfl.raise_deferred()
    assert type(deferred.value) is type(eager.value)
    assert str(deferred.value) == str(eager.value)
    with riemfl.checks("off"):
        call()
        assert check_levels.pending_checks() == 0


@pytest.mark.slow  # a compilation per kind
@pytest.mark.parametrize("kind, error, method, args", _VIOLATIONS, ids=[v[0] for v in _VIOLATIONS])
def test_each_kind_of_violation_recorded_in_a_compiled_function_raises_at_the_boundary(
    kind, error, method, args
):
    tensors = [_t(a) for a in args]
    with pytest.raises(error) as eager:
        method(*tensors)
    torch._dynamo.reset()
    compiled = torch.compile(method, backend="aot_eager", fullgraph=True)
    with riemfl.checks("deferred"):
        compiled(*tensors)
        assert check_levels.pending_checks() >= 1
        with pytest.raises(RiemflError) as deferred:
            riemfl.raise_deferred()
    torch._dynamo.reset()
    # the eager diagnosis of a non-finite argument reads the arguments, which a graph does not
    # keep: the compiled one names the argument as eager mode does, without the entry's index
    # (the boundary point's diagnosis reads copies of the points: word for word)
    message = str(deferred.value)
    if kind == "non-finite-argument":
        assert type(deferred.value) is type(eager.value)
        assert message.split(" (")[0] == str(eager.value).split(" (")[0]  # map, argument, kind
        assert "compiled with torch.compile" in message
    else:  # the message reads constants and tensors only: eager mode's, word for word
        assert type(deferred.value) is type(eager.value)
        assert str(deferred.value) == str(eager.value)


def _polar_of_an_overflowed_difference(a):
    big = a * 1e200 * 1e200  # infinite entries from finite ones
    return polar(big - big, what="difference")  # inf - inf: NaN


@pytest.mark.slow  # one compilation
def test_a_compiled_factorisation_runs_on_zeros_and_its_guard_raises_at_the_boundary():
    """Torch's SVD raises on NaN (CPU) from inside a graph, where riemfl cannot translate the
    exception: the guard before it records the overflow and the SVD takes zeros in place of the
    NaN (``factorisable``), so the boundary raises eager mode's error, word for word."""
    a = _t([[2.0, 1.0], [1.0, 3.0], [0.5, 0.1]])
    with pytest.raises(NonFiniteError) as eager:
        _polar_of_an_overflowed_difference(a)
    torch._dynamo.reset()
    compiled = torch.compile(_polar_of_an_overflowed_difference, backend="eager", fullgraph=True)
    with riemfl.checks("deferred"):
        out = compiled(a)  # no torch error inside the graph
        assert bool(torch.isfinite(out).all())
        with pytest.raises(NonFiniteError) as deferred:
            riemfl.raise_deferred()
    torch._dynamo.reset()
    assert str(deferred.value) == str(eager.value)
    assert "intermediate value overflowed" in str(eager.value)


def test_factorisable_leaves_arrays_alone_outside_a_compiled_function():
    """Uncompiled, at every level, the factorisation takes its input itself (no copy)."""
    a = _t([[np.nan, 1.0], [1.0, 2.0]])
    for level in ("eager", "deferred", "off"):
        with riemfl.checks(level):
            assert factorisable(a) is a
    x = np.array([[np.inf, 0.0]])
    assert factorisable(x) is x


def test_a_compiled_record_of_an_unknown_site_raises_its_error_without_values():
    """A graph that names a check site this process did not register (one traced elsewhere)
    still raises the check's typed error, naming the check, at the boundary."""
    from riemfl.check_levels_torch import record_deferred

    record_deferred(torch.tensor([False, True]), "ProjectionError", "the check c", 10**6, [])
    with pytest.raises(ProjectionError, match="the check c: a check failed inside a function"):
        riemfl.raise_deferred()
    record_deferred(torch.tensor([False]), "ProjectionError", "the check c", 10**6, [])
    riemfl.raise_deferred()  # not violated: nothing to raise


@pytest.mark.slow  # an inductor compilation
def test_a_compiled_violation_survives_inductor_reusing_the_verdicts_buffer():
    """Inductor hands an intermediate's buffer to a later one once its last reader (here the
    operator recording the verdict) has run: the record keeps a copy, so the NaN verdict of
    the first call is not overwritten by the second call's finite one."""
    sphere = riemfl.Sphere(3)

    def step(x, u, v):
        y = torch.nan_to_num(sphere.exp(x, u)) + x
        y = y / y.norm()
        return sphere.exp(y, v - (v @ y) * y)

    x, u, v = _t([1.0, 0.0, 0.0]), _t([0.0, np.nan, 0.0]), _t([0.0, 0.3, 0.2])
    torch._dynamo.reset()
    compiled = torch.compile(step, fullgraph=True)
    with riemfl.checks("deferred"):
        compiled(x, u, v)
        with pytest.raises(NonFiniteError, match="tangent vector u"):
            riemfl.raise_deferred()
        compiled(x, torch.zeros(3, dtype=torch.float64), v)
        riemfl.raise_deferred()  # valid input: nothing to raise
    torch._dynamo.reset()


# ----------------------------------------------------------------------------- engines
def test_a_federated_run_raises_a_deferred_violation_at_the_end_of_its_round():
    from riemfl.federated import RFedProj, run_sync
    from riemfl.problems import KPCAProblem

    seen = []

    def on_step(r, history):
        seen.append(r)
        if r == 2:  # recorded after round 2's boundary: round 3's boundary raises it
            check_levels.refuse(np.array([True]), ProjectionError, lambda: "a deferred check")

    problem = KPCAProblem.synthetic(n_clients=3, d=6, k=2, p=20, seed=0)
    with riemfl.checks("deferred"):
        with pytest.raises(ProjectionError, match="a deferred check"):
            run_sync(problem, RFedProj(0.01, 2), 6, options=RunOptions(on_step=on_step))
    assert seen == [1, 2]


# ----------------------------------------------------------------------------- the docs
def test_the_docs_list_every_map_that_reads_when_deferred():
    from pathlib import Path

    from riemfl.manifolds.catalogue import deferred_reads_markdown

    text = (Path(__file__).resolve().parents[1] / "docs" / "check-levels.md").read_text()
    begin = text.index("<!-- deferred-reads: begin")
    block = text[text.index("\n", begin) + 1 : text.index("<!-- deferred-reads: end -->")]
    assert block.strip() == deferred_reads_markdown(), (
        "docs/check-levels.md's list of the maps that read when deferred is stale; paste "
        "riemfl.manifolds.catalogue.deferred_reads_markdown()"
    )
