r"""What the experiment fixes: the problems, the clocks, the methods' settings, the claims' rules.

Licudi et al. 2025 run AsyncBezier on Euclidean models only; every number here is riemfl's
choice, fixed before the runs.

* **Rates.** One server rate :math:`\lambda` per method, the fraction of one update applied per
  arrival: FedAsync mixes :math:`\lambda` of the way to the local model
  (``server_lr`` :math:`= \lambda n` with the uniform client weights :math:`w_i = 1/n`),
  FedOrtho too after removing the update's component along the drift (Licudi et al. 2025,
  Sec. 4.1: FedAsync with OrthoDC, :math:`\vartheta = 1`), AsyncBezier steps the fraction
  :math:`\lambda` along the learned curve (the same ``server_lr``; :math:`\alpha = 0`, so the
  staleness penalty is 1), FedBuff applies :math:`\lambda` times the mean of its K buffered
  updates (:math:`\beta = \lambda/K`). Each method's :math:`\lambda` comes from
  :attr:`Settings.rate_grid` by the paper's own protocol (Licudi et al. 2025, App. B: a line
  search per method) on a tuning seed that no reported run uses (the quick form: two rates,
  shorter runs); ``tune=False`` gives every method :attr:`Settings.default_rate`.
* **Equal work.** Every client update costs K gradients of the client's loss: K1 warm-up and
  K - K1 curve steps for AsyncBezier, K local steps for the point methods, all with the same
  local step size and full local gradients. FedAsync, FedOrtho and AsyncBezier take one server
  step per update, FedBuff one per K updates, so FedBuff runs ``steps / buffer_size`` server
  steps: every method receives ``steps`` client updates.
* **Clocks.** The same heterogeneous clients for every method: client i's local run lasts a
  log-normal time (sigma 0.5) of mean K times its slowdown, the slowdowns geometric from 1 to
  :attr:`Settings.slowest`; every client trains at once (one worker each).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import ParameterError

__all__ = ["METHODS", "PROBLEMS", "Settings"]

#: the methods, in the report's order (the proposal last); FedOrtho is FedAsync with the drift
#: correction AsyncBezier applies to each control point (OrthoDC, vartheta = 1), without a curve
METHODS = ("FedAsync", "FedOrtho", "FedBuff", "AsyncBezier")
#: the problems, by their key in the results
PROBLEMS = ("kpca", "tree")


@dataclass(frozen=True)
class Settings:
    """The experiment's settings (defaults: the full form; :meth:`quick`: the quick one).

    Attributes
    ----------
    steps : int
        Client updates per run (server steps of FedAsync and AsyncBezier); a multiple of
        ``buffer_size``.
    seeds : int
        Runs per (problem, method), seeds 0..seeds-1.
    buffer_size : int
        FedBuff's K.
    warmup_steps, curve_steps : int
        AsyncBezier's K1 and K - K1; the point methods take K1 + (K - K1) local steps.
    rate_grid : tuple of float
        The server rates :math:`\\lambda` of the line search.
    default_rate : float
        Every method's :math:`\\lambda` without a line search.
    tune : bool
        Run the line search (else ``default_rate``).
    tune_steps, tune_seed : int
        Client updates and seed of the line-search runs.
    rows : int
        Evaluations per run (besides the start).
    target_fraction : float
        :math:`T_e`'s target: e = this fraction of the initial suboptimality (mean over seeds).
    tail : float
        The final suboptimality of a run is the mean over this last fraction of its evaluations.
    slowest : float
        The slowdown of the slowest client (the fastest has 1).
    kpca_clients, kpca_dim, kpca_components, kpca_rows : int
        n, d, k and p of Zhang et al. 2024's synthetic kPCA on St(d, k).
    kpca_step : float
        The local step size is ``kpca_step / L``, L the largest client's smoothness.
    tree_clients, tree_branching, tree_depth, tree_negatives : int
        The hyperbolic tree embedding (relations split by subtree: heterogeneous clients) and
        the negatives per relation.
    tree_step : float
        Its local step size.
    data_seed : int
        The problems' data.
    """

    steps: int = 200
    seeds: int = 5
    buffer_size: int = 5
    warmup_steps: int = 2
    curve_steps: int = 2
    rate_grid: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
    default_rate: float = 0.5
    tune: bool = True
    tune_steps: int = 100
    tune_seed: int = 100
    rows: int = 20
    target_fraction: float = 0.5
    tail: float = 0.25
    slowest: float = 8.0
    kpca_clients: int = 10
    kpca_dim: int = 10
    kpca_components: int = 3
    kpca_rows: int = 15
    kpca_step: float = 0.5
    tree_clients: int = 6
    tree_branching: int = 2
    tree_depth: int = 3
    tree_negatives: int = 5
    tree_step: float = 1.0
    data_seed: int = 0

    def __post_init__(self) -> None:
        for name in ("steps", "tune_steps"):
            if getattr(self, name) % self.buffer_size:
                raise ParameterError(
                    f"Settings.{name} = {getattr(self, name)} must be a multiple of buffer_size "
                    f"= {self.buffer_size} (every method gets the same client updates)"
                )
        if not 0.0 < self.target_fraction < 1.0 or not 0.0 < self.tail <= 1.0:
            raise ParameterError("target_fraction must be in (0, 1) and tail in (0, 1]")

    @classmethod
    def quick(cls) -> Settings:
        """60 updates per run, two seeds, a line search over two rates of 30 updates."""
        return replace(cls(), steps=60, seeds=2, rows=12, rate_grid=(0.5, 1.0), tune_steps=30)

    @property
    def local_steps(self) -> int:
        """K, the gradients per client update."""
        return self.warmup_steps + self.curve_steps

    def runs(self) -> int:
        """The runs, for the progress bar: the line search's and the reported ones."""
        search = len(self.rate_grid) if self.tune else 0
        return len(PROBLEMS) * len(METHODS) * (search + self.seeds)
