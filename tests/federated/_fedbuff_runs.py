"""Small FedBuff runs on a quadratic problem, and the bit-for-bit comparison of two histories,
shared by the FedBuff server-side and compression tests."""

from __future__ import annotations

import copy

import numpy as np
from _problems import QuadraticProblem

import riemfl
from riemfl.federated import ExponentialTime, ProblemTrainer, RunOptions, run_async

TIMING = ExponentialTime([0.2, 0.5, 1.0, 2.0, 4.0])


def fedbuff_trainer(manifold=None):
    """Riemannian SGD (3 steps of 0.05, batches of 3) on a 5-client quadratic, on ``manifold``
    (default Euclidean(5, 2))."""
    manifold = riemfl.Euclidean(5, 2) if manifold is None else manifold
    problem = QuadraticProblem(manifold, n=5, p=6, seed=2, linear=1.0)
    return ProblemTrainer(problem, 0.05, 3, batch_size=3)


def fedbuff_run(rule, steps=12, trainer=None, **options):
    """``run_async`` of ``rule`` with :data:`TIMING` (seed 4, every second step recorded)."""
    options = RunOptions(**{"seed": 4, "record_every": 2, **options})
    trainer = fedbuff_trainer() if trainer is None else trainer
    return run_async(trainer, rule, steps, timing=TIMING, options=options)


def same_histories(a, b, rule_config=True):
    """``a`` and ``b`` agree bit for bit (``rule_config`` False: but for the rule's settings in
    the config, which name its aggregator, optimiser or compressor)."""
    if not rule_config:
        b = copy.copy(b)
        b.config = {**b.config, "rule": a.config["rule"]}
    assert a.same_results(b)
    np.testing.assert_array_equal(a.final_point, b.final_point)
