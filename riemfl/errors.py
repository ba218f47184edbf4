"""Exception types raised by riemfl.

Every error riemfl raises on purpose derives from :class:`RiemflError`, so a caller can catch the
library's complaints with one ``except`` clause. Messages name the manifold, the constraint or
shape that was expected, and the violation that was measured.
"""

from __future__ import annotations

__all__ = [
    "RiemflError",
    "ShapeError",
    "DTypeError",
    "NotOnManifoldError",
    "NonFiniteError",
    "ProjectionError",
    "ConvergenceError",
    "CutLocusError",
    "ParameterError",
]


class RiemflError(Exception):
    """Base class of every error raised by riemfl."""


class ShapeError(RiemflError, ValueError):
    """An array does not have the shape (or dtype) a manifold expects."""


class NotOnManifoldError(RiemflError, ValueError):
    """A point is not on the manifold, or a vector is not tangent, within tolerance."""


class DTypeError(ShapeError, TypeError):
    """An argument's dtype, array type or device is not one the manifold computes with.

    Examples: complex input to a real manifold, float16 or bfloat16 (refused: their precision is
    below what the manifold constraints need), strings or objects, tensors on two devices. A
    :class:`ShapeError` (and a ``TypeError``), so existing handlers of either catch it.
    """


class NonFiniteError(NotOnManifoldError):
    """An argument contains NaN or infinite entries, or a map's intermediate values overflowed.

    A :class:`NotOnManifoldError`: a non-finite array is on no manifold and in no tangent space.
    """


class ProjectionError(RiemflError, ValueError):
    """The metric projection P_M(a) is not unique (or not defined) at the given ambient point."""


class ConvergenceError(RiemflError, RuntimeError):
    """An iterative solver (e.g. the Stiefel logarithm) did not reach its tolerance."""


class CutLocusError(RiemflError, ValueError):
    """A logarithm or inverse retraction was asked for beyond where it is defined.

    Examples: the logarithm of antipodal points on the sphere, or the inverse QR retraction of a
    point whose Gram matrix with the base point is singular.
    """


class ParameterError(RiemflError, ValueError):
    """A constructor or function parameter is invalid (wrong type, out of range)."""


class DataError(RiemflError, ValueError):
    """A data file or array is missing, malformed or inconsistent.

    Examples: a missing file, a bad IDX magic number, a truncated file, image and label counts
    that differ, an npz archive without any of the accepted keys.
    """


class MissingDependencyError(RiemflError, ImportError):
    """An optional dependency is not installed; the message names the extra that provides it."""


__all__ += ["DataError", "MissingDependencyError"]


class CheckpointError(RiemflError, ValueError):
    """A checkpoint cannot be resumed: unreadable, or written by a different run configuration."""


class CheckpointMismatchError(CheckpointError):
    """A valid checkpoint written by another run (other settings or data).

    Attributes
    ----------
    differences : str
        What differs, setting by setting (``name: value there, value here``).
    """

    def __init__(self, message: str, differences: str) -> None:
        super().__init__(message)
        self.differences = differences


class ClientFailureError(RiemflError, RuntimeError):
    """Every participating client of a federated round failed, so the round cannot proceed.

    The message lists each client's reason (an exception, a non-finite upload, a wrong shape).
    """


__all__ += ["CheckpointError", "CheckpointMismatchError", "ClientFailureError"]
