"""The command line's registry: every named problem and rule builds, curve rules need a
manifold, and refused arguments say why."""

import pytest

from riemfl import ParameterError
from riemfl.experiments.registry import (
    ASYNC_RULE_NAMES,
    CURVE_RULE_NAMES,
    PROBLEMS,
    build_async_rule,
    build_problem,
)
from riemfl.federated import AsyncManifold, AsyncRule
from riemfl.manifolds import Euclidean


@pytest.mark.parametrize("name", ASYNC_RULE_NAMES)
def test_every_async_rule_builds(name):
    rule = build_async_rule(name, server_lr=0.3, manifold=Euclidean(4))
    assert isinstance(rule, AsyncRule) and rule.name == name
    assert rule.server_lr == pytest.approx(0.3)


def test_curve_rules_need_the_manifold_and_keep_the_papers_defaults():
    for name in CURVE_RULE_NAMES:
        with pytest.raises(ParameterError, match="pass manifold="):
            build_async_rule(name)
    base = Euclidean(3, 2)
    bezier = build_async_rule("asyncbezier", manifold=base, vartheta=0.0)
    ed = build_async_rule("asyncbezier-ed", manifold=base)
    assert isinstance(bezier, AsyncManifold) and bezier.embedding.base is base
    assert (bezier.server_lr, bezier.alpha, bezier.correction.vartheta) == (0.5, 0.0, 0.0)
    assert (ed.server_lr, ed.alpha, ed.correction.vartheta) == (0.25, 1.0, 1.0)
    with pytest.raises(ParameterError, match="unknown async rule"):
        build_async_rule("asyncbeziers")


@pytest.mark.parametrize("name", sorted(n for n, e in PROBLEMS.items() if not e.needs_data))
def test_every_problem_without_data_builds_with_a_positive_default_step(name):
    problem = build_problem(name, clients=3)
    assert problem.n_clients == 3
    assert PROBLEMS[name].default_step(problem) > 0


def test_problems_that_need_data_say_so():
    for name in (n for n, e in PROBLEMS.items() if e.needs_data):
        with pytest.raises(ParameterError, match="needs --data"):
            build_problem(name)
    with pytest.raises(ParameterError, match="has no components"):
        build_problem("logreg-digits", k=2)
    with pytest.raises(ParameterError, match="unknown problem"):
        build_problem("logreg")


def test_each_name_of_the_tables_is_the_name_its_method_reports():
    from riemfl.experiments.registry import (
        ALGORITHMS,
        ASYNC_RULES,
        build_algorithm,
        build_async_rule,
    )
    from riemfl.manifolds import Euclidean

    for name in ALGORITHMS:
        assert build_algorithm(name, step_size=0.1, local_steps=2).name == name
    for name in ASYNC_RULES:
        assert build_async_rule(name, manifold=Euclidean(3)).name == name
