r"""AsyncManifold with a two-dimensional learned manifold: the quadratic Bezier triangle.

Licudi et al. 2025, Sec. 3, define AsyncManifold for any latent manifold M; their experiments use
the curve (AsyncBezier) and their Fig. 2 draws a learned two-dimensional manifold in
:math:`\mathbb R^3`. This experiment runs the triangle
(:mod:`riemfl.federated.async_manifold.triangle`, client
:class:`riemfl.nn.surface_trainer.SurfaceClientTrainer`):

* (a) the counterpart of Fig. 2: a triangle learned on a toy loss in :math:`\mathbb R^3` with an
  obstruction next to the chord, drawn as a surface beside its latent domain (:mod:`.toy`);
* (b) the counterpart of Fig. 1: the loss in the plane of the global model, a local model and
  the control point of a curve learned from the final model of an AsyncBezier run on the digits
  stand-in, in the coordinates of the standard 2-simplex (:mod:`.plane`);
* (c) AsyncBezierTriangle (edge and geodesic server paths) against AsyncBezier and FedAsync on
  the digits stand-in at equal server steps, a few seeds (:mod:`.digits`), and how far a
  client's triangle opens and where the two server paths step on it (:mod:`.probe`).

The claims (:mod:`.verdicts`) were fixed before the runs. Writes ``report.md``, ``results.json``
(settings, claims, the toy's and the plane's numbers, the runs without their models) and
``surface.png``, ``landscape.png``, ``comparison.png``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from ...federated.serialise import json_ready
from ...progress import ProgressBar
from .._threads import single_torch_thread
from ..claims import Claim
from .digits import one_run
from .figures import plot_comparison, plot_landscape, plot_toy
from .plane import landscape
from .probe import surface_probe
from .report import report
from .settings import METHODS, Settings
from .toy import learn
from .verdicts import comparison_claims, plane_claims, toy_claims

__all__ = ["METHODS", "Settings", "learn", "landscape", "one_run", "reproduce"]

#: the entries of a run kept out of ``results.json``
_BULKY = ("final_point",)


def reproduce(
    out: str | Path = "results/learned_surfaces",
    *,
    quick: bool = False,
    progress: bool = True,
    settings: Settings | None = None,
) -> list[Claim]:
    """Run (a), (b) and (c); write ``report.md``, ``results.json`` and the figures into ``out``;
    return the claims.

    Parameters
    ----------
    out : path
        The output folder (created).
    quick : bool
        The quick form (:meth:`Settings.quick`: under a minute on one core).
    progress : bool
        A progress bar on stderr.
    settings : Settings, optional
        Overrides ``quick``.
    """
    s = settings if settings is not None else (Settings.quick() if quick else Settings())
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows: list[dict[str, Any]] = []
    plane = probe = None
    with single_torch_thread(), ProgressBar(s.runs(), "learned-surfaces", enabled=progress) as bar:
        toy = learn(s)
        bar.update(1, run="toy surface")
        for method in s.methods:
            for seed in s.seeds:
                rows.append(one_run(method, seed, s))
                bar.update(1, run=f"{method} seed {seed}", acc=rows[-1]["accuracy"])
        curves = [r for r in rows if r["method"] == "AsyncBezier"]
        if curves:
            plane = landscape(s, curves[0]["seed"], curves[0]["final_point"])
        surfaces = [r for r in rows if r["method"] == "AsyncBezierTriangle"]
        if surfaces:
            probe = surface_probe(s, surfaces[0]["seed"], surfaces[0]["final_point"])
        bar.update(1, run="landscape and surface probe")
    seconds = time.perf_counter() - t0
    claims = toy_claims(toy) + (plane_claims(plane) if plane else []) + comparison_claims(rows)
    plot_toy(toy, out)
    if plane is not None:
        plot_landscape(plane, out)
    plot_comparison(rows, s.methods, out)
    (out / "report.md").write_text(report(toy, plane, probe, rows, claims, s, quick, seconds))
    summary = {
        "settings": asdict(s),
        "quick": quick,
        "seconds": seconds,
        "claims": [asdict(c) for c in claims],
        "toy": _arrays_to_lists(toy),
        "plane": None if plane is None else _arrays_to_lists(plane),
        "surface_probe": probe,
        "runs": [{k: v for k, v in r.items() if k not in _BULKY} for r in rows],
    }
    (out / "results.json").write_text(json.dumps(json_ready(summary), indent=1))
    return claims


def _arrays_to_lists(value: Any) -> Any:
    """Nested dicts with numpy arrays as lists (rounded to 6 significant digits: the grids)."""
    if isinstance(value, dict):
        return {k: _arrays_to_lists(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return np.vectorize(lambda v: float(f"{v:.6g}"))(value).tolist() if value.size else []
    return value
