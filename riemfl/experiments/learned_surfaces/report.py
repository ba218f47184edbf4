"""``report.md``: the toy surface, the plane of a learned curve, the digits runs, the claims."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..claims import Claim
from .figures import COMPARISON, LANDSCAPE, SURFACE
from .settings import Settings
from .toy import BUMP, CURVATURE, HEIGHT, WIDTH
from .verdicts import stats

__all__ = ["report"]


def _g(value: float) -> str:
    return f"{value:.4g}"


def _shift(name: str, centre: float) -> str:
    """``x``, ``(x - 0.5)`` or ``(y + 0.25)``."""
    if centre == 0:
        return name
    return f"({name} {'-' if centre > 0 else '+'} {abs(centre):g})"


def _toy(toy: dict[str, Any], s: Settings) -> list[str]:
    seg, geo = toy["paths"]["segment"], toy["paths"]["geodesic"]
    return [
        "## (a) A Bezier triangle learned in R^3 (counterpart of Fig. 2)",
        "",
        f"Loss l(p) = (z - {CURVATURE:g}(x^2 + y^2))^2 + {HEIGHT:g} exp(-({_shift('x', BUMP[0])}^2"
        f" + {_shift('y', BUMP[1])}^2) / (2 * {WIDTH:g}^2)): a bowl-shaped valley with a bump next",
        f"to the chord between the global model A = (-1, 0, {CURVATURE:g}) and the local model",
        f"C = (1, 0, {CURVATURE:g}).",
        "The triangle starts flat through A, C and D = (0, 1.5, 1.2) and learns its edge points",
        f"and D by {s.toy_steps} gradient steps on the mean loss at {s.toy_batch} latent points",
        f"per step (band {s.toy_band:g}, step {s.toy_lr:g}); A and C stay fixed.",
        "",
        "| quantity | value |",
        "|---|---|",
        f"| highest loss on the chord A-C | {_g(toy['chord_max_loss'])} |",
        f'| highest loss on the server path, edge (`path="segment"`) | {_g(seg["max_loss"])} |',
        f"| highest loss on the server path, surface geodesic | {_g(geo['max_loss'])} |",
        f"| length of the edge path / geodesic path | {_g(seg['length'])} / {_g(geo['length'])} |",
        f"| step f = {s.toy_fraction:g} (eq. (12), chordal): latent r on the edge / geodesic | "
        f"{_g(seg['r'])} / {_g(geo['r'])} |",
        f"| mean loss over the triangle: flat start / learned | {_g(toy['initial_mean_loss'])} / "
        f"{_g(toy['learned_mean_loss'])} |",
        "",
        f"![the learned triangle and its latent domain]({SURFACE})",
        "",
    ]


def _plane(plane: dict[str, Any], s: Settings) -> list[str]:
    return [
        "## (b) The loss in the plane of a learned curve (counterpart of Fig. 1)",
        "",
        f"From the final model A of the AsyncBezier run of seed {plane['seed']}, client "
        f"{plane['client']} ({plane['client_rows']} training rows, the most) learns a curve with "
        f"{s.plane_curve_epochs} curve epochs: local model C, control point B (|C - A| = "
        f"{_g(plane['distance_AC'])}, |B - A| = {_g(plane['distance_AB'])}). The plane of A, C, B",
        "is drawn in the coordinates of the standard 2-simplex (A, C, B at its vertices; an affine",
        f"map), on a {s.plane_grid} x {s.plane_grid} grid reaching {s.plane_margin:g} beyond it.",
        "",
        "| loss | mean on the curve | mean on the chord | Q = chord / curve |",
        "|---|---|---|---|",
        f"| client {plane['client']}'s training loss | {_g(plane['curve_client_loss'].mean())} | "
        f"{_g(plane['chord_client_loss'].mean())} | {plane['Q_client']:.4f} |",
        f"| pooled test loss | {_g(plane['curve_test_loss'].mean())} | "
        f"{_g(plane['chord_test_loss'].mean())} | {plane['Q_test']:.4f} |",
        "",
        f"![the loss in the plane of the learned curve]({LANDSCAPE})",
        "",
    ]


def _comparison(rows: Sequence[dict[str, Any]], s: Settings) -> list[str]:
    lines = [
        "## (c) The triangle rule against the curve rule and FedAsync",
        "",
        f"{s.n_clients} Dirichlet({s.alpha:g}) clients of the digits, MLP 64-{s.hidden}-10, local "
        f"Adam {s.local_lr:g} on FedProx (mu = {s.mu:g}), {s.epochs} epochs; curve and surface "
        f"clients add {s.curve_epochs} epochs with Adam {s.curve_lr:g} on the control points "
        f"(surface band {s.band:g}); eta_g = {s.server_lr:g} for every method; the paper's",
        f"scheduler ({s.workers} workers, k = {s.scheduler_k:g}); {s.steps} server steps; seeds "
        f"{', '.join(map(str, s.seeds))}.",
        "",
        "| method | final test accuracy (%) | final test loss | client updates | mean staleness |",
        "|---|---|---|---|---|",
    ]
    for method in s.methods:
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue
        acc, acc_sd, _ = stats(rows, method, "accuracy")
        loss, loss_sd, _ = stats(rows, method, "loss")
        updates = sum(r["updates"] for r in mine) / len(mine)
        stale = sum(r["mean_staleness"] for r in mine) / len(mine)
        lines.append(
            f"| {method} | {100 * acc:.2f} +/- {100 * acc_sd:.2f} | {loss:.4f} +/- "
            f"{loss_sd:.4f} | {updates:g} | {stale:.2f} |"
        )
    lines += ["", f"![accuracy against server steps]({COMPARISON})", ""]
    return lines


def _probe(probe: dict[str, Any], s: Settings) -> list[str]:
    seg, geo = probe["steps"]["segment"], probe["steps"]["geodesic"]
    lines = [
        "### What the clients learn",
        "",
        f"From the final model A of the AsyncBezierTriangle run of seed {probe['seed']}, client "
        f"{probe['client']} learns a triangle with the runs' settings. Distance from A of:",
        "",
        "| control point | distance from A |",
        "|---|---|",
        *(f"| {name} | {_g(d)} |" for name, d in probe["distances"].items()),
        "",
        f"The server's step at this client's f = w_i eta_g = {_g(probe['fraction'])} (eq. (12),",
        "chordal):",
        "",
        "| server path | latent r | deepest latent w of the path | pooled test loss after |",
        "|---|---|---|---|",
        f"| edge (segment) | {_g(seg['r'])} | {_g(seg['depth'])} | {_g(seg['test_loss'])} |",
        f"| surface geodesic | {_g(geo['r'])} | {_g(geo['depth'])} | {_g(geo['test_loss'])} |",
        "",
        f"The two new models are {_g(probe['step_gap'])} apart, for a step of length "
        f"{_g(probe['step_length'])}.",
        "",
    ]
    return lines


def report(
    toy: dict[str, Any],
    plane: dict[str, Any] | None,
    probe: dict[str, Any] | None,
    rows: Sequence[dict[str, Any]],
    claims: Sequence[Claim],
    s: Settings,
    quick: bool,
    seconds: float,
) -> str:
    """The markdown report."""
    passed = sum(c.passed for c in claims)
    form = "quick form" if quick else "full form"
    lines = [
        "# Learned surfaces: AsyncManifold with a two-dimensional latent manifold",
        "",
        f"{form}; {seconds:.1f} s; {passed}/{len(claims)} claims pass.",
        "",
        "Licudi et al. 2025 (Sec. 3) allow a latent manifold of any dimension; their Fig. 2 draws",
        "a learned disk in R^3 and their experiments use curves. Here the latent manifold is the",
        "triangle, embedded as a quadratic Bezier triangle (six control points; its edge from the",
        "global to the local model is AsyncBezier's curve), learned by the clients and stepped",
        "along by the server (eq. (12)). The claims and their rules were fixed before the runs.",
        "",
        *_toy(toy, s),
    ]
    if plane is not None:
        lines += _plane(plane, s)
    lines += _comparison(rows, s)
    if probe is not None:
        lines += _probe(probe, s)
    lines += ["## Claims", "", *(f"- {c.line()}" for c in claims), ""]
    changes = [c for c in claims if c.change]
    if changes:
        lines += ["What would change a verdict:", ""]
        lines += [f"- {c.label}: {c.change}" for c in changes]
        lines.append("")
    return "\n".join(lines)
