"""``riemfl run --compression SPEC [--error-feedback | --no-error-feedback]``: compressed uploads
(:class:`riemfl.federated.compressed.Compressed`), checked and built before the output folder is
made (by :func:`riemfl.experiments.run_settings.compressed` and
:func:`~riemfl.experiments.run_settings.compressor_of`).

``SPEC`` is one of :data:`riemfl.federated.compression.COMPRESSION_FORMS`: ``none``, ``fp16``,
``bf16``, ``qsgd:BITS``, ``topk:FRACTION``, ``rank:R``. On the synchronous engine for the
rules whose model phase uploads a vector the server can decode (rfedproj; rfedavg, rfedprox,
rfedsvrg with ``--upload tangent``), and for fedbuff on the asynchronous engine; the clients'
random draws come from ``--seed``.
"""

from __future__ import annotations

import argparse

__all__ = ["add_compression_options"]


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
