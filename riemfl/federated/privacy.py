r"""Client-level differential privacy for sum-only rules: clipping and the Gaussian mechanism.

DP-FedAvg (McMahan et al. 2018, Alg. 1) on riemfl's rules: each client's *update* is clipped to
norm C before it leaves the client, and Gaussian noise of standard deviation :math:`\sigma C`
is added once to the sum of the clipped updates (``mode="central"``: by the server or the
aggregator, after a secure sum) or by every client to its own clipped update
(``mode="local"``). The server rule then reads only the noisy sum
(:meth:`~riemfl.federated.algorithm.SyncAlgorithm.server_step_from_sum`): everything after the
noise is post-processing.

What the update is (each rule says, :attr:`SyncAlgorithm.privacy_space`, :meth:`update_of`,
:meth:`upload_of`):

* tangent-space rules (RFedAvg, RFedProx, RFedSVRG with ``upload="tangent"``): the upload
  :math:`u_i = R^{-1}_{x^r}(x_{i,\tau})` itself (RFedSVRG's anchor phase: the gradient
  :math:`\operatorname{grad} f_i(x^r)`), a tangent vector at the broadcast point :math:`x^r`.
  It is clipped in :math:`\max(\|u\|_{x^r}, \|u\|_F)`, the manifold's metric norm and the
  ambient (Frobenius) norm, which coincide for a Riemannian submanifold with the embedded
  metric; the ambient noise :math:`\xi \sim N(0, \sigma^2C^2 I)` added to the sum is projected
  onto :math:`T_{x^r}M` by the server (``to_tangent``) before its tangent-space mean;
* RFedProj: :math:`\hat z_{i,\tau} - P_M(x^r)`, clipped in the Frobenius norm; the client
  uploads :math:`P_M(x^r) + \mathrm{clip}(\hat z_{i,\tau} - P_M(x^r))`;
* FedBuff (:class:`~riemfl.federated.async_rules.FedBuff`, ``privacy=``): :math:`\Delta_i`,
  ambient, clipped in the Frobenius norm, noise added to each buffer's sum
  (:mod:`riemfl.federated.privacy_buffer`).

Why the projected noise is private (``docs/federated/privacy.md``): the clipped updates are
vectors of the ambient space of Frobenius norm at most C, so their sum is a function of
:math:`\ell_2` sensitivity 2C (replace one client) and the sum plus :math:`\xi` is the Gaussian
mechanism (Dwork & Roth 2014, Thm. A.1; its Rényi DP: Mironov 2017); projecting it onto
:math:`T_{x^r}M` (a fixed linear map: :math:`x^r` is public) and the server step are
post-processing (Dwork & Roth 2014, Prop. 2.1). The projection leaves the sum unchanged (each
update is tangent) and turns :math:`\xi` into :math:`N(0, \sigma^2C^2 P_{T_{x^r}M})`, the
isotropic Gaussian of the tangent space in the embedded metric. Clipping the metric norm alone
would not bound the ambient sensitivity under another metric (e.g. SPD's affine-invariant one),
hence the maximum.

Accounting: :mod:`riemfl.federated.privacy_accounting`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from ..backend import ops_for, to_like, to_numpy
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..problems.base import FederatedProblem
from .aggregation import Aggregator, PlainSum, check_aggregator
from .algorithm import ClientContext, State, SyncAlgorithm
from .privacy_accounting import REPLACE_ONE, ClientLevelAccountant
from .run_core import Stateful
from .seeds import SeedStreams

__all__ = [
    "DPSettings",
    "PrivateAlgorithm",
    "GaussianSum",
    "summarise_privacy",
    "privatize",
    "noise_streams",
    "client_noise",
    "RowNoise",
    "update_norms",
    "clip_rows",
    "gaussian",
    "MODES",
]

#: where the noise is added
MODES = ("central", "local")


@dataclass(frozen=True)
class DPSettings:
    r"""Client-level DP settings (McMahan et al. 2018, Alg. 1: S = clip, z = noise multiplier).

    Attributes
    ----------
    clip : float
        C > 0, the bound on the norm of each client's update (``math.inf``: no clipping, only
        with ``noise_multiplier=0``).
    noise_multiplier : float
        :math:`\sigma \ge 0`: the noise has standard deviation :math:`\sigma C` (0: no noise;
        :math:`\varepsilon = \infty`).
    delta : float
        The :math:`\delta` at which :math:`\varepsilon` is reported, in (0, 1).
    mode : {"central", "local"}
        Noise added once to the sum, or by every client to its own update.
    """

    clip: float
    noise_multiplier: float
    delta: float = 1e-5
    mode: str = "central"

    def __post_init__(self) -> None:
        c, s, d = float(self.clip), float(self.noise_multiplier), float(self.delta)
        if not c > 0 or math.isnan(c):
            raise ParameterError(f"clip must be a number > 0 (math.inf allowed), got {self.clip!r}")
        if not (math.isfinite(s) and s >= 0):
            raise ParameterError(
                f"noise_multiplier must be a finite number >= 0, got {self.noise_multiplier!r}"
            )
        if math.isinf(c) and s > 0:
            raise ParameterError(
                "clip=inf with noise_multiplier > 0 would add infinite noise; "
                "give a finite clip, or noise_multiplier=0"
            )
        if not 0 < d < 1:
            raise ParameterError(f"delta must be in (0, 1), got {self.delta!r}")
        if self.mode not in MODES:
            raise ParameterError(f"mode must be one of {list(MODES)}, got {self.mode!r}")
        object.__setattr__(self, "clip", c)
        object.__setattr__(self, "noise_multiplier", s)
        object.__setattr__(self, "delta", d)

    @property
    def std(self) -> float:
        r"""The noise's standard deviation :math:`\sigma C` (per client in local mode)."""
        return self.noise_multiplier * self.clip if self.noise_multiplier else 0.0

    def describe(self) -> dict[str, Any]:
        return {**asdict(self), "neighbouring": REPLACE_ONE}


