r"""What the study fixes: the runs, the proposals swept, the smoothing and the verdict rules.

Licudi 2025 (TR), Sec. 3-4, gives the setup (8 clients with data proportional to their index,
LeNet-5, FedAsync and AsyncCurve without delay correction, a checkpoint per server step, an
offline one-step sweep, DC-ASGD's adaptive lambda x 2.5, a Gaussian filter of sigma = 100
truncated at 2 sigma, normalised relative losses averaged over the two algorithms) and one
number (Q ~= 1.0275, 99% CI +/- 0.0139, on test loss). Everything else here is riemfl's choice,
listed in the package docstring.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace

__all__ = [
    "ALGORITHMS",
    "ENDPOINTS",
    "FIGURE1",
    "CONTROL",
    "CONTROL_PANELS",
    "PAPER",
    "Settings",
]

#: the two underlying federated algorithms, run without delay correction
ALGORITHMS = ("fedasync", "asynccurve")

#: the endpoint proposals of the sweep: name -> what it is (Licudi 2025 (TR), eq. (15))
ENDPOINTS = {
    "asgd": "ASGD, trusted pseudo-gradient (lambda = 0, M = I)",
    "fedasync": "FedAsync, trusted position (lambda = 1, M = I)",
    "orthograd": "OrthoGrad (OrthoCorrect, alpha = vartheta = 0)",
    "orthopos": "OrthoPos (OrthoCorrect, alpha = 1, vartheta = 0)",
    "dcasgd": "DC-ASGD, adaptive lambda x 2.5 (M = diag(Delta)^2)",
    "orthostrict": "OrthoStrict (OrthoCorrect, vartheta = 1)",
    "halfway": "eq. (15) with lambda = 1/2, M = I (between trusting gradient and position)",
}

#: the endpoint proposals of Fig. 1 (the ones the report's text names), normalised together
FIGURE1 = ("asgd", "fedasync", "orthograd", "orthopos", "dcasgd")

#: the control-point proposals of the sweep (AsyncCurve's checkpoints): name -> what it is
CONTROL = {
    "gradient/line": "straight line to the ASGD end point",
    "gradient/stale": "curve through the learned control point, uncorrected",
    "gradient/translation": "control point translated with the chord (eq. (17), R = I = rotation)",
    "position/line": "straight line to the FedAsync end point",
    "position/stale": "curve through the learned control point, uncorrected",
    "position/translation": "control point's offset kept at the new chord's midpoint (R = I)",
    "position/rotation": "control point's offset rotated with the chord (eq. (17))",
}

#: Fig. 3's panels: the endpoint base -> its proposals (normalised together)
CONTROL_PANELS = {
    "gradient": ("gradient/line", "gradient/stale", "gradient/translation"),
    "position": ("position/line", "position/stale", "position/translation", "position/rotation"),
}

#: what the report states (Licudi 2025 (TR), Sec. 3-4)
PAPER = {
    "Q": 1.0275,
    "Q_ci99": 0.0139,
    "sigma": 100.0,
    "truncate": 2.0,
    "dc_scale": 2.5,
    "clients": 8,
    "control_epochs": 5,
    "control_lr": 1e-4,
    "endpoint_lr": 1e-3,
}


@dataclass(frozen=True)
class Settings:
    """The study's settings (defaults: the full form; :meth:`quick`: the quick one).

    Attributes
    ----------
    data : str or None
        LEAF FEMNIST's directory (``train/`` and ``test/`` JSON files); None: the digits
        stand-in.
    seed : int
        The seed of the data split, the initial model, the clients and the timing.
    n_clients : int
        Clients; client i (1-based) holds a share i / sum(1..N) of the training rows.
    steps : int
        Server steps of each run (one checkpoint each).
    epochs : int
        Local epochs E per client run (AsyncCurve: E end-point and E control-point epochs).
    lr, control_lr : float
        Adam's step for the end point and for the control point.
    mu : float
        Proximal weight (FedProx for FedAsync, the Lorentz prox of AsyncCurve).
    batch_size : int
    server_lr : float
        eta_g: the server moves a fraction eta_g w_i of the way (w_i the client's data share).
    gamma : float
        AsyncCurve's orthogonality strength of the control displacement (eq. (30)).
    dc_lambda0, dc_scale, dc_momentum : float
        DC-ASGD's adaptive lambda = dc_scale dc_lambda0 / sqrt(MeanSquare), MeanSquare's
        momentum.
    test_fraction, val_fraction : float
        Shares of the pooled rows held out as the global test and validation sets.
    eval_rows : int or None
        At most this many rows per split in the sweep's evaluations (None: all).
    femnist_rows : int
        Training rows drawn from LEAF FEMNIST (``data``) for the clients.
    sigma, truncate : float
        The Gaussian filter's width (server steps) and truncation (in sigmas).
    dominance : float
        Claim 2 passes when OrthoCorrect on the better base is optimal at at least this share
        of the steps outside the transition windows.
    """

    data: str | None = None
    seed: int = 0
    n_clients: int = 8
    steps: int = 1500
    epochs: int = 2
    lr: float = 1e-2
    control_lr: float = 1e-3
    mu: float = 1e-3
    batch_size: int = 32
    server_lr: float = 1.0
    gamma: float = 1.0
    dc_lambda0: float = 2.0
    dc_scale: float = 2.5
    dc_momentum: float = 0.95
    test_fraction: float = 0.2
    val_fraction: float = 0.1
    eval_rows: int | None = None
    femnist_rows: int = 7200
    sigma: float = 100.0
    truncate: float = 2.0
    dominance: float = 0.75

    @classmethod
    def quick(cls) -> Settings:
        """100 server steps per run, sigma = 5, at most 300 rows per evaluated split."""
        return replace(cls(), steps=100, sigma=5.0, eval_rows=300)

    @property
    def dataset(self) -> str:
        """``"digits"`` or ``"femnist"``."""
        return "digits" if self.data is None else "femnist"

    @property
    def window(self) -> int:
        """Steps on either side of a phase transition left out of claim 2: the filter's radius
        (a change of base is smeared over that many steps by the smoothing itself)."""
        return int(self.truncate * self.sigma + 0.5)

    def runs(self) -> int:
        """Server steps over both runs: the progress bar's total."""
        return len(ALGORITHMS) * self.steps

    def run_key(self, algorithm: str) -> str:
        """The cache name of one run: the algorithm and a hash of every setting it reads
        (not the smoothing or the verdict rules, which only the analysis reads)."""
        keep = {
            k: v for k, v in asdict(self).items() if k not in ("sigma", "truncate", "dominance")
        }
        hashed = hashlib.sha256(json.dumps(keep, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.dataset}-{algorithm}-T{self.steps}-seed{self.seed}-{hashed}"
