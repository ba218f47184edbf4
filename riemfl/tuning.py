"""Machine-dependent block sizes, in one place, as documented module-level tunables.

A few memory-bound maps process large arrays in blocks small enough to stay in a CPU cache.
The best block depends on the machine (its cache sizes and memory bandwidth), not on the maths:
the defaults below were the fastest on a 2-core x86-64 server (AMD EPYC, 512 KiB L2 per core,
``benchmarks/bench_manifolds.py`` and ``benchmarks/bench_asyncbezier.py``), and are a sound
choice on any CPU with an L2 cache of 512 KiB or more. Results do not depend on them (blocks
change the order of no floating-point sum, only which rows are processed together), except that
BLAS may pick another kernel for another stack size under ``CLIENT_BLOCK_BYTES``, which can move
the last bit.

Change one by assignment, before or between calls::

    import riemfl.tuning
    riemfl.tuning.STIEFEL_BLOCK_BYTES = 2**20

Each module reads the value at call time.
"""

from __future__ import annotations

__all__ = ["STIEFEL_BLOCK_BYTES", "GRAM_BLOCK_ENTRIES", "EVAL_BATCH_ROWS", "CLIENT_BLOCK_BYTES"]

#: Bytes per block of the memory-bound Stiefel maps on numpy stacks (``to_tangent``,
#: ``egrad_to_rgrad``): a stack larger than this is processed in blocks of about this size.
STIEFEL_BLOCK_BYTES: int = 512 * 2**10

#: Entries per block of AsyncBezier's one-pass Gram matrix of differences: the ``k + 2``
#: float64 rows of one block (the control points, the start and the current point) stay in a
#: 2 MiB cache.
GRAM_BLOCK_ENTRIES: int = 1 << 15

#: Rows per forward pass when a torch model is evaluated on a whole dataset (bounds the memory
#: of the activations, not tuned for speed).
EVAL_BATCH_ROWS: int = 4096

#: Bytes of uploads per block when the in-process synchronous engine runs a phase's client rule
#: (:mod:`riemfl.federated.client_blocks`): a stack of clients whose uploads exceed this runs in
#: blocks of consecutive clients, so the rule's temporaries are a block's, not the stack's (at
#: 10^4 kPCA clients of d = 100, k = 5: 65 clients per block, 154 blocks per round; a round is
#: faster than in one stack, as a block's arrays stay in the cache).
CLIENT_BLOCK_BYTES: int = 2**18
