"""Conformance checks of the check levels (:mod:`riemfl.check_levels`) for one map.

* :func:`check_deferred_reads_nothing`: at the levels ``"deferred"`` and ``"off"`` the map reads
  no tensor value back to the host (counted by
  :class:`~riemfl.testing.host_reads.HostReadCounter`), gives eager mode's values, and valid
  arguments leave no violation at the boundary. A map the manifold lists in
  ``Manifold.deferred_reads`` must read (the entry says why it does; an entry that no longer
  reads is stale and fails).
* :func:`check_compiles_whole`: the map traces under ``torch.compile(fullgraph=True)`` (through
  AOTAutograd, so its backward pass traces too) at both levels, and the compiled values and
  gradients equal eager ones.

Both take numpy float64 arguments (the kit's ``method_args``) and run torch float64 on the CPU
(:func:`check_deferred_reads_nothing` on CUDA too, where a device exists).
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence

import numpy as np

from ..check_levels import checks
from ..extras import import_extra
from ..manifolds.base import Manifold
from .bad_input import boundary_arguments
from .host_reads import HostReadCounter

__all__ = [
    "UNCHECKED_LEVELS",
    "DEFERRED_AGREEMENT",
    "check_deferred_reads_nothing",
    "check_deferred_raises_as_eager",
    "check_compiles_whole",
]

#: the levels at which a map may not read a value
UNCHECKED_LEVELS = ("deferred", "off")
#: relative agreement of deferred and eager values: the deferred forms may take another exact
#: algorithm (the SVD for every polar factor, a fixed iteration count for an iterative log, each
#: converged far below this), never another formula
DEFERRED_AGREEMENT = 1e-7


def _tensors(torch, args: Sequence[np.ndarray], grad: bool = False, device: str = "cpu") -> list:
    return [
        torch.tensor(np.asarray(a, dtype=np.float64), requires_grad=grad, device=device)
        for a in args
    ]


def _assert_close(torch, got, expected, what: str) -> None:
    got, expected = got.detach().cpu(), expected.detach().cpu()
    scale = 1.0 + float(expected.abs().max()) if expected.numel() else 1.0
    torch.testing.assert_close(got, expected, rtol=0.0, atol=DEFERRED_AGREEMENT * scale, msg=what)


def devices(torch) -> tuple[str, ...]:
    """The devices the checks run on: the CPU, and CUDA where a device exists."""
    return ("cpu", "cuda") if torch.cuda.is_available() else ("cpu",)


def declares_deferred_reads(manifold: Manifold) -> bool:
    """Whether the zero-read check applies to ``manifold``: a riemfl family (the contract holds
    them all to it), or a class of the user's that declares ``deferred_reads`` itself (``{}``
    for none). A manifold written with numpy operations reads everywhere and is not checked
    until its class says which maps read."""
    cls = type(manifold)
    if cls.__module__.startswith("riemfl."):
        return True
    return any("deferred_reads" in k.__dict__ for k in cls.__mro__ if k is not Manifold)


def check_deferred_reads_nothing(
    manifold: Manifold, method: str, args: Sequence[np.ndarray]
) -> None:
    """Zero host reads at ``"deferred"`` and ``"off"`` (or some, for a listed exception), eager
    values, and nothing raised at the boundary for valid arguments."""
    torch = import_extra("torch", "check_deferred_reads_nothing")
    call = getattr(manifold, method)
    with checks("eager"):
        expected = call(*_tensors(torch, args))
    reason = manifold.deferred_reads.get(method)
    for device, level in itertools.product(devices(torch), UNCHECKED_LEVELS):
        tensors = _tensors(torch, args, device=device)
        with checks(level):  # the exit reads the deferred verdicts: none may fail
            with HostReadCounter() as reads:
                got = call(*tensors)
        where = f"{manifold.name}.{method} at the level {level!r} on {device}"
        if reason is None:
            assert reads.total == 0, (
                f"{where} read {reads.total} values back to the host, at "
                f"{dict(reads.by_location.most_common())}; expected none (or an entry in "
                f"deferred_reads saying why the map must read)"
            )
        else:
            assert reads.total > 0, (
                f"{where} reads nothing, but deferred_reads says it must ({reason!r}): remove "
                f"the entry"
            )
        _assert_close(torch, got, expected, f"{where}: the value differs from eager mode's")


def check_deferred_raises_as_eager(
    manifold: Manifold, method: str, args: Sequence[np.ndarray]
) -> None:
    """A NaN, then an infinity, in each argument in turn: at ``"deferred"`` the boundary (the
    exit of the ``checks`` block) raises the error, with the message, that ``"eager"`` raises at
    the call, or the call raises it where eager mode's does too (a map whose factorisation
    fails on the value raises at the call at every level). Torch float64 tensors on the CPU.
    """
    torch = import_extra("torch", "check_deferred_raises_as_eager")
    call = getattr(manifold, method)
    for i, value in itertools.product(range(len(args)), (np.nan, np.inf)):
        tensors = _tensors(torch, args)
        tensors[i] = tensors[i].clone()
        tensors[i].reshape(-1)[-1] = value  # (a fresh contiguous tensor: the write reaches it)
        _assert_raised_as_eager(torch, call, tensors, f"{method} with {value} in argument {i}")


def check_deferred_boundary_as_eager(
    manifold: Manifold,
    method: str,
    args: Sequence[np.ndarray],
    roles: Sequence[str],
    points: Sequence[np.ndarray],
    skip: Sequence[int] = (),
) -> None:
    """Each finite point on or beyond the boundary of M (``points``) in each point argument
    of ``method`` (batch element 1: :func:`~riemfl.testing.bad_input.boundary_arguments`;
    ``skip``: positions the map does not read): at ``"deferred"`` the boundary
    raises the error, with the message, that ``"eager"`` raises at the call, where the map's
    guards inside it fail first (a factorisation of a singular matrix) as where its result is
    not finite. Torch float64 tensors on the CPU."""
    torch = import_extra("torch", "check_deferred_boundary_as_eager")
    call = getattr(manifold, method)
    for what, bad_args in boundary_arguments(method, args, roles, points, skip):
        _assert_raised_as_eager(torch, call, _tensors(torch, bad_args), what)


def _assert_raised_as_eager(torch, call, tensors: Sequence, what: str) -> None:
    """The error of ``call(*tensors)`` at ``"deferred"`` (its boundary included) is eager
    mode's, type and message; ``what`` names the case in the failure."""
    eager, deferred = (_raised(torch, call, level, tensors) for level in ("eager", "deferred"))
    assert (type(deferred), str(deferred)) == (type(eager), str(eager)), (
        f"{call.__self__.name}.{what}: the deferred level raised {type(deferred).__name__} "
        f"({deferred}) where eager mode raises {type(eager).__name__} ({eager})"
    )


