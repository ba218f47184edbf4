"""The claim checks of the Zhang et al. 2024 reproduction.

:func:`check_claims` runs every check of :data:`CHECKS` (the claims are listed in the package
docstring of :mod:`riemfl.experiments.zhang2024`) on the histories of the runs. The checks of the
figures' claims are here: 1 (feasibility), 4 (uplink accounting), 6 (the baselines' plateau),
7 and 10 (RFedProj against RFedSVRG, one check under the settings of :data:`VERSUS_SVRG`) and 9
(the stochastic floor); claims 2, 3 and 5 are in
:mod:`~riemfl.experiments.zhang2024.structural`, claim 8 in
:mod:`~riemfl.experiments.zhang2024.tau`. A claim whose figures did not run is skipped.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ...federated import History
from .claims import Claim, reach
from .run import Problems
from .settings import Figure, Sweep
from .structural import structural_claims
from .tau import claim_tau

__all__ = ["Evidence", "CHECKS", "VERSUS_SVRG", "UPLINKS_PER_ROUND", "check_claims"]

#: claim 4: the d x k matrices each client uploads per round, by algorithm
UPLINKS_PER_ROUND = {"rfedproj": 1.0, "rfedsvrg": 2.0, "rfedavg": 1.0, "rfedprox": 1.0}

#: claims 7 and 10, one check: claim -> (its figures, the problem's name in the claim)
VERSUS_SVRG = {7: ((1, 6), "kPCA"), 10: ((4,), "LRMC")}


@dataclass(frozen=True)
class Evidence:
    """What a check reads: the figures, the histories by run key, the figures all of whose runs
    are among them (``ran``), the problems, and the claim-8 sweep (None: not run)."""

    figs: dict[int, Figure]
    results: dict[str, History]
    ran: set[int]
    problems: Problems
    setting: Sweep | None


def check_claims(
    figs: dict[int, Figure],
    results: dict[str, History],
    problems: Problems,
    setting: Sweep | None = None,
) -> list[Claim]:
    """Every claim of the package docstring, by number and part (claims whose figures did not
    run are skipped); ``setting``: the claim-8 sweep whose runs are in ``results`` (None: not
    run)."""
    ran = {n for n, f in figs.items() if all(r.key in results for r in f.runs)}
    evidence = Evidence(figs, results, ran, problems, setting)
    claims = [claim for check in CHECKS for claim in check(evidence)]
    return sorted(claims, key=lambda c: (c.number, c.part))


def _by_algorithm(fig: Figure, panel: int, results: dict[str, History]) -> dict[str, History]:
    return {run.algorithm: results[run.key] for _, run in fig.panels[panel][1]}


def _fmt_reach(name: str, r: tuple[int, float, float] | None) -> str:
    if r is None:
        return f"{name}: not reached"
    return f"{name}: round {r[0]}, {r[1]:.0f} uploads, {r[2]:.2f} s CPU"


def _feasibility(e: Evidence) -> list[Claim]:
    """Claim 1: the final point of every run is on its manifold."""
    worst = 0.0
    for key, h in e.results.items():
        M = e.problems(key.split("-rfed")[0]).manifold
        worst = max(worst, M.point_violation(h.final_point)[1])
    return [
        Claim(
            1,
            "every global iterate P_M(x^r) is on the manifold",
            worst <= 1e-12,
            f"max |X^T X - I| over the final points of {len(e.results)} runs = {worst:.1e}",
        )
    ]


def _uplinks(e: Evidence) -> list[Claim]:
    """Claim 4: the uploads per client in round 1 of Fig. 1 are :data:`UPLINKS_PER_ROUND`."""
    if 1 not in e.ran:
        return [Claim(4, "uplink accounting", None, "Fig. 1 not run", (1,))]
    per_round = {a: h.uplink_matrices[1] for a, h in _by_algorithm(e.figs[1], 0, e.results).items()}
    return [
        Claim(
            4,
            "uplink per client per round: RFedProj 1, RFedAvg 1, RFedProx 1, "
            "RFedSVRG 2 d x k matrices",
            per_round == UPLINKS_PER_ROUND,
            f"measured {per_round}",
            (1,),
        )
    ]


def _plateau(e: Evidence) -> list[Claim]:
    """Claim 6 on Figs. 1 and 6: RFedAvg and RFedProx stall, RFedProj and RFedSVRG do not."""
    text = (
        "heterogeneous kPCA: RFedAvg and RFedProx plateau at a non-zero |grad f| while "
        "RFedProj and RFedSVRG keep decreasing"
    )
    used = tuple(n for n in (1, 6) if n in e.ran)
    if not used:
        return [Claim(6, text, None, "Figs. 1 and 6 not run", (1, 6))]
    ok, parts = True, []
    for n in used:
        h = _by_algorithm(e.figs[n], 0, e.results)
        good = max(h["rfedproj"].grad_norm[-1], h["rfedsvrg"].grad_norm[-1])
        for a in ("rfedavg", "rfedprox"):
            g = h[a].grad_norm
            late = g[(3 * len(g)) // 4]
            stalled = g[-1] >= 0.5 * late  # less than a halving over the last quarter
            ok &= stalled and g[-1] >= 10 * good
            parts.append(f"Fig. {n} {a}: {g[-1]:.2e} (last quarter x{g[-1] / late:.2f})")
        parts.append(f"Fig. {n} best of RFedProj/RFedSVRG: {good:.2e}")
    claim = Claim(
        6,
        text + " (final |grad f| of the plateaued >= 10x the others', and less "
        "than halved over the last quarter of the rounds)",
        ok,
        "; ".join(parts),
        used,
    )
    return [claim]


def _versus_svrg(number: int) -> Callable[[Evidence], list[Claim]]:
    """The check of claim 7 or 10 (:data:`VERSUS_SVRG`): RFedProj against RFedSVRG."""

    def check(e: Evidence) -> list[Claim]:
        used_figs, what = VERSUS_SVRG[number]
        return [_claim_versus_svrg(number, e, used_figs, what)]

    return check


def _claim_versus_svrg(number: int, e: Evidence, used_figs: tuple[int, ...], what: str) -> Claim:
    text = (
        f"{what}: RFedProj is comparable to RFedSVRG per round (within 1.5x the rounds) and "
        "ahead in communication quantity and CPU time, to the same |grad f|"
    )
    used = tuple(n for n in used_figs if n in e.ran)
    if not used:
        return Claim(number, text, None, f"Fig(s). {used_figs} not run", used_figs)
    ok, parts = True, []
    for n in used:
        h = _by_algorithm(e.figs[n], 0, e.results)
        proj, svrg = h["rfedproj"], h["rfedsvrg"]
        tol = 2.0 * max(proj.grad_norm[-1], svrg.grad_norm[-1], 1e-300)
        tol = max(tol, 1e-10 * proj.grad_norm[0])  # below that both are at rounding level
        rp, rs = reach(proj, tol), reach(svrg, tol)
        if rp is None or rs is None:
            ok = False
        else:
            ok &= rp[0] <= 1.5 * rs[0] and rp[1] < rs[1] and rp[2] < rs[2]
        parts.append(
            f"Fig. {n}, |grad f| <= {tol:.1e}: {_fmt_reach('RFedProj', rp)}; "
            f"{_fmt_reach('RFedSVRG', rs)}"
        )
    return Claim(number, text, ok, "; ".join(parts), used)


def _batch_floor(e: Evidence) -> list[Claim]:
    """Claim 9 on Fig. 3: the stochastic floor of |grad f| shrinks as the batch grows."""
    text = (
        "stochastic gradients: |grad f| plateaus at a floor that shrinks as the batch grows "
        "(each floor at most 0.8x the previous)"
    )
    if 3 not in e.ran:
        return [Claim(9, text, None, "Fig. 3 not run", (3,))]
    floors = []
    for _, run in e.figs[3].panels[0][1]:
        g = e.results[run.key].grad_norm
        floors.append((run.batch_size, float(np.median(g[(3 * len(g)) // 4 :]))))
    values = [f for _, f in floors]
    ok = all(b <= 0.8 * a for a, b in zip(values, values[1:], strict=False))
    detail = "median |grad f| over the last quarter: " + ", ".join(
        f"b={b}: {f:.3g}" for b, f in floors
    )
    return [Claim(9, text, ok, detail, (3,))]


def _structural(e: Evidence) -> list[Claim]:
    return structural_claims(e.problems)


def _tau(e: Evidence) -> list[Claim]:
    return claim_tau(e.figs, e.results, e.ran, e.setting)


#: the checks, in the order they run; each returns its claims (claim 8: one per reading)
CHECKS: tuple[Callable[[Evidence], list[Claim]], ...] = (
    _feasibility,
    _structural,
    _uplinks,
    _plateau,
    _versus_svrg(7),
    _tau,
    _batch_floor,
    _versus_svrg(10),
)
