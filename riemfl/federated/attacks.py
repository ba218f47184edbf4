r"""Byzantine clients for experiments with the synchronous engine.

A fraction of the clients, chosen once per run (:class:`Byzantine`), replace the upload of the
model phase of every round they take part in by a forged one. The forging works on the rule's
*client updates* (:meth:`~riemfl.federated.SyncAlgorithm.update_of`, as differential privacy
clips them): tangent vectors at the broadcast point :math:`x^r` (RFedAvg, RFedProx, RFedSVRG;
``privacy_space="tangent"``) or ambient steps :math:`\hat z_{i,\tau} - P_M(x^r)` (RFedProj;
``"ambient"``); :meth:`~riemfl.federated.SyncAlgorithm.upload_of` turns the forged updates back
into uploads. With :math:`u_a` the attackers' own honest updates and :math:`u_h` those of the
other participants of the round:

* ``"sign-flip"`` (:class:`SignFlip`): :math:`c\,u_a`, :math:`c < 0` (default -1);
* ``"scale"`` (:class:`Scale`): :math:`c\,u_a` (default 10);
* ``"random-point"`` (:class:`RandomPoint`): the update that carries a random point
  :math:`q \sim` ``manifold.random_point``: :math:`\mathrm{Log}_{x^r}(q)` in the tangent space
  (:math:`P_{T_{x^r}M}(q - x^r)` on a manifold without a logarithm), :math:`q - a` in the
  ambient space, :math:`a` the point the ambient step starts from;
* ``"alie"`` (:class:`ALittleIsEnough`, Baruch, Baruch & Goldberg 2019): coordinate-wise
  :math:`\mu_h - z\,\sigma_h`, the same for every attacker;
* ``"ipm"`` (:class:`InnerProductManipulation`, Xie, Koyejo & Gupta 2020):
  :math:`-\epsilon\,\mu_h`, the same for every attacker.

In the tangent space every forged update is projected onto :math:`T_{x^r}M`
(``manifold.to_tangent``) before it becomes an upload, so each one is a valid tangent vector and
the uploads pass every check a well-formed upload passes (:mod:`riemfl.federated.faults`): the
attackers are not dropped, they are averaged in. ``docs/federated/attacks.md`` has the details.
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from .._validation import real
from ..backend import ops_for
from ..errors import ConvergenceError, CutLocusError, ParameterError
from ..manifolds.base import Manifold
from .algorithm import SyncAlgorithm
from .rounds import take_rows
from .seeds import SeedStreams
from .serialise import describe_parameters

Array = Any
State = dict[str, Any]

__all__ = [
    "Attack",
    "SignFlip",
    "Scale",
    "RandomPoint",
    "ALittleIsEnough",
    "InnerProductManipulation",
    "Byzantine",
    "Attackers",
    "alie_z",
    "make_attack",
    "ATTACK_NAMES",
    "SPACES",
]

#: where the updates of an attack live (a rule's ``privacy_space``)
SPACES = ("tangent", "ambient")


# ------------------------------------------------------------------------------- the attacks
class Attack(abc.ABC):
    """How the attackers of a round forge their updates.

    A subclass sets :attr:`name` and implements :meth:`propose`; :meth:`forge` projects what it
    proposes onto the tangent space.
    """

    name: str = "attack"

    @abc.abstractmethod
    def propose(
        self,
        manifold: Manifold,
        anchor: Array,
        own: Array,
        honest: Array,
        rng: np.random.Generator,
        space: str,
    ) -> Array:
        """The forged updates before :meth:`forge` projects them (parameters as there)."""

    def forge(
        self,
        manifold: Manifold,
        anchor: Array,
        own: Array,
        honest: Array,
        rng: np.random.Generator,
        space: str,
    ) -> Array:
        """The attackers' forged updates, one row per attacker.

        Parameters
        ----------
        manifold : Manifold
        anchor : array
            One point: the broadcast :math:`x^r` (``space="tangent"``: the updates are tangent
            vectors there) or the point the ambient steps start from (``"ambient"``).
        own : array of shape (k, *shape)
            The attackers' own honest updates.
        honest : array of shape (h, *shape)
            The updates of the round's other participants; ``h`` may be 0, and the attacks
            that need statistics of honest updates then use ``own``.
        rng : numpy.random.Generator
            The run's attack stream (:class:`Byzantine`).
        space : {"tangent", "ambient"}

        Returns
        -------
        array of the shape, type and dtype of ``own``
            In the tangent space projected with ``manifold.to_tangent(anchor, .)``: the
            statistics of ALIE (a coordinate-wise standard deviation) leave the tangent space,
            and a scaled tangent vector carries its rounding error scaled; the projection makes
            every forged update tangent to working precision, which a retraction of it and the
            tangent checks of a remote server rely on. For an update that is tangent already it
            changes only rounding (on Euclidean space nothing: ``to_tangent`` is the identity).
        """
        if space not in SPACES:
            raise ParameterError(f"{self.name}: space must be one of {list(SPACES)}, got {space!r}")
        v = self.propose(manifold, anchor, own, honest, rng, space)
        if space == "tangent":
            v = manifold.to_tangent(ops_for(anchor, v).broadcast_to(anchor, v.shape), v)
        return v

    def describe(self) -> dict[str, Any]:
        """JSON-ready: ``name`` and the parameters."""
        return describe_parameters(self)

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.describe().items() if k != "name")
        return f"{type(self).__name__}({params})"


def _reference(own: Array, honest: Array) -> Array:
    """The updates whose statistics an attack uses: the honest ones, or ``own`` without any."""
    return honest if honest.shape[0] > 0 else own


def _mean_std(rows: Array) -> tuple[Array, Array]:
    """Coordinate-wise mean and (population) standard deviation over the first axis."""
    ops = ops_for(rows)
    m = rows.shape[0]
    mean = ops.sum(rows, axis=0) / m
    centred = rows - mean
    return mean, ops.sqrt(ops.sum(centred * centred, axis=0) / m)


def _each(vector: Array, own: Array) -> Array:
    """``vector`` as every attacker's row."""
    return ops_for(vector, own).broadcast_to(vector, own.shape)


