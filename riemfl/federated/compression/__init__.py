"""Compressors of client uploads: pure encode/decode maps with exact payload sizes.

A :class:`Compressor` maps the stacked updates of m clients to a payload of fixed-size arrays
per client (:meth:`~Compressor.payload_spec`, :meth:`~Compressor.payload_nbytes`) and decodes it
back. The compressors, by their :func:`make_compressor` forms:

* ``qsgd:BITS`` -- :class:`QSGD`, unbiased stochastic quantisation (Alistarh et al. 2017);
* ``topk:FRACTION`` -- :class:`TopK`, top-k sparsification (Stich, Cordonnier & Jaggi 2018);
* ``rank:R`` -- :class:`LowRank`, PowerSGD (Vogels, Karimireddy & Jaggi 2019), for matrix updates;
* ``fp16``, ``bf16`` -- :class:`Cast`, half-precision rounding to nearest even;
* ``none`` -- no compression (``make_compressor`` returns None).

The biased ones (top-k, PowerSGD, the casts) are meant for error feedback (Karimireddy et al.
2019), which the caller keeps: :math:`e' = (v + e) - C(v + e)`.
"""

from __future__ import annotations

import re

from ...errors import ParameterError
from .base import Compressor
from .cast import Cast
from .lowrank import LowRank
from .packing import pack_bits, unpack_bits
from .quantise import QSGD
from .sparsify import TopK

__all__ = [
    "Compressor",
    "QSGD",
    "TopK",
    "LowRank",
    "Cast",
    "COMPRESSION_FORMS",
    "make_compressor",
    "pack_bits",
    "unpack_bits",
]

#: The forms :func:`make_compressor` parses (BITS: 1 to 8; FRACTION: in (0, 1]; R: >= 1).
COMPRESSION_FORMS = ("none", "fp16", "bf16", "qsgd:BITS", "topk:FRACTION", "rank:R")

_INTEGER = re.compile(r"\d+")
_DECIMAL = re.compile(r"(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _refuse(spec: object, why: str = "") -> ParameterError:
    forms = ", ".join(COMPRESSION_FORMS)
    detail = f" ({why})" if why else ""
    return ParameterError(
        f"compression must be one of {forms} (BITS an integer 1 to 8, FRACTION in (0, 1], "
        f"R an integer >= 1), got {spec!r}{detail}"
    )


def make_compressor(spec: str) -> Compressor | None:
    """The compressor of a form of :data:`COMPRESSION_FORMS`, or None for ``"none"``.

    Parameters
    ----------
    spec : str
        ``"none"``, ``"fp16"``, ``"bf16"``, ``"qsgd:BITS"`` (e.g. ``"qsgd:4"``),
        ``"topk:FRACTION"`` (e.g. ``"topk:0.01"``) or ``"rank:R"`` (e.g. ``"rank:2"``, seed 0).

    Raises
    ------
    ParameterError
        Any other string, or a parameter out of range; the message lists the forms.
    """
    if not isinstance(spec, str):
        raise _refuse(spec, f"not a string but {type(spec).__name__}")
    name, colon, argument = spec.strip().partition(":")
    plain = {"none": None, "fp16": "float16", "bf16": "bfloat16"}
    if name in plain and not colon:
        return None if plain[name] is None else Cast(plain[name])
    builders = {
        "qsgd": (QSGD, _INTEGER, int),
        "topk": (TopK, _DECIMAL, float),
        "rank": (LowRank, _INTEGER, int),
    }
    if name not in builders or not colon:
        raise _refuse(spec)
    build, pattern, convert = builders[name]
    if not pattern.fullmatch(argument):
        raise _refuse(spec, f"{argument!r} is not a number of that form")
    try:
        return build(convert(argument))
    except ParameterError as error:
        raise _refuse(spec, str(error)) from None
