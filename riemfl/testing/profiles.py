"""Hypothesis profiles for riemfl's test-suite and for users of the kit.

``default``
    Sized for CI: 8 examples per property, derandomized (the same examples on every run, so CI
    is reproducible), no deadline (CPU timing on shared machines is noisy).
``thorough``
    For releases: 200 examples per property.

Select one with ``pytest --hypothesis-profile=thorough`` (or the environment variable
``RIEMFL_HYPOTHESIS_PROFILE``), after :func:`register_profiles` ran in a ``conftest.py``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

__all__ = ["register_profiles", "PROFILES"]

PROFILES = {
    "default": {"max_examples": 8, "derandomize": True},
    "thorough": {"max_examples": 200, "derandomize": False},
}


def register_profiles(load: bool = True) -> None:
    """Register the riemfl profiles; with ``load``, load ``$RIEMFL_HYPOTHESIS_PROFILE``."""
    for name, options in PROFILES.items():
        settings.register_profile(
            name,
            deadline=None,
            print_blob=True,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.differing_executors],
            **options,
        )
    if load:
        settings.load_profile(os.environ.get("RIEMFL_HYPOTHESIS_PROFILE", "default"))
