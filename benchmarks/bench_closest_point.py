"""Benchmark the closest point on Euclidean Bezier curves of degree other than 2.

``BezierCurve.closest_point`` finds the parameter of the nearest curve point from the real roots
of the derivative of the squared distance, a polynomial of degree 2n - 1 (companion
eigenvalues, batched over the queries; ``bezier_closest.polynomial_closest``). This script
times it against the safeguarded Newton iteration from 9 equally spaced starts that it replaced
(still the method on manifold bases, ``bezier_closest.newton_closest``, one query at a time), for
degrees 3 and 5, 1 to 1000 queries, in the plane and in R^1000, and checks the answers: the
polynomial's distance is never larger than Newton's (it is global; Newton can stop in a local
minimum), and the two agree wherever Newton found the global minimum.

Timing: one BLAS thread, medians of repeats, both methods interleaved.

Usage::

    python benchmarks/bench_closest_point.py [--quick] [--out results/bench_closest_point.json]
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_var] = "1"

import argparse  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import machine_info, single_thread, write_result  # noqa: E402

from riemfl.manifolds.bezier import BezierCurve  # noqa: E402
from riemfl.manifolds.bezier_closest import newton_closest  # noqa: E402

__all__ = ["CASES", "bench_case", "format_table", "main"]

#: (degree, dimension, queries)
CASES = [(3, 2, 1), (3, 2, 100), (3, 2, 1000), (5, 2, 1000), (3, 1000, 100)]
QUICK_CASES = [(3, 2, 10), (5, 2, 10)]
NEWTON_STARTS = 9


def _samples_us(fn: Callable[[], Any], repeats: int) -> list[float]:
    """Microseconds of ``repeats`` single calls of ``fn``."""
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    return samples


def bench_case(degree: int, dim: int, queries: int, repeats: int, seed: int = 0) -> dict:
    """One row: both methods on the same random curve and queries, times and agreement."""
    rng = np.random.default_rng([seed, degree, dim, queries])
    curve = BezierCurve(rng.standard_normal((degree + 1, dim)))
    points = rng.standard_normal((queries, dim)) * 1.5

    def polynomial() -> np.ndarray:
        return curve.closest_point(points)[0]

    def newton() -> np.ndarray:
        return np.array([newton_closest(curve, q, False, NEWTON_STARTS) for q in points])

    t_poly, t_newton = polynomial(), newton()  # warm-up and the answers
    d_poly = np.linalg.norm(curve(t_poly) - points, axis=-1)
    d_newton = np.linalg.norm(curve(t_newton) - points, axis=-1)
    poly_us: list[float] = []
    newton_us: list[float] = []
    for _ in range(repeats):  # interleaved
        poly_us += _samples_us(polynomial, 1)
        newton_us += _samples_us(newton, 1)
    p, n = statistics.median(poly_us), statistics.median(newton_us)
    return {
        "degree": degree,
        "dim": dim,
        "queries": queries,
        "polynomial_us": p,
        "newton_us": n,
        "speedup": n / p,
        "polynomial_us_per_query": p / queries,
        # global: never farther than Newton's local search (up to rounding)
        "max_excess_over_newton": float(np.max(d_poly - d_newton)),
        "newton_missed_global": int(np.sum(d_newton > d_poly + 1e-9)),
        "max_t_difference_where_both_global": float(
            np.max(np.abs(t_poly - t_newton)[d_newton <= d_poly + 1e-9], initial=0.0)
        ),
    }


def format_table(result: dict[str, Any]) -> str:
    head = (
        f"{'degree':>6} {'dim':>5} {'queries':>7} {'polynomial us':>14} {'Newton us':>11} "
        f"{'speedup':>8} {'Newton missed':>13}"
    )
    lines = [head]
    for r in result["rows"]:
        lines.append(
            f"{r['degree']:>6} {r['dim']:>5} {r['queries']:>7} {r['polynomial_us']:>14.1f} "
            f"{r['newton_us']:>11.1f} {r['speedup']:>7.0f}x {r['newton_missed_global']:>13}"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="two small cases, few repeats")
    parser.add_argument("--out", default="results/bench_closest_point.json")
    args = parser.parse_args(argv)
    cases, repeats = (QUICK_CASES, 3) if args.quick else (CASES, 9)
    with single_thread() as threads:
        rows = [bench_case(*case, repeats=repeats) for case in cases]
    result = {
        "machine": machine_info(threads),
        "quick": args.quick,
        "newton_starts": NEWTON_STARTS,
        "repeats": repeats,
        "rows": rows,
    }
    return write_result(result, args.out, format_table(result))


if __name__ == "__main__":
    main()
