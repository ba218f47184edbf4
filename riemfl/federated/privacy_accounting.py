r"""Client-level privacy accounting: Rényi DP of Gaussian sums, composed over a run.

The accountant of :mod:`riemfl.federated.privacy`. It counts two kinds of release, each a
Gaussian mechanism whose noise has standard deviation :math:`\sigma C` and whose input has
:math:`\ell_2` sensitivity :math:`\Delta` (in units of the clipping norm C), under the
**replace-one-client** neighbouring relation (two federations differ in the data of one client;
the number of clients n is public, as the server divides by the number of uploads):

* a *sampled* release: the sum over a uniformly random subset of m of the n clients, drawn
  without replacement (what riemfl's :func:`~riemfl.federated.rounds.sample_round` does), with
  :math:`\Delta = 2` (replacing one client's clipped update moves the sum by at most 2C). Its
  RDP is dp_accounting's ``SampledWithoutReplacementDpEvent`` (Wang et al. 2019, Thm. 27 as
  implemented by dp_accounting) of a Gaussian with noise multiplier :math:`\sigma/2`, or, at an
  order where it is smaller, the unsampled Gaussian's (subsampling never weakens privacy);
* an *unsampled* release (every client takes part, local noise, or asynchronous buffers): a
  Gaussian with noise multiplier :math:`\sigma/\Delta`. A client's unsampled releases compose to
  one Gaussian with multiplier :math:`\sigma/\sqrt{S}`, :math:`S = \sum_k \Delta_k^2` (the
  Gaussian's RDP :math:`\alpha\Delta^2/(2\sigma^2)` is additive), so the accountant keeps only S.

:math:`(\varepsilon, \delta)` follows from the composed RDP curve by dp_accounting's
``compute_epsilon`` (Mironov 2017, Prop. 3, with dp_accounting's tighter conversion). The RDP of
one sampled release is computed once per accountant (it costs about 0.1 s) and scaled by the
number of releases.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..errors import ParameterError
from ..extras import import_extra

__all__ = ["ClientLevelAccountant", "REPLACE_ONE"]

#: the neighbouring relation every epsilon riemfl reports is stated for
REPLACE_ONE = "replace_one_client"


def _dp() -> Any:
    return import_extra("dp_accounting", "the accounting of differential privacy")


def _orders() -> np.ndarray:
    return np.asarray(_dp().rdp.rdp_privacy_accountant.DEFAULT_RDP_ORDERS, dtype=float)


@functools.lru_cache(maxsize=64)
def _sampled_rdp(population: int, sample_size: int, noise_multiplier: float) -> tuple[float, ...]:
    """The RDP curve of a Gaussian sum over m of n clients sampled without replacement, replace
    one client (dp_accounting, computed once per setting: it takes about 0.1 s)."""
    dp = _dp()
    orders = _orders()
    accountant = dp.rdp.RdpAccountant(
        orders, neighboring_relation=dp.NeighboringRelation.REPLACE_ONE
    )
    gaussian = dp.GaussianDpEvent(noise_multiplier / 2.0)
    accountant.compose(dp.SampledWithoutReplacementDpEvent(population, sample_size, gaussian))
    # dp_accounting has no public getter of the composed curve; the tests compare the epsilon
    # with its own composition of the same events
    wor = np.array(accountant._rdp, dtype=float)
    # sampling never weakens privacy (quasi-convexity of the Renyi divergence): at each order
    # the bound is also at most the unsampled Gaussian's, tighter than the sampled bound at low
    # noise
    return tuple(np.minimum(wor, orders * 4.0 / (2.0 * noise_multiplier**2)))


class ClientLevelAccountant:
    r"""The :math:`(\varepsilon, \delta)` of a run's releases so far (module docstring).

    Parameters
    ----------
    noise_multiplier : float
        :math:`\sigma` (noise std over the clipping norm); 0: no privacy (:math:`\varepsilon =
        \infty` after the first release).
    delta : float
        The target :math:`\delta`.
    population, sample_size : int, optional
        n and m of the sampled releases (only :meth:`sampled` needs them).
    """

    def __init__(
        self,
        noise_multiplier: float,
        delta: float,
        population: int | None = None,
        sample_size: int | None = None,
    ) -> None:
        self.noise_multiplier, self.delta = float(noise_multiplier), float(delta)
        self.population, self.sample_size = population, sample_size
        self.sampled_releases = 0
        self.unsampled_load = 0.0  # S = sum of squared sensitivities (units of C)
        self._epsilon: tuple[tuple[int, float], float] | None = None

    @property
    def orders(self) -> np.ndarray:
        return _orders()

    def sampled(self, count: int = 1) -> None:
        """Record ``count`` releases of a sum over m of n clients sampled without replacement."""
        if self.population is None or self.sample_size is None:
            raise ParameterError("a sampled release needs the population and sample size")
        self.sampled_releases += int(count)

    def unsampled(self, sensitivity: float = 2.0) -> None:
        """Record one unsampled release of sensitivity ``sensitivity`` (units of C)."""
        self.unsampled_load += float(sensitivity) ** 2

    def set_unsampled_load(self, load: float) -> None:
        """Set S directly (the worst client's sum of squared sensitivities, e.g. FedBuff's)."""
        self.unsampled_load = float(load)

    def _sampled_rdp(self) -> np.ndarray:
        """The RDP curve of one sampled release."""
        return np.asarray(
            _sampled_rdp(self.population, self.sample_size, self.noise_multiplier), dtype=float
        )

    def epsilon(self) -> float:
        r""":math:`\varepsilon` at :attr:`delta` of every release recorded so far (0 before
        the first, :math:`\infty` when :math:`\sigma = 0`)."""
        key = (self.sampled_releases, self.unsampled_load)
        if self._epsilon is not None and self._epsilon[0] == key:
            return self._epsilon[1]
        if not self.sampled_releases and not self.unsampled_load:
            eps = 0.0
        elif self.noise_multiplier == 0.0:
            eps = math.inf
        else:
            rdp = self.orders * self.unsampled_load / (2.0 * self.noise_multiplier**2)
            if self.sampled_releases:
                rdp = rdp + self.sampled_releases * self._sampled_rdp()
            eps = float(_dp().rdp.compute_epsilon(self.orders, rdp, self.delta)[0])
        self._epsilon = (key, eps)
        return eps

    def state_dict(self) -> dict[str, Any]:
        return {"sampled": self.sampled_releases, "unsampled_load": self.unsampled_load}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.sampled_releases = int(state["sampled"])
        self.unsampled_load = float(state["unsampled_load"])
