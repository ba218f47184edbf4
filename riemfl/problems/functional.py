r"""A federated problem from per-client Python callables: the generic, non-vectorised path.

Give one loss :math:`f_i` per client (and optionally its Euclidean gradient); the gradient
comes from your callable (``differentiation="explicit"``), from ``autograd.grad``
(``differentiation="autograd"``,
losses written with ``autograd.numpy``) or from ``torch.autograd.grad``
(``differentiation="torch"``,
losses written with torch operations). The oracle loops over the listed clients in Python;
write a :class:`~riemfl.problems.FederatedProblem` subclass with stacked arrays when speed
matters (as :class:`~riemfl.problems.KPCAProblem` does).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..backend import is_torch
from ..errors import ParameterError, ShapeError
from ..extras import import_extra
from ..manifolds.base import Manifold
from .base import FederatedProblem
from .checks import batch_array, client_index

__all__ = ["FunctionProblem"]

#: where gradients come from: the user's ``egrads``, autograd or torch.autograd
DIFFERENTIATIONS = ("explicit", "autograd", "torch")


def _import(module: str, differentiation: str) -> Any:
    return import_extra(module, f"FunctionProblem(differentiation={differentiation!r})")


class FunctionProblem(FederatedProblem):
    r"""n client objectives given as Python callables.

    Parameters
    ----------
    manifold : Manifold
        The constraint set.
    losses : sequence of callables
        ``losses[i](x)`` returns :math:`f_i(x)` as a scalar. With ``n_samples`` given, every loss
        is called as ``losses[i](x, batch)``: ``batch`` is an int array of sample indices (return
        the batch mean :math:`\frac1b\sum_{l\in B} f_{il}(x)`, so that gradients are unbiased,
        eq. (9) of Zhang et al. 2024) or ``None`` (return the full :math:`f_i(x)`).
    egrads : sequence of callables, optional
        ``egrads[i](x[, batch])``: the Euclidean gradient :math:`\nabla f_i(x)`, same calling
        convention. Required for ``differentiation="explicit"``; with automatic differentiation,
        when given, it is used instead.
    differentiation : {"explicit", "autograd", "torch"}
        Where gradients come from: the given ``egrads`` (numpy), ``autograd.grad`` (losses
        written with ``autograd.numpy``) or ``torch.autograd.grad`` (losses written in torch).
    backend : {"numpy", "autograd", "torch"}, optional
        Deprecated name of ``differentiation`` (``"numpy"`` is ``"explicit"``); warns.
    n_samples : sequence of int, optional
        :math:`m_i` per client, enabling mini-batches (``batches`` in :meth:`client_egrads`).
    optimum, smoothness : float, optional
        f* and a gradient Lipschitz constant, when known.
    name : str
        Used in histories and messages.

    Notes
    -----
    Types: with explicit gradients or autograd the callables receive float64 numpy arrays and
    the oracle returns numpy. With ``differentiation="torch"`` the callables receive torch tensors
    (the point with ``requires_grad``), and the oracle returns **the type of** ``xs``: numpy in ->
    numpy out (the point is converted to a float64 CPU tensor), torch in -> a detached torch
    tensor of the input's dtype and device. :meth:`client_losses` always returns a float64
    numpy vector.
    """

    def __init__(
        self,
        manifold: Manifold,
        losses: Sequence[Callable[..., Any]],
        egrads: Sequence[Callable[..., Any]] | None = None,
        *,
        differentiation: str = "explicit",
        backend: str | None = None,
        n_samples: Sequence[int] | None = None,
        optimum: float | None = None,
        smoothness: float | None = None,
        name: str = "function-problem",
    ) -> None:
        if not isinstance(manifold, Manifold):
            raise ParameterError(
                "FunctionProblem: manifold must be a riemfl Manifold, got "
                f"{type(manifold).__name__}"
            )
        if backend is not None:
            warnings.warn(
                "FunctionProblem(backend=...) is deprecated: use differentiation= ('numpy' is "
                "now 'explicit')",
                DeprecationWarning,
                stacklevel=2,
            )
            differentiation = "explicit" if backend == "numpy" else backend
        if differentiation not in DIFFERENTIATIONS:
            raise ParameterError(
                f"FunctionProblem: differentiation must be one of {DIFFERENTIATIONS}, got "
                f"{differentiation!r}"
            )
        losses = list(losses)
        if not losses or not all(callable(f) for f in losses):
            raise ParameterError(
                "FunctionProblem: losses must be a non-empty sequence of callables"
            )
        if egrads is not None:
            egrads = list(egrads)
            if len(egrads) != len(losses) or not all(callable(g) for g in egrads):
                raise ParameterError(
                    f"FunctionProblem: egrads must be {len(losses)} callables (one per loss), "
                    f"got {len(egrads)}"
                )
        elif differentiation == "explicit":
            raise ParameterError(
                "FunctionProblem: differentiation='explicit' needs egrads; pass egrads=[...] or "
                "choose differentiation='autograd' or 'torch' for automatic differentiation"
            )
        if n_samples is not None:
            sizes = np.asarray(n_samples)
            if (
                sizes.shape != (len(losses),)
                or not np.issubdtype(sizes.dtype, np.integer)
                or (sizes < 1).any()
            ):
                raise ParameterError(
                    f"FunctionProblem: n_samples must be {len(losses)} ints >= 1, got {n_samples!r}"
                )
            self.n_samples = tuple(int(s) for s in sizes)
            self._sizes = sizes.astype(np.intp)
        self.manifold = manifold
        self.losses = losses
        self.egrads = egrads
        self.differentiation = differentiation
        self.n_clients = len(losses)
        self.optimum = None if optimum is None else float(optimum)
        self.smoothness = None if smoothness is None else float(smoothness)
        self.name = name
        self._ad = None
        if egrads is None and differentiation == "autograd":
            self._ad = _import("autograd", "autograd")
        elif differentiation == "torch":
            self._torch = _import("torch", "torch")

    # ------------------------------------------------------------------ helpers
    def _call(self, fn: Callable[..., Any], x: Any, batch: np.ndarray | None) -> Any:
        return fn(x) if self.n_samples is None else fn(x, batch)

    def _check_stack(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        _, ids = client_index(clients, self.n_clients, self.name)
        if tuple(xs.shape) != (ids.size, *self.manifold.point_shape):
            raise ShapeError(
                f"{self.name}: xs has shape {tuple(xs.shape)}; expected "
                f"{(ids.size, *self.manifold.point_shape)} (one point per listed client)"
            )
        return ids

    def _grad_one(self, i: int, x: Any, batch: np.ndarray | None) -> Any:
        if self.egrads is not None:
            return self._call(self.egrads[i], x, batch)
        if self.differentiation == "autograd":
            return self._ad.grad(lambda y: self._call(self.losses[i], y, batch))(x)
        torch = self._torch
        with torch.enable_grad():
            xt = x.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(self._call(self.losses[i], xt, batch), xt)
        return g

    # ------------------------------------------------------------------ oracle
    def client_egrads(
        self, clients: Sequence[int], xs: Any, batches: np.ndarray | None = None
    ) -> Any:
        r"""Stacked :math:`\nabla f_i(x_j)` (or mini-batch gradients), one client at a time."""
        ids = self._check_stack(clients, xs)
        if batches is not None:
            if self.n_samples is None:
                raise ParameterError(
                    f"{self.name}: mini-batches need n_samples (the problem was built without)"
                )
            batches = batch_array(batches, ids, self._sizes, self.name)
        torch_in = is_torch(xs)
        use_torch = self.differentiation == "torch"
        if use_torch and not torch_in:
            pts = self._torch.as_tensor(np.asarray(xs, dtype=np.float64))
        elif torch_in and not use_torch:
            raise ParameterError(
                f"{self.name}: differentiation={self.differentiation!r} evaluates numpy arrays; "
                "got a torch tensor (use differentiation='torch' for torch objectives)"
            )
        else:
            pts = xs if torch_in else np.asarray(xs, dtype=np.float64)
        grads = []
        for j, i in enumerate(ids):
            g = self._grad_one(int(i), pts[j], None if batches is None else batches[j])
            if tuple(g.shape) != self.manifold.point_shape:
                raise ShapeError(
                    f"{self.name}: client {int(i)}'s gradient has shape {tuple(g.shape)}; "
                    f"expected the point shape {self.manifold.point_shape}"
                )
            grads.append(g)
        if use_torch:
            out = self._torch.stack([self._torch.as_tensor(g) for g in grads]).detach()
            return out.to(dtype=xs.dtype, device=xs.device) if torch_in else out.cpu().numpy()
        return np.stack([np.asarray(g, dtype=np.float64) for g in grads])

    def client_losses(self, clients: Sequence[int], xs: Any) -> np.ndarray:
        """Full local losses :math:`f_i(x_j)`, one client at a time, as a float64 vector."""
        ids = self._check_stack(clients, xs)
        if self.differentiation == "torch" and not is_torch(xs):
            xs = self._torch.as_tensor(np.asarray(xs, dtype=np.float64))
        out = np.empty(ids.size)
        for j, i in enumerate(ids):
            val = self._call(self.losses[int(i)], xs[j], None)
            out[j] = float(val.detach()) if is_torch(val) else float(val)
        return out