def summarise_privacy(history: Any, delta: float | None) -> None:
    r"""Put a private run's final guarantee in ``history.summary``: ``epsilon`` (the last
    recorded row's) at ``dp_delta`` = :math:`\delta`. Nothing for a run without differential
    privacy (``delta`` None)."""
    if delta is not None:
        history.summary.update(epsilon=history.metrics["epsilon"][-1], dp_delta=delta)


def noise_streams(seed: int) -> tuple[np.random.SeedSequence, np.random.SeedSequence]:
    """The seeds of the central (aggregator) and local (client) noise of run ``seed``: its
    ``central_noise`` and ``local_noise`` streams (:class:`~riemfl.federated.seeds.SeedStreams`)."""
    streams = SeedStreams(seed)
    return streams.sequence("central_noise"), streams.sequence("local_noise")


# ------------------------------------------------------------------------------- array helpers
def _sq(a: Any) -> Any:
    """Per-row sum of squares over the point axes of a stack."""
    return ops_for(a).sum(a * a, axis=tuple(range(1, a.ndim)))


def update_norms(manifold: Manifold | None, base: Any, updates: State) -> Any:
    r"""The clipping norm of each row of the stacked ``updates`` (joint over their keys).

    ``base is None`` (ambient updates): the Frobenius norm. Otherwise (tangent vectors at the
    point ``base``): :math:`\max(\|u\|_{x}, \|u\|_F)` (module docstring).
    """
    total = None
    for u in updates.values():
        sq = _sq(u)
        if base is not None:
            anchors = ops_for(base, u).broadcast_to(base, u.shape)
            metric = manifold.norm(anchors, u)
            sq = ops_for(sq).maximum(sq, metric * metric)
        total = sq if total is None else total + sq
    return ops_for(total).sqrt(total)


def clip_rows(updates: State, norms: Any, clip: float) -> tuple[State, np.ndarray]:
    r"""Rows scaled by :math:`\min(1, C/\|u_i\|)`, and the mask of the rows that were scaled
    (the others are returned bit for bit)."""
    n = to_numpy(norms).astype(float)
    mask = n > clip
    if not mask.any():
        return dict(updates), mask
    factor = np.where(mask, clip / np.where(mask, n, 1.0), 1.0)
    out = {}
    for k, u in updates.items():
        out[k] = u * to_like(factor.reshape((-1,) + (1,) * (u.ndim - 1)), u)
    return out, mask