class Scale(Attack):
    """``factor * own``: each attacker sends its update scaled."""

    name = "scale"

    def __init__(self, factor: float = 10.0) -> None:
        self.factor = real(factor, f"{type(self).__name__}: factor")

    def propose(
        self,
        manifold: Manifold,
        anchor: Array,
        own: Array,
        honest: Array,
        rng: np.random.Generator,
        space: str,
    ) -> Array:
        return self.factor * own


class SignFlip(Scale):
    """``factor * own`` with ``factor < 0``: each attacker sends its update reversed."""

    name = "sign-flip"

    def __init__(self, factor: float = -1.0) -> None:
        self.factor = real(factor, "SignFlip: factor", below=0)


class RandomPoint(Attack):
    r"""Each attacker sends the update that carries a point ``manifold.random_point(rng)``.

    In the tangent space that is :math:`\mathrm{Log}_{x^r}(q)` where the manifold's logarithm
    reaches q, else :math:`P_{T_{x^r}M}(q - x^r)`: on a manifold without a logarithm, and for an
    attacker whose q is beyond the logarithm's reach (a cut point, or Stiefel's solver, which
    converges below a distance of about pi/2).
    """

    name = "random-point"

    def propose(
        self,
        manifold: Manifold,
        anchor: Array,
        own: Array,
        honest: Array,
        rng: np.random.Generator,
        space: str,
    ) -> Array:
        q = manifold.random_point(own.shape[0], rng=rng, like=anchor)
        anchors = ops_for(anchor, q).broadcast_to(anchor, q.shape)
        if space != "tangent" or not manifold.supports("log")[0]:
            return q - anchors  # in the tangent space, projected by forge
        try:
            return manifold.log(anchors, q)
        except (ConvergenceError, CutLocusError):  # some q out of reach: row by row
            return ops_for(q).concatenate([_log_or_chord(manifold, anchor, p) for p in q])


def _log_or_chord(manifold: Manifold, x: Array, q: Array) -> Array:
    r""":math:`\mathrm{Log}_x(q)`, or the chord :math:`q - x` where the logarithm fails; as a
    stack of one row."""
    try:
        return manifold.log(x, q)[None]
    except (ConvergenceError, CutLocusError):
        return (q - x)[None]


def alie_z(n: int, f: int) -> float:
    r""":math:`z_{max}` of Baruch, Baruch & Goldberg 2019 for n participants, f of them attackers.

    :math:`s = \lfloor n/2 + 1\rfloor - f` (the honest supporters the attackers need, at least
    1: with a majority of attackers the formula's :math:`z` is infinite) and
    :math:`z = \Phi^{-1}((n - s)/n)`. A lone participant (n = 1) has no one to hide among:
    :math:`z = 0`.
    """
    if n <= 1:
        return 0.0
    s = max(math.floor(n / 2 + 1) - f, 1)
    return NormalDist().inv_cdf((n - s) / n)


