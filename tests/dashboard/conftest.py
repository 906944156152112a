import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# The repository root first (the tests import the helpers in tests/ as tests.*).
# HERE makes the helpers next to these tests (fakes.py) importable.
for path in (HERE, ROOT):
    if path in sys.path:
        sys.path.remove(path)
    sys.path.insert(0, path)

import pytest  # noqa: E402 - after the sys.path fix above


@pytest.fixture
def make_runner():
    """``make_runner(factory, **kwargs)``: a ``Runner``, closed after the test (with every
    other one it made).  Runners on a Dask cluster: a fixture of the test module asks for
    ``monkeypatch`` and then this one, and sets ``boltzlab.dashboard.runner.BACKEND`` (so the runners
    are closed before the backend is restored)."""
    from boltzlab.dashboard.runner import Runner

    made: list[Runner] = []

    def make(factory, **kwargs) -> Runner:
        runner = Runner(factory, **kwargs)
        made.append(runner)
        return runner

    yield make
    for runner in made:
        runner.close()