def gaussian(rng: np.random.Generator, like: Any, std: float) -> Any:
    """An array of N(0, std^2) entries of the shape, type, dtype and device of ``like``."""
    return to_like(std * rng.standard_normal(tuple(like.shape)), like)


def _rows_where(mask: np.ndarray, new: Any, old: Any) -> Any:
    """Rows of ``new`` where ``mask``, else of ``old`` (exactly)."""
    if mask.all():
        return new
    ops = ops_for(new, old)
    m = to_like(mask.reshape((-1,) + (1,) * (new.ndim - 1)), new) > 0
    return ops.where(m, new, old)


# ------------------------------------------------------------------------------- the wrapper
class PrivateAlgorithm(SyncAlgorithm):
    """A sum-only synchronous rule whose clients clip (and in local mode noise) their updates.

    The server side is the wrapped rule's, on the sum an aggregator returns (with central noise:
    :class:`GaussianSum`); for tangent-space rules the sum is first projected onto
    :math:`T_{x^r}M` (module docstring). Use :func:`privatize` to build both.

    Parameters
    ----------
    algorithm : SyncAlgorithm
        A rule that declares its update (:attr:`~SyncAlgorithm.privacy_space`) and whose every
        phase is sum-only.
    settings : DPSettings
    local_noise : numpy.random.SeedSequence or int, optional
        Seed of the clients' noise (``mode="local"``; :func:`noise_streams`).

    Raises
    ------
    ParameterError
        For a rule without a declared update or with a phase that needs each upload (RFedAvg,
        RFedProx, RFedSVRG: ``upload="tangent"`` makes every phase sum-only).
    """

    def __init__(
        self,
        algorithm: SyncAlgorithm,
        settings: DPSettings,
        local_noise: np.random.SeedSequence | int | None = None,
    ) -> None:
        if isinstance(algorithm, PrivateAlgorithm):
            raise ParameterError(f"{algorithm.name} is already private")
        if algorithm.privacy_space not in ("tangent", "ambient"):
            raise ParameterError(
                f"{algorithm.name}: differential privacy needs a rule that declares its client "
                "update (privacy_space 'tangent' or 'ambient'); expected rfedproj, or rfedavg, "
                "rfedprox, rfedsvrg with upload='tangent'"
            )
        for phase in range(algorithm.n_phases):
            if not algorithm.sum_only(phase):
                hint = algorithm.sum_only_hint()
                fix = f"; {hint}" if hint else ""
                raise ParameterError(
                    f"{algorithm.name}: differential privacy adds noise to the sum of the "
                    f"uploads, but phase {phase} of its server step needs each upload{fix}"
                )
        self.algorithm, self.settings = algorithm, settings
        self.name = algorithm.name
        self.n_phases, self.local_steps = algorithm.n_phases, algorithm.local_steps
        self.space = algorithm.privacy_space
        self.rng = np.random.default_rng(local_noise)

    # ------------------------------------------------------------------ delegated
    def validate(self, problem: FederatedProblem) -> None:
        self.algorithm.validate(problem)

    def init(self, problem: FederatedProblem, x0: Any) -> tuple[State, State]:
        return self.algorithm.init(problem, x0)

    def broadcast(self, server: State, phase: int) -> State:
        return self.algorithm.broadcast(server, phase)

    def client_finish(self, message: State, clients: State) -> State:
        return self.algorithm.client_finish(message, clients)

    def output(self, server: State) -> Any:
        return self.algorithm.output(server)

    def upload_shapes(self, problem: FederatedProblem, phase: int) -> dict[str, tuple[int, ...]]:
        return self.algorithm.upload_shapes(problem, phase)

    def sum_only(self, phase: int) -> bool:
        return True

    def update_of(self, message: State, uploads: State, phase: int) -> State:
        return self.algorithm.update_of(message, uploads, phase)

    def upload_of(self, message: State, updates: State, phase: int) -> State:
        return self.algorithm.upload_of(message, updates, phase)

    @property
    def privacy_space(self) -> str | None:  # type: ignore[override]
        """The wrapped rule's: what a compressor of the clipped updates compresses
        (:class:`~riemfl.federated.compressed.Compressed`)."""
        return self.space

    def describe(self) -> dict[str, Any]:
        return {**self.algorithm.describe(), "privacy": self.settings.describe()}

    # ------------------------------------------------------------------ clients
    def client_step(
        self, ctx: ClientContext, phase: int, message: State, clients: State
    ) -> tuple[State, State]:
        """The rule's client step, then its update clipped (and noised, ``mode="local"``)."""
        uploads, rows = self.algorithm.client_step(ctx, phase, message, clients)
        return self.privatize_uploads(ctx.manifold, phase, message, uploads), rows

    def privatize_uploads(
        self, manifold: Manifold, phase: int, message: State, uploads: State
    ) -> State:
        """What the clients send: their uploads with the update clipped (and noised).

        A client whose update is within C and adds no noise sends its upload unchanged, bit
        for bit (so ``clip=inf, noise_multiplier=0`` is the non-private run)."""
        rule, s = self.algorithm, self.settings
        updates = rule.update_of(message, uploads, phase)
        base = message["x"] if self.space == "tangent" else None
        clipped, mask = clip_rows(updates, update_norms(manifold, base, updates), s.clip)
        if s.mode == "local" and s.std > 0:
            clipped = {k: v + gaussian(self.rng, v, s.std) for k, v in clipped.items()}
            mask = np.ones(len(mask), dtype=bool)
        if not mask.any():
            return uploads
        new = rule.upload_of(message, clipped, phase)
        return {k: _rows_where(mask, new[k], uploads[k]) for k in uploads}

    # ------------------------------------------------------------------ server
    def server_step_from_sum(
        self,
        manifold: Manifold,
        server: State,
        phase: int,
        message: State,
        total: State,
        count: int,
    ) -> State:
        """The rule's server step on the (noisy) sum; tangent rules project it onto
        :math:`T_{x^r}M` first when noise was added (post-processing)."""
        if self.space == "tangent" and self.settings.std > 0:
            x = message["x"]
            total = {k: manifold.to_tangent(x, v) for k, v in total.items()}
        return self.algorithm.server_step_from_sum(manifold, server, phase, message, total, count)

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"local_noise": self.rng.bit_generator.state}
        if isinstance(self.algorithm, Stateful):
            state["rule"] = self.algorithm.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["local_noise"]
        if isinstance(self.algorithm, Stateful):
            self.algorithm.load_state_dict(state["rule"])


