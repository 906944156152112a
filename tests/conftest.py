"""Shared test configuration: hypothesis profiles, and labs built headlessly."""

import pytest
from hypothesis import HealthCheck, settings

# One profile, always (issue 27): derandomised, so every run of the suite draws the same
# examples and a property test passes or fails the same way on every machine and every run,
# with or without a CI variable.  First calls compile numba kernels (or load them from the
# on-disk cache): no deadlines.
settings.register_profile(
    "deterministic", deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow],
    derandomize=True,
)
settings.load_profile("deterministic")


@pytest.fixture
def make_lab():
    """``make_lab(cls, values=None, **settings)``: a lab built headlessly from keyword
    ``settings`` (its page made, ``values`` then applied as settings), closed after the test
    with its runners and jobs."""
    labs = []

    def make(cls, values=None, **settings):
        lab = cls(**settings)
        lab.panel()
        if values:
            lab.apply_settings(values)
        labs.append(lab)
        return lab

    yield make
    for lab in labs:
        lab.close()


@pytest.fixture(scope="session", autouse=True)
def warm_kernels():
    """Compile every numba kernel once, here, before the first test: the servers and worker
    processes that tests start then load them from numba's on-disk cache instead of each
    compiling them at once (from a fresh clone on a busy 2-core machine, a server's first
    start took over 240 s and its test failed)."""
    from boltzlab import engine
    from boltzlab.engine.warmup import compile_kernels

    compile_kernels()  # in parallel processes (one per core) into numba's cache
    engine.warm_up()  # then loaded here from it


@pytest.fixture(autouse=True)
def served_budget():
    """Every test's labs under the work budget as a server holds it (``boltzlab serve``
    calls ``set_limits``; a notebook's lab has none: ``budget.in_force``), and the limits
    as they were after it, whatever the test set."""
    from dataclasses import replace

    from boltzlab.dashboard import budget

    before = replace(budget.LIMITS)
    budget.LIMITS.enforced = True
    yield
    budget.LIMITS.step_seconds, budget.LIMITS.isomap_rows = before.step_seconds, before.isomap_rows
    budget.LIMITS.enforced = before.enforced
