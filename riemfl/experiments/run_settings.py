"""The settings of a run given by name, checked and built: the server side (an aggregator, a
server optimiser, attackers) and compressed uploads.

The options of ``riemfl run`` (:mod:`riemfl.cli`) and the keys of a Flower deployment's run
config (:mod:`riemfl.adapters.flower.deploy`) are the same settings; both front ends build them
here, so a setting one refuses the other refuses with the same error (the messages name the
command line's options).

* ``--aggregator NAME`` (:func:`riemfl.federated.build_aggregator`) with its parameters
  ``--trim`` (trimmed), ``--krum-f`` (krum, multikrum; default: the number of attackers of
  ``--byzantine``, else 0) and ``--clip-radius`` (clipped): every synchronous algorithm, and
  FedBuff on the asynchronous engine.
* ``--server-optimizer NAME`` (:func:`riemfl.federated.build_server_optimizer`) with
  ``--server-lr`` (default 1 for sgd and momentum, 0.1 for adam, yogi, adagrad),
  ``--server-momentum`` (momentum) and ``--server-betas`` (adam, yogi): the synchronous rules
  whose model phase is sum-only (rfedproj; rfedavg, rfedprox, rfedsvrg with ``--upload
  tangent``) through :class:`~riemfl.federated.ServerOptimized`, and FedBuff, whose
  pseudo-gradient is then the buffer's mean.
* ``--byzantine FRACTION --attack NAME`` (:class:`riemfl.federated.attacks.Byzantine`): the
  synchronous engine.
* ``--compression SPEC`` (:data:`riemfl.federated.compression.COMPRESSION_FORMS`) with
  ``--error-feedback``: the synchronous rules whose model phase uploads a vector the server can
  decode (:class:`~riemfl.federated.compressed.Compressed`), and FedBuff; the clients' random
  draws come from ``--seed``.

An option that the run would ignore is refused, as everywhere in ``riemfl run``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from ..errors import ParameterError

__all__ = [
    "ServerSide",
    "server_side",
    "SERVER_SIDE_OPTIONS",
    "ADAPTIVE_LR",
    "attackers",
    "compressor_of",
    "compressed",
    "async_rule_settings",
]

#: ``--server-lr``'s default for the adaptive optimisers (Reddi et al. 2021 tune it on a grid
#: around 0.1 and below; 1 is the plain step of sgd and momentum)
ADAPTIVE_LR = 0.1

#: option -> the ``--aggregator`` or ``--server-optimizer`` values it applies to
PARAMETER_OF: dict[str, tuple[str, tuple[str, ...]]] = {
    "trim": ("aggregator", ("trimmed",)),
    "krum_f": ("aggregator", ("krum", "multikrum")),
    "clip_radius": ("aggregator", ("clipped",)),
    "server_momentum": ("server_optimizer", ("momentum",)),
    "server_betas": ("server_optimizer", ("adam", "yogi")),
}

#: the options of this module (``None`` when not given)
SERVER_SIDE_OPTIONS = ("aggregator", "server_optimizer", "byzantine", "attack", *PARAMETER_OF)


@dataclass
class ServerSide:
    """What the options ask of the server: an aggregator (None: the rule's mean), a server
    optimiser (None: the rule's own step) and the attackers (None: no attack)."""

    aggregator: Any = None
    optimizer: Any = None
    byzantine: Any = None


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


def _check_parameters(args: argparse.Namespace) -> None:
    for dest, (owner, values) in PARAMETER_OF.items():
        if getattr(args, dest) is None:
            continue
        chosen = getattr(args, owner)
        if chosen not in values:
            raise ParameterError(
                f"{_flag(dest)}: a parameter of {_flag(owner)} {' or '.join(values)}; got "
                f"{_flag(owner)} {chosen or 'unset'}"
            )
    if args.attack is not None and args.byzantine is None:
        raise ParameterError("--attack: the attack of --byzantine FRACTION; give the fraction")


def _check_engine(args: argparse.Namespace, sync: bool) -> None:
    if sync:
        if args.server_lr is not None and args.server_optimizer is None:
            raise ParameterError(
                "--server-lr: with --engine sync, the learning rate of --server-optimizer; "
                "give the optimiser (sgd with --server-lr 1 is the rule's own step)"
            )
        return
    given = [_flag(d) for d in ("aggregator", "server_optimizer") if getattr(args, d)]
    if given and args.algorithm != "fedbuff":
        raise ParameterError(
            f"{', '.join(given)}: on the asynchronous engine only fedbuff aggregates (its "
            f"buffer); {args.algorithm} applies each update on its own"
        )
    if args.byzantine is not None:
        raise ParameterError("--byzantine: attacks run on the synchronous engine (--engine sync)")


def attackers(args: argparse.Namespace, n_clients: int) -> int:
    """The number of attacking clients of ``--byzantine`` (0 without it)."""
    if args.byzantine is None:
        return 0
    return round(args.byzantine * n_clients)


def server_side(args: argparse.Namespace, n_clients: int, *, sync: bool) -> ServerSide:
    """The checked :class:`ServerSide` of ``args``.

    Raises
    ------
    ParameterError
        An option the run would ignore (a parameter of another aggregator or optimiser,
        ``--attack`` without ``--byzantine``, ``--server-lr`` on the synchronous engine without
        ``--server-optimizer``, an aggregator or optimiser for an asynchronous rule other than
        fedbuff, attacks on the asynchronous engine), or a value the built object refuses.
    """
    from ..federated.attacks import Byzantine
    from ..federated.robust import build_aggregator
    from ..federated.server_optimizers import build_server_optimizer

    _check_parameters(args)
    _check_engine(args, sync)
    out = ServerSide()
    if args.aggregator not in (None, "mean"):
        f = attackers(args, n_clients) if args.krum_f is None else args.krum_f
        if not sync:  # FedBuff aggregates its buffer
            m = args.buffer_size
        else:
            m = n_clients if args.clients_per_round is None else args.clients_per_round
        f = min(f, m)
        if args.aggregator in ("krum", "multikrum") and m < 2 * f + 3:
            raise ParameterError(
                f"--aggregator {args.aggregator}: m = {m} uploads per aggregation with f = {f}; "
                f"Krum needs m >= 2f + 3 = {2 * f + 3} (more clients or a larger buffer, or a "
                "smaller --krum-f)"
            )
        out.aggregator = build_aggregator(
            args.aggregator,
            n_byzantine=f,
            trim=0.2 if args.trim is None else args.trim,
            tau=1.0 if args.clip_radius is None else args.clip_radius,
        )
    if args.server_optimizer is not None:
        adaptive = args.server_optimizer in ("adam", "yogi", "adagrad")
        lr = args.server_lr if args.server_lr is not None else (ADAPTIVE_LR if adaptive else 1.0)
        out.optimizer = build_server_optimizer(
            args.server_optimizer,
            lr,
            momentum=0.9 if args.server_momentum is None else args.server_momentum,
            betas=(0.9, 0.99) if args.server_betas is None else tuple(args.server_betas),
        )
    if args.byzantine is not None:
        out.byzantine = Byzantine(args.byzantine, args.attack or "sign-flip")
    return out


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


def async_rule_settings(args: argparse.Namespace, server: ServerSide) -> dict[str, Any]:
    """The keyword arguments of :func:`~riemfl.experiments.registry.build_async_rule` that the
    server side and the compression options set: ``--server-lr`` is the rule's eta_g unless a
    server optimiser takes it (:func:`server_side`).

    Raises
    ------
    ParameterError
        As :func:`compressor_of` on the asynchronous engine.
    """
    return {
        "server_lr": None if server.optimizer is not None else args.server_lr,
        "aggregator": server.aggregator,
        "server_optimizer": server.optimizer,
        "compressor": compressor_of(args, sync=False),
        "error_feedback": args.error_feedback,
        "compression_seed": args.seed,
    }
