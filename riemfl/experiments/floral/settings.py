"""What the FLoRAL reproduction runs: Table 1's rows and columns, the paper's numbers, settings.

The rows (:data:`METHODS`, :data:`SYNTHETIC_METHODS`) and columns (:data:`COLUMNS`,
:data:`CIFAR_COLUMNS`) of the tables, the paper's MNIST and CIFAR numbers (:data:`PAPER_MNIST`,
:data:`PAPER_CIFAR`), the FLoRAL-vs-ensemble gap's rows, reference, seeds and threshold
(:data:`GAP_METHODS`, :data:`GAP_REFERENCE`, :data:`GAP_SEEDS`, :data:`GAP_WITHIN`) and every
training setting (:class:`Settings`, with the CIFAR columns' :class:`CifarSettings`); the package
docstring says why each is what it is.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

__all__ = [
    "Method",
    "METHODS",
    "SYNTHETIC_METHODS",
    "Column",
    "COLUMNS",
    "column",
    "PAPER_COLUMNS",
    "PAPER_MNIST",
    "CIFAR_PAPER_COLUMNS",
    "CIFAR_COLUMNS",
    "PAPER_CIFAR",
    "cifar_kind",
    "GAP_METHODS",
    "GAP_REFERENCE",
    "GAP_SEEDS",
    "GAP_WITHIN",
    "CifarSettings",
    "Settings",
]


@dataclass(frozen=True)
class Method:
    """One row of Table 1: the model kind, its routing and its budget."""

    label: str
    kind: str  # "fedavg" | "local" | "ensemble" | "floral"
    routing: str | None = None  # "learned" | "fixed" (pi*)
    rho: float | None = None

    @property
    def key(self) -> str:
        """The label as the run files spell it (``"FLoRAL(1%) (pi*)"``: ``floral-1pctpistar``)."""
        return (
            self.label.lower()
            .replace(" ", "")
            .replace("(", "-")
            .replace(")", "")
            .replace("%", "pct")
            .replace("*", "star")
        )


METHODS: tuple[Method, ...] = (
    Method("FedAvg", "fedavg"),
    Method("Local Adaptor", "local", rho=0.1),
    Method("Ensemble (learned)", "ensemble", "learned"),
    Method("Ensemble (pi*)", "ensemble", "fixed"),
    Method("FLoRAL(1%) (learned)", "floral", "learned", 0.01),
    Method("FLoRAL(1%) (pi*)", "floral", "fixed", 0.01),
    Method("FLoRAL(10%) (learned)", "floral", "learned", 0.1),
    Method("FLoRAL(10%) (pi*)", "floral", "fixed", 0.1),
)

#: the rows of the synthetic tasks (FLoRAL at the true rank r = 1)
SYNTHETIC_METHODS: tuple[Method, ...] = (
    Method("FedAvg", "fedavg"),
    Method("Local Adaptor", "local"),
    Method("Ensemble (learned)", "ensemble", "learned"),
    Method("Ensemble (pi*)", "ensemble", "fixed"),
    Method("FLoRAL (learned)", "floral", "learned"),
    Method("FLoRAL (pi*)", "floral", "fixed"),
)


@dataclass(frozen=True)
class Column:
    """One column of Table 1: a task (transform) and how much of each client's data it keeps.

    ``keep`` is None for the full data, else the reduced regime keeps
    ``max(min_rows, round(keep N^k))`` of each client's N^k training rows
    (:func:`riemfl.nn.floral.reduce_rows`); ``paper`` indexes the paper's MNIST columns
    (``PAPER_COLUMNS``) the column is compared with.
    """

    label: str
    transform: str  # "rotation" | "label_shift"
    paper: int
    keep: float | None = None
    min_rows: int = 1

    @property
    def reduced(self) -> bool:
        """Whether the column keeps a share of each client's rows."""
        return self.keep is not None

    @property
    def ten_row_minimum(self) -> bool:
        """Reduced with the paper's 10-row minimum (on digits: 14% of the rows)."""
        return self.reduced and self.min_rows == 10

    @property
    def key(self) -> str:
        """The run files' name of the regime: ``full``, ``reduced`` (the 10-row minimum) or
        ``reducedNpct``."""
        if not self.reduced:
            return "full"
        return "reduced" if self.ten_row_minimum else f"reduced{round(100 * self.keep)}pct"


