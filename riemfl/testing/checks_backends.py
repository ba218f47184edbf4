"""Checks of how the maps are implemented: a batch equals the loop over its elements (also
for a batch of base points against single arguments), numpy equals torch, torch autograd agrees
with finite differences (and is finite where the formulas divide by zero), array types and
dtypes are preserved, and float32 is accurate to the kit's table."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ..backend import is_torch
from ..manifolds.base import Manifold
from .assertions import assert_close
from .config import Tolerance, to_numpy

__all__ = [
    "check_batch_equals_loop",
    "check_backends_agree",
    "check_autograd",
    "check_autograd_at_zero",
    "check_types_preserved",
    "check_broadcast_batch_point",
    "float32_error",
    "check_float32_accuracy",
]


def _stack_like(items: Sequence, like):
    if is_torch(like):
        import torch

        return torch.stack(list(items))
    return np.stack(items)


def check_batch_equals_loop(
    manifold: Manifold, method: str, args: Sequence, batched: Sequence[bool], tol: Tolerance
) -> None:
    """A batched call equals the stack of per-element calls.

    ``batched[i]`` says whether ``args[i]`` carries the leading batch axis (others broadcast).
    """
    fn = getattr(manifold, method)
    out = fn(*args)
    size = next(a.shape[0] for a, b in zip(args, batched, strict=True) if b)
    loop = [
        fn(*(a[i] if b else a for a, b in zip(args, batched, strict=True))) for i in range(size)
    ]
    assert_close(out, _stack_like(loop, out), tol, f"batched {method} = loop", manifold)


def check_backends_agree(manifold: Manifold, method: str, args: Sequence, tol: Tolerance) -> None:
    """numpy float64 and torch float64 give the same result."""
    import torch

    out_np = getattr(manifold, method)(*[np.asarray(a, dtype=np.float64) for a in args])
    out_t = getattr(manifold, method)(*[torch.as_tensor(np.asarray(a)) for a in args])
    if not is_torch(out_t) or not isinstance(out_np, np.ndarray | np.floating):
        raise AssertionError(f"{manifold.name}.{method}: output type does not follow the input")
    assert_close(out_t, out_np, tol, f"{method}: torch = numpy", manifold)


def check_autograd(
    manifold: Manifold, method: str, args: Sequence, roles: Sequence[str], rng
) -> None:
    r"""torch autograd through ``method`` matches central finite differences (float64).

    A random linear functional of the output is differentiated by autograd and compared with its
    central finite-difference derivative along a random direction in every input. Arguments with
    role ``"point"`` move along retraction curves :math:`R_x(\pm h d)` with d tangent (the maps
    are only defined on M); the others move in straight lines.
    """
    import torch

    inputs = [torch.tensor(np.asarray(a), dtype=torch.float64, requires_grad=True) for a in args]
    out = getattr(manifold, method)(*inputs)
    weights = torch.as_tensor(rng.standard_normal(tuple(out.shape)))
    grads = torch.autograd.grad((weights * out).sum(), inputs, allow_unused=True)
    for g in grads:
        if g is not None and not bool(torch.isfinite(g).all()):
            raise AssertionError(f"{manifold.name}.{method}: autograd gradient is not finite")
    directions = [
        np.asarray(manifold.random_tangent(a, rng=rng))
        if role == "point"
        else rng.standard_normal(np.shape(a))
        for a, role in zip(args, roles, strict=True)
    ]
    auto = sum(
        float((g * torch.as_tensor(d)).sum())
        for g, d in zip(grads, directions, strict=True)
        if g is not None
    )

    def value(step):
        moved = [
            manifold.retract(a, step * d) if role == "point" else np.asarray(a) + step * d
            for a, d, role in zip(args, directions, roles, strict=True)
        ]
        with torch.no_grad():
            res = getattr(manifold, method)(*[torch.as_tensor(m) for m in moved])
        return float((weights * res).sum())

    # Central differences err by O(h^2) (truncation) plus e / h, where e is the accuracy of the
    # map's value: rounding for closed forms, but the solver's tolerance for iterative maps
    # (Stiefel's log stops within ~1e-11, so at h = 1e-6 the quotient is off by ~1e-5, and where
    # it lands depends on the BLAS kernel). The derivative is right when it matches at either of
    # two steps, one small (truncation-bound) and one larger (noise-bound); a wrong derivative
    # matches at neither.
    fds = [(value(h) - value(-h)) / (2 * h) for h in (1e-6, 1e-4)]
    if all(abs(fd - auto) > 1e-5 * max(1.0, abs(fd)) for fd in fds):
        raise AssertionError(
            f"{manifold.name}.{method}: autograd directional derivative {auto:.8e} differs from "
            f"the finite differences {fds[0]:.8e} (h = 1e-6) and {fds[1]:.8e} (h = 1e-4)"
        )


def check_autograd_at_zero(manifold: Manifold, x: np.ndarray) -> None:
    """Gradients are finite where the textbook formulas divide by zero.

    ``retract``/``exp`` at ``u = 0`` and ``inverse_retract``/``log`` at ``y = x`` (``sqrt`` of a
    zero norm inside ``where`` gives ``0 * inf = NaN`` gradients unless guarded).
    """
    import torch

    for method, second in (
        ("retract", "zero"),
        ("exp", "zero"),
        ("inverse_retract", "x"),
        ("log", "x"),
    ):
        if not manifold.supports(method)[0]:
            continue
        base = torch.as_tensor(x)
        arg = torch.zeros_like(base) if second == "zero" else base.clone()
        arg.requires_grad_(True)
        out = getattr(manifold, method)(base, arg)
        (grad,) = torch.autograd.grad(out.sum(), arg)
        if not bool(torch.isfinite(grad).all()):
            raise AssertionError(
                f"{manifold.name}.{method}: gradient is not finite at "
                f"{'u = 0' if second == 'zero' else 'y = x'}"
            )


def check_types_preserved(manifold: Manifold, method: str, args: Sequence) -> None:
    """The output has the input's array type and dtype (and torch device)."""
    out = getattr(manifold, method)(*args)
    ref = args[0]
    same_type = type(out) is type(ref) or (
        isinstance(ref, np.ndarray) and isinstance(out, np.ndarray | np.floating)
    )
    if not same_type or str(out.dtype) != str(ref.dtype):
        raise AssertionError(
            f"{manifold.name}.{method}: input {type(ref).__name__}[{ref.dtype}] gave "
            f"{type(out).__name__}[{out.dtype}]"
        )
    if hasattr(ref, "device") and out.device != ref.device:
        raise AssertionError(f"{manifold.name}.{method}: device {ref.device} -> {out.device}")


