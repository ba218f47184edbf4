r"""Server optimisers of adaptive federated optimisation, on any manifold.

FedOpt (Reddi et al. 2021, Alg. 2) treats the mean client update of a round,
:math:`\Delta_t = \frac1m\sum_i \Delta^i_t` (the negative of a pseudo-gradient), as the gradient
step of a server optimiser. With :math:`m_{-1} = 0`, :math:`v_{-1} = \tau^2` (Alg. 2 asks for
:math:`v_{-1} \ge \tau^2`) and every operation elementwise:

.. math::

    m_t &= \beta_1 m_{t-1} + (1 - \beta_1)\Delta_t \\
    v_t &= v_{t-1} + \Delta_t^2 && \text{(FedAdagrad)}\\
    v_t &= v_{t-1} - (1 - \beta_2)\Delta_t^2 \operatorname{sign}(v_{t-1} - \Delta_t^2)
        && \text{(FedYogi; Zaheer et al. 2018)}\\
    v_t &= \beta_2 v_{t-1} + (1 - \beta_2)\Delta_t^2 && \text{(FedAdam; Kingma \& Ba 2015)}\\
    x_{t+1} &= x_t + \eta\, \frac{m_t}{\sqrt{v_t} + \tau},

and FedAvgM (Hsu et al. 2019) is SGD with heavy-ball momentum on the same update,
:math:`m_t = \beta m_{t-1} + \Delta_t`, :math:`x_{t+1} = x_t + \eta\, m_t`. No bias correction
is applied (Alg. 2 has none).

**On a manifold** (the tangent-space rules, whose update :math:`\Delta_t` is a tangent vector
at :math:`x_t`) the step is :math:`x_{t+1} = R_{x_t}(\eta\, m_t / (\sqrt{v_t} + \tau))`, as in
the Riemannian Adam of Bécigneul & Ganea 2019:

* :math:`m_t` lives in :math:`T_{x_t}M`; after the step it is carried to :math:`T_{x_{t+1}}M`
  by the wrapped rule's transport and projected onto that tangent space (the caller does this
  through :meth:`ServerOptimizer.transport`);
* :math:`v_t` accumulates the squared Riemannian norm :math:`\|\Delta_t\|^2_{x_t}`: **one
  number per factor** of the manifold (Bécigneul & Ganea 2019 treat :math:`\mathbb R^n` as the
  product of n lines, each with its own number), so it needs no transport and does not depend on
  the coordinates of an embedding. On a :class:`~riemfl.manifolds.Euclidean` factor it is kept
  elementwise, so on a Euclidean problem every optimiser here is Reddi et al.'s algorithm
  exactly; a :class:`~riemfl.manifolds.Product` gets one number per non-Euclidean factor and one
  per coordinate of each Euclidean factor (:func:`moment_shape`).

For an *ambient* update (RFedProj's :math:`\hat z_{i,\tau} - P_M(x^r)`) the caller passes
``Euclidean(*point_shape)``: everything is elementwise in the ambient space and the first moment
needs no transport.
"""

from __future__ import annotations

import abc
import math
from collections.abc import Callable, Sequence
from typing import Any

from .._validation import real
from ..backend import ops_for, to_numpy
from ..errors import ParameterError
from ..manifolds.base import Manifold
from ..manifolds.euclidean import Euclidean
from ..manifolds.product import Product
from .checkpoint import inconsistent, require, require_count, require_layout
from .serialise import describe_parameters

Array = Any

__all__ = [
    "ServerOptimizer",
    "ServerSGD",
    "ServerAdam",
    "ServerYogi",
    "ServerAdagrad",
    "SERVER_OPTIMIZER_NAMES",
    "build_server_optimizer",
    "moment_shape",
    "squared_norms",
    "divide_blocks",
]


# ------------------------------------------------------------------------ per-factor layout
def _blocks(manifold: Manifold) -> int:
    """How many numbers the second moment keeps for ``manifold`` (:func:`moment_shape`)."""
    if isinstance(manifold, Euclidean):
        return math.prod(manifold.point_shape)
    if isinstance(manifold, Product):
        return sum(_blocks(f) for f in manifold.manifolds)
    return 1


def moment_shape(manifold: Manifold) -> tuple[int, ...]:
    """The shape of the second moment of an optimiser on ``manifold``.

    ``Euclidean``: the point shape (elementwise); ``Product``: one flat vector, the factors'
    numbers in factor order (a Euclidean factor's coordinates, one number per other factor);
    any other manifold: ``()``, one number.
    """
    if isinstance(manifold, Euclidean):
        return tuple(manifold.point_shape)
    if isinstance(manifold, Product):
        return (_blocks(manifold),)
    return ()


