"""Shared test configuration: hypothesis profiles and the engine warm-up."""

import os

from hypothesis import HealthCheck, settings

# First calls compile numba kernels (or load them from the on-disk cache): no deadlines.
settings.register_profile(
    "default", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("ci" if os.environ.get("CI") else "default")