class ALittleIsEnough(Attack):
    r"""Coordinate-wise :math:`\mu - z\sigma` of the honest updates (Baruch, Baruch & Goldberg
    2019), every attacker the same.

    Parameters
    ----------
    z : float, optional
        Default: :func:`alie_z` of the round's participants (honest and attacking) and
        attackers.
    """

    name = "alie"

    def __init__(self, z: float | None = None) -> None:
        self.z = None if z is None else real(z, "ALittleIsEnough: z")

    def propose(
        self,
        manifold: Manifold,
        anchor: Array,
        own: Array,
        honest: Array,
        rng: np.random.Generator,
        space: str,
    ) -> Array:
        k, h = own.shape[0], honest.shape[0]
        z = alie_z(k + h, k) if self.z is None else self.z
        mean, std = _mean_std(_reference(own, honest))
        return _each(mean - z * std, own)


class InnerProductManipulation(Attack):
    r""":math:`-\epsilon` times the mean of the honest updates (Xie, Koyejo & Gupta 2020),
    every attacker the same."""

    name = "ipm"

    def __init__(self, epsilon: float = 100.0) -> None:
        self.epsilon = real(epsilon, "InnerProductManipulation: epsilon", above=0)

    def propose(
        self,
        manifold: Manifold,
        anchor: Array,
        own: Array,
        honest: Array,
        rng: np.random.Generator,
        space: str,
    ) -> Array:
        mean, _ = _mean_std(_reference(own, honest))
        return _each(-self.epsilon * mean, own)


_ATTACKS: dict[str, type[Attack]] = {
    a.name: a for a in (SignFlip, Scale, RandomPoint, ALittleIsEnough, InnerProductManipulation)
}
#: the names :func:`make_attack` builds
ATTACK_NAMES = tuple(_ATTACKS)


def make_attack(name: str, **parameters: Any) -> Attack:
    """The attack called ``name`` (:data:`ATTACK_NAMES`), with its parameters.

    Raises
    ------
    ParameterError
        For an unknown name.
    """
    if name not in _ATTACKS:
        raise ParameterError(f"unknown attack {name!r}; expected one of {list(ATTACK_NAMES)}")
    return _ATTACKS[name](**parameters)


# ------------------------------------------------------------------------------- the attackers
@dataclass(frozen=True)
class Byzantine:
    """Byzantine clients of a run: ``round(fraction * n_clients)`` of them, one attack.

    Parameters
    ----------
    fraction : float
        In [0, 1). The count is Python's ``round`` (half to even) of ``fraction * n_clients``.
    attack : str or Attack
        An :class:`Attack` or a name of :data:`ATTACK_NAMES` (default parameters).
    """

    fraction: float
    attack: str | Attack = "sign-flip"

    def __post_init__(self) -> None:
        fraction = real(self.fraction, "Byzantine: fraction", at_least=0, below=1)
        object.__setattr__(self, "fraction", fraction)
        attack = make_attack(self.attack) if isinstance(self.attack, str) else self.attack
        if not isinstance(attack, Attack):
            raise ParameterError(
                f"Byzantine: attack must be a name of {list(ATTACK_NAMES)} or an Attack, "
                f"got {type(self.attack).__name__}"
            )
        object.__setattr__(self, "attack", attack)

    def clients(self, n_clients: int, seed: int) -> np.ndarray:
        """The attacking clients of run ``seed``, sorted: drawn uniformly without replacement
        from the run's ``byzantine`` stream (:class:`~riemfl.federated.seeds.SeedStreams`)."""
        count = round(self.fraction * n_clients)
        rng = SeedStreams(seed).generator("byzantine")
        return np.sort(rng.choice(n_clients, size=count, replace=False)).astype(np.intp)

    def describe(self, n_clients: int, seed: int) -> dict[str, Any]:
        """JSON-ready: the fraction, the attack's :meth:`Attack.describe` and the clients."""
        attack: Attack = self.attack  # type: ignore[assignment]
        clients = [int(c) for c in self.clients(n_clients, seed)]
        return {"fraction": self.fraction, "attack": attack.describe(), "clients": clients}

    def attackers(self, rule: Any, n_clients: int, seed: int) -> Attackers:
        """What the rounds of run ``seed`` apply (:class:`Attackers`): the clients, the attack
        and its generator, child 0 of the ``byzantine`` stream.

        Raises
        ------
        ParameterError
            For a rule that does not declare its client update (``privacy_space`` None).
        """
        if not isinstance(rule, SyncAlgorithm):
            raise ParameterError(
                f"Byzantine attacks run on a synchronous rule (a SyncAlgorithm), got "
                f"{type(rule).__name__}"
            )
        space = rule.privacy_space
        if space not in SPACES:
            raise ParameterError(
                f"{rule.name}: Byzantine attacks forge the "
                "client update, which this rule does not declare (privacy_space 'tangent' or "
                "'ambient'); use rfedproj, rfedavg, rfedprox or rfedsvrg"
            )
        child = SeedStreams(seed).sequence("byzantine").spawn(1)[0]
        attack: Attack = self.attack  # type: ignore[assignment]
        rng = np.random.default_rng(child)
        return Attackers(attack, self.clients(n_clients, seed), rng, space, rule.model_phase)


