"""The base of the curve and surface clients: a :class:`~riemfl.nn.TorchClientTrainer` wrapped.

:class:`WrappedClientTrainer` checks the wrapped trainer and forwards the members of the trainer
protocol that a client learning a curve or a surface leaves as they are (data sizes,
initialisation, evaluation); :func:`warmup_epochs` is the end-point epochs such a client trains
before it learns its control points.
"""

from __future__ import annotations

import numpy as np

from .._validation import integer
from ..errors import ParameterError
from .trainer import TorchClientTrainer

__all__ = ["WrappedClientTrainer", "warmup_epochs"]


class WrappedClientTrainer:
    """Forwards sizes, initialisation and evaluation to ``trainer``.

    Parameters
    ----------
    trainer : TorchClientTrainer
        The local training of the end point and the evaluation.
    name : str
        The subclass's name, for the error message.

    Raises
    ------
    ParameterError
        For a ``trainer`` that is not a :class:`~riemfl.nn.TorchClientTrainer`.
    """

    def __init__(self, trainer: TorchClientTrainer, name: str) -> None:
        if not isinstance(trainer, TorchClientTrainer):
            raise ParameterError(f"{name} wraps a TorchClientTrainer, got {type(trainer).__name__}")
        self.trainer = trainer
        self.n_clients = trainer.n_clients

    def n_samples(self, i: int) -> int:
        return self.trainer.n_samples(i)

    def initial_parameters(self, seed: int = 0) -> np.ndarray:
        return self.trainer.initial_parameters(seed)

    def evaluate(self, flat: np.ndarray, split: str = "test") -> dict[str, float]:
        return self.trainer.evaluate(flat, split)

    def per_client_accuracy(self, flat: np.ndarray, split: str = "test") -> np.ndarray:
        return self.trainer.per_client_accuracy(flat, split)


def warmup_epochs(trainer: TorchClientTrainer, epochs: int | None, name: str) -> int:
    """The end-point epochs before the control points are learned: ``trainer.epochs`` unless
    ``epochs`` (at least 1) is given."""
    if epochs is None:
        return trainer.epochs
    return integer(epochs, f"{name}: warmup_epochs", minimum=1)