# ------------------------------------------------------------------------------- the aggregator
class GaussianSum(Aggregator):
    r"""An aggregator that adds :math:`N(0, \sigma^2C^2)` to every entry of the sum (central
    mode) and accounts every release; ``row()`` gives the ``epsilon`` column.

    Parameters
    ----------
    settings : DPSettings
    population : int
        n, the number of clients.
    sample_size : int
        m, the clients sampled per round (uniformly without replacement; n: all).
    central_noise : numpy.random.SeedSequence or int, optional
        Seed of the noise (:func:`noise_streams`).
    inner : Aggregator, optional
        What computes the sum (default :class:`~riemfl.federated.aggregation.PlainSum`; e.g. a
        secure aggregation): the noise is added to its result.
    """

    def __init__(
        self,
        settings: DPSettings,
        population: int,
        sample_size: int,
        central_noise: np.random.SeedSequence | int | None = None,
        inner: Aggregator | None = None,
    ) -> None:
        self.settings = settings
        self.inner = PlainSum() if inner is None else check_aggregator(inner)
        if not self.inner.sums:
            raise ParameterError(
                f"GaussianSum: its inner aggregator {type(self.inner).__name__} does not return "
                "the sum of the uploads, so the noise would not match the accounting (a sum of "
                "clipped updates); expected an aggregator that sums (PlainSum, secure sums)"
            )
        self.rng = np.random.default_rng(central_noise)
        self.sampled = settings.mode == "central" and sample_size < population
        self.accountant = ClientLevelAccountant(
            settings.noise_multiplier, settings.delta, population, sample_size
        )

    def aggregate(self, uploads: State, phase: int) -> tuple[State, int]:
        return self._release(*self.inner.aggregate(uploads, phase))

    def from_total(self, total: State, count: int, phase: int) -> tuple[State, int]:
        """The same release on a sum computed elsewhere (secure aggregation: the server never
        sees the uploads; the noise and the accounting are those of :meth:`aggregate`)."""
        if not self.inner.takes_totals:
            raise ParameterError(
                f"GaussianSum: its inner aggregator {type(self.inner).__name__} needs each "
                "upload, but the executor returned only their sum"
            )
        return self._release(*self.inner.from_total(total, count, phase))

    def _release(self, total: State, count: int) -> tuple[State, int]:
        """The sum with the central noise; one release accounted."""
        s = self.settings
        if s.mode == "central" and s.std > 0:
            total = {k: v + gaussian(self.rng, v, s.std) for k, v in total.items()}
        if self.sampled:
            self.accountant.sampled()
        else:  # every client, or local noise (no amplification: a client knows it took part)
            self.accountant.unsampled(2.0)
        return total, count

    @property
    def takes_totals(self) -> bool:  # type: ignore[override]
        """The noise can be added to a sum computed elsewhere when the inner aggregator's can."""
        return self.inner.takes_totals

    def row(self) -> dict[str, Any]:
        return {"epsilon": self.accountant.epsilon()}

    def state_dict(self) -> dict[str, Any]:
        state = {"noise": self.rng.bit_generator.state, "accountant": self.accountant.state_dict()}
        if isinstance(self.inner, Stateful):
            state["inner"] = self.inner.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["noise"]
        self.accountant.load_state_dict(state["accountant"])
        if isinstance(self.inner, Stateful):
            self.inner.load_state_dict(state["inner"])


