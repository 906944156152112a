"""boltzlab.dashboard.startup: a server's kernels compile in the background; each lab opens when its
groups are loaded (the compiling is stubbed here: tests/engine/test_warmup.py runs it)."""

from __future__ import annotations

import threading

import pytest

from boltzlab.dashboard import startup
from boltzlab.dashboard.labs import LABS
from boltzlab.engine.warmup import GROUPS


@pytest.fixture
def stub(monkeypatch):
    """compile_kernels replaced: each group is "compiled" when the test releases it."""
    release: dict[str, threading.Event] = {g: threading.Event() for g in GROUPS}
    loaded: list[str] = []
    monkeypatch.setattr(startup, "warm_group", loaded.append)

    def compile_kernels(processes=None, niceness=0, on_done=None, stop=None):
        for k, group in enumerate(GROUPS, 1):
            assert release[group].wait(60)
            on_done(group, 0.5, k, len(GROUPS))
        return {}

    monkeypatch.setattr(startup, "compile_kernels", compile_kernels)
    return release, loaded


def test_before_a_start_everything_counts_as_ready():
    assert startup.Startup().ready(None) and all(startup.Startup().ready(cls.kernels) for cls in LABS)


def test_labs_open_as_their_groups_are_loaded_and_hooks_run_first(stub, capsys):
    release, loaded = stub
    s = startup.Startup()
    seen_by_hook = []
    then = threading.Event()
    s.start(when=[(("fvbm", "fvbm_bound"), lambda: seen_by_hook.append(s.ready(["fvbm_bound"])))],
            then=[then.set])
    fvbm, tap = (next(cls for cls in LABS if cls.key == key) for key in ("fvbm", "tap"))
    assert not s.ready(fvbm.kernels) and s.progress() == "compiling kernels 0 of 7"
    release["fvbm"].set()
    release["fvbm_bound"].set()
    from tests.waiting import wait_for

    assert wait_for(lambda: s.ready(fvbm.kernels), timeout=60)
    assert seen_by_hook == [False]  # the data was ready before the lab could open
    assert not s.ready(tap.kernels) and s.progress() == "compiling kernels 2 of 7"
    for event in release.values():
        event.set()
    assert s.finished.wait(60) and then.is_set() and s.error is None
    assert all(s.ready(cls.kernels) for cls in LABS) and loaded == list(GROUPS)
    err = capsys.readouterr().err
    assert "boltzlab serve: compiled kernels 1 of 7 (fvbm" in err and "boltzlab serve: ready" in err


def test_a_failed_start_is_said_and_kept(monkeypatch, capsys):
    def broken(**kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(startup, "compile_kernels", broken)
    s = startup.Startup()
    with pytest.raises(OSError):
        s.run()
    assert s.error == "OSError: disk full" and "preparing failed: OSError: disk full" in s.progress()
    assert "preparing the kernels failed: OSError: disk full" in capsys.readouterr().err
    assert not s.ready(None)


def test_a_start_cut_short_by_the_servers_stop_is_not_said_as_a_failure(monkeypatch, capsys):
    """serve stopped during its start: the worker processes' start or the kernels' loading
    fail as the loop and the cluster close; that is the stop, not news for the operator."""
    s = startup.Startup()
    stopped = threading.Event()

    def stopped_meanwhile(**kwargs):
        s.stop()
        stopped.set()
        raise RuntimeError("the event loop is closed")

    def workers_start():  # ... and fails once the server stops
        assert stopped.wait(60)
        raise RuntimeError("cluster closed")

    monkeypatch.setattr(startup, "compile_kernels", stopped_meanwhile)
    with pytest.raises(RuntimeError):
        s.run(first=[workers_start])
    assert s.error is not None  # kept: a page still waiting says why it cannot open
    assert "failed" not in capsys.readouterr().err


def test_boltzlab_warmup_compiles_every_group_and_says_so(capsys):
    from boltzlab.dashboard.cli import main

    assert main(["warmup", "--processes", "2"]) == 0
    err = capsys.readouterr().err
    assert "boltzlab warmup: compiling 7 kernel groups" in err
    assert all(f"({group}, " in err for group in GROUPS) and "7 of 7 done" in err
    assert "boltzlab warmup: all kernels ready" in err