#: the paper's MNIST columns (Almansoori et al. 2024, Table 1), in PAPER_MNIST order
PAPER_COLUMNS: tuple[str, ...] = ("Full R", "Full LS", "Reduced R", "Reduced LS")

#: Table 1 columns of the digits tasks. The paper's reduced regime keeps 5% of each client's
#: rows, at least 10 (Sec. 6): on MNIST (200 rows per client) that is 10 rows, 5%; on digits
#: (~72 rows per client) the minimum dominates and keeps 14%. "Reduced 5%" drops the minimum
#: (4 rows per client), "Reduced 14%" keeps it (10 rows per client, the paper's count).
COLUMNS: tuple[Column, ...] = (
    Column("Full R", "rotation", 0),
    Column("Full LS", "label_shift", 1),
    Column("Reduced 5% R", "rotation", 2, keep=0.05, min_rows=1),
    Column("Reduced 5% LS", "label_shift", 3, keep=0.05, min_rows=1),
    Column("Reduced 14% R", "rotation", 2, keep=0.05, min_rows=10),
    Column("Reduced 14% LS", "label_shift", 3, keep=0.05, min_rows=10),
)


def column(label: str) -> Column:
    """The column of :data:`COLUMNS` or :data:`CIFAR_COLUMNS` with this label.

    Parameters
    ----------
    label : str
        A column label, e.g. ``"Reduced 5% LS"`` or ``"C100 Full"``.

    Returns
    -------
    Column
    """
    return next(c for c in (*COLUMNS, *CIFAR_COLUMNS) if c.label == label)


#: Almansoori et al. 2024, Table 1, MNIST columns: mean and spread, in PAPER_COLUMNS order
PAPER_MNIST: dict[str, tuple[tuple[float, float], ...]] = {
    "FedAvg": ((91.5, 0.6), (25.8, 2.4), (78.2, 0.6), (23.2, 0.9)),
    "Local Adaptor": ((86.6, 0.3), (84.5, 1.8), (47.4, 5.4), (32.0, 2.3)),
    "Ensemble (learned)": ((92.0, 0.1), (93.8, 0.5), (66.7, 5.3), (86.4, 0.4)),
    "Ensemble (pi*)": ((95.8, 0.3), (95.6, 0.3), (88.2, 1.4), (87.6, 1.3)),
    "FLoRAL(1%) (learned)": ((91.3, 0.6), (89.7, 3.2), (73.1, 3.7), (46.0, 9.9)),
    "FLoRAL(1%) (pi*)": ((93.9, 0.8), (93.7, 0.2), (87.5, 2.1), (87.6, 0.5)),
    "FLoRAL(10%) (learned)": ((91.8, 1.0), (93.1, 0.9), (75.7, 2.3), (70.8, 7.1)),
    "FLoRAL(10%) (pi*)": ((94.5, 0.6), (94.2, 0.2), (87.0, 0.7), (86.9, 0.5)),
}

#: the paper's CIFAR columns of Table 1, in PAPER_CIFAR order
CIFAR_PAPER_COLUMNS: tuple[str, ...] = (
    "C10 Full R",
    "C10 Full LS",
    "C10 Reduced R",
    "C10 Reduced LS",
    "C100 Full",
    "C100 Reduced",
)

#: Table 1's CIFAR columns; ``paper`` indexes CIFAR_PAPER_COLUMNS. Reduced: 5%, at least 10 rows
CIFAR_COLUMNS: tuple[Column, ...] = (
    Column("C10 Full R", "rotation", 0),
    Column("C10 Full LS", "label_shift", 1),
    Column("C10 Reduced R", "rotation", 2, keep=0.05, min_rows=10),
    Column("C10 Reduced LS", "label_shift", 3, keep=0.05, min_rows=10),
    Column("C100 Full", "disjoint_labels", 4),
    Column("C100 Reduced", "disjoint_labels", 5, keep=0.05, min_rows=10),
)

