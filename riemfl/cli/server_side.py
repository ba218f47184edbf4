"""The server side of ``riemfl run``: the options ``--aggregator``, ``--server-optimizer`` and
``--byzantine`` with their parameters, checked and built by
:func:`riemfl.experiments.run_settings.server_side` (the settings and their rules).
"""

from __future__ import annotations

import argparse
from typing import Any

from ..experiments.run_settings import ADAPTIVE_LR

__all__ = ["add_server_side_options"]


def add_server_side_options(parser: argparse.ArgumentParser, positive: Any, fraction: Any) -> None:
    """The ``riemfl run`` options of this module, as one group of ``parser``."""
    from ..federated.attacks import ATTACK_NAMES
    from ..federated.robust import AGGREGATOR_NAMES
    from ..federated.server_optimizers import SERVER_OPTIMIZER_NAMES

    g = parser.add_argument_group(
        "server side: robust aggregation, server optimisers, attacks (docs/federated/"
        "robust-aggregation.md, server-optimizers.md, attacks.md)"
    )
    g.add_argument(
        "--aggregator",
        choices=AGGREGATOR_NAMES,
        default=None,
        help="how the server combines the uploads (default: mean, the rule's own)",
    )
    g.add_argument("--trim", type=fraction, default=None, help="trimmed: fraction dropped (0.2)")
    g.add_argument(
        "--krum-f",
        type=int,
        default=None,
        help="krum, multikrum: Byzantine uploads tolerated (default: the attackers of "
        "--byzantine, else 0)",
    )
    g.add_argument("--clip-radius", type=positive, default=None, help="clipped: the radius tau (1)")
    g.add_argument(
        "--server-optimizer",
        choices=SERVER_OPTIMIZER_NAMES,
        default=None,
        help="a server optimiser on the mean update (rfedproj; rfedavg, rfedprox, rfedsvrg "
        "with --upload tangent; async fedbuff)",
    )
    g.add_argument(
        "--server-lr",
        type=positive,
        default=None,
        help="the server's learning rate: of --server-optimizer (1 for sgd and momentum, "
        f"{ADAPTIVE_LR} for adam, yogi, adagrad); without it, an asynchronous rule's eta_g "
        "(FedBuff: beta; default: the rule's own, see docs/federated/async)",
    )
    g.add_argument("--server-momentum", type=fraction, default=None, help="momentum: beta (0.9)")
    g.add_argument(
        "--server-betas",
        type=fraction,
        nargs=2,
        metavar=("B1", "B2"),
        default=None,
        help="adam, yogi: beta1 beta2 (0.9 0.99)",
    )
    g.add_argument(
        "--byzantine",
        type=fraction,
        default=None,
        help="fraction of attacking clients, chosen once from --seed (sync engine)",
    )
    g.add_argument(
        "--attack",
        choices=ATTACK_NAMES,
        default=None,
        help="what the attackers upload (default: sign-flip)",
    )