def squared_norms(manifold: Manifold, x: Array, u: Array) -> Array:
    r"""The squared magnitudes of the tangent vector ``u`` at ``x`` that the second moment
    accumulates, laid out as :func:`moment_shape`: :math:`u \odot u` on ``Euclidean``,
    :math:`\langle u, u\rangle_x` on any other manifold, per factor on a ``Product``."""
    ops = ops_for(u)
    if isinstance(manifold, Euclidean):
        return u * u
    if isinstance(manifold, Product):
        parts = [
            ops.reshape(squared_norms(f, xi, ui), (_blocks(f),))
            for f, xi, ui in zip(
                manifold.manifolds, manifold.split(x), manifold.split(u), strict=True
            )
        ]
        return ops.concatenate(parts, axis=0)
    return ops.reshape(manifold.inner(x, u, u), ())


def divide_blocks(manifold: Manifold, u: Array, d: Array) -> Array:
    """``u`` divided by ``d`` (laid out as :func:`moment_shape`), each factor of ``u`` by its
    own numbers: elementwise on ``Euclidean``, a scalar division on any other manifold."""
    if not isinstance(manifold, Product):
        return u / d
    ops = ops_for(u, d)
    parts, lo = [], 0
    for f, ui in zip(manifold.manifolds, manifold.split(u), strict=True):
        n = _blocks(f)
        parts.append(divide_blocks(f, ui, ops.reshape(d[lo : lo + n], moment_shape(f))))
        lo += n
    return manifold.pack(*parts)


def _beta(value: Any, name: str) -> float:
    return real(value, name, at_least=0.0, below=1.0)


