"""Shared test configuration: hypothesis profiles, and labs built headlessly."""

import os

import pytest
from hypothesis import HealthCheck, settings

# First calls compile numba kernels (or load them from the on-disk cache): no deadlines.
settings.register_profile(
    "default", deadline=None, max_examples=25, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "ci", deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow], derandomize=True
)
settings.load_profile("ci" if os.environ.get("CI") else "default")


@pytest.fixture
def make_lab():
    """``make_lab(cls, values=None)``: a lab built headlessly (its page made, ``values``
    applied as settings), closed after the test with its runners and jobs."""
    labs = []

    def make(cls, values=None):
        lab = cls()
        lab.panel()
        if values:
            lab.apply_settings(values)
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()
