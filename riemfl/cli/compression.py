"""``riemfl run --compression SPEC [--error-feedback | --no-error-feedback]``: compressed uploads
(:class:`riemfl.federated.compressed.Compressed`), checked and built before the output folder is
made.

``SPEC`` is one of :data:`riemfl.federated.compression.COMPRESSION_FORMS`: ``none``, ``fp16``,
``bf16``, ``qsgd:BITS``, ``topk:FRACTION``, ``rank:R``. On the synchronous engine for the
rules whose model phase uploads a vector the server can decode (rfedproj; rfedavg, rfedprox,
rfedsvrg with ``--upload tangent``), and for fedbuff on the asynchronous engine; the clients'
random draws come from ``--seed``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..errors import ParameterError

__all__ = ["add_compression_options", "compressed", "compressor_of"]


def add_compression_options(parser: argparse.ArgumentParser) -> None:
    """The ``riemfl run`` options of compressed uploads, as one group of ``parser``."""
    g = parser.add_argument_group(
        "compressed uploads (rfedproj, or --upload tangent; async fedbuff; "
        "docs/federated/compression.md)"
    )
    g.add_argument(
        "--compression",
        default=None,
        metavar="SPEC",
        help="none, fp16, bf16, qsgd:BITS, topk:FRACTION or rank:R (default: none)",
    )
    g.add_argument(
        "--error-feedback",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="keep each client's compression residual (default: on for the biased compressors "
        "fp16, bf16, topk and rank; off for qsgd)",
    )


def compressor_of(args: argparse.Namespace, *, sync: bool) -> Any:
    """The :class:`~riemfl.federated.compression.Compressor` of ``--compression`` (None without
    it or with ``none``).

    Raises
    ------
    ParameterError
        A malformed SPEC, ``--error-feedback`` without a compressor, or compression on the
        asynchronous engine with a rule other than fedbuff.
    """
    from ..federated.compression import make_compressor

    compressor = None if args.compression is None else make_compressor(args.compression)
    if compressor is None:
        if args.error_feedback is not None:
            flag = "--error-feedback" if args.error_feedback else "--no-error-feedback"
            raise ParameterError(f"{flag}: a setting of --compression; give a compressor")
        return None
    if not sync and args.algorithm != "fedbuff":
        raise ParameterError(
            f"--compression: on the asynchronous engine only fedbuff compresses its clients' "
            f"updates; {args.algorithm} applies each local model as it is"
        )
    return compressor


def compressed(args: argparse.Namespace, algorithm: Any) -> Any:
    """The synchronous ``algorithm`` wrapped in :class:`~riemfl.federated.compressed.Compressed`
    as the options ask (unchanged without a compressor).

    Raises
    ------
    ParameterError
        As :func:`compressor_of`, or a rule whose uploads cannot be compressed (the message says
        why).
    """
    from ..federated.compressed import Compressed

    compressor = compressor_of(args, sync=True)
    if compressor is None:
        return algorithm
    return Compressed(algorithm, compressor, error_feedback=args.error_feedback, seed=args.seed)
