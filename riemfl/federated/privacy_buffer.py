"""Client-level differential privacy of FedBuff's sum-only buffer (:class:`BufferPrivacy`).

The asynchronous counterpart of :mod:`riemfl.federated.privacy`: the same settings, clipping
and Gaussian noise, applied per arrival and per full buffer, with a per-client accountant.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import CheckpointError
from .privacy import DPSettings, clip_rows, gaussian, update_norms
from .privacy_accounting import ClientLevelAccountant

__all__ = ["BufferPrivacy"]


class BufferPrivacy:
    r"""Client-level DP of FedBuff's sum-only buffer (:class:`~riemfl.federated.FedBuff`,
    ``privacy=``).

    Each arrival's :math:`\Delta_i = x^t - x_i` is clipped to Frobenius norm C (client side;
    ``mode="local"``: the client adds :math:`N(0, \sigma^2C^2)` too); when the buffer is full,
    central mode adds :math:`N(0, \sigma^2C^2)` to its sum. A client may arrive k times in one
    buffer, so the sensitivity of that buffer's sum to its data is 2kC (replace one client): the
    accountant charges it :math:`(2k)^2` (:mod:`riemfl.federated.privacy_accounting`); in local
    mode every arrival is a release of sensitivity 2C. :math:`\varepsilon` is that of the client
    charged most so far (no amplification by sampling: who arrives is the scheduler's choice).
    """

    def __init__(self, settings: DPSettings) -> None:
        self.settings = settings
        self.accountant = ClientLevelAccountant(settings.noise_multiplier, settings.delta)
        self.reset(0)
        self.seed(None)

    def reset(self, n_clients: int) -> None:
        """A new run of ``n_clients`` clients: nothing charged, an empty buffer."""
        self.loads = np.zeros(n_clients)
        self.in_buffer = np.zeros(n_clients, dtype=np.int64)
        self.accountant.set_unsampled_load(0.0)

    def seed(self, seq: np.random.SeedSequence | int | None) -> None:
        """The central and local noise generators, from the run's seed sequence."""
        if not isinstance(seq, np.random.SeedSequence):
            seq = np.random.SeedSequence(seq)
        central, local = seq.spawn(2)
        self.central, self.local = np.random.default_rng(central), np.random.default_rng(local)

    def client_update(self, client: int, delta: Any) -> Any:
        """What client ``client`` puts into the buffer: ``delta`` clipped (and noised)."""
        s = self.settings
        row = {"d": delta[None]}
        clipped, _ = clip_rows(row, update_norms(None, None, row), s.clip)
        out = clipped["d"][0]
        if s.mode == "local":
            if s.std > 0:
                out = out + gaussian(self.local, out, s.std)
            self._charge(client, 4.0)
        else:
            self.in_buffer[client] += 1
        return out

    def decoded_update(self, delta: Any) -> Any:
        """A compressed client's update as the server decodes it, clipped to C again under
        central noise (a decoded update can be longer than the clipped one: QSGD's rounding,
        an error-feedback residual), so each contribution to the noisy sum stays within C;
        unchanged under local noise (the compressor post-processes the noised update)."""
        if self.settings.mode != "central":
            return delta
        row = {"d": delta[None]}
        clipped, _ = clip_rows(row, update_norms(None, None, row), self.settings.clip)
        return clipped["d"][0]

    def flush(self, total: Any) -> Any:
        """The buffer's sum as the server reads it (central noise added); charges its
        contributors."""
        s = self.settings
        if s.mode == "central":
            if s.std > 0:
                total = total + gaussian(self.central, total, s.std)
            for client in np.flatnonzero(self.in_buffer):
                self._charge(int(client), (2.0 * self.in_buffer[client]) ** 2)
            self.in_buffer[:] = 0
        return total

    def _charge(self, client: int, load: float) -> None:
        self.loads[client] += load
        self.accountant.set_unsampled_load(float(self.loads.max()))

    def epsilon(self) -> float:
        return self.accountant.epsilon()

    def state_dict(self) -> dict[str, Any]:
        return {
            "central": self.central.bit_generator.state,
            "local": self.local.bit_generator.state,
            "loads": self.loads.copy(),
            "in_buffer": self.in_buffer.copy(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        loads = np.asarray(state["loads"], dtype=float)
        in_buffer = np.asarray(state["in_buffer"], dtype=np.int64)
        if loads.shape != self.loads.shape or in_buffer.shape != self.in_buffer.shape:
            raise CheckpointError(
                f"FedBuff privacy state: expected {len(self.loads)} clients, found "
                f"{loads.shape} and {in_buffer.shape}"
            )
        self.central.bit_generator.state = state["central"]
        self.local.bit_generator.state = state["local"]
        self.loads, self.in_buffer = loads, in_buffer
        self.accountant.set_unsampled_load(float(loads.max()) if loads.size else 0.0)