def check_broadcast_batch_point(manifold: Manifold, method: str, args: Sequence, tol) -> None:
    """A batch of base points against single other arguments: the result has the broadcast
    batch shape and equals the per-point calls (``args`` single, unbatched arguments)."""
    batch = _stack_like([args[0]] * 3, args[0])
    fn = getattr(manifold, method)
    out = fn(batch, *args[1:])
    single = fn(*args)
    shape = (3,) + tuple(single.shape)
    if tuple(out.shape) != shape:
        raise AssertionError(
            f"{manifold.name}.{method}: a batch of 3 base points against single other arguments "
            f"gave shape {tuple(out.shape)}; expected {shape}"
        )
    assert_close(out, _stack_like([single] * 3, single), tol, f"broadcast {method}", manifold)


def float32_error(manifold: Manifold, method: str, args: Sequence, backend: str) -> float:
    """Error of ``method`` in float32, in units of float32's eps, relative to max(1, |result|).

    The reference is the float64 call on the float32-rounded arguments, so only the map's own
    rounding is measured (not the conditioning of the rounded input).
    """
    from .config import Config

    low, high = Config(backend, "float32"), Config(backend, "float64")
    rounded = [np.asarray(a, dtype=np.float32) for a in args]
    out = to_numpy(getattr(manifold, method)(*[low.convert(a) for a in rounded]))
    ref = to_numpy(getattr(manifold, method)(*[high.convert(a) for a in rounded]))
    scale = max(1.0, float(np.max(np.abs(ref))) if ref.size else 0.0)
    err = float(np.max(np.abs(out - ref))) if ref.size else 0.0
    return err / (scale * float(np.finfo(np.float32).eps))


def check_float32_accuracy(
    manifold: Manifold, method: str, args: Sequence, backend: str, ulps: float
) -> None:
    """``method`` in float32 agrees with float64 to ``ulps`` float32 eps (see
    :func:`float32_error`; the kit's table :data:`riemfl.testing.config.FLOAT32_EPS_MULTIPLES`)."""
    err = float32_error(manifold, method, args, backend)
    if not err <= ulps:
        raise AssertionError(
            f"{manifold.name}.{method} ({backend} float32) is off the float64 result by "
            f"{err:.1f} float32 eps (relative to max(1, |result|)); the kit allows {ulps:g}"
        )