class Attackers:
    """The attack of a run as the synchronous rounds apply it
    (:class:`~riemfl.federated.rounds.RoundSteps`' ``attack``).

    Parameters
    ----------
    attack : Attack
    clients : numpy.ndarray of int
        The attacking client ids.
    rng : numpy.random.Generator
        The attack's draws (checkpointed: :meth:`state_dict`).
    space : {"tangent", "ambient"}
        The rule's ``privacy_space``.
    phase : int
        The phase whose uploads are forged (the rule's ``model_phase``).
    """

    def __init__(
        self,
        attack: Attack,
        clients: np.ndarray,
        rng: np.random.Generator,
        space: str,
        phase: int = 0,
    ) -> None:
        self.attack, self.rng, self.space = attack, rng, space
        #: the phase whose uploads are forged: the rule's model phase
        self.phase = phase
        self.clients = np.asarray(clients, dtype=np.intp)
        #: the attacker uploads of the last model phase
        self.attacked = 0

    def apply(
        self,
        manifold: Manifold,
        rule: Any,
        message: State,
        phase: int,
        senders: Any,
        uploads: State,
    ) -> State:
        """The accepted ``uploads`` of ``phase`` (rows from the clients ``senders``, in order)
        with the attackers' rows forged; the other rows are returned bit for bit."""
        mask = np.isin(np.asarray(senders), self.clients)
        self.attacked = int(mask.sum())
        if not self.attacked:
            return uploads
        mine, others = np.flatnonzero(mask), np.flatnonzero(~mask)
        updates = rule.update_of(message, uploads, phase)
        anchors = self._anchors(rule, message, updates, phase)
        forged = {
            key: self.attack.forge(
                manifold,
                anchors[key],
                take_rows(u, mine),
                take_rows(u, others),
                self.rng,
                self.space,
            )
            for key, u in updates.items()
        }
        carried = rule.upload_of(message, forged, phase)
        return {
            k: _with_rows(v, mine, carried[k]) if k in carried else v for k, v in uploads.items()
        }

    def _anchors(self, rule: Any, message: State, updates: State, phase: int) -> State:
        """Per update key, the point its updates are relative to: the broadcast ``x`` in the
        tangent space; in the ambient space the upload that carries a zero update (RFedProj:
        :math:`P_M(x^r)`)."""
        if self.space == "tangent":
            return dict.fromkeys(updates, message["x"])
        zero = rule.upload_of(message, {k: 0 * u[:1] for k, u in updates.items()}, phase)
        missing = [k for k in updates if k not in zero]
        if missing:
            raise ParameterError(
                f"attack {self.attack.name}: the rule's upload_of gives no upload key for the "
                f"ambient update keys {missing}, so their starting point is unknown"
            )
        return {k: zero[k][0] for k in updates}

    def state_dict(self) -> dict[str, Any]:
        return {"rng": self.rng.bit_generator.state, "attacked": self.attacked}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.rng.bit_generator.state = state["rng"]
        self.attacked = int(state["attacked"])


def _with_rows(a: Array, rows: np.ndarray, values: Array) -> Array:
    """A copy of the stack ``a`` with ``a[rows] = values``."""
    if ops_for(a).is_torch:
        import torch

        out = a.clone()
        out[torch.as_tensor(rows, dtype=torch.long, device=a.device)] = values.to(a.dtype)
        return out
    out = np.array(a)
    out[rows] = values
    return out