#: Almansoori et al. 2024, Table 1, CIFAR columns: mean and spread, in CIFAR_PAPER_COLUMNS order
PAPER_CIFAR: dict[str, tuple[tuple[float, float], ...]] = {
    "FedAvg": ((64.4, 0.3), (21.9, 0.4), (45.6, 0.3), (18.7, 0.4), (29.2, 1.8), (20.7, 1.4)),
    "Local Adaptor": ((66.3, 0.5), (68.8, 0.5), (33.5, 0.5), (30.8, 0.8), (85.1, 0.8), (39.5, 2.8)),
    "Ensemble (learned)": (
        (71.0, 2.8),
        (46.4, 9.2),
        (42.4, 0.9),
        (41.7, 4.6),
        (86.2, 0.0),
        (43.7, 3.2),
    ),
    "Ensemble (pi*)": (
        (73.7, 0.2),
        (73.3, 0.1),
        (45.0, 0.9),
        (45.1, 0.8),
        (92.8, 0.3),
        (55.0, 0.4),
    ),
    "FLoRAL(1%) (learned)": (
        (65.5, 0.4),
        (62.8, 8.8),
        (45.2, 0.3),
        (44.2, 0.9),
        (81.3, 0.5),
        (52.2, 0.5),
    ),
    "FLoRAL(1%) (pi*)": (
        (68.9, 0.2),
        (72.2, 0.2),
        (47.8, 0.9),
        (44.1, 0.6),
        (82.4, 0.2),
        (53.1, 0.4),
    ),
    "FLoRAL(10%) (learned)": (
        (65.1, 0.3),
        (56.2, 5.5),
        (44.5, 0.4),
        (42.1, 0.2),
        (87.3, 0.3),
        (51.2, 1.0),
    ),
    "FLoRAL(10%) (pi*)": (
        (69.3, 0.5),
        (72.1, 0.5),
        (47.2, 0.3),
        (42.7, 0.3),
        (86.6, 0.5),
        (53.9, 0.9),
    ),
}


def cifar_kind(col: Column) -> str:
    """``"cifar100"`` for a disjoint-label column of :data:`CIFAR_COLUMNS`, else ``"cifar10"``."""
    return "cifar100" if col.transform == "disjoint_labels" else "cifar10"


#: the rows of the FLoRAL-vs-ensemble gap (oracle routing pi*), run on ``Settings.gap_seeds``
GAP_METHODS: tuple[str, ...] = ("Ensemble (pi*)", "FLoRAL(1%) (pi*)", "FLoRAL(10%) (pi*)")
#: the gap's reference row: the ensemble with oracle routing
GAP_REFERENCE: str = GAP_METHODS[0]
#: their seeds by default (package docstring: why six)
GAP_SEEDS: tuple[int, ...] = tuple(range(6))
#: the paper's FLoRAL-vs-ensemble gap with reduced data is -1.2 to +0.0 points: "within 1 point"
GAP_WITHIN: float = -1.0


@dataclass
class CifarSettings:
    """The CIFAR columns of Table 1 (package docstring); nothing runs while ``data`` is None.

    K, C and the share of clients per round are the paper's (:func:`~riemfl.experiments.floral.
    cifar.cifar_settings`) unless ``clients`` scales K down; batch size, learning rates, the
    CIFAR-100 server Adam and the augmentation are the authors' code's (the paper gives none).
    """

    #: the directory of the CIFAR files (python version); None: no CIFAR column runs
    data: str | None = None
    #: generate the offline stand-in under ``out/data`` when ``data`` is None
    standin: bool = False
    columns: tuple[str, ...] = tuple(c.label for c in CIFAR_COLUMNS)
    seeds: tuple[int, ...] = (0, 1)
    rounds: int = 500
    #: K per kind ("cifar10", "cifar100"); a kind not named keeps the paper's K
    clients: dict[str, int] = field(default_factory=dict)
    #: (training, test) rows kept from the files, evenly over the classes; None keeps all
    rows: tuple[int, int] | None = None
    #: (training, test) images per class of the generated stand-in, per kind
    standin_per_class: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {"cifar10": (100, 50), "cifar100": (10, 5)}
    )
    batch_size: int = 64
    lr: float = 0.03
    #: CIFAR-100's client learning rate (the authors' code: 0.001, with the server Adam)
    cifar100_lr: float = 0.001
    #: CIFAR-100's server Adam learning rate (the authors' code: 1e-3); None: plain averaging
    cifar100_server_adam: float | None = 1e-3
    router_lr: float = 0.1
    #: random crops (padding 4) and horizontal flips of the training batches (the authors' code)
    augment: bool = True
    evaluation: str = "shard"
    record_every: int = 25

    def client_lr(self, kind: str) -> float:
        """The client learning rate of a kind (``"cifar10"`` or ``"cifar100"``)."""
        return self.cifar100_lr if kind == "cifar100" else self.lr

    @classmethod
    def quick(cls) -> CifarSettings:
        """``--quick`` (and the stand-in): seed 0, 20 rounds, K = 8 / 20, 1000 training rows."""
        return cls(
            seeds=(0,),
            rounds=20,
            clients={"cifar10": 8, "cifar100": 20},
            rows=(1000, 500),
            record_every=5,
        )