# ------------------------------------------------------------------------ the optimisers
class ServerOptimizer(abc.ABC):
    """A server optimiser: turns the mean client update of each round into the server's step.

    State: the first moment ``m`` (a tangent vector at the current model, or an ambient array),
    the step count ``t`` and, for the adaptive optimisers, the second moment ``v``
    (:func:`moment_shape`). :meth:`reset` allocates it; :meth:`state_dict` and
    :meth:`load_state_dict` save and restore it exactly (checkpoints).
    """

    name: str = "optimizer"

    def __init__(self, lr: float) -> None:
        self.lr = real(lr, f"{type(self).__name__}: lr", above=0.0)
        self._m: Array | None = None
        self._t = 0

    # ------------------------------------------------------------------ the step
    def reset(self, manifold: Manifold, x: Array) -> None:
        """Start afresh at the point ``x`` of ``manifold``: zero moments, ``t = 0``."""
        self._m = ops_for(x).zeros(tuple(x.shape), x)
        self._t = 0

    def step(self, manifold: Manifold, x: Array, delta: Array) -> Array:
        r"""The server's step from the mean update ``delta`` at ``x`` (the state advances).

        Parameters
        ----------
        manifold : Manifold
            Where ``delta`` lives: the problem's manifold (``delta`` tangent at ``x``) or
            ``Euclidean(*point_shape)`` for an ambient update.
        x : array
            The current model (the base point of ``delta`` and of ``m``).
        delta : array
            :math:`\Delta_t`, the mean client update.

        Returns
        -------
        array
            The step, e.g. :math:`\eta\, m_t / (\sqrt{v_t} + \tau)`, in the space of ``delta``.
        """
        if self._m is None:
            self.reset(manifold, x)
        self._t += 1
        return self._direction(manifold, x, delta)

    @abc.abstractmethod
    def _direction(self, manifold: Manifold, x: Array, delta: Array) -> Array: ...

    @property
    def keeps_momentum(self) -> bool:
        """Whether the next step reads the first moment (it must then be transported)."""
        return False

    def transport(self, carry: Callable[[Array], Array]) -> None:
        """Move the first moment to the new model: ``m <- carry(m)`` (``carry`` transports
        from the old tangent space to the new one and projects onto it). Nothing to do when
        the next step does not read it."""
        if self.keeps_momentum and self._m is not None:
            self._m = carry(self._m)

    @property
    def first_moment(self) -> Array | None:
        """``m``: a tangent vector at the current model (None before :meth:`reset`)."""
        return self._m

    @property
    def steps_taken(self) -> int:
        """``t``, the steps since :meth:`reset`."""
        return self._t

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        return {"t": self._t, "m": self._m}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict` (after :meth:`reset`, which gives the expected layout).

        Raises
        ------
        CheckpointError
            Other keys, shapes or dtypes than the fresh state's, a negative step count, or a
            second moment that is not finite and >= 0.
        """
        where = f"checkpoint: {self.name} optimiser state"
        t = require_count(f"{where}['t']", require(state, "t", int, where=where))
        fresh = self.state_dict()
        if fresh["m"] is not None:
            state = require_layout(state, fresh, where)
        elif set(state) != set(fresh):
            raise inconsistent(f"{where} keys", sorted(state), f"{sorted(fresh)}")
        v = state.get("v")
        if v is not None:
            values = to_numpy(v)
            if not (values.size == 0 or (values.min() >= 0 and math.isfinite(values.max()))):
                raise inconsistent(f"{where}['v']", values, "finite numbers >= 0")
        self._load(state)
        self._t = t

    def _load(self, state: dict[str, Any]) -> None:
        self._m = state["m"]

    def describe(self) -> dict[str, Any]:
        """JSON-ready settings (for histories and checkpoint compatibility checks)."""
        return describe_parameters(self)


class ServerSGD(ServerOptimizer):
    r"""SGD on the server; FedAvgM (Hsu et al. 2019) with ``momentum > 0``.

    :math:`m_t = \beta m_{t-1} + \Delta_t`, step :math:`\eta\, m_t` (Nesterov:
    :math:`\eta(\beta m_t + \Delta_t)`). ``ServerSGD(1.0)`` is the wrapped rule's own step.

    Parameters
    ----------
    lr : float
        :math:`\eta > 0`, the server learning rate.
    momentum : float
        :math:`\beta \in [0, 1)`.
    nesterov : bool
        Nesterov's look-ahead form of the momentum step.
    """

    name = "sgd"

    def __init__(self, lr: float, momentum: float = 0.0, nesterov: bool = False) -> None:
        super().__init__(lr)
        self.momentum = _beta(momentum, "ServerSGD: momentum")
        if not isinstance(nesterov, bool):
            raise ParameterError(f"ServerSGD: nesterov must be True or False, got {nesterov!r}")
        self.nesterov = nesterov

    @property
    def keeps_momentum(self) -> bool:
        return self.momentum > 0

    def _direction(self, manifold: Manifold, x: Array, delta: Array) -> Array:
        if not self.momentum:
            return self.lr * delta
        self._m = self.momentum * self._m + delta
        step = self.momentum * self._m + delta if self.nesterov else self._m
        return self.lr * step


class _Adaptive(ServerOptimizer):
    """The shared part of FedAdagrad, FedYogi and FedAdam (Reddi et al. 2021, Alg. 2); the
    subclasses hold :math:`\\beta_1, \\beta_2` under their public names."""

    def __init__(
        self, lr: float, b1: float, b2: float, eps: float, initial_accumulator: float | None
    ) -> None:
        super().__init__(lr)
        owner = type(self).__name__
        self.eps = real(eps, f"{owner}: eps (tau)", above=0.0)
        v0 = self.eps**2 if initial_accumulator is None else initial_accumulator
        self.initial_accumulator = real(v0, f"{owner}: initial_accumulator", at_least=0.0)
        self._b1, self._b2 = b1, b2
        self._v: Array | None = None

    @property
    def keeps_momentum(self) -> bool:
        return self._b1 > 0

    @property
    def second_moment(self) -> Array | None:
        """``v``, laid out as :func:`moment_shape` (None before :meth:`reset`)."""
        return self._v

    def reset(self, manifold: Manifold, x: Array) -> None:
        super().reset(manifold, x)
        ops = ops_for(x)
        self._v = ops.zeros(moment_shape(manifold), x) + self.initial_accumulator

    @abc.abstractmethod
    def _accumulate(self, v: Array, squares: Array) -> Array:
        """:math:`v_t` from :math:`v_{t-1}` and :math:`\\Delta_t^2`."""

    def _direction(self, manifold: Manifold, x: Array, delta: Array) -> Array:
        ops = ops_for(delta)
        self._m = self._b1 * self._m + (1.0 - self._b1) * delta
        squares = squared_norms(manifold, x, delta)
        self._v = ops.reshape(self._accumulate(self._v, squares), moment_shape(manifold))
        return self.lr * divide_blocks(manifold, self._m, ops.sqrt(self._v) + self.eps)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "v": self._v}

    def _load(self, state: dict[str, Any]) -> None:
        super()._load(state)
        self._v = state["v"]


def _betas(betas: Sequence[float], owner: str) -> tuple[float, float]:
    if isinstance(betas, str) or not isinstance(betas, Sequence) or len(betas) != 2:
        raise ParameterError(f"{owner}: betas must be a pair (beta1, beta2), got {betas!r}")
    first = _beta(betas[0], f"{owner}: betas[0] (beta1)")
    return first, _beta(betas[1], f"{owner}: betas[1] (beta2)")


class _TwoBetas(_Adaptive):
    """An adaptive optimiser with Reddi et al. 2021's pair ``betas = (beta1, beta2)``."""

    def __init__(
        self,
        lr: float,
        betas: Sequence[float] = (0.9, 0.99),
        eps: float = 1e-3,
        initial_accumulator: float | None = None,
    ) -> None:
        self.beta1, self.beta2 = _betas(betas, type(self).__name__)
        super().__init__(lr, self.beta1, self.beta2, eps, initial_accumulator)


class ServerAdam(_TwoBetas):
    r"""FedAdam (Reddi et al. 2021, Alg. 2): :math:`v_t = \beta_2 v_{t-1} + (1-\beta_2)
    \Delta_t^2`, step :math:`\eta\, m_t / (\sqrt{v_t} + \tau)`.

    Parameters
    ----------
    lr : float
        :math:`\eta > 0`.
    betas : (float, float)
        :math:`(\beta_1, \beta_2)`, each in [0, 1) (default: Reddi et al. 2021's values).
    eps : float
        :math:`\tau > 0`, the adaptivity (Reddi et al.'s default :math:`10^{-3}`).
    initial_accumulator : float, optional
        :math:`v_{-1} \ge 0` (default :math:`\tau^2`, the least Alg. 2 allows).
    """

    name = "adam"

    def _accumulate(self, v: Array, squares: Array) -> Array:
        return self._b2 * v + (1.0 - self._b2) * squares


class ServerYogi(_TwoBetas):
    r"""FedYogi (Reddi et al. 2021, Alg. 2; Zaheer et al. 2018): :math:`v_t = v_{t-1} -
    (1-\beta_2)\Delta_t^2\operatorname{sign}(v_{t-1} - \Delta_t^2)`; parameters as
    :class:`ServerAdam`'s."""

    name = "yogi"

    def _accumulate(self, v: Array, squares: Array) -> Array:
        gap = v - squares
        sign = (gap > 0) * 1.0 - (gap < 0) * 1.0
        return v - (1.0 - self._b2) * squares * sign


class ServerAdagrad(_Adaptive):
    r"""FedAdagrad (Reddi et al. 2021, Alg. 2): :math:`v_t = v_{t-1} + \Delta_t^2`, step
    :math:`\eta\, m_t / (\sqrt{v_t} + \tau)`.

    Parameters
    ----------
    lr : float
        :math:`\eta > 0`.
    eps : float
        :math:`\tau > 0` (default :math:`10^{-3}`).
    initial_accumulator : float, optional
        :math:`v_{-1} \ge 0` (default :math:`\tau^2`).
    momentum : float
        :math:`\beta_1 \in [0, 1)` of Alg. 2 (default 0: :math:`m_t = \Delta_t`, Adagrad
        without momentum).
    """

    name = "adagrad"

    def __init__(
        self,
        lr: float,
        eps: float = 1e-3,
        initial_accumulator: float | None = None,
        momentum: float = 0.0,
    ) -> None:
        self.momentum = _beta(momentum, "ServerAdagrad: momentum (beta1)")
        super().__init__(lr, self.momentum, 0.0, eps, initial_accumulator)

    def _accumulate(self, v: Array, squares: Array) -> Array:
        return v + squares


#: the names of :func:`build_server_optimizer` (``riemfl run --server-optimizer``)
SERVER_OPTIMIZER_NAMES = ("sgd", "momentum", "adam", "yogi", "adagrad")


def build_server_optimizer(
    name: str,
    lr: float = 1.0,
    *,
    momentum: float = 0.9,
    betas: Sequence[float] = (0.9, 0.99),
    eps: float = 1e-3,
) -> ServerOptimizer:
    """The server optimiser called ``name`` (one of :data:`SERVER_OPTIMIZER_NAMES`).

    ``"sgd"``: :class:`ServerSGD` without momentum (``lr=1`` is the wrapped rule's own step);
    ``"momentum"``: FedAvgM, :class:`ServerSGD` with ``momentum``; ``"adam"``, ``"yogi"``:
    :class:`ServerAdam`, :class:`ServerYogi` with ``betas`` and ``eps``; ``"adagrad"``:
    :class:`ServerAdagrad` with ``eps`` (and no momentum, as Reddi et al. 2021 use it).

    Raises
    ------
    ParameterError
        An unknown name, or a parameter the optimiser refuses.
    """
    if name == "sgd":
        return ServerSGD(lr)
    if name == "momentum":
        return ServerSGD(lr, momentum=momentum)
    if name == "adam":
        return ServerAdam(lr, betas=betas, eps=eps)
    if name == "yogi":
        return ServerYogi(lr, betas=betas, eps=eps)
    if name == "adagrad":
        return ServerAdagrad(lr, eps=eps)
    raise ParameterError(
        f"server optimiser must be one of {list(SERVER_OPTIMIZER_NAMES)}, got {name!r}"
    )
