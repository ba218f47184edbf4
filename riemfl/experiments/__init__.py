"""Experiments behind the ``riemfl`` command: named problems/algorithms and paper reproductions.

* :mod:`riemfl.experiments.registry`: ``riemfl run PROBLEM --algorithm ALG``;
* :mod:`riemfl.experiments.zhang2024`: ``riemfl reproduce zhang2024`` (Figures 1-9 and the
  claims of Zhang, Hu, So & Johansson, NeurIPS 2024);
* :mod:`riemfl.experiments.licudi2025`: ``riemfl reproduce licudi2025`` (Table 1, Figs. 3-4 of
  Licudi et al. 2025 on offline stand-ins);
* :mod:`riemfl.experiments.floral`: ``riemfl reproduce floral`` (Table 1 of Almansoori et al.
  2024 on the digits stand-in, synthetic curves);
* :mod:`riemfl.experiments.privacy`: ``riemfl reproduce privacy``.
* :mod:`riemfl.experiments.robustness`: ``riemfl reproduce robustness`` (robust aggregation
  under Byzantine attacks, and a server-optimiser comparison).
* :mod:`riemfl.experiments.communication`: ``riemfl reproduce communication`` (uplink bytes to
  a tolerance under compressed uploads).

Each reproduction is a package whose modules have one job each: ``settings`` (what the paper
fixes and what riemfl chose), ``run`` (running and resuming), the analysis or claims, ``figures``
and ``report``.
"""

from .registry import ALGORITHM_NAMES, PROBLEMS, build_algorithm, build_problem

__all__ = ["ALGORITHM_NAMES", "PROBLEMS", "build_algorithm", "build_problem"]
