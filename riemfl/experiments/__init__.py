"""Experiments behind the ``riemfl`` command: named problems/algorithms and paper reproductions.

* :mod:`riemfl.experiments.registry`: ``riemfl run PROBLEM --algorithm ALG``;
* :mod:`riemfl.experiments.zhang2024`: ``riemfl reproduce zhang2024`` (Figures 1-9 and the
  claims of Zhang, Hu, So & Johansson, NeurIPS 2024).
"""

from .registry import ALGORITHM_NAMES, PROBLEMS, build_algorithm, build_problem

__all__ = ["ALGORITHM_NAMES", "PROBLEMS", "build_algorithm", "build_problem"]
