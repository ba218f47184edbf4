"""What the FLoRAL ablations run: the rows of Tables 2, 4 and 5, the paper's numbers, settings.

Almansoori et al. 2024, App. G.3, ablate FLoRAL on CIFAR-10 (rotation R and label shift LS, 4
clusters) and CIFAR-100 (10 clusters): Table 2 the budget rho and the number of adaptors C (a
multiple of the true number of clusters), Table 4 the ConvLoRA variant (App. F.1), Table 5 which
adaptors (LoRA on linear layers, ConvLoRA on convolutions, both, none) with and without the bias
adaptors. The paper does not state the ablations' setting, and their numbers are not Table 1's
(Table 2's x1 / 1% row is 70.2 / 74.1 / 51.7, Table 1's FLoRAL(1%) 65.5 / 62.8 / 81.3 or
68.9 / 72.2 / 82.4); the three tables share one default row: Table 2's x1 / 1%, Table 4's
Balanced 2D and Table 5's "Both" with bias adaptors (the same three numbers).

Here each table runs on the digits stand-in of Table 1 (its "Full R" and "Full LS" columns,
compared with the paper's CIFAR-10 R and LS columns; the CIFAR-100 column, a VGG-8 on 100
classes in 10 label clusters, has no stand-in and is shown for reference only) with
:class:`riemfl.nn.SmallCNN` (two 3 x 3 convolutions, 1 -> 16 -> 32 channels, then 128 -> 64 ->
10), the shape of the paper's CIFAR-10 model ("2 x Conv -> MLP", Table 6): Table 1's MLP has
no convolution for Tables 4 and 5 to adapt, and one model for the three tables keeps their
shared row one run. Every row is FLoRAL with learned routing (the ablation rows with C not the
true number of clusters have no oracle routing), C = 4 and rho = 1% unless the row varies them;
the default row's settings are every other row's.

Table 5's bias column is tick marks in the paper; the rows are read as "without" then "with"
bias adaptors in each pair, since the pair's second "Both" row is the default row (bias adaptors
on, Sec. 3.2) and the second "LoRA" row equals Table 4's "None" (no ConvLoRA, the default
otherwise). "None" has no adaptors, so no bias adaptors either (they belong to an adapted layer):
the paper's two "None" rows are equal, and both rows here are one FedAvg run.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .settings import CifarSettings, Method, Settings, cifar_kind
from .settings import column as column_of

__all__ = [
    "PAPER_ABLATION_COLUMNS",
    "ABLATION_COLUMNS",
    "CIFAR_ABLATION_COLUMNS",
    "DIGITS_ABLATION_COLUMNS",
    "AblationRow",
    "Ordering",
    "AblationTable",
    "TABLES",
    "ablation_settings",
    "cifar_ablation_settings",
]

#: the paper's columns of Tables 2, 4 and 5, in the order of ``AblationRow.paper``
PAPER_ABLATION_COLUMNS: tuple[str, ...] = ("CIFAR-10 R", "CIFAR-10 LS", "CIFAR-100")

#: the digits columns (labels of Table 1's ``COLUMNS``) and the paper column each is compared with
DIGITS_ABLATION_COLUMNS: tuple[tuple[str, int], ...] = (("Full R", 0), ("Full LS", 1))
#: the CIFAR columns (labels of Table 1's ``CIFAR_COLUMNS``): the paper's own, with the user's files
CIFAR_ABLATION_COLUMNS: tuple[tuple[str, int], ...] = (
    ("C10 Full R", 0),
    ("C10 Full LS", 1),
    ("C100 Full", 2),
)
#: every column an ablation table can run, with its paper column
ABLATION_COLUMNS: tuple[tuple[str, int], ...] = DIGITS_ABLATION_COLUMNS + CIFAR_ABLATION_COLUMNS


@dataclass(frozen=True)
class AblationRow:
    """One row of an ablation table: a FLoRAL configuration and the paper's numbers.

    ``clusters`` is C as a multiple of the true number of clusters; ``layer_types`` the layers
    that get adaptors (empty: no adaptors, a FedAvg model); ``paper`` the paper's accuracy in
    :data:`PAPER_ABLATION_COLUMNS` order, None for a row the paper does not have.
    """

    label: str
    paper: tuple[float, float, float] | None = None
    clusters: float = 1.0
    rho: float = 0.01
    layer_types: tuple[str, ...] = ("conv2d", "linear")
    conv_variant: str = "balanced_2d"
    bias: bool = True

    @property
    def adapted(self) -> bool:
        """Whether the row has adaptors at all."""
        return bool(self.layer_types)

    @property
    def key(self) -> str:
        """The configuration as the run files name it: rows of the same configuration (in one
        table or across tables) share their runs."""
        if not self.adapted:
            return "fedavg"
        layers = sorted(self.layer_types)
        parts = [f"c{self.clusters:g}x", f"rho{100 * self.rho:g}pct", "+".join(layers)]
        if "conv2d" in layers:
            parts.append(self.conv_variant)
        parts.append("bias" if self.bias else "nobias")
        return "-".join(parts)

    @property
    def method(self) -> Method:
        """The row as a Table 1 method: FLoRAL (learned routing) or, without adaptors, FedAvg."""
        if not self.adapted:
            return Method(self.label, "fedavg")
        return Method(self.label, "floral", "learned", self.rho)

    @property
    def options(self) -> dict[str, object]:
        """The :func:`~riemfl.nn.floral.floralize` arguments of the row."""
        return {
            "layer_types": tuple(sorted(self.layer_types)),
            "conv_variant": self.conv_variant,
            "bias": self.bias,
        }

    def n_clusters(self, true: int) -> int:
        """C for a task of ``true`` clusters (at least 1)."""
        return max(1, round(self.clusters * true))


@dataclass(frozen=True)
class Ordering:
    """A claim about a table: in each column every row of ``above`` beats every row of
    ``below``; ``claim`` quotes or states it, ``source`` says where."""

    claim: str
    source: str
    above: tuple[str, ...]
    below: tuple[str, ...]


@dataclass(frozen=True)
class AblationTable:
    """One ablation table: its rows, the claims checked on it and what the stand-in shows."""

    number: int
    title: str
    source: str
    rows: tuple[AblationRow, ...]
    orderings: tuple[Ordering, ...]
    stand_in: str

    def row(self, label: str) -> AblationRow:
        """The row with this label."""
        return next(r for r in self.rows if r.label == label)


_G3 = "Almansoori et al. 2024, App. G.3"

_TABLE2 = AblationTable(
    2,
    "Ablation of rho and C (C a multiple of the true number of clusters)",
    f"{_G3}, Table 2",
    (
        AblationRow("x0.5, 1%", (66.5, 36.3, 48.8), clusters=0.5),
        AblationRow("x0.5, 10%", (66.8, 41.6, 50.9), clusters=0.5, rho=0.1),
        AblationRow("x1, 1%", (70.2, 74.1, 51.7)),
        AblationRow("x1, 10%", (71.5, 74.2, 57.4), rho=0.1),
        AblationRow("x2, 1%", (69.0, 73.8, 51.3), clusters=2.0),
        AblationRow("x2, 10%", (70.8, 74.1, 54.8), clusters=2.0, rho=0.1),
    ),
    (
        Ordering(
            "choosing C to be less than the number of ground-truth clusters can hurt",
            _G3,
            ("x1, 1%", "x1, 10%"),
            ("x0.5, 1%", "x0.5, 10%"),
        ),
        Ordering(
            "a significantly larger C can hurt performance for smaller rho",
            _G3,
            ("x1, 1%",),
            ("x2, 1%",),
        ),
        Ordering("a larger rho fixes this", _G3, ("x2, 10%",), ("x2, 1%",)),
    ),
    "C = 2, 4 and 8 adaptors for the 4 clusters. At rho = 1% every adapted layer of the CNN "
    "has the minimum rank 1 (the budget's rank is below 1), so C is the only capacity that "
    "moves between the 1% rows; at 10% the second convolution and the first dense layer have "
    "ranks 3 and 4. The paper's large effect, C below the number of clusters on label shift "
    "(36 to 42 against 74 points), is the one the stand-in can show; the differences its other "
    "two claims rest on (0.3 to 1.8 points on CIFAR-10) are within our seed-to-seed spread.",
)

_TABLE4 = AblationTable(
    4,
    "Ablation of the ConvLoRA variant",
    f"{_G3}, Table 4",
    (
        AblationRow("Balanced 2D", (70.2, 74.1, 51.7)),
        AblationRow("In Layer", (67.6, 73.5, 49.1), conv_variant="in_layer"),
        AblationRow("Out Layer", (68.5, 74.0, 51.9), conv_variant="out_layer"),
        AblationRow("None", (67.6, 73.9, 50.8), layer_types=("linear",)),
        AblationRow("Filter-wise", None, conv_variant="filter_wise"),
        AblationRow("Reshaped linear", None, conv_variant="reshaped_linear"),
    ),
    (
        Ordering(
            "the Balanced 2D case is consistently the best option given a fixed rho",
            _G3,
            ("Balanced 2D",),
            ("In Layer", "Out Layer", "None"),
        ),
    ),
    "The paper's rows are Balanced 2D, In Layer, Out Layer and None (no ConvLoRA; LoRA and "
    "bias adaptors still on); Filter-wise and Reshaped linear (App. F.1) are riemfl's extra "
    "rows, without paper numbers and outside the rank correlation. At rho = 1% every ConvLoRA "
    "of the CNN has rank 1, so the variants differ in which kernel axes a rank-1 adaptor spans "
    "and in their parameter counts (Filter-wise: c_out times more, as large as the second "
    "convolution's kernel); Reshaped linear is Out Layer stored as a linear LoRA: the same "
    "adaptors from the same initial draw, hence the same run up to rounding (a check of the "
    "two implementations, not a variant that can differ here). The convolutions of an 8 x 8 "
    "digit model are small (1 and 16 input channels), and the paper's differences (0.1 to 2.6 "
    "points) are within our seed-to-seed spread: the stand-in can show a large effect of the "
    "variant, not the paper's ordering.",
)

_TABLE5 = AblationTable(
    5,
    "Ablation of the adaptors, without and with bias adaptors",
    f"{_G3}, Table 5",
    (
        AblationRow("ConvLoRA, no bias", (69.8, 72.7, 45.1), layer_types=("conv2d",), bias=False),
        AblationRow("ConvLoRA + bias", (67.6, 73.4, 45.8), layer_types=("conv2d",)),
        AblationRow("LoRA, no bias", (68.7, 73.7, 46.6), layer_types=("linear",), bias=False),
        AblationRow("LoRA + bias", (67.6, 73.9, 50.8), layer_types=("linear",)),
        AblationRow("Both, no bias", (68.9, 73.3, 47.9), bias=False),
        AblationRow("Both + bias", (70.2, 74.1, 51.7)),
        AblationRow("None, no bias", (64.6, 21.9, 12.1), layer_types=(), bias=False),
        AblationRow("None + bias", (64.6, 21.9, 12.1), layer_types=()),
    ),
    (
        Ordering(
            "the full combination of LoRA, ConvLoRA, and adaptive biases can consistently "
            "achieve the top accuracy",
            _G3,
            ("Both + bias",),
            (
                "ConvLoRA, no bias",
                "ConvLoRA + bias",
                "LoRA, no bias",
                "LoRA + bias",
                "Both, no bias",
                "None, no bias",
            ),
        ),
        Ordering(
            "without adaptors (FedAvg) is the worst row",
            f"{_G3}, Table 5's numbers",
            (
                "ConvLoRA, no bias",
                "ConvLoRA + bias",
                "LoRA, no bias",
                "LoRA + bias",
                "Both, no bias",
                "Both + bias",
            ),
            ("None, no bias",),
        ),
    ),
    "Both None rows are one FedAvg run (no adapted layer, so no bias adaptor). The paper's large "
    "effect, no adaptors on label shift (21.9 against 72.7 to 74.1 points), is the one the "
    "stand-in can show; its differences among the adapted rows (0.2 to 2.6 points on CIFAR-10) "
    "are within our seed-to-seed spread.",
)

#: the ablation tables by their number in the paper
TABLES: dict[int, AblationTable] = {t.number: t for t in (_TABLE2, _TABLE4, _TABLE5)}


def ablation_settings(quick: bool) -> Settings:
    """The ablations' training settings: Table 1's, on its two full-data columns.

    The full form: Table 1's clients, rounds (300), seeds (0 and 1) and learning rates (a pilot
    of FLoRAL(1%) with the CNN at lr 0.1 reached 93% on both columns by round 300). ``quick``:
    25 rounds, 4 clients per round, batch 32, lr 0.3 (at 0.1 the CNN is still near chance after
    25 rounds), seed 0, the test set at the first and last round only; a table's 12 to 14 runs
    take 13 to 18 s of CPU. The quick numbers are a smoke test, not a result.

    Parameters
    ----------
    quick : bool
        The quick form.

    Returns
    -------
    Settings
    """
    columns = tuple(label for label, _ in DIGITS_ABLATION_COLUMNS)
    if quick:
        return Settings(
            rounds=25,
            seeds=(0,),
            clients_per_round=4,
            batch_size=32,
            lr=0.3,
            record_every=25,  # the first and the last round: evaluation is a third of a run
            columns=columns,
        )
    return Settings(rounds=300, seeds=(0, 1), record_every=10, columns=columns)


def cifar_ablation_settings(data: str, kinds: tuple[str, ...], quick: bool) -> Settings:
    """The ablations on the user's CIFAR files: the paper's columns (:data:`CIFAR_ABLATION_
    COLUMNS`) of the kinds found, with Table 1's CIFAR settings (K, C, share per round,
    learning rates, server and augmentation of :class:`~riemfl.experiments.floral.settings.
    CifarSettings`; its rounds, seeds and recording).

    Parameters
    ----------
    data : str
        The directory of the files.
    kinds : tuple of str
        The kinds found there (``"cifar10"``, ``"cifar100"``).
    quick : bool
        :meth:`CifarSettings.quick`'s sizes (20 rounds, K = 8 / 20, 1000 training rows).

    Returns
    -------
    Settings
    """
    cifar = replace(CifarSettings.quick() if quick else CifarSettings(), data=data)
    columns = tuple(
        label for label, _ in CIFAR_ABLATION_COLUMNS if cifar_kind(column_of(label)) in kinds
    )
    return Settings(
        rounds=cifar.rounds,
        seeds=cifar.seeds,
        record_every=cifar.record_every,
        columns=columns,
        cifar=cifar,
    )
