"""Flower, imported on first use: riemfl's core never needs it."""

from __future__ import annotations

import importlib
from functools import cache
from types import SimpleNamespace
from typing import Any

from riemfl.adapters.flower.errors import FlowerNotInstalledError

__all__ = ["flwr", "INSTALL_HINT"]

#: the command that installs the optional dependency (named in every error about it)
INSTALL_HINT = 'pip install "riemfl[flower]"'


@cache
def flwr() -> SimpleNamespace:
    """The parts of Flower's message API the adapter uses.

    Returns
    -------
    types.SimpleNamespace
        ``Array``, ``ArrayRecord``, ``ConfigRecord``, ``Context``, ``Message``, ``RecordDict``,
        ``ClientApp``, ``ServerApp``, ``Grid`` and ``run_simulation``.

    Raises
    ------
    FlowerNotInstalledError
        When ``flwr`` cannot be imported.
    """
    try:
        app = importlib.import_module("flwr.app")
        clientapp = importlib.import_module("flwr.clientapp")
        serverapp = importlib.import_module("flwr.serverapp")
    except ImportError as exc:
        raise FlowerNotInstalledError(
            f"riemfl.adapters.flower needs Flower (flwr >= 1.41 with the message API), which "
            f"could not be imported ({exc}); install it with: {INSTALL_HINT}"
        ) from exc

    def run_simulation(**kwargs: Any) -> Any:
        try:
            simulation = importlib.import_module("flwr.simulation")
        except ImportError as exc:  # flwr without its [simulation] extra (Ray)
            raise FlowerNotInstalledError(
                f"Flower's simulation engine could not be imported ({exc}); install it with: "
                f"{INSTALL_HINT}"
            ) from exc
        return simulation.run_simulation(**kwargs)

    return SimpleNamespace(
        Array=app.Array,
        ArrayRecord=app.ArrayRecord,
        ConfigRecord=app.ConfigRecord,
        Context=app.Context,
        Message=app.Message,
        RecordDict=app.RecordDict,
        ClientApp=clientapp.ClientApp,
        ServerApp=serverapp.ServerApp,
        Grid=serverapp.Grid,
        run_simulation=run_simulation,
    )
