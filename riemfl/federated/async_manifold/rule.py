r"""The AsyncManifold server rule (Licudi et al. 2025, App. C, Alg. 1, over any embedding).

:class:`AsyncManifold` with its exact one-pass step for Bezier curves on a Euclidean base.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ... import tuning
from ..._validation import integer, optional
from ...backend import Array
from ...errors import ParameterError, ShapeError
from ...manifolds.base import Manifold
from ...manifolds.bezier import scalar_bernstein_weights
from ..async_rules import Arrival, AsyncRule
from ..rule_state import Commit, StateReader, copy_array, setter
from .correction import ControlPointCorrection, OrthoDCCorrection
from .embedding import (
    STEP_MODES,
    BezierEmbedding,
    Embedding,
    chordal_root,
    power_coefficient_matrix,
)
from .penalty import staleness_penalty


class AsyncManifold(AsyncRule):
    r"""The AsyncManifold server (Licudi et al. 2025, App. C, Alg. 1, over any :class:`Embedding`).

    The client's upload ``local`` is its learned parameters :math:`\phi^K \in M_\Phi` (for a
    Bezier curve: the control points, shape ``(n + 1, *point_shape)``) trained from
    :math:`\phi_{\Theta^t}`. On arrival at server version :math:`\tau`:

    1. :math:`v = \exp^{-1}_{\phi_{\Theta^t}}(\phi^K)` (eq. (7)) and the drift
       :math:`\Delta^g = \exp^{-1}_{\phi_{\Theta^t}}(\phi_{\Theta^\tau})`;
    2. :math:`\psi = \exp_{\phi_{\Theta^\tau}}(\Gamma\,\pi(v))` (correction, then transport to
       :math:`\phi_{\Theta^\tau}`; the identity on Euclidean space);
    3. :math:`\hat\Theta = \iota_\psi(\omega)`, :math:`S^{t,\tau}` by :func:`staleness_penalty`
       (eq. (10)) from :math:`d(\Theta^\tau, \hat\Theta)` and :math:`d(\Theta^t, \Theta^\tau)`;
    4. :math:`\Theta^{\tau+1}` = the path point at step :math:`f = S\,w_i\,\eta_g`
       (:meth:`Embedding.step_point`, eqs. (11)-(12)), :math:`\eta_g` divided by
       :math:`N p_i` with the dominance penalty of Licudi 2025 (TR), Sec. 5.1, on;
    5. optional server momentum :math:`m \leftarrow \beta\,\Gamma m + \exp^{-1}_{\Theta^\tau}
       (\Theta^{\tau+1})`, :math:`\Theta^{\tau+1} = \exp_{\Theta^\tau}(m)`;
    6. optional SWA: every ``swa_every`` steps from ``swa_start`` on, the running geodesic mean
       :math:`\Theta^{SWA} \leftarrow \exp_{\Theta^{SWA}}(\frac{1}{n+1}
       \exp^{-1}_{\Theta^{SWA}}(\Theta^{\tau+1}))` (exact on Euclidean space), returned by
       :meth:`output`; with ``swa_cycle`` (periodic SWA, Licudi 2025 (TR), Sec. 5.1) the global
       model is replaced
       by it every ``swa_cycle`` steps.

    Parameters
    ----------
    embedding : Embedding
    server_lr : float
        :math:`\eta_g` (constant).
    alpha : float in [0, 1]
        Staleness decay of eq. 10 (0: AsyncBezier, 1: AsyncBezierED).
    correction : ControlPointCorrection, "default" or None
        :math:`\pi(M_\Phi, \phi_{\Theta^t}, v, \Delta^g)`, default :class:`OrthoDCCorrection`.
    step_mode : {"chordal", "arc_length", "parameter"}
        The reading of eq. 12 (default chordal).
    beyond : {"extend", "clip"}
        Steps f > 1: continue the path past the local model, or stop there.
    eps : float
        Zero-drift guard of the penalty (as AsyncFedED's).
    dominance : bool
        Divide :math:`\eta_g` by :math:`N p_i` (Licudi 2025 (TR), Sec. 5.1, after Leconte et al.
        2024). The report leaves the estimator of :math:`p_i` open ("dependent on the time since
        the last update"); riemfl uses the share of arrivals so far from client i.
    momentum : float
        Server momentum :math:`\beta \in [0, 1)` (0: off).
    swa_start, swa_every, swa_cycle : int or None
        SWA from server version ``swa_start``, averaging every ``swa_every`` versions; periodic
        SWA overwrite every ``swa_cycle`` versions (None: off).

    Notes
    -----
    The run state (:meth:`state_dict`) is the per-client arrival counts, the momentum, the SWA
    point and its number of models, the diagnostics ``last``, and the state of the correction
    and the embedding when they have one (``state_dict`` and ``load_state_dict``).
    """

    name = "asyncmanifold"
    _state_counters = ("swa_models",)
    _state_helpers: tuple[str, ...] = ("correction", "embedding")

    def __init__(
        self,
        embedding: Embedding,
        server_lr: float = 1.0,
        *,
        alpha: float = 0.0,
        correction: Any = "default",
        step_mode: str = "chordal",
        beyond: str = "extend",
        eps: float = 0.1,
        dominance: bool = False,
        momentum: float = 0.0,
        swa_start: int | None = None,
        swa_every: int = 1,
        swa_cycle: int | None = None,
        operators: str = "exact",
    ) -> None:
        super().__init__(server_lr, operators)
        if not isinstance(embedding, Embedding):
            raise ParameterError("AsyncManifold needs an Embedding (e.g. BezierEmbedding)")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ParameterError(f"alpha must be in [0, 1], got {alpha!r}")
        if step_mode not in STEP_MODES:
            raise ParameterError(f"step_mode must be one of {STEP_MODES}, got {step_mode!r}")
        if beyond not in ("extend", "clip"):
            raise ParameterError(f"beyond must be 'extend' or 'clip', got {beyond!r}")
        if not float(eps) > 0.0:
            raise ParameterError(f"eps must be > 0, got {eps!r}")
        if not 0.0 <= float(momentum) < 1.0:
            raise ParameterError(f"momentum must be in [0, 1), got {momentum!r}")
        swa_start = optional(integer, swa_start, "AsyncManifold: swa_start", minimum=0)
        swa_cycle = optional(integer, swa_cycle, "AsyncManifold: swa_cycle", minimum=0)
        swa_every = integer(swa_every, "AsyncManifold: swa_every", minimum=1)
        if swa_cycle is not None and swa_start is None:
            raise ParameterError("swa_cycle (periodic SWA) needs swa_start")
        self.embedding = embedding
        self.alpha = float(alpha)
        if correction == "default":
            correction = OrthoDCCorrection()
        if not (correction is None or isinstance(correction, ControlPointCorrection)):
            raise ParameterError(
                "correction must be a ControlPointCorrection (e.g. OrthoDCCorrection), "
                f"'default' or None, got {type(correction).__name__}"
            )
        self.correction = correction
        self.step_mode = step_mode
        self.beyond = beyond
        self.eps = float(eps)
        self.dominance = bool(dominance)
        self.momentum = float(momentum)
        self.swa_start, self.swa_every, self.swa_cycle = swa_start, swa_every, swa_cycle
        self.reset(embedding.base, 1)

    def validate(self, manifold: Manifold) -> None:
        base = self.embedding.base
        if tuple(manifold.point_shape) != tuple(base.point_shape) or type(manifold) is not type(
            base
        ):
            raise ParameterError(
                f"AsyncManifold: the run's model space {manifold.name} is not the embedding's "
                f"base {base.name}"
            )

    def reset(self, manifold: Manifold, n_clients: int) -> None:
        self.n_clients = int(n_clients)
        self.counts = np.zeros(self.n_clients)
        self.velocity: Any = None
        self.swa_point: Any = None
        self.swa_models = 0
        self.last: dict[str, float] = {}
        if self.correction is not None:
            self.correction.reset()

    def _state(self) -> dict[str, Any]:
        velocity = None
        if self.velocity is not None:
            previous, step = self.velocity
            velocity = {"previous": copy_array(previous), "step": copy_array(step)}
        return {
            "counts": copy_array(self.counts),
            "velocity": velocity,
            "swa_point": copy_array(self.swa_point),
            "last": {key: float(value) for key, value in self.last.items()},
        }

    def _read_state(self, reader: StateReader) -> Commit:
        shape = tuple(self.embedding.base.point_shape)
        section = reader.section("velocity", optional=True)
        velocity = None
        if section is not None:
            velocity = (section.array("previous", shape=shape), section.array("step", shape=shape))
        return setter(
            self,
            counts=reader.array("counts", like=self.counts),
            velocity=velocity,
            swa_point=reader.array("swa_point", shape=shape, optional=True),
            last=reader.reals("last"),
        )

    def describe(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "server_lr": self.server_lr,
            "alpha": self.alpha,
            "step_mode": self.step_mode,
            "beyond": self.beyond,
            "eps": self.eps,
            "dominance": self.dominance,
            "momentum": self.momentum,
            "swa_start": self.swa_start,
            "swa_every": self.swa_every,
            "swa_cycle": self.swa_cycle,
            "embedding": type(self.embedding).__name__,
        }
        out["correction"] = "None" if self.correction is None else self.correction.describe()
        return out

    # -------------------------------------------------------------- the server step
    def corrected_parameters(self, a: Arrival) -> Array:
        r""":math:`\psi^\tau = \exp_{\phi_{\Theta^\tau}}(\Gamma\,\pi(v))` (steps 1-2)."""
        emb = self.embedding
        P = emb.parameters
        if tuple(np.shape(a.local)) != tuple(P.point_shape):
            raise ShapeError(
                f"{self.name}: a client uploaded an array of shape {tuple(np.shape(a.local))}; "
                f"expected the learned parameters of shape {tuple(P.point_shape)} (the trainer "
                f"must be a curve trainer, e.g. BezierProblemTrainer or BezierClientTrainer)"
            )
        phi_t = emb.point_parameters(a.base)
        phi_tau = emb.point_parameters(a.current)
        v = P.log(phi_t, a.local)
        if self.correction is not None:
            drift = P.log(phi_t, phi_tau)
            v = self.correction(P, phi_t, v, drift)
        return P.exp(phi_tau, P.transport(phi_t, phi_tau, v))

    def step_fraction(self, a: Arrival, psi: Array) -> float:
        r""":math:`f = S^{t,\tau} w_i \eta_g` (with the dominance penalty when on)."""
        m = self.embedding.base
        hat = self.embedding.embed(psi, self.embedding.omega)
        return self._fraction(a, float(m.dist(a.current, hat)), float(m.dist(a.base, a.current)))

    def _fraction(self, a: Arrival, local_distance: float, drift_distance: float) -> float:
        s = staleness_penalty(self.alpha, local_distance, drift_distance, self.eps)
        rate = self.server_lr * a.weight
        if self.dominance:
            share = self.counts[a.client] / self.counts.sum()
            rate /= self.n_clients * share
        self.last = {"penalty": s, "local_distance": local_distance, "drift": drift_distance}
        return float(s * rate)

    def apply(self, manifold: Manifold, a: Arrival) -> Array:
        if self.dominance:
            self.counts[a.client] += 1
        if self._has_fast_path(a):
            new, fraction, r = self._euclidean_bezier_step(a)
        else:
            psi = self.corrected_parameters(a)
            fraction = self.step_fraction(a, psi)
            new, r = self.embedding.step_point(psi, fraction, self.step_mode, self.beyond)
        self.last.update({"fraction": fraction, "r": r})
        if self.momentum:
            new = self._momentum(manifold, a.current, new)
        return self._swa(manifold, a.version + 1, new)

    def _has_fast_path(self, a: Arrival) -> bool:
        emb = self.embedding
        return (
            isinstance(emb, BezierEmbedding)
            and emb.euclidean
            and self.step_mode in ("chordal", "parameter")
            and (self.correction is None or type(self.correction) is OrthoDCCorrection)
            and all(type(x) is np.ndarray for x in (a.local, a.base, a.current))
            and tuple(a.local.shape) == tuple(emb.parameters.point_shape)
        )

    def _euclidean_bezier_step(self, a: Arrival) -> tuple[np.ndarray, float, float]:
        r"""Steps 1-4 on a Euclidean base in three passes over the data, without forming
        :math:`\psi` (the generic path gives the same point; tested).

        With :math:`v_k = P_k - \Theta^t`, :math:`d = \Theta^\tau - \Theta^t` and the
        correction :math:`\pi(v)_k = v_k - c_k d`: :math:`\psi_k = \Theta^\tau + v_k - c_k d`,
        so every quantity of the step is a function of the Gram matrix of
        :math:`(v_0, \dots, v_n, d)`, and the new model is
        :math:`\sum_k B_k(r) P_k + (\kappa - 1)\Theta^t + (1 - \kappa)\Theta^\tau`,
        :math:`\kappa = \sum_k B_k(r) c_k`.
        """
        n = self.embedding.degree
        shape = a.base.shape
        P = a.local.reshape(n + 1, -1)
        start, current = a.base.reshape(-1), a.current.reshape(-1)
        gram = _difference_gram(P, start, current)
        c = np.zeros(n + 1) if self.correction is None else self.correction.coefficients(gram)
        E = np.hstack([np.eye(n + 1), -c[:, None]])  # psi_k - Theta^tau = E_k . (v, d)
        psi_gram = E @ gram @ E.T
        fraction = self._fraction(
            a, math.sqrt(max(psi_gram[n, n], 0.0)), math.sqrt(max(gram[n + 1, n + 1], 0.0))
        )
        f = min(fraction, 1.0) if self.beyond == "clip" else fraction
        if f <= 0.0:
            r = 0.0
        elif self.step_mode == "parameter":
            r = f
        else:
            W = power_coefficient_matrix(n)
            r = chordal_root(W @ psi_gram @ W.T, f)
        weights = np.asarray(scalar_bernstein_weights(n, r))
        kappa = float(weights @ c)
        new = _combine(weights, P, kappa - 1.0, start, 1.0 - kappa, current)
        return new.reshape(shape), fraction, r

    def _momentum(self, m: Manifold, current: Array, new: Array) -> Array:
        step = m.log(current, new)
        if self.velocity is not None:
            previous, v = self.velocity
            step = step + self.momentum * m.transport(previous, current, v)
        self.velocity = (current, step)
        return m.exp(current, step)

    def _swa(self, m: Manifold, version: int, new: Array) -> Array:
        if self.swa_start is None or version < self.swa_start:
            return new
        if (version - self.swa_start) % self.swa_every == 0:
            if self.swa_point is None:
                self.swa_point = new
            else:
                self.swa_point = m.exp(
                    self.swa_point, m.log(self.swa_point, new) / (self.swa_models + 1)
                )
            self.swa_models += 1
        if self.swa_cycle and version % self.swa_cycle == 0 and self.swa_point is not None:
            return self.swa_point
        return new

    def output(self, current: Array) -> Array:
        """The model a run returns: the SWA average when SWA has started, else ``current``."""
        return current if self.swa_point is None else self.swa_point


def _difference_gram(P: np.ndarray, start: np.ndarray, current: np.ndarray) -> np.ndarray:
    r"""Gram matrix of :math:`(P_0 - x, \dots, P_n - x, y - x)` in one pass over the data.

    The differences are formed block by block in a small cache-resident buffer and never
    written to memory (exact differences, no cancellation from expanding the products).
    """
    k = P.shape[0]
    size = start.size
    gram = np.zeros((k + 1, k + 1))
    width = tuning.GRAM_BLOCK_ENTRIES
    buf = np.empty((k + 1, min(width, size)), dtype=np.result_type(P, start, np.float64))
    for lo in range(0, size, width):
        hi = min(size, lo + width)
        block = buf[:, : hi - lo]
        np.subtract(P[:, lo:hi], start[lo:hi], out=block[:k])
        np.subtract(current[lo:hi], start[lo:hi], out=block[k])
        gram += block @ block.T
    return gram


def _combine(weights, P, a: float, x: np.ndarray, b: float, y: np.ndarray) -> np.ndarray:
    """``weights @ P + a x + b y`` in one pass (block by block, the result written once)."""
    out = np.empty(x.size, dtype=np.result_type(P, x, np.float64))
    width = tuning.GRAM_BLOCK_ENTRIES
    for lo in range(0, x.size, width):
        hi = min(x.size, lo + width)
        block = out[lo:hi]
        np.matmul(weights, P[:, lo:hi], out=block)
        block += a * x[lo:hi]
        block += b * y[lo:hi]
    return out
