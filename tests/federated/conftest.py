"""Fixtures of the federated tests (the problems are in ``_problems.py``)."""

from __future__ import annotations

import pytest
from _problems import QuadraticProblem

import riemfl


@pytest.fixture
def stiefel_problem():
    return QuadraticProblem(riemfl.Stiefel(7, 3), n=6, p=8, seed=1)


@pytest.fixture
def euclidean_problem():
    return QuadraticProblem(riemfl.Euclidean(5, 2), n=5, p=6, seed=2, linear=1.0)