def _raised(torch, run, level: str, tensors: Sequence) -> Exception | None:
    """What ``run(*tensors)`` raises at the check level ``level`` (the exit of its ``checks``
    block included), or None. The values are deliberately bad: numpy's warnings about them are
    not the outcome. An exception inside a compiled graph skips the restore of an
    ``autograd.Function``'s no-grad forward (torch leaves recording off): restored here."""
    recording = torch.is_grad_enabled()
    try:
        with checks(level), warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            run(*tensors)
    except Exception as exc:  # noqa: BLE001 - the outcome compared
        return exc
    finally:
        torch.set_grad_enabled(recording)
    return None


def check_compiles_whole(
    manifold: Manifold,
    method: str,
    args: Sequence[np.ndarray],
    levels: Sequence[str] = UNCHECKED_LEVELS,
    backend: str = "aot_eager",
) -> None:
    """``torch.compile(fullgraph=True)`` traces the map at ``levels`` (a graph break raises),
    with eager values and gradients.

    ``backend``: ``"aot_eager"`` (the default) traces the backward pass too (AOTAutograd's joint
    graph, run by eager kernels); ``"eager"`` captures dynamo's graph only (a third of the
    time; the gradients then come from eager autograd over the captured graph). The graph
    capture is what can break; code generation is the backend's business.
    """
    torch = import_extra("torch", "check_compiles_whole")
    tensors = _tensors(torch, args, grad=True)
    call = getattr(manifold, method)
    weights = None
    with checks("eager"):
        expected = call(*tensors)
        weights = torch.linspace(0.5, 1.5, expected.numel(), dtype=expected.dtype)
        expected_grads = torch.autograd.grad(
            (expected.reshape(-1) * weights).sum(), tensors, allow_unused=True
        )
    for level in levels:
        torch._dynamo.reset()  # a fresh cache: no entry of another map, no recompilation limit
        where = f"{manifold.name}.{method} compiled at the level {level!r}"
        with checks(level):
            compiled = torch.compile(call, backend=backend, fullgraph=True)
            got = compiled(*tensors)
            grads = torch.autograd.grad(
                (got.reshape(-1) * weights).sum(), tensors, allow_unused=True
            )
        _assert_close(torch, got, expected, f"{where}: the value differs from eager mode's")
        for i, (g, e, t) in enumerate(zip(grads, expected_grads, tensors, strict=True)):
            # an argument the map does not read: None in eager mode, zeros once compiled
            g, e = (torch.zeros_like(t) if a is None else a for a in (g, e))
            _assert_close(torch, g, e, f"{where}: the gradient of argument {i} differs")
        if level == "deferred":
            _check_compiled_nonfinite(torch, call, compiled, tensors, where)
    torch._dynamo.reset()


def _check_compiled_nonfinite(torch, call, compiled, tensors: list, where: str) -> None:
    """A NaN in the first argument of the compiled map (the same graph: values are not
    guarded): the boundary raises eager mode's error type, its words the same up to the values
    (the graph keeps no copy of the arguments). A factorisation on the way runs on zeros in
    place of the NaN (:func:`riemfl.linalg.factorisable`): torch's own error, raised inside
    the graph, fails the check."""
    bad = [t.detach().clone() for t in tensors]
    bad[0].reshape(-1)[-1] = float("nan")
    bad = [b.requires_grad_(t.requires_grad) for b, t in zip(bad, tensors, strict=True)]  # (the
    # same guards: no recompilation)
    eager = _raised(torch, call, "eager", bad)
    deferred = _raised(torch, compiled, "deferred", bad)
    same = type(deferred) is type(eager) and (
        str(deferred).split(" (")[0] == str(eager).split(" (")[0]
    )
    assert same, (
        f"{where}, a NaN in argument 0: the boundary raised {type(deferred).__name__} "
        f"({deferred}) where eager mode raises {type(eager).__name__} ({eager})"
    )
