"""Client blocks of the synchronous engine: the same run, faults isolated per block, and a
working memory of a few stacks of uploads whatever the number of clients."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from _problems import FlakyProblem

from riemfl import tuning
from riemfl.errors import ParameterError
from riemfl.experiments.registry import ALGORITHMS, build_algorithm
from riemfl.federated import ClientDroppedWarning, RFedProj, RunOptions, run_sync
from riemfl.federated.client_blocks import BlockAssembler, StackOutcome, block_ranges
from riemfl.federated.engine import StackedClients
from riemfl.problems import KPCAProblem
from riemfl.problems.checks import client_index
from riemfl.testing import importorskip

UPLOAD_BYTES = 7 * 3 * 8  # one client's upload on St(7, 3) in float64 (the stiefel_problem)


@pytest.fixture
def blocks_of_two(monkeypatch):
    """Blocks of two clients, counted: returns the list of block sizes the engine ran."""
    monkeypatch.setattr(tuning, "CLIENT_BLOCK_BYTES", 2 * UPLOAD_BYTES)
    sizes: list[int] = []
    run_stack = StackedClients._run_stack

    def counted(self, ctx, *args):
        sizes.append(len(ctx.clients))
        return run_stack(self, ctx, *args)

    monkeypatch.setattr(StackedClients, "_run_stack", counted)
    return sizes


def _run(problem, name, **kw):
    algorithm = build_algorithm(name, step_size=0.02, local_steps=3)
    return run_sync(problem, algorithm, 4, options=RunOptions(seed=5), **kw)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
@pytest.mark.parametrize("kw", [{}, {"clients_per_round": 5, "batch_size": 4}])
def test_blocks_give_the_one_stack_run(stiefel_problem, blocks_of_two, monkeypatch, name, kw):
    """Equal up to rounding (BLAS may choose another kernel for another stack size), and
    reproducible bit for bit in blocks."""
    blocked = _run(stiefel_problem, name, **kw)
    assert set(blocks_of_two) == {2} or set(blocks_of_two) == {1, 2}
    monkeypatch.setattr(tuning, "CLIENT_BLOCK_BYTES", 2**40)
    blocks_of_two.clear()
    whole = _run(stiefel_problem, name, **kw)
    assert set(blocks_of_two) >= {6} or set(blocks_of_two) == {5}  # one stack per phase
    np.testing.assert_allclose(blocked.final_point, whole.final_point, rtol=0, atol=1e-13)
    np.testing.assert_allclose(blocked.loss, whole.loss, rtol=1e-13)
    assert blocked.uplink_matrices == whole.uplink_matrices
    monkeypatch.setattr(tuning, "CLIENT_BLOCK_BYTES", 2 * UPLOAD_BYTES)
    again = _run(stiefel_problem, name, **kw)
    np.testing.assert_array_equal(again.final_point, blocked.final_point)


def test_a_failing_client_is_dropped_from_its_block_only(stiefel_problem, blocks_of_two):
    """Client 3 fails in the block {2, 3}: client 2 is rerun alone and kept."""
    flaky = FlakyProblem(stiefel_problem, bad={3}, mode="raise")
    with pytest.warns(ClientDroppedWarning, match="client 3 dropped"):
        h = _run(flaky, "rfedproj")
    assert {w["client"] for w in h.warnings} == {3}
    assert h.participants[1:] == [stiefel_problem.n_clients - 1] * 4
    assert blocks_of_two == [2, 2, 2] * 4  # clients 2 and 3 were rerun alone inside theirs
    assert stiefel_problem.manifold.check_point(h.final_point, atol=1e-12) is None


def test_blocks_resume_to_the_uninterrupted_run(tmp_path, stiefel_problem, blocks_of_two):
    algorithm = RFedProj(0.02, 3)
    kw = {"batch_size": 4, "clients_per_round": 5}
    ref = run_sync(stiefel_problem, algorithm, 8, options=RunOptions(seed=3), **kw)
    path = tmp_path / "run.ckpt"
    saving = RunOptions(seed=3, checkpoint=path, checkpoint_every=2)
    run_sync(stiefel_problem, algorithm, 5, options=saving, **kw)
    resumed = run_sync(
        stiefel_problem, algorithm, 8, options=RunOptions(seed=3, checkpoint=path), **kw
    )
    np.testing.assert_array_equal(resumed.final_point, ref.final_point)
    np.testing.assert_array_equal(resumed.loss, ref.loss)


# ------------------------------------------------------------------------------ the assembler
def _outcome(block, rows, served=None, reasons=None):
    served = np.arange(len(block)) if served is None else np.asarray(served)
    uploads = {"x": np.array([[float(block.start + j)] for j in served])}
    return StackOutcome(uploads, rows, served, reasons or {})


def test_unchanged_rows_are_the_given_array_not_a_copy():
    given = {"c": np.arange(6.0)[:, None], "g": np.zeros((6, 1))}
    assembler = BlockAssembler(6, given)
    for block in block_ranges(6, 4):
        inputs = {k: v[block.start : block.stop] for k, v in given.items()}
        new = {"c": inputs["c"], "g": inputs["g"] + 1.0}
        assembler.add(block, inputs, _outcome(block, new))
    out = assembler.result()
    assert out.rows["c"] is given["c"]
    np.testing.assert_array_equal(out.rows["g"], np.ones((6, 1)))
    np.testing.assert_array_equal(out.uploads["x"][:, 0], np.arange(6.0))


def test_a_key_that_changes_in_a_later_block_keeps_the_earlier_rows():
    given = {"c": np.arange(6.0)[:, None]}
    assembler = BlockAssembler(6, given)
    for block in block_ranges(6, 3):
        inputs = {"c": given["c"][block.start : block.stop]}
        new = {"c": inputs["c"] if block.start == 0 else -inputs["c"]}
        assembler.add(block, inputs, _outcome(block, new))
    np.testing.assert_array_equal(assembler.result().rows["c"][:, 0], [0, 1, 2, -3, -4, -5])


def test_failed_positions_are_reported_in_stack_coordinates_and_left_out():
    given = {"c": np.zeros((5, 1))}
    assembler = BlockAssembler(5, given)
    blocks = list(block_ranges(5, 2))
    assert blocks == [range(0, 2), range(2, 4), range(4, 5)]
    for block in blocks:
        inputs = {"c": given["c"][block.start : block.stop]}
        if block.start == 2:  # the second client of this block failed
            outcome = _outcome(block, {"c": inputs["c"][:1] + 1}, served=[0], reasons={1: "bad"})
        else:
            outcome = _outcome(block, {"c": inputs["c"] + 1})
        assembler.add(block, inputs, outcome)
    out = assembler.result()
    assert out.reasons == {3: "bad"}
    np.testing.assert_array_equal(out.served, [0, 1, 2, 4])
    np.testing.assert_array_equal(out.uploads["x"][:, 0], [0, 1, 2, 4])
    assert out.rows["c"].shape == (4, 1)


def test_torch_blocks_assemble_on_the_tensor_s_dtype():
    torch = importorskip("torch")
    given = {"c": torch.zeros(4, 2, dtype=torch.float32)}
    assembler = BlockAssembler(4, given)
    for block in block_ranges(4, 3):
        rows = {"c": given["c"][block.start : block.stop] + 1}
        up = {"x": torch.full((len(block), 2), float(block.start))}
        assembler.add(block, {}, StackOutcome(up, rows, np.arange(len(block))))
    out = assembler.result()
    assert out.uploads["x"].dtype == torch.float32 and torch.equal(out.rows["c"], given["c"] + 1)


# ------------------------------------------------------------------------------ client ranges
def test_a_range_of_clients_is_a_view_of_the_per_client_arrays():
    assert client_index(range(2, 5), 6, "p")[0] == slice(2, 5)
    index, ids = client_index(range(6), 6, "p")
    assert index == slice(0, 6) and ids.tolist() == list(range(6))
    assert isinstance(client_index(np.array([1, 3]), 6, "p")[0], np.ndarray)
    with pytest.raises(ParameterError, match="out of range"):
        client_index(range(4, 8), 6, "p")


# ------------------------------------------------------------------------------ memory
def test_rfedproj_working_memory_is_a_few_stacks_of_uploads(monkeypatch):
    """At 1000 kPCA clients (one stack of points: 2 MB) a run holds the correction, the round's
    gradient sums and the uploads (three stacks) and a block's temporaries; before client blocks
    it held eight stacks."""
    monkeypatch.setattr(tuning, "CLIENT_BLOCK_BYTES", 2**16)
    P = KPCAProblem.synthetic(n_clients=1000, d=32, k=8, p=3, seed=0)
    stack = P.n_clients * P.d * P.k * 8
    algorithm = RFedProj(1.0 / float(P.smoothness), 4)
    run_sync(P, algorithm, 1)  # caches (covariances, the fingerprint) built outside the measure
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        run_sync(P, algorithm, 3)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    assert peak <= 3.5 * stack, f"peak {peak / stack:.2f} stacks of uploads"
