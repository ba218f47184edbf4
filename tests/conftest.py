"""Test-suite set-up: hypothesis profiles (see README, "Testing riemfl") and thread counts."""

import importlib.util

from riemfl.testing import register_profiles

register_profiles()

if importlib.util.find_spec("torch") is not None:
    import torch

    # The suite's matrices are tiny: torch's intra-op thread pool only adds contention on the
    # 2-core CI machines (a 6 x 6 matrix_exp goes from 0.1 ms to ~2 ms with 2 threads).
    torch.set_num_threads(1)