@dataclass
class Settings:
    """Every setting of the reproduction (package docstring)."""

    rounds: int = 300
    reduced_rounds: int = 600
    seeds: tuple[int, ...] = (0, 1)
    n_clients: int = 20
    clients_per_round: int = 10
    n_clusters: int = 4
    hidden: int = 200
    batch_size: int = 16
    lr: float = 0.1
    router_lr: float = 1.0
    router_noise: float = 1.0
    evaluation: str = "full"
    record_every: int = 10
    columns: tuple[str, ...] = tuple(c.label for c in COLUMNS)
    #: seeds of the reduced columns' GAP_METHODS rows (the other rows: ``seeds``)
    gap_seeds: tuple[int, ...] = GAP_SEEDS
    synthetic_rounds: dict[str, int] = field(default_factory=lambda: {"linear": 300, "mlp": 100})
    async_steps: int = 100
    data: str | None = None
    #: Table 1's CIFAR columns (recorded in ``results.json`` under ``cifar``, beside their runs)
    cifar: CifarSettings = field(default_factory=CifarSettings)

    @classmethod
    def quick(cls) -> Settings:
        """``--quick``: fewer rounds, seed 0, the paper's 5% reduced columns only."""
        return cls(
            rounds=80,
            reduced_rounds=240,
            seeds=(0,),
            gap_seeds=(0,),
            columns=tuple(c.label for c in COLUMNS if not c.ten_row_minimum),  # the paper's 5%
            record_every=5,
            synthetic_rounds={"linear": 100, "mlp": 40},
            async_steps=30,
            cifar=CifarSettings.quick(),
        )

    def for_mnist(self, data: str, quick: bool) -> Settings:
        """The paper's MNIST setting (K = 300, 10% per round) for the user's file.

        Without the 10-row minimum's columns: on MNIST 5% of a client's 200 rows is 10 rows.

        Parameters
        ----------
        data : str
            The MNIST file (idx or npz).
        quick : bool
            ``--quick``'s rounds (50 / 150) rather than the paper's (500 / 1500).

        Returns
        -------
        Settings
            A copy of these settings.
        """
        return replace(
            self,
            data=data,
            columns=tuple(
                c.label for c in COLUMNS if c.label in self.columns and not c.ten_row_minimum
            ),
            n_clients=300,
            clients_per_round=30,
            batch_size=32,
            router_lr=0.1,
            evaluation="shard",
            rounds=50 if quick else 500,
            reduced_rounds=150 if quick else 1500,
            record_every=5 if quick else 25,
        )

    def for_cifar(self, data: str, kinds: tuple[str, ...]) -> Settings:
        """The CIFAR columns of ``kinds`` on the files in ``data`` (the digits columns unchanged).

        Parameters
        ----------
        data : str
            The directory holding the CIFAR files (:func:`~riemfl.experiments.floral.cifar.
            find_cifar`).
        kinds : tuple of str
            The kinds found there, ``"cifar10"`` and/or ``"cifar100"``.

        Returns
        -------
        Settings
            A copy of these settings.
        """
        columns = tuple(
            c.label
            for c in CIFAR_COLUMNS
            if c.label in self.cifar.columns and cifar_kind(c) in kinds
        )
        return replace(self, cifar=replace(self.cifar, data=data, columns=columns))

    def with_cifar_standin(self) -> Settings:
        """The CIFAR columns on the generated stand-in, at ``--quick``'s sizes.

        Returns
        -------
        Settings
            A copy of these settings; :func:`~riemfl.experiments.floral.reproduce` writes the
            files under ``out/data``.
        """
        quick = replace(CifarSettings.quick(), columns=self.cifar.columns, standin=True)
        return replace(self, cifar=quick)