def client_noise(seed: int, clients: Any, r: int, phase: int) -> RowNoise:
    r"""The local noise of ``clients`` in ``phase`` of round ``r`` of run ``seed``, drawn
    where each client runs (a Flower node): client :math:`i`'s generator is child
    :math:`(i, r, p)` of the local stream of :func:`noise_streams` (``spawn_key`` extended by
    client, round and phase), so a client's noise does not depend on which node hosts it or on
    the other clients of its stack. (The in-process run draws the stack's noise from the one
    local stream: another sample of the same distribution.)"""
    local = noise_streams(seed)[1]
    return RowNoise(
        [
            np.random.default_rng(
                np.random.SeedSequence(
                    local.entropy, spawn_key=(*local.spawn_key, int(c), int(r), int(phase))
                )
            )
            for c in clients
        ]
    )


class RowNoise:
    """A stand-in for a :class:`numpy.random.Generator` whose ``standard_normal`` of a stack
    draws row ``j`` from ``generators[j]`` (one generator per client)."""

    def __init__(self, generators: list[np.random.Generator]) -> None:
        self.generators = generators

    def standard_normal(self, shape: tuple[int, ...]) -> np.ndarray:
        if shape[0] != len(self.generators):
            raise ParameterError(
                f"a stack of {shape[0]} rows needs as many generators, got {len(self.generators)}"
            )
        rows = [g.standard_normal(tuple(shape[1:])) for g in self.generators]
        return np.stack(rows) if rows else np.zeros(shape)


def privatize(
    algorithm: SyncAlgorithm,
    settings: DPSettings,
    *,
    population: int,
    sample_size: int | None,
    seed: int,
    aggregator: Aggregator | None = None,
) -> tuple[PrivateAlgorithm, GaussianSum]:
    """The private rule and its aggregator for a run of seed ``seed`` (what
    :func:`~riemfl.federated.run_sync` does with ``privacy=``).

    ``sample_size`` None means every client takes part; ``aggregator`` computes the sum before
    the noise. A :class:`~riemfl.federated.compressed.Compressed` rule becomes the same
    compression around the private rule: the clients clip (and noise) their update, then
    compress it; the server decodes and, with central noise, clips each decoded update to C
    again, so that each contribution to the noisy sum stays within C and the accounting holds.
    """
    from .compressed import Compressed  # (it clips with this module's functions)

    central, local = noise_streams(seed)
    m = population if sample_size is None else int(sample_size)
    if isinstance(algorithm, Compressed):  # clip (and noise), then compress
        rule = algorithm.around(PrivateAlgorithm(algorithm.algorithm, settings, local))
    else:
        rule = PrivateAlgorithm(algorithm, settings, local)
    return rule, GaussianSum(settings, population, m, central, aggregator)
