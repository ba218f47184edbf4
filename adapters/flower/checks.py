"""The server's checks of every reply: shape, finite values, on the manifold within tolerance.

A reply that fails a check is dropped (not aggregated) with its reason, which the run logs and
records, exactly like a client the in-process engine drops. What "on the manifold" means depends
on what an upload is, which the algorithm knows but does not declare, so this table says it:

* ``"point"``: a point of M, checked with ``Manifold.check_point(row, atol)``;
* ``"tangent"``: a tangent vector at the broadcast point ``x`` of the phase, checked with
  ``Manifold.check_tangent(x, row, atol)``;
* ``"ambient"``: an ambient array with no manifold constraint (RFedProj's unprojected
  :math:`\\hat z_{i,\\tau}`): shape and finite values only;
* ``"payload"``: a key the algorithm declares in
  :meth:`~riemfl.federated.algorithm.SyncAlgorithm.wire_dtypes` (a compressed upload's packed
  bits, indices or half-precision values, :mod:`riemfl.federated.compressed`): exactly that
  dtype, and finite values where it is floating point; the server decodes it before any other
  check could apply.

An asynchronous reply carries one upload: a local model (:func:`check_local_model`) or, for a
curve rule, the learned Bezier control points (:func:`check_control_points`), whose curve must
start at the model the client received.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from riemfl.adapters.flower.errors import ProtocolError

from riemfl.errors import RiemflError
from riemfl.federated.algorithm import SyncAlgorithm
from riemfl.federated.async_manifold import BezierEmbedding
from riemfl.federated.privacy import PrivateAlgorithm
from riemfl.federated.rfedproj import RFedProj
from riemfl.federated.tangent import RFedProx, RFedSVRG
from riemfl.manifolds.base import Manifold

__all__ = [
    "UPLOAD_KINDS",
    "KINDS",
    "upload_kind",
    "dtype_error",
    "check_rows",
    "upload_verdicts",
    "check_upload_arrays",
    "check_local_model",
    "check_control_points",
]

KINDS = ("point", "tangent", "ambient", "payload")

#: algorithm class -> {(phase, upload key): kind}; subclasses inherit (RFedAvg is an RFedProx)
UPLOAD_KINDS: dict[type, dict[tuple[int, str], str]] = {
    RFedProj: {(0, "x"): "ambient"},
    RFedProx: {(0, "x"): "point"},
    RFedSVRG: {(0, "grad"): "tangent", (1, "x"): "point"},
}


def upload_kind(
    algorithm: SyncAlgorithm,
    phase: int,
    key: str,
    overrides: Mapping[tuple[int, str], str] | None = None,
) -> str:
    """What upload ``key`` of ``phase`` is: ``overrides``, then :data:`UPLOAD_KINDS` along the
    class hierarchy, else ``"ambient"`` (shape and finite checks only).

    A :class:`~riemfl.federated.privacy.PrivateAlgorithm`'s uploads are those of the rule it
    wraps, except that a tangent upload with local noise is only ``"ambient"`` (the clipped
    vector plus isotropic ambient noise leaves the tangent space; the server projects the sum).
    """
    if key in algorithm.wire_dtypes(phase):
        return "payload"
    if isinstance(algorithm, PrivateAlgorithm):
        kind = upload_kind(algorithm.algorithm, phase, key, overrides)
        s = algorithm.settings
        return "ambient" if kind == "tangent" and s.mode == "local" and s.std > 0 else kind
    if overrides and (phase, key) in overrides:
        kind = overrides[(phase, key)]
        if kind not in KINDS:
            raise ProtocolError(
                f"upload kind of {(phase, key)} is {kind!r}; expected one of {KINDS}"
            )
        return kind
    for cls in type(algorithm).__mro__:
        table = UPLOAD_KINDS.get(cls)
        if table is not None and (phase, key) in table:
            return table[(phase, key)]
    return "ambient"


def dtype_error(what: str, dtype: Any) -> str | None:
    """Why ``dtype`` is not a real floating-point dtype, or ``None`` when it is.

    Complex values are refused explicitly: they pass ``numpy.isfinite`` and keep their shape, but
    the manifolds and the server rules are real.
    """
    dtype = np.dtype(dtype)
    if np.issubdtype(dtype, np.floating):
        return None
    values = "complex values" if np.issubdtype(dtype, np.complexfloating) else "values"
    return f"{what} has {values} (dtype {dtype}); expected a real floating-point dtype"


def check_upload_arrays(
    uploads: Mapping[str, np.ndarray],
    expected: Mapping[str, tuple[int, ...]],
    m: int,
    dtypes: Mapping[str, Any] | None = None,
) -> str | None:
    """Why a node's stacked uploads for ``m`` clients do not have the expected keys, shapes and
    dtypes (real floating point, or exactly the dtype ``dtypes`` gives a key), or ``None`` when
    they do."""
    if set(uploads) != set(expected):
        return f"uploads {sorted(uploads)} instead of {sorted(expected)}"
    dtypes = dtypes or {}
    for key, shape in expected.items():
        a = uploads[key]
        if tuple(a.shape) != (m, *shape):
            return f"upload {key!r} has shape {tuple(a.shape)}; expected {(m, *shape)}"
        if key in dtypes:
            want = np.dtype(dtypes[key])
            if a.dtype != want:
                return f"upload {key!r} has dtype {a.dtype}; expected {want}"
            continue
        why = dtype_error(f"upload {key!r}", a.dtype)
        if why is not None:
            return why
    return None


def upload_verdicts(
    algorithm: SyncAlgorithm,
    manifold: Manifold,
    phase: int,
    uploads: Mapping[str, np.ndarray],
    atol: float,
    base: Any = None,
    overrides: Mapping[tuple[int, str], str] | None = None,
) -> dict[int, str]:
    """Stack row -> why it fails, over every upload key (:func:`check_rows` of the key's
    :func:`upload_kind`); rows that pass every check are absent. The server runs it on each
    node's reply; under secure aggregation each node runs it on its own clients' rows."""
    bad: dict[int, str] = {}
    for key in sorted(uploads):
        kind = upload_kind(algorithm, phase, key, overrides)
        verdicts = check_rows(manifold, kind, uploads[key], atol, base)
        for j, why in enumerate(verdicts):
            if why is not None and j not in bad:
                bad[j] = f"upload {key!r} ({kind}): {why}"
    return bad


def check_rows(
    manifold: Manifold, kind: str, rows: np.ndarray, atol: float, base: Any = None
) -> list[str | None]:
    """Per row of ``rows`` (one client each): why it fails the check of ``kind``, or ``None``.

    Every row must hold real floating-point values (complex ones are refused), be finite and
    pass the check of ``kind``.

    Parameters
    ----------
    manifold : Manifold
    kind : {"point", "tangent", "ambient", "payload"}
    rows : array of shape (m, *point_shape)
    atol : float
        Tolerance of ``check_point`` / ``check_tangent``.
    base : array, optional
        The base point of tangent vectors.
    """
    rows = np.asarray(rows)
    if kind == "payload":  # its dtype was checked exactly (check_upload_arrays)
        if not np.issubdtype(rows.dtype, np.floating):
            return [None] * len(rows)
        finite = np.isfinite(rows.reshape(len(rows), -1)).all(1)
        return [None if ok else "non-finite values" for ok in finite]
    why = dtype_error("the upload", rows.dtype)
    if why is not None:
        return [why] * len(rows)
    out: list[str | None] = []
    for row in rows:
        if not np.all(np.isfinite(row)):
            out.append("non-finite values")
            continue
        try:
            if kind == "point":
                manifold.check_point(row, atol=atol)
            elif kind == "tangent":
                manifold.check_tangent(base, row, atol=atol)
        except RiemflError as exc:
            out.append(f"{type(exc).__name__}: {exc}")
            continue
        out.append(None)
    return out


def check_local_model(
    manifold: Manifold, local: np.ndarray, atol: float, what: str = "local model"
) -> str | None:
    """Why an asynchronous upload is not a point of ``manifold`` (shape, floating dtype, finite,
    ``check_point`` within ``atol``), or ``None`` when it is; ``what`` names it in the reason."""
    shape = tuple(manifold.point_shape)
    if tuple(local.shape) != shape:
        return f"{what} has shape {tuple(local.shape)}; expected {shape}"
    why = dtype_error(what, local.dtype)
    if why is not None:
        return why
    why = check_rows(manifold, "point", local[None], atol)[0]
    return None if why is None else f"{what}: {why}"


def check_control_points(
    embedding: BezierEmbedding, phi: np.ndarray, received: np.ndarray, atol: float
) -> str | None:
    """Why an uploaded curve is not a valid AsyncBezier upload, or ``None`` when it is.

    The upload must be ``degree + 1`` control points on the base manifold (shape
    ``(degree + 1, *point_shape)``, finite, ``embedding.parameters.check_point`` =
    :class:`~riemfl.manifolds.ControlPoints` within ``atol``), and the curve must start at the
    model the client received: the client never trains its first control point, so it equals
    ``received`` up to ``atol`` (largest entry difference).

    Parameters
    ----------
    embedding : BezierEmbedding
        The rule's embedding (its ``parameters`` and ``degree``).
    phi : array
        The uploaded control points.
    received : array
        The global model the client was dispatched with.
    atol : float
    """
    what = f"control points (degree {embedding.degree} curve)"
    why = check_local_model(embedding.parameters, phi, atol, what)
    if why is not None:
        return why
    gap = float(np.max(np.abs(phi[0] - np.asarray(received)), initial=0.0))
    if not gap <= atol:
        return (
            f"the curve starts {gap:.3g} (largest entry difference) away from the model the "
            f"client received; expected its first control point to equal it within atol {atol:g}"
        )
    return None
